// Graph optimisation passes: each pass on a small builder graph (node counts
// before/after, same values as the original graph on the same feeds), a traced
// MLP forward+backward (same loss and gradients), shared variables, passes
// off, and errors.
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"



// Nodes of g whose op (weft_graph_node_op: op name or kind name) is `op`.
static int count_op(const weft_graph *g, const char *op) {
    int c = 0;
    for (int i = 0; i < weft_graph_node_count(g); i++) c += !strcmp(weft_graph_node_op(g, (weft_node_id){i}), op);
    return c;
}

static weft_graph_passes only(const char *which) {
    weft_graph_passes p = {0};
    p.constant_folding = !strcmp(which, "fold");
    p.cse = !strcmp(which, "cse");
    p.dce = !strcmp(which, "dce");
    p.algebraic = !strcmp(which, "alg");
    return p;
}

// Run old and new graph on the same feed, fetching keep / keep_out; compare.
static void same_values(const char *what, weft_graph *g, weft_graph *o, int n_feed, const weft_value *feed,
                        weft_tensor *const *ft, int n, const weft_value *keep, const weft_value *keep_out, double tol) {
    weft_value nf[8];
    for (int i = 0; i < n_feed; i++) nf[i] = weft_graph_find_value(o, weft_graph_node_name(g, weft_graph_value_node(g, feed[i])));
    weft_tensor *a[8] = {0}, *b[8] = {0};
    CHECK(weft_graph_run(g, n_feed, feed, ft, n, keep, a, 0, NULL) == WEFT_OK);
    CHECK(weft_graph_run(o, n_feed, nf, ft, n, keep_out, b, 0, NULL) == WEFT_OK);
    for (int i = 0; i < n; i++) {
        wt_check_same(what, b[i], a[i], tol);
        weft_tensor_free(a[i]);
        weft_tensor_free(b[i]);
    }
}

// ---- constant folding ----
static void test_constant_folding(void) {
    weft_graph *g = weft_graph_new();
    weft_tensor *c1 = wt_rand64(WEFT_DIMS(3, 4), -1, 1, 1, false), *c2 = wt_rand64(WEFT_DIMS(4), -1, 1, 2, false);
    weft_tensor *w0 = wt_rand64(WEFT_DIMS(3, 4), -1, 1, 3, false);
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(3, 4), WEFT_F64);
    weft_value a = weft_graph_constant(g, "a", c1), b = weft_graph_constant(g, "b", c2);
    weft_value w = weft_graph_variable(g, "w", w0);
    weft_value e = weft_graph_op1(g, "exp", 1, &a, NULL, 0, NULL, 0);                 // fold
    weft_value s = weft_graph_op1(g, "add", 2, (weft_value[]){e, b}, NULL, 0, NULL, 0); // fold (after exp)
    weft_value t = weft_graph_op1(g, "tanh", 1, &s, NULL, 0, NULL, 0);                // fold
    weft_value y = weft_graph_op1(g, "mul", 2, (weft_value[]){x, t}, NULL, 0, NULL, 0); // placeholder: stays
    weft_value vw = weft_graph_op1(g, "sin", 1, &w, NULL, 0, NULL, 0);                // variable read: stays
    weft_value z = weft_graph_op1(g, "add", 2, (weft_value[]){y, vw}, NULL, 0, NULL, 0);
    CHECK(z.id >= 0);
    CHECK(weft_graph_node_count(g) == 10);
    weft_value keep[2] = {z, t}, kout[2];
    weft_graph_passes p = only("fold");
    weft_graph_pass_stats st;
    weft_graph *o = weft_graph_optimize(g, 2, keep, kout, &p, &st);
    CHECK(o != NULL);
    CHECK(st.folded == 3);
    CHECK(st.nodes_before == 10 && st.nodes_after == 10); // 3 ops became 3 constants; no DCE
    CHECK(count_op(o, "exp") == 0 && count_op(o, "tanh") == 0 && count_op(o, "add") == 1);
    CHECK(count_op(o, "sin") == 1 && count_op(o, "mul") == 1);
    CHECK(count_op(o, "constant") == 5);
    // the folded node keeps its name and is a constant now
    const char *tname = weft_graph_node_name(g, weft_graph_value_node(g, t));
    CHECK(weft_graph_node_kind(o, weft_graph_find_node(o, tname)) == WEFT_NODE_CONSTANT);
    CHECK(weft_graph_value_node(o, kout[1]).id == weft_graph_find_node(o, tname).id);
    weft_tensor *xt = wt_rand64(WEFT_DIMS(3, 4), -2, 2, 4, false);
    same_values("folded", g, o, 1, &x, &xt, 2, keep, kout, 1e-15);
    // folded + DCE: the dead constants a, exp... go
    weft_graph_passes p2 = p;
    p2.dce = true;
    weft_graph *o2 = weft_graph_optimize(g, 2, keep, kout, &p2, &st);
    CHECK(o2 && st.dce_removed == 4); // a, b, exp (const), add (const) are dead; t kept
    CHECK(st.nodes_after == 6);        // x, w, t, mul, sin, add
    same_values("folded+dce", g, o2, 1, &x, &xt, 2, keep, kout, 1e-15);
    weft_graph_free(o2);
    weft_graph_free(o);
    weft_tensor *ts[] = {c1, c2, w0, xt};
    for (size_t i = 0; i < 4; i++) weft_tensor_free(ts[i]);
    weft_graph_free(g);
}

// ---- CSE ----
static void test_cse(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(5), WEFT_F64);
    weft_tensor *k1 = weft_tensor_full(WEFT_DIMS(5), WEFT_F64, 2.5), *k2 = weft_tensor_full(WEFT_DIMS(5), WEFT_F64, 2.5);
    weft_value c1 = weft_graph_constant(g, "c1", k1), c2 = weft_graph_constant(g, "c2", k2); // same contents
    weft_value e1 = weft_graph_op1(g, "exp", 1, &x, NULL, 0, NULL, 0);
    weft_value e2 = weft_graph_op1(g, "exp", 1, &x, NULL, 0, NULL, 0);  // = e1
    weft_value m1 = weft_graph_op1(g, "mul", 2, (weft_value[]){e1, c1}, NULL, 0, NULL, 0);
    weft_value m2 = weft_graph_op1(g, "mul", 2, (weft_value[]){e2, c2}, NULL, 0, NULL, 0); // = m1 once e2, c2 merge
    weft_value s1 = weft_graph_op1(g, "mul_scalar", 1, &m1, NULL, 0, (double[]){3}, 1);
    weft_value s2 = weft_graph_op1(g, "mul_scalar", 1, &m2, NULL, 0, (double[]){4}, 1); // other attrs: stays
    weft_value r = weft_graph_op1(g, "add", 2, (weft_value[]){s1, s2}, NULL, 0, NULL, 0);
    weft_value q = weft_graph_op1(g, "add", 2, (weft_value[]){m1, m2}, NULL, 0, NULL, 0);
    CHECK(q.id >= 0 && weft_graph_node_count(g) == 11);
    weft_value keep[2] = {r, q}, kout[2];
    weft_graph_passes p = only("cse");
    weft_graph_pass_stats st;
    weft_graph *o = weft_graph_optimize(g, 2, keep, kout, &p, &st);
    CHECK(o && st.cse_merged == 3); // exp, c2, mul
    CHECK(st.nodes_after == 8);
    CHECK(count_op(o, "exp") == 1 && count_op(o, "mul") == 1 && count_op(o, "mul_scalar") == 2);
    CHECK(count_op(o, "constant") == 1);
    weft_tensor *xt = wt_rand64(WEFT_DIMS(5), -1, 1, 5, false);
    same_values("cse", g, o, 1, &x, &xt, 2, keep, kout, 0);
    weft_graph_free(o);
    weft_tensor_free(k1);
    weft_tensor_free(k2);
    weft_tensor_free(xt);
    weft_graph_free(g);
}

// ---- DCE ----
static void test_dce(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(4), WEFT_F64);
    weft_value unused = weft_graph_placeholder(g, "unused", WEFT_DIMS(2), WEFT_F64);
    weft_tensor *z = weft_tensor_zeros(WEFT_DIMS(4), WEFT_F64);
    weft_value v = weft_graph_variable(g, "acc", z);
    weft_value a = weft_graph_op1(g, "exp", 1, &x, NULL, 0, NULL, 0);
    weft_value dead1 = weft_graph_op1(g, "sin", 1, &x, NULL, 0, NULL, 0);
    weft_value dead2 = weft_graph_op1(g, "cos", 1, &dead1, NULL, 0, NULL, 0);
    weft_value dead3 = weft_graph_op1(g, "neg", 1, &unused, NULL, 0, NULL, 0);
    weft_value ctl = weft_graph_op1(g, "abs", 1, &x, NULL, 0, NULL, 0);  // only a control dep of the assign
    weft_value inc = weft_graph_op1(g, "mul_scalar", 1, &x, NULL, 0, (double[]){2}, 1);
    weft_value asg = weft_graph_assign_add(g, "acc_add", v, inc); // side effect: always kept
    CHECK(weft_graph_add_control_dep(g, weft_graph_value_node(g, asg), weft_graph_value_node(g, ctl)) == WEFT_OK);
    CHECK(dead2.id >= 0 && dead3.id >= 0 && weft_graph_node_count(g) == 10);
    weft_value kout;
    weft_graph_passes p = only("dce");
    weft_graph_pass_stats st;
    weft_graph *o = weft_graph_optimize(g, 1, &a, &kout, &p, &st);
    CHECK(o && st.dce_removed == 3 && st.nodes_after == 7);
    CHECK(count_op(o, "sin") == 0 && count_op(o, "cos") == 0 && count_op(o, "neg") == 0);
    CHECK(count_op(o, "abs") == 1 && count_op(o, "placeholder") == 2 && count_op(o, "assign_add") == 1);
    weft_node_id na = weft_graph_find_node(o, "acc_add");
    CHECK(na.id >= 0);
    weft_tensor *xt = wt_rand64(WEFT_DIMS(4), -1, 1, 6, false);
    same_values("dce", g, o, 1, &x, &xt, 1, &a, &kout, 0);
    // the assign in the new graph writes the shared variable; its control dep survived (abs runs first)
    weft_value nx = weft_graph_find_value(o, "x");
    CHECK(weft_graph_run(o, 1, &nx, &xt, 0, NULL, NULL, 1, &na) == WEFT_OK);
    CHECK(weft_graph_last_run_stats(o).nodes_executed == 4); // x, abs (control dep), mul_scalar, acc_add
    weft_tensor *ref = weft_mul_scalar(xt, 2);
    wt_check_same("assign through the optimised graph", weft_graph_variable_tensor(g, v), ref, 0);
    weft_graph_free(o);
    weft_tensor_free(ref);
    weft_tensor_free(xt);
    weft_tensor_free(z);
    weft_graph_free(g);
}

// ---- algebraic simplification ----
static void test_algebraic(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(2, 6), WEFT_F32);
    weft_tensor *one = weft_tensor_full(WEFT_DIMS(6), WEFT_F32, 1), *zero = weft_tensor_zeros(WEFT_DIMS(1), WEFT_F32);
    weft_tensor *big1 = weft_tensor_full(WEFT_DIMS(3, 2, 6), WEFT_F32, 1);
    weft_value c1 = weft_graph_constant(g, "one", one), c0 = weft_graph_constant(g, "zero", zero);
    weft_value cb = weft_graph_constant(g, "big_one", big1);
    weft_value a = weft_graph_op1(g, "mul", 2, (weft_value[]){x, c1}, NULL, 0, NULL, 0);        // -> x
    weft_value b = weft_graph_op1(g, "add", 2, (weft_value[]){c0, a}, NULL, 0, NULL, 0);        // -> x
    weft_value c = weft_graph_op1(g, "mul_scalar", 1, &b, NULL, 0, (double[]){1}, 1);           // -> x
    weft_value d = weft_graph_op1(g, "add_scalar", 1, &c, NULL, 0, (double[]){0}, 1);           // -> x
    weft_value e = weft_graph_op1(g, "exp", 1, &d, NULL, 0, NULL, 0);                           // exp(x)
    weft_value f = weft_graph_op1(g, "mul", 2, (weft_value[]){e, cb}, NULL, 0, NULL, 0);        // broadcasts: stays
    // Cast(Cast(x)): f32 -> f64 -> f32 is x; f32 -> f64 -> i32 is one cast; f32 -> i32 -> f32 stays
    weft_value g1 = weft_graph_op1(g, "cast", 1, &e, (int64_t[]){WEFT_F64}, 1, NULL, 0);
    weft_value g2 = weft_graph_op1(g, "cast", 1, &g1, (int64_t[]){WEFT_F32}, 1, NULL, 0);       // -> e
    weft_value h1 = weft_graph_op1(g, "cast", 1, &g1, (int64_t[]){WEFT_I32}, 1, NULL, 0);       // -> cast(e, i32)
    weft_value i1 = weft_graph_op1(g, "cast", 1, &e, (int64_t[]){WEFT_I32}, 1, NULL, 0);
    weft_value i2 = weft_graph_op1(g, "cast", 1, &i1, (int64_t[]){WEFT_F32}, 1, NULL, 0);       // lossy: stays
    // Reshape(Reshape(x))
    weft_value r1 = weft_graph_op1(g, "view", 1, &e, (int64_t[]){2, 3, 4}, 3, NULL, 0);
    weft_value r2 = weft_graph_op1(g, "view", 1, &r1, (int64_t[]){1, 12}, 2, NULL, 0);          // -> view(e, 12)
    weft_value r3 = weft_graph_op1(g, "view", 1, &r1, (int64_t[]){2, 2, 6}, 3, NULL, 0);        // -> e
    CHECK(r3.id >= 0 && i2.id >= 0 && h1.id >= 0 && f.id >= 0 && g2.id >= 0);
    weft_value keep[6] = {f, g2, h1, i2, r2, r3}, kout[6];
    weft_graph_passes p = only("alg");
    p.dce = true;
    weft_graph_pass_stats st;
    weft_graph *o = weft_graph_optimize(g, 6, keep, kout, &p, &st);
    CHECK(o != NULL);
    CHECK(st.simplified == 8); // mul, add, mul_scalar, add_scalar, cast-cast x2, view-view x2
    CHECK(count_op(o, "mul") == 1 && count_op(o, "add") == 0 && count_op(o, "mul_scalar") == 0);
    CHECK(count_op(o, "add_scalar") == 0);
    CHECK(count_op(o, "cast") == 3); // cast(e,i32) [h1], i1, i2 (g1 dead)
    CHECK(count_op(o, "view") == 1);
    CHECK(count_op(o, "constant") == 1); // big_one
    CHECK(weft_graph_value_node(o, kout[1]).id == weft_graph_value_node(o, kout[5]).id); // both are e now
    CHECK(!strcmp(weft_graph_node_op(o, weft_graph_value_node(o, kout[1])), "exp"));
    weft_tensor *xt = wt_rand64(WEFT_DIMS(2, 6), -3, 3, 7, false), *xf = weft_cast(xt, WEFT_F32);
    same_values("algebraic", g, o, 1, &x, &xf, 6, keep, kout, 0);
    weft_graph_free(o);
    weft_tensor *ts[] = {one, zero, big1, xt, xf};
    for (size_t i = 0; i < 5; i++) weft_tensor_free(ts[i]);
    weft_graph_free(g);
}

// x*0 and constant reassociation: integers always, floats only with fast_math.
static void test_algebraic_zero_and_chain(void) {
    for (int dti = 0; dti < 2; dti++) {
        weft_dtype dt = dti ? WEFT_F64 : WEFT_I64;
        weft_graph *g = weft_graph_new();
        weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(3, 4), dt);
        weft_tensor *k0 = weft_tensor_zeros(WEFT_DIMS(4), dt), *k2 = weft_tensor_full(WEFT_DIMS(4), dt, 2);
        weft_tensor *k5 = weft_tensor_full(WEFT_DIMS(3, 1), dt, 5);
        weft_value c0 = weft_graph_constant(g, "c0", k0), c2 = weft_graph_constant(g, "c2", k2);
        weft_value c5 = weft_graph_constant(g, "c5", k5);
        weft_value z = weft_graph_op1(g, "mul", 2, (weft_value[]){c0, x}, NULL, 0, NULL, 0);
        weft_value in = weft_graph_op1(g, "add", 2, (weft_value[]){x, c2}, NULL, 0, NULL, 0);
        weft_value ch = weft_graph_op1(g, "add", 2, (weft_value[]){c5, in}, NULL, 0, NULL, 0); // -> add(x, c5+c2)
        weft_value s1 = weft_graph_op1(g, "add_scalar", 1, &x, NULL, 0, (double[]){3}, 1);
        weft_value s2 = weft_graph_op1(g, "add_scalar", 1, &s1, NULL, 0, (double[]){4}, 1);   // -> add_scalar(x, 7)
        weft_value keep[3] = {z, ch, s2}, kout[3];
        for (int fast = 0; fast < 2; fast++) {
            weft_graph_passes p = weft_graph_passes_all();
            p.fast_math = fast;
            p.fusion = false; // counts ops of the algebraic rewrites (fusion would merge the chains)
            weft_graph_pass_stats st;
            weft_graph *o = weft_graph_optimize(g, 3, keep, kout, &p, &st);
            CHECK(o != NULL);
            bool on = dt == WEFT_I64 || fast;
            CHECK(st.simplified == (on ? 3 : 0));
            CHECK(count_op(o, "mul") == (on ? 0 : 1));
            CHECK(count_op(o, "add") == (on ? 1 : 2));
            CHECK(count_op(o, "add_scalar") == (on ? 1 : 2));
            if (on) {
                CHECK(weft_graph_node_kind(o, weft_graph_value_node(o, kout[0])) == WEFT_NODE_CONSTANT);
            }
            weft_tensor *xt = wt_rand64(WEFT_DIMS(3, 4), -50, 50, 8, false), *xc = weft_cast(xt, dt);
            same_values("zero/chain", g, o, 1, &x, &xc, 3, keep, kout, dt == WEFT_I64 ? 0 : 1e-14);
            weft_tensor_free(xt);
            weft_tensor_free(xc);
            weft_graph_free(o);
        }
        weft_tensor_free(k0);
        weft_tensor_free(k2);
        weft_tensor_free(k5);
        weft_graph_free(g);
    }
}

// Rules that would forward to a variable read are skipped: the variable is live.
static void test_algebraic_state(void) {
    weft_graph *g = weft_graph_new();
    weft_tensor *w0 = wt_rand64(WEFT_DIMS(3), -1, 1, 9, false);
    weft_value w = weft_graph_variable(g, "w", w0);
    weft_value m = weft_graph_op1(g, "mul_scalar", 1, &w, NULL, 0, (double[]){1}, 1);
    weft_value kout;
    weft_graph_pass_stats st;
    weft_graph *o = weft_graph_optimize(g, 1, &m, &kout, NULL, &st);
    CHECK(o && st.simplified == 0 && count_op(o, "mul_scalar") == 1);
    weft_graph_free(o);
    weft_tensor_free(w0);
    weft_graph_free(g);
}

// ---- traced MLP forward + backward ----
typedef struct mlp {
    weft_tensor *w1, *b1, *w2, *b2;
} mlp;

static weft_tensor *mlp_loss(mlp *m, weft_tensor *x, weft_tensor *y) {
    weft_tensor *a = weft_matmul(x, m->w1), *b = weft_add(a, m->b1), *h = weft_relu(b);
    weft_tensor *c = weft_matmul(h, m->w2), *l = weft_add(c, m->b2);
    weft_tensor *loss = weft_cross_entropy(l, y);
    weft_tensor *ts[] = {a, b, h, c, l};
    for (int i = 0; i < 5; i++) weft_tensor_free(ts[i]);
    return loss;
}

static weft_tensor *labels(int n, uint64_t seed) {
    int64_t v[64];
    for (int i = 0; i < n; i++) v[i] = (int64_t)((seed * 7 + (uint64_t)i * 3) % 10);
    return weft_tensor_from_data(v, WEFT_DIMS(n), WEFT_I64);
}

static void test_traced_mlp(void) {
    // fmnist-mlp-like: 784 -> 64 -> 10 (small batch), relu, cross-entropy
    mlp m = {wt_rand64(WEFT_DIMS(784, 64), -0.05, 0.05, 11, true), wt_rand64(WEFT_DIMS(64), -0.1, 0.1, 12, true),
             wt_rand64(WEFT_DIMS(64, 10), -0.2, 0.2, 13, true), wt_rand64(WEFT_DIMS(10), -0.1, 0.1, 14, true)};
    weft_tensor *params[4] = {m.w1, m.b1, m.w2, m.b2};
    weft_graph *g = weft_graph_new();
    weft_tensor *x = wt_rand64(WEFT_DIMS(8, 784), 0, 1, 15, false), *y = labels(8, 1);
    weft_graph_trace_begin(g);
    weft_value vx = weft_graph_trace_input(g, x, "x"), vy = weft_graph_trace_input(g, y, "y");
    weft_tensor *loss = mlp_loss(&m, x, y);
    CHECK(weft_backward(loss, NULL, NULL) == WEFT_OK);
    weft_value fetch[5], fout[5];
    fetch[0] = weft_graph_trace_output(g, loss);
    for (int i = 0; i < 4; i++) fetch[1 + i] = weft_graph_trace_output(g, weft_tensor_grad(params[i]));
    CHECK(weft_graph_trace_end(g) == WEFT_OK);

    weft_graph_pass_stats st;
    weft_graph *o = weft_graph_optimize(g, 5, fetch, fout, NULL, &st);
    CHECK(o != NULL);
    if (!o) return;
    if (getenv("DUMP")) weft_graph_write_dot(o, stdout);
    CHECK(st.nodes_after < st.nodes_before);
    CHECK(count_op(g, "copy") == 4 && count_op(o, "copy") == 0); // leaf-gradient clones of contiguous values
    CHECK(count_op(o, "view") < count_op(g, "view"));             // identity views from reshape(-1, K)
    CHECK(st.nodes_before == weft_graph_node_count(g) && st.nodes_after == weft_graph_node_count(o));
    printf("traced MLP forward+backward: %d nodes -> %d (folded %d, cse %d, dce %d, simplified %d, %d rounds)\n",
           st.nodes_before, st.nodes_after, st.folded, st.cse_merged, st.dce_removed, st.simplified, st.rounds);

    weft_tensor *x2 = wt_rand64(WEFT_DIMS(8, 784), 0, 1, 16, false), *y2 = labels(8, 2);
    weft_value nx = weft_graph_find_value(o, "x"), ny = weft_graph_find_value(o, "y");
    weft_tensor *a[5] = {0}, *b[5] = {0};
    CHECK(weft_graph_run(g, 2, (weft_value[]){vx, vy}, (weft_tensor *[]){x2, y2}, 5, fetch, a, 0, NULL) == WEFT_OK);
    CHECK(weft_graph_run(o, 2, (weft_value[]){nx, ny}, (weft_tensor *[]){x2, y2}, 5, fout, b, 0, NULL) == WEFT_OK);
    // and against eager on the new inputs
    for (int i = 0; i < 4; i++) weft_tensor_zero_grad(params[i]);
    weft_tensor *loss2 = mlp_loss(&m, x2, y2);
    CHECK(weft_backward(loss2, NULL, NULL) == WEFT_OK);
    wt_check_same("mlp loss", b[0], a[0], 1e-6);
    wt_check_same("mlp loss vs eager", b[0], loss2, 1e-6);
    for (int i = 0; i < 4; i++) {
        wt_check_same("mlp grad", b[1 + i], a[1 + i], 1e-6);
        wt_check_same("mlp grad vs eager", b[1 + i], weft_tensor_grad(params[i]), 1e-6);
    }

    // variables are shared: an SGD step as assigns in the optimised graph is seen by the old graph
    // find the variable of b2 in both graphs: the one whose tensor is m.b2's storage
    weft_value vb_old = WEFT_VALUE_NONE, vb_new = WEFT_VALUE_NONE;
    for (int i = 0; i < weft_graph_node_count(g); i++)
        if (weft_graph_node_kind(g, (weft_node_id){i}) == WEFT_NODE_VARIABLE &&
            weft_tensor_data(weft_graph_variable_tensor(g, weft_graph_node_output(g, (weft_node_id){i}, 0))) ==
                weft_tensor_data(m.b2))
            vb_old = weft_graph_node_output(g, (weft_node_id){i}, 0);
    CHECK(vb_old.id >= 0);
    vb_new = weft_graph_find_value(o, weft_graph_node_name(g, weft_graph_value_node(g, vb_old)));
    CHECK(vb_new.id >= 0);
    CHECK(weft_graph_variable_tensor(o, vb_new) == weft_graph_variable_tensor(g, vb_old));
    weft_value step = weft_graph_op1(o, "mul_scalar", 1, &fout[4], NULL, 0, (double[]){-0.5}, 1);
    weft_value upd = weft_graph_assign_add(o, "sgd_b2", vb_new, step);
    weft_node_id un = weft_graph_value_node(o, upd);
    weft_tensor *before = weft_tensor_clone(m.b2), *gb2 = NULL;
    CHECK(weft_graph_run(o, 2, (weft_value[]){nx, ny}, (weft_tensor *[]){x2, y2}, 1, &fout[4], &gb2, 1, &un) == WEFT_OK);
    weft_tensor *sc = weft_mul_scalar(gb2, -0.5), *expect = weft_add(before, sc), *now = NULL;
    CHECK(weft_graph_run(g, 0, NULL, NULL, 1, &vb_old, &now, 0, NULL) == WEFT_OK);
    wt_check_same("assign seen by the old graph", now, expect, 1e-12);
    wt_check_same("assign seen by the eager parameter", m.b2, expect, 1e-12);

    for (int i = 0; i < 5; i++) {
        weft_tensor_free(a[i]);
        weft_tensor_free(b[i]);
    }
    weft_tensor *ts[] = {x, y, loss, x2, y2, loss2, before, gb2, sc, expect, now};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) weft_tensor_free(ts[i]);
    for (int i = 0; i < 4; i++) weft_tensor_free(params[i]);
    weft_graph_free(o);
    weft_graph_free(g);
}

// Passes off: a copy with the same nodes; optimising twice changes nothing more.
static void test_passes_off_and_idempotent(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(3), WEFT_F64);
    weft_tensor *k = weft_tensor_full(WEFT_DIMS(3), WEFT_F64, 1);
    weft_value c = weft_graph_constant(g, NULL, k);
    weft_value a = weft_graph_op1(g, "mul", 2, (weft_value[]){x, c}, NULL, 0, NULL, 0);
    weft_value b = weft_graph_op1(g, "exp", 1, &c, NULL, 0, NULL, 0);
    weft_value d = weft_graph_op1(g, "exp", 1, &c, NULL, 0, NULL, 0);
    weft_value s = weft_graph_op1(g, "add", 2, (weft_value[]){a, b}, NULL, 0, NULL, 0);
    CHECK(d.id >= 0);
    weft_graph_passes off = {0};
    weft_graph_pass_stats st;
    weft_value so;
    weft_graph *o = weft_graph_optimize(g, 1, &s, &so, &off, &st);
    CHECK(o && weft_graph_node_count(o) == weft_graph_node_count(g) && st.nodes_after == st.nodes_before);
    for (int i = 0; i < weft_graph_node_count(g); i++) {
        CHECK(!strcmp(weft_graph_node_name(o, (weft_node_id){i}), weft_graph_node_name(g, (weft_node_id){i})));
        CHECK(!strcmp(weft_graph_node_op(o, (weft_node_id){i}), weft_graph_node_op(g, (weft_node_id){i})));
    }
    weft_tensor *xt = wt_rand64(WEFT_DIMS(3), -1, 1, 17, false);
    same_values("passes off", g, o, 1, &x, &xt, 1, &s, &so, 0);
    weft_value so2, so3;
    weft_graph *o2 = weft_graph_optimize(g, 1, &s, &so2, NULL, &st);
    CHECK(o2 && st.nodes_after == 3); // x, exp(c) folded once (CSE), add: mul(x, 1) is x
    int n2 = weft_graph_node_count(o2);
    weft_graph *o3 = weft_graph_optimize(o2, 1, &so2, &so3, NULL, &st);
    CHECK(o3 && weft_graph_node_count(o3) == n2 && st.folded + st.cse_merged + st.dce_removed + st.simplified == 0);
    same_values("all passes", g, o2, 1, &x, &xt, 1, &s, &so2, 0);
    weft_graph_free(o);
    weft_graph_free(o2);
    weft_graph_free(o3);
    weft_tensor_free(xt);
    weft_tensor_free(k);
    weft_graph_free(g);
}

static void test_errors(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(3), WEFT_F64), out;
    CHECK(weft_graph_optimize(NULL, 0, NULL, NULL, NULL, NULL) == NULL);
    CHECK(wt_error_has("graph_optimize") && wt_error_has("NULL graph"));
    CHECK(weft_graph_optimize(g, 1, (weft_value[]){{42}}, &out, NULL, NULL) == NULL);
    CHECK(wt_error_has("graph_optimize") && wt_error_has("keep value 0"));
    CHECK(weft_graph_optimize(g, 1, &x, NULL, NULL, NULL) == NULL);
    CHECK(wt_error_has("graph_optimize"));
    weft_node_id nn;
    CHECK(weft_graph_optimize_nodes(g, 0, NULL, NULL, 1, (weft_node_id[]){{7}}, &nn, NULL, NULL) == NULL);
    CHECK(wt_error_has("graph_optimize") && wt_error_has("keep node 0"));
    weft_graph_trace_begin(g);
    CHECK(weft_graph_optimize(g, 1, &x, &out, NULL, NULL) == NULL);
    CHECK(wt_error_has("graph_optimize") && wt_error_has("traced"));
    weft_graph_trace_end(g);
    weft_graph_free(g);
}

int main(void) {
    RUN(test_constant_folding);
    RUN(test_cse);
    RUN(test_dce);
    RUN(test_algebraic);
    RUN(test_algebraic_zero_and_chain);
    RUN(test_algebraic_state);
    RUN(test_traced_mlp);
    RUN(test_passes_off_and_idempotent);
    RUN(test_errors);
    return wt_summary();
}
