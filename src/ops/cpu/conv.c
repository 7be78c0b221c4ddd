// CPU kernels of conv2d: im2col + GEMM (the shared CPU GEMM, gemm.h), and the
// fused backward ops (col2im of W^T dY for the input, dY col^T summed over the
// batch for the weight). The three entry points at the end hand each f32 call
// to weft_cpu_conv_run (conv_onednn.c), which runs oneDNN's convolution
// instead where that measures faster for the shape (WEFT_CONV).
//
// Threading: with at least two images and enough work, OpenMP threads take
// whole images and call single-threaded GEMMs; each thread's column buffer
// (Cg*KH*KW, OH*OW) stays in its own L2 cache. With one image (or tiny work)
// the image loop is serial and OpenBLAS threads the GEMMs itself.
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "../../device/device_impl.h"
#include "../op.h"
#include "conv_onednn.h"
#include "gemm.h"

// Scratch buffers come from the caching allocator: a fresh malloc of a
// column buffer every call would fault its pages in again each time.
#define scratch_alloc(n) weft_cpu_alloc(n)
#define scratch_free(p) weft_cpu_free(p)

typedef struct conv_geom {
    int64_t N, C, H, W, O, KH, KW, OH, OW;
    int64_t sh, sw, ph, pw, dh, dw, G;
    int64_t Cg, Og, Kg, L; // channels per group (in, out), Cg*KH*KW, OH*OW
    bool direct;           // 1x1, stride 1, no padding: the column matrix is the input itself
} conv_geom;

static void geom_init(conv_geom *g, const weft_attrs *at, const int64_t *xs, const int64_t *ws, const int64_t *ys) {
    g->N = xs[0], g->C = xs[1], g->H = xs[2], g->W = xs[3];
    g->O = ws[0], g->KH = ws[2], g->KW = ws[3];
    g->OH = ys[2], g->OW = ys[3];
    g->sh = at->i[0], g->sw = at->i[1], g->ph = at->i[2], g->pw = at->i[3], g->dh = at->i[4], g->dw = at->i[5];
    g->G = at->i[6];
    g->Cg = g->C / g->G, g->Og = g->O / g->G;
    g->Kg = g->Cg * g->KH * g->KW;
    g->L = g->OH * g->OW;
    g->direct = g->KH == 1 && g->KW == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

// Valid output columns [lo, hi) for kernel column kw: 0 <= ow*sw - pw + kw*dw < W.
static inline void ow_range(const conv_geom *g, int64_t kw, int64_t *lo, int64_t *hi) {
    int64_t a = g->pw - kw * g->dw, b = g->W - 1 + g->pw - kw * g->dw;
    int64_t l = a <= 0 ? 0 : (a + g->sw - 1) / g->sw;
    int64_t h = b < 0 ? 0 : b / g->sw + 1;
    if (h > g->OW) h = g->OW;
    if (l > h) l = h;
    *lo = l, *hi = h;
}

// im2col: x is one image's group slice (Cg,H,W) with element strides xs;
// col (Cg*KH*KW, OH*OW) is contiguous; padding reads as zero.
// col2im: the adjoint, adding col into a contiguous (Cg,H,W) slice.
#define DEFINE_IM2COL(T)                                                                                    \
    static void im2col_##T(const T *x, const int64_t *xs, const conv_geom *g, T *col) {                     \
        for (int64_t c = 0; c < g->Cg; c++)                                                                 \
            for (int64_t kh = 0; kh < g->KH; kh++)                                                          \
                for (int64_t kw = 0; kw < g->KW; kw++) {                                                    \
                    T *row = col + ((c * g->KH + kh) * g->KW + kw) * g->L;                                  \
                    int64_t lo, hi;                                                                         \
                    ow_range(g, kw, &lo, &hi);                                                              \
                    int64_t off = kw * g->dw - g->pw; /* iw = ow*sw + off */                                \
                    for (int64_t oh = 0; oh < g->OH; oh++) {                                                \
                        T *r = row + oh * g->OW;                                                            \
                        int64_t ih = oh * g->sh - g->ph + kh * g->dh;                                       \
                        if (ih < 0 || ih >= g->H) {                                                         \
                            memset(r, 0, sizeof(T) * (size_t)g->OW);                                        \
                            continue;                                                                       \
                        }                                                                                   \
                        const T *xr = x + c * xs[0] + ih * xs[1];                                           \
                        for (int64_t ow = 0; ow < lo; ow++) r[ow] = 0;                                      \
                        if (g->sw == 1 && xs[2] == 1)                                                       \
                            memcpy(r + lo, xr + lo + off, sizeof(T) * (size_t)(hi - lo));                   \
                        else                                                                                \
                            for (int64_t ow = lo; ow < hi; ow++) r[ow] = xr[(ow * g->sw + off) * xs[2]];    \
                        for (int64_t ow = hi; ow < g->OW; ow++) r[ow] = 0;                                  \
                    }                                                                                       \
                }                                                                                           \
    }                                                                                                       \
    static void col2im_##T(const T *col, const conv_geom *g, T *x) {                                        \
        for (int64_t c = 0; c < g->Cg; c++)                                                                 \
            for (int64_t kh = 0; kh < g->KH; kh++)                                                          \
                for (int64_t kw = 0; kw < g->KW; kw++) {                                                    \
                    const T *row = col + ((c * g->KH + kh) * g->KW + kw) * g->L;                            \
                    int64_t lo, hi;                                                                         \
                    ow_range(g, kw, &lo, &hi);                                                              \
                    int64_t off = kw * g->dw - g->pw;                                                       \
                    for (int64_t oh = 0; oh < g->OH; oh++) {                                                \
                        int64_t ih = oh * g->sh - g->ph + kh * g->dh;                                       \
                        if (ih < 0 || ih >= g->H) continue;                                                 \
                        const T *r = row + oh * g->OW;                                                      \
                        T *xr = x + (c * g->H + ih) * g->W;                                                 \
                        if (g->sw == 1) {                                                                   \
                            T *xo = xr + off;                                                               \
                            for (int64_t ow = lo; ow < hi; ow++) xo[ow] += r[ow];                           \
                        } else {                                                                            \
                            for (int64_t ow = lo; ow < hi; ow++) xr[ow * g->sw + off] += r[ow];             \
                        }                                                                                   \
                    }                                                                                       \
                }                                                                                           \
    }
DEFINE_IM2COL(float)
DEFINE_IM2COL(double)

static void im2col(bool dbl, const char *x, const int64_t *xs, const conv_geom *g, void *col) {
    if (dbl) im2col_double((const double *)x, xs, g, col);
    else im2col_float((const float *)x, xs, g, col);
}
static void col2im(bool dbl, const void *col, const conv_geom *g, char *x) {
    if (dbl) col2im_double(col, g, (double *)x);
    else col2im_float(col, g, (float *)x);
}

// C (M,N) = op(A) op(B) + beta C, row-major, alpha 1.
static void gemm(bool dbl, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                 const void *B, int64_t ldb, double beta, void *C, int64_t ldc) {
    weft_cpu_gemm(dbl ? WEFT_F64 : WEFT_F32, ta, tb, M, N, K, 1.0, A, lda, B, ldb, beta, C, ldc);
}

// A contiguous copy of t when it is not contiguous (rare: gradients and
// weights usually are). *tmp receives the buffer to free.
static const char *contig_data(const weft_tensor *t, void **tmp) {
    *tmp = NULL;
    if (weft_tensor_is_contiguous(t)) return weft_tensor_ptr(t);
    size_t esz = weft_dtype_size((weft_dtype)t->dtype);
    char *dst = scratch_alloc(esz * (size_t)(t->numel ? t->numel : 1));
    if (!dst) return NULL;
    const char *src = weft_tensor_ptr(t);
    int64_t idx[WEFT_MAX_DIMS] = {0};
    for (int64_t i = 0; i < t->numel; i++) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
        memcpy(dst + (size_t)i * esz, src + off * (int64_t)esz, esz);
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->sizes[d]) break;
            idx[d] = 0;
        }
    }
    *tmp = dst;
    return dst;
}

// How many threads take images: one per image at most, and only when the
// work (multiply-adds) is worth a parallel region.
static int image_threads(const conv_geom *g) {
    int nt = weft_num_threads();
    if (nt > g->N) nt = (int)g->N;
    double work = (double)g->N * (double)g->O * (double)g->Kg * (double)g->L;
    return work < 2e5 ? 1 : (nt < 1 ? 1 : nt);
}
// Inside our parallel region OpenBLAS must not start its own threads.
static void blas_threads_begin(int nth) {
    if (nth > 1) openblas_set_num_threads(1);
}
static void blas_threads_end(int nth) {
    if (nth > 1) openblas_set_num_threads(weft_num_threads());
}

static inline int thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}
static inline int team_size(void) {
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

// ---- NHWC forward (attrs i[7] = 1, groups 1) ----
// x (N,H,W,C), w (O,C,KH,KW), bias (O) -> y (N,OH,OW,O). Per image:
// col (L, KH*KW*C) gathers, for each output pixel, the C contiguous channels
// of each tap (one memcpy per tap instead of one per output row), and
// y_n (L, O) = col @ wr^T with wr the weight reordered once to (O, KH,KW,C).
// A 1x1 / stride 1 / no padding conv is one (N*H*W, C) @ (C, O) product.
#define DEFINE_IM2COL_NHWC(T)                                                                               \
    static void im2col_nhwc_##T(const T *x, const conv_geom *g, T *col) {                                   \
        int64_t C = g->C, row = g->KH * g->KW * C;                                                          \
        for (int64_t oh = 0; oh < g->OH; oh++)                                                              \
            for (int64_t ow = 0; ow < g->OW; ow++) {                                                        \
                T *r = col + (oh * g->OW + ow) * row;                                                       \
                for (int64_t kh = 0; kh < g->KH; kh++) {                                                    \
                    int64_t ih = oh * g->sh - g->ph + kh * g->dh;                                           \
                    for (int64_t kw = 0; kw < g->KW; kw++, r += C) {                                        \
                        int64_t iw = ow * g->sw - g->pw + kw * g->dw;                                       \
                        if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W) memset(r, 0, sizeof(T) * (size_t)C); \
                        else memcpy(r, x + (ih * g->W + iw) * C, sizeof(T) * (size_t)C);                    \
                    }                                                                                       \
                }                                                                                           \
            }                                                                                               \
    }
DEFINE_IM2COL_NHWC(float)
DEFINE_IM2COL_NHWC(double)

static void fill_bias_rows(bool dbl, char *y, const char *bp, int64_t rows, int64_t O) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < O; o++) {
            if (dbl) ((double *)y)[r * O + o] = ((const double *)bp)[o];
            else ((float *)y)[r * O + o] = ((const float *)bp)[o];
        }
}

static weft_status conv2d_nhwc(const weft_op_args *a) {
    const weft_tensor *x = a->in[0], *w = a->in[1], *b = a->n_in > 2 ? a->in[2] : NULL;
    weft_tensor *y = a->out[0];
    if (y->numel == 0) return WEFT_OK;
    const int64_t *xv = x->sizes, *yv = y->sizes;
    conv_geom g;
    geom_init(&g, a->attrs, (int64_t[]){xv[0], xv[3], xv[1], xv[2]}, w->sizes, (int64_t[]){yv[0], yv[3], yv[1], yv[2]});
    bool dbl = x->dtype == WEFT_F64;
    size_t esz = dbl ? 8 : 4;
    void *wtmp, *btmp = NULL, *xtmp;
    const char *wp = contig_data(w, &wtmp), *bp = b ? contig_data(b, &btmp) : NULL, *xp = contig_data(x, &xtmp);
    char *yp = weft_tensor_ptr(y), *wr = NULL;
    bool oom = !wp || (b && !bp) || !xp;
    int64_t Kg = g.Kg, O = g.O;
    if (!oom && Kg == 0) { // no input channels: y is the bias
        if (bp) fill_bias_rows(dbl, yp, bp, g.N * g.L, O);
        else memset(yp, 0, esz * (size_t)(g.N * g.L * O));
    } else if (!oom) {
        // wr (O, KH, KW, C) from w (O, C, KH, KW)
        wr = scratch_alloc(esz * (size_t)(O * Kg));
        oom = !wr;
        for (int64_t o = 0; !oom && o < O; o++)
            for (int64_t c = 0; c < g.C; c++)
                for (int64_t k = 0; k < g.KH * g.KW; k++)
                    memcpy(wr + (size_t)((o * g.KH * g.KW + k) * g.C + c) * esz,
                           wp + (size_t)((o * g.C + c) * g.KH * g.KW + k) * esz, esz);
        if (!oom && g.direct) {
            if (bp) fill_bias_rows(dbl, yp, bp, g.N * g.L, O);
            gemm(dbl, false, true, g.N * g.L, O, Kg, xp, Kg, wr, Kg, bp ? 1 : 0, yp, O);
        } else if (!oom) {
            int nth = image_threads(&g);
            blas_threads_begin(nth);
#pragma omp parallel num_threads(nth) if (nth > 1)
            {
                void *col = scratch_alloc(esz * (size_t)(g.L * Kg));
                if (!col) oom = true;
#pragma omp for schedule(static)
                for (int64_t n = 0; n < g.N; n++) {
                    if (!col) continue;
                    const char *xn = xp + (size_t)(n * g.H * g.W * g.C) * esz;
                    char *yn = yp + (size_t)(n * g.L * O) * esz;
                    if (dbl) im2col_nhwc_double((const double *)xn, &g, col);
                    else im2col_nhwc_float((const float *)xn, &g, col);
                    if (bp) fill_bias_rows(dbl, yn, bp, g.L, O);
                    gemm(dbl, false, true, g.L, O, Kg, col, Kg, wr, Kg, bp ? 1 : 0, yn, O);
                }
                scratch_free(col);
            }
            blas_threads_end(nth);
        }
    }
    scratch_free(wr);
    scratch_free(wtmp);
    scratch_free(btmp);
    scratch_free(xtmp);
    return oom ? weft_error(WEFT_ERR_OOM, "conv2d: out of memory for the NHWC buffers") : WEFT_OK;
}

// x (N,C,H,W), w (O,Cg,KH,KW), bias (O) -> y (N,O,OH,OW); per image and group:
// y_g (Og, L) = w_g (Og, Kg) @ col_g (Kg, L) (+ bias broadcast along L).
static weft_status im2col_conv2d(const weft_op_args *a) {
    if (a->attrs->i[7] == 1) return conv2d_nhwc(a);
    const weft_tensor *x = a->in[0], *w = a->in[1], *b = a->n_in > 2 ? a->in[2] : NULL;
    weft_tensor *y = a->out[0];
    conv_geom g;
    geom_init(&g, a->attrs, x->sizes, w->sizes, y->sizes);
    bool dbl = x->dtype == WEFT_F64;
    size_t esz = dbl ? 8 : 4;
    void *wtmp, *btmp = NULL;
    const char *wp = contig_data(w, &wtmp), *bp = b ? contig_data(b, &btmp) : NULL;
    const char *xp = weft_tensor_ptr(x);
    char *yp = weft_tensor_ptr(y);
    bool direct = g.direct && weft_tensor_is_contiguous(x);
    int nth = image_threads(&g);
    bool oom = !wp || (b && !bp);
    bool empty = g.Kg == 0; // no input channels: y is the bias (BLAS rejects K = 0 leading dims)
    blas_threads_begin(nth);
#pragma omp parallel num_threads(nth) if (nth > 1)
    {
        void *col = direct || oom || empty ? NULL : scratch_alloc(esz * (size_t)(g.Kg * g.L));
        if (!direct && !empty && !col) oom = true;
#pragma omp for schedule(static)
        for (int64_t n = 0; n < g.N; n++) {
            if (!direct && !empty && !col) continue;
            for (int64_t gi = 0; gi < g.G; gi++) {
                char *yg = yp + (size_t)((n * g.O + gi * g.Og) * g.L) * esz; // (Og, L)
                double beta = 0;
                if (bp) { // rows start at their bias; the GEMM adds onto them
                    beta = 1;
                    for (int64_t o = 0; o < g.Og; o++) {
                        int64_t oc = gi * g.Og + o;
                        if (dbl) {
                            double v = ((const double *)bp)[oc], *r = (double *)yg + o * g.L;
                            for (int64_t l = 0; l < g.L; l++) r[l] = v;
                        } else {
                            float v = ((const float *)bp)[oc], *r = (float *)yg + o * g.L;
                            for (int64_t l = 0; l < g.L; l++) r[l] = v;
                        }
                    }
                }
                if (empty) {
                    if (!bp) memset(yg, 0, esz * (size_t)(g.Og * g.L));
                    continue;
                }
                const char *xg = xp + (size_t)(n * x->strides[0] + gi * g.Cg * x->strides[1]) * esz;
                const void *B = xg;
                if (!direct) {
                    im2col(dbl, xg, x->strides + 1, &g, col);
                    B = col;
                }
                gemm(dbl, false, false, g.Og, g.L, g.Kg, wp + (size_t)(gi * g.Og * g.Kg) * esz, g.Kg, B, g.L, beta,
                     yg, g.L);
            }
        }
        scratch_free(col);
    }
    blas_threads_end(nth);
    scratch_free(wtmp);
    scratch_free(btmp);
    return oom ? weft_error(WEFT_ERR_OOM, "conv2d: out of memory for the column buffer") : WEFT_OK;
}

// gy (N,O,OH,OW), w (O,Cg,KH,KW) -> dx (N,C,H,W); per image and group:
// dcol (Kg, L) = w_g^T (Kg, Og) @ gy_g (Og, L), then col2im into dx.
static weft_status im2col_conv2d_backward_input(const weft_op_args *a) {
    const weft_tensor *gy = a->in[0], *w = a->in[1];
    weft_tensor *dx = a->out[0];
    conv_geom g;
    geom_init(&g, a->attrs, dx->sizes, w->sizes, gy->sizes);
    bool dbl = gy->dtype == WEFT_F64;
    size_t esz = dbl ? 8 : 4;
    void *wtmp, *gtmp;
    const char *wp = contig_data(w, &wtmp), *gp = contig_data(gy, &gtmp);
    char *xp = weft_tensor_ptr(dx);
    int nth = image_threads(&g);
    bool oom = !wp || !gp;
    int64_t HW = g.H * g.W;
    blas_threads_begin(nth);
#pragma omp parallel num_threads(nth) if (nth > 1)
    {
        void *col = g.direct || oom ? NULL : scratch_alloc(esz * (size_t)(g.Kg * g.L));
        if (!g.direct && !col) oom = true;
#pragma omp for schedule(static)
        for (int64_t n = 0; n < g.N; n++) {
            if (!g.direct && !col) continue;
            for (int64_t gi = 0; gi < g.G; gi++) {
                char *xg = xp + (size_t)((n * g.C + gi * g.Cg) * HW) * esz; // (Cg, H, W)
                const char *gyg = gp + (size_t)((n * g.O + gi * g.Og) * g.L) * esz;
                const char *wg = wp + (size_t)(gi * g.Og * g.Kg) * esz;
                if (g.direct) {
                    gemm(dbl, true, false, g.Kg, g.L, g.Og, wg, g.Kg, gyg, g.L, 0, xg, g.L);
                } else {
                    gemm(dbl, true, false, g.Kg, g.L, g.Og, wg, g.Kg, gyg, g.L, 0, col, g.L);
                    memset(xg, 0, esz * (size_t)(g.Cg * HW));
                    col2im(dbl, col, &g, xg);
                }
            }
        }
        scratch_free(col);
    }
    blas_threads_end(nth);
    scratch_free(wtmp);
    scratch_free(gtmp);
    return oom ? weft_error(WEFT_ERR_OOM, "conv2d_backward_input: out of memory") : WEFT_OK;
}

// gy (N,O,OH,OW), x (N,C,H,W) -> dw (O,Cg,KH,KW) = (G, Og, Kg); per group:
// dw_g += gy_g (Og, L) @ col_g^T (L, Kg) over the images. Each thread sums
// its images into a private buffer; the buffers are added in thread order
// (deterministic for a given thread count).
static weft_status im2col_conv2d_backward_weight(const weft_op_args *a) {
    const weft_tensor *gy = a->in[0], *x = a->in[1];
    weft_tensor *dw = a->out[0];
    conv_geom g;
    geom_init(&g, a->attrs, x->sizes, dw->sizes, gy->sizes);
    bool dbl = gy->dtype == WEFT_F64;
    size_t esz = dbl ? 8 : 4;
    void *gtmp;
    const char *gp = contig_data(gy, &gtmp), *xp = weft_tensor_ptr(x);
    char *wp = weft_tensor_ptr(dw);
    bool direct = g.direct && weft_tensor_is_contiguous(x);
    int nth = image_threads(&g);
    int64_t wn = g.O * g.Kg;
    // Thread 0 accumulates straight into dw; the others into part[t-1].
    size_t part_bytes = (size_t)(nth - 1) * (size_t)wn * esz;
    char *part = nth > 1 ? scratch_alloc(part_bytes) : NULL;
    if (part) memset(part, 0, part_bytes);
    bool oom = !gp || (nth > 1 && !part);
    memset(wp, 0, esz * (size_t)wn);
    if (wn == 0 || g.N == 0) { // nothing to accumulate (BLAS rejects zero leading dims)
        scratch_free(part);
        scratch_free(gtmp);
        return gp ? WEFT_OK : weft_error(WEFT_ERR_OOM, "conv2d_backward_weight: out of memory");
    }
    blas_threads_begin(nth);
#pragma omp parallel num_threads(nth) if (nth > 1)
    {
        int t = thread_id();
        char *acc = t == 0 ? wp : part ? part + (size_t)(t - 1) * (size_t)wn * esz : NULL;
        void *col = direct || oom ? NULL : scratch_alloc(esz * (size_t)(g.Kg * g.L));
        if (!direct && !col) oom = true;
        // Static contiguous ranges of images per thread.
        // (the team may be smaller than asked for, e.g. when nested).
        int nteam = team_size();
        int64_t n0 = g.N * t / nteam, n1 = g.N * (t + 1) / nteam;
        for (int64_t n = n0; n < n1 && acc && (direct || col); n++) {
            for (int64_t gi = 0; gi < g.G; gi++) {
                const char *xg = xp + (size_t)(n * x->strides[0] + gi * g.Cg * x->strides[1]) * esz;
                const void *B = xg;
                if (!direct) {
                    im2col(dbl, xg, x->strides + 1, &g, col);
                    B = col;
                }
                const char *gyg = gp + (size_t)((n * g.O + gi * g.Og) * g.L) * esz;
                gemm(dbl, false, true, g.Og, g.Kg, g.L, gyg, g.L, B, g.L, 1.0, acc + (size_t)(gi * g.Og * g.Kg) * esz,
                     g.Kg);
            }
        }
        scratch_free(col);
    }
    blas_threads_end(nth);
    for (int t = 1; t < nth && part; t++) {
        const char *p = part + (size_t)(t - 1) * (size_t)wn * esz;
        if (dbl)
            for (int64_t i = 0; i < wn; i++) ((double *)wp)[i] += ((const double *)p)[i];
        else
            for (int64_t i = 0; i < wn; i++) ((float *)wp)[i] += ((const float *)p)[i];
    }
    scratch_free(part);
    scratch_free(gtmp);
    return oom ? weft_error(WEFT_ERR_OOM, "conv2d_backward_weight: out of memory") : WEFT_OK;
}

// The kernels of the op table (def_conv.c): oneDNN or the im2col code above.
weft_status weft_cpu_conv2d(const weft_op_args *a) { return weft_cpu_conv_run(WEFT_CONV_FWD, a, im2col_conv2d); }
weft_status weft_cpu_conv2d_backward_input(const weft_op_args *a) {
    return weft_cpu_conv_run(WEFT_CONV_BWD_DATA, a, im2col_conv2d_backward_input);
}
weft_status weft_cpu_conv2d_backward_weight(const weft_op_args *a) {
    return weft_cpu_conv_run(WEFT_CONV_BWD_WEIGHT, a, im2col_conv2d_backward_weight);
}

// gy (N,O,OH,OW) -> db (O): each channel sums N rows of L contiguous values.
// 16 independent lanes let the compiler vectorise the row sum without
// reassociating; rows are then added in double.
#define DEFINE_ROWSUM(T)                                                      \
    static double rowsum_##T(const T *p, int64_t L) {                        \
        T acc[16] = {0};                                                      \
        int64_t l = 0;                                                        \
        for (; l + 16 <= L; l += 16)                                          \
            for (int j = 0; j < 16; j++) acc[j] += p[l + j];                  \
        double s = 0;                                                         \
        for (int j = 0; j < 16; j++) s += acc[j];                             \
        for (; l < L; l++) s += p[l];                                         \
        return s;                                                             \
    }
DEFINE_ROWSUM(float)
DEFINE_ROWSUM(double)

static weft_status backward_bias(const weft_op_args *a) {
    const weft_tensor *gy = a->in[0];
    weft_tensor *db = a->out[0];
    void *gtmp;
    const char *gp = contig_data(gy, &gtmp);
    if (!gp) return weft_error(WEFT_ERR_OOM, "conv2d_backward_bias: out of memory");
    int64_t N = gy->sizes[0], O = gy->sizes[1], L = gy->sizes[2] * gy->sizes[3];
    bool dbl = gy->dtype == WEFT_F64;
#pragma omp parallel for num_threads(weft_num_threads()) if (N * O * L > 4 * WEFT_PAR_GRAIN) schedule(static)
    for (int64_t o = 0; o < O; o++) {
        double s = 0;
        for (int64_t n = 0; n < N; n++) {
            int64_t row = (n * O + o) * L;
            s += dbl ? rowsum_double((const double *)gp + row, L) : rowsum_float((const float *)gp + row, L);
        }
        if (dbl) WEFT_PTR(double, db)[o] = s;
        else WEFT_PTR(float, db)[o] = (float)s;
    }
    scratch_free(gtmp);
    return WEFT_OK;
}

weft_status weft_cpu_conv2d_backward_bias(const weft_op_args *a) { return weft_cpu_conv_widened(a, backward_bias); }
