// Launchers of elementwise_kernels.cu (plain C prototypes).
//
// Every operand descriptor has out's ndim and sizes (inputs read through
// weft_cu_desc_bcast, stride 0 along broadcast dims); the glue may coalesce
// dims first, as long as all operands keep one shape.
#ifndef WEFT_CU_ELEMENTWISE_KERNELS_H
#define WEFT_CU_ELEMENTWISE_KERNELS_H

#include "cu_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// The WEFT_EW_* variants of src/ops/elementwise.h, repeated for the .cu file
// (elementwise.c checks that the two lists agree).
enum {
    WEFT_CU_EW_NEG, WEFT_CU_EW_ABS, WEFT_CU_EW_SIGN, WEFT_CU_EW_EXP, WEFT_CU_EW_LOG, WEFT_CU_EW_SQRT,
    WEFT_CU_EW_RSQRT, WEFT_CU_EW_SIN, WEFT_CU_EW_COS, WEFT_CU_EW_TANH, WEFT_CU_EW_SIGMOID, WEFT_CU_EW_RELU,
    WEFT_CU_EW_GELU, WEFT_CU_EW_GELU_GRAD, WEFT_CU_EW_SILU, WEFT_CU_EW_POW_SCALAR, WEFT_CU_EW_ADD_SCALAR,
    WEFT_CU_EW_MUL_SCALAR, WEFT_CU_EW_ADD, WEFT_CU_EW_SUB, WEFT_CU_EW_MUL, WEFT_CU_EW_DIV, WEFT_CU_EW_POW,
    WEFT_CU_EW_MAXIMUM, WEFT_CU_EW_MINIMUM, WEFT_CU_EW_EQ, WEFT_CU_EW_NE, WEFT_CU_EW_LT, WEFT_CU_EW_LE,
    WEFT_CU_EW_GT, WEFT_CU_EW_GE, WEFT_CU_EW_RELU_BW, WEFT_CU_EW_GELU_BW, WEFT_CU_EW_GELU_TANH, WEFT_CU_EW_GELU_TANH_BW,
    WEFT_CU_EW_ERF, WEFT_CU_EW_FLOOR, WEFT_CU_EW_CEIL, WEFT_CU_EW_ROUND, WEFT_CU_EW_TRUNC, WEFT_CU_EW_FMOD,
    WEFT_CU_EW_REMAINDER, WEFT_CU_EW_ASIN, WEFT_CU_EW_ACOS, WEFT_CU_EW_ATAN, WEFT_CU_EW_COUNT
};

// out = op(in, sc) for a unary variant (sc: pow/add/mul_scalar's scalar).
// out and in have one dtype (in.dtype picks the kernel).
cudaError_t weft_cu_ew_unary(int op, weft_cu_tensor out, weft_cu_tensor in, double sc, cudaStream_t s);
// out = op(a, b) for a binary variant; a and b have one dtype, out has it
// too, or WEFT_BOOL for the comparisons.
cudaError_t weft_cu_ew_binary(int op, weft_cu_tensor out, weft_cu_tensor a, weft_cu_tensor b, cudaStream_t s);
// out = cond ? a : b; cond is WEFT_BOOL or WEFT_U8 (nonzero = true), a, b and
// out share a dtype (moved as bits by its size).
cudaError_t weft_cu_where(weft_cu_tensor out, weft_cu_tensor cond, weft_cu_tensor a, weft_cu_tensor b,
                          cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
