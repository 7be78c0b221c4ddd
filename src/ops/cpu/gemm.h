// The one CPU GEMM behind every op that multiplies matrices (matmul, conv,
// attention, lstm): row-major C (M,N) = alpha op(A) op(B) + beta C, where
// op(A) is (M,K) and op(B) is (K,N); ta / tb say the operand is stored
// transposed ((K,M) with leading dim lda, (N,K) with ldb).
//
// f64 goes to OpenBLAS. f32 goes to OpenBLAS or, when the build found it,
// oneDNN, chosen per shape by measuring both once (gemm.c); WEFT_GEMM=openblas
// or onednn forces one. Called inside an OpenMP parallel region, a product runs
// on the calling thread only. K == 0 leaves beta C; M or N == 0 does nothing.
// Dims must fit in int (callers check: BLAS takes int).
#ifndef WEFT_OPS_CPU_GEMM_H
#define WEFT_OPS_CPU_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include <weft/tensor.h>

typedef enum weft_gemm_backend {
    WEFT_GEMM_AUTO = 0, // measured per shape (the default)
    WEFT_GEMM_OPENBLAS,
    WEFT_GEMM_ONEDNN,
} weft_gemm_backend;

void weft_cpu_gemm(weft_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A,
                   int64_t lda, const void *B, int64_t ldb, double beta, void *C, int64_t ldc);

static inline void weft_cpu_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    weft_cpu_gemm(WEFT_F32, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// bf16 operands (stored transposed as ta / tb say), C = op(A) op(B) in
// c_dtype (bf16 or f32), accumulated in f32: oneDNN's bf16 matmul (AMX or
// AVX512-BF16 kernels) where weft_cpu_gemm_have_bf16(), else both operands
// widened to f32 for one sgemm. K == 0 gives zeros.
void weft_cpu_gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                        const uint16_t *B, int64_t ldb, weft_dtype c_dtype, void *C, int64_t ldc);
// oneDNN is built in, can run bf16 matmul on this CPU, and WEFT_GEMM is not openblas.
bool weft_cpu_gemm_have_bf16(void);

// Which backend f32 products use: WEFT_GEMM in the environment at the first
// call (auto | openblas | onednn), or the last weft_cpu_gemm_set_backend.
// Forcing onednn in a build without it, or with no oneDNN, falls back to OpenBLAS.
void weft_cpu_gemm_set_backend(weft_gemm_backend b);
weft_gemm_backend weft_cpu_gemm_get_backend(void);
bool weft_cpu_gemm_have_onednn(void);
// The backend auto mode picked for one f32 shape (measuring it if new), for
// tests and `weft info`: WEFT_GEMM_OPENBLAS or WEFT_GEMM_ONEDNN.
weft_gemm_backend weft_cpu_gemm_choice(bool ta, bool tb, int64_t M, int64_t N, int64_t K);

#endif
