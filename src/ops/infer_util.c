// Helpers shared by the ops' shape/dtype inference.
#include <string.h>

#include "op.h"

void weft_meta_set(weft_out_meta *m, int ndim, const int64_t *sizes, weft_dtype dt) {
    m->ndim = ndim;
    m->dtype = dt;
    if (ndim) memcpy(m->sizes, sizes, sizeof(int64_t) * (size_t)ndim);
    m->offset = 0;
}

weft_status weft_check_flags(const char *op, const weft_attrs *at, int first, int n, const char *what) {
    for (int k = first; k < first + n; k++)
        if (at->i[k] != 0 && at->i[k] != 1)
            return weft_error(WEFT_ERR_ARG, "%s: %s must be 0 or 1 (attr i[%d] is %lld)", op, what, k,
                              (long long)at->i[k]);
    return WEFT_OK;
}

weft_status weft_broadcast_shapes(const char *op, int n, weft_tensor *const *ts, int *ndim, int64_t *sizes) {
    int nd = 0;
    for (int k = 0; k < n; k++)
        if (ts[k]->ndim > nd) nd = ts[k]->ndim;
    for (int d = 0; d < nd; d++) sizes[d] = 1;
    for (int k = 0; k < n; k++) {
        const weft_tensor *t = ts[k];
        int lead = nd - t->ndim;
        for (int d = 0; d < t->ndim; d++) {
            int64_t s = t->sizes[d], *o = &sizes[lead + d];
            if (s == *o || s == 1) continue;
            if (*o == 1) {
                *o = s;
                continue;
            }
            char a[96], b[96];
            return weft_error(WEFT_ERR_SHAPE, "%s: shapes %s and %s do not broadcast", op,
                              weft_tensor_shape_str(ts[0], a, sizeof a), weft_tensor_shape_str(t, b, sizeof b));
        }
    }
    *ndim = nd;
    return WEFT_OK;
}

weft_status weft_check_same_dtype(const char *op, int n, weft_tensor *const *ts) {
    for (int k = 1; k < n; k++)
        if (ts[k]->dtype != ts[0]->dtype)
            return weft_error(WEFT_ERR_DTYPE, "%s: dtypes differ (%s and %s); convert one with weft_cast", op,
                              weft_dtype_name((weft_dtype)ts[0]->dtype), weft_dtype_name((weft_dtype)ts[k]->dtype));
    return WEFT_OK;
}

weft_status weft_check_dtype(const char *op, const weft_tensor *t, uint32_t mask, const char *what) {
    if (mask & WEFT_DT(t->dtype)) return WEFT_OK;
    return weft_error(WEFT_ERR_DTYPE, "%s: %s has dtype %s, which is not accepted here", op, what,
                      weft_dtype_name((weft_dtype)t->dtype));
}

weft_status weft_axes_mask(const char *op, int ndim, int n, const int *axes, uint32_t *mask) {
    uint32_t m = 0;
    if (n == 0 || !axes) {
        *mask = ndim ? (1u << ndim) - 1 : 0;
        return WEFT_OK;
    }
    for (int k = 0; k < n; k++) {
        int a = weft_axis(op, axes[k], ndim);
        if (a < 0) return WEFT_ERR_ARG;
        if (ndim == 0) continue;
        if (m & (1u << a)) return weft_error(WEFT_ERR_ARG, "%s: axis %d given twice", op, axes[k]);
        m |= 1u << a;
    }
    *mask = m;
    return WEFT_OK;
}

weft_tensor *weft_bw_unbroadcast(const weft_bw_args *b, int i, weft_tensor *g) {
    if (!g) return NULL;
    const weft_in_meta *m = &b->in_meta[i];
    if (weft_shape_equal(g->ndim, g->sizes, m->ndim, m->sizes)) return g;
    weft_tensor *r = weft_sum_to(g, m->ndim, m->sizes);
    weft_tensor_free(g);
    return r;
}

weft_tensor *weft_kernel_contiguous(const weft_tensor *t) {
    if (weft_tensor_is_contiguous(t)) return weft_tensor_ref((weft_tensor *)t);
    weft_tensor *c = weft_tensor_new(t->ndim, t->sizes, (weft_dtype)t->dtype, t->device);
    if (c && weft_tensor_copy_(c, t) != WEFT_OK) { // same device: the device's own strided copy
        weft_tensor_free(c);
        c = NULL;
    }
    return c;
}

weft_status weft_kernel_widened(const weft_op_args *a, weft_kernel_fn f) {
    weft_tensor *in[8] = {0}, *out[WEFT_MAX_OP_OUT] = {0}, *win[8], *wout[WEFT_MAX_OP_OUT];
    if (a->n_in > 8 || a->n_out > WEFT_MAX_OP_OUT)
        return weft_error(WEFT_ERR_ARG, "%s: too many operands to widen", a->op->name);
    weft_status st = WEFT_OK;
    for (int i = 0; i < a->n_in; i++) {
        win[i] = a->in[i];
        if (st || !a->in[i] || !weft_dtype_is_half(a->in[i]->dtype)) continue;
        in[i] = weft_tensor_new(a->in[i]->ndim, a->in[i]->sizes, WEFT_F32, a->in[i]->device);
        st = in[i] ? weft_tensor_copy_(in[i], a->in[i]) : WEFT_ERR_OOM;
        win[i] = in[i];
    }
    for (int j = 0; j < a->n_out; j++) {
        wout[j] = a->out[j];
        if (st || !weft_dtype_is_half(a->out[j]->dtype)) continue;
        out[j] = weft_tensor_new(a->out[j]->ndim, a->out[j]->sizes, WEFT_F32, a->out[j]->device);
        st = out[j] ? WEFT_OK : WEFT_ERR_OOM;
        wout[j] = out[j];
    }
    if (st == WEFT_OK) {
        weft_op_args w = *a;
        w.in = win, w.out = wout;
        st = f(&w);
    }
    for (int j = 0; j < a->n_out && st == WEFT_OK; j++)
        if (out[j]) st = weft_tensor_copy_(a->out[j], out[j]);
    for (int i = 0; i < 8; i++) weft_tensor_free(in[i]);
    for (int j = 0; j < WEFT_MAX_OP_OUT; j++) weft_tensor_free(out[j]);
    return st == WEFT_ERR_OOM ? weft_error(WEFT_ERR_OOM, "%s: out of memory widening half-precision operands",
                                           a->op->name)
                              : st;
}

void weft_kernel_inputs_free(weft_kernel_inputs *c) {
    for (int i = 0; i < c->n; i++) weft_tensor_free(c->t[i]);
    c->n = 0;
}

weft_tensor *weft_kernel_transposed(const weft_tensor *t, int d0, int d1) {
    int64_t sz[WEFT_MAX_DIMS], st[WEFT_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) sz[d] = t->sizes[d], st[d] = t->strides[d];
    sz[d0] = t->sizes[d1], st[d0] = t->strides[d1], sz[d1] = t->sizes[d0], st[d1] = t->strides[d0];
    return weft_tensor_alias(t, t->ndim, sz, st, t->offset);
}

weft_status weft_kernel_inputs_get(const weft_op_args *a, weft_kernel_inputs *c) {
    c->n = 0;
    if (a->n_in > WEFT_KERNEL_MAX_IN) return weft_error(WEFT_ERR_ARG, "%s: %d inputs", a->op->name, a->n_in);
    for (; c->n < a->n_in; c->n++)
        if (!(c->t[c->n] = weft_kernel_contiguous(a->in[c->n]))) {
            weft_status st = weft_last_status();
            weft_kernel_inputs_free(c); // nothing is held after a failure
            return st;
        }
    return WEFT_OK;
}
