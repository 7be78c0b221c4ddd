// Reductions: sum, mean, max, min, var, logsumexp, argmax over single, several,
// all and negative axes, keepdim on/off, non-contiguous inputs; forward
// against naive loops, gradients by finite differences, sum_to.
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"


enum { SUM, MEAN, MAX, MIN, VAR0, VAR1, LSE, ARGMAX, N_KINDS };
static const char *k_names[N_KINDS] = {"sum", "mean", "max", "min", "var0", "var1", "logsumexp", "argmax"};

// Naive reduction of x (row-major, sizes sz) over the dims in mask; out in row-major order of kept dims.
static int64_t naive(int kind, int nd, const int64_t *sz, const double *x, unsigned mask, double *out) {
    int64_t n = 1, nout = 1, nred = 1;
    for (int d = 0; d < nd; d++) {
        n *= sz[d];
        if (mask & (1u << d)) nred *= sz[d];
        else nout *= sz[d];
    }
    double *acc = calloc((size_t)nout, sizeof(double)), *acc2 = calloc((size_t)nout, sizeof(double));
    int64_t *cnt = calloc((size_t)nout, sizeof(int64_t));
    for (int64_t o = 0; o < nout; o++) {
        if (kind == MAX || kind == ARGMAX || kind == LSE) acc[o] = -INFINITY;
        if (kind == MIN) acc[o] = INFINITY;
    }
    // pass 1
    for (int64_t i = 0; i < n; i++) {
        int64_t idx[8], r = i, o = 0;
        for (int d = nd - 1; d >= 0; d--) idx[d] = r % sz[d], r /= sz[d];
        for (int d = 0; d < nd; d++)
            if (!(mask & (1u << d))) o = o * sz[d] + idx[d];
        double v = x[i];
        switch (kind) {
        case SUM: case MEAN: case VAR0: case VAR1: acc[o] += v; break;
        case MAX: case LSE: if (v > acc[o]) acc[o] = v; break;
        case MIN: if (v < acc[o]) acc[o] = v; break;
        case ARGMAX:
            if (v > acc[o]) acc[o] = v, acc2[o] = (double)cnt[o];
            cnt[o]++;
            break;
        }
    }
    if (kind == MEAN || kind == VAR0 || kind == VAR1)
        for (int64_t o = 0; o < nout; o++) acc[o] /= (double)nred;
    // pass 2 (var, logsumexp)
    if (kind == VAR0 || kind == VAR1 || kind == LSE) {
        for (int64_t i = 0; i < n; i++) {
            int64_t idx[8], r = i, o = 0;
            for (int d = nd - 1; d >= 0; d--) idx[d] = r % sz[d], r /= sz[d];
            for (int d = 0; d < nd; d++)
                if (!(mask & (1u << d))) o = o * sz[d] + idx[d];
            if (kind == LSE) acc2[o] += exp(x[i] - acc[o]);
            else acc2[o] += (x[i] - acc[o]) * (x[i] - acc[o]);
        }
    }
    for (int64_t o = 0; o < nout; o++) {
        switch (kind) {
        case VAR0: out[o] = acc2[o] / (double)nred; break;
        case VAR1: out[o] = acc2[o] / (double)(nred - 1); break;
        case LSE: out[o] = acc[o] + log(acc2[o]); break;
        case ARGMAX: out[o] = acc2[o]; break;
        default: out[o] = acc[o];
        }
    }
    free(acc);
    free(acc2);
    free(cnt);
    return nout;
}

static weft_tensor *apply(int kind, weft_tensor *t, int n, const int *axes, bool keepdim) {
    switch (kind) {
    case SUM: return weft_sum(t, n, axes, keepdim);
    case MEAN: return weft_mean(t, n, axes, keepdim);
    case MAX: return weft_max(t, n, axes, keepdim);
    case MIN: return weft_min(t, n, axes, keepdim);
    case VAR0: return weft_var(t, n, axes, 0, keepdim);
    case VAR1: return weft_var(t, n, axes, 1, keepdim);
    case LSE: return weft_logsumexp(t, n, axes, keepdim);
    default: return weft_argmax(t, axes[0], keepdim);
    }
}

// Checks result shape: keepdim keeps reduced dims as 1, else drops them.
static bool shape_ok(const weft_tensor *y, int nd, const int64_t *sz, unsigned mask, bool keepdim) {
    if (!y) return false;
    int k = 0;
    for (int d = 0; d < nd; d++) {
        if (mask & (1u << d)) {
            if (keepdim) {
                if (weft_tensor_size(y, k) != 1) return false;
                k++;
            }
        } else {
            if (weft_tensor_size(y, k) != sz[d]) return false;
            k++;
        }
    }
    return weft_tensor_ndim(y) == k;
}

static void test_forward_all_axes(void) {
    const int64_t sz[3] = {3, 4, 5};
    double x[60], ref[60];
    wt_vals(x, 60, -2, 2, 1);
    // contiguous, and a permuted view with the same logical values
    double base[60]; // (4,5,3): base[j][k][i] = x[i][j][k]
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 5; k++) base[(j * 5 + k) * 3 + i] = x[(i * 4 + j) * 5 + k];
    const weft_dtype dts[2] = {WEFT_F64, WEFT_F32};
    double x32[60];
    for (int i = 0; i < 60; i++) x32[i] = (float)x[i];
    for (int di = 0; di < 2; di++) {
        weft_dtype dt = dts[di];
        weft_tensor *c64 = wt_keep(weft_tensor_from_data(x, 3, sz, WEFT_F64)), *c = wt_keep(weft_cast(c64, dt));
        weft_tensor *b64 = wt_keep(weft_tensor_from_data(base, WEFT_DIMS(4, 5, 3), WEFT_F64)), *b = wt_keep(weft_cast(b64, dt));
        weft_tensor *p = wt_keep(weft_permute(b, (int[]){2, 0, 1}));
        CHECK(p && !weft_tensor_is_contiguous(p) && weft_tensor_size(p, 0) == 3 && weft_tensor_size(p, 2) == 5);
        const double *xr = dt == WEFT_F32 ? x32 : x;
        double tol = dt == WEFT_F64 ? 1e-12 : 2e-5;
        // axis lists: every non-empty subset, the same with negative axes, and "all" (n = 0)
        int lists[][3] = {{0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {0, 1, 2}, {-1}, {-3}, {-1, -3}, {2, -2}, {0}};
        int counts[] = {1, 1, 1, 2, 2, 2, 3, 1, 1, 2, 2, 0};
        for (int kind = 0; kind < ARGMAX; kind++)
            for (int li = 0; li < 12; li++)
                for (int kd = 0; kd < 2; kd++)
                    for (int src = 0; src < 2; src++) {
                        unsigned mask = 0;
                        for (int a = 0; a < counts[li]; a++) mask |= 1u << ((lists[li][a] + 3) % 3);
                        if (counts[li] == 0) mask = 7;
                        int64_t nout = naive(kind, 3, sz, xr, mask, ref);
                        weft_tensor *y = wt_keep(apply(kind, src ? p : c, counts[li], lists[li], kd));
                        char what[96];
                        snprintf(what, sizeof what, "%s %s axes#%d keepdim=%d %s", k_names[kind],
                                 weft_dtype_name(dt), li, kd, src ? "permuted" : "contiguous");
                        if (!shape_ok(y, 3, sz, mask, kd)) fprintf(stderr, "%s: bad shape\n", what);
                        CHECK(shape_ok(y, 3, sz, mask, kd));
                        CHECK(y && weft_tensor_dtype(y) == dt);
                        wt_check_values(what, y, ref, nout, tol);
                    }
        wt_drop_all();
    }
}

static void test_argmax(void) {
    const int64_t sz[3] = {3, 4, 5};
    double x[60], ref[60];
    wt_vals(x, 60, -2, 2, 2);
    // ties: the first index wins
    x[0] = x[5] = x[10] = 9; // along dim 1 at (0,*,0)
    x[20] = x[21] = 9;       // along dim 2 at (1,0,*)
    weft_tensor *t = wt_keep(weft_tensor_from_data(x, 3, sz, WEFT_F64));
    double base[60];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 5; k++) base[(j * 5 + k) * 3 + i] = x[(i * 4 + j) * 5 + k];
    weft_tensor *b = wt_keep(weft_tensor_from_data(base, WEFT_DIMS(4, 5, 3), WEFT_F64));
    weft_tensor *p = wt_keep(weft_permute(b, (int[]){2, 0, 1}));
    for (int ax = -3; ax < 3; ax++)
        for (int kd = 0; kd < 2; kd++)
            for (int src = 0; src < 2; src++) {
                unsigned mask = 1u << ((ax + 3) % 3);
                int64_t nout = naive(ARGMAX, 3, sz, x, mask, ref);
                weft_tensor *y = wt_keep(weft_argmax(src ? p : t, ax, kd));
                CHECK(y && weft_tensor_dtype(y) == WEFT_I64 && !weft_tensor_requires_grad(y));
                CHECK(shape_ok(y, 3, sz, mask, kd));
                char what[64];
                snprintf(what, sizeof what, "argmax axis %d keepdim %d %s", ax, kd, src ? "permuted" : "");
                wt_check_values(what, y, ref, nout, 0);
            }
    // integer input
    int32_t iv[6] = {3, 7, 7, -1, 0, 2};
    weft_tensor *ti = wt_keep(weft_tensor_from_data(iv, WEFT_DIMS(2, 3), WEFT_I32));
    double r0[3] = {0, 0, 0}, r1[2] = {1, 2};
    wt_check_values("argmax i32 axis 0", wt_keep(weft_argmax(ti, 0, false)), r0, 3, 0);
    wt_check_values("argmax i32 axis 1", wt_keep(weft_argmax(ti, 1, false)), r1, 2, 0);
    wt_drop_all();
}

static void test_integer_and_special(void) {
    int32_t iv[6] = {3, 7, 7, -1, 0, 2};
    weft_tensor *ti = wt_keep(weft_tensor_from_data(iv, WEFT_DIMS(2, 3), WEFT_I32));
    weft_tensor *s = wt_keep(weft_sum(ti, 1, (int[]){1}, false)), *m = wt_keep(weft_max(ti, 0, NULL, false));
    weft_tensor *mn = wt_keep(weft_min(ti, 1, (int[]){0}, true));
    CHECK(s && weft_tensor_dtype(s) == WEFT_I32);
    double rs[2] = {17, 1}, rm[1] = {7}, rmn[3] = {-1, 0, 2};
    wt_check_values("i32 sum", s, rs, 2, 0);
    wt_check_values("i32 max all", m, rm, 1, 0);
    wt_check_values("i32 min keepdim", mn, rmn, 3, 0);
    int64_t lv[2] = {(1LL << 40) + 1, (1LL << 40) + 2};
    weft_tensor *tl = wt_keep(weft_tensor_from_data(lv, WEFT_DIMS(2), WEFT_I64)), *sl = wt_keep(weft_sum(tl, 0, NULL, false));
    CHECK(sl && weft_tensor_dtype(sl) == WEFT_I64 && ((int64_t *)weft_tensor_data(sl))[0] == (1LL << 41) + 3);
    // i64 beyond 2^53 stays exact (no detour through double)
    int64_t hv[4] = {(1LL << 60), 1, (1LL << 60) + 1, -3};
    weft_tensor *th = wt_keep(weft_tensor_from_data(hv, WEFT_DIMS(2, 2), WEFT_I64));
    weft_tensor *hs = wt_keep(weft_sum(th, 1, (int[]){1}, false)), *hm = wt_keep(weft_max(th, 1, (int[]){0}, false));
    weft_tensor *hmn = wt_keep(weft_min(th, 0, NULL, false)), *ha = wt_keep(weft_argmax(th, 0, false));
    CHECK(hs && ((int64_t *)weft_tensor_data(hs))[0] == (1LL << 60) + 1 && ((int64_t *)weft_tensor_data(hs))[1] == (1LL << 60) - 2);
    CHECK(hm && ((int64_t *)weft_tensor_data(hm))[0] == (1LL << 60) + 1 && ((int64_t *)weft_tensor_data(hm))[1] == 1);
    CHECK(hmn && ((int64_t *)weft_tensor_data(hmn))[0] == -3);
    CHECK(ha && ((int64_t *)weft_tensor_data(ha))[0] == 1 && ((int64_t *)weft_tensor_data(ha))[1] == 0);
    int32_t wrap[2] = {2000000000, 2000000000}; // i32 sums wrap like the dtype (as PyTorch's int32 sum)
    weft_tensor *tw = wt_keep(weft_tensor_from_data(wrap, WEFT_DIMS(2), WEFT_I32)), *sw = wt_keep(weft_sum(tw, 0, NULL, false));
    CHECK(sw && ((int32_t *)weft_tensor_data(sw))[0] == (int32_t)(uint32_t)4000000000u);
    // logsumexp is stable and handles infinities
    double big[2] = {1000, 1000}, inf[3] = {INFINITY, 1, 2}, ninf[2] = {-INFINITY, -INFINITY};
    weft_tensor *tb = wt_keep(weft_tensor_from_data(big, WEFT_DIMS(2), WEFT_F64));
    weft_tensor *tinf = wt_keep(weft_tensor_from_data(inf, WEFT_DIMS(3), WEFT_F64));
    weft_tensor *tninf = wt_keep(weft_tensor_from_data(ninf, WEFT_DIMS(2), WEFT_F64));
    CHECK_NEAR(weft_tensor_item(wt_keep(weft_logsumexp(tb, 0, NULL, false))), 1000 + log(2.0), 1e-14);
    CHECK(weft_tensor_item(wt_keep(weft_logsumexp(tinf, 0, NULL, false))) == INFINITY);
    CHECK(weft_tensor_item(wt_keep(weft_logsumexp(tninf, 0, NULL, false))) == -INFINITY);
    // NaN propagates through max/min
    double nv[3] = {1, NAN, 3};
    weft_tensor *tn = wt_keep(weft_tensor_from_data(nv, WEFT_DIMS(3), WEFT_F64));
    CHECK(isnan(weft_tensor_item(wt_keep(weft_max(tn, 0, NULL, false)))));
    CHECK(isnan(weft_tensor_item(wt_keep(weft_min(tn, 0, NULL, false)))));
    CHECK(weft_tensor_item(wt_keep(weft_argmax(tn, 0, false))) == 1);
    // empty reductions: sum is 0, mean is NaN, max is an error naming the op
    weft_tensor *e = wt_keep(weft_tensor_zeros(WEFT_DIMS(0, 3), WEFT_F32));
    double z3[3] = {0, 0, 0};
    wt_check_values("sum over empty dim", wt_keep(weft_sum(e, 1, (int[]){0}, false)), z3, 3, 0);
    weft_tensor *se = wt_keep(weft_sum(e, 1, (int[]){1}, false));
    CHECK(se && weft_tensor_numel(se) == 0 && weft_tensor_size(se, 0) == 0);
    weft_clear_error();
    CHECK(weft_max(e, 1, (int[]){0}, false) == NULL);
    CHECK(strstr(weft_last_error(), "max") != NULL);
    // 0-d input
    weft_tensor *sc = wt_keep(weft_tensor_scalar(2.5, WEFT_F64));
    CHECK(weft_tensor_item(wt_keep(weft_sum(sc, 0, NULL, false))) == 2.5);
    CHECK(weft_tensor_item(wt_keep(weft_max(sc, 1, (int[]){0}, true))) == 2.5);
    CHECK(weft_tensor_item(wt_keep(weft_argmax(sc, 0, false))) == 0);
    // size-1 reduced dims
    double one[3] = {1, 2, 3};
    weft_tensor *t1 = wt_keep(weft_tensor_from_data(one, WEFT_DIMS(3, 1), WEFT_F64));
    wt_check_values("sum over size-1 dim", wt_keep(weft_sum(t1, 1, (int[]){1}, false)), one, 3, 0);
    double v1[3] = {0, 0, 0};
    wt_check_values("var0 over size-1 dim", wt_keep(weft_var(t1, 1, (int[]){1}, 0, false)), v1, 3, 0);
    wt_drop_all();
}

// Threaded path: many outputs; and few outputs with long rows; transposed input.
static void test_large(void) {
    const int64_t R = 700, C = 300;
    double *x = malloc(sizeof(double) * (size_t)(R * C)), *ref = malloc(sizeof(double) * (size_t)(R * C));
    wt_vals(x, R * C, -1, 1, 77);
    weft_tensor *t = wt_keep(weft_tensor_from_data(x, WEFT_DIMS(R, C), WEFT_F64));
    const int64_t sz[2] = {R, C};
    for (int kind = 0; kind < N_KINDS; kind++)
        for (int ax = 0; ax < 3; ax++) {
            unsigned mask = ax == 2 ? 3u : 1u << ax;
            int64_t nout = naive(kind, 2, sz, x, mask, ref);
            if (kind == ARGMAX && ax == 2) continue;
            weft_tensor *y = wt_keep(apply(kind, t, ax == 2 ? 0 : 1, &ax, false));
            char what[64];
            snprintf(what, sizeof what, "large %s axis %d", k_names[kind], ax);
            wt_check_values(what, y, ref, nout, 1e-10);
        }
    // transposed (C,R): reduce over its dim 1 (= axis 0 of x)
    weft_tensor *tt = wt_keep(weft_transpose(t, 0, 1));
    naive(SUM, 2, sz, x, 1u, ref);
    wt_check_values("large transposed sum", wt_keep(weft_sum(tt, 1, (int[]){1}, false)), ref, C, 1e-10);
    free(x);
    free(ref);
    wt_drop_all();
}

// ---- gradients ----
typedef struct {
    int kind, n;
    const int *axes;
    bool keepdim;
} red_ctx;
// y = reduce(permute(x)) with x (4,5,3) -> (3,4,5): non-contiguous input
static weft_tensor *red_fn(weft_tensor *const *in, void *user) {
    const red_ctx *c = user;
    weft_tensor *p = weft_permute(in[0], (int[]){2, 0, 1}), *y = apply(c->kind, p, c->n, c->axes, c->keepdim);
    weft_tensor_free(p);
    return y;
}
static void test_grad(void) {
    static const int a0[] = {0}, a1[] = {1}, a02[] = {0, 2}, am1[] = {-1}, a12[] = {-2, -1};
    struct {
        int n;
        const int *axes;
    } ax[] = {{1, a0}, {1, a1}, {2, a02}, {1, am1}, {2, a12}, {0, NULL}};
    for (int kind = 0; kind < ARGMAX; kind++)
        for (size_t a = 0; a < sizeof ax / sizeof ax[0]; a++)
            for (int kd = 0; kd < 2; kd++) {
                double v[60];
                wt_vals(v, 60, -2, 2, 500 + kind * 10 + a); // distinct values: no max/min ties
                weft_tensor *x = wt_keep(wt_f64(v, WEFT_DIMS(4, 5, 3), true));
                red_ctx c = {kind, ax[a].n, ax[a].axes, kd};
                weft_status st = weft_gradcheck(red_fn, 1, &x, &c, NULL);
                if (st) fprintf(stderr, "grad %s axes#%d keepdim %d: %s\n", k_names[kind], (int)a, kd, weft_last_error());
                CHECK(st == WEFT_OK);
                wt_drop_all();
            }
}

// max/min: ties share the gradient evenly
static void test_maxmin_tie_grad(void) {
    double v[6] = {1, 3, 3, 5, 2, 5};
    weft_tensor *x = wt_keep(wt_f64(v, WEFT_DIMS(2, 3), true));
    weft_tensor *m = wt_keep(weft_max(x, 1, (int[]){1}, false)), *s = wt_keep(weft_sum(m, 0, NULL, false));
    CHECK(weft_backward(s, NULL, NULL) == WEFT_OK);
    double g[6] = {0, 0.5, 0.5, 0.5, 0, 0.5};
    wt_check_values("max tie grad", weft_tensor_grad(x), g, 6, 0);
    wt_drop_all();
}

// second order through sum/mean/var (their backward rules are ops)
static void test_second_order(void) {
    double v[4] = {1, 2, 4, 7};
    weft_tensor *x = wt_keep(wt_f64(v, WEFT_DIMS(4), true));
    weft_tensor *q = wt_keep(weft_mul(x, x)), *vr = wt_keep(weft_var(q, 0, NULL, 0, false));
    weft_backward_opts o = {.create_graph = true};
    CHECK(weft_backward(vr, NULL, &o) == WEFT_OK);
    weft_tensor *g = wt_keep(weft_tensor_ref(weft_tensor_grad(x)));
    weft_tensor_zero_grad(x);
    weft_tensor *gs = wt_keep(weft_sum(g, 0, NULL, false));
    CHECK(gs && weft_backward(gs, NULL, NULL) == WEFT_OK);
    // var(x^2) = mean((x^2 - m)^2), m = mean(x^2); dvar/dx_i = (4/N) x_i (x_i^2 - m)
    // d/dx_j sum_i dvar/dx_i = (4/N) [(3 x_j^2 - m) - (2 x_j / N) sum_i x_i]
    double m = (1 + 4 + 16 + 49) / 4.0, sx = 1 + 2 + 4 + 7, ref[4];
    for (int j = 0; j < 4; j++) ref[j] = (4.0 / 4) * ((3 * v[j] * v[j] - m) - (2 * v[j] / 4) * sx);
    wt_check_values("var second order", weft_tensor_grad(x), ref, 4, 1e-12);
    wt_drop_all();
}

// ---- sum_to ----
static weft_tensor *g_sumto_target;
static weft_tensor *sumto_fn(weft_tensor *const *in, void *user) {
    const int64_t *tgt = user;
    weft_tensor *t = weft_transpose(in[0], 0, 2); // (2,3,4) from a (4,3,2) leaf
    weft_tensor *r = weft_sum_to(t, (int)tgt[0], tgt + 1);
    weft_tensor_free(t);
    return r;
}
static void test_sum_to(void) {
    (void)g_sumto_target;
    const int64_t sz[3] = {2, 3, 4};
    double x[24], ref[24];
    wt_vals(x, 24, -1, 1, 9);
    weft_tensor *t = wt_keep(weft_tensor_from_data(x, 3, sz, WEFT_F64));
    struct {
        int nd;
        int64_t s[3];
        unsigned mask; // reduced dims of (2,3,4)
    } cs[] = {
        {2, {3, 1}, 1u | 4u}, {1, {4}, 1u | 2u}, {3, {1, 1, 4}, 1u | 2u}, {3, {2, 1, 4}, 2u},
        {0, {0}, 7u},         {3, {2, 3, 4}, 0u}, {2, {1, 4}, 1u | 2u},  {1, {1}, 7u},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int64_t nout = naive(SUM, 3, sz, x, cs[i].mask, ref);
        weft_tensor *y = wt_keep(weft_sum_to(t, cs[i].nd, cs[i].s));
        CHECK(y && weft_tensor_ndim(y) == cs[i].nd);
        for (int d = 0; y && d < cs[i].nd; d++) CHECK(weft_tensor_size(y, d) == cs[i].s[d]);
        char what[48];
        snprintf(what, sizeof what, "sum_to case %d", (int)i);
        wt_check_values(what, y, ref, nout, 1e-14);
        // gradient (through a transposed view)
        double xv[24];
        wt_vals(xv, 24, -1, 1, 30 + i);
        weft_tensor *leaf = wt_keep(wt_f64(xv, WEFT_DIMS(4, 3, 2), true));
        int64_t tgt[4] = {cs[i].nd, cs[i].s[0], cs[i].s[1], cs[i].s[2]};
        CHECK_GRAD(sumto_fn, 1, &leaf, tgt);
    }
    // not summable: (2,3,4) -> (3,3) and more dims than the input
    weft_clear_error();
    CHECK(weft_sum_to(t, WEFT_DIMS(3, 3)) == NULL && strstr(weft_last_error(), "sum_to"));
    weft_clear_error();
    CHECK(weft_sum_to(t, WEFT_DIMS(1, 2, 3, 4)) == NULL && strstr(weft_last_error(), "sum_to"));
    wt_drop_all();
}

// Sums over leading dims of a contiguous tensor take a tiled path (row tiles
// by column blocks); check it big enough to be threaded, in f32 and f64, sum
// and mean: wide (several column blocks) and narrow (one block, many row
// tiles, a partial last tile), and the same bits with one thread and two.
static void test_leading_dims_sum(void) {
    int nt0 = weft_num_threads();
    const int64_t shapes[2][3] = {{6, 50, 1001}, {17, 241, 130}}; // (A,R,K) summed over (A,R)
    for (int sh = 0; sh < 2; sh++) {
        const int64_t A = shapes[sh][0], R = shapes[sh][1], K = shapes[sh][2];
        double *v = malloc(sizeof(double) * (size_t)(A * R * K)), *ref = calloc((size_t)K, sizeof(double));
        wt_vals(v, A * R * K, -1, 1, 77 + sh);
        for (int64_t i = 0; i < A * R; i++)
            for (int64_t j = 0; j < K; j++) ref[j] += v[i * K + j];
        int axes[2] = {0, 1};
        for (int dt = 0; dt < 2; dt++) {
            weft_tensor *t64 = wt_keep(weft_tensor_from_data(v, WEFT_DIMS(A, R, K), WEFT_F64));
            weft_tensor *t = dt ? wt_keep(weft_cast(t64, WEFT_F32)) : t64;
            weft_set_num_threads(1);
            weft_tensor *s1 = wt_keep(weft_sum(t, 2, axes, false));
            weft_set_num_threads(2);
            weft_tensor *s2 = wt_keep(weft_sum(t, 2, axes, false));
            wt_check_values("sum leading dims", s2, ref, K, dt ? 1e-5 : 1e-12);
            wt_check_same("sum leading dims, 1 thread vs 2", s1, s2, 0);
            double *mref = malloc(sizeof(double) * (size_t)K);
            for (int64_t j = 0; j < K; j++) mref[j] = ref[j] / (double)(A * R);
            wt_check_values("mean leading dims", wt_keep(weft_mean(t, 2, axes, true)), mref, K, dt ? 1e-5 : 1e-12);
            free(mref);
        }
        free(v);
        free(ref);
    }
    weft_set_num_threads(nt0);
    wt_drop_all();
}

// bf16 / f16: reduced in f32 on the widened values, the result rounded once (bit for bit).
static void test_half(void) {
    for (int hi = 0; hi < 2; hi++) {
        weft_dtype lo = hi ? WEFT_F16 : WEFT_BF16;
        weft_tensor *x64 = wt_rand64(WEFT_DIMS(6, 37), -2, 2, 81, false), *x = weft_cast(x64, lo);
        weft_tensor *xf = weft_cast(x, WEFT_F32);
        for (int k = 0; k < 4; k++) {
            int ax = k & 1;
            weft_tensor *y = k < 2 ? weft_sum(x, 1, &ax, false) : weft_mean(x, 1, &ax, true);
            weft_tensor *r32 = k < 2 ? weft_sum(xf, 1, &ax, false) : weft_mean(xf, 1, &ax, true), *ref = weft_cast(r32, lo);
            CHECK(y && weft_tensor_dtype(y) == lo);
            wt_check_same("half reduction", y, ref, 0);
            weft_tensor *ts[] = {y, r32, ref};
            for (int i = 0; i < 3; i++) weft_tensor_free(ts[i]);
        }
        weft_tensor *am = weft_argmax(x, 1, false), *amf = weft_argmax(xf, 1, false);
        wt_check_same("half argmax", am, amf, 0);
        weft_tensor *ts[] = {x64, x, xf, am, amf};
        for (int i = 0; i < 5; i++) weft_tensor_free(ts[i]);
    }
}

int main(void) {
    RUN(test_half);
    RUN(test_leading_dims_sum);
    RUN(test_forward_all_axes);
    RUN(test_argmax);
    RUN(test_integer_and_special);
    RUN(test_large);
    RUN(test_grad);
    RUN(test_maxmin_tie_grad);
    RUN(test_second_order);
    RUN(test_sum_to);
    return wt_summary();
}
