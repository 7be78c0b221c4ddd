// Op entries of fused causal attention: causal_attention, causal_attention_qkv and their backward ops.
// Kernels: cpu/attention.c (CUDA registers its own at init); the packed ops run the others' kernels on views
// (attention_packed.c).
//
// causal_attention: (q, k, v), each (B,H,T,D), f32, f64, bf16 or f16, one shape, any strides
//   -> out 0: o (B,H,T,D), o_i = sum_{j<=i} p_ij v_j, p_ij = exp(s_ij - lse_i), s_ij = scale q_i.k_j
//      out 1: lse (B,H,T) = log sum_{j<=i} exp(s_ij) (natural log, max-subtracted); f32 for bf16 / f16 q.
// Under autocast it runs in the autocast dtype (as PyTorch's scaled_dot_product_attention): on CUDA the
// tensor-core kernels (attention_mma_kernels.cu), on the CPU the f32 kernel on widened operands.
// causal_attention_backward: (q, k, v, o, lse, go) -> (gq, gk, gv), each (B,H,T,D) ((B,T,H,D) with i[1]).
// attrs: f[0] = scale; i[0] = 1: o (and go) are (B,T,H,D), the heads last, so that o viewed as (B,T,H*D) is
// the heads merged with no copy (what a transformer's attention hands its output projection; PyTorch's
// SDPA likewise returns its output in (B,T,H,D) memory). Both ops. The backward op's i[1] = 1: gq, gk, gv
// are (B,T,H,D) too, which the forward's backward rule asks for with i[0] and hands on as (B,H,T,D) views:
// the gradients of q, k, v taken as views of (B,T,C) tensors (a transformer's) reach them with no copy.
//
// causal_attention_qkv: (qkv) (B,T,3C), q, k, v its three C-wide blocks (C = H*D, the heads of each (B,T,H,D)
//   as a transformer's one qkv product gives them) -> o (B,T,C), the heads merged; lse (B,H,T).
// causal_attention_qkv_backward: (qkv, o, lse, go) -> gqkv (B,T,3C): gq, gk, gv written into its blocks.
// attrs: i[0] = H (heads, dividing C), f[0] = scale. The same maths as causal_attention with the heads last,
// run by that op's kernels on views (attention.h): one product makes q, k and v, and their gradients come
// back as one (B,T,3C) tensor for one product back, with no slice gradients to zero-fill and add.
#include "attention.h"

#define ATTN_DT (WEFT_DT_FLOAT | WEFT_DT_HALF)

// lse's dtype for q's: f32 for the half types (the softmax statistics stay f32), else q's.
static weft_dtype lse_dtype(const weft_tensor *q) {
    return weft_dtype_is_half(q->dtype) ? WEFT_F32 : (weft_dtype)q->dtype;
}

extern weft_op_def weft_op_causal_attention_backward;

// x is 4-D, float, and of ref's shape and dtype (ref itself passes when it is 4-D float).
static weft_status check_like(const char *op, const weft_tensor *ref, const weft_tensor *x, const char *what) {
    char s1[96], s2[96];
    if (x->ndim != 4)
        return weft_error(WEFT_ERR_SHAPE, "%s: %s must be 4-D (B,H,T,D), got %s", op, what,
                          weft_tensor_shape_str(x, s1, sizeof s1));
    weft_status st = weft_check_dtype(op, x, ATTN_DT, what);
    if (st) return st;
    if (x->dtype != ref->dtype)
        return weft_error(WEFT_ERR_DTYPE, "%s: %s is %s, q is %s", op, what, weft_dtype_name((weft_dtype)x->dtype),
                          weft_dtype_name((weft_dtype)ref->dtype));
    if (!weft_shape_equal(x->ndim, x->sizes, ref->ndim, ref->sizes))
        return weft_error(WEFT_ERR_SHAPE, "%s: %s %s and q %s differ in shape", op, what,
                          weft_tensor_shape_str(x, s1, sizeof s1), weft_tensor_shape_str(ref, s2, sizeof s2));
    return WEFT_OK;
}

static weft_status check_qkv(const weft_op_args *a) {
    static const char *what[3] = {"q", "k", "v"};
    weft_status st = WEFT_OK;
    for (int i = 0; i < 3 && !st; i++) st = check_like(a->op->name, a->in[0], a->in[i], what[i]);
    return st;
}

// o's shape for q's and the attrs: (B,H,T,D), or (B,T,H,D) with i[0].
static void o_sizes(const weft_tensor *q, const weft_attrs *at, int64_t *s) {
    const int64_t *z = q->sizes;
    if (at->i[0]) s[0] = z[0], s[1] = z[2], s[2] = z[1], s[3] = z[3];
    else s[0] = z[0], s[1] = z[1], s[2] = z[2], s[3] = z[3];
}

// x (o or its gradient) is 4-D of q's dtype and o's shape.
static weft_status check_o(const weft_op_args *a, const weft_tensor *x, const char *what) {
    const weft_tensor *q = a->in[0];
    int64_t s[4];
    o_sizes(q, a->attrs, s);
    char s1[96], s2[96];
    if (x->dtype != q->dtype)
        return weft_error(WEFT_ERR_DTYPE, "%s: %s is %s, q is %s", a->op->name, what,
                          weft_dtype_name((weft_dtype)x->dtype), weft_dtype_name((weft_dtype)q->dtype));
    if (!weft_shape_equal(x->ndim, x->sizes, 4, s))
        return weft_error(WEFT_ERR_SHAPE, "%s: %s is %s, expected %s", a->op->name, what,
                          weft_tensor_shape_str(x, s1, sizeof s1), weft_shape_fmt(4, s, s2, sizeof s2));
    return WEFT_OK;
}

static weft_status infer_attn(const weft_op_args *a, weft_out_meta *o) {
    weft_status st = check_qkv(a);
    if (!st) st = weft_check_flags(a->op->name, a->attrs, 0, 1, "o heads last");
    if (st) return st;
    const weft_tensor *q = a->in[0];
    int64_t s[4];
    o_sizes(q, a->attrs, s);
    weft_meta_set(&o[0], 4, s, (weft_dtype)q->dtype);
    weft_meta_set(&o[1], 3, q->sizes, lse_dtype(q));
    return WEFT_OK;
}

// (q, k, v, o, lse, go): o and go like q, lse (B,H,T).
static weft_status infer_attn_bw(const weft_op_args *a, weft_out_meta *o) {
    weft_status st = check_qkv(a);
    if (!st) st = weft_check_flags(a->op->name, a->attrs, 0, 2, "o heads last / gradients heads last");
    if (!st) st = check_o(a, a->in[3], "o");
    if (!st) st = check_o(a, a->in[5], "the gradient");
    if (st) return st;
    const weft_tensor *q = a->in[0], *lse = a->in[4];
    if (lse->dtype != lse_dtype(q) || !weft_shape_equal(lse->ndim, lse->sizes, 3, q->sizes)) {
        char s1[96], s2[96];
        return weft_error(WEFT_ERR_SHAPE, "%s: lse must be (B,H,T), %s for q %s, got %s %s", a->op->name,
                          weft_dtype_name(lse_dtype(q)),
                          weft_tensor_shape_str(q, s1, sizeof s1), weft_dtype_name((weft_dtype)lse->dtype),
                          weft_tensor_shape_str(lse, s2, sizeof s2));
    }
    const int64_t *z = q->sizes, last[4] = {z[0], z[2], z[1], z[3]};
    for (int j = 0; j < 3; j++) weft_meta_set(&o[j], 4, a->attrs->i[1] ? last : z, (weft_dtype)q->dtype);
    return WEFT_OK;
}

// Only o carries a gradient: lse is an internal output (saved for backward),
// so gout[1] is ignored; without gout[0] no input gets a gradient.
// With the heads last (i[0]) the gradients come heads-last too, handed on as (B,H,T,D) views.
static weft_status bw_attn(const weft_bw_args *b) {
    if (!b->gout[0]) return WEFT_OK;
    weft_tensor *in[6] = {b->in[0], b->in[1], b->in[2], b->out[0], b->out[1], b->gout[0]};
    weft_tensor *g[WEFT_MAX_OP_OUT];
    weft_attrs at = *b->attrs;
    const bool last = at.i[0] != 0;
    at.i[1] = last;
    weft_status st = weft_op_apply(&weft_op_causal_attention_backward, 6, in, &at, g);
    if (st != WEFT_OK) return st;
    static const int perm[4] = {0, 2, 1, 3};
    for (int i = 0; i < 3; i++) {
        if (b->needs[i] && st == WEFT_OK) {
            b->gin[i] = last ? weft_permute(g[i], perm) : weft_tensor_ref(g[i]);
            if (!b->gin[i]) st = weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
        }
        weft_tensor_free(g[i]);
    }
    return st;
}

weft_op_def weft_op_causal_attention = {
    .name = "causal_attention", .n_in = 3, .n_out = 2, .flags = WEFT_OPF_AUTOCAST,
    .save = WEFT_SAVE_IN(0) | WEFT_SAVE_IN(1) | WEFT_SAVE_IN(2) | WEFT_SAVE_OUT(0) | WEFT_SAVE_OUT(1),
    .infer = infer_attn, .backward = bw_attn,
    .kernel = {[WEFT_CPU] = {weft_cpu_causal_attention, ATTN_DT}}};
// No backward rule of its own: a second-order gradient through it is an error naming it.
weft_op_def weft_op_causal_attention_backward = {
    .name = "causal_attention_backward", .n_in = 6, .n_out = 3, .infer = infer_attn_bw,
    .kernel = {[WEFT_CPU] = {weft_cpu_causal_attention_backward, ATTN_DT}}};

weft_tensor *weft_causal_attention(weft_tensor *q, weft_tensor *k, weft_tensor *v, double scale) {
    weft_tensor *in[3] = {q, k, v}, *out[WEFT_MAX_OP_OUT];
    weft_attrs at = {.f = {scale}};
    if (weft_op_apply(&weft_op_causal_attention, 3, in, &at, out) != WEFT_OK) return NULL;
    weft_tensor_free(out[1]); // lse stays saved for backward
    return out[0];
}

weft_tensor *weft_causal_attention_heads_last(weft_tensor *q, weft_tensor *k, weft_tensor *v, double scale) {
    weft_tensor *in[3] = {q, k, v}, *out[WEFT_MAX_OP_OUT];
    weft_attrs at = {.i = {1}, .f = {scale}};
    if (weft_op_apply(&weft_op_causal_attention, 3, in, &at, out) != WEFT_OK) return NULL;
    weft_tensor_free(out[1]); // lse stays saved for backward
    return out[0];
}

// ---- the packed ops ----

extern weft_op_def weft_op_causal_attention_qkv_backward;

// qkv (B,T,3C) of an attention dtype, attrs i[0] = H heads dividing C (> 0) -> the shapes of o (B,T,C) and
// lse (B,H,T).
static weft_status check_packed(const weft_op_args *a, int64_t *so, int64_t *sl) {
    const weft_tensor *x = a->in[0];
    char s1[96];
    if (x->ndim != 3 || x->sizes[2] % 3 || x->sizes[2] == 0)
        return weft_error(WEFT_ERR_SHAPE, "%s: qkv must be (B,T,3C) with C > 0, got %s", a->op->name,
                          weft_tensor_shape_str(x, s1, sizeof s1));
    weft_status st = weft_check_dtype(a->op->name, x, ATTN_DT, "qkv");
    if (st) return st;
    const int64_t C = x->sizes[2] / 3, H = a->attrs->i[0];
    if (H < 1 || H > C || C % H)
        return weft_error(WEFT_ERR_ARG, "%s: %lld heads do not divide C = %lld (qkv %s)", a->op->name, (long long)H,
                          (long long)C, weft_tensor_shape_str(x, s1, sizeof s1));
    so[0] = x->sizes[0], so[1] = x->sizes[1], so[2] = C;
    sl[0] = x->sizes[0], sl[1] = H, sl[2] = x->sizes[1];
    return WEFT_OK;
}

static weft_status infer_attn_qkv(const weft_op_args *a, weft_out_meta *o) {
    int64_t so[3], sl[3];
    weft_status st = check_packed(a, so, sl);
    if (st) return st;
    const weft_tensor *x = a->in[0];
    weft_meta_set(&o[0], 3, so, (weft_dtype)x->dtype);
    weft_meta_set(&o[1], 3, sl, lse_dtype(x));
    return WEFT_OK;
}

// (qkv, o, lse, go): o and go (B,T,C) of qkv's dtype, lse (B,H,T) in its dtype -> gqkv like qkv.
static weft_status infer_attn_qkv_bw(const weft_op_args *a, weft_out_meta *o) {
    int64_t so[3], sl[3];
    weft_status st = check_packed(a, so, sl);
    if (st) return st;
    const weft_tensor *x = a->in[0];
    static const char *what[4] = {"", "o", "lse", "the gradient"};
    for (int i = 1; i < 4; i++) {
        const weft_tensor *t = a->in[i];
        const int64_t *want = i == 2 ? sl : so;
        weft_dtype dt = i == 2 ? lse_dtype(x) : (weft_dtype)x->dtype;
        if (t->dtype != dt || !weft_shape_equal(t->ndim, t->sizes, 3, want)) {
            char s1[96], s2[96];
            return weft_error(t->dtype != dt ? WEFT_ERR_DTYPE : WEFT_ERR_SHAPE, "%s: %s must be %s %s, got %s %s",
                              a->op->name, what[i],
                              weft_dtype_name(dt), weft_shape_fmt(3, want, s1, sizeof s1),
                              weft_dtype_name((weft_dtype)t->dtype), weft_tensor_shape_str(t, s2, sizeof s2));
        }
    }
    weft_meta_set(&o[0], 3, x->sizes, (weft_dtype)x->dtype);
    return WEFT_OK;
}

// Only o carries a gradient (lse is saved for backward).
static weft_status bw_attn_qkv(const weft_bw_args *b) {
    if (!b->gout[0] || !b->needs[0]) return WEFT_OK;
    weft_tensor *in[4] = {b->in[0], b->out[0], b->out[1], b->gout[0]};
    b->gin[0] = weft_op_apply1(&weft_op_causal_attention_qkv_backward, 4, in, b->attrs);
    return b->gin[0] ? WEFT_OK : weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
}

weft_op_def weft_op_causal_attention_qkv = {
    .name = "causal_attention_qkv", .n_in = 1, .n_out = 2, .flags = WEFT_OPF_AUTOCAST,
    .save = WEFT_SAVE_IN(0) | WEFT_SAVE_OUT(0) | WEFT_SAVE_OUT(1), .infer = infer_attn_qkv, .backward = bw_attn_qkv,
    .kernel = {[WEFT_CPU] = {weft_cpu_causal_attention_qkv, ATTN_DT}}};
weft_op_def weft_op_causal_attention_qkv_backward = {
    .name = "causal_attention_qkv_backward", .n_in = 4, .n_out = 1, .infer = infer_attn_qkv_bw,
    .kernel = {[WEFT_CPU] = {weft_cpu_causal_attention_qkv_backward, ATTN_DT}}};

weft_tensor *weft_causal_attention_qkv(weft_tensor *qkv, int64_t n_heads, double scale) {
    weft_tensor *in[1] = {qkv}, *out[WEFT_MAX_OP_OUT];
    weft_attrs at = {.i = {n_heads}, .f = {scale}};
    if (weft_op_apply(&weft_op_causal_attention_qkv, 1, in, &at, out) != WEFT_OK) return NULL;
    weft_tensor_free(out[1]); // lse stays saved for backward
    return out[0];
}
