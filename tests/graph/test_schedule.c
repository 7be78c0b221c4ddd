// Memory-aware schedule (src/graph/schedule.c) and rematerialisation
// (src/graph/passes/remat.c), in-place reuse in the plan: valid orders on random DAGs with control deps,
// exact planned peaks on hand-built graphs where the FIFO order or keeping a
// value is memory-bad, bit-identical values, and a traced training step
// (forward + backward) with identical loss and gradients with/without both.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weft/graph_passes.h>

#include "../../src/graph/graph_impl.h"
#include "../../src/graph/schedule.h"
#include "graph_test.h"
#include "weft_test.h"

static uint64_t rng(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

// Random DAGs (data edges to earlier values, control deps to earlier nodes):
// the schedule is a permutation of the id order where every data producer
// and control target comes first.
static void test_random_dags(void) {
    uint64_t seed = 12345;
    for (int trial = 0; trial < 40; trial++) {
        weft_graph *g = weft_graph_new();
        weft_value vals[64];
        int nv = 0;
        vals[nv++] = weft_graph_placeholder(g, "x", WEFT_DIMS(4), WEFT_F64);
        vals[nv++] = weft_graph_placeholder(g, "y", WEFT_DIMS(4), WEFT_F64);
        int n_ops = 10 + (int)(rng(&seed) % 40);
        static const char *un[] = {"exp", "sin", "neg", "cos"}, *bin[] = {"add", "mul", "sub"};
        for (int k = 0; k < n_ops && nv < 64; k++) {
            weft_value a = vals[rng(&seed) % (uint64_t)nv], b = vals[rng(&seed) % (uint64_t)nv];
            weft_value v = rng(&seed) % 2 ? op1(g, un[rng(&seed) % 4], a) : op2(g, bin[rng(&seed) % 3], a, b);
            CHECK(v.id >= 0);
            vals[nv++] = v;
            if (rng(&seed) % 4 == 0) { // a control dep on an earlier op node
                weft_node_id me = weft_graph_value_node(g, v), dep = weft_graph_value_node(g, vals[2 + rng(&seed) % (uint64_t)(nv - 2)]);
                if (dep.id < me.id) CHECK(weft_graph_add_control_dep(g, me, dep) == WEFT_OK);
            }
        }
        int N = weft_graph_node_count(g);
        int32_t *order = malloc(sizeof(int32_t) * (size_t)N), *pos = malloc(sizeof(int32_t) * (size_t)N);
        uint8_t *fetched = calloc((size_t)g->n_values, 1);
        for (int i = 0; i < N; i++) order[i] = i;
        fetched[vals[nv - 1].id] = 1;
        CHECK(weft_schedule_memory(g, order, N, fetched) == WEFT_OK);
        for (int i = 0; i < N; i++) pos[i] = -1;
        bool perm = true, valid = true;
        for (int s = 0; s < N; s++) {
            if (order[s] < 0 || order[s] >= N || pos[order[s]] >= 0) perm = false;
            else pos[order[s]] = s;
        }
        for (int i = 0; i < N && perm; i++) {
            const weft_gnode *n = &g->nodes[i];
            for (int k = 0; k < n->n_in; k++) valid &= pos[g->values[n->in[k]].node] < pos[i];
            for (int k = 0; k < n->n_ctrl; k++) valid &= pos[n->ctrl[k]] < pos[i];
        }
        CHECK(perm && valid);
        // and the executor (which uses it) still computes the same values as without it
        weft_tensor *xt = wt_rand64(WEFT_DIMS(4), -1, 1, 7 + (uint64_t)trial, false);
        weft_tensor *yt = wt_rand64(WEFT_DIMS(4), -1, 1, 8 + (uint64_t)trial, false), *o1 = NULL, *o2 = NULL;
        weft_value feeds[2] = {vals[0], vals[1]};
        weft_tensor *ft[2] = {xt, yt};
        setenv("WEFT_GRAPH_SCHEDULE", "0", 1);
        CHECK(weft_graph_run(g, 2, feeds, ft, 1, &vals[nv - 1], &o1, 0, NULL) == WEFT_OK);
        unsetenv("WEFT_GRAPH_SCHEDULE");
        CHECK(weft_graph_run(g, 2, feeds, ft, 1, &vals[nv - 1], &o2, 0, NULL) == WEFT_OK);
        CHECK(same_bits(o1, o2));
        weft_tensor *ts[] = {xt, yt, o1, o2};
        for (size_t i = 0; i < 4; i++) weft_tensor_free(ts[i]);
        free(order);
        free(pos);
        free(fetched);
        weft_graph_free(g);
    }
}

// a = sin(x) is ready first but used last; b = cos(x), c = exp(b), d = b + c,
// f = a + d. FIFO runs a first and holds it through b..d (4 buffers at d);
// the schedule runs it just before f (3 buffers).
static void test_sink_peak(void) {
    setenv("WEFT_GRAPH_INPLACE", "0", 1); // count buffers of the order alone
    enum { LEN = 1024 };
    const int64_t size = LEN * 8;
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(LEN), WEFT_F64);
    weft_value a = op1(g, "sin", x), b = op1(g, "cos", x), c = op1(g, "exp", b), d = op2(g, "add", b, c);
    weft_value f = op2(g, "add", a, d);
    weft_graph_plan_stats fifo, mem;
    setenv("WEFT_GRAPH_SCHEDULE", "0", 1);
    CHECK(weft_graph_plan(g, 1, &f, 0, NULL, &fifo) == WEFT_OK);
    weft_tensor *xt = wt_rand64(WEFT_DIMS(LEN), -1, 1, 3, false), *o1 = NULL, *o2 = NULL;
    CHECK(weft_graph_run(g, 1, &x, &xt, 1, &f, &o1, 0, NULL) == WEFT_OK);
    unsetenv("WEFT_GRAPH_SCHEDULE");
    CHECK(weft_graph_plan(g, 1, &f, 0, NULL, &mem) == WEFT_OK);
    CHECK(fifo.liveness_peak_bytes == 4 * size && fifo.planned_bytes == 4 * size);
    CHECK(mem.liveness_peak_bytes == 3 * size && mem.planned_bytes == 3 * size);
    CHECK(weft_graph_run(g, 1, &x, &xt, 1, &f, &o2, 0, NULL) == WEFT_OK);
    CHECK((int64_t)weft_graph_last_run_stats(g).arena_bytes == 3 * size);
    weft_tensor *ea = weft_sin(xt), *eb = weft_cos(xt), *ec = weft_exp(eb), *ed = weft_add(eb, ec), *ef = weft_add(ea, ed);
    CHECK(same_bits(o1, ef) && same_bits(o2, ef));
    weft_tensor *ts[] = {xt, o1, o2, ea, eb, ec, ed, ef};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) weft_tensor_free(ts[i]);
    weft_graph_free(g);
    unsetenv("WEFT_GRAPH_INPLACE");
}

// A variable read is never moved past an assign to that variable: r = v * 2
// is ready first and used last; assign(v, x) comes between (ordered after r's
// producer only by the schedule's own rule, as in FIFO).
static void test_no_move_past_assign(void) {
    weft_tensor *vt = weft_tensor_from_data((double[]){1, 2, 3, 4}, WEFT_DIMS(4), WEFT_F64);
    weft_graph *g = weft_graph_new();
    weft_value v = weft_graph_variable(g, "v", vt); // first: FIFO runs r before the assign
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(4), WEFT_F64);
    weft_value r = weft_graph_op1(g, "mul_scalar", 1, &v, NULL, 0, (double[]){2}, 1);
    weft_value as = weft_graph_assign(g, "set_v", v, x);
    weft_value s = op1(g, "sin", x), t = op1(g, "cos", s), u = op2(g, "add", t, r);
    // u needs the assign done first (so r, if it moved down, would read the new v)
    CHECK(weft_graph_add_control_dep(g, weft_graph_value_node(g, u), weft_graph_value_node(g, as)) == WEFT_OK);
    weft_tensor *xt = weft_tensor_from_data((double[]){10, 20, 30, 40}, WEFT_DIMS(4), WEFT_F64), *o = NULL, *o2 = NULL;
    CHECK(weft_graph_run(g, 1, &x, &xt, 1, &u, &o, 0, NULL) == WEFT_OK);
    weft_tensor *old = weft_tensor_from_data((double[]){1, 2, 3, 4}, WEFT_DIMS(4), WEFT_F64);
    weft_tensor *er = weft_mul_scalar(old, 2), *es = weft_sin(xt), *et = weft_cos(es), *eu = weft_add(et, er);
    CHECK(same_bits(o, eu)); // r read v before the assign, as in the FIFO order
    CHECK(!weft_graph_run(g, 1, &x, &xt, 1, &u, &o2, 0, NULL) && !same_bits(o2, eu)); // now v == x
    weft_tensor *ts[] = {vt, xt, o, o2, old, er, es, et, eu};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) weft_tensor_free(ts[i]);
    weft_graph_free(g);
}

// a = exp(x) is used at once (m1 = sin(a)) and again 30 nodes later (a * t).
// Kept, it is live while m1 and m2 = cos(m1) are: 3 big buffers. Recomputed
// (x is always there), the late copy runs just before the mul: 2 (+ t).
static void test_remat_peak(void) {
    setenv("WEFT_GRAPH_INPLACE", "0", 1);
    enum { LEN = 1024 };
    const int64_t size = LEN * 8;
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(LEN), WEFT_F64);
    weft_value a = op1(g, "exp", x);
    weft_value m1 = op1(g, "sin", a), m2 = op1(g, "cos", m1), t = sum_all(g, m2);
    for (int k = 0; k < 30; k++) t = op1(g, "sin", t); // scalar filler: a gap in node ids
    weft_value z = op2(g, "mul", a, t);
    CHECK(z.id >= 0);
    weft_graph_passes off = weft_graph_passes_all(), on = weft_graph_passes_all();
    off.remat = false;
    off.fusion = on.fusion = false; // exact buffer counts of the unfused ops
    weft_graph_pass_stats st_off, st_on;
    weft_value z_off, z_on;
    weft_graph *g_off = weft_graph_optimize(g, 1, &z, &z_off, &off, &st_off);
    weft_graph *g_on = weft_graph_optimize(g, 1, &z, &z_on, &on, &st_on);
    CHECK(g_off && g_on);
    if (!g_off || !g_on) return;
    CHECK(st_off.rematerialized == 0 && st_on.rematerialized == 1);
    CHECK(weft_graph_node_count(g_on) == weft_graph_node_count(g_off) + 1);
    CHECK(weft_graph_find_node(g_on, "exp_1.remat").id >= 0);
    weft_graph_plan_stats p_off, p_on;
    CHECK(weft_graph_plan(g_off, 1, &z_off, 0, NULL, &p_off) == WEFT_OK);
    CHECK(weft_graph_plan(g_on, 1, &z_on, 0, NULL, &p_on) == WEFT_OK);
    printf("remat: peak %lld without, %lld with\n", (long long)p_off.liveness_peak_bytes, (long long)p_on.liveness_peak_bytes);
    CHECK(p_off.liveness_peak_bytes == 3 * size); // live at m2: a, m1, m2
    // with remat: a, m1 at sin; m1, m2 at cos; a', t, z at the mul
    CHECK(p_on.liveness_peak_bytes == 2 * size + 8);
    weft_tensor *xt = wt_rand64(WEFT_DIMS(LEN), -1, 1, 9, false), *o0 = NULL, *o1 = NULL, *o2 = NULL;
    weft_value x_on = weft_graph_find_value(g_on, "x"), x_off = weft_graph_find_value(g_off, "x");
    CHECK(weft_graph_run(g, 1, &x, &xt, 1, &z, &o0, 0, NULL) == WEFT_OK);
    CHECK(weft_graph_run(g_off, 1, &x_off, &xt, 1, &z_off, &o1, 0, NULL) == WEFT_OK);
    CHECK(weft_graph_run(g_on, 1, &x_on, &xt, 1, &z_on, &o2, 0, NULL) == WEFT_OK);
    CHECK((int64_t)weft_graph_last_run_stats(g_on).arena_bytes == p_on.planned_bytes);
    CHECK(same_bits(o0, o1) && same_bits(o1, o2));
    // independent reference: eager
    weft_tensor *ea = weft_exp(xt), *m1t = weft_sin(ea), *m2t = weft_cos(m1t);
    weft_tensor *sa = NULL, *sm = NULL, *tt = weft_sum(m2t, 0, NULL, false);
    for (int k = 0; k < 30; k++) {
        weft_tensor *n = weft_sin(tt);
        weft_tensor_free(tt);
        tt = n;
    }
    weft_tensor *ez = weft_mul(ea, tt);
    CHECK(same_bits(o2, ez));
    weft_tensor *ts[] = {xt, o0, o1, o2, ea, m1t, m2t, sa, sm, tt, ez};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) weft_tensor_free(ts[i]);
    weft_graph_free(g_on);
    weft_graph_free(g_off);
    weft_graph_free(g);
    unsetenv("WEFT_GRAPH_INPLACE");
}

// In-place reuse: a chain of elementwise ops plans one buffer (each writes
// over its dying input); fetching a middle value or reading it through a
// transposing view stops it. Values equal eager ones bit for bit.
static void test_inplace(void) {
    enum { N = 10, LEN = 1024 };
    const int64_t size = LEN * 8;
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(LEN), WEFT_F64), v = x, mid = WEFT_VALUE_NONE;
    for (int i = 0; i < N; i++) {
        v = i % 3 == 2 ? op2(g, "mul", v, x) : op1(g, i % 2 ? "neg" : "sin", v);
        if (i == 4) mid = v;
    }
    weft_graph_plan_stats ps;
    CHECK(weft_graph_plan(g, 1, &v, 0, NULL, &ps) == WEFT_OK);
    CHECK(ps.n_buffers == N && ps.planned_bytes == size && ps.liveness_peak_bytes == size && ps.n_slots == 1);
    CHECK(ps.unplanned_bytes == N * size);
    setenv("WEFT_GRAPH_INPLACE", "0", 1);
    weft_graph_plan_stats off;
    CHECK(weft_graph_plan(g, 1, &v, 0, NULL, &off) == WEFT_OK);
    CHECK(off.planned_bytes == 2 * size);
    unsetenv("WEFT_GRAPH_INPLACE");
    weft_tensor *xt = wt_rand64(WEFT_DIMS(LEN), -1, 1, 3, false), *o = NULL, *om[2] = {0};
    CHECK(weft_graph_run(g, 1, &x, &xt, 1, &v, &o, 0, NULL) == WEFT_OK);
    CHECK((int64_t)weft_graph_last_run_stats(g).arena_bytes == size);
    weft_tensor *r = weft_tensor_ref(xt), *rmid = NULL;
    for (int i = 0; i < N; i++) {
        weft_tensor *t = i % 3 == 2 ? weft_mul(r, xt) : i % 2 ? weft_neg(r) : weft_sin(r);
        weft_tensor_free(r);
        r = t;
        if (i == 4) rmid = weft_tensor_ref(r);
    }
    CHECK(same_bits(o, r));
    // a fetched middle value survives: ops 0..4 share one buffer, 5..9 another
    CHECK(weft_graph_plan(g, 2, (weft_value[]){mid, v}, 0, NULL, &ps) == WEFT_OK);
    CHECK(ps.planned_bytes == 2 * size);
    CHECK(weft_graph_run(g, 1, &x, &xt, 2, (weft_value[]){mid, v}, om, 0, NULL) == WEFT_OK);
    CHECK(same_bits(om[0], rmid) && same_bits(om[1], r));
    // a = exp(m); b = a + transpose(a): a is read through a strided view, so b gets its own buffer
    weft_graph *h = weft_graph_new();
    weft_value m = weft_graph_placeholder(h, "m", WEFT_DIMS(16, 16), WEFT_F64), a = op1(h, "exp", m);
    weft_value at = weft_graph_op1(h, "permute", 1, &a, (int64_t[]){1, 0}, 2, NULL, 0), b = op2(h, "add", a, at);
    CHECK(weft_graph_plan(h, 1, &b, 0, NULL, &ps) == WEFT_OK);
    CHECK(ps.planned_bytes == 2 * 16 * 16 * 8);
    weft_tensor *mt = wt_rand64(WEFT_DIMS(16, 16), -1, 1, 4, false), *ob = NULL;
    CHECK(weft_graph_run(h, 1, &m, &mt, 1, &b, &ob, 0, NULL) == WEFT_OK);
    weft_tensor *ea = weft_exp(mt), *et = weft_transpose(ea, 0, 1), *eb = weft_add(ea, et);
    CHECK(same_bits(ob, eb));
    weft_tensor *ts[] = {xt, o, om[0], om[1], r, rmid, mt, ob, ea, et, eb};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) weft_tensor_free(ts[i]);
    weft_graph_free(h);
    weft_graph_free(g);
}

// A traced training step (layer_norm + gelu MLP, forward + backward): the
// same loss and gradients, bit for bit, with remat + schedule and without.
static void test_traced_step(void) {
    enum { B = 16, D = 32, L = 3 };
    weft_tensor *w[L], *lw[L], *lb[L], *params[3 * L];
    for (int l = 0; l < L; l++) {
        params[3 * l] = w[l] = wt_rand64(WEFT_DIMS(D, D), -0.3, 0.3, 20 + (uint64_t)l, true);
        params[3 * l + 1] = lw[l] = wt_rand64(WEFT_DIMS(D), 0.5, 1.5, 40 + (uint64_t)l, true);
        params[3 * l + 2] = lb[l] = wt_rand64(WEFT_DIMS(D), -0.1, 0.1, 60 + (uint64_t)l, true);
    }
    weft_tensor *x = wt_rand64(WEFT_DIMS(B, D), -1, 1, 5, false);
    weft_graph *g = weft_graph_new();
    weft_graph_trace_begin(g);
    weft_value vx = weft_graph_trace_input(g, x, "x");
    weft_tensor *h = weft_tensor_ref(x);
    for (int l = 0; l < L; l++) {
        weft_tensor *n = weft_layer_norm(h, 1, lw[l], lb[l], 1e-5), *m = weft_matmul(n, w[l]), *a = weft_gelu(m);
        weft_tensor *r = weft_add(h, a);
        weft_tensor_free(n);
        weft_tensor_free(m);
        weft_tensor_free(a);
        weft_tensor_free(h);
        h = r;
    }
    weft_tensor *sq = weft_mul(h, h), *loss = weft_sum(sq, 0, NULL, false);
    CHECK(weft_backward(loss, NULL, NULL) == WEFT_OK);
    weft_value fetch[1 + 3 * L], f_on[1 + 3 * L], f_off[1 + 3 * L];
    fetch[0] = weft_graph_trace_output(g, loss);
    for (int i = 0; i < 3 * L; i++) fetch[1 + i] = weft_graph_trace_output(g, weft_tensor_grad(params[i]));
    CHECK(weft_graph_trace_end(g) == WEFT_OK);
    weft_graph_passes off = weft_graph_passes_all();
    off.remat = false;
    weft_graph_pass_stats st;
    weft_graph *g_on = weft_graph_optimize(g, 1 + 3 * L, fetch, f_on, NULL, &st);
    weft_graph *g_off = weft_graph_optimize(g, 1 + 3 * L, fetch, f_off, &off, NULL);
    CHECK(g_on && g_off);
    if (!g_on || !g_off) return;
    printf("traced step: %d nodes, %d rematerialized\n", st.nodes_after, st.rematerialized);
    CHECK(st.rematerialized > 0);
    weft_graph_plan_stats p_on, p_off;
    CHECK(weft_graph_plan(g_on, 1 + 3 * L, f_on, 0, NULL, &p_on) == WEFT_OK);
    setenv("WEFT_GRAPH_SCHEDULE", "0", 1);
    CHECK(weft_graph_plan(g_off, 1 + 3 * L, f_off, 0, NULL, &p_off) == WEFT_OK);
    unsetenv("WEFT_GRAPH_SCHEDULE");
    printf("traced step: planned %lld bytes (remat + schedule) vs %lld (neither remat nor schedule)\n", (long long)p_on.planned_bytes,
           (long long)p_off.planned_bytes);
    CHECK(p_on.liveness_peak_bytes < p_off.liveness_peak_bytes);
    weft_tensor *x2 = wt_rand64(WEFT_DIMS(B, D), -1, 1, 6, false), *a[1 + 3 * L] = {0}, *b[1 + 3 * L] = {0};
    weft_value xon = weft_graph_find_value(g_on, "x"), xoff = weft_graph_find_value(g_off, "x");
    CHECK(weft_graph_run(g_on, 1, &xon, &x2, 1 + 3 * L, f_on, a, 0, NULL) == WEFT_OK);
    setenv("WEFT_GRAPH_SCHEDULE", "0", 1);
    CHECK(weft_graph_run(g_off, 1, &xoff, &x2, 1 + 3 * L, f_off, b, 0, NULL) == WEFT_OK);
    unsetenv("WEFT_GRAPH_SCHEDULE");
    bool same = true;
    for (int i = 0; i < 1 + 3 * L; i++) same &= same_bits(a[i], b[i]);
    CHECK(same);
    // and against the traced graph itself run unoptimised (close: passes may fold differently)
    weft_tensor *c0 = NULL;
    CHECK(weft_graph_run(g, 1, &vx, &x2, 1, fetch, &c0, 0, NULL) == WEFT_OK);
    CHECK(same_bits(c0, a[0]));
    for (int i = 0; i < 1 + 3 * L; i++) {
        weft_tensor_free(a[i]);
        weft_tensor_free(b[i]);
    }
    weft_tensor *ts[] = {x, x2, h, sq, loss, c0};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) weft_tensor_free(ts[i]);
    for (int i = 0; i < 3 * L; i++) weft_tensor_free(params[i]);
    weft_graph_free(g_on);
    weft_graph_free(g_off);
    weft_graph_free(g);
}

// softmax(q k^T) is used early (p @ v) and late (p * t); its input, the
// scores, dies at the softmax. The pass recomputes the chain (matmul with
// K = 8 and softmax) for the late use from q and k, which are always there,
// so p is not kept across the gap, where a big temporary w is live.
static void test_remat_chain(void) {
    setenv("WEFT_GRAPH_INPLACE", "0", 1);
    const int64_t psize = 4 * 64 * 64 * 8;
    weft_graph *g = weft_graph_new();
    weft_value q = weft_graph_placeholder(g, "q", WEFT_DIMS(4, 64, 8), WEFT_F64);
    weft_value kt = weft_graph_placeholder(g, "kt", WEFT_DIMS(4, 8, 64), WEFT_F64);
    weft_value v = weft_graph_placeholder(g, "v", WEFT_DIMS(4, 64, 8), WEFT_F64);
    weft_value x2 = weft_graph_placeholder(g, "x2", WEFT_DIMS(4, 64, 128), WEFT_F64);
    weft_value sc = op2(g, "matmul", q, kt);
    weft_value pr = weft_graph_op1(g, "softmax", 1, &sc, (int64_t[]){2}, 1, NULL, 0);
    weft_value y = op2(g, "matmul", pr, v);
    weft_value yv = weft_graph_op1(g, "view", 1, &y, (int64_t[]){1, 4 * 64 * 8}, 2, NULL, 0);
    weft_value w = op2(g, "mul", x2, sum_all(g, yv)); // (4,64,128): twice p's bytes, in the gap (after y)
    weft_value wv = weft_graph_op1(g, "view", 1, &w, (int64_t[]){1, 4 * 64 * 128}, 2, NULL, 0);
    weft_value t = sum_all(g, wv);
    for (int k = 0; k < 30; k++) t = op1(g, "sin", t); // scalar filler: a gap in node ids
    weft_value z = op2(g, "mul", pr, t);
    CHECK(pr.id >= 0 && wv.id >= 0 && yv.id >= 0 && z.id >= 0);
    weft_graph_passes off = weft_graph_passes_all(), on = off;
    off.remat = false;
    off.fusion = on.fusion = false; // buffers of the plain ops
    weft_graph_pass_stats st_on;
    weft_value z_off, z_on;
    weft_graph *g_off = weft_graph_optimize(g, 1, &z, &z_off, &off, NULL);
    weft_graph *g_on = weft_graph_optimize(g, 1, &z, &z_on, &on, &st_on);
    CHECK(g_off && g_on);
    if (!g_off || !g_on) return;
    CHECK(st_on.rematerialized == 2); // the softmax and its scores
    int n_remat_mm = 0, n_remat_sm = 0;
    for (int i = 0; i < weft_graph_node_count(g_on); i++) {
        const char *nm = weft_graph_node_name(g_on, (weft_node_id){i}), *op = weft_graph_node_op(g_on, (weft_node_id){i});
        if (strstr(nm, ".remat")) n_remat_mm += !strcmp(op, "matmul"), n_remat_sm += !strcmp(op, "softmax");
    }
    CHECK(n_remat_mm == 1 && n_remat_sm == 1);
    weft_graph_plan_stats p_off, p_on;
    CHECK(weft_graph_plan(g_off, 1, &z_off, 0, NULL, &p_off) == WEFT_OK);
    CHECK(weft_graph_plan(g_on, 1, &z_on, 0, NULL, &p_on) == WEFT_OK);
    printf("remat chain: peak %lld without, %lld with\n", (long long)p_off.liveness_peak_bytes,
           (long long)p_on.liveness_peak_bytes);
    // Without: p (psize) and w (2 psize) together in the gap. With: w alone
    // there; scores + probabilities (2 psize) early and again late.
    CHECK(p_off.liveness_peak_bytes >= 3 * psize);
    CHECK(p_on.liveness_peak_bytes < 2 * psize + 4096);
    weft_tensor *qt = wt_rand64(WEFT_DIMS(4, 64, 8), -1, 1, 21, false), *ktt = wt_rand64(WEFT_DIMS(4, 8, 64), -1, 1, 22, false);
    weft_tensor *vt = wt_rand64(WEFT_DIMS(4, 64, 8), -1, 1, 23, false), *x2t = wt_rand64(WEFT_DIMS(4, 64, 128), -1, 1, 24, false);
    weft_tensor *feeds[4] = {qt, ktt, vt, x2t}, *o_off = NULL, *o_on = NULL;
    const char *names[4] = {"q", "kt", "v", "x2"};
    weft_value f_off[4], f_on[4];
    for (int i = 0; i < 4; i++) f_off[i] = weft_graph_find_value(g_off, names[i]), f_on[i] = weft_graph_find_value(g_on, names[i]);
    CHECK(weft_graph_run(g_off, 4, f_off, feeds, 1, &z_off, &o_off, 0, NULL) == WEFT_OK);
    CHECK(weft_graph_run(g_on, 4, f_on, feeds, 1, &z_on, &o_on, 0, NULL) == WEFT_OK);
    CHECK(o_off && o_on && same_bits(o_off, o_on));
    // independent reference: eager ops
    weft_tensor *es = weft_matmul(qt, ktt), *ep = weft_softmax(es, 2), *ey = weft_matmul(ep, vt);
    weft_tensor *s2 = weft_sum(ey, 0, NULL, false), *ew = weft_mul(x2t, s2), *s1 = NULL, *et = weft_sum(ew, 0, NULL, false);
    for (int k = 0; k < 30; k++) {
        weft_tensor *n = weft_sin(et);
        weft_tensor_free(et);
        et = n;
    }
    weft_tensor *ez = weft_mul(ep, et);
    CHECK(o_on && same_bits(o_on, ez));
    weft_tensor *ts[] = {qt, ktt, vt, x2t, o_off, o_on, es, ep, ey, ew, s1, s2, et, ez};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) weft_tensor_free(ts[i]);
    weft_graph_free(g_off);
    weft_graph_free(g_on);
    weft_graph_free(g);
    unsetenv("WEFT_GRAPH_INPLACE");
}

// An optimiser update written straight into its variable takes no arena
// bytes; when another reader of the variable forbids that, it needs its own.
static void test_plan_inplace_update(void) {
    for (int reader = 0; reader < 2; reader++) {
        weft_graph *g = weft_graph_new();
        weft_tensor *vt = wt_rand64(WEFT_DIMS(1000), -1, 1, 1, false);
        weft_value v = weft_graph_variable(g, "v", vt);
        weft_value gr = weft_graph_placeholder(g, "g", WEFT_DIMS(1000), WEFT_F64);
        weft_value lr = weft_graph_placeholder(g, "lr", 0, NULL, WEFT_F64);
        double wd = 0;
        weft_value u = weft_graph_op1(g, "sgd_update", 3, (weft_value[]){v, gr, lr}, NULL, 0, &wd, 1);
        weft_node_id an = weft_graph_value_node(g, weft_graph_assign(g, "assign_v", v, u));
        weft_value r = reader ? op1(g, "neg", v) : WEFT_VALUE_NONE; // not ordered against the update
        weft_graph_plan_stats ps;
        CHECK(weft_graph_plan(g, reader, &r, 1, &an, &ps) == WEFT_OK);
        CHECK(ps.planned_bytes == (reader ? 16000 : 0)); // u and the fetched neg own bytes then
        weft_tensor *gt = wt_rand64(WEFT_DIMS(1000), -1, 1, 2, false), *lrt = weft_tensor_scalar(0.5, WEFT_F64), *out = NULL;
        double v0[1000], gv[1000], v1[1000];
        weft_tensor_to_f64(vt, v0, 1000);
        weft_tensor_to_f64(gt, gv, 1000);
        CHECK(weft_graph_run(g, 2, (weft_value[]){gr, lr}, (weft_tensor *[]){gt, lrt}, reader, &r, &out, 1, &an) == WEFT_OK);
        weft_graph_run_stats rs = weft_graph_last_run_stats(g);
        CHECK(rs.inplace_writes == !reader && rs.arena_bytes == (size_t)ps.planned_bytes);
        weft_tensor_to_f64(weft_graph_variable_tensor(g, v), v1, 1000);
        bool ok = true;
        for (int i = 0; i < 1000; i++) ok &= v1[i] == v0[i] - 0.5 * gv[i];
        CHECK(ok);
        weft_tensor_free(vt), weft_tensor_free(gt), weft_tensor_free(lrt), weft_tensor_free(out);
        weft_graph_free(g);
    }
}

int main(void) {
    RUN(test_random_dags);
    RUN(test_plan_inplace_update);
    RUN(test_sink_peak);
    RUN(test_no_move_past_assign);
    RUN(test_remat_peak);
    RUN(test_remat_chain);
    RUN(test_inplace);
    RUN(test_traced_step);
    return wt_summary();
}
