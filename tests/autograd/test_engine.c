// Eager autograd: the worked example of seed 003, fan-out accumulation,
// second-order gradients, retain_graph, hooks, no-grad.
#include "weft_test.h"

static weft_tensor *scalar_leaf(double v) {
    weft_tensor *t = weft_tensor_scalar(v, WEFT_F64);
    weft_tensor_set_requires_grad(t, true);
    return t;
}

// f(x1,x2) = (e^x1 + x2)(x2 + 1) at (3, 2): y = 66.2566, dy/dx1 = 60.2566, dy/dx2 = 25.0855
static void test_seed003_example(void) {
    weft_tensor *x1 = scalar_leaf(3), *x2 = scalar_leaf(2);
    weft_tensor *e = weft_exp(x1), *a = weft_add(e, x2), *b = weft_add_scalar(x2, 1), *y = weft_mul(a, b);
    double e3 = exp(3.0);
    CHECK_NEAR(weft_tensor_item(y), (e3 + 2) * 3, 1e-12);
    CHECK(weft_backward(y, NULL, NULL) == WEFT_OK);
    CHECK_NEAR(weft_tensor_item(weft_tensor_grad(x1)), e3 * 3, 1e-12);
    CHECK_NEAR(weft_tensor_item(weft_tensor_grad(x2)), 3 + e3 + 2, 1e-12); // (x2+1) + (e^x1 + x2)
    CHECK_NEAR(weft_tensor_item(y), 66.2566, 1e-5);
    CHECK_NEAR(weft_tensor_item(weft_tensor_grad(x1)), 60.2566, 1e-5);
    CHECK_NEAR(weft_tensor_item(weft_tensor_grad(x2)), 25.0855, 1e-5);
    // second backward without retain_graph is an error, not a crash
    CHECK(weft_backward(y, NULL, NULL) != WEFT_OK);
    CHECK(weft_last_error()[0] != 0);
    weft_tensor *ts[] = {x1, x2, e, a, b, y};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
}

// A second backward without retain_graph: through nodes that saved nothing (add, sum) it runs again and
// accumulates again, as PyTorch does; where a node reached freed its saved tensors, it fails before any
// gradient reaches a leaf (z's gradient stays as the first pass left it).
static void test_second_backward(void) {
    weft_tensor *x = scalar_leaf(3), *z = scalar_leaf(2);
    weft_tensor *s = weft_add(x, z);
    CHECK(weft_backward(s, NULL, NULL) == WEFT_OK && weft_backward(s, NULL, NULL) == WEFT_OK);
    CHECK_NEAR(weft_tensor_item(weft_tensor_grad(x)), 2, 0);
    CHECK_NEAR(weft_tensor_item(weft_tensor_grad(z)), 2, 0);
    weft_tensor_zero_grad(x);
    weft_tensor_zero_grad(z);
    weft_tensor *a = weft_mul(x, x), *t = weft_add(a, z); // mul saves x
    CHECK(weft_backward(t, NULL, NULL) == WEFT_OK);
    CHECK_NEAR(weft_tensor_item(weft_tensor_grad(z)), 1, 0);
    CHECK_NEAR(weft_tensor_item(weft_tensor_grad(x)), 6, 1e-12);
    CHECK(weft_backward(t, NULL, NULL) != WEFT_OK && wt_error_has("mul backward"));
    CHECK_NEAR(weft_tensor_item(weft_tensor_grad(z)), 1, 0); // not 2: add did not run before mul's error
    CHECK_NEAR(weft_tensor_item(weft_tensor_grad(x)), 6, 1e-12);
    weft_tensor *ts[] = {x, z, s, a, t};
    for (int i = 0; i < 5; i++) weft_tensor_free(ts[i]);
}

// y = x*x*x: dy/dx = 3x^2, d2y/dx2 = 6x (create_graph)
static void test_second_order(void) {
    weft_tensor *x = scalar_leaf(1.5);
    weft_tensor *x2 = weft_mul(x, x), *y = weft_mul(x2, x);
    weft_backward_opts o = {.create_graph = true};
    CHECK(weft_backward(y, NULL, &o) == WEFT_OK);
    weft_tensor *g = weft_tensor_ref(weft_tensor_grad(x));
    CHECK_NEAR(weft_tensor_item(g), 3 * 1.5 * 1.5, 1e-12);
    CHECK(weft_tensor_requires_grad(g));
    weft_tensor_zero_grad(x);
    CHECK(weft_backward(g, NULL, NULL) == WEFT_OK);
    CHECK_NEAR(weft_tensor_item(weft_tensor_grad(x)), 6 * 1.5, 1e-12);
    // composite: d2/dx2 sin(x) * exp(x) = 2 cos(x) e^x
    weft_tensor_zero_grad(x);
    weft_tensor *s = weft_sin(x), *ex = weft_exp(x), *f = weft_mul(s, ex);
    CHECK(weft_backward(f, NULL, &o) == WEFT_OK);
    weft_tensor *g1 = weft_tensor_ref(weft_tensor_grad(x));
    CHECK_NEAR(weft_tensor_item(g1), (cos(1.5) + sin(1.5)) * exp(1.5), 1e-12);
    weft_tensor_zero_grad(x);
    CHECK(weft_backward(g1, NULL, NULL) == WEFT_OK);
    CHECK_NEAR(weft_tensor_item(weft_tensor_grad(x)), 2 * cos(1.5) * exp(1.5), 1e-12);
    weft_tensor *ts[] = {x, x2, y, g, s, ex, f, g1};
    for (int i = 0; i < 8; i++) weft_tensor_free(ts[i]);
}

static void test_retain_and_accumulate(void) {
    weft_tensor *x = scalar_leaf(2);
    weft_tensor *y = weft_mul(x, x);
    weft_backward_opts o = {.retain_graph = true};
    CHECK(weft_backward(y, NULL, &o) == WEFT_OK);
    CHECK(weft_backward(y, NULL, NULL) == WEFT_OK);
    CHECK_NEAR(weft_tensor_item(weft_tensor_grad(x)), 8, 1e-12); // 4 + 4 accumulated
    weft_tensor_free(x);
    weft_tensor_free(y);
}

static int hook_calls;
static double hook_value;
static void hook(weft_tensor *leaf, void *user) {
    hook_calls++;
    hook_value = weft_tensor_item(weft_tensor_grad(leaf));
    *(int *)user += 1;
}

// x fans out to three uses; the hook must fire once, after all three arrived.
static void test_hook_fires_when_final(void) {
    weft_tensor *x = scalar_leaf(3);
    weft_tensor *a = weft_mul_scalar(x, 2), *b = weft_mul(x, x), *c = weft_exp(x);
    weft_tensor *ab = weft_add(a, b), *y = weft_add(ab, c);
    int count = 0;
    int h = weft_tensor_add_grad_hook(x, hook, &count);
    hook_calls = 0;
    CHECK(weft_backward(y, NULL, NULL) == WEFT_OK);
    CHECK(hook_calls == 1 && count == 1);
    CHECK_NEAR(hook_value, 2 + 6 + exp(3.0), 1e-12);
    CHECK(weft_tensor_remove_grad_hook(x, h) == WEFT_OK);
    CHECK(weft_tensor_remove_grad_hook(x, h) != WEFT_OK);
    weft_tensor *ts[] = {x, a, b, c, ab, y};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
}

static void test_no_grad(void) {
    weft_tensor *x = scalar_leaf(1);
    weft_tensor *y;
    WEFT_NO_GRAD { y = weft_mul(x, x); }
    CHECK(!weft_tensor_requires_grad(y));
    CHECK(weft_grad_is_enabled());
    CHECK(weft_backward(y, NULL, NULL) != WEFT_OK);
    weft_tensor_free(x);
    weft_tensor_free(y);
}

// A long chain is freed without deep recursion.
static void test_long_chain(void) {
    weft_tensor *x = scalar_leaf(1.0);
    weft_tensor *y = weft_tensor_ref(x);
    for (int i = 0; i < 200000; i++) {
        weft_tensor *n = weft_mul_scalar(y, 1.0);
        weft_tensor_free(y);
        y = n;
    }
    CHECK(weft_backward(y, NULL, NULL) == WEFT_OK);
    CHECK_NEAR(weft_tensor_item(weft_tensor_grad(x)), 1.0, 1e-12);
    weft_tensor_free(y);
    weft_tensor_free(x);
}

int main(void) {
    RUN(test_seed003_example);
    RUN(test_second_backward);
    RUN(test_second_order);
    RUN(test_retain_and_accumulate);
    RUN(test_hook_fires_when_final);
    RUN(test_no_grad);
    RUN(test_long_chain);
    return wt_summary();
}
