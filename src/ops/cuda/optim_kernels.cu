// The optimiser ops on CUDA (src/ops/def_optim.c): one fused pass over a
// parameter, its state and its gradient per update, with the arithmetic of
// src/ops/cpu/optim_loops.h operation by operation (hyper-parameters
// computed in double and rounded to T once, the per-element math in T), so
// CUDA and CPU steps agree to rounding. Both compilers may contract a*b + c
// into an FMA, so the last bit can differ. sqrt and / are IEEE (no fast math).
// And clipping's sum of squares (a deterministic two-pass reduction in f64)
// and scaling.
//
// Element i of every input is read before element i of the outputs is
// written and nothing else is, so an output may be its input's own storage.
#include "cu_common.cuh"
#include "optim_kernels.h"

__device__ __forceinline__ double scalar_value(weft_cu_scalar s) {
    return s.dtype == WEFT_CU_F64 ? *(const double *)s.p : (double)*(const float *)s.p;
}

// A contiguous descriptor becomes 1-D, so the kernels' offsets are plain i.
static weft_cu_tensor flat(weft_cu_tensor t) {
    if (t.data && weft_cu_contiguous(t)) {
        t.ndim = 1;
        t.sizes[0] = t.numel;
        t.strides[0] = 1;
    }
    return t;
}

// Element i of t (row-major logical index), any strides; a flat() contiguous
// tensor skips the per-dimension divisions (the branch is uniform per launch).
template <typename T> __device__ __forceinline__ T at(const weft_cu_tensor &t, int64_t i) {
    const T *d = (const T *)t.data;
    return t.ndim == 1 && t.strides[0] == 1 ? d[i] : d[weft_cu_offset(t, i)];
}

// ---- sgd ----
template <typename T>
__global__ void sgd_kernel(weft_cu_tensor p, weft_cu_tensor buf, weft_cu_tensor g, T *p_out, T *buf_out,
                           weft_cu_scalar lr_s, weft_cu_scalar first_s, T wd, T mom, T damp1, int nesterov) {
    const T lr = (T)scalar_value(lr_s);
    const bool momentum = buf.data != NULL;
    const bool first = momentum && scalar_value(first_s) != 0;
    WEFT_CU_GRID_LOOP(i, p.numel) {
        T pi = at<T>(p, i);
        T d = at<T>(g, i) + wd * pi; // wd == 0 exactly when unused
        if (momentum) {
            T b = first ? d : mom * at<T>(buf, i) + damp1 * d;
            buf_out[i] = b;
            d = nesterov ? d + mom * b : b;
        }
        p_out[i] = pi - lr * d;
    }
}

template <typename T>
static cudaError_t launch_sgd(weft_cu_tensor p, weft_cu_tensor buf, weft_cu_tensor g, void *p_out, void *buf_out,
                              weft_cu_scalar lr, weft_cu_scalar first, double wd, double mom, double damp,
                              int nesterov, cudaStream_t s) {
    sgd_kernel<T><<<weft_cu_blocks(p.numel), WEFT_CU_THREADS, 0, s>>>(
        flat(p), flat(buf), flat(g), (T *)p_out, (T *)buf_out, lr, first, (T)wd, (T)mom, (T)(1 - damp), nesterov);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_sgd_update(weft_cu_tensor p, weft_cu_tensor buf, weft_cu_tensor g, void *p_out,
                                          void *buf_out, weft_cu_scalar lr, weft_cu_scalar first, double wd,
                                          double mom, double damp, int nesterov, cudaStream_t s) {
    if (p.numel == 0) return cudaSuccess;
    WEFT_CU_DISPATCH_FLOAT(p.dtype, launch_sgd, p, buf, g, p_out, buf_out, lr, first, wd, mom, damp, nesterov, s)
}

// ---- adagrad ----
template <typename T>
__global__ void adagrad_kernel(weft_cu_tensor p, weft_cu_tensor sum, weft_cu_tensor g, T *p_out, T *sum_out,
                               weft_cu_scalar clr_s, T wd, T eps) {
    const T nclr = (T)-scalar_value(clr_s);
    WEFT_CU_GRID_LOOP(i, p.numel) {
        T pi = at<T>(p, i);
        T d = at<T>(g, i) + wd * pi;
        T sq = at<T>(sum, i) + d * d;
        sum_out[i] = sq;
        p_out[i] = pi + nclr * (d / (sqrt(sq) + eps));
    }
}

template <typename T>
static cudaError_t launch_adagrad(weft_cu_tensor p, weft_cu_tensor sum, weft_cu_tensor g, void *p_out, void *sum_out,
                                  weft_cu_scalar clr, double wd, double eps, cudaStream_t s) {
    adagrad_kernel<T><<<weft_cu_blocks(p.numel), WEFT_CU_THREADS, 0, s>>>(flat(p), flat(sum), flat(g), (T *)p_out,
                                                                          (T *)sum_out, clr, (T)wd, (T)eps);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_adagrad_update(weft_cu_tensor p, weft_cu_tensor sum, weft_cu_tensor g, void *p_out,
                                              void *sum_out, weft_cu_scalar clr, double wd, double eps,
                                              cudaStream_t s) {
    if (p.numel == 0) return cudaSuccess;
    WEFT_CU_DISPATCH_FLOAT(p.dtype, launch_adagrad, p, sum, g, p_out, sum_out, clr, wd, eps, s)
}

// ---- rmsprop ----
template <typename T, bool MOM, bool CEN>
__global__ void rmsprop_kernel(weft_cu_tensor p, weft_cu_tensor sq, weft_cu_tensor buf, weft_cu_tensor ga,
                               weft_cu_tensor g, T *p_out, T *sq_out, T *buf_out, T *ga_out, weft_cu_scalar lr_s,
                               T wd, T eps, T alpha, T alpha1, T mom) {
    const T nlr = (T)-scalar_value(lr_s);
    WEFT_CU_GRID_LOOP(i, p.numel) {
        T pi = at<T>(p, i);
        T d = at<T>(g, i) + wd * pi;
        T s2 = alpha * at<T>(sq, i) + alpha1 * (d * d);
        sq_out[i] = s2;
        if (CEN) {
            T a = alpha * at<T>(ga, i) + alpha1 * d;
            ga_out[i] = a;
            s2 = s2 - a * a;
        }
        T avg = sqrt(s2) + eps;
        if (MOM) {
            T b = mom * at<T>(buf, i) + d / avg;
            buf_out[i] = b;
            p_out[i] = pi + nlr * b;
        } else {
            p_out[i] = pi + nlr * (d / avg);
        }
    }
}

template <typename T>
static cudaError_t launch_rmsprop(weft_cu_tensor p, weft_cu_tensor sq, weft_cu_tensor buf, weft_cu_tensor ga,
                                  weft_cu_tensor g, void *p_out, void *sq_out, void *buf_out, void *ga_out,
                                  weft_cu_scalar lr, double wd, double eps, double alpha, double mom, cudaStream_t s) {
    unsigned nb = weft_cu_blocks(p.numel);
    p = flat(p), sq = flat(sq), buf = flat(buf), ga = flat(ga), g = flat(g);
    T *po = (T *)p_out, *so = (T *)sq_out, *bo = (T *)buf_out, *gao = (T *)ga_out;
    const T a = (T)alpha, a1 = (T)(1 - alpha);
    if (buf.data && ga.data)
        rmsprop_kernel<T, true, true><<<nb, WEFT_CU_THREADS, 0, s>>>(p, sq, buf, ga, g, po, so, bo, gao, lr, (T)wd,
                                                                     (T)eps, a, a1, (T)mom);
    else if (buf.data)
        rmsprop_kernel<T, true, false><<<nb, WEFT_CU_THREADS, 0, s>>>(p, sq, buf, ga, g, po, so, bo, gao, lr, (T)wd,
                                                                      (T)eps, a, a1, (T)mom);
    else if (ga.data)
        rmsprop_kernel<T, false, true><<<nb, WEFT_CU_THREADS, 0, s>>>(p, sq, buf, ga, g, po, so, bo, gao, lr, (T)wd,
                                                                      (T)eps, a, a1, (T)mom);
    else
        rmsprop_kernel<T, false, false><<<nb, WEFT_CU_THREADS, 0, s>>>(p, sq, buf, ga, g, po, so, bo, gao, lr, (T)wd,
                                                                       (T)eps, a, a1, (T)mom);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_rmsprop_update(weft_cu_tensor p, weft_cu_tensor sq, weft_cu_tensor buf,
                                              weft_cu_tensor ga, weft_cu_tensor g, void *p_out, void *sq_out,
                                              void *buf_out, void *ga_out, weft_cu_scalar lr, double wd, double eps,
                                              double alpha, double mom, cudaStream_t s) {
    if (p.numel == 0) return cudaSuccess;
    WEFT_CU_DISPATCH_FLOAT(p.dtype, launch_rmsprop, p, sq, buf, ga, g, p_out, sq_out, buf_out, ga_out, lr, wd, eps,
                           alpha, mom, s)
}

// ---- adam / adamw ----
// One element, as optim_loops.h's adam(): shared by the one-tensor and the multi-tensor kernels, so
// both round alike. x: amsgrad's running max (read only when AMS).
template <typename T, bool AMS>
__device__ __forceinline__ void adam_elem(T p, T g, T m, T v, T x, T *p_out, T *m_out, T *v_out, T *x_out, T decay,
                                          T wdt, T b1, T b2, T b1m, T b2m, T eps, T nss, T bc2s) {
    T pi = p * decay;
    T d = g + wdt * pi;
    T mi = b1 * m + b1m * d;
    T vi = b2 * v + b2m * (d * d);
    *m_out = mi;
    *v_out = vi;
    if (AMS) {
        vi = vi > x ? vi : x; // as the CPU loop (torch.maximum)
        *x_out = vi;
    }
    *p_out = pi + nss * (mi / (sqrt(vi) / bc2s + eps));
}

// The hyper-parameters in T, from the scalars (read on the device) and the attrs, as the CPU rounds them.
template <typename T> struct adam_hp {
    T decay, wdt, b1, b2, b1m, b2m, eps, nss, bc2s;
};
template <typename T>
__device__ __forceinline__ adam_hp<T> adam_hp_of(weft_cu_scalar lr_s, weft_cu_scalar ss_s, weft_cu_scalar bc2_s,
                                                 double beta1, double beta2, double eps, double wd, int decoupled) {
    const double lr = scalar_value(lr_s);
    adam_hp<T> h;
    h.nss = (T)-scalar_value(ss_s), h.bc2s = (T)scalar_value(bc2_s);
    h.wdt = decoupled ? (T)0 : (T)wd, h.decay = decoupled ? (T)(1 - lr * wd) : (T)1;
    h.b1 = (T)beta1, h.b2 = (T)beta2, h.b1m = (T)(1 - beta1), h.b2m = (T)(1 - beta2), h.eps = (T)eps;
    return h;
}

template <typename T, bool AMS>
__global__ void adam_kernel(weft_cu_tensor p, weft_cu_tensor m, weft_cu_tensor v, weft_cu_tensor vmax,
                            weft_cu_tensor g, T *p_out, T *m_out, T *v_out, T *vmax_out, weft_cu_scalar lr_s,
                            weft_cu_scalar ss_s, weft_cu_scalar bc2_s, double beta1, double beta2, double eps,
                            double wd, int decoupled) {
    const adam_hp<T> h = adam_hp_of<T>(lr_s, ss_s, bc2_s, beta1, beta2, eps, wd, decoupled);
    WEFT_CU_GRID_LOOP(i, p.numel) {
        adam_elem<T, AMS>(at<T>(p, i), at<T>(g, i), at<T>(m, i), at<T>(v, i), AMS ? at<T>(vmax, i) : (T)0,
                          p_out + i, m_out + i, v_out + i, AMS ? vmax_out + i : NULL, h.decay, h.wdt, h.b1, h.b2,
                          h.b1m, h.b2m, h.eps, h.nss, h.bc2s);
    }
}

template <typename T>
static cudaError_t launch_adam(weft_cu_tensor p, weft_cu_tensor m, weft_cu_tensor v, weft_cu_tensor vmax,
                               weft_cu_tensor g, void *p_out, void *m_out, void *v_out, void *vmax_out,
                               weft_cu_scalar lr, weft_cu_scalar ss, weft_cu_scalar bc2, double beta1, double beta2,
                               double eps, double wd, int decoupled, cudaStream_t s) {
    unsigned nb = weft_cu_blocks(p.numel);
    p = flat(p), m = flat(m), v = flat(v), vmax = flat(vmax), g = flat(g);
    if (vmax.data)
        adam_kernel<T, true><<<nb, WEFT_CU_THREADS, 0, s>>>(p, m, v, vmax, g, (T *)p_out, (T *)m_out, (T *)v_out,
                                                            (T *)vmax_out, lr, ss, bc2, beta1, beta2, eps, wd,
                                                            decoupled);
    else
        adam_kernel<T, false><<<nb, WEFT_CU_THREADS, 0, s>>>(p, m, v, vmax, g, (T *)p_out, (T *)m_out, (T *)v_out,
                                                             (T *)vmax_out, lr, ss, bc2, beta1, beta2, eps, wd,
                                                             decoupled);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_adam_update(weft_cu_tensor p, weft_cu_tensor m, weft_cu_tensor v, weft_cu_tensor vmax,
                                           weft_cu_tensor g, void *p_out, void *m_out, void *v_out, void *vmax_out,
                                           weft_cu_scalar lr, weft_cu_scalar step_size, weft_cu_scalar bc2_sqrt,
                                           double beta1, double beta2, double eps, double wd, int decoupled,
                                           cudaStream_t s) {
    if (p.numel == 0) return cudaSuccess;
    WEFT_CU_DISPATCH_FLOAT(p.dtype, launch_adam, p, m, v, vmax, g, p_out, m_out, v_out, vmax_out, lr, step_size,
                           bc2_sqrt, beta1, beta2, eps, wd, decoupled, s)
}

// Many tensors in one launch (PyTorch's multi_tensor_apply): block b updates
// chunk b - block0[k] of tensor k, MT_CHUNK elements. The table travels as a
// kernel parameter, so the launch needs no copy and can be captured.
#define MT_CHUNK 8192
template <typename T, bool AMS>
__global__ void adam_multi_kernel(weft_cu_adam_table t, weft_cu_scalar lr_s, weft_cu_scalar ss_s,
                                  weft_cu_scalar bc2_s, double beta1, double beta2, double eps, double wd,
                                  int decoupled) {
    const adam_hp<T> h = adam_hp_of<T>(lr_s, ss_s, bc2_s, beta1, beta2, eps, wd, decoupled);
    const int b = (int)blockIdx.x;
    int k = 0;
    while (k + 1 < t.count && b >= t.block0[k + 1]) k++;
    const int64_t lo = (int64_t)(b - t.block0[k]) * MT_CHUNK, n = t.n[k];
    const int64_t hi = lo + MT_CHUNK < n ? lo + MT_CHUNK : n;
    T *p = (T *)t.p[k], *m = (T *)t.m[k], *v = (T *)t.v[k], *x = (T *)t.vmax[k];
    const T *g = (const T *)t.g[k];
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
        adam_elem<T, AMS>(p[i], g[i], m[i], v[i], AMS ? x[i] : (T)0, p + i, m + i, v + i, AMS ? x + i : NULL,
                          h.decay, h.wdt, h.b1, h.b2, h.b1m, h.b2m, h.eps, h.nss, h.bc2s);
}

template <typename T>
static cudaError_t launch_adam_multi(weft_cu_adam_table t, weft_cu_scalar lr, weft_cu_scalar ss, weft_cu_scalar bc2,
                                     double beta1, double beta2, double eps, double wd, int decoupled,
                                     cudaStream_t s) {
    const bool ams = t.vmax[0] != NULL;
    int nb = 0;
    for (int k = 0; k < t.count; k++) {
        t.block0[k] = nb;
        nb += (int)((t.n[k] + MT_CHUNK - 1) / MT_CHUNK);
    }
    t.block0[t.count] = nb;
    if (nb == 0) return cudaSuccess;
    if (ams)
        adam_multi_kernel<T, true><<<nb, WEFT_CU_THREADS, 0, s>>>(t, lr, ss, bc2, beta1, beta2, eps, wd, decoupled);
    else
        adam_multi_kernel<T, false><<<nb, WEFT_CU_THREADS, 0, s>>>(t, lr, ss, bc2, beta1, beta2, eps, wd, decoupled);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_adam_multi(weft_cu_adam_table t, int dtype, weft_cu_scalar lr,
                                          weft_cu_scalar step_size, weft_cu_scalar bc2_sqrt, double beta1,
                                          double beta2, double eps, double wd, int decoupled, cudaStream_t s) {
    if (t.count <= 0 || t.count > WEFT_CU_ADAM_TABLE) return cudaErrorInvalidValue;
    for (int k = 0; k < t.count; k++)
        if (t.n[k] > (int64_t)MT_CHUNK * 0x7fffffff / 2) return cudaErrorInvalidValue; // block counts fit an int
    WEFT_CU_DISPATCH_FLOAT(dtype, launch_adam_multi, t, lr, step_size, bc2_sqrt, beta1, beta2, eps, wd, decoupled, s)
}

// ---- clipping ----
// acc + sum of x*x in double: pass 1 gives each of nb blocks (a count fixed
// by numel: weft_cu_sumsq_blocks) a grid-stride share and a tree sum in
// shared memory, pass 2 sums the nb partials in one block the same way and
// adds acc. The order depends only on numel, so the result is the same on
// every run.
static_assert((WEFT_CU_THREADS & (WEFT_CU_THREADS - 1)) == 0, "the tree sums need a power-of-two block");

__device__ __forceinline__ double block_sum(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = WEFT_CU_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    return sh[0];
}

template <typename T> __global__ void sumsq_partial(weft_cu_tensor x, double *part) {
    __shared__ double sh[WEFT_CU_THREADS];
    double a = 0;
    WEFT_CU_GRID_LOOP(i, x.numel) {
        double v = (double)at<T>(x, i);
        a += v * v;
    }
    double s = block_sum(a, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void sumsq_final(const double *part, int nb, const double *acc, double *out) {
    __shared__ double sh[WEFT_CU_THREADS];
    double a = 0;
    for (int i = threadIdx.x; i < nb; i += WEFT_CU_THREADS) a += part[i];
    double s = block_sum(a, sh);
    if (threadIdx.x == 0) *out = *acc + s; // out may be acc: one thread reads it, then writes
}

extern "C" int weft_cu_sumsq_blocks(int64_t numel) {
    int64_t b = (numel + 4 * WEFT_CU_THREADS - 1) / (4 * WEFT_CU_THREADS); // about 4 elements per thread
    return (int)(b < 1 ? 1 : b > 1024 ? 1024 : b);
}

template <typename T>
static cudaError_t launch_sumsq(weft_cu_tensor x, double *part, const double *acc, double *out, cudaStream_t s) {
    int nb = weft_cu_sumsq_blocks(x.numel);
    sumsq_partial<T><<<nb, WEFT_CU_THREADS, 0, s>>>(flat(x), part);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    sumsq_final<<<1, WEFT_CU_THREADS, 0, s>>>(part, nb, acc, out);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_sumsq(weft_cu_tensor x, double *part, const double *acc, double *out,
                                     cudaStream_t s) {
    WEFT_CU_DISPATCH_FLOAT(x.dtype, launch_sumsq, x, part, acc, out, s)
}

// Many tensors: block b sums tensor k's share b - block0[k] of nb[k] exactly as sumsq_partial does with
// nb[k] blocks, so each tensor's partials, and its sum, are the one-tensor kernels' bits.
template <typename T> __global__ void sumsq_multi_partial(weft_cu_sumsq_table t, double *part) {
    __shared__ double sh[WEFT_CU_THREADS];
    const int b = (int)blockIdx.x;
    int k = 0;
    while (k + 1 < t.count && b >= t.block0[k + 1]) k++;
    const T *x = (const T *)t.x[k];
    double a = 0;
    for (int64_t i = (int64_t)(b - t.block0[k]) * WEFT_CU_THREADS + threadIdx.x; i < t.n[k];
         i += (int64_t)t.nb[k] * WEFT_CU_THREADS) {
        double v = (double)x[i];
        a += v * v;
    }
    double s = block_sum(a, sh);
    if (threadIdx.x == 0) part[b] = s;
}

// One block: each tensor's partials as sumsq_final sums them, added to the total in order.
__global__ void sumsq_multi_final(weft_cu_sumsq_table t, const double *part, const double *acc, double *out) {
    __shared__ double sh[WEFT_CU_THREADS];
    double total = *acc; // read by every thread before thread 0 writes out (which may be acc) at the end
    for (int k = 0; k < t.count; k++) {
        double a = 0;
        for (int i = threadIdx.x; i < t.nb[k]; i += WEFT_CU_THREADS) a += part[t.block0[k] + i];
        total = total + block_sum(a, sh);
        __syncthreads(); // sh[0] read by all before the next tensor's sums overwrite sh
    }
    if (threadIdx.x == 0) *out = total;
}

template <typename T>
static cudaError_t launch_sumsq_multi(weft_cu_sumsq_table t, double *part, const double *acc, double *out,
                                      cudaStream_t s) {
    int nb = 0;
    for (int k = 0; k < t.count; k++) t.block0[k] = nb, t.nb[k] = weft_cu_sumsq_blocks(t.n[k]), nb += t.nb[k];
    t.block0[t.count] = nb;
    sumsq_multi_partial<T><<<nb, WEFT_CU_THREADS, 0, s>>>(t, part);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    sumsq_multi_final<<<1, WEFT_CU_THREADS, 0, s>>>(t, part, acc, out);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_sumsq_multi(weft_cu_sumsq_table t, int dtype, double *part, const double *acc,
                                           double *out, cudaStream_t s) {
    if (t.count <= 0 || t.count > WEFT_CU_SUMSQ_TABLE) return cudaErrorInvalidValue;
    WEFT_CU_DISPATCH_FLOAT(dtype, launch_sumsq_multi, t, part, acc, out, s)
}

template <typename T> __global__ void scale_kernel(weft_cu_tensor x, T *out, weft_cu_scalar c_s) {
    const T c = (T)scalar_value(c_s);
    WEFT_CU_GRID_LOOP(i, x.numel) out[i] = at<T>(x, i) * c;
}

template <typename T> static cudaError_t launch_scale(weft_cu_tensor x, void *out, weft_cu_scalar c, cudaStream_t s) {
    scale_kernel<T><<<weft_cu_blocks(x.numel), WEFT_CU_THREADS, 0, s>>>(flat(x), (T *)out, c);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_scale(weft_cu_tensor x, void *out, weft_cu_scalar c, cudaStream_t s) {
    if (x.numel == 0) return cudaSuccess;
    WEFT_CU_DISPATCH_FLOAT(x.dtype, launch_scale, x, out, c, s)
}
