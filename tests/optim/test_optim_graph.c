// Graph mode's optimiser update against weft_optim_step, bit for bit, for
// every optimiser kind and option set (AdaGrad with lr_decay and an initial
// accumulator, RMSProp with momentum and centered, Adam and AdamW with
// amsgrad: all refused by graph mode before): each parameter's update is the
// node src/train/graph_train.c builds, taken from the optimiser's one
// description (src/optim/optim_impl.h: op, attrs, state, host scalars), run
// with weft_graph_run over several steps with a learning-rate schedule, the
// graph's variables written in place; parameters and every state tensor must
// equal the eager optimiser's. (tests/train/test_graph_train.c runs the same
// through `weft train --graph`.)
#include <stdlib.h>
#include <string.h>

#include <weft/graph.h>

#include "optim/optim_impl.h"
#include "weft_test.h"

enum { NP = 3, STEPS = 5 };
static const int64_t k_shape[NP][2] = {{37, 29}, {29, 1}, {300, 200}}; // the last > WEFT_PAR_GRAIN: threaded blocks
static const char *const k_names[NP] = {"w", "b", "big"};

static bool same_bits(weft_tensor *a, weft_tensor *b) {
    if (!a || !b || weft_tensor_numel(a) != weft_tensor_numel(b) || weft_tensor_dtype(a) != weft_tensor_dtype(b))
        return false;
    size_t n = (size_t)weft_tensor_numel(a) * weft_dtype_size(weft_tensor_dtype(a));
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

static void check_vs_eager(weft_optim_opts o, weft_dtype dt, const char *what) {
    weft_optim_update u;
    weft_optim_update_of(&o, &u);
    int n_out = 1 + u.n_state;
    weft_tensor *pe[NP];
    weft_graph *g = weft_graph_new();
    weft_value var[NP][4], gv[NP], sc[WEFT_OPTIM_NUM_SC];
    weft_node_id targets[NP * 4];
    int nt = 0;
    for (int k = 0; k < WEFT_OPTIM_NUM_SC; k++) {
        char nm[32];
        snprintf(nm, sizeof nm, "step.%s", weft_optim_scalar_name(k));
        sc[k] = weft_graph_placeholder(g, nm, 0, NULL, WEFT_F64);
    }
    for (int i = 0; i < NP; i++) {
        pe[i] = rand_t(k_shape[i], dt, -1, 1, 10 + (uint64_t)i);
        weft_tensor_set_requires_grad(pe[i], true);
        var[i][0] = weft_graph_variable(g, k_names[i], pe[i]);
        for (int k = 0; k < u.n_state; k++) { // the state as the optimiser creates it
            weft_tensor *z = weft_tensor_full(2, k_shape[i], dt, u.state_init);
            char nm[64];
            snprintf(nm, sizeof nm, "%s.%s", k_names[i], u.state[k]);
            var[i][1 + k] = weft_graph_variable(g, nm, z);
            weft_tensor_free(z);
        }
        char nm[32];
        snprintf(nm, sizeof nm, "%s.grad", k_names[i]);
        gv[i] = weft_graph_placeholder(g, nm, 2, k_shape[i], dt);
        weft_value in[8], out[4];
        int n_in = 0;
        for (int k = 0; k < n_out; k++) in[n_in++] = var[i][k];
        in[n_in++] = gv[i];
        for (int k = 0; k < u.n_scalar; k++) in[n_in++] = sc[u.scalar[k]];
        CHECK(weft_graph_op(g, u.op->name, n_in, in, u.attrs.i, 16, u.attrs.f, 4, out) == WEFT_OK);
        for (int k = 0; k < n_out; k++)
            targets[nt++] = weft_graph_value_node(g, weft_graph_assign(g, NULL, var[i][k], out[k]));
    }
    weft_optim *opt = weft_optim_create(&o, NP, pe, k_names);
    CHECK(opt != NULL);
    int inplace = 0;
    for (int t = 1; t <= STEPS && opt; t++) {
        weft_optim_set_lr(opt, o.lr * (1 + 0.1 * t)); // a schedule: the scalars change every step
        weft_tensor *grads[NP];
        for (int i = 0; i < NP; i++) {
            grads[i] = rand_t(k_shape[i], dt, -2, 2, 100 * (uint64_t)t + (uint64_t)i);
            weft_tensor *gc = weft_tensor_clone(grads[i]);
            CHECK(weft_tensor_set_grad(pe[i], gc) == WEFT_OK);
            weft_tensor_free(gc);
        }
        CHECK(weft_optim_step(opt) == WEFT_OK);
        weft_optim_zero_grad(opt);
        // the host scalars as graph mode feeds them
        double v[WEFT_OPTIM_NUM_SC];
        weft_optim_scalar_values(weft_optim_get_opts(opt), t, v);
        weft_value fv[NP + WEFT_OPTIM_MAX_SC];
        weft_tensor *ft[NP + WEFT_OPTIM_MAX_SC];
        int nf = 0;
        for (int i = 0; i < NP; i++) fv[nf] = gv[i], ft[nf++] = grads[i];
        for (int k = 0; k < u.n_scalar; k++)
            fv[nf] = sc[u.scalar[k]], ft[nf++] = weft_tensor_scalar(v[u.scalar[k]], WEFT_F64);
        CHECK(weft_graph_run(g, nf, fv, ft, 0, NULL, NULL, nt, targets) == WEFT_OK);
        inplace += weft_graph_last_run_stats(g).inplace_writes;
        for (int k = 0; k < nf; k++) weft_tensor_free(ft[k]);
    }
    for (int i = 0; i < NP && opt; i++)
        for (int k = 0; k < n_out; k++) {
            char nm[64];
            snprintf(nm, sizeof nm, "%s.%s", k_names[i], k ? u.state[k - 1] : "");
            weft_tensor *ref = k == 0 ? pe[i] : weft_optim_state_find(opt, nm);
            bool ok = same_bits(weft_graph_variable_tensor(g, var[i][k]), ref);
            if (!ok) fprintf(stderr, "%s %s: %s differs from eager\n", what, weft_dtype_name(dt), k ? nm : k_names[i]);
            CHECK(ok);
        }
    CHECK(inplace == NP * n_out * STEPS); // every output written straight into its variable
    weft_optim_free(opt);
    for (int i = 0; i < NP; i++) weft_tensor_free(pe[i]);
    weft_graph_free(g);
}

static void test_every_kind(void) {
    static const struct {
        const char *what;
        weft_optim_kind kind;
        double wd, momentum, dampening, lr_decay, iav;
        bool nesterov, centered, amsgrad;
    } cases[] = {
        {"sgd", WEFT_OPTIM_SGD, 0.01, 0, 0, 0, 0, false, false, false},
        {"sgd momentum", WEFT_OPTIM_SGD, 0.01, 0.9, 0.1, 0, 0, false, false, false},
        {"sgd nesterov", WEFT_OPTIM_SGD, 0, 0.9, 0, 0, 0, true, false, false},
        {"adagrad", WEFT_OPTIM_ADAGRAD, 0, 0, 0, 0, 0, false, false, false},
        {"adagrad decay", WEFT_OPTIM_ADAGRAD, 0.01, 0, 0, 0.1, 0.2, false, false, false},
        {"rmsprop", WEFT_OPTIM_RMSPROP, 0, 0, 0, 0, 0, false, false, false},
        {"rmsprop momentum", WEFT_OPTIM_RMSPROP, 0.01, 0.5, 0, 0, 0, false, false, false},
        {"rmsprop centered", WEFT_OPTIM_RMSPROP, 0, 0, 0, 0, 0, false, true, false},
        {"rmsprop centered momentum", WEFT_OPTIM_RMSPROP, 0.01, 0.5, 0, 0, 0, false, true, false},
        {"adam", WEFT_OPTIM_ADAM, 0.02, 0, 0, 0, 0, false, false, false},
        {"adam amsgrad", WEFT_OPTIM_ADAM, 0, 0, 0, 0, 0, false, false, true},
        {"adamw", WEFT_OPTIM_ADAMW, 0.01, 0, 0, 0, 0, false, false, false},
        {"adamw amsgrad", WEFT_OPTIM_ADAMW, 0.05, 0, 0, 0, 0, false, false, true},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        weft_optim_opts o = weft_optim_defaults(cases[c].kind);
        o.weight_decay = cases[c].wd, o.momentum = cases[c].momentum, o.dampening = cases[c].dampening;
        o.lr_decay = cases[c].lr_decay, o.initial_accumulator_value = cases[c].iav;
        o.nesterov = cases[c].nesterov, o.centered = cases[c].centered, o.amsgrad = cases[c].amsgrad;
        check_vs_eager(o, WEFT_F32, cases[c].what);
        check_vs_eager(o, WEFT_F64, cases[c].what);
    }
}

int main(void) {
    RUN(test_every_kind);
    return wt_summary();
}
