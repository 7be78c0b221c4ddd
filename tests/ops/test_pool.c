// max_pool2d's indices and the backward that scatters through them
// (src/ops/def_conv.c, src/ops/cpu/pool.c): the forward's values and indices
// and the backward's gradient against the recompute-based backward it
// replaced, written out here (each window searched again in x); overlapping
// windows, padding, strided inputs, ties, NaN and -inf, f32 and f64, both
// CPU paths (the 2x2 tiling and the generic one) and the threaded one; double
// backward by finite differences; the mock accelerator bit for bit; graph
// mode (symbolic autodiff, save / load) against eager.
// (Values and f64 gradchecks of both pools also run in test_conv.c.)
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops/op.h"
#include "weft_test.h"

typedef struct pcfg {
    int64_t N, C, H, W;
    int kh, kw, sh, sw, ph, pw;
} pcfg;

static int64_t olen(int64_t in, int k, int s, int p) { return (in + 2 * p - k) / s + 1; }

static weft_attrs attrs_of(const pcfg *c) {
    return (weft_attrs){.i = {c->kh, c->kw, c->sh, c->sw, c->ph, c->pw, 0, 0, c->H, c->W}};
}

// The old max_pool2d_backward, written out: each window's argmax searched in
// x (row-major window order, the first maximum winning ties, the first NaN
// winning the window), then gy added there in (oh,ow) order, each sum rounded
// to f32 when f32 (a double sum of two floats rounds to the float sum).
// x (N,C,H,W) -> y, ix (N,C,OH,OW); gy (N,C,OH,OW) -> dx (N,C,H,W) zeroed first.
static void ref_pool(const pcfg *c, bool f32, const double *x, const double *gy, double *y, int64_t *ix, double *dx) {
    int64_t OH = olen(c->H, c->kh, c->sh, c->ph), OW = olen(c->W, c->kw, c->sw, c->pw), HW = c->H * c->W;
    memset(dx, 0, sizeof(double) * (size_t)(c->N * c->C * HW));
    for (int64_t p = 0; p < c->N * c->C; p++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t h0 = oh * c->sh - c->ph, w0 = ow * c->sw - c->pw, h1 = h0 + c->kh, w1 = w0 + c->kw;
                h0 = h0 < 0 ? 0 : h0, w0 = w0 < 0 ? 0 : w0;
                h1 = h1 > c->H ? c->H : h1, w1 = w1 > c->W ? c->W : w1;
                double m = -INFINITY;
                int64_t b = h0 * c->W + w0;
                for (int64_t h = h0; h < h1 && !isnan(m); h++)
                    for (int64_t w = w0; w < w1 && !isnan(m); w++) {
                        double v = x[p * HW + h * c->W + w];
                        if (v > m || isnan(v)) m = v, b = h * c->W + w;
                    }
                int64_t o = (p * OH + oh) * OW + ow;
                y[o] = x[p * HW + b];
                ix[o] = b;
                double s = dx[p * HW + b] + gy[o];
                dx[p * HW + b] = f32 ? (double)(float)s : s;
            }
}

// x values: uniform in [-2,2), or on a half-integer grid (many ties), with
// some NaN and -inf when asked.
static void fill_x(double *x, int64_t n, bool ties, bool nan, uint64_t seed) {
    wt_vals(x, n, -2, 2, seed);
    for (int64_t i = 0; i < n; i++) {
        if (ties) x[i] = round(x[i] * 2) / 2;
        if (nan && i % 17 == 5) x[i] = NAN;
        if (nan && i % 11 == 3) x[i] = -INFINITY;
    }
}

// Element-wise equality of a tensor's values with ref (NaN equals NaN).
static bool same_values(const weft_tensor *t, const double *ref, int64_t n) {
    double *v = malloc(sizeof(double) * (size_t)n);
    bool ok = weft_tensor_numel(t) == n && weft_tensor_to_f64(t, v, n) == WEFT_OK;
    for (int64_t i = 0; ok && i < n; i++) ok = v[i] == ref[i] || (isnan(v[i]) && isnan(ref[i]));
    free(v);
    return ok;
}

// a and b have the same dtype, shape and bytes (both brought to the CPU).
static bool same_bits(weft_tensor *a, weft_tensor *b) {
    if (!a || !b || weft_tensor_dtype(a) != weft_tensor_dtype(b) || weft_tensor_numel(a) != weft_tensor_numel(b))
        return false;
    weft_tensor *ac = weft_tensor_to(a, WEFT_DEVICE_CPU), *bc = weft_tensor_to(b, WEFT_DEVICE_CPU);
    weft_tensor *a2 = ac ? weft_tensor_contiguous(ac) : NULL, *b2 = bc ? weft_tensor_contiguous(bc) : NULL;
    bool ok = a2 && b2 &&
              !memcmp(weft_tensor_data(a2), weft_tensor_data(b2),
                      (size_t)weft_tensor_numel(a) * weft_dtype_size(weft_tensor_dtype(a)));
    weft_tensor *ts[] = {ac, bc, a2, b2};
    for (int i = 0; i < 4; i++) weft_tensor_free(ts[i]);
    return ok;
}

// A non-contiguous copy of x: stored (N,C,W,H), viewed through a transpose.
static weft_tensor *transposed_copy(weft_tensor *x) {
    const int64_t *s = weft_tensor_sizes(x);
    weft_tensor *base = weft_tensor_empty(WEFT_DIMS(s[0], s[1], s[3], s[2]), weft_tensor_dtype(x));
    weft_tensor *v = weft_transpose(base, 2, 3);
    weft_tensor_copy_(v, x);
    weft_tensor_free(base);
    return v;
}

// max_pool2d through the op, both outputs: out[0] y, out[1] the indices.
static bool run_fwd(const pcfg *c, weft_tensor *x, weft_tensor **out) {
    weft_attrs at = attrs_of(c);
    return weft_op_apply(weft_op_find("max_pool2d"), 1, &x, &at, out) == WEFT_OK;
}

// One case: the op's y and indices, the backward op's dx and autograd's dx
// (weft_backward with gy as the seed) against ref_pool.
static void check_case(const char *what, const pcfg *c, weft_dtype dt, bool ties, bool nan, bool strided,
                       uint64_t seed) {
    int64_t OH = olen(c->H, c->kh, c->sh, c->ph), OW = olen(c->W, c->kw, c->sw, c->pw);
    int64_t nx = c->N * c->C * c->H * c->W, ny = c->N * c->C * OH * OW;
    double *x = malloc(sizeof(double) * (size_t)nx), *gy = malloc(sizeof(double) * (size_t)ny);
    double *y = malloc(sizeof(double) * (size_t)ny), *dx = malloc(sizeof(double) * (size_t)nx);
    int64_t *ix = malloc(sizeof(int64_t) * (size_t)ny);
    fill_x(x, nx, ties, nan, seed);
    wt_vals(gy, ny, -1, 1, seed + 1);
    weft_tensor *x64 = weft_tensor_from_data(x, WEFT_DIMS(c->N, c->C, c->H, c->W), WEFT_F64);
    weft_tensor *g64 = weft_tensor_from_data(gy, WEFT_DIMS(c->N, c->C, OH, OW), WEFT_F64);
    weft_tensor *xc = weft_cast(x64, dt), *gt = weft_cast(g64, dt);
    weft_tensor *xt = strided ? transposed_copy(xc) : weft_tensor_ref(xc);
    // the reference sees the values in dt
    weft_tensor_to_f64(xc, x, nx);
    weft_tensor_to_f64(gt, gy, ny);
    ref_pool(c, dt == WEFT_F32, x, gy, y, ix, dx);

    char buf[160];
    snprintf(buf, sizeof buf, "%s %s%s%s%s", what, weft_dtype_name(dt), ties ? " ties" : "", nan ? " nan" : "",
             strided ? " strided" : "");
    weft_tensor *out[WEFT_MAX_OP_OUT] = {0};
    bool ok = run_fwd(c, xt, out);
    ok = ok && weft_tensor_dtype(out[1]) == WEFT_I32 && same_values(out[0], y, ny);
    double *ixd = malloc(sizeof(double) * (size_t)ny);
    for (int64_t i = 0; i < ny; i++) ixd[i] = (double)ix[i];
    ok = ok && same_values(out[1], ixd, ny);
    // the backward op on the indices
    weft_attrs at = attrs_of(c);
    weft_tensor *bin[2] = {gt, out[1]};
    weft_tensor *d = ok ? weft_op_apply1(weft_op_find("max_pool2d_backward"), 2, bin, &at) : NULL;
    ok = ok && d && same_values(d, dx, nx);
    // int64 indices give the same gradient
    weft_tensor *ix64 = ok ? weft_cast(out[1], WEFT_I64) : NULL;
    weft_tensor *bin64[2] = {gt, ix64};
    weft_tensor *d64 = ix64 ? weft_op_apply1(weft_op_find("max_pool2d_backward"), 2, bin64, &at) : NULL;
    ok = ok && d64 && same_bits(d, d64);
    // through autograd: the public op, gy as the seed
    weft_tensor *leaf = weft_tensor_detach(xt);
    weft_tensor_set_requires_grad(leaf, true);
    weft_pool2d_params pp = {{c->kh, c->kw}, {c->sh, c->sw}, {c->ph, c->pw}, false};
    weft_tensor *ya = weft_max_pool2d(leaf, &pp);
    ok = ok && ya && same_values(ya, y, ny) && weft_backward(ya, gt, NULL) == WEFT_OK &&
         same_values(weft_tensor_grad(leaf), dx, nx);
    if (ok) wt_pass++;
    else {
        wt_fail++;
        fprintf(stderr, "max_pool2d %s: differs from the recompute-based reference (%s)\n", buf, weft_last_error());
    }
    weft_tensor *ts[] = {x64, g64, xc, gt, xt, out[0], out[1], d, ix64, d64, leaf, ya};
    for (int i = 0; i < 12; i++) weft_tensor_free(ts[i]);
    free(x), free(gy), free(y), free(dx), free(ix), free(ixd);
}

static const pcfg k_cases[] = {
    {2, 3, 8, 10, 2, 2, 2, 2, 0, 0}, // the 2x2 tiling path
    {2, 3, 9, 11, 2, 2, 2, 2, 0, 0}, // ... odd sizes: a last row and column outside every window
    {2, 3, 7, 8, 3, 3, 1, 1, 1, 1},  // stride 1 < kernel 3: up to 9 windows share an element
    {2, 3, 9, 12, 3, 3, 2, 2, 1, 1}, // overlapping and padded
    {2, 3, 7, 9, 3, 2, 1, 2, 1, 0},  // asymmetric
    {2, 3, 11, 10, 5, 4, 3, 3, 2, 2},
    {2, 3, 4, 5, 4, 5, 4, 5, 0, 0},  // one window = the plane
    {1, 1, 1, 1, 1, 1, 1, 1, 0, 0},  // 1x1
    {4, 16, 30, 30, 3, 3, 2, 2, 1, 1}, // past WEFT_PAR_GRAIN: threaded, overlapping
    {4, 16, 30, 30, 2, 2, 2, 2, 0, 0}, // threaded 2x2
};
#define N_CASES (sizeof k_cases / sizeof k_cases[0])

static void test_against_recompute(void) {
    static const weft_dtype dts[] = {WEFT_F32, WEFT_F64};
    for (size_t i = 0; i < N_CASES; i++)
        for (int k = 0; k < 2; k++)
            for (int v = 0; v < 3; v++)
                for (int s = 0; s < 2; s++) {
                    char w[32];
                    snprintf(w, sizeof w, "case %zu", i);
                    check_case(w, &k_cases[i], dts[k], v == 1, v == 2, s == 1, 100 + 10 * i + v);
                }
}

// Ties go to the first maximum of the window, whichever path runs.
static void test_ties_and_nan(void) {
    pcfg c = {1, 1, 2, 2, 2, 2, 2, 2, 0, 0};
    const double cases[][4] = {{3, 3, 3, 3}, {1, 5, 5, 2}, {-0.0, 0.0, 0, -0.0}, {1, NAN, 5, NAN},
                               {-INFINITY, -INFINITY, -INFINITY, -INFINITY}};
    const int64_t want[] = {0, 1, 0, 1, 0};
    for (int k = 0; k < 5; k++)
        for (int strided = 0; strided < 2; strided++) { // 2x2 path, generic path
            weft_tensor *x = weft_tensor_from_data(cases[k], WEFT_DIMS(1, 1, 2, 2), WEFT_F64);
            weft_tensor *xt = strided ? transposed_copy(x) : weft_tensor_ref(x), *out[WEFT_MAX_OP_OUT] = {0};
            CHECK(run_fwd(&c, xt, out));
            double iv = -1, yv = 1;
            if (out[1]) weft_tensor_to_f64(out[1], &iv, 1);
            if (out[0]) weft_tensor_to_f64(out[0], &yv, 1);
            CHECK(iv == (double)want[k]);
            CHECK(isnan(cases[k][want[k]]) ? isnan(yv) : yv == cases[k][want[k]]);
            CHECK(k != 2 || signbit(yv)); // -0 of the first element, not the later +0
            weft_tensor *ts[] = {x, xt, out[0], out[1]};
            for (int i = 0; i < 4; i++) weft_tensor_free(ts[i]);
        }
}

// max_pool2d_backward is linear in gy: its own backward (a gather at the
// indices), checked by finite differences in f64.
typedef struct bw_user {
    weft_tensor *ix;
    weft_attrs at;
} bw_user;
static weft_tensor *pool_bw_fn(weft_tensor *const *in, void *vu) {
    bw_user *u = vu;
    weft_tensor *bin[2] = {in[0], u->ix};
    return weft_op_apply1(weft_op_find("max_pool2d_backward"), 2, bin, &u->at);
}
static void test_double_backward(void) {
    for (int k = 0; k < 3; k++) {
        const pcfg *c = &k_cases[k == 0 ? 0 : k == 1 ? 2 : 3];
        weft_tensor *x = wt_rand64(WEFT_DIMS(c->N, c->C, c->H, c->W), -1, 1, 40 + k, false), *out[WEFT_MAX_OP_OUT];
        CHECK(run_fwd(c, x, out));
        bw_user u = {out[1], attrs_of(c)};
        weft_tensor *gy = wt_rand64(4, weft_tensor_sizes(out[0]), -1, 1, 50 + k, true);
        CHECK_GRAD(pool_bw_fn, 1, &gy, &u);
        weft_tensor *ts[] = {x, out[0], out[1], gy};
        for (int i = 0; i < 4; i++) weft_tensor_free(ts[i]);
    }
}

// Bad inputs to the backward op come back as errors naming it; indices that
// no forward wrote are never used to write outside the plane.
static void test_backward_errors(void) {
    pcfg c = {1, 2, 4, 4, 2, 2, 2, 2, 0, 0};
    weft_attrs at = attrs_of(&c);
    const weft_op_def *op = weft_op_find("max_pool2d_backward");
    weft_tensor *gy = wt_rand64(WEFT_DIMS(1, 2, 2, 2), -1, 1, 3, false);
    weft_tensor *ixf = wt_rand64(WEFT_DIMS(1, 2, 2, 2), 0, 4, 4, false);
    weft_tensor *ixs = weft_tensor_zeros(WEFT_DIMS(1, 2, 2, 1), WEFT_I32);
    weft_tensor *in1[2] = {gy, ixf}, *in2[2] = {gy, ixs};
    CHECK(weft_op_apply1(op, 2, in1, &at) == NULL && wt_error_has("max_pool2d_backward"));
    CHECK(weft_op_apply1(op, 2, in2, &at) == NULL && wt_error_has("max_pool2d_backward"));
    weft_attrs bad = at;
    bad.i[8] = 7; // (7,4) pools to (3,2), not (2,2)
    int32_t iv[8] = {0, 1, 4, 5, 10, 11, 14, 15};
    weft_tensor *ix = weft_tensor_from_data(iv, WEFT_DIMS(1, 2, 2, 2), WEFT_I32), *in3[2] = {gy, ix};
    CHECK(weft_op_apply1(op, 2, in3, &bad) == NULL && wt_error_has("max_pool2d_backward"));
    // out-of-plane and negative indices (generic path: stride 1 takes the same shapes
    // with kernel 3 and padding 1 from a 2x2 input) are skipped
    pcfg g = {1, 2, 2, 2, 3, 3, 1, 1, 1, 1};
    weft_attrs ag = attrs_of(&g);
    int32_t wild[8] = {-1, 3, 4, 1 << 30, 0, 0, 2, 7};
    weft_tensor *ixw = weft_tensor_from_data(wild, WEFT_DIMS(1, 2, 2, 2), WEFT_I32), *in4[2] = {gy, ixw};
    weft_tensor *d = weft_op_apply1(op, 2, in4, &ag);
    double gv[8], dv[8];
    weft_tensor_to_f64(gy, gv, 8);
    CHECK(d && weft_tensor_to_f64(d, dv, 8) == WEFT_OK);
    CHECK(dv[0] == 0 && dv[1] == 0 && dv[2] == 0 && dv[3] == gv[1]);
    CHECK(dv[4] == (double)((gv[4] + gv[5])) && dv[5] == 0 && dv[6] == gv[6] && dv[7] == 0);
    // the 2x2 tiling (vectorised loops): an index outside its own window, however far (the most negative
    // one of the dtype, another window's), gives that window zeros; int32 and int64 indices, a contiguous
    // gradient and one read through a transpose
    pcfg t = {1, 1, 4, 6, 2, 2, 2, 2, 0, 0}; // 2x3 windows over 4x6
    weft_attrs atl = attrs_of(&t);
    const int64_t tix[6] = {7, INT64_MIN, 5, 0, 20, -1}; // windows at 0, 2, 4, 12, 14, 16: 7, 5, 20 are theirs
    for (int wide = 0; wide < 2; wide++)
        for (int tr = 0; tr < 2; tr++) {
            int32_t i32[6];
            for (int k = 0; k < 6; k++) i32[k] = tix[k] == INT64_MIN ? INT32_MIN : (int32_t)tix[k];
            weft_tensor *ixt = wide ? weft_tensor_from_data(tix, WEFT_DIMS(1, 1, 2, 3), WEFT_I64)
                                    : weft_tensor_from_data(i32, WEFT_DIMS(1, 1, 2, 3), WEFT_I32);
            weft_tensor *g0 = tr ? wt_rand64(WEFT_DIMS(1, 1, 3, 2), -1, 1, 60, false)
                                 : wt_rand64(WEFT_DIMS(1, 1, 2, 3), -1, 1, 60, false);
            weft_tensor *gt = tr ? weft_transpose(g0, 2, 3) : weft_tensor_ref(g0), *in5[2] = {gt, ixt};
            double gv6[6], dv24[24], want[24] = {0};
            weft_tensor_to_f64(gt, gv6, 6);
            want[7] = gv6[0], want[5] = gv6[2], want[20] = gv6[4];
            weft_tensor *dt = weft_op_apply1(op, 2, in5, &atl);
            CHECK(dt && weft_tensor_to_f64(dt, dv24, 24) == WEFT_OK);
            for (int k = 0; k < 24 && dt; k++) CHECK(dv24[k] == want[k]);
            weft_tensor *tt[] = {ixt, g0, gt, dt};
            for (int k = 0; k < 4; k++) weft_tensor_free(tt[k]);
        }
    weft_tensor *ts[] = {gy, ixf, ixs, ix, ixw, d};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
    weft_clear_error();
}

// On the accelerator: the same y, indices and gradients as the CPU (bit for
// bit on the mock, whose kernels are the CPU's run through the device path;
// on a GPU the same numbers too: a maximum and a sum in the same order).
static void test_accelerator(void) {
    weft_device dev;
    bool mock = false;
    CHECK(wt_accelerator(&dev, &mock));
    (void)mock;
    for (size_t i = 0; i < N_CASES; i++)
        for (int k = 0; k < 2; k++)
            for (int strided = 0; strided < 2; strided++) {
                const pcfg *c = &k_cases[i];
                weft_dtype dt = k ? WEFT_F64 : WEFT_F32;
                int64_t nx = c->N * c->C * c->H * c->W;
                double *xv = malloc(sizeof(double) * (size_t)nx);
                fill_x(xv, nx, i % 2 == 0, i % 3 == 0, 200 + i);
                weft_tensor *x64 = weft_tensor_from_data(xv, WEFT_DIMS(c->N, c->C, c->H, c->W), WEFT_F64);
                weft_tensor *xc = weft_cast(x64, dt), *xt = strided ? transposed_copy(xc) : weft_tensor_ref(xc);
                // strided on the device too: (N,C,W,H) stored there, viewed transposed
                weft_tensor *tt = weft_transpose(xc, 2, 3), *tc = weft_tensor_contiguous(tt);
                weft_tensor *xd0 = weft_tensor_to(strided ? tc : xc, dev);
                weft_tensor *xdu = !xd0 ? NULL : strided ? weft_transpose(xd0, 2, 3) : weft_tensor_ref(xd0);
                weft_tensor *lc = weft_tensor_detach(xt), *ld = xdu ? weft_tensor_detach(xdu) : NULL;
                weft_tensor_set_requires_grad(lc, true);
                if (ld) weft_tensor_set_requires_grad(ld, true);
                weft_pool2d_params pp = {{c->kh, c->kw}, {c->sh, c->sw}, {c->ph, c->pw}, false};
                weft_tensor *yc = weft_max_pool2d(lc, &pp), *yd = ld ? weft_max_pool2d(ld, &pp) : NULL;
                weft_tensor *gy = wt_rand64(4, weft_tensor_sizes(yc), -1, 1, 300 + i, false);
                weft_tensor *gc = weft_cast(gy, dt), *gd = weft_tensor_to(gc, dev);
                bool ok = yd && weft_tensor_device(yd).type == dev.type && same_bits(yc, yd);
                ok = ok && weft_backward(yc, gc, NULL) == WEFT_OK && weft_backward(yd, gd, NULL) == WEFT_OK &&
                     same_bits(weft_tensor_grad(lc), weft_tensor_grad(ld));
                // the indices themselves
                weft_tensor *oc[WEFT_MAX_OP_OUT] = {0}, *od[WEFT_MAX_OP_OUT] = {0};
                ok = ok && run_fwd(c, xt, oc) && run_fwd(c, xdu, od) && same_bits(oc[1], od[1]);
                if (ok) wt_pass++;
                else {
                    wt_fail++;
                    fprintf(stderr, "max_pool2d on the accelerator: case %zu %s%s differs from the CPU (%s)\n", i,
                            weft_dtype_name(dt), strided ? " strided" : "", weft_last_error());
                }
                weft_tensor *ts[] = {x64, xc, xt, tt, tc, xd0, xdu, lc, ld,
                                     yc, yd, gy, gc, gd, oc[0], oc[1], od[0], od[1]};
                for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++) weft_tensor_free(ts[j]);
                free(xv);
            }
}

// Graph mode: a small CNN with an overlapping max pool, traced; symbolic
// gradients run against eager ones, then again after a save / load.
static weft_tensor *cnn(weft_tensor *const *p, weft_tensor *x, weft_tensor *t) {
    weft_conv2d_params cp = {.padding = {1, 1}};
    weft_pool2d_params pp = {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
    weft_tensor *c = weft_conv2d(x, p[0], p[1], &cp), *r = weft_relu(c), *m = weft_max_pool2d(r, &pp);
    weft_tensor *f = weft_reshape(m, 2, (int64_t[]){3, 48}), *lg = weft_matmul(f, p[2]);
    weft_tensor *l = weft_cross_entropy(lg, t);
    weft_tensor *ts[] = {c, r, m, f, lg};
    for (int k = 0; k < 5; k++) weft_tensor_free(ts[k]);
    return l;
}

static void test_graph(void) {
    weft_tensor *p[3] = {wt_rand64(WEFT_DIMS(3, 2, 3, 3), -1, 1, 61, true), wt_rand64(WEFT_DIMS(3), -1, 1, 62, true),
                         wt_rand64(WEFT_DIMS(48, 5), -1, 1, 63, true)};
    int64_t tg[3] = {4, 0, 2};
    weft_tensor *x = wt_rand64(WEFT_DIMS(3, 2, 8, 8), -1, 1, 64, false);
    weft_tensor *t = weft_tensor_from_data(tg, WEFT_DIMS(3), WEFT_I64);
    weft_graph *g = weft_graph_new();
    CHECK(weft_graph_trace_begin(g) == WEFT_OK);
    weft_value in[2] = {weft_graph_trace_input(g, x, "x"), weft_graph_trace_input(g, t, "t")}, pv[3], gv[3];
    for (int i = 0; i < 3; i++) {
        char nm[8];
        snprintf(nm, sizeof nm, "p%d", i);
        pv[i] = weft_graph_trace_variable(g, p[i], nm);
    }
    weft_tensor *loss = cnn(p, x, t);
    weft_value lv = weft_graph_trace_output(g, loss);
    CHECK(weft_graph_trace_end(g) == WEFT_OK);
    CHECK(weft_backward(loss, NULL, NULL) == WEFT_OK);
    CHECK(weft_graph_gradients(g, lv, 3, pv, gv) == WEFT_OK);
    weft_tensor *feeds[2] = {x, t}, *out[3] = {0};
    CHECK(weft_graph_run(g, 2, in, feeds, 3, gv, out, 0, NULL) == WEFT_OK);
    for (int i = 0; i < 3; i++) {
        wt_check_same("graph gradient", out[i], weft_tensor_grad(p[i]), 1e-12);
        weft_tensor_free(out[i]);
        out[i] = NULL;
    }
    char path[64];
    snprintf(path, sizeof path, "/tmp/weft_test_pool_%d.wgraph", (int)getpid());
    CHECK(weft_graph_save(g, path) == WEFT_OK);
    weft_graph *h = weft_graph_load(path);
    unlink(path);
    CHECK(h != NULL);
    if (h) {
        CHECK(weft_graph_run(h, 2, in, feeds, 3, gv, out, 0, NULL) == WEFT_OK);
        for (int i = 0; i < 3; i++) {
            wt_check_same("loaded graph gradient", out[i], weft_tensor_grad(p[i]), 1e-12);
            weft_tensor_free(out[i]);
        }
        weft_graph_free(h);
    }
    weft_graph_free(g);
    weft_tensor *ts[] = {p[0], p[1], p[2], x, t, loss};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
}

int main(void) {
    RUN(test_against_recompute);
    RUN(test_ties_and_nan);
    RUN(test_double_backward);
    RUN(test_backward_errors);
    RUN(test_graph);
    RUN(test_accelerator);
    return wt_summary();
}
