// The linear ops' epilogue on CUDA: bias add and exact GELU in one pass, for
// f32, f64, bf16 and f16 (math in f32, f64 in f64; each result rounded once).
#include "ew_math.cuh"
#include "linear_kernels.h"

namespace {

template <typename T> struct math_of { using type = float; };
template <> struct math_of<double> { using type = double; };

template <typename C, typename T> __device__ __forceinline__ C to_math(T v) { return (C)v; }
template <> __device__ __forceinline__ float to_math<float, __nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float to_math<float, __half>(__half v) { return __half2float(v); }
template <typename T, typename C> __device__ __forceinline__ T from_math(C v) { return (T)v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_math<__nv_bfloat16, float>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_math<__half, float>(float v) { return __float2half_rn(v); }

template <typename T>
__global__ void __launch_bounds__(WEFT_CU_THREADS) bias_act(T *h, T *y, const T *b, int64_t total, int64_t n) {
    using C = typename math_of<T>::type;
    WEFT_CU_GRID_LOOP(i, total) {
        C v = to_math<C>(h[i]);
        if (b) {
            v += to_math<C>(b[i % n]);
            h[i] = from_math<T>(v);
        }
        if (y) y[i] = from_math<T>(weft_ew::gelu<C>(v));
    }
}

template <typename T> cudaError_t launch(void *h, void *y, const void *b, int64_t rows, int64_t n, cudaStream_t s) {
    int64_t total = rows * n;
    bias_act<T><<<weft_cu_blocks(total), WEFT_CU_THREADS, 0, s>>>((T *)h, (T *)y, (const T *)b, total, n);
    return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t weft_cu_bias_act(int dtype, void *h, void *y, const void *b, int64_t rows, int64_t n,
                                        cudaStream_t s) {
    if (rows * n == 0 || (!b && !y)) return cudaSuccess;
    switch (dtype) {
    case WEFT_CU_F32: return launch<float>(h, y, b, rows, n, s);
    case WEFT_CU_F64: return launch<double>(h, y, b, rows, n, s);
    case WEFT_CU_BF16: return launch<__nv_bfloat16>(h, y, b, rows, n, s);
    case WEFT_CU_F16: return launch<__half>(h, y, b, rows, n, s);
    default: return cudaErrorInvalidValue;
    }
}
