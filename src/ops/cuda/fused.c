// fused_elementwise on CUDA (src/ops/fused.h): graph mode's fused groups.
// The glue checks the program (weft_ew_prog_of), reads every input as
// broadcast to the group shape, coalesces dims the way elementwise.c does
// (size-1 dims dropped, neighbours merged where every operand steps through
// them as one), and launches fused_kernels.cu's interpreter once.
#include <string.h>

#include "../elementwise.h"
#include "../fused.h"
#include "cuda_ops.h"
#include "elementwise_kernels.h"
#include "fused_kernels.h"

_Static_assert(1 + WEFT_CU_FUSED_MAX_IN <= WEFT_CU_COALESCE_MAX, "weft_cu_coalesce takes every operand");

_Static_assert(WEFT_CU_FUSED_MAX_INSTR == WEFT_EW_PROG_MAX_INSTR && WEFT_CU_FUSED_MAX_IN == WEFT_EW_PROG_MAX_IN &&
                   WEFT_CU_FUSED_MAX_OUT == WEFT_EW_PROG_MAX_OUT,
               "the CUDA program holds what fused.h allows");

// Variants with a formula for f32/f64 only (def_elementwise.c's WEFT_DT_FLOAT entries).
static bool float_only(int v) {
    switch (v) {
    case WEFT_EW_EXP: case WEFT_EW_LOG: case WEFT_EW_SQRT: case WEFT_EW_RSQRT: case WEFT_EW_SIN: case WEFT_EW_COS:
    case WEFT_EW_TANH: case WEFT_EW_SIGMOID: case WEFT_EW_GELU: case WEFT_EW_GELU_GRAD: case WEFT_EW_SILU:
    case WEFT_EW_POW_SCALAR: case WEFT_EW_POW: case WEFT_EW_GELU_BW: case WEFT_EW_GELU_TANH: case WEFT_EW_GELU_TANH_BW:
    case WEFT_EW_ERF:
        return true;
    default:
        return false;
    }
}

static weft_status cu_fused(const weft_op_args *a) {
    const char *nm = "fused_elementwise";
    const weft_ew_prog *p = weft_ew_prog_of(a);
    if (!p) return weft_last_status();
    const weft_tensor *o0 = a->out[0];
    if (o0->numel == 0) return WEFT_OK;
    int dt = o0->dtype;
    if (dt != WEFT_F32 && dt != WEFT_F64 && dt != WEFT_I32 && dt != WEFT_I64)
        return weft_error(WEFT_ERR_DTYPE, "%s: no CUDA kernel for %s", nm, weft_dtype_name((weft_dtype)dt));
    weft_cu_fused f;
    memset(&f, 0, sizeof f);
    f.n_instr = p->n_instr, f.n_in = a->n_in, f.n_out = a->n_out, f.dtype = dt, f.numel = o0->numel;
    bool used[WEFT_CU_FUSED_MAX_IN] = {false};
    for (int j = 0; j < p->n_instr; j++) {
        const weft_ew_instr *x = &p->instr[j];
        if (float_only(x->variant) && dt != WEFT_F32 && dt != WEFT_F64)
            return weft_error(WEFT_ERR_DTYPE, "%s: instruction %d (elementwise variant %d) takes floats, not %s", nm, j,
                              x->variant, weft_dtype_name((weft_dtype)dt));
        weft_cu_fused_instr *y = &f.instr[j];
        y->op = (int8_t)x->variant;
        y->n_args = (int8_t)x->n_args;
        y->out = (int8_t)x->out;
        y->scalar = x->scalar;
        for (int k = 0; k < 2; k++) y->arg[k] = (int8_t)(k < x->n_args ? x->args[k] : 0);
        for (int k = 0; k < x->n_args; k++)
            if (x->args[k] >= 0) used[x->args[k]] = true;
    }
    // Descriptors: d[0] an output (all are contiguous of the group shape), d[1 + k] input k.
    weft_cu_tensor d[1 + WEFT_CU_FUSED_MAX_IN];
    d[0] = weft_cu_desc(o0);
    for (int k = 0; k < a->n_in; k++) d[1 + k] = weft_cu_desc_bcast(a->in[k], o0->ndim, o0->sizes);
    weft_cu_coalesce(1 + a->n_in, d);
    f.ndim = d[0].ndim;
    for (int j = 0; j < f.ndim; j++) f.sizes[j] = d[0].sizes[j];
    for (int k = 0; k < a->n_in; k++) {
        const weft_cu_tensor *t = &d[1 + k];
        f.in[k] = t->data;
        bool contig = true, scalar = true;
        for (int j = 0; j < f.ndim; j++) {
            f.in_strides[k][j] = t->strides[j];
            contig &= t->strides[j] == d[0].strides[j];
            scalar &= t->strides[j] == 0;
        }
        f.in_kind[k] = !used[k] ? WEFT_CU_IN_UNUSED
                       : contig ? WEFT_CU_IN_CONTIG
                       : scalar ? WEFT_CU_IN_SCALAR
                                : WEFT_CU_IN_STRIDED;
    }
    for (int j = 0; j < a->n_out; j++) f.out[j] = weft_tensor_ptr(a->out[j]);
    return weft_cu_done(weft_cu_fused_run(&f, weft_cu_stream(o0)), nm);
}

void weft_cuda_register_fused(void) { weft_cu_register("fused_elementwise", cu_fused, WEFT_DT_NUM); }
