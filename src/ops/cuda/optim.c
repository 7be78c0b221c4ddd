// The fused optimiser updates on CUDA (src/ops/def_optim.c): sgd_update,
// sgd_momentum_update, adam_update. Output j is input j updated; the kernel
// reads element i of every input before it writes element i of the outputs,
// so an output may be its input's own storage (the graph executor's in-place
// update). Inputs may be strided (a transposed gradient); the host scalars
// (0-d tensors on the device) are read by the kernel, so nothing waits.
#include "cuda_ops.h"
#include "optim_kernels.h"

static weft_cu_scalar scalar(const weft_tensor *t) {
    return (weft_cu_scalar){weft_tensor_ptr(t), t->dtype};
}

static weft_status cu_optim_update(const weft_op_args *a) {
    weft_tensor *const *in = a->in, *const *out = a->out;
    const weft_attrs *at = a->attrs;
    weft_cu_tensor none = {0};
    cudaStream_t s = weft_cu_stream(out[0]);
    cudaError_t e;
    switch (a->op->variant) {
    case 0: // (p, g, lr) -> p'; f[0] = weight_decay
        e = weft_cu_sgd_update(weft_cu_desc(in[0]), none, weft_cu_desc(in[1]), weft_tensor_ptr(out[0]), NULL,
                               scalar(in[2]), scalar(in[2]), at->f[0], 0, 0, 0, s);
        break;
    case 1: // (p, buf, g, lr, first) -> (p', buf'); f[0..2] = weight_decay, momentum, dampening; i[0] = nesterov
        e = weft_cu_sgd_update(weft_cu_desc(in[0]), weft_cu_desc(in[1]), weft_cu_desc(in[2]), weft_tensor_ptr(out[0]),
                               weft_tensor_ptr(out[1]), scalar(in[3]), scalar(in[4]), at->f[0], at->f[1], at->f[2],
                               at->i[0] != 0, s);
        break;
    default: // (p, m, v, g, lr, step_size, bc2_sqrt) -> (p', m', v'); f = beta1, beta2, eps, weight_decay; i[0] = AdamW
        e = weft_cu_adam_update(weft_cu_desc(in[0]), weft_cu_desc(in[1]), weft_cu_desc(in[2]), weft_cu_desc(in[3]),
                                weft_tensor_ptr(out[0]), weft_tensor_ptr(out[1]), weft_tensor_ptr(out[2]),
                                scalar(in[4]), scalar(in[5]), scalar(in[6]), at->f[0], at->f[1], at->f[2], at->f[3],
                                at->i[0] != 0, s);
        break;
    }
    return weft_cu_done(e, a->op->name);
}

void weft_cuda_register_optim(void) {
    weft_cu_register("sgd_update", cu_optim_update, WEFT_DT_FLOAT);
    weft_cu_register("sgd_momentum_update", cu_optim_update, WEFT_DT_FLOAT);
    weft_cu_register("adam_update", cu_optim_update, WEFT_DT_FLOAT);
}
