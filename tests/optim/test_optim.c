// Optimisers: every kind against (1) scalar reference code below that follows
// the published update equations, and (2) PyTorch 1.13's numbers in
// tests/data/optim_ref.txt (written by tests/data/gen_optim.py); gradient
// clipping and LR schedules against closed forms; state save/load continues
// bit-identically; bad hyper-parameters and inputs are errors naming the optimiser.
#include "weft_test.h"

#include <stdlib.h>
#include <string.h>

#include "ops/optim.h"

// ---- the fixed example (the same formulas as tests/data/gen_optim.py) ----
// A (2,3), B (4); B has no gradient on step 2 (skipped, its step count stays).
static const double SCALE[3] = {1.0, 0.5, 0.05};
static void init_values(double *a, double *b) {
    for (int i = 0; i < 6; i++) a[i] = 0.5 - 0.13 * i;
    for (int i = 0; i < 4; i++) b[i] = -0.3 + 0.21 * i;
}
// Returns false when B has no gradient at step s (1-based).
static bool grad_values(int s, double *ga, double *gb) {
    for (int i = 0; i < 6; i++) ga[i] = sin(1.0 + i + 0.7 * s) * SCALE[s - 1];
    if (s == 2) return false;
    for (int i = 0; i < 4; i++) gb[i] = cos(0.3 * i - 0.5 * s) * 0.8 * SCALE[s - 1];
    return true;
}

// ---- scalar reference: the update equations as published (PyTorch docs' algorithm boxes) ----
typedef struct ref_state {
    double s1[6], s2[6], s3[6]; // per-element state
    int64_t t;                  // updates this parameter received
} ref_state;

static void ref_update(const weft_optim_opts *o, int n, double *p, const double *grad, ref_state *st) {
    int64_t t = ++st->t;
    for (int i = 0; i < n; i++) {
        double g = grad[i];
        switch (o->kind) {
        case WEFT_OPTIM_SGD:
            g += o->weight_decay * p[i];
            if (o->momentum != 0) {
                double *b = &st->s1[i];
                *b = t > 1 ? o->momentum * *b + (1 - o->dampening) * g : g;
                g = o->nesterov ? g + o->momentum * *b : *b;
            }
            p[i] -= o->lr * g;
            break;
        case WEFT_OPTIM_ADAGRAD: {
            if (t == 1) st->s1[i] = o->initial_accumulator_value;
            double clr = o->lr / (1 + (t - 1) * o->lr_decay);
            g += o->weight_decay * p[i];
            st->s1[i] += g * g;
            p[i] -= clr * g / (sqrt(st->s1[i]) + o->eps);
            break;
        }
        case WEFT_OPTIM_RMSPROP: {
            g += o->weight_decay * p[i];
            double *v = &st->s1[i], *b = &st->s2[i], *ga = &st->s3[i];
            *v = o->alpha * *v + (1 - o->alpha) * g * g;
            double vt = *v;
            if (o->centered) {
                *ga = o->alpha * *ga + (1 - o->alpha) * g;
                vt = vt - *ga * *ga;
            }
            if (o->momentum > 0) {
                *b = o->momentum * *b + g / (sqrt(vt) + o->eps);
                p[i] -= o->lr * *b;
            } else {
                p[i] -= o->lr * g / (sqrt(vt) + o->eps);
            }
            break;
        }
        default: { // adam, adamw
            if (o->kind == WEFT_OPTIM_ADAMW) p[i] *= 1 - o->lr * o->weight_decay;
            else g += o->weight_decay * p[i];
            double *m = &st->s1[i], *v = &st->s2[i], *vmax = &st->s3[i];
            *m = o->beta1 * *m + (1 - o->beta1) * g;
            *v = o->beta2 * *v + (1 - o->beta2) * g * g;
            double mhat = *m / (1 - pow(o->beta1, (double)t));
            double vv = *v;
            if (o->amsgrad) vv = *vmax = fmax(*vmax, *v);
            double vhat = vv / (1 - pow(o->beta2, (double)t));
            p[i] -= o->lr * mhat / (sqrt(vhat) + o->eps);
            break;
        }
        }
    }
}

// ---- running weft on the example ----
static weft_tensor *leaf(const double *v, int ndim, const int64_t *sizes, weft_dtype dt) {
    weft_tensor *t64 = weft_tensor_from_data(v, ndim, sizes, WEFT_F64);
    weft_tensor *t = dt == WEFT_F64 ? weft_tensor_ref(t64) : weft_tensor_empty(ndim, sizes, dt);
    if (dt != WEFT_F64) weft_tensor_copy_(t, t64);
    weft_tensor_free(t64);
    weft_tensor_set_requires_grad(t, true);
    return t;
}

static void set_grad_values(weft_tensor *p, const double *g) {
    weft_tensor *g64 = weft_tensor_from_data(g, weft_tensor_ndim(p), weft_tensor_sizes(p), WEFT_F64);
    weft_tensor *gt = weft_tensor_empty_like(p);
    weft_tensor_copy_(gt, g64);
    weft_tensor_set_grad(p, gt);
    weft_tensor_free(g64);
    weft_tensor_free(gt);
}

static const char *const NAMES[2] = {"A", "B"};

// Runs steps [s0, s1] of the example on params (A, B).
static bool run_steps(weft_optim *opt, weft_tensor *A, weft_tensor *B, int s0, int s1) {
    bool ok = true;
    for (int s = s0; s <= s1; s++) {
        double ga[6], gb[4];
        bool hb = grad_values(s, ga, gb);
        set_grad_values(A, ga);
        if (hb) set_grad_values(B, gb);
        ok &= weft_optim_step(opt) == WEFT_OK;
        weft_optim_zero_grad(opt);
        ok &= weft_tensor_grad(A) == NULL && weft_tensor_grad(B) == NULL;
    }
    return ok;
}

// Scalar reference for the example: 3 steps, params rounded to dt at the start
// (the reference itself computes in double).
static void ref_run(const weft_optim_opts *o, weft_dtype dt, double *a, double *b) {
    init_values(a, b);
    if (dt == WEFT_F32) {
        for (int i = 0; i < 6; i++) a[i] = (float)a[i];
        for (int i = 0; i < 4; i++) b[i] = (float)b[i];
    }
    ref_state sa = {0}, sb = {0};
    for (int s = 1; s <= 3; s++) {
        double ga[6], gb[4];
        bool hb = grad_values(s, ga, gb);
        if (dt == WEFT_F32) {
            for (int i = 0; i < 6; i++) ga[i] = (float)ga[i];
            for (int i = 0; i < 4; i++) gb[i] = (float)gb[i];
        }
        ref_update(o, 6, a, ga, &sa);
        if (hb) ref_update(o, 4, b, gb, &sb);
    }
}

// ---- tests/data/optim_ref.txt ----
static char *ref_path(void) {
    // tests run from the build dir: find tests/data next to this source file
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s", __FILE__);
    char *slash = strrchr(buf, '/');
    if (slash) *slash = 0; // .../tests/optim
    slash = strrchr(buf, '/');
    if (slash) *slash = 0; // .../tests
    else snprintf(buf, sizeof buf, "tests");
    strncat(buf, "/data/optim_ref.txt", sizeof buf - strlen(buf) - 1);
    return buf;
}

static bool apply_kv(weft_optim_opts *o, const char *kv) {
    char key[64];
    double v;
    if (sscanf(kv, "%63[^=]=%lf", key, &v) != 2) return false;
    struct { const char *k; double *d; bool *b; } map[] = {
        {"lr", &o->lr, NULL}, {"weight_decay", &o->weight_decay, NULL}, {"eps", &o->eps, NULL},
        {"momentum", &o->momentum, NULL}, {"dampening", &o->dampening, NULL}, {"nesterov", NULL, &o->nesterov},
        {"lr_decay", &o->lr_decay, NULL}, {"initial_accumulator_value", &o->initial_accumulator_value, NULL},
        {"alpha", &o->alpha, NULL}, {"centered", NULL, &o->centered}, {"beta1", &o->beta1, NULL},
        {"beta2", &o->beta2, NULL}, {"amsgrad", NULL, &o->amsgrad},
    };
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++) {
        if (strcmp(map[k].k, key) != 0) continue;
        if (map[k].d) *map[k].d = v;
        else *map[k].b = v != 0;
        return true;
    }
    return false;
}

static void test_against_reference_and_pytorch(void) {
    FILE *f = fopen(ref_path(), "r");
    CHECK(f != NULL);
    if (!f) {
        fprintf(stderr, "cannot open %s\n", ref_path());
        return;
    }
    char line[4096];
    int configs = 0;
    bool seen[WEFT_OPTIM_NUM_KINDS] = {0};
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "config ", 7) != 0) continue;
        char name[64], kind[32], dts[8];
        int off = 0;
        if (sscanf(line, "config %63s %31s %7s%n", name, kind, dts, &off) != 3) {
            CHECK(!"bad config line");
            break;
        }
        weft_optim_kind k;
        CHECK(weft_optim_kind_parse(kind, &k) == WEFT_OK);
        seen[k] = true;
        weft_optim_opts o = weft_optim_defaults(k);
        weft_dtype dt = strcmp(dts, "f32") == 0 ? WEFT_F32 : WEFT_F64;
        char *tok = strtok(line + off, " \n");
        for (; tok; tok = strtok(NULL, " \n")) CHECK(apply_kv(&o, tok));
        double pa[6], pb[4];
        char la[2048], lb[2048];
        CHECK(fgets(la, sizeof la, f) && la[0] == 'A' && fgets(lb, sizeof lb, f) && lb[0] == 'B');
        char *e = la + 1;
        for (int i = 0; i < 6; i++) pa[i] = strtod(e, &e);
        e = lb + 1;
        for (int i = 0; i < 4; i++) pb[i] = strtod(e, &e);

        // weft
        double a0[6], b0[4];
        init_values(a0, b0);
        weft_tensor *A = leaf(a0, WEFT_DIMS(2, 3), dt), *B = leaf(b0, WEFT_DIMS(4), dt);
        weft_tensor *ps[2] = {A, B};
        weft_optim *opt = weft_optim_create(&o, 2, ps, NAMES);
        CHECK(opt != NULL);
        if (opt) {
            CHECK(run_steps(opt, A, B, 1, 3));
            CHECK(weft_optim_step_count(opt) == 3);
            weft_tensor *sa = weft_optim_state_find(opt, "A.step"), *sb = weft_optim_state_find(opt, "B.step");
            CHECK(sa && sb && weft_tensor_item(sa) == 3 && weft_tensor_item(sb) == 2); // B skipped at step 2
        }
        // scalar reference
        double ra[6], rb[4];
        ref_run(&o, dt, ra, rb);
        double tol_ref = dt == WEFT_F64 ? 1e-12 : 2e-6, tol_pt = dt == WEFT_F64 ? 1e-12 : 2e-6;
        char what[128];
        snprintf(what, sizeof what, "%s A vs reference", name);
        wt_check_values(what, A, ra, 6, tol_ref);
        snprintf(what, sizeof what, "%s B vs reference", name);
        wt_check_values(what, B, rb, 4, tol_ref);
        snprintf(what, sizeof what, "%s A vs pytorch", name);
        wt_check_values(what, A, pa, 6, tol_pt);
        snprintf(what, sizeof what, "%s B vs pytorch", name);
        wt_check_values(what, B, pb, 4, tol_pt);
        // the parameters moved (a test that cannot pass by doing nothing)
        double cur[6];
        weft_tensor_to_f64(A, cur, 6);
        CHECK(fabs(cur[0] - a0[0]) > 1e-4);
        weft_optim_free(opt);
        weft_tensor_free(A);
        weft_tensor_free(B);
        configs++;
    }
    fclose(f);
    CHECK(configs >= 15);
    for (int k = 0; k < WEFT_OPTIM_NUM_KINDS; k++) CHECK(seen[k]);
}

// Hand check: Adam's first step moves every element by lr * g / (|g| + eps) ~ lr * sign(g).
static void test_adam_first_step_by_hand(void) {
    double p0[3] = {1.0, -2.0, 0.5}, g[3] = {0.3, -4.0, 1e-3};
    weft_tensor *p = leaf(p0, WEFT_DIMS(3), WEFT_F64);
    weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_ADAM);
    CHECK(o.lr == 1e-3 && o.beta1 == 0.9 && o.beta2 == 0.999 && o.eps == 1e-8 && o.weight_decay == 0);
    weft_optim *opt = weft_optim_create(&o, 1, &p, NULL);
    set_grad_values(p, g);
    CHECK(weft_optim_step(opt) == WEFT_OK);
    // m1 = 0.1 g, v1 = 0.001 g^2; mhat = g, vhat = g^2 -> p -= lr * g / (|g| + eps)
    double want[3];
    for (int i = 0; i < 3; i++) want[i] = p0[i] - 1e-3 * g[i] / (fabs(g[i]) + 1e-8);
    wt_check_values("adam first step", p, want, 3, 1e-13);
    char name[64];
    CHECK(weft_optim_state_count(opt) == 3);
    CHECK(weft_optim_state_at(opt, 0, name, sizeof name) && strcmp(name, "0.exp_avg") == 0);
    weft_optim_free(opt);
    weft_tensor_free(p);
}

// Plain SGD by hand: p = 1, g = 2, lr 0.1, momentum 0.5: step 1 p = 0.8 (buf = 2), step 2 (g = 2) buf = 3, p = 0.5.
static void test_sgd_momentum_by_hand(void) {
    double p0 = 1.0, g = 2.0;
    weft_tensor *p = leaf(&p0, WEFT_DIMS(1), WEFT_F32);
    weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_SGD);
    o.lr = 0.1, o.momentum = 0.5;
    const char *nm = "w";
    weft_optim *opt = weft_optim_create(&o, 1, &p, &nm);
    set_grad_values(p, &g);
    weft_optim_step(opt);
    CHECK_NEAR(weft_tensor_item(p), 0.8, 1e-7);
    CHECK_NEAR(weft_tensor_item(weft_optim_state_find(opt, "w.momentum_buffer")), 2.0, 0);
    set_grad_values(p, &g);
    weft_optim_step(opt);
    CHECK_NEAR(weft_tensor_item(p), 0.5, 1e-7);
    CHECK_NEAR(weft_optim_get_lr(opt), 0.1, 0);
    weft_optim_set_lr(opt, 0.2);
    CHECK_NEAR(weft_optim_get_lr(opt), 0.2, 0);
    weft_optim_free(opt);
    weft_tensor_free(p);
}

// A big parameter takes the threaded path: same bits with 1 and 2 threads,
// and the reference values.
static void test_big_param_threads(void) {
    const int64_t n = 200003;
    double *v = malloc(sizeof(double) * n), *g = malloc(sizeof(double) * n), *r = malloc(sizeof(double) * n);
    wt_vals(v, n, -1, 1, 11);
    wt_vals(g, n, -1, 1, 12);
    weft_optim_kind kinds[] = {WEFT_OPTIM_SGD,     WEFT_OPTIM_ADAGRAD, WEFT_OPTIM_RMSPROP,
                               WEFT_OPTIM_RMSPROP, WEFT_OPTIM_ADAMW,   WEFT_OPTIM_ADAM};
    for (int k = 0; k < 6; k++) {
        weft_optim_opts o = weft_optim_defaults(kinds[k]);
        o.momentum = kinds[k] == WEFT_OPTIM_SGD || k == 2 ? 0.9 : 0;
        o.centered = k == 3;
        o.amsgrad = k == 5;
        o.weight_decay = 0.01;
        float *out[2] = {0};
        for (int th = 1; th <= 2; th++) {
            weft_set_num_threads(th);
            weft_tensor *p = leaf(v, WEFT_DIMS(n), WEFT_F32);
            weft_optim *opt = weft_optim_create(&o, 1, &p, NULL);
            for (int s = 0; s < 2; s++) {
                set_grad_values(p, g);
                CHECK(weft_optim_step(opt) == WEFT_OK);
            }
            out[th - 1] = malloc(sizeof(float) * n);
            weft_tensor_to_f32(p, out[th - 1], n);
            weft_optim_free(opt);
            weft_tensor_free(p);
        }
        weft_set_num_threads(2);
        CHECK(memcmp(out[0], out[1], sizeof(float) * n) == 0);
        // reference on a few elements
        int idx[4] = {0, 77777, 200000 - 17, (int)n - 1};
        for (int j = 0; j < 4; j++) {
            int i = idx[j];
            double pr = (float)v[i], gr = (float)g[i];
            ref_state st = {0};
            ref_update(&o, 1, &pr, &gr, &st);
            ref_update(&o, 1, &pr, &gr, &st);
            CHECK_NEAR(out[0][i], pr, 2e-5);
        }
        free(out[0]);
        free(out[1]);
    }
    free(v);
    free(g);
    free(r);
}

// ---- many parameters in one update_multi op ----
// weft_optim_step runs alike parameters (contiguous, same device, dtype and
// step) as one update_multi op; each must get exactly what its own update op
// gives (WEFT_OPTIM_MULTI=0). Sizes from 1 element to several threads' blocks,
// a parameter without a gradient on one step (its step count falls behind, so
// it leaves the others' batch), a transposed (strided) gradient (the single op).
static void multi_run(const weft_optim_opts *o, weft_dtype dt, bool multi, double **out, const int64_t *sz, int np) {
    if (!multi) setenv("WEFT_OPTIM_MULTI", "0", 1);
    weft_tensor *p[8];
    for (int i = 0; i < np; i++) {
        double *v = malloc(sizeof(double) * (size_t)sz[i]);
        wt_vals(v, sz[i], -1, 1, 100 + (uint64_t)i);
        p[i] = i == np - 1 ? leaf(v, WEFT_DIMS(sz[i] / 8, 8), dt) : leaf(v, WEFT_DIMS(sz[i]), dt);
        free(v);
    }
    weft_optim *opt = weft_optim_create(o, np, p, NULL);
    CHECK(opt != NULL);
    for (int s = 0; s < 4 && opt; s++) {
        for (int i = 0; i < np; i++) {
            if (s == 1 && i == 2) continue; // no gradient this step
            double *g = malloc(sizeof(double) * (size_t)sz[i]);
            wt_vals(g, sz[i], -1, 1, 1000 + 10 * (uint64_t)s + (uint64_t)i);
            if (i == np - 1) { // the last one's gradient: a transposed view of an (8, n/8) tensor
                weft_tensor *t = weft_tensor_from_data(g, WEFT_DIMS(8, sz[i] / 8), WEFT_F64), *c = weft_cast(t, dt);
                weft_tensor *tr = weft_transpose(c, 0, 1);
                weft_tensor_set_grad(p[i], tr);
                weft_tensor_free(t), weft_tensor_free(c), weft_tensor_free(tr);
            } else {
                set_grad_values(p[i], g);
            }
            free(g);
        }
        CHECK(weft_optim_step(opt) == WEFT_OK);
        weft_optim_zero_grad(opt);
    }
    for (int i = 0; i < np; i++) {
        out[i] = malloc(sizeof(double) * (size_t)sz[i]);
        weft_tensor_to_f64(p[i], out[i], sz[i]);
        weft_tensor_free(p[i]);
    }
    weft_optim_free(opt);
    unsetenv("WEFT_OPTIM_MULTI");
}

static void test_update_multi_step(void) {
    const int64_t sz[6] = {1, 7, 300001, 33 * 65, 5000, 64};
    weft_optim_kind kinds[] = {WEFT_OPTIM_SGD, WEFT_OPTIM_SGD,     WEFT_OPTIM_ADAGRAD, WEFT_OPTIM_RMSPROP,
                               WEFT_OPTIM_ADAM, WEFT_OPTIM_ADAMW, WEFT_OPTIM_ADAM};
    for (int k = 0; k < 7; k++)
        for (int d = 0; d < 2; d++) {
            weft_optim_opts o = weft_optim_defaults(kinds[k]);
            o.lr = 0.01;
            o.momentum = k == 1 || k == 3 ? 0.9 : 0;
            o.centered = k == 3;
            o.amsgrad = k == 6;
            o.weight_decay = 0.01;
            weft_dtype dt = d ? WEFT_F64 : WEFT_F32;
            double *a[6], *b[6];
            multi_run(&o, dt, true, a, sz, 6);
            multi_run(&o, dt, false, b, sz, 6);
            for (int i = 0; i < 6; i++) {
                bool same = memcmp(a[i], b[i], sizeof(double) * (size_t)sz[i]) == 0;
                CHECK(same);
                if (!same) printf("  %s %s: parameter %d differs\n", weft_optim_kind_name(kinds[k]), weft_dtype_name(dt), i);
                free(a[i]), free(b[i]);
            }
        }
}

// The op itself: groups updated in place as their update op would; what it refuses.
static void test_update_multi_op(void) {
    const weft_op_def *multi = weft_op_find("update_multi"), *adam = weft_op_find("adam_update");
    CHECK(multi != NULL && adam != NULL);
    if (!multi || !adam) return;
    weft_tensor *t[2][3][4]; // [run][group][p, m, v, g]
    const int64_t n[3] = {3, 20000, 1};
    for (int r = 0; r < 2; r++)
        for (int j = 0; j < 3; j++)
            for (int q = 0; q < 4; q++) {
                double *v = malloc(sizeof(double) * (size_t)n[j]);
                wt_vals(v, n[j], q == 2 ? 0 : -1, 1, 7 + 10 * (uint64_t)j + (uint64_t)q); // v >= 0
                t[r][j][q] = weft_tensor_from_data(v, 1, &n[j], WEFT_F32);
                free(v);
            }
    weft_tensor *sc[3] = {weft_tensor_scalar(1e-3, WEFT_F64), weft_tensor_scalar(0.01, WEFT_F64),
                          weft_tensor_scalar(0.3, WEFT_F64)};
    weft_attrs at = {.f = {0.9, 0.999, 1e-8, 0.01}, .i = {1}};
    for (int j = 0; j < 3; j++) { // run 0: one adam_update per group, in place
        weft_tensor *in[7] = {t[0][j][0], t[0][j][1], t[0][j][2], t[0][j][3], sc[0], sc[1], sc[2]};
        CHECK(weft_op_apply_into(adam, 7, in, &at, in) == WEFT_OK);
    }
    weft_tensor *in[15];
    int m = 0;
    for (int j = 0; j < 3; j++)
        for (int q = 0; q < 4; q++) in[m++] = t[1][j][q];
    for (int k = 0; k < 3; k++) in[m++] = sc[k];
    weft_attrs am = at;
    am.i[WEFT_UPDATE_MULTI_OP] = weft_optim_update_op_index(adam);
    CHECK(am.i[WEFT_UPDATE_MULTI_OP] >= 0);
    CHECK(weft_op_apply_into(multi, 15, in, &am, NULL) == WEFT_OK);
    for (int j = 0; j < 3; j++)
        for (int q = 0; q < 3; q++) wt_check_same("update_multi group", t[1][j][q], t[0][j][q], 0);
    // refused: a bad op index, inputs that are not whole groups, a non-contiguous group, a shape mismatch
    weft_attrs bad = am;
    bad.i[WEFT_UPDATE_MULTI_OP] = 99;
    CHECK(weft_op_apply_into(multi, 15, in, &bad, NULL) != WEFT_OK && wt_error_has("update_multi"));
    CHECK(weft_op_apply_into(multi, 14, in + 1, &am, NULL) != WEFT_OK && wt_error_has("not groups of 4"));
    weft_tensor *two = weft_tensor_zeros(WEFT_DIMS(4, 5), WEFT_F32), *tr = weft_transpose(two, 0, 1);
    weft_tensor *z[4] = {weft_tensor_zeros(WEFT_DIMS(5, 4), WEFT_F32), weft_tensor_zeros(WEFT_DIMS(5, 4), WEFT_F32),
                         weft_tensor_zeros(WEFT_DIMS(5, 4), WEFT_F32), tr};
    weft_tensor *in2[11] = {t[1][0][0], t[1][0][1], t[1][0][2], t[1][0][3], z[0], z[1], z[2], z[3], sc[0], sc[1], sc[2]};
    CHECK(weft_op_apply_into(multi, 11, in2, &am, NULL) != WEFT_OK && wt_error_has("group 1") &&
          wt_error_has("not contiguous"));
    in2[7] = t[1][1][3]; // (20000) against a (5,4) parameter
    CHECK(weft_op_apply_into(multi, 11, in2, &am, NULL) != WEFT_OK && wt_error_has("group 1") && wt_error_has("adam_update"));
    for (int r = 0; r < 2; r++)
        for (int j = 0; j < 3; j++)
            for (int q = 0; q < 4; q++) weft_tensor_free(t[r][j][q]);
    for (int k = 0; k < 3; k++) weft_tensor_free(sc[k]);
    for (int k = 0; k < 3; k++) weft_tensor_free(z[k]);
    weft_tensor_free(two), weft_tensor_free(tr);
}

// grad_sumsq over several inputs is the chain of one call per input, bit for bit (clip_grad_norm
// gives every gradient of a device to one call).
static void test_sumsq_many_cpu(void) {
    const weft_op_def *op = weft_op_find("grad_sumsq");
    weft_tensor *in[5] = {weft_tensor_scalar(0.125, WEFT_F64)};
    double want = 0.125;
    for (int i = 1; i < 5; i++) {
        int64_t n = i == 3 ? 100003 : 5 * i;
        double *v = malloc(sizeof(double) * (size_t)n);
        wt_vals(v, n, -2, 2, 40 + (uint64_t)i);
        weft_tensor *t = weft_tensor_from_data(v, 1, &n, WEFT_F64);
        in[i] = i == 2 ? weft_cast(t, WEFT_F32) : weft_tensor_ref(t);
        weft_tensor_free(t);
        free(v);
        weft_tensor *acc = weft_tensor_scalar(want, WEFT_F64);
        CHECK(weft_op_apply_into(op, 2, (weft_tensor *[]){acc, in[i]}, NULL, &acc) == WEFT_OK);
        want = weft_tensor_item(acc);
        weft_tensor_free(acc);
    }
    weft_tensor *all = weft_op_apply1(op, 5, in, NULL);
    CHECK(all && weft_tensor_item(all) == want);
    double ref = 0.125; // and the plain sum, in double
    for (int i = 1; i < 5; i++) {
        int64_t n = weft_tensor_numel(in[i]);
        double *v = malloc(sizeof(double) * (size_t)n);
        weft_tensor_to_f64(in[i], v, n);
        for (int64_t j = 0; j < n; j++) ref += v[j] * v[j];
        free(v);
    }
    CHECK_NEAR(want, ref, 1e-9 * ref);
    CHECK(weft_op_apply1(op, 1, in, NULL) == NULL && wt_error_has("grad_sumsq"));
    for (int i = 0; i < 5; i++) weft_tensor_free(in[i]);
    weft_tensor_free(all);
}

// ---- clip_grad_norm ----
static void test_clip_grad_norm(void) {
    double a[6], b[4], ga[6] = {1, -2, 3, 0.5, -0.25, 4}, gb[4] = {-1, 2, 0.5, 3};
    init_values(a, b);
    weft_tensor *A = leaf(a, WEFT_DIMS(2, 3), WEFT_F64), *B = leaf(b, WEFT_DIMS(4), WEFT_F32);
    weft_tensor *C = leaf(b, WEFT_DIMS(4), WEFT_F64); // no gradient: skipped
    weft_tensor *ps[3] = {A, B, C};
    double ss = 0;
    for (int i = 0; i < 6; i++) ss += ga[i] * ga[i];
    for (int i = 0; i < 4; i++) ss += gb[i] * gb[i];
    double norm = sqrt(ss);
    set_grad_values(A, ga);
    set_grad_values(B, gb);
    // above the norm: returns it, changes nothing
    CHECK_NEAR(weft_clip_grad_norm(3, ps, 100), norm, 1e-14);
    wt_check_values("clip: unchanged A", weft_tensor_grad(A), ga, 6, 0);
    wt_check_values("clip: unchanged B", weft_tensor_grad(B), gb, 4, 0);
    // below: scaled by max/(norm + 1e-6)
    CHECK_NEAR(weft_clip_grad_norm(3, ps, 2.0), norm, 1e-14);
    double c = 2.0 / (norm + 1e-6), wa[6], wb[4];
    for (int i = 0; i < 6; i++) wa[i] = ga[i] * c;
    for (int i = 0; i < 4; i++) wb[i] = gb[i] * c;
    wt_check_values("clip: scaled A", weft_tensor_grad(A), wa, 6, 1e-14);
    wt_check_values("clip: scaled B", weft_tensor_grad(B), wb, 4, 1e-6);
    CHECK(weft_tensor_grad(C) == NULL);
    CHECK_NEAR(weft_clip_grad_norm(3, ps, 1e9), 2.0, 1e-6); // the new norm is max_norm
    // a non-contiguous gradient (a transposed view) is read and scaled correctly
    double gt[6] = {1, 2, 3, 4, 5, 6};
    weft_tensor *P = leaf(a, WEFT_DIMS(3, 2), WEFT_F64);
    weft_tensor *g23 = weft_tensor_from_data(gt, WEFT_DIMS(2, 3), WEFT_F64), *g32 = weft_transpose(g23, 0, 1);
    CHECK(!weft_tensor_is_contiguous(g32));
    weft_tensor_set_grad(P, g32);
    weft_tensor_free(g32);
    CHECK_NEAR(weft_clip_grad_norm(1, &P, 1.0), sqrt(91.0), 1e-14);
    double want[6] = {1, 4, 2, 5, 3, 6}; // (3,2) = transpose of (2,3)
    for (int i = 0; i < 6; i++) want[i] *= 1.0 / (sqrt(91.0) + 1e-6);
    wt_check_values("clip: transposed grad", weft_tensor_grad(P), want, 6, 1e-14);
    wt_check_values("clip: source untouched", g23, gt, 6, 0);
    // big gradients: chunked sum, equal to a naive sum, same bits on 1 and 2 threads
    const int64_t n = 100000;
    double *v = malloc(sizeof(double) * n);
    wt_vals(v, n, -1, 1, 5);
    double s2 = 0;
    for (int64_t i = 0; i < n; i++) s2 += v[i] * v[i];
    weft_tensor *Q = leaf(v, WEFT_DIMS(n), WEFT_F64);
    set_grad_values(Q, v);
    weft_set_num_threads(1);
    double n1 = weft_clip_grad_norm(1, &Q, 1e9);
    weft_set_num_threads(2);
    double n2 = weft_clip_grad_norm(1, &Q, 1e9);
    CHECK(n1 == n2);
    CHECK_NEAR(n1, sqrt(s2), 1e-13);
    free(v);
    // edge cases and errors
    CHECK(weft_clip_grad_norm(0, NULL, 1.0) == 0);
    CHECK(weft_clip_grad_norm(1, &C, 1.0) == 0);
    CHECK(weft_clip_grad_norm(3, ps, -1.0) == -1 && strstr(weft_last_error(), "clip_grad_norm"));
    CHECK(weft_clip_grad_norm(2, NULL, 1.0) == -1 && strstr(weft_last_error(), "clip_grad_norm"));
    // its halves (a norm summed over processes): the sum of squares, then the scaling
    double sum = -1, g1[6] = {1, -2, 3, 0.5, -0.25, 4};
    set_grad_values(A, g1);
    CHECK(weft_grad_sum_squares(2, (weft_tensor *[]){A, C}, &sum) == WEFT_OK); // C has no gradient
    CHECK_NEAR(sum, 1 + 4 + 9 + 0.25 + 0.0625 + 16, 1e-14);
    CHECK(weft_grad_scale(1, &A, -0.5) == WEFT_OK);
    double w1[6];
    for (int i = 0; i < 6; i++) w1[i] = -0.5 * g1[i];
    wt_check_values("grad_scale", weft_tensor_grad(A), w1, 6, 0);
    CHECK(weft_grad_sum_squares(1, &A, NULL) == WEFT_ERR_ARG);
    CHECK(weft_grad_scale(1, &A, NAN) == WEFT_ERR_ARG && strstr(weft_last_error(), "grad_scale"));
    CHECK(weft_grad_sum_squares(-1, NULL, &sum) == WEFT_ERR_ARG);
    weft_tensor *ts[] = {A, B, C, P, g23, Q};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
}

// ---- schedules ----
static void test_schedules(void) {
    weft_lr_schedule c = {.kind = WEFT_LR_CONSTANT, .base_lr = 0.3};
    CHECK(weft_lr_schedule_check(&c) == WEFT_OK);
    CHECK(weft_lr_at(&c, 0) == 0.3 && weft_lr_at(&c, 12345) == 0.3);
    weft_lr_schedule s = {.kind = WEFT_LR_STEP, .base_lr = 0.1, .step_size = 3, .gamma = 0.5};
    CHECK(weft_lr_schedule_check(&s) == WEFT_OK);
    double want_s[8] = {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025};
    for (int i = 0; i < 8; i++) CHECK_NEAR(weft_lr_at(&s, i), want_s[i], 1e-15);
    CHECK_NEAR(weft_lr_at(&s, 30), 0.1 * pow(0.5, 10), 1e-15);
    // warm-up before every kind (PyTorch's LinearLR then the schedule, in SequentialLR), the schedule counting
    // its steps after it
    weft_lr_schedule cw = {.kind = WEFT_LR_CONSTANT, .base_lr = 0.4, .warmup_steps = 4};
    CHECK(weft_lr_schedule_check(&cw) == WEFT_OK);
    double want_cw[6] = {0, 0.1, 0.2, 0.3, 0.4, 0.4};
    for (int i = 0; i < 6; i++) CHECK_NEAR(weft_lr_at(&cw, i), want_cw[i], 1e-15);
    CHECK_NEAR(weft_lr_at(&cw, 9999), 0.4, 0);
    weft_lr_schedule sw = {.kind = WEFT_LR_STEP, .base_lr = 0.1, .step_size = 3, .gamma = 0.5, .warmup_steps = 2};
    CHECK(weft_lr_schedule_check(&sw) == WEFT_OK);
    double want_sw[9] = {0, 0.05, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025};
    for (int i = 0; i < 9; i++) CHECK_NEAR(weft_lr_at(&sw, i), want_sw[i], 1e-15);
    weft_lr_schedule bad = {.kind = WEFT_LR_CONSTANT, .base_lr = 0.1, .warmup_steps = -1};
    CHECK(weft_lr_schedule_check(&bad) != WEFT_OK && wt_error_has("warmup"));
    weft_lr_schedule k = {.kind = WEFT_LR_COSINE, .base_lr = 1.0, .warmup_steps = 10, .total_steps = 110, .min_lr = 0.1};
    CHECK(weft_lr_schedule_check(&k) == WEFT_OK);
    CHECK_NEAR(weft_lr_at(&k, 0), 0.0, 0);
    CHECK_NEAR(weft_lr_at(&k, 1), 0.1, 1e-15);
    CHECK_NEAR(weft_lr_at(&k, 5), 0.5, 1e-15);
    CHECK_NEAR(weft_lr_at(&k, 10), 1.0, 1e-15);
    CHECK_NEAR(weft_lr_at(&k, 35), 0.1 + 0.9 * 0.5 * (1 + cos(M_PI * 0.25)), 1e-14);
    CHECK_NEAR(weft_lr_at(&k, 60), 0.55, 1e-14);
    CHECK_NEAR(weft_lr_at(&k, 109), 0.1 + 0.9 * 0.5 * (1 + cos(M_PI * 0.99)), 1e-14);
    CHECK_NEAR(weft_lr_at(&k, 110), 0.1, 1e-15);
    CHECK_NEAR(weft_lr_at(&k, 1000), 0.1, 1e-15);
    // monotone after warm-up
    bool mono = true;
    for (int i = 11; i <= 110; i++) mono &= weft_lr_at(&k, i) <= weft_lr_at(&k, i - 1);
    CHECK(mono);
    weft_lr_schedule nowarm = {.kind = WEFT_LR_COSINE, .base_lr = 2.0, .total_steps = 4};
    CHECK_NEAR(weft_lr_at(&nowarm, 0), 2.0, 1e-15);
    CHECK_NEAR(weft_lr_at(&nowarm, 2), 1.0, 1e-15);
    // bad schedules
    weft_lr_schedule bad1 = {.kind = WEFT_LR_STEP, .base_lr = 0.1, .step_size = 0, .gamma = 0.5};
    CHECK(weft_lr_schedule_check(&bad1) != WEFT_OK && strstr(weft_last_error(), "step_size"));
    weft_lr_schedule bad2 = {.kind = WEFT_LR_COSINE, .base_lr = 0.1, .warmup_steps = 20, .total_steps = 10};
    CHECK(weft_lr_schedule_check(&bad2) != WEFT_OK && strstr(weft_last_error(), "cosine"));
    weft_lr_schedule bad3 = {.kind = WEFT_LR_CONSTANT, .base_lr = -1};
    CHECK(weft_lr_schedule_check(&bad3) != WEFT_OK);
}

// ---- checkpoint state ----
typedef struct saved {
    int n;
    char names[64][64];
    weft_tensor *t[64];
    const char *drop; // pretend this name is missing
} saved;

static const weft_tensor *lookup(const char *name, void *user) {
    saved *s = user;
    if (s->drop && strcmp(name, s->drop) == 0) return NULL;
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0) return s->t[i];
    return NULL;
}

static void roundtrip(weft_optim_opts o, weft_dtype dt) {
    const char *kn = weft_optim_kind_name(o.kind);
    double a0[6], b0[4];
    init_values(a0, b0);
    // one go: 3 steps
    weft_tensor *A1 = leaf(a0, WEFT_DIMS(2, 3), dt), *B1 = leaf(b0, WEFT_DIMS(4), dt), *p1[2] = {A1, B1};
    weft_optim *o1 = weft_optim_create(&o, 2, p1, NAMES);
    CHECK(run_steps(o1, A1, B1, 1, 3));
    // 1 step, save, free, new optimiser + parameters, load, 2 more steps
    weft_tensor *A2 = leaf(a0, WEFT_DIMS(2, 3), dt), *B2 = leaf(b0, WEFT_DIMS(4), dt), *p2[2] = {A2, B2};
    weft_optim *o2 = weft_optim_create(&o, 2, p2, NAMES);
    CHECK(run_steps(o2, A2, B2, 1, 1));
    saved sv = {0};
    sv.n = weft_optim_state_count(o2);
    CHECK(sv.n > 0 && sv.n <= 64);
    for (int i = 0; i < sv.n; i++) sv.t[i] = weft_tensor_clone(weft_optim_state_at(o2, i, sv.names[i], 64));
    int64_t steps = weft_optim_step_count(o2);
    weft_tensor *sa = weft_tensor_clone(A2), *sb = weft_tensor_clone(B2);
    weft_optim_free(o2);
    weft_tensor_free(A2);
    weft_tensor_free(B2);

    weft_tensor *A3 = leaf(a0, WEFT_DIMS(2, 3), dt), *B3 = leaf(b0, WEFT_DIMS(4), dt), *p3[2] = {A3, B3};
    weft_tensor_copy_(A3, sa);
    weft_tensor_copy_(B3, sb);
    weft_optim *o3 = weft_optim_create(&o, 2, p3, NAMES);
    // a missing tensor: error naming it, nothing loaded
    sv.drop = sv.names[sv.n - 1];
    CHECK(weft_optim_load_state(o3, lookup, &sv) == WEFT_ERR_FORMAT);
    CHECK(strstr(weft_last_error(), sv.names[sv.n - 1]) != NULL && strstr(weft_last_error(), kn) != NULL);
    CHECK(weft_tensor_item(weft_optim_state_find(o3, "A.step")) == 0);
    sv.drop = NULL;
    CHECK(weft_optim_load_state(o3, lookup, &sv) == WEFT_OK);
    weft_optim_set_step_count(o3, steps);
    CHECK(run_steps(o3, A3, B3, 2, 3));
    CHECK(weft_optim_step_count(o3) == 3 && weft_optim_step_count(o1) == 3);
    // bit-identical continuation
    size_t es = dt == WEFT_F32 ? 4 : 8;
    CHECK(memcmp(weft_tensor_data(A1), weft_tensor_data(A3), 6 * es) == 0);
    CHECK(memcmp(weft_tensor_data(B1), weft_tensor_data(B3), 4 * es) == 0);
    for (int i = 0; i < weft_optim_state_count(o1); i++) {
        char n1[64], n3[64];
        weft_tensor *t1 = weft_optim_state_at(o1, i, n1, 64), *t3 = weft_optim_state_at(o3, i, n3, 64);
        CHECK(strcmp(n1, n3) == 0);
        size_t bytes = (size_t)weft_tensor_numel(t1) * weft_dtype_size(weft_tensor_dtype(t1));
        CHECK(memcmp(weft_tensor_data(t1), weft_tensor_data(t3), bytes) == 0);
    }
    // a shape mismatch names the tensor
    weft_tensor *wrong = weft_tensor_zeros(WEFT_DIMS(3, 2), dt);
    CHECK(weft_optim_state_set(o3, sv.names[0], wrong) == WEFT_ERR_SHAPE);
    CHECK(strstr(weft_last_error(), sv.names[0]) != NULL);
    CHECK(weft_optim_state_set(o3, "A.nosuch", wrong) != WEFT_OK && strstr(weft_last_error(), "A.nosuch"));
    weft_tensor_free(wrong);

    for (int i = 0; i < sv.n; i++) weft_tensor_free(sv.t[i]);
    weft_optim_free(o1);
    weft_optim_free(o3);
    weft_tensor *ts[] = {A1, B1, A3, B3, sa, sb};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
}

static void test_state_roundtrip(void) {
    weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_SGD);
    o.lr = 0.1, o.momentum = 0.9, o.nesterov = true;
    roundtrip(o, WEFT_F32);
    o = weft_optim_defaults(WEFT_OPTIM_ADAGRAD);
    o.lr_decay = 0.1, o.initial_accumulator_value = 0.1;
    roundtrip(o, WEFT_F64);
    o = weft_optim_defaults(WEFT_OPTIM_RMSPROP);
    o.momentum = 0.5, o.centered = true;
    roundtrip(o, WEFT_F32);
    o = weft_optim_defaults(WEFT_OPTIM_ADAM);
    o.amsgrad = true;
    roundtrip(o, WEFT_F32);
    o = weft_optim_defaults(WEFT_OPTIM_ADAMW);
    roundtrip(o, WEFT_F64);
}

static void test_state_names(void) {
    double a0[6], b0[4];
    init_values(a0, b0);
    weft_tensor *A = leaf(a0, WEFT_DIMS(2, 3), WEFT_F32), *B = leaf(b0, WEFT_DIMS(4), WEFT_F32), *ps[2] = {A, B};
    const char *names[2] = {"fc1.weight", "fc1.bias"};
    weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_ADAMW);
    o.amsgrad = true;
    weft_optim *opt = weft_optim_create(&o, 2, ps, names);
    const char *want[8] = {"fc1.weight.exp_avg", "fc1.weight.exp_avg_sq", "fc1.weight.max_exp_avg_sq", "fc1.weight.step",
                           "fc1.bias.exp_avg",   "fc1.bias.exp_avg_sq",   "fc1.bias.max_exp_avg_sq",   "fc1.bias.step"};
    CHECK(weft_optim_state_count(opt) == 8);
    for (int i = 0; i < 8; i++) {
        char nm[64];
        weft_tensor *t = weft_optim_state_at(opt, i, nm, sizeof nm);
        CHECK(t && strcmp(nm, want[i]) == 0);
        CHECK(weft_optim_state_find(opt, want[i]) == t);
        if (i % 4 != 3) CHECK(weft_tensor_numel(t) == weft_tensor_numel(ps[i / 4]) && weft_tensor_dtype(t) == WEFT_F32);
        else CHECK(weft_tensor_ndim(t) == 0 && weft_tensor_dtype(t) == WEFT_I64);
    }
    CHECK(weft_optim_state_at(opt, 8, NULL, 0) == NULL);
    CHECK(weft_optim_state_find(opt, "fc1.exp_avg") == NULL);
    weft_optim_free(opt);
    // sgd without momentum keeps only step counts; rmsprop's optional buffers appear when enabled
    o = weft_optim_defaults(WEFT_OPTIM_SGD);
    opt = weft_optim_create(&o, 2, ps, names);
    CHECK(weft_optim_state_count(opt) == 2 && weft_optim_state_find(opt, "fc1.bias.step"));
    weft_optim_free(opt);
    o = weft_optim_defaults(WEFT_OPTIM_RMSPROP);
    o.momentum = 0.1, o.centered = true;
    opt = weft_optim_create(&o, 2, ps, names);
    CHECK(weft_optim_state_count(opt) == 8 && weft_optim_state_find(opt, "fc1.bias.grad_avg") &&
          weft_optim_state_find(opt, "fc1.weight.momentum_buffer") && weft_optim_state_find(opt, "fc1.weight.square_avg"));
    weft_optim_free(opt);
    weft_tensor_free(A);
    weft_tensor_free(B);
}

// ---- errors ----
static void expect_fail(weft_optim_opts o, int n, weft_tensor *const *ps, const char *const *names, const char *what) {
    weft_clear_error();
    weft_optim *opt = weft_optim_create(&o, n, ps, names);
    CHECK(opt == NULL);
    const char *kn = weft_optim_kind_name(o.kind);
    bool ok = strstr(weft_last_error(), kn) != NULL && (!what || strstr(weft_last_error(), what));
    if (!ok) fprintf(stderr, "  message for %s/%s: '%s'\n", kn, what ? what : "", weft_last_error());
    CHECK(ok);
    weft_optim_free(opt);
}

static void test_errors(void) {
    double a0[6], b0[4];
    init_values(a0, b0);
    weft_tensor *A = leaf(a0, WEFT_DIMS(2, 3), WEFT_F64), *B = leaf(b0, WEFT_DIMS(4), WEFT_F64), *ps[2] = {A, B};
    for (int k = 0; k < WEFT_OPTIM_NUM_KINDS; k++) {
        weft_optim_opts o = weft_optim_defaults((weft_optim_kind)k);
        expect_fail(o, 0, ps, NAMES, "empty");
        expect_fail(o, 0, NULL, NULL, "empty");
        o.lr = -0.1;
        expect_fail(o, 2, ps, NAMES, "learning rate");
        o.lr = NAN;
        expect_fail(o, 2, ps, NAMES, "learning rate");
        o = weft_optim_defaults((weft_optim_kind)k);
        o.weight_decay = -1;
        expect_fail(o, 2, ps, NAMES, "weight_decay");
    }
    weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_ADAM);
    o.beta1 = 1.0;
    expect_fail(o, 2, ps, NAMES, "beta1");
    o = weft_optim_defaults(WEFT_OPTIM_ADAMW);
    o.beta2 = 1.5;
    expect_fail(o, 2, ps, NAMES, "beta2");
    o = weft_optim_defaults(WEFT_OPTIM_ADAM);
    o.eps = -1e-8;
    expect_fail(o, 2, ps, NAMES, "eps");
    o = weft_optim_defaults(WEFT_OPTIM_SGD);
    o.nesterov = true;
    expect_fail(o, 2, ps, NAMES, "Nesterov");
    o.momentum = -0.5, o.nesterov = false;
    expect_fail(o, 2, ps, NAMES, "momentum");
    o = weft_optim_defaults(WEFT_OPTIM_ADAGRAD);
    o.lr_decay = -1;
    expect_fail(o, 2, ps, NAMES, "lr_decay");
    o = weft_optim_defaults(WEFT_OPTIM_ADAGRAD);
    o.initial_accumulator_value = -1;
    expect_fail(o, 2, ps, NAMES, "initial_accumulator_value");
    o = weft_optim_defaults(WEFT_OPTIM_RMSPROP);
    o.alpha = 1.5;
    expect_fail(o, 2, ps, NAMES, "alpha");
    o = weft_optim_defaults(WEFT_OPTIM_RMSPROP);
    o.momentum = -1;
    expect_fail(o, 2, ps, NAMES, "momentum");
    // bad parameters
    o = weft_optim_defaults(WEFT_OPTIM_ADAM);
    weft_tensor *dup[2] = {A, A};
    expect_fail(o, 2, dup, NAMES, "twice");
    const char *same[2] = {"w", "w"};
    expect_fail(o, 2, ps, same, "'w'");
    weft_tensor *Ad = weft_tensor_detach(A); // no history: its transpose is a (strided) leaf
    weft_tensor *At = weft_transpose(Ad, 0, 1), *nc[2] = {At, B};
    weft_tensor *nl1 = weft_mul_scalar(A, 2.0), *nl[2] = {nl1, B};
    expect_fail(o, 2, nc, NAMES, "contiguous");
    expect_fail(o, 2, nl, NAMES, "leaf");
    weft_tensor *I = weft_tensor_zeros(WEFT_DIMS(3), WEFT_I32), *ip[2] = {I, B};
    expect_fail(o, 2, ip, NAMES, "i32");
    weft_tensor *np[2] = {A, NULL};
    expect_fail(o, 2, np, NAMES, "NULL");
    weft_optim_opts bad = o;
    bad.kind = (weft_optim_kind)99;
    CHECK(weft_optim_create(&bad, 2, ps, NAMES) == NULL && strstr(weft_last_error(), "kind"));
    CHECK(weft_optim_create(NULL, 2, ps, NAMES) == NULL);
    weft_optim_kind kk;
    CHECK(weft_optim_kind_parse("AdamW", &kk) == WEFT_OK && kk == WEFT_OPTIM_ADAMW);
    CHECK(weft_optim_kind_parse("lion", &kk) != WEFT_OK && strstr(weft_last_error(), "lion"));
    // a gradient of the wrong dtype: the step fails naming the optimiser and the parameter, nothing changes
    weft_optim *opt = weft_optim_create(&o, 2, ps, NAMES);
    CHECK(opt != NULL);
    double ga[6] = {1, 1, 1, 1, 1, 1};
    set_grad_values(A, ga);
    weft_tensor *g32 = weft_tensor_ones(WEFT_DIMS(4), WEFT_F32);
    weft_tensor_set_grad(B, g32);
    CHECK(weft_optim_step(opt) != WEFT_OK);
    CHECK(strstr(weft_last_error(), "adam") && strstr(weft_last_error(), "'B'"));
    wt_check_values("A untouched after a failed step", A, a0, 6, 0);
    CHECK(weft_optim_step_count(opt) == 0);
    CHECK(weft_optim_step(NULL) != WEFT_OK);
    weft_optim_free(opt);
    weft_optim_free(NULL);
    weft_tensor *ts[] = {A, B, At, Ad, nl1, I, g32};
    for (int i = 0; i < 7; i++) weft_tensor_free(ts[i]);
}

int main(void) {
    RUN(test_against_reference_and_pytorch);
    RUN(test_adam_first_step_by_hand);
    RUN(test_sgd_momentum_by_hand);
    RUN(test_big_param_threads);
    RUN(test_update_multi_step);
    RUN(test_update_multi_op);
    RUN(test_sumsq_many_cpu);
    RUN(test_clip_grad_norm);
    RUN(test_schedules);
    RUN(test_state_names);
    RUN(test_state_roundtrip);
    RUN(test_errors);
    return wt_summary();
}
