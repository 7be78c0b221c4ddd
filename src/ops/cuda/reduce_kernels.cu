// Reductions (sum mean max min var logsumexp argmax) over any set of axes of
// a strided tensor, mirroring cpu/reduce.c: floats (bf16 / f16 read through float) accumulate in double,
// integers in int64 (sums wrap like the dtype), NaN wins max/min/argmax, and
// argmax picks the first index of the maximum.
//
// One output element per thread, warp or block (weft_cu_*_group), chosen by
// the length of the reduction: short ones run a thread each (and so do many
// outputs whose reduced elements are strided, e.g. a column sum, where
// neighbouring threads read neighbouring addresses), up to 1024 a warp, longer
// ones a block of 256.
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <type_traits>

#include "cu_common.cuh"
#include "reduce_kernels.h"

typedef weft_cu_reduce_plan plan;

#define RED_THREADS 256

// Offset of the first input element of output o (decoded over the kept dims).
__device__ __forceinline__ int64_t kept_base(const plan &p, int64_t o) {
    int64_t off = 0;
    for (int d = p.nk - 1; d >= 0; d--) {
        off += (o % p.ksize[d]) * p.kstride[d];
        o /= p.ksize[d];
    }
    return off;
}
// Offset of reduced element j (row-major over the reduced dims: the CPU's order).
__device__ __forceinline__ int64_t red_off(const plan &p, int64_t j) {
    if (p.nr == 1) return j * p.rstride[0];
    int64_t off = 0;
    for (int d = p.nr - 1; d >= 0; d--) {
        off += (j % p.rsize[d]) * p.rstride[d];
        j /= p.rsize[d];
    }
    return off;
}

// max/min with NaN winning (any NaN element makes the result NaN, as on the CPU).
struct max_nan {
    __device__ double operator()(double a, double b) const { return a != a ? a : (b != b ? b : (b > a ? b : a)); }
};
struct min_nan {
    __device__ double operator()(double a, double b) const { return a != a ? a : (b != b ? b : (b < a ? b : a)); }
};
struct max_i {
    __device__ int64_t operator()(int64_t a, int64_t b) const { return b > a ? b : a; }
};
struct min_i {
    __device__ int64_t operator()(int64_t a, int64_t b) const { return b < a ? b : a; }
};

// argmax: (value, index); NaN beats every number, and among equals (or NaNs)
// the smaller index wins: the CPU's first index of the maximum, in any order.
template <typename V> struct arg {
    V v;
    int64_t k;
};
template <typename V> __device__ __forceinline__ arg<V> weft_cu_shfl_xor(arg<V> a, int m) {
    arg<V> r;
    r.v = weft_cu_shfl_xor(a.v, m);
    r.k = weft_cu_shfl_xor(a.k, m);
    return r;
}
struct arg_best {
    template <typename V> __device__ arg<V> operator()(arg<V> a, arg<V> b) const {
        bool an = a.v != a.v, bn = b.v != b.v;
        bool take_b;
        if (an || bn) take_b = an && bn ? b.k < a.k : bn;
        else take_b = b.v > a.v || (b.v == a.v && b.k < a.k);
        return take_b ? b : a;
    }
};

// A result in T: the half types rounded from f32 (as the CPU, which reduces a widened f32 copy and rounds
// its f32 result).
template <typename T> __device__ __forceinline__ T store_as(double r) {
    if constexpr (weft_cu_is_half<T>::value) return weft_cu_from_f32<T>((float)r);
    else return (T)r;
}

// Output o of a float reduction by group g. sh: the block's shared scratch.
template <typename T, typename G>
__device__ void reduce_float_one(const G &g, const plan &p, const T *x, void *out, int64_t o, int kind, int64_t corr,
                                 unsigned char *sh) {
    const T *b = x + kept_base(p, o);
    const int64_t n = p.n_red;
    const int r0 = g.rank(), rs = g.size();
    double *shd = (double *)sh;
    double r = 0;
    switch (kind) {
    case WEFT_CU_RED_SUM:
    case WEFT_CU_RED_MEAN: {
        double s = 0;
        for (int64_t j = r0; j < n; j += rs) s += weft_cu_to_f64(b[red_off(p, j)]);
        s = g.all(s, weft_cu_add(), shd);
        r = kind == WEFT_CU_RED_MEAN ? s / (double)n : s;
        break;
    }
    case WEFT_CU_RED_MAX: {
        double m = -INFINITY;
        for (int64_t j = r0; j < n; j += rs) m = max_nan()(m, weft_cu_to_f64(b[red_off(p, j)]));
        r = g.all(m, max_nan(), shd);
        break;
    }
    case WEFT_CU_RED_MIN: {
        double m = INFINITY;
        for (int64_t j = r0; j < n; j += rs) m = min_nan()(m, weft_cu_to_f64(b[red_off(p, j)]));
        r = g.all(m, min_nan(), shd);
        break;
    }
    case WEFT_CU_RED_VAR: { // two passes: mean, then squared deviations
        double s = 0, ss = 0;
        for (int64_t j = r0; j < n; j += rs) s += weft_cu_to_f64(b[red_off(p, j)]);
        s = g.all(s, weft_cu_add(), shd);
        const double mu = s / (double)n;
        for (int64_t j = r0; j < n; j += rs) {
            double d = weft_cu_to_f64(b[red_off(p, j)]) - mu;
            ss += d * d;
        }
        ss = g.all(ss, weft_cu_add(), shd);
        const double den = (double)(n - corr);
        r = den > 0 ? ss / den : (double)NAN;
        break;
    }
    case WEFT_CU_RED_LOGSUMEXP: {
        double m = -INFINITY;
        for (int64_t j = r0; j < n; j += rs) m = max_nan()(m, weft_cu_to_f64(b[red_off(p, j)]));
        m = g.all(m, max_nan(), shd);
        if (m != m || isinf(m)) { // NaN, or +-inf (inf - inf would be NaN): the answer is m itself
            r = m;
            break;
        }
        double s = 0;
        for (int64_t j = r0; j < n; j += rs) s += exp(weft_cu_to_f64(b[red_off(p, j)]) - m);
        s = g.all(s, weft_cu_add(), shd);
        r = m + log(s);
        break;
    }
    default: { // argmax
        arg<double> a = {-INFINITY, INT64_MAX};
        for (int64_t j = r0; j < n; j += rs) a = arg_best()(a, arg<double>{weft_cu_to_f64(b[red_off(p, j)]), j});
        a = g.all(a, arg_best(), (arg<double> *)sh);
        if (r0 == 0) ((int64_t *)out)[o] = a.k;
        return;
    }
    }
    if (r0 == 0) ((T *)out)[o] = store_as<T>(r);
}

// Output o of an integer reduction (sum, max, min, argmax) by group g.
template <typename T, typename G>
__device__ void reduce_int_one(const G &g, const plan &p, const T *x, void *out, int64_t o, int kind,
                               unsigned char *sh) {
    const T *b = x + kept_base(p, o);
    const int64_t n = p.n_red;
    const int r0 = g.rank(), rs = g.size();
    int64_t r = 0;
    switch (kind) {
    case WEFT_CU_RED_SUM: { // unsigned: wraps (the CPU's sum modulo 2^64)
        unsigned long long s = 0;
        for (int64_t j = r0; j < n; j += rs) s += (unsigned long long)(int64_t)b[red_off(p, j)];
        s = g.all(s, weft_cu_add(), (unsigned long long *)sh);
        r = (int64_t)s;
        break;
    }
    case WEFT_CU_RED_MAX: {
        int64_t m = INT64_MIN;
        for (int64_t j = r0; j < n; j += rs) m = max_i()(m, (int64_t)b[red_off(p, j)]);
        r = g.all(m, max_i(), (int64_t *)sh);
        break;
    }
    case WEFT_CU_RED_MIN: {
        int64_t m = INT64_MAX;
        for (int64_t j = r0; j < n; j += rs) m = min_i()(m, (int64_t)b[red_off(p, j)]);
        r = g.all(m, min_i(), (int64_t *)sh);
        break;
    }
    default: { // argmax
        arg<int64_t> a = {INT64_MIN, INT64_MAX};
        for (int64_t j = r0; j < n; j += rs) a = arg_best()(a, arg<int64_t>{(int64_t)b[red_off(p, j)], j});
        a = g.all(a, arg_best(), (arg<int64_t> *)sh);
        if (r0 == 0) ((int64_t *)out)[o] = a.k;
        return;
    }
    }
    if (r0 == 0) {
        if (sizeof(T) == 4) ((int32_t *)out)[o] = (int32_t)(uint32_t)(uint64_t)r; // wraps like the dtype
        else ((int64_t *)out)[o] = r;
    }
}

template <typename T, typename G>
__global__ void __launch_bounds__(RED_THREADS)
    reduce_kernel(const __grid_constant__ plan p, const T *x, void *out, int kind, int64_t corr) {
    __shared__ __align__(16) unsigned char sh[32 * sizeof(arg<double>)];
    G g;
    for (int64_t o = g.first(); o < p.n_out; o += g.stride()) {
        if constexpr (std::is_floating_point<T>::value || weft_cu_is_half<T>::value)
            reduce_float_one<T>(g, p, x, out, o, kind, corr, sh);
        else reduce_int_one<T>(g, p, x, out, o, kind, sh);
    }
}

template <typename T>
static cudaError_t launch(const plan &p, const void *x, void *out, int kind, int64_t corr, cudaStream_t s) {
    const T *xt = (const T *)x;
    const bool strided = p.rstride[p.nr - 1] != 1;
    if (p.n_red < 32 || (strided && p.n_out >= 8192)) {
        unsigned nb = weft_cu_row_blocks<weft_cu_thread_group>(p.n_out, RED_THREADS);
        reduce_kernel<T, weft_cu_thread_group><<<nb, RED_THREADS, 0, s>>>(p, xt, out, kind, corr);
    } else if (p.n_red <= 1024) {
        unsigned nb = weft_cu_row_blocks<weft_cu_warp_group>(p.n_out, RED_THREADS);
        reduce_kernel<T, weft_cu_warp_group><<<nb, RED_THREADS, 0, s>>>(p, xt, out, kind, corr);
    } else {
        unsigned nb = weft_cu_row_blocks<weft_cu_block_group>(p.n_out, RED_THREADS);
        reduce_kernel<T, weft_cu_block_group><<<nb, RED_THREADS, 0, s>>>(p, xt, out, kind, corr);
    }
    return cudaGetLastError();
}

// ---- column sums: x (R, K) row-major, summed over its R rows (a linear layer's bias gradient) ----
// The general kernels give such a column a block whose threads read one element each from rows K apart:
// uncoalesced. Here a warp reads 32 neighbouring columns of a row, 8 warps a block take every 8th row of a
// chunk of kColRows rows, their double sums are added in shared memory in a fixed order, one partial per
// (chunk, column); a second pass adds the chunks' partials in order: the same bits every run.
constexpr int kColRows = 256;

template <typename T>
__global__ void __launch_bounds__(256) colsum_part(const T *x, int64_t R, int64_t K, double *part) {
    __shared__ double sh[8][33];
    const int tx = (int)threadIdx.x & 31, ty = (int)threadIdx.x >> 5;
    const int64_t c = (int64_t)blockIdx.x * 32 + tx, r0 = (int64_t)blockIdx.y * kColRows;
    const int64_t r1 = r0 + kColRows < R ? r0 + kColRows : R;
    double s = 0;
    if (c < K)
        for (int64_t r = r0 + ty; r < r1; r += 8) s += weft_cu_to_f64(x[r * K + c]);
    sh[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && c < K) {
        double t = sh[0][tx];
        for (int k = 1; k < 8; k++) t += sh[k][tx];
        part[(int64_t)blockIdx.y * K + c] = t;
    }
}

template <typename T>
__global__ void colsum_final(const double *part, int64_t nch, int64_t K, T *out, double scale) {
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < K; c += (int64_t)gridDim.x * blockDim.x) {
        double t = 0;
        for (int64_t k = 0; k < nch; k++) t += part[k * K + c];
        out[c] = store_as<T>(t * scale);
    }
}

template <typename T>
static cudaError_t colsum_launch(const void *x, int64_t R, int64_t K, void *out, double scale, double *part,
                                 cudaStream_t s) {
    const int64_t nch = (R + kColRows - 1) / kColRows, nbx = (K + 31) / 32;
    if (nch > 65535 || nbx > INT32_MAX) return cudaErrorInvalidValue;
    colsum_part<T><<<dim3((unsigned)nbx, (unsigned)nch), 256, 0, s>>>((const T *)x, R, K, part);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    colsum_final<T><<<weft_cu_blocks(K), WEFT_CU_THREADS, 0, s>>>(part, nch, K, (T *)out, scale);
    return cudaGetLastError();
}

extern "C" int64_t weft_cu_colsum_parts(int64_t R) { return (R + kColRows - 1) / kColRows; }

extern "C" cudaError_t weft_cu_colsum(const void *x, int dtype, int64_t R, int64_t K, void *out, double scale,
                                      double *part, cudaStream_t s) {
    if (R <= 0 || K <= 0) return cudaErrorInvalidValue;
    switch (dtype) {
    case WEFT_CU_F32: return colsum_launch<float>(x, R, K, out, scale, part, s);
    case WEFT_CU_F64: return colsum_launch<double>(x, R, K, out, scale, part, s);
    case WEFT_CU_BF16: return colsum_launch<__nv_bfloat16>(x, R, K, out, scale, part, s);
    case WEFT_CU_F16: return colsum_launch<__half>(x, R, K, out, scale, part, s);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t weft_cu_reduce(const weft_cu_reduce_plan *p, const void *x, int dtype, void *out, int kind,
                                      int64_t corr, cudaStream_t s) {
    if (p->n_out == 0) return cudaSuccess;
    if (p->nr < 1 || kind < WEFT_CU_RED_SUM || kind > WEFT_CU_RED_ARGMAX) return cudaErrorInvalidValue;
    bool int_ok = kind == WEFT_CU_RED_SUM || kind == WEFT_CU_RED_MAX || kind == WEFT_CU_RED_MIN ||
                  kind == WEFT_CU_RED_ARGMAX;
    switch (dtype) {
    case WEFT_CU_F32: return launch<float>(*p, x, out, kind, corr, s);
    case WEFT_CU_F64: return launch<double>(*p, x, out, kind, corr, s);
    case WEFT_CU_BF16: return launch<__nv_bfloat16>(*p, x, out, kind, corr, s);
    case WEFT_CU_F16: return launch<__half>(*p, x, out, kind, corr, s);
    case WEFT_CU_I32: return int_ok ? launch<int32_t>(*p, x, out, kind, corr, s) : cudaErrorInvalidValue;
    case WEFT_CU_I64: return int_ok ? launch<int64_t>(*p, x, out, kind, corr, s) : cudaErrorInvalidValue;
    default: return cudaErrorInvalidValue;
    }
}
