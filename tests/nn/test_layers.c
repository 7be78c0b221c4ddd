// Layers: conv2d, pools, batch_norm, layer_norm, dropout, embedding, flatten,
// activations. Each forward against a naive loop written here, parameter and
// buffer names/shapes, gradients of the parameters against closed forms,
// PyTorch's init statistics, train vs eval, a small CNN, and bad arguments.
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

// All values of t as doubles (caller frees).
static double *vals(const weft_tensor *t) {
    int64_t n = weft_tensor_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (weft_tensor_to_f64(t, v, n)) memset(v, 0, sizeof(double) * (size_t)n);
    return v;
}
static weft_tensor *f32_from(const double *v, int ndim, const int64_t *sizes) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= sizes[d];
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
    weft_tensor *t = weft_tensor_from_data(f, ndim, sizes, WEFT_F32);
    free(f);
    return t;
}
// Rounds through f32 so references use exactly the values the layer sees.
static void round32(double *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) v[i] = (float)v[i];
}
static bool has_shape(const weft_tensor *t, int nd, const int64_t *s) {
    if (!t || weft_tensor_ndim(t) != nd) return false;
    for (int d = 0; d < nd; d++)
        if (weft_tensor_size(t, d) != s[d]) return false;
    return true;
}
static bool named(const weft_module *m, bool param, int i, const char *want) {
    char name[64];
    weft_tensor *t =
        param ? weft_module_param_at(m, i, name, sizeof name) : weft_module_buffer_at(m, i, name, sizeof name);
    return t && !strcmp(name, want);
}
static bool err_has(const char *s) { return strstr(weft_last_error(), s) != NULL; }

// ---- conv2d ----
enum { CN = 2, CI = 4, CO = 6, CG = 2, KH = 3, KW = 2, IH = 7, IW = 6, SH = 2, SW = 1, PH = 1, PW = 1, DH = 1, DW = 2 };
#define COH ((IH + 2 * PH - DH * (KH - 1) - 1) / SH + 1)
#define COW ((IW + 2 * PW - DW * (KW - 1) - 1) / SW + 1)

static void test_conv2d(void) {
    weft_generator *g = weft_generator_create(11);
    weft_conv2d_params p = {{SH, SW}, {PH, PW}, {DH, DW}, CG};
    weft_module *m = weft_nn_conv2d(CI, CO, KH, KW, &p, true, g);
    CHECK(m && !strcmp(weft_module_kind(m), "conv2d"));
    CHECK(weft_module_param_count(m) == 2 && weft_module_buffer_count(m) == 0);
    CHECK(named(m, true, 0, "weight") && named(m, true, 1, "bias"));
    weft_tensor *w = weft_module_get(m, "weight"), *b = weft_module_get(m, "bias");
    CHECK(has_shape(w, WEFT_DIMS(CO, CI / CG, KH, KW)) && has_shape(b, WEFT_DIMS(CO)));
    CHECK(weft_tensor_requires_grad(w) && weft_tensor_requires_grad(b));
    double *wv = vals(w), *bv = vals(b);
    double bound = 1 / sqrt((double)(CI / CG * KH * KW));
    for (int i = 0; i < CO * (CI / CG) * KH * KW; i++) CHECK(fabs(wv[i]) <= bound);
    for (int i = 0; i < CO; i++) CHECK(fabs(bv[i]) <= bound);

    static double xv[CN * CI * IH * IW], gv[CN * CO * COH * COW];
    wt_vals(xv, CN * CI * IH * IW, -1, 1, 5);
    wt_vals(gv, CN * CO * COH * COW, -1, 1, 6);
    round32(xv, CN * CI * IH * IW);
    round32(gv, CN * CO * COH * COW);
    // naive reference: y, dW, db, dx for gradient G
    static double ref[CN * CO * COH * COW], dw[CO * (CI / CG) * KH * KW], dx[CN * CI * IH * IW];
    double db[CO] = {0};
    memset(dw, 0, sizeof dw);
    memset(dx, 0, sizeof dx);
    int cg = CI / CG, og = CO / CG;
    for (int n = 0; n < CN; n++)
        for (int o = 0; o < CO; o++)
            for (int oh = 0; oh < COH; oh++)
                for (int ow = 0; ow < COW; ow++) {
                    int yi = ((n * CO + o) * COH + oh) * COW + ow;
                    double s = bv[o], gy = gv[yi];
                    db[o] += gy;
                    for (int c = 0; c < cg; c++)
                        for (int i = 0; i < KH; i++)
                            for (int j = 0; j < KW; j++) {
                                int ih = oh * SH - PH + i * DH, iw = ow * SW - PW + j * DW;
                                if (ih < 0 || ih >= IH || iw < 0 || iw >= IW) continue;
                                int ci = (o / og) * cg + c;
                                int xi = ((n * CI + ci) * IH + ih) * IW + iw, wi = ((o * cg + c) * KH + i) * KW + j;
                                s += xv[xi] * wv[wi];
                                dw[wi] += gy * xv[xi];
                                dx[xi] += gy * wv[wi];
                            }
                    ref[yi] = s;
                }
    weft_tensor *x = f32_from(xv, WEFT_DIMS(CN, CI, IH, IW));
    weft_tensor_set_requires_grad(x, true);
    weft_tensor *y = weft_module_forward(m, x);
    CHECK(has_shape(y, WEFT_DIMS(CN, CO, COH, COW)));
    wt_check_values("conv2d forward", y, ref, CN * CO * COH * COW, 1e-5);
    weft_tensor *gy = f32_from(gv, WEFT_DIMS(CN, CO, COH, COW));
    CHECK(weft_backward(y, gy, NULL) == WEFT_OK);
    wt_check_values("conv2d dW", weft_tensor_grad(w), dw, CO * cg * KH * KW, 1e-5);
    wt_check_values("conv2d db", weft_tensor_grad(b), db, CO, 1e-5);
    wt_check_values("conv2d dx", weft_tensor_grad(x), dx, CN * CI * IH * IW, 1e-5);

    // non-contiguous input: an (N,H,W,C) buffer permuted to (N,C,H,W)
    static double nhwc[CN * IH * IW * CI];
    for (int n = 0; n < CN; n++)
        for (int c = 0; c < CI; c++)
            for (int h = 0; h < IH; h++)
                for (int q = 0; q < IW; q++)
                    nhwc[((n * IH + h) * IW + q) * CI + c] = xv[((n * CI + c) * IH + h) * IW + q];
    weft_tensor *xs = f32_from(nhwc, WEFT_DIMS(CN, IH, IW, CI));
    weft_tensor *xp = weft_permute(xs, (const int[]){0, 3, 1, 2});
    CHECK(xp && !weft_tensor_is_contiguous(xp));
    weft_tensor *y2 = weft_module_forward(m, xp);
    wt_check_values("conv2d forward (permuted input)", y2, ref, CN * CO * COH * COW, 1e-5);

    // the wrong number of input channels is an error naming conv2d
    weft_tensor *bad = weft_tensor_ones(WEFT_DIMS(1, CI + 1, IH, IW), WEFT_F32);
    CHECK(weft_module_forward(m, bad) == NULL && err_has("conv2d"));

    // seeded: same seed, same weights; no bias when asked
    weft_generator *g2 = weft_generator_create(11);
    weft_module *m2 = weft_nn_conv2d(CI, CO, KH, KW, &p, false, g2);
    CHECK(m2 && weft_module_param_count(m2) == 1 && weft_module_get(m2, "bias") == NULL);
    double *wv2 = vals(weft_module_get(m2, "weight"));
    CHECK(!memcmp(wv, wv2, sizeof(double) * CO * cg * KH * KW));
    // p NULL: stride 1, no padding
    weft_module *m3 = weft_nn_conv2d(CI, 3, 3, 3, NULL, true, g);
    weft_tensor *y3 = weft_module_forward(m3, xp);
    CHECK(has_shape(y3, WEFT_DIMS(CN, 3, IH - 2, IW - 2)));

    free(wv);
    free(wv2);
    free(bv);
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_tensor_free(gy);
    weft_tensor_free(xs);
    weft_tensor_free(xp);
    weft_tensor_free(y2);
    weft_tensor_free(y3);
    weft_tensor_free(bad);
    weft_module_free(m);
    weft_module_free(m2);
    weft_module_free(m3);
    weft_generator_free(g);
    weft_generator_free(g2);
}

// PyTorch's default: weight and bias ~ U(+-1/sqrt(fan_in)), variance bound^2/3.
static void test_conv2d_init_stats(void) {
    weft_generator *g = weft_generator_create(2);
    weft_module *m = weft_nn_conv2d(32, 64, 3, 3, &(weft_conv2d_params){.groups = 2}, true, g);
    weft_tensor *w = weft_module_get(m, "weight");
    CHECK(has_shape(w, WEFT_DIMS(64, 16, 3, 3)));
    int64_t n = weft_tensor_numel(w);
    double *v = vals(w), bound = 1 / sqrt(16.0 * 9), s = 0, ss = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) s += v[i], ss += v[i] * v[i], mx = fmax(mx, fabs(v[i]));
    double mean = s / n, var = ss / n - mean * mean;
    CHECK(mx <= bound && mx > 0.99 * bound);
    CHECK_NEAR(var, bound * bound / 3, 0.05);
    CHECK(fabs(mean) < 4 * sqrt(bound * bound / 3 / n));
    double *bv = vals(weft_module_get(m, "bias"));
    double bmx = 0;
    for (int i = 0; i < 64; i++) bmx = fmax(bmx, fabs(bv[i]));
    CHECK(bmx <= bound && bmx > 0.5 * bound);
    free(v);
    free(bv);
    weft_module_free(m);
    weft_generator_free(g);
}

// ConvTranspose2d: weight (cin, cout/groups, kh, kw) ~ U(+-1/sqrt(cout/groups*kh*kw)) (PyTorch's fan_in of that
// weight), the forward is the op with the module's parameters.
static void test_conv_transpose2d(void) {
    weft_generator *g = weft_generator_create(3);
    weft_conv_transpose2d_params p = {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 0}, .groups = 2};
    weft_module *m = weft_nn_conv_transpose2d(32, 64, 4, 3, &p, true, g);
    CHECK(m && !strcmp(weft_module_kind(m), "conv_transpose2d"));
    weft_tensor *w = weft_module_get(m, "weight"), *b = weft_module_get(m, "bias");
    CHECK(has_shape(w, WEFT_DIMS(32, 32, 4, 3)) && has_shape(b, WEFT_DIMS(64)));
    int64_t n = weft_tensor_numel(w);
    double *v = vals(w), bound = 1 / sqrt(32.0 * 12), s = 0, ss = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) s += v[i], ss += v[i] * v[i], mx = fmax(mx, fabs(v[i]));
    double var = ss / n - (s / n) * (s / n);
    CHECK(mx <= bound && mx > 0.99 * bound);
    CHECK_NEAR(var, bound * bound / 3, 0.05);
    free(v);
    weft_tensor *x64 = wt_rand64(WEFT_DIMS(2, 32, 5, 4), -1, 1, 9, false), *x = weft_cast(x64, WEFT_F32);
    weft_tensor_free(x64);
    weft_tensor *y = weft_module_forward(m, x), *r = weft_conv_transpose2d(x, w, b, &p);
    // (5-1)*2 - 2 + 3 + 1 + 1 = 11, (4-1)*2 - 2 + 2 + 1 = 7
    CHECK(has_shape(y, WEFT_DIMS(2, 64, 11, 7)));
    double *yv = y ? vals(y) : NULL, *rv = r ? vals(r) : NULL;
    bool same = yv && rv;
    for (int64_t i = 0; same && i < 2 * 64 * 11 * 7; i++) same = yv[i] == rv[i];
    CHECK(same);
    free(yv);
    free(rv);
    CHECK(weft_nn_conv_transpose2d(4, 4, 3, 3, &(weft_conv_transpose2d_params){.output_padding = {1, 0}}, true, g) ==
              NULL &&
          err_has("conv_transpose2d")); // output_padding 1 with stride 1
    weft_clear_error();
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_tensor_free(r);
    weft_module_free(m);
    weft_generator_free(g);
}

// ---- pooling ----
enum { PN = 2, PC = 3, PHH = 5, PWW = 6 };
static void test_pools(void) {
    weft_pool2d_params p = {{2, 3}, {2, 2}, {1, 1}, true};
    weft_module *mx = weft_nn_max_pool2d(&p), *av = weft_nn_avg_pool2d(&p);
    p.count_include_pad = false;
    weft_module *av2 = weft_nn_avg_pool2d(&p);
    CHECK(mx && av && av2 && !strcmp(weft_module_kind(mx), "max_pool2d") &&
          !strcmp(weft_module_kind(av), "avg_pool2d"));
    CHECK(weft_module_param_count(mx) == 0 && weft_module_param_count(av) == 0);
    enum { OH = (PHH + 2 - 2) / 2 + 1, OW = (PWW + 2 - 3) / 2 + 1 };
    static double xv[PN * PC * PHH * PWW], rmax[PN * PC * OH * OW], ravg[PN * PC * OH * OW], ravg2[PN * PC * OH * OW],
        dxmax[PN * PC * PHH * PWW];
    wt_vals(xv, PN * PC * PHH * PWW, -2, 2, 9);
    round32(xv, PN * PC * PHH * PWW);
    memset(dxmax, 0, sizeof dxmax);
    for (int nc = 0; nc < PN * PC; nc++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                double best = -INFINITY, s = 0;
                int cnt = 0, arg = -1;
                for (int i = 0; i < 2; i++)
                    for (int j = 0; j < 3; j++) {
                        int h = oh * 2 - 1 + i, q = ow * 2 - 1 + j;
                        if (h < 0 || h >= PHH || q < 0 || q >= PWW) continue;
                        int xi = (nc * PHH + h) * PWW + q;
                        if (xv[xi] > best) best = xv[xi], arg = xi;
                        s += xv[xi], cnt++;
                    }
                int yi = (nc * OH + oh) * OW + ow;
                rmax[yi] = best;
                ravg[yi] = s / 6; // windows never pass the padded edge here, so the divisor is kh*kw
                ravg2[yi] = s / cnt;
                dxmax[arg] += 1;
            }
    weft_tensor *x = f32_from(xv, WEFT_DIMS(PN, PC, PHH, PWW));
    weft_tensor_set_requires_grad(x, true);
    weft_tensor *ym = weft_module_forward(mx, x), *ya = weft_module_forward(av, x), *ya2 = weft_module_forward(av2, x);
    CHECK(has_shape(ym, WEFT_DIMS(PN, PC, OH, OW)) && has_shape(ya, WEFT_DIMS(PN, PC, OH, OW)));
    wt_check_values("max_pool2d forward", ym, rmax, PN * PC * OH * OW, 1e-6);
    wt_check_values("avg_pool2d forward", ya, ravg, PN * PC * OH * OW, 1e-6);
    wt_check_values("avg_pool2d forward (no pad count)", ya2, ravg2, PN * PC * OH * OW, 1e-6);
    weft_tensor *ones = weft_tensor_ones(WEFT_DIMS(PN, PC, OH, OW), WEFT_F32);
    CHECK(weft_backward(ym, ones, NULL) == WEFT_OK);
    wt_check_values("max_pool2d dx", weft_tensor_grad(x), dxmax, PN * PC * PHH * PWW, 1e-6);
    // default stride = kernel
    weft_module *m22 = weft_nn_max_pool2d(&(weft_pool2d_params){.kernel = {2, 2}});
    weft_tensor *y22 = weft_module_forward(m22, x);
    CHECK(has_shape(y22, WEFT_DIMS(PN, PC, PHH / 2, PWW / 2)));
    weft_tensor_free(x);
    weft_tensor_free(ym);
    weft_tensor_free(ya);
    weft_tensor_free(ya2);
    weft_tensor_free(y22);
    weft_tensor_free(ones);
    weft_module_free(mx);
    weft_module_free(av);
    weft_module_free(av2);
    weft_module_free(m22);
}

// ---- batch_norm ----
enum { BN = 4, BC = 3, BH = 2, BW = 2, BM = BN * BH * BW };
static void bn_stats(const double *x, int c, double *mean, double *var) { // biased variance
    double s = 0, ss = 0;
    for (int n = 0; n < BN; n++)
        for (int k = 0; k < BH * BW; k++) s += x[(n * BC + c) * BH * BW + k];
    *mean = s / BM;
    for (int n = 0; n < BN; n++)
        for (int k = 0; k < BH * BW; k++) {
            double d = x[(n * BC + c) * BH * BW + k] - *mean;
            ss += d * d;
        }
    *var = ss / BM;
}

static void test_batch_norm(void) {
    const double mom = 0.1, eps = 1e-5;
    weft_module *m = weft_nn_batch_norm(BC, mom, eps);
    CHECK(m && !strcmp(weft_module_kind(m), "batch_norm"));
    CHECK(weft_module_param_count(m) == 2 && weft_module_buffer_count(m) == 2);
    CHECK(named(m, true, 0, "weight") && named(m, true, 1, "bias"));
    CHECK(named(m, false, 0, "running_mean") && named(m, false, 1, "running_var"));
    weft_tensor *w = weft_module_get(m, "weight"), *b = weft_module_get(m, "bias");
    weft_tensor *rm = weft_module_get(m, "running_mean"), *rv = weft_module_get(m, "running_var");
    CHECK(has_shape(w, WEFT_DIMS(BC)) && has_shape(rv, WEFT_DIMS(BC)));
    CHECK(!weft_tensor_requires_grad(rm) && !weft_tensor_requires_grad(rv) && weft_tensor_requires_grad(w));
    double one[BC] = {1, 1, 1}, zero[BC] = {0};
    wt_check_values("bn weight init", w, one, BC, 0);
    wt_check_values("bn bias init", b, zero, BC, 0);
    wt_check_values("bn running_mean init", rm, zero, BC, 0);
    wt_check_values("bn running_var init", rv, one, BC, 0);
    // a non-trivial affine: weight (0.5, 2, -1), bias (0.1, -0.2, 0.3)
    double wv[BC] = {0.5, 2, -1}, bv[BC] = {0.1, -0.2, 0.3};
    for (int c = 0; c < BC; c++) {
        weft_tensor_set(w, (int64_t[]){c}, wv[c]);
        weft_tensor_set(b, (int64_t[]){c}, bv[c]);
    }
    static double xv[BN * BC * BH * BW], x2[BN * BC * BH * BW], gv[BN * BC * BH * BW], ref[BN * BC * BH * BW];
    wt_vals(xv, BN * BC * BH * BW, -1, 3, 21);
    wt_vals(x2, BN * BC * BH * BW, -2, 1, 22);
    wt_vals(gv, BN * BC * BH * BW, -1, 1, 23);
    round32(xv, BN * BC * BH * BW);
    round32(x2, BN * BC * BH * BW);
    round32(gv, BN * BC * BH * BW);
    double mean[BC], var[BC], rmr[BC], rvr[BC], dwr[BC] = {0}, dbr[BC] = {0};
    for (int c = 0; c < BC; c++) {
        bn_stats(xv, c, &mean[c], &var[c]);
        rmr[c] = mom * mean[c];
        rvr[c] = (1 - mom) * 1 + mom * var[c] * BM / (BM - 1); // unbiased in the running estimate
        for (int n = 0; n < BN; n++)
            for (int k = 0; k < BH * BW; k++) {
                int i = (n * BC + c) * BH * BW + k;
                double xh = (xv[i] - mean[c]) / sqrt(var[c] + eps);
                ref[i] = xh * wv[c] + bv[c];
                dwr[c] += gv[i] * xh;
                dbr[c] += gv[i];
            }
    }
    // training: batch statistics; running stats move by momentum
    weft_tensor *x = f32_from(xv, WEFT_DIMS(BN, BC, BH, BW));
    weft_tensor *y = weft_module_forward(m, x);
    wt_check_values("bn train forward", y, ref, BN * BC * BH * BW, 1e-5);
    wt_check_values("bn running_mean", rm, rmr, BC, 1e-5);
    wt_check_values("bn running_var", rv, rvr, BC, 1e-5);
    weft_tensor *gy = f32_from(gv, WEFT_DIMS(BN, BC, BH, BW));
    CHECK(weft_backward(y, gy, NULL) == WEFT_OK);
    wt_check_values("bn dweight", weft_tensor_grad(w), dwr, BC, 1e-4);
    wt_check_values("bn dbias", weft_tensor_grad(b), dbr, BC, 1e-5);
    // eval: the running statistics, which stay as they are
    weft_module_set_training(m, false);
    for (int c = 0; c < BC; c++)
        for (int n = 0; n < BN; n++)
            for (int k = 0; k < BH * BW; k++) {
                int i = (n * BC + c) * BH * BW + k;
                ref[i] = (x2[i] - rmr[c]) / sqrt(rvr[c] + eps) * wv[c] + bv[c];
            }
    weft_tensor *xe = f32_from(x2, WEFT_DIMS(BN, BC, BH, BW));
    weft_tensor *ye = weft_module_forward(m, xe);
    wt_check_values("bn eval forward", ye, ref, BN * BC * BH * BW, 1e-5);
    wt_check_values("bn running_mean unchanged in eval", rm, rmr, BC, 1e-6);
    wt_check_values("bn running_var unchanged in eval", rv, rvr, BC, 1e-6);
    // back to training: a second update from the current running values
    weft_module_set_training(m, true);
    weft_tensor *y3 = weft_module_forward(m, xe);
    for (int c = 0; c < BC; c++) {
        double mu, v2;
        bn_stats(x2, c, &mu, &v2);
        rmr[c] = (1 - mom) * rmr[c] + mom * mu;
        rvr[c] = (1 - mom) * rvr[c] + mom * v2 * BM / (BM - 1);
    }
    wt_check_values("bn running_mean 2nd update", rm, rmr, BC, 1e-5);
    wt_check_values("bn running_var 2nd update", rv, rvr, BC, 1e-5);
    // (N,C) input (BatchNorm1d's case) works; the wrong channel count names batch_norm
    weft_tensor *x2d = weft_tensor_ones(WEFT_DIMS(5, BC), WEFT_F32);
    weft_tensor *y2d = weft_module_forward(m, x2d);
    CHECK(has_shape(y2d, WEFT_DIMS(5, BC)));
    weft_tensor *bad = weft_tensor_ones(WEFT_DIMS(2, BC + 1, 2, 2), WEFT_F32);
    CHECK(weft_module_forward(m, bad) == NULL && err_has("batch_norm"));
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_tensor_free(gy);
    weft_tensor_free(xe);
    weft_tensor_free(ye);
    weft_tensor_free(y3);
    weft_tensor_free(x2d);
    weft_tensor_free(y2d);
    weft_tensor_free(bad);
    weft_module_free(m);
}

// ---- layer_norm ----
enum { LR = 6, LD = 5 };
static void test_layer_norm(void) {
    const double eps = 1e-5;
    weft_module *m = weft_nn_layer_norm(LD, eps);
    CHECK(m && !strcmp(weft_module_kind(m), "layer_norm"));
    CHECK(weft_module_param_count(m) == 2 && weft_module_buffer_count(m) == 0);
    CHECK(named(m, true, 0, "weight") && named(m, true, 1, "bias"));
    weft_tensor *w = weft_module_get(m, "weight"), *b = weft_module_get(m, "bias");
    double one[LD] = {1, 1, 1, 1, 1}, zero[LD] = {0};
    wt_check_values("ln weight init", w, one, LD, 0);
    wt_check_values("ln bias init", b, zero, LD, 0);
    double wv[LD] = {1.5, -0.5, 2, 0.25, 1}, bv[LD] = {0, 0.3, -0.1, 0.2, -1};
    for (int d = 0; d < LD; d++) {
        weft_tensor_set(w, (int64_t[]){d}, wv[d]);
        weft_tensor_set(b, (int64_t[]){d}, bv[d]);
    }
    double xv[LR * LD], gv[LR * LD], ref[LR * LD], dwr[LD] = {0}, dbr[LD] = {0};
    wt_vals(xv, LR * LD, -2, 2, 31);
    wt_vals(gv, LR * LD, -1, 1, 32);
    round32(xv, LR * LD);
    round32(gv, LR * LD);
    for (int r = 0; r < LR; r++) {
        double mu = 0, var = 0;
        for (int d = 0; d < LD; d++) mu += xv[r * LD + d] / LD;
        for (int d = 0; d < LD; d++) var += (xv[r * LD + d] - mu) * (xv[r * LD + d] - mu) / LD;
        for (int d = 0; d < LD; d++) {
            double xh = (xv[r * LD + d] - mu) / sqrt(var + eps);
            ref[r * LD + d] = xh * wv[d] + bv[d];
            dwr[d] += gv[r * LD + d] * xh;
            dbr[d] += gv[r * LD + d];
        }
    }
    weft_tensor *x = f32_from(xv, WEFT_DIMS(2, LR / 2, LD)); // (B,T,C)
    weft_tensor *y = weft_module_forward(m, x);
    CHECK(has_shape(y, WEFT_DIMS(2, LR / 2, LD)));
    wt_check_values("layer_norm forward", y, ref, LR * LD, 1e-5);
    weft_tensor *gy = f32_from(gv, WEFT_DIMS(2, LR / 2, LD));
    CHECK(weft_backward(y, gy, NULL) == WEFT_OK);
    wt_check_values("layer_norm dweight", weft_tensor_grad(w), dwr, LD, 1e-5);
    wt_check_values("layer_norm dbias", weft_tensor_grad(b), dbr, LD, 1e-5);
    // the same in eval mode (layer_norm has no running state)
    weft_module_set_training(m, false);
    weft_tensor *ye = weft_module_forward(m, x);
    wt_check_values("layer_norm eval forward", ye, ref, LR * LD, 1e-5);
    weft_tensor *bad = weft_tensor_ones(WEFT_DIMS(3, LD + 1), WEFT_F32);
    CHECK(weft_module_forward(m, bad) == NULL && err_has("layer_norm"));
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_tensor_free(ye);
    weft_tensor_free(gy);
    weft_tensor_free(bad);
    weft_module_free(m);
}

// ---- dropout ----
static void test_dropout(void) {
    enum { N = 20000 };
    const double p = 0.3;
    weft_generator *g1 = weft_generator_create(77), *g2 = weft_generator_create(77), *g3 = weft_generator_create(77);
    weft_module *m1 = weft_nn_dropout(p, g1), *m2 = weft_nn_dropout(p, g2);
    CHECK(m1 && m2 && !strcmp(weft_module_kind(m1), "dropout") && weft_module_param_count(m1) == 0);
    weft_tensor *x = weft_tensor_ones(WEFT_DIMS(N), WEFT_F32);
    weft_tensor_set_requires_grad(x, true);
    weft_tensor *y1 = weft_module_forward(m1, x), *y2 = weft_module_forward(m2, x);
    weft_tensor *yo = weft_dropout(x, p, true, g3); // the op with the same seed
    double *v1 = vals(y1), *v2 = vals(y2), *vo = vals(yo);
    CHECK(!memcmp(v1, v2, sizeof(double) * N) && !memcmp(v1, vo, sizeof(double) * N));
    int zeros = 0, bad = 0;
    for (int i = 0; i < N; i++) {
        if (v1[i] == 0) zeros++;
        else if (fabs(v1[i] - 1 / (1 - p)) > 1e-6) bad++;
    }
    CHECK(bad == 0);
    CHECK(fabs((double)zeros / N - p) < 4 * sqrt(p * (1 - p) / N));
    // gradient: the same mask, scaled (x is ones, so dx == y)
    weft_tensor *ones = weft_tensor_ones(WEFT_DIMS(N), WEFT_F32);
    CHECK(weft_backward(y1, ones, NULL) == WEFT_OK);
    wt_check_values("dropout dx", weft_tensor_grad(x), v1, N, 0);
    // the generator advances: the next mask differs
    weft_tensor *y4 = weft_module_forward(m1, x);
    double *v4 = vals(y4);
    CHECK(memcmp(v1, v4, sizeof(double) * N) != 0);
    // eval: identity
    weft_module_set_training(m1, false);
    weft_tensor *ye = weft_module_forward(m1, x);
    double *ve = vals(ye);
    int same = 1;
    for (int i = 0; i < N; i++) same &= ve[i] == 1.0;
    CHECK(same);
    // p = 0: identity in training too; default generator when g is NULL
    weft_module *m0 = weft_nn_dropout(0, NULL), *md = weft_nn_dropout(0.5, NULL);
    weft_tensor *y0 = weft_module_forward(m0, x), *yd = weft_module_forward(md, x);
    double *v0 = vals(y0);
    same = 1;
    for (int i = 0; i < N; i++) same &= v0[i] == 1.0;
    CHECK(same && yd != NULL);
    free(v1);
    free(v2);
    free(vo);
    free(v4);
    free(ve);
    free(v0);
    weft_tensor_free(x);
    weft_tensor_free(y1);
    weft_tensor_free(y2);
    weft_tensor_free(yo);
    weft_tensor_free(y4);
    weft_tensor_free(ye);
    weft_tensor_free(y0);
    weft_tensor_free(yd);
    weft_tensor_free(ones);
    weft_module_free(m1);
    weft_module_free(m2);
    weft_module_free(m0);
    weft_module_free(md);
    weft_generator_free(g1);
    weft_generator_free(g2);
    weft_generator_free(g3);
}

// ---- embedding ----
static void test_embedding(void) {
    weft_generator *g = weft_generator_create(5);
    // init statistics: N(0,1)
    weft_module *big = weft_nn_embedding(1000, 64, g);
    CHECK(big && !strcmp(weft_module_kind(big), "embedding") && named(big, true, 0, "weight"));
    weft_tensor *wb = weft_module_get(big, "weight");
    CHECK(has_shape(wb, WEFT_DIMS(1000, 64)));
    double *v = vals(wb), s = 0, ss = 0;
    for (int i = 0; i < 64000; i++) s += v[i], ss += v[i] * v[i];
    double mean = s / 64000, sd = sqrt(ss / 64000 - mean * mean);
    CHECK(fabs(mean) < 4 / sqrt(64000.0));
    CHECK_NEAR(sd, 1.0, 0.02);
    free(v);

    enum { V = 10, D = 4 };
    weft_module *m = weft_nn_embedding(V, D, g);
    weft_tensor *w = weft_module_get(m, "weight");
    double *wv = vals(w);
    int64_t idx[6] = {3, 0, 9, 3, 7, 0};
    int32_t idx32[6] = {3, 0, 9, 3, 7, 0};
    weft_tensor *ix = weft_tensor_from_data(idx, WEFT_DIMS(2, 3), WEFT_I64);
    weft_tensor *ix32 = weft_tensor_from_data(idx32, WEFT_DIMS(2, 3), WEFT_I32);
    double ref[6 * D], gv[6 * D], dw[V * D] = {0};
    wt_vals(gv, 6 * D, -1, 1, 41);
    round32(gv, 6 * D);
    for (int k = 0; k < 6; k++)
        for (int d = 0; d < D; d++) {
            ref[k * D + d] = wv[idx[k] * D + d];
            dw[idx[k] * D + d] += gv[k * D + d]; // repeated indices accumulate
        }
    weft_tensor *y = weft_module_forward(m, ix), *y32 = weft_module_forward(m, ix32);
    CHECK(has_shape(y, WEFT_DIMS(2, 3, D)));
    wt_check_values("embedding forward", y, ref, 6 * D, 0);
    wt_check_values("embedding forward (int32)", y32, ref, 6 * D, 0);
    weft_tensor *gy = f32_from(gv, WEFT_DIMS(2, 3, D));
    CHECK(weft_backward(y, gy, NULL) == WEFT_OK);
    wt_check_values("embedding dW", weft_tensor_grad(w), dw, V * D, 1e-6);
    // an index out of range is an error naming embedding
    int64_t oob[2] = {1, V};
    weft_tensor *ixb = weft_tensor_from_data(oob, WEFT_DIMS(2), WEFT_I64);
    CHECK(weft_module_forward(m, ixb) == NULL && err_has("embedding"));
    free(wv);
    weft_tensor_free(ix);
    weft_tensor_free(ix32);
    weft_tensor_free(ixb);
    weft_tensor_free(y);
    weft_tensor_free(y32);
    weft_tensor_free(gy);
    weft_module_free(m);
    weft_module_free(big);
    weft_generator_free(g);
}

// ---- flatten ----
static void test_flatten(void) {
    weft_module *m = weft_nn_flatten();
    CHECK(m && !strcmp(weft_module_kind(m), "flatten") && weft_module_param_count(m) == 0);
    double xv[2 * 3 * 4 * 5];
    wt_vals(xv, 120, -1, 1, 51);
    round32(xv, 120);
    weft_tensor *x = f32_from(xv, WEFT_DIMS(2, 3, 4, 5));
    weft_tensor_set_requires_grad(x, true);
    weft_tensor *y = weft_module_forward(m, x);
    CHECK(has_shape(y, WEFT_DIMS(2, 60)));
    wt_check_values("flatten forward", y, xv, 120, 0);
    double gv[120];
    wt_vals(gv, 120, -1, 1, 52);
    round32(gv, 120);
    weft_tensor *gy = f32_from(gv, WEFT_DIMS(2, 60));
    CHECK(weft_backward(y, gy, NULL) == WEFT_OK);
    wt_check_values("flatten dx", weft_tensor_grad(x), gv, 120, 0);
    // a transposed (non-contiguous) input: values in its logical order
    weft_tensor *xt = weft_transpose(x, 1, 3); // (2,5,4,3)
    weft_tensor *yt = weft_module_forward(m, xt);
    CHECK(has_shape(yt, WEFT_DIMS(2, 60)));
    double ref[120];
    for (int n = 0; n < 2; n++)
        for (int a = 0; a < 5; a++)
            for (int h = 0; h < 4; h++)
                for (int c = 0; c < 3; c++) ref[n * 60 + (a * 4 + h) * 3 + c] = xv[((n * 3 + c) * 4 + h) * 5 + a];
    wt_check_values("flatten forward (transposed)", yt, ref, 120, 0);
    // (N) -> (N,1)
    weft_tensor *x1 = weft_tensor_ones(WEFT_DIMS(7), WEFT_F32), *y1 = weft_module_forward(m, x1);
    CHECK(has_shape(y1, WEFT_DIMS(7, 1)));
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_tensor_free(gy);
    weft_tensor_free(xt);
    weft_tensor_free(yt);
    weft_tensor_free(x1);
    weft_tensor_free(y1);
    weft_module_free(m);
}

// ---- activations ----
static double ref_act(weft_activation a, double x) {
    switch (a) {
    case WEFT_ACT_RELU: return x > 0 ? x : 0;
    case WEFT_ACT_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case WEFT_ACT_TANH: return tanh(x);
    case WEFT_ACT_SIGMOID: return 1 / (1 + exp(-x));
    case WEFT_ACT_SILU: return x / (1 + exp(-x));
    case WEFT_ACT_GELU_TANH: return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    }
    return NAN;
}
static weft_tensor *act_fn(weft_tensor *const *in, void *user) { return weft_module_forward(user, in[0]); }

static void test_activations(void) {
    const char *kinds[] = {"relu", "gelu", "tanh", "sigmoid", "silu", "gelu_tanh"};
    enum { N = 13 };
    double xv[N], ref[N];
    for (int i = 0; i < N; i++) xv[i] = -3 + 0.5 * i + 0.01; // avoids relu's kink at 0
    round32(xv, N);
    weft_tensor *x = f32_from(xv, WEFT_DIMS(N));
    for (int a = 0; a <= WEFT_ACT_GELU_TANH; a++) {
        weft_module *m = weft_nn_activation((weft_activation)a);
        CHECK(m && !strcmp(weft_module_kind(m), kinds[a]) && weft_module_param_count(m) == 0);
        for (int i = 0; i < N; i++) ref[i] = ref_act((weft_activation)a, xv[i]);
        weft_tensor *y = weft_module_forward(m, x);
        wt_check_values(kinds[a], y, ref, N, 1e-6);
        // backward by finite differences in f64, through the module
        weft_tensor *x64 = wt_rand64(WEFT_DIMS(3, 4), -2, 2, 60 + (uint64_t)a, true);
        CHECK_GRAD(act_fn, 1, &x64, m);
        weft_tensor_free(x64);
        weft_tensor_free(y);
        weft_module_free(m);
    }
    CHECK(weft_nn_activation((weft_activation)99) == NULL && err_has("activation"));
    weft_tensor_free(x);
}

// ---- a small CNN: conv -> batch_norm -> relu -> maxpool -> flatten -> dropout -> linear ----
static void test_small_cnn(void) {
    weft_generator *g = weft_generator_create(123);
    weft_module *net = weft_nn_sequential();
    weft_conv2d_params pad1 = {.padding = {1, 1}};
    CHECK(weft_nn_sequential_append(net, weft_nn_conv2d(1, 4, 3, 3, &pad1, true, g)) == WEFT_OK);
    CHECK(weft_nn_sequential_append(net, weft_nn_batch_norm(4, 0.1, 1e-5)) == WEFT_OK);
    CHECK(weft_nn_sequential_append(net, weft_nn_activation(WEFT_ACT_RELU)) == WEFT_OK);
    CHECK(weft_nn_sequential_append(net, weft_nn_max_pool2d(&(weft_pool2d_params){.kernel = {2, 2}})) == WEFT_OK);
    CHECK(weft_nn_sequential_append(net, weft_nn_flatten()) == WEFT_OK);
    CHECK(weft_nn_sequential_append(net, weft_nn_dropout(0.2, g)) == WEFT_OK);
    CHECK(weft_nn_sequential_append(net, weft_nn_linear(4 * 4 * 4, 10, true, g)) == WEFT_OK);
    const char *pn[] = {"0.weight", "0.bias", "1.weight", "1.bias", "6.weight", "6.bias"};
    CHECK(weft_module_param_count(net) == 6);
    for (int i = 0; i < 6; i++) CHECK(named(net, true, i, pn[i]));
    CHECK(weft_module_buffer_count(net) == 2 && named(net, false, 0, "1.running_mean") &&
          named(net, false, 1, "1.running_var"));
    CHECK(weft_module_num_elements(net) == 4 * 9 + 4 + 4 + 4 + 64 * 10 + 10);
    weft_tensor *x = weft_tensor_randn(WEFT_DIMS(3, 1, 8, 8), WEFT_F32, g);
    weft_tensor *y = weft_module_forward(net, x);
    CHECK(has_shape(y, WEFT_DIMS(3, 10)));
    weft_tensor *loss = weft_sum(y, 0, NULL, false);
    CHECK(loss && weft_backward(loss, NULL, NULL) == WEFT_OK);
    for (int i = 0; i < 6; i++) {
        weft_tensor *p = weft_module_param_at(net, i, NULL, 0), *gp = weft_tensor_grad(p);
        CHECK(gp && has_shape(gp, weft_tensor_ndim(p), weft_tensor_sizes(p)));
        double *gvv = vals(gp), s = 0;
        for (int64_t k = 0; k < weft_tensor_numel(gp); k++) s += fabs(gvv[k]);
        CHECK(s > 0 && isfinite(s));
        free(gvv);
    }
    // the linear bias gradient of sum(y) is the batch size
    double three[10] = {3, 3, 3, 3, 3, 3, 3, 3, 3, 3};
    wt_check_values("cnn linear db", weft_tensor_grad(weft_module_find(net, "6.bias")), three, 10, 1e-6);
    // eval mode: deterministic (running stats, no dropout)
    weft_module_set_training(net, false);
    weft_tensor *e1 = weft_module_forward(net, x), *e2 = weft_module_forward(net, x);
    double *a = vals(e1), *b = vals(e2);
    CHECK(e1 && e2 && !memcmp(a, b, sizeof(double) * 30));
    free(a);
    free(b);
    weft_tensor_free(e1);
    weft_tensor_free(e2);
    weft_tensor_free(loss);
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_module_free(net);
    weft_generator_free(g);
}

// ---- bad arguments: NULL and a message naming the layer ----
static void test_bad_args(void) {
    weft_conv2d_params neg = {.padding = {-1, 0}}, g3 = {.groups = 3};
    CHECK(weft_nn_conv2d(0, 4, 3, 3, NULL, true, NULL) == NULL && err_has("conv2d"));
    CHECK(weft_nn_conv2d(4, 0, 3, 3, NULL, true, NULL) == NULL && err_has("conv2d"));
    CHECK(weft_nn_conv2d(4, 4, 0, 3, NULL, true, NULL) == NULL && err_has("conv2d"));
    CHECK(weft_nn_conv2d(4, 4, 3, -2, NULL, true, NULL) == NULL && err_has("conv2d"));
    CHECK(weft_nn_conv2d(4, 4, 3, 3, &neg, true, NULL) == NULL && err_has("conv2d"));
    CHECK(weft_nn_conv2d(4, 6, 3, 3, &g3, true, NULL) == NULL && err_has("conv2d"));
    CHECK(weft_nn_max_pool2d(NULL) == NULL && err_has("max_pool2d"));
    CHECK(weft_nn_max_pool2d(&(weft_pool2d_params){.kernel = {0, 2}}) == NULL && err_has("max_pool2d"));
    CHECK(weft_nn_avg_pool2d(&(weft_pool2d_params){.kernel = {2, 2}, .padding = {2, 0}}) == NULL &&
          err_has("avg_pool2d"));
    CHECK(weft_nn_avg_pool2d(&(weft_pool2d_params){.kernel = {2, 2}, .stride = {-1, 1}}) == NULL &&
          err_has("avg_pool2d"));
    CHECK(weft_nn_batch_norm(0, 0.1, 1e-5) == NULL && err_has("batch_norm"));
    CHECK(weft_nn_batch_norm(4, 1.5, 1e-5) == NULL && err_has("batch_norm"));
    CHECK(weft_nn_batch_norm(4, 0.1, 0) == NULL && err_has("batch_norm"));
    CHECK(weft_nn_layer_norm(0, 1e-5) == NULL && err_has("layer_norm"));
    CHECK(weft_nn_layer_norm(8, -1) == NULL && err_has("layer_norm"));
    CHECK(weft_nn_dropout(-0.1, NULL) == NULL && err_has("dropout"));
    CHECK(weft_nn_dropout(1.0, NULL) == NULL && err_has("dropout"));
    CHECK(weft_nn_dropout(NAN, NULL) == NULL && err_has("dropout"));
    CHECK(weft_nn_embedding(0, 4, NULL) == NULL && err_has("embedding"));
    CHECK(weft_nn_embedding(4, -1, NULL) == NULL && err_has("embedding"));
    // a pool whose kernel is larger than the input fails at forward, naming the op
    weft_module *mp = weft_nn_max_pool2d(&(weft_pool2d_params){.kernel = {5, 5}});
    weft_tensor *x = weft_tensor_ones(WEFT_DIMS(1, 1, 3, 3), WEFT_F32);
    CHECK(weft_module_forward(mp, x) == NULL && err_has("max_pool2d"));
    // flatten of a 0-d tensor
    weft_module *fl = weft_nn_flatten();
    weft_tensor *s = weft_tensor_scalar(1, WEFT_F32);
    CHECK(weft_module_forward(fl, s) == NULL && err_has("flatten"));
    weft_tensor_free(x);
    weft_tensor_free(s);
    weft_module_free(mp);
    weft_module_free(fl);
}

int main(void) {
    RUN(test_conv2d);
    RUN(test_conv2d_init_stats);
    RUN(test_conv_transpose2d);
    RUN(test_pools);
    RUN(test_batch_norm);
    RUN(test_layer_norm);
    RUN(test_dropout);
    RUN(test_embedding);
    RUN(test_flatten);
    RUN(test_activations);
    RUN(test_small_cnn);
    RUN(test_bad_args);
    return wt_summary();
}
