// CPU kernels of the elementwise family (unary, scalar, binary, compare, where).
// Each op is a table of inner loops by dtype; the strided iterator (iter.c)
// handles broadcasting, strides and threads.
#include <math.h>

#include "../elementwise.h"
#include "iter.h"
#include "vmath.h"

// Inner loops. `sc` is the op's scalar attribute (pow/add/mul by scalar).
#define UNARY_LOOP(NAME, T, EXPR)                                                     \
    static void NAME(char **p, const int64_t *s, int64_t n, const void *ctx) {        \
        const double sc = *(const double *)ctx;                                       \
        (void)sc;                                                                     \
        if (s[0] == sizeof(T) && s[1] == sizeof(T)) {                                 \
            T *restrict o = (T *)p[0];                                                \
            const T *restrict x = (const T *)p[1];                                    \
            if (n * (int64_t)sizeof(T) >= WEFT_NT_MIN_BYTES) {                        \
                WEFT_NT_LOOP(T, o, n, { T v = x[i]; out_ = (T)(EXPR); });             \
                return;                                                               \
            }                                                                         \
            for (int64_t i = 0; i < n; i++) {                                         \
                T v = x[i];                                                           \
                o[i] = (T)(EXPR);                                                     \
            }                                                                         \
        } else {                                                                      \
            for (int64_t i = 0; i < n; i++) {                                         \
                T v = *(const T *)(p[1] + i * s[1]);                                  \
                *(T *)(p[0] + i * s[0]) = (T)(EXPR);                                  \
            }                                                                         \
        }                                                                             \
    }

// The same loop built for several ISAs (for loops worth vectorising wider).
#define UNARY_LOOP_CLONED(NAME, T, EXPR) WEFT_CLONES UNARY_LOOP(NAME, T, EXPR)

#define BINARY_LOOP(NAME, T, TO, EXPR)                                                \
    static void NAME(char **p, const int64_t *s, int64_t n, const void *ctx) {        \
        (void)ctx;                                                                    \
        if (s[0] == sizeof(TO) && s[1] == sizeof(T) && s[2] == sizeof(T)) {           \
            TO *restrict o = (TO *)p[0];                                              \
            const T *restrict x = (const T *)p[1], *restrict y = (const T *)p[2];     \
            if (n * (int64_t)sizeof(TO) >= WEFT_NT_MIN_BYTES) {                       \
                WEFT_NT_LOOP(TO, o, n, { T a = x[i], b = y[i]; out_ = (TO)(EXPR); }); \
                return;                                                               \
            }                                                                         \
            for (int64_t i = 0; i < n; i++) {                                         \
                T a = x[i], b = y[i];                                                 \
                o[i] = (TO)(EXPR);                                                    \
            }                                                                         \
        } else if (s[0] == sizeof(TO) && s[1] == sizeof(T) && s[2] == 0) {           \
            TO *restrict o = (TO *)p[0];                                              \
            const T *restrict x = (const T *)p[1];                                    \
            const T b = *(const T *)p[2];                                             \
            for (int64_t i = 0; i < n; i++) {                                         \
                T a = x[i];                                                           \
                o[i] = (TO)(EXPR);                                                    \
            }                                                                         \
        } else {                                                                      \
            for (int64_t i = 0; i < n; i++) {                                         \
                T a = *(const T *)(p[1] + i * s[1]), b = *(const T *)(p[2] + i * s[2]); \
                *(TO *)(p[0] + i * s[0]) = (TO)(EXPR);                                \
            }                                                                         \
        }                                                                             \
    }

static inline double gelu_d(double x) { return 0.5 * x * (1.0 + erf(x * M_SQRT1_2)); }
// f32 GELU uses the vectorisable weft_verf_f32/weft_verf_exp_f32 (libm's erff kept it scalar: a
// fifth of a transformer step); f64 keeps libm for gradient checks.
static inline float gelu_f(float x) { return 0.5f * x * (1.0f + weft_verf_f32(x * (float)M_SQRT1_2)); }
// d/dx gelu = Phi(x) + x phi(x)
static inline double gelu_grad_d(double x) {
    return 0.5 * (1.0 + erf(x * M_SQRT1_2)) + x * exp(-0.5 * x * x) * 0.3989422804014327;
}
// exp(-x^2/2) is the exp that erf(x/sqrt 2) computes: one exp per element, not two.
static inline float gelu_grad_f(float x) {
    float e, r = weft_verf_exp_f32(x * (float)M_SQRT1_2, &e);
    return 0.5f * (1.0f + r) + x * e * 0.3989422804014327f;
}

// GELU, tanh approximation (PyTorch's approximate='tanh', GPT-2's): 0.5 x (1 + tanh(u)), u = k (x + a x^3),
// k = sqrt(2/pi), a = 0.044715. In f32 as x sigmoid(2u) (the same function: one vectorisable exp, no
// cancellation near 0); its derivative s + 2 x s (1 - s) u', s = sigmoid(2u), u' = k (1 + 3 a x^2). The
// sigmoid comes from e = exp(-2|u|) <= 1 (exactly 0 far out: weft_vexp_f32 clamps large arguments, which
// exp(+2|u|) would need), r = 1 / (1 + e): s = r for u >= 0, e r below, and s (1 - s) = e r^2 either way.
// f64 keeps libm's tanh for gradient checks.
#define GELU_K 0.7978845608028654
#define GELU_A 0.044715
static inline double gelu_tanh_d(double x) { return 0.5 * x * (1.0 + tanh(GELU_K * (x + GELU_A * x * x * x))); }
static inline double gelu_tanh_grad_d(double x) {
    double t = tanh(GELU_K * (x + GELU_A * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_A * x * x);
}
static inline float gelu_tanh_f(float x) {
    float u = (float)GELU_K * (x + (float)GELU_A * x * x * x), au = u < 0 ? -u : u;
    float e = weft_vexp_f32(-2.0f * au), r = 1.0f / (1.0f + e);
    return x * (u >= 0 ? r : e * r);
}
static inline float gelu_tanh_grad_f(float x) {
    float x2 = x * x, u = (float)GELU_K * (x + (float)GELU_A * x2 * x), au = u < 0 ? -u : u;
    float e = weft_vexp_f32(-2.0f * au), r = 1.0f / (1.0f + e), s = u >= 0 ? r : e * r;
    return s + 2.0f * x * (e * r * r) * (float)GELU_K * (1.0f + 3.0f * (float)GELU_A * x2);
}

// ---- unary ----
#define UNARY_FLOAT(op, EF, ED) UNARY_LOOP(op##_f32, float, EF) UNARY_LOOP(op##_f64, double, ED)
#define UNARY_NUM(op, EF, ED, EI)                                                     \
    UNARY_FLOAT(op, EF, ED) UNARY_LOOP(op##_i32, int32_t, EI) UNARY_LOOP(op##_i64, int64_t, EI)

UNARY_NUM(neg, -v, -v, -v)
UNARY_NUM(abs, fabsf(v), fabs(v), v < 0 ? -v : v)
UNARY_NUM(sign, (v > 0) - (v < 0), (v > 0) - (v < 0), (v > 0) - (v < 0))
UNARY_FLOAT(exp, expf(v), exp(v))
UNARY_FLOAT(log, logf(v), log(v))
UNARY_FLOAT(sqrt, sqrtf(v), sqrt(v))
UNARY_FLOAT(rsqrt, 1.0f / sqrtf(v), 1.0 / sqrt(v))
UNARY_FLOAT(sin, sinf(v), sin(v))
UNARY_FLOAT(cos, cosf(v), cos(v))
UNARY_FLOAT(tanh, tanhf(v), tanh(v))
UNARY_FLOAT(sigmoid, 1.0f / (1.0f + expf(-v)), 1.0 / (1.0 + exp(-v)))
UNARY_NUM(relu, v > 0 ? v : 0, v > 0 ? v : 0, v > 0 ? v : 0)
UNARY_LOOP_CLONED(gelu_f32, float, gelu_f(v))
UNARY_LOOP(gelu_f64, double, gelu_d(v))
UNARY_LOOP_CLONED(gelu_grad_f32, float, gelu_grad_f(v))
UNARY_LOOP(gelu_grad_f64, double, gelu_grad_d(v))
UNARY_LOOP_CLONED(gelu_tanh_f32, float, gelu_tanh_f(v))
UNARY_LOOP(gelu_tanh_f64, double, gelu_tanh_d(v))
UNARY_FLOAT(silu, v / (1.0f + expf(-v)), v / (1.0 + exp(-v)))
// erf itself in f32 through libm's erff, not GELU's weft_verf_f32: the polynomial's f32 evaluation is off by up to
// 6.5e-7 (near x = 0.04) and loses every digit near 0 (1 - p e cancels: it gives erf(1e-8) = 0), while glibc's
// erff stays within 5.4e-8 of erf and keeps erf(x) ~ 2x/sqrt(pi) for tiny x (ONNX's Erf, PyTorch's erf).
UNARY_FLOAT(erf, erff(v), erf(v))
UNARY_FLOAT(pow_scalar, powf(v, (float)sc), pow(v, sc))
// Rounding to integers (floats; round: half to even, rint in the default rounding mode, as torch.round and ONNX's Round).
UNARY_FLOAT(floor, floorf(v), floor(v))
UNARY_FLOAT(ceil, ceilf(v), ceil(v))
UNARY_FLOAT(round, rintf(v), rint(v))
UNARY_FLOAT(trunc, truncf(v), trunc(v))
UNARY_FLOAT(asin, asinf(v), asin(v))
UNARY_FLOAT(acos, acosf(v), acos(v))
UNARY_FLOAT(atan, atanf(v), atan(v))
UNARY_NUM(add_scalar, v + (float)sc, v + sc, v + (int64_t)sc)
UNARY_NUM(mul_scalar, v * (float)sc, v * sc, v * (int64_t)sc)

// ---- binary ----
// FC prefixes the float loops: empty, or WEFT_CLONES (built per ISA) for the
// arithmetic of every training step (residual and bias adds, gradient sums, products).
#define BINARY_NUM_FC(op, E, FC)                                                                  \
    FC BINARY_LOOP(op##_f32, float, float, E) FC BINARY_LOOP(op##_f64, double, double, E)          \
    BINARY_LOOP(op##_i32, int32_t, int32_t, E) BINARY_LOOP(op##_i64, int64_t, int64_t, E)
#define BINARY_NUM(op, E) BINARY_NUM_FC(op, E, )
#define BINARY_NUM_CLONED(op, E) BINARY_NUM_FC(op, E, WEFT_CLONES)
#define BINARY_CMP(op, E)                                                             \
    BINARY_LOOP(op##_f32, float, uint8_t, E) BINARY_LOOP(op##_f64, double, uint8_t, E) \
    BINARY_LOOP(op##_i32, int32_t, uint8_t, E) BINARY_LOOP(op##_i64, int64_t, uint8_t, E) \
    BINARY_LOOP(op##_u8, uint8_t, uint8_t, E)

BINARY_NUM_CLONED(add, a + b)
BINARY_NUM_CLONED(sub, a - b)
BINARY_NUM_CLONED(mul, a * b)
BINARY_LOOP(div_f32, float, float, a / b)
BINARY_LOOP(div_f64, double, double, a / b)
BINARY_LOOP(div_i32, int32_t, int32_t, b ? a / b : 0)
BINARY_LOOP(div_i64, int64_t, int64_t, b ? a / b : 0)
// fmod: the remainder with the dividend's sign (C's fmod, torch.fmod, ONNX's Mod with fmod = 1); remainder: with the
// divisor's sign (Python's %, torch.remainder, ONNX's Mod on integers). Integers: 0 for a divisor of 0 (as div), and
// for -1 (where INT_MIN % -1 would trap).
static inline float rem_f(float a, float b) {
    float r = fmodf(a, b);
    return r != 0 && (r < 0) != (b < 0) ? r + b : r;
}
static inline double rem_d(double a, double b) {
    double r = fmod(a, b);
    return r != 0 && (r < 0) != (b < 0) ? r + b : r;
}
#define IMOD(a, b) ((b) == 0 || (b) == -1 ? 0 : (a) % (b))
#define IREM(a, b) (IMOD(a, b) != 0 && (IMOD(a, b) < 0) != ((b) < 0) ? IMOD(a, b) + (b) : IMOD(a, b))
BINARY_LOOP(fmod_f32, float, float, fmodf(a, b))
BINARY_LOOP(fmod_f64, double, double, fmod(a, b))
BINARY_LOOP(fmod_i32, int32_t, int32_t, IMOD(a, b))
BINARY_LOOP(fmod_i64, int64_t, int64_t, IMOD(a, b))
BINARY_LOOP(remainder_f32, float, float, rem_f(a, b))
BINARY_LOOP(remainder_f64, double, double, rem_d(a, b))
BINARY_LOOP(remainder_i32, int32_t, int32_t, IREM(a, b))
BINARY_LOOP(remainder_i64, int64_t, int64_t, IREM(a, b))
BINARY_LOOP(pow_f32, float, float, powf(a, b))
BINARY_LOOP(pow_f64, double, double, pow(a, b))
BINARY_NUM(maximum, (a > b || a != a) ? a : b)
BINARY_NUM(minimum, (a < b || a != a) ? a : b)
BINARY_CMP(eq, a == b)
BINARY_CMP(ne, a != b)
BINARY_CMP(lt, a < b)
BINARY_CMP(le, a <= b)
BINARY_CMP(gt, a > b)
BINARY_CMP(ge, a >= b)
BINARY_NUM_CLONED(relu_bw, b > 0 ? a : 0) // a = gradient, b = relu's input
WEFT_CLONES BINARY_LOOP(gelu_bw_f32, float, float, a * gelu_grad_f(b)) // a = gradient, b = gelu's input
BINARY_LOOP(gelu_bw_f64, double, double, a * gelu_grad_d(b))
WEFT_CLONES BINARY_LOOP(gelu_tanh_bw_f32, float, float, a * gelu_tanh_grad_f(b))
BINARY_LOOP(gelu_tanh_bw_f64, double, double, a * gelu_tanh_grad_d(b))

// where(cond, a, b): operands out, cond(u8), a, b
#define WHERE_LOOP(NAME, T)                                                           \
    static void NAME(char **p, const int64_t *s, int64_t n, const void *ctx) {        \
        (void)ctx;                                                                    \
        for (int64_t i = 0; i < n; i++) {                                             \
            uint8_t c = *(const uint8_t *)(p[1] + i * s[1]);                          \
            *(T *)(p[0] + i * s[0]) = c ? *(const T *)(p[2] + i * s[2]) : *(const T *)(p[3] + i * s[3]); \
        }                                                                             \
    }
WHERE_LOOP(where_1, uint8_t)
WHERE_LOOP(where_2, uint16_t)
WHERE_LOOP(where_4, uint32_t)
WHERE_LOOP(where_8, uint64_t)

// Loop tables indexed by dtype (NULL: unsupported; the dtype masks in the op
// entries keep the dispatcher from getting here).
#define T_FLOAT(op) [WEFT_F32] = op##_f32, [WEFT_F64] = op##_f64
#define T_NUM(op) T_FLOAT(op), [WEFT_I32] = op##_i32, [WEFT_I64] = op##_i64
#define T_CMP(op) T_NUM(op), [WEFT_U8] = op##_u8, [WEFT_BOOL] = op##_u8

static const weft_loop_fn k_loops[WEFT_EW_COUNT][WEFT_NUM_DTYPES] = {
    [WEFT_EW_NEG] = {T_NUM(neg)},
    [WEFT_EW_ABS] = {T_NUM(abs)},
    [WEFT_EW_SIGN] = {T_NUM(sign)},
    [WEFT_EW_EXP] = {T_FLOAT(exp)},
    [WEFT_EW_LOG] = {T_FLOAT(log)},
    [WEFT_EW_SQRT] = {T_FLOAT(sqrt)},
    [WEFT_EW_RSQRT] = {T_FLOAT(rsqrt)},
    [WEFT_EW_SIN] = {T_FLOAT(sin)},
    [WEFT_EW_COS] = {T_FLOAT(cos)},
    [WEFT_EW_TANH] = {T_FLOAT(tanh)},
    [WEFT_EW_SIGMOID] = {T_FLOAT(sigmoid)},
    [WEFT_EW_RELU] = {T_NUM(relu)},
    [WEFT_EW_GELU] = {T_FLOAT(gelu)},
    [WEFT_EW_GELU_GRAD] = {T_FLOAT(gelu_grad)},
    [WEFT_EW_SILU] = {T_FLOAT(silu)},
    [WEFT_EW_POW_SCALAR] = {T_FLOAT(pow_scalar)},
    [WEFT_EW_ADD_SCALAR] = {T_NUM(add_scalar)},
    [WEFT_EW_MUL_SCALAR] = {T_NUM(mul_scalar)},
    [WEFT_EW_ADD] = {T_NUM(add)},
    [WEFT_EW_SUB] = {T_NUM(sub)},
    [WEFT_EW_MUL] = {T_NUM(mul)},
    [WEFT_EW_DIV] = {T_NUM(div)},
    [WEFT_EW_POW] = {T_FLOAT(pow)},
    [WEFT_EW_MAXIMUM] = {T_NUM(maximum)},
    [WEFT_EW_MINIMUM] = {T_NUM(minimum)},
    [WEFT_EW_EQ] = {T_CMP(eq)},
    [WEFT_EW_NE] = {T_CMP(ne)},
    [WEFT_EW_LT] = {T_CMP(lt)},
    [WEFT_EW_LE] = {T_CMP(le)},
    [WEFT_EW_GT] = {T_CMP(gt)},
    [WEFT_EW_GE] = {T_CMP(ge)},
    [WEFT_EW_RELU_BW] = {T_NUM(relu_bw)},
    [WEFT_EW_GELU_BW] = {T_FLOAT(gelu_bw)},
    [WEFT_EW_GELU_TANH] = {T_FLOAT(gelu_tanh)},
    [WEFT_EW_GELU_TANH_BW] = {T_FLOAT(gelu_tanh_bw)},
    [WEFT_EW_ERF] = {T_FLOAT(erf)},
    [WEFT_EW_FLOOR] = {T_FLOAT(floor)},
    [WEFT_EW_CEIL] = {T_FLOAT(ceil)},
    [WEFT_EW_ROUND] = {T_FLOAT(round)},
    [WEFT_EW_TRUNC] = {T_FLOAT(trunc)},
    [WEFT_EW_FMOD] = {T_NUM(fmod)},
    [WEFT_EW_REMAINDER] = {T_NUM(remainder)},
    [WEFT_EW_ASIN] = {T_FLOAT(asin)},
    [WEFT_EW_ACOS] = {T_FLOAT(acos)},
    [WEFT_EW_ATAN] = {T_FLOAT(atan)},
};

// One kernel for the whole family; the entry's variant says which op (WEFT_EW_*).
weft_status weft_cpu_elementwise(const weft_op_args *a) {
    int which = a->op->variant;
    weft_dtype dt = (weft_dtype)a->in[0]->dtype;
    if (weft_dtype_is_half(dt)) return weft_kernel_widened(a, weft_cpu_elementwise); // f32 math, rounded once
    weft_loop_fn fn = k_loops[which][dt];
    if (!fn)
        return weft_error(WEFT_ERR_UNSUPPORTED, "%s: no cpu kernel for dtype %s", a->op->name, weft_dtype_name(dt));
    weft_iter it;
    weft_iter_init(&it, a->out[0], a->n_in, a->in);
    double sc = a->attrs->f[0];
    // Tiny tensors: skip the thread machinery entirely.
    if (it.numel <= 4096) weft_iter_run_range(&it, 0, it.numel, fn, &sc);
    else weft_iter_run(&it, fn, &sc);
    return WEFT_OK;
}

// Fusion reuses the kernels' own loops, so a fused group computes bit-identical results.
weft_ew_loop_fn weft_cpu_ew_loop(int variant, weft_dtype dt) {
    if (variant < 0 || variant >= WEFT_EW_COUNT || (unsigned)dt >= WEFT_NUM_DTYPES) return NULL;
    return k_loops[variant][dt];
}

weft_status weft_cpu_where(const weft_op_args *a) {
    static const weft_loop_fn by_size[9] = {[1] = where_1, [2] = where_2, [4] = where_4, [8] = where_8};
    weft_iter it;
    weft_iter_init(&it, a->out[0], 3, a->in);
    weft_iter_run(&it, by_size[weft_dtype_size((weft_dtype)a->out[0]->dtype)], NULL);
    return WEFT_OK;
}

weft_status weft_cpu_cast(const weft_op_args *a) { return weft_cpu_copy(a->out[0], a->in[0]); }
