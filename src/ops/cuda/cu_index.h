// Strided index math for the memory-bound CUDA kernels, in plain C so the
// host can build it and tests/cuda/test_cuda_index_math.c can check it on any
// machine: division by a precomputed multiplier (Hacker's Delight, as
// PyTorch's IntDivider) instead of a 64-bit divide per dim and element, and
// one layout for all operands of a kernel, so a single pass over the dims
// gives every operand's offset.
#ifndef WEFT_CU_INDEX_H
#define WEFT_CU_INDEX_H

#include <stdbool.h>
#include <stdint.h>

#ifndef WEFT_CU_MAX_DIMS
#define WEFT_CU_MAX_DIMS 8 // as cu_tensor.h (this header stays free of the CUDA runtime's)
#endif

#ifdef __CUDACC__
#define WEFT_CU_HD __host__ __device__ __forceinline__
#else
#define WEFT_CU_HD static inline
#endif

// n / d for n, d in [1, 2^31): q = (umulhi(n, m) + n) >> s, with s = ceil(log2 d) and
// m = floor(2^32 (2^s - d) / d) + 1 (fits in 32 bits for every such d).
typedef struct weft_cu_divmod {
    uint32_t d, m, s;
} weft_cu_divmod;

static inline weft_cu_divmod weft_cu_divmod_make(uint32_t d) {
    uint32_t s = 0;
    while (s < 31 && ((uint32_t)1 << s) < d) s++;
    uint64_t m = ((((uint64_t)1 << 32) * ((((uint64_t)1) << s) - d)) / d) + 1;
    weft_cu_divmod v = {d, (uint32_t)m, s};
    return v;
}

WEFT_CU_HD uint32_t weft_cu_div(weft_cu_divmod v, uint32_t n) {
#ifdef __CUDA_ARCH__
    uint32_t t = __umulhi(n, v.m);
#else
    uint32_t t = (uint32_t)(((uint64_t)n * v.m) >> 32);
#endif
    return (t + n) >> v.s;
}

// The shared layout of up to WEFT_CU_INDEX_OPS operands of one shape (a kernel's output and its inputs read at
// the output's shape, coalesced): sizes as divisors and each operand's strides, innermost dim first (so a
// device loop unrolled over WEFT_CU_MAX_DIMS indexes them with constants and they stay in parameter space).
#define WEFT_CU_INDEX_OPS 4
typedef struct weft_cu_index {
    int32_t ndim;
    weft_cu_divmod div[WEFT_CU_MAX_DIMS];
    int32_t strides[WEFT_CU_INDEX_OPS][WEFT_CU_MAX_DIMS];
} weft_cu_index;

// Builds x for n operands of one shape (ndim sizes, outermost first; strides[k] the k-th operand's). False when
// 32-bit indices do not hold it: 2^31 or more elements, a negative stride, or an operand whose offsets reach
// 2^31 (the kernels then take their 64-bit path).
static inline bool weft_cu_index_make(weft_cu_index *x, int ndim, const int64_t *sizes, int n,
                                      const int64_t *const *strides) {
    const int64_t lim = ((int64_t)1 << 31) - 1;
    if (n < 1 || n > WEFT_CU_INDEX_OPS || ndim < 0 || ndim > WEFT_CU_MAX_DIMS) return false;
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (sizes[d] < 0) return false;
        numel *= sizes[d];
        if (numel > lim) return false;
    }
    x->ndim = ndim;
    for (int j = 0; j < WEFT_CU_MAX_DIMS; j++) { // j: dim ndim - 1 - j
        x->div[j] = weft_cu_divmod_make(j < ndim && sizes[ndim - 1 - j] > 0 ? (uint32_t)sizes[ndim - 1 - j] : 1);
        for (int k = 0; k < WEFT_CU_INDEX_OPS; k++) x->strides[k][j] = 0;
    }
    for (int k = 0; k < n; k++) {
        int64_t span = 0;
        for (int d = 0; d < ndim; d++) {
            int64_t st = strides[k][d];
            if (st < 0 || st > lim) return false;
            span += st * (sizes[d] > 0 ? sizes[d] - 1 : 0);
            if (span > lim) return false;
            x->strides[k][ndim - 1 - d] = (int32_t)st;
        }
    }
    return true;
}

// The offsets of logical (row-major) index i in operands 0..n-1.
// (The device kernels use weft_cu_offsets32 in cu_common.cuh, the same loop unrolled.)
WEFT_CU_HD void weft_cu_index_offsets(const weft_cu_index *x, int n, uint32_t i, uint32_t *off) {
    for (int k = 0; k < n; k++) off[k] = 0;
    for (int j = 0; j < x->ndim; j++) {
        uint32_t q = weft_cu_div(x->div[j], i), r = i - q * x->div[j].d;
        for (int k = 0; k < n; k++) off[k] += r * (uint32_t)x->strides[k][j];
        i = q;
    }
}

#endif
