// The one optimiser path on an accelerator (wt_accelerator: the GPU where
// there is one, else the mock cuda:0 whose kernels are the CPU's): for every
// optimiser kind and option set, weft_optim_step on device parameters gives
// the CPU step's parameters and state after every step (bit-identical on the
// mock, to rounding on a GPU), with a parameter that has no gradient on one
// step and a strided gradient on another; the state lives beside its
// parameter and the ".step" counters on the host. weft_clip_grad_norm on
// device gradients gives the CPU's norm and scaled gradients, including the
// "no scaling", NaN and non-contiguous cases.
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

static weft_device g_dev;
static bool g_mock;

// (ndim, sizes) of dtype dt on dev with values in [lo, hi) from seed.
static weft_tensor *rand_on(int nd, const int64_t *sz, weft_dtype dt, double lo, double hi, uint64_t seed,
                            weft_device dev) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= sz[d];
    double *v = malloc(sizeof(double) * (size_t)n);
    wt_vals(v, n, lo, hi, seed);
    weft_tensor *t64 = weft_tensor_from_data(v, nd, sz, WEFT_F64), *t = weft_cast(t64, dt);
    weft_tensor *r = dev.type == WEFT_CPU ? weft_tensor_ref(t) : weft_tensor_to(t, dev);
    weft_tensor_free(t64);
    weft_tensor_free(t);
    free(v);
    return r;
}

// Every kind and option set (false past the end).
static bool combo(int i, weft_optim_opts *o, const char **what) {
    static const char *const names[] = {"sgd",          "sgd wd",          "sgd momentum dampening", "sgd nesterov",
                                        "adagrad",      "adagrad decay",   "rmsprop",                "rmsprop momentum",
                                        "rmsprop centered", "rmsprop centered momentum", "adam",    "adam l2",
                                        "adam amsgrad", "adamw",           "adamw amsgrad"};
    if (i >= (int)(sizeof names / sizeof *names)) return false;
    *what = names[i];
    static const weft_optim_kind kinds[] = {
        WEFT_OPTIM_SGD,     WEFT_OPTIM_SGD,     WEFT_OPTIM_SGD,  WEFT_OPTIM_SGD,  WEFT_OPTIM_ADAGRAD,
        WEFT_OPTIM_ADAGRAD, WEFT_OPTIM_RMSPROP, WEFT_OPTIM_RMSPROP, WEFT_OPTIM_RMSPROP, WEFT_OPTIM_RMSPROP,
        WEFT_OPTIM_ADAM,    WEFT_OPTIM_ADAM,    WEFT_OPTIM_ADAM, WEFT_OPTIM_ADAMW, WEFT_OPTIM_ADAMW};
    *o = weft_optim_defaults(kinds[i]);
    o->lr = kinds[i] == WEFT_OPTIM_SGD || kinds[i] == WEFT_OPTIM_ADAGRAD ? 0.05 : 0.01;
    switch (i) {
    case 1: o->weight_decay = 0.01; break;
    case 2: o->momentum = 0.9, o->dampening = 0.1, o->weight_decay = 0.01; break;
    case 3: o->momentum = 0.9, o->nesterov = true, o->weight_decay = 0.01; break;
    case 5: o->lr_decay = 0.1, o->initial_accumulator_value = 0.2, o->weight_decay = 0.01; break;
    case 6: o->alpha = 0.9; break;
    case 7: o->momentum = 0.5; break;
    case 8: o->centered = true; break;
    case 9: o->centered = true, o->momentum = 0.5, o->weight_decay = 0.01; break;
    case 11: o->weight_decay = 0.02, o->beta1 = 0.8; break;
    case 12: o->amsgrad = true; break;
    case 14: o->amsgrad = true, o->weight_decay = 0.05; break;
    default: break;
    }
    return true;
}

enum { NP = 3, STEPS = 4 };
static const int64_t k_sizes[NP][2] = {{7, 5}, {13, 1}, {300, 130}}; // the last > WEFT_PAR_GRAIN: threaded blocks
static const char *const k_names[NP] = {"A", "B", "C"};

// Step t's gradient of parameter i on dev: NULL (B on step 2: no gradient),
// or a transposed view (A on step 3: a strided gradient).
static weft_tensor *grad_for(int i, int t, weft_dtype dt, weft_device dev) {
    if (i == 1 && t == 2) return NULL;
    uint64_t seed = 1000 + 10 * (uint64_t)t + (uint64_t)i;
    if (i == 0 && t == 3) {
        const int64_t tsz[2] = {k_sizes[0][1], k_sizes[0][0]};
        weft_tensor *s = rand_on(2, tsz, dt, -2, 2, seed, dev), *v = weft_transpose(s, 0, 1);
        weft_tensor_free(s);
        return v;
    }
    return rand_on(2, k_sizes[i], dt, -2, 2, seed, dev);
}

static void run_combo(const weft_optim_opts *o, const char *what, weft_dtype dt) {
    weft_tensor *ph[NP], *pd[NP];
    for (int i = 0; i < NP; i++) {
        ph[i] = rand_on(2, k_sizes[i], dt, -1, 1, 10 + (uint64_t)i, WEFT_DEVICE_CPU);
        pd[i] = weft_tensor_to(ph[i], g_dev);
        weft_tensor_set_requires_grad(ph[i], true);
        weft_tensor_set_requires_grad(pd[i], true);
    }
    weft_optim *oh = weft_optim_create(o, NP, ph, k_names), *od = weft_optim_create(o, NP, pd, k_names);
    CHECK(oh && od);
    if (!oh || !od) {
        fprintf(stderr, "%s: %s\n", what, weft_last_error());
        goto done;
    }
    double tol = g_mock ? 0 : dt == WEFT_F32 ? 1e-5 : 1e-12;
    char buf[160];
    for (int t = 1; t <= STEPS; t++) {
        for (int i = 0; i < NP; i++) {
            weft_tensor *gh = grad_for(i, t, dt, WEFT_DEVICE_CPU), *gd = grad_for(i, t, dt, g_dev);
            if (gh) CHECK(weft_tensor_set_grad(ph[i], gh) == WEFT_OK && weft_tensor_set_grad(pd[i], gd) == WEFT_OK);
            weft_tensor_free(gh);
            weft_tensor_free(gd);
        }
        double lr = o->lr * (1 + 0.25 * t); // a schedule: the host scalars change every step
        weft_optim_set_lr(oh, lr);
        weft_optim_set_lr(od, lr);
        CHECK(weft_optim_step(oh) == WEFT_OK);
        CHECK(weft_optim_step(od) == WEFT_OK);
        weft_optim_zero_grad(oh);
        weft_optim_zero_grad(od);
        for (int i = 0; i < NP; i++) {
            snprintf(buf, sizeof buf, "%s %s step %d param %s", what, weft_dtype_name(dt), t, k_names[i]);
            CHECK(weft_device_equal(weft_tensor_device(pd[i]), g_dev));
            wt_check_same(buf, pd[i], ph[i], tol);
        }
    }
    CHECK(weft_optim_state_count(oh) == weft_optim_state_count(od));
    for (int k = 0; k < weft_optim_state_count(oh); k++) {
        char nm[64];
        weft_tensor *sh = weft_optim_state_at(oh, k, nm, sizeof nm), *sd = weft_optim_state_find(od, nm);
        bool step = strstr(nm, ".step") != NULL;
        // the state beside its parameter; the update counts on the host
        CHECK(sd && weft_device_equal(weft_tensor_device(sd), step ? WEFT_DEVICE_CPU : g_dev));
        snprintf(buf, sizeof buf, "%s %s state %s", what, weft_dtype_name(dt), nm);
        wt_check_same(buf, sd, sh, step ? 0 : tol);
    }
    weft_tensor *bs = weft_optim_state_find(od, "B.step"), *as = weft_optim_state_find(od, "A.step");
    CHECK(bs && as && weft_tensor_item(bs) == STEPS - 1 && weft_tensor_item(as) == STEPS); // B skipped once
    // the parameters moved (a test that cannot pass by doing nothing)
    weft_tensor *p0 = rand_on(2, k_sizes[0], dt, -1, 1, 10, WEFT_DEVICE_CPU);
    double a0[35], a1[35], moved = 0;
    CHECK(weft_tensor_to_f64(p0, a0, 35) == WEFT_OK && weft_tensor_to_f64(pd[0], a1, 35) == WEFT_OK);
    for (int k = 0; k < 35; k++) moved = fmax(moved, fabs(a1[k] - a0[k]));
    CHECK(moved > 1e-4);
    weft_tensor_free(p0);
done:
    weft_optim_free(oh);
    weft_optim_free(od);
    for (int i = 0; i < NP; i++) {
        weft_tensor_free(ph[i]);
        weft_tensor_free(pd[i]);
    }
}

static void test_every_kind_on_device(void) {
    weft_optim_opts o;
    const char *what;
    int n = 0;
    for (int i = 0; combo(i, &o, &what); i++, n++) {
        run_combo(&o, what, WEFT_F32);
        run_combo(&o, what, WEFT_F64);
    }
    CHECK(n == 15);
}

// ---- clipping ----
// Gradients of a mixed list on one device: A (2,3) f64, B (4) f32, C no
// gradient, D (3,2) f32 whose gradient is a transposed view, E big f32.
enum { NC = 5 };
static const int64_t c_sizes[NC][2] = {{2, 3}, {4, 1}, {4, 1}, {3, 2}, {1000, 101}};
static const weft_dtype c_dt[NC] = {WEFT_F64, WEFT_F32, WEFT_F64, WEFT_F32, WEFT_F32};

static void make_clip_params(weft_tensor **p, weft_device dev, double scale, bool nan) {
    for (int i = 0; i < NC; i++) {
        p[i] = rand_on(2, c_sizes[i], c_dt[i], -1, 1, 50 + (uint64_t)i, dev);
        weft_tensor_set_requires_grad(p[i], true);
        weft_tensor *g = NULL;
        if (i == 2) continue;
        if (i == 3) {
            const int64_t tsz[2] = {2, 3};
            weft_tensor *s = rand_on(2, tsz, c_dt[i], -scale, scale, 70, dev);
            g = weft_transpose(s, 0, 1);
            weft_tensor_free(s);
        } else {
            g = rand_on(2, c_sizes[i], c_dt[i], -scale, scale, 60 + (uint64_t)i, dev);
        }
        if (nan && i == 1) {
            weft_tensor *h = weft_tensor_to(g, WEFT_DEVICE_CPU);
            float *v = weft_tensor_data(h);
            v[2] = NAN;
            weft_tensor_free(g);
            g = weft_tensor_to(h, dev);
            weft_tensor_free(h);
        }
        weft_tensor_set_grad(p[i], g);
        weft_tensor_free(g);
    }
}

static void clip_case(const char *what, double max_norm, double scale, bool nan, bool expect_scaled) {
    weft_tensor *ph[NC], *pd[NC], *before[NC];
    make_clip_params(ph, WEFT_DEVICE_CPU, scale, nan);
    make_clip_params(pd, g_dev, scale, nan);
    for (int i = 0; i < NC; i++) // copies: the gradients are scaled in place below
        before[i] = i == 2 ? NULL : weft_tensor_clone(weft_tensor_grad(ph[i]));
    double nh = weft_clip_grad_norm(NC, ph, max_norm), nd = weft_clip_grad_norm(NC, pd, max_norm);
    if (nan) CHECK(isnan(nh) && isnan(nd));
    else if (g_mock) CHECK(nd == nh);
    else CHECK_NEAR(nd, nh, 1e-12);
    CHECK(nh >= 0 || isnan(nh));
    char buf[128];
    for (int i = 0; i < NC; i++) {
        weft_tensor *gh = weft_tensor_grad(ph[i]), *gd = weft_tensor_grad(pd[i]);
        if (i == 2) {
            CHECK(gh == NULL && gd == NULL);
            continue;
        }
        CHECK(gd && weft_device_equal(weft_tensor_device(gd), g_dev) && weft_tensor_is_contiguous(gd));
        snprintf(buf, sizeof buf, "clip %s: gradient %d", what, i);
        wt_check_same(buf, gd, gh, g_mock ? 0 : c_dt[i] == WEFT_F32 ? 1e-6 : 1e-13);
        // unscaled: exactly the gradient as it was; scaled: by max_norm / (norm + 1e-6) (CPU reference)
        snprintf(buf, sizeof buf, "clip %s: gradient %d unchanged", what, i);
        if (!expect_scaled) wt_check_same(buf, gd, before[i], 0);
        else {
            weft_tensor *want = weft_mul_scalar(before[i], max_norm / (nh + 1e-6));
            snprintf(buf, sizeof buf, "clip %s: gradient %d scaled", what, i);
            wt_check_same(buf, gh, want, c_dt[i] == WEFT_F32 ? 1e-7 : 1e-15);
            weft_tensor_free(want);
        }
    }
    for (int i = 0; i < NC; i++) {
        weft_tensor_free(ph[i]);
        weft_tensor_free(pd[i]);
        weft_tensor_free(before[i]);
    }
}

static void test_clip_on_device(void) {
    clip_case("above the norm", 1e9, 1, false, false); // no scaling: bit-identical gradients
    clip_case("below the norm", 1.0, 1, false, true);
    clip_case("large gradients", 0.5, 1e3, false, true);
    clip_case("NaN", 1.0, 1, true, false); // a NaN norm leaves the gradients alone
    // no gradient at all: 0, nothing to do
    weft_tensor *p = rand_on(2, c_sizes[0], WEFT_F32, -1, 1, 3, g_dev);
    CHECK(weft_clip_grad_norm(1, &p, 1.0) == 0);
    // an integer gradient is refused with a message naming clip_grad_norm
    weft_tensor *iz = weft_tensor_zeros(2, c_sizes[0], WEFT_I32), *ig = weft_tensor_to(iz, g_dev);
    CHECK(ig && weft_tensor_set_grad(p, ig) == WEFT_OK);
    CHECK(weft_clip_grad_norm(1, &p, 1.0) == -1 && wt_error_has("clip_grad_norm") && wt_error_has("i32"));
    weft_tensor_free(p);
    weft_tensor_free(iz);
    weft_tensor_free(ig);
}

int main(void) {
    if (!wt_accelerator(&g_dev, &g_mock)) {
        fprintf(stderr, "no accelerator (mock or GPU) could be set up\n");
        return 1;
    }
    printf("accelerator: %s\n", g_mock ? "mock cuda:0 (CPU kernels)" : "cuda:0");
    RUN(test_every_kind_on_device);
    RUN(test_clip_on_device);
    return wt_summary();
}
