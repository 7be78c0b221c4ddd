// Dynamic loss scaling for f16 mixed precision (see weft/optim.h).
#include <math.h>
#include <stdlib.h>

#include <weft.h>

#include "../core/core_impl.h"

struct weft_grad_scaler {
    double scale, growth, backoff;
    int interval;
    int64_t good;   // finite steps in a row since the scale last changed (the growth tracker)
    bool unscaled;  // weft_grad_scaler_unscale ran since the last step
    bool found_inf; // ... and found a gradient that is not finite
};

weft_grad_scaler *weft_grad_scaler_create(double init_scale, double growth, double backoff, int growth_interval) {
    if (init_scale == 0) init_scale = 65536.0;
    if (growth == 0) growth = 2.0;
    if (backoff == 0) backoff = 0.5;
    if (growth_interval == 0) growth_interval = 2000;
    if (!(init_scale > 0) || !isfinite(init_scale) || !(growth > 1) || !(backoff > 0 && backoff < 1) ||
        growth_interval < 1)
        return weft_error_null(WEFT_ERR_ARG,
                               "grad_scaler: need scale > 0, growth > 1, 0 < backoff < 1, interval >= 1 (got %g, %g, %g, %d)",
                               init_scale, growth, backoff, growth_interval);
    weft_grad_scaler *gs = calloc(1, sizeof *gs);
    if (!gs) return weft_error_null(WEFT_ERR_OOM, "grad_scaler: out of memory");
    *gs = (weft_grad_scaler){.scale = init_scale, .growth = growth, .backoff = backoff, .interval = growth_interval};
    return gs;
}

void weft_grad_scaler_free(weft_grad_scaler *gs) { free(gs); }
double weft_grad_scaler_get_scale(const weft_grad_scaler *gs) { return gs ? gs->scale : 0; }

void weft_grad_scaler_get_state(const weft_grad_scaler *gs, double *scale, int64_t *good) {
    if (scale) *scale = gs ? gs->scale : 0;
    if (good) *good = gs ? gs->good : 0;
}

weft_status weft_grad_scaler_set_state(weft_grad_scaler *gs, double scale, int64_t good) {
    if (!gs) return weft_error(WEFT_ERR_ARG, "grad_scaler_set_state: NULL scaler");
    if (!(scale > 0) || !isfinite(scale) || good < 0)
        return weft_error(WEFT_ERR_ARG, "grad_scaler_set_state: need a finite scale > 0 and good >= 0 (got %g, %lld)",
                          scale, (long long)good);
    gs->scale = scale;
    gs->good = good;
    return WEFT_OK;
}

weft_tensor *weft_grad_scaler_scale(weft_grad_scaler *gs, weft_tensor *loss) {
    if (!gs) return weft_error_null(WEFT_ERR_ARG, "grad_scaler_scale: NULL scaler");
    return weft_mul_scalar(loss, gs->scale);
}

// Every gradient of opt's parameters divided by the scale in place (one
// grad_scale op each), then their sum of squares in f64 on their devices,
// read back once: it is finite exactly when every unscaled gradient is (the
// square of the largest f32 is about 1e77), so one number checks them all.
static weft_status unscale(weft_grad_scaler *gs, weft_optim *opt) {
    int n = weft_optim_param_count(opt);
    weft_tensor **ps = malloc(sizeof *ps * (size_t)(n > 0 ? n : 1));
    if (!ps) return weft_error(WEFT_ERR_OOM, "grad_scaler: out of memory");
    for (int i = 0; i < n; i++) ps[i] = weft_optim_param_at(opt, i);
    double sum = 0;
    weft_status st = weft_grad_scale(n, ps, 1.0 / gs->scale);
    if (!st) {
        gs->unscaled = true; // divided: a retried step must not divide again
        st = weft_grad_sum_squares(n, ps, &sum);
    }
    free(ps);
    gs->found_inf = st != WEFT_OK || !isfinite(sum); // (a failed check skips the step)
    return st;
}

weft_status weft_grad_scaler_unscale(weft_grad_scaler *gs, weft_optim *opt) {
    if (!gs || !opt) return weft_error(WEFT_ERR_ARG, "grad_scaler_unscale: NULL argument");
    if (gs->unscaled)
        return weft_error(WEFT_ERR_STATE,
                          "grad_scaler_unscale: already called since the last step (the gradients are unscaled)");
    return unscale(gs, opt);
}

weft_status weft_grad_scaler_update(weft_grad_scaler *gs, bool found_inf) {
    if (!gs) return weft_error(WEFT_ERR_ARG, "grad_scaler_update: NULL scaler");
    if (gs->unscaled) found_inf |= gs->found_inf; // what weft_grad_scaler_unscale found counts too
    gs->unscaled = false;
    if (found_inf) { // a skipped step: this scale overflowed f16 somewhere
        gs->scale *= gs->backoff;
        gs->good = 0;
    } else if (++gs->good >= gs->interval) {
        gs->scale *= gs->growth;
        gs->good = 0;
    }
    return WEFT_OK;
}

weft_status weft_grad_scaler_step(weft_grad_scaler *gs, weft_optim *opt, bool *stepped) {
    if (stepped) *stepped = false;
    if (!gs || !opt) return weft_error(WEFT_ERR_ARG, "grad_scaler_step: NULL argument");
    weft_status st = gs->unscaled ? WEFT_OK : unscale(gs, opt);
    if (st) return st;
    if (!gs->found_inf) {
        if ((st = weft_optim_step(opt))) return st; // (unscaled stays set: a retried step does not divide again)
        if (stepped) *stepped = true;
    }
    return weft_grad_scaler_update(gs, gs->found_inf);
}
