// The eager optimiser's fused update loops (optim_kernels.h), exposed to the
// graph ops of src/ops/def_optim.c so graph mode runs the SAME arithmetic as
// weft_optim_step (bit-identical results). Pointers are contiguous arrays of
// n elements of dt (f32 or f64); buf may be NULL (plain SGD).
#ifndef WEFT_OPTIM_FUSED_H
#define WEFT_OPTIM_FUSED_H

#include <weft/optim.h>

// p -= lr*d as weft_optim_step's SGD (h: lr, weight_decay, momentum, dampening, nesterov).
void weft_optim_fused_sgd(weft_dtype dt, int64_t n, void *p, const void *g, void *buf, const weft_optim_opts *h,
                          bool first);
// Adam (decoupled = false) / AdamW (true) as weft_optim_step (h: lr, weight_decay,
// beta1, beta2, eps); step_size = lr / bc1 and bc2_sqrt = sqrt(bc2) in double.
void weft_optim_fused_adam(weft_dtype dt, int64_t n, void *p, const void *g, void *m, void *v,
                           const weft_optim_opts *h, bool decoupled, double step_size, double bc2_sqrt);

#endif
