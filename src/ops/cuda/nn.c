// CUDA kernels of the nn family: softmax, log_softmax (variant 0 / 1) and
// their fused backward ops, cross_entropy (+ backward), dropout. Mirrors
// cpu/softmax.c and cpu/dropout.c; attrs as in def_nn.c:
//   softmax family i[0] = dim;  dropout i[0] = seed, i[1] = counter offset, f[0] = p.
#include "cuda_ops.h"
#include "nn_kernels.h"

// (outer, D, inner) around dim, as the CPU splits it.
static void split3(const weft_tensor *t, int dim, int64_t *outer, int64_t *D, int64_t *inner) {
    *outer = *inner = 1;
    *D = t->ndim ? t->sizes[dim] : 1;
    for (int d = 0; d < dim; d++) *outer *= t->sizes[d];
    for (int d = dim + 1; d < t->ndim; d++) *inner *= t->sizes[d];
}

// softmax / log_softmax: in x, out y (x's shape; f32 for bf16 / f16 x, read as it is).
static weft_status cu_softmax(const weft_op_args *a) {
    weft_tensor *y = a->out[0];
    if (y->numel == 0) return WEFT_OK;
    weft_tensor *x = weft_kernel_contiguous(a->in[0]);
    if (!x) return weft_last_status();
    int64_t outer, D, inner;
    split3(x, (int)a->attrs->i[0], &outer, &D, &inner);
    cudaError_t e = weft_cu_softmax(weft_tensor_ptr(x), weft_tensor_ptr(y), x->dtype, outer, D, inner,
                                    a->op->variant == 1, weft_cu_stream(y));
    weft_tensor_free(x);
    return weft_cu_done(e, a->op->name);
}

// softmax_backward / log_softmax_backward: in (g, y), out dx.
static weft_status cu_softmax_backward(const weft_op_args *a) {
    weft_tensor *dx = a->out[0];
    if (dx->numel == 0) return WEFT_OK;
    weft_tensor *g = weft_kernel_contiguous(a->in[0]), *y = g ? weft_kernel_contiguous(a->in[1]) : NULL;
    if (!y) {
        weft_tensor_free(g);
        return weft_last_status();
    }
    int64_t outer, D, inner;
    split3(dx, (int)a->attrs->i[0], &outer, &D, &inner);
    cudaError_t e = weft_cu_softmax_backward(weft_tensor_ptr(g), weft_tensor_ptr(y), weft_tensor_ptr(dx), dx->dtype,
                                             outer, D, inner, a->op->variant == 1, weft_cu_stream(dx));
    weft_tensor_free(g);
    weft_tensor_free(y);
    return weft_cu_done(e, a->op->name);
}

// ---- cross-entropy: logits (N,C), targets (N) i32/i64 (any stride) ----
// Both kernels check the targets as they read them: an out-of-range target
// is reported to the host without a wait (device/cuda/cuda_report.h), so the
// next wait for the device fails naming it, and its row's loss is NaN.
typedef struct ce_args {
    weft_tensor *x; // (N,C) contiguous: a new reference to the logits or their copy
    const void *tg;
    int tdt;
    int64_t tstride, N, C;
} ce_args;

static weft_status ce_prepare(const weft_op_args *a, ce_args *c) {
    const weft_tensor *t = a->in[1];
    c->N = a->in[0]->sizes[0];
    c->C = a->in[0]->sizes[1];
    c->tg = weft_tensor_ptr(t);
    c->tdt = t->dtype;
    c->tstride = t->ndim ? t->strides[0] : 0;
    if (!(c->x = weft_kernel_contiguous(a->in[0]))) return weft_last_status();
    return WEFT_OK;
}

static weft_status cu_cross_entropy(const weft_op_args *a) {
    ce_args c;
    weft_status st = ce_prepare(a, &c);
    if (st) return st;
    weft_tensor *out = a->out[0], *rowloss = NULL;
    if (c.N > 0 && !(rowloss = weft_tensor_new(1, &c.N, WEFT_F64, out->device))) {
        weft_tensor_free(c.x);
        return weft_last_status();
    }
    cudaError_t e = weft_cu_cross_entropy(weft_tensor_ptr(c.x), c.x->dtype, c.tg, c.tdt, c.tstride, c.N, c.C,
                                          rowloss ? (double *)weft_tensor_ptr(rowloss) : NULL, weft_tensor_ptr(out),
                                          weft_cuda_report_slot(out->device.index), a->op->name, weft_cu_stream(out));
    weft_tensor_free(rowloss);
    weft_tensor_free(c.x);
    return weft_cu_done(e, a->op->name);
}

// in (logits, targets, g 0-d) -> dlogits (N,C)
static weft_status cu_cross_entropy_backward(const weft_op_args *a) {
    ce_args c;
    weft_status st = ce_prepare(a, &c);
    if (st) return st;
    weft_tensor *dx = a->out[0];
    cudaError_t e = weft_cu_cross_entropy_backward(weft_tensor_ptr(c.x), c.x->dtype, c.tg, c.tdt, c.tstride, c.N, c.C,
                                                   weft_tensor_ptr(a->in[2]), weft_tensor_ptr(dx),
                                                   weft_cuda_report_slot(dx->device.index), a->op->name,
                                                   weft_cu_stream(dx));
    weft_tensor_free(c.x);
    return weft_cu_done(e, a->op->name);
}

// dropout: y = x * keep / (1 - p), the CPU's mask element for element.
static weft_status cu_dropout(const weft_op_args *a) {
    weft_tensor *y = a->out[0];
    if (y->numel == 0) return WEFT_OK;
    if (weft_dtype_is_half(y->dtype)) return weft_kernel_widened(a, cu_dropout); // the f32 mask
    cudaError_t e = weft_cu_dropout(weft_cu_desc(a->in[0]), weft_tensor_ptr(y), (uint64_t)a->attrs->i[0],
                                    (uint64_t)a->attrs->i[1], a->attrs->f[0], weft_cu_stream(y));
    return weft_cu_done(e, a->op->name);
}

void weft_cuda_register_nn(void) {
    weft_cu_register("softmax", cu_softmax, WEFT_DT_FLOAT | WEFT_DT_HALF);
    weft_cu_register("log_softmax", cu_softmax, WEFT_DT_FLOAT | WEFT_DT_HALF);
    weft_cu_register("softmax_backward", cu_softmax_backward, WEFT_DT_FLOAT);
    weft_cu_register("log_softmax_backward", cu_softmax_backward, WEFT_DT_FLOAT);
    weft_cu_register("cross_entropy", cu_cross_entropy, WEFT_DT_FLOAT | WEFT_DT_HALF);
    weft_cu_register("cross_entropy_backward", cu_cross_entropy_backward, WEFT_DT_FLOAT | WEFT_DT_HALF);
    weft_cu_register("dropout", cu_dropout, WEFT_DT_FLOAT | WEFT_DT_HALF);
}
