// Launchers of reduce_kernels.cu (plain C prototypes), and, for nvcc only, the
// warp/block reduction helpers that the row kernels of nn_kernels.cu and
// norm_kernels.cu share with the reductions.
#ifndef WEFT_CU_REDUCE_KERNELS_H
#define WEFT_CU_REDUCE_KERNELS_H

#include "cu_tensor.h"

// weft_reduce_plan (ops/reduce.h) repeated for the .cu files, same layout
// (checked in reduce.c): kept dims (one output element each) and reduced dims
// (innermost last), sizes and input strides in elements.
typedef struct weft_cu_reduce_plan {
    int32_t nk, nr;
    int64_t ksize[WEFT_CU_MAX_DIMS], kstride[WEFT_CU_MAX_DIMS];
    int64_t rsize[WEFT_CU_MAX_DIMS], rstride[WEFT_CU_MAX_DIMS];
    int64_t n_out, n_red;
} weft_cu_reduce_plan;

// The WEFT_RED_* variants of ops/reduce.h (checked in reduce.c).
enum {
    WEFT_CU_RED_SUM, WEFT_CU_RED_MEAN, WEFT_CU_RED_MAX, WEFT_CU_RED_MIN, WEFT_CU_RED_VAR, WEFT_CU_RED_LOGSUMEXP,
    WEFT_CU_RED_ARGMAX
};

#ifdef __cplusplus
extern "C" {
#endif

// out[o] (contiguous, n_out elements) = reduction `kind` of the input elements
// of output o: x + base(o) + offset(j) for j < n_red. x's dtype: f32/f64 (all
// kinds, accumulated in double like the CPU) or i32/i64 (sum/max/min/argmax,
// in int64, sums wrapping). out has x's dtype, i64 for argmax. corr: var's
// correction. n_red == 0 is not allowed for max/min/argmax (the caller checks).
cudaError_t weft_cu_reduce(const weft_cu_reduce_plan *p, const void *x, int dtype, void *out, int kind, int64_t corr,
                           cudaStream_t s);
// out[c] = scale * sum over r of x[r K + c], for a row-major (R, K) float x (f32, f64, bf16, f16; summed in
// double, out in x's dtype): the sum or mean over a contiguous tensor's leading dims, e.g. a linear layer's
// bias gradient. part: a scratch of weft_cu_colsum_parts(R) * K doubles; at most 65535 parts (R up to 16.7M).
int64_t weft_cu_colsum_parts(int64_t R);
cudaError_t weft_cu_colsum(const void *x, int dtype, int64_t R, int64_t K, void *out, double scale, double *part,
                           cudaStream_t s);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
// ---- device helpers (nvcc only) ----
// A group of threads that reduces one row together: one thread, one warp or
// one block. rank/size split the row's elements; first/stride walk the rows
// (every thread of a warp or block sees the same row, so the reductions
// inside stay uniform); all() combines a value over the group, every member
// getting the result. Block groups need blockDim.x a multiple of 32 and a
// shared scratch of 32 values of the reduced type.
template <typename T> __device__ __forceinline__ T weft_cu_shfl_xor(T v, int lane_mask) {
    return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}

template <typename A, typename F> __device__ __forceinline__ A weft_cu_warp_all(A v, F f) {
    for (int o = 16; o > 0; o >>= 1) v = f(v, weft_cu_shfl_xor(v, o));
    return v;
}

// Every thread of the block gets f over all threads' v. Ends with a barrier,
// so sh can be reused by the next call.
template <typename A, typename F> __device__ __forceinline__ A weft_cu_block_all(A v, F f, A *sh) {
    v = weft_cu_warp_all(v, f);
    const int nw = (int)(blockDim.x >> 5);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    A r = sh[0];
    for (int w = 1; w < nw; w++) r = f(r, sh[w]); // the same order in every thread
    __syncthreads();
    return r;
}

struct weft_cu_thread_group {
    __device__ int rank() const { return 0; }
    __device__ int size() const { return 1; }
    __device__ int64_t first() const { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
    __device__ int64_t stride() const { return (int64_t)gridDim.x * blockDim.x; }
    template <typename A, typename F> __device__ A all(A v, F, A *) const { return v; }
    static int64_t rows_per_block(int threads) { return threads; }
};
struct weft_cu_warp_group {
    __device__ int rank() const { return (int)(threadIdx.x & 31); }
    __device__ int size() const { return 32; }
    __device__ int64_t first() const { return (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); }
    __device__ int64_t stride() const { return (int64_t)gridDim.x * (blockDim.x >> 5); }
    template <typename A, typename F> __device__ A all(A v, F f, A *) const { return weft_cu_warp_all(v, f); }
    static int64_t rows_per_block(int threads) { return threads / 32; }
};
struct weft_cu_block_group {
    __device__ int rank() const { return (int)threadIdx.x; }
    __device__ int size() const { return (int)blockDim.x; }
    __device__ int64_t first() const { return (int64_t)blockIdx.x; }
    __device__ int64_t stride() const { return (int64_t)gridDim.x; }
    template <typename A, typename F> __device__ A all(A v, F f, A *sh) const { return weft_cu_block_all(v, f, sh); }
    static int64_t rows_per_block(int) { return 1; }
};

// Blocks for `rows` rows handled by group G in blocks of `threads`.
template <typename G> static inline unsigned weft_cu_row_blocks(int64_t rows, int threads) {
    int64_t rpb = G::rows_per_block(threads), b = (rows + rpb - 1) / rpb;
    if (b < 1) b = 1;
    return (unsigned)(b > 65535 * 8 ? 65535 * 8 : b);
}

struct weft_cu_add {
    template <typename A> __device__ A operator()(A a, A b) const { return a + b; }
};
// Plain max (NaN handling left to the caller, as the CPU row kernels do).
struct weft_cu_max {
    template <typename A> __device__ A operator()(A a, A b) const { return b > a ? b : a; }
};

__device__ __forceinline__ float weft_cu_exp(float v) { return expf(v); }
__device__ __forceinline__ double weft_cu_exp(double v) { return exp(v); }
__device__ __forceinline__ float weft_cu_log(float v) { return logf(v); }
__device__ __forceinline__ double weft_cu_log(double v) { return log(v); }
__device__ __forceinline__ float weft_cu_sqrt(float v) { return sqrtf(v); }
__device__ __forceinline__ double weft_cu_sqrt(double v) { return sqrt(v); }
#endif

#endif
