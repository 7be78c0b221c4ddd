// Descriptors, streams and errors for the CUDA kernels' C glue.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"

_Static_assert(WEFT_CU_MAX_DIMS == WEFT_MAX_DIMS, "weft_cu_tensor holds WEFT_MAX_DIMS dims");
_Static_assert((int)WEFT_CU_F32 == WEFT_F32 && (int)WEFT_CU_F64 == WEFT_F64 && (int)WEFT_CU_I32 == WEFT_I32 &&
                   (int)WEFT_CU_I64 == WEFT_I64 && (int)WEFT_CU_BOOL == WEFT_BOOL && (int)WEFT_CU_U8 == WEFT_U8 &&
                   (int)WEFT_CU_F16 == WEFT_F16 && (int)WEFT_CU_BF16 == WEFT_BF16,
               "dtype codes agree with core.h");

weft_cu_tensor weft_cu_desc(const weft_tensor *t) {
    weft_cu_tensor d;
    memset(&d, 0, sizeof d);
    d.data = weft_tensor_ptr(t);
    d.ndim = t->ndim;
    d.dtype = t->dtype;
    d.numel = t->numel;
    for (int i = 0; i < t->ndim; i++) {
        d.sizes[i] = t->sizes[i];
        d.strides[i] = t->strides[i];
    }
    return d;
}

weft_cu_tensor weft_cu_desc_bcast(const weft_tensor *t, int ndim, const int64_t *sizes) {
    weft_cu_tensor d;
    memset(&d, 0, sizeof d);
    d.data = weft_tensor_ptr(t);
    d.ndim = ndim;
    d.dtype = t->dtype;
    d.numel = 1;
    int lead = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) {
        d.sizes[i] = sizes[i];
        d.numel *= sizes[i];
        int j = i - lead;
        d.strides[i] = (j < 0 || t->sizes[j] == 1) ? 0 : t->strides[j];
    }
    return d;
}

cudaStream_t weft_cu_stream(const weft_tensor *t) { return weft_cuda_stream(t->device.index); }

weft_status weft_cu_done(cudaError_t e, const char *op) {
    if (e == cudaSuccess) e = cudaGetLastError(); // a launch that failed to start
    // WEFT_CUDA_SYNC=1: wait for every op (as CUDA_LAUNCH_BLOCKING), so a kernel's
    // error, or its report of a bad index or target, names its own op, and
    // results can be compared with the asynchronous run.
    const char *sync = getenv("WEFT_CUDA_SYNC");
    bool wait = e == cudaSuccess && sync && *sync == '1';
    if (wait) e = cudaDeviceSynchronize();
    if (e == cudaErrorInvalidValue)
        return weft_error(WEFT_ERR_UNSUPPORTED, "%s: the CUDA kernel does not handle these arguments", op);
    weft_status st = weft_cuda_check(e, op);
    // every device's report (the op's device need not be the thread's current one; only devices that ran a
    // checking kernel have a record to read)
    for (int dev = 0, n = wait ? weft_cuda_device_count() : 0; dev < n && st == WEFT_OK; dev++)
        st = weft_cuda_report_poll(dev);
    return st;
}

// A misspelt op name leaves that op without a CUDA kernel, which
// tests/cuda/test_cuda_table.c reports (it runs on every build machine).
void weft_cu_register(const char *name, weft_kernel_fn fn, uint32_t dtypes) {
    (void)weft_op_register_kernel(name, WEFT_CUDA, fn, dtypes);
}

// n descriptors of one shape (out's): drop size-1 dims and merge dim d into
// the (already merged) dim inside it when stride[d] == stride[inner] *
// size[inner] for every operand. Keeps each operand's elements and order.
void weft_cu_coalesce(int n, weft_cu_tensor *t) {
    int64_t sz[WEFT_CU_MAX_DIMS], st[WEFT_CU_COALESCE_MAX][WEFT_CU_MAX_DIMS]; // innermost first
    int m = 0;
    for (int d = t[0].ndim - 1; d >= 0; d--) {
        int64_t s = t[0].sizes[d];
        if (s == 1) continue;
        bool merge = m > 0;
        for (int k = 0; k < n && merge; k++) merge = t[k].strides[d] == st[k][m - 1] * sz[m - 1];
        if (merge) {
            sz[m - 1] *= s;
            continue;
        }
        sz[m] = s;
        for (int k = 0; k < n; k++) st[k][m] = t[k].strides[d];
        m++;
    }
    for (int k = 0; k < n; k++) {
        t[k].ndim = m;
        for (int j = 0; j < WEFT_CU_MAX_DIMS; j++) {
            t[k].sizes[j] = j < m ? sz[m - 1 - j] : 0;
            t[k].strides[j] = j < m ? st[k][m - 1 - j] : 0;
        }
    }
}
