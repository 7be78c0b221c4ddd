// conv2d's data movement on CUDA (the products are cuBLAS calls in conv.c)
// and 2-D pooling, mirroring cpu/conv.c and cpu/pool.c.
//
// One thread per output element, grid-stride. The backward ops gather
// instead of scattering: each input-gradient element loops over the outputs
// that read it, in the order the CPU adds them, so col2im, max-pool and
// avg-pool backward need no atomics, are deterministic, and add in the same
// order as the CPU.
#include <cmath>
#include <type_traits>

#include "conv_kernels.h"
#include "cu_common.cuh"

// ---- conv2d ----
// conv2d's kernels also run in bf16 / f16 (the autocast path): im2col and
// the bias fill only move values, col2im adds in the column type (f32 for
// the half types) and rounds once on store, the bias gradient adds in double.
#define CONV_DISPATCH(dt, fn, ...)                                    \
    switch (dt) {                                                     \
    case WEFT_CU_F32: return fn<float>(__VA_ARGS__);                  \
    case WEFT_CU_F64: return fn<double>(__VA_ARGS__);                 \
    case WEFT_CU_F16: return fn<__half>(__VA_ARGS__);                 \
    case WEFT_CU_BF16: return fn<__nv_bfloat16>(__VA_ARGS__);         \
    default: return cudaErrorInvalidValue;                            \
    }

// A column value stored as the output type: exact for f32 -> f32 and
// f64 -> f64, round to nearest even for f32 -> f16 / bf16.
template <typename TO, typename TC> __device__ __forceinline__ TO conv_store(TC v) { return (TO)v; }
template <> __device__ __forceinline__ __half conv_store<__half, float>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 conv_store<__nv_bfloat16, float>(float v) {
    return __float2bfloat16_rn(v);
}

template <typename T>
__global__ void im2col_kernel(const T *x, int64_t xs0, int64_t xs1, int64_t xs2, int64_t xs3, weft_cu_conv_geom g,
                              int64_t nb, T *col, int64_t cs_img, int64_t cs_row) {
    const int64_t L = g.OH * g.OW, R = g.C * g.KH * g.KW;
    WEFT_CU_GRID_LOOP(i, nb * R * L) {
        int64_t l = i % L, r = (i / L) % R, n = i / (L * R);
        int64_t ow = l % g.OW, oh = l / g.OW;
        int64_t kw = r % g.KW, kh = (r / g.KW) % g.KH, c = r / (g.KW * g.KH);
        int64_t ih = oh * g.sh - g.ph + kh * g.dh, iw = ow * g.sw - g.pw + kw * g.dw;
        T v = weft_cu_from_f64<T>(0.0);
        if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) v = x[n * xs0 + c * xs1 + ih * xs2 + iw * xs3];
        col[n * cs_img + r * cs_row + l] = v;
    }
}

template <typename T>
static cudaError_t launch_im2col(const void *x, const int64_t *xs, weft_cu_conv_geom g, int64_t nb, void *col,
                                 int64_t cs_img, int64_t cs_row, cudaStream_t s) {
    int64_t n = nb * g.C * g.KH * g.KW * g.OH * g.OW;
    if (n == 0) return cudaSuccess;
    im2col_kernel<T><<<weft_cu_blocks(n), WEFT_CU_THREADS, 0, s>>>((const T *)x, xs[0], xs[1], xs[2], xs[3], g, nb,
                                                                   (T *)col, cs_img, cs_row);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_im2col(int dtype, const void *x, const int64_t *xs, weft_cu_conv_geom g, int64_t nb,
                                      void *col, int64_t cs_img, int64_t cs_row, cudaStream_t s) {
    CONV_DISPATCH(dtype, launch_im2col, x, xs, g, nb, col, cs_img, cs_row, s)
}

// dx(n,c,h,w) = sum over (kh, kw) of col(n, (c,kh,kw), (oh,ow)) where
// oh*sh - ph + kh*dh == h and ow*sw - pw + kw*dw == w; added in TC (the
// column type), stored as TX.
template <typename TC, typename TX>
__global__ void col2im_kernel(const TC *col, int64_t cs_img, int64_t cs_row, weft_cu_conv_geom g, int64_t nb, TX *dx) {
    WEFT_CU_GRID_LOOP(i, nb * g.C * g.H * g.W) {
        int64_t w = i % g.W, h = (i / g.W) % g.H, c = (i / (g.W * g.H)) % g.C, n = i / (g.W * g.H * g.C);
        TC acc = 0;
        for (int64_t kh = 0; kh < g.KH; kh++) {
            int64_t th = h + g.ph - kh * g.dh;
            if (th < 0 || th % g.sh) continue;
            int64_t oh = th / g.sh;
            if (oh >= g.OH) continue;
            for (int64_t kw = 0; kw < g.KW; kw++) {
                int64_t tw = w + g.pw - kw * g.dw;
                if (tw < 0 || tw % g.sw) continue;
                int64_t ow = tw / g.sw;
                if (ow >= g.OW) continue;
                acc += col[n * cs_img + ((c * g.KH + kh) * g.KW + kw) * cs_row + oh * g.OW + ow];
            }
        }
        dx[i] = conv_store<TX, TC>(acc);
    }
}

// TX: dx's type; the columns are TX for f32 / f64 and f32 for f16 / bf16.
template <typename TX>
static cudaError_t launch_col2im(const void *col, int64_t cs_img, int64_t cs_row, weft_cu_conv_geom g, int64_t nb,
                                 void *dx, cudaStream_t s) {
    typedef typename std::conditional<sizeof(TX) < 4, float, TX>::type TC;
    int64_t n = nb * g.C * g.H * g.W;
    if (n == 0) return cudaSuccess;
    col2im_kernel<TC, TX><<<weft_cu_blocks(n), WEFT_CU_THREADS, 0, s>>>((const TC *)col, cs_img, cs_row, g, nb,
                                                                        (TX *)dx);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_col2im(int dtype, const void *col, int64_t cs_img, int64_t cs_row, weft_cu_conv_geom g,
                                      int64_t nb, void *dx, cudaStream_t s) {
    CONV_DISPATCH(dtype, launch_col2im, col, cs_img, cs_row, g, nb, dx, s)
}

template <typename T>
__global__ void bias_fill_kernel(T *y, int64_t n, int64_t O, int64_t inner, const T *b, int64_t bs) {
    WEFT_CU_GRID_LOOP(i, n) { y[i] = b[((i / inner) % O) * bs]; }
}

template <typename T>
static cudaError_t launch_bias_fill(void *y, int64_t n, int64_t O, int64_t inner, const void *b, int64_t bs,
                                    cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    bias_fill_kernel<T><<<weft_cu_blocks(n), WEFT_CU_THREADS, 0, s>>>((T *)y, n, O, inner, (const T *)b, bs);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_conv_bias_fill(int dtype, void *y, int64_t n, int64_t O, int64_t inner, const void *b,
                                              int64_t bs, cudaStream_t s) {
    CONV_DISPATCH(dtype, launch_bias_fill, y, n, O, inner, b, bs, s)
}

// One block per channel o: its threads sum strided slices of the (N, OH*OW)
// values in double, then a tree in shared memory.
template <typename T>
__global__ void bias_grad_kernel(weft_cu_tensor gy, T *db) {
    __shared__ double part[WEFT_CU_THREADS];
    const T *p = (const T *)gy.data;
    int64_t o = blockIdx.x, OW = gy.sizes[3], L = gy.sizes[2] * OW, n_all = gy.sizes[0] * L;
    double s = 0;
    for (int64_t j = threadIdx.x; j < n_all; j += blockDim.x) {
        int64_t n = j / L, l = j % L;
        s += weft_cu_to_f64(p[n * gy.strides[0] + o * gy.strides[1] + (l / OW) * gy.strides[2] + (l % OW) * gy.strides[3]]);
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = WEFT_CU_THREADS / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) db[o] = weft_cu_from_f64<T>(part[0]);
}

template <typename T>
static cudaError_t launch_bias_grad(weft_cu_tensor gy, void *db, cudaStream_t s) {
    int64_t O = gy.sizes[1];
    if (O == 0) return cudaSuccess;
    if (O > 0x7fffffff) return cudaErrorInvalidValue;
    bias_grad_kernel<T><<<(unsigned)O, WEFT_CU_THREADS, 0, s>>>(gy, (T *)db);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_conv_bias_grad(weft_cu_tensor gy, void *db, cudaStream_t s) {
    CONV_DISPATCH(gy.dtype, launch_bias_grad, gy, db, s)
}

// ---- pooling ----
struct pool_win {
    int64_t h0, h1, w0, w1;
    double div;
};

// The window of output (oh,ow) clipped to the input, and the average's
// divisor (cpu/pool.c's window()).
__device__ __forceinline__ pool_win pool_window(const weft_cu_pool_geom &g, int64_t oh, int64_t ow) {
    int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
    int64_t he = hs + g.kh, we = ws + g.kw;
    int64_t pad_area = ((he < g.H + g.ph ? he : g.H + g.ph) - hs) * ((we < g.W + g.pw ? we : g.W + g.pw) - ws);
    pool_win r;
    r.h0 = hs < 0 ? 0 : hs, r.w0 = ws < 0 ? 0 : ws;
    r.h1 = he > g.H ? g.H : he, r.w1 = we > g.W ? g.W : we;
    r.div = g.include_pad ? (double)pad_area : (double)((r.h1 - r.h0) * (r.w1 - r.w0));
    return r;
}

// Outputs whose windows contain input row h: [*lo, *hi] (empty when lo > hi).
__device__ __forceinline__ void covering(int64_t h, int64_t k, int64_t s, int64_t p, int64_t n_out, int64_t *lo,
                                         int64_t *hi) {
    int64_t a = h + p - k + 1; // oh*s - p + k > h  <=>  oh*s >= a
    *lo = a <= 0 ? 0 : (a + s - 1) / s;
    int64_t b = (h + p) / s; // oh*s - p <= h
    *hi = b < n_out - 1 ? b : n_out - 1;
}

// The window's maximum at (bh, bw): the first maximum in row-major order; a
// NaN wins (the first one), as cpu/pool.c's ARGMAX_WINDOW.
template <typename T>
__device__ __forceinline__ void argmax_window(const T *xp, int64_t s2, int64_t s3, const pool_win &w, int64_t *bh,
                                              int64_t *bw) {
    T m = -(T)INFINITY;
    *bh = w.h0, *bw = w.w0;
    for (int64_t h = w.h0; h < w.h1; h++)
        for (int64_t x = w.w0; x < w.w1; x++) {
            T v = xp[h * s2 + x * s3];
            if (v > m || v != v) {
                m = v;
                *bh = h, *bw = x;
                if (v != v) return;
            }
        }
}

// y and ix (N,C,OH,OW) contiguous: each window's maximum and its flat index
// bh*W + bw in the (n,c) plane (I: int32_t or int64_t, the op's choice).
template <typename T, typename I>
__global__ void max_pool_kernel(weft_cu_tensor x, weft_cu_pool_geom g, T *y, I *ix) {
    WEFT_CU_GRID_LOOP(i, g.N * g.C * g.OH * g.OW) {
        int64_t ow = i % g.OW, oh = (i / g.OW) % g.OH, c = (i / (g.OW * g.OH)) % g.C, n = i / (g.OW * g.OH * g.C);
        const T *xp = (const T *)x.data + n * x.strides[0] + c * x.strides[1];
        int64_t bh, bw;
        argmax_window(xp, x.strides[2], x.strides[3], pool_window(g, oh, ow), &bh, &bw);
        y[i] = xp[bh * x.strides[2] + bw * x.strides[3]];
        ix[i] = (I)(bh * g.W + bw);
    }
}

// dx(n,c,h,w) = sum of gy over the windows containing (h,w) whose recorded
// index (ix, any strides) is h*W + w, in (oh,ow) order: the CPU's scatter,
// gathered. An index that no covering window recorded is never read.
template <typename T, typename I>
__global__ void max_pool_bw_kernel(weft_cu_tensor gy, weft_cu_tensor ix, weft_cu_pool_geom g, T *dx) {
    WEFT_CU_GRID_LOOP(i, g.N * g.C * g.H * g.W) {
        int64_t w = i % g.W, h = (i / g.W) % g.H, c = (i / (g.W * g.H)) % g.C, n = i / (g.W * g.H * g.C);
        const T *gp = (const T *)gy.data + n * gy.strides[0] + c * gy.strides[1];
        const I *ip = (const I *)ix.data + n * ix.strides[0] + c * ix.strides[1];
        int64_t oh0, oh1, ow0, ow1, self = h * g.W + w;
        covering(h, g.kh, g.sh, g.ph, g.OH, &oh0, &oh1);
        covering(w, g.kw, g.sw, g.pw, g.OW, &ow0, &ow1);
        T acc = 0;
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++)
                if ((int64_t)ip[oh * ix.strides[2] + ow * ix.strides[3]] == self)
                    acc += gp[oh * gy.strides[2] + ow * gy.strides[3]];
        dx[i] = acc;
    }
}

// y = (sum over the clipped window in double, row-major) / divisor
template <typename T>
__global__ void avg_pool_kernel(weft_cu_tensor x, weft_cu_pool_geom g, T *y) {
    WEFT_CU_GRID_LOOP(i, g.N * g.C * g.OH * g.OW) {
        int64_t ow = i % g.OW, oh = (i / g.OW) % g.OH, c = (i / (g.OW * g.OH)) % g.C, n = i / (g.OW * g.OH * g.C);
        const T *xp = (const T *)x.data + n * x.strides[0] + c * x.strides[1];
        pool_win wn = pool_window(g, oh, ow);
        double s = 0;
        for (int64_t h = wn.h0; h < wn.h1; h++)
            for (int64_t w = wn.w0; w < wn.w1; w++) s += xp[h * x.strides[2] + w * x.strides[3]];
        y[i] = (T)(s / wn.div);
    }
}

// dx(n,c,h,w) = sum over the windows containing (h,w), in (oh,ow) order, of (T)(gy / divisor)
template <typename T>
__global__ void avg_pool_bw_kernel(weft_cu_tensor gy, weft_cu_pool_geom g, T *dx) {
    WEFT_CU_GRID_LOOP(i, g.N * g.C * g.H * g.W) {
        int64_t w = i % g.W, h = (i / g.W) % g.H, c = (i / (g.W * g.H)) % g.C, n = i / (g.W * g.H * g.C);
        const T *gp = (const T *)gy.data + n * gy.strides[0] + c * gy.strides[1];
        int64_t oh0, oh1, ow0, ow1;
        covering(h, g.kh, g.sh, g.ph, g.OH, &oh0, &oh1);
        covering(w, g.kw, g.sw, g.pw, g.OW, &ow0, &ow1);
        T acc = 0;
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++)
                acc += (T)(gp[oh * gy.strides[2] + ow * gy.strides[3]] / pool_window(g, oh, ow).div);
        dx[i] = acc;
    }
}

template <typename T>
static cudaError_t launch_max_pool(weft_cu_tensor x, weft_cu_pool_geom g, void *y, int ix_dtype, void *ix,
                                   cudaStream_t s) {
    unsigned nb = weft_cu_blocks(g.N * g.C * g.OH * g.OW);
    if (ix_dtype == WEFT_CU_I32)
        max_pool_kernel<T, int32_t><<<nb, WEFT_CU_THREADS, 0, s>>>(x, g, (T *)y, (int32_t *)ix);
    else if (ix_dtype == WEFT_CU_I64)
        max_pool_kernel<T, int64_t><<<nb, WEFT_CU_THREADS, 0, s>>>(x, g, (T *)y, (int64_t *)ix);
    else return cudaErrorInvalidValue;
    return cudaGetLastError();
}
template <typename T>
static cudaError_t launch_max_pool_bw(weft_cu_tensor gy, weft_cu_tensor ix, weft_cu_pool_geom g, void *dx,
                                      cudaStream_t s) {
    unsigned nb = weft_cu_blocks(g.N * g.C * g.H * g.W);
    if (ix.dtype == WEFT_CU_I32) max_pool_bw_kernel<T, int32_t><<<nb, WEFT_CU_THREADS, 0, s>>>(gy, ix, g, (T *)dx);
    else if (ix.dtype == WEFT_CU_I64) max_pool_bw_kernel<T, int64_t><<<nb, WEFT_CU_THREADS, 0, s>>>(gy, ix, g, (T *)dx);
    else return cudaErrorInvalidValue;
    return cudaGetLastError();
}
template <typename T>
static cudaError_t launch_avg_pool(weft_cu_tensor x, weft_cu_pool_geom g, void *y, cudaStream_t s) {
    avg_pool_kernel<T><<<weft_cu_blocks(g.N * g.C * g.OH * g.OW), WEFT_CU_THREADS, 0, s>>>(x, g, (T *)y);
    return cudaGetLastError();
}
template <typename T>
static cudaError_t launch_avg_pool_bw(weft_cu_tensor gy, weft_cu_pool_geom g, void *dx, cudaStream_t s) {
    avg_pool_bw_kernel<T><<<weft_cu_blocks(g.N * g.C * g.H * g.W), WEFT_CU_THREADS, 0, s>>>(gy, g, (T *)dx);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_max_pool(weft_cu_tensor x, weft_cu_pool_geom g, void *y, int ix_dtype, void *ix,
                                        cudaStream_t s) {
    if (g.N * g.C * g.OH * g.OW == 0) return cudaSuccess;
    WEFT_CU_DISPATCH_FLOAT(x.dtype, launch_max_pool, x, g, y, ix_dtype, ix, s)
}
extern "C" cudaError_t weft_cu_max_pool_bw(weft_cu_tensor gy, weft_cu_tensor ix, weft_cu_pool_geom g, void *dx,
                                           cudaStream_t s) {
    if (g.N * g.C * g.H * g.W == 0) return cudaSuccess;
    WEFT_CU_DISPATCH_FLOAT(gy.dtype, launch_max_pool_bw, gy, ix, g, dx, s)
}
extern "C" cudaError_t weft_cu_avg_pool(weft_cu_tensor x, weft_cu_pool_geom g, void *y, cudaStream_t s) {
    if (g.N * g.C * g.OH * g.OW == 0) return cudaSuccess;
    WEFT_CU_DISPATCH_FLOAT(x.dtype, launch_avg_pool, x, g, y, s)
}
extern "C" cudaError_t weft_cu_avg_pool_bw(weft_cu_tensor gy, weft_cu_pool_geom g, void *dx, cudaStream_t s) {
    if (g.N * g.C * g.H * g.W == 0) return cudaSuccess;
    WEFT_CU_DISPATCH_FLOAT(gy.dtype, launch_avg_pool_bw, gy, g, dx, s)
}
