// Co-scheduled matmul pairs (src/graph/coschedule.c): which pairs form, that
// the reordered schedule stays valid (random DAGs), that the two nodes of a
// pair are independent, that the memory plan never gives one node of a pair
// the bytes of the other's dying input, that a variable read never moves
// above an assign to it, and that runs with pairs compute the same bits as
// runs without them and as a naive triple loop.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/graph/graph_impl.h"
#include "../../src/graph/plan.h"
#include "../../src/graph/schedule.h"
#include "graph_test.h"
#include "weft_test.h"

#define N 128 // (N,N) f64 products: 4.2 MFLOP each, above the pairing threshold

static void force(int on) { setenv("WEFT_GRAPH_COSCHEDULE", on ? "1" : "0", 1); }

static weft_value mm(weft_graph *g, weft_value a, weft_value b) { return op2(g, "matmul", a, b); }

static weft_value var(weft_graph *g, const char *name, uint64_t seed) {
    weft_tensor *t = wt_rand64(WEFT_DIMS(N, N), -1, 1, seed, false);
    weft_value v = weft_graph_variable(g, name, t);
    weft_tensor_free(t);
    return v;
}

// c = a @ b, naive (row-major f64).
static void ref_mm(const double *a, const double *b, double *c) {
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < N; k++) s += a[i * N + k] * b[k * N + j];
            c[i * N + j] = s;
        }
}

// Two products of one input, then their sum: one pair; values as a naive
// loop computes them, and the same bits with and without the pair.
static void test_pair_values(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(N, N), WEFT_F64);
    weft_value w1 = var(g, "w1", 2), w2 = var(g, "w2", 3);
    weft_value a = mm(g, x, w1), b = mm(g, op1(g, "tanh", x), w2), out = op2(g, "add", op1(g, "exp", scal(g, "mul_scalar", a, 0.01)), b);
    weft_tensor *xt = wt_rand64(WEFT_DIMS(N, N), -1, 1, 1, false), *o1 = NULL, *o0 = NULL;
    weft_set_num_threads(2);
    force(1);
    CHECK(weft_graph_run(g, 1, &x, &xt, 1, &out, &o1, 0, NULL) == WEFT_OK);
    CHECK(weft_graph_last_run_stats(g).co_pairs == 1);
    force(0);
    CHECK(weft_graph_run(g, 1, &x, &xt, 1, &out, &o0, 0, NULL) == WEFT_OK);
    CHECK(weft_graph_last_run_stats(g).co_pairs == 0);
    CHECK(same_bits(o1, o0));
    // reference
    double *xv = malloc(sizeof(double) * N * N), *tv = malloc(sizeof(double) * N * N), *w1v = malloc(sizeof(double) * N * N),
           *w2v = malloc(sizeof(double) * N * N), *av = malloc(sizeof(double) * N * N), *bv = malloc(sizeof(double) * N * N);
    weft_tensor_to_f64(xt, xv, N * N);
    weft_tensor_to_f64(weft_graph_variable_tensor(g, w1), w1v, N * N);
    weft_tensor_to_f64(weft_graph_variable_tensor(g, w2), w2v, N * N);
    for (int i = 0; i < N * N; i++) tv[i] = tanh(xv[i]);
    ref_mm(xv, w1v, av);
    ref_mm(tv, w2v, bv);
    for (int i = 0; i < N * N; i++) av[i] = exp(av[i] * 0.01) + bv[i];
    wt_check_values("pair: exp(0.01 x w1) + tanh(x) w2", o1, av, N * N, 1e-12);
    free(xv), free(tv), free(w1v), free(w2v), free(av), free(bv);
    weft_tensor_free(xt), weft_tensor_free(o1), weft_tensor_free(o0);
    unsetenv("WEFT_GRAPH_COSCHEDULE");
    weft_graph_free(g);
}

// Positions of node ids in order.
static int pos_of(const int32_t *order, int n, int32_t id) {
    for (int s = 0; s < n; s++)
        if (order[s] == id) return s;
    return -1;
}

// B reads variable v; an assign to v sits between A and B in the order: B
// must stay below it. An assign to another variable does not hold B back.
static void test_assign_barrier(void) {
    for (int same = 0; same < 2; same++) {
        weft_graph *g = weft_graph_new();
        weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(N, N), WEFT_F64);
        weft_value w1 = var(g, "w1", 2), v = var(g, "v", 3), u = var(g, "u", 4);
        weft_value a = mm(g, x, w1);
        weft_value asg = weft_graph_assign(g, "asg", same ? v : u, w1);
        weft_value b = mm(g, x, v);
        int n = weft_graph_node_count(g);
        int32_t *order = malloc(sizeof(int32_t) * (size_t)n);
        uint8_t *co = malloc((size_t)n);
        for (int i = 0; i < n; i++) order[i] = i; // ids: a valid order (x, w1, v, u, a, asg, b)
        int pairs = weft_schedule_pairs(g, order, n, co);
        int32_t na = weft_graph_value_node(g, a).id, nb = weft_graph_value_node(g, b).id, nasg = weft_graph_value_node(g, asg).id;
        if (same) {
            CHECK(pairs == 0);
            CHECK(pos_of(order, n, nasg) < pos_of(order, n, nb));
        } else {
            CHECK(pairs == 1);
            CHECK(pos_of(order, n, nb) == pos_of(order, n, na) + 1 && co[pos_of(order, n, nb)] == 1);
        }
        free(order);
        free(co);
        weft_graph_free(g);
    }
}

// p = exp(x) dies at A = p @ w1; B = x @ w2 runs in the same step, so its
// output must not take p's bytes (a serial plan would reuse them).
static void test_plan_pair_step(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(N, N), WEFT_F64);
    weft_value w1 = var(g, "w1", 2), w2 = var(g, "w2", 3);
    weft_value p = op1(g, "exp", x), a = mm(g, p, w1), b = mm(g, x, w2), out = op2(g, "add", a, b);
    int n = weft_graph_node_count(g);
    int32_t *order = malloc(sizeof(int32_t) * (size_t)n);
    uint8_t *co = malloc((size_t)n), *fetched = calloc((size_t)g->n_values, 1);
    for (int i = 0; i < n; i++) order[i] = i;
    fetched[out.id] = 1;
    CHECK(weft_schedule_pairs(g, order, n, co) == 1);
    weft_plan paired, serial;
    CHECK(weft_plan_build(g, order, n, fetched, co, NULL, &paired) == WEFT_OK);
    CHECK(weft_plan_build(g, order, n, fetched, NULL, NULL, &serial) == WEFT_OK);
    int64_t bytes = (int64_t)N * N * 8;
    CHECK(serial.offset[b.id] == serial.offset[p.id]); // what the pair must prevent
    bool disjoint = paired.offset[b.id] + bytes <= paired.offset[p.id] || paired.offset[p.id] + bytes <= paired.offset[b.id];
    CHECK(disjoint);
    CHECK(paired.offset[a.id] != paired.offset[b.id]);
    weft_plan_free(&paired);
    weft_plan_free(&serial);
    // and the run computes what the serial run does
    weft_tensor *xt = wt_rand64(WEFT_DIMS(N, N), -1, 1, 5, false), *o1 = NULL, *o0 = NULL;
    force(1);
    CHECK(weft_graph_run(g, 1, &x, &xt, 1, &out, &o1, 0, NULL) == WEFT_OK);
    CHECK(weft_graph_last_run_stats(g).co_pairs == 1);
    force(0);
    CHECK(weft_graph_run(g, 1, &x, &xt, 1, &out, &o0, 0, NULL) == WEFT_OK);
    CHECK(same_bits(o1, o0));
    unsetenv("WEFT_GRAPH_COSCHEDULE");
    weft_tensor_free(xt), weft_tensor_free(o1), weft_tensor_free(o0);
    free(order), free(co), free(fetched);
    weft_graph_free(g);
}

static uint64_t rng(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

// Does node `to` depend on node `from` (data or control, transitively)?
static bool reaches(const weft_graph *g, int32_t from, int32_t to, uint8_t *seen) {
    if (from == to) return true;
    if (to < from) return false; // edges point to earlier nodes
    memset(seen, 0, (size_t)g->n_nodes);
    int32_t stack[512];
    int sp = 0;
    stack[sp++] = to;
    while (sp) {
        const weft_gnode *n = &g->nodes[stack[--sp]];
        for (int k = 0; k < n->n_in + n->n_ctrl; k++) {
            int32_t p = k < n->n_in ? g->values[n->in[k]].node : n->ctrl[k - n->n_in];
            if (p == from) return true;
            if (!seen[p] && p > from && sp < 512) seen[p] = 1, stack[sp++] = p;
        }
    }
    return false;
}

// Random DAGs of products and elementwise ops with control deps: the paired
// order is a valid order, the two nodes of each pair are independent
// matmuls, and runs give the same bits with and without pairs.
static void test_random_dags(void) {
    uint64_t seed = 777;
    int total_pairs = 0;
    weft_set_num_threads(2);
    for (int trial = 0; trial < 12; trial++) {
        weft_graph *g = weft_graph_new();
        weft_value vals[40];
        int nv = 0;
        vals[nv++] = weft_graph_placeholder(g, "x", WEFT_DIMS(N, N), WEFT_F64);
        vals[nv++] = var(g, "w", 10 + (uint64_t)trial);
        int n_ops = 8 + (int)(rng(&seed) % 24);
        for (int k = 0; k < n_ops && nv < 40; k++) {
            weft_value a = vals[rng(&seed) % (uint64_t)nv], b = vals[rng(&seed) % (uint64_t)nv], v;
            switch (rng(&seed) % 4) {
            case 0:
            case 1: v = scal(g, "mul_scalar", mm(g, a, b), 1.0 / N); break; // keeps values O(1)
            case 2: v = op1(g, "tanh", a); break;
            default: v = op2(g, "add", a, b); break;
            }
            CHECK(v.id >= 0);
            vals[nv++] = v;
            if (rng(&seed) % 5 == 0 && nv > 3) {
                weft_node_id me = weft_graph_value_node(g, v), dep = weft_graph_value_node(g, vals[2 + rng(&seed) % (uint64_t)(nv - 3)]);
                if (dep.id < me.id) CHECK(weft_graph_add_control_dep(g, me, dep) == WEFT_OK);
            }
        }
        weft_value sum = vals[nv - 1];
        for (int k = nv - 2; k >= 2 && k > nv - 6; k--) sum = op2(g, "add", sum, vals[k]); // several sinks
        int n = weft_graph_node_count(g);
        int32_t *order = malloc(sizeof(int32_t) * (size_t)n), *pos = malloc(sizeof(int32_t) * (size_t)n);
        uint8_t *co = malloc((size_t)n), *seen = malloc((size_t)n);
        for (int i = 0; i < n; i++) order[i] = i;
        int pairs = weft_schedule_pairs(g, order, n, co);
        CHECK(pairs >= 0);
        total_pairs += pairs;
        for (int i = 0; i < n; i++) pos[i] = -1;
        bool perm = true, valid = true, indep = true;
        for (int s = 0; s < n; s++) {
            if (order[s] < 0 || order[s] >= n || pos[order[s]] >= 0) perm = false;
            else pos[order[s]] = s;
        }
        for (int i = 0; i < n && perm; i++) {
            const weft_gnode *nd = &g->nodes[i];
            for (int k = 0; k < nd->n_in; k++) valid &= pos[g->values[nd->in[k]].node] < pos[i];
            for (int k = 0; k < nd->n_ctrl; k++) valid &= pos[nd->ctrl[k]] < pos[i];
        }
        int counted = 0;
        for (int s = 1; s < n && perm; s++) {
            if (!co[s]) continue;
            counted++;
            int32_t p = order[s - 1], q = order[s];
            indep &= !reaches(g, p, q, seen) && !reaches(g, q, p, seen) && !co[s - 1];
            indep &= g->nodes[p].op && !strcmp(g->nodes[p].op->name, "matmul") && g->nodes[q].op &&
                     !strcmp(g->nodes[q].op->name, "matmul");
        }
        CHECK(perm && valid && indep && counted == pairs);
        // Runs (which pair on their own, after the memory schedule) give the same bits.
        weft_tensor *xt = wt_rand64(WEFT_DIMS(N, N), -1, 1, 100 + (uint64_t)trial, false), *o1 = NULL, *o0 = NULL;
        force(1);
        CHECK(weft_graph_run(g, 1, &vals[0], &xt, 1, &sum, &o1, 0, NULL) == WEFT_OK);
        force(0);
        CHECK(weft_graph_run(g, 1, &vals[0], &xt, 1, &sum, &o0, 0, NULL) == WEFT_OK);
        CHECK(same_bits(o1, o0));
        unsetenv("WEFT_GRAPH_COSCHEDULE");
        weft_tensor_free(xt), weft_tensor_free(o1), weft_tensor_free(o0);
        free(order), free(pos), free(co), free(seen);
        weft_graph_free(g);
    }
    CHECK(total_pairs >= 6); // the random graphs do offer pairs
}

// Default switch: on at exactly two threads, off at one (and at more);
// WEFT_GRAPH_COSCHEDULE=1 forces it on for two or more, =0 off.
static void test_switch(void) {
    unsetenv("WEFT_GRAPH_COSCHEDULE");
    CHECK(weft_coschedule_enabled(2) && !weft_coschedule_enabled(1) && !weft_coschedule_enabled(8));
    force(1);
    CHECK(weft_coschedule_enabled(8) && !weft_coschedule_enabled(1));
    force(0);
    CHECK(!weft_coschedule_enabled(2));
    unsetenv("WEFT_GRAPH_COSCHEDULE");
}

int main(void) {
    RUN(test_pair_values);
    RUN(test_assign_barrier);
    RUN(test_plan_pair_step);
    RUN(test_random_dags);
    RUN(test_switch);
    return wt_summary();
}
