// Training throughput of the four standard workloads (models/*.cfg), built
// from their model files exactly as `weft train` builds them, on synthetic
// batches of the right shape (data loading is not what is measured here).
//   train_fmnist_mlp, train_fmnist_cnn   samples/s
//   train_kjv_gpt, train_kjv_lstm        tokens/s
//   train_kjv_gru                        tokens/s of models/kjv-gru.cfg (not one of the four)
//   train_gpt2_small_cuda                tokens/s of models/gpt2-small-bytes.cfg (bf16 autocast, AdamW),
//                                        on a GPU only (WEFT_BENCH_DEVICE=cuda); the peer is PyTorch eager
//                                        with scaled_dot_product_attention. train_gpt2_small_cuda_vs_compile:
//                                        the same number against torch.compile. Also prints the model FLOP
//                                        utilisation on stderr (6N + 12 L T d FLOPs per token, issue 16),
//                                        and the peak memory in use, by kind (weft_memory_stats.kind_peak).
// Twin: bench/peers/train.py (the same networks in PyTorch).
// WEFT_BENCH_DEVICE=cuda (or cuda:N) runs both on the GPU; each timed step then
// ends by waiting for the device, as the twin's torch.cuda.synchronize().
#include <stdlib.h>
#include <weft.h>
#include <weft/device.h>

#include "bench_model.h"
#include "bench_util.h"

static int run(int argc, char **argv, const char *name, const char *path, int warmup, int min_steps, double min_s,
               bool gpu_only) {
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
    if (gpu_only && dev.type == WEFT_CPU) { // 86M parameters: a GPU workload
        weft_model_cfg_free(cfg);
        return 0;
    }
    weft_dtype ac = n->precision == WEFT_CFG_BF16 ? WEFT_BF16 : n->precision == WEFT_CFG_F16 ? WEFT_F16 : WEFT_F32;
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
    int fail = !x || !y || !opt, np = opt ? weft_optim_param_count(opt) : 0;
    weft_tensor **params = calloc((size_t)np + 1, sizeof *params);
    for (int i = 0; i < np && params; i++) params[i] = weft_optim_param_at(opt, i);
    fail |= !params;
#define STEP()                                                                  \
    do {                                                                        \
        weft_autocast_set(ac); /* the forward pass, as weft train does */      \
        if (weft_autocast_cache_fill(params, np)) fail = 1;                     \
        weft_tensor *lg = weft_module_forward(net, x);                          \
        weft_tensor *l = weft_model_loss(cfg, lg, y);                           \
        weft_autocast_set(WEFT_F32);                                            \
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
    else if (gpu_only) {
        double tps = (double)(n->batch * n->context) / s, N = (double)weft_module_num_elements(net);
        int64_t L = 0, d = 0;
        for (int i = 0; i < cfg->n_layers; i++)
            if (cfg->layers[i].type == WEFT_CFG_TRANSFORMER) L += cfg->layers[i].attn.blocks, d = cfg->layers[i].attn.dim;
        double flops = 6 * N + 12.0 * (double)L * (double)n->context * (double)d; // per token
        bench_report(name, tps, "tokens/s", 1);
        bench_report("train_gpt2_small_cuda_vs_compile", tps, "tokens/s", 1);
        fprintf(stderr, "%s: %.1f ms a step, %.3g TFLOP/s of model FLOPs (%.0f per token)\n", name, s * 1e3,
                tps * flops * 1e-12, flops);
        weft_memory_stats ms;
        if (weft_memory_stats_get(dev, &ms) == WEFT_OK) { // peaks since the process began, warm-up included
            fprintf(stderr, "%s: peak MiB in use %.0f:", name, (double)ms.peak_bytes_in_use / 1048576.0);
            for (int k = 0; k < WEFT_MEM_NUM_KINDS; k++)
                fprintf(stderr, " %s %.0f", weft_memory_kind_name((weft_memory_kind)k),
                        (double)ms.kind_peak[k] / 1048576.0);
            fprintf(stderr, "\n");
        }
    } else if (lm) bench_report(name, (double)(n->batch * n->context) / s, "tokens/s", 1);
    else bench_report(name, (double)n->batch / s, "samples/s", 1);
    free(params);
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
    f |= run(argc, argv, "train_fmnist_mlp", "models/fmnist-mlp.cfg", 20, 200, 2.0, false);
    f |= run(argc, argv, "train_fmnist_cnn", "models/fmnist-cnn.cfg", 3, 20, 3.0, false);
    f |= run(argc, argv, "train_kjv_gpt", "models/kjv-gpt.cfg", 2, 10, 3.0, false);
    f |= run(argc, argv, "train_kjv_lstm", "models/kjv-lstm.cfg", 2, 10, 3.0, false);
    f |= run(argc, argv, "train_kjv_gru", "models/kjv-gru.cfg", 2, 10, 3.0, false);
    f |= run(argc, argv, "train_gpt2_small_cuda", "models/gpt2-small-bytes.cfg", 3, 10, 3.0, true);
    return f;
}
