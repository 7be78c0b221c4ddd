// Launchers of lstm_kernels.cu (plain C prototypes): the fused LSTM cell,
// forward and backward (ops lstm_cell and lstm_cell_backward, def_lstm.c).
// Every buffer is contiguous, of dtype (WEFT_CU_F32 or WEFT_CU_F64, else
// cudaErrorInvalidValue); gates (B,4H) in PyTorch's order (i,f,g,o), the rest
// (B,H). A NULL c_prev / dh / dc reads as zeros.
#ifndef WEFT_CU_LSTM_KERNELS_H
#define WEFT_CU_LSTM_KERNELS_H

#include "cu_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// h = o*tanh(c), c = f*c_prev + i*g.
cudaError_t weft_cu_lstm_cell(const void *gates, const void *c_prev, void *h, void *c, int dtype, int64_t B,
                              int64_t H, cudaStream_t s);
// dgates (B,4H), dc_prev (B,H) from the saved gates, c_prev, c and dh, dc.
cudaError_t weft_cu_lstm_cell_backward(const void *gates, const void *c_prev, const void *c, const void *dh,
                                       const void *dc, void *dgates, void *dc_prev, int dtype, int64_t B, int64_t H,
                                       cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
