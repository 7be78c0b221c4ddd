// mpirun: 1 2 4
// Pipeline parallelism on a small GPT (f32): token embedding, a learned
// position embedding, 4 pre-LN transformer blocks (d = 64, 4 heads), a final
// layer norm and the vocabulary head (the blocks in a nested sequential, as
// weft_model_build stacks them: 8 layers for the pipeline), trained
// 5 steps with SGD through weft_pp_step. As in test_pp.c, compared with
//   (a) the whole batch in one process (every rank computes it from the same
//       seed): losses within 2e-6 and parameters within 2e-6 relative (f32;
//       the micro-batches regroup the batch sums), and
//   (b) GPipe with the same micro-batches in this one process (no
//       communicator, no recomputation): bit for bit.
// 1 process: 1F1B and interleaved (V = 2, chunks talking through the
// mailbox); 2: GPipe, 1F1B, interleaved V = 2 and 1F1B with recomputation;
// 4: GPipe, 1F1B and interleaved V = 2 (8 chunks, one layer each).
#include <math.h>
#include <stdlib.h>

#include "weft_test.h"

#include <weft/parallel.h>

static int size, rank;

enum { VOCAB = 32, D = 64, HEADS = 4, BLOCKS = 4, T = 8, BATCH = 8, STEPS = 5 };

static weft_tensor *pos_forward(weft_module *m, weft_tensor *x) { return weft_add(x, weft_module_get(m, "weight")); }

static weft_module *gpt(void) {
    weft_generator *g = weft_generator_create(11);
    weft_module *s = weft_nn_sequential();
    weft_nn_sequential_append(s, weft_nn_embedding(VOCAB, D, g));
    weft_module *pos = weft_module_new("position", pos_forward, NULL, NULL);
    weft_tensor *pw = weft_tensor_empty(WEFT_DIMS(T, D), WEFT_F32);
    weft_init_normal(pw, 0, 0.1, g);
    weft_module_add_param(pos, "weight", pw);
    weft_nn_sequential_append(s, pos);
    weft_module *blocks = weft_nn_sequential(); // nested, as weft_model_build stacks them: one layer per block
    for (int i = 0; i < BLOCKS; i++) weft_nn_sequential_append(blocks, weft_nn_transformer_block(D, HEADS, g));
    weft_nn_sequential_append(s, blocks);
    weft_nn_sequential_append(s, weft_nn_layer_norm(D, 1e-5));
    weft_nn_sequential_append(s, weft_nn_linear(D, VOCAB, true, g));
    weft_generator_free(g);
    return s;
}

// Mean cross-entropy over every position: logits (B,T,V), targets (B,T).
static weft_tensor *lm_loss(weft_tensor *out, weft_tensor *tgt, void *user) {
    (void)user;
    weft_tensor *x = weft_reshape(out, WEFT_DIMS(-1, VOCAB)), *y = weft_reshape(tgt, WEFT_DIMS(-1));
    weft_tensor *l = weft_cross_entropy(x, y);
    weft_tensor_free(x);
    weft_tensor_free(y);
    return l;
}

// Next-token data from a fixed random sequence.
static void batch(int step, weft_tensor **x, weft_tensor **y) {
    weft_generator *g = weft_generator_create(500 + (uint64_t)step);
    weft_tensor *seq = weft_tensor_randint(WEFT_DIMS(BATCH, T + 1), 0, VOCAB, WEFT_I64, g);
    weft_tensor *a = weft_narrow(seq, 1, 0, T), *b = weft_narrow(seq, 1, 1, T);
    *x = weft_tensor_contiguous(a);
    *y = weft_tensor_contiguous(b);
    weft_tensor_free(a);
    weft_tensor_free(b);
    weft_tensor_free(seq);
    weft_generator_free(g);
}

typedef struct {
    double loss[STEPS];
    weft_module *net;
} run;

static weft_optim *sgd(int n, weft_tensor **ps) {
    weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_SGD);
    o.lr = 0.1;
    return n ? weft_optim_create(&o, n, ps, NULL) : NULL;
}

// p NULL: the whole model on the whole batch; else through the pipeline.
static run train(weft_comm *c, const weft_pp_opts *o, weft_pp **keep) {
    run r = {.net = gpt()};
    weft_pp *p = o ? weft_pp_create(c, r.net, o) : NULL;
    CHECK(!o || p);
    weft_tensor *ps[128];
    int n = p ? weft_pp_params(p, ps) : weft_module_param_count(r.net);
    for (int i = 0; !p && i < n; i++) ps[i] = weft_module_param_at(r.net, i, NULL, 0);
    weft_optim *opt = sgd(n, ps);
    for (int s = 0; s < STEPS; s++) {
        weft_tensor *x, *y;
        batch(s, &x, &y);
        if (opt) weft_optim_zero_grad(opt);
        double l = NAN;
        if (p) {
            weft_status st = weft_pp_step(p, x, y, lm_loss, NULL, &l);
            CHECK(st == WEFT_OK);
            if (st) fprintf(stderr, "rank %d: %s\n", rank, weft_last_error());
        } else {
            weft_tensor *out = weft_module_forward(r.net, x), *lt = lm_loss(out, y, NULL);
            CHECK(lt && weft_backward(lt, NULL, NULL) == WEFT_OK);
            l = weft_tensor_item(lt);
            weft_tensor_free(out);
            weft_tensor_free(lt);
        }
        CHECK(!opt || weft_optim_step(opt) == WEFT_OK);
        r.loss[s] = l;
        weft_tensor_free(x);
        weft_tensor_free(y);
    }
    weft_optim_free(opt);
    if (keep) *keep = p;
    else weft_pp_free(p);
    return r;
}

// Layer i of the model: the children, the nested blocks counted one by one.
static weft_module *layer(weft_module *net, int i) {
    if (i < 2) return weft_module_child_at(net, i);
    if (i < 2 + BLOCKS) return weft_module_child_at(weft_module_child_at(net, 2), i - 2);
    return weft_module_child_at(net, i - BLOCKS + 1);
}

// max |a - b| / max |b| over layer i's parameters.
static double rel_diff(weft_module *a, weft_module *b, int i) {
    weft_module *ca = layer(a, i), *cb = layer(b, i);
    double num = 0, den = 0;
    for (int j = 0; j < weft_module_param_count(ca); j++) {
        weft_tensor *ta = weft_module_param_at(ca, j, NULL, 0), *tb = weft_module_param_at(cb, j, NULL, 0);
        int64_t n = weft_tensor_numel(ta);
        double *va = malloc(sizeof(double) * (size_t)n), *vb = malloc(sizeof(double) * (size_t)n);
        weft_tensor_to_f64(ta, va, n);
        weft_tensor_to_f64(tb, vb, n);
        for (int64_t k = 0; k < n; k++) num = fmax(num, fabs(va[k] - vb[k])), den = fmax(den, fabs(vb[k]));
        free(va);
        free(vb);
    }
    return den > 0 ? num / den : num;
}

static run g_full;

static void check_config(const char *what, const weft_pp_opts *o) {
    weft_pp *p = NULL;
    // (b): one process, GPipe, no recomputation, the same micro-batches
    run got = train(weft_comm_world(), o, &p),
        local = train(NULL, &(weft_pp_opts){.schedule = WEFT_PP_GPIPE, .microbatches = o->microbatches}, NULL);
    int bad = 0;
    for (int s = 0; p && s < STEPS; s++) {
        double e = fabs(got.loss[s] - g_full.loss[s]) / fabs(g_full.loss[s]);
        if (!(e <= 2e-6)) bad++, fprintf(stderr, "%s: step %d loss %.9g, full batch %.9g\n", what, s, got.loss[s],
                                         g_full.loss[s]);
        if (got.loss[s] != local.loss[s])
            bad++, fprintf(stderr, "%s: step %d loss %.9g, one process %.9g\n", what, s, got.loss[s], local.loss[s]);
    }
    CHECK(!p || weft_pp_num_layers(p) == 4 + BLOCKS);
    for (int i = 0; p && i < weft_pp_num_layers(p); i++) {
        CHECK(weft_pp_layer(p, i) == layer(got.net, i));
        if (!weft_pp_holds(p, i)) continue;
        double e = rel_diff(got.net, g_full.net, i), e1 = rel_diff(got.net, local.net, i);
        if (!(e <= 2e-6)) bad++, fprintf(stderr, "%s: rank %d layer %d: %.3g from the full batch\n", what, rank, i, e);
        if (e1 != 0) bad++, fprintf(stderr, "%s: rank %d layer %d: %.3g from one process\n", what, rank, i, e1);
    }
    CHECK(bad == 0);
    weft_pp_free(p);
    weft_module_free(got.net);
    weft_module_free(local.net);
}

static void test_gpt(void) {
    // the training moves the parameters well past the tolerance (else the
    // comparison would prove nothing)
    weft_module *init = gpt();
    double moved = 0;
    for (int i = 0; i < 4 + BLOCKS; i++) moved = fmax(moved, rel_diff(g_full.net, init, i));
    CHECK(moved > 1e-3);
    weft_module_free(init);
    if (size <= 2) check_config("1f1b", &(weft_pp_opts){.schedule = WEFT_PP_1F1B, .microbatches = 4});
    check_config("interleaved v=2",
                 &(weft_pp_opts){.schedule = WEFT_PP_INTERLEAVED, .microbatches = 4, .virtual_stages = 2});
    if (size == 1) return;
    check_config("gpipe", &(weft_pp_opts){.schedule = WEFT_PP_GPIPE, .microbatches = 4});
    if (size == 4) check_config("1f1b", &(weft_pp_opts){.schedule = WEFT_PP_1F1B, .microbatches = 8});
    if (size == 2)
        check_config("1f1b recompute", &(weft_pp_opts){.schedule = WEFT_PP_1F1B, .microbatches = 4, .recompute = true});
}

int main(int argc, char **argv) {
    if (weft_dist_init(&argc, &argv) != WEFT_OK) {
        fprintf(stderr, "dist init: %s\n", weft_last_error());
        return 1;
    }
    size = weft_comm_size(weft_comm_world());
    rank = weft_comm_rank(weft_comm_world());
    weft_comm_set_timeout(weft_comm_world(), 60); // a broken schedule must fail, not hang the suite
    g_full = train(NULL, NULL, NULL);
    RUN(test_gpt);
    weft_module_free(g_full.net);
    int rc = wt_summary();
    weft_dist_finalize();
    return rc;
}
