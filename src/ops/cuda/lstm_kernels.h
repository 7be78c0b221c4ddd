// Launchers of lstm_kernels.cu (plain C prototypes): the fused LSTM cell,
// forward and backward (ops lstm_cell and lstm_cell_backward, def_lstm.c),
// and one time step's gate pass of lstm_seq and lstm_seq_backward.
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

// lstm_seq, step t: acts rows (B of 4H at stride lda) hold the gates and get
// i,f,g,o; c_prev (NULL at t = 0), c, h rows (B of H at stride ldh).
cudaError_t weft_cu_lstm_seq_step(void *acts, const void *c_prev, void *c, void *h, int dtype, int64_t B, int64_t H,
                                  int64_t lda, int64_t ldh, cudaStream_t s);
// lstm_seq_backward, step t: acts, dgates at stride lda; c_prev (NULL at t =
// 0), c, dh at stride ldh; rec (NULL: zero) and dc (in: dc_t, out: dc_{t-1})
// contiguous (B,H).
cudaError_t weft_cu_lstm_seq_bw_step(const void *acts, const void *c_prev, const void *c, const void *dh,
                                     const void *rec, void *dc, void *dgates, int dtype, int64_t B, int64_t H,
                                     int64_t lda, int64_t ldh, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
