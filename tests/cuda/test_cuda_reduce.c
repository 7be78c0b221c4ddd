// Reductions on CUDA against the CPU: sum mean max min var logsumexp argmax
// over each single axis, several axes and all axes, keepdim, strided views
// (transposed, sliced), reduced lengths 1, 7, 1000, 4097 (a thread, a warp
// and a block per output) and many strided outputs (a column sum); f32/f64
// with gradients, bf16/f16, i32/i64 forward; ties (argmax takes the first index, max's
// gradient is split among them) and NaN/inf.
#include <stdint.h>

#include "cuda_test.h"

enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_VAR, R_LSE, R_ARGMAX, R_NOPS };
static const char *op_names[R_NOPS] = {"sum", "mean", "max", "min", "var", "logsumexp", "argmax"};

typedef struct red_case {
    int op;
    int n;       // axes (0: all)
    int axes[4];
    bool keep;
    int64_t corr;
    int view;    // 0: as is, 1: transpose(0, -1), 2: every other element of the last dim
} red_case;

static weft_tensor *red_fn(weft_tensor *const *in, void *ctx) {
    const red_case *c = ctx;
    weft_tensor *x = in[0], *v = NULL;
    if (c->view == 1) x = v = weft_transpose(x, 0, -1);
    else if (c->view == 2) x = v = weft_slice(x, -1, 0, weft_tensor_sizes(x)[weft_tensor_ndim(x) - 1], 2);
    weft_tensor *r = NULL;
    switch (c->op) {
    case R_SUM: r = weft_sum(x, c->n, c->axes, c->keep); break;
    case R_MEAN: r = weft_mean(x, c->n, c->axes, c->keep); break;
    case R_MAX: r = weft_max(x, c->n, c->axes, c->keep); break;
    case R_MIN: r = weft_min(x, c->n, c->axes, c->keep); break;
    case R_VAR: r = weft_var(x, c->n, c->axes, c->corr, c->keep); break;
    case R_LSE: r = weft_logsumexp(x, c->n, c->axes, c->keep); break;
    default: r = weft_argmax(x, c->axes[0], c->keep); break;
    }
    weft_tensor_free(v);
    return r;
}

static bool float_only(int op) { return op == R_MEAN || op == R_VAR || op == R_LSE; }

// Every op on x (dtype dt) with the axes of c (argmax: its first axis only, when n == 1).
static void all_ops(const char *shape, weft_tensor *x, red_case c) {
    weft_dtype dt = weft_tensor_dtype(x);
    bool fl = weft_dtype_is_float(dt);
    // bf16 / f16: both devices sum in double and round once through f32 (one ulp apart at most: 1e-2)
    double tol = dt == WEFT_F32 ? 1e-5 : dt == WEFT_F64 ? 1e-12 : weft_dtype_is_float(dt) ? 1e-2 : 0;
    for (int op = 0; op < R_NOPS; op++) {
        if (!fl && float_only(op)) continue;
        if (op == R_ARGMAX && c.n != 1) continue;
        for (int corr = 0; corr < (op == R_VAR ? 2 : 1); corr++) {
            red_case k = c;
            k.op = op;
            k.corr = corr;
            char what[120];
            snprintf(what, sizeof what, "%s %s %s axes(%d:%d,%d) keep %d corr %d view %d", op_names[op], shape,
                     weft_dtype_name(dt), c.n, c.axes[0], c.n > 1 ? c.axes[1] : -1, c.keep, corr, c.view);
            weft_tensor *in[1] = {x};
            wt_cuda_compare(what, red_fn, &k, 1, in, tol, fl && op != R_ARGMAX);
        }
    }
}

static weft_tensor *rand_dt(int ndim, const int64_t *sizes, weft_dtype dt, double lo, double hi, uint64_t seed) {
    weft_tensor *r = wt_rand64(ndim, sizes, lo, hi, seed, false);
    if (dt == WEFT_F64) return r;
    weft_tensor *c = weft_cast(r, dt); // ints: truncated toward zero
    weft_tensor_free(r);
    return c;
}

static const weft_dtype float_dts[2] = {WEFT_F32, WEFT_F64};

// A (4,5,6) tensor: each single axis, pairs of axes, all axes; keepdim both ways; views.
static void test_axes(void) {
    for (int f = 0; f < 2; f++) {
        weft_tensor *x = rand_dt(WEFT_DIMS(4, 5, 6), float_dts[f], -2, 2, 1 + f);
        for (int keep = 0; keep < 2; keep++) {
            for (int ax = -3; ax < 3; ax++) all_ops("(4,5,6)", x, (red_case){.n = 1, .axes = {ax}, .keep = keep});
            all_ops("(4,5,6)", x, (red_case){.n = 2, .axes = {0, 2}, .keep = keep});
            all_ops("(4,5,6)", x, (red_case){.n = 2, .axes = {1, 2}, .keep = keep});
            all_ops("(4,5,6)", x, (red_case){.n = 2, .axes = {0, 1}, .keep = keep});
            all_ops("(4,5,6)", x, (red_case){.n = 0, .keep = keep});
            // strided inputs: transposed (6,5,4) and sliced (4,5,3)
            for (int view = 1; view <= 2; view++) {
                for (int ax = 0; ax < 3; ax++)
                    all_ops("(4,5,6) view", x, (red_case){.n = 1, .axes = {ax}, .keep = keep, .view = view});
                all_ops("(4,5,6) view", x, (red_case){.n = 2, .axes = {0, 2}, .keep = keep, .view = view});
                all_ops("(4,5,6) view", x, (red_case){.n = 0, .keep = keep, .view = view});
            }
        }
        weft_tensor_free(x);
    }
}

// bf16 / f16 inputs (the kernels read them through float): every op over each axis, all axes, column sums.
static void test_half(void) {
    const weft_dtype dts[2] = {WEFT_BF16, WEFT_F16};
    for (int f = 0; f < 2; f++) {
        weft_tensor *x = rand_dt(WEFT_DIMS(4, 5, 6), dts[f], -2, 2, 40 + f);
        for (int ax = 0; ax < 3; ax++) all_ops("(4,5,6)", x, (red_case){.n = 1, .axes = {ax}});
        all_ops("(4,5,6)", x, (red_case){.n = 0});
        weft_tensor *y = rand_dt(WEFT_DIMS(3000, 24), dts[f], -2, 2, 42 + f);
        all_ops("(3000,24)", y, (red_case){.n = 1, .axes = {0}});
        // a bias gradient: (B,T,N) summed over B and T (the column sums, 2800 rows in 11 chunks of 256)
        weft_tensor *z = rand_dt(WEFT_DIMS(4, 700, 96), dts[f], -2, 2, 44 + f);
        all_ops("(4,700,96)", z, (red_case){.n = 2, .axes = {0, 1}});
        weft_tensor_free(x);
        weft_tensor_free(y);
        weft_tensor_free(z);
    }
}

// Reduced lengths 1, 7, 1000, 4097 along a contiguous and a strided axis.
static void test_lengths(void) {
    const int64_t lens[] = {1, 7, 1000, 4097};
    for (int f = 0; f < 2; f++) {
        for (int l = 0; l < 4; l++) {
            int64_t L = lens[l];
            char shape[64];
            weft_tensor *a = rand_dt(WEFT_DIMS(3, L), float_dts[f], -1, 1, 10 + l); // last axis: contiguous
            snprintf(shape, sizeof shape, "(3,%lld)", (long long)L);
            all_ops(shape, a, (red_case){.n = 1, .axes = {1}});
            all_ops(shape, a, (red_case){.n = 1, .axes = {0}});
            all_ops(shape, a, (red_case){.n = 0});
            weft_tensor *b = rand_dt(WEFT_DIMS(2, L, 5), float_dts[f], -1, 1, 20 + l); // middle axis: strided
            snprintf(shape, sizeof shape, "(2,%lld,5)", (long long)L);
            all_ops(shape, b, (red_case){.n = 1, .axes = {1}, .keep = true});
            all_ops(shape, b, (red_case){.n = 2, .axes = {0, 1}});
            all_ops(shape, b, (red_case){.n = 1, .axes = {1}, .view = 1}); // (5,L,2) view
            weft_tensor_free(a);
            weft_tensor_free(b);
        }
        // many outputs over a strided axis: a thread per output (the column-sum case)
        weft_tensor *c = rand_dt(WEFT_DIMS(40, 9000), float_dts[f], -1, 1, 30);
        all_ops("(40,9000)", c, (red_case){.n = 1, .axes = {0}});
        all_ops("(40,9000)", c, (red_case){.n = 1, .axes = {0}, .view = 1});
        weft_tensor_free(c);
        // leading dims of a contiguous tensor (the column sums): more rows than one chunk of 256, columns past
        // a multiple of 32
        weft_tensor *d = rand_dt(WEFT_DIMS(4, 700, 97), float_dts[f], -1, 1, 31);
        all_ops("(4,700,97)", d, (red_case){.n = 2, .axes = {0, 1}});
        all_ops("(4,700,97)", d, (red_case){.n = 1, .axes = {0}, .keep = true});
        weft_tensor_free(d);
    }
}

// i32/i64: sum (wrapping included), max, min, argmax; many ties (values in -3..3).
static void test_ints(void) {
    const weft_dtype dts[2] = {WEFT_I32, WEFT_I64};
    for (int d = 0; d < 2; d++) {
        weft_tensor *x = rand_dt(WEFT_DIMS(4, 5, 6), dts[d], -3.99, 3.99, 40 + d);
        for (int ax = 0; ax < 3; ax++) {
            all_ops("(4,5,6) int", x, (red_case){.n = 1, .axes = {ax}});
            all_ops("(4,5,6) int", x, (red_case){.n = 1, .axes = {ax}, .keep = true, .view = 1});
        }
        all_ops("(4,5,6) int", x, (red_case){.n = 0});
        weft_tensor *y = rand_dt(WEFT_DIMS(3, 4097), dts[d], -1000, 1000, 50 + d);
        all_ops("(3,4097) int", y, (red_case){.n = 1, .axes = {1}});
        all_ops("(3,4097) int", y, (red_case){.n = 1, .axes = {0}});
        weft_tensor_free(x);
        weft_tensor_free(y);
    }
    // i32 sums that overflow wrap like the dtype on both devices
    weft_tensor *big = weft_tensor_full(WEFT_DIMS(3, 1000), WEFT_I32, 2000000000.0);
    red_case c = {.op = R_SUM, .n = 1, .axes = {1}};
    weft_tensor *in[1] = {big};
    wt_cuda_compare("i32 sum wraps", red_fn, &c, 1, in, 0, false);
    weft_tensor_free(big);
}

// Float ties: argmax takes the first index, max/min split the gradient among ties.
static void test_ties(void) {
    for (int f = 0; f < 2; f++) {
        weft_tensor *i = rand_dt(WEFT_DIMS(6, 1000), WEFT_I32, -2.99, 2.99, 60);
        weft_tensor *x = weft_cast(i, float_dts[f]);
        for (int ax = 0; ax < 2; ax++) {
            all_ops("ties (6,1000)", x, (red_case){.n = 1, .axes = {ax}});
            all_ops("ties (6,1000)", x, (red_case){.n = 1, .axes = {ax}, .view = 1});
        }
        weft_tensor_free(i);
        weft_tensor_free(x);
    }
}

// Tensors that may hold NaN: equal when both are NaN at the same places.
static void check_same_nan(const char *what, weft_tensor *a, weft_tensor *b) {
    CHECK(a && b);
    if (!a || !b) return;
    int64_t n = weft_tensor_numel(a);
    CHECK(n == weft_tensor_numel(b) && weft_tensor_dtype(a) == weft_tensor_dtype(b));
    double *x = malloc(sizeof(double) * (size_t)n), *y = malloc(sizeof(double) * (size_t)n);
    CHECK(weft_tensor_to_f64(a, x, n) == WEFT_OK && weft_tensor_to_f64(b, y, n) == WEFT_OK);
    int64_t bad = 0;
    for (int64_t k = 0; k < n; k++)
        if (!(x[k] == y[k] || (isnan(x[k]) && isnan(y[k])))) {
            if (!bad) fprintf(stderr, "%s: element %lld: %.17g vs %.17g\n", what, (long long)k, x[k], y[k]);
            bad++;
        }
    CHECK(bad == 0);
    free(x);
    free(y);
}

// NaN wins max/min/argmax/logsumexp; +-inf rows; the first NaN is argmax's answer.
static void test_nan_inf(void) {
    for (int f = 0; f < 2; f++) {
        double v[5 * 40];
        wt_vals(v, 5 * 40, -1, 1, 70);
        v[0 * 40 + 3] = NAN;                            // row 0: one NaN
        v[1 * 40 + 5] = NAN, v[1 * 40 + 30] = NAN;      // row 1: two NaNs (argmax: 5)
        v[2 * 40 + 7] = INFINITY;                       // row 2: +inf
        for (int k = 0; k < 40; k++) v[3 * 40 + k] = -INFINITY; // row 3: all -inf (argmax 0, lse -inf)
        v[4 * 40 + 39] = NAN;                           // row 4: NaN last
        weft_tensor *h64 = weft_tensor_from_data(v, WEFT_DIMS(5, 40), WEFT_F64);
        weft_tensor *h = weft_cast(h64, float_dts[f]), *d = weft_tensor_to(h, WT_CUDA0);
        for (int op = 0; op < R_NOPS; op++) {
            if (op == R_SUM || op == R_MEAN || op == R_VAR) continue;
            red_case c = {.op = op, .n = 1, .axes = {1}};
            weft_tensor *in_h[1] = {h}, *in_d[1] = {d};
            weft_tensor *rh = red_fn(in_h, &c), *rd = red_fn(in_d, &c);
            char what[64];
            snprintf(what, sizeof what, "NaN/inf %s %s", op_names[op], weft_dtype_name(float_dts[f]));
            check_same_nan(what, rd, rh);
            weft_tensor_free(rh);
            weft_tensor_free(rd);
        }
        weft_tensor_free(h64);
        weft_tensor_free(h);
        weft_tensor_free(d);
    }
}

// Empty reductions: max over an empty axis is an error on both devices; sum is 0.
static void test_empty(void) {
    weft_tensor *x = weft_tensor_zeros(WEFT_DIMS(3, 0), WEFT_F32);
    red_case cmax = {.op = R_MAX, .n = 1, .axes = {1}}, csum = {.op = R_SUM, .n = 1, .axes = {1}};
    weft_tensor *in[1] = {x};
    wt_cuda_compare("max over an empty axis", red_fn, &cmax, 1, in, 0, false);
    wt_cuda_compare("sum over an empty axis", red_fn, &csum, 1, in, 0, false);
    weft_tensor *d = weft_tensor_to(x, WT_CUDA0);
    weft_tensor *r = weft_max(d, 1, (int[]){1}, false);
    CHECK(r == NULL && wt_error_has("empty"));
    weft_tensor_free(d);
    weft_tensor_free(x);
}

int main(void) {
    WT_CUDA_OR_SKIP();
    RUN(test_axes);
    RUN(test_lengths);
    RUN(test_ints);
    RUN(test_ties);
    RUN(test_nan_inf);
    RUN(test_empty);
    RUN(test_half);
    return wt_summary();
}
