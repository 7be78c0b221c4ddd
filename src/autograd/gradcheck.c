// Finite-difference gradient check (like torch.autograd.gradcheck).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "autograd_impl.h"

weft_status weft_gradcheck(weft_gradcheck_fn f, int n, weft_tensor *const *inputs, void *user,
                           const weft_gradcheck_opts *opts) {
    double eps = opts && opts->eps > 0 ? opts->eps : 1e-6;
    double atol = opts && opts->atol > 0 ? opts->atol : 1e-5;
    double rtol = opts && opts->rtol > 0 ? opts->rtol : 1e-4;
    for (int k = 0; k < n; k++) {
        weft_tensor *x = inputs[k];
        if (!x || x->device.type != WEFT_CPU || !x->requires_grad || x->grad_fn || !weft_tensor_is_contiguous(x))
            return weft_error(WEFT_ERR_ARG, "gradcheck: input %d must be a contiguous CPU leaf that requires grad", k);
        weft_tensor_zero_grad(x);
    }
    // Analytic: backward of sum(out * w) with a fixed random w is w itself.
    weft_tensor *out = f(inputs, user);
    if (!out) return weft_last_status();
    weft_generator *g = weft_generator_create(1234);
    weft_tensor *w = weft_tensor_randn(out->ndim, out->sizes, (weft_dtype)out->dtype, g);
    weft_generator_free(g);
    weft_status st = w ? weft_backward(out, w, NULL) : weft_last_status();
    weft_tensor_free(out);
    if (st != WEFT_OK) {
        weft_tensor_free(w);
        return st;
    }
    double *wv = malloc(sizeof(double) * (size_t)(w->numel ? w->numel : 1));
    weft_tensor_to_f64(w, wv, w->numel);
    bool prev = weft_grad_set_enabled(false);
    for (int k = 0; k < n && st == WEFT_OK; k++) {
        weft_tensor *x = inputs[k];
        weft_tensor *ga = x->grad;
        double *an = calloc((size_t)(x->numel ? x->numel : 1), sizeof(double));
        if (ga) weft_tensor_to_f64(ga, an, x->numel);
        for (int64_t i = 0; i < x->numel && st == WEFT_OK; i++) {
            double orig = weft_load_f64(weft_tensor_ptr(x), (weft_dtype)x->dtype, i);
            double fv[2];
            for (int s = 0; s < 2; s++) {
                weft_store_f64(weft_tensor_ptr(x), (weft_dtype)x->dtype, i, orig + (s ? -eps : eps));
                weft_tensor *o = f(inputs, user);
                if (!o) {
                    st = weft_last_status();
                    break;
                }
                double *ov = malloc(sizeof(double) * (size_t)(o->numel ? o->numel : 1));
                weft_tensor_to_f64(o, ov, o->numel);
                double acc = 0;
                for (int64_t j = 0; j < o->numel; j++) acc += ov[j] * wv[j];
                fv[s] = acc;
                free(ov);
                weft_tensor_free(o);
            }
            weft_store_f64(weft_tensor_ptr(x), (weft_dtype)x->dtype, i, orig);
            if (st != WEFT_OK) break;
            double num = (fv[0] - fv[1]) / (2 * eps);
            if (!(fabs(num - an[i]) <= atol + rtol * fabs(num)))
                st = weft_error(WEFT_ERR_STATE, "gradcheck: input %d element %lld: analytic %.10g vs numeric %.10g", k,
                                (long long)i, an[i], num);
        }
        free(an);
    }
    weft_grad_set_enabled(prev);
    free(wv);
    weft_tensor_free(w);
    for (int k = 0; k < n; k++) weft_tensor_zero_grad(inputs[k]);
    return st;
}
