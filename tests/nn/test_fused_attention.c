// causal_self_attention: by default the heads go through the fused
// causal_attention op, and the module's output and the gradients of its
// parameters and input match the composed path (WEFT_FUSED_ATTENTION=0) in f64.
#include <stdlib.h>
#include <string.h>

#include <weft/graph.h>

#include "tensor/tensor_impl.h" // widen_to_f64 swaps a parameter's storage
#include "weft_test.h"

// The layers make f32 parameters; for an f64 comparison a parameter leaf is
// given f64 storage holding the same values (test-only: no public API casts a
// module's parameters in place).
static void widen_to_f64(weft_tensor *p) {
    weft_tensor *w = weft_cast(p, WEFT_F64);
    CHECK(w && weft_tensor_is_contiguous(p) && weft_tensor_is_contiguous(w));
    if (!w) return;
    weft_storage *s = p->storage;
    p->storage = w->storage;
    p->dtype = WEFT_F64;
    p->offset = w->offset;
    w->storage = s;
    w->dtype = WEFT_F32;
    weft_tensor_free(w);
}

// y = m(x), loss = sum(y * w): y (copied out), dx and every parameter's gradient (flattened, in order).
static int64_t run_once(weft_module *m, weft_tensor *x, weft_tensor *w, double *y_out, double *grads) {
    weft_module_zero_grad(m);
    weft_tensor_zero_grad(x);
    weft_tensor *y = weft_module_forward(m, x);
    CHECK(y && weft_tensor_dtype(y) == WEFT_F64);
    if (!y) return 0;
    weft_tensor_to_f64(y, y_out, weft_tensor_numel(y));
    CHECK(weft_backward(y, w, NULL) == WEFT_OK);
    int64_t at = 0;
    for (int i = -1; i < weft_module_param_count(m); i++) {
        weft_tensor *p = i < 0 ? x : weft_module_param_at(m, i, NULL, 0), *g = weft_tensor_grad(p);
        CHECK(g != NULL);
        if (g) weft_tensor_to_f64(g, grads + at, weft_tensor_numel(p));
        at += weft_tensor_numel(p);
    }
    weft_tensor_free(y);
    return at;
}

static void test_fused_matches_composed(void) {
    const int64_t B = 2, T = 9, C = 15, nh = 3; // hd = 5: a scale that is not a power of 2
    weft_generator *gen = weft_generator_create(5);
    weft_module *m = weft_nn_causal_self_attention(C, nh, gen);
    CHECK(m != NULL);
    for (int i = 0; i < weft_module_param_count(m); i++) widen_to_f64(weft_module_param_at(m, i, NULL, 0));
    weft_tensor *x = wt_rand64(WEFT_DIMS(B, T, C), -1, 1, 6, true);
    weft_tensor *w = wt_rand64(WEFT_DIMS(B, T, C), -1, 1, 7, false);
    int64_t ny = B * T * C, ng = B * T * C + weft_module_num_elements(m);
    double *y0 = malloc(sizeof(double) * (size_t)ny), *g0 = malloc(sizeof(double) * (size_t)ng);
    double *y1 = malloc(sizeof(double) * (size_t)ny), *g1 = malloc(sizeof(double) * (size_t)ng);

    setenv("WEFT_FUSED_ATTENTION", "0", 1);
    CHECK(wt_count_traced_ops(m, x, WEFT_F32, "causal_attention_qkv") == 0);
    CHECK(wt_count_traced_ops(m, x, WEFT_F32, "softmax") == 1);
    CHECK(run_once(m, x, w, y0, g0) == ng);
    unsetenv("WEFT_FUSED_ATTENTION"); // the default: fused
    CHECK(wt_count_traced_ops(m, x, WEFT_F32, "causal_attention_qkv") == 1);
    CHECK(wt_count_traced_ops(m, x, WEFT_F32, "softmax") == 0);
    CHECK(run_once(m, x, w, y1, g1) == ng);

    double ey = 0, eg = 0;
    for (int64_t i = 0; i < ny; i++) ey = fmax(ey, fabs(y1[i] - y0[i]));
    for (int64_t i = 0; i < ng; i++) eg = fmax(eg, fabs(g1[i] - g0[i]));
    printf("  fused vs composed: max |dy| %.3g, max |dgrad| %.3g\n", ey, eg);
    CHECK(ey <= 1e-10);
    CHECK(eg <= 1e-10);

    // anything but "0" keeps the fused path
    setenv("WEFT_FUSED_ATTENTION", "1", 1);
    CHECK(wt_count_traced_ops(m, x, WEFT_F32, "causal_attention_qkv") == 1);
    unsetenv("WEFT_FUSED_ATTENTION");

    free(y0);
    free(g0);
    free(y1);
    free(g1);
    weft_tensor_free(x);
    weft_tensor_free(w);
    weft_module_free(m);
    weft_generator_free(gen);
}

// The fused path keeps the module's own errors: an integer input names the module.
static void test_fused_errors(void) {
    setenv("WEFT_FUSED_ATTENTION", "1", 1);
    weft_module *m = weft_nn_causal_self_attention(8, 2, NULL);
    weft_tensor *xi = weft_tensor_ones(WEFT_DIMS(2, 5, 8), WEFT_I32);
    weft_tensor *y = weft_module_forward(m, xi);
    CHECK(y == NULL && strstr(weft_last_error(), "causal_self_attention"));
    weft_tensor *x1 = weft_tensor_ones(WEFT_DIMS(2, 1, 8), WEFT_F32); // T = 1 works
    weft_tensor *y1 = weft_module_forward(m, x1);
    CHECK(y1 && weft_tensor_size(y1, 1) == 1);
    unsetenv("WEFT_FUSED_ATTENTION");
    weft_tensor_free(y);
    weft_tensor_free(xi);
    weft_tensor_free(x1);
    weft_tensor_free(y1);
    weft_module_free(m);
}

int main(void) {
    RUN(test_fused_matches_composed);
    RUN(test_fused_errors);
    return wt_summary();
}
