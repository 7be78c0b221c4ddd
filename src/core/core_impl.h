// Internal helpers shared by every module: error reporting, threads, misc.
#ifndef WEFT_CORE_IMPL_H
#define WEFT_CORE_IMPL_H

#include <string.h>
#include <time.h>

#include <weft/core.h>

#if defined(__GNUC__)
#define WEFT_LIKELY(x) __builtin_expect(!!(x), 1)
#define WEFT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define WEFT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define WEFT_LIKELY(x) (x)
#define WEFT_UNLIKELY(x) (x)
#define WEFT_PRINTF(a, b)
#endif

// Record an error for weft_last_error(); returns s so callers can `return weft_error(...)`.
weft_status weft_error(weft_status s, const char *fmt, ...) WEFT_PRINTF(2, 3);
// Like weft_error but returns NULL (for constructors).
void *weft_error_null(weft_status s, const char *fmt, ...) WEFT_PRINTF(2, 3);
// Keeps the first error when a NULL input propagates through a chain of calls.
void *weft_error_null_input(const char *op);

// double -> float rounded to odd, so a second rounding to f16/bf16 equals one
// direct rounding from double (no double rounding).
float weft_f64_to_f32_odd(double d);

// bf16 <-> f32 inline, for loops the compiler vectorises (weft_f32_to_bf16 /
// weft_bf16_to_f32 are these, out of line): round to nearest even, NaN kept quiet.
static inline uint16_t weft_bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1)) >> 16, q = (u >> 16) | 0x40;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}
static inline float weft_bf16_widen(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// Seconds on the monotonic clock (for the measured choices: GEMM and conv libraries, layouts, tuning).
static inline double weft_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Lazy one-time runtime setup (threads from WEFT_NUM_THREADS, BLAS threads).
void weft_runtime_init(void);

// Elements per thread below which kernels stay single-threaded.
#define WEFT_PAR_GRAIN 32768

#endif
