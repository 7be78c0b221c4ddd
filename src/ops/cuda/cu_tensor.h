// A tensor as a CUDA kernel sees it. Plain C: included by the .cu kernel
// files (compiled by nvcc as C++) and by the C glue that unpacks op
// arguments, so the kernels never see weft's internal headers.
#ifndef WEFT_CU_TENSOR_H
#define WEFT_CU_TENSOR_H

#include <cuda_runtime.h>
#include <stdint.h>

#define WEFT_CU_MAX_DIMS 8 // == WEFT_MAX_DIMS (checked in common.c)

typedef struct weft_cu_tensor {
    char *data;    // device address of the first element (storage offset applied)
    int32_t ndim;
    int32_t dtype; // weft_dtype
    int64_t numel;
    int64_t sizes[WEFT_CU_MAX_DIMS];
    int64_t strides[WEFT_CU_MAX_DIMS]; // elements; 0 along broadcast dims
} weft_cu_tensor;

// weft_dtype values, repeated for the .cu files (checked against core.h in common.c)
enum { WEFT_CU_F32 = 0, WEFT_CU_F64, WEFT_CU_I32, WEFT_CU_I64, WEFT_CU_BOOL, WEFT_CU_U8, WEFT_CU_F16, WEFT_CU_BF16 };

#endif
