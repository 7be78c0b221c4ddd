// Horizontal fusion: three projections of one x (q, k, v) become one concat +
// one matmul + three slices; values match the separate matmuls; a traced
// forward+backward through the fused graph gives the unfused gradients; a
// member read before the group's last matmul, or viewed in a way a column
// slice cannot be, stays out.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

static int count_op(const weft_graph *g, const char *op) {
    int c = 0;
    for (int i = 0; i < weft_graph_node_count(g); i++) c += !strcmp(weft_graph_node_op(g, (weft_node_id){i}), op);
    return c;
}

static weft_value op1(weft_graph *g, const char *op, int n, const weft_value *in, const int64_t *ia, int nia) {
    return weft_graph_op1(g, op, n, in, ia, nia, NULL, 0);
}

// Tolerance: the fused product is one (M, K) @ (K, 3N) GEMM instead of three
// (M, K) @ (K, N) ones; every output element is still one K-term dot product
// of the same numbers, but BLAS may split / order that sum differently for a
// wider matrix, so results agree to rounding (~K * eps), not bit for bit.
#define TOL 1e-13

static void test_hfuse_builder(void) {
    const int64_t M = 6, K = 5, N = 4;
    weft_graph *g = weft_graph_new();
    weft_tensor *w[3], *wl = wt_rand64(WEFT_DIMS(3, K), -1, 1, 9, false);
    for (int i = 0; i < 3; i++) w[i] = wt_rand64(WEFT_DIMS(K, N + i), -1, 1, 1 + (uint64_t)i, false);
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(2, M, K), WEFT_F64), y[3], wv[3];
    for (int i = 0; i < 3; i++) {
        char nm[8];
        snprintf(nm, sizeof nm, "w%d", i);
        wv[i] = weft_graph_variable(g, nm, w[i]);
        y[i] = op1(g, "matmul", 2, (weft_value[]){x, wv[i]}, NULL, 0);
    }
    // a linear-style member with a transposed weight: other orientation, its own group (size 1: untouched)
    weft_value vl = weft_graph_variable(g, "wl", wl);
    weft_value tl = op1(g, "permute", 1, &vl, (int64_t[]){1, 0}, 2);
    weft_value yl = op1(g, "matmul", 2, (weft_value[]){x, tl}, NULL, 0);
    weft_value s01 = op1(g, "exp", 1, &y[0], NULL, 0);
    weft_value r2 = op1(g, "view", 1, &y[2], (int64_t[]){3, 2, M, N + 2}, 4); // rows regroup: allowed
    CHECK(r2.id >= 0 && s01.id >= 0);
    weft_value keep[5] = {y[0], y[1], r2, yl, s01}, kout[5];
    weft_graph_passes p = {.hfuse = true, .dce = true};
    weft_graph_pass_stats st;
    weft_graph *o = weft_graph_optimize(g, 5, keep, kout, &p, &st);
    CHECK(o != NULL);
    if (!o) return;
    CHECK(st.hfused == 3);
    CHECK(count_op(g, "matmul") == 4 && count_op(o, "matmul") == 2); // 3 -> 1, the linear one stays
    CHECK(count_op(o, "concat") == 1 && count_op(o, "slice") == 3);
    CHECK(st.nodes_after == st.nodes_before + 2); // +concat +fused matmul, 3 matmuls became 3 slices
    // the slices keep the matmuls' names
    CHECK(!strcmp(weft_graph_node_op(o, weft_graph_find_node(o, weft_graph_node_name(g, weft_graph_value_node(g, y[1])))),
                  "slice"));
    weft_tensor *xt = wt_rand64(WEFT_DIMS(2, M, K), -1, 1, 7, false), *a[5] = {0}, *b[5] = {0};
    weft_value ox = weft_graph_find_value(o, "x");
    CHECK(weft_graph_run(g, 1, &x, &xt, 5, keep, a, 0, NULL) == WEFT_OK);
    CHECK(weft_graph_run(o, 1, &ox, &xt, 5, kout, b, 0, NULL) == WEFT_OK);
    for (int i = 0; i < 5; i++) wt_check_same("hfuse vs unfused", b[i], a[i], TOL);
    for (int i = 0; i < 3; i++) { // and vs eager
        weft_tensor *e = weft_matmul(xt, w[i]);
        if (i < 2) wt_check_same("hfuse vs eager", b[i], e, TOL);
        weft_tensor_free(e);
    }
    for (int i = 0; i < 5; i++) weft_tensor_free(a[i]), weft_tensor_free(b[i]);
    weft_graph_free(o);

    // a reader of y0 before y2's matmul keeps y0 out (the group is y1, y2 when
    // emitted at y2; here y0 is read between the first two): build anew.
    weft_graph *h = weft_graph_new();
    weft_value hx = weft_graph_placeholder(h, "x", WEFT_DIMS(M, K), WEFT_F64), hw[3], hy[3], early = {-1};
    for (int i = 0; i < 3; i++) {
        char nm[8];
        snprintf(nm, sizeof nm, "w%d", i);
        weft_tensor *w2 = wt_rand64(WEFT_DIMS(K, N), -1, 1, 20 + (uint64_t)i, false);
        hw[i] = weft_graph_variable(h, nm, w2);
        weft_tensor_free(w2);
        hy[i] = op1(h, "matmul", 2, (weft_value[]){hx, hw[i]}, NULL, 0);
        if (i == 0) early = op1(h, "exp", 1, &hy[0], NULL, 0);
    }
    // y2 viewed as one flat vector: a column slice cannot be: y2 stays out too
    weft_value flat = op1(h, "view", 1, &hy[2], (int64_t[]){1, M * N}, 2);
    weft_value hk[4] = {early, hy[1], flat, hy[0]}, hko[4];
    o = weft_graph_optimize(h, 4, hk, hko, &p, &st);
    CHECK(o && st.hfused == 0 && count_op(o, "matmul") == 3);
    weft_graph_free(o);
    weft_graph_free(h);

    for (int i = 0; i < 3; i++) weft_tensor_free(w[i]);
    weft_tensor_free(wl);
    weft_tensor_free(xt);
    weft_graph_free(g);
}

// Linear-style members x @ transpose(W_i) without transpose folding: hfuse
// looks through the permutes, stacks the W_i (N_i, K) rows and uses trans_b.
static void test_hfuse_linear(void) {
    const int64_t M = 7, K = 6;
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(M, K), WEFT_F64), y[3];
    weft_tensor *w[3];
    for (int i = 0; i < 3; i++) {
        char nm[8];
        snprintf(nm, sizeof nm, "w%d", i);
        w[i] = wt_rand64(WEFT_DIMS(3 + i, K), -1, 1, 60 + (uint64_t)i, false);
        weft_value vw = weft_graph_variable(g, nm, w[i]);
        weft_value t = op1(g, "permute", 1, &vw, (int64_t[]){1, 0}, 2);
        y[i] = op1(g, "matmul", 2, (weft_value[]){x, t}, NULL, 0);
    }
    weft_value ko[3];
    weft_graph_passes p = {.hfuse = true, .dce = true};
    weft_graph_pass_stats st;
    weft_graph *o = weft_graph_optimize(g, 3, y, ko, &p, &st);
    CHECK(o && st.hfused == 3);
    if (o) {
        CHECK(count_op(o, "matmul") == 1 && count_op(o, "permute") == 0 && count_op(o, "concat") == 1);
        weft_tensor *xt = wt_rand64(WEFT_DIMS(M, K), -1, 1, 63, false), *a[3] = {0}, *b[3] = {0};
        weft_value ox = weft_graph_find_value(o, "x");
        CHECK(weft_graph_run(g, 1, &x, &xt, 3, y, a, 0, NULL) == WEFT_OK);
        CHECK(weft_graph_run(o, 1, &ox, &xt, 3, ko, b, 0, NULL) == WEFT_OK);
        for (int i = 0; i < 3; i++) {
            CHECK(b[i] && weft_tensor_sizes(b[i])[1] == 3 + i);
            wt_check_same("linear hfuse vs unfused", b[i], a[i], TOL);
            weft_tensor_free(a[i]), weft_tensor_free(b[i]);
        }
        weft_tensor_free(xt);
        weft_graph_free(o);
    }
    for (int i = 0; i < 3; i++) weft_tensor_free(w[i]);
    weft_graph_free(g);
}

// q, k, v linear projections (x @ W^T, as nn's linear traces them) of one x,
// forward and backward.
static weft_tensor *qkv_loss(weft_tensor *x, weft_tensor *const *w) {
    weft_tensor *p[3], *l = NULL;
    for (int i = 0; i < 3; i++) {
        weft_tensor *wt = weft_transpose(w[i], 0, 1);
        p[i] = weft_matmul(x, wt);
        weft_tensor_free(wt);
    }
    weft_tensor *qk = weft_mul(p[0], p[1]), *t = weft_tanh(p[2]), *s = weft_add(qk, t);
    l = weft_sum(s, 0, NULL, false);
    weft_tensor *ts[] = {p[0], p[1], p[2], qk, t, s};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
    return l;
}

static void test_hfuse_traced_grad(void) {
    const int64_t M = 16, C = 8;
    weft_tensor *w[3];
    for (int i = 0; i < 3; i++) w[i] = wt_rand64(WEFT_DIMS(C, C), -0.5, 0.5, 40 + (uint64_t)i, true);
    weft_tensor *x = wt_rand64(WEFT_DIMS(M, C), -1, 1, 44, true);
    weft_graph *g = weft_graph_new();
    weft_graph_trace_begin(g);
    weft_value vx = weft_graph_trace_input(g, x, "x");
    weft_tensor *l = qkv_loss(x, w);
    CHECK(weft_backward(l, NULL, NULL) == WEFT_OK);
    weft_value keep[5], k0[5], k1[5];
    keep[0] = weft_graph_trace_output(g, l);
    for (int i = 0; i < 3; i++) keep[1 + i] = weft_graph_trace_output(g, weft_tensor_grad(w[i]));
    keep[4] = weft_graph_trace_output(g, weft_tensor_grad(x));
    CHECK(weft_graph_trace_end(g) == WEFT_OK);
    weft_graph_passes base = weft_graph_passes_all(), fused = base;
    base.fusion = fused.fusion = false; // count matmul nodes: fusion would hide some inside fused epilogues
    fused.hfuse = true;
    weft_graph_pass_stats s0, s1;
    weft_graph *o0 = weft_graph_optimize(g, 5, keep, k0, &base, &s0);
    weft_graph *o1 = weft_graph_optimize(g, 5, keep, k1, &fused, &s1);
    CHECK(o0 && o1);
    if (!o0 || !o1) return;
    printf("traced qkv fwd+bwd: matmuls %d -> %d (hfused %d), nodes %d -> %d, concat %d\n", count_op(o0, "matmul"),
           count_op(o1, "matmul"), s1.hfused, s0.nodes_after, s1.nodes_after, count_op(o1, "concat"));
    CHECK(s1.hfused >= 3);
    CHECK(count_op(o1, "matmul") <= count_op(o0, "matmul") - 2);
    weft_tensor *x2 = wt_rand64(WEFT_DIMS(M, C), -1, 1, 45, false), *r0[5] = {0}, *r1[5] = {0};
    weft_value f0 = weft_graph_find_value(o0, "x"), f1 = weft_graph_find_value(o1, "x");
    CHECK(weft_graph_run(o0, 1, &f0, &x2, 5, k0, r0, 0, NULL) == WEFT_OK);
    CHECK(weft_graph_run(o1, 1, &f1, &x2, 5, k1, r1, 0, NULL) == WEFT_OK);
    for (int i = 0; i < 5; i++) {
        wt_check_same("fused grads vs unfused", r1[i], r0[i], TOL);
        weft_tensor_free(r0[i]);
        weft_tensor_free(r1[i]);
    }
    (void)vx;
    for (int i = 0; i < 3; i++) weft_tensor_free(w[i]);
    weft_tensor *ts[] = {x, l, x2};
    for (int i = 0; i < 3; i++) weft_tensor_free(ts[i]);
    weft_graph_free(o0);
    weft_graph_free(o1);
    weft_graph_free(g);
}

int main(void) {
    RUN(test_hfuse_builder);
    RUN(test_hfuse_linear);
    RUN(test_hfuse_traced_grad);
    return wt_summary();
}
