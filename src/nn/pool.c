// Pooling layers: max_pool2d and avg_pool2d, x (N,C,H,W) -> (N,C,OH,OW). No parameters.
#include <stdlib.h>

#include <weft/nn.h>

#include "../core/core_impl.h"

static weft_tensor *max_pool_forward(weft_module *m, weft_tensor *x) {
    return weft_max_pool2d(x, weft_module_impl(m));
}
static weft_tensor *avg_pool_forward(weft_module *m, weft_tensor *x) {
    return weft_avg_pool2d(x, weft_module_impl(m));
}

// Checks the params now, so a bad layer fails when it is built, not at its first forward.
static weft_module *pool_new(const char *kind, weft_module_forward_fn fwd, const weft_pool2d_params *p) {
    if (!p) return weft_error_null(WEFT_ERR_ARG, "%s: NULL params", kind);
    weft_pool2d_params d = *p;
    for (int k = 0; k < 2; k++) {
        if (d.kernel[k] <= 0)
            return weft_error_null(WEFT_ERR_ARG, "%s: kernel size must be positive (got %dx%d)", kind, d.kernel[0],
                                   d.kernel[1]);
        if (d.stride[k] < 0) return weft_error_null(WEFT_ERR_ARG, "%s: stride must not be negative", kind);
        if (d.stride[k] == 0) d.stride[k] = d.kernel[k]; // PyTorch's default: stride = kernel
        // As in PyTorch (and the op): every window must overlap the real input.
        if (d.padding[k] < 0 || 2 * d.padding[k] > d.kernel[k])
            return weft_error_null(WEFT_ERR_ARG, "%s: padding must be between 0 and half the kernel size", kind);
    }
    weft_pool2d_params *impl = malloc(sizeof *impl);
    if (!impl) return weft_error_null(WEFT_ERR_OOM, "%s: out of memory", kind);
    *impl = d;
    return weft_module_new(kind, fwd, impl, free);
}

weft_module *weft_nn_max_pool2d(const weft_pool2d_params *p) {
    return pool_new("max_pool2d", max_pool_forward, p);
}
weft_module *weft_nn_avg_pool2d(const weft_pool2d_params *p) {
    return pool_new("avg_pool2d", avg_pool_forward, p);
}
