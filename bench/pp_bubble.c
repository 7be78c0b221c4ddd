// mpirun: 4
// The pipeline bubble: the idle fraction each rank measures in weft_pp_step
// (1 - compute time / step time, compute being the forwards and backwards,
// not the waits for messages) against the theory for equal stages,
// (p-1)/(m+p-1) for GPipe and 1F1B and (p-1)/(v*m+p-1) interleaved, with
// p = 4 stages and m = 8, 16 micro-batches:
//   pp_bubble_gpipe_m8, pp_bubble_gpipe_m16, pp_bubble_1f1b_m8, pp_bubble_1f1b_m16,
//   pp_bubble_interleaved_m8, pp_bubble_interleaved_m16 (v = 2)
// printed as `<name> <measured> frac 0 <theory>`, so bench/run.sh's ratio is
// theory / measured (1: no overhead beyond the schedule's own bubble; goal
// >= 0.9). The measured value is the median over 9 steps of the mean over ranks.
//
// The stages' work is equal and deterministic: each layer sleeps 2 ms in its
// forward and 4 ms in its backward (and copies a (mb, 4) activation), so
// that four ranks on a machine with fewer cores still see equal stages;
// what is measured is the schedule and its messages, not the arithmetic.
// Run under mpirun with 4 ranks (bench/run.sh does, from the line above).
#include <stdlib.h>
#include <time.h>

#include <weft.h>
#include <weft/parallel.h>

#include "bench_util.h"

enum { LAYERS = 8, WIDTH = 4, STEPS = 9 };
static const double T_FWD = 2e-3, T_BWD = 4e-3; // per stage (a stage's layers share it)

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts)) {
    }
}

typedef struct {
    double fwd, bwd; // seconds this layer sleeps
} work;

static weft_status work_backward(void *ctx, int n_out, weft_tensor *const *gout, int n_in, const bool *needs,
                                 weft_tensor **gin) {
    (void)n_out;
    (void)n_in;
    sleep_s(((work *)ctx)->bwd);
    if (needs[0] && gout[0]) gin[0] = weft_tensor_ref(gout[0]);
    return WEFT_OK; // w's gradient: none (zero)
}

// y = x, after fwd seconds; its backward passes the gradient on after bwd.
// The parameter w makes the first stage's layers record a backward too.
static weft_tensor *work_forward(weft_module *m, weft_tensor *x) {
    work *k = weft_module_impl(m);
    sleep_s(k->fwd);
    weft_tensor *y = NULL, *d = weft_tensor_detach(x);
    WEFT_NO_GRAD { y = weft_tensor_clone(d); }
    weft_tensor_free(d);
    work *c = malloc(sizeof *c);
    *c = *k;
    weft_tensor *in[2] = {x, weft_module_get(m, "w")};
    if (weft_function_record("work", 2, in, 1, &y, work_backward, c, free)) {
        weft_tensor_free(y);
        return NULL;
    }
    return y;
}

static weft_module *work_layer(double fwd, double bwd) {
    work *k = malloc(sizeof *k);
    *k = (work){fwd, bwd};
    weft_module *m = weft_module_new("work", work_forward, k, free);
    weft_module_add_param(m, "w", weft_tensor_ones(WEFT_DIMS(1), WEFT_F64));
    return m;
}

static weft_tensor *mean_loss(weft_tensor *out, weft_tensor *tgt, void *user) {
    (void)tgt;
    (void)user;
    return weft_mean(out, 0, NULL, false);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run(int argc, char **argv, const char *name, weft_pp_schedule s, int m) {
    if (!bench_selected(argc, argv, name)) return 0;
    weft_comm *c = weft_comm_world();
    int p = weft_comm_size(c), v = s == WEFT_PP_INTERLEAVED ? 2 : 1, per = LAYERS / (p * v);
    if (per < 1) per = 1;
    weft_module *seq = weft_nn_sequential();
    for (int i = 0; i < per * p * v; i++) weft_nn_sequential_append(seq, work_layer(T_FWD / v / per, T_BWD / v / per));
    weft_pp *pp = weft_pp_create(c, seq, &(weft_pp_opts){.schedule = s, .microbatches = m, .virtual_stages = v});
    int fail = !pp;
    weft_tensor *x = weft_tensor_ones(WEFT_DIMS(m, WIDTH), WEFT_F64), *y = weft_tensor_zeros(WEFT_DIMS(m), WEFT_F64);
    double fr[STEPS], th = 0;
    for (int i = 0; i < STEPS + 1 && !fail; i++) { // the first step is a warm-up
        weft_module_zero_grad(seq);
        if (weft_dist_barrier(c) || weft_pp_step(pp, x, y, mean_loss, NULL, NULL)) {
            fail = 1;
            break;
        }
        weft_pp_stats st = weft_pp_last_stats(pp);
        weft_tensor *t = weft_tensor_scalar(st.idle_fraction, WEFT_F64);
        if (weft_dist_all_reduce(c, t, WEFT_REDUCE_AVG)) fail = 1;
        if (i) fr[i - 1] = weft_tensor_item(t);
        th = st.theory;
        weft_tensor_free(t);
    }
    if (fail) fprintf(stderr, "%s: %s\n", name, weft_last_error());
    else if (weft_comm_rank(c) == 0) {
        qsort(fr, STEPS, sizeof(double), cmp_double);
        bench_report_peer(name, fr[STEPS / 2], "frac", 0, th);
        fprintf(stderr, "%s: p=%d m=%d v=%d: idle %.4f (steps %.4f..%.4f), theory %.4f, ratio %.3f\n", name, p, m, v,
                fr[STEPS / 2], fr[0], fr[STEPS - 1], th, th / fr[STEPS / 2]);
    }
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_pp_free(pp);
    weft_module_free(seq);
    return fail;
}

int main(int argc, char **argv) {
    if (!weft_dist_available()) {
        fprintf(stderr, "pp_bubble: weft built without MPI\n");
        return 0;
    }
    weft_set_num_threads(1);
    if (weft_dist_init(&argc, &argv) != WEFT_OK) {
        fprintf(stderr, "pp_bubble: %s\n", weft_last_error());
        return 1;
    }
    int f = 0;
    f |= run(argc, argv, "pp_bubble_gpipe_m8", WEFT_PP_GPIPE, 8);
    f |= run(argc, argv, "pp_bubble_gpipe_m16", WEFT_PP_GPIPE, 16);
    f |= run(argc, argv, "pp_bubble_1f1b_m8", WEFT_PP_1F1B, 8);
    f |= run(argc, argv, "pp_bubble_1f1b_m16", WEFT_PP_1F1B, 16);
    f |= run(argc, argv, "pp_bubble_interleaved_m8", WEFT_PP_INTERLEAVED, 8);
    f |= run(argc, argv, "pp_bubble_interleaved_m16", WEFT_PP_INTERLEAVED, 16);
    weft_dist_finalize();
    return f;
}
