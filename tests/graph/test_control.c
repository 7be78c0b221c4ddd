// Control flow (weft_graph_cond, weft_graph_while_loop): the right branch runs
// (and only it: kernels counted), shape errors name the node, loops match
// closed forms, gradients through cond match finite differences.
#include <stdlib.h>
#include <string.h>

#include "../../src/ops/op.h"
#include "../weft_test.h"
#include "graph_test.h"

static weft_kernel saved_exp;
static int exp_calls;
static weft_status count_exp(const weft_op_args *a) {
    exp_calls++;
    return saved_exp.fn(a);
}
static void count_exp_kernel(bool on) {
    if (on) saved_exp = weft_op_find("exp")->kernel[WEFT_CPU];
    weft_op_register_kernel("exp", WEFT_CPU, on ? count_exp : saved_exp.fn, saved_exp.dtypes);
}

static weft_tensor *f64v(const double *v, int n) { return weft_tensor_from_data(v, 1, (int64_t[]){n}, WEFT_F64); }
static weft_tensor *boolt(bool b) { return weft_tensor_scalar(b, WEFT_BOOL); }

// out = p ? 2 a : exp(a)
static weft_graph *cond_graph(weft_value *p, weft_value *a, weft_value *out) {
    weft_graph *g = weft_graph_new(), *tg = weft_graph_new(), *eg = weft_graph_new();
    *p = weft_graph_placeholder(g, "p", 0, NULL, WEFT_BOOL);
    *a = weft_graph_placeholder(g, "a", 1, (int64_t[]){3}, WEFT_F64);
    weft_value ta = weft_graph_placeholder(tg, "in0", 1, (int64_t[]){3}, WEFT_F64);
    weft_value to = scal(tg, "mul_scalar", ta, 2.0);
    weft_value ea = weft_graph_placeholder(eg, "in0", 1, (int64_t[]){3}, WEFT_F64);
    weft_value eo = op1(eg, "exp", ea);
    CHECK(weft_graph_cond(g, "pick", *p, 1, a, tg, &to, eg, &eo, 1, out) == WEFT_OK);
    return g;
}

static void test_cond_picks_branch(void) {
    weft_value p, a, o;
    weft_graph *g = cond_graph(&p, &a, &o);
    CHECK(weft_graph_node_kind(g, weft_graph_find_node(g, "pick")) == WEFT_NODE_COND);
    CHECK(!strcmp(weft_graph_node_op(g, weft_graph_find_node(g, "pick")), "cond"));
    double av[3] = {0.5, -1, 2};
    weft_tensor *at = f64v(av, 3);
    count_exp_kernel(true);
    for (int b = 1; b >= 0; b--) {
        weft_tensor *pt = boolt(b), *out = NULL;
        exp_calls = 0;
        CHECK(weft_graph_run(g, 2, (weft_value[]){p, a}, (weft_tensor *[]){pt, at}, 1, &o, &out, 0, NULL) == WEFT_OK);
        double ref[3];
        for (int i = 0; i < 3; i++) ref[i] = b ? 2 * av[i] : exp(av[i]);
        if (out) wt_check_values(b ? "then" : "else", out, ref, 3, 1e-12);
        CHECK(exp_calls == (b ? 0 : 1)); // the other branch's kernels do not run
        weft_tensor_free(out);
        weft_tensor_free(pt);
    }
    count_exp_kernel(false);
    // a numeric predicate (nonzero is true)
    weft_graph_free(g);
    weft_tensor_free(at);
}

static void test_cond_errors(void) {
    weft_graph *g = weft_graph_new(), *tg = weft_graph_new(), *eg = weft_graph_new();
    weft_value p = weft_graph_placeholder(g, "p", 0, NULL, WEFT_F64);
    weft_value a = weft_graph_placeholder(g, "a", 1, (int64_t[]){3}, WEFT_F64);
    weft_value ta = weft_graph_placeholder(tg, NULL, 1, (int64_t[]){3}, WEFT_F64);
    weft_value to = op1(tg, "neg", ta);
    weft_value ea = weft_graph_placeholder(eg, NULL, 1, (int64_t[]){3}, WEFT_F64);
    weft_value eo = sum_all(eg, ea); // () instead of (3)
    weft_value o;
    CHECK(weft_graph_cond(g, "bad_cond", p, 1, &a, tg, &to, eg, &eo, 1, &o) != WEFT_OK);
    CHECK(wt_error_has("bad_cond") && wt_error_has("output 0"));
    // placeholders must match the inputs
    weft_value ev = op1(eg, "neg", ea);
    weft_value b2 = weft_graph_placeholder(g, "b2", 1, (int64_t[]){4}, WEFT_F64);
    CHECK(weft_graph_cond(g, "c2", p, 1, &b2, tg, &to, eg, &ev, 1, &o) != WEFT_OK && wt_error_has("c2"));
    CHECK(weft_graph_cond(g, "c3", p, 0, NULL, tg, &to, eg, &ev, 1, &o) != WEFT_OK && wt_error_has("placeholders"));
    CHECK(weft_graph_cond(g, "c4", a, 1, &a, tg, &to, eg, &ev, 1, &o) != WEFT_OK && wt_error_has("one element"));
    CHECK(weft_graph_cond(g, "c5", p, 1, &a, tg, &to, tg, &to, 1, &o) != WEFT_OK);
    CHECK(weft_graph_cond(g, "c6", p, 1, &a, NULL, &to, eg, &ev, 1, &o) != WEFT_OK);
    // a good one with a numeric predicate; g now owns tg and eg
    CHECK(weft_graph_cond(g, "ok", p, 1, &a, tg, &to, eg, &ev, 1, &o) == WEFT_OK);
    weft_tensor *pt = weft_tensor_scalar(0.0, WEFT_F64), *at = f64v((double[]){1, 2, 3}, 3), *out = NULL;
    CHECK(weft_graph_run(g, 2, (weft_value[]){p, a}, (weft_tensor *[]){pt, at}, 1, &o, &out, 0, NULL) == WEFT_OK);
    if (out) wt_check_values("numeric pred", out, (double[]){-1, -2, -3}, 3, 0);
    weft_tensor_free(out);
    // control flow is saved (round trips: tests/graph/test_serialize_control.c); DOT draws it
    CHECK(weft_graph_save(g, "/tmp/weft_test_control.wgraph") == WEFT_OK);
    remove("/tmp/weft_test_control.wgraph");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(weft_graph_write_dot(g, f) == WEFT_OK);
    fclose(f);
    CHECK(buf && strstr(buf, "ok\\ncond") && strstr(buf, "diamond"));
    free(buf);
    weft_tensor_free(pt);
    weft_tensor_free(at);
    weft_graph_free(g);
}

// (i, x) -> while i < n: (i + 1, x * c)
static weft_graph *loop_graph(double n, double c, int64_t max_it, weft_value *i0, weft_value *x0, weft_value *out) {
    weft_graph *g = weft_graph_new(), *cg = weft_graph_new(), *bg = weft_graph_new();
    *i0 = weft_graph_placeholder(g, "i0", 0, NULL, WEFT_F64);
    *x0 = weft_graph_placeholder(g, "x0", 1, (int64_t[]){2}, WEFT_F64);
    weft_value ci = weft_graph_placeholder(cg, "i", 0, NULL, WEFT_F64);
    weft_graph_placeholder(cg, "x", 1, (int64_t[]){2}, WEFT_F64);
    weft_value pr = op2(cg, "lt", ci, cst(cg, n));
    weft_value bi = weft_graph_placeholder(bg, "i", 0, NULL, WEFT_F64);
    weft_value bx = weft_graph_placeholder(bg, "x", 1, (int64_t[]){2}, WEFT_F64);
    weft_value bo[2] = {scal(bg, "add_scalar", bi, 1.0), scal(bg, "mul_scalar", bx, c)};
    CHECK(weft_graph_while_loop(g, "loop", cg, pr, bg, bo, 2, (weft_value[]){*i0, *x0}, out, max_it) == WEFT_OK);
    return g;
}

static void test_while_loop(void) {
    weft_value i0, x0, o[2];
    weft_graph *g = loop_graph(5, 2.0, 100, &i0, &x0, o);
    weft_tensor *it = weft_tensor_scalar(0, WEFT_F64), *xt = f64v((double[]){1, -3}, 2), *out[2] = {0};
    CHECK(weft_graph_run(g, 2, (weft_value[]){i0, x0}, (weft_tensor *[]){it, xt}, 2, o, out, 0, NULL) == WEFT_OK);
    if (out[0]) CHECK_NEAR(weft_tensor_item(out[0]), 5, 0);
    if (out[1]) wt_check_values("2^5 x", out[1], (double[]){32, -96}, 2, 0);
    weft_tensor_free(out[0]);
    weft_tensor_free(out[1]);
    // start past the bound: zero iterations, the inputs come back
    weft_tensor *it7 = weft_tensor_scalar(7, WEFT_F64);
    CHECK(weft_graph_run(g, 2, (weft_value[]){i0, x0}, (weft_tensor *[]){it7, xt}, 2, o, out, 0, NULL) == WEFT_OK);
    if (out[1]) wt_check_values("0 iterations", out[1], (double[]){1, -3}, 2, 0);
    CHECK(out[1] && !weft_tensor_shares_storage(out[1], xt));
    weft_tensor_free(out[0]);
    weft_tensor_free(out[1]);
    weft_tensor_free(it7);
    // gradient of while_loop (tests/graph/test_while_grad.c has the rest): d sum(2^5 x)/dx = 32
    weft_value s = sum_all(g, o[1]), gx;
    CHECK(weft_graph_gradients(g, s, 1, &x0, &gx) == WEFT_OK);
    weft_tensor *gxt = NULL;
    CHECK(weft_graph_run(g, 2, (weft_value[]){i0, x0}, (weft_tensor *[]){it, xt}, 1, &gx, &gxt, 0, NULL) == WEFT_OK);
    if (gxt) wt_check_values("d 2^5 x / dx", gxt, (double[]){32, 32}, 2, 0);
    weft_tensor_free(gxt);
    weft_graph_free(g);

    // max_iterations exceeded
    g = loop_graph(5, 2.0, 3, &i0, &x0, o);
    CHECK(weft_graph_run(g, 2, (weft_value[]){i0, x0}, (weft_tensor *[]){it, xt}, 2, o, out, 0, NULL) != WEFT_OK);
    CHECK(wt_error_has("loop") && wt_error_has("max_iterations"));
    CHECK(out[0] == NULL && out[1] == NULL);
    weft_graph_free(g);
    // body shape mismatch is a build error naming the node
    weft_graph *g2 = weft_graph_new(), *cg = weft_graph_new(), *bg = weft_graph_new();
    weft_value v = weft_graph_placeholder(g2, "v", 1, (int64_t[]){2}, WEFT_F64);
    weft_value cv = weft_graph_placeholder(cg, NULL, 1, (int64_t[]){2}, WEFT_F64);
    weft_value cp = sum_all(cg, cv);
    weft_value bv = weft_graph_placeholder(bg, NULL, 1, (int64_t[]){2}, WEFT_F64);
    weft_value bs = sum_all(bg, bv), lo;
    CHECK(weft_graph_while_loop(g2, "badloop", cg, cp, bg, &bs, 1, &v, &lo, 10) != WEFT_OK &&
          wt_error_has("badloop"));
    weft_graph_free(cg);
    weft_graph_free(bg);
    weft_graph_free(g2);
    weft_tensor_free(it);
    weft_tensor_free(xt);
}

// y = 3 * cond(p, x, w) with then: sum(sin(x) * w), else: sum(x * x * w) + sum(w).
static void test_cond_gradients(void) {
    weft_graph *g = weft_graph_new(), *tg = weft_graph_new(), *eg = weft_graph_new();
    weft_value p = weft_graph_placeholder(g, "p", 0, NULL, WEFT_BOOL);
    weft_value x = weft_graph_placeholder(g, "x", 1, (int64_t[]){3}, WEFT_F64);
    weft_value w = weft_graph_placeholder(g, "w", 1, (int64_t[]){3}, WEFT_F64);
    weft_value tx = weft_graph_placeholder(tg, "x", 1, (int64_t[]){3}, WEFT_F64);
    weft_value tw = weft_graph_placeholder(tg, "w", 1, (int64_t[]){3}, WEFT_F64);
    weft_value to = sum_all(tg, op2(tg, "mul", op1(tg, "sin", tx), tw));
    weft_value ex = weft_graph_placeholder(eg, "x", 1, (int64_t[]){3}, WEFT_F64);
    weft_value ew = weft_graph_placeholder(eg, "w", 1, (int64_t[]){3}, WEFT_F64);
    weft_value eo = op2(eg, "add", sum_all(eg, op2(eg, "mul", op2(eg, "mul", ex, ex), ew)), sum_all(eg, ew));
    weft_value c;
    CHECK(weft_graph_cond(g, "branchy", p, 2, (weft_value[]){x, w}, tg, &to, eg, &eo, 1, &c) == WEFT_OK);
    weft_value y = scal(g, "mul_scalar", c, 3.0);
    weft_value gr[2];
    CHECK(weft_graph_gradients(g, y, 2, (weft_value[]){x, w}, gr) == WEFT_OK);
    CHECK(weft_graph_find_node(g, "branchy_grad").id >= 0);
    double xd[3] = {0.3, -0.7, 1.1}, wd[3] = {0.5, 2.0, -1.5};
    for (int b = 0; b < 2; b++) {
        weft_tensor *pt = boolt(b), *out[2] = {0};
        weft_tensor *xt = f64v(xd, 3), *wt = f64v(wd, 3);
        CHECK(weft_graph_run(g, 3, (weft_value[]){p, x, w}, (weft_tensor *[]){pt, xt, wt}, 2, gr, out, 0, NULL) ==
              WEFT_OK);
        double ga[6] = {0};
        if (out[0]) weft_tensor_to_f64(out[0], ga, 3);
        if (out[1]) weft_tensor_to_f64(out[1], ga + 3, 3);
        // closed form and central differences
        for (int k = 0; k < 3; k++) {
            double rx = b ? 3 * cos(xd[k]) * wd[k] : 3 * 2 * xd[k] * wd[k];
            double rw = b ? 3 * sin(xd[k]) : 3 * (xd[k] * xd[k] + 1);
            CHECK_NEAR(ga[k], rx, 1e-12);
            CHECK_NEAR(ga[3 + k], rw, 1e-12);
        }
        const double h = 1e-6;
        for (int k = 0; k < 6; k++) {
            double *d = k < 3 ? xd : wd, keep = d[k % 3], f[2];
            for (int s = 0; s < 2; s++) {
                d[k % 3] = keep + (s ? -h : h);
                weft_tensor *fx = f64v(xd, 3), *fw = f64v(wd, 3), *yo = NULL;
                CHECK(weft_graph_run(g, 3, (weft_value[]){p, x, w}, (weft_tensor *[]){pt, fx, fw}, 1, &y, &yo, 0,
                                     NULL) == WEFT_OK);
                f[s] = yo ? weft_tensor_item(yo) : 0;
                weft_tensor_free(yo);
                weft_tensor_free(fx);
                weft_tensor_free(fw);
            }
            d[k % 3] = keep;
            CHECK_NEAR(ga[k], (f[0] - f[1]) / (2 * h), 1e-6);
        }
        weft_tensor_free(out[0]);
        weft_tensor_free(out[1]);
        weft_tensor_free(pt);
        weft_tensor_free(xt);
        weft_tensor_free(wt);
    }
    weft_graph_free(g);
}

// cond and while inside a larger graph run with the memory plan on; a branch
// that returns its input unchanged must not alias the arena.
static void test_control_in_planned_graph(void) {
    weft_graph *g = weft_graph_new(), *tg = weft_graph_new(), *eg = weft_graph_new();
    weft_graph *cg = weft_graph_new(), *bg = weft_graph_new();
    weft_value p = weft_graph_placeholder(g, "p", 0, NULL, WEFT_BOOL);
    weft_value x = weft_graph_placeholder(g, "x", 1, (int64_t[]){4}, WEFT_F64);
    weft_value a = scal(g, "mul_scalar", x, 2.0); // an arena intermediate
    weft_value ta = weft_graph_placeholder(tg, "a", 1, (int64_t[]){4}, WEFT_F64); // then: identity
    weft_value ea = weft_graph_placeholder(eg, "a", 1, (int64_t[]){4}, WEFT_F64);
    weft_value eo = scal(eg, "add_scalar", ea, 1.0);
    weft_value c;
    CHECK(weft_graph_cond(g, "c", p, 1, &a, tg, &ta, eg, &eo, 1, &c) == WEFT_OK);
    weft_value d = scal(g, "add_scalar", x, 10.0); // may reuse a's bytes
    weft_value e = op2(g, "add", c, d);
    // while sum(v) < 1000: v = v * 3
    weft_value cv = weft_graph_placeholder(cg, "v", 1, (int64_t[]){4}, WEFT_F64);
    weft_value cp = op2(cg, "lt", sum_all(cg, cv), cst(cg, 1000));
    weft_value bv = weft_graph_placeholder(bg, "v", 1, (int64_t[]){4}, WEFT_F64);
    weft_value bo = scal(bg, "mul_scalar", bv, 3.0);
    weft_value l;
    CHECK(weft_graph_while_loop(g, "w", cg, cp, bg, &bo, 1, &e, &l, 0) == WEFT_OK);
    weft_value fin = scal(g, "mul_scalar", l, 0.5);
    double xd[4] = {1, 2, 3, 4};
    weft_graph_run_options opt = {.memory_plan = 1};
    for (int b = 0; b < 2; b++) {
        weft_tensor *pt = boolt(b), *xt = f64v(xd, 4), *out[2] = {0};
        CHECK(weft_graph_run_ex(g, 2, (weft_value[]){p, x}, (weft_tensor *[]){pt, xt}, 2, (weft_value[]){fin, c}, out,
                                0, NULL, &opt) == WEFT_OK);
        CHECK(weft_graph_last_run_stats(g).planned);
        double ev[4], s = 0, ref[4], cref[4];
        for (int i = 0; i < 4; i++) {
            cref[i] = b ? 2 * xd[i] : 2 * xd[i] + 1;
            ev[i] = cref[i] + xd[i] + 10;
            s += ev[i];
        }
        double f = 1;
        while (s * f < 1000) f *= 3;
        for (int i = 0; i < 4; i++) ref[i] = 0.5 * ev[i] * f;
        if (out[0]) wt_check_values("planned", out[0], ref, 4, 1e-12);
        if (out[1]) wt_check_values("cond out", out[1], cref, 4, 1e-12);
        weft_tensor_free(out[0]);
        weft_tensor_free(out[1]);
        weft_tensor_free(pt);
        weft_tensor_free(xt);
    }
    // the passes leave the control nodes alone (the optimised graph computes the same)
    weft_value keep[1] = {fin}, kout[1];
    weft_graph *og = weft_graph_optimize(g, 1, keep, kout, NULL, NULL);
    CHECK(og != NULL);
    if (og) {
        CHECK(weft_graph_node_kind(og, weft_graph_find_node(og, "c")) == WEFT_NODE_COND);
        CHECK(weft_graph_node_kind(og, weft_graph_find_node(og, "w")) == WEFT_NODE_WHILE);
        weft_tensor *pt = boolt(true), *xt = f64v(xd, 4), *o1 = NULL, *o2 = NULL;
        weft_value op = weft_graph_find_value(og, "p"), ox = weft_graph_find_value(og, "x");
        CHECK(weft_graph_run(og, 2, (weft_value[]){op, ox}, (weft_tensor *[]){pt, xt}, 1, kout, &o1, 0, NULL) ==
              WEFT_OK);
        CHECK(weft_graph_run(g, 2, (weft_value[]){p, x}, (weft_tensor *[]){pt, xt}, 1, &fin, &o2, 0, NULL) == WEFT_OK);
        if (o1 && o2) wt_check_same("optimized", o1, o2, 0);
        weft_tensor_free(o1);
        weft_tensor_free(o2);
        weft_tensor_free(pt);
        weft_tensor_free(xt);
        weft_graph_free(og);
    }
    weft_graph_free(g);
}

int main(void) {
    RUN(test_cond_picks_branch);
    RUN(test_cond_errors);
    RUN(test_while_loop);
    RUN(test_cond_gradients);
    RUN(test_control_in_planned_graph);
    return wt_summary();
}
