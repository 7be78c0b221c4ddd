// Multi-head causal self-attention, x (B,T,C) -> (B,T,C), as in GPT-2 / nanoGPT:
//   q,k,v = split(qkv(x))                      each (B,T,C)
//   -> (B,nh,T,hd) heads (hd = C/nh)
//   att = softmax(q k^T / sqrt(hd) + mask)     (B,nh,T,T), mask -inf above the diagonal
//   y = att v -> (B,T,C) -> proj(y)
// Children "qkv" (linear C->3C) and "proj" (linear C->C), named as PyTorch's
// nanoGPT. Built from public ops only.
//
// The heads go through the packed fused op, y = weft_causal_attention_qkv(qkv,
// nh, 1/sqrt(hd)): it reads q, k and v as views of the one (B,T,3C) product,
// writes y with the heads merged, (B,T,C), and sends back one (B,T,3C)
// gradient, so the qkv layer is one product each way and no slice gradient is
// zero-filled and added. No (T,T) score tensor is kept; its CPU kernel reads
// the heads where they lie and skips the masked blocks. WEFT_FUSED_ATTENTION=0
// in the environment runs the composed ops instead, on any device (split,
// matmul, mask add, softmax, matmul, and a copy merging the heads). The
// tensor-parallel attention (tp_layers.c) shares weft_nn_attention_heads.
// tests/nn/test_seq.c checks the module against PyTorch,
// test_fused_attention.c the two paths against each other.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weft/nn.h>

#include "../core/core_impl.h"
#include "nn_impl.h"

typedef struct attn_impl {
    int64_t d_model, n_heads;
    weft_tensor *mask; // cached (T,T) causal mask for the last T and dtype
} attn_impl;

static void attn_impl_free(void *p) {
    attn_impl *a = p;
    if (!a) return;
    weft_tensor_free(a->mask);
    free(a);
}

// (T,T) tensor: 0 on and below the diagonal, -inf above (position t sees s <= t).
// Cached in *cache: it depends only on T, the dtype and the device.
static weft_tensor *causal_mask(weft_tensor **cache, int64_t T, weft_dtype dt, weft_device dev) {
    weft_tensor *c = *cache;
    if (c && weft_tensor_size(c, 0) == T && weft_tensor_dtype(c) == dt && weft_tensor_device(c).type == dev.type &&
        weft_tensor_device(c).index == dev.index)
        return c;
    weft_tensor_free(c);
    *cache = NULL;
    if (dt != WEFT_F32 && dt != WEFT_F64)
        return weft_error_null(WEFT_ERR_DTYPE, "causal_self_attention: input must be f32 or f64");
    size_t es = dt == WEFT_F32 ? sizeof(float) : sizeof(double);
    void *host = malloc((size_t)(T * T) * es);
    if (!host) return weft_error_null(WEFT_ERR_OOM, "causal_self_attention: out of memory");
    for (int64_t i = 0; i < T; i++) // (T,T)
        for (int64_t j = 0; j < T; j++) {
            double v = j > i ? -INFINITY : 0.0;
            if (dt == WEFT_F32) ((float *)host)[i * T + j] = (float)v;
            else ((double *)host)[i * T + j] = v;
        }
    int64_t sz[2] = {T, T};
    weft_tensor *m = weft_tensor_empty_on(2, sz, dt, WEFT_DEVICE_CPU);
    if (m) memcpy(weft_tensor_data(m), host, (size_t)(T * T) * es);
    free(host);
    if (m && (weft_tensor_device(m).type != dev.type || weft_tensor_device(m).index != dev.index)) {
        weft_tensor *md = weft_tensor_to(m, dev);
        weft_tensor_free(m);
        m = md;
    }
    *cache = m;
    return m;
}

// The fused op, except with WEFT_FUSED_ATTENTION=0 (read at every call).
static bool use_fused(void) {
    const char *e = getenv("WEFT_FUSED_ATTENTION");
    return !(e && !strcmp(e, "0"));
}

// softmax(q k^T / sqrt(hd) + mask) v: q, v (B,nh,T,hd), kt (B,nh,hd,T), mask (T,T) -> (B,nh,T,hd).
static weft_tensor *composed_heads(weft_tensor *const *heads, weft_tensor *mask, int64_t hd) {
    // Scale q (B*T*C elements) rather than the scores (B*nh*T*T): fewer flops when T > hd.
    weft_tensor *qs = weft_mul_scalar(heads[0], 1.0 / sqrt((double)hd));
    weft_tensor *s = weft_matmul(qs, heads[1]); // (B,nh,T,T)
    weft_tensor_free(qs);
    weft_tensor *sm = weft_add(s, mask); // mask broadcasts over (B,nh)
    weft_tensor_free(s);
    weft_tensor *att = weft_softmax(sm, -1); // masked entries are exact zeros
    weft_tensor_free(sm);
    weft_tensor *y = weft_matmul(att, heads[2]); // (B,nh,T,hd)
    weft_tensor_free(att);
    return y;
}

// The composed path: qkv (B,T,3C) split into q, k, v (B,T,C) views -> the heads' attention merged to (B,T,C).
static weft_tensor *composed_attention(weft_tensor *qkv, int64_t nh, int64_t hd, weft_tensor **mask_cache) {
    int64_t B = weft_tensor_size(qkv, 0), T = weft_tensor_size(qkv, 1), C = nh * hd;
    weft_dtype dt = weft_tensor_dtype(qkv);
    // bf16 / f16 heads (under autocast) take an f32 mask: the scores are promoted to f32 by the add
    weft_tensor *mask = causal_mask(mask_cache, T, dt == WEFT_F64 ? WEFT_F64 : WEFT_F32, weft_tensor_device(qkv));
    weft_tensor *parts[3] = {NULL, NULL, NULL};
    if (!mask || weft_split(qkv, 2, 3, (const int64_t[]){C, C, C}, parts) != WEFT_OK) return NULL;
    // (B,T,C) -> (B,T,nh,hd) views -> q,v (B,nh,T,hd), k^T (B,nh,hd,T)
    weft_tensor *heads[3];
    static const int perm_qv[4] = {0, 2, 1, 3}, perm_kt[4] = {0, 2, 3, 1};
    for (int p = 0; p < 3; p++) {
        weft_tensor *v4 = weft_view(parts[p], WEFT_DIMS(B, T, nh, hd));
        heads[p] = weft_permute(v4, p == 1 ? perm_kt : perm_qv);
        weft_tensor_free(v4);
        weft_tensor_free(parts[p]);
    }
    weft_tensor *y = composed_heads(heads, mask, hd); // (B,nh,T,hd)
    for (int p = 0; p < 3; p++) weft_tensor_free(heads[p]);
    if (!y) return NULL;
    weft_tensor *yt = weft_transpose(y, 1, 2); // (B,T,nh,hd) view
    weft_tensor_free(y);
    weft_tensor *ym = weft_reshape(yt, WEFT_DIMS(B, T, C)); // the one copy: heads merged
    weft_tensor_free(yt);
    return ym;
}

// The module's input and the heads': f32 or f64, or bf16 / f16 (under autocast the block's norm writes that for
// the qkv product, and the qkv product gives it to the heads).
static weft_status check_dtype(weft_tensor *t) {
    weft_dtype dt = weft_tensor_dtype(t);
    if (dt != WEFT_F32 && dt != WEFT_F64 && dt != WEFT_BF16 && dt != WEFT_F16)
        return weft_error(WEFT_ERR_DTYPE,
                          "causal_self_attention: input must be f32 or f64 (bf16 or f16 under autocast)");
    return WEFT_OK;
}

weft_tensor *weft_nn_attention_heads(weft_tensor *qkv, int64_t nh, int64_t hd, weft_tensor **mask_cache) {
    char buf[64];
    if (!qkv) return NULL;
    int64_t C = nh * hd;
    if (weft_tensor_ndim(qkv) != 3 || weft_tensor_size(qkv, 2) != 3 * C)
        return weft_error_null(WEFT_ERR_SHAPE, "causal_self_attention: expected qkv (B,T,%lld), got %s",
                               (long long)(3 * C), weft_tensor_shape_str(qkv, buf, sizeof buf));
    if (check_dtype(qkv)) return NULL;
    if (use_fused()) // the heads merged by the op, its gradient one (B,T,3C) tensor
        return weft_causal_attention_qkv(qkv, nh, 1.0 / sqrt((double)hd));
    return composed_attention(qkv, nh, hd, mask_cache);
}

static weft_tensor *attn_forward(weft_module *m, weft_tensor *x) {
    attn_impl *a = weft_module_impl(m);
    char buf[64];
    int64_t C = a->d_model, nh = a->n_heads;
    if (weft_tensor_ndim(x) != 3 || weft_tensor_size(x, 2) != C)
        return weft_error_null(WEFT_ERR_SHAPE, "causal_self_attention: expected input (B,T,%lld), got %s",
                               (long long)C, weft_tensor_shape_str(x, buf, sizeof buf));
    if (check_dtype(x)) return NULL;
    weft_tensor *qkv = weft_module_forward(weft_module_child_at(m, 0), x); // one product: (B,T,3C)
    weft_tensor *ym = weft_nn_attention_heads(qkv, nh, C / nh, &a->mask);
    weft_tensor_free(qkv);
    weft_tensor *out = ym ? weft_module_forward(weft_module_child_at(m, 1), ym) : NULL;
    weft_tensor_free(ym);
    return out;
}

weft_module *weft_nn_causal_self_attention(int64_t d_model, int64_t n_heads, weft_generator *g) {
    if (d_model <= 0 || n_heads <= 0 || d_model % n_heads)
        return weft_error_null(WEFT_ERR_ARG,
                               "causal_self_attention: d_model %lld must be positive and divisible by n_heads %lld",
                               (long long)d_model, (long long)n_heads);
    attn_impl *a = calloc(1, sizeof *a);
    if (!a) return weft_error_null(WEFT_ERR_OOM, "causal_self_attention: out of memory");
    a->d_model = d_model;
    a->n_heads = n_heads;
    weft_module *m = weft_module_new("causal_self_attention", attn_forward, a, attn_impl_free);
    if (!m) return NULL;
    // Child order matters: forward looks them up by index (0 = qkv, 1 = proj).
    if (weft_module_add_child(m, "qkv", weft_nn_linear(d_model, 3 * d_model, true, g)) ||
        weft_module_add_child(m, "proj", weft_nn_linear(d_model, d_model, true, g))) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}
