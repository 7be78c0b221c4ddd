// ONNX import of the windowed ops: Conv, ConvTranspose, MaxPool, AveragePool, the global pools, and Pad,
// composed of weft graph ops (conv2d, conv2d_backward_input, the 2-D pools, concat, index_select). The node
// loop and the helpers are onnx_import.c's (onnx_import.h).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_import.h"

#ifdef WEFT_HAVE_ONNX

// A 2-D attribute (strides, dilations, output_padding) into v[0..1], left as it is when absent.
static weft_status attr_2d(nctx *c, const char *name, int64_t *v) {
    int n;
    const int64_t *a = oi_attr_ints(c, name, &n);
    if (a && n != 2) FAIL("2-D only (%s has %d)", name, n);
    if (a) v[0] = a[0], v[1] = a[1];
    return WEFT_OK;
}

// The 2-D window attributes shared by Conv and the pools: stride, pads (symmetric), dilation, kernel.
static weft_status window(nctx *c, int64_t *stride, int64_t *pad, int64_t *dil, const int64_t *kernel, const int64_t *hw) {
    int n;
    const int64_t *a;
    stride[0] = stride[1] = dil[0] = dil[1] = 1, pad[0] = pad[1] = 0;
    weft_status st;
    if ((st = attr_2d(c, "strides", stride)) || (st = attr_2d(c, "dilations", dil))) return st;
    for (int d = 0; d < 2; d++)
        if (stride[d] < 1 || stride[d] > INT32_MAX || dil[d] < 1 || dil[d] > INT32_MAX)
            FAIL("strides and dilations must be between 1 and %d", INT32_MAX);
    if (oi_attr_s_is(c, "auto_pad", "NOTSET", "NOTSET")) {
        if ((a = oi_attr_ints(c, "pads", &n)) && n != 4) FAIL("2-D only (pads has %d)", n);
        if (a && (a[0] != a[2] || a[1] != a[3])) FAIL("asymmetric pads (%lld,%lld,%lld,%lld)", (long long)a[0],
                                                      (long long)a[1], (long long)a[2], (long long)a[3]);
        if (a) pad[0] = a[0], pad[1] = a[1];
    } else if (!oi_attr_s_is(c, "auto_pad", "NOTSET", "VALID")) { // SAME_UPPER / SAME_LOWER: out = ceil(in / stride)
        for (int d = 0; d < 2; d++) {
            int64_t out = (hw[d] + stride[d] - 1) / stride[d];
            int64_t total = (out - 1) * stride[d] + (kernel[d] - 1) * dil[d] + 1 - hw[d];
            if (total < 0) total = 0;
            if (total % 2) FAIL("auto_pad SAME needs asymmetric pads here");
            pad[d] = total / 2;
        }
    }
    return WEFT_OK;
}

weft_status oi_conv(nctx *c, const char *arg) {
    (void)arg;
    if (ndim_of(c, c->in[0]) != 4 || ndim_of(c, c->in[1]) != 4) FAIL("2-D convolutions only");
    const int64_t *ws = sizes_of(c, c->in[1]), *xs = sizes_of(c, c->in[0]);
    int64_t s[2], p[2], d[2];
    weft_status st = window(c, s, p, d, ws + 2, xs + 2);
    if (st) return st;
    int64_t at[8] = {s[0], s[1], p[0], p[1], d[0], d[1], oi_attr_i(c, "group", 1), 0};
    bool has_b = c->n_in > 2 && c->kin[2] >= 0;
    OUT0(oi_op(c, node_out(c, 0), "conv2d", has_b ? 3 : 2, c->in, at, 8, NULL, 0));
}

// ConvTranspose: conv2d_backward_input (weft's conv_transpose2d) over the window ONNX defines. ONNX takes
// [b, F + output_padding - e) of the full output (F = s (in - 1) + d (k - 1) + 1, zeros past its end); weft's
// op gives [p, F + op_w - p) for one crop p and an op_w in [0, stride). So p = min(b, e), op_w as small as
// covers the end, and a slice takes the rest. output_shape (or auto_pad SAME_*) sets b and e by ONNX's formula;
// an output_shape past the full output appends zeros (a negative e).
weft_status oi_conv_t(nctx *c, const char *arg) {
    (void)arg;
    if (ndim_of(c, c->in[0]) != 4 || ndim_of(c, c->in[1]) != 4) FAIL("2-D transposed convolutions only");
    int64_t ws[4], xs[4]; // copies: the ops below may move the graph's
    sizes_copy(c, c->in[1], ws);
    sizes_copy(c, c->in[0], xs);
    int64_t s[2] = {1, 1}, d[2] = {1, 1}, opad[2] = {0, 0}, b[2] = {0, 0}, e[2] = {0, 0}, G = oi_attr_i(c, "group", 1);
    int n;
    const int64_t *a;
    weft_status st;
    if ((st = attr_2d(c, "strides", s)) || (st = attr_2d(c, "dilations", d)) ||
        (st = attr_2d(c, "output_padding", opad)))
        return st;
    if ((a = oi_attr_ints(c, "pads", &n)) && n != 4) FAIL("2-D only (pads has %d)", n);
    for (int k = 0; a && k < 2; k++) b[k] = a[k], e[k] = a[k + 2];
    for (int k = 0; k < 2; k++)
        if (s[k] < 1 || s[k] > INT32_MAX || d[k] < 1 || d[k] > INT32_MAX || opad[k] < 0 || opad[k] > INT32_MAX ||
            b[k] < 0 || b[k] > INT32_MAX || e[k] < 0 || e[k] > INT32_MAX)
            FAIL("strides, dilations, pads or output_padding out of range");
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
    if (os && n != 2 && n != 4) FAIL("output_shape has %d entries", n);
    if (!notset && !oi_attr_s_is(c, "auto_pad", "NOTSET", "VALID") && !oi_attr_s_is(c, "auto_pad", "NOTSET", "SAME_UPPER") &&
        !oi_attr_s_is(c, "auto_pad", "NOTSET", "SAME_LOWER"))
        FAIL("unknown auto_pad");
    if (!notset) b[0] = b[1] = e[0] = e[1] = 0;
    if (os || (!notset && !oi_attr_s_is(c, "auto_pad", "NOTSET", "VALID"))) {
        // total = F + op - output_shape; SAME_UPPER crops the odd one at the end, else at the start
        bool upper = oi_attr_s_is(c, "auto_pad", "NOTSET", "SAME_UPPER");
        for (int k = 0; k < 2; k++) {
            int64_t want = os ? os[n - 2 + k] : 0;
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
    if (ks && (n != 2 || ks[0] != ws[2] || ks[1] != ws[3])) FAIL("kernel_shape does not match the weight");
    bool has_b = c->n_in > 2 && c->kin[2] >= 0;
    bool crop[2] = {out[0] != at[8] || b[0] != at[2], out[1] != at[9] || b[1] != at[3]};
    bool last = !has_b && !crop[0] && !crop[1];
    weft_value y = oi_op(c, last ? node_out(c, 0) : NULL, "conv2d_backward_input", 2, c->in, at, 10, NULL, 0);
    if (last || !OK(y)) OUT0(y);
    for (int k = 0; k < 2; k++) {
        if (!crop[k]) continue;
        int64_t sl[4] = {2 + k, b[k] - at[2 + k], b[k] - at[2 + k] + out[k], 1};
        bool fin = !has_b && (k == 1 || !crop[1]);
        if (!OK(y = oi_op(c, fin ? node_out(c, 0) : NULL, "slice", 1, &y, sl, 4, NULL, 0))) return weft_last_status();
        if (fin) OUT0(y);
    }
    int64_t O;
    if (ndim_of(c, c->in[2]) != 1 || __builtin_mul_overflow(ws[1], G, &O) || sizes_of(c, c->in[2])[0] != O)
        FAIL("the bias must be 1-D, one value per output channel");
    weft_value b4 = oi_reshape(c, NULL, c->in[2], 4, (int64_t[]){1, sizes_of(c, c->in[2])[0], 1, 1});
    if (!OK(b4)) return weft_last_status();
    OUT0(oi_op(c, node_out(c, 0), "add", 2, (weft_value[]){y, b4}, NULL, 0, NULL, 0));
}

weft_status oi_pool(nctx *c, const char *opn) {
    if (ndim_of(c, c->in[0]) != 4) FAIL("2-D pooling only");
    if (oi_attr_i(c, "ceil_mode", 0)) FAIL("ceil_mode is not supported");
    if (wants_out(c, 1)) FAIL("the Indices output is not supported");
    int n;
    const int64_t *k = oi_attr_ints(c, "kernel_shape", &n);
    if (!k || n != 2) FAIL("2-D kernel_shape needed");
    int64_t s[2], p[2], d[2];
    weft_status st = window(c, s, p, d, k, sizes_of(c, c->in[0]) + 2);
    if (st) return st;
    if (d[0] != 1 || d[1] != 1) FAIL("dilations are not supported");
    int64_t at[7] = {k[0], k[1], s[0], s[1], p[0], p[1], oi_attr_i(c, "count_include_pad", 0)};
    weft_value out[WEFT_GRAPH_MAX_OUT];
    if (weft_graph_op_named(c->m->g, node_out(c, 0), opn, 1, c->in, at, 7, NULL, 0, out) != WEFT_OK)
        return weft_last_status();
    c->out[0] = out[0];
    return WEFT_OK;
}

weft_status oi_global_pool(nctx *c, const char *opn) {
    if (ndim_of(c, c->in[0]) != 4) FAIL("4-D input only");
    int64_t at[3] = {(1 << 2) | (1 << 3), 1, 0};
    OUT0(oi_op(c, node_out(c, 0), opn, 1, c->in, at, 3, NULL, 0));
}


#endif
