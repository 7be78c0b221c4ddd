// Op entries of the nn family: softmax, log_softmax (+ their fused backward
// ops), cross_entropy (+ backward) and dropout. Kernels: cpu/softmax.c,
// cpu/dropout.c.
//
// attrs: softmax family i[0] = dim (normalised; 0 for a 0-d tensor); the backward ops' i[1] = 1 + dx's dtype
//        when it is bf16 / f16 (y f32), else 0.
//        dropout i[0] = seed, i[1] = counter offset, f[0] = p.
#include <math.h>

#include "op.h"

weft_status weft_cpu_softmax(const weft_op_args *a);
weft_status weft_cpu_softmax_backward(const weft_op_args *a);
weft_status weft_cpu_cross_entropy(const weft_op_args *a);
weft_status weft_cpu_cross_entropy_backward(const weft_op_args *a);
weft_status weft_cpu_dropout(const weft_op_args *a);

extern weft_op_def weft_op_softmax_backward, weft_op_log_softmax_backward, weft_op_cross_entropy_backward,
    weft_op_dropout;

static weft_status ok_if(const weft_bw_args *b) {
    for (int i = 0; i < b->n_in; i++)
        if (b->needs[i] && !b->gin[i]) return weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
    return WEFT_OK;
}

// The dtype of the statistics and f32-needing outputs (softmax's y, the loss) for an input of dtype dt: f32
// for bf16 / f16 (read as they are, in f32 arithmetic), else dt.
static weft_dtype stat_dtype(int dt) { return weft_dtype_is_half(dt) ? WEFT_F32 : (weft_dtype)dt; }

// ---- softmax / log_softmax ----
// bf16 / f16 x (a low-precision product's output under autocast) is read as it is: y is f32, as autocast's
// f32 ops give it, and the gradient of x comes back in x's dtype: the backward op computes in f32 and rounds
// dx once as it writes it (its attr i[1]), with no cast kernel either way.
// i[0]: the dim, normalised (the kernels take it as it is): 0..ndim-1, 0 for a 0-d tensor.
static weft_status check_softmax_dim(const char *op, const weft_attrs *at, int ndim) {
    if (at->i[0] >= 0 && at->i[0] < (ndim ? ndim : 1)) return WEFT_OK;
    return weft_error(WEFT_ERR_ARG, "%s: dim %lld out of range for a %d-d tensor", op, (long long)at->i[0], ndim);
}
static weft_status infer_softmax(const weft_op_args *a, weft_out_meta *o) {
    const weft_tensor *x = a->in[0];
    weft_status st = weft_check_dtype(a->op->name, x, WEFT_DT_FLOAT | WEFT_DT_HALF, "the input");
    if (st || (st = check_softmax_dim(a->op->name, a->attrs, x->ndim))) return st;
    weft_meta_set(o, x->ndim, x->sizes, stat_dtype(x->dtype));
    return WEFT_OK;
}
// (g, y): equal shapes and dtypes.
static weft_status infer_softmax_bw(const weft_op_args *a, weft_out_meta *o) {
    weft_status st = weft_check_same_dtype(a->op->name, 2, a->in);
    if (st) return st;
    if ((st = weft_check_dtype(a->op->name, a->in[0], WEFT_DT_FLOAT, "the gradient"))) return st;
    const weft_tensor *g = a->in[0], *y = a->in[1];
    if (!weft_shape_equal(g->ndim, g->sizes, y->ndim, y->sizes)) {
        char s1[96], s2[96];
        return weft_error(WEFT_ERR_SHAPE, "%s: gradient %s and output %s differ in shape", a->op->name,
                          weft_tensor_shape_str(g, s1, sizeof s1), weft_tensor_shape_str(y, s2, sizeof s2));
    }
    if ((st = check_softmax_dim(a->op->name, a->attrs, y->ndim))) return st;
    // i[1]: 0, dx in y's dtype; else 1 + a half dtype for dx (an f32 y of a bf16 / f16 x, whose gradient the
    // kernel rounds once as it writes it)
    const int64_t od = a->attrs->i[1];
    if (od && (y->dtype != WEFT_F32 || od < 1 || od > WEFT_NUM_DTYPES || !weft_dtype_is_half((int)od - 1)))
        return weft_error(WEFT_ERR_ARG, "%s: attr i[1] = %lld: dx's dtype must be bf16 or f16 (1 + its code), for an "
                          "f32 output", a->op->name, (long long)od);
    weft_meta_set(o, y->ndim, y->sizes, od ? (weft_dtype)(od - 1) : (weft_dtype)y->dtype);
    return WEFT_OK;
}

// The backward op's attrs for a forward whose x had dtype xdt: dx written in it (i[1]) when it is half.
static weft_attrs bw_attrs(const weft_attrs *at, weft_dtype xdt) {
    weft_attrs r = *at;
    r.i[1] = weft_dtype_is_half(xdt) ? 1 + (int64_t)xdt : 0;
    return r;
}
static weft_status bw_softmax(const weft_bw_args *b) {
    weft_tensor *in[2] = {b->gout[0], b->out[0]};
    const weft_attrs at = bw_attrs(b->attrs, b->in_meta[0].dtype);
    b->gin[0] = weft_op_apply1(&weft_op_softmax_backward, 2, in, &at);
    return ok_if(b);
}
static weft_status bw_log_softmax(const weft_bw_args *b) {
    weft_tensor *in[2] = {b->gout[0], b->out[0]};
    const weft_attrs at = bw_attrs(b->attrs, b->in_meta[0].dtype);
    b->gin[0] = weft_op_apply1(&weft_op_log_softmax_backward, 2, in, &at);
    return ok_if(b);
}

// The upstream gradient h of a backward op's dx in y's dtype (dx was half: h is too), a new reference.
static weft_tensor *upstream(weft_tensor *h, const weft_tensor *y) {
    if (!h) return weft_error_null(WEFT_ERR_STATE, "softmax backward: no upstream gradient");
    return h->dtype == y->dtype ? weft_tensor_ref(h) : weft_cast(h, (weft_dtype)y->dtype);
}

// sum over the softmax dim, kept (so it broadcasts back).
static weft_tensor *sum_dim(weft_tensor *t, const weft_attrs *at) {
    int d = (int)at->i[0];
    return weft_sum(t, t->ndim ? 1 : 0, &d, true);
}
// Second order. dx = y (g - s), s = sum(g y). With upstream h:
//   d/dg = y (h - sum(h y)) (the same fused op), d/dy = h (g - s) - g sum(h y).
static weft_status bw_softmax_backward(const weft_bw_args *b) {
    weft_tensor *g = b->in[0], *y = b->in[1], *h = upstream(b->gout[0], y);
    if (!h) return weft_last_status();
    if (b->needs[0]) {
        weft_tensor *in[2] = {h, y};
        weft_attrs at = *b->attrs;
        at.i[1] = 0; // d/dg in g's dtype (f32 / f64, as y's)
        b->gin[0] = weft_op_apply1(&weft_op_softmax_backward, 2, in, &at);
    }
    if (b->needs[1]) {
        weft_tensor *gy = weft_mul(g, y), *s = gy ? sum_dim(gy, b->attrs) : NULL, *hy = weft_mul(h, y);
        weft_tensor *t = hy ? sum_dim(hy, b->attrs) : NULL, *gs = weft_sub(g, s), *a1 = weft_mul(h, gs);
        weft_tensor *a2 = weft_mul(g, t);
        b->gin[1] = weft_sub(a1, a2);
        weft_tensor *ts[] = {gy, s, hy, t, gs, a1, a2};
        for (int k = 0; k < 7; k++) weft_tensor_free(ts[k]);
    }
    weft_tensor_free(h);
    return ok_if(b);
}
// dx = g - exp(y) S, S = sum(g). With upstream h:
//   d/dg = h - sum(h exp(y)), d/dy = -h exp(y) S.
static weft_status bw_log_softmax_backward(const weft_bw_args *b) {
    weft_tensor *g = b->in[0], *y = b->in[1], *h = upstream(b->gout[0], y);
    if (!h) return weft_last_status();
    weft_tensor *e = weft_exp(y);
    if (b->needs[0]) {
        weft_tensor *he = weft_mul(h, e), *s = he ? sum_dim(he, b->attrs) : NULL;
        b->gin[0] = weft_sub(h, s);
        weft_tensor_free(he);
        weft_tensor_free(s);
    }
    if (b->needs[1]) {
        weft_tensor *S = sum_dim(g, b->attrs), *he = weft_mul(h, e), *t = weft_mul(he, S);
        b->gin[1] = weft_neg(t);
        weft_tensor_free(S);
        weft_tensor_free(he);
        weft_tensor_free(t);
    }
    weft_tensor_free(e);
    weft_tensor_free(h);
    return ok_if(b);
}

#define K_SM .kernel = {[WEFT_CPU] = {weft_cpu_softmax, WEFT_DT_FLOAT | WEFT_DT_HALF}}
#define K_SMB .kernel = {[WEFT_CPU] = {weft_cpu_softmax_backward, WEFT_DT_FLOAT}}
weft_op_def weft_op_softmax = {.name = "softmax", .n_in = 1, .n_out = 1, .save = WEFT_SAVE_OUT(0), .variant = 0,
                               .infer = infer_softmax, .backward = bw_softmax, K_SM};
weft_op_def weft_op_log_softmax = {.name = "log_softmax", .n_in = 1, .n_out = 1, .save = WEFT_SAVE_OUT(0),
                                   .variant = 1, .infer = infer_softmax, .backward = bw_log_softmax, K_SM};
// (g, y) -> dx
weft_op_def weft_op_softmax_backward = {.name = "softmax_backward", .n_in = 2, .n_out = 1, .save = WEFT_SAVE_ALL_IN,
                                        .variant = 0, .infer = infer_softmax_bw, .backward = bw_softmax_backward,
                                        K_SMB};
weft_op_def weft_op_log_softmax_backward = {.name = "log_softmax_backward", .n_in = 2, .n_out = 1,
                                            .save = WEFT_SAVE_ALL_IN, .variant = 1, .infer = infer_softmax_bw,
                                            .backward = bw_log_softmax_backward, K_SMB};

static weft_tensor *softmax_like(weft_op_def *op, weft_tensor *t, int dim) {
    if (!t) return weft_error_null_input(op->name);
    int d = weft_axis(op->name, dim, t->ndim);
    if (d < 0) return NULL;
    weft_attrs at = {.i = {d}};
    return weft_op_apply1(op, 1, &t, &at);
}
weft_tensor *weft_softmax(weft_tensor *t, int dim) { return softmax_like(&weft_op_softmax, t, dim); }
weft_tensor *weft_log_softmax(weft_tensor *t, int dim) { return softmax_like(&weft_op_log_softmax, t, dim); }

// ---- cross_entropy: logits (N,C) float, targets (N) int32/int64 -> mean loss () ----
// bf16 / f16 logits are read as they are (autocast leaves the last linear layer's output in the low dtype):
// the kernels work in f32 and the loss is f32, as autocast's f32 ops give it; the gradient of the logits
// comes back in their own dtype, rounded once.
static weft_status check_ce(const char *op, weft_tensor *x, weft_tensor *t) {
    weft_status st = weft_check_dtype(op, x, WEFT_DT_FLOAT | WEFT_DT_HALF, "the logits");
    if (st) return st;
    if ((st = weft_check_dtype(op, t, WEFT_DT_INT, "the targets"))) return st;
    char s1[96], s2[96];
    if (x->ndim != 2 || t->ndim != 1 || t->sizes[0] != x->sizes[0])
        return weft_error(WEFT_ERR_SHAPE, "%s: expected logits (N,C) and targets (N), got %s and %s", op,
                          weft_tensor_shape_str(x, s1, sizeof s1), weft_tensor_shape_str(t, s2, sizeof s2));
    return WEFT_OK;
}
static weft_status infer_ce(const weft_op_args *a, weft_out_meta *o) {
    weft_status st = check_ce(a->op->name, a->in[0], a->in[1]);
    if (st) return st;
    weft_meta_set(o, 0, NULL, stat_dtype(a->in[0]->dtype));
    return WEFT_OK;
}
// (logits, targets, g) -> dlogits
static weft_status infer_ce_bw(const weft_op_args *a, weft_out_meta *o) {
    weft_status st = check_ce(a->op->name, a->in[0], a->in[1]);
    if (st) return st;
    if (a->in[2]->numel != 1 || a->in[2]->dtype != stat_dtype(a->in[0]->dtype))
        return weft_error(WEFT_ERR_SHAPE, "%s: the gradient must be one element of the loss's dtype (%s)", a->op->name,
                          weft_dtype_name(stat_dtype(a->in[0]->dtype)));
    weft_meta_set(o, 2, a->in[0]->sizes, (weft_dtype)a->in[0]->dtype);
    return WEFT_OK;
}
static weft_status bw_ce(const weft_bw_args *b) {
    if (b->needs[0]) {
        weft_tensor *in[3] = {b->in[0], b->in[1], b->gout[0]};
        b->gin[0] = weft_op_apply1(&weft_op_cross_entropy_backward, 3, in, NULL);
        if (!b->gin[0]) return weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
    }
    return WEFT_OK; // targets are integers: no gradient
}
weft_op_def weft_op_cross_entropy = {.name = "cross_entropy", .n_in = 2, .n_out = 1,
                                     .save = WEFT_SAVE_IN(0) | WEFT_SAVE_IN(1), .infer = infer_ce, .backward = bw_ce,
                                     .kernel = {[WEFT_CPU] = {weft_cpu_cross_entropy, WEFT_DT_FLOAT | WEFT_DT_HALF}}};
// It has no backward rule of its own: double backward through it reports an error.
weft_op_def weft_op_cross_entropy_backward = {
    .name = "cross_entropy_backward", .n_in = 3, .n_out = 1, .infer = infer_ce_bw,
    .kernel = {[WEFT_CPU] = {weft_cpu_cross_entropy_backward, WEFT_DT_FLOAT | WEFT_DT_HALF}}};

weft_tensor *weft_cross_entropy(weft_tensor *logits, weft_tensor *targets) {
    weft_tensor *in[2] = {logits, targets};
    return weft_op_apply1(&weft_op_cross_entropy, 2, in, NULL);
}

// ---- composed of the ops above and the elementwise family (every device, autograd, graph mode) ----
// where(x > 0, x, slope x): PyTorch's values (x = +inf stays inf for slope 0) and its gradient (slope at x = 0,
// where a max(x, slope x) would split it between its tied inputs). The 0 is a 0-d tensor on x's device.
weft_tensor *weft_leaky_relu(weft_tensor *x, double slope) {
    if (!x) return weft_error_null_input("leaky_relu");
    if (!isfinite(slope)) return weft_error_null(WEFT_ERR_ARG, "leaky_relu: slope must be finite, got %g", slope);
    if (weft_check_dtype("leaky_relu", x, WEFT_DT_FLOAT | WEFT_DT_HALF, "the input")) return NULL;
    weft_tensor *zero = weft_tensor_empty_on(0, NULL, (weft_dtype)x->dtype, x->device);
    if (zero && weft_tensor_fill_(zero, 0) != WEFT_OK) weft_tensor_free(zero), zero = NULL;
    weft_tensor *pos = zero ? weft_gt(x, zero) : NULL, *s = pos ? weft_mul_scalar(x, slope) : NULL;
    weft_tensor *y = s ? weft_where(pos, x, s) : NULL;
    weft_tensor_free(zero), weft_tensor_free(pos), weft_tensor_free(s);
    return y;
}

// mean(softplus(x) - x t), softplus(x) = log(1 + e^x) = logsumexp(0, x): stable for any x and smooth at 0
// (its gradient is sigmoid(x) - t everywhere, as PyTorch's BCEWithLogitsLoss).
weft_tensor *weft_bce_with_logits(weft_tensor *logits, weft_tensor *targets) {
    const char *op = "bce_with_logits";
    if (!logits || !targets) return weft_error_null_input(op);
    weft_tensor *in[2] = {logits, targets};
    if (weft_check_dtype(op, logits, WEFT_DT_FLOAT | WEFT_DT_HALF, "the logits") || weft_check_same_dtype(op, 2, in))
        return NULL;
    if (!weft_shape_equal(logits->ndim, logits->sizes, targets->ndim, targets->sizes)) {
        char b1[96], b2[96];
        return weft_error_null(WEFT_ERR_SHAPE, "%s: logits %s and targets %s differ in shape", op,
                               weft_tensor_shape_str(logits, b1, sizeof b1), weft_tensor_shape_str(targets, b2, sizeof b2));
    }
    weft_tensor *z = weft_mul_scalar(logits, 0.0);
    weft_tensor *pair[2] = {z, logits};
    int last = logits->ndim;
    weft_tensor *st = z ? weft_stack(2, pair, last) : NULL;
    weft_tensor *sp = st ? weft_logsumexp(st, 1, &last, false) : NULL;
    weft_tensor *xt = sp ? weft_mul(logits, targets) : NULL;
    weft_tensor *l = xt ? weft_sub(sp, xt) : NULL;
    weft_tensor *m = l ? weft_mean(l, 0, NULL, false) : NULL;
    weft_tensor *ts[] = {z, st, sp, xt, l};
    for (int i = 0; i < 5; i++) weft_tensor_free(ts[i]);
    return m;
}

// ---- dropout ----
static weft_status infer_dropout(const weft_op_args *a, weft_out_meta *o) {
    const weft_tensor *x = a->in[0];
    weft_status st = weft_check_dtype("dropout", x, WEFT_DT_FLOAT | WEFT_DT_HALF, "the input");
    if (st) return st;
    double p = a->attrs->f[0];
    if (!(p >= 0 && p < 1)) return weft_error(WEFT_ERR_ARG, "dropout: p must be in [0, 1), got %g", p);
    weft_meta_set(o, x->ndim, x->sizes, (weft_dtype)x->dtype);
    return WEFT_OK;
}
// g * mask / (1 - p): the same op on g with the same attrs recomputes the same mask.
static weft_status bw_dropout(const weft_bw_args *b) {
    b->gin[0] = weft_op_apply1(&weft_op_dropout, 1, &b->gout[0], b->attrs);
    return ok_if(b);
}
weft_op_def weft_op_dropout = {.name = "dropout", .n_in = 1, .n_out = 1, .flags = WEFT_OPF_RANDOM, .infer = infer_dropout,
                               .backward = bw_dropout,
                               .kernel = {[WEFT_CPU] = {weft_cpu_dropout, WEFT_DT_FLOAT | WEFT_DT_HALF}}};

weft_tensor *weft_dropout(weft_tensor *x, double p, bool training, struct weft_generator *g) {
    if (!x) return weft_error_null_input("dropout");
    if (!(p >= 0 && p < 1)) return weft_error_null(WEFT_ERR_ARG, "dropout: p must be in [0, 1), got %g", p);
    if (weft_check_dtype("dropout", x, WEFT_DT_FLOAT | WEFT_DT_HALF, "the input")) return NULL;
    if (!training || p == 0) return weft_tensor_ref(x);
    uint64_t seed, off;
    weft_generator_reserve(g, (uint64_t)x->numel, &seed, &off); // numel counters: one per element
    weft_attrs at = {.i = {(int64_t)seed, (int64_t)off}, .f = {p}};
    return weft_op_apply1(&weft_op_dropout, 1, &x, &at);
}
