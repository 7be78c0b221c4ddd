// Mixed precision on the CPU: bf16/f16 matmul (widened operands, one
// rounding), autocast (matmul runs in the low dtype, f32 in and out, f32
// gradients for f32 parameters), and the f16 loss scaler (unscale, clip,
// skip on overflow, back off, grow).
#include <math.h>
#include <stdlib.h>

#include "weft_test.h"

static weft_tensor *rand32(int64_t r, int64_t c, uint64_t seed, bool grad) {
    weft_tensor *t64 = wt_rand64(2, (int64_t[]){r, c}, -2, 2, seed, false), *t = weft_cast(t64, WEFT_F32);
    weft_tensor_free(t64);
    if (grad) weft_tensor_set_requires_grad(t, true);
    return t;
}

// Reference: each product of the rounded operands summed in double, then rounded to lo.
static void test_half_matmul(void) {
    weft_dtype lows[2] = {WEFT_BF16, WEFT_F16};
    for (int l = 0; l < 2; l++) {
        weft_dtype lo = lows[l];
        weft_tensor *a = rand32(13, 37, 1, false), *b = rand32(37, 9, 2, false);
        weft_tensor *al = weft_cast(a, lo), *bl = weft_cast(b, lo);
        weft_tensor *bt = weft_transpose(wt_keep(weft_tensor_contiguous(wt_keep(weft_transpose(bl, 0, 1)))), 0, 1);
        weft_tensor *c = weft_matmul(al, bt); // b through a transposed view
        CHECK(c && weft_tensor_dtype(c) == lo);
        double av[13 * 37], bv[37 * 9], cv[13 * 9];
        weft_tensor_to_f64(al, av, 13 * 37);
        weft_tensor_to_f64(bl, bv, 37 * 9);
        weft_tensor_to_f64(c, cv, 13 * 9);
        int bad = 0;
        for (int i = 0; i < 13; i++)
            for (int j = 0; j < 9; j++) {
                double s = 0;
                for (int k = 0; k < 37; k++) s += av[i * 37 + k] * bv[k * 9 + j];
                float f = (float)s; // the f32 sum may differ from the f64 one in its last bits only
                double want = lo == WEFT_BF16 ? weft_bf16_to_f32(weft_f32_to_bf16(f)) : weft_f16_to_f32(weft_f32_to_f16(f));
                double ulp = fabs(want) * (lo == WEFT_BF16 ? 1.0 / 128 : 1.0 / 1024) + 1e-6;
                if (fabs(cv[i * 9 + j] - want) > ulp) bad++;
            }
        CHECK(bad == 0);
        weft_tensor *objs[] = {a, b, al, bl, bt, c};
        for (int i = 0; i < 6; i++) weft_tensor_free(objs[i]);
        wt_drop_all();
    }
}

// Under autocast, matmul(x, w) on f32 equals matmul(cast(x), cast(w)) bit for
// bit and stays bf16 (as torch.autocast); the gradients arrive as f32. Type
// promotion: bf16 with f32 computes in f32, inside autocast or not; inside
// it, an op without a bf16 kernel runs on an f32 copy of its bf16 input, and
// matmul takes an input that is already bf16 as it is.
static void test_autocast_matmul(void) {
    weft_tensor *x = rand32(8, 33, 3, true), *w = rand32(33, 5, 4, true);
    weft_tensor *x2 = rand32(8, 33, 3, true), *w2 = rand32(33, 5, 4, true);
    CHECK(weft_autocast_set(WEFT_BF16) == WEFT_OK && weft_autocast_get() == WEFT_BF16);
    weft_tensor *y = wt_keep(weft_matmul(x, w));
    weft_tensor *sm = wt_keep(weft_softmax(y, 1));          // no bf16 kernel: f32
    weft_tensor *y2 = wt_keep(weft_matmul(wt_keep(weft_transpose(y, 0, 1)), x)); // bf16 x f32 -> bf16
    CHECK(weft_autocast_set(WEFT_F32) == WEFT_OK);
    CHECK(y && weft_tensor_dtype(y) == WEFT_BF16);
    weft_tensor *xb = wt_keep(weft_cast(x2, WEFT_BF16));
    weft_tensor *ref = wt_keep(weft_matmul(xb, wt_keep(weft_cast(w2, WEFT_BF16))));
    wt_check_same("autocast forward", y, ref, 0);
    weft_tensor *yf = wt_keep(weft_cast(y, WEFT_F32));
    wt_check_same("f32 op on a bf16 input", sm, wt_keep(weft_softmax(yf, 1)), 0);
    CHECK(y2 && weft_tensor_dtype(y2) == WEFT_BF16);
    wt_check_same("matmul of bf16 and f32 inputs", y2, wt_keep(weft_matmul(wt_keep(weft_transpose(ref, 0, 1)), xb)), 0);
    weft_tensor *sum = wt_keep(weft_add(y, wt_keep(weft_matmul(x2, w2)))); // bf16 + f32, outside autocast
    CHECK(sum && weft_tensor_dtype(sum) == WEFT_F32);
    wt_check_same("type promotion", sum, wt_keep(weft_add(yf, wt_keep(weft_matmul(x2, w2)))), 0);
    weft_tensor *plain = wt_keep(weft_matmul(x2, w2));
    double d = 0, yv[40], pv[40];
    weft_tensor_to_f64(y, yv, 40);
    weft_tensor_to_f64(plain, pv, 40);
    for (int i = 0; i < 40; i++) d = fmax(d, fabs(yv[i] - pv[i]));
    CHECK(d > 0); // it really ran in bf16
    CHECK(weft_backward(wt_keep(weft_sum(wt_keep(weft_cast(y, WEFT_F32)), 0, NULL, false)), NULL, NULL) == WEFT_OK);
    CHECK(weft_backward(wt_keep(weft_sum(wt_keep(weft_cast(ref, WEFT_F32)), 0, NULL, false)), NULL, NULL) == WEFT_OK);
    CHECK(weft_tensor_dtype(weft_tensor_grad(x)) == WEFT_F32 && weft_tensor_dtype(weft_tensor_grad(w)) == WEFT_F32);
    wt_check_same("autocast grad x", weft_tensor_grad(x), weft_tensor_grad(x2), 0);
    wt_check_same("autocast grad w", weft_tensor_grad(w), weft_tensor_grad(w2), 0);
    // f64 inputs and ops without a low-precision kernel are left alone
    weft_autocast_set(WEFT_F16);
    weft_tensor *x64 = wt_keep(weft_cast(x2, WEFT_F64)), *w64 = wt_keep(weft_cast(w2, WEFT_F64));
    weft_tensor *y64 = wt_keep(weft_matmul(x64, w64));
    CHECK(y64 && weft_tensor_dtype(y64) == WEFT_F64);
    weft_tensor *img = wt_keep(weft_tensor_ones(WEFT_DIMS(1, 2, 5, 5), WEFT_F32)), *k = wt_keep(weft_tensor_full(WEFT_DIMS(3, 2, 3, 3), WEFT_F32, 0.1));
    weft_tensor *cv = wt_keep(weft_conv2d(img, k, NULL, &(weft_conv2d_params){0}));
    weft_autocast_set(WEFT_F32);
    weft_tensor *cv_ref = wt_keep(weft_conv2d(img, k, NULL, &(weft_conv2d_params){0}));
    wt_check_same("conv2d without a half kernel", cv, cv_ref, 0);
    // errors stay errors (no retry through casts): bf16 operands of mismatched shapes under autocast,
    // and an f16 operand under bf16 autocast runs in bf16
    weft_autocast_set(WEFT_BF16);
    weft_tensor *bad = weft_matmul(xb, xb);
    CHECK(bad == NULL && wt_error_has("matmul") && wt_error_has("do not match"));
    weft_tensor *h16 = wt_keep(weft_cast(x2, WEFT_F16)), *mixed = wt_keep(weft_matmul(h16, w2));
    weft_autocast_set(WEFT_F32);
    CHECK(mixed && weft_tensor_dtype(mixed) == WEFT_BF16);
    CHECK(weft_autocast_set(WEFT_I32) != WEFT_OK && wt_error_has("autocast"));
    weft_tensor *objs[] = {x, w, x2, w2};
    for (int i = 0; i < 4; i++) weft_tensor_free(objs[i]);
    wt_drop_all();
}

// Loss scaling: the scaled step equals the unscaled one (scale a power of
// two: exact), an Inf gradient skips the step and halves the scale, and
// growth_interval good steps double it.
static void test_grad_scaler(void) {
    weft_tensor *p = rand32(4, 4, 5, true), *q = rand32(4, 4, 5, true);
    weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_SGD);
    o.lr = 0.1;
    weft_optim *op = weft_optim_create(&o, 1, &p, NULL), *oq = weft_optim_create(&o, 1, &q, NULL);
    weft_grad_scaler *gs = weft_grad_scaler_create(1024, 2, 0.5, 2);
    CHECK(gs && op && oq);
    bool stepped = false;
    for (int step = 0; step < 2; step++) {
        weft_tensor *lp = wt_keep(weft_sum(wt_keep(weft_mul(p, p)), 0, NULL, false));
        weft_tensor *lq = wt_keep(weft_sum(wt_keep(weft_mul(q, q)), 0, NULL, false));
        weft_tensor *sl = wt_keep(weft_grad_scaler_scale(gs, lp));
        CHECK_NEAR(weft_tensor_item(sl), weft_tensor_item(lp) * weft_grad_scaler_get_scale(gs), 1e-6);
        CHECK(weft_backward(sl, NULL, NULL) == WEFT_OK && weft_backward(lq, NULL, NULL) == WEFT_OK);
        CHECK(weft_grad_scaler_step(gs, op, &stepped) == WEFT_OK && stepped);
        CHECK(weft_optim_step(oq) == WEFT_OK);
        wt_check_same("scaled step == plain step", p, q, 0);
        weft_optim_zero_grad(op);
        weft_optim_zero_grad(oq);
        wt_drop_all();
    }
    CHECK_NEAR(weft_grad_scaler_get_scale(gs), 2048, 0); // grew after 2 good steps
    // an overflowing gradient: step skipped, parameters unchanged, scale halved
    weft_tensor *before = wt_keep(weft_tensor_clone(p));
    weft_tensor *inf = wt_keep(weft_tensor_full(WEFT_DIMS(4, 4), WEFT_F32, INFINITY));
    weft_tensor_set_grad(p, inf);
    CHECK(weft_grad_scaler_step(gs, op, &stepped) == WEFT_OK && !stepped);
    wt_check_same("skipped step", p, before, 0);
    CHECK_NEAR(weft_grad_scaler_get_scale(gs), 1024, 0);
    CHECK(weft_grad_scaler_create(-1, 2, 0.5, 1) == NULL && wt_error_has("grad_scaler"));
    weft_grad_scaler_free(gs);
    weft_optim_free(op);
    weft_optim_free(oq);
    weft_tensor_free(p);
    weft_tensor_free(q);
    wt_drop_all();
}

// unscale, clip, step (PyTorch's recipe for clipping under loss scaling):
// with a power-of-two scale every step equals clip + step on the plain loss's
// gradients, bit for bit, and clips there (the unscaled norm is above
// max_norm, the scaled one would be far above). Two parameters, so that the
// one read-back covers several gradients. An Inf gradient in one of them:
// the norm is infinite, the step is skipped and the scale backs off. A second unscale before the step is an
// error; update alone moves the scale as step does.
static void test_grad_scaler_unscale_clip(void) {
    weft_tensor *p[2] = {rand32(4, 4, 11, true), rand32(3, 5, 12, true)};
    weft_tensor *q[2] = {rand32(4, 4, 11, true), rand32(3, 5, 12, true)};
    weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_ADAM);
    o.lr = 0.01;
    weft_optim *op = weft_optim_create(&o, 2, p, NULL), *oq = weft_optim_create(&o, 2, q, NULL);
    weft_grad_scaler *gs = weft_grad_scaler_create(4096, 2, 0.5, 100);
    CHECK(gs && op && oq);
    bool stepped = false;
    for (int step = 0; step < 3; step++) {
        weft_tensor *l[2];
        for (int k = 0; k < 2; k++) {
            weft_tensor **t = k ? q : p;
            weft_tensor *a = wt_keep(weft_sum(wt_keep(weft_mul(t[0], t[0])), 0, NULL, false));
            weft_tensor *b = wt_keep(weft_sum(wt_keep(weft_mul(t[1], t[1])), 0, NULL, false));
            l[k] = wt_keep(weft_mul_scalar(wt_keep(weft_add(a, b)), 3.0));
        }
        CHECK(weft_backward(wt_keep(weft_grad_scaler_scale(gs, l[0])), NULL, NULL) == WEFT_OK);
        CHECK(weft_backward(l[1], NULL, NULL) == WEFT_OK);
        CHECK(weft_grad_scaler_unscale(gs, op) == WEFT_OK);
        wt_check_same("unscaled gradient", weft_tensor_grad(p[1]), weft_tensor_grad(q[1]), 0);
        double np_ = weft_clip_grad_norm(2, p, 1.0), nq = weft_clip_grad_norm(2, q, 1.0);
        CHECK(np_ == nq && np_ > 1.0); // it clipped
        CHECK(weft_grad_scaler_unscale(gs, op) == WEFT_ERR_STATE && wt_error_has("already"));
        CHECK(weft_grad_scaler_step(gs, op, &stepped) == WEFT_OK && stepped);
        CHECK(weft_optim_step(oq) == WEFT_OK);
        for (int k = 0; k < 2; k++) wt_check_same("unscale + clip + step == clip + step", p[k], q[k], 0);
        weft_optim_zero_grad(op);
        weft_optim_zero_grad(oq);
        wt_drop_all();
    }
    CHECK(weft_grad_scaler_get_scale(gs) == 4096);
    weft_tensor *before = wt_keep(weft_tensor_clone(p[0]));
    weft_tensor *g = wt_keep(weft_tensor_full(WEFT_DIMS(4, 4), WEFT_F32, 1)), *one = wt_keep(weft_tensor_full(WEFT_DIMS(3, 5), WEFT_F32, 1));
    float *gv = weft_tensor_data(g);
    gv[5] = INFINITY;
    weft_tensor_set_grad(p[0], g);
    weft_tensor_set_grad(p[1], one);
    CHECK(weft_grad_scaler_unscale(gs, op) == WEFT_OK);
    double ones[15];
    weft_tensor_to_f64(weft_tensor_grad(p[1]), ones, 15);
    CHECK(ones[0] == 1.0 / 4096 && ones[14] == 1.0 / 4096); // unscaled
    CHECK(weft_clip_grad_norm(2, p, 1.0) == INFINITY);
    CHECK(weft_grad_scaler_step(gs, op, &stepped) == WEFT_OK && !stepped);
    wt_check_same("skipped step", p[0], before, 0);
    CHECK(weft_grad_scaler_get_scale(gs) == 2048);
    CHECK(weft_grad_scaler_update(gs, false) == WEFT_OK && weft_grad_scaler_get_scale(gs) == 2048);
    CHECK(weft_grad_scaler_update(gs, true) == WEFT_OK && weft_grad_scaler_get_scale(gs) == 1024);
    // update after unscale: the overflow unscale found backs the scale off, whatever the caller says
    weft_tensor_set_grad(p[0], g);
    CHECK(weft_grad_scaler_unscale(gs, op) == WEFT_OK);
    CHECK(weft_grad_scaler_update(gs, false) == WEFT_OK && weft_grad_scaler_get_scale(gs) == 512);
    CHECK(weft_grad_scaler_update(NULL, true) != WEFT_OK && weft_grad_scaler_unscale(NULL, op) != WEFT_OK);
    weft_grad_scaler *fast = weft_grad_scaler_create(8, 2, 0.5, 2);
    CHECK(fast && weft_grad_scaler_update(fast, false) == WEFT_OK && weft_grad_scaler_get_scale(fast) == 8);
    CHECK(weft_grad_scaler_update(fast, false) == WEFT_OK && weft_grad_scaler_get_scale(fast) == 16);
    weft_grad_scaler_free(fast);
    weft_grad_scaler_free(gs);
    weft_optim_free(op);
    weft_optim_free(oq);
    for (int k = 0; k < 2; k++) weft_tensor_free(p[k]), weft_tensor_free(q[k]);
    wt_drop_all();
}

// get_state / set_state carry a scaler over (a checkpoint): a copy made
// mid-way, one good step after a backoff, grows on the same step as the
// original (its growth tracker came along) and a fresh scaler given only the
// scale grows a step later. Bad states are refused.
static void test_grad_scaler_state(void) {
    weft_tensor *p = rand32(4, 4, 9, true);
    weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_SGD);
    o.lr = 0.01;
    weft_optim *op = weft_optim_create(&o, 1, &p, NULL);
    weft_grad_scaler *gs = weft_grad_scaler_create(1024, 2, 0.5, 3);
    weft_tensor *inf = wt_keep(weft_tensor_full(WEFT_DIMS(4, 4), WEFT_F32, INFINITY));
    weft_tensor *one = wt_keep(weft_tensor_full(WEFT_DIMS(4, 4), WEFT_F32, 1));
    bool stepped;
    weft_tensor_set_grad(p, inf); // backoff: 512, tracker 0
    CHECK(weft_grad_scaler_step(gs, op, &stepped) == WEFT_OK && !stepped);
    weft_tensor_set_grad(p, one); // one good step: tracker 1
    CHECK(weft_grad_scaler_step(gs, op, &stepped) == WEFT_OK && stepped);
    double scale;
    int64_t good;
    weft_grad_scaler_get_state(gs, &scale, &good);
    CHECK(scale == 512 && good == 1);
    weft_grad_scaler *copy = weft_grad_scaler_create(1024, 2, 0.5, 3), *fresh = weft_grad_scaler_create(1024, 2, 0.5, 3);
    CHECK(copy && fresh && weft_grad_scaler_set_state(copy, scale, good) == WEFT_OK);
    CHECK(weft_grad_scaler_set_state(fresh, scale, 0) == WEFT_OK);
    double want[3] = {512, 1024, 1024}, want_fresh[3] = {512, 512, 1024};
    for (int k = 0; k < 3; k++) { // three more good steps each
        weft_grad_scaler *all[3] = {gs, copy, fresh};
        for (int j = 0; j < 3; j++) {
            weft_tensor_set_grad(p, one);
            CHECK(weft_grad_scaler_step(all[j], op, &stepped) == WEFT_OK && stepped);
        }
        CHECK(weft_grad_scaler_get_scale(gs) == want[k] && weft_grad_scaler_get_scale(copy) == want[k]);
        CHECK(weft_grad_scaler_get_scale(fresh) == want_fresh[k]);
    }
    CHECK(weft_grad_scaler_set_state(copy, 0, 0) != WEFT_OK && wt_error_has("grad_scaler_set_state"));
    CHECK(weft_grad_scaler_set_state(copy, INFINITY, 0) != WEFT_OK);
    CHECK(weft_grad_scaler_set_state(copy, 8, -1) != WEFT_OK);
    CHECK(weft_grad_scaler_set_state(NULL, 8, 0) != WEFT_OK);
    CHECK(weft_grad_scaler_get_scale(copy) == 1024); // unchanged by the refusals
    weft_grad_scaler_free(gs);
    weft_grad_scaler_free(copy);
    weft_grad_scaler_free(fresh);
    weft_optim_free(op);
    weft_tensor_free(p);
    wt_drop_all();
}

// A small f16-autocast regression trained with loss scaling: the loss falls
// and the master weights stay f32.
static void test_train_f16(void) {
    weft_tensor *x = rand32(64, 8, 6, false), *wtrue = rand32(8, 1, 7, false), *w = rand32(8, 1, 8, true);
    weft_tensor *y = weft_matmul(x, wtrue);
    weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_ADAM);
    o.lr = 0.05;
    weft_optim *opt = weft_optim_create(&o, 1, &w, NULL);
    weft_grad_scaler *gs = weft_grad_scaler_create(0, 0, 0, 0);
    double first = 0, last = 0;
    for (int s = 0; s < 60; s++) {
        weft_autocast_set(WEFT_F16);
        weft_tensor *pred = wt_keep(weft_matmul(x, w));
        weft_autocast_set(WEFT_F32);
        weft_tensor *d = wt_keep(weft_sub(pred, y)), *l = wt_keep(weft_mean(wt_keep(weft_mul(d, d)), 0, NULL, false));
        if (s == 0) first = weft_tensor_item(l);
        last = weft_tensor_item(l);
        CHECK(weft_backward(wt_keep(weft_grad_scaler_scale(gs, l)), NULL, NULL) == WEFT_OK);
        CHECK(weft_grad_scaler_step(gs, opt, NULL) == WEFT_OK);
        weft_optim_zero_grad(opt);
        wt_drop_all();
    }
    CHECK(weft_tensor_dtype(w) == WEFT_F32);
    CHECK(last < 0.01 * first);
    weft_grad_scaler_free(gs);
    weft_optim_free(opt);
    weft_tensor *objs[] = {x, wtrue, w, y};
    for (int i = 0; i < 4; i++) weft_tensor_free(objs[i]);
}

int main(void) {
    RUN(test_half_matmul);
    RUN(test_autocast_matmul);
    RUN(test_grad_scaler);
    RUN(test_grad_scaler_unscale_clip);
    RUN(test_grad_scaler_state);
    RUN(test_train_f16);
    return wt_summary();
}
