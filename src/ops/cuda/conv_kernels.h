// Launchers of conv_kernels.cu (plain C prototypes): the data movement of
// conv2d around cuBLAS (im2col, col2im, bias) and 2-D pooling. dtype is
// WEFT_CU_F32 or WEFT_CU_F64, and for conv2d's launchers also WEFT_CU_F16 or
// WEFT_CU_BF16.
#ifndef WEFT_CU_CONV_KERNELS_H
#define WEFT_CU_CONV_KERNELS_H

#include "cu_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// x (N,C,H,W), w (O,C/G,KH,KW) -> y (N,O,OH,OW); attrs as src/ops/def_conv.c.
typedef struct weft_cu_conv_geom {
    int64_t N, C, H, W, O, KH, KW, OH, OW;
    int64_t sh, sw, ph, pw, dh, dw, G;
} weft_cu_conv_geom;

// Column matrices hold, for nb images, element (n, r, l) with
// r = (c*KH + kh)*KW + kw (c over all C channels) and l = oh*OW + ow at
// n*cs_img + r*cs_row + l: (nb, C*KH*KW, L) when cs_row = L, or
// (C*KH*KW, nb, L) when cs_img = L and cs_row = nb*L.

// col = the windows of nb images of x (x points at the first one; xs: its
// N,C,H,W strides in elements); padding reads as zero.
cudaError_t weft_cu_im2col(int dtype, const void *x, const int64_t *xs, weft_cu_conv_geom g, int64_t nb, void *col,
                           int64_t cs_img, int64_t cs_row, cudaStream_t s);
// dx (nb,C,H,W) contiguous = the adjoint of im2col applied to col: each
// element sums the column entries that read it, in (kh, kw) order. dtype is
// dx's; col is of that dtype for f32 / f64 and f32 for f16 / bf16 (the sum
// is formed in f32 and rounded once).
cudaError_t weft_cu_col2im(int dtype, const void *col, int64_t cs_img, int64_t cs_row, weft_cu_conv_geom g,
                           int64_t nb, void *dx, cudaStream_t s);
// y (n contiguous elements) = b[(i / inner) % O] (b: O elements at stride bs).
cudaError_t weft_cu_conv_bias_fill(int dtype, void *y, int64_t n, int64_t O, int64_t inner, const void *b,
                                   int64_t bs, cudaStream_t s);
// db (O) = gy (N,O,OH,OW, any strides) summed over N, OH, OW (in double).
cudaError_t weft_cu_conv_bias_grad(weft_cu_tensor gy, void *db, cudaStream_t s);

// x (N,C,H,W) -> y (N,C,OH,OW); pool attrs as src/ops/def_conv.c.
typedef struct weft_cu_pool_geom {
    int64_t N, C, H, W, OH, OW;
    int64_t kh, kw, sh, sw, ph, pw;
    int32_t include_pad;
} weft_cu_pool_geom;

// x any strides; y, dx contiguous; gy any strides.
// max pooling: ix (N,C,OH,OW) holds each window's argmax as a flat h*W + w
// in its (n,c) plane, of ix_dtype WEFT_CU_I32 or WEFT_CU_I64 (src/ops/def_conv.c);
// written contiguous by the forward, read at any strides by the backward.
cudaError_t weft_cu_max_pool(weft_cu_tensor x, weft_cu_pool_geom g, void *y, int ix_dtype, void *ix, cudaStream_t s);
cudaError_t weft_cu_max_pool_bw(weft_cu_tensor gy, weft_cu_tensor ix, weft_cu_pool_geom g, void *dx, cudaStream_t s);
cudaError_t weft_cu_avg_pool(weft_cu_tensor x, weft_cu_pool_geom g, void *y, cudaStream_t s);
cudaError_t weft_cu_avg_pool_bw(weft_cu_tensor gy, weft_cu_pool_geom g, void *dx, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
