// Element access and printing (slow paths for tests, debugging and item()).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../device/device_impl.h"
#include "tensor_impl.h"

static weft_status elem_offset(const char *op, const weft_tensor *t, const int64_t *index, int64_t *off) {
    int64_t o = t->offset;
    for (int d = 0; d < t->ndim; d++) {
        if (index[d] < 0 || index[d] >= t->sizes[d])
            return weft_error(WEFT_ERR_ARG, "%s: index %lld out of range for dim %d of size %lld", op,
                              (long long)index[d], d, (long long)t->sizes[d]);
        o += index[d] * t->strides[d];
    }
    *off = o;
    return WEFT_OK;
}

weft_status weft_tensor_get(const weft_tensor *t, const int64_t *index, double *out) {
    if (!t || (!index && t->ndim) || !out) return weft_error(WEFT_ERR_ARG, "get: NULL argument");
    int64_t off = 0;
    weft_status st = elem_offset("get", t, index, &off);
    if (st) return st;
    size_t esz = weft_dtype_size((weft_dtype)t->dtype);
    const char *p = (const char *)t->storage->data + off * (int64_t)esz;
    if (t->device.type == WEFT_CPU) {
        *out = weft_load_f64(p, (weft_dtype)t->dtype, 0);
        return WEFT_OK;
    }
    uint64_t buf = 0;
    if ((st = weft_device_copy(WEFT_DEVICE_CPU, &buf, t->device, p, esz))) return st;
    *out = weft_load_f64(&buf, (weft_dtype)t->dtype, 0);
    return WEFT_OK;
}

weft_status weft_tensor_set(weft_tensor *t, const int64_t *index, double v) {
    if (!t || (!index && t->ndim)) return weft_error(WEFT_ERR_ARG, "set: NULL argument");
    int64_t off = 0;
    weft_status st = elem_offset("set", t, index, &off);
    if (st) return st;
    size_t esz = weft_dtype_size((weft_dtype)t->dtype);
    char *p = (char *)t->storage->data + off * (int64_t)esz;
    if (t->device.type == WEFT_CPU) {
        weft_store_f64(p, (weft_dtype)t->dtype, 0, v);
        return WEFT_OK;
    }
    uint64_t buf = 0;
    weft_store_f64(&buf, (weft_dtype)t->dtype, 0, v);
    return weft_device_copy(t->device, p, WEFT_DEVICE_CPU, &buf, esz);
}

double weft_tensor_item(const weft_tensor *t) {
    if (!t) {
        weft_error_null_input("item");
        return NAN;
    }
    if (t->numel != 1) {
        weft_error(WEFT_ERR_SHAPE, "item: tensor has %lld elements, not 1", (long long)t->numel);
        return NAN;
    }
    int64_t idx[WEFT_MAX_DIMS] = {0};
    double v = NAN;
    weft_tensor_get(t, idx, &v);
    return v;
}

// Visit elements in logical row-major order.
static weft_status to_host(const weft_tensor *t, int64_t n, void *out, bool as_f32) {
    if (!t || !out) return weft_error(WEFT_ERR_ARG, "to_host: NULL argument");
    if (n < t->numel) return weft_error(WEFT_ERR_ARG, "to_host: buffer of %lld for %lld elements", (long long)n, (long long)t->numel);
    weft_tensor *h = NULL;
    if (t->device.type != WEFT_CPU) {
        h = weft_tensor_to_raw((weft_tensor *)t, WEFT_DEVICE_CPU);
        if (!h) return weft_last_status();
        t = h;
    }
    int64_t idx[WEFT_MAX_DIMS] = {0};
    const char *base = (const char *)t->storage->data;
    weft_dtype dt = (weft_dtype)t->dtype;
    for (int64_t i = 0; i < t->numel; i++) {
        int64_t off = t->offset;
        for (int d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
        double v = weft_load_f64(base, dt, off);
        if (as_f32) ((float *)out)[i] = (float)v;
        else ((double *)out)[i] = v;
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->sizes[d]) break;
            idx[d] = 0;
        }
    }
    weft_tensor_free(h);
    return WEFT_OK;
}

weft_status weft_tensor_to_f64(const weft_tensor *t, double *out, int64_t n) { return to_host(t, n, out, false); }
weft_status weft_tensor_to_f32(const weft_tensor *t, float *out, int64_t n) { return to_host(t, n, out, true); }

void weft_tensor_print(const weft_tensor *t, const char *name) {
    char shp[128];
    if (!t) {
        printf("%s = (null)\n", name ? name : "tensor");
        return;
    }
    printf("%s %s %s", name ? name : "tensor", weft_dtype_name((weft_dtype)t->dtype),
           weft_tensor_shape_str(t, shp, sizeof shp));
    if (t->grad_fn) printf(" grad_fn=%s", weft_tensor_grad_fn_name(t));
    else if (t->requires_grad) printf(" requires_grad");
    int64_t n = t->numel < 64 ? t->numel : 64;
    double *v = malloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1));
    if (!v || weft_tensor_to_f64(t, v, t->numel) != WEFT_OK) {
        free(v);
        printf(" <unreadable>\n");
        return;
    }
    printf(" [");
    for (int64_t i = 0; i < n; i++) printf(i ? ", %.6g" : "%.6g", v[i]);
    printf(t->numel > n ? ", ...]\n" : "]\n");
    free(v);
}
