// Symbolic autodiff (weft_graph_gradients): gradients built without running
// the forward agree with eager weft_backward, with finite differences and with
// closed forms; kernels are counted to show the build runs none.
#include <stdlib.h>
#include <string.h>

#include "../../src/ops/op.h"
#include "../weft_test.h"
#include "graph_test.h"

// ---- kernel counting: wrap the CPU kernels of a few ops ----
#define N_COUNTED 6
static const char *k_counted[N_COUNTED] = {"matmul", "relu", "cross_entropy", "conv2d", "layer_norm", "softmax"};
static weft_kernel saved[N_COUNTED];
static int kernel_calls;
#define WRAP(i) \
    static weft_status wrap##i(const weft_op_args *a) { kernel_calls++; return saved[i].fn(a); }
WRAP(0) WRAP(1) WRAP(2) WRAP(3) WRAP(4) WRAP(5)
static weft_kernel_fn wraps[N_COUNTED] = {wrap0, wrap1, wrap2, wrap3, wrap4, wrap5};
static void count_kernels(bool on) {
    for (int i = 0; i < N_COUNTED; i++) {
        weft_op_def *op = (weft_op_def *)weft_op_find(k_counted[i]);
        if (on) {
            saved[i] = op->kernel[WEFT_CPU];
            weft_op_register_kernel(k_counted[i], WEFT_CPU, wraps[i], saved[i].dtypes);
        } else {
            weft_op_register_kernel(k_counted[i], WEFT_CPU, saved[i].fn, saved[i].dtypes);
        }
    }
}

// sum over every axis (the builder's reduce attrs: i[0] = axes mask)

static weft_tensor *randt(int ndim, const int64_t *sizes, weft_dtype dt, uint64_t seed, bool rg) {
    weft_tensor *t = wt_rand64(ndim, sizes, -1, 1, seed, false);
    weft_tensor *c = weft_cast(t, dt);
    weft_tensor_free(t);
    if (rg) weft_tensor_set_requires_grad(c, true);
    return c;
}

// Trace loss = f(params, inputs), then compare graph gradients with eager ones.
typedef weft_tensor *(*model_fn)(weft_tensor **p, weft_tensor **in);
static void check_vs_eager(const char *what, int np, weft_tensor **p, int ni, weft_tensor **in, model_fn f,
                           double tol) {
    weft_graph *g = weft_graph_new();
    CHECK(weft_graph_trace_begin(g) == WEFT_OK);
    weft_value inv[4], pv[8];
    char nm[16];
    for (int i = 0; i < ni; i++) {
        snprintf(nm, sizeof nm, "in%d", i);
        inv[i] = weft_graph_trace_input(g, in[i], nm);
    }
    for (int i = 0; i < np; i++) {
        snprintf(nm, sizeof nm, "p%d", i);
        pv[i] = weft_graph_trace_variable(g, p[i], nm);
    }
    weft_tensor *loss = f(p, in);
    CHECK(loss != NULL);
    weft_value lv = weft_graph_trace_output(g, loss);
    CHECK(weft_graph_trace_end(g) == WEFT_OK);
    CHECK(weft_backward(loss, NULL, NULL) == WEFT_OK);

    int nodes_before = weft_graph_node_count(g);
    weft_value gv[8];
    count_kernels(true);
    kernel_calls = 0;
    CHECK(weft_graph_gradients(g, lv, np, pv, gv) == WEFT_OK);
    int build_calls = kernel_calls;
    CHECK(build_calls == 0); // the forward (and backward) kernels did not run while building
    CHECK(weft_graph_node_count(g) > nodes_before);
    weft_tensor *out[8] = {0};
    CHECK(weft_graph_run(g, ni, inv, in, np, gv, out, 0, NULL) == WEFT_OK);
    CHECK(kernel_calls > 0); // the counter does count
    count_kernels(false);
    for (int i = 0; i < np; i++) {
        char w[64];
        snprintf(w, sizeof w, "%s: grad p%d", what, i);
        if (out[i]) wt_check_same(w, out[i], weft_tensor_grad(p[i]), tol);
        weft_tensor_free(out[i]);
    }
    weft_tensor_free(loss);
    weft_graph_free(g);
}

static weft_tensor *mlp(weft_tensor **p, weft_tensor **in) {
    weft_tensor *a = weft_matmul(in[0], p[0]), *b = weft_add(a, p[1]), *h = weft_relu(b);
    weft_tensor *c = weft_matmul(h, p[2]), *lg = weft_add(c, p[3]), *l = weft_cross_entropy(lg, in[1]);
    weft_tensor *ts[] = {a, b, h, c, lg};
    for (int k = 0; k < 5; k++) weft_tensor_free(ts[k]);
    return l;
}

static void test_mlp_cross_entropy(void) {
    weft_tensor *p[4] = {randt(2, (int64_t[]){5, 16}, WEFT_F32, 1, true), randt(1, (int64_t[]){16}, WEFT_F32, 2, true),
                         randt(2, (int64_t[]){16, 3}, WEFT_F32, 3, true), randt(1, (int64_t[]){3}, WEFT_F32, 4, true)};
    int64_t tg[8] = {0, 1, 2, 1, 0, 2, 2, 1};
    weft_tensor *in[2] = {randt(2, (int64_t[]){8, 5}, WEFT_F32, 5, false),
                          weft_tensor_from_data(tg, 1, (int64_t[]){8}, WEFT_I64)};
    check_vs_eager("mlp", 4, p, 2, in, mlp, 1e-5);
    for (int i = 0; i < 4; i++) weft_tensor_free(p[i]);
    for (int i = 0; i < 2; i++) weft_tensor_free(in[i]);
}

static weft_tensor *convnet(weft_tensor **p, weft_tensor **in) {
    weft_conv2d_params cp = {.padding = {1, 1}};
    weft_pool2d_params pp = {.kernel = {2, 2}};
    weft_tensor *c = weft_conv2d(in[0], p[0], p[1], &cp), *r = weft_relu(c), *m = weft_max_pool2d(r, &pp);
    weft_tensor *f = weft_reshape(m, 2, (int64_t[]){2, 27}), *lg = weft_matmul(f, p[2]);
    weft_tensor *l = weft_cross_entropy(lg, in[1]);
    weft_tensor *ts[] = {c, r, m, f, lg};
    for (int k = 0; k < 5; k++) weft_tensor_free(ts[k]);
    return l;
}

static void test_conv_net(void) {
    weft_tensor *p[3] = {randt(4, (int64_t[]){3, 2, 3, 3}, WEFT_F32, 11, true),
                         randt(1, (int64_t[]){3}, WEFT_F32, 12, true), randt(2, (int64_t[]){27, 4}, WEFT_F32, 13, true)};
    int64_t tg[2] = {3, 1};
    weft_tensor *in[2] = {randt(4, (int64_t[]){2, 2, 6, 6}, WEFT_F32, 14, false),
                          weft_tensor_from_data(tg, 1, (int64_t[]){2}, WEFT_I64)};
    check_vs_eager("conv", 3, p, 2, in, convnet, 1e-5);
    for (int i = 0; i < 3; i++) weft_tensor_free(p[i]);
    for (int i = 0; i < 2; i++) weft_tensor_free(in[i]);
}

// layer_norm -> softmax -> matmul with a transposed (view) weight -> tanh -> mean
static weft_tensor *ln_chain(weft_tensor **p, weft_tensor **in) {
    weft_tensor *ln = weft_layer_norm(in[0], 1, p[0], p[1], 1e-5), *s = weft_softmax(ln, -1);
    weft_tensor *wt = weft_transpose(p[2], 0, 1), *m = weft_matmul(s, wt), *t = weft_tanh(m);
    weft_tensor *u = weft_mul(t, in[1]), *l = weft_mean(u, 0, NULL, false);
    weft_tensor *ts[] = {ln, s, wt, m, t, u};
    for (int k = 0; k < 6; k++) weft_tensor_free(ts[k]);
    return l;
}

static void test_layer_norm_softmax_matmul(void) {
    weft_tensor *p[3] = {randt(1, (int64_t[]){6}, WEFT_F64, 21, true), randt(1, (int64_t[]){6}, WEFT_F64, 22, true),
                         randt(2, (int64_t[]){5, 6}, WEFT_F64, 23, true)};
    weft_tensor *in[2] = {randt(2, (int64_t[]){4, 6}, WEFT_F64, 24, false),
                          randt(2, (int64_t[]){4, 5}, WEFT_F64, 25, false)};
    check_vs_eager("ln chain", 3, p, 2, in, ln_chain, 1e-10);
    for (int i = 0; i < 3; i++) weft_tensor_free(p[i]);
    for (int i = 0; i < 2; i++) weft_tensor_free(in[i]);
}

// A graph of placeholders only (no feeds while building), checked by finite differences.
static void test_finite_differences_f64(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", 2, (int64_t[]){3, 4}, WEFT_F64);
    weft_value w = weft_graph_placeholder(g, "w", 2, (int64_t[]){4, 2}, WEFT_F64);
    weft_value xw = weft_graph_op1(g, "matmul", 2, (weft_value[]){x, w}, NULL, 0, NULL, 0);
    weft_value t = weft_graph_op1(g, "tanh", 1, &xw, NULL, 0, NULL, 0);
    weft_value e = weft_graph_op1(g, "exp", 1, &xw, NULL, 0, NULL, 0);
    weft_value te = weft_graph_op1(g, "mul", 2, (weft_value[]){t, e}, NULL, 0, NULL, 0);
    weft_value sq = weft_graph_op1(g, "pow_scalar", 1, &te, NULL, 0, (double[]){2.0}, 1);
    weft_value y = sum_all(g, sq);
    CHECK(y.id >= 0 && weft_graph_value_ndim(g, y) == 0);
    weft_value gr[2];
    CHECK(weft_graph_gradients(g, y, 2, (weft_value[]){x, w}, gr) == WEFT_OK);
    double xd[12], wd[8];
    wt_vals(xd, 12, -0.5, 0.5, 31);
    wt_vals(wd, 8, -0.5, 0.5, 32);
    weft_tensor *feeds[2] = {weft_tensor_from_data(xd, 2, (int64_t[]){3, 4}, WEFT_F64),
                             weft_tensor_from_data(wd, 2, (int64_t[]){4, 2}, WEFT_F64)};
    weft_tensor *out[2] = {0};
    CHECK(weft_graph_run(g, 2, (weft_value[]){x, w}, feeds, 2, gr, out, 0, NULL) == WEFT_OK);
    double ga[12], gw[8];
    CHECK(out[0] && weft_tensor_to_f64(out[0], ga, 12) == WEFT_OK);
    CHECK(out[1] && weft_tensor_to_f64(out[1], gw, 8) == WEFT_OK);
    // central differences on every element of x and w
    const double h = 1e-6;
    for (int which = 0; which < 2; which++) {
        double *d = which ? wd : xd;
        int n = which ? 8 : 12;
        for (int k = 0; k < n; k++) {
            double f[2];
            for (int s = 0; s < 2; s++) {
                double keep = d[k];
                d[k] = keep + (s ? -h : h);
                weft_tensor *fd[2] = {weft_tensor_from_data(xd, 2, (int64_t[]){3, 4}, WEFT_F64),
                                      weft_tensor_from_data(wd, 2, (int64_t[]){4, 2}, WEFT_F64)};
                weft_tensor *yo = NULL;
                CHECK(weft_graph_run(g, 2, (weft_value[]){x, w}, fd, 1, &y, &yo, 0, NULL) == WEFT_OK);
                f[s] = yo ? weft_tensor_item(yo) : 0;
                weft_tensor_free(yo);
                weft_tensor_free(fd[0]);
                weft_tensor_free(fd[1]);
                d[k] = keep;
            }
            CHECK_NEAR(which ? gw[k] : ga[k], (f[0] - f[1]) / (2 * h), 1e-6);
        }
    }
    for (int i = 0; i < 2; i++) {
        weft_tensor_free(out[i]);
        weft_tensor_free(feeds[i]);
    }
    weft_graph_free(g);
}

// y = sum(x * x) + sum(x): a value used three times; dy/dx = 2x + 1.
static void test_accumulation(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", 1, (int64_t[]){5}, WEFT_F64);
    weft_value xx = weft_graph_op1(g, "mul", 2, (weft_value[]){x, x}, NULL, 0, NULL, 0);
    weft_value s1 = sum_all(g, xx);
    weft_value s2 = sum_all(g, x);
    weft_value y = weft_graph_op1(g, "add", 2, (weft_value[]){s1, s2}, NULL, 0, NULL, 0);
    weft_value gx, gy, unused = weft_graph_placeholder(g, "u", 2, (int64_t[]){2, 3}, WEFT_F64), gu;
    CHECK(weft_graph_gradients(g, y, 1, &x, &gx) == WEFT_OK);
    // y itself and a value y does not depend on (all-zero constant)
    weft_value two[2];
    CHECK(weft_graph_gradients(g, y, 2, (weft_value[]){y, unused}, two) == WEFT_OK);
    gy = two[0];
    gu = two[1];
    CHECK(weft_graph_node_kind(g, weft_graph_value_node(g, gu)) == WEFT_NODE_CONSTANT);
    CHECK(weft_graph_value_ndim(g, gu) == 2 && weft_graph_value_sizes(g, gu)[1] == 3);
    double xd[5] = {1, -2, 0.5, 3, -0.25};
    weft_tensor *xt = weft_tensor_from_data(xd, 1, (int64_t[]){5}, WEFT_F64), *out[3] = {0};
    CHECK(weft_graph_run(g, 1, &x, &xt, 3, (weft_value[]){gx, gy, gu}, out, 0, NULL) == WEFT_OK);
    double ref[5];
    for (int i = 0; i < 5; i++) ref[i] = 2 * xd[i] + 1;
    if (out[0]) wt_check_values("d/dx", out[0], ref, 5, 1e-12);
    if (out[1]) wt_check_values("dy/dy", out[1], (double[]){1}, 1, 0);
    if (out[2]) wt_check_values("unused", out[2], (double[]){0, 0, 0, 0, 0, 0}, 6, 0);
    for (int i = 0; i < 3; i++) weft_tensor_free(out[i]);
    weft_tensor_free(xt);
    weft_graph_free(g);
}

// Through a NONDIFF op (gt) and an int cast no gradient flows: d/dx sum(x * (x > 0)) = (x > 0).
static void test_nondiff_and_errors(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", 1, (int64_t[]){4}, WEFT_F64);
    weft_tensor *z = weft_tensor_scalar(0, WEFT_F64);
    weft_value zero = weft_graph_constant(g, "zero", z);
    weft_tensor_free(z);
    weft_value m = weft_graph_op1(g, "gt", 2, (weft_value[]){x, zero}, NULL, 0, NULL, 0);
    weft_value mf = weft_graph_op1(g, "cast", 1, &m, (int64_t[]){WEFT_F64}, 1, NULL, 0);
    weft_value p = weft_graph_op1(g, "mul", 2, (weft_value[]){x, mf}, NULL, 0, NULL, 0);
    weft_value y = sum_all(g, p);
    weft_value gx;
    CHECK(weft_graph_gradients(g, y, 1, &x, &gx) == WEFT_OK);
    double xd[4] = {1, -2, 0.5, -3};
    weft_tensor *xt = weft_tensor_from_data(xd, 1, (int64_t[]){4}, WEFT_F64), *o = NULL;
    CHECK(weft_graph_run(g, 1, &x, &xt, 1, &gx, &o, 0, NULL) == WEFT_OK);
    if (o) wt_check_values("masked", o, (double[]){1, 0, 1, 0}, 4, 0);
    weft_tensor_free(o);
    weft_tensor_free(xt);

    // an op without a backward rule on the path: the error names it
    weft_value lg = weft_graph_placeholder(g, "logits", 2, (int64_t[]){2, 3}, WEFT_F64);
    weft_value tg = weft_graph_placeholder(g, "targets", 1, (int64_t[]){2}, WEFT_I64);
    weft_tensor *one = weft_tensor_scalar(1, WEFT_F64);
    weft_value ov = weft_graph_constant(g, "one", one);
    weft_tensor_free(one);
    weft_value cb = weft_graph_op1(g, "cross_entropy_backward", 3, (weft_value[]){lg, tg, ov}, NULL, 0, NULL, 0);
    weft_value s = sum_all(g, cb);
    CHECK(s.id >= 0);
    weft_value gl = {7};
    CHECK(weft_graph_gradients(g, s, 1, &lg, &gl) != WEFT_OK);
    CHECK(wt_error_has("cross_entropy_backward") && wt_error_has("graph_gradients"));
    CHECK(gl.id < 0);
    // not a scalar / not a value / NULL
    CHECK(weft_graph_gradients(g, cb, 1, &lg, &gl) != WEFT_OK && wt_error_has("one floating-point element"));
    CHECK(weft_graph_gradients(g, (weft_value){9999}, 1, &lg, &gl) != WEFT_OK);
    CHECK(weft_graph_gradients(NULL, s, 1, &lg, &gl) != WEFT_OK);
    CHECK(weft_graph_gradients(g, s, 1, NULL, &gl) != WEFT_OK);
    // the graph still runs after a failed build
    weft_tensor *xt2 = weft_tensor_from_data(xd, 1, (int64_t[]){4}, WEFT_F64), *o2 = NULL;
    CHECK(weft_graph_run(g, 1, &x, &xt2, 1, &y, &o2, 0, NULL) == WEFT_OK);
    if (o2) CHECK_NEAR(weft_tensor_item(o2), 1.5, 1e-12);
    weft_tensor_free(o2);
    weft_tensor_free(xt2);
    weft_graph_free(g);
}

int main(void) {
    RUN(test_mlp_cross_entropy);
    RUN(test_conv_net);
    RUN(test_layer_norm_softmax_matmul);
    RUN(test_finite_differences_f64);
    RUN(test_accumulation);
    RUN(test_nondiff_and_errors);
    return wt_summary();
}
