// Tensor and storage lifetime, metadata queries.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../autograd/autograd_impl.h"
#include "../device/device_impl.h"
#include "tensor_impl.h"

static inline void ref_inc(int32_t *c) { __atomic_fetch_add(c, 1, __ATOMIC_RELAXED); }
static inline bool ref_dec(int32_t *c) { return __atomic_sub_fetch(c, 1, __ATOMIC_ACQ_REL) == 0; }

static void storage_release(weft_storage *s) {
    if (!s || !ref_dec(&s->refcount)) return;
    if (s->owned && s->data) weft_device_free(s->device, s->data, s->nbytes);
    free(s);
}

void weft_contiguous_strides(int ndim, const int64_t *sizes, int64_t *strides) {
    int64_t st = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = st;
        st *= sizes[d] > 1 ? sizes[d] : 1;
    }
}

int64_t weft_shape_numel(int ndim, const int64_t *sizes) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= sizes[d];
    return n;
}

bool weft_shape_equal(int na, const int64_t *a, int nb, const int64_t *b) {
    if (na != nb) return false;
    for (int d = 0; d < na; d++)
        if (a[d] != b[d]) return false;
    return true;
}

const char *weft_shape_fmt(int ndim, const int64_t *sizes, char *buf, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "(");
    for (int d = 0; d < ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ",%lld" : "%lld", (long long)sizes[d]);
    if (k < n) snprintf(buf + k, n - k, ")");
    return buf;
}

int weft_axis(const char *op, int axis, int ndim) {
    int a = axis < 0 ? axis + ndim : axis;
    if (a < 0 || a >= (ndim ? ndim : 1)) {
        weft_error(WEFT_ERR_ARG, "%s: axis %d out of range for a %d-d tensor", op, axis, ndim);
        return -1;
    }
    return a;
}

static weft_tensor *tensor_struct(void) {
    weft_tensor *t = calloc(1, sizeof *t);
    if (!t) return weft_error_null(WEFT_ERR_OOM, "out of memory (tensor struct)");
    t->refcount = 1;
    return t;
}

// A contiguous tensor over a new storage of nbytes at data (owned; NULL: a
// data-less stand-in). NULL on OOM; the caller still owns data then.
static weft_tensor *tensor_over(int ndim, const int64_t *sizes, int64_t numel, weft_dtype dt, weft_device dev,
                                void *data, size_t nbytes) {
    weft_tensor *t = tensor_struct();
    weft_storage *s = t ? malloc(sizeof *s) : NULL;
    if (!s) {
        free(t);
        return t ? weft_error_null(WEFT_ERR_OOM, "out of memory (storage struct)") : NULL;
    }
    *s = (weft_storage){.refcount = 1, .device = dev, .data = data, .nbytes = nbytes, .owned = true};
    t->storage = s;
    t->ndim = (int8_t)ndim;
    t->dtype = (uint8_t)dt;
    t->device = dev;
    t->numel = numel;
    if (ndim) memcpy(t->sizes, sizes, sizeof(int64_t) * (size_t)ndim);
    weft_contiguous_strides(ndim, sizes, t->strides);
    return t;
}

weft_tensor *weft_tensor_new(int ndim, const int64_t *sizes, weft_dtype dt, weft_device dev) {
    if (ndim < 0 || ndim > WEFT_MAX_DIMS)
        return weft_error_null(WEFT_ERR_ARG, "tensor: %d dims (at most %d)", ndim, WEFT_MAX_DIMS);
    if ((unsigned)dt >= WEFT_NUM_DTYPES) return weft_error_null(WEFT_ERR_DTYPE, "tensor: bad dtype %d", (int)dt);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (sizes[d] < 0) return weft_error_null(WEFT_ERR_SHAPE, "tensor: negative size %lld", (long long)sizes[d]);
        if (sizes[d] && numel > INT64_MAX / 16 / sizes[d])
            return weft_error_null(WEFT_ERR_SHAPE, "tensor: too many elements");
        numel *= sizes[d];
    }
    size_t nbytes = (size_t)numel * weft_dtype_size(dt);
    void *data = weft_device_alloc(dev, nbytes);
    if (!data) return NULL;
    weft_tensor *t = tensor_over(ndim, sizes, numel, dt, dev, data, nbytes);
    if (!t) weft_device_free(dev, data, nbytes);
    return t;
}

// Graph autodiff's stand-ins (symbolic mode): shape and dtype, no data (any
// kernel touching one would fault at once; freeing it frees nothing).
weft_tensor *weft_tensor_symbolic(int ndim, const int64_t *sizes, weft_dtype dt, weft_device dev) {
    int64_t numel = weft_shape_numel(ndim, sizes);
    return tensor_over(ndim, sizes, numel, dt, dev, NULL, (size_t)numel * weft_dtype_size(dt));
}

weft_tensor *weft_tensor_alias(const weft_tensor *base, int ndim, const int64_t *sizes, const int64_t *strides,
                               int64_t offset) {
    weft_tensor *t = tensor_struct();
    if (!t) return NULL;
    ref_inc(&base->storage->refcount);
    t->storage = base->storage;
    t->ndim = (int8_t)ndim;
    t->dtype = base->dtype;
    t->device = base->device;
    t->offset = offset;
    if (ndim) {
        memcpy(t->sizes, sizes, sizeof(int64_t) * (size_t)ndim);
        memcpy(t->strides, strides, sizeof(int64_t) * (size_t)ndim);
    }
    t->numel = weft_shape_numel(ndim, sizes);
    return t;
}

weft_tensor *weft_tensor_ref(weft_tensor *t) {
    if (t) ref_inc(&t->refcount);
    return t;
}

void weft_tensor_free(weft_tensor *t) {
    if (!t || !ref_dec(&t->refcount)) return;
    storage_release(t->storage);
    weft_tensor_free(t->grad);
    if (t->grad_fn) weft_node_release(t->grad_fn);
    weft_tensor_free_hooks(t);
    free(t);
}

weft_tensor *weft_tensor_detach(weft_tensor *t) {
    if (!t) return weft_error_null_input("detach");
    return weft_tensor_alias(t, t->ndim, t->sizes, t->strides, t->offset);
}

// ---- metadata ----
int weft_tensor_ndim(const weft_tensor *t) { return t ? t->ndim : 0; }
int64_t weft_tensor_size(const weft_tensor *t, int dim) {
    if (!t) return 0;
    int d = dim < 0 ? dim + t->ndim : dim;
    return (d >= 0 && d < t->ndim) ? t->sizes[d] : 0;
}
int64_t weft_tensor_stride(const weft_tensor *t, int dim) {
    if (!t) return 0;
    int d = dim < 0 ? dim + t->ndim : dim;
    return (d >= 0 && d < t->ndim) ? t->strides[d] : 0;
}
const int64_t *weft_tensor_sizes(const weft_tensor *t) { return t ? t->sizes : NULL; }
const int64_t *weft_tensor_strides(const weft_tensor *t) { return t ? t->strides : NULL; }
int64_t weft_tensor_offset(const weft_tensor *t) { return t ? t->offset : 0; }
int64_t weft_tensor_numel(const weft_tensor *t) { return t ? t->numel : 0; }
weft_dtype weft_tensor_dtype(const weft_tensor *t) { return t ? (weft_dtype)t->dtype : WEFT_F32; }
weft_device weft_tensor_device(const weft_tensor *t) { return t ? t->device : WEFT_DEVICE_CPU; }
bool weft_tensor_is_contiguous(const weft_tensor *t) {
    if (!t) return false;
    int64_t st = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->sizes[d] == 1) continue;
        if (t->strides[d] != st) return false;
        st *= t->sizes[d];
    }
    return true;
}
bool weft_tensor_shares_storage(const weft_tensor *a, const weft_tensor *b) {
    return a && b && a->storage == b->storage;
}
void *weft_tensor_data(const weft_tensor *t) {
    if (!t || t->device.type != WEFT_CPU || !t->storage) return NULL;
    return weft_tensor_ptr(t);
}
void *weft_tensor_device_ptr(const weft_tensor *t) {
    if (!t || !t->storage || !t->storage->data) return NULL;
    return weft_tensor_ptr(t);
}
const char *weft_tensor_shape_str(const weft_tensor *t, char *buf, size_t n) {
    if (!t) {
        snprintf(buf, n, "(null)");
        return buf;
    }
    return weft_shape_fmt(t->ndim, t->sizes, buf, n);
}

// ---- element load/store as double ----
double weft_load_f64(const void *p, weft_dtype dt, int64_t i) {
    switch (dt) {
    case WEFT_F32: return ((const float *)p)[i];
    case WEFT_F64: return ((const double *)p)[i];
    case WEFT_I32: return ((const int32_t *)p)[i];
    case WEFT_I64: return (double)((const int64_t *)p)[i];
    case WEFT_BOOL:
    case WEFT_U8: return ((const uint8_t *)p)[i];
    case WEFT_F16: return weft_f16_to_f32(((const uint16_t *)p)[i]);
    case WEFT_BF16: return weft_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return 0;
    }
}

void weft_store_f64(void *p, weft_dtype dt, int64_t i, double v) {
    switch (dt) {
    case WEFT_F32: ((float *)p)[i] = (float)v; break;
    case WEFT_F64: ((double *)p)[i] = v; break;
    case WEFT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case WEFT_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case WEFT_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case WEFT_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case WEFT_F16: ((uint16_t *)p)[i] = weft_f32_to_f16(weft_f64_to_f32_odd(v)); break;
    case WEFT_BF16: ((uint16_t *)p)[i] = weft_f32_to_bf16(weft_f64_to_f32_odd(v)); break;
    default: break;
    }
}
