// Tensor parallelism (Megatron-LM), part 2: the layers. Each is made whole
// by weft's own constructor (same generator, same draws) and then split, so
// with TP = T it equals the weft_nn_* layer of the same seed. Their forwards
// repeat weft's layers op for op on the local shard, with f/g (tp.c) where
// the shards meet:
//
//   column linear   x -f-> x W_r^T + b_r   [-> gather]          W_r rows of W (out/T, in)
//   row linear      [scatter ->] x_r W_r^T -g-> + b              W_r columns of W (out, in/T)
//   mlp             f -> fc (column) -> gelu -> proj (row) -> g  one all-reduce each way
//   attention       f -> qkv (column: this rank's heads of q, k, v) -> heads -> proj (row) -> g
//   vocab embedding rows [lo, hi) of the table; other tokens 0 -> g
//
// With sequence parallelism (seq) the activations between the split layers
// hold T/tp tokens: f becomes seq_gather (fused into the column product, so
// only this rank's tokens are saved), g becomes seq_reduce_scatter, and the
// replicated parameters used there (layer norms, row biases, positions) go
// through f so their gradients are summed over the group.
//
// A TP layer's impl starts with tp_layer, which says how its parameters are
// split (weft_tp_param_split reads it back for gathering and checkpoints).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weft/autograd.h>
#include <weft/nn.h>
#include <weft/parallel.h>

#include "../core/core_impl.h"
#include "../nn/nn_impl.h"
#include "tp_impl.h"

// ---- what every TP layer's impl starts with ----
typedef struct tp_layer {
    weft_comm *c;  // borrowed: the TP group outlives its layers
    int w_dim;     // split dim of "weight" (-1: replicated)
    int w_groups;  // blocks of the weight's split dim (qkv: 3)
    int b_dim;     // split dim of "bias" (-1: replicated)
    bool seq;      // sequence parallel: activations outside arrive and leave split along the tokens
} tp_layer;

typedef struct tp_linear {
    tp_layer h;
    bool gather_output;     // column
    bool input_is_parallel; // row
} tp_linear;

static bool is_tp_kind(const weft_module *m) { return !strncmp(weft_module_kind(m), "tp_", 3); }

// A new module of this kind whose weight/bias are the shards of whole's.
static weft_module *shard_params(weft_comm *c, const char *kind, weft_module_forward_fn fwd, tp_layer *impl,
                                 const weft_module *whole) {
    weft_module *m = weft_module_new(kind, fwd, impl, free);
    if (!m) return NULL;
    static const char *names[] = {"weight", "bias", "pos"};
    for (int i = 0; i < 3; i++) {
        weft_tensor *w = weft_module_get(whole, names[i]);
        if (!w) continue;
        int dim = i == 0 ? impl->w_dim : i == 1 ? impl->b_dim : -1;
        weft_tensor *s = NULL;
        if (dim < 0) {
            WEFT_NO_GRAD { s = weft_tensor_clone(w); }
        } else s = weft_tp_shard(c, w, dim, impl->w_groups); // a split bias follows its weight's rows
        if (weft_module_add_param(m, names[i], s)) {
            weft_module_free(m);
            return NULL;
        }
    }
    return m;
}

static tp_linear *linear_impl(weft_comm *c, int w_dim, int groups, int b_dim, bool seq) {
    tp_linear *l = calloc(1, sizeof *l);
    if (!l) return weft_error_null(WEFT_ERR_OOM, "tensor parallel: out of memory");
    l->h = (tp_layer){c, w_dim, groups, b_dim, seq};
    return l;
}

// The token dim of x (..., tokens, features): where sequence parallelism splits.
static int token_dim(const weft_tensor *x) { return weft_tensor_ndim(x) - 2; }

// A replicated parameter as a sequence-parallel region uses it: through f, so
// its gradient (from this rank's tokens only) is summed over the group.
static weft_tensor *seq_param(const tp_layer *h, weft_tensor *p) {
    return h->seq ? weft_tp_copy(h->c, p) : weft_tensor_ref(p);
}


// ---- column-parallel linear ----
static weft_tensor *column_forward(weft_module *m, weft_tensor *x) {
    const tp_linear *l = weft_module_impl(m);
    weft_tensor *y = NULL;
    if (l->h.seq) // the tokens gathered (backward: reduce-scatter), fused so only this rank's are saved
        y = weft_tp_seq_column_product(l->h.c, x, weft_module_get(m, "weight"), weft_module_get(m, "bias"));
    else { // f
        weft_tensor *xf = weft_tp_copy(l->h.c, x);
        y = xf ? weft_nn_affine(m, xf, true) : NULL;
        weft_tensor_free(xf);
    }
    if (y && l->gather_output) {
        weft_tensor *yg = weft_tp_gather(l->h.c, y, -1);
        weft_tensor_free(y);
        y = yg;
    }
    return y;
}

// groups > 1: the output features are that many blocks, each split (qkv).
static weft_module *column_from(weft_comm *c, const weft_module *whole, int groups, bool gather_output, bool seq) {
    tp_linear *l = linear_impl(c, 0, groups, 0, seq);
    if (!l) return NULL;
    l->gather_output = gather_output;
    return shard_params(c, "tp_column_linear", column_forward, &l->h, whole);
}

static weft_status check_divides(const char *op, weft_comm *c, const char *what, int64_t v) {
    if (!c) return weft_error(WEFT_ERR_ARG, "%s: no tensor-parallel communicator", op);
    int n = weft_comm_size(c);
    if (v <= 0 || v % n)
        return weft_error(WEFT_ERR_ARG, "%s: the tensor-parallel size tp = %d does not divide %s = %lld", op, n, what,
                          (long long)v);
    return WEFT_OK;
}

weft_module *weft_tp_column_linear(weft_comm *c, int64_t in, int64_t out, bool bias, bool gather_output,
                                   weft_generator *g) {
    if (check_divides("tp_column_linear", c, "out", out)) return NULL;
    weft_module *whole = weft_nn_linear(in, out, bias, g);
    weft_module *m = whole ? column_from(c, whole, 1, gather_output, false) : NULL;
    weft_module_free(whole);
    return m;
}

// ---- row-parallel linear ----
static weft_tensor *row_forward(weft_module *m, weft_tensor *x) {
    const tp_linear *l = weft_module_impl(m);
    weft_tensor *xs = l->input_is_parallel ? weft_tensor_ref(x) : weft_tp_scatter(l->h.c, x, -1);
    weft_tensor *y = xs ? weft_nn_affine(m, xs, false) : NULL; // partial sums over this rank's inputs
    weft_tensor_free(xs);
    if (y && weft_tensor_dtype(y) != WEFT_F32 && weft_tensor_dtype(y) != WEFT_F64) { // bf16 / f16 under autocast:
        weft_tensor *y32 = weft_cast(y, WEFT_F32);                                  // summed across ranks in f32
        weft_tensor_free(y);
        y = y32;
    }
    // g, or with sequence parallelism summed and split along the tokens
    weft_tensor *yr = !y ? NULL
                      : l->h.seq ? weft_tp_seq_reduce_scatter(l->h.c, y, token_dim(y))
                                 : weft_tp_reduce(l->h.c, y);
    weft_tensor_free(y);
    weft_tensor *b = weft_module_get(m, "bias");
    if (yr && b) { // once, after the reduce
        weft_tensor *bb = seq_param(&l->h, b), *yb = weft_add(yr, bb);
        weft_tensor_free(bb);
        weft_tensor_free(yr);
        yr = yb;
    }
    return yr;
}

static weft_module *row_from(weft_comm *c, const weft_module *whole, bool input_is_parallel, bool seq) {
    tp_linear *l = linear_impl(c, 1, 1, -1, seq);
    if (!l) return NULL;
    l->input_is_parallel = input_is_parallel;
    return shard_params(c, "tp_row_linear", row_forward, &l->h, whole);
}

weft_module *weft_tp_row_linear(weft_comm *c, int64_t in, int64_t out, bool bias, bool input_is_parallel,
                                weft_generator *g) {
    if (check_divides("tp_row_linear", c, "in", in)) return NULL;
    weft_module *whole = weft_nn_linear(in, out, bias, g);
    weft_module *m = whole ? row_from(c, whole, input_is_parallel, false) : NULL;
    weft_module_free(whole);
    return m;
}

// ---- layer norm: replicated; with sequence parallelism on this rank's tokens ----
typedef struct tp_norm {
    tp_layer h;
    double eps;
} tp_norm;

static weft_tensor *seq_norm_forward(weft_module *m, weft_tensor *x) {
    const tp_norm *n = weft_module_impl(m);
    weft_tensor *w = seq_param(&n->h, weft_module_get(m, "weight")), *b = seq_param(&n->h, weft_module_get(m, "bias"));
    weft_tensor *y = weft_layer_norm(x, 1, w, b, n->eps);
    weft_tensor_free(w);
    weft_tensor_free(b);
    return y;
}

weft_module *weft_tp_layer_norm_from(weft_comm *c, const weft_module *whole, double eps, bool seq) {
    if (!seq) { // weft's own layer, a copy
        weft_module *m = weft_nn_layer_norm(weft_tensor_size(weft_module_get(whole, "weight"), 0), eps);
        if (m && (weft_tensor_copy_(weft_module_get(m, "weight"), weft_module_get(whole, "weight")) ||
                  weft_tensor_copy_(weft_module_get(m, "bias"), weft_module_get(whole, "bias")))) {
            weft_module_free(m);
            return NULL;
        }
        return m;
    }
    tp_norm *n = calloc(1, sizeof *n);
    if (!n) return weft_error_null(WEFT_ERR_OOM, "tp_layer_norm: out of memory");
    n->h = (tp_layer){c, -1, 1, -1, true};
    n->eps = eps;
    return shard_params(c, "tp_seq_layer_norm", seq_norm_forward, &n->h, whole);
}

// ---- mlp: fc (column) -> gelu -> proj (row) ----
// The module's impl is the whole mlp's activation (weft_nn_mlp_act: exact or tanh GELU).
static weft_tensor *mlp_forward(weft_module *m, weft_tensor *x) {
    weft_tensor *h = weft_module_forward(weft_module_child_at(m, 0), x); // (B,T,4C/T)
    const weft_activation *act = weft_module_impl(m);
    weft_tensor *a = h ? weft_nn_gelu_as(act ? *act : WEFT_ACT_GELU, h) : NULL;
    weft_tensor_free(h);
    weft_tensor *y = a ? weft_module_forward(weft_module_child_at(m, 1), a) : NULL; // (B,T,C), reduced
    weft_tensor_free(a);
    return y;
}

// whole: weft's block "mlp" (children fc, proj).
static weft_module *mlp_from(weft_comm *c, const weft_module *whole, bool seq) {
    weft_activation *act = malloc(sizeof *act);
    if (!act) return weft_error_null(WEFT_ERR_OOM, "tp_mlp: out of memory");
    *act = weft_nn_mlp_act(whole);
    weft_module *m = weft_module_new("tp_mlp", mlp_forward, act, free);
    if (!m) return NULL;
    if (weft_module_add_child(m, "fc", column_from(c, weft_module_child_at(whole, 0), 1, false, seq)) ||
        weft_module_add_child(m, "proj", row_from(c, weft_module_child_at(whole, 1), true, seq))) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}

weft_module *weft_tp_mlp(weft_comm *c, int64_t C, weft_generator *g) {
    if (check_divides("tp_mlp", c, "the hidden size 4 * d_model", 4 * C)) return NULL;
    // weft's mlp draws fc then proj: made the same way, as in weft_nn_transformer_block
    weft_module *fc = weft_nn_linear(C, 4 * C, true, g);
    weft_module *proj = fc ? weft_nn_linear(4 * C, C, true, g) : NULL;
    weft_module *m = NULL;
    if (proj && (m = weft_module_new("tp_mlp", mlp_forward, NULL, NULL)) &&
        (weft_module_add_child(m, "fc", column_from(c, fc, 1, false, false)) ||
         weft_module_add_child(m, "proj", row_from(c, proj, true, false)))) {
        weft_module_free(m);
        m = NULL;
    }
    weft_module_free(fc);
    weft_module_free(proj);
    return m;
}

// ---- causal self-attention, heads split ----
typedef struct tp_attn {
    int64_t d_model;       // C, the whole width (input and output)
    int64_t n_heads, hd;   // this rank's heads (n_heads / T) and the head size C / n_heads
    weft_tensor *mask;        // cached (T,T) causal mask for the last T, dtype and device
} tp_attn;

static void tp_attn_free(void *p) {
    tp_attn *a = p;
    if (!a) return;
    weft_tensor_free(a->mask);
    free(a);
}

// x (B,T,C) -> qkv (B,T,3C/T) -> this rank's nh/T heads -> (B,T,C/T) -> proj (row) -> (B,T,C)
static weft_tensor *attn_forward(weft_module *m, weft_tensor *x) {
    tp_attn *a = weft_module_impl(m);
    char buf[64];
    int64_t C = a->d_model, nh = a->n_heads, hd = a->hd;
    if (weft_tensor_ndim(x) != 3 || weft_tensor_size(x, 2) != C)
        return weft_error_null(WEFT_ERR_SHAPE, "tp_causal_self_attention: expected input (B,T,%lld), got %s",
                               (long long)C, weft_tensor_shape_str(x, buf, sizeof buf));
    weft_dtype dt = weft_tensor_dtype(x);
    if (dt != WEFT_F32 && dt != WEFT_F64)
        return weft_error_null(WEFT_ERR_DTYPE, "tp_causal_self_attention: input must be f32 or f64");
    // (B,T,3 nh hd); with sequence parallelism x holds T/tp tokens and qkv gathers them.
    // Then weft's own attention over this rank's heads (the same ops as the whole layer).
    weft_tensor *qkv = weft_module_forward(weft_module_child_at(m, 0), x);
    weft_tensor *ym = weft_nn_attention_heads(qkv, nh, hd, &a->mask); // (B,T,nh hd)
    weft_tensor_free(qkv);
    weft_tensor *out = ym ? weft_module_forward(weft_module_child_at(m, 1), ym) : NULL;
    weft_tensor_free(ym);
    return out;
}

static weft_status check_heads(const char *op, weft_comm *c, int64_t C, int64_t nh) {
    if (!c) return weft_error(WEFT_ERR_ARG, "%s: no tensor-parallel communicator", op);
    if (C <= 0 || nh <= 0 || C % nh)
        return weft_error(WEFT_ERR_ARG, "%s: d_model %lld must be positive and divisible by n_heads %lld", op,
                          (long long)C, (long long)nh);
    int n = weft_comm_size(c);
    if (nh % n)
        return weft_error(WEFT_ERR_ARG, "%s: the tensor-parallel size tp = %d does not divide the head count "
                          "n_heads = %lld", op, n, (long long)nh);
    return WEFT_OK;
}

// whole: a weft_nn_causal_self_attention (children qkv, proj).
static weft_module *attn_from(weft_comm *c, const weft_module *whole, int64_t C, int64_t nh, bool seq) {
    tp_attn *a = calloc(1, sizeof *a);
    if (!a) return weft_error_null(WEFT_ERR_OOM, "tp_causal_self_attention: out of memory");
    a->d_model = C;
    a->n_heads = nh / weft_comm_size(c);
    a->hd = C / nh;
    weft_module *m = weft_module_new("tp_causal_self_attention", attn_forward, a, tp_attn_free);
    if (!m) return NULL;
    // qkv's rows are q, k, v (C each), each ordered by head: three blocks split by heads
    if (weft_module_add_child(m, "qkv", column_from(c, weft_module_child_at(whole, 0), 3, false, seq)) ||
        weft_module_add_child(m, "proj", row_from(c, weft_module_child_at(whole, 1), true, seq))) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}

weft_module *weft_tp_attention_make(weft_comm *c, int64_t C, int64_t nh, weft_generator *g, bool seq) {
    if (check_heads("tp_causal_self_attention", c, C, nh)) return NULL;
    weft_module *whole = weft_nn_causal_self_attention(C, nh, g);
    weft_module *m = whole ? attn_from(c, whole, C, nh, seq) : NULL;
    weft_module_free(whole);
    return m;
}

// ---- transformer block ----
static weft_tensor *block_forward(weft_module *m, weft_tensor *x) {
    return weft_nn_prenorm_block(m, 0, 1, 2, 3, x); // x1 = x + attn(ln1(x)), x1 + mlp(ln2(x1))
}

// whole: a weft_nn_transformer_block (children ln1, attn, ln2, mlp).
static weft_module *block_from(weft_comm *c, const weft_module *whole, int64_t C, int64_t nh, bool seq) {
    weft_module *m = weft_module_new("tp_transformer_block", block_forward, NULL, NULL);
    if (!m) return NULL;
    // eps 1e-5: weft_nn_transformer_block's
    if (weft_module_add_child(m, "ln1", weft_tp_layer_norm_from(c, weft_module_child_at(whole, 0), 1e-5, seq)) ||
        weft_module_add_child(m, "attn", attn_from(c, weft_module_child_at(whole, 1), C, nh, seq)) ||
        weft_module_add_child(m, "ln2", weft_tp_layer_norm_from(c, weft_module_child_at(whole, 2), 1e-5, seq)) ||
        weft_module_add_child(m, "mlp", mlp_from(c, weft_module_child_at(whole, 3), seq))) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}

weft_module *weft_tp_block_make(weft_comm *c, int64_t C, int64_t nh, weft_activation act, weft_generator *g,
                                bool seq) {
    if (check_heads("tp_transformer_block", c, C, nh)) return NULL;
    weft_module *whole = weft_nn_transformer_block_act(C, nh, act, g);
    weft_module *m = whole ? block_from(c, whole, C, nh, seq) : NULL;
    weft_module_free(whole);
    return m;
}

weft_module *weft_tp_causal_self_attention(weft_comm *c, int64_t C, int64_t nh, weft_generator *g) {
    return weft_tp_attention_make(c, C, nh, g, false);
}

weft_module *weft_tp_transformer_block(weft_comm *c, int64_t C, int64_t nh, weft_generator *g) {
    return weft_tp_block_make(c, C, nh, WEFT_ACT_GELU, g, false);
}

weft_module *weft_tp_column_make(weft_comm *c, int64_t in, int64_t out, bool bias, bool gather_output,
                                 weft_generator *g, bool seq) {
    if (check_divides("tp_column_linear", c, "out", out)) return NULL;
    weft_module *whole = weft_nn_linear(in, out, bias, g);
    weft_module *m = whole ? column_from(c, whole, 1, gather_output, seq) : NULL;
    weft_module_free(whole);
    return m;
}

// ---- vocab-parallel embedding (with optional learned positions "pos") ----
static weft_tensor *vocab_forward(weft_module *m, weft_tensor *idx) {
    const tp_layer *h = weft_module_impl(m);
    weft_tensor *w = weft_module_get(m, "weight"), *pos = weft_module_get(m, "pos");
    weft_dtype it = weft_tensor_dtype(idx);
    if (it != WEFT_I32 && it != WEFT_I64)
        return weft_error_null(WEFT_ERR_DTYPE, "tp_vocab_embedding: indices must be i32 or i64");
    if (pos && weft_tensor_size(idx, -1) > weft_tensor_size(pos, 0))
        return weft_error_null(WEFT_ERR_SHAPE, "embedding: sequence of %lld tokens is longer than the context %lld",
                               (long long)weft_tensor_size(idx, -1), (long long)weft_tensor_size(pos, 0));
    int64_t rows = weft_tensor_size(w, 0), lo = rows * weft_comm_rank(h->c);
    weft_device dev = weft_tensor_device(idx);
    weft_dtype dt = weft_tensor_dtype(w);
    // local = idx - lo where lo <= idx < lo + rows, else 0 (then masked out)
    weft_tensor *lo_t = weft_tensor_full_on(0, NULL, it, (double)lo, dev);
    weft_tensor *hi_t = weft_tensor_full_on(0, NULL, it, (double)(lo + rows), dev);
    weft_tensor *zero = weft_tensor_full_on(0, NULL, it, 0, dev);
    weft_tensor *ge = weft_ge(idx, lo_t), *lt = weft_lt(idx, hi_t), *sh = weft_sub(idx, lo_t);
    weft_tensor *in = weft_where(lt, sh, zero), *local = weft_where(ge, in, zero);
    weft_tensor *gef = weft_cast(ge, dt), *ltf = weft_cast(lt, dt), *ok = weft_mul(gef, ltf);
    weft_tensor *zf = weft_tensor_full_on(0, NULL, dt, 0, dev), *okb = weft_gt(ok, zf), *ok1 = weft_unsqueeze(okb, -1);
    // (..., D): zeros off this rank; where saves only the (..., 1) mask, not the rows
    weft_tensor *e = weft_embedding(w, local), *em = ok1 ? weft_where(ok1, e, zf) : NULL;
    // g: each row from its one rank; with sequence parallelism also split along the tokens
    weft_tensor *y = !em       ? NULL
                     : h->seq ? weft_tp_seq_reduce_scatter(h->c, em, weft_tensor_ndim(em) - 2)
                              : weft_tp_reduce(h->c, em);
    weft_tensor *tmp[] = {lo_t, hi_t, zero, ge, lt, sh, in, local, gef, ltf, ok, zf, okb, ok1, e, em};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) weft_tensor_free(tmp[i]);
    if (y && pos) { // as weft's embedding with positions: + pos[:T] (this rank's tokens of them), after the reduce
        int64_t Tl = weft_tensor_size(y, -2), t0 = h->seq ? Tl * weft_comm_rank(h->c) : 0;
        weft_tensor *pp = seq_param(h, pos), *p = weft_narrow(pp, 0, t0, Tl);
        weft_tensor_free(pp);
        weft_tensor *yp = weft_add(y, p);
        weft_tensor_free(p);
        weft_tensor_free(y);
        y = yp;
    }
    return y;
}

// whole: a module with "weight" (num, dim) and optionally "pos" (context, dim).
static weft_module *vocab_from(weft_comm *c, const weft_module *whole, bool seq) {
    tp_layer *h = calloc(1, sizeof *h);
    if (!h) return weft_error_null(WEFT_ERR_OOM, "tp_vocab_embedding: out of memory");
    *h = (tp_layer){c, 0, 1, -1, seq};
    return shard_params(c, "tp_vocab_embedding", vocab_forward, h, whole);
}

weft_module *weft_tp_vocab_embedding(weft_comm *c, int64_t num, int64_t dim, weft_generator *g) {
    if (check_divides("tp_vocab_embedding", c, "the vocabulary size num", num)) return NULL;
    weft_module *whole = weft_nn_embedding(num, dim, g);
    weft_module *m = whole ? vocab_from(c, whole, false) : NULL;
    weft_module_free(whole);
    return m;
}

weft_module *weft_tp_vocab_embedding_from(weft_comm *c, weft_tensor *w, weft_tensor *pos, bool seq) {
    if (check_divides("tp_vocab_embedding", c, "the vocabulary size", w ? weft_tensor_size(w, 0) : 0)) return NULL;
    weft_module *whole = weft_module_new("embedding", NULL, NULL, NULL);
    weft_tensor *wd = weft_tensor_detach(w), *pd = pos ? weft_tensor_detach(pos) : NULL;
    weft_module *m = NULL;
    if (whole && !weft_module_add_param(whole, "weight", wd) && (!pos || !weft_module_add_param(whole, "pos", pd)))
        m = vocab_from(c, whole, seq);
    else if (!whole) weft_tensor_free(wd), weft_tensor_free(pd);
    weft_module_free(whole);
    return m;
}

// ---- how parameters are split ----
// The module holding parameter i of m (depth first: own parameters, then
// each child's), and the index among its own.
static const weft_module *owner_of(const weft_module *m, int *i) {
    int own = weft_module_param_count(m);
    for (int k = 0; k < weft_module_child_count(m); k++) own -= weft_module_param_count(weft_module_child_at(m, k));
    if (*i < own) return m;
    *i -= own;
    for (int k = 0; k < weft_module_child_count(m); k++) {
        const weft_module *ch = weft_module_child_at(m, k);
        int n = weft_module_param_count(ch);
        if (*i < n) return owner_of(ch, i);
        *i -= n;
    }
    return NULL;
}

weft_status weft_tp_param_split(const weft_module *m, int i, int *dim, int *groups) {
    if (!m || i < 0 || i >= weft_module_param_count(m))
        return weft_error(WEFT_ERR_ARG, "tp_param_split: no parameter %d", i);
    int j = i;
    const weft_module *o = owner_of(m, &j);
    *dim = -1;
    *groups = 1;
    // only the leaf TP layers (impl a tp_layer) own parameters; the rest are replicated
    if (!o || !is_tp_kind(o) || !weft_module_impl(o)) return WEFT_OK;
    const tp_layer *h = weft_module_impl(o);
    char name[256];
    weft_module_param_at(o, j, name, sizeof name);
    if (!strcmp(name, "weight")) *dim = h->w_dim, *groups = h->w_groups;
    else if (!strcmp(name, "bias")) *dim = h->b_dim, *groups = h->b_dim < 0 ? 1 : h->w_groups;
    return WEFT_OK;
}

weft_tensor *weft_tp_param_gather(weft_comm *c, const weft_module *m, int i) {
    int dim, groups;
    if (!c) return weft_error_null(WEFT_ERR_ARG, "tp_param_gather: no tensor-parallel communicator");
    if (weft_tp_param_split(m, i, &dim, &groups)) return NULL;
    weft_tensor *p = weft_module_param_at(m, i, NULL, 0), *y = NULL;
    int n = weft_comm_size(c);
    WEFT_NO_GRAD {
        if (dim < 0) y = weft_tensor_clone(p);
        else {
            // gathered: rank-major (n, groups, piece); whole: block-major (groups, n, piece)
            weft_tensor *all = weft_tp_gather(c, p, dim);
            int64_t piece = weft_tensor_size(p, dim) / groups;
            weft_tensor *parts[64] = {NULL};
            int k = 0;
            for (int gi = 0; all && gi < groups && k < 64; gi++)
                for (int r = 0; r < n && k < 64; r++)
                    parts[k++] = weft_narrow(all, dim, (int64_t)r * groups * piece + gi * piece, piece);
            y = all ? (k == 1 ? weft_tensor_clone(parts[0]) : weft_concat(k, parts, dim)) : NULL;
            for (int j = 0; j < k; j++) weft_tensor_free(parts[j]);
            weft_tensor_free(all);
        }
    }
    return y;
}
