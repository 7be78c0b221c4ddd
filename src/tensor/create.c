// Tensor creation: empty, zeros, ones, full, arange, from host data, *_like.
#include <math.h>
#include <string.h>

#include "../device/device_impl.h"
#include "../ops/cpu/iter.h"
#include "tensor_impl.h"

weft_tensor *weft_tensor_empty_on(int ndim, const int64_t *sizes, weft_dtype dt, weft_device dev) {
    if (ndim > 0 && !sizes) return weft_error_null(WEFT_ERR_ARG, "tensor: NULL sizes");
    // 0-d tensors may pass sizes = NULL; weft_tensor_new memcpy()s from it
    // (zero bytes, but memcpy's arguments must still be valid pointers).
    static const int64_t k_no_sizes[1] = {1};
    if (!sizes) sizes = k_no_sizes;
    return weft_tensor_new(ndim, sizes, dt, dev);
}

weft_tensor *weft_tensor_empty(int ndim, const int64_t *sizes, weft_dtype dt) {
    return weft_tensor_empty_on(ndim, sizes, dt, weft_device_get_default());
}

weft_tensor *weft_tensor_full(int ndim, const int64_t *sizes, weft_dtype dt, double v) {
    return weft_tensor_full_on(ndim, sizes, dt, v, weft_device_get_default());
}
weft_tensor *weft_tensor_full_on(int ndim, const int64_t *sizes, weft_dtype dt, double v, weft_device dev) {
    weft_tensor *t = weft_tensor_empty_on(ndim, sizes, dt, dev);
    if (t && weft_tensor_fill_(t, v) != WEFT_OK) {
        weft_tensor_free(t);
        return NULL;
    }
    return t;
}
weft_tensor *weft_tensor_zeros(int ndim, const int64_t *sizes, weft_dtype dt) {
    return weft_tensor_full(ndim, sizes, dt, 0);
}
weft_tensor *weft_tensor_ones(int ndim, const int64_t *sizes, weft_dtype dt) {
    return weft_tensor_full(ndim, sizes, dt, 1);
}
weft_tensor *weft_tensor_scalar(double v, weft_dtype dt) { return weft_tensor_full(0, NULL, dt, v); }

static weft_tensor *like(const weft_tensor *t, int what) {
    if (!t) return weft_error_null_input("like");
    weft_tensor *r = weft_tensor_new(t->ndim, t->sizes, (weft_dtype)t->dtype, t->device);
    if (r && what >= 0 && weft_tensor_fill_(r, what) != WEFT_OK) {
        weft_tensor_free(r);
        return NULL;
    }
    return r;
}
weft_tensor *weft_tensor_zeros_like(const weft_tensor *t) { return like(t, 0); }
weft_tensor *weft_tensor_ones_like(const weft_tensor *t) { return like(t, 1); }
weft_tensor *weft_tensor_empty_like(const weft_tensor *t) { return like(t, -1); }

weft_tensor *weft_tensor_arange(double start, double end, double step, weft_dtype dt) {
    if (step == 0 || !isfinite(start) || !isfinite(end) || !isfinite(step))
        return weft_error_null(WEFT_ERR_ARG, "arange: bad range (%g, %g, step %g)", start, end, step);
    double nf = ceil((end - start) / step);
    if (nf > (double)(INT64_MAX / 16)) // converting it to int64 would be undefined
        return weft_error_null(WEFT_ERR_ARG, "arange: %g elements is too many", nf);
    int64_t n = nf > 0 ? (int64_t)nf : 0;
    weft_tensor *t = weft_tensor_empty_on(1, &n, dt, WEFT_DEVICE_CPU);
    if (!t) return NULL;
    for (int64_t i = 0; i < n; i++) weft_store_f64(weft_tensor_ptr(t), dt, i, start + (double)i * step);
    weft_device dev = weft_device_get_default();
    if (dev.type == WEFT_CPU) return t;
    weft_tensor *r = weft_tensor_to_raw(t, dev);
    weft_tensor_free(t);
    return r;
}

weft_tensor *weft_tensor_from_data(const void *data, int ndim, const int64_t *sizes, weft_dtype dt) {
    if (!data) return weft_error_null(WEFT_ERR_ARG, "from_data: NULL data");
    weft_tensor *t = weft_tensor_empty(ndim, sizes, dt);
    if (!t) return NULL;
    weft_status st = weft_device_copy(t->device, weft_tensor_ptr(t), WEFT_DEVICE_CPU, data,
                                      (size_t)t->numel * weft_dtype_size(dt));
    if (st != WEFT_OK) {
        weft_tensor_free(t);
        return NULL;
    }
    return t;
}

// ---- in-place fills and copies ----
typedef struct {
    uint64_t bits;
    size_t esz;
} fill_ctx;
static void fill_loop(char **p, const int64_t *s, int64_t n, const void *vctx) {
    const fill_ctx *c = vctx;
    char *o = p[0];
    for (int64_t i = 0; i < n; i++) memcpy(o + i * s[0], &c->bits, c->esz);
}

weft_status weft_tensor_fill_(weft_tensor *t, double v) {
    if (!t) return weft_error(WEFT_ERR_ARG, "fill_: NULL tensor");
    fill_ctx c = {0, weft_dtype_size((weft_dtype)t->dtype)};
    weft_store_f64(&c.bits, (weft_dtype)t->dtype, 0, v);
    if (t->device.type != WEFT_CPU) {
        // Build the pattern on the host and copy (accelerators fill through their copy path).
        weft_tensor *h = weft_tensor_new(t->ndim, t->sizes, (weft_dtype)t->dtype, WEFT_DEVICE_CPU);
        if (!h) return weft_last_status();
        weft_status st = weft_tensor_fill_(h, v);
        if (st == WEFT_OK) st = weft_tensor_copy_(t, h);
        weft_tensor_free(h);
        return st;
    }
    if (c.bits == 0 && weft_tensor_is_contiguous(t)) {
        memset(weft_tensor_ptr(t), 0, (size_t)t->numel * c.esz);
        return WEFT_OK;
    }
    weft_iter it;
    weft_iter_init(&it, t, 0, NULL);
    weft_iter_run(&it, fill_loop, &c);
    return WEFT_OK;
}

weft_status weft_tensor_zero_(weft_tensor *t) { return weft_tensor_fill_(t, 0); }

// Same-device copy kernels by device type (weft_tensor_copy_register).
static weft_copy_fn g_copy[WEFT_NUM_DEVICE_TYPES] = {[WEFT_CPU] = weft_cpu_copy};

void weft_tensor_copy_register(weft_device_type t, weft_copy_fn fn) {
    if ((unsigned)t < WEFT_NUM_DEVICE_TYPES && t != WEFT_CPU) g_copy[t] = fn;
}

// dst = src across devices with any strides, broadcast or dtype change:
// src made contiguous on its own device, moved to the host, converted and
// broadcast there into dst's dtype and shape, then moved to dst's device
// (through a contiguous temporary there when dst is strided).
static weft_status copy_staged(weft_tensor *dst, const weft_tensor *src) {
    weft_device cpu = WEFT_DEVICE_CPU;
    weft_tensor *sc = NULL, *sh = NULL, *dh = NULL, *dd = NULL;
    weft_status st = WEFT_OK;
    if (src->device.type == WEFT_CPU) sh = weft_tensor_ref((weft_tensor *)src);
    else if (!(sc = weft_tensor_new(src->ndim, src->sizes, (weft_dtype)src->dtype, src->device)) ||
             !(sh = weft_tensor_new(src->ndim, src->sizes, (weft_dtype)src->dtype, cpu)))
        st = weft_last_status();
    else if (!(st = weft_tensor_copy_(sc, src))) // contiguous, on src's device
        st = weft_device_copy(cpu, weft_tensor_ptr(sh), sc->device, weft_tensor_ptr(sc),
                              (size_t)sc->numel * weft_dtype_size((weft_dtype)sc->dtype));
    if (!st && dst->device.type == WEFT_CPU) st = weft_cpu_copy(dst, sh);
    else if (!st) {
        if (!(dh = weft_tensor_new(dst->ndim, dst->sizes, (weft_dtype)dst->dtype, cpu))) st = weft_last_status();
        if (!st) st = weft_cpu_copy(dh, sh);
        size_t nb = (size_t)dst->numel * weft_dtype_size((weft_dtype)dst->dtype);
        if (!st && weft_tensor_is_contiguous(dst))
            st = weft_device_copy(dst->device, weft_tensor_ptr(dst), cpu, weft_tensor_ptr(dh), nb);
        else if (!st) {
            if (!(dd = weft_tensor_new(dst->ndim, dst->sizes, (weft_dtype)dst->dtype, dst->device))) st = weft_last_status();
            if (!st) st = weft_device_copy(dst->device, weft_tensor_ptr(dd), cpu, weft_tensor_ptr(dh), nb);
            if (!st) st = weft_tensor_copy_(dst, dd); // within dst's device: its own kernel
        }
    }
    weft_tensor_free(sc);
    weft_tensor_free(sh);
    weft_tensor_free(dh);
    weft_tensor_free(dd);
    return st;
}

weft_status weft_tensor_copy_(weft_tensor *dst, const weft_tensor *src) {
    if (!dst || !src) return weft_error(WEFT_ERR_ARG, "copy_: NULL tensor");
    // src must broadcast to dst
    int lead = dst->ndim - src->ndim;
    bool ok = lead >= 0;
    for (int d = 0; ok && d < src->ndim; d++)
        ok = src->sizes[d] == 1 || src->sizes[d] == dst->sizes[lead + d];
    if (!ok) {
        char a[96], b[96];
        return weft_error(WEFT_ERR_SHAPE, "copy_: source %s does not broadcast to destination %s",
                          weft_tensor_shape_str(src, a, sizeof a), weft_tensor_shape_str(dst, b, sizeof b));
    }
    if (dst->numel == 0) return WEFT_OK; // nothing to move, on every path
    if (weft_device_equal(dst->device, src->device)) {
        weft_copy_fn fn = (unsigned)dst->device.type < WEFT_NUM_DEVICE_TYPES ? g_copy[dst->device.type] : NULL;
        if (!fn) {
            char b[32];
            return weft_error(WEFT_ERR_DEVICE, "copy_: no copy kernel for %s",
                              weft_device_str(dst->device, b, sizeof b));
        }
        return fn(dst, src);
    }
    // Across devices: contiguous same-dtype same-shape is one device copy;
    // anything else is staged through host memory.
    size_t esz = weft_dtype_size((weft_dtype)dst->dtype);
    if (dst->dtype == src->dtype && weft_shape_equal(dst->ndim, dst->sizes, src->ndim, src->sizes) &&
        weft_tensor_is_contiguous(dst) && weft_tensor_is_contiguous(src))
        return weft_device_copy(dst->device, weft_tensor_ptr(dst), src->device, weft_tensor_ptr(src),
                                (size_t)dst->numel * esz);
    return copy_staged(dst, src);
}

weft_tensor *weft_tensor_to_raw(weft_tensor *t, weft_device dev) {
    if (!t) return weft_error_null_input("to");
    if (weft_device_equal(t->device, dev)) return weft_tensor_ref(t);
    weft_tensor *c = weft_tensor_contiguous(t);
    if (!c) return NULL;
    weft_tensor *r = weft_tensor_new(c->ndim, c->sizes, (weft_dtype)c->dtype, dev);
    if (r && weft_tensor_copy_(r, c) != WEFT_OK) {
        weft_tensor_free(r);
        r = NULL;
    }
    weft_tensor_free(c);
    return r;
}
