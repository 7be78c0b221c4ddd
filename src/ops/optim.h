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

// update_multi (def_optim.c): attrs.i[WEFT_UPDATE_MULTI_OP] holds the index of
// its update op; the other attrs are that op's.
#define WEFT_UPDATE_MULTI_OP 15
#define WEFT_UPDATE_MAX_IN 8 // inputs of the largest update op (adam_amsgrad_update)
// The index of an update op for that attribute, -1 when op is none.
int weft_optim_update_op_index(const weft_op_def *op);
// The update op named by attrs, or NULL.
const weft_op_def *weft_update_multi_op(const weft_attrs *at);
// update_multi's update op and its group count k, or an error naming what is wrong.
weft_status weft_update_multi_groups(const weft_op_args *a, const weft_op_def **u, int *k);
// Group j of update_multi as the args of its update op, in place (outputs =
// the group's parameter and state inputs); buf holds the inputs (u->n_in).
weft_op_args weft_update_multi_group(const weft_op_args *a, const weft_op_def *u, int j, weft_tensor **buf);

weft_status weft_cpu_sgd_update(const weft_op_args *a);
weft_status weft_cpu_adagrad_update(const weft_op_args *a);
weft_status weft_cpu_rmsprop_update(const weft_op_args *a);
weft_status weft_cpu_adam_update(const weft_op_args *a);
weft_status weft_cpu_grad_sumsq(const weft_op_args *a);
weft_status weft_cpu_grad_scale(const weft_op_args *a);

#endif
