// Linear-algebra benchmarks, in GFLOP/s; the fifth field of each line is
// cblas_sgemm (OpenBLAS) called directly on the same data in this binary.
//   sgemm_1024            weft_matmul of two (1024,1024) f32 matrices
//   sgemm_<shape>         the products of the standard models' training steps
//                         (M,K)@(K,N) with the forward's layout: mlp (batch 128,
//                         784 -> 256), gpt (4096 tokens, 128 -> 384 qkv), lstm
//                         (one step: batch 32, 256 -> 1024 gates)
//   bgemm_1024            weft_matmul of two bf16 (1024,1024) matrices (oneDNN's
//                         bf16 kernels where the CPU has them) against OpenBLAS's f32
// Above 1 weft's shared GEMM (src/ops/cpu/gemm.c: OpenBLAS or oneDNN per shape)
// beats OpenBLAS alone.
#include <cblas.h>
#include <stdio.h>
#include <weft.h>

#include "bench_util.h"

static void one(const char *name, int64_t M, int64_t K, int64_t N, weft_dtype dt) {
    weft_generator *g = weft_generator_create(1);
    weft_tensor *a32 = weft_tensor_rand(WEFT_DIMS(M, K), WEFT_F32, g), *b32 = weft_tensor_rand(WEFT_DIMS(K, N), WEFT_F32, g);
    weft_tensor *a = dt == WEFT_F32 ? weft_tensor_ref(a32) : weft_cast(a32, dt);
    weft_tensor *b = dt == WEFT_F32 ? weft_tensor_ref(b32) : weft_cast(b32, dt);
    weft_tensor *c = weft_tensor_empty(WEFT_DIMS(M, N), WEFT_F32);
    const float *pa = weft_tensor_data(a32), *pb = weft_tensor_data(b32);
    float *pc = weft_tensor_data(c);
    double flop = 2.0 * (double)M * (double)N * (double)K, tw = 1e30, tb = 1e30;
    weft_num_threads(); // sets OpenBLAS's thread count before either side runs
    for (int rep = 0; rep < 2; rep++) { // interleave so neither side gets a warmer machine
        double t1, t2;
        BENCH_BEST(t1, 3, 3, 0.2, {
            weft_tensor *r = weft_matmul(a, b);
            weft_tensor_free(r);
        });
        BENCH_BEST(t2, 3, 3, 0.2, cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, pa,
                                              (int)K, pb, (int)N, 0.0f, pc, (int)N));
        if (t1 < tw) tw = t1;
        if (t2 < tb) tb = t2;
    }
    bench_report_peer(name, flop / tw * 1e-9, "GFLOP/s", 1, flop / tb * 1e-9);
    weft_tensor_free(a), weft_tensor_free(b), weft_tensor_free(a32), weft_tensor_free(b32), weft_tensor_free(c);
    weft_generator_free(g);
}

int main(int argc, char **argv) {
    static const struct {
        const char *name;
        int64_t M, K, N;
        weft_dtype dt;
    } cases[] = {
        {"sgemm_1024", 1024, 1024, 1024, WEFT_F32}, {"sgemm_mlp", 128, 784, 256, WEFT_F32},
        {"sgemm_gpt_qkv", 4096, 128, 384, WEFT_F32}, {"sgemm_lstm_step", 32, 256, 1024, WEFT_F32},
        {"bgemm_1024", 1024, 1024, 1024, WEFT_BF16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        if (bench_selected(argc, argv, cases[i].name))
            one(cases[i].name, cases[i].M, cases[i].K, cases[i].N, cases[i].dt);
    return 0;
}
