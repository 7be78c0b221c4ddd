// needs: cuda
// GEMM on the GPU through weft (weft_matmul on cuda:0 tensors) against
// cuBLAS called directly on the same buffers, in this binary:
//   cuda_sgemm_<n>, cuda_bf16gemm_<n>   TFLOP/s (peer: cublasGemmEx with the same types)
// Goal (issue 6): weft >= 0.95x cuBLAS. Without a GPU it prints a note and no lines.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <weft.h>
#include <weft/device.h>

#include "bench_util.h"

static double tflops(double n, double s) { return 2.0 * n * n * n / s * 1e-12; }

static int run(int argc, char **argv, const char *name, int64_t n, weft_dtype dt, cublasHandle_t h) {
    if (!bench_selected(argc, argv, name)) return 0;
    weft_device cu = {WEFT_CUDA, 0};
    weft_tensor *a32 = weft_tensor_rand(WEFT_DIMS(n, n), WEFT_F32, NULL), *b32 = weft_tensor_rand(WEFT_DIMS(n, n), WEFT_F32, NULL);
    weft_tensor *ah = weft_cast(a32, dt), *bh = weft_cast(b32, dt);
    weft_tensor *a = weft_tensor_to(ah, cu), *b = weft_tensor_to(bh, cu), *c = weft_matmul(a, b);
    if (!c) {
        fprintf(stderr, "%s: %s\n", name, weft_last_error());
        return 1;
    }
    double tw, tc;
    // weft: one matmul per call, waiting for the GPU at the end of each timed call
    BENCH_BEST(tw, 3, 10, 0.5, {
        weft_tensor *r = weft_matmul(a, b);
        weft_device_synchronize(cu);
        weft_tensor_free(r);
    });
    cudaDataType_t ty = dt == WEFT_F32 ? CUDA_R_32F : CUDA_R_16BF;
    const float one = 1, zero = 0;
    // cuBLAS directly, row-major C = A B as column-major C^T = B^T A^T, into c's buffer
    BENCH_BEST(tc, 3, 10, 0.5, {
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)n, (int)n, &one, weft_tensor_device_ptr(b), ty, (int)n,
                     weft_tensor_device_ptr(a), ty, (int)n, &zero, weft_tensor_device_ptr(c), ty, (int)n, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
        cudaDeviceSynchronize();
    });
    bench_report_peer(name, tflops((double)n, tw), "TFLOP/s", 1, tflops((double)n, tc));
    weft_tensor *all[] = {a32, b32, ah, bh, a, b, c};
    for (int i = 0; i < 7; i++) weft_tensor_free(all[i]);
    return 0;
}

int main(int argc, char **argv) {
    if (weft_device_count(WEFT_CUDA) < 1) {
        fprintf(stderr, "cuda_gemm: no CUDA device; nothing measured\n");
        return 0;
    }
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1;
    int fail = 0;
    fail |= run(argc, argv, "cuda_sgemm_4096", 4096, WEFT_F32, h);
    fail |= run(argc, argv, "cuda_bf16gemm_4096", 4096, WEFT_BF16, h);
    fail |= run(argc, argv, "cuda_bf16gemm_8192", 8192, WEFT_BF16, h);
    cublasDestroy(h);
    return fail;
}
