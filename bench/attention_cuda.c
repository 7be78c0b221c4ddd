// needs: cuda
// Fused causal attention on the GPU, forward + backward (the ops causal_attention and causal_attention_backward,
// called through the op table as autograd does), at GPT-2-small's shape (8,12,1024,64):
//   attention_cuda_bf16         TFLOP/s, 7 B H T^2 D FLOPs a step (causal: QK^T and PV forward, five products back)
//   attention_cuda_bf16_fwd     the forward alone, 2 B H T^2 D FLOPs
//   attention_cuda_bf16_rows128 the same two with WEFT_ATTN_FWD_ROWS=128 (the forward's 128-row blocks, two
//   ..._rows128_fwd             16-row blocks a warp): which tiling is faster here
//   attention_cuda_bf16_onepass forward + backward with WEFT_ATTN_BWD=fused (FlashAttention-2's single backward
//                               pass, dq by atomics) instead of the two deterministic backward kernels
//   attention_cuda_bf16_bwd128  forward + backward with WEFT_ATTN_BWD_ROWS=128 (the two backward kernels with
//                               128 own rows a block, two 16-row blocks a warp)
//   attention_cuda_bf16_cudnn   forward + backward (and ..._cudnn_fwd the forward alone) through cuDNN's fused
//   ..._cudnn_fwd               attention (WEFT_ATTN_CUDNN=1), where this build has cuDNN and cuDNN runs the shape
//   ..._cudnn_nondet            (else a note and no line); _nondet: its backward free to add dq in any order
//                               (WEFT_ATTN_CUDNN_DETERMINISTIC=0)
//   attention_cuda_f32          forward + backward in f32 (CUDA cores)
// Twin: bench/peers/attention_cuda.py (torch scaled_dot_product_attention, is_causal). Goal (issue 16):
// bf16 >= 200 TFLOP/s. Without a GPU it prints a note and no lines.
#include <math.h>
#include <stdlib.h>
#include <weft.h>
#include <weft/device.h>

#include "../src/ops/cuda/attention_cudnn.h"
// (weak: a build without CUDA has neither; then cuDNN never runs)
#pragma weak weft_cudnn_attention_enabled
#pragma weak weft_cudnn_attention_runs
static bool cudnn_on(void) { return weft_cudnn_attention_enabled && weft_cudnn_attention_enabled(); }
static int64_t cudnn_runs(void) { return weft_cudnn_attention_runs ? weft_cudnn_attention_runs() : 0; }
#include "../src/ops/op.h"
#include "bench_util.h"

static int run(int argc, char **argv, const char *name, weft_dtype dt, bool fwd_only) {
    if (!bench_selected(argc, argv, name)) return 0;
    const int64_t B = 8, H = 12, T = 1024, D = 64;
    const weft_device cu = {WEFT_CUDA, 0};
    const weft_op_def *fwd = weft_op_find("causal_attention"), *bwd = weft_op_find("causal_attention_backward");
    weft_tensor *x[4] = {0}; // q, k, v, go
    for (int i = 0; i < 4; i++) {
        weft_tensor *r = weft_tensor_randn(WEFT_DIMS(B, H, T, D), WEFT_F32, NULL), *c = r ? weft_cast(r, dt) : NULL;
        x[i] = c ? weft_tensor_to(c, cu) : NULL;
        weft_tensor_free(r);
        weft_tensor_free(c);
    }
    weft_attrs at = {.f = {1 / sqrt((double)D)}};
    int fail = !fwd || !bwd || !x[0] || !x[1] || !x[2] || !x[3];
    // one untimed call first: with WEFT_ATTN_CUDNN=1, did cuDNN run every op of it (else no line)?
    int64_t runs0 = cudnn_runs();
    if (!fail) {
        weft_tensor *o[WEFT_MAX_OP_OUT] = {0}, *g[WEFT_MAX_OP_OUT] = {0};
        fail = weft_op_apply(fwd, 3, x, &at, o) != WEFT_OK;
        weft_tensor *in[6] = {x[0], x[1], x[2], o[0], o[1], x[3]};
        if (!fail && !fwd_only) fail = weft_op_apply(bwd, 6, in, &at, g) != WEFT_OK;
        for (int j = 0; j < WEFT_MAX_OP_OUT; j++) weft_tensor_free(o[j]), weft_tensor_free(g[j]);
    }
    const bool cudnn_short = cudnn_on() && cudnn_runs() - runs0 < (fwd_only ? 1 : 2);
    double s = 0;
    if (!fail && !cudnn_short)
        BENCH_BEST(s, 3, 10, 0.5, {
            weft_tensor *o[WEFT_MAX_OP_OUT] = {0}, *g[WEFT_MAX_OP_OUT] = {0};
            if (weft_op_apply(fwd, 3, x, &at, o) != WEFT_OK) fail = 1;
            weft_tensor *in[6] = {x[0], x[1], x[2], o[0], o[1], x[3]};
            if (!fail && !fwd_only && weft_op_apply(bwd, 6, in, &at, g) != WEFT_OK) fail = 1;
            weft_device_synchronize(cu);
            for (int j = 0; j < 3; j++) weft_tensor_free(o[j]), weft_tensor_free(g[j]);
        });
    if (fail) fprintf(stderr, "%s: %s\n", name, weft_last_error());
    else if (cudnn_short) fprintf(stderr, "%s: cuDNN did not run every op of this shape; nothing measured\n", name);
    else bench_report(name, (fwd_only ? 2.0 : 7.0) * B * H * (double)T * T * D / s * 1e-12, "TFLOP/s", 1);
    for (int i = 0; i < 4; i++) weft_tensor_free(x[i]);
    return fail;
}

int main(int argc, char **argv) {
    if (weft_device_count(WEFT_CUDA) < 1) {
        fprintf(stderr, "attention_cuda: no CUDA device; nothing measured\n");
        return 0;
    }
    int f = run(argc, argv, "attention_cuda_bf16", WEFT_BF16, false);
    f |= run(argc, argv, "attention_cuda_bf16_fwd", WEFT_BF16, true);
    setenv("WEFT_ATTN_FWD_ROWS", "128", 1);
    f |= run(argc, argv, "attention_cuda_bf16_rows128", WEFT_BF16, false);
    f |= run(argc, argv, "attention_cuda_bf16_rows128_fwd", WEFT_BF16, true);
    unsetenv("WEFT_ATTN_FWD_ROWS");
    setenv("WEFT_ATTN_BWD", "fused", 1);
    f |= run(argc, argv, "attention_cuda_bf16_onepass", WEFT_BF16, false);
    unsetenv("WEFT_ATTN_BWD");
    setenv("WEFT_ATTN_BWD_ROWS", "128", 1);
    f |= run(argc, argv, "attention_cuda_bf16_bwd128", WEFT_BF16, false);
    unsetenv("WEFT_ATTN_BWD_ROWS");
    setenv("WEFT_ATTN_CUDNN", "1", 1);
    f |= run(argc, argv, "attention_cuda_bf16_cudnn", WEFT_BF16, false);
    f |= run(argc, argv, "attention_cuda_bf16_cudnn_fwd", WEFT_BF16, true);
    setenv("WEFT_ATTN_CUDNN_DETERMINISTIC", "0", 1);
    f |= run(argc, argv, "attention_cuda_bf16_cudnn_nondet", WEFT_BF16, false);
    unsetenv("WEFT_ATTN_CUDNN_DETERMINISTIC");
    unsetenv("WEFT_ATTN_CUDNN");
    f |= run(argc, argv, "attention_cuda_f32", WEFT_F32, false);
    return f;
}
