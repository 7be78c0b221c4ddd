// The nn and normalisation ops on CUDA against the CPU: softmax and
// log_softmax (rows of 1 to 5000, other dims, strided inputs, bf16 / f16 x) with their
// backward, cross-entropy (+ backward, i32/i64 targets, bf16 / f16 logits,
// an out-of-range target), dropout (the same mask as the CPU, bit for bit), layer_norm
// with and without weight/bias (bf16 / f16 inputs and outputs too), batch_norm in training (outputs,
// gradients, running statistics) and eval mode.
#include <stdint.h>

#include "cuda_test.h"

static const weft_dtype float_dts[2] = {WEFT_F32, WEFT_F64};
static double tol_of(weft_dtype dt) { return dt == WEFT_F32 ? 1e-5 : dt == WEFT_F64 ? 1e-12 : 1e-2; }

static weft_tensor *rand_dt(int ndim, const int64_t *sizes, weft_dtype dt, double lo, double hi, uint64_t seed) {
    weft_tensor *r = wt_rand64(ndim, sizes, lo, hi, seed, false);
    if (dt == WEFT_F64) return r;
    weft_tensor *c = weft_cast(r, dt);
    weft_tensor_free(r);
    return c;
}

// ---------------------------------------------------------------- softmax
typedef struct sm_case {
    bool lg;
    int dim;
    bool transposed; // softmax of transpose(x, 0, -1)
} sm_case;

static weft_tensor *sm_fn(weft_tensor *const *in, void *ctx) {
    const sm_case *c = ctx;
    weft_tensor *x = in[0], *v = NULL;
    if (c->transposed) x = v = weft_transpose(x, 0, -1);
    weft_tensor *r = c->lg ? weft_log_softmax(x, c->dim) : weft_softmax(x, c->dim);
    weft_tensor_free(v);
    return r;
}

static void sm_both(const char *shape, weft_tensor *x, int dim, bool transposed) {
    for (int lg = 0; lg < 2; lg++) {
        sm_case c = {lg != 0, dim, transposed};
        char what[120];
        snprintf(what, sizeof what, "%s %s dim %d%s %s", lg ? "log_softmax" : "softmax", shape, dim,
                 transposed ? " transposed" : "", weft_dtype_name(weft_tensor_dtype(x)));
        weft_tensor *in[1] = {x};
        wt_cuda_compare(what, sm_fn, &c, 1, in, tol_of(weft_tensor_dtype(x)), true);
    }
}

static void test_softmax(void) {
    const int64_t lens[] = {1, 10, 1024, 5000};
    const weft_dtype dts[4] = {WEFT_F32, WEFT_F64, WEFT_BF16, WEFT_F16}; // bf16 / f16 x read as it is, y f32
    for (int f = 0; f < 4; f++) {
        weft_dtype dt = dts[f];
        for (int l = 0; l < 4; l++) { // rows (last dim): a warp per row up to 1024, a block above
            char shape[64];
            snprintf(shape, sizeof shape, "(7,%lld)", (long long)lens[l]);
            weft_tensor *x = rand_dt(WEFT_DIMS(7, lens[l]), dt, -4, 4, 1 + l);
            sm_both(shape, x, -1, false);
            sm_both(shape, x, 0, false); // over the rows: the strided column kernel
            weft_tensor_free(x);
        }
        weft_tensor *y = rand_dt(WEFT_DIMS(4, 7, 33), dt, -4, 4, 9);
        for (int d = 0; d < 3; d++) {
            sm_both("(4,7,33)", y, d, false);
            sm_both("(4,7,33)", y, d, true); // (33,7,4) view: copied to contiguous first
        }
        weft_tensor_free(y);
        weft_tensor *big = rand_dt(WEFT_DIMS(3000, 40), dt, -10, 10, 11); // many short rows
        sm_both("(3000,40)", big, 1, false);
        weft_tensor_free(big);
        weft_tensor *s = rand_dt(0, NULL, dt, -1, 1, 12); // 0-d
        sm_both("()", s, 0, false);
        weft_tensor_free(s);
    }
}

// ---------------------------------------------------------------- cross-entropy
typedef struct ce_case {
    weft_tensor *targets[2]; // CPU, CUDA
    bool transposed;         // logits given as the transpose of a (C,N) tensor
    bool strided_targets;    // targets: every other element of a (2N) tensor
} ce_case;

static weft_tensor *ce_fn(weft_tensor *const *in, void *ctx) {
    ce_case *c = ctx;
    bool cuda = weft_tensor_device(in[0]).type == WEFT_CUDA;
    weft_tensor *x = in[0], *v = NULL, *t = c->targets[cuda], *tv = NULL;
    if (c->transposed) x = v = weft_transpose(x, 0, 1);
    if (c->strided_targets) t = tv = weft_slice(t, 0, 0, weft_tensor_sizes(t)[0], 2);
    weft_tensor *r = weft_cross_entropy(x, t);
    weft_tensor_free(v);
    weft_tensor_free(tv);
    return r;
}

static void ce_run(const char *what, weft_tensor *logits, weft_tensor *targets, bool transposed, bool strided) {
    ce_case c = {{targets, weft_tensor_to(targets, WT_CUDA0)}, transposed, strided};
    CHECK(c.targets[1] != NULL);
    weft_tensor *in[1] = {logits};
    wt_cuda_compare(what, ce_fn, &c, 1, in, tol_of(weft_tensor_dtype(logits)), true);
    weft_tensor_free(c.targets[1]);
}

static weft_tensor *targets_of(int64_t n, int64_t C, weft_dtype dt, uint64_t seed) {
    weft_tensor *r = wt_rand64(1, &n, 0, (double)C - 0.01, seed, false);
    weft_tensor *t = weft_cast(r, dt); // truncation: 0..C-1
    weft_tensor_free(r);
    return t;
}

// f32, f64, and bf16 / f16 logits read as they are (an f32 loss, the gradient in the logits' dtype; a
// one-unit difference in its last place stays within 1e-2).
static void test_cross_entropy(void) {
    const int64_t shapes[][2] = {{5, 10}, {33, 1000}, {4, 3000}, {1, 1}, {300, 7}};
    const weft_dtype dts[4] = {WEFT_F32, WEFT_F64, WEFT_BF16, WEFT_F16};
    for (int f = 0; f < 4; f++) {
        weft_dtype dt = dts[f];
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int64_t N = shapes[s][0], C = shapes[s][1];
            for (int ti = 0; ti < 2; ti++) {
                weft_dtype tdt = ti ? WEFT_I64 : WEFT_I32;
                char what[128];
                weft_tensor *x = rand_dt(WEFT_DIMS(N, C), dt, -3, 3, 20 + s), *t = targets_of(N, C, tdt, 30 + s);
                snprintf(what, sizeof what, "cross_entropy (%lld,%lld) %s %s", (long long)N, (long long)C,
                         weft_dtype_name(dt), weft_dtype_name(tdt));
                ce_run(what, x, t, false, false);
                weft_tensor *xt = rand_dt(WEFT_DIMS(C, N), dt, -3, 3, 40 + s), *t2 = targets_of(2 * N, C, tdt, 50 + s);
                snprintf(what, sizeof what, "cross_entropy (%lld,%lld) strided %s %s", (long long)N, (long long)C,
                         weft_dtype_name(dt), weft_dtype_name(tdt));
                ce_run(what, xt, t2, true, true);
                weft_tensor_free(x);
                weft_tensor_free(t);
                weft_tensor_free(xt);
                weft_tensor_free(t2);
            }
        }
    }
    // an out-of-range target is an error on both devices, naming it
    int64_t tv[3] = {1, 9, 0};
    weft_tensor *x = rand_dt(WEFT_DIMS(3, 5), WEFT_F32, -1, 1, 60);
    weft_tensor *t = weft_tensor_from_data(tv, WEFT_DIMS(3), WEFT_I64);
    ce_run("cross_entropy bad target", x, t, false, false);
    weft_tensor *dx = weft_tensor_to(x, WT_CUDA0), *dt = weft_tensor_to(t, WT_CUDA0);
    // the CUDA op returns at once (its kernel reports the target without a wait); reading the loss fails
    weft_clear_error();
    weft_tensor *r = weft_cross_entropy(dx, dt);
    if (r) CHECK(isnan(weft_tensor_item(r))); // the bad row's loss is NaN, and the read reports the target
    CHECK(weft_last_status() != WEFT_OK && wt_error_has("cross_entropy") && wt_error_has("found on cuda:0") &&
          wt_error_has("target 9 of row 1 is out of range"));
    weft_tensor_free(r);
    CHECK(weft_device_synchronize(WT_CUDA0) == WEFT_OK); // the report is taken once
    weft_tensor_free(x);
    weft_tensor_free(t);
    weft_tensor_free(dx);
    weft_tensor_free(dt);
}

// ---------------------------------------------------------------- dropout
typedef struct dropout_case {
    double p;
    uint64_t seed, offset;
    bool transposed;
} dropout_case;

// A fresh generator at (seed, offset) for each call: both devices draw the same counters.
// bce_with_logits and leaky_relu are composed of ops (stack, logsumexp, maximum, ...): CUDA runs those.
static weft_tensor *bce_fn(weft_tensor *const *in, void *ctx) { return (void)ctx, weft_bce_with_logits(in[0], in[1]); }
static weft_tensor *leaky_fn(weft_tensor *const *in, void *ctx) { return weft_leaky_relu(in[0], *(double *)ctx); }
static void test_composed(void) {
    for (int k = 0; k < 2; k++) {
        weft_dtype dt = float_dts[k];
        weft_tensor *in[2] = {rand_dt(WEFT_DIMS(5, 7), dt, -6, 6, 91), rand_dt(WEFT_DIMS(5, 7), dt, 0, 1, 92)};
        wt_cuda_compare(dt == WEFT_F32 ? "bce_with_logits f32" : "bce_with_logits f64", bce_fn, NULL, 2, in, tol_of(dt), true);
        double slope = 0.2;
        wt_cuda_compare(dt == WEFT_F32 ? "leaky_relu f32" : "leaky_relu f64", leaky_fn, &slope, 1, in, tol_of(dt), true);
        weft_tensor_free(in[0]), weft_tensor_free(in[1]);
    }
}

static weft_tensor *dropout_fn(weft_tensor *const *in, void *ctx) {
    const dropout_case *c = ctx;
    weft_generator *g = weft_generator_create(c->seed);
    weft_generator_set_state(g, c->seed, c->offset);
    weft_tensor *x = in[0], *v = NULL;
    if (c->transposed) x = v = weft_transpose(x, 0, -1);
    weft_tensor *r = weft_dropout(x, c->p, true, g);
    weft_tensor_free(v);
    weft_generator_free(g);
    return r;
}

static void test_dropout(void) {
    const double ps[2] = {0.1, 0.5};
    for (int f = 0; f < 2; f++) {
        for (int k = 0; k < 2; k++) {
            weft_tensor *a = rand_dt(WEFT_DIMS(1000), float_dts[f], -2, 2, 70);
            weft_tensor *b = rand_dt(WEFT_DIMS(33, 65), float_dts[f], -2, 2, 71);
            weft_tensor *c = rand_dt(WEFT_DIMS(3, 100000), float_dts[f], -2, 2, 72); // a grid-stride loop
            dropout_case d = {ps[k], 1234 + (uint64_t)k, 0, false};
            char what[96];
            snprintf(what, sizeof what, "dropout p=%g %s", ps[k], weft_dtype_name(float_dts[f]));
            wt_cuda_compare(what, dropout_fn, &d, 1, &a, 0, true);
            d.offset = 987654321; // a counter offset, as after earlier draws
            wt_cuda_compare(what, dropout_fn, &d, 1, &b, 0, true);
            d.transposed = true; // a strided input: the mask follows the logical order
            wt_cuda_compare(what, dropout_fn, &d, 1, &b, 0, true);
            d.transposed = false;
            d.seed = 0xfedcba9876543210ull;
            wt_cuda_compare(what, dropout_fn, &d, 1, &c, 0, true);
            weft_tensor_free(a);
            weft_tensor_free(b);
            weft_tensor_free(c);
        }
    }
}

// ---------------------------------------------------------------- layer_norm
typedef struct ln_case {
    int n_norm;
    bool w, b, transposed;
    weft_dtype y; // weft_layer_norm_to's y dtype (WEFT_F32 / 0: the plain op)
} ln_case;

// in: x, [weight], [bias]
static weft_tensor *ln_fn(weft_tensor *const *in, void *ctx) {
    const ln_case *c = ctx;
    int k = 1;
    weft_tensor *x = in[0], *v = NULL;
    weft_tensor *w = c->w ? in[k++] : NULL, *b = c->b ? in[k++] : NULL;
    if (c->transposed) x = v = weft_transpose(x, 0, -1);
    weft_tensor *r = weft_layer_norm_to(x, c->n_norm, w, b, 1e-5, c->y);
    weft_tensor_free(v);
    return r;
}

// f32, f64, and a bf16 / f16 x with f32 weight and bias (read as it is: y f32, x's gradient in its dtype; a
// one-unit difference in its last place stays within 1e-2).
static void test_layer_norm(void) {
    struct { int nd; int64_t s[3]; int n_norm; bool transposed; } shapes[] = {
        {2, {4, 10}, 1, false}, {3, {3, 5, 1000}, 1, false}, {2, {2, 4097}, 1, false},
        {3, {2, 3, 7}, 2, false}, {2, {300, 33}, 1, false}, {2, {10, 6}, 1, true},
    };
    const weft_dtype xdts[4] = {WEFT_F32, WEFT_F64, WEFT_BF16, WEFT_F16};
    for (int f = 0; f < 4; f++) {
        weft_dtype xdt = xdts[f], dt = f < 2 ? xdt : WEFT_F32; // x's, the parameters'
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            weft_tensor *x = rand_dt(shapes[s].nd, shapes[s].s, xdt, -2, 2, 80 + s);
            // the normalised dims (of the transposed view when transposed)
            int64_t ws[3];
            int nn = shapes[s].n_norm;
            for (int d = 0; d < nn; d++) ws[d] = shapes[s].s[shapes[s].nd - nn + d];
            if (shapes[s].transposed) ws[0] = shapes[s].s[0];
            weft_tensor *w = rand_dt(nn, ws, dt, 0.5, 1.5, 90 + s), *b = rand_dt(nn, ws, dt, -1, 1, 100 + s);
            for (int mode = 0; mode < 4; mode++) {
                ln_case c = {nn, (mode & 1) != 0, (mode & 2) != 0, shapes[s].transposed, WEFT_F32};
                weft_tensor *in[3];
                int n = 0;
                in[n++] = x;
                if (c.w) in[n++] = w;
                if (c.b) in[n++] = b;
                char what[128];
                snprintf(what, sizeof what, "layer_norm case %zu weight %d bias %d %s", s, c.w, c.b,
                         weft_dtype_name(xdt));
                wt_cuda_compare(what, ln_fn, &c, n, in, f >= 2 ? 1e-2 : dt == WEFT_F32 ? 2e-5 : 1e-12, true);
            }
            weft_tensor_free(x);
            weft_tensor_free(w);
            weft_tensor_free(b);
        }
    }
    // y written in bf16 / f16 (weft_layer_norm_to) from an f32 or half x: its gradient, from the comparison's
    // upstream in y's dtype, is read as it is; a warp per row (C = 768) and a block per row (C = 2000)
    const int64_t ys[2][2] = {{64, 768}, {5, 2000}};
    const weft_dtype half[2] = {WEFT_BF16, WEFT_F16};
    for (int xi = 0; xi < 3; xi++)
        for (int yi = 0; yi < 2; yi++)
            for (int s = 0; s < 2; s++) {
                weft_dtype xdt = xi == 0 ? WEFT_F32 : half[xi - 1];
                int64_t C = ys[s][1];
                weft_tensor *in[3] = {rand_dt(2, ys[s], xdt, -2, 2, 140 + s), rand_dt(1, &C, WEFT_F32, 0.5, 1.5, 142),
                                      rand_dt(1, &C, WEFT_F32, -1, 1, 143)};
                ln_case c = {1, true, true, false, half[yi]};
                char what[128];
                snprintf(what, sizeof what, "layer_norm (%lld,%lld) %s -> %s", (long long)ys[s][0], (long long)C,
                         weft_dtype_name(xdt), weft_dtype_name(half[yi]));
                wt_cuda_compare(what, ln_fn, &c, 3, in, 2e-2, true);
                for (int i = 0; i < 3; i++) weft_tensor_free(in[i]);
            }
}

// add_layer_norm: s = x + r and y = layer_norm(s), returned as s + y*y so both outputs carry gradient;
// f32 and f64, and an f32 input with a bf16 residual (the residual's gradient in bf16); one row per
// warp (C = 768) and per block (C = 2000).
// ctx: y's dtype (NULL: the plain op), as weft_add_layer_norm_to takes it.
static weft_tensor *aln_fn(weft_tensor *const *in, void *ctx) {
    weft_tensor *s, *y;
    if (weft_add_layer_norm_to(in[0], in[1], 1, in[2], in[3], 1e-5, ctx ? *(weft_dtype *)ctx : WEFT_F32, &s, &y))
        return NULL;
    weft_tensor *q = weft_mul(y, y), *r = weft_add(s, q);
    weft_tensor_free(s), weft_tensor_free(y), weft_tensor_free(q);
    return r;
}

static void test_add_layer_norm(void) {
    const int64_t shapes[2][2] = {{64, 768}, {5, 2000}};
    for (int k = 0; k < 5; k++) // f32, f64, a bf16 residual, and that with y in bf16 / f16
        for (int s = 0; s < 2; s++) {
            weft_dtype dt = k == 1 ? WEFT_F64 : WEFT_F32, rdt = k >= 2 ? WEFT_BF16 : dt;
            weft_dtype ydt = k == 3 ? WEFT_BF16 : k == 4 ? WEFT_F16 : dt;
            int64_t C = shapes[s][1];
            weft_tensor *in[4] = {rand_dt(2, shapes[s], dt, -2, 2, 500 + s), rand_dt(2, shapes[s], rdt, -1, 1, 510 + s),
                                  rand_dt(1, &C, dt, 0.5, 1.5, 520 + s), rand_dt(1, &C, dt, -1, 1, 530 + s)};
            char what[96];
            snprintf(what, sizeof what, "add_layer_norm (%lld,%lld) %s + %s -> %s", (long long)shapes[s][0],
                     (long long)C, weft_dtype_name(dt), weft_dtype_name(rdt), weft_dtype_name(ydt));
            wt_cuda_compare(what, aln_fn, &ydt, 4, in, dt == WEFT_F32 ? (k >= 2 ? 2e-2 : 2e-5) : 1e-12, true);
            for (int i = 0; i < 4; i++) weft_tensor_free(in[i]);
        }
}

// ---------------------------------------------------------------- batch_norm
typedef struct bn_case {
    bool w, b, stats, training;
    weft_tensor *rm0, *rv0;    // initial running stats (CPU)
    weft_tensor *rm[2], *rv[2]; // after the call: CPU, CUDA
} bn_case;

// in: x, [weight], [bias]; the running stats are fresh copies of rm0/rv0 on x's device.
static weft_tensor *bn_fn(weft_tensor *const *in, void *ctx) {
    bn_case *c = ctx;
    weft_device dev = weft_tensor_device(in[0]);
    int on = dev.type == WEFT_CUDA, k = 1;
    weft_tensor *w = c->w ? in[k++] : NULL, *b = c->b ? in[k++] : NULL, *rm = NULL, *rv = NULL;
    if (c->stats) {
        weft_tensor *m = weft_tensor_to(c->rm0, dev), *v = weft_tensor_to(c->rv0, dev);
        rm = weft_tensor_clone(m);
        rv = weft_tensor_clone(v);
        weft_tensor_free(m);
        weft_tensor_free(v);
    }
    weft_tensor *r = weft_batch_norm(in[0], rm, rv, w, b, c->training, 0.1, 1e-5);
    c->rm[on] = rm;
    c->rv[on] = rv;
    return r;
}

static void test_batch_norm(void) {
    struct { int nd; int64_t s[4]; } shapes[] = {
        {4, {4, 3, 5, 5}}, {2, {8, 16}}, {3, {2, 4, 1100}}, {4, {2, 5, 33, 33}},
    };
    for (int f = 0; f < 2; f++) {
        weft_dtype dt = float_dts[f];
        double tol = dt == WEFT_F32 ? 2e-5 : 1e-12;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int64_t C = shapes[s].s[1];
            weft_tensor *x = rand_dt(shapes[s].nd, shapes[s].s, dt, -2, 3, 110 + s);
            weft_tensor *w = rand_dt(1, &C, dt, 0.5, 1.5, 120 + s), *b = rand_dt(1, &C, dt, -1, 1, 130 + s);
            weft_tensor *rm0 = rand_dt(1, &C, dt, -0.5, 0.5, 140 + s), *rv0 = rand_dt(1, &C, dt, 0.5, 2, 150 + s);
            for (int mode = 0; mode < 8; mode++) {
                bn_case c = {.w = (mode & 1) != 0, .b = (mode & 2) != 0, .stats = (mode & 4) != 0, .training = true,
                             .rm0 = rm0, .rv0 = rv0};
                for (int tr = 1; tr >= 0; tr--) {
                    if (!tr && !c.stats) continue; // eval needs the running stats
                    c.training = tr != 0;
                    weft_tensor *in[3];
                    int n = 0;
                    in[n++] = x;
                    if (c.w) in[n++] = w;
                    if (c.b) in[n++] = b;
                    char what[128];
                    snprintf(what, sizeof what, "batch_norm case %zu weight %d bias %d stats %d training %d %s", s,
                             c.w, c.b, c.stats, tr, weft_dtype_name(dt));
                    wt_cuda_compare(what, bn_fn, &c, n, in, tol, true);
                    if (c.stats) { // updated in place in training, untouched in eval
                        char w2[160];
                        snprintf(w2, sizeof w2, "%s: running_mean", what);
                        wt_check_same(w2, c.rm[1], c.rm[0], tol);
                        snprintf(w2, sizeof w2, "%s: running_var", what);
                        wt_check_same(w2, c.rv[1], c.rv[0], tol);
                        if (!tr) wt_check_same("eval leaves running_var", c.rv[1], rv0, 0);
                    }
                    for (int k = 0; k < 2; k++) {
                        weft_tensor_free(c.rm[k]);
                        weft_tensor_free(c.rv[k]);
                        c.rm[k] = c.rv[k] = NULL;
                    }
                }
            }
            weft_tensor *objs[] = {x, w, b, rm0, rv0};
            for (int k = 0; k < 5; k++) weft_tensor_free(objs[k]);
        }
    }
}

int main(void) {
    WT_CUDA_OR_SKIP();
    RUN(test_softmax);
    RUN(test_cross_entropy);
    RUN(test_composed);
    RUN(test_dropout);
    RUN(test_layer_norm);
    RUN(test_add_layer_norm);
    RUN(test_batch_norm);
    return wt_summary();
}
