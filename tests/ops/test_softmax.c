// softmax, log_softmax and cross_entropy: forward against naive references
// (any dim, non-contiguous input, extreme values), backward by finite
// differences in f64 (and second order through the fused backward ops), f32
// backward against the closed form, errors naming the op. bf16 / f16 input
// (as autocast hands a product's output over): f32 output, the gradient in
// the input's dtype, against the f32 ops on the widened values.
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "weft_test.h"

// Reference (log_)softmax of row-major values v with sizes sz along dim.
static void ref_softmax(const double *v, int nd, const int64_t *sz, int dim, bool lg, double *out) {
    int64_t outer = 1, inner = 1, D = nd ? sz[dim] : 1;
    for (int d = 0; d < dim; d++) outer *= sz[d];
    for (int d = dim + 1; d < nd; d++) inner *= sz[d];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            double m = -INFINITY, s = 0;
            for (int64_t d = 0; d < D; d++) m = fmax(m, v[(o * D + d) * inner + j]);
            for (int64_t d = 0; d < D; d++) s += exp(v[(o * D + d) * inner + j] - m);
            for (int64_t d = 0; d < D; d++) {
                double x = v[(o * D + d) * inner + j];
                out[(o * D + d) * inner + j] = lg ? x - m - log(s) : exp(x - m) / s;
            }
        }
}

static weft_tensor *randt(int nd, const int64_t *sz, weft_dtype dt, double lo, double hi, uint64_t seed) {
    weft_tensor *t = wt_rand64(nd, sz, lo, hi, seed, false), *c = weft_cast(t, dt);
    weft_tensor_free(t);
    return c;
}

static void check_forward(weft_tensor *x, int dim, bool lg, double tol) {
    int64_t n = weft_tensor_numel(x);
    int nd = weft_tensor_ndim(x);
    double *v = malloc(sizeof(double) * (size_t)(n + 1)), *r = malloc(sizeof(double) * (size_t)(n + 1));
    weft_tensor_to_f64(x, v, n);
    ref_softmax(v, nd, weft_tensor_sizes(x), dim < 0 ? dim + (nd ? nd : 1) : dim, lg, r);
    weft_tensor *y = lg ? weft_log_softmax(x, dim) : weft_softmax(x, dim);
    CHECK(y && weft_tensor_dtype(y) == weft_tensor_dtype(x));
    wt_check_values(lg ? "log_softmax" : "softmax", y, r, n, tol);
    weft_tensor_free(y);
    free(v);
    free(r);
}

static void test_forward(void) {
    weft_dtype dts[2] = {WEFT_F32, WEFT_F64};
    for (int k = 0; k < 2; k++) {
        double tol = dts[k] == WEFT_F32 ? 2e-6 : 1e-13;
        for (int lg = 0; lg < 2; lg++) {
            weft_tensor *a = randt(WEFT_DIMS(5, 37), dts[k], -5, 5, 1);
            weft_tensor *b = randt(WEFT_DIMS(3, 70, 4), dts[k], -5, 5, 2); // inner 4 and 280 (> one block)
            weft_tensor *c = randt(WEFT_DIMS(2, 3, 150), dts[k], -5, 5, 3);
            check_forward(a, -1, lg, tol);
            check_forward(a, 0, lg, tol);
            check_forward(b, 1, lg, tol);
            check_forward(b, 0, lg, tol);
            check_forward(c, 2, lg, tol);
            check_forward(c, 1, lg, tol);
            weft_tensor *ct = weft_transpose(c, 1, 2); // (2,150,3), non-contiguous
            check_forward(ct, -1, lg, tol);
            check_forward(ct, 1, lg, tol);
            weft_tensor *big = randt(WEFT_DIMS(300, 257), dts[k], -30, 30, 4); // threaded rows
            check_forward(big, 1, lg, tol);
            weft_tensor *s = weft_tensor_scalar(3, dts[k]); // 0-d: softmax 1, log_softmax 0
            check_forward(s, 0, lg, tol);
            weft_tensor *ts[] = {a, b, c, ct, big, s};
            for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
        }
    }
}

// Large logits do not overflow, -inf entries give exact zeros, rows sum to 1.
static void test_stability(void) {
    for (int k = 0; k < 2; k++) {
        weft_dtype dt = k ? WEFT_F64 : WEFT_F32;
        double v[6] = {1000, 1001, 1002, -INFINITY, 0, -1e4};
        weft_tensor *x0 = wt_f64(v, WEFT_DIMS(2, 3), false), *x = weft_cast(x0, dt);
        weft_tensor *y = weft_softmax(x, 1), *ly = weft_log_softmax(x, 1);
        double e1 = exp(-1), e2 = exp(-2), s = 1 + e1 + e2;
        double ry[6] = {e2 / s, e1 / s, 1 / s, 0, 1, 0};
        double rl[6] = {-2 - log(s), -1 - log(s), -log(s), -INFINITY, 0, -1e4};
        wt_check_values("stable softmax", y, ry, 6, 1e-6);
        wt_check_values("stable log_softmax", ly, rl, 6, 1e-6);
        double got[6];
        weft_tensor_to_f64(y, got, 6);
        CHECK(got[3] == 0.0 && got[5] == 0.0);
        weft_tensor *ts[] = {x0, x, y, ly};
        for (int i = 0; i < 4; i++) weft_tensor_free(ts[i]);
    }
}

typedef struct { int dim; bool lg; bool transpose; } sm_case;
static weft_tensor *f_sm(weft_tensor *const *in, void *u) {
    const sm_case *c = u;
    weft_tensor *x = c->transpose ? weft_transpose(in[0], 0, 1) : weft_tensor_ref(in[0]);
    weft_tensor *y = c->lg ? weft_log_softmax(x, c->dim) : weft_softmax(x, c->dim);
    weft_tensor_free(x);
    return y;
}
// The fused backward ops themselves (second-order rules).
static weft_tensor *f_sm_bw(weft_tensor *const *in, void *u) {
    const sm_case *c = u;
    weft_tensor *y = c->lg ? weft_log_softmax(in[1], c->dim) : weft_softmax(in[1], c->dim); // a valid y
    weft_attrs at = {.i = {c->dim}};
    weft_tensor *args[2] = {in[0], y};
    weft_tensor *r = weft_op_apply1(weft_op_find(c->lg ? "log_softmax_backward" : "softmax_backward"), 2, args, &at);
    weft_tensor_free(y);
    return r;
}

static void test_backward(void) {
    for (int lg = 0; lg < 2; lg++) {
        sm_case cases[] = {{1, lg, false}, {0, lg, false}, {1, lg, true}, {2, lg, false}};
        weft_tensor *a = wt_rand64(WEFT_DIMS(3, 5), -2, 2, 10, true);
        CHECK_GRAD(f_sm, 1, &a, &cases[0]);
        CHECK_GRAD(f_sm, 1, &a, &cases[1]);
        CHECK_GRAD(f_sm, 1, &a, &cases[2]);
        weft_tensor *b = wt_rand64(WEFT_DIMS(2, 3, 4), -2, 2, 11, true);
        CHECK_GRAD(f_sm, 1, &b, &cases[3]);
        CHECK_GRAD(f_sm, 1, &b, &cases[1]);
        // second order: gradients of the fused backward op w.r.t. g and y
        weft_tensor *gy[2] = {wt_rand64(WEFT_DIMS(3, 4), -1, 1, 12, true), wt_rand64(WEFT_DIMS(3, 4), -1, 1, 13, true)};
        sm_case c1 = {1, lg, false}, c0 = {0, lg, false};
        CHECK_GRAD(f_sm_bw, 2, gy, &c1);
        CHECK_GRAD(f_sm_bw, 2, gy, &c0);
        weft_tensor *ts[] = {a, b, gy[0], gy[1]};
        for (int i = 0; i < 4; i++) weft_tensor_free(ts[i]);
    }
}

// The gradient reaching softmax from sum() is an expanded (stride-0) tensor;
// softmax rows sum to 1, so the gradient of sum(softmax(x)) is zero.
static void test_backward_expanded_grad(void) {
    weft_tensor *x = wt_rand64(WEFT_DIMS(4, 6), -3, 3, 14, true);
    weft_tensor *y = weft_softmax(x, 1), *s = weft_sum(y, 0, NULL, false);
    CHECK(weft_backward(s, NULL, NULL) == WEFT_OK);
    double z[24] = {0};
    wt_check_values("d sum(softmax)", weft_tensor_grad(x), z, 24, 1e-12);
    weft_tensor *ts[] = {x, y, s};
    for (int i = 0; i < 3; i++) weft_tensor_free(ts[i]);
}

// f32 backward against the closed forms, on a size that uses several threads.
static void test_backward_f32(void) {
    const int64_t R = 200, D = 333;
    for (int lg = 0; lg < 2; lg++) {
        weft_tensor *x = randt(WEFT_DIMS(R, D), WEFT_F32, -4, 4, 20);
        weft_tensor_set_requires_grad(x, true);
        weft_tensor *g = randt(WEFT_DIMS(R, D), WEFT_F32, -1, 1, 21);
        weft_tensor *y = lg ? weft_log_softmax(x, -1) : weft_softmax(x, -1);
        CHECK(weft_backward(y, g, NULL) == WEFT_OK);
        double *yv = malloc(sizeof(double) * R * D), *gv = malloc(sizeof(double) * R * D), *r = malloc(sizeof(double) * R * D);
        weft_tensor_to_f64(y, yv, R * D);
        weft_tensor_to_f64(g, gv, R * D);
        for (int64_t i = 0; i < R; i++) {
            double s = 0;
            for (int64_t j = 0; j < D; j++) s += lg ? gv[i * D + j] : gv[i * D + j] * yv[i * D + j];
            for (int64_t j = 0; j < D; j++)
                r[i * D + j] = lg ? gv[i * D + j] - exp(yv[i * D + j]) * s : yv[i * D + j] * (gv[i * D + j] - s);
        }
        wt_check_values("f32 softmax grad", weft_tensor_grad(x), r, R * D, 1e-5);
        free(yv);
        free(gv);
        free(r);
        weft_tensor_free(x);
        weft_tensor_free(g);
        weft_tensor_free(y);
    }
}

// ---- cross-entropy ----
static double ref_ce(const double *x, const int64_t *t, int64_t N, int64_t C) {
    double tot = 0;
    for (int64_t r = 0; r < N; r++) {
        double m = -INFINITY, s = 0;
        for (int64_t c = 0; c < C; c++) m = fmax(m, x[r * C + c]);
        for (int64_t c = 0; c < C; c++) s += exp(x[r * C + c] - m);
        tot += m + log(s) - x[r * C + t[r]];
    }
    return tot / (double)N;
}

static void test_ce_forward(void) {
    const int64_t N = 70, C = 600; // big enough for threads
    int64_t tv[70];
    for (int i = 0; i < N; i++) tv[i] = (i * 37) % C;
    for (int k = 0; k < 2; k++) {
        weft_dtype dt = k ? WEFT_F64 : WEFT_F32;
        weft_tensor *x = randt(WEFT_DIMS(N, C), dt, -8, 8, 30);
        double *xv = malloc(sizeof(double) * N * C);
        weft_tensor_to_f64(x, xv, N * C);
        double ref = ref_ce(xv, tv, N, C);
        for (int it = 0; it < 2; it++) {
            weft_tensor *t;
            if (it == 0) {
                t = weft_tensor_from_data(tv, WEFT_DIMS(N), WEFT_I64);
            } else {
                int32_t t32[70];
                for (int i = 0; i < N; i++) t32[i] = (int32_t)tv[i];
                t = weft_tensor_from_data(t32, WEFT_DIMS(N), WEFT_I32);
            }
            weft_tensor *l = weft_cross_entropy(x, t);
            CHECK(l && weft_tensor_ndim(l) == 0 && weft_tensor_dtype(l) == dt);
            CHECK_NEAR(weft_tensor_item(l), ref, k ? 1e-12 : 1e-6);
            weft_tensor_free(l);
            weft_tensor_free(t);
        }
        free(xv);
        weft_tensor_free(x);
    }
    // huge logits stay finite; transposed logits and a strided target view
    double v[6] = {1000, -1000, 500, 3, 1, 2}; // (3,2) transposed to (2,3)
    weft_tensor *x0 = wt_f64(v, WEFT_DIMS(3, 2), false), *xt = weft_transpose(x0, 0, 1);
    int64_t tt[4] = {0, 9, 2, 9};
    weft_tensor *t0 = weft_tensor_from_data(tt, WEFT_DIMS(4), WEFT_I64), *ts = weft_slice(t0, 0, 0, 4, 2); // {0, 2}
    weft_tensor *l = weft_cross_entropy(xt, ts);
    double xr[6] = {1000, 500, 1, -1000, 3, 2};
    int64_t tr[2] = {0, 2};
    CHECK(l != NULL);
    CHECK_NEAR(weft_tensor_item(l), ref_ce(xr, tr, 2, 3), 1e-12);
    weft_tensor *fr[] = {x0, xt, t0, ts, l};
    for (int i = 0; i < 5; i++) weft_tensor_free(fr[i]);
}

static weft_tensor *g_targets;
static weft_tensor *f_ce(weft_tensor *const *in, void *u) {
    weft_tensor *x = u ? weft_transpose(in[0], 0, 1) : weft_tensor_ref(in[0]);
    weft_tensor *l = weft_cross_entropy(x, g_targets);
    weft_tensor_free(x);
    return l;
}

static void test_ce_backward(void) {
    int64_t tv[4] = {2, 0, 4, 4};
    g_targets = weft_tensor_from_data(tv, WEFT_DIMS(4), WEFT_I64);
    weft_tensor *x = wt_rand64(WEFT_DIMS(4, 5), -3, 3, 40, true);
    CHECK_GRAD(f_ce, 1, &x, NULL);
    weft_tensor *xt = wt_rand64(WEFT_DIMS(5, 4), -3, 3, 41, true);
    CHECK_GRAD(f_ce, 1, &xt, (void *)1);
    // closed form: 3 * (softmax - onehot) / N, in f32
    weft_tensor *x32 = randt(WEFT_DIMS(4, 5), WEFT_F32, -3, 3, 42);
    weft_tensor_set_requires_grad(x32, true);
    weft_tensor *l = weft_cross_entropy(x32, g_targets), *l3 = weft_mul_scalar(l, 3);
    CHECK(weft_backward(l3, NULL, NULL) == WEFT_OK);
    double xv[20], sm[20], r[20];
    weft_tensor_to_f64(x32, xv, 20);
    ref_softmax(xv, WEFT_DIMS(4, 5), 1, false, sm);
    for (int i = 0; i < 20; i++) r[i] = 3 * (sm[i] - (tv[i / 5] == i % 5)) / 4;
    wt_check_values("ce grad f32", weft_tensor_grad(x32), r, 20, 1e-6);
    weft_tensor *fr[] = {g_targets, x, xt, x32, l, l3};
    for (int i = 0; i < 6; i++) weft_tensor_free(fr[i]);
}

// bf16 / f16 logits (autocast's last linear layer): read as they are, the loss in f32, the gradient in the
// logits' dtype. References in f64 from the half values: the loss within f32 rounding, each gradient element
// within about one rounding of its dtype (2^-8 for bf16, 2^-11 for f16, relative; f16's subnormal steps) of
// the exact one.
static void test_ce_half(void) {
    const int64_t N = 70, C = 600; // big enough for threads
    int64_t tv[70];
    for (int i = 0; i < N; i++) tv[i] = (i * 53) % C;
    weft_tensor *t = weft_tensor_from_data(tv, WEFT_DIMS(N), WEFT_I64);
    const weft_dtype dts[2] = {WEFT_BF16, WEFT_F16};
    for (int k = 0; k < 2; k++) {
        weft_tensor *x32 = randt(WEFT_DIMS(N, C), WEFT_F32, -8, 8, 50 + k), *x = weft_cast(x32, dts[k]);
        weft_tensor_set_requires_grad(x, true);
        double *xv = malloc(sizeof(double) * N * C), *sm = malloc(sizeof(double) * N * C),
               *gv = malloc(sizeof(double) * N * C);
        weft_tensor_to_f64(x, xv, N * C); // the half values, exactly
        weft_tensor *l = weft_cross_entropy(x, t), *l2 = l ? weft_mul_scalar(l, 2) : NULL;
        CHECK(l && weft_tensor_ndim(l) == 0 && weft_tensor_dtype(l) == WEFT_F32);
        CHECK_NEAR(weft_tensor_item(l), ref_ce(xv, tv, N, C), 1e-5);
        CHECK(l2 && weft_backward(l2, NULL, NULL) == WEFT_OK);
        weft_tensor *g = weft_tensor_grad(x);
        CHECK(g && weft_tensor_dtype(g) == dts[k]);
        if (g) {
            ref_softmax(xv, WEFT_DIMS(N, C), 1, false, sm);
            weft_tensor_to_f64(g, gv, N * C);
            double worst = 0, rel = k ? 0x1p-11 : 0x1p-8;
            for (int64_t i = 0; i < N * C; i++) {
                double r = 2 * (sm[i] - (tv[i / C] == i % C)) / (double)N, e = fabs(gv[i] - r) - rel * fabs(r);
                worst = e > worst ? e : worst;
            }
            CHECK(worst <= (k ? 0x1p-25 : 0) + 1e-9); // f16's subnormals: steps of 2^-24 below 2^-14
        }
        // the same numbers as the f32 kernels on the widened logits
        weft_tensor *xw = weft_cast(x, WEFT_F32), *lw = weft_cross_entropy(xw, t);
        CHECK(lw && weft_tensor_item(lw) == weft_tensor_item(l));
        weft_tensor *fr[] = {x32, x, l, l2, xw, lw};
        for (int i = 0; i < 6; i++) weft_tensor_free(fr[i]);
        free(xv);
        free(sm);
        free(gv);
    }
    weft_tensor_free(t);
}

// softmax / log_softmax of bf16 and f16 x, over the last dim and over a middle one: y is f32 and the same
// bits as the f32 op on the widened x (the reference's f32 values: check_forward's tolerance); the gradient of
// x is in x's dtype, the f32 gradient rounded once.
static void test_softmax_half(void) {
    const weft_dtype dts[2] = {WEFT_BF16, WEFT_F16};
    for (int k = 0; k < 2; k++)
        for (int lg = 0; lg < 2; lg++)
            for (int dim = 1; dim < 3; dim++) {
                weft_tensor *x32 = randt(WEFT_DIMS(3, 70, 40), WEFT_F32, -6, 6, 60 + (uint64_t)(4 * k + 2 * lg + dim));
                weft_tensor *x = weft_cast(x32, dts[k]), *xw = weft_cast(x, WEFT_F32);
                weft_tensor_set_requires_grad(x, true);
                weft_tensor_set_requires_grad(xw, true);
                weft_tensor *y = lg ? weft_log_softmax(x, dim) : weft_softmax(x, dim);
                weft_tensor *yw = lg ? weft_log_softmax(xw, dim) : weft_softmax(xw, dim);
                CHECK(y && yw && weft_tensor_dtype(y) == WEFT_F32);
                if (!y || !yw) continue;
                wt_check_same("half softmax vs widened", y, yw, 0);
                check_forward(xw, dim, lg, 1e-5); // and the widened values against the reference
                weft_tensor *w = randt(WEFT_DIMS(3, 70, 40), WEFT_F32, -1, 1, 70);
                CHECK(weft_backward(y, w, NULL) == WEFT_OK && weft_backward(yw, w, NULL) == WEFT_OK);
                weft_tensor *g = weft_tensor_grad(x), *gw = weft_tensor_grad(xw);
                CHECK(g && gw && weft_tensor_dtype(g) == dts[k]);
                weft_tensor *gr = gw ? weft_cast(gw, dts[k]) : NULL;
                if (g && gr) wt_check_same("half softmax gradient", g, gr, 0);
                weft_tensor *ts[] = {x32, x, xw, y, yw, w, gr};
                for (int i = 0; i < 7; i++) weft_tensor_free(ts[i]);
            }
    // second order: the gradient of x (bf16, written by the backward op) recorded and differentiated again,
    // against the same on the widened values (bf16 tolerance: the first gradient is rounded to bf16)
    for (int lg = 0; lg < 2; lg++) {
        weft_tensor *x32 = randt(WEFT_DIMS(5, 9), WEFT_F32, -2, 2, 90 + (uint64_t)lg), *x = weft_cast(x32, WEFT_BF16);
        weft_tensor *xw = weft_cast(x, WEFT_F32), *w = randt(WEFT_DIMS(5, 9), WEFT_F32, -1, 1, 92);
        weft_tensor *src[2] = {x, xw}, *gg[2] = {NULL, NULL};
        for (int r = 0; r < 2; r++) {
            weft_tensor_set_requires_grad(src[r], true);
            weft_tensor *y = lg ? weft_log_softmax(src[r], 1) : weft_softmax(src[r], 1), *yw = weft_mul(y, w);
            weft_tensor *s1 = weft_sum(yw, 0, NULL, false);
            weft_backward_opts o = {.create_graph = true};
            CHECK(s1 && weft_backward(s1, NULL, &o) == WEFT_OK);
            weft_tensor *g = weft_tensor_grad(src[r]), *g32 = g ? weft_cast(g, WEFT_F32) : NULL;
            CHECK(g && weft_tensor_dtype(g) == weft_tensor_dtype(src[r]) && weft_tensor_requires_grad(g));
            weft_tensor *sq = g32 ? weft_mul(g32, g32) : NULL, *s2 = sq ? weft_sum(sq, 0, NULL, false) : NULL;
            weft_tensor_zero_grad(src[r]); // (the recorded gradient holds the graph)
            CHECK(s2 && weft_backward(s2, NULL, NULL) == WEFT_OK);
            gg[r] = weft_tensor_grad(src[r]) ? weft_cast(weft_tensor_grad(src[r]), WEFT_F32) : NULL;
            weft_tensor *ts[] = {y, yw, s1, g32, sq, s2};
            for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
        }
        CHECK(gg[0] && gg[1]);
        if (gg[0] && gg[1]) wt_check_same("half softmax second order", gg[0], gg[1], 5e-2);
        weft_tensor *ts[] = {x32, x, xw, w, gg[0], gg[1]};
        for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
    }
    // the backward op's dx dtype (attr i[1] = 1 + dtype): a half one only, and only for an f32 y
    weft_tensor *g = randt(WEFT_DIMS(2, 3), WEFT_F32, -1, 1, 93), *g64 = randt(WEFT_DIMS(2, 3), WEFT_F64, -1, 1, 94);
    const weft_op_def *bw = weft_op_find("softmax_backward");
    weft_attrs ok_at = {.i = {1, 1 + WEFT_BF16}}, bad_dt = {.i = {1, 1 + WEFT_F64}}, bad_code = {.i = {1, 99}};
    weft_tensor *d = weft_op_apply1(bw, 2, (weft_tensor *[]){g, g}, &ok_at);
    CHECK(d && weft_tensor_dtype(d) == WEFT_BF16);
    weft_tensor_free(d);
    CHECK(!weft_op_apply1(bw, 2, (weft_tensor *[]){g, g}, &bad_dt) && wt_error_has("softmax_backward: attr i[1]"));
    CHECK(!weft_op_apply1(bw, 2, (weft_tensor *[]){g, g}, &bad_code) && wt_error_has("softmax_backward: attr i[1]"));
    CHECK(!weft_op_apply1(bw, 2, (weft_tensor *[]){g64, g64}, &ok_at) && wt_error_has("for an f32 output"));
    weft_tensor_free(g);
    weft_tensor_free(g64);
}

// ---- composed losses and activations: bce_with_logits, leaky_relu ----
// BCE with logits against log(1 + e^x) - x t written per element (log1p / exp of -|x| for the stable form),
// at logits up to |x| = 40 where the naive log(1 + e^x) overflows f32's exp; gradients by finite differences
// (at 0 too, where PyTorch's gradient is sigmoid(0) - t).
static double bce_ref(double x, double t) { return (x > 0 ? x : 0) + log1p(exp(-fabs(x))) - x * t; }
static weft_tensor *bce_fn(weft_tensor *const *in, void *u) { return (void)u, weft_bce_with_logits(in[0], in[1]); }
static weft_tensor *leaky_fn(weft_tensor *const *in, void *u) { return weft_leaky_relu(in[0], *(double *)u); }

static void test_bce_leaky(void) {
    const double xv[6] = {-40, -2.5, 0, 0.3, 7, 40}, tv[6] = {0, 1, 0.5, 0.25, 1, 0};
    for (int dt = 0; dt < 2; dt++) {
        weft_dtype d = dt ? WEFT_F32 : WEFT_F64;
        weft_tensor *x64 = weft_tensor_from_data(xv, WEFT_DIMS(2, 3), WEFT_F64), *t64 = weft_tensor_from_data(tv, WEFT_DIMS(2, 3), WEFT_F64);
        weft_tensor *x = weft_cast(x64, d), *t = weft_cast(t64, d);
        weft_tensor *l = weft_bce_with_logits(x, t);
        double want = 0;
        for (int i = 0; i < 6; i++) want += bce_ref(xv[i], tv[i]) / 6;
        CHECK(l && weft_tensor_ndim(l) == 0 && weft_tensor_dtype(l) == d);
        wt_check_values(dt ? "bce_with_logits f32" : "bce_with_logits f64", l, &want, 1, dt ? 1e-5 : 1e-13);
        weft_tensor *ts[] = {x64, t64, x, t, l};
        for (int i = 0; i < 5; i++) weft_tensor_free(ts[i]);
    }
    weft_tensor *in[2] = {wt_rand64(WEFT_DIMS(3, 4), -3, 3, 71, true), wt_rand64(WEFT_DIMS(3, 4), 0, 1, 72, true)};
    CHECK_GRAD(bce_fn, 2, in, NULL);
    weft_tensor_free(in[0]);
    double zero[2] = {0, 0}, half[2] = {1, 0.25};
    in[0] = wt_f64(zero, WEFT_DIMS(2), true); // at x = 0: d/dx = (sigmoid(0) - t) / n
    weft_tensor *tt = weft_tensor_from_data(half, WEFT_DIMS(2), WEFT_F64);
    weft_tensor *l = weft_bce_with_logits(in[0], tt);
    CHECK(l && weft_backward(l, NULL, NULL) == WEFT_OK);
    wt_check_values("bce_with_logits gradient at 0", weft_tensor_grad(in[0]), (const double[]){-0.25, 0.125}, 2, 1e-15);
    weft_tensor_free(l), weft_tensor_free(tt), weft_tensor_free(in[0]), weft_tensor_free(in[1]);

    // leaky_relu: x for x > 0, slope x elsewhere; slopes below 0, between 0 and 1, and above 1
    const double slopes[3] = {0.2, -0.5, 3};
    for (int k = 0; k < 3; k++) {
        double s = slopes[k];
        weft_tensor *x = wt_rand64(WEFT_DIMS(4, 5), -2, 2, 80 + k, true);
        weft_tensor *y = weft_leaky_relu(x, s);
        double xs[20], want[20];
        weft_tensor_to_f64(x, xs, 20);
        for (int i = 0; i < 20; i++) want[i] = xs[i] > 0 ? xs[i] : s * xs[i];
        wt_check_values("leaky_relu", y, want, 20, 0);
        CHECK_GRAD(leaky_fn, 1, &x, &s);
        weft_tensor_free(x), weft_tensor_free(y);
    }
    // PyTorch's edges: the gradient at 0 is the slope; +inf stays inf with slope 0; NaN stays NaN
    const double ev[4] = {0, INFINITY, -1, NAN};
    weft_tensor *e = wt_f64(ev, WEFT_DIMS(4), true), *ey = weft_leaky_relu(e, 0);
    double yv[4] = {0};
    if (ey) weft_tensor_to_f64(ey, yv, 4);
    CHECK(ey && yv[0] == 0 && yv[1] == INFINITY && yv[2] == 0 && isnan(yv[3]));
    weft_tensor_free(ey);
    ey = weft_leaky_relu(e, 0.2);
    weft_tensor *ones = ey ? weft_tensor_ones_like(ey) : NULL;
    CHECK(ey && weft_backward(ey, ones, NULL) == WEFT_OK);
    double gv[4] = {0};
    if (weft_tensor_grad(e)) weft_tensor_to_f64(weft_tensor_grad(e), gv, 4);
    CHECK(gv[0] == 0.2 && gv[1] == 1 && gv[2] == 0.2);
    weft_tensor_free(ones), weft_tensor_free(ey), weft_tensor_free(e);
}

static void expect_error(weft_tensor *r, const char *op) {
    CHECK(r == NULL);
    CHECK(strstr(weft_last_error(), op) != NULL);
    weft_tensor_free(r);
    weft_clear_error();
}

static void test_errors(void) {
    weft_tensor *x = weft_tensor_ones(WEFT_DIMS(3, 4), WEFT_F32), *xi = weft_tensor_ones(WEFT_DIMS(3, 4), WEFT_I32);
    expect_error(weft_softmax(x, 2), "softmax");
    expect_error(weft_log_softmax(x, -3), "log_softmax");
    expect_error(weft_softmax(xi, 0), "softmax");
    expect_error(weft_softmax(NULL, 0), "softmax");
    int64_t bad[3] = {0, 4, 1}, neg[3] = {0, -1, 1}, ok[3] = {0, 1, 2};
    weft_tensor *tb = weft_tensor_from_data(bad, WEFT_DIMS(3), WEFT_I64);
    weft_tensor *tn = weft_tensor_from_data(neg, WEFT_DIMS(3), WEFT_I64);
    weft_tensor *tok = weft_tensor_from_data(ok, WEFT_DIMS(3), WEFT_I64);
    weft_tensor *tf = weft_tensor_ones(WEFT_DIMS(3), WEFT_F32), *t2 = weft_tensor_zeros(WEFT_DIMS(2), WEFT_I64);
    expect_error(weft_cross_entropy(x, tb), "cross_entropy"); // target 4 with C = 4
    expect_error(weft_cross_entropy(x, tn), "cross_entropy");
    expect_error(weft_cross_entropy(x, tf), "cross_entropy"); // float targets
    expect_error(weft_cross_entropy(x, t2), "cross_entropy"); // N mismatch
    expect_error(weft_cross_entropy(xi, tok), "cross_entropy");
    expect_error(weft_cross_entropy(tok, tok), "cross_entropy");
    weft_tensor *x2 = weft_tensor_ones(WEFT_DIMS(4, 3), WEFT_F32), *x64 = weft_tensor_ones(WEFT_DIMS(3, 4), WEFT_F64);
    expect_error(weft_bce_with_logits(x, x2), "bce_with_logits");  // shapes differ
    expect_error(weft_bce_with_logits(x, x64), "bce_with_logits"); // dtypes differ
    expect_error(weft_bce_with_logits(xi, xi), "bce_with_logits"); // integer logits
    expect_error(weft_bce_with_logits(NULL, x), "bce_with_logits");
    expect_error(weft_leaky_relu(xi, 0.1), "leaky_relu");
    expect_error(weft_leaky_relu(x, NAN), "leaky_relu");
    weft_tensor *ts[] = {x, xi, tb, tn, tok, tf, t2, x2, x64};
    for (int i = 0; i < 9; i++) weft_tensor_free(ts[i]);
}

int main(void) {
    RUN(test_forward);
    RUN(test_stability);
    RUN(test_backward);
    RUN(test_backward_expanded_grad);
    RUN(test_backward_f32);
    RUN(test_ce_forward);
    RUN(test_ce_backward);
    RUN(test_ce_half);
    RUN(test_softmax_half);
    RUN(test_bce_leaky);
    RUN(test_errors);
    return wt_summary();
}
