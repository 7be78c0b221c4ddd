// The tensor and storage structs, shared by the modules inside weft.
#ifndef WEFT_TENSOR_IMPL_H
#define WEFT_TENSOR_IMPL_H

#include <weft/autograd.h>
#include <weft/device.h>
#include <weft/tensor.h>

#include "../core/core_impl.h"

typedef struct weft_storage {
    int32_t refcount; // atomic
    weft_device device;
    void *data; // NULL for a symbolic tensor (graph mode) or zero bytes
    size_t nbytes;
    bool owned; // false: data belongs to someone else (never freed)
} weft_storage;

struct weft_node;
typedef struct weft_hook {
    weft_grad_hook_fn fn;
    void *user;
    int id;
} weft_hook;

struct weft_tensor {
    int32_t refcount; // atomic
    int8_t ndim;
    uint8_t dtype;
    bool requires_grad; // for leaves: set by the user; for others: has a grad_fn
    weft_device device;
    int64_t numel;
    int64_t offset; // elements
    int64_t sizes[WEFT_MAX_DIMS];
    int64_t strides[WEFT_MAX_DIMS]; // elements
    weft_storage *storage;
    // autograd
    weft_tensor *grad;         // accumulated gradient (leaves)
    struct weft_node *grad_fn; // producer, NULL for leaves
    int32_t output_nr;         // which output of grad_fn this is
    int32_t bw_pending;        // engine scratch: gradient contributions still to arrive
    weft_hook *hooks;
    int n_hooks, next_hook_id;
};

// Element pointer of the first element (CPU meaning: host address).
static inline char *weft_tensor_ptr(const weft_tensor *t) {
    return (char *)t->storage->data + t->offset * (int64_t)weft_dtype_size((weft_dtype)t->dtype);
}
#define WEFT_PTR(T, t) ((T *)weft_tensor_ptr(t))

// The most elements a shape may span (its sizes' product with each 0 counted
// as 1, which is what contiguous strides reach). Times the largest element
// size it leaves int64 room for byte counts and offsets, so code that works
// with checked shapes cannot overflow. Every tensor and graph value is held
// to it (weft_shape_check); parsers get the check by making tensors.
#define WEFT_MAX_NUMEL (INT64_MAX / 16)

// Shape checks, all in tensor.c. weft_shape_numel: the element count, or -1
// for a bad ndim, a negative size or a span past WEFT_MAX_NUMEL.
// weft_contiguous_strides: row-major strides; false (strides 0) for such a
// shape. weft_shape_check: the same as an error "WHAT: ..." for the caller.
int64_t weft_shape_numel(int ndim, const int64_t *sizes);
bool weft_contiguous_strides(int ndim, const int64_t *sizes, int64_t *strides);
weft_status weft_shape_check(const char *what, int ndim, const int64_t *sizes);

// Allocate a new contiguous tensor (storage from the device allocator).
weft_tensor *weft_tensor_new(int ndim, const int64_t *sizes, weft_dtype dt, weft_device dev);
// A data-less stand-in of this shape and dtype (graph autodiff's symbolic mode).
weft_tensor *weft_tensor_symbolic(int ndim, const int64_t *sizes, weft_dtype dt, weft_device dev);
// Count t's memory as kind in its device's statistics (weft_memory_tag), when
// t owns it (weft_tensor_new's memory; views share their base's block).
void weft_tensor_memory_tag(const weft_tensor *t, weft_memory_kind kind);
// A metadata-only tensor in caller memory (contiguous, no data, CPU) over the
// storage stand-in st, which the caller also provides: graph building runs an
// op's infer on these. Nothing to free. Fails on a bad shape or dtype.
weft_status weft_tensor_standin(weft_tensor *t, weft_storage *st, int ndim, const int64_t *sizes, weft_dtype dt);
// A new tensor struct viewing `base`'s storage with the given layout; NULL +
// error when the layout reaches outside the storage.
weft_tensor *weft_tensor_alias(const weft_tensor *base, int ndim, const int64_t *sizes, const int64_t *strides,
                               int64_t offset);
bool weft_shape_equal(int na, const int64_t *a, int nb, const int64_t *b);
// Format "(2,3)" into buf.
const char *weft_shape_fmt(int ndim, const int64_t *sizes, char *buf, size_t n);
// Normalise a possibly negative axis for a tensor of ndim dims; -1 + error when out of range.
int weft_axis(const char *op, int axis, int ndim);

// Read/write element i (in logical order of a contiguous layout) of a host buffer as double.
double weft_load_f64(const void *p, weft_dtype dt, int64_t i);
void weft_store_f64(void *p, weft_dtype dt, int64_t i, double v);

// dst = src within one device of type t (any strides, broadcast, dtype
// conversion): what weft_tensor_copy_ runs when both tensors are on one
// device. The CPU's is built in; an accelerator backend registers its own
// when it finds a device (the tensor layer calls no backend by name).
typedef weft_status (*weft_copy_fn)(weft_tensor *dst, const weft_tensor *src);
void weft_tensor_copy_register(weft_device_type t, weft_copy_fn fn);
// t on dev (t itself, a new reference, when already there), recording no
// autograd node: the tensor layer's own moves. The public weft_tensor_to
// (src/autograd/function.c) is this plus a node that moves the gradient back.
weft_tensor *weft_tensor_to_raw(weft_tensor *t, weft_device dev);

#ifdef WEFT_HAVE_CUDA
// dst = src on one CUDA device (any strides, broadcast, dtype conversion): src/ops/cuda/copy.c.
weft_status weft_cuda_copy(weft_tensor *dst, const weft_tensor *src);
#endif

// Philox4x32-10: 4 random 32-bit words for (key, counter).
void weft_philox(uint64_t key, uint64_t counter_hi, uint64_t counter_lo, uint32_t out[4]);
// Reserve n counter values from a generator (NULL: default); returns (seed, start offset).
void weft_generator_reserve(weft_generator *g, uint64_t n, uint64_t *seed, uint64_t *offset);

#endif
