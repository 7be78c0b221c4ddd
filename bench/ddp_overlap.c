// What data-parallel communication costs: the step time (forward, backward,
// weft_ddp_wait, optimiser step) of 2 ranks x 1 thread with the gradient
// all-reduce disabled (weft_ddp_opts.no_comm) vs enabled, on synthetic
// batches of the right shape:
//   ddp_overlap_mlp   the fmnist-mlp network, batch 128 per rank
//   ddp_overlap_gpt   the kjv-gpt network, batch 32 x 128 tokens per rank
// Printed as `<name> <median ms with comm> ms 0 <median ms without comm>`: the no-comm
// time is the in-binary peer, so bench/run.sh's ratio column is no-comm /
// with-comm (1: communication is free; goal >= 0.83). The job's step time is
// its slowest rank's. Run as `sh tests/dist/mpirun.sh 2 build/bench_ddp_overlap`;
// started without mpirun (as bench/run.sh does) it relaunches itself that way.
// BUCKET_MB=x sets weft_ddp_opts.bucket_mb (default 25 MB: one bucket for both
// networks).
#include <limits.h>
#include <libgen.h>
#include <stdlib.h>
#include <unistd.h>

#include <weft.h>

#include "bench_model.h"
#include "bench_util.h"

static weft_comm *g_c;
static int g_rank;

// One step; returns its time on the slowest rank. The barrier lines the
// ranks up first, so both modes pay the same skew between ranks and the
// difference is the communication (and the bucket copies) alone.
static double timed_step(const weft_model_cfg *cfg, weft_module *net, weft_optim *opt, weft_ddp *d, weft_tensor *x,
                         weft_tensor *y, int *fail) {
    if (weft_dist_barrier(g_c) != WEFT_OK) *fail = 1;
    double t0 = bench_now();
    weft_tensor *lg = weft_module_forward(net, x);
    weft_tensor *l = weft_model_loss(cfg, lg, y);
    if (!l || weft_backward(l, NULL, NULL) || weft_ddp_wait(d) || weft_optim_step(opt)) *fail = 1;
    weft_optim_zero_grad(opt);
    double t = bench_now() - t0;
    weft_tensor_free(lg);
    weft_tensor_free(l);
    weft_tensor *tt = weft_tensor_scalar(t, WEFT_F64);
    if (weft_dist_all_reduce(g_c, tt, WEFT_REDUCE_MAX) != WEFT_OK) *fail = 1;
    t = weft_tensor_item(tt);
    weft_tensor_free(tt);
    return t;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run(int argc, char **argv, const char *name, const char *path, int chunk, int rounds) {
    if (!bench_selected(argc, argv, name)) return 0;
    weft_model_cfg *cfg = weft_model_cfg_load(path);
    if (!cfg) {
        fprintf(stderr, "%s: %s\n", name, weft_last_error());
        return 1;
    }
    const weft_net_cfg *n = &cfg->net;
    weft_generator *g = weft_generator_create(1 + (uint64_t)g_rank); // each rank its own data
    weft_module *net = weft_model_build(cfg, g, g);
    weft_optim *opt = bench_model_optim(n, net);
    weft_tensor *x, *y;
    bench_model_batch(n, g, &x, &y);
    int fail = 0, buckets = 0, ns[2] = {0, 0};
    double *t[2] = {malloc(sizeof(double) * (size_t)(chunk * rounds)), malloc(sizeof(double) * (size_t)(chunk * rounds))};
    // Short chunks of each mode, alternated: both modes see the same machine
    // load (this machine is shared); each chunk starts with an untimed step.
    for (int r = 0; r < rounds && !fail; r++)
        for (int mode = 0; mode < 2 && !fail; mode++) { // 0: no comm, 1: with comm
            weft_ddp_opts dopt = {.bucket_mb = getenv("BUCKET_MB") ? atof(getenv("BUCKET_MB")) : 0, .no_comm = mode == 0};
            weft_ddp *d = weft_ddp_create(g_c, net, &dopt);
            if (!d) {
                fail = 1;
                break;
            }
            buckets = weft_ddp_num_buckets(d);
            timed_step(cfg, net, opt, d, x, y, &fail);
            for (int i = 0; i < chunk; i++) t[mode][ns[mode]++] = timed_step(cfg, net, opt, d, x, y, &fail);
            weft_ddp_free(d);
        }
    if (fail) fprintf(stderr, "%s: rank %d: %s\n", name, g_rank, weft_last_error());
    else if (g_rank == 0) {
        // The median step: robust to the neighbours' bursts, which hit single steps.
        qsort(t[0], (size_t)ns[0], sizeof(double), cmp_double);
        qsort(t[1], (size_t)ns[1], sizeof(double), cmp_double);
        double med0 = t[0][ns[0] / 2], med1 = t[1][ns[1] / 2];
        bench_report_peer(name, med1 * 1e3, "ms", 0, med0 * 1e3);
        fprintf(stderr,
                "%s: %d ranks, %d bucket(s), median step %.2f ms without comm, %.2f with: ratio %.3f "
                "(fastest steps %.2f / %.2f: %.3f)\n",
                name, weft_comm_size(g_c), buckets, med0 * 1e3, med1 * 1e3, med0 / med1, t[0][0] * 1e3, t[1][0] * 1e3,
                t[0][0] / t[1][0]);
    }
    free(t[0]);
    free(t[1]);
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_optim_free(opt);
    weft_module_free(net);
    weft_generator_free(g);
    weft_model_cfg_free(cfg);
    return fail;
}

// Started by hand or by bench/run.sh: run this binary again under mpirun, 2 ranks x 1 thread.
static int relaunch(int argc, char **argv) {
    char exe[PATH_MAX], script[PATH_MAX + 32];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) {
        fprintf(stderr, "ddp_overlap: cannot find this executable\n");
        return 1;
    }
    exe[k] = 0;
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", exe);
    // build/bench_ddp_overlap -> <source>/tests/dist/mpirun.sh
    snprintf(script, sizeof script, "%s/../tests/dist/mpirun.sh", dirname(tmp));
    if (access(script, R_OK) != 0) snprintf(script, sizeof script, "tests/dist/mpirun.sh");
    setenv("WEFT_NUM_THREADS", "1", 1);
    setenv("OMP_NUM_THREADS", "1", 1);
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    char *args[] = {"sh", script, "2", exe, argc > 1 ? argv[1] : "", NULL};
    execvp("sh", args);
    perror("ddp_overlap: exec sh");
    return 1;
}

int main(int argc, char **argv) {
    if (!weft_dist_launched()) return relaunch(argc, argv);
    weft_set_num_threads(1);
    if (weft_dist_init(&argc, &argv) != WEFT_OK) {
        fprintf(stderr, "ddp_overlap: %s\n", weft_last_error());
        return 1;
    }
    g_c = weft_comm_world();
    g_rank = weft_comm_rank(g_c);
    int f = 0;
    f |= run(argc, argv, "ddp_overlap_mlp", "models/fmnist-mlp.cfg", 20, 15);
    f |= run(argc, argv, "ddp_overlap_gpt", "models/kjv-gpt.cfg", 2, 4);
    weft_dist_finalize();
    return f;
}
