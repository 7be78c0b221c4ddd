// conv2d, conv_transpose2d, max_pool2d, avg_pool2d: forward against naive loops written here,
// gradients by finite differences (f64), f32 and non-contiguous inputs, the
// error cases, and conv2d under autocast on the CPU (bf16 kernels; f16 stays
// f32) and an accelerator.
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "weft_test.h"

// ---- reference convolution: the plain 7-loop definition ----
typedef struct cfg {
    int64_t N, C, H, W, O, KH, KW;
    weft_conv2d_params p; // filled with explicit values (no zeros for defaults) in the reference
    bool bias;
} cfg;

static int64_t olen(int64_t in, int64_t k, int s, int p, int d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

static double *ref_conv(const cfg *c, const double *x, const double *w, const double *b, int64_t *OH, int64_t *OW) {
    int sh = c->p.stride[0] ? c->p.stride[0] : 1, sw = c->p.stride[1] ? c->p.stride[1] : 1;
    int dh = c->p.dilation[0] ? c->p.dilation[0] : 1, dw = c->p.dilation[1] ? c->p.dilation[1] : 1;
    int G = c->p.groups ? c->p.groups : 1, ph = c->p.padding[0], pw = c->p.padding[1];
    *OH = olen(c->H, c->KH, sh, ph, dh);
    *OW = olen(c->W, c->KW, sw, pw, dw);
    int64_t Cg = c->C / G, Og = c->O / G;
    double *y = calloc((size_t)(c->N * c->O * *OH * *OW), sizeof(double));
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t o = 0; o < c->O; o++)
            for (int64_t oh = 0; oh < *OH; oh++)
                for (int64_t ow = 0; ow < *OW; ow++) {
                    double s = b ? b[o] : 0;
                    int64_t g = o / Og;
                    for (int64_t ci = 0; ci < Cg; ci++)
                        for (int64_t kh = 0; kh < c->KH; kh++)
                            for (int64_t kw = 0; kw < c->KW; kw++) {
                                int64_t ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                int64_t cc = g * Cg + ci;
                                s += x[((n * c->C + cc) * c->H + ih) * c->W + iw] *
                                     w[((o * Cg + ci) * c->KH + kh) * c->KW + kw];
                            }
                    y[((n * c->O + o) * *OH + oh) * *OW + ow] = s;
                }
    return y;
}

// A non-contiguous tensor with x's values: stored (N,C,W,H), viewed through a transpose.
static weft_tensor *transposed_copy(const weft_tensor *x, weft_dtype d) {
    const int64_t *s = weft_tensor_sizes(x);
    weft_tensor *base = weft_tensor_empty(WEFT_DIMS(s[0], s[1], s[3], s[2]), d);
    weft_tensor *v = weft_transpose(base, 2, 3);
    weft_tensor_copy_(v, x);
    weft_tensor_free(base);
    return v;
}

static double *values(const weft_tensor *t) {
    int64_t n = weft_tensor_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    weft_tensor_to_f64(t, v, n);
    return v;
}

// Forward of one config in f64 and f32, with a contiguous and a transposed
// (non-contiguous) input, against the reference.
static void check_conv_cfg(const cfg *c, uint64_t seed) {
    int64_t G = c->p.groups ? c->p.groups : 1;
    weft_tensor *x = wt_rand64(WEFT_DIMS(c->N, c->C, c->H, c->W), -1, 1, seed, false);
    weft_tensor *w = wt_rand64(WEFT_DIMS(c->O, c->C / G, c->KH, c->KW), -1, 1, seed + 1, false);
    weft_tensor *b = c->bias ? wt_rand64(WEFT_DIMS(c->O), -1, 1, seed + 2, false) : NULL;
    double *xv = values(x), *wv = values(w), *bv = b ? values(b) : NULL;
    int64_t OH, OW;
    double *ref = ref_conv(c, xv, wv, bv, &OH, &OW);
    int64_t n = c->N * c->O * OH * OW;
    for (int dt = 0; dt < 2; dt++) {
        weft_dtype d = dt ? WEFT_F32 : WEFT_F64;
        double tol = dt ? 1e-4 : 1e-11;
        weft_tensor *xc = weft_cast(x, d), *wc = weft_cast(w, d), *bc = b ? weft_cast(b, d) : NULL;
        weft_tensor *xtc = transposed_copy(x, d);
        CHECK(!weft_tensor_is_contiguous(xtc));
        weft_tensor *y = weft_conv2d(xc, wc, bc, &c->p);
        CHECK(y && weft_tensor_ndim(y) == 4 && weft_tensor_size(y, 2) == OH && weft_tensor_size(y, 3) == OW);
        CHECK(y && weft_tensor_dtype(y) == d);
        wt_check_values(dt ? "conv2d f32" : "conv2d f64", y, ref, n, tol);
        weft_tensor *y2 = weft_conv2d(xtc, wc, bc, &c->p);
        wt_check_values(dt ? "conv2d f32 (transposed input)" : "conv2d f64 (transposed input)", y2, ref, n, tol);
        weft_tensor_free(y);
        weft_tensor_free(y2);
        weft_tensor_free(xc);
        weft_tensor_free(wc);
        weft_tensor_free(bc);
        weft_tensor_free(xtc);
    }
    free(xv);
    free(wv);
    free(bv);
    free(ref);
    weft_tensor_free(x);
    weft_tensor_free(w);
    weft_tensor_free(b);
}

static void test_conv_forward(void) {
    cfg cs[] = {
        {2, 3, 7, 6, 4, 3, 3, {{0, 0}, {1, 1}, {0, 0}, 0}, true},        // 3x3, padding 1, bias
        {2, 3, 9, 8, 5, 3, 2, {{2, 2}, {1, 0}, {1, 1}, 1}, false},       // stride 2, asymmetric kernel
        {1, 2, 9, 10, 3, 3, 3, {{1, 1}, {2, 2}, {2, 2}, 1}, true},       // dilation 2
        {2, 4, 6, 6, 6, 3, 3, {{1, 2}, {1, 1}, {1, 1}, 2}, true},        // groups 2, mixed stride
        {3, 6, 5, 5, 6, 1, 1, {{0, 0}, {0, 0}, {0, 0}, 3}, false},       // 1x1 (direct path), groups 3
        {2, 4, 5, 7, 3, 1, 1, {{0, 0}, {0, 0}, {0, 0}, 0}, true},        // 1x1 with bias
        {4, 8, 12, 12, 8, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 1}, true},      // big enough for threads
        {5, 4, 11, 13, 6, 5, 3, {{2, 3}, {2, 1}, {1, 2}, 2}, true},      // everything at once
        {1, 1, 3, 3, 2, 3, 3, {{0, 0}, {0, 0}, {0, 0}, 0}, false},       // output 1x1
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) check_conv_cfg(&cs[i], 100 + 10 * i);
    // no input channels: the output is the bias; the gradients are empty or zero
    weft_tensor *x = weft_tensor_zeros(WEFT_DIMS(2, 0, 5, 5), WEFT_F64);
    weft_tensor *w = weft_tensor_zeros(WEFT_DIMS(3, 0, 3, 3), WEFT_F64);
    weft_tensor *b = wt_rand64(WEFT_DIMS(3), -1, 1, 5, true);
    weft_tensor_set_requires_grad(w, true);
    weft_tensor *y = weft_conv2d(x, w, b, &(weft_conv2d_params){.padding = {1, 1}});
    CHECK(y && weft_tensor_numel(y) == 2 * 3 * 25);
    double bv[3], *yv = y ? values(y) : NULL;
    weft_tensor_to_f64(b, bv, 3);
    bool ok = yv != NULL;
    for (int i = 0; yv && i < 150; i++) ok &= yv[i] == bv[(i / 25) % 3];
    CHECK(ok);
    weft_tensor *ones = weft_tensor_ones_like(y);
    CHECK(weft_backward(y, ones, NULL) == WEFT_OK);
    double gb[3] = {0};
    weft_tensor_to_f64(weft_tensor_grad(b), gb, 3);
    CHECK(gb[0] == 50 && gb[1] == 50 && gb[2] == 50);
    CHECK(weft_tensor_grad(w) == NULL || weft_tensor_numel(weft_tensor_grad(w)) == 0);
    weft_tensor_free(ones);
    free(yv);
    weft_tensor_free(x);
    weft_tensor_free(w);
    weft_tensor_free(b);
    weft_tensor_free(y);
}

// ---- gradients ----
static weft_tensor *conv_fn(weft_tensor *const *in, void *user) {
    const cfg *c = user;
    return weft_conv2d(in[0], in[1], c->bias ? in[2] : NULL, &c->p);
}

static void gradcheck_cfg(const cfg *c, uint64_t seed) {
    int64_t G = c->p.groups ? c->p.groups : 1;
    weft_tensor *in[3] = {wt_rand64(WEFT_DIMS(c->N, c->C, c->H, c->W), -1, 1, seed, true),
                          wt_rand64(WEFT_DIMS(c->O, c->C / G, c->KH, c->KW), -1, 1, seed + 1, true),
                          c->bias ? wt_rand64(WEFT_DIMS(c->O), -1, 1, seed + 2, true) : NULL};
    CHECK_GRAD(conv_fn, c->bias ? 3 : 2, in, (void *)c);
    for (int i = 0; i < 3; i++) weft_tensor_free(in[i]);
}

static void test_conv_grad(void) {
    cfg cs[] = {
        {2, 2, 5, 5, 3, 3, 3, {{0, 0}, {1, 1}, {0, 0}, 0}, true},
        {2, 2, 7, 6, 2, 3, 2, {{2, 2}, {1, 0}, {1, 1}, 1}, false},
        {1, 2, 7, 7, 2, 3, 3, {{1, 1}, {2, 1}, {2, 2}, 1}, true},
        {2, 4, 5, 5, 4, 3, 3, {{2, 1}, {1, 1}, {1, 1}, 2}, true},
        {2, 4, 3, 4, 2, 1, 1, {{0, 0}, {0, 0}, {0, 0}, 2}, true},
        {3, 4, 8, 8, 6, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 1}, true}, // threaded kernels
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) gradcheck_cfg(&cs[i], 300 + 10 * i);

    // The gradient through a non-contiguous (transposed) input.
    weft_tensor *xb = wt_rand64(WEFT_DIMS(2, 2, 6, 5), -1, 1, 7, true);
    weft_tensor *w = wt_rand64(WEFT_DIMS(3, 2, 3, 3), -1, 1, 8, false);
    weft_tensor *xt = weft_transpose(xb, 2, 3);
    weft_conv2d_params p = {{1, 2}, {1, 1}, {1, 1}, 1};
    weft_tensor *y = weft_conv2d(xt, w, NULL, &p), *s = weft_sum(y, 0, NULL, false);
    CHECK(weft_backward(s, NULL, NULL) == WEFT_OK);
    // reference: the same conv of a contiguous copy
    weft_tensor *xc_base = weft_tensor_detach(xt);
    weft_tensor *xc = weft_tensor_contiguous(xc_base);
    CHECK(weft_tensor_is_contiguous(xc) && !weft_tensor_shares_storage(xc, xb));
    weft_tensor_set_requires_grad(xc, true);
    weft_tensor *y2 = weft_conv2d(xc, w, NULL, &p), *s2 = weft_sum(y2, 0, NULL, false);
    CHECK(weft_backward(s2, NULL, NULL) == WEFT_OK);
    weft_tensor *gt = weft_transpose(weft_tensor_grad(xb), 2, 3);
    double *ref = values(weft_tensor_grad(xc));
    wt_check_values("grad of transposed input", gt, ref, 2 * 2 * 5 * 6, 1e-12);
    free(ref);
    weft_tensor *ts[] = {xb, w, xt, y, s, xc_base, xc, y2, s2, gt};
    for (int i = 0; i < 10; i++) weft_tensor_free(ts[i]);
}

// f32 gradients (all three backward kernels) against the f64 ones, which
// gradcheck validated; the output gradient is random and the input transposed.
static void test_conv_grad_f32(void) {
    cfg c = {4, 4, 9, 8, 6, 3, 3, {{2, 1}, {1, 1}, {1, 2}, 2}, true};
    weft_tensor *x = wt_rand64(WEFT_DIMS(4, 4, 9, 8), -1, 1, 41, false);
    weft_tensor *w = wt_rand64(WEFT_DIMS(6, 2, 3, 3), -1, 1, 42, false);
    weft_tensor *b = wt_rand64(WEFT_DIMS(6), -1, 1, 43, false);
    double *grads[2][3];
    for (int dt = 0; dt < 2; dt++) {
        weft_dtype d = dt ? WEFT_F32 : WEFT_F64;
        // fresh leaves (weft_cast to the same dtype would return w itself)
        weft_tensor *xd = transposed_copy(x, d), *wc = weft_cast(w, d), *bc = weft_cast(b, d);
        weft_tensor *xl = weft_tensor_detach(xd), *wd = weft_tensor_clone(wc), *bd = weft_tensor_clone(bc);
        weft_tensor *in[] = {xl, wd, bd};
        for (int i = 0; i < 3; i++) weft_tensor_set_requires_grad(in[i], true);
        weft_tensor *y = weft_conv2d(xl, wd, bd, &c.p);
        weft_tensor *gy = wt_rand64(4, weft_tensor_sizes(y), -1, 1, 44, false), *gyd = weft_cast(gy, d);
        CHECK(weft_backward(y, gyd, NULL) == WEFT_OK);
        for (int i = 0; i < 3; i++) grads[dt][i] = values(weft_tensor_grad(in[i]));
        weft_tensor *ts[] = {xd, wd, bd, wc, bc, xl, y, gy, gyd};
        for (int i = 0; i < 9; i++) weft_tensor_free(ts[i]);
    }
    int64_t n[3] = {4 * 4 * 9 * 8, 6 * 2 * 9, 6};
    const char *what[3] = {"f32 dx", "f32 dw", "f32 db"};
    for (int i = 0; i < 3; i++) {
        int bad = 0;
        for (int64_t k = 0; k < n[i]; k++) bad += fabs(grads[1][i][k] - grads[0][i][k]) > 1e-4 * (1 + fabs(grads[0][i][k]));
        if (bad) fprintf(stderr, "%s: %d mismatches\n", what[i], bad);
        CHECK(bad == 0);
        free(grads[0][i]);
        free(grads[1][i]);
    }
    weft_tensor_free(x);
    weft_tensor_free(w);
    weft_tensor_free(b);
}

// The fused backward ops have backward rules of their own (second order).
typedef struct bw_user {
    const char *op;
    weft_attrs at;
} bw_user;
static weft_tensor *bw_op_fn(weft_tensor *const *in, void *user) {
    bw_user *u = user;
    return weft_op_apply1(weft_op_find(u->op), 2, in, &u->at);
}
static weft_tensor *bw_op1_fn(weft_tensor *const *in, void *user) {
    bw_user *u = user;
    return weft_op_apply1(weft_op_find(u->op), 1, in, &u->at);
}
static void test_conv_double_backward(void) {
    bw_user bb = {"conv2d_backward_bias", {{0}}};
    weft_tensor *gb = wt_rand64(WEFT_DIMS(2, 3, 4, 5), -1, 1, 10, true);
    CHECK_GRAD(bw_op1_fn, 1, &gb, &bb);
    weft_tensor_free(gb);
    // conv: x (2,4,6,5), w (6,2,3,3), stride (2,1), pad (1,1), dilation (1,2), groups 2 -> y (2,6,3,3)
    bw_user bi = {"conv2d_backward_input", {.i = {2, 1, 1, 1, 1, 2, 2, 0, 6, 5}}};
    weft_tensor *in[2] = {wt_rand64(WEFT_DIMS(2, 6, 3, 3), -1, 1, 11, true),
                          wt_rand64(WEFT_DIMS(6, 2, 3, 3), -1, 1, 12, true)};
    CHECK_GRAD(bw_op_fn, 2, in, &bi);
    weft_tensor_free(in[1]);
    bw_user bw = {"conv2d_backward_weight", {.i = {2, 1, 1, 1, 1, 2, 2, 0, 3, 3}}};
    in[1] = wt_rand64(WEFT_DIMS(2, 4, 6, 5), -1, 1, 13, true);
    CHECK_GRAD(bw_op_fn, 2, in, &bw);
    weft_tensor_free(in[0]);
    weft_tensor_free(in[1]);
}

// ---- conv_transpose2d ----
// The reference scatters: every input pixel adds x * w's window into the full output, which padding then crops
// (PyTorch's definition); no use of conv2d or its backward.
typedef struct tcfg {
    int64_t N, C, H, W, O, KH, KW; // C input channels, O output channels
    weft_conv_transpose2d_params p; // explicit values (no zeros for defaults) except groups 0 -> 1
    bool bias;
} tcfg;

static double *ref_conv_t(const tcfg *c, const double *x, const double *w, const double *b, int64_t *OH,
                          int64_t *OW) {
    const weft_conv_transpose2d_params *p = &c->p;
    int64_t G = p->groups ? p->groups : 1, Cg = c->C / G, Og = c->O / G;
    int64_t FH = (c->H - 1) * p->stride[0] + p->dilation[0] * (c->KH - 1) + 1 + p->output_padding[0];
    int64_t FW = (c->W - 1) * p->stride[1] + p->dilation[1] * (c->KW - 1) + 1 + p->output_padding[1];
    *OH = FH - 2 * p->padding[0];
    *OW = FW - 2 * p->padding[1];
    double *full = calloc((size_t)(c->N * c->O * FH * FW), sizeof(double));
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t ci = 0; ci < c->C; ci++)
            for (int64_t ih = 0; ih < c->H; ih++)
                for (int64_t iw = 0; iw < c->W; iw++)
                    for (int64_t og = 0; og < Og; og++)
                        for (int64_t kh = 0; kh < c->KH; kh++)
                            for (int64_t kw = 0; kw < c->KW; kw++) {
                                int64_t o = (ci / Cg) * Og + og;
                                int64_t fh = ih * p->stride[0] + kh * p->dilation[0];
                                int64_t fw = iw * p->stride[1] + kw * p->dilation[1];
                                full[((n * c->O + o) * FH + fh) * FW + fw] +=
                                    x[((n * c->C + ci) * c->H + ih) * c->W + iw] *
                                    w[((ci * Og + og) * c->KH + kh) * c->KW + kw];
                            }
    double *y = malloc(sizeof(double) * (size_t)(c->N * c->O * *OH * *OW));
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t o = 0; o < c->O; o++)
            for (int64_t oh = 0; oh < *OH; oh++)
                for (int64_t ow = 0; ow < *OW; ow++)
                    y[((n * c->O + o) * *OH + oh) * *OW + ow] =
                        full[((n * c->O + o) * FH + oh + p->padding[0]) * FW + ow + p->padding[1]] + (b ? b[o] : 0);
    free(full);
    return y;
}

static const tcfg TCFGS[] = {
    {2, 3, 4, 5, 2, 3, 3, {{1, 1}, {0, 0}, {0, 0}, {1, 1}, 1}, true},  // stride 1: a "full" convolution
    {2, 4, 3, 4, 3, 4, 4, {{2, 2}, {1, 1}, {0, 0}, {1, 1}, 1}, true},  // DCGAN's k4 s2 p1: doubles H and W
    {1, 2, 3, 3, 4, 3, 2, {{2, 3}, {1, 0}, {1, 2}, {1, 1}, 1}, false}, // output_padding, mixed strides
    {2, 4, 3, 3, 6, 3, 3, {{2, 1}, {1, 1}, {1, 0}, {2, 1}, 2}, true},  // groups 2, dilation
    {1, 6, 2, 3, 3, 1, 1, {{3, 2}, {0, 0}, {2, 1}, {1, 1}, 3}, true},  // 1x1, groups 3, output_padding only
};

static weft_tensor *conv_t_fn(weft_tensor *const *in, void *user) {
    const tcfg *c = user;
    return weft_conv_transpose2d(in[0], in[1], c->bias ? in[2] : NULL, &c->p);
}

static void test_conv_transpose(void) {
    for (size_t i = 0; i < sizeof TCFGS / sizeof TCFGS[0]; i++) {
        const tcfg *c = &TCFGS[i];
        uint64_t seed = 500 + 10 * i;
        int64_t G = c->p.groups ? c->p.groups : 1;
        weft_tensor *in[3] = {wt_rand64(WEFT_DIMS(c->N, c->C, c->H, c->W), -1, 1, seed, true),
                              wt_rand64(WEFT_DIMS(c->C, c->O / G, c->KH, c->KW), -1, 1, seed + 1, true),
                              c->bias ? wt_rand64(WEFT_DIMS(c->O), -1, 1, seed + 2, true) : NULL};
        double *xv = values(in[0]), *wv = values(in[1]), *bv = c->bias ? values(in[2]) : NULL;
        int64_t OH, OW;
        double *ref = ref_conv_t(c, xv, wv, bv, &OH, &OW);
        for (int dt = 0; dt < 2; dt++) {
            weft_dtype d = dt ? WEFT_F32 : WEFT_F64;
            weft_tensor *xc = weft_cast(in[0], d), *wc = weft_cast(in[1], d), *bc = c->bias ? weft_cast(in[2], d) : NULL;
            weft_tensor *y = weft_conv_transpose2d(xc, wc, bc, &c->p);
            CHECK(y && weft_tensor_size(y, 0) == c->N && weft_tensor_size(y, 1) == c->O &&
                  weft_tensor_size(y, 2) == OH && weft_tensor_size(y, 3) == OW && weft_tensor_dtype(y) == d);
            wt_check_values(dt ? "conv_transpose2d f32" : "conv_transpose2d f64", y, ref, c->N * c->O * OH * OW,
                            dt ? 1e-4 : 1e-12);
            weft_tensor *ts[] = {xc, wc, bc, y};
            for (int k = 0; k < 4; k++) weft_tensor_free(ts[k]);
        }
        CHECK_GRAD(conv_t_fn, c->bias ? 3 : 2, in, (void *)c);
        free(xv);
        free(wv);
        free(bv);
        free(ref);
        for (int k = 0; k < 3; k++) weft_tensor_free(in[k]);
    }
    // The adjoint identity <conv2d(u, w), v> = <u, conv_transpose2d(v, w)> for the same params.
    weft_conv2d_params cp = {{2, 1}, {1, 1}, {1, 2}, 2};
    weft_conv_transpose2d_params tp = {{2, 1}, {1, 1}, {0, 0}, {1, 2}, 2};
    weft_tensor *u = wt_rand64(WEFT_DIMS(2, 4, 7, 6), -1, 1, 61, false);
    weft_tensor *w = wt_rand64(WEFT_DIMS(6, 2, 3, 3), -1, 1, 62, false);
    weft_tensor *cu = weft_conv2d(u, w, NULL, &cp);
    weft_tensor *v = cu ? wt_rand64(4, weft_tensor_sizes(cu), -1, 1, 63, false) : NULL;
    weft_tensor *tv = weft_conv_transpose2d(v, w, NULL, &tp);
    CHECK(tv && weft_tensor_size(tv, 2) == 7 && weft_tensor_size(tv, 3) == 6);
    weft_tensor *p1 = weft_mul(cu, v), *p2 = tv ? weft_mul(u, tv) : NULL;
    weft_tensor *s1 = weft_sum(p1, 0, NULL, false), *s2 = p2 ? weft_sum(p2, 0, NULL, false) : NULL;
    double a = 0, bsum = 1;
    if (s1) weft_tensor_to_f64(s1, &a, 1);
    if (s2) weft_tensor_to_f64(s2, &bsum, 1);
    CHECK(fabs(a - bsum) < 1e-10 * (1 + fabs(a)));
    weft_tensor *ts[] = {u, w, cu, v, tv, p1, p2, s1, s2};
    for (int k = 0; k < 9; k++) weft_tensor_free(ts[k]);
}

// ---- pooling ----
static double *ref_pool(bool is_max, const weft_pool2d_params *p, const double *x, int64_t N, int64_t C, int64_t H,
                        int64_t W, int64_t *OH, int64_t *OW) {
    int kh = p->kernel[0], kw = p->kernel[1], sh = p->stride[0] ? p->stride[0] : kh,
        sw = p->stride[1] ? p->stride[1] : kw, ph = p->padding[0], pw = p->padding[1];
    *OH = (H + 2 * ph - kh) / sh + 1;
    *OW = (W + 2 * pw - kw) / sw + 1;
    double *y = malloc(sizeof(double) * (size_t)(N * C * *OH * *OW));
    for (int64_t nc = 0; nc < N * C; nc++)
        for (int64_t oh = 0; oh < *OH; oh++)
            for (int64_t ow = 0; ow < *OW; ow++) {
                double m = -INFINITY, s = 0;
                int cnt = 0, cnt_pad = 0;
                for (int i = 0; i < kh; i++)
                    for (int j = 0; j < kw; j++) {
                        int64_t ih = oh * sh - ph + i, iw = ow * sw - pw + j;
                        if (ih < H + ph && iw < W + pw) cnt_pad++; // inside the padded input
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                        double v = x[(nc * H + ih) * W + iw];
                        if (v > m) m = v;
                        s += v;
                        cnt++;
                    }
                y[(nc * *OH + oh) * *OW + ow] = is_max ? m : s / (p->count_include_pad ? cnt_pad : cnt);
            }
    return y;
}

static void check_pool(bool is_max, const weft_pool2d_params *p, int64_t N, int64_t C, int64_t H, int64_t W,
                       uint64_t seed) {
    weft_tensor *x = wt_rand64(WEFT_DIMS(N, C, H, W), -2, 2, seed, false);
    double *xv = values(x);
    int64_t OH, OW;
    double *ref = ref_pool(is_max, p, xv, N, C, H, W, &OH, &OW);
    weft_tensor *(*f)(weft_tensor *, const weft_pool2d_params *) = is_max ? weft_max_pool2d : weft_avg_pool2d;
    for (int dt = 0; dt < 2; dt++) {
        weft_dtype d = dt ? WEFT_F32 : WEFT_F64;
        weft_tensor *xc = weft_cast(x, d), *xtc = transposed_copy(x, d);
        weft_tensor *y = f(xc, p), *y2 = f(xtc, p);
        CHECK(y && weft_tensor_size(y, 2) == OH && weft_tensor_size(y, 3) == OW && weft_tensor_dtype(y) == d);
        wt_check_values(is_max ? "max_pool2d" : "avg_pool2d", y, ref, N * C * OH * OW, dt ? 1e-6 : 1e-13);
        wt_check_values(is_max ? "max_pool2d (transposed)" : "avg_pool2d (transposed)", y2, ref, N * C * OH * OW,
                        dt ? 1e-6 : 1e-13);
        weft_tensor *ts[] = {xc, xtc, y, y2};
        for (int i = 0; i < 4; i++) weft_tensor_free(ts[i]);
    }
    free(xv);
    free(ref);
    weft_tensor_free(x);
}

static weft_tensor *maxpool_fn(weft_tensor *const *in, void *user) { return weft_max_pool2d(in[0], user); }
static weft_tensor *avgpool_fn(weft_tensor *const *in, void *user) { return weft_avg_pool2d(in[0], user); }
// Pool of a transposed view of the leaf (backward gets a non-contiguous saved input).
static weft_tensor *maxpool_t_fn(weft_tensor *const *in, void *user) {
    weft_tensor *t = weft_transpose(in[0], 2, 3), *y = weft_max_pool2d(t, user);
    weft_tensor_free(t);
    return y;
}

static void test_pool(void) {
    weft_pool2d_params ps[] = {
        {{2, 2}, {0, 0}, {0, 0}, true},  // the classic 2x2 / 2
        {{3, 3}, {2, 2}, {1, 1}, true},  // overlapping, padded, count_include_pad
        {{3, 3}, {2, 2}, {1, 1}, false}, // ... without the padding in the divisor
        {{3, 2}, {1, 2}, {1, 1}, true},  // asymmetric
        {{4, 4}, {3, 3}, {2, 2}, false}, // padding = kernel / 2
    };
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        check_pool(true, &ps[i], 2, 3, 9, 8, 500 + i);
        check_pool(false, &ps[i], 2, 3, 9, 8, 600 + i);
        check_pool(true, &ps[i], 4, 16, 30, 30, 700 + i); // threaded
        check_pool(false, &ps[i], 4, 16, 30, 30, 800 + i);
        weft_tensor *x = wt_rand64(WEFT_DIMS(2, 2, 7, 6), -1, 1, 900 + i, true);
        CHECK_GRAD(maxpool_fn, 1, &x, &ps[i]);
        CHECK_GRAD(avgpool_fn, 1, &x, &ps[i]);
        CHECK_GRAD(maxpool_t_fn, 1, &x, &ps[i]);
        weft_tensor_free(x);
        // avg_pool2d_backward is differentiable again (its adjoint is avg_pool2d)
        weft_attrs at = {.i = {ps[i].kernel[0], ps[i].kernel[1], ps[i].stride[0] ? ps[i].stride[0] : ps[i].kernel[0],
                               ps[i].stride[1] ? ps[i].stride[1] : ps[i].kernel[1], ps[i].padding[0], ps[i].padding[1],
                               ps[i].count_include_pad, 0, 7, 6}};
        weft_tensor *xa = wt_rand64(WEFT_DIMS(2, 2, 7, 6), -1, 1, 950 + i, false);
        weft_tensor *ya = weft_avg_pool2d(xa, &ps[i]);
        weft_tensor *gy = wt_rand64(4, weft_tensor_sizes(ya), -1, 1, 960 + i, true);
        CHECK(gy != NULL);
        weft_tensor *dx = weft_op_apply1(weft_op_find("avg_pool2d_backward"), 1, &gy, &at);
        // <avg_pool(xa), gy> == <xa, avg_pool_backward(gy)>: the two are adjoint
        double *a1 = values(ya), *a2 = values(gy), *b1 = values(xa), *b2 = values(dx);
        double l = 0, r = 0;
        for (int64_t k = 0; k < weft_tensor_numel(ya); k++) l += a1[k] * a2[k];
        for (int64_t k = 0; k < weft_tensor_numel(xa); k++) r += b1[k] * b2[k];
        CHECK_NEAR(l, r, 1e-12);
        free(a1), free(a2), free(b1), free(b2);
        weft_tensor *ts[] = {xa, ya, gy, dx};
        for (int k = 0; k < 4; k++) weft_tensor_free(ts[k]);
    }
    // max pool sends the gradient to the first maximum of a window with ties
    weft_tensor *x = weft_tensor_full(WEFT_DIMS(1, 1, 2, 2), WEFT_F64, 3.0);
    weft_tensor_set_requires_grad(x, true);
    weft_pool2d_params p = {{2, 2}, {0, 0}, {0, 0}, true};
    weft_tensor *y = weft_max_pool2d(x, &p);
    CHECK(weft_backward(y, NULL, NULL) == WEFT_OK);
    double g[4];
    weft_tensor_to_f64(weft_tensor_grad(x), g, 4);
    CHECK(g[0] == 1 && g[1] == 0 && g[2] == 0 && g[3] == 0);
    weft_tensor_free(x);
    weft_tensor_free(y);
    // a NaN wins the window (as in PyTorch) and takes the gradient; f32 and f64
    for (int dt = 0; dt < 2; dt++) {
        double v[4] = {1, NAN, 5, 2};
        weft_tensor *x64 = weft_tensor_from_data(v, WEFT_DIMS(1, 1, 2, 2), WEFT_F64);
        weft_tensor *xn = dt ? weft_cast(x64, WEFT_F32) : weft_tensor_ref(x64);
        weft_tensor_set_requires_grad(xn, true);
        weft_tensor *yn = weft_max_pool2d(xn, &p);
        CHECK(isnan(weft_tensor_item(yn)));
        CHECK(weft_backward(yn, NULL, NULL) == WEFT_OK);
        weft_tensor_to_f64(weft_tensor_grad(xn), g, 4);
        CHECK(g[0] == 0 && g[1] == 1 && g[2] == 0 && g[3] == 0);
        weft_tensor_free(x64);
        weft_tensor_free(xn);
        weft_tensor_free(yn);
    }
}

static void test_avg_pool_double_backward(void) {
    bw_user u = {"avg_pool2d_backward", {.i = {3, 3, 2, 2, 1, 1, 0, 0, 7, 6}}};
    weft_tensor *gy = wt_rand64(WEFT_DIMS(2, 2, 4, 3), -1, 1, 21, true);
    weft_tensor *dx = weft_op_apply1(weft_op_find(u.op), 1, &gy, &u.at);
    CHECK(dx && weft_tensor_size(dx, 2) == 7 && weft_tensor_size(dx, 3) == 6);
    weft_tensor *s = weft_sum(dx, 0, NULL, false);
    CHECK(weft_backward(s, NULL, NULL) == WEFT_OK); // through avg_pool2d_backward's own rule
    // d sum(dx) / d gy = per-window (number of real elements / divisor) = 1 without padding in the divisor
    double gv[48];
    weft_tensor_to_f64(weft_tensor_grad(gy), gv, 48);
    bool ones = true;
    for (int i = 0; i < 48; i++) ones &= fabs(gv[i] - 1) < 1e-12;
    CHECK(ones);
    weft_tensor_free(gy);
    weft_tensor_free(dx);
    weft_tensor_free(s);
}

// ---- errors ----
static bool fails_naming(weft_tensor *t, const char *op) {
    bool ok = t == NULL && strstr(weft_last_error(), op) != NULL;
    if (!ok) fprintf(stderr, "expected an error naming %s, got '%s'\n", op, weft_last_error());
    weft_tensor_free(t);
    weft_clear_error();
    return ok;
}

static void test_errors(void) {
    weft_tensor *x = wt_rand64(WEFT_DIMS(2, 4, 5, 5), -1, 1, 1, false);
    weft_tensor *w = wt_rand64(WEFT_DIMS(6, 2, 3, 3), -1, 1, 2, false);
    weft_tensor *w3 = wt_rand64(WEFT_DIMS(6, 3, 3, 3), -1, 1, 3, false);
    weft_tensor *wbig = wt_rand64(WEFT_DIMS(6, 4, 7, 3), -1, 1, 4, false);
    weft_tensor *x3 = wt_rand64(WEFT_DIMS(4, 5, 5), -1, 1, 5, false);
    weft_tensor *b5 = wt_rand64(WEFT_DIMS(5), -1, 1, 6, false);
    weft_tensor *xf = weft_cast(x, WEFT_F32), *xi = weft_cast(x, WEFT_I32);
    weft_conv2d_params g2 = {.groups = 2}, g3 = {.groups = 3}, g1 = {0};
    weft_tensor *ok = weft_conv2d(x, w, NULL, &g2);
    CHECK(ok != NULL);
    weft_tensor_free(ok);
    CHECK(fails_naming(weft_conv2d(x, w, NULL, &g3), "conv2d"));    // 4 channels not divisible by 3
    CHECK(fails_naming(weft_conv2d(x, w3, NULL, &g1), "conv2d"));   // weight has 3 channels, input 4
    CHECK(fails_naming(weft_conv2d(x, wbig, NULL, &g1), "conv2d")); // 7 > 5 (no padding)
    weft_conv2d_params pad1 = {.padding = {1, 1}};
    ok = weft_conv2d(x, wbig, NULL, &pad1); // 7 <= 5 + 2: fits
    CHECK(ok != NULL);
    weft_tensor_free(ok);
    weft_conv2d_params dil = {.padding = {1, 1}, .dilation = {2, 1}};
    CHECK(fails_naming(weft_conv2d(x, wbig, NULL, &dil), "conv2d")); // dilated 13 > 7
    CHECK(fails_naming(weft_conv2d(x3, w, NULL, &g2), "conv2d"));    // 3-D input
    CHECK(fails_naming(weft_conv2d(x, w, b5, &g2), "conv2d"));       // bias of 5 for 6 outputs
    CHECK(fails_naming(weft_conv2d(xf, w, NULL, &g2), "conv2d"));    // f32 input, f64 weight
    CHECK(fails_naming(weft_conv2d(xi, w, NULL, &g2), "conv2d"));    // integer input
    weft_conv2d_params neg = {.padding = {-1, 0}};
    CHECK(fails_naming(weft_conv2d(x, w, NULL, &neg), "conv2d"));
    CHECK(fails_naming(weft_conv2d(NULL, w, NULL, &g1), "conv2d"));

    // conv_transpose2d: x (2,4,5,5) with w (4, O/G, k, k)
    weft_tensor *tw = wt_rand64(WEFT_DIMS(4, 3, 3, 3), -1, 1, 7, false);
    weft_conv_transpose2d_params t1 = {0}, ts2 = {.stride = {2, 2}, .output_padding = {1, 1}};
    ok = weft_conv_transpose2d(x, tw, NULL, &ts2);
    CHECK(ok && weft_tensor_size(ok, 1) == 3 && weft_tensor_size(ok, 2) == 12); // (5-1) 2 + 3 + 1
    weft_tensor_free(ok);
    CHECK(fails_naming(weft_conv_transpose2d(x, w, NULL, &t1), "conv_transpose2d"));  // w has 6 in-channels
    weft_conv_transpose2d_params bad_op = {.stride = {2, 2}, .output_padding = {2, 0}};
    CHECK(fails_naming(weft_conv_transpose2d(x, tw, NULL, &bad_op), "conv_transpose2d")); // output_padding >= stride
    weft_conv_transpose2d_params big_pad = {.padding = {4, 0}};
    CHECK(fails_naming(weft_conv_transpose2d(x, tw, NULL, &big_pad), "conv_transpose2d")); // 7 - 8 < 1
    weft_conv_transpose2d_params tg3 = {.groups = 3};
    CHECK(fails_naming(weft_conv_transpose2d(x, tw, NULL, &tg3), "conv_transpose2d")); // 4 % 3
    CHECK(fails_naming(weft_conv_transpose2d(x, tw, b5, &t1), "conv_transpose2d"));    // bias 5 for 3 outputs
    CHECK(fails_naming(weft_conv_transpose2d(xf, tw, NULL, &t1), "conv_transpose2d")); // f32 with f64
    CHECK(fails_naming(weft_conv_transpose2d(x3, tw, NULL, &t1), "conv_transpose2d"));
    CHECK(fails_naming(weft_conv_transpose2d(x, NULL, NULL, &t1), "conv_transpose2d"));
    weft_tensor_free(tw);

    weft_pool2d_params p6 = {{6, 2}, {0, 0}, {0, 0}, true}, p2 = {{2, 2}, {0, 0}, {2, 0}, true};
    weft_pool2d_params p0 = {{0, 2}, {0, 0}, {0, 0}, true}, pok = {{2, 2}, {0, 0}, {0, 0}, true};
    CHECK(fails_naming(weft_max_pool2d(x, &p6), "max_pool2d")); // kernel 6 > 5
    CHECK(fails_naming(weft_avg_pool2d(x, &p6), "avg_pool2d"));
    CHECK(fails_naming(weft_max_pool2d(x, &p2), "max_pool2d")); // padding > kernel / 2
    CHECK(fails_naming(weft_avg_pool2d(x, &p0), "avg_pool2d")); // zero kernel
    CHECK(fails_naming(weft_max_pool2d(x3, &pok), "max_pool2d"));
    CHECK(fails_naming(weft_avg_pool2d(x3, &pok), "avg_pool2d"));
    CHECK(fails_naming(weft_max_pool2d(xi, &pok), "max_pool2d"));
    CHECK(fails_naming(weft_max_pool2d(x, NULL), "max_pool2d"));
    weft_tensor *ts[] = {x, w, w3, wbig, x3, b5, xf, xi};
    for (int i = 0; i < 8; i++) weft_tensor_free(ts[i]);
}

// ---- conv2d under autocast ----
// The dispatcher's rule (src/ops/dispatch.c): under weft_autocast_set(bf16 /
// f16), conv2d runs on its f32 inputs cast to that dtype where the device has
// a conv2d kernel for it, and its output stays in that dtype (as torch.autocast);
// gradients of f32 leaves are f32.
// The CPU has bf16 conv kernels but no f16 ones, so under f16 autocast it
// runs in f32, unchanged. CUDA has both (cuda/conv.c); their numbers are checked in
// tests/cuda/test_cuda_conv.c. Here, on the mock accelerator, kernels that do
// what the CUDA ones do (half inputs, f32 sums, one rounding of each result)
// through the CPU's f32 kernels stand in for them, so the plumbing (which
// tensors get cast where, the backward ops in the low dtype, f32 gradients)
// is checked bit for bit against that chain written out with casts.

// v rounded to dt (f16 / bf16) and back.
static float round_to(weft_dtype dt, float v) {
    return dt == WEFT_BF16 ? weft_bf16_to_f32(weft_f32_to_bf16(v)) : weft_f16_to_f32(weft_f32_to_f16(v));
}

// A mock-device kernel for the conv ops in f16 / bf16: each half input
// widened to f32 (exact), the CPU's f32 kernel, each output rounded once.
// Mock memory is host memory, so it reads and writes tensors directly.
static weft_status mock_half_conv(const weft_op_args *a) {
    const weft_kernel_fn cpu_fn = a->op->kernel[WEFT_CPU].fn;
    weft_dtype lo = (weft_dtype)a->out[0]->dtype;
    if (lo != WEFT_F16 && lo != WEFT_BF16) return cpu_fn(a);
    weft_tensor *in32[3] = {0}, *out32 = weft_tensor_new(a->out[0]->ndim, a->out[0]->sizes, WEFT_F32, WEFT_DEVICE_CPU);
    weft_status st = out32 ? WEFT_OK : weft_last_status();
    for (int i = 0; i < a->n_in && !st; i++) {
        weft_tensor *c = weft_kernel_contiguous(a->in[i]);
        in32[i] = c ? weft_tensor_new(c->ndim, c->sizes, WEFT_F32, WEFT_DEVICE_CPU) : NULL;
        if (!in32[i]) st = weft_last_status();
        for (int64_t k = 0; !st && k < c->numel; k++) {
            uint16_t h = ((const uint16_t *)weft_tensor_ptr(c))[k];
            ((float *)weft_tensor_ptr(in32[i]))[k] = lo == WEFT_BF16 ? weft_bf16_to_f32(h) : weft_f16_to_f32(h);
        }
        weft_tensor_free(c);
    }
    if (!st) {
        weft_op_args b = *a;
        b.in = in32;
        b.out = &out32;
        st = cpu_fn(&b);
    }
    for (int64_t k = 0; !st && k < out32->numel; k++) {
        float v = ((const float *)weft_tensor_ptr(out32))[k];
        ((uint16_t *)weft_tensor_ptr(a->out[0]))[k] = lo == WEFT_BF16 ? weft_f32_to_bf16(v) : weft_f32_to_f16(v);
    }
    for (int i = 0; i < 3; i++) weft_tensor_free(in32[i]);
    weft_tensor_free(out32);
    return st;
}

// y = conv2d(x, w, b) under autocast `ac` on x's device, and the gradients
// of loss = sum(y * r) (r: f32 on the CPU); all returned as f32 CPU tensors
// (out[0] = y, out[1..3] = dx, dw, db). Checks the dtypes and devices.
static void conv_autocast_run(weft_tensor *const *in, weft_tensor *r, weft_device dev, weft_dtype ac,
                              const weft_conv2d_params *p, weft_tensor **out) {
    weft_tensor *leaf[3];
    for (int i = 0; i < 3; i++) {
        weft_tensor *t = weft_tensor_to(in[i], dev);
        leaf[i] = weft_tensor_detach(t);
        weft_tensor_free(t);
        weft_tensor_set_requires_grad(leaf[i], true);
    }
    CHECK(weft_autocast_set(ac) == WEFT_OK);
    weft_tensor *y = weft_conv2d(leaf[0], leaf[1], leaf[2], p);
    weft_autocast_set(WEFT_F32);
    // y stays in the low dtype where a half kernel ran (f32 where none did)
    bool low = weft_dtype_is_float(weft_tensor_dtype(y)) && weft_tensor_dtype(y) != WEFT_F32;
    CHECK(y && (!low || weft_tensor_dtype(y) == ac) && weft_device_equal(weft_tensor_device(y), dev));
    // y * r with r f32: type promotion computes it in f32 (the gradient reaches y rounded to its dtype)
    weft_tensor *rd = weft_tensor_to(r, dev), *m = weft_mul(y, rd), *l = weft_sum(m, 0, NULL, false);
    CHECK(l && weft_backward(l, NULL, NULL) == WEFT_OK);
    weft_tensor *yf = weft_cast(y, WEFT_F32);
    out[0] = weft_tensor_to(yf, WEFT_DEVICE_CPU);
    weft_tensor_free(yf);
    for (int i = 0; i < 3; i++) {
        weft_tensor *g = weft_tensor_grad(leaf[i]);
        CHECK(g && weft_tensor_dtype(g) == WEFT_F32 && weft_device_equal(weft_tensor_device(g), dev));
        out[i + 1] = g ? weft_tensor_to(g, WEFT_DEVICE_CPU) : NULL;
    }
    weft_tensor *ts[] = {leaf[0], leaf[1], leaf[2], y, rd, m, l};
    for (int i = 0; i < 7; i++) weft_tensor_free(ts[i]);
}

// f32 CPU tensor t with every element rounded to dt (f16 / bf16).
static weft_tensor *rounded(weft_tensor *t, weft_dtype dt) {
    weft_tensor *c = weft_tensor_contiguous(t), *r = weft_tensor_clone(c);
    float *v = weft_tensor_data(r);
    for (int64_t k = 0; k < weft_tensor_numel(r); k++) v[k] = round_to(dt, v[k]);
    weft_tensor_free(c);
    return r;
}

// The autocast chain written out: rounded inputs, f32 conv, y rounded; the
// incoming gradient rounded (the cast's backward), each gradient rounded.
// on[] (y, dx, dw, db) ran in `lo` on some device; off[] is the f32 run.
static void check_rounded_chain(const char *dev, weft_tensor *const *in, weft_tensor *r, weft_dtype lo,
                                const weft_conv2d_params *p, weft_tensor *const *on, weft_tensor *const *off,
                                double tol) {
    weft_tensor *rin[3], *want[4];
    for (int i = 0; i < 3; i++) {
        rin[i] = rounded(in[i], lo);
        weft_tensor_set_requires_grad(rin[i], true);
    }
    weft_tensor *y = weft_conv2d(rin[0], rin[1], rin[2], p), *rr = rounded(r, lo);
    weft_tensor *m = weft_mul(y, rr), *l = weft_sum(m, 0, NULL, false);
    CHECK(l && weft_backward(l, NULL, NULL) == WEFT_OK);
    want[0] = rounded(y, lo);
    for (int i = 0; i < 3; i++) want[i + 1] = rounded(weft_tensor_grad(rin[i]), lo);
    // the low dtype ran: y differs from the f32 result
    double d = 0;
    const float *a = on[0] ? weft_tensor_data(on[0]) : NULL, *b = weft_tensor_data(off[0]);
    for (int64_t j = 0; a && j < weft_tensor_numel(off[0]); j++) d = fmax(d, fabs(a[j] - b[j]));
    CHECK(d > 0);
    static const char *const what[] = {"y", "dx", "dw", "db"};
    for (int i = 0; i < 4; i++) {
        char msg[64];
        snprintf(msg, sizeof msg, "%s autocast %s", dev, what[i]);
        wt_check_same(msg, on[i], want[i], tol);
    }
    weft_tensor *ts[] = {y, rr, m, l, rin[0], rin[1], rin[2], want[0], want[1], want[2], want[3]};
    for (int i = 0; i < 11; i++) weft_tensor_free(ts[i]);
}

static void test_conv_autocast(void) {
    weft_conv2d_params p = {{2, 1}, {1, 1}, {1, 1}, 2};
    weft_tensor *in[3], *off[4], *on[4];
    in[0] = weft_cast(wt_keep(wt_rand64(WEFT_DIMS(3, 4, 9, 8), -1, 1, 51, false)), WEFT_F32);
    in[1] = weft_cast(wt_keep(wt_rand64(WEFT_DIMS(6, 2, 3, 3), -1, 1, 52, false)), WEFT_F32);
    in[2] = weft_cast(wt_keep(wt_rand64(WEFT_DIMS(6), -1, 1, 53, false)), WEFT_F32);
    weft_tensor *r = weft_cast(wt_keep(wt_rand64(WEFT_DIMS(3, 6, 5, 8), -1, 1, 54, false)), WEFT_F32);
    conv_autocast_run(in, r, WEFT_DEVICE_CPU, WEFT_F32, &p, off);
    // CPU, f16: no f16 conv kernel, so autocast leaves conv2d in f32: bit-identical
    conv_autocast_run(in, r, WEFT_DEVICE_CPU, WEFT_F16, &p, on);
    for (int i = 0; i < 4; i++) {
        wt_check_same("cpu conv2d under f16 autocast", on[i], off[i], 0);
        weft_tensor_free(on[i]);
    }
    // CPU, bf16: the bf16 kernels run (oneDNN's bf16 convolution, or im2col
    // widened), each result rounded once. Against the chain: the f32 sums run
    // in another order, so a result may round to the neighbouring bf16 value
    // (one ulp, 2^-8 = 0.4% relative): tolerance 1e-2.
    conv_autocast_run(in, r, WEFT_DEVICE_CPU, WEFT_BF16, &p, on);
    check_rounded_chain("cpu", in, r, WEFT_BF16, &p, on, off, 1e-2);
    for (int i = 0; i < 4; i++) weft_tensor_free(on[i]);
    // the accelerator: its half kernels run (the mock's stand in where no GPU is present)
    weft_device dev;
    bool mock = false;
    CHECK(wt_accelerator(&dev, &mock));
    static const char *const conv_ops[] = {"conv2d", "conv2d_backward_input", "conv2d_backward_weight",
                                           "conv2d_backward_bias"};
    if (mock)
        for (int i = 0; i < 4; i++)
            CHECK(weft_op_register_kernel(conv_ops[i], WEFT_CUDA, mock_half_conv,
                                          WEFT_DT_FLOAT | WEFT_DT(WEFT_F16) | WEFT_DT(WEFT_BF16)) == WEFT_OK);
    for (int k = 0; k < 2; k++) {
        weft_dtype lo = k ? WEFT_F16 : WEFT_BF16;
        conv_autocast_run(in, r, dev, lo, &p, on);
        // on a GPU: cuBLAS sums in another order (test_cuda_conv checks those
        // numbers against bounds); here the tolerance only keeps the check honest
        check_rounded_chain(mock ? "mock" : "cuda", in, r, lo, &p, on, off, mock ? 0 : (k ? 1e-2 : 3e-2));
        for (int i = 0; i < 4; i++) weft_tensor_free(on[i]);
    }
    for (int i = 0; i < 4; i++) weft_tensor_free(off[i]);
    for (int i = 0; i < 3; i++) weft_tensor_free(in[i]);
    weft_tensor_free(r);
    wt_drop_all();
}

// conv_transpose2d under autocast, as PyTorch's autocast runs it with conv2d: on the CPU under bf16 its product
// (conv2d_backward_input) runs in bf16 and its bias joins it there, so y is bf16, one rounding (plus the bias
// add's) from the f32 result; the gradients of the f32 leaves are f32 and near the f32 run's. Under f16 (no CPU
// kernel) it stays in f32, bit for bit.
static void test_conv_transpose_autocast(void) {
    weft_conv_transpose2d_params p = {.stride = {2, 2}, .padding = {1, 0}, .output_padding = {1, 0}, .groups = 2};
    weft_tensor *x = weft_cast(wt_keep(wt_rand64(WEFT_DIMS(2, 4, 5, 4), -1, 1, 61, false)), WEFT_F32);
    weft_tensor *w = weft_cast(wt_keep(wt_rand64(WEFT_DIMS(4, 3, 3, 2), -1, 1, 62, false)), WEFT_F32);
    weft_tensor *b = weft_cast(wt_keep(wt_rand64(WEFT_DIMS(6), -1, 1, 63, false)), WEFT_F32);
    weft_tensor *out[3][4] = {{0}}; // f32, f16, bf16 runs: y (as f32), dx, dw, db
    static const weft_dtype acs[3] = {WEFT_F32, WEFT_F16, WEFT_BF16};
    for (int k = 0; k < 3; k++) {
        weft_tensor *leaf[3] = {weft_tensor_clone(x), weft_tensor_clone(w), weft_tensor_clone(b)};
        for (int i = 0; i < 3; i++) weft_tensor_set_requires_grad(leaf[i], true);
        CHECK(weft_autocast_set(acs[k]) == WEFT_OK);
        weft_tensor *y = weft_conv_transpose2d(leaf[0], leaf[1], leaf[2], &p);
        weft_autocast_set(WEFT_F32);
        CHECK(y && weft_tensor_dtype(y) == (k == 2 ? WEFT_BF16 : WEFT_F32));
        weft_tensor *l = y ? weft_sum(y, 0, NULL, false) : NULL;
        CHECK(l && weft_backward(l, NULL, NULL) == WEFT_OK);
        out[k][0] = y ? weft_cast(y, WEFT_F32) : NULL;
        for (int i = 0; i < 3; i++) {
            weft_tensor *g = weft_tensor_grad(leaf[i]);
            CHECK(g && weft_tensor_dtype(g) == WEFT_F32);
            out[k][i + 1] = weft_tensor_ref(g);
            weft_tensor_free(leaf[i]);
        }
        weft_tensor_free(y);
        weft_tensor_free(l);
    }
    static const char *const what[4] = {"y", "dx", "dw", "db"};
    for (int i = 0; i < 4; i++) {
        char msg[64];
        snprintf(msg, sizeof msg, "conv_transpose2d f16 autocast on the cpu: %s", what[i]);
        if (out[1][i] && out[0][i]) wt_check_same(msg, out[1][i], out[0][i], 0);
        snprintf(msg, sizeof msg, "conv_transpose2d bf16 autocast: %s", what[i]);
        if (out[2][i] && out[0][i]) wt_check_same(msg, out[2][i], out[0][i], 3e-2);
    }
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 4; i++) weft_tensor_free(out[k][i]);
    weft_tensor_free(x), weft_tensor_free(w), weft_tensor_free(b);
    wt_drop_all();
}

int main(void) {
    RUN(test_conv_forward);
    RUN(test_conv_grad);
    RUN(test_conv_grad_f32);
    RUN(test_conv_double_backward);
    RUN(test_conv_transpose);
    RUN(test_pool);
    RUN(test_avg_pool_double_backward);
    RUN(test_errors);
    RUN(test_conv_transpose_autocast);
    RUN(test_conv_autocast); // last: it may install kernels on the mock accelerator
    return wt_summary();
}
