// Fused optimiser updates: one pass over the parameter, its state and its
// gradient, the arithmetic of src/optim/optim_kernels.h operation by
// operation (hyper-parameters computed in double and rounded to T once, the
// per-element math in T), so CUDA and CPU steps agree to rounding. Both
// compilers may contract a*b + c into an FMA, so the last bit can differ.
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

template <typename T>
__global__ void sgd_kernel(weft_cu_tensor p, weft_cu_tensor buf, weft_cu_tensor g, T *p_out, T *buf_out,
                           weft_cu_scalar lr_s, weft_cu_scalar first_s, T wd, T mom, T damp1, int nesterov) {
    const T lr = (T)scalar_value(lr_s);
    const bool momentum = buf.data != NULL;
    const bool first = momentum && scalar_value(first_s) != 0;
    const T *pp = (const T *)p.data, *gp = (const T *)g.data, *bp = (const T *)buf.data;
    WEFT_CU_GRID_LOOP(i, p.numel) {
        T pi = pp[weft_cu_offset(p, i)];
        T d = gp[weft_cu_offset(g, i)] + wd * pi; // wd == 0 exactly when unused
        if (momentum) {
            T b = first ? d : mom * bp[weft_cu_offset(buf, i)] + damp1 * d;
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

template <typename T>
__global__ void adam_kernel(weft_cu_tensor p, weft_cu_tensor m, weft_cu_tensor v, weft_cu_tensor g, T *p_out,
                            T *m_out, T *v_out, weft_cu_scalar lr_s, weft_cu_scalar ss_s, weft_cu_scalar bc2_s,
                            T b1, T b2, T b1m, T b2m, T eps, double wd, int decoupled) {
    // as optim_kernels.h's adam(): scalars in double, rounded to T once
    const double lr = scalar_value(lr_s);
    const T nss = (T)-scalar_value(ss_s), bc2s = (T)scalar_value(bc2_s);
    const T wdt = decoupled ? (T)0 : (T)wd, decay = decoupled ? (T)(1 - lr * wd) : (T)1;
    const T *pp = (const T *)p.data, *mp = (const T *)m.data, *vp = (const T *)v.data, *gp = (const T *)g.data;
    WEFT_CU_GRID_LOOP(i, p.numel) {
        T pi = pp[weft_cu_offset(p, i)] * decay;
        T d = gp[weft_cu_offset(g, i)] + wdt * pi;
        T mi = b1 * mp[weft_cu_offset(m, i)] + b1m * d;
        T vi = b2 * vp[weft_cu_offset(v, i)] + b2m * (d * d);
        m_out[i] = mi;
        v_out[i] = vi;
        p_out[i] = pi + nss * (mi / (sqrt(vi) / bc2s + eps));
    }
}

template <typename T>
static cudaError_t launch_adam(weft_cu_tensor p, weft_cu_tensor m, weft_cu_tensor v, weft_cu_tensor g, void *p_out,
                               void *m_out, void *v_out, weft_cu_scalar lr, weft_cu_scalar ss, weft_cu_scalar bc2,
                               double beta1, double beta2, double eps, double wd, int decoupled, cudaStream_t s) {
    adam_kernel<T><<<weft_cu_blocks(p.numel), WEFT_CU_THREADS, 0, s>>>(
        flat(p), flat(m), flat(v), flat(g), (T *)p_out, (T *)m_out, (T *)v_out, lr, ss, bc2, (T)beta1, (T)beta2,
        (T)(1 - beta1), (T)(1 - beta2), (T)eps, wd, decoupled);
    return cudaGetLastError();
}

extern "C" cudaError_t weft_cu_adam_update(weft_cu_tensor p, weft_cu_tensor m, weft_cu_tensor v, weft_cu_tensor g,
                                           void *p_out, void *m_out, void *v_out, weft_cu_scalar lr,
                                           weft_cu_scalar step_size, weft_cu_scalar bc2_sqrt, double beta1,
                                           double beta2, double eps, double wd, int decoupled, cudaStream_t s) {
    if (p.numel == 0) return cudaSuccess;
    WEFT_CU_DISPATCH_FLOAT(p.dtype, launch_adam, p, m, v, g, p_out, m_out, v_out, lr, step_size, bc2_sqrt, beta1,
                           beta2, eps, wd, decoupled, s)
}
