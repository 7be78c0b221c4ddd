// Shared between the reduction op entries and their kernels.
#ifndef WEFT_REDUCE_H
#define WEFT_REDUCE_H

#include "op.h"

// Reduction attrs: i[0] = axes bit mask (already normalised), i[1] = keepdim,
// i[2] = correction (var). A plan splits the input into kept dims (one output
// element each) and reduced dims (iterated per output element).
typedef struct weft_reduce_plan {
    int nk, nr;
    int64_t ksize[WEFT_MAX_DIMS], kstride[WEFT_MAX_DIMS]; // kept dims (input strides, elements)
    int64_t rsize[WEFT_MAX_DIMS], rstride[WEFT_MAX_DIMS]; // reduced dims, innermost last
    int64_t n_out, n_red;
} weft_reduce_plan;

void weft_reduce_plan_init(weft_reduce_plan *p, const weft_tensor *x, uint32_t mask);
// Element offset (in elements) of the first input element of output o.
int64_t weft_reduce_base(const weft_reduce_plan *p, int64_t o);
// Output shape of a reduction.
void weft_reduce_out_shape(const weft_tensor *x, uint32_t mask, bool keepdim, int *ndim, int64_t *sizes);

weft_status weft_cpu_reduce(const weft_op_args *a);

enum { WEFT_RED_SUM, WEFT_RED_MEAN, WEFT_RED_MAX, WEFT_RED_MIN, WEFT_RED_VAR, WEFT_RED_LOGSUMEXP, WEFT_RED_ARGMAX };

#endif
