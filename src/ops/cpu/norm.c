// CPU kernels of the normalisation family (layer_norm, batch_norm and their
// fused backward ops). The op entries (def_norm.c) hand every kernel
// contiguous tensors, so the kernels work on raw row-major pointers.
//
// Attrs (see def_norm.c):
//   layer_norm           i[0] = n_norm_dims, i[1] = has weight, i[2] = has bias; f[0] = eps
//   layer_norm_backward  i[0] = n_norm_dims, i[1] = has weight, i[2] = want dweight/dbias; and
//                        add_layer_norm_backward (the same kernel) also i[3] = has gs (added to dx), i[4]: dx
//                        also in a half dtype (output 3)
//   batch_norm           i[0] = has weight, i[1] = has bias, i[2] = has running_mean, i[3] = has running_var,
//                        i[4] = training; f[0] = momentum, f[1] = eps
//   batch_norm_backward  i[0] = has weight, i[1] = training, i[2] = want dweight/dbias
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "../op.h"
#include "iter.h"

weft_status weft_cpu_layer_norm(const weft_op_args *a);
weft_status weft_cpu_layer_norm_backward(const weft_op_args *a);
weft_status weft_cpu_batch_norm(const weft_op_args *a);
weft_status weft_cpu_batch_norm_backward(const weft_op_args *a);

// Row length of layer_norm: the product of the last n_norm_dims sizes.
static int64_t ln_row(const weft_tensor *x, int64_t n) {
    int64_t C = 1;
    for (int d = x->ndim - (int)n; d < x->ndim; d++) C *= x->sizes[d];
    return C;
}

static int thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}
static int team_size(void) {
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

// ---------------------------------------------------------------- layer_norm
// Each row is handled by a small row function, compiled twice: for the build's
// baseline ISA and for AVX2+FMA (picked at run time when the CPU has them, as
// PyTorch does), because the build flags stay portable (-O3, no -march).
// weft_cpu_norm_set_simd(false) forces the baseline versions (tests run both).
static int g_simd_allowed = 1;
void weft_cpu_norm_set_simd(bool on);
void weft_cpu_norm_set_simd(bool on) { g_simd_allowed = on; }
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define LN_HAVE_AVX2 1
#define LN_AVX2 __attribute__((target("avx2,fma")))
static bool cpu_has_avx2(void) {
    static int v = -1; // benign race: every thread computes the same value
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return v && g_simd_allowed;
}
#else
#define LN_HAVE_AVX2 0
#endif

// Sum of C terms into OUT. One accumulator would make the loop wait on the
// add latency (4 cycles per vector); 32 lanes (the inner loop vectorises into
// 4 independent AVX2 registers) keep the adders busy. BODY adds term i_ to s_.
#define LN_LANES 32
#define LN_SUM(T, C, OUT, BODY)                                                                    \
    do {                                                                                           \
        T acc_[LN_LANES] = {0};                                                                    \
        int64_t i0_ = 0;                                                                           \
        for (; i0_ + LN_LANES <= (C); i0_ += LN_LANES)                                             \
            for (int l_ = 0; l_ < LN_LANES; l_++) {                                                \
                int64_t i_ = i0_ + l_;                                                             \
                T s_ = acc_[l_];                                                                   \
                BODY;                                                                              \
                acc_[l_] = s_;                                                                     \
            }                                                                                      \
        for (int64_t i_ = i0_; i_ < (C); i_++) {                                                   \
            T s_ = acc_[0];                                                                        \
            BODY;                                                                                  \
            acc_[0] = s_;                                                                          \
        }                                                                                          \
        T t_ = 0;                                                                                  \
        for (int l_ = 0; l_ < LN_LANES; l_++) t_ += acc_[l_];                                      \
        (OUT) = t_;                                                                                \
    } while (0)

// Two sums in one pass: BODY adds term i_ to s1_ and s2_.
#define LN_SUM2(T, C, OUT1, OUT2, BODY)                                                            \
    do {                                                                                           \
        T a1_[LN_LANES] = {0}, a2_[LN_LANES] = {0};                                                \
        int64_t i0_ = 0;                                                                           \
        for (; i0_ + LN_LANES <= (C); i0_ += LN_LANES)                                             \
            for (int l_ = 0; l_ < LN_LANES; l_++) {                                                \
                int64_t i_ = i0_ + l_;                                                             \
                T s1_ = a1_[l_], s2_ = a2_[l_];                                                    \
                BODY;                                                                              \
                a1_[l_] = s1_, a2_[l_] = s2_;                                                      \
            }                                                                                      \
        for (int64_t i_ = i0_; i_ < (C); i_++) {                                                   \
            T s1_ = a1_[0], s2_ = a2_[0];                                                          \
            BODY;                                                                                  \
            a1_[0] = s1_, a2_[0] = s2_;                                                            \
        }                                                                                          \
        T t1_ = 0, t2_ = 0;                                                                        \
        for (int l_ = 0; l_ < LN_LANES; l_++) t1_ += a1_[l_], t2_ += a2_[l_];                      \
        (OUT1) = t1_, (OUT2) = t2_;                                                                \
    } while (0)

// Forward of one row of C: mean, then the variance from the deviations (two
// passes over a row that stays in L1, more accurate than E[x^2]-E[x]^2 in
// f32), then the affine output. The sums are in T: the simd reduction splits
// them over 8-16 lanes, ample for f32 rows of a few thousand.
#define LN_ROW_FWD(T, SQRT, SFX, ATTR)                                                             \
    ATTR static void ln_row_fwd_##T##SFX(const T *restrict xr, const T *restrict w, const T *restrict b, \
                                         T *restrict yr, int64_t C, T eps, T *mean, T *rstd) {      \
        T s = 0, v = 0;                                                                            \
        LN_SUM(T, C, s, s_ += xr[i_]);                                                             \
        const T mu = s / (T)C;                                                                     \
        LN_SUM(T, C, v, s_ += (xr[i_] - mu) * (xr[i_] - mu));                                      \
        const T rs = (T)1 / SQRT(v / (T)C + eps);                                                  \
        *mean = mu;                                                                                \
        *rstd = rs;                                                                                \
        if (w && b) {                                                                              \
            for (int64_t i = 0; i < C; i++) yr[i] = (xr[i] - mu) * rs * w[i] + b[i];               \
        } else if (w) {                                                                            \
            for (int64_t i = 0; i < C; i++) yr[i] = (xr[i] - mu) * rs * w[i];                      \
        } else if (b) {                                                                            \
            for (int64_t i = 0; i < C; i++) yr[i] = (xr[i] - mu) * rs + b[i];                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < C; i++) yr[i] = (xr[i] - mu) * rs;                             \
        }                                                                                          \
    }

// Backward of one row (llm.c's layernorm_backward):
//   n = (x - mean) rstd,  dn = gy * w   (w == NULL reads as w = 1)
//   dx = rstd (dn - mean(dn) - n mean(dn n)),  pw += gy n,  pb += gy
// One reduction pass, then one pass for dx and the dw/db partials.
#define LN_ROW_BWD(T, SFX, ATTR)                                                                   \
    ATTR static void ln_row_bwd_##T##SFX(const T *restrict g, const T *restrict xr, const T *restrict w, \
                                         T *restrict d, T *restrict pw, T *restrict pb, int64_t C, T mu, \
                                         T rs) {                                                   \
        T sdn = 0, sdnn = 0;                                                                       \
        if (w) {                                                                                   \
            LN_SUM2(T, C, sdn, sdnn, {                                                             \
                T dn_ = g[i_] * w[i_];                                                             \
                s1_ += dn_;                                                                        \
                s2_ += dn_ * (xr[i_] - mu);                                                        \
            });                                                                                    \
        } else {                                                                                   \
            LN_SUM2(T, C, sdn, sdnn, {                                                             \
                s1_ += g[i_];                                                                      \
                s2_ += g[i_] * (xr[i_] - mu);                                                      \
            });                                                                                    \
        }                                                                                          \
        /* mean(dn) and mean(dn n) (its rstd folded in) */                                         \
        const T mdn = sdn / (T)C, mdnn = sdnn * rs / (T)C;                                         \
        if (w && pw) {                                                                             \
            for (int64_t i = 0; i < C; i++) {                                                      \
                T n = (xr[i] - mu) * rs;                                                           \
                d[i] = (g[i] * w[i] - mdn - n * mdnn) * rs;                                        \
                pw[i] += g[i] * n;                                                                 \
                pb[i] += g[i];                                                                     \
            }                                                                                      \
        } else if (w) {                                                                            \
            for (int64_t i = 0; i < C; i++) {                                                      \
                T n = (xr[i] - mu) * rs;                                                           \
                d[i] = (g[i] * w[i] - mdn - n * mdnn) * rs;                                        \
            }                                                                                      \
        } else if (pw) {                                                                           \
            for (int64_t i = 0; i < C; i++) {                                                      \
                T n = (xr[i] - mu) * rs;                                                           \
                d[i] = (g[i] - mdn - n * mdnn) * rs;                                               \
                pw[i] += g[i] * n;                                                                 \
                pb[i] += g[i];                                                                     \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < C; i++) {                                                      \
                T n = (xr[i] - mu) * rs;                                                           \
                d[i] = (g[i] - mdn - n * mdnn) * rs;                                               \
            }                                                                                      \
        }                                                                                          \
    }

LN_ROW_FWD(float, sqrtf, _base, )
LN_ROW_FWD(double, sqrt, _base, )
LN_ROW_BWD(float, _base, )
LN_ROW_BWD(double, _base, )
#if LN_HAVE_AVX2
LN_ROW_FWD(float, sqrtf, _avx2, LN_AVX2)
LN_ROW_FWD(double, sqrt, _avx2, LN_AVX2)
LN_ROW_BWD(float, _avx2, LN_AVX2)
LN_ROW_BWD(double, _avx2, LN_AVX2)
#define LN_PICK(name, T) (cpu_has_avx2() ? name##_##T##_avx2 : name##_##T##_base)
#else
#define LN_PICK(name, T) (name##_##T##_base)
#endif

// Rows in parallel. x, y (R,C); w, b (C) or NULL; mean, rstd (R)
#define LN_FWD(T)                                                                                  \
    static void ln_fwd_##T(const T *x, const T *w, const T *b, T *y, T *mean, T *rstd, int64_t R,  \
                           int64_t C, double eps, bool par) {                                      \
        void (*row)(const T *restrict, const T *restrict, const T *restrict, T *restrict, int64_t, T, T *, T *) = \
            LN_PICK(ln_row_fwd, T);                                                                \
        _Pragma("omp parallel for num_threads(weft_num_threads()) schedule(static) if(par)")       \
        for (int64_t r = 0; r < R; r++) row(x + r * C, w, b, y + r * C, C, (T)eps, mean + r, rstd + r); \
    }
LN_FWD(float)
LN_FWD(double)

// A bf16 / f16 x or y: the f32 kernels on widened copies (the statistics are f32; y, and in the backward
// dx, rounded once into a half dtype; a half gy widened).
weft_status weft_cpu_layer_norm(const weft_op_args *a) {
    if (weft_dtype_is_half(a->in[0]->dtype) || weft_dtype_is_half(a->out[0]->dtype))
        return weft_kernel_widened(a, weft_cpu_layer_norm);
    const weft_tensor *x = a->in[0];
    int64_t C = ln_row(x, a->attrs->i[0]), R = a->out[1]->numel; // rows: the leading dims
    bool hw = a->attrs->i[1] != 0, hb = a->attrs->i[2] != 0;
    const weft_tensor *w = hw ? a->in[1] : NULL, *b = hb ? a->in[1 + hw] : NULL;
    bool par = x->numel >= 2 * WEFT_PAR_GRAIN && R > 1;
    if (x->dtype == WEFT_F32)
        ln_fwd_float(WEFT_PTR(float, x), w ? WEFT_PTR(float, w) : NULL, b ? WEFT_PTR(float, b) : NULL,
                     WEFT_PTR(float, a->out[0]), WEFT_PTR(float, a->out[1]), WEFT_PTR(float, a->out[2]), R, C,
                     a->attrs->f[0], par);
    else
        ln_fwd_double(WEFT_PTR(double, x), w ? WEFT_PTR(double, w) : NULL, b ? WEFT_PTR(double, b) : NULL,
                      WEFT_PTR(double, a->out[0]), WEFT_PTR(double, a->out[1]), WEFT_PTR(double, a->out[2]), R, C,
                      a->attrs->f[0], par);
    return WEFT_OK;
}

// add_layer_norm: each row's sum s = x + r is written and normalised while it is in L1 (one pass over
// x, r, s and y). r: x's type, or bf16 / f16 (rdt) with float x, widened as it is read.
#define ADD_LN_FWD(T)                                                                              \
    static void add_ln_fwd_##T(const T *x, const void *r, int rdt, const T *w, const T *b, T *s, T *y, T *mean, \
                               T *rstd, int64_t R, int64_t C, double eps, bool par) {              \
        void (*row)(const T *restrict, const T *restrict, const T *restrict, T *restrict, int64_t, T, T *, T *) = \
            LN_PICK(ln_row_fwd, T);                                                                \
        _Pragma("omp parallel for num_threads(weft_num_threads()) schedule(static) if(par)")       \
        for (int64_t k = 0; k < R; k++) {                                                          \
            const T *xr = x + k * C;                                                               \
            T *sr = s + k * C;                                                                     \
            if (rdt == WEFT_BF16) {                                                                \
                const uint16_t *rr = (const uint16_t *)r + k * C;                                  \
                for (int64_t i = 0; i < C; i++) sr[i] = xr[i] + (T)weft_bf16_to_f32(rr[i]);        \
            } else if (rdt == WEFT_F16) {                                                          \
                const uint16_t *rr = (const uint16_t *)r + k * C;                                  \
                for (int64_t i = 0; i < C; i++) sr[i] = xr[i] + (T)weft_f16_to_f32(rr[i]);         \
            } else {                                                                               \
                const T *rr = (const T *)r + k * C;                                                \
                for (int64_t i = 0; i < C; i++) sr[i] = xr[i] + rr[i];                             \
            }                                                                                      \
            row(sr, w, b, y + k * C, C, (T)eps, mean + k, rstd + k);                               \
        }                                                                                          \
    }
ADD_LN_FWD(float)
ADD_LN_FWD(double)

// in: x, r, [weight], [bias]; out: s, y, mean, rstd
weft_status weft_cpu_add_layer_norm(const weft_op_args *a) {
    if (weft_dtype_is_half(a->out[1]->dtype)) return weft_kernel_widened(a, weft_cpu_add_layer_norm); // a half y
    const weft_tensor *x = a->in[0], *r = a->in[1];
    int64_t C = ln_row(x, a->attrs->i[0]), R = a->out[2]->numel;
    bool hw = a->attrs->i[1] != 0, hb = a->attrs->i[2] != 0;
    const weft_tensor *w = hw ? a->in[2] : NULL, *b = hb ? a->in[2 + hw] : NULL;
    bool par = x->numel >= 2 * WEFT_PAR_GRAIN && R > 1;
    if (x->dtype == WEFT_F32)
        add_ln_fwd_float(WEFT_PTR(float, x), weft_tensor_ptr(r), r->dtype, w ? WEFT_PTR(float, w) : NULL,
                         b ? WEFT_PTR(float, b) : NULL, WEFT_PTR(float, a->out[0]), WEFT_PTR(float, a->out[1]),
                         WEFT_PTR(float, a->out[2]), WEFT_PTR(float, a->out[3]), R, C, a->attrs->f[0], par);
    else
        add_ln_fwd_double(WEFT_PTR(double, x), weft_tensor_ptr(r), r->dtype, w ? WEFT_PTR(double, w) : NULL,
                          b ? WEFT_PTR(double, b) : NULL, WEFT_PTR(double, a->out[0]), WEFT_PTR(double, a->out[1]),
                          WEFT_PTR(double, a->out[2]), WEFT_PTR(double, a->out[3]), R, C, a->attrs->f[0], par);
    return WEFT_OK;
}

// Fused backward. Rows are split into one contiguous block per thread; each
// thread sums dw/db into its own partial row (no atomics, no false sharing on
// a C-long row), and the partials are added up afterwards, parallel over C.
// gy, x, dx (R,C); mean, rstd (R); w, dw, db (C) (dw == NULL: not wanted); part (nt,2,C)
#define LN_BWD(T)                                                                                  \
    static void ln_bwd_##T(const T *gy, const T *x, const T *mean, const T *rstd, const T *w, T *dx, T *dw, \
                           T *db, T *part, int nt, int64_t R, int64_t C) {                         \
        void (*row)(const T *restrict, const T *restrict, const T *restrict, T *restrict, T *restrict, \
                    T *restrict, int64_t, T, T) = LN_PICK(ln_row_bwd, T);                          \
        _Pragma("omp parallel num_threads(nt) if(nt > 1)") {                                       \
            int tid = thread_id(), n_team = team_size();                                           \
            int64_t r0 = R * tid / n_team, r1 = R * (tid + 1) / n_team;                            \
            T *pw = NULL, *pb = NULL;                                                              \
            if (dw) {                                                                              \
                pw = n_team > 1 ? part + (int64_t)tid * 2 * C : dw;                                \
                pb = n_team > 1 ? pw + C : db;                                                     \
                memset(pw, 0, sizeof(T) * (size_t)C);                                              \
                memset(pb, 0, sizeof(T) * (size_t)C);                                              \
            }                                                                                      \
            for (int64_t r = r0; r < r1; r++)                                                      \
                row(gy + r * C, x + r * C, w, dx + r * C, pw, pb, C, mean[r], rstd[r]);            \
            if (dw && n_team > 1) {                                                                \
                _Pragma("omp barrier")                                                             \
                /* each thread adds up a slice of the columns over all partials */                 \
                int64_t c0 = C * tid / n_team, c1 = C * (tid + 1) / n_team;                        \
                for (int64_t i = c0; i < c1; i++) {                                                \
                    T sw = 0, sb = 0;                                                              \
                    for (int t = 0; t < n_team; t++) {                                             \
                        sw += part[(int64_t)t * 2 * C + i];                                        \
                        sb += part[(int64_t)t * 2 * C + C + i];                                    \
                    }                                                                              \
                    dw[i] = sw;                                                                    \
                    db[i] = sb;                                                                    \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }
LN_BWD(float)
LN_BWD(double)

// in: gy, x, mean, rstd, [weight]; out: dx, dweight, dbias
weft_status weft_cpu_layer_norm_backward(const weft_op_args *a) {
    if (weft_dtype_is_half(a->in[1]->dtype) || weft_dtype_is_half(a->in[0]->dtype))
        return weft_kernel_widened(a, weft_cpu_layer_norm_backward);
    const weft_tensor *gy = a->in[0], *x = a->in[1], *mean = a->in[2], *rstd = a->in[3];
    int64_t C = ln_row(x, a->attrs->i[0]), R = mean->numel;
    const weft_tensor *w = a->attrs->i[1] ? a->in[4] : NULL;
    bool want_wb = a->attrs->i[2] != 0;
    int nt = x->numel >= 2 * WEFT_PAR_GRAIN ? weft_num_threads() : 1;
    if (nt > R) nt = R > 0 ? (int)R : 1;
    size_t es = weft_dtype_size((weft_dtype)x->dtype);
    void *part = NULL;
    if (want_wb && nt > 1) {
        part = malloc(es * 2 * (size_t)C * (size_t)nt);
        if (!part) return weft_error(WEFT_ERR_OOM, "layer_norm_backward: out of memory");
    }
    if (want_wb && R == 0) { // no rows: the sums are empty
        memset(weft_tensor_ptr(a->out[1]), 0, es * (size_t)C);
        memset(weft_tensor_ptr(a->out[2]), 0, es * (size_t)C);
    }
    if (x->dtype == WEFT_F32)
        ln_bwd_float(WEFT_PTR(float, gy), WEFT_PTR(float, x), WEFT_PTR(float, mean), WEFT_PTR(float, rstd),
                     w ? WEFT_PTR(float, w) : NULL, WEFT_PTR(float, a->out[0]),
                     want_wb ? WEFT_PTR(float, a->out[1]) : NULL, want_wb ? WEFT_PTR(float, a->out[2]) : NULL,
                     (float *)part, nt, R, C);
    else
        ln_bwd_double(WEFT_PTR(double, gy), WEFT_PTR(double, x), WEFT_PTR(double, mean), WEFT_PTR(double, rstd),
                      w ? WEFT_PTR(double, w) : NULL, WEFT_PTR(double, a->out[0]),
                      want_wb ? WEFT_PTR(double, a->out[1]) : NULL, want_wb ? WEFT_PTR(double, a->out[2]) : NULL,
                      (double *)part, nt, R, C);
    free(part);
    if (a->n_out < 4) return WEFT_OK; // layer_norm_backward
    if (a->attrs->i[3]) { // dx += gs (after the row function: the bits of an add after the op)
        const weft_tensor *gs = a->in[4 + (w != NULL)];
        int64_t n = x->numel;
        if (x->dtype == WEFT_F32) {
            float *d = WEFT_PTR(float, a->out[0]);
            const float *g = WEFT_PTR(const float, gs);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
            for (int64_t i = 0; i < n; i++) d[i] += g[i];
        } else {
            double *d = WEFT_PTR(double, a->out[0]);
            const double *g = WEFT_PTR(const double, gs);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
            for (int64_t i = 0; i < n; i++) d[i] += g[i];
        }
    }
    // dx in output 3's dtype too (under weft_kernel_widened: an f32 copy it rounds to the half dtype)
    return a->out[3]->numel ? weft_cpu_copy(a->out[3], a->out[0]) : WEFT_OK;
}

// ---------------------------------------------------------------- batch_norm
// x is viewed as (N,C,S) with S the product of the spatial dims; channel c's
// elements are N runs of S contiguous values. Work is parallel over channels;
// per-channel sums are accumulated in double (a channel may hold millions of
// values). Stats are per-channel, applied as y = x * scale + shift.
static inline double ld(const void *p, bool f32, int64_t i) {
    return f32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}
static inline void st(void *p, bool f32, int64_t i, double v) {
    if (f32) ((float *)p)[i] = (float)v;
    else ((double *)p)[i] = v;
}

// Sums of x and of (x - mu)^2 over channel c.
#define BN_CHANNEL_SUMS(T)                                                                         \
    static void bn_stats_##T(const T *restrict x, int64_t N, int64_t C, int64_t S, int64_t c,       \
                             double *mean, double *m2) {                                           \
        double s = 0, ss = 0;                                                                      \
        for (int64_t n = 0; n < N; n++) {                                                          \
            const T *restrict p = x + (n * C + c) * S;                                             \
            T acc = 0; /* a run of S values in T, then into double */                              \
            _Pragma("omp simd reduction(+:acc)") for (int64_t i = 0; i < S; i++) acc += p[i];      \
            s += acc;                                                                              \
        }                                                                                          \
        double M = (double)(N * S), mu = M > 0 ? s / M : 0;                                        \
        for (int64_t n = 0; n < N; n++) {                                                          \
            const T *restrict p = x + (n * C + c) * S;                                             \
            const T m = (T)mu;                                                                     \
            T acc = 0;                                                                             \
            _Pragma("omp simd reduction(+:acc)") for (int64_t i = 0; i < S; i++) {                \
                T d = p[i] - m;                                                                    \
                acc += d * d;                                                                      \
            }                                                                                      \
            ss += acc;                                                                             \
        }                                                                                          \
        *mean = mu;                                                                                \
        *m2 = ss;                                                                                  \
    }                                                                                              \
    static void bn_apply_##T(const T *restrict x, T *restrict y, int64_t N, int64_t C, int64_t S,   \
                             int64_t c, T scale, T shift) {                                        \
        for (int64_t n = 0; n < N; n++) {                                                          \
            const T *restrict p = x + (n * C + c) * S;                                             \
            T *restrict q = y + (n * C + c) * S;                                                   \
            for (int64_t i = 0; i < S; i++) q[i] = p[i] * scale + shift;                           \
        }                                                                                          \
    }                                                                                              \
    /* sum gy and sum gy (x - mu) over channel c */                                                \
    static void bn_gsums_##T(const T *restrict gy, const T *restrict x, int64_t N, int64_t C,      \
                             int64_t S, int64_t c, T mu, double *sg, double *sgx) {                \
        double a = 0, b = 0;                                                                       \
        for (int64_t n = 0; n < N; n++) {                                                          \
            const T *restrict g = gy + (n * C + c) * S, *restrict p = x + (n * C + c) * S;        \
            T s1 = 0, s2 = 0;                                                                      \
            _Pragma("omp simd reduction(+:s1,s2)") for (int64_t i = 0; i < S; i++) {              \
                s1 += g[i];                                                                        \
                s2 += g[i] * (p[i] - mu);                                                          \
            }                                                                                      \
            a += s1;                                                                               \
            b += s2;                                                                               \
        }                                                                                          \
        *sg = a;                                                                                   \
        *sgx = b;                                                                                  \
    }                                                                                              \
    /* dx = k1 gy + k2 (x - mu) + k0 over channel c */                                             \
    static void bn_dx_##T(const T *restrict gy, const T *restrict x, T *restrict dx, int64_t N,    \
                          int64_t C, int64_t S, int64_t c, T mu, T k1, T k2, T k0) {               \
        for (int64_t n = 0; n < N; n++) {                                                          \
            const T *restrict g = gy + (n * C + c) * S, *restrict p = x + (n * C + c) * S;        \
            T *restrict d = dx + (n * C + c) * S;                                                  \
            for (int64_t i = 0; i < S; i++) d[i] = k1 * g[i] + k2 * (p[i] - mu) + k0;              \
        }                                                                                          \
    }
BN_CHANNEL_SUMS(float)
BN_CHANNEL_SUMS(double)

// Element (i) of a possibly strided 1-D tensor of length C.
static inline int64_t at1(const weft_tensor *t, int64_t i) { return t->ndim ? i * t->strides[0] : 0; }

// in: x, [weight], [bias], [running_mean], [running_var]; out: y, mean, invstd (C)
weft_status weft_cpu_batch_norm(const weft_op_args *a) {
    const weft_tensor *x = a->in[0];
    const int64_t *at = a->attrs->i;
    int k = 1;
    const weft_tensor *w = at[0] ? a->in[k++] : NULL, *b = at[1] ? a->in[k++] : NULL;
    weft_tensor *rm = at[2] ? a->in[k++] : NULL, *rv = at[3] ? a->in[k++] : NULL;
    bool training = at[4] != 0, f32 = x->dtype == WEFT_F32;
    double momentum = a->attrs->f[0], eps = a->attrs->f[1];
    int64_t N = x->sizes[0], C = x->ndim > 1 ? x->sizes[1] : 1, S = C && N ? x->numel / (N * C) : 0;
    int64_t M = N * S;
    const void *xp = weft_tensor_ptr(x);
    void *yp = weft_tensor_ptr(a->out[0]), *mp = weft_tensor_ptr(a->out[1]), *ip = weft_tensor_ptr(a->out[2]);
    const void *wp = w ? weft_tensor_ptr(w) : NULL, *bp = b ? weft_tensor_ptr(b) : NULL;
    void *rmp = rm ? weft_tensor_ptr(rm) : NULL, *rvp = rv ? weft_tensor_ptr(rv) : NULL;
    bool par = x->numel >= 2 * WEFT_PAR_GRAIN && C > 1;
#pragma omp parallel for num_threads(weft_num_threads()) schedule(dynamic, 1) if (par)
    for (int64_t c = 0; c < C; c++) {
        double mu, var, m2;
        if (training) {
            if (f32) bn_stats_float(xp, N, C, S, c, &mu, &m2);
            else bn_stats_double(xp, N, C, S, c, &mu, &m2);
            var = M > 0 ? m2 / (double)M : 0; // biased: normalises this batch
            // PyTorch's rule; the running variance is the unbiased estimate
            if (rm) st(rmp, f32, at1(rm, c), (1 - momentum) * ld(rmp, f32, at1(rm, c)) + momentum * mu);
            if (rv && M > 1)
                st(rvp, f32, at1(rv, c), (1 - momentum) * ld(rvp, f32, at1(rv, c)) + momentum * m2 / (double)(M - 1));
        } else {
            mu = ld(rmp, f32, at1(rm, c));
            var = ld(rvp, f32, at1(rv, c));
        }
        double is = 1.0 / sqrt(var + eps);
        double scale = is * (w ? ld(wp, f32, at1(w, c)) : 1.0);
        double shift = (b ? ld(bp, f32, at1(b, c)) : 0.0) - mu * scale;
        st(mp, f32, c, mu);
        st(ip, f32, c, is);
        if (f32) bn_apply_float(xp, yp, N, C, S, c, (float)scale, (float)shift);
        else bn_apply_double(xp, yp, N, C, S, c, scale, shift);
    }
    return WEFT_OK;
}

// in: gy, x, mean, invstd, [weight]; out: dx, dweight, dbias (C)
//   training: dx = w is (gy - mean(gy) - xhat mean(gy xhat)),  xhat = (x - mu) is
//   eval:     dx = w is gy   (the running stats do not depend on x)
//   dweight = sum gy xhat,  dbias = sum gy
weft_status weft_cpu_batch_norm_backward(const weft_op_args *a) {
    const weft_tensor *gy = a->in[0], *x = a->in[1], *mean = a->in[2], *istd = a->in[3];
    const weft_tensor *w = a->attrs->i[0] ? a->in[4] : NULL;
    bool training = a->attrs->i[1] != 0, want_wb = a->attrs->i[2] != 0, f32 = x->dtype == WEFT_F32;
    int64_t N = x->sizes[0], C = x->ndim > 1 ? x->sizes[1] : 1, S = C && N ? x->numel / (N * C) : 0;
    double M = (double)(N * S);
    const void *gp = weft_tensor_ptr(gy), *xp = weft_tensor_ptr(x), *mp = weft_tensor_ptr(mean),
               *ip = weft_tensor_ptr(istd), *wp = w ? weft_tensor_ptr(w) : NULL;
    void *dxp = weft_tensor_ptr(a->out[0]), *dwp = weft_tensor_ptr(a->out[1]), *dbp = weft_tensor_ptr(a->out[2]);
    bool par = x->numel >= 2 * WEFT_PAR_GRAIN && C > 1;
#pragma omp parallel for num_threads(weft_num_threads()) schedule(dynamic, 1) if (par)
    for (int64_t c = 0; c < C; c++) {
        double mu = ld(mp, f32, c), is = ld(ip, f32, c), wc = w ? ld(wp, f32, at1(w, c)) : 1.0;
        double sg = 0, sgx = 0;
        if (training || want_wb) {
            if (f32) bn_gsums_float(gp, xp, N, C, S, c, (float)mu, &sg, &sgx);
            else bn_gsums_double(gp, xp, N, C, S, c, mu, &sg, &sgx);
        }
        if (want_wb) {
            st(dwp, f32, c, sgx * is);
            st(dbp, f32, c, sg);
        }
        // dx = k1 gy + k2 (x - mu) + k0
        double k1 = wc * is, k2 = 0, k0 = 0;
        if (training && M > 0) {
            k2 = -wc * is * is * is * sgx / M;
            k0 = -wc * is * sg / M;
        }
        if (f32) bn_dx_float(gp, xp, dxp, N, C, S, c, (float)mu, (float)k1, (float)k2, (float)k0);
        else bn_dx_double(gp, xp, dxp, N, C, S, c, mu, k1, k2, k0);
    }
    return WEFT_OK;
}
