// Device-side helpers shared by the .cu kernel files (nvcc only).
#ifndef WEFT_CU_COMMON_CUH
#define WEFT_CU_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cu_index.h"
#include "cu_tensor.h"

#define WEFT_CU_THREADS 256

// Blocks for n threads of WEFT_CU_THREADS, capped: kernels loop grid-stride.
static inline unsigned weft_cu_blocks(int64_t n) {
    int64_t b = (n + WEFT_CU_THREADS - 1) / WEFT_CU_THREADS;
    if (b < 1) b = 1;
    return (unsigned)(b > 65535 * 8 ? 65535 * 8 : b);
}

// Element offset of logical (row-major) index i in a strided tensor.
__device__ __forceinline__ int64_t weft_cu_offset(const weft_cu_tensor &t, int64_t i) {
    int64_t off = 0;
    for (int d = t.ndim - 1; d >= 0; d--) {
        int64_t s = t.sizes[d];
        off += (i % s) * t.strides[d];
        i /= s;
    }
    return off;
}

// True when the tensor is laid out row-major without gaps (fast path: offset == i).
static inline bool weft_cu_contiguous(const weft_cu_tensor &t) {
    int64_t st = 1;
    for (int d = t.ndim - 1; d >= 0; d--) {
        if (t.sizes[d] != 1 && t.strides[d] != st) return false;
        st *= t.sizes[d];
    }
    return true;
}

// The 32-bit layout (cu_index.h) of n descriptors of one shape (t[0]'s), false where 32 bits do not hold it.
static inline bool weft_cu_index_of(weft_cu_index *x, int n, const weft_cu_tensor *t) {
    const int64_t *st[WEFT_CU_INDEX_OPS];
    if (n > WEFT_CU_INDEX_OPS) return false;
    for (int k = 0; k < n; k++) st[k] = t[k].strides;
    return weft_cu_index_make(x, t[0].ndim, t[0].sizes, n, st);
}

// The offsets of logical index i in the N operands of x: weft_cu_index_offsets unrolled over the dims, so x
// (a kernel parameter) is read with constant indices and never copied to local memory.
template <int N>
__device__ __forceinline__ void weft_cu_offsets32(const weft_cu_index &x, uint32_t i, uint32_t (&off)[N]) {
#pragma unroll
    for (int k = 0; k < N; k++) off[k] = 0;
#pragma unroll
    for (int j = 0; j < WEFT_CU_MAX_DIMS; j++) {
        if (j == x.ndim) break;
        uint32_t q = weft_cu_div(x.div[j], i), r = i - q * x.div[j].d;
#pragma unroll
        for (int k = 0; k < N; k++) off[k] += r * (uint32_t)x.strides[k][j];
        i = q;
    }
}

// V elements moved as one aligned load or store (16 bytes of f32 at V = 4). A kernel uses it only where the
// host found every pointer aligned to sizeof(T) * V (weft_cu_aligned).
template <typename T, int V> struct alignas(sizeof(T) * V) weft_cu_pack {
    T v[V];
};
static inline bool weft_cu_aligned(const void *p, size_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

// Dynamic shared memory above the 48 KB default needs an opt-in per kernel (H100: up to 227 KB).
template <typename K> static inline cudaError_t weft_cu_smem_optin(K *kernel, size_t bytes) {
    if (bytes <= 48 * 1024) return cudaSuccess;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

// One-dimensional grid of BH * ntile blocks (a block per head and tile), false beyond 2^31 - 1.
static inline bool weft_cu_grid_of(int64_t BH, int64_t ntile, unsigned *nb) {
    const int64_t n = BH * ntile;
    if (ntile <= 0 || n > 0x7fffffff) return false;
    *nb = (unsigned)n;
    return true;
}

// A kernel's report of bad input (device/cuda/cuda_report.h): the first one
// claims the record; `what` is the op's name as a host pointer (the host
// prints it). rec NULL: the device has no record, nothing is written.
__device__ __forceinline__ void weft_cu_report(weft_cuda_report *rec, unsigned long long what, int kind,
                                               long long value, long long pos, long long limit) {
    if (!rec || atomicCAS(&rec->claimed, 0u, 1u) != 0u) return;
    rec->what = what, rec->kind = kind, rec->value = value, rec->pos = pos, rec->limit = limit;
    __threadfence();
    atomicExch(&rec->ready, 1u);
}

#define WEFT_CU_GRID_LOOP(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

// Scalar conversions through float/double for the storage-only half types.
template <typename T> __device__ __forceinline__ double weft_cu_to_f64(T v) { return (double)v; }
template <> __device__ __forceinline__ double weft_cu_to_f64<__half>(__half v) { return (double)__half2float(v); }
template <> __device__ __forceinline__ double weft_cu_to_f64<__nv_bfloat16>(__nv_bfloat16 v) {
    return (double)__bfloat162float(v);
}
template <typename T> __device__ __forceinline__ T weft_cu_from_f64(double v) { return (T)v; }
template <> __device__ __forceinline__ __half weft_cu_from_f64<__half>(double v) { return __double2half(v); }
template <> __device__ __forceinline__ __nv_bfloat16 weft_cu_from_f64<__nv_bfloat16>(double v) {
    return __double2bfloat16(v);
}
template <> __device__ __forceinline__ bool weft_cu_from_f64<bool>(double v) { return v != 0; }
// The storage-only half types: which they are, and their values as f32 and back (rounded to nearest even).
template <typename T> struct weft_cu_is_half { static constexpr bool value = false; };
template <> struct weft_cu_is_half<__half> { static constexpr bool value = true; };
template <> struct weft_cu_is_half<__nv_bfloat16> { static constexpr bool value = true; };
__device__ __forceinline__ float weft_cu_to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float weft_cu_to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T weft_cu_from_f32(float v);
template <> __device__ __forceinline__ __half weft_cu_from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 weft_cu_from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// A value of storage type ST (T itself, or bf16 / f16 with T float) in the arithmetic type T, and back: the
// half types widen exactly and round once (nearest even); other types pass as they are.
template <typename T, typename ST> __device__ __forceinline__ T weft_cu_ld(ST v) {
    if constexpr (weft_cu_is_half<ST>::value) return weft_cu_to_f32(v);
    else return v;
}
template <typename ST, typename T> __device__ __forceinline__ ST weft_cu_st(T v) {
    if constexpr (weft_cu_is_half<ST>::value) return weft_cu_from_f32<ST>(v);
    else return v;
}

// Run F<T>(args...) for the tensor's dtype: DISPATCH(dtype, launch_fn, args...).
// Returns cudaErrorInvalidValue for a dtype the family does not handle.
#define WEFT_CU_DISPATCH_FLOAT(dt, fn, ...)                          \
    switch (dt) {                                                     \
    case WEFT_CU_F32: return fn<float>(__VA_ARGS__);                  \
    case WEFT_CU_F64: return fn<double>(__VA_ARGS__);                 \
    default: return cudaErrorInvalidValue;                            \
    }
// Run F<T, ST>(args...) for a float tensor read in arithmetic type T from storage type ST: f32 and f64 as they
// are, bf16 / f16 in f32 (weft_cu_ld / weft_cu_st).
#define WEFT_CU_DISPATCH_FLOAT_HALF(dt, fn, ...)                          \
    switch (dt) {                                                         \
    case WEFT_CU_F32: return fn<float, float>(__VA_ARGS__);               \
    case WEFT_CU_F64: return fn<double, double>(__VA_ARGS__);             \
    case WEFT_CU_BF16: return fn<float, __nv_bfloat16>(__VA_ARGS__);      \
    case WEFT_CU_F16: return fn<float, __half>(__VA_ARGS__);              \
    default: return cudaErrorInvalidValue;                                \
    }
#define WEFT_CU_DISPATCH_NUM(dt, fn, ...)                             \
    switch (dt) {                                                     \
    case WEFT_CU_F32: return fn<float>(__VA_ARGS__);                  \
    case WEFT_CU_F64: return fn<double>(__VA_ARGS__);                 \
    case WEFT_CU_I32: return fn<int32_t>(__VA_ARGS__);                \
    case WEFT_CU_I64: return fn<int64_t>(__VA_ARGS__);                \
    default: return cudaErrorInvalidValue;                            \
    }

#endif
