// Custom autograd functions (weft_function_record) and the differentiable
// device transfer weft_tensor_to built on it: gradients against finite
// differences and closed forms, the callback context's lifetime, errors, and
// a model split over two devices (the mock accelerator without a GPU) whose
// gradients equal the one-device model's.
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

static int g_freed;
static void count_free(void *ctx) {
    g_freed++;
    free(ctx);
}

// A cube function whose backward is written by hand: y = x^3, dy = 3 x^2 g.
typedef struct {
    weft_tensor *x;
} cube_ctx;
static void cube_free(void *p) {
    cube_ctx *c = p;
    weft_tensor_free(c->x);
    count_free(c);
}
static weft_status cube_bw(void *ctx, int n_out, weft_tensor *const *gout, int n_in, const bool *needs,
                           weft_tensor **gin) {
    (void)n_out;
    (void)n_in;
    cube_ctx *c = ctx;
    if (!needs[0] || !gout[0]) return WEFT_OK;
    weft_tensor *x2 = weft_mul(c->x, c->x), *s = weft_mul_scalar(x2, 3);
    gin[0] = weft_mul(s, gout[0]);
    weft_tensor_free(x2);
    weft_tensor_free(s);
    return gin[0] ? WEFT_OK : weft_last_status();
}
static weft_tensor *cube(weft_tensor *x) {
    weft_tensor *y;
    WEFT_NO_GRAD {
        weft_tensor *x2 = weft_mul(x, x);
        y = weft_mul(x2, x);
        weft_tensor_free(x2);
    }
    cube_ctx *c = malloc(sizeof *c);
    c->x = weft_tensor_detach(x);
    if (weft_function_record("cube", 1, &x, 1, &y, cube_bw, c, cube_free) != WEFT_OK) {
        weft_tensor_free(y);
        return NULL;
    }
    return y;
}
static weft_tensor *f_cube(weft_tensor *const *in, void *user) {
    (void)user;
    weft_tensor *c = cube(in[0]), *s = weft_sin(c); // composed with a built-in op after it
    weft_tensor_free(c);
    return s;
}

static void test_custom_gradient(void) {
    int64_t sz[] = {3, 4};
    weft_tensor *x = wt_rand64(2, sz, -1.5, 1.5, 7, true);
    g_freed = 0;
    CHECK_GRAD(f_cube, 1, &x, NULL);
    CHECK(g_freed > 0); // every node the check made is gone, with its context
    // closed form: d/dx sum(x^3) = 3 x^2
    weft_tensor *y = cube(x), *s = weft_sum(y, 0, NULL, false);
    CHECK(strcmp(weft_tensor_grad_fn_name(y), "cube") == 0);
    CHECK(weft_backward(s, NULL, NULL) == WEFT_OK);
    double xv[12], gv[12];
    CHECK(weft_tensor_to_f64(x, xv, 12) == WEFT_OK && weft_tensor_to_f64(weft_tensor_grad(x), gv, 12) == WEFT_OK);
    for (int i = 0; i < 12; i++) CHECK_NEAR(gv[i], 3 * xv[i] * xv[i], 1e-12);
    // a custom function keeps its own state: a second backward through it is an error, as for an op that
    // saved tensors (before it runs: x's gradient stays)
    CHECK(weft_backward(s, NULL, NULL) != WEFT_OK && wt_error_has("cube backward"));
    CHECK(weft_tensor_to_f64(weft_tensor_grad(x), gv, 12) == WEFT_OK);
    for (int i = 0; i < 12; i++) CHECK_NEAR(gv[i], 3 * xv[i] * xv[i], 1e-12);
    int before = g_freed;
    weft_tensor_free(s);
    CHECK(g_freed == before); // y still holds the node
    weft_tensor_free(y);
    CHECK(g_freed == before + 1);
    weft_tensor_free(x);
}

static void test_context_lifetime_and_errors(void) {
    int64_t sz[] = {4};
    weft_tensor *x = wt_rand64(1, sz, -1, 1, 3, true), *c = wt_rand64(1, sz, -1, 1, 4, false);
    g_freed = 0;
    // no input requires grad: nothing recorded, the context freed at once
    weft_tensor *y = weft_tensor_detach(c);
    CHECK(weft_function_record("f", 1, &c, 1, &y, cube_bw, malloc(8), count_free) == WEFT_OK);
    CHECK(g_freed == 1 && !weft_tensor_requires_grad(y));
    weft_tensor_free(y);
    // grad mode off: the same
    y = weft_tensor_detach(x);
    WEFT_NO_GRAD { CHECK(weft_function_record("f", 1, &x, 1, &y, cube_bw, malloc(8), count_free) == WEFT_OK); }
    CHECK(g_freed == 2 && !weft_tensor_requires_grad(y));
    weft_tensor_free(y);
    // an output with history is refused, naming the function; the context is freed
    weft_tensor *h = weft_mul_scalar(x, 2);
    CHECK(weft_function_record("myfn", 1, &x, 1, &h, cube_bw, malloc(8), count_free) == WEFT_ERR_ARG);
    CHECK(wt_error_has("myfn") && g_freed == 3);
    CHECK(weft_function_record("myfn", 1, &x, 1, &h, NULL, malloc(8), count_free) == WEFT_ERR_ARG);
    CHECK(g_freed == 4);
    weft_tensor_free(h);
    weft_tensor_free(x);
    weft_tensor_free(c);
}

// x (cpu) -> to(dev) -> * w (dev) -> to(cpu) -> sum: dx = w, dw = x, each on its own device.
static void test_to_backward(void) {
    weft_device dev;
    if (!wt_accelerator(&dev, NULL)) {
        CHECK(!"no accelerator");
        return;
    }
    int64_t sz[] = {2, 3};
    weft_tensor *x = wt_rand64(2, sz, -1, 1, 11, true), *wh = wt_rand64(2, sz, -1, 1, 12, false);
    weft_tensor *w = weft_tensor_to(wh, dev);
    CHECK(weft_tensor_set_requires_grad(w, true) == WEFT_OK);
    weft_tensor *xd = weft_tensor_to(x, dev);
    CHECK(strcmp(weft_tensor_grad_fn_name(xd), "to") == 0);
    weft_tensor *p = weft_mul(xd, w), *ph = weft_tensor_to(p, WEFT_DEVICE_CPU), *s = weft_sum(ph, 0, NULL, false);
    CHECK(weft_backward(s, NULL, NULL) == WEFT_OK);
    weft_tensor *gx = weft_tensor_grad(x), *gw = weft_tensor_grad(w);
    CHECK(gx && weft_device_equal(weft_tensor_device(gx), WEFT_DEVICE_CPU));
    CHECK(gw && weft_device_equal(weft_tensor_device(gw), dev));
    wt_check_same("dx = w", gx, wh, 0);
    weft_tensor *gwh = weft_tensor_to(gw, WEFT_DEVICE_CPU);
    wt_check_same("dw = x", gwh, x, 0);
    // the same device: no copy, no node
    weft_tensor *same = weft_tensor_to(x, WEFT_DEVICE_CPU);
    CHECK(same == x);
    weft_tensor *ts[] = {x, wh, w, xd, p, ph, s, gwh, same};
    for (int i = 0; i < 9; i++) weft_tensor_free(ts[i]);
}

// A two-layer MLP with its first layer on the CPU and its second on the
// accelerator trains like the same MLP on the CPU alone: the gradients of
// every weight agree (to rounding where a real GPU runs the second layer).
static void test_two_device_model(void) {
    weft_device dev;
    bool mock = true;
    if (!wt_accelerator(&dev, &mock)) {
        CHECK(!"no accelerator");
        return;
    }
    int64_t xs[] = {5, 4}, w1s[] = {4, 6}, w2s[] = {6, 3};
    weft_tensor *x = wt_rand64(2, xs, -1, 1, 21, false);
    weft_tensor *w1 = wt_rand64(2, w1s, -0.5, 0.5, 22, true), *w2 = wt_rand64(2, w2s, -0.5, 0.5, 23, true);
    weft_tensor *w2d_leaf = NULL, *gref[2];
    for (int split = 0; split < 2; split++) {
        weft_tensor *h = weft_matmul(x, w1), *a = weft_tanh(h), *o, *oc, *q, *s;
        if (split) {
            weft_tensor *w2h = weft_tensor_detach(w2);
            w2d_leaf = weft_tensor_to(w2h, dev);
            weft_tensor_free(w2h);
            weft_tensor_set_requires_grad(w2d_leaf, true);
            weft_tensor *ad = weft_tensor_to(a, dev);
            o = weft_matmul(ad, w2d_leaf);
            weft_tensor_free(ad);
        } else {
            o = weft_matmul(a, w2);
        }
        oc = weft_tensor_to(o, WEFT_DEVICE_CPU);
        q = weft_mul(oc, oc);
        s = weft_sum(q, 0, NULL, false);
        CHECK(weft_backward(s, NULL, NULL) == WEFT_OK);
        if (!split) {
            gref[0] = weft_tensor_ref(weft_tensor_grad(w1));
            gref[1] = weft_tensor_ref(weft_tensor_grad(w2));
            weft_tensor_zero_grad(w1);
        } else {
            double tol = mock ? 0 : 1e-12;
            wt_check_same("first layer (cpu)", weft_tensor_grad(w1), gref[0], tol);
            weft_tensor *g2 = weft_tensor_to(weft_tensor_grad(w2d_leaf), WEFT_DEVICE_CPU);
            wt_check_same("second layer (device)", g2, gref[1], tol);
            weft_tensor_free(g2);
        }
        weft_tensor *ts[] = {h, a, o, oc, q, s};
        for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
    }
    weft_tensor *ts[] = {x, w1, w2, w2d_leaf, gref[0], gref[1]};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
}

int main(void) {
    RUN(test_custom_gradient);
    RUN(test_context_lifetime_and_errors);
    RUN(test_to_backward);
    RUN(test_two_device_model);
    return wt_summary();
}
