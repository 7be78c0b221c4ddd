// Multi-head causal self-attention, x (B,T,C) -> (B,T,C), as in GPT-2 / nanoGPT:
//   q,k,v = split(qkv(x))                      each (B,T,C), views
//   -> (B,nh,T,hd) views (hd = C/nh)
//   att = softmax(q k^T / sqrt(hd) + mask)     (B,nh,T,T), mask -inf above the diagonal
//   y = att v -> (B,T,C) -> proj(y)
// Children "qkv" (linear C->3C) and "proj" (linear C->C), named as PyTorch's
// nanoGPT. Built from public ops only.
//
// q, k and v come from three products on row blocks (narrow views) of the
// qkv layer's weight and bias, so no (B,T,3C) tensor is split (whose backward
// would add three zero-filled (B,T,3C) gradients); the head split is views,
// which matmul hands to BLAS as row-major / transposed matrices. The fused
// op writes its output with the heads last, (B,T,nh,hd), so the merge before
// proj is a view (the composed path copies (B,nh,T,hd) -> (B,T,C) there). (The tensor-parallel
// attention, tp_layers.c, splits its (B,T,3C) output: weft_nn_attention_heads.)
//
// The heads go through the fused op, y = weft_causal_attention_heads_last(q,
// k, v, 1/sqrt(hd)) on those (B,nh,T,hd) views (k untransposed), no (T,T) score
// tensor kept; its CPU kernel reads the views where they lie and skips the
// masked blocks. WEFT_FUSED_ATTENTION=0 in the environment runs the composed
// ops instead on the CPU (matmul, mask add, softmax, matmul: 5% slower for
// kjv-gpt on 2026-11-27). tests/nn/test_seq.c checks the module against
// PyTorch, test_fused_attention.c the two paths against each other.
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

// The fused op, except on the CPU with WEFT_FUSED_ATTENTION=0 (read at every call).
static bool use_fused(weft_device dev) {
    if (dev.type == WEFT_CUDA) return true;
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

// q, k, v (B,T,C) each (any strides) -> the heads' attention merged back to (B,T,C).
static weft_tensor *attention_heads3(weft_tensor *const *qkv3, int64_t nh, int64_t hd, weft_tensor **mask_cache) {
    int64_t B = weft_tensor_size(qkv3[0], 0), T = weft_tensor_size(qkv3[0], 1), C = nh * hd;
    weft_dtype dt = weft_tensor_dtype(qkv3[0]);
    bool fused = use_fused(weft_tensor_device(qkv3[0]));
    // bf16 / f16 heads (under autocast) take an f32 mask: the scores are promoted to f32 by the add
    weft_dtype mdt = dt == WEFT_F64 ? WEFT_F64 : WEFT_F32;
    weft_tensor *mask = fused ? NULL : causal_mask(mask_cache, T, mdt, weft_tensor_device(qkv3[0]));
    if (!fused && !mask) return NULL;
    // (B,T,C) -> (B,T,nh,hd) views -> q,v (B,nh,T,hd), k^T (B,nh,hd,T) (fused: k (B,nh,T,hd))
    weft_tensor *heads[3];
    static const int perm_qv[4] = {0, 2, 1, 3}, perm_kt[4] = {0, 2, 3, 1};
    for (int p = 0; p < 3; p++) {
        weft_tensor *v4 = weft_view(qkv3[p], WEFT_DIMS(B, T, nh, hd));
        heads[p] = weft_permute(v4, p == 1 && !fused ? perm_kt : perm_qv);
        weft_tensor_free(v4);
    }
    if (fused) { // the output with the heads last, (B,T,nh,hd): merged into (B,T,C) by a view, no copy
        weft_tensor *y = weft_causal_attention_heads_last(heads[0], heads[1], heads[2], 1.0 / sqrt((double)hd));
        for (int p = 0; p < 3; p++) weft_tensor_free(heads[p]);
        weft_tensor *ym = y ? weft_view(y, WEFT_DIMS(B, T, C)) : NULL;
        weft_tensor_free(y);
        return ym;
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

// The module's input: f32 or f64 (under autocast the q, k, v products give bf16 / f16, which the heads take).
static weft_status check_dtype(weft_tensor *t, bool half_ok) {
    weft_dtype dt = weft_tensor_dtype(t);
    if (dt != WEFT_F32 && dt != WEFT_F64 && !(half_ok && (dt == WEFT_BF16 || dt == WEFT_F16)))
        return weft_error(WEFT_ERR_DTYPE, "causal_self_attention: input must be f32 or f64%s",
                          half_ok ? " (bf16 or f16 under autocast)" : "");
    return WEFT_OK;
}

weft_tensor *weft_nn_attention_heads(weft_tensor *qkv, int64_t nh, int64_t hd, weft_tensor **mask_cache) {
    char buf[64];
    if (!qkv) return NULL;
    int64_t C = nh * hd;
    if (weft_tensor_ndim(qkv) != 3 || weft_tensor_size(qkv, 2) != 3 * C)
        return weft_error_null(WEFT_ERR_SHAPE, "causal_self_attention: expected qkv (B,T,%lld), got %s",
                               (long long)(3 * C), weft_tensor_shape_str(qkv, buf, sizeof buf));
    if (check_dtype(qkv, true)) return NULL;
    weft_tensor *parts[3] = {NULL, NULL, NULL};
    if (weft_split(qkv, 2, 3, (const int64_t[]){C, C, C}, parts) != WEFT_OK) return NULL;
    weft_tensor *y = attention_heads3(parts, nh, hd, mask_cache);
    for (int p = 0; p < 3; p++) weft_tensor_free(parts[p]);
    return y;
}

// q, k, v = x W_p^T + b_p for the three row blocks p of the qkv layer's
// weight (3C,C) and bias (3C): three products on narrow views of the
// parameters instead of one product split afterwards. The backward then sums
// three (B,T,C) input gradients and writes three slices of the small weight
// gradient, where the split of the (B,T,3C) output gave three zero-filled
// (B,T,3C) gradients to add (a fifth of the attention's memory traffic).
static weft_status qkv_project(weft_module *lin, weft_tensor *x_in, int64_t C, weft_tensor **out) {
    weft_tensor *w = weft_module_get(lin, "weight"), *b = weft_module_get(lin, "bias");
    for (int p = 0; p < 3; p++) out[p] = NULL;
    // under autocast x is cast down once, not by each of the three products
    weft_dtype ac = weft_autocast_get();
    bool down = ac != WEFT_F32 && weft_tensor_dtype(x_in) == WEFT_F32;
    weft_tensor *x = down ? weft_cast(x_in, ac) : weft_tensor_ref(x_in);
    if (!x) return weft_last_status();
    for (int p = 0; p < 3; p++) {
        weft_tensor *wp = weft_narrow(w, 0, p * C, C), *bp = b ? weft_narrow(b, 0, p * C, C) : NULL;
        out[p] = wp && (bp || !b) ? weft_nn_linear_apply(x, wp, bp, false) : NULL;
        weft_tensor_free(wp);
        weft_tensor_free(bp);
        if (!out[p]) {
            for (int j = 0; j < p; j++) weft_tensor_free(out[j]);
            weft_tensor_free(x);
            return weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
        }
    }
    weft_tensor_free(x);
    return WEFT_OK;
}

static weft_tensor *attn_forward(weft_module *m, weft_tensor *x) {
    attn_impl *a = weft_module_impl(m);
    char buf[64];
    int64_t C = a->d_model, nh = a->n_heads;
    if (weft_tensor_ndim(x) != 3 || weft_tensor_size(x, 2) != C)
        return weft_error_null(WEFT_ERR_SHAPE, "causal_self_attention: expected input (B,T,%lld), got %s",
                               (long long)C, weft_tensor_shape_str(x, buf, sizeof buf));
    if (check_dtype(x, false)) return NULL;
    weft_tensor *q3[3]; // child 0, the qkv linear layer, as three products
    if (qkv_project(weft_module_child_at(m, 0), x, C, q3)) return NULL;
    weft_tensor *ym = attention_heads3(q3, nh, C / nh, &a->mask);
    for (int p = 0; p < 3; p++) weft_tensor_free(q3[p]);
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
