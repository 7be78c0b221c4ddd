// Matmul trans_a / trans_b attrs and the transpose_fold pass: the four flag
// combinations against a naive loop (2-D and batched), gradients with flags
// against finite differences (f64), the pass on builder graphs (node counts,
// values vs the unrewritten graph and eager), a traced linear layer
// forward+backward, and a graph file round trip with flags.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "weft_test.h"

static int count_op(const weft_graph *g, const char *op) {
    int c = 0;
    for (int i = 0; i < weft_graph_node_count(g); i++) c += !strcmp(weft_graph_node_op(g, (weft_node_id){i}), op);
    return c;
}

// A random matrix (batch 0: 2-D; else (batch, ., .)) stored (r, c) when tr, else (c, r).
static weft_tensor *rnd(int tr, int64_t batch, int64_t r, int64_t c, uint64_t seed, bool rg) {
    int64_t sz[3] = {batch, tr ? r : c, tr ? c : r};
    return batch ? wt_rand64(3, sz, -1, 1, seed, rg) : wt_rand64(2, sz + 1, -1, 1, seed, rg);
}

static weft_tensor *mm_flags(weft_tensor *a, weft_tensor *b, int ta, int tb) {
    weft_attrs at = {.i = {ta, tb}};
    return weft_op_apply1(weft_op_find("matmul"), 2, (weft_tensor *[]){a, b}, &at);
}

// C[bt] = op(A[bt or 0]) @ op(B[bt or 0]); A stored (nba, ra, ca), B (nbb, rb, cb).
static void naive(const double *A, int nba, int ra, int ca, const double *B, int nbb, int rb, int cb, int ta, int tb,
                  double *C, int nbatch) {
    int M = ta ? ca : ra, K = ta ? ra : ca, N = tb ? rb : cb;
    for (int t = 0; t < nbatch; t++) {
        const double *a = A + (nba > 1 ? t : 0) * ra * ca, *b = B + (nbb > 1 ? t : 0) * rb * cb;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0;
                for (int k = 0; k < K; k++)
                    s += (ta ? a[k * ca + i] : a[i * ca + k]) * (tb ? b[j * cb + k] : b[k * cb + j]);
                C[(t * M + i) * N + j] = s;
            }
    }
}

static void test_flags_vs_naive(void) {
    const int M = 5, K = 7, N = 3;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            // 2-D
            weft_tensor *a = rnd(ta, 0, K, M, 1 + ta, false);
            weft_tensor *b = rnd(tb, 0, N, K, 3 + tb, false);
            double av[64], bv[64], ref[64];
            weft_tensor_to_f64(a, av, M * K);
            weft_tensor_to_f64(b, bv, K * N);
            naive(av, 1, (int)a->sizes[0], (int)a->sizes[1], bv, 1, (int)b->sizes[0], (int)b->sizes[1], ta, tb, ref, 1);
            weft_tensor *c = mm_flags(a, b, ta, tb);
            CHECK(c && c->ndim == 2 && c->sizes[0] == M && c->sizes[1] == N);
            if (c) wt_check_values("matmul flags 2-D", c, ref, M * N, 1e-13);
            // batched a (2, ., .) with a shared 2-D b, and both batched
            weft_tensor *a3 = rnd(ta, 2, K, M, 5 + ta, false);
            weft_tensor *b3 = rnd(tb, 2, N, K, 7 + tb, false);
            double a3v[128], b3v[128], r3[128];
            weft_tensor_to_f64(a3, a3v, 2 * M * K);
            weft_tensor_to_f64(b3, b3v, 2 * K * N);
            naive(a3v, 2, (int)a3->sizes[1], (int)a3->sizes[2], bv, 1, (int)b->sizes[0], (int)b->sizes[1], ta, tb, r3, 2);
            weft_tensor *c3 = mm_flags(a3, b, ta, tb);
            CHECK(c3 && c3->ndim == 3);
            if (c3) wt_check_values("matmul flags batched a", c3, r3, 2 * M * N, 1e-13);
            naive(a3v, 2, (int)a3->sizes[1], (int)a3->sizes[2], b3v, 2, (int)b3->sizes[1], (int)b3->sizes[2], ta, tb,
                  r3, 2);
            weft_tensor *c33 = mm_flags(a3, b3, ta, tb);
            if (c33) wt_check_values("matmul flags batched both", c33, r3, 2 * M * N, 1e-13);
            CHECK(c33 != NULL);
            // a flagged transposed view is the plain matrix again
            weft_tensor *at = weft_transpose(a, 0, 1), *c2 = mm_flags(at, b, !ta, tb);
            if (c2) wt_check_values("flagged view", c2, ref, M * N, 1e-13);
            weft_tensor *ts[] = {a, b, c, a3, b3, c3, c33, at, c2};
            for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) weft_tensor_free(ts[i]);
        }
    // errors: bad flag values and mismatched K name the op
    weft_tensor *a = wt_rand64(WEFT_DIMS(2, 3), -1, 1, 9, false), *b = wt_rand64(WEFT_DIMS(2, 3), -1, 1, 10, false);
    CHECK(mm_flags(a, b, 0, 0) == NULL && wt_error_has("matmul"));
    CHECK(mm_flags(a, b, 2, 0) == NULL && wt_error_has("matmul") && wt_error_has("trans"));
    weft_tensor *ok = mm_flags(a, b, 1, 0); // (3,2)@(2,3)
    CHECK(ok && ok->sizes[0] == 3 && ok->sizes[1] == 3);
    weft_tensor_free(ok);
    weft_tensor_free(a);
    weft_tensor_free(b);
}

typedef struct flags {
    int ta, tb;
} flags;
static weft_tensor *fn_flags(weft_tensor *const *in, void *user) {
    flags *f = user;
    return mm_flags(in[0], in[1], f->ta, f->tb);
}

static void test_grad_flags(void) {
    const int M = 3, K = 4, N = 2;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            flags f = {ta, tb};
            weft_tensor *a = rnd(ta, 0, K, M, 11 + ta, true);
            weft_tensor *b = rnd(tb, 0, N, K, 13 + tb, true);
            CHECK_GRAD(fn_flags, 2, ((weft_tensor *[]){a, b}), &f);
            // batched a with a shared 2-D b (the folded-rows backward path), and both batched (broadcast a)
            weft_tensor *a3 = rnd(ta, 2, K, M, 15 + ta, true);
            CHECK_GRAD(fn_flags, 2, ((weft_tensor *[]){a3, b}), &f);
            weft_tensor *b3 = rnd(tb, 2, N, K, 17 + tb, true);
            CHECK_GRAD(fn_flags, 2, ((weft_tensor *[]){a, b3}), &f);
            weft_tensor *ts[] = {a, b, a3, b3};
            for (size_t i = 0; i < 4; i++) weft_tensor_free(ts[i]);
        }
}

static weft_value op1(weft_graph *g, const char *op, int n, const weft_value *in, const int64_t *ia, int nia) {
    return weft_graph_op1(g, op, n, in, ia, nia, NULL, 0);
}

// y1 = x @ transpose(W) (a linear layer), y2 = contiguous(transpose(A)) @ B.
static void test_fold_builder(void) {
    weft_graph *g = weft_graph_new();
    weft_tensor *w0 = wt_rand64(WEFT_DIMS(3, 5), -1, 1, 21, false);
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(4, 5), WEFT_F64);
    weft_value A = weft_graph_placeholder(g, "A", WEFT_DIMS(6, 4), WEFT_F64);
    weft_value B = weft_graph_placeholder(g, "B", WEFT_DIMS(6, 2), WEFT_F64);
    weft_value W = weft_graph_variable(g, "W", w0);
    weft_value wt = op1(g, "permute", 1, &W, (int64_t[]){1, 0}, 2);
    weft_value y1 = op1(g, "matmul", 2, (weft_value[]){x, wt}, NULL, 0);
    weft_value at = op1(g, "permute", 1, &A, (int64_t[]){1, 0}, 2);
    weft_value ac = op1(g, "copy", 1, &at, NULL, 0);
    weft_value y2 = op1(g, "matmul", 2, (weft_value[]){ac, B}, NULL, 0);
    // a permute of a 3-D value that is not a last-two swap stays
    weft_value P = weft_graph_placeholder(g, "P", WEFT_DIMS(2, 3, 4), WEFT_F64);
    weft_value pp = op1(g, "permute", 1, &P, (int64_t[]){1, 0, 2}, 3);
    weft_value y3 = op1(g, "matmul", 2, (weft_value[]){pp, y1}, NULL, 0); // (3,2,4)@(4,3)
    CHECK(y3.id >= 0);
    CHECK(weft_graph_node_count(g) == 12);
    weft_value keep[3] = {y1, y2, y3}, kout[3];
    weft_graph_passes p = {.transpose_fold = true, .dce = true};
    weft_graph_pass_stats st;
    weft_graph *o = weft_graph_optimize(g, 3, keep, kout, &p, &st);
    CHECK(o != NULL);
    if (!o) return;
    CHECK(st.transposes_folded == 2);
    CHECK(count_op(g, "permute") == 3 && count_op(o, "permute") == 1); // the 3-D one stays
    CHECK(count_op(g, "copy") == 1 && count_op(o, "copy") == 0);       // the real copy is gone
    CHECK(count_op(o, "matmul") == 3);
    CHECK(st.nodes_before == 12 && st.nodes_after == 9);
    // the folded nodes keep their names and carry the flags
    weft_tensor *xt = wt_rand64(WEFT_DIMS(4, 5), -1, 1, 22, false), *At = wt_rand64(WEFT_DIMS(6, 4), -1, 1, 23, false);
    weft_tensor *Bt = wt_rand64(WEFT_DIMS(6, 2), -1, 1, 24, false), *Pt = wt_rand64(WEFT_DIMS(2, 3, 4), -1, 1, 25, false);
    weft_value fin[4] = {x, A, B, P}, fout[4];
    for (int i = 0; i < 4; i++) fout[i] = weft_graph_find_value(o, weft_graph_node_name(g, weft_graph_value_node(g, fin[i])));
    weft_tensor *feeds[4] = {xt, At, Bt, Pt}, *r0[3] = {0}, *r1[3] = {0};
    CHECK(weft_graph_run(g, 4, fin, feeds, 3, keep, r0, 0, NULL) == WEFT_OK);
    CHECK(weft_graph_run(o, 4, fout, feeds, 3, kout, r1, 0, NULL) == WEFT_OK);
    // y1: the same BLAS call (Trans on W) as before: identical. y2 reads A
    // with Trans instead of a contiguous copy: the same sums, BLAS may order
    // them differently.
    wt_check_same("fold y1 vs unrewritten", r1[0], r0[0], 0);
    wt_check_same("fold y2 vs unrewritten", r1[1], r0[1], 1e-14);
    wt_check_same("fold y3 vs unrewritten", r1[2], r0[2], 1e-14);
    // eager
    weft_tensor *e_wt = weft_transpose(w0, 0, 1), *e1 = weft_matmul(xt, e_wt);
    weft_tensor *e_at = weft_transpose(At, 0, 1), *e_ac = weft_tensor_contiguous(e_at), *e2 = weft_matmul(e_ac, Bt);
    wt_check_same("fold y1 vs eager", r1[0], e1, 1e-14);
    wt_check_same("fold y2 vs eager", r1[1], e2, 1e-14);
    // idempotent: nothing more to fold
    weft_value k2[3];
    weft_graph *o2 = weft_graph_optimize(o, 3, kout, k2, &p, &st);
    CHECK(o2 && st.transposes_folded == 0 && weft_graph_node_count(o2) == weft_graph_node_count(o));
    // a flagged graph survives a save/load round trip (attrs are stored generically)
    const char *path = "test_pass_transpose.wgraph";
    CHECK(weft_graph_save(o, path) == WEFT_OK);
    weft_graph *l = weft_graph_load(path);
    CHECK(l != NULL);
    if (l) {
        weft_value lf[4], lk[3];
        for (int i = 0; i < 4; i++) lf[i] = weft_graph_find_value(l, weft_graph_node_name(o, weft_graph_value_node(o, fout[i])));
        for (int i = 0; i < 3; i++) lk[i] = weft_graph_find_value(l, weft_graph_node_name(o, weft_graph_value_node(o, kout[i])));
        weft_tensor *r2[3] = {0};
        CHECK(weft_graph_run(l, 4, lf, feeds, 3, lk, r2, 0, NULL) == WEFT_OK);
        for (int i = 0; i < 3; i++) {
            wt_check_same("loaded flagged graph", r2[i], r1[i], 0);
            weft_tensor_free(r2[i]);
        }
        weft_graph_free(l);
    }
    remove(path);
    for (int i = 0; i < 3; i++) weft_tensor_free(r0[i]), weft_tensor_free(r1[i]);
    weft_tensor *ts[] = {w0, xt, At, Bt, Pt, e_wt, e1, e_at, e_ac, e2};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) weft_tensor_free(ts[i]);
    weft_graph_free(o2);
    weft_graph_free(o);
    weft_graph_free(g);
}

// A traced linear layer + transposed attention-like product, forward and
// backward: fewer permutes, the same loss and gradients as the trace and eager.
static weft_tensor *loss_fn(weft_tensor *x, weft_tensor *w, weft_tensor *v) {
    weft_tensor *wt = weft_transpose(w, 0, 1), *h = weft_matmul(x, wt), *t = weft_tanh(h);
    weft_tensor *tt = weft_transpose(t, 0, 1), *tc = weft_tensor_contiguous(tt), *s = weft_matmul(tc, v);
    weft_tensor *l = weft_sum(s, 0, NULL, false);
    weft_tensor *ts[] = {wt, h, t, tt, tc, s};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
    return l;
}

static void test_fold_traced(void) {
    weft_tensor *w = wt_rand64(WEFT_DIMS(6, 5), -1, 1, 31, true), *v = wt_rand64(WEFT_DIMS(8, 3), -1, 1, 32, true);
    weft_tensor *x = wt_rand64(WEFT_DIMS(8, 5), -1, 1, 33, false);
    weft_graph *g = weft_graph_new();
    weft_graph_trace_begin(g);
    weft_value vx = weft_graph_trace_input(g, x, "x");
    weft_tensor *l = loss_fn(x, w, v);
    CHECK(weft_backward(l, NULL, NULL) == WEFT_OK);
    weft_value keep[3] = {weft_graph_trace_output(g, l), weft_graph_trace_output(g, weft_tensor_grad(w)),
                          weft_graph_trace_output(g, weft_tensor_grad(v))},
               k0[3], k1[3];
    CHECK(weft_graph_trace_end(g) == WEFT_OK);
    weft_graph_passes base = weft_graph_passes_all(), fold = base;
    base.transpose_fold = false;
    weft_graph_pass_stats s0, s1;
    weft_graph *o0 = weft_graph_optimize(g, 3, keep, k0, &base, &s0);
    weft_graph *o1 = weft_graph_optimize(g, 3, keep, k1, &fold, &s1);
    CHECK(o0 && o1);
    if (!o0 || !o1) return;
    printf("traced linear+transposed product fwd+bwd: %d nodes; without fold %d (permute %d, copy %d), "
           "with fold %d (permute %d, copy %d, %d operands folded)\n",
           s0.nodes_before, s0.nodes_after, count_op(o0, "permute"), count_op(o0, "copy"), s1.nodes_after,
           count_op(o1, "permute"), count_op(o1, "copy"), s1.transposes_folded);
    CHECK(s1.transposes_folded >= 2);
    CHECK(s1.nodes_after < s0.nodes_after);
    CHECK(count_op(o1, "permute") < count_op(o0, "permute"));
    CHECK(count_op(o1, "copy") < count_op(o0, "copy"));
    weft_tensor *x2 = wt_rand64(WEFT_DIMS(8, 5), -1, 1, 34, false), *r0[3] = {0}, *r1[3] = {0};
    weft_value f0 = weft_graph_find_value(o0, "x"), f1 = weft_graph_find_value(o1, "x");
    CHECK(weft_graph_run(o0, 1, &f0, &x2, 3, k0, r0, 0, NULL) == WEFT_OK);
    CHECK(weft_graph_run(o1, 1, &f1, &x2, 3, k1, r1, 0, NULL) == WEFT_OK);
    weft_tensor_zero_grad(w);
    weft_tensor_zero_grad(v);
    weft_tensor *l2 = loss_fn(x2, w, v);
    CHECK(weft_backward(l2, NULL, NULL) == WEFT_OK);
    weft_tensor *eager[3] = {l2, weft_tensor_grad(w), weft_tensor_grad(v)};
    for (int i = 0; i < 3; i++) {
        wt_check_same("folded vs unfolded", r1[i], r0[i], 1e-13);
        wt_check_same("folded vs eager", r1[i], eager[i], 1e-13);
        weft_tensor_free(r0[i]);
        weft_tensor_free(r1[i]);
    }
    (void)vx;
    weft_tensor *ts[] = {w, v, x, l, x2, l2};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) weft_tensor_free(ts[i]);
    weft_graph_free(o0);
    weft_graph_free(o1);
    weft_graph_free(g);
}

int main(void) {
    RUN(test_flags_vs_naive);
    RUN(test_grad_flags);
    RUN(test_fold_builder);
    RUN(test_fold_traced);
    return wt_summary();
}
