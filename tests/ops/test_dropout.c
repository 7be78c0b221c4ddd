// dropout: reproducible masks from the counter-based generator, the drop rate,
// scaling, a backward that reuses the forward mask, gradcheck, identity cases
// and errors.
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

static double *values(const weft_tensor *t) {
    int64_t n = weft_tensor_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n + 1));
    weft_tensor_to_f64(t, v, n);
    return v;
}

static void test_reproducible(void) {
    weft_tensor *x = weft_tensor_ones(WEFT_DIMS(1000), WEFT_F32);
    weft_generator *g1 = weft_generator_create(7), *g2 = weft_generator_create(7), *g3 = weft_generator_create(8);
    weft_tensor *a = weft_dropout(x, 0.3, true, g1), *b = weft_dropout(x, 0.3, true, g2);
    weft_tensor *c = weft_dropout(x, 0.3, true, g3), *a2 = weft_dropout(x, 0.3, true, g1);
    double *va = values(a), *vb = values(b), *vc = values(c), *va2 = values(a2);
    CHECK(memcmp(va, vb, sizeof(double) * 1000) == 0);   // same seed, same mask
    CHECK(memcmp(va, vc, sizeof(double) * 1000) != 0);   // other seed
    CHECK(memcmp(va, va2, sizeof(double) * 1000) != 0);  // the generator moved on
    uint64_t s, off;
    weft_generator_get_state(g1, &s, &off);
    CHECK(s == 7 && off == 2000); // numel counters reserved per call
    // the mask does not depend on the thread count
    weft_set_num_threads(1);
    weft_tensor *big = weft_tensor_ones(WEFT_DIMS(100000), WEFT_F32);
    weft_generator_set_state(g2, 99, 0);
    weft_tensor *m1 = weft_dropout(big, 0.5, true, g2);
    weft_set_num_threads(2);
    weft_generator_set_state(g2, 99, 0);
    weft_tensor *m2 = weft_dropout(big, 0.5, true, g2);
    double *v1 = values(m1), *v2 = values(m2);
    CHECK(memcmp(v1, v2, sizeof(double) * 100000) == 0);
    free(v1);
    free(v2);
    free(va);
    free(vb);
    free(vc);
    free(va2);
    weft_tensor *ts[] = {x, a, b, c, a2, big, m1, m2};
    for (int i = 0; i < 8; i++) weft_tensor_free(ts[i]);
    weft_generator_free(g1);
    weft_generator_free(g2);
    weft_generator_free(g3);
}

// About p of 100k elements are zero; the rest are x / (1 - p).
static void test_rate_and_scale(void) {
    const int64_t n = 100000;
    double ps[3] = {0.1, 0.5, 0.8};
    for (int k = 0; k < 3; k++)
        for (int d = 0; d < 2; d++) {
            weft_dtype dt = d ? WEFT_F64 : WEFT_F32;
            weft_tensor *x0 = wt_rand64(WEFT_DIMS(n), 0.5, 2, 5 + k, false), *x = weft_cast(x0, dt);
            weft_generator *g = weft_generator_create(123 + k);
            weft_tensor *y = weft_dropout(x, ps[k], true, g);
            double *vx = values(x), *vy = values(y);
            int64_t zeros = 0, bad = 0;
            for (int64_t i = 0; i < n; i++) {
                if (vy[i] == 0) zeros++;
                else if (fabs(vy[i] - vx[i] / (1 - ps[k])) > 1e-6 * fabs(vy[i])) bad++;
            }
            double frac = (double)zeros / (double)n; // std of the fraction is sqrt(p(1-p)/n) <= 0.0016
            CHECK(fabs(frac - ps[k]) < 0.01);
            CHECK(bad == 0);
            free(vx);
            free(vy);
            weft_tensor_free(x0);
            weft_tensor_free(x);
            weft_tensor_free(y);
            weft_generator_free(g);
        }
}

// The gradient is g * mask / (1 - p) with the forward's mask.
static void test_backward_mask(void) {
    const int64_t n = 5000;
    const double p = 0.4;
    weft_tensor *x = wt_rand64(WEFT_DIMS(50, 100), 1, 2, 3, true); // never zero, so y == 0 marks a drop
    weft_generator *g = weft_generator_create(5);
    weft_tensor *y = weft_dropout(x, p, true, g);
    weft_tensor *gr = wt_rand64(WEFT_DIMS(50, 100), -1, 1, 4, false);
    CHECK(weft_backward(y, gr, NULL) == WEFT_OK);
    double *vy = values(y), *vg = values(gr), *vdx = values(weft_tensor_grad(x));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double want = vy[i] == 0 ? 0 : vg[i] / (1 - p);
        if (fabs(vdx[i] - want) > 1e-12) bad++;
    }
    CHECK(bad == 0);
    free(vy);
    free(vg);
    free(vdx);
    // a non-contiguous input: element i in row-major order of the view gets mask bit i
    weft_tensor *base = wt_rand64(WEFT_DIMS(30, 40), 1, 2, 6, false), *xt = weft_transpose(base, 0, 1);
    weft_tensor *xc = weft_tensor_contiguous(xt);
    weft_generator_set_state(g, 77, 0);
    weft_tensor *y1 = weft_dropout(xt, 0.5, true, g);
    weft_generator_set_state(g, 77, 0);
    weft_tensor *y2 = weft_dropout(xc, 0.5, true, g);
    double *v1 = values(y1), *v2 = values(y2);
    CHECK(memcmp(v1, v2, sizeof(double) * 1200) == 0);
    free(v1);
    free(v2);
    weft_tensor *ts[] = {x, y, gr, base, xt, xc, y1, y2};
    for (int i = 0; i < 8; i++) weft_tensor_free(ts[i]);
    weft_generator_free(g);
}

static weft_generator *g_gen;
static weft_tensor *f_drop(weft_tensor *const *in, void *u) {
    weft_generator_set_state(g_gen, 31, 0); // every evaluation draws the same mask
    weft_tensor *x = u ? weft_transpose(in[0], 0, 1) : weft_tensor_ref(in[0]);
    weft_tensor *y = weft_dropout(x, 0.3, true, g_gen);
    weft_tensor_free(x);
    return y;
}

static void test_gradcheck(void) {
    g_gen = weft_generator_create(0);
    weft_tensor *x = wt_rand64(WEFT_DIMS(6, 7), -1, 1, 8, true);
    CHECK_GRAD(f_drop, 1, &x, NULL);
    CHECK_GRAD(f_drop, 1, &x, (void *)1);
    // second order: the backward is dropout again, so it differentiates too
    weft_tensor *y = f_drop(&x, NULL), *s = weft_mul(y, y), *l = weft_sum(s, 0, NULL, false);
    weft_backward_opts o = {.create_graph = true};
    CHECK(weft_backward(l, NULL, &o) == WEFT_OK);
    weft_tensor *gx = weft_tensor_ref(weft_tensor_grad(x)), *l2 = weft_sum(gx, 0, NULL, false);
    weft_tensor_zero_grad(x);
    CHECK(weft_backward(l2, NULL, NULL) == WEFT_OK); // d/dx sum(2 m^2 x / (1-p)^2) = 2 m / (1-p)^2
    double *vy = values(y), *vg = values(weft_tensor_grad(x));
    int bad = 0;
    for (int i = 0; i < 42; i++) {
        double want = vy[i] == 0 ? 0 : 2 / (0.7 * 0.7);
        if (fabs(vg[i] - want) > 1e-12) bad++;
    }
    CHECK(bad == 0);
    free(vy);
    free(vg);
    weft_tensor *ts[] = {x, y, s, l, gx, l2};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
    weft_generator_free(g_gen);
}

static void test_identity_and_errors(void) {
    weft_tensor *x = weft_tensor_ones(WEFT_DIMS(4, 4), WEFT_F32);
    weft_tensor *a = weft_dropout(x, 0.5, false, NULL), *b = weft_dropout(x, 0.0, true, NULL);
    CHECK(a && weft_tensor_shares_storage(a, x));
    CHECK(b && weft_tensor_shares_storage(b, x));
    double ones[16];
    for (int i = 0; i < 16; i++) ones[i] = 1;
    wt_check_values("eval", a, ones, 16, 0);
    // default generator works
    weft_tensor *c = weft_dropout(x, 0.5, true, NULL);
    CHECK(c != NULL);
    double bads[4] = {1.0, -0.1, 1.5, NAN};
    for (int k = 0; k < 4; k++) {
        weft_tensor *r = weft_dropout(x, bads[k], true, NULL);
        CHECK(r == NULL && strstr(weft_last_error(), "dropout"));
        weft_clear_error();
    }
    weft_tensor *xi = weft_tensor_ones(WEFT_DIMS(3), WEFT_I64), *r = weft_dropout(xi, 0.5, true, NULL);
    CHECK(r == NULL && strstr(weft_last_error(), "dropout"));
    weft_clear_error();
    r = weft_dropout(NULL, 0.5, true, NULL);
    CHECK(r == NULL && strstr(weft_last_error(), "dropout"));
    weft_clear_error();
    weft_tensor *ts[] = {x, a, b, c, xi};
    for (int i = 0; i < 5; i++) weft_tensor_free(ts[i]);
}

// bf16 / f16: the f32 op's mask and scale on the rounded values, rounded once; the same mask in backward.
static void test_half(void) {
    weft_tensor *x64 = wt_rand64(WEFT_DIMS(33, 17), -2, 2, 91, false), *x = weft_cast(x64, WEFT_BF16);
    weft_tensor *xf = weft_cast(x, WEFT_F32);
    weft_generator *g1 = weft_generator_create(5), *g2 = weft_generator_create(5);
    weft_tensor *leaf = weft_tensor_detach(x);
    weft_tensor_set_requires_grad(leaf, true);
    weft_tensor *y = weft_dropout(leaf, 0.4, true, g1), *yf = weft_dropout(xf, 0.4, true, g2);
    CHECK(y && weft_tensor_dtype(y) == WEFT_BF16);
    weft_tensor *ref = weft_cast(yf, WEFT_BF16);
    wt_check_same("bf16 dropout", y, ref, 0);
    // the gradient of sum(y): the mask / (1 - p), as bf16
    weft_tensor *yy = weft_cast(y, WEFT_F32), *s = weft_sum(yy, 0, NULL, false);
    CHECK(s && weft_backward(s, NULL, NULL) == WEFT_OK);
    weft_tensor *gl = weft_tensor_grad(leaf);
    CHECK(gl && weft_tensor_dtype(gl) == WEFT_BF16);
    double gv[561], yv[561];
    weft_tensor_to_f64(gl, gv, 561);
    weft_tensor_to_f64(yf, yv, 561);
    bool ok = true;
    for (int i = 0; i < 561; i++) ok &= yv[i] == 0 ? gv[i] == 0 : fabs(gv[i] - 1 / 0.6) < 1e-2;
    CHECK(ok);
    weft_tensor *ts[] = {x64, x, xf, leaf, y, yf, ref, yy, s};
    for (int i = 0; i < 9; i++) weft_tensor_free(ts[i]);
    weft_generator_free(g1);
    weft_generator_free(g2);
}

int main(void) {
    RUN(test_reproducible);
    RUN(test_rate_and_scale);
    RUN(test_backward_mask);
    RUN(test_gradcheck);
    RUN(test_identity_and_errors);
    RUN(test_half);
    return wt_summary();
}
