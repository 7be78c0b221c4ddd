// Elementwise ops: forward against libm closed forms (f32 and f64), NumPy
// broadcasting, non-contiguous inputs, finite-difference gradients, integer
// dtypes, comparisons, where, and dtype casts (f16/bf16 bit patterns).
#include <stdlib.h>
#include <string.h>

#include "ops/elementwise.h" // weft_relu_backward, weft_gelu_backward (internal ops)
#include "weft_test.h"


// Values in +-[lo, hi): away from the kink at 0 (relu, abs).
static void vals_nz(double *v, int64_t n, double lo, double hi, uint64_t seed) {
    wt_vals(v, n, lo, hi, seed);
    for (int64_t i = 0; i < n; i++)
        if (i % 2) v[i] = -v[i];
}
static weft_tensor *tens(const double *v, weft_dtype dt, int nd, const int64_t *sz) {
    weft_tensor *d = weft_tensor_from_data(v, nd, sz, WEFT_F64);
    weft_tensor *r = weft_cast(d, dt);
    weft_tensor_free(d);
    return wt_keep(r);
}
static int64_t numel_of(int nd, const int64_t *s) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= s[d];
    return n;
}
static double rf(double x, weft_dtype dt) { return dt == WEFT_F32 ? (double)(float)x : x; }

// ---- unary ops ----
typedef weft_tensor *(*un_fn)(weft_tensor *);
typedef struct {
    const char *name;
    un_fn fn;
    double (*ref)(double);
    double lo, hi;
    bool nz;   // keep values away from 0 (kink)
    bool diff; // differentiable
} unop;

static weft_tensor *pow25(weft_tensor *t) { return weft_pow_scalar(t, 2.5); }
static weft_tensor *pow3(weft_tensor *t) { return weft_pow_scalar(t, 3.0); }
static weft_tensor *powm1(weft_tensor *t) { return weft_pow_scalar(t, -1.5); }
static weft_tensor *add175(weft_tensor *t) { return weft_add_scalar(t, 1.75); }
static weft_tensor *mulm25(weft_tensor *t) { return weft_mul_scalar(t, -2.5); }
static double r_neg(double x) { return -x; }
static double r_rsqrt(double x) { return 1.0 / sqrt(x); }
static double r_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double r_relu(double x) { return x > 0 ? x : 0; }
static double r_gelu(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }
static double r_silu(double x) { return x / (1.0 + exp(-x)); }
// GELU's tanh approximation as PyTorch writes it (F.gelu(x, approximate='tanh')), and its first two
// derivatives by hand: t = tanh(u), u = k (x + a x^3), u' = k (1 + 3 a x^2).
#define GK 0.7978845608028654
#define GA 0.044715
static double r_gelu_tanh(double x) { return 0.5 * x * (1.0 + tanh(GK * (x + GA * x * x * x))); }
static double r_gelu_tanh_d1(double x) {
    double t = tanh(GK * (x + GA * x * x * x)), up = GK * (1 + 3 * GA * x * x);
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * up;
}
static double r_gelu_tanh_d2(double x) {
    double t = tanh(GK * (x + GA * x * x * x)), up = GK * (1 + 3 * GA * x * x), upp = 6 * GK * GA * x;
    // d/dx of 0.5 (1 + t) + 0.5 x (1 - t^2) u', term by term
    return 0.5 * (1 - t * t) * up + 0.5 * (1 - t * t) * up + 0.5 * x * (-2 * t * (1 - t * t) * up * up) +
           0.5 * x * (1 - t * t) * upp;
}
// erf's first two derivatives: 2/sqrt(pi) exp(-x^2), and -2x times that.
static double r_erf_d1(double x) { return 1.1283791670955126 * exp(-x * x); }
static double r_erf_d2(double x) { return -2 * x * r_erf_d1(x); }
static double r_pow25(double x) { return pow(x, 2.5); }
static double r_pow3(double x) { return x * x * x; }
static double r_powm1(double x) { return pow(x, -1.5); }
static double r_add175(double x) { return x + 1.75; }
static double r_mulm25(double x) { return x * -2.5; }

static const unop k_unops[] = {
    {"neg", weft_neg, r_neg, -3, 3, false, true},
    {"abs", weft_abs, fabs, 0.2, 3, true, true},
    {"exp", weft_exp, exp, -3, 3, false, true},
    {"log", weft_log, log, 0.1, 5, false, true},
    {"sqrt", weft_sqrt, sqrt, 0.1, 5, false, true},
    {"rsqrt", weft_rsqrt, r_rsqrt, 0.2, 5, false, true},
    {"sin", weft_sin, sin, -4, 4, false, true},
    {"cos", weft_cos, cos, -4, 4, false, true},
    {"tanh", weft_tanh, tanh, -3, 3, false, true},
    {"sigmoid", weft_sigmoid, r_sigmoid, -6, 6, false, true},
    {"relu", weft_relu, r_relu, 0.2, 3, true, true},
    {"gelu", weft_gelu, r_gelu, -4, 4, false, true},
    {"gelu_tanh", weft_gelu_tanh, r_gelu_tanh, -5, 5, false, true},
    {"silu", weft_silu, r_silu, -5, 5, false, true},
    {"erf", weft_erf, erf, -4, 4, false, true},
    {"asin", weft_asin, asin, -0.9, 0.9, false, true},
    {"acos", weft_acos, acos, -0.9, 0.9, false, true},
    {"atan", weft_atan, atan, -4, 4, false, true},
    {"pow_scalar 2.5", pow25, r_pow25, 0.2, 3, false, true},
    {"pow_scalar 3", pow3, r_pow3, -2, 2, false, true},
    {"pow_scalar -1.5", powm1, r_powm1, 0.3, 3, false, true},
    {"add_scalar", add175, r_add175, -3, 3, false, true},
    {"mul_scalar", mulm25, r_mulm25, -3, 3, false, true},
};
#define N_UNOPS (int)(sizeof k_unops / sizeof k_unops[0])

static void make_vals(const unop *u, double *v, int64_t n, uint64_t seed) {
    if (u->nz) vals_nz(v, n, u->lo, u->hi, seed);
    else wt_vals(v, n, u->lo, u->hi, seed);
}

static void test_unary_forward(void) {
    const weft_dtype dts[2] = {WEFT_F64, WEFT_F32};
    for (int k = 0; k < N_UNOPS; k++) {
        const unop *u = &k_unops[k];
        for (int di = 0; di < 2; di++) {
            weft_dtype dt = dts[di];
            double tol = dt == WEFT_F64 ? 1e-13 : 3e-6;
            char what[96];
            // contiguous (5,7)
            double v[35], ref[35];
            make_vals(u, v, 35, 11 + k);
            weft_tensor *x = tens(v, dt, WEFT_DIMS(5, 7));
            for (int i = 0; i < 35; i++) ref[i] = u->ref(rf(v[i], dt));
            weft_tensor *y = wt_keep(u->fn(x));
            snprintf(what, sizeof what, "%s %s contiguous", u->name, weft_dtype_name(dt));
            CHECK(y && weft_tensor_dtype(y) == dt && weft_tensor_ndim(y) == 2 && weft_tensor_size(y, 0) == 5);
            wt_check_values(what, y, ref, 35, tol);
            // transposed: y[i][j] = f(x[j][i])
            weft_tensor *xt = wt_keep(weft_transpose(x, 0, 1));
            CHECK(!weft_tensor_is_contiguous(xt));
            for (int i = 0; i < 7; i++)
                for (int j = 0; j < 5; j++) ref[i * 5 + j] = u->ref(rf(v[j * 7 + i], dt));
            snprintf(what, sizeof what, "%s %s transposed", u->name, weft_dtype_name(dt));
            wt_check_values(what, wt_keep(u->fn(xt)), ref, 35, tol);
            // sliced with step 3 on dim 1: columns 1, 4
            weft_tensor *xs = wt_keep(weft_slice(x, 1, 1, 7, 3));
            CHECK(weft_tensor_size(xs, 1) == 2);
            for (int i = 0; i < 5; i++)
                for (int j = 0; j < 2; j++) ref[i * 2 + j] = u->ref(rf(v[i * 7 + 1 + 3 * j], dt));
            snprintf(what, sizeof what, "%s %s sliced", u->name, weft_dtype_name(dt));
            wt_check_values(what, wt_keep(u->fn(xs)), ref, 10, tol);
            // 0-d
            weft_tensor *s = tens(&v[3], dt, 0, NULL);
            weft_tensor *ys = wt_keep(u->fn(s));
            CHECK(ys && weft_tensor_ndim(ys) == 0);
            CHECK_NEAR(weft_tensor_item(ys), u->ref(rf(v[3], dt)), tol);
            wt_drop_all();
        }
    }
}

// Large enough to be split across threads, with rows cut mid-way by chunks.
static void test_unary_large_threaded(void) {
    const int64_t R = 301, C = 257;
    double *v = malloc(sizeof(double) * (size_t)(R * C)), *ref = malloc(sizeof(double) * (size_t)(R * C));
    wt_vals(v, R * C, -3, 3, 5);
    weft_tensor *x = tens(v, WEFT_F64, WEFT_DIMS(R, C));
    weft_tensor *xt = wt_keep(weft_transpose(x, 0, 1)); // (C,R)
    for (int64_t i = 0; i < C; i++)
        for (int64_t j = 0; j < R; j++) ref[i * R + j] = tanh(v[j * C + i]);
    wt_check_values("tanh large transposed", wt_keep(weft_tanh(xt)), ref, R * C, 1e-14);
    for (int64_t i = 0; i < R * C; i++) ref[i] = exp(v[i]);
    wt_check_values("exp large contiguous", wt_keep(weft_exp(x)), ref, R * C, 1e-14);
    weft_tensor *x32 = tens(v, WEFT_F32, WEFT_DIMS(R, C));
    for (int64_t i = 0; i < R * C; i++) ref[i] = r_sigmoid((float)v[i]);
    wt_check_values("sigmoid large f32", wt_keep(weft_sigmoid(x32)), ref, R * C, 2e-6);
    free(v);
    free(ref);
    wt_drop_all();
}

static void test_unary_special_values(void) {
    double v[6] = {-800, -100, 0, 100, 800, 1e-300};
    weft_tensor *x = tens(v, WEFT_F64, WEFT_DIMS(6));
    double sg[6], si[6];
    for (int i = 0; i < 6; i++) sg[i] = r_sigmoid(v[i]), si[i] = r_silu(v[i]);
    wt_check_values("sigmoid extremes", wt_keep(weft_sigmoid(x)), sg, 6, 1e-15);
    wt_check_values("silu extremes", wt_keep(weft_silu(x)), si, 6, 1e-15);
    double th[6] = {-1, -1, 0, 1, 1, 1e-300};
    wt_check_values("tanh extremes", wt_keep(weft_tanh(x)), th, 6, 1e-15);
    // the tanh GELU far out: x itself above, zero below (f32 through exp(-2u), no overflow to NaN)
    double gt[6] = {0, 0, 0, 100, 800, 0.5e-300};
    wt_check_values("gelu_tanh extremes", wt_keep(weft_gelu_tanh(x)), gt, 6, 1e-15);
    double gt32[6] = {0, 0, 0, 100, 800, 0};
    wt_check_values("gelu_tanh extremes f32", wt_keep(weft_gelu_tanh(tens(v, WEFT_F32, WEFT_DIMS(6)))), gt32, 6, 1e-6);
    double gd[6] = {0, 0, 0.5, 1, 1, 0.5};
    weft_tensor *ones = tens((double[]){1, 1, 1, 1, 1, 1}, WEFT_F32, WEFT_DIMS(6));
    wt_check_values("gelu_tanh_backward extremes f32",
                    wt_keep(weft_gelu_tanh_backward(ones, tens(v, WEFT_F32, WEFT_DIMS(6)))), gd, 6, 1e-6);
    // exactly: -0 and a zero gradient where exp(-2u) would pass f32's range (not x / 1.7e38 and a gradient
    // growing like x^3), NaN at -inf and where x^2 overflows (as PyTorch's f32), x itself far above
    double far[6] = {-30, -1e4, -1e13, -3e38, -INFINITY, 1e13}, fy[6], fg[6];
    weft_tensor *xf = tens(far, WEFT_F32, WEFT_DIMS(6)), *of = tens((double[]){1, 1, 1, 1, 1, 1}, WEFT_F32, WEFT_DIMS(6));
    weft_tensor_to_f64(wt_keep(weft_gelu_tanh(xf)), fy, 6);
    weft_tensor_to_f64(wt_keep(weft_gelu_tanh_backward(of, xf)), fg, 6);
    for (int i = 0; i < 4; i++) CHECK(fy[i] == 0 && signbit(fy[i]) && (i == 3 || fg[i] == 0));
    CHECK(isnan(fy[4]) && isnan(fg[3]) && isnan(fg[4]));
    CHECK(fy[5] == (double)(float)1e13 && fg[5] == 1);
    weft_tensor *x32 = tens(v, WEFT_F32, WEFT_DIMS(6));
    double sg32[6] = {0, r_sigmoid(-100), 0.5, 1, 1, 0.5};
    wt_check_values("sigmoid extremes f32", wt_keep(weft_sigmoid(x32)), sg32, 6, 1e-6);
    double e[3] = {-1, 0, 1000};
    weft_tensor *xe = tens(e, WEFT_F64, WEFT_DIMS(3));
    double lg[3] = {NAN, -INFINITY, log(1000)}, sq[3] = {NAN, 0, sqrt(1000)}, ex[3] = {exp(-1), 1, INFINITY};
    wt_check_values("log special", wt_keep(weft_log(xe)), lg, 3, 1e-15);
    wt_check_values("sqrt special", wt_keep(weft_sqrt(xe)), sq, 3, 1e-15);
    wt_check_values("exp special", wt_keep(weft_exp(xe)), ex, 3, 1e-15);
    wt_drop_all();
}

// gradient through a non-contiguous view: y = f(slice(transpose(x), 1, 0:5:2)); x (5,4) -> (4,3)
static weft_tensor *un_grad_fn(weft_tensor *const *in, void *user) {
    const unop *u = user;
    weft_tensor *t = weft_transpose(in[0], 0, 1), *s = weft_slice(t, 1, 0, 5, 2), *y = u->fn(s);
    weft_tensor_free(t);
    weft_tensor_free(s);
    return y;
}
static weft_tensor *un_grad_plain(weft_tensor *const *in, void *user) { return ((const unop *)user)->fn(in[0]); }

static void test_unary_grad(void) {
    for (int k = 0; k < N_UNOPS; k++) {
        const unop *u = &k_unops[k];
        if (!u->diff) continue;
        double v[20];
        make_vals(u, v, 20, 100 + k);
        weft_tensor *x = wt_keep(wt_f64(v, WEFT_DIMS(5, 4), true));
        weft_status st = weft_gradcheck(un_grad_fn, 1, &x, (void *)u, NULL);
        if (st != WEFT_OK) fprintf(stderr, "unary grad %s: %s\n", u->name, weft_last_error());
        CHECK(st == WEFT_OK);
        weft_tensor *s = wt_keep(wt_f64(&v[2], 0, NULL, true)); // 0-d
        st = weft_gradcheck(un_grad_plain, 1, &s, (void *)u, NULL);
        if (st != WEFT_OK) fprintf(stderr, "unary grad 0-d %s: %s\n", u->name, weft_last_error());
        CHECK(st == WEFT_OK);
        wt_drop_all();
    }
}

// Second order: d2/dx2 of a few unary ops at a point (backward rules are ops).
static void test_unary_second_order(void) {
    struct {
        un_fn fn;
        double x, d2;
    } cs[] = {{weft_exp, 0.7, exp(0.7)},
              {weft_sin, 0.7, -sin(0.7)},
              {weft_tanh, 0.7, -2 * tanh(0.7) * (1 - tanh(0.7) * tanh(0.7))},
              {weft_log, 0.7, -1 / (0.7 * 0.7)},
              {weft_sqrt, 0.7, -0.25 * pow(0.7, -1.5)},
              {weft_sigmoid, 0.7, r_sigmoid(0.7) * (1 - r_sigmoid(0.7)) * (1 - 2 * r_sigmoid(0.7))},
              {pow25, 0.7, 2.5 * 1.5 * pow(0.7, 0.5)},
              {weft_gelu_tanh, 0.7, r_gelu_tanh_d2(0.7)},
              {weft_gelu_tanh, -1.9, r_gelu_tanh_d2(-1.9)},
              {weft_erf, 0.7, r_erf_d2(0.7)},
              {weft_erf, -1.3, r_erf_d2(-1.3)},
              {weft_erf, 0, 0}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        weft_tensor *x = wt_keep(wt_f64(&cs[i].x, 0, NULL, true));
        weft_tensor *y = wt_keep(cs[i].fn(x));
        weft_backward_opts o = {.create_graph = true};
        CHECK(weft_backward(y, NULL, &o) == WEFT_OK);
        weft_tensor *g = wt_keep(weft_tensor_ref(weft_tensor_grad(x)));
        weft_tensor_zero_grad(x);
        CHECK(g && weft_backward(g, NULL, NULL) == WEFT_OK);
        CHECK_NEAR(weft_tensor_item(weft_tensor_grad(x)), cs[i].d2, 1e-10);
        weft_tensor_zero_grad(x);
        wt_drop_all();
    }
}

// ---- binary ops ----
typedef weft_tensor *(*bin_fn)(weft_tensor *, weft_tensor *);
typedef struct {
    const char *name;
    bin_fn fn;
    double (*ref)(double, double);
    double alo, ahi, blo, bhi;
} binop;
static double r_add(double a, double b) { return a + b; }
static double r_sub(double a, double b) { return a - b; }
static double r_mul(double a, double b) { return a * b; }
static double r_div(double a, double b) { return a / b; }
static double r_max(double a, double b) { return a > b ? a : b; }
static double r_min(double a, double b) { return a < b ? a : b; }
static const binop k_binops[] = {
    {"add", weft_add, r_add, -3, 3, -3, 3},
    {"sub", weft_sub, r_sub, -3, 3, -3, 3},
    {"mul", weft_mul, r_mul, -3, 3, -3, 3},
    {"div", weft_div, r_div, -3, 3, 0.5, 2.5},
    {"pow", weft_pow, pow, 0.3, 2.5, -2, 2},
    {"maximum", weft_maximum, r_max, -3, 3, -3, 3},
    {"minimum", weft_minimum, r_min, -3, 3, -3, 3},
};
#define N_BINOPS (int)(sizeof k_binops / sizeof k_binops[0])

// Naive broadcast reference: out shape `os`; a and b right-aligned.
static void bcast_ref(const binop *op, int ond, const int64_t *os, const double *a, int and_, const int64_t *as,
                      const double *b, int bnd, const int64_t *bs, double *out, weft_dtype dt) {
    int64_t n = 1;
    for (int d = 0; d < ond; d++) n *= os[d];
    for (int64_t i = 0; i < n; i++) {
        int64_t idx[8], r = i;
        for (int d = ond - 1; d >= 0; d--) idx[d] = r % os[d], r /= os[d];
        int64_t ia = 0, ib = 0;
        for (int d = 0; d < and_; d++) ia = ia * as[d] + (as[d] == 1 ? 0 : idx[ond - and_ + d]);
        for (int d = 0; d < bnd; d++) ib = ib * bs[d] + (bs[d] == 1 ? 0 : idx[ond - bnd + d]);
        out[i] = op->ref(rf(a[ia], dt), rf(b[ib], dt));
    }
}

static void test_binary_forward(void) {
    struct {
        int and_;
        int64_t as[3];
        int bnd;
        int64_t bs[3];
        int ond;
        int64_t os[3];
    } shp[] = {
        {2, {3, 4}, 2, {3, 4}, 2, {3, 4}},    // same shape
        {2, {3, 1}, 2, {1, 4}, 2, {3, 4}},    // outer product style
        {3, {2, 3, 4}, 1, {4}, 3, {2, 3, 4}}, // trailing vector
        {1, {4}, 3, {2, 3, 4}, 3, {2, 3, 4}}, // vector on the left
        {0, {0}, 2, {2, 3}, 2, {2, 3}},       // scalar 0-d on the left
        {2, {2, 3}, 0, {0}, 2, {2, 3}},       // scalar 0-d on the right
        {3, {2, 1, 4}, 2, {3, 1}, 3, {2, 3, 4}},
    };
    const weft_dtype dts[2] = {WEFT_F64, WEFT_F32};
    for (int k = 0; k < N_BINOPS; k++) {
        const binop *op = &k_binops[k];
        for (size_t si = 0; si < sizeof shp / sizeof shp[0]; si++)
            for (int di = 0; di < 2; di++) {
                weft_dtype dt = dts[di];
                double a[24], b[24], ref[24];
                wt_vals(a, 24, op->alo, op->ahi, 7 * k + si);
                wt_vals(b, 24, op->blo, op->bhi, 1000 + 7 * k + si);
                weft_tensor *ta = tens(a, dt, shp[si].and_, shp[si].as), *tb = tens(b, dt, shp[si].bnd, shp[si].bs);
                weft_tensor *y = wt_keep(op->fn(ta, tb));
                bcast_ref(op, shp[si].ond, shp[si].os, a, shp[si].and_, shp[si].as, b, shp[si].bnd, shp[si].bs, ref,
                          dt);
                char what[96];
                snprintf(what, sizeof what, "%s %s shape case %d", op->name, weft_dtype_name(dt), (int)si);
                CHECK(y && weft_tensor_ndim(y) == shp[si].ond && weft_tensor_dtype(y) == dt);
                if (y)
                    for (int d = 0; d < shp[si].ond; d++) CHECK(weft_tensor_size(y, d) == shp[si].os[d]);
                wt_check_values(what, y, ref, numel_of(shp[si].ond, shp[si].os), dt == WEFT_F64 ? 1e-14 : 3e-6);
                wt_drop_all();
            }
    }
}

// Non-contiguous operands: a transposed, b sliced with a step (and broadcast).
static void test_binary_noncontig(void) {
    for (int k = 0; k < N_BINOPS; k++) {
        const binop *op = &k_binops[k];
        double a[12], b[27], c[8], ref[12];
        wt_vals(a, 12, op->alo, op->ahi, 50 + k);
        wt_vals(b, 27, op->blo, op->bhi, 60 + k);
        wt_vals(c, 8, op->blo, op->bhi, 70 + k);
        weft_tensor *ta = tens(a, WEFT_F64, WEFT_DIMS(4, 3)), *tb = tens(b, WEFT_F64, WEFT_DIMS(3, 9));
        weft_tensor *tc = tens(c, WEFT_F64, WEFT_DIMS(8));
        weft_tensor *at = wt_keep(weft_transpose(ta, 0, 1));  // (3,4): at[i][j] = a[j*3+i]
        weft_tensor *bs = wt_keep(weft_slice(tb, 1, 1, 9, 2)); // (3,4): bs[i][j] = b[i*9+1+2j]
        weft_tensor *cs = wt_keep(weft_slice(tc, 0, 0, 8, 2)); // (4): c[2j]
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) ref[i * 4 + j] = op->ref(a[j * 3 + i], b[i * 9 + 1 + 2 * j]);
        char what[64];
        snprintf(what, sizeof what, "%s transposed x sliced", op->name);
        wt_check_values(what, wt_keep(op->fn(at, bs)), ref, 12, 1e-14);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) ref[i * 4 + j] = op->ref(a[j * 3 + i], c[2 * j]);
        snprintf(what, sizeof what, "%s transposed x sliced vector", op->name);
        wt_check_values(what, wt_keep(op->fn(at, cs)), ref, 12, 1e-14);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) ref[i * 4 + j] = op->ref(c[2 * j], a[j * 3 + i]);
        snprintf(what, sizeof what, "%s sliced vector x transposed", op->name);
        wt_check_values(what, wt_keep(op->fn(cs, at)), ref, 12, 1e-14);
        wt_drop_all();
    }
}

// Big enough for the threaded path: (C,R) transposed view + (R) broadcast, f32.
// Outputs over WEFT_NT_MIN_BYTES per thread take the streaming-store path
// (blocks + an odd tail); check it against plain loops with 1 and 2 threads.
static void test_streaming_store_path(void) {
    const int64_t n = 1500001; // 6 MB of f32, not a multiple of the block
    double *a = malloc(sizeof(double) * (size_t)n), *b = malloc(sizeof(double) * (size_t)n);
    double *ref = malloc(sizeof(double) * (size_t)n);
    wt_vals(a, n, -2, 2, 11);
    wt_vals(b, n, -2, 2, 12);
    weft_tensor *ta = tens(a, WEFT_F32, WEFT_DIMS(n)), *tb = tens(b, WEFT_F32, WEFT_DIMS(n));
    for (int64_t i = 0; i < n; i++) ref[i] = (double)((float)a[i] + (float)b[i]);
    for (int nt = 1; nt <= 2; nt++) {
        weft_set_num_threads(nt);
        wt_check_values("add streaming", wt_keep(weft_add(ta, tb)), ref, n, 1e-7);
    }
    for (int64_t i = 0; i < n; i++) ref[i] = exp((double)(float)a[i]);
    wt_check_values("exp streaming", wt_keep(weft_exp(ta)), ref, n, 1e-6);
    // GELU and its gradient (the vectorised erf/exp of vmath.h; these loops were
    // once left scalar by the compiler) on [-8, 8], both threads' blocks and tails.
    weft_tensor *x = wt_keep(weft_mul_scalar(ta, 4.0));
    CHECK(!weft_tensor_set_requires_grad(x, true));
    for (int64_t i = 0; i < n; i++) ref[i] = r_gelu((double)(float)(4 * (float)a[i]));
    weft_tensor *y = wt_keep(weft_gelu(x));
    wt_check_values("gelu streaming", y, ref, n, 2e-6);
    CHECK(!weft_backward(wt_keep(weft_sum(y, 0, NULL, false)), NULL, NULL));
    for (int64_t i = 0; i < n; i++) {
        double v = (double)(float)(4 * (float)a[i]);
        ref[i] = 0.5 * (1.0 + erf(v / sqrt(2.0))) + v * exp(-0.5 * v * v) / sqrt(2.0 * M_PI);
    }
    wt_check_values("gelu grad streaming", weft_tensor_grad(x), ref, n, 2e-6);
    free(a);
    free(b);
    free(ref);
    wt_drop_all();
}

// relu_backward(g, x) = g where x > 0: forward, broadcast of g, gradient in g,
// and relu's double backward through it.
static weft_tensor *relu_bw_fn(weft_tensor *const *in, void *user) {
    (void)user;
    return weft_relu_backward(in[0], in[1]);
}
static weft_tensor *relu_twice_fn(weft_tensor *const *in, void *user) { // d/dx sum(relu(x)^2 * w) -> grad path
    (void)user;
    weft_tensor *r = weft_relu(in[0]), *y = weft_mul(r, r);
    weft_tensor_free(r);
    return y;
}
static void test_relu_backward(void) {
    double gv[6] = {1, -2, 3, -4, 5, -6}, xv[6] = {0.5, -0.5, 2, -1e-3, 0, 3};
    weft_tensor *g = wt_keep(wt_f64(gv, WEFT_DIMS(2, 3), true)), *x = wt_keep(wt_f64(xv, WEFT_DIMS(2, 3), false));
    double ref[6];
    for (int i = 0; i < 6; i++) ref[i] = xv[i] > 0 ? gv[i] : 0;
    wt_check_values("relu_backward", wt_keep(weft_relu_backward(g, x)), ref, 6, 0);
    weft_tensor *g1 = wt_keep(wt_f64(gv, WEFT_DIMS(3), true)); // broadcast over rows
    double ref2[6];
    for (int i = 0; i < 6; i++) ref2[i] = xv[i] > 0 ? gv[i % 3] : 0;
    wt_check_values("relu_backward broadcast", wt_keep(weft_relu_backward(g1, x)), ref2, 6, 0);
    weft_tensor *in[2] = {g, x};
    CHECK_GRAD(relu_bw_fn, 1, in, NULL);
    double xv2[6] = {0.5, -0.5, 2, -1.5, 1, 3};
    weft_tensor *x2 = wt_keep(wt_f64(xv2, WEFT_DIMS(2, 3), true));
    CHECK_GRAD(relu_twice_fn, 1, &x2, NULL);
    wt_drop_all();
}

// gelu_backward(g, x) = g gelu'(x), gelu'(x) = Phi(x) + x phi(x): values, broadcast g, and its own
// gradient in both inputs (gelu's second derivative, phi(x) (2 - x^2)) by finite differences.
static weft_tensor *gelu_bw_fn(weft_tensor *const *in, void *user) {
    (void)user;
    return weft_gelu_backward(in[0], in[1]);
}
static void test_gelu_backward(void) {
    double gv[6] = {1, -2, 3, -4, 0.5, -6}, xv[6] = {0.5, -0.5, 2, -1e-3, 0, -3};
    weft_tensor *g = wt_keep(wt_f64(gv, WEFT_DIMS(2, 3), true)), *x = wt_keep(wt_f64(xv, WEFT_DIMS(2, 3), true));
    double ref[6], ref2[6];
    for (int i = 0; i < 6; i++) {
        double d = 0.5 * (1 + erf(xv[i] / sqrt(2.0))) + xv[i] * exp(-0.5 * xv[i] * xv[i]) / sqrt(2 * M_PI);
        ref[i] = gv[i] * d;
        ref2[i] = gv[i % 3] * d;
    }
    wt_check_values("gelu_backward f64", wt_keep(weft_gelu_backward(g, x)), ref, 6, 1e-14);
    weft_tensor *gf = wt_keep(weft_cast(g, WEFT_F32)), *xf = wt_keep(weft_cast(x, WEFT_F32));
    wt_check_values("gelu_backward f32", wt_keep(weft_gelu_backward(gf, xf)), ref, 6, 2e-6);
    weft_tensor *g1 = wt_keep(wt_f64(gv, WEFT_DIMS(3), true)); // broadcast over rows
    wt_check_values("gelu_backward broadcast", wt_keep(weft_gelu_backward(g1, x)), ref2, 6, 1e-14);
    weft_tensor *in[2] = {g, x};
    CHECK_GRAD(gelu_bw_fn, 2, in, NULL);
    weft_tensor *in1[2] = {g1, x};
    CHECK_GRAD(gelu_bw_fn, 2, in1, NULL);
    // gelu's gradient is gelu_backward: d/dx sum(gelu(x) * w) = w gelu'(x)
    weft_tensor *y = wt_keep(weft_gelu(x)), *w = wt_keep(wt_f64(gv, WEFT_DIMS(2, 3), false));
    weft_tensor *s = wt_keep(weft_sum(wt_keep(weft_mul(y, w)), 0, NULL, false));
    CHECK(weft_backward(s, NULL, NULL) == WEFT_OK);
    wt_check_values("gelu grad", weft_tensor_grad(x), ref, 6, 1e-14);
    wt_drop_all();
}

// gelu_tanh_backward(g, x) = g f'(x) against the hand derivative, f32 and f64, broadcast g; its own
// gradient in both inputs (f'', composed of ops) by finite differences and at points against the hand f''.
static weft_tensor *gelu_tanh_bw_fn(weft_tensor *const *in, void *user) {
    (void)user;
    return weft_gelu_tanh_backward(in[0], in[1]);
}
static void test_gelu_tanh_backward(void) {
    double gv[6] = {1, -2, 3, -4, 0.5, -6}, xv[6] = {0.5, -0.5, 2.5, -1e-3, 0, -3.5};
    weft_tensor *g = wt_keep(wt_f64(gv, WEFT_DIMS(2, 3), true)), *x = wt_keep(wt_f64(xv, WEFT_DIMS(2, 3), true));
    double ref[6], ref2[6], d2[6];
    for (int i = 0; i < 6; i++) {
        ref[i] = gv[i] * r_gelu_tanh_d1(xv[i]);
        ref2[i] = gv[i % 3] * r_gelu_tanh_d1(xv[i]);
        d2[i] = gv[i] * gv[i] * r_gelu_tanh_d2(xv[i]); // d/dx sum(w * gelu_tanh_backward(g, x)), w = g
    }
    wt_check_values("gelu_tanh_backward f64", wt_keep(weft_gelu_tanh_backward(g, x)), ref, 6, 1e-14);
    weft_tensor *gf = wt_keep(weft_cast(g, WEFT_F32)), *xf = wt_keep(weft_cast(x, WEFT_F32));
    wt_check_values("gelu_tanh_backward f32", wt_keep(weft_gelu_tanh_backward(gf, xf)), ref, 6, 3e-6);
    weft_tensor *g1 = wt_keep(wt_f64(gv, WEFT_DIMS(3), true));
    wt_check_values("gelu_tanh_backward broadcast", wt_keep(weft_gelu_tanh_backward(g1, x)), ref2, 6, 1e-14);
    weft_tensor *in[2] = {g, x};
    CHECK_GRAD(gelu_tanh_bw_fn, 2, in, NULL);
    weft_tensor *in1[2] = {g1, x};
    CHECK_GRAD(gelu_tanh_bw_fn, 2, in1, NULL);
    // the second derivative against the hand formula
    weft_tensor *w = wt_keep(wt_f64(gv, WEFT_DIMS(2, 3), false));
    weft_tensor *s = wt_keep(weft_sum(wt_keep(weft_mul(wt_keep(weft_gelu_tanh_backward(g, x)), w)), 0, NULL, false));
    CHECK(weft_backward(s, NULL, NULL) == WEFT_OK);
    wt_check_values("gelu_tanh second derivative", weft_tensor_grad(x), d2, 6, 1e-13);
    weft_tensor_zero_grad(x);
    // gelu_tanh's gradient is gelu_tanh_backward
    weft_tensor *y = wt_keep(weft_gelu_tanh(x));
    s = wt_keep(weft_sum(wt_keep(weft_mul(y, w)), 0, NULL, false));
    CHECK(weft_backward(s, NULL, NULL) == WEFT_OK);
    wt_check_values("gelu_tanh grad", weft_tensor_grad(x), ref, 6, 1e-14);
    // f32 over many points (the vector loop and its exp) against f64
    enum { N = 4099 };
    static double v[N], r1[N], r0[N], ones[N];
    wt_vals(v, N, -9, 9, 77);
    for (int i = 0; i < N; i++) v[i] = (float)v[i], r0[i] = r_gelu_tanh(v[i]), r1[i] = r_gelu_tanh_d1(v[i]), ones[i] = 1;
    weft_tensor *xl = tens(v, WEFT_F32, WEFT_DIMS(N)), *gl = tens(ones, WEFT_F32, WEFT_DIMS(N));
    wt_check_values("gelu_tanh f32 4099", wt_keep(weft_gelu_tanh(xl)), r0, N, 1e-5);
    wt_check_values("gelu_tanh_backward f32 4099", wt_keep(weft_gelu_tanh_backward(gl, xl)), r1, N, 3e-6);
    wt_drop_all();
}

// erf against libm's erf: f64 bit for bit (the same function); f32 within 2e-7 absolute of erf of the f32 input
// over a dense grid on [-12, 12] (multi-threaded, streaming stores) and special values, and relatively close
// for tiny x (erf(x) ~ 2x/sqrt(pi), where a polynomial's 1 - p e cancels to 0); +-inf -> +-1, NaN -> NaN,
// -0 -> -0; odd symmetry bit for bit in both; the gradient 2/sqrt(pi) exp(-x^2) and the second derivative
// -2x 2/sqrt(pi) exp(-x^2) through the composed backward (f64 and f32; finite differences in test_unary_grad).
static void test_erf(void) {
    enum { NG = 200001, NS = 20, N = NG + NS };
    static const double sp[NS] = {0, -0.0, 1e-20, -1e-20, 0.5, -0.5, 3, -3, 10, -10, INFINITY, -INFINITY, NAN,
                                  1e-30, -1e-8, 1e-4, -1e-3, 0.0379669815, 1e-40 /* f32 subnormal */, 4.5};
    static double v[N], y64[N], y32[N], ym[N];
    for (int i = 0; i < NG; i++) v[i] = -12.0 + 24.0 * i / (NG - 1);
    memcpy(v + NG, sp, sizeof sp);
    weft_tensor *x = tens(v, WEFT_F64, WEFT_DIMS(N)), *xf = tens(v, WEFT_F32, WEFT_DIMS(N));
    weft_tensor *e = wt_keep(weft_erf(x)), *ef = wt_keep(weft_erf(xf));
    CHECK(e && ef && weft_tensor_dtype(e) == WEFT_F64 && weft_tensor_dtype(ef) == WEFT_F32);
    if (!e || !ef) return;
    weft_tensor_to_f64(e, y64, N);
    weft_tensor_to_f64(ef, y32, N);
    int bad64 = 0, bad32 = 0, badrel = 0;
    double max32 = 0;
    for (int i = 0; i < N; i++) {
        double r = erf(v[i]), xs = (double)(float)v[i], r32 = erf(xs), d = fabs(y32[i] - r32);
        bool vn = isnan(v[i]);
        bool b64 = vn ? !isnan(y64[i]) : (y64[i] != r || signbit(y64[i]) != signbit(r));
        bool b32 = vn ? !isnan(y32[i]) : (!(d <= 2e-7) || signbit(y32[i]) != signbit(r32));
        // tiny normal x: 2x/sqrt(pi) to f32's precision, not 0 (subnormal results have fewer digits)
        bool brel = fabs(xs) >= 1e-30 && fabs(xs) < 1e-3 && !(d <= 1e-6 * fabs(r32));
        if (!vn && d > max32) max32 = d;
        if ((b64 || b32 || brel) && bad64 + bad32 + badrel < 5)
            fprintf(stderr, "erf(%.9g): f64 %.17g f32 %.9g, expected %.17g / %.9g\n", v[i], y64[i], y32[i], r, r32);
        bad64 += b64, bad32 += b32, badrel += brel;
    }
    printf("  erf f32: max |error| %.3g over %d points\n", max32, N);
    CHECK(bad64 == 0 && bad32 == 0 && badrel == 0);
    CHECK(y64[NG + 10] == 1 && y64[NG + 11] == -1 && y32[NG + 10] == 1 && y32[NG + 11] == -1);
    CHECK(signbit(y64[NG + 1]) && signbit(y32[NG + 1]) && y32[NG + 2] > 1e-20 && y32[NG + 3] < -1e-20);
    // odd symmetry: erf(-x) = -erf(x) bit for bit (NaN stays NaN)
    weft_tensor *dts[2] = {x, xf};
    for (int k = 0; k < 2; k++) {
        weft_tensor *a = wt_keep(weft_erf(wt_keep(weft_neg(dts[k])))), *b = wt_keep(weft_neg(k ? ef : e));
        weft_tensor_to_f64(a, ym, N);
        weft_tensor_to_f64(b, k ? y32 : y64, N);
        int odd = 0;
        for (int i = 0; i < N; i++) {
            double p = ym[i], q = k ? y32[i] : y64[i];
            odd += isnan(p) != isnan(q) || (!isnan(p) && (p != q || signbit(p) != signbit(q)));
        }
        CHECK(odd == 0);
    }
    // the gradient and second derivative at points, through the composed backward
    double xv[7] = {-3, -0.5, 0, 1e-20, 0.7, 2.5, 30}, wv[7] = {1, -2, 3, 0.5, -1.5, 2, 1}, g1[7], g2[7];
    for (int i = 0; i < 7; i++) g1[i] = wv[i] * r_erf_d1(xv[i]), g2[i] = wv[i] * r_erf_d2(xv[i]);
    weft_tensor *xl = wt_keep(wt_f64(xv, WEFT_DIMS(7), true)), *w = wt_keep(wt_f64(wv, WEFT_DIMS(7), false));
    weft_tensor *s = wt_keep(weft_sum(wt_keep(weft_mul(wt_keep(weft_erf(xl)), w)), 0, NULL, false));
    weft_backward_opts o = {.create_graph = true};
    CHECK(weft_backward(s, NULL, &o) == WEFT_OK);
    weft_tensor *g = wt_keep(weft_tensor_ref(weft_tensor_grad(xl)));
    wt_check_values("erf grad f64", g, g1, 7, 1e-15);
    weft_tensor_zero_grad(xl);
    CHECK(g && weft_backward(wt_keep(weft_sum(g, 0, NULL, false)), NULL, NULL) == WEFT_OK);
    wt_check_values("erf second derivative f64", weft_tensor_grad(xl), g2, 7, 1e-14);
    weft_tensor *xl32 = tens(xv, WEFT_F32, WEFT_DIMS(7)), *w32 = tens(wv, WEFT_F32, WEFT_DIMS(7));
    CHECK(weft_tensor_set_requires_grad(xl32, true) == WEFT_OK);
    s = wt_keep(weft_sum(wt_keep(weft_mul(wt_keep(weft_erf(xl32)), w32)), 0, NULL, false));
    CHECK(weft_backward(s, NULL, NULL) == WEFT_OK);
    CHECK(weft_tensor_grad(xl32) && weft_tensor_dtype(weft_tensor_grad(xl32)) == WEFT_F32);
    wt_check_values("erf grad f32", weft_tensor_grad(xl32), g1, 7, 1e-6);
    wt_drop_all();
}

// bf16 / f16: the f32 loop on the widened values, each result rounded once (bit for bit), with
// broadcasting; comparisons give bool; gradients of half leaves are half.
static void test_half(void) {
    for (int hi = 0; hi < 2; hi++) {
        weft_dtype lo = hi ? WEFT_F16 : WEFT_BF16;
        weft_tensor *a = wt_keep(weft_cast(wt_keep(wt_rand64(WEFT_DIMS(4, 5), -2, 2, 71, false)), lo));
        weft_tensor *b = wt_keep(weft_cast(wt_keep(wt_rand64(WEFT_DIMS(5), 0.5, 2, 72, false)), lo));
        weft_tensor *af = wt_keep(weft_cast(a, WEFT_F32)), *bf = wt_keep(weft_cast(b, WEFT_F32));
        weft_tensor *(*const bin[])(weft_tensor *, weft_tensor *) = {weft_add, weft_sub, weft_mul, weft_div,
                                                                     weft_gelu_backward, weft_maximum,
                                                                     weft_gelu_tanh_backward};
        for (size_t k = 0; k < sizeof bin / sizeof bin[0]; k++) {
            weft_tensor *y = wt_keep(bin[k](a, b)), *ref = wt_keep(weft_cast(wt_keep(bin[k](af, bf)), lo));
            wt_check_same("half binary", y, ref, 0);
        }
        weft_tensor *(*const un[])(weft_tensor *) = {weft_exp, weft_gelu, weft_relu, weft_tanh, weft_neg,
                                                     weft_gelu_tanh, weft_erf};
        for (size_t k = 0; k < sizeof un / sizeof un[0]; k++) {
            weft_tensor *y = wt_keep(un[k](a)), *ref = wt_keep(weft_cast(wt_keep(un[k](af)), lo));
            wt_check_same("half unary", y, ref, 0);
        }
        wt_check_same("half compare", wt_keep(weft_lt(a, b)), wt_keep(weft_lt(af, bf)), 0);
        weft_tensor *la = wt_keep(weft_tensor_detach(a));
        weft_tensor_set_requires_grad(la, true);
        weft_tensor *y = wt_keep(weft_mul(wt_keep(weft_gelu(la)), b));
        CHECK(weft_backward(wt_keep(weft_sum(wt_keep(weft_cast(y, WEFT_F32)), 0, NULL, false)), NULL, NULL) == WEFT_OK);
        CHECK(weft_tensor_grad(la) && weft_tensor_dtype(weft_tensor_grad(la)) == lo);
    }
    wt_drop_all();
}

static void test_binary_large_threaded(void) {
    const int64_t R = 263, C = 311;
    double *a = malloc(sizeof(double) * (size_t)(R * C)), *b = malloc(sizeof(double) * (size_t)R);
    double *ref = malloc(sizeof(double) * (size_t)(R * C));
    wt_vals(a, R * C, -2, 2, 3);
    wt_vals(b, R, -2, 2, 4);
    weft_tensor *ta = tens(a, WEFT_F32, WEFT_DIMS(R, C)), *tb = tens(b, WEFT_F32, WEFT_DIMS(R));
    weft_tensor *at = wt_keep(weft_transpose(ta, 0, 1)); // (C,R)
    for (int64_t i = 0; i < C; i++)
        for (int64_t j = 0; j < R; j++) ref[i * R + j] = (double)(float)a[j * C + i] * (double)(float)b[j];
    wt_check_values("mul large transposed x broadcast", wt_keep(weft_mul(at, tb)), ref, R * C, 1e-6);
    for (int64_t i = 0; i < C; i++)
        for (int64_t j = 0; j < R; j++) ref[i * R + j] = (float)a[j * C + i] > (float)b[j];
    wt_check_values("gt large transposed x broadcast", wt_keep(weft_gt(at, tb)), ref, R * C, 0);
    free(a);
    free(b);
    free(ref);
    wt_drop_all();
}

// gradients: cases of shapes / layouts for binary ops
typedef struct {
    const binop *op;
    int shape_case;
} bin_grad_ctx;
static weft_tensor *bin_grad_fn(weft_tensor *const *in, void *user) {
    const bin_grad_ctx *c = user;
    if (c->shape_case == 2) { // a: transpose of (4,3) -> (3,4); b: slice of (3,8) step 2 -> (3,4)
        weft_tensor *a = weft_transpose(in[0], 0, 1), *b = weft_slice(in[1], 1, 1, 8, 2);
        weft_tensor *y = c->op->fn(a, b);
        weft_tensor_free(a);
        weft_tensor_free(b);
        return y;
    }
    if (c->shape_case == 4) { // broadcast and non-contiguous: transpose (4,3)->(3,4) with b (4,) sliced from (8,)
        weft_tensor *a = weft_transpose(in[0], 0, 1), *b = weft_slice(in[1], 0, 0, 8, 2);
        weft_tensor *y = c->op->fn(b, a);
        weft_tensor_free(a);
        weft_tensor_free(b);
        return y;
    }
    return c->op->fn(in[0], in[1]);
}

static void test_binary_grad(void) {
    struct {
        int and_;
        int64_t as[3];
        int bnd;
        int64_t bs[3];
    } shp[] = {
        {2, {3, 1}, 2, {1, 4}},
        {3, {2, 3, 4}, 1, {4}},
        {2, {4, 3}, 2, {3, 8}},
        {0, {0}, 2, {2, 3}},
        {2, {4, 3}, 1, {8}},
        {1, {3}, 3, {2, 1, 3}},
    };
    for (int k = 0; k < N_BINOPS; k++) {
        const binop *op = &k_binops[k];
        for (int si = 0; si < (int)(sizeof shp / sizeof shp[0]); si++) {
            double a[24], b[24];
            wt_vals(a, 24, op->alo, op->ahi, 300 + 10 * k + si);
            wt_vals(b, 24, op->blo, op->bhi, 600 + 10 * k + si);
            if (op->fn == weft_maximum || op->fn == weft_minimum) // no near-ties
                for (int i = 0; i < 24; i++) b[i] = floor(b[i] * 4) / 4 + 0.125;
            weft_tensor *in[2] = {wt_keep(wt_f64(a, shp[si].and_, shp[si].as, true)),
                                  wt_keep(wt_f64(b, shp[si].bnd, shp[si].bs, true))};
            if (si == 4) { // a swaps role: b (vector) is the first operand
                bin_grad_ctx c = {op, 4};
                if (op->fn == weft_pow || op->fn == weft_div) { // first operand needs the a-domain
                    double t[24];
                    wt_vals(t, 24, op->alo, op->ahi, 900 + k);
                    in[1] = wt_keep(wt_f64(t, shp[si].bnd, shp[si].bs, true));
                    wt_vals(t, 24, op->blo, op->bhi, 901 + k);
                    in[0] = wt_keep(wt_f64(t, shp[si].and_, shp[si].as, true));
                }
                weft_status st = weft_gradcheck(bin_grad_fn, 2, in, &c, NULL);
                if (st) fprintf(stderr, "binary grad %s case %d: %s\n", op->name, si, weft_last_error());
                CHECK(st == WEFT_OK);
            } else {
                bin_grad_ctx c = {op, si};
                weft_status st = weft_gradcheck(bin_grad_fn, 2, in, &c, NULL);
                if (st) fprintf(stderr, "binary grad %s case %d: %s\n", op->name, si, weft_last_error());
                CHECK(st == WEFT_OK);
            }
            wt_drop_all();
        }
    }
}

// maximum/minimum ties split the gradient evenly; NaN propagates forward.
static void test_minmax_ties_nan(void) {
    double a[3] = {1, 2, 3}, b[3] = {1, 5, 0};
    weft_tensor *ta = wt_keep(wt_f64(a, WEFT_DIMS(3), true)), *tb = wt_keep(wt_f64(b, WEFT_DIMS(3), true));
    weft_tensor *y = wt_keep(weft_maximum(ta, tb)), *s = wt_keep(weft_sum(y, 0, NULL, false));
    CHECK(weft_backward(s, NULL, NULL) == WEFT_OK);
    double ga[3] = {0.5, 0, 1}, gb[3] = {0.5, 1, 0};
    wt_check_values("maximum tie grad a", weft_tensor_grad(ta), ga, 3, 0);
    wt_check_values("maximum tie grad b", weft_tensor_grad(tb), gb, 3, 0);
    double n[3] = {NAN, 1, 2}, m[3] = {0, NAN, 1};
    weft_tensor *tn = tens(n, WEFT_F64, WEFT_DIMS(3)), *tm = tens(m, WEFT_F64, WEFT_DIMS(3));
    double rmax[3] = {NAN, NAN, 2}, rmin[3] = {NAN, NAN, 1};
    wt_check_values("maximum nan", wt_keep(weft_maximum(tn, tm)), rmax, 3, 0);
    wt_check_values("minimum nan", wt_keep(weft_minimum(tn, tm)), rmin, 3, 0);
    wt_drop_all();
}

// ---- comparisons ----
static void test_compare(void) {
    bin_fn fns[6] = {weft_eq, weft_ne, weft_lt, weft_le, weft_gt, weft_ge};
    const char *names[6] = {"eq", "ne", "lt", "le", "gt", "ge"};
    double a[6] = {1, 2, 3, 4, 5, NAN}, b[6] = {1, 3, 2, 4, 6, NAN};
    const weft_dtype dts[4] = {WEFT_F64, WEFT_F32, WEFT_I32, WEFT_I64};
    for (int di = 0; di < 4; di++) {
        weft_dtype dt = dts[di];
        int n = dt == WEFT_I32 || dt == WEFT_I64 ? 5 : 6;
        weft_tensor *ta = tens(a, dt, 1, (int64_t[]){n}), *tb = tens(b, dt, 1, (int64_t[]){n});
        for (int f = 0; f < 6; f++) {
            double ref[6];
            for (int i = 0; i < n; i++) {
                double x = a[i], y = b[i];
                ref[i] = f == 0 ? x == y : f == 1 ? x != y : f == 2 ? x < y : f == 3 ? x <= y : f == 4 ? x > y : x >= y;
            }
            weft_tensor *m = wt_keep(fns[f](ta, tb));
            CHECK(m && weft_tensor_dtype(m) == WEFT_BOOL);
            CHECK(m && !weft_tensor_requires_grad(m));
            char what[64];
            snprintf(what, sizeof what, "%s %s", names[f], weft_dtype_name(dt));
            wt_check_values(what, m, ref, n, 0);
        }
    }
    // broadcast (3,1) vs (1,4) and a 0-d scalar; non-contiguous left operand
    double c[3] = {1, 2, 3}, d[4] = {0, 1, 2, 3}, ref[12];
    weft_tensor *tc = tens(c, WEFT_F32, WEFT_DIMS(3, 1)), *td = tens(d, WEFT_F32, WEFT_DIMS(1, 4));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) ref[i * 4 + j] = c[i] <= d[j];
    wt_check_values("le broadcast", wt_keep(weft_le(tc, td)), ref, 12, 0);
    weft_tensor *two = wt_keep(weft_tensor_scalar(2, WEFT_F32));
    double r2[4] = {0, 0, 0, 1};
    wt_check_values("gt 0-d", wt_keep(weft_gt(td, two)), r2, 4, 0);
    weft_tensor *ct = wt_keep(weft_transpose(td, 0, 1)); // (4,1)
    double r3[12];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) r3[i * 3 + j] = d[i] == c[j];
    weft_tensor *cr = wt_keep(weft_reshape(tc, WEFT_DIMS(3)));
    wt_check_values("eq transposed broadcast", wt_keep(weft_eq(ct, cr)), r3, 12, 0);
    // bool == bool
    weft_tensor *m1 = wt_keep(weft_gt(td, two)), *m2 = wt_keep(weft_ge(td, two));
    double r4[4] = {1, 1, 0, 1};
    wt_check_values("eq bool", wt_keep(weft_eq(m1, m2)), r4, 4, 0);
    wt_drop_all();
}

// ---- where ----
static weft_tensor *g_cond;
static weft_tensor *where_fn(weft_tensor *const *in, void *user) {
    if (user) { // non-contiguous a: transpose of (4,3)
        weft_tensor *at = weft_transpose(in[0], 0, 1), *y = weft_where(g_cond, at, in[1]);
        weft_tensor_free(at);
        return y;
    }
    return weft_where(g_cond, in[0], in[1]);
}
static void test_where(void) {
    double c[12], a[3] = {10, 20, 30}, b[4] = {-1, -2, -3, -4}, ref[12];
    wt_vals(c, 12, -1, 1, 9);
    const weft_dtype dts[4] = {WEFT_F64, WEFT_F32, WEFT_I32, WEFT_I64};
    weft_tensor *tcv = tens(c, WEFT_F64, WEFT_DIMS(3, 4)), *z = wt_keep(weft_tensor_scalar(0, WEFT_F64));
    weft_tensor *cond = wt_keep(weft_gt(tcv, z));
    for (int di = 0; di < 4; di++) {
        weft_tensor *ta = tens(a, dts[di], WEFT_DIMS(3, 1)), *tb = tens(b, dts[di], WEFT_DIMS(4));
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) ref[i * 4 + j] = c[i * 4 + j] > 0 ? a[i] : b[j];
        weft_tensor *y = wt_keep(weft_where(cond, ta, tb));
        CHECK(y && weft_tensor_dtype(y) == dts[di]);
        wt_check_values("where broadcast", y, ref, 12, 0);
    }
    // 0-d condition, and a u8 condition
    weft_tensor *t = wt_keep(weft_tensor_scalar(1, WEFT_BOOL));
    weft_tensor *ta = tens(a, WEFT_F64, WEFT_DIMS(3, 1)), *tb = tens(b, WEFT_F64, WEFT_DIMS(4));
    for (int i = 0; i < 12; i++) ref[i] = a[i / 4];
    wt_check_values("where 0-d cond", wt_keep(weft_where(t, ta, tb)), ref, 12, 0);
    // gradients: a (3,1) and b (1,4) broadcast into (3,4)
    g_cond = cond;
    double av[12], bv[12];
    wt_vals(av, 12, -1, 1, 21);
    wt_vals(bv, 12, -1, 1, 22);
    weft_tensor *in[2] = {wt_keep(wt_f64(av, WEFT_DIMS(3, 1), true)), wt_keep(wt_f64(bv, WEFT_DIMS(1, 4), true))};
    CHECK_GRAD(where_fn, 2, in, NULL);
    weft_tensor *in2[2] = {wt_keep(wt_f64(av, WEFT_DIMS(4, 3), true)), wt_keep(wt_f64(bv, WEFT_DIMS(4), true))};
    CHECK_GRAD(where_fn, 2, in2, (void *)1);
    wt_drop_all();
}

// ---- integer dtypes ----
static void test_integer(void) {
    int32_t a[3] = {1, -2, 300}, b[4] = {10, 20, -30, 7};
    weft_tensor *ta = wt_keep(weft_tensor_from_data(a, WEFT_DIMS(3, 1), WEFT_I32));
    weft_tensor *tb = wt_keep(weft_tensor_from_data(b, WEFT_DIMS(1, 4), WEFT_I32));
    double ra[12], rm[12];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) ra[i * 4 + j] = a[i] + b[j], rm[i * 4 + j] = (double)a[i] * b[j];
    weft_tensor *s = wt_keep(weft_add(ta, tb)), *m = wt_keep(weft_mul(ta, tb));
    CHECK(s && weft_tensor_dtype(s) == WEFT_I32);
    wt_check_values("i32 add broadcast", s, ra, 12, 0);
    wt_check_values("i32 mul broadcast", m, rm, 12, 0);
    // i64 beyond 2^53 stays exact
    int64_t c[2] = {(1LL << 60) + 1, -((1LL << 55) + 3)}, d[1] = {2};
    weft_tensor *tc = wt_keep(weft_tensor_from_data(c, WEFT_DIMS(2), WEFT_I64));
    weft_tensor *td = wt_keep(weft_tensor_from_data(d, WEFT_DIMS(1), WEFT_I64));
    weft_tensor *sc = wt_keep(weft_add(tc, td)), *mc = wt_keep(weft_mul(tc, td));
    CHECK(sc && weft_tensor_dtype(sc) == WEFT_I64);
    if (sc && mc) {
        const int64_t *ps = weft_tensor_data(sc), *pm = weft_tensor_data(mc);
        CHECK(ps[0] == (1LL << 60) + 3 && ps[1] == -((1LL << 55) + 1));
        CHECK(pm[0] == (1LL << 61) + 2 && pm[1] == -((1LL << 56) + 6));
    }
    // (2,3,4) * (4) in i64, transposed left operand
    int64_t e[24], f[4] = {1, -1, 2, 3};
    for (int i = 0; i < 24; i++) e[i] = i - 7;
    weft_tensor *te = wt_keep(weft_tensor_from_data(e, WEFT_DIMS(2, 4, 3), WEFT_I64));
    weft_tensor *tet = wt_keep(weft_transpose(te, 1, 2)); // (2,3,4): [n][i][j] = e[n*12 + j*3 + i]
    weft_tensor *tf = wt_keep(weft_tensor_from_data(f, WEFT_DIMS(4), WEFT_I64));
    double r[24];
    for (int n = 0; n < 2; n++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) r[n * 12 + i * 4 + j] = (double)(e[n * 12 + j * 3 + i] * f[j]);
    wt_check_values("i64 mul transposed broadcast", wt_keep(weft_mul(tet, tf)), r, 24, 0);
    // unary / scalar / other binary ops on integers
    int32_t g[5] = {-7, -1, 0, 3, 7}, h[5] = {2, 2, 5, -2, 2};
    weft_tensor *tg = wt_keep(weft_tensor_from_data(g, WEFT_DIMS(5), WEFT_I32));
    weft_tensor *th = wt_keep(weft_tensor_from_data(h, WEFT_DIMS(5), WEFT_I32));
    double neg[5], ab[5], re[5], as[5], ms[5], dv[5], sb[5], mx[5];
    for (int i = 0; i < 5; i++) {
        neg[i] = -g[i], ab[i] = abs(g[i]), re[i] = g[i] > 0 ? g[i] : 0, as[i] = g[i] + 3, ms[i] = g[i] * -2;
        dv[i] = g[i] / h[i], sb[i] = g[i] - h[i], mx[i] = g[i] > h[i] ? g[i] : h[i];
    }
    wt_check_values("i32 neg", wt_keep(weft_neg(tg)), neg, 5, 0);
    wt_check_values("i32 abs", wt_keep(weft_abs(tg)), ab, 5, 0);
    wt_check_values("i32 relu", wt_keep(weft_relu(tg)), re, 5, 0);
    wt_check_values("i32 add_scalar", wt_keep(weft_add_scalar(tg, 3)), as, 5, 0);
    wt_check_values("i32 mul_scalar", wt_keep(weft_mul_scalar(tg, -2)), ms, 5, 0);
    wt_check_values("i32 div (truncating)", wt_keep(weft_div(tg, th)), dv, 5, 0);
    wt_check_values("i32 sub", wt_keep(weft_sub(tg, th)), sb, 5, 0);
    wt_check_values("i32 maximum", wt_keep(weft_maximum(tg, th)), mx, 5, 0);
    wt_drop_all();
}

// floor, ceil, round (half to even), trunc; fmod (the dividend's sign) and remainder (the divisor's), in floats
// and integers, against values worked out by hand; their gradients by central differences away from the jumps.
static weft_tensor *mod_fn(weft_tensor *const *in, void *user) {
    return user ? weft_remainder(in[0], in[1]) : weft_fmod(in[0], in[1]);
}
static void test_rounding_mod(void) {
    double x[9] = {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -1.2, 1.7, 0};
    double fl[9] = {-3, -2, -1, 0, 1, 2, -2, 1, 0}, ce[9] = {-2, -1, -0.0, 1, 2, 3, -1, 2, 0};
    double ro[9] = {-2, -2, -0.0, 0, 2, 2, -1, 2, 0}, tr[9] = {-2, -1, -0.0, 0, 1, 2, -1, 1, 0};
    for (int f = 0; f < 2; f++) {
        weft_dtype dt = f ? WEFT_F32 : WEFT_F64;
        weft_tensor *t = tens(x, dt, WEFT_DIMS(9));
        wt_check_values(f ? "floor f32" : "floor f64", wt_keep(weft_floor(t)), fl, 9, 0);
        wt_check_values(f ? "ceil f32" : "ceil f64", wt_keep(weft_ceil(t)), ce, 9, 0);
        wt_check_values(f ? "round f32" : "round f64", wt_keep(weft_round(t)), ro, 9, 0);
        wt_check_values(f ? "trunc f32" : "trunc f64", wt_keep(weft_trunc(t)), tr, 9, 0);
        double a[6] = {5.5, -5.5, 5.5, -5.5, 3, -3}, b[6] = {2, 2, -2, -2, 1.5, 1.5};
        double fm[6] = {1.5, -1.5, 1.5, -1.5, 0, 0}, rm[6] = {1.5, 0.5, -0.5, -1.5, 0, 0};
        weft_tensor *ta = tens(a, dt, WEFT_DIMS(6)), *tb = tens(b, dt, WEFT_DIMS(6));
        wt_check_values(f ? "fmod f32" : "fmod f64", wt_keep(weft_fmod(ta, tb)), fm, 6, 0);
        wt_check_values(f ? "remainder f32" : "remainder f64", wt_keep(weft_remainder(ta, tb)), rm, 6, 0);
    }
    CHECK(weft_floor(wt_keep(weft_tensor_from_data((int32_t[]){1}, WEFT_DIMS(1), WEFT_I32))) == NULL); // floats only
    int32_t ia[7] = {7, -7, 7, -7, 0, INT32_MIN, 5}, ib[7] = {3, 3, -3, -3, 3, -1, 0};
    double ifm[7] = {1, -1, 1, -1, 0, 0, 0}, irm[7] = {1, 2, -2, -1, 0, 0, 0};
    weft_tensor *ta = wt_keep(weft_tensor_from_data(ia, WEFT_DIMS(7), WEFT_I32));
    weft_tensor *tb = wt_keep(weft_tensor_from_data(ib, WEFT_DIMS(7), WEFT_I32));
    wt_check_values("fmod i32 (INT_MIN by -1 and by 0: 0)", wt_keep(weft_fmod(ta, tb)), ifm, 7, 0);
    wt_check_values("remainder i32", wt_keep(weft_remainder(ta, tb)), irm, 7, 0);
    int64_t la[3] = {-(INT64_C(1) << 60) - 5, INT64_MIN, 9}, lb[3] = {INT64_C(1) << 40, -1, -4};
    double lfm[3] = {-5, 0, 1}, lrm[3] = {(double)((INT64_C(1) << 40) - 5), 0, -3};
    wt_check_values("fmod i64", wt_keep(weft_fmod(wt_keep(weft_tensor_from_data(la, WEFT_DIMS(3), WEFT_I64)),
                                                  wt_keep(weft_tensor_from_data(lb, WEFT_DIMS(3), WEFT_I64)))), lfm, 3, 0);
    wt_check_values("remainder i64", wt_keep(weft_remainder(wt_keep(weft_tensor_from_data(la, WEFT_DIMS(3), WEFT_I64)),
                                                            wt_keep(weft_tensor_from_data(lb, WEFT_DIMS(3), WEFT_I64)))), lrm, 3, 0);
    // gradients (a broadcast against b), a / b kept 0.2 or more from an integer
    double ga[6] = {5.3, -2.7, 4.1, -6.35, 0.9, 3.3}, gb[3] = {1.9, -1.3, 2.2};
    for (int rem = 0; rem < 2; rem++) {
        weft_tensor *in[2] = {wt_keep(wt_f64(ga, 2, (int64_t[]){2, 3}, true)), wt_keep(wt_f64(gb, 1, (int64_t[]){3}, true))};
        weft_status st = weft_gradcheck(mod_fn, 2, in, rem ? (void *)1 : NULL, NULL);
        if (st) fprintf(stderr, "%s grad: %s\n", rem ? "remainder" : "fmod", weft_last_error());
        CHECK(st == WEFT_OK);
    }
    wt_drop_all();
}

// ---- casts ----
static uint16_t bits16(const weft_tensor *t, int64_t i) { return ((const uint16_t *)weft_tensor_data(t))[i]; }

static void test_cast_round_trips(void) {
    double v[8] = {0, 1, -2.5, 0.15625, 1000.5, -65504, 3.0517578125e-05, 12344};
    weft_tensor *x = tens(v, WEFT_F64, WEFT_DIMS(2, 4));
    weft_dtype chain[] = {WEFT_F32, WEFT_F16, WEFT_F64, WEFT_F32, WEFT_BF16, WEFT_F32, WEFT_F64};
    // each value is exact in f32 and f16; through bf16 only a few are
    weft_tensor *cur = x;
    for (int k = 0; k < 3; k++) cur = wt_keep(weft_cast(cur, chain[k]));
    CHECK(cur && weft_tensor_dtype(cur) == WEFT_F64);
    wt_check_values("f64->f32->f16->f64 exact", cur, v, 8, 0);
    weft_tensor *b = wt_keep(weft_cast(x, WEFT_BF16)), *bb = wt_keep(weft_cast(b, WEFT_F64));
    double vb[8];
    for (int i = 0; i < 8; i++) vb[i] = weft_bf16_to_f32(weft_f32_to_bf16((float)v[i]));
    wt_check_values("f64->bf16->f64", bb, vb, 8, 0);
    CHECK(vb[1] == 1 && vb[2] == -2.5 && vb[3] == 0.15625 && vb[4] == 1000);
    // f64 -> i32 truncates toward zero; i32 <-> i64 exact at the extremes
    double w[6] = {2.7, -2.7, 0.5, -0.5, 1e9, -1e9};
    double wi[6] = {2, -2, 0, 0, 1e9, -1e9};
    weft_tensor *xw = tens(w, WEFT_F64, WEFT_DIMS(6));
    weft_tensor *i32 = wt_keep(weft_cast(xw, WEFT_I32));
    CHECK(i32 && weft_tensor_dtype(i32) == WEFT_I32);
    wt_check_values("f64->i32", i32, wi, 6, 0);
    int32_t e[4] = {INT32_MIN, INT32_MAX, 0, -5};
    weft_tensor *te = wt_keep(weft_tensor_from_data(e, WEFT_DIMS(4), WEFT_I32));
    weft_tensor *t64 = wt_keep(weft_cast(te, WEFT_I64)), *t32 = wt_keep(weft_cast(t64, WEFT_I32));
    CHECK(t64 && ((int64_t *)weft_tensor_data(t64))[0] == INT32_MIN && ((int64_t *)weft_tensor_data(t64))[1] == INT32_MAX);
    CHECK(t32 && memcmp(weft_tensor_data(t32), e, sizeof e) == 0);
    int64_t big[2] = {(1LL << 53), -(1LL << 53)};
    weft_tensor *tbig = wt_keep(weft_tensor_from_data(big, WEFT_DIMS(2), WEFT_I64));
    double rbig[2] = {9007199254740992.0, -9007199254740992.0};
    wt_check_values("i64->f64", wt_keep(weft_cast(tbig, WEFT_F64)), rbig, 2, 0);
    // i32 -> f32 -> i32, i64 -> f16 -> i64 (small integers are exact in f16)
    int32_t small[4] = {-2048, 2048, 7, 0};
    weft_tensor *ts = wt_keep(weft_tensor_from_data(small, WEFT_DIMS(4), WEFT_I32));
    weft_tensor *sf = wt_keep(weft_cast(ts, WEFT_F16)), *sb = wt_keep(weft_cast(sf, WEFT_I32));
    CHECK(sb && memcmp(weft_tensor_data(sb), small, sizeof small) == 0);
    // to bool
    double bz[4] = {0, 2, -0.5, 0}, rz[4] = {0, 1, 1, 0};
    wt_check_values("f64->bool", wt_keep(weft_cast(tens(bz, WEFT_F64, WEFT_DIMS(4)), WEFT_BOOL)), rz, 4, 0);
    // non-contiguous source keeps logical order
    weft_tensor *xt = wt_keep(weft_transpose(x, 0, 1)), *xt32 = wt_keep(weft_cast(xt, WEFT_F32));
    double rt[8];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++) rt[i * 2 + j] = v[j * 4 + i];
    CHECK(xt32 && weft_tensor_is_contiguous(xt32));
    wt_check_values("cast transposed", xt32, rt, 8, 0);
    // cast backward gives a gradient of the input's dtype
    weft_tensor *leaf = wt_keep(wt_f64(v, WEFT_DIMS(8), true));
    weft_tensor *c32 = wt_keep(weft_cast(leaf, WEFT_F32)), *s = wt_keep(weft_sum(c32, 0, NULL, false));
    CHECK(weft_backward(s, NULL, NULL) == WEFT_OK);
    weft_tensor *g = weft_tensor_grad(leaf);
    CHECK(g && weft_tensor_dtype(g) == WEFT_F64);
    double ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    wt_check_values("cast grad", g, ones, 8, 0);
    wt_drop_all();
}

static float f_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_half_bits(void) {
    struct {
        float f;
        uint16_t h;
    } cs[] = {
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {0.5f, 0x3800},
        {0.1f, 0x2e66},
        {65504.0f, 0x7bff},           // max half
        {65519.0f, 0x7bff},           // rounds down
        {65520.0f, 0x7c00},           // halfway to 65536: ties to even -> inf
        {1e6f, 0x7c00},               // overflow
        {-1e6f, 0xfc00},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {6.103515625e-05f, 0x0400},   // 2^-14, min normal
        {5.9604644775390625e-08f, 0x0001}, // 2^-24, min subnormal
        {6.0975551605224609e-05f, 0x03ff}, // largest subnormal 1023 * 2^-24
        {2.98023223876953125e-08f, 0x0000}, // 2^-25: tie -> even (0)
        {4.4703483581542969e-08f, 0x0001},  // 0.75 * 2^-24 -> 1
        {8.9406967163085938e-08f, 0x0002},  // 1.5 * 2^-24: tie -> even (2)
        {1.4901161193847656e-07f, 0x0002},  // 2.5 * 2^-24: tie -> even (2)
        {1.00048828125f, 0x3c00},     // 1 + 2^-11: tie -> even
        {1.00146484375f, 0x3c02},     // 1 + 3*2^-11: tie -> even (up)
        {1.0004892349243164f, 0x3c01}, // just above the tie
        {-1.00146484375f, 0xbc02},
        {2049.0f, 0x6800},            // tie at a power-of-two boundary: 2048
        {4095.0f, 0x6c00},            // 4094 vs 4096 tie: mantissa carry into exponent
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        uint16_t h = weft_f32_to_f16(cs[i].f);
        if (h != cs[i].h) fprintf(stderr, "f32_to_f16(%.10g) = 0x%04x, expected 0x%04x\n", cs[i].f, h, cs[i].h);
        CHECK(h == cs[i].h);
    }
    uint16_t hn = weft_f32_to_f16(NAN);
    CHECK((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) != 0);
    CHECK(isnan(weft_f16_to_f32(0x7e00)) && isnan(weft_f16_to_f32(0xfc01)));
    CHECK(weft_f16_to_f32(0x7c00) == INFINITY && weft_f16_to_f32(0xfc00) == -INFINITY);
    CHECK(weft_f16_to_f32(0x3555) == 0.333251953125f);
    CHECK(weft_f16_to_f32(0x0001) == 5.9604644775390625e-08f);
    CHECK(weft_f16_to_f32(0x8001) == -5.9604644775390625e-08f);
    CHECK(weft_f16_to_f32(0x7bff) == 65504.0f);
    CHECK(weft_f16_to_f32(0x03ff) == 6.0975551605224609e-05f);
    // every finite half value survives f16 -> f32 -> f16; NaNs stay NaN
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = weft_f16_to_f32((uint16_t)h);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            bad += !isnan(f);
            continue;
        }
        bad += weft_f32_to_f16(f) != h;
    }
    CHECK(bad == 0);
    // round to nearest (even on ties) for random floats in the half range, by brute force
    uint64_t s = 12345;
    bad = 0;
    for (int i = 0; i < 200000; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        uint32_t u = (uint32_t)(s >> 32);
        uint32_t e = 100 + (uint32_t)((s >> 20) % 42); // exponents 2^-27 .. 2^14 (no overflow)
        u = (u & 0x807fffffu) | (e << 23);
        float f = f_of(u);
        uint16_t h = weft_f32_to_f16(f);
        double d = fabs((double)f), got = fabs((double)weft_f16_to_f32(h));
        uint16_t mag = h & 0x7fff;
        double lo = mag ? weft_f16_to_f32((uint16_t)(mag - 1)) : -1, hi = weft_f16_to_f32((uint16_t)(mag + 1));
        bool ok = (h & 0x8000) == (u & 0x80000000u) >> 16 && fabs(got - d) <= fabs(lo - d) && fabs(got - d) <= fabs(hi - d);
        if (ok && (fabs(got - d) == fabs(lo - d) || fabs(got - d) == fabs(hi - d))) ok = (mag & 1) == 0;
        if (!ok && bad++ < 3) fprintf(stderr, "f32_to_f16(%.10g) = 0x%04x: not the nearest\n", f, h);
    }
    CHECK(bad == 0);
}

static void test_bf16_bits(void) {
    struct {
        float f;
        uint16_t h;
    } cs[] = {
        {1.0f, 0x3f80},
        {-2.0f, 0xc000},
        {3.0f, 0x4040},
        {0.1f, 0x3dcd},
        {1.00390625f, 0x3f80},      // 1 + 2^-8: tie -> even
        {1.01171875f, 0x3f82},      // 1 + 3*2^-8: tie -> even (up)
        {1.0039072036743164f, 0x3f81}, // just above the tie
        {INFINITY, 0x7f80},
        {-INFINITY, 0xff80},
        {3.4028234663852886e+38f, 0x7f80}, // FLT_MAX rounds up to inf
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {7.3468396e-40f, 0x0008},   // f32 subnormal 2^-130 = 0x00080000
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        uint16_t h = weft_f32_to_bf16(cs[i].f);
        if (h != cs[i].h) fprintf(stderr, "f32_to_bf16(%.10g) = 0x%04x, expected 0x%04x\n", cs[i].f, h, cs[i].h);
        CHECK(h == cs[i].h);
    }
    uint16_t hn = weft_f32_to_bf16(NAN);
    CHECK((hn & 0x7f80) == 0x7f80 && (hn & 0x7f) != 0);
    uint16_t hs = weft_f32_to_bf16(f_of(0x7f800001u)); // signalling NaN with a low payload stays NaN
    CHECK((hs & 0x7f80) == 0x7f80 && (hs & 0x7f) != 0);
    CHECK(weft_bf16_to_f32(0x3f80) == 1.0f && weft_bf16_to_f32(0xc000) == -2.0f);
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = weft_bf16_to_f32((uint16_t)h);
        if ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) {
            bad += !isnan(f);
            continue;
        }
        bad += weft_f32_to_bf16(f) != h;
    }
    CHECK(bad == 0);
}

// Tensor casts use the same conversions, and converting from f64 or integers
// rounds once (not f64 -> f32 -> f16, which can round twice).
static void test_cast_half_tensors(void) {
    double v[6] = {1.0, 65504, 65520, -INFINITY, 5.9604644775390625e-08, 1.00048828125};
    uint16_t want_h[6] = {0x3c00, 0x7bff, 0x7c00, 0xfc00, 0x0001, 0x3c00};
    weft_tensor *x32 = tens(v, WEFT_F32, WEFT_DIMS(6)), *x64 = tens(v, WEFT_F64, WEFT_DIMS(6));
    weft_tensor *h32 = wt_keep(weft_cast(x32, WEFT_F16)), *h64 = wt_keep(weft_cast(x64, WEFT_F16));
    CHECK(h32 && weft_tensor_dtype(h32) == WEFT_F16);
    for (int i = 0; h32 && h64 && i < 6; i++) {
        CHECK(bits16(h32, i) == want_h[i]);
        CHECK(bits16(h64, i) == want_h[i]);
    }
    weft_tensor *b32 = wt_keep(weft_cast(x32, WEFT_BF16));
    uint16_t want_b[6] = {0x3f80, 0x4780, 0x4780, 0xff80, 0x3380, 0x3f80};
    for (int i = 0; b32 && i < 6; i++) CHECK(bits16(b32, i) == want_b[i]);
    // back to f32 / f64
    double back[6] = {1.0, 65504, INFINITY, -INFINITY, 5.9604644775390625e-08, 1.0};
    wt_check_values("f16->f32", wt_keep(weft_cast(h32, WEFT_F32)), back, 6, 0);
    wt_check_values("f16->f64", wt_keep(weft_cast(h64, WEFT_F64)), back, 6, 0);
    // NaN through f16 and bf16
    double nn = NAN;
    weft_tensor *xn = tens(&nn, WEFT_F64, WEFT_DIMS(1));
    weft_tensor *hn = wt_keep(weft_cast(xn, WEFT_F16)), *bn = wt_keep(weft_cast(xn, WEFT_BF16));
    CHECK(hn && isnan(weft_tensor_item(hn)) && bn && isnan(weft_tensor_item(bn)));
    // double rounding: 1 + 2^-11 + 2^-40 is above the tie, so it rounds up to 0x3c01
    double dr[2] = {1.0 + ldexp(1, -11) + ldexp(1, -40), -(1.0 + ldexp(1, -11) + ldexp(1, -40))};
    weft_tensor *xd = tens(dr, WEFT_F64, WEFT_DIMS(2)), *hd = wt_keep(weft_cast(xd, WEFT_F16));
    CHECK(hd && bits16(hd, 0) == 0x3c01 && bits16(hd, 1) == 0xbc01);
    double drb = 1.0 + ldexp(1, -8) + ldexp(1, -40);
    weft_tensor *xb = tens(&drb, WEFT_F64, WEFT_DIMS(1)), *hb = wt_keep(weft_cast(xb, WEFT_BF16));
    CHECK(hb && bits16(hb, 0) == 0x3f81);
    // A long contiguous f32 run (the vectorised cast) against rounding by value:
    // the nearer of the two bf16 neighbours, the even one on a tie; NaN stays NaN.
    enum { NR = 1000 };
    float fr[NR];
    for (int i = 0; i < NR; i++) {
        uint32_t u = 0x3f800000u + (uint32_t)i * 0x9e3779u % 0x2000000u; // [1, 4): every low-bit pattern
        if (i % 7 == 0) u = (u & ~0xffffu) | 0x8000u;                  // exact ties
        if (i % 11 == 0) u |= 0x80000000u;                              // negatives
        memcpy(&fr[i], &u, 4);
    }
    fr[5] = NAN, fr[6] = INFINITY, fr[8] = 0;
    weft_tensor *xf = wt_keep(weft_tensor_from_data(fr, WEFT_DIMS(NR), WEFT_F32)), *bf = wt_keep(weft_cast(xf, WEFT_BF16));
    weft_tensor *fb = bf ? wt_keep(weft_cast(bf, WEFT_F32)) : NULL;
    int wrong = 0;
    for (int i = 0; bf && fb && i < NR; i++) {
        uint32_t u;
        memcpy(&u, &fr[i], 4);
        uint32_t lo = u & ~0xffffu, hi = lo + 0x10000u;
        float flo, fhi;
        memcpy(&flo, &lo, 4), memcpy(&fhi, &hi, 4);
        double dl = fabs((double)fr[i] - flo), dh = fabs((double)fhi - fr[i]);
        uint16_t want = (uint16_t)((dl < dh || (dl == dh && !(lo & 0x10000u)) ? lo : hi) >> 16);
        if (isinf(fr[i])) want = (uint16_t)(u >> 16);
        if (isnan(fr[i])) wrong += !isnan(((const float *)weft_tensor_data(fb))[i]);
        else wrong += bits16(bf, i) != want || ((const float *)weft_tensor_data(fb))[i] != weft_bf16_to_f32(want);
    }
    CHECK(bf && fb && wrong == 0);
    int32_t iv = (1 << 24) + (1 << 16) + 1; // above the bf16 tie; f32 alone would land on it
    weft_tensor *ti = wt_keep(weft_tensor_from_data(&iv, WEFT_DIMS(1), WEFT_I32)), *tib = wt_keep(weft_cast(ti, WEFT_BF16));
    CHECK(tib && bits16(tib, 0) == 0x4b81);
    // f16 <-> bf16 directly
    weft_tensor *hb2 = wt_keep(weft_cast(h32, WEFT_BF16));
    uint16_t want_hb[6] = {0x3f80, 0x4780, 0x7f80, 0xff80, 0x3380, 0x3f80};
    for (int i = 0; hb2 && i < 6; i++) CHECK(bits16(hb2, i) == want_hb[i]);
    wt_drop_all();
}

// Empty tensors (a size-0 dim) go through every path without touching memory.
static void test_empty(void) {
    weft_tensor *x = wt_keep(weft_tensor_zeros(WEFT_DIMS(0, 3), WEFT_F32)), *b = wt_keep(weft_tensor_ones(WEFT_DIMS(3), WEFT_F32));
    weft_tensor *e = wt_keep(weft_exp(x)), *s = wt_keep(weft_add(x, b)), *c = wt_keep(weft_lt(x, b));
    CHECK(e && weft_tensor_numel(e) == 0 && weft_tensor_size(e, 1) == 3);
    CHECK(s && weft_tensor_numel(s) == 0 && weft_tensor_ndim(s) == 2);
    CHECK(c && weft_tensor_numel(c) == 0 && weft_tensor_dtype(c) == WEFT_BOOL);
    weft_tensor *w = wt_keep(weft_where(c, x, b)), *h = wt_keep(weft_cast(x, WEFT_F16)), *xt = wt_keep(weft_transpose(x, 0, 1));
    CHECK(w && weft_tensor_numel(w) == 0);
    CHECK(h && weft_tensor_numel(h) == 0);
    CHECK(xt && weft_tensor_numel(wt_keep(weft_tensor_contiguous(xt))) == 0);
    wt_drop_all();
}

int main(void) {
    RUN(test_empty);
    RUN(test_unary_forward);
    RUN(test_unary_large_threaded);
    RUN(test_unary_special_values);
    RUN(test_unary_grad);
    RUN(test_unary_second_order);
    RUN(test_binary_forward);
    RUN(test_binary_noncontig);
    RUN(test_binary_large_threaded);
    RUN(test_relu_backward);
    RUN(test_gelu_backward);
    RUN(test_gelu_tanh_backward);
    RUN(test_erf);
    RUN(test_half);
    RUN(test_streaming_store_path);
    RUN(test_binary_grad);
    RUN(test_minmax_ties_nan);
    RUN(test_compare);
    RUN(test_where);
    RUN(test_integer);
    RUN(test_rounding_mod);
    RUN(test_cast_round_trips);
    RUN(test_half_bits);
    RUN(test_bf16_bits);
    RUN(test_cast_half_tensors);
    return wt_summary();
}
