// Graph mode on a device: weft_graph_run with device tensors on the
// accelerator (tests/mock_device.c: the real cuda:0 where a GPU is present,
// else the mock, whose kernels are the CPU's) gives the CPU's values, bit for
// bit on the mock, for a graph of fused groups (a matmul epilogue, a
// broadcast variable), constants, a variable updated by an assign, views, a
// reduction and a cond; the memory plan's arena lives on the device; a CPU
// feed into a device graph is an error naming both; a CPU constant is copied
// over; autodiff and CSE make and merge constants there. CUDA graphs
// (src/graph/capture.c): probe, record, replay over several runs equal the
// same runs with WEFT_CUDA_GRAPHS=0 bit for bit (the real capture on a GPU,
// a simulated one on the mock: tests/graph/capture_sim.h); a node that cannot
// be recorded runs plainly between captured segments; a failed recording
// falls back; random ops draw anew in every replay.
#include <stdlib.h>
#include <string.h>

#include <weft/graph_passes.h>

#include "graph/capture_sim.h"
#include "graph/graph_impl.h"
#include "graph_test.h"
#include "weft_test.h"

static weft_device g_dev;
static bool g_mock;

#define M 37
#define N 70
#define K 33

// t moved to d (t is consumed).
static weft_tensor *on(weft_tensor *t, weft_device d) {
    weft_tensor *r = weft_tensor_to(t, d);
    weft_tensor_free(t);
    return r;
}

static weft_tensor *rand32(int nd, const int64_t *sz, double lo, double hi, uint64_t seed) {
    weft_tensor *t = wt_rand64(nd, sz, lo, hi, seed, false), *c = weft_cast(t, WEFT_F32);
    weft_tensor_free(t);
    return c;
}

// A device result against the CPU's: the same bits on the mock, 1e-5 on a GPU.
static void agree(const char *what, weft_tensor *dv, weft_tensor *cpu) {
    CHECK(dv && cpu);
    if (!dv || !cpu) return;
    CHECK(weft_device_equal(weft_tensor_device(dv), g_dev));
    if (g_mock) {
        bool ok = same_bits(dv, cpu);
        if (!ok) printf("  %s: values differ\n", what);
        CHECK(ok);
    } else {
        wt_check_same(what, dv, cpu, 1e-5);
    }
}

// Bit for bit, whatever the device (two runs of the same kernels).
static void identical(const char *what, weft_tensor *a, weft_tensor *b) {
    bool ok = a && b && same_bits(a, b);
    if (!ok) printf("  %s: values differ\n", what);
    CHECK(ok);
}

typedef struct model {
    weft_graph *g;
    weft_value x, p, keep[3];
    weft_node_id upd;
    weft_value b;
} model;

// x (M,N), pred: h = relu(2x + b) (b a variable (N)), z = gelu(h@w + 1) * (h@w)
// + k (k a constant (K)), s = sum(view(z)), out = pred ? 2s : -s; b += 1e-3 *
// rowsum(permute(h)) after h is read. Variables and constants on d.
static model build(weft_device d) {
    model m = {0};
    weft_graph *g = m.g = weft_graph_new();
    m.x = weft_graph_placeholder(g, "x", WEFT_DIMS(M, N), WEFT_F32);
    m.p = weft_graph_placeholder(g, "pred", 0, NULL, WEFT_BOOL);
    weft_tensor *b0 = on(rand32(WEFT_DIMS(N), -0.5, 0.5, 11), d), *w0 = on(rand32(WEFT_DIMS(N, K), -0.2, 0.2, 12), d);
    weft_tensor *k0 = on(rand32(WEFT_DIMS(K), -1, 1, 13), d);
    m.b = weft_graph_variable(g, "b", b0);
    weft_value w = weft_graph_variable(g, "w", w0), k = weft_graph_constant(g, "k", k0);
    weft_tensor_free(b0), weft_tensor_free(w0), weft_tensor_free(k0);
    weft_value h = op1(g, "relu", op2(g, "add", scal(g, "mul_scalar", m.x, 2), m.b));
    weft_value y = op2(g, "matmul", h, w);
    weft_value z = op2(g, "add", op2(g, "mul", op1(g, "gelu", scal(g, "add_scalar", y, 1)), y), k);
    weft_value zv = weft_graph_op1(g, "view", 1, &z, (int64_t[]){1, M * K}, 2, NULL, 0);
    weft_value s = sum_all(g, zv);
    weft_value ht = weft_graph_op1(g, "permute", 1, &h, (int64_t[]){1, 0}, 2, NULL, 0);
    weft_value hs = weft_graph_op1(g, "sum", 1, &ht, (int64_t[]){2}, 1, NULL, 0); // over rows: (N)
    weft_value a = weft_graph_assign_add(g, "b_update", m.b, scal(g, "mul_scalar", hs, 1e-3));
    m.upd = weft_graph_value_node(g, a);
    weft_graph *tg = weft_graph_new(), *eg = weft_graph_new();
    weft_value ti = weft_graph_placeholder(tg, "in0", 0, NULL, WEFT_F32), ei = weft_graph_placeholder(eg, "in0", 0, NULL, WEFT_F32);
    weft_value to = scal(tg, "mul_scalar", ti, 2), eo = op1(eg, "neg", ei), out;
    CHECK(weft_graph_cond(g, "pick", m.p, 1, &s, tg, &to, eg, &eo, 1, &out) == WEFT_OK);
    m.keep[0] = z, m.keep[1] = s, m.keep[2] = out;
    CHECK(out.id >= 0 && m.upd.id >= 0);
    return m;
}

// The optimised model (fusion and the rest of weft_graph_passes_all).
static model optimized(model m) {
    model o = m;
    weft_node_id tout;
    weft_graph_passes ps = weft_graph_passes_all();
    o.g = weft_graph_optimize_nodes(m.g, 3, m.keep, o.keep, 1, &m.upd, &tout, &ps, NULL);
    CHECK(o.g != NULL);
    o.upd = tout;
    o.x = weft_graph_find_value(o.g, "x");
    o.p = weft_graph_find_value(o.g, "pred");
    o.b = weft_graph_find_value(o.g, "b");
    weft_graph_free(m.g);
    int fused = 0;
    for (int i = 0; o.g && i < weft_graph_node_count(o.g); i++)
        fused += weft_graph_node_kind(o.g, (weft_node_id){i}) == WEFT_NODE_FUSED;
    CHECK(fused >= 2); // h's chain, and the matmul's epilogue
    return o;
}

// Run m once on feeds (x, pred) moved to d; out[0..3): the kept values, out[3]: b.
static weft_status run_model(model *m, weft_device d, weft_tensor *x, bool pred, weft_tensor **out) {
    weft_tensor *xd = weft_tensor_to(x, d), *pd = on(weft_tensor_scalar(pred, WEFT_BOOL), d);
    weft_status st = weft_graph_run(m->g, 2, (weft_value[]){m->x, m->p}, (weft_tensor *[]){xd, pd}, 3, m->keep, out, 1,
                                    &m->upd);
    weft_tensor_free(xd), weft_tensor_free(pd);
    out[3] = st == WEFT_OK ? weft_tensor_clone(weft_graph_variable_tensor(m->g, m->b)) : NULL;
    return st;
}

static void free4(weft_tensor **t) {
    for (int i = 0; i < 4; i++) weft_tensor_free(t[i]), t[i] = NULL;
}

// Three runs (the variable changes in between) on the CPU and on the device.
static void test_runs_match_cpu(void) {
    setenv("WEFT_CUDA_GRAPHS", "0", 1); // plain launches here; capture has its own tests
    model c = optimized(build(WEFT_DEVICE_CPU)), d = optimized(build(g_dev));
    const char *names[4] = {"z", "s", "cond", "b"};
    for (int run = 0; run < 3 && c.g && d.g; run++) {
        weft_tensor *x = rand32(WEFT_DIMS(M, N), -1, 1, 100 + run), *rc[4] = {0}, *rd[4] = {0};
        CHECK(run_model(&c, WEFT_DEVICE_CPU, x, run != 1, rc) == WEFT_OK);
        CHECK(run_model(&d, g_dev, x, run != 1, rd) == WEFT_OK);
        for (int k = 0; k < 4; k++) agree(names[k], rd[k], rc[k]);
        weft_graph_run_stats st = weft_graph_last_run_stats(d.g);
        CHECK(st.planned && st.arena_bytes > 0);
        free4(rc), free4(rd);
        weft_tensor_free(x);
    }
    weft_graph_free(c.g), weft_graph_free(d.g);
    unsetenv("WEFT_CUDA_GRAPHS");
}

// The plan's arena is device memory: the device's peak grows by it, the
// host's does not (the arena used to come from the default device).
static void test_arena_on_device(void) {
    setenv("WEFT_CUDA_GRAPHS", "0", 1);
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(512, 512), WEFT_F32);
    weft_value y = op1(g, "exp", op2(g, "matmul", x, x)); // two 1 MiB intermediates, no fusion (passes off)
    weft_value s = sum_all(g, op2(g, "matmul", y, x));
    weft_tensor *xt = on(rand32(WEFT_DIMS(512, 512), -0.01, 0.01, 5), g_dev), *out = NULL;
    weft_memory_stats d0, h0, d1, h1;
    weft_device cpu = WEFT_DEVICE_CPU;
    CHECK(weft_memory_stats_get(g_dev, &d0) == WEFT_OK && weft_memory_stats_get(cpu, &h0) == WEFT_OK);
    weft_memory_reset_peak(g_dev);
    weft_memory_reset_peak(cpu);
    CHECK(weft_graph_run(g, 1, &x, &xt, 1, &s, &out, 0, NULL) == WEFT_OK);
    CHECK(weft_memory_stats_get(g_dev, &d1) == WEFT_OK && weft_memory_stats_get(cpu, &h1) == WEFT_OK);
    size_t arena = weft_graph_last_run_stats(g).arena_bytes;
    CHECK(weft_graph_last_run_stats(g).planned && arena >= ((size_t)1 << 20));
    CHECK(d1.peak_bytes_in_use >= d0.bytes_in_use + arena);
    CHECK(h1.peak_bytes_in_use < h0.bytes_in_use + arena / 2);
    CHECK(out && weft_device_equal(weft_tensor_device(out), g_dev));
    weft_tensor_free(out), weft_tensor_free(xt);
    weft_graph_free(g);
    unsetenv("WEFT_CUDA_GRAPHS");
}

// A graph runs on one device: a CPU feed into a device graph, and variables
// on two devices, are errors naming the values and both devices; a CPU
// constant is a value and is copied to the run's device.
static void test_mixed_devices(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(3), WEFT_F64);
    weft_tensor *wd = on(wt_rand64(WEFT_DIMS(3), -1, 1, 1, false), g_dev), *wc = wt_rand64(WEFT_DIMS(3), -1, 1, 2, false);
    weft_value w = weft_graph_variable(g, "w", wd), c = cst(g, 0.5);
    weft_value y = op2(g, "add", op2(g, "mul", x, w), c);
    weft_tensor *xc = wt_rand64(WEFT_DIMS(3), -1, 1, 3, false), *xd = weft_tensor_to(xc, g_dev), *out = NULL;
    CHECK(weft_graph_run(g, 1, &x, &xc, 1, &y, &out, 0, NULL) != WEFT_OK);
    CHECK(wt_error_has("placeholder 'x'") && wt_error_has("cpu") && wt_error_has("cuda:0") && wt_error_has("variable 'w'"));
    CHECK(out == NULL);
    // the CPU constant c is copied over; the result is the CPU's
    CHECK(weft_graph_run(g, 1, &x, &xd, 1, &y, &out, 0, NULL) == WEFT_OK);
    weft_tensor *wh = weft_tensor_to(wd, WEFT_DEVICE_CPU), *e1 = weft_mul(xc, wh), *e2 = weft_add_scalar(e1, 0.5);
    agree("x*w+c", out, e2);
    weft_tensor_free(out);
    out = NULL;
    weft_value v = weft_graph_variable(g, "v", wc), y2 = op2(g, "add", y, v);
    CHECK(weft_graph_run(g, 1, &x, &xd, 1, &y2, &out, 0, NULL) != WEFT_OK);
    CHECK(wt_error_has("variable 'v' is on cpu") && wt_error_has("variable 'w' is on cuda:0"));
    weft_tensor *ts[] = {wd, wc, xc, xd, wh, e1, e2};
    for (int i = 0; i < 7; i++) weft_tensor_free(ts[i]);
    weft_graph_free(g);
}

// The default device does not decide where a graph runs: a CPU graph stays
// on the CPU with the accelerator as the default, and the reverse.
static void test_default_device(void) {
    setenv("WEFT_CUDA_GRAPHS", "0", 1);
    weft_device prev = weft_device_get_default();
    model c = optimized(build(WEFT_DEVICE_CPU)), d = optimized(build(g_dev));
    weft_tensor *x = rand32(WEFT_DIMS(M, N), -1, 1, 7), *rc[4] = {0}, *rd[4] = {0};
    CHECK(weft_device_set_default(g_dev) == WEFT_OK);
    CHECK(run_model(&c, WEFT_DEVICE_CPU, x, true, rc) == WEFT_OK);
    for (int k = 0; k < 4; k++) CHECK(rc[k] && weft_tensor_device(rc[k]).type == WEFT_CPU);
    CHECK(weft_device_set_default(WEFT_DEVICE_CPU) == WEFT_OK);
    CHECK(run_model(&d, g_dev, x, true, rd) == WEFT_OK);
    for (int k = 0; k < 4; k++) agree("default device", rd[k], rc[k]);
    weft_device_set_default(prev);
    free4(rc), free4(rd);
    weft_tensor_free(x);
    weft_graph_free(c.g), weft_graph_free(d.g);
    unsetenv("WEFT_CUDA_GRAPHS");
}

// Symbolic autodiff of a device graph: its seeds and zeros are device
// constants, and the gradients are the CPU's. CSE merges equal device constants.
static void test_autodiff_and_cse(void) {
    weft_graph *gs[2];
    weft_tensor *res[2][2] = {{0}};
    for (int pass = 0; pass < 2; pass++) {
        weft_device d = pass ? g_dev : WEFT_DEVICE_CPU;
        weft_graph *g = gs[pass] = weft_graph_new();
        weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(4, 5), WEFT_F64);
        weft_tensor *w0 = on(wt_rand64(WEFT_DIMS(5, 3), -1, 1, 21, false), d), *u0 = on(wt_rand64(WEFT_DIMS(3), -1, 1, 22, false), d);
        weft_value w = weft_graph_variable(g, "w", w0), u = weft_graph_variable(g, "u", u0); // u: no gradient reaches it
        weft_tensor_free(w0), weft_tensor_free(u0);
        weft_value loss = sum_all(g, op1(g, "tanh", op2(g, "matmul", x, w)));
        weft_value wrt[2] = {w, u}, grads[2];
        CHECK(weft_graph_gradients(g, loss, 2, wrt, grads) == WEFT_OK);
        for (int i = 0; i < g->n_nodes; i++)
            if (g->nodes[i].kind == WEFT_NODE_CONSTANT) CHECK(weft_device_equal(g->nodes[i].tensor->device, d));
        weft_tensor *xt = on(wt_rand64(WEFT_DIMS(4, 5), -1, 1, 23, false), d);
        CHECK(weft_graph_run(g, 1, &x, &xt, 2, grads, res[pass], 0, NULL) == WEFT_OK);
        weft_tensor_free(xt);
    }
    agree("grad w", res[1][0], res[0][0]);
    agree("grad u (zeros)", res[1][1], res[0][1]);
    for (int i = 0; i < 4; i++) weft_tensor_free(res[i / 2][i % 2]);
    weft_graph_free(gs[0]), weft_graph_free(gs[1]);
    // two equal device constants merge (their bytes are compared on the host)
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(3), WEFT_F64);
    weft_tensor *c1 = on(weft_tensor_full(1, (int64_t[]){3}, WEFT_F64, 1.5), g_dev),
                *c2 = on(weft_tensor_full(1, (int64_t[]){3}, WEFT_F64, 1.5), g_dev);
    weft_value y = op2(g, "add", op2(g, "mul", x, weft_graph_constant(g, "c1", c1)), weft_graph_constant(g, "c2", c2)), yo;
    weft_graph_passes ps = {0};
    ps.cse = true;
    weft_graph_pass_stats pst;
    weft_graph *o = weft_graph_optimize(g, 1, &y, &yo, &ps, &pst);
    CHECK(o && pst.cse_merged == 1);
    weft_graph_free(o), weft_graph_free(g);
    weft_tensor_free(c1), weft_tensor_free(c2);
}

// ---- CUDA graphs ----

// The model run `runs` times with capture on (a) and with WEFT_CUDA_GRAPHS=0
// (b), the same feeds: bit for bit the same. modes[i]: capture mode of run i.
static void capture_vs_plain(const char *what, int runs, int *modes, weft_graph_capture_stats *last) {
    model a = optimized(build(g_dev)), b = optimized(build(g_dev));
    for (int run = 0; run < runs && a.g && b.g; run++) {
        weft_tensor *x = rand32(WEFT_DIMS(M, N), -1, 1, 200 + run), *ra[4] = {0}, *rb[4] = {0};
        CHECK(run_model(&a, g_dev, x, run % 3 != 1, ra) == WEFT_OK);
        weft_graph_capture_stats cs = weft_graph_capture_last(a.g);
        modes[run] = cs.mode;
        if (last) *last = cs;
        setenv("WEFT_CUDA_GRAPHS", "0", 1);
        CHECK(run_model(&b, g_dev, x, run % 3 != 1, rb) == WEFT_OK);
        CHECK(weft_graph_capture_last(b.g).mode == 0 && strstr(weft_graph_capture_last(b.g).why, "WEFT_CUDA_GRAPHS=0"));
        unsetenv("WEFT_CUDA_GRAPHS");
        char buf[96];
        for (int k = 0; k < 4; k++) {
            snprintf(buf, sizeof buf, "%s: run %d, fetch %d", what, run, k);
            identical(buf, ra[k], rb[k]);
        }
        free4(ra), free4(rb);
        weft_tensor_free(x);
    }
    weft_graph_free(a.g), weft_graph_free(b.g);
}

// Probe, record, then replays; the cond runs on the host between two captured segments.
static void test_capture_replay(void) {
    if (g_mock) sim_reset_counts();
    int modes[6];
    weft_graph_capture_stats last;
    capture_vs_plain("capture", 6, modes, &last);
    CHECK(modes[0] == 1 && modes[1] == 2 && modes[2] == 3 && modes[5] == 3);
    CHECK(last.graphs >= 2 && last.captured_steps > 10 && last.plain_steps >= 1);
    CHECK(strstr(last.why, "'pick' (cond)") != NULL);
    if (!strstr(last.why, "'pick'")) printf("  why: %s\n", last.why);
    if (g_mock) {
        CHECK(sim.kept == last.graphs && sim.launches == 5 * last.graphs); // recorded once, launched in runs 2-6
        CHECK(sim.live == 0 && sim.destroys == sim.kept); // the graphs went with the run cache
    }
}

// A node whose kernel cannot be recorded (here: sum, as if it read a value
// back to the host) runs plainly; the rest is still captured.
static void test_capture_refused_node(void) {
    if (!g_mock) return; // the simulation decides what fails; on a GPU see tests/cuda/test_cuda_graph.c
    sim_reset_counts();
    sim.refuse = "sum";
    int modes[4];
    weft_graph_capture_stats last;
    capture_vs_plain("refused", 4, modes, &last);
    CHECK(modes[0] == 1 && modes[1] == 2 && modes[3] == 3);
    CHECK(strstr(last.why, "(sum)") && strstr(last.why, "reads a value back"));
    CHECK(last.plain_steps >= 3 && last.graphs >= 1); // two sums and the cond run plainly
    sim.refuse = NULL;
}

// A recording that fails (an invalidated capture) reruns its steps plainly:
// the run is still right, and later runs of that graph are plain.
static void test_capture_fallback(void) {
    if (!g_mock) return;
    sim_reset_counts();
    model a = optimized(build(g_dev)), b = optimized(build(g_dev));
    for (int run = 0; run < 4 && a.g && b.g; run++) {
        if (run == 1) sim.fail_end = true; // the record run
        weft_tensor *x = rand32(WEFT_DIMS(M, N), -1, 1, 300 + run), *ra[4] = {0}, *rb[4] = {0};
        CHECK(run_model(&a, g_dev, x, true, ra) == WEFT_OK);
        weft_graph_capture_stats cs = weft_graph_capture_last(a.g);
        if (run == 1) CHECK(cs.mode == 2 && strstr(cs.why, "recording steps") && strstr(cs.why, "invalidated"));
        if (run >= 2) CHECK(cs.mode == 0 && strstr(cs.why, "invalidated"));
        setenv("WEFT_CUDA_GRAPHS", "0", 1);
        CHECK(run_model(&b, g_dev, x, true, rb) == WEFT_OK);
        unsetenv("WEFT_CUDA_GRAPHS");
        for (int k = 0; k < 4; k++) identical("fallback", ra[k], rb[k]);
        free4(ra), free4(rb);
        weft_tensor_free(x);
    }
    CHECK(sim.live == 0);
    weft_graph_free(a.g), weft_graph_free(b.g);
}

// Dropout runs plainly (a new seed each run), so replays draw new masks: the
// same masks as runs without capture, and not the same mask twice.
static void test_capture_dropout(void) {
    weft_graph *gs[2];
    weft_value xs[2], ys[2];
    for (int k = 0; k < 2; k++) {
        weft_graph *g = gs[k] = weft_graph_new();
        xs[k] = weft_graph_placeholder(g, "x", WEFT_DIMS(64, 64), WEFT_F32);
        weft_value h = scal(g, "add_scalar", scal(g, "mul_scalar", xs[k], 3), 1);
        weft_value dr = weft_graph_op1(g, "dropout", 1, &h, (int64_t[]){1234, 0}, 2, (double[]){0.5}, 1);
        ys[k] = scal(g, "add_scalar", op1(g, "exp", scal(g, "mul_scalar", dr, 0.5)), 2);
    }
    weft_tensor *x = on(rand32(WEFT_DIMS(64, 64), -1, 1, 9), g_dev), *prev = NULL;
    for (int run = 0; run < 4; run++) {
        weft_tensor *a = NULL, *b = NULL;
        CHECK(weft_graph_run(gs[0], 1, &xs[0], &x, 1, &ys[0], &a, 0, NULL) == WEFT_OK);
        if (run >= 2) CHECK(weft_graph_capture_last(gs[0]).mode == 3);
        setenv("WEFT_CUDA_GRAPHS", "0", 1);
        CHECK(weft_graph_run(gs[1], 1, &xs[1], &x, 1, &ys[1], &b, 0, NULL) == WEFT_OK);
        unsetenv("WEFT_CUDA_GRAPHS");
        identical("dropout replay", a, b);
        if (prev) CHECK(!same_bits(a, prev));
        weft_tensor_free(prev);
        weft_tensor_free(b);
        prev = a;
    }
    weft_tensor_free(prev), weft_tensor_free(x);
    weft_graph_free(gs[0]), weft_graph_free(gs[1]);
}

// A fetched feed (or a view of one) is the caller's to keep: replays copy
// each run's feed into one fixed buffer, so a fetch out of it is a copy.
static void test_capture_fetch_feed(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(8, 6), WEFT_F32);
    weft_value xt = weft_graph_op1(g, "permute", 1, &x, (int64_t[]){1, 0}, 2, NULL, 0);
    weft_value y = scal(g, "mul_scalar", op1(g, "exp", scal(g, "add_scalar", xt, 1)), 2);
    weft_value f[3] = {x, xt, y};
    weft_tensor *feeds[5], *got[5][3];
    for (int run = 0; run < 5; run++) {
        feeds[run] = on(rand32(WEFT_DIMS(8, 6), -1, 1, 700 + run), g_dev);
        CHECK(weft_graph_run(g, 1, &x, &feeds[run], 3, f, got[run], 0, NULL) == WEFT_OK);
    }
    CHECK(weft_graph_capture_last(g).mode == 3);
    for (int run = 0; run < 5; run++) {
        identical("fetched feed", got[run][0], feeds[run]);
        weft_tensor *t = weft_transpose(feeds[run], 0, 1);
        identical("fetched view of the feed", got[run][1], t);
        weft_tensor_free(t), weft_tensor_free(feeds[run]);
        for (int k = 0; k < 3; k++) weft_tensor_free(got[run][k]);
    }
    weft_graph_free(g);
}

// WEFT_CUDA_GRAPHS=0 records nothing; a CPU graph never tries.
static void test_capture_switch(void) {
    if (g_mock) sim_reset_counts();
    model a = optimized(build(g_dev));
    weft_tensor *x = rand32(WEFT_DIMS(M, N), -1, 1, 400), *r[4] = {0};
    setenv("WEFT_CUDA_GRAPHS", "0", 1);
    for (int run = 0; run < 3; run++) {
        CHECK(run_model(&a, g_dev, x, true, r) == WEFT_OK);
        CHECK(weft_graph_capture_last(a.g).mode == 0);
        free4(r);
    }
    if (g_mock) CHECK(sim.begins == 0);
    unsetenv("WEFT_CUDA_GRAPHS");
    model c = optimized(build(WEFT_DEVICE_CPU));
    CHECK(run_model(&c, WEFT_DEVICE_CPU, x, true, r) == WEFT_OK);
    CHECK(weft_graph_capture_last(c.g).mode == 0 && !*weft_graph_capture_last(c.g).why);
    free4(r);
    weft_tensor_free(x);
    weft_graph_free(a.g), weft_graph_free(c.g);
}

int main(void) {
    if (!wt_accelerator(&g_dev, &g_mock)) {
        printf("no accelerator could be set up\n");
        return 1;
    }
    if (g_mock) sim_install();
    RUN(test_runs_match_cpu);
    RUN(test_arena_on_device);
    RUN(test_mixed_devices);
    RUN(test_default_device);
    RUN(test_autodiff_and_cse);
    RUN(test_capture_replay);
    RUN(test_capture_refused_node);
    RUN(test_capture_fallback);
    RUN(test_capture_dropout);
    RUN(test_capture_fetch_feed);
    RUN(test_capture_switch);
    if (g_mock) sim_uninstall();
    return wt_summary();
}
