// Modules: parameter names and traversal, linear forward/backward against
// naive loops, sequential, train/eval, init statistics, bad input.
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

static void test_linear(void) {
    weft_generator *g = weft_generator_create(7);
    weft_module *lin = weft_nn_linear(3, 2, true, g);
    CHECK(lin && weft_module_param_count(lin) == 2);
    char name[64];
    weft_tensor *w = weft_module_param_at(lin, 0, name, sizeof name);
    CHECK(!strcmp(name, "weight") && weft_tensor_size(w, 0) == 2 && weft_tensor_size(w, 1) == 3);
    weft_tensor *b = weft_module_param_at(lin, 1, name, sizeof name);
    CHECK(!strcmp(name, "bias") && weft_tensor_requires_grad(b));
    // init bound 1/sqrt(3)
    float wv[6], bv[2];
    weft_tensor_to_f32(w, wv, 6);
    weft_tensor_to_f32(b, bv, 2);
    for (int i = 0; i < 6; i++) CHECK(fabsf(wv[i]) <= 1 / sqrtf(3.f));
    // forward: x (4,3) -> (4,2), y = x W^T + b
    float xv[12];
    for (int i = 0; i < 12; i++) xv[i] = (float)(i % 5) - 2.f;
    weft_tensor *x = weft_tensor_from_data(xv, WEFT_DIMS(4, 3), WEFT_F32);
    weft_tensor *y = weft_module_forward(lin, x);
    double ref[8], gref_w[6] = {0}, gref_b[2] = {0};
    for (int r = 0; r < 4; r++)
        for (int o = 0; o < 2; o++) {
            double s = bv[o];
            for (int k = 0; k < 3; k++) s += (double)xv[r * 3 + k] * wv[o * 3 + k];
            ref[r * 2 + o] = s;
        }
    wt_check_values("linear forward", y, ref, 8, 1e-6);
    // backward with gradient G = ones*(o+1): dW[o,k] = sum_r G[r,o] x[r,k], db[o] = sum_r G[r,o]
    float gv[8];
    for (int r = 0; r < 4; r++)
        for (int o = 0; o < 2; o++) gv[r * 2 + o] = (float)(o + 1) * (float)(r + 1);
    weft_tensor *gy = weft_tensor_from_data(gv, WEFT_DIMS(4, 2), WEFT_F32);
    CHECK(weft_backward(y, gy, NULL) == WEFT_OK);
    for (int r = 0; r < 4; r++)
        for (int o = 0; o < 2; o++) {
            gref_b[o] += gv[r * 2 + o];
            for (int k = 0; k < 3; k++) gref_w[o * 3 + k] += (double)gv[r * 2 + o] * xv[r * 3 + k];
        }
    wt_check_values("linear dW", weft_tensor_grad(w), gref_w, 6, 1e-6);
    wt_check_values("linear db", weft_tensor_grad(b), gref_b, 2, 1e-6);
    weft_module_zero_grad(lin);
    CHECK(weft_tensor_grad(w) == NULL);
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_tensor_free(gy);
    weft_module_free(lin);
    weft_generator_free(g);
}

static void test_sequential_names(void) {
    weft_module *seq = weft_nn_sequential();
    CHECK(weft_nn_sequential_append(seq, weft_nn_linear(4, 8, true, NULL)) == WEFT_OK);
    CHECK(weft_nn_sequential_append(seq, weft_nn_linear(8, 2, false, NULL)) == WEFT_OK);
    CHECK(weft_module_param_count(seq) == 3);
    char name[64];
    weft_module_param_at(seq, 2, name, sizeof name);
    CHECK(!strcmp(name, "1.weight"));
    weft_module_param_at(seq, 1, name, sizeof name);
    CHECK(!strcmp(name, "0.bias"));
    CHECK(weft_module_find(seq, "0.weight") == weft_module_param_at(seq, 0, NULL, 0));
    CHECK(weft_module_find(seq, "1.bias") == NULL);
    CHECK(weft_module_num_elements(seq) == 4 * 8 + 8 + 8 * 2);
    weft_tensor *x = weft_tensor_ones(WEFT_DIMS(5, 4), WEFT_F32);
    weft_tensor *y = weft_module_forward(seq, x);
    CHECK(y && weft_tensor_size(y, 0) == 5 && weft_tensor_size(y, 1) == 2);
    weft_module_set_training(seq, false);
    CHECK(!weft_module_is_training(weft_module_child_at(seq, 1)));
    // a wrong input size is an error naming the linear op, not a crash
    weft_tensor *bad = weft_tensor_ones(WEFT_DIMS(5, 3), WEFT_F32);
    CHECK(weft_module_forward(seq, bad) == NULL && strstr(weft_last_error(), "linear: x (5,3) and weight"));
    CHECK(weft_nn_linear(0, 3, true, NULL) == NULL && strstr(weft_last_error(), "linear"));
    weft_module *m = weft_nn_sequential();
    CHECK(weft_module_add_param(m, "a.b", weft_tensor_ones(WEFT_DIMS(2), WEFT_F32)) != WEFT_OK);
    CHECK(weft_module_add_param(m, "a", weft_tensor_ones(WEFT_DIMS(2), WEFT_F32)) == WEFT_OK);
    CHECK(weft_module_add_param(m, "a", weft_tensor_ones(WEFT_DIMS(2), WEFT_F32)) != WEFT_OK);
    weft_module_free(m);
    weft_tensor_free(bad);
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_module_free(seq);
}

static void test_init_stats(void) {
    weft_generator *g = weft_generator_create(3);
    weft_tensor *w = weft_tensor_empty(WEFT_DIMS(256, 64, 3, 3), WEFT_F32); // fan_in 576, fan_out 2304
    int64_t n = weft_tensor_numel(w);
    float *v = malloc(sizeof(float) * (size_t)n);
    struct {
        weft_status (*fn)(weft_tensor *, double, weft_generator *);
        double var; // expected variance with gain 1
    } cases[] = {{weft_init_kaiming_uniform, 1.0 / 576}, {weft_init_kaiming_normal, 1.0 / 576},
                 {weft_init_xavier_uniform, 2.0 / (576 + 2304)}, {weft_init_xavier_normal, 2.0 / (576 + 2304)}};
    for (int c = 0; c < 4; c++) {
        CHECK(cases[c].fn(w, 1.0, g) == WEFT_OK);
        weft_tensor_to_f32(w, v, n);
        double s = 0, ss = 0;
        for (int64_t i = 0; i < n; i++) s += v[i], ss += (double)v[i] * v[i];
        double mean = s / n, var = ss / n - mean * mean;
        CHECK_NEAR(var, cases[c].var, 0.03);
        CHECK(fabs(mean) < 4 * sqrt(cases[c].var / n));
    }
    weft_tensor *v1 = weft_tensor_empty(WEFT_DIMS(5), WEFT_F32);
    CHECK(weft_init_kaiming_uniform(v1, 1.0, g) != WEFT_OK); // 1-d: no fan_in
    weft_tensor_free(v1);
    free(v);
    weft_tensor_free(w);
    weft_generator_free(g);
}

int main(void) {
    RUN(test_linear);
    RUN(test_sequential_names);
    RUN(test_init_stats);
    return wt_summary();
}
