// weft/nn.h — layers (modules) with named parameters.
//
// A module owns its parameters (leaf tensors that require grad), its buffers
// (state that is saved but not trained, e.g. batch_norm's running stats) and
// its children. Names are dotted paths, as in PyTorch's state_dict:
// "blocks.0.attn.qkv.weight". Initialisation is seeded through a generator,
// so a run is reproducible.
#ifndef WEFT_NN_H
#define WEFT_NN_H

#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_module weft_module;

// ---- using a module ----
// y = m(x); a new reference, or NULL with weft_last_error() set.
weft_tensor *weft_module_forward(weft_module *m, weft_tensor *x);
void weft_module_free(weft_module *m); // frees children, parameters and buffers
// Training vs evaluation mode (dropout, batch_norm); applies to all children.
void weft_module_set_training(weft_module *m, bool training);
bool weft_module_is_training(const weft_module *m);
const char *weft_module_kind(const weft_module *m); // "linear", "sequential", ...

// Parameters of m and all its children, depth first in insertion order.
// name receives the dotted path (may be NULL). Returns a borrowed tensor.
int weft_module_param_count(const weft_module *m);
weft_tensor *weft_module_param_at(const weft_module *m, int i, char *name, size_t name_len);
// Buffers, the same way.
int weft_module_buffer_count(const weft_module *m);
weft_tensor *weft_module_buffer_at(const weft_module *m, int i, char *name, size_t name_len);
// A parameter or buffer by dotted name (borrowed), NULL if none.
weft_tensor *weft_module_find(const weft_module *m, const char *dotted_name);
// Total number of parameter elements.
int64_t weft_module_num_elements(const weft_module *m);
// Drop the gradients of all parameters.
void weft_module_zero_grad(weft_module *m);
// Converts every floating-point parameter and buffer of m and its children to
// dt (as PyTorch's module.double()): each becomes a new tensor (parameters
// stay leaves that require grad; gradients are dropped). Borrowed pointers
// from weft_module_param_at are stale afterwards.
weft_status weft_module_to_dtype(weft_module *m, weft_dtype dt);

// ---- writing a module ----
typedef weft_tensor *(*weft_module_forward_fn)(weft_module *m, weft_tensor *x);
// impl is the layer's private state (freed with impl_free, may be NULL).
weft_module *weft_module_new(const char *kind, weft_module_forward_fn forward, void *impl, void (*impl_free)(void *));
// Takes ownership of t; parameters are made leaves that require grad.
weft_status weft_module_add_param(weft_module *m, const char *name, weft_tensor *t);
weft_status weft_module_add_buffer(weft_module *m, const char *name, weft_tensor *t);
// Takes ownership of child.
weft_status weft_module_add_child(weft_module *m, const char *name, weft_module *child);
weft_tensor *weft_module_get(const weft_module *m, const char *local_name); // own param/buffer (borrowed)
int weft_module_child_count(const weft_module *m);
weft_module *weft_module_child_at(const weft_module *m, int i); // borrowed
void *weft_module_impl(const weft_module *m);
// A module may compute m(prev(x)) from prev's input x in one go where that is cheaper than running prev and
// then m (the LSTM after an embedding: one product with the table instead of one per token). A sequential
// asks each child whether it folds the child before it. fold sets *out to m(prev(x)) and returns WEFT_OK, or
// leaves *out NULL and returns WEFT_OK where it does not apply; an error status is an error of the forward.
typedef weft_status (*weft_module_fold_fn)(weft_module *m, weft_module *prev, weft_tensor *x, weft_tensor **out);
void weft_module_set_fold(weft_module *m, weft_module_fold_fn fold);

// ---- initialisation (in place, seeded; g NULL = default generator) ----
// fan_in/fan_out of a weight: linear (out,in) -> in/out; conv (O,C,KH,KW) -> C*KH*KW / O*KH*KW.
weft_status weft_init_uniform(weft_tensor *t, double lo, double hi, weft_generator *g);
weft_status weft_init_normal(weft_tensor *t, double mean, double std, weft_generator *g);
weft_status weft_init_kaiming_uniform(weft_tensor *t, double gain, weft_generator *g); // bound = gain*sqrt(3/fan_in)
weft_status weft_init_kaiming_normal(weft_tensor *t, double gain, weft_generator *g);  // std = gain/sqrt(fan_in)
weft_status weft_init_xavier_uniform(weft_tensor *t, double gain, weft_generator *g);  // bound = gain*sqrt(6/(fan_in+fan_out))
weft_status weft_init_xavier_normal(weft_tensor *t, double gain, weft_generator *g);   // std = gain*sqrt(2/(fan_in+fan_out))

// ---- containers ----
weft_module *weft_nn_sequential(void); // children "0", "1", ... applied in order
weft_status weft_nn_sequential_append(weft_module *seq, weft_module *m); // takes ownership

// ---- layers (parameter names follow PyTorch) ----
// weight (out,in), bias (out); PyTorch's default init: U(-1/sqrt(in), 1/sqrt(in)).
weft_module *weft_nn_linear(int64_t in, int64_t out, bool bias, weft_generator *g);
// weight (cout,cin/groups,kh,kw), bias (cout); init as PyTorch (U(+-1/sqrt(fan_in))). p may be NULL.
weft_module *weft_nn_conv2d(int64_t cin, int64_t cout, int kh, int kw, const weft_conv2d_params *p, bool bias,
                            weft_generator *g);
// ConvTranspose2d: weight (cin,cout/groups,kh,kw), bias (cout); init as PyTorch (U(+-1/sqrt(fan_in)), fan_in =
// cout/groups * kh * kw). p may be NULL.
weft_module *weft_nn_conv_transpose2d(int64_t cin, int64_t cout, int kh, int kw,
                                      const weft_conv_transpose2d_params *p, bool bias, weft_generator *g);
weft_module *weft_nn_max_pool2d(const weft_pool2d_params *p);
weft_module *weft_nn_avg_pool2d(const weft_pool2d_params *p);
// weight (C) = 1, bias (C) = 0; buffers running_mean (C) = 0, running_var (C) = 1.
weft_module *weft_nn_batch_norm(int64_t channels, double momentum, double eps);
// Normalises the last dim: weight (dim) = 1, bias (dim) = 0.
weft_module *weft_nn_layer_norm(int64_t dim, double eps);
// Identity in eval mode. g NULL: the default generator.
weft_module *weft_nn_dropout(double p, weft_generator *g);
// weight (num,dim) ~ N(0,1); indices (...) int32/int64 -> (..., dim).
weft_module *weft_nn_embedding(int64_t num, int64_t dim, weft_generator *g);
// (N, ...) -> (N, prod(...)).
weft_module *weft_nn_flatten(void);
typedef enum weft_activation {
    WEFT_ACT_RELU,
    WEFT_ACT_GELU,
    WEFT_ACT_TANH,
    WEFT_ACT_SIGMOID,
    WEFT_ACT_SILU,
    WEFT_ACT_GELU_TANH // GELU's tanh approximation (PyTorch's nn.GELU(approximate='tanh'), GPT-2's)
} weft_activation;
weft_module *weft_nn_activation(weft_activation a);
// nn.LeakyReLU(slope): x where x > 0, slope x elsewhere.
weft_module *weft_nn_leaky_relu(double slope);

// ---- sequence models (batch first) ----
// One layer, x (B,T,I) -> all hidden states (B,T,H), zero initial state. PyTorch's
// names and gate order (i,f,g,o): weight_ih (4H,I), weight_hh (4H,H), bias_ih, bias_hh (4H),
// init U(+-1/sqrt(H)).
weft_module *weft_nn_lstm(int64_t input, int64_t hidden, weft_generator *g);
// nn.GRU: gate order (r,z,n), weight_ih (3H,I), weight_hh (3H,H), bias_ih, bias_hh (3H),
// n = tanh(x W_in^T + b_in + r*(h W_hn^T + b_hn)), h' = (1-z)*n + z*h; init U(+-1/sqrt(H)).
weft_module *weft_nn_gru(int64_t input, int64_t hidden, weft_generator *g);
// nn.RNN (Elman): h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh), act WEFT_ACT_TANH or WEFT_ACT_RELU;
// weight_ih (H,I), weight_hh (H,H), bias_ih, bias_hh (H); init U(+-1/sqrt(H)).
weft_module *weft_nn_rnn(int64_t input, int64_t hidden, weft_activation act, weft_generator *g);
// Multi-head causal self-attention, x (B,T,C) -> (B,T,C): children "qkv" (linear C->3C)
// and "proj" (linear C->C); position t attends to positions <= t.
weft_module *weft_nn_causal_self_attention(int64_t d_model, int64_t n_heads, weft_generator *g);
// Pre-LayerNorm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x)) with
// mlp = linear C->4C ("mlp.fc"), GELU, linear 4C->C ("mlp.proj"). Children: ln1, attn, ln2, mlp.
weft_module *weft_nn_transformer_block(int64_t d_model, int64_t n_heads, weft_generator *g);
// n_blocks of them in order, children "0", "1", ... (a sequential: a pipeline splits it by block). Each
// block's last residual add runs inside the next block's first layer norm (one add_layer_norm), and a
// layer_norm module right after the stack in a sequential takes the last one the same way.
weft_module *weft_nn_transformer(int64_t d_model, int64_t n_heads, int n_blocks, weft_generator *g);
// The same with the MLP's activation chosen: WEFT_ACT_GELU (the exact form, as above) or WEFT_ACT_GELU_TANH
// (GPT-2's; on CUDA its fc layer is one cuBLASLt call with the bias and GELU in the epilogue).
weft_module *weft_nn_transformer_block_act(int64_t d_model, int64_t n_heads, weft_activation act, weft_generator *g);
weft_module *weft_nn_transformer_act(int64_t d_model, int64_t n_heads, int n_blocks, weft_activation act,
                                     weft_generator *g);

#ifdef __cplusplus
}
#endif
#endif
