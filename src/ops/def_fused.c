// Op entry of fused_elementwise (see fused.h): the graph executor's fused
// groups, dispatched by device through the op table. Not differentiable and
// never built by hand: its infer refuses every call, so only the executor,
// which calls the kernel directly, runs it.
#include "elementwise.h"
#include "fused.h"

static weft_status infer_fused(const weft_op_args *a, weft_out_meta *out) {
    (void)a;
    (void)out;
    return weft_error(WEFT_ERR_ARG, "fused_elementwise: runs only as a graph's fused node (made by the fusion pass)");
}

const weft_ew_prog *weft_ew_prog_of(const weft_op_args *a) {
    const char *nm = "fused_elementwise";
    if (a->attrs->i[1] != WEFT_EW_PROG_TAG || !a->attrs->i[0])
        return weft_error_null(WEFT_ERR_ARG, "%s: no program in the attrs", nm);
    const weft_ew_prog *p = (const weft_ew_prog *)(intptr_t)a->attrs->i[0];
    if (p->n_instr < 1 || p->n_instr > WEFT_EW_PROG_MAX_INSTR || a->n_in > WEFT_EW_PROG_MAX_IN || a->n_out < 1 ||
        a->n_out > WEFT_EW_PROG_MAX_OUT)
        return weft_error_null(WEFT_ERR_ARG, "%s: %d instructions, %d inputs, %d outputs (at most %d, %d, %d)", nm,
                               p->n_instr, a->n_in, a->n_out, WEFT_EW_PROG_MAX_INSTR, WEFT_EW_PROG_MAX_IN,
                               WEFT_EW_PROG_MAX_OUT);
    const weft_tensor *o0 = a->out[0];
    bool written[WEFT_EW_PROG_MAX_OUT] = {false};
    for (int j = 0; j < p->n_instr; j++) {
        const weft_ew_instr *x = &p->instr[j];
        bool cmp = x->variant >= WEFT_EW_EQ && x->variant <= WEFT_EW_GE;
        if (x->variant < 0 || x->variant >= WEFT_EW_COUNT || cmp || x->n_args < 1 || x->n_args > 2 ||
            x->out < -1 || x->out >= a->n_out)
            return weft_error_null(WEFT_ERR_ARG, "%s: instruction %d is malformed", nm, j);
        for (int k = 0; k < x->n_args; k++)
            if (x->args[k] >= a->n_in || x->args[k] < -j)
                return weft_error_null(WEFT_ERR_ARG, "%s: instruction %d: operand %d out of range", nm, j, k);
        if (x->out >= 0) written[x->out] = true;
    }
    for (int j = 0; j < a->n_out; j++) {
        const weft_tensor *o = a->out[j];
        if (!written[j] || !o || !weft_tensor_is_contiguous(o) || o->dtype != o0->dtype ||
            !weft_shape_equal(o->ndim, o->sizes, o0->ndim, o0->sizes) || !weft_device_equal(o->device, o0->device))
            return weft_error_null(WEFT_ERR_ARG, "%s: output %d must be a contiguous tensor of output 0's shape and "
                                                 "dtype, written by an instruction", nm, j);
    }
    for (int k = 0; k < a->n_in; k++) {
        const weft_tensor *t = a->in[k];
        bool fits = t && t->dtype == o0->dtype && t->ndim <= o0->ndim && weft_device_equal(t->device, o0->device);
        for (int d = 0; fits && d < t->ndim; d++) {
            int64_t s = t->sizes[d], g = o0->sizes[o0->ndim - t->ndim + d];
            fits = s == g || s == 1;
        }
        if (!fits)
            return weft_error_null(WEFT_ERR_ARG, "%s: input %d must have output 0's dtype and device and broadcast "
                                                 "to its shape", nm, k);
    }
    return p;
}

weft_op_def weft_op_fused_elementwise = {.name = "fused_elementwise",
                                         .n_in = -1,
                                         .n_out = 1, // the executor passes 1 to WEFT_EW_PROG_MAX_OUT
                                         .flags = WEFT_OPF_NONDIFF,
                                         .infer = infer_fused,
                                         .kernel = {[WEFT_CPU] = {weft_cpu_fused_elementwise, WEFT_DT_NUM}}};
