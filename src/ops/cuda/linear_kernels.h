// Launcher of linear_kernels.cu (plain C prototype): the epilogue of the
// linear ops (cuda/linalg.c) where cuBLASLt's does not run.
#ifndef WEFT_CU_LINEAR_KERNELS_H
#define WEFT_CU_LINEAR_KERNELS_H

#include "cu_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// h (rows, n) contiguous of dtype (WEFT_CU_F32 / F64 / BF16 / F16): with b (n)
// h += b, and with y (rows, n) y = gelu(h) (exact, erf form; tanh_form: the
// tanh approximation), both in f32 (f64 for f64) from h's value before it is
// rounded. b and y may be NULL.
cudaError_t weft_cu_bias_act(int dtype, void *h, void *y, const void *b, int64_t rows, int64_t n, int tanh_form,
                             cudaStream_t s);

// How many cuBLASLt calls with GELU in the epilogue have run in this process (cuda/linalg.c): epi 1 the
// GELU_AUX_BIAS forward (linear_gelu's tanh form), 2 the DGELU backward (matmul_dgelu's): for tests, which
// cannot otherwise tell the epilogue from the fallback it declines to.
int64_t weft_cu_lt_gelu_runs(int epi);

#ifdef __cplusplus
}
#endif
#endif
