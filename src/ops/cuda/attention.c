// CUDA kernels of the fused causal attention ops (attention_kernels.cu):
//   causal_attention           in: q, k, v (B,H,T,D); out: o (B,H,T,D), lse (B,H,T); f[0] = scale
//   causal_attention_backward  in: q, k, v, o, lse, go; out: gq, gk, gv (B,H,T,D); f[0] = scale
// f32 and f64 (attention_kernels.cu); bf16 and f16 on tensor cores with f32
// statistics (attention_mma_kernels.cu) where D is 16, 32, 64 or 128, and
// otherwise the f32 kernels on widened copies (lse is f32 for the half types).
// D up to 128 (above: WEFT_ERR_UNSUPPORTED naming the op).
// Inputs may be any strided view: the kernels read contiguous buffers, so
// the others get a contiguous device copy here.
#include <stdint.h>

#include "attention_kernels.h"
#include "cuda_ops.h"

// q (B,H,T,D) -> BH, T, D (infer has checked the shapes; kept safe anyway).
static weft_status attn_dims(const weft_op_args *a, int64_t *BH, int64_t *T, int64_t *D) {
    const weft_tensor *q = a->in[0];
    if (q->ndim != 4) return weft_error(WEFT_ERR_SHAPE, "%s: q must be 4-D (B,H,T,D)", a->op->name);
    *BH = q->sizes[0] * q->sizes[1];
    *T = q->sizes[2];
    *D = q->sizes[3];
    if (*D > 128)
        return weft_error(WEFT_ERR_UNSUPPORTED, "%s: the CUDA kernel handles head dims up to 128, got %lld",
                          a->op->name, (long long)*D);
    return WEFT_OK;
}

// The tensor-core kernels move q, k, v, go rows in 16-byte loads and write o, gq, gk, gv in 32-bit pairs, so
// every buffer must start 16-byte aligned. Fresh tensors and contiguous copies do (512-byte blocks), but a
// contiguous view at an element offset that is not a multiple of 8 (a narrowed flat buffer, reshaped) would
// not, and a misaligned access is a sticky error that ends the CUDA context: such inputs take the widened path.
static bool mma_aligned(const weft_kernel_inputs *c, const weft_op_args *a) {
    for (int i = 0; i < c->n; i++)
        if ((uintptr_t)weft_tensor_ptr(c->t[i]) & 15) return false;
    for (int j = 0; j < a->n_out; j++)
        if ((uintptr_t)weft_tensor_ptr(a->out[j]) & 15) return false;
    return true;
}

static weft_status cu_causal_attention(const weft_op_args *a) {
    int64_t BH = 0, T = 0, D = 0;
    weft_status st = attn_dims(a, &BH, &T, &D);
    if (st) return st;
    if (a->n_in != 3) return weft_error(WEFT_ERR_ARG, "%s: expected 3 inputs, got %d", a->op->name, a->n_in);
    if (BH == 0 || T == 0) return WEFT_OK;
    int dt = a->in[0]->dtype;
    if (weft_dtype_is_half(dt) && !weft_cu_attention_mma_supports(dt, D)) return weft_kernel_widened(a, cu_causal_attention);
    weft_kernel_inputs c;
    if ((st = weft_kernel_inputs_get(a, &c))) return st;
    if (weft_dtype_is_half(dt) && !mma_aligned(&c, a)) {
        weft_kernel_inputs_free(&c);
        return weft_kernel_widened(a, cu_causal_attention);
    }
    cudaError_t e = weft_dtype_is_half(dt) ? weft_cu_causal_attention_mma(weft_tensor_ptr(c.t[0]), weft_tensor_ptr(c.t[1]),
                                                               weft_tensor_ptr(c.t[2]), weft_tensor_ptr(a->out[0]),
                                                               (float *)weft_tensor_ptr(a->out[1]), dt, BH, T, D,
                                                               a->attrs->f[0], weft_cu_stream(a->out[0]))
                                : weft_cu_causal_attention(weft_tensor_ptr(c.t[0]), weft_tensor_ptr(c.t[1]),
                                             weft_tensor_ptr(c.t[2]), weft_tensor_ptr(a->out[0]),
                                             weft_tensor_ptr(a->out[1]), a->in[0]->dtype, BH, T, D, a->attrs->f[0],
                                             weft_cu_stream(a->out[0]));
    weft_kernel_inputs_free(&c);
    return weft_cu_done(e, a->op->name);
}

static weft_status cu_causal_attention_backward(const weft_op_args *a) {
    int64_t BH = 0, T = 0, D = 0;
    weft_status st = attn_dims(a, &BH, &T, &D);
    if (st) return st;
    if (a->n_in != 6) return weft_error(WEFT_ERR_ARG, "%s: expected 6 inputs, got %d", a->op->name, a->n_in);
    if (BH == 0 || T == 0 || D == 0) return WEFT_OK; // every gradient is empty
    int dt = a->in[0]->dtype;
    if (weft_dtype_is_half(dt) && !weft_cu_attention_mma_supports(dt, D))
        return weft_kernel_widened(a, cu_causal_attention_backward);
    weft_kernel_inputs c;
    if ((st = weft_kernel_inputs_get(a, &c))) return st;
    if (weft_dtype_is_half(dt) && !mma_aligned(&c, a)) {
        weft_kernel_inputs_free(&c);
        return weft_kernel_widened(a, cu_causal_attention_backward);
    }
    int64_t n = BH * T;
    weft_dtype dldt = weft_dtype_is_half(dt) ? WEFT_F32 : (weft_dtype)dt; // Dl_i = go_i.o_i, in lse's dtype
    weft_tensor *dl = weft_tensor_new(1, &n, dldt, a->in[0]->device);
    if (!dl) {
        weft_kernel_inputs_free(&c);
        return weft_last_status();
    }
    cudaError_t e = weft_dtype_is_half(dt) ? weft_cu_causal_attention_mma_backward(
        weft_tensor_ptr(c.t[0]), weft_tensor_ptr(c.t[1]), weft_tensor_ptr(c.t[2]), weft_tensor_ptr(c.t[3]),
        (const float *)weft_tensor_ptr(c.t[4]), weft_tensor_ptr(c.t[5]), (float *)weft_tensor_ptr(dl),
        weft_tensor_ptr(a->out[0]), weft_tensor_ptr(a->out[1]), weft_tensor_ptr(a->out[2]), dt, BH, T, D,
        a->attrs->f[0], weft_cu_stream(a->out[0])) : weft_cu_causal_attention_backward(
        weft_tensor_ptr(c.t[0]), weft_tensor_ptr(c.t[1]), weft_tensor_ptr(c.t[2]), weft_tensor_ptr(c.t[3]),
        weft_tensor_ptr(c.t[4]), weft_tensor_ptr(c.t[5]), weft_tensor_ptr(dl), weft_tensor_ptr(a->out[0]),
        weft_tensor_ptr(a->out[1]), weft_tensor_ptr(a->out[2]), a->in[0]->dtype, BH, T, D, a->attrs->f[0],
        weft_cu_stream(a->out[0]));
    weft_tensor_free(dl);
    weft_kernel_inputs_free(&c);
    return weft_cu_done(e, a->op->name);
}

void weft_cuda_register_attention(void) {
    const uint32_t dts = WEFT_DT_FLOAT | WEFT_DT_HALF;
    weft_cu_register("causal_attention", cu_causal_attention, dts);
    weft_cu_register("causal_attention_backward", cu_causal_attention_backward, dts);
}
