// The fused LSTM cell on CUDA, mirroring cpu/lstm.c: one thread per (b, j)
// element of the (B,H) state, grid-stride; each reads its four gates
// gates[b, q*H + j] (q = i, f, g, o) and writes h, c (forward) or its four
// gate gradients and dc_prev (backward). No reductions, no shared memory.
// The same per step of lstm_seq (cuda/lstm.c runs the products through
// cuBLAS between them), over rows at a stride: a step t of a (B,T,X) tensor
// is B rows at stride T*X.
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

// One step of lstm_seq, k = b*H + j: a (rows of 4H at stride lda) holds the
// gates, replaced by i,f,g,o; cp / c / h at row stride ldh (cp NULL: zero
// state). Each thread reads and writes only its own four gates of row b.
template <typename T>
__global__ void lstm_seq_step_kernel(T *a, const T *cp, T *c, T *h, int64_t n, int64_t H, int64_t lda,
                                     int64_t ldh) {
    WEFT_CU_GRID_LOOP(k, n) {
        const int64_t b = k / H, j = k - b * H, x = b * ldh + j;
        T *ar = a + b * lda;
        const T i = lstm_sigm(ar[j]), f = lstm_sigm(ar[H + j]), g = lstm_tanh(ar[2 * H + j]),
                o = lstm_sigm(ar[3 * H + j]);
        ar[j] = i;
        ar[H + j] = f;
        ar[2 * H + j] = g;
        ar[3 * H + j] = o;
        T cn = i * g;
        if (cp) cn = f * cp[x] + cn;
        c[x] = cn;
        h[x] = o * lstm_tanh(cn);
    }
}

// One step of lstm_seq_backward: a (activated gates) and dg at row stride
// lda; cp, c, dh at row stride ldh; rec (recurrent part of dh, NULL at the
// last step) and dc (carried: dc_t in, dc_{t-1} out) contiguous (B,H).
template <typename T>
__global__ void lstm_seq_bw_step_kernel(const T *a, const T *cp, const T *c, const T *dh, const T *rec, T *dc,
                                        T *dg, int64_t n, int64_t H, int64_t lda, int64_t ldh) {
    WEFT_CU_GRID_LOOP(k, n) {
        const int64_t b = k / H, j = k - b * H, x = b * ldh + j;
        const T *ar = a + b * lda;
        T *dr = dg + b * lda;
        const T i = ar[j], f = ar[H + j], g = ar[2 * H + j], o = ar[3 * H + j];
        const T tc = lstm_tanh(c[x]), dhk = dh[x] + (rec ? rec[k] : (T)0);
        const T dct = dc[k] + dhk * o * ((T)1 - tc * tc);
        dr[j] = dct * g * i * ((T)1 - i);
        dr[H + j] = dct * (cp ? cp[x] : (T)0) * f * ((T)1 - f);
        dr[2 * H + j] = dct * i * ((T)1 - g * g);
        dr[3 * H + j] = dhk * tc * o * ((T)1 - o);
        dc[k] = dct * f;
    }
}

template <typename T>
static cudaError_t launch_seq_step(void *a, const void *cp, void *c, void *h, int64_t B, int64_t H, int64_t lda,
                                   int64_t ldh, cudaStream_t s) {
    const int64_t n = B * H;
    if (n <= 0) return cudaSuccess;
    lstm_seq_step_kernel<T><<<weft_cu_blocks(n), WEFT_CU_THREADS, 0, s>>>((T *)a, (const T *)cp, (T *)c, (T *)h, n,
                                                                          H, lda, ldh);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t launch_seq_bw_step(const void *a, const void *cp, const void *c, const void *dh, const void *rec,
                                      void *dc, void *dg, int64_t B, int64_t H, int64_t lda, int64_t ldh,
                                      cudaStream_t s) {
    const int64_t n = B * H;
    if (n <= 0) return cudaSuccess;
    lstm_seq_bw_step_kernel<T><<<weft_cu_blocks(n), WEFT_CU_THREADS, 0, s>>>(
        (const T *)a, (const T *)cp, (const T *)c, (const T *)dh, (const T *)rec, (T *)dc, (T *)dg, n, H, lda, ldh);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_lstm_seq_step(void *acts, const void *c_prev, void *c, void *h, int dtype, int64_t B,
                                             int64_t H, int64_t lda, int64_t ldh, cudaStream_t s) {
    WEFT_CU_DISPATCH_FLOAT(dtype, launch_seq_step, acts, c_prev, c, h, B, H, lda, ldh, s)
}

extern "C" cudaError_t weft_cu_lstm_seq_bw_step(const void *acts, const void *c_prev, const void *c, const void *dh,
                                                const void *rec, void *dc, void *dgates, int dtype, int64_t B,
                                                int64_t H, int64_t lda, int64_t ldh, cudaStream_t s) {
    WEFT_CU_DISPATCH_FLOAT(dtype, launch_seq_bw_step, acts, c_prev, c, dh, rec, dc, dgates, B, H, lda, ldh, s)
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
