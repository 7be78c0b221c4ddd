// What src/optim shares with graph mode (src/train/graph_train.c): the one
// description of an optimiser update. weft_optim_step runs it on every
// device with weft_op_apply_into; graph mode records the same op with the
// same attrs and feeds the same host scalars, so both update parameters bit
// for bit alike (like tinygrad's nn/optim.py: one step, kernels chosen by
// the dispatcher).
#ifndef WEFT_OPTIM_IMPL_H
#define WEFT_OPTIM_IMPL_H

#include <weft/optim.h>

#include "../ops/op.h"

// The host scalars an update op reads (0-d f64 tensors after p, the state and g).
typedef enum weft_optim_scalar {
    WEFT_OPTIM_SC_LR,        // lr
    WEFT_OPTIM_SC_FIRST,     // SGD momentum: 1 on the parameter's first update (the buffer starts as d), else 0
    WEFT_OPTIM_SC_CLR,       // AdaGrad: lr / (1 + (step-1)*lr_decay)
    WEFT_OPTIM_SC_STEP_SIZE, // Adam(W): lr / (1 - beta1^step)
    WEFT_OPTIM_SC_BC2_SQRT,  // Adam(W): sqrt(1 - beta2^step)
    WEFT_OPTIM_NUM_SC
} weft_optim_scalar;

enum { WEFT_OPTIM_MAX_STATE = 3, WEFT_OPTIM_MAX_SC = 3 };

// One parameter's update: op(p, state[0..n_state), g, scalar[0..n_scalar)) -> (p', state'...).
typedef struct weft_optim_update {
    const weft_op_def *op; // an update op of src/ops/def_optim.c
    weft_attrs attrs;
    int n_state;
    const char *state[WEFT_OPTIM_MAX_STATE]; // PyTorch's names of the state inputs, in input order
    double state_init;                       // every state tensor's value at creation
    int n_scalar;
    weft_optim_scalar scalar[WEFT_OPTIM_MAX_SC]; // the scalar inputs, in input order
} weft_optim_update;

// The update of every parameter of an optimiser with options o (checked by weft_optim_create).
void weft_optim_update_of(const weft_optim_opts *o, weft_optim_update *u);
// Every host scalar's value for a parameter's step-th update (1 on its first), at learning rate o->lr.
void weft_optim_scalar_values(const weft_optim_opts *o, int64_t step, double v[WEFT_OPTIM_NUM_SC]);
// "lr", "first", "clr", "step_size", "bc2_sqrt" (graph mode's placeholders are "step.<name>").
const char *weft_optim_scalar_name(weft_optim_scalar k);

#endif
