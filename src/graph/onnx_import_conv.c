// ONNX import of the windowed ops: Conv, ConvTranspose, MaxPool, AveragePool, the global pools, and Pad,
// composed of weft graph ops (conv2d, conv2d_backward_input, the 2-D pools, concat, index_select). The node
// loop and the helpers are onnx_import.c's (onnx_import.h).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_import.h"

#ifdef WEFT_HAVE_ONNX

// Convolutions and pools run in 2-D: an (N,C,L) input, with its (O,C,K) weight, runs as (N,C,1,L) and
// (O,C,1,K), and the output is viewed back. Attributes of nsp spatial dims fill the last nsp of two.

// The spatial dims of a node's input 0: 1 or 2; -1 otherwise.
static int spatial_dims(const nctx *c, weft_value v) {
    int nd = ndim_of(c, v);
    return nd == 3 || nd == 4 ? nd - 2 : -1;
}

// sizes of v as 4-D ((N,C,L) -> (N,C,1,L)).
static void sizes4(const nctx *c, weft_value v, int64_t *s) {
    int64_t t[4];
    sizes_copy(c, v, t);
    if (ndim_of(c, v) == 4) memcpy(s, t, sizeof t);
    else s[0] = t[0], s[1] = t[1], s[2] = 1, s[3] = t[2];
}

static weft_value as4(nctx *c, weft_value v) {
    if (ndim_of(c, v) == 4) return v;
    int64_t s[4];
    sizes4(c, v, s);
    return oi_reshape(c, NULL, v, 4, s);
}

// The node's output: y (4-D) named after output 0, viewed as 3-D for a 1-D op (y made unnamed then).
static weft_status finish(nctx *c, weft_value y, int nsp) {
    if (OK(y) && nsp == 1) {
        int64_t s[4];
        sizes_copy(c, y, s);
        y = oi_reshape(c, node_out(c, 0), y, 3, (int64_t[]){s[0], s[1], s[3]});
    }
    OUT0(y);
}

// An attribute of nsp values into the last nsp of v[2], left as it is when absent.
static weft_status attr_sp(nctx *c, const char *name, int nsp, int64_t *v) {
    int n;
    const int64_t *a = oi_attr_ints(c, name, &n);
    if (a && n != nsp) FAIL("%s has %d values for %d spatial dims", name, n, nsp);
    for (int k = 0; a && k < nsp; k++) v[2 - nsp + k] = a[k];
    return WEFT_OK;
}

// The pads attribute (2 nsp values: the begins, then the ends) into b and e.
static weft_status attr_pads(nctx *c, int nsp, int64_t *b, int64_t *e) {
    int n;
    const int64_t *a = oi_attr_ints(c, "pads", &n);
    if (a && n != 2 * nsp) FAIL("pads has %d values for %d spatial dims", n, nsp);
    for (int k = 0; a && k < nsp; k++) b[2 - nsp + k] = a[k], e[2 - nsp + k] = a[nsp + k];
    for (int k = 0; k < 2; k++)
        if (b[k] < 0 || b[k] > INT32_MAX || e[k] < 0 || e[k] > INT32_MAX) FAIL("pads out of range");
    return WEFT_OK;
}

// The window of Conv and the pools (in 2-D): stride, dilation, and the pads before (b) and after (e) each dim,
// from pads or auto_pad (SAME_UPPER: out = ceil(in / stride), the odd pad at the end; SAME_LOWER: at the start).
typedef struct win {
    int64_t s[2], d[2], b[2], e[2];
} win;

static weft_status window(nctx *c, int nsp, win *w, const int64_t *kernel, const int64_t *hw) {
    *w = (win){{1, 1}, {1, 1}, {0, 0}, {0, 0}};
    weft_status st;
    if ((st = attr_sp(c, "strides", nsp, w->s)) || (st = attr_sp(c, "dilations", nsp, w->d))) return st;
    for (int k = 0; k < 2; k++)
        if (w->s[k] < 1 || w->s[k] > INT32_MAX || w->d[k] < 1 || w->d[k] > INT32_MAX)
            FAIL("strides and dilations must be between 1 and %d", INT32_MAX);
    if (oi_attr_s_is(c, "auto_pad", "NOTSET", "NOTSET")) return attr_pads(c, nsp, w->b, w->e);
    if (oi_attr_s_is(c, "auto_pad", "NOTSET", "VALID")) return WEFT_OK;
    bool upper = oi_attr_s_is(c, "auto_pad", "NOTSET", "SAME_UPPER");
    if (!upper && !oi_attr_s_is(c, "auto_pad", "NOTSET", "SAME_LOWER")) FAIL("unknown auto_pad");
    for (int k = 0; k < 2; k++) {
        int64_t out = (hw[k] + w->s[k] - 1) / w->s[k], total;
        if (__builtin_mul_overflow(out - 1, w->s[k], &total) || total > WEFT_MAX_NUMEL ||
            (kernel[k] - 1) > WEFT_MAX_NUMEL / w->d[k])
            FAIL("auto_pad SAME: the window overflows");
        total += (kernel[k] - 1) * w->d[k] + 1 - hw[k];
        if (total < 0) total = 0;
        w->b[k] = upper ? total / 2 : total - total / 2;
        w->e[k] = total - w->b[k];
    }
    return WEFT_OK;
}

// ---- padding, composed: a constant by concat with expanded scalars, edge and reflect by index_select

enum { PAD_CONSTANT, PAD_EDGE, PAD_REFLECT };

// A 0-d constant of dtype dt holding v; an error (not a conversion C leaves undefined) where dt cannot hold it.
static weft_value fill_of(nctx *c, weft_dtype dt, double v) {
    bool fits = weft_dtype_is_float(dt) ? true // (rounded; past f16's range an infinity)
              : dt == WEFT_BOOL ? v == 0 || v == 1
              : dt == WEFT_U8   ? v >= 0 && v <= 255 && v == floor(v)
              : dt == WEFT_I32  ? v >= INT32_MIN && v <= INT32_MAX && v == floor(v)
                                : v >= -0x1p63 && v < 0x1p63 && v == floor(v);
    if (!fits) {
        weft_error(WEFT_ERR_UNSUPPORTED, "a pad value of %g in a %s tensor", v, weft_dtype_name(dt));
        return WEFT_VALUE_NONE;
    }
    return oi_scalar_as(c, dt, v);
}

// x (nd dims) with b[k] before and e[k] after dim k (negative: cropped); the constant mode fills with fill, a
// 0-d value of x's dtype. NONE with an error on failure.
static weft_value pad_dims(nctx *c, weft_value x, int nd, const int64_t *b, const int64_t *e, int mode, weft_value fill) {
    int64_t s[WEFT_MAX_DIMS];
    sizes_copy(c, x, s);
    weft_value v = x;
    for (int k = 0; k < nd && OK(v); k++) {
        if (b[k] < -WEFT_MAX_NUMEL || b[k] > WEFT_MAX_NUMEL || e[k] < -WEFT_MAX_NUMEL || e[k] > WEFT_MAX_NUMEL) {
            weft_error(WEFT_ERR_UNSUPPORTED, "pads (%lld, %lld) of dim %d out of range", (long long)b[k],
                       (long long)e[k], k);
            return WEFT_VALUE_NONE;
        }
        int64_t cb = b[k] < 0 ? -b[k] : 0, ce = e[k] < 0 ? -e[k] : 0, pb = b[k] > 0 ? b[k] : 0, pe = e[k] > 0 ? e[k] : 0;
        if (cb > s[k] || ce > s[k] - cb || (s[k] - cb - ce == 0 && (pb || pe) && mode != PAD_CONSTANT)) {
            weft_error(WEFT_ERR_UNSUPPORTED, "pads (%lld, %lld) leave nothing of dim %d (%lld)", (long long)b[k],
                       (long long)e[k], k, (long long)s[k]);
            return WEFT_VALUE_NONE;
        }
        if (cb || ce) {
            int64_t sl[4] = {k, cb, s[k] - ce, 1};
            v = oi_op(c, NULL, "slice", 1, &v, sl, 4, NULL, 0);
            s[k] -= cb + ce;
        }
        if (!OK(v) || (!pb && !pe)) continue;
        int64_t n = s[k], len;
        if ((len = pb + n + pe) > WEFT_MAX_NUMEL) {
            weft_error(WEFT_ERR_UNSUPPORTED, "pads (%lld, %lld) too large", (long long)b[k], (long long)e[k]);
            return WEFT_VALUE_NONE;
        }
        if (mode == PAD_REFLECT && (pb >= n || pe >= n)) {
            weft_error(WEFT_ERR_UNSUPPORTED, "reflect pads (%lld, %lld) must be less than dim %d (%lld)", (long long)pb,
                       (long long)pe, k, (long long)n);
            return WEFT_VALUE_NONE;
        }
        int64_t dk = k;
        if (mode == PAD_CONSTANT) {
            weft_value sc = fill, blk[2] = {WEFT_VALUE_NONE, WEFT_VALUE_NONE}, parts[3];
            if (!OK(sc)) return sc;
            for (int side = 0; side < 2; side++) {
                int64_t at[1 + WEFT_MAX_DIMS] = {nd};
                memcpy(at + 1, s, sizeof(int64_t) * (size_t)nd);
                if (!(at[1 + k] = side ? pe : pb)) continue;
                if (oi_check_made(nd, at + 1)) return WEFT_VALUE_NONE;
                if (!OK(blk[side] = oi_op(c, NULL, "expand", 1, &sc, at, 1 + nd, NULL, 0))) return blk[side];
            }
            int np = 0;
            if (OK(blk[0])) parts[np++] = blk[0];
            parts[np++] = v;
            if (OK(blk[1])) parts[np++] = blk[1];
            v = oi_op(c, NULL, "concat", np, parts, &dk, 1, NULL, 0);
        } else {
            weft_tensor *idx = oi_index_new(len);
            if (!idx) return WEFT_VALUE_NONE;
            int64_t *p = weft_tensor_data(idx);
            for (int64_t j = 0; j < len; j++) {
                int64_t i = j - pb;
                if (mode == PAD_EDGE) i = i < 0 ? 0 : i >= n ? n - 1 : i;
                else i = i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i;
                p[j] = i;
            }
            v = oi_select(c, NULL, v, k, idx);
        }
        s[k] = len;
    }
    return v;
}

// Pad (opset 2: pads and value as attributes; from 11: pads and constant_value as inputs, known at import):
// constant, edge and reflect modes; negative pads crop.
weft_status oi_pad(nctx *c, const char *arg) {
    (void)arg;
    int nd = ndim_of(c, c->in[0]), n = 0, mode;
    if (oi_attr_s_is(c, "mode", "constant", "constant")) mode = PAD_CONSTANT;
    else if (oi_attr_s_is(c, "mode", "constant", "edge")) mode = PAD_EDGE;
    else if (oi_attr_s_is(c, "mode", "constant", "reflect")) mode = PAD_REFLECT;
    else FAIL("mode must be constant, edge or reflect");
    int64_t pads[2 * WEFT_MAX_DIMS];
    weft_dtype dt = dtype_of(c, c->in[0]);
    weft_value fill = WEFT_VALUE_NONE;
    if (c->m->opset < 11) {
        const int64_t *a = oi_attr_ints(c, "pads", &n);
        if (!a || n > 2 * WEFT_MAX_DIMS) FAIL("pads missing or too long");
        memcpy(pads, a, sizeof(int64_t) * (size_t)n);
        if (mode == PAD_CONSTANT) fill = fill_of(c, dt, oi_attr_f(c, "value", 0));
    } else {
        weft_status st = oi_konst_ints(c, 1, pads, 2 * WEFT_MAX_DIMS, &n);
        if (st) return st;
        if (c->n_in > 3 && c->kin[3] >= 0) FAIL("the axes input is not supported");
        if (mode == PAD_CONSTANT && c->n_in > 2 && c->kin[2] >= 0) { // as it is, in x's dtype (int64 past 2^53 too)
            weft_tensor *t;
            if ((st = oi_konst_in(c, 2, &t))) return st;
            if (weft_tensor_numel(t) != 1 || weft_tensor_dtype(t) != dt)
                FAIL("constant_value must be one value of the input's dtype");
            weft_tensor *one = weft_tensor_empty(0, NULL, dt);
            if (!one) return weft_last_status();
            memcpy(weft_tensor_data(one), weft_tensor_data(t), weft_dtype_size(dt));
            fill = oi_konst(c, NULL, one, NULL);
        } else if (mode == PAD_CONSTANT) fill = fill_of(c, dt, 0);
    }
    if (mode == PAD_CONSTANT && !OK(fill)) return weft_last_status();
    if (n != 2 * nd) FAIL("pads has %d values for %d dims", n, nd);
    weft_value v = pad_dims(c, c->in[0], nd, pads, pads + nd, mode, fill);
    if (!OK(v)) return weft_last_status();
    int64_t s[WEFT_MAX_DIMS];
    sizes_copy(c, v, s);
    OUT0(oi_reshape(c, node_out(c, 0), v, nd, s));
}

weft_status oi_conv(nctx *c, const char *arg) {
    (void)arg;
    int nsp = spatial_dims(c, c->in[0]);
    if (nsp < 0 || ndim_of(c, c->in[1]) != nsp + 2) FAIL("1-D and 2-D convolutions only");
    int64_t ws[4], xs[4];
    sizes4(c, c->in[1], ws);
    sizes4(c, c->in[0], xs);
    win w;
    weft_status st = window(c, nsp, &w, ws + 2, xs + 2);
    if (st) return st;
    bool sym = w.b[0] == w.e[0] && w.b[1] == w.e[1], has_b = c->n_in > 2 && c->kin[2] >= 0;
    weft_value x = as4(c, c->in[0]);
    if (!sym) // asymmetric: the pads first, as their own op
        x = pad_dims(c, x, 4, (int64_t[]){0, 0, w.b[0], w.b[1]}, (int64_t[]){0, 0, w.e[0], w.e[1]}, PAD_CONSTANT,
                     fill_of(c, dtype_of(c, x), 0));
    int64_t at[8] = {w.s[0], w.s[1], sym ? w.b[0] : 0, sym ? w.b[1] : 0, w.d[0], w.d[1], oi_attr_i(c, "group", 1), 0};
    weft_value in[3] = {x, as4(c, c->in[1]), has_b ? c->in[2] : WEFT_VALUE_NONE};
    if (!OK(in[0]) || !OK(in[1])) return weft_last_status();
    return finish(c, oi_op(c, nsp == 2 ? node_out(c, 0) : NULL, "conv2d", has_b ? 3 : 2, in, at, 8, NULL, 0), nsp);
}

// ConvTranspose: conv2d_backward_input (weft's conv_transpose2d) over the window ONNX defines. ONNX takes
// [b, F + output_padding - e) of the full output (F = s (in - 1) + d (k - 1) + 1, zeros past its end); weft's
// op gives [p, F + op_w - p) for one crop p and an op_w in [0, stride). So p = min(b, e), op_w as small as
// covers the end, and a slice takes the rest. output_shape (or auto_pad SAME_*) sets b and e by ONNX's formula;
// an output_shape past the full output appends zeros (a negative e).
weft_status oi_conv_t(nctx *c, const char *arg) {
    (void)arg;
    int nsp = spatial_dims(c, c->in[0]);
    if (nsp < 0 || ndim_of(c, c->in[1]) != nsp + 2) FAIL("1-D and 2-D transposed convolutions only");
    int64_t ws[4], xs[4]; // copies: the ops below may move the graph's
    sizes4(c, c->in[1], ws);
    sizes4(c, c->in[0], xs);
    int64_t s[2] = {1, 1}, d[2] = {1, 1}, opad[2] = {0, 0}, b[2] = {0, 0}, e[2] = {0, 0}, G = oi_attr_i(c, "group", 1);
    int n;
    weft_status st;
    if ((st = attr_sp(c, "strides", nsp, s)) || (st = attr_sp(c, "dilations", nsp, d)) ||
        (st = attr_sp(c, "output_padding", nsp, opad)) || (st = attr_pads(c, nsp, b, e)))
        return st;
    for (int k = 0; k < 2; k++)
        if (s[k] < 1 || s[k] > INT32_MAX || d[k] < 1 || d[k] > INT32_MAX || opad[k] < 0 || opad[k] > INT32_MAX)
            FAIL("strides, dilations or output_padding out of range");
    int64_t full[2]; // F + output_padding, overflow-checked (sizes go up to 2^59, attrs to 2^31)
    for (int k = 0; k < 2; k++) {
        int64_t a1, a2;
        if (xs[2 + k] < 1 || ws[2 + k] < 1 || __builtin_mul_overflow(s[k], xs[2 + k] - 1, &a1) ||
            __builtin_mul_overflow(d[k], ws[2 + k] - 1, &a2) || __builtin_add_overflow(a1, a2, &a1) ||
            __builtin_add_overflow(a1, opad[k] + 1, &full[k]) || full[k] > WEFT_MAX_NUMEL)
            FAIL("input %lld and kernel %lld give no output or too large a one", (long long)xs[2 + k],
                 (long long)ws[2 + k]);
    }
    const int64_t *os = oi_attr_ints(c, "output_shape", &n);
    bool notset = oi_attr_s_is(c, "auto_pad", "NOTSET", "NOTSET");
    if (os && n != nsp && n != nsp + 2) FAIL("output_shape has %d entries", n);
    if (!notset && !oi_attr_s_is(c, "auto_pad", "NOTSET", "VALID") && !oi_attr_s_is(c, "auto_pad", "NOTSET", "SAME_UPPER") &&
        !oi_attr_s_is(c, "auto_pad", "NOTSET", "SAME_LOWER"))
        FAIL("unknown auto_pad");
    if (!notset) b[0] = b[1] = e[0] = e[1] = 0;
    if (os || (!notset && !oi_attr_s_is(c, "auto_pad", "NOTSET", "VALID"))) {
        // total = F + op - output_shape; SAME_UPPER crops the odd one at the end, else at the start
        bool upper = oi_attr_s_is(c, "auto_pad", "NOTSET", "SAME_UPPER");
        for (int k = 0; k < 2; k++) {
            int64_t want = os ? (k < 2 - nsp ? 1 : os[n - 2 + k]) : 0;
            if (!os && __builtin_mul_overflow(xs[2 + k], s[k], &want)) FAIL("auto_pad SAME: the output overflows");
            if (want < 1 || want > WEFT_MAX_NUMEL) FAIL("output_shape %lld", (long long)want);
            int64_t total = full[k] - want, half = total / 2, rest = total - half;
            if (total < 0) b[k] = 0, e[k] = total;
            else b[k] = upper ? half : rest, e[k] = upper ? rest : half;
        }
    }
    int64_t at[10] = {s[0], s[1], 0, 0, d[0], d[1], G, 0, 0, 0}, out[2];
    for (int k = 0; k < 2; k++) {
        int64_t p = b[k] < e[k] ? b[k] : e[k] < 0 ? 0 : e[k], wop = opad[k] - e[k] + p;
        if (wop < 0) wop = 0;
        if (wop >= s[k]) FAIL("output_padding %lld and pads leave more than the stride past the full output", (long long)opad[k]);
        at[2 + k] = p;
        at[8 + k] = full[k] - opad[k] + wop - 2 * p;
        out[k] = full[k] - b[k] - e[k];
        if (out[k] < 1 || at[8 + k] < 1) FAIL("the pads leave no output");
    }
    const int64_t *ks = oi_attr_ints(c, "kernel_shape", &n);
    if (ks && (n != nsp || (nsp == 2 && ks[0] != ws[2]) || ks[n - 1] != ws[3]))
        FAIL("kernel_shape does not match the weight");
    bool has_b = c->n_in > 2 && c->kin[2] >= 0;
    bool crop[2] = {out[0] != at[8] || b[0] != at[2], out[1] != at[9] || b[1] != at[3]};
    bool last = !has_b && !crop[0] && !crop[1];
    const char *name = nsp == 2 ? node_out(c, 0) : NULL; // a 1-D op's 4-D result is viewed back, named
    weft_value in[2] = {as4(c, c->in[0]), as4(c, c->in[1])};
    if (!OK(in[0]) || !OK(in[1])) return weft_last_status();
    weft_value y = oi_op(c, last ? name : NULL, "conv2d_backward_input", 2, in, at, 10, NULL, 0);
    if (last || !OK(y)) return finish(c, y, nsp);
    for (int k = 0; k < 2; k++) {
        if (!crop[k]) continue;
        int64_t sl[4] = {2 + k, b[k] - at[2 + k], b[k] - at[2 + k] + out[k], 1};
        bool fin = !has_b && (k == 1 || !crop[1]);
        if (!OK(y = oi_op(c, fin ? name : NULL, "slice", 1, &y, sl, 4, NULL, 0))) return weft_last_status();
        if (fin) return finish(c, y, nsp);
    }
    int64_t O;
    if (ndim_of(c, c->in[2]) != 1 || __builtin_mul_overflow(ws[1], G, &O) || sizes_of(c, c->in[2])[0] != O)
        FAIL("the bias must be 1-D, one value per output channel");
    weft_value b4 = oi_reshape(c, NULL, c->in[2], 4, (int64_t[]){1, sizes_of(c, c->in[2])[0], 1, 1});
    if (!OK(b4)) return weft_last_status();
    return finish(c, oi_op(c, name, "add", 2, (weft_value[]){y, b4}, NULL, 0, NULL, 0), nsp);
}

// MaxPool's Indices from the op's (h W + w within each (n, c) plane): ONNX's flat index over the whole input,
// ((n C + c) H + h) W + w, or with storage_order 1 (column-major planes) (n C + c) H W + w H + h.
static weft_status pool_indices(nctx *c, weft_value ix, const int64_t *xs, int nsp) {
    int64_t i64 = WEFT_I64, N = xs[0], C = xs[1], H = xs[2], W = xs[3], os[4], NC = N * C;
    sizes_copy(c, ix, os);
    weft_value v = oi_op(c, NULL, "cast", 1, &ix, &i64, 1, NULL, 0);
    if (OK(v) && oi_attr_i(c, "storage_order", 0)) { // h = i / W, w = i % W: w H + h
        weft_value wv = oi_scalar(c, WEFT_I64, (double)W), hv = oi_scalar(c, WEFT_I64, (double)H);
        weft_value h = OK(wv) ? oi_op(c, NULL, "div", 2, (weft_value[]){v, wv}, NULL, 0, NULL, 0) : wv;
        weft_value w = OK(wv) ? oi_op(c, NULL, "fmod", 2, (weft_value[]){v, wv}, NULL, 0, NULL, 0) : wv;
        weft_value wh = OK(w) && OK(hv) ? oi_op(c, NULL, "mul", 2, (weft_value[]){w, hv}, NULL, 0, NULL, 0) : w;
        v = OK(wh) && OK(h) ? oi_op(c, NULL, "add", 2, (weft_value[]){wh, h}, NULL, 0, NULL, 0) : wh;
    }
    weft_tensor *off = oi_index_new(NC);
    if (!off) return weft_last_status();
    for (int64_t p = 0; p < NC; p++) ((int64_t *)weft_tensor_data(off))[p] = p * H * W;
    weft_value ov = oi_reshape(c, NULL, oi_konst(c, NULL, off, NULL), 4, (int64_t[]){N, C, 1, 1});
    v = OK(v) && OK(ov) ? oi_op(c, nsp == 2 ? node_out(c, 1) : NULL, "add", 2, (weft_value[]){v, ov}, NULL, 0, NULL, 0)
                        : WEFT_VALUE_NONE;
    if (OK(v) && nsp == 1) v = oi_reshape(c, node_out(c, 1), v, 3, (int64_t[]){os[0], os[1], os[3]});
    c->out[1] = v;
    return OK(v) ? WEFT_OK : weft_last_status();
}

// MaxPool / AveragePool, 1-D or 2-D. Pads the 2-D pools take (symmetric, at most half the kernel) go to the
// op; others are applied first: -inf for max; zeros for the average, which then divides by the count of real
// elements in each window (count_include_pad 0: the same pool over a padded mask of ones) or by the kernel's
// size (count_include_pad 1). ceil_mode adds the end pads its last window needs.
weft_status oi_pool(nctx *c, const char *opn) {
    int nsp = spatial_dims(c, c->in[0]);
    if (nsp < 0) FAIL("1-D and 2-D pooling only");
    bool ceil_mode = oi_attr_i(c, "ceil_mode", 0) != 0;
    bool want_ix = wants_out(c, 1);
    if (want_ix && strcmp(opn, "max_pool2d")) FAIL("only MaxPool has Indices");
    int n;
    const int64_t *ka = oi_attr_ints(c, "kernel_shape", &n);
    if (!ka || n != nsp) FAIL("kernel_shape needs %d values", nsp);
    int64_t k[2] = {1, ka[n - 1]}, xs[4];
    if (nsp == 2) k[0] = ka[0];
    if (k[0] < 1 || k[1] < 1 || k[0] > INT32_MAX || k[1] > INT32_MAX) FAIL("kernel_shape out of range");
    sizes4(c, c->in[0], xs);
    win w;
    weft_status st = window(c, nsp, &w, k, xs + 2);
    if (st) return st;
    if (w.d[0] != 1 || w.d[1] != 1) FAIL("dilations are not supported");
    bool is_max = !strcmp(opn, "max_pool2d"), incl = oi_attr_i(c, "count_include_pad", 0) != 0;
    for (int d = 0; ceil_mode && d < 2; d++) { // ceil_mode: out = ceil((in + pads - k) / s) + 1, by more end pads
        int64_t total = xs[2 + d] + w.b[d] + w.e[d], last;
        if (total < k[d]) continue; // (no window: the op says so)
        int64_t out = (total - k[d] + w.s[d] - 1) / w.s[d] + 1;
        if (__builtin_mul_overflow(out - 1, w.s[d], &last) || last > WEFT_MAX_NUMEL) FAIL("ceil_mode: the output overflows");
        if (out > 1 && last >= xs[2 + d] + w.b[d]) last -= w.s[d]; // the last window starts in the input (ORT, PyTorch)
        int64_t extra = last + k[d] - total;
        if (extra > 0 && incl && !is_max) FAIL("ceil_mode with count_include_pad is not supported");
        if (extra > 0) w.e[d] += extra;
    }
    bool native = true;
    for (int d = 0; d < 2; d++) native &= w.b[d] == w.e[d] && 2 * w.b[d] <= k[d];
    weft_value x = as4(c, c->in[0]);
    const int64_t b4[4] = {0, 0, w.b[0], w.b[1]}, e4[4] = {0, 0, w.e[0], w.e[1]};
    if (!native && is_max && !weft_dtype_is_float(dtype_of(c, x))) FAIL("MaxPool with these pads takes floats only");
    if (!native && want_ix) FAIL("the Indices output with pads the op does not take (unequal, or past half the kernel)");
    if (!native) x = pad_dims(c, x, 4, b4, e4, PAD_CONSTANT, fill_of(c, dtype_of(c, x), is_max ? -INFINITY : 0));
    if (!OK(x)) return weft_last_status();
    int64_t at[7] = {k[0], k[1], w.s[0], w.s[1], native ? w.b[0] : 0, native ? w.b[1] : 0, incl};
    bool divide = !native && !is_max && !incl;
    const char *name = nsp == 2 && !divide ? node_out(c, 0) : NULL;
    weft_value y, outs[WEFT_GRAPH_MAX_OUT];
    if (want_ix) {
        if (weft_graph_op_named(c->m->g, name, opn, 1, &x, at, 7, NULL, 0, outs) != WEFT_OK) return weft_last_status();
        y = outs[0];
        weft_status st2 = pool_indices(c, outs[1], xs, nsp);
        if (st2) return st2;
    } else {
        y = oi_op(c, name, opn, 1, &x, at, 7, NULL, 0);
    }
    if (divide && OK(y)) { // the windows' share of real elements, from a mask of ones padded the same way
        weft_dtype dt = dtype_of(c, c->in[0]);
        int64_t ms[4] = {1, 1, xs[2], xs[3]};
        weft_tensor *one = oi_check_made(4, ms) ? NULL : weft_tensor_full(4, ms, dt, 1.0);
        weft_value m = one ? oi_konst(c, NULL, one, NULL) : WEFT_VALUE_NONE;
        if (OK(m)) m = pad_dims(c, m, 4, b4, e4, PAD_CONSTANT, fill_of(c, dt, 0));
        if (OK(m)) m = oi_op(c, NULL, opn, 1, &m, at, 7, NULL, 0);
        y = OK(m) ? oi_op(c, nsp == 2 ? node_out(c, 0) : NULL, "div", 2, (weft_value[]){y, m}, NULL, 0, NULL, 0) : m;
    }
    return finish(c, y, nsp);
}

// MaxUnpool(X, I, [output_shape]): X's values at ONNX's flat indices I (MaxPool's) of a zero tensor of the shape
// (in - 1) stride - pads + kernel per spatial dim (a scatter_add over it flattened); an output_shape past that
// pads the result with zeros at the ends, as ONNX's reference does.
weft_status oi_max_unpool(nctx *c, const char *arg) {
    (void)arg;
    int nsp = spatial_dims(c, c->in[0]), n;
    if (nsp < 0) FAIL("1-D and 2-D unpooling only");
    int nd = nsp + 2;
    int64_t xs[4], os[4], want[4], total = 1;
    sizes_copy(c, c->in[0], xs);
    if (ndim_of(c, c->in[1]) != nd || dtype_of(c, c->in[1]) != WEFT_I64) FAIL("indices must be int64 of X's shape");
    for (int d = 0; d < nd; d++)
        if (sizes_of(c, c->in[1])[d] != xs[d]) FAIL("indices must have X's shape");
    const int64_t *k = oi_attr_ints(c, "kernel_shape", &n);
    if (!k || n != nsp) FAIL("kernel_shape needs %d values", nsp);
    int ns, np;
    const int64_t *s = oi_attr_ints(c, "strides", &ns), *p = oi_attr_ints(c, "pads", &np);
    if ((s && ns != nsp) || (p && np != 2 * nsp)) FAIL("strides or pads do not fit %d spatial dims", nsp);
    os[0] = xs[0], os[1] = xs[1];
    for (int d = 0; d < nsp; d++) os[2 + d] = (xs[2 + d] - 1) * (s ? s[d] : 1) - (p ? p[d] + p[nsp + d] : 0) + k[d];
    memcpy(want, os, sizeof os);
    if (c->n_in > 2 && c->kin[2] >= 0) {
        weft_status st = oi_konst_ints(c, 2, want, 4, &n);
        if (st) return st;
        if (n != nd || want[0] != xs[0] || want[1] != xs[1]) FAIL("output_shape must be (N, C, spatial...) of X's N and C");
        for (int d = 2; d < nd; d++)
            if (want[d] < os[d]) FAIL("output_shape smaller than the unpooled shape along dim %d", d);
    }
    weft_status st = oi_check_made(nd, want);
    if (st) return st;
    for (int d = 0; d < nd; d++) total *= os[d];
    int64_t cnt = 1, zero = 0, at[2] = {1, total};
    for (int d = 0; d < nd; d++) cnt *= xs[d];
    weft_value z = oi_scalar_as(c, dtype_of(c, c->in[0]), 0);
    z = OK(z) ? oi_op(c, NULL, "expand", 1, &z, at, 2, NULL, 0) : z;
    weft_value ix = oi_reshape(c, NULL, c->in[1], 1, &cnt), xv = oi_reshape(c, NULL, c->in[0], 1, &cnt);
    weft_value y = OK(z) && OK(ix) && OK(xv) ? oi_op(c, NULL, "scatter_add", 3, (weft_value[]){z, ix, xv}, &zero, 1, NULL, 0)
                                             : WEFT_VALUE_NONE;
    const int64_t b0[4] = {0}, e0[4] = {0, 0, want[2] - os[2], nd > 3 ? want[3] - os[3] : 0};
    bool grow = e0[2] || e0[3];
    y = oi_reshape(c, grow ? NULL : node_out(c, 0), y, nd, os);
    if (grow && OK(y)) y = pad_dims(c, y, nd, b0, e0, PAD_CONSTANT, fill_of(c, dtype_of(c, y), 0));
    OUT0(grow ? oi_reshape(c, node_out(c, 0), y, nd, want) : y);
}

weft_status oi_global_pool(nctx *c, const char *opn) {
    if (ndim_of(c, c->in[0]) != 4) FAIL("4-D input only");
    int64_t at[3] = {(1 << 2) | (1 << 3), 1, 0};
    OUT0(oi_op(c, node_out(c, 0), opn, 1, c->in, at, 3, NULL, 0));
}


#endif
