// Shared between the elementwise op entries and their kernels.
#ifndef WEFT_ELEMENTWISE_H
#define WEFT_ELEMENTWISE_H

#include "op.h"

enum {
    WEFT_EW_NEG, WEFT_EW_ABS, WEFT_EW_SIGN, WEFT_EW_EXP, WEFT_EW_LOG, WEFT_EW_SQRT, WEFT_EW_RSQRT,
    WEFT_EW_SIN, WEFT_EW_COS, WEFT_EW_TANH, WEFT_EW_SIGMOID, WEFT_EW_RELU, WEFT_EW_GELU,
    WEFT_EW_GELU_GRAD, WEFT_EW_SILU, WEFT_EW_POW_SCALAR, WEFT_EW_ADD_SCALAR, WEFT_EW_MUL_SCALAR,
    WEFT_EW_ADD, WEFT_EW_SUB, WEFT_EW_MUL, WEFT_EW_DIV, WEFT_EW_POW, WEFT_EW_MAXIMUM, WEFT_EW_MINIMUM,
    WEFT_EW_EQ, WEFT_EW_NE, WEFT_EW_LT, WEFT_EW_LE, WEFT_EW_GT, WEFT_EW_GE, WEFT_EW_RELU_BW,
    WEFT_EW_GELU_BW, WEFT_EW_GELU_TANH, WEFT_EW_GELU_TANH_BW, WEFT_EW_ERF, WEFT_EW_FLOOR, WEFT_EW_CEIL,
    WEFT_EW_ROUND, WEFT_EW_TRUNC, WEFT_EW_FMOD, WEFT_EW_REMAINDER, WEFT_EW_ASIN, WEFT_EW_ACOS, WEFT_EW_ATAN,
    WEFT_EW_COUNT
};

weft_status weft_cpu_elementwise(const weft_op_args *a);
weft_status weft_cpu_where(const weft_op_args *a);
weft_status weft_cpu_cast(const weft_op_args *a);
// cast, and cast_multi (many casts in place, few launches): autocast's weight casts (dispatch.c).
extern weft_op_def weft_op_cast, weft_op_cast_multi;

// ---- for graph fusion (src/graph/fused.c) ----
// The CPU inner loop of elementwise variant WEFT_EW_* for dtype dt (the same
// function the kernel runs; type = weft_loop_fn of cpu/iter.h), NULL if none.
typedef void (*weft_ew_loop_fn)(char **p, const int64_t *s, int64_t n, const void *ctx);
weft_ew_loop_fn weft_cpu_ew_loop(int variant, weft_dtype dt);

// Internal ops used by backward rules.
weft_tensor *weft_sign(weft_tensor *t);
weft_tensor *weft_gelu_grad(weft_tensor *t);
// g where x > 0, else 0: relu's backward in one pass (no mask tensor).
weft_tensor *weft_relu_backward(weft_tensor *g, weft_tensor *x);
// g * d/dx gelu(x): gelu's backward in one pass (no derivative tensor).
weft_tensor *weft_gelu_backward(weft_tensor *g, weft_tensor *x);
// g * d/dx gelu_tanh(x): the tanh GELU's backward in one pass.
weft_tensor *weft_gelu_tanh_backward(weft_tensor *g, weft_tensor *x);
// g f'(x) for GELU's exact form or its tanh form: gelu_backward or gelu_tanh_backward.
weft_tensor *weft_gelu_backward_as(weft_tensor *g, weft_tensor *x, bool tanh_form);
// GELU's second derivative f''(x) (exact or tanh form), composed of ops: the backward rules of the backward ops.
weft_tensor *weft_gelu_second(weft_tensor *x, bool tanh_form);

#endif
