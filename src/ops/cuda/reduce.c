// CUDA kernels of the reduction family (sum mean max min var logsumexp
// argmax): the plan is built on the host as the CPU builds it (kept dims /
// reduced dims of the strided input) and handed to the kernel by value.
// attrs: i[0] = axes mask, i[1] = keepdim (the output shape only), i[2] = correction (var).
#include <stddef.h>
#include <string.h>

#include "../reduce.h"
#include "cuda_ops.h"
#include "reduce_kernels.h"

_Static_assert(sizeof(weft_cu_reduce_plan) == sizeof(weft_reduce_plan) &&
                   offsetof(weft_cu_reduce_plan, ksize) == offsetof(weft_reduce_plan, ksize) &&
                   offsetof(weft_cu_reduce_plan, rstride) == offsetof(weft_reduce_plan, rstride) &&
                   offsetof(weft_cu_reduce_plan, n_out) == offsetof(weft_reduce_plan, n_out) &&
                   offsetof(weft_cu_reduce_plan, n_red) == offsetof(weft_reduce_plan, n_red),
               "weft_cu_reduce_plan has weft_reduce_plan's layout");
_Static_assert((int)WEFT_CU_RED_SUM == WEFT_RED_SUM && (int)WEFT_CU_RED_MEAN == WEFT_RED_MEAN &&
                   (int)WEFT_CU_RED_MAX == WEFT_RED_MAX && (int)WEFT_CU_RED_MIN == WEFT_RED_MIN &&
                   (int)WEFT_CU_RED_VAR == WEFT_RED_VAR && (int)WEFT_CU_RED_LOGSUMEXP == WEFT_RED_LOGSUMEXP &&
                   (int)WEFT_CU_RED_ARGMAX == WEFT_RED_ARGMAX,
               "reduction kinds agree with reduce.h");

static weft_status cu_reduce(const weft_op_args *a) {
    const weft_tensor *x = a->in[0];
    weft_tensor *out = a->out[0];
    int kind = a->op->variant;
    weft_reduce_plan p;
    weft_reduce_plan_init(&p, x, (uint32_t)a->attrs->i[0]);
    if (p.n_red == 0 && (kind == WEFT_RED_MAX || kind == WEFT_RED_MIN || kind == WEFT_RED_ARGMAX))
        return weft_error(WEFT_ERR_SHAPE, "%s: reducing over an empty dimension", a->op->name);
    if (p.n_out == 0) return WEFT_OK;
    // sum / mean over a contiguous float tensor's leading dims (the CPU's column fast path, cpu/reduce.c):
    // coalesced column sums (a linear layer's bias gradient)
    uint32_t mask = (uint32_t)a->attrs->i[0];
    int k = 0;
    while (k < x->ndim && (mask & (1u << k))) k++;
    if ((kind == WEFT_RED_SUM || kind == WEFT_RED_MEAN) && (weft_dtype_is_float(x->dtype) || weft_dtype_is_half(x->dtype)) &&
        k > 0 && k < x->ndim && mask == (1u << k) - 1 && weft_tensor_is_contiguous(x) && p.n_red > 1 && p.n_out > 1 &&
        weft_cu_colsum_parts(p.n_red) <= 65535) { // (a grid's y: more rows go the general way)
        int64_t np = weft_cu_colsum_parts(p.n_red) * p.n_out;
        weft_tensor *part = weft_tensor_new(1, &np, WEFT_F64, x->device);
        if (!part) return weft_last_status();
        double scale = kind == WEFT_RED_MEAN ? 1.0 / (double)p.n_red : 1.0;
        cudaError_t e = weft_cu_colsum(weft_tensor_ptr(x), x->dtype, p.n_red, p.n_out, weft_tensor_ptr(out), scale,
                                       (double *)weft_tensor_ptr(part), weft_cu_stream(out));
        weft_tensor_free(part);
        return weft_cu_done(e, a->op->name);
    }
    weft_cu_reduce_plan cp;
    memcpy(&cp, &p, sizeof cp);
    cudaError_t e = weft_cu_reduce(&cp, weft_tensor_ptr(x), x->dtype, weft_tensor_ptr(out), kind, a->attrs->i[2],
                                   weft_cu_stream(out));
    return weft_cu_done(e, a->op->name);
}

void weft_cuda_register_reduce(void) {
    weft_cu_register("sum", cu_reduce, WEFT_DT_NUM | WEFT_DT_HALF);
    weft_cu_register("mean", cu_reduce, WEFT_DT_FLOAT | WEFT_DT_HALF);
    weft_cu_register("max", cu_reduce, WEFT_DT_NUM | WEFT_DT_HALF);
    weft_cu_register("min", cu_reduce, WEFT_DT_NUM | WEFT_DT_HALF);
    weft_cu_register("var", cu_reduce, WEFT_DT_FLOAT | WEFT_DT_HALF);
    weft_cu_register("logsumexp", cu_reduce, WEFT_DT_FLOAT | WEFT_DT_HALF);
    weft_cu_register("argmax", cu_reduce, WEFT_DT_NUM | WEFT_DT_HALF);
}
