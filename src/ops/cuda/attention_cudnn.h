// cuDNN's fused causal attention (its graph API's SDPA node, through the
// cudnn-frontend headers in third_party/), as a second way to run the
// half-precision kernels of causal_attention and its backward
// (attention.c). Plain C prototypes; attention_cudnn.cu is built with or
// without cuDNN (without: nothing is ever planned, so the caller runs its own
// kernels). No CUDA headers here (a stream is a void *): tests and benches include it whether or not CUDA is
// built, and declare its functions weak (#pragma weak) to see whether they are there.
//
// The statistics are weft's: lse_i = log sum_j exp(s_ij), s = scale q.k,
// an f32 (B,H,T) array, which is what cuDNN's Stats output holds, so a
// forward of one kind and a backward of the other agree.
#ifndef WEFT_CU_ATTENTION_CUDNN_H
#define WEFT_CU_ATTENTION_CUDNN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// One call's shape: B batches of H heads, T rows of head dim D, and where each
// tensor's element (b, h, t, 0) lies: b * s[i][0] + h * s[i][1] + t * s[i][2]
// elements from its pointer (unit stride along D). Tensors, in order:
// q, k, v, o, go, gq, gk, gv (the forward uses the first four).
enum { WEFT_CUDNN_Q, WEFT_CUDNN_K, WEFT_CUDNN_V, WEFT_CUDNN_O, WEFT_CUDNN_GO, WEFT_CUDNN_GQ, WEFT_CUDNN_GK,
       WEFT_CUDNN_GV, WEFT_CUDNN_N };
typedef struct weft_cudnn_attn {
    int bf16;     // 1: bf16, 0: f16
    int device;   // the CUDA device
    int backward; // 0: the forward (o, lse), 1: the backward (gq, gk, gv)
    int64_t B, H, T, D;
    float scale;
    int64_t s[WEFT_CUDNN_N][3];
} weft_cudnn_attn;

// 1 when this build has cuDNN's attention and WEFT_ATTN_CUDNN=1 asks for it.
int weft_cudnn_attention_enabled(void);

// Finds (or builds, once per shape and layout) cuDNN's plan for a, to run on stream st (a cudaStream_t): 1 with
// the workspace it needs in bytes, or 0 when cuDNN cannot run it (not built in, a shape or layout it does not
// support, no engine on this GPU, or st capturing a CUDA Graph where this cuDNN's backward would copy from host
// memory at every run: the caller runs its own kernels; why, if not NULL, says why).
int weft_cudnn_attention_plan(const weft_cudnn_attn *a, void *st, size_t *workspace, char *why, size_t why_len);

// Runs a's plan on stream st (a cudaStream_t). ptr: q, k, v, o, lse (the forward, writing o and lse) or q, k, v,
// o, go, lse, gq, gk, gv (the backward, writing the last three); lse is f32 (B,H,T), contiguous. 0 on success,
// else -1 with cuDNN's message in err.
int weft_cudnn_attention_run(const weft_cudnn_attn *a, void *const *ptr, void *workspace, void *st, char *err,
                             size_t err_len);

// How many calls cuDNN has run in this process (tests: did the cuDNN path really run?).
int64_t weft_cudnn_attention_runs(void);

#ifdef __cplusplus
}
#endif
#endif
