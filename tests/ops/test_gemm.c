// The shared CPU GEMM (src/ops/cpu/gemm.h) against a naive double-precision
// loop: every transpose pair, padded leading dims, alpha/beta, K = 0, empty
// M/N, small products split over threads, products run inside an OpenMP
// region; for OpenBLAS, oneDNN (when built in) and the measured choice.
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "ops/cpu/gemm.h"
#include "weft_test.h"

// C = alpha op(A) op(B) + beta C0 in double, row-major with the given lds.
static void ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double *A, int64_t lda,
                     const double *B, int64_t ldb, double beta, double *C, int64_t ldc) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) s += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
            C[i * ldc + j] = alpha * s + (beta == 0 ? 0 : beta * C[i * ldc + j]);
        }
}

// One product of the given shape and layout in f32 and f64 against ref_gemm.
static void check_one(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int pad, double alpha, double beta,
                      uint64_t seed) {
    int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    int64_t na = (ta ? K : M) * lda, nb = (tb ? N : K) * ldb, nc = M * ldc;
    double *A = calloc((size_t)na + 1, 8), *B = calloc((size_t)nb + 1, 8), *C = calloc((size_t)nc + 1, 8);
    double *R = calloc((size_t)nc + 1, 8), *D = calloc((size_t)nc + 1, 8);
    float *Af = calloc((size_t)na + 1, 4), *Bf = calloc((size_t)nb + 1, 4), *Cf = calloc((size_t)nc + 1, 4);
    wt_vals(A, na, -1, 1, seed), wt_vals(B, nb, -1, 1, seed + 1), wt_vals(C, nc, -1, 1, seed + 2);
    for (int64_t i = 0; i < na; i++) Af[i] = (float)A[i], A[i] = Af[i]; // the same numbers in both precisions
    for (int64_t i = 0; i < nb; i++) Bf[i] = (float)B[i], B[i] = Bf[i];
    for (int64_t i = 0; i < nc; i++) Cf[i] = (float)C[i], C[i] = Cf[i];
    memcpy(R, C, (size_t)nc * 8), memcpy(D, C, (size_t)nc * 8);
    ref_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, R, ldc);
    weft_cpu_gemm(WEFT_F64, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, D, ldc);
    weft_cpu_sgemm(ta, tb, M, N, K, (float)alpha, Af, lda, Bf, ldb, (float)beta, Cf, ldc);
    int bad64 = 0, bad32 = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < ldc; j++) {
            int64_t o = i * ldc + j;
            double want = j < N ? R[o] : C[o]; // padding past N is never written
            if (fabs(D[o] - want) > 1e-12 * (1 + fabs(want))) bad64++;
            if (fabs(Cf[o] - want) > 2e-6 * (double)(K + 1) * (1 + fabs(want))) bad32++;
        }
    if (bad64 || bad32)
        fprintf(stderr, "gemm ta=%d tb=%d (%lld,%lld,%lld) pad %d alpha %g beta %g: %d f64, %d f32 wrong\n", ta, tb,
                (long long)M, (long long)N, (long long)K, pad, alpha, beta, bad64, bad32);
    CHECK(bad64 == 0);
    CHECK(bad32 == 0);
    free(A), free(B), free(C), free(R), free(D), free(Af), free(Bf), free(Cf);
}

static void check_all_shapes(void) {
    static const int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7},    {17, 9, 33},  {64, 256, 40},
                                        {300, 20, 16}, {8, 520, 64}, {129, 127, 5}, {32, 1024, 64}};
    uint64_t seed = 1;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int t = 0; t < 4; t++) {
            const int64_t *d = shapes[s];
            check_one(t & 1, t >> 1, d[0], d[1], d[2], 0, 1, 0, seed++);
            check_one(t & 1, t >> 1, d[0], d[1], d[2], 3, -0.5, 1, seed++);
            check_one(t & 1, t >> 1, d[0], d[1], d[2], 1, 2, 0.25, seed++);
        }
    check_one(false, false, 4, 6, 0, 0, 1, 0, seed++);   // K = 0: C = 0
    check_one(true, false, 4, 6, 0, 2, 1, 0.5, seed++);  // K = 0: C = beta C
    check_one(false, true, 0, 6, 5, 0, 1, 0, seed++);    // M = 0: nothing
    check_one(false, false, 6, 0, 5, 0, 1, 0, seed++);   // N = 0: nothing
}

static void test_openblas(void) {
    weft_cpu_gemm_set_backend(WEFT_GEMM_OPENBLAS);
    check_all_shapes();
    weft_set_num_threads(1); // no split into per-thread blocks
    check_all_shapes();
    weft_set_num_threads(2);
}

static void test_onednn(void) {
    weft_cpu_gemm_set_backend(WEFT_GEMM_ONEDNN); // OpenBLAS where the build has no oneDNN
    check_all_shapes();
    printf("oneDNN %s\n", weft_cpu_gemm_have_onednn() ? "built in" : "not built in: OpenBLAS checked twice");
}

static void test_auto(void) {
    weft_cpu_gemm_set_backend(WEFT_GEMM_AUTO);
    check_all_shapes();
    check_all_shapes(); // now from the cache of choices
    weft_gemm_backend c = weft_cpu_gemm_choice(false, true, 64, 256, 40);
    CHECK(c == WEFT_GEMM_OPENBLAS || (c == WEFT_GEMM_ONEDNN && weft_cpu_gemm_have_onednn()));
    CHECK(weft_cpu_gemm_choice(false, true, 64, 256, 40) == c); // cached: the same answer
    if (!weft_cpu_gemm_have_onednn()) CHECK(c == WEFT_GEMM_OPENBLAS);
}

// Products run by several OpenMP threads at once, each on the calling thread
// only (attention runs one per head this way).
static void test_in_parallel(void) {
    for (int b = 0; b < 3; b++) {
        weft_cpu_gemm_set_backend((weft_gemm_backend)b);
        int bad = 0;
#pragma omp parallel for num_threads(2) reduction(+ : bad)
        for (int i = 0; i < 8; i++) {
            int64_t M = 20 + i, N = 24, K = 16;
            float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)(K * N));
            float *C = malloc(sizeof(float) * (size_t)(M * N));
            for (int64_t k = 0; k < M * K; k++) A[k] = (float)((k * 7 + i) % 11) - 5;
            for (int64_t k = 0; k < K * N; k++) B[k] = (float)((k * 3 + i) % 5) - 2;
            weft_cpu_sgemm(false, false, M, N, K, 1, A, K, B, N, 0, C, N);
            for (int64_t r = 0; r < M; r++)
                for (int64_t c = 0; c < N; c++) {
                    float s = 0; // small integers: exact in f32 in any order
                    for (int64_t k = 0; k < K; k++) s += A[r * K + k] * B[k * N + c];
                    bad += s != C[r * N + c];
                }
            free(A), free(B), free(C);
        }
        CHECK(bad == 0);
    }
    weft_cpu_gemm_set_backend(WEFT_GEMM_AUTO);
}

// bf16 operands: C in f32 within f32 rounding of the exact product of the
// bf16 values, C in bf16 within one bf16 rounding (2^-8 relative) of it.
static void check_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int pad, uint64_t seed) {
    int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    int64_t na = (ta ? K : M) * lda, nb = (tb ? N : K) * ldb, nc = M * ldc;
    double *A = calloc((size_t)na + 1, 8), *B = calloc((size_t)nb + 1, 8), *R = calloc((size_t)nc + 1, 8);
    uint16_t *Ah = calloc((size_t)na + 1, 2), *Bh = calloc((size_t)nb + 1, 2), *Ch = calloc((size_t)nc + 1, 2);
    float *Cf = calloc((size_t)nc + 1, 4);
    wt_vals(A, na, -1, 1, seed), wt_vals(B, nb, -1, 1, seed + 1);
    for (int64_t i = 0; i < na; i++) Ah[i] = weft_f32_to_bf16((float)A[i]), A[i] = weft_bf16_to_f32(Ah[i]);
    for (int64_t i = 0; i < nb; i++) Bh[i] = weft_f32_to_bf16((float)B[i]), B[i] = weft_bf16_to_f32(Bh[i]);
    ref_gemm(ta, tb, M, N, K, 1, A, lda, B, ldb, 0, R, ldc);
    weft_cpu_gemm_bf16(ta, tb, M, N, K, Ah, lda, Bh, ldb, WEFT_F32, Cf, ldc);
    weft_cpu_gemm_bf16(ta, tb, M, N, K, Ah, lda, Bh, ldb, WEFT_BF16, Ch, ldc);
    int bad32 = 0, bad16 = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double want = R[i * ldc + j], scale = 1e-2 + fabs(want);
            if (fabs(Cf[i * ldc + j] - want) > 2e-6 * (double)K * scale) bad32++;
            if (fabs(weft_bf16_to_f32(Ch[i * ldc + j]) - want) > (1.0 / 256 + 2e-6 * (double)K) * scale) bad16++;
        }
    if (bad32 || bad16)
        fprintf(stderr, "gemm_bf16 ta=%d tb=%d (%lld,%lld,%lld) pad %d: %d f32, %d bf16 wrong\n", ta, tb, (long long)M,
                (long long)N, (long long)K, pad, bad32, bad16);
    CHECK(bad32 == 0);
    CHECK(bad16 == 0);
    free(A), free(B), free(R), free(Ah), free(Bh), free(Ch), free(Cf);
}

static void test_bf16(void) {
    printf("bf16 via oneDNN: %s\n", weft_cpu_gemm_have_bf16() ? "yes" : "no (widened to f32)");
    for (int pass = 0; pass < 2; pass++) { // oneDNN where it can, then the widened sgemm
        weft_cpu_gemm_set_backend(pass ? WEFT_GEMM_OPENBLAS : WEFT_GEMM_AUTO);
        if (pass) CHECK(!weft_cpu_gemm_have_bf16());
        uint64_t seed = 100;
        for (int t = 0; t < 4; t++) {
            check_bf16(t & 1, t >> 1, 1, 1, 1, 0, seed++);
            check_bf16(t & 1, t >> 1, 17, 9, 33, 2, seed++);
            check_bf16(t & 1, t >> 1, 64, 256, 128, 0, seed++);
        }
    }
    weft_cpu_gemm_set_backend(WEFT_GEMM_AUTO);
}

int main(void) {
    weft_set_num_threads(2);
    RUN(test_openblas);
    RUN(test_onednn);
    RUN(test_auto);
    RUN(test_in_parallel);
    RUN(test_bf16);
    return wt_summary();
}
