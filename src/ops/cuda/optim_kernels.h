// Launchers of optim_kernels.cu (plain C prototypes): the optimiser ops of
// src/ops/def_optim.c. Inputs may have any strides (a transposed gradient);
// outputs are contiguous and may be the inputs' own storage when those are
// contiguous (the in-place update). An absent optional state tensor has NULL
// data. Arithmetic: src/ops/cpu/optim_loops.h.
#ifndef WEFT_CU_OPTIM_KERNELS_H
#define WEFT_CU_OPTIM_KERNELS_H

#include "cu_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// A host scalar of the op (a 0-d f32 or f64 tensor on the device), read by
// the kernel itself so the update never waits for the host.
typedef struct weft_cu_scalar {
    const void *p;
    int32_t dtype;
} weft_cu_scalar;

// d = g + wd*p; buf = first ? d : mom*buf + (1-damp)*d; d = nesterov ? d + mom*buf : buf; p -= lr*d
// (plain SGD, buf.data NULL: p -= lr*(g + wd*p)). first is a scalar (!= 0: the first step).
cudaError_t weft_cu_sgd_update(weft_cu_tensor p, weft_cu_tensor buf, weft_cu_tensor g, void *p_out, void *buf_out,
                               weft_cu_scalar lr, weft_cu_scalar first, double wd, double mom, double damp,
                               int nesterov, cudaStream_t s);

// d = g + wd*p; sum += d*d; p -= clr * d / (sqrt(sum) + eps)
cudaError_t weft_cu_adagrad_update(weft_cu_tensor p, weft_cu_tensor sum, weft_cu_tensor g, void *p_out,
                                   void *sum_out, weft_cu_scalar clr, double wd, double eps, cudaStream_t s);

// d = g + wd*p; sq = alpha*sq + (1-alpha)*d*d; ga (centered, else NULL data) = alpha*ga + (1-alpha)*d;
// avg = sqrt(sq [- ga*ga]) + eps; buf (momentum, else NULL data) = mom*buf + d/avg, p -= lr*buf; else p -= lr*d/avg
cudaError_t weft_cu_rmsprop_update(weft_cu_tensor p, weft_cu_tensor sq, weft_cu_tensor buf, weft_cu_tensor ga,
                                   weft_cu_tensor g, void *p_out, void *sq_out, void *buf_out, void *ga_out,
                                   weft_cu_scalar lr, double wd, double eps, double alpha, double mom, cudaStream_t s);

// Adam (decoupled = 0) / AdamW (1):
//   p *= 1 - lr*wd (AdamW); d = g + wd*p (Adam); m = b1*m + (1-b1)*d; v = b2*v + (1-b2)*d*d
//   amsgrad (vmax data not NULL): vmax = max(vmax, v), used in place of v
//   p -= step_size * m / (sqrt(v)/bc2_sqrt + eps)
cudaError_t weft_cu_adam_update(weft_cu_tensor p, weft_cu_tensor m, weft_cu_tensor v, weft_cu_tensor vmax,
                                weft_cu_tensor g, void *p_out, void *m_out, void *v_out, void *vmax_out,
                                weft_cu_scalar lr, weft_cu_scalar step_size, weft_cu_scalar bc2_sqrt, double beta1,
                                double beta2, double eps, double wd, int decoupled, cudaStream_t s);

// Adam / AdamW over up to WEFT_CU_ADAM_TABLE contiguous tensors of one dtype
// in one launch, in place, each exactly as weft_cu_adam_update computes it
// (vmax[k] NULL for all k unless amsgrad). block0 is the launcher's.
#define WEFT_CU_ADAM_TABLE 24
typedef struct weft_cu_adam_table {
    void *p[WEFT_CU_ADAM_TABLE], *m[WEFT_CU_ADAM_TABLE], *v[WEFT_CU_ADAM_TABLE], *vmax[WEFT_CU_ADAM_TABLE];
    const void *g[WEFT_CU_ADAM_TABLE];
    int64_t n[WEFT_CU_ADAM_TABLE];
    int32_t block0[WEFT_CU_ADAM_TABLE + 1];
    int32_t count;
} weft_cu_adam_table;
cudaError_t weft_cu_adam_multi(weft_cu_adam_table t, int dtype, weft_cu_scalar lr, weft_cu_scalar step_size,
                               weft_cu_scalar bc2_sqrt, double beta1, double beta2, double eps, double wd,
                               int decoupled, cudaStream_t s);

// *out = *acc + sum of x*x, in f64 (acc, out: device doubles, out may be acc); part: device scratch of
// weft_cu_sumsq_blocks(x.numel) doubles.
int weft_cu_sumsq_blocks(int64_t numel);
cudaError_t weft_cu_sumsq(weft_cu_tensor x, double *part, const double *acc, double *out, cudaStream_t s);

// The same for up to WEFT_CU_SUMSQ_TABLE contiguous tensors of one dtype, in two launches:
// *out = ((*acc + sum x_0^2) + sum x_1^2) + ..., each sum exactly as weft_cu_sumsq's; part: the sum of
// weft_cu_sumsq_blocks(n[k]) doubles. block0 and nb are the launcher's.
#define WEFT_CU_SUMSQ_TABLE 24
typedef struct weft_cu_sumsq_table {
    const void *x[WEFT_CU_SUMSQ_TABLE];
    int64_t n[WEFT_CU_SUMSQ_TABLE];
    int32_t block0[WEFT_CU_SUMSQ_TABLE + 1], nb[WEFT_CU_SUMSQ_TABLE];
    int32_t count;
} weft_cu_sumsq_table;
cudaError_t weft_cu_sumsq_multi(weft_cu_sumsq_table t, int dtype, double *part, const double *acc, double *out,
                                cudaStream_t s);

// out[i] = x[i] * (T)c (out contiguous, x.numel elements of x.dtype).
cudaError_t weft_cu_scale(weft_cu_tensor x, void *out, weft_cu_scalar c, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
