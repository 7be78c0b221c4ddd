// mpirun: 1 2 4
// Tensor-parallel training against one process. A model file's network is
// built twice from the same seed: whole by weft_model_build (the reference,
// as `weft train` makes it) and split over every rank by weft_tp_model_build.
// Both are trained in f64 on the same batches; every step's loss and, at the
// end, every parameter (each rank's shard against its slice of the whole)
// must agree within 1e-10 relative (the all-reduces regroup sums). Models: a
// byte-level GPT (learned positions, 2 blocks, d = 64, 4 heads, vocab 256:
// vocab-parallel embedding and cross-entropy) with AdamW, and an MLP like
// fmnist-mlp (column/row pairs) with SGD + momentum.
//
// Device tensors: the TP block on the accelerator of tests/mock_device.c
// against the same block on the CPU, forward and backward (the collectives
// then move device tensors); bit for bit on the mock.
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

#include <weft/parallel.h>

static int size, rank;
static weft_comm *tp;

static const char *gpt_cfg = "[net]\n"
                             "dataset = kjv\n"
                             "context = 16\n"
                             "batch = 4\n"
                             "optimizer = adamw\n"
                             "lr = 3e-3\n"
                             "weight_decay = 0.01\n"
                             "loss = cross_entropy\n"
                             "seed = 1\n"
                             "[embedding]\n"
                             "vocab = 256\n"
                             "dim = 64\n"
                             "position = learned\n"
                             "[transformer]\n"
                             "heads = 4\n"
                             "blocks = 2\n"
                             "[layernorm]\n"
                             "[linear]\n"
                             "out = vocab\n";

static const char *mlp_cfg = "[net]\n"
                             "dataset = fmnist\n"
                             "input = 1,28,28\n"
                             "batch = 8\n"
                             "optimizer = sgd\n"
                             "lr = 0.1\n"
                             "momentum = 0.9\n"
                             "loss = cross_entropy\n"
                             "seed = 1\n"
                             "[flatten]\n"
                             "[linear]\n"
                             "out = 32\n"
                             "[relu]\n"
                             "[linear]\n"
                             "out = 16\n"
                             "[gelu]\n"
                             "[linear]\n"
                             "out = 10\n";

static weft_tensor *param_shard(const weft_module *tpm, int i, weft_tensor *whole) {
    int dim = -1, groups = 1;
    CHECK(weft_tp_param_split(tpm, i, &dim, &groups) == WEFT_OK);
    return dim < 0 ? weft_tensor_ref(whole) : weft_tp_shard(tp, whole, dim, groups);
}

static weft_optim *make_optim(const weft_model_cfg *cfg, weft_module *m) {
    weft_optim_opts o = weft_optim_defaults(cfg->net.optimizer == WEFT_CFG_ADAMW ? WEFT_OPTIM_ADAMW : WEFT_OPTIM_SGD);
    o.lr = cfg->net.lr;
    if (cfg->net.optimizer == WEFT_CFG_ADAMW) o.weight_decay = cfg->net.weight_decay;
    else o.momentum = cfg->net.momentum;
    int n = weft_module_param_count(m);
    weft_tensor **p = malloc(sizeof *p * (size_t)n);
    for (int i = 0; i < n; i++) p[i] = weft_module_param_at(m, i, NULL, 0);
    weft_optim *opt = weft_optim_create(&o, n, p, NULL);
    free(p);
    return opt;
}

// Batch `step`: (x, y), the same on every rank.
static void batch(const weft_model_cfg *cfg, int step, weft_tensor **x, weft_tensor **y) {
    int64_t B = cfg->net.batch;
    if (cfg->net.dataset == WEFT_CFG_KJV) {
        int64_t T = cfg->net.context;
        *x = weft_tensor_randint(WEFT_DIMS(B, T), 0, 256, WEFT_I64, NULL);
        *y = weft_tensor_randint(WEFT_DIMS(B, T), 0, 256, WEFT_I64, NULL);
    } else {
        *x = wt_rand64(WEFT_DIMS(B, 1, 28, 28), 0, 1, 100 + (uint64_t)step, false);
        *y = weft_tensor_randint(WEFT_DIMS(B), 0, 10, WEFT_I64, NULL);
    }
}

// f64 (ac WEFT_F32): the tensor-parallel model trains as the whole one to 1e-10, losses and parameters.
// Under bf16 autocast (ac WEFT_BF16, f32 parameters) the losses agree to bf16's precision: the
// row-parallel partial sums are rounded to bf16 before their f32 all-reduce where the whole layer rounds
// its sum once. (Not the parameters: the attention's key bias has a zero gradient in exact arithmetic,
// so AdamW moves it by about lr a step in whatever direction rounding noise points.)
static void train_compare_ac(const char *what, const char *text, int steps, bool seq, weft_dtype ac) {
    weft_model_cfg *cfg = weft_model_cfg_parse(text, strlen(text), what);
    CHECK(cfg != NULL);
    if (!cfg) return;
    weft_generator *g1 = weft_generator_create(cfg->net.seed), *g2 = weft_generator_create(cfg->net.seed);
        weft_tp_opts to = {.sequence_parallel = seq};
    weft_module *ref = weft_model_build(cfg, g1, NULL), *m = weft_tp_model_build(tp, cfg, g2, NULL, &to);
    CHECK(ref && m);
    if (!ref || !m) return;
    CHECK(weft_module_param_count(m) == weft_module_param_count(ref));
    // the split model holds about 1/T of the matrices
    if (size > 1) CHECK(weft_module_num_elements(m) < weft_module_num_elements(ref) * (size == 2 ? 0.6 : 0.4));
    if (ac == WEFT_F32) CHECK(weft_module_to_dtype(ref, WEFT_F64) == WEFT_OK && weft_module_to_dtype(m, WEFT_F64) == WEFT_OK);
    double tol = ac == WEFT_F32 ? 1e-10 : 2e-2;
    weft_optim *oref = make_optim(cfg, ref), *om = make_optim(cfg, m);
    CHECK(oref && om);
    weft_manual_seed(77);
    for (int s = 0; s < steps && oref && om; s++) {
        weft_tensor *x, *y;
        batch(cfg, s, &x, &y);
        weft_autocast_set(ac);
        weft_tensor *lr_ = weft_module_forward(ref, x), *l = weft_module_forward(m, x);
        weft_tensor *lossr = weft_model_loss(cfg, lr_, y), *loss = weft_tp_model_loss(tp, cfg, l, y);
        weft_autocast_set(WEFT_F32);
        CHECK(lossr && loss);
        CHECK(weft_backward(lossr, NULL, NULL) == WEFT_OK && weft_backward(loss, NULL, NULL) == WEFT_OK);
        CHECK(weft_optim_step(oref) == WEFT_OK && weft_optim_step(om) == WEFT_OK);
        weft_optim_zero_grad(oref);
        weft_optim_zero_grad(om);
        double a = weft_tensor_item(loss), b = weft_tensor_item(lossr);
        if (rank == 0 && s == steps - 1)
            printf("%s tp=%d step %d loss %.15g (one process %.15g)\n", what, size, s, a, b);
        CHECK_NEAR(a, b, tol);
        weft_tensor *t[] = {x, y, lr_, l, lossr, loss};
        for (int i = 0; i < 6; i++) weft_tensor_free(t[i]);
    }
    for (int i = 0; ac == WEFT_F32 && i < weft_module_param_count(ref); i++) {
        char name[128], msg[200];
        weft_tensor *r = weft_module_param_at(ref, i, name, sizeof name), *p = weft_module_param_at(m, i, NULL, 0);
        weft_tensor *rs = param_shard(m, i, r);
        snprintf(msg, sizeof msg, "%s trained %s", what, name);
        wt_check_same(msg, p, rs, tol);
        weft_tensor_free(rs);
        // and gathered whole
        weft_tensor *w = weft_tp_param_gather(tp, m, i);
        wt_check_same(msg, w, r, tol);
        weft_tensor_free(w);
    }
    weft_optim_free(oref);
    weft_optim_free(om);
    weft_module_free(ref);
    weft_module_free(m);
    weft_generator_free(g1);
    weft_generator_free(g2);
    weft_model_cfg_free(cfg);
}

static void train_compare(const char *what, const char *text, int steps, bool seq) {
    train_compare_ac(what, text, steps, seq, WEFT_F32);
}
static void test_gpt(void) { train_compare("gpt", gpt_cfg, 6, false); }
static void test_gpt_bf16(void) { train_compare_ac("gpt bf16", gpt_cfg, 4, false, WEFT_BF16); }
static void test_mlp(void) { train_compare("mlp", mlp_cfg, 5, false); }
// GELU's tanh form ([transformer] gelu = tanh, [gelu] approximate = tanh): the split blocks' mlp takes the whole
// one's form, so the two still train alike (with the exact form on either side they would not).
static char *with_line(const char *cfg, const char *after, const char *line) {
    const char *at = strstr(cfg, after);
    size_t head = (size_t)(at - cfg) + strlen(after), n = strlen(cfg) + strlen(line) + 1;
    char *t = malloc(n);
    snprintf(t, n, "%.*s%s%s", (int)head, cfg, line, cfg + head);
    return t;
}
static void test_gelu_tanh(void) {
    char *g = with_line(gpt_cfg, "blocks = 2\n", "gelu = tanh\n"), *m = with_line(mlp_cfg, "[gelu]\n", "approximate = tanh\n");
    train_compare("gpt gelu tanh", g, 4, false);
    train_compare("mlp gelu tanh", m, 3, false);
    free(g);
    free(m);
}
// sequence parallel: the same GPT with its tokens split between the split layers
static void test_gpt_seq(void) { train_compare("gpt-seq", gpt_cfg, 6, true); }

// Settings the group cannot split are errors naming them, before anything trains.
static void test_bad_model(void) {
    if (size == 1) return;
    char text[1024];
    snprintf(text, sizeof text, "%s", gpt_cfg);
    char *h = strstr(text, "heads = 4");
    h[8] = '3';
    char *d = strstr(text, "dim = 64");
    memcpy(d, "dim = 48", 8); // 48 = 3 heads of 16
    weft_model_cfg *cfg = weft_model_cfg_parse(text, strlen(text), "bad");
    CHECK(cfg != NULL);
    weft_generator *g = weft_generator_create(1);
    CHECK(weft_tp_model_build(tp, cfg, g, NULL, NULL) == NULL && wt_error_has("n_heads = 3") &&
          wt_error_has("[transformer]"));
    weft_model_cfg_free(cfg);
    // sequence parallelism is for token models
    cfg = weft_model_cfg_parse(mlp_cfg, strlen(mlp_cfg), "mlp");
    CHECK(weft_tp_model_build(tp, cfg, g, NULL, &(weft_tp_opts){.sequence_parallel = true}) == NULL &&
          wt_error_has("sequence parallel") && wt_error_has("[flatten]"));
    weft_model_cfg_free(cfg);
    // and needs the tokens divisible by the group
    cfg = weft_model_cfg_parse(gpt_cfg, strlen(gpt_cfg), "gpt");
    weft_module *m = weft_tp_model_build(tp, cfg, g, NULL, &(weft_tp_opts){.sequence_parallel = true});
    CHECK(m != NULL);
    int64_t ids[5] = {1, 2, 3, 4, 5};
    weft_tensor *x = weft_tensor_from_data(ids, WEFT_DIMS(1, 5), WEFT_I64), *y = weft_module_forward(m, x);
    CHECK(y == NULL && wt_error_has("not divisible by the tensor-parallel size"));
    weft_tensor_free(x);
    weft_module_free(m);
    weft_model_cfg_free(cfg);
    weft_generator_free(g);
}

// ---- device tensors ----
static void test_device_block(void) {
    weft_device dev;
    bool mock = false;
    if (!wt_accelerator(&dev, &mock)) {
        fprintf(stderr, "no accelerator: %s\n", weft_last_error());
        CHECK(0);
        return;
    }
    enum { C = 16, NH = 4 };
    // the fused attention on both (the default on every device)
    setenv("WEFT_FUSED_ATTENTION", "1", 1);
    weft_tensor *grads[2][32] = {{NULL}}, *outs[2] = {NULL};
    int np = 0;
    weft_module *ms[2] = {NULL};
    for (int d = 0; d < 2; d++) {
        weft_device prev = weft_device_get_default();
        if (d) weft_device_set_default(dev); // parameters made on the device
        weft_generator *g = weft_generator_create(9);
        ms[d] = weft_tp_transformer_block(tp, C, NH, g);
        weft_generator_free(g);
        weft_device_set_default(prev);
        CHECK(ms[d] != NULL);
        if (!ms[d]) return;
        weft_device pd = weft_tensor_device(weft_module_param_at(ms[d], 0, NULL, 0));
        CHECK(weft_device_equal(pd, d ? dev : WEFT_DEVICE_CPU));
        weft_manual_seed(5); // the same input on both passes
        weft_tensor *xh = weft_tensor_randn(WEFT_DIMS(2, 5, C), WEFT_F32, NULL);
        weft_tensor *x = d ? weft_tensor_to(xh, dev) : weft_tensor_ref(xh);
        weft_tensor *y = weft_module_forward(ms[d], x), *s = weft_sum(y, 0, NULL, false);
        CHECK(s && weft_backward(s, NULL, NULL) == WEFT_OK);
        outs[d] = y ? weft_tensor_to(y, WEFT_DEVICE_CPU) : NULL;
        np = weft_module_param_count(ms[d]);
        for (int i = 0; i < np && i < 32; i++) {
            weft_tensor *gi = weft_tensor_grad(weft_module_param_at(ms[d], i, NULL, 0));
            grads[d][i] = gi ? weft_tensor_to(gi, WEFT_DEVICE_CPU) : NULL;
        }
        weft_tensor *t[] = {xh, x, y, s};
        for (int i = 0; i < 4; i++) weft_tensor_free(t[i]);
    }
    unsetenv("WEFT_FUSED_ATTENTION");
    double tol = mock ? 0 : 1e-4;
    wt_check_same("device block output", outs[1], outs[0], tol);
    for (int i = 0; i < np && i < 32; i++) {
        char msg[64];
        snprintf(msg, sizeof msg, "device block grad %d", i);
        CHECK(grads[0][i] && grads[1][i]);
        if (grads[0][i] && grads[1][i]) wt_check_same(msg, grads[1][i], grads[0][i], tol);
        weft_tensor_free(grads[0][i]);
        weft_tensor_free(grads[1][i]);
    }
    weft_tensor_free(outs[0]);
    weft_tensor_free(outs[1]);
    weft_module_free(ms[0]);
    weft_module_free(ms[1]);
}

// The vocab-parallel embedding and cross-entropy on the device: a tiny LM
// (embedding -> column head with split logits -> vocab CE) against the CPU.
static void test_device_vocab(void) {
    weft_device dev;
    bool mock = false;
    if (!wt_accelerator(&dev, &mock)) {
        CHECK(0);
        return;
    }
    enum { V = 16, D = 8, N = 10 };
    int64_t ids[N] = {0, 15, 3, 7, 8, 12, 4, 4, 11, 1}, tg[N] = {5, 0, 15, 8, 7, 2, 12, 3, 9, 14};
    double loss[2] = {0, 0};
    weft_tensor *gw[2][2] = {{NULL}};
    for (int d = 0; d < 2; d++) {
        weft_device prev = weft_device_get_default();
        if (d) weft_device_set_default(dev);
        weft_generator *g = weft_generator_create(4);
        weft_module *emb = weft_tp_vocab_embedding(tp, V, D, g);
        weft_module *head = weft_tp_column_linear(tp, D, V, true, false, g);
        weft_generator_free(g);
        weft_device_set_default(prev);
        CHECK(emb && head);
        if (!emb || !head) return;
        weft_device on = d ? dev : WEFT_DEVICE_CPU;
        weft_tensor *ih = weft_tensor_from_data(ids, WEFT_DIMS(N), WEFT_I64);
        weft_tensor *th = weft_tensor_from_data(tg, WEFT_DIMS(N), WEFT_I64);
        weft_tensor *i = weft_tensor_to(ih, on), *t = weft_tensor_to(th, on);
        weft_tensor *e = weft_module_forward(emb, i), *z = weft_module_forward(head, e); // z (N, V/T)
        weft_tensor *l = weft_tp_vocab_cross_entropy(tp, z, t);
        CHECK(l && weft_backward(l, NULL, NULL) == WEFT_OK);
        loss[d] = l ? weft_tensor_item(l) : NAN;
        gw[d][0] = weft_tensor_to(weft_tensor_grad(weft_module_get(emb, "weight")), WEFT_DEVICE_CPU);
        gw[d][1] = weft_tensor_to(weft_tensor_grad(weft_module_get(head, "weight")), WEFT_DEVICE_CPU);
        weft_tensor *tmp[] = {ih, th, i, t, e, z, l};
        for (int k = 0; k < 7; k++) weft_tensor_free(tmp[k]);
        weft_module_free(emb);
        weft_module_free(head);
    }
    double tol = mock ? 0 : 1e-5;
    CHECK_NEAR(loss[1], loss[0], tol);
    wt_check_same("device vocab embedding grad", gw[1][0], gw[0][0], tol);
    wt_check_same("device head grad", gw[1][1], gw[0][1], tol);
    for (int k = 0; k < 4; k++) weft_tensor_free(gw[k / 2][k % 2]);
}

// The sequence-parallel GPT (reduce-scatters, the fused column product) on the device against the CPU:
// one step's loss and every parameter gradient, f32.
static void test_device_gpt_seq(void) {
    weft_device dev;
    bool mock = false;
    if (!wt_accelerator(&dev, &mock)) {
        CHECK(0);
        return;
    }
    weft_model_cfg *cfg = weft_model_cfg_parse(gpt_cfg, strlen(gpt_cfg), "gpt");
    CHECK(cfg != NULL);
    if (!cfg) return;
    setenv("WEFT_FUSED_ATTENTION", "1", 1); // the default on every device
    weft_tensor *grads[2][64] = {{NULL}};
    double loss[2] = {0, 0};
    int np = 0;
    for (int d = 0; d < 2; d++) {
        weft_device on = d ? dev : WEFT_DEVICE_CPU, prev = weft_device_get_default();
        weft_device_set_default(on);
        weft_generator *g = weft_generator_create(2);
        weft_module *m = weft_tp_model_build(tp, cfg, g, NULL, &(weft_tp_opts){.sequence_parallel = true});
        weft_generator_free(g);
        weft_device_set_default(prev);
        CHECK(m != NULL);
        if (!m) break;
        weft_manual_seed(8);
        weft_tensor *xh, *yh;
        batch(cfg, 0, &xh, &yh);
        weft_tensor *x = weft_tensor_to(xh, on), *y = weft_tensor_to(yh, on);
        weft_tensor *lg = weft_module_forward(m, x), *l = weft_tp_model_loss(tp, cfg, lg, y);
        CHECK(l && weft_backward(l, NULL, NULL) == WEFT_OK);
        loss[d] = l ? weft_tensor_item(l) : NAN;
        np = weft_module_param_count(m);
        for (int i = 0; i < np && i < 64; i++) {
            weft_tensor *gi = weft_tensor_grad(weft_module_param_at(m, i, NULL, 0));
            grads[d][i] = gi ? weft_tensor_to(gi, WEFT_DEVICE_CPU) : NULL;
        }
        weft_tensor *t[] = {xh, yh, x, y, lg, l};
        for (int i = 0; i < 6; i++) weft_tensor_free(t[i]);
        weft_module_free(m);
    }
    unsetenv("WEFT_FUSED_ATTENTION");
    double tol = mock ? 0 : 1e-4;
    CHECK_NEAR(loss[1], loss[0], tol);
    for (int i = 0; i < np && i < 64; i++) {
        char msg[64];
        snprintf(msg, sizeof msg, "device seq gpt grad %d", i);
        CHECK(grads[0][i] && grads[1][i]);
        if (grads[0][i] && grads[1][i]) wt_check_same(msg, grads[1][i], grads[0][i], tol);
        weft_tensor_free(grads[0][i]);
        weft_tensor_free(grads[1][i]);
    }
    weft_model_cfg_free(cfg);
}

int main(int argc, char **argv) {
    if (weft_dist_init(&argc, &argv) != WEFT_OK) {
        fprintf(stderr, "dist init: %s\n", weft_last_error());
        return 1;
    }
    size = weft_comm_size(weft_comm_world());
    rank = weft_comm_rank(weft_comm_world());
    weft_comm_set_timeout(weft_comm_world(), 60);
    weft_parallel *p = weft_parallel_create(weft_comm_world(), size, 1);
    CHECK(p != NULL);
    if (!p) return 1;
    tp = p->tp_comm;
    weft_comm_set_timeout(tp, 60);
    RUN(test_gpt);
    RUN(test_gpt_bf16);
    RUN(test_mlp);
    RUN(test_gelu_tanh);
    RUN(test_gpt_seq);
    RUN(test_bad_model);
    RUN(test_device_block);
    RUN(test_device_vocab);
    RUN(test_device_gpt_seq);
    int rc = wt_summary();
    weft_parallel_free(p);
    weft_dist_finalize();
    return rc;
}
