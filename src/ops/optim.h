// Shared between the optimiser op entries (def_optim.c) and their kernels
// (cpu/optim.c, cuda/optim.c).
#ifndef WEFT_OPS_OPTIM_H
#define WEFT_OPS_OPTIM_H

#include "op.h"

// weft_op_def.variant of the update ops: which optional state the op carries.
enum {
    WEFT_OPTIM_V_MOMENTUM = 1, // sgd_momentum_update; rmsprop_*momentum_update
    WEFT_OPTIM_V_CENTERED = 2, // rmsprop_centered*_update
    WEFT_OPTIM_V_AMSGRAD = 4,  // adam_amsgrad_update
};

weft_status weft_cpu_sgd_update(const weft_op_args *a);
weft_status weft_cpu_adagrad_update(const weft_op_args *a);
weft_status weft_cpu_rmsprop_update(const weft_op_args *a);
weft_status weft_cpu_adam_update(const weft_op_args *a);
weft_status weft_cpu_grad_sumsq(const weft_op_args *a);
weft_status weft_cpu_grad_scale(const weft_op_args *a);

#endif
