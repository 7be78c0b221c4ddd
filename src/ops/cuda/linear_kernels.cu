// The linear ops' epilogue on CUDA: bias add and GELU (exact or tanh) in one pass, for
// f32, f64, bf16 and f16 (math in f32, f64 in f64; each result rounded once).
#include "ew_math.cuh"
#include "linear_kernels.h"

namespace {

template <typename T> struct math_of { using type = float; };
template <> struct math_of<double> { using type = double; };

template <typename T> __device__ __forceinline__ typename math_of<T>::type load(T v) {
    if constexpr (weft_cu_is_half<T>::value) return weft_cu_to_f32(v);
    else return v;
}
template <typename T, typename C> __device__ __forceinline__ T store(C v) {
    if constexpr (weft_cu_is_half<T>::value) return weft_cu_from_f32<T>(v);
    else return (T)v;
}

template <typename T, bool TANH>
__global__ void __launch_bounds__(WEFT_CU_THREADS) bias_act(T *h, T *y, const T *b, int64_t total, int64_t n) {
    using C = typename math_of<T>::type;
    WEFT_CU_GRID_LOOP(i, total) {
        C v = load(h[i]);
        if (b) {
            v += load(b[i % n]);
            h[i] = store<T>(v);
        }
        if (y) y[i] = store<T>(TANH ? weft_ew::gelu_tanh<C>(v) : weft_ew::gelu<C>(v));
    }
}

template <typename T>
cudaError_t launch(void *h, void *y, const void *b, int64_t rows, int64_t n, int tanh_form, cudaStream_t s) {
    int64_t total = rows * n;
    if (tanh_form)
        bias_act<T, true><<<weft_cu_blocks(total), WEFT_CU_THREADS, 0, s>>>((T *)h, (T *)y, (const T *)b, total, n);
    else
        bias_act<T, false><<<weft_cu_blocks(total), WEFT_CU_THREADS, 0, s>>>((T *)h, (T *)y, (const T *)b, total, n);
    return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t weft_cu_bias_act(int dtype, void *h, void *y, const void *b, int64_t rows, int64_t n,
                                        int tanh_form, cudaStream_t s) {
    if (rows * n == 0 || (!b && !y)) return cudaSuccess;
    switch (dtype) {
    case WEFT_CU_F32: return launch<float>(h, y, b, rows, n, tanh_form, s);
    case WEFT_CU_F64: return launch<double>(h, y, b, rows, n, tanh_form, s);
    case WEFT_CU_BF16: return launch<__nv_bfloat16>(h, y, b, rows, n, tanh_form, s);
    case WEFT_CU_F16: return launch<__half>(h, y, b, rows, n, tanh_form, s);
    default: return cudaErrorInvalidValue;
    }
}
