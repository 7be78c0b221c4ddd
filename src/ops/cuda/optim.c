// The optimiser ops on CUDA (src/ops/def_optim.c): the fused updates of every
// optimiser kind, and clipping's grad_sumsq and grad_scale. Output j of an
// update is input j updated; the kernels read element i of every input
// before they write element i of the outputs, so an output may be its
// input's own storage (the in-place update of weft_optim_step and of the
// graph executor). Inputs may be strided (a transposed gradient); the host
// scalars (0-d tensors on the device) are read by the kernels, so nothing
// waits for the host.
#include "../optim.h"
#include "cuda_ops.h"
#include "optim_kernels.h"

static weft_cu_scalar scalar(const weft_tensor *t) { return (weft_cu_scalar){weft_tensor_ptr(t), t->dtype}; }
#define OUT(j) ((void *)weft_tensor_ptr(a->out[j]))

// (p, [buf], g, lr, [first]) -> (p', [buf']); f = weight_decay, momentum, dampening; i[0] = nesterov
static weft_status cu_sgd(const weft_op_args *a) {
    weft_tensor *const *in = a->in;
    const weft_attrs *at = a->attrs;
    weft_cu_tensor none = {0};
    cudaError_t e;
    if (a->op->variant & WEFT_OPTIM_V_MOMENTUM)
        e = weft_cu_sgd_update(weft_cu_desc(in[0]), weft_cu_desc(in[1]), weft_cu_desc(in[2]), OUT(0), OUT(1),
                               scalar(in[3]), scalar(in[4]), at->f[0], at->f[1], at->f[2], at->i[0] != 0,
                               weft_cu_stream(a->out[0]));
    else
        e = weft_cu_sgd_update(weft_cu_desc(in[0]), none, weft_cu_desc(in[1]), OUT(0), NULL, scalar(in[2]),
                               scalar(in[2]), at->f[0], 0, 0, 0, weft_cu_stream(a->out[0]));
    return weft_cu_done(e, a->op->name);
}

// (p, sum, g, clr) -> (p', sum'); f = weight_decay, eps
static weft_status cu_adagrad(const weft_op_args *a) {
    weft_tensor *const *in = a->in;
    cudaError_t e = weft_cu_adagrad_update(weft_cu_desc(in[0]), weft_cu_desc(in[1]), weft_cu_desc(in[2]), OUT(0),
                                           OUT(1), scalar(in[3]), a->attrs->f[0], a->attrs->f[1],
                                           weft_cu_stream(a->out[0]));
    return weft_cu_done(e, a->op->name);
}

// (p, sq, [buf], [ga], g, lr) -> (p', sq', [buf'], [ga']); f = weight_decay, eps, alpha, momentum
static weft_status cu_rmsprop(const weft_op_args *a) {
    weft_tensor *const *in = a->in;
    const weft_attrs *at = a->attrs;
    int v = a->op->variant, k = 2, n_out = a->op->n_out;
    weft_cu_tensor buf = {0}, ga = {0};
    void *buf_out = NULL, *ga_out = NULL;
    if (v & WEFT_OPTIM_V_MOMENTUM) buf = weft_cu_desc(in[k]), buf_out = OUT(k), k++;
    if (v & WEFT_OPTIM_V_CENTERED) ga = weft_cu_desc(in[k]), ga_out = OUT(k), k++;
    cudaError_t e = weft_cu_rmsprop_update(weft_cu_desc(in[0]), weft_cu_desc(in[1]), buf, ga, weft_cu_desc(in[n_out]),
                                           OUT(0), OUT(1), buf_out, ga_out, scalar(in[n_out + 1]), at->f[0],
                                           at->f[1], at->f[2], at->f[3], weft_cu_stream(a->out[0]));
    return weft_cu_done(e, a->op->name);
}

// (p, m, v, [vmax], g, lr, step_size, bc2_sqrt) -> (p', m', v', [vmax']); f = beta1, beta2, eps, weight_decay;
// i[0] = AdamW
static weft_status cu_adam(const weft_op_args *a) {
    weft_tensor *const *in = a->in;
    const weft_attrs *at = a->attrs;
    int n_out = a->op->n_out;
    bool ams = a->op->variant & WEFT_OPTIM_V_AMSGRAD;
    weft_cu_tensor vmax = {0};
    if (ams) vmax = weft_cu_desc(in[3]);
    cudaError_t e = weft_cu_adam_update(weft_cu_desc(in[0]), weft_cu_desc(in[1]), weft_cu_desc(in[2]), vmax,
                                        weft_cu_desc(in[n_out]), OUT(0), OUT(1), OUT(2), ams ? OUT(3) : NULL,
                                        scalar(in[n_out + 1]), scalar(in[n_out + 2]), scalar(in[n_out + 3]), at->f[0],
                                        at->f[1], at->f[2], at->f[3], at->i[0] != 0, weft_cu_stream(a->out[0]));
    return weft_cu_done(e, a->op->name);
}

// (acc, x) -> acc + sum of x*x (0-d f64), through a scratch of per-block partial sums.
static weft_status cu_sumsq(const weft_op_args *a) {
    int64_t nb = weft_cu_sumsq_blocks(a->in[1]->numel);
    weft_tensor *part = weft_tensor_new(1, &nb, WEFT_F64, a->out[0]->device);
    if (!part) return weft_last_status();
    cudaError_t e = weft_cu_sumsq(weft_cu_desc(a->in[1]), WEFT_PTR(double, part), WEFT_PTR(double, a->in[0]),
                                  WEFT_PTR(double, a->out[0]), weft_cu_stream(a->out[0]));
    weft_tensor_free(part); // the allocator reuses it only for work queued after the kernels on this stream
    return weft_cu_done(e, a->op->name);
}

// (g, c) -> g * (T)c; the output may be g's own storage.
static weft_status cu_scale(const weft_op_args *a) {
    cudaError_t e = weft_cu_scale(weft_cu_desc(a->in[0]), OUT(0), scalar(a->in[1]), weft_cu_stream(a->out[0]));
    return weft_cu_done(e, a->op->name);
}

void weft_cuda_register_optim(void) {
    weft_cu_register("sgd_update", cu_sgd, WEFT_DT_FLOAT);
    weft_cu_register("sgd_momentum_update", cu_sgd, WEFT_DT_FLOAT);
    weft_cu_register("adagrad_update", cu_adagrad, WEFT_DT_FLOAT);
    weft_cu_register("rmsprop_update", cu_rmsprop, WEFT_DT_FLOAT);
    weft_cu_register("rmsprop_momentum_update", cu_rmsprop, WEFT_DT_FLOAT);
    weft_cu_register("rmsprop_centered_update", cu_rmsprop, WEFT_DT_FLOAT);
    weft_cu_register("rmsprop_centered_momentum_update", cu_rmsprop, WEFT_DT_FLOAT);
    weft_cu_register("adam_update", cu_adam, WEFT_DT_FLOAT);
    weft_cu_register("adam_amsgrad_update", cu_adam, WEFT_DT_FLOAT);
    weft_cu_register("grad_sumsq", cu_sumsq, WEFT_DT_FLOAT);
    weft_cu_register("grad_scale", cu_scale, WEFT_DT_FLOAT);
}
