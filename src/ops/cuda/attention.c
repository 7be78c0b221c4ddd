// CUDA kernels of the fused causal attention ops (attention_kernels.cu):
//   causal_attention           in: q, k, v (B,H,T,D); out: o (B,H,T,D), lse (B,H,T); f[0] = scale
//   causal_attention_backward  in: q, k, v, o, lse, go; out: gq, gk, gv (B,H,T,D); f[0] = scale
//   causal_attention_qkv (and its backward): the two above on views of one packed (B,T,3C) (attention.h)
// with i[0] = 1, o and go are (B,T,H,D) (the heads last: def_attention.c); with the backward's i[1] = 1, so
// are gq, gk, gv (written in place by the tensor-core kernels; the f32 kernels' results are copied there).
// f32 and f64 (attention_kernels.cu); bf16 and f16 on tensor cores with f32
// statistics (attention_mma_kernels.cu) where D is 16, 32, 64 or 128, and
// otherwise the f32 kernels on widened copies (lse is f32 for the half types; WEFT_ATTN_MMA=0 takes these
// for every bf16 / f16 input, to compare the two). With WEFT_ATTN_CUDNN=1, the bf16 / f16 cases the tensor-core
// kernels would run go to cuDNN's fused attention instead where this build has it and cuDNN can run the
// shape (attention_cudnn.h; the same statistics, so either backward follows either forward).
// D up to 128 (above: WEFT_ERR_UNSUPPORTED naming the op).
// Inputs may be any strided view. The tensor-core kernels read q, k, v (and
// go) where they lie when each head's rows are 16-byte aligned with unit
// stride inside a row (weft_cu_heads: e.g. the heads of a (B,T,C) tensor);
// every other input, and every input of the f32 kernels, gets a contiguous
// device copy here.
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../attention.h"
#include "attention_cudnn.h"
#include "attention_kernels.h"
#include "cuda_ops.h"

// q (B,H,T,D) -> BH, T, D (infer has checked the shapes; kept safe anyway).
static weft_status attn_dims(const weft_op_args *a, int64_t *BH, int64_t *T, int64_t *D) {
    const weft_tensor *q = a->in[0];
    if (q->ndim != 4) return weft_error(WEFT_ERR_SHAPE, "%s: q must be 4-D (B,H,T,D)", a->op->name);
    *BH = q->sizes[0] * q->sizes[1];
    *T = q->sizes[2];
    *D = q->sizes[3];
    if (*D > 128)
        return weft_error(WEFT_ERR_UNSUPPORTED, "%s: the CUDA kernel handles head dims up to 128, got %lld",
                          a->op->name, (long long)*D);
    return WEFT_OK;
}

// The tensor-core kernels move q, k, v, go rows in 16-byte loads and write o, gq, gk, gv in 32-bit pairs, so
// every buffer must be 16-byte aligned: a misaligned access is a sticky error that ends the CUDA context.
// Fresh tensors and contiguous copies are (512-byte blocks); a view at an odd element offset (a narrowed
// flat buffer, reshaped) may not be, and then the op runs the f32 kernels on widened copies.
// t's layout for the tensor-core kernels when they can read it in place: 4-D, unit stride in a row, the
// address and the other strides multiples of 16 bytes (dims of size 1 have no stride to check).
static bool heads_in_place(const weft_tensor *t, weft_cu_heads *L) {
    if (t->ndim != 4 || (t->sizes[3] > 1 && t->strides[3] != 1)) return false;
    const int64_t vec = 16 / (int64_t)weft_dtype_size((weft_dtype)t->dtype); // elements per 16 bytes
    *L = (weft_cu_heads){.H = t->sizes[1],
                         .sb = t->sizes[0] > 1 ? t->strides[0] : 0,
                         .sh = t->sizes[1] > 1 ? t->strides[1] : 0,
                         .st = t->sizes[2] > 1 ? t->strides[2] : 0};
    return ((uintptr_t)weft_tensor_ptr(t) & 15) == 0 && L->sb >= 0 && L->sh >= 0 && L->st >= 0 && L->sb % vec == 0 &&
           L->sh % vec == 0 && L->st % vec == 0;
}

// Tensors t[0..n) (each (B,H,T,D)) for the tensor-core kernels: in place where heads_in_place allows, else a
// contiguous copy (held in hold[i], to free) read as (BH,T,D). *ok false (nothing held) when a copy is not
// 16-byte aligned.
static weft_status mma_inputs(weft_tensor *const *t, int n, int64_t T, int64_t D, const void **ptr, weft_cu_heads *L,
                              weft_tensor **hold, bool *ok) {
    *ok = true;
    for (int i = 0; i < n; i++) hold[i] = NULL;
    for (int i = 0; i < n && *ok; i++) {
        if (heads_in_place(t[i], &L[i])) {
            ptr[i] = weft_tensor_ptr(t[i]);
            continue;
        }
        if (!(hold[i] = weft_kernel_contiguous(t[i]))) {
            for (int j = 0; j < i; j++) weft_tensor_free(hold[j]);
            return weft_last_status();
        }
        ptr[i] = weft_tensor_ptr(hold[i]);
        L[i] = (weft_cu_heads){.H = 1, .sb = T * D, .sh = 0, .st = D};
        *ok = ((uintptr_t)ptr[i] & 15) == 0;
    }
    if (!*ok)
        for (int i = 0; i < n; i++) weft_tensor_free(hold[i]), hold[i] = NULL;
    return WEFT_OK;
}

// A (B,T,H,D) tensor (o or its gradient with the heads last, attrs i[0]) as a (B,H,T,D) view of its memory;
// otherwise a new reference to t itself.
static weft_tensor *as_bhtd(const weft_tensor *t, bool heads_last) {
    return heads_last ? weft_kernel_transposed(t, 1, 2) : weft_tensor_ref((weft_tensor *)t);
}

// The tensor-core kernels for a half-precision input of head dim D (not with WEFT_ATTN_MMA=0).
static bool mma_for(int dtype, int64_t D) {
    const char *e = getenv("WEFT_ATTN_MMA");
    return weft_cu_attention_mma_supports(dtype, D) && !(e && !strcmp(e, "0"));
}

static bool outputs_aligned(const weft_op_args *a) {
    for (int j = 0; j < a->n_out; j++)
        if ((uintptr_t)weft_tensor_ptr(a->out[j]) & 15) return false;
    return true;
}

// A weft_cu_heads layout as cuDNN's strides of a (B,H,T,D) tensor: a contiguous copy read as (BH,T,D) (H = 1)
// splits its heads; the zero strides of size-1 dims get values that step past everything inside them (a
// batch of one in a packed qkv: T 3C, not C, which would overlap the rows; strides cuDNN is known to take). False for a
// zero stride along a longer dim (a broadcast view, e.g. k expanded over heads), which weft's kernels read and
// cuDNN is not given.
static bool cudnn_strides(const weft_cu_heads *L, int64_t B, int64_t H, int64_t T, int64_t D, int64_t s[3]) {
    int64_t st = L->st, sh = L->sh, sb = L->sb;
    if (L->H != H) sh = sb, sb *= H; // (BH,T,D): head b*H + h at (b*H + h)*sb
    if ((!st && T > 1) || (!sh && H > 1) || (!sb && B > 1)) return false;
    if (!st) st = D;
    if (!sh) sh = st * T;
    if (!sb) sb = sh * H > st * T ? sh * H : st * T;
    s[0] = sb, s[1] = sh, s[2] = st;
    return true;
}

// cuDNN's fused attention (attention_cudnn.h) when WEFT_ATTN_CUDNN=1 asks for it and cuDNN can run this shape
// and layout (*ran true), else nothing (*ran false: weft's kernels run it). L: the layouts of q, k, v, o, go,
// gq, gk, gv (the forward's first four); ptr as weft_cudnn_attention_run takes them.
static weft_status cudnn_attention(const weft_op_args *a, bool backward, const weft_cu_heads *L, void *const *ptr,
                                   bool *ran) {
    *ran = false;
    if (!weft_cudnn_attention_enabled()) return WEFT_OK;
    const weft_tensor *q = a->in[0];
    weft_cudnn_attn c = {.bf16 = q->dtype == WEFT_BF16, .device = q->device.index, .backward = backward,
                         .B = q->sizes[0], .H = q->sizes[1], .T = q->sizes[2], .D = q->sizes[3],
                         .scale = (float)a->attrs->f[0]};
    for (int i = 0; i < (backward ? WEFT_CUDNN_N : WEFT_CUDNN_GO); i++)
        if (!cudnn_strides(&L[i], c.B, c.H, c.T, c.D, c.s[i])) return WEFT_OK;
    size_t ws = 0;
    char msg[512];
    void *stream = (void *)weft_cu_stream(a->out[0]);
    if (!weft_cudnn_attention_plan(&c, stream, &ws, msg, sizeof msg)) {
        static atomic_bool told; // (once a process: mostly the reason is the same for every layer)
        if (!atomic_exchange(&told, true))
            fprintf(stderr, "weft: WEFT_ATTN_CUDNN=1, but cuDNN cannot run %s at (%lld,%lld,%lld,%lld): %s; weft's "
                            "kernels run it\n",
                    a->op->name, (long long)c.B, (long long)c.H, (long long)c.T, (long long)c.D, msg);
        return WEFT_OK;
    }
    int64_t n = (int64_t)ws;
    weft_tensor *w = ws ? weft_tensor_new(1, &n, WEFT_U8, q->device) : NULL;
    if (ws && !w) { // no room for cuDNN's workspace: weft's kernels need none
        weft_clear_error();
        return WEFT_OK;
    }
    int rc = weft_cudnn_attention_run(&c, ptr, w ? weft_tensor_ptr(w) : NULL, stream, msg, sizeof msg);
    weft_tensor_free(w); // (stream-ordered: reused only by work queued after this)
    if (rc) {
        // cuDNN refused at run time (the plan is dropped, not tried again): weft's kernels write every output
        // in full, so they run it, unless the device itself has failed (a sticky error the next kernel would hit)
        cudaError_t e = cudaGetLastError(); // (clears a non-sticky error; a sticky one stays)
        if (e != cudaSuccess && cudaPeekAtLastError() != cudaSuccess)
            return weft_error(WEFT_ERR_DEVICE, "%s: %s (%s)", a->op->name, msg, cudaGetErrorString(e));
        static atomic_bool told;
        if (!atomic_exchange(&told, true))
            fprintf(stderr, "weft: WEFT_ATTN_CUDNN=1, but cuDNN failed to run %s: %s; weft's kernels run it\n",
                    a->op->name, msg);
        return WEFT_OK;
    }
    *ran = true;
    return weft_cu_done(cudaSuccess, a->op->name); // (a launch error; with WEFT_CUDA_SYNC=1, waits)
}

// bf16 / f16 on tensor cores: q, k, v read in place where they can be; o written in its layout.
static weft_status mma_forward(const weft_op_args *a, int64_t BH, int64_t T, int64_t D, bool *done) {
    const void *p[3];
    weft_cu_heads L[5];
    weft_tensor *hold[3];
    bool ok;
    weft_status st = mma_inputs(a->in, 3, T, D, p, L, hold, &ok);
    if (st) return *done = true, st;
    weft_tensor *o = as_bhtd(a->out[0], a->attrs->i[0] != 0);
    if (!o) {
        for (int i = 0; i < 3; i++) weft_tensor_free(hold[i]);
        return *done = true, weft_last_status();
    }
    if (!(*done = ok && outputs_aligned(a) && heads_in_place(o, &L[4]))) {
        for (int i = 0; i < 3; i++) weft_tensor_free(hold[i]);
        weft_tensor_free(o);
        return WEFT_OK;
    }
    L[3] = L[0]; // (no go in the forward)
    weft_cu_heads C[4] = {L[0], L[1], L[2], L[4]}; // q, k, v, o
    void *cp[5] = {(void *)p[0], (void *)p[1], (void *)p[2], weft_tensor_ptr(a->out[0]), weft_tensor_ptr(a->out[1])};
    bool ran = false;
    weft_status cs = cudnn_attention(a, false, C, cp, &ran);
    if (cs || ran) {
        for (int i = 0; i < 3; i++) weft_tensor_free(hold[i]);
        weft_tensor_free(o);
        return cs;
    }
    cudaError_t e = weft_cu_causal_attention_mma(p[0], p[1], p[2], L, weft_tensor_ptr(a->out[0]),
                                                 (float *)weft_tensor_ptr(a->out[1]), a->in[0]->dtype, BH, T, D,
                                                 a->attrs->f[0], weft_cu_stream(a->out[0]));
    for (int i = 0; i < 3; i++) weft_tensor_free(hold[i]);
    weft_tensor_free(o);
    return weft_cu_done(e, a->op->name);
}

// in: q, k, v, o, lse, go; q, k, v, go and o read in place where they can be, lse contiguous.
static weft_status mma_backward(const weft_op_args *a, int64_t BH, int64_t T, int64_t D, bool *done) {
    const void *p[5];
    weft_cu_heads L[5];
    weft_tensor *hold[5], *lse = NULL;
    bool last = a->attrs->i[0] != 0, ok;
    weft_tensor *t[5] = {a->in[0], a->in[1], a->in[2], as_bhtd(a->in[5], last), as_bhtd(a->in[3], last)};
    weft_status st = t[3] && t[4] ? mma_inputs(t, 5, T, D, p, L, hold, &ok) : weft_last_status();
    weft_tensor_free(t[3]), weft_tensor_free(t[4]); // (held by the op's inputs, or copied into hold)
    if (st) return *done = true, st;
    if (!ok || !outputs_aligned(a)) {
        for (int i = 0; i < 5; i++) weft_tensor_free(hold[i]);
        return *done = false, WEFT_OK;
    }
    if (!(lse = weft_kernel_contiguous(a->in[4]))) st = weft_last_status(); // as the kernels read it
    int64_t n = BH * T, nq = BH * T * D;
    weft_tensor *dl = st ? NULL : weft_tensor_new(1, &n, WEFT_F32, a->in[0]->device);
    if (!st && !dl) st = weft_last_status();
    // WEFT_ATTN_BWD=fused: the single pass, dq added by atomics into an f32 scratch
    const char *e = getenv("WEFT_ATTN_BWD");
    const bool fused = !st && e && !strcmp(e, "fused");
    weft_tensor *dqa = fused ? weft_tensor_new(1, &nq, WEFT_F32, a->in[0]->device) : NULL;
    if (fused && !dqa) st = weft_last_status();
    // gq, gk, gv: (B,H,T,D), or (B,T,H,D) with i[1], as (B,H,T,D) views (L[5..7]); any strides with unit
    // stride in D (the packed op's are blocks of one (B,T,3C) gradient)
    weft_cu_heads G[3];
    bool fits = st == WEFT_OK && !((uintptr_t)weft_tensor_ptr(lse) & 15);
    for (int j = 0; j < 3 && fits; j++) {
        weft_tensor *gview = as_bhtd(a->out[j], a->attrs->i[1] != 0);
        if (!gview) st = weft_last_status(), fits = false;
        else fits = heads_in_place(gview, &G[j]);
        weft_tensor_free(gview);
    }
    *done = st != WEFT_OK || fits;
    bool ran = false;
    if (fits) { // cuDNN's (q, k, v, o, go, gq, gk, gv; pointers q, k, v, o, go, lse, gq, gk, gv), if asked for
        weft_cu_heads C[8] = {L[0], L[1], L[2], L[4], L[3], G[0], G[1], G[2]};
        void *cp[9] = {(void *)p[0], (void *)p[1], (void *)p[2], (void *)p[4], (void *)p[3], weft_tensor_ptr(lse),
                       weft_tensor_ptr(a->out[0]), weft_tensor_ptr(a->out[1]), weft_tensor_ptr(a->out[2])};
        st = cudnn_attention(a, true, C, cp, &ran);
    }
    if (fits && !st && !ran) {
        weft_cu_heads LG[8] = {L[0], L[1], L[2], L[3], L[4], G[0], G[1], G[2]};
        cudaError_t ce = weft_cu_causal_attention_mma_backward(
            p[0], p[1], p[2], LG, p[4], (const float *)weft_tensor_ptr(lse), p[3], (float *)weft_tensor_ptr(dl),
            dqa ? (float *)weft_tensor_ptr(dqa) : NULL, weft_tensor_ptr(a->out[0]), weft_tensor_ptr(a->out[1]),
            weft_tensor_ptr(a->out[2]), a->in[0]->dtype, BH, T, D, a->attrs->f[0], weft_cu_stream(a->out[0]));
        st = weft_cu_done(ce, a->op->name);
    }
    weft_tensor_free(dqa);
    weft_tensor_free(dl);
    weft_tensor_free(lse);
    for (int i = 0; i < 5; i++) weft_tensor_free(hold[i]);
    return st;
}

static weft_status cu_causal_attention(const weft_op_args *a) {
    int64_t BH = 0, T = 0, D = 0;
    weft_status st = attn_dims(a, &BH, &T, &D);
    if (st) return st;
    if (a->n_in != 3) return weft_error(WEFT_ERR_ARG, "%s: expected 3 inputs, got %d", a->op->name, a->n_in);
    if (BH == 0 || T == 0) return WEFT_OK;
    int dt = a->in[0]->dtype;
    if (weft_dtype_is_half(dt)) {
        bool done = false;
        if (mma_for(dt, D) && ((st = mma_forward(a, BH, T, D, &done)) || done)) return st;
        return weft_kernel_widened(a, cu_causal_attention); // (a misaligned buffer, an unsupported D: f32 kernels)
    }
    weft_kernel_inputs c;
    if ((st = weft_kernel_inputs_get(a, &c))) return st;
    // o with the heads last (i[0]), or any o not contiguous (a view the packed op hands over): the kernel
    // writes (B,H,T,D) into a scratch, copied into o's layout after
    const bool last = a->attrs->i[0] != 0, scratch = last || !weft_tensor_is_contiguous(a->out[0]);
    weft_tensor *o = scratch ? weft_tensor_new(4, a->in[0]->sizes, (weft_dtype)dt, a->in[0]->device) : a->out[0];
    if (!o) {
        weft_kernel_inputs_free(&c);
        return weft_last_status();
    }
    cudaError_t e = weft_cu_causal_attention(weft_tensor_ptr(c.t[0]), weft_tensor_ptr(c.t[1]), weft_tensor_ptr(c.t[2]),
                                             weft_tensor_ptr(o), weft_tensor_ptr(a->out[1]), a->in[0]->dtype, BH, T,
                                             D, a->attrs->f[0], weft_cu_stream(a->out[0]));
    weft_kernel_inputs_free(&c);
    st = weft_cu_done(e, a->op->name);
    if (scratch) {
        weft_tensor *view = st ? NULL : as_bhtd(a->out[0], last);
        if (!st) st = view ? weft_cuda_copy(view, o) : weft_last_status();
        weft_tensor_free(view);
        weft_tensor_free(o);
    }
    return st;
}

static weft_status cu_causal_attention_backward(const weft_op_args *a) {
    int64_t BH = 0, T = 0, D = 0;
    weft_status st = attn_dims(a, &BH, &T, &D);
    if (st) return st;
    if (a->n_in != 6) return weft_error(WEFT_ERR_ARG, "%s: expected 6 inputs, got %d", a->op->name, a->n_in);
    if (BH == 0 || T == 0 || D == 0) return WEFT_OK; // every gradient is empty
    int dt = a->in[0]->dtype;
    if (weft_dtype_is_half(dt)) {
        bool done = false;
        if (mma_for(dt, D) && ((st = mma_backward(a, BH, T, D, &done)) || done)) return st;
        return weft_kernel_widened(a, cu_causal_attention_backward);
    }
    // o and go with the heads last (i[0]) read as (B,H,T,D) views: their contiguous copies in the kernel's order
    bool last = a->attrs->i[0] != 0;
    weft_tensor *ov = as_bhtd(a->in[3], last), *gv = as_bhtd(a->in[5], last);
    weft_tensor *in[6] = {a->in[0], a->in[1], a->in[2], ov, a->in[4], gv};
    weft_op_args b = *a;
    b.in = in;
    weft_kernel_inputs c;
    st = ov && gv ? weft_kernel_inputs_get(&b, &c) : weft_last_status();
    weft_tensor_free(ov), weft_tensor_free(gv); // (c holds what it reads)
    if (st) return st;
    int64_t n = BH * T;
    weft_tensor *dl = weft_tensor_new(1, &n, (weft_dtype)dt, a->in[0]->device); // Dl_i = go_i.o_i, in lse's dtype
    // gradients with the heads last (i[1]), or not contiguous (the packed op's views of its blocks): the kernel
    // writes (B,H,T,D) scratches, copied into their layouts after
    const bool glast = a->attrs->i[1] != 0;
    bool scratch = glast;
    for (int j = 0; j < 3; j++) scratch |= !weft_tensor_is_contiguous(a->out[j]);
    weft_tensor *g[3] = {a->out[0], a->out[1], a->out[2]};
    for (int j = 0; j < 3 && scratch; j++)
        g[j] = dl ? weft_tensor_new(4, a->in[0]->sizes, (weft_dtype)dt, a->in[0]->device) : NULL;
    if (!dl || !g[0] || !g[1] || !g[2]) {
        st = weft_last_status();
        goto done;
    }
    cudaError_t e = weft_cu_causal_attention_backward(
        weft_tensor_ptr(c.t[0]), weft_tensor_ptr(c.t[1]), weft_tensor_ptr(c.t[2]), weft_tensor_ptr(c.t[3]),
        weft_tensor_ptr(c.t[4]), weft_tensor_ptr(c.t[5]), weft_tensor_ptr(dl), weft_tensor_ptr(g[0]),
        weft_tensor_ptr(g[1]), weft_tensor_ptr(g[2]), a->in[0]->dtype, BH, T, D, a->attrs->f[0],
        weft_cu_stream(a->out[0]));
    st = weft_cu_done(e, a->op->name);
    for (int j = 0; j < 3 && scratch && !st; j++) {
        weft_tensor *view = as_bhtd(a->out[j], glast);
        st = view ? weft_cuda_copy(view, g[j]) : weft_last_status();
        weft_tensor_free(view);
    }
done:
    for (int j = 0; j < 3 && scratch; j++) weft_tensor_free(g[j]);
    weft_tensor_free(dl);
    weft_kernel_inputs_free(&c);
    return st;
}

// The packed ops (causal_attention_qkv): views of qkv's blocks through the kernels above.
static weft_status cu_attention_qkv(const weft_op_args *a) { return weft_attention_qkv_run(a, cu_causal_attention); }
static weft_status cu_attention_qkv_backward(const weft_op_args *a) {
    return weft_attention_qkv_backward_run(a, cu_causal_attention_backward);
}

void weft_cuda_register_attention(void) {
    const uint32_t dts = WEFT_DT_FLOAT | WEFT_DT_HALF;
    weft_cu_register("causal_attention", cu_causal_attention, dts);
    weft_cu_register("causal_attention_backward", cu_causal_attention_backward, dts);
    weft_cu_register("causal_attention_qkv", cu_attention_qkv, dts);
    weft_cu_register("causal_attention_qkv_backward", cu_attention_qkv_backward, dts);
}
