// Parameter initialisation (Kaiming/He, Xavier/Glorot, uniform, normal), seeded.
#include <math.h>

#include <weft/nn.h>

#include "../core/core_impl.h"
#include "nn_impl.h"

// fan_in/fan_out as PyTorch computes them: dims 0 and 1, times the receptive field.
static weft_status fans(const char *op, const weft_tensor *t, double *fan_in, double *fan_out) {
    int nd = weft_tensor_ndim(t);
    if (nd < 2) return weft_error(WEFT_ERR_SHAPE, "%s: needs a tensor with at least 2 dims (got %d)", op, nd);
    double rf = 1;
    for (int d = 2; d < nd; d++) rf *= (double)weft_tensor_size(t, d);
    *fan_in = (double)weft_tensor_size(t, 1) * rf;
    *fan_out = (double)weft_tensor_size(t, 0) * rf;
    return WEFT_OK;
}

weft_status weft_init_uniform(weft_tensor *t, double lo, double hi, weft_generator *g) {
    return weft_tensor_uniform_(t, lo, hi, g);
}
weft_status weft_init_normal(weft_tensor *t, double mean, double std, weft_generator *g) {
    return weft_tensor_normal_(t, mean, std, g);
}
weft_status weft_init_kaiming_uniform(weft_tensor *t, double gain, weft_generator *g) {
    double fi = 1, fo = 1;
    weft_status st = fans("kaiming_uniform", t, &fi, &fo);
    if (st) return st;
    double b = gain * sqrt(3.0 / fi);
    return weft_tensor_uniform_(t, -b, b, g);
}
weft_status weft_init_kaiming_normal(weft_tensor *t, double gain, weft_generator *g) {
    double fi = 1, fo = 1;
    weft_status st = fans("kaiming_normal", t, &fi, &fo);
    if (st) return st;
    return weft_tensor_normal_(t, 0, gain / sqrt(fi), g);
}
weft_status weft_init_xavier_uniform(weft_tensor *t, double gain, weft_generator *g) {
    double fi = 1, fo = 1;
    weft_status st = fans("xavier_uniform", t, &fi, &fo);
    if (st) return st;
    double b = gain * sqrt(6.0 / (fi + fo));
    return weft_tensor_uniform_(t, -b, b, g);
}
weft_status weft_init_xavier_normal(weft_tensor *t, double gain, weft_generator *g) {
    double fi = 1, fo = 1;
    weft_status st = fans("xavier_normal", t, &fi, &fo);
    if (st) return st;
    return weft_tensor_normal_(t, 0, gain * sqrt(2.0 / (fi + fo)), g);
}

weft_status weft_nn_add_uniform_param(weft_module *m, const char *name, int ndim, const int64_t *sizes, double bound,
                                      weft_generator *g) {
    weft_tensor *t = weft_tensor_empty(ndim, sizes, WEFT_F32);
    if (t && weft_tensor_uniform_(t, -bound, bound, g)) weft_tensor_free(t), t = NULL;
    return weft_module_add_param(m, name, t); // takes t (NULL: reports the error)
}
