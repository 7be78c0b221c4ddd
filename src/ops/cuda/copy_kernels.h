// Launchers of copy_kernels.cu (plain C prototypes).
#ifndef WEFT_CU_COPY_KERNELS_H
#define WEFT_CU_COPY_KERNELS_H

#include "cu_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// out[i] = in[i] for every logical index i of out (in has out's shape; its
// strides may be 0 for broadcast dims), converting in.dtype to out.dtype.
cudaError_t weft_cu_copy(weft_cu_tensor out, weft_cu_tensor in, cudaStream_t s);

// y[k][i] = x[k][i] converted, for up to WEFT_CU_CAST_TABLE contiguous tensors of one source and one
// destination dtype (f32 to bf16 or f16) in one launch: the same values as weft_cu_copy's. Every x[k] 16-byte
// and every y[k] 8-byte aligned (the table's filler checks). block0 is the launcher's.
#define WEFT_CU_CAST_TABLE 48
typedef struct weft_cu_cast_table {
    const void *x[WEFT_CU_CAST_TABLE];
    void *y[WEFT_CU_CAST_TABLE];
    int64_t n[WEFT_CU_CAST_TABLE];
    int32_t block0[WEFT_CU_CAST_TABLE + 1];
    int32_t count;
} weft_cu_cast_table;
// Whether weft_cu_cast_multi takes the pair (in, out) of dtypes.
int weft_cu_cast_multi_supports(int in, int out);
cudaError_t weft_cu_cast_multi(weft_cu_cast_table t, int in, int out, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
