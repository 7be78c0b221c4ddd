// Generated kernels (src/kgen, weft/kgen.h): the f64 reference against closed
// forms, every schedule's generated code against the reference bit for bit
// (integer-valued data, so every summation order gives the same floats), a
// padded convolution and a matmul against weft's own ops, the auto-tuner and
// its log, and the errors. Kernels are compiled by the system's C compiler;
// without one the compiling tests are skipped.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../weft_test.h"
#include <weft/kgen.h>

typedef weft_kg_expr E;

// Small integers (exact in f32 through any sum of a few thousand products).
static float *ints(int64_t n, int lo, int hi, uint32_t seed) {
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = (float)(lo + (int)((seed >> 8) % (uint32_t)(hi - lo + 1)));
    }
    return v;
}

// relu(A @ B + bias), A (M,K), B (K,N).
static weft_kg *matmul_def(int64_t M, int64_t N, int64_t K, bool epilogue) {
    weft_kg *kg = weft_kg_new("mm");
    int A = weft_kg_input(kg, "A", 2, (int64_t[]){M, K}), B = weft_kg_input(kg, "B", 2, (int64_t[]){K, N});
    int bias = epilogue ? weft_kg_input(kg, "bias", 1, (int64_t[]){N}) : -1;
    E *i = weft_kg_axis(kg, "i", M), *j = weft_kg_axis(kg, "j", N), *k = weft_kg_reduce_axis(kg, "k", K);
    E *body = weft_kg_bin(kg, WEFT_KG_MUL, weft_kg_load(kg, A, (E *[]){i, k}), weft_kg_load(kg, B, (E *[]){k, j}));
    E *epi = NULL;
    if (epilogue)
        epi = weft_kg_bin(kg, WEFT_KG_MAX,
                          weft_kg_bin(kg, WEFT_KG_ADD, weft_kg_acc(kg), weft_kg_load(kg, bias, (E *[]){j})),
                          weft_kg_const(kg, 0));
    CHECK(weft_kg_compute(kg, 2, (E *[]){i, j}, WEFT_KG_SUM, body, epi) == WEFT_OK);
    return kg;
}

static void test_reference(void) {
    int64_t M = 7, N = 5, K = 6;
    weft_kg *kg = matmul_def(M, N, K, true);
    float *a = ints(M * K, -4, 4, 1), *b = ints(K * N, -3, 3, 2), *bias = ints(N, -20, 20, 3), out[35];
    CHECK(weft_kg_reference(kg, (const float *[]){a, b, bias}, out) == WEFT_OK);
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = bias[j];
            for (int k = 0; k < K; k++) s += (double)a[i * K + k] * b[k * N + j];
            bad += out[i * N + j] != (float)(s > 0 ? s : 0);
        }
    CHECK(bad == 0);
    int64_t shape[WEFT_MAX_DIMS];
    CHECK(weft_kg_out_shape(kg, shape) == 2 && shape[0] == M && shape[1] == N);
    weft_kg_free(kg);

    // a row max (a reduction by max) and an element-wise map with no reduction
    weft_kg *mx = weft_kg_new("rowmax");
    int X = weft_kg_input(mx, "X", 2, (int64_t[]){4, 9});
    E *r = weft_kg_axis(mx, "r", 4), *c = weft_kg_reduce_axis(mx, "c", 9);
    CHECK(weft_kg_compute(mx, 1, (E *[]){r}, WEFT_KG_MAXRED, weft_kg_load(mx, X, (E *[]){r, c}), NULL) == WEFT_OK);
    float *x = ints(36, -50, 50, 4), m[4];
    CHECK(weft_kg_reference(mx, (const float *[]){x}, m) == WEFT_OK);
    for (int i = 0; i < 4; i++) {
        float want = x[i * 9];
        for (int j = 1; j < 9; j++) want = x[i * 9 + j] > want ? x[i * 9 + j] : want;
        CHECK(m[i] == want);
    }
    weft_kg_free(mx);
    free(a), free(b), free(bias), free(x);
}

typedef struct sched_case {
    const char *what;
    void (*make)(weft_kg_sched *s);
} sched_case;

static weft_kg_loop L(weft_kg_sched *s, const char *n) { return weft_kg_get_loop(s, n); }

static void tiled(weft_kg_sched *s) {
    weft_kg_loop io, ii, jo, ji, ko, ki;
    CHECK(weft_kg_split(s, L(s, "i"), 4, &io, &ii) == WEFT_OK);
    CHECK(weft_kg_split(s, L(s, "j"), 8, &jo, &ji) == WEFT_OK);
    CHECK(weft_kg_split(s, L(s, "k"), 5, &ko, &ki) == WEFT_OK);
    CHECK(weft_kg_reorder(s, 6, (weft_kg_loop[]){io, jo, ko, ki, ii, ji}) == WEFT_OK);
    CHECK(weft_kg_vectorize(s, ji) == WEFT_OK);
    CHECK(weft_kg_unroll(s, ii) == WEFT_OK);
    CHECK(weft_kg_parallel(s, io) == WEFT_OK);
}
static void tiled_cached(weft_kg_sched *s) {
    tiled(s);
    CHECK(weft_kg_cache_write(s, L(s, "j.o")) == WEFT_OK);
}
static void reduce_outermost(weft_kg_sched *s) {
    CHECK(weft_kg_reorder(s, 3, (weft_kg_loop[]){L(s, "k"), L(s, "i"), L(s, "j")}) == WEFT_OK);
    CHECK(weft_kg_vectorize(s, L(s, "j")) == WEFT_OK);
}
static void nested_split(weft_kg_sched *s) {
    weft_kg_loop jo, ji, jio, jii;
    CHECK(weft_kg_split(s, L(s, "j"), 8, &jo, &ji) == WEFT_OK);
    CHECK(weft_kg_split(s, ji, 3, &jio, &jii) == WEFT_OK);
    CHECK(weft_kg_reorder(s, 4, (weft_kg_loop[]){jii, L(s, "k"), jo, jio}) == WEFT_OK);
    CHECK(weft_kg_cache_write(s, L(s, "i")) == WEFT_OK);
}
// An inner loop split again by a factor that does not divide it: its part must stop at its own extent
// (review, 2026-11-28: i.i of 4 split by 3 ran 0..5 and met the next i.o's rows).
static void inner_tail(weft_kg_sched *s) {
    weft_kg_loop io, ii, iio, iii;
    CHECK(weft_kg_split(s, L(s, "i"), 4, &io, &ii) == WEFT_OK);
    CHECK(weft_kg_split(s, ii, 3, &iio, &iii) == WEFT_OK);
}
static void reduce_inner_tail(weft_kg_sched *s) {
    weft_kg_loop ko, ki, kio, kii;
    CHECK(weft_kg_split(s, L(s, "k"), 4, &ko, &ki) == WEFT_OK);
    CHECK(weft_kg_split(s, ki, 3, &kio, &kii) == WEFT_OK);
    CHECK(weft_kg_parallel(s, L(s, "i")) == WEFT_OK);
    CHECK(weft_kg_cache_write(s, L(s, "i")) == WEFT_OK);
}
static void row_cached(weft_kg_sched *s) {
    CHECK(weft_kg_cache_write(s, L(s, "i")) == WEFT_OK);
    CHECK(weft_kg_parallel(s, L(s, "i")) == WEFT_OK);
}

// Operand packing: B's (k, j) panel at k.o, A's rows at i.o (inside a parallel loop: one copy per thread).
static void packed(weft_kg_sched *s) {
    tiled(s);
    CHECK(weft_kg_cache_read(s, 1, L(s, "k.o")) == WEFT_OK);
    CHECK(weft_kg_cache_read(s, 0, L(s, "i.o")) == WEFT_OK);
}
// B's whole column panel at j.o, under a local tile; the bias (read by the epilogue, after the nest) is not copied.
static void packed_cached(weft_kg_sched *s) {
    tiled_cached(s);
    CHECK(weft_kg_cache_read(s, 1, L(s, "j.o")) == WEFT_OK);
    CHECK(weft_kg_cache_read(s, 2, L(s, "j.o")) == WEFT_OK);
}
// Placed at a loop, then that loop split: the copy moves to the outer loop.
static void packed_then_split(weft_kg_sched *s) {
    CHECK(weft_kg_cache_read(s, 0, L(s, "i")) == WEFT_OK);
    weft_kg_loop io, ii;
    CHECK(weft_kg_split(s, L(s, "i"), 6, &io, &ii) == WEFT_OK);
}

static void test_schedules(void) {
    int64_t M = 37, N = 29, K = 23; // primes: every split leaves a tail
    weft_kg *kg = matmul_def(M, N, K, true);
    float *a = ints(M * K, -4, 4, 11), *b = ints(K * N, -4, 4, 12), *bias = ints(N, -30, 30, 13);
    float *ref = malloc(M * N * 4), *out = malloc(M * N * 4);
    const float *in[] = {a, b, bias};
    CHECK(weft_kg_reference(kg, in, ref) == WEFT_OK);
    sched_case cases[] = {{"default", NULL},
                          {"tiled", tiled},
                          {"tiled_cached", tiled_cached},
                          {"reduce_outermost", reduce_outermost},
                          {"nested_split", nested_split},
                          {"inner_tail", inner_tail},
                          {"reduce_inner_tail", reduce_inner_tail},
                          {"row_cached", row_cached},
                          {"packed", packed},
                          {"packed_cached", packed_cached},
                          {"packed_then_split", packed_then_split}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        weft_kg_sched *s = weft_kg_schedule(kg);
        if (cases[c].make) cases[c].make(s);
        char desc[256];
        weft_kg_sched_str(s, desc, sizeof desc);
        weft_kg_kernel *k = weft_kg_build(s);
        CHECK(k != NULL);
        memset(out, 0xff, M * N * 4); // NaN: every element must be written
        if (k) CHECK(weft_kg_run_raw(k, in, out) == WEFT_OK);
        int bad = 0;
        for (int i = 0; i < M * N; i++) bad += memcmp(&out[i], &ref[i], 4) != 0;
        if (bad) fprintf(stderr, "schedule %s (%s): %d of %lld differ\n", cases[c].what, desc, bad, (long long)(M * N));
        CHECK(bad == 0);
        weft_kg_kernel_free(k);
        weft_kg_sched_free(s);
    }
    // the schedule's text says what was asked for
    weft_kg_sched *s = weft_kg_schedule(kg);
    tiled_cached(s);
    char desc[256];
    CHECK(!strcmp(weft_kg_sched_str(s, desc, sizeof desc), "i.o(par) j.o k.o k.i i.i(unroll) j.i(vec) cache@j.o"));
    char *src = weft_kg_source(s);
    CHECK(src && strstr(src, "#pragma omp simd") && strstr(src, "#pragma GCC unroll 4") && strstr(src, "float acc_[32];"));
    free(src);
    weft_kg_sched_free(s);
    s = weft_kg_schedule(kg);
    packed(s);
    CHECK(!strcmp(weft_kg_sched_str(s, desc, sizeof desc),
                  "i.o(par) j.o k.o k.i i.i(unroll) j.i(vec) read:A@i.o read:B@k.o"));
    src = weft_kg_source(s); // B: the 5 k of k.o by the 8 j of j.o; A: 4 rows by the 25 k of k.o * k.i (a tail past 23)
    CHECK(src && strstr(src, "float L_B[40];") && strstr(src, "float L_A[100];") &&
          strstr(src, "const int64_t Ls_B_0 = 0 + l7 * 5;"));
    free(src);
    weft_kg_sched_free(s);
    weft_kg_free(kg);
    free(a), free(b), free(bias), free(ref), free(out);
}

// The GEMM micro-kernel in place of the inner three loops (tensorize): register-blocked tiles (6 x 16, 4 x 8),
// from packed operands, and the plain-loop fallback (B read along a column: not contiguous); bit for bit against
// the reference on integers. Then where it cannot go.
static void test_tensorize(void) {
    const int64_t M = 24, N = 32, K = 20;
    weft_kg *kg = matmul_def(M, N, K, true);
    float *a = ints(M * K, -4, 4, 71), *b = ints(K * N, -4, 4, 72), *bias = ints(N, -30, 30, 73);
    float *ref = malloc(M * N * 4), *out = malloc(M * N * 4);
    const float *in[] = {a, b, bias};
    CHECK(weft_kg_reference(kg, in, ref) == WEFT_OK);
    const char *want[] = {"i.o(par) j.o k i.i j.i gemm@k cache@j.o", "i.o j.o k i.i j.i gemm@k cache@j.o",
                          "i.o j.o k i.i j.i gemm@k cache@j.o read:A@j.o read:B@j.o"};
    const int64_t ti[] = {6, 4, 6}, tj[] = {16, 8, 16};
    for (int c = 0; c < 3; c++) {
        weft_kg_sched *s = weft_kg_schedule(kg);
        weft_kg_loop io, ii, jo, ji;
        CHECK(weft_kg_split(s, L(s, "i"), ti[c], &io, &ii) == WEFT_OK && weft_kg_split(s, L(s, "j"), tj[c], &jo, &ji) == WEFT_OK);
        CHECK(weft_kg_reorder(s, 5, (weft_kg_loop[]){io, jo, L(s, "k"), ii, ji}) == WEFT_OK);
        CHECK(weft_kg_cache_write(s, jo) == WEFT_OK && weft_kg_tensorize(s, L(s, "k"), WEFT_KG_INTRIN_GEMM) == WEFT_OK);
        if (c == 0) CHECK(weft_kg_parallel(s, io) == WEFT_OK);
        if (c == 2) CHECK(weft_kg_cache_read(s, 0, jo) == WEFT_OK && weft_kg_cache_read(s, 1, jo) == WEFT_OK);
        char desc[256];
        CHECK(!strcmp(weft_kg_sched_str(s, desc, sizeof desc), want[c]));
        char *src = weft_kg_source(s);
        CHECK(src && strstr(src, "kg_gemm(acc_ + 0, ") && !strstr(src, "// k\n"));
        free(src);
        weft_kg_kernel *k = weft_kg_build(s);
        CHECK(k != NULL);
        memset(out, 0xff, M * N * 4);
        if (k) CHECK(weft_kg_run_raw(k, in, out) == WEFT_OK);
        CHECK(!memcmp(out, ref, M * N * 4));
        weft_kg_kernel_free(k);
        weft_kg_sched_free(s);
    }
    // where it cannot go: no local tile; a tail; four loops inside; two reductions
    weft_kg_sched *s = weft_kg_schedule(kg);
    CHECK(weft_kg_tensorize(s, L(s, "i"), WEFT_KG_INTRIN_GEMM) == WEFT_OK);
    CHECK(weft_kg_source(s) == NULL && wt_error_has("the micro-kernel updates a local tile"));
    CHECK(weft_kg_tensorize(s, L(s, "i"), (weft_kg_intrin)7) == WEFT_ERR_ARG && wt_error_has("intrinsic 7"));
    weft_kg_sched_free(s);
    s = weft_kg_schedule(kg);
    weft_kg_loop io, ii;
    CHECK(weft_kg_split(s, L(s, "i"), 5, &io, &ii) == WEFT_OK);
    CHECK(weft_kg_reorder(s, 4, (weft_kg_loop[]){io, L(s, "k"), ii, L(s, "j")}) == WEFT_OK);
    CHECK(weft_kg_cache_write(s, io) == WEFT_OK && weft_kg_tensorize(s, L(s, "k"), WEFT_KG_INTRIN_GEMM) == WEFT_OK);
    CHECK(weft_kg_source(s) == NULL && wt_error_has("the split of i leaves a tail there"));
    CHECK(weft_kg_tensorize(s, io, WEFT_KG_INTRIN_GEMM) == WEFT_OK);
    CHECK(weft_kg_source(s) == NULL && wt_error_has("replaces 3 loops") && wt_error_has("and 4 are there"));
    weft_kg_sched_free(s);
    s = weft_kg_schedule(kg); // j, k.o, k.i: two reduction loops
    CHECK(weft_kg_split(s, L(s, "k"), 4, NULL, NULL) == WEFT_OK);
    CHECK(weft_kg_cache_write(s, L(s, "i")) == WEFT_OK && weft_kg_tensorize(s, L(s, "j"), WEFT_KG_INTRIN_GEMM) == WEFT_OK);
    CHECK(weft_kg_source(s) == NULL && wt_error_has("are not one reduction and two output loops"));
    weft_kg_sched_free(s);
    weft_kg_free(kg);
    // B read as B[j, k] (a transposed operand): not contiguous along j, so the plain loops; a row max is refused
    weft_kg *kt = weft_kg_new("mmt");
    int A = weft_kg_input(kt, "A", 2, (int64_t[]){M, K}), B = weft_kg_input(kt, "B", 2, (int64_t[]){N, K});
    E *i = weft_kg_axis(kt, "i", M), *j = weft_kg_axis(kt, "j", N), *k = weft_kg_reduce_axis(kt, "k", K);
    E *body = weft_kg_bin(kt, WEFT_KG_MUL, weft_kg_load(kt, B, (E *[]){j, k}), weft_kg_load(kt, A, (E *[]){i, k}));
    CHECK(weft_kg_compute(kt, 2, (E *[]){i, j}, WEFT_KG_SUM, body, NULL) == WEFT_OK);
    CHECK(weft_kg_reference(kt, (const float *[]){a, b}, ref) == WEFT_OK);
    s = weft_kg_schedule(kt);
    weft_kg_loop jo, ji;
    CHECK(weft_kg_split(s, L(s, "i"), 6, &io, &ii) == WEFT_OK && weft_kg_split(s, L(s, "j"), 8, &jo, &ji) == WEFT_OK);
    CHECK(weft_kg_reorder(s, 5, (weft_kg_loop[]){io, jo, L(s, "k"), ii, ji}) == WEFT_OK);
    CHECK(weft_kg_cache_write(s, jo) == WEFT_OK && weft_kg_tensorize(s, L(s, "k"), WEFT_KG_INTRIN_GEMM) == WEFT_OK);
    char *src = weft_kg_source(s); // A's rows step by K, B's columns by K: the arguments say so
    CHECK(src && strstr(src, ", 8, &I_A[") && strstr(src, "], 20, 1, &I_B[") && strstr(src, "], 1, 20, 6, 8, 20);"));
    free(src);
    weft_kg_kernel *kk = weft_kg_build(s);
    CHECK(kk && weft_kg_run_raw(kk, (const float *[]){a, b}, out) == WEFT_OK && !memcmp(out, ref, M * N * 4));
    weft_kg_kernel_free(kk);
    weft_kg_sched_free(s);
    weft_kg_free(kt);
    free(a), free(b), free(bias), free(ref), free(out);
}

// softmax over rows in three stages: mx[r] = max X[r, :], sm[r] = sum exp(X[r, :] - mx[r]),
// out[i, j] = exp(X[i, j] - mx[i]) / sm[i]; each stage at root, at a loop, or (the errors) where it cannot be.
static weft_kg *softmax_def(int64_t R, int64_t C) {
    weft_kg *kg = weft_kg_new("softmax");
    int X = weft_kg_input(kg, "X", 2, (int64_t[]){R, C});
    E *r = weft_kg_axis(kg, "r", R), *c = weft_kg_reduce_axis(kg, "c", C);
    int mx = weft_kg_stage(kg, "mx", 1, (E *[]){r}, WEFT_KG_MAXRED, weft_kg_load(kg, X, (E *[]){r, c}), NULL);
    E *r2 = weft_kg_axis(kg, "r2", R), *c2 = weft_kg_reduce_axis(kg, "c2", C);
    E *d2 = weft_kg_bin(kg, WEFT_KG_SUB, weft_kg_load(kg, X, (E *[]){r2, c2}), weft_kg_load(kg, mx, (E *[]){r2}));
    int sm = weft_kg_stage(kg, "sm", 1, (E *[]){r2}, WEFT_KG_SUM, weft_kg_un(kg, WEFT_KG_EXP, d2), NULL);
    CHECK(mx == WEFT_KG_MAX_INPUTS && sm == WEFT_KG_MAX_INPUTS + 1);
    E *i = weft_kg_axis(kg, "i", R), *j = weft_kg_axis(kg, "j", C);
    E *d = weft_kg_bin(kg, WEFT_KG_SUB, weft_kg_load(kg, X, (E *[]){i, j}), weft_kg_load(kg, mx, (E *[]){i}));
    E *body = weft_kg_bin(kg, WEFT_KG_DIV, weft_kg_un(kg, WEFT_KG_EXP, d), weft_kg_load(kg, sm, (E *[]){i}));
    CHECK(weft_kg_compute(kg, 2, (E *[]){i, j}, WEFT_KG_NONE, body, NULL) == WEFT_OK);
    return kg;
}

static void test_stages(void) {
    const int64_t R = 6, C = 37;
    weft_kg *kg = softmax_def(R, C);
    double xv[R * C];
    wt_vals(xv, R * C, -4, 4, 61);
    float x[R * C], ref[R * C], out[R * C];
    for (int i = 0; i < R * C; i++) x[i] = (float)xv[i];
    const float *in[] = {x};
    CHECK(weft_kg_reference(kg, in, ref) == WEFT_OK);
    int bad = 0;
    for (int r = 0; r < R; r++) { // the closed form
        double m = -1e300, z = 0;
        for (int c = 0; c < C; c++) m = x[r * C + c] > m ? x[r * C + c] : m;
        for (int c = 0; c < C; c++) z += exp(x[r * C + c] - m);
        for (int c = 0; c < C; c++) bad += fabs(ref[r * C + c] - exp(x[r * C + c] - m) / z) > 1e-7;
    }
    CHECK(bad == 0);
    int mx = WEFT_KG_MAX_INPUTS, sm = WEFT_KG_MAX_INPUTS + 1;
    const char *want[] = {"i j", "i(par) j mx@i sm@i", "i j mx@i sm@j", "i j.o j.i(vec) mx@j.o sm@j.o", "i(par) j"};
    for (int c = 0; c < 5; c++) {
        weft_kg_sched *s = weft_kg_schedule(kg);
        if (c == 4) CHECK(weft_kg_parallel(s, L(s, "i")) == WEFT_OK); // the root stages' loops parallel too (review)
        if (c == 1) {
            CHECK(weft_kg_compute_at(s, mx, L(s, "i")) == WEFT_OK && weft_kg_compute_at(s, sm, L(s, "i")) == WEFT_OK);
            CHECK(weft_kg_parallel(s, L(s, "i")) == WEFT_OK);
        } else if (c == 2) { // sm recomputed for every element, from mx's row
            CHECK(weft_kg_compute_at(s, mx, L(s, "i")) == WEFT_OK && weft_kg_compute_at(s, sm, L(s, "j")) == WEFT_OK);
        } else if (c == 3) { // placed at j, then j split (with a tail): both move to j.o
            CHECK(weft_kg_compute_at(s, mx, L(s, "j")) == WEFT_OK && weft_kg_compute_at(s, sm, L(s, "j")) == WEFT_OK);
            weft_kg_loop jo, ji;
            CHECK(weft_kg_split(s, L(s, "j"), 8, &jo, &ji) == WEFT_OK && weft_kg_vectorize(s, ji) == WEFT_OK);
        }
        char desc[256];
        CHECK(!strcmp(weft_kg_sched_str(s, desc, sizeof desc), want[c]));
        weft_kg_kernel *k = weft_kg_build(s);
        CHECK(k != NULL);
        memset(out, 0xff, sizeof out);
        if (k) CHECK(weft_kg_run_raw(k, in, out) == WEFT_OK);
        double err = 0;
        for (int i = 0; i < R * C; i++) err = fmax(err, fabs((double)out[i] - ref[i]) / (fabs(ref[i]) + 1e-30));
        if (!(err < 1e-5)) fprintf(stderr, "softmax %s: relative error %g\n", desc, err);
        CHECK(err < 1e-5);
        weft_kg_kernel_free(k);
        weft_kg_sched_free(s);
    }
    // where a stage cannot be: read by a stage at root; read by a stage at a loop outside its own
    weft_kg_sched *s = weft_kg_schedule(kg);
    CHECK(weft_kg_compute_at(s, mx, L(s, "i")) == WEFT_OK);
    CHECK(weft_kg_source(s) == NULL && wt_error_has("mx is read by stage sm, computed at root"));
    CHECK(weft_kg_compute_at(s, mx, L(s, "j")) == WEFT_OK && weft_kg_compute_at(s, sm, L(s, "i")) == WEFT_OK);
    CHECK(weft_kg_source(s) == NULL && wt_error_has("stage sm, at loop i, reads mx, placed at j inside it"));
    CHECK(weft_kg_compute_inline(s, mx) == WEFT_ERR_ARG && wt_error_has("compute_inline of mx, a reduction"));
    CHECK(weft_kg_compute_at(s, 3, L(s, "i")) == WEFT_ERR_ARG && wt_error_has("not a stage's handle"));
    CHECK(weft_kg_cache_read(s, mx, L(s, "i")) == WEFT_ERR_ARG && wt_error_has("not an input"));
    weft_kg_sched_free(s);
    weft_kg_free(kg);

    // stage definitions that are refused
    weft_kg *bad_kg = weft_kg_new("bad");
    int X = weft_kg_input(bad_kg, "X", 1, (int64_t[]){4});
    E *a = weft_kg_axis(bad_kg, "a", 4), *b = weft_kg_axis(bad_kg, "b", 4);
    CHECK(weft_kg_stage(bad_kg, "X", 1, (E *[]){a}, WEFT_KG_NONE, weft_kg_load(bad_kg, X, (E *[]){a}), NULL) == -1 &&
          wt_error_has("already used"));
    CHECK(weft_kg_stage(bad_kg, "t", 1, (E *[]){a}, WEFT_KG_NONE, weft_kg_load(bad_kg, X, (E *[]){b}), NULL) == -1 &&
          wt_error_has("axis b in stage t, which is not one of its axes"));
    weft_clear_error(); // a NULL axis with no error before it is still an error (review)
    CHECK(weft_kg_stage(bad_kg, "t", 1, (E *[]){NULL}, WEFT_KG_NONE, weft_kg_load(bad_kg, X, (E *[]){a}), NULL) == -1 &&
          wt_error_has("stage t: dim 0 is NULL"));
    int t = weft_kg_stage(bad_kg, "t", 1, (E *[]){a}, WEFT_KG_NONE, weft_kg_load(bad_kg, X, (E *[]){a}), NULL);
    CHECK(t == WEFT_KG_MAX_INPUTS);
    // the output cannot use the stage's axis, nor read the stage out of its range
    CHECK(weft_kg_compute(bad_kg, 1, (E *[]){a}, WEFT_KG_NONE, weft_kg_load(bad_kg, t, (E *[]){b}), NULL) ==
              WEFT_ERR_ARG && wt_error_has("dim 0 is not a new output axis"));
    E *b1 = weft_kg_bin(bad_kg, WEFT_KG_ADD, b, weft_kg_const(bad_kg, 1));
    CHECK(weft_kg_compute(bad_kg, 1, (E *[]){b}, WEFT_KG_NONE, weft_kg_load(bad_kg, t, (E *[]){b1}), NULL) ==
              WEFT_ERR_ARG && wt_error_has("load of t: index 0 ranges over [1, 4], outside [0, 3]"));
    CHECK(weft_kg_compute(bad_kg, 1, (E *[]){b}, WEFT_KG_NONE, weft_kg_load_pad(bad_kg, t, (E *[]){b1}, 7), NULL) ==
          WEFT_OK);
    float xs[4] = {1, 2, 3, 4}, o4[4];
    CHECK(weft_kg_reference(bad_kg, (const float *[]){xs}, o4) == WEFT_OK && o4[0] == 2 && o4[3] == 7);
    weft_kg_sched *s2 = weft_kg_schedule(bad_kg);
    CHECK(weft_kg_parallel(s2, L(s2, "b")) == WEFT_OK); // (a 1-D root stage's loop: parallel, not also simd: review)
    for (int place = 0; place < 3; place++) { // root, inlined, at b
        if (place == 1) CHECK(weft_kg_compute_inline(s2, t) == WEFT_OK);
        if (place == 2) CHECK(weft_kg_compute_at(s2, t, L(s2, "b")) == WEFT_OK);
        weft_kg_kernel *k = weft_kg_build(s2);
        CHECK(k != NULL);
        memset(o4, 0, sizeof o4);
        if (k) CHECK(weft_kg_run_raw(k, (const float *[]){xs}, o4) == WEFT_OK);
        CHECK(o4[0] == 2 && o4[1] == 3 && o4[2] == 4 && o4[3] == 7);
        weft_kg_kernel_free(k);
    }
    weft_kg_sched_free(s2);
    weft_kg_free(bad_kg);

    // exp near f32's top: the generated exp (vectorisable, clamped inside at 88) against expf (review)
    weft_kg *ek = weft_kg_new("ex");
    int Xe = weft_kg_input(ek, "X", 1, (int64_t[]){5});
    E *ea = weft_kg_axis(ek, "a", 5);
    CHECK(weft_kg_compute(ek, 1, (E *[]){ea}, WEFT_KG_NONE, weft_kg_un(ek, WEFT_KG_EXP, weft_kg_load(ek, Xe, (E *[]){ea})),
                          NULL) == WEFT_OK);
    float xe[5] = {88.3f, 88.7f, 89.5f, -100.0f, 1.5f}, oe[5];
    s2 = weft_kg_schedule(ek);
    weft_kg_kernel *ke = weft_kg_build(s2);
    CHECK(ke && weft_kg_run_raw(ke, (const float *[]){xe}, oe) == WEFT_OK);
    for (int q = 0; q < 5; q++)
        CHECK(q == 2 ? isinf(oe[q]) : q == 3 ? oe[q] == 0 : fabs(oe[q] / expf(xe[q]) - 1) < 1e-6);
    weft_kg_kernel_free(ke);
    weft_kg_sched_free(s2);
    weft_kg_free(ek);
}

// A padded, strided direct convolution with a bias, against weft_conv2d.
static void test_conv2d(void) {
    const int64_t N = 2, C = 3, H = 9, W = 8, O = 4, KH = 3, KW = 3, S = 2, P = 1;
    const int64_t OH = (H + 2 * P - KH) / S + 1, OW = (W + 2 * P - KW) / S + 1;
    weft_kg *kg = weft_kg_new("conv");
    int X = weft_kg_input(kg, "X", 4, (int64_t[]){N, C, H, W}), Wt = weft_kg_input(kg, "W", 4, (int64_t[]){O, C, KH, KW});
    int Bs = weft_kg_input(kg, "bias", 1, (int64_t[]){O});
    E *n = weft_kg_axis(kg, "n", N), *o = weft_kg_axis(kg, "o", O), *y = weft_kg_axis(kg, "y", OH),
      *x = weft_kg_axis(kg, "x", OW);
    E *c = weft_kg_reduce_axis(kg, "c", C), *ky = weft_kg_reduce_axis(kg, "ky", KH), *kx = weft_kg_reduce_axis(kg, "kx", KW);
    E *s = weft_kg_const(kg, (double)S), *p = weft_kg_const(kg, (double)P);
    E *iy = weft_kg_bin(kg, WEFT_KG_SUB, weft_kg_bin(kg, WEFT_KG_ADD, weft_kg_bin(kg, WEFT_KG_MUL, y, s), ky), p);
    E *ix = weft_kg_bin(kg, WEFT_KG_SUB, weft_kg_bin(kg, WEFT_KG_ADD, weft_kg_bin(kg, WEFT_KG_MUL, x, s), kx), p);
    E *body = weft_kg_bin(kg, WEFT_KG_MUL, weft_kg_load_pad(kg, X, (E *[]){n, c, iy, ix}, 0),
                          weft_kg_load(kg, Wt, (E *[]){o, c, ky, kx}));
    E *epi = weft_kg_bin(kg, WEFT_KG_ADD, weft_kg_acc(kg), weft_kg_load(kg, Bs, (E *[]){o}));
    CHECK(weft_kg_compute(kg, 4, (E *[]){n, o, y, x}, WEFT_KG_SUM, body, epi) == WEFT_OK);
    // without the pad the same load is refused: its rows run from -1
    weft_kg *bad = weft_kg_new("conv_unpadded");
    int Xb = weft_kg_input(bad, "X", 1, (int64_t[]){H});
    E *yb = weft_kg_axis(bad, "y", H);
    E *lb = weft_kg_load(bad, Xb, (E *[]){weft_kg_bin(bad, WEFT_KG_SUB, yb, weft_kg_const(bad, 1))});
    CHECK(weft_kg_compute(bad, 1, (E *[]){yb}, WEFT_KG_NONE, lb, NULL) == WEFT_ERR_ARG);
    CHECK(wt_error_has("index 0 ranges over [-1, 7], outside [0, 8]"));
    weft_kg_free(bad);

    double xv[N * C * H * W], wv[O * C * KH * KW], bv[O];
    wt_vals(xv, N * C * H * W, -1, 1, 21);
    wt_vals(wv, O * C * KH * KW, -1, 1, 22);
    wt_vals(bv, O, -1, 1, 23);
    float xf[N * C * H * W], wf[O * C * KH * KW], bf[O];
    for (size_t i = 0; i < sizeof xf / 4; i++) xf[i] = (float)xv[i];
    for (size_t i = 0; i < sizeof wf / 4; i++) wf[i] = (float)wv[i];
    for (size_t i = 0; i < sizeof bf / 4; i++) bf[i] = (float)bv[i];
    weft_tensor *xt = weft_tensor_from_data(xf, 4, (int64_t[]){N, C, H, W}, WEFT_F32);
    weft_tensor *wt = weft_tensor_from_data(wf, 4, (int64_t[]){O, C, KH, KW}, WEFT_F32);
    weft_tensor *bt = weft_tensor_from_data(bf, 1, (int64_t[]){O}, WEFT_F32);
    weft_tensor *want = weft_conv2d(xt, wt, bt, &(weft_conv2d_params){{S, S}, {P, P}, {1, 1}, 1});
    weft_tensor *got = weft_tensor_empty(4, (int64_t[]){N, O, OH, OW}, WEFT_F32);
    weft_kg_sched *sc = weft_kg_schedule(kg);
    weft_kg_loop xl = weft_kg_get_loop(sc, "x");
    CHECK(weft_kg_reorder(sc, 4, (weft_kg_loop[]){weft_kg_get_loop(sc, "c"), weft_kg_get_loop(sc, "ky"),
                                                  weft_kg_get_loop(sc, "kx"), xl}) == WEFT_OK);
    CHECK(weft_kg_vectorize(sc, xl) == WEFT_OK);
    CHECK(weft_kg_cache_write(sc, weft_kg_get_loop(sc, "y")) == WEFT_OK);
    weft_kg_kernel *k = weft_kg_build(sc);
    CHECK(k != NULL);
    if (k && want) {
        CHECK(weft_kg_run(k, 3, (weft_tensor *[]){xt, wt, bt}, got) == WEFT_OK);
        wt_check_same("conv2d", got, want, 1e-5);
    }
    weft_kg_kernel_free(k);
    weft_kg_sched_free(sc);
    weft_kg_free(kg);

    // the same convolution over a padded stage P (TVM's form): P at root, inlined, at a row of the output (the
    // rows of P that row reads), with the weights copied per output channel
    kg = weft_kg_new("conv_staged");
    X = weft_kg_input(kg, "X", 4, (int64_t[]){N, C, H, W}), Wt = weft_kg_input(kg, "W", 4, (int64_t[]){O, C, KH, KW});
    Bs = weft_kg_input(kg, "bias", 1, (int64_t[]){O});
    E *pn = weft_kg_axis(kg, "pn", N), *pc = weft_kg_axis(kg, "pc", C), *ph = weft_kg_axis(kg, "ph", H + 2 * P),
      *pw = weft_kg_axis(kg, "pw", W + 2 * P);
    p = weft_kg_const(kg, (double)P);
    int Pd = weft_kg_stage(kg, "P", 4, (E *[]){pn, pc, ph, pw}, WEFT_KG_NONE,
                           weft_kg_load_pad(kg, X, (E *[]){pn, pc, weft_kg_bin(kg, WEFT_KG_SUB, ph, p),
                                                             weft_kg_bin(kg, WEFT_KG_SUB, pw, p)}, 0), NULL);
    n = weft_kg_axis(kg, "n", N), o = weft_kg_axis(kg, "o", O), y = weft_kg_axis(kg, "y", OH), x = weft_kg_axis(kg, "x", OW);
    c = weft_kg_reduce_axis(kg, "c", C), ky = weft_kg_reduce_axis(kg, "ky", KH), kx = weft_kg_reduce_axis(kg, "kx", KW);
    s = weft_kg_const(kg, (double)S);
    iy = weft_kg_bin(kg, WEFT_KG_ADD, weft_kg_bin(kg, WEFT_KG_MUL, y, s), ky);
    ix = weft_kg_bin(kg, WEFT_KG_ADD, weft_kg_bin(kg, WEFT_KG_MUL, x, s), kx);
    body = weft_kg_bin(kg, WEFT_KG_MUL, weft_kg_load(kg, Pd, (E *[]){n, c, iy, ix}),
                       weft_kg_load(kg, Wt, (E *[]){o, c, ky, kx}));
    epi = weft_kg_bin(kg, WEFT_KG_ADD, weft_kg_acc(kg), weft_kg_load(kg, Bs, (E *[]){o}));
    CHECK(weft_kg_compute(kg, 4, (E *[]){n, o, y, x}, WEFT_KG_SUM, body, epi) == WEFT_OK);
    const char *want_s[] = {"n o y x c ky kx", "n o y x c ky kx P(inline)",
                            "n o y c ky kx x(vec) cache@y read:W@o P@y"};
    for (int v = 0; v < 3; v++) {
        sc = weft_kg_schedule(kg);
        if (v == 1) CHECK(weft_kg_compute_inline(sc, Pd) == WEFT_OK);
        if (v == 2) {
            xl = weft_kg_get_loop(sc, "x");
            CHECK(weft_kg_reorder(sc, 4, (weft_kg_loop[]){weft_kg_get_loop(sc, "c"), weft_kg_get_loop(sc, "ky"),
                                                          weft_kg_get_loop(sc, "kx"), xl}) == WEFT_OK);
            CHECK(weft_kg_vectorize(sc, xl) == WEFT_OK);
            CHECK(weft_kg_cache_write(sc, weft_kg_get_loop(sc, "y")) == WEFT_OK);
            CHECK(weft_kg_compute_at(sc, Pd, weft_kg_get_loop(sc, "y")) == WEFT_OK);
            CHECK(weft_kg_cache_read(sc, Wt, weft_kg_get_loop(sc, "o")) == WEFT_OK);
        }
        char desc[256];
        CHECK(!strcmp(weft_kg_sched_str(sc, desc, sizeof desc), want_s[v]));
        if (v == 2) { // P's region at y: 3 channels, the 3 rows y*2 .. y*2+2, the 9 columns x*2+kx reaches
            char *src = weft_kg_source(sc);
            CHECK(src && strstr(src, "float L_P[81];") && strstr(src, "float L_W[27];"));
            free(src);
        }
        k = weft_kg_build(sc);
        CHECK(k != NULL);
        weft_tensor_fill_(got, NAN);
        if (k && want) {
            CHECK(weft_kg_run(k, 3, (weft_tensor *[]){xt, wt, bt}, got) == WEFT_OK);
            wt_check_same(desc, got, want, 1e-5);
        }
        weft_kg_kernel_free(k);
        weft_kg_sched_free(sc);
    }
    weft_tensor_free(xt), weft_tensor_free(wt), weft_tensor_free(bt), weft_tensor_free(want), weft_tensor_free(got);
    weft_kg_free(kg);
}

// tanh(a * b[j] + 1) with no reduction, against the closed form; a matmul on tensors against weft_matmul.
static void test_elementwise_and_tensors(void) {
    weft_kg *kg = weft_kg_new("ew");
    int A = weft_kg_input(kg, "A", 2, (int64_t[]){5, 33}), B = weft_kg_input(kg, "B", 1, (int64_t[]){33});
    E *i = weft_kg_axis(kg, "i", 5), *j = weft_kg_axis(kg, "j", 33);
    E *v = weft_kg_un(kg, WEFT_KG_TANH,
                      weft_kg_bin(kg, WEFT_KG_ADD,
                                  weft_kg_bin(kg, WEFT_KG_MUL, weft_kg_load(kg, A, (E *[]){i, j}),
                                              weft_kg_load(kg, B, (E *[]){j})),
                                  weft_kg_const(kg, 1)));
    CHECK(weft_kg_compute(kg, 2, (E *[]){i, j}, WEFT_KG_NONE, v, NULL) == WEFT_OK);
    double av[165], bv[33];
    wt_vals(av, 165, -2, 2, 31);
    wt_vals(bv, 33, -2, 2, 32);
    float af[165], bf[33], out[165];
    for (int q = 0; q < 165; q++) af[q] = (float)av[q];
    for (int q = 0; q < 33; q++) bf[q] = (float)bv[q];
    weft_kg_sched *s = weft_kg_schedule(kg);
    weft_kg_loop jo, ji;
    CHECK(weft_kg_split(s, weft_kg_get_loop(s, "j"), 8, &jo, &ji) == WEFT_OK);
    CHECK(weft_kg_vectorize(s, ji) == WEFT_OK);
    weft_kg_kernel *k = weft_kg_build(s);
    CHECK(k && weft_kg_run_raw(k, (const float *[]){af, bf}, out) == WEFT_OK);
    double worst = 0;
    for (int q = 0; k && q < 165; q++) {
        double want = tanh((double)af[q] * bf[q % 33] + 1), d = fabs(out[q] - want);
        worst = d > worst ? d : worst;
    }
    CHECK(k && worst < 1e-6);
    weft_kg_kernel_free(k);
    weft_kg_sched_free(s);
    weft_kg_free(kg);

    // a negated negative constant in an index (review: it was written "--2", which no compiler takes)
    weft_kg *nn = weft_kg_new("shift");
    int X = weft_kg_input(nn, "X", 1, (int64_t[]){8});
    E *q = weft_kg_axis(nn, "q", 6);
    E *idx = weft_kg_bin(nn, WEFT_KG_ADD, q, weft_kg_un(nn, WEFT_KG_NEG, weft_kg_const(nn, -2)));
    CHECK(weft_kg_compute(nn, 1, (E *[]){q}, WEFT_KG_NONE, weft_kg_load(nn, X, (E *[]){idx}), NULL) == WEFT_OK);
    float xs[8] = {1, 2, 3, 4, 5, 6, 7, 8}, ys[6] = {0};
    s = weft_kg_schedule(nn);
    k = weft_kg_build(s);
    CHECK(k && weft_kg_run_raw(k, (const float *[]){xs}, ys) == WEFT_OK && ys[0] == 3 && ys[5] == 8);
    weft_kg_kernel_free(k);
    weft_kg_sched_free(s);
    weft_kg_free(nn);

    // no reduction, an epilogue reading acc twice: acc * acc + acc, acc = 2 X[q] - 3
    weft_kg *ep = weft_kg_new("square");
    int Y = weft_kg_input(ep, "X", 1, (int64_t[]){9});
    E *p = weft_kg_axis(ep, "p", 9), *acc = weft_kg_acc(ep);
    E *lin = weft_kg_bin(ep, WEFT_KG_SUB, weft_kg_bin(ep, WEFT_KG_MUL, weft_kg_load(ep, Y, (E *[]){p}), weft_kg_const(ep, 2)),
                         weft_kg_const(ep, 3));
    CHECK(weft_kg_compute(ep, 1, (E *[]){p}, WEFT_KG_NONE, lin,
                          weft_kg_bin(ep, WEFT_KG_ADD, weft_kg_bin(ep, WEFT_KG_MUL, acc, acc), acc)) == WEFT_OK);
    float xe[9] = {-4, -3, -2, -1, 0, 1, 2, 3, 4}, ye[9];
    for (int cw = 0; cw < 2; cw++) {
        s = weft_kg_schedule(ep);
        if (cw) CHECK(weft_kg_cache_write(s, weft_kg_get_loop(s, "p")) == WEFT_OK);
        k = weft_kg_build(s);
        CHECK(k && weft_kg_run_raw(k, (const float *[]){xe}, ye) == WEFT_OK);
        for (int q = 0; k && q < 9; q++) {
            float a = 2 * xe[q] - 3;
            CHECK(ye[q] == a * a + a);
        }
        weft_kg_kernel_free(k);
        weft_kg_sched_free(s);
    }
    weft_kg_free(ep);

    weft_kg *mm = matmul_def(24, 40, 16, false);
    weft_generator *gen = weft_generator_create(5);
    weft_tensor *a = weft_tensor_randn(2, (int64_t[]){24, 16}, WEFT_F32, gen);
    weft_tensor *b = weft_tensor_randn(2, (int64_t[]){16, 40}, WEFT_F32, gen);
    weft_tensor *c = weft_tensor_empty(2, (int64_t[]){24, 40}, WEFT_F32), *want = weft_matmul(a, b);
    s = weft_kg_schedule(mm);
    tiled_cached(s);
    k = weft_kg_build(s);
    CHECK(k && weft_kg_run(k, 2, (weft_tensor *[]){a, b}, c) == WEFT_OK);
    if (k) wt_check_same("matmul", c, want, 1e-5);
    // what a run refuses
    weft_tensor *small = weft_tensor_empty(2, (int64_t[]){24, 39}, WEFT_F32);
    weft_tensor *f64 = weft_tensor_empty(2, (int64_t[]){24, 40}, WEFT_F64);
    weft_tensor *bt = weft_transpose(b, 0, 1), *view = weft_reshape(c, 2, (int64_t[]){16, 60});
    if (k) {
        CHECK(weft_kg_run(k, 2, (weft_tensor *[]){a, b}, small) == WEFT_ERR_SHAPE && wt_error_has("the output"));
        CHECK(weft_kg_run(k, 2, (weft_tensor *[]){a, b}, f64) == WEFT_ERR_DTYPE);
        CHECK(weft_kg_run(k, 1, (weft_tensor *[]){a}, c) == WEFT_ERR_ARG && wt_error_has("takes 2"));
        CHECK(weft_kg_run(k, 2, (weft_tensor *[]){a, bt}, c) != WEFT_OK && wt_error_has("input B"));
        weft_tensor *alias = weft_reshape(c, 2, (int64_t[]){60, 16});
        weft_tensor *a2 = weft_narrow(alias, 0, 0, 24);
        CHECK(weft_kg_run(k, 2, (weft_tensor *[]){a2, b}, c) == WEFT_ERR_ARG && wt_error_has("overlaps input A"));
        weft_tensor_free(a2), weft_tensor_free(alias);
    }
    weft_kg_kernel_free(k);
    weft_kg_sched_free(s);
    weft_tensor_free(small), weft_tensor_free(f64), weft_tensor_free(bt), weft_tensor_free(view);
    weft_tensor_free(a), weft_tensor_free(b), weft_tensor_free(c), weft_tensor_free(want);
    weft_generator_free(gen);
    weft_kg_free(mm);
}

static void test_errors(void) {
    CHECK(weft_kg_new("2x") == NULL && wt_error_has("not a C identifier"));
    CHECK(weft_kg_new(NULL) == NULL);
    weft_kg *kg = weft_kg_new("e");
    CHECK(weft_kg_input(kg, "A", 2, (int64_t[]){4, 4}) == 0);
    CHECK(weft_kg_input(kg, "A", 1, (int64_t[]){4}) == -1 && wt_error_has("already used"));
    CHECK(weft_kg_input(kg, "B", 1, (int64_t[]){0}) == -1 && wt_error_has("out of range"));
    CHECK(weft_kg_input(kg, "a-b", 1, (int64_t[]){3}) == -1);
    E *i = weft_kg_axis(kg, "i", 4), *r = weft_kg_reduce_axis(kg, "r", 4);
    CHECK(weft_kg_axis(kg, "i", 3) == NULL && wt_error_has("already used"));
    CHECK(weft_kg_axis(kg, "z", 0) == NULL && wt_error_has("extent 0"));
    // a non-integer index, NULL through a chain
    CHECK(weft_kg_load(kg, 0, (E *[]){i, weft_kg_const(kg, 0.5)}) == NULL && wt_error_has("not an integer"));
    CHECK(weft_kg_load(kg, 3, (E *[]){i, i}) == NULL && wt_error_has("tensor 3"));
    CHECK(weft_kg_bin(kg, WEFT_KG_ADD, NULL, i) == NULL);
    CHECK(weft_kg_bin(kg, WEFT_KG_EXP, i, i) == NULL && wt_error_has("not binary"));
    E *ld = weft_kg_load(kg, 0, (E *[]){i, r});
    // acc in the body, a reduction axis in the epilogue, axes missing, reduction axes without a reduction
    CHECK(weft_kg_compute(kg, 1, (E *[]){i}, WEFT_KG_SUM, weft_kg_acc(kg), NULL) == WEFT_ERR_ARG &&
          wt_error_has("acc outside"));
    CHECK(weft_kg_compute(kg, 1, (E *[]){i}, WEFT_KG_SUM, ld, weft_kg_bin(kg, WEFT_KG_ADD, weft_kg_acc(kg), r)) ==
              WEFT_ERR_ARG &&
          wt_error_has("reduction axis r in the epilogue"));
    CHECK(weft_kg_compute(kg, 1, (E *[]){r}, WEFT_KG_SUM, ld, NULL) == WEFT_ERR_ARG);
    CHECK(weft_kg_compute(kg, 1, (E *[]){i}, WEFT_KG_NONE, ld, NULL) == WEFT_ERR_ARG &&
          wt_error_has("no reduction"));
    // out of range: A[i + 1, r]
    E *past = weft_kg_load(kg, 0, (E *[]){weft_kg_bin(kg, WEFT_KG_ADD, i, weft_kg_const(kg, 1)), r});
    CHECK(weft_kg_compute(kg, 1, (E *[]){i}, WEFT_KG_SUM, past, NULL) == WEFT_ERR_ARG &&
          wt_error_has("[1, 4], outside [0, 3]"));
    CHECK(weft_kg_schedule(kg) == NULL && wt_error_has("before compute"));
    // review, 2026-11-28: constants past f32, shared nodes expanding without bound, integer overflow, an
    // expression of another definition
    CHECK(weft_kg_const(kg, 1e39) == NULL && wt_error_has("not a finite f32"));
    CHECK(weft_kg_load_pad(kg, 0, (E *[]){i, r}, -1e39) == NULL && wt_error_has("not a finite f32"));
    E *dag = ld;
    for (int d = 0; d < 22; d++) dag = weft_kg_bin(kg, WEFT_KG_MAX, dag, dag);
    CHECK(weft_kg_compute(kg, 1, (E *[]){i}, WEFT_KG_SUM, dag, NULL) == WEFT_ERR_ARG && wt_error_has("more than 100000"));
    weft_kg *other = weft_kg_new("other");
    E *oi = weft_kg_axis(other, "i", 4);
    CHECK(weft_kg_bin(kg, WEFT_KG_ADD, ld, oi) == NULL && wt_error_has("another definition"));
    CHECK(weft_kg_load(kg, 0, (E *[]){oi, r}) == NULL && wt_error_has("another definition"));
    CHECK(weft_kg_compute(kg, 1, (E *[]){oi}, WEFT_KG_SUM, ld, NULL) == WEFT_ERR_ARG && wt_error_has("another definition"));
    weft_kg_free(other);
    weft_kg *big = weft_kg_new("cube");
    E *bi = weft_kg_axis(big, "i", 1 << 22);
    E *cube = weft_kg_bin(big, WEFT_KG_MUL, weft_kg_bin(big, WEFT_KG_MUL, bi, bi), weft_kg_bin(big, WEFT_KG_MUL, bi, bi));
    cube = weft_kg_bin(big, WEFT_KG_MUL, cube, bi);
    CHECK(weft_kg_compute(big, 1, (E *[]){bi}, WEFT_KG_NONE, cube, NULL) == WEFT_ERR_ARG && wt_error_has("overflows 64 bits"));
    CHECK(weft_kg_out_shape(big, NULL) == -1);
    weft_kg_free(big);
    CHECK(weft_kg_compute(kg, 1, (E *[]){i}, WEFT_KG_SUM, ld, NULL) == WEFT_OK);
    CHECK(weft_kg_compute(kg, 1, (E *[]){i}, WEFT_KG_SUM, ld, NULL) == WEFT_ERR_STATE);
    weft_kg_free(kg);

    // schedule primitives
    kg = matmul_def(64, 64, 64, false);
    weft_kg_sched *s = weft_kg_schedule(kg);
    weft_kg_loop io, ii, jo, ji;
    CHECK(weft_kg_get_loop(s, "q") == -1 && wt_error_has("no loop named 'q'"));
    CHECK(weft_kg_split(s, L(s, "i"), 0, &io, &ii) == WEFT_ERR_ARG);
    CHECK(weft_kg_split(s, L(s, "i"), 65, &io, &ii) == WEFT_ERR_ARG);
    CHECK(weft_kg_split(s, L(s, "i"), 8, &io, &ii) == WEFT_OK);
    CHECK(weft_kg_split(s, 0, 2, NULL, NULL) == WEFT_ERR_ARG && wt_error_has("it was split"));
    CHECK(weft_kg_split(s, L(s, "j"), 16, &jo, &ji) == WEFT_OK);
    CHECK(weft_kg_reorder(s, 2, (weft_kg_loop[]){io, io}) == WEFT_ERR_ARG && wt_error_has("twice"));
    CHECK(weft_kg_parallel(s, L(s, "k")) == WEFT_ERR_ARG && wt_error_has("a reduction loop"));
    CHECK(weft_kg_unroll(s, L(s, "k")) == WEFT_OK); // a reduction loop may be unrolled
    CHECK(weft_kg_vectorize(s, ii) == WEFT_OK); // ii is not innermost: refused when code is made
    char *src = weft_kg_source(s);
    CHECK(src == NULL && wt_error_has("not the innermost"));
    free(src);
    weft_kg_sched_free(s);
    s = weft_kg_schedule(kg);
    CHECK(weft_kg_parallel(s, L(s, "j")) == WEFT_OK);
    CHECK(weft_kg_source(s) == NULL && wt_error_has("not the outermost"));
    weft_kg_sched_free(s);
    s = weft_kg_schedule(kg);
    CHECK(weft_kg_reorder(s, 2, (weft_kg_loop[]){L(s, "k"), L(s, "i")}) == WEFT_OK);
    CHECK(weft_kg_cache_write(s, L(s, "j")) == WEFT_ERR_ARG && wt_error_has("inside reduction loop k"));
    weft_kg_sched_free(s);
    s = weft_kg_schedule(kg);
    CHECK(weft_kg_cache_write(s, L(s, "i")) == WEFT_OK);
    CHECK(weft_kg_reorder(s, 2, (weft_kg_loop[]){L(s, "j"), L(s, "i")}) == WEFT_OK); // the tile is now 1 element
    weft_kg_sched_free(s);
    weft_kg_free(kg);
    kg = matmul_def(4, 8192, 2, false);
    s = weft_kg_schedule(kg);
    CHECK(weft_kg_unroll(s, L(s, "j")) == WEFT_ERR_ARG && wt_error_has("at most 64"));
    CHECK(weft_kg_cache_write(s, L(s, "i")) == WEFT_ERR_ARG && wt_error_has("more than 4096"));
    CHECK(weft_kg_reorder(s, 3, (weft_kg_loop[]){L(s, "k"), L(s, "i"), L(s, "j")}) == WEFT_OK);
    CHECK(!strcmp(weft_kg_sched_str(s, (char[64]){0}, 64), "k i j"));
    weft_kg_sched_free(s);
    // a compiler that is not there
    if (weft_kg_available()) {
        s = weft_kg_schedule(kg);
        char *old = getenv("WEFT_KGEN_CC") ? strdup(getenv("WEFT_KGEN_CC")) : NULL;
        setenv("WEFT_KGEN_CC", "/nonexistent/cc", 1);
        CHECK(weft_kg_build(s) == NULL && wt_error_has("the C compiler '/nonexistent/cc' failed"));
        if (old) setenv("WEFT_KGEN_CC", old, 1);
        else unsetenv("WEFT_KGEN_CC");
        free(old);
        weft_kg_sched_free(s);
    }
    weft_kg_free(kg);
}

static void test_tune(void) {
    char dir[] = "/tmp/weft-kgen-test-XXXXXX", log[128];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(log, sizeof log, "%s/tune.json", dir);
    int64_t M = 48, N = 40, K = 32;
    weft_kg *kg = matmul_def(M, N, K, true);
    weft_kg_tune_report rep;
    weft_kg_sched *s = weft_kg_tune(kg, &(weft_kg_tune_opts){.trials = 6, .repeat = 1, .seed = 3, .log = log}, &rep);
    CHECK(s != NULL);
    CHECK(rep.measured == 6 && !rep.from_log && rep.best_ms > 0 && rep.default_ms > 0 && rep.candidates > 100);
    char desc[256];
    CHECK(s && !strcmp(weft_kg_sched_str(s, desc, sizeof desc), rep.best));
    // the choice computes the same numbers as the reference
    float *a = ints(M * K, -4, 4, 41), *b = ints(K * N, -4, 4, 42), *bias = ints(N, -9, 9, 43);
    float *ref = malloc(M * N * 4), *out = malloc(M * N * 4);
    const float *in[] = {a, b, bias};
    CHECK(weft_kg_reference(kg, in, ref) == WEFT_OK);
    weft_kg_kernel *k = s ? weft_kg_build(s) : NULL;
    CHECK(k && weft_kg_run_raw(k, in, out) == WEFT_OK && !memcmp(out, ref, M * N * 4));
    weft_kg_kernel_free(k);
    weft_kg_sched_free(s);
    // the log has it: nothing is measured the second time
    weft_kg_tune_report again;
    s = weft_kg_tune(kg, &(weft_kg_tune_opts){.trials = 0, .log = log}, &again);
    // (the time goes through cJSON's 15 significant digits)
    CHECK(s && again.from_log && again.measured == 0 && !strcmp(again.best, rep.best) &&
          fabs(again.best_ms - rep.best_ms) <= 1e-12 * rep.best_ms);
    weft_kg_sched_free(s);
    // another definition is not in it
    weft_kg *other = matmul_def(M, N, K + 1, true);
    CHECK(weft_kg_tune(other, &(weft_kg_tune_opts){.trials = 0, .log = log}, NULL) == NULL &&
          wt_error_has("no entry in the tuning log"));
    weft_kg_free(other);
    // a damaged log is an error naming it, and is left as it was
    FILE *f = fopen(log, "w");
    fputs("{\"entries\": [", f);
    fclose(f);
    CHECK(weft_kg_tune(kg, &(weft_kg_tune_opts){.trials = 2, .log = log}, NULL) == NULL && wt_error_has(log) &&
          wt_error_has("not a weft tuning log"));
    f = fopen(log, "r");
    char buf[64] = {0};
    CHECK(f && fread(buf, 1, sizeof buf - 1, f) == 13);
    if (f) fclose(f);
    CHECK(weft_kg_tune(kg, &(weft_kg_tune_opts){.trials = -1}, NULL) == NULL);
    // no compiler: the tuner's error says what the first failure was
    char *old = getenv("WEFT_KGEN_CC") ? strdup(getenv("WEFT_KGEN_CC")) : NULL;
    setenv("WEFT_KGEN_CC", "/nonexistent/cc", 1);
    CHECK(weft_kg_tune(kg, &(weft_kg_tune_opts){.trials = 2, .repeat = 1}, NULL) == NULL &&
          wt_error_has("no schedule could be built") && wt_error_has("/nonexistent/cc"));
    if (old) setenv("WEFT_KGEN_CC", old, 1);
    else unsetenv("WEFT_KGEN_CC");
    free(old);
    // a log that cannot be written keeps the search's result, and says why
    char missing[200];
    snprintf(missing, sizeof missing, "%s/no-such-dir/tune.json", dir);
    s = weft_kg_tune(kg, &(weft_kg_tune_opts){.trials = 2, .repeat = 1, .log = missing}, &rep);
    CHECK(s && rep.measured == 2 && strstr(rep.log_error, "no-such-dir"));
    weft_kg_sched_free(s);
    // from 12 trials on, the last 4 try the two best structures with their operands packed (cache_read); the
    // choice, packed or not, computes the reference's numbers and comes back from the log the same
    weft_kg *kg2 = matmul_def(M, N, K, false);
    unlink(log); // (damaged above)
    s = weft_kg_tune(kg2, &(weft_kg_tune_opts){.trials = 12, .repeat = 1, .seed = 5, .log = log}, &rep);
    CHECK(s && rep.measured == 12);
    CHECK(weft_kg_reference(kg2, in, ref) == WEFT_OK);
    k = s ? weft_kg_build(s) : NULL;
    CHECK(k && weft_kg_run_raw(k, in, out) == WEFT_OK && !memcmp(out, ref, M * N * 4));
    weft_kg_kernel_free(k);
    weft_kg_sched_free(s);
    s = weft_kg_tune(kg2, &(weft_kg_tune_opts){.trials = 0, .log = log}, &again);
    CHECK(s && again.from_log && !strcmp(again.best, rep.best));
    weft_kg_sched_free(s);
    weft_kg_free(kg2);
    unlink(log);
    rmdir(dir);
    weft_kg_free(kg);
    free(a), free(b), free(bias), free(ref), free(out);
}

// The tuner places stages too (at root, at the outermost loop, at the last outer loop, inlined where they do not
// reduce): a tuned softmax computes the closed form's numbers, and a log entry with its stages at the row loop comes
// back as that schedule.
static void test_tune_stages(void) {
    char dir[] = "/tmp/weft-kgen-test-XXXXXX", log[128];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(log, sizeof log, "%s/tune.json", dir);
    const int64_t R = 64, C = 96;
    weft_kg *kg = softmax_def(R, C);
    float *x = ints(R * C, -6, 6, 71), *ref = malloc(R * C * 4), *out = malloc(R * C * 4);
    const float *in[] = {x};
    CHECK(weft_kg_reference(kg, in, ref) == WEFT_OK);
    weft_kg_tune_report rep;
    weft_kg_sched *s = weft_kg_tune(kg, &(weft_kg_tune_opts){.trials = 8, .repeat = 1, .seed = 9, .log = log}, &rep);
    CHECK(s && rep.measured == 8 && rep.candidates > 200);
    weft_kg_kernel *k = s ? weft_kg_build(s) : NULL;
    double err = 1;
    if (k && weft_kg_run_raw(k, in, out) == WEFT_OK) {
        err = 0;
        for (int i = 0; i < R * C; i++) err = fmax(err, fabs((double)out[i] - ref[i]) / (fabs(ref[i]) + 1e-30));
    }
    CHECK(err < 1e-5);
    weft_kg_kernel_free(k);
    weft_kg_sched_free(s);
    // the entry rewritten by hand: the row loop untiled, the column loop whole inside it, the stages at the row loop
    FILE *f = fopen(log, "r");
    char text[4096] = {0};
    CHECK(f && fread(text, 1, sizeof text - 1, f) > 0);
    if (f) fclose(f);
    char *key = strstr(text, "\"key\":"), *end = key ? strchr(key + 7, ',') : NULL;
    CHECK(key && end);
    if (key && end) {
        *end = 0;
        f = fopen(log, "w");
        fprintf(f, "{\"weft_kgen_log\": 1, \"entries\": [{%s, \"tile0\": 1, \"tile1\": %lld, \"rtile\": 1, \"rin\": 0, "
                   "\"unroll\": 0, \"cw\": 0, \"par\": 0, \"at\": 2, \"ms\": 1}]}", key, (long long)C);
        fclose(f);
        weft_kg_tune_report again;
        s = weft_kg_tune(kg, &(weft_kg_tune_opts){.trials = 0, .log = log}, &again);
        CHECK(s && again.from_log && !strcmp(again.best, "i j(vec) mx@i sm@i"));
        k = s ? weft_kg_build(s) : NULL;
        memset(out, 0, R * C * 4);
        CHECK(k && weft_kg_run_raw(k, in, out) == WEFT_OK);
        err = 0;
        for (int i = 0; i < R * C; i++) err = fmax(err, fabs((double)out[i] - ref[i]) / (fabs(ref[i]) + 1e-30));
        CHECK(err < 1e-5);
        weft_kg_kernel_free(k);
        weft_kg_sched_free(s);
        // a place past the template's is refused
        f = fopen(log, "w");
        fprintf(f, "{\"entries\": [{%s, \"tile0\": 1, \"tile1\": 1, \"rtile\": 1, \"rin\": 0, \"unroll\": 0, "
                   "\"cw\": 0, \"par\": 0, \"at\": 4, \"ms\": 1}]}", key);
        fclose(f);
        CHECK(weft_kg_tune(kg, &(weft_kg_tune_opts){.trials = 0, .log = log}, NULL) == NULL &&
              wt_error_has("is not a schedule of it"));
    }
    unlink(log);
    rmdir(dir);
    weft_kg_free(kg);
    free(x), free(ref), free(out);
}

int main(void) {
    RUN(test_reference);
    RUN(test_errors);
    if (!weft_kg_available()) {
        printf("no C compiler (cc, or $WEFT_KGEN_CC): the tests that build kernels are skipped\n");
        return wt_summary();
    }
    RUN(test_schedules);
    RUN(test_stages);
    RUN(test_tensorize);
    RUN(test_conv2d);
    RUN(test_elementwise_and_tensors);
    RUN(test_tune);
    RUN(test_tune_stages);
    return wt_summary();
}
