// CPU kernels of fused causal attention (def_attention.c has the maths).
//
// Each (b,h) is a (T,D) problem on q, k, v rows read where they lie (unit
// stride in D, rows ld apart: the heads of a (B,T,C) tensor; other layouts
// are copied first, rows_get). Query rows go in
// blocks of BR: block [i0, i1) only ever meets keys 0..i1-1, so one gemm
// gives its scores S (BR, i1) and one more its output P V; the masked half
// above the diagonal is never computed except inside the diagonal block,
// where the entries j > i are dropped (p = 0). Softmax rows are max-subtracted.
//
// Forward: tasks are (b,h, row block), independent, dynamic schedule (later
// blocks cost more). Backward: tasks are (b,h) (dk and dv sum over row
// blocks), per block:
//   P = exp(S - lse) (0 for j > i)    dV[0:i1] += P^T dO
//   dP = dO V[0:i1]^T                dS = P (dP - Dl), Dl_i = dO_i . O_i
//   dQ = scale dS K[0:i1]            dK[0:i1] += scale dS^T Q
// Each BLAS call runs single-threaded inside the OpenMP region.
// bf16 / f16 (autocast's attention): q, k, v, o, go widened to f32, the f32
// kernel, results rounded once (lse stays f32: weft_kernel_widened).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../attention.h"
#include "gemm.h"
#include "iter.h"
#include "vmath.h"

#define BR 32 // query rows per block

static inline double exp_f64(double x) { return exp(x); }


// Row-major C (M,N) = alpha op(A) op(B) + beta C (K == 0 leaves beta C).
static void gemm_float(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                       const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    weft_cpu_gemm(WEFT_F32, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
static void gemm_double(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double *A,
                        int64_t lda, const double *B, int64_t ldb, double beta, double *C, int64_t ldc) {
    weft_cpu_gemm(WEFT_F64, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

#define ATTN_KERNELS(T, EXP, LOG)                                                                                   \
    /* Rows [i0, i1) of one (b,h): q, k, v (T_,D) at row strides lq, lk, lv; o (T_,D) at row stride lo, lse    */ \
    /* (T_); s scratch (BR, i1). */                                                                                 \
    static WEFT_CLONES void fwd_block_##T(const T *q, int64_t lq, const T *k, int64_t lk, const T *v, int64_t lv,   \
                                          T *o, int64_t lo, T *lse, int64_t i0, int64_t i1, int64_t D, T scale,     \
                                          T *s) {                                                                   \
        int64_t m = i1 - i0, n = i1;                                                                                \
        gemm_##T(false, true, m, n, D, scale, q + i0 * lq, lq, k, lk, 0, s, n); /* S = scale Q K^T (m,n) */         \
        for (int64_t r = 0; r < m; r++) {                                                                           \
            int64_t i = i0 + r;                                                                                     \
            T *sr = s + r * n, mx = -INFINITY, sum = 0;                                                             \
            for (int64_t j = 0; j <= i; j++) mx = sr[j] > mx ? sr[j] : mx;                                          \
            _Pragma("omp simd reduction(+ : sum)") for (int64_t j = 0; j <= i; j++) {                               \
                T e = EXP(sr[j] - mx);                                                                              \
                sr[j] = e;                                                                                          \
                sum += e;                                                                                           \
            }                                                                                                       \
            lse[i] = mx + LOG(sum);                                                                                 \
            T inv = (T)1 / sum;                                                                                     \
            for (int64_t j = 0; j <= i; j++) sr[j] *= inv;                                                          \
            for (int64_t j = i + 1; j < n; j++) sr[j] = 0; /* the masked corner of the diagonal block */            \
        }                                                                                                           \
        gemm_##T(false, false, m, D, n, 1, s, n, v, lv, 0, o + i0 * lo, lo); /* O = P V (m,D) */                   \
    }                                                                                                               \
    /* One (b,h): q, k, v, o, go (T_,D) at row strides ld[0..4]; gq, gk, gv (T_,D) at row stride ld[5], lse   */ \
    /* (T_); scratch p, dp (BR, T_), dl (T_). */                                                                    \
    static WEFT_CLONES void bwd_head_##T(const T *q, const T *k, const T *v, const T *o, const T *lse, const T *go, \
                                         const int64_t *ld, T *gq, T *gk, T *gv, int64_t T_, int64_t D, T scale,    \
                                         T *p, T *dp, T *dl) {                                                      \
        const int64_t lq = ld[0], lk = ld[1], lv = ld[2], lo = ld[3], lg = ld[4], lw = ld[5];                       \
        for (int64_t i = 0; i < T_; i++) {                                                                          \
            memset(gk + i * lw, 0, sizeof(T) * (size_t)D);                                                          \
            memset(gv + i * lw, 0, sizeof(T) * (size_t)D);                                                          \
        }                                                                                                           \
        for (int64_t i = 0; i < T_; i++) {                                                                          \
            T acc = 0;                                                                                              \
            for (int64_t d = 0; d < D; d++) acc += go[i * lg + d] * o[i * lo + d];                                  \
            dl[i] = acc;                                                                                            \
        }                                                                                                           \
        for (int64_t i0 = 0; i0 < T_; i0 += BR) {                                                                   \
            int64_t i1 = i0 + BR < T_ ? i0 + BR : T_, m = i1 - i0, n = i1;                                          \
            gemm_##T(false, true, m, n, D, scale, q + i0 * lq, lq, k, lk, 0, p, n); /* S (m,n) */                   \
            for (int64_t r = 0; r < m; r++) {                                                                       \
                int64_t i = i0 + r;                                                                                 \
                T *pr = p + r * n, l = lse[i];                                                                      \
                _Pragma("omp simd") for (int64_t j = 0; j <= i; j++) pr[j] = EXP(pr[j] - l);                        \
                for (int64_t j = i + 1; j < n; j++) pr[j] = 0;                                                      \
            }                                                                                                       \
            gemm_##T(true, false, n, D, m, 1, p, n, go + i0 * lg, lg, 1, gv, lw);     /* dV += P^T dO */            \
            gemm_##T(false, true, m, n, D, 1, go + i0 * lg, lg, v, lv, 0, dp, n);     /* dP = dO V^T */             \
            for (int64_t r = 0; r < m; r++) {                                                                       \
                T *pr = p + r * n, *dr = dp + r * n, l = dl[i0 + r];                                                \
                _Pragma("omp simd") for (int64_t j = 0; j < n; j++) dr[j] = pr[j] * (dr[j] - l); /* dS */           \
            }                                                                                                       \
            gemm_##T(false, false, m, D, n, scale, dp, n, k, lk, 0, gq + i0 * lw, lw); /* dQ = scale dS K */        \
            gemm_##T(true, false, n, D, m, scale, dp, n, q + i0 * lq, lq, 1, gk, lw);  /* dK += scale dS^T Q */     \
        }                                                                                                           \
    }
ATTN_KERNELS(float, weft_vexp_f32, logf)
ATTN_KERNELS(double, exp_f64, log)

// An operand of the kernels, (B,H,T,D) with unit stride in D and rows at
// least D apart: read where it lies (the heads of a (B,T,C) tensor are rows
// C apart), so no copy. Any other layout is copied to a contiguous one.
typedef struct rows_opnd {
    weft_tensor *copy; // NULL: the input itself
    const char *p;     // element (0,0,0,0)
    int64_t sb, sh, ld; // element strides of b, h and a row
} rows_opnd;

// The kernels read (and write) t where it lies: unit stride in D, rows at least D apart.
static bool rows_direct(const weft_tensor *t) {
    const int64_t *sz = t->sizes, *st = t->strides;
    return (st[3] == 1 || sz[3] <= 1) && (st[2] >= sz[3] || sz[2] <= 1) && st[0] >= 0 && st[1] >= 0;
}

// r for u (t itself or its copy): its first element, head and row strides.
static void rows_set(rows_opnd *r, const weft_tensor *u) {
    const int64_t *sz = u->sizes;
    r->p = weft_tensor_ptr(u);
    r->sb = u->strides[0], r->sh = u->strides[1];
    r->ld = sz[2] <= 1 || u->strides[2] < 1 ? (sz[3] > 1 ? sz[3] : 1) : u->strides[2];
}

static bool rows_get(const weft_tensor *t, rows_opnd *r) {
    bool direct = rows_direct(t);
    r->copy = direct ? NULL : weft_kernel_contiguous(t);
    if (!direct && !r->copy) return false;
    rows_set(r, direct ? t : r->copy);
    return true;
}

// An operand given in (B,T,H,D) order (o and its gradient with the heads last) as the kernels read it: a
// (B,H,T,D) view of the same memory, then rows_get.
static bool rows_get_as(const weft_tensor *t, bool heads_last, rows_opnd *r) {
    if (!heads_last) return rows_get(t, r);
    weft_tensor *v = weft_kernel_transposed(t, 1, 2);
    if (!v || !rows_get(v, r)) {
        weft_tensor_free(v);
        return false;
    }
    if (r->copy) weft_tensor_free(v); // the copy has memory of its own
    else r->copy = v;                 // the view keeps the memory r->p points into
    return true;
}

// An output written where it lies: (B,H,T,D), or (B,T,H,D) with heads_last, unit stride in D, rows and heads
// at least D apart (what the dispatcher allocates, and the packed op's views of its blocks). r->copy holds the
// (B,H,T,D) view to free; false with an error naming op for any other layout.
static bool rows_out(const weft_tensor *t, bool heads_last, rows_opnd *r, const char *op) {
    weft_tensor *v = heads_last ? weft_kernel_transposed(t, 1, 2) : weft_tensor_ref((weft_tensor *)t);
    if (!v) return false;
    // the tasks write heads in parallel: distinct heads and batches must not share a row (a stride-0 view)
    const int64_t *sz = v->sizes, *st = v->strides;
    if (!rows_direct(v) || (sz[1] > 1 && st[1] < sz[3]) || (sz[0] > 1 && st[0] < sz[3])) {
        weft_tensor_free(v);
        weft_error(WEFT_ERR_UNSUPPORTED, "%s: an output must have unit stride in D and heads apart", op);
        return false;
    }
    r->copy = v;
    rows_set(r, v);
    return true;
}

// Element offset of head bh = b*H + h of r, in bytes.
static size_t rows_at(const rows_opnd *r, int64_t bh, int64_t H, size_t esz) {
    return (size_t)((bh / H) * r->sb + (bh % H) * r->sh) * esz;
}

// causal_attention: in (q, k, v) (B,H,T,D) -> o (B,H,T,D) (i[0]: (B,T,H,D)), lse (B,H,T); attrs f[0] = scale.
weft_status weft_cpu_causal_attention(const weft_op_args *a) {
    if (weft_dtype_is_half(a->in[0]->dtype))
        return weft_kernel_widened(a, weft_cpu_causal_attention);
    rows_opnd r[4] = {{0}}; // q, k, v, then o (B,H,T,D), or (B,T,H,D) with i[0] (the heads last)
    bool ok = true;
    for (int i = 0; i < 3 && ok; i++) ok = rows_get(a->in[i], &r[i]);
    if (ok) ok = rows_out(a->out[0], a->attrs->i[0] != 0, &r[3], a->op->name);
    if (!ok) {
        for (int j = 0; j < 4; j++) weft_tensor_free(r[j].copy);
        return weft_last_status();
    }
    const weft_tensor *q = a->in[0];
    int64_t H = q->sizes[1], BH = q->sizes[0] * H, T_ = q->sizes[2], D = q->sizes[3];
    int64_t nblk = (T_ + BR - 1) / BR, ntask = BH * nblk;
    bool f32 = q->dtype == WEFT_F32;
    size_t esz = weft_dtype_size((weft_dtype)q->dtype);
    char *po = (char *)r[3].p, *pl = weft_tensor_ptr(a->out[1]);
    double scale = a->attrs->f[0];
    const int64_t lo = r[3].ld;
    int nt = weft_num_threads();
    if (nt > ntask) nt = ntask > 0 ? (int)ntask : 1;
    bool oom = false;
#pragma omp parallel num_threads(nt)
    {
        void *s = malloc(esz * (size_t)(BR * T_) + 1); // scores of one block (BR, T)
        if (!s) {
#pragma omp atomic write
            oom = true;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < ntask; t++) {
            if (!s) continue;
            int64_t bh = t / nblk, i0 = (t % nblk) * BR, i1 = i0 + BR < T_ ? i0 + BR : T_;
            const char *hq = r[0].p + rows_at(&r[0], bh, H, esz), *hk = r[1].p + rows_at(&r[1], bh, H, esz),
                       *hv = r[2].p + rows_at(&r[2], bh, H, esz);
            size_t hoff = rows_at(&r[3], bh, H, esz), loff = (size_t)(bh * T_) * esz;
            if (f32)
                fwd_block_float((const float *)hq, r[0].ld, (const float *)hk, r[1].ld, (const float *)hv, r[2].ld,
                                (float *)(po + hoff), lo, (float *)(pl + loff), i0, i1, D, (float)scale, s);
            else
                fwd_block_double((const double *)hq, r[0].ld, (const double *)hk, r[1].ld, (const double *)hv,
                                 r[2].ld, (double *)(po + hoff), lo, (double *)(pl + loff), i0, i1, D, scale, s);
        }
        free(s);
    }
    for (int i = 0; i < 4; i++) weft_tensor_free(r[i].copy);
    return oom ? weft_error(WEFT_ERR_OOM, "causal_attention: out of memory for the score blocks") : WEFT_OK;
}

// causal_attention_backward: in (q, k, v, o, lse, go) -> gq, gk, gv (B,H,T,D) (i[1]: (B,T,H,D)); attrs f[0] =
// scale.
weft_status weft_cpu_causal_attention_backward(const weft_op_args *a) {
    if (weft_dtype_is_half(a->in[0]->dtype))
        return weft_kernel_widened(a, weft_cpu_causal_attention_backward);
    // q, k, v, o, go where they lie (rows_opnd); lse contiguous
    static const int which[5] = {0, 1, 2, 3, 5};
    // then gq, gk, gv (B,H,T,D), or (B,T,H,D) with i[1] (the heads last), at one row stride
    rows_opnd r[8] = {{0}};
    weft_tensor *lse = NULL;
    bool ok = true;
    for (int i = 0; i < 5 && ok; i++) ok = rows_get_as(a->in[which[i]], i >= 3 && a->attrs->i[0], &r[i]);
    for (int j = 0; j < 3 && ok; j++) ok = rows_out(a->out[j], a->attrs->i[1] != 0, &r[5 + j], a->op->name);
    if (ok && (r[6].ld != r[5].ld || r[7].ld != r[5].ld))
        ok = !weft_error(WEFT_ERR_UNSUPPORTED, "%s: the gradients' rows must lie equally far apart", a->op->name);
    if (ok) ok = (lse = weft_kernel_contiguous(a->in[4])) != NULL;
    if (!ok) {
        for (int i = 0; i < 8; i++) weft_tensor_free(r[i].copy);
        return weft_last_status();
    }
    const weft_tensor *q = a->in[0];
    int64_t H = q->sizes[1], BH = q->sizes[0] * H, T_ = q->sizes[2], D = q->sizes[3];
    bool f32 = q->dtype == WEFT_F32;
    size_t esz = weft_dtype_size((weft_dtype)q->dtype);
    const char *pl = weft_tensor_ptr(lse);
    int64_t ld[6];
    for (int i = 0; i < 6; i++) ld[i] = r[i].ld;
    double scale = a->attrs->f[0];
    int nt = weft_num_threads();
    if (nt > BH) nt = BH > 0 ? (int)BH : 1;
    bool oom = false;
#pragma omp parallel num_threads(nt)
    {
        // p and dp (BR, T) each, then dl (T)
        char *s = malloc(esz * (size_t)(2 * BR * T_ + T_) + 1);
        if (!s) {
#pragma omp atomic write
            oom = true;
        }
        char *sp = s, *sdp = s ? s + esz * (size_t)(BR * T_) : NULL, *sdl = s ? sdp + esz * (size_t)(BR * T_) : NULL;
#pragma omp for schedule(dynamic, 1)
        for (int64_t bh = 0; bh < BH; bh++) {
            if (!s) continue;
            const char *p[8];
            for (int i = 0; i < 8; i++) p[i] = r[i].p + rows_at(&r[i], bh, H, esz);
            char *g0 = (char *)p[5], *g1 = (char *)p[6], *g2 = (char *)p[7];
            size_t l = (size_t)(bh * T_) * esz;
            if (f32)
                bwd_head_float((const float *)p[0], (const float *)p[1], (const float *)p[2], (const float *)p[3],
                               (const float *)(pl + l), (const float *)p[4], ld, (float *)g0, (float *)g1,
                               (float *)g2, T_, D, (float)scale, (float *)sp,
                               (float *)sdp, (float *)sdl);
            else
                bwd_head_double((const double *)p[0], (const double *)p[1], (const double *)p[2],
                                (const double *)p[3], (const double *)(pl + l), (const double *)p[4], ld,
                                (double *)g0, (double *)g1, (double *)g2, T_, D, scale,
                                (double *)sp, (double *)sdp, (double *)sdl);
        }
        free(s);
    }
    for (int i = 0; i < 8; i++) weft_tensor_free(r[i].copy);
    weft_tensor_free(lse);
    return oom ? weft_error(WEFT_ERR_OOM, "causal_attention_backward: out of memory for the score blocks") : WEFT_OK;
}

// causal_attention_qkv (and its backward): the kernels above on views of the packed (B,T,3C) operands.
weft_status weft_cpu_causal_attention_qkv(const weft_op_args *a) {
    return weft_attention_qkv_run(a, weft_cpu_causal_attention);
}
weft_status weft_cpu_causal_attention_qkv_backward(const weft_op_args *a) {
    return weft_attention_qkv_backward_run(a, weft_cpu_causal_attention_backward);
}
