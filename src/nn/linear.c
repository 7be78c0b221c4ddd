// Linear layer: y = x W^T + b, x (..., in) -> y (..., out).
#include <math.h>

#include <weft/nn.h>

#include "../core/core_impl.h"
#include "nn_impl.h"

weft_tensor *weft_nn_affine(weft_module *m, weft_tensor *x, bool with_bias) {
    weft_tensor *w = weft_module_get(m, "weight"), *b = with_bias ? weft_module_get(m, "bias") : NULL;
    weft_tensor *wt = weft_transpose(w, 0, 1); // (in,out) view: BLAS gets a transpose flag, no copy
    weft_tensor *y = weft_matmul(x, wt);
    weft_tensor_free(wt);
    if (y && b) {
        weft_tensor *yb = weft_add(y, b);
        weft_tensor_free(y);
        y = yb;
    }
    return y;
}

static weft_tensor *linear_forward(weft_module *m, weft_tensor *x) { return weft_nn_affine(m, x, true); }

weft_module *weft_nn_linear(int64_t in, int64_t out, bool bias, weft_generator *g) {
    if (in <= 0 || out <= 0)
        return weft_error_null(WEFT_ERR_ARG, "linear: sizes must be positive (in %lld, out %lld)", (long long)in,
                               (long long)out);
    weft_module *m = weft_module_new("linear", linear_forward, NULL, NULL);
    if (!m) return NULL;
    double bound = 1.0 / sqrt((double)in); // PyTorch's default: kaiming_uniform(a=sqrt(5)) == U(+-1/sqrt(in))
    weft_status st = weft_nn_add_uniform_param(m, "weight", WEFT_DIMS(out, in), bound, g);
    if (!st && bias) st = weft_nn_add_uniform_param(m, "bias", WEFT_DIMS(out), bound, g);
    if (st) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}
