// mpirun: 1 2 4
// Sharded optimiser state (ZeRO stages 1 and 2, weft/parallel.h) against a
// one-process reference. Every rank also trains a private copy of the model
// on the combined batch of all ranks with a plain weft_optim (no
// communication); ZeRO with R ranks, each on its slice of the batch, must
// give the same losses and parameters (f64, within 1e-10 relative: only the
// sums regroup). The MLP has 311 parameters (prime), so the shards are uneven
// and cut through parameters.
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

#include <weft/parallel.h>

#define B 3 // samples per rank
#define IN 6
#define H1 13
#define H2 12
#define OUT 4
#define NPARAM (IN * H1 + H1 + H1 * H2 + H2 + H2 * OUT + OUT) // 311
#define STEPS 6
#define TOL 1e-10

const char *__lsan_default_options(void);
const char *__lsan_default_options(void) { return "fast_unwind_on_malloc=0"; }

static weft_comm *g_c;
static int g_rank, g_size;
static weft_device g_dev;
static bool g_mock;

// ---- the model: x (n, IN) -> tanh(x w1 + b1) -> tanh(. w2 + b2) -> . w3 + b3 (n, OUT), f64;
// with `gain`, the logits are also multiplied by an f32 parameter (OUT): a second dtype group.
static weft_tensor *mlp_forward(weft_module *m, weft_tensor *x) {
    weft_tensor *h = x, *t;
    weft_tensor_ref(h);
    const char *w[3] = {"w1", "w2", "w3"}, *b[3] = {"b1", "b2", "b3"};
    for (int l = 0; l < 3; l++) {
        t = weft_matmul(h, weft_module_get(m, w[l]));
        weft_tensor_free(h);
        h = weft_add(t, weft_module_get(m, b[l]));
        weft_tensor_free(t);
        if (l < 2) {
            t = weft_tanh(h);
            weft_tensor_free(h);
            h = t;
        }
    }
    weft_tensor *gain = weft_module_get(m, "gain");
    if (gain) {
        weft_tensor *g64 = weft_cast(gain, WEFT_F64);
        t = weft_mul(h, g64);
        weft_tensor_free(h);
        weft_tensor_free(g64);
        h = t;
    }
    return h;
}

static weft_module *make_mlp(uint64_t seed, weft_device dev, bool gain) {
    weft_generator *g = weft_generator_create(seed);
    weft_module *m = weft_module_new("mlp", mlp_forward, NULL, NULL);
    const int64_t sz[3][2] = {{IN, H1}, {H1, H2}, {H2, OUT}};
    const char *w[3] = {"w1", "w2", "w3"}, *b[3] = {"b1", "b2", "b3"};
    for (int l = 0; l < 3; l++) {
        weft_tensor *wt = weft_tensor_randn(2, sz[l], WEFT_F64, g), *bt = weft_tensor_randn(1, &sz[l][1], WEFT_F64, g);
        weft_tensor *ws = weft_mul_scalar(wt, 1.0 / sqrt((double)sz[l][0])), *bs = weft_mul_scalar(bt, 0.1);
        weft_module_add_param(m, w[l], weft_tensor_to(ws, dev));
        weft_module_add_param(m, b[l], weft_tensor_to(bs, dev));
        weft_tensor_free(wt), weft_tensor_free(bt), weft_tensor_free(ws), weft_tensor_free(bs);
    }
    if (gain) {
        weft_tensor *gt = weft_tensor_rand(WEFT_DIMS(OUT), WEFT_F32, g), *gs = weft_mul_scalar(gt, 0.5);
        weft_tensor *g1 = weft_tensor_full(WEFT_DIMS(OUT), WEFT_F32, 0.75), *ga = weft_add(gs, g1);
        weft_module_add_param(m, "gain", weft_tensor_to(ga, dev));
        weft_tensor_free(gt), weft_tensor_free(gs), weft_tensor_free(g1), weft_tensor_free(ga);
    }
    weft_generator_free(g);
    return m;
}

// The combined batch of step s (the same on every rank): x (R*B, IN), y (R*B).
static void make_batch(int s, weft_tensor **x, weft_tensor **y) {
    weft_generator *g = weft_generator_create(1000 + (uint64_t)s);
    *x = weft_tensor_randn(WEFT_DIMS(g_size * B, IN), WEFT_F64, g);
    *y = weft_tensor_randint(WEFT_DIMS(g_size * B), 0, OUT, WEFT_I64, g);
    weft_generator_free(g);
}

// Mean cross-entropy of net on rows [row, row + n) of the batch (on dev); runs backward. NaN on failure.
static double backward_on(weft_module *net, weft_tensor *x, weft_tensor *y, int64_t row, int64_t n, weft_device dev) {
    weft_tensor *xs = weft_narrow(x, 0, row, n), *ys = weft_narrow(y, 0, row, n);
    weft_tensor *xd = weft_tensor_to(xs, dev), *yd = weft_tensor_to(ys, dev);
    weft_tensor *lg = weft_module_forward(net, xd);
    weft_tensor *l = weft_cross_entropy(lg, yd);
    double v = l && weft_backward(l, NULL, NULL) == WEFT_OK ? weft_tensor_item(l) : NAN;
    weft_tensor *ts[] = {xs, ys, xd, yd, lg, l};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
    return v;
}

// Largest |a - b| / (1 + |b|) over two tensors of the same size.
static double rel_diff(const weft_tensor *a, const weft_tensor *b) {
    int64_t n = weft_tensor_numel(a);
    if (!a || !b || weft_tensor_numel(b) != n) return 1e30;
    double *va = malloc(sizeof(double) * (size_t)(n + 1)), *vb = malloc(sizeof(double) * (size_t)(n + 1));
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

static double mean_over_ranks(double v) {
    weft_tensor *t = weft_tensor_full_on(0, NULL, WEFT_F64, v, WEFT_DEVICE_CPU);
    weft_dist_all_reduce(g_c, t, WEFT_REDUCE_AVG);
    double r = weft_tensor_item(t);
    weft_tensor_free(t);
    return r;
}

static weft_optim *make_opt(weft_module *m, const weft_optim_opts *o) {
    weft_tensor *p[8];
    char names[8][32];
    const char *np[8];
    int n = weft_module_param_count(m);
    for (int i = 0; i < n; i++) p[i] = weft_module_param_at(m, i, names[i], sizeof names[i]), np[i] = names[i];
    return weft_optim_create(o, n, p, np);
}

static weft_optim_opts opts(weft_optim_kind kind) {
    weft_optim_opts o = weft_optim_defaults(kind);
    o.lr = kind == WEFT_OPTIM_SGD ? 0.1 : 1e-2;
    if (kind == WEFT_OPTIM_SGD) o.momentum = 0.9, o.weight_decay = 1e-2;
    if (kind == WEFT_OPTIM_ADAMW) o.weight_decay = 0.1;
    return o;
}

// One step of each: ZeRO on this rank's slice, the reference on the whole
// batch (clip < 0: no clipping). Returns the two losses and the two norms.
typedef struct stepped {
    double loss, ref_loss, norm, ref_norm;
    int fails;
} stepped;

static stepped step_both(weft_zero *z, weft_module *net, weft_optim *ropt, weft_module *ref, int s, double clip,
                         weft_device dev) {
    stepped r = {0};
    weft_tensor *x, *y;
    make_batch(s, &x, &y);
    r.loss = mean_over_ranks(backward_on(net, x, y, (int64_t)g_rank * B, B, dev));
    if (clip < 0) r.fails += weft_zero_step(z) != WEFT_OK;
    else {
        r.fails += weft_zero_reduce_grads(z) != WEFT_OK;
        r.norm = weft_zero_clip_grad_norm(z, clip);
        r.fails += weft_zero_update(z) != WEFT_OK;
    }
    if (ref) {
        r.ref_loss = backward_on(ref, x, y, 0, (int64_t)g_size * B, WEFT_DEVICE_CPU);
        if (clip >= 0) {
            weft_tensor *p[8];
            int n = weft_module_param_count(ref);
            for (int i = 0; i < n; i++) p[i] = weft_module_param_at(ref, i, NULL, 0);
            r.ref_norm = weft_clip_grad_norm(n, p, clip);
        }
        r.fails += weft_optim_step(ropt) != WEFT_OK;
        weft_optim_zero_grad(ropt);
    }
    weft_tensor_free(x);
    weft_tensor_free(y);
    return r;
}

// ZeRO at `stage` vs the one-process run, STEPS steps: losses, clipping
// norms and parameters agree within TOL, and the parameters moved.
static void train_vs_reference(int stage, weft_optim_opts o, double clip) {
    weft_module *net = make_mlp(1 + (uint64_t)g_rank, WEFT_DEVICE_CPU, false); // replicas start different
    weft_module *ref = make_mlp(1, WEFT_DEVICE_CPU, false);                    // rank 0's initial values
    weft_zero *z = weft_zero_create(g_c, net, &o, stage);
    CHECK(z != NULL);
    if (!z) return;
    CHECK(params_diff(net, ref) == 0); // broadcast from rank 0, bit for bit
    weft_optim *ropt = make_opt(ref, &o);
    int fails = 0, clipped = 0;
    double worst = 0;
    for (int s = 0; s < STEPS; s++) {
        stepped r = step_both(z, net, ropt, ref, s, clip, WEFT_DEVICE_CPU);
        fails += r.fails;
        double d = fabs(r.loss - r.ref_loss) / fabs(r.ref_loss);
        if (clip >= 0) d = fmax(d, fabs(r.norm - r.ref_norm) / r.ref_norm), clipped += r.norm > clip;
        if (!(d <= worst)) worst = d;
    }
    CHECK(fails == 0);
    CHECK(worst < TOL);
    if (clip >= 0) CHECK(clipped > 0); // the clipping did scale
    double diff = params_diff(net, ref);
    CHECK(diff < TOL);
    if (!(diff < TOL && worst < TOL))
        fprintf(stderr, "rank %d: zero-%d %s: params differ by %g, losses/norms by %g\n", g_rank, stage,
                weft_optim_kind_name(o.kind), diff, worst);
    weft_module *init = make_mlp(1, WEFT_DEVICE_CPU, false);
    CHECK(params_diff(net, init) > 1e-3); // they moved
    weft_module_free(init);
    weft_optim_free(ropt);
    weft_zero_free(z);
    weft_module_free(net);
    weft_module_free(ref);
}

static void test_zero1_sgd_momentum(void) { train_vs_reference(1, opts(WEFT_OPTIM_SGD), 0.5); }
static void test_zero2_sgd_momentum(void) { train_vs_reference(2, opts(WEFT_OPTIM_SGD), 0.5); }
static void test_zero1_adamw(void) { train_vs_reference(1, opts(WEFT_OPTIM_ADAMW), 0.5); }
static void test_zero2_adamw(void) { train_vs_reference(2, opts(WEFT_OPTIM_ADAMW), 0.5); }

// Every optimiser kind and option set shares the one step path.
static void test_every_kind(void) {
    for (int stage = 1; stage <= 2; stage++) {
        weft_optim_opts o = opts(WEFT_OPTIM_SGD);
        o.nesterov = true, o.momentum = 0.5;
        train_vs_reference(stage, o, -1);
        train_vs_reference(stage, opts(WEFT_OPTIM_ADAGRAD), -1);
        o = opts(WEFT_OPTIM_RMSPROP);
        o.centered = true, o.momentum = 0.3, o.weight_decay = 1e-3;
        train_vs_reference(stage, o, -1);
        o = opts(WEFT_OPTIM_ADAM);
        o.amsgrad = true;
        train_vs_reference(stage, o, 0.2);
    }
}

// Two dtypes (an f32 gain on f64 logits): two groups, each sharded by
// itself. The f32 parameter's averaged gradient regroups in f32, so 1e-5.
static void test_two_dtypes(void) {
    for (int stage = 1; stage <= 2; stage++) {
        weft_module *net = make_mlp(3 + (uint64_t)g_rank, WEFT_DEVICE_CPU, true), *ref = make_mlp(3, WEFT_DEVICE_CPU, true);
        weft_optim_opts o = opts(WEFT_OPTIM_ADAM);
        weft_zero *z = weft_zero_create(g_c, net, &o, stage);
        weft_optim *ropt = make_opt(ref, &o);
        CHECK(z && ropt);
        if (!z || !ropt) return;
        int fails = 0;
        for (int s = 0; s < STEPS; s++) fails += step_both(z, net, ropt, ref, s, 1.0, WEFT_DEVICE_CPU).fails;
        CHECK(fails == 0);
        CHECK(params_diff(net, ref) < 1e-5);
        weft_zero_mem mem;
        CHECK(weft_zero_memory(z, &mem) == WEFT_OK && mem.full_param_bytes == NPARAM * 8 + OUT * 4);
        weft_optim_free(ropt);
        weft_zero_free(z);
        weft_module_free(net);
        weft_module_free(ref);
    }
}

// Over the dp_comm of a 3D layout (TP = 2 where the world allows it): the
// ranks of one DP group shard among themselves; the TP pairs run alike.
static void test_over_dp_comm(void) {
    int tp = weft_comm_size(weft_comm_world()) % 2 == 0 ? 2 : 1;
    weft_parallel *p = weft_parallel_create(weft_comm_world(), tp, 1);
    CHECK(p != NULL);
    if (!p) return;
    weft_comm *c = g_c;
    int r = g_rank, n = g_size;
    g_c = p->dp_comm, g_rank = p->dp_rank, g_size = p->dp;
    train_vs_reference(2, opts(WEFT_OPTIM_ADAMW), 0.5);
    train_vs_reference(1, opts(WEFT_OPTIM_SGD), 0.5);
    g_c = c, g_rank = r, g_size = n;
    weft_parallel_free(p);
}

// Gradient accumulation: two backward passes (two batches) before one
// step, against the reference accumulating the same two whole batches.
static void test_accumulation(void) {
    for (int stage = 1; stage <= 2; stage++) {
        weft_module *net = make_mlp(2, WEFT_DEVICE_CPU, false), *ref = make_mlp(2, WEFT_DEVICE_CPU, false);
        weft_optim_opts o = opts(WEFT_OPTIM_ADAMW);
        weft_zero *z = weft_zero_create(g_c, net, &o, stage);
        weft_optim *ropt = make_opt(ref, &o);
        CHECK(z && ropt);
        if (!z || !ropt) return;
        int fails = 0;
        for (int s = 0; s < 4; s++) {
            for (int k = 0; k < 2; k++) {
                weft_tensor *x, *y;
                make_batch(20 + 2 * s + k, &x, &y);
                fails += isnan(backward_on(net, x, y, (int64_t)g_rank * B, B, WEFT_DEVICE_CPU));
                fails += isnan(backward_on(ref, x, y, 0, (int64_t)g_size * B, WEFT_DEVICE_CPU));
                weft_tensor_free(x);
                weft_tensor_free(y);
            }
            fails += weft_zero_step(z) != WEFT_OK;
            fails += weft_optim_step(ropt) != WEFT_OK;
            weft_optim_zero_grad(ropt);
        }
        CHECK(fails == 0);
        CHECK(params_diff(net, ref) < TOL);
        weft_optim_free(ropt);
        weft_zero_free(z);
        weft_module_free(net);
        weft_module_free(ref);
    }
}

// ---- memory: this rank holds exactly its 1/DP shard of the state ----
static int64_t state_bytes(const weft_optim *o) {
    int64_t b = 0;
    for (int i = 0; i < weft_optim_state_count(o); i++) {
        weft_tensor *t = weft_optim_state_at(o, i, NULL, 0);
        b += weft_tensor_numel(t) * (int64_t)weft_dtype_size(weft_tensor_dtype(t));
    }
    return b;
}

static void test_memory(void) {
    for (int stage = 1; stage <= 2; stage++) {
        weft_module *net = make_mlp(1, WEFT_DEVICE_CPU, false);
        weft_optim_opts o = opts(WEFT_OPTIM_ADAMW);
        weft_zero *z = weft_zero_create(g_c, net, &o, stage);
        weft_optim *full = make_opt(net, &o); // the unsharded optimiser, for its state's size
        CHECK(z && full);
        if (!z || !full) return;
        int64_t off, cnt, lo = NPARAM / g_size;
        weft_dist_chunk(NPARAM, g_size, g_rank, &off, &cnt);
        CHECK(cnt == lo || cnt == lo + 1); // 1/DP, +-1 element
        // The pieces: this rank's range of every parameter, laid end to end, is its chunk.
        int64_t sum = 0, at = 0, pieces = 0, prev_end = -1;
        for (int i = 0; i < weft_module_param_count(net); i++) {
            int64_t po, pc;
            CHECK(weft_zero_shard_of(z, i, &po, &pc) == WEFT_OK);
            if (pc > 0) {
                CHECK(prev_end < 0 ? at + po == off : at + po == prev_end); // contiguous in the flat index
                prev_end = at + po + pc;
                pieces++;
            }
            sum += pc;
            at += weft_tensor_numel(weft_module_param_at(net, i, NULL, 0));
        }
        CHECK(sum == cnt);
        weft_zero_mem m;
        CHECK(weft_zero_memory(z, &m) == WEFT_OK);
        // exp_avg and exp_avg_sq (f64) of the shard, and one step counter per piece
        CHECK(m.optim_bytes == 2 * 8 * cnt + 8 * pieces);
        CHECK(m.optim_bytes == state_bytes(weft_zero_optim(z)));
        CHECK(m.full_optim_bytes == state_bytes(full));
        CHECK(m.full_optim_bytes == 2 * 8 * NPARAM + 8 * 6);
        CHECK(m.param_bytes == 8 * NPARAM && m.full_param_bytes == 8 * NPARAM && m.full_grad_bytes == 8 * NPARAM);
        CHECK(m.grad_bytes == (stage == 1 ? 8 * NPARAM : 8 * cnt));
        // The float state over all ranks is exactly the unsharded state.
        weft_tensor *t = weft_tensor_full_on(0, NULL, WEFT_F64, (double)(m.optim_bytes - 8 * pieces), WEFT_DEVICE_CPU);
        CHECK(weft_dist_all_reduce(g_c, t, WEFT_REDUCE_SUM) == WEFT_OK);
        CHECK(weft_tensor_item(t) == 2.0 * 8 * NPARAM);
        weft_tensor_free(t);
        weft_optim_free(full);
        weft_zero_free(z);
        weft_module_free(net);
    }
}

// ---- the device path (the mock accelerator: bit for bit) ----
static void zero_device_vs_cpu(int stage, weft_optim_opts o, double clip) {
    weft_module *cpu = make_mlp(1 + (uint64_t)g_rank, WEFT_DEVICE_CPU, false);
    weft_module *dev = make_mlp(1 + (uint64_t)g_rank, g_dev, false);
    CHECK(weft_device_equal(weft_tensor_device(weft_module_param_at(dev, 0, NULL, 0)), g_dev));
    weft_zero *zc = weft_zero_create(g_c, cpu, &o, stage), *zd = weft_zero_create(g_c, dev, &o, stage);
    CHECK(zc && zd);
    if (!zc || !zd) return;
    int fails = 0;
    for (int s = 0; s < STEPS; s++) {
        stepped a = step_both(zc, cpu, NULL, NULL, s, clip, WEFT_DEVICE_CPU);
        stepped b = step_both(zd, dev, NULL, NULL, s, clip, g_dev);
        fails += a.fails + b.fails;
        if (g_mock) CHECK(a.loss == b.loss && a.norm == b.norm);
        else CHECK_NEAR(b.loss, a.loss, 1e-9);
    }
    CHECK(fails == 0);
    for (int i = 0; i < weft_module_param_count(cpu); i++) {
        char what[64];
        snprintf(what, sizeof what, "zero-%d %s param %d (rank %d)", stage, weft_optim_kind_name(o.kind), i, g_rank);
        wt_check_same(what, weft_module_param_at(dev, i, NULL, 0), weft_module_param_at(cpu, i, NULL, 0),
                      g_mock ? 0 : 1e-9);
        CHECK(weft_device_equal(weft_tensor_device(weft_module_param_at(dev, i, NULL, 0)), g_dev));
    }
    // the state lives beside the parameters
    weft_optim *od = weft_zero_optim(zd);
    for (int i = 0; od && i < weft_optim_state_count(od); i++) {
        char name[96];
        weft_tensor *t = weft_optim_state_at(od, i, name, sizeof name);
        if (!strstr(name, ".step")) CHECK(weft_device_equal(weft_tensor_device(t), g_dev));
    }
    weft_zero_free(zc);
    weft_zero_free(zd);
    weft_module_free(cpu);
    weft_module_free(dev);
}

static void test_device(void) {
    zero_device_vs_cpu(1, opts(WEFT_OPTIM_SGD), 0.5);
    zero_device_vs_cpu(2, opts(WEFT_OPTIM_ADAMW), 0.5);
}

// ---- checkpoints ----
static const weft_tensor *find_in(const char *name, void *user) { return weft_optim_state_find(user, name); }

static void copy_params(weft_module *dst, weft_module *src) {
    for (int i = 0; i < weft_module_param_count(dst); i++)
        weft_tensor_copy_(weft_module_param_at(dst, i, NULL, 0), weft_module_param_at(src, i, NULL, 0));
}

// The sharded state gathered on rank 0 equals the unsharded run's; an
// unsharded state loaded into ZeRO (and a shard exported and loaded back)
// continues as the uninterrupted run does.
static void test_checkpoint(void) {
    weft_optim_opts o = opts(WEFT_OPTIM_ADAMW);
    for (int stage = 1; stage <= 2; stage++) {
        weft_module *net = make_mlp(5, WEFT_DEVICE_CPU, false), *ref = make_mlp(5, WEFT_DEVICE_CPU, false);
        weft_zero *z = weft_zero_create(g_c, net, &o, stage);
        weft_optim *ropt = make_opt(ref, &o);
        CHECK(z && ropt);
        if (!z || !ropt) return;
        int fails = 0;
        for (int s = 0; s < 3; s++) fails += step_both(z, net, ropt, ref, s, 0.5, WEFT_DEVICE_CPU).fails;
        // gather on the last rank into an unsharded optimiser over a scratch copy of the model
        int root = g_size - 1;
        weft_module *scratch = make_mlp(9, WEFT_DEVICE_CPU, false);
        weft_optim *full = g_rank == root ? make_opt(scratch, &o) : NULL;
        CHECK(weft_zero_gather_state(z, full, root) == WEFT_OK);
        if (full) {
            CHECK(weft_optim_state_count(full) == weft_optim_state_count(ropt));
            CHECK(weft_optim_step_count(full) == 3);
            double worst = 0;
            for (int i = 0; i < weft_optim_state_count(ropt); i++) {
                char name[96];
                weft_tensor *r = weft_optim_state_at(ropt, i, name, sizeof name);
                double d = rel_diff(weft_optim_state_find(full, name), r);
                if (!(d <= worst)) worst = d;
            }
            CHECK(worst < TOL);
        }
        // A checkpoint of the unsharded run (its state) resumes sharded: z2 over a copy of ref.
        weft_module *net2 = make_mlp(11, WEFT_DEVICE_CPU, false);
        copy_params(net2, ref);
        weft_zero *z2 = weft_zero_create(g_c, net2, &o, stage);
        CHECK(z2 && weft_zero_load_full_state(z2, find_in, ropt) == WEFT_OK);
        if (z2 && weft_zero_optim(z2)) weft_optim_set_step_count(weft_zero_optim(z2), weft_optim_step_count(ropt));
        // This rank's shard exported and loaded into z3 (same layout) over a copy of net.
        weft_module *net3 = make_mlp(12, WEFT_DEVICE_CPU, false);
        copy_params(net3, net);
        weft_zero *z3 = weft_zero_create(g_c, net3, &o, stage);
        CHECK(z3 != NULL);
        if (!z2 || !z3) return;
        if (weft_zero_optim(z3))
            CHECK(weft_optim_load_state(weft_zero_optim(z3), find_in, weft_zero_optim(z)) == WEFT_OK);
        for (int s = 3; s < 6; s++) {
            fails += step_both(z, net, ropt, ref, s, 0.5, WEFT_DEVICE_CPU).fails;
            fails += step_both(z2, net2, NULL, NULL, s, 0.5, WEFT_DEVICE_CPU).fails;
            fails += step_both(z3, net3, NULL, NULL, s, 0.5, WEFT_DEVICE_CPU).fails;
        }
        CHECK(fails == 0);
        CHECK(params_diff(net2, ref) < TOL);
        CHECK(params_diff(net3, net) == 0);
        // and a missing state is an error naming it, with nothing changed
        weft_optim_opts so = opts(WEFT_OPTIM_SGD);
        weft_optim *sgd = make_opt(scratch, &so); // holds momentum_buffer, not exp_avg
        CHECK(weft_zero_load_full_state(z2, find_in, sgd) != WEFT_OK || !weft_zero_optim(z2));
        if (weft_zero_optim(z2)) CHECK(wt_error_has("exp_avg"));
        weft_optim_free(sgd);
        weft_optim_free(full);
        weft_optim_free(ropt);
        weft_zero_free(z);
        weft_zero_free(z2);
        weft_zero_free(z3);
        weft_module_free(net);
        weft_module_free(net2);
        weft_module_free(net3);
        weft_module_free(ref);
        weft_module_free(scratch);
    }
}

// ---- errors, not crashes ----
static void test_errors(void) {
    weft_module *net = make_mlp(1, WEFT_DEVICE_CPU, false);
    weft_optim_opts o = opts(WEFT_OPTIM_ADAM);
    CHECK(weft_zero_create(g_c, net, &o, 3) == NULL && wt_error_has("stage 3"));
    CHECK(weft_zero_create(g_c, NULL, &o, 1) == NULL && wt_error_has("module"));
    weft_optim_opts bad = o;
    bad.beta1 = 1.5;
    CHECK(weft_zero_create(g_c, net, &bad, 1) == NULL && wt_error_has("beta1"));
    weft_module *ints = weft_module_new("ints", mlp_forward, NULL, NULL);
    weft_module_add_param(ints, "w", weft_tensor_zeros(WEFT_DIMS(4), WEFT_I32));
    weft_zero *zi = weft_zero_create(g_c, ints, &o, 1);
    CHECK(zi == NULL); // an i32 parameter: refused (or, not trainable, none left)
    weft_zero_free(zi);
    weft_module_free(ints);
    weft_zero *z = weft_zero_create(g_c, net, &o, 2);
    CHECK(z != NULL);
    if (z) {
        CHECK(weft_zero_stage(z) == 2);
        CHECK(weft_zero_update(z) != WEFT_OK && wt_error_has("reduce_grads"));
        CHECK(weft_zero_clip_grad_norm(z, 1.0) == -1 && wt_error_has("reduce_grads"));
        CHECK(weft_zero_gather_state(z, NULL, g_size) != WEFT_OK && wt_error_has("root"));
        // root without an optimiser: an error there, after the collectives (no rank hangs)
        weft_status st = weft_zero_gather_state(z, NULL, 0);
        CHECK(g_rank == 0 ? st != WEFT_OK && wt_error_has("no optimiser") : st == WEFT_OK);
        // a bad gradient on rank 0 only (on another device): an error there naming the
        // parameter; the other ranks step, and no rank is left waiting in a collective
        weft_tensor *p0 = weft_module_param_at(net, 0, NULL, 0);
        weft_tensor *gd = weft_tensor_full_on(weft_tensor_ndim(p0), weft_tensor_sizes(p0), WEFT_F64, 1.0,
                                              g_rank == 0 ? g_dev : WEFT_DEVICE_CPU);
        CHECK(weft_tensor_set_grad(p0, gd) == WEFT_OK);
        weft_tensor_free(gd);
        st = weft_zero_step(z);
        CHECK(g_rank == 0 ? st != WEFT_OK && wt_error_has("w1") : st == WEFT_OK);
        weft_zero_zero_grad(z);
        CHECK(weft_tensor_grad(p0) == NULL);
        weft_zero_free(z);
        weft_module_free(net);
        net = make_mlp(1, WEFT_DEVICE_CPU, false);
        z = weft_zero_create(g_c, net, &o, 2);
        CHECK(z != NULL);
        // no backward at all: every gradient counts as zero; Adam then leaves the parameters alone
        weft_module *before = make_mlp(1, WEFT_DEVICE_CPU, false);
        CHECK(z && weft_zero_step(z) == WEFT_OK);
        CHECK(params_diff(net, before) == 0);
        weft_module_free(before);
    }
    weft_zero_free(z);
    weft_module_free(net);
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
    if (!wt_accelerator(&g_dev, &g_mock)) {
        fprintf(stderr, "no accelerator: %s\n", weft_last_error());
        return 1;
    }
    RUN(test_zero1_sgd_momentum);
    RUN(test_zero2_sgd_momentum);
    RUN(test_zero1_adamw);
    RUN(test_zero2_adamw);
    RUN(test_every_kind);
    RUN(test_two_dtypes);
    RUN(test_over_dp_comm);
    RUN(test_accumulation);
    RUN(test_memory);
    RUN(test_device);
    RUN(test_checkpoint);
    RUN(test_errors);
    int rc = wt_summary();
    weft_dist_finalize();
    return rc;
}
