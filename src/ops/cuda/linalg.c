// matmul on CUDA through cuBLAS: (...,M,K) @ (...,K,N) -> (...,M,N).
//
// Same operand rules as cpu/matmul.c: each matrix goes to cuBLAS as it lies
// in memory, a row-major matrix as N and a transposed view as T (the op's
// trans_a / trans_b attrs swap the last two dims first); other layouts are
// copied to a contiguous temporary on the device. cuBLAS is column-major, so
// the row-major C = A @ B is computed as C^T = B^T @ A^T: the operands swap
// places and each keeps its own flag.
//
// Batches: a shared right operand with stacked left batches is one tall
// product (x @ W of a linear layer); batch dims that collapse to one stride
// for all three tensors are one strided-batched call; anything else loops
// over the outer batches with a strided-batched call on the innermost one.
//
// f32 computes in f32 (WEFT_CUDA_TF32=1 allows TF32 tensor cores), f64 in f64,
// and bf16 / f16 operands in f32 with the result stored in the operand type.
#include <limits.h>
#include <stdlib.h>

#include "../linalg.h"
#include "blas.h"

typedef struct mat_view {
    cublasOperation_t op;
    int64_t ld;
} mat_view;

// An operand as cuBLAS reads it (the shared rule: ops/linalg.h), copied on
// the device when cuBLAS cannot read its layout.
static weft_tensor *blas_operand(weft_tensor *t, bool tr, mat_view *v) {
    weft_mat_view m;
    weft_tensor *r = weft_matmul_operand(t, tr, &m, weft_cuda_copy);
    v->op = m.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    v->ld = m.ld;
    return r;
}

static weft_status blas_check(cublasStatus_t s, const char *what) { return weft_cu_blas_check(s, "matmul", what); }

typedef struct gemm_types {
    cudaDataType_t data;
    cublasComputeType_t compute;
    bool f64_scalars; // alpha/beta as double
} gemm_types;

static bool types_of(weft_dtype dt, gemm_types *g) {
    const char *tf = getenv("WEFT_CUDA_TF32");
    bool tf32 = tf && *tf == '1';
    switch (dt) {
    case WEFT_F32: *g = (gemm_types){CUDA_R_32F, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, false}; return true;
    case WEFT_F64: *g = (gemm_types){CUDA_R_64F, CUBLAS_COMPUTE_64F, true}; return true;
    case WEFT_BF16: *g = (gemm_types){CUDA_R_16BF, CUBLAS_COMPUTE_32F, false}; return true;
    case WEFT_F16: *g = (gemm_types){CUDA_R_16F, CUBLAS_COMPUTE_32F, false}; return true;
    default: return false;
    }
}

// count products C_i = A_i @ B_i (row-major meaning), element strides between
// consecutive A_i, B_i, C_i given by sa, sb, sc.
static weft_status gemm_batched(cublasHandle_t h, const gemm_types *g, const mat_view *va, const mat_view *vb,
                                int64_t M, int64_t N, int64_t K, const void *A, int64_t sa, const void *B, int64_t sb,
                                void *C, int64_t sc, int64_t count) {
    const float one_f = 1, zero_f = 0;
    const double one_d = 1, zero_d = 0;
    const void *alpha = g->f64_scalars ? (const void *)&one_d : (const void *)&one_f;
    const void *beta = g->f64_scalars ? (const void *)&zero_d : (const void *)&zero_f;
    // column-major C^T (N x M, ld N) = op(B)^T-as-stored (N x K) @ op(A)^T-as-stored (K x M)
    if (count > INT_MAX) // cuBLAS's batch count is an int
        return weft_error(WEFT_ERR_SHAPE, "matmul: %lld products in one batch exceed cuBLAS's int range",
                          (long long)count);
    cublasStatus_t s;
    if (count == 1)
        s = cublasGemmEx(h, vb->op, va->op, (int)N, (int)M, (int)K, alpha, B, g->data, (int)vb->ld, A, g->data,
                         (int)va->ld, beta, C, g->data, (int)N, g->compute, CUBLAS_GEMM_DEFAULT);
    else
        s = cublasGemmStridedBatchedEx(h, vb->op, va->op, (int)N, (int)M, (int)K, alpha, B, g->data, (int)vb->ld, sb,
                                       A, g->data, (int)va->ld, sa, beta, C, g->data, (int)N, sc, (int)count,
                                       g->compute, CUBLAS_GEMM_DEFAULT);
    return blas_check(s, count == 1 ? "cublasGemmEx" : "cublasGemmStridedBatchedEx");
}

static weft_status cu_matmul(const weft_op_args *args) {
    weft_tensor *out = args->out[0];
    int nd = out->ndim, nb = nd - 2;
    int64_t M = out->sizes[nb], N = out->sizes[nb + 1];
    bool ta = args->attrs && args->attrs->i[0], tb = args->attrs && args->attrs->i[1];
    int64_t K = args->in[0]->sizes[args->in[0]->ndim - (ta ? 2 : 1)];
    weft_dtype dt = (weft_dtype)out->dtype;
    gemm_types g;
    if (!types_of(dt, &g)) return weft_error(WEFT_ERR_UNSUPPORTED, "matmul: no CUDA kernel for %s", weft_dtype_name(dt));
    if (out->numel == 0) return WEFT_OK;
    size_t esz = weft_dtype_size(dt);
    if (K == 0)
        return weft_cu_done(cudaMemsetAsync(weft_tensor_ptr(out), 0, (size_t)out->numel * esz, weft_cu_stream(out)),
                            "matmul");
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
        return weft_error(WEFT_ERR_SHAPE, "matmul: matrix dims (%lld,%lld,%lld) exceed cuBLAS's int range",
                          (long long)M, (long long)N, (long long)K);
    cublasHandle_t h;
    weft_status st = weft_cu_blas_handle(out, "matmul", &h);
    if (st) return st;
    mat_view va, vb;
    weft_tensor *a = blas_operand(args->in[0], ta, &va), *b = a ? blas_operand(args->in[1], tb, &vb) : NULL;
    if (!a || !b) {
        weft_tensor_free(a);
        return weft_last_status() ? weft_last_status() : WEFT_ERR_OOM;
    }
    int64_t bsz[WEFT_MAX_DIMS], sa[WEFT_MAX_DIMS], sb[WEFT_MAX_DIMS], sc[WEFT_MAX_DIMS], nbatch = 1;
    for (int d = 0; d < nb; d++) {
        int da = d - (nb - (a->ndim - 2)), db = d - (nb - (b->ndim - 2));
        bsz[d] = out->sizes[d];
        sa[d] = (da >= 0 && a->sizes[da] != 1) ? a->strides[da] : 0;
        sb[d] = (db >= 0 && b->sizes[db] != 1) ? b->strides[db] : 0;
        sc[d] = out->strides[d];
        nbatch *= bsz[d];
    }
    const char *pa = weft_tensor_ptr(a), *pb = weft_tensor_ptr(b);
    char *pc = weft_tensor_ptr(out);

    bool b_shared = true, a_stacked = va.op == CUBLAS_OP_N;
    int64_t expect = M * va.ld;
    for (int d = nb - 1; d >= 0; d--) {
        if (sb[d] != 0) b_shared = false;
        if (bsz[d] != 1 && sa[d] != expect) a_stacked = false;
        expect *= bsz[d];
    }
    if (nbatch == 1 || (b_shared && a_stacked && nbatch * M <= INT_MAX)) {
        st = gemm_batched(h, &g, &va, &vb, nbatch * M, N, K, pa, 0, pb, 0, pc, 0, 1);
    } else {
        // Drop size-1 batch dims, then merge neighbours whose strides chain for a, b and out alike.
        int64_t z[WEFT_MAX_DIMS], za[WEFT_MAX_DIMS], zb[WEFT_MAX_DIMS], zc[WEFT_MAX_DIMS];
        int n = 0;
        for (int d = 0; d < nb; d++) {
            if (bsz[d] == 1) continue;
            if (n > 0 && za[n - 1] == sa[d] * bsz[d] && zb[n - 1] == sb[d] * bsz[d] && zc[n - 1] == sc[d] * bsz[d]) {
                z[n - 1] *= bsz[d];
                za[n - 1] = sa[d];
                zb[n - 1] = sb[d];
                zc[n - 1] = sc[d];
                continue;
            }
            z[n] = bsz[d];
            za[n] = sa[d];
            zb[n] = sb[d];
            zc[n] = sc[d];
            n++;
        }
        // innermost merged dim in one call; the outer ones walked here
        int64_t inner = z[n - 1], outer = nbatch / inner;
        for (int64_t o = 0; o < outer && st == WEFT_OK; o++) {
            int64_t rem = o, oa = 0, ob = 0, oc = 0;
            for (int d = n - 2; d >= 0; d--) {
                int64_t i = rem % z[d];
                rem /= z[d];
                oa += i * za[d];
                ob += i * zb[d];
                oc += i * zc[d];
            }
            st = gemm_batched(h, &g, &va, &vb, M, N, K, pa + oa * (int64_t)esz, za[n - 1], pb + ob * (int64_t)esz,
                              zb[n - 1], pc + oc * (int64_t)esz, zc[n - 1], inner);
        }
    }
    weft_tensor_free(a);
    weft_tensor_free(b);
    return st;
}

void weft_cuda_register_linalg(void) {
    weft_cu_register("matmul", cu_matmul, WEFT_DT_FLOAT | WEFT_DT(WEFT_BF16) | WEFT_DT(WEFT_F16));
}
