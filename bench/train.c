// Training throughput of the four standard workloads (models/*.cfg), built
// from their model files exactly as `weft train` builds them, on synthetic
// batches of the right shape (data loading is not what is measured here).
//   train_fmnist_mlp, train_fmnist_cnn   samples/s
//   train_kjv_gpt, train_kjv_lstm        tokens/s
// Twin: bench/peers/train.py (the same networks in PyTorch).
// WEFT_BENCH_DEVICE=cuda (or cuda:N) runs both on the GPU; each timed step then
// ends by waiting for the device, as the twin's torch.cuda.synchronize().
#include <stdlib.h>
#include <weft.h>
#include <weft/device.h>

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
    weft_device dev = WEFT_DEVICE_CPU, prev = weft_device_get_default();
    const char *ds = getenv("WEFT_BENCH_DEVICE");
    if (ds && *ds && (weft_device_parse(ds, &dev) || weft_device_set_default(dev))) {
        fprintf(stderr, "%s: WEFT_BENCH_DEVICE: %s\n", name, weft_last_error());
        weft_model_cfg_free(cfg);
        return 1;
    }
    weft_generator *g = weft_generator_create(1);
    weft_module *net = weft_model_build(cfg, g, g); // parameters on the default device
    weft_optim *opt = bench_model_optim(n, net);
    bool lm = n->dataset == WEFT_CFG_KJV;
    weft_tensor *x, *y;
    weft_device_set_default(prev);
    bench_model_batch(n, g, &x, &y); // made on the CPU, then moved (as weft train --device does)
    if (dev.type != WEFT_CPU) {
        weft_tensor *xd = weft_tensor_to(x, dev), *yd = weft_tensor_to(y, dev);
        weft_tensor_free(x);
        weft_tensor_free(y);
        x = xd, y = yd;
    }
    int fail = !x || !y || !opt;
#define STEP()                                                                  \
    do {                                                                        \
        weft_tensor *lg = weft_module_forward(net, x);                          \
        weft_tensor *l = weft_model_loss(cfg, lg, y);                           \
        if (!l || weft_backward(l, NULL, NULL) || weft_optim_step(opt)) fail = 1; \
        weft_optim_zero_grad(opt);                                              \
        weft_tensor_free(lg);                                                   \
        weft_tensor_free(l);                                                    \
        if (dev.type != WEFT_CPU) weft_device_synchronize(dev);                 \
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
