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

// (acc, x_1, ..., x_k) -> acc + the sums of x_i*x_i in order (0-d f64), through a scratch of per-block
// partial sums: contiguous inputs of one dtype two launches per WEFT_CU_SUMSQ_TABLE of them (the
// same bits as one call each), any other input its own two launches.
static weft_status cu_sumsq(const weft_op_args *a) {
    const double *acc = WEFT_PTR(double, a->in[0]);
    double *out = WEFT_PTR(double, a->out[0]);
    cudaStream_t s = weft_cu_stream(a->out[0]);
    weft_status st = WEFT_OK;
    for (int i = 1; i < a->n_in && st == WEFT_OK; acc = out) {
        const weft_tensor *x = a->in[i];
        weft_cu_sumsq_table t = {0};
        int64_t nb = 0;
        while (i < a->n_in && t.count < WEFT_CU_SUMSQ_TABLE && weft_tensor_is_contiguous(a->in[i]) &&
               a->in[i]->dtype == x->dtype) {
            t.x[t.count] = weft_tensor_ptr(a->in[i]), t.n[t.count++] = a->in[i]->numel;
            nb += weft_cu_sumsq_blocks(a->in[i++]->numel);
        }
        if (!t.count) nb = weft_cu_sumsq_blocks(x->numel), i++; // a strided input: alone
        weft_tensor *part = weft_tensor_new(1, &nb, WEFT_F64, a->out[0]->device);
        if (!part) return weft_last_status();
        cudaError_t e = t.count ? weft_cu_sumsq_multi(t, x->dtype, WEFT_PTR(double, part), acc, out, s)
                                : weft_cu_sumsq(weft_cu_desc(x), WEFT_PTR(double, part), acc, out, s);
        weft_tensor_free(part); // the allocator reuses it only for work queued after the kernels on this stream
        st = weft_cu_done(e, a->op->name);
    }
    return st;
}

// (g, c) -> g * (T)c; the output may be g's own storage.
static weft_status cu_scale(const weft_op_args *a) {
    cudaError_t e = weft_cu_scale(weft_cu_desc(a->in[0]), OUT(0), scalar(a->in[1]), weft_cu_stream(a->out[0]));
    return weft_cu_done(e, a->op->name);
}

// update_multi: Adam / AdamW groups of one dtype as multi-tensor launches of
// up to WEFT_CU_ADAM_TABLE tensors each; other kinds (and a dtype mix) run the
// update op's own kernel per group.
static weft_status cu_update_multi(const weft_op_args *a) {
    const weft_op_def *u;
    int k;
    weft_status st = weft_update_multi_groups(a, &u, &k);
    if (st) return st;
    weft_tensor *buf[WEFT_UPDATE_MAX_IN];
    bool adam = u->kernel[WEFT_CUDA].fn == cu_adam, ams = u->variant & WEFT_OPTIM_V_AMSGRAD;
    for (int j = 0; j < k && adam; j++) adam = a->in[j * (u->n_out + 1)]->dtype == a->in[0]->dtype;
    if (!adam) {
        for (int j = 0; j < k && st == WEFT_OK; j++) {
            weft_op_args g = weft_update_multi_group(a, u, j, buf);
            st = u->kernel[WEFT_CUDA].fn(&g);
        }
        return st;
    }
    const weft_attrs *at = a->attrs;
    weft_tensor *const *sc = a->in + a->n_in - 3; // lr, step_size, bc2_sqrt
    for (int j0 = 0; j0 < k && st == WEFT_OK; j0 += WEFT_CU_ADAM_TABLE) {
        weft_cu_adam_table t = {0};
        for (int j = j0; j < k && t.count < WEFT_CU_ADAM_TABLE; j++) {
            weft_op_args g = weft_update_multi_group(a, u, j, buf); // p, m, v, [vmax], g (contiguous: infer)
            int c = t.count++;
            t.p[c] = weft_tensor_ptr(g.in[0]), t.m[c] = weft_tensor_ptr(g.in[1]), t.v[c] = weft_tensor_ptr(g.in[2]);
            t.vmax[c] = ams ? weft_tensor_ptr(g.in[3]) : NULL;
            t.g[c] = weft_tensor_ptr(g.in[u->n_out]);
            t.n[c] = g.in[0]->numel;
        }
        st = weft_cu_done(weft_cu_adam_multi(t, a->in[0]->dtype, scalar(sc[0]), scalar(sc[1]), scalar(sc[2]),
                                             at->f[0], at->f[1], at->f[2], at->f[3], at->i[0] != 0,
                                             weft_cu_stream(a->in[0])),
                          a->op->name);
    }
    return st;
}

void weft_cuda_register_optim(void) {
    weft_cu_register("update_multi", cu_update_multi, WEFT_DT_FLOAT);
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
