// Copies on one CUDA device: weft_cuda_copy (strided, broadcast, converting),
// and the kernels of the ops that are nothing else: copy (contiguous
// clone) and cast.
#include "copy_kernels.h"
#include "cuda_ops.h"

weft_status weft_cuda_copy(weft_tensor *dst, const weft_tensor *src) {
    if (!weft_device_equal(dst->device, src->device) || dst->device.type != WEFT_CUDA)
        return weft_error(WEFT_ERR_DEVICE, "copy_: weft_cuda_copy needs two tensors on one CUDA device");
    if (dst->numel == 0) return WEFT_OK;
    weft_cu_tensor o = weft_cu_desc(dst), i = weft_cu_desc_bcast(src, dst->ndim, dst->sizes);
    return weft_cu_done(weft_cu_copy(o, i, weft_cu_stream(dst)), "copy_");
}

// copy and cast: out (contiguous, infer's shape and dtype) = in.
static weft_status cu_copy_op(const weft_op_args *a) {
    weft_tensor *out = a->out[0];
    if (out->numel == 0) return WEFT_OK;
    weft_cu_tensor o = weft_cu_desc(out), i = weft_cu_desc_bcast(a->in[0], out->ndim, out->sizes);
    return weft_cu_done(weft_cu_copy(o, i, weft_cu_stream(out)), a->op->name);
}

void weft_cuda_register_copy(void) {
    weft_tensor_copy_register(WEFT_CUDA, weft_cuda_copy); // weft_tensor_copy_ between CUDA tensors
    weft_cu_register("copy", cu_copy_op, WEFT_DT_ALL);
    weft_cu_register("cast", cu_copy_op, WEFT_DT_ALL);
}
