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
    // error names its own op and results can be compared with the asynchronous run.
    const char *sync = getenv("WEFT_CUDA_SYNC");
    if (e == cudaSuccess && sync && *sync == '1') e = cudaDeviceSynchronize();
    if (e == cudaErrorInvalidValue)
        return weft_error(WEFT_ERR_UNSUPPORTED, "%s: the CUDA kernel does not handle these arguments", op);
    return weft_cuda_check(e, op);
}

// A misspelt op name leaves that op without a CUDA kernel, which
// tests/cuda/test_cuda_table.c reports (it runs on every build machine).
void weft_cu_register(const char *name, weft_kernel_fn fn, uint32_t dtypes) {
    (void)weft_op_register_kernel(name, WEFT_CUDA, fn, dtypes);
}
