// Shared by the matmul kernels of every device (cpu/matmul.c, cuda/linalg.c).
#ifndef WEFT_LINALG_H
#define WEFT_LINALG_H

#include "op.h"

// How a BLAS reads a matrix operand: as stored (trans false, row stride ld)
// or as the transpose of a row-major matrix (trans true, column stride ld).
typedef struct weft_mat_view {
    bool trans;
    int64_t ld;
} weft_mat_view;

// t's last two dims (swapped when tr, the op's trans flag) as a BLAS operand:
// a new reference to t when its layout is readable (row-major, or a
// transposed view, with ld within int), else a contiguous copy made with
// copy on t's device (NULL + error when that fails). Size-1 dims accept any stride.
weft_tensor *weft_matmul_operand(weft_tensor *t, bool tr, weft_mat_view *v,
                                 weft_status (*copy)(weft_tensor *dst, const weft_tensor *src));

// linear / linear_gelu kernels (def_linalg.c): out[0] = y, out[n_out - 1] = the
// pre-activation x W^T + b (the same tensor for linear).
weft_status weft_cpu_linear(const weft_op_args *a);
// matmul_dgelu (def_linalg.c): (p @ W) ∘ gelu'(h), gelu_linear's backward for h; the kernel, and the op.
weft_status weft_cpu_matmul_dgelu(const weft_op_args *a);
weft_tensor *weft_matmul_dgelu(weft_tensor *p, weft_tensor *w, weft_tensor *h, bool tanh_form);

#endif
