// weft/tensor.h — tensors: strided views over reference-counted device storage.
//
// Ownership: every function returning weft_tensor* hands the caller one
// reference; release it with weft_tensor_free(). NULL means failure (see
// weft_last_error()). Functions accept NULL inputs and then fail without
// overwriting the first error, so a chain of calls can be checked once.
#ifndef WEFT_TENSOR_H
#define WEFT_TENSOR_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_tensor weft_tensor;

// WEFT_DIMS(2,3) expands to "2, (const int64_t[]){2,3}": an ndim and a sizes array.
#define WEFT_DIMS(...) \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]) { __VA_ARGS__ }

// ---- lifetime ----
weft_tensor *weft_tensor_ref(weft_tensor *t); // add a reference, returns t
void weft_tensor_free(weft_tensor *t);        // drop a reference (NULL is fine)

// ---- creation (on the default device) ----
weft_tensor *weft_tensor_empty(int ndim, const int64_t *sizes, weft_dtype dt);
weft_tensor *weft_tensor_empty_on(int ndim, const int64_t *sizes, weft_dtype dt, weft_device dev);
weft_tensor *weft_tensor_zeros(int ndim, const int64_t *sizes, weft_dtype dt);
weft_tensor *weft_tensor_ones(int ndim, const int64_t *sizes, weft_dtype dt);
weft_tensor *weft_tensor_full(int ndim, const int64_t *sizes, weft_dtype dt, double value);
weft_tensor *weft_tensor_full_on(int ndim, const int64_t *sizes, weft_dtype dt, double value, weft_device dev);
weft_tensor *weft_tensor_scalar(double value, weft_dtype dt); // 0-d tensor
// start, start+step, ... < end
weft_tensor *weft_tensor_arange(double start, double end, double step, weft_dtype dt);
// Copies n = prod(sizes) elements of dtype dt from host memory.
weft_tensor *weft_tensor_from_data(const void *data, int ndim, const int64_t *sizes, weft_dtype dt);
weft_tensor *weft_tensor_zeros_like(const weft_tensor *t);
weft_tensor *weft_tensor_ones_like(const weft_tensor *t);
weft_tensor *weft_tensor_empty_like(const weft_tensor *t);

// ---- random numbers: counter-based (Philox4x32-10), so a value depends only on
// (seed, offset, element index) — not on thread count or device. ----
typedef struct weft_generator weft_generator;
weft_generator *weft_generator_create(uint64_t seed);
void weft_generator_free(weft_generator *g);
void weft_generator_set_state(weft_generator *g, uint64_t seed, uint64_t offset);
void weft_generator_get_state(const weft_generator *g, uint64_t *seed, uint64_t *offset);
weft_generator *weft_generator_default(void);
void weft_manual_seed(uint64_t seed); // seeds the default generator
// g may be NULL for the default generator.
weft_tensor *weft_tensor_rand(int ndim, const int64_t *sizes, weft_dtype dt, weft_generator *g);  // U[0,1)
weft_tensor *weft_tensor_randn(int ndim, const int64_t *sizes, weft_dtype dt, weft_generator *g); // N(0,1)
weft_tensor *weft_tensor_randint(int ndim, const int64_t *sizes, int64_t low, int64_t high, weft_dtype dt,
                                 weft_generator *g); // [low, high)
// Fill in place: uniform in [lo, hi) / normal(mean, std).
weft_status weft_tensor_uniform_(weft_tensor *t, double lo, double hi, weft_generator *g);
weft_status weft_tensor_normal_(weft_tensor *t, double mean, double std, weft_generator *g);

// ---- metadata ----
int weft_tensor_ndim(const weft_tensor *t);
int64_t weft_tensor_size(const weft_tensor *t, int dim);   // negative dims count from the end
int64_t weft_tensor_stride(const weft_tensor *t, int dim); // in elements
const int64_t *weft_tensor_sizes(const weft_tensor *t);
const int64_t *weft_tensor_strides(const weft_tensor *t);
int64_t weft_tensor_offset(const weft_tensor *t); // in elements, into the storage
int64_t weft_tensor_numel(const weft_tensor *t);
weft_dtype weft_tensor_dtype(const weft_tensor *t);
weft_device weft_tensor_device(const weft_tensor *t);
bool weft_tensor_is_contiguous(const weft_tensor *t);
// True when a and b view the same storage.
bool weft_tensor_shares_storage(const weft_tensor *a, const weft_tensor *b);
// Host pointer to the first element (CPU tensors only; NULL otherwise).
void *weft_tensor_data(const weft_tensor *t);
// Address of the first element on the tensor's own device (a CUDA device
// pointer for a CUDA tensor): for calling a device library directly. NULL
// for a symbolic tensor.
void *weft_tensor_device_ptr(const weft_tensor *t);
// Shape as text, e.g. "(2,3)".
const char *weft_tensor_shape_str(const weft_tensor *t, char *buf, size_t n);

// ---- element access (any dtype, any strides; slow path for tests and printing) ----
weft_status weft_tensor_get(const weft_tensor *t, const int64_t *index, double *out);
weft_status weft_tensor_set(weft_tensor *t, const int64_t *index, double value);
// Value of a one-element tensor (synchronises with the device).
double weft_tensor_item(const weft_tensor *t);
// Copy all elements, in logical (row-major) order, converted to double / float.
weft_status weft_tensor_to_f64(const weft_tensor *t, double *out, int64_t n);
weft_status weft_tensor_to_f32(const weft_tensor *t, float *out, int64_t n);
// Print to stdout (or a FILE* via weft_tensor_fprint in weft/io later).
void weft_tensor_print(const weft_tensor *t, const char *name);

// ---- in-place (not recorded by autograd) ----
weft_status weft_tensor_fill_(weft_tensor *t, double value);
weft_status weft_tensor_zero_(weft_tensor *t);
// dst[...] = src[...]: any strides, broadcasting src, converting dtype, across devices.
weft_status weft_tensor_copy_(weft_tensor *dst, const weft_tensor *src);

// ---- copies and moves ----
weft_tensor *weft_tensor_clone(weft_tensor *t);      // fresh contiguous copy (differentiable)
weft_tensor *weft_tensor_contiguous(weft_tensor *t); // t itself (new ref) if already contiguous
// t on dev: t itself (a new reference) when it is already there, else a
// contiguous copy. Differentiable: the copy's backward moves the gradient
// back to t's device (a model split over two devices trains).
weft_tensor *weft_tensor_to(weft_tensor *t, weft_device dev);
weft_tensor *weft_tensor_detach(weft_tensor *t); // same storage, no autograd history

#ifdef __cplusplus
}
#endif
#endif
