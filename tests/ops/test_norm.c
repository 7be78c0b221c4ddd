// layer_norm and batch_norm: forward against naive f64 loops, backward by
// finite differences and against the same formula built from primitive ops,
// running-stat updates against the closed form, error cases; layer_norm of a
// bf16 / f16 input against the f64 op on its values, and its bf16 / f16 output
// against a cast of the f32 one.
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "weft_test.h"

static void free_all(int n, weft_tensor **ts) {
    for (int i = 0; i < n; i++) weft_tensor_free(ts[i]);
}
static double *values(const weft_tensor *t) {
    double *v = malloc(sizeof(double) * (size_t)(weft_tensor_numel(t) + 1));
    weft_tensor_to_f64(t, v, weft_tensor_numel(t));
    return v;
}
static bool err_names(const char *op) { return strstr(weft_last_error(), op) != NULL; }

// ---------------------------------------------------------------- layer_norm
// y[r, i] = (x - mean_r) / sqrt(var_r + eps) * w[i] + b[i] over rows of C.
static void ref_layer_norm(const double *x, const double *w, const double *b, int64_t R, int64_t C, double eps,
                           double *y) {
    for (int64_t r = 0; r < R; r++) {
        double m = 0, v = 0;
        for (int64_t i = 0; i < C; i++) m += x[r * C + i];
        m /= (double)C;
        for (int64_t i = 0; i < C; i++) v += (x[r * C + i] - m) * (x[r * C + i] - m);
        v /= (double)C;
        for (int64_t i = 0; i < C; i++)
            y[r * C + i] = (x[r * C + i] - m) / sqrt(v + eps) * (w ? w[i] : 1.0) + (b ? b[i] : 0.0);
    }
}

static void test_ln_forward(void) {
    const int64_t xs[3] = {3, 4, 5};
    for (int n = 1; n <= 3; n++)
        for (int flags = 0; flags < 4; flags++)
            for (int f32 = 0; f32 < 2; f32++) {
                weft_tensor *x = wt_rand64(3, xs, -2, 3, 11 + n, false);
                weft_tensor *w = (flags & 1) ? wt_rand64(n, xs + 3 - n, 0.5, 1.5, 21, false) : NULL;
                weft_tensor *b = (flags & 2) ? wt_rand64(n, xs + 3 - n, -1, 1, 31, false) : NULL;
                int64_t C = 1;
                for (int d = 3 - n; d < 3; d++) C *= xs[d];
                double *xv = values(x), *wv = w ? values(w) : NULL, *bv = b ? values(b) : NULL;
                double *ref = malloc(sizeof(double) * 60);
                ref_layer_norm(xv, wv, bv, 60 / C, C, 1e-5, ref);
                weft_tensor *xc = f32 ? weft_cast(x, WEFT_F32) : weft_tensor_ref(x);
                weft_tensor *wc = w ? (f32 ? weft_cast(w, WEFT_F32) : weft_tensor_ref(w)) : NULL;
                weft_tensor *bc = b ? (f32 ? weft_cast(b, WEFT_F32) : weft_tensor_ref(b)) : NULL;
                weft_tensor *y = weft_layer_norm(xc, n, wc, bc, 1e-5);
                CHECK(y && weft_tensor_dtype(y) == (f32 ? WEFT_F32 : WEFT_F64));
                wt_check_values("layer_norm", y, ref, 60, f32 ? 1e-5 : 1e-12);
                weft_tensor *ts[] = {x, w, b, xc, wc, bc, y};
                free_all(7, ts);
                free(xv), free(wv), free(bv), free(ref);
            }
}

// A strided input: x^T with x (5,7): rows of the transposed view are columns of x.
static void test_ln_noncontiguous_forward(void) {
    const int64_t xs[2] = {5, 7};
    weft_tensor *x = wt_rand64(2, xs, -1, 1, 5, false);
    weft_tensor *xt = weft_transpose(x, 0, 1); // (7,5)
    CHECK(!weft_tensor_is_contiguous(xt));
    double *xv = values(x), xtv[35], ref[35];
    for (int i = 0; i < 7; i++)
        for (int j = 0; j < 5; j++) xtv[i * 5 + j] = xv[j * 7 + i];
    ref_layer_norm(xtv, NULL, NULL, 7, 5, 1e-5, ref);
    weft_tensor *y = weft_layer_norm(xt, 1, NULL, NULL, 1e-5);
    wt_check_values("layer_norm strided", y, ref, 35, 1e-12);
    weft_tensor *ts[] = {x, xt, y};
    free_all(3, ts);
    free(xv);
}

typedef struct {
    int n, hw, hb, transpose;
} ln_case;
// inputs: x, then weight and bias where the case has them
static weft_tensor *ln_fn(weft_tensor *const *in, void *user) {
    const ln_case *c = user;
    weft_tensor *x = c->transpose ? weft_transpose(in[0], 0, 1) : weft_tensor_ref(in[0]);
    weft_tensor *w = c->hw ? in[1] : NULL, *b = c->hb ? in[1 + c->hw] : NULL;
    weft_tensor *y = weft_layer_norm(x, c->n, w, b, 1e-5);
    weft_tensor_free(x);
    return y;
}

static void test_ln_gradcheck(void) {
    const int64_t xs[3] = {3, 4, 5};
    for (int n = 1; n <= 2; n++)
        for (int flags = 0; flags < 4; flags++) {
            ln_case c = {n, flags & 1, (flags >> 1) & 1, 0};
            weft_tensor *in[3];
            int k = 0;
            in[k++] = wt_rand64(3, xs, -2, 2, 100 + flags, true);
            if (c.hw) in[k++] = wt_rand64(n, xs + 3 - n, 0.5, 1.5, 200 + flags, true);
            if (c.hb) in[k++] = wt_rand64(n, xs + 3 - n, -1, 1, 300 + flags, true);
            CHECK_GRAD(ln_fn, k, in, &c);
            free_all(k, in);
        }
    // non-contiguous: the leaf is (6,4), layer_norm sees its (4,6) transpose
    ln_case c = {1, 1, 1, 1};
    const int64_t s[2] = {6, 4}, ws[1] = {6};
    weft_tensor *in[3] = {wt_rand64(2, s, -2, 2, 7, true), wt_rand64(1, ws, 0.5, 1.5, 8, true),
                          wt_rand64(1, ws, -1, 1, 9, true)};
    CHECK_GRAD(ln_fn, 3, in, &c);
    free_all(3, in);
}

// The same formula from primitive ops (differentiated by their own rules).
static weft_tensor *ln_composite(weft_tensor *x, weft_tensor *w, weft_tensor *b, double eps) {
    int ax = -1;
    weft_tensor *m = weft_mean(x, 1, &ax, true), *v = weft_var(x, 1, &ax, 0, true);
    weft_tensor *d = weft_sub(x, m), *ve = weft_add_scalar(v, eps), *rs = weft_rsqrt(ve), *n = weft_mul(d, rs);
    weft_tensor *nw = weft_mul(n, w), *y = weft_add(nw, b);
    weft_tensor *ts[] = {m, v, d, ve, rs, n, nw};
    free_all(7, ts);
    return y;
}

// Big enough for the threaded paths (per-thread dweight/dbias partials);
// checked against the composite in f64 and the f32 kernel against f64.
static void test_ln_backward_large(void) {
    const int64_t xs[2] = {96, 1000}, ws[1] = {1000};
    weft_tensor *x = wt_rand64(2, xs, -3, 3, 41, true), *w = wt_rand64(1, ws, 0.5, 1.5, 42, true),
                *b = wt_rand64(1, ws, -1, 1, 43, true), *gy = wt_rand64(2, xs, -1, 1, 44, false);
    weft_tensor *y = weft_layer_norm(x, 1, w, b, 1e-5);
    CHECK(weft_backward(y, gy, NULL) == WEFT_OK);
    double *dx = values(weft_tensor_grad(x)), *dw = values(weft_tensor_grad(w)), *db = values(weft_tensor_grad(b));
    double *yv = values(y);
    weft_tensor_zero_grad(x), weft_tensor_zero_grad(w), weft_tensor_zero_grad(b);
    weft_tensor *yc = ln_composite(x, w, b, 1e-5);
    wt_check_values("ln large forward", yc, yv, xs[0] * xs[1], 1e-10);
    CHECK(weft_backward(yc, gy, NULL) == WEFT_OK);
    wt_check_values("ln large dx", weft_tensor_grad(x), dx, xs[0] * xs[1], 1e-9);
    wt_check_values("ln large dw", weft_tensor_grad(w), dw, ws[0], 1e-9);
    wt_check_values("ln large db", weft_tensor_grad(b), db, ws[0], 1e-9);
    // f32 kernels against the f64 results
    weft_tensor *x32 = weft_cast(x, WEFT_F32), *w32 = weft_cast(w, WEFT_F32), *b32 = weft_cast(b, WEFT_F32),
                *g32 = weft_cast(gy, WEFT_F32);
    weft_tensor *xl = weft_tensor_detach(x32), *wl = weft_tensor_detach(w32), *bl = weft_tensor_detach(b32);
    weft_tensor_set_requires_grad(xl, true), weft_tensor_set_requires_grad(wl, true);
    weft_tensor_set_requires_grad(bl, true);
    weft_tensor *y32 = weft_layer_norm(xl, 1, wl, bl, 1e-5);
    wt_check_values("ln f32 forward", y32, yv, xs[0] * xs[1], 2e-5);
    CHECK(weft_backward(y32, g32, NULL) == WEFT_OK);
    wt_check_values("ln f32 dx", weft_tensor_grad(xl), dx, xs[0] * xs[1], 1e-4);
    wt_check_values("ln f32 dw", weft_tensor_grad(wl), dw, ws[0], 1e-4);
    wt_check_values("ln f32 db", weft_tensor_grad(bl), db, ws[0], 1e-4);
    weft_tensor *ts[] = {x, w, b, gy, y, yc, x32, w32, b32, g32, xl, wl, bl, y32};
    free_all(14, ts);
    free(dx), free(dw), free(db), free(yv);
}

// Only x requires grad: dweight/dbias are skipped, dx unchanged; and a second
// backward through the fused backward op is an error, not a crash.
static void test_ln_partial_needs(void) {
    const int64_t xs[2] = {4, 6}, ws[1] = {6};
    weft_tensor *x = wt_rand64(2, xs, -1, 1, 1, true), *w = wt_rand64(1, ws, 0.5, 1.5, 2, false);
    weft_tensor *y = weft_layer_norm(x, 1, w, NULL, 1e-5), *s = weft_sum(y, 0, NULL, false);
    weft_tensor *y2 = weft_mul(y, y), *s2 = weft_sum(y2, 0, NULL, false);
    weft_backward_opts keep = {.retain_graph = true};
    CHECK(weft_backward(s, NULL, &keep) == WEFT_OK);
    CHECK(weft_tensor_grad(x) != NULL);
    CHECK(weft_tensor_grad(w) == NULL);
    weft_tensor_zero_grad(x);
    weft_backward_opts o = {.create_graph = true};
    CHECK(weft_backward(s2, NULL, &o) == WEFT_OK);
    weft_tensor *g = weft_tensor_ref(weft_tensor_grad(x));
    weft_tensor *gs = weft_sum(g, 0, NULL, false);
    CHECK(gs == NULL || weft_backward(gs, NULL, NULL) != WEFT_OK); // layer_norm_backward has no backward
    weft_tensor_zero_grad(x); // the create_graph gradient refers back to x: break the cycle
    weft_tensor *ts[] = {x, w, y, s, y2, s2, g, gs};
    free_all(8, ts);
    weft_clear_error();
}

// A bf16 / f16 x (a linear layer's output under autocast) with f32 weight and bias: read as it is, y f32,
// x's gradient in x's dtype, the weight's and bias's in f32. References: the f64 op on the half values.
static void test_ln_half(void) {
    const int64_t R = 6, C = 40, xs[2] = {R, C};
    const weft_dtype dts[2] = {WEFT_BF16, WEFT_F16};
    for (int k = 0; k < 2; k++) {
        weft_tensor *x64 = wt_rand64(2, xs, -2, 3, 71 + k, false), *xh = weft_cast(x64, dts[k]);
        weft_tensor *w64 = wt_rand64(1, &C, 0.5, 1.5, 73, false), *b64 = wt_rand64(1, &C, -1, 1, 74, false);
        weft_tensor *w = weft_cast(w64, WEFT_F32), *b = weft_cast(b64, WEFT_F32), *gw = wt_rand64(2, xs, -1, 1, 75, false);
        weft_tensor *gw32 = weft_cast(gw, WEFT_F32);
        // the reference: f64 on the half values, the f32 parameters' values
        weft_tensor *xr = weft_cast(xh, WEFT_F64), *wr = weft_cast(w, WEFT_F64), *br = weft_cast(b, WEFT_F64);
        weft_tensor *ps[6] = {xh, w, b, xr, wr, br};
        for (int i = 0; i < 6; i++) weft_tensor_set_requires_grad(ps[i], true);
        weft_tensor *y = weft_layer_norm(xh, 1, w, b, 1e-5), *yr = weft_layer_norm(xr, 1, wr, br, 1e-5);
        CHECK(y && yr && weft_tensor_dtype(y) == WEFT_F32);
        double *ref = values(yr);
        wt_check_values("layer_norm half x", y, ref, R * C, 2e-5);
        weft_tensor *m = weft_mul(y, gw32), *mr = weft_mul(yr, gw), *l = weft_sum(m, 0, NULL, false),
                    *lr = weft_sum(mr, 0, NULL, false);
        CHECK(l && lr && weft_backward(l, NULL, NULL) == WEFT_OK && weft_backward(lr, NULL, NULL) == WEFT_OK);
        weft_tensor *gx = weft_tensor_grad(xh), *gwt = weft_tensor_grad(w), *gb = weft_tensor_grad(b);
        CHECK(gx && weft_tensor_dtype(gx) == dts[k] && gwt && weft_tensor_dtype(gwt) == WEFT_F32 && gb);
        if (gx && gwt && gb) {
            double *gxr = values(weft_tensor_grad(xr)), *gxv = values(gx), worst = 0, big = 0;
            for (int64_t i = 0; i < R * C; i++) big = fmax(big, fabs(gxr[i]));
            for (int64_t i = 0; i < R * C; i++) // one rounding of x's dtype, plus f32 sums
                worst = fmax(worst, fabs(gxv[i] - gxr[i]) - (k ? 0x1p-11 : 0x1p-8) * fabs(gxr[i]));
            CHECK(worst <= 1e-5 * big);
            free(gxr), free(gxv);
            double *gwr = values(weft_tensor_grad(wr)), *gbr = values(weft_tensor_grad(br));
            wt_check_values("layer_norm half x: weight grad", gwt, gwr, C, 1e-5);
            wt_check_values("layer_norm half x: bias grad", gb, gbr, C, 1e-5);
            free(gwr), free(gbr);
        }
        // a half weight is an error that names the op (the parameters of a half x are f32)
        weft_tensor *wh = weft_cast(w, dts[k]), *bad = weft_layer_norm(xh, 1, wh, NULL, 1e-5);
        CHECK(bad == NULL && err_names("layer_norm"));
        weft_clear_error();
        weft_tensor *ts[] = {x64, xh, w64, b64, w, b, gw, gw32, xr, wr, br, y, yr, m, mr, l, lr, wh, bad};
        free_all(19, ts);
        free(ref);
    }
}

// y written in bf16 / f16 (weft_layer_norm_to, weft_add_layer_norm_to): the same bits as casting the f32 y,
// and, with a half gradient flowing back into it, the same gradients as the cast's backward gives (x f32 or
// half, with weight and bias, and through add_layer_norm's sum and y both); the half gy is read as it is.
// A half y of f64 statistics is an error naming the op.
static void test_ln_half_out(void) {
    const int64_t R = 5, C = 48, xs[2] = {R, C};
    const weft_dtype dts[2] = {WEFT_BF16, WEFT_F16};
    for (int k = 0; k < 2; k++)
        for (int xk = 0; xk < 3; xk++) { // x: f32, bf16, f32 through add_layer_norm (a bf16 residual)
            weft_dtype yt = dts[k];
            weft_tensor *x64 = wt_rand64(2, xs, -2, 3, 81 + xk, false), *r64 = wt_rand64(2, xs, -1, 1, 84, false);
            weft_tensor *w64 = wt_rand64(1, &C, 0.5, 1.5, 85, false), *b64 = wt_rand64(1, &C, -1, 1, 86, false);
            weft_tensor *c64 = wt_rand64(2, xs, -1, 1, 87, false), *cf = wt_keep(weft_cast(c64, WEFT_F32));
            weft_tensor *p[2][4], *y[2], *sm[2] = {NULL, NULL};
            for (int run = 0; run < 2; run++) { // 0: y in yt; 1: f32 y, then a cast
                p[run][0] = weft_cast(x64, xk == 1 ? WEFT_BF16 : WEFT_F32);
                p[run][1] = weft_cast(r64, WEFT_BF16);
                p[run][2] = weft_cast(w64, WEFT_F32);
                p[run][3] = weft_cast(b64, WEFT_F32);
                for (int i = 0; i < 4; i++) weft_tensor_set_requires_grad(p[run][i], true);
                weft_dtype want = run ? WEFT_F32 : yt;
                if (xk < 2) {
                    y[run] = weft_layer_norm_to(p[run][0], 1, p[run][2], p[run][3], 1e-5, want);
                } else {
                    CHECK(weft_add_layer_norm_to(p[run][0], p[run][1], 1, p[run][2], p[run][3], 1e-5, want, &sm[run],
                                                 &y[run]) == WEFT_OK);
                }
                if (run && y[run]) {
                    weft_tensor *t = weft_cast(y[run], yt);
                    weft_tensor_free(y[run]);
                    y[run] = t;
                }
                CHECK(y[run] && weft_tensor_dtype(y[run]) == yt);
                if (!y[run]) return;
                // loss = sum(f32(y) * c) (+ sum(sum * c) through add_layer_norm's sum): gy arrives in yt
                weft_tensor *l = wt_keep(weft_sum(wt_keep(weft_mul(wt_keep(weft_cast(y[run], WEFT_F32)), cf)), 0, NULL, false));
                if (sm[run]) l = wt_keep(weft_add(l, wt_keep(weft_sum(wt_keep(weft_mul(sm[run], cf)), 0, NULL, false))));
                CHECK(weft_backward(l, NULL, NULL) == WEFT_OK);
            }
            wt_check_same("half y == cast of the f32 y", y[0], y[1], 0);
            if (xk == 2) wt_check_same("add_layer_norm_to sum", sm[0], sm[1], 0);
            const char *names[4] = {"dx", "dr", "dweight", "dbias"};
            for (int i = 0; i < 4; i++) {
                if (i == 1 && xk < 2) continue;
                weft_tensor *g0 = weft_tensor_grad(p[0][i]), *g1 = weft_tensor_grad(p[1][i]);
                CHECK(g0 && g1);
                if (g0 && g1) wt_check_same(names[i], g0, g1, 0);
            }
            weft_tensor *ts[] = {x64, r64, w64, b64, c64, y[0], y[1], sm[0], sm[1]};
            free_all(9, ts);
            for (int run = 0; run < 2; run++) free_all(4, p[run]);
            wt_drop_all();
        }
    weft_tensor *x64 = wt_rand64(2, xs, -2, 3, 88, false);
    weft_tensor *bad = weft_layer_norm_to(x64, 1, NULL, NULL, 1e-5, WEFT_BF16);
    CHECK(bad == NULL && err_names("layer_norm") && err_names("f32 statistics"));
    weft_clear_error();
    weft_tensor *plain = weft_layer_norm_to(x64, 1, NULL, NULL, 1e-5, WEFT_I32); // not a half dtype: the plain op
    CHECK(plain && weft_tensor_dtype(plain) == WEFT_F64);
    weft_tensor_free(plain);
    weft_tensor_free(x64);
}

static void test_ln_errors(void) {
    const int64_t xs[2] = {3, 4}, bad[1] = {3}, ok[1] = {4};
    weft_tensor *x = wt_rand64(2, xs, -1, 1, 1, false), *wb = wt_rand64(1, bad, 0, 1, 2, false),
                *w = wt_rand64(1, ok, 0, 1, 3, false);
    weft_tensor *w32 = weft_cast(w, WEFT_F32), *xi = weft_cast(x, WEFT_I32);
    weft_tensor *y;
    CHECK((y = weft_layer_norm(x, 1, wb, NULL, 1e-5)) == NULL && err_names("layer_norm"));
    weft_tensor_free(y);
    CHECK((y = weft_layer_norm(x, 1, NULL, wb, 1e-5)) == NULL && err_names("layer_norm"));
    weft_tensor_free(y);
    CHECK((y = weft_layer_norm(x, 2, w, NULL, 1e-5)) == NULL && err_names("layer_norm"));
    weft_tensor_free(y);
    CHECK((y = weft_layer_norm(x, 0, NULL, NULL, 1e-5)) == NULL && err_names("layer_norm"));
    weft_tensor_free(y);
    CHECK((y = weft_layer_norm(x, 3, NULL, NULL, 1e-5)) == NULL && err_names("layer_norm"));
    weft_tensor_free(y);
    CHECK((y = weft_layer_norm(x, 1, w32, NULL, 1e-5)) == NULL && err_names("layer_norm"));
    weft_tensor_free(y);
    CHECK((y = weft_layer_norm(xi, 1, NULL, NULL, 1e-5)) == NULL && err_names("layer_norm"));
    weft_tensor_free(y);
    CHECK(weft_layer_norm(NULL, 1, NULL, NULL, 1e-5) == NULL && err_names("layer_norm"));
    weft_tensor *ts[] = {x, wb, w, w32, xi};
    free_all(5, ts);
}

// ---------------------------------------------------------------- batch_norm
// x (N,C,S): per-channel batch mean and biased/unbiased variance.
static void ref_bn_stats(const double *x, int64_t N, int64_t C, int64_t S, double *mean, double *var_b,
                         double *var_u) {
    for (int64_t c = 0; c < C; c++) {
        double m = 0, v = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t s = 0; s < S; s++) m += x[(n * C + c) * S + s];
        m /= (double)(N * S);
        for (int64_t n = 0; n < N; n++)
            for (int64_t s = 0; s < S; s++) v += pow(x[(n * C + c) * S + s] - m, 2);
        mean[c] = m;
        var_b[c] = v / (double)(N * S);
        var_u[c] = v / (double)(N * S - 1);
    }
}
static void ref_bn_apply(const double *x, int64_t N, int64_t C, int64_t S, const double *mean, const double *var,
                         const double *w, const double *b, double eps, double *y) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t s = 0; s < S; s++) {
                int64_t i = (n * C + c) * S + s;
                y[i] = (x[i] - mean[c]) / sqrt(var[c] + eps) * (w ? w[c] : 1) + (b ? b[c] : 0);
            }
}

static void bn_forward_case(int ndim, const int64_t *xs, bool f32) {
    int64_t N = xs[0], C = xs[1], S = 1;
    for (int d = 2; d < ndim; d++) S *= xs[d];
    int64_t T = N * C * S;
    const double mom = 0.1, eps = 1e-5;
    weft_tensor *x = wt_rand64(ndim, xs, -2, 3, 51, false), *w = wt_rand64(1, &C, 0.5, 1.5, 52, false),
                *b = wt_rand64(1, &C, -1, 1, 53, false), *rm = wt_rand64(1, &C, -0.5, 0.5, 54, false),
                *rv = wt_rand64(1, &C, 0.5, 2, 55, false);
    weft_dtype dt = f32 ? WEFT_F32 : WEFT_F64;
    weft_tensor *xc = weft_cast(x, dt), *wc = weft_cast(w, dt), *bc = weft_cast(b, dt), *rmc = weft_cast(rm, dt),
                *rvc = weft_cast(rv, dt);
    double *xv = values(xc), *wv = values(wc), *bv = values(bc), *rmv = values(rmc), *rvv = values(rvc);
    double *mean = malloc(sizeof(double) * (size_t)C), *vb = malloc(sizeof(double) * (size_t)C),
           *vu = malloc(sizeof(double) * (size_t)C), *ref = malloc(sizeof(double) * (size_t)T);
    double tol = f32 ? 2e-5 : 1e-11;
    ref_bn_stats(xv, N, C, S, mean, vb, vu);
    // training: batch statistics, running stats updated in place
    weft_tensor *y = weft_batch_norm(xc, rmc, rvc, wc, bc, true, mom, eps);
    ref_bn_apply(xv, N, C, S, mean, vb, wv, bv, eps, ref);
    wt_check_values("batch_norm train", y, ref, T, tol);
    double *nrm = malloc(sizeof(double) * (size_t)C), *nrv = malloc(sizeof(double) * (size_t)C);
    for (int64_t c = 0; c < C; c++) {
        nrm[c] = (1 - mom) * rmv[c] + mom * mean[c];
        nrv[c] = (1 - mom) * rvv[c] + mom * vu[c]; // unbiased
    }
    wt_check_values("running_mean", rmc, nrm, C, tol);
    wt_check_values("running_var", rvc, nrv, C, tol);
    // without weight/bias and running stats
    weft_tensor *y2 = weft_batch_norm(xc, NULL, NULL, NULL, NULL, true, mom, eps);
    ref_bn_apply(xv, N, C, S, mean, vb, NULL, NULL, eps, ref);
    wt_check_values("batch_norm train plain", y2, ref, T, tol);
    // eval: the (updated) running stats, which stay unchanged
    weft_tensor *y3 = weft_batch_norm(xc, rmc, rvc, wc, bc, false, mom, eps);
    ref_bn_apply(xv, N, C, S, nrm, nrv, wv, bv, eps, ref);
    wt_check_values("batch_norm eval", y3, ref, T, tol);
    wt_check_values("running_mean eval", rmc, nrm, C, tol);
    weft_tensor *ts[] = {x, w, b, rm, rv, xc, wc, bc, rmc, rvc, y, y2, y3};
    free_all(13, ts);
    free(xv), free(wv), free(bv), free(rmv), free(rvv), free(mean), free(vb), free(vu), free(ref), free(nrm),
        free(nrv);
}

static void test_bn_forward(void) {
    const int64_t s2[2] = {7, 3}, s4[4] = {2, 3, 4, 5}, s3[3] = {4, 2, 6};
    const int64_t big[4] = {8, 4, 48, 48}; // threaded path
    for (int f32 = 0; f32 < 2; f32++) {
        bn_forward_case(2, s2, f32);
        bn_forward_case(4, s4, f32);
        bn_forward_case(3, s3, f32);
        bn_forward_case(4, big, f32);
    }
}

// A strided (N,C) input: the transpose of a (C,N) tensor.
static void test_bn_noncontiguous_forward(void) {
    const int64_t s[2] = {3, 5};
    weft_tensor *x = wt_rand64(2, s, -1, 1, 61, false), *xt = weft_transpose(x, 0, 1); // (5,3)
    double *xv = values(x), xtv[15], mean[3], vb[3], vu[3], ref[15];
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++) xtv[i * 3 + j] = xv[j * 5 + i];
    ref_bn_stats(xtv, 5, 3, 1, mean, vb, vu);
    ref_bn_apply(xtv, 5, 3, 1, mean, vb, NULL, NULL, 1e-5, ref);
    weft_tensor *y = weft_batch_norm(xt, NULL, NULL, NULL, NULL, true, 0.1, 1e-5);
    wt_check_values("batch_norm strided", y, ref, 15, 1e-12);
    weft_tensor *ts[] = {x, xt, y};
    free_all(3, ts);
    free(xv);
}

typedef struct {
    int hw, hb, training, transpose;
    weft_tensor *rm, *rv;
} bn_case;
static weft_tensor *bn_fn(weft_tensor *const *in, void *user) {
    const bn_case *c = user;
    weft_tensor *x = c->transpose ? weft_transpose(in[0], 0, 1) : weft_tensor_ref(in[0]);
    weft_tensor *w = c->hw ? in[1] : NULL, *b = c->hb ? in[1 + c->hw] : NULL;
    weft_tensor *y = weft_batch_norm(x, c->rm, c->rv, w, b, c->training, 0.1, 1e-5);
    weft_tensor_free(x);
    return y;
}

static void test_bn_gradcheck(void) {
    const int64_t s2[2] = {6, 3}, s4[4] = {2, 3, 3, 2};
    const int64_t C = 3;
    for (int training = 0; training < 2; training++)
        for (int nd = 0; nd < 2; nd++)
            for (int flags = 0; flags < 4; flags++) {
                bn_case c = {flags & 1, (flags >> 1) & 1, training, 0, NULL, NULL};
                c.rm = wt_rand64(1, &C, -0.5, 0.5, 70, false);
                c.rv = wt_rand64(1, &C, 0.5, 2, 71, false);
                weft_tensor *in[3];
                int k = 0;
                in[k++] = nd ? wt_rand64(4, s4, -2, 2, 72 + flags, true) : wt_rand64(2, s2, -2, 2, 72 + flags, true);
                if (c.hw) in[k++] = wt_rand64(1, &C, 0.5, 1.5, 80, true);
                if (c.hb) in[k++] = wt_rand64(1, &C, -1, 1, 81, true);
                CHECK_GRAD(bn_fn, k, in, &c);
                free_all(k, in);
                weft_tensor_free(c.rm), weft_tensor_free(c.rv);
            }
    // training without running stats, through a transposed (strided) input
    bn_case c = {1, 1, 1, 1, NULL, NULL};
    const int64_t s[2] = {3, 5};
    weft_tensor *in[3] = {wt_rand64(2, s, -2, 2, 90, true), wt_rand64(1, &C, 0.5, 1.5, 91, true),
                          wt_rand64(1, &C, -1, 1, 92, true)};
    CHECK_GRAD(bn_fn, 3, in, &c);
    free_all(3, in);
}

// Threaded backward (4-D, f32 and f64) against the formula from primitive ops.
static void test_bn_backward_large(void) {
    const int64_t xs[4] = {4, 6, 40, 40}, C = 6, ks[4] = {1, 6, 1, 1};
    weft_tensor *x = wt_rand64(4, xs, -2, 3, 95, true), *w = wt_rand64(1, &C, 0.5, 1.5, 96, true),
                *b = wt_rand64(1, &C, -1, 1, 97, true), *gy = wt_rand64(4, xs, -1, 1, 98, false);
    int64_t T = 4 * 6 * 40 * 40;
    weft_tensor *y = weft_batch_norm(x, NULL, NULL, w, b, true, 0.1, 1e-5);
    CHECK(weft_backward(y, gy, NULL) == WEFT_OK);
    double *dx = values(weft_tensor_grad(x)), *dw = values(weft_tensor_grad(w)), *db = values(weft_tensor_grad(b));
    weft_tensor_zero_grad(x), weft_tensor_zero_grad(w), weft_tensor_zero_grad(b);
    int axes[3] = {0, 2, 3};
    weft_tensor *m = weft_mean(x, 3, axes, true), *v = weft_var(x, 3, axes, 0, true);
    weft_tensor *d = weft_sub(x, m), *ve = weft_add_scalar(v, 1e-5), *rs = weft_rsqrt(ve), *n = weft_mul(d, rs);
    weft_tensor *wr = weft_reshape(w, 4, ks), *br = weft_reshape(b, 4, ks);
    weft_tensor *nw = weft_mul(n, wr), *yc = weft_add(nw, br);
    CHECK(weft_backward(yc, gy, NULL) == WEFT_OK);
    wt_check_values("bn large dx", weft_tensor_grad(x), dx, T, 1e-9);
    wt_check_values("bn large dw", weft_tensor_grad(w), dw, C, 1e-9);
    wt_check_values("bn large db", weft_tensor_grad(b), db, C, 1e-9);
    // f32
    weft_tensor *x32 = weft_cast(x, WEFT_F32), *g32 = weft_cast(gy, WEFT_F32), *xl = weft_tensor_detach(x32);
    weft_tensor_set_requires_grad(xl, true);
    weft_tensor *w32 = weft_cast(w, WEFT_F32), *b32 = weft_cast(b, WEFT_F32);
    weft_tensor *wl = weft_tensor_detach(w32), *bl = weft_tensor_detach(b32);
    weft_tensor_set_requires_grad(wl, true), weft_tensor_set_requires_grad(bl, true);
    weft_tensor *y32 = weft_batch_norm(xl, NULL, NULL, wl, bl, true, 0.1, 1e-5);
    CHECK(weft_backward(y32, g32, NULL) == WEFT_OK);
    wt_check_values("bn f32 dx", weft_tensor_grad(xl), dx, T, 1e-4);
    wt_check_values("bn f32 dw", weft_tensor_grad(wl), dw, C, 1e-4);
    wt_check_values("bn f32 db", weft_tensor_grad(bl), db, C, 1e-4);
    weft_tensor *ts[] = {x, w, b, gy, y, m, v, d, ve, rs, n, wr, br, nw, yc, x32, g32, xl, w32, b32, wl, bl, y32};
    free_all(23, ts);
    free(dx), free(dw), free(db);
}

static void test_bn_errors(void) {
    const int64_t xs[2] = {4, 3}, c3 = 3, c2 = 2, one[2] = {1, 3}, v1[1] = {5};
    weft_tensor *x = wt_rand64(2, xs, -1, 1, 1, false), *w = wt_rand64(1, &c3, 0, 1, 2, false),
                *wb = wt_rand64(1, &c2, 0, 1, 3, false), *x1 = wt_rand64(2, one, 0, 1, 4, false),
                *v = wt_rand64(1, v1, 0, 1, 5, false);
    weft_tensor *w32 = weft_cast(w, WEFT_F32), *xi = weft_cast(x, WEFT_I64);
    weft_tensor *y;
#define BN_FAILS(expr)                                      \
    do {                                                    \
        y = (expr);                                         \
        CHECK(y == NULL && err_names("batch_norm"));        \
        weft_tensor_free(y);                                \
    } while (0)
    BN_FAILS(weft_batch_norm(x, NULL, NULL, w, NULL, false, 0.1, 1e-5)); // eval without running stats
    BN_FAILS(weft_batch_norm(x, w, NULL, NULL, NULL, false, 0.1, 1e-5)); // eval with only the mean
    BN_FAILS(weft_batch_norm(x, NULL, NULL, wb, NULL, true, 0.1, 1e-5)); // weight of the wrong size
    BN_FAILS(weft_batch_norm(x, NULL, NULL, NULL, wb, true, 0.1, 1e-5)); // bias of the wrong size
    BN_FAILS(weft_batch_norm(x, wb, w, NULL, NULL, true, 0.1, 1e-5));    // running_mean of the wrong size
    BN_FAILS(weft_batch_norm(x, NULL, NULL, w32, NULL, true, 0.1, 1e-5)); // dtype mismatch
    BN_FAILS(weft_batch_norm(xi, NULL, NULL, NULL, NULL, true, 0.1, 1e-5)); // integer input
    BN_FAILS(weft_batch_norm(v, NULL, NULL, NULL, NULL, true, 0.1, 1e-5));  // 1-d input
    BN_FAILS(weft_batch_norm(x1, NULL, NULL, NULL, NULL, true, 0.1, 1e-5)); // one value per channel
    BN_FAILS(weft_batch_norm(NULL, NULL, NULL, NULL, NULL, true, 0.1, 1e-5));
    // eval with a single value per channel is fine
    weft_tensor *rm = weft_tensor_zeros(1, &c3, WEFT_F64), *rv = weft_tensor_ones(1, &c3, WEFT_F64);
    y = weft_batch_norm(x1, rm, rv, NULL, NULL, false, 0.1, 0.0);
    double *xv = values(x1);
    wt_check_values("bn eval identity", y, xv, 3, 1e-12);
    free(xv);
    weft_tensor *ts[] = {x, w, wb, x1, v, w32, xi, rm, rv, y};
    free_all(10, ts);
}

// ---------------------------------------------------------------- add_layer_norm
// s = x + r and y = layer_norm(s): values against the f64 reference, both outputs' gradients (in x, r,
// weight, bias) by finite differences, and bit for bit against add then layer_norm (f32, big enough to
// thread), and a bf16 residual with an f32 input against the widened residual.
typedef struct {
    int hw, hb;
    double ws, wy; // the loss: ws * sum(s * v) + wy * sum(y * u), so both outputs carry gradient
} aln_case;
static weft_tensor *aln_fn(weft_tensor *const *in, void *user) {
    const aln_case *c = user;
    weft_tensor *s, *y;
    if (weft_add_layer_norm(in[0], in[1], 1, c->hw ? in[2] : NULL, c->hb ? in[2 + c->hw] : NULL, 1e-5, &s, &y))
        return NULL;
    weft_tensor *ss = weft_sin(s), *a = weft_mul_scalar(ss, c->ws), *yy = weft_mul(y, y), *b = weft_mul_scalar(yy, c->wy);
    weft_tensor *r = weft_add(a, b);
    weft_tensor *ts[] = {s, y, ss, a, yy, b};
    free_all(6, ts);
    return r;
}

// loss = sum(s + y * y) of add_layer_norm(x, r) (x f32, r bf16, weight and bias f32, gradients into x and r):
// the gradient of s through the norm and directly, and r's in bf16.
static void aln_bf16_grads(weft_tensor *const *in, weft_tensor **gx, weft_tensor **gr) {
    weft_tensor *x = weft_cast(in[0], WEFT_F32), *r = weft_cast(in[1], WEFT_BF16), *w = weft_cast(in[2], WEFT_F32);
    weft_tensor *b = weft_cast(in[3], WEFT_F32), *s = NULL, *y = NULL;
    weft_tensor_set_requires_grad(x, true), weft_tensor_set_requires_grad(r, true);
    CHECK(weft_add_layer_norm(x, r, 1, w, b, 1e-5, &s, &y) == WEFT_OK);
    weft_tensor *q = y ? weft_mul(y, y) : NULL, *t = q ? weft_add(q, s) : NULL, *l = t ? weft_sum(t, 0, NULL, false) : NULL;
    CHECK(l && weft_backward(l, NULL, NULL) == WEFT_OK);
    *gx = weft_tensor_ref(weft_tensor_grad(x)), *gr = weft_tensor_ref(weft_tensor_grad(r));
    weft_tensor *ts[] = {x, r, w, b, s, y, q, t, l};
    free_all(9, ts);
}

// add_layer_norm's backward adds the direct gradient of s and rounds the bf16 residual's gradient inside
// layer_norm_backward (attrs i[3], i[4]): the bits of the three ops it replaces (WEFT_FUSED_NORM_BW=0), and
// r's gradient is x's rounded once. The op itself: dx + gs and dx in bf16 as an add and a cast give them;
// what it refuses, naming it.
static void test_add_ln_fused_backward(weft_tensor *const *in) {
    weft_tensor *gx[2], *gr[2];
    aln_bf16_grads(in, &gx[0], &gr[0]);
    setenv("WEFT_FUSED_NORM_BW", "0", 1);
    aln_bf16_grads(in, &gx[1], &gr[1]);
    unsetenv("WEFT_FUSED_NORM_BW");
    wt_check_same("add_layer_norm fused backward: dx", gx[0], gx[1], 0);
    wt_check_same("add_layer_norm fused backward: dr", gr[0], gr[1], 0);
    weft_tensor *want = gx[0] ? weft_cast(gx[0], WEFT_BF16) : NULL;
    CHECK(gr[0] && weft_tensor_dtype(gr[0]) == WEFT_BF16);
    wt_check_same("add_layer_norm fused backward: dr = bf16(dx)", gr[0], want, 0);

    // the op: (gy, x, mean, rstd, weight, gs) with i[3] = 1, i[4] = 1 + bf16, against layer_norm_backward's
    const weft_op_def *op = weft_op_find("add_layer_norm_backward"), *op3 = weft_op_find("layer_norm_backward");
    const int64_t xs[2] = {5, 12}, rs[1] = {5};
    weft_tensor *x = weft_cast(in[0], WEFT_F32), *xv = weft_view(x, WEFT_DIMS(-1, 768)), *x2 = weft_narrow(xv, 0, 0, 5);
    weft_tensor *x2c = weft_narrow(x2, 1, 0, 12), *xc = weft_tensor_contiguous(x2c), *yv = NULL, *mu = NULL, *sd = NULL;
    weft_tensor *w = weft_tensor_ones(1, &xs[1], WEFT_F32);
    weft_tensor *g64 = wt_rand64(2, xs, -1, 1, 97, false), *gy = weft_cast(g64, WEFT_F32);
    weft_tensor *gs64 = wt_rand64(2, xs, -1, 1, 98, false), *gs = weft_cast(gs64, WEFT_F32);
    weft_tensor *lnin[1] = {xc}, *lnout[4] = {0};
    weft_attrs la = {.i = {1, 0, 0}, .f = {1e-5}};
    CHECK(op && weft_op_apply(weft_op_find("layer_norm"), 1, lnin, &la, lnout) == WEFT_OK);
    yv = lnout[0], mu = lnout[1], sd = lnout[2];
    weft_tensor *bin[6] = {gy, xc, mu, sd, w, gs}, *plain[4] = {0}, *fused[4] = {0}, *o3[4];
    weft_attrs a0 = {.i = {1, 1, 1}}, a1 = {.i = {1, 1, 1, 1, 1 + WEFT_BF16}};
    CHECK(op3 && weft_op_apply(op3, 5, bin, &a0, plain) == WEFT_OK && weft_op_apply(op, 6, bin, &a1, fused) == WEFT_OK);
    weft_tensor *sum = plain[0] ? weft_add(plain[0], gs) : NULL, *sumh = sum ? weft_cast(sum, WEFT_BF16) : NULL;
    wt_check_same("layer_norm_backward dx + gs", fused[0], sum, 0);
    wt_check_same("layer_norm_backward bf16 dx", fused[3], sumh, 0);
    wt_check_same("layer_norm_backward dweight", fused[1], plain[1], 0);
    CHECK(plain[3] == NULL); // three outputs (saved graphs with it load as before)
    weft_tensor *none[4] = {0};
    CHECK(weft_op_apply(op, 5, bin, &a0, none) == WEFT_OK && none[3] && weft_tensor_numel(none[3]) == 0);
    wt_check_same("add_layer_norm_backward without gs", none[0], plain[0], 0);
    for (int j = 0; j < 4; j++) weft_tensor_free(none[j]);
    CHECK(weft_op_apply(op3, 6, bin, &a1, o3) != WEFT_OK && err_names("layer_norm_backward")); // no gs there
    // refused: gs of another shape, a bad dtype code, a half dx of an f64 x
    weft_tensor *gbad = weft_tensor_zeros(1, rs, WEFT_F32), *x64 = weft_cast(xc, WEFT_F64), *xh = weft_cast(xc, WEFT_BF16);
    weft_tensor *o[4];
    bin[5] = gbad;
    CHECK(weft_op_apply(op, 6, bin, &a1, o) != WEFT_OK && err_names("add_layer_norm_backward"));
    weft_attrs a2 = {.i = {1, 1, 1, 0, 1 + WEFT_I32}};
    CHECK(weft_op_apply(op, 5, bin, &a2, o) != WEFT_OK && err_names("i[4]"));
    weft_tensor *b64[5] = {gy, x64, mu, sd, w};
    weft_attrs a3 = {.i = {1, 1, 1, 0, 1 + WEFT_BF16}};
    CHECK(weft_op_apply(op, 5, b64, &a3, o) != WEFT_OK && err_names("add_layer_norm_backward"));
    weft_tensor *bh[6] = {gy, xh, mu, sd, w, gs}; // (a bf16 x among f32 inputs: promoted, as any such mix is)
    CHECK(weft_op_apply(op, 6, bh, &a1, o) == WEFT_OK);
    for (int j = 0; j < 4; j++) weft_tensor_free(o[j]);
    weft_tensor *ts[] = {gx[0], gx[1], gr[0], gr[1], want, x, xv, x2, x2c, xc, yv, mu, sd, w, g64, gy, gs64, gs,
                         plain[0], plain[1], plain[2], fused[0], fused[1], fused[2], fused[3], sum, sumh,
                         gbad, x64, xh};
    free_all(sizeof ts / sizeof *ts, ts);
}

static void test_add_ln(void) {
    const int64_t xs[2] = {6, 10}, ws[1] = {10};
    // values
    weft_tensor *x = wt_rand64(2, xs, -2, 2, 41, false), *r = wt_rand64(2, xs, -1, 1, 42, false);
    weft_tensor *w = wt_rand64(1, ws, 0.5, 1.5, 43, false), *b = wt_rand64(1, ws, -1, 1, 44, false), *s, *y;
    CHECK(weft_add_layer_norm(x, r, 1, w, b, 1e-5, &s, &y) == WEFT_OK);
    double *xv = values(x), *rv = values(r), *wv = values(w), *bv = values(b), sv[60], ref[60];
    for (int i = 0; i < 60; i++) sv[i] = xv[i] + rv[i];
    ref_layer_norm(sv, wv, bv, 6, 10, 1e-5, ref);
    wt_check_values("add_layer_norm sum", s, sv, 60, 0);
    wt_check_values("add_layer_norm y", y, ref, 60, 1e-12);
    weft_tensor *ts[] = {x, r, w, b, s, y};
    free_all(6, ts);
    free(xv), free(rv), free(wv), free(bv);
    // gradients, with and without weight / bias, through s only, y only, both
    for (int flags = 0; flags < 4; flags++)
        for (int which = 0; which < 3; which++) {
            aln_case c = {flags & 1, flags >> 1, which != 1 ? 1.0 : 0.0, which != 0 ? 1.0 : 0.0};
            weft_tensor *in[4];
            int k = 0;
            in[k++] = wt_rand64(2, xs, -2, 2, 50 + flags, true);
            in[k++] = wt_rand64(2, xs, -1, 1, 60 + flags, true);
            if (c.hw) in[k++] = wt_rand64(1, ws, 0.5, 1.5, 70 + flags, true);
            if (c.hb) in[k++] = wt_rand64(1, ws, -1, 1, 80 + flags, true);
            CHECK_GRAD(aln_fn, k, in, &c);
            free_all(k, in);
        }
    // f32, threaded: the same bits as add then layer_norm, forward and backward
    const int64_t bs[3] = {16, 64, 768}, bw[1] = {768};
    weft_tensor *in[4] = {wt_rand64(3, bs, -2, 2, 91, false), wt_rand64(3, bs, -1, 1, 92, false),
                          wt_rand64(1, bw, 0.5, 1.5, 93, false), wt_rand64(1, bw, -1, 1, 94, false)};
    weft_tensor *f[2][4];
    for (int run = 0; run < 2; run++)
        for (int i = 0; i < 4; i++) {
            f[run][i] = weft_cast(in[i], WEFT_F32);
            weft_tensor_set_requires_grad(f[run][i], true);
        }
    weft_tensor *s1, *y1, *s2 = weft_add(f[1][0], f[1][1]), *y2 = weft_layer_norm(s2, 1, f[1][2], f[1][3], 1e-5);
    CHECK(weft_add_layer_norm(f[0][0], f[0][1], 1, f[0][2], f[0][3], 1e-5, &s1, &y1) == WEFT_OK);
    wt_check_same("add_layer_norm f32 sum", s1, s2, 0);
    wt_check_same("add_layer_norm f32 y", y1, y2, 0);
    weft_tensor *l[2];
    weft_tensor *sy[2][2] = {{s1, y1}, {s2, y2}};
    for (int run = 0; run < 2; run++) {
        weft_tensor *q = weft_mul(sy[run][1], sy[run][1]), *t = weft_add(q, sy[run][0]);
        l[run] = weft_sum(t, 0, NULL, false);
        CHECK(weft_backward(l[run], NULL, NULL) == WEFT_OK);
        weft_tensor_free(q), weft_tensor_free(t);
    }
    const char *names[4] = {"dx", "dr", "dweight", "dbias"};
    for (int i = 0; i < 4; i++) wt_check_same(names[i], weft_tensor_grad(f[0][i]), weft_tensor_grad(f[1][i]), 0);
    // a bf16 residual on an f32 input: the residual read as it is, its gradient in bf16
    weft_tensor *rb = weft_cast(in[1], WEFT_BF16), *rbw = weft_cast(rb, WEFT_F32), *x32 = weft_cast(in[0], WEFT_F32);
    weft_tensor_set_requires_grad(rb, true);
    weft_tensor *sb, *yb, *sw = weft_add(x32, rbw), *yw = weft_layer_norm(sw, 1, NULL, NULL, 1e-5);
    CHECK(weft_add_layer_norm(x32, rb, 1, NULL, NULL, 1e-5, &sb, &yb) == WEFT_OK);
    CHECK(sb && weft_tensor_dtype(sb) == WEFT_F32 && weft_tensor_dtype(yb) == WEFT_F32);
    wt_check_same("add_layer_norm bf16 residual sum", sb, sw, 0);
    wt_check_same("add_layer_norm bf16 residual y", yb, yw, 0);
    weft_tensor *lb = weft_sum(yb, 0, NULL, false);
    CHECK(weft_backward(lb, NULL, NULL) == WEFT_OK);
    CHECK(weft_tensor_grad(rb) && weft_tensor_dtype(weft_tensor_grad(rb)) == WEFT_BF16);
    test_add_ln_fused_backward(in);
    // errors: shapes, dtypes, n_norm_dims
    weft_tensor *bad = wt_rand64(2, xs, -1, 1, 3, false), *s0, *y0;
    CHECK(weft_add_layer_norm(x32, bad, 1, NULL, NULL, 1e-5, &s0, &y0) != WEFT_OK && err_names("add_layer_norm") &&
          s0 == NULL && y0 == NULL);
    weft_tensor *r64 = weft_tensor_zeros(3, bs, WEFT_F64);
    CHECK(weft_add_layer_norm(x32, r64, 1, NULL, NULL, 1e-5, &s0, &y0) != WEFT_OK && err_names("residual"));
    CHECK(weft_add_layer_norm(x32, rb, 4, NULL, NULL, 1e-5, &s0, &y0) != WEFT_OK && err_names("n_norm_dims"));
    CHECK(weft_add_layer_norm(x32, rb, 1, NULL, NULL, 1e-5, NULL, &y0) != WEFT_OK && err_names("add_layer_norm"));
    CHECK(weft_add_layer_norm(x32, rb, 1, NULL, NULL, 1e-5, &s0, NULL) != WEFT_OK && err_names("add_layer_norm"));
    weft_tensor *rest[] = {rb, rbw, x32, sb, yb, sw, yw, lb, bad, r64, s1, y1, s2, y2, l[0], l[1]};
    free_all(16, rest);
    for (int run = 0; run < 2; run++) free_all(4, f[run]);
    free_all(4, in);
}

// Internal (cpu/norm.c): false forces the baseline-ISA row kernels.
void weft_cpu_norm_set_simd(bool on);

int main(void) {
    for (int simd = 1; simd >= 0; simd--) { // the AVX2 row kernels (where the CPU has them), then the baseline
        weft_cpu_norm_set_simd(simd);
        RUN(test_ln_forward);
        RUN(test_ln_noncontiguous_forward);
        RUN(test_ln_gradcheck);
        RUN(test_ln_backward_large);
        RUN(test_ln_partial_needs);
        RUN(test_add_ln);
        RUN(test_ln_half);
        RUN(test_ln_half_out);
    }
    RUN(test_ln_errors);
    RUN(test_bn_forward);
    RUN(test_bn_noncontiguous_forward);
    RUN(test_bn_gradcheck);
    RUN(test_bn_backward_large);
    RUN(test_bn_errors);
    return wt_summary();
}
