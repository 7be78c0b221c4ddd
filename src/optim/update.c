// The one description of an optimiser update (optim_impl.h): for each kind
// and option set, the update op of src/ops/def_optim.c, its attrs, the state
// tensors it takes and the host scalars it reads, with the scalars' values
// for a given step (PyTorch 1.13's equations, computed in double).
#include <math.h>
#include <string.h>

#include "optim_impl.h"

extern weft_op_def weft_op_sgd_update, weft_op_sgd_momentum_update, weft_op_adagrad_update, weft_op_rmsprop_update,
    weft_op_rmsprop_momentum_update, weft_op_rmsprop_centered_update, weft_op_rmsprop_centered_momentum_update,
    weft_op_adam_update, weft_op_adam_amsgrad_update;

static const char *const sc_names[WEFT_OPTIM_NUM_SC] = {"lr", "first", "clr", "step_size", "bc2_sqrt"};

const char *weft_optim_scalar_name(weft_optim_scalar k) {
    return (unsigned)k < WEFT_OPTIM_NUM_SC ? sc_names[k] : NULL;
}

static void add_state(weft_optim_update *u, const char *name) { u->state[u->n_state++] = name; }
static void add_scalar(weft_optim_update *u, weft_optim_scalar k) { u->scalar[u->n_scalar++] = k; }

void weft_optim_update_of(const weft_optim_opts *o, weft_optim_update *u) {
    memset(u, 0, sizeof *u);
    double *f = u->attrs.f;
    int64_t *i = u->attrs.i;
    switch (o->kind) {
    case WEFT_OPTIM_SGD:
        f[0] = o->weight_decay;
        add_scalar(u, WEFT_OPTIM_SC_LR);
        if (o->momentum == 0) {
            u->op = &weft_op_sgd_update;
            break;
        }
        u->op = &weft_op_sgd_momentum_update;
        f[1] = o->momentum, f[2] = o->dampening, i[0] = o->nesterov;
        add_state(u, "momentum_buffer");
        add_scalar(u, WEFT_OPTIM_SC_FIRST);
        break;
    case WEFT_OPTIM_ADAGRAD:
        u->op = &weft_op_adagrad_update;
        f[0] = o->weight_decay, f[1] = o->eps;
        add_state(u, "sum");
        u->state_init = o->initial_accumulator_value; // eagerly, as PyTorch
        add_scalar(u, WEFT_OPTIM_SC_CLR);
        break;
    case WEFT_OPTIM_RMSPROP: {
        bool mom = o->momentum > 0;
        u->op = mom ? (o->centered ? &weft_op_rmsprop_centered_momentum_update : &weft_op_rmsprop_momentum_update)
                    : (o->centered ? &weft_op_rmsprop_centered_update : &weft_op_rmsprop_update);
        f[0] = o->weight_decay, f[1] = o->eps, f[2] = o->alpha, f[3] = o->momentum;
        add_state(u, "square_avg");
        if (mom) add_state(u, "momentum_buffer");
        if (o->centered) add_state(u, "grad_avg");
        add_scalar(u, WEFT_OPTIM_SC_LR);
        break;
    }
    default: // adam, adamw
        u->op = o->amsgrad ? &weft_op_adam_amsgrad_update : &weft_op_adam_update;
        f[0] = o->beta1, f[1] = o->beta2, f[2] = o->eps, f[3] = o->weight_decay;
        i[0] = o->kind == WEFT_OPTIM_ADAMW;
        add_state(u, "exp_avg");
        add_state(u, "exp_avg_sq");
        if (o->amsgrad) add_state(u, "max_exp_avg_sq");
        add_scalar(u, WEFT_OPTIM_SC_LR);
        add_scalar(u, WEFT_OPTIM_SC_STEP_SIZE);
        add_scalar(u, WEFT_OPTIM_SC_BC2_SQRT);
        break;
    }
}

void weft_optim_scalar_values(const weft_optim_opts *o, int64_t step, double v[WEFT_OPTIM_NUM_SC]) {
    v[WEFT_OPTIM_SC_LR] = o->lr;
    v[WEFT_OPTIM_SC_FIRST] = step == 1;
    v[WEFT_OPTIM_SC_CLR] = o->lr / (1 + (double)(step - 1) * o->lr_decay);
    double bc1 = 1 - pow(o->beta1, (double)step), bc2 = 1 - pow(o->beta2, (double)step);
    v[WEFT_OPTIM_SC_STEP_SIZE] = o->lr / bc1;
    v[WEFT_OPTIM_SC_BC2_SQRT] = sqrt(bc2);
}
