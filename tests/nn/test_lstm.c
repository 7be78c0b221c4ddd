// The LSTM layer's fused cell (op lstm_cell) against the cell composed from
// public ops (the layer's earlier path, still taken with WEFT_LSTM_COMPOSED=1):
// in f64, outputs and the gradients of x and of every parameter agree within
// 1e-12, for T = 1 (zero state only), odd sizes and a longer sequence; and a
// second-order gradient through the fused layer is an error, while the
// composed path still gives one.
// PyTorch's stored numbers for the layer are checked in test_seq.c, the cell
// op on the accelerator in tests/ops/test_lstm_cell.c.
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

// y = lstm(x) and the gradients of sum(y * w): out[0] = y, out[1] = dx, out[2 + p] = d param p.
static void run_layer(weft_module *m, weft_tensor *x0, weft_tensor *w, bool composed, weft_tensor **out) {
    if (composed) setenv("WEFT_LSTM_COMPOSED", "1", 1);
    else unsetenv("WEFT_LSTM_COMPOSED");
    weft_tensor *x = weft_tensor_detach(x0);
    weft_tensor_set_requires_grad(x, true);
    for (int p = 0; p < weft_module_param_count(m); p++) weft_tensor_zero_grad(weft_module_param_at(m, p, NULL, 0));
    weft_tensor *y = weft_module_forward(m, x);
    CHECK(y != NULL);
    weft_tensor *yw = weft_mul(y, w), *l = weft_sum(yw, 0, NULL, false);
    CHECK(l && weft_backward(l, NULL, NULL) == WEFT_OK);
    out[0] = y;
    out[1] = weft_tensor_ref(weft_tensor_grad(x));
    for (int p = 0; p < weft_module_param_count(m); p++)
        out[2 + p] = weft_tensor_ref(weft_tensor_grad(weft_module_param_at(m, p, NULL, 0)));
    weft_tensor_free(yw);
    weft_tensor_free(l);
    weft_tensor_free(x);
    unsetenv("WEFT_LSTM_COMPOSED");
}

static void check_fused_vs_composed(int64_t B, int64_t T, int64_t I, int64_t H, uint64_t seed) {
    weft_generator *g = weft_generator_create(seed);
    weft_module *m = weft_nn_lstm(I, H, g);
    CHECK(m && weft_module_to_dtype(m, WEFT_F64) == WEFT_OK);
    weft_tensor *x = wt_rand64(3, (const int64_t[]){B, T, I}, -2, 2, seed + 1, false);
    weft_tensor *w = wt_rand64(3, (const int64_t[]){B, T, H}, -1, 1, seed + 2, false);
    weft_tensor *f[6] = {0}, *c[6] = {0};
    run_layer(m, x, w, false, f);
    run_layer(m, x, w, true, c);
    static const char *what[6] = {"lstm y", "lstm dx", "lstm d weight_ih", "lstm d weight_hh", "lstm d bias_ih",
                                  "lstm d bias_hh"};
    for (int k = 0; k < 6; k++) {
        CHECK((f[k] != NULL) == (c[k] != NULL) && (f[k] || (T == 1 && k == 3))); // T = 1 never uses weight_hh
        if (f[k] && c[k]) wt_check_same(what[k], f[k], c[k], 1e-12);
        weft_tensor_free(f[k]);
        weft_tensor_free(c[k]);
    }
    weft_tensor_free(x);
    weft_tensor_free(w);
    weft_module_free(m);
    weft_generator_free(g);
}

static void test_fused_vs_composed(void) {
    check_fused_vs_composed(2, 1, 3, 4, 1);   // T = 1: the zero state only
    check_fused_vs_composed(3, 5, 7, 6, 2);   // odd sizes
    check_fused_vs_composed(4, 33, 8, 16, 3); // a longer sequence (the step split tree is uneven)
    check_fused_vs_composed(16, 4, 8, 130, 4); // B*H above the CPU kernels' parallel grain
}

// Second order: d/dx of sum(dL/dx) through the fused layer is an error naming
// the cell's backward op; the composed path (WEFT_LSTM_COMPOSED=1) computes it.
static void test_second_order(void) {
    weft_generator *g = weft_generator_create(6);
    weft_module *m = weft_nn_lstm(3, 4, g);
    CHECK(m && weft_module_to_dtype(m, WEFT_F64) == WEFT_OK);
    for (int composed = 0; composed < 2; composed++) {
        if (composed) setenv("WEFT_LSTM_COMPOSED", "1", 1);
        weft_tensor *x = wt_rand64(3, (const int64_t[]){2, 3, 3}, -1, 1, 61, true);
        weft_tensor *y = weft_module_forward(m, x), *s = weft_sum(y, 0, NULL, false);
        weft_backward_opts o = {.create_graph = true};
        CHECK(s && weft_backward(s, NULL, &o) == WEFT_OK);
        weft_tensor *gx = weft_tensor_grad(x), *gs = gx ? weft_sum(gx, 0, NULL, false) : NULL;
        CHECK(gs != NULL);
        weft_clear_error();
        weft_status st = gs ? weft_backward(gs, NULL, NULL) : WEFT_ERR_STATE;
        if (composed) CHECK(st == WEFT_OK);
        else CHECK(st != WEFT_OK && wt_error_has("lstm_cell_backward"));
        weft_tensor_free(gs);
        weft_tensor_zero_grad(x);
        for (int p = 0; p < weft_module_param_count(m); p++)
            weft_tensor_zero_grad(weft_module_param_at(m, p, NULL, 0));
        weft_tensor_free(y);
        weft_tensor_free(s);
        weft_tensor_free(x);
        unsetenv("WEFT_LSTM_COMPOSED");
    }
    weft_module_free(m);
    weft_generator_free(g);
}

int main(void) {
    RUN(test_fused_vs_composed);
    RUN(test_second_order);
    return wt_summary();
}
