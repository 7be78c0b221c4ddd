// Copies on one CUDA device: weft_cuda_copy (strided, broadcast, converting),
// and the kernels of the ops that are nothing else: copy (contiguous
// clone), cast and cast_multi.
#include <stdint.h>

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

// cast_multi (x_1..x_k, y_1..y_k): the pairs the multi-tensor kernel takes (contiguous, aligned, f32 to
// bf16 / f16) in launches of up to WEFT_CU_CAST_TABLE; every other pair through weft_cu_copy, as cast runs it
// (the pairs are independent: no destination overlaps a source).
static weft_status cu_cast_multi(const weft_op_args *a) {
    int k = a->n_in / 2;
    weft_cu_cast_table t = {0};
    int tin = -1, tout = -1; // the table's dtypes
    cudaStream_t s = weft_cu_stream(a->in[0]);
    weft_status st = WEFT_OK;
    for (int j = 0; j <= k && st == WEFT_OK; j++) {
        const weft_tensor *x = j < k ? a->in[j] : NULL, *y = j < k ? a->in[k + j] : NULL;
        weft_cu_tensor dx = x ? weft_cu_desc(x) : (weft_cu_tensor){0}, dy = y ? weft_cu_desc(y) : (weft_cu_tensor){0};
        bool multi = x && weft_tensor_is_contiguous(x) && weft_cu_cast_multi_supports(dx.dtype, dy.dtype) &&
                     ((uintptr_t)dx.data & 15) == 0 && ((uintptr_t)dy.data & 7) == 0;
        if (t.count && (!x || t.count == WEFT_CU_CAST_TABLE || (multi && (dx.dtype != tin || dy.dtype != tout)))) {
            st = weft_cu_done(weft_cu_cast_multi(t, tin, tout, s), a->op->name); // the table so far
            t.count = 0;
        }
        if (!x || st) break;
        if (!multi) {
            if (x->numel) st = weft_cu_done(weft_cu_copy(dy, weft_cu_desc_bcast(x, y->ndim, y->sizes), s), a->op->name);
            continue;
        }
        tin = dx.dtype, tout = dy.dtype;
        t.x[t.count] = dx.data, t.y[t.count] = dy.data, t.n[t.count++] = x->numel;
    }
    return st;
}

void weft_cuda_register_copy(void) {
    weft_tensor_copy_register(WEFT_CUDA, weft_cuda_copy); // weft_tensor_copy_ between CUDA tensors
    weft_cu_register("copy", cu_copy_op, WEFT_DT_ALL);
    weft_cu_register("cast", cu_copy_op, WEFT_DT_ALL);
    weft_cu_register("cast_multi", cu_cast_multi, WEFT_DT_ALL);
}
