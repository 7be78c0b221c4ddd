// Op entries of the elementwise family: unary, scalar, binary, comparisons,
// where, cast and copy. Kernels: cpu/elementwise.c, cpu/copy.c.
#include "elementwise.h"

// ---- inference ----
static weft_status infer_same(const weft_op_args *a, weft_out_meta *o) {
    weft_meta_set(o, a->in[0]->ndim, a->in[0]->sizes, (weft_dtype)a->in[0]->dtype);
    return WEFT_OK;
}
static weft_status infer_binary(const weft_op_args *a, weft_out_meta *o) {
    weft_status st = weft_check_same_dtype(a->op->name, 2, a->in);
    if (st) return st;
    if ((st = weft_broadcast_shapes(a->op->name, 2, a->in, &o->ndim, o->sizes))) return st;
    o->dtype = (weft_dtype)a->in[0]->dtype;
    o->offset = 0;
    return WEFT_OK;
}
static weft_status infer_compare(const weft_op_args *a, weft_out_meta *o) {
    weft_status st = infer_binary(a, o);
    o->dtype = WEFT_BOOL;
    return st;
}
static weft_status infer_where(const weft_op_args *a, weft_out_meta *o) {
    weft_status st = weft_check_dtype("where", a->in[0], WEFT_DT(WEFT_BOOL) | WEFT_DT(WEFT_U8), "the condition");
    if (st) return st;
    if ((st = weft_check_same_dtype("where", 2, a->in + 1))) return st;
    if ((st = weft_broadcast_shapes("where", 3, a->in, &o->ndim, o->sizes))) return st;
    o->dtype = (weft_dtype)a->in[1]->dtype;
    o->offset = 0;
    return WEFT_OK;
}
static weft_status infer_cast(const weft_op_args *a, weft_out_meta *o) {
    if (a->attrs->i[0] < 0 || a->attrs->i[0] >= WEFT_NUM_DTYPES)
        return weft_error(WEFT_ERR_DTYPE, "cast: bad target dtype %lld", (long long)a->attrs->i[0]);
    weft_dtype dt = (weft_dtype)a->attrs->i[0];
    weft_meta_set(o, a->in[0]->ndim, a->in[0]->sizes, dt);
    return WEFT_OK;
}

// ---- backward rules (in terms of ops, so they differentiate again) ----
#define G (b->gout[0])
#define X (b->in[0])
#define Y (b->out[0])
#define NEED(i) (b->needs[i])

// A 0-d zero on the gradient's device (backward rules run on the forward's device).
static weft_tensor *zero_like(const weft_tensor *g) {
    return weft_tensor_full_on(0, NULL, (weft_dtype)g->dtype, 0, g->device);
}
// Result check: a rule fails when an op it used failed.
static weft_status done(const weft_bw_args *b) {
    for (int i = 0; i < b->n_in; i++)
        if (b->needs[i] && !b->gin[i]) return weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
    return WEFT_OK;
}

static weft_status bw_neg(const weft_bw_args *b) {
    b->gin[0] = weft_neg(G);
    return done(b);
}
static weft_status bw_identity(const weft_bw_args *b) {
    b->gin[0] = weft_tensor_ref(G);
    return done(b);
}
static weft_status bw_abs(const weft_bw_args *b) {
    weft_tensor *s = weft_sign(X);
    b->gin[0] = weft_mul(G, s);
    weft_tensor_free(s);
    return done(b);
}
static weft_status bw_exp(const weft_bw_args *b) {
    b->gin[0] = weft_mul(G, Y);
    return done(b);
}
static weft_status bw_log(const weft_bw_args *b) {
    b->gin[0] = weft_div(G, X);
    return done(b);
}
static weft_status bw_sqrt(const weft_bw_args *b) { // g / (2 sqrt x)
    weft_tensor *t = weft_div(G, Y);
    b->gin[0] = weft_mul_scalar(t, 0.5);
    weft_tensor_free(t);
    return done(b);
}
static weft_status bw_rsqrt(const weft_bw_args *b) { // -0.5 g y^3
    weft_tensor *y3 = weft_pow_scalar(Y, 3.0), *t = weft_mul(G, y3);
    b->gin[0] = weft_mul_scalar(t, -0.5);
    weft_tensor_free(y3);
    weft_tensor_free(t);
    return done(b);
}
static weft_status bw_sin(const weft_bw_args *b) {
    weft_tensor *c = weft_cos(X);
    b->gin[0] = weft_mul(G, c);
    weft_tensor_free(c);
    return done(b);
}
static weft_status bw_cos(const weft_bw_args *b) {
    weft_tensor *s = weft_sin(X), *t = weft_mul(G, s);
    b->gin[0] = weft_neg(t);
    weft_tensor_free(s);
    weft_tensor_free(t);
    return done(b);
}
static weft_status bw_tanh(const weft_bw_args *b) { // g (1 - y^2)
    weft_tensor *y2 = weft_mul(Y, Y), *t = weft_mul(G, y2);
    b->gin[0] = weft_sub(G, t);
    weft_tensor_free(y2);
    weft_tensor_free(t);
    return done(b);
}
static weft_status bw_sigmoid(const weft_bw_args *b) { // g y (1 - y)
    weft_tensor *gy = weft_mul(G, Y), *gyy = weft_mul(gy, Y);
    b->gin[0] = weft_sub(gy, gyy);
    weft_tensor_free(gy);
    weft_tensor_free(gyy);
    return done(b);
}
static weft_status bw_relu(const weft_bw_args *b) {
    b->gin[0] = weft_relu_backward(G, X);
    return done(b);
}
// relu_backward(g, x) is linear in g and piecewise constant in x.
static weft_status bw_relu_backward(const weft_bw_args *b) {
    if (NEED(0)) b->gin[0] = weft_bw_unbroadcast(b, 0, weft_relu_backward(G, b->in[1]));
    if (NEED(1))
        b->gin[1] = weft_tensor_full_on(b->in_meta[1].ndim, b->in_meta[1].sizes, b->in_meta[1].dtype, 0, G->device);
    return done(b);
}
static weft_status bw_gelu(const weft_bw_args *b) {
    b->gin[0] = weft_gelu_backward(G, X);
    return done(b);
}
// GELU's second derivative, composed of ops (for the backward of the backward ops). Exact form:
// phi(x) (2 - x^2). Tanh form, with t = tanh(u), u = k (x + a x^3), u' = k (1 + 3 a x^2):
// (1 - t^2) (u' - x t u'^2 + 3 k a x^2).
weft_tensor *weft_gelu_second(weft_tensor *x, bool tanh_form) {
    weft_tensor *t[20] = {0}, *r = NULL;
    int n = 0;
#define T_(e) (t[n++] = (e))
    weft_tensor *x2 = T_(weft_mul(x, x));
    if (!tanh_form) {
        weft_tensor *h = T_(weft_mul_scalar(x2, -0.5)), *e = T_(weft_exp(h));
        weft_tensor *w = T_(weft_add_scalar(h, 1.0)), *d = T_(weft_mul(e, w)); // e^(-x^2/2) (1 - x^2/2)
        r = weft_mul_scalar(d, 0.7978845608028654);                             // times 2/sqrt(2 pi)
    } else {
        const double k = 0.7978845608028654, a = 0.044715;
        weft_tensor *x3 = T_(weft_mul(x2, x)), *ax3 = T_(weft_mul_scalar(x3, a));
        weft_tensor *s = T_(weft_add(x, ax3)), *u = T_(weft_mul_scalar(s, k)), *th = T_(weft_tanh(u));
        weft_tensor *q = T_(weft_mul_scalar(x2, 3 * a * k)), *up = T_(weft_add_scalar(q, k)); // u'
        weft_tensor *up2 = T_(weft_mul(up, up)), *xt = T_(weft_mul(x, th)), *xtu = T_(weft_mul(xt, up2));
        weft_tensor *i1 = T_(weft_sub(up, xtu)), *in = T_(weft_add(i1, q));
        weft_tensor *t2 = T_(weft_mul(th, th)), *nt2 = T_(weft_neg(t2)), *sech = T_(weft_add_scalar(nt2, 1.0));
        r = weft_mul(sech, in);
    }
#undef T_
    for (int i = 0; i < n; i++) weft_tensor_free(t[i]);
    return r;
}

weft_tensor *weft_gelu_backward_as(weft_tensor *g, weft_tensor *x, bool tanh_form) {
    return tanh_form ? weft_gelu_tanh_backward(g, x) : weft_gelu_backward(g, x);
}

// gelu_backward(g, x) = g f'(x) (f = gelu or gelu_tanh): linear in g; d/dx = g f''(x).
static weft_status bw_gelu_bw_rule(const weft_bw_args *b, bool tanh_form) {
    weft_tensor *x = b->in[1];
    if (NEED(0)) b->gin[0] = weft_bw_unbroadcast(b, 0, weft_gelu_backward_as(G, x, tanh_form));
    if (NEED(1)) {
        weft_tensor *d = weft_gelu_second(x, tanh_form), *gg = weft_mul(G, b->in[0]);
        b->gin[1] = weft_bw_unbroadcast(b, 1, weft_mul(gg, d));
        weft_tensor_free(d);
        weft_tensor_free(gg);
    }
    return done(b);
}
static weft_status bw_gelu_backward(const weft_bw_args *b) { return bw_gelu_bw_rule(b, false); }
static weft_status bw_gelu_tanh(const weft_bw_args *b) {
    b->gin[0] = weft_gelu_tanh_backward(G, X);
    return done(b);
}
static weft_status bw_gelu_tanh_backward(const weft_bw_args *b) { return bw_gelu_bw_rule(b, true); }
static weft_status bw_erf(const weft_bw_args *b) { // g 2/sqrt(pi) exp(-x^2)
    weft_tensor *x2 = weft_mul(X, X), *nx2 = weft_neg(x2), *e = weft_exp(nx2), *t = weft_mul(G, e);
    b->gin[0] = weft_mul_scalar(t, 1.1283791670955126); // 2/sqrt(pi)
    weft_tensor *ts[] = {x2, nx2, e, t};
    for (int k = 0; k < 4; k++) weft_tensor_free(ts[k]);
    return done(b);
}
// asin, acos: +-g / sqrt(1 - x^2); atan: g / (1 + x^2).
static weft_status bw_arc(const weft_bw_args *b, int which) {
    weft_tensor *x2 = weft_mul(X, X), *u = which == 2 ? weft_add_scalar(x2, 1.0) : weft_neg(x2);
    weft_tensor *w = which == 2 ? weft_div(G, u) : NULL, *v = which == 2 ? NULL : weft_add_scalar(u, 1.0);
    weft_tensor *r = v ? weft_rsqrt(v) : NULL, *t = r ? weft_mul(G, r) : NULL;
    b->gin[0] = which == 2 ? weft_tensor_ref(w) : which == 1 ? weft_neg(t) : weft_tensor_ref(t);
    weft_tensor *ts[] = {x2, u, w, v, r, t};
    for (int k = 0; k < 6; k++) weft_tensor_free(ts[k]);
    return done(b);
}
static weft_status bw_asin(const weft_bw_args *b) { return bw_arc(b, 0); }
static weft_status bw_acos(const weft_bw_args *b) { return bw_arc(b, 1); }
static weft_status bw_atan(const weft_bw_args *b) { return bw_arc(b, 2); }
static weft_status bw_silu(const weft_bw_args *b) { // g s (1 + x (1 - s)), s = sigmoid(x)
    weft_tensor *s = weft_sigmoid(X), *one_m = weft_neg(s), *t1 = weft_add_scalar(one_m, 1.0);
    weft_tensor *xt = weft_mul(X, t1), *t2 = weft_add_scalar(xt, 1.0), *d = weft_mul(s, t2);
    b->gin[0] = weft_mul(G, d);
    weft_tensor *ts[] = {s, one_m, t1, xt, t2, d};
    for (int k = 0; k < 6; k++) weft_tensor_free(ts[k]);
    return done(b);
}
static weft_status bw_pow_scalar(const weft_bw_args *b) { // g p x^(p-1)
    double p = b->attrs->f[0];
    weft_tensor *xp = weft_pow_scalar(X, p - 1.0), *t = weft_mul(G, xp);
    b->gin[0] = weft_mul_scalar(t, p);
    weft_tensor_free(xp);
    weft_tensor_free(t);
    return done(b);
}
static weft_status bw_mul_scalar(const weft_bw_args *b) {
    b->gin[0] = weft_mul_scalar(G, b->attrs->f[0]);
    return done(b);
}
static weft_status bw_add(const weft_bw_args *b) {
    if (NEED(0)) b->gin[0] = weft_bw_unbroadcast(b, 0, weft_tensor_ref(G));
    if (NEED(1)) b->gin[1] = weft_bw_unbroadcast(b, 1, weft_tensor_ref(G));
    return done(b);
}
static weft_status bw_sub(const weft_bw_args *b) {
    if (NEED(0)) b->gin[0] = weft_bw_unbroadcast(b, 0, weft_tensor_ref(G));
    if (NEED(1)) b->gin[1] = weft_bw_unbroadcast(b, 1, weft_neg(G));
    return done(b);
}
static weft_status bw_mul(const weft_bw_args *b) {
    if (NEED(0)) b->gin[0] = weft_bw_unbroadcast(b, 0, weft_mul(G, b->in[1]));
    if (NEED(1)) b->gin[1] = weft_bw_unbroadcast(b, 1, weft_mul(G, b->in[0]));
    return done(b);
}
static weft_status bw_div(const weft_bw_args *b) { // d/da = g/b, d/db = -g a / b^2
    if (NEED(0)) b->gin[0] = weft_bw_unbroadcast(b, 0, weft_div(G, b->in[1]));
    if (NEED(1)) {
        weft_tensor *ga = weft_mul(G, b->in[0]), *bb = weft_mul(b->in[1], b->in[1]), *q = weft_div(ga, bb);
        b->gin[1] = weft_bw_unbroadcast(b, 1, weft_neg(q));
        weft_tensor_free(ga);
        weft_tensor_free(bb);
        weft_tensor_free(q);
    }
    return done(b);
}
// fmod / remainder: a - q b with q = trunc(a / b) / floor(a / b), piecewise constant: d/da = g, d/db = -g q.
static weft_status bw_mod(const weft_bw_args *b, bool floored) {
    if (NEED(0)) b->gin[0] = weft_bw_unbroadcast(b, 0, weft_tensor_ref(G));
    if (NEED(1)) {
        weft_tensor *d = weft_div(b->in[0], b->in[1]), *q = floored ? weft_floor(d) : weft_trunc(d), *t = weft_mul(G, q);
        b->gin[1] = weft_bw_unbroadcast(b, 1, weft_neg(t));
        weft_tensor_free(d);
        weft_tensor_free(q);
        weft_tensor_free(t);
    }
    return done(b);
}
static weft_status bw_fmod(const weft_bw_args *b) { return bw_mod(b, false); }
static weft_status bw_remainder(const weft_bw_args *b) { return bw_mod(b, true); }
static weft_status bw_pow(const weft_bw_args *b) { // d/da = g e a^(e-1), d/de = g a^e log a
    weft_tensor *A = b->in[0], *E = b->in[1];
    if (NEED(0)) {
        weft_tensor *em1 = weft_add_scalar(E, -1.0), *ap = weft_pow(A, em1), *t = weft_mul(ap, E);
        b->gin[0] = weft_bw_unbroadcast(b, 0, weft_mul(G, t));
        weft_tensor_free(em1);
        weft_tensor_free(ap);
        weft_tensor_free(t);
    }
    if (NEED(1)) {
        weft_tensor *y = weft_pow(A, E), *la = weft_log(A), *t = weft_mul(y, la);
        b->gin[1] = weft_bw_unbroadcast(b, 1, weft_mul(G, t));
        weft_tensor_free(y);
        weft_tensor_free(la);
        weft_tensor_free(t);
    }
    return done(b);
}
// maximum/minimum: the gradient goes to the winner; ties split it evenly (as PyTorch).
static weft_status bw_minmax(const weft_bw_args *b, bool is_max) {
    weft_tensor *A = b->in[0], *B = b->in[1];
    weft_dtype dt = (weft_dtype)A->dtype;
    weft_tensor *win = is_max ? weft_gt(A, B) : weft_lt(A, B), *tie = weft_eq(A, B);
    weft_tensor *w = weft_cast(win, dt), *t = weft_cast(tie, dt), *th = weft_mul_scalar(t, 0.5);
    weft_tensor *wa = weft_add(w, th); // weight of a
    if (NEED(0)) b->gin[0] = weft_bw_unbroadcast(b, 0, weft_mul(G, wa));
    if (NEED(1)) {
        weft_tensor *gwa = weft_mul(G, wa), *r = weft_sub(G, gwa);
        b->gin[1] = weft_bw_unbroadcast(b, 1, r);
        weft_tensor_free(gwa);
    }
    weft_tensor *ts[] = {win, tie, w, t, th, wa};
    for (int k = 0; k < 6; k++) weft_tensor_free(ts[k]);
    return done(b);
}
static weft_status bw_maximum(const weft_bw_args *b) { return bw_minmax(b, true); }
static weft_status bw_minimum(const weft_bw_args *b) { return bw_minmax(b, false); }
static weft_status bw_where(const weft_bw_args *b) {
    weft_tensor *z = zero_like(G);
    if (NEED(1)) b->gin[1] = weft_bw_unbroadcast(b, 1, weft_where(b->in[0], G, z));
    if (NEED(2)) b->gin[2] = weft_bw_unbroadcast(b, 2, weft_where(b->in[0], z, G));
    weft_tensor_free(z);
    return done(b);
}
static weft_status bw_cast(const weft_bw_args *b) {
    b->gin[0] = weft_cast(G, b->in_meta[0].dtype);
    return done(b);
}

// ---- entries ----
// Ops that take f32 also take bf16 / f16: computed in f32 on widened copies, each result rounded once.
#define EW_DT(mask) ((mask) | (((mask) & WEFT_DT(WEFT_F32)) ? WEFT_DT_HALF : 0u))
#define K_EW(mask) .kernel = {[WEFT_CPU] = {weft_cpu_elementwise, EW_DT(mask)}}
#define UNARY(nm, V, MASK, BW, SAVE) \
    weft_op_def weft_op_##nm = {.name = #nm, .n_in = 1, .n_out = 1, .save = (SAVE), .variant = (V), \
                                .infer = infer_same, .backward = (BW), K_EW(MASK)};
#define BINARY(nm, V, MASK, BW, SAVE) \
    weft_op_def weft_op_##nm = {.name = #nm, .n_in = 2, .n_out = 1, .save = (SAVE), .variant = (V), \
                                .infer = infer_binary, .backward = (BW), K_EW(MASK)};
#define COMPARE(nm, V) \
    weft_op_def weft_op_##nm = {.name = #nm, .n_in = 2, .n_out = 1, .flags = WEFT_OPF_NONDIFF, .variant = (V), \
                                .infer = infer_compare, K_EW(WEFT_DT_NUM | WEFT_DT(WEFT_U8) | WEFT_DT(WEFT_BOOL))};

UNARY(neg, WEFT_EW_NEG, WEFT_DT_NUM, bw_neg, 0)
UNARY(abs, WEFT_EW_ABS, WEFT_DT_NUM, bw_abs, WEFT_SAVE_IN(0))
UNARY(exp, WEFT_EW_EXP, WEFT_DT_FLOAT, bw_exp, WEFT_SAVE_OUT(0))
UNARY(log, WEFT_EW_LOG, WEFT_DT_FLOAT, bw_log, WEFT_SAVE_IN(0))
UNARY(sqrt, WEFT_EW_SQRT, WEFT_DT_FLOAT, bw_sqrt, WEFT_SAVE_OUT(0))
UNARY(rsqrt, WEFT_EW_RSQRT, WEFT_DT_FLOAT, bw_rsqrt, WEFT_SAVE_OUT(0))
UNARY(sin, WEFT_EW_SIN, WEFT_DT_FLOAT, bw_sin, WEFT_SAVE_IN(0))
UNARY(cos, WEFT_EW_COS, WEFT_DT_FLOAT, bw_cos, WEFT_SAVE_IN(0))
UNARY(tanh, WEFT_EW_TANH, WEFT_DT_FLOAT, bw_tanh, WEFT_SAVE_OUT(0))
UNARY(sigmoid, WEFT_EW_SIGMOID, WEFT_DT_FLOAT, bw_sigmoid, WEFT_SAVE_OUT(0))
UNARY(relu, WEFT_EW_RELU, WEFT_DT_NUM, bw_relu, WEFT_SAVE_IN(0))
UNARY(gelu, WEFT_EW_GELU, WEFT_DT_FLOAT, bw_gelu, WEFT_SAVE_IN(0))
UNARY(gelu_tanh, WEFT_EW_GELU_TANH, WEFT_DT_FLOAT, bw_gelu_tanh, WEFT_SAVE_IN(0))
UNARY(silu, WEFT_EW_SILU, WEFT_DT_FLOAT, bw_silu, WEFT_SAVE_IN(0))
UNARY(erf, WEFT_EW_ERF, WEFT_DT_FLOAT, bw_erf, WEFT_SAVE_IN(0))
UNARY(asin, WEFT_EW_ASIN, WEFT_DT_FLOAT, bw_asin, WEFT_SAVE_IN(0))
UNARY(acos, WEFT_EW_ACOS, WEFT_DT_FLOAT, bw_acos, WEFT_SAVE_IN(0))
UNARY(atan, WEFT_EW_ATAN, WEFT_DT_FLOAT, bw_atan, WEFT_SAVE_IN(0))
UNARY(pow_scalar, WEFT_EW_POW_SCALAR, WEFT_DT_FLOAT, bw_pow_scalar, WEFT_SAVE_IN(0))
UNARY(add_scalar, WEFT_EW_ADD_SCALAR, WEFT_DT_NUM, bw_identity, 0)
UNARY(mul_scalar, WEFT_EW_MUL_SCALAR, WEFT_DT_NUM, bw_mul_scalar, 0)
BINARY(add, WEFT_EW_ADD, WEFT_DT_NUM, bw_add, 0)
BINARY(sub, WEFT_EW_SUB, WEFT_DT_NUM, bw_sub, 0)
BINARY(mul, WEFT_EW_MUL, WEFT_DT_NUM, bw_mul, WEFT_SAVE_IN(0) | WEFT_SAVE_IN(1))
BINARY(div, WEFT_EW_DIV, WEFT_DT_NUM, bw_div, WEFT_SAVE_IN(0) | WEFT_SAVE_IN(1))
BINARY(pow, WEFT_EW_POW, WEFT_DT_FLOAT, bw_pow, WEFT_SAVE_IN(0) | WEFT_SAVE_IN(1))
BINARY(fmod, WEFT_EW_FMOD, WEFT_DT_NUM, bw_fmod, WEFT_SAVE_IN(0) | WEFT_SAVE_IN(1))
BINARY(remainder, WEFT_EW_REMAINDER, WEFT_DT_NUM, bw_remainder, WEFT_SAVE_IN(0) | WEFT_SAVE_IN(1))
BINARY(maximum, WEFT_EW_MAXIMUM, WEFT_DT_NUM, bw_maximum, WEFT_SAVE_IN(0) | WEFT_SAVE_IN(1))
BINARY(minimum, WEFT_EW_MINIMUM, WEFT_DT_NUM, bw_minimum, WEFT_SAVE_IN(0) | WEFT_SAVE_IN(1))
BINARY(relu_backward, WEFT_EW_RELU_BW, WEFT_DT_NUM, bw_relu_backward, WEFT_SAVE_IN(1))
BINARY(gelu_backward, WEFT_EW_GELU_BW, WEFT_DT_FLOAT, bw_gelu_backward, WEFT_SAVE_IN(0) | WEFT_SAVE_IN(1))
BINARY(gelu_tanh_backward, WEFT_EW_GELU_TANH_BW, WEFT_DT_FLOAT, bw_gelu_tanh_backward,
       WEFT_SAVE_IN(0) | WEFT_SAVE_IN(1))
COMPARE(eq, WEFT_EW_EQ)
COMPARE(ne, WEFT_EW_NE)
COMPARE(lt, WEFT_EW_LT)
COMPARE(le, WEFT_EW_LE)
COMPARE(gt, WEFT_EW_GT)
COMPARE(ge, WEFT_EW_GE)

// Internal: sign(x) and d/dx gelu(x); used by backward rules, zero/no gradient.
weft_op_def weft_op_sign = {.name = "sign", .n_in = 1, .n_out = 1, .flags = WEFT_OPF_NONDIFF,
                            .variant = WEFT_EW_SIGN, .infer = infer_same, K_EW(WEFT_DT_NUM)};
// Rounding (floats): piecewise constant, so no gradient flows (PyTorch's is zero almost everywhere).
#define ROUNDING(nm, V) \
    weft_op_def weft_op_##nm = {.name = #nm, .n_in = 1, .n_out = 1, .flags = WEFT_OPF_NONDIFF, .variant = (V), \
                                .infer = infer_same, K_EW(WEFT_DT_FLOAT)};
ROUNDING(floor, WEFT_EW_FLOOR)
ROUNDING(ceil, WEFT_EW_CEIL)
ROUNDING(round, WEFT_EW_ROUND)
ROUNDING(trunc, WEFT_EW_TRUNC)
weft_op_def weft_op_gelu_grad = {.name = "gelu_grad", .n_in = 1, .n_out = 1, .variant = WEFT_EW_GELU_GRAD,
                                 .infer = infer_same, K_EW(WEFT_DT_FLOAT)};

weft_op_def weft_op_where = {.name = "where", .n_in = 3, .n_out = 1, .save = WEFT_SAVE_IN(0), .dispatch_in = 1,
                             .infer = infer_where, .backward = bw_where,
                             .kernel = {[WEFT_CPU] = {weft_cpu_where, WEFT_DT_ALL}}};
// cast: attrs.i[0] = target dtype
weft_op_def weft_op_cast = {.name = "cast", .n_in = 1, .n_out = 1, .infer = infer_cast, .backward = bw_cast,
                            .kernel = {[WEFT_CPU] = {weft_cpu_cast, WEFT_DT_ALL}}};
// cast_multi (x_1, ..., x_k, y_1, ..., y_k) -> nothing: y_j = x_j converted to y_j's dtype, written in place
// (y_j contiguous, x_j's sizes, any strides for x_j; run by weft_op_apply_into with no outputs). The same
// values as cast, bit for bit, in few launches on CUDA: autocast's weight casts at the start of a region
// (weft_autocast_cache_fill). Dispatched by x_1's dtype.
static weft_status infer_cast_multi(const weft_op_args *a, weft_out_meta *o) {
    (void)o;
    if (a->n_in < 2 || a->n_in % 2)
        return weft_error(WEFT_ERR_ARG, "cast_multi: takes k sources then k destinations (got %d inputs)", a->n_in);
    int k = a->n_in / 2;
    for (int j = 0; j < k; j++) {
        const weft_tensor *x = a->in[j], *y = a->in[k + j];
        char sx[96], sy[96];
        if (!weft_shape_equal(x->ndim, x->sizes, y->ndim, y->sizes))
            return weft_error(WEFT_ERR_SHAPE, "cast_multi: pair %d: source %s and destination %s differ", j,
                              weft_tensor_shape_str(x, sx, sizeof sx), weft_tensor_shape_str(y, sy, sizeof sy));
        if (!weft_tensor_is_contiguous(y))
            return weft_error(WEFT_ERR_ARG, "cast_multi: pair %d: the destination is not contiguous", j);
    }
    return WEFT_OK;
}
static weft_status cpu_cast_multi(const weft_op_args *a) {
    weft_status st = WEFT_OK;
    for (int j = 0, k = a->n_in / 2; j < k && st == WEFT_OK; j++) { // each pair through cast's own kernel
        weft_op_args c = {.op = &weft_op_cast, .n_in = 1, .in = &a->in[j], .n_out = 1, .out = &a->in[k + j]};
        st = weft_cpu_cast(&c);
    }
    return st;
}
weft_op_def weft_op_cast_multi = {.name = "cast_multi", .n_in = -1, .n_out = 0, .flags = WEFT_OPF_NONDIFF,
                                  .infer = infer_cast_multi, .kernel = {[WEFT_CPU] = {cpu_cast_multi, WEFT_DT_ALL}}};
// copy: a fresh contiguous copy (clone, contiguous, reshape of a non-viewable tensor)
weft_op_def weft_op_copy = {.name = "copy", .n_in = 1, .n_out = 1, .infer = infer_same, .backward = bw_identity,
                            .kernel = {[WEFT_CPU] = {weft_cpu_cast, WEFT_DT_ALL}}};

// ---- public constructors ----
#define U(nm) \
    weft_tensor *weft_##nm(weft_tensor *t) { return weft_op_apply1(&weft_op_##nm, 1, &t, NULL); }
U(neg) U(abs) U(exp) U(log) U(sqrt) U(rsqrt) U(sin) U(cos) U(tanh) U(sigmoid) U(relu) U(gelu) U(gelu_tanh) U(silu)
U(erf)
U(sign) U(gelu_grad) U(floor) U(ceil) U(round) U(trunc) U(asin) U(acos) U(atan)
#define S(nm) \
    weft_tensor *weft_##nm(weft_tensor *t, double s) { \
        weft_attrs at = {.f = {s}}; \
        return weft_op_apply1(&weft_op_##nm, 1, &t, &at); \
    }
S(pow_scalar) S(add_scalar) S(mul_scalar)
#define B(nm) \
    weft_tensor *weft_##nm(weft_tensor *a, weft_tensor *b) { \
        weft_tensor *in[2] = {a, b}; \
        return weft_op_apply1(&weft_op_##nm, 2, in, NULL); \
    }
B(add) B(sub) B(mul) B(div) B(pow) B(fmod) B(remainder) B(maximum) B(minimum) B(eq) B(ne) B(lt) B(le) B(gt) B(ge) B(relu_backward) B(gelu_backward) B(gelu_tanh_backward)

weft_tensor *weft_where(weft_tensor *c, weft_tensor *a, weft_tensor *b) {
    weft_tensor *in[3] = {c, a, b};
    return weft_op_apply1(&weft_op_where, 3, in, NULL);
}

weft_tensor *weft_cast(weft_tensor *t, weft_dtype dt) {
    if (t && t->dtype == dt) return weft_tensor_ref(t);
    weft_attrs at = {.i = {dt}};
    return weft_op_apply1(&weft_op_cast, 1, &t, &at);
}

weft_tensor *weft_tensor_clone(weft_tensor *t) {
    if (!t) return weft_error_null_input("clone");
    return weft_op_apply1(&weft_op_copy, 1, &t, NULL);
}

weft_tensor *weft_tensor_contiguous(weft_tensor *t) {
    if (!t) return weft_error_null_input("contiguous");
    if (weft_tensor_is_contiguous(t)) return weft_tensor_ref(t);
    return weft_op_apply1(&weft_op_copy, 1, &t, NULL);
}
