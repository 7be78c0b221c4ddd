// Op entries of the optimiser family: one fused update op per optimiser kind
// and option set, and the two halves of gradient clipping. weft_optim_step
// (src/optim/optim.c) runs them on every device and graph mode
// (src/train/graph_train.c) records them, both from one description of the
// update (src/optim/update.c), so eager and graph steps are bit-identical.
// Kernels: cpu/optim.c (the loops PyTorch's equations give, fused), cuda/optim.c.
// Not differentiable (an update is not part of any loss).
//
// Update ops: inputs are the parameter, its state tensors, the gradient (all
// one shape and a float dtype; the gradient may be strided), then host
// scalars as 0-d float tensors (read as double: f64 gives exactly eager's
// rounding). Outputs: the new parameter and new state, in input order, so
// output j may be written over input j (WEFT_OPF_INPLACE). Per element, with
// d = g + wd*p (wd = 0 when unused):
//
//   sgd_update          (p, g, lr) -> p'                          p -= lr*d
//                       f[0] = weight_decay
//   sgd_momentum_update (p, buf, g, lr, first) -> (p', buf')
//                       buf = first != 0 ? d : momentum*buf + (1-dampening)*d
//                       p -= lr * (nesterov ? d + momentum*buf : buf)
//                       f[0] = weight_decay, f[1] = momentum, f[2] = dampening, i[0] = nesterov
//   adagrad_update      (p, sum, g, clr) -> (p', sum')             sum += d*d; p -= clr * d / (sqrt(sum) + eps)
//                       f[0] = weight_decay, f[1] = eps; clr = lr / (1 + (step-1)*lr_decay)
//   rmsprop_update                   (p, sq, g, lr)          -> (p', sq')
//   rmsprop_momentum_update          (p, sq, buf, g, lr)     -> (p', sq', buf')
//   rmsprop_centered_update          (p, sq, ga, g, lr)      -> (p', sq', ga')
//   rmsprop_centered_momentum_update (p, sq, buf, ga, g, lr) -> (p', sq', buf', ga')
//                       sq = alpha*sq + (1-alpha)*d*d; centered: ga = alpha*ga + (1-alpha)*d,
//                       avg = sqrt(sq - ga*ga) + eps, else avg = sqrt(sq) + eps
//                       momentum: buf = momentum*buf + d/avg, p -= lr*buf; else p -= lr*d/avg
//                       f[0] = weight_decay, f[1] = eps, f[2] = alpha, f[3] = momentum
//   adam_update         (p, m, v, g, lr, step_size, bc2_sqrt) -> (p', m', v')
//   adam_amsgrad_update (p, m, v, vmax, g, lr, step_size, bc2_sqrt) -> (p', m', v', vmax')
//                       AdamW: p *= 1 - lr*wd (and d = g); m = b1*m + (1-b1)*d; v = b2*v + (1-b2)*d*d;
//                       amsgrad: vmax = max(vmax, v), used in place of v;
//                       p -= step_size * m / (sqrt(v)/bc2_sqrt + eps)
//                       f[0] = beta1, f[1] = beta2, f[2] = eps, f[3] = weight_decay, i[0] = decoupled (AdamW);
//                       step_size = lr / (1 - beta1^t), bc2_sqrt = sqrt(1 - beta2^t)
//
// Clipping (weft_clip_grad_norm, and graph mode's clip):
//   grad_sumsq (acc, x) -> acc'  acc + sum of x*x, in f64: acc is 0-d f64, x any float tensor, any
//                                strides; acc' may be written over acc, so one accumulator takes every
//                                gradient in turn. The CPU sums fixed chunks in order (independent of
//                                the thread count)
//   grad_scale (g, c) -> g'      g * (T)c, c a 0-d float tensor; g' may be written over g
#include "optim.h"

// Update ops: n_like tensors shaped like the parameter (p, the state, g), then 0-d scalars.
static weft_status infer_update(const weft_op_args *a, weft_out_meta *o) {
    const char *nm = a->op->name;
    const weft_tensor *p = a->in[0];
    int n_like = a->op->n_out + 1; // outputs are p and the state; the gradient follows them
    weft_status st = weft_check_dtype(nm, p, WEFT_DT_FLOAT, "the parameter");
    if (st || (st = weft_check_flags(nm, a->attrs, 0, 1, "nesterov / decoupled"))) return st;
    for (int i = 1; i < n_like; i++) {
        const weft_tensor *t = a->in[i];
        if (t->dtype != p->dtype || !weft_shape_equal(t->ndim, t->sizes, p->ndim, p->sizes)) {
            char s1[96], s2[96];
            return weft_error(WEFT_ERR_SHAPE, "%s: input %d is %s %s, the parameter is %s %s", nm, i,
                              weft_dtype_name((weft_dtype)t->dtype), weft_tensor_shape_str(t, s1, sizeof s1),
                              weft_dtype_name((weft_dtype)p->dtype), weft_tensor_shape_str(p, s2, sizeof s2));
        }
    }
    for (int i = n_like; i < a->n_in; i++) {
        const weft_tensor *t = a->in[i];
        if (t->numel != 1 || t->ndim != 0)
            return weft_error(WEFT_ERR_SHAPE, "%s: input %d (a host scalar) must be 0-d", nm, i);
        if ((st = weft_check_dtype(nm, t, WEFT_DT_FLOAT, "a host scalar"))) return st;
    }
    for (int j = 0; j < a->op->n_out; j++) weft_meta_set(&o[j], p->ndim, p->sizes, (weft_dtype)p->dtype);
    return WEFT_OK;
}

static weft_status infer_sumsq(const weft_op_args *a, weft_out_meta *o) {
    const weft_tensor *acc = a->in[0];
    if (acc->ndim != 0 || acc->dtype != WEFT_F64)
        return weft_error(WEFT_ERR_SHAPE, "%s: the accumulator (input 0) must be a 0-d f64 tensor", a->op->name);
    weft_status st = weft_check_dtype(a->op->name, a->in[1], WEFT_DT_FLOAT, "the input");
    if (st) return st;
    weft_meta_set(o, 0, NULL, WEFT_F64);
    return WEFT_OK;
}

static weft_status infer_scale(const weft_op_args *a, weft_out_meta *o) {
    const weft_tensor *g = a->in[0], *c = a->in[1];
    weft_status st = weft_check_dtype(a->op->name, g, WEFT_DT_FLOAT, "the gradient");
    if (st || (st = weft_check_dtype(a->op->name, c, WEFT_DT_FLOAT, "the factor"))) return st;
    if (c->ndim != 0) return weft_error(WEFT_ERR_SHAPE, "%s: the factor must be 0-d", a->op->name);
    weft_meta_set(o, g->ndim, g->sizes, (weft_dtype)g->dtype);
    return WEFT_OK;
}

#define F_OPT (WEFT_OPF_NONDIFF | WEFT_OPF_INPLACE)
#define UPDATE(NAME, N_IN, N_OUT, VARIANT, KERNEL)                                                       \
    weft_op_def weft_op_##NAME = {.name = #NAME, .n_in = N_IN, .n_out = N_OUT, .flags = F_OPT,           \
                                  .variant = VARIANT, .infer = infer_update,                             \
                                  .kernel = {[WEFT_CPU] = {KERNEL, WEFT_DT_FLOAT}}};
enum { MOM = WEFT_OPTIM_V_MOMENTUM, CEN = WEFT_OPTIM_V_CENTERED, AMS = WEFT_OPTIM_V_AMSGRAD };
UPDATE(sgd_update, 3, 1, 0, weft_cpu_sgd_update)
UPDATE(sgd_momentum_update, 5, 2, MOM, weft_cpu_sgd_update)
UPDATE(adagrad_update, 4, 2, 0, weft_cpu_adagrad_update)
UPDATE(rmsprop_update, 4, 2, 0, weft_cpu_rmsprop_update)
UPDATE(rmsprop_momentum_update, 5, 3, MOM, weft_cpu_rmsprop_update)
UPDATE(rmsprop_centered_update, 5, 3, CEN, weft_cpu_rmsprop_update)
UPDATE(rmsprop_centered_momentum_update, 6, 4, CEN | MOM, weft_cpu_rmsprop_update)
UPDATE(adam_update, 7, 3, 0, weft_cpu_adam_update)
UPDATE(adam_amsgrad_update, 8, 4, AMS, weft_cpu_adam_update)
#undef UPDATE

// dispatched by x's dtype (input 1)
weft_op_def weft_op_grad_sumsq = {.name = "grad_sumsq", .n_in = 2, .n_out = 1, .flags = F_OPT, .dispatch_in = 1,
                                  .infer = infer_sumsq, .kernel = {[WEFT_CPU] = {weft_cpu_grad_sumsq, WEFT_DT_FLOAT}}};
weft_op_def weft_op_grad_scale = {.name = "grad_scale", .n_in = 2, .n_out = 1, .flags = F_OPT,
                                  .infer = infer_scale, .kernel = {[WEFT_CPU] = {weft_cpu_grad_scale, WEFT_DT_FLOAT}}};
