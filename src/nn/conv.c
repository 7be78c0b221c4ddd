// Conv2d layer: x (N,Cin,H,W) -> y (N,Cout,OH,OW) through the conv2d op.
#include <math.h>
#include <stdlib.h>

#include <weft/nn.h>

#include "../core/core_impl.h"
#include "nn_impl.h"

static weft_tensor *conv2d_forward(weft_module *m, weft_tensor *x) {
    const weft_conv2d_params *p = weft_module_impl(m);
    return weft_conv2d(x, weft_module_get(m, "weight"), weft_module_get(m, "bias"), p);
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
    if (cin <= 0 || cout <= 0)
        return weft_error_null(WEFT_ERR_ARG, "conv2d: channels must be positive (in %lld, out %lld)", (long long)cin,
                               (long long)cout);
    if (kh <= 0 || kw <= 0)
        return weft_error_null(WEFT_ERR_ARG, "conv2d: kernel size must be positive (got %dx%d)", kh, kw);
    if (d.stride[0] < 0 || d.stride[1] < 0 || d.dilation[0] < 0 || d.dilation[1] < 0 || d.padding[0] < 0 ||
        d.padding[1] < 0)
        return weft_error_null(WEFT_ERR_ARG, "conv2d: stride, dilation and padding must not be negative");
    if (d.groups < 0 || cin % d.groups || cout % d.groups)
        return weft_error_null(WEFT_ERR_ARG, "conv2d: groups (%d) must divide in (%lld) and out (%lld) channels",
                               d.groups, (long long)cin, (long long)cout);
    weft_conv2d_params *impl = malloc(sizeof *impl);
    if (!impl) return weft_error_null(WEFT_ERR_OOM, "conv2d: out of memory");
    *impl = d;
    weft_module *m = weft_module_new("conv2d", conv2d_forward, impl, free);
    if (!m) return NULL;
    // PyTorch 1.13's reset_parameters: kaiming_uniform(a=sqrt(5)) on the weight is
    // U(+-gain*sqrt(3/fan_in)) with gain sqrt(2/(1+5)), i.e. U(+-1/sqrt(fan_in));
    // the bias uses the same bound. Weight first, then bias, from the same generator.
    int64_t cg = cin / d.groups;
    double bound = 1.0 / sqrt((double)(cg * kh * kw));
    weft_status st = weft_nn_add_uniform_param(m, "weight", WEFT_DIMS(cout, cg, kh, kw), bound, g);
    if (!st && bias) st = weft_nn_add_uniform_param(m, "bias", WEFT_DIMS(cout), bound, g);
    if (st) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}
