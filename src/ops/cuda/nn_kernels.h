// Launchers of nn_kernels.cu (plain C prototypes): softmax, log_softmax and
// their fused backward, cross-entropy (+ backward), dropout.
#ifndef WEFT_CU_NN_KERNELS_H
#define WEFT_CU_NN_KERNELS_H

#include "cu_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// x, y contiguous (outer, D, inner), softmax over D; lg: log_softmax. dtype (x's) f32/f64, or bf16 / f16 with
// y f32.
cudaError_t weft_cu_softmax(const void *x, void *y, int dtype, int64_t outer, int64_t D, int64_t inner, int lg,
                            cudaStream_t s);
// g, y, dx contiguous (outer, D, inner): softmax dx = y (g - sum(g y)),
// log_softmax dx = g - exp(y) sum(g), sums over D. dtype (dx's): f32 / f64 as g and y, or bf16 / f16 with
// g and y f32 (dx rounded once).
cudaError_t weft_cu_softmax_backward(const void *g, const void *y, void *dx, int dtype, int64_t outer, int64_t D,
                                     int64_t inner, int lg, cudaStream_t s);

// Targets (N) of dtype tdt (i32/i64), element r at tg[r * tstride]. A target
// outside [0, C) is reported into rep as op `what` (a static string; the
// host does not wait: device/cuda/cuda_report.h); its row's loss is NaN and
// its gradient row has no -1 term.
// out (0-d) = mean over rows r of logsumexp(x_r) - x_r[t_r]; x (N,C) contiguous
// of dtype f32 / f64 / bf16 / f16; out is x's dtype, f32 for the half types
// (read as they are, f32 arithmetic); rowloss: N doubles of device scratch.
// N == 0 gives NaN.
cudaError_t weft_cu_cross_entropy(const void *x, int dtype, const void *tg, int tdt, int64_t tstride, int64_t N,
                                  int64_t C, double *rowloss, void *out, weft_cuda_report *rep, const char *what,
                                  cudaStream_t s);
// dx (N,C, x's dtype) = (softmax(x) - onehot(t)) g / N; g: one element of the loss's dtype on the device.
cudaError_t weft_cu_cross_entropy_backward(const void *x, int dtype, const void *tg, int tdt, int64_t tstride,
                                           int64_t N, int64_t C, const void *g, void *dx, weft_cuda_report *rep,
                                           const char *what, cudaStream_t s);

// y (contiguous, x's shape) = x * keep / (1 - p), element i (row-major) kept
// when u_i >= p, u_i from Philox4x32-10(key seed, counter off + i) exactly as
// weft_philox and cpu/dropout.c draw it.
cudaError_t weft_cu_dropout(weft_cu_tensor x, void *y, uint64_t seed, uint64_t off, double p, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
