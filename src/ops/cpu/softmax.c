// CPU kernels of softmax, log_softmax, their fused backward ops and the fused
// cross-entropy loss.
//
// A tensor is seen as (outer, D, inner) around the softmax dim. inner == 1 (the
// last dim, the common case) runs row kernels: one pass for the max, one for
// exp + sum (writing exp), one to scale; a 4 KiB row stays in L1 between the
// passes, so memory is read once. Rows are split across threads. Other dims
// run a strided version over blocks of `inner` columns.
//
// f32 uses weft_vexp_f32 (vmath.h) (a polynomial the compiler vectorises, ~1 ulp) and
// the row kernels are compiled for AVX-512, AVX2 and baseline x86-64, picked
// at load time; f64 uses libm's exp.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "iter.h"

#include "vmath.h"

static inline double exp_f64(double x) { return exp(x); }


// (outer, D, inner) around dim.
static void split3(const weft_tensor *t, int dim, int64_t *outer, int64_t *D, int64_t *inner) {
    *outer = *inner = 1;
    *D = t->ndim ? t->sizes[dim] : 1;
    for (int d = 0; d < dim; d++) *outer *= t->sizes[d];
    for (int d = dim + 1; d < t->ndim; d++) *inner *= t->sizes[d];
}

// ---- row kernels (inner == 1): rows [r0, r1) of (rows, D) ----
#define ROW_KERNELS(T, EXP, LOG)                                                                          \
    WEFT_CLONES static void softmax_rows_##T(const T *x, T *y, int64_t r0, int64_t r1, int64_t D, bool lg) { \
        for (int64_t r = r0; r < r1; r++) {                                                               \
            const T *xr = x + r * D; /* (D) */                                                            \
            T *yr = y + r * D;                                                                            \
            T m = -INFINITY, s = 0;                                                                       \
            _Pragma("omp simd reduction(max : m)") for (int64_t i = 0; i < D; i++) m = xr[i] > m ? xr[i] : m; \
            if (lg) {                                                                                     \
                _Pragma("omp simd reduction(+ : s)") for (int64_t i = 0; i < D; i++) s += EXP(xr[i] - m); \
                T ls = LOG(s); /* (x - m) first: exact for x near m, unlike x - (m + log s) */         \
                _Pragma("omp simd") for (int64_t i = 0; i < D; i++) yr[i] = (xr[i] - m) - ls;             \
            } else {                                                                                      \
                _Pragma("omp simd reduction(+ : s)") for (int64_t i = 0; i < D; i++) {                    \
                    T e = EXP(xr[i] - m);                                                                 \
                    yr[i] = e;                                                                            \
                    s += e;                                                                               \
                }                                                                                         \
                T inv = (T)1 / s;                                                                         \
                _Pragma("omp simd") for (int64_t i = 0; i < D; i++) yr[i] *= inv;                         \
            }                                                                                             \
        }                                                                                                 \
    }                                                                                                     \
    /* softmax: dx = y (g - sum(g y)); log_softmax: dx = g - exp(y) sum(g) */                             \
    WEFT_CLONES static void softmax_bw_rows_##T(const T *g, const T *y, T *dx, int64_t r0, int64_t r1,     \
                                                int64_t D, bool lg) {                                     \
        for (int64_t r = r0; r < r1; r++) {                                                               \
            const T *gr = g + r * D, *yr = y + r * D;                                                     \
            T *dr = dx + r * D, s = 0;                                                                    \
            if (lg) {                                                                                     \
                _Pragma("omp simd reduction(+ : s)") for (int64_t i = 0; i < D; i++) s += gr[i];          \
                _Pragma("omp simd") for (int64_t i = 0; i < D; i++) dr[i] = gr[i] - EXP(yr[i]) * s;       \
            } else {                                                                                      \
                _Pragma("omp simd reduction(+ : s)") for (int64_t i = 0; i < D; i++) s += gr[i] * yr[i];  \
                _Pragma("omp simd") for (int64_t i = 0; i < D; i++) dr[i] = yr[i] * (gr[i] - s);          \
            }                                                                                             \
        }                                                                                                 \
    }
ROW_KERNELS(float, weft_vexp_f32, logf)
ROW_KERNELS(double, exp_f64, log)

// ---- strided kernels (inner > 1): one (D, inner) block, columns [j0, j1) ----
#define COLS 64
#define COL_KERNELS(T, EXP, LOG)                                                                        \
    static void softmax_cols_##T(const T *x, T *y, int64_t D, int64_t inner, int64_t j0, int64_t j1, bool lg) { \
        T m[COLS], s[COLS];                                                                             \
        int64_t w = j1 - j0;                                                                            \
        for (int64_t j = 0; j < w; j++) m[j] = -INFINITY, s[j] = 0;                                     \
        for (int64_t d = 0; d < D; d++) {                                                               \
            const T *xr = x + d * inner + j0;                                                           \
            for (int64_t j = 0; j < w; j++) m[j] = xr[j] > m[j] ? xr[j] : m[j];                         \
        }                                                                                               \
        for (int64_t d = 0; d < D; d++) {                                                               \
            const T *xr = x + d * inner + j0;                                                           \
            T *yr = y + d * inner + j0;                                                                 \
            for (int64_t j = 0; j < w; j++) {                                                           \
                T e = EXP(xr[j] - m[j]);                                                                \
                s[j] += e;                                                                              \
                if (!lg) yr[j] = e;                                                                     \
            }                                                                                           \
        }                                                                                               \
        for (int64_t j = 0; j < w; j++) s[j] = lg ? LOG(s[j]) : (T)1 / s[j];                            \
        for (int64_t d = 0; d < D; d++) {                                                               \
            const T *xr = x + d * inner + j0;                                                           \
            T *yr = y + d * inner + j0;                                                                 \
            if (lg)                                                                                     \
                for (int64_t j = 0; j < w; j++) yr[j] = (xr[j] - m[j]) - s[j];                          \
            else                                                                                        \
                for (int64_t j = 0; j < w; j++) yr[j] *= s[j];                                          \
        }                                                                                               \
    }                                                                                                   \
    static void softmax_bw_cols_##T(const T *g, const T *y, T *dx, int64_t D, int64_t inner, int64_t j0,  \
                                    int64_t j1, bool lg) {                                              \
        T s[COLS];                                                                                      \
        int64_t w = j1 - j0;                                                                            \
        for (int64_t j = 0; j < w; j++) s[j] = 0;                                                       \
        for (int64_t d = 0; d < D; d++) {                                                               \
            const T *gr = g + d * inner + j0, *yr = y + d * inner + j0;                                 \
            for (int64_t j = 0; j < w; j++) s[j] += lg ? gr[j] : gr[j] * yr[j];                         \
        }                                                                                               \
        for (int64_t d = 0; d < D; d++) {                                                               \
            const T *gr = g + d * inner + j0, *yr = y + d * inner + j0;                                 \
            T *dr = dx + d * inner + j0;                                                                \
            for (int64_t j = 0; j < w; j++) dr[j] = lg ? gr[j] - EXP(yr[j]) * s[j] : yr[j] * (gr[j] - s[j]); \
        }                                                                                               \
    }
COL_KERNELS(float, weft_vexp_f32, logf)
COL_KERNELS(double, exp_f64, log)

// Run a row or column kernel over (outer, D, inner), threads over rows / blocks.
// p0, p1 are the inputs (x; or g, y), q the output.
static void run_softmax(weft_dtype dt, bool bw, bool lg, const char *p0, const char *p1, char *q, int64_t outer,
                        int64_t D, int64_t inner) {
    int nt = weft_num_threads();
    bool par = nt > 1 && outer * D * inner >= WEFT_PAR_GRAIN;
    if (inner == 1) {
        // chunks of rows: a few per thread keeps the split even without per-row overhead
        int64_t nchunk = par ? (outer < 16 * nt ? outer : 16 * nt) : 1;
#pragma omp parallel for num_threads(nt) if (par) schedule(dynamic, 1)
        for (int64_t c = 0; c < nchunk; c++) {
            int64_t r0 = outer * c / nchunk, r1 = outer * (c + 1) / nchunk;
            if (dt == WEFT_F32) {
                if (bw) softmax_bw_rows_float((const float *)p0, (const float *)p1, (float *)q, r0, r1, D, lg);
                else softmax_rows_float((const float *)p0, (float *)q, r0, r1, D, lg);
            } else {
                if (bw) softmax_bw_rows_double((const double *)p0, (const double *)p1, (double *)q, r0, r1, D, lg);
                else softmax_rows_double((const double *)p0, (double *)q, r0, r1, D, lg);
            }
        }
        return;
    }
    int64_t nblk = (inner + COLS - 1) / COLS, ntask = outer * nblk;
#pragma omp parallel for num_threads(nt) if (par) schedule(static)
    for (int64_t t = 0; t < ntask; t++) {
        int64_t o = t / nblk, j0 = (t % nblk) * COLS, j1 = j0 + COLS < inner ? j0 + COLS : inner;
        int64_t base = o * D * inner; // (outer, D, inner): start of block o
        if (dt == WEFT_F32) {
            const float *a = (const float *)p0 + base, *b = p1 ? (const float *)p1 + base : NULL;
            float *y = (float *)q + base;
            if (bw) softmax_bw_cols_float(a, b, y, D, inner, j0, j1, lg);
            else softmax_cols_float(a, y, D, inner, j0, j1, lg);
        } else {
            const double *a = (const double *)p0 + base, *b = p1 ? (const double *)p1 + base : NULL;
            double *y = (double *)q + base;
            if (bw) softmax_bw_cols_double(a, b, y, D, inner, j0, j1, lg);
            else softmax_cols_double(a, y, D, inner, j0, j1, lg);
        }
    }
}

// softmax / log_softmax (variant 0 / 1): in x, attrs i[0] = dim.
weft_status weft_cpu_softmax(const weft_op_args *a) {
    if (weft_dtype_is_half(a->in[0]->dtype)) return weft_kernel_widened(a, weft_cpu_softmax); // y is f32
    weft_tensor *x = weft_kernel_contiguous(a->in[0]), *y = a->out[0];
    if (!x) return weft_last_status();
    int64_t outer, D, inner;
    split3(x, (int)a->attrs->i[0], &outer, &D, &inner);
    run_softmax((weft_dtype)x->dtype, false, a->op->variant == 1, weft_tensor_ptr(x), NULL, weft_tensor_ptr(y), outer,
                D, inner);
    weft_tensor_free(x);
    return WEFT_OK;
}

// softmax_backward / log_softmax_backward (variant 0 / 1): in (g, y), attrs i[0] = dim.
weft_status weft_cpu_softmax_backward(const weft_op_args *a) {
    if (weft_dtype_is_half(a->out[0]->dtype)) return weft_kernel_widened(a, weft_cpu_softmax_backward); // dx rounded
    weft_tensor *g = weft_kernel_contiguous(a->in[0]), *y = g ? weft_kernel_contiguous(a->in[1]) : NULL, *dx = a->out[0];
    if (!g || !y) {
        weft_tensor_free(g);
        return weft_last_status();
    }
    int64_t outer, D, inner;
    split3(dx, (int)a->attrs->i[0], &outer, &D, &inner);
    run_softmax((weft_dtype)dx->dtype, true, a->op->variant == 1, weft_tensor_ptr(g), weft_tensor_ptr(y),
                weft_tensor_ptr(dx), outer, D, inner);
    weft_tensor_free(g);
    weft_tensor_free(y);
    return WEFT_OK;
}

// ---- cross-entropy: logits (N,C), targets (N) int -> mean_r (logsumexp(x_r) - x_r[t_r]) ----
static int64_t target_at(const weft_tensor *t, int64_t r) {
    const char *p = weft_tensor_ptr(t);
    int64_t off = r * (t->ndim ? t->strides[0] : 0);
    return t->dtype == WEFT_I32 ? (int64_t)((const int32_t *)p)[off] : ((const int64_t *)p)[off];
}
static weft_status check_targets(const char *op, const weft_tensor *t, int64_t N, int64_t C) {
    for (int64_t r = 0; r < N; r++) {
        int64_t k = target_at(t, r);
        if (k < 0 || k >= C)
            return weft_error(WEFT_ERR_ARG, "%s: target %lld of row %lld is out of range [0, %lld)", op, (long long)k,
                              (long long)r, (long long)C);
    }
    return WEFT_OK;
}

#define CE_KERNELS(T, EXP, LOG)                                                                          \
    WEFT_CLONES static double ce_rows_##T(const T *x, const weft_tensor *tg, int64_t r0, int64_t r1, int64_t C) { \
        double total = 0;                                                                                \
        for (int64_t r = r0; r < r1; r++) {                                                              \
            const T *xr = x + r * C; /* (C) */                                                           \
            T m = -INFINITY, s = 0;                                                                      \
            _Pragma("omp simd reduction(max : m)") for (int64_t i = 0; i < C; i++) m = xr[i] > m ? xr[i] : m; \
            _Pragma("omp simd reduction(+ : s)") for (int64_t i = 0; i < C; i++) s += EXP(xr[i] - m);    \
            total += (double)m + (double)LOG(s) - (double)xr[target_at(tg, r)];                          \
        }                                                                                                \
        return total;                                                                                    \
    }                                                                                                    \
    /* dx = (softmax(x) - onehot(t)) * scale, scale = g / N */                                           \
    WEFT_CLONES static void ce_bw_rows_##T(const T *x, const weft_tensor *tg, T *dx, int64_t r0, int64_t r1, \
                                           int64_t C, T scale) {                                         \
        for (int64_t r = r0; r < r1; r++) {                                                              \
            const T *xr = x + r * C;                                                                     \
            T *dr = dx + r * C, m = -INFINITY, s = 0;                                                    \
            _Pragma("omp simd reduction(max : m)") for (int64_t i = 0; i < C; i++) m = xr[i] > m ? xr[i] : m; \
            _Pragma("omp simd reduction(+ : s)") for (int64_t i = 0; i < C; i++) {                       \
                T e = EXP(xr[i] - m);                                                                    \
                dr[i] = e;                                                                               \
                s += e;                                                                                  \
            }                                                                                            \
            T k = scale / s;                                                                             \
            _Pragma("omp simd") for (int64_t i = 0; i < C; i++) dr[i] *= k;                              \
            dr[target_at(tg, r)] -= scale;                                                               \
        }                                                                                                \
    }
CE_KERNELS(float, weft_vexp_f32, logf)
CE_KERNELS(double, exp_f64, log)

// Shared start of both cross-entropy kernels: validate targets, a contiguous
// copy of the logits if needed, and the split of the N rows into chunks.
typedef struct ce_plan {
    weft_tensor *x; // (N,C) contiguous
    int64_t N, C, nchunk;
    int nt;
    bool par;
} ce_plan;
static weft_status ce_prepare(const weft_op_args *a, ce_plan *p) {
    p->N = a->in[0]->sizes[0];
    p->C = a->in[0]->sizes[1];
    weft_status st = check_targets(a->op->name, a->in[1], p->N, p->C);
    if (st) return st;
    if (!(p->x = weft_kernel_contiguous(a->in[0]))) return weft_last_status();
    p->nt = weft_num_threads();
    p->par = p->nt > 1 && p->N * p->C >= WEFT_PAR_GRAIN;
    p->nchunk = p->par ? (p->N < 4 * p->nt ? p->N : 4 * p->nt) : 1;
    return WEFT_OK;
}

// bf16 / f16 logits: the f32 kernels on a widened copy, the gradient rounded once into the logits' dtype.
weft_status weft_cpu_cross_entropy(const weft_op_args *a) {
    if (weft_dtype_is_half(a->in[0]->dtype)) return weft_kernel_widened(a, weft_cpu_cross_entropy);
    ce_plan p;
    weft_status st = ce_prepare(a, &p);
    if (st) return st;
    const weft_tensor *tg = a->in[1];
    int64_t N = p.N, C = p.C, nchunk = p.nchunk;
    double total = 0;
    weft_dtype dt = (weft_dtype)p.x->dtype;
    const char *px = weft_tensor_ptr(p.x);
#pragma omp parallel for num_threads(p.nt) if (p.par) schedule(static) reduction(+ : total)
    for (int64_t c = 0; c < nchunk; c++) {
        int64_t r0 = N * c / nchunk, r1 = N * (c + 1) / nchunk;
        total += dt == WEFT_F32 ? ce_rows_float((const float *)px, tg, r0, r1, C)
                                : ce_rows_double((const double *)px, tg, r0, r1, C);
    }
    weft_store_f64(weft_tensor_ptr(a->out[0]), dt, 0, N ? total / (double)N : NAN);
    weft_tensor_free(p.x);
    return WEFT_OK;
}

// cross_entropy_backward: in (logits, targets, g 0-d) -> dlogits (N,C).
weft_status weft_cpu_cross_entropy_backward(const weft_op_args *a) {
    if (weft_dtype_is_half(a->in[0]->dtype)) return weft_kernel_widened(a, weft_cpu_cross_entropy_backward);
    ce_plan p;
    weft_status st = ce_prepare(a, &p);
    if (st) return st;
    const weft_tensor *tg = a->in[1];
    int64_t N = p.N, C = p.C, nchunk = p.nchunk;
    weft_dtype dt = (weft_dtype)p.x->dtype;
    double scale = N ? weft_load_f64(weft_tensor_ptr(a->in[2]), dt, 0) / (double)N : 0;
    const char *px = weft_tensor_ptr(p.x);
    char *pd = weft_tensor_ptr(a->out[0]);
#pragma omp parallel for num_threads(p.nt) if (p.par) schedule(static)
    for (int64_t c = 0; c < nchunk; c++) {
        int64_t r0 = N * c / nchunk, r1 = N * (c + 1) / nchunk;
        if (dt == WEFT_F32) ce_bw_rows_float((const float *)px, tg, (float *)pd, r0, r1, C, (float)scale);
        else ce_bw_rows_double((const double *)px, tg, (double *)pd, r0, r1, C, scale);
    }
    weft_tensor_free(p.x);
    return WEFT_OK;
}
