// The elementwise family's formulas on CUDA, by variant and type: what
// elementwise_kernels.cu (one kernel per op) and fused_kernels.cu (graph
// mode's fused groups) both compute, so a fused group gives the unfused
// ops' results. Each formula mirrors cpu/elementwise.c expression for
// expression (f32 math in f32 with (float)sc, f64 in f64, integer
// add/mul_scalar through int64, integer division by 0 gives 0,
// maximum/minimum propagate a NaN in either operand). nvcc only.
#ifndef WEFT_CU_EW_MATH_CUH
#define WEFT_CU_EW_MATH_CUH

#include "cu_common.cuh"
#include "elementwise_kernels.h"

namespace weft_ew {

// ---- math, by type (f32 calls the f suffixed functions, as the CPU does) ----
template <typename T> struct is_fp { static constexpr bool value = false; };
template <> struct is_fp<float> { static constexpr bool value = true; };
template <> struct is_fp<double> { static constexpr bool value = true; };

__device__ __forceinline__ float m_exp(float v) { return expf(v); }
__device__ __forceinline__ double m_exp(double v) { return exp(v); }
__device__ __forceinline__ float m_log(float v) { return logf(v); }
__device__ __forceinline__ double m_log(double v) { return log(v); }
__device__ __forceinline__ float m_sqrt(float v) { return sqrtf(v); }
__device__ __forceinline__ double m_sqrt(double v) { return sqrt(v); }
__device__ __forceinline__ float m_sin(float v) { return sinf(v); }
__device__ __forceinline__ double m_sin(double v) { return sin(v); }
__device__ __forceinline__ float m_cos(float v) { return cosf(v); }
__device__ __forceinline__ double m_cos(double v) { return cos(v); }
__device__ __forceinline__ float m_tanh(float v) { return tanhf(v); }
__device__ __forceinline__ double m_tanh(double v) { return tanh(v); }
__device__ __forceinline__ float m_erf(float v) { return erff(v); }
__device__ __forceinline__ double m_erf(double v) { return erf(v); }
__device__ __forceinline__ float m_fabs(float v) { return fabsf(v); }
__device__ __forceinline__ double m_fabs(double v) { return fabs(v); }
__device__ __forceinline__ float m_floor(float v) { return floorf(v); }
__device__ __forceinline__ double m_floor(double v) { return floor(v); }
__device__ __forceinline__ float m_ceil(float v) { return ceilf(v); }
__device__ __forceinline__ double m_ceil(double v) { return ceil(v); }
__device__ __forceinline__ float m_rint(float v) { return rintf(v); }
__device__ __forceinline__ double m_rint(double v) { return rint(v); }
__device__ __forceinline__ float m_trunc(float v) { return truncf(v); }
__device__ __forceinline__ double m_trunc(double v) { return trunc(v); }
__device__ __forceinline__ float m_fmod(float a, float b) { return fmodf(a, b); }
__device__ __forceinline__ double m_fmod(double a, double b) { return fmod(a, b); }
__device__ __forceinline__ float m_asin(float v) { return asinf(v); }
__device__ __forceinline__ double m_asin(double v) { return asin(v); }
__device__ __forceinline__ float m_acos(float v) { return acosf(v); }
__device__ __forceinline__ double m_acos(double v) { return acos(v); }
__device__ __forceinline__ float m_atan(float v) { return atanf(v); }
__device__ __forceinline__ double m_atan(double v) { return atan(v); }
__device__ __forceinline__ float m_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double m_pow(double a, double b) { return pow(a, b); }

// GELU, exact (erf) form: 0.5 x (1 + erf(x / sqrt 2)); its derivative
// Phi(x) + x phi(x). (The CPU's f32 erf is a polynomial within about 6.2e-7
// of erf evaluated in f32; f32 results agree to that.)
template <typename T> __device__ __forceinline__ T gelu(T x) {
    return (T)0.5 * x * ((T)1 + m_erf(x * (T)0.70710678118654752440));
}
template <typename T> __device__ __forceinline__ T gelu_grad(T x) {
    return (T)0.5 * ((T)1 + m_erf(x * (T)0.70710678118654752440)) +
           x * m_exp((T)-0.5 * x * x) * (T)0.3989422804014327;
}

// GELU, tanh approximation: 0.5 x (1 + tanh(u)), u = k (x + a x^3), computed as x sigmoid(2u) (the same
// function, as the CPU's f32 loop); its derivative s + 2 x s (1 - s) u', s = sigmoid(2u), u' = k (1 + 3 a x^2).
template <typename T> __device__ __forceinline__ T gelu_tanh_sig(T x, T *up) {
    T x2 = x * x;
    *up = (T)0.7978845608028654 * ((T)1 + (T)(3 * 0.044715) * x2);
    return (T)1 / ((T)1 + m_exp((T)-2 * (T)0.7978845608028654 * (x + (T)0.044715 * x2 * x)));
}
template <typename T> __device__ __forceinline__ T gelu_tanh(T x) {
    T up;
    return x * gelu_tanh_sig(x, &up);
}
template <typename T> __device__ __forceinline__ T gelu_tanh_grad(T x) {
    T up, s = gelu_tanh_sig(x, &up);
    return s + (T)2 * x * s * ((T)1 - s) * up;
}

// ---- the formulas ----
template <int OP, typename T> __device__ __forceinline__ T unary_op(T v, double sc) {
    constexpr bool fp = is_fp<T>::value;
    if constexpr (OP == WEFT_CU_EW_NEG) return (T)(-v);
    else if constexpr (OP == WEFT_CU_EW_ABS) {
        if constexpr (fp) return m_fabs(v);
        else return v < 0 ? (T)(-v) : v;
    } else if constexpr (OP == WEFT_CU_EW_SIGN) return (T)((v > 0) - (v < 0));
    else if constexpr (OP == WEFT_CU_EW_EXP) return m_exp(v);
    else if constexpr (OP == WEFT_CU_EW_LOG) return m_log(v);
    else if constexpr (OP == WEFT_CU_EW_SQRT) return m_sqrt(v);
    else if constexpr (OP == WEFT_CU_EW_RSQRT) return (T)1 / m_sqrt(v);
    else if constexpr (OP == WEFT_CU_EW_SIN) return m_sin(v);
    else if constexpr (OP == WEFT_CU_EW_COS) return m_cos(v);
    else if constexpr (OP == WEFT_CU_EW_TANH) return m_tanh(v);
    else if constexpr (OP == WEFT_CU_EW_SIGMOID) return (T)1 / ((T)1 + m_exp(-v));
    else if constexpr (OP == WEFT_CU_EW_RELU) return v > 0 ? v : (T)0;
    else if constexpr (OP == WEFT_CU_EW_GELU) return gelu(v);
    else if constexpr (OP == WEFT_CU_EW_GELU_GRAD) return gelu_grad(v);
    else if constexpr (OP == WEFT_CU_EW_GELU_TANH) return gelu_tanh(v);
    else if constexpr (OP == WEFT_CU_EW_SILU) return v / ((T)1 + m_exp(-v));
    else if constexpr (OP == WEFT_CU_EW_ERF) return m_erf(v);
    else if constexpr (OP == WEFT_CU_EW_FLOOR) return m_floor(v);
    else if constexpr (OP == WEFT_CU_EW_CEIL) return m_ceil(v);
    else if constexpr (OP == WEFT_CU_EW_ROUND) return m_rint(v);
    else if constexpr (OP == WEFT_CU_EW_TRUNC) return m_trunc(v);
    else if constexpr (OP == WEFT_CU_EW_ASIN) return m_asin(v);
    else if constexpr (OP == WEFT_CU_EW_ACOS) return m_acos(v);
    else if constexpr (OP == WEFT_CU_EW_ATAN) return m_atan(v);
    else if constexpr (OP == WEFT_CU_EW_POW_SCALAR) return m_pow(v, (T)sc);
    else if constexpr (OP == WEFT_CU_EW_ADD_SCALAR) {
        if constexpr (fp) return v + (T)sc;
        else return (T)(v + (int64_t)sc);
    } else if constexpr (OP == WEFT_CU_EW_MUL_SCALAR) {
        if constexpr (fp) return v * (T)sc;
        else return (T)(v * (int64_t)sc);
    } else static_assert(OP < 0, "not a unary variant");
}

template <int OP> struct is_cmp {
    static constexpr bool value = OP == WEFT_CU_EW_EQ || OP == WEFT_CU_EW_NE || OP == WEFT_CU_EW_LT ||
                                  OP == WEFT_CU_EW_LE || OP == WEFT_CU_EW_GT || OP == WEFT_CU_EW_GE;
};
// The output element type: bool (stored as a byte) for comparisons.
template <int OP, typename T> struct bin_out { using type = T; };
#define CMP_OUT(OP) template <typename T> struct bin_out<OP, T> { using type = uint8_t; };
CMP_OUT(WEFT_CU_EW_EQ) CMP_OUT(WEFT_CU_EW_NE) CMP_OUT(WEFT_CU_EW_LT)
CMP_OUT(WEFT_CU_EW_LE) CMP_OUT(WEFT_CU_EW_GT) CMP_OUT(WEFT_CU_EW_GE)
#undef CMP_OUT

template <typename T> __device__ __forceinline__ bool is_nan(T v) {
    if constexpr (is_fp<T>::value) return v != v;
    else return false;
}

template <int OP, typename T> __device__ __forceinline__ typename bin_out<OP, T>::type binary_op(T a, T b) {
    if constexpr (OP == WEFT_CU_EW_ADD) return (T)(a + b);
    else if constexpr (OP == WEFT_CU_EW_SUB) return (T)(a - b);
    else if constexpr (OP == WEFT_CU_EW_MUL) return (T)(a * b);
    else if constexpr (OP == WEFT_CU_EW_DIV) {
        if constexpr (is_fp<T>::value) return a / b;
        else return b ? (T)(a / b) : (T)0;
    } else if constexpr (OP == WEFT_CU_EW_FMOD || OP == WEFT_CU_EW_REMAINDER) { // as cpu/elementwise.c
        T r;
        if constexpr (is_fp<T>::value) r = m_fmod(a, b);
        else r = b == 0 || b == (T)-1 ? (T)0 : (T)(a % b);
        if constexpr (OP == WEFT_CU_EW_REMAINDER) r = r != 0 && (r < 0) != (b < 0) ? (T)(r + b) : r;
        return r;
    } else if constexpr (OP == WEFT_CU_EW_POW) return m_pow(a, b);
    else if constexpr (OP == WEFT_CU_EW_MAXIMUM) return (a > b || is_nan(a)) ? a : b;
    else if constexpr (OP == WEFT_CU_EW_MINIMUM) return (a < b || is_nan(a)) ? a : b;
    else if constexpr (OP == WEFT_CU_EW_EQ) return (uint8_t)(a == b);
    else if constexpr (OP == WEFT_CU_EW_NE) return (uint8_t)(a != b);
    else if constexpr (OP == WEFT_CU_EW_LT) return (uint8_t)(a < b);
    else if constexpr (OP == WEFT_CU_EW_LE) return (uint8_t)(a <= b);
    else if constexpr (OP == WEFT_CU_EW_GT) return (uint8_t)(a > b);
    else if constexpr (OP == WEFT_CU_EW_GE) return (uint8_t)(a >= b);
    else if constexpr (OP == WEFT_CU_EW_RELU_BW) return b > 0 ? a : (T)0; // a = gradient, b = relu's input
    else if constexpr (OP == WEFT_CU_EW_GELU_BW) return (T)(a * gelu_grad(b)); // a = gradient, b = gelu's input
    else if constexpr (OP == WEFT_CU_EW_GELU_TANH_BW) return (T)(a * gelu_tanh_grad(b));
    else static_assert(OP < 0, "not a binary variant");
}

// ---- the storage-only half types: each formula in f32, the result rounded once (as the CPU's widened loops) ----
template <int OP, typename T> __device__ __forceinline__ T ew_unary(T v, double sc) {
    if constexpr (weft_cu_is_half<T>::value) return weft_cu_from_f32<T>(unary_op<OP, float>(weft_cu_to_f32(v), sc));
    else return unary_op<OP, T>(v, sc);
}
// (bin_out<OP, T> gives bf16 / f16 for the arithmetic variants and bool for comparisons, as for f32)
template <int OP, typename T> __device__ __forceinline__ typename bin_out<OP, T>::type ew_binary(T a, T b) {
    if constexpr (weft_cu_is_half<T>::value) {
        auto r = binary_op<OP, float>(weft_cu_to_f32(a), weft_cu_to_f32(b));
        if constexpr (sizeof(r) == 1) return r; // a comparison's bool
        else return weft_cu_from_f32<T>(r);
    } else {
        return binary_op<OP, T>(a, b);
    }
}

} // namespace weft_ew

#endif
