// The index family on CUDA: embedding, index_select, gather, scatter_add,
// their backward ops, concat and topk. Same semantics as cpu/index.c.
//
// Index values: the index tensor is read as contiguous int64 (converted on
// the device when it is int32 or strided) and checked against the indexed
// dim by a small kernel that reports a bad value to the host without making
// it wait (device/cuda/cuda_report.h): the op returns at once, and the next
// wait for the device (weft_tensor_item, a copy to the host, a synchronize)
// fails with an error naming the op, the value and its position, as the CPU's
// op itself does. The gathers read 0 and the scatters add nothing for a bad
// value, so it never reaches memory outside the tensors. No host wait means
// the index ops can be captured in a CUDA graph.
//
// Scatters (embedding_backward, index_select_backward, scatter_add) add
// with atomics: repeated indices accumulate, and float sums may differ from
// the CPU's in the last bits (the order of the additions is not fixed).
#include <string.h>

#include "../index.h"
#include "cuda_ops.h"
#include "index_kernels.h"

// *vals: ix's values as contiguous int64 on the device (ix itself, or a
// converted copy left in *tmp), each checked on the device to lie in
// [0, limit). op: a static string (the report keeps its address).
static weft_status index_load(const char *op, const weft_tensor *ix, int64_t limit, const int64_t **vals,
                              weft_tensor **tmp) {
    *tmp = NULL;
    *vals = NULL;
    if (ix->numel == 0) return WEFT_OK;
    weft_status st = WEFT_OK;
    if (ix->dtype == WEFT_I64 && weft_tensor_is_contiguous(ix)) {
        *vals = WEFT_PTR(const int64_t, ix);
    } else {
        *tmp = weft_tensor_new(ix->ndim, ix->sizes, WEFT_I64, ix->device);
        st = *tmp ? weft_cuda_copy(*tmp, ix) : weft_last_status();
        if (st == WEFT_OK) *vals = WEFT_PTR(const int64_t, *tmp);
    }
    if (st == WEFT_OK)
        st = weft_cu_done(weft_cu_index_check(*vals, ix->numel, limit, weft_cuda_report_slot(ix->device.index), op,
                                              weft_cu_stream(ix)),
                          op);
    if (st) {
        weft_tensor_free(*tmp);
        *tmp = NULL;
        *vals = NULL;
    }
    return st;
}

static weft_status finish(weft_status st, weft_tensor *tmp) {
    weft_tensor_free(tmp);
    return st;
}

static weft_status zero(weft_tensor *t, const char *op) {
    if (t->numel == 0) return WEFT_OK;
    size_t n = (size_t)t->numel * weft_dtype_size((weft_dtype)t->dtype);
    return weft_cu_done(cudaMemsetAsync(weft_tensor_ptr(t), 0, n, weft_cu_stream(t)), op);
}

// weight (V,D), indices (...) -> out (..., D): index_select of weight's rows.
static weft_status cu_embedding(const weft_op_args *a) {
    const weft_tensor *w = a->in[0], *ix = a->in[1];
    weft_tensor *out = a->out[0];
    const int64_t *idx;
    weft_tensor *tmp;
    weft_status st = index_load("embedding", ix, w->sizes[0], &idx, &tmp);
    if (st || out->numel == 0) return finish(st, tmp);
    weft_cu_tensor src = weft_cu_desc(w); // (n, D) at weight's strides
    src.sizes[0] = ix->numel;
    src.numel = out->numel;
    st = weft_cu_done(weft_cu_index_take(weft_tensor_ptr(out), src, 0, w->sizes[0], idx, 0, weft_cu_stream(out)), "embedding");
    return finish(st, tmp);
}

// g (..., D), indices (...) -> out (V, D): rows of g added into their index's row.
static weft_status cu_embedding_backward(const weft_op_args *a) {
    const char *op = "embedding_backward";
    weft_tensor *g = a->in[0], *out = a->out[0];
    const weft_tensor *ix = a->in[1];
    weft_status st = zero(out, op);
    if (st) return st;
    const int64_t *idx;
    weft_tensor *tmp;
    if ((st = index_load(op, ix, out->sizes[0], &idx, &tmp)) || g->numel == 0) return finish(st, tmp);
    // g read as (n, D): a contiguous copy first when it is strided
    weft_tensor *gc = weft_tensor_ref(g);
    if (!weft_tensor_is_contiguous(g)) {
        weft_tensor_free(gc);
        gc = weft_tensor_new(g->ndim, g->sizes, (weft_dtype)g->dtype, g->device);
        if (!gc) return finish(weft_last_status(), tmp);
        if ((st = weft_cuda_copy(gc, g))) {
            weft_tensor_free(gc);
            return finish(st, tmp);
        }
    }
    int64_t D = out->sizes[1];
    weft_cu_tensor src = weft_cu_desc(out), dst = weft_cu_desc(out);
    src.data = weft_tensor_ptr(gc);
    src.dtype = gc->dtype;
    src.sizes[0] = dst.sizes[0] = ix->numel;
    src.strides[0] = D;
    src.strides[1] = 1;
    src.numel = dst.numel = gc->numel;
    st = weft_cu_done(weft_cu_index_add(dst, src, 0, out->sizes[0], idx, 0, weft_cu_stream(out)), op);
    weft_tensor_free(gc);
    return finish(st, tmp);
}

// bf16 / f16 (a table made under autocast: the recurrent layers' folded input gates): g widened to f32, its rows
// added in f32 (the atomics) and each sum rounded once, as on the CPU.
static weft_status cu_embedding_backward_any(const weft_op_args *a) {
    weft_tensor *out = a->out[0];
    if (out->dtype != WEFT_BF16 && out->dtype != WEFT_F16) return cu_embedding_backward(a);
    weft_tensor *g32 = weft_tensor_new(a->in[0]->ndim, a->in[0]->sizes, WEFT_F32, out->device);
    weft_tensor *o32 = weft_tensor_new(out->ndim, out->sizes, WEFT_F32, out->device);
    weft_status st = g32 && o32 ? weft_cuda_copy(g32, a->in[0]) : weft_last_status();
    if (st == WEFT_OK) {
        weft_tensor *in[2] = {g32, a->in[1]};
        weft_op_args f = *a;
        f.in = in;
        f.out = &o32;
        st = cu_embedding_backward(&f);
    }
    if (st == WEFT_OK) st = weft_cuda_copy(out, o32);
    weft_tensor_free(g32); // at once, as cu_embedding_backward frees gc: later work on the stream is ordered after
    weft_tensor_free(o32);
    return st;
}

// t (A.., N, B..), index (n) -> out (A.., n, B..)
static weft_status cu_index_select(const weft_op_args *a) {
    const weft_tensor *t = a->in[0], *ix = a->in[1];
    weft_tensor *out = a->out[0];
    int dim = (int)a->attrs->i[0];
    const int64_t *idx;
    weft_tensor *tmp;
    weft_status st = index_load("index_select", ix, t->sizes[dim], &idx, &tmp);
    if (st || out->numel == 0) return finish(st, tmp);
    weft_cu_tensor src = weft_cu_desc(t);
    src.sizes[dim] = ix->numel;
    src.numel = out->numel;
    st = weft_cu_done(weft_cu_index_take(weft_tensor_ptr(out), src, dim, t->sizes[dim], idx, 0, weft_cu_stream(out)),
                      "index_select");
    return finish(st, tmp);
}

// g (A.., n, B..), index (n) -> out (A.., N, B..) = zeros with g's rows added at index
static weft_status cu_index_select_backward(const weft_op_args *a) {
    const char *op = "index_select_backward";
    const weft_tensor *g = a->in[0], *ix = a->in[1];
    weft_tensor *out = a->out[0];
    int dim = (int)a->attrs->i[0];
    weft_status st = zero(out, op);
    if (st) return st;
    const int64_t *idx;
    weft_tensor *tmp;
    if ((st = index_load(op, ix, out->sizes[dim], &idx, &tmp)) || g->numel == 0) return finish(st, tmp);
    weft_cu_tensor src = weft_cu_desc(g), dst = weft_cu_desc(out);
    dst.sizes[dim] = g->sizes[dim];
    dst.numel = g->numel;
    st = weft_cu_done(weft_cu_index_add(dst, src, dim, out->sizes[dim], idx, 0, weft_cu_stream(out)), op);
    return finish(st, tmp);
}

// t, index (same ndim) -> out (index's shape): out[..i..] = t[..index[..i..] at dim..]
static weft_status cu_gather(const weft_op_args *a) {
    const weft_tensor *t = a->in[0], *ix = a->in[1];
    weft_tensor *out = a->out[0];
    int dim = (int)a->attrs->i[0];
    const int64_t *idx;
    weft_tensor *tmp;
    weft_status st = index_load("gather", ix, t->sizes[dim], &idx, &tmp);
    if (st || out->numel == 0) return finish(st, tmp);
    weft_cu_tensor src = weft_cu_desc(t); // the index's positions at t's strides
    memcpy(src.sizes, ix->sizes, sizeof(int64_t) * (size_t)ix->ndim);
    src.numel = ix->numel;
    st = weft_cu_done(weft_cu_index_take(weft_tensor_ptr(out), src, dim, t->sizes[dim], idx, 1, weft_cu_stream(out)), "gather");
    return finish(st, tmp);
}

// t, index, src (same ndim) -> out = t with src[..i..] added at t[..index[..i..] at dim..]
static weft_status cu_scatter_add(const weft_op_args *a) {
    const weft_tensor *t = a->in[0], *ix = a->in[1], *sr = a->in[2];
    weft_tensor *out = a->out[0];
    int dim = (int)a->attrs->i[0];
    const int64_t *idx;
    weft_tensor *tmp;
    weft_status st = index_load("scatter_add", ix, t->sizes[dim], &idx, &tmp);
    if (st) return st;
    if ((st = out->numel ? weft_cuda_copy(out, t) : WEFT_OK) || ix->numel == 0) return finish(st, tmp);
    weft_cu_tensor dst = weft_cu_desc(out), src = weft_cu_desc(sr); // both over the index's positions
    memcpy(dst.sizes, ix->sizes, sizeof(int64_t) * (size_t)ix->ndim);
    memcpy(src.sizes, ix->sizes, sizeof(int64_t) * (size_t)ix->ndim);
    dst.numel = src.numel = ix->numel;
    st = weft_cu_done(weft_cu_index_add(dst, src, dim, out->sizes[dim], idx, 1, weft_cu_stream(out)), "scatter_add");
    return finish(st, tmp);
}

// ts[i] (A.., C_i, B..) -> out (A.., sum C_i, B..): each input copied into
// its slot of out (a strided view), one copy kernel (or memcpy) per input.
static weft_status cu_concat(const weft_op_args *a) {
    weft_tensor *out = a->out[0];
    int dim = (int)a->attrs->i[0];
    if (out->numel == 0) return WEFT_OK;
    int64_t at = 0;
    for (int i = 0; i < a->n_in; i++) {
        const weft_tensor *t = a->in[i];
        int64_t off = at * out->strides[dim];
        at += t->sizes[dim];
        if (t->numel == 0) continue;
        weft_tensor *slot = weft_tensor_alias(out, t->ndim, t->sizes, out->strides, out->offset + off);
        if (!slot) return weft_last_status();
        weft_status st = weft_cuda_copy(slot, t);
        weft_tensor_free(slot);
        if (st) return st;
    }
    return WEFT_OK;
}

static weft_status cu_topk(const weft_op_args *a) {
    weft_tensor *out = a->out[0];
    if (out->numel == 0) return WEFT_OK;
    return weft_cu_done(weft_cu_topk(WEFT_PTR(int64_t, out), weft_cu_desc(a->in[0]), (int)a->attrs->i[0],
                                     a->attrs->i[1], a->attrs->i[2] != 0, weft_cu_stream(out)),
                        "topk");
}

void weft_cuda_register_index(void) {
    weft_cu_register("embedding", cu_embedding, WEFT_DT_ALL);
    weft_cu_register("embedding_backward", cu_embedding_backward_any, WEFT_DT_NUM | WEFT_DT_HALF);
    weft_cu_register("index_select", cu_index_select, WEFT_DT_ALL);
    weft_cu_register("index_select_backward", cu_index_select_backward, WEFT_DT_NUM);
    weft_cu_register("gather", cu_gather, WEFT_DT_ALL);
    weft_cu_register("topk", cu_topk, WEFT_DT_NUM);
    weft_cu_register("scatter_add", cu_scatter_add, WEFT_DT_NUM);
    weft_cu_register("concat", cu_concat, WEFT_DT_ALL);
}
