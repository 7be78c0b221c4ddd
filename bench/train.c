// Training throughput of the four standard workloads (models/*.cfg), built
// from their model files exactly as `weft train` builds them, on synthetic
// batches of the right shape (data loading is not what is measured here).
//   train_fmnist_mlp, train_fmnist_cnn   samples/s
//   train_kjv_gpt, train_kjv_lstm        tokens/s
// Twin: bench/peers/train.py (the same networks in PyTorch).
#include <weft.h>

#include "bench_model.h"
#include "bench_util.h"

static int run(int argc, char **argv, const char *name, const char *path, int warmup, int min_steps, double min_s) {
    if (!bench_selected(argc, argv, name)) return 0;
    weft_model_cfg *cfg = weft_model_cfg_load(path);
    if (!cfg) {
        fprintf(stderr, "%s: %s\n", name, weft_last_error());
        return 1;
    }
    const weft_net_cfg *n = &cfg->net;
    weft_generator *g = weft_generator_create(1);
    weft_module *net = weft_model_build(cfg, g, g);
    weft_optim *opt = bench_model_optim(n, net);
    bool lm = n->dataset == WEFT_CFG_KJV;
    weft_tensor *x, *y;
    bench_model_batch(n, g, &x, &y);
    int fail = 0;
#define STEP()                                                                  \
    do {                                                                        \
        weft_tensor *lg = weft_module_forward(net, x);                          \
        weft_tensor *l = weft_model_loss(cfg, lg, y);                           \
        if (!l || weft_backward(l, NULL, NULL) || weft_optim_step(opt)) fail = 1; \
        weft_optim_zero_grad(opt);                                              \
        weft_tensor_free(lg);                                                   \
        weft_tensor_free(l);                                                    \
    } while (0)
    for (int i = 0; i < warmup; i++) STEP();
    double s;
    BENCH_BEST(s, 1, min_steps, min_s, STEP());
    if (fail) fprintf(stderr, "%s: %s\n", name, weft_last_error());
    else if (lm) bench_report(name, (double)(n->batch * n->context) / s, "tokens/s", 1);
    else bench_report(name, (double)n->batch / s, "samples/s", 1);
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_optim_free(opt);
    weft_module_free(net);
    weft_generator_free(g);
    weft_model_cfg_free(cfg);
    return fail;
}

int main(int argc, char **argv) {
    int f = 0;
    f |= run(argc, argv, "train_fmnist_mlp", "models/fmnist-mlp.cfg", 20, 200, 2.0);
    f |= run(argc, argv, "train_fmnist_cnn", "models/fmnist-cnn.cfg", 3, 20, 3.0);
    f |= run(argc, argv, "train_kjv_gpt", "models/kjv-gpt.cfg", 2, 10, 3.0);
    f |= run(argc, argv, "train_kjv_lstm", "models/kjv-lstm.cfg", 2, 10, 3.0);
    return f;
}
