// Helpers for the benchmarks that train the standard workloads from their
// model files (train.c, ddp_overlap.c, graph_train.c).
#ifndef WEFT_BENCH_MODEL_H
#define WEFT_BENCH_MODEL_H

#include <weft.h>

// One synthetic batch of the model file's shape: images (B,1,28,28) with
// labels (B), or token ids (B,T) with next-token targets (B,T).
static inline void bench_model_batch(const weft_net_cfg *n, weft_generator *g, weft_tensor **x, weft_tensor **y) {
    if (n->dataset == WEFT_CFG_KJV) {
        *x = weft_tensor_randint(WEFT_DIMS(n->batch, n->context), 0, 256, WEFT_I64, g);
        *y = weft_tensor_randint(WEFT_DIMS(n->batch, n->context), 0, 256, WEFT_I64, g);
    } else {
        *x = weft_tensor_randn(WEFT_DIMS(n->batch, 1, 28, 28), WEFT_F32, g);
        *y = weft_tensor_randint(WEFT_DIMS(n->batch), 0, 10, WEFT_I64, g);
    }
}

// The model file's Adam or AdamW over the network's parameters.
static inline weft_optim *bench_model_optim(const weft_net_cfg *n, weft_module *net) {
    int np = weft_module_param_count(net);
    weft_tensor *params[256];
    for (int i = 0; i < np && i < 256; i++) params[i] = weft_module_param_at(net, i, NULL, 0);
    weft_optim_opts o = weft_optim_defaults(n->optimizer == WEFT_CFG_ADAMW ? WEFT_OPTIM_ADAMW : WEFT_OPTIM_ADAM);
    o.lr = n->lr;
    o.weight_decay = n->weight_decay;
    if (n->betas[0] > 0) o.beta1 = n->betas[0], o.beta2 = n->betas[1];
    return weft_optim_create(&o, np < 256 ? np : 256, params, NULL);
}

#endif
