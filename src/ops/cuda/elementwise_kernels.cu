// Elementwise kernels: unary (with a scalar attribute), binary (broadcast,
// comparisons give bool), and where. Each formula mirrors cpu/elementwise.c
// expression for expression (f32 math in f32 with (float)sc, f64 in f64,
// integer add/mul_scalar through int64, integer division by 0 gives 0,
// maximum/minimum propagate a NaN in either operand).
//
// bf16 / f16 (storage types) run each formula in f32 and round the result
// once (ew_unary / ew_binary, ew_math.cuh), as the CPU's widened loops.
//
// One kernel template per (variant, dtype), the variant a template
// parameter so each instantiation is a straight loop; three shapes of loop:
// - *_contig: every operand contiguous with out's shape: index i directly,
//   four elements per step through aligned vector loads where every pointer
//   allows (16 bytes of f32);
// - *_strided32: under 2^31 elements and offsets, one pass over the
//   (coalesced) dims gives every operand's offset, each division by a
//   precomputed multiplier (cu_index.h);
// - *_strided: otherwise, per operand a kind (contiguous / one scalar /
//   strided, the same for every thread, so the branch is uniform) and the
//   64-bit weft_cu_offset only for the strided ones.
#include "cu_common.cuh"
#include "elementwise_kernels.h"
#include "ew_math.cuh"

namespace { // file-local: other kernel files may use the same helper names

using namespace weft_ew; // the formulas (ew_math.cuh), shared with the fused kernel

// ---- operand kinds ----
enum { K_CONTIG, K_SCALAR, K_STRIDED };

int kind_of(const weft_cu_tensor &t) {
    if (weft_cu_contiguous(t)) return K_CONTIG;
    for (int d = 0; d < t.ndim; d++)
        if (t.sizes[d] != 1 && t.strides[d] != 0) return K_STRIDED;
    return K_SCALAR;
}

__device__ __forceinline__ int64_t at(const weft_cu_tensor &t, int kind, int64_t i) {
    return kind == K_CONTIG ? i : kind == K_SCALAR ? 0 : weft_cu_offset(t, i);
}

// ---- unary ----
// Elements per vector step of the contiguous kernels: 16 bytes of T (8 elements of bf16 / f16: a load of 8 bytes
// a thread left the bf16 GELU at 73% of the copy bandwidth on an H100), and never fewer than 4.
template <typename T> constexpr int V = sizeof(T) >= 4 ? 4 : 16 / (int)sizeof(T);

template <int OP, typename T>
__global__ void __launch_bounds__(WEFT_CU_THREADS) unary_contig(T *o, const T *x, int64_t n, double sc, bool vectors) {
    int64_t nv = vectors ? n / V<T> : 0;
    WEFT_CU_GRID_LOOP(j, nv) {
        weft_cu_pack<T, V<T>> a = ((const weft_cu_pack<T, V<T>> *)x)[j], r;
#pragma unroll
        for (int k = 0; k < V<T>; k++) r.v[k] = ew_unary<OP, T>(a.v[k], sc);
        ((weft_cu_pack<T, V<T>> *)o)[j] = r;
    }
    WEFT_CU_GRID_LOOP(j, n - nv * V<T>) o[nv * V<T> + j] = ew_unary<OP, T>(x[nv * V<T> + j], sc);
}

template <int OP, typename T>
__global__ void __launch_bounds__(WEFT_CU_THREADS)
    unary_strided32(T *o, const T *x, weft_cu_index ix, uint32_t n, double sc) {
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        uint32_t off[2];
        weft_cu_offsets32<2>(ix, i, off);
        o[off[0]] = ew_unary<OP, T>(x[off[1]], sc);
    }
}

template <int OP, typename T>
__global__ void __launch_bounds__(WEFT_CU_THREADS)
    unary_strided(weft_cu_tensor out, weft_cu_tensor in, int ko, int ki, double sc) {
    T *o = (T *)out.data;
    const T *x = (const T *)in.data;
    WEFT_CU_GRID_LOOP(i, out.numel) o[at(out, ko, i)] = ew_unary<OP, T>(x[at(in, ki, i)], sc);
}

template <int OP, typename T>
cudaError_t unary_launch(const weft_cu_tensor &out, const weft_cu_tensor &in, double sc, cudaStream_t s) {
    int ko = kind_of(out), ki = kind_of(in);
    weft_cu_tensor d[2] = {out, in};
    weft_cu_index ix;
    if (ko == K_CONTIG && ki == K_CONTIG) {
        bool vectors = weft_cu_aligned(out.data, sizeof(T) * V<T>) && weft_cu_aligned(in.data, sizeof(T) * V<T>);
        unary_contig<OP, T><<<weft_cu_blocks(vectors ? out.numel / V<T> + 1 : out.numel), WEFT_CU_THREADS, 0, s>>>(
            (T *)out.data, (const T *)in.data, out.numel, sc, vectors);
    } else if (weft_cu_index_of(&ix, 2, d)) {
        unary_strided32<OP, T><<<weft_cu_blocks(out.numel), WEFT_CU_THREADS, 0, s>>>(
            (T *)out.data, (const T *)in.data, ix, (uint32_t)out.numel, sc);
    } else {
        unary_strided<OP, T><<<weft_cu_blocks(out.numel), WEFT_CU_THREADS, 0, s>>>(out, in, ko, ki, sc);
    }
    return cudaGetLastError();
}

// Float-only variants (f32, f64) and numeric ones (also i32, i64), as the CPU tables.
template <int OP>
cudaError_t unary_float(const weft_cu_tensor &out, const weft_cu_tensor &in, double sc, cudaStream_t s) {
    switch (in.dtype) {
    case WEFT_CU_F32: return unary_launch<OP, float>(out, in, sc, s);
    case WEFT_CU_BF16: return unary_launch<OP, __nv_bfloat16>(out, in, sc, s);
    case WEFT_CU_F16: return unary_launch<OP, __half>(out, in, sc, s);
    case WEFT_CU_F64: return unary_launch<OP, double>(out, in, sc, s);
    default: return cudaErrorInvalidValue;
    }
}
template <int OP>
cudaError_t unary_num(const weft_cu_tensor &out, const weft_cu_tensor &in, double sc, cudaStream_t s) {
    switch (in.dtype) {
    case WEFT_CU_F32: return unary_launch<OP, float>(out, in, sc, s);
    case WEFT_CU_BF16: return unary_launch<OP, __nv_bfloat16>(out, in, sc, s);
    case WEFT_CU_F16: return unary_launch<OP, __half>(out, in, sc, s);
    case WEFT_CU_F64: return unary_launch<OP, double>(out, in, sc, s);
    case WEFT_CU_I32: return unary_launch<OP, int32_t>(out, in, sc, s);
    case WEFT_CU_I64: return unary_launch<OP, int64_t>(out, in, sc, s);
    default: return cudaErrorInvalidValue;
    }
}

} // namespace

extern "C" cudaError_t weft_cu_ew_unary(int op, weft_cu_tensor out, weft_cu_tensor in, double sc, cudaStream_t s) {
    if (out.numel == 0) return cudaSuccess;
    if (out.dtype != in.dtype) return cudaErrorInvalidValue;
    switch (op) {
    case WEFT_CU_EW_NEG: return unary_num<WEFT_CU_EW_NEG>(out, in, sc, s);
    case WEFT_CU_EW_ABS: return unary_num<WEFT_CU_EW_ABS>(out, in, sc, s);
    case WEFT_CU_EW_SIGN: return unary_num<WEFT_CU_EW_SIGN>(out, in, sc, s);
    case WEFT_CU_EW_EXP: return unary_float<WEFT_CU_EW_EXP>(out, in, sc, s);
    case WEFT_CU_EW_LOG: return unary_float<WEFT_CU_EW_LOG>(out, in, sc, s);
    case WEFT_CU_EW_SQRT: return unary_float<WEFT_CU_EW_SQRT>(out, in, sc, s);
    case WEFT_CU_EW_RSQRT: return unary_float<WEFT_CU_EW_RSQRT>(out, in, sc, s);
    case WEFT_CU_EW_SIN: return unary_float<WEFT_CU_EW_SIN>(out, in, sc, s);
    case WEFT_CU_EW_COS: return unary_float<WEFT_CU_EW_COS>(out, in, sc, s);
    case WEFT_CU_EW_TANH: return unary_float<WEFT_CU_EW_TANH>(out, in, sc, s);
    case WEFT_CU_EW_SIGMOID: return unary_float<WEFT_CU_EW_SIGMOID>(out, in, sc, s);
    case WEFT_CU_EW_RELU: return unary_num<WEFT_CU_EW_RELU>(out, in, sc, s);
    case WEFT_CU_EW_GELU: return unary_float<WEFT_CU_EW_GELU>(out, in, sc, s);
    case WEFT_CU_EW_GELU_GRAD: return unary_float<WEFT_CU_EW_GELU_GRAD>(out, in, sc, s);
    case WEFT_CU_EW_GELU_TANH: return unary_float<WEFT_CU_EW_GELU_TANH>(out, in, sc, s);
    case WEFT_CU_EW_SILU: return unary_float<WEFT_CU_EW_SILU>(out, in, sc, s);
    case WEFT_CU_EW_ERF: return unary_float<WEFT_CU_EW_ERF>(out, in, sc, s);
    case WEFT_CU_EW_FLOOR: return unary_float<WEFT_CU_EW_FLOOR>(out, in, sc, s);
    case WEFT_CU_EW_CEIL: return unary_float<WEFT_CU_EW_CEIL>(out, in, sc, s);
    case WEFT_CU_EW_ROUND: return unary_float<WEFT_CU_EW_ROUND>(out, in, sc, s);
    case WEFT_CU_EW_TRUNC: return unary_float<WEFT_CU_EW_TRUNC>(out, in, sc, s);
    case WEFT_CU_EW_ASIN: return unary_float<WEFT_CU_EW_ASIN>(out, in, sc, s);
    case WEFT_CU_EW_ACOS: return unary_float<WEFT_CU_EW_ACOS>(out, in, sc, s);
    case WEFT_CU_EW_ATAN: return unary_float<WEFT_CU_EW_ATAN>(out, in, sc, s);
    case WEFT_CU_EW_POW_SCALAR: return unary_float<WEFT_CU_EW_POW_SCALAR>(out, in, sc, s);
    case WEFT_CU_EW_ADD_SCALAR: return unary_num<WEFT_CU_EW_ADD_SCALAR>(out, in, sc, s);
    case WEFT_CU_EW_MUL_SCALAR: return unary_num<WEFT_CU_EW_MUL_SCALAR>(out, in, sc, s);
    default: return cudaErrorInvalidValue;
    }
}

namespace {

// ---- binary ----
template <int OP, typename T, typename TO>
__global__ void __launch_bounds__(WEFT_CU_THREADS)
    binary_contig(TO *o, const T *x, const T *y, int64_t n, bool vectors) {
    int64_t nv = vectors ? n / V<T> : 0;
    WEFT_CU_GRID_LOOP(j, nv) {
        weft_cu_pack<T, V<T>> a = ((const weft_cu_pack<T, V<T>> *)x)[j], b = ((const weft_cu_pack<T, V<T>> *)y)[j];
        weft_cu_pack<TO, V<T>> r;
#pragma unroll
        for (int k = 0; k < V<T>; k++) r.v[k] = ew_binary<OP, T>(a.v[k], b.v[k]);
        ((weft_cu_pack<TO, V<T>> *)o)[j] = r;
    }
    WEFT_CU_GRID_LOOP(j, n - nv * V<T>) o[nv * V<T> + j] = ew_binary<OP, T>(x[nv * V<T> + j], y[nv * V<T> + j]);
}

template <int OP, typename T, typename TO>
__global__ void __launch_bounds__(WEFT_CU_THREADS)
    binary_strided32(TO *o, const T *x, const T *y, weft_cu_index ix, uint32_t n) {
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        uint32_t off[3];
        weft_cu_offsets32<3>(ix, i, off);
        o[off[0]] = ew_binary<OP, T>(x[off[1]], y[off[2]]);
    }
}

template <int OP, typename T, typename TO>
__global__ void __launch_bounds__(WEFT_CU_THREADS)
    binary_strided(weft_cu_tensor out, weft_cu_tensor a, weft_cu_tensor b, int ko, int ka, int kb) {
    TO *o = (TO *)out.data;
    const T *x = (const T *)a.data, *y = (const T *)b.data;
    WEFT_CU_GRID_LOOP(i, out.numel) o[at(out, ko, i)] = ew_binary<OP, T>(x[at(a, ka, i)], y[at(b, kb, i)]);
}

template <int OP, typename T>
cudaError_t binary_launch(const weft_cu_tensor &out, const weft_cu_tensor &a, const weft_cu_tensor &b,
                                 cudaStream_t s) {
    using TO = typename bin_out<OP, T>::type;
    int ko = kind_of(out), ka = kind_of(a), kb = kind_of(b);
    weft_cu_tensor d[3] = {out, a, b};
    weft_cu_index ix;
    if (ko == K_CONTIG && ka == K_CONTIG && kb == K_CONTIG) {
        bool vectors = weft_cu_aligned(out.data, sizeof(TO) * V<T>) && weft_cu_aligned(a.data, sizeof(T) * V<T>) &&
                       weft_cu_aligned(b.data, sizeof(T) * V<T>);
        binary_contig<OP, T, TO><<<weft_cu_blocks(vectors ? out.numel / V<T> + 1 : out.numel), WEFT_CU_THREADS, 0, s>>>(
            (TO *)out.data, (const T *)a.data, (const T *)b.data, out.numel, vectors);
    } else if (weft_cu_index_of(&ix, 3, d)) {
        binary_strided32<OP, T, TO><<<weft_cu_blocks(out.numel), WEFT_CU_THREADS, 0, s>>>(
            (TO *)out.data, (const T *)a.data, (const T *)b.data, ix, (uint32_t)out.numel);
    } else {
        binary_strided<OP, T, TO><<<weft_cu_blocks(out.numel), WEFT_CU_THREADS, 0, s>>>(out, a, b, ko, ka, kb);
    }
    return cudaGetLastError();
}

template <int OP>
cudaError_t binary_float(const weft_cu_tensor &o, const weft_cu_tensor &a, const weft_cu_tensor &b,
                                cudaStream_t s) {
    switch (a.dtype) {
    case WEFT_CU_F32: return binary_launch<OP, float>(o, a, b, s);
    case WEFT_CU_BF16: return binary_launch<OP, __nv_bfloat16>(o, a, b, s);
    case WEFT_CU_F16: return binary_launch<OP, __half>(o, a, b, s);
    case WEFT_CU_F64: return binary_launch<OP, double>(o, a, b, s);
    default: return cudaErrorInvalidValue;
    }
}
template <int OP>
cudaError_t binary_num(const weft_cu_tensor &o, const weft_cu_tensor &a, const weft_cu_tensor &b,
                              cudaStream_t s) {
    switch (a.dtype) {
    case WEFT_CU_F32: return binary_launch<OP, float>(o, a, b, s);
    case WEFT_CU_BF16: return binary_launch<OP, __nv_bfloat16>(o, a, b, s);
    case WEFT_CU_F16: return binary_launch<OP, __half>(o, a, b, s);
    case WEFT_CU_F64: return binary_launch<OP, double>(o, a, b, s);
    case WEFT_CU_I32: return binary_launch<OP, int32_t>(o, a, b, s);
    case WEFT_CU_I64: return binary_launch<OP, int64_t>(o, a, b, s);
    default: return cudaErrorInvalidValue;
    }
}
// Comparisons also take u8 and bool (both one byte, compared as u8, as the CPU).
template <int OP>
cudaError_t binary_cmp(const weft_cu_tensor &o, const weft_cu_tensor &a, const weft_cu_tensor &b,
                              cudaStream_t s) {
    switch (a.dtype) {
    case WEFT_CU_U8:
    case WEFT_CU_BOOL: return binary_launch<OP, uint8_t>(o, a, b, s);
    default: return binary_num<OP>(o, a, b, s);
    }
}

} // namespace

extern "C" cudaError_t weft_cu_ew_binary(int op, weft_cu_tensor out, weft_cu_tensor a, weft_cu_tensor b,
                                         cudaStream_t s) {
    if (out.numel == 0) return cudaSuccess;
    if (a.dtype != b.dtype) return cudaErrorInvalidValue;
    bool cmp = op >= WEFT_CU_EW_EQ && op <= WEFT_CU_EW_GE;
    if (out.dtype != (cmp ? WEFT_CU_BOOL : a.dtype)) return cudaErrorInvalidValue;
    switch (op) {
    case WEFT_CU_EW_ADD: return binary_num<WEFT_CU_EW_ADD>(out, a, b, s);
    case WEFT_CU_EW_SUB: return binary_num<WEFT_CU_EW_SUB>(out, a, b, s);
    case WEFT_CU_EW_MUL: return binary_num<WEFT_CU_EW_MUL>(out, a, b, s);
    case WEFT_CU_EW_DIV: return binary_num<WEFT_CU_EW_DIV>(out, a, b, s);
    case WEFT_CU_EW_FMOD: return binary_num<WEFT_CU_EW_FMOD>(out, a, b, s);
    case WEFT_CU_EW_REMAINDER: return binary_num<WEFT_CU_EW_REMAINDER>(out, a, b, s);
    case WEFT_CU_EW_POW: return binary_float<WEFT_CU_EW_POW>(out, a, b, s);
    case WEFT_CU_EW_MAXIMUM: return binary_num<WEFT_CU_EW_MAXIMUM>(out, a, b, s);
    case WEFT_CU_EW_MINIMUM: return binary_num<WEFT_CU_EW_MINIMUM>(out, a, b, s);
    case WEFT_CU_EW_EQ: return binary_cmp<WEFT_CU_EW_EQ>(out, a, b, s);
    case WEFT_CU_EW_NE: return binary_cmp<WEFT_CU_EW_NE>(out, a, b, s);
    case WEFT_CU_EW_LT: return binary_cmp<WEFT_CU_EW_LT>(out, a, b, s);
    case WEFT_CU_EW_LE: return binary_cmp<WEFT_CU_EW_LE>(out, a, b, s);
    case WEFT_CU_EW_GT: return binary_cmp<WEFT_CU_EW_GT>(out, a, b, s);
    case WEFT_CU_EW_GE: return binary_cmp<WEFT_CU_EW_GE>(out, a, b, s);
    case WEFT_CU_EW_RELU_BW: return binary_num<WEFT_CU_EW_RELU_BW>(out, a, b, s);
    case WEFT_CU_EW_GELU_BW: return binary_float<WEFT_CU_EW_GELU_BW>(out, a, b, s);
    case WEFT_CU_EW_GELU_TANH_BW: return binary_float<WEFT_CU_EW_GELU_TANH_BW>(out, a, b, s);
    default: return cudaErrorInvalidValue;
    }
}

namespace {

// ---- where: values moved as W-byte words, cond read as bytes ----
template <typename W>
__global__ void __launch_bounds__(WEFT_CU_THREADS)
    where_contig(W *o, const uint8_t *c, const W *x, const W *y, int64_t n) {
    WEFT_CU_GRID_LOOP(i, n) o[i] = c[i] ? x[i] : y[i];
}

template <typename W>
__global__ void __launch_bounds__(WEFT_CU_THREADS)
    where_strided32(W *o, const uint8_t *c, const W *x, const W *y, weft_cu_index ix, uint32_t n) {
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        uint32_t off[4];
        weft_cu_offsets32<4>(ix, i, off);
        o[off[0]] = c[off[1]] ? x[off[2]] : y[off[3]];
    }
}

template <typename W>
__global__ void __launch_bounds__(WEFT_CU_THREADS)
    where_strided(weft_cu_tensor out, weft_cu_tensor cond, weft_cu_tensor a, weft_cu_tensor b, int4 k) {
    W *o = (W *)out.data;
    const uint8_t *c = (const uint8_t *)cond.data;
    const W *x = (const W *)a.data, *y = (const W *)b.data;
    WEFT_CU_GRID_LOOP(i, out.numel) {
        o[at(out, k.x, i)] = c[at(cond, k.y, i)] ? x[at(a, k.z, i)] : y[at(b, k.w, i)];
    }
}

template <typename W>
cudaError_t where_launch(const weft_cu_tensor &out, const weft_cu_tensor &cond, const weft_cu_tensor &a,
                                const weft_cu_tensor &b, cudaStream_t s) {
    unsigned nb = weft_cu_blocks(out.numel);
    int4 k = make_int4(kind_of(out), kind_of(cond), kind_of(a), kind_of(b));
    weft_cu_tensor d[4] = {out, cond, a, b};
    weft_cu_index ix;
    if (k.x == K_CONTIG && k.y == K_CONTIG && k.z == K_CONTIG && k.w == K_CONTIG)
        where_contig<W><<<nb, WEFT_CU_THREADS, 0, s>>>((W *)out.data, (const uint8_t *)cond.data,
                                                         (const W *)a.data, (const W *)b.data, out.numel);
    else if (weft_cu_index_of(&ix, 4, d))
        where_strided32<W><<<nb, WEFT_CU_THREADS, 0, s>>>((W *)out.data, (const uint8_t *)cond.data,
                                                            (const W *)a.data, (const W *)b.data, ix,
                                                            (uint32_t)out.numel);
    else
        where_strided<W><<<nb, WEFT_CU_THREADS, 0, s>>>(out, cond, a, b, k);
    return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t weft_cu_where(weft_cu_tensor out, weft_cu_tensor cond, weft_cu_tensor a, weft_cu_tensor b,
                                     cudaStream_t s) {
    if (out.numel == 0) return cudaSuccess;
    if ((cond.dtype != WEFT_CU_BOOL && cond.dtype != WEFT_CU_U8) || a.dtype != out.dtype || b.dtype != out.dtype)
        return cudaErrorInvalidValue;
    switch (out.dtype) {
    case WEFT_CU_F64: case WEFT_CU_I64: return where_launch<uint64_t>(out, cond, a, b, s);
    case WEFT_CU_F32: case WEFT_CU_I32: return where_launch<uint32_t>(out, cond, a, b, s);
    case WEFT_CU_F16: case WEFT_CU_BF16: return where_launch<uint16_t>(out, cond, a, b, s);
    case WEFT_CU_BOOL: case WEFT_CU_U8: return where_launch<uint8_t>(out, cond, a, b, s);
    default: return cudaErrorInvalidValue;
    }
}
