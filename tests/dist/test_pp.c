// mpirun: 1 2 4
// Pipeline parallelism (weft/parallel.h): an f64 MLP of 9 layers trained 6
// steps with SGD through weft_pp_step under each schedule must match
//   (a) the same model trained on the whole batch in one process (computed
//       on every rank from the same seed): losses and every parameter this
//       rank holds within 1e-10 relative (the micro-batches regroup the
//       batch sums), and
//   (b) GPipe with the same micro-batches in this one process (weft_pp_create
//       with no communicator), bit for bit: every schedule runs each chunk's
//       backwards in micro-batch order, so stages, schedule, split and
//       recomputation change no sum.
// With 1 process the pipelines are one stage (interleaved: 2 chunks talking
// through the mailbox); with 2, PP = 2 under GPipe, 1F1B, interleaved (V = 2)
// and 1F1B with recomputation, split by layers, parameters, measured cost and
// by hand; with 4, PP = 4 under all three (interleaved V = 2: 8 chunks) and
// PP = 2 x DP = 2 (gradients averaged over the dp group by the caller).
// Bad settings are errors naming the setting.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

#include <weft/parallel.h>

static int size, rank;

enum { IN = 12, OUT = 5, BATCH = 8, STEPS = 6 };

// ---- an f64 linear layer (weft's layers are f32) ----
static weft_tensor *lin_forward(weft_module *m, weft_tensor *x) {
    weft_tensor *wt = weft_transpose(weft_module_get(m, "weight"), 0, 1);
    weft_tensor *y = weft_matmul(x, wt), *yb = y ? weft_add(y, weft_module_get(m, "bias")) : NULL;
    weft_tensor_free(wt);
    weft_tensor_free(y);
    return yb;
}

static weft_module *lin64(int64_t in, int64_t out, weft_generator *g) {
    weft_module *m = weft_module_new("linear64", lin_forward, NULL, NULL);
    weft_tensor *w = weft_tensor_empty(WEFT_DIMS(out, in), WEFT_F64), *b = weft_tensor_empty(WEFT_DIMS(out), WEFT_F64);
    double bound = 1 / sqrt((double)in);
    weft_init_uniform(w, -bound, bound, g);
    weft_init_uniform(b, -bound, bound, g);
    weft_module_add_param(m, "weight", w);
    weft_module_add_param(m, "bias", b);
    return m;
}

// 9 children: linear, relu, linear, relu, linear, relu, linear, relu, linear.
static weft_module *mlp(void) {
    weft_generator *g = weft_generator_create(7);
    int64_t w[] = {IN, 16, 24, 16, 12, OUT};
    weft_module *s = weft_nn_sequential();
    for (int i = 0; i < 5; i++) {
        weft_nn_sequential_append(s, lin64(w[i], w[i + 1], g));
        if (i < 4) weft_nn_sequential_append(s, weft_nn_activation(WEFT_ACT_RELU));
    }
    weft_generator_free(g);
    return s;
}

static weft_tensor *ce(weft_tensor *out, weft_tensor *tgt, void *user) {
    (void)user;
    return weft_cross_entropy(out, tgt);
}

// Batch `step` of the data: x (BATCH, IN) f64, y (BATCH) i64 in [0, OUT).
static void batch(int step, weft_tensor **x, weft_tensor **y) {
    weft_generator *g = weft_generator_create(100 + (uint64_t)step);
    *x = weft_tensor_randn(WEFT_DIMS(BATCH, IN), WEFT_F64, g);
    int64_t lab[BATCH];
    for (int i = 0; i < BATCH; i++) lab[i] = (i * 7 + step * 3) % OUT;
    *y = weft_tensor_from_data(lab, WEFT_DIMS(BATCH), WEFT_I64);
    weft_generator_free(g);
}

static weft_optim *sgd(int n, weft_tensor **params) {
    weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_SGD);
    o.lr = 0.2;
    o.momentum = 0.5;
    return weft_optim_create(&o, n, params, NULL);
}

// ---- the references ----
typedef struct {
    double loss[STEPS];
    weft_module *net; // after STEPS steps
} run;

// (a): the whole batch in one process.
static run reference_full(void) {
    run r = {.net = mlp()};
    int n = weft_module_param_count(r.net);
    weft_tensor *ps[32];
    for (int i = 0; i < n; i++) ps[i] = weft_module_param_at(r.net, i, NULL, 0);
    weft_optim *opt = sgd(n, ps);
    for (int s = 0; s < STEPS; s++) {
        weft_tensor *x, *y;
        batch(s, &x, &y);
        weft_optim_zero_grad(opt);
        weft_tensor *out = weft_module_forward(r.net, x), *l = weft_cross_entropy(out, y);
        CHECK(l && weft_backward(l, NULL, NULL) == WEFT_OK && weft_optim_step(opt) == WEFT_OK);
        r.loss[s] = weft_tensor_item(l);
        weft_tensor_free(out);
        weft_tensor_free(l);
        weft_tensor_free(x);
        weft_tensor_free(y);
    }
    weft_optim_free(opt);
    return r;
}

// A pipeline run over c (NULL: this process alone). dp: a data-parallel
// group whose replicas each take their share of the batch (NULL: none).
static run pipeline(weft_comm *c, weft_comm *dp, const weft_pp_opts *o, weft_pp **keep) {
    run r = {.net = mlp()};
    weft_pp *p = weft_pp_create(c, r.net, o);
    CHECK(p != NULL);
    if (!p) {
        fprintf(stderr, "pp_create: %s\n", weft_last_error());
        return r;
    }
    int n = weft_pp_params(p, NULL);
    weft_tensor *ps[32];
    CHECK(weft_pp_params(p, ps) == n);
    // A rank whose chunks are all ReLUs (PP = 4, V = 2) has nothing to train.
    weft_optim *opt = n ? sgd(n, ps) : NULL;
    int nd = dp ? weft_comm_size(dp) : 1, rd = dp ? weft_comm_rank(dp) : 0;
    for (int s = 0; s < STEPS; s++) {
        weft_tensor *x, *y;
        batch(s, &x, &y);
        weft_tensor *xs = weft_narrow(x, 0, rd * (BATCH / nd), BATCH / nd);
        weft_tensor *ys = weft_narrow(y, 0, rd * (BATCH / nd), BATCH / nd);
        if (opt) weft_optim_zero_grad(opt);
        double l = NAN;
        weft_status st = weft_pp_step(p, xs, ys, ce, NULL, &l);
        CHECK(st == WEFT_OK);
        if (st) fprintf(stderr, "rank %d: pp_step: %s\n", rank, weft_last_error());
        if (dp) { // the caller's data-parallel average (as DDP would)
            for (int i = 0; i < n; i++) CHECK(weft_dist_all_reduce(dp, weft_tensor_grad(ps[i]), WEFT_REDUCE_AVG) == 0);
            weft_tensor *lt = weft_tensor_scalar(l, WEFT_F64);
            CHECK(weft_dist_all_reduce(dp, lt, WEFT_REDUCE_AVG) == WEFT_OK);
            l = weft_tensor_item(lt);
            weft_tensor_free(lt);
        }
        CHECK(!opt || weft_optim_step(opt) == WEFT_OK);
        r.loss[s] = l;
        weft_tensor_free(xs);
        weft_tensor_free(ys);
        weft_tensor_free(x);
        weft_tensor_free(y);
    }
    weft_optim_free(opt);
    if (keep) *keep = p;
    else weft_pp_free(p);
    return r;
}

// max |a - b| / max |b| over the parameters of child i.
static double rel_diff(weft_module *a, weft_module *b, int child) {
    weft_module *ca = weft_module_child_at(a, child), *cb = weft_module_child_at(b, child);
    double num = 0, den = 0;
    for (int j = 0; j < weft_module_param_count(ca); j++) {
        weft_tensor *ta = weft_module_param_at(ca, j, NULL, 0), *tb = weft_module_param_at(cb, j, NULL, 0);
        int64_t n = weft_tensor_numel(ta);
        double *va = malloc(sizeof(double) * (size_t)n), *vb = malloc(sizeof(double) * (size_t)n);
        weft_tensor_to_f64(ta, va, n);
        weft_tensor_to_f64(tb, vb, n);
        for (int64_t i = 0; i < n; i++) {
            num = fmax(num, fabs(va[i] - vb[i]));
            den = fmax(den, fabs(vb[i]));
        }
        free(va);
        free(vb);
    }
    return den > 0 ? num / den : num;
}

static run g_full;

// Trains under opts over c and compares with both references.
static void check_config(const char *what, weft_comm *c, weft_comm *dp, const weft_pp_opts *o) {
    weft_pp *p = NULL;
    run got = pipeline(c, dp, o, &p);
    if (!p) {
        weft_module_free(got.net);
        return;
    }
    // (b): one process, GPipe, no recomputation, the default split, the same
    // M (with a dp group it takes the whole batch: compared within 1e-10 only)
    weft_pp_opts lo = {.schedule = WEFT_PP_GPIPE, .microbatches = o->microbatches};
    run local = pipeline(NULL, NULL, &lo, NULL);
    int bad = 0;
    for (int s = 0; s < STEPS; s++) {
        double e = fabs(got.loss[s] - g_full.loss[s]) / fabs(g_full.loss[s]);
        if (!(e <= 1e-10)) bad++, fprintf(stderr, "%s: step %d loss %.17g, full batch %.17g\n", what, s, got.loss[s],
                                          g_full.loss[s]);
        // With dp the loss is averaged over the replicas: a regrouped sum.
        if (!dp && got.loss[s] != local.loss[s])
            bad++, fprintf(stderr, "%s: step %d loss %.17g, one process %.17g\n", what, s, got.loss[s], local.loss[s]);
    }
    int held = 0;
    for (int i = 0; i < weft_module_child_count(got.net); i++) {
        if (!weft_pp_holds(p, i)) continue;
        held++;
        double e = rel_diff(got.net, g_full.net, i), e1 = rel_diff(got.net, local.net, i);
        if (!(e <= 1e-10)) bad++, fprintf(stderr, "%s: rank %d layer %d: %.3g from the full batch\n", what, rank, i, e);
        if (!dp && e1 != 0) bad++, fprintf(stderr, "%s: rank %d layer %d: %.3g from one process\n", what, rank, i, e1);
    }
    CHECK(held > 0);
    CHECK(bad == 0);
    weft_pp_stats st = weft_pp_last_stats(p);
    CHECK(st.step_s > 0 && st.busy_s > 0 && st.idle_fraction < 1);
    weft_pp_free(p);
    weft_module_free(got.net);
    weft_module_free(local.net);
}

static void test_schedules(void) {
    weft_comm *w = weft_comm_world();
    int M = 4; // interleaved needs a multiple of P
    check_config("gpipe", w, NULL, &(weft_pp_opts){.schedule = WEFT_PP_GPIPE, .microbatches = M});
    check_config("1f1b", w, NULL, &(weft_pp_opts){.schedule = WEFT_PP_1F1B, .microbatches = M});
    check_config("1f1b m=8", w, NULL, &(weft_pp_opts){.schedule = WEFT_PP_1F1B, .microbatches = 8});
    check_config("interleaved v=2", w, NULL,
                 &(weft_pp_opts){.schedule = WEFT_PP_INTERLEAVED, .microbatches = M, .virtual_stages = 2});
    check_config("gpipe recompute", w, NULL,
                 &(weft_pp_opts){.schedule = WEFT_PP_GPIPE, .microbatches = M, .recompute = true});
    check_config("interleaved recompute", w, NULL,
                 &(weft_pp_opts){.schedule = WEFT_PP_INTERLEAVED, .microbatches = M, .virtual_stages = 2,
                                 .recompute = true});
}

static void test_splits(void) {
    weft_comm *w = weft_comm_world();
    check_config("split params", w, NULL,
                 &(weft_pp_opts){.schedule = WEFT_PP_1F1B, .microbatches = 2, .split = WEFT_PP_SPLIT_PARAMS});
    weft_tensor *x, *y;
    batch(0, &x, &y);
    check_config("split cost", w, NULL,
                 &(weft_pp_opts){.schedule = WEFT_PP_1F1B, .microbatches = 2, .split = WEFT_PP_SPLIT_COST,
                                 .cost_sample = x});
    weft_tensor_free(x);
    weft_tensor_free(y);
    if (size == 2) {
        int by_hand[9] = {0, 0, 0, 0, 0, 0, 0, 1, 1};
        check_config("by hand", w, NULL, &(weft_pp_opts){.schedule = WEFT_PP_GPIPE, .microbatches = 2,
                                                         .stage_of = by_hand});
        weft_module *m = mlp();
        weft_pp *p = weft_pp_create(w, m, &(weft_pp_opts){.stage_of = by_hand});
        CHECK(p && weft_pp_chunk_of(p, 6) == 0 && weft_pp_chunk_of(p, 7) == 1 && weft_pp_holds(p, 8) == (rank == 1));
        weft_pp_free(p);
        weft_module_free(m);
    }
}

// PP = 2 x DP = 2 on 4 ranks: each replica's pipeline takes half the batch.
static void test_with_dp(void) {
    if (size != 4) return;
    weft_parallel *l = weft_parallel_create(weft_comm_world(), 1, 2);
    CHECK(l && l->dp == 2 && l->pp == 2);
    check_config("pp2 x dp2 1f1b", l->pp_comm, l->dp_comm,
                 &(weft_pp_opts){.schedule = WEFT_PP_1F1B, .microbatches = 2});
    weft_parallel_free(l);
}

// The autograd-aware messages alone: rank 0 sends y = 2x, the last rank
// receives r and backpropagates sum(r * r), whose gradient 2r goes back and
// through y: x.grad = 2 * 2r = 8x (closed form). With one process the same
// pair talks through the mailbox (receive and its backward before the
// send's backward, as a schedule orders them).
static void test_p2p(void) {
    weft_comm *c = weft_comm_world();
    int last = size - 1;
    double xv[6] = {1, -2, 3, 0.5, -0.25, 4};
    if (rank == 0) {
        weft_tensor *x = weft_tensor_from_data(xv, WEFT_DIMS(2, 3), WEFT_F64);
        weft_tensor_set_requires_grad(x, true);
        weft_tensor *y = weft_mul_scalar(x, 2);
        weft_tensor *tok = weft_pp_send(c, y, last, 5);
        CHECK(tok && weft_tensor_requires_grad(tok) && !strcmp(weft_tensor_grad_fn_name(tok), "pp_send"));
        if (size == 1) { // the receiving side, here
            weft_tensor *r = weft_pp_recv(c, WEFT_DIMS(2, 3), WEFT_F64, WEFT_DEVICE_CPU, 0, 5, true);
            weft_tensor *rr = weft_mul(r, r), *z = weft_sum(rr, 0, NULL, false);
            CHECK(weft_backward(z, NULL, NULL) == WEFT_OK);
            weft_tensor_free(r);
            weft_tensor_free(rr);
            weft_tensor_free(z);
        }
        CHECK(weft_backward(tok, NULL, NULL) == WEFT_OK);
        double g[6] = {0};
        for (int i = 0; i < 6; i++) g[i] = 8 * xv[i];
        wt_check_values("x.grad", weft_tensor_grad(x), g, 6, 0);
        CHECK(weft_pp_wait_sends(c) == WEFT_OK);
        // a tensor without history: a token without one, nothing comes back
        weft_tensor *plain = weft_tensor_ones(WEFT_DIMS(2), WEFT_F64);
        weft_tensor *t2 = weft_pp_send(c, plain, last, 6);
        CHECK(t2 && !weft_tensor_requires_grad(t2));
        if (size == 1) weft_tensor_free(weft_pp_recv(c, WEFT_DIMS(2), WEFT_F64, WEFT_DEVICE_CPU, 0, 6, false));
        CHECK(weft_pp_wait_sends(c) == WEFT_OK);
        weft_tensor_free(t2);
        weft_tensor_free(plain);
        weft_tensor_free(tok);
        weft_tensor_free(y);
        weft_tensor_free(x);
    } else if (rank == last) {
        weft_tensor *r = weft_pp_recv(c, WEFT_DIMS(2, 3), WEFT_F64, WEFT_DEVICE_CPU, 0, 5, true);
        double want[6];
        for (int i = 0; i < 6; i++) want[i] = 2 * xv[i];
        CHECK(r && weft_tensor_requires_grad(r) && !strcmp(weft_tensor_grad_fn_name(r), "pp_recv"));
        wt_check_values("received", r, want, 6, 0);
        weft_tensor *rr = weft_mul(r, r), *z = weft_sum(rr, 0, NULL, false);
        CHECK(weft_backward(z, NULL, NULL) == WEFT_OK);
        CHECK(weft_pp_wait_sends(c) == WEFT_OK);
        weft_tensor *p2 = weft_pp_recv(c, WEFT_DIMS(2), WEFT_F64, WEFT_DEVICE_CPU, 0, 6, false);
        CHECK(p2 && !weft_tensor_requires_grad(p2));
        weft_tensor_free(p2);
        weft_tensor_free(r);
        weft_tensor_free(rr);
        weft_tensor_free(z);
    }
    // errors, not crashes
    CHECK(weft_pp_send(c, NULL, 0, 1) == NULL);
    weft_tensor *one = weft_tensor_ones(WEFT_DIMS(2), WEFT_F64);
    CHECK(weft_pp_send(c, one, size, 1) == NULL && wt_error_has("dst"));
    CHECK(weft_pp_recv(c, WEFT_DIMS(2), WEFT_F64, WEFT_DEVICE_CPU, rank, 99, false) == NULL &&
          wt_error_has("no message from this rank itself"));
    CHECK(weft_pp_recv(c, WEFT_DIMS(2), WEFT_F64, WEFT_DEVICE_CPU, 0, -1, false) == NULL && wt_error_has("tag"));
    CHECK(weft_pp_recv(c, WEFT_DIMS(2), WEFT_I64, WEFT_DEVICE_CPU, 0, 1, true) == NULL && wt_error_has("i64"));
    if (size > 1 && rank == 1) { // a message that never comes: an error after the timeout, not a hang
        weft_comm_set_timeout(c, 0.5);
        CHECK(weft_pp_recv(c, WEFT_DIMS(2), WEFT_F64, WEFT_DEVICE_CPU, 0, 98, false) == NULL &&
              wt_error_has("no message from rank 0"));
        weft_comm_set_timeout(c, 60);
    }
    weft_tensor_free(one);
    CHECK(weft_dist_barrier(c) == WEFT_OK);
}

static void test_partition(void) {
    int part[6];
    CHECK(weft_pp_partition(5, (double[]){1, 1, 8, 1, 1}, 3, part) == WEFT_OK);
    CHECK(part[0] == 0 && part[1] == 0 && part[2] == 1 && part[3] == 2 && part[4] == 2);
    CHECK(weft_pp_partition(6, (double[]){5, 1, 1, 1, 1, 1}, 2, part) == WEFT_OK);
    CHECK(part[0] == 0 && part[1] == 1 && part[5] == 1);
    CHECK(weft_pp_partition(4, (double[]){1, 1, 1, 1}, 4, part) == WEFT_OK);
    CHECK(part[0] == 0 && part[1] == 1 && part[2] == 2 && part[3] == 3);
    CHECK(weft_pp_partition(3, (double[]){1, 1, 1}, 4, part) == WEFT_ERR_ARG && wt_error_has("4 non-empty stages"));
    // the theory's numbers
    CHECK_NEAR(weft_pp_bubble_theory(WEFT_PP_GPIPE, 4, 8, 1), 3.0 / 11, 1e-15);
    CHECK_NEAR(weft_pp_bubble_theory(WEFT_PP_1F1B, 4, 16, 1), 3.0 / 19, 1e-15);
    CHECK_NEAR(weft_pp_bubble_theory(WEFT_PP_INTERLEAVED, 4, 8, 2), 3.0 / 19, 1e-15);
}

// Forward only (weft_pp_forward, evaluation): every schedule's micro-batches,
// 8 rows in 3 uneven micro-batches (3, 3, 2), give the one-process forward's
// loss x rows and row count on every rank, and leave no gradient behind.
static double acc_ce(weft_tensor *out, weft_tensor *tgt, double *acc) {
    weft_tensor *l = weft_cross_entropy(out, tgt);
    double n = (double)weft_tensor_size(tgt, 0), v = l ? weft_tensor_item(l) : NAN;
    acc[0] += v * n;
    acc[1] += n;
    weft_tensor_free(l);
    return v;
}
static weft_status eval_fn(weft_tensor *out, weft_tensor *tgt, void *user, double *acc) {
    (void)user;
    return isnan(acc_ce(out, tgt, acc)) ? weft_last_status() : WEFT_OK;
}

static void test_forward_only(void) {
    weft_tensor *x, *y;
    batch(0, &x, &y);
    weft_module *whole = mlp();
    double ref[2] = {0, 0};
    WEFT_NO_GRAD {
        weft_tensor *out = weft_module_forward(whole, x);
        acc_ce(out, y, ref);
        weft_tensor_free(out);
    }
    weft_pp_schedule ss[] = {WEFT_PP_GPIPE, WEFT_PP_1F1B, WEFT_PP_INTERLEAVED};
    for (int k = 0; k < 3; k++) {
        bool il = ss[k] == WEFT_PP_INTERLEAVED; // V = 2 (2 P chunks of 9 layers), M a multiple of P
        weft_module *net = mlp();
        weft_pp_opts o = {.schedule = ss[k], .microbatches = il ? size * 3 : 3, .virtual_stages = il ? 2 : 0};
        if (il && size * 3 > BATCH) o.microbatches = size; // 4 ranks: 4 micro-batches of 2 rows
        weft_pp *p = weft_pp_create(weft_comm_world(), net, &o);
        CHECK(p != NULL);
        double acc[2] = {0, 0};
        weft_status st = p ? weft_pp_forward(p, x, y, eval_fn, NULL, 2, acc) : WEFT_ERR_STATE;
        CHECK(st == WEFT_OK);
        CHECK_NEAR(acc[1], BATCH, 0);
        CHECK_NEAR(acc[0], ref[0], 1e-12 * fabs(ref[0]));
        for (int i = 0; i < weft_module_param_count(net); i++) CHECK(!weft_tensor_grad(weft_module_param_at(net, i, NULL, 0)));
        weft_pp_free(p);
        weft_module_free(net);
    }
    weft_module_free(whole);
    weft_tensor_free(x);
    weft_tensor_free(y);
}

static void test_bad_settings(void) {
    weft_comm *w = weft_comm_world();
    weft_module *m = mlp();
    // more chunks than layers
    CHECK(weft_pp_create(w, m, &(weft_pp_opts){.schedule = WEFT_PP_INTERLEAVED, .microbatches = size * 2,
                                                .virtual_stages = 10}) == NULL &&
          wt_error_has("virtual_stages = 10") && wt_error_has("9 layers"));
    weft_module *one = weft_nn_sequential();
    weft_nn_sequential_append(one, lin64(IN, OUT, NULL));
    if (size > 1) CHECK(weft_pp_create(w, one, NULL) == NULL && wt_error_has("stages exceed the 1 layers"));
    CHECK(weft_pp_create(w, weft_module_child_at(m, 0), NULL) == NULL && wt_error_has("sequential"));
    CHECK(weft_pp_create(w, m, &(weft_pp_opts){.microbatches = -1}) == NULL && wt_error_has("microbatches = -1"));
    CHECK(weft_pp_create(w, m, &(weft_pp_opts){.virtual_stages = 2}) == NULL && wt_error_has("interleaved"));
    if (size > 1)
        CHECK(weft_pp_create(w, m, &(weft_pp_opts){.schedule = WEFT_PP_INTERLEAVED, .microbatches = size + 1}) ==
                  NULL && wt_error_has("multiple of pp"));
    int bad_order[9] = {0, 1, 0, 1, 1, 1, 1, 1, 1};
    CHECK(weft_pp_create(NULL, m, &(weft_pp_opts){.stage_of = bad_order}) == NULL && wt_error_has("stage_of[1]"));
    // micro-batches not dividing the batch: every rank fails, with no message in flight
    weft_pp *p = weft_pp_create(w, m, &(weft_pp_opts){.schedule = WEFT_PP_1F1B, .microbatches = 3});
    CHECK(p != NULL);
    weft_tensor *x, *y;
    batch(0, &x, &y);
    CHECK(weft_pp_step(p, x, y, ce, NULL, NULL) == WEFT_ERR_ARG && wt_error_has("microbatches = 3"));
    // no targets on the last stage: every rank fails
    CHECK(weft_pp_step(p, x, NULL, ce, NULL, NULL) == WEFT_ERR_ARG && wt_error_has("no targets"));
    weft_pp_free(p);
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_module_free(one);
    weft_module_free(m);
}

int main(int argc, char **argv) {
    if (weft_dist_init(&argc, &argv) != WEFT_OK) {
        fprintf(stderr, "dist init: %s\n", weft_last_error());
        return 1;
    }
    size = weft_comm_size(weft_comm_world());
    rank = weft_comm_rank(weft_comm_world());
    weft_comm_set_timeout(weft_comm_world(), 60); // a broken schedule must fail, not hang the suite
    g_full = reference_full();
    RUN(test_p2p);
    RUN(test_partition);
    RUN(test_schedules);
    RUN(test_splits);
    RUN(test_with_dp);
    RUN(test_forward_only);
    RUN(test_bad_settings);
    weft_module_free(g_full.net);
    int rc = wt_summary();
    weft_dist_finalize();
    return rc;
}
