// The LSTM layer's three paths (WEFT_LSTM_PATH, src/nn/lstm.c): the fused
// recurrence (op lstm_seq, the default) and the per-step fused cell (op
// lstm_cell) against the cell composed from public ops (WEFT_LSTM_COMPOSED=1
// or WEFT_LSTM_PATH=composed): in f64, outputs and the gradients of x and of
// every parameter agree within 1e-10 (seq: one weight-gradient product sums
// in another order) and 1e-12 (cell), for T = 1 (zero state only), B = 1, odd
// sizes and a longer sequence; in f32 seq and cell agree within 1e-5. A
// second-order gradient through a fused path is an error naming its backward
// op, while the composed path still gives one.
// After an embedding with fewer rows than the batch has tokens, a sequential
// folds the lookup into the LSTM's input product (the table's rows projected
// once, then looked up): the same outputs and gradients of every parameter as
// the lookup then the layer, in f64 within 1e-12, and traced graphs that show
// which ran.
// PyTorch's stored numbers for the layer are checked in test_seq.c, the ops
// on the accelerator in tests/ops/test_lstm_cell.c and test_lstm_seq.c.
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

// y = lstm(x) and the gradients of sum(y * w): out[0] = y, out[1] = dx, out[2 + p] = d param p.
// path: "seq", "cell", "composed" (WEFT_LSTM_PATH), or NULL: the default with
// WEFT_LSTM_COMPOSED=1 (the older switch, which must still pick composed).
static void run_layer(weft_module *m, weft_tensor *x0, weft_tensor *w, const char *path, weft_tensor **out) {
    if (path) setenv("WEFT_LSTM_PATH", path, 1);
    else setenv("WEFT_LSTM_COMPOSED", "1", 1);
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
    unsetenv("WEFT_LSTM_PATH");
}

// Path a against path b in dtype dt within tol.
static void check_paths(int64_t B, int64_t T, int64_t I, int64_t H, uint64_t seed, weft_dtype dt, const char *pa,
                        const char *pb, double tol) {
    weft_generator *g = weft_generator_create(seed);
    weft_module *m = weft_nn_lstm(I, H, g);
    CHECK(m && weft_module_to_dtype(m, dt) == WEFT_OK);
    weft_tensor *x64 = wt_rand64(3, (const int64_t[]){B, T, I}, -2, 2, seed + 1, false);
    weft_tensor *w64 = wt_rand64(3, (const int64_t[]){B, T, H}, -1, 1, seed + 2, false);
    weft_tensor *x = weft_cast(x64, dt), *w = weft_cast(w64, dt);
    weft_tensor *f[6] = {0}, *c[6] = {0};
    run_layer(m, x, w, pa, f);
    run_layer(m, x, w, pb, c);
    static const char *what[6] = {"lstm y", "lstm dx", "lstm d weight_ih", "lstm d weight_hh", "lstm d bias_ih",
                                  "lstm d bias_hh"};
    char msg[160];
    for (int k = 0; k < 6; k++) {
        CHECK((f[k] != NULL) == (c[k] != NULL) && (f[k] || (T == 1 && k == 3))); // T = 1 never uses weight_hh
        snprintf(msg, sizeof msg, "%s: %s vs %s (B=%lld T=%lld H=%lld %s)", what[k], pa ? pa : "default",
                 pb ? pb : "WEFT_LSTM_COMPOSED=1", (long long)B, (long long)T, (long long)H,
                 weft_dtype_name(dt));
        if (f[k] && c[k]) wt_check_same(msg, f[k], c[k], tol);
        weft_tensor_free(f[k]);
        weft_tensor_free(c[k]);
    }
    weft_tensor *ts[] = {x64, w64, x, w};
    for (int k = 0; k < 4; k++) weft_tensor_free(ts[k]);
    weft_module_free(m);
    weft_generator_free(g);
}

static void check_fused_vs_composed(int64_t B, int64_t T, int64_t I, int64_t H, uint64_t seed) {
    check_paths(B, T, I, H, seed, WEFT_F64, "seq", "composed", 1e-10);
    check_paths(B, T, I, H, seed, WEFT_F64, "cell", NULL, 1e-12);
    check_paths(B, T, I, H, seed, WEFT_F32, "seq", "cell", 1e-5);
}

static void test_fused_vs_composed(void) {
    check_fused_vs_composed(2, 1, 3, 4, 1);   // T = 1: the zero state only
    check_fused_vs_composed(3, 5, 7, 6, 2);   // odd sizes
    check_fused_vs_composed(4, 33, 8, 16, 3); // a longer sequence (the step split tree is uneven)
    check_fused_vs_composed(16, 4, 8, 130, 4); // B*H above the CPU kernels' parallel grain
    check_fused_vs_composed(1, 6, 2, 3, 5);    // B = 1
    check_fused_vs_composed(1, 1, 2, 1, 6);    // B = T = H = 1
}

// Second order: d/dx of sum(dL/dx) through a fused path is an error naming
// its backward op; the composed path (WEFT_LSTM_COMPOSED=1) computes it.
static void test_second_order(void) {
    weft_generator *g = weft_generator_create(6);
    weft_module *m = weft_nn_lstm(3, 4, g);
    CHECK(m && weft_module_to_dtype(m, WEFT_F64) == WEFT_OK);
    static const char *bw_op[2] = {"lstm_seq_backward", "lstm_cell_backward"};
    for (int path = 0; path < 3; path++) { // default (seq), cell, composed
        bool composed = path == 2;
        if (path == 1) setenv("WEFT_LSTM_PATH", "cell", 1);
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
        else CHECK(st != WEFT_OK && wt_error_has(bw_op[path]));
        weft_tensor_free(gs);
        weft_tensor_zero_grad(x);
        for (int p = 0; p < weft_module_param_count(m); p++)
            weft_tensor_zero_grad(weft_module_param_at(m, p, NULL, 0));
        weft_tensor_free(y);
        weft_tensor_free(s);
        weft_tensor_free(x);
        unsetenv("WEFT_LSTM_COMPOSED");
        unsetenv("WEFT_LSTM_PATH");
    }
    weft_module_free(m);
    weft_generator_free(g);
}

// Index of the first node running op in the graph traced from m(x), or -1.
static int first_traced(weft_module *m, weft_tensor *x, const char *op) {
    weft_graph *g = weft_graph_new();
    int at = -1;
    if (g && weft_graph_trace_begin(g) == WEFT_OK) {
        weft_graph_trace_input(g, x, "x");
        weft_tensor *y = weft_module_forward(m, x);
        if (y) weft_graph_trace_output(g, y);
        weft_graph_trace_end(g);
        weft_tensor_free(y);
        for (int i = 0; i < weft_graph_node_count(g) && at < 0; i++) {
            const char *o = weft_graph_node_op(g, (weft_node_id){i});
            if (o && !strcmp(o, op)) at = i;
        }
    }
    weft_graph_free(g);
    return at;
}

// seq(embedding (V,I), lstm(I,H)) on ids (B,T) with fold on and off: y and the gradients of sum(y * w) for
// all five parameters; folded says whether the fold should apply (more tokens than rows).
static void check_fold(int64_t V, int64_t I, int64_t H, int64_t B, int64_t T, const char *path, uint64_t seed) {
    weft_generator *g = weft_generator_create(seed);
    weft_module *m = weft_nn_sequential();
    CHECK(weft_nn_sequential_append(m, weft_nn_embedding(V, I, g)) == WEFT_OK);
    CHECK(weft_nn_sequential_append(m, weft_nn_lstm(I, H, g)) == WEFT_OK);
    CHECK(weft_module_to_dtype(m, WEFT_F64) == WEFT_OK);
    int64_t N = B * T;
    weft_tensor *ids = weft_tensor_empty(WEFT_DIMS(B, T), WEFT_I64);
    int64_t *id = weft_tensor_data(ids);
    for (int64_t i = 0; i < N; i++) id[i] = (int64_t)((i * 7 + seed * 3 + i / 3) % V); // every row, repeats
    weft_tensor *w = wt_rand64(3, (const int64_t[]){B, T, H}, -1, 1, seed + 1, false);
    bool folded = V < N;
    int np = weft_module_param_count(m);
    CHECK(np == 5);
    weft_tensor *r[2][6] = {{0}};
    if (path) setenv("WEFT_LSTM_PATH", path, 1);
    for (int k = 0; k < 2; k++) {
        setenv("WEFT_LSTM_FOLD", k ? "1" : "0", 1);
        // traced: the table product (a linear op) runs before the lookup only when folded
        int mm = first_traced(m, ids, "linear"), em = first_traced(m, ids, "embedding");
        CHECK(mm >= 0 && em >= 0 && (mm < em) == (k && folded));
        weft_module_zero_grad(m);
        weft_tensor *y = weft_module_forward(m, ids);
        weft_tensor *yw = y ? weft_mul(y, w) : NULL, *l = yw ? weft_sum(yw, 0, NULL, false) : NULL;
        CHECK(l && weft_backward(l, NULL, NULL) == WEFT_OK);
        r[k][0] = y;
        for (int p = 0; p < np; p++) r[k][1 + p] = weft_tensor_ref(weft_tensor_grad(weft_module_param_at(m, p, NULL, 0)));
        weft_tensor_free(yw);
        weft_tensor_free(l);
    }
    unsetenv("WEFT_LSTM_FOLD");
    unsetenv("WEFT_LSTM_PATH");
    static const char *what[6] = {"y", "d embedding", "d weight_ih", "d weight_hh", "d bias_ih", "d bias_hh"};
    char msg[160];
    for (int k = 0; k < 6; k++) {
        snprintf(msg, sizeof msg, "fold: %s (V=%lld B=%lld T=%lld path %s)", what[k], (long long)V, (long long)B,
                 (long long)T, path ? path : "seq");
        CHECK(r[0][k] && r[1][k]);
        if (r[0][k] && r[1][k]) wt_check_same(msg, r[1][k], r[0][k], 1e-12);
        weft_tensor_free(r[0][k]);
        weft_tensor_free(r[1][k]);
    }
    weft_tensor_free(ids);
    weft_tensor_free(w);
    weft_module_free(m);
    weft_generator_free(g);
}

static void test_fold_embedding(void) {
    check_fold(5, 3, 4, 3, 4, NULL, 1);     // 12 tokens, 5 rows: folded
    check_fold(7, 4, 3, 2, 9, "cell", 2);   // the per-step path after the fold
    check_fold(12, 3, 4, 3, 4, NULL, 3);    // as many rows as tokens: not folded
    check_fold(40, 3, 2, 2, 5, NULL, 4);    // more rows than tokens: not folded
    // a stacked LSTM (a sequential) folds through its first layer
    weft_generator *g = weft_generator_create(5);
    weft_module *m = weft_nn_sequential(), *st = weft_nn_sequential();
    CHECK(weft_nn_sequential_append(st, weft_nn_lstm(3, 4, g)) == WEFT_OK);
    CHECK(weft_nn_sequential_append(st, weft_nn_lstm(4, 4, g)) == WEFT_OK);
    CHECK(weft_nn_sequential_append(m, weft_nn_embedding(4, 3, g)) == WEFT_OK);
    CHECK(weft_nn_sequential_append(m, st) == WEFT_OK);
    CHECK(weft_module_to_dtype(m, WEFT_F64) == WEFT_OK);
    weft_tensor *ids = weft_tensor_empty(WEFT_DIMS(2, 5), WEFT_I32);
    int32_t *id = weft_tensor_data(ids);
    for (int i = 0; i < 10; i++) id[i] = (i * 3) % 4;
    weft_tensor *y[2];
    for (int k = 0; k < 2; k++) {
        setenv("WEFT_LSTM_FOLD", k ? "1" : "0", 1);
        int mm = first_traced(m, ids, "linear"), em = first_traced(m, ids, "embedding");
        CHECK(mm >= 0 && em >= 0 && (mm < em) == (k == 1));
        y[k] = weft_module_forward(m, ids);
        CHECK(y[k] && weft_tensor_size(y[k], 2) == 4);
    }
    unsetenv("WEFT_LSTM_FOLD");
    if (y[0] && y[1]) wt_check_same("fold: stacked y", y[1], y[0], 1e-12);
    // an id out of range is the lookup's error either way
    id[3] = 4;
    weft_tensor *bad = weft_module_forward(m, ids);
    CHECK(bad == NULL && wt_error_has("embedding"));
    weft_tensor_free(y[0]);
    weft_tensor_free(y[1]);
    weft_tensor_free(ids);
    weft_module_free(m);
    weft_generator_free(g);
}

int main(void) {
    RUN(test_fused_vs_composed);
    RUN(test_fold_embedding);
    RUN(test_second_order);
    return wt_summary();
}
