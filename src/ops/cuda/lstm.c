// CUDA kernels of the fused LSTM cell ops (lstm_kernels.cu; def_lstm.c has
// the maths): lstm_cell (gates[, c_prev]) -> (h, c) and lstm_cell_backward
// (gates, [c_prev], c, [dh], [dc]) -> (dgates, dc_prev), f32 and f64. Inputs
// that are strided views get a contiguous device copy here; outputs are
// contiguous (allocated by the dispatcher).
#include "cuda_ops.h"
#include "lstm_kernels.h"

// gates (B,4H) -> B, H (infer has checked the shapes; kept safe anyway).
static weft_status cell_dims(const weft_op_args *a, int64_t *B, int64_t *H) {
    const weft_tensor *g = a->in[0];
    if (g->ndim != 2 || g->sizes[1] % 4)
        return weft_error(WEFT_ERR_SHAPE, "%s: the gates must be (B,4H)", a->op->name);
    *B = g->sizes[0];
    *H = g->sizes[1] / 4;
    return WEFT_OK;
}

static weft_status cu_lstm_cell(const weft_op_args *a) {
    int64_t B = 0, H = 0;
    weft_status st = cell_dims(a, &B, &H);
    if (st) return st;
    if (a->n_in < 1 || a->n_in > 2)
        return weft_error(WEFT_ERR_ARG, "%s: expected 1 or 2 inputs, got %d", a->op->name, a->n_in);
    if (B == 0 || H == 0) return WEFT_OK;
    weft_kernel_inputs c;
    if ((st = weft_kernel_inputs_get(a, &c))) return st;
    const void *cp = a->n_in == 2 ? weft_tensor_ptr(c.t[1]) : NULL;
    cudaError_t e = weft_cu_lstm_cell(weft_tensor_ptr(c.t[0]), cp, weft_tensor_ptr(a->out[0]),
                                      weft_tensor_ptr(a->out[1]), a->in[0]->dtype, B, H, weft_cu_stream(a->out[0]));
    weft_kernel_inputs_free(&c);
    return weft_cu_done(e, a->op->name);
}

static weft_status cu_lstm_cell_backward(const weft_op_args *a) {
    int64_t B = 0, H = 0;
    weft_status st = cell_dims(a, &B, &H);
    if (st) return st;
    const int64_t *f = a->attrs->i; // has c_prev, dh, dc: infer has checked they are flags matching n_in
    if (a->n_in != 2 + (int)(f[0] + f[1] + f[2]))
        return weft_error(WEFT_ERR_ARG, "%s: the attrs do not match %d inputs", a->op->name, a->n_in);
    if (B == 0 || H == 0) return WEFT_OK;
    weft_kernel_inputs c;
    if ((st = weft_kernel_inputs_get(a, &c))) return st;
    int n = 1;
    const void *cp = f[0] ? weft_tensor_ptr(c.t[n++]) : NULL;
    const void *cc = weft_tensor_ptr(c.t[n++]);
    const void *dh = f[1] ? weft_tensor_ptr(c.t[n++]) : NULL;
    const void *dc = f[2] ? weft_tensor_ptr(c.t[n++]) : NULL;
    cudaError_t e = weft_cu_lstm_cell_backward(weft_tensor_ptr(c.t[0]), cp, cc, dh, dc, weft_tensor_ptr(a->out[0]),
                                               weft_tensor_ptr(a->out[1]), a->in[0]->dtype, B, H,
                                               weft_cu_stream(a->out[0]));
    weft_kernel_inputs_free(&c);
    return weft_cu_done(e, a->op->name);
}

void weft_cuda_register_lstm(void) {
    weft_cu_register("lstm_cell", cu_lstm_cell, WEFT_DT_FLOAT);
    weft_cu_register("lstm_cell_backward", cu_lstm_cell_backward, WEFT_DT_FLOAT);
}
