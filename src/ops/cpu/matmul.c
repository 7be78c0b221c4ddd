// CPU matmul: (...,M,K) @ (...,K,N) -> (...,M,N) through the shared CPU GEMM (gemm.h).
//
// Each operand's matrix dims are handed to BLAS as they lie in memory: a
// row-major matrix (strides (ld,1)) goes as NoTrans, a transposed view
// (strides (1,ld)) as Trans, so weft_transpose(w,0,1) costs no copy. Any other
// layout (e.g. a slice with a step along the last dim) is first copied to a
// contiguous temporary. Batch dims are walked with strides (0 where an operand
// is broadcast); a shared right operand is folded into one tall product.
// The op's trans_a / trans_b attrs (i[0], i[1]) swap an operand's last two
// sizes and strides before this: a flagged contiguous matrix is exactly a
// transposed view, and goes to BLAS as Trans the same way.
#include <cblas.h>
#include <limits.h>
#include <string.h>

#include "../elementwise.h"
#include "../linalg.h"
#include "gemm.h"
#include "iter.h"
#include "vmath.h"

typedef struct mat_view {
    CBLAS_TRANSPOSE tr;
    int64_t ld;
} mat_view;

// An operand as BLAS reads it (the shared rule: ops/linalg.h), copied to a
// contiguous temporary by weft_cpu_copy when BLAS cannot read its layout.
static weft_tensor *blas_operand(weft_tensor *t, bool tr, mat_view *v) {
    weft_mat_view m;
    weft_tensor *r = weft_matmul_operand(t, tr, &m, weft_cpu_copy);
    v->tr = m.trans ? CblasTrans : CblasNoTrans;
    v->ld = m.ld;
    return r;
}

static void gemm(weft_dtype dt, const mat_view *va, const mat_view *vb, int64_t M, int64_t N, int64_t K,
                 const char *pa, const char *pb, char *pc) {
    if (dt == WEFT_BF16) {
        weft_cpu_gemm_bf16(va->tr == CblasTrans, vb->tr == CblasTrans, M, N, K, (const uint16_t *)pa, va->ld,
                           (const uint16_t *)pb, vb->ld, WEFT_BF16, pc, N > 1 ? N : 1);
        return;
    }
    weft_cpu_gemm(dt, va->tr == CblasTrans, vb->tr == CblasTrans, M, N, K, 1.0, pa, va->ld, pb, vb->ld, 0.0, pc,
                  N > 1 ? N : 1);
}

// Product i of a batch: batch index i -> element offsets of a and b (strides sa, sb; 0 = broadcast).
static void batch_gemm(weft_dtype dt, const mat_view *va, const mat_view *vb, int64_t M, int64_t N, int64_t K,
                       int64_t i, int nb, const int64_t *bsz, const int64_t *sa, const int64_t *sb, const char *pa,
                       const char *pb, char *pc) {
    int64_t oa = 0, ob = 0, r = i, esz = (int64_t)weft_dtype_size(dt);
    for (int d = nb - 1; d >= 0; d--) {
        int64_t k = r % bsz[d];
        r /= bsz[d];
        oa += k * sa[d];
        ob += k * sb[d];
    }
    gemm(dt, va, vb, M, N, K, pa + oa * esz, pb + ob * esz, pc + i * M * N * esz);
}

weft_status weft_cpu_matmul(const weft_op_args *args);

// f16, and bf16 where oneDNN cannot run it: no half GEMM in OpenBLAS's
// portable API, so the operands are widened to f32 (exact), multiplied by
// sgemm and the result rounded once. bf16 with oneDNN takes the normal path
// below, one bf16 matmul primitive per product (gemm.h).
static weft_status half_matmul(const weft_op_args *args) {
    weft_tensor *out = args->out[0];
    weft_tensor *a = weft_tensor_new(args->in[0]->ndim, args->in[0]->sizes, WEFT_F32, WEFT_DEVICE_CPU);
    weft_tensor *b = weft_tensor_new(args->in[1]->ndim, args->in[1]->sizes, WEFT_F32, WEFT_DEVICE_CPU);
    weft_tensor *c = weft_tensor_new(out->ndim, out->sizes, WEFT_F32, WEFT_DEVICE_CPU);
    weft_status st = a && b && c ? WEFT_OK : WEFT_ERR_OOM;
    if (st == WEFT_OK) st = weft_cpu_copy(a, args->in[0]);
    if (st == WEFT_OK) st = weft_cpu_copy(b, args->in[1]);
    if (st == WEFT_OK) {
        weft_tensor *in[2] = {a, b};
        weft_op_args f = *args;
        f.in = in;
        f.out = &c;
        st = weft_cpu_matmul(&f);
    }
    if (st == WEFT_OK) st = weft_cpu_copy(out, c);
    weft_tensor_free(a);
    weft_tensor_free(b);
    weft_tensor_free(c);
    return st == WEFT_ERR_OOM ? weft_error(WEFT_ERR_OOM, "matmul: out of memory widening half operands") : st;
}

weft_status weft_cpu_matmul(const weft_op_args *args) {
    weft_tensor *out = args->out[0];
    if (out->dtype == WEFT_F16 || (out->dtype == WEFT_BF16 && !weft_cpu_gemm_have_bf16())) return half_matmul(args);
    int nd = out->ndim, nb = nd - 2;
    int64_t M = out->sizes[nb], N = out->sizes[nb + 1];
    bool ta = args->attrs && args->attrs->i[0], tb = args->attrs && args->attrs->i[1];
    int64_t K = args->in[0]->sizes[args->in[0]->ndim - (ta ? 2 : 1)];
    weft_dtype dt = (weft_dtype)out->dtype;
    size_t esz = weft_dtype_size(dt);
    if (out->numel == 0) return WEFT_OK;
    if (K == 0) { // empty sum: zeros (BLAS would want ld >= 1 of an empty matrix)
        memset(weft_tensor_ptr(out), 0, (size_t)out->numel * esz);
        return WEFT_OK;
    }
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
        return weft_error(WEFT_ERR_SHAPE, "matmul: matrix dims (%lld,%lld,%lld) exceed BLAS's int range", (long long)M,
                          (long long)N, (long long)K);
    mat_view va, vb;
    weft_tensor *a = blas_operand(args->in[0], ta, &va), *b = a ? blas_operand(args->in[1], tb, &vb) : NULL;
    if (!a || !b) {
        weft_tensor_free(a);
        return weft_last_status() ? weft_last_status() : WEFT_ERR_OOM;
    }
    // Batch strides (elements) of a and b, aligned to out's batch dims; 0 = broadcast.
    int64_t bsz[WEFT_MAX_DIMS], sa[WEFT_MAX_DIMS], sb[WEFT_MAX_DIMS], nbatch = 1;
    for (int d = 0; d < nb; d++) {
        int da = d - (nb - (a->ndim - 2)), db = d - (nb - (b->ndim - 2));
        bsz[d] = out->sizes[d];
        sa[d] = (da >= 0 && a->sizes[da] != 1) ? a->strides[da] : 0;
        sb[d] = (db >= 0 && b->sizes[db] != 1) ? b->strides[db] : 0;
        nbatch *= bsz[d];
    }
    const char *pa = weft_tensor_ptr(a), *pb = weft_tensor_ptr(b);
    char *pc = weft_tensor_ptr(out);

    // b shared by every batch and a's batches stacked row-major like out's:
    // one (nbatch*M, K) @ (K, N) product (the common x @ W of a linear layer).
    bool b_shared = true, a_stacked = va.tr == CblasNoTrans;
    int64_t expect = M * va.ld;
    for (int d = nb - 1; d >= 0; d--) {
        if (sb[d] != 0) b_shared = false;
        if (bsz[d] != 1 && sa[d] != expect) a_stacked = false;
        expect *= bsz[d];
    }
    if (nbatch > 1 && b_shared && a_stacked && nbatch * M <= INT_MAX) {
        gemm(dt, &va, &vb, nbatch * M, N, K, pa, pb, pc);
    } else {
        // Many small products (attention's per-head scores): one thread per
        // product, each single-threaded; big ones thread inside instead.
        // (No `if` clause: an inactive region would make gemm's own region a
        // nested one, with a fresh thread team per call.)
        int nt = weft_num_threads();
        if (nt > 1 && nbatch > 1 && (double)M * (double)N * (double)K <= (1 << 24)) {
#pragma omp parallel for num_threads(nt) schedule(static)
            for (int64_t i = 0; i < nbatch; i++) batch_gemm(dt, &va, &vb, M, N, K, i, nb, bsz, sa, sb, pa, pb, pc);
        } else {
            for (int64_t i = 0; i < nbatch; i++) batch_gemm(dt, &va, &vb, M, N, K, i, nb, bsz, sa, sb, pa, pb, pc);
        }
    }
    weft_tensor_free(a);
    weft_tensor_free(b);
    return WEFT_OK;
}

// ---- linear / linear_gelu (def_linalg.c) ----
// The product through weft_cpu_matmul (W as BLAS's transposed operand, no
// copy), then one epilogue pass per row while it is in cache: h += b, and
// for linear_gelu y = gelu(h) with the family's own GELU loop (exact or tanh, attr i[0]). bf16 / f16 run
// this on widened f32 copies, each output rounded once.
WEFT_CLONES static void bias_rows_f32(float *restrict h, const float *restrict b, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) h[r * n + j] += b[j];
}
static void bias_rows_f64(double *restrict h, const double *restrict b, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) h[r * n + j] += b[j];
}

#define LINEAR_EPI_ROWS 16 // rows per epilogue task (at least 16 x N elements)

weft_status weft_cpu_linear(const weft_op_args *args) {
    weft_tensor *y = args->out[0], *h = args->out[args->n_out - 1];
    if (weft_dtype_is_half(y->dtype)) return weft_kernel_widened(args, weft_cpu_linear); // f32 math, rounded once
    weft_attrs tb = {.i = {0, 1}}; // h = x @ W^T: W (N,K) goes to BLAS as Trans
    weft_op_args m = {.op = args->op, .n_in = 2, .in = args->in, .attrs = &tb, .n_out = 1, .out = &h};
    weft_status st = weft_cpu_matmul(&m);
    if (st || h->numel == 0) return st;
    const weft_tensor *b = args->n_in == 3 ? args->in[2] : NULL;
    weft_tensor *bc = b ? weft_kernel_contiguous(b) : NULL;
    if (b && !bc) return weft_last_status();
    weft_dtype dt = (weft_dtype)h->dtype;
    int64_t n = h->sizes[h->ndim - 1], rows = h->numel / n, es = (int64_t)weft_dtype_size(dt);
    weft_ew_loop_fn act = y != h ? weft_cpu_ew_loop(args->attrs->i[0] ? WEFT_EW_GELU_TANH : WEFT_EW_GELU, dt) : NULL;
    char *ph = weft_tensor_ptr(h), *py = weft_tensor_ptr(y);
    const char *pb = bc ? weft_tensor_ptr(bc) : NULL;
    int64_t tasks = (rows + LINEAR_EPI_ROWS - 1) / LINEAR_EPI_ROWS;
    bool par = weft_num_threads() > 1 && h->numel >= (1 << 15);
    const double zero = 0;
#pragma omp parallel for num_threads(weft_num_threads()) schedule(static) if (par)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t r0 = t * LINEAR_EPI_ROWS, nr = rows - r0 < LINEAR_EPI_ROWS ? rows - r0 : LINEAR_EPI_ROWS;
        char *hr = ph + r0 * n * es;
        if (pb && dt == WEFT_F32) bias_rows_f32((float *)hr, (const float *)pb, nr, n);
        else if (pb) bias_rows_f64((double *)hr, (const double *)pb, nr, n);
        if (act) {
            char *p[2] = {py + r0 * n * es, hr};
            int64_t s[2] = {es, es};
            act(p, s, nr * n, &zero);
        }
    }
    weft_tensor_free(bc);
    return WEFT_OK;
}

// ---- matmul_dgelu (def_linalg.c): (p @ W) ∘ gelu'(h) ----
// The product into a temporary, then gelu_backward's loop (threads and all) from it into out (the loops'
// operands are restrict: never in place). bf16 / f16 on widened f32 copies: the product and the derivative
// in f32, the result rounded once.
extern weft_op_def weft_op_gelu_backward, weft_op_gelu_tanh_backward;
weft_status weft_cpu_matmul_dgelu(const weft_op_args *a) {
    weft_tensor *out = a->out[0];
    if (weft_dtype_is_half(out->dtype)) return weft_kernel_widened(a, weft_cpu_matmul_dgelu);
    if (out->numel == 0) return WEFT_OK;
    static const weft_attrs plain = {0}; // no transposes (the op's attr i[0] is its GELU's form)
    weft_tensor *mm = weft_tensor_new(out->ndim, out->sizes, (weft_dtype)out->dtype, out->device);
    if (!mm) return weft_error(WEFT_ERR_OOM, "matmul_dgelu: out of memory");
    weft_op_args m = {.op = a->op, .n_in = 2, .in = a->in, .attrs = &plain, .n_out = 1, .out = &mm};
    weft_status st = weft_cpu_matmul(&m);
    weft_tensor *in[2] = {mm, a->in[2]};
    weft_op_args e = {.op = a->attrs->i[0] ? &weft_op_gelu_tanh_backward : &weft_op_gelu_backward,
                      .n_in = 2, .in = in, .attrs = &plain, .n_out = 1, .out = a->out};
    if (!st) st = weft_cpu_elementwise(&e);
    weft_tensor_free(mm);
    return st;
}
