// One strided iterator for every elementwise CPU kernel.
//
// Operand 0 is the output; inputs are broadcast to its shape (stride 0 on
// broadcast dims). Dimensions that are contiguous for all operands are merged,
// so a contiguous add is a single flat loop and a transposed one is a 2-d
// loop. The work is split into chunks of the flat index across threads; each
// chunk calls the inner-loop function on rows of the innermost dimension.
#ifndef WEFT_CPU_ITER_H
#define WEFT_CPU_ITER_H

#include "../op.h"

#define WEFT_ITER_MAX_OPS 4

typedef struct weft_iter {
    int nops;
    int ndim;                                         // >= 1 after coalescing
    int64_t sizes[WEFT_MAX_DIMS];                     // innermost last
    int64_t strides[WEFT_ITER_MAX_OPS][WEFT_MAX_DIMS]; // bytes
    char *base[WEFT_ITER_MAX_OPS];
    int64_t numel;
} weft_iter;

// Inner loop over n elements: p[k] points at operand k, s[k] is its byte stride.
typedef void (*weft_loop_fn)(char **p, const int64_t *s, int64_t n, const void *ctx);

// Build an iterator for out = f(ins...). Inputs must broadcast to out's shape.
void weft_iter_init(weft_iter *it, weft_tensor *out, int n_in, weft_tensor *const *in);
// Run fn over all elements (multithreaded when large).
void weft_iter_run(const weft_iter *it, weft_loop_fn fn, const void *ctx);
// Same but never splits across threads (for kernels that keep state, e.g. RNG offsets).
void weft_iter_run_serial(const weft_iter *it, weft_loop_fn fn, const void *ctx);
// Run fn over flat elements [start, end).
void weft_iter_run_range(const weft_iter *it, int64_t start, int64_t end, weft_loop_fn fn, const void *ctx);

// True when every operand's inner stride equals its element size (a plain array loop).
#define WEFT_LOOP_CONTIG(s, nops, esz) weft_loop_contig(s, nops, esz)
static inline bool weft_loop_contig(const int64_t *s, int nops, int64_t esz) {
    for (int k = 0; k < nops; k++)
        if (s[k] != esz) return false;
    return true;
}

// Convert/copy src into dst (any strides, broadcasting src, any dtype pair), CPU only.
weft_status weft_cpu_copy(weft_tensor *dst, const weft_tensor *src);

#endif
