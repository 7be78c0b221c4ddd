// CUDA kernels of the fused LSTM ops (lstm_kernels.cu; def_lstm.c has the
// maths): lstm_cell (gates[, c_prev]) -> (h, c) and lstm_cell_backward
// (gates, [c_prev], c, [dh], [dc]) -> (dgates, dc_prev); lstm_seq (xg, w_hh)
// -> (hs, acts, cs) and lstm_seq_backward (w_hh, hs, acts, cs, dhs) -> (dxg,
// dw_hh), as cpu/lstm.c: per step one cuBLAS product and one gate kernel, all
// queued on the output's stream (the cuBLAS handle is bound to it). f32 and
// f64. Inputs that are strided views get a contiguous device copy here;
// outputs are contiguous (allocated by the dispatcher).
#include "blas.h"
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

// Row-major C (M,N) = op(A) op(B) + beta C (op: stored transposed when ta /
// tb), device pointers, f32 or f64 computed in their own precision. cuBLAS
// is column-major, so it computes C^T = op(B)^T op(A)^T: the operands swap
// places and each keeps its flag and leading dim (as cuda/linalg.c).
static weft_status gemm_rm(cublasHandle_t h, weft_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                           const void *A, int64_t lda, const void *B, int64_t ldb, double beta, void *C, int64_t ldc,
                           const char *op) {
    const float one_f = 1, beta_f = (float)beta;
    const double one_d = 1;
    bool d = dt == WEFT_F64;
    cudaDataType_t ty = d ? CUDA_R_64F : CUDA_R_32F;
    cublasStatus_t s = cublasGemmEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M,
                                    (int)K, d ? (const void *)&one_d : (const void *)&one_f, B, ty, (int)ldb, A, ty,
                                    (int)lda, d ? (const void *)&beta : (const void *)&beta_f, C, ty, (int)ldc,
                                    d ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return weft_cu_blas_check(s, op, "cublasGemmEx");
}

// (xg (B,T,4H), w_hh (4H,H)) -> (hs (B,T,H), acts (B,T,4H), cs (B,T,H)); infer
// has checked shapes, dtypes and that B*T and T*4H fit in an int.
static weft_status cu_lstm_seq(const weft_op_args *a) {
    const char *op = a->op->name;
    const weft_tensor *xg = a->in[0];
    if (a->n_in != 2 || xg->ndim != 3) return weft_error(WEFT_ERR_ARG, "%s: expected (xg (B,T,4H), w_hh)", op);
    int64_t B = xg->sizes[0], T = xg->sizes[1], H = xg->sizes[2] / 4;
    if (B == 0 || T == 0 || H == 0) return WEFT_OK;
    weft_dtype dt = (weft_dtype)xg->dtype;
    size_t es = weft_dtype_size(dt);
    cublasHandle_t h;
    weft_status st = weft_cu_blas_handle(a->out[0], op, &h);
    if (st) return st;
    weft_kernel_inputs k;
    if ((st = weft_kernel_inputs_get(a, &k))) return st;
    cudaStream_t s = weft_cu_stream(a->out[0]);
    const char *w = weft_tensor_ptr(k.t[1]);
    char *hs = weft_tensor_ptr(a->out[0]), *acts = weft_tensor_ptr(a->out[1]), *cs = weft_tensor_ptr(a->out[2]);
    // acts starts as xg; each step adds its recurrent product into its rows (beta = 1)
    st = weft_cu_done(cudaMemcpyAsync(acts, weft_tensor_ptr(k.t[0]), (size_t)(B * T * 4 * H) * es,
                                      cudaMemcpyDeviceToDevice, s), op);
    int64_t lda = T * 4 * H, ldh = T * H;
    for (int64_t t = 0; t < T && !st; t++) {
        char *at = acts + (size_t)(t * 4 * H) * es, *ct = cs + (size_t)(t * H) * es, *ht = hs + (size_t)(t * H) * es;
        if (t > 0) // (B,H) @ (H,4H): h_{t-1} W_hh^T, W_hh stored (4H,H)
            st = gemm_rm(h, dt, false, true, B, 4 * H, H, ht - (size_t)H * es, ldh, w, H, 1.0, at, lda, op);
        if (!st)
            st = weft_cu_done(weft_cu_lstm_seq_step(at, t > 0 ? ct - (size_t)H * es : NULL, ct, ht, dt, B, H, lda, ldh,
                                                    s),
                              op);
    }
    weft_kernel_inputs_free(&k);
    return st;
}

// (w_hh, hs, acts, cs, dhs) -> (dxg (B,T,4H), dw_hh (4H,H)): reverse time,
// then dw_hh = dxg^T (4H,B*T) @ hprev (B*T,H), hprev[:,t] = h_{t-1} (zeros at
// t = 0), in one product. Workspace (device): rec, dc (B,H), hprev (B,T,H).
static weft_status cu_lstm_seq_backward(const weft_op_args *a) {
    const char *op = a->op->name;
    if (a->n_in != 5 || a->in[2]->ndim != 3)
        return weft_error(WEFT_ERR_ARG, "%s: expected (w_hh, hs, acts, cs, dhs)", op);
    const weft_tensor *acts_t = a->in[2];
    int64_t B = acts_t->sizes[0], T = acts_t->sizes[1], H = acts_t->sizes[2] / 4;
    weft_dtype dt = (weft_dtype)acts_t->dtype;
    size_t es = weft_dtype_size(dt);
    cudaStream_t s = weft_cu_stream(a->out[0]);
    char *dxg = weft_tensor_ptr(a->out[0]), *dw = weft_tensor_ptr(a->out[1]);
    if (H == 0) return WEFT_OK;
    if (B == 0 || T == 0) return weft_cu_done(cudaMemsetAsync(dw, 0, (size_t)(4 * H * H) * es, s), op);
    cublasHandle_t h;
    weft_status st = weft_cu_blas_handle(a->out[0], op, &h);
    if (st) return st;
    weft_kernel_inputs k;
    if ((st = weft_kernel_inputs_get(a, &k))) return st;
    const char *w = weft_tensor_ptr(k.t[0]), *hs = weft_tensor_ptr(k.t[1]), *acts = weft_tensor_ptr(k.t[2]);
    const char *cs = weft_tensor_ptr(k.t[3]), *dhs = weft_tensor_ptr(k.t[4]);
    int64_t nws = 2 * B * H + B * T * H;
    weft_tensor *ws = weft_tensor_new(1, &nws, dt, a->out[0]->device);
    if (!ws) {
        weft_kernel_inputs_free(&k);
        return weft_last_status();
    }
    char *rec = weft_tensor_ptr(ws), *dc = rec + (size_t)(B * H) * es, *hprev = rec + (size_t)(2 * B * H) * es;
    st = weft_cu_done(cudaMemsetAsync(rec, 0, (size_t)nws * es, s), op); // dc_T = 0, hprev[:,0] = 0
    int64_t lda = T * 4 * H, ldh = T * H;
    for (int64_t t = T - 1; t >= 0 && !st; t--) {
        if (t < T - 1) // (B,4H) @ (4H,H): the recurrent part of dh_t
            st = gemm_rm(h, dt, false, false, B, H, 4 * H, dxg + (size_t)((t + 1) * 4 * H) * es, lda, w, H, 0.0, rec,
                         H, op);
        size_t o4 = (size_t)(t * 4 * H) * es, o1 = (size_t)(t * H) * es;
        if (!st)
            st = weft_cu_done(weft_cu_lstm_seq_bw_step(acts + o4, t > 0 ? cs + o1 - (size_t)H * es : NULL, cs + o1,
                                                       dhs + o1, t < T - 1 ? rec : NULL, dc, dxg + o4, dt, B, H, lda,
                                                       ldh, s),
                              op);
    }
    if (!st && T > 1) // hprev[b,1:] = hs[b,:T-1], B rows of (T-1)*H at pitch T*H
        st = weft_cu_done(cudaMemcpy2DAsync(hprev + (size_t)H * es, (size_t)ldh * es, hs, (size_t)ldh * es,
                                            (size_t)((T - 1) * H) * es, (size_t)B, cudaMemcpyDeviceToDevice, s),
                          op);
    if (!st) st = gemm_rm(h, dt, true, false, 4 * H, H, B * T, dxg, 4 * H, hprev, H, 0.0, dw, H, op);
    weft_tensor_free(ws);
    weft_kernel_inputs_free(&k);
    return st;
}

void weft_cuda_register_lstm(void) {
    weft_cu_register("lstm_cell", cu_lstm_cell, WEFT_DT_FLOAT);
    weft_cu_register("lstm_cell_backward", cu_lstm_cell_backward, WEFT_DT_FLOAT);
    weft_cu_register("lstm_seq", cu_lstm_seq, WEFT_DT_FLOAT);
    weft_cu_register("lstm_seq_backward", cu_lstm_seq_backward, WEFT_DT_FLOAT);
}
