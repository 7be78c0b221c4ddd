// cuBLAS handles for the CUDA kernels' C glue (linalg.c, conv.c).
#ifndef WEFT_CU_BLAS_H
#define WEFT_CU_BLAS_H

#include <cublasLt.h>
#include <cublas_v2.h>

#include "cuda_ops.h"

// The calling thread's cuBLAS handle for t's device, bound to the current
// stream (created on first use; WEFT_CUDA_TF32=1 allows TF32 tensor cores).
// Errors name op.
weft_status weft_cu_blas_handle(const weft_tensor *t, const char *op, cublasHandle_t *h);
// The calling thread's cuBLASLt handle for t's device (created on first use).
weft_status weft_cu_lt_handle(const weft_tensor *t, const char *op, cublasLtHandle_t *h);
// WEFT_OK, or an error "op: what failed: <cuBLAS's message>".
weft_status weft_cu_blas_check(cublasStatus_t s, const char *op, const char *what);

#endif
