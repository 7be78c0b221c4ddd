// Strided copies with broadcast and dtype conversion: the kernels behind
// weft_cuda_copy, contiguous(), cast and copy on CUDA.
//
// The launcher first coalesces the two layouts (size-1 dims dropped,
// neighbours merged), then takes the cheapest of:
// - same dtype, both contiguous: cudaMemcpyAsync;
// - contiguous conversion: convert_contig<I, O>, four elements per thread and
//   step through aligned vector loads and stores (16 bytes of f32 in, 8 of
//   bf16 out), a grid-stride loop;
// - strided, under 2^31 elements and offsets: one pass over the merged dims
//   gives both offsets, each division by a precomputed multiplier
//   (cu_index.h), types fixed at compile time;
// - otherwise the 64-bit per-dim walk (copy_bits / copy_convert_any).
// Conversion rules, the same on every path: into f16/bf16 every source
// rounds once (from f32 by __float2bfloat16_rn, which equals rounding its
// exact double); i64 <-> i32 stay integer; the rest goes through double
// (exact for every value of the 32-bit and smaller types), as the CPU does.
#include <stdint.h>

#include "copy_kernels.h"
#include "cu_common.cuh"

namespace {

// A byte read as bool (any non-zero byte is true), as the CPU's copy does.
struct b8 {
    uint8_t v;
};

template <typename T> __device__ __forceinline__ double to_f64(T v) { return weft_cu_to_f64<T>(v); }
template <> __device__ __forceinline__ double to_f64<b8>(b8 v) { return v.v != 0; }
template <typename T> __device__ __forceinline__ T from_f64(double v) { return weft_cu_from_f64<T>(v); }
template <> __device__ __forceinline__ b8 from_f64<b8>(double v) { return b8{(uint8_t)(v != 0)}; }

template <typename I, typename O> struct conv {
    static __device__ __forceinline__ O go(I v) { return from_f64<O>(to_f64<I>(v)); }
};
template <> struct conv<float, __nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat16 go(float v) { return __float2bfloat16_rn(v); }
};
template <> struct conv<__nv_bfloat16, float> {
    static __device__ __forceinline__ float go(__nv_bfloat16 v) { return __bfloat162float(v); }
};
template <> struct conv<float, __half> {
    static __device__ __forceinline__ __half go(float v) { return __float2half_rn(v); }
};
template <> struct conv<__half, float> {
    static __device__ __forceinline__ float go(__half v) { return __half2float(v); }
};
template <> struct conv<int64_t, int32_t> {
    static __device__ __forceinline__ int32_t go(int64_t v) { return (int32_t)v; }
};
template <> struct conv<int32_t, int64_t> {
    static __device__ __forceinline__ int64_t go(int32_t v) { return v; }
};

template <typename T, int V> using vec = weft_cu_pack<T, V>;
constexpr int V = 4;

template <typename I, typename O>
__global__ void __launch_bounds__(WEFT_CU_THREADS) convert_contig(O *o, const I *x, int64_t n, bool vectors) {
    int64_t nv = vectors ? n / V : 0;
    const vec<I, V> *xv = (const vec<I, V> *)x;
    vec<O, V> *ov = (vec<O, V> *)o;
    WEFT_CU_GRID_LOOP(j, nv) {
        vec<I, V> a = xv[j];
        vec<O, V> r;
#pragma unroll
        for (int k = 0; k < V; k++) r.v[k] = conv<I, O>::go(a.v[k]);
        ov[j] = r;
    }
    WEFT_CU_GRID_LOOP(j, n - nv * V) o[nv * V + j] = conv<I, O>::go(x[nv * V + j]);
}

template <typename I, typename O>
__global__ void __launch_bounds__(WEFT_CU_THREADS) convert_strided32(O *o, const I *x, weft_cu_index ix, uint32_t n) {
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        uint32_t off[2];
        weft_cu_offsets32<2>(ix, i, off);
        o[off[0]] = conv<I, O>::go(x[off[1]]);
    }
}

// Same dtype: move the bits (exact for every type, including i64 > 2^53).
template <typename W>
__global__ void __launch_bounds__(WEFT_CU_THREADS) copy_bits32(W *o, const W *x, weft_cu_index ix, uint32_t n) {
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        uint32_t off[2];
        weft_cu_offsets32<2>(ix, i, off);
        o[off[0]] = x[off[1]];
    }
}

template <typename W> __global__ void copy_bits(weft_cu_tensor out, weft_cu_tensor in) {
    WEFT_CU_GRID_LOOP(i, out.numel) {
        ((W *)out.data)[weft_cu_offset(out, i)] = ((const W *)in.data)[weft_cu_offset(in, i)];
    }
}

// ---- the 64-bit path of any conversion: the dtypes read at run time ----
__device__ __forceinline__ double load_f64(const char *p, int dt, int64_t off) {
    switch (dt) {
    case WEFT_CU_F32: return ((const float *)p)[off];
    case WEFT_CU_F64: return ((const double *)p)[off];
    case WEFT_CU_I32: return ((const int32_t *)p)[off];
    case WEFT_CU_I64: return (double)((const int64_t *)p)[off];
    case WEFT_CU_BOOL: return ((const uint8_t *)p)[off] != 0;
    case WEFT_CU_U8: return ((const uint8_t *)p)[off];
    case WEFT_CU_F16: return __half2float(((const __half *)p)[off]);
    case WEFT_CU_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[off]);
    }
    return 0;
}

__device__ __forceinline__ void store_f64(char *p, int dt, int64_t off, double v) {
    switch (dt) {
    case WEFT_CU_F32: ((float *)p)[off] = (float)v; break;
    case WEFT_CU_F64: ((double *)p)[off] = v; break;
    case WEFT_CU_I32: ((int32_t *)p)[off] = (int32_t)v; break;
    case WEFT_CU_I64: ((int64_t *)p)[off] = (int64_t)v; break;
    case WEFT_CU_BOOL: ((uint8_t *)p)[off] = v != 0; break;
    case WEFT_CU_U8: ((uint8_t *)p)[off] = (uint8_t)v; break;
    case WEFT_CU_F16: ((__half *)p)[off] = __double2half(v); break; // one rounding, as the CPU's round-to-odd path
    case WEFT_CU_BF16: ((__nv_bfloat16 *)p)[off] = __double2bfloat16(v); break;
    }
}

__global__ void copy_convert_any(weft_cu_tensor out, weft_cu_tensor in) {
    WEFT_CU_GRID_LOOP(i, out.numel) {
        if (in.dtype == WEFT_CU_I64 && out.dtype == WEFT_CU_I32) // keep integer conversions exact
            ((int32_t *)out.data)[weft_cu_offset(out, i)] = (int32_t)((const int64_t *)in.data)[weft_cu_offset(in, i)];
        else if (in.dtype == WEFT_CU_I32 && out.dtype == WEFT_CU_I64)
            ((int64_t *)out.data)[weft_cu_offset(out, i)] = ((const int32_t *)in.data)[weft_cu_offset(in, i)];
        else
            store_f64(out.data, out.dtype, weft_cu_offset(out, i), load_f64(in.data, in.dtype, weft_cu_offset(in, i)));
    }
}

int dtype_size(int dt) {
    switch (dt) {
    case WEFT_CU_F64: case WEFT_CU_I64: return 8;
    case WEFT_CU_F32: case WEFT_CU_I32: return 4;
    case WEFT_CU_F16: case WEFT_CU_BF16: return 2;
    default: return 1;
    }
}

// The typed kernels for the pair (I, O): contiguous or 32-bit strided (ix != NULL).
template <typename I, typename O>
cudaError_t convert_launch(const weft_cu_tensor &out, const weft_cu_tensor &in, const weft_cu_index *ix,
                           cudaStream_t s) {
    O *o = (O *)out.data;
    const I *x = (const I *)in.data;
    if (!ix) {
        bool vectors = weft_cu_aligned(o, sizeof(O) * V) && weft_cu_aligned(x, sizeof(I) * V);
        convert_contig<I, O><<<weft_cu_blocks(vectors ? out.numel / V + 1 : out.numel), WEFT_CU_THREADS, 0, s>>>(
            o, x, out.numel, vectors);
    } else {
        convert_strided32<I, O><<<weft_cu_blocks(out.numel), WEFT_CU_THREADS, 0, s>>>(o, x, *ix, (uint32_t)out.numel);
    }
    return cudaGetLastError();
}

template <typename I>
cudaError_t convert_to(const weft_cu_tensor &out, const weft_cu_tensor &in, const weft_cu_index *ix, cudaStream_t s) {
    switch (out.dtype) {
    case WEFT_CU_F32: return convert_launch<I, float>(out, in, ix, s);
    case WEFT_CU_F64: return convert_launch<I, double>(out, in, ix, s);
    case WEFT_CU_I32: return convert_launch<I, int32_t>(out, in, ix, s);
    case WEFT_CU_I64: return convert_launch<I, int64_t>(out, in, ix, s);
    case WEFT_CU_BOOL: return convert_launch<I, b8>(out, in, ix, s);
    case WEFT_CU_U8: return convert_launch<I, uint8_t>(out, in, ix, s);
    case WEFT_CU_F16: return convert_launch<I, __half>(out, in, ix, s);
    case WEFT_CU_BF16: return convert_launch<I, __nv_bfloat16>(out, in, ix, s);
    }
    return cudaErrorInvalidValue;
}

cudaError_t convert(const weft_cu_tensor &out, const weft_cu_tensor &in, const weft_cu_index *ix, cudaStream_t s) {
    switch (in.dtype) {
    case WEFT_CU_F32: return convert_to<float>(out, in, ix, s);
    case WEFT_CU_F64: return convert_to<double>(out, in, ix, s);
    case WEFT_CU_I32: return convert_to<int32_t>(out, in, ix, s);
    case WEFT_CU_I64: return convert_to<int64_t>(out, in, ix, s);
    case WEFT_CU_BOOL: return convert_to<b8>(out, in, ix, s);
    case WEFT_CU_U8: return convert_to<uint8_t>(out, in, ix, s);
    case WEFT_CU_F16: return convert_to<__half>(out, in, ix, s);
    case WEFT_CU_BF16: return convert_to<__nv_bfloat16>(out, in, ix, s);
    }
    return cudaErrorInvalidValue;
}

template <typename W>
cudaError_t bits_launch(const weft_cu_tensor &out, const weft_cu_tensor &in, const weft_cu_index *ix,
                        cudaStream_t s) {
    unsigned nb = weft_cu_blocks(out.numel);
    if (ix) copy_bits32<W><<<nb, WEFT_CU_THREADS, 0, s>>>((W *)out.data, (const W *)in.data, *ix, (uint32_t)out.numel);
    else copy_bits<W><<<nb, WEFT_CU_THREADS, 0, s>>>(out, in);
    return cudaGetLastError();
}

// Many contiguous tensors: block b converts chunk b - block0[k] of tensor k (kCastChunk elements, V at a time).
constexpr int64_t kCastChunk = 16384;
template <typename I, typename O> __global__ void __launch_bounds__(WEFT_CU_THREADS) convert_multi(weft_cu_cast_table t) {
    const int b = (int)blockIdx.x;
    int k = 0;
    while (k + 1 < t.count && b >= t.block0[k + 1]) k++;
    const int64_t lo = (int64_t)(b - t.block0[k]) * kCastChunk, n = t.n[k];
    const int64_t hi = lo + kCastChunk < n ? lo + kCastChunk : n, hv = lo + (hi - lo) / V * V;
    const I *x = (const I *)t.x[k];
    O *o = (O *)t.y[k];
    for (int64_t i = lo + (int64_t)threadIdx.x * V; i < hv; i += (int64_t)blockDim.x * V) {
        vec<I, V> a = *(const vec<I, V> *)(x + i);
        vec<O, V> r;
#pragma unroll
        for (int q = 0; q < V; q++) r.v[q] = conv<I, O>::go(a.v[q]);
        *(vec<O, V> *)(o + i) = r;
    }
    for (int64_t i = hv + threadIdx.x; i < hi; i += blockDim.x) o[i] = conv<I, O>::go(x[i]);
}

template <typename O> cudaError_t cast_multi_launch(weft_cu_cast_table t, cudaStream_t s) {
    int64_t nb = 0;
    for (int k = 0; k < t.count; k++) {
        t.block0[k] = (int32_t)nb;
        nb += (t.n[k] + kCastChunk - 1) / kCastChunk;
    }
    t.block0[t.count] = (int32_t)nb;
    if (nb == 0) return cudaSuccess;
    convert_multi<float, O><<<(unsigned)nb, WEFT_CU_THREADS, 0, s>>>(t);
    return cudaGetLastError();
}

} // namespace

extern "C" int weft_cu_cast_multi_supports(int in, int out) {
    return in == WEFT_CU_F32 && (out == WEFT_CU_BF16 || out == WEFT_CU_F16);
}

extern "C" cudaError_t weft_cu_cast_multi(weft_cu_cast_table t, int in, int out, cudaStream_t s) {
    if (t.count <= 0 || t.count > WEFT_CU_CAST_TABLE || !weft_cu_cast_multi_supports(in, out)) return cudaErrorInvalidValue;
    int64_t nb = 0;
    for (int k = 0; k < t.count; k++) {
        if (t.n[k] < 0 || !weft_cu_aligned(t.x[k], 16) || !weft_cu_aligned(t.y[k], 8)) return cudaErrorInvalidValue;
        nb += (t.n[k] + kCastChunk - 1) / kCastChunk;
    }
    if (nb > 0x7fffffff) return cudaErrorInvalidValue; // block numbers fit an int
    return out == WEFT_CU_BF16 ? cast_multi_launch<__nv_bfloat16>(t, s) : cast_multi_launch<__half>(t, s);
}

extern "C" cudaError_t weft_cu_copy(weft_cu_tensor out, weft_cu_tensor in, cudaStream_t s) {
    if (out.numel == 0) return cudaSuccess;
    if (in.ndim != out.ndim) return cudaErrorInvalidValue;
    weft_cu_tensor d[2] = {out, in};
    weft_cu_coalesce(2, d);
    bool contig = weft_cu_contiguous(d[0]) && weft_cu_contiguous(d[1]);
    weft_cu_index ix;
    bool i32 = !contig && weft_cu_index_of(&ix, 2, d);
    if (out.dtype == in.dtype) {
        if (contig)
            return cudaMemcpyAsync(d[0].data, d[1].data, (size_t)out.numel * dtype_size(out.dtype),
                                   cudaMemcpyDeviceToDevice, s);
        switch (dtype_size(out.dtype)) {
        case 8: return bits_launch<uint64_t>(d[0], d[1], i32 ? &ix : NULL, s);
        case 4: return bits_launch<uint32_t>(d[0], d[1], i32 ? &ix : NULL, s);
        case 2: return bits_launch<uint16_t>(d[0], d[1], i32 ? &ix : NULL, s);
        default: return bits_launch<uint8_t>(d[0], d[1], i32 ? &ix : NULL, s);
        }
    }
    if (contig || i32) return convert(d[0], d[1], contig ? NULL : &ix, s);
    copy_convert_any<<<weft_cu_blocks(out.numel), WEFT_CU_THREADS, 0, s>>>(d[0], d[1]);
    return cudaGetLastError();
}
