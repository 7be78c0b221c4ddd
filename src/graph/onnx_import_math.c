// ONNX ops read as compositions of weft's elementwise, reduction and index ops (see onnx_import.h):
// activations (Elu, Celu, Selu, HardSigmoid, HardSwish, ThresholdedRelu, Shrink, Softplus, Softsign, PRelu),
// Tan and the hyperbolic functions, IsInf, IsNaN, CastLike, Hardmax, OneHot, CumSum, EyeLike, the window
// functions, MeanVarianceNormalization, LRN and InstanceNormalization. Each is a few graph ops, so each has the
// gradient its parts have.
#include <math.h>
#include <stdlib.h>

#include "onnx_import.h"

#ifdef WEFT_HAVE_ONNX

// Ops on values that pass NONE through (the first failure's error stays set), so a formula is checked once.
static weft_value op1(nctx *c, const char *name, const char *opn, weft_value a) {
    return OK(a) ? oi_op(c, name, opn, 1, &a, NULL, 0, NULL, 0) : a;
}
static weft_value op2(nctx *c, const char *name, const char *opn, weft_value a, weft_value b) {
    if (!OK(a) || !OK(b)) return WEFT_VALUE_NONE;
    return oi_op(c, name, opn, 2, (weft_value[]){a, b}, NULL, 0, NULL, 0);
}
static weft_value opf(nctx *c, const char *name, const char *opn, weft_value a, double f) { // add_scalar, mul_scalar
    return OK(a) ? oi_op(c, name, opn, 1, &a, NULL, 0, &f, 1) : a;
}
static weft_value where3(nctx *c, const char *name, weft_value m, weft_value a, weft_value b) {
    if (!OK(m) || !OK(a) || !OK(b)) return WEFT_VALUE_NONE;
    return oi_op(c, name, "where", 3, (weft_value[]){m, a, b}, NULL, 0, NULL, 0);
}
// A scalar of v's dtype.
static weft_value like(nctx *c, weft_value v, double x) { return OK(v) ? oi_scalar_as(c, dtype_of(c, v), x) : v; }

static bool is_float(weft_dtype dt) { return dt == WEFT_F32 || dt == WEFT_F64 || dt == WEFT_F16 || dt == WEFT_BF16; }

// log(1 + u) for u >= 0 without log's cancellation near 1 (Kahan): w = 1 + u rounded, log(w) u / (w - 1), or u
// where w is 1. The divisor the other branch sees is never 0, so neither value nor gradient is NaN.
static weft_value log1p_(nctx *c, weft_value u) {
    weft_value w = opf(c, NULL, "add_scalar", u, 1), d = opf(c, NULL, "add_scalar", w, -1);
    weft_value z = op2(c, NULL, "eq", d, like(c, u, 0)), safe = where3(c, NULL, z, like(c, u, 1), d);
    return where3(c, NULL, z, u, op2(c, NULL, "mul", op1(c, NULL, "log", w), op2(c, NULL, "div", u, safe)));
}

// The activations and functions of one input; arg names the ONNX op in lower case.
weft_status oi_act(nctx *c, const char *arg) {
    weft_value x = c->in[0], y = WEFT_VALUE_NONE, zero = like(c, x, 0);
    const char *o = node_out(c, 0);
    if (!is_float(dtype_of(c, x))) FAIL("input of type %s (floats only)", weft_dtype_name(dtype_of(c, x)));
    if (!strcmp(arg, "elu") || !strcmp(arg, "selu")) { // x > 0 ? x : alpha (e^x - 1), Selu's times gamma
        bool selu = arg[0] == 's';
        double al = oi_attr_f(c, "alpha", selu ? 1.67326319217681884765625 : 1.0);
        weft_value e = opf(c, NULL, "mul_scalar", opf(c, NULL, "add_scalar", op1(c, NULL, "exp", x), -1), al);
        y = where3(c, selu ? NULL : o, op2(c, NULL, "gt", x, zero), x, e);
        if (selu) y = opf(c, o, "mul_scalar", y, oi_attr_f(c, "gamma", 1.05070102214813232421875));
    } else if (!strcmp(arg, "celu")) { // max(0, x) + min(0, alpha (e^(x / alpha) - 1))
        double al = oi_attr_f(c, "alpha", 1.0);
        if (al == 0) FAIL("alpha 0");
        weft_value e = op1(c, NULL, "exp", opf(c, NULL, "mul_scalar", x, 1.0 / al));
        e = op2(c, NULL, "minimum", opf(c, NULL, "mul_scalar", opf(c, NULL, "add_scalar", e, -1), al), zero);
        y = op2(c, o, "add", op1(c, NULL, "relu", x), e);
    } else if (!strcmp(arg, "hardsigmoid") || !strcmp(arg, "hardswish")) { // max(0, min(1, alpha x + beta))
        bool sw = !strcmp(arg, "hardswish");
        double al = sw ? 1.0 / 6 : oi_attr_f(c, "alpha", 0.2), be = sw ? 0.5 : oi_attr_f(c, "beta", 0.5);
        weft_value h = opf(c, NULL, "add_scalar", opf(c, NULL, "mul_scalar", x, al), be);
        y = op2(c, sw ? NULL : o, "maximum", op2(c, NULL, "minimum", h, like(c, x, 1)), zero);
        if (sw) y = op2(c, o, "mul", x, y);
    } else if (!strcmp(arg, "thresholdedrelu")) { // x > alpha ? x : 0
        y = where3(c, o, op2(c, NULL, "gt", x, like(c, x, oi_attr_f(c, "alpha", 1.0))), x, zero);
    } else if (!strcmp(arg, "shrink")) { // x < -lambd ? x + bias : x > lambd ? x - bias : 0
        double l = oi_attr_f(c, "lambd", 0.5), b = oi_attr_f(c, "bias", 0);
        weft_value hi = where3(c, NULL, op2(c, NULL, "gt", x, like(c, x, l)), opf(c, NULL, "add_scalar", x, -b), zero);
        y = where3(c, o, op2(c, NULL, "lt", x, like(c, x, -l)), opf(c, NULL, "add_scalar", x, b), hi);
    } else if (!strcmp(arg, "softplus")) { // log(e^x + 1) as max(x, 0) + log(1 + e^-|x|): no overflow
        weft_value t = op1(c, NULL, "exp", op1(c, NULL, "neg", op1(c, NULL, "abs", x)));
        y = op2(c, o, "add", op1(c, NULL, "relu", x), op1(c, NULL, "log", opf(c, NULL, "add_scalar", t, 1)));
    } else if (!strcmp(arg, "softsign")) { // x / (1 + |x|)
        y = op2(c, o, "div", x, opf(c, NULL, "add_scalar", op1(c, NULL, "abs", x), 1));
    } else if (!strcmp(arg, "tan")) {
        y = op2(c, o, "div", op1(c, NULL, "sin", x), op1(c, NULL, "cos", x));
    } else if (!strcmp(arg, "sinh") || !strcmp(arg, "cosh")) {
        // e^(|x| - ln 2) +- e^(-|x| - ln 2): finite wherever the result is; sinh below |x| = 1 as 2t / (1 - t^2),
        // t = tanh(x / 2), which does not cancel (its x is clamped, so the branch not taken stays finite)
        weft_value a = op1(c, NULL, "abs", x);
        weft_value p = op1(c, NULL, "exp", opf(c, NULL, "add_scalar", a, -M_LN2));
        weft_value m = op1(c, NULL, "exp", opf(c, NULL, "add_scalar", op1(c, NULL, "neg", a), -M_LN2));
        if (arg[0] == 'c') {
            y = op2(c, o, "add", p, m);
        } else {
            weft_value big = op2(c, NULL, "mul", op1(c, NULL, "sign", x), op2(c, NULL, "sub", p, m));
            weft_value xs = op2(c, NULL, "maximum", op2(c, NULL, "minimum", x, like(c, x, 1)), like(c, x, -1));
            weft_value t = op1(c, NULL, "tanh", opf(c, NULL, "mul_scalar", xs, 0.5));
            weft_value d = opf(c, NULL, "add_scalar", op1(c, NULL, "neg", op2(c, NULL, "mul", t, t)), 1);
            weft_value sm = op2(c, NULL, "div", opf(c, NULL, "mul_scalar", t, 2), d);
            y = where3(c, o, op2(c, NULL, "lt", a, like(c, x, 1)), sm, big);
        }
    } else if (!strcmp(arg, "asinh") || !strcmp(arg, "acosh")) {
        // asinh |x| = log1p(a + a^2 / (1 + sqrt(a^2 + 1))), negated for x < 0; acosh x = log1p(t + sqrt(t (t + 2))),
        // t = x - 1: neither cancels near 0 or 1. Above 2^26 both are log|x| + ln 2 to the last bit, and x^2
        // would overflow past 1.8e19 (the other branch's x is clamped, so it stays finite).
        // (f16: from 128, where 1 / 4x^2 is below its precision; x^2 there overflows past 256)
        bool as = arg[1] == 's';
        double lim = dtype_of(c, x) == WEFT_F16 ? 128.0 : 67108864.0;
        weft_value neg = as ? op2(c, NULL, "lt", x, zero) : WEFT_VALUE_NONE, big = like(c, x, lim);
        weft_value a = as ? where3(c, NULL, neg, op1(c, NULL, "neg", x), x) : x; // not abs: its slope at 0 is 0
        weft_value lo = op2(c, NULL, "minimum", a, big), u;
        if (as) {
            weft_value a2 = op2(c, NULL, "mul", lo, lo);
            weft_value r = opf(c, NULL, "add_scalar", op1(c, NULL, "sqrt", opf(c, NULL, "add_scalar", a2, 1)), 1);
            u = op2(c, NULL, "add", lo, op2(c, NULL, "div", a2, r));
        } else {
            weft_value t = opf(c, NULL, "add_scalar", lo, -1);
            u = op2(c, NULL, "add", t, op1(c, NULL, "sqrt", op2(c, NULL, "mul", t, opf(c, NULL, "add_scalar", t, 2))));
        }
        weft_value hi = opf(c, NULL, "add_scalar", op1(c, NULL, "log", op2(c, NULL, "maximum", a, big)), M_LN2);
        weft_value v = where3(c, as ? NULL : o, op2(c, NULL, "gt", a, big), hi, log1p_(c, u));
        if (as) y = where3(c, o, neg, op1(c, NULL, "neg", v), v);
        else y = v;
    } else if (!strcmp(arg, "atanh")) { // log((1 + x) / (1 - x)) / 2
        weft_value q = op2(c, NULL, "div", opf(c, NULL, "add_scalar", x, 1), opf(c, NULL, "add_scalar", op1(c, NULL, "neg", x), 1));
        y = opf(c, o, "mul_scalar", op1(c, NULL, "log", q), 0.5);
    } else if (!strcmp(arg, "isinf")) { // |x| == inf, x == inf or x == -inf (neither: nothing is, as NaN)
        bool neg = oi_attr_i(c, "detect_negative", 1) != 0, pos = oi_attr_i(c, "detect_positive", 1) != 0;
        weft_value v = neg && pos ? op1(c, NULL, "abs", x) : x;
        y = op2(c, o, "eq", v, like(c, x, pos ? INFINITY : neg ? -INFINITY : NAN));
    } else if (!strcmp(arg, "isnan")) {
        y = op2(c, o, "ne", x, x);
    } else {
        FAIL("no such function '%s'", arg);
    }
    OUT0(y);
}

// PRelu(x, slope): x < 0 ? slope x : x, slope broadcast to x.
weft_status oi_prelu(nctx *c, const char *arg) {
    (void)arg;
    weft_value x = c->in[0];
    OUT0(where3(c, node_out(c, 0), op2(c, NULL, "lt", x, like(c, x, 0)), op2(c, NULL, "mul", x, c->in[1]), x));
}

// CastLike(x, target): x cast to target's type.
weft_status oi_cast_like(nctx *c, const char *arg) {
    (void)arg;
    int64_t dt = dtype_of(c, c->in[1]);
    OUT0(oi_op(c, node_out(c, 0), "cast", 1, c->in, &dt, 1, NULL, 0));
}

// 0, 1, ..., n-1 as int64, shaped to lie along dim ax of nd dims (1 elsewhere).
static weft_value iota_along(nctx *c, int64_t n, int ax, int nd) {
    weft_tensor *t = oi_index_new(n);
    if (!t) return WEFT_VALUE_NONE;
    for (int64_t i = 0; i < n; i++) ((int64_t *)weft_tensor_data(t))[i] = i;
    weft_value v = oi_konst(c, NULL, t, NULL);
    int64_t s[WEFT_MAX_DIMS];
    for (int d = 0; d < nd; d++) s[d] = d == ax ? n : 1;
    return oi_reshape(c, NULL, v, nd, s);
}

// Hardmax: 1 at the first maximum along the axis, 0 elsewhere: argmax == iota. Before opset 13 the input is
// flattened to 2-D at the axis (default 1) as Softmax's.
weft_status oi_hardmax(nctx *c, const char *arg) {
    (void)arg;
    weft_value x = c->in[0];
    int nd = ndim_of(c, x);
    bool old = c->m->opset < 13;
    int ax = oi_axis(oi_attr_i(c, "axis", old ? 1 : -1), nd);
    if (ax < 0) FAIL("axis %lld", (long long)oi_attr_i(c, "axis", old ? 1 : -1));
    int64_t xs[WEFT_MAX_DIMS], s2[2] = {1, 1};
    sizes_copy(c, x, xs);
    int wd = nd;
    if (old) {
        for (int d = 0; d < nd; d++) s2[d >= ax] *= xs[d];
        x = oi_reshape(c, NULL, x, 2, s2), ax = 1, wd = 2;
    }
    int64_t at[3] = {INT64_C(1) << ax, 1, 0}, dt = dtype_of(c, c->in[0]);
    weft_value am = OK(x) ? oi_op(c, NULL, "argmax", 1, &x, at, 3, NULL, 0) : x;
    weft_value one = op2(c, NULL, "eq", am, iota_along(c, old ? s2[1] : xs[ax], ax, wd));
    weft_value y = OK(one) ? oi_op(c, old ? NULL : node_out(c, 0), "cast", 1, &one, &dt, 1, NULL, 0) : one;
    OUT0(old ? oi_reshape(c, node_out(c, 0), y, nd, xs) : y);
}

// OneHot(indices, depth, values): values[1] where the index (negatives from the end of depth) equals the
// position along the new axis, values[0] elsewhere; out-of-range indices give a row of values[0].
weft_status oi_one_hot(nctx *c, const char *arg) {
    (void)arg;
    weft_tensor *dk;
    weft_status st = oi_konst_in(c, 1, &dk);
    if (st) return st;
    if (weft_tensor_numel(dk) != 1) FAIL("depth must be one value");
    double dv = weft_tensor_item(dk);
    if (!(dv >= 1 && dv <= (double)(INT64_C(1) << 26))) FAIL("depth %g", dv);
    int64_t depth = (int64_t)dv, dt64 = WEFT_I64;
    weft_value idx = c->in[0], vals = c->in[2];
    int nd = ndim_of(c, idx), ax = oi_axis(oi_attr_i(c, "axis", -1), nd + 1);
    if (ax < 0) FAIL("axis %lld", (long long)oi_attr_i(c, "axis", -1));
    if (nd + 1 > WEFT_MAX_DIMS) FAIL("too many dims");
    if (ndim_of(c, vals) != 1 || sizes_of(c, vals)[0] != 2) FAIL("values must hold 2 elements");
    int64_t is[WEFT_MAX_DIMS], s[WEFT_MAX_DIMS];
    sizes_copy(c, idx, is);
    if (dtype_of(c, idx) != WEFT_I64) idx = oi_op(c, NULL, "cast", 1, &idx, &dt64, 1, NULL, 0); // floats truncate
    if (OK(idx)) idx = oi_wrap_negative(c, idx, depth);
    for (int d = 0, k = 0; d <= nd; d++) s[d] = d == ax ? 1 : is[k++];
    weft_value hot = op2(c, NULL, "eq", oi_reshape(c, NULL, idx, nd + 1, s), iota_along(c, depth, ax, nd + 1));
    weft_value off = oi_op(c, NULL, "slice", 1, &vals, (int64_t[]){0, 0, 1, 1}, 4, NULL, 0);
    weft_value on = oi_op(c, NULL, "slice", 1, &vals, (int64_t[]){0, 1, 2, 1}, 4, NULL, 0);
    OUT0(where3(c, node_out(c, 0), hot, oi_reshape(c, NULL, on, 0, NULL), oi_reshape(c, NULL, off, 0, NULL)));
}

// Zeros of v's dtype, of shape xs but k long along ax (a broadcast view of one zero).
static weft_value zeros_along(nctx *c, weft_value v, int nd, const int64_t *xs, int ax, int64_t k) {
    int64_t at[1 + WEFT_MAX_DIMS] = {nd};
    for (int d = 0; d < nd; d++) at[1 + d] = d == ax ? k : xs[d];
    weft_value z = like(c, v, 0);
    return OK(z) ? oi_op(c, NULL, "expand", 1, &z, at, 1 + nd, NULL, 0) : z;
}

// v shifted by k along ax: zeros come in at the start (at the end when back).
static weft_value shift(nctx *c, weft_value v, int ax, int nd, const int64_t *xs, int64_t k, bool back) {
    if (k >= xs[ax]) return oi_reshape(c, NULL, zeros_along(c, v, nd, xs, ax, xs[ax]), nd, xs); // all zeros
    int64_t sl[4] = {ax, back ? k : 0, back ? xs[ax] : xs[ax] - k, 1}, d = ax;
    weft_value z = zeros_along(c, v, nd, xs, ax, k), part = OK(v) ? oi_op(c, NULL, "slice", 1, &v, sl, 4, NULL, 0) : v;
    if (!OK(z) || !OK(part)) return WEFT_VALUE_NONE;
    return oi_op(c, NULL, "concat", 2, back ? (weft_value[]){part, z} : (weft_value[]){z, part}, &d, 1, NULL, 0);
}

// The product over the dims in mask of x (ReduceProd): those dims moved last and flattened, (K, R), then halved
// log2(R) times, the first half times the second (an odd column carried), as (K) viewed as out_nd / out (the kept
// dims, and 1s for the reduced ones with keepdims). Products of the parts only: exact gradients, zeros included.
weft_value oi_prod(nctx *c, const char *name, weft_value x, int64_t mask, int out_nd, const int64_t *out) {
    int nd = ndim_of(c, x);
    int64_t xs[WEFT_MAX_DIMS], p[WEFT_MAX_DIMS], K = 1, R = 1;
    sizes_copy(c, x, xs);
    int np = 0;
    for (int d = 0; d < nd; d++)
        if (!(mask >> d & 1)) p[np++] = d, K *= xs[d];
    for (int d = 0; d < nd; d++)
        if (mask >> d & 1) p[np++] = d, R *= xs[d];
    if (R == 0) { // the empty product: ones
        weft_value one = like(c, x, 1);
        int64_t at[1 + WEFT_MAX_DIMS] = {out_nd};
        if (out_nd) memcpy(at + 1, out, sizeof(int64_t) * (size_t)out_nd);
        weft_value e = OK(one) ? oi_op(c, NULL, "expand", 1, &one, at, 1 + out_nd, NULL, 0) : one;
        return oi_reshape(c, name, e, out_nd, out);
    }
    weft_value v = nd ? oi_op(c, NULL, "permute", 1, &x, p, nd, NULL, 0) : x;
    v = oi_reshape(c, NULL, v, 2, (int64_t[]){K, R});
    for (int64_t r = R; r > 1 && OK(v); r = r / 2 + (r & 1)) {
        int64_t h = r / 2, d = 1;
        weft_value a = oi_op(c, NULL, "slice", 1, &v, (int64_t[]){1, 0, h, 1}, 4, NULL, 0);
        weft_value b = OK(a) ? oi_op(c, NULL, "slice", 1, &v, (int64_t[]){1, h, 2 * h, 1}, 4, NULL, 0) : a;
        weft_value m = op2(c, NULL, "mul", a, b);
        if (r & 1) {
            weft_value last = OK(m) ? oi_op(c, NULL, "slice", 1, &v, (int64_t[]){1, 2 * h, r, 1}, 4, NULL, 0) : m;
            m = OK(last) ? oi_op(c, NULL, "concat", 2, (weft_value[]){m, last}, &d, 1, NULL, 0) : last;
        }
        v = m;
    }
    return oi_reshape(c, name, v, out_nd, out);
}

// CumSum(x, axis): a scan by doubling shifts (Hillis and Steele): log2(n) adds of x shifted by 1, 2, 4, ...
// exclusive shifts the inclusive sums by one; reverse shifts the other way.
weft_status oi_cumsum(nctx *c, const char *arg) {
    (void)arg;
    int64_t a;
    int n;
    weft_status st = oi_konst_ints(c, 1, &a, 1, &n);
    if (st) return st;
    if (n != 1) FAIL("axis must be one value");
    weft_value x = c->in[0];
    int nd = ndim_of(c, x), ax = oi_axis(a, nd);
    if (ax < 0) FAIL("axis %lld", (long long)a);
    int64_t xs[WEFT_MAX_DIMS];
    sizes_copy(c, x, xs);
    bool excl = oi_attr_i(c, "exclusive", 0) != 0, back = oi_attr_i(c, "reverse", 0) != 0;
    weft_value y = x;
    for (int64_t k = 1; k < xs[ax] && OK(y); k *= 2) y = op2(c, NULL, "add", y, shift(c, y, ax, nd, xs, k, back));
    if (excl) y = shift(c, y, ax, nd, xs, 1, back);
    OUT0(oi_reshape(c, node_out(c, 0), y, nd, xs));
}

// A tensor of the loader's making: f64 values in[0..n) of the given shape, cast to dt.
static weft_value made(nctx *c, const char *name, weft_tensor *t, weft_dtype dt, weft_tensor **keep) {
    if (!t) return WEFT_VALUE_NONE;
    weft_tensor *r = weft_tensor_dtype(t) == dt ? t : weft_cast(t, dt);
    if (r != t) weft_tensor_free(t);
    return r ? oi_konst(c, name, r, keep) : WEFT_VALUE_NONE;
}

// EyeLike(x): ones where column - row == k, of x's 2-D shape and the dtype attribute's type (else x's).
weft_status oi_eye_like(nctx *c, const char *arg) {
    (void)arg;
    if (ndim_of(c, c->in[0]) != 2) FAIL("input must be 2-D");
    weft_dtype dt = dtype_of(c, c->in[0]);
    if (oi_attr(c, "dtype") && !weft_onnx_dtype_from((int32_t)oi_attr_i(c, "dtype", 1), &dt))
        FAIL("type %lld is not one weft has", (long long)oi_attr_i(c, "dtype", 1));
    int64_t s[2], k = oi_attr_i(c, "k", 0);
    sizes_copy(c, c->in[0], s);
    weft_status st = oi_check_made(2, s);
    if (st) return st;
    weft_tensor *t = weft_tensor_zeros(2, s, WEFT_F64);
    if (!t) return weft_error(WEFT_ERR_OOM, "no memory");
    for (int64_t i = 0; i < s[0] && k > -s[0] && k < s[1]; i++) // k outside those bounds: all zeros
        if (i + k >= 0 && i + k < s[1]) ((double *)weft_tensor_data(t))[i * s[1] + i + k] = 1;
    c->out[0] = made(c, node_out(c, 0), t, dt, &c->konst0);
    return OK(c->out[0]) ? WEFT_OK : weft_last_status();
}

// HannWindow, HammingWindow, BlackmanWindow(size): sums of cosines of 2 pi n / N (periodic, the default) or
// 2 pi n / (N - 1) (symmetric), as known values of output_datatype (float by default).
weft_status oi_window(nctx *c, const char *arg) {
    int64_t n;
    int cnt;
    weft_status st = oi_konst_ints(c, 0, &n, 1, &cnt);
    if (st) return st;
    if (cnt != 1 || (st = oi_check_made(1, &n))) return cnt != 1 ? weft_error(WEFT_ERR_ARG, "size must be one value") : st;
    weft_dtype dt;
    if (!weft_onnx_dtype_from((int32_t)oi_attr_i(c, "output_datatype", 1), &dt))
        FAIL("type %lld is not one weft has", (long long)oi_attr_i(c, "output_datatype", 1));
    // a0 - a1 cos(x) + a2 cos(2x): Hann 1/2, 1/2; Hamming 25/46, 21/46 (ONNX's); Blackman 0.42, 0.5, 0.08
    double a0 = 0.5, a1 = 0.5, a2 = 0;
    if (!strcmp(arg, "hamming")) a0 = 25.0 / 46, a1 = 21.0 / 46;
    if (!strcmp(arg, "blackman")) a0 = 0.42, a1 = 0.5, a2 = 0.08;
    double den = oi_attr_i(c, "periodic", 1) ? (double)n : (double)n - 1;
    weft_tensor *t = weft_tensor_zeros(1, &n, WEFT_F64);
    if (!t) return weft_error(WEFT_ERR_OOM, "no memory");
    for (int64_t i = 0; i < n; i++) {
        double x = den > 0 ? 2 * M_PI * (double)i / den : 0;
        ((double *)weft_tensor_data(t))[i] = a0 - a1 * cos(x) + a2 * cos(2 * x);
    }
    c->out[0] = made(c, node_out(c, 0), t, dt, &c->konst0);
    return OK(c->out[0]) ? WEFT_OK : weft_last_status();
}

// MeanVarianceNormalization (axes default 0, 2, 3): (x - mean) / (sqrt(mean((x - mean)^2)) + 1e-9).
weft_status oi_mvn(nctx *c, const char *arg) {
    (void)arg;
    weft_value x = c->in[0];
    int nd = ndim_of(c, x), na;
    const int64_t *ax = oi_attr_ints(c, "axes", &na);
    int64_t mask = 0;
    for (int i = 0; i < (na < 0 ? 3 : na); i++) {
        int64_t want = na < 0 ? (int64_t[]){0, 2, 3}[i] : ax[i];
        int a = oi_axis(want, nd);
        if (a < 0) FAIL("axis %lld of %d dims", (long long)want, nd);
        mask |= INT64_C(1) << a;
    }
    int64_t at[3] = {mask, 1, 0};
    weft_value m = OK(x) ? oi_op(c, NULL, "mean", 1, &x, at, 3, NULL, 0) : x;
    weft_value d = op2(c, NULL, "sub", x, m), d2 = op2(c, NULL, "mul", d, d);
    weft_value v = OK(d2) ? oi_op(c, NULL, "mean", 1, &d2, at, 3, NULL, 0) : d2;
    OUT0(op2(c, node_out(c, 0), "div", d, opf(c, NULL, "add_scalar", op1(c, NULL, "sqrt", v), 1e-9)));
}

// InstanceNormalization(x, scale, B): each (n, c) plane normalised over the dims from 2 on with its biased variance,
// then scale[c] x + B[c].
weft_status oi_instance_norm(nctx *c, const char *arg) {
    (void)arg;
    weft_value x = c->in[0];
    int nd = ndim_of(c, x);
    if (nd < 3) FAIL("input must have at least 3 dims (N, C, ...)");
    int64_t xs[WEFT_MAX_DIMS], mask = 0, cs[WEFT_MAX_DIMS];
    sizes_copy(c, x, xs);
    for (int d = 2; d < nd; d++) mask |= INT64_C(1) << d;
    for (int k = 1; k < 3; k++)
        if (ndim_of(c, c->in[k]) != 1 || sizes_of(c, c->in[k])[0] != xs[1]) FAIL("input %d must hold one value per channel", k);
    for (int d = 0; d < nd; d++) cs[d] = d == 1 ? xs[1] : 1;
    int64_t at[3] = {mask, 1, 0};
    weft_value m = OK(x) ? oi_op(c, NULL, "mean", 1, &x, at, 3, NULL, 0) : x;
    weft_value d = op2(c, NULL, "sub", x, m), d2 = op2(c, NULL, "mul", d, d);
    weft_value v = OK(d2) ? oi_op(c, NULL, "mean", 1, &d2, at, 3, NULL, 0) : d2;
    weft_value r = op1(c, NULL, "rsqrt", opf(c, NULL, "add_scalar", v, oi_attr_f(c, "epsilon", 1e-5)));
    weft_value y = op2(c, NULL, "mul", op2(c, NULL, "mul", d, r), oi_reshape(c, NULL, c->in[1], nd, cs));
    OUT0(op2(c, node_out(c, 0), "add", y, oi_reshape(c, NULL, c->in[2], nd, cs)));
}

// LRN over channels (dim 1): x / (bias + alpha / size * sum of x^2 over the window)^beta, the window from
// c - floor((size - 1) / 2) to c + ceil((size - 1) / 2): slices of x^2 padded with zeros, added.
weft_status oi_lrn(nctx *c, const char *arg) {
    (void)arg;
    weft_value x = c->in[0];
    int nd = ndim_of(c, x);
    int64_t size = oi_attr_i(c, "size", 0), xs[WEFT_MAX_DIMS];
    if (nd < 3) FAIL("input must have at least 3 dims");
    if (size < 1 || size > 1024) FAIL("size %lld", (long long)size);
    sizes_copy(c, x, xs);
    int64_t lo = (size - 1) / 2, hi = size - 1 - lo, ch = xs[1];
    weft_value sq = op2(c, NULL, "mul", x, x), parts[3], pad = sq;
    int np = 0;
    if (lo) parts[np++] = zeros_along(c, x, nd, xs, 1, lo);
    parts[np++] = sq;
    if (hi) parts[np++] = zeros_along(c, x, nd, xs, 1, hi);
    for (int i = 0; i < np; i++)
        if (!OK(parts[i])) return weft_last_status();
    int64_t one = 1;
    if (np > 1 && !OK(pad = oi_op(c, NULL, "concat", np, parts, &one, 1, NULL, 0))) return weft_last_status();
    weft_value sum = WEFT_VALUE_NONE;
    for (int64_t i = 0; i < size; i++) {
        weft_value s = oi_op(c, NULL, "slice", 1, &pad, (int64_t[]){1, i, i + ch, 1}, 4, NULL, 0);
        sum = i ? op2(c, NULL, "add", sum, s) : s;
        if (!OK(sum)) return weft_last_status();
    }
    double alpha = oi_attr_f(c, "alpha", 1e-4), beta = oi_attr_f(c, "beta", 0.75), bias = oi_attr_f(c, "bias", 1.0);
    weft_value den = opf(c, NULL, "add_scalar", opf(c, NULL, "mul_scalar", sum, alpha / (double)size), bias);
    OUT0(op2(c, node_out(c, 0), "mul", x, opf(c, NULL, "pow_scalar", den, -beta)));
}


// ---- quantization (uint8; weft has no int8)

static weft_value cast_to(nctx *c, weft_value v, weft_dtype dt) {
    int64_t d = dt;
    return OK(v) ? (dtype_of(c, v) == dt ? v : oi_op(c, NULL, "cast", 1, &v, &d, 1, NULL, 0)) : v;
}

// round(v) + zp (zp of v's dtype; NONE: 0), saturated to [0, 255], as uint8 (round: half to even, as ONNX's).
static weft_value quant_u8(nctx *c, const char *name, weft_value v, weft_value zp) {
    v = op1(c, NULL, "round", v);
    if (OK(zp)) v = op2(c, NULL, "add", v, zp);
    v = op2(c, NULL, "minimum", op2(c, NULL, "maximum", v, like(c, v, 0)), like(c, v, 255));
    int64_t d = WEFT_U8;
    return OK(v) ? oi_op(c, name, "cast", 1, &v, &d, 1, NULL, 0) : v;
}

// A per-axis scale or zero point (1-D, C long) viewed to broadcast against an nd-dim x along ax; 0-d as it is.
static weft_value along(nctx *c, weft_value v, int nd, int ax) {
    if (!OK(v) || ndim_of(c, v) == 0) return v;
    int64_t s[WEFT_MAX_DIMS];
    for (int d = 0; d < nd; d++) s[d] = d == ax ? sizes_of(c, v)[0] : 1;
    return oi_reshape(c, NULL, v, nd, s);
}

// QuantizeLinear(x, scale, [zero_point]): saturate(round(x / scale) + zero_point) as uint8;
// DequantizeLinear(x, scale, [zero_point]): (x - zero_point) * scale. Per tensor (0-d or one-element scale) or per
// axis (a 1-D scale along `axis`, opset 13). The zero point's type must be uint8 (absent: uint8, 0).
weft_status oi_quant(nctx *c, const char *arg) {
    bool q = !strcmp(arg, "q");
    weft_value x = c->in[0], s = c->in[1], zp = c->n_in > 2 && c->kin[2] >= 0 ? c->in[2] : WEFT_VALUE_NONE;
    int nd = ndim_of(c, x), ax = oi_axis(oi_attr_i(c, "axis", 1), nd);
    if (OK(zp) && dtype_of(c, zp) != WEFT_U8) FAIL("zero point of type %s (uint8 only)", weft_dtype_name(dtype_of(c, zp)));
    if (q ? !is_float(dtype_of(c, x)) : dtype_of(c, x) != WEFT_U8) FAIL("input of type %s", weft_dtype_name(dtype_of(c, x)));
    if (!is_float(dtype_of(c, s))) FAIL("scale of type %s", weft_dtype_name(dtype_of(c, s)));
    int sn = ndim_of(c, s);
    bool per_axis = sn == 1 && sizes_of(c, s)[0] != 1;
    if (sn > 1 || (per_axis && (ax < 0 || sizes_of(c, s)[0] != sizes_of(c, x)[ax])))
        FAIL("scale must be one value, or one per element of axis %d", ax);
    if (OK(zp) && (ndim_of(c, zp) != sn || (sn && sizes_of(c, zp)[0] != sizes_of(c, s)[0])))
        FAIL("zero point and scale differ in shape");
    if (per_axis) s = along(c, s, nd, ax), zp = along(c, zp, nd, ax);
    else if (sn) s = oi_reshape(c, NULL, s, 0, NULL), zp = OK(zp) ? oi_reshape(c, NULL, zp, 0, NULL) : zp;
    weft_dtype ft = dtype_of(c, s);
    weft_value z = OK(zp) ? cast_to(c, zp, ft) : WEFT_VALUE_NONE;
    if (q) OUT0(quant_u8(c, node_out(c, 0), op2(c, NULL, "div", cast_to(c, x, ft), s), z));
    weft_value d = cast_to(c, x, ft);
    if (OK(z)) d = op2(c, NULL, "sub", d, z);
    OUT0(op2(c, node_out(c, 0), "mul", d, s));
}

// DynamicQuantizeLinear(x) -> (y, scale, zero_point): scale = (max(0, max x) - min(0, min x)) / 255, zero_point =
// saturate(round(-min(0, min x) / scale)), y = saturate(round(x / scale) + zero_point), all uint8 but the scale.
weft_status oi_dyn_quant(nctx *c, const char *arg) {
    (void)arg;
    weft_value x = c->in[0];
    if (dtype_of(c, x) != WEFT_F32) FAIL("input of type %s (float only)", weft_dtype_name(dtype_of(c, x)));
    int nd = ndim_of(c, x);
    int64_t at[3] = {nd ? (INT64_C(1) << nd) - 1 : 0, 0, 0};
    weft_value mx = OK(x) ? oi_op(c, NULL, "max", 1, &x, at, 3, NULL, 0) : x, mn = oi_op(c, NULL, "min", 1, &x, at, 3, NULL, 0);
    mx = op2(c, NULL, "maximum", mx, like(c, x, 0)), mn = op2(c, NULL, "minimum", mn, like(c, x, 0));
    weft_value s = opf(c, wants_out(c, 1) ? node_out(c, 1) : NULL, "mul_scalar", op2(c, NULL, "sub", mx, mn), 1.0 / 255);
    weft_value zf = op2(c, NULL, "div", op1(c, NULL, "neg", mn), s);
    weft_value zp = quant_u8(c, wants_out(c, 2) ? node_out(c, 2) : NULL, zf, WEFT_VALUE_NONE);
    c->out[1] = s, c->out[2] = zp;
    if (!OK(s) || !OK(zp)) return weft_last_status();
    OUT0(quant_u8(c, node_out(c, 0), op2(c, NULL, "div", x, s), cast_to(c, zp, WEFT_F32)));
}


// BatchNormalization in training mode (opset 14 on): y = (x - m) / sqrt(v + epsilon) * scale + B with the batch's
// mean m and biased variance v over every dim but 1, and the running statistics out: mean * momentum + m (1 -
// momentum), var * momentum + v (1 - momentum). Composed, so gradients flow to x, scale and B.
weft_status oi_batch_norm_train(nctx *c, const char *arg) {
    (void)arg;
    weft_value x = c->in[0];
    int nd = ndim_of(c, x);
    if (nd < 2 || !is_float(dtype_of(c, x))) FAIL("input must be float with at least 2 dims");
    int64_t C = sizes_of(c, x)[1], s[WEFT_MAX_DIMS], at[3] = {((INT64_C(1) << nd) - 1) & ~INT64_C(2), 1, 0};
    for (int k = 1; k < 5; k++)
        if (ndim_of(c, c->in[k]) != 1 || sizes_of(c, c->in[k])[0] != C) FAIL("input %d must have %lld values", k, (long long)C);
    for (int d = 0; d < nd; d++) s[d] = d == 1 ? C : 1;
    double mom = oi_attr_f(c, "momentum", 0.9), eps = oi_attr_f(c, "epsilon", 1e-5);
    weft_value m = oi_op(c, NULL, "mean", 1, &x, at, 3, NULL, 0), d = op2(c, NULL, "sub", x, m);
    weft_value dd = op2(c, NULL, "mul", d, d), v = OK(dd) ? oi_op(c, NULL, "mean", 1, &dd, at, 3, NULL, 0) : dd;
    weft_value sd = op1(c, NULL, "sqrt", opf(c, NULL, "add_scalar", v, eps));
    weft_value y = op2(c, NULL, "mul", op2(c, NULL, "div", d, sd), oi_reshape(c, NULL, c->in[1], nd, s));
    c->out[0] = op2(c, node_out(c, 0), "add", y, oi_reshape(c, NULL, c->in[2], nd, s));
    for (int k = 1; k < 3 && OK(c->out[0]); k++) {
        if (!wants_out(c, k)) continue;
        weft_value b = oi_reshape(c, NULL, k == 1 ? m : v, 1, &C);
        c->out[k] = op2(c, node_out(c, k), "add", opf(c, NULL, "mul_scalar", c->in[2 + k], mom), opf(c, NULL, "mul_scalar", b, 1 - mom));
        if (!OK(c->out[k])) return weft_last_status();
    }
    return OK(c->out[0]) ? WEFT_OK : weft_last_status();
}


// DFT (opset 17): x (batch, signal dims..., 1 or 2: real or complex) along `axis`, cut or zero-padded to
// dft_length (known at load), onesided (the first N/2 + 1 bins), inverse (e^{+i}, / N). The signal axis moved last
// and flattened to (M, N), then two products with the (N, K) cosine and sine tables known at load:
// forward (a + ib)(cos - i sin) = (a cos + b sin) + i(b cos - a sin); the result (..., K, 2). Gradients flow.
static weft_status dft_core(nctx *c, const char *name, weft_value x, int ax, int64_t N, bool one, bool inv);

weft_status oi_dft(nctx *c, const char *arg) {
    (void)arg;
    weft_value x = c->in[0];
    int nd = ndim_of(c, x);
    int ax = oi_axis(oi_attr_i(c, "axis", 1), nd - 1);
    bool inv = oi_attr_i(c, "inverse", 0) != 0, one = oi_attr_i(c, "onesided", 0) != 0;
    int64_t N = nd >= 2 && ax >= 0 ? sizes_of(c, x)[ax] : 0;
    if (c->n_in > 1 && c->kin[1] >= 0) {
        int64_t v;
        int n;
        weft_status st = oi_konst_ints(c, 1, &v, 1, &n);
        if (st) return st;
        if (n != 1 || v < 1 || v > (1 << 20)) FAIL("dft_length must be one value, 1 to 2^20");
        N = v;
    }
    return dft_core(c, node_out(c, 0), x, ax, N, one, inv);
}

// The DFT of x (batch, signal dims..., 1 or 2) along ax, cut or zero-padded to N, into c->out[0] named name.
static weft_status dft_core(nctx *c, const char *name, weft_value x, int ax, int64_t N, bool one, bool inv) {
    int nd = ndim_of(c, x);
    weft_dtype dt = dtype_of(c, x);
    if (nd < 2 || !is_float(dt)) FAIL("input must be float, (batch, signal..., 1 or 2)");
    int64_t xs[WEFT_MAX_DIMS], ch;
    sizes_copy(c, x, xs);
    ch = xs[nd - 1];
    if ((ch != 1 && ch != 2) || ax < 1 || ax >= nd - 1) FAIL("the last dim must be 1 or 2 and axis a signal dim");
    if (one && (inv || ch == 2)) FAIL("onesided of a complex input or an inverse");
    if (N < 1) FAIL("a signal of length %lld", (long long)N);
    int64_t L = xs[ax];
    int64_t K = one ? N / 2 + 1 : N, d1 = nd - 1;
    if ((double)N * (double)K > (double)(INT64_C(1) << 24)) FAIL("tables of %lld x %lld", (long long)N, (long long)K);
    // the real and imaginary parts, (..., signal) without the last dim, cut or padded to N along ax
    weft_value part[2] = {WEFT_VALUE_NONE, WEFT_VALUE_NONE};
    int64_t ps[WEFT_MAX_DIMS];
    memcpy(ps, xs, sizeof(int64_t) * (size_t)d1);
    for (int k = 0; k < (int)ch; k++) {
        weft_value v = oi_op(c, NULL, "slice", 1, &x, (int64_t[]){nd - 1, k, k + 1, 1}, 4, NULL, 0);
        v = oi_reshape(c, NULL, v, (int)d1, ps);
        if (N < L) v = OK(v) ? oi_op(c, NULL, "slice", 1, &v, (int64_t[]){ax, 0, N, 1}, 4, NULL, 0) : v;
        if (N > L && OK(v)) {
            int64_t at[1 + WEFT_MAX_DIMS] = {d1}, dax = ax;
            for (int d = 0; d < d1; d++) at[1 + d] = d == ax ? N - L : xs[d];
            weft_value z = like(c, x, 0);
            z = OK(z) ? oi_op(c, NULL, "expand", 1, &z, at, 1 + d1, NULL, 0) : z;
            v = OK(z) ? oi_op(c, NULL, "concat", 2, (weft_value[]){v, z}, &dax, 1, NULL, 0) : z;
        }
        part[k] = v;
    }
    // signal last: permute, (M, N)
    int64_t p[WEFT_MAX_DIMS], ip[WEFT_MAX_DIMS], M = 1, qs[WEFT_MAX_DIMS];
    int np = 0;
    for (int d = 0; d < d1; d++)
        if (d != ax) p[np++] = d, M *= xs[d];
    p[np++] = ax;
    for (int d = 0; d < d1; d++) ip[p[d]] = d, qs[d] = d == d1 - 1 ? K : xs[p[d]];
    for (int k = 0; k < (int)ch; k++) {
        weft_value v = oi_op(c, NULL, "permute", 1, &part[k], p, d1, NULL, 0);
        part[k] = oi_reshape(c, NULL, v, 2, (int64_t[]){M, N});
    }
    weft_tensor *tc = weft_tensor_empty(2, (int64_t[]){N, K}, WEFT_F64), *ts = weft_tensor_empty(2, (int64_t[]){N, K}, WEFT_F64);
    if (!tc || !ts) {
        weft_tensor_free(tc), weft_tensor_free(ts);
        return weft_last_status();
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            double th = 2 * M_PI * (double)((n * k) % N) / (double)N;
            ((double *)weft_tensor_data(tc))[n * K + k] = cos(th) / (inv ? (double)N : 1);
            ((double *)weft_tensor_data(ts))[n * K + k] = sin(th) / (inv ? (double)N : 1) * (inv ? -1 : 1);
        }
    weft_tensor *tc2 = weft_cast(tc, dt), *ts2 = weft_cast(ts, dt);
    weft_tensor_free(tc), weft_tensor_free(ts);
    weft_value cv = oi_konst(c, NULL, tc2, NULL), sv = oi_konst(c, NULL, ts2, NULL);
    // re = a cos + b sin', im = b cos - a sin' (sin' = sin forward, -sin inverse: the tables hold it)
    weft_value re = op2(c, NULL, "matmul", part[0], cv), im = op1(c, NULL, "neg", op2(c, NULL, "matmul", part[0], sv));
    if (ch == 2) {
        re = op2(c, NULL, "add", re, op2(c, NULL, "matmul", part[1], sv));
        im = op2(c, NULL, "add", im, op2(c, NULL, "matmul", part[1], cv));
    }
    // back: (..., K) in the input's order, then (..., 2)
    weft_value out[2] = {re, im};
    int64_t os[WEFT_MAX_DIMS + 1];
    for (int d = 0; d < d1; d++) os[d] = d == ax ? K : xs[d];
    os[d1] = 1;
    for (int k = 0; k < 2; k++) {
        weft_value v = oi_reshape(c, NULL, out[k], (int)d1, qs);
        v = OK(v) ? oi_op(c, NULL, "permute", 1, &v, ip, d1, NULL, 0) : v;
        out[k] = oi_reshape(c, NULL, v, (int)d1 + 1, os);
    }
    int64_t last = d1;
    if (!OK(out[0]) || !OK(out[1])) return weft_last_status();
    OUT0(oi_op(c, name, "concat", 2, out, &last, 1, NULL, 0));
}

// STFT (opset 17): signal (batch, length, 1 or 2), frame_step and frame_length known at load, an optional window:
// frames (batch, frames, frame_length, ch) gathered by index_select with indices known at load, times the window,
// then the DFT of each frame along dim 2 (onesided by default).
weft_status oi_stft(nctx *c, const char *arg) {
    (void)arg;
    weft_value x = c->in[0];
    if (ndim_of(c, x) != 3) FAIL("signal must be (batch, length, 1 or 2)");
    int64_t B = sizes_of(c, x)[0], L = sizes_of(c, x)[1], ch = sizes_of(c, x)[2], step, fl = -1;
    int n;
    weft_status st = oi_konst_ints(c, 1, &step, 1, &n);
    if (st) return st;
    bool has_w = c->n_in > 2 && c->kin[2] >= 0;
    if (c->n_in > 3 && c->kin[3] >= 0 && (st = oi_konst_ints(c, 3, &fl, 1, &n))) return st;
    if (has_w && (ndim_of(c, c->in[2]) != 1 || (fl >= 0 && sizes_of(c, c->in[2])[0] != fl)))
        FAIL("window must be 1-D, frame_length long");
    if (fl < 0) fl = has_w ? sizes_of(c, c->in[2])[0] : -1;
    if (fl < 1 || fl > L || step < 1) FAIL("frame_length %lld and frame_step %lld for a signal of %lld", (long long)fl,
                                          (long long)step, (long long)L);
    int64_t nf = (L - fl) / step + 1;
    weft_tensor *ix = oi_index_new(nf * fl);
    if (!ix) return weft_last_status();
    for (int64_t f = 0; f < nf; f++)
        for (int64_t j = 0; j < fl; j++) ((int64_t *)weft_tensor_data(ix))[f * fl + j] = f * step + j;
    weft_value v = oi_select(c, NULL, x, 1, ix);
    v = oi_reshape(c, NULL, v, 4, (int64_t[]){B, nf, fl, ch});
    if (has_w) v = op2(c, NULL, "mul", v, oi_reshape(c, NULL, cast_to(c, c->in[2], dtype_of(c, x)), 4, (int64_t[]){1, 1, fl, 1}));
    if (!OK(v)) return weft_last_status();
    return dft_core(c, node_out(c, 0), v, 2, fl, oi_attr_i(c, "onesided", 1) != 0, false);
}

#endif
