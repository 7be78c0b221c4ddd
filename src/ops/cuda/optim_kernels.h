// Launchers of optim_kernels.cu (plain C prototypes): the fused optimiser
// updates of src/ops/def_optim.c.
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

// Inputs (any strides): p, buf (NULL data for plain SGD), g, all p.numel
// elements of p.dtype (f32/f64). Outputs contiguous: p_out, buf_out (may be
// the inputs' own storage when those are contiguous).
//   d = g + wd*p; buf = first ? d : mom*buf + (1-damp)*d; d = nesterov ? d + mom*buf : buf; p -= lr*d
// (plain SGD: p -= lr*(g + wd*p)). first is a scalar (!= 0: the first step).
cudaError_t weft_cu_sgd_update(weft_cu_tensor p, weft_cu_tensor buf, weft_cu_tensor g, void *p_out, void *buf_out,
                               weft_cu_scalar lr, weft_cu_scalar first, double wd, double mom, double damp,
                               int nesterov, cudaStream_t s);

// Adam (decoupled = 0) / AdamW (1), as src/optim/optim_kernels.h:
//   p *= 1 - lr*wd (AdamW); d = g + wd*p (Adam); m = b1*m + (1-b1)*d; v = b2*v + (1-b2)*d*d
//   p -= step_size * m / (sqrt(v)/bc2_sqrt + eps)
cudaError_t weft_cu_adam_update(weft_cu_tensor p, weft_cu_tensor m, weft_cu_tensor v, weft_cu_tensor g, void *p_out,
                                void *m_out, void *v_out, weft_cu_scalar lr, weft_cu_scalar step_size,
                                weft_cu_scalar bc2_sqrt, double beta1, double beta2, double eps, double wd,
                                int decoupled, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
