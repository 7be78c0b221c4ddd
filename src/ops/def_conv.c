// Op entries of the conv family: conv2d (im2col + GEMM) with its fused
// backward ops, and 2-D max / average pooling with theirs.
// Kernels: cpu/conv.c, cpu/pool.c.
//
// conv attrs: i[0..1] stride (h,w), i[2..3] padding, i[4..5] dilation, i[6] groups;
//   conv2d: i[7] layout, 0 NCHW (default), 1 NHWC: x (N,H,W,C) -> y (N,OH,OW,O),
//   the weight stays (O,C,KH,KW); groups 1 only. Set by the graph layout pass
//   (src/graph/passes/layout.c) where NHWC measures faster; its backward
//   permutes to NCHW and reuses the NCHW backward ops;
//   conv2d_backward_input:  i[8..9] = (H,W) of the forward input,
//   conv2d_backward_weight: i[8..9] = (KH,KW) of the weight.
// pool attrs: i[0..1] kernel, i[2..3] stride, i[4..5] padding, i[6] count_include_pad;
//   max_pool2d_backward, avg_pool2d_backward: i[8..9] = (H,W) of the forward input.
// max_pool2d: x (N,C,H,W) -> out 0: y (N,C,OH,OW), the window maxima;
//   out 1: ix (N,C,OH,OW), for each output the flat index h*W + w of its
//   maximum within its (n,c) plane (as PyTorch's max_pool2d_with_indices):
//   the first maximum in row-major window order, a NaN winning (the first
//   one). int32 when H*W fits (every real image), else int64. The backward
//   saves ix, not x, and scatters the gradient through it:
// max_pool2d_backward: (gy, ix) (N,C,OH,OW) -> dx (N,C,H,W), dx[n,c,ix] += gy
//   in (oh,ow) order; an index outside the plane is skipped.
#include <stdio.h>

#include "op.h"

// Kernels (cpu/conv.c, cpu/pool.c).
weft_status weft_cpu_conv2d(const weft_op_args *a);
weft_status weft_cpu_conv2d_backward_input(const weft_op_args *a);
weft_status weft_cpu_conv2d_backward_weight(const weft_op_args *a);
weft_status weft_cpu_conv2d_backward_bias(const weft_op_args *a);
weft_status weft_cpu_max_pool2d(const weft_op_args *a);
weft_status weft_cpu_max_pool2d_backward(const weft_op_args *a);
weft_status weft_cpu_avg_pool2d(const weft_op_args *a);
weft_status weft_cpu_avg_pool2d_backward(const weft_op_args *a);

extern weft_op_def weft_op_conv2d, weft_op_conv2d_backward_input, weft_op_conv2d_backward_weight,
    weft_op_conv2d_backward_bias;
extern weft_op_def weft_op_max_pool2d, weft_op_max_pool2d_backward, weft_op_avg_pool2d, weft_op_avg_pool2d_backward;

// The largest stride, padding, dilation, group count and kernel size taken
// (also for the (H,W) / (KH,KW) attrs of the backward ops): far past any real
// network, and small enough that window arithmetic on checked shapes cannot
// overflow.
#define CONV_ATTR_MAX INT32_MAX

static bool attr_in(int64_t v, int64_t lo) { return v >= lo && v <= CONV_ATTR_MAX; }

// Output length of a sliding window: (in + 2 pad - dil (k - 1) - 1) / stride + 1,
// or -1 when the (dilated) kernel does not fit the padded input. Attrs are
// checked (CONV_ATTR_MAX); in and k come from shapes (at most WEFT_MAX_NUMEL).
static int64_t out_len(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
    int64_t span;
    if (k < 1 || __builtin_mul_overflow(dil, k - 1, &span) || span > WEFT_MAX_NUMEL) return -1;
    span += 1;
    if (in + 2 * pad < span) return -1;
    return (in + 2 * pad - span) / stride + 1;
}

// t is 4-D and of a dtype in `dtypes`.
static weft_status check_4d_of(const char *op, const weft_tensor *t, const char *what, uint32_t dtypes) {
    if (t->ndim != 4) {
        char b[96];
        return weft_error(WEFT_ERR_SHAPE, "%s: %s must be 4-D (N,C,H,W), got %s", op, what,
                          weft_tensor_shape_str(t, b, sizeof b));
    }
    return weft_check_dtype(op, t, dtypes, what);
}
static weft_status check_4d(const char *op, const weft_tensor *t, const char *what) {
    return check_4d_of(op, t, what, WEFT_DT_FLOAT);
}
// conv2d and its backward ops also take f16 / bf16 (autocast's dtypes):
// whether they run in one is the device's kernel's say (the dispatcher's
// "no kernel" error otherwise; the CPU has f32, f64 and bf16: oneDNN's bf16
// convolution, or im2col on operands widened to f32, cpu/conv_onednn.c).
#define CONV_DT (WEFT_DT_FLOAT | WEFT_DT(WEFT_F16) | WEFT_DT(WEFT_BF16))
static weft_status check_conv_4d(const char *op, const weft_tensor *t, const char *what) {
    return check_4d_of(op, t, what, CONV_DT);
}

// ---- conv2d ----
static weft_status check_conv_attrs(const char *op, const weft_attrs *at) {
    if (!attr_in(at->i[0], 1) || !attr_in(at->i[1], 1) || !attr_in(at->i[4], 1) || !attr_in(at->i[5], 1) ||
        !attr_in(at->i[6], 1))
        return weft_error(WEFT_ERR_ARG, "%s: stride, dilation and groups must be positive (at most %d)", op,
                          CONV_ATTR_MAX);
    if (!attr_in(at->i[2], 0) || !attr_in(at->i[3], 0))
        return weft_error(WEFT_ERR_ARG, "%s: padding must be non-negative (at most %d)", op, CONV_ATTR_MAX);
    if (at->i[7] < 0 || at->i[7] > 1) return weft_error(WEFT_ERR_ARG, "%s: layout must be 0 (NCHW) or 1 (NHWC)", op);
    if (at->i[7] == 1 && at->i[6] != 1) return weft_error(WEFT_ERR_ARG, "%s: the NHWC layout needs groups 1", op);
    return WEFT_OK;
}

static weft_status infer_conv2d(const weft_op_args *a, weft_out_meta *o) {
    const char *op = a->op->name;
    const weft_attrs *at = a->attrs;
    if (a->n_in < 2 || a->n_in > 3) return weft_error(WEFT_ERR_ARG, "%s: expected x, w and an optional bias", op);
    weft_status st;
    if ((st = check_conv_attrs(op, at))) return st;
    const weft_tensor *x = a->in[0], *w = a->in[1];
    if ((st = check_conv_4d(op, x, "the input"))) return st;
    if ((st = check_conv_4d(op, w, "the weight"))) return st;
    if ((st = weft_check_same_dtype(op, a->n_in, a->in))) return st;
    bool nhwc = at->i[7] == 1;
    // NCHW sizes of x (NHWC input: (N,H,W,C))
    int64_t xs[4] = {x->sizes[0], x->sizes[nhwc ? 3 : 1], x->sizes[nhwc ? 1 : 2], x->sizes[nhwc ? 2 : 3]};
    int64_t C = xs[1], O = w->sizes[0], G = at->i[6];
    char b1[96], b2[96];
    if (C % G || O % G)
        return weft_error(WEFT_ERR_SHAPE, "%s: input channels %lld and output channels %lld must be divisible by groups %lld",
                          op, (long long)C, (long long)O, (long long)G);
    if (w->sizes[1] != C / G)
        return weft_error(WEFT_ERR_SHAPE, "%s: weight %s expects %lld input channels per group, input %s has %lld / %lld",
                          op, weft_tensor_shape_str(w, b1, sizeof b1), (long long)w->sizes[1],
                          weft_tensor_shape_str(x, b2, sizeof b2), (long long)C, (long long)G);
    if (a->n_in == 3) {
        const weft_tensor *b = a->in[2];
        if (b->ndim != 1 || b->sizes[0] != O)
            return weft_error(WEFT_ERR_SHAPE, "%s: bias must have shape (%lld), got %s", op, (long long)O,
                              weft_tensor_shape_str(b, b1, sizeof b1));
    }
    int64_t OH = out_len(xs[2], w->sizes[2], at->i[0], at->i[2], at->i[4]);
    int64_t OW = out_len(xs[3], w->sizes[3], at->i[1], at->i[3], at->i[5]);
    if (OH < 1 || OW < 1)
        return weft_error(WEFT_ERR_SHAPE, "%s: kernel %s (dilated) is larger than the padded input %s", op,
                          weft_tensor_shape_str(w, b1, sizeof b1), weft_tensor_shape_str(x, b2, sizeof b2));
    if (nhwc) weft_meta_set(o, 4, (int64_t[]){x->sizes[0], OH, OW, O}, (weft_dtype)x->dtype);
    else weft_meta_set(o, 4, (int64_t[]){x->sizes[0], O, OH, OW}, (weft_dtype)x->dtype);
    return WEFT_OK;
}

// gy (N,O,OH,OW), w (O,C/G,KH,KW) -> dx (N,C,H,W)
static weft_status infer_conv2d_bw_input(const weft_op_args *a, weft_out_meta *o) {
    const char *op = a->op->name;
    const weft_tensor *gy = a->in[0], *w = a->in[1];
    weft_status st;
    if ((st = check_conv_attrs(op, a->attrs)) || (st = check_conv_4d(op, gy, "the output gradient")) ||
        (st = check_conv_4d(op, w, "the weight")) || (st = weft_check_same_dtype(op, 2, a->in)))
        return st;
    const weft_attrs *at = a->attrs;
    int64_t H = at->i[8], W = at->i[9], C;
    if (!attr_in(H, 1) || !attr_in(W, 1))
        return weft_error(WEFT_ERR_ARG, "%s: input size (%lld,%lld) out of range", op, (long long)H, (long long)W);
    if (gy->sizes[1] != w->sizes[0] || w->sizes[0] % at->i[6] ||
        out_len(H, w->sizes[2], at->i[0], at->i[2], at->i[4]) != gy->sizes[2] ||
        out_len(W, w->sizes[3], at->i[1], at->i[3], at->i[5]) != gy->sizes[3] ||
        __builtin_mul_overflow(w->sizes[1], at->i[6], &C))
        return weft_error(WEFT_ERR_SHAPE, "%s: gradient, weight and input size do not agree", op);
    weft_meta_set(o, 4, (int64_t[]){gy->sizes[0], C, H, W}, (weft_dtype)gy->dtype);
    return WEFT_OK;
}

// gy (N,O,OH,OW), x (N,C,H,W) -> dw (O,C/G,KH,KW)
static weft_status infer_conv2d_bw_weight(const weft_op_args *a, weft_out_meta *o) {
    const char *op = a->op->name;
    const weft_tensor *gy = a->in[0], *x = a->in[1];
    weft_status st;
    if ((st = check_conv_attrs(op, a->attrs)) || (st = check_conv_4d(op, gy, "the output gradient")) ||
        (st = check_conv_4d(op, x, "the input")) || (st = weft_check_same_dtype(op, 2, a->in)))
        return st;
    const weft_attrs *at = a->attrs;
    int64_t KH = at->i[8], KW = at->i[9], G = at->i[6];
    if (!attr_in(KH, 1) || !attr_in(KW, 1))
        return weft_error(WEFT_ERR_ARG, "%s: kernel size (%lld,%lld) out of range", op, (long long)KH, (long long)KW);
    if (gy->sizes[0] != x->sizes[0] || x->sizes[1] % G || gy->sizes[1] % G ||
        out_len(x->sizes[2], KH, at->i[0], at->i[2], at->i[4]) != gy->sizes[2] ||
        out_len(x->sizes[3], KW, at->i[1], at->i[3], at->i[5]) != gy->sizes[3])
        return weft_error(WEFT_ERR_SHAPE, "%s: gradient, input and kernel size do not agree", op);
    weft_meta_set(o, 4, (int64_t[]){gy->sizes[1], x->sizes[1] / G, KH, KW}, (weft_dtype)gy->dtype);
    return WEFT_OK;
}

// gy (N,O,OH,OW) -> db (O)
static weft_status infer_conv2d_bw_bias(const weft_op_args *a, weft_out_meta *o) {
    weft_status st = check_conv_4d(a->op->name, a->in[0], "the output gradient");
    if (st) return st;
    weft_meta_set(o, 1, &a->in[0]->sizes[1], (weft_dtype)a->in[0]->dtype);
    return WEFT_OK;
}

static weft_tensor *conv_bw_input(weft_tensor *gy, weft_tensor *w, const weft_attrs *fwd, int64_t H, int64_t W) {
    weft_attrs at = *fwd;
    at.i[8] = H;
    at.i[9] = W;
    weft_tensor *in[] = {gy, w};
    return weft_op_apply1(&weft_op_conv2d_backward_input, 2, in, &at);
}
static weft_tensor *conv_bw_weight(weft_tensor *gy, weft_tensor *x, const weft_attrs *fwd, int64_t KH, int64_t KW) {
    weft_attrs at = *fwd;
    at.i[8] = KH;
    at.i[9] = KW;
    weft_tensor *in[] = {gy, x};
    return weft_op_apply1(&weft_op_conv2d_backward_weight, 2, in, &at);
}
static weft_tensor *conv_fwd(weft_tensor *x, weft_tensor *w, const weft_attrs *at) {
    weft_attrs a2 = *at;
    a2.i[8] = a2.i[9] = 0;
    weft_tensor *in[] = {x, w};
    return weft_op_apply1(&weft_op_conv2d, 2, in, &a2);
}

static weft_status done(const weft_bw_args *b) {
    for (int i = 0; i < b->n_in; i++)
        if (b->needs[i] && !b->gin[i]) return weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
    return WEFT_OK;
}

// NHWC (i[7] = 1): the NCHW rules on permuted views of x and g, dx permuted back.
static weft_status bw_conv2d_nhwc(const weft_bw_args *b) {
    weft_attrs at = *b->attrs;
    at.i[7] = 0;
    static const int to_nchw[4] = {0, 3, 1, 2}, to_nhwc[4] = {0, 2, 3, 1};
    weft_tensor *gp = weft_permute(b->gout[0], to_nchw), *g = gp ? weft_tensor_contiguous(gp) : NULL;
    weft_tensor_free(gp);
    if (!g) return weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
    const int64_t *xm = b->in_meta[0].sizes; // (N,H,W,C)
    if (b->needs[0]) {
        weft_tensor *dx = conv_bw_input(g, b->in[1], &at, xm[1], xm[2]);
        b->gin[0] = dx ? weft_permute(dx, to_nhwc) : NULL;
        weft_tensor_free(dx);
    }
    if (b->needs[1]) {
        weft_tensor *xn = weft_permute(b->in[0], to_nchw);
        b->gin[1] = xn ? conv_bw_weight(g, xn, &at, b->in_meta[1].sizes[2], b->in_meta[1].sizes[3]) : NULL;
        weft_tensor_free(xn);
    }
    if (b->n_in == 3 && b->needs[2]) b->gin[2] = weft_op_apply1(&weft_op_conv2d_backward_bias, 1, &g, NULL);
    weft_tensor_free(g);
    return done(b);
}

// y = conv(x, w) + b:  dx = conv_bw_input(g, w), dw = conv_bw_weight(g, x), db = sum of g over (N,H,W).
static weft_status bw_conv2d(const weft_bw_args *b) {
    if (b->attrs->i[7] == 1) return bw_conv2d_nhwc(b);
    weft_tensor *g = b->gout[0];
    if (b->needs[0])
        b->gin[0] = conv_bw_input(g, b->in[1], b->attrs, b->in_meta[0].sizes[2], b->in_meta[0].sizes[3]);
    if (b->needs[1])
        b->gin[1] = conv_bw_weight(g, b->in[0], b->attrs, b->in_meta[1].sizes[2], b->in_meta[1].sizes[3]);
    if (b->n_in == 3 && b->needs[2]) b->gin[2] = weft_op_apply1(&weft_op_conv2d_backward_bias, 1, &g, NULL);
    return done(b);
}
// dx = bw_input(gy, w) is linear in each of gy and w (the input x is the
// variable in both): d/dgy = conv(G, w), d/dw = bw_weight(gy, G).
static weft_status bw_conv2d_bw_input(const weft_bw_args *b) {
    weft_tensor *g = b->gout[0];
    if (b->needs[0]) b->gin[0] = conv_fwd(g, b->in[1], b->attrs);
    if (b->needs[1]) b->gin[1] = conv_bw_weight(b->in[0], g, b->attrs, b->in_meta[1].sizes[2], b->in_meta[1].sizes[3]);
    return done(b);
}
// dw = bw_weight(gy, x): d/dgy = conv(x, G), d/dx = bw_input(gy, G).
static weft_status bw_conv2d_bw_weight(const weft_bw_args *b) {
    weft_tensor *g = b->gout[0];
    if (b->needs[0]) b->gin[0] = conv_fwd(b->in[1], g, b->attrs);
    if (b->needs[1]) b->gin[1] = conv_bw_input(b->in[0], g, b->attrs, b->in_meta[1].sizes[2], b->in_meta[1].sizes[3]);
    return done(b);
}

// db = sum of gy over (N,OH,OW): d/dgy broadcasts G (O) back to gy's shape.
static weft_status bw_conv2d_bw_bias(const weft_bw_args *b) {
    const weft_in_meta *m = &b->in_meta[0];
    weft_tensor *r = weft_reshape(b->gout[0], 4, (const int64_t[]){1, m->sizes[1], 1, 1});
    weft_tensor *e = weft_expand(r, 4, m->sizes);
    b->gin[0] = weft_tensor_contiguous(e);
    weft_tensor_free(r);
    weft_tensor_free(e);
    return done(b);
}

#define K_CPU(fn) .kernel = {[WEFT_CPU] = {fn, WEFT_DT_FLOAT}}
#define K_CPU_CONV(fn) .kernel = {[WEFT_CPU] = {fn, WEFT_DT_FLOAT | WEFT_DT(WEFT_BF16)}}
weft_op_def weft_op_conv2d = {.name = "conv2d", .n_in = -1, .n_out = 1, .flags = WEFT_OPF_AUTOCAST,
                              .save = WEFT_SAVE_IN(0) | WEFT_SAVE_IN(1),
                              .infer = infer_conv2d, .backward = bw_conv2d, K_CPU_CONV(weft_cpu_conv2d)};
// WEFT_OPF_AUTOCAST: in a forward pass it is conv_transpose2d, which autocast runs in its low dtype as conv2d
// (PyTorch's autocast lists conv_transpose2d with conv2d).
weft_op_def weft_op_conv2d_backward_input = {.name = "conv2d_backward_input", .n_in = 2, .n_out = 1,
                                             .flags = WEFT_OPF_AUTOCAST,
                                             .save = WEFT_SAVE_ALL_IN, .infer = infer_conv2d_bw_input,
                                             .backward = bw_conv2d_bw_input,
                                             K_CPU_CONV(weft_cpu_conv2d_backward_input)};
weft_op_def weft_op_conv2d_backward_weight = {.name = "conv2d_backward_weight", .n_in = 2, .n_out = 1,
                                              .save = WEFT_SAVE_ALL_IN, .infer = infer_conv2d_bw_weight,
                                              .backward = bw_conv2d_bw_weight,
                                              K_CPU_CONV(weft_cpu_conv2d_backward_weight)};
weft_op_def weft_op_conv2d_backward_bias = {.name = "conv2d_backward_bias", .n_in = 1, .n_out = 1,
                                            .infer = infer_conv2d_bw_bias, .backward = bw_conv2d_bw_bias,
                                            K_CPU_CONV(weft_cpu_conv2d_backward_bias)};

weft_tensor *weft_conv2d(weft_tensor *x, weft_tensor *w, weft_tensor *bias, const weft_conv2d_params *p) {
    if (!x || !w) return weft_error_null_input("conv2d");
    weft_conv2d_params d = {{1, 1}, {0, 0}, {1, 1}, 1};
    if (p) d = *p;
    weft_attrs at = {.i = {d.stride[0] ? d.stride[0] : 1, d.stride[1] ? d.stride[1] : 1, d.padding[0], d.padding[1],
                           d.dilation[0] ? d.dilation[0] : 1, d.dilation[1] ? d.dilation[1] : 1,
                           d.groups ? d.groups : 1}};
    weft_tensor *in[] = {x, w, bias};
    return weft_op_apply1(&weft_op_conv2d, bias ? 3 : 2, in, &at);
}

// conv_transpose2d: the conv2d_backward_input op with the input size the transposed conv's output, then the
// bias. Its checks are here so that errors name conv_transpose2d, not the backward op it runs as.
weft_tensor *weft_conv_transpose2d(weft_tensor *x, weft_tensor *w, weft_tensor *bias,
                                   const weft_conv_transpose2d_params *p) {
    const char *op = "conv_transpose2d";
    if (!x || !w) return weft_error_null_input(op);
    weft_conv_transpose2d_params d = {.stride = {1, 1}, .dilation = {1, 1}, .groups = 1};
    if (p) d = *p;
    for (int k = 0; k < 2; k++) {
        if (!d.stride[k]) d.stride[k] = 1;
        if (!d.dilation[k]) d.dilation[k] = 1;
    }
    if (!d.groups) d.groups = 1;
    weft_attrs at = {.i = {d.stride[0], d.stride[1], d.padding[0], d.padding[1], d.dilation[0], d.dilation[1],
                           d.groups}};
    weft_status st;
    if ((st = check_conv_attrs(op, &at)) || (st = check_conv_4d(op, x, "the input")) ||
        (st = check_conv_4d(op, w, "the weight")))
        return NULL;
    weft_tensor *ins[] = {x, w, bias};
    if ((st = weft_check_same_dtype(op, bias ? 3 : 2, ins))) return NULL;
    char b1[96], b2[96];
    if (x->sizes[1] != w->sizes[0])
        return weft_error_null(WEFT_ERR_SHAPE, "%s: input %s has %lld channels, weight %s expects %lld", op,
                               weft_tensor_shape_str(x, b1, sizeof b1), (long long)x->sizes[1],
                               weft_tensor_shape_str(w, b2, sizeof b2), (long long)w->sizes[0]);
    if (w->sizes[0] % d.groups)
        return weft_error_null(WEFT_ERR_SHAPE, "%s: input channels %lld must be divisible by groups %d", op,
                               (long long)w->sizes[0], d.groups);
    int64_t O, out[2];
    if (__builtin_mul_overflow(w->sizes[1], (int64_t)d.groups, &O) || O > WEFT_MAX_NUMEL)
        return weft_error_null(WEFT_ERR_SHAPE, "%s: %lld output channels per group times %d groups is too many", op,
                               (long long)w->sizes[1], d.groups);
    for (int k = 0; k < 2; k++) {
        int64_t in = x->sizes[2 + k], kk = w->sizes[2 + k], s = d.stride[k], op_k = d.output_padding[k];
        if (op_k < 0 || op_k >= s)
            return weft_error_null(WEFT_ERR_ARG, "%s: output_padding %lld must be at least 0 and less than the stride %lld",
                                   op, (long long)op_k, (long long)s);
        // (in - 1) s + dil (k - 1) + op + 1 - 2 pad, with overflow checks on the products of sizes and attrs.
        int64_t span, len;
        if (in < 1 || kk < 1 || __builtin_mul_overflow(in - 1, s, &len) ||
            __builtin_mul_overflow((int64_t)d.dilation[k], kk - 1, &span) || __builtin_add_overflow(len, span, &len) ||
            (len = len + op_k + 1 - 2 * (int64_t)d.padding[k]) < 1 || len > CONV_ATTR_MAX)
            return weft_error_null(WEFT_ERR_SHAPE, "%s: input %s with weight %s gives an empty or too large output", op,
                                   weft_tensor_shape_str(x, b1, sizeof b1), weft_tensor_shape_str(w, b2, sizeof b2));
        out[k] = len;
    }
    if (bias && (bias->ndim != 1 || bias->sizes[0] != O))
        return weft_error_null(WEFT_ERR_SHAPE, "%s: bias must have shape (%lld), got %s", op, (long long)O,
                               weft_tensor_shape_str(bias, b1, sizeof b1));
    weft_tensor *y = conv_bw_input(x, w, &at, out[0], out[1]);
    if (!y) { // the op's error (no kernel for a dtype on a device, say), named as the user's call
        char msg[512];
        snprintf(msg, sizeof msg, "%s", weft_last_error());
        return weft_error_null(weft_last_status(), "%s: %s", op, msg);
    }
    if (!bias) return y;
    weft_tensor *b4 = weft_reshape(bias, 4, (const int64_t[]){1, O, 1, 1});
    if (b4 && y->dtype != b4->dtype) { // autocast ran the product in its low dtype: the bias joins it there
        weft_tensor *bl = weft_cast(b4, (weft_dtype)y->dtype);
        weft_tensor_free(b4);
        b4 = bl;
    }
    weft_tensor *r = b4 ? weft_add(y, b4) : NULL;
    weft_tensor_free(b4);
    weft_tensor_free(y);
    return r;
}

// ---- pooling ----
static weft_status check_pool_attrs(const char *op, const weft_attrs *at) {
    if (!attr_in(at->i[0], 1) || !attr_in(at->i[1], 1) || !attr_in(at->i[2], 1) || !attr_in(at->i[3], 1))
        return weft_error(WEFT_ERR_ARG, "%s: kernel and stride must be positive (at most %d)", op, CONV_ATTR_MAX);
    // As in PyTorch: a window must always overlap the real input.
    if (at->i[4] < 0 || at->i[5] < 0 || at->i[4] > at->i[0] / 2 || at->i[5] > at->i[1] / 2)
        return weft_error(WEFT_ERR_ARG, "%s: padding must be between 0 and half the kernel size", op);
    return weft_check_flags(op, at, 6, 1, "count_include_pad");
}

static weft_status infer_pool(const weft_op_args *a, weft_out_meta *o) {
    const char *op = a->op->name;
    const weft_attrs *at = a->attrs;
    const weft_tensor *x = a->in[0];
    weft_status st;
    if ((st = check_4d(op, x, "the input")) || (st = check_pool_attrs(op, at))) return st;
    int64_t OH = out_len(x->sizes[2], at->i[0], at->i[2], at->i[4], 1);
    int64_t OW = out_len(x->sizes[3], at->i[1], at->i[3], at->i[5], 1);
    if (OH < 1 || OW < 1) {
        char b[96];
        return weft_error(WEFT_ERR_SHAPE, "%s: kernel (%lld,%lld) is larger than the padded input %s", op,
                          (long long)at->i[0], (long long)at->i[1], weft_tensor_shape_str(x, b, sizeof b));
    }
    weft_meta_set(o, 4, (int64_t[]){x->sizes[0], x->sizes[1], OH, OW}, (weft_dtype)x->dtype);
    return WEFT_OK;
}
// x (N,C,H,W) -> y, ix (N,C,OH,OW)
static weft_status infer_max_pool(const weft_op_args *a, weft_out_meta *o) {
    weft_status st = infer_pool(a, o);
    if (st) return st;
    const int64_t *xs = a->in[0]->sizes;
    int64_t hw;
    bool narrow = !__builtin_mul_overflow(xs[2], xs[3], &hw) && hw <= INT32_MAX;
    weft_meta_set(&o[1], 4, o[0].sizes, narrow ? WEFT_I32 : WEFT_I64);
    return WEFT_OK;
}
// gy (N,C,OH,OW) -> dx (N,C,H,W) with (H,W) from attrs i[8..9]
static weft_status infer_pool_bw(const weft_op_args *a, weft_out_meta *o) {
    const weft_tensor *gy = a->in[0];
    const weft_attrs *at = a->attrs;
    weft_status st;
    if ((st = check_4d(a->op->name, gy, "the output gradient")) || (st = check_pool_attrs(a->op->name, at))) return st;
    if (!attr_in(at->i[8], 1) || !attr_in(at->i[9], 1))
        return weft_error(WEFT_ERR_ARG, "%s: input size (%lld,%lld) out of range", a->op->name, (long long)at->i[8],
                          (long long)at->i[9]);
    if (out_len(at->i[8], at->i[0], at->i[2], at->i[4], 1) != gy->sizes[2] ||
        out_len(at->i[9], at->i[1], at->i[3], at->i[5], 1) != gy->sizes[3])
        return weft_error(WEFT_ERR_SHAPE, "%s: gradient does not match the pooled shape", a->op->name);
    weft_meta_set(o, 4, (int64_t[]){gy->sizes[0], gy->sizes[1], at->i[8], at->i[9]}, (weft_dtype)gy->dtype);
    return WEFT_OK;
}
// gy, ix (N,C,OH,OW) -> dx (N,C,H,W)
static weft_status infer_max_pool_bw(const weft_op_args *a, weft_out_meta *o) {
    weft_status st = infer_pool_bw(a, o);
    if (st) return st;
    const weft_tensor *gy = a->in[0], *ix = a->in[1];
    if ((st = weft_check_dtype(a->op->name, ix, WEFT_DT_INT, "the indices"))) return st;
    if (!weft_shape_equal(ix->ndim, ix->sizes, gy->ndim, gy->sizes)) {
        char b1[96], b2[96];
        return weft_error(WEFT_ERR_SHAPE, "%s: indices %s and gradient %s differ in shape", a->op->name,
                          weft_tensor_shape_str(ix, b1, sizeof b1), weft_tensor_shape_str(gy, b2, sizeof b2));
    }
    return WEFT_OK;
}

// The gradient of y goes through the saved indices (out 1); they take none.
static weft_status bw_max_pool(const weft_bw_args *b) {
    if (!b->gout[0]) return WEFT_OK;
    weft_attrs at = *b->attrs;
    at.i[8] = b->in_meta[0].sizes[2];
    at.i[9] = b->in_meta[0].sizes[3];
    weft_tensor *in[] = {b->gout[0], b->out[1]};
    b->gin[0] = weft_op_apply1(&weft_op_max_pool2d_backward, 2, in, &at);
    return done(b);
}
// max_pool2d_backward is linear in gy, with the adjoint a gather: d/dgy =
// G (N,C,H*W) gathered at ix (N,C,OH*OW) along the plane.
static weft_status bw_max_pool_bw(const weft_bw_args *b) {
    if (!b->needs[0] || !b->gout[0]) return WEFT_OK;
    const int64_t *gs = b->in_meta[0].sizes, *ds = b->gout[0]->sizes; // (N,C,OH,OW), (N,C,H,W)
    weft_tensor *gi = weft_tensor_contiguous(b->gout[0]), *ix = weft_tensor_contiguous(b->in[1]);
    weft_tensor *gf = gi ? weft_reshape(gi, 3, (const int64_t[]){ds[0], ds[1], ds[2] * ds[3]}) : NULL;
    weft_tensor *ixf = ix ? weft_reshape(ix, 3, (const int64_t[]){gs[0], gs[1], gs[2] * gs[3]}) : NULL;
    weft_tensor *v = gf && ixf ? weft_gather(gf, 2, ixf) : NULL;
    b->gin[0] = v ? weft_reshape(v, 4, gs) : NULL;
    weft_tensor *ts[] = {gi, ix, gf, ixf, v};
    for (int k = 0; k < 5; k++) weft_tensor_free(ts[k]);
    return done(b);
}
static weft_tensor *avg_bw(weft_tensor *g, const weft_attrs *fwd, int64_t H, int64_t W) {
    weft_attrs at = *fwd;
    at.i[8] = H;
    at.i[9] = W;
    return weft_op_apply1(&weft_op_avg_pool2d_backward, 1, &g, &at);
}
static weft_status bw_avg_pool(const weft_bw_args *b) {
    b->gin[0] = avg_bw(b->gout[0], b->attrs, b->in_meta[0].sizes[2], b->in_meta[0].sizes[3]);
    return done(b);
}
// avg_pool2d_backward is linear with the adjoint avg_pool2d.
static weft_status bw_avg_pool_bw(const weft_bw_args *b) {
    weft_tensor *g = b->gout[0];
    b->gin[0] = weft_op_apply1(&weft_op_avg_pool2d, 1, &g, b->attrs);
    return done(b);
}

weft_op_def weft_op_max_pool2d = {.name = "max_pool2d", .n_in = 1, .n_out = 2, .save = WEFT_SAVE_OUT(1),
                                  .infer = infer_max_pool, .backward = bw_max_pool, K_CPU(weft_cpu_max_pool2d)};
weft_op_def weft_op_max_pool2d_backward = {.name = "max_pool2d_backward", .n_in = 2, .n_out = 1,
                                           .save = WEFT_SAVE_IN(1), .infer = infer_max_pool_bw,
                                           .backward = bw_max_pool_bw, K_CPU(weft_cpu_max_pool2d_backward)};
weft_op_def weft_op_avg_pool2d = {.name = "avg_pool2d", .n_in = 1, .n_out = 1, .infer = infer_pool,
                                  .backward = bw_avg_pool, K_CPU(weft_cpu_avg_pool2d)};
weft_op_def weft_op_avg_pool2d_backward = {.name = "avg_pool2d_backward", .n_in = 1, .n_out = 1,
                                           .infer = infer_pool_bw, .backward = bw_avg_pool_bw,
                                           K_CPU(weft_cpu_avg_pool2d_backward)};

// y = op(x); max_pool2d's indices (out 1) stay with its autograd node / graph node only.
static weft_tensor *pool(weft_op_def *op, weft_tensor *x, const weft_pool2d_params *p) {
    if (!x) return weft_error_null_input(op->name);
    if (!p) return weft_error_null(WEFT_ERR_ARG, "%s: NULL params", op->name);
    weft_attrs at = {.i = {p->kernel[0], p->kernel[1], p->stride[0] ? p->stride[0] : p->kernel[0],
                           p->stride[1] ? p->stride[1] : p->kernel[1], p->padding[0], p->padding[1],
                           p->count_include_pad}};
    weft_tensor *out[WEFT_MAX_OP_OUT];
    if (weft_op_apply(op, 1, &x, &at, out) != WEFT_OK) return NULL;
    for (int j = 1; j < op->n_out; j++) weft_tensor_free(out[j]);
    return out[0];
}
weft_tensor *weft_max_pool2d(weft_tensor *x, const weft_pool2d_params *p) { return pool(&weft_op_max_pool2d, x, p); }
weft_tensor *weft_avg_pool2d(weft_tensor *x, const weft_pool2d_params *p) { return pool(&weft_op_avg_pool2d, x, p); }
