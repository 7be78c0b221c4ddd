// Dynamic loss scaling for f16 mixed precision (see weft/optim.h).
#include <math.h>
#include <stdlib.h>

#include <weft.h>

#include "../core/core_impl.h"

struct weft_grad_scaler {
    double scale, growth, backoff;
    int interval;
    int64_t good; // finite steps in a row since the scale last changed (the growth tracker)
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
    *gs = (weft_grad_scaler){init_scale, growth, backoff, growth_interval, 0};
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

// g / scale in place of g; *finite &= every element of g is finite (summed in
// f64 so a large finite gradient cannot overflow the check).
static weft_status unscale(weft_tensor *p, double inv, bool *finite) {
    weft_tensor *g = weft_tensor_grad(p);
    if (!g) return WEFT_OK;
    weft_tensor *u = weft_mul_scalar(g, inv), *g64 = u ? weft_cast(u, WEFT_F64) : NULL;
    weft_tensor *a = g64 ? weft_abs(g64) : NULL, *s = a ? weft_sum(a, 0, NULL, false) : NULL;
    weft_status st = s ? weft_tensor_set_grad(p, u) : weft_last_status();
    if (st == WEFT_OK && !isfinite(weft_tensor_item(s))) *finite = false;
    weft_tensor_free(u);
    weft_tensor_free(g64);
    weft_tensor_free(a);
    weft_tensor_free(s);
    return st;
}

weft_status weft_grad_scaler_step(weft_grad_scaler *gs, weft_optim *opt, bool *stepped) {
    if (stepped) *stepped = false;
    if (!gs || !opt) return weft_error(WEFT_ERR_ARG, "grad_scaler_step: NULL argument");
    bool prev = weft_grad_set_enabled(false), finite = true;
    weft_status st = WEFT_OK;
    for (int i = 0; i < weft_optim_param_count(opt) && st == WEFT_OK; i++)
        st = unscale(weft_optim_param_at(opt, i), 1.0 / gs->scale, &finite);
    weft_grad_set_enabled(prev);
    if (st != WEFT_OK) return st;
    if (!finite) { // skip the step: this scale overflowed f16 somewhere
        gs->scale *= gs->backoff;
        gs->good = 0;
        return WEFT_OK;
    }
    if ((st = weft_optim_step(opt)) != WEFT_OK) return st;
    if (stepped) *stepped = true;
    if (++gs->good >= gs->interval) {
        gs->scale *= gs->growth;
        gs->good = 0;
    }
    return WEFT_OK;
}
