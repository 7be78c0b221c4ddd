// mpirun: 2 4
// The standard models through the pipeline, the way `weft train --pp`
// composes it: models/fmnist-mlp.cfg and models/kjv-gpt.cfg (context cut to
// 32 tokens) built by weft_model_build, the loss by weft_model_loss, an
// optimiser over weft_pp_params (SGD, see below), PP = all ranks
// with 1F1B and 4 micro-batches, 4 steps on synthetic batches. Losses and
// every parameter of this rank's layers must match the whole batch through
// the whole model in one process within 1e-5 relative (f32; the
// micro-batches regroup the batch sums).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

#include <weft/parallel.h>

static int size, rank;

enum { STEPS = 4 };

static weft_model_cfg *load(const char *name, const char *from, const char *to) {
    char path[1200], *text = NULL;
    snprintf(path, sizeof path, "%s%s", wt_models_dir(), name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = calloc((size_t)n + 64, 1);
    if (fread(text, 1, (size_t)n, f) != (size_t)n) n = 0;
    fclose(f);
    char *at = from ? strstr(text, from) : NULL;
    if (at) { // same length or shorter: overwrite in place, pad with spaces
        memset(at, ' ', strlen(from));
        memcpy(at, to, strlen(to));
    }
    weft_model_cfg *c = weft_model_cfg_parse(text, strlen(text), path);
    free(text);
    return c;
}

static weft_tensor *model_loss(weft_tensor *out, weft_tensor *tgt, void *user) {
    return weft_model_loss(user, out, tgt);
}

// SGD with momentum, not the files' Adam: Adam's nearly sign-like update
// turns the f32 regrouping noise of near-zero gradients into whole steps,
// which would hide a real difference behind a loose tolerance.
static weft_optim *optim(int np, weft_tensor **ps) {
    weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_SGD);
    o.lr = 0.05;
    o.momentum = 0.9;
    return np ? weft_optim_create(&o, np, ps, NULL) : NULL;
}

static void batch(const weft_net_cfg *n, int step, weft_tensor **x, weft_tensor **y) {
    weft_generator *g = weft_generator_create(900 + (uint64_t)step);
    if (n->dataset == WEFT_CFG_KJV) {
        *x = weft_tensor_randint(WEFT_DIMS(n->batch, n->context), 0, 256, WEFT_I64, g);
        *y = weft_tensor_randint(WEFT_DIMS(n->batch, n->context), 0, 256, WEFT_I64, g);
    } else {
        *x = weft_tensor_randn(WEFT_DIMS(n->batch, 1, 28, 28), WEFT_F32, g);
        *y = weft_tensor_randint(WEFT_DIMS(n->batch), 0, 10, WEFT_I64, g);
    }
    weft_generator_free(g);
}

static weft_module *build(weft_model_cfg *cfg) {
    weft_generator *g = weft_generator_create(cfg->net.seed);
    weft_module *m = weft_model_build(cfg, g, g);
    weft_generator_free(g);
    return m;
}

static void check_model(const char *name, const char *from, const char *to) {
    weft_model_cfg *cfg = load(name, from, to);
    CHECK(cfg != NULL);
    if (!cfg) {
        fprintf(stderr, "%s: %s\n", name, weft_last_error());
        return;
    }
    CHECK(weft_model_cfg_set(cfg, "batch", "8") == WEFT_OK);
    const weft_net_cfg *n = &cfg->net;
    weft_module *ref = build(cfg), *net = build(cfg);
    weft_pp *p = weft_pp_create(weft_comm_world(), net, &(weft_pp_opts){.schedule = WEFT_PP_1F1B, .microbatches = 4});
    CHECK(p != NULL);
    if (!p) fprintf(stderr, "%s: %s\n", name, weft_last_error());
    weft_tensor *rp[256], *pp[256];
    int nr = weft_module_param_count(ref), np = p ? weft_pp_params(p, pp) : 0;
    for (int i = 0; i < nr; i++) rp[i] = weft_module_param_at(ref, i, NULL, 0);
    weft_optim *oref = optim(nr, rp), *opp = optim(np, pp);
    int bad = 0;
    for (int s = 0; s < STEPS && p; s++) {
        weft_tensor *x, *y;
        batch(n, s, &x, &y);
        weft_optim_zero_grad(oref);
        weft_tensor *out = weft_module_forward(ref, x), *l = weft_model_loss(cfg, out, y);
        CHECK(l && weft_backward(l, NULL, NULL) == WEFT_OK && weft_optim_step(oref) == WEFT_OK);
        if (opp) weft_optim_zero_grad(opp);
        double lp = NAN;
        CHECK(weft_pp_step(p, x, y, model_loss, cfg, &lp) == WEFT_OK);
        CHECK(!opp || weft_optim_step(opp) == WEFT_OK);
        double e = fabs(lp - weft_tensor_item(l)) / fabs(weft_tensor_item(l));
        if (!(e <= 1e-5)) bad++, fprintf(stderr, "%s step %d: loss %.9g, whole batch %.9g\n", name, s, lp,
                                         weft_tensor_item(l));
        weft_tensor_free(out);
        weft_tensor_free(l);
        weft_tensor_free(x);
        weft_tensor_free(y);
    }
    // this rank's layers against the same layers of the reference: both
    // models flatten the same way (a second pipeline object over ref, never stepped)
    weft_pp *pr = weft_pp_create(weft_comm_world(), ref, &(weft_pp_opts){.schedule = WEFT_PP_1F1B, .microbatches = 4});
    int held = 0;
    for (int i = 0; p && pr && i < weft_pp_num_layers(p); i++) {
        if (!weft_pp_holds(p, i)) continue;
        weft_module *a = weft_pp_layer(p, i), *b = weft_pp_layer(pr, i);
        for (int j = 0; j < weft_module_param_count(a); j++) {
            weft_tensor *ta = weft_module_param_at(a, j, NULL, 0), *tb = weft_module_param_at(b, j, NULL, 0);
            int64_t k = weft_tensor_numel(ta);
            double *va = malloc(sizeof(double) * (size_t)k), *vb = malloc(sizeof(double) * (size_t)k), num = 0, den = 0;
            weft_tensor_to_f64(ta, va, k);
            weft_tensor_to_f64(tb, vb, k);
            for (int64_t q = 0; q < k; q++) num = fmax(num, fabs(va[q] - vb[q])), den = fmax(den, fabs(vb[q]));
            if (!(num <= 1e-5 * den)) bad++, fprintf(stderr, "%s: rank %d layer %d param %d: %.3g\n", name, rank, i, j,
                                                     num / den);
            held++;
            free(va);
            free(vb);
        }
    }
    CHECK(held > 0 || rank != 0);
    CHECK(bad == 0);
    weft_optim_free(oref);
    weft_optim_free(opp);
    weft_pp_free(pr);
    weft_pp_free(p);
    weft_module_free(ref);
    weft_module_free(net);
    weft_model_cfg_free(cfg);
}

static void test_fmnist_mlp(void) { check_model("fmnist-mlp.cfg", NULL, NULL); }
static void test_kjv_gpt(void) { check_model("kjv-gpt.cfg", "context = 128", "context = 32"); }

int main(int argc, char **argv) {
    if (weft_dist_init(&argc, &argv) != WEFT_OK) {
        fprintf(stderr, "dist init: %s\n", weft_last_error());
        return 1;
    }
    size = weft_comm_size(weft_comm_world());
    rank = weft_comm_rank(weft_comm_world());
    weft_comm_set_timeout(weft_comm_world(), 60);
    RUN(test_fmnist_mlp);
    RUN(test_kjv_gpt);
    int rc = wt_summary();
    weft_dist_finalize();
    return rc;
}
