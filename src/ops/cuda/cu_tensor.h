// A tensor as a CUDA kernel sees it. Plain C: included by the .cu kernel
// files (compiled by nvcc as C++) and by the C glue that unpacks op
// arguments, so the kernels never see weft's internal headers.
#ifndef WEFT_CU_TENSOR_H
#define WEFT_CU_TENSOR_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "../../device/cuda/cuda_report.h"

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

#ifdef __cplusplus
extern "C" {
#endif
// n <= WEFT_CU_COALESCE_MAX descriptors of one shape (t[0]'s): drop size-1 dims
// and merge each dim into the one inside it where every operand's strides
// allow, keeping each operand's elements and order (common.c; the copy,
// elementwise and fused kernels).
#define WEFT_CU_COALESCE_MAX 18
void weft_cu_coalesce(int n, weft_cu_tensor *t);
#ifdef __cplusplus
}
#endif

#endif
