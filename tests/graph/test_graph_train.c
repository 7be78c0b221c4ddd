// Graph-mode training updates: the fused optimiser ops (sgd_update,
// sgd_momentum_update, adam_update) against weft_optim_step bit for bit over
// several steps (SGD with weight decay, momentum + dampening, Nesterov; Adam
// with weight decay; AdamW; f32 and f64; a parameter big enough for the
// threaded path), the in-place write into the variables (storage pointer
// unchanged, run stats count the writes, the copy fallback agrees), and the
// executor's safety rule: an update is written in place only when every
// other reader of the variable runs before it, else it falls back to a copy
// at the assign and a late reader still sees the old value.
#include <stdlib.h>
#include <string.h>

#include <weft/graph.h>
#include <weft/optim.h>

#include "weft_test.h"

enum { NP = 3, STEPS = 5 };
static const int64_t k_shape[NP][2] = {{37, 29}, {29, 1}, {300, 200}}; // the last > WEFT_PAR_GRAIN: threaded blocks

static bool same_bits(weft_tensor *a, weft_tensor *b) {
    if (!a || !b || weft_tensor_numel(a) != weft_tensor_numel(b) || weft_tensor_dtype(a) != weft_tensor_dtype(b))
        return false;
    size_t n = (size_t)weft_tensor_numel(a) * (weft_tensor_dtype(a) == WEFT_F32 ? 4 : 8);
    return memcmp(weft_tensor_data(a), weft_tensor_data(b), n) == 0;
}

static weft_tensor *rand_t(const int64_t *sz, weft_dtype dt, double lo, double hi, uint64_t seed) {
    int64_t n = sz[0] * sz[1];
    double *v = malloc(sizeof(double) * (size_t)n);
    wt_vals(v, n, lo, hi, seed);
    weft_tensor *t64 = weft_tensor_from_data(v, 2, sz, WEFT_F64), *t = weft_cast(t64, dt);
    weft_tensor_free(t64);
    free(v);
    return t;
}

typedef enum { RUN_INPLACE, RUN_NOPLAN, RUN_PAR, RUN_FETCH } run_mode;

// n graph steps and n eager steps from the same start with the same
// gradients and learning rates; every parameter and state tensor must agree
// bit for bit. mode: how the graph runs (in place; copies without a plan,
// with 2 inter-op threads, or with the updates fetched so they cannot be
// written in place).
static void check_vs_eager(weft_optim_opts o, weft_dtype dt, run_mode mode) {
    bool sgd = o.kind == WEFT_OPTIM_SGD, mom = sgd && o.momentum != 0;
    const char *opn = !sgd ? "adam_update" : mom ? "sgd_momentum_update" : "sgd_update";
    int n_out = !sgd ? 3 : mom ? 2 : 1;
    weft_tensor *pe[NP];
    const char *names[NP] = {"w", "b", "big"};
    weft_graph *g = weft_graph_new();
    weft_value pv[NP][3], gv[NP], out[NP][3];
    weft_node_id targets[NP * 3];
    int nt = 0;
    weft_value lr = weft_graph_placeholder(g, "lr", 0, NULL, WEFT_F64);
    weft_value ss = weft_graph_placeholder(g, "ss", 0, NULL, WEFT_F64);
    weft_value bc2s = weft_graph_placeholder(g, "bc2s", 0, NULL, WEFT_F64);
    weft_value first = weft_graph_placeholder(g, "first", 0, NULL, WEFT_F64);
    for (int i = 0; i < NP; i++) {
        pe[i] = rand_t(k_shape[i], dt, -1, 1, 10 + (uint64_t)i);
        weft_tensor_set_requires_grad(pe[i], true);
        char nm[32];
        pv[i][0] = weft_graph_variable(g, names[i], pe[i]);
        for (int k = 1; k < n_out; k++) {
            weft_tensor *z = weft_tensor_zeros(2, k_shape[i], dt);
            snprintf(nm, sizeof nm, "%s.s%d", names[i], k);
            pv[i][k] = weft_graph_variable(g, nm, z);
            weft_tensor_free(z);
        }
        snprintf(nm, sizeof nm, "%s.grad", names[i]);
        gv[i] = weft_graph_placeholder(g, nm, 2, k_shape[i], dt);
        weft_value in[7];
        int n_in = 0;
        for (int k = 0; k < n_out; k++) in[n_in++] = pv[i][k];
        in[n_in++] = gv[i];
        in[n_in++] = lr;
        if (mom) in[n_in++] = first;
        if (!sgd) in[n_in++] = ss, in[n_in++] = bc2s;
        double f[4];
        int64_t at = sgd ? o.nesterov : o.kind == WEFT_OPTIM_ADAMW;
        if (sgd) f[0] = o.weight_decay, f[1] = o.momentum, f[2] = o.dampening, f[3] = 0;
        else f[0] = o.beta1, f[1] = o.beta2, f[2] = o.eps, f[3] = o.weight_decay;
        CHECK(weft_graph_op(g, opn, n_in, in, &at, 1, f, 4, out[i]) == WEFT_OK);
        for (int k = 0; k < n_out; k++) targets[nt++] = weft_graph_value_node(g, weft_graph_assign(g, NULL, pv[i][k], out[i][k]));
    }
    weft_optim *opt = weft_optim_create(&o, NP, pe, names);
    CHECK(opt != NULL);
    void *ptr0 = weft_tensor_data(weft_graph_variable_tensor(g, pv[0][0]));
    weft_graph_run_options ro = {.interop_threads = mode == RUN_PAR ? 2 : 1, .memory_plan = mode == RUN_NOPLAN ? -1 : 1};
    int inplace_writes = 0;
    for (int t = 1; t <= STEPS && opt; t++) {
        double lr_t = (sgd ? 0.05 : 0.01) * (1 + 0.1 * t); // a schedule: the rate changes every step
        weft_tensor *grads[NP];
        for (int i = 0; i < NP; i++) {
            grads[i] = rand_t(k_shape[i], dt, -2, 2, 100 * (uint64_t)t + (uint64_t)i);
            weft_tensor *gc = weft_tensor_clone(grads[i]);
            CHECK(weft_tensor_set_grad(pe[i], gc) == WEFT_OK);
            weft_tensor_free(gc);
        }
        weft_optim_set_lr(opt, lr_t);
        CHECK(weft_optim_step(opt) == WEFT_OK);
        // the host scalars as src/train/graph_train.c computes them
        double hv[4] = {lr_t, lr_t / (1 - pow(o.beta1, t)), sqrt(1 - pow(o.beta2, t)), t == 1};
        weft_value fv[4 + NP] = {lr, ss, bc2s, first};
        weft_tensor *ft[4 + NP];
        for (int k = 0; k < 4; k++) ft[k] = weft_tensor_scalar(hv[k], WEFT_F64);
        for (int i = 0; i < NP; i++) fv[4 + i] = gv[i], ft[4 + i] = grads[i];
        weft_tensor *fetched[NP] = {0};
        weft_value fetch[NP];
        for (int i = 0; i < NP; i++) fetch[i] = out[i][0];
        // unused placeholders may be fed (lr etc. for every kind keeps the loop simple)
        int nfeed = 0;
        weft_value fv2[4 + NP];
        weft_tensor *ft2[4 + NP];
        for (int k = 0; k < 4 + NP; k++) {
            bool used = k >= 4 || k == 0 || (k == 3 && mom) || ((k == 1 || k == 2) && !sgd);
            if (used) fv2[nfeed] = fv[k], ft2[nfeed++] = ft[k];
        }
        CHECK(weft_graph_run_ex(g, nfeed, fv2, ft2, mode == RUN_FETCH ? NP : 0, fetch, fetched, nt, targets, &ro) ==
              WEFT_OK);
        inplace_writes += weft_graph_last_run_stats(g).inplace_writes;
        for (int i = 0; i < NP; i++) {
            weft_tensor_free(fetched[i]);
            weft_tensor_free(grads[i]);
        }
        for (int k = 0; k < 4; k++) weft_tensor_free(ft[k]);
        weft_optim_zero_grad(opt);
    }
    const char *slot[3] = {NULL, sgd ? "momentum_buffer" : "exp_avg", "exp_avg_sq"};
    for (int i = 0; i < NP && opt; i++)
        for (int k = 0; k < n_out; k++) {
            char nm[64];
            snprintf(nm, sizeof nm, "%s.%s", names[i], slot[k]);
            weft_tensor *ref = k == 0 ? pe[i] : weft_optim_state_find(opt, nm);
            bool ok = same_bits(weft_graph_variable_tensor(g, pv[i][k]), ref);
            if (!ok) fprintf(stderr, "%s %s %s mode %d: %s differs from eager\n", weft_optim_kind_name(o.kind),
                             weft_dtype_name(dt), opn, (int)mode, k == 0 ? names[i] : nm);
            CHECK(ok);
        }
    // In place: every output written into its variable, the variable's storage the same.
    CHECK(weft_tensor_data(weft_graph_variable_tensor(g, pv[0][0])) == ptr0);
    if (getenv("DBG")) fprintf(stderr, "inplace %d\n", inplace_writes);
    CHECK(inplace_writes == (mode == RUN_FETCH ? (n_out - 1) * NP * STEPS : NP * n_out * STEPS));
    weft_optim_free(opt);
    for (int i = 0; i < NP; i++) weft_tensor_free(pe[i]);
    weft_graph_free(g);
}

static void test_sgd(void) {
    weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_SGD);
    o.weight_decay = 0.01;
    check_vs_eager(o, WEFT_F32, RUN_INPLACE);
    o.momentum = 0.9, o.dampening = 0.1;
    check_vs_eager(o, WEFT_F32, RUN_INPLACE);
    check_vs_eager(o, WEFT_F64, RUN_INPLACE);
    o.dampening = 0, o.nesterov = true;
    check_vs_eager(o, WEFT_F32, RUN_INPLACE);
    check_vs_eager(o, WEFT_F32, RUN_NOPLAN);
}

static void test_adam(void) {
    weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_ADAM);
    o.weight_decay = 0.02;
    check_vs_eager(o, WEFT_F32, RUN_INPLACE);
    check_vs_eager(o, WEFT_F64, RUN_INPLACE);
    check_vs_eager(o, WEFT_F32, RUN_FETCH); // the parameter's update is copied at the assign instead
}

static void test_adamw(void) {
    weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_ADAMW);
    check_vs_eager(o, WEFT_F32, RUN_INPLACE);
    check_vs_eager(o, WEFT_F32, RUN_NOPLAN);
    check_vs_eager(o, WEFT_F32, RUN_PAR);
}

// V := sgd_update(V, g, lr) while R = V + neg(neg(x)) also reads V. The FIFO
// order runs the update before R (R waits for its chain). how: 0 the assign
// waits for R (not the update: it must not write in place), 1 the update
// waits for R (in place), 2 as 0 but R reads V through a view.
static void ordering_case(int how) {
    weft_graph *g = weft_graph_new();
    int64_t n4[1] = {4};
    double v0[4] = {1, 2, 3, 4}, xv[4] = {10, 20, 30, 40}, gvv[4] = {1, 1, 2, 2};
    weft_tensor *vt = wt_f64(v0, 1, n4, false), *xt = wt_f64(xv, 1, n4, false), *gt = wt_f64(gvv, 1, n4, false);
    weft_tensor *lrt = weft_tensor_scalar(0.5, WEFT_F64);
    weft_value v = weft_graph_variable(g, "v", vt);
    weft_value x = weft_graph_placeholder(g, "x", 1, n4, WEFT_F64);
    weft_value gr = weft_graph_placeholder(g, "g", 1, n4, WEFT_F64);
    weft_value lr = weft_graph_placeholder(g, "lr", 0, NULL, WEFT_F64);
    weft_value in[3] = {v, gr, lr};
    double wd = 0;
    weft_value u = weft_graph_op1(g, "sgd_update", 3, in, NULL, 0, &wd, 1);
    weft_value a = weft_graph_assign(g, "assign_v", v, u);
    weft_value t = weft_graph_op1(g, "neg", 1, &x, NULL, 0, NULL, 0);
    t = weft_graph_op1(g, "neg", 1, &t, NULL, 0, NULL, 0);
    weft_value rv = v;
    if (how == 2) {
        int64_t at[2] = {1, 4};
        rv = weft_graph_op1(g, "view", 1, &v, at, 2, NULL, 0);
    }
    weft_value ri[2] = {rv, t};
    weft_value r = weft_graph_op1(g, "add", 2, ri, NULL, 0, NULL, 0);
    weft_node_id an = weft_graph_value_node(g, a), rn = weft_graph_value_node(g, r);
    CHECK(weft_graph_add_control_dep(g, how == 1 ? weft_graph_value_node(g, u) : an, rn) == WEFT_OK);
    weft_value fv[3] = {x, gr, lr};
    weft_tensor *ft[3] = {xt, gt, lrt}, *out = NULL;
    for (int rep = 0; rep < 2; rep++) { // the second run comes from the run cache
        weft_tensor *vv = weft_graph_variable_tensor(g, v);
        double before[4];
        weft_tensor_to_f64(vv, before, 4);
        CHECK(weft_graph_run(g, 3, fv, ft, 1, &r, &out, 1, &an) == WEFT_OK);
        double rr[4], after[4];
        weft_tensor_to_f64(out, rr, 4);
        weft_tensor_to_f64(vv, after, 4);
        for (int i = 0; i < 4; i++) {
            CHECK(rr[i] == before[i] + xv[i]); // R saw the old value
            CHECK(after[i] == before[i] - 0.5 * gvv[i]);
        }
        CHECK(weft_graph_last_run_stats(g).inplace_writes == (how == 1));
        weft_tensor_free(out);
    }
    weft_tensor_free(vt);
    weft_tensor_free(xt);
    weft_tensor_free(gt);
    weft_tensor_free(lrt);
    weft_graph_free(g);
}

static void test_ordering(void) {
    ordering_case(0);
    ordering_case(1);
    ordering_case(2);
}

// Changing the graph after a run invalidates the cached order: a new node and
// a new control dependency take effect.
static void test_cache_invalidation(void) {
    weft_graph *g = weft_graph_new();
    int64_t n2[1] = {2};
    double v0[2] = {1, 2};
    weft_tensor *vt = wt_f64(v0, 1, n2, false);
    weft_value v = weft_graph_variable(g, "v", vt);
    weft_value d = weft_graph_op1(g, "neg", 1, &v, NULL, 0, NULL, 0);
    weft_value a = weft_graph_assign_add(g, "acc", v, d); // v += -v: 0
    weft_node_id an = weft_graph_value_node(g, a);
    weft_tensor *out = NULL;
    weft_value two = weft_graph_op1(g, "add", 2, (weft_value[]){v, v}, NULL, 0, NULL, 0);
    CHECK(weft_graph_run(g, 0, NULL, NULL, 1, &two, &out, 0, NULL) == WEFT_OK); // 2v, no assign
    double r[2];
    weft_tensor_to_f64(out, r, 2);
    CHECK(r[0] == 2 && r[1] == 4);
    weft_tensor_free(out);
    CHECK(weft_graph_run(g, 0, NULL, NULL, 1, &two, &out, 0, NULL) == WEFT_OK); // cached
    CHECK(weft_graph_last_run_stats(g).nodes_executed == 2);
    weft_tensor_free(out);
    // now the fetch must wait for the assign: v is 0 before 2v is computed
    CHECK(weft_graph_add_control_dep(g, weft_graph_value_node(g, two), an) == WEFT_OK);
    CHECK(weft_graph_run(g, 0, NULL, NULL, 1, &two, &out, 0, NULL) == WEFT_OK);
    weft_tensor_to_f64(out, r, 2);
    CHECK(r[0] == 0 && r[1] == 0);
    CHECK(weft_graph_last_run_stats(g).nodes_executed == 4); // v, neg, acc, add
    weft_tensor_free(out);
    weft_tensor_free(vt);
    weft_graph_free(g);
}

static void test_errors(void) {
    weft_graph *g = weft_graph_new();
    int64_t s3[1] = {3}, s4[1] = {4};
    weft_value p = weft_graph_placeholder(g, "p", 1, s3, WEFT_F32);
    weft_value gw = weft_graph_placeholder(g, "gw", 1, s4, WEFT_F32);
    weft_value gi = weft_graph_placeholder(g, "gi", 1, s3, WEFT_I32);
    weft_value lr = weft_graph_placeholder(g, "lr", 0, NULL, WEFT_F64);
    weft_value lr1 = weft_graph_placeholder(g, "lr1", 1, s3, WEFT_F64);
    weft_value out[3];
    CHECK(weft_graph_op(g, "sgd_update", 3, (weft_value[]){p, gw, lr}, NULL, 0, NULL, 0, out) != WEFT_OK);
    CHECK(wt_error_has("sgd_update") && wt_error_has("input 1"));
    CHECK(weft_graph_op(g, "sgd_update", 3, (weft_value[]){p, gi, lr}, NULL, 0, NULL, 0, out) != WEFT_OK);
    CHECK(weft_graph_op(g, "sgd_update", 3, (weft_value[]){p, p, lr1}, NULL, 0, NULL, 0, out) != WEFT_OK);
    CHECK(wt_error_has("0-d"));
    CHECK(weft_graph_op(g, "adam_update", 3, (weft_value[]){p, p, lr}, NULL, 0, NULL, 0, out) != WEFT_OK); // arity
    CHECK(wt_error_has("adam_update"));
    CHECK(weft_graph_op(g, "adam_update", 7, (weft_value[]){p, p, gw, p, lr, lr, lr}, NULL, 0, NULL, 0, out) != WEFT_OK);
    CHECK(wt_error_has("adam_update"));
    weft_graph_free(g);
}

int main(void) {
    RUN(test_sgd);
    RUN(test_adam);
    RUN(test_adamw);
    RUN(test_ordering);
    RUN(test_cache_invalidation);
    RUN(test_errors);
    return wt_summary();
}
