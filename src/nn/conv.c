// Conv2d layer: x (N,Cin,H,W) -> y (N,Cout,OH,OW) through the conv2d op, and its transpose (ConvTranspose2d).
#include <math.h>
#include <stdlib.h>

#include <weft/nn.h>

#include "../core/core_impl.h"
#include "nn_impl.h"

static weft_tensor *conv2d_forward(weft_module *m, weft_tensor *x) {
    const weft_conv2d_params *p = weft_module_impl(m);
    return weft_conv2d(x, weft_module_get(m, "weight"), weft_module_get(m, "bias"), p);
}

// Checks the sizes shared by both layers; "stride" etc. are the params' (0 = default already replaced).
static weft_status check_layer(const char *op, int64_t cin, int64_t cout, int kh, int kw, const int stride[2],
                               const int dilation[2], const int padding[2], int groups) {
    if (cin <= 0 || cout <= 0)
        return weft_error(WEFT_ERR_ARG, "%s: channels must be positive (in %lld, out %lld)", op, (long long)cin,
                          (long long)cout);
    if (kh <= 0 || kw <= 0) return weft_error(WEFT_ERR_ARG, "%s: kernel size must be positive (got %dx%d)", op, kh, kw);
    if (stride[0] < 0 || stride[1] < 0 || dilation[0] < 0 || dilation[1] < 0 || padding[0] < 0 || padding[1] < 0)
        return weft_error(WEFT_ERR_ARG, "%s: stride, dilation and padding must not be negative", op);
    if (groups < 0 || cin % groups || cout % groups)
        return weft_error(WEFT_ERR_ARG, "%s: groups (%d) must divide in (%lld) and out (%lld) channels", op, groups,
                          (long long)cin, (long long)cout);
    return WEFT_OK;
}

// PyTorch 1.13's reset_parameters: kaiming_uniform(a=sqrt(5)) on the weight is U(+-gain*sqrt(3/fan_in)) with
// gain sqrt(2/(1+5)), i.e. U(+-1/sqrt(fan_in)), fan_in = weight.size(1) * kh * kw; the bias uses the same
// bound. Weight first, then bias, from the same generator.
static weft_module *make_layer(const char *name, weft_module_forward_fn fwd, void *impl, int64_t w0, int64_t w1,
                               int kh, int kw, int64_t nbias, weft_generator *g) {
    weft_module *m = weft_module_new(name, fwd, impl, free);
    if (!m) return NULL;
    double bound = 1.0 / sqrt((double)(w1 * kh * kw));
    weft_status st = weft_nn_add_uniform_param(m, "weight", WEFT_DIMS(w0, w1, kh, kw), bound, g);
    if (!st && nbias) st = weft_nn_add_uniform_param(m, "bias", WEFT_DIMS(nbias), bound, g);
    if (st) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}

weft_module *weft_nn_conv2d(int64_t cin, int64_t cout, int kh, int kw, const weft_conv2d_params *p, bool bias,
                            weft_generator *g) {
    weft_conv2d_params d = {{1, 1}, {0, 0}, {1, 1}, 1};
    if (p) d = *p;
    // 0 means the default, as in the op; normalise so the stored params read plainly.
    for (int k = 0; k < 2; k++) {
        if (d.stride[k] == 0) d.stride[k] = 1;
        if (d.dilation[k] == 0) d.dilation[k] = 1;
    }
    if (d.groups == 0) d.groups = 1;
    if (check_layer("conv2d", cin, cout, kh, kw, d.stride, d.dilation, d.padding, d.groups)) return NULL;
    weft_conv2d_params *impl = malloc(sizeof *impl);
    if (!impl) return weft_error_null(WEFT_ERR_OOM, "conv2d: out of memory");
    *impl = d;
    return make_layer("conv2d", conv2d_forward, impl, cout, cin / d.groups, kh, kw, bias ? cout : 0, g);
}

static weft_tensor *conv_transpose2d_forward(weft_module *m, weft_tensor *x) {
    const weft_conv_transpose2d_params *p = weft_module_impl(m);
    return weft_conv_transpose2d(x, weft_module_get(m, "weight"), weft_module_get(m, "bias"), p);
}

weft_module *weft_nn_conv_transpose2d(int64_t cin, int64_t cout, int kh, int kw,
                                      const weft_conv_transpose2d_params *p, bool bias, weft_generator *g) {
    weft_conv_transpose2d_params d = {.stride = {1, 1}, .dilation = {1, 1}, .groups = 1};
    if (p) d = *p;
    for (int k = 0; k < 2; k++) {
        if (d.stride[k] == 0) d.stride[k] = 1;
        if (d.dilation[k] == 0) d.dilation[k] = 1;
    }
    if (d.groups == 0) d.groups = 1;
    const char *op = "conv_transpose2d";
    if (check_layer(op, cin, cout, kh, kw, d.stride, d.dilation, d.padding, d.groups)) return NULL;
    for (int k = 0; k < 2; k++)
        if (d.output_padding[k] < 0 || d.output_padding[k] >= d.stride[k])
            return weft_error_null(WEFT_ERR_ARG, "%s: output_padding %d must be at least 0 and less than the stride %d",
                                   op, d.output_padding[k], d.stride[k]);
    weft_conv_transpose2d_params *impl = malloc(sizeof *impl);
    if (!impl) return weft_error_null(WEFT_ERR_OOM, "%s: out of memory", op);
    *impl = d;
    return make_layer(op, conv_transpose2d_forward, impl, cin, cout / d.groups, kh, kw, bias ? cout : 0, g);
}
