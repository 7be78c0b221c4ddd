// CPU kernel of the fused optimiser updates (src/ops/def_optim.c): copy the
// parameter and state into the outputs unless they already are the inputs'
// storage (the graph executor's in-place update), then run the eager
// optimiser's loop over the outputs.
#include "../../optim/optim_fused.h"
#include "../op.h"

weft_status weft_cpu_optim_update(const weft_op_args *a) {
    int variant = a->op->variant, n_out = a->op->n_out;
    weft_tensor *const *in = a->in, *const *out = a->out;
    // The gradient (after p and the n_out - 1 state tensors) may be a strided
    // view (a transposed matmul gradient): the loop wants it contiguous.
    weft_tensor *g = weft_tensor_contiguous(in[n_out]);
    if (!g) return weft_last_status();
    // Output j is input j (the parameter, then the state).
    for (int j = 0; j < n_out; j++) {
        const weft_tensor *src = in[j];
        if (weft_tensor_ptr(out[j]) == weft_tensor_ptr(src) && weft_tensor_is_contiguous(src)) continue;
        weft_status st = weft_tensor_copy_(out[j], src);
        if (st) {
            weft_tensor_free(g);
            return st;
        }
    }
    weft_dtype dt = (weft_dtype)in[0]->dtype;
    int64_t n = in[0]->numel;
    const weft_attrs *at = a->attrs;
    weft_optim_opts h = {0};
    if (variant <= 1) {
        h.kind = WEFT_OPTIM_SGD;
        h.lr = weft_tensor_item(in[variant == 0 ? 2 : 3]);
        h.weight_decay = at->f[0];
        h.momentum = at->f[1], h.dampening = at->f[2], h.nesterov = at->i[0] != 0;
        bool first = variant == 1 && weft_tensor_item(in[4]) != 0;
        weft_optim_fused_sgd(dt, n, weft_tensor_ptr(out[0]), weft_tensor_ptr(g),
                             variant == 1 ? weft_tensor_ptr(out[1]) : NULL, &h, first);
    } else {
        bool decoupled = at->i[0] != 0;
        h.kind = decoupled ? WEFT_OPTIM_ADAMW : WEFT_OPTIM_ADAM;
        h.lr = weft_tensor_item(in[4]);
        h.beta1 = at->f[0], h.beta2 = at->f[1], h.eps = at->f[2], h.weight_decay = at->f[3];
        weft_optim_fused_adam(dt, n, weft_tensor_ptr(out[0]), weft_tensor_ptr(g), weft_tensor_ptr(out[1]),
                              weft_tensor_ptr(out[2]), &h, decoupled, weft_tensor_item(in[5]), weft_tensor_item(in[6]));
    }
    weft_tensor_free(g);
    return WEFT_OK;
}
