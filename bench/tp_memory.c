// mpirun: 2
// What tensor parallelism saves in memory: per-rank peak bytes of parameters
// plus activations (everything a training step's forward and backward hold:
// saved tensors, gradients, temporaries) for the kjv-gpt network with TP = 2,
// against the same step in one process. Measured with the CPU allocator's
// statistics (weft_memory_stats_get): parameters' bytes, plus the peak of
// bytes in use during forward + backward above what was in use before it.
// Rank 0 first runs the whole model alone (rank 1 waits), then both run the
// TP = 2 model (weft_tp_model_build) on the same batch, without and with
// sequence parallelism:
//   tp_memory_gpt      <per-rank MB at TP=2> MB 0 <one-process MB>
//   tp_memory_gpt_seq  the same with sequence parallelism
// so bench/run.sh's ratio column is one-process / per-rank (goal >= 1.82,
// i.e. a rank holds <= 0.55x). BATCH=b overrides the batch (default 8 x 128
// tokens: the ratio does not depend on it much). Run as
// `sh tests/dist/mpirun.sh 2 build/bench_tp_memory`; started without mpirun
// it relaunches itself that way.
#include <limits.h>
#include <libgen.h>
#include <stdlib.h>
#include <unistd.h>

#include <weft.h>
#include <weft/parallel.h>

#include "bench_model.h"
#include "bench_util.h"

typedef struct mem {
    double params, step; // bytes: parameters; peak above the start during forward + backward
} mem;

static double param_bytes(const weft_module *m) {
    double b = 0;
    for (int i = 0; i < weft_module_param_count(m); i++) {
        weft_tensor *p = weft_module_param_at(m, i, NULL, 0);
        b += (double)weft_tensor_numel(p) * (double)weft_dtype_size(weft_tensor_dtype(p));
    }
    return b;
}

// One forward + backward of net on (x, y); tp NULL: the whole model.
static int measure(const weft_model_cfg *cfg, weft_comm *tp, weft_module *net, weft_tensor *x, weft_tensor *y,
                   mem *out) {
    weft_memory_stats s0, s1;
    weft_memory_stats_get(WEFT_DEVICE_CPU, &s0);
    weft_memory_reset_peak(WEFT_DEVICE_CPU);
    weft_tensor *lg = weft_module_forward(net, x);
    weft_tensor *l = tp ? weft_tp_model_loss(tp, cfg, lg, y) : weft_model_loss(cfg, lg, y);
    int fail = !l || weft_backward(l, NULL, NULL) != WEFT_OK;
    weft_memory_stats_get(WEFT_DEVICE_CPU, &s1);
    weft_tensor_free(lg);
    weft_tensor_free(l);
    out->params = param_bytes(net);
    out->step = (double)s1.peak_bytes_in_use - (double)s0.bytes_in_use;
    return fail;
}

static int relaunch(int argc, char **argv) {
    char exe[PATH_MAX], script[PATH_MAX + 32];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) {
        fprintf(stderr, "tp_memory: cannot find this executable\n");
        return 1;
    }
    exe[k] = 0;
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", exe);
    snprintf(script, sizeof script, "%s/../tests/dist/mpirun.sh", dirname(tmp));
    if (access(script, R_OK) != 0) snprintf(script, sizeof script, "tests/dist/mpirun.sh");
    setenv("WEFT_NUM_THREADS", "1", 1);
    char *args[] = {"sh", script, "2", exe, argc > 1 ? argv[1] : "", NULL};
    execvp("sh", args);
    perror("tp_memory: exec sh");
    return 1;
}

int main(int argc, char **argv) {
    if (!weft_dist_launched()) return relaunch(argc, argv);
    if (!bench_selected(argc, argv, "tp_memory_gpt") && !bench_selected(argc, argv, "tp_memory_gpt_seq")) return 0;
    if (weft_dist_init(&argc, &argv) != WEFT_OK) {
        fprintf(stderr, "tp_memory: %s\n", weft_last_error());
        return 1;
    }
    weft_comm *world = weft_comm_world();
    int rank = weft_comm_rank(world), fail = 0;
    weft_parallel *p = weft_parallel_create(world, 2, 1);
    weft_model_cfg *cfg = weft_model_cfg_load("models/kjv-gpt.cfg");
    if (!p || !cfg) {
        fprintf(stderr, "tp_memory: %s (run from the source directory, on 2 ranks)\n", weft_last_error());
        return 1;
    }
    cfg->net.batch = getenv("BATCH") ? atoi(getenv("BATCH")) : 8;
    weft_generator *g = weft_generator_create(1);
    weft_tensor *x, *y;
    bench_model_batch(&cfg->net, g, &x, &y);
    mem one = {0, 0};
    if (rank == 0) { // the one-process reference, alone
        weft_generator *gi = weft_generator_create(cfg->net.seed);
        weft_module *net = weft_model_build(cfg, gi, NULL);
        fail |= !net || measure(cfg, NULL, net, x, y, &one);
        weft_module_free(net);
        weft_generator_free(gi);
    }
    weft_dist_barrier(world);
    for (int seq = 0; seq < 2 && !fail; seq++) {
        const char *name = seq ? "tp_memory_gpt_seq" : "tp_memory_gpt";
        if (!bench_selected(argc, argv, name)) continue;
        mem two = {0, 0};
        weft_generator *gi = weft_generator_create(cfg->net.seed);
        weft_tp_opts to = {.sequence_parallel = seq};
        weft_module *net = weft_tp_model_build(p->tp_comm, cfg, gi, NULL, &to);
        fail |= !net || measure(cfg, p->tp_comm, net, x, y, &two);
        // the job's figure is its larger rank
        weft_tensor *t = weft_tensor_from_data((double[]){two.params + two.step}, WEFT_DIMS(1), WEFT_F64);
        weft_dist_all_reduce(world, t, WEFT_REDUCE_MAX);
        if (fail) fprintf(stderr, "%s: rank %d: %s\n", name, rank, weft_last_error());
        else if (rank == 0) {
            double per_rank = weft_tensor_item(t), whole = one.params + one.step;
            bench_report_peer(name, per_rank / 1e6, "MB", 0, whole / 1e6);
            fprintf(stderr,
                    "%s: batch %lld x %lld: one process %.2f MB params + %.2f MB step; TP=2 rank 0 %.2f + %.2f MB; "
                    "per rank / one process = %.3f (params %.3f, step %.3f)\n",
                    name, (long long)cfg->net.batch, (long long)cfg->net.context, one.params / 1e6, one.step / 1e6,
                    two.params / 1e6, two.step / 1e6, per_rank / whole, two.params / one.params, two.step / one.step);
        }
        weft_tensor_free(t);
        weft_module_free(net);
        weft_generator_free(gi);
    }
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_generator_free(g);
    weft_model_cfg_free(cfg);
    weft_parallel_free(p);
    weft_dist_finalize();
    return fail;
}
