// Index family kernels: one gather (take) and one atomic scatter-add (add)
// shape the six index ops (cuda/index.c says which is which), plus the
// range check that reports a bad index to the host without making it wait
// (device/cuda/cuda_report.h).
//
// Positions walk the logical (row-major) order of a descriptor's sizes; the
// coordinate along `dim` is replaced by an index value on the way, so any
// strides work without a copy. An index outside [0, limit) (reported by the
// check) reads a zero / adds nothing: never memory outside the tensors.
#include "cu_common.cuh"
#include "index_kernels.h"

__global__ void check_range(const int64_t *idx, int64_t n, int64_t limit, weft_cuda_report *rep,
                            unsigned long long what) {
    WEFT_CU_GRID_LOOP(i, n) {
        if ((uint64_t)idx[i] >= (uint64_t)limit) weft_cu_report(rep, what, WEFT_CUDA_REPORT_INDEX, idx[i], i, limit);
    }
}

extern "C" cudaError_t weft_cu_index_check(const int64_t *idx, int64_t n, int64_t limit, weft_cuda_report *rep,
                                           const char *what, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    check_range<<<weft_cu_blocks(n), WEFT_CU_THREADS, 0, s>>>(idx, n, limit, rep, (unsigned long long)(uintptr_t)what);
    return cudaGetLastError();
}

// Element offset in t of logical position i of t.sizes, with the coordinate
// along dim replaced by idx[i] (per_elem) or idx[that coordinate]; false when
// that index value is outside [0, limit).
__device__ __forceinline__ bool offset_at(const weft_cu_tensor &t, int64_t i, int dim, int64_t limit,
                                          const int64_t *idx, int per_elem, int64_t *off_out) {
    int64_t off = 0, r = i;
    for (int d = t.ndim - 1; d >= 0; d--) {
        int64_t s = t.sizes[d], c = r % s;
        r /= s;
        if (d == dim) {
            c = per_elem ? idx[i] : idx[c];
            if ((uint64_t)c >= (uint64_t)limit) return false;
        }
        off += c * t.strides[d];
    }
    *off_out = off;
    return true;
}

template <typename W>
__global__ void take(W *out, weft_cu_tensor src, int dim, int64_t limit, const int64_t *idx, int per_elem) {
    const W *s = (const W *)src.data;
    WEFT_CU_GRID_LOOP(i, src.numel) {
        int64_t off;
        out[i] = offset_at(src, i, dim, limit, idx, per_elem, &off) ? s[off] : W(0);
    }
}

extern "C" cudaError_t weft_cu_index_take(void *out, weft_cu_tensor src, int dim, int64_t limit, const int64_t *idx,
                                          int per_elem, cudaStream_t s) {
    if (src.numel == 0) return cudaSuccess;
    unsigned nb = weft_cu_blocks(src.numel);
    switch (src.dtype) { // moves bits: every dtype by its size
    case WEFT_CU_F64: case WEFT_CU_I64: take<uint64_t><<<nb, WEFT_CU_THREADS, 0, s>>>((uint64_t *)out, src, dim, limit, idx, per_elem); break;
    case WEFT_CU_F32: case WEFT_CU_I32: take<uint32_t><<<nb, WEFT_CU_THREADS, 0, s>>>((uint32_t *)out, src, dim, limit, idx, per_elem); break;
    case WEFT_CU_F16: case WEFT_CU_BF16: take<uint16_t><<<nb, WEFT_CU_THREADS, 0, s>>>((uint16_t *)out, src, dim, limit, idx, per_elem); break;
    default: take<uint8_t><<<nb, WEFT_CU_THREADS, 0, s>>>((uint8_t *)out, src, dim, limit, idx, per_elem); break;
    }
    return cudaGetLastError();
}

__device__ __forceinline__ void atomic_add(float *p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double *p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int32_t *p, int32_t v) { atomicAdd((int *)p, (int)v); }
// two's complement: an unsigned add is the signed add
__device__ __forceinline__ void atomic_add(int64_t *p, int64_t v) {
    atomicAdd((unsigned long long *)p, (unsigned long long)v);
}

// Walks src's positions; dst has the same sizes (its own strides), the
// coordinate along dim replaced by the index value.
template <typename T>
__global__ void add_at(weft_cu_tensor dst, weft_cu_tensor src, int dim, int64_t limit, const int64_t *idx,
                       int per_elem) {
    T *d = (T *)dst.data;
    const T *s = (const T *)src.data;
    WEFT_CU_GRID_LOOP(i, src.numel) {
        int64_t doff = 0, soff = 0, r = i;
        bool ok = true;
        for (int k = src.ndim - 1; k >= 0; k--) {
            int64_t sz = src.sizes[k], c = r % sz;
            r /= sz;
            soff += c * src.strides[k];
            if (k == dim) {
                c = per_elem ? idx[i] : idx[c];
                ok = (uint64_t)c < (uint64_t)limit;
            }
            doff += c * dst.strides[k];
        }
        if (ok) atomic_add(d + doff, s[soff]);
    }
}

template <typename T>
static cudaError_t launch_add(weft_cu_tensor dst, weft_cu_tensor src, int dim, int64_t limit, const int64_t *idx,
                              int per_elem, cudaStream_t s) {
    add_at<T><<<weft_cu_blocks(src.numel), WEFT_CU_THREADS, 0, s>>>(dst, src, dim, limit, idx, per_elem);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_index_add(weft_cu_tensor dst, weft_cu_tensor src, int dim, int64_t limit,
                                         const int64_t *idx, int per_elem, cudaStream_t s) {
    if (src.numel == 0) return cudaSuccess;
    WEFT_CU_DISPATCH_NUM(src.dtype, launch_add, dst, src, dim, limit, idx, per_elem, s)
}

// ---- topk ----
// Does (a at i) come before (b at j) in best-first order? A total order: the value's, then the position's.
template <typename T> __device__ __forceinline__ bool topk_before(T a, int64_t i, T b, int64_t j, bool largest) {
    bool an = a != a, bn = b != b; // NaN (never for integers)
    bool better = largest ? (a > b || (an && !bn)) : (a < b || (bn && !an));
    bool worse = largest ? (b > a || (bn && !an)) : (b < a || (an && !bn));
    return better || (!worse && i < j);
}

template <typename T>
__global__ void topk_rows(int64_t *out, weft_cu_tensor x, int dim, int64_t k, bool largest, int64_t rows, int64_t inner) {
    int64_t n = x.sizes[dim], sd = x.strides[dim];
    WEFT_CU_GRID_LOOP(r, rows) {
        int64_t base = 0, rr = r;
        for (int d = x.ndim - 1; d >= 0; d--) { // the row's coordinates: every dim but dim, row-major
            if (d == dim) continue;
            base += rr % x.sizes[d] * x.strides[d];
            rr /= x.sizes[d];
        }
        const T *p = (const T *)x.data + base;
        int64_t *q = out + (r / inner) * k * inner + r % inner, pj = -1;
        T pv = T();
        for (int64_t t = 0; t < k; t++) {
            int64_t bj = -1;
            T bv = T();
            for (int64_t j = 0; j < n; j++) {
                T v = p[j * sd];
                if (pj >= 0 && !topk_before(pv, pj, v, j, largest)) continue; // taken already
                if (bj < 0 || topk_before(v, j, bv, bj, largest)) bj = j, bv = v;
            }
            q[t * inner] = bj;
            pj = bj, pv = bv;
        }
    }
}

extern "C" cudaError_t weft_cu_topk(int64_t *out, weft_cu_tensor x, int dim, int64_t k, int largest, cudaStream_t s) {
    int64_t rows = 1, inner = 1;
    for (int d = 0; d < x.ndim; d++)
        if (d != dim) rows *= x.sizes[d];
    for (int d = dim + 1; d < x.ndim; d++) inner *= x.sizes[d];
    if (rows == 0 || k == 0) return cudaSuccess;
    unsigned blocks = weft_cu_blocks(rows);
    switch (x.dtype) {
    case WEFT_CU_F32: topk_rows<float><<<blocks, WEFT_CU_THREADS, 0, s>>>(out, x, dim, k, largest, rows, inner); break;
    case WEFT_CU_F64: topk_rows<double><<<blocks, WEFT_CU_THREADS, 0, s>>>(out, x, dim, k, largest, rows, inner); break;
    case WEFT_CU_I32: topk_rows<int32_t><<<blocks, WEFT_CU_THREADS, 0, s>>>(out, x, dim, k, largest, rows, inner); break;
    case WEFT_CU_I64: topk_rows<int64_t><<<blocks, WEFT_CU_THREADS, 0, s>>>(out, x, dim, k, largest, rows, inner); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
