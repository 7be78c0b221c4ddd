// Optimiser updates of parameters on an accelerator (optim_device.c).
#ifndef WEFT_OPTIM_DEVICE_H
#define WEFT_OPTIM_DEVICE_H

#include <weft/optim.h>

#include "../tensor/tensor_impl.h"

// Kinds the device path runs: SGD (any momentum), Adam and AdamW without amsgrad.
bool weft_optim_device_supports(const weft_optim_opts *o);
// One update of p (on its device) with gradient g (same device, contiguous);
// s0, s1: the state slots (SGD: momentum buffer or NULL; Adam: exp_avg,
// exp_avg_sq); step: this parameter's update count, 1 on the first.
weft_status weft_optim_device_update(const weft_optim_opts *o, weft_tensor *p, const weft_tensor *g,
                                     weft_tensor *s0, weft_tensor *s1, int64_t step);

#endif
