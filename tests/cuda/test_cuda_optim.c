// The optimiser ops on CUDA against their CPU kernels (bit-identical to
// weft_optim_step, tests/optim/): every update op, reached through the
// optimiser's own description (src/optim/optim_impl.h) of every kind and
// option set, over several steps from the same start with the same
// gradients, parameters and state compared after each step; new outputs and
// in-place updates (outputs over their inputs, as weft_optim_step and the
// graph executor do); strided gradients; f32 and f64 host scalars. Then
// clipping's grad_sumsq (many blocks, strided, empty, into its accumulator)
// and grad_scale (in place, strided), and a check that every op of the
// family was run.
#include <stdlib.h>

#include "cuda_test.h"
#include "ops/op.h"
#include "ops/optim.h"
#include "optim/optim_impl.h"

static weft_tensor *rand_t(int nd, const int64_t *sz, weft_dtype dt, double lo, double hi, uint64_t seed) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= sz[d];
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    wt_vals(v, n, lo, hi, seed);
    weft_tensor *t64 = weft_tensor_from_data(v, nd, sz, WEFT_F64), *t = weft_cast(t64, dt);
    weft_tensor_free(t64);
    free(v);
    return t;
}

// The ops run so far (every op of the family must be).
static const weft_op_def *g_ran[32];
static int g_n_ran;
static void ran(const weft_op_def *op) {
    for (int i = 0; i < g_n_ran; i++)
        if (g_ran[i] == op) return;
    if (g_n_ran < 32) g_ran[g_n_ran++] = op;
}

typedef struct opt_case {
    weft_optim_opts o;
    bool inplace;       // outputs written over the inputs (weft_op_apply_into)
    bool strided_grad;  // the gradient is a transposed view
    weft_dtype scalars; // dtype of the 0-d host scalars
} opt_case;

// One update of st[0..n_out) (the parameter, then its state) on dev with gradient g, step t.
static bool step(const opt_case *c, const weft_optim_update *u, weft_tensor **st, weft_tensor *g, int t,
                 weft_device dev) {
    weft_optim_opts o = c->o;
    o.lr *= 1 + 0.2 * t; // a schedule: the scalars change every step
    double v[WEFT_OPTIM_NUM_SC];
    weft_optim_scalar_values(&o, t, v);
    int n_out = 1 + u->n_state, n = 0;
    weft_tensor *in[8], *sc[WEFT_OPTIM_MAX_SC];
    for (int j = 0; j < n_out; j++) in[n++] = st[j];
    in[n++] = g;
    for (int k = 0; k < u->n_scalar; k++) {
        weft_tensor *h = weft_tensor_scalar(v[u->scalar[k]], c->scalars);
        sc[k] = dev.type == WEFT_CPU ? h : weft_tensor_to(h, dev);
        if (dev.type != WEFT_CPU) weft_tensor_free(h);
        in[n++] = sc[k];
    }
    bool ok;
    if (c->inplace) {
        ok = weft_op_apply_into(u->op, n, in, &u->attrs, st) == WEFT_OK;
    } else {
        weft_tensor *out[4] = {NULL, NULL, NULL, NULL};
        ok = weft_op_apply(u->op, n, in, &u->attrs, out) == WEFT_OK;
        for (int j = 0; ok && j < n_out; j++) {
            weft_tensor_free(st[j]);
            st[j] = out[j];
        }
    }
    for (int k = 0; k < u->n_scalar; k++) weft_tensor_free(sc[k]);
    ran(u->op);
    return ok;
}

// A state tensor's starting values (as after earlier steps): squares and their running maxima are
// >= 0, and a centered RMSProp's grad_avg small enough that square_avg - grad_avg^2 stays >= 0.
static void state_range(const char *name, double *lo, double *hi) {
    if (!strcmp(name, "sum") || !strcmp(name, "square_avg") || !strcmp(name, "exp_avg_sq") ||
        !strcmp(name, "max_exp_avg_sq"))
        *lo = 0.5, *hi = 1.5;
    else if (!strcmp(name, "grad_avg")) *lo = -0.3, *hi = 0.3;
    else *lo = -1, *hi = 1;
}

static void run_case(const char *what, const opt_case *c, weft_dtype dt, int64_t rows, int64_t cols) {
    weft_optim_update u;
    weft_optim_update_of(&c->o, &u);
    int n_out = 1 + u.n_state;
    const int64_t sz[2] = {rows, cols}, tsz[2] = {cols, rows};
    weft_tensor *h[4], *d[4];
    for (int j = 0; j < n_out; j++) {
        double lo = -1, hi = 1;
        if (j > 0) state_range(u.state[j - 1], &lo, &hi);
        h[j] = rand_t(2, sz, dt, lo, hi, 100 + (uint64_t)j);
        d[j] = weft_tensor_to(h[j], WT_CUDA0);
    }
    double tol = dt == WEFT_F32 ? 1e-5 : 1e-12;
    char buf[160];
    for (int t = 1; t <= 4; t++) {
        // gradient: (rows, cols), or a transposed view of a (cols, rows) tensor
        weft_tensor *gs = rand_t(2, c->strided_grad ? tsz : sz, dt, -2, 2, 200 + (uint64_t)t);
        weft_tensor *gh = c->strided_grad ? weft_transpose(gs, 0, 1) : weft_tensor_ref(gs);
        weft_tensor *gds = weft_tensor_to(gs, WT_CUDA0);
        weft_tensor *gd = c->strided_grad ? weft_transpose(gds, 0, 1) : weft_tensor_ref(gds);
        bool okh = step(c, &u, h, gh, t, (weft_device){WEFT_CPU, 0});
        bool okd = step(c, &u, d, gd, t, WT_CUDA0);
        CHECK(okh && okd);
        for (int j = 0; okh && okd && j < n_out; j++) {
            CHECK(weft_device_equal(weft_tensor_device(d[j]), WT_CUDA0));
            snprintf(buf, sizeof buf, "%s (%s) %s step %d %s", what, u.op->name, weft_dtype_name(dt), t,
                     j ? u.state[j - 1] : "param");
            wt_check_same(buf, d[j], h[j], tol);
        }
        weft_tensor_free(gs);
        weft_tensor_free(gh);
        weft_tensor_free(gds);
        weft_tensor_free(gd);
    }
    for (int j = 0; j < n_out; j++) {
        weft_tensor_free(h[j]);
        weft_tensor_free(d[j]);
    }
}

static void run_all(const char *what, weft_optim_opts o) {
    static const weft_dtype dts[] = {WEFT_F32, WEFT_F64};
    for (int k = 0; k < 2; k++)
        for (int mode = 0; mode < 4; mode++) {
            opt_case c = {o, mode & 1, (mode & 2) != 0, mode == 3 ? WEFT_F32 : WEFT_F64};
            char buf[96];
            snprintf(buf, sizeof buf, "%s%s%s%s", what, c.inplace ? " in place" : "",
                     c.strided_grad ? " strided grad" : "", mode == 3 ? " f32 scalars" : "");
            run_case(buf, &c, dts[k], 7, 33);
            if (mode == 1) run_case(buf, &c, dts[k], 301, 1000); // many blocks
        }
}

static weft_optim_opts opts(weft_optim_kind k, double wd) {
    weft_optim_opts o = weft_optim_defaults(k);
    o.weight_decay = wd;
    return o;
}

static void test_sgd(void) {
    weft_optim_opts o = opts(WEFT_OPTIM_SGD, 0);
    o.lr = 0.05;
    run_all("sgd", o);
    o.weight_decay = 0.01;
    run_all("sgd wd", o);
    o.momentum = 0.9;
    run_all("momentum wd", o);
    o.momentum = 0.8, o.dampening = 0.25, o.weight_decay = 0.05;
    run_all("momentum wd dampening", o);
    o.dampening = 0, o.nesterov = true;
    run_all("nesterov wd", o);
}

static void test_adagrad(void) {
    weft_optim_opts o = opts(WEFT_OPTIM_ADAGRAD, 0);
    run_all("adagrad", o);
    o.weight_decay = 0.01, o.lr_decay = 0.1, o.initial_accumulator_value = 0.2;
    run_all("adagrad wd lr_decay", o);
}

static void test_rmsprop(void) {
    for (int v = 0; v < 4; v++) {
        weft_optim_opts o = opts(WEFT_OPTIM_RMSPROP, v == 3 ? 0.01 : 0);
        o.alpha = 0.9;
        o.momentum = (v & 1) ? 0.5 : 0;
        o.centered = (v & 2) != 0;
        const char *names[4] = {"rmsprop", "rmsprop momentum", "rmsprop centered", "rmsprop centered momentum wd"};
        run_all(names[v], o);
    }
}

static void test_adam(void) {
    run_all("adam", opts(WEFT_OPTIM_ADAM, 0));
    weft_optim_opts o = opts(WEFT_OPTIM_ADAM, 0.02);
    o.beta1 = 0.8, o.beta2 = 0.99, o.eps = 1e-6;
    run_all("adam l2", o);
    o.amsgrad = true;
    run_all("adam l2 amsgrad", o);
    run_all("adamw", opts(WEFT_OPTIM_ADAMW, 0.01));
    o = opts(WEFT_OPTIM_ADAMW, 0.05);
    o.amsgrad = true;
    run_all("adamw amsgrad", o);
}

// grad_sumsq: (acc, x) -> acc + sum of x*x in f64, new output or in place over acc (the CUDA
// reduction sums in another order: tolerance).
static void test_sumsq(void) {
    const weft_op_def *op = weft_op_find("grad_sumsq");
    const int64_t ns[] = {0, 1, 1000, 262147, (1 << 21) + 5}; // the last: more than 1024 blocks' worth
    for (int dt = 0; dt < 2; dt++)
        for (size_t k = 0; k < sizeof ns / sizeof *ns; k++)
            for (int mode = 0; mode < 4; mode++) {
                bool strided = mode & 1, inplace = mode & 2;
                if (strided && ns[k] < 5) continue;
                weft_dtype d = dt ? WEFT_F64 : WEFT_F32;
                int64_t sz[2] = {ns[k] / 5, 5}, n1[1] = {ns[k]};
                weft_tensor *x = strided ? rand_t(2, sz, d, -3, 3, 7 + k) : rand_t(1, n1, d, -3, 3, 7 + k);
                weft_tensor *xh = strided ? weft_transpose(x, 0, 1) : weft_tensor_ref(x);
                weft_tensor *xd0 = weft_tensor_to(x, WT_CUDA0);
                weft_tensor *xd = strided ? weft_transpose(xd0, 0, 1) : weft_tensor_ref(xd0);
                weft_tensor *ah = weft_tensor_scalar(0.25, WEFT_F64), *ad = weft_tensor_to(ah, WT_CUDA0), *sh, *sd;
                if (inplace) { // the accumulator takes the sum
                    CHECK(weft_op_apply_into(op, 2, (weft_tensor *[]){ah, xh}, NULL, &ah) == WEFT_OK);
                    CHECK(weft_op_apply_into(op, 2, (weft_tensor *[]){ad, xd}, NULL, &ad) == WEFT_OK);
                    sh = weft_tensor_ref(ah), sd = weft_tensor_ref(ad);
                } else {
                    sh = weft_op_apply1(op, 2, (weft_tensor *[]){ah, xh}, NULL);
                    sd = weft_op_apply1(op, 2, (weft_tensor *[]){ad, xd}, NULL);
                }
                CHECK(sh && sd && weft_tensor_ndim(sd) == 0 && weft_tensor_dtype(sd) == WEFT_F64);
                CHECK(sd && weft_device_equal(weft_tensor_device(sd), WT_CUDA0));
                char buf[96];
                snprintf(buf, sizeof buf, "grad_sumsq %s n=%lld%s%s", weft_dtype_name(d),
                         (long long)weft_tensor_numel(x), strided ? " strided" : "", inplace ? " in place" : "");
                if (sh && sd) wt_check_same(buf, sd, sh, 1e-13);
                if (sh && sd && ns[k] == 0) CHECK(weft_tensor_item(sh) == 0.25 && weft_tensor_item(sd) == 0.25);
                weft_tensor *ts[] = {x, xh, xd0, xd, ah, ad, sh, sd};
                for (int i = 0; i < 8; i++) weft_tensor_free(ts[i]);
            }
    ran(op);
}

// grad_sumsq over many inputs at once (clipping's norm in one pass): 30 f32 inputs of mixed sizes with a
// transposed one and an f64 one among them, so the CUDA kernel splits them into tables and lone launches.
// The result equals one call per input on the same device bit for bit, and the CPU's within 1e-13.
static void test_sumsq_many(void) {
    const weft_op_def *op = weft_op_find("grad_sumsq");
    enum { N = 30 };
    weft_tensor *h[N + 1], *d[N + 1], *own[N];
    h[0] = weft_tensor_scalar(0.5, WEFT_F64), d[0] = weft_tensor_to(h[0], WT_CUDA0);
    for (int i = 0; i < N; i++) {
        int64_t sz[2] = {1 + 13 * i, i == 7 ? 300 : 1 + (i % 4) * 40000};
        own[i] = rand_t(2, sz, i == 19 ? WEFT_F64 : WEFT_F32, -2, 2, 900 + (uint64_t)i);
        weft_tensor *dd = weft_tensor_to(own[i], WT_CUDA0);
        h[i + 1] = i == 7 ? weft_transpose(own[i], 0, 1) : weft_tensor_ref(own[i]);
        d[i + 1] = i == 7 ? weft_transpose(dd, 0, 1) : weft_tensor_ref(dd);
        weft_tensor_free(dd);
    }
    weft_tensor *sh = weft_op_apply1(op, N + 1, h, NULL), *sd = weft_op_apply1(op, N + 1, d, NULL);
    weft_tensor *one = weft_tensor_to(h[0], WT_CUDA0); // one call per input, into one accumulator
    for (int i = 1; i <= N; i++) CHECK(weft_op_apply_into(op, 2, (weft_tensor *[]){one, d[i]}, NULL, &one) == WEFT_OK);
    CHECK(sh && sd);
    if (sh && sd) {
        wt_check_same("grad_sumsq of 30 inputs", sd, sh, 1e-13);
        wt_check_same("grad_sumsq of 30 inputs against 30 calls", sd, one, 0);
    }
    for (int i = 0; i <= N; i++) weft_tensor_free(h[i]), weft_tensor_free(d[i]);
    for (int i = 0; i < N; i++) weft_tensor_free(own[i]);
    weft_tensor_free(sh), weft_tensor_free(sd), weft_tensor_free(one);
}

// grad_scale: (g, c) -> g * (T)c, new output or in place, strided input, f32 or f64 factor.
static void test_scale(void) {
    const weft_op_def *op = weft_op_find("grad_scale");
    for (int dt = 0; dt < 2; dt++)
        for (int mode = 0; mode < 4; mode++) {
            weft_dtype d = dt ? WEFT_F64 : WEFT_F32;
            bool inplace = mode & 1, strided = mode & 2;
            int64_t sz[2] = {301, 77};
            weft_tensor *x = rand_t(2, sz, d, -3, 3, 40 + (uint64_t)mode);
            weft_tensor *xh = strided ? weft_transpose(x, 0, 1) : weft_tensor_ref(x);
            weft_tensor *xd0 = weft_tensor_to(x, WT_CUDA0);
            weft_tensor *xd = strided ? weft_transpose(xd0, 0, 1) : weft_tensor_ref(xd0);
            weft_tensor *ch = weft_tensor_scalar(0.3721, mode == 2 ? WEFT_F32 : WEFT_F64);
            weft_tensor *cd = weft_tensor_to(ch, WT_CUDA0);
            weft_tensor *oh, *od;
            if (inplace && !strided) { // written over the input
                oh = weft_tensor_clone(xh), od = weft_tensor_to(oh, WT_CUDA0);
                CHECK(weft_op_apply_into(op, 2, (weft_tensor *[]){oh, ch}, NULL, &oh) == WEFT_OK);
                CHECK(weft_op_apply_into(op, 2, (weft_tensor *[]){od, cd}, NULL, &od) == WEFT_OK);
            } else {
                oh = weft_op_apply1(op, 2, (weft_tensor *[]){xh, ch}, NULL);
                od = weft_op_apply1(op, 2, (weft_tensor *[]){xd, cd}, NULL);
            }
            char buf[96];
            snprintf(buf, sizeof buf, "grad_scale %s mode %d", weft_dtype_name(d), mode);
            CHECK(oh && od);
            if (oh && od) wt_check_same(buf, od, oh, 0); // one rounding of one product: exact on both
            weft_tensor *ts[] = {x, xh, xd0, xd, ch, cd, oh, od};
            for (int i = 0; i < 8; i++) weft_tensor_free(ts[i]);
        }
    ran(op);
}

// Every op of the family ran above.
// update_multi on CUDA against its CPU kernel (which runs each group's own update op): Adam, AdamW and
// amsgrad as multi-tensor launches (30 tensors: two launches of the 24-tensor table; sizes across the
// 8192-element chunks, one empty), SGD with momentum through the per-group loop; 3 steps in place.
static void multi_case(weft_optim_opts o, weft_dtype dt) {
    enum { NG = 30 };
    weft_optim_update u;
    weft_optim_update_of(&o, &u);
    int G = u.n_state + 2;
    weft_tensor *h[NG * 5], *d[NG * 5];
    for (int j = 0; j < NG; j++) {
        int64_t n = j == 5 ? 0 : j % 3 == 0 ? 8192 * (j / 3) + 17 : 1 + 37 * j;
        for (int q = 0; q < G; q++) {
            double lo = -1, hi = 1;
            if (q > 0 && q <= u.n_state) state_range(u.state[q - 1], &lo, &hi);
            h[j * G + q] = rand_t(1, &n, dt, lo, hi, 300 + 7 * (uint64_t)j + (uint64_t)q);
            d[j * G + q] = weft_tensor_to(h[j * G + q], WT_CUDA0);
        }
    }
    weft_attrs at = u.attrs;
    at.i[WEFT_UPDATE_MULTI_OP] = weft_optim_update_op_index(u.op);
    const weft_op_def *multi = weft_op_find("update_multi");
    for (int t = 1; t <= 3; t++) {
        double v[WEFT_OPTIM_NUM_SC];
        weft_optim_scalar_values(&o, t, v);
        weft_tensor *hin[NG * 5 + 3], *din[NG * 5 + 3], *sh[3], *sd[3];
        for (int i = 0; i < NG * G; i++) hin[i] = h[i], din[i] = d[i];
        for (int k = 0; k < u.n_scalar; k++) {
            sh[k] = weft_tensor_scalar(v[u.scalar[k]], WEFT_F64);
            sd[k] = weft_tensor_to(sh[k], WT_CUDA0);
            hin[NG * G + k] = sh[k], din[NG * G + k] = sd[k];
        }
        int n = NG * G + u.n_scalar;
        CHECK(weft_op_apply_into(multi, n, hin, &at, NULL) == WEFT_OK);
        CHECK(weft_op_apply_into(multi, n, din, &at, NULL) == WEFT_OK);
        for (int i = 0; i < NG * G; i++) {
            char buf[128];
            snprintf(buf, sizeof buf, "update_multi (%s) %s step %d tensor %d", u.op->name, weft_dtype_name(dt), t, i);
            wt_check_same(buf, d[i], h[i], dt == WEFT_F32 ? 1e-5 : 1e-12);
        }
        for (int k = 0; k < u.n_scalar; k++) weft_tensor_free(sh[k]), weft_tensor_free(sd[k]);
    }
    for (int i = 0; i < NG * G; i++) weft_tensor_free(h[i]), weft_tensor_free(d[i]);
    ran(multi);
}

static void test_update_multi(void) {
    weft_optim_opts a = opts(WEFT_OPTIM_ADAM, 0.01), w = opts(WEFT_OPTIM_ADAMW, 0.1), s = opts(WEFT_OPTIM_SGD, 0);
    weft_optim_opts ams = a;
    ams.amsgrad = true;
    s.momentum = 0.9;
    for (int k = 0; k < 2; k++) {
        weft_dtype dt = k ? WEFT_F64 : WEFT_F32;
        multi_case(a, dt);
        multi_case(w, dt);
        multi_case(ams, dt);
        multi_case(s, dt);
    }
}

static void test_coverage(void) {
    static const char *const names[] = {"sgd_update", "sgd_momentum_update", "adagrad_update", "rmsprop_update",
                                        "rmsprop_momentum_update", "rmsprop_centered_update",
                                        "rmsprop_centered_momentum_update", "adam_update", "adam_amsgrad_update",
                                        "update_multi", "grad_sumsq", "grad_scale"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        const weft_op_def *op = weft_op_find(names[k]);
        bool seen = false;
        for (int i = 0; i < g_n_ran; i++) seen |= g_ran[i] == op;
        if (!seen) fprintf(stderr, "%s: not run\n", names[k]);
        CHECK(op && seen);
    }
}

// Mismatched inputs are refused before any kernel (infer), on CUDA as on the CPU.
static void test_errors(void) {
    weft_tensor *p = weft_tensor_zeros(1, (const int64_t[]){4}, WEFT_F32), *d = weft_tensor_to(p, WT_CUDA0);
    weft_tensor *g = weft_tensor_zeros(1, (const int64_t[]){5}, WEFT_F32), *dg = weft_tensor_to(g, WT_CUDA0);
    weft_tensor *lr = weft_tensor_scalar(0.1, WEFT_F64), *dlr = weft_tensor_to(lr, WT_CUDA0);
    weft_tensor *r = weft_op_apply1(weft_op_find("sgd_update"), 3, (weft_tensor *[]){d, dg, dlr}, NULL);
    CHECK(r == NULL && wt_error_has("sgd_update"));
    r = weft_op_apply1(weft_op_find("sgd_update"), 3, (weft_tensor *[]){d, d, lr}, NULL);
    CHECK(r == NULL && wt_error_has("sgd_update") && wt_error_has("different devices"));
    r = weft_op_apply1(weft_op_find("grad_scale"), 2, (weft_tensor *[]){d, d}, NULL);
    CHECK(r == NULL && wt_error_has("grad_scale") && wt_error_has("0-d"));
    weft_tensor *objs[] = {p, d, g, dg, lr, dlr};
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) weft_tensor_free(objs[i]);
}

int main(void) {
    WT_CUDA_OR_SKIP();
    RUN(test_sgd);
    RUN(test_adagrad);
    RUN(test_rmsprop);
    RUN(test_adam);
    RUN(test_sumsq);
    RUN(test_sumsq_many);
    RUN(test_scale);
    RUN(test_update_multi);
    RUN(test_coverage);
    RUN(test_errors);
    return wt_summary();
}
