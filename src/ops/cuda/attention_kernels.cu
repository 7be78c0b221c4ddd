// Fused causal attention on CUDA, flash-attention style (Dao et al.), for
// the ops causal_attention and causal_attention_backward (spec next to their
// entries). Sums in T (f32 in f32, f64 in f64).
//
// Every kernel works on one head (b,h) and one block of AT_ROWS = 16 "own"
// rows (query rows for the forward and dq, key rows for dk/dv), one warp
// per AT_RPW = 4 own rows, and streams the other side through shared memory
// in tiles of AT_TILE = 32 rows, one row per lane:
//  - scores: lane l computes the dot product of its streamed row with each
//    of the warp's own rows (the own rows are read as shared-memory
//    broadcasts, the streamed rows with an odd row stride: no bank conflicts);
//  - accumulation: lanes split D (lane l holds d = l, l+32, l+64, l+96: NC
//    registers, NC = 2 for D <= 64, 4 for D <= 128), and the 32 per-row
//    weights are handed round with __shfl_sync.
// Only tiles on or below the diagonal are visited. Rows past T are loaded as
// zeros (a masked weight 0 times a garbage NaN would still be NaN).
//
// Forward: the online softmax (running max m and sum l per query row,
// rescaling the accumulator by exp(m_old - m_new)); writes o and lse.
// Backward: Dl_i = go_i.o_i first (a warp per row), then two kernels that
// both recompute P from lse: one block per key tile for dk, dv (looping over
// query tiles i >= j) and one block per query tile for dq (looping over key
// tiles j <= i). Two passes instead of atomicAdd on dq: deterministic (the
// same bits every run, as the CPU), no zeroing of dq, no f64 atomics, and
// each kernel writes its outputs once; the price is computing S and dP twice.
//
// Shared memory is sized on the actual D; above the 48 KB default the
// launchers opt in (f64 with D = 128 takes 98 KB in the backward kernels).
#include <math.h>
#include <stdint.h>

#include "attention_kernels.h"
#include "cu_common.cuh"

#define AT_WARPS 4
#define AT_RPW 4                      // own rows per warp
#define AT_ROWS (AT_WARPS * AT_RPW)   // own rows per block
#define AT_TILE 32                    // streamed rows per tile: one per lane
#define AT_THREADS (AT_WARPS * 32)
#define AT_MAX_D 128
#define AT_FULL 0xffffffffu

__device__ __forceinline__ float at_exp(float x) { return expf(x); }
__device__ __forceinline__ double at_exp(double x) { return exp(x); }
__device__ __forceinline__ float at_log(float x) { return logf(x); }
__device__ __forceinline__ double at_log(double x) { return log(x); }
template <typename T> __device__ __forceinline__ T at_neg_inf() { return -(T)INFINITY; }

template <typename T> __device__ __forceinline__ T warp_max(T v) {
    for (int o = 16; o > 0; o >>= 1) {
        T u = __shfl_xor_sync(AT_FULL, v, o);
        v = u > v ? u : v;
    }
    return v;
}
template <typename T> __device__ __forceinline__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(AT_FULL, v, o);
    return v;
}

// Odd row stride for tiles read one row per lane (lane l reads row l, column
// d: addresses l*ld + d fall in 32 different banks when ld is odd).
static __host__ __device__ __forceinline__ int at_ld(int D) { return D | 1; }

// dst (n, ld) in shared memory = rows r0 .. r0+n of src (T, D) (one head,
// contiguous); rows >= T are zeros. The whole block takes part.
template <typename T>
__device__ __forceinline__ void load_rows(T *dst, int ld, const T *src, int64_t r0, int n, int64_t Tn, int D) {
    for (int idx = threadIdx.x; idx < n * D; idx += blockDim.x) {
        const int r = idx / D, d = idx - r * D;
        const int64_t g = r0 + r;
        dst[r * ld + d] = g < Tn ? src[g * D + d] : (T)0;
    }
}

// Block b -> (head, own-row tile). heavy_last: the causal work grows with
// the query tile, so the forward and dq kernels take the last tiles first
// (and dk/dv, whose work shrinks with the key tile, the first): the longest
// blocks start first.
__device__ __forceinline__ void at_block(int64_t ntile, bool heavy_last, int64_t *bh, int64_t *tile) {
    const int64_t b = blockIdx.x;
    *bh = b / ntile;
    const int64_t t = b - *bh * ntile;
    *tile = heavy_last ? ntile - 1 - t : t;
}

// ---------------------------------------------------------------- forward
// q, k, v, o (BH,T,D); lse (BH,T). Block: AT_ROWS query rows of one head.
// Shared: Qs (AT_ROWS, D), Ks (AT_TILE, ld), Vs (AT_TILE, D).
template <typename T, int NC>
__global__ void __launch_bounds__(AT_THREADS) attn_fwd(const T *q, const T *k, const T *v, T *o, T *lse, int64_t Tn,
                                                       int D, int64_t ntile, T scale) {
    extern __shared__ __align__(16) unsigned char at_smem[];
    const int ld = at_ld(D);
    T *Qs = (T *)at_smem;
    T *Ks = Qs + AT_ROWS * D;
    T *Vs = Ks + AT_TILE * ld;
    int64_t bh, qt;
    at_block(ntile, true, &bh, &qt);
    const int64_t head = bh * Tn * D, i0 = qt * AT_ROWS;
    q += head, k += head, v += head, o += head, lse += bh * Tn;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int rw = w * AT_RPW; // the warp's first own row within the block

    load_rows(Qs, D, q, i0, AT_ROWS, Tn, D);
    T m[AT_RPW], l[AT_RPW], acc[AT_RPW][NC];
    for (int r = 0; r < AT_RPW; r++) {
        m[r] = at_neg_inf<T>();
        l[r] = 0;
        for (int c = 0; c < NC; c++) acc[r][c] = 0;
    }
    const int64_t ilast = (i0 + AT_ROWS < Tn ? i0 + AT_ROWS : Tn) - 1; // the block's last query row
    const int64_t nkt = ilast / AT_TILE + 1;                            // key tiles on or below the diagonal
    for (int64_t t = 0; t < nkt; t++) {
        const int64_t j0 = t * AT_TILE, j = j0 + lane;
        __syncthreads(); // the previous tile is no longer read
        load_rows(Ks, ld, k, j0, AT_TILE, Tn, D);
        load_rows(Vs, D, v, j0, AT_TILE, Tn, D);
        __syncthreads();
        T s[AT_RPW];
        for (int r = 0; r < AT_RPW; r++) s[r] = 0;
        for (int d = 0; d < D; d++) {
            const T kd = Ks[lane * ld + d];
            for (int r = 0; r < AT_RPW; r++) s[r] += Qs[(rw + r) * D + d] * kd;
        }
        T p[AT_RPW];
        for (int r = 0; r < AT_RPW; r++) {
            const int64_t i = i0 + rw + r;
            const bool ok = j <= i && i < Tn;
            const T sc = ok ? s[r] * scale : at_neg_inf<T>();
            const T mt = warp_max(sc), mn = mt > m[r] ? mt : m[r];
            if (mn == at_neg_inf<T>()) { // a row past T: nothing to add (warp-uniform)
                p[r] = 0;
                continue;
            }
            p[r] = ok ? at_exp(sc - mn) : (T)0;
            const T alpha = at_exp(m[r] - mn); // 0 on the first tile (m = -inf)
            l[r] = l[r] * alpha + warp_sum(p[r]);
            for (int c = 0; c < NC; c++) acc[r][c] *= alpha;
            m[r] = mn;
        }
        for (int jj = 0; jj < AT_TILE; jj++) {
            T vj[NC];
            for (int c = 0; c < NC; c++) {
                const int d = lane + 32 * c;
                vj[c] = d < D ? Vs[jj * D + d] : (T)0;
            }
            for (int r = 0; r < AT_RPW; r++) {
                const T pj = __shfl_sync(AT_FULL, p[r], jj);
                for (int c = 0; c < NC; c++) acc[r][c] += pj * vj[c];
            }
        }
    }
    for (int r = 0; r < AT_RPW; r++) {
        const int64_t i = i0 + rw + r;
        if (i >= Tn) continue;
        const T inv = (T)1 / l[r];
        for (int c = 0; c < NC; c++) {
            const int d = lane + 32 * c;
            if (d < D) o[i * D + d] = acc[r][c] * inv;
        }
        if (lane == 0) lse[i] = m[r] + at_log(l[r]);
    }
}

// ---------------------------------------------------------------- backward
// dl (N) = rows of go . rows of o, go and o (N, D): a warp per row.
template <typename T>
__global__ void __launch_bounds__(256) attn_bwd_dl(const T *go, const T *o, T *dl, int64_t N, int D) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t n = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); n < N; n += warps) {
        T s = 0;
        for (int d = lane; d < D; d += 32) s += go[n * D + d] * o[n * D + d];
        s = warp_sum(s);
        if (lane == 0) dl[n] = s;
    }
}

// gq (BH,T,D). Block: AT_ROWS query rows of one head; streams key tiles j <= i.
// Shared: Qs, Gs (AT_ROWS, D) = q, go rows; Ks, Vs (AT_TILE, ld).
template <typename T, int NC>
__global__ void __launch_bounds__(AT_THREADS) attn_bwd_dq(const T *q, const T *k, const T *v, const T *lse,
                                                          const T *go, const T *dl, T *gq, int64_t Tn, int D,
                                                          int64_t ntile, T scale) {
    extern __shared__ __align__(16) unsigned char at_smem[];
    const int ld = at_ld(D);
    T *Qs = (T *)at_smem;
    T *Gs = Qs + AT_ROWS * D;
    T *Ks = Gs + AT_ROWS * D;
    T *Vs = Ks + AT_TILE * ld;
    int64_t bh, qt;
    at_block(ntile, true, &bh, &qt);
    const int64_t head = bh * Tn * D, i0 = qt * AT_ROWS;
    q += head, k += head, v += head, go += head, gq += head, lse += bh * Tn, dl += bh * Tn;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int rw = w * AT_RPW;

    load_rows(Qs, D, q, i0, AT_ROWS, Tn, D);
    load_rows(Gs, D, go, i0, AT_ROWS, Tn, D);
    T li[AT_RPW], dli[AT_RPW], acc[AT_RPW][NC];
    for (int r = 0; r < AT_RPW; r++) {
        const int64_t i = i0 + rw + r;
        li[r] = i < Tn ? lse[i] : (T)0;
        dli[r] = i < Tn ? dl[i] : (T)0;
        for (int c = 0; c < NC; c++) acc[r][c] = 0;
    }
    const int64_t ilast = (i0 + AT_ROWS < Tn ? i0 + AT_ROWS : Tn) - 1;
    const int64_t nkt = ilast / AT_TILE + 1;
    for (int64_t t = 0; t < nkt; t++) {
        const int64_t j0 = t * AT_TILE, j = j0 + lane;
        __syncthreads();
        load_rows(Ks, ld, k, j0, AT_TILE, Tn, D);
        load_rows(Vs, ld, v, j0, AT_TILE, Tn, D);
        __syncthreads();
        T s[AT_RPW], dp[AT_RPW];
        for (int r = 0; r < AT_RPW; r++) s[r] = dp[r] = 0;
        for (int d = 0; d < D; d++) {
            const T kd = Ks[lane * ld + d], vd = Vs[lane * ld + d];
            for (int r = 0; r < AT_RPW; r++) {
                s[r] += Qs[(rw + r) * D + d] * kd;
                dp[r] += Gs[(rw + r) * D + d] * vd;
            }
        }
        T ds[AT_RPW];
        for (int r = 0; r < AT_RPW; r++) {
            const int64_t i = i0 + rw + r;
            ds[r] = (j <= i && i < Tn) ? at_exp(s[r] * scale - li[r]) * (dp[r] - dli[r]) : (T)0;
        }
        for (int jj = 0; jj < AT_TILE; jj++) {
            T kj[NC];
            for (int c = 0; c < NC; c++) {
                const int d = lane + 32 * c;
                kj[c] = d < D ? Ks[jj * ld + d] : (T)0;
            }
            for (int r = 0; r < AT_RPW; r++) {
                const T dsj = __shfl_sync(AT_FULL, ds[r], jj);
                for (int c = 0; c < NC; c++) acc[r][c] += dsj * kj[c];
            }
        }
    }
    for (int r = 0; r < AT_RPW; r++) {
        const int64_t i = i0 + rw + r;
        if (i >= Tn) continue;
        for (int c = 0; c < NC; c++) {
            const int d = lane + 32 * c;
            if (d < D) gq[i * D + d] = acc[r][c] * scale;
        }
    }
}

// gk, gv (BH,T,D). Block: AT_ROWS key rows of one head; streams query tiles
// i >= j (from the tile holding the block's first key to the end).
// Shared: Ks, Vs (AT_ROWS, D) = k, v rows; Qs, Gs (AT_TILE, ld) = q, go rows.
template <typename T, int NC>
__global__ void __launch_bounds__(AT_THREADS) attn_bwd_dkdv(const T *q, const T *k, const T *v, const T *lse,
                                                            const T *go, const T *dl, T *gk, T *gv, int64_t Tn,
                                                            int D, int64_t ntile, T scale) {
    extern __shared__ __align__(16) unsigned char at_smem[];
    const int ld = at_ld(D);
    T *Ks = (T *)at_smem;
    T *Vs = Ks + AT_ROWS * D;
    T *Qs = Vs + AT_ROWS * D;
    T *Gs = Qs + AT_TILE * ld;
    int64_t bh, kt;
    at_block(ntile, false, &bh, &kt);
    const int64_t head = bh * Tn * D, j0 = kt * AT_ROWS;
    q += head, k += head, v += head, go += head, gk += head, gv += head, lse += bh * Tn, dl += bh * Tn;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int rw = w * AT_RPW;

    load_rows(Ks, D, k, j0, AT_ROWS, Tn, D);
    load_rows(Vs, D, v, j0, AT_ROWS, Tn, D);
    T adk[AT_RPW][NC], adv[AT_RPW][NC];
    for (int r = 0; r < AT_RPW; r++)
        for (int c = 0; c < NC; c++) adk[r][c] = adv[r][c] = 0;
    const int64_t nqt = (Tn + AT_TILE - 1) / AT_TILE;
    for (int64_t t = j0 / AT_TILE; t < nqt; t++) {
        const int64_t i = t * AT_TILE + lane;
        __syncthreads();
        load_rows(Qs, ld, q, t * AT_TILE, AT_TILE, Tn, D);
        load_rows(Gs, ld, go, t * AT_TILE, AT_TILE, Tn, D);
        __syncthreads();
        const T li = i < Tn ? lse[i] : (T)0, dli = i < Tn ? dl[i] : (T)0;
        T s[AT_RPW], dp[AT_RPW];
        for (int r = 0; r < AT_RPW; r++) s[r] = dp[r] = 0;
        for (int d = 0; d < D; d++) {
            const T qd = Qs[lane * ld + d], gd = Gs[lane * ld + d];
            for (int r = 0; r < AT_RPW; r++) {
                s[r] += qd * Ks[(rw + r) * D + d];
                dp[r] += gd * Vs[(rw + r) * D + d];
            }
        }
        T p[AT_RPW], ds[AT_RPW];
        for (int r = 0; r < AT_RPW; r++) {
            const int64_t j = j0 + rw + r;
            p[r] = (j <= i && i < Tn) ? at_exp(s[r] * scale - li) : (T)0;
            ds[r] = p[r] * (dp[r] - dli);
        }
        for (int ii = 0; ii < AT_TILE; ii++) {
            T qi[NC], gi[NC];
            for (int c = 0; c < NC; c++) {
                const int d = lane + 32 * c;
                qi[c] = d < D ? Qs[ii * ld + d] : (T)0;
                gi[c] = d < D ? Gs[ii * ld + d] : (T)0;
            }
            for (int r = 0; r < AT_RPW; r++) {
                const T pi = __shfl_sync(AT_FULL, p[r], ii), dsi = __shfl_sync(AT_FULL, ds[r], ii);
                for (int c = 0; c < NC; c++) {
                    adv[r][c] += pi * gi[c];
                    adk[r][c] += dsi * qi[c];
                }
            }
        }
    }
    for (int r = 0; r < AT_RPW; r++) {
        const int64_t j = j0 + rw + r;
        if (j >= Tn) continue;
        for (int c = 0; c < NC; c++) {
            const int d = lane + 32 * c;
            if (d < D) {
                gk[j * D + d] = adk[r][c] * scale;
                gv[j * D + d] = adv[r][c];
            }
        }
    }
}

// ---------------------------------------------------------------- launchers
template <typename T, int NC>
static cudaError_t fwd_launch(const void *q, const void *k, const void *v, void *o, void *lse, int64_t BH, int64_t Tn,
                              int D, double scale, cudaStream_t s) {
    const int64_t ntile = (Tn + AT_ROWS - 1) / AT_ROWS;
    unsigned nb;
    if (!weft_cu_grid_of(BH, ntile, &nb)) return cudaErrorInvalidValue;
    const size_t smem = sizeof(T) * (size_t)(AT_ROWS * D + AT_TILE * at_ld(D) + AT_TILE * D);
    cudaError_t e = weft_cu_smem_optin(attn_fwd<T, NC>, smem);
    if (e != cudaSuccess) return e;
    attn_fwd<T, NC><<<nb, AT_THREADS, smem, s>>>((const T *)q, (const T *)k, (const T *)v, (T *)o, (T *)lse, Tn, D,
                                                  ntile, (T)scale);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t fwd_dispatch(const void *q, const void *k, const void *v, void *o, void *lse, int64_t BH,
                                int64_t Tn, int D, double scale, cudaStream_t s) {
    if (D <= 64) return fwd_launch<T, 2>(q, k, v, o, lse, BH, Tn, D, scale, s);
    return fwd_launch<T, 4>(q, k, v, o, lse, BH, Tn, D, scale, s);
}

extern "C" cudaError_t weft_cu_causal_attention(const void *q, const void *k, const void *v, void *o, void *lse,
                                                int dtype, int64_t BH, int64_t T, int64_t D, double scale,
                                                cudaStream_t s) {
    if (D < 0 || D > AT_MAX_D || BH < 0 || T < 0) return cudaErrorInvalidValue;
    if (BH == 0 || T == 0) return cudaSuccess; // D == 0 still has lse_i = log(i + 1)
    WEFT_CU_DISPATCH_FLOAT(dtype, fwd_dispatch, q, k, v, o, lse, BH, T, (int)D, scale, s)
}

template <typename T, int NC>
static cudaError_t bwd_launch(const void *q, const void *k, const void *v, const void *o, const void *lse,
                              const void *go, void *dl, void *gq, void *gk, void *gv, int64_t BH, int64_t Tn, int D,
                              double scale, cudaStream_t s) {
    const int64_t ntile = (Tn + AT_ROWS - 1) / AT_ROWS;
    unsigned nb;
    if (!weft_cu_grid_of(BH, ntile, &nb)) return cudaErrorInvalidValue;
    const int64_t N = BH * Tn;
    int64_t ndl = (N + 7) / 8; // 8 warps of 256 threads, grid-stride
    if (ndl > 65535 * 8) ndl = 65535 * 8;
    attn_bwd_dl<T><<<(unsigned)ndl, 256, 0, s>>>((const T *)go, (const T *)o, (T *)dl, N, D);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    // Both kernels hold two (AT_ROWS, D) and two (AT_TILE, ld) tiles.
    const size_t smem = sizeof(T) * (size_t)(2 * AT_ROWS * D + 2 * AT_TILE * at_ld(D));
    if ((e = weft_cu_smem_optin(attn_bwd_dkdv<T, NC>, smem)) != cudaSuccess) return e;
    if ((e = weft_cu_smem_optin(attn_bwd_dq<T, NC>, smem)) != cudaSuccess) return e;
    attn_bwd_dkdv<T, NC><<<nb, AT_THREADS, smem, s>>>((const T *)q, (const T *)k, (const T *)v, (const T *)lse,
                                                       (const T *)go, (const T *)dl, (T *)gk, (T *)gv, Tn, D, ntile,
                                                       (T)scale);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    attn_bwd_dq<T, NC><<<nb, AT_THREADS, smem, s>>>((const T *)q, (const T *)k, (const T *)v, (const T *)lse,
                                                     (const T *)go, (const T *)dl, (T *)gq, Tn, D, ntile, (T)scale);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t bwd_dispatch(const void *q, const void *k, const void *v, const void *o, const void *lse,
                                const void *go, void *dl, void *gq, void *gk, void *gv, int64_t BH, int64_t Tn, int D,
                                double scale, cudaStream_t s) {
    if (D <= 64) return bwd_launch<T, 2>(q, k, v, o, lse, go, dl, gq, gk, gv, BH, Tn, D, scale, s);
    return bwd_launch<T, 4>(q, k, v, o, lse, go, dl, gq, gk, gv, BH, Tn, D, scale, s);
}

extern "C" cudaError_t weft_cu_causal_attention_backward(const void *q, const void *k, const void *v, const void *o,
                                                         const void *lse, const void *go, void *dl, void *gq,
                                                         void *gk, void *gv, int dtype, int64_t BH, int64_t T,
                                                         int64_t D, double scale, cudaStream_t s) {
    if (D < 0 || D > AT_MAX_D || BH < 0 || T < 0) return cudaErrorInvalidValue;
    if (BH == 0 || T == 0 || D == 0) return cudaSuccess; // every gradient is empty
    WEFT_CU_DISPATCH_FLOAT(dtype, bwd_dispatch, q, k, v, o, lse, go, dl, gq, gk, gv, BH, T, (int)D, scale, s)
}
