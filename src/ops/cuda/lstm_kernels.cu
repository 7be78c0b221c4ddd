// The fused LSTM cell on CUDA, mirroring cpu/lstm.c: one thread per (b, j)
// element of the (B,H) state, grid-stride; each reads its four gates
// gates[b, q*H + j] (q = i, f, g, o) and writes h, c (forward) or its four
// gate gradients and dc_prev (backward). No reductions, no shared memory.
#include <math.h>
#include <stdint.h>

#include "cu_common.cuh"
#include "lstm_kernels.h"

__device__ __forceinline__ float lstm_sigm(float v) { return 1.0f / (1.0f + expf(-v)); }
__device__ __forceinline__ double lstm_sigm(double v) { return 1.0 / (1.0 + exp(-v)); }
__device__ __forceinline__ float lstm_tanh(float v) { return tanhf(v); }
__device__ __forceinline__ double lstm_tanh(double v) { return tanh(v); }

// n = B*H threads' worth of elements; k = b*H + j.
template <typename T>
__global__ void lstm_cell_kernel(const T *gates, const T *cp, T *h, T *c, int64_t n, int64_t H) {
    WEFT_CU_GRID_LOOP(k, n) {
        const int64_t b = k / H, j = k - b * H;
        const T *gr = gates + b * 4 * H; // (4H): i, f, g, o
        const T i = lstm_sigm(gr[j]), g = lstm_tanh(gr[2 * H + j]), o = lstm_sigm(gr[3 * H + j]);
        T cn = i * g;
        if (cp) cn = lstm_sigm(gr[H + j]) * cp[k] + cn;
        c[k] = cn;
        h[k] = o * lstm_tanh(cn);
    }
}

template <typename T>
__global__ void lstm_cell_bw_kernel(const T *gates, const T *cp, const T *c, const T *dh, const T *dc, T *dg, T *dcp,
                                    int64_t n, int64_t H) {
    WEFT_CU_GRID_LOOP(k, n) {
        const int64_t b = k / H, j = k - b * H;
        const T *gr = gates + b * 4 * H;
        T *dr = dg + b * 4 * H;
        const T i = lstm_sigm(gr[j]), f = lstm_sigm(gr[H + j]), g = lstm_tanh(gr[2 * H + j]),
                o = lstm_sigm(gr[3 * H + j]);
        const T tc = lstm_tanh(c[k]), dhk = dh ? dh[k] : (T)0;
        const T dct = (dc ? dc[k] : (T)0) + dhk * o * ((T)1 - tc * tc);
        const T cpk = cp ? cp[k] : (T)0;
        dr[j] = dct * g * i * ((T)1 - i);
        dr[H + j] = dct * cpk * f * ((T)1 - f);
        dr[2 * H + j] = dct * i * ((T)1 - g * g);
        dr[3 * H + j] = dhk * tc * o * ((T)1 - o);
        dcp[k] = dct * f;
    }
}

template <typename T>
static cudaError_t launch_cell(const void *gates, const void *cp, void *h, void *c, int64_t B, int64_t H,
                               cudaStream_t s) {
    const int64_t n = B * H;
    if (n <= 0) return cudaSuccess;
    lstm_cell_kernel<T><<<weft_cu_blocks(n), WEFT_CU_THREADS, 0, s>>>((const T *)gates, (const T *)cp, (T *)h,
                                                                      (T *)c, n, H);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t launch_cell_bw(const void *gates, const void *cp, const void *c, const void *dh, const void *dc,
                                  void *dg, void *dcp, int64_t B, int64_t H, cudaStream_t s) {
    const int64_t n = B * H;
    if (n <= 0) return cudaSuccess;
    lstm_cell_bw_kernel<T><<<weft_cu_blocks(n), WEFT_CU_THREADS, 0, s>>>(
        (const T *)gates, (const T *)cp, (const T *)c, (const T *)dh, (const T *)dc, (T *)dg, (T *)dcp, n, H);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_lstm_cell(const void *gates, const void *c_prev, void *h, void *c, int dtype,
                                         int64_t B, int64_t H, cudaStream_t s) {
    WEFT_CU_DISPATCH_FLOAT(dtype, launch_cell, gates, c_prev, h, c, B, H, s)
}

extern "C" cudaError_t weft_cu_lstm_cell_backward(const void *gates, const void *c_prev, const void *c,
                                                  const void *dh, const void *dc, void *dgates, void *dc_prev,
                                                  int dtype, int64_t B, int64_t H, cudaStream_t s) {
    WEFT_CU_DISPATCH_FLOAT(dtype, launch_cell_bw, gates, c_prev, c, dh, dc, dgates, dc_prev, B, H, s)
}
