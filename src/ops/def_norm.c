// Op entries of the normalisation family. Kernels: cpu/norm.c.
//
// layer_norm (inputs x, [weight], [bias]; variadic, presence in attrs)
//   attrs: i[0] = n_norm_dims, i[1] = has weight, i[2] = has bias; f[0] = eps
//   outputs: y (shape of x), mean and rstd (the leading dims of x)
//   A bf16 / f16 x (a linear layer's output under autocast) is read as it is: weight and bias are f32, and
//   y, mean and rstd are f32 (autocast's f32 op, with no cast kernel); its gradient comes back in x's dtype.
//   attrs i[3] = 0, or 1 + bf16 / f16 where y would be f32: y written in that dtype, the f32 result rounded
//   once (the same bits as a cast of it), for a consumer that reads it so (the linear layer after a
//   transformer block's norm under autocast); its gradient gy then comes in that dtype too.
// add_layer_norm (inputs x, r, [weight], [bias]): s = x + r and y = layer_norm(s) in one pass (the
//   residual add before a transformer block's norm). r has x's shape, and x's dtype or, when x is f32,
//   bf16 / f16 (a branch's output under autocast, read as it is: no cast kernel). attrs as layer_norm's.
//   outputs: s (x's dtype), y, mean, rstd. Backward: ds = gs + layer_norm_backward(gy); dx = ds, dr = ds
//   in r's dtype.
// layer_norm_backward (inputs gy, x, mean, rstd, [weight])
//   attrs: i[0] = n_norm_dims, i[1] = has weight, i[2] = compute dweight/dbias. gy has the statistics'
//   dtype, or bf16 / f16 where that is f32 (the gradient of a half y, read as it is).
//   outputs: dx (x's dtype), dweight, dbias (dweight/dbias: the normalised dims; f32 for a half x, as gy,
//   mean, rstd and weight are)
// add_layer_norm_backward (inputs gy, x, mean, rstd, [weight], [gs]): add_layer_norm's, in one kernel on CUDA
//   where it was three ops. As layer_norm_backward, and attrs i[3] = has gs: a gradient added to dx (x's
//   dtype, not half: the gradient of s from its other readers), i[4] = 0, or 1 + bf16 / f16 (x f32): dx also
//   in that dtype (the residual's gradient). outputs: dx, dweight, dbias, and dx in i[4]'s dtype (without
//   it empty, shape (0)). dx + gs and its rounding are the bits of an add and a cast after layer_norm_backward.
//   (A fourth output and an op of its own, so that saved graphs with layer_norm_backward's three still load.)
// batch_norm (inputs x, [weight], [bias], [running_mean], [running_var])
//   attrs: i[0] = has weight, i[1] = has bias, i[2] = has running_mean, i[3] = has running_var,
//          i[4] = training; f[0] = momentum, f[1] = eps
//   outputs: y, mean (C), invstd (C): the batch statistics in training, the running ones in eval.
//   In training the kernel updates running_mean/var in place (as PyTorch's native_batch_norm).
// batch_norm_backward (inputs gy, x, mean, invstd, [weight])
//   attrs: i[0] = has weight, i[1] = training, i[2] = compute dweight/dbias
//   outputs: dx, dweight (C), dbias (C)
// The kernels expect a contiguous x (and gy, layer_norm's weight/bias); the
// public constructors and backward rules make them so.
#include <stdlib.h>

#include "op.h"

weft_status weft_cpu_layer_norm(const weft_op_args *a);
weft_status weft_cpu_layer_norm_backward(const weft_op_args *a);
weft_status weft_cpu_add_layer_norm(const weft_op_args *a);
weft_status weft_cpu_batch_norm(const weft_op_args *a);
weft_status weft_cpu_batch_norm_backward(const weft_op_args *a);

static weft_status need_contiguous(const char *op, const weft_tensor *t, const char *what) {
    if (!weft_tensor_is_contiguous(t)) // (1-D too: a strided weight would be read as contiguous)
        return weft_error(WEFT_ERR_ARG, "%s: %s must be contiguous", op, what);
    return WEFT_OK;
}
static weft_status check_dt(const char *op, weft_dtype want, const weft_tensor *t, const char *what) {
    if (t->dtype != (int)want)
        return weft_error(WEFT_ERR_DTYPE, "%s: %s has dtype %s, expected %s", op, what,
                          weft_dtype_name((weft_dtype)t->dtype), weft_dtype_name(want));
    return WEFT_OK;
}
static weft_status check_like(const char *op, const weft_tensor *x, const weft_tensor *t, const char *what) {
    return check_dt(op, (weft_dtype)x->dtype, t, what);
}
// layer_norm's statistics, output and parameters: x's dtype, f32 for a bf16 / f16 x.
static weft_dtype ln_stat_dtype(const weft_tensor *x) {
    return weft_dtype_is_half(x->dtype) ? WEFT_F32 : (weft_dtype)x->dtype;
}
// y's dtype: the statistics' ft, or the half dtype attr i[3] names (ft f32 only).
static weft_status ln_y_dtype(const weft_op_args *a, weft_dtype ft, weft_dtype *yt) {
    int64_t code = a->attrs->i[3];
    *yt = ft;
    if (code == 0) return WEFT_OK;
    if (code < 1 || code > WEFT_NUM_DTYPES || !weft_dtype_is_half((weft_dtype)(code - 1)))
        return weft_error(WEFT_ERR_ARG, "%s: attr i[3] = %lld names no output dtype (0, or 1 + bf16 / f16)",
                          a->op->name, (long long)code);
    if (ft != WEFT_F32)
        return weft_error(WEFT_ERR_DTYPE, "%s: a %s output needs f32 statistics (an f32 or half input), not %s",
                          a->op->name, weft_dtype_name((weft_dtype)(code - 1)), weft_dtype_name(ft));
    *yt = (weft_dtype)(code - 1);
    return WEFT_OK;
}
static weft_status bad_count(const weft_op_args *a, int want) {
    return weft_error(WEFT_ERR_ARG, "%s: expected %d inputs for these attrs, got %d", a->op->name, want, a->n_in);
}

// ---------------------------------------------------------------- layer_norm
static weft_status infer_layer_norm(const weft_op_args *a, weft_out_meta *o) {
    const char *op = a->op->name;
    const weft_tensor *x = a->in[0];
    weft_status st = weft_check_flags(op, a->attrs, 1, 2, "has weight / has bias");
    if (st) return st;
    int hw = (int)a->attrs->i[1], hb = (int)a->attrs->i[2];
    if (a->n_in != 1 + hw + hb) return bad_count(a, 1 + hw + hb);
    if ((st = weft_check_dtype(op, x, WEFT_DT_FLOAT | WEFT_DT_HALF, "the input"))) return st;
    if (a->attrs->i[0] < 1 || a->attrs->i[0] > x->ndim)
        return weft_error(WEFT_ERR_ARG, "%s: n_norm_dims %lld out of range for a %d-d input", op,
                          (long long)a->attrs->i[0], x->ndim);
    int n = (int)a->attrs->i[0];
    if ((st = need_contiguous(op, x, "the input"))) return st;
    const int lead = x->ndim - n;
    const weft_dtype ft = ln_stat_dtype(x);
    for (int k = 1; k < a->n_in; k++) {
        const weft_tensor *p = a->in[k];
        const char *what = (k == 1 && hw) ? "weight" : "bias";
        if ((st = check_dt(op, ft, p, what)) || (st = need_contiguous(op, p, what))) return st;
        if (!weft_shape_equal(p->ndim, p->sizes, n, x->sizes + lead)) {
            char s1[96], s2[96];
            return weft_error(WEFT_ERR_SHAPE, "%s: %s has shape %s, expected %s (the last %d dims of the input)", op,
                              what, weft_tensor_shape_str(p, s1, sizeof s1),
                              weft_shape_fmt(n, x->sizes + lead, s2, sizeof s2), n);
        }
    }
    weft_dtype yt;
    if ((st = ln_y_dtype(a, ft, &yt))) return st;
    weft_meta_set(&o[0], x->ndim, x->sizes, yt);
    weft_meta_set(&o[1], lead, x->sizes, ft);
    weft_meta_set(&o[2], lead, x->sizes, ft);
    return WEFT_OK;
}

static weft_status infer_ln_bw(const weft_op_args *a, weft_out_meta *o) {
    const char *op = a->op->name;
    if (a->n_in < 2) return bad_count(a, 4);
    const weft_tensor *gy = a->in[0], *x = a->in[1];
    const bool add = a->op->n_out == 4; // add_layer_norm_backward: i[3], i[4] and the fourth output
    weft_status st = weft_check_flags(op, a->attrs, 1, add ? 3 : 2, "has weight / compute dweight / has gs");
    if (st) return st;
    int hw = (int)a->attrs->i[1], hg = add ? (int)a->attrs->i[3] : 0;
    if (a->n_in != 4 + hw + hg) return bad_count(a, 4 + hw + hg);
    if ((st = weft_check_dtype(op, x, WEFT_DT_FLOAT | WEFT_DT_HALF, "the input"))) return st;
    const weft_dtype ft = ln_stat_dtype(x);
    int64_t hc = add ? a->attrs->i[4] : 0;
    if ((hg || hc) && ft != (weft_dtype)x->dtype)
        return weft_error(WEFT_ERR_DTYPE, "%s: an added gradient or a half dx needs an f32 / f64 input, not %s", op,
                          weft_dtype_name((weft_dtype)x->dtype));
    weft_dtype ht = hc ? (weft_dtype)(hc - 1) : ft;
    if (hc && (hc < 1 || hc > WEFT_NUM_DTYPES || !weft_dtype_is_half(ht) || ft != WEFT_F32))
        return weft_error(WEFT_ERR_ARG, "%s: attr i[4] = %lld names no dx dtype (0, or 1 + bf16 / f16 for an f32 input)",
                          op, (long long)hc);
    bool half_gy = ft == WEFT_F32 && weft_dtype_is_half(gy->dtype); // a half y's gradient
    for (int k = 0; k < a->n_in; k++)
        if ((k != 1 && !(k == 0 && half_gy) && (st = check_dt(op, ft, a->in[k], "an input"))) ||
            (st = need_contiguous(op, a->in[k], "every input")))
            return st;
    if (hg && !weft_shape_equal(a->in[4 + hw]->ndim, a->in[4 + hw]->sizes, x->ndim, x->sizes))
        return weft_error(WEFT_ERR_SHAPE, "%s: the added gradient does not match the shape of x", op);
    if (a->attrs->i[0] < 1 || a->attrs->i[0] > x->ndim)
        return weft_error(WEFT_ERR_ARG, "%s: n_norm_dims %lld out of range for a %d-d input", op,
                          (long long)a->attrs->i[0], x->ndim);
    int n = (int)a->attrs->i[0];
    const int lead = x->ndim - n;
    if (!weft_shape_equal(gy->ndim, gy->sizes, x->ndim, x->sizes) ||
        !weft_shape_equal(a->in[2]->ndim, a->in[2]->sizes, lead, x->sizes) ||
        !weft_shape_equal(a->in[3]->ndim, a->in[3]->sizes, lead, x->sizes) ||
        (hw && !weft_shape_equal(a->in[4]->ndim, a->in[4]->sizes, n, x->sizes + lead)))
        return weft_error(WEFT_ERR_SHAPE, "%s: inputs do not match the shape of x", op);
    weft_meta_set(&o[0], x->ndim, x->sizes, (weft_dtype)x->dtype);
    weft_meta_set(&o[1], n, x->sizes + lead, ft);
    weft_meta_set(&o[2], n, x->sizes + lead, ft);
    if (add && ht != ft) weft_meta_set(&o[3], x->ndim, x->sizes, ht);
    else if (add) weft_meta_set(&o[3], 1, (const int64_t[]){0}, ft);
    return WEFT_OK;
}

weft_op_def weft_op_layer_norm_backward = {
    .name = "layer_norm_backward", .n_in = -1, .n_out = 3, .dispatch_in = 1, // x's dtype picks the kernel
    .infer = infer_ln_bw, .backward = NULL,
    .kernel = {[WEFT_CPU] = {weft_cpu_layer_norm_backward, WEFT_DT_FLOAT | WEFT_DT_HALF}}};
weft_op_def weft_op_add_layer_norm_backward = {
    .name = "add_layer_norm_backward", .n_in = -1, .n_out = 4, .dispatch_in = 1,
    .infer = infer_ln_bw, .backward = NULL,
    .kernel = {[WEFT_CPU] = {weft_cpu_layer_norm_backward, WEFT_DT_FLOAT | WEFT_DT_HALF}}};

// Hand out gin[i] = t if input i wants it, else drop t.
static void give(const weft_bw_args *b, int i, weft_tensor *t) {
    if (i >= 0 && b->needs[i] && !b->gin[i]) b->gin[i] = t;
    else weft_tensor_free(t);
}

// layer_norm_backward of the output gradient gy over the normalised input s (its row statistics mean and rstd,
// weight w or NULL): hands the weight and bias gradients to inputs iw and ib (-1: none) and returns the
// gradient of s (NULL with the error set), plus gs when given (s's dtype, contiguous); with half (bf16 / f16,
// else -1) also that gradient rounded to half, in *lo.
static weft_tensor *ln_backward(const weft_bw_args *b, weft_tensor *gy, weft_tensor *s, weft_tensor *mean,
                                weft_tensor *rstd, weft_tensor *w, int iw, int ib, weft_tensor *gs, int half,
                                weft_tensor **lo) {
    bool want_wb = (iw >= 0 && b->needs[iw]) || (ib >= 0 && b->needs[ib]);
    weft_tensor *g = weft_tensor_contiguous(gy);
    if (!g) return NULL;
    weft_tensor *in[6] = {g, s, mean, rstd, w, gs};
    if (!w) in[4] = gs;
    weft_attrs at = {.i = {b->attrs->i[0], w != NULL, want_wb, gs != NULL, half >= 0 ? 1 + half : 0}};
    weft_tensor *out[WEFT_MAX_OP_OUT] = {0};
    const weft_op_def *op = gs || half >= 0 ? &weft_op_add_layer_norm_backward : &weft_op_layer_norm_backward;
    weft_status st = weft_op_apply(op, 4 + (w != NULL) + (gs != NULL), in, &at, out);
    weft_tensor_free(g);
    if (st != WEFT_OK) return NULL;
    give(b, iw, out[1]);
    give(b, ib, out[2]);
    if (lo) *lo = out[3];
    else weft_tensor_free(out[3]);
    return out[0];
}

static weft_status bw_layer_norm(const weft_bw_args *b) {
    if (!b->gout[0]) return WEFT_OK; // the row statistics are internal outputs
    int hw = b->attrs->i[1] != 0, hb = b->attrs->i[2] != 0;
    weft_tensor *dx = ln_backward(b, b->gout[0], b->in[0], b->out[1], b->out[2], hw ? b->in[1] : NULL, hw ? 1 : -1,
                                  hb ? 1 + hw : -1, NULL, -1, NULL);
    if (!dx) return weft_last_status();
    give(b, 0, dx);
    return WEFT_OK;
}

weft_op_def weft_op_layer_norm = {
    .name = "layer_norm", .n_in = -1, .n_out = 3,
    .save = WEFT_SAVE_IN(0) | WEFT_SAVE_IN(1) | WEFT_SAVE_OUT(1) | WEFT_SAVE_OUT(2),
    .infer = infer_layer_norm, .backward = bw_layer_norm,
    .kernel = {[WEFT_CPU] = {weft_cpu_layer_norm, WEFT_DT_FLOAT | WEFT_DT_HALF}}};

// ---------------------------------------------------------------- add_layer_norm
// layer_norm's checks on (x, [w], [b]), then r against x.
static weft_status infer_add_ln(const weft_op_args *a, weft_out_meta *o) {
    const char *op = a->op->name;
    if (a->n_in < 2) return bad_count(a, 2);
    const weft_tensor *x = a->in[0], *r = a->in[1];
    weft_status st = weft_check_dtype(op, x, WEFT_DT_FLOAT, "the input"); // (layer_norm's also takes a half one)
    if (st) return st;
    weft_tensor *rest[3] = {a->in[0], a->n_in > 2 ? a->in[2] : NULL, a->n_in > 3 ? a->in[3] : NULL};
    weft_op_args ln = *a;
    ln.in = rest, ln.n_in = a->n_in - 1;
    st = infer_layer_norm(&ln, o + 1); // (its messages name this op)
    if (st) return st;
    if (!weft_shape_equal(r->ndim, r->sizes, x->ndim, x->sizes)) {
        char s1[96], s2[96];
        return weft_error(WEFT_ERR_SHAPE, "%s: the residual has shape %s, the input %s", op,
                          weft_tensor_shape_str(r, s1, sizeof s1), weft_tensor_shape_str(x, s2, sizeof s2));
    }
    if (r->dtype != x->dtype && !(x->dtype == WEFT_F32 && weft_dtype_is_half((weft_dtype)r->dtype)))
        return weft_error(WEFT_ERR_DTYPE, "%s: the residual is %s, the input %s (a half residual needs an f32 input)",
                          op, weft_dtype_name((weft_dtype)r->dtype), weft_dtype_name((weft_dtype)x->dtype));
    if ((st = need_contiguous(op, r, "the residual"))) return st;
    weft_meta_set(&o[0], x->ndim, x->sizes, (weft_dtype)x->dtype);
    return WEFT_OK;
}

// ds = gs + layer_norm_backward(gy), dx = ds and dr = ds in r's dtype. Where they can, the add and the cast
// to a half r are in the norm's backward op (one CUDA kernel for the three; WEFT_FUSED_NORM_BW=0: three ops).
static weft_status bw_add_layer_norm(const weft_bw_args *b) {
    int hw = b->attrs->i[1] != 0, hb = b->attrs->i[2] != 0;
    int iw = hw ? 2 : -1, ib = hb ? 2 + hw : -1;
    weft_tensor *s = b->out[0], *ds = b->gout[0] ? weft_tensor_ref(b->gout[0]) : NULL, *dr = NULL;
    weft_dtype rdt = b->in_meta[1].dtype; // (r itself is not saved: the backward needs only its dtype)
    if (b->gout[1]) { // through the norm: ds += layer_norm_backward(gy) over s
        const char *e = getenv("WEFT_FUSED_NORM_BW");
        bool fuse = !(e && e[0] == '0') && (!ds || ds->dtype == s->dtype);
        int half = fuse && b->needs[1] && rdt != s->dtype && weft_dtype_is_half(rdt) && s->dtype == WEFT_F32 ? (int)rdt : -1;
        weft_tensor *gs = NULL;
        if (fuse && ds && !(gs = weft_tensor_contiguous(ds))) {
            weft_tensor_free(ds);
            return weft_last_status();
        }
        weft_tensor *dn = ln_backward(b, b->gout[1], s, b->out[2], b->out[3], hw ? b->in[2] : NULL, iw, ib, gs, half,
                                      half >= 0 ? &dr : NULL);
        weft_tensor *sum = !dn ? NULL : gs || !ds ? weft_tensor_ref(dn) : weft_add(ds, dn);
        weft_tensor_free(dn);
        weft_tensor_free(gs);
        weft_tensor_free(ds);
        if (!(ds = sum)) {
            weft_tensor_free(dr);
            return weft_last_status();
        }
    }
    if (!ds) return WEFT_OK;
    // the residual's gradient in its own dtype (bf16 for a bf16 branch)
    if (b->needs[1] && !dr) dr = rdt == ds->dtype ? weft_tensor_ref(ds) : weft_cast(ds, rdt);
    if (b->needs[1] && !dr) {
        weft_tensor_free(ds);
        return weft_last_status();
    }
    give(b, 1, dr);
    give(b, 0, ds);
    return WEFT_OK;
}

weft_op_def weft_op_add_layer_norm = {
    .name = "add_layer_norm", .n_in = -1, .n_out = 4,
    .save = WEFT_SAVE_IN(2) | WEFT_SAVE_OUT(0) | WEFT_SAVE_OUT(2) | WEFT_SAVE_OUT(3),
    .infer = infer_add_ln, .backward = bw_add_layer_norm,
    .kernel = {[WEFT_CPU] = {weft_cpu_add_layer_norm, WEFT_DT_FLOAT}}};

// layer_norm or add_layer_norm on contiguous copies (differentiable, only where needed: the kernels read
// rows of contiguous memory) of lead[0..n_lead) (x, or x and r), weight and bias; out gets the op's outputs.
static weft_status ln_apply(const weft_op_def *op, int n_lead, weft_tensor *const *lead, int n_norm_dims,
                            weft_tensor *weight, weft_tensor *bias, double eps, weft_dtype y_dtype, weft_tensor **out) {
    for (int k = 0; k < n_lead; k++)
        if (!lead[k]) return weft_error(WEFT_ERR_ARG, "%s: NULL input", op->name);
    if (n_norm_dims < 1 || n_norm_dims > lead[0]->ndim)
        return weft_error(WEFT_ERR_ARG, "%s: n_norm_dims %d out of range for a %d-d input", op->name, n_norm_dims,
                          lead[0]->ndim);
    weft_tensor *in[4];
    int n = 0;
    for (int k = 0; k < n_lead; k++) in[n++] = weft_tensor_contiguous(lead[k]);
    if (weight) in[n++] = weft_tensor_contiguous(weight);
    if (bias) in[n++] = weft_tensor_contiguous(bias);
    // y_dtype: a half one is attr i[3]; anything else is the default (the op checks the rest)
    weft_attrs at = {.i = {n_norm_dims, weight != NULL, bias != NULL, weft_dtype_is_half(y_dtype) ? 1 + y_dtype : 0},
                     .f = {eps}};
    bool ok = true;
    for (int k = 0; k < n; k++) ok &= in[k] != NULL;
    weft_status st = ok ? weft_op_apply(op, n, in, &at, out) : weft_last_status();
    for (int k = 0; k < n; k++) weft_tensor_free(in[k]);
    return st;
}

weft_status weft_add_layer_norm_to(weft_tensor *x, weft_tensor *r, int n_norm_dims, weft_tensor *weight,
                                   weft_tensor *bias, double eps, weft_dtype y_dtype, weft_tensor **sum,
                                   weft_tensor **y) {
    // (NULL result pointers are an error, not a crash: as weft_lstm_cell)
    if (!sum || !y) return weft_error(WEFT_ERR_ARG, "add_layer_norm: sum and y must not be NULL");
    *sum = *y = NULL;
    weft_tensor *out[WEFT_MAX_OP_OUT] = {0};
    weft_status st =
        ln_apply(&weft_op_add_layer_norm, 2, (weft_tensor *[]){x, r}, n_norm_dims, weight, bias, eps, y_dtype, out);
    if (st) return st;
    weft_tensor_free(out[2]);
    weft_tensor_free(out[3]);
    *sum = out[0], *y = out[1];
    return WEFT_OK;
}

weft_status weft_add_layer_norm(weft_tensor *x, weft_tensor *r, int n_norm_dims, weft_tensor *weight,
                                weft_tensor *bias, double eps, weft_tensor **sum, weft_tensor **y) {
    return weft_add_layer_norm_to(x, r, n_norm_dims, weight, bias, eps, WEFT_F32, sum, y);
}

weft_tensor *weft_layer_norm_to(weft_tensor *x, int n_norm_dims, weft_tensor *weight, weft_tensor *bias, double eps,
                                weft_dtype y_dtype) {
    if (!x) return weft_error_null_input("layer_norm");
    weft_tensor *out[WEFT_MAX_OP_OUT] = {0};
    if (ln_apply(&weft_op_layer_norm, 1, &x, n_norm_dims, weight, bias, eps, y_dtype, out)) return NULL;
    weft_tensor_free(out[1]);
    weft_tensor_free(out[2]);
    return out[0];
}

weft_tensor *weft_layer_norm(weft_tensor *x, int n_norm_dims, weft_tensor *weight, weft_tensor *bias, double eps) {
    return weft_layer_norm_to(x, n_norm_dims, weight, bias, eps, WEFT_F32);
}

// ---------------------------------------------------------------- batch_norm
static weft_status infer_batch_norm(const weft_op_args *a, weft_out_meta *o) {
    const char *op = a->op->name;
    const weft_tensor *x = a->in[0];
    const int64_t *at = a->attrs->i;
    weft_status st = weft_check_flags(op, a->attrs, 0, 5, "the has-input flags and training");
    if (st) return st;
    int want = 1 + (int)(at[0] + at[1] + at[2] + at[3]);
    if (a->n_in != want) return bad_count(a, want);
    if ((st = weft_check_dtype(op, x, WEFT_DT_FLOAT, "the input"))) return st;
    if (x->ndim < 2) return weft_error(WEFT_ERR_SHAPE, "%s: input must be (N,C,...), got %d dims", op, x->ndim);
    if ((st = need_contiguous(op, x, "the input"))) return st;
    int64_t C = x->sizes[1];
    static const char *names[4] = {"weight", "bias", "running_mean", "running_var"};
    for (int k = 0, j = 1; k < 4; k++) {
        if (!at[k]) continue;
        const weft_tensor *p = a->in[j++];
        if ((st = check_like(op, x, p, names[k]))) return st;
        if (p->ndim != 1 || p->sizes[0] != C) {
            char s1[96];
            return weft_error(WEFT_ERR_SHAPE, "%s: %s has shape %s, expected (%lld) (the channels of the input)", op,
                              names[k], weft_tensor_shape_str(p, s1, sizeof s1), (long long)C);
        }
    }
    if (at[4]) {
        if (x->numel / (C ? C : 1) <= 1 && C > 0)
            return weft_error(WEFT_ERR_ARG, "%s: expected more than 1 value per channel when training", op);
    } else if (!at[2] || !at[3]) {
        return weft_error(WEFT_ERR_ARG, "%s: eval mode needs running_mean and running_var", op);
    }
    weft_meta_set(&o[0], x->ndim, x->sizes, (weft_dtype)x->dtype);
    weft_meta_set(&o[1], 1, &C, (weft_dtype)x->dtype);
    weft_meta_set(&o[2], 1, &C, (weft_dtype)x->dtype);
    return WEFT_OK;
}

static weft_status infer_bn_bw(const weft_op_args *a, weft_out_meta *o) {
    const char *op = a->op->name;
    if (a->n_in < 2) return bad_count(a, 4);
    const weft_tensor *gy = a->in[0], *x = a->in[1];
    weft_status st = weft_check_flags(op, a->attrs, 0, 3, "has weight / training / compute dweight");
    if (st) return st;
    int hw = (int)a->attrs->i[0];
    if (a->n_in != 4 + hw) return bad_count(a, 4 + hw);
    if ((st = weft_check_dtype(op, x, WEFT_DT_FLOAT, "the input"))) return st;
    if (x->ndim < 2) return weft_error(WEFT_ERR_SHAPE, "%s: input must be (N,C,...), got %d dims", op, x->ndim);
    int64_t C = x->sizes[1];
    for (int k = 0; k < a->n_in; k++)
        if ((st = check_like(op, x, a->in[k], "an input"))) return st;
    if ((st = need_contiguous(op, gy, "the gradient")) || (st = need_contiguous(op, x, "the input"))) return st;
    if (!weft_shape_equal(gy->ndim, gy->sizes, x->ndim, x->sizes))
        return weft_error(WEFT_ERR_SHAPE, "%s: gradient and input shapes differ", op);
    for (int k = 2; k < a->n_in; k++)
        if (a->in[k]->ndim != 1 || a->in[k]->sizes[0] != C || (k < 4 && a->in[k]->strides[0] != 1))
            return weft_error(WEFT_ERR_SHAPE, "%s: per-channel inputs must be contiguous (C)", op);
    weft_meta_set(&o[0], x->ndim, x->sizes, (weft_dtype)x->dtype);
    weft_meta_set(&o[1], 1, &C, (weft_dtype)x->dtype);
    weft_meta_set(&o[2], 1, &C, (weft_dtype)x->dtype);
    return WEFT_OK;
}

weft_op_def weft_op_batch_norm_backward = {
    .name = "batch_norm_backward", .n_in = -1, .n_out = 3, .infer = infer_bn_bw, .backward = NULL,
    .kernel = {[WEFT_CPU] = {weft_cpu_batch_norm_backward, WEFT_DT_FLOAT}}};

static weft_status bw_batch_norm(const weft_bw_args *b) {
    if (!b->gout[0]) return WEFT_OK;
    int hw = b->attrs->i[0] != 0, hb = b->attrs->i[1] != 0;
    int iw = hw ? 1 : -1, ib = hb ? 1 + hw : -1;
    bool want_wb = (iw >= 0 && b->needs[iw]) || (ib >= 0 && b->needs[ib]);
    weft_tensor *gy = weft_tensor_contiguous(b->gout[0]);
    if (!gy) return weft_last_status();
    weft_tensor *in[5] = {gy, b->in[0], b->out[1], b->out[2], hw ? b->in[1] : NULL};
    weft_attrs at = {.i = {hw, b->attrs->i[4], want_wb}};
    weft_tensor *out[WEFT_MAX_OP_OUT];
    weft_status st = weft_op_apply(&weft_op_batch_norm_backward, 4 + hw, in, &at, out);
    weft_tensor_free(gy);
    if (st != WEFT_OK) return st;
    give(b, 0, out[0]);
    give(b, iw, out[1]);
    give(b, ib, out[2]);
    return WEFT_OK; // running_mean/var get no gradient
}

// The running statistics (read in eval, written in training): inputs after x, weight and bias.
static uint32_t bn_state_inputs(const weft_attrs *at, int n_in) {
    int k = 1 + (at->i[0] != 0) + (at->i[1] != 0);
    uint32_t m = 0;
    if (at->i[2] && k < n_in) m |= 1u << k++;
    if (at->i[3] && k < n_in) m |= 1u << k;
    return m;
}

weft_op_def weft_op_batch_norm = {
    .name = "batch_norm", .n_in = -1, .n_out = 3, .flags = WEFT_OPF_STATEFUL, .state_inputs = bn_state_inputs,
    .save = WEFT_SAVE_IN(0) | WEFT_SAVE_IN(1) | WEFT_SAVE_OUT(1) | WEFT_SAVE_OUT(2),
    .infer = infer_batch_norm, .backward = bw_batch_norm,
    .kernel = {[WEFT_CPU] = {weft_cpu_batch_norm, WEFT_DT_FLOAT}}};

weft_tensor *weft_batch_norm(weft_tensor *x, weft_tensor *running_mean, weft_tensor *running_var, weft_tensor *weight,
                             weft_tensor *bias, bool training, double momentum, double eps) {
    if (!x) return weft_error_null_input("batch_norm");
    weft_tensor *in[5];
    int n = 0;
    in[n++] = weft_tensor_contiguous(x);
    if (weight) in[n++] = weft_tensor_ref(weight);
    if (bias) in[n++] = weft_tensor_ref(bias);
    if (running_mean) in[n++] = weft_tensor_ref(running_mean);
    if (running_var) in[n++] = weft_tensor_ref(running_var);
    weft_attrs at = {.i = {weight != NULL, bias != NULL, running_mean != NULL, running_var != NULL, training},
                     .f = {momentum, eps}};
    weft_tensor *out[WEFT_MAX_OP_OUT] = {0};
    bool ok = in[0] != NULL && weft_op_apply(&weft_op_batch_norm, n, in, &at, out) == WEFT_OK;
    for (int k = 0; k < n; k++) weft_tensor_free(in[k]);
    if (!ok) return NULL;
    weft_tensor_free(out[1]);
    weft_tensor_free(out[2]);
    return out[0];
}
