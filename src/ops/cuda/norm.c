// CUDA kernels of the normalisation family (layer_norm, batch_norm and their
// fused backward ops), mirroring cpu/norm.c. Attrs (see def_norm.c):
//   layer_norm           i[0] = n_norm_dims, i[1] = has weight, i[2] = has bias, i[3] = y's half dtype
//                        (0: none; the op's infer sets out[0]'s dtype); f[0] = eps
//   layer_norm_backward  i[0] = n_norm_dims, i[1] = has weight, i[2] = want dweight/dbias; and
//                        add_layer_norm_backward (the same kernel) also i[3] = has gs (added to dx), i[4]: dx
//                        also in a half dtype (output 3)
//   batch_norm           i[0] = has weight, i[1] = has bias, i[2] = has running_mean, i[3] = has running_var,
//                        i[4] = training; f[0] = momentum, f[1] = eps
//   batch_norm_backward  i[0] = has weight, i[1] = training, i[2] = want dweight/dbias
// batch_norm writes running_mean/var in place in training (WEFT_OPF_STATEFUL).
#include "cuda_ops.h"
#include "norm_kernels.h"


// -1 for t in the statistics' dtype (stat), else t's half dtype.
static int half_of(const weft_tensor *t, const weft_tensor *stat) {
    return t->dtype == stat->dtype ? -1 : t->dtype;
}

static int64_t ln_row(const weft_tensor *x, int64_t n) {
    int64_t C = 1;
    for (int d = x->ndim - (int)n; d < x->ndim; d++) C *= x->sizes[d];
    return C;
}

// in: x, [weight], [bias]; out: y, mean, rstd (the leading dims)
static weft_status cu_layer_norm(const weft_op_args *a) {
    weft_kernel_inputs c;
    weft_status st = weft_kernel_inputs_get(a, &c);
    if (st) return st;
    const weft_tensor *x = c.t[0];
    bool hw = a->attrs->i[1] != 0, hb = a->attrs->i[2] != 0;
    const weft_tensor *w = hw ? c.t[1] : NULL, *b = hb ? c.t[1 + hw] : NULL;
    int64_t C = ln_row(x, a->attrs->i[0]), R = a->out[1]->numel;
    cudaError_t e = weft_cu_layer_norm(weft_tensor_ptr(x), w ? weft_tensor_ptr(w) : NULL, b ? weft_tensor_ptr(b) : NULL,
                                       weft_tensor_ptr(a->out[0]), weft_tensor_ptr(a->out[1]),
                                       weft_tensor_ptr(a->out[2]), x->dtype, half_of(a->out[0], a->out[1]), R, C,
                                       a->attrs->f[0], weft_cu_stream(a->out[0]));
    weft_kernel_inputs_free(&c);
    return weft_cu_done(e, a->op->name);
}

// in: x, r, [weight], [bias]; out: s = x + r, y, mean, rstd (infer: all contiguous)
static weft_status cu_add_layer_norm(const weft_op_args *a) {
    const weft_tensor *x = a->in[0], *r = a->in[1];
    bool hw = a->attrs->i[1] != 0, hb = a->attrs->i[2] != 0;
    const weft_tensor *w = hw ? a->in[2] : NULL, *b = hb ? a->in[2 + hw] : NULL;
    int64_t C = ln_row(x, a->attrs->i[0]), R = a->out[2]->numel;
    cudaError_t e = weft_cu_add_layer_norm(weft_tensor_ptr(x), weft_tensor_ptr(r), r->dtype, weft_tensor_ptr(a->out[0]),
                                           w ? weft_tensor_ptr(w) : NULL, b ? weft_tensor_ptr(b) : NULL,
                                           weft_tensor_ptr(a->out[1]), weft_tensor_ptr(a->out[2]),
                                           weft_tensor_ptr(a->out[3]), x->dtype, half_of(a->out[1], a->out[2]), R,
                                           C, a->attrs->f[0], weft_cu_stream(a->out[0]));
    return weft_cu_done(e, a->op->name);
}

// in: gy, x, mean, rstd, [weight]; out: dx, dweight, dbias (zeros when not wanted)
static weft_status cu_layer_norm_backward(const weft_op_args *a) {
    weft_kernel_inputs c;
    weft_status st = weft_kernel_inputs_get(a, &c);
    if (st) return st;
    const weft_tensor *x = c.t[1];
    const bool add = a->n_out == 4; // add_layer_norm_backward
    const weft_tensor *w = a->attrs->i[1] ? c.t[4] : NULL, *gs = add && a->attrs->i[3] ? c.t[4 + (w != NULL)] : NULL;
    weft_tensor *dxh = add && a->out[3]->numel ? a->out[3] : NULL;
    bool want_wb = a->attrs->i[2] != 0;
    int64_t C = ln_row(x, a->attrs->i[0]), R = c.t[2]->numel;
    cudaStream_t s = weft_cu_stream(a->out[0]);
    weft_tensor *part = NULL;
    cudaError_t e = cudaSuccess;
    const weft_dtype ft = (weft_dtype)a->out[1]->dtype; // the statistics' (f32 for a bf16 / f16 x)
    if (want_wb && R > 0 && C > 0) {
        int64_t np = weft_cu_layer_norm_part_elems(R, C);
        if (!(part = weft_tensor_new(1, &np, ft, x->device))) {
            weft_kernel_inputs_free(&c);
            return weft_last_status();
        }
    } else if (!want_wb) {
        size_t bytes = (size_t)C * weft_dtype_size(ft);
        if (bytes) e = cudaMemsetAsync(weft_tensor_ptr(a->out[1]), 0, bytes, s);
        if (bytes && e == cudaSuccess) e = cudaMemsetAsync(weft_tensor_ptr(a->out[2]), 0, bytes, s);
    }
    if (e == cudaSuccess)
        e = weft_cu_layer_norm_backward(
            weft_tensor_ptr(c.t[0]), half_of(c.t[0], c.t[2]), weft_tensor_ptr(x), weft_tensor_ptr(c.t[2]),
            weft_tensor_ptr(c.t[3]), w ? weft_tensor_ptr(w) : NULL, gs ? weft_tensor_ptr(gs) : NULL,
            weft_tensor_ptr(a->out[0]), dxh ? weft_tensor_ptr(dxh) : NULL, dxh ? weft_cu_desc(dxh).dtype : -1,
            want_wb ? weft_tensor_ptr(a->out[1]) : NULL,
            want_wb ? weft_tensor_ptr(a->out[2]) : NULL, part ? weft_tensor_ptr(part) : NULL, x->dtype, R, C, s);
    weft_tensor_free(part);
    weft_kernel_inputs_free(&c);
    return weft_cu_done(e, a->op->name);
}

// A per-channel vector (1-D, any stride) or absent.
static weft_cu_vec vec(const weft_tensor *t) {
    weft_cu_vec v = {NULL, 0};
    if (t) {
        v.data = weft_tensor_ptr(t);
        v.stride = t->ndim ? t->strides[0] : 0;
    }
    return v;
}

// x as (N,C,S), S the product of the spatial dims.
static void bn_dims(const weft_tensor *x, int64_t *N, int64_t *C, int64_t *S) {
    *N = x->sizes[0];
    *C = x->ndim > 1 ? x->sizes[1] : 1;
    *S = *C && *N ? x->numel / (*N * *C) : 0;
}

// in: x, [weight], [bias], [running_mean], [running_var]; out: y, mean, invstd (C)
static weft_status cu_batch_norm(const weft_op_args *a) {
    const weft_tensor *x = a->in[0], *tmp = NULL;
    weft_tensor *xc = NULL;
    if (!weft_tensor_is_contiguous(x)) { // infer asks for a contiguous x; kept safe anyway
        if (!(xc = weft_tensor_new(x->ndim, x->sizes, (weft_dtype)x->dtype, x->device))) return weft_last_status();
        if (weft_cuda_copy(xc, x) != WEFT_OK) {
            weft_tensor_free(xc);
            return weft_last_status();
        }
        tmp = xc;
    }
    const int64_t *at = a->attrs->i;
    int k = 1;
    const weft_tensor *w = at[0] ? a->in[k++] : NULL, *b = at[1] ? a->in[k++] : NULL;
    weft_tensor *rm = at[2] ? a->in[k++] : NULL, *rv = at[3] ? a->in[k++] : NULL;
    int64_t N, C, S;
    bn_dims(x, &N, &C, &S);
    cudaError_t e = weft_cu_batch_norm(weft_tensor_ptr(tmp ? tmp : x), weft_tensor_ptr(a->out[0]), vec(w), vec(b),
                                       vec(rm), vec(rv), weft_tensor_ptr(a->out[1]), weft_tensor_ptr(a->out[2]),
                                       x->dtype, N, C, S, at[4] != 0, a->attrs->f[0], a->attrs->f[1],
                                       weft_cu_stream(a->out[0]));
    weft_tensor_free(xc);
    return weft_cu_done(e, a->op->name);
}

// in: gy, x, mean, invstd, [weight]; out: dx, dweight, dbias (C; zeros when not wanted)
static weft_status cu_batch_norm_backward(const weft_op_args *a) {
    weft_kernel_inputs c;
    weft_status st = weft_kernel_inputs_get(a, &c);
    if (st) return st;
    const weft_tensor *x = c.t[1];
    int64_t N, C, S;
    bn_dims(x, &N, &C, &S);
    const weft_tensor *w = a->attrs->i[0] ? c.t[4] : NULL;
    cudaError_t e = weft_cu_batch_norm_backward(
        weft_tensor_ptr(c.t[0]), weft_tensor_ptr(x), weft_tensor_ptr(c.t[2]), weft_tensor_ptr(c.t[3]), vec(w),
        weft_tensor_ptr(a->out[0]), weft_tensor_ptr(a->out[1]), weft_tensor_ptr(a->out[2]), x->dtype, N, C, S,
        a->attrs->i[1] != 0, a->attrs->i[2] != 0, weft_cu_stream(a->out[0]));
    weft_kernel_inputs_free(&c);
    return weft_cu_done(e, a->op->name);
}

void weft_cuda_register_norm(void) {
    weft_cu_register("layer_norm", cu_layer_norm, WEFT_DT_FLOAT | WEFT_DT_HALF);
    weft_cu_register("layer_norm_backward", cu_layer_norm_backward, WEFT_DT_FLOAT | WEFT_DT_HALF);
    weft_cu_register("add_layer_norm_backward", cu_layer_norm_backward, WEFT_DT_FLOAT | WEFT_DT_HALF);
    weft_cu_register("add_layer_norm", cu_add_layer_norm, WEFT_DT_FLOAT);
    weft_cu_register("batch_norm", cu_batch_norm, WEFT_DT_FLOAT);
    weft_cu_register("batch_norm_backward", cu_batch_norm_backward, WEFT_DT_FLOAT);
}
