// Launchers of attention_kernels.cu (plain C prototypes): fused causal
// attention, forward and backward (the ops causal_attention and
// causal_attention_backward). Every buffer is contiguous (save the tensor-core
// kernels' q, k, v, go: weft_cu_heads); BH = B*H heads of
// T rows each, head dim D (0 <= D <= 128, else cudaErrorInvalidValue).
#ifndef WEFT_CU_ATTENTION_KERNELS_H
#define WEFT_CU_ATTENTION_KERNELS_H

#include "attention_heads.h"
#include "cu_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// q, k, v, o (BH,T,D); lse (BH,T). Per head: s_ij = scale q_i.k_j for j <= i,
// lse_i = log sum_j exp(s_ij), o_i = sum_j exp(s_ij - lse_i) v_j.
cudaError_t weft_cu_causal_attention(const void *q, const void *k, const void *v, void *o, void *lse, int dtype,
                                     int64_t BH, int64_t T, int64_t D, double scale, cudaStream_t s);
// q, k, v, o, go, gq, gk, gv (BH,T,D); lse (BH,T); dl (BH,T) device scratch of
// dtype (gets Dl_i = go_i.o_i). With p_ij = exp(s_ij - lse_i) (0 for j > i),
// ds_ij = p_ij (go_i.v_j - Dl_i): gv_j = sum_i p_ij go_i,
// gq_i = scale sum_j ds_ij k_j, gk_j = scale sum_i ds_ij q_i.
cudaError_t weft_cu_causal_attention_backward(const void *q, const void *k, const void *v, const void *o,
                                              const void *lse, const void *go, void *dl, void *gq, void *gk,
                                              void *gv, int dtype, int64_t BH, int64_t T, int64_t D, double scale,
                                              cudaStream_t s);

// The tensor-core kernels (attention_mma_kernels.cu): q, k, v, o, go, gq, gk, gv of dtype bf16 or f16 with D
// 16, 32, 64 or 128 (weft_cu_attention_mma_supports); lse and dl (BH,T) f32, the rest as above. q, k, v, go
// and o lie where L[0..4] say (each pointer, sb, sh and st a multiple of 16 bytes: 16-byte loads; o's rows
// may be strided, its head rows written in 4-byte pairs); the backward's gq, gk, gv where L[5..7] say (the
// same rules; e.g. (B,T,H,D) memory); lse is contiguous, 16-byte aligned.
int weft_cu_attention_mma_supports(int dtype, int64_t D);
cudaError_t weft_cu_causal_attention_mma(const void *q, const void *k, const void *v, const weft_cu_heads *L, void *o,
                                         float *lse, int dtype, int64_t BH, int64_t T, int64_t D, double scale,
                                         cudaStream_t s);
// dq_acc: NULL for the two deterministic kernels (dk/dv, then dq), or an f32 (BH,T,D) scratch for the single
// pass that adds dq there by atomics (FlashAttention-2's; its contents on entry do not matter).
cudaError_t weft_cu_causal_attention_mma_backward(const void *q, const void *k, const void *v, const weft_cu_heads *L,
                                                  const void *o, const float *lse, const void *go, float *dl,
                                                  float *dq_acc, void *gq, void *gk, void *gv, int dtype, int64_t BH,
                                                  int64_t T, int64_t D, double scale, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
