// The fused LSTM cell ops (lstm_cell, lstm_cell_backward; def_lstm.c):
// values against the cell's formula evaluated here in double (with and
// without c_prev, strided gates, f32), finite-difference gradients of h, c
// and h + c with respect to the gates and c_prev, the backward op's input
// combinations against the gradients of the same cell composed from public
// ops, shape/dtype/attr errors, the refusal of a second-order gradient, and
// the accelerator (mock: the CPU's numbers bit for bit).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "weft_test.h"

static double sigm(double v) { return 1.0 / (1.0 + exp(-v)); }

// gates (B,4H) and c_prev (B,H) or NULL, as host arrays -> h, c (B,H).
static void cell_ref(const double *g, const double *cp, double *h, double *c, int64_t B, int64_t H) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < H; j++) {
            const double *r = g + b * 4 * H;
            double i = sigm(r[j]), f = sigm(r[H + j]), gg = tanh(r[2 * H + j]), o = sigm(r[3 * H + j]);
            double cn = (cp ? f * cp[b * H + j] : 0) + i * gg;
            c[b * H + j] = cn;
            h[b * H + j] = o * tanh(cn);
        }
}

static void check_values(int64_t B, int64_t H, bool with_cp, uint64_t seed) {
    int64_t gs[2] = {B, 4 * H}, hs[2] = {B, H};
    weft_tensor *g = wt_rand64(2, gs, -3, 3, seed, false), *cp = with_cp ? wt_rand64(2, hs, -2, 2, seed + 1, false) : NULL;
    double *h = malloc(sizeof(double) * (size_t)(B * H + 1)), *c = malloc(sizeof(double) * (size_t)(B * H + 1));
    cell_ref(weft_tensor_data(g), cp ? weft_tensor_data(cp) : NULL, h, c, B, H);
    weft_tensor *th = NULL, *tc = NULL;
    CHECK(weft_lstm_cell(g, cp, &th, &tc) == WEFT_OK);
    wt_check_values("lstm_cell h", th, h, B * H, 1e-15);
    wt_check_values("lstm_cell c", tc, c, B * H, 1e-15);
    weft_tensor_free(th);
    weft_tensor_free(tc);
    // f32: the same numbers within f32 rounding
    weft_tensor *g32 = weft_cast(g, WEFT_F32), *cp32 = cp ? weft_cast(cp, WEFT_F32) : NULL;
    CHECK(weft_lstm_cell(g32, cp32, &th, &tc) == WEFT_OK);
    CHECK(th && weft_tensor_dtype(th) == WEFT_F32);
    wt_check_values("lstm_cell h f32", th, h, B * H, 1e-6);
    wt_check_values("lstm_cell c f32", tc, c, B * H, 1e-6);
    weft_tensor *ts[] = {th, tc, g32, cp32, g, cp};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
    free(h);
    free(c);
}

static void test_values(void) {
    check_values(3, 5, true, 1);
    check_values(3, 5, false, 2);
    check_values(1, 1, true, 3);
    check_values(64, 100, true, 4); // B*H above the kernels' parallel grain
    check_values(0, 4, true, 5);
}

// Saturated gates in f32 (|v| up to 1e4, past exp's range) and tiny ones
// (tanh's series branch): the formula's values, no inf or NaN.
static void test_extremes_f32(void) {
    const double gv[8] = {-1e4, 1e4, 90, -90, 1e-3, -1e-3, 0.06, -0.07}, cv[2] = {0.5, -3};
    int64_t gs[2] = {1, 8}, hs[2] = {1, 2};
    double h[2], c[2];
    cell_ref(gv, cv, h, c, 1, 2);
    weft_tensor *g64 = wt_f64(gv, 2, gs, false), *c64 = wt_f64(cv, 2, hs, false);
    weft_tensor *g = weft_cast(g64, WEFT_F32), *cp = weft_cast(c64, WEFT_F32), *th = NULL, *tc = NULL;
    CHECK(weft_lstm_cell(g, cp, &th, &tc) == WEFT_OK);
    wt_check_values("lstm_cell h extremes f32", th, h, 2, 1e-6);
    wt_check_values("lstm_cell c extremes f32", tc, c, 2, 1e-6);
    // tanh and sigmoid near 0 and across the series' edge, against libm in double
    const double sv[8] = {1e-6, -2e-4, 0.03, 0.0624, 0.0626, -0.5, 2, 9};
    double hz[8], cz[8];
    int64_t zs[2] = {1, 32};
    double gz[32];
    for (int k = 0; k < 8; k++) gz[k] = 20, gz[8 + k] = 0, gz[16 + k] = sv[k], gz[24 + k] = 20; // i = o = 1: c = tanh(v)
    cell_ref(gz, NULL, hz, cz, 1, 8);
    weft_tensor *gz64 = wt_f64(gz, 2, zs, false), *gz32 = weft_cast(gz64, WEFT_F32), *hh = NULL, *cc = NULL;
    CHECK(weft_lstm_cell(gz32, NULL, &hh, &cc) == WEFT_OK);
    float *cf = cc ? weft_tensor_data(cc) : NULL;
    for (int k = 0; cf && k < 8; k++) CHECK(fabs(cf[k] - cz[k]) <= 4e-7 * fabs(cz[k]) + 1e-12);
    weft_tensor *ts[] = {g64, c64, g, cp, th, tc, gz64, gz32, hh, cc};
    for (int i = 0; i < 10; i++) weft_tensor_free(ts[i]);
}

// Gates read through a transposed view (strided): the kernel's contiguous copy.
static void test_strided(void) {
    int64_t B = 4, H = 3, gts[2] = {12, 4}, hs[2] = {4, 3};
    weft_tensor *gt = wt_rand64(2, gts, -2, 2, 11, false), *cp = wt_rand64(2, hs, -1, 1, 12, false);
    weft_tensor *g = weft_transpose(gt, 0, 1), *gc = weft_tensor_contiguous(g); // (B,4H)
    double h[12], c[12];
    cell_ref(weft_tensor_data(gc), weft_tensor_data(cp), h, c, B, H);
    weft_tensor *th = NULL, *tc = NULL;
    CHECK(weft_lstm_cell(g, cp, &th, &tc) == WEFT_OK);
    wt_check_values("lstm_cell h strided", th, h, 12, 1e-15);
    wt_check_values("lstm_cell c strided", tc, c, 12, 1e-15);
    weft_tensor *ts[] = {th, tc, g, gc, gt, cp};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
}

// out: 0 = h, 1 = c, 2 = h + c (both gradients reach the cell); no c_prev when n == 1.
static weft_tensor *cell_fn(weft_tensor *const *in, void *user) {
    int which = *(const int *)user;
    weft_tensor *h = NULL, *c = NULL;
    int n_in = which >= 3 ? 1 : 2;
    which %= 3;
    if (weft_lstm_cell(in[0], n_in == 2 ? in[1] : NULL, &h, &c) != WEFT_OK) return NULL;
    weft_tensor *r = which == 0 ? weft_tensor_ref(h) : which == 1 ? weft_tensor_ref(c) : weft_add(h, c);
    weft_tensor_free(h);
    weft_tensor_free(c);
    return r;
}

static void test_gradcheck(void) {
    int64_t gs[2] = {3, 8}, hs[2] = {3, 2};
    weft_tensor *in[2] = {wt_rand64(2, gs, -2, 2, 21, true), wt_rand64(2, hs, -1.5, 1.5, 22, true)};
    for (int w = 0; w < 6; w++) {
        int which = w;
        CHECK_GRAD(cell_fn, w >= 3 ? 1 : 2, in, &which);
    }
    weft_tensor_free(in[0]);
    weft_tensor_free(in[1]);
}

// The same cell from public ops (what src/nn/lstm.c composed before the fused op).
static void cell_composed(weft_tensor *g, weft_tensor *cp, int64_t H, weft_tensor **h, weft_tensor **c) {
    weft_tensor *gi = weft_narrow(g, 1, 0, H), *gf = weft_narrow(g, 1, H, H), *gg = weft_narrow(g, 1, 2 * H, H),
                *go = weft_narrow(g, 1, 3 * H, H);
    weft_tensor *i = weft_sigmoid(gi), *f = weft_sigmoid(gf), *gt = weft_tanh(gg), *o = weft_sigmoid(go);
    weft_tensor *ig = weft_mul(i, gt), *fc = weft_mul(f, cp);
    *c = weft_add(fc, ig);
    weft_tensor *tc = weft_tanh(*c);
    *h = weft_mul(o, tc);
    weft_tensor *ts[] = {gi, gf, gg, go, i, f, gt, o, ig, fc, tc};
    for (int k = 0; k < 11; k++) weft_tensor_free(ts[k]);
}

// Every combination of dh / dc present against the composed cell's gradients.
static void test_backward_combinations(void) {
    int64_t B = 5, H = 7, gs[2] = {B, 4 * H}, hs[2] = {B, H};
    weft_tensor *wh = wt_rand64(2, hs, -1, 1, 31, false), *wc = wt_rand64(2, hs, -1, 1, 32, false);
    for (int mode = 1; mode < 4; mode++) { // bit 0: loss uses h, bit 1: uses c
        weft_tensor *g[2], *cp[2], *h[2], *c[2];
        for (int k = 0; k < 2; k++) {
            g[k] = wt_rand64(2, gs, -3, 3, 33, true);
            cp[k] = wt_rand64(2, hs, -2, 2, 34, true);
            if (k == 0) CHECK(weft_lstm_cell(g[k], cp[k], &h[k], &c[k]) == WEFT_OK);
            else cell_composed(g[k], cp[k], H, &h[k], &c[k]);
            weft_tensor *mh = weft_mul(h[k], wh), *mc = weft_mul(c[k], wc);
            weft_tensor *s = mode == 1 ? weft_tensor_ref(mh) : mode == 2 ? weft_tensor_ref(mc) : weft_add(mh, mc);
            weft_tensor *l = weft_sum(s, 0, NULL, false);
            CHECK(weft_backward(l, NULL, NULL) == WEFT_OK);
            weft_tensor *ts[] = {mh, mc, s, l};
            for (int j = 0; j < 4; j++) weft_tensor_free(ts[j]);
        }
        wt_check_same("lstm_cell_backward dgates", weft_tensor_grad(g[0]), weft_tensor_grad(g[1]), 1e-14);
        wt_check_same("lstm_cell_backward dc_prev", weft_tensor_grad(cp[0]), weft_tensor_grad(cp[1]), 1e-14);
        for (int k = 0; k < 2; k++) {
            weft_tensor *ts[] = {g[k], cp[k], h[k], c[k]};
            for (int j = 0; j < 4; j++) weft_tensor_free(ts[j]);
        }
    }
    weft_tensor_free(wh);
    weft_tensor_free(wc);
}

static void test_errors(void) {
    int64_t s25[2] = {2, 5}, s28[2] = {2, 8}, s23[2] = {2, 3}, s3[1] = {8};
    weft_tensor *g5 = wt_rand64(2, s25, -1, 1, 41, false), *g8 = wt_rand64(2, s28, -1, 1, 42, false);
    weft_tensor *c3 = wt_rand64(2, s23, -1, 1, 43, false), *g1 = wt_rand64(1, s3, -1, 1, 44, false);
    weft_tensor *c2 = weft_narrow(g8, 1, 0, 2), *c2f = weft_cast(c2, WEFT_F32);
    weft_tensor *h = NULL, *c = NULL;
    CHECK(weft_lstm_cell(g5, NULL, &h, &c) != WEFT_OK && wt_error_has("lstm_cell") && wt_error_has("(B,4H)"));
    CHECK(weft_lstm_cell(g1, NULL, &h, &c) != WEFT_OK && wt_error_has("lstm_cell"));
    CHECK(weft_lstm_cell(g8, c3, &h, &c) != WEFT_OK && wt_error_has("c_prev"));
    CHECK(weft_lstm_cell(g8, c2f, &h, &c) != WEFT_OK && wt_error_has("c_prev"));
    CHECK(weft_lstm_cell(NULL, NULL, &h, &c) != WEFT_OK && wt_error_has("lstm_cell"));
    CHECK(h == NULL && c == NULL);
    // the backward op: flags, their count against the inputs, at least one gradient
    const weft_op_def *bw = weft_op_find("lstm_cell_backward");
    CHECK(bw != NULL);
    weft_tensor *out[WEFT_MAX_OP_OUT];
    weft_tensor *in[5] = {g8, c2, c2, c2, c2};
    weft_attrs at = {.i = {1, 1, 1}};
    CHECK(weft_op_apply(bw, 5, in, &at, out) == WEFT_OK);
    weft_tensor_free(out[0]);
    weft_tensor_free(out[1]);
    at.i[2] = 2;
    CHECK(weft_op_apply(bw, 5, in, &at, out) != WEFT_OK && wt_error_has("lstm_cell_backward"));
    at = (weft_attrs){.i = {1, 1, 0}};
    CHECK(weft_op_apply(bw, 5, in, &at, out) != WEFT_OK && wt_error_has("inputs"));
    at = (weft_attrs){.i = {1, 0, 0}};
    CHECK(weft_op_apply(bw, 3, in, &at, out) != WEFT_OK && wt_error_has("dh or dc"));
    weft_tensor *ts[] = {g5, g8, c3, g1, c2, c2f};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
}

// Differentiable once: under create_graph the gradient is recorded through
// lstm_cell_backward, which has no backward rule of its own.
static void test_no_second_order(void) {
    int64_t gs[2] = {2, 8}, hs[2] = {2, 2};
    weft_tensor *g = wt_rand64(2, gs, -1, 1, 51, true), *cp = wt_rand64(2, hs, -1, 1, 52, true);
    weft_tensor *h = NULL, *c = NULL;
    CHECK(weft_lstm_cell(g, cp, &h, &c) == WEFT_OK);
    weft_tensor *s = weft_sum(h, 0, NULL, false);
    weft_backward_opts o = {.create_graph = true};
    CHECK(weft_backward(s, NULL, &o) == WEFT_OK);
    weft_tensor *gg = weft_tensor_grad(g);
    CHECK(gg && weft_tensor_requires_grad(gg));
    weft_tensor *gs2 = gg ? weft_sum(gg, 0, NULL, false) : NULL;
    weft_clear_error();
    CHECK(gs2 && weft_backward(gs2, NULL, NULL) != WEFT_OK && wt_error_has("lstm_cell_backward"));
    weft_tensor_free(gs2);
    weft_tensor_zero_grad(g);
    weft_tensor_zero_grad(cp);
    weft_tensor *ts[] = {g, cp, h, c, s};
    for (int i = 0; i < 5; i++) weft_tensor_free(ts[i]);
}

// On the accelerator (mock: the CPU kernels through device memory, bit for bit).
static void test_accelerator(void) {
    weft_device dev;
    bool mock = false;
    CHECK(wt_accelerator(&dev, &mock));
    int64_t gs[2] = {6, 20}, hs[2] = {6, 5};
    for (int with_cp = 0; with_cp < 2; with_cp++) {
        weft_tensor *g = wt_rand64(2, gs, -2, 2, 61, true), *cp = with_cp ? wt_rand64(2, hs, -1, 1, 62, true) : NULL;
        weft_tensor *gd0 = weft_tensor_to(g, dev), *cpd0 = cp ? weft_tensor_to(cp, dev) : NULL;
        weft_tensor *gd = weft_tensor_detach(gd0), *cpd = cpd0 ? weft_tensor_detach(cpd0) : NULL;
        weft_tensor_set_requires_grad(gd, true);
        if (cpd) weft_tensor_set_requires_grad(cpd, true);
        weft_tensor *h[2], *c[2];
        CHECK(weft_lstm_cell(g, cp, &h[0], &c[0]) == WEFT_OK);
        CHECK(weft_lstm_cell(gd, cpd, &h[1], &c[1]) == WEFT_OK);
        double tol = mock ? 0 : 1e-12;
        weft_tensor *hb = weft_tensor_to(h[1], WEFT_DEVICE_CPU), *cb = weft_tensor_to(c[1], WEFT_DEVICE_CPU);
        wt_check_same("lstm_cell h on the accelerator", hb, h[0], tol);
        wt_check_same("lstm_cell c on the accelerator", cb, c[0], tol);
        for (int k = 0; k < 2; k++) {
            weft_tensor *s = weft_add(h[k], c[k]), *l = weft_sum(s, 0, NULL, false);
            CHECK(weft_backward(l, NULL, NULL) == WEFT_OK);
            weft_tensor_free(s);
            weft_tensor_free(l);
        }
        weft_tensor *dg = weft_tensor_to(weft_tensor_grad(gd), WEFT_DEVICE_CPU);
        wt_check_same("lstm_cell dgates on the accelerator", dg, weft_tensor_grad(g), tol);
        weft_tensor *dcp = cp ? weft_tensor_to(weft_tensor_grad(cpd), WEFT_DEVICE_CPU) : NULL;
        if (cp) wt_check_same("lstm_cell dc_prev on the accelerator", dcp, weft_tensor_grad(cp), tol);
        weft_tensor *ts[] = {g, cp, gd0, cpd0, gd, cpd, h[0], c[0], h[1], c[1], hb, cb, dg, dcp};
        for (int i = 0; i < 14; i++) weft_tensor_free(ts[i]);
    }
}

int main(void) {
    RUN(test_values);
    RUN(test_extremes_f32);
    RUN(test_strided);
    RUN(test_gradcheck);
    RUN(test_backward_combinations);
    RUN(test_errors);
    RUN(test_no_second_order);
    RUN(test_accelerator);
    return wt_summary();
}
