// mpirun: 1 2 4
// Tensor parallelism (weft/parallel.h, src/dist/tp*.c), every rank of the
// world in one TP group. The reference of every comparison is weft's own
// unsharded layer, built in the same process from the same seed: a sharded
// parameter or gradient must equal its slice of the whole one (weft_tp_shard
// of the reference), a replicated one the whole one, outputs and input
// gradients the reference's (within 1e-10 relative in f64: the all-reduces
// regroup sums).
//
// The conjugate operators and the vocab-parallel cross-entropy are checked by
// finite differences. weft_gradcheck runs on every rank on the same full
// (replicated) input, so every perturbation happens on all ranks in lockstep
// and the collectives inside stay matched; each checked function enters the
// sharded region through copy/scatter and leaves it through reduce/gather,
// so its output is a function of the full input alone, the same on every
// rank: its analytic gradient (through the operators' backwards) must equal
// the numeric one. A deliberately broken f (identity backward) must fail it.
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

#include <weft/parallel.h>

static int size, rank;
static weft_comm *tp;

// ---- helpers ----
static weft_tensor *rand64(int ndim, const int64_t *sizes, uint64_t seed, bool grad) {
    return wt_rand64(ndim, sizes, -1, 1, seed, grad);
}

// sum(y * w) with w fixed (the same on every rank): a scalar loss reaching every output.
static weft_tensor *weighted_sum(weft_tensor *y, uint64_t seed) {
    weft_tensor *w = rand64(weft_tensor_ndim(y), weft_tensor_sizes(y), seed, false);
    weft_tensor *p = weft_mul(y, w), *s = weft_sum(p, 0, NULL, false);
    weft_tensor_free(w);
    weft_tensor_free(p);
    return s;
}

// This rank's slice of a whole reference tensor t, split as parameter i of tpm.
static weft_tensor *shard_as(const weft_module *tpm, int i, weft_tensor *t) {
    int dim = -1, groups = 1;
    CHECK(weft_tp_param_split(tpm, i, &dim, &groups) == WEFT_OK);
    return dim < 0 ? weft_tensor_ref(t) : weft_tp_shard(tp, t, dim, groups);
}

// Every parameter (and, with grads, its gradient) of tpm equals its slice of ref's.
static void check_params(const char *what, const weft_module *tpm, const weft_module *ref, bool grads, double tol) {
    int n = weft_module_param_count(ref);
    CHECK(weft_module_param_count(tpm) == n);
    for (int i = 0; i < n && i < weft_module_param_count(tpm); i++) {
        char a[128], b[128], msg[300];
        weft_tensor *p = weft_module_param_at(tpm, i, a, sizeof a), *r = weft_module_param_at(ref, i, b, sizeof b);
        CHECK(!strcmp(a, b));
        snprintf(msg, sizeof msg, "%s %s", what, a);
        weft_tensor *rs = shard_as(tpm, i, r);
        wt_check_same(msg, p, rs, tol);
        weft_tensor_free(rs);
        if (!grads) continue;
        snprintf(msg, sizeof msg, "%s grad %s", what, a);
        weft_tensor *gp = weft_tensor_grad(p), *gr = weft_tensor_grad(r);
        CHECK(gp && gr);
        if (!gp || !gr) continue;
        weft_tensor *gs = shard_as(tpm, i, gr);
        wt_check_same(msg, gp, gs, tol);
        weft_tensor_free(gs);
    }
}

// Gathered parameters equal ref's exactly (a whole tensor from the shards).
static void check_gathered(const char *what, const weft_module *tpm, const weft_module *ref) {
    for (int i = 0; i < weft_module_param_count(ref); i++) {
        char name[128], msg[300];
        weft_tensor *r = weft_module_param_at(ref, i, name, sizeof name);
        weft_tensor *w = weft_tp_param_gather(tp, tpm, i);
        snprintf(msg, sizeof msg, "%s gathered %s", what, name);
        wt_check_same(msg, w, r, 0);
        weft_tensor_free(w);
    }
}

// ---- the conjugate operators ----
// h_r(x) = tanh((r+1) x): a different function on every rank.
static weft_tensor *h_rank(weft_tensor *x) {
    weft_tensor *s = weft_mul_scalar(x, rank + 1), *y = weft_tanh(s);
    weft_tensor_free(s);
    return y;
}

// G(X) = sum_r h_r(X)
static weft_tensor *fn_copy_reduce(weft_tensor *const *in, void *u) {
    (void)u;
    weft_tensor *a = weft_tp_copy(tp, in[0]), *b = h_rank(a), *y = weft_tp_reduce(tp, b);
    weft_tensor_free(a);
    weft_tensor_free(b);
    return y;
}
// G(X) = concat_r h_r(X_r) along dim 1
static weft_tensor *fn_scatter_gather(weft_tensor *const *in, void *u) {
    (void)u;
    weft_tensor *a = weft_tp_scatter(tp, in[0], 1), *b = h_rank(a), *y = weft_tp_gather(tp, b, 1);
    weft_tensor_free(a);
    weft_tensor_free(b);
    return y;
}
// G(X) = concat_r h_r(X) along dim 0
static weft_tensor *fn_copy_gather(weft_tensor *const *in, void *u) {
    (void)u;
    weft_tensor *a = weft_tp_copy(tp, in[0]), *b = h_rank(a), *y = weft_tp_gather(tp, b, 0);
    weft_tensor_free(a);
    weft_tensor_free(b);
    return y;
}
// G(X) = sum_r h_r(X_r), X_r the r-th slice of dim -1
static weft_tensor *fn_scatter_reduce(weft_tensor *const *in, void *u) {
    (void)u;
    weft_tensor *a = weft_tp_scatter(tp, in[0], -1), *b = h_rank(a), *y = weft_tp_reduce(tp, b);
    weft_tensor_free(a);
    weft_tensor_free(b);
    return y;
}

// G(X) = sum_r h_r(X) through the sequence-parallel pair: X's tokens (dim 0)
// split, seq_gather (backward: reduce-scatter), h_r, seq_reduce_scatter
// (backward: all-gather), then the tokens gathered back.
static weft_tensor *fn_seq(weft_tensor *const *in, void *u) {
    (void)u;
    weft_tensor *a = weft_tp_scatter(tp, in[0], 0), *b = weft_tp_seq_gather(tp, a, 0), *c = h_rank(b);
    weft_tensor *d = weft_tp_seq_reduce_scatter(tp, c, 0), *y = weft_tp_gather(tp, d, 0);
    weft_tensor *t[] = {a, b, c, d};
    for (int i = 0; i < 4; i++) weft_tensor_free(t[i]);
    return y;
}

// A wrong f: identity forward and identity backward (the missing all-reduce).
static weft_status wrong_bw(void *ctx, int n_out, weft_tensor *const *gout, int n_in, const bool *needs,
                            weft_tensor **gin) {
    (void)ctx, (void)n_out, (void)n_in;
    if (needs[0] && gout[0]) gin[0] = weft_tensor_ref(gout[0]);
    return WEFT_OK;
}
static weft_tensor *fn_wrong_copy_reduce(weft_tensor *const *in, void *u) {
    (void)u;
    weft_tensor *a = weft_tensor_detach(in[0]);
    if (weft_function_record("wrong_copy", 1, &in[0], 1, &a, wrong_bw, NULL, NULL)) return NULL;
    weft_tensor *b = h_rank(a), *y = weft_tp_reduce(tp, b);
    weft_tensor_free(a);
    weft_tensor_free(b);
    return y;
}

static void test_operators(void) {
    int64_t cols = 2 * size;
    weft_tensor *x = rand64(WEFT_DIMS(3, cols), 7, true);
    double xv[64], yv[256];
    weft_tensor_to_f64(x, xv, 3 * cols);
    // values against the closed forms
    weft_tensor *y = fn_copy_reduce(&x, NULL);
    for (int i = 0; i < 3 * cols; i++) {
        double s = 0;
        for (int r = 0; r < size; r++) s += tanh((r + 1) * xv[i]);
        yv[i] = s;
    }
    wt_check_values("copy/reduce", y, yv, 3 * cols, 1e-13);
    weft_tensor_free(y);
    y = fn_scatter_gather(&x, NULL);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < cols; j++) yv[i * cols + j] = tanh((j / 2 + 1) * xv[i * cols + j]);
    wt_check_values("scatter/gather", y, yv, 3 * cols, 0);
    weft_tensor_free(y);
    y = fn_copy_gather(&x, NULL);
    CHECK(y && weft_tensor_size(y, 0) == 3 * size && weft_tensor_size(y, 1) == cols);
    for (int r = 0; r < size; r++)
        for (int i = 0; i < 3 * cols; i++) yv[r * 3 * cols + i] = tanh((r + 1) * xv[i]);
    wt_check_values("copy/gather", y, yv, 3 * size * cols, 0);
    weft_tensor_free(y);
    y = fn_scatter_reduce(&x, NULL);
    CHECK(y && weft_tensor_size(y, 1) == 2);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) {
            double s = 0;
            for (int r = 0; r < size; r++) s += tanh((r + 1) * xv[i * cols + 2 * r + j]);
            yv[i * 2 + j] = s;
        }
    wt_check_values("scatter/reduce", y, yv, 6, 1e-13);
    weft_tensor_free(y);
    // the sequence-parallel pair: X (2T, cols) split along its tokens
    weft_tensor *xs = rand64(WEFT_DIMS(2 * size, cols), 8, true);
    double xsv[256];
    weft_tensor_to_f64(xs, xsv, 2 * size * cols);
    y = fn_seq(&xs, NULL);
    for (int i = 0; i < 2 * size * cols; i++) {
        double s = 0;
        for (int r = 0; r < size; r++) s += tanh((r + 1) * xsv[i]);
        yv[i] = s;
    }
    wt_check_values("seq gather/reduce-scatter", y, yv, 2 * size * cols, 1e-13);
    weft_tensor_free(y);
    CHECK_GRAD(fn_seq, 1, &xs, NULL);
    weft_tensor_free(xs);
    // gradients by finite differences
    CHECK_GRAD(fn_copy_reduce, 1, &x, NULL);
    CHECK_GRAD(fn_scatter_gather, 1, &x, NULL);
    CHECK_GRAD(fn_copy_gather, 1, &x, NULL);
    CHECK_GRAD(fn_scatter_reduce, 1, &x, NULL);
    // the check can fail: an f without its all-reduce is wrong as soon as there are two ranks
    if (size > 1) CHECK(weft_gradcheck(fn_wrong_copy_reduce, 1, &x, NULL, NULL) != WEFT_OK);
    // second derivatives: under create_graph each backward is the conjugate operator, recorded in turn.
    // G(X) = sum_r h_r(X): dG/dX = sum_r (r+1) sech^2((r+1) X); d/dX of sum(dG/dX) = sum_r -2 (r+1)^2 t (1 - t^2)
    weft_tensor_zero_grad(x);
    weft_tensor *g1 = fn_copy_reduce(&x, NULL), *s1 = weft_sum(g1, 0, NULL, false);
    CHECK(s1 && weft_backward(s1, NULL, &(weft_backward_opts){.create_graph = true}) == WEFT_OK);
    weft_tensor *dx = weft_tensor_ref(weft_tensor_grad(x));
    weft_tensor_zero_grad(x);
    weft_tensor *s2 = dx ? weft_sum(dx, 0, NULL, false) : NULL;
    CHECK(s2 && weft_tensor_requires_grad(s2) && weft_backward(s2, NULL, NULL) == WEFT_OK);
    for (int i = 0; i < 3 * cols; i++) {
        double s = 0;
        for (int r = 0; r < size; r++) {
            double t = tanh((r + 1) * xv[i]);
            s += -2.0 * (r + 1) * (r + 1) * t * (1 - t * t);
        }
        yv[i] = s;
    }
    wt_check_values("second derivative through f and g", weft_tensor_grad(x), yv, 3 * cols, 1e-12);
    weft_tensor_free(g1);
    weft_tensor_free(s1);
    weft_tensor_free(dx);
    weft_tensor_free(s2);
    weft_tensor_free(x);
}

// ---- vocab-parallel cross-entropy ----
enum { CE_N = 6, CE_V = 8 };
static int64_t ce_targets[CE_N] = {0, 7, 3, 4, 5, 1}; // over every shard at TP = 1, 2, 4

static weft_tensor *fn_vocab_ce(weft_tensor *const *in, void *u) {
    (void)u;
    weft_tensor *t = weft_tensor_from_data(ce_targets, WEFT_DIMS(CE_N), WEFT_I64);
    weft_tensor *z = weft_tp_scatter(tp, in[0], 1), *l = weft_tp_vocab_cross_entropy(tp, z, t);
    weft_tensor_free(t);
    weft_tensor_free(z);
    return l;
}

static void test_vocab_cross_entropy(void) {
    weft_tensor *z = wt_rand64(WEFT_DIMS(CE_N, CE_V), -3, 3, 11, true);
    weft_tensor *zr = wt_rand64(WEFT_DIMS(CE_N, CE_V), -3, 3, 11, true); // the same values, for the reference
    weft_tensor *t = weft_tensor_from_data(ce_targets, WEFT_DIMS(CE_N), WEFT_I64);
    // against weft's cross-entropy on the full logits: loss and gradient
    weft_tensor *l = fn_vocab_ce(&z, NULL), *lr = weft_cross_entropy(zr, t);
    CHECK(l && lr && weft_backward(l, NULL, NULL) == WEFT_OK && weft_backward(lr, NULL, NULL) == WEFT_OK);
    CHECK_NEAR(weft_tensor_item(l), weft_tensor_item(lr), 1e-13);
    wt_check_same("vocab ce grad", weft_tensor_grad(z), weft_tensor_grad(zr), 1e-13);
    // the shard alone: its gradient is its columns of the full one
    weft_tensor *zs = weft_tp_shard(tp, zr, 1, 1);
    CHECK(weft_tensor_set_requires_grad(zs, true) == WEFT_OK);
    weft_tensor *ls = weft_tp_vocab_cross_entropy(tp, zs, t);
    CHECK(ls && weft_backward(ls, NULL, NULL) == WEFT_OK);
    weft_tensor *gs = weft_tp_shard(tp, weft_tensor_grad(zr), 1, 1);
    wt_check_same("vocab ce shard grad", weft_tensor_grad(zs), gs, 1e-13);
    // i32 targets and f32 logits give the same loss in f32
    weft_tensor *t32 = weft_cast(t, WEFT_I32), *zs32 = weft_cast(zs, WEFT_F32);
    weft_tensor *l32 = weft_tp_vocab_cross_entropy(tp, zs32, t32);
    CHECK(l32 && weft_tensor_dtype(l32) == WEFT_F32);
    CHECK_NEAR(weft_tensor_item(l32), weft_tensor_item(lr), 1e-6);
    // finite differences of the whole function of the full logits
    weft_tensor_zero_grad(z);
    CHECK_GRAD(fn_vocab_ce, 1, &z, NULL);
    // bad arguments
    CHECK(weft_tp_vocab_cross_entropy(tp, zs, zs) == NULL && wt_error_has("tp_vocab_cross_entropy"));
    CHECK(weft_tp_vocab_cross_entropy(NULL, zs, t) == NULL && wt_error_has("communicator"));
    weft_tensor *tmp[] = {z, zr, t, l, lr, zs, ls, gs, t32, zs32, l32};
    for (int i = 0; i < 11; i++) weft_tensor_free(tmp[i]);
}

// ---- linear layers ----
// ref and m: made from the same seed; checks init, then (in f64) forward and every gradient.
static void compare_layer(const char *what, weft_module *m, weft_module *ref, weft_tensor *x, weft_tensor *xr,
                          bool x_sharded, bool out_sharded, int out_dim) {
    check_gathered(what, m, ref);                        // init: bit for bit, in f32
    check_params(what, m, ref, false, 0);                // and each shard is its slice
    CHECK(weft_module_to_dtype(m, WEFT_F64) == WEFT_OK && weft_module_to_dtype(ref, WEFT_F64) == WEFT_OK);
    weft_tensor *y = weft_module_forward(m, x), *yr = weft_module_forward(ref, xr);
    CHECK(y && yr);
    if (!y || !yr) return;
    weft_tensor *ys = out_sharded ? weft_tp_shard(tp, yr, out_dim, 1) : weft_tensor_ref(yr);
    char msg[200];
    snprintf(msg, sizeof msg, "%s output", what);
    wt_check_same(msg, y, ys, 1e-10);
    // loss: the global function sum(Y * W) (a sharded output is gathered first)
    weft_tensor *yg = out_sharded ? weft_tp_gather(tp, y, out_dim) : weft_tensor_ref(y);
    weft_tensor *l = weighted_sum(yg, 5), *lr = weighted_sum(yr, 5);
    CHECK(l && lr && weft_backward(l, NULL, NULL) == WEFT_OK && weft_backward(lr, NULL, NULL) == WEFT_OK);
    CHECK_NEAR(weft_tensor_item(l), weft_tensor_item(lr), 1e-10);
    check_params(what, m, ref, true, 1e-10);
    weft_tensor *gxr = weft_tensor_grad(xr);
    weft_tensor *gx = x_sharded ? weft_tp_shard(tp, gxr, -1, 1) : weft_tensor_ref(gxr);
    snprintf(msg, sizeof msg, "%s input grad", what);
    wt_check_same(msg, weft_tensor_grad(x), gx, 1e-10);
    weft_tensor *t[] = {y, yr, ys, yg, l, lr, gx};
    for (int i = 0; i < 7; i++) weft_tensor_free(t[i]);
}

static void test_linear(void) {
    enum { IN = 12, OUT = 8 };
    for (int gather = 0; gather < 2; gather++) {
        weft_generator *g1 = weft_generator_create(21), *g2 = weft_generator_create(21);
        weft_module *m = weft_tp_column_linear(tp, IN, OUT, true, gather, g1), *ref = weft_nn_linear(IN, OUT, true, g2);
        CHECK(m && ref && !strcmp(weft_module_kind(m), "tp_column_linear"));
        weft_tensor *x = rand64(WEFT_DIMS(2, 3, IN), 30, true), *xr = rand64(WEFT_DIMS(2, 3, IN), 30, true);
        compare_layer(gather ? "column (gathered)" : "column", m, ref, x, xr, false, !gather, -1);
        weft_tensor *t[] = {x, xr};
        for (int i = 0; i < 2; i++) weft_tensor_free(t[i]);
        weft_module_free(m);
        weft_module_free(ref);
        weft_generator_free(g1);
        weft_generator_free(g2);
    }
    for (int par = 0; par < 2; par++) {
        weft_generator *g1 = weft_generator_create(22), *g2 = weft_generator_create(22);
        weft_module *m = weft_tp_row_linear(tp, IN, OUT, true, par, g1), *ref = weft_nn_linear(IN, OUT, true, g2);
        CHECK(m && ref);
        weft_tensor *xr = rand64(WEFT_DIMS(2, 3, IN), 31, true), *x = NULL;
        if (par) { // this rank's slice of the input features, as a leaf
            x = weft_tp_shard(tp, xr, -1, 1);
            weft_tensor_set_requires_grad(x, true);
        } else x = rand64(WEFT_DIMS(2, 3, IN), 31, true);
        compare_layer(par ? "row (parallel input)" : "row", m, ref, x, xr, par, false, -1);
        weft_tensor_free(x);
        weft_tensor_free(xr);
        weft_module_free(m);
        weft_module_free(ref);
        weft_generator_free(g1);
        weft_generator_free(g2);
    }
}

// ---- mlp, attention, block ----
static weft_tensor *ref_mlp_forward(weft_module *m, weft_tensor *x) {
    weft_tensor *h = weft_module_forward(weft_module_child_at(m, 0), x), *a = weft_gelu(h);
    weft_tensor *y = weft_module_forward(weft_module_child_at(m, 1), a);
    weft_tensor_free(h);
    weft_tensor_free(a);
    return y;
}

static void test_blocks(void) {
    enum { C = 16, NH = 4 };
    for (int kind = 0; kind < 3; kind++) {
        const char *names[] = {"mlp", "attention", "block"};
        uint64_t seed = 40 + (uint64_t)kind;
        weft_generator *g1 = weft_generator_create(seed), *g2 = weft_generator_create(seed);
        weft_module *m = NULL, *ref = NULL;
        if (kind == 0) {
            m = weft_tp_mlp(tp, C, g1);
            ref = weft_module_new("mlp", ref_mlp_forward, NULL, NULL); // weft's block mlp: fc, gelu, proj
            weft_module_add_child(ref, "fc", weft_nn_linear(C, 4 * C, true, g2));
            weft_module_add_child(ref, "proj", weft_nn_linear(4 * C, C, true, g2));
        } else if (kind == 1) {
            m = weft_tp_causal_self_attention(tp, C, NH, g1);
            ref = weft_nn_causal_self_attention(C, NH, g2);
        } else {
            m = weft_tp_transformer_block(tp, C, NH, g1);
            ref = weft_nn_transformer_block(C, NH, g2);
        }
        CHECK(m && ref);
        weft_tensor *x = rand64(WEFT_DIMS(2, 5, C), 50, true), *xr = rand64(WEFT_DIMS(2, 5, C), 50, true);
        if (m && ref) compare_layer(names[kind], m, ref, x, xr, false, false, -1);
        weft_tensor_free(x);
        weft_tensor_free(xr);
        weft_module_free(m);
        weft_module_free(ref);
        weft_generator_free(g1);
        weft_generator_free(g2);
    }
}

// ---- vocab-parallel embedding ----
static void test_vocab_embedding(void) {
    enum { V = 16, D = 5 };
    weft_generator *g1 = weft_generator_create(60), *g2 = weft_generator_create(60);
    weft_module *m = weft_tp_vocab_embedding(tp, V, D, g1), *ref = weft_nn_embedding(V, D, g2);
    CHECK(m && ref);
    check_gathered("vocab embedding", m, ref);
    check_params("vocab embedding", m, ref, false, 0);
    CHECK(weft_module_to_dtype(m, WEFT_F64) == WEFT_OK && weft_module_to_dtype(ref, WEFT_F64) == WEFT_OK);
    int64_t ids[2][6] = {{0, 15, 3, 3, 8, 12}, {7, 4, 11, 0, 9, 1}}; // repeats: gradients add up
    weft_tensor *idx = weft_tensor_from_data(ids, WEFT_DIMS(2, 6), WEFT_I64), *i32 = weft_cast(idx, WEFT_I32);
    weft_tensor *y = weft_module_forward(m, idx), *yr = weft_module_forward(ref, idx);
    wt_check_same("vocab embedding rows", y, yr, 0); // one rank's row plus zeros: exact
    weft_tensor *y32 = weft_module_forward(m, i32);
    wt_check_same("vocab embedding i32", y32, yr, 0);
    weft_tensor *l = weighted_sum(y, 61), *lr = weighted_sum(yr, 61);
    CHECK(weft_backward(l, NULL, NULL) == WEFT_OK && weft_backward(lr, NULL, NULL) == WEFT_OK);
    check_params("vocab embedding", m, ref, true, 0);
    // ids outside the vocabulary give zero rows on every rank (no rank holds them)
    int64_t bad[2] = {-1, V};
    weft_tensor *bi = weft_tensor_from_data(bad, WEFT_DIMS(2), WEFT_I64), *by = weft_module_forward(m, bi);
    double zeros[2 * D] = {0};
    wt_check_values("vocab embedding out of range", by, zeros, 2 * D, 0);
    weft_tensor *t[] = {idx, i32, y, yr, y32, l, lr, bi, by};
    for (int i = 0; i < 9; i++) weft_tensor_free(t[i]);
    weft_module_free(m);
    weft_module_free(ref);
    weft_generator_free(g1);
    weft_generator_free(g2);
}

// ---- bad settings ----
static void test_errors(void) {
    weft_generator *g = weft_generator_create(1);
    if (size > 1) {
        CHECK(weft_tp_causal_self_attention(tp, 12, 3, g) == NULL && wt_error_has("n_heads = 3") &&
              wt_error_has("tp = "));
        CHECK(weft_tp_column_linear(tp, 4, 2 * size + 1, true, false, g) == NULL && wt_error_has("out = "));
        CHECK(weft_tp_row_linear(tp, 2 * size + 1, 4, true, false, g) == NULL && wt_error_has("in = "));
        CHECK(weft_tp_vocab_embedding(tp, 2 * size + 1, 4, g) == NULL && wt_error_has("vocabulary"));
        weft_tensor *x = weft_tensor_zeros(WEFT_DIMS(3, 2 * size + 1), WEFT_F64);
        CHECK(weft_tp_scatter(tp, x, 1) == NULL && wt_error_has("not divisible by the tensor-parallel size"));
        weft_tensor_free(x);
    }
    CHECK(weft_tp_causal_self_attention(tp, 10, 4, g) == NULL && wt_error_has("divisible by n_heads"));
    CHECK(weft_tp_copy(NULL, NULL) == NULL && wt_error_has("communicator"));
    weft_tensor *x = weft_tensor_zeros(WEFT_DIMS(2, 2), WEFT_F64);
    CHECK(weft_tp_gather(tp, x, 2) == NULL && wt_error_has("dim 2 out of range"));
    weft_tensor_free(x);
    // weft_module_to_dtype (used above for the f64 comparisons): parameters become new f64 leaves, values kept
    weft_module *lin = weft_nn_linear(3, 2, true, g);
    double w32[6];
    weft_tensor_to_f64(weft_module_get(lin, "weight"), w32, 6);
    CHECK(weft_module_to_dtype(lin, WEFT_F64) == WEFT_OK);
    weft_tensor *w64 = weft_module_get(lin, "weight");
    CHECK(weft_tensor_dtype(w64) == WEFT_F64 && weft_tensor_requires_grad(w64) && weft_tensor_is_leaf(w64));
    wt_check_values("to_dtype values", w64, w32, 6, 0);
    CHECK(weft_module_to_dtype(lin, WEFT_I32) != WEFT_OK && wt_error_has("floating point"));
    weft_module_free(lin);
    weft_generator_free(g);
}

int main(int argc, char **argv) {
    if (weft_dist_init(&argc, &argv) != WEFT_OK) {
        fprintf(stderr, "dist init: %s\n", weft_last_error());
        return 1;
    }
    size = weft_comm_size(weft_comm_world());
    rank = weft_comm_rank(weft_comm_world());
    weft_comm_set_timeout(weft_comm_world(), 60); // a mismatched collective must fail, not hang
    weft_parallel *p = weft_parallel_create(weft_comm_world(), size, 1);
    CHECK(p != NULL);
    if (!p) return 1;
    tp = p->tp_comm;
    weft_comm_set_timeout(tp, 60);
    RUN(test_operators);
    RUN(test_vocab_cross_entropy);
    RUN(test_linear);
    RUN(test_blocks);
    RUN(test_vocab_embedding);
    RUN(test_errors);
    int rc = wt_summary();
    weft_parallel_free(p);
    weft_dist_finalize();
    return rc;
}
