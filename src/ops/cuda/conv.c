// conv2d and 2-D pooling on CUDA, the semantics of cpu/conv.c and cpu/pool.c.
//
// conv2d runs as im2col (a kernel) + cuBLAS, over chunks of images whose
// column matrices fit a fixed budget:
//   forward          y_g (Og, L) = w_g (Og, Kg) @ col_g (Kg, L), one
//                    strided-batched GEMM per group over the chunk's images;
//                    the bias is written first and the GEMM adds onto it.
//                    NHWC (attrs i[7] = 1, groups 1): y_n (L, O) = col^T w^T.
//   backward input   dcol_g = w_g^T @ gy_g, then col2im (a gathering kernel,
//                    no atomics); 1x1 / stride 1 / no padding writes dx directly.
//   backward weight  dw_g (Og, Kg) = gy_g (Og, nb*L) @ col_g^T: the chunk's
//                    columns laid out (C*KH*KW, nb, L) and gy copied to
//                    (O, nb, L), so one GEMM per group sums over the images;
//                    chunks accumulate (beta 1).
//   backward bias    a reduction kernel (one block per channel, in double).
// bf16 / f16 (the autocast path, src/ops/dispatch.c): the same steps with
// cublasGemmEx (half operands, f32 accumulation). Every sum is formed in f32
// and rounded to the half type once: the forward GEMM writes y directly
// (one rounding of the f32 sum + bias); the input gradient's columns are f32
// and col2im rounds its sums on store; the weight gradient accumulates its
// chunks in an f32 buffer that is converted at the end.
// Shapes: L = OH*OW, Cg = C/G, Og = O/G, Kg = Cg*KH*KW, R = C*KH*KW.
#include <limits.h>
#include <stdbool.h>

#include "blas.h"
#include "conv_kernels.h"

// Column buffer budget in elements (128 MiB of f32): chunks of images below it.
#define COL_BUDGET ((int64_t)1 << 25)

static void geom_init(weft_cu_conv_geom *g, const weft_attrs *at, const int64_t *xs, const int64_t *ws,
                      const int64_t *ys) {
    g->N = xs[0], g->C = xs[1], g->H = xs[2], g->W = xs[3];
    g->O = ws[0], g->KH = ws[2], g->KW = ws[3];
    g->OH = ys[2], g->OW = ys[3];
    g->sh = at->i[0], g->sw = at->i[1], g->ph = at->i[2], g->pw = at->i[3], g->dh = at->i[4], g->dw = at->i[5];
    g->G = at->i[6];
}

// Images per chunk: the column matrix of nb images within the budget (at
// least one image), and nb*L within cuBLAS's int range.
static int64_t chunk_images(const weft_cu_conv_geom *g) {
    int64_t L = g->OH * g->OW, per = g->C * g->KH * g->KW * L;
    int64_t nb = per > 0 ? COL_BUDGET / per : g->N;
    if (L > 0 && nb > INT_MAX / L) nb = INT_MAX / L;
    if (nb > g->N) nb = g->N;
    return nb < 1 ? 1 : nb;
}


static weft_status zero(weft_tensor *t, const char *op) {
    if (t->numel == 0) return WEFT_OK;
    size_t n = (size_t)t->numel * weft_dtype_size((weft_dtype)t->dtype);
    return weft_cu_done(cudaMemsetAsync(weft_tensor_ptr(t), 0, n, weft_cu_stream(t)), op);
}

// Column-major C = op(A) op(B) + beta C for `batch` matrices at element
// strides sa, sb, sc (alpha 1). A and B are of dtype ab, C of dtype c: f32 or
// f64 (both = ab), or ab f16 / bf16 with c = ab or f32, computed in f32.
typedef struct gemm_call {
    cublasHandle_t h;
    const char *op;
    weft_dtype ab, c;
} gemm_call;

static cudaDataType_t cu_type(weft_dtype dt) {
    return dt == WEFT_BF16 ? CUDA_R_16BF : dt == WEFT_F16 ? CUDA_R_16F : dt == WEFT_F64 ? CUDA_R_64F : CUDA_R_32F;
}

static weft_status gemm(const gemm_call *c, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                        int64_t k, const void *A, int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb,
                        double beta, void *C, int64_t ldc, int64_t sc, int64_t batch) {
    int64_t dims[] = {m, n, k, lda, ldb, ldc, batch};
    for (int i = 0; i < 7; i++)
        if (dims[i] > INT_MAX)
            return weft_error(WEFT_ERR_SHAPE, "%s: a GEMM dim (%lld) exceeds cuBLAS's int range", c->op,
                              (long long)dims[i]);
    cublasStatus_t s;
    if (c->ab == WEFT_F64) {
        const double one = 1, b = beta;
        s = batch == 1 ? cublasDgemm(c->h, ta, tb, (int)m, (int)n, (int)k, &one, A, (int)lda, B, (int)ldb, &b, C,
                                     (int)ldc)
                       : cublasDgemmStridedBatched(c->h, ta, tb, (int)m, (int)n, (int)k, &one, A, (int)lda, sa, B,
                                                   (int)ldb, sb, &b, C, (int)ldc, sc, (int)batch);
    } else if (c->ab == WEFT_F32) {
        const float one = 1, b = (float)beta;
        s = batch == 1 ? cublasSgemm(c->h, ta, tb, (int)m, (int)n, (int)k, &one, A, (int)lda, B, (int)ldb, &b, C,
                                     (int)ldc)
                       : cublasSgemmStridedBatched(c->h, ta, tb, (int)m, (int)n, (int)k, &one, A, (int)lda, sa, B,
                                                   (int)ldb, sb, &b, C, (int)ldc, sc, (int)batch);
    } else { // f16 / bf16 operands, f32 scalars and accumulation
        const float one = 1, b = (float)beta;
        cudaDataType_t tab = cu_type(c->ab), tc = cu_type(c->c);
        s = batch == 1 ? cublasGemmEx(c->h, ta, tb, (int)m, (int)n, (int)k, &one, A, tab, (int)lda, B, tab, (int)ldb,
                                      &b, C, tc, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
                       : cublasGemmStridedBatchedEx(c->h, ta, tb, (int)m, (int)n, (int)k, &one, A, tab, (int)lda, sa,
                                                    B, tab, (int)ldb, sb, &b, C, tc, (int)ldc, sc, (int)batch,
                                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        return weft_cu_blas_check(s, c->op, batch == 1 ? "cublasGemmEx" : "cublasGemmStridedBatchedEx");
    }
    return weft_cu_blas_check(s, c->op, batch == 1 ? "cublas<t>gemm" : "cublas<t>gemmStridedBatched");
}

// f16 / bf16: the dtype that sums are formed in (f32); else dt itself.
static weft_dtype acc_dtype(int dt) { return dt == WEFT_F16 || dt == WEFT_BF16 ? WEFT_F32 : (weft_dtype)dt; }

// x (N,C,H,W) or NHWC (N,H,W,C), w (O,Cg,KH,KW), bias (O) -> y (N,O,OH,OW) or (N,OH,OW,O)
static weft_status cu_conv2d(const weft_op_args *a) {
    const char *op = "conv2d";
    weft_tensor *x = a->in[0], *w = a->in[1], *b = a->n_in > 2 ? a->in[2] : NULL, *y = a->out[0];
    if (y->numel == 0) return WEFT_OK;
    bool nhwc = a->attrs->i[7] == 1;
    int64_t xsz[4], xst[4], ysz[4]; // NCHW meaning
    static const int nchw_of_nhwc[4] = {0, 3, 1, 2};
    for (int d = 0; d < 4; d++) {
        int e = nhwc ? nchw_of_nhwc[d] : d;
        xsz[d] = x->sizes[e], xst[d] = x->strides[e], ysz[d] = y->sizes[e];
    }
    weft_cu_conv_geom g;
    geom_init(&g, a->attrs, xsz, w->sizes, ysz);
    int dt = x->dtype;
    size_t esz = weft_dtype_size((weft_dtype)dt);
    int64_t L = g.OH * g.OW, Og = g.O / g.G, Kg = g.C / g.G * g.KH * g.KW, R = g.C * g.KH * g.KW;
    cudaStream_t s = weft_cu_stream(y);
    char *yp = weft_tensor_ptr(y);
    weft_status st = WEFT_OK;
    if (b) st = weft_cu_done(weft_cu_conv_bias_fill(dt, yp, y->numel, g.O, nhwc ? 1 : L, weft_tensor_ptr(b),
                                                    b->strides[0], s), op);
    if (st || Kg == 0) return st ? st : b ? WEFT_OK : zero(y, op); // no input channels: y is the bias
    gemm_call gc = {NULL, op, (weft_dtype)dt, (weft_dtype)dt}; // y in its own dtype: one rounding per element
    if ((st = weft_cu_blas_handle(y, op, &gc.h))) return st;
    weft_tensor *wc = weft_kernel_contiguous(w), *col = NULL;
    if (!wc) return weft_last_status();
    const char *wp = weft_tensor_ptr(wc);
    // 1x1, stride 1, no padding over a contiguous NCHW x: the columns are x itself
    bool direct = !nhwc && g.KH == 1 && g.KW == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0 &&
                  weft_tensor_is_contiguous(x);
    int64_t nb = direct ? g.N : chunk_images(&g);
    if (!direct && !(col = weft_tensor_new(1, (const int64_t[]){nb * R * L}, (weft_dtype)dt, y->device)))
        st = weft_last_status();
    double beta = b ? 1 : 0;
    for (int64_t n0 = 0; n0 < g.N && !st; n0 += nb) {
        int64_t cnt = g.N - n0 < nb ? g.N - n0 : nb;
        const char *xn = weft_tensor_ptr(x) + (size_t)(n0 * xst[0]) * esz, *cp = xn;
        if (!direct) {
            st = weft_cu_done(weft_cu_im2col(dt, xn, xst, g, cnt, weft_tensor_ptr(col), R * L, L, s), op);
            cp = weft_tensor_ptr(col);
        }
        if (nhwc) { // y_n^T (O x L, ld O) = w (O x Kg) . col_n (Kg x L), both stored transposed
            if (!st)
                st = gemm(&gc, CUBLAS_OP_T, CUBLAS_OP_T, g.O, L, Kg, wp, Kg, 0, cp, L, R * L, beta,
                          yp + (size_t)(n0 * L * g.O) * esz, g.O, L * g.O, cnt);
            continue;
        }
        // y_g^T (L x Og, ld L) = col_g^T (L x Kg) . w_g^T (Kg x Og), per image
        for (int64_t gi = 0; gi < g.G && !st; gi++)
            st = gemm(&gc, CUBLAS_OP_N, CUBLAS_OP_N, L, Og, Kg, cp + (size_t)(gi * Kg * L) * esz, L, R * L,
                      wp + (size_t)(gi * Og * Kg) * esz, Kg, 0, beta, yp + (size_t)((n0 * g.O + gi * Og) * L) * esz,
                      L, g.O * L, cnt);
    }
    weft_tensor_free(col);
    weft_tensor_free(wc);
    return st;
}

// gy (N,O,OH,OW), w (O,Cg,KH,KW) -> dx (N,C,H,W)
static weft_status cu_conv2d_backward_input(const weft_op_args *a) {
    const char *op = "conv2d_backward_input";
    weft_tensor *gy = a->in[0], *w = a->in[1], *dx = a->out[0];
    if (dx->numel == 0) return WEFT_OK;
    weft_cu_conv_geom g;
    geom_init(&g, a->attrs, dx->sizes, w->sizes, gy->sizes);
    if (g.O == 0) return zero(dx, op);
    int dt = dx->dtype;
    size_t esz = weft_dtype_size((weft_dtype)dt);
    int64_t L = g.OH * g.OW, Og = g.O / g.G, Cg = g.C / g.G, Kg = Cg * g.KH * g.KW, R = g.C * g.KH * g.KW;
    int64_t HW = g.H * g.W;
    cudaStream_t s = weft_cu_stream(dx);
    gemm_call gc = {NULL, op, (weft_dtype)dt, acc_dtype(dt)};
    weft_status st = weft_cu_blas_handle(dx, op, &gc.h);
    if (st) return st;
    weft_tensor *wc = weft_kernel_contiguous(w), *gc_t = wc ? weft_kernel_contiguous(gy) : NULL, *col = NULL;
    if (!gc_t) {
        weft_tensor_free(wc);
        return weft_last_status();
    }
    const char *wp = weft_tensor_ptr(wc), *gp = weft_tensor_ptr(gc_t);
    char *xp = weft_tensor_ptr(dx);
    bool direct = g.KH == 1 && g.KW == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
    int64_t nb = direct ? g.N : chunk_images(&g);
    if (direct) gc.c = (weft_dtype)dt; // the GEMM writes dx itself
    // the columns (nb, R, L) in the accumulation dtype: col2im adds them before rounding
    if (!direct && !(col = weft_tensor_new(1, (const int64_t[]){nb * R * L}, gc.c, dx->device)))
        st = weft_last_status();
    size_t csz = weft_dtype_size(gc.c);
    for (int64_t n0 = 0; n0 < g.N && !st; n0 += nb) {
        int64_t cnt = g.N - n0 < nb ? g.N - n0 : nb;
        // dcol_g^T (L x Kg, ld L) = gy_g^T (L x Og) . w_g (Og x Kg), per image
        char *dcol = direct ? xp + (size_t)(n0 * g.C * HW) * esz : weft_tensor_ptr(col);
        for (int64_t gi = 0; gi < g.G && !st; gi++)
            st = gemm(&gc, CUBLAS_OP_N, CUBLAS_OP_T, L, Kg, Og, gp + (size_t)((n0 * g.O + gi * Og) * L) * esz, L,
                      g.O * L, wp + (size_t)(gi * Og * Kg) * esz, Kg, 0, 0, dcol + (size_t)(gi * Kg * L) * csz, L,
                      R * L, cnt);
        if (!st && !direct)
            st = weft_cu_done(weft_cu_col2im(dt, dcol, R * L, L, g, cnt, xp + (size_t)(n0 * g.C * HW) * esz, s), op);
    }
    weft_tensor_free(col);
    weft_tensor_free(gc_t);
    weft_tensor_free(wc);
    return st;
}

// gy (N,O,OH,OW), x (N,C,H,W) -> dw (O,Cg,KH,KW)
static weft_status cu_conv2d_backward_weight(const weft_op_args *a) {
    const char *op = "conv2d_backward_weight";
    weft_tensor *gy = a->in[0], *x = a->in[1], *dw = a->out[0];
    if (dw->numel == 0) return WEFT_OK;
    weft_cu_conv_geom g;
    geom_init(&g, a->attrs, x->sizes, dw->sizes, gy->sizes);
    if (g.N == 0) return zero(dw, op);
    int dt = dw->dtype;
    size_t esz = weft_dtype_size((weft_dtype)dt);
    int64_t L = g.OH * g.OW, Og = g.O / g.G, Kg = g.C / g.G * g.KH * g.KW, R = g.C * g.KH * g.KW;
    cudaStream_t s = weft_cu_stream(dw);
    gemm_call gc = {NULL, op, (weft_dtype)dt, acc_dtype(dt)};
    weft_status st = weft_cu_blas_handle(dw, op, &gc.h);
    if (st) return st;
    int64_t nb = chunk_images(&g);
    weft_tensor *col = weft_tensor_new(1, (const int64_t[]){nb * R * L}, (weft_dtype)dt, dw->device);
    weft_tensor *gyt = col ? weft_tensor_new(1, (const int64_t[]){g.O * nb * L}, (weft_dtype)dt, dw->device) : NULL;
    // f16 / bf16: the chunks accumulate in an f32 dw (O,Cg,KH,KW), converted into dw at the end
    bool widen = gc.c != (weft_dtype)dt;
    weft_tensor *acc = !gyt ? NULL : widen ? weft_tensor_new(4, dw->sizes, gc.c, dw->device) : weft_tensor_ref(dw);
    if (!acc) st = weft_last_status();
    for (int64_t n0 = 0; n0 < g.N && !st; n0 += nb) {
        int64_t cnt = g.N - n0 < nb ? g.N - n0 : nb, K = cnt * L;
        // gy's images n0.. as (O, cnt, L): a strided copy through two views
        int64_t sz[4] = {cnt, g.O, g.OH, g.OW}, tst[4] = {L, K, g.OW, 1};
        weft_tensor *dst = weft_tensor_alias(gyt, 4, sz, tst, gyt->offset);
        weft_tensor *src = dst ? weft_tensor_alias(gy, 4, sz, gy->strides, gy->offset + n0 * gy->strides[0]) : NULL;
        st = src ? weft_cuda_copy(dst, src) : weft_last_status();
        weft_tensor_free(dst);
        weft_tensor_free(src);
        if (!st)
            st = weft_cu_done(weft_cu_im2col(dt, weft_tensor_ptr(x) + (size_t)(n0 * x->strides[0]) * esz, x->strides,
                                             g, cnt, weft_tensor_ptr(col), L, K, s), op);
        // dw_g^T (Kg x Og, ld Kg) = col_g (Kg x K) . gyt_g^T (K x Og), one call for all groups;
        // the first chunk writes (beta 0), later ones add (beta 1)
        if (!st)
            st = gemm(&gc, CUBLAS_OP_T, CUBLAS_OP_N, Kg, Og, K, weft_tensor_ptr(col), K, Kg * K, weft_tensor_ptr(gyt),
                      K, Og * K, n0 ? 1 : 0, weft_tensor_ptr(acc), Kg, Og * Kg, g.G);
    }
    if (!st && widen) st = weft_cuda_copy(dw, acc); // f32 -> f16 / bf16, rounded once
    weft_tensor_free(acc);
    weft_tensor_free(gyt);
    weft_tensor_free(col);
    return st;
}

// gy (N,O,OH,OW) -> db (O)
static weft_status cu_conv2d_backward_bias(const weft_op_args *a) {
    weft_tensor *db = a->out[0];
    if (db->numel == 0) return WEFT_OK;
    return weft_cu_done(weft_cu_conv_bias_grad(weft_cu_desc(a->in[0]), weft_tensor_ptr(db), weft_cu_stream(db)),
                        "conv2d_backward_bias");
}

// ---- pooling ----
static weft_cu_pool_geom pool_geom(const weft_attrs *at, const int64_t *xs, const int64_t *ys) {
    return (weft_cu_pool_geom){.N = xs[0], .C = xs[1], .H = xs[2], .W = xs[3], .OH = ys[2], .OW = ys[3],
                               .kh = at->i[0], .kw = at->i[1], .sh = at->i[2], .sw = at->i[3], .ph = at->i[4],
                               .pw = at->i[5], .include_pad = at->i[6] != 0};
}

// x (N,C,H,W) -> y, ix (N,C,OH,OW): the maxima and where they are
static weft_status cu_max_pool2d(const weft_op_args *a) {
    weft_tensor *x = a->in[0], *y = a->out[0], *ix = a->out[1];
    return weft_cu_done(weft_cu_max_pool(weft_cu_desc(x), pool_geom(a->attrs, x->sizes, y->sizes), weft_tensor_ptr(y),
                                         ix->dtype, weft_tensor_ptr(ix), weft_cu_stream(y)),
                        "max_pool2d");
}
// gy, ix (N,C,OH,OW) -> dx (N,C,H,W): gy gathered at the recorded maxima, as the CPU scatters it
static weft_status cu_max_pool2d_backward(const weft_op_args *a) {
    weft_tensor *gy = a->in[0], *ix = a->in[1], *dx = a->out[0];
    weft_cu_pool_geom g = pool_geom(a->attrs, dx->sizes, gy->sizes);
    return weft_cu_done(weft_cu_max_pool_bw(weft_cu_desc(gy), weft_cu_desc(ix), g, weft_tensor_ptr(dx), weft_cu_stream(dx)),
                        "max_pool2d_backward");
}
static weft_status cu_avg_pool2d(const weft_op_args *a) {
    weft_tensor *x = a->in[0], *y = a->out[0];
    return weft_cu_done(weft_cu_avg_pool(weft_cu_desc(x), pool_geom(a->attrs, x->sizes, y->sizes), weft_tensor_ptr(y),
                                         weft_cu_stream(y)),
                        "avg_pool2d");
}
static weft_status cu_avg_pool2d_backward(const weft_op_args *a) {
    weft_tensor *gy = a->in[0], *dx = a->out[0];
    return weft_cu_done(weft_cu_avg_pool_bw(weft_cu_desc(gy), pool_geom(a->attrs, dx->sizes, gy->sizes),
                                            weft_tensor_ptr(dx), weft_cu_stream(dx)),
                        "avg_pool2d_backward");
}

void weft_cuda_register_conv(void) {
    // conv2d and its backward ops also in f16 / bf16, so autocast runs them there
    const uint32_t conv_dt = WEFT_DT_FLOAT | WEFT_DT(WEFT_F16) | WEFT_DT(WEFT_BF16);
    weft_cu_register("conv2d", cu_conv2d, conv_dt);
    weft_cu_register("conv2d_backward_input", cu_conv2d_backward_input, conv_dt);
    weft_cu_register("conv2d_backward_weight", cu_conv2d_backward_weight, conv_dt);
    weft_cu_register("conv2d_backward_bias", cu_conv2d_backward_bias, conv_dt);
    weft_cu_register("max_pool2d", cu_max_pool2d, WEFT_DT_FLOAT);
    weft_cu_register("max_pool2d_backward", cu_max_pool2d_backward, WEFT_DT_FLOAT);
    weft_cu_register("avg_pool2d", cu_avg_pool2d, WEFT_DT_FLOAT);
    weft_cu_register("avg_pool2d_backward", cu_avg_pool2d_backward, WEFT_DT_FLOAT);
}
