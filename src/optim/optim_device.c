// weft_optim_step for parameters on an accelerator: the same updates through
// the op table's fused update ops (src/ops/def_optim.c), whose device kernels
// mirror the CPU loops, written in place into the parameter and its state.
// SGD (with momentum / Nesterov), Adam and AdamW; the step count and the
// bias corrections stay on the host, computed exactly as the CPU path does.
#include <math.h>

#include "../ops/op.h"
#include "optim_device.h"

extern weft_op_def weft_op_sgd_update, weft_op_sgd_momentum_update, weft_op_adam_update;

bool weft_optim_device_supports(const weft_optim_opts *o) {
    switch (o->kind) {
    case WEFT_OPTIM_SGD: return true;
    case WEFT_OPTIM_ADAM:
    case WEFT_OPTIM_ADAMW: return !o->amsgrad;
    default: return false;
    }
}

// A 0-d f64 scalar on dev (the update ops read their hyper-parameters as 0-d tensors).
static weft_tensor *scalar_on(double v, weft_device dev) {
    weft_tensor *h = weft_tensor_scalar(v, WEFT_F64);
    if (!h) return NULL;
    weft_tensor *d = weft_tensor_to(h, dev);
    weft_tensor_free(h);
    return d;
}

weft_status weft_optim_device_update(const weft_optim_opts *o, weft_tensor *p, const weft_tensor *g,
                                     weft_tensor *s0, weft_tensor *s1, int64_t step) {
    weft_device dev = p->device;
    weft_attrs at = {0};
    weft_tensor *sc[3] = {0};
    weft_status st = WEFT_OK;
    if (o->kind == WEFT_OPTIM_SGD && !s0) { // plain SGD: (p, g, lr) -> p
        at.f[0] = o->weight_decay;
        sc[0] = scalar_on(o->lr, dev);
        if (!sc[0]) return weft_last_status();
        weft_tensor *in[3] = {p, (weft_tensor *)g, sc[0]}, *out[1] = {p};
        st = weft_op_apply_into(&weft_op_sgd_update, 3, in, &at, out);
    } else if (o->kind == WEFT_OPTIM_SGD) { // (p, buf, g, lr, first) -> (p, buf)
        at.f[0] = o->weight_decay, at.f[1] = o->momentum, at.f[2] = o->dampening, at.i[0] = o->nesterov;
        sc[0] = scalar_on(o->lr, dev), sc[1] = scalar_on(step == 1, dev);
        if (!sc[0] || !sc[1]) st = weft_last_status();
        weft_tensor *in[5] = {p, s0, (weft_tensor *)g, sc[0], sc[1]}, *out[2] = {p, s0};
        if (st == WEFT_OK) st = weft_op_apply_into(&weft_op_sgd_momentum_update, 5, in, &at, out);
    } else { // adam(w): (p, m, v, g, lr, step_size, bc2_sqrt) -> (p, m, v)
        double bc1 = 1 - pow(o->beta1, (double)step), bc2 = 1 - pow(o->beta2, (double)step);
        at.f[0] = o->beta1, at.f[1] = o->beta2, at.f[2] = o->eps, at.f[3] = o->weight_decay;
        at.i[0] = o->kind == WEFT_OPTIM_ADAMW;
        sc[0] = scalar_on(o->lr, dev), sc[1] = scalar_on(o->lr / bc1, dev), sc[2] = scalar_on(sqrt(bc2), dev);
        if (!sc[0] || !sc[1] || !sc[2]) st = weft_last_status();
        weft_tensor *in[7] = {p, s0, s1, (weft_tensor *)g, sc[0], sc[1], sc[2]}, *out[3] = {p, s0, s1};
        if (st == WEFT_OK) st = weft_op_apply_into(&weft_op_adam_update, 7, in, &at, out);
    }
    for (int i = 0; i < 3; i++) weft_tensor_free(sc[i]);
    return st;
}
