// mpirun: 2 3
// Distributed training with device tensors, against the same runs on the CPU.
// The device is the accelerator of tests/mock_device.c: the real cuda:0 where
// a GPU is present (NCCL where every rank has a GPU of its own, else staged
// through host memory), else the mock (always staged). On the mock the device
// runs use the CPU's kernels, so they must give the CPU's numbers bit for bit;
// on a GPU within a tolerance. Covered: collectives (blocking and async) on
// device tensors, DDP of a small MLP and a model with an unused parameter, the
// parameter server with device workers (BSP, ASP, sparse rows), and `weft
// train` with --dist ddp / ps on the device, checkpoints and resume included.
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft_test.h"

const char *__lsan_default_options(void);
const char *__lsan_default_options(void) { return "fast_unwind_on_malloc=0"; }

static weft_comm *g_c;
static weft_comm *g_workers; // every rank but the last (the parameter server's workers); NULL on the last
static int g_rank, g_size;
static weft_device g_dev;
static bool g_mock;
static double g_tol; // 0 on the mock (bit-identical), else a GPU's rounding

static weft_tensor *on_dev(weft_tensor *t) {
    weft_tensor *d = weft_tensor_to(t, g_dev);
    weft_tensor_free(t);
    return d;
}

static weft_tensor *vals(int64_t n, weft_dtype dt, uint64_t seed) {
    double *v = malloc(sizeof(double) * (size_t)n);
    wt_vals(v, n, -2, 2, seed);
    weft_tensor *t64 = weft_tensor_from_data(v, 1, &n, WEFT_F64), *t = weft_cast(t64, dt);
    weft_tensor_free(t64);
    free(v);
    return t;
}

// ---- collectives ----

static void test_collectives(void) {
    const int64_t n = 1003; // odd: uneven chunks over 2 and 3 ranks
    // all_reduce, blocking and async (two in flight), sum / avg / max
    weft_reduce_op ops[3] = {WEFT_REDUCE_SUM, WEFT_REDUCE_AVG, WEFT_REDUCE_MAX};
    for (int k = 0; k < 3; k++) {
        weft_tensor *h = vals(n, WEFT_F32, 10 + (uint64_t)g_rank), *d = on_dev(weft_tensor_clone(h));
        weft_tensor *h2 = vals(n, WEFT_F64, 20 + (uint64_t)g_rank), *d2 = on_dev(weft_tensor_clone(h2));
        CHECK(weft_device_equal(weft_tensor_device(d), g_dev));
        CHECK(weft_dist_all_reduce(g_c, h, ops[k]) == WEFT_OK && weft_dist_all_reduce(g_c, h2, ops[k]) == WEFT_OK);
        weft_work *w1 = weft_dist_all_reduce_async(g_c, d, ops[k]);
        weft_work *w2 = weft_dist_all_reduce_async(g_c, d2, ops[k]);
        CHECK(w1 && w2);
        CHECK(weft_work_wait(w2) == WEFT_OK && weft_work_wait(w1) == WEFT_OK);
        wt_check_same("async all_reduce f32", d, h, g_tol ? 1e-6 : 0);
        wt_check_same("async all_reduce f64", d2, h2, g_tol ? 1e-13 : 0);
        CHECK(weft_dist_all_reduce(g_c, d, ops[k]) == WEFT_OK && weft_dist_all_reduce(g_c, h, ops[k]) == WEFT_OK);
        wt_check_same("blocking all_reduce", d, h, g_tol ? 1e-6 : 0);
        weft_tensor *ts[] = {h, d, h2, d2};
        for (int i = 0; i < 4; i++) weft_tensor_free(ts[i]);
    }
    // broadcast from the last rank; weft_work_test turns 1
    weft_tensor *b = on_dev(weft_tensor_full_on(WEFT_DIMS(n), WEFT_F32, g_rank + 1.5, WEFT_DEVICE_CPU));
    weft_work *wb = weft_dist_broadcast_async(g_c, b, g_size - 1);
    CHECK(wb != NULL);
    while (wb && !weft_work_test(wb)) sched_yield(); // ends: the watchdog (60 s) finishes a stuck one
    CHECK(wb && weft_work_wait(wb) == WEFT_OK);
    CHECK(weft_tensor_item(wt_keep(weft_sum(b, 0, NULL, false))) == (double)n * (g_size + 0.5));
    // all_gather with uneven chunks: rank r's chunk holds r
    int64_t off, k;
    weft_dist_chunk(n, g_size, g_rank, &off, &k);
    weft_tensor *in = on_dev(weft_tensor_full_on(WEFT_DIMS(k), WEFT_F64, g_rank, WEFT_DEVICE_CPU));
    weft_tensor *out = wt_keep(weft_tensor_empty_on(WEFT_DIMS(n), WEFT_F64, g_dev));
    CHECK(weft_dist_all_gather(g_c, in, out) == WEFT_OK);
    double *got = malloc(sizeof(double) * (size_t)n);
    weft_tensor_to_f64(out, got, n);
    int bad = 0;
    for (int r = 0; r < g_size; r++) {
        int64_t o, c;
        weft_dist_chunk(n, g_size, r, &o, &c);
        for (int64_t i = o; i < o + c; i++) bad += got[i] != r;
    }
    CHECK(bad == 0);
    // in place (in is this rank's chunk of out), and even chunks (NCCL's path on a GPU)
    int64_t ne = 64 * g_size;
    weft_tensor *oe = wt_keep(on_dev(weft_tensor_full_on(WEFT_DIMS(ne), WEFT_F32, -1, WEFT_DEVICE_CPU)));
    weft_tensor *chunk = wt_keep(weft_narrow(oe, 0, 64 * g_rank, 64));
    weft_tensor_fill_(chunk, g_rank * 10);
    CHECK(weft_dist_all_gather(g_c, chunk, oe) == WEFT_OK);
    weft_tensor_to_f64(oe, got, ne);
    bad = 0;
    for (int64_t i = 0; i < ne; i++) bad += got[i] != (double)(i / 64) * 10;
    CHECK(bad == 0);
    // reduce_scatter of the gathered vector: rank r gets size * (its chunk)
    weft_tensor *rs = wt_keep(weft_tensor_empty_on(WEFT_DIMS(64), WEFT_F32, g_dev));
    CHECK(weft_dist_reduce_scatter(g_c, oe, rs, WEFT_REDUCE_SUM) == WEFT_OK);
    CHECK(weft_tensor_item(wt_keep(weft_sum(rs, 0, NULL, false))) == 64.0 * g_size * g_rank * 10);
    // gather / scatter / all_to_all / send-recv (staged everywhere)
    weft_tensor *g = g_rank == 0 ? wt_keep(weft_tensor_empty_on(WEFT_DIMS(n), WEFT_F64, g_dev)) : NULL;
    CHECK(weft_dist_gather(g_c, in, g, 0) == WEFT_OK);
    weft_tensor *sc = wt_keep(weft_tensor_empty_on(WEFT_DIMS(k), WEFT_F64, g_dev));
    CHECK(weft_dist_scatter(g_c, g, sc, 0) == WEFT_OK);
    wt_check_same("gather then scatter", sc, in, 0);
    weft_tensor *a2a_in = wt_keep(on_dev(weft_tensor_arange(0, (double)ne, 1, WEFT_F32)));
    weft_tensor *a2a_out = wt_keep(weft_tensor_empty_on(WEFT_DIMS(ne), WEFT_F32, g_dev));
    CHECK(weft_dist_all_to_all(g_c, a2a_in, a2a_out) == WEFT_OK);
    weft_tensor_to_f64(a2a_out, got, ne); // from rank r: its chunk g_rank of arange
    bad = 0;
    for (int64_t i = 0; i < ne; i++) bad += got[i] != (double)(64 * g_rank + i % 64);
    CHECK(bad == 0);
    weft_tensor *msg = wt_keep(on_dev(weft_tensor_full_on(WEFT_DIMS(5), WEFT_I64, 7 + g_rank, WEFT_DEVICE_CPU)));
    if (g_rank == 0) CHECK(weft_dist_send(g_c, msg, 1, 3) == WEFT_OK);
    if (g_rank == 1) {
        CHECK(weft_dist_recv(g_c, msg, 0, 3) == WEFT_OK);
        CHECK(weft_tensor_item(wt_keep(weft_sum(msg, 0, NULL, false))) == 35);
    }
    // in and out on different devices is an error on every rank
    weft_tensor *hout = wt_keep(weft_tensor_empty_on(WEFT_DIMS(n), WEFT_F64, WEFT_DEVICE_CPU));
    CHECK(weft_dist_all_gather(g_c, in, hout) != WEFT_OK && wt_error_has("on cpu"));
    free(got);
    weft_tensor_free(b);
    weft_tensor_free(in);
    wt_drop_all();
}

// ---- DDP ----

#define B 4
#define IN 6
#define OUT 4

// The same MLP (same seed, same values) on the CPU or on the device.
static weft_module *make_mlp(uint64_t seed, weft_device dev) {
    weft_device prev = weft_device_get_default();
    weft_device_set_default(dev);
    weft_generator *g = weft_generator_create(seed);
    weft_module *m = weft_nn_sequential();
    weft_nn_sequential_append(m, weft_nn_linear(IN, 16, true, g));
    weft_nn_sequential_append(m, weft_nn_activation(WEFT_ACT_TANH));
    weft_nn_sequential_append(m, weft_nn_linear(16, 12, true, g));
    weft_nn_sequential_append(m, weft_nn_activation(WEFT_ACT_TANH));
    weft_nn_sequential_append(m, weft_nn_linear(12, OUT, true, g));
    weft_generator_free(g);
    weft_device_set_default(prev);
    return m;
}

static weft_status step_on(weft_module *net, weft_ddp *d, weft_optim *opt, int s, weft_device dev) {
    weft_generator *g = weft_generator_create(1000 + (uint64_t)s);
    weft_tensor *x = weft_tensor_randn(WEFT_DIMS(g_size * B, IN), WEFT_F32, g);
    weft_tensor *y = weft_tensor_randint(WEFT_DIMS(g_size * B), 0, OUT, WEFT_I64, g);
    weft_generator_free(g);
    weft_tensor *xs = weft_narrow(x, 0, (int64_t)g_rank * B, B), *ys = weft_narrow(y, 0, (int64_t)g_rank * B, B);
    weft_tensor *xd = weft_tensor_to(xs, dev), *yd = weft_tensor_to(ys, dev);
    weft_tensor *lg = weft_module_forward(net, xd), *l = weft_cross_entropy(lg, yd);
    weft_status st = l ? weft_backward(l, NULL, NULL) : weft_last_status();
    if (!st) st = weft_ddp_wait(d);
    if (!st) st = weft_optim_step(opt);
    weft_optim_zero_grad(opt);
    weft_tensor *ts[] = {x, y, xs, ys, xd, yd, lg, l};
    for (int i = 0; i < 8; i++) weft_tensor_free(ts[i]);
    return st;
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

// DDP with device parameters ends where DDP with CPU parameters does. Small
// buckets (3 for this MLP) run the overlap path: buckets issued from the
// leaf hooks during backward.
static void ddp_device_vs_cpu(weft_optim_kind kind) {
    weft_module *cpu = make_mlp(1 + (uint64_t)g_rank, WEFT_DEVICE_CPU), *dev = make_mlp(1 + (uint64_t)g_rank, g_dev);
    CHECK(weft_device_equal(weft_tensor_device(weft_module_param_at(dev, 0, NULL, 0)), g_dev));
    weft_ddp_opts o = {.bucket_mb = 0.0005};
    weft_ddp *dc = weft_ddp_create(g_c, cpu, &o), *dd = weft_ddp_create(g_c, dev, &o);
    CHECK(dc && dd && weft_ddp_num_buckets(dd) == 3 && weft_ddp_num_buckets(dc) == 3);
    if (!dc || !dd) return;
    weft_optim *oc = make_opt(cpu, kind), *od = make_opt(dev, kind);
    int fails = 0;
    for (int s = 0; s < 4; s++) {
        fails += step_on(cpu, dc, oc, s, WEFT_DEVICE_CPU) != WEFT_OK;
        fails += step_on(dev, dd, od, s, g_dev) != WEFT_OK;
    }
    CHECK(fails == 0);
    for (int i = 0; i < weft_module_param_count(cpu); i++) {
        char what[64];
        snprintf(what, sizeof what, "ddp %s param %d (rank %d)", weft_optim_kind_name(kind), i, g_rank);
        // on a GPU, Adam's normalisation can grow a rounding difference of a tiny gradient
        double tol = g_mock ? 0 : kind == WEFT_OPTIM_ADAM ? 1e-3 : 1e-5;
        wt_check_same(what, weft_module_param_at(dev, i, NULL, 0), weft_module_param_at(cpu, i, NULL, 0), tol);
    }
    // and the replicas moved together from rank 0's values
    weft_module *init = make_mlp(1, WEFT_DEVICE_CPU);
    double a[16 * IN], b0[16 * IN];
    weft_tensor_to_f64(weft_module_param_at(dev, 0, NULL, 0), a, 16 * IN);
    weft_tensor_to_f64(weft_module_param_at(init, 0, NULL, 0), b0, 16 * IN);
    double moved = 0;
    for (int i = 0; i < 16 * IN; i++) moved = fmax(moved, fabs(a[i] - b0[i]));
    CHECK(moved > 1e-3);
    weft_module_free(init);
    weft_optim_free(oc);
    weft_optim_free(od);
    weft_ddp_free(dc);
    weft_ddp_free(dd);
    weft_module_free(cpu);
    weft_module_free(dev);
}
static void test_ddp_sgd(void) { ddp_device_vs_cpu(WEFT_OPTIM_SGD); }
static void test_ddp_adam(void) { ddp_device_vs_cpu(WEFT_OPTIM_ADAM); }

static weft_tensor *ident(weft_module *m, weft_tensor *x) {
    (void)m;
    return weft_tensor_ref(x);
}

// A parameter rank 0 does not use: its bucket is filled (zeros) and issued
// at wait, after the other bucket went out from the hooks; every rank ends
// with the average as .grad, on the device.
static void test_ddp_unused(void) {
    weft_module *m = weft_module_new("pair", ident, NULL, NULL);
    weft_module_add_param(m, "a", weft_tensor_full_on(WEFT_DIMS(300), WEFT_F32, 1.0, g_dev));
    weft_module_add_param(m, "b", weft_tensor_full_on(WEFT_DIMS(200), WEFT_F32, 2.0, g_dev));
    weft_ddp_opts o = {.bucket_mb = 0.001};
    weft_ddp *d = weft_ddp_create(g_c, m, &o);
    CHECK(d && weft_ddp_num_buckets(d) == 2);
    if (!d) return;
    weft_tensor *a = weft_module_get(m, "a"), *b = weft_module_get(m, "b");
    for (int rep = 0; rep < 2; rep++) {
        weft_tensor *ka = wt_keep(weft_mul_scalar(a, g_rank + 1.0));
        weft_tensor *loss = wt_keep(weft_sum(ka, 0, NULL, false));
        if (g_rank > 0) {
            weft_tensor *kb = wt_keep(weft_mul_scalar(b, 3.0 * (g_rank + 1)));
            loss = wt_keep(weft_add(loss, wt_keep(weft_sum(kb, 0, NULL, false))));
        }
        CHECK(weft_backward(loss, NULL, NULL) == WEFT_OK);
        CHECK(weft_ddp_wait(d) == WEFT_OK);
        double ea = 0, eb = 0;
        for (int r = 0; r < g_size; r++) {
            ea += (r + 1.0) / g_size;
            eb += (r > 0 ? 3.0 * (r + 1) : 0.0) / g_size;
        }
        weft_tensor *ga = weft_tensor_grad(a), *gb = weft_tensor_grad(b);
        CHECK(ga && gb && weft_device_equal(weft_tensor_device(ga), g_dev) &&
              weft_device_equal(weft_tensor_device(gb), g_dev));
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
        wt_drop_all();
    }
    // a replica spread over two devices is refused before any communication
    weft_module *mixed = weft_module_new("mixed", ident, NULL, NULL);
    weft_module_add_param(mixed, "a", weft_tensor_full_on(WEFT_DIMS(3), WEFT_F32, 1.0, g_dev));
    weft_module_add_param(mixed, "b", weft_tensor_full_on(WEFT_DIMS(3), WEFT_F32, 1.0, WEFT_DEVICE_CPU));
    CHECK(weft_ddp_create(g_c, mixed, NULL) == NULL && wt_error_has("one device per replica"));
    weft_module_free(mixed);
    weft_ddp_free(d);
    weft_module_free(m);
}

// ---- parameter server: the last rank serves, the others are workers ----

enum { NP = 3 };
static const char *k_names[NP] = {"w", "big", "bias"};

static void make_ps_params(weft_tensor **p, weft_device dev) {
    int64_t n[NP] = {24, 3000, 5};
    for (int i = 0; i < NP; i++) {
        weft_tensor *h = vals(n[i], i == 1 ? WEFT_F64 : WEFT_F32, 300 + (uint64_t)i);
        if (g_rank != 0) weft_tensor_fill_(h, 9); // only worker 0's values count
        weft_tensor *v = i == 0 ? weft_reshape(h, 2, (int64_t[]){4, 6}) : i == 1 ? weft_reshape(h, 2, (int64_t[]){100, 30})
                                                                                  : weft_tensor_ref(h);
        p[i] = weft_tensor_to(v, dev);
        weft_tensor_free(v);
        weft_tensor_free(h);
    }
}

// Worker w's gradient of parameter i at step t (the same on both devices).
static void set_grads(weft_tensor **p, int t) {
    for (int i = 0; i < NP; i++) {
        weft_tensor *g = vals(weft_tensor_numel(p[i]), weft_tensor_dtype(p[i]), 1000 + 100 * (uint64_t)t + 10 * (uint64_t)g_rank + (uint64_t)i);
        weft_tensor *gv = weft_reshape(g, weft_tensor_ndim(p[i]), weft_tensor_sizes(p[i]));
        weft_tensor *gd = weft_tensor_to(gv, weft_tensor_device(p[i]));
        weft_tensor_set_grad(p[i], gd);
        weft_tensor_free(g);
        weft_tensor_free(gv);
        weft_tensor_free(gd);
    }
}

// T steps under mode; the parameters after them, on the host (f64), in out[i].
static void ps_run(weft_ps_mode mode, weft_device dev, int T, double **out) {
    weft_tensor *p[NP];
    weft_ps_opts o = weft_ps_defaults();
    o.servers = 1;
    o.mode = mode;
    o.split_elems = 1000;
    o.optim.lr = 0.1;
    o.optim.momentum = mode == WEFT_PS_BSP ? 0.9 : 0;
    bool server = g_rank == g_size - 1;
    make_ps_params(p, server ? WEFT_DEVICE_CPU : dev); // servers stay on the CPU
    weft_ps *ps = weft_ps_create(g_c, NP, p, k_names, &o);
    CHECK(ps != NULL);
    if (ps && weft_ps_is_server(ps)) CHECK(weft_ps_serve(ps) == WEFT_OK);
    else if (ps) {
        for (int t = 0; t < T; t++) {
            set_grads(p, t);
            CHECK(weft_ps_step(ps, 0.1 / (t + 1)) == WEFT_OK);
        }
        for (int i = 0; i < NP; i++) {
            CHECK(weft_device_equal(weft_tensor_device(p[i]), dev));
            weft_tensor_to_f64(p[i], out[i], weft_tensor_numel(p[i]));
        }
        CHECK(weft_ps_finish(ps) == WEFT_OK);
    }
    weft_ps_free(ps);
    for (int i = 0; i < NP; i++) weft_tensor_free(p[i]);
}

// BSP with device workers equals BSP with CPU workers bit for bit, on a GPU
// too: workers only move the gradients' bytes, the servers do the maths.
static void test_ps_bsp(void) {
    double *a[NP], *b[NP];
    int64_t n[NP] = {24, 3000, 5};
    for (int i = 0; i < NP; i++) {
        a[i] = calloc((size_t)n[i], sizeof(double));
        b[i] = calloc((size_t)n[i], sizeof(double));
    }
    ps_run(WEFT_PS_BSP, WEFT_DEVICE_CPU, 3, a);
    ps_run(WEFT_PS_BSP, g_dev, 3, b);
    if (g_rank != g_size - 1) {
        int bad = 0, moved = 0;
        for (int i = 0; i < NP; i++) {
            double *init = malloc(sizeof(double) * (size_t)n[i]);
            wt_vals(init, n[i], -2, 2, 300 + (uint64_t)i);
            for (int64_t k = 0; k < n[i]; k++) {
                bad += a[i][k] != b[i][k];
                moved += fabs(a[i][k] - init[k]) > 1e-3;
            }
            free(init);
        }
        CHECK(bad == 0);
        CHECK(moved > 1000); // the steps did something
    }
    for (int i = 0; i < NP; i++) {
        free(a[i]);
        free(b[i]);
    }
}

// ASP with device workers: once all pushes are in, p0 - lr/W * sum of all
// gradients (any order; f32 rounding), pulled into device parameters.
static void test_ps_asp_rows(void) {
    weft_tensor *p[NP];
    weft_ps_opts o = weft_ps_defaults();
    o.servers = 1;
    o.mode = WEFT_PS_ASP;
    o.split_elems = 1000;
    o.optim.lr = 0.1;
    bool server = g_rank == g_size - 1;
    int W = g_size - 1, T = 3;
    make_ps_params(p, server ? WEFT_DEVICE_CPU : g_dev);
    weft_ps *ps = weft_ps_create(g_c, NP, p, k_names, &o);
    CHECK(ps != NULL);
    if (!ps) return;
    CHECK(weft_ps_set_sparse(ps, 1, true) == WEFT_OK); // "big" goes by rows
    if (weft_ps_is_server(ps)) CHECK(weft_ps_serve(ps) == WEFT_OK);
    else {
        weft_tensor *w0 = wt_keep(weft_tensor_to(p[0], WEFT_DEVICE_CPU));
        for (int t = 0; t < T; t++) {
            set_grads(p, t);
            CHECK(weft_ps_step(ps, 0.05) == WEFT_OK);
        }
        // sparse rows from the device: worker w pushes rows {w, 50 + w} of "big"
        weft_tensor *rows = wt_keep(on_dev(weft_tensor_from_data((int64_t[]){g_rank, 50 + g_rank}, WEFT_DIMS(2), WEFT_I64)));
        weft_tensor *rg = wt_keep(weft_tensor_full_on(WEFT_DIMS(2, 30), WEFT_F64, 1.0, g_dev));
        CHECK(weft_ps_push_rows(ps, 1, rows, rg, 0.5) == WEFT_OK);
        weft_tensor *got = wt_keep(weft_tensor_empty_on(WEFT_DIMS(2, 30), WEFT_F64, g_dev));
        CHECK(weft_ps_pull_rows(ps, 1, rows, got) == WEFT_OK);
        double gv[60], init[3000];
        weft_tensor_to_f64(got, gv, 60);
        double v0[3000];
        wt_vals(v0, 3000, -2, 2, 301);
        for (int64_t k = 0; k < 3000; k++) init[k] = v0[k];
        CHECK_NEAR(gv[0], init[g_rank * 30] - 0.5, 1e-12);
        CHECK_NEAR(gv[59], init[(50 + g_rank) * 30 + 29] - 0.5, 1e-12);
        // every worker's dense pushes are in once all have passed this barrier
        CHECK(weft_dist_barrier(g_workers) == WEFT_OK);
        CHECK(weft_ps_pull(ps) == WEFT_OK);
        double ref[24], w[24];
        weft_tensor_to_f64(w0, ref, 24);
        for (int k = 0; k < 24; k++) {
            double gsum = 0;
            for (int ww = 0; ww < W; ww++)
                for (int t = 0; t < T; t++) {
                    double gg[24];
                    wt_vals(gg, 24, -2, 2, 1000 + 100 * (uint64_t)t + 10 * (uint64_t)ww);
                    gsum += (float)gg[k];
                }
            ref[k] -= 0.05 / W * gsum;
        }
        weft_tensor_to_f64(p[0], w, 24);
        int bad = 0;
        for (int k = 0; k < 24; k++) bad += fabs(w[k] - ref[k]) > 1e-5 * (1 + fabs(ref[k]));
        CHECK(bad == 0);
        CHECK(weft_ps_finish(ps) == WEFT_OK);
    }
    weft_ps_free(ps);
    for (int i = 0; i < NP; i++) weft_tensor_free(p[i]);
    wt_drop_all();
}

// Host data stays on the host when the default device is the accelerator
// (as while `weft train --device cuda` builds its model): the split's
// exchange, the servers' shards and the DDP of a CPU model all work, and the
// PS run equals the one made with the CPU as the default.
static void test_default_device(void) {
    int64_t n[NP] = {24, 3000, 5};
    double *a[NP], *b[NP];
    for (int i = 0; i < NP; i++) {
        a[i] = calloc((size_t)n[i], sizeof(double));
        b[i] = calloc((size_t)n[i], sizeof(double));
    }
    ps_run(WEFT_PS_BSP, WEFT_DEVICE_CPU, 2, a);
    weft_device prev = weft_device_get_default();
    CHECK(weft_device_set_default(g_dev) == WEFT_OK);
    weft_comm *c = weft_comm_split(g_c, 0, -g_rank); // reversed order
    CHECK(c && weft_comm_rank(c) == g_size - 1 - g_rank);
    weft_comm_free(c);
    ps_run(WEFT_PS_BSP, WEFT_DEVICE_CPU, 2, b);
    int bad = 0;
    for (int i = 0; i < NP; i++)
        for (int64_t k = 0; k < n[i]; k++) bad += a[i][k] != b[i][k];
    CHECK(bad == 0);
    weft_device_set_default(prev);
    for (int i = 0; i < NP; i++) {
        free(a[i]);
        free(b[i]);
    }
}

// ---- weft train --dist ddp / ps on the device ----

static char g_dir[256];

static weft_model_cfg *train_cfg(void) {
    const char *text = "[net]\ndataset = fmnist\nbatch = 16\nsteps = 8\noptimizer = adam\nlr = 1e-2\nseed = 3\n"
                       "eval_every = 4\n[flatten]\n[linear]\nout = 16\n[relu]\n[linear]\nout = 10\n";
    return weft_model_cfg_parse(text, strlen(text), "dist_device.cfg");
}

static weft_train_opts train_opts(weft_train_dist dist, const char *device, const char *ck) {
    weft_train_opts o = {.quiet = true, .data_dir = g_dir, .dist = dist, .device = device, .ckpt_dir = ck,
                         .ckpt_every = 4, .keep_last = 10, .bucket_mb = 0.001};
    return o;
}

static void train_device_vs_cpu(weft_train_dist dist) {
    weft_model_cfg *cfg = train_cfg();
    CHECK(cfg != NULL);
    if (!cfg) return;
    const char *mode = dist == WEFT_TRAIN_DIST_DDP ? "ddp" : "ps";
    char ck_cpu[320], ck_dev[320], ck_half[320];
    snprintf(ck_cpu, sizeof ck_cpu, "%s/%s_cpu", g_dir, mode);
    snprintf(ck_dev, sizeof ck_dev, "%s/%s_dev", g_dir, mode);
    snprintf(ck_half, sizeof ck_half, "%s/%s_half", g_dir, mode);
    weft_train_result rc, rd, rh, rr;
    weft_train_opts oc = train_opts(dist, "cpu", ck_cpu), od = train_opts(dist, "cuda", ck_dev);
    CHECK(weft_train(cfg, &oc, &rc) == WEFT_OK);
    CHECK(weft_train(cfg, &od, &rd) == WEFT_OK);
    bool server = dist == WEFT_TRAIN_DIST_PS && g_rank == g_size - 1; // trains nothing
    CHECK(rd.ranks == g_size && rd.steps == (server ? 0 : 8));
    if (rc.printer) {
        CHECK(rd.printer && rd.test_acc > 0.3);
        CHECK_NEAR(rd.test_loss, rc.test_loss, g_mock ? 0 : 1e-3); // as test_train's device case
        if (g_mock) CHECK(rd.test_loss == rc.test_loss && rd.test_acc == rc.test_acc);
    }
    // a device run stopped at step 4 and resumed from its checkpoint ends as the straight one
    weft_train_opts oh = train_opts(dist, "cuda", ck_half);
    char text[512];
    snprintf(text, sizeof text, "[net]\ndataset = fmnist\nbatch = 16\nsteps = 4\noptimizer = adam\nlr = 1e-2\nseed = 3\n"
                                "eval_every = 4\n[flatten]\n[linear]\nout = 16\n[relu]\n[linear]\nout = 10\n");
    weft_model_cfg *c4 = weft_model_cfg_parse(text, strlen(text), "dist_device4.cfg");
    CHECK(c4 && weft_train(c4, &oh, &rh) == WEFT_OK && rh.steps == (server ? 0 : 4));
    weft_model_cfg_free(c4);
    oh.resume = true;
    CHECK(weft_train(cfg, &oh, &rr) == WEFT_OK && rr.steps == (server ? 0 : 8));
    if (rr.printer) {
        CHECK_NEAR(rr.test_loss, rd.test_loss, g_mock ? 0 : 1e-4);
        if (g_mock) CHECK(rr.test_loss == rd.test_loss);
    }
    weft_model_cfg_free(cfg);
}
static void test_train_ddp(void) { train_device_vs_cpu(WEFT_TRAIN_DIST_DDP); }
static void test_train_ps(void) { train_device_vs_cpu(WEFT_TRAIN_DIST_PS); }

int main(int argc, char **argv) {
    if (weft_dist_init(&argc, &argv) != WEFT_OK) {
        fprintf(stderr, "dist_init: %s\n", weft_last_error());
        return 1;
    }
    g_c = weft_comm_world();
    g_rank = weft_comm_rank(g_c);
    g_size = weft_comm_size(g_c);
    weft_comm_set_timeout(g_c, 60); // a bug here must fail, not hang the suite
    if (!wt_accelerator(&g_dev, &g_mock)) {
        fprintf(stderr, "no accelerator: %s\n", weft_last_error());
        return 1;
    }
    g_tol = g_mock ? 0 : 1e-5;
    g_workers = weft_comm_split(g_c, g_rank < g_size - 1 ? 0 : -1, g_rank);
    // rank 0 writes a small synthetic Fashion-MNIST; every rank reads it
    weft_tensor *path = weft_tensor_zeros(WEFT_DIMS((int64_t)sizeof g_dir), WEFT_U8);
    if (g_rank == 0) {
        snprintf(g_dir, sizeof g_dir, "/tmp/weft_test_dist_device_XXXXXX");
        if (!mkdtemp(g_dir)) return 1;
        wt_write_fmnist_split(g_dir, "train", 256, 1);
        wt_write_fmnist_split(g_dir, "t10k", 100, 2);
        memcpy(weft_tensor_data(path), g_dir, sizeof g_dir);
    }
    CHECK(weft_dist_broadcast(g_c, path, 0) == WEFT_OK);
    memcpy(g_dir, weft_tensor_data(path), sizeof g_dir);
    weft_tensor_free(path);
    RUN(test_collectives);
    RUN(test_ddp_sgd);
    RUN(test_ddp_adam);
    RUN(test_ddp_unused);
    RUN(test_ps_bsp);
    RUN(test_ps_asp_rows);
    RUN(test_default_device);
    RUN(test_train_ddp);
    RUN(test_train_ps);
    weft_dist_barrier(g_c);
    if (g_rank == 0) {
        char cmd[320];
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
        if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    }
    weft_comm_free(g_workers);
    int rc = wt_summary();
    weft_dist_finalize();
    return rc;
}
