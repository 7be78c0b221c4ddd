// CUDA kernels of the fused causal attention ops (attention_kernels.cu):
//   causal_attention           in: q, k, v (B,H,T,D); out: o (B,H,T,D), lse (B,H,T); f[0] = scale
//   causal_attention_backward  in: q, k, v, o, lse, go; out: gq, gk, gv (B,H,T,D); f[0] = scale
// f32 and f64; D up to 128 (above: WEFT_ERR_UNSUPPORTED naming the op).
// Inputs may be any strided view: the kernels read contiguous buffers, so
// the others get a contiguous device copy here.
#include "attention_kernels.h"
#include "cuda_ops.h"

#define ATTN_MAX_IN 6

// The op's inputs as contiguous tensors: each is the input itself or a copy (tmp).
typedef struct attn_in {
    const weft_tensor *t[ATTN_MAX_IN];
    weft_tensor *tmp[ATTN_MAX_IN];
    int n;
} attn_in;

static void attn_in_free(attn_in *c) {
    for (int i = 0; i < c->n; i++) weft_tensor_free(c->tmp[i]);
}

static weft_status attn_in_get(const weft_op_args *a, attn_in *c) {
    c->n = 0;
    if (a->n_in > ATTN_MAX_IN) return weft_error(WEFT_ERR_ARG, "%s: %d inputs", a->op->name, a->n_in);
    for (int i = 0; i < a->n_in; i++) {
        const weft_tensor *t = a->in[i];
        c->t[i] = t;
        c->tmp[i] = NULL;
        c->n = i + 1;
        if (weft_tensor_is_contiguous(t)) continue;
        weft_tensor *m = weft_tensor_new(t->ndim, t->sizes, (weft_dtype)t->dtype, t->device);
        if (!m || weft_cuda_copy(m, t) != WEFT_OK) {
            weft_status st = weft_last_status();
            weft_tensor_free(m);
            attn_in_free(c);
            return st;
        }
        c->t[i] = c->tmp[i] = m;
    }
    return WEFT_OK;
}

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

static weft_status cu_causal_attention(const weft_op_args *a) {
    int64_t BH = 0, T = 0, D = 0;
    weft_status st = attn_dims(a, &BH, &T, &D);
    if (st) return st;
    if (a->n_in != 3) return weft_error(WEFT_ERR_ARG, "%s: expected 3 inputs, got %d", a->op->name, a->n_in);
    if (BH == 0 || T == 0) return WEFT_OK;
    attn_in c;
    if ((st = attn_in_get(a, &c))) return st;
    cudaError_t e = weft_cu_causal_attention(weft_tensor_ptr(c.t[0]), weft_tensor_ptr(c.t[1]),
                                             weft_tensor_ptr(c.t[2]), weft_tensor_ptr(a->out[0]),
                                             weft_tensor_ptr(a->out[1]), a->in[0]->dtype, BH, T, D, a->attrs->f[0],
                                             weft_cu_stream(a->out[0]));
    attn_in_free(&c);
    return weft_cu_done(e, a->op->name);
}

static weft_status cu_causal_attention_backward(const weft_op_args *a) {
    int64_t BH = 0, T = 0, D = 0;
    weft_status st = attn_dims(a, &BH, &T, &D);
    if (st) return st;
    if (a->n_in != 6) return weft_error(WEFT_ERR_ARG, "%s: expected 6 inputs, got %d", a->op->name, a->n_in);
    if (BH == 0 || T == 0 || D == 0) return WEFT_OK; // every gradient is empty
    attn_in c;
    if ((st = attn_in_get(a, &c))) return st;
    int64_t n = BH * T;
    weft_tensor *dl = weft_tensor_new(1, &n, (weft_dtype)a->in[0]->dtype, a->in[0]->device); // Dl_i = go_i.o_i
    if (!dl) {
        attn_in_free(&c);
        return weft_last_status();
    }
    cudaError_t e = weft_cu_causal_attention_backward(
        weft_tensor_ptr(c.t[0]), weft_tensor_ptr(c.t[1]), weft_tensor_ptr(c.t[2]), weft_tensor_ptr(c.t[3]),
        weft_tensor_ptr(c.t[4]), weft_tensor_ptr(c.t[5]), weft_tensor_ptr(dl), weft_tensor_ptr(a->out[0]),
        weft_tensor_ptr(a->out[1]), weft_tensor_ptr(a->out[2]), a->in[0]->dtype, BH, T, D, a->attrs->f[0],
        weft_cu_stream(a->out[0]));
    weft_tensor_free(dl);
    attn_in_free(&c);
    return weft_cu_done(e, a->op->name);
}

void weft_cuda_register_attention(void) {
    weft_cu_register("causal_attention", cu_causal_attention, WEFT_DT_FLOAT);
    weft_cu_register("causal_attention_backward", cu_causal_attention_backward, WEFT_DT_FLOAT);
}
