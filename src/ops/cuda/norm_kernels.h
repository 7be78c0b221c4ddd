// Launchers of norm_kernels.cu (plain C prototypes): layer_norm and
// batch_norm with their fused backward ops. Every (R,C) / (N,C,S) buffer is
// contiguous; per-channel vectors of batch_norm are read with a stride.
#ifndef WEFT_CU_NORM_KERNELS_H
#define WEFT_CU_NORM_KERNELS_H

#include "cu_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// x, y (R,C); w, b (C) or NULL; mean, rstd (R). Per row: mean, biased
// variance from the deviations, rstd = 1/sqrt(var + eps), y = (x - mean) rstd w + b.
// dtype is x's: f32 / f64 (everything in it), or bf16 / f16 (x read as it is; w, b, y, mean, rstd f32).
// y_dtype: -1 (y as just said), or WEFT_CU_BF16 / WEFT_CU_F16 where y would be f32 (rounded once).
cudaError_t weft_cu_layer_norm(const void *x, const void *w, const void *b, void *y, void *mean, void *rstd,
                               int dtype, int y_dtype, int64_t R, int64_t C, double eps, cudaStream_t s);
// add_layer_norm: sum = x + res (res: dtype's, or bf16 / f16 with f32 x: res_dtype), then y, mean, rstd
// of sum as weft_cu_layer_norm gives them (y_dtype as there). All (R,C) / (R) contiguous.
cudaError_t weft_cu_add_layer_norm(const void *x, const void *res, int res_dtype, void *sum, const void *w,
                                   const void *b, void *y, void *mean, void *rstd, int dtype, int y_dtype, int64_t R,
                                   int64_t C, double eps, cudaStream_t s);
// gy, x, dx (R,C); mean, rstd (R); w (C) or NULL. dx per row; with dw, db
// (C) not NULL also dw = sum_r gy (x - mean) rstd, db = sum_r gy, through
// `part` (device scratch of weft_cu_layer_norm_part_elems(R, C) elements of the
// statistics' dtype). dtype is x's (and dx's); bf16 / f16 x: everything else f32. gy_dtype: -1 (gy in
// the statistics' dtype), or WEFT_CU_BF16 / WEFT_CU_F16 where that is f32 (a half y's gradient).
// gs (R,C) or NULL (x f32 / f64): added to dx, the bits of an add after it; dxh (R,C) or NULL (x f32): dx also
// in dxh_dtype (WEFT_CU_BF16 / WEFT_CU_F16), the bits of a cast.
cudaError_t weft_cu_layer_norm_backward(const void *gy, int gy_dtype, const void *x, const void *mean,
                                        const void *rstd, const void *w, const void *gs, void *dx, void *dxh,
                                        int dxh_dtype, void *dw, void *db, void *part, int dtype, int64_t R, int64_t C,
                                        cudaStream_t s);
int64_t weft_cu_layer_norm_part_elems(int64_t R, int64_t C);

// One channel's per-channel vector: data and stride (elements); data NULL = absent.
typedef struct weft_cu_vec {
    void *data;
    int64_t stride;
} weft_cu_vec;

// x, y (N,C,S). training: batch mean / biased variance per channel, and the
// running stats (if given) updated in place: rm = (1-momentum) rm + momentum
// mean, rv = (1-momentum) rv + momentum unbiased var (only when N*S > 1);
// eval: the running stats. mean, invstd (C, contiguous) = the stats used;
// y = x scale + shift with scale = invstd w, shift = b - mean scale.
cudaError_t weft_cu_batch_norm(const void *x, void *y, weft_cu_vec w, weft_cu_vec b, weft_cu_vec rm, weft_cu_vec rv,
                               void *mean, void *invstd, int dtype, int64_t N, int64_t C, int64_t S, int training,
                               double momentum, double eps, cudaStream_t s);
// gy, x, dx (N,C,S); mean, invstd (C, contiguous); w per channel or absent.
// dx = k1 gy + k2 (x - mean) + k0 (k2 = k0 = 0 in eval); dw, db (C) written
// when want_wb (zeros otherwise).
cudaError_t weft_cu_batch_norm_backward(const void *gy, const void *x, const void *mean, const void *invstd,
                                        weft_cu_vec w, void *dx, void *dw, void *db, int dtype, int64_t N, int64_t C,
                                        int64_t S, int training, int want_wb, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
