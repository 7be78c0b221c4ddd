// Graph mode core: builder, pruning, variables, tracing (forward and through
// weft_backward), cycles, DOT. References are the eager ops on the same inputs.
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

// Every element of a equals b within tol (relative + absolute).


// ---- builder ----
static void test_builder_mlp(void) {
    weft_graph *g = weft_graph_new();
    weft_tensor *w1 = wt_rand64(WEFT_DIMS(3, 5), -1, 1, 1, false), *b1 = wt_rand64(WEFT_DIMS(5), -1, 1, 2, false);
    weft_tensor *w2 = wt_rand64(WEFT_DIMS(5, 2), -1, 1, 3, false), *x = wt_rand64(WEFT_DIMS(4, 3), -1, 1, 4, false);
    weft_value vx = weft_graph_placeholder(g, "x", WEFT_DIMS(4, 3), WEFT_F64);
    weft_value vw1 = weft_graph_constant(g, "w1", w1), vb1 = weft_graph_variable(g, "b1", b1);
    weft_value vw2 = weft_graph_variable(g, "w2", w2);
    weft_value h = weft_graph_op1(g, "matmul", 2, (weft_value[]){vx, vw1}, NULL, 0, NULL, 0);
    h = weft_graph_op1(g, "add", 2, (weft_value[]){h, vb1}, NULL, 0, NULL, 0);
    h = weft_graph_op1(g, "relu", 1, &h, NULL, 0, NULL, 0);
    weft_value y = weft_graph_op1(g, "matmul", 2, (weft_value[]){h, vw2}, NULL, 0, NULL, 0);
    weft_value s = weft_graph_op1(g, "sum", 1, &y, (int64_t[]){3, 0}, 2, NULL, 0); // mask 0b11: all axes
    CHECK(y.id >= 0 && s.id >= 0);
    CHECK(weft_graph_value_ndim(g, y) == 2);
    CHECK(weft_graph_value_sizes(g, y)[0] == 4 && weft_graph_value_sizes(g, y)[1] == 2);
    CHECK(weft_graph_value_ndim(g, s) == 0);
    CHECK(weft_graph_value_dtype(g, y) == WEFT_F64);
    CHECK(weft_graph_node_count(g) == 9);
    CHECK(!strcmp(weft_graph_node_op(g, weft_graph_value_node(g, h)), "relu"));
    CHECK(!strcmp(weft_graph_node_name(g, weft_graph_value_node(g, h)), "relu_6")); // auto "op_id" names
    CHECK(weft_graph_find_node(g, "x").id == weft_graph_value_node(g, vx).id);
    CHECK(weft_graph_find_node(g, "nope").id < 0);

    weft_tensor *out[2] = {0};
    CHECK(weft_graph_run(g, 1, &vx, &x, 2, (weft_value[]){y, s}, out, 0, NULL) == WEFT_OK);
    weft_tensor *e1 = weft_matmul(x, w1), *e2 = weft_add(e1, b1), *e3 = weft_relu(e2), *ey = weft_matmul(e3, w2);
    weft_tensor *es = weft_sum(ey, 0, NULL, false);
    wt_check_same("mlp y", out[0], ey, 1e-12);
    wt_check_same("mlp sum", out[1], es, 1e-12);
    CHECK(weft_graph_last_run_stats(g).nodes_executed == 9);
    // a second run with a different input
    weft_tensor *x2 = wt_rand64(WEFT_DIMS(4, 3), -2, 2, 9, false), *o2 = NULL;
    CHECK(weft_graph_run(g, 1, &vx, &x2, 1, &y, &o2, 0, NULL) == WEFT_OK);
    weft_tensor *f1 = weft_matmul(x2, w1), *f2 = weft_add(f1, b1), *f3 = weft_relu(f2), *fy = weft_matmul(f3, w2);
    wt_check_same("mlp y (run 2)", o2, fy, 1e-12);
    weft_tensor *ts[] = {w1, b1, w2, x, out[0], out[1], e1, e2, e3, ey, es, x2, o2, f1, f2, f3, fy};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) weft_tensor_free(ts[i]);
    weft_graph_free(g);
}

static void test_builder_errors(void) {
    weft_graph *g = weft_graph_new();
    weft_value a = weft_graph_placeholder(g, "a", WEFT_DIMS(4, 3), WEFT_F32);
    weft_value b = weft_graph_placeholder(g, "b", WEFT_DIMS(4, 5), WEFT_F32);
    weft_value out[4];
    // shape mismatch at build time names the op and the node
    CHECK(weft_graph_op_named(g, "proj", "matmul", 2, (weft_value[]){a, b}, NULL, 0, NULL, 0, out) != WEFT_OK);
    CHECK(wt_error_has("matmul") && wt_error_has("proj"));
    int nodes = weft_graph_node_count(g);
    CHECK(weft_graph_op(g, "add", 2, (weft_value[]){a, b}, NULL, 0, NULL, 0, out) != WEFT_OK);
    CHECK(wt_error_has("add") && wt_error_has("add_2"));
    CHECK(weft_graph_node_count(g) == nodes); // nothing added on failure
    // unknown op, wrong arity, bad value, duplicate name, dtype without kernel
    CHECK(weft_graph_op(g, "frobnicate", 1, &a, NULL, 0, NULL, 0, out) != WEFT_OK);
    CHECK(wt_error_has("unknown op") && wt_error_has("frobnicate"));
    CHECK(weft_graph_op(g, "relu", 2, (weft_value[]){a, a}, NULL, 0, NULL, 0, out) != WEFT_OK);
    CHECK(wt_error_has("relu"));
    CHECK(weft_graph_op(g, "relu", 1, (weft_value[]){{99}}, NULL, 0, NULL, 0, out) != WEFT_OK);
    CHECK(weft_graph_placeholder(g, "a", WEFT_DIMS(1), WEFT_F32).id < 0);
    CHECK(wt_error_has("'a'") && wt_error_has("already"));
    weft_value m = weft_graph_placeholder(g, "mask", WEFT_DIMS(4, 3), WEFT_BOOL);
    CHECK(weft_graph_op(g, "exp", 1, &m, NULL, 0, NULL, 0, out) != WEFT_OK);
    CHECK(wt_error_has("exp"));
    CHECK(weft_graph_op(NULL, "relu", 1, &a, NULL, 0, NULL, 0, out) != WEFT_OK);
    // ops that write their inputs in place (no outputs) are refused, naming the op
    int before = weft_graph_node_count(g);
    CHECK(weft_graph_op(g, "cast_multi", 2, (weft_value[]){a, a}, NULL, 0, NULL, 0, out) != WEFT_OK);
    CHECK(wt_error_has("cast_multi") && wt_error_has("in place") && weft_graph_node_count(g) == before);

    // feeds: wrong shape and dtype name the placeholder; a missing feed too
    weft_value r = weft_graph_op1(g, "relu", 1, &a, NULL, 0, NULL, 0);
    CHECK(r.id >= 0);
    weft_tensor *bad = weft_tensor_zeros(WEFT_DIMS(3, 4), WEFT_F32), *bad_dt = weft_tensor_zeros(WEFT_DIMS(4, 3), WEFT_F64);
    weft_tensor *o = NULL;
    CHECK(weft_graph_run(g, 1, &a, &bad, 1, &r, &o, 0, NULL) == WEFT_ERR_SHAPE);
    CHECK(wt_error_has("placeholder 'a'") && wt_error_has("(4,3)") && wt_error_has("(3,4)"));
    CHECK(o == NULL);
    CHECK(weft_graph_run(g, 1, &a, &bad_dt, 1, &r, &o, 0, NULL) != WEFT_OK);
    CHECK(wt_error_has("placeholder 'a'") && wt_error_has("f64"));
    CHECK(weft_graph_run(g, 0, NULL, NULL, 1, &r, &o, 0, NULL) != WEFT_OK);
    CHECK(wt_error_has("'a'") && wt_error_has("not fed"));
    CHECK(weft_graph_run(g, 1, &r, &bad_dt, 0, NULL, NULL, 0, NULL) != WEFT_OK); // feeding a non-placeholder
    CHECK(wt_error_has("not a placeholder"));
    CHECK(weft_graph_run(g, 0, NULL, NULL, 1, (weft_value[]){{1000}}, &o, 0, NULL) != WEFT_OK);
    CHECK(weft_graph_run(NULL, 0, NULL, NULL, 0, NULL, NULL, 0, NULL) != WEFT_OK);
    // runtime error inside an op names the node: a view that needs a copy
    weft_value tr = weft_graph_op1(g, "permute", 1, &a, (int64_t[]){1, 0}, 2, NULL, 0);
    weft_value vw = weft_graph_op1(g, "view", 1, &tr, (int64_t[]){1, 12}, 2, NULL, 0);
    CHECK(vw.id >= 0);
    weft_tensor *ok = weft_tensor_zeros(WEFT_DIMS(4, 3), WEFT_F32);
    CHECK(weft_graph_run(g, 1, &a, &ok, 1, &vw, &o, 0, NULL) != WEFT_OK);
    CHECK(wt_error_has("graph_run: node 'view_") && wt_error_has("(view)"));
    weft_tensor_free(ok);
    weft_tensor_free(bad);
    weft_tensor_free(bad_dt);
    weft_graph_free(g);
}

// ---- pruning and liveness ----
static void test_pruning(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(1000), WEFT_F64);
    weft_value unused = weft_graph_placeholder(g, "unused", WEFT_DIMS(2), WEFT_F64);
    weft_value a = weft_graph_op1(g, "exp", 1, &x, NULL, 0, NULL, 0);
    weft_value b = weft_graph_op1(g, "mul_scalar", 1, &a, NULL, 0, (double[]){3}, 1);
    weft_value c = weft_graph_op1(g, "sin", 1, &x, NULL, 0, NULL, 0);
    weft_value d = weft_graph_op1(g, "cos", 1, &c, NULL, 0, NULL, 0);
    weft_value u2 = weft_graph_op1(g, "neg", 1, &unused, NULL, 0, NULL, 0);
    CHECK(u2.id >= 0 && d.id >= 0 && b.id >= 0);
    weft_tensor *xt = wt_rand64(WEFT_DIMS(1000), -1, 1, 5, false), *o = NULL;
    // fetching an intermediate runs only its ancestors: x, exp
    CHECK(weft_graph_run(g, 1, &x, &xt, 1, &a, &o, 0, NULL) == WEFT_OK);
    CHECK(weft_graph_last_run_stats(g).nodes_executed == 2);
    weft_tensor *ea = weft_exp(xt);
    wt_check_same("pruned exp", o, ea, 1e-15);
    weft_tensor_free(o);
    CHECK(weft_graph_run(g, 1, &x, &xt, 1, &b, &o, 0, NULL) == WEFT_OK);
    CHECK(weft_graph_last_run_stats(g).nodes_executed == 3);
    weft_tensor_free(o);
    CHECK(weft_graph_run(g, 1, &x, &xt, 1, &d, &o, 0, NULL) == WEFT_OK);
    CHECK(weft_graph_last_run_stats(g).nodes_executed == 3); // the exp branch did not run
    weft_tensor *es = weft_sin(xt), *ec = weft_cos(es);
    wt_check_same("pruned cos", o, ec, 1e-15);
    weft_tensor_free(o);
    // a target runs without being fetched
    weft_tensor *zero = weft_tensor_zeros(WEFT_DIMS(1000), WEFT_F64);
    weft_value v = weft_graph_variable(g, "acc", zero);
    weft_value inc = weft_graph_assign_add(g, "acc_add", v, d);
    weft_node_id tgt = weft_graph_value_node(g, inc);
    CHECK(weft_graph_run(g, 1, &x, &xt, 0, NULL, NULL, 1, &tgt) == WEFT_OK);
    CHECK(weft_graph_last_run_stats(g).nodes_executed == 4); // x, sin, cos, acc_add
    wt_check_same("target wrote the variable", weft_graph_variable_tensor(g, v), ec, 1e-15);

    // liveness: a chain of 8 unary ops on 8000-byte tensors keeps two alive at a time
    weft_value t = x;
    for (int k = 0; k < 8; k++) t = weft_graph_op1(g, k % 2 ? "neg" : "abs", 1, &t, NULL, 0, NULL, 0);
    CHECK(weft_graph_run(g, 1, &x, &xt, 1, &t, &o, 0, NULL) == WEFT_OK);
    CHECK(weft_graph_last_run_stats(g).nodes_executed == 9);
    // (one: with the memory plan each op writes over its dying input, plan.c)
    CHECK(weft_graph_last_run_stats(g).peak_bytes == 8000);
    weft_tensor *ab = weft_abs(xt), *ng = weft_neg(ab);
    wt_check_same("chain", o, ng, 0);
    weft_tensor_free(o);
    weft_tensor *ts[] = {xt, ea, es, ec, zero, ab, ng};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) weft_tensor_free(ts[i]);
    weft_graph_free(g);
}

// ---- variables ----
static void test_variables(void) {
    weft_graph *g = weft_graph_new();
    weft_tensor *z = weft_tensor_scalar(0, WEFT_F64), *one = weft_tensor_scalar(1, WEFT_F64);
    weft_value v = weft_graph_variable(g, "counter", z);
    weft_value c1 = weft_graph_constant(g, "one", one);
    weft_value inc = weft_graph_assign_add(g, "inc", v, c1);
    for (int k = 1; k <= 3; k++) { // a counter across runs
        weft_tensor *o = NULL;
        CHECK(weft_graph_run(g, 0, NULL, NULL, 1, &inc, &o, 0, NULL) == WEFT_OK);
        CHECK_NEAR(weft_tensor_item(o), k, 0);
        weft_tensor_free(o);
    }
    CHECK_NEAR(weft_tensor_item(z), 0, 0); // the graph owns a copy of the initial value
    CHECK_NEAR(weft_tensor_item(weft_graph_variable_tensor(g, v)), 3, 0);
    // another run reads the same variable
    weft_value twice = weft_graph_op1(g, "mul_scalar", 1, &v, NULL, 0, (double[]){2}, 1);
    weft_tensor *o = NULL;
    CHECK(weft_graph_run(g, 0, NULL, NULL, 1, &twice, &o, 0, NULL) == WEFT_OK);
    CHECK_NEAR(weft_tensor_item(o), 6, 0);
    weft_tensor_free(o);
    // assign from a feed, then read in a separate run; a fetched variable is a snapshot
    weft_value p = weft_graph_placeholder(g, "p", 0, NULL, WEFT_F64);
    weft_value set = weft_graph_assign(g, "set", v, p);
    weft_tensor *ten = weft_tensor_scalar(10, WEFT_F64), *snap = NULL;
    CHECK(weft_graph_run(g, 0, NULL, NULL, 1, &v, &snap, 0, NULL) == WEFT_OK);
    weft_node_id set_node = weft_graph_value_node(g, set);
    CHECK(weft_graph_run(g, 1, &p, &ten, 0, NULL, NULL, 1, &set_node) == WEFT_OK);
    CHECK_NEAR(weft_tensor_item(snap), 3, 0);
    CHECK(weft_graph_run(g, 0, NULL, NULL, 1, &twice, &o, 0, NULL) == WEFT_OK);
    CHECK_NEAR(weft_tensor_item(o), 20, 0);
    weft_tensor_free(o);
    // assign checks shape and names the variable; only variables can be assigned
    weft_value wrong = weft_graph_placeholder(g, "wrong", WEFT_DIMS(2), WEFT_F64);
    CHECK(weft_graph_assign(g, NULL, v, wrong).id < 0);
    CHECK(wt_error_has("counter") && wt_error_has("(2)"));
    CHECK(weft_graph_assign(g, NULL, p, p).id < 0);
    CHECK(wt_error_has("not a variable"));
    weft_tensor_free(snap);
    weft_tensor_free(ten);
    weft_tensor_free(z);
    weft_tensor_free(one);
    weft_graph_free(g);
}

// ---- tracing ----
typedef struct mlp {
    weft_tensor *w1, *b1, *w2, *b2;
} mlp;

static mlp mlp_new(void) {
    mlp m = {wt_rand64(WEFT_DIMS(3, 6), -1, 1, 11, true), wt_rand64(WEFT_DIMS(6), -1, 1, 12, true),
             wt_rand64(WEFT_DIMS(6, 4), -1, 1, 13, true), wt_rand64(WEFT_DIMS(4), -1, 1, 14, true)};
    return m;
}
static void mlp_free(mlp *m) {
    weft_tensor_free(m->w1);
    weft_tensor_free(m->b1);
    weft_tensor_free(m->w2);
    weft_tensor_free(m->b2);
}

// 2-layer MLP + cross-entropy; *logits gets a reference.
static weft_tensor *mlp_loss(mlp *m, weft_tensor *x, weft_tensor *y, weft_tensor **logits) {
    weft_tensor *a = weft_matmul(x, m->w1), *b = weft_add(a, m->b1), *h = weft_tanh(b);
    weft_tensor *c = weft_matmul(h, m->w2), *l = weft_add(c, m->b2);
    weft_tensor *loss = weft_cross_entropy(l, y);
    *logits = l;
    weft_tensor *ts[] = {a, b, h, c};
    for (int i = 0; i < 4; i++) weft_tensor_free(ts[i]);
    return loss;
}

static weft_tensor *labels(uint64_t seed) {
    int64_t v[5];
    for (int i = 0; i < 5; i++) v[i] = (int64_t)((seed * 7 + (uint64_t)i * 3) % 4);
    return weft_tensor_from_data(v, WEFT_DIMS(5), WEFT_I64);
}

static void test_trace_mlp(void) {
    mlp m = mlp_new();
    weft_graph *g = weft_graph_new();
    weft_tensor *x = wt_rand64(WEFT_DIMS(5, 3), -1, 1, 21, false), *y = labels(1), *logits = NULL;
    CHECK(weft_graph_trace_begin(g) == WEFT_OK);
    CHECK(weft_graph_trace_begin(g) != WEFT_OK); // already tracing on this thread
    weft_value vx = weft_graph_trace_input(g, x, "x"), vy = weft_graph_trace_input(g, y, "y");
    weft_value vw1 = weft_graph_trace_variable(g, m.w1, "w1");
    weft_tensor *loss = mlp_loss(&m, x, y, &logits); // eager: computes normally
    CHECK(loss && weft_tensor_item(loss) > 0);
    weft_value vl = weft_graph_trace_output(g, loss), vlog = weft_graph_trace_output(g, logits);
    weft_tensor *stranger = weft_tensor_zeros(WEFT_DIMS(2), WEFT_F64);
    CHECK(weft_graph_trace_output(g, stranger).id < 0); // never computed in the trace
    CHECK(weft_graph_trace_end(g) == WEFT_OK);
    CHECK(weft_graph_trace_output(g, loss).id < 0); // the map is gone after trace_end
    CHECK(vx.id >= 0 && vy.id >= 0 && vl.id >= 0 && vlog.id >= 0 && vw1.id >= 0);
    // parameters became variables: w1 (named), b1, w2, b2 (auto)
    int n_var = 0;
    for (int i = 0; i < weft_graph_node_count(g); i++)
        n_var += weft_graph_node_kind(g, (weft_node_id){i}) == WEFT_NODE_VARIABLE;
    CHECK(n_var == 4);
    CHECK(weft_graph_node_kind(g, weft_graph_find_node(g, "w1")) == WEFT_NODE_VARIABLE);

    // run on NEW inputs and compare with the eager function on them
    weft_tensor *x2 = wt_rand64(WEFT_DIMS(5, 3), -2, 2, 22, false), *y2 = labels(2), *out[2] = {0};
    CHECK(weft_graph_run(g, 2, (weft_value[]){vx, vy}, (weft_tensor *[]){x2, y2}, 2, (weft_value[]){vl, vlog}, out, 0,
                         NULL) == WEFT_OK);
    weft_tensor *logits2 = NULL, *loss2 = mlp_loss(&m, x2, y2, &logits2);
    wt_check_same("traced loss", out[0], loss2, 1e-6);
    wt_check_same("traced logits", out[1], logits2, 1e-6);
    CHECK(fabs(weft_tensor_item(out[0]) - weft_tensor_item(loss)) > 1e-6); // not a frozen constant
    // variables share the parameters' storage: an eager update shows in the graph
    weft_tensor_fill_(m.b2, 0.5);
    weft_tensor *o3 = NULL, *l3 = NULL, *loss3 = mlp_loss(&m, x2, y2, &l3);
    CHECK(weft_graph_run(g, 2, (weft_value[]){vx, vy}, (weft_tensor *[]){x2, y2}, 1, &vl, &o3, 0, NULL) == WEFT_OK);
    wt_check_same("traced loss after update", o3, loss3, 1e-6);
    weft_tensor *ts[] = {x, y, logits, loss, stranger, x2, y2, out[0], out[1], logits2, loss2, o3, l3, loss3};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) weft_tensor_free(ts[i]);
    weft_graph_free(g);
    mlp_free(&m);
}

// Views: transpose (non-contiguous), reshape (copy), slice, unsqueeze/expand.
static weft_tensor *view_fn(weft_tensor *x, weft_tensor *w) {
    weft_tensor *t = weft_transpose(x, 0, 1);                    // (4,3) strided
    weft_tensor *r = weft_reshape(t, WEFT_DIMS(2, 6));           // needs a copy
    weft_tensor *s = weft_slice(r, 1, 1, 6, 2);                  // (2,3)
    weft_tensor *u = weft_unsqueeze(s, 0);                       // (1,2,3)
    weft_tensor *e = weft_expand(u, WEFT_DIMS(2, 2, 3));         // (2,2,3)
    weft_tensor *m = weft_mul(e, w);                             // w (2,2,3)
    weft_tensor *f = weft_flatten(m, 0, -1);                     // (12)
    weft_tensor *o = weft_sum(f, 0, NULL, false);
    weft_tensor *p = weft_add(o, f);  // broadcast scalar + (12)
    weft_tensor *ts[] = {t, r, s, u, e, m, f, o};
    for (int i = 0; i < 8; i++) weft_tensor_free(ts[i]);
    return p;
}

static void test_trace_views(void) {
    weft_graph *g = weft_graph_new();
    weft_tensor *x = wt_rand64(WEFT_DIMS(3, 4), -1, 1, 31, false), *w = wt_rand64(WEFT_DIMS(2, 2, 3), -1, 1, 32, false);
    weft_graph_trace_begin(g);
    weft_value vx = weft_graph_trace_input(g, x, "x");
    weft_tensor *y = view_fn(x, w);
    weft_value vy = weft_graph_trace_output(g, y);
    CHECK(weft_graph_trace_end(g) == WEFT_OK);
    int n_const = 0, n_copy = 0; // w is a constant; the reshape of a transpose was recorded as its copy
    for (int i = 0; i < weft_graph_node_count(g); i++) {
        n_const += weft_graph_node_kind(g, (weft_node_id){i}) == WEFT_NODE_CONSTANT;
        n_copy += !strcmp(weft_graph_node_op(g, (weft_node_id){i}), "copy");
    }
    CHECK(n_const == 1 && n_copy == 1);
    weft_tensor *x2 = wt_rand64(WEFT_DIMS(3, 4), -3, 3, 33, false), *o = NULL;
    CHECK(weft_graph_run(g, 1, &vx, &x2, 1, &vy, &o, 0, NULL) == WEFT_OK);
    weft_tensor *ref = view_fn(x2, w);
    wt_check_same("traced views", o, ref, 1e-6);
    // a non-contiguous feed works too (feeds are made contiguous)
    weft_tensor *big = wt_rand64(WEFT_DIMS(4, 3), -1, 1, 34, false), *xt = weft_transpose(big, 0, 1), *o2 = NULL;
    CHECK(weft_graph_run(g, 1, &vx, &xt, 1, &vy, &o2, 0, NULL) == WEFT_OK);
    weft_tensor *ref2 = view_fn(xt, w);
    wt_check_same("traced views, strided feed", o2, ref2, 1e-6);
    weft_tensor *ts[] = {x, w, y, x2, o, ref, big, xt, o2, ref2};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) weft_tensor_free(ts[i]);
    weft_graph_free(g);
}

// Forward + weft_backward traced: the gradients are graph values.
static void test_trace_backward(void) {
    mlp m = mlp_new();
    weft_tensor *params[4] = {m.w1, m.b1, m.w2, m.b2};
    weft_graph *g = weft_graph_new();
    weft_tensor *x = wt_rand64(WEFT_DIMS(5, 3), -1, 1, 41, false), *y = labels(3), *logits = NULL;
    weft_graph_trace_begin(g);
    weft_value vx = weft_graph_trace_input(g, x, "x"), vy = weft_graph_trace_input(g, y, "y");
    weft_tensor *loss = mlp_loss(&m, x, y, &logits);
    CHECK(weft_backward(loss, NULL, NULL) == WEFT_OK);
    weft_value fetch[5];
    fetch[0] = weft_graph_trace_output(g, loss);
    for (int i = 0; i < 4; i++) {
        fetch[1 + i] = weft_graph_trace_output(g, weft_tensor_grad(params[i]));
        CHECK(fetch[1 + i].id >= 0);
    }
    CHECK(weft_graph_trace_end(g) == WEFT_OK);

    weft_tensor *x2 = wt_rand64(WEFT_DIMS(5, 3), -2, 2, 42, false), *y2 = labels(4), *out[5] = {0};
    CHECK(weft_graph_run(g, 2, (weft_value[]){vx, vy}, (weft_tensor *[]){x2, y2}, 5, fetch, out, 0, NULL) == WEFT_OK);
    for (int i = 0; i < 4; i++) weft_tensor_zero_grad(params[i]);
    weft_tensor *logits2 = NULL, *loss2 = mlp_loss(&m, x2, y2, &logits2);
    CHECK(weft_backward(loss2, NULL, NULL) == WEFT_OK);
    wt_check_same("traced loss", out[0], loss2, 1e-6);
    const char *names[4] = {"grad w1", "grad b1", "grad w2", "grad b2"};
    for (int i = 0; i < 4; i++) wt_check_same(names[i], out[1 + i], weft_tensor_grad(params[i]), 1e-6);
    // the graph run recorded no autograd history and left .grad alone
    CHECK(!weft_tensor_requires_grad(out[1]));
    for (int i = 0; i < 5; i++) weft_tensor_free(out[i]);
    weft_tensor *ts[] = {x, y, logits, loss, x2, y2, logits2, loss2};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) weft_tensor_free(ts[i]);
    weft_graph_free(g);
    mlp_free(&m);
}

static void test_trace_errors(void) {
    weft_graph *g = weft_graph_new();
    weft_tensor *t = weft_tensor_zeros(WEFT_DIMS(2), WEFT_F32);
    CHECK(weft_graph_trace_end(g) != WEFT_OK); // not tracing
    CHECK(weft_graph_trace_input(g, t, "t").id < 0);
    CHECK(weft_graph_trace_output(g, t).id < 0);
    CHECK(weft_graph_trace_begin(NULL) != WEFT_OK);
    weft_graph_trace_begin(g);
    CHECK(weft_graph_trace_input(g, t, "t").id >= 0);
    CHECK(weft_graph_trace_input(g, t, "t2").id < 0); // twice
    CHECK(weft_graph_run(g, 0, NULL, NULL, 0, NULL, NULL, 0, NULL) != WEFT_OK);
    CHECK(weft_graph_trace_end(g) == WEFT_OK);
    // ops after trace_end are not recorded
    int n = weft_graph_node_count(g);
    weft_tensor *e = weft_exp(t);
    CHECK(weft_graph_node_count(g) == n);
    weft_tensor_free(e);
    weft_tensor_free(t);
    weft_graph_free(g);
}

// ---- cycles and DOT ----
static void test_cycle_and_dot(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(4, 3), WEFT_F32);
    weft_value a = weft_graph_op1(g, "exp", 1, &x, NULL, 0, NULL, 0);
    weft_value b = weft_graph_op1(g, "sin", 1, &a, NULL, 0, NULL, 0);
    weft_tensor *zero = weft_tensor_zeros(WEFT_DIMS(4, 3), WEFT_F32);
    weft_value v = weft_graph_variable(g, "v", zero);
    weft_value asg = weft_graph_assign(g, "write_v", v, b);
    weft_node_id na = weft_graph_value_node(g, a), nb = weft_graph_value_node(g, b), nw = weft_graph_value_node(g, asg);
    weft_tensor *xt = weft_tensor_ones(WEFT_DIMS(4, 3), WEFT_F32), *o = NULL;
    // a control dependency orders otherwise independent nodes
    CHECK(weft_graph_add_control_dep(g, nw, weft_graph_value_node(g, x)) == WEFT_OK);
    CHECK(weft_graph_run(g, 1, &x, &xt, 1, &b, &o, 1, &nw) == WEFT_OK);
    double v00 = 0;
    CHECK(weft_tensor_get(weft_graph_variable_tensor(g, v), (int64_t[]){2, 1}, &v00) == WEFT_OK);
    CHECK_NEAR(v00, sin(exp(1.0)), 1e-6);
    weft_tensor_free(o);
    o = NULL;
    weft_tensor_fill_(weft_graph_variable_tensor(g, v), 0);
    // exp waits for the assign, which needs sin(exp): a cycle
    CHECK(weft_graph_add_control_dep(g, na, nw) == WEFT_OK);
    CHECK(weft_graph_run(g, 1, &x, &xt, 1, &b, &o, 0, NULL) == WEFT_ERR_STATE);
    CHECK(wt_error_has("cycle") && (wt_error_has("'exp_1'") || wt_error_has("'sin_2'") || wt_error_has("'write_v'")));
    CHECK(o == NULL);
    CHECK(weft_graph_add_control_dep(g, na, (weft_node_id){99}) != WEFT_OK);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(weft_graph_write_dot(g, f) == WEFT_OK);
    fclose(f);
    CHECK(strstr(buf, "digraph") != NULL);
    CHECK(strstr(buf, "x\\nplaceholder") && strstr(buf, "exp_1\\nexp") && strstr(buf, "write_v\\nassign"));
    CHECK(strstr(buf, "n0 -> n1 [label=\"(4,3) f32\"]") != NULL);
    CHECK(strstr(buf, "n1 -> n2") != NULL);
    CHECK(strstr(buf, "style=dashed") != NULL);
    free(buf);
    CHECK(nb.id >= 0);
    weft_tensor_free(xt);
    weft_tensor_free(zero);
    weft_graph_free(g);
}

int main(void) {
    RUN(test_builder_mlp);
    RUN(test_builder_errors);
    RUN(test_pruning);
    RUN(test_variables);
    RUN(test_trace_mlp);
    RUN(test_trace_views);
    RUN(test_trace_backward);
    RUN(test_trace_errors);
    RUN(test_cycle_and_dot);
    return wt_summary();
}
