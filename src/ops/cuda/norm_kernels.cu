// layer_norm and batch_norm with their fused backward ops, mirroring
// cpu/norm.c: layer_norm sums in T (as the CPU's row functions), batch_norm
// accumulates each channel in double; the formulas are the CPU's term for term.
//
// layer_norm: a warp per row up to 1024 columns, a block per row above; its
// dweight/dbias are column sums over the rows, done in two deterministic
// steps (partial sums over chunks of rows by (32 x 8) tiles, then one thread
// per column over the chunks). batch_norm: a block per channel.
#include <math.h>
#include <stdint.h>

#include "cu_common.cuh"
#include "norm_kernels.h"
#include "reduce_kernels.h"

#define NORM_THREADS 256

// ---------------------------------------------------------------- layer_norm
// x of storage type XT: T, or bf16 / f16 with T float (layer_norm's half input: read as it is, the statistics
// and y in f32). RES (add_layer_norm, XT = T): the row is x + res (res of type RT: T, or bf16 / f16 with T
// float, read as it is), written to sum and normalised from there: each thread reads back only what it wrote.
// y of storage type YT: T, or bf16 / f16 with T float (rounded once, for a consumer reading that dtype).
template <typename T, typename XT, typename RT, bool RES, typename YT, typename G>
__global__ void __launch_bounds__(NORM_THREADS) ln_fwd(const XT *x, const RT *res, T *sum, const T *w, const T *b,
                                                       YT *y, T *mean, T *rstd, int64_t R, int64_t C, T eps) {
    __shared__ T sh[32];
    G g;
    const int r0 = g.rank(), rs = g.size();
    for (int64_t r = g.first(); r < R; r += g.stride()) {
        const XT *xr = x + r * C; // (C)
        YT *yr = y + r * C;
        T *sr = RES ? sum + r * C : NULL;
        auto at = [&](int64_t i) -> T { // element i of the row to normalise
            if constexpr (RES) return sr[i];
            else return weft_cu_ld<T>(xr[i]);
        };
        T s = 0, v = 0;
        if constexpr (RES) {
            const RT *rr = res + r * C;
            for (int64_t i = r0; i < C; i += rs) {
                const T e = weft_cu_ld<T>(xr[i]) + (T)weft_cu_to_f64(rr[i]);
                sr[i] = e;
                s += e;
            }
        } else {
            for (int64_t i = r0; i < C; i += rs) s += at(i);
        }
        s = g.all(s, weft_cu_add(), sh);
        const T mu = s / (T)C;
        for (int64_t i = r0; i < C; i += rs) v += (at(i) - mu) * (at(i) - mu);
        v = g.all(v, weft_cu_add(), sh);
        const T rsd = (T)1 / weft_cu_sqrt(v / (T)C + eps);
        if (r0 == 0) {
            mean[r] = mu;
            rstd[r] = rsd;
        }
        for (int64_t i = r0; i < C; i += rs) {
            T n = (at(i) - mu) * rsd;
            if (w) n = n * w[i];
            yr[i] = weft_cu_st<YT>(b ? n + b[i] : n);
        }
    }
}

// a + b rounded once, never contracted with the product before it into an FMA: the bits of an add kernel's
template <typename T> __device__ __forceinline__ T add_rn(T a, T b);
template <> __device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
template <> __device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

// dx per row (llm.c's layernorm_backward): n = (x - mean) rstd, dn = gy w,
// dx = rstd (dn - mean(dn) - n mean(dn n)).
// x and dx of storage type XT (T, or bf16 / f16 with T float: dx rounded once); gy of GT (T, or bf16 / f16
// with T float: a half y's gradient, read as it is). gs (XT = T) or NULL: added to dx, as an add after the op;
// dxh or NULL: dx also in HT (bf16 / f16 with T float), rounded once, as a cast after the op.
template <typename T, typename XT, typename GT, typename HT, typename G>
__global__ void __launch_bounds__(NORM_THREADS) ln_bwd_dx(const GT *gy, const XT *x, const T *mean, const T *rstd,
                                                          const T *w, const T *gs, XT *dx, HT *dxh, int64_t R,
                                                          int64_t C) {
    __shared__ T sh[32];
    G g;
    const int r0 = g.rank(), rs = g.size();
    for (int64_t r = g.first(); r < R; r += g.stride()) {
        const GT *gr = gy + r * C;
        const XT *xr = x + r * C;
        XT *dr = dx + r * C;
        const T mu = mean[r], rsd = rstd[r];
        T sdn = 0, sdnn = 0;
        for (int64_t i = r0; i < C; i += rs) {
            const T gi = weft_cu_ld<T>(gr[i]);
            T dn = w ? gi * w[i] : gi;
            sdn += dn;
            sdnn += dn * (weft_cu_ld<T>(xr[i]) - mu);
        }
        sdn = g.all(sdn, weft_cu_add(), sh);
        sdnn = g.all(sdnn, weft_cu_add(), sh);
        const T mdn = sdn / (T)C, mdnn = sdnn * rsd / (T)C;
        for (int64_t i = r0; i < C; i += rs) {
            const T gi = weft_cu_ld<T>(gr[i]);
            T n = (weft_cu_ld<T>(xr[i]) - mu) * rsd, dn = w ? gi * w[i] : gi;
            T d = (dn - mdn - n * mdnn) * rsd;
            if (gs) d = add_rn(d, gs[r * C + i]);
            dr[i] = weft_cu_st<XT>(d);
            if (dxh) dxh[r * C + i] = weft_cu_st<HT>(d);
        }
    }
}

// Partial column sums over one chunk of rows: part (nchunk, 2, C) gets
// sum gy n and sum gy. Block (32, 8): 32 columns, 8 rows at a time.
template <typename T, typename XT, typename GT>
__global__ void __launch_bounds__(NORM_THREADS) ln_bwd_wb_part(const GT *gy, const XT *x, const T *mean,
                                                               const T *rstd, T *part, int64_t R, int64_t C,
                                                               int64_t rows_per_chunk) {
    __shared__ T sw[8][33], sb[8][33];
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
    const int64_t col = (int64_t)blockIdx.x * 32 + tx, rb = (int64_t)blockIdx.y * rows_per_chunk;
    const int64_t re = rb + rows_per_chunk < R ? rb + rows_per_chunk : R;
    T aw = 0, ab = 0;
    if (col < C)
        for (int64_t r = rb + ty; r < re; r += 8) {
            const T g = weft_cu_ld<T>(gy[r * C + col]), n = (weft_cu_ld<T>(x[r * C + col]) - mean[r]) * rstd[r];
            aw += g * n;
            ab += g;
        }
    sw[ty][tx] = aw;
    sb[ty][tx] = ab;
    __syncthreads();
    if (ty == 0 && col < C) {
        T tw = 0, tb = 0;
        for (int k = 0; k < 8; k++) {
            tw += sw[k][tx];
            tb += sb[k][tx];
        }
        part[(2 * (int64_t)blockIdx.y) * C + col] = tw;
        part[(2 * (int64_t)blockIdx.y + 1) * C + col] = tb;
    }
}

// dw, db (C) = the partials summed over the chunks, chunk order.
template <typename T> __global__ void ln_bwd_wb_sum(const T *part, T *dw, T *db, int64_t nchunk, int64_t C) {
    WEFT_CU_GRID_LOOP(col, C) {
        T tw = 0, tb = 0;
        for (int64_t k = 0; k < nchunk; k++) {
            tw += part[(2 * k) * C + col];
            tb += part[(2 * k + 1) * C + col];
        }
        dw[col] = tw;
        db[col] = tb;
    }
}

// Chunks of rows for the dweight/dbias partials: about 256 rows each, at most 512. (64 a chunk left the second
// pass, a thread per column adding 128 partials at R = 8192, latency-bound: 31 us a call on an H100, 2026-11-27.)
static void ln_chunks(int64_t R, int64_t *nchunk, int64_t *rows_per_chunk) {
    int64_t n = (R + 255) / 256;
    if (n < 1) n = 1;
    if (n > 512) n = 512;
    int64_t rpc = (R + n - 1) / n;
    if (rpc < 1) rpc = 1;
    *rows_per_chunk = rpc;
    *nchunk = (R + rpc - 1) / rpc < 1 ? 1 : (R + rpc - 1) / rpc;
}

extern "C" int64_t weft_cu_layer_norm_part_elems(int64_t R, int64_t C) {
    int64_t n, rpc;
    ln_chunks(R, &n, &rpc);
    return 2 * n * C;
}

template <typename T, typename XT, typename RT, bool RES, typename YT>
static cudaError_t launch_ln_y(const void *x, const void *res, void *sum, const void *w, const void *b, void *y,
                               void *mean, void *rstd, int64_t R, int64_t C, double eps, cudaStream_t s) {
    if (C <= 1024)
        ln_fwd<T, XT, RT, RES, YT, weft_cu_warp_group>
            <<<weft_cu_row_blocks<weft_cu_warp_group>(R, NORM_THREADS), NORM_THREADS, 0, s>>>(
                (const XT *)x, (const RT *)res, (T *)sum, (const T *)w, (const T *)b, (YT *)y, (T *)mean, (T *)rstd,
                R, C, (T)eps);
    else
        ln_fwd<T, XT, RT, RES, YT, weft_cu_block_group>
            <<<weft_cu_row_blocks<weft_cu_block_group>(R, NORM_THREADS), NORM_THREADS, 0, s>>>(
                (const XT *)x, (const RT *)res, (T *)sum, (const T *)w, (const T *)b, (YT *)y, (T *)mean, (T *)rstd,
                R, C, (T)eps);
    return cudaGetLastError();
}

// y in T, or (T float) in the half dtype y_dtype names.
template <typename T, typename XT, typename RT, bool RES>
static cudaError_t launch_ln_res(const void *x, const void *res, void *sum, const void *w, const void *b, void *y,
                                 void *mean, void *rstd, int64_t R, int64_t C, double eps, int y_dtype,
                                 cudaStream_t s) {
    if constexpr (sizeof(T) == 4) {
        if (y_dtype == WEFT_CU_BF16)
            return launch_ln_y<T, XT, RT, RES, __nv_bfloat16>(x, res, sum, w, b, y, mean, rstd, R, C, eps, s);
        if (y_dtype == WEFT_CU_F16)
            return launch_ln_y<T, XT, RT, RES, __half>(x, res, sum, w, b, y, mean, rstd, R, C, eps, s);
    }
    return launch_ln_y<T, XT, RT, RES, T>(x, res, sum, w, b, y, mean, rstd, R, C, eps, s);
}

// layer_norm for x of storage type XT (see ln_fwd), statistics in T, y in T or y_dtype.
template <typename T, typename XT>
static cudaError_t launch_ln(const void *x, const void *w, const void *b, void *y, void *mean, void *rstd, int64_t R,
                             int64_t C, double eps, int y_dtype, cudaStream_t s) {
    return launch_ln_res<T, XT, XT, false>(x, NULL, NULL, w, b, y, mean, rstd, R, C, eps, y_dtype, s);
}

// A half y needs f32 statistics.
static bool y_dtype_ok(int dtype, int y_dtype) {
    bool stats32 = dtype == WEFT_CU_F32 || dtype == WEFT_CU_BF16 || dtype == WEFT_CU_F16;
    return y_dtype == -1 || ((y_dtype == WEFT_CU_BF16 || y_dtype == WEFT_CU_F16) && stats32);
}

extern "C" cudaError_t weft_cu_layer_norm(const void *x, const void *w, const void *b, void *y, void *mean,
                                          void *rstd, int dtype, int y_dtype, int64_t R, int64_t C, double eps,
                                          cudaStream_t s) {
    if (!y_dtype_ok(dtype, y_dtype)) return cudaErrorInvalidValue;
    if (R == 0) return cudaSuccess;
    WEFT_CU_DISPATCH_FLOAT_HALF(dtype, launch_ln, x, w, b, y, mean, rstd, R, C, eps, y_dtype, s);
}

extern "C" cudaError_t weft_cu_add_layer_norm(const void *x, const void *res, int res_dtype, void *sum, const void *w,
                                              const void *b, void *y, void *mean, void *rstd, int dtype, int y_dtype,
                                              int64_t R, int64_t C, double eps, cudaStream_t s) {
    if (!y_dtype_ok(dtype, y_dtype)) return cudaErrorInvalidValue;
    if (R == 0) return cudaSuccess;
    const int yd = y_dtype;
    if (dtype == WEFT_CU_F32 && res_dtype == WEFT_CU_BF16)
        return launch_ln_res<float, float, __nv_bfloat16, true>(x, res, sum, w, b, y, mean, rstd, R, C, eps, yd, s);
    if (dtype == WEFT_CU_F32 && res_dtype == WEFT_CU_F16)
        return launch_ln_res<float, float, __half, true>(x, res, sum, w, b, y, mean, rstd, R, C, eps, yd, s);
    if (dtype == WEFT_CU_F32 && res_dtype == WEFT_CU_F32)
        return launch_ln_res<float, float, float, true>(x, res, sum, w, b, y, mean, rstd, R, C, eps, yd, s);
    if (dtype == WEFT_CU_F64 && res_dtype == WEFT_CU_F64)
        return launch_ln_res<double, double, double, true>(x, res, sum, w, b, y, mean, rstd, R, C, eps, yd, s);
    return cudaErrorInvalidValue;
}

template <typename T, typename XT, typename GT, typename HT>
static void launch_ln_bw_dx(const GT *g, const XT *xt, const T *mu, const T *rs, const T *w, const T *gs, XT *dx,
                            void *dxh, int64_t R, int64_t C, cudaStream_t s) {
    if (C <= 1024)
        ln_bwd_dx<T, XT, GT, HT, weft_cu_warp_group><<<weft_cu_row_blocks<weft_cu_warp_group>(R, NORM_THREADS),
                                                       NORM_THREADS, 0, s>>>(g, xt, mu, rs, w, gs, dx, (HT *)dxh, R, C);
    else
        ln_bwd_dx<T, XT, GT, HT, weft_cu_block_group><<<weft_cu_row_blocks<weft_cu_block_group>(R, NORM_THREADS),
                                                        NORM_THREADS, 0, s>>>(g, xt, mu, rs, w, gs, dx, (HT *)dxh, R, C);
}

template <typename T, typename XT, typename GT>
static cudaError_t launch_ln_bw_g(const void *gy, const void *x, const void *mean, const void *rstd, const void *w,
                                  const void *gs, void *dx, void *dxh, int dxh_dtype, void *dw, void *db, void *part,
                                  int64_t R, int64_t C, cudaStream_t s) {
    const GT *g = (const GT *)gy;
    const T *mu = (const T *)mean, *rs = (const T *)rstd, *gt = (const T *)gs;
    const XT *xt = (const XT *)x;
    if (R > 0 && C > 0) {
        bool done = false;
        if constexpr (sizeof(T) == 4 && sizeof(XT) == 4) { // f32 x: the only one with a half dxh
            if ((done = dxh && dxh_dtype == WEFT_CU_BF16))
                launch_ln_bw_dx<T, XT, GT, __nv_bfloat16>(g, xt, mu, rs, (const T *)w, gt, (XT *)dx, dxh, R, C, s);
            else if ((done = dxh && dxh_dtype == WEFT_CU_F16))
                launch_ln_bw_dx<T, XT, GT, __half>(g, xt, mu, rs, (const T *)w, gt, (XT *)dx, dxh, R, C, s);
        }
        if (!done) launch_ln_bw_dx<T, XT, GT, XT>(g, xt, mu, rs, (const T *)w, gt, (XT *)dx, NULL, R, C, s);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    if (!dw || C == 0) return cudaSuccess;
    if (R == 0) { // no rows: the sums are empty
        cudaError_t e = cudaMemsetAsync(dw, 0, sizeof(T) * (size_t)C, s);
        return e != cudaSuccess ? e : cudaMemsetAsync(db, 0, sizeof(T) * (size_t)C, s);
    }
    int64_t nchunk, rpc;
    ln_chunks(R, &nchunk, &rpc);
    dim3 grid((unsigned)((C + 31) / 32), (unsigned)nchunk), block(32, 8);
    ln_bwd_wb_part<T, XT, GT><<<grid, block, 0, s>>>(g, xt, mu, rs, (T *)part, R, C, rpc);
    ln_bwd_wb_sum<T><<<weft_cu_blocks(C), WEFT_CU_THREADS, 0, s>>>((const T *)part, (T *)dw, (T *)db, nchunk, C);
    return cudaGetLastError();
}

// gy in T, or (T float) in the half dtype gy_dtype names.
template <typename T, typename XT>
static cudaError_t launch_ln_bw(const void *gy, const void *x, const void *mean, const void *rstd, const void *w,
                                const void *gs, void *dx, void *dxh, int dxh_dtype, void *dw, void *db, void *part,
                                int64_t R, int64_t C, int gy_dtype, cudaStream_t s) {
    if constexpr (sizeof(T) == 4) {
        if (gy_dtype == WEFT_CU_BF16)
            return launch_ln_bw_g<T, XT, __nv_bfloat16>(gy, x, mean, rstd, w, gs, dx, dxh, dxh_dtype, dw, db, part, R,
                                                        C, s);
        if (gy_dtype == WEFT_CU_F16)
            return launch_ln_bw_g<T, XT, __half>(gy, x, mean, rstd, w, gs, dx, dxh, dxh_dtype, dw, db, part, R, C, s);
    }
    return launch_ln_bw_g<T, XT, T>(gy, x, mean, rstd, w, gs, dx, dxh, dxh_dtype, dw, db, part, R, C, s);
}

extern "C" cudaError_t weft_cu_layer_norm_backward(const void *gy, int gy_dtype, const void *x, const void *mean,
                                                   const void *rstd, const void *w, const void *gs, void *dx,
                                                   void *dxh, int dxh_dtype, void *dw, void *db, void *part,
                                                   int dtype, int64_t R, int64_t C, cudaStream_t s) {
    if ((dw == NULL) != (db == NULL) || (dw && C > 0 && R > 0 && !part)) return cudaErrorInvalidValue;
    if (!y_dtype_ok(dtype, gy_dtype)) return cudaErrorInvalidValue;
    const bool half_x = dtype == WEFT_CU_BF16 || dtype == WEFT_CU_F16;
    if ((gs && half_x) || (dxh && (dtype != WEFT_CU_F32 || (dxh_dtype != WEFT_CU_BF16 && dxh_dtype != WEFT_CU_F16))))
        return cudaErrorInvalidValue;
    WEFT_CU_DISPATCH_FLOAT_HALF(dtype, launch_ln_bw, gy, x, mean, rstd, w, gs, dx, dxh, dxh_dtype, dw, db, part, R, C,
                                gy_dtype, s);
}

// ---------------------------------------------------------------- batch_norm
// Element j of channel c in (N,C,S): n = j / S, i = j % S.
__device__ __forceinline__ int64_t bn_off(int64_t j, int64_t c, int64_t C, int64_t S) {
    const int64_t n = j / S;
    return (n * C + c) * S + (j - n * S);
}
template <typename T> __device__ __forceinline__ double vec_at(const weft_cu_vec &v, int64_t c) {
    return (double)((const T *)v.data)[c * v.stride];
}

template <typename T>
__global__ void __launch_bounds__(NORM_THREADS)
    bn_fwd(const T *x, T *y, weft_cu_vec w, weft_cu_vec b, weft_cu_vec rm, weft_cu_vec rv, T *mean, T *invstd,
           int64_t N, int64_t C, int64_t S, int training, double momentum, double eps) {
    __shared__ double sh[32];
    const int64_t M = N * S;
    for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
        double mu, var;
        if (training) {
            double s = 0, ss = 0;
            for (int64_t j = threadIdx.x; j < M; j += blockDim.x) s += (double)x[bn_off(j, c, C, S)];
            s = weft_cu_block_all(s, weft_cu_add(), sh);
            mu = M > 0 ? s / (double)M : 0;
            const T m = (T)mu;
            for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
                const T d = x[bn_off(j, c, C, S)] - m;
                ss += (double)(d * d);
            }
            ss = weft_cu_block_all(ss, weft_cu_add(), sh);
            var = M > 0 ? ss / (double)M : 0; // biased: normalises this batch
            if (threadIdx.x == 0) { // PyTorch's rule; the running variance is the unbiased estimate
                if (rm.data) {
                    T *p = (T *)rm.data + c * rm.stride;
                    *p = (T)((1 - momentum) * (double)*p + momentum * mu);
                }
                if (rv.data && M > 1) {
                    T *p = (T *)rv.data + c * rv.stride;
                    *p = (T)((1 - momentum) * (double)*p + momentum * ss / (double)(M - 1));
                }
            }
        } else {
            mu = vec_at<T>(rm, c);
            var = vec_at<T>(rv, c);
        }
        const double is = 1.0 / sqrt(var + eps);
        const double scale = is * (w.data ? vec_at<T>(w, c) : 1.0);
        const double shift = (b.data ? vec_at<T>(b, c) : 0.0) - mu * scale;
        if (threadIdx.x == 0) {
            mean[c] = (T)mu;
            invstd[c] = (T)is;
        }
        const T sc = (T)scale, sf = (T)shift;
        for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
            const int64_t k = bn_off(j, c, C, S);
            y[k] = x[k] * sc + sf;
        }
    }
}

template <typename T>
static cudaError_t launch_bn(const void *x, void *y, weft_cu_vec w, weft_cu_vec b, weft_cu_vec rm, weft_cu_vec rv,
                             void *mean, void *invstd, int64_t N, int64_t C, int64_t S, int training, double momentum,
                             double eps, cudaStream_t s) {
    unsigned nb = (unsigned)(C < 65535 * 8 ? C : 65535 * 8);
    bn_fwd<T><<<nb, NORM_THREADS, 0, s>>>((const T *)x, (T *)y, w, b, rm, rv, (T *)mean, (T *)invstd, N, C, S,
                                          training, momentum, eps);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_batch_norm(const void *x, void *y, weft_cu_vec w, weft_cu_vec b, weft_cu_vec rm,
                                          weft_cu_vec rv, void *mean, void *invstd, int dtype, int64_t N, int64_t C,
                                          int64_t S, int training, double momentum, double eps, cudaStream_t s) {
    if (C == 0) return cudaSuccess;
    if (!training && (!rm.data || !rv.data)) return cudaErrorInvalidValue;
    WEFT_CU_DISPATCH_FLOAT(dtype, launch_bn, x, y, w, b, rm, rv, mean, invstd, N, C, S, training, momentum, eps, s);
}

// training: dx = w is (gy - mean(gy) - xhat mean(gy xhat)), xhat = (x - mu) is;
// eval: dx = w is gy. As dx = k1 gy + k2 (x - mu) + k0; dw = sum gy xhat, db = sum gy.
template <typename T>
__global__ void __launch_bounds__(NORM_THREADS)
    bn_bwd(const T *gy, const T *x, const T *mean, const T *invstd, weft_cu_vec w, T *dx, T *dw, T *db, int64_t N,
           int64_t C, int64_t S, int training, int want_wb) {
    __shared__ double sh[32];
    const int64_t M = N * S;
    for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
        const double mu = (double)mean[c], is = (double)invstd[c], wc = w.data ? vec_at<T>(w, c) : 1.0;
        const T m = (T)mu;
        double sg = 0, sgx = 0;
        if (training || want_wb) {
            for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
                const int64_t k = bn_off(j, c, C, S);
                const T g = gy[k];
                sg += (double)g;
                sgx += (double)(g * (x[k] - m));
            }
            sg = weft_cu_block_all(sg, weft_cu_add(), sh);
            sgx = weft_cu_block_all(sgx, weft_cu_add(), sh);
        }
        if (threadIdx.x == 0) {
            dw[c] = want_wb ? (T)(sgx * is) : (T)0;
            db[c] = want_wb ? (T)sg : (T)0;
        }
        double k1 = wc * is, k2 = 0, k0 = 0;
        if (training && M > 0) {
            k2 = -wc * is * is * is * sgx / (double)M;
            k0 = -wc * is * sg / (double)M;
        }
        const T a1 = (T)k1, a2 = (T)k2, a0 = (T)k0;
        for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
            const int64_t k = bn_off(j, c, C, S);
            dx[k] = a1 * gy[k] + a2 * (x[k] - m) + a0;
        }
    }
}

template <typename T>
static cudaError_t launch_bn_bw(const void *gy, const void *x, const void *mean, const void *invstd, weft_cu_vec w,
                                void *dx, void *dw, void *db, int64_t N, int64_t C, int64_t S, int training,
                                int want_wb, cudaStream_t s) {
    unsigned nb = (unsigned)(C < 65535 * 8 ? C : 65535 * 8);
    bn_bwd<T><<<nb, NORM_THREADS, 0, s>>>((const T *)gy, (const T *)x, (const T *)mean, (const T *)invstd, w, (T *)dx,
                                          (T *)dw, (T *)db, N, C, S, training, want_wb);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_batch_norm_backward(const void *gy, const void *x, const void *mean, const void *invstd,
                                                   weft_cu_vec w, void *dx, void *dw, void *db, int dtype, int64_t N,
                                                   int64_t C, int64_t S, int training, int want_wb, cudaStream_t s) {
    if (C == 0) return cudaSuccess;
    WEFT_CU_DISPATCH_FLOAT(dtype, launch_bn_bw, gy, x, mean, invstd, w, dx, dw, db, N, C, S, training, want_wb, s);
}
