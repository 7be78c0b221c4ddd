// The fused LSTM recurrence (lstm_seq, lstm_seq_backward; def_lstm.c):
// hs against the recurrence evaluated here in double (f64 and f32, T = 1,
// B = 1, strided xg); finite-difference gradients of xg and w_hh; values and
// gradients against the same recurrence composed from public ops (matmul,
// add and lstm_cell per step) within 1e-10 in f64, and in f32 both paths
// against the f64 result (1e-6; 1e-4 for a longer, wider case); shape,
// dtype and input-count errors naming the op; the refusal of a second-order
// gradient; the accelerator (mock: the CPU's numbers bit for bit); and a
// traced graph: symbolic gradients (weft_graph_gradients) equal to eager
// backward, and a save -> load round trip giving the same numbers bit for bit.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft/graph.h>

#include "ops/op.h"
#include "weft_test.h"

static double sigm(double v) { return 1.0 / (1.0 + exp(-v)); }

// xg (B,T,4H), w (4H,H) host arrays -> hs (B,T,H): the recurrence, plainly.
static void seq_ref(const double *xg, const double *w, double *hs, int64_t B, int64_t T, int64_t H) {
    double *h = calloc((size_t)(H + 1), sizeof *h), *c = calloc((size_t)(H + 1), sizeof *c);
    double *g = malloc(sizeof(double) * (size_t)(4 * H + 1));
    for (int64_t b = 0; b < B; b++) {
        memset(h, 0, sizeof(double) * (size_t)H);
        memset(c, 0, sizeof(double) * (size_t)H);
        for (int64_t t = 0; t < T; t++) {
            for (int64_t q = 0; q < 4 * H; q++) {
                double s = xg[(b * T + t) * 4 * H + q];
                for (int64_t k = 0; k < H; k++) s += h[k] * w[q * H + k];
                g[q] = s;
            }
            for (int64_t j = 0; j < H; j++) {
                double i = sigm(g[j]), f = sigm(g[H + j]), gg = tanh(g[2 * H + j]), o = sigm(g[3 * H + j]);
                c[j] = f * c[j] + i * gg;
                h[j] = o * tanh(c[j]);
                hs[(b * T + t) * H + j] = h[j];
            }
        }
    }
    free(h);
    free(c);
    free(g);
}

static weft_tensor *rand3(int64_t B, int64_t T, int64_t X, double r, uint64_t seed, bool rg) {
    return wt_rand64(3, (const int64_t[]){B, T, X}, -r, r, seed, rg);
}
static weft_tensor *randw(int64_t H, uint64_t seed, bool rg) {
    return wt_rand64(2, (const int64_t[]){4 * H, H}, -0.7, 0.7, seed, rg);
}

static void check_values(int64_t B, int64_t T, int64_t H, uint64_t seed) {
    weft_tensor *xg = rand3(B, T, 4 * H, 2, seed, false), *w = randw(H, seed + 1, false);
    double *ref = malloc(sizeof(double) * (size_t)(B * T * H + 1));
    seq_ref(weft_tensor_data(xg), weft_tensor_data(w), ref, B, T, H);
    weft_tensor *hs = weft_lstm_seq(xg, w);
    CHECK(hs && weft_tensor_ndim(hs) == 3 && weft_tensor_size(hs, 2) == H);
    wt_check_values("lstm_seq hs", hs, ref, B * T * H, 1e-13);
    weft_tensor *x32 = weft_cast(xg, WEFT_F32), *w32 = weft_cast(w, WEFT_F32), *h32 = weft_lstm_seq(x32, w32);
    CHECK(h32 && weft_tensor_dtype(h32) == WEFT_F32);
    wt_check_values("lstm_seq hs f32", h32, ref, B * T * H, 1e-5);
    weft_tensor *ts[] = {xg, w, hs, x32, w32, h32};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
    free(ref);
}

static void test_values(void) {
    check_values(2, 5, 3, 1);
    check_values(1, 1, 4, 2);  // T = 1, B = 1: the zero state only
    check_values(1, 7, 1, 3);  // H = 1
    check_values(3, 1, 5, 4);  // T = 1
    check_values(32, 6, 70, 5); // B*H above the kernels' parallel grain
}

// xg read through a permuted view (strided): the kernel's contiguous copy.
static void test_strided(void) {
    int64_t B = 3, T = 4, H = 2;
    weft_tensor *xt = rand3(T, B, 4 * H, 2, 11, false), *w = randw(H, 12, false);
    weft_tensor *xg = weft_transpose(xt, 0, 1), *xc = weft_tensor_contiguous(xg); // (B,T,4H)
    double ref[24];
    seq_ref(weft_tensor_data(xc), weft_tensor_data(w), ref, B, T, H);
    weft_tensor *hs = weft_lstm_seq(xg, w);
    wt_check_values("lstm_seq hs strided xg", hs, ref, B * T * H, 1e-13);
    weft_tensor *ts[] = {xt, w, xg, xc, hs};
    for (int i = 0; i < 5; i++) weft_tensor_free(ts[i]);
}

static weft_tensor *seq_fn(weft_tensor *const *in, void *user) {
    (void)user;
    return weft_lstm_seq(in[0], in[1]);
}

static void test_gradcheck(void) {
    const int64_t shapes[4][3] = {{2, 4, 3}, {1, 1, 2}, {1, 5, 2}, {3, 1, 1}}; // (B,T,H)
    for (int s = 0; s < 4; s++) {
        int64_t B = shapes[s][0], T = shapes[s][1], H = shapes[s][2];
        weft_tensor *in[2] = {rand3(B, T, 4 * H, 1.5, 21 + (uint64_t)s, true), randw(H, 31 + (uint64_t)s, true)};
        CHECK_GRAD(seq_fn, 2, in, NULL);
        weft_tensor_free(in[0]);
        weft_tensor_free(in[1]);
    }
}

// The same recurrence from public ops, per step: gates = xg[:,t] + h W^T
// (nothing at t = 0), then lstm_cell. -> hs (B,T,H).
static weft_tensor *seq_composed(weft_tensor *xg, weft_tensor *w) {
    int64_t T = weft_tensor_size(xg, 1);
    weft_tensor *wt = weft_transpose(w, 0, 1), *h = NULL, *c = NULL;
    weft_tensor **hs = calloc((size_t)T, sizeof *hs);
    for (int64_t t = 0; t < T; t++) {
        weft_tensor *x = weft_select(xg, 1, t), *g;
        if (h) {
            weft_tensor *hw = weft_matmul(h, wt);
            g = weft_add(x, hw);
            weft_tensor_free(hw);
        } else {
            g = weft_tensor_ref(x);
        }
        weft_tensor *hn = NULL, *cn = NULL;
        CHECK(weft_lstm_cell(g, c, &hn, &cn) == WEFT_OK);
        weft_tensor_free(x);
        weft_tensor_free(g);
        weft_tensor_free(c);
        c = cn;
        hs[t] = h = hn;
    }
    weft_tensor *out = weft_stack((int)T, hs, 1);
    for (int64_t t = 0; t < T; t++) weft_tensor_free(hs[t]);
    free(hs);
    weft_tensor_free(c);
    weft_tensor_free(wt);
    return out;
}

// max |a - b| / (1 + |b|) over the elements (a, b of one shape, any float dtype).
static double max_err(const weft_tensor *a, const weft_tensor *b) {
    int64_t n = weft_tensor_numel(b);
    double *x = malloc(sizeof(double) * (size_t)(n + 1)), *y = malloc(sizeof(double) * (size_t)(n + 1)), e = 0;
    weft_tensor_to_f64(a, x, n);
    weft_tensor_to_f64(b, y, n);
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(x[i] - y[i]) / (1 + fabs(y[i]));
        e = d > e || isnan(d) ? d : e;
    }
    free(x);
    free(y);
    return e;
}

// hs and the gradients of sum(hs * m) for xg and w (NULL when none reached
// it): r[0] = hs, r[1] = dxg, r[2] = dw_hh; fused or composed, in dtype dt.
static void run_seq(weft_tensor *x0, weft_tensor *w0, weft_tensor *m0, weft_dtype dt, bool fused, weft_tensor **r) {
    weft_tensor *xc = weft_cast(x0, dt), *wc = weft_cast(w0, dt), *m = weft_cast(m0, dt); // f64: x0 itself
    weft_tensor *x = weft_tensor_detach(xc), *w = weft_tensor_detach(wc); // fresh leaves per run
    weft_tensor_set_requires_grad(x, true);
    weft_tensor_set_requires_grad(w, true);
    r[0] = fused ? weft_lstm_seq(x, w) : seq_composed(x, w);
    weft_tensor *hm = weft_mul(r[0], m), *l = weft_sum(hm, 0, NULL, false);
    CHECK(l && weft_backward(l, NULL, NULL) == WEFT_OK);
    r[1] = weft_tensor_ref(weft_tensor_grad(x));
    r[2] = weft_tensor_ref(weft_tensor_grad(w));
    weft_tensor *ts[] = {xc, wc, m, x, w, hm, l};
    for (int i = 0; i < 7; i++) weft_tensor_free(ts[i]);
}

// f64: fused against composed within 1e-10 (one weight-gradient product
// sums in another order than T per-step ones). f32: fused and composed each
// against the composed f64 result, within f32_tol, and the fused error at
// most a few times the composed one (f32 roundings grow along the sequence,
// and the two paths round in different places).
static void check_vs_composed(int64_t B, int64_t T, int64_t H, double f32_tol, uint64_t seed) {
    weft_tensor *x0 = rand3(B, T, 4 * H, 2, seed, false), *w0 = randw(H, seed + 1, false);
    weft_tensor *m0 = rand3(B, T, H, 1, seed + 2, false);
    weft_tensor *f[3], *c[3], *f32[3], *c32[3];
    run_seq(x0, w0, m0, WEFT_F64, true, f);
    run_seq(x0, w0, m0, WEFT_F64, false, c);
    run_seq(x0, w0, m0, WEFT_F32, true, f32);
    run_seq(x0, w0, m0, WEFT_F32, false, c32);
    static const char *what[3] = {"hs", "dxg", "dw_hh"};
    char msg[96];
    for (int k = 0; k < 3; k++) {
        CHECK((f[k] != NULL) == (c[k] != NULL) && (f[k] || (k == 2 && T == 1))); // T = 1 never uses w_hh
        CHECK((f32[k] != NULL) == (f[k] != NULL) && (c32[k] != NULL) == (f[k] != NULL));
        if (!f[k] || !c[k] || !f32[k] || !c32[k]) continue;
        snprintf(msg, sizeof msg, "lstm_seq %s vs composed (B=%lld T=%lld H=%lld)", what[k], (long long)B,
                 (long long)T, (long long)H);
        wt_check_same(msg, f[k], c[k], 1e-10);
        double ef = max_err(f32[k], c[k]), ec = max_err(c32[k], c[k]);
        if (!(ef <= f32_tol && ec <= f32_tol && ef <= 4 * ec + 1e-6)) {
            wt_fail++;
            fprintf(stderr, "%s f32: fused error %.3g, composed error %.3g (tolerance %.3g)\n", msg, ef, ec, f32_tol);
        } else {
            wt_pass++;
        }
    }
    for (int k = 0; k < 3; k++) {
        weft_tensor *ts[] = {f[k], c[k], f32[k], c32[k]};
        for (int i = 0; i < 4; i++) weft_tensor_free(ts[i]);
    }
    weft_tensor *ts[] = {x0, w0, m0};
    for (int i = 0; i < 3; i++) weft_tensor_free(ts[i]);
}

static void test_vs_composed(void) {
    // f32 errors seen: ~6e-8 on the small cases, ~3e-5 on the large one, for both paths
    check_vs_composed(3, 6, 5, 1e-6, 41);
    check_vs_composed(1, 1, 3, 1e-6, 42);
    check_vs_composed(1, 9, 2, 1e-6, 43);
    check_vs_composed(2, 3, 4, 1e-6, 46);
    check_vs_composed(16, 20, 130, 1e-4, 44); // the batch split over threads, longer in time
    // hidden units split over threads too (more threads than groups of 8
    // rows): 5 rows on 2 threads (one group, 2 splits of 40 and 30 units),
    // and 16 rows on 4 threads (2 groups x 2 splits)
    int nt0 = weft_num_threads();
    weft_set_num_threads(2);
    check_vs_composed(5, 7, 70, 1e-4, 47);
    weft_set_num_threads(4);
    check_vs_composed(16, 5, 66, 1e-4, 48);
    weft_set_num_threads(nt0);
}

static void test_errors(void) {
    weft_tensor *x = rand3(2, 3, 8, 1, 51, false), *w = randw(2, 52, false), *w3 = randw(3, 53, false);
    weft_tensor *x7 = rand3(2, 3, 7, 1, 54, false), *x2 = wt_rand64(2, (const int64_t[]){2, 8}, -1, 1, 55, false);
    weft_tensor *w32 = weft_cast(w, WEFT_F32), *xi = weft_cast(x, WEFT_I32);
    weft_tensor *wsq = wt_rand64(2, (const int64_t[]){2, 2}, -1, 1, 56, false);
    CHECK(weft_lstm_seq(x7, w) == NULL && wt_error_has("lstm_seq") && wt_error_has("(B,T,4H)"));
    CHECK(weft_lstm_seq(x2, w) == NULL && wt_error_has("lstm_seq") && wt_error_has("(B,T,4H)"));
    CHECK(weft_lstm_seq(x, w3) == NULL && wt_error_has("lstm_seq") && wt_error_has("w_hh"));
    CHECK(weft_lstm_seq(x, wsq) == NULL && wt_error_has("lstm_seq") && wt_error_has("w_hh"));
    CHECK(weft_lstm_seq(x, w32) == NULL && wt_error_has("lstm_seq") && wt_error_has("w_hh"));
    CHECK(weft_lstm_seq(xi, w) == NULL && wt_error_has("lstm_seq"));
    CHECK(weft_lstm_seq(NULL, w) == NULL && wt_error_has("lstm_seq"));
    const weft_op_def *op = weft_op_find("lstm_seq"), *bw = weft_op_find("lstm_seq_backward");
    CHECK(op && bw);
    weft_tensor *out[WEFT_MAX_OP_OUT];
    weft_tensor *in1[1] = {x};
    CHECK(weft_op_apply(op, 1, in1, NULL, out) != WEFT_OK && wt_error_has("lstm_seq"));
    // the backward op: (w_hh, hs, acts, cs, dhs) of matching shapes
    weft_tensor *h = rand3(2, 3, 2, 1, 57, false), *hbad = rand3(2, 4, 2, 1, 58, false);
    weft_tensor *bin[5] = {w, h, x, h, h};
    CHECK(weft_op_apply(bw, 5, bin, NULL, out) == WEFT_OK);
    weft_tensor_free(out[0]);
    weft_tensor_free(out[1]);
    bin[4] = hbad;
    CHECK(weft_op_apply(bw, 5, bin, NULL, out) != WEFT_OK && wt_error_has("lstm_seq_backward") && wt_error_has("dhs"));
    bin[4] = h;
    bin[0] = w3;
    CHECK(weft_op_apply(bw, 5, bin, NULL, out) != WEFT_OK && wt_error_has("w_hh"));
    CHECK(weft_op_apply(bw, 4, bin, NULL, out) != WEFT_OK && wt_error_has("lstm_seq_backward"));
    weft_tensor *ts[] = {x, w, w3, x7, x2, w32, xi, wsq, h, hbad};
    for (int i = 0; i < 10; i++) weft_tensor_free(ts[i]);
}

// A gradient reaching the internal outputs (gates, cells) is an error, not a
// silent zero; under create_graph the gradient is recorded through
// lstm_seq_backward, which has no backward rule of its own.
static void test_internal_and_second_order(void) {
    weft_tensor *x = rand3(2, 3, 8, 1, 61, true), *w = randw(2, 62, true);
    weft_tensor *in[2] = {x, w}, *out[WEFT_MAX_OP_OUT];
    CHECK(weft_op_apply(weft_op_find("lstm_seq"), 2, in, NULL, out) == WEFT_OK);
    weft_tensor *s = weft_sum(out[2], 0, NULL, false);
    CHECK(weft_backward(s, NULL, NULL) != WEFT_OK && wt_error_has("internal"));
    weft_tensor_free(s);
    for (int j = 0; j < 3; j++) weft_tensor_free(out[j]);
    weft_tensor_zero_grad(x);
    weft_tensor_zero_grad(w);

    weft_tensor *hs = weft_lstm_seq(x, w), *l = weft_sum(hs, 0, NULL, false);
    weft_backward_opts o = {.create_graph = true};
    CHECK(weft_backward(l, NULL, &o) == WEFT_OK);
    weft_tensor *gx = weft_tensor_grad(x);
    CHECK(gx && weft_tensor_requires_grad(gx));
    weft_tensor *g2 = gx ? weft_sum(gx, 0, NULL, false) : NULL;
    weft_clear_error();
    CHECK(g2 && weft_backward(g2, NULL, NULL) != WEFT_OK && wt_error_has("lstm_seq_backward"));
    weft_tensor_free(g2);
    weft_tensor_zero_grad(x);
    weft_tensor_zero_grad(w);
    weft_tensor *ts[] = {x, w, hs, l};
    for (int i = 0; i < 4; i++) weft_tensor_free(ts[i]);
}

// On the accelerator (mock: the CPU kernels through device memory, bit for bit).
static void test_accelerator(void) {
    weft_device dev;
    bool mock = false;
    CHECK(wt_accelerator(&dev, &mock));
    const int64_t shapes[2][3] = {{3, 5, 4}, {1, 1, 2}};
    for (int s = 0; s < 2; s++) {
        int64_t B = shapes[s][0], T = shapes[s][1], H = shapes[s][2];
        weft_tensor *x = rand3(B, T, 4 * H, 2, 71, true), *w = randw(H, 72, true), *m = rand3(B, T, H, 1, 73, false);
        weft_tensor *xd0 = weft_tensor_to(x, dev), *wd0 = weft_tensor_to(w, dev), *md = weft_tensor_to(m, dev);
        weft_tensor *xd = weft_tensor_detach(xd0), *wd = weft_tensor_detach(wd0);
        weft_tensor_set_requires_grad(xd, true);
        weft_tensor_set_requires_grad(wd, true);
        weft_tensor *h[2] = {weft_lstm_seq(x, w), weft_lstm_seq(xd, wd)};
        CHECK(h[1] && weft_device_equal(weft_tensor_device(h[1]), dev));
        double tol = mock ? 0 : 1e-12;
        weft_tensor *hb = weft_tensor_to(h[1], WEFT_DEVICE_CPU);
        wt_check_same("lstm_seq hs on the accelerator", hb, h[0], tol);
        for (int k = 0; k < 2; k++) {
            weft_tensor *hm = weft_mul(h[k], k ? md : m), *l = weft_sum(hm, 0, NULL, false);
            CHECK(weft_backward(l, NULL, NULL) == WEFT_OK);
            weft_tensor_free(hm);
            weft_tensor_free(l);
        }
        weft_tensor *dx = weft_tensor_to(weft_tensor_grad(xd), WEFT_DEVICE_CPU);
        wt_check_same("lstm_seq dxg on the accelerator", dx, weft_tensor_grad(x), tol);
        weft_tensor *dw = NULL;
        if (T > 1) {
            dw = weft_tensor_to(weft_tensor_grad(wd), WEFT_DEVICE_CPU);
            wt_check_same("lstm_seq dw_hh on the accelerator", dw, weft_tensor_grad(w), tol);
        } else {
            CHECK(weft_tensor_grad(wd) == NULL && weft_tensor_grad(w) == NULL);
        }
        weft_tensor *ts[] = {x, w, m, xd0, wd0, md, xd, wd, h[0], h[1], hb, dx, dw};
        for (int i = 0; i < 13; i++) weft_tensor_free(ts[i]);
    }
}

// loss = sum(lstm_seq(xg, w) * m) traced; the graph's gradients of xg (a
// placeholder) and w (a variable) against eager backward, then the graph saved
// and loaded (the op looked up by name, its infer re-run) and run again.
static void test_graph(void) {
    int64_t B = 2, T = 4, H = 3;
    weft_tensor *xg = rand3(B, T, 4 * H, 2, 81, true), *w = randw(H, 82, true), *m = rand3(B, T, H, 1, 83, false);
    weft_graph *g = weft_graph_new();
    CHECK(weft_graph_trace_begin(g) == WEFT_OK);
    weft_value vx = weft_graph_trace_input(g, xg, "xg"), vm = weft_graph_trace_input(g, m, "m");
    weft_value vw = weft_graph_trace_variable(g, w, "w_hh");
    weft_tensor *hs = weft_lstm_seq(xg, w), *hm = weft_mul(hs, m), *l = weft_sum(hm, 0, NULL, false);
    weft_value vl = weft_graph_trace_output(g, l);
    CHECK(weft_graph_trace_end(g) == WEFT_OK);
    CHECK(weft_backward(l, NULL, NULL) == WEFT_OK);
    weft_value grads[2], wrt[2] = {vx, vw};
    CHECK(weft_graph_gradients(g, vl, 2, wrt, grads) == WEFT_OK);
    weft_value fetch[3] = {vl, grads[0], grads[1]}, feeds[2] = {vx, vm};
    weft_tensor *fin[2] = {xg, m}, *out[3] = {0}, *out2[3] = {0};
    CHECK(weft_graph_run(g, 2, feeds, fin, 3, fetch, out, 0, NULL) == WEFT_OK);
    wt_check_same("lstm_seq graph loss", out[0], l, 1e-12);
    wt_check_same("lstm_seq graph dxg", out[1], weft_tensor_grad(xg), 1e-12);
    wt_check_same("lstm_seq graph dw_hh", out[2], weft_tensor_grad(w), 1e-12);
    char dir[64] = "/tmp/weft_lstm_seq_XXXXXX", path[128];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/lstm.wgraph", dir);
    CHECK(weft_graph_save(g, path) == WEFT_OK);
    weft_graph *g2 = weft_graph_load(path);
    CHECK(g2 != NULL);
    if (g2) {
        CHECK(weft_graph_run(g2, 2, feeds, fin, 3, fetch, out2, 0, NULL) == WEFT_OK);
        for (int i = 0; i < 3; i++) wt_check_same("lstm_seq loaded graph", out2[i], out[i], 0);
    }
    unlink(path);
    rmdir(dir);
    weft_graph_free(g);
    weft_graph_free(g2);
    for (int i = 0; i < 3; i++) {
        weft_tensor_free(out[i]);
        weft_tensor_free(out2[i]);
    }
    weft_tensor_zero_grad(xg);
    weft_tensor_zero_grad(w);
    weft_tensor *ts[] = {xg, w, m, hs, hm, l};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
}

int main(void) {
    RUN(test_values);
    RUN(test_strided);
    RUN(test_gradcheck);
    RUN(test_vs_composed);
    RUN(test_errors);
    RUN(test_internal_and_second_order);
    RUN(test_accelerator);
    RUN(test_graph);
    return wt_summary();
}
