// Op entries of the reduction family. Kernels: cpu/reduce.c.
// attrs: i[0] = axes mask, i[1] = keepdim, i[2] = correction (var).
#include "reduce.h"

static weft_status infer_reduce(const weft_op_args *a, weft_out_meta *o) {
    const char *op = a->op->name;
    const weft_tensor *x = a->in[0];
    const int64_t *at = a->attrs->i;
    // a mask of x's dims; argmax takes one (none for a 0-d x); var's correction as an int (N - correction stays exact)
    if (at[0] < 0 || at[0] >= (INT64_C(1) << x->ndim) ||
        (a->op->variant == WEFT_RED_ARGMAX && x->ndim && __builtin_popcountll((unsigned long long)at[0]) != 1))
        return weft_error(WEFT_ERR_ARG, "%s: axes mask 0x%llx is not %s of a %d-d input's dims", op,
                          (unsigned long long)at[0], a->op->variant == WEFT_RED_ARGMAX ? "one" : "a set", x->ndim);
    if (at[1] != 0 && at[1] != 1) return weft_error(WEFT_ERR_ARG, "%s: keepdim must be 0 or 1", op);
    if (at[2] < 0 || at[2] > INT32_MAX)
        return weft_error(WEFT_ERR_ARG, "%s: correction %lld out of range", op, (long long)at[2]);
    uint32_t mask = (uint32_t)at[0];
    weft_reduce_out_shape(x, mask, at[1] != 0, &o->ndim, o->sizes);
    o->dtype = a->op->variant == WEFT_RED_ARGMAX ? WEFT_I64 : (weft_dtype)x->dtype;
    if (a->op->variant == WEFT_RED_MEAN || a->op->variant == WEFT_RED_VAR || a->op->variant == WEFT_RED_LOGSUMEXP) {
        weft_status st = weft_check_dtype(a->op->name, x, WEFT_DT_FLOAT | WEFT_DT_HALF, "the input");
        if (st) return st;
    }
    o->offset = 0;
    return WEFT_OK;
}

// g has the reduced shape; give it the input's shape again (a broadcast view).
static weft_tensor *expand_back(const weft_bw_args *b, weft_tensor *g) {
    const weft_in_meta *m = &b->in_meta[0];
    uint32_t mask = (uint32_t)b->attrs->i[0];
    int64_t kd[WEFT_MAX_DIMS];
    for (int d = 0; d < m->ndim; d++) kd[d] = (mask & (1u << d)) ? 1 : m->sizes[d];
    weft_tensor *k = weft_reshape(g, m->ndim, kd);
    weft_tensor *e = weft_expand(k, m->ndim, m->sizes);
    weft_tensor_free(k);
    return e;
}
static int64_t reduced_count(const weft_bw_args *b) {
    const weft_in_meta *m = &b->in_meta[0];
    uint32_t mask = (uint32_t)b->attrs->i[0];
    int64_t n = 1;
    for (int d = 0; d < m->ndim; d++)
        if (mask & (1u << d)) n *= m->sizes[d];
    return n;
}
static weft_status ok_if(const weft_bw_args *b) { return b->gin[0] ? WEFT_OK : weft_last_status(); }

static weft_status bw_sum(const weft_bw_args *b) {
    weft_tensor *e = expand_back(b, b->gout[0]);
    // The expanded view has stride 0; accumulation code may keep it, so hand out a real tensor.
    b->gin[0] = weft_tensor_contiguous(e);
    weft_tensor_free(e);
    return ok_if(b);
}
static weft_status bw_mean(const weft_bw_args *b) {
    weft_tensor *g = weft_mul_scalar(b->gout[0], 1.0 / (double)reduced_count(b));
    weft_tensor *e = expand_back(b, g);
    b->gin[0] = weft_tensor_contiguous(e);
    weft_tensor_free(g);
    weft_tensor_free(e);
    return ok_if(b);
}
// max/min: gradient to the elements equal to the result, split evenly among ties.
static weft_status bw_maxmin(const weft_bw_args *b) {
    weft_tensor *x = b->in[0], *y = expand_back(b, b->out[0]), *g = expand_back(b, b->gout[0]);
    weft_tensor *m = weft_eq(x, y), *mf = weft_cast(m, (weft_dtype)x->dtype);
    weft_attrs at = *b->attrs;
    at.i[1] = 1; // keepdim
    weft_tensor *cnt = weft_op_apply1(weft_op_find("sum"), 1, &mf, &at);
    weft_tensor *gm = weft_mul(g, mf);
    b->gin[0] = weft_div(gm, cnt);
    weft_tensor *ts[] = {y, g, m, mf, cnt, gm};
    for (int k = 0; k < 6; k++) weft_tensor_free(ts[k]);
    return ok_if(b);
}
static weft_status bw_var(const weft_bw_args *b) { // 2 (x - mean) g / (N - correction)
    weft_tensor *x = b->in[0];
    weft_attrs at = *b->attrs;
    at.i[1] = 1;
    weft_tensor *mu = weft_op_apply1(weft_op_find("mean"), 1, &x, &at);
    weft_tensor *dx = weft_sub(x, mu), *g = expand_back(b, b->gout[0]), *t = weft_mul(dx, g);
    b->gin[0] = weft_mul_scalar(t, 2.0 / (double)(reduced_count(b) - b->attrs->i[2]));
    weft_tensor *ts[] = {mu, dx, g, t};
    for (int k = 0; k < 4; k++) weft_tensor_free(ts[k]);
    return ok_if(b);
}
static weft_status bw_logsumexp(const weft_bw_args *b) { // g exp(x - y)
    weft_tensor *y = expand_back(b, b->out[0]), *g = expand_back(b, b->gout[0]);
    weft_tensor *d = weft_sub(b->in[0], y), *e = weft_exp(d);
    b->gin[0] = weft_mul(g, e);
    weft_tensor *ts[] = {y, g, d, e};
    for (int k = 0; k < 4; k++) weft_tensor_free(ts[k]);
    return ok_if(b);
}

// bf16 / f16 too: reduced in f32 (f64 for the sums' partials) on a widened copy, the result rounded once.
#define K_RED(mask) .kernel = {[WEFT_CPU] = {weft_cpu_reduce, (mask) | WEFT_DT_HALF}}
weft_op_def weft_op_sum = {.name = "sum", .n_in = 1, .n_out = 1, .variant = WEFT_RED_SUM, .infer = infer_reduce,
                           .backward = bw_sum, K_RED(WEFT_DT_NUM)};
weft_op_def weft_op_mean = {.name = "mean", .n_in = 1, .n_out = 1, .variant = WEFT_RED_MEAN, .infer = infer_reduce,
                            .backward = bw_mean, K_RED(WEFT_DT_FLOAT)};
weft_op_def weft_op_max = {.name = "max", .n_in = 1, .n_out = 1, .variant = WEFT_RED_MAX, .infer = infer_reduce,
                           .save = WEFT_SAVE_IN(0) | WEFT_SAVE_OUT(0), .backward = bw_maxmin, K_RED(WEFT_DT_NUM)};
weft_op_def weft_op_min = {.name = "min", .n_in = 1, .n_out = 1, .variant = WEFT_RED_MIN, .infer = infer_reduce,
                           .save = WEFT_SAVE_IN(0) | WEFT_SAVE_OUT(0), .backward = bw_maxmin, K_RED(WEFT_DT_NUM)};
weft_op_def weft_op_var = {.name = "var", .n_in = 1, .n_out = 1, .variant = WEFT_RED_VAR, .infer = infer_reduce,
                           .save = WEFT_SAVE_IN(0), .backward = bw_var, K_RED(WEFT_DT_FLOAT)};
weft_op_def weft_op_logsumexp = {.name = "logsumexp", .n_in = 1, .n_out = 1, .variant = WEFT_RED_LOGSUMEXP,
                                 .infer = infer_reduce, .save = WEFT_SAVE_IN(0) | WEFT_SAVE_OUT(0),
                                 .backward = bw_logsumexp, K_RED(WEFT_DT_FLOAT)};
weft_op_def weft_op_argmax = {.name = "argmax", .n_in = 1, .n_out = 1, .flags = WEFT_OPF_NONDIFF,
                              .variant = WEFT_RED_ARGMAX, .infer = infer_reduce, K_RED(WEFT_DT_NUM)};

static weft_tensor *reduce(weft_op_def *op, weft_tensor *t, int n, const int *axes, bool keepdim, int64_t corr) {
    if (!t) return weft_error_null_input(op->name);
    uint32_t mask;
    if (weft_axes_mask(op->name, t->ndim, n, axes, &mask)) return NULL;
    weft_attrs at = {.i = {mask, keepdim, corr}};
    return weft_op_apply1(op, 1, &t, &at);
}

weft_tensor *weft_sum(weft_tensor *t, int n, const int *axes, bool keepdim) {
    return reduce(&weft_op_sum, t, n, axes, keepdim, 0);
}
weft_tensor *weft_mean(weft_tensor *t, int n, const int *axes, bool keepdim) {
    return reduce(&weft_op_mean, t, n, axes, keepdim, 0);
}
weft_tensor *weft_max(weft_tensor *t, int n, const int *axes, bool keepdim) {
    return reduce(&weft_op_max, t, n, axes, keepdim, 0);
}
weft_tensor *weft_min(weft_tensor *t, int n, const int *axes, bool keepdim) {
    return reduce(&weft_op_min, t, n, axes, keepdim, 0);
}
weft_tensor *weft_var(weft_tensor *t, int n, const int *axes, int64_t correction, bool keepdim) {
    return reduce(&weft_op_var, t, n, axes, keepdim, correction);
}
weft_tensor *weft_logsumexp(weft_tensor *t, int n, const int *axes, bool keepdim) {
    return reduce(&weft_op_logsumexp, t, n, axes, keepdim, 0);
}
weft_tensor *weft_argmax(weft_tensor *t, int axis, bool keepdim) {
    return reduce(&weft_op_argmax, t, 1, &axis, keepdim, 0);
}

weft_tensor *weft_sum_to(weft_tensor *t, int ndim, const int64_t *sizes) {
    if (!t) return weft_error_null_input("sum_to");
    if (ndim > 0 && !sizes) return weft_error_null(WEFT_ERR_ARG, "sum_to: NULL sizes");
    int lead = t->ndim - ndim;
    if (lead < 0) return weft_error_null(WEFT_ERR_SHAPE, "sum_to: target has more dims than the tensor");
    uint32_t mask = 0;
    for (int d = 0; d < t->ndim; d++) {
        int td = d - lead;
        if (td < 0) {
            mask |= 1u << d;
        } else if (sizes[td] == 1 && t->sizes[d] != 1) {
            mask |= 1u << d;
        } else if (sizes[td] != t->sizes[d]) {
            char a[96], b[96];
            return weft_error_null(WEFT_ERR_SHAPE, "sum_to: %s cannot be summed to %s",
                                   weft_tensor_shape_str(t, a, sizeof a), weft_shape_fmt(ndim, sizes, b, sizeof b));
        }
    }
    if (!mask) return weft_reshape(t, ndim, sizes);
    weft_attrs at = {.i = {mask, 1, 0}};
    weft_tensor *s = weft_op_apply1(&weft_op_sum, 1, &t, &at);
    weft_tensor *r = s ? weft_reshape(s, ndim, sizes) : NULL;
    weft_tensor_free(s);
    return r;
}
