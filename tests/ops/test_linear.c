// linear and linear_gelu (F.linear with the bias and GELU, exact or tanh, in the
// product's epilogue): values against a naive double reference (2-D, 3-D and 1-D x, no
// bias, strided x, a transposed-view weight, f32 and f64, 1 and 2 threads),
// finite-difference gradients of every input, and errors that name the op.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h" // weft_op_find, weft_op_apply: linear_gelu's attr as a graph file could give it
#include "weft_test.h"

// act: 0 none, 1 exact GELU, 2 GELU's tanh approximation (PyTorch's formulas).
static double act_of(int act, double s) {
    if (act == 1) return 0.5 * s * (1 + erf(s / sqrt(2.0)));
    if (act == 2) return 0.5 * s * (1 + tanh(0.7978845608028654 * (s + 0.044715 * s * s * s)));
    return s;
}
static weft_tensor *lin(int act, weft_tensor *x, weft_tensor *w, weft_tensor *b) {
    return act == 2 ? weft_linear_gelu_tanh(x, w, b) : act ? weft_linear_gelu(x, w, b) : weft_linear(x, w, b);
}

// y[r, n] = act(sum_k x[r, k] w[n, k] + b[n]) over x's rows (read element by element).
static double *ref_linear(const weft_tensor *x, const weft_tensor *w, const weft_tensor *b, int act, int64_t *rows) {
    int nd = weft_tensor_ndim(x);
    const int64_t *xs = weft_tensor_sizes(x);
    int64_t K = xs[nd - 1], N = weft_tensor_sizes(w)[0], R = 1;
    for (int d = 0; d < nd - 1; d++) R *= xs[d];
    double *y = calloc((size_t)(R * N + 1), sizeof(double));
    for (int64_t r = 0; r < R; r++)
        for (int64_t n = 0; n < N; n++) {
            int64_t ix[8], rem = r;
            for (int d = nd - 2; d >= 0; d--) {
                ix[d] = rem % xs[d];
                rem /= xs[d];
            }
            double s = 0, v;
            if (b) {
                weft_tensor_get(b, (int64_t[]){n}, &v);
                s = v;
            }
            for (int64_t k = 0; k < K; k++) {
                double a, c;
                ix[nd - 1] = k;
                weft_tensor_get(x, ix, &a);
                weft_tensor_get(w, (int64_t[]){n, k}, &c);
                s += a * c;
            }
            y[r * N + n] = act_of(act, s);
        }
    *rows = R;
    return y;
}

static weft_tensor *randt(int nd, const int64_t *sz, weft_dtype dt, uint64_t seed) {
    weft_tensor *t = wt_rand64(nd, sz, -1, 1, seed, false), *c = weft_cast(t, dt);
    weft_tensor_free(t);
    return c;
}

static void check_case(const char *what, weft_tensor *x, weft_tensor *w, weft_tensor *b, double tol) {
    char buf[128];
    for (int act = 0; act < 3; act++) {
        int64_t R, N = weft_tensor_sizes(w)[0];
        double *ref = ref_linear(x, w, b, act, &R);
        weft_tensor *y = lin(act, x, w, b);
        snprintf(buf, sizeof buf, "%s%s", what, act == 2 ? " gelu_tanh" : act ? " gelu" : "");
        CHECK(y != NULL);
        if (y) {
            int nd = weft_tensor_ndim(x);
            CHECK(weft_tensor_ndim(y) == nd);
            CHECK(weft_tensor_sizes(y)[nd - 1] == N);
            wt_check_values(buf, y, ref, R * N, tol);
        }
        weft_tensor_free(y);
        free(ref);
    }
}

static void test_values(void) {
    for (int di = 0; di < 2; di++) {
        weft_dtype dt = di ? WEFT_F32 : WEFT_F64;
        double tol = di ? 2e-5 : 1e-12;
        weft_tensor *x = wt_keep(randt(WEFT_DIMS(7, 5), dt, 1)), *w = wt_keep(randt(WEFT_DIMS(4, 5), dt, 2));
        weft_tensor *b = wt_keep(randt(WEFT_DIMS(4), dt, 3));
        check_case("2-d", x, w, b, tol);
        check_case("2-d no bias", x, w, NULL, tol);
        weft_tensor *x3 = wt_keep(randt(WEFT_DIMS(2, 3, 5), dt, 4));
        check_case("3-d", x3, w, b, tol);
        weft_tensor *x1 = wt_keep(randt(WEFT_DIMS(5), dt, 5));
        check_case("1-d", x1, w, b, tol);
        weft_tensor *y1 = wt_keep(weft_linear(x1, w, b));
        CHECK(y1 && weft_tensor_ndim(y1) == 1 && weft_tensor_sizes(y1)[0] == 4);
        // strided x: every other row of (2,6,5), and x as a transposed view
        weft_tensor *xb = wt_keep(randt(WEFT_DIMS(2, 6, 5), dt, 6)), *xs = wt_keep(weft_slice(xb, 1, 0, 6, 2));
        check_case("strided rows", xs, w, b, tol);
        weft_tensor *xt0 = wt_keep(randt(WEFT_DIMS(5, 7), dt, 7)), *xt = wt_keep(weft_transpose(xt0, 0, 1));
        check_case("transposed x", xt, w, b, tol);
        // weight as a transposed view of a (K, N) tensor, bias as a strided slice
        weft_tensor *wt0 = wt_keep(randt(WEFT_DIMS(5, 4), dt, 8)), *wtv = wt_keep(weft_transpose(wt0, 0, 1));
        weft_tensor *b8 = wt_keep(randt(WEFT_DIMS(8), dt, 9)), *bs = wt_keep(weft_slice(b8, 0, 0, 8, 2));
        check_case("transposed weight, strided bias", x3, wtv, bs, tol);
        // empty rows
        weft_tensor *x0 = wt_keep(randt(WEFT_DIMS(0, 5), dt, 10)), *y0 = wt_keep(weft_linear_gelu(x0, w, b));
        CHECK(y0 && weft_tensor_numel(y0) == 0);
        // K = 0: an empty sum, so y = b on every row
        weft_tensor *xk = wt_keep(randt(WEFT_DIMS(3, 0), dt, 14)), *wk = wt_keep(randt(WEFT_DIMS(4, 0), dt, 15));
        check_case("K = 0", xk, wk, b, tol);
    }
    wt_drop_all();
}

// Big enough for the threaded epilogue (rows split into tasks): the same numbers at 1 and 2 threads.
static void test_threads(void) {
    weft_tensor *x = wt_keep(randt(WEFT_DIMS(300, 64), WEFT_F32, 11)), *w = wt_keep(randt(WEFT_DIMS(130, 64), WEFT_F32, 12));
    weft_tensor *b = wt_keep(randt(WEFT_DIMS(130), WEFT_F32, 13));
    int64_t R;
    int nt = weft_num_threads();
    for (int act = 1; act < 3; act++) {
        double *ref = ref_linear(x, w, b, act, &R);
        for (int t = 1; t <= 2; t++) {
            weft_set_num_threads(t);
            weft_tensor *y = wt_keep(lin(act, x, w, b));
            wt_check_values(t == 1 ? "1 thread" : "2 threads", y, ref, R * 130, 2e-5);
        }
        free(ref);
    }
    weft_set_num_threads(nt);
    wt_drop_all();
}

typedef struct gcase {
    int act;
    bool bias;
} gcase;
static weft_tensor *f_lin(weft_tensor *const *in, void *u) {
    const gcase *c = u;
    return lin(c->act, in[0], in[1], c->bias ? in[2] : NULL);
}

static void test_backward(void) {
    for (int g = 0; g < 3; g++)
        for (int bi = 0; bi < 2; bi++) {
            gcase c = {g, bi};
            const int64_t xs[3][3] = {{3, 4}, {2, 3, 4}, {4}};
            const int nds[3] = {2, 3, 1};
            for (int s = 0; s < 3; s++) {
                weft_tensor *in[3] = {wt_rand64(nds[s], xs[s], -1.5, 1.5, 20 + s, true),
                                      wt_rand64(WEFT_DIMS(5, 4), -1, 1, 30 + s, true),
                                      wt_rand64(WEFT_DIMS(5), -1, 1, 40 + s, true)};
                CHECK_GRAD(f_lin, bi ? 3 : 2, in, &c);
                for (int i = 0; i < 3; i++) weft_tensor_free(in[i]);
            }
        }
    // closed form for sum(linear(x, w, b)): grad_x[r,k] = sum_n w[n,k], grad_w[n,k] = sum_r x[r,k], grad_b[n] = rows
    weft_tensor *x = wt_keep(wt_rand64(WEFT_DIMS(3, 2), -1, 1, 50, true));
    weft_tensor *w = wt_keep(wt_rand64(WEFT_DIMS(4, 2), -1, 1, 51, true));
    weft_tensor *b = wt_keep(wt_rand64(WEFT_DIMS(4), -1, 1, 52, true));
    weft_tensor *s = wt_keep(weft_sum(wt_keep(weft_linear(x, w, b)), 0, NULL, false));
    CHECK(weft_backward(s, NULL, NULL) == WEFT_OK);
    double xv[6], wv[8], gx[6], gw[8], gb[4] = {3, 3, 3, 3};
    weft_tensor_to_f64(x, xv, 6);
    weft_tensor_to_f64(w, wv, 8);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 2; k++) gx[r * 2 + k] = wv[k] + wv[2 + k] + wv[4 + k] + wv[6 + k];
    for (int n = 0; n < 4; n++)
        for (int k = 0; k < 2; k++) gw[n * 2 + k] = xv[k] + xv[2 + k] + xv[4 + k];
    wt_check_values("grad x", weft_tensor_grad(x), gx, 6, 1e-12);
    wt_check_values("grad w", weft_tensor_grad(w), gw, 8, 1e-12);
    wt_check_values("grad b", weft_tensor_grad(b), gb, 4, 1e-12);
    wt_drop_all();
}

static void expect_error(weft_tensor *r, const char *op) {
    CHECK(r == NULL);
    CHECK(wt_error_has(op));
    weft_tensor_free(r);
    weft_clear_error();
}

static void test_errors(void) {
    weft_tensor *x = wt_keep(weft_tensor_ones(WEFT_DIMS(2, 3), WEFT_F32));
    weft_tensor *w = wt_keep(weft_tensor_ones(WEFT_DIMS(4, 3), WEFT_F32)), *b = wt_keep(weft_tensor_ones(WEFT_DIMS(4), WEFT_F32));
    weft_tensor *wk = wt_keep(weft_tensor_ones(WEFT_DIMS(4, 2), WEFT_F32)), *b5 = wt_keep(weft_tensor_ones(WEFT_DIMS(5), WEFT_F32));
    weft_tensor *wd = wt_keep(weft_tensor_ones(WEFT_DIMS(4, 3), WEFT_F64)), *xi = wt_keep(weft_tensor_ones(WEFT_DIMS(2, 3), WEFT_I32));
    weft_tensor *w3 = wt_keep(weft_tensor_ones(WEFT_DIMS(1, 4, 3), WEFT_F32)), *s = wt_keep(weft_tensor_scalar(1, WEFT_F32));
    expect_error(weft_linear(x, wk, b), "linear");       // K mismatch
    expect_error(weft_linear_gelu(x, w, b5), "linear_gelu"); // bias length
    expect_error(weft_linear(x, wd, NULL), "linear");    // dtype mismatch
    expect_error(weft_linear(xi, xi, NULL), "linear");   // integer dtype
    expect_error(weft_linear(x, w3, NULL), "linear");    // 3-d weight
    expect_error(weft_linear(s, w, NULL), "linear");     // 0-d x
    expect_error(weft_linear(NULL, w, b), "linear");
    // linear_gelu's approximate attr: 0 (exact) or 1 (tanh), nothing else
    weft_tensor *in[3] = {x, w, b}, *out[WEFT_MAX_OP_OUT] = {0};
    for (int64_t a = -1; a <= 2; a += 3) {
        weft_attrs at = {.i = {a}};
        CHECK(weft_op_apply(weft_op_find("linear_gelu"), 3, in, &at, out) != WEFT_OK && wt_error_has("approximate"));
        weft_clear_error();
    }
    wt_drop_all();
}

// t rounded to dt and back to f32.
static weft_tensor *rounded32(weft_tensor *t, weft_dtype dt) {
    weft_tensor *r = weft_cast(t, dt), *f = weft_cast(r, WEFT_F32);
    weft_tensor_free(r);
    return f;
}

// bf16 / f16: sums, bias and GELU in f32 on the operands' values, each output rounded once (bit for bit),
// and the gradients (half, from f32 math) near the f32 chain's; under autocast f32 operands run that way.
static void test_half(void) {
    for (int hi = 0; hi < 2; hi++) {
        weft_dtype lo = hi ? WEFT_F16 : WEFT_BF16;
        weft_tensor *x = wt_keep(randt(WEFT_DIMS(2, 5, 12), WEFT_F32, 60)), *w = wt_keep(randt(WEFT_DIMS(7, 12), WEFT_F32, 61));
        weft_tensor *b = wt_keep(randt(WEFT_DIMS(7), WEFT_F32, 62));
        weft_tensor *xl = wt_keep(weft_cast(x, lo)), *wl = wt_keep(weft_cast(w, lo)), *bl = wt_keep(weft_cast(b, lo));
        weft_tensor *xr = wt_keep(rounded32(x, lo)), *wr = wt_keep(rounded32(w, lo)), *br = wt_keep(rounded32(b, lo));
        for (int g = 0; g < 3; g++) {
            weft_tensor *y = wt_keep(lin(g, xl, wl, bl));
            CHECK(y && weft_tensor_dtype(y) == lo);
            weft_tensor *ref = wt_keep(weft_cast(wt_keep(lin(g, xr, wr, br)), lo));
            wt_check_same(g == 2 ? "half linear_gelu_tanh" : g ? "half linear_gelu" : "half linear", y, ref, 0);
            // under autocast: the f32 operands cast down, the result stays in lo
            weft_autocast_set(lo);
            weft_tensor *ya = wt_keep(lin(g, x, w, b));
            weft_autocast_set(WEFT_F32);
            wt_check_same("autocast linear", ya, y, 0);
        }
        // gradients: half leaves get half gradients near the f32 ones of the rounded operands
        weft_tensor *lx = wt_keep(weft_tensor_detach(xl)), *lw = wt_keep(weft_tensor_detach(wl)), *lb = wt_keep(weft_tensor_detach(bl));
        weft_tensor *fx = wt_keep(weft_tensor_detach(xr)), *fw = wt_keep(weft_tensor_detach(wr)), *fb = wt_keep(weft_tensor_detach(br));
        weft_tensor *leaves[6] = {lx, lw, lb, fx, fw, fb};
        for (int i = 0; i < 6; i++) weft_tensor_set_requires_grad(leaves[i], true);
        weft_tensor *yl = wt_keep(weft_cast(wt_keep(lin(1 + hi, lx, lw, lb)), WEFT_F32)); // exact (bf16), tanh (f16)
        weft_tensor *yf = wt_keep(lin(1 + hi, fx, fw, fb));
        CHECK(weft_backward(wt_keep(weft_sum(yl, 0, NULL, false)), NULL, NULL) == WEFT_OK);
        CHECK(weft_backward(wt_keep(weft_sum(yf, 0, NULL, false)), NULL, NULL) == WEFT_OK);
        static const char *const nm[3] = {"half grad x", "half grad w", "half grad b"};
        for (int i = 0; i < 3; i++) {
            weft_tensor *gl = weft_tensor_grad(leaves[i]);
            CHECK(gl && weft_tensor_dtype(gl) == lo);
            if (gl) wt_check_same(nm[i], wt_keep(weft_cast(gl, WEFT_F32)), weft_tensor_grad(leaves[3 + i]), 2e-2);
        }
    }
    wt_drop_all();
}

// ---- gelu_linear and matmul_dgelu: the MLP pair with GELU's backward inside the second product ----
#include "ops/linalg.h" // weft_matmul_dgelu (internal op)
static weft_tensor *gelu_of(weft_tensor *h, bool t) { return t ? weft_gelu_tanh(h) : weft_gelu(h); }
typedef struct mcase {
    bool tanh_form, bias;
} mcase;
// f(h, w, b) = gelu(h) w^T + b through gelu_linear, with a = gelu(h) computed here (h's one path to y)
static weft_tensor *f_gelu_linear(weft_tensor *const *in, void *u) {
    const mcase *c = u;
    weft_tensor *a = gelu_of(in[0], c->tanh_form);
    weft_tensor *y = a ? weft_gelu_linear(in[0], a, in[1], c->bias ? in[2] : NULL, c->tanh_form) : NULL;
    weft_tensor_free(a);
    return y;
}
static weft_tensor *f_dgelu(weft_tensor *const *in, void *u) {
    return weft_matmul_dgelu(in[0], in[1], in[2], ((const mcase *)u)->tanh_form);
}

static void test_mlp_pair(void) {
    for (int t = 0; t < 2; t++) {
        // values: matmul_dgelu against (p W) ∘ f'(h) in double; gelu_linear against gelu(h) W^T + b
        weft_tensor *p = wt_keep(randt(WEFT_DIMS(2, 3, 5), WEFT_F64, 70)), *w = wt_keep(randt(WEFT_DIMS(5, 4), WEFT_F64, 71));
        weft_tensor *h = wt_keep(wt_rand64(WEFT_DIMS(2, 3, 4), -3, 3, 72, false));
        double pv[30], wv[20], hv[24], ref[24];
        weft_tensor_to_f64(p, pv, 30), weft_tensor_to_f64(w, wv, 20), weft_tensor_to_f64(h, hv, 24);
        for (int r = 0; r < 6; r++)
            for (int k = 0; k < 4; k++) {
                double m = 0, x = hv[r * 4 + k], d;
                for (int n = 0; n < 5; n++) m += pv[r * 5 + n] * wv[n * 4 + k];
                if (t) {
                    double th = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
                    d = 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
                } else {
                    d = 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
                }
                ref[r * 4 + k] = m * d;
            }
        wt_check_values(t ? "matmul_dgelu tanh f64" : "matmul_dgelu f64", wt_keep(weft_matmul_dgelu(p, w, h, t)), ref, 24, 1e-13);
        weft_tensor *pf = wt_keep(weft_cast(p, WEFT_F32)), *wf = wt_keep(weft_cast(w, WEFT_F32)), *hf = wt_keep(weft_cast(h, WEFT_F32));
        wt_check_values("matmul_dgelu f32", wt_keep(weft_matmul_dgelu(pf, wf, hf, t)), ref, 24, 2e-5);
        // bf16: the f32 math on the operands' values, rounded once
        weft_tensor *pl = wt_keep(weft_cast(p, WEFT_BF16)), *wl = wt_keep(weft_cast(w, WEFT_BF16)), *hl = wt_keep(weft_cast(h, WEFT_BF16));
        weft_tensor *q32 = wt_keep(weft_matmul_dgelu(wt_keep(weft_cast(pl, WEFT_F32)), wt_keep(weft_cast(wl, WEFT_F32)),
                                                     wt_keep(weft_cast(hl, WEFT_F32)), t));
        wt_check_same("matmul_dgelu bf16", wt_keep(weft_matmul_dgelu(pl, wl, hl, t)), wt_keep(weft_cast(q32, WEFT_BF16)), 0);
        // gelu_linear's forward is linear on a
        weft_tensor *w2 = wt_keep(randt(WEFT_DIMS(3, 4), WEFT_F64, 73)), *b2 = wt_keep(randt(WEFT_DIMS(3), WEFT_F64, 74));
        weft_tensor *a = wt_keep(gelu_of(h, t));
        wt_check_same("gelu_linear forward", wt_keep(weft_gelu_linear(h, a, w2, b2, t)), wt_keep(weft_linear(a, w2, b2)), 0);
        // gradients by finite differences: every input of each, with and without the bias
        for (int bi = 0; bi < 2; bi++) {
            mcase c = {t, bi};
            weft_tensor *in[3] = {wt_rand64(WEFT_DIMS(2, 3, 4), -2.5, 2.5, 80 + bi, true), wt_rand64(WEFT_DIMS(3, 4), -1, 1, 82, true),
                                  wt_rand64(WEFT_DIMS(3), -1, 1, 83, true)};
            CHECK_GRAD(f_gelu_linear, bi ? 3 : 2, in, &c);
            for (int i = 0; i < 3; i++) weft_tensor_free(in[i]);
        }
        mcase c = {t, false};
        weft_tensor *in[3] = {wt_rand64(WEFT_DIMS(2, 3, 5), -1, 1, 84, true), wt_rand64(WEFT_DIMS(5, 4), -1, 1, 85, true),
                              wt_rand64(WEFT_DIMS(2, 3, 4), -2.5, 2.5, 86, true)};
        CHECK_GRAD(f_dgelu, 3, in, &c);
        for (int i = 0; i < 3; i++) weft_tensor_free(in[i]);
        // through an MLP: pre + gelu_linear gives linear_gelu then linear's gradients (f64: to rounding)
        weft_tensor *x = wt_keep(wt_rand64(WEFT_DIMS(4, 6), -1, 1, 90, true)), *w1 = wt_keep(wt_rand64(WEFT_DIMS(5, 6), -1, 1, 91, true));
        weft_tensor *b1 = wt_keep(wt_rand64(WEFT_DIMS(5), -1, 1, 92, true)), *w3 = wt_keep(wt_rand64(WEFT_DIMS(2, 5), -1, 1, 93, true));
        weft_tensor *hh, *aa = wt_keep(weft_linear_gelu_pre(x, w1, b1, t, &hh));
        CHECK(aa && hh);
        wt_keep(hh);
        weft_tensor *y = wt_keep(weft_gelu_linear(hh, aa, w3, NULL, t));
        weft_tensor *leaves[4] = {x, w1, b1, w3};
        double gf[4][30];
        CHECK(weft_backward(wt_keep(weft_sum(y, 0, NULL, false)), NULL, NULL) == WEFT_OK);
        for (int i = 0; i < 4; i++) {
            weft_tensor_to_f64(weft_tensor_grad(leaves[i]), gf[i], weft_tensor_numel(leaves[i]));
            weft_tensor_zero_grad(leaves[i]);
        }
        weft_tensor *y2 = wt_keep(weft_linear(wt_keep(t ? weft_linear_gelu_tanh(x, w1, b1) : weft_linear_gelu(x, w1, b1)), w3, NULL));
        CHECK(weft_backward(wt_keep(weft_sum(y2, 0, NULL, false)), NULL, NULL) == WEFT_OK);
        static const char *const nm[4] = {"mlp pair grad x", "mlp pair grad w1", "mlp pair grad b1", "mlp pair grad w2"};
        for (int i = 0; i < 4; i++) wt_check_values(nm[i], weft_tensor_grad(leaves[i]), gf[i], weft_tensor_numel(leaves[i]), 1e-13);
        wt_drop_all();
    }
    // refusals that name the op
    weft_tensor *p = wt_keep(weft_tensor_ones(WEFT_DIMS(2, 5), WEFT_F32)), *w = wt_keep(weft_tensor_ones(WEFT_DIMS(5, 4), WEFT_F32));
    weft_tensor *h = wt_keep(weft_tensor_ones(WEFT_DIMS(2, 4), WEFT_F32)), *h3 = wt_keep(weft_tensor_ones(WEFT_DIMS(2, 3), WEFT_F32));
    expect_error(weft_matmul_dgelu(p, w, h3, false), "matmul_dgelu"); // h's K
    expect_error(weft_matmul_dgelu(h, w, h, false), "matmul_dgelu");  // p's N
    weft_tensor *w2 = wt_keep(weft_tensor_ones(WEFT_DIMS(3, 4), WEFT_F32));
    expect_error(weft_gelu_linear(h, h3, w2, NULL, false), "gelu_linear"); // a is not h's shape
    expect_error(weft_gelu_linear(h, h, p, NULL, false), "gelu_linear");   // weight's K
    weft_tensor *in[3] = {p, w, h}, *out[WEFT_MAX_OP_OUT] = {0};
    weft_attrs at = {.i = {2}};
    CHECK(weft_op_apply(weft_op_find("matmul_dgelu"), 3, in, &at, out) != WEFT_OK && wt_error_has("approximate"));
    weft_clear_error();
    weft_tensor *hh;
    expect_error(weft_linear_gelu_pre(wt_keep(weft_tensor_ones(WEFT_DIMS(4), WEFT_F32)), w2, NULL, false, &hh), "linear_gelu");
    CHECK(hh == NULL);
    expect_error(weft_linear_gelu_pre(h, w2, NULL, false, NULL), "linear_gelu"); // nowhere to put h
    wt_drop_all();
}

int main(void) {
    RUN(test_values);
    RUN(test_threads);
    RUN(test_backward);
    RUN(test_errors);
    RUN(test_half);
    RUN(test_mlp_pair);
    return wt_summary();
}
