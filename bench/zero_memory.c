// mpirun: 4
// Per-rank memory of ZeRO (weft/parallel.h) against one unsharded process,
// for the fmnist-mlp and kjv-gpt networks with their model file's optimiser
// (Adam(W): two state tensors per parameter). Measured with the CPU
// allocator's statistics (weft_memory_stats_get): the bytes that creating
// the optimiser takes, for a plain weft_optim over the whole model (the
// peer) and for weft_zero_create (the largest rank's); and the peak bytes of
// one whole training step above what the model and optimiser hold at rest
// Rank 0 prints
//   zero<stage>_optim_state_<net> <MB per rank> MB 0 <MB unsharded>
//   zero<stage>_peak_<net>        <MB per rank> MB 0 <MB unsharded (DDP + weft_optim)>
// so bench/run.sh's ratio is unsharded / per-rank (goal for the state with
// ZeRO-1 at DP=4: >= 3.33, i.e. <= 0.3x). weft_zero_memory's accounting goes
// to stderr. Run by bench/run.sh under 4 ranks (the line above).
#include <stdlib.h>

#include <weft.h>
#include <weft/parallel.h>

#include "bench_model.h"
#include "bench_util.h"

static weft_comm *g_c;
static int g_rank;

static double in_use(void) {
    weft_memory_stats s;
    weft_memory_stats_get(WEFT_DEVICE_CPU, &s);
    return (double)s.bytes_in_use;
}
static double peak(void) {
    weft_memory_stats s;
    weft_memory_stats_get(WEFT_DEVICE_CPU, &s);
    return (double)s.peak_bytes_in_use;
}

static double max_over_ranks(double v) {
    weft_tensor *t = weft_tensor_full_on(0, NULL, WEFT_F64, v, WEFT_DEVICE_CPU);
    weft_dist_all_reduce(g_c, t, WEFT_REDUCE_MAX);
    double r = weft_tensor_item(t);
    weft_tensor_free(t);
    return r;
}

// Peak bytes in use during one step (the model, the optimiser state, the
// batch, activations, gradients, buffers). zero NULL: DDP and the plain optimiser.
static double step_peak(const weft_model_cfg *cfg, weft_module *net, weft_zero *z, weft_ddp *d, weft_optim *opt,
                        weft_tensor *x, weft_tensor *y, int *fail) {
    weft_memory_reset_peak(WEFT_DEVICE_CPU);
    weft_tensor *lg = weft_module_forward(net, x);
    weft_tensor *l = weft_model_loss(cfg, lg, y);
    if (!l || weft_backward(l, NULL, NULL)) *fail = 1;
    weft_tensor_free(lg);
    weft_tensor_free(l);
    if (z ? weft_zero_step(z) != WEFT_OK : weft_ddp_wait(d) != WEFT_OK || weft_optim_step(opt) != WEFT_OK) *fail = 1;
    if (!z) weft_optim_zero_grad(opt);
    return peak();
}

static int run(int argc, char **argv, const char *net_name, const char *path) {
    char name[96];
    snprintf(name, sizeof name, "zero_%s", net_name);
    if (!bench_selected(argc, argv, name) && !bench_selected(argc, argv, net_name)) return 0;
    weft_model_cfg *cfg = weft_model_cfg_load(path);
    if (!cfg) {
        fprintf(stderr, "%s: %s\n", name, weft_last_error());
        return 1;
    }
    const weft_net_cfg *n = &cfg->net;
    weft_generator *g = weft_generator_create(1 + (uint64_t)g_rank);
    weft_module *net = weft_model_build(cfg, g, g);
    weft_tensor *x, *y;
    bench_model_batch(n, g, &x, &y);
    int fail = !net;
    // The unsharded run: DDP and one optimiser over the whole model.
    double b0 = in_use();
    weft_optim *opt = bench_model_optim(n, net);
    double full_state = in_use() - b0;
    weft_ddp *d = weft_ddp_create(g_c, net, NULL);
    fail |= !opt || !d;
    double full_peak = fail ? 0 : step_peak(cfg, net, NULL, d, opt, x, y, &fail);
    full_peak = fail ? 0 : step_peak(cfg, net, NULL, d, opt, x, y, &fail); // the second: state and caches settled
    const weft_optim_opts *oo = opt ? weft_optim_get_opts(opt) : NULL;
    weft_optim_opts o = oo ? *oo : weft_optim_defaults(WEFT_OPTIM_ADAM);
    weft_ddp_free(d);
    weft_optim_free(opt);
    for (int stage = 1; stage <= 2 && !fail; stage++) {
        b0 = in_use();
        weft_zero *z = weft_zero_create(g_c, net, &o, stage);
        double state = max_over_ranks(in_use() - b0);
        fail |= !z;
        double pk = fail ? 0 : step_peak(cfg, net, z, NULL, NULL, x, y, &fail);
        pk = fail ? 0 : max_over_ranks(step_peak(cfg, net, z, NULL, NULL, x, y, &fail));
        weft_zero_mem m = {0};
        if (z) weft_zero_memory(z, &m);
        if (g_rank == 0 && !fail) {
            char line[128];
            snprintf(line, sizeof line, "zero%d_optim_state_%s", stage, net_name);
            bench_report_peer(line, state / 1e6, "MB", 0, full_state / 1e6);
            snprintf(line, sizeof line, "zero%d_peak_%s", stage, net_name);
            bench_report_peer(line, pk / 1e6, "MB", 0, full_peak / 1e6);
            fprintf(stderr,
                    "%s ZeRO-%d over %d ranks (rank 0): params %.3f MB, grads %.3f MB, optimiser state %.3f MB, "
                    "step buffer %.3f MB; unsharded: %.3f / %.3f / %.3f MB; measured state %.3f MB vs %.3f (%.3fx)\n",
                    net_name, stage, weft_comm_size(g_c), m.param_bytes / 1e6, m.grad_bytes / 1e6, m.optim_bytes / 1e6,
                    m.buffer_bytes / 1e6, m.full_param_bytes / 1e6, m.full_grad_bytes / 1e6, m.full_optim_bytes / 1e6,
                    state / 1e6, full_state / 1e6, state / full_state);
        }
        weft_zero_free(z);
    }
    if (fail) fprintf(stderr, "%s: rank %d: %s\n", name, g_rank, weft_last_error());
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_module_free(net);
    weft_generator_free(g);
    weft_model_cfg_free(cfg);
    return fail;
}

int main(int argc, char **argv) {
    weft_set_num_threads(1);
    if (weft_dist_init(&argc, &argv) != WEFT_OK) {
        fprintf(stderr, "zero_memory: %s\n", weft_last_error());
        return 1;
    }
    g_c = weft_comm_world();
    g_rank = weft_comm_rank(g_c);
    int f = 0;
    f |= run(argc, argv, "mlp", "models/fmnist-mlp.cfg");
    f |= run(argc, argv, "gpt", "models/kjv-gpt.cfg");
    weft_dist_finalize();
    return f;
}
