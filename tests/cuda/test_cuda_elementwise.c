// The elementwise family and slice_backward on CUDA against the CPU: every
// unary, scalar, binary and comparison op, where, in f32 / f64 (forward and
// input gradients) and i32 / i64 (and u8 / bool for comparisons, every
// dtype size for where) where the CPU has them; shapes 7, (33,65), a
// transposed view, a 0-d operand, broadcasting (4,1,5) with (3,1), 2^20
// elements (more blocks than one grid-stride step), and contiguous views that
// start at the second element (not aligned for the kernels' vector loads);
// erf at its special values (-0, tiny, +-inf, NaN).
#include <stdlib.h>

#include "../../src/ops/elementwise.h" // weft_sign, weft_gelu_grad, weft_relu_backward, weft_gelu_backward,
                                          // weft_gelu_tanh_backward (internal ops)
#include "cuda_test.h"

#define BIG ((int64_t)1 << 20)

// Values in [lo, hi) as dtype dt; quant: whole numbers (ties for comparisons).
static weft_tensor *input(int nd, const int64_t *sizes, double lo, double hi, uint64_t seed, bool quant,
                          weft_dtype dt) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= sizes[d];
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    wt_vals(v, n, lo, hi, seed);
    if (quant)
        for (int64_t i = 0; i < n; i++) v[i] = floor(v[i]);
    weft_tensor *t64 = weft_tensor_from_data(v, nd, sizes, WEFT_F64), *t = weft_cast(t64, dt);
    free(v);
    weft_tensor_free(t64);
    return t;
}

static double tol_of(weft_dtype dt) { return dt == WEFT_F32 ? 1e-5 : dt == WEFT_F64 ? 1e-12 : 0; }

// How f reads its inputs: as given, input k transposed (last two dims) first, or every input from its second
// element on (contiguous but not aligned for the kernels' vector loads).
enum { AS_IS, T0, T1, OFF1 };
static weft_tensor *view_in(weft_tensor *const *in, int k, int mode) {
    if ((mode == T0 && k == 0) || (mode == T1 && k == 1)) return weft_transpose(in[k], -1, -2);
    if (mode == OFF1) return weft_slice(in[k], 0, 1, weft_tensor_sizes(in[k])[0], 1);
    return weft_tensor_ref(in[k]);
}

// ---- unary ----
static weft_tensor *f_pow_scalar(weft_tensor *t) { return weft_pow_scalar(t, 2.5); }
static weft_tensor *f_add_scalar(weft_tensor *t) { return weft_add_scalar(t, 1.75); } // ints add 1
static weft_tensor *f_mul_scalar(weft_tensor *t) { return weft_mul_scalar(t, -2.5); } // ints multiply by -2

typedef struct unop {
    const char *name;
    weft_tensor *(*f)(weft_tensor *);
    double lo, hi;
    bool ints, diff;
} unop;

static const unop k_unary[] = {
    {"neg", weft_neg, -3, 3, true, true},
    {"abs", weft_abs, -3, 3, true, true},
    {"sign", weft_sign, -3, 3, true, false},
    {"exp", weft_exp, -3, 3, false, true},
    {"log", weft_log, 0.1, 3, false, true},
    {"sqrt", weft_sqrt, 0.1, 3, false, true},
    {"rsqrt", weft_rsqrt, 0.1, 3, false, true},
    {"sin", weft_sin, -4, 4, false, true},
    {"cos", weft_cos, -4, 4, false, true},
    {"tanh", weft_tanh, -3, 3, false, true},
    {"sigmoid", weft_sigmoid, -6, 6, false, true},
    {"relu", weft_relu, -3, 3, true, true},
    {"gelu", weft_gelu, -4, 4, false, true},
    {"gelu_grad", weft_gelu_grad, -4, 4, false, false}, // no backward of its own
    {"gelu_tanh", weft_gelu_tanh, -5, 5, false, true},
    {"silu", weft_silu, -6, 6, false, true},
    {"erf", weft_erf, -4, 4, false, true},
    {"asin", weft_asin, -0.9, 0.9, false, true},
    {"acos", weft_acos, -0.9, 0.9, false, true},
    {"atan", weft_atan, -4, 4, false, true},
    {"floor", weft_floor, -4, 4, false, false},
    {"ceil", weft_ceil, -4, 4, false, false},
    {"round", weft_round, -4, 4, false, false},
    {"trunc", weft_trunc, -4, 4, false, false},
    {"pow_scalar", f_pow_scalar, 0.1, 3, false, true},
    {"add_scalar", f_add_scalar, -3, 3, true, true},
    {"mul_scalar", f_mul_scalar, -3, 3, true, true},
};

typedef struct ctx {
    int op, mode;
} ctx;

static weft_tensor *run_unary(weft_tensor *const *in, void *c) {
    const ctx *x = c;
    weft_tensor *a = view_in(in, 0, x->mode), *r = k_unary[x->op].f(a);
    weft_tensor_free(a);
    return r;
}

typedef struct shape {
    int nd;
    int64_t s[3];
    int mode;
} shape;

static void test_unary(void) {
    const shape shapes[] = {
        {1, {7}, AS_IS}, {2, {33, 65}, AS_IS}, {2, {65, 33}, T0}, {0, {0}, AS_IS}, {1, {BIG}, AS_IS},
        {1, {BIG + 3}, OFF1},
    };
    const weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_I32, WEFT_I64};
    for (int o = 0; o < (int)(sizeof k_unary / sizeof k_unary[0]); o++) {
        const unop *u = &k_unary[o];
        for (int di = 0; di < 4; di++) {
            weft_dtype dt = dts[di];
            bool fl = dt == WEFT_F32 || dt == WEFT_F64;
            if (!fl && !u->ints) continue;
            for (int si = 0; si < (int)(sizeof shapes / sizeof shapes[0]); si++) {
                const shape *sh = &shapes[si];
                // ints: whole numbers in a wider range (negative, zero, positive)
                weft_tensor *in = fl ? input(sh->nd, sh->s, u->lo, u->hi, 100 + o * 7 + si, false, dt)
                                     : input(sh->nd, sh->s, -50, 50, 100 + o * 7 + si, true, dt);
                ctx c = {o, sh->mode};
                char what[96];
                snprintf(what, sizeof what, "%s %s shape %d", u->name, weft_dtype_name(dt), si);
                wt_cuda_compare(what, run_unary, &c, 1, &in, tol_of(dt), fl && u->diff);
                weft_tensor_free(in);
            }
        }
    }
}

// ---- binary ----
static weft_tensor *f_relu_bw(weft_tensor *a, weft_tensor *b) { return weft_relu_backward(a, b); }
static weft_tensor *f_gelu_bw(weft_tensor *a, weft_tensor *b) { return weft_gelu_backward(a, b); }
static weft_tensor *f_gelu_tanh_bw(weft_tensor *a, weft_tensor *b) { return weft_gelu_tanh_backward(a, b); }

typedef struct binop {
    const char *name;
    weft_tensor *(*f)(weft_tensor *, weft_tensor *);
    double alo, ahi, blo, bhi; // float operand ranges
    bool quant, floats_only, diff;
} binop;

static const binop k_binary[] = {
    {"add", weft_add, -2, 2, -2, 2, false, false, true},
    {"sub", weft_sub, -2, 2, -2, 2, false, false, true},
    {"mul", weft_mul, -2, 2, -2, 2, false, false, true},
    {"div", weft_div, -2, 2, 0.5, 2, false, false, true},
    {"pow", weft_pow, 0.5, 2, -2, 2, false, true, true},
    {"fmod", weft_fmod, -5, 5, 0.7, 2, false, false, true},
    {"remainder", weft_remainder, -5, 5, 0.7, 2, false, false, true},
    {"maximum", weft_maximum, -3, 3, -3, 3, true, false, true}, // ties: the gradient splits
    {"minimum", weft_minimum, -3, 3, -3, 3, true, false, true},
    {"relu_backward", f_relu_bw, -1, 1, -1, 1, false, false, true},
    {"gelu_backward", f_gelu_bw, -2, 2, -4, 4, false, true, true},
    {"gelu_tanh_backward", f_gelu_tanh_bw, -2, 2, -5, 5, false, true, true},
    {"eq", weft_eq, -3, 3, -3, 3, true, false, false},
    {"ne", weft_ne, -3, 3, -3, 3, true, false, false},
    {"lt", weft_lt, -3, 3, -3, 3, true, false, false},
    {"le", weft_le, -3, 3, -3, 3, true, false, false},
    {"gt", weft_gt, -3, 3, -3, 3, true, false, false},
    {"ge", weft_ge, -3, 3, -3, 3, true, false, false},
};
#define N_BINARY ((int)(sizeof k_binary / sizeof k_binary[0]))

static weft_tensor *run_binary(weft_tensor *const *in, void *c) {
    const ctx *x = c;
    weft_tensor *a = view_in(in, 0, x->mode), *b = view_in(in, 1, x->mode), *r = k_binary[x->op].f(a, b);
    weft_tensor_free(a);
    weft_tensor_free(b);
    return r;
}

typedef struct shape2 {
    int na, nb;
    int64_t a[3], b[3];
    int mode;
} shape2;

static const shape2 k_shapes2[] = {
    {1, 1, {7}, {7}, AS_IS},
    {2, 2, {33, 65}, {33, 65}, AS_IS},
    {3, 2, {4, 1, 5}, {3, 1}, AS_IS},     // -> (4,3,5), both broadcast
    {2, 2, {33, 65}, {65, 33}, T1},       // b a transposed view
    {2, 0, {33, 65}, {0}, AS_IS},         // b a 0-d scalar
    {0, 1, {0}, {7}, AS_IS},              // a a 0-d scalar
    {1, 1, {BIG}, {BIG}, AS_IS},          // contiguous, many blocks
    {2, 2, {1024, 1024}, {1, 1024}, AS_IS}, // broadcast, many blocks
    {1, 1, {BIG + 3}, {BIG + 3}, OFF1},     // contiguous, not vector-aligned
    {1, 1, {6}, {6}, OFF1},                 // shorter than a vector step
};
#define N_SHAPES2 ((int)(sizeof k_shapes2 / sizeof k_shapes2[0]))

static void binary_case(int o, weft_dtype dt, int si) {
    const binop *bo = &k_binary[o];
    const shape2 *sh = &k_shapes2[si];
    bool fl = dt == WEFT_F32 || dt == WEFT_F64, small = dt == WEFT_U8 || dt == WEFT_BOOL;
    uint64_t seed = 1000 + (uint64_t)o * 31 + (uint64_t)si;
    weft_tensor *in[2];
    if (fl) {
        in[0] = input(sh->na, sh->a, bo->alo, bo->ahi, seed, bo->quant, dt);
        in[1] = input(sh->nb, sh->b, bo->blo, bo->bhi, seed + 7, bo->quant, dt);
    } else if (small) {
        in[0] = input(sh->na, sh->a, 0, dt == WEFT_BOOL ? 2 : 4, seed, true, dt);
        in[1] = input(sh->nb, sh->b, 0, dt == WEFT_BOOL ? 2 : 4, seed + 7, true, dt);
    } else { // ints: small whole numbers, zeros included (div by 0 gives 0, as the CPU)
        in[0] = input(sh->na, sh->a, -20, 20, seed, true, dt);
        in[1] = input(sh->nb, sh->b, -5, 5, seed + 7, true, dt);
    }
    // f32 gradients of broadcast operands are sums (of up to 2145 terms here)
    double tol = dt == WEFT_F32 && (si == 2 || si == 4 || si == 5 || si == 7) ? 1e-4 : tol_of(dt);
    ctx c = {o, sh->mode};
    char what[96];
    snprintf(what, sizeof what, "%s %s shape %d", bo->name, weft_dtype_name(dt), si);
    wt_cuda_compare(what, run_binary, &c, 2, in, tol, fl && bo->diff);
    weft_tensor_free(in[0]);
    weft_tensor_free(in[1]);
}

static void test_binary(void) {
    const weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_I32, WEFT_I64};
    for (int o = 0; o < N_BINARY; o++)
        for (int di = 0; di < 4; di++) {
            bool fl = dts[di] == WEFT_F32 || dts[di] == WEFT_F64;
            if (!fl && k_binary[o].floats_only) continue;
            for (int si = 0; si < N_SHAPES2; si++) binary_case(o, dts[di], si);
        }
}

// bf16 / f16 (f32 math on widened copies, rounded once, on both devices): every float binary op and
// unary op, same-shape and broadcast, with gradients; a one-unit difference in the last bf16 place
// (transcendentals differ in their last f32 bits) stays within 1e-2.
static void test_half(void) {
    const weft_dtype dts[] = {WEFT_BF16, WEFT_F16};
    for (int di = 0; di < 2; di++) {
        for (int o = 0; o < N_BINARY; o++)
            for (int si = 1; si <= 2; si++) {
                const binop *bo = &k_binary[o];
                const shape2 *sh = &k_shapes2[si];
                weft_tensor *in[2] = {input(sh->na, sh->a, bo->alo, bo->ahi, 500 + o, bo->quant, dts[di]),
                                      input(sh->nb, sh->b, bo->blo, bo->bhi, 600 + o, bo->quant, dts[di])};
                ctx c = {o, sh->mode};
                char what[96];
                snprintf(what, sizeof what, "%s %s shape %d", bo->name, weft_dtype_name(dts[di]), si);
                wt_cuda_compare(what, run_binary, &c, 2, in, 1e-2, bo->diff);
                weft_tensor_free(in[0]);
                weft_tensor_free(in[1]);
            }
        for (int o = 0; o < (int)(sizeof k_unary / sizeof k_unary[0]); o++) {
            const unop *u = &k_unary[o];
            weft_tensor *in = input(2, (int64_t[]){33, 65}, u->lo, u->hi, 700 + o, false, dts[di]);
            ctx c = {o, AS_IS};
            char what[96];
            snprintf(what, sizeof what, "%s %s", u->name, weft_dtype_name(dts[di]));
            wt_cuda_compare(what, run_unary, &c, 1, &in, 1e-2, u->diff);
            weft_tensor_free(in);
        }
    }
}

// Comparisons of one-byte types (u8 and bool, compared as bytes).
static void test_compare_bytes(void) {
    for (int o = 0; o < N_BINARY; o++) {
        if (k_binary[o].diff) continue; // the comparisons
        for (int si = 0; si < N_SHAPES2; si++) {
            binary_case(o, WEFT_U8, si);
            binary_case(o, WEFT_BOOL, si);
        }
    }
}

// ---- where ----
static weft_tensor *run_where(weft_tensor *const *in, void *c) {
    const ctx *x = c;
    weft_tensor *cd = view_in(in, 0, x->mode), *a = view_in(in, 1, x->mode), *b = view_in(in, 2, x->mode);
    weft_tensor *r = weft_where(cd, a, b);
    weft_tensor_free(cd);
    weft_tensor_free(a);
    weft_tensor_free(b);
    return r;
}

static void test_where(void) {
    struct {
        int n[3];
        int64_t s[3][3];
        int mode;
    } cases[] = {
        {{2, 2, 2}, {{33, 65}, {33, 65}, {33, 65}}, AS_IS},
        {{3, 2, 0}, {{4, 1, 5}, {3, 1}, {0}}, AS_IS},     // cond (4,1,5), a (3,1), b 0-d -> (4,3,5)
        {{2, 2, 2}, {{33, 65}, {65, 33}, {1, 65}}, T1},   // a transposed, b a broadcast row
        {{1, 1, 1}, {{BIG}, {BIG}, {BIG}}, AS_IS},
        {{2, 2, 1}, {{1024, 1}, {1024, 1024}, {1024}}, AS_IS},
    };
    const weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_I32, WEFT_I64, WEFT_F16, WEFT_U8, WEFT_BOOL};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++) {
            weft_dtype dt = dts[di];
            bool fl = dt == WEFT_F32 || dt == WEFT_F64;
            weft_dtype cdt = k % 2 ? WEFT_U8 : WEFT_BOOL; // both condition dtypes
            double lo = dt == WEFT_U8 || dt == WEFT_BOOL ? 0 : -3; // no negative values cast to bytes
            weft_tensor *in[3] = {
                input(cases[k].n[0], cases[k].s[0], 0, 2, 500 + k, true, cdt),
                input(cases[k].n[1], cases[k].s[1], lo, 3, 600 + k, !fl, dt),
                input(cases[k].n[2], cases[k].s[2], lo, 3, 700 + k, !fl, dt),
            };
            ctx c = {0, cases[k].mode};
            char what[96];
            snprintf(what, sizeof what, "where %s case %zu", weft_dtype_name(dt), k);
            // f32 gradients of broadcast operands are sums; f16 has no CPU
            // arithmetic for the loss: forward only
            double tol = dt == WEFT_F32 && k != 0 && k != 3 ? 1e-4 : tol_of(dt);
            wt_cuda_compare(what, run_where, &c, 3, in, tol, fl);
            for (int i = 0; i < 3; i++) weft_tensor_free(in[i]);
        }
}

// ---- slice_backward: through the gradient of slice, and directly ----
typedef struct slice_ctx {
    int dim;
    int64_t start, end, step;
    int mode;
} slice_ctx;

static weft_tensor *run_slice(weft_tensor *const *in, void *c) {
    const slice_ctx *x = c;
    weft_tensor *a = view_in(in, 0, x->mode), *r = weft_slice(a, x->dim, x->start, x->end, x->step);
    weft_tensor_free(a);
    return r;
}

// slice_backward itself (any dtype): zeros of `full` with in[0] at the slice.
typedef struct slice_bw_ctx {
    int dim, nd;
    int64_t start, end, step, full[3];
} slice_bw_ctx;

static weft_tensor *run_slice_bw(weft_tensor *const *in, void *c) {
    const slice_bw_ctx *x = c;
    weft_attrs at = {.i = {x->dim, x->start, x->end, x->step, x->nd}};
    for (int d = 0; d < x->nd; d++) at.i[5 + d] = x->full[d];
    weft_tensor *g = in[0];
    return weft_op_apply1(weft_op_find("slice_backward"), 1, &g, &at);
}

static void test_slice_backward(void) {
    struct {
        int nd;
        int64_t s[3];
        slice_ctx c;
    } cases[] = {
        {2, {33, 65}, {1, 3, 60, 4, AS_IS}},
        {2, {33, 65}, {0, 1, 33, 3, AS_IS}},
        {2, {65, 33}, {0, 2, 31, 5, T0}}, // slice of a transposed view
        {3, {4, 7, 9}, {-1, 0, 9, 2, AS_IS}},
        {3, {4, 7, 9}, {1, -5, 7, 2, AS_IS}},
        {2, {5, 5}, {0, 3, 3, 1, AS_IS}}, // empty slice: the gradient is all zeros
        {1, {BIG}, {0, 5, -5, 3, AS_IS}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int f = 0; f < 2; f++) {
            weft_dtype dt = f ? WEFT_F64 : WEFT_F32;
            weft_tensor *in = input(cases[k].nd, cases[k].s, -1, 1, 800 + k, false, dt);
            char what[96];
            snprintf(what, sizeof what, "slice %s case %zu", weft_dtype_name(dt), k);
            wt_cuda_compare(what, run_slice, &cases[k].c, 1, &in, tol_of(dt), true);
            weft_tensor_free(in);
        }
    // directly, for integer dtypes too: g (4, 3, 9) into (4, 7, 9) at dim 1, 1:7:2
    const weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_I32, WEFT_I64, WEFT_U8};
    slice_bw_ctx c = {1, 3, 1, 7, 2, {4, 7, 9}};
    for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++) {
        weft_tensor *g = input(3, (int64_t[]){4, 3, 9}, 0, 9, 900 + di, true, dts[di]);
        char what[96];
        snprintf(what, sizeof what, "slice_backward %s", weft_dtype_name(dts[di]));
        wt_cuda_compare(what, run_slice_bw, &c, 1, &g, 0, false);
        weft_tensor_free(g);
    }
}

// erf at special values on both devices (CUDA's erff / erf against libm's): 0 and -0 (-0 out), tiny x (2x/sqrt(pi),
// not 0), +-0.5, +-3, +-10, +-inf (+-1) and NaN.
static weft_tensor *run_erf(weft_tensor *const *in, void *c) {
    (void)c;
    return weft_erf(in[0]);
}
static void test_erf_special(void) {
    static const double v[13] = {0, -0.0, 1e-20, -1e-20, 0.5, -0.5, 3, -3, 10, -10, INFINITY, -INFINITY, NAN};
    for (int f = 0; f < 2; f++) {
        weft_dtype dt = f ? WEFT_F64 : WEFT_F32;
        weft_tensor *x64 = weft_tensor_from_data(v, 1, (int64_t[]){13}, WEFT_F64), *x = weft_cast(x64, dt);
        wt_cuda_compare(f ? "erf special f64" : "erf special f32", run_erf, NULL, 1, &x, f ? 1e-15 : 1e-6, false);
        weft_tensor *xd = weft_tensor_to(x, WT_CUDA0), *yd = xd ? weft_erf(xd) : NULL;
        weft_tensor *y = yd ? weft_tensor_to(yd, WEFT_DEVICE_CPU) : NULL;
        double r[13], tiny = 1.1283791670955126e-20;
        CHECK(y && weft_tensor_to_f64(y, r, 13) == WEFT_OK);
        if (y) {
            CHECK(r[0] == 0 && !signbit(r[0]) && r[1] == 0 && signbit(r[1]));
            CHECK(fabs(r[2] - tiny) <= 1e-6 * tiny && fabs(r[3] + tiny) <= 1e-6 * tiny);
            CHECK(r[10] == 1 && r[11] == -1 && isnan(r[12]));
        }
        weft_tensor *ts[] = {x64, x, xd, yd, y};
        for (int i = 0; i < 5; i++) weft_tensor_free(ts[i]);
    }
}

// A dtype the CPU kernel does not take is refused on CUDA too.
static weft_tensor *run_exp(weft_tensor *const *in, void *c) {
    (void)c;
    return weft_exp(in[0]);
}
static void test_unsupported(void) {
    weft_tensor *in = input(1, (int64_t[]){7}, -3, 3, 1, true, WEFT_I32);
    wt_cuda_compare("exp of i32 fails on both", run_exp, NULL, 1, &in, 0, false);
    weft_tensor_free(in);
}

int main(void) {
    WT_CUDA_OR_SKIP();
    RUN(test_unary);
    RUN(test_binary);
    RUN(test_compare_bytes);
    RUN(test_where);
    RUN(test_slice_backward);
    RUN(test_erf_special);
    RUN(test_unsupported);
    RUN(test_half);
    return wt_summary();
}
