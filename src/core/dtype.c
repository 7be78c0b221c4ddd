// dtype sizes and names; f16/bf16 conversions (storage formats on the CPU).
#include <math.h>
#include <string.h>

#include "core_impl.h"

static const size_t k_size[WEFT_NUM_DTYPES] = {4, 8, 4, 8, 1, 1, 2, 2};
static const char *const k_name[WEFT_NUM_DTYPES] = {"f32", "f64", "i32", "i64", "bool", "u8", "f16", "bf16"};

size_t weft_dtype_size(weft_dtype dt) { return (unsigned)dt < WEFT_NUM_DTYPES ? k_size[dt] : 0; }
const char *weft_dtype_name(weft_dtype dt) { return (unsigned)dt < WEFT_NUM_DTYPES ? k_name[dt] : "?"; }
bool weft_dtype_is_float(weft_dtype dt) {
    return dt == WEFT_F32 || dt == WEFT_F64 || dt == WEFT_F16 || dt == WEFT_BF16;
}

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t weft_f32_to_bf16(float f) { return weft_bf16_round(f); }
float weft_bf16_to_f32(uint16_t h) { return weft_bf16_widen(h); }

uint16_t weft_f32_to_f16(float f) {
    uint32_t u = f2u(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0)); // inf/nan
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); // overflow -> inf (65520 rounds up)
    if (a < 0x38800000u) { // subnormal half (or zero)
        if (a < 0x33000000u) return (uint16_t)sign; // below half of the smallest subnormal
        uint32_t mant = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23); // value = r * 2^-24
        uint32_t r = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((a >> 13) - (112u << 10)); // rebias exponent 127 -> 15
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

float weft_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ffu;
    if (e == 0) {
        if (m == 0) return u2f(sign);
        float v = (float)m * (1.0f / 16777216.0f); // m * 2^-24
        return sign ? -v : v;
    }
    if (e == 31) return u2f(sign | 0x7f800000u | (m << 13));
    return u2f(sign | ((e + 112) << 23) | (m << 13));
}

// double -> float rounded to odd: inexact results get their last mantissa bit
// set. Rounding that float once more to f16/bf16 (nearest even) then equals
// rounding the double directly, because float keeps >= 2 extra bits; plain
// (float)d followed by a second rounding can round twice (1 + 2^-11 + 2^-40
// would land on the f16 tie and go down to 1.0).
float weft_f64_to_f32_odd(double d) {
    float f = (float)d;
    if ((double)f == d || d != d) return f;
    uint32_t u;
    memcpy(&u, &f, 4);
    // the truncated (toward zero) value is f, or f's neighbour toward zero
    if (fabs((double)f) > fabs(d)) u -= 1;
    u |= 1;
    memcpy(&f, &u, 4);
    return f;
}
