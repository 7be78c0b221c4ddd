// Activation layers (no parameters): relu, gelu (exact erf form), gelu_tanh (its tanh approximation), tanh,
// sigmoid, silu; leaky_relu (its slope kept by the module).
#include <math.h>
#include <stdlib.h>

#include <weft/nn.h>

#include "../core/core_impl.h"

static weft_tensor *relu_fwd(weft_module *m, weft_tensor *x) { return (void)m, weft_relu(x); }
static weft_tensor *gelu_fwd(weft_module *m, weft_tensor *x) { return (void)m, weft_gelu(x); }
static weft_tensor *gelu_tanh_fwd(weft_module *m, weft_tensor *x) { return (void)m, weft_gelu_tanh(x); }
static weft_tensor *tanh_fwd(weft_module *m, weft_tensor *x) { return (void)m, weft_tanh(x); }
static weft_tensor *sigmoid_fwd(weft_module *m, weft_tensor *x) { return (void)m, weft_sigmoid(x); }
static weft_tensor *silu_fwd(weft_module *m, weft_tensor *x) { return (void)m, weft_silu(x); }

weft_module *weft_nn_activation(weft_activation a) {
    switch (a) {
    case WEFT_ACT_RELU: return weft_module_new("relu", relu_fwd, NULL, NULL);
    case WEFT_ACT_GELU: return weft_module_new("gelu", gelu_fwd, NULL, NULL);
    case WEFT_ACT_TANH: return weft_module_new("tanh", tanh_fwd, NULL, NULL);
    case WEFT_ACT_SIGMOID: return weft_module_new("sigmoid", sigmoid_fwd, NULL, NULL);
    case WEFT_ACT_SILU: return weft_module_new("silu", silu_fwd, NULL, NULL);
    case WEFT_ACT_GELU_TANH: return weft_module_new("gelu_tanh", gelu_tanh_fwd, NULL, NULL);
    }
    return weft_error_null(WEFT_ERR_ARG, "activation: unknown activation %d", (int)a);
}

static weft_tensor *leaky_fwd(weft_module *m, weft_tensor *x) { return weft_leaky_relu(x, *(double *)weft_module_impl(m)); }

weft_module *weft_nn_leaky_relu(double slope) {
    if (!isfinite(slope)) return weft_error_null(WEFT_ERR_ARG, "leaky_relu: slope must be finite, got %g", slope);
    double *impl = malloc(sizeof *impl);
    if (!impl) return weft_error_null(WEFT_ERR_OOM, "leaky_relu: out of memory");
    *impl = slope;
    return weft_module_new("leaky_relu", leaky_fwd, impl, free);
}
