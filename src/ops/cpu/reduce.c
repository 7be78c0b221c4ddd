// CPU reduction kernels. One output element per (parallel) task; the reduced
// elements are visited with a small odometer over the reduced dims, whose
// innermost run is a plain strided loop.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../reduce.h"
#include "vmath.h"

void weft_reduce_plan_init(weft_reduce_plan *p, const weft_tensor *x, uint32_t mask) {
    p->nk = p->nr = 0;
    p->n_out = p->n_red = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (mask & (1u << d)) {
            if (x->sizes[d] == 1) continue;
            p->rsize[p->nr] = x->sizes[d];
            p->rstride[p->nr++] = x->strides[d];
            p->n_red *= x->sizes[d];
        } else {
            p->ksize[p->nk] = x->sizes[d];
            p->kstride[p->nk++] = x->strides[d];
            p->n_out *= x->sizes[d];
        }
    }
    if (p->nr == 0) { // nothing to reduce: one element per output
        p->rsize[0] = 1;
        p->rstride[0] = 0;
        p->nr = 1;
    }
    for (int d = 0; d < x->ndim; d++)
        if ((mask & (1u << d)) && x->sizes[d] == 0) p->n_red = 0;
}

int64_t weft_reduce_base(const weft_reduce_plan *p, int64_t o) {
    int64_t off = 0;
    for (int d = p->nk - 1; d >= 0; d--) {
        off += (o % p->ksize[d]) * p->kstride[d];
        o /= p->ksize[d];
    }
    return off;
}

void weft_reduce_out_shape(const weft_tensor *x, uint32_t mask, bool keepdim, int *ndim, int64_t *sizes) {
    int n = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (mask & (1u << d)) {
            if (keepdim) sizes[n++] = 1;
        } else {
            sizes[n++] = x->sizes[d];
        }
    }
    *ndim = n;
}

// Visit every reduced element of one output: BODY sees `v` (double).
#define FOR_REDUCED(T, p, base, BODY)                                                 \
    do {                                                                              \
        int64_t idx_[WEFT_MAX_DIMS] = {0};                                            \
        int nr_ = (p)->nr;                                                            \
        int64_t inner_ = (p)->rsize[nr_ - 1], is_ = (p)->rstride[nr_ - 1];            \
        const T *q_ = (base);                                                         \
        for (int64_t done_ = 0; done_ < (p)->n_red; done_ += inner_) {                \
            if (is_ == 1) {                                                           \
                for (int64_t j_ = 0; j_ < inner_; j_++) {                             \
                    double v = (double)q_[j_];                                        \
                    BODY;                                                             \
                }                                                                     \
            } else {                                                                  \
                for (int64_t j_ = 0; j_ < inner_; j_++) {                             \
                    double v = (double)q_[j_ * is_];                                  \
                    BODY;                                                             \
                }                                                                     \
            }                                                                         \
            for (int d_ = nr_ - 2; d_ >= 0; d_--) {                                   \
                q_ += (p)->rstride[d_];                                               \
                if (++idx_[d_] < (p)->rsize[d_]) break;                               \
                q_ -= (p)->rstride[d_] * (p)->rsize[d_];                              \
                idx_[d_] = 0;                                                         \
            }                                                                         \
        }                                                                             \
    } while (0)

// Reduce one output element; returns the value (argmax: the index as double).
#define REDUCE_ONE(T)                                                                 \
    static double reduce_one_##T(const weft_reduce_plan *p, const T *base, int kind, int64_t corr) { \
        switch (kind) {                                                               \
        case WEFT_RED_SUM:                                                            \
        case WEFT_RED_MEAN: {                                                         \
            double s = 0;                                                             \
            FOR_REDUCED(T, p, base, s += v);                                          \
            return kind == WEFT_RED_MEAN ? s / (double)p->n_red : s;                 \
        }                                                                             \
        case WEFT_RED_MAX:                                                            \
        case WEFT_RED_MIN: {                                                          \
            double m = kind == WEFT_RED_MAX ? -INFINITY : INFINITY;                   \
            bool nan_ = false;                                                        \
            FOR_REDUCED(T, p, base, {                                                 \
                if (v != v) nan_ = true;                                              \
                else if (kind == WEFT_RED_MAX ? v > m : v < m) m = v;                 \
            });                                                                       \
            return nan_ ? NAN : m;                                                    \
        }                                                                             \
        case WEFT_RED_VAR: { /* two passes: mean, then squared deviations */          \
            double s = 0, ss = 0;                                                     \
            FOR_REDUCED(T, p, base, s += v);                                          \
            double mu = s / (double)p->n_red;                                         \
            FOR_REDUCED(T, p, base, ss += (v - mu) * (v - mu));                       \
            double den = (double)(p->n_red - corr);                                   \
            return den > 0 ? ss / den : NAN;                                          \
        }                                                                             \
        case WEFT_RED_LOGSUMEXP: {                                                    \
            double m = -INFINITY, s = 0;                                              \
            bool nan_ = false;                                                        \
            FOR_REDUCED(T, p, base, { if (v > m) m = v; else if (v != v) nan_ = true; }); \
            /* +-inf or NaN: exp(v - m) would be inf - inf; the answer is m itself */ \
            if (nan_) return NAN;                                                     \
            if (isinf(m)) return m;                                                   \
            FOR_REDUCED(T, p, base, s += exp(v - m));                                 \
            return m + log(s);                                                        \
        }                                                                             \
        case WEFT_RED_ARGMAX: {                                                       \
            double m = -INFINITY;                                                     \
            int64_t k = 0, best = 0;                                                  \
            FOR_REDUCED(T, p, base, {                                                 \
                if (v > m || (v != v && m == m)) {                                    \
                    m = v;                                                            \
                    best = k;                                                         \
                }                                                                     \
                k++;                                                                  \
            });                                                                       \
            return (double)best;                                                      \
        }                                                                             \
        }                                                                             \
        return 0;                                                                     \
    }
REDUCE_ONE(float)
REDUCE_ONE(double)

// Integer sum/max/min/argmax accumulate in int64 (exact beyond 2^53, and a
// sum that overflows the dtype wraps like the dtype instead of an undefined
// double -> int conversion). Mean/var/logsumexp need floats (checked at infer).
#define REDUCE_ONE_INT(T)                                                             \
    static int64_t reduce_int_##T(const weft_reduce_plan *p, const T *base, int kind) { \
        int64_t acc = 0, best = 0, k = 0;                                             \
        bool first = true;                                                            \
        int64_t idx[WEFT_MAX_DIMS] = {0};                                             \
        int nr = p->nr;                                                               \
        int64_t inner = p->rsize[nr - 1], is = p->rstride[nr - 1];                    \
        const T *q = base;                                                            \
        for (int64_t done = 0; done < p->n_red; done += inner) {                      \
            for (int64_t j = 0; j < inner; j++, k++) {                                \
                int64_t v = (int64_t)q[j * is];                                       \
                switch (kind) {                                                       \
                case WEFT_RED_SUM: acc = (int64_t)((uint64_t)acc + (uint64_t)v); break; \
                case WEFT_RED_MAX: if (first || v > acc) acc = v; break;              \
                case WEFT_RED_MIN: if (first || v < acc) acc = v; break;              \
                default: if (first || v > acc) acc = v, best = k; break;              \
                }                                                                     \
                first = false;                                                        \
            }                                                                         \
            for (int d = nr - 2; d >= 0; d--) {                                       \
                q += p->rstride[d];                                                   \
                if (++idx[d] < p->rsize[d]) break;                                    \
                q -= p->rstride[d] * p->rsize[d];                                     \
                idx[d] = 0;                                                           \
            }                                                                         \
        }                                                                             \
        return kind == WEFT_RED_ARGMAX ? best : acc;                                  \
    }
REDUCE_ONE_INT(int32_t)
REDUCE_ONE_INT(int64_t)

// Sum over leading dims of a contiguous tensor, (R,K) -> (K): the bias
// gradient of every linear layer. The per-output loop above would walk each
// column with stride K; here the work is tiles of COLSUM_ROWS rows by
// COLSUM_COLS columns, each summed down its rows in double (vectorised), and
// the tiles of a column then added in row order. The tiling depends only on
// R and K, so the result does not depend on the thread count, and a narrow
// layer (K = 128: one column block) still uses every thread.
#define COLSUM_ROWS 256
#define COLSUM_COLS 256
#define COLSUM(T)                                                                                         \
    /* One tile: rows x[0..m) of n columns (row stride K) summed into acc[0..n). Built per ISA: */        \
    /* the conversion to double halves the vector width, so the wider ones pay. */                        \
    static WEFT_CLONES void colsum_tile_##T(const T *x, int64_t m, int64_t n, int64_t K, double *restrict acc) { \
        for (int64_t j = 0; j < n; j++) acc[j] = 0;                                                       \
        for (int64_t i = 0; i < m; i++) {                                                                 \
            const T *restrict row = x + i * K;                                                            \
            for (int64_t j = 0; j < n; j++) acc[j] += (double)row[j];                                     \
        }                                                                                                 \
    }                                                                                                     \
    static void colsum_##T(const T *x, int64_t R, int64_t K, T *out, double scale, double *part) {      \
        int64_t nr = (R + COLSUM_ROWS - 1) / COLSUM_ROWS, nc = (K + COLSUM_COLS - 1) / COLSUM_COLS;      \
        _Pragma("omp parallel for num_threads(weft_num_threads()) if (R * K > 2 * WEFT_PAR_GRAIN && nr * nc > 1)") \
        for (int64_t t = 0; t < nr * nc; t++) {                                                           \
            int64_t i0 = t / nc * COLSUM_ROWS, j0 = t % nc * COLSUM_COLS;                                 \
            int64_t m = R - i0 < COLSUM_ROWS ? R - i0 : COLSUM_ROWS, n = K - j0 < COLSUM_COLS ? K - j0 : COLSUM_COLS; \
            colsum_tile_##T(x + i0 * K + j0, m, n, K, part + (t / nc) * K + j0);                          \
        }                                                                                                 \
        for (int64_t j = 0; j < K; j++) {                                                                 \
            double s = 0;                                                                                 \
            for (int64_t r = 0; r < nr; r++) s += part[r * K + j];                                        \
            out[j] = (T)(s * scale);                                                                      \
        }                                                                                                 \
    }
COLSUM(float)
COLSUM(double)

weft_status weft_cpu_reduce(const weft_op_args *a) {
    if (weft_dtype_is_half(a->in[0]->dtype)) return weft_kernel_widened(a, weft_cpu_reduce);
    const weft_tensor *x = a->in[0];
    weft_tensor *out = a->out[0];
    int kind = a->op->variant;
    uint32_t mask = (uint32_t)a->attrs->i[0];
    int64_t corr = a->attrs->i[2];
    weft_reduce_plan p;
    weft_reduce_plan_init(&p, x, mask);
    if (p.n_red == 0 && (kind == WEFT_RED_MAX || kind == WEFT_RED_MIN || kind == WEFT_RED_ARGMAX))
        return weft_error(WEFT_ERR_SHAPE, "%s: reducing over an empty dimension", a->op->name);
    weft_dtype dt = (weft_dtype)x->dtype, odt = (weft_dtype)out->dtype;
    // leading-dims sum/mean of a contiguous float tensor: the column fast path
    int k = 0;
    while (k < x->ndim && (mask & (1u << k))) k++;
    if ((kind == WEFT_RED_SUM || kind == WEFT_RED_MEAN) && (dt == WEFT_F32 || dt == WEFT_F64) && k > 0 &&
        k < x->ndim && mask == (1u << k) - 1 && weft_tensor_is_contiguous(x) && p.n_red > 1 && p.n_out > 1) {
        int64_t R = p.n_red, K = p.n_out;
        double scale = kind == WEFT_RED_MEAN ? 1.0 / (double)R : 1.0;
        double *part = malloc(sizeof(double) * (size_t)((R + COLSUM_ROWS - 1) / COLSUM_ROWS) * (size_t)K);
        if (!part) return weft_error(WEFT_ERR_OOM, "%s: out of memory for the partial sums", a->op->name);
        if (dt == WEFT_F32) colsum_float(WEFT_PTR(const float, x), R, K, WEFT_PTR(float, out), scale, part);
        else colsum_double(WEFT_PTR(const double, x), R, K, WEFT_PTR(double, out), scale, part);
        free(part);
        return WEFT_OK;
    }
    const char *xb = weft_tensor_ptr(x);
    char *ob = weft_tensor_ptr(out);
    size_t esz = weft_dtype_size(dt);
    int64_t n_out = p.n_out;
    int nt = weft_num_threads();
    bool par = nt > 1 && n_out * (p.n_red + 1) >= 2 * WEFT_PAR_GRAIN && n_out >= nt;
#pragma omp parallel for num_threads(nt) if (par) schedule(static)
    for (int64_t o = 0; o < n_out; o++) {
        const char *base = xb + weft_reduce_base(&p, o) * (int64_t)esz;
        if (dt == WEFT_I32 || dt == WEFT_I64) {
            int64_t r = dt == WEFT_I32 ? reduce_int_int32_t(&p, (const int32_t *)base, kind)
                                       : reduce_int_int64_t(&p, (const int64_t *)base, kind);
            if (odt == WEFT_I32) ((int32_t *)ob)[o] = (int32_t)(uint32_t)(uint64_t)r; // wraps like the dtype
            else ((int64_t *)ob)[o] = r;
            continue;
        }
        double r = 0;
        switch (dt) {
        case WEFT_F32: r = reduce_one_float(&p, (const float *)base, kind, corr); break;
        case WEFT_F64: r = reduce_one_double(&p, (const double *)base, kind, corr); break;
        default: break;
        }
        weft_store_f64(ob, odt, o, r);
    }
    return WEFT_OK;
}
