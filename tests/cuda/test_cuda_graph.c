// Graph mode on a GPU (skips without one):
// - the fused elementwise kernel (src/ops/cuda/fused_kernels.cu) against the
//   CPU's fused loop for many programs (arithmetic, transcendental, binary
//   mixes, 16 inputs, 32 instructions, an input over its own output), every
//   dtype the family has, contiguous / row / column / scalar / transposed
//   inputs, sizes around block boundaries: exact for integers and for
//   arithmetic-only programs, 1e-4 (f32) / 1e-11 (f64) relative otherwise;
// - a fused graph against the same graph unfused, both on CUDA;
// - CUDA Graphs (src/graph/capture.c): a training-like step (two layers,
//   cross_entropy, SGD assigns) replayed over several steps equals the same
//   steps with WEFT_CUDA_GRAPHS=0 bit for bit; cross_entropy is captured (its
//   target check reports without a wait), and a bad label fed to a replay is
//   an error naming it at the next read of the loss; memory
//   the recorded kernels used is not handed to anyone else between replays;
//   freeing the graph gives every byte back.
#include <stdlib.h>
#include <string.h>

#include <weft/graph.h>
#include <weft/graph_passes.h>

#include "cuda_test.h"
#include "graph/graph_impl.h"
#include "ops/elementwise.h"
#include "ops/fused.h"

// ---- the fused kernel against the CPU loop ----

typedef struct prog_case {
    const char *name;
    int n_in;
    bool exact;      // arithmetic only: the same bits on both devices
    bool float_only; // uses a variant that takes floats only
    weft_ew_prog p;
} prog_case;

#define I(v, a0, a1, o, sc) {(v), (a1) == 99 ? 1 : 2, {(a0), (a1) == 99 ? 0 : (a1)}, (o), (sc)}
#define R(j) (-1 - (j)) // instruction j's result
#define U 99            // no second operand

static prog_case g_cases[] = {
    {"relu(2a+1)*b", 2, true, false,
     {4, {I(WEFT_EW_MUL_SCALAR, 0, U, -1, 2), I(WEFT_EW_ADD_SCALAR, R(0), U, -1, 1), I(WEFT_EW_RELU, R(1), U, -1, 0),
          I(WEFT_EW_MUL, R(2), 1, 0, 0)}}},
    {"binary mix", 3, true, false,
     {7, {I(WEFT_EW_SUB, 0, 1, -1, 0), I(WEFT_EW_MAXIMUM, R(0), 2, -1, 0), I(WEFT_EW_MINIMUM, R(1), 0, 1, 0),
          I(WEFT_EW_NEG, R(2), U, -1, 0), I(WEFT_EW_ABS, R(3), U, -1, 0), I(WEFT_EW_RELU_BW, R(4), 1, -1, 0),
          I(WEFT_EW_SIGN, R(5), U, 0, 0)}}},
    {"division", 2, true, false, {2, {I(WEFT_EW_DIV, 0, 1, 0, 0), I(WEFT_EW_ADD, R(0), 0, 1, 0)}}},
    {"transcendental", 2, false, true,
     {12, {I(WEFT_EW_TANH, 0, U, -1, 0), I(WEFT_EW_EXP, R(0), U, -1, 0), I(WEFT_EW_LOG, R(1), U, 0, 0),
           I(WEFT_EW_SQRT, R(1), U, -1, 0), I(WEFT_EW_RSQRT, R(3), U, -1, 0), I(WEFT_EW_SIGMOID, 1, U, -1, 0),
           I(WEFT_EW_GELU, R(5), U, -1, 0), I(WEFT_EW_GELU_GRAD, 1, U, -1, 0), I(WEFT_EW_SILU, R(7), U, -1, 0),
           I(WEFT_EW_SIN, R(8), U, -1, 0), I(WEFT_EW_COS, R(9), U, 1, 0), I(WEFT_EW_POW_SCALAR, R(4), U, 2, 1.5)}}},
    {"pow", 2, false, true, {2, {I(WEFT_EW_POW, 0, 1, -1, 0), I(WEFT_EW_MUL, R(0), 1, 0, 0)}}},
    // the exact GELU as PyTorch exports it: x * 0.5 * (1 + erf(x / sqrt 2)), erf exported too
    {"erf gelu", 1, false, true,
     {5, {I(WEFT_EW_MUL_SCALAR, 0, U, -1, 0.70710678118654752440), I(WEFT_EW_ERF, R(0), U, 1, 0),
          I(WEFT_EW_ADD_SCALAR, R(1), U, -1, 1), I(WEFT_EW_MUL, R(2), 0, -1, 0),
          I(WEFT_EW_MUL_SCALAR, R(3), U, 0, 0.5)}}},
};

// Inputs in [lo, hi) of dtype dt, shape given (CPU).
static weft_tensor *rand_dt(int nd, const int64_t *sz, double lo, double hi, uint64_t seed, weft_dtype dt) {
    weft_tensor *t = wt_rand64(nd, sz, lo, hi, seed, false), *r = weft_cast(t, dt); // integers: truncated
    weft_tensor_free(t);
    return r;
}

static weft_status run_fused(weft_device_type d, const weft_ew_prog *p, int n_in, weft_tensor **in, int n_out,
                             weft_tensor **out) {
    weft_attrs at = weft_ew_prog_attrs(p);
    weft_op_args a = {.op = &weft_op_fused_elementwise, .n_in = n_in, .in = in, .attrs = &at, .n_out = n_out, .out = out};
    return weft_op_fused_elementwise.kernel[d].fn(&a);
}

static int n_outputs(const weft_ew_prog *p) {
    int n = 0;
    for (int j = 0; j < p->n_instr; j++) n = p->instr[j].out + 1 > n ? p->instr[j].out + 1 : n;
    return n;
}

// Input k of a (rows, cols) group: layouts cycle through full, row (cols),
// column (rows,1), 0-d and transposed.
static weft_tensor *input_for(int k, int layout, int64_t rows, int64_t cols, double lo, double hi, weft_dtype dt) {
    uint64_t seed = 1000 + 17 * (uint64_t)k + (uint64_t)layout;
    switch (layout % 5) {
    case 1: return rand_dt(1, &cols, lo, hi, seed, dt);
    case 2: return rand_dt(2, (int64_t[]){rows, 1}, lo, hi, seed, dt);
    case 3: return rand_dt(0, NULL, lo, hi, seed, dt);
    case 4: {
        weft_tensor *t = rand_dt(2, (int64_t[]){cols, rows}, lo, hi, seed, dt), *v = weft_transpose(t, 0, 1);
        weft_tensor_free(t);
        return v;
    }
    default: return rand_dt(2, (int64_t[]){rows, cols}, lo, hi, seed, dt);
    }
}

static void kernel_case(const prog_case *c, weft_dtype dt, int64_t rows, int64_t cols, int layout) {
    bool fl = dt == WEFT_F32 || dt == WEFT_F64;
    if (c->float_only && !fl) return;
    double lo = fl ? (c->float_only ? 0.1 : -2) : -40, hi = fl ? 2 : 40;
    weft_tensor *hi_in[WEFT_EW_PROG_MAX_IN], *d_in[WEFT_EW_PROG_MAX_IN], *ho[4] = {0}, *dout[4] = {0};
    int n_out = n_outputs(&c->p);
    for (int k = 0; k < c->n_in; k++) {
        hi_in[k] = input_for(k, layout + k, rows, cols, lo, hi, dt);
        d_in[k] = weft_tensor_to(hi_in[k], WT_CUDA0);
        if ((layout + k) % 5 == 4) { // keep the transposed layout on the device too
            weft_tensor *t = weft_transpose(hi_in[k], 0, 1), *td = weft_tensor_to(t, WT_CUDA0);
            weft_tensor_free(d_in[k]);
            d_in[k] = weft_transpose(td, 0, 1);
            weft_tensor_free(t), weft_tensor_free(td);
        }
    }
    for (int j = 0; j < n_out; j++) {
        ho[j] = weft_tensor_empty_on(2, (int64_t[]){rows, cols}, dt, WEFT_DEVICE_CPU);
        dout[j] = weft_tensor_empty_on(2, (int64_t[]){rows, cols}, dt, WT_CUDA0);
    }
    CHECK(run_fused(WEFT_CPU, &c->p, c->n_in, hi_in, n_out, ho) == WEFT_OK);
    CHECK(run_fused(WEFT_CUDA, &c->p, c->n_in, d_in, n_out, dout) == WEFT_OK);
    char what[160];
    for (int j = 0; j < n_out; j++) {
        snprintf(what, sizeof what, "%s %s (%lld,%lld) layout %d out %d", c->name, weft_dtype_name(dt),
                 (long long)rows, (long long)cols, layout, j);
        double tol = c->exact || !fl ? 0 : dt == WEFT_F32 ? 1e-4 : 1e-11;
        wt_check_same(what, dout[j], ho[j], tol);
    }
    for (int k = 0; k < c->n_in; k++) weft_tensor_free(hi_in[k]), weft_tensor_free(d_in[k]);
    for (int j = 0; j < n_out; j++) weft_tensor_free(ho[j]), weft_tensor_free(dout[j]);
}

static void test_kernel_vs_cpu(void) {
    static const weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_I32, WEFT_I64};
    static const int64_t shapes[][2] = {{1, 1}, {1, 255}, {1, 256}, {1, 257}, {3, 341}, {32, 32}, {4, 1025}, {317, 329}};
    for (size_t c = 0; c < sizeof g_cases / sizeof *g_cases; c++)
        for (int d = 0; d < 4; d++)
            for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
                for (int layout = 0; layout < 5; layout++)
                    kernel_case(&g_cases[c], dts[d], shapes[s][0], shapes[s][1], layout);
}

// 16 inputs summed, and a 32-instruction chain; an input over its own output.
static void test_kernel_limits(void) {
    for (int d = 0; d < 2; d++) {
        weft_dtype dt = d ? WEFT_F64 : WEFT_I64;
        prog_case wide = {"16 inputs", 16, true, false, {0}};
        wide.p.n_instr = 15;
        for (int j = 0; j < 15; j++) wide.p.instr[j] = (weft_ew_instr)I(WEFT_EW_ADD, j ? R(j - 1) : 0, j + 1, j == 14 ? 0 : -1, 0);
        kernel_case(&wide, dt, 5, 1000, 1);
        prog_case longp = {"32 instructions", 1, true, false, {0}};
        longp.p.n_instr = 32;
        for (int j = 0; j < 32; j++)
            longp.p.instr[j] = (weft_ew_instr)I(j % 2 ? WEFT_EW_ADD_SCALAR : WEFT_EW_NEG, j ? R(j - 1) : 0, U, j == 31 ? 0 : -1, 3);
        kernel_case(&longp, dt, 7, 301, 0);
    }
    // out = in0 * 3 + in1 with in0 the output's own memory (the matmul epilogue's case)
    weft_ew_prog p = {2, {I(WEFT_EW_MUL_SCALAR, 0, U, 0, 3), I(WEFT_EW_ADD, R(0), 1, 0, 0)}};
    p.instr[0].out = -1;
    weft_tensor *x = rand_dt(2, (int64_t[]){300, 301}, -1, 1, 5, WEFT_F32), *y = rand_dt(1, (int64_t[]){301}, -1, 1, 6, WEFT_F32);
    weft_tensor *xd = weft_tensor_to(x, WT_CUDA0), *yd = weft_tensor_to(y, WT_CUDA0), *xh = weft_tensor_clone(x);
    CHECK(run_fused(WEFT_CPU, &p, 2, (weft_tensor *[]){xh, y}, 1, &xh) == WEFT_OK);
    CHECK(run_fused(WEFT_CUDA, &p, 2, (weft_tensor *[]){xd, yd}, 1, &xd) == WEFT_OK);
    wt_check_same("in place", xd, xh, 0);
    weft_tensor *t3 = weft_mul_scalar(x, 3), *ref = weft_add(t3, y);
    wt_check_same("in place vs ops", xh, ref, 0);
    weft_tensor *ts[] = {x, y, xd, yd, xh, t3, ref};
    for (int i = 0; i < 7; i++) weft_tensor_free(ts[i]);
}

// ---- graphs ----

static weft_value op1(weft_graph *g, const char *op, weft_value a) { return weft_graph_op1(g, op, 1, &a, NULL, 0, NULL, 0); }
static weft_value op2(weft_graph *g, const char *op, weft_value a, weft_value b) {
    return weft_graph_op1(g, op, 2, (weft_value[]){a, b}, NULL, 0, NULL, 0);
}
static weft_value scal(weft_graph *g, const char *op, weft_value a, double s) {
    return weft_graph_op1(g, op, 1, &a, NULL, 0, &s, 1);
}

// A two-layer classifier's training step with SGD assigns, built with the
// builder: x (B,D), y (B) labels; loss fetched, 4 updates as targets.
typedef struct step {
    weft_graph *g;
    weft_value x, y, loss;
    weft_value var[4];
    weft_node_id tg[4];
} step;

static step build_step(bool fuse) {
    enum { B = 64, D = 100, H = 300, C = 10 };
    step s = {0};
    weft_graph *g = weft_graph_new();
    s.x = weft_graph_placeholder(g, "x", WEFT_DIMS(B, D), WEFT_F32);
    s.y = weft_graph_placeholder(g, "y", WEFT_DIMS(B), WEFT_I64);
    const int64_t shp[4][2] = {{D, H}, {H, 1}, {H, C}, {C, 1}};
    for (int i = 0; i < 4; i++) {
        weft_tensor *t = rand_dt(shp[i][1] == 1 ? 1 : 2, shp[i][1] == 1 ? (int64_t[]){shp[i][0]} : shp[i], -0.1, 0.1,
                                 40 + (uint64_t)i, WEFT_F32);
        weft_tensor *d = weft_tensor_to(t, WT_CUDA0);
        char nm[8];
        snprintf(nm, sizeof nm, "p%d", i);
        s.var[i] = weft_graph_variable(g, nm, d);
        weft_tensor_free(t), weft_tensor_free(d);
    }
    weft_value h = op1(g, "gelu", op2(g, "add", op2(g, "matmul", s.x, s.var[0]), s.var[1]));
    weft_value logits = op2(g, "add", op2(g, "matmul", h, s.var[2]), s.var[3]);
    s.loss = weft_graph_op1(g, "cross_entropy", 2, (weft_value[]){logits, s.y}, NULL, 0, NULL, 0);
    weft_value gr[4];
    CHECK(s.loss.id >= 0 && weft_graph_gradients(g, s.loss, 4, s.var, gr) == WEFT_OK);
    weft_node_id tg[4];
    for (int i = 0; i < 4; i++) {
        weft_value a = weft_graph_assign(g, NULL, s.var[i], op2(g, "sub", s.var[i], scal(g, "mul_scalar", gr[i], 0.1)));
        tg[i] = weft_graph_value_node(g, a);
    }
    weft_graph_passes ps = weft_graph_passes_all();
    ps.fusion = fuse;
    weft_value kout;
    s.g = weft_graph_optimize_nodes(g, 1, &s.loss, &kout, 4, tg, s.tg, &ps, NULL);
    CHECK(s.g != NULL);
    s.loss = kout;
    s.x = weft_graph_find_value(s.g, "x");
    s.y = weft_graph_find_value(s.g, "y");
    for (int i = 0; i < 4; i++) {
        char nm[8];
        snprintf(nm, sizeof nm, "p%d", i);
        s.var[i] = weft_graph_find_value(s.g, nm);
    }
    weft_graph_free(g);
    return s;
}

static void step_free(step *s) { weft_graph_free(s->g); }

// Feeds of step k on cuda:0.
static void feeds(int k, weft_tensor **x, weft_tensor **y) {
    weft_tensor *xh = rand_dt(2, (int64_t[]){64, 100}, -1, 1, 500 + (uint64_t)k, WEFT_F32);
    weft_tensor *yh = rand_dt(1, (int64_t[]){64}, 0, 10, 600 + (uint64_t)k, WEFT_I64);
    *x = weft_tensor_to(xh, WT_CUDA0), *y = weft_tensor_to(yh, WT_CUDA0);
    weft_tensor_free(xh), weft_tensor_free(yh);
}

static weft_status run_step(step *s, int k, weft_tensor **loss) {
    weft_tensor *x, *y;
    feeds(k, &x, &y);
    weft_status st = weft_graph_run(s->g, 2, (weft_value[]){s->x, s->y}, (weft_tensor *[]){x, y}, 1, &s->loss, loss, 4, s->tg);
    weft_tensor_free(x), weft_tensor_free(y);
    return st;
}

static void same_vars(const char *what, step *a, step *b) {
    for (int i = 0; i < 4; i++) {
        char buf[96];
        snprintf(buf, sizeof buf, "%s: variable %d", what, i);
        wt_check_same(buf, weft_graph_variable_tensor(a->g, a->var[i]), weft_graph_variable_tensor(b->g, b->var[i]), 0);
    }
}

// Fused against unfused, on CUDA: the same formulas.
static void test_fused_graph_vs_unfused(void) {
    setenv("WEFT_CUDA_GRAPHS", "0", 1);
    step a = build_step(true), b = build_step(false);
    for (int k = 0; k < 3; k++) {
        weft_tensor *la = NULL, *lb = NULL;
        CHECK(run_step(&a, k, &la) == WEFT_OK && run_step(&b, k, &lb) == WEFT_OK);
        wt_check_same("fused loss", la, lb, 1e-6);
        weft_tensor_free(la), weft_tensor_free(lb);
    }
    for (int i = 0; i < 4; i++)
        wt_check_same("fused variables", weft_graph_variable_tensor(a.g, a.var[i]),
                      weft_graph_variable_tensor(b.g, b.var[i]), 1e-5);
    step_free(&a), step_free(&b);
    unsetenv("WEFT_CUDA_GRAPHS");
}

// Replays equal plain launches bit for bit over several steps; memory the
// recorded kernels use is not handed out between replays; freeing the graph
// gives it all back.
static void test_replay_equals_plain(void) {
    weft_memory_stats m0, m1;
    weft_device_synchronize(WT_CUDA0);
    CHECK(weft_memory_stats_get(WT_CUDA0, &m0) == WEFT_OK);
    step a = build_step(true), b = build_step(true);
    int modes[8];
    weft_tensor *fill[8] = {0};
    for (int k = 0; k < 8; k++) {
        weft_tensor *la = NULL, *lb = NULL;
        CHECK(run_step(&a, k, &la) == WEFT_OK);
        // Allocated (and filled) since the last run of a: they must keep their
        // values through this replay (none may be memory the recorded kernels write).
        for (int i = 0; i < 8 && k > 0; i++) {
            weft_tensor *s = weft_sum(fill[i], 0, NULL, false);
            CHECK(s && weft_tensor_item(s) == 7.0 * (1000 << i));
            weft_tensor_free(s), weft_tensor_free(fill[i]);
        }
        for (int i = 0; i < 8; i++) fill[i] = weft_tensor_full_on(1, (int64_t[]){1000 << i}, WEFT_F32, 7.0, WT_CUDA0);
        weft_graph_capture_stats cs = weft_graph_capture_last(a.g);
        modes[k] = cs.mode;
        if (k == 7) {
            printf("  replay: %d graphs, %d steps captured, %d plain: %s\n", cs.graphs, cs.captured_steps,
                   cs.plain_steps, cs.why);
            CHECK(cs.graphs >= 1 && cs.captured_steps > 20);
            // cross_entropy's target check no longer reads a value back: it is captured too
            CHECK(strstr(cs.why, "cross_entropy") == NULL);
        }
        setenv("WEFT_CUDA_GRAPHS", "0", 1);
        CHECK(run_step(&b, k, &lb) == WEFT_OK);
        CHECK(weft_graph_capture_last(b.g).mode == 0);
        unsetenv("WEFT_CUDA_GRAPHS");
        wt_check_same("replayed loss", la, lb, 0);
        char buf[64];
        snprintf(buf, sizeof buf, "step %d", k);
        same_vars(buf, &a, &b);
        weft_tensor_free(la), weft_tensor_free(lb);
    }
    for (int i = 0; i < 8; i++) weft_tensor_free(fill[i]);
    CHECK(modes[0] == 1 && modes[1] == 2 && modes[2] == 3 && modes[7] == 3);
    step_free(&a), step_free(&b);
    weft_device_synchronize(WT_CUDA0);
    CHECK(weft_memory_stats_get(WT_CUDA0, &m1) == WEFT_OK);
    CHECK(m1.bytes_in_use == m0.bytes_in_use);
    if (m1.bytes_in_use != m0.bytes_in_use)
        printf("  device bytes in use: %zu before, %zu after\n", m0.bytes_in_use, m1.bytes_in_use);
}

// A bad label in a replayed step: the replay runs, and reading the loss fails
// naming cross_entropy, the target and its row; later steps run normally.
static void test_bad_target_in_replay(void) {
    step a = build_step(true);
    for (int k = 0; k < 3; k++) { // probe, record, replay
        weft_tensor *l = NULL;
        CHECK(run_step(&a, k, &l) == WEFT_OK && isfinite(weft_tensor_item(l)));
        weft_tensor_free(l);
    }
    weft_tensor *x, *y, *l = NULL;
    feeds(3, &x, &y);
    weft_tensor *yh = weft_tensor_to(y, WEFT_DEVICE_CPU);
    CHECK(yh != NULL && weft_tensor_set(yh, (int64_t[]){5}, 12) == WEFT_OK);
    weft_tensor *yb = weft_tensor_to(yh, WT_CUDA0);
    weft_clear_error();
    weft_status st = weft_graph_run(a.g, 2, (weft_value[]){a.x, a.y}, (weft_tensor *[]){x, yb}, 1, &a.loss, &l, 4, a.tg);
    if (st == WEFT_OK) {
        CHECK(weft_graph_capture_last(a.g).mode == 3);
        CHECK(isnan(weft_tensor_item(l)));
    }
    CHECK(wt_error_has("cross_entropy") && wt_error_has("target 12 of row 5 is out of range [0, 10)"));
    weft_tensor_free(l), weft_tensor_free(x), weft_tensor_free(y), weft_tensor_free(yh), weft_tensor_free(yb);
    l = NULL;
    CHECK(run_step(&a, 4, &l) == WEFT_OK && isfinite(weft_tensor_item(l)));
    CHECK(weft_device_synchronize(WT_CUDA0) == WEFT_OK);
    weft_tensor_free(l);
    step_free(&a);
}

int main(void) {
    WT_CUDA_OR_SKIP();
    RUN(test_kernel_vs_cpu);
    RUN(test_kernel_limits);
    RUN(test_fused_graph_vs_unfused);
    RUN(test_replay_equals_plain);
    RUN(test_bad_target_in_replay);
    return wt_summary();
}
