// Helpers shared by the layer files.
#ifndef WEFT_NN_IMPL_H
#define WEFT_NN_IMPL_H

#include <weft/nn.h>

// Adds an f32 parameter of the given shape drawn from U(-bound, bound) (the
// PyTorch default init of linear, conv and LSTM layers).
weft_status weft_nn_add_uniform_param(weft_module *m, const char *name, int ndim, const int64_t *sizes, double bound,
                                      weft_generator *g);

// The heads of causal self-attention, shared by weft_nn_causal_self_attention
// and its tensor-parallel form (src/dist/tp_layers.c, which holds nh of the
// heads): qkv (B,T,3*nh*hd) -> q, k, v -> softmax(q k^T / sqrt(hd) + causal
// mask) v -> (B,T,nh*hd), heads merged. The packed fused op,
// weft_causal_attention_qkv (composed ops with WEFT_FUSED_ATTENTION=0). *mask_cache keeps the (T,T) mask of the
// composed path between calls (the caller frees it).
weft_tensor *weft_nn_attention_heads(weft_tensor *qkv, int64_t nh, int64_t hd, weft_tensor **mask_cache);

// Layer pieces the tensor-parallel layers (src/dist/tp_layers.c) share:
// y = x W^T (+ b) with m's "weight" (out,in) and "bias"; and a pre-LayerNorm
// block x1 = x + f(ln1(x)), x2 = x1 + g(ln2(x1)) with m's children at those
// indices, the first add and ln2 in one add_layer_norm (weft_nn_add_norm).
weft_tensor *weft_nn_affine(weft_module *m, weft_tensor *x, bool with_bias);
// x w^T + b (b may be NULL), then act: WEFT_NN_NO_ACT, or GELU, exact or tanh; the fused linear op where it
// applies, else matmul, add and gelu.
enum { WEFT_NN_NO_ACT, WEFT_NN_GELU, WEFT_NN_GELU_TANH };
weft_tensor *weft_nn_linear_apply(weft_tensor *x, weft_tensor *w, weft_tensor *b, int act);
// GELU in the form a block's mlp module m uses (WEFT_ACT_GELU or WEFT_ACT_GELU_TANH; weft_nn_mlp_act says
// which), and h through it.
weft_activation weft_nn_mlp_act(const weft_module *mlp);
// proj(gelu(fc(x))) for two plain linear layers where the fused linear op applies: linear_gelu keeps its
// pre-activation h and proj runs gelu_linear(h, gelu(h), ...), so GELU's backward happens inside proj's
// backward product (WEFT_FUSED_GELU_BW=0: not used). *used false (and NULL): the caller runs the layers.
weft_tensor *weft_nn_mlp_apply(weft_tensor *x, weft_module *fc, weft_module *proj, bool tanh_form, bool *used);
weft_tensor *weft_nn_gelu_as(weft_activation act, weft_tensor *h);
weft_tensor *weft_nn_prenorm_block(weft_module *m, int ln1, int f, int ln2, int g, weft_tensor *x);
// norm(x + r), with *sum = x + r (a new reference): one add_layer_norm op
// where norm is a layer_norm module (WEFT_FUSED_ADD_NORM=0: the add, then the
// module). NULL (and *sum NULL) on error. y_dtype: bf16 / f16 has a
// layer_norm module write its output in that dtype (weft_layer_norm_to: for a
// linear layer reading it under autocast; WEFT_NORM_HALF_OUT=0 turns it off),
// anything else the module's own dtype; weft_nn_norm_to is the same without
// the add.
weft_tensor *weft_nn_add_norm(weft_module *norm, weft_tensor *x, weft_tensor *r, weft_tensor **sum,
                              weft_dtype y_dtype);
weft_tensor *weft_nn_norm_to(weft_module *norm, weft_tensor *x, weft_dtype y_dtype);
static inline bool weft_nn_is_half(weft_dtype d) { return d == WEFT_BF16 || d == WEFT_F16; }

// The stream through a stack of transformer blocks (weft_nn_transformer) with the last residual add left to
// the caller, so a layer norm after the stack can take it in one add_layer_norm: the stack's output is
// *x1 + *h (*h NULL: *x1 alone). New references; an error for any other module.
weft_status weft_nn_transformer_pending(weft_module *stack, weft_tensor *x, weft_tensor **x1, weft_tensor **h);
bool weft_nn_is_transformer(const weft_module *m);

// m's table (borrowed) where m is a module weft_nn_embedding made, else NULL: a layer that folds the
// lookup into its own first product (the LSTM) needs to know that its input is rows of this table.
weft_tensor *weft_nn_embedding_table(const weft_module *m);

#endif
