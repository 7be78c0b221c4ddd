// Op entries of the optimiser family: the fused parameter updates graph mode
// appends to a training step (src/train/graph_train.c). Each runs the eager
// optimiser's own loop (src/optim/optim_kernels.h via optim_fused.h), so a
// graph step updates parameters bit-identically to weft_optim_step. Kernel:
// cpu/optim.c. Not differentiable (an update is not part of any loss).
//
// Inputs: the parameter, the state tensors, the gradient (all one shape and a
// float dtype), then host scalars as 0-d tensors (read as double: feed f64 to
// get exactly eager's rounding). Outputs: the new parameter and new state, in
// input order, so output j may be written over input j (WEFT_OPF_INPLACE).
//
//   sgd_update          (p, g, lr) -> p'
//                       f[0] = weight_decay
//   sgd_momentum_update (p, buf, g, lr, first) -> (p', buf')     first != 0: buf = d
//                       f[0] = weight_decay, f[1] = momentum, f[2] = dampening, i[0] = nesterov
//   adam_update         (p, m, v, g, lr, step_size, bc2_sqrt) -> (p', m', v')
//                       f[0] = beta1, f[1] = beta2, f[2] = eps, f[3] = weight_decay,
//                       i[0] = decoupled (AdamW); step_size = lr / (1 - beta1^t), bc2_sqrt = sqrt(1 - beta2^t)
#include "op.h"

weft_status weft_cpu_optim_update(const weft_op_args *a);

// n_state: tensors shaped like the parameter (p, the state and g); the rest are 0-d scalars.
static weft_status infer_update(const weft_op_args *a, int n_state, weft_out_meta *o) {
    const char *nm = a->op->name;
    const weft_tensor *p = a->in[0];
    weft_status st = weft_check_dtype(nm, p, WEFT_DT_FLOAT, "the parameter");
    if (st) return st;
    for (int i = 1; i < n_state; i++) {
        const weft_tensor *t = a->in[i];
        if (t->dtype != p->dtype || !weft_shape_equal(t->ndim, t->sizes, p->ndim, p->sizes)) {
            char s1[96], s2[96];
            return weft_error(WEFT_ERR_SHAPE, "%s: input %d is %s %s, the parameter is %s %s", nm, i,
                              weft_dtype_name((weft_dtype)t->dtype), weft_tensor_shape_str(t, s1, sizeof s1),
                              weft_dtype_name((weft_dtype)p->dtype), weft_tensor_shape_str(p, s2, sizeof s2));
        }
    }
    for (int i = n_state; i < a->n_in; i++) {
        const weft_tensor *t = a->in[i];
        if (t->numel != 1 || t->ndim != 0)
            return weft_error(WEFT_ERR_SHAPE, "%s: input %d (a host scalar) must be 0-d", nm, i);
        if ((st = weft_check_dtype(nm, t, WEFT_DT_FLOAT, "a host scalar"))) return st;
    }
    for (int j = 0; j < a->op->n_out; j++) weft_meta_set(&o[j], p->ndim, p->sizes, (weft_dtype)p->dtype);
    return WEFT_OK;
}
// Tensors shaped like p: sgd 2, sgd_momentum 3, adam 4 (the gradient is the last of them).
static weft_status infer_sgd(const weft_op_args *a, weft_out_meta *o) { return infer_update(a, 2, o); }
static weft_status infer_sgd_mom(const weft_op_args *a, weft_out_meta *o) { return infer_update(a, 3, o); }
static weft_status infer_adam(const weft_op_args *a, weft_out_meta *o) { return infer_update(a, 4, o); }

#define K_OPT .kernel = {[WEFT_CPU] = {weft_cpu_optim_update, WEFT_DT_FLOAT}}
#define F_OPT (WEFT_OPF_NONDIFF | WEFT_OPF_INPLACE)
weft_op_def weft_op_sgd_update = {.name = "sgd_update", .n_in = 3, .n_out = 1, .flags = F_OPT, .variant = 0,
                                  .infer = infer_sgd, K_OPT};
weft_op_def weft_op_sgd_momentum_update = {.name = "sgd_momentum_update", .n_in = 5, .n_out = 2, .flags = F_OPT,
                                           .variant = 1, .infer = infer_sgd_mom, K_OPT};
weft_op_def weft_op_adam_update = {.name = "adam_update", .n_in = 7, .n_out = 3, .flags = F_OPT, .variant = 2,
                                   .infer = infer_adam, K_OPT};
