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

// The one place shapes are checked for size: every tensor, view and graph
// value passes through here, so no parser has to bound its own products.
int64_t weft_shape_numel(int ndim, const int64_t *sizes) {
    if (ndim < 0 || ndim > WEFT_MAX_DIMS || (ndim && !sizes)) return -1;
    int64_t span = 1; // the product with each 0 counted as 1: what contiguous strides reach
    bool empty = false;
    for (int d = 0; d < ndim; d++) {
        int64_t s = sizes[d];
        if (s < 0) return -1;
        if (s == 0) empty = true;
        else if (span > WEFT_MAX_NUMEL / s) return -1;
        else span *= s;
    }
    return empty ? 0 : span;
}

bool weft_contiguous_strides(int ndim, const int64_t *sizes, int64_t *strides) {
    if (weft_shape_numel(ndim, sizes) < 0) { // no stride to give: leave none half-made
        for (int d = 0; d < ndim && d < WEFT_MAX_DIMS; d++) strides[d] = 0;
        return false;
    }
    int64_t st = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = st;
        st *= sizes[d] > 1 ? sizes[d] : 1; // <= WEFT_MAX_NUMEL: checked above
    }
    return true;
}

weft_status weft_shape_check(const char *what, int ndim, const int64_t *sizes) {
    if (ndim < 0 || ndim > WEFT_MAX_DIMS)
        return weft_error(WEFT_ERR_SHAPE, "%s: %d dims (at most %d)", what, ndim, WEFT_MAX_DIMS);
    if (ndim && !sizes) return weft_error(WEFT_ERR_ARG, "%s: NULL sizes", what);
    for (int d = 0; d < ndim; d++)
        if (sizes[d] < 0) return weft_error(WEFT_ERR_SHAPE, "%s: negative size %lld", what, (long long)sizes[d]);
    if (weft_shape_numel(ndim, sizes) < 0) {
        char b[200];
        return weft_error(WEFT_ERR_SHAPE, "%s: shape %s has too many elements (at most %lld, a 0 counted as 1)",
                          what, weft_shape_fmt(ndim, sizes, b, sizeof b), (long long)WEFT_MAX_NUMEL);
    }
    return WEFT_OK;
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
    if ((unsigned)dt >= WEFT_NUM_DTYPES) return weft_error_null(WEFT_ERR_DTYPE, "tensor: bad dtype %d", (int)dt);
    if (weft_shape_check("tensor", ndim, sizes)) return NULL;
    int64_t numel = weft_shape_numel(ndim, sizes);
    size_t nbytes = (size_t)numel * weft_dtype_size(dt); // < 2^63: numel <= WEFT_MAX_NUMEL
    void *data = weft_device_alloc(dev, nbytes);
    if (!data) return NULL;
    weft_tensor *t = tensor_over(ndim, sizes, numel, dt, dev, data, nbytes);
    if (!t) weft_device_free(dev, data, nbytes);
    return t;
}

void weft_tensor_memory_tag(const weft_tensor *t, weft_memory_kind kind) {
    if (t && t->storage && t->storage->owned && t->storage->data)
        weft_memory_tag(t->storage->device, t->storage->data, kind);
}

// Graph autodiff's stand-ins (symbolic mode): shape and dtype, no data (any
// kernel touching one would fault at once; freeing it frees nothing).
weft_tensor *weft_tensor_symbolic(int ndim, const int64_t *sizes, weft_dtype dt, weft_device dev) {
    if ((unsigned)dt >= WEFT_NUM_DTYPES) return weft_error_null(WEFT_ERR_DTYPE, "tensor: bad dtype %d", (int)dt);
    if (weft_shape_check("tensor", ndim, sizes)) return NULL;
    int64_t numel = weft_shape_numel(ndim, sizes);
    return tensor_over(ndim, sizes, numel, dt, dev, NULL, (size_t)numel * weft_dtype_size(dt));
}

weft_status weft_tensor_standin(weft_tensor *t, weft_storage *st, int ndim, const int64_t *sizes, weft_dtype dt) {
    memset(t, 0, sizeof *t);
    if ((unsigned)dt >= WEFT_NUM_DTYPES) return weft_error(WEFT_ERR_DTYPE, "tensor: bad dtype %d", (int)dt);
    weft_status s = weft_shape_check("tensor", ndim, sizes);
    if (s) return s;
    *st = (weft_storage){.refcount = 1, .device = WEFT_DEVICE_CPU};
    t->refcount = 1;
    t->ndim = (int8_t)ndim;
    t->dtype = (uint8_t)dt;
    t->device = WEFT_DEVICE_CPU;
    if (ndim) memcpy(t->sizes, sizes, sizeof(int64_t) * (size_t)ndim);
    weft_contiguous_strides(ndim, sizes, t->strides);
    t->numel = weft_shape_numel(ndim, sizes);
    t->storage = st;
    return WEFT_OK;
}

// [lo, hi]: the first and last element (relative to offset) that a layout
// reaches, for a non-empty shape; false when that overflows.
static bool layout_extent(int ndim, const int64_t *sizes, const int64_t *strides, int64_t *lo, int64_t *hi) {
    *lo = *hi = 0;
    for (int d = 0; d < ndim; d++) {
        if (sizes[d] <= 1) continue;
        int64_t step;
        if (__builtin_mul_overflow(sizes[d] - 1, strides[d], &step)) return false;
        if (__builtin_add_overflow(step < 0 ? *lo : *hi, step, step < 0 ? lo : hi)) return false;
    }
    return true;
}

weft_tensor *weft_tensor_alias(const weft_tensor *base, int ndim, const int64_t *sizes, const int64_t *strides,
                               int64_t offset) {
    // A view never reaches outside its storage, whatever made its layout
    // (an op's infer on a loaded graph's attributes included).
    if (weft_shape_check("view", ndim, sizes)) return NULL;
    int64_t numel = weft_shape_numel(ndim, sizes), lo, hi;
    int64_t cap = (int64_t)(base->storage->nbytes / weft_dtype_size((weft_dtype)base->dtype)); // elements
    if (ndim && !strides) return weft_error_null(WEFT_ERR_ARG, "view: NULL strides");
    // An empty view reads nothing (x[:, 3:] of a (0,5) tensor starts past its zero bytes).
    bool inside = numel == 0 ? offset >= 0 && offset <= WEFT_MAX_NUMEL
                             : offset >= 0 && offset < cap && layout_extent(ndim, sizes, strides, &lo, &hi) &&
                                   lo >= -offset && hi < cap - offset;
    if (!inside) {
        char a[200], b[200];
        return weft_error_null(WEFT_ERR_SHAPE,
                               "view: sizes %s with strides %s at offset %lld reach outside the storage (%lld elements)",
                               weft_shape_fmt(ndim, sizes, a, sizeof a), weft_shape_fmt(ndim, strides, b, sizeof b),
                               (long long)offset, (long long)cap);
    }
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
    t->numel = numel;
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
    if (t->numel == 0) return true; // nothing to lay out (as PyTorch; weft_contiguous_strides' strides for it too)
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

// Float to integer saturating (NaN -> 0, out of range -> the nearest end), as
// a GPU converts: C leaves those cases undefined, and a value read from a file
// must not decide what the program does.
static double sat(double v, double lo, double hi) { return v != v ? 0 : v < lo ? lo : v > hi ? hi : v; }

void weft_store_f64(void *p, weft_dtype dt, int64_t i, double v) {
    switch (dt) {
    case WEFT_F32: ((float *)p)[i] = (float)v; break;
    case WEFT_F64: ((double *)p)[i] = v; break;
    case WEFT_I32: ((int32_t *)p)[i] = (int32_t)sat(v, INT32_MIN, INT32_MAX); break;
    case WEFT_I64: // 2^63 itself is out of range; the largest double below it is in
        ((int64_t *)p)[i] = v >= 0x1p63 ? INT64_MAX : (int64_t)sat(v, -0x1p63, 0x1p63);
        break;
    case WEFT_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case WEFT_U8: ((uint8_t *)p)[i] = (uint8_t)sat(v, 0, 255); break;
    case WEFT_F16: ((uint16_t *)p)[i] = weft_f32_to_f16(weft_f64_to_f32_odd(v)); break;
    case WEFT_BF16: ((uint16_t *)p)[i] = weft_f32_to_bf16(weft_f64_to_f32_odd(v)); break;
    default: break;
    }
}
