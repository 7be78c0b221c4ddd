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
#include <stdint.h>
#include <string.h>

#include "../linalg.h"
#include "blas.h"
#include "elementwise_kernels.h"
#include "linear_kernels.h"

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

// ---- linear / linear_gelu (def_linalg.c): y = act(x W^T + b) ----
// f32, bf16 and f16 with a bias go to cuBLASLt with the bias in the epilogue
// (one kernel for product and bias, f32 sums, h rounded once); the plans
// (descriptors, layouts and the heuristic's algorithm) are cached per shape
// for the calling thread. Everything else, and WEFT_CUDA_LT=0, is cu_matmul
// followed by linear_kernels.cu's bias pass. linear_gelu's tanh form (attr
// i[0] = 1) is cuBLASLt's own GELU: its GELU_AUX_BIAS epilogue writes y =
// gelu(h) and h (the aux matrix) from the f32 sum, as the CPU does, in the
// product's kernel (WEFT_CUDA_LT_GELU=0: the bias epilogue and the
// elementwise GELU after it). The exact (erf) form, which cuBLASLt lacks, runs
// after the bias epilogue as the elementwise gelu (vector loads), or in the
// bias pass's kernel from h into y. (With the bias pass, bf16 / f16 h is
// rounded twice, after the product and after the bias. After cuBLASLt's bias
// epilogue the GELU reads h as stored, rounded to bf16 / f16, where the CPU
// takes it from the f32 sum: the two differ within that rounding.)

typedef struct lt_key {
    int dtype, opa, opb, dev;
    int64_t m, n, k, lda, ldb;
    int align[4]; // byte alignment of A, B, C/D and the epilogue's aux matrix: the heuristic may only pick kernels that accept it
    int compute;  // the compute type: WEFT_CUDA_TF32 may change between calls (no padding: memcmp'd)
    int epi;      // LT_BIAS, LT_GELU_AUX_BIAS or LT_DGELU
} lt_key;
_Static_assert(sizeof(lt_key) == 10 * sizeof(int) + 5 * sizeof(int64_t), "lt_key has no padding (keys are memcmp'd)");
// The epilogues weft uses: D = sum + bias; D = gelu(sum + bias) with aux = sum + bias (linear_gelu's tanh form);
// D = sum ∘ gelu'(aux) (matmul_dgelu's tanh form). cuBLASLt's GELU is the tanh approximation.
enum { LT_BIAS, LT_GELU_AUX_BIAS, LT_DGELU };
static _Atomic int64_t g_lt_runs[3]; // calls run, by epilogue

int64_t weft_cu_lt_gelu_runs(int epi) { return epi == LT_GELU_AUX_BIAS || epi == LT_DGELU ? g_lt_runs[epi] : 0; }

// The largest power of two up to 256 dividing p's address.
static int align_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int r = 1;
    while (r < 256 && !(a & (uintptr_t)r)) r <<= 1;
    return r;
}
typedef struct lt_plan {
    lt_key key;
    bool used, ok; // ok false: no algorithm for this shape (the fallback runs)
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    size_t ws;
} lt_plan;
#define LT_PLANS 32
#define LT_WORKSPACE ((size_t)8 << 20)
static _Thread_local lt_plan tl_plans[LT_PLANS];
static _Thread_local int tl_plan_next;

static void lt_plan_release(lt_plan *p) {
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->c) cublasLtMatrixLayoutDestroy(p->c);
    memset(p, 0, sizeof *p);
}

// A matrix that op turns into rows x cols, as stored (column-major, leading dimension ld).
static bool layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, cublasOperation_t op, int64_t rows, int64_t cols,
                   int64_t ld) {
    bool n = op == CUBLAS_OP_N;
    return cublasLtMatrixLayoutCreate(l, t, (uint64_t)(n ? rows : cols), (uint64_t)(n ? cols : rows), ld) == 0;
}

static bool set_align(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t at, int bytes) {
    uint32_t v = (uint32_t)bytes;
    return cublasLtMatmulPreferenceSetAttribute(pref, at, &v, sizeof v) == 0;
}

// Column-major, as cuBLASLt sees it: D (m x n, ld m) = epi(op(A) (m x k) op(B) (k x n)), A the row-major
// product's right operand and B its left one (the row-major C = X Y is C^T = Y^T X^T). The aux matrix (ld m)
// is at aux, whose address the heuristic reads for its alignment.
static lt_plan *lt_plan_get(cublasLtHandle_t lt, const lt_key *k, const gemm_types *g, void *aux) {
    for (int i = 0; i < LT_PLANS; i++)
        if (tl_plans[i].used && !memcmp(&tl_plans[i].key, k, sizeof *k)) return &tl_plans[i];
    lt_plan *p = &tl_plans[tl_plan_next];
    tl_plan_next = (tl_plan_next + 1) % LT_PLANS;
    lt_plan_release(p);
    p->key = *k;
    p->used = true;
    cublasOperation_t ta = (cublasOperation_t)k->opa, tb = (cublasOperation_t)k->opb;
    cublasLtEpilogue_t epi = k->epi == LT_GELU_AUX_BIAS ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                             : k->epi == LT_DGELU      ? CUBLASLT_EPILOGUE_DGELU
                                                       : CUBLASLT_EPILOGUE_BIAS;
    bool has_bias = k->epi != LT_DGELU, has_aux = k->epi != LT_BIAS;
    int64_t aux_ld = k->m;
    int32_t bias_t = (int32_t)g->data; // the bias in the matrices' dtype
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    size_t ws = LT_WORKSPACE;
    bool ok = cublasLtMatmulDescCreate(&p->op, g->compute, g->f64_scalars ? CUDA_R_64F : CUDA_R_32F) == 0 &&
              cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == 0 &&
              cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == 0 &&
              cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) == 0 &&
              (!has_bias ||
               cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t, sizeof bias_t) == 0) &&
              (!has_aux ||
               (cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux) == 0 &&
                cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld) == 0)) &&
              layout(&p->a, g->data, ta, k->m, k->k, k->lda) && layout(&p->b, g->data, tb, k->k, k->n, k->ldb) &&
              cublasLtMatrixLayoutCreate(&p->c, g->data, k->m, k->n, k->m) == 0 &&
              cublasLtMatmulPreferenceCreate(&pref) == 0 &&
              cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) == 0 &&
              set_align(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, k->align[0]) &&
              set_align(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, k->align[1]) &&
              set_align(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, k->align[2]) &&
              set_align(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, k->align[2]) &&
              cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->a, p->b, p->c, p->c, pref, 1, &res, &found) == 0 && found > 0;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    p->ok = ok;
    if (ok) {
        p->algo = res.algo;
        p->ws = res.workspaceSize;
    }
    return p;
}

// One cuBLASLt call by the plan for key: D = epi(A B [+ bias]) with its aux matrix. 1 when cuBLASLt has no
// algorithm for it (the caller falls back; nothing was written), else 0 with *st.
static int lt_call(const weft_tensor *on, const char *name, const gemm_types *g, const lt_key *key, const void *A,
                   const void *B, void *D, const void *bias, void *aux, weft_status *st) {
    cublasLtHandle_t lt;
    if ((*st = weft_cu_lt_handle(on, name, &lt))) return 0;
    lt_plan *p = lt_plan_get(lt, key, g, aux);
    if (!p->ok) return 1;
    weft_tensor *ws = NULL;
    if (p->ws && !(ws = weft_tensor_new(1, (int64_t[]){(int64_t)p->ws}, WEFT_U8, on->device))) {
        *st = weft_last_status();
        return 0;
    }
    const float one = 1, zero = 0; // scale type f32 for f32, bf16 and f16
    if (bias)
        *st = weft_cu_blas_check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                                sizeof bias),
                                 name, "cublasLtMatmulDescSetAttribute");
    if (!*st && aux)
        *st = weft_cu_blas_check(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                                sizeof aux),
                                 name, "cublasLtMatmulDescSetAttribute");
    if (!*st)
        *st = weft_cu_blas_check(cublasLtMatmul(lt, p->op, &one, A, p->a, B, p->b, &zero, D, p->c, D, p->c, &p->algo,
                                                ws ? weft_tensor_ptr(ws) : NULL, p->ws, weft_cu_stream(on)),
                                 name, "cublasLtMatmul");
    if (!*st) g_lt_runs[key->epi]++;
    weft_tensor_free(ws);
    return 0;
}

// x's rows stacked as a (rows, K) row-major matrix: its row stride in *ld, false when they do not stack.
static bool rows_stack(const weft_tensor *x, int64_t rows, int64_t K, int64_t *ld) {
    int64_t rs[2] = {K, 1};
    bool stacked = weft_view_strides(x->ndim, x->sizes, x->strides, 2, (const int64_t[]){rows, K}, rs) &&
                   (K == 1 || rs[1] == 1);
    *ld = rows == 1 ? K : rs[0]; // a single row takes any stride
    return stacked && *ld >= K && rows <= INT_MAX && K <= INT_MAX && *ld <= INT_MAX;
}

static bool lt_off(const char *var) {
    const char *e = getenv(var);
    return e && *e == '0';
}

// h = x W^T + b through one cuBLASLt call, and with y (linear_gelu's tanh form) also y = gelu(h) in its
// epilogue; 1 when this path does not apply (the caller falls back). *gelu_done says whether y was written.
static int lt_linear(const weft_op_args *args, weft_tensor *h, weft_tensor *y, weft_status *st, bool *gelu_done) {
    const weft_tensor *x = args->in[0], *w = args->in[1], *bias = args->n_in == 3 ? args->in[2] : NULL;
    *gelu_done = false;
    if (lt_off("WEFT_CUDA_LT") || !bias || h->dtype == WEFT_F64 || bias->strides[0] != 1) return 1;
    int64_t K = x->sizes[x->ndim - 1], N = w->sizes[0], M = h->numel / N, ldx;
    if (K == 0) return 1; // an empty sum: cu_matmul's zeros, then the bias
    if (!rows_stack(x, M, K, &ldx) || N > INT_MAX || align_of(weft_tensor_ptr(bias)) < 16) return 1;
    gemm_types g;
    if (!types_of((weft_dtype)h->dtype, &g)) return 1;
    // cuBLASLt's GELU is the tanh form; its aux matrix's leading dimension (N) must be a multiple of 8
    bool gelu = y && y != h && args->attrs->i[0] == 1 && N % 8 == 0 && !lt_off("WEFT_CUDA_LT_GELU");
    weft_tensor *d = gelu ? y : h; // the epilogue's output D
    mat_view vw;
    weft_tensor *wo = blas_operand((weft_tensor *)w, true, &vw); // W^T (K, N) as BLAS reads it
    if (!wo) {
        *st = weft_last_status();
        return 0;
    }
    lt_key key = {.dtype = h->dtype, .opa = (int)vw.op, .opb = (int)CUBLAS_OP_N, .dev = h->device.index,
                  .m = N, .n = M, .k = K, .lda = vw.ld, .ldb = ldx,
                  .align = {align_of(weft_tensor_ptr(wo)), align_of(weft_tensor_ptr(x)), align_of(weft_tensor_ptr(d)),
                            gelu ? align_of(weft_tensor_ptr(h)) : 0},
                  .compute = (int)g.compute, .epi = gelu ? LT_GELU_AUX_BIAS : LT_BIAS};
    // cuBLAS's column-major C^T = B^T A^T: A is W^T's operand with its flag; B is x^T, i.e. x as stored (N).
    int r = lt_call(h, args->op->name, &g, &key, weft_tensor_ptr(wo), weft_tensor_ptr(x), weft_tensor_ptr(d),
                    weft_tensor_ptr(bias), gelu ? weft_tensor_ptr(h) : NULL, st);
    *gelu_done = gelu && !r && !*st;
    weft_tensor_free(wo);
    return r;
}

static weft_status cu_linear(const weft_op_args *args) {
    weft_tensor *y = args->out[0], *h = args->out[args->n_out - 1];
    if (h->numel == 0) return WEFT_OK;
    weft_status st = WEFT_OK;
    cudaStream_t s = weft_cu_stream(h);
    int cdt = weft_cu_desc(h).dtype;
    int64_t n = h->sizes[h->ndim - 1], rows = h->numel / n;
    weft_tensor *b = NULL; // the bias, when the fallback adds it
    bool tanh_form = y != h && args->attrs->i[0] == 1, gelu_done = false;
    if (lt_linear(args, h, y, &st, &gelu_done)) {
        weft_attrs tb = {.i = {0, 1}}; // h = x @ W^T: W (N,K) goes to cuBLAS transposed
        weft_op_args m = {.op = args->op, .n_in = 2, .in = args->in, .attrs = &tb, .n_out = 1, .out = &h};
        st = cu_matmul(&m);
        if (st == WEFT_OK && args->n_in == 3 && !(b = weft_kernel_contiguous(args->in[2]))) st = weft_last_status();
    }
    if (st == WEFT_OK && !b && y != h && !gelu_done) // (h has its bias, from cuBLASLt's epilogue, or none) y =
        // gelu(h): the elementwise family's kernel, whose contiguous loop moves vectors (the same formula, f32 math
        // for bf16 / f16, rounded once)
        st = weft_cu_done(weft_cu_ew_unary(tanh_form ? WEFT_CU_EW_GELU_TANH : WEFT_CU_EW_GELU, weft_cu_desc(y),
                                           weft_cu_desc(h), 0, s),
                          args->op->name);
    else if (st == WEFT_OK && (b || (y != h && !gelu_done)))
        st = weft_cu_done(weft_cu_bias_act(cdt, weft_tensor_ptr(h), y != h ? weft_tensor_ptr(y) : NULL,
                                           b ? weft_tensor_ptr(b) : NULL, rows, n, tanh_form, s),
                          args->op->name);
    weft_tensor_free(b);
    return st;
}

// gelu_linear (def_linalg.c): linear's kernel on (a, w, b), one output (no activation).
static weft_status cu_gelu_linear(const weft_op_args *args) {
    weft_op_args l = *args;
    l.n_in = args->n_in - 1;
    l.in = args->in + 1;
    return cu_linear(&l);
}

// matmul_dgelu (def_linalg.c): out = (p @ W) ∘ gelu'(h). The tanh form, with p's rows stacking, h contiguous and
// K a multiple of 8 (the aux matrix's ld), is one cuBLASLt call with the DGELU epilogue (WEFT_CUDA_LT=0 or
// WEFT_CUDA_LT_GELU=0 turn it off); otherwise the product into out, then gelu_backward's kernel in place
// (each element read, then written, by one thread).
static weft_status cu_matmul_dgelu(const weft_op_args *args) {
    weft_tensor *out = args->out[0], *p = args->in[0], *w = args->in[1], *h = args->in[2];
    if (out->numel == 0) return WEFT_OK;
    bool tanh_form = args->attrs->i[0] == 1;
    int64_t N = w->sizes[0], K = w->sizes[1], R = out->numel / K, ldp;
    weft_status st = WEFT_OK;
    gemm_types g;
    if (tanh_form && !lt_off("WEFT_CUDA_LT") && !lt_off("WEFT_CUDA_LT_GELU") && out->dtype != WEFT_F64 && N > 0 &&
        K % 8 == 0 && K <= INT_MAX && rows_stack(p, R, N, &ldp) && weft_tensor_is_contiguous(h) &&
        types_of((weft_dtype)out->dtype, &g)) {
        mat_view vw;
        weft_tensor *wo = blas_operand(w, false, &vw); // W (N, K), the row-major product's right operand
        if (!wo) return weft_last_status();
        lt_key key = {.dtype = out->dtype, .opa = (int)vw.op, .opb = (int)CUBLAS_OP_N, .dev = out->device.index,
                      .m = K, .n = R, .k = N, .lda = vw.ld, .ldb = ldp,
                      .align = {align_of(weft_tensor_ptr(wo)), align_of(weft_tensor_ptr(p)),
                                align_of(weft_tensor_ptr(out)), align_of(weft_tensor_ptr(h))},
                      .compute = (int)g.compute, .epi = LT_DGELU};
        int r = lt_call(out, args->op->name, &g, &key, weft_tensor_ptr(wo), weft_tensor_ptr(p), weft_tensor_ptr(out),
                        NULL, weft_tensor_ptr(h), &st);
        weft_tensor_free(wo);
        if (!r) return st;
    }
    weft_attrs plain = {0}; // no transposes (the op's attr i[0] is its GELU's form)
    weft_op_args m = {.op = args->op, .n_in = 2, .in = args->in, .attrs = &plain, .n_out = 1, .out = &out};
    if ((st = cu_matmul(&m))) return st;
    weft_cu_tensor d[3] = {weft_cu_desc(out), weft_cu_desc(out), weft_cu_desc(h)};
    weft_cu_coalesce(3, d);
    return weft_cu_done(weft_cu_ew_binary(tanh_form ? WEFT_CU_EW_GELU_TANH_BW : WEFT_CU_EW_GELU_BW, d[0], d[1], d[2],
                                          weft_cu_stream(out)),
                        args->op->name);
}

void weft_cuda_register_linalg(void) {
    weft_cu_register("matmul", cu_matmul, WEFT_DT_FLOAT | WEFT_DT(WEFT_BF16) | WEFT_DT(WEFT_F16));
    weft_cu_register("linear", cu_linear, WEFT_DT_FLOAT | WEFT_DT_HALF);
    weft_cu_register("linear_gelu", cu_linear, WEFT_DT_FLOAT | WEFT_DT_HALF);
    weft_cu_register("gelu_linear", cu_gelu_linear, WEFT_DT_FLOAT | WEFT_DT_HALF);
    weft_cu_register("matmul_dgelu", cu_matmul_dgelu, WEFT_DT_FLOAT | WEFT_DT_HALF);
}
