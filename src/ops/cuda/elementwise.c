// The elementwise family on CUDA (unary, scalar, binary, comparisons,
// where) and slice_backward. Kernels: elementwise_kernels.cu, which mirrors
// cpu/elementwise.c; dtype masks as in def_elementwise.c.
//
// The glue reads every input as broadcast to out's shape, then coalesces:
// size-1 dims are dropped and neighbouring dims merged where every operand
// steps through them as one (contiguous tensors become 1-d, a (4,3,5) + (3,1)
// broadcast keeps its 3 dims), so the kernels' strided index math runs over
// as few dims as the layout allows, and all-contiguous operands take the
// kernels' direct-index path.
#include <string.h>

#include "../elementwise.h"
#include "copy_kernels.h"
#include "cuda_ops.h"
#include "elementwise_kernels.h"

#define SAME(x) _Static_assert((int)WEFT_CU_EW_##x == (int)WEFT_EW_##x, "WEFT_CU_EW_" #x " == WEFT_EW_" #x);
SAME(NEG) SAME(ABS) SAME(SIGN) SAME(EXP) SAME(LOG) SAME(SQRT) SAME(RSQRT) SAME(SIN) SAME(COS) SAME(TANH)
SAME(SIGMOID) SAME(RELU) SAME(GELU) SAME(GELU_GRAD) SAME(SILU) SAME(POW_SCALAR) SAME(ADD_SCALAR)
SAME(MUL_SCALAR) SAME(ADD) SAME(SUB) SAME(MUL) SAME(DIV) SAME(POW) SAME(MAXIMUM) SAME(MINIMUM) SAME(EQ)
SAME(NE) SAME(LT) SAME(LE) SAME(GT) SAME(GE) SAME(RELU_BW) SAME(GELU_BW) SAME(GELU_TANH)
SAME(GELU_TANH_BW) SAME(ERF) SAME(FLOOR) SAME(CEIL) SAME(ROUND) SAME(TRUNC) SAME(FMOD) SAME(REMAINDER) SAME(ASIN) SAME(ACOS) SAME(ATAN) SAME(COUNT)
#undef SAME

// Descriptors of out and the inputs read at out's shape, coalesced.
static void descs(const weft_op_args *a, weft_cu_tensor *d) {
    const weft_tensor *out = a->out[0];
    d[0] = weft_cu_desc(out);
    for (int i = 0; i < a->n_in; i++) d[1 + i] = weft_cu_desc_bcast(a->in[i], out->ndim, out->sizes);
    weft_cu_coalesce(1 + a->n_in, d);
}

// Every unary and binary variant: the entry's variant says which (WEFT_EW_*);
// attrs f[0] is the scalar of pow/add/mul_scalar.
static weft_status cu_elementwise(const weft_op_args *a) {
    weft_tensor *out = a->out[0];
    if (out->numel == 0) return WEFT_OK;
    if (a->n_in != 1 && a->n_in != 2) return weft_error(WEFT_ERR_ARG, "%s: expected 1 or 2 inputs", a->op->name);
    weft_cu_tensor d[3];
    descs(a, d);
    cudaStream_t s = weft_cu_stream(out);
    cudaError_t e = a->n_in == 1 ? weft_cu_ew_unary(a->op->variant, d[0], d[1], a->attrs->f[0], s)
                                 : weft_cu_ew_binary(a->op->variant, d[0], d[1], d[2], s);
    return weft_cu_done(e, a->op->name);
}

// where(cond, a, b): all three broadcast to out's shape.
static weft_status cu_where(const weft_op_args *a) {
    weft_tensor *out = a->out[0];
    if (out->numel == 0) return WEFT_OK;
    weft_cu_tensor d[4];
    descs(a, d);
    return weft_cu_done(weft_cu_where(d[0], d[1], d[2], d[3], weft_cu_stream(out)), "where");
}

// slice_backward (def_view.c): out = zeros of shape attrs i[4], i[5..] with g
// written at the slice attrs i[0] = dim, i[1] = start, i[2] = end, i[3] =
// step of it. One memset, then one strided copy into the slice's view.
static weft_status cu_slice_backward(const weft_op_args *a) {
    weft_tensor *out = a->out[0];
    const weft_tensor *g = a->in[0];
    const int64_t *at = a->attrs->i;
    int d = (int)at[0];
    int64_t start = at[1], end = at[2], step = at[3];
    if (d < 0 || d >= out->ndim || step <= 0 || start < 0 || end > out->sizes[d])
        return weft_error(WEFT_ERR_ARG, "slice_backward: bad slice (dim %d, %lld:%lld:%lld) of a %d-d tensor", d,
                          (long long)start, (long long)end, (long long)step, out->ndim);
    if (out->numel == 0) return WEFT_OK;
    cudaStream_t s = weft_cu_stream(out);
    size_t es = weft_dtype_size((weft_dtype)out->dtype);
    cudaError_t e = cudaMemsetAsync(weft_tensor_ptr(out), 0, (size_t)out->numel * es, s);
    if (e != cudaSuccess) return weft_cu_done(e, "slice_backward");
    // the slice as a view of out (infer_slice's rule)
    weft_cu_tensor v = weft_cu_desc(out);
    v.sizes[d] = end > start ? (end - start + step - 1) / step : 0;
    v.data += start * v.strides[d] * (int64_t)es;
    v.strides[d] *= step;
    v.numel = 1;
    for (int i = 0; i < v.ndim; i++) v.numel *= v.sizes[i];
    if (v.numel == 0) return WEFT_OK;
    // g must broadcast to the slice (it has the slice's shape when it comes from slice's backward)
    bool fits = g->ndim <= v.ndim && g->dtype == out->dtype;
    for (int i = 0; fits && i < g->ndim; i++) {
        int64_t gs = g->sizes[i], vs = v.sizes[v.ndim - g->ndim + i];
        fits = gs == vs || gs == 1;
    }
    if (!fits) return weft_error(WEFT_ERR_SHAPE, "slice_backward: the gradient does not fit the slice");
    return weft_cu_done(weft_cu_copy(v, weft_cu_desc_bcast(g, v.ndim, v.sizes), s), "slice_backward");
}

void weft_cuda_register_elementwise(void) {
    // the dtype masks of def_elementwise.c's entries
    static const char *const num[] = {"neg", "abs", "sign", "relu", "add_scalar", "mul_scalar", "add", "sub",
                                      "mul", "div", "maximum", "minimum", "relu_backward", "fmod", "remainder"};
    static const char *const fl[] = {"exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid",
                                     "gelu", "gelu_grad", "silu", "pow_scalar", "pow", "gelu_backward",
                                     "gelu_tanh", "gelu_tanh_backward", "erf", "floor", "ceil", "round",
                                     "trunc", "asin", "acos", "atan"};
    static const char *const cmp[] = {"eq", "ne", "lt", "le", "gt", "ge"};
    // bf16 / f16 too (f32 math in the kernels, each result rounded once), as the CPU's entries
    for (size_t i = 0; i < sizeof num / sizeof num[0]; i++)
        weft_cu_register(num[i], cu_elementwise, WEFT_DT_NUM | WEFT_DT_HALF);
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++)
        weft_cu_register(fl[i], cu_elementwise, WEFT_DT_FLOAT | WEFT_DT_HALF);
    for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++)
        weft_cu_register(cmp[i], cu_elementwise, WEFT_DT_NUM | WEFT_DT_HALF | WEFT_DT(WEFT_U8) | WEFT_DT(WEFT_BOOL));
    weft_cu_register("where", cu_where, WEFT_DT_ALL);
    weft_cu_register("slice_backward", cu_slice_backward, WEFT_DT_ALL);
}
