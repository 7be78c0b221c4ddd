// One cuBLAS handle per (thread, device), shared by the families that call
// cuBLAS: a handle is bound to a stream per call, and sharing one across
// threads would race on that binding.
#include <stdlib.h>

#include "blas.h"

static _Thread_local cublasHandle_t tl_handle[WEFT_CUDA_MAX_DEVICES];
static _Thread_local cublasLtHandle_t tl_lt[WEFT_CUDA_MAX_DEVICES];

weft_status weft_cu_blas_check(cublasStatus_t s, const char *op, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS) return WEFT_OK;
    return weft_error(s == CUBLAS_STATUS_ALLOC_FAILED ? WEFT_ERR_OOM : WEFT_ERR_DEVICE, "%s: %s failed: %s", op, what,
                      cublasGetStatusString(s));
}

weft_status weft_cu_blas_handle(const weft_tensor *t, const char *op, cublasHandle_t *h) {
    int dev = t->device.index;
    cudaStream_t s = weft_cu_stream(t);
    if (!tl_handle[dev]) {
        weft_status st = weft_cu_blas_check(cublasCreate(&tl_handle[dev]), op, "cublasCreate");
        if (st) return st;
        const char *tf = getenv("WEFT_CUDA_TF32");
        if (tf && *tf == '1') cublasSetMathMode(tl_handle[dev], CUBLAS_TF32_TENSOR_OP_MATH);
    }
    *h = tl_handle[dev];
    return weft_cu_blas_check(cublasSetStream(*h, s), op, "cublasSetStream");
}

weft_status weft_cu_lt_handle(const weft_tensor *t, const char *op, cublasLtHandle_t *h) {
    int dev = t->device.index;
    if (!tl_lt[dev]) {
        weft_status st = weft_cu_blas_check(cublasLtCreate(&tl_lt[dev]), op, "cublasLtCreate");
        if (st) return st;
    }
    *h = tl_lt[dev];
    return WEFT_OK;
}
