// Normalisation layers: batch_norm (per channel of (N,C,...)) and layer_norm (last dim).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weft/nn.h>

#include "../core/core_impl.h"
#include "nn_impl.h"

typedef struct norm_cfg {
    double momentum, eps;
} norm_cfg;

// Training: batch statistics, running stats updated in place by the op
// (running = (1-momentum)*running + momentum*batch, unbiased variance, as PyTorch).
// Eval: the running statistics, which stay untouched.
static weft_tensor *batch_norm_forward(weft_module *m, weft_tensor *x) {
    const norm_cfg *c = weft_module_impl(m);
    return weft_batch_norm(x, weft_module_get(m, "running_mean"), weft_module_get(m, "running_var"),
                           weft_module_get(m, "weight"), weft_module_get(m, "bias"), weft_module_is_training(m),
                           c->momentum, c->eps);
}

static weft_tensor *layer_norm_forward(weft_module *m, weft_tensor *x) {
    const norm_cfg *c = weft_module_impl(m);
    return weft_layer_norm(x, 1, weft_module_get(m, "weight"), weft_module_get(m, "bias"), c->eps);
}

static bool is_layer_norm(const weft_module *m) { return m && !strcmp(weft_module_kind(m), "layer_norm"); }

// y_dtype for a layer_norm module of x: a half one where asked for and the norm's output would be f32 (an f32
// or half x; an f64 one stays f64, as autocast leaves it), else f32 (WEFT_NORM_HALF_OUT=0: always).
static weft_dtype norm_y_dtype(const weft_tensor *x, weft_dtype y_dtype) {
    const char *e = getenv("WEFT_NORM_HALF_OUT");
    weft_dtype xd = x ? weft_tensor_dtype(x) : WEFT_F64;
    bool f32_out = xd == WEFT_F32 || weft_nn_is_half(xd);
    return weft_nn_is_half(y_dtype) && f32_out && (!e || strcmp(e, "0")) ? y_dtype : WEFT_F32;
}

weft_tensor *weft_nn_norm_to(weft_module *norm, weft_tensor *x, weft_dtype y_dtype) {
    weft_dtype yt = norm_y_dtype(x, y_dtype);
    if (!is_layer_norm(norm) || !weft_nn_is_half(yt)) return weft_module_forward(norm, x);
    const norm_cfg *c = weft_module_impl(norm);
    return weft_layer_norm_to(x, 1, weft_module_get(norm, "weight"), weft_module_get(norm, "bias"), c->eps, yt);
}

weft_tensor *weft_nn_add_norm(weft_module *norm, weft_tensor *x, weft_tensor *r, weft_tensor **sum,
                              weft_dtype y_dtype) {
    *sum = NULL;
    const char *e = getenv("WEFT_FUSED_ADD_NORM");
    if (is_layer_norm(norm) && (!e || strcmp(e, "0"))) {
        const norm_cfg *c = weft_module_impl(norm);
        weft_tensor *y;
        return weft_add_layer_norm_to(x, r, 1, weft_module_get(norm, "weight"), weft_module_get(norm, "bias"), c->eps,
                                      norm_y_dtype(x, y_dtype), sum, &y) == WEFT_OK
                   ? y
                   : NULL;
    }
    if (!(*sum = weft_add(x, r))) return NULL;
    weft_tensor *y = weft_nn_norm_to(norm, *sum, y_dtype);
    if (!y) {
        weft_tensor_free(*sum);
        *sum = NULL;
    }
    return y;
}

// weight = 1, bias = 0 (params) and, for batch_norm, running_mean = 0, running_var = 1 (buffers).
static weft_module *norm_new(const char *kind, weft_module_forward_fn fwd, int64_t n, double momentum, double eps,
                             bool running) {
    if (n <= 0) return weft_error_null(WEFT_ERR_ARG, "%s: size must be positive (got %lld)", kind, (long long)n);
    if (!(eps > 0) || !isfinite(eps))
        return weft_error_null(WEFT_ERR_ARG, "%s: eps must be positive (got %g)", kind, eps);
    if (!(momentum >= 0 && momentum <= 1))
        return weft_error_null(WEFT_ERR_ARG, "%s: momentum must be in [0, 1] (got %g)", kind, momentum);
    norm_cfg *c = malloc(sizeof *c);
    if (!c) return weft_error_null(WEFT_ERR_OOM, "%s: out of memory", kind);
    *c = (norm_cfg){momentum, eps};
    weft_module *m = weft_module_new(kind, fwd, c, free);
    if (!m) return NULL;
    weft_status st = weft_module_add_param(m, "weight", weft_tensor_ones(WEFT_DIMS(n), WEFT_F32));
    if (!st) st = weft_module_add_param(m, "bias", weft_tensor_zeros(WEFT_DIMS(n), WEFT_F32));
    if (!st && running) st = weft_module_add_buffer(m, "running_mean", weft_tensor_zeros(WEFT_DIMS(n), WEFT_F32));
    if (!st && running) st = weft_module_add_buffer(m, "running_var", weft_tensor_ones(WEFT_DIMS(n), WEFT_F32));
    if (st) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}

weft_module *weft_nn_batch_norm(int64_t channels, double momentum, double eps) {
    return norm_new("batch_norm", batch_norm_forward, channels, momentum, eps, true);
}

// After a stack of transformer blocks: the stack's last residual add and this norm in one add_layer_norm.
static weft_status layer_norm_fold(weft_module *m, weft_module *prev, weft_tensor *x, weft_tensor **out) {
    *out = NULL;
    if (!weft_nn_is_transformer(prev)) return WEFT_OK;
    weft_tensor *x1, *h, *sum = NULL;
    weft_status st = weft_nn_transformer_pending(prev, x, &x1, &h);
    if (st) return st;
    *out = h ? weft_nn_add_norm(m, x1, h, &sum, WEFT_F32) : weft_module_forward(m, x1);
    weft_tensor_free(sum); // the stack's output: nothing after the norm reads it
    weft_tensor_free(x1);
    weft_tensor_free(h);
    return *out ? WEFT_OK : weft_last_status();
}

weft_module *weft_nn_layer_norm(int64_t dim, double eps) {
    weft_module *m = norm_new("layer_norm", layer_norm_forward, dim, 0, eps, false);
    weft_module_set_fold(m, layer_norm_fold);
    return m;
}
