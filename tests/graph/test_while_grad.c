// Gradients through weft_graph_while_loop: the loop x <- x * w + sin(x)
// (w a loop var passed through) against central differences in f64 and an
// unrolled eager computation with weft_backward, for several trip counts
// including zero; integer loop vars; max_iterations exceeded in the gradient
// loop; a loop inside a cond branch; a nested loop; impure bodies refused;
// the gradient loop surviving weft_graph_optimize.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weft/graph_passes.h>

#include "../weft_test.h"
#include "graph_test.h"

static weft_tensor *f64v(const double *v, int n) { return weft_tensor_from_data(v, 1, (int64_t[]){n}, WEFT_F64); }

#define N 3
static const int64_t VN[1] = {N};

// Loop vars (i, lim, x, w): while i < lim: (i + 1, lim, x * w + sin(x), w).
// body_extra: add a dropout to the body (an impure body).
static weft_status add_loop(weft_graph *g, const char *name, const weft_value *vars, weft_value *out, int64_t max_it,
                            bool body_extra) {
    weft_graph *cg = weft_graph_new(), *bg = weft_graph_new();
    weft_value ci = weft_graph_placeholder(cg, "i", 0, NULL, WEFT_F64);
    weft_value cl = weft_graph_placeholder(cg, "lim", 0, NULL, WEFT_F64);
    weft_graph_placeholder(cg, "x", 1, VN, WEFT_F64);
    weft_graph_placeholder(cg, "w", 1, VN, WEFT_F64);
    weft_value pr = op2(cg, "lt", ci, cl);
    weft_value bi = weft_graph_placeholder(bg, "i", 0, NULL, WEFT_F64);
    weft_value bl = weft_graph_placeholder(bg, "lim", 0, NULL, WEFT_F64);
    weft_value bx = weft_graph_placeholder(bg, "x", 1, VN, WEFT_F64);
    weft_value bw = weft_graph_placeholder(bg, "w", 1, VN, WEFT_F64);
    weft_value nx = op2(bg, "add", op2(bg, "mul", bx, bw), op1(bg, "sin", bx));
    if (body_extra) {
        double p = 0.5;
        weft_value d;
        CHECK(weft_graph_op_named(bg, "drop", "dropout", 1, &nx, (int64_t[]){7, 0}, 2, &p, 1, &d) == WEFT_OK);
        nx = d;
    }
    weft_value bo[4] = {scal(bg, "add_scalar", bi, 1.0), bl, nx, bw};
    weft_status st = weft_graph_while_loop(g, name, cg, pr, bg, bo, 4, vars, out, max_it);
    if (st != WEFT_OK) {
        weft_graph_free(cg);
        weft_graph_free(bg);
    }
    return st;
}

// y = 0.5 * sum(x_n * x_n) + sum(w_n)
static weft_value loss(weft_graph *g, weft_value xn, weft_value wn) {
    return op2(g, "add", scal(g, "mul_scalar", sum_all(g, op2(g, "mul", xn, xn)), 0.5), sum_all(g, wn));
}

static const double X0[N] = {0.3, -0.5, 0.8}, W0[N] = {0.9, 0.4, -0.6};

// Eager reference: the loop unrolled n times, gradients by weft_backward.
static void eager_ref(int n, double *gx, double *gw, double *yv) {
    weft_tensor *x0 = wt_f64(X0, 1, VN, true), *w = wt_f64(W0, 1, VN, true);
    weft_tensor *x = weft_tensor_ref(x0);
    for (int k = 0; k < n; k++) {
        weft_tensor *a = weft_mul(x, w), *s = weft_sin(x), *nx = weft_add(a, s);
        weft_tensor_free(a);
        weft_tensor_free(s);
        weft_tensor_free(x);
        x = nx;
    }
    weft_tensor *xx = weft_mul(x, x), *sx = weft_sum(xx, 0, NULL, false), *hx = weft_mul_scalar(sx, 0.5);
    weft_tensor *sw = weft_sum(w, 0, NULL, false), *y = weft_add(hx, sw);
    CHECK(y && weft_backward(y, NULL, NULL) == WEFT_OK);
    *yv = y ? weft_tensor_item(y) : 0;
    weft_tensor *g1 = weft_tensor_grad(x0), *g2 = weft_tensor_grad(w);
    CHECK(g1 && g2);
    if (g1) weft_tensor_to_f64(g1, gx, N);
    if (g2) weft_tensor_to_f64(g2, gw, N);
    weft_tensor *all[] = {xx, sx, hx, sw, y, x, x0, w};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) weft_tensor_free(all[k]);
}

typedef struct {
    weft_graph *g;
    weft_value i0, lim, x0, w, y, gr[4];
} loop_case;

static bool build_case(loop_case *c, int64_t max_it, bool linear) {
    c->g = weft_graph_new();
    c->i0 = weft_graph_placeholder(c->g, "i0", 0, NULL, WEFT_F64);
    c->lim = weft_graph_placeholder(c->g, "lim", 0, NULL, WEFT_F64);
    c->x0 = weft_graph_placeholder(c->g, "x0", 1, VN, WEFT_F64);
    c->w = weft_graph_placeholder(c->g, "w", 1, VN, WEFT_F64);
    weft_value vars[4] = {c->i0, c->lim, c->x0, c->w}, out[4];
    if (add_loop(c->g, "loop", vars, out, max_it, false) != WEFT_OK) return false;
    // linear: y = sum(x_n), whose gradient does not need the forward loop's result
    c->y = linear ? sum_all(c->g, out[2]) : loss(c->g, out[2], out[3]);
    return weft_graph_gradients(c->g, c->y, 4, (weft_value[]){c->i0, c->lim, c->x0, c->w}, c->gr) == WEFT_OK;
}

static weft_status run_case(const loop_case *c, weft_graph *g, const weft_value *fetch, int n_fetch, double n,
                            const double *x, const double *w, weft_tensor **out) {
    weft_tensor *it = weft_tensor_scalar(0, WEFT_F64), *lt = weft_tensor_scalar(n, WEFT_F64);
    weft_tensor *xt = f64v(x, N), *wt = f64v(w, N);
    weft_status st = weft_graph_run(g, 4, (weft_value[]){c->i0, c->lim, c->x0, c->w},
                                    (weft_tensor *[]){it, lt, xt, wt}, n_fetch, fetch, out, 0, NULL);
    weft_tensor_free(it);
    weft_tensor_free(lt);
    weft_tensor_free(xt);
    weft_tensor_free(wt);
    return st;
}

static double run_y(const loop_case *c, double n, const double *x, const double *w) {
    weft_tensor *yo = NULL;
    CHECK(run_case(c, c->g, &c->y, 1, n, x, w, &yo) == WEFT_OK);
    double v = yo ? weft_tensor_item(yo) : NAN;
    weft_tensor_free(yo);
    return v;
}

static void test_loop_grad_vs_references(void) {
    loop_case c;
    CHECK(build_case(&c, 50, false));
    CHECK(weft_graph_find_node(c.g, "loop_grad").id >= 0);
    const int ns[] = {0, 1, 3, 6};
    for (size_t t = 0; t < sizeof ns / sizeof *ns; t++) {
        int n = ns[t];
        weft_tensor *out[4] = {0};
        CHECK(run_case(&c, c.g, c.gr, 4, n, X0, W0, out) == WEFT_OK);
        double gi = NAN, gl = NAN, gx[N] = {0}, gw[N] = {0};
        if (out[0]) gi = weft_tensor_item(out[0]);
        if (out[1]) gl = weft_tensor_item(out[1]);
        if (out[2]) weft_tensor_to_f64(out[2], gx, N);
        if (out[3]) weft_tensor_to_f64(out[3], gw, N);
        for (int k = 0; k < 4; k++) weft_tensor_free(out[k]);
        // the counter and the bound only steer the loop: zero gradient
        CHECK_NEAR(gi, 0, 0);
        CHECK_NEAR(gl, 0, 0);
        // eager unrolled reference
        double ex[N], ew[N], ey;
        eager_ref(n, ex, ew, &ey);
        CHECK_NEAR(run_y(&c, n, X0, W0), ey, 1e-12);
        for (int k = 0; k < N; k++) {
            CHECK_NEAR(gx[k], ex[k], 1e-10 * (1 + fabs(ex[k])));
            CHECK_NEAR(gw[k], ew[k], 1e-10 * (1 + fabs(ew[k])));
        }
        if (n == 0) // identity: dy/dx0 = x0, dy/dw = 1
            for (int k = 0; k < N; k++) {
                CHECK_NEAR(gx[k], X0[k], 0);
                CHECK_NEAR(gw[k], 1, 0);
            }
        // central differences
        const double h = 1e-6;
        for (int k = 0; k < 2 * N; k++) {
            double x[N], w[N];
            memcpy(x, X0, sizeof x);
            memcpy(w, W0, sizeof w);
            double *d = k < N ? x : w, keep = d[k % N];
            d[k % N] = keep + h;
            double fp = run_y(&c, n, x, w);
            d[k % N] = keep - h;
            double fm = run_y(&c, n, x, w);
            double fd = (fp - fm) / (2 * h), an = k < N ? gx[k] : gw[k - N];
            CHECK_NEAR(an, fd, 1e-6 * (1 + fabs(fd)));
        }
    }
    // weft_graph_optimize keeps the gradient loop working (deep copy keeps its kind)
    weft_value kept[4];
    weft_graph *o = weft_graph_optimize(c.g, 4, c.gr, kept, NULL, NULL);
    CHECK(o != NULL);
    if (o) {
        weft_tensor *a[4] = {0}, *b[4] = {0};
        // placeholders keep their ids in the optimised graph only by name: feed by name
        loop_case oc = c;
        oc.i0 = weft_graph_node_output(o, weft_graph_find_node(o, "i0"), 0);
        oc.lim = weft_graph_node_output(o, weft_graph_find_node(o, "lim"), 0);
        oc.x0 = weft_graph_node_output(o, weft_graph_find_node(o, "x0"), 0);
        oc.w = weft_graph_node_output(o, weft_graph_find_node(o, "w"), 0);
        CHECK(run_case(&c, c.g, c.gr, 4, 4, X0, W0, a) == WEFT_OK);
        CHECK(run_case(&oc, o, kept, 4, 4, X0, W0, b) == WEFT_OK);
        for (int k = 0; k < 4; k++) {
            if (a[k] && b[k]) wt_check_same("optimised gradient loop", a[k], b[k], 1e-12);
            weft_tensor_free(a[k]);
            weft_tensor_free(b[k]);
        }
        weft_graph_free(o);
    }
    weft_graph_free(c.g);
}

// max_iterations bounds the gradient loop too; the error names the node.
static void test_loop_grad_max_iterations(void) {
    loop_case c;
    CHECK(build_case(&c, 3, true));
    weft_tensor *out[4] = {0};
    CHECK(run_case(&c, c.g, c.gr, 4, 3, X0, W0, out) == WEFT_OK); // exactly max_iterations: fine
    for (int k = 0; k < 4; k++) weft_tensor_free(out[k]);
    // y = sum(x_n): only the gradient loop runs for dy/dw, and its own bound is checked
    weft_value gw = c.gr[3];
    weft_tensor *o = NULL;
    CHECK(run_case(&c, c.g, &gw, 1, 5, X0, W0, &o) != WEFT_OK);
    CHECK(o == NULL);
    CHECK(wt_error_has("'loop_grad'") && wt_error_has("max_iterations"));
    weft_graph_free(c.g);
}

// An integer counter as a loop var: only the float vars get gradients.
// while i < 4: (i + 1, 2x) -> dy/dx0 = 2^4 for y = sum(x_n).
static void test_int_counter(void) {
    weft_graph *g = weft_graph_new(), *cg = weft_graph_new(), *bg = weft_graph_new();
    weft_value i0 = weft_graph_placeholder(g, "i0", 0, NULL, WEFT_I64);
    weft_value x0 = weft_graph_placeholder(g, "x0", 1, VN, WEFT_F64);
    weft_value ci = weft_graph_placeholder(cg, "i", 0, NULL, WEFT_I64);
    weft_graph_placeholder(cg, "x", 1, VN, WEFT_F64);
    weft_tensor *four = weft_tensor_scalar(4, WEFT_I64), *one = weft_tensor_scalar(1, WEFT_I64);
    weft_value pr = op2(cg, "lt", ci, weft_graph_constant(cg, NULL, four));
    weft_value bi = weft_graph_placeholder(bg, "i", 0, NULL, WEFT_I64);
    weft_value bx = weft_graph_placeholder(bg, "x", 1, VN, WEFT_F64);
    weft_value bo[2] = {op2(bg, "add", bi, weft_graph_constant(bg, NULL, one)), scal(bg, "mul_scalar", bx, 2.0)};
    weft_value out[2], gr[2];
    CHECK(weft_graph_while_loop(g, "count", cg, pr, bg, bo, 2, (weft_value[]){i0, x0}, out, 0) == WEFT_OK);
    weft_value y = sum_all(g, op2(g, "mul", out[1], out[1]));
    CHECK(weft_graph_gradients(g, y, 2, (weft_value[]){i0, x0}, gr) == WEFT_OK);
    weft_tensor *it = weft_tensor_scalar(1, WEFT_I64), *xt = f64v(X0, N), *o[2] = {0};
    // from i = 1: three iterations, x_n = 8 x0, y = sum(64 x0^2), dy/dx0 = 128 x0
    CHECK(weft_graph_run(g, 2, (weft_value[]){i0, x0}, (weft_tensor *[]){it, xt}, 2, gr, o, 0, NULL) == WEFT_OK);
    if (o[0]) CHECK_NEAR(weft_tensor_item(o[0]), 0, 0);
    if (o[1]) wt_check_values("128 x0", o[1], (double[]){128 * X0[0], 128 * X0[1], 128 * X0[2]}, N, 1e-12);
    weft_tensor *all[] = {four, one, it, xt, o[0], o[1]};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) weft_tensor_free(all[k]);
    weft_graph_free(g);
}

// cond(p, lim, x, w): then runs the loop (from i = 0) and returns the loss,
// else returns sum(x * w). The gradient cond differentiates the loop inside
// its branch copy.
static void test_loop_in_cond(void) {
    weft_graph *g = weft_graph_new(), *tg = weft_graph_new(), *eg = weft_graph_new();
    weft_value p = weft_graph_placeholder(g, "p", 0, NULL, WEFT_BOOL);
    weft_value lim = weft_graph_placeholder(g, "lim", 0, NULL, WEFT_F64);
    weft_value x = weft_graph_placeholder(g, "x", 1, VN, WEFT_F64);
    weft_value w = weft_graph_placeholder(g, "w", 1, VN, WEFT_F64);
    weft_value tl = weft_graph_placeholder(tg, "lim", 0, NULL, WEFT_F64);
    weft_value tx = weft_graph_placeholder(tg, "x", 1, VN, WEFT_F64);
    weft_value tw = weft_graph_placeholder(tg, "w", 1, VN, WEFT_F64);
    weft_value lo[4];
    CHECK(add_loop(tg, "inner", (weft_value[]){cst(tg, 0), tl, tx, tw}, lo, 0, false) == WEFT_OK);
    weft_value to = loss(tg, lo[2], lo[3]);
    weft_graph_placeholder(eg, "lim", 0, NULL, WEFT_F64);
    weft_value ex = weft_graph_placeholder(eg, "x", 1, VN, WEFT_F64);
    weft_value ew = weft_graph_placeholder(eg, "w", 1, VN, WEFT_F64);
    weft_value eo = sum_all(eg, op2(eg, "mul", ex, ew));
    weft_value y, gr[2];
    CHECK(weft_graph_cond(g, "branchy", p, 3, (weft_value[]){lim, x, w}, tg, &to, eg, &eo, 1, &y) == WEFT_OK);
    CHECK(weft_graph_gradients(g, y, 2, (weft_value[]){x, w}, gr) == WEFT_OK);
    for (int b = 0; b < 2; b++) {
        weft_tensor *pt = weft_tensor_scalar(b, WEFT_BOOL), *lt = weft_tensor_scalar(3, WEFT_F64);
        weft_tensor *xt = f64v(X0, N), *wt = f64v(W0, N), *o[2] = {0};
        CHECK(weft_graph_run(g, 4, (weft_value[]){p, lim, x, w}, (weft_tensor *[]){pt, lt, xt, wt}, 2, gr, o, 0,
                             NULL) == WEFT_OK);
        double gx[N] = {0}, gw[N] = {0}, rx[N], rw[N], ry;
        if (o[0]) weft_tensor_to_f64(o[0], gx, N);
        if (o[1]) weft_tensor_to_f64(o[1], gw, N);
        if (b) {
            eager_ref(3, rx, rw, &ry);
        } else {
            memcpy(rx, W0, sizeof rx);
            memcpy(rw, X0, sizeof rw);
        }
        for (int k = 0; k < N; k++) {
            CHECK_NEAR(gx[k], rx[k], 1e-10 * (1 + fabs(rx[k])));
            CHECK_NEAR(gw[k], rw[k], 1e-10 * (1 + fabs(rw[k])));
        }
        weft_tensor *all[] = {pt, lt, xt, wt, o[0], o[1]};
        for (size_t k = 0; k < sizeof all / sizeof *all; k++) weft_tensor_free(all[k]);
    }
    weft_graph_free(g);
}

// A loop whose body runs a loop: outer while j < 2: (j + 1, inner(x) with
// x <- x * w + sin(x) three times, w), i.e. the same map 6 times.
static void test_nested_loops(void) {
    weft_graph *g = weft_graph_new(), *cg = weft_graph_new(), *bg = weft_graph_new();
    weft_value j0 = weft_graph_placeholder(g, "j0", 0, NULL, WEFT_F64);
    weft_value x0 = weft_graph_placeholder(g, "x0", 1, VN, WEFT_F64);
    weft_value w = weft_graph_placeholder(g, "w", 1, VN, WEFT_F64);
    weft_value cj = weft_graph_placeholder(cg, "j", 0, NULL, WEFT_F64);
    weft_graph_placeholder(cg, "x", 1, VN, WEFT_F64);
    weft_graph_placeholder(cg, "w", 1, VN, WEFT_F64);
    weft_value pr = op2(cg, "lt", cj, cst(cg, 2));
    weft_value bj = weft_graph_placeholder(bg, "j", 0, NULL, WEFT_F64);
    weft_value bx = weft_graph_placeholder(bg, "x", 1, VN, WEFT_F64);
    weft_value bw = weft_graph_placeholder(bg, "w", 1, VN, WEFT_F64);
    weft_value io[4];
    CHECK(add_loop(bg, "inner", (weft_value[]){cst(bg, 0), cst(bg, 3), bx, bw}, io, 0, false) == WEFT_OK);
    weft_value bo[3] = {scal(bg, "add_scalar", bj, 1), io[2], io[3]}, out[3], gr[2];
    CHECK(weft_graph_while_loop(g, "outer", cg, pr, bg, bo, 3, (weft_value[]){j0, x0, w}, out, 0) == WEFT_OK);
    weft_value y = loss(g, out[1], out[2]);
    CHECK(weft_graph_gradients(g, y, 2, (weft_value[]){x0, w}, gr) == WEFT_OK);
    weft_tensor *jt = weft_tensor_scalar(0, WEFT_F64), *xt = f64v(X0, N), *wt = f64v(W0, N), *o[2] = {0};
    CHECK(weft_graph_run(g, 3, (weft_value[]){j0, x0, w}, (weft_tensor *[]){jt, xt, wt}, 2, gr, o, 0, NULL) ==
          WEFT_OK);
    double rx[N], rw[N], ry;
    eager_ref(6, rx, rw, &ry);
    if (o[0]) wt_check_values("nested dy/dx0", o[0], rx, N, 1e-10);
    if (o[1]) wt_check_values("nested dy/dw", o[1], rw, N, 1e-10);
    weft_tensor *all[] = {jt, xt, wt, o[0], o[1]};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) weft_tensor_free(all[k]);
    weft_graph_free(g);
}

// A body with a random op cannot be rerun by the gradient: a clear error
// naming the loop and the op, and the graph still runs forward.
static void test_impure_body(void) {
    weft_graph *g = weft_graph_new();
    weft_value i0 = weft_graph_placeholder(g, "i0", 0, NULL, WEFT_F64);
    weft_value lim = weft_graph_placeholder(g, "lim", 0, NULL, WEFT_F64);
    weft_value x0 = weft_graph_placeholder(g, "x0", 1, VN, WEFT_F64);
    weft_value w = weft_graph_placeholder(g, "w", 1, VN, WEFT_F64);
    weft_value out[4], gr[1];
    CHECK(add_loop(g, "rloop", (weft_value[]){i0, lim, x0, w}, out, 0, true) == WEFT_OK);
    weft_value y = loss(g, out[2], out[3]);
    CHECK(weft_graph_gradients(g, y, 1, &x0, gr) != WEFT_OK);
    CHECK(wt_error_has("'rloop'") && wt_error_has("'drop'") && wt_error_has("dropout"));
    weft_graph_free(g);
}

int main(void) {
    RUN(test_loop_grad_vs_references);
    RUN(test_loop_grad_max_iterations);
    RUN(test_int_counter);
    RUN(test_loop_in_cond);
    RUN(test_nested_loops);
    RUN(test_impure_body);
    return wt_summary();
}
