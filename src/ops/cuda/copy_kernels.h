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

#ifdef __cplusplus
}
#endif
#endif
