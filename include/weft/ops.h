// weft/ops.h — the ops. Each is one entry of the op table (src/ops/), runs
// eagerly on the inputs' device, and is recorded for autograd when an input
// requires grad. Returns a new reference, or NULL with weft_last_error() set.
//
// Binary elementwise ops broadcast like NumPy/PyTorch and need equal dtypes.
// Axes may be negative (counted from the end).
#ifndef WEFT_OPS_H
#define WEFT_OPS_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- views (no copy; differentiable) ----
weft_tensor *weft_reshape(weft_tensor *t, int ndim, const int64_t *sizes); // one size may be -1; copies only when it must
weft_tensor *weft_view(weft_tensor *t, int ndim, const int64_t *sizes);    // like reshape but never copies (error instead)
weft_tensor *weft_flatten(weft_tensor *t, int start_dim, int end_dim);
weft_tensor *weft_permute(weft_tensor *t, const int *dims); // dims has ndim(t) entries
weft_tensor *weft_transpose(weft_tensor *t, int d0, int d1);
weft_tensor *weft_slice(weft_tensor *t, int dim, int64_t start, int64_t end, int64_t step); // python-style start:end:step, step > 0
weft_tensor *weft_narrow(weft_tensor *t, int dim, int64_t start, int64_t length);
weft_tensor *weft_select(weft_tensor *t, int dim, int64_t index); // removes dim
weft_tensor *weft_expand(weft_tensor *t, int ndim, const int64_t *sizes); // -1 keeps a size; new dims get stride 0
weft_tensor *weft_squeeze(weft_tensor *t, int dim);
weft_tensor *weft_unsqueeze(weft_tensor *t, int dim);

// ---- dtype ----
weft_tensor *weft_cast(weft_tensor *t, weft_dtype dt);

// ---- unary ----
weft_tensor *weft_neg(weft_tensor *t);
weft_tensor *weft_abs(weft_tensor *t);
weft_tensor *weft_exp(weft_tensor *t);
weft_tensor *weft_log(weft_tensor *t);
weft_tensor *weft_sqrt(weft_tensor *t);
weft_tensor *weft_rsqrt(weft_tensor *t);
weft_tensor *weft_sin(weft_tensor *t);
weft_tensor *weft_cos(weft_tensor *t);
weft_tensor *weft_tanh(weft_tensor *t);
weft_tensor *weft_sigmoid(weft_tensor *t);
weft_tensor *weft_relu(weft_tensor *t);
weft_tensor *weft_gelu(weft_tensor *t); // exact (erf) form
// GELU's tanh approximation (PyTorch's F.gelu(x, approximate='tanh'), GPT-2's):
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
weft_tensor *weft_gelu_tanh(weft_tensor *t);
weft_tensor *weft_silu(weft_tensor *t);
// The Gauss error function, erf(x) = 2/sqrt(pi) int_0^x exp(-t^2) dt (ONNX's Erf, torch.erf); floats.
weft_tensor *weft_erf(weft_tensor *t);
// Inverse trigonometric functions (floats; asin and acos take [-1, 1]).
weft_tensor *weft_asin(weft_tensor *t);
weft_tensor *weft_acos(weft_tensor *t);
weft_tensor *weft_atan(weft_tensor *t);
// Rounding to an integral value, in the input's float dtype (torch.floor, ceil, round, trunc; round is half to
// even). No gradient flows through them (it is zero almost everywhere).
weft_tensor *weft_floor(weft_tensor *t);
weft_tensor *weft_ceil(weft_tensor *t);
weft_tensor *weft_round(weft_tensor *t);
weft_tensor *weft_trunc(weft_tensor *t);
weft_tensor *weft_pow_scalar(weft_tensor *t, double p);
weft_tensor *weft_add_scalar(weft_tensor *t, double s);
weft_tensor *weft_mul_scalar(weft_tensor *t, double s);

// ---- binary (broadcasting) ----
weft_tensor *weft_add(weft_tensor *a, weft_tensor *b);
weft_tensor *weft_sub(weft_tensor *a, weft_tensor *b);
weft_tensor *weft_mul(weft_tensor *a, weft_tensor *b);
weft_tensor *weft_div(weft_tensor *a, weft_tensor *b);
weft_tensor *weft_pow(weft_tensor *a, weft_tensor *b);
// The remainder of a / b: fmod with the sign of a (C's fmod, torch.fmod), remainder with the sign of b (Python's %,
// torch.remainder). Integers and floats; an integer divisor of 0 gives 0. Differentiable in both (d/db = -trunc(a/b)
// or -floor(a/b)).
weft_tensor *weft_fmod(weft_tensor *a, weft_tensor *b);
weft_tensor *weft_remainder(weft_tensor *a, weft_tensor *b);
weft_tensor *weft_maximum(weft_tensor *a, weft_tensor *b);
weft_tensor *weft_minimum(weft_tensor *a, weft_tensor *b);
// comparisons give WEFT_BOOL masks (not differentiable)
weft_tensor *weft_eq(weft_tensor *a, weft_tensor *b);
weft_tensor *weft_ne(weft_tensor *a, weft_tensor *b);
weft_tensor *weft_lt(weft_tensor *a, weft_tensor *b);
weft_tensor *weft_le(weft_tensor *a, weft_tensor *b);
weft_tensor *weft_gt(weft_tensor *a, weft_tensor *b);
weft_tensor *weft_ge(weft_tensor *a, weft_tensor *b);
// cond ? a : b, cond is WEFT_BOOL; all three broadcast
weft_tensor *weft_where(weft_tensor *cond, weft_tensor *a, weft_tensor *b);

// ---- reductions over axes (n_axes == 0 or axes == NULL: all axes) ----
weft_tensor *weft_sum(weft_tensor *t, int n_axes, const int *axes, bool keepdim);
weft_tensor *weft_mean(weft_tensor *t, int n_axes, const int *axes, bool keepdim);
weft_tensor *weft_max(weft_tensor *t, int n_axes, const int *axes, bool keepdim);
weft_tensor *weft_min(weft_tensor *t, int n_axes, const int *axes, bool keepdim);
weft_tensor *weft_var(weft_tensor *t, int n_axes, const int *axes, int64_t correction, bool keepdim);
weft_tensor *weft_logsumexp(weft_tensor *t, int n_axes, const int *axes, bool keepdim);
weft_tensor *weft_argmax(weft_tensor *t, int axis, bool keepdim); // WEFT_I64
// Sum a broadcast result back to `sizes` (the inverse of expand).
weft_tensor *weft_sum_to(weft_tensor *t, int ndim, const int64_t *sizes);

// ---- linear algebra ----
// torch.matmul semantics: 1-D operands are promoted, batch dims broadcast.
// Transposed operands (e.g. weft_transpose(w,0,1)) are passed to BLAS without copying.
weft_tensor *weft_matmul(weft_tensor *a, weft_tensor *b);
// PyTorch's F.linear: x (..., K) @ w^T + b with w (N, K) and b (N) or NULL,
// -> (..., N); the bias is added in the product's epilogue (one pass, no
// separate add). weft_linear_gelu is gelu(F.linear(x, w, b)) (exact, erf form)
// with the activation in the same epilogue and a one-pass backward.
// f32, f64, bf16 and f16 (half: f32 sums, bias and GELU, each output rounded
// once). Under autocast they run in the autocast dtype like matmul.
weft_tensor *weft_linear(weft_tensor *x, weft_tensor *w, weft_tensor *b);
weft_tensor *weft_linear_gelu(weft_tensor *x, weft_tensor *w, weft_tensor *b);
// gelu_tanh(F.linear(x, w, b)): the same op (linear_gelu, attr approximate = 1)
// with GELU's tanh approximation; on CUDA, bf16 / f16 / f32 with a bias, N a
// multiple of 8 and x's rows stacking (a row stride) run it as cuBLASLt's
// GELU_AUX_BIAS epilogue (product, bias and GELU in one kernel), else the
// product, then bias and GELU in one pass.
weft_tensor *weft_linear_gelu_tanh(weft_tensor *x, weft_tensor *w, weft_tensor *b);
// An MLP's two products with GELU's backward inside the second one's (what the transformer's mlp runs):
// a = weft_linear_gelu_pre(x, w1, b1, tanh_form, &h) is linear_gelu (x with 2+ dims) handing back its
// pre-activation h too (a new reference); y = weft_gelu_linear(h, a, w2, b2, tanh_form) is a w2^T + b2,
// whose backward gives h the gradient (g w2) ∘ gelu'(h) from one product (matmul_dgelu: on CUDA, for
// the tanh form, cuBLASLt's DGELU epilogue) and a none, as a = gelu(h) carries it. a must be that gelu(h).
weft_tensor *weft_linear_gelu_pre(weft_tensor *x, weft_tensor *w, weft_tensor *b, bool tanh_form, weft_tensor **h);
weft_tensor *weft_gelu_linear(weft_tensor *h, weft_tensor *a, weft_tensor *w, weft_tensor *b, bool tanh_form);

// Mixed precision (torch.autocast for the calling thread): with WEFT_BF16 or
// WEFT_F16, the lower-precision ops (matmul, linear, conv2d, causal attention)
// run their f32 inputs in that dtype wherever the device has a kernel for it
// (products summed in f32, each result rounded once) and return that dtype, so
// the next such op reads it as it is; every other op given a bf16 / f16 input
// its kernel lacks runs on an f32 copy (layer norm, softmax, cross-entropy).
// Always, float inputs of mixed dtypes are promoted (bf16 + f32 is f32).
// Gradients reach f32 parameters as f32 (master weights). WEFT_F32 turns it
// off (default). f16's narrow range needs loss scaling: weft_grad_scaler in optim.h.
// Inside a region each f32 parameter (a leaf that requires grad) is cast once:
// later ops of the region read the same copy (a pipeline's micro-batches, a
// weight used twice), and leaving the region, or changing its dtype, drops the
// copies. Update parameters outside the region, as the optimiser steps do: a
// copy is not refreshed by an in-place write inside it (torch.autocast's rule).
// A thread that ends inside a region keeps its copies (leave the region first).
weft_status weft_autocast_set(weft_dtype dt);
weft_dtype weft_autocast_get(void);
// Casts cached in the calling thread's region: one per parameter and grad mode (for tests and memory accounting).
int weft_autocast_cache_size(void);
// Makes the region's copies of many parameters at once, in a few launches (a
// training loop's, right after entering its region): each of ts whose copy an
// op of the calling thread's previous region read (a parameter the model's
// low-precision ops read), and that is not cached yet, gets its copy, the same
// bits as a cast at its first use. Ops then read the copies as usual; each
// copy's autograd record is made at its first use, where a first-use cast would
// make it, so gradients (and their hooks, DDP's) come in the same order.
// Nothing happens outside a region, or with WEFT_AUTOCAST_CACHE=0 or
// WEFT_AUTOCAST_FILL=0. NULL entries are skipped.
weft_status weft_autocast_cache_fill(weft_tensor *const *ts, int n);

// ---- neural-network ops ----
weft_tensor *weft_softmax(weft_tensor *t, int dim);
weft_tensor *weft_log_softmax(weft_tensor *t, int dim);
// Mean cross-entropy of logits (N,C) against integer targets (N); fused and stable.
weft_tensor *weft_cross_entropy(weft_tensor *logits, weft_tensor *targets);
// PyTorch's BCEWithLogitsLoss (mean): mean of log(1 + e^x) - x t over logits x and float targets t in [0, 1] of
// the same shape and dtype; stable for large |x|. Composed of existing ops, like leaky_relu.
weft_tensor *weft_bce_with_logits(weft_tensor *logits, weft_tensor *targets);
// F.leaky_relu: x where x > 0, slope x elsewhere, gradient slope at 0 (PyTorch's default slope is 0.01).
weft_tensor *weft_leaky_relu(weft_tensor *x, double slope);
// Fused causal attention: q, k, v (B,H,T,D) of one float dtype and shape (any strides) -> (B,H,T,D),
// o_i = sum_{j<=i} softmax_j(scale q_i.k_j) v_j (each query sees keys 0..i). Differentiable once.
weft_tensor *weft_causal_attention(weft_tensor *q, weft_tensor *k, weft_tensor *v, double scale);
// The same attention with its output in (B,T,H,D) order, the heads last (the transpose of the above), so
// that a view of it as (B,T,H*D) merges the heads with no copy.
weft_tensor *weft_causal_attention_heads_last(weft_tensor *q, weft_tensor *k, weft_tensor *v, double scale);
// The same attention over one packed qkv (B,T,3C) (a transformer's one qkv product: q, k, v its three C-wide
// blocks, each C = n_heads*D split into heads as (B,T,n_heads,D)) -> (B,T,C), the heads merged, as
// weft_causal_attention_heads_last viewed as (B,T,C). Its gradient is one (B,T,3C) tensor.
weft_tensor *weft_causal_attention_qkv(weft_tensor *qkv, int64_t n_heads, double scale);
// Fused LSTM cell (PyTorch's gate order i,f,g,o): gates (B,4H) = x W_ih^T + b_ih + h W_hh^T + b_hh,
// c_prev (B,H) or NULL (zero state) -> *h = o*tanh(c), *c = f*c_prev + i*g (B,H), new references;
// i,f,o = sigmoid and g = tanh of their gate. Differentiable once (double backward is an error).
weft_status weft_lstm_cell(weft_tensor *gates, weft_tensor *c_prev, weft_tensor **h, weft_tensor **c);
// The whole recurrence of one LSTM layer from zero state: xg (B,T,4H) = x_t W_ih^T + b_ih + b_hh of every
// step, w_hh (4H,H) -> hs (B,T,H), h_t of every step; gates_t = xg[:,t] + h_{t-1} W_hh^T, then the cell
// above. One call forward and one fused backward (reverse time, one weight-gradient product). Differentiable once.
weft_tensor *weft_lstm_seq(weft_tensor *xg, weft_tensor *w_hh);
// weight (V,D), indices of any shape (int32/int64) -> (..., D)
weft_tensor *weft_embedding(weft_tensor *weight, weft_tensor *indices);
weft_tensor *weft_index_select(weft_tensor *t, int dim, weft_tensor *index);
weft_tensor *weft_gather(weft_tensor *t, int dim, weft_tensor *index);
// t + (zeros scattered-added with src at index along dim); out-of-place
weft_tensor *weft_scatter_add(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src);
// The k largest (largest) or smallest elements along dim, best first (torch.topk with sorted=True): *values (a
// gather of t, so gradients flow to the picked elements) and *indices (int64), either pointer may be NULL. Ties
// keep the lower index first; NaN counts as larger than every number. f32, f64, i32, i64.
weft_status weft_topk(weft_tensor *t, int64_t k, int dim, bool largest, weft_tensor **values, weft_tensor **indices);
// All of dim sorted, ascending or descending, stable (torch.sort(stable=True)): topk with k = the dim's size.
weft_status weft_sort(weft_tensor *t, int dim, bool descending, weft_tensor **values, weft_tensor **indices);
weft_tensor *weft_concat(int n, weft_tensor *const *ts, int dim);
weft_tensor *weft_stack(int n, weft_tensor *const *ts, int dim);
// Splits t along dim into pieces of the given sizes (views); fills out[n].
weft_status weft_split(weft_tensor *t, int dim, int n, const int64_t *sizes, weft_tensor **out);

typedef struct weft_conv2d_params {
    int stride[2];   // (h, w), 0 means 1
    int padding[2];  // (h, w)
    int dilation[2]; // (h, w), 0 means 1
    int groups;      // 0 means 1
} weft_conv2d_params;
// x (N,C,H,W), w (O,C/groups,KH,KW), bias (O) or NULL -> (N,O,OH,OW)
weft_tensor *weft_conv2d(weft_tensor *x, weft_tensor *w, weft_tensor *bias, const weft_conv2d_params *p);

// Transposed convolution (PyTorch's conv_transpose2d): the gradient of conv2d with respect to its input,
// so x (N,C,H,W) with w (C,O/groups,KH,KW) and bias (O) or NULL -> (N,O,OH,OW),
// OH = (H - 1) stride - 2 padding + dilation (KH - 1) + output_padding + 1. padding is taken off each side of
// the full output; output_padding (0 <= it < stride) adds rows and columns at the bottom and right. It runs as
// the conv2d_backward_input op (plus the bias), so every device with conv2d's backward runs it, graph mode
// traces it and ONNX writes it as ConvTranspose.
typedef struct weft_conv_transpose2d_params {
    int stride[2];         // (h, w), 0 means 1
    int padding[2];        // (h, w)
    int output_padding[2]; // (h, w)
    int dilation[2];       // (h, w), 0 means 1
    int groups;            // 0 means 1
} weft_conv_transpose2d_params;
weft_tensor *weft_conv_transpose2d(weft_tensor *x, weft_tensor *w, weft_tensor *bias,
                                   const weft_conv_transpose2d_params *p);

typedef struct weft_pool2d_params {
    int kernel[2];  // (kh, kw)
    int stride[2];  // 0 means kernel size
    int padding[2];
    bool count_include_pad; // avg_pool2d only (PyTorch's default is true)
} weft_pool2d_params;
// x (N,C,H,W) -> (N,C,OH,OW). Max pooling pads with -inf; its gradient goes to
// each window's first maximum (a NaN wins), found once at the forward and kept
// as indices by the autograd / graph node (src/ops/def_conv.c).
weft_tensor *weft_max_pool2d(weft_tensor *x, const weft_pool2d_params *p);
weft_tensor *weft_avg_pool2d(weft_tensor *x, const weft_pool2d_params *p);

// Normalises over the last `n_norm_dims` dims; weight/bias (shape of those dims) may be NULL.
weft_tensor *weft_layer_norm(weft_tensor *x, int n_norm_dims, weft_tensor *weight, weft_tensor *bias, double eps);
// The residual add before a norm, in one pass: *sum = x + r and *y = layer_norm(*sum). r has x's shape and
// dtype, or bf16 / f16 with an f32 x (read as it is); *sum has x's dtype. Both results are new references
// (NULL on error).
weft_status weft_add_layer_norm(weft_tensor *x, weft_tensor *r, int n_norm_dims, weft_tensor *weight,
                                weft_tensor *bias, double eps, weft_tensor **sum, weft_tensor **y);
// Both with y written in y_dtype: bf16 / f16 where y would be f32 (an f32 or half x) gives the f32 result
// rounded once, the same bits as weft_cast of it, with no cast kernel (what torch.compile fuses for a
// linear layer reading the norm under autocast); its backward reads y's gradient in that dtype. Any
// other y_dtype: the plain op.
weft_tensor *weft_layer_norm_to(weft_tensor *x, int n_norm_dims, weft_tensor *weight, weft_tensor *bias, double eps,
                                weft_dtype y_dtype);
weft_status weft_add_layer_norm_to(weft_tensor *x, weft_tensor *r, int n_norm_dims, weft_tensor *weight,
                                   weft_tensor *bias, double eps, weft_dtype y_dtype, weft_tensor **sum,
                                   weft_tensor **y);
// x (N,C,...). In training uses batch statistics and updates running_mean/var
// in place (momentum as in PyTorch); in eval uses the running statistics.
// running_mean/var/weight/bias (C) may each be NULL.
weft_tensor *weft_batch_norm(weft_tensor *x, weft_tensor *running_mean, weft_tensor *running_var, weft_tensor *weight,
                             weft_tensor *bias, bool training, double momentum, double eps);
// Zeroes each element with probability p and scales the rest by 1/(1-p);
// identity when !training. Seeded through g (NULL: default generator).
struct weft_generator;
weft_tensor *weft_dropout(weft_tensor *x, double p, bool training, struct weft_generator *g);

// ---- the op table (for tools, graph mode and tests) ----
int weft_op_count(void);
const char *weft_op_name(int i);
// The CPU's kernel libraries in one line, e.g. "gemm openblas+onednn (auto), bf16 matmul onednn"
// (for `weft info` and bench logs).
const char *weft_cpu_kernels_info(void);

#ifdef __cplusplus
}
#endif
#endif
