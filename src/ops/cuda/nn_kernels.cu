// softmax / log_softmax (+ fused backward), cross-entropy (+ backward) and
// dropout, mirroring cpu/softmax.c and cpu/dropout.c.
//
// Softmax over the last dim (inner == 1) runs a warp per row up to 1024
// columns and a block per row above; over another dim, a thread per column
// of the (outer, D, inner) view walks D (neighbouring threads read
// neighbouring addresses). Sums are in T like the CPU's row kernels. The
// forward reads bf16 / f16 x in f32 and writes f32 y.
#include <math.h>
#include <stdint.h>

#include "../../tensor/philox.h"
#include "cu_common.cuh"
#include "nn_kernels.h"
#include "reduce_kernels.h"

#define NN_THREADS 256

// ---------------------------------------------------------------- softmax
// Rows of (rows, D): y = softmax(x) or log_softmax(x) per row. x's storage type XT: T, or bf16 / f16 read in
// f32 (T = float; y f32, as the statistics).
template <typename T, typename XT, typename G>
__global__ void __launch_bounds__(NN_THREADS) softmax_rows(const XT *x, T *y, int64_t rows, int64_t D, int lg) {
    __shared__ T sh[32];
    G g;
    const int r0 = g.rank(), rs = g.size();
    for (int64_t r = g.first(); r < rows; r += g.stride()) {
        const XT *xr = x + r * D; // (D)
        T *yr = y + r * D;
        T m = -INFINITY, s = 0;
        for (int64_t i = r0; i < D; i += rs) {
            const T v = weft_cu_ld<T>(xr[i]);
            m = v > m ? v : m;
        }
        m = g.all(m, weft_cu_max(), sh);
        for (int64_t i = r0; i < D; i += rs) s += weft_cu_exp(weft_cu_ld<T>(xr[i]) - m);
        s = g.all(s, weft_cu_add(), sh);
        if (lg) {
            const T ls = weft_cu_log(s); // (x - m) first: exact for x near m
            for (int64_t i = r0; i < D; i += rs) yr[i] = (weft_cu_ld<T>(xr[i]) - m) - ls;
        } else {
            const T inv = (T)1 / s;
            for (int64_t i = r0; i < D; i += rs) yr[i] = weft_cu_exp(weft_cu_ld<T>(xr[i]) - m) * inv;
        }
    }
}

// softmax: dx = y (g - sum(g y)); log_softmax: dx = g - exp(y) sum(g), per row. dx's storage type DT: T, or
// bf16 / f16 (the gradient of a half x, T = float), rounded once as it is written.
template <typename T, typename DT, typename G>
__global__ void __launch_bounds__(NN_THREADS)
    softmax_bw_rows(const T *gr_, const T *y, DT *dx, int64_t rows, int64_t D, int lg) {
    __shared__ T sh[32];
    G g;
    const int r0 = g.rank(), rs = g.size();
    for (int64_t r = g.first(); r < rows; r += g.stride()) {
        const T *gr = gr_ + r * D, *yr = y + r * D;
        DT *dr = dx + r * D;
        T s = 0;
        if (lg)
            for (int64_t i = r0; i < D; i += rs) s += gr[i];
        else
            for (int64_t i = r0; i < D; i += rs) s += gr[i] * yr[i];
        s = g.all(s, weft_cu_add(), sh);
        if (lg)
            for (int64_t i = r0; i < D; i += rs) dr[i] = weft_cu_st<DT>(gr[i] - weft_cu_exp(yr[i]) * s);
        else
            for (int64_t i = r0; i < D; i += rs) dr[i] = weft_cu_st<DT>(yr[i] * (gr[i] - s));
    }
}

// (outer, D, inner), inner > 1: one thread per (o, j) column.
template <typename T, typename XT>
__global__ void softmax_cols(const XT *x, T *y, int64_t outer, int64_t D, int64_t inner, int lg) {
    WEFT_CU_GRID_LOOP(t, outer * inner) {
        const int64_t o = t / inner, j = t - o * inner, base = o * D * inner + j;
        T m = -INFINITY, s = 0;
        for (int64_t d = 0; d < D; d++) {
            T v = weft_cu_ld<T>(x[base + d * inner]);
            m = v > m ? v : m;
        }
        for (int64_t d = 0; d < D; d++) s += weft_cu_exp(weft_cu_ld<T>(x[base + d * inner]) - m);
        if (lg) {
            const T ls = weft_cu_log(s);
            for (int64_t d = 0; d < D; d++) y[base + d * inner] = (weft_cu_ld<T>(x[base + d * inner]) - m) - ls;
        } else {
            const T inv = (T)1 / s;
            for (int64_t d = 0; d < D; d++) y[base + d * inner] = weft_cu_exp(weft_cu_ld<T>(x[base + d * inner]) - m) * inv;
        }
    }
}

template <typename T, typename DT>
__global__ void softmax_bw_cols(const T *g, const T *y, DT *dx, int64_t outer, int64_t D, int64_t inner, int lg) {
    WEFT_CU_GRID_LOOP(t, outer * inner) {
        const int64_t o = t / inner, j = t - o * inner, base = o * D * inner + j;
        T s = 0;
        for (int64_t d = 0; d < D; d++) {
            const int64_t k = base + d * inner;
            s += lg ? g[k] : g[k] * y[k];
        }
        for (int64_t d = 0; d < D; d++) {
            const int64_t k = base + d * inner;
            dx[k] = weft_cu_st<DT>(lg ? g[k] - weft_cu_exp(y[k]) * s : y[k] * (g[k] - s));
        }
    }
}

template <typename T, typename XT>
static cudaError_t launch_softmax(const void *px, void *py, int64_t outer, int64_t D, int64_t inner, int lg,
                                  cudaStream_t s) {
    const XT *x = (const XT *)px;
    T *y = (T *)py;
    if (inner == 1) {
        if (D <= 1024) {
            unsigned nb = weft_cu_row_blocks<weft_cu_warp_group>(outer, NN_THREADS);
            softmax_rows<T, XT, weft_cu_warp_group><<<nb, NN_THREADS, 0, s>>>(x, y, outer, D, lg);
        } else {
            unsigned nb = weft_cu_row_blocks<weft_cu_block_group>(outer, NN_THREADS);
            softmax_rows<T, XT, weft_cu_block_group><<<nb, NN_THREADS, 0, s>>>(x, y, outer, D, lg);
        }
    } else {
        softmax_cols<T, XT><<<weft_cu_blocks(outer * inner), WEFT_CU_THREADS, 0, s>>>(x, y, outer, D, inner, lg);
    }
    return cudaGetLastError();
}

template <typename T, typename DT>
static cudaError_t launch_softmax_bw(const void *pg, const void *py, void *pdx, int64_t outer, int64_t D,
                                     int64_t inner, int lg, cudaStream_t s) {
    const T *g = (const T *)pg, *y = (const T *)py;
    DT *dx = (DT *)pdx;
    if (inner == 1) {
        if (D <= 1024) {
            unsigned nb = weft_cu_row_blocks<weft_cu_warp_group>(outer, NN_THREADS);
            softmax_bw_rows<T, DT, weft_cu_warp_group><<<nb, NN_THREADS, 0, s>>>(g, y, dx, outer, D, lg);
        } else {
            unsigned nb = weft_cu_row_blocks<weft_cu_block_group>(outer, NN_THREADS);
            softmax_bw_rows<T, DT, weft_cu_block_group><<<nb, NN_THREADS, 0, s>>>(g, y, dx, outer, D, lg);
        }
    } else {
        softmax_bw_cols<T, DT><<<weft_cu_blocks(outer * inner), WEFT_CU_THREADS, 0, s>>>(g, y, dx, outer, D, inner, lg);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_softmax(const void *x, void *y, int dtype, int64_t outer, int64_t D, int64_t inner,
                                       int lg, cudaStream_t s) {
    if (outer * D * inner == 0) return cudaSuccess;
    WEFT_CU_DISPATCH_FLOAT_HALF(dtype, launch_softmax, x, y, outer, D, inner, lg, s);
}

extern "C" cudaError_t weft_cu_softmax_backward(const void *g, const void *y, void *dx, int dtype, int64_t outer,
                                                int64_t D, int64_t inner, int lg, cudaStream_t s) {
    if (outer * D * inner == 0) return cudaSuccess;
    WEFT_CU_DISPATCH_FLOAT_HALF(dtype, launch_softmax_bw, g, y, dx, outer, D, inner, lg, s); // (by dx's dtype)
}

// ---------------------------------------------------------------- cross-entropy
__device__ __forceinline__ int64_t target_at(const void *tg, int tdt, int64_t tstride, int64_t r) {
    return tdt == WEFT_CU_I32 ? (int64_t)((const int32_t *)tg)[r * tstride] : ((const int64_t *)tg)[r * tstride];
}

// rowloss[r] = max + log(sum exp(x - max)) - x[t_r] for each row of x (N,C),
// the max and sum in T as on the CPU, the loss in double. The logits' storage type XT: T, or bf16 / f16 with
// T float (read as they are: the CPU's arithmetic on its widened copy).
template <typename T, typename XT, typename G>
__global__ void __launch_bounds__(NN_THREADS) ce_rows(const XT *x, const void *tg, int tdt, int64_t tstride, int64_t N,
                                                      int64_t C, double *rowloss, weft_cuda_report *rep,
                                                      unsigned long long what) {
    __shared__ T sh[32];
    G g;
    const int r0 = g.rank(), rs = g.size();
    for (int64_t r = g.first(); r < N; r += g.stride()) {
        const XT *xr = x + r * C; // (C)
        T m = -INFINITY, s = 0;
        for (int64_t i = r0; i < C; i += rs) {
            const T v = weft_cu_ld<T>(xr[i]);
            m = v > m ? v : m;
        }
        m = g.all(m, weft_cu_max(), sh);
        for (int64_t i = r0; i < C; i += rs) s += weft_cu_exp(weft_cu_ld<T>(xr[i]) - m);
        s = g.all(s, weft_cu_add(), sh);
        if (r0 == 0) {
            int64_t t = target_at(tg, tdt, tstride, r);
            bool ok = t >= 0 && t < C;
            rowloss[r] = ok ? (double)m + (double)weft_cu_log(s) - (double)weft_cu_ld<T>(xr[t]) : (double)NAN;
            if (!ok) weft_cu_report(rep, what, WEFT_CUDA_REPORT_TARGET, t, r, C);
        }
    }
}

// out = sum(rowloss) / N in one block (a fixed order: the same bits every run).
template <typename T> __global__ void __launch_bounds__(NN_THREADS) ce_mean(const double *rowloss, int64_t N, T *out) {
    __shared__ double sh[32];
    double s = 0;
    for (int64_t r = threadIdx.x; r < N; r += blockDim.x) s += rowloss[r];
    s = weft_cu_block_all(s, weft_cu_add(), sh);
    if (threadIdx.x == 0) out[0] = (T)(N ? s / (double)N : (double)NAN);
}

// The loss is T: f32 for half logits.
template <typename T, typename XT>
static cudaError_t launch_ce(const void *x, const void *tg, int tdt, int64_t tstride, int64_t N, int64_t C,
                             double *rowloss, void *out, weft_cuda_report *rep, unsigned long long what,
                             cudaStream_t s) {
    if (N > 0 && C > 0) {
        if (C <= 1024)
            ce_rows<T, XT, weft_cu_warp_group>
                <<<weft_cu_row_blocks<weft_cu_warp_group>(N, NN_THREADS), NN_THREADS, 0, s>>>(
                    (const XT *)x, tg, tdt, tstride, N, C, rowloss, rep, what);
        else
            ce_rows<T, XT, weft_cu_block_group>
                <<<weft_cu_row_blocks<weft_cu_block_group>(N, NN_THREADS), NN_THREADS, 0, s>>>(
                    (const XT *)x, tg, tdt, tstride, N, C, rowloss, rep, what);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    ce_mean<T><<<1, NN_THREADS, 0, s>>>(rowloss, C > 0 ? N : 0, (T *)out);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_cross_entropy(const void *x, int dtype, const void *tg, int tdt, int64_t tstride,
                                             int64_t N, int64_t C, double *rowloss, void *out, weft_cuda_report *rep,
                                             const char *what, cudaStream_t s) {
    if (tdt != WEFT_CU_I32 && tdt != WEFT_CU_I64) return cudaErrorInvalidValue;
    const unsigned long long w = (unsigned long long)(uintptr_t)what;
    WEFT_CU_DISPATCH_FLOAT_HALF(dtype, launch_ce, x, tg, tdt, tstride, N, C, rowloss, out, rep, w, s);
}

// dx = (softmax(x) - onehot(t)) scale, scale = g / N, per row; as the CPU:
// k = scale / sum in T, dx = exp(x - max) k, then dx[t] -= scale. g is the loss's T; dx the logits' XT,
// each element rounded once.
template <typename T, typename XT, typename G>
__global__ void __launch_bounds__(NN_THREADS) ce_bw_rows(const XT *x, const void *tg, int tdt, int64_t tstride,
                                                         int64_t N, int64_t C, const T *gp, XT *dx,
                                                         weft_cuda_report *rep, unsigned long long what) {
    __shared__ T sh[32];
    G g;
    const int r0 = g.rank(), rs = g.size();
    const T scale = (T)((double)gp[0] / (double)N); // N > 0 here
    for (int64_t r = g.first(); r < N; r += g.stride()) {
        const XT *xr = x + r * C;
        XT *dr = dx + r * C;
        T m = -INFINITY, s = 0;
        for (int64_t i = r0; i < C; i += rs) {
            const T v = weft_cu_ld<T>(xr[i]);
            m = v > m ? v : m;
        }
        m = g.all(m, weft_cu_max(), sh);
        for (int64_t i = r0; i < C; i += rs) s += weft_cu_exp(weft_cu_ld<T>(xr[i]) - m);
        s = g.all(s, weft_cu_add(), sh);
        const T k = scale / s;
        const int64_t t = target_at(tg, tdt, tstride, r);
        if (r0 == 0 && (t < 0 || t >= C)) weft_cu_report(rep, what, WEFT_CUDA_REPORT_TARGET, t, r, C);
        for (int64_t i = r0; i < C; i += rs) {
            const T v = weft_cu_exp(weft_cu_ld<T>(xr[i]) - m) * k, d = i == t ? v - scale : v;
            dr[i] = weft_cu_st<XT>(d);
        }
    }
}

template <typename T, typename XT>
static cudaError_t launch_ce_bw(const void *x, const void *tg, int tdt, int64_t tstride, int64_t N, int64_t C,
                                const void *gp, void *dx, weft_cuda_report *rep, unsigned long long what,
                                cudaStream_t s) {
    if (C <= 1024)
        ce_bw_rows<T, XT, weft_cu_warp_group>
            <<<weft_cu_row_blocks<weft_cu_warp_group>(N, NN_THREADS), NN_THREADS, 0, s>>>(
                (const XT *)x, tg, tdt, tstride, N, C, (const T *)gp, (XT *)dx, rep, what);
    else
        ce_bw_rows<T, XT, weft_cu_block_group>
            <<<weft_cu_row_blocks<weft_cu_block_group>(N, NN_THREADS), NN_THREADS, 0, s>>>(
                (const XT *)x, tg, tdt, tstride, N, C, (const T *)gp, (XT *)dx, rep, what);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_cross_entropy_backward(const void *x, int dtype, const void *tg, int tdt,
                                                      int64_t tstride, int64_t N, int64_t C, const void *g, void *dx,
                                                      weft_cuda_report *rep, const char *what, cudaStream_t s) {
    if (tdt != WEFT_CU_I32 && tdt != WEFT_CU_I64) return cudaErrorInvalidValue;
    if (N == 0 || C == 0) return cudaSuccess;
    const unsigned long long w = (unsigned long long)(uintptr_t)what;
    WEFT_CU_DISPATCH_FLOAT_HALF(dtype, launch_ce_bw, x, tg, tdt, tstride, N, C, g, dx, rep, w, s);
}

// ---------------------------------------------------------------- dropout
// The host's Philox and uniform (tensor/philox.h), compiled for the device: the same masks as cpu/dropout.c.
template <typename T>
__global__ void dropout_kernel(weft_cu_tensor x, T *y, uint64_t seed, uint64_t off, double p, T scale, bool contig) {
    const T *xp = (const T *)x.data;
    WEFT_CU_GRID_LOOP(i, x.numel) {
        uint32_t w[4];
        weft_philox4x32(seed, 0, off + (uint64_t)i, w);
        const bool keep = weft_philox_u01(w[0], w[1]) >= p;
        const T v = xp[contig ? i : weft_cu_offset(x, i)];
        y[i] = keep ? v * scale : (T)0;
    }
}

template <typename T>
static cudaError_t launch_dropout(weft_cu_tensor x, void *y, uint64_t seed, uint64_t off, double p, cudaStream_t s) {
    const double scale = 1.0 / (1.0 - p); // f32: the CPU multiplies by (float)scale
    dropout_kernel<T><<<weft_cu_blocks(x.numel), WEFT_CU_THREADS, 0, s>>>(x, (T *)y, seed, off, p, (T)scale,
                                                                          weft_cu_contiguous(x));
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_dropout(weft_cu_tensor x, void *y, uint64_t seed, uint64_t off, double p,
                                       cudaStream_t s) {
    if (x.numel == 0) return cudaSuccess;
    WEFT_CU_DISPATCH_FLOAT(x.dtype, launch_dropout, x, y, seed, off, p, s);
}
