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
// Many parameters at once (weft_optim_step; PyTorch's foreach / multi-tensor apply):
//   update_multi (group_1, ..., group_k, scalars...) -> nothing: every group updated in place.
//                       i[15] = the update op (weft_optim_update_op_index), whose attrs f[], i[0] this
//                       op carries; a group is that op's parameter, state and gradient inputs (all
//                       contiguous), the scalars are its host scalars, shared. Each group gets exactly
//                       what the single op computes. On CUDA, Adam / AdamW run as a few multi-tensor
//                       launches; the other kinds and the CPU run the single op's kernel per group.
//
// Clipping (weft_clip_grad_norm, and graph mode's clip):
//   grad_sumsq (acc, x_1, ..., x_k) -> acc'  ((acc + sum of x_1*x_1) + sum of x_2*x_2) + ..., in f64: acc
//                                is 0-d f64, each x any float tensor, any strides; acc' may be written
//                                over acc. Each x's sum is what (acc, x) alone gives, so any grouping of
//                                the gradients into calls gives the same bits. The CPU sums fixed chunks
//                                in order (independent of the thread count); CUDA sums contiguous x of
//                                one dtype in two launches per 24 (clipping's norm in one pass)
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
    if (a->n_in < 2) return weft_error(WEFT_ERR_ARG, "%s: no input to sum (need the accumulator and at least one)", a->op->name);
    for (int i = 1; i < a->n_in; i++) {
        weft_status st = weft_check_dtype(a->op->name, a->in[i], WEFT_DT_FLOAT, "the input");
        if (st) return st;
    }
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

// ---- update_multi ----
static const weft_op_def *const k_updates[] = {
    &weft_op_sgd_update,     &weft_op_sgd_momentum_update,          &weft_op_adagrad_update,
    &weft_op_rmsprop_update, &weft_op_rmsprop_momentum_update,      &weft_op_rmsprop_centered_update,
    &weft_op_rmsprop_centered_momentum_update, &weft_op_adam_update, &weft_op_adam_amsgrad_update};
enum { N_UPDATES = sizeof k_updates / sizeof k_updates[0] };

int weft_optim_update_op_index(const weft_op_def *op) {
    for (int i = 0; i < N_UPDATES; i++)
        if (k_updates[i] == op) return i;
    return -1;
}

const weft_op_def *weft_update_multi_op(const weft_attrs *at) {
    int64_t i = at->i[WEFT_UPDATE_MULTI_OP];
    return i >= 0 && i < N_UPDATES ? k_updates[i] : NULL;
}

weft_status weft_update_multi_groups(const weft_op_args *a, const weft_op_def **u, int *k) {
    *u = weft_update_multi_op(a->attrs);
    if (!*u) return weft_error(WEFT_ERR_ARG, "update_multi: attribute i[%d] names no update op", WEFT_UPDATE_MULTI_OP);
    int G = (*u)->n_out + 1, S = (*u)->n_in - G;
    if (a->n_in < G + S || (a->n_in - S) % G)
        return weft_error(WEFT_ERR_ARG, "update_multi: %d inputs are not groups of %d (%s) followed by %d scalars",
                          a->n_in, G, (*u)->name, S);
    *k = (a->n_in - S) / G;
    return WEFT_OK;
}

weft_op_args weft_update_multi_group(const weft_op_args *a, const weft_op_def *u, int j, weft_tensor **buf) {
    int G = u->n_out + 1, S = u->n_in - G;
    for (int i = 0; i < G; i++) buf[i] = a->in[j * G + i];
    for (int i = 0; i < S; i++) buf[G + i] = a->in[a->n_in - S + i];
    // outputs: the group's parameter and state themselves (in place)
    return (weft_op_args){.op = u, .n_in = u->n_in, .in = buf, .attrs = a->attrs, .n_out = u->n_out, .out = buf};
}

// Each group as its update op would check it, and contiguous: the kernels write the groups in place.
static weft_status infer_update_multi(const weft_op_args *a, weft_out_meta *o) {
    (void)o;
    const weft_op_def *u;
    int k;
    weft_status st = weft_update_multi_groups(a, &u, &k);
    for (int j = 0; j < k && st == WEFT_OK; j++) {
        weft_tensor *buf[WEFT_UPDATE_MAX_IN];
        weft_op_args g = weft_update_multi_group(a, u, j, buf);
        weft_out_meta m[WEFT_MAX_OP_OUT];
        st = u->infer(&g, m);
        for (int i = 0; i <= u->n_out && st == WEFT_OK; i++)
            if (!weft_tensor_is_contiguous(buf[i]))
                st = weft_error(WEFT_ERR_ARG, "%s: input %d is not contiguous", u->name, i);
        if (st) st = weft_error(st, "update_multi: group %d: %s", j, weft_last_error());
    }
    return st;
}

// Every group in turn through its update op's CPU kernel.
static weft_status cpu_update_multi(const weft_op_args *a) {
    const weft_op_def *u;
    int k;
    weft_status st = weft_update_multi_groups(a, &u, &k);
    for (int j = 0; j < k && st == WEFT_OK; j++) {
        weft_tensor *buf[WEFT_UPDATE_MAX_IN];
        weft_op_args g = weft_update_multi_group(a, u, j, buf);
        st = u->kernel[WEFT_CPU].fn(&g);
    }
    return st;
}

weft_op_def weft_op_update_multi = {.name = "update_multi", .n_in = -1, .n_out = 0, .flags = F_OPT,
                                    .infer = infer_update_multi,
                                    .kernel = {[WEFT_CPU] = {cpu_update_multi, WEFT_DT_FLOAT}}};

// dispatched by x's dtype (input 1)
weft_op_def weft_op_grad_sumsq = {.name = "grad_sumsq", .n_in = -1, .n_out = 1, .flags = F_OPT, .dispatch_in = 1,
                                  .infer = infer_sumsq, .kernel = {[WEFT_CPU] = {weft_cpu_grad_sumsq, WEFT_DT_FLOAT}}};
weft_op_def weft_op_grad_scale = {.name = "grad_scale", .n_in = 2, .n_out = 1, .flags = F_OPT,
                                  .infer = infer_scale, .kernel = {[WEFT_CPU] = {weft_cpu_grad_scale, WEFT_DT_FLOAT}}};
