// Tensor creation: constant fills, arange, from_data, scalars, *_like, and the
// counter-based random numbers (reproducible, thread-count independent,
// right distribution); f16/bf16 storage.
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

static double *values(const weft_tensor *t) {
    int64_t n = weft_tensor_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (weft_tensor_to_f64(t, v, n) != WEFT_OK) memset(v, 0, sizeof(double) * (size_t)n);
    return v;
}
static bool all_equal(const weft_tensor *t, double x) {
    if (!t) return false;
    double *v = values(t);
    bool ok = true;
    for (int64_t i = 0; i < weft_tensor_numel(t); i++) ok = ok && v[i] == x;
    free(v);
    return ok;
}
static bool same_values(const weft_tensor *a, const weft_tensor *b) {
    if (!a || !b || weft_tensor_numel(a) != weft_tensor_numel(b)) return false;
    double *x = values(a), *y = values(b);
    bool ok = memcmp(x, y, sizeof(double) * (size_t)weft_tensor_numel(a)) == 0;
    free(x);
    free(y);
    return ok;
}

static void test_constants(void) {
    const weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_I32, WEFT_I64, WEFT_BOOL, WEFT_U8, WEFT_F16, WEFT_BF16};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        weft_dtype dt = dts[i];
        weft_tensor *z = wt_keep(weft_tensor_zeros(WEFT_DIMS(3, 5), dt)), *o = wt_keep(weft_tensor_ones(WEFT_DIMS(3, 5), dt));
        weft_tensor *f = wt_keep(weft_tensor_full(WEFT_DIMS(2, 2, 2), dt, 3));
        CHECK(z && weft_tensor_dtype(z) == dt && weft_tensor_numel(z) == 15 && weft_tensor_is_contiguous(z));
        CHECK(all_equal(z, 0) && all_equal(o, 1));
        CHECK(all_equal(f, dt == WEFT_BOOL ? 1 : 3));
        CHECK(weft_tensor_device(z).type == WEFT_CPU);
    }
    CHECK(all_equal(wt_keep(weft_tensor_full(WEFT_DIMS(4), WEFT_F32, -2.5)), -2.5));
    CHECK(all_equal(wt_keep(weft_tensor_full(WEFT_DIMS(4), WEFT_I32, 3.7)), 3)); // truncates
    CHECK(all_equal(wt_keep(weft_tensor_full(WEFT_DIMS(4), WEFT_F16, 0.1)), (double)weft_f16_to_f32(0x2e66)));
    weft_tensor *h = wt_keep(weft_tensor_full(WEFT_DIMS(3), WEFT_F16, 0.5)), *b = wt_keep(weft_tensor_full(WEFT_DIMS(3), WEFT_BF16, -2));
    CHECK(h && ((uint16_t *)weft_tensor_data(h))[2] == 0x3800);
    CHECK(b && ((uint16_t *)weft_tensor_data(b))[0] == 0xc000);
    weft_tensor *s = wt_keep(weft_tensor_scalar(4.25, WEFT_F64));
    CHECK(s && weft_tensor_ndim(s) == 0 && weft_tensor_numel(s) == 1 && weft_tensor_item(s) == 4.25);
    weft_tensor *si = wt_keep(weft_tensor_scalar(-7, WEFT_I64));
    CHECK(si && weft_tensor_dtype(si) == WEFT_I64 && weft_tensor_item(si) == -7);
    weft_tensor *e = wt_keep(weft_tensor_zeros(WEFT_DIMS(0, 4), WEFT_F32));
    CHECK(e && weft_tensor_numel(e) == 0 && weft_tensor_size(e, 1) == 4);
    // fill_ / zero_ through a non-contiguous view only touch the view
    weft_tensor *m = wt_keep(weft_tensor_zeros(WEFT_DIMS(3, 4), WEFT_F64)), *col = wt_keep(weft_slice(m, 1, 1, 4, 2));
    CHECK(weft_tensor_fill_(col, 9) == WEFT_OK);
    double *v = values(m);
    double ref[12] = {0, 9, 0, 9, 0, 9, 0, 9, 0, 9, 0, 9};
    CHECK(memcmp(v, ref, sizeof ref) == 0);
    free(v);
    CHECK(weft_tensor_zero_(col) == WEFT_OK && all_equal(m, 0));
    wt_drop_all();
}

static void test_arange(void) {
    double r1[5] = {0, 1, 2, 3, 4};
    weft_tensor *a = wt_keep(weft_tensor_arange(0, 5, 1, WEFT_I64));
    CHECK(a && weft_tensor_dtype(a) == WEFT_I64 && weft_tensor_ndim(a) == 1);
    wt_check_values("arange i64", a, r1, 5, 0);
    double r2[4] = {1, 1.25, 1.5, 1.75};
    wt_check_values("arange f64 step", wt_keep(weft_tensor_arange(1, 2, 0.25, WEFT_F64)), r2, 4, 0);
    double r3[4] = {5, 3.5, 2, 0.5};
    wt_check_values("arange negative step", wt_keep(weft_tensor_arange(5, 0, -1.5, WEFT_F32)), r3, 4, 0);
    double r4[3] = {0, 0.1, 0.2};
    wt_check_values("arange 0.1", wt_keep(weft_tensor_arange(0, 0.3, 0.1, WEFT_F64)), r4, 3, 1e-15);
    weft_tensor *em = wt_keep(weft_tensor_arange(3, 3, 1, WEFT_F32)), *em2 = wt_keep(weft_tensor_arange(3, 0, 1, WEFT_F32));
    CHECK(em && weft_tensor_numel(em) == 0 && em2 && weft_tensor_numel(em2) == 0);
    weft_clear_error();
    CHECK(weft_tensor_arange(0, 1, 0, WEFT_F32) == NULL && strstr(weft_last_error(), "arange"));
    weft_clear_error();
    CHECK(weft_tensor_arange(0, INFINITY, 1, WEFT_F32) == NULL && strstr(weft_last_error(), "arange"));
    weft_clear_error();
    CHECK(weft_tensor_arange(0, 1e300, 1e-10, WEFT_F32) == NULL && strstr(weft_last_error(), "arange"));
    wt_drop_all();
}

static void test_from_data_like(void) {
    float f[6] = {1, 2, 3, 4, 5, 6};
    weft_tensor *t = wt_keep(weft_tensor_from_data(f, WEFT_DIMS(2, 3), WEFT_F32));
    CHECK(t && weft_tensor_dtype(t) == WEFT_F32 && weft_tensor_is_contiguous(t));
    CHECK(t && memcmp(weft_tensor_data(t), f, sizeof f) == 0);
    f[0] = 100; // a copy, not a borrow
    CHECK(t && ((float *)weft_tensor_data(t))[0] == 1);
    uint16_t hb[3] = {0x3c00, 0xc000, 0x7bff};
    weft_tensor *h = wt_keep(weft_tensor_from_data(hb, WEFT_DIMS(3), WEFT_F16));
    double rh[3] = {1, -2, 65504};
    wt_check_values("from_data f16", h, rh, 3, 0);
    uint16_t bb[2] = {0x3f80, 0x4040};
    double rb[2] = {1, 3};
    wt_check_values("from_data bf16", wt_keep(weft_tensor_from_data(bb, WEFT_DIMS(2), WEFT_BF16)), rb, 2, 0);
    weft_tensor *tt = wt_keep(weft_transpose(t, 0, 1));
    weft_tensor *z = wt_keep(weft_tensor_zeros_like(tt)), *o = wt_keep(weft_tensor_ones_like(tt)), *e = wt_keep(weft_tensor_empty_like(tt));
    for (int k = 0; k < 3; k++) {
        weft_tensor *x = k == 0 ? z : k == 1 ? o : e;
        CHECK(x && weft_tensor_dtype(x) == WEFT_F32 && weft_tensor_size(x, 0) == 3 && weft_tensor_size(x, 1) == 2);
        CHECK(x && weft_tensor_is_contiguous(x) && !weft_tensor_shares_storage(x, t));
    }
    CHECK(all_equal(z, 0) && all_equal(o, 1));
    weft_clear_error();
    CHECK(weft_tensor_from_data(NULL, WEFT_DIMS(2), WEFT_F32) == NULL && weft_last_error()[0]);
    weft_clear_error();
    CHECK(weft_tensor_zeros(WEFT_DIMS(2, -1), WEFT_F32) == NULL && weft_last_error()[0]);
    weft_clear_error();
    CHECK(weft_tensor_zeros(WEFT_DIMS(1, 1, 1, 1, 1, 1, 1, 1, 1), WEFT_F32) == NULL && weft_last_error()[0]);
    weft_clear_error();
    CHECK(weft_tensor_zeros(WEFT_DIMS(2), (weft_dtype)99) == NULL && weft_last_error()[0]);
    weft_clear_error();
    CHECK(weft_tensor_zeros_like(NULL) == NULL && weft_last_error()[0]);
    wt_drop_all();
}

static void test_random_reproducible(void) {
    weft_generator *g1 = weft_generator_create(42), *g2 = weft_generator_create(42), *g3 = weft_generator_create(43);
    const int64_t sz[2] = {100, 37};
    weft_tensor *a = wt_keep(weft_tensor_rand(2, sz, WEFT_F32, g1)), *b = wt_keep(weft_tensor_rand(2, sz, WEFT_F32, g2));
    weft_tensor *c = wt_keep(weft_tensor_rand(2, sz, WEFT_F32, g3));
    CHECK(same_values(a, b));
    CHECK(!same_values(a, c));
    // the generator advances: the next call differs; resetting the state replays it
    weft_tensor *a2 = wt_keep(weft_tensor_rand(2, sz, WEFT_F32, g1));
    CHECK(!same_values(a, a2));
    uint64_t seed, off;
    weft_generator_get_state(g1, &seed, &off);
    CHECK(seed == 42 && off > 0);
    weft_generator_set_state(g2, 42, 0);
    weft_tensor *b2 = wt_keep(weft_tensor_rand(2, sz, WEFT_F32, g2));
    CHECK(same_values(a, b2));
    // element i depends only on (seed, offset + i): a 2-call split equals one call
    weft_generator_set_state(g2, 42, 0);
    weft_tensor *whole = wt_keep(weft_tensor_randn(WEFT_DIMS(200), WEFT_F64, g2));
    weft_generator_set_state(g2, 42, 0);
    weft_tensor *h1 = wt_keep(weft_tensor_randn(WEFT_DIMS(120), WEFT_F64, g2)), *h2 = wt_keep(weft_tensor_randn(WEFT_DIMS(80), WEFT_F64, g2));
    double *w = values(whole), *p1 = values(h1), *p2 = values(h2);
    CHECK(memcmp(w, p1, 120 * sizeof(double)) == 0 && memcmp(w + 120, p2, 80 * sizeof(double)) == 0);
    free(w);
    free(p1);
    free(p2);
    // default generator + manual_seed
    weft_manual_seed(7);
    weft_tensor *d1 = wt_keep(weft_tensor_randn(2, sz, WEFT_F64, NULL));
    weft_manual_seed(7);
    weft_tensor *d2 = wt_keep(weft_tensor_randn(2, sz, WEFT_F64, weft_generator_default()));
    CHECK(same_values(d1, d2));
    // filling a non-contiguous view gives, in logical order, the values of a fresh tensor
    weft_generator_set_state(g2, 5, 0);
    weft_tensor *base = wt_keep(weft_tensor_zeros(WEFT_DIMS(37, 100), WEFT_F32)), *view = wt_keep(weft_transpose(base, 0, 1));
    CHECK(weft_tensor_uniform_(view, 0, 1, g2) == WEFT_OK);
    weft_generator_set_state(g2, 5, 0);
    weft_tensor *fresh = wt_keep(weft_tensor_rand(2, sz, WEFT_F32, g2));
    CHECK(same_values(view, fresh));
    weft_generator_free(g1);
    weft_generator_free(g2);
    weft_generator_free(g3);
    wt_drop_all();
}

// The same seed gives the same values with 1 and 2 threads (200k elements, so the fill is threaded).
static void test_random_thread_independent(void) {
    const int64_t n = 200000;
    int prev = weft_num_threads();
    weft_tensor *r[2][4];
    for (int k = 0; k < 2; k++) {
        weft_set_num_threads(k + 1);
        CHECK(weft_num_threads() == k + 1);
        weft_generator *g = weft_generator_create(99);
        r[k][0] = wt_keep(weft_tensor_rand(1, &n, WEFT_F32, g));
        r[k][1] = wt_keep(weft_tensor_randn(1, &n, WEFT_F64, g));
        r[k][2] = wt_keep(weft_tensor_randint(1, &n, -5, 1000, WEFT_I64, g));
        r[k][3] = wt_keep(weft_tensor_randn(1, &n, WEFT_BF16, g));
        weft_generator_free(g);
    }
    weft_set_num_threads(prev);
    for (int j = 0; j < 4; j++) CHECK(same_values(r[0][j], r[1][j]));
    wt_drop_all();
}

static void test_random_distribution(void) {
    const int64_t n = 1000000;
    weft_generator *g = weft_generator_create(2024);
    weft_tensor *x = wt_keep(weft_tensor_randn(1, &n, WEFT_F64, g));
    double *v = values(x), s = 0, ss = 0, s4 = 0;
    for (int64_t i = 0; i < n; i++) s += v[i];
    double mean = s / (double)n;
    for (int64_t i = 0; i < n; i++) ss += (v[i] - mean) * (v[i] - mean), s4 += pow(v[i] - mean, 4);
    double var = ss / (double)n;
    // standard errors: mean 1e-3, std ~7e-4, kurtosis ~5e-3; allow ~5 sigma
    CHECK(fabs(mean) < 5e-3);
    CHECK(fabs(sqrt(var) - 1) < 4e-3);
    CHECK(fabs(s4 / (double)n / (var * var) - 3) < 0.03);
    free(v);
    // uniform: [0,1), mean 1/2, var 1/12; in f32 too
    weft_tensor *u = wt_keep(weft_tensor_rand(1, &n, WEFT_F32, g));
    v = values(u);
    double lo = 1, hi = 0;
    s = ss = 0;
    for (int64_t i = 0; i < n; i++) {
        s += v[i], ss += v[i] * v[i];
        if (v[i] < lo) lo = v[i];
        if (v[i] > hi) hi = v[i];
    }
    mean = s / (double)n;
    CHECK(lo >= 0 && hi < 1 && lo < 1e-4 && hi > 1 - 1e-4);
    CHECK(fabs(mean - 0.5) < 2e-3 && fabs(ss / (double)n - mean * mean - 1.0 / 12) < 2e-3);
    free(v);
    // normal_ / uniform_ with parameters
    weft_tensor *y = wt_keep(weft_tensor_empty(WEFT_DIMS(500, 200), WEFT_F64));
    CHECK(weft_tensor_normal_(y, 3, 0.5, g) == WEFT_OK);
    weft_tensor *m = wt_keep(weft_mean(y, 0, NULL, false)), *vr = wt_keep(weft_var(y, 0, NULL, 1, false));
    CHECK(fabs(weft_tensor_item(m) - 3) < 0.01 && fabs(sqrt(weft_tensor_item(vr)) - 0.5) < 0.01);
    CHECK(weft_tensor_uniform_(y, -2, -1, g) == WEFT_OK);
    weft_tensor *mx = wt_keep(weft_max(y, 0, NULL, false)), *mn = wt_keep(weft_min(y, 0, NULL, false));
    CHECK(weft_tensor_item(mx) < -1 && weft_tensor_item(mn) >= -2);
    weft_generator_free(g);
    wt_drop_all();
}

static void test_randint(void) {
    weft_generator *g = weft_generator_create(3);
    const int64_t n = 20000;
    const weft_dtype dts[3] = {WEFT_I64, WEFT_I32, WEFT_U8};
    for (int k = 0; k < 3; k++) {
        int64_t lo = dts[k] == WEFT_U8 ? 0 : -3, hi = 4;
        weft_tensor *r = wt_keep(weft_tensor_randint(1, &n, lo, hi, dts[k], g));
        CHECK(r && weft_tensor_dtype(r) == dts[k]);
        double *v = values(r);
        int count[16] = {0};
        bool in = true;
        for (int64_t i = 0; i < n; i++) {
            in = in && v[i] >= lo && v[i] < hi && v[i] == floor(v[i]);
            if (in) count[(int)(v[i] - lo)]++;
        }
        CHECK(in);
        for (int64_t c = 0; c < hi - lo; c++) // each value about n / (hi - lo) times
            CHECK(fabs(count[c] - (double)n / (double)(hi - lo)) < 0.1 * (double)n / (double)(hi - lo));
        free(v);
    }
    // a wide range stays inside [lo, hi)
    weft_tensor *w = wt_keep(weft_tensor_randint(1, &n, -(1LL << 40), (1LL << 40) + 1, WEFT_I64, g));
    weft_tensor *wmax = wt_keep(weft_max(w, 0, NULL, false)), *wmin = wt_keep(weft_min(w, 0, NULL, false));
    CHECK(w && weft_tensor_item(wmax) <= (double)(1LL << 40) && weft_tensor_item(wmin) >= -(double)(1LL << 40));
    weft_clear_error();
    CHECK(weft_tensor_randint(1, &n, 5, 5, WEFT_I64, g) == NULL && strstr(weft_last_error(), "randint"));
    weft_clear_error();
    CHECK(weft_tensor_randint(1, &n, 0, 5, WEFT_F32, g) == NULL && strstr(weft_last_error(), "randint"));
    weft_clear_error();
    CHECK(weft_tensor_rand(1, &n, WEFT_I32, g) == NULL && strstr(weft_last_error(), "rand"));
    weft_clear_error();
    CHECK(weft_tensor_randn(1, &n, WEFT_I64, g) == NULL && strstr(weft_last_error(), "randn"));
    weft_generator_free(g);
    wt_drop_all();
}

// f16/bf16 storage tensors: random fills stay in range after rounding to the dtype.
static void test_half_storage(void) {
    weft_generator *g = weft_generator_create(11);
    const int64_t n = 200000;
    const weft_dtype dts[2] = {WEFT_F16, WEFT_BF16};
    for (int k = 0; k < 2; k++) {
        weft_tensor *u = wt_keep(weft_tensor_rand(1, &n, dts[k], g));
        CHECK(u && weft_tensor_dtype(u) == dts[k]);
        double *v = values(u), lo = 1, hi = 0, s = 0;
        for (int64_t i = 0; i < n; i++) {
            s += v[i];
            if (v[i] < lo) lo = v[i];
            if (v[i] > hi) hi = v[i];
        }
        if (hi >= 1) fprintf(stderr, "rand %s reached %g\n", weft_dtype_name(dts[k]), hi);
        CHECK(lo >= 0 && hi < 1);
        CHECK(fabs(s / (double)n - 0.5) < 5e-3);
        free(v);
        weft_tensor *r = wt_keep(weft_tensor_randn(WEFT_DIMS(400, 500), dts[k], g));
        weft_tensor *r64 = wt_keep(weft_cast(r, WEFT_F64)), *m = wt_keep(weft_mean(r64, 0, NULL, false));
        weft_tensor *vr = wt_keep(weft_var(r64, 0, NULL, 0, false));
        CHECK(fabs(weft_tensor_item(m)) < 0.01 && fabs(weft_tensor_item(vr) - 1) < 0.02);
        // views and element access on half storage
        weft_tensor *t = wt_keep(weft_tensor_zeros(WEFT_DIMS(4, 3), dts[k])), *tt = wt_keep(weft_transpose(t, 0, 1));
        CHECK(weft_tensor_set(tt, (int64_t[]){2, 1}, 1.5) == WEFT_OK);
        double got = 0;
        CHECK(weft_tensor_get(t, (int64_t[]){1, 2}, &got) == WEFT_OK && got == 1.5);
    }
    weft_generator_free(g);
    wt_drop_all();
}

int main(void) {
    RUN(test_constants);
    RUN(test_arange);
    RUN(test_from_data_like);
    RUN(test_random_reproducible);
    RUN(test_random_thread_independent);
    RUN(test_random_distribution);
    RUN(test_randint);
    RUN(test_half_storage);
    return wt_summary();
}
