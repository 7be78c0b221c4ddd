// CPU kernels of 2-D max and average pooling and their backward ops.
// One (n,c) plane per parallel task: planes never share output or gradient
// elements, so the backward scatters need no atomics. Inputs may have any
// strides; outputs are contiguous. Max pooling records where each window's
// maximum is (the indices of def_conv.c); its backward scatters through them
// instead of searching the windows again.
#include <math.h>
#include <string.h>

#include "../op.h"

typedef struct pool_geom {
    int64_t N, C, H, W, OH, OW;
    int64_t kh, kw, sh, sw, ph, pw;
    bool include_pad;
} pool_geom;

static void geom_init(pool_geom *g, const weft_attrs *at, const int64_t *xs, const int64_t *ys) {
    g->N = xs[0], g->C = xs[1], g->H = xs[2], g->W = xs[3];
    g->OH = ys[2], g->OW = ys[3];
    g->kh = at->i[0], g->kw = at->i[1], g->sh = at->i[2], g->sw = at->i[3], g->ph = at->i[4], g->pw = at->i[5];
    g->include_pad = at->i[6] != 0;
}

// The window of output (oh,ow), clipped to the input: rows [h0,h1), cols [w0,w1).
// *div: the average's divisor (PyTorch: with count_include_pad the window
// clipped to the padded input, else the real elements only).
static inline void window(const pool_geom *g, int64_t oh, int64_t ow, int64_t *h0, int64_t *h1, int64_t *w0,
                          int64_t *w1, double *div) {
    int64_t hs = oh * g->sh - g->ph, ws = ow * g->sw - g->pw;
    int64_t he = hs + g->kh, we = ws + g->kw;
    int64_t pad_area = ((he < g->H + g->ph ? he : g->H + g->ph) - hs) * ((we < g->W + g->pw ? we : g->W + g->pw) - ws);
    *h0 = hs < 0 ? 0 : hs, *w0 = ws < 0 ? 0 : ws;
    *h1 = he > g->H ? g->H : he, *w1 = we > g->W ? g->W : we;
    *div = g->include_pad ? (double)pad_area : (double)((*h1 - *h0) * (*w1 - *w0));
}

// The common 2x2 / stride 2 / no padding window over rows with unit stride:
// handled without the generic window arithmetic (most CNNs use only this).
static bool is_2x2(const pool_geom *g) {
    return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->ph == 0 && g->pw == 0;
}
static bool big(const pool_geom *g) { return g->N * g->C * g->OH * g->OW * g->kh * g->kw > WEFT_PAR_GRAIN; }

// max_pool2d's indices (def_conv.c): the flat h*W + w of each window's
// maximum within its (n,c) plane, int32 (wide = false) or int64 (wide).
static inline void idx_put(void *ix, bool wide, int64_t i, int64_t v) {
    if (wide) ((int64_t *)ix)[i] = v;
    else ((int32_t *)ix)[i] = (int32_t)v;
}
static inline int64_t idx_get(const void *ix, bool wide, int64_t i) {
    return wide ? ((const int64_t *)ix)[i] : ((const int32_t *)ix)[i];
}

// Row and column (bh, bw) of the window's maximum; NaN wins (as in PyTorch),
// the first maximum among ties. Kept as two numbers: recovering them from a
// flat h*W + w index cost two 64-bit divisions per output, most of the time.
#define ARGMAX_WINDOW(T, xp, xs, h0, h1, w0, w1, bh, bw)          \
    do {                                                          \
        T m_ = -INFINITY;                                         \
        bh = h0, bw = w0;                                         \
        for (int64_t h_ = h0; h_ < h1; h_++) {                    \
            const T *row_ = xp + h_ * xs[2];                      \
            for (int64_t w_ = w0; w_ < w1; w_++) {                \
                T v_ = row_[w_ * xs[3]];                          \
                if (v_ > m_ || v_ != v_) {                        \
                    m_ = v_;                                      \
                    bh = h_, bw = w_;                             \
                    if (v_ != v_) goto found_##T;                 \
                }                                                 \
            }                                                     \
        }                                                         \
    found_##T:;                                                   \
    } while (0)

// One row of 2x2 / stride 2 windows over x rows r0, r1 (unit column
// stride): OW maxima into y and their flat indices into ix (base: the row
// index 2*oh*W of the windows' top row). Window order a b / c d: the first
// maximum of each pair, then of the two pair winners; a NaN wins, the first
// one. That is the first maximum in window order, as ARGMAX_WINDOW.
// The backward row: dx rows d0, d1 get the gradient (gy row gr at column
// stride gs3) at each window's recorded maximum and 0 elsewhere, each
// element written once.
#define DEFINE_2X2(T, I, U)                                                                                    \
    static __attribute__((noinline)) void max2x2_row_##T##_##I(const T *restrict r0, const T *restrict r1,   \
                                                               int64_t OW, I W, I base, T *restrict y,       \
                                                               I *restrict ix) {                              \
        /* Written for GCC to vectorise: short-circuit tests and selects of one width, restrict (no        \
           run-time alias checks), and not inlined into the OpenMP body (where it stayed scalar): 2.5x     \
           faster than the scalar loop, 0.53 ms for (64,32,28,28) f32 on one core. */                       \
        for (int64_t ow = 0; ow < OW; ow++) {                                                                 \
            T a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];                         \
            T ab = (b > a || (b != b && a == a)) ? b : a;                                                     \
            I kab = (b > a || (b != b && a == a)) ? 1 : 0;                                                    \
            T cd = (d > c || (d != d && c == c)) ? d : c;                                                     \
            I kcd = (d > c || (d != d && c == c)) ? W + 1 : W;                                                \
            I lower = cd > ab || (cd != cd && ab == ab);                                                      \
            y[ow] = lower ? cd : ab;                                                                          \
            ix[ow] = base + 2 * (I)ow + (lower ? kcd : kab);                                                  \
        }                                                                                                     \
    }                                                                                                         \
    /* The window's offset k in I's width, wrapping: it equals 0, 1, W or W+1 exactly when the index does,  \
       since base + 2*ow + W + 1 < the plane's size fits I; any index is defined behaviour (an int64 k      \
       would keep the loop scalar). Not inlined, and the contiguous gradient row as its own loop, for the    \
       forward's reason: 2.5-4x as fast. */                                                                  \
    static __attribute__((noinline)) void max2x2_bw_row_##T##_##I(const T *restrict gr, int64_t gs3,          \
                                                                  const I *restrict ix, int64_t OW, I W,      \
                                                                  I base, T *restrict d0, T *restrict d1) {   \
        if (gs3 == 1) {                                                                                       \
            for (int64_t ow = 0; ow < OW; ow++) {                                                             \
                U k = (U)ix[ow] - (U)base - 2 * (U)ow;                                                        \
                T gv = gr[ow];                                                                                \
                d0[2 * ow] = k == 0 ? gv : 0;                                                                 \
                d0[2 * ow + 1] = k == 1 ? gv : 0;                                                             \
                d1[2 * ow] = k == (U)W ? gv : 0;                                                              \
                d1[2 * ow + 1] = k == (U)W + 1 ? gv : 0;                                                      \
            }                                                                                                 \
            return;                                                                                           \
        }                                                                                                     \
        for (int64_t ow = 0; ow < OW; ow++) {                                                                 \
            U k = (U)ix[ow] - (U)base - 2 * (U)ow;                                                            \
            T gv = gr[ow * gs3];                                                                              \
            d0[2 * ow] = k == 0 ? gv : 0;                                                                     \
            d0[2 * ow + 1] = k == 1 ? gv : 0;                                                                 \
            d1[2 * ow] = k == (U)W ? gv : 0;                                                                  \
            d1[2 * ow + 1] = k == (U)W + 1 ? gv : 0;                                                          \
        }                                                                                                     \
    }
DEFINE_2X2(float, int32_t, uint32_t)
DEFINE_2X2(float, int64_t, uint64_t)
DEFINE_2X2(double, int32_t, uint32_t)
DEFINE_2X2(double, int64_t, uint64_t)

#define DEFINE_POOL(T)                                                                                        \
    /* x (N,C,H,W) strided -> y (N,C,OH,OW) and ix (N,C,OH,OW): each window's maximum and where it is. */   \
    static void max_pool_##T(const pool_geom *g, const T *x, const int64_t *xs, T *y, void *ix, bool wide) {  \
        if (is_2x2(g) && xs[3] == 1) {                                                                        \
            _Pragma("omp parallel for num_threads(weft_num_threads()) if (big(g)) schedule(static)")          \
            for (int64_t p = 0; p < g->N * g->C; p++) {                                                        \
                const T *xp = x + (p / g->C) * xs[0] + (p % g->C) * xs[1];                                    \
                for (int64_t oh = 0; oh < g->OH; oh++) {                                                      \
                    const T *r0 = xp + 2 * oh * xs[2];                                                        \
                    int64_t o = (p * g->OH + oh) * g->OW, base = 2 * oh * g->W;                               \
                    if (wide)                                                                                 \
                        max2x2_row_##T##_int64_t(r0, r0 + xs[2], g->OW, g->W, base, y + o, (int64_t *)ix + o);  \
                    else max2x2_row_##T##_int32_t(r0, r0 + xs[2], g->OW, (int32_t)g->W, (int32_t)base, y + o,  \
                                                  (int32_t *)ix + o);                                         \
                }                                                                                             \
            }                                                                                                 \
            return;                                                                                           \
        }                                                                                                     \
        _Pragma("omp parallel for num_threads(weft_num_threads()) if (big(g)) schedule(static)")              \
        for (int64_t p = 0; p < g->N * g->C; p++) {                                                            \
            const T *xp = x + (p / g->C) * xs[0] + (p % g->C) * xs[1];                                        \
            int64_t o = p * g->OH * g->OW;                                                                    \
            for (int64_t oh = 0; oh < g->OH; oh++)                                                            \
                for (int64_t ow = 0; ow < g->OW; ow++, o++) {                                                 \
                    int64_t h0, h1, w0, w1, bh, bw;                                                           \
                    double div;                                                                               \
                    window(g, oh, ow, &h0, &h1, &w0, &w1, &div);                                              \
                    ARGMAX_WINDOW(T, xp, xs, h0, h1, w0, w1, bh, bw);                                         \
                    y[o] = xp[bh * xs[2] + bw * xs[3]];                                                       \
                    idx_put(ix, wide, o, bh * g->W + bw);                                                     \
                }                                                                                             \
        }                                                                                                     \
    }                                                                                                         \
    /* gy (N,C,OH,OW) strided, ix (N,C,OH,OW) contiguous -> dx (N,C,H,W): gy goes to each window's argmax,   \
       added in (oh,ow) order where windows overlap. An index outside the plane (not from the forward)     \
       is skipped. */                                                                                         \
    static void max_pool_bw_##T(const pool_geom *g, const T *gy, const int64_t *gs, const void *ix, bool wide, \
                                T *dx) {                                                                      \
        if (is_2x2(g)) {                                                                                      \
            /* The windows tile the plane: every dx element is written once (the gradient at the  \
               window's argmax, 0 elsewhere), so no memset and no read-modify-write; rows and      \
               columns past the last whole window (odd H or W) get zeros. */                       \
            _Pragma("omp parallel for num_threads(weft_num_threads()) if (big(g)) schedule(static)")          \
            for (int64_t p = 0; p < g->N * g->C; p++) {                                                        \
                int64_t n = p / g->C, c = p % g->C, W = g->W;                                                 \
                const T *gp = gy + n * gs[0] + c * gs[1];                                                     \
                T *dp = dx + p * g->H * W;                                                                    \
                for (int64_t oh = 0; oh < g->OH; oh++) {                                                      \
                    T *d0 = dp + 2 * oh * W, *d1 = d0 + W;                                                    \
                    const T *gr = gp + oh * gs[2];                                                            \
                    int64_t o = (p * g->OH + oh) * g->OW, base = 2 * oh * W;                                  \
                    if (wide)                                                                                 \
                        max2x2_bw_row_##T##_int64_t(gr, gs[3], (const int64_t *)ix + o, g->OW, W, base, d0, d1); \
                    else max2x2_bw_row_##T##_int32_t(gr, gs[3], (const int32_t *)ix + o, g->OW, (int32_t)W,    \
                                                     (int32_t)base, d0, d1);                                  \
                    for (int64_t w = 2 * g->OW; w < W; w++) d0[w] = d1[w] = 0;                                \
                }                                                                                             \
                if (2 * g->OH < g->H) memset(dp + 2 * g->OH * W, 0, sizeof(T) * (size_t)((g->H - 2 * g->OH) * W)); \
            }                                                                                                 \
            return;                                                                                           \
        }                                                                                                     \
        _Pragma("omp parallel for num_threads(weft_num_threads()) if (big(g)) schedule(static)")              \
        for (int64_t p = 0; p < g->N * g->C; p++) {                                                            \
            int64_t n = p / g->C, c = p % g->C, HW = g->H * g->W, o = p * g->OH * g->OW;                      \
            const T *gp = gy + n * gs[0] + c * gs[1];                                                         \
            T *dp = dx + p * HW;                                                                              \
            memset(dp, 0, sizeof(T) * (size_t)HW);                                                            \
            for (int64_t oh = 0; oh < g->OH; oh++)                                                            \
                for (int64_t ow = 0; ow < g->OW; ow++, o++) {                                                 \
                    int64_t i = idx_get(ix, wide, o);                                                         \
                    if (i >= 0 && i < HW) dp[i] += gp[oh * gs[2] + ow * gs[3]];                               \
                }                                                                                             \
        }                                                                                                     \
    }                                                                                                         \
    static void avg_pool_##T(const pool_geom *g, const T *x, const int64_t *xs, T *y) {                       \
        _Pragma("omp parallel for num_threads(weft_num_threads()) if (big(g)) schedule(static)")              \
        for (int64_t p = 0; p < g->N * g->C; p++) {                                                            \
            const T *xp = x + (p / g->C) * xs[0] + (p % g->C) * xs[1];                                        \
            T *yp = y + p * g->OH * g->OW;                                                                    \
            for (int64_t oh = 0; oh < g->OH; oh++)                                                            \
                for (int64_t ow = 0; ow < g->OW; ow++) {                                                      \
                    int64_t h0, h1, w0, w1;                                                                   \
                    double div, s = 0;                                                                        \
                    window(g, oh, ow, &h0, &h1, &w0, &w1, &div);                                              \
                    for (int64_t h = h0; h < h1; h++)                                                         \
                        for (int64_t w = w0; w < w1; w++) s += xp[h * xs[2] + w * xs[3]];                     \
                    yp[oh * g->OW + ow] = (T)(s / div);                                                       \
                }                                                                                             \
        }                                                                                                     \
    }                                                                                                         \
    /* gy (N,C,OH,OW) strided -> dx (N,C,H,W): each window gets gy / divisor. */                              \
    static void avg_pool_bw_##T(const pool_geom *g, const T *gy, const int64_t *gs, T *dx) {                  \
        _Pragma("omp parallel for num_threads(weft_num_threads()) if (big(g)) schedule(static)")              \
        for (int64_t p = 0; p < g->N * g->C; p++) {                                                            \
            const T *gp = gy + (p / g->C) * gs[0] + (p % g->C) * gs[1];                                       \
            T *dp = dx + p * g->H * g->W;                                                                     \
            memset(dp, 0, sizeof(T) * (size_t)(g->H * g->W));                                                 \
            for (int64_t oh = 0; oh < g->OH; oh++)                                                            \
                for (int64_t ow = 0; ow < g->OW; ow++) {                                                      \
                    int64_t h0, h1, w0, w1;                                                                   \
                    double div;                                                                               \
                    window(g, oh, ow, &h0, &h1, &w0, &w1, &div);                                              \
                    T v = (T)(gp[oh * gs[2] + ow * gs[3]] / div);                                             \
                    for (int64_t h = h0; h < h1; h++)                                                         \
                        for (int64_t w = w0; w < w1; w++) dp[h * g->W + w] += v;                              \
                }                                                                                             \
        }                                                                                                     \
    }
DEFINE_POOL(float)
DEFINE_POOL(double)

// x (N,C,H,W) -> y, ix (N,C,OH,OW)
weft_status weft_cpu_max_pool2d(const weft_op_args *a) {
    const weft_tensor *x = a->in[0];
    weft_tensor *y = a->out[0], *ix = a->out[1];
    pool_geom g;
    geom_init(&g, a->attrs, x->sizes, y->sizes);
    bool wide = ix->dtype == WEFT_I64;
    if (x->dtype == WEFT_F64)
        max_pool_double(&g, WEFT_PTR(double, x), x->strides, WEFT_PTR(double, y), weft_tensor_ptr(ix), wide);
    else max_pool_float(&g, WEFT_PTR(float, x), x->strides, WEFT_PTR(float, y), weft_tensor_ptr(ix), wide);
    return WEFT_OK;
}
// gy, ix (N,C,OH,OW) -> dx (N,C,H,W) with (H,W) from attrs i[8..9]
weft_status weft_cpu_max_pool2d_backward(const weft_op_args *a) {
    const weft_tensor *gy = a->in[0];
    weft_tensor *dx = a->out[0], *ix = weft_kernel_contiguous(a->in[1]);
    if (!ix) return weft_last_status();
    pool_geom g;
    geom_init(&g, a->attrs, dx->sizes, gy->sizes);
    bool wide = ix->dtype == WEFT_I64;
    if (gy->dtype == WEFT_F64)
        max_pool_bw_double(&g, WEFT_PTR(double, gy), gy->strides, weft_tensor_ptr(ix), wide, WEFT_PTR(double, dx));
    else max_pool_bw_float(&g, WEFT_PTR(float, gy), gy->strides, weft_tensor_ptr(ix), wide, WEFT_PTR(float, dx));
    weft_tensor_free(ix);
    return WEFT_OK;
}
weft_status weft_cpu_avg_pool2d(const weft_op_args *a) {
    const weft_tensor *x = a->in[0];
    pool_geom g;
    geom_init(&g, a->attrs, x->sizes, a->out[0]->sizes);
    if (x->dtype == WEFT_F64) avg_pool_double(&g, WEFT_PTR(double, x), x->strides, WEFT_PTR(double, a->out[0]));
    else avg_pool_float(&g, WEFT_PTR(float, x), x->strides, WEFT_PTR(float, a->out[0]));
    return WEFT_OK;
}
weft_status weft_cpu_avg_pool2d_backward(const weft_op_args *a) {
    const weft_tensor *gy = a->in[0];
    weft_tensor *dx = a->out[0];
    pool_geom g;
    geom_init(&g, a->attrs, dx->sizes, gy->sizes);
    if (gy->dtype == WEFT_F64) avg_pool_bw_double(&g, WEFT_PTR(double, gy), gy->strides, WEFT_PTR(double, dx));
    else avg_pool_bw_float(&g, WEFT_PTR(float, gy), gy->strides, WEFT_PTR(float, dx));
    return WEFT_OK;
}
