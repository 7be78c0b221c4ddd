// Pre-LayerNorm transformer block (GPT-2 style), x (B,T,C) -> (B,T,C):
//   x = x + attn(ln1(x))
//   x = x + mlp(ln2(x)),   mlp = proj(gelu(fc(.))), fc C->4C, proj 4C->C, GELU exact or tanh
// The first residual add and ln2 are one add_layer_norm op (one pass; the
// attention's bf16 output is read as it is under autocast). In a stack of
// blocks (weft_nn_transformer) the second add is the next block's: its ln1
// is an add_layer_norm too, and a layer norm after the stack folds the last
// one (weft_nn_transformer_pending).
// Children ln1, attn, ln2, mlp (mlp.fc, mlp.proj): PyTorch/nanoGPT names, so
// "attn.qkv.weight", "mlp.fc.bias", "ln1.weight" line up with a state_dict.

#include <stdlib.h>
#include <string.h>

#include <weft/nn.h>

#include "../core/core_impl.h"
#include "nn_impl.h"

// ---- mlp: fc -> gelu -> proj ----
// The module's impl points at its GELU's form (one of these), WEFT_ACT_GELU (exact) or WEFT_ACT_GELU_TANH.
static const weft_activation k_mlp_gelu = WEFT_ACT_GELU, k_mlp_gelu_tanh = WEFT_ACT_GELU_TANH;

weft_activation weft_nn_mlp_act(const weft_module *mlp) {
    const weft_activation *a = weft_module_impl(mlp);
    return a ? *a : WEFT_ACT_GELU;
}
weft_tensor *weft_nn_gelu_as(weft_activation act, weft_tensor *h) {
    return act == WEFT_ACT_GELU_TANH ? weft_gelu_tanh(h) : weft_gelu(h);
}

// fc's bias and GELU in one epilogue (weft_nn_linear_apply) where fc is a plain linear layer.
static weft_tensor *mlp_forward(weft_module *m, weft_tensor *x) {
    weft_module *fc = weft_module_child_at(m, 0);
    weft_activation act = weft_nn_mlp_act(m);
    bool used;
    weft_tensor *y0 = weft_nn_mlp_apply(x, fc, weft_module_child_at(m, 1), act == WEFT_ACT_GELU_TANH, &used);
    if (used) return y0;
    weft_tensor *a; // gelu(fc(x)), (B,T,4C)
    if (!strcmp(weft_module_kind(fc), "linear")) {
        a = weft_nn_linear_apply(x, weft_module_get(fc, "weight"), weft_module_get(fc, "bias"),
                                 act == WEFT_ACT_GELU_TANH ? WEFT_NN_GELU_TANH : WEFT_NN_GELU);
    } else {
        weft_tensor *h = weft_module_forward(fc, x);
        a = h ? weft_nn_gelu_as(act, h) : NULL;
        weft_tensor_free(h);
    }
    weft_tensor *y = a ? weft_module_forward(weft_module_child_at(m, 1), a) : NULL; // (B,T,C)
    weft_tensor_free(a);
    return y;
}

static weft_module *block_mlp(int64_t C, weft_activation act, weft_generator *g) {
    weft_module *m =
        weft_module_new("mlp", mlp_forward, (void *)(act == WEFT_ACT_GELU_TANH ? &k_mlp_gelu_tanh : &k_mlp_gelu), NULL);
    if (!m) return NULL;
    // Order matters: forward takes child 0 = fc, 1 = proj.
    if (weft_module_add_child(m, "fc", weft_nn_linear(C, 4 * C, true, g)) ||
        weft_module_add_child(m, "proj", weft_nn_linear(4 * C, C, true, g))) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}

// ---- the block ----
enum { CH_LN1, CH_ATTN, CH_LN2, CH_MLP }; // child indices, in insertion order

// The block's body with its last residual add left to the caller: the block's output is *x1 + *h. r is a
// residual still to be added to x (the block before's h) or NULL; ln1 then reads x + r from one
// add_layer_norm, so a stack of blocks never runs that add (or, under autocast, the cast of the mlp's bf16
// output) on its own.
// Under autocast a norm whose reader is this file's attention or mlp (each starts with a linear layer, which
// reads the autocast dtype) writes that dtype itself: no cast kernel either way (weft_nn_add_norm).
static weft_dtype norm_out_dtype(weft_module *reader) {
    const char *k = weft_module_kind(reader);
    weft_dtype ac = weft_autocast_get();
    return weft_nn_is_half(ac) && (!strcmp(k, "causal_self_attention") || !strcmp(k, "mlp")) ? ac : WEFT_F32;
}

static weft_status block_pending(weft_module *m, int ln1, int f, int ln2, int g, weft_tensor *x, weft_tensor *r,
                                 weft_tensor **x1, weft_tensor **h) {
    *x1 = *h = NULL;
    weft_tensor *xs = NULL; // the stream: x + r
    weft_dtype y1 = norm_out_dtype(weft_module_child_at(m, f)), y2 = norm_out_dtype(weft_module_child_at(m, g));
    weft_tensor *n1 = r ? weft_nn_add_norm(weft_module_child_at(m, ln1), x, r, &xs, y1)
                        : weft_nn_norm_to(weft_module_child_at(m, ln1), x, y1);
    if (n1 && !r) xs = weft_tensor_ref(x);
    weft_tensor *a = n1 ? weft_module_forward(weft_module_child_at(m, f), n1) : NULL;
    weft_tensor_free(n1);
    weft_tensor *n2 = a ? weft_nn_add_norm(weft_module_child_at(m, ln2), xs, a, x1, y2) : NULL; // x1 = xs + a
    weft_tensor_free(a);
    weft_tensor_free(xs);
    *h = n2 ? weft_module_forward(weft_module_child_at(m, g), n2) : NULL;
    weft_tensor_free(n2);
    if (*h) return WEFT_OK;
    weft_tensor_free(*x1);
    *x1 = NULL;
    return weft_last_status();
}

weft_tensor *weft_nn_prenorm_block(weft_module *m, int ln1, int f, int ln2, int g, weft_tensor *x) {
    weft_tensor *x1, *h;
    if (block_pending(m, ln1, f, ln2, g, x, NULL, &x1, &h)) return NULL;
    weft_tensor *x2 = weft_add(x1, h);
    weft_tensor_free(x1);
    weft_tensor_free(h);
    return x2;
}

static weft_status block_check(weft_module *m, const weft_tensor *x) {
    char buf[64];
    int64_t C = *(const int64_t *)weft_module_impl(m);
    if (weft_tensor_ndim(x) != 3 || weft_tensor_size(x, 2) != C)
        return weft_error(WEFT_ERR_SHAPE, "transformer_block: expected input (B,T,%lld), got %s", (long long)C,
                          weft_tensor_shape_str(x, buf, sizeof buf));
    return WEFT_OK;
}

static weft_tensor *block_forward(weft_module *m, weft_tensor *x) {
    if (block_check(m, x)) return NULL;
    return weft_nn_prenorm_block(m, CH_LN1, CH_ATTN, CH_LN2, CH_MLP, x);
}

weft_module *weft_nn_transformer_block(int64_t d_model, int64_t n_heads, weft_generator *g) {
    return weft_nn_transformer_block_act(d_model, n_heads, WEFT_ACT_GELU, g);
}

weft_module *weft_nn_transformer_block_act(int64_t d_model, int64_t n_heads, weft_activation act, weft_generator *g) {
    if (act != WEFT_ACT_GELU && act != WEFT_ACT_GELU_TANH)
        return weft_error_null(WEFT_ERR_ARG, "transformer_block: the mlp's activation is gelu or gelu_tanh (got %d)",
                               (int)act);
    if (d_model <= 0 || n_heads <= 0 || d_model % n_heads)
        return weft_error_null(WEFT_ERR_ARG,
                               "transformer_block: d_model %lld must be positive and divisible by n_heads %lld",
                               (long long)d_model, (long long)n_heads);
    int64_t *C = malloc(sizeof *C);
    if (!C) return weft_error_null(WEFT_ERR_OOM, "transformer_block: out of memory");
    *C = d_model;
    weft_module *m = weft_module_new("transformer_block", block_forward, C, free);
    if (!m) return NULL;
    if (weft_module_add_child(m, "ln1", weft_nn_layer_norm(d_model, 1e-5)) ||
        weft_module_add_child(m, "attn", weft_nn_causal_self_attention(d_model, n_heads, g)) ||
        weft_module_add_child(m, "ln2", weft_nn_layer_norm(d_model, 1e-5)) ||
        weft_module_add_child(m, "mlp", block_mlp(d_model, act, g))) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}

// ---- a stack of blocks ----
// The impl of every module weft_nn_transformer makes: how weft_nn_transformer_pending knows one.
static const char transformer_stack = 0;

weft_status weft_nn_transformer_pending(weft_module *stack, weft_tensor *x, weft_tensor **xo, weft_tensor **ho) {
    *xo = *ho = NULL;
    if (weft_module_impl(stack) != &transformer_stack)
        return weft_error(WEFT_ERR_ARG, "transformer: %s is not a stack of blocks", weft_module_kind(stack));
    weft_tensor *cx = weft_tensor_ref(x), *cr = NULL; // the stream so far: cx + cr (cr NULL: cx)
    for (int i = 0; i < weft_module_child_count(stack) && cx; i++) {
        weft_module *c = weft_module_child_at(stack, i);
        weft_tensor *nx = NULL, *nr = NULL;
        if (!strcmp(weft_module_kind(c), "transformer_block")) {
            if (!block_check(c, cx)) block_pending(c, CH_LN1, CH_ATTN, CH_LN2, CH_MLP, cx, cr, &nx, &nr);
        } else { // any other layer sees the stream summed
            weft_tensor *in = cr ? weft_add(cx, cr) : weft_tensor_ref(cx);
            nx = in ? weft_module_forward(c, in) : NULL;
            weft_tensor_free(in);
        }
        weft_tensor_free(cx);
        weft_tensor_free(cr);
        cx = nx, cr = nr;
    }
    if (!cx) return weft_last_status();
    *xo = cx, *ho = cr;
    return WEFT_OK;
}

static weft_tensor *stack_forward(weft_module *m, weft_tensor *x) {
    weft_tensor *x1, *h;
    if (weft_nn_transformer_pending(m, x, &x1, &h)) return NULL;
    if (!h) return x1;
    weft_tensor *y = weft_add(x1, h);
    weft_tensor_free(x1);
    weft_tensor_free(h);
    return y;
}

weft_module *weft_nn_transformer(int64_t d_model, int64_t n_heads, int n_blocks, weft_generator *g) {
    return weft_nn_transformer_act(d_model, n_heads, n_blocks, WEFT_ACT_GELU, g);
}

weft_module *weft_nn_transformer_act(int64_t d_model, int64_t n_heads, int n_blocks, weft_activation act,
                                     weft_generator *g) {
    if (n_blocks <= 0) return weft_error_null(WEFT_ERR_ARG, "transformer: blocks = %d must be positive", n_blocks);
    // kind "sequential": a pipeline splits it into its blocks like any sequential (each then adds its own residual)
    weft_module *m = weft_module_new("sequential", stack_forward, (void *)&transformer_stack, NULL);
    for (int i = 0; m && i < n_blocks; i++)
        if (weft_nn_sequential_append(m, weft_nn_transformer_block_act(d_model, n_heads, act, g))) {
            weft_module_free(m);
            return NULL;
        }
    return m;
}

bool weft_nn_is_transformer(const weft_module *m) { return weft_module_impl(m) == &transformer_stack; }
