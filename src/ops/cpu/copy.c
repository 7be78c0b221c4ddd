// Strided copy with broadcasting and dtype conversion (CPU).
#include <math.h>
#include <string.h>

#include "iter.h"
#include "vmath.h"

typedef struct {
    weft_dtype dt, st;
    int64_t esz;
} copy_ctx;

static void copy_same(char **p, const int64_t *s, int64_t n, const void *vctx) {
    const copy_ctx *c = vctx;
    int64_t esz = c->esz;
    if (s[0] == esz && s[1] == esz) {
        memcpy(p[0], p[1], (size_t)(n * esz));
        return;
    }
    char *d = p[0];
    const char *x = p[1];
    switch (esz) {
    case 1: for (int64_t i = 0; i < n; i++) *(uint8_t *)(d + i * s[0]) = *(const uint8_t *)(x + i * s[1]); break;
    case 2: for (int64_t i = 0; i < n; i++) *(uint16_t *)(d + i * s[0]) = *(const uint16_t *)(x + i * s[1]); break;
    case 4: for (int64_t i = 0; i < n; i++) *(uint32_t *)(d + i * s[0]) = *(const uint32_t *)(x + i * s[1]); break;
    default: for (int64_t i = 0; i < n; i++) *(uint64_t *)(d + i * s[0]) = *(const uint64_t *)(x + i * s[1]); break;
    }
}

static void copy_f32_f64(char **p, const int64_t *s, int64_t n, const void *ctx) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++) *(float *)(p[0] + i * s[0]) = (float)*(const double *)(p[1] + i * s[1]);
}
static void copy_f64_f32(char **p, const int64_t *s, int64_t n, const void *ctx) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++) *(double *)(p[0] + i * s[0]) = *(const float *)(p[1] + i * s[1]);
}
static void copy_f32_f16(char **p, const int64_t *s, int64_t n, const void *ctx) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++)
        *(float *)(p[0] + i * s[0]) = weft_f16_to_f32(*(const uint16_t *)(p[1] + i * s[1]));
}
static void copy_f16_f32(char **p, const int64_t *s, int64_t n, const void *ctx) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++)
        *(uint16_t *)(p[0] + i * s[0]) = weft_f32_to_f16(*(const float *)(p[1] + i * s[1]));
}
// bf16 <-> f32: autocast's casts, one per op input and output. A contiguous
// run takes a loop the compiler vectorises (inline conversions), a strided one
// the plain loop.
WEFT_CLONES static void widen_run(float *restrict d, const uint16_t *restrict x, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = weft_bf16_widen(x[i]);
}
WEFT_CLONES static void round_run(uint16_t *restrict d, const float *restrict x, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = weft_bf16_round(x[i]);
}
static void copy_f32_bf16(char **p, const int64_t *s, int64_t n, const void *ctx) {
    (void)ctx;
    if (s[0] == 4 && s[1] == 2) {
        widen_run((float *)p[0], (const uint16_t *)p[1], n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        *(float *)(p[0] + i * s[0]) = weft_bf16_widen(*(const uint16_t *)(p[1] + i * s[1]));
}
static void copy_bf16_f32(char **p, const int64_t *s, int64_t n, const void *ctx) {
    (void)ctx;
    if (s[0] == 2 && s[1] == 4) {
        round_run((uint16_t *)p[0], (const float *)p[1], n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        *(uint16_t *)(p[0] + i * s[0]) = weft_bf16_round(*(const float *)(p[1] + i * s[1]));
}
static void copy_f16_f64(char **p, const int64_t *s, int64_t n, const void *ctx) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++)
        *(uint16_t *)(p[0] + i * s[0]) = weft_f32_to_f16(weft_f64_to_f32_odd(*(const double *)(p[1] + i * s[1])));
}
static void copy_bf16_f64(char **p, const int64_t *s, int64_t n, const void *ctx) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++)
        *(uint16_t *)(p[0] + i * s[0]) = weft_f32_to_bf16(weft_f64_to_f32_odd(*(const double *)(p[1] + i * s[1])));
}

// Any other pair goes through double (exact for every value of these dtypes
// except i64 beyond 2^53).
static void copy_generic(char **p, const int64_t *s, int64_t n, const void *vctx) {
    const copy_ctx *c = vctx;
    for (int64_t i = 0; i < n; i++) {
        double v = weft_load_f64(p[1] + i * s[1], c->st, 0);
        if (c->dt == WEFT_F16 || c->dt == WEFT_BF16) { // integers into a half format: round once
            float f = weft_f64_to_f32_odd(v);
            *(uint16_t *)(p[0] + i * s[0]) = c->dt == WEFT_F16 ? weft_f32_to_f16(f) : weft_f32_to_bf16(f);
            continue;
        }
        if (c->st == WEFT_I64 && c->dt == WEFT_I32) { // keep integers exact
            *(int32_t *)(p[0] + i * s[0]) = (int32_t) * (const int64_t *)(p[1] + i * s[1]);
            continue;
        }
        if (c->dt == WEFT_I64 && c->st == WEFT_I32) {
            *(int64_t *)(p[0] + i * s[0]) = *(const int32_t *)(p[1] + i * s[1]);
            continue;
        }
        weft_store_f64(p[0] + i * s[0], c->dt, 0, v);
    }
}

weft_status weft_cpu_copy(weft_tensor *dst, const weft_tensor *src) {
    weft_iter it;
    weft_tensor *in = (weft_tensor *)src;
    weft_iter_init(&it, dst, 1, &in);
    copy_ctx c = {(weft_dtype)dst->dtype, (weft_dtype)src->dtype, (int64_t)weft_dtype_size((weft_dtype)dst->dtype)};
    weft_loop_fn fn = copy_generic;
    if (c.dt == c.st) fn = copy_same;
    else if (c.dt == WEFT_F32 && c.st == WEFT_F64) fn = copy_f32_f64;
    else if (c.dt == WEFT_F64 && c.st == WEFT_F32) fn = copy_f64_f32;
    else if (c.dt == WEFT_F32 && c.st == WEFT_F16) fn = copy_f32_f16;
    else if (c.dt == WEFT_F16 && c.st == WEFT_F32) fn = copy_f16_f32;
    else if (c.dt == WEFT_F32 && c.st == WEFT_BF16) fn = copy_f32_bf16;
    else if (c.dt == WEFT_BF16 && c.st == WEFT_F32) fn = copy_bf16_f32;
    else if (c.dt == WEFT_F16 && c.st == WEFT_F64) fn = copy_f16_f64;
    else if (c.dt == WEFT_BF16 && c.st == WEFT_F64) fn = copy_bf16_f64;
    weft_iter_run(&it, fn, &c);
    return WEFT_OK;
}
