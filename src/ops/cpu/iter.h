// One strided iterator for every elementwise CPU kernel.
//
// Operand 0 is the output; inputs are broadcast to its shape (stride 0 on
// broadcast dims). Dimensions that are contiguous for all operands are merged,
// so a contiguous add is a single flat loop and a transposed one is a 2-d
// loop. The work is split into chunks of the flat index across threads; each
// chunk calls the inner-loop function on rows of the innermost dimension.
#ifndef WEFT_CPU_ITER_H
#define WEFT_CPU_ITER_H

#include <stdint.h>
#include <string.h>

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

// Non-temporal stores for big outputs: a result much larger than the caches
// is written straight to memory instead of first being read into cache (the
// read-for-ownership that a plain store costs), which is a third of the
// traffic of c = a + b. Loops compute a block into a small buffer, then stream it.
#define WEFT_NT_MIN_BYTES ((int64_t)2 << 20)
#define WEFT_NT_BLOCK_BYTES 1024
#if defined(__SSE2__)
#include <emmintrin.h>
static inline void weft_stream_store(void *dst, const void *src) { // WEFT_NT_BLOCK_BYTES, dst 16-aligned
    __m128i *d = (__m128i *)dst;
    const __m128i *s = (const __m128i *)src;
    for (int i = 0; i < WEFT_NT_BLOCK_BYTES / 16; i++) _mm_stream_si128(d + i, _mm_load_si128(s + i));
}
static inline void weft_stream_fence(void) { _mm_sfence(); }
#else
static inline void weft_stream_store(void *dst, const void *src) { memcpy(dst, src, WEFT_NT_BLOCK_BYTES); }
static inline void weft_stream_fence(void) {}
#endif

// Runs `o[i] = EXPR(i)` for i in [0, n) with streaming stores. The loop
// variable is i; the body (last argument) assigns to `out_` (type TO). Each
// block's loop has its own i, never assigned in the body, so it vectorises
// (an i stored to from inside the block kept it scalar).
#define WEFT_NT_LOOP(TO, o, n, ...)                                     \
    do {                                                                \
        enum { BLK_ = WEFT_NT_BLOCK_BYTES / (int)sizeof(TO) };          \
        _Alignas(64) TO buf_[BLK_];                                     \
        int64_t head_ = 0;                                              \
        while (head_ < (n) && ((uintptr_t)((o) + head_) & 15)) head_++; \
        for (int64_t i = 0; i < head_; i++) {                           \
            TO out_;                                                    \
            __VA_ARGS__;                                                \
            (o)[i] = out_;                                              \
        }                                                               \
        int64_t b_ = head_;                                             \
        for (; b_ + BLK_ <= (n); b_ += BLK_) {                          \
            for (int64_t i = b_; i < b_ + BLK_; i++) {                  \
                TO out_;                                                \
                __VA_ARGS__;                                            \
                buf_[i - b_] = out_;                                    \
            }                                                           \
            weft_stream_store((o) + b_, buf_);                          \
        }                                                               \
        weft_stream_fence();                                            \
        for (int64_t i = b_; i < (n); i++) {                            \
            TO out_;                                                    \
            __VA_ARGS__;                                                \
            (o)[i] = out_;                                              \
        }                                                               \
    } while (0)

// Convert/copy src into dst (any strides, broadcasting src, any dtype pair), CPU only.
weft_status weft_cpu_copy(weft_tensor *dst, const weft_tensor *src);

#endif
