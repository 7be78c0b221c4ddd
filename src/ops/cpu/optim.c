// CPU kernels of the optimiser ops (src/ops/def_optim.c): the fused update
// loops of optim_loops.h and clipping's sum of squares and scaling. An update
// copies the parameter and state into the outputs unless they already are
// the inputs' storage (in place: weft_optim_step and the graph executor),
// then runs its loop over the outputs.
#include <math.h>
#include <stdlib.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "../optim.h"

// The hyper-parameters a loop reads, in double (each loop rounds them to T once).
typedef struct optim_hp {
    double lr, weight_decay, eps, momentum, dampening, alpha, beta1, beta2;
    bool nesterov;
} optim_hp;

// The loops are compiled for several ISAs and picked at run time (the build
// flags stay portable: -O3, no -march), as the other CPU kernels are; not
// under the sanitizers. sqrt must not set errno, or the loops do not vectorise.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define OPT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define OPT_CLONES
#endif
// Elements per block handed to a thread (fixed, so results do not depend on the thread count).
#define OPT_BLOCK 16384
// Elements per sub-block of the loops that take a sqrt (see optim_loops.h).
#define OPT_SUB 256

// x[i] = sqrt(x[i]): correctly rounded, as sqrtf/sqrt (negative -> NaN, without errno).
static void vsqrt_f32(int n, float *x) {
    int i = 0;
#ifdef __SSE2__
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(x + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
#endif
    for (; i < n; i++) x[i] = sqrtf(x[i]);
}
static void vsqrt_f64(int n, double *x) {
    int i = 0;
#ifdef __SSE2__
    for (; i + 2 <= n; i += 2) _mm_storeu_pd(x + i, _mm_sqrt_pd(_mm_loadu_pd(x + i)));
#endif
    for (; i < n; i++) x[i] = sqrt(x[i]);
}

#define T float
#define SFX f32
#include "optim_loops.h"
#undef T
#undef SFX
#define T double
#define SFX f64
#include "optim_loops.h"
#undef T
#undef SFX

// A host scalar input (0-d, f32 or f64: infer checked) as double.
static double scalar(const weft_tensor *t) {
    return t->dtype == WEFT_F64 ? *WEFT_PTR(double, t) : (double)*WEFT_PTR(float, t);
}

// Inputs [0, n_out) are the parameter and its state, in[n_out] the gradient,
// then the host scalars. *g: the gradient, or its contiguous copy (*gc, to
// free). The outputs then hold the parameter and state, to update in place.
static weft_status begin_update(const weft_op_args *a, const weft_tensor **g, weft_tensor **gc) {
    int n_out = a->op->n_out;
    *g = a->in[n_out];
    *gc = NULL;
    // The gradient may be a strided view (a transposed matmul gradient): the loops want it contiguous.
    if (!weft_tensor_is_contiguous(*g) && !(*g = *gc = weft_kernel_contiguous(*g))) return weft_last_status();
    for (int j = 0; j < n_out; j++) {
        const weft_tensor *src = a->in[j];
        // in place: the output is the input (weft_optim_step) or its storage (the graph executor)
        if (a->out[j] == src || (weft_tensor_ptr(a->out[j]) == weft_tensor_ptr(src) && weft_tensor_is_contiguous(src)))
            continue;
        weft_status st = weft_tensor_copy_(a->out[j], src);
        if (st) {
            weft_tensor_free(*gc);
            return st;
        }
    }
    return WEFT_OK;
}

// Element pointers of output j and of the (contiguous) gradient, untyped.
#define OUT(j) ((void *)weft_tensor_ptr(a->out[j]))
#define GRAD ((const void *)weft_tensor_ptr(g))

// (p, [buf], g, lr, [first]): f = weight_decay, momentum, dampening; i[0] = nesterov.
weft_status weft_cpu_sgd_update(const weft_op_args *a) {
    const weft_tensor *g;
    weft_tensor *gc;
    weft_status st = begin_update(a, &g, &gc);
    if (st) return st;
    bool mom = a->op->variant & WEFT_OPTIM_V_MOMENTUM;
    const weft_attrs *at = a->attrs;
    optim_hp h = {.lr = scalar(a->in[mom ? 3 : 2]), .weight_decay = at->f[0], .momentum = at->f[1],
                  .dampening = at->f[2], .nesterov = at->i[0] != 0};
    bool first = mom && scalar(a->in[4]) != 0;
    int64_t n = a->in[0]->numel;
    if (a->in[0]->dtype == WEFT_F32) sgd_f32(n, OUT(0), GRAD, mom ? (float *)OUT(1) : NULL, &h, first);
    else sgd_f64(n, OUT(0), GRAD, mom ? (double *)OUT(1) : NULL, &h, first);
    weft_tensor_free(gc);
    return WEFT_OK;
}

// (p, sum, g, clr): f = weight_decay, eps.
weft_status weft_cpu_adagrad_update(const weft_op_args *a) {
    const weft_tensor *g;
    weft_tensor *gc;
    weft_status st = begin_update(a, &g, &gc);
    if (st) return st;
    optim_hp h = {.weight_decay = a->attrs->f[0], .eps = a->attrs->f[1]};
    double clr = scalar(a->in[3]);
    int64_t n = a->in[0]->numel;
    if (a->in[0]->dtype == WEFT_F32) adagrad_f32(n, OUT(0), GRAD, OUT(1), &h, clr);
    else adagrad_f64(n, OUT(0), GRAD, OUT(1), &h, clr);
    weft_tensor_free(gc);
    return WEFT_OK;
}

// (p, square_avg, [momentum_buffer], [grad_avg], g, lr): f = weight_decay, eps, alpha, momentum.
weft_status weft_cpu_rmsprop_update(const weft_op_args *a) {
    const weft_tensor *g;
    weft_tensor *gc;
    weft_status st = begin_update(a, &g, &gc);
    if (st) return st;
    int v = a->op->variant, k = 2, n_out = a->op->n_out;
    void *buf = (v & WEFT_OPTIM_V_MOMENTUM) ? OUT(k++) : NULL;
    void *ga = (v & WEFT_OPTIM_V_CENTERED) ? OUT(k++) : NULL;
    const weft_attrs *at = a->attrs;
    optim_hp h = {.lr = scalar(a->in[n_out + 1]), .weight_decay = at->f[0], .eps = at->f[1], .alpha = at->f[2],
                  .momentum = at->f[3]};
    int64_t n = a->in[0]->numel;
    if (a->in[0]->dtype == WEFT_F32) rmsprop_f32(n, OUT(0), GRAD, OUT(1), ga, buf, &h);
    else rmsprop_f64(n, OUT(0), GRAD, OUT(1), ga, buf, &h);
    weft_tensor_free(gc);
    return WEFT_OK;
}

// (p, m, v, [vmax], g, lr, step_size, bc2_sqrt): f = beta1, beta2, eps, weight_decay; i[0] = decoupled.
weft_status weft_cpu_adam_update(const weft_op_args *a) {
    const weft_tensor *g;
    weft_tensor *gc;
    weft_status st = begin_update(a, &g, &gc);
    if (st) return st;
    int n_out = a->op->n_out;
    void *vmax = (a->op->variant & WEFT_OPTIM_V_AMSGRAD) ? OUT(3) : NULL;
    const weft_attrs *at = a->attrs;
    optim_hp h = {.lr = scalar(a->in[n_out + 1]), .beta1 = at->f[0], .beta2 = at->f[1], .eps = at->f[2],
                  .weight_decay = at->f[3]};
    bool decoupled = at->i[0] != 0;
    double ss = scalar(a->in[n_out + 2]), bc2s = scalar(a->in[n_out + 3]);
    int64_t n = a->in[0]->numel;
    if (a->in[0]->dtype == WEFT_F32)
        adam_f32(n, OUT(0), GRAD, OUT(1), OUT(2), vmax, &h, decoupled, ss, bc2s);
    else adam_f64(n, OUT(0), GRAD, OUT(1), OUT(2), vmax, &h, decoupled, ss, bc2s);
    weft_tensor_free(gc);
    return WEFT_OK;
}

// (acc, x_1, ..., x_k) -> ((acc + sum of x_1*x_1) + ...) in f64, 0-d; the output may be acc's own storage.
weft_status weft_cpu_grad_sumsq(const weft_op_args *a) {
    double acc = *WEFT_PTR(double, a->in[0]);
    for (int i = 1; i < a->n_in; i++) {
        weft_tensor *x = weft_kernel_contiguous(a->in[i]);
        if (!x) return weft_last_status();
        acc += x->dtype == WEFT_F32 ? sumsq_f32(x->numel, WEFT_PTR(float, x)) : sumsq_f64(x->numel, WEFT_PTR(double, x));
        weft_tensor_free(x);
    }
    *WEFT_PTR(double, a->out[0]) = acc;
    return WEFT_OK;
}

// (g, c) -> g * (T)c; the output may be g's own storage.
weft_status weft_cpu_grad_scale(const weft_op_args *a) {
    const weft_tensor *g = a->in[0];
    weft_tensor *o = a->out[0];
    if (weft_tensor_ptr(o) != weft_tensor_ptr(g) || !weft_tensor_is_contiguous(g)) {
        weft_status st = weft_tensor_copy_(o, g);
        if (st) return st;
    }
    double c = scalar(a->in[1]);
    if (o->dtype == WEFT_F32) scale_f32(o->numel, WEFT_PTR(float, o), (float)c);
    else scale_f64(o->numel, WEFT_PTR(double, o), c);
    return WEFT_OK;
}
