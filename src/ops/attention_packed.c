// The packed attention ops' kernels on any device (attention.h): causal_attention_qkv and its backward run
// the device's causal_attention / causal_attention_backward kernel on views of their packed operands, so
// the maths and every device's tuning stay in one kernel each (cpu/attention.c, cuda/attention.c).
#include "attention.h"

// Block p (C wide) of t's last dim, (B,T,n*C), as H heads of D = C/H: (B,T,H,D) with the heads last, else
// (B,H,T,D). A view of t's memory (no autograd record): any strides.
static weft_tensor *heads_of(const weft_tensor *t, int64_t H, int64_t C, int p, bool heads_last) {
    const int64_t *s = t->strides, D = C / H;
    const int64_t sz[4] = {t->sizes[0], heads_last ? t->sizes[1] : H, heads_last ? H : t->sizes[1], D};
    const int64_t st[4] = {s[0], heads_last ? s[1] : D * s[2], heads_last ? D * s[2] : s[1], s[2]};
    return weft_tensor_alias(t, 4, sz, st, t->offset + p * C * s[2]);
}

static void free_all(weft_tensor **t, int n) {
    for (int i = 0; i < n; i++) weft_tensor_free(t[i]);
}

weft_status weft_attention_qkv_run(const weft_op_args *a, weft_kernel_fn attention) {
    const weft_tensor *x = a->in[0];
    const int64_t H = a->attrs->i[0], C = x->sizes[2] / 3;
    weft_tensor *in[3] = {heads_of(x, H, C, 0, false), heads_of(x, H, C, 1, false), heads_of(x, H, C, 2, false)};
    weft_tensor *o = heads_of(a->out[0], H, C, 0, true), *out[2] = {o, a->out[1]};
    weft_status st = WEFT_OK;
    if (!in[0] || !in[1] || !in[2] || !o) st = weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
    if (!st) {
        const weft_attrs at = {.i = {1}, .f = {a->attrs->f[0]}}; // o with the heads last
        const weft_op_args b = {.op = a->op, .n_in = 3, .in = in, .attrs = &at, .n_out = 2, .out = out};
        st = attention(&b);
    }
    free_all(in, 3);
    weft_tensor_free(o);
    return st;
}

weft_status weft_attention_qkv_backward_run(const weft_op_args *a, weft_kernel_fn backward) {
    const weft_tensor *x = a->in[0], *g = a->out[0];
    const int64_t H = a->attrs->i[0], C = x->sizes[2] / 3;
    weft_tensor *in[6] = {heads_of(x, H, C, 0, false), heads_of(x, H, C, 1, false), heads_of(x, H, C, 2, false),
                          heads_of(a->in[1], H, C, 0, true), weft_tensor_ref(a->in[2]),
                          heads_of(a->in[3], H, C, 0, true)};
    weft_tensor *out[3] = {heads_of(g, H, C, 0, true), heads_of(g, H, C, 1, true), heads_of(g, H, C, 2, true)};
    weft_status st = WEFT_OK;
    for (int i = 0; i < 6 && !st; i++)
        if (!in[i] || (i < 3 && !out[i])) st = weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
    if (!st) {
        const weft_attrs at = {.i = {1, 1}, .f = {a->attrs->f[0]}}; // o, go and the gradients with the heads last
        const weft_op_args b = {.op = a->op, .n_in = 6, .in = in, .attrs = &at, .n_out = 3, .out = out};
        st = backward(&b);
    }
    free_all(in, 6);
    free_all(out, 3);
    return st;
}
