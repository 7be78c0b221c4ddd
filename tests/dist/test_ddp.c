// mpirun: 2 3
// Distributed data parallel against single-process references. Every rank
// also trains a private copy of the model on the combined batch of all ranks
// (no communication): DDP with R ranks, each on its slice, must end with the
// same parameters. Small buckets make several buckets and the overlap path
// (issue from the hooks during backward) run.
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

#define B 4    // samples per rank
#define IN 6
#define OUT 4
#define STEPS 5
#define BUCKET_MB 0.0005 // ~131 floats: 3 buckets for the MLP below

// Under ASan: unwind malloc stacks fully, so that OpenMPI's leaks at exit
// (its libraries have no frame pointers) are attributed to it and matched by
// tests/dist/lsan.supp. Unused in other builds.
const char *__lsan_default_options(void);
const char *__lsan_default_options(void) { return "fast_unwind_on_malloc=0"; }

static weft_comm *g_c;
static int g_rank, g_size;

static bool err_has(const char *s) {
    bool ok = strstr(weft_last_error(), s) != NULL;
    if (!ok) fprintf(stderr, "  error message \"%s\" lacks \"%s\"\n", weft_last_error(), s);
    return ok;
}

static weft_module *make_mlp(uint64_t seed) {
    weft_generator *g = weft_generator_create(seed);
    weft_module *m = weft_nn_sequential();
    weft_nn_sequential_append(m, weft_nn_linear(IN, 16, true, g));
    weft_nn_sequential_append(m, weft_nn_activation(WEFT_ACT_TANH));
    weft_nn_sequential_append(m, weft_nn_linear(16, 12, true, g));
    weft_nn_sequential_append(m, weft_nn_activation(WEFT_ACT_TANH));
    weft_nn_sequential_append(m, weft_nn_linear(12, OUT, true, g));
    weft_generator_free(g);
    return m;
}

// The combined batch of step s (the same on every rank): x (R*B, IN), y (R*B).
static void make_batch(int s, weft_tensor **x, weft_tensor **y) {
    weft_generator *g = weft_generator_create(1000 + (uint64_t)s);
    *x = weft_tensor_randn(WEFT_DIMS(g_size * B, IN), WEFT_F32, g);
    *y = weft_tensor_randint(WEFT_DIMS(g_size * B), 0, OUT, WEFT_I64, g);
    weft_generator_free(g);
}

// Mean cross-entropy of net on rows [row, row + n) of the batch; runs backward.
static weft_status backward_on(weft_module *net, weft_tensor *x, weft_tensor *y, int64_t row, int64_t n) {
    weft_tensor *xs = weft_narrow(x, 0, row, n), *ys = weft_narrow(y, 0, row, n);
    weft_tensor *lg = weft_module_forward(net, xs);
    weft_tensor *l = weft_cross_entropy(lg, ys);
    weft_status st = l ? weft_backward(l, NULL, NULL) : weft_last_status();
    weft_tensor_free(l);
    weft_tensor_free(lg);
    weft_tensor_free(xs);
    weft_tensor_free(ys);
    return st;
}

// Largest |a - b| / (1 + |b|) over two tensors of the same size.
static double rel_diff(const weft_tensor *a, const weft_tensor *b) {
    int64_t n = weft_tensor_numel(a);
    if (!b || weft_tensor_numel(b) != n) return 1e30;
    double *va = malloc(sizeof(double) * (size_t)n), *vb = malloc(sizeof(double) * (size_t)n);
    weft_tensor_to_f64(a, va, n);
    weft_tensor_to_f64(b, vb, n);
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(va[i] - vb[i]) / (1 + fabs(vb[i]));
        if (!(d <= m)) m = d; // NaN propagates as a failure
    }
    free(va);
    free(vb);
    return m;
}

static double params_diff(weft_module *a, weft_module *b) {
    double m = 0;
    for (int i = 0; i < weft_module_param_count(a); i++) {
        double d = rel_diff(weft_module_param_at(a, i, NULL, 0), weft_module_param_at(b, i, NULL, 0));
        if (!(d <= m)) m = d;
    }
    return m;
}

static double grads_diff(weft_module *a, weft_module *b) {
    double m = 0;
    for (int i = 0; i < weft_module_param_count(a); i++) {
        weft_tensor *ga = weft_tensor_grad(weft_module_param_at(a, i, NULL, 0));
        weft_tensor *gb = weft_tensor_grad(weft_module_param_at(b, i, NULL, 0));
        double d = ga && gb ? rel_diff(ga, gb) : 1e30;
        if (!(d <= m)) m = d;
    }
    return m;
}

static weft_optim *make_opt(weft_module *m, weft_optim_kind kind) {
    weft_tensor *p[16];
    int n = weft_module_param_count(m);
    for (int i = 0; i < n; i++) p[i] = weft_module_param_at(m, i, NULL, 0);
    weft_optim_opts o = weft_optim_defaults(kind);
    o.lr = kind == WEFT_OPTIM_SGD ? 0.1 : 1e-2;
    if (kind == WEFT_OPTIM_SGD) o.momentum = 0.9;
    return weft_optim_create(&o, n, p, NULL);
}

// K steps of DDP (each rank on its slice) vs one process on the combined batch.
static void train_vs_reference(weft_optim_kind kind) {
    weft_module *net = make_mlp(1 + (uint64_t)g_rank); // replicas start different
    weft_module *ref = make_mlp(1);                    // rank 0's initial values
    CHECK(g_rank == 0 || params_diff(net, ref) > 1e-3);
    weft_ddp_opts o = {.bucket_mb = BUCKET_MB};
    weft_ddp *d = weft_ddp_create(g_c, net, &o);
    CHECK(d != NULL);
    if (!d) return;
    CHECK(weft_ddp_num_buckets(d) == 3);
    CHECK(params_diff(net, ref) == 0); // broadcast from rank 0, bit for bit
    weft_optim *opt = make_opt(net, kind), *ropt = make_opt(ref, kind);
    int fails = 0;
    for (int s = 0; s < STEPS; s++) {
        weft_tensor *x, *y;
        make_batch(s, &x, &y);
        fails += backward_on(net, x, y, (int64_t)g_rank * B, B) != WEFT_OK;
        fails += weft_ddp_wait(d) != WEFT_OK;
        fails += backward_on(ref, x, y, 0, (int64_t)g_size * B) != WEFT_OK;
        if (s == 0) CHECK(grads_diff(net, ref) < 1e-5); // averaged gradients = combined-batch gradients
        fails += weft_optim_step(opt) != WEFT_OK;
        fails += weft_optim_step(ropt) != WEFT_OK;
        weft_optim_zero_grad(opt);
        weft_optim_zero_grad(ropt);
        weft_tensor_free(x);
        weft_tensor_free(y);
    }
    CHECK(fails == 0);
    double diff = params_diff(net, ref);
    CHECK(diff < 1e-5);
    if (diff >= 1e-5) fprintf(stderr, "rank %d: %s: params differ by %g\n", g_rank, weft_optim_kind_name(kind), diff);
    // And they moved: the test would pass trivially with a zero gradient.
    weft_module *init = make_mlp(1);
    CHECK(params_diff(net, init) > 1e-3);
    weft_module_free(init);
    weft_optim_free(opt);
    weft_optim_free(ropt);
    weft_ddp_free(d);
    weft_module_free(net);
    weft_module_free(ref);
}

static void test_sgd_steps(void) { train_vs_reference(WEFT_OPTIM_SGD); }
static void test_adam_steps(void) { train_vs_reference(WEFT_OPTIM_ADAM); }

// Gradient accumulation: micro-batches 0 and 1 with sync off, 2 with sync on,
// equals the summed gradients of the three combined micro-batches.
static void test_no_sync(void) {
    weft_module *net = make_mlp(7 + (uint64_t)g_rank), *ref = make_mlp(7);
    weft_ddp_opts o = {.bucket_mb = BUCKET_MB};
    weft_ddp *d = weft_ddp_create(g_c, net, &o);
    CHECK(d != NULL);
    if (!d) return;
    int fails = 0;
    weft_ddp_set_sync(d, false);
    uint64_t seq0 = weft_comm_seq(g_c);
    for (int s = 0; s < 3; s++) {
        if (s == 2) {
            CHECK(weft_comm_seq(g_c) == seq0); // nothing was communicated
            weft_ddp_set_sync(d, true);
        }
        weft_tensor *x, *y;
        make_batch(10 + s, &x, &y);
        fails += backward_on(net, x, y, (int64_t)g_rank * B, B) != WEFT_OK;
        fails += weft_ddp_wait(d) != WEFT_OK; // a no-op while sync is off
        fails += backward_on(ref, x, y, 0, (int64_t)g_size * B) != WEFT_OK;
        weft_tensor_free(x);
        weft_tensor_free(y);
    }
    CHECK(fails == 0);
    CHECK(weft_comm_seq(g_c) == seq0 + 3); // one all-reduce per bucket
    CHECK(grads_diff(net, ref) < 1e-5);
    weft_ddp_free(d);
    weft_module_free(net);
    weft_module_free(ref);
}

static weft_tensor *unused_forward(weft_module *m, weft_tensor *x) { return weft_tensor_ref(x); }

// A parameter that one rank does not use: its bucket (the first, since
// buckets go in reverse parameter order) completes only at wait there, while
// the next bucket is ready during backward; issuing must still be in order
// (or the ranks' collectives would not match) and nothing may hang.
static void test_unused_param(void) {
    weft_module *m = weft_module_new("pair", unused_forward, NULL, NULL);
    weft_module_add_param(m, "a", weft_tensor_full(WEFT_DIMS(300), WEFT_F32, 1.0));
    weft_module_add_param(m, "b", weft_tensor_full(WEFT_DIMS(200), WEFT_F32, 2.0));
    weft_ddp_opts o = {.bucket_mb = 0.001}; // 262 floats: b then a, one bucket each
    weft_ddp *d = weft_ddp_create(g_c, m, &o);
    CHECK(d && weft_ddp_num_buckets(d) == 2);
    if (!d) return;
    weft_tensor *a = weft_module_get(m, "a"), *b = weft_module_get(m, "b");
    for (int rep = 0; rep < 2; rep++) { // the handle is reusable after a step with an unused parameter
        // loss = (r+1) * sum(a) + (r > 0 ? (r+1) * 3 * sum(b) : 0)
        weft_tensor *k = weft_tensor_scalar((double)(g_rank + 1), WEFT_F32);
        weft_tensor *ka = weft_mul(a, k);
        weft_tensor *loss = weft_sum(ka, 0, NULL, false);
        if (g_rank > 0) {
            weft_tensor *k3 = weft_tensor_scalar(3.0 * (g_rank + 1), WEFT_F32);
            weft_tensor *kb = weft_mul(b, k3), *sb = weft_sum(kb, 0, NULL, false);
            weft_tensor *l2 = weft_add(loss, sb);
            weft_tensor_free(loss);
            loss = l2;
            weft_tensor_free(k3);
            weft_tensor_free(kb);
            weft_tensor_free(sb);
        }
        CHECK(weft_backward(loss, NULL, NULL) == WEFT_OK);
        CHECK(weft_ddp_wait(d) == WEFT_OK);
        double ea = 0, eb = 0; // averages over ranks
        for (int r = 0; r < g_size; r++) {
            ea += (r + 1.0) / g_size;
            eb += (r > 0 ? 3.0 * (r + 1) : 0.0) / g_size;
        }
        weft_tensor *ga = weft_tensor_grad(a), *gb = weft_tensor_grad(b);
        CHECK(ga && gb);
        if (ga && gb) {
            double va[300], vb[200];
            weft_tensor_to_f64(ga, va, 300);
            weft_tensor_to_f64(gb, vb, 200);
            CHECK_NEAR(va[0], ea, 1e-6);
            CHECK_NEAR(va[299], ea, 1e-6);
            CHECK_NEAR(vb[0], eb, 1e-6);
            CHECK_NEAR(vb[199], eb, 1e-6);
        }
        weft_module_zero_grad(m);
        weft_tensor_free(k);
        weft_tensor_free(ka);
        weft_tensor_free(loss);
    }
    weft_ddp_free(d);
    weft_module_free(m);
}

// Buffers come from rank 0 too (batch_norm's running statistics).
static void test_buffers_broadcast(void) {
    weft_module *bn = weft_nn_batch_norm(3, 0.1, 1e-5);
    weft_tensor_fill_(weft_module_get(bn, "running_mean"), 5.0 * g_rank);
    weft_tensor_fill_(weft_module_get(bn, "weight"), 1.0 + g_rank);
    weft_ddp *d = weft_ddp_create(g_c, bn, NULL);
    CHECK(d && weft_ddp_num_buckets(d) == 1); // default 25 MB: one bucket
    double rm[3], w[3];
    weft_tensor_to_f64(weft_module_get(bn, "running_mean"), rm, 3);
    weft_tensor_to_f64(weft_module_get(bn, "weight"), w, 3);
    CHECK(rm[0] == 0 && rm[2] == 0 && w[0] == 1 && w[2] == 1);
    weft_ddp_free(d);
    weft_module_free(bn);
}

// The loader's distributed sampling, across real ranks: each rank's share,
// gathered, is the epoch permutation's first R * (n / R) entries, each once,
// and rank r holds positions r, r + R, ... of it.
static void test_sampler_across_ranks(void) {
    const int64_t n = 103;
    int64_t len = n / g_size;
    weft_tensor *in = weft_tensor_arange(0, (double)n, 1, WEFT_F32);
    weft_loader_opts o = {.batch_size = 5, .shuffle = true, .seed = 11, .prefetch = 2, .num_replicas = g_size,
                          .rank = g_rank};
    weft_loader *l = weft_loader_create(in, NULL, &o);
    weft_loader_opts o1 = {.batch_size = 5, .shuffle = true, .seed = 11};
    weft_loader *all = weft_loader_create(in, NULL, &o1);
    CHECK(l && all && weft_loader_num_samples(l) == len);
    if (!l || !all) return;
    for (int e = 0; e < 2; e++) {
        weft_tensor *mine = weft_tensor_zeros(WEFT_DIMS(len), WEFT_I64);
        weft_tensor *got = weft_tensor_zeros(WEFT_DIMS(len * g_size), WEFT_I64);
        int64_t *mp = weft_tensor_data(mine), k = 0;
        weft_tensor *x;
        while (weft_loader_next(l, &x, NULL) == 1) {
            for (int64_t j = 0; j < weft_tensor_size(x, 0) && k < len; j++) mp[k++] = (int64_t)((float *)weft_tensor_data(x))[j];
            weft_tensor_free(x);
        }
        CHECK(k == len);
        CHECK(weft_dist_all_gather(g_c, mine, got) == WEFT_OK);
        int64_t perm[103];
        weft_loader_epoch_order(all, e, perm);
        const int64_t *gp = weft_tensor_data(got);
        int bad = 0, count[103] = {0};
        for (int r = 0; r < g_size; r++)
            for (int64_t i = 0; i < len; i++) {
                bad += gp[r * len + i] != perm[r + i * g_size];
                count[gp[r * len + i]]++;
            }
        int dup = 0;
        for (int i = 0; i < n; i++) dup += count[i] > 1;
        CHECK(bad == 0 && dup == 0);
        weft_tensor_free(mine);
        weft_tensor_free(got);
    }
    weft_loader_free(l);
    weft_loader_free(all);
    weft_tensor_free(in);
}

static void test_errors(void) {
    weft_module *m = make_mlp(1);
    CHECK(weft_ddp_create(NULL, m, NULL) == NULL && err_has("ddp_create"));
    CHECK(weft_ddp_create(g_c, NULL, NULL) == NULL && err_has("ddp_create"));
    weft_ddp_opts o = {.bucket_mb = -1};
    CHECK(weft_ddp_create(g_c, m, &o) == NULL && err_has("bucket_mb"));
    CHECK(weft_ddp_wait(NULL) == WEFT_ERR_ARG && err_has("ddp_wait"));
    CHECK(weft_ddp_num_buckets(NULL) == 0);
    weft_ddp_set_sync(NULL, true);
    weft_ddp_free(NULL);
    weft_module_free(m);
}

int main(int argc, char **argv) {
    if (weft_dist_init(&argc, &argv) != WEFT_OK) {
        fprintf(stderr, "dist_init: %s\n", weft_last_error());
        return 1;
    }
    g_c = weft_comm_world();
    g_rank = weft_comm_rank(g_c);
    g_size = weft_comm_size(g_c);
    weft_comm_set_timeout(g_c, 60); // a bug here must fail, not hang the suite
    RUN(test_sgd_steps);
    RUN(test_adam_steps);
    RUN(test_no_sync);
    RUN(test_unused_param);
    RUN(test_buffers_broadcast);
    RUN(test_sampler_across_ranks);
    RUN(test_errors);
    int rc = wt_summary();
    weft_dist_finalize();
    return rc;
}
