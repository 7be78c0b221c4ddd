// Vectorisable float math shared by CPU kernels: no libm calls in the loop,
// so the compiler can vectorise it; WEFT_CLONES builds a loop for AVX-512,
// AVX2 and baseline and picks one at load time.
#ifndef WEFT_CPU_VMATH_H
#define WEFT_CPU_VMATH_H

#include <stdint.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define WEFT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define WEFT_CLONES
#endif

// exp(x) = 2^n exp(r), n = round(x log2 e), |r| <= ln2/2, Cephes' polynomial for
// exp(r). Inputs below -87.3 give exactly 0 (so -inf masks stay exact zeros);
// inputs above 88 are clamped (callers pass x - max <= 0). NaN stays NaN.
// (The body is a macro so that generated kernels (src/kgen) compile the same function from its text.)
#define WEFT_VEXP_F32_BODY \
{ \
    const float lo = -87.33654f, hi = 88.0f; \
    float xc = x < lo ? lo : x; \
    xc = xc > hi ? hi : xc; \
    float j = xc * 1.44269504088896341f + 12582912.0f; /* 1.5*2^23 rounds to an integer in j's low bits */ \
    float n = j - 12582912.0f; \
    float r = xc - n * 0.693359375f; \
    r = r - n * -2.12194440e-4f; \
    float p = 1.9875691500E-4f; \
    p = p * r + 1.3981999507E-3f; \
    p = p * r + 8.3334519073E-3f; \
    p = p * r + 4.1665795894E-2f; \
    p = p * r + 1.6666665459E-1f; \
    p = p * r + 5.0000001201E-1f; \
    p = p * r * r + r + 1.0f; \
    union { \
        float f; \
        uint32_t i; \
    } u = {j}, s; \
    s.i = (u.i - 0x4B400000u + 127u) << 23; /* 2^n from the integer held in j */ \
    float e = p * s.f; \
    return x < lo ? 0.0f : e; \
}
static inline float weft_vexp_f32(float x) WEFT_VEXP_F32_BODY

// erf for f32: Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7 in exact
// arithmetic; evaluated in f32 up to about 6.2e-7, at small |x| where the
// 1 - p e cancels: a few ulps of 1), odd symmetry; uses exp_f32 on
// -x^2 <= 0, which it also hands back in *e (GELU's gradient needs
// exp(-x^2) of the same argument).
static inline float weft_verf_exp_f32(float x, float *e) {
    float a = x < 0 ? -x : x;
    float t = 1.0f / (1.0f + 0.3275911f * a);
    float p = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    *e = weft_vexp_f32(-a * a);
    float r = 1.0f - p * *e;
    return x < 0 ? -r : r;
}
static inline float weft_verf_f32(float x) {
    float e;
    return weft_verf_exp_f32(x, &e);
}

#endif
