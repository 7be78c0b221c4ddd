// Linear layer: y = x W^T + b, x (..., in) -> y (..., out).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weft/autograd.h>
#include <weft/nn.h>

#include "../core/core_impl.h"
#include "nn_impl.h"

// The fused op (bias and GELU in the product's epilogue): for f32 / f64, and
// under autocast for f32 or autocast-dtype operands (it then runs in that
// dtype and returns it, as torch.autocast's F.linear). WEFT_FUSED_LINEAR=0 in
// the environment runs matmul, add and gelu instead (read at every call).
static bool use_fused(const weft_tensor *x, const weft_tensor *w) {
    if (!x || !w) return false;
    const char *e = getenv("WEFT_FUSED_LINEAR");
    if (e && !strcmp(e, "0")) return false;
    weft_dtype ac = weft_autocast_get(), dw = weft_tensor_dtype(w), dx = weft_tensor_dtype(x);
    if (ac == WEFT_F32) return (dw == WEFT_F32 || dw == WEFT_F64) && dx == dw;
    return (dw == WEFT_F32 || dw == ac) && (dx == WEFT_F32 || dx == ac);
}

weft_tensor *weft_nn_linear_apply(weft_tensor *x, weft_tensor *w, weft_tensor *b, int act) {
    if (use_fused(x, w))
        return act == WEFT_NN_GELU_TANH ? weft_linear_gelu_tanh(x, w, b)
               : act == WEFT_NN_GELU    ? weft_linear_gelu(x, w, b)
                                        : weft_linear(x, w, b);
    weft_tensor *wt = weft_transpose(w, 0, 1); // (in,out) view: BLAS gets a transpose flag, no copy
    weft_tensor *y = weft_matmul(x, wt);
    weft_tensor_free(wt);
    if (y && b) {
        weft_tensor *yb = weft_add(y, b);
        weft_tensor_free(y);
        y = yb;
    }
    if (y && act != WEFT_NN_NO_ACT) {
        weft_tensor *a = act == WEFT_NN_GELU_TANH ? weft_gelu_tanh(y) : weft_gelu(y);
        weft_tensor_free(y);
        y = a;
    }
    return y;
}

// (Only where a gradient is wanted: without one, h would live on until proj is done for nothing.)
weft_tensor *weft_nn_mlp_apply(weft_tensor *x, weft_module *fc, weft_module *proj, bool tanh_form, bool *used) {
    weft_tensor *w1 = weft_module_get(fc, "weight"), *w2 = weft_module_get(proj, "weight");
    weft_tensor *b1 = weft_module_get(fc, "bias"), *b2 = weft_module_get(proj, "bias");
    const char *e = getenv("WEFT_FUSED_GELU_BW");
    *used = strcmp(weft_module_kind(fc), "linear") == 0 && strcmp(weft_module_kind(proj), "linear") == 0 &&
            !(e && !strcmp(e, "0")) && weft_tensor_ndim(x) >= 2 && use_fused(x, w1) && use_fused(x, w2) &&
            weft_grad_is_enabled() &&
            (weft_tensor_requires_grad(x) || weft_tensor_requires_grad(w1) || weft_tensor_requires_grad(w2) ||
             (b1 && weft_tensor_requires_grad(b1)) || (b2 && weft_tensor_requires_grad(b2)));
    if (!*used) return NULL;
    weft_tensor *h, *a = weft_linear_gelu_pre(x, w1, b1, tanh_form, &h);
    weft_tensor *y = a ? weft_gelu_linear(h, a, w2, b2, tanh_form) : NULL;
    weft_tensor_free(a);
    weft_tensor_free(h);
    return y;
}

weft_tensor *weft_nn_affine(weft_module *m, weft_tensor *x, bool with_bias) {
    return weft_nn_linear_apply(x, weft_module_get(m, "weight"), with_bias ? weft_module_get(m, "bias") : NULL,
                                 WEFT_NN_NO_ACT);
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
