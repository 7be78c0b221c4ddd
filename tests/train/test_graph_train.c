// `weft train --graph` against eager training: the same per-step losses (from
// metrics.csv with log_every = 1), test/val loss, and final checkpoint
// (parameters and optimiser state) to fp tolerance, for the shipped model
// files fmnist-mlp (Adam), fmnist-cnn (Adam), kjv-gpt (AdamW), kjv-lstm
// (AdamW) and logreg (SGD, here with momentum), all shrunk by overrides and
// run on small synthetic data (no installed data set needed). Also: clipping,
// a second batch shape (the short last batch of an epoch), resume, and every
// optimiser a model file can name (AdaGrad and RMSProp were refused before)
// bit-identical to eager on a model whose forward and backward are.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/capture_sim.h"
#include "weft_test.h"

static char g_dir[256], g_models[512], g_text[300];

static weft_model_cfg *load_model(const char *file) {
    char path[700];
    snprintf(path, sizeof path, "%s%s", g_models, file);
    weft_model_cfg *c = weft_model_cfg_load(path);
    if (!c) fprintf(stderr, "loading %s: %s\n", path, weft_last_error());
    return c;
}

// A shipped model file with the text `from` replaced by `to` (for keys that
// are not overrides, e.g. context, momentum, weight_decay).
static weft_model_cfg *load_model_edit(const char *file, const char *from, const char *to) {
    char path[700], *buf = malloc(1 << 16);
    snprintf(path, sizeof path, "%s%s", g_models, file);
    FILE *f = fopen(path, "r");
    size_t n = f && buf ? fread(buf, 1, (1 << 16) - 64, f) : 0;
    if (f) fclose(f);
    weft_model_cfg *c = NULL;
    char *at = n ? (buf[n] = 0, strstr(buf, from)) : NULL;
    if (at) {
        char tail[1 << 16];
        snprintf(tail, sizeof tail, "%s", at + strlen(from));
        snprintf(at, (size_t)((1 << 16) - (at - buf)), "%s%s", to, tail);
        c = weft_model_cfg_parse(buf, strlen(buf), file);
    }
    if (!c) fprintf(stderr, "loading %s with '%s' -> '%s': %s\n", path, from, to, weft_last_error());
    free(buf);
    return c;
}

// Overrides "key=value;key=value".
static bool set_all(weft_model_cfg *c, const char *kv) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", kv);
    for (char *save = NULL, *t = strtok_r(buf, ";", &save); t; t = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(t, '=');
        *eq = 0;
        if (weft_model_cfg_set(c, t, eq + 1) != WEFT_OK) {
            fprintf(stderr, "set %s: %s\n", t, weft_last_error());
            return false;
        }
    }
    return true;
}

// The train_loss column of metrics.csv (one row per step with log_every = 1).
static int read_losses(const char *logdir, double *loss, int max) {
    char p[1100], line[512];
    snprintf(p, sizeof p, "%.1000s/metrics.csv", logdir);
    FILE *f = fopen(p, "r");
    if (!f) return -1;
    int n = 0;
    if (!fgets(line, sizeof line, f)) n = -1; // header
    while (n >= 0 && n < max && fgets(line, sizeof line, f)) {
        double step, epoch, l;
        if (sscanf(line, "%lf,%lf,%lf", &step, &epoch, &l) == 3 && !isnan(l)) loss[n++] = l;
    }
    fclose(f);
    return n;
}

static bool close_to(double a, double b, double rtol, double atol) { return fabs(a - b) <= atol + rtol * fmax(fabs(a), fabs(b)); }

// Every tensor of two checkpoints agrees to tolerance; returns the largest difference seen.
// Elements beyond (rtol, atol) are counted in *n_bad (of *n_all); every element must be within `bound`.
static bool ckpt_close(const char *a, const char *b, double rtol, double atol, double bound, double *maxdiff,
                       int *count, int64_t *n_bad, int64_t *n_all) {
    *n_bad = *n_all = 0;
    weft_safetensors *x = weft_safetensors_load(a), *y = weft_safetensors_load(b);
    bool ok = x && y && weft_safetensors_count(x) == weft_safetensors_count(y);
    *maxdiff = 0;
    *count = ok ? weft_safetensors_count(x) : 0;
    for (int i = 0; ok && i < weft_safetensors_count(x); i++) {
        const char *nm = weft_safetensors_name_at(x, i);
        weft_tensor *t = weft_safetensors_tensor_at(x, i), *u = weft_safetensors_find(y, nm);
        ok = u && weft_tensor_numel(t) == weft_tensor_numel(u) && weft_tensor_dtype(t) == weft_tensor_dtype(u);
        if (!ok) break;
        weft_tensor *t64 = weft_cast(t, WEFT_F64), *u64 = weft_cast(u, WEFT_F64);
        const double *p = weft_tensor_data(t64), *q = weft_tensor_data(u64);
        int64_t bad = 0;
        for (int64_t k = 0; k < weft_tensor_numel(t); k++) {
            *maxdiff = fmax(*maxdiff, fabs(p[k] - q[k]));
            if (!close_to(p[k], q[k], rtol, atol) && bad++ < 3)
                fprintf(stderr, "checkpoints differ at %s[%lld]: %.9g vs %.9g\n", nm, (long long)k, p[k], q[k]);
        }
        if (bad) fprintf(stderr, "  %s: %lld of %lld elements differ\n", nm, (long long)bad, (long long)weft_tensor_numel(t));
        *n_bad += bad;
        *n_all += weft_tensor_numel(t);
        weft_tensor_free(t64);
        weft_tensor_free(u64);
    }
    weft_safetensors_free(x);
    weft_safetensors_free(y);
    return ok && *maxdiff <= bound;
}

// Adam divides by sqrt(v) + eps: where a gradient is zero in exact arithmetic
// (the key bias of attention: softmax ignores a constant added to all
// scores; dead units) both modes compute rounding noise, whose Adam step is
// +-lr whatever its size, and the noise differs when BLAS sums in another
// order (another buffer alignment in the planned arena). So: every element
// within 2*lr*steps (a sign flip every step), and at most 1e-3 of all
// elements beyond 1e-4 relative / 1e-6 absolute. The per-step losses are the
// tight check.
static bool ckpts_agree(const char *a, const char *b, double lr, int steps, const char *tag) {
    double md;
    int nt;
    int64_t bad, all;
    bool ok = ckpt_close(a, b, 1e-4, 1e-6, 2 * lr * steps + 1e-6, &md, &nt, &bad, &all);
    fprintf(stderr, "  %s: %d checkpoint tensors, max abs diff %.2e, %lld of %lld elements beyond 1e-4 rel\n", tag, nt,
            md, (long long)bad, (long long)all);
    return ok && all > 0 && (double)bad <= 1e-3 * (double)all;
}

typedef struct run_out {
    weft_status st;
    weft_train_result r;
    double loss[64];
    int n_loss;
    char ckpt[512];
} run_out;

static run_out train_one(const weft_model_cfg *cfg, bool graph, const char *tag, bool resume) {
    run_out o = {0};
    char ck[400], logd[400];
    snprintf(ck, sizeof ck, "%s/ck_%s_%s", g_dir, tag, graph ? "graph" : "eager");
    snprintf(logd, sizeof logd, "%s/log_%s_%s", g_dir, tag, graph ? "graph" : "eager");
    weft_train_opts t = {.ckpt_dir = ck, .quiet = true, .data_dir = g_dir, .text_path = g_text, .eval_batches = 2,
                         .log_dir = logd, .graph = graph, .resume = resume};
    o.st = weft_train(cfg, &t, &o.r);
    if (o.st) fprintf(stderr, "%s (%s): %s\n", tag, graph ? "graph" : "eager", weft_last_error());
    o.n_loss = read_losses(logd, o.loss, 64);
    int64_t step;
    if (weft_ckpt_latest(ck, &step, o.ckpt, sizeof o.ckpt) != WEFT_OK) o.ckpt[0] = 0;
    return o;
}

// Eager and graph training of model file `file` with overrides agree step by step (and, with ckpt, in the
// trained parameters).
static void compare_cfg_ex(weft_model_cfg *cfg, const char *overrides, const char *tag, int steps, double rtol,
                           bool ckpt) {
    CHECK(cfg != NULL);
    if (!cfg) return;
    char kv[512];
    snprintf(kv, sizeof kv, "%s;steps=%d;log_every=1;ckpt_every=%d", overrides, steps, steps);
    CHECK(set_all(cfg, kv));
    run_out e = train_one(cfg, false, tag, false), g = train_one(cfg, true, tag, false);
    CHECK(e.st == WEFT_OK && g.st == WEFT_OK);
    CHECK(e.r.steps == steps && g.r.steps == steps);
    CHECK(e.n_loss >= steps && g.n_loss == e.n_loss); // a row per step, and one per evaluation
    double worst = 0;
    for (int i = 0; i < e.n_loss && i < g.n_loss; i++) {
        worst = fmax(worst, fabs(e.loss[i] - g.loss[i]) / fabs(e.loss[i]));
        CHECK(close_to(e.loss[i], g.loss[i], rtol, 0));
    }
    if (e.r.language_model) CHECK(close_to(e.r.val_loss, g.r.val_loss, rtol, 0));
    else {
        CHECK(close_to(e.r.test_loss, g.r.test_loss, rtol, 0));
        CHECK(fabs(e.r.test_acc - g.r.test_acc) <= 0.01);
    }
    CHECK(e.ckpt[0] && g.ckpt[0] && (!ckpt || ckpts_agree(e.ckpt, g.ckpt, cfg->net.lr, steps, tag)));
    fprintf(stderr, "  %s: %d steps, losses %.6f..%.6f, worst rel loss diff %.2e\n", tag, steps, e.loss[0],
            e.loss[steps > 0 ? steps - 1 : 0], worst);
    weft_model_cfg_free(cfg);
}

static void compare_cfg(weft_model_cfg *cfg, const char *overrides, const char *tag, int steps, double rtol) {
    compare_cfg_ex(cfg, overrides, tag, steps, rtol, true);
}

static void compare(const char *file, const char *overrides, const char *tag, int steps, double rtol) {
    compare_cfg(strncmp(file, "kjv", 3) ? load_model(file) : load_model_edit(file, "context = 128", "context = 16"),
                overrides, tag, steps, rtol);
}

static void test_fmnist_mlp(void) { compare("fmnist-mlp.cfg", "batch=32", "mlp", 5, 1e-5); }
static void test_fmnist_cnn(void) { compare("fmnist-cnn.cfg", "batch=8", "cnn", 4, 1e-5); }
static void test_kjv_gpt(void) { compare("kjv-gpt.cfg", "batch=4", "gpt", 4, 1e-5); }
static void test_kjv_lstm(void) { compare("kjv-lstm.cfg", "batch=4", "lstm", 4, 1e-5); }
static void test_kjv_gru(void) { compare("kjv-gru.cfg", "batch=4", "gru", 4, 1e-5); }
// [net] precision = bf16: the step graph traces the autocast region's casts and bf16 ops, and its symbolic
// backward differentiates through the bf16 values. The mlp's steps equal the eager ones. In the GPT the
// gradients reaching one bf16 value (the q/k/v products' shared input gets three) are summed in another
// order than eager autograd's, and bf16 sums depend on their order (with WEFT_GRAPH_BACKWARD=trace the two
// agree exactly), so there the losses agree to 1e-3; a gradient lost in graph mode cost 5% in 4 steps.
static void test_kjv_gpt_bf16(void) {
    compare_cfg_ex(load_model_edit("kjv-gpt.cfg", "context = 128", "context = 16\nprecision = bf16"), "batch=4",
                   "gpt-bf16", 4, 1e-3, false);
}
static void test_fmnist_mlp_bf16(void) {
    compare_cfg(load_model_edit("fmnist-mlp.cfg", "batch = 128", "batch = 128\nprecision = bf16"), "batch=32",
                "mlp-bf16", 4, 1e-5);
}
// SGD with momentum, Nesterov and weight decay; the momentum buffer starts as the first gradient.
static void test_logreg_sgd_momentum(void) {
    compare_cfg(load_model_edit("logreg.cfg", "weight_decay = 1e-4", "weight_decay = 1e-4\nmomentum = 0.9\nnesterov = true"),
                "batch=32", "logreg", 6, 1e-5);
}
static void test_sgd_plain(void) { compare("logreg.cfg", "batch=32", "sgd", 4, 1e-5); }
// Clipping by global norm (a small max norm, so it scales every step), and
// a batch that does not divide the 500 training images: the short last batch
// of the epoch (500 - 5*96 = 20) runs in a second graph.
static void test_clip_and_short_batch(void) { compare("fmnist-mlp.cfg", "batch=96;clip=0.05", "clip", 7, 1e-5); }

// Plain Adam with L2 weight decay (coupled), an lr schedule on the host.
static void test_adam_wd_schedule(void) {
    compare_cfg(load_model_edit("fmnist-cnn.cfg", "lr = 1e-3", "lr = 1e-3\nweight_decay = 0.01\nschedule = step\nstep_size = 2\ngamma = 0.5"),
                "batch=8", "adamwd", 4, 1e-5);
}

// Resume: 3 graph steps, then 3 more from the graph checkpoint (parameters
// and the optimiser state the graph wrote), against the same in eager mode
// (3 + 3, since the cosine schedule's length is the run's step count).
static void test_resume(void) {
    weft_model_cfg *cfg = load_model("fmnist-mlp.cfg");
    CHECK(cfg && set_all(cfg, "batch=32;steps=3;log_every=1;ckpt_every=3"));
    if (!cfg) return;
    run_out a = train_one(cfg, true, "resume", false);
    CHECK(a.st == WEFT_OK && a.r.steps == 3);
    CHECK(set_all(cfg, "steps=6"));
    run_out b = train_one(cfg, true, "resume", true);
    CHECK(set_all(cfg, "steps=3"));
    run_out e = train_one(cfg, false, "resume", false);
    CHECK(set_all(cfg, "steps=6"));
    e = train_one(cfg, false, "resume", true);
    CHECK(b.st == WEFT_OK && b.r.steps == 6 && e.st == WEFT_OK && e.r.steps == 6);
    CHECK(b.ckpt[0] && e.ckpt[0] && ckpts_agree(e.ckpt, b.ckpt, cfg->net.lr, 6, "resume"));
    weft_model_cfg_free(cfg);
}

// WEFT_GRAPH_PASSES=-name,+name switches passes for --graph; every pass keeps
// values bit-identical, so the losses match the default exactly; a bad entry
// is an error naming it.
static void test_passes_env(void) {
    weft_model_cfg *cfg = load_model("fmnist-mlp.cfg");
    CHECK(cfg && set_all(cfg, "batch=32;steps=3;log_every=1;ckpt_every=3"));
    if (!cfg) return;
    run_out a = train_one(cfg, true, "penv_default", false);
    setenv("WEFT_GRAPH_PASSES", "-fusion,-remat,-transpose_fold", 1);
    run_out b = train_one(cfg, true, "penv_off", false);
    CHECK(a.st == WEFT_OK && b.st == WEFT_OK && a.n_loss == b.n_loss && a.n_loss >= 3);
    for (int i = 0; i < a.n_loss && i < b.n_loss; i++) CHECK(a.loss[i] == b.loss[i]);
    setenv("WEFT_GRAPH_PASSES", "-fusion,-nosuch", 1);
    weft_train_opts t = {.quiet = true, .data_dir = g_dir, .graph = true};
    weft_train_result r;
    CHECK(weft_train(cfg, &t, &r) != WEFT_OK && strstr(weft_last_error(), "unknown pass 'nosuch'"));
    setenv("WEFT_GRAPH_PASSES", "fusion", 1);
    CHECK(weft_train(cfg, &t, &r) != WEFT_OK && strstr(weft_last_error(), "expected +name or -name"));
    unsetenv("WEFT_GRAPH_PASSES");
    // The backward by symbolic autodiff (default) or by tracing weft_backward:
    // the same rules, the same losses bit for bit.
    setenv("WEFT_GRAPH_BACKWARD", "trace", 1);
    run_out c = train_one(cfg, true, "penv_trace", false);
    CHECK(c.st == WEFT_OK && c.n_loss == a.n_loss);
    for (int i = 0; i < a.n_loss && i < c.n_loss; i++) CHECK(a.loss[i] == c.loss[i]);
    setenv("WEFT_GRAPH_BACKWARD", "magic", 1);
    CHECK(weft_train(cfg, &t, &r) != WEFT_OK && strstr(weft_last_error(), "WEFT_GRAPH_BACKWARD='magic'"));
    unsetenv("WEFT_GRAPH_BACKWARD");
    weft_model_cfg_free(cfg);
}

// Every optimiser a model file can name, with and without clipping, on
// logistic regression (one linear layer: graph and eager compute its forward
// and backward with the same kernels in the same order): graph mode runs the
// update op weft_optim_step runs, from the same description, so every
// per-step loss and every checkpoint tensor (parameters and optimiser state,
// ".step" counters included) are bit-identical.
static void test_every_optimizer_exact(void) {
    static const char *const opts[] = {
        "optimizer = sgd\nlr = 0.1\nweight_decay = 1e-4",
        "optimizer = sgd\nlr = 0.05\nmomentum = 0.9\nnesterov = true\nweight_decay = 1e-4",
        "optimizer = adagrad\nlr = 0.05\nweight_decay = 1e-3",
        "optimizer = rmsprop\nlr = 0.002\nalpha = 0.9",
        "optimizer = rmsprop\nlr = 0.001\nmomentum = 0.5\nweight_decay = 1e-4",
        "optimizer = adam\nlr = 0.01\nbetas = 0.8, 0.99\nweight_decay = 1e-3",
        "optimizer = adamw\nlr = 0.01\nschedule = cosine\nwarmup = 2",
        "optimizer = adam\nlr = 0.01\nclip = 0.05", // clipped every step
        "optimizer = sgd\nlr = 0.1\nmomentum = 0.9\nclip = 100", // never clipped: scaled by exactly 1
    };
    for (size_t k = 0; k < sizeof opts / sizeof *opts; k++) {
        char text[512], tag[32];
        snprintf(text, sizeof text,
                 "[net]\ndataset = fmnist\nbatch = 32\nloss = cross_entropy\nseed = 3\n%s\n"
                 "[flatten]\n[linear]\nin = 784\nout = 10\n",
                 opts[k]);
        snprintf(tag, sizeof tag, "exact%zu", k);
        weft_model_cfg *cfg = weft_model_cfg_parse(text, strlen(text), "exact.cfg");
        CHECK(cfg && set_all(cfg, "steps=6;log_every=1;ckpt_every=6"));
        if (!cfg) continue;
        run_out e = train_one(cfg, false, tag, false), g = train_one(cfg, true, tag, false);
        CHECK(e.st == WEFT_OK && g.st == WEFT_OK && e.r.steps == 6 && g.r.steps == 6);
        CHECK(e.n_loss >= 6 && g.n_loss == e.n_loss);
        bool same = true;
        for (int i = 0; i < e.n_loss && i < g.n_loss; i++) same &= e.loss[i] == g.loss[i];
        double md;
        int nt;
        int64_t bad, all;
        same &= e.ckpt[0] && g.ckpt[0] && ckpt_close(e.ckpt, g.ckpt, 0, 0, 0, &md, &nt, &bad, &all) && bad == 0;
        if (!same) fprintf(stderr, "graph and eager differ with %s\n", opts[k]);
        CHECK(same);
        weft_model_cfg_free(cfg);
    }
}

// ---- --graph on a device (graph mode on CUDA) ----
// The accelerator of tests/mock_device.c: the real cuda:0 on a GPU machine,
// else the mock (the CPU's kernels in the CUDA column), with the simulated
// CUDA-graph capture of tests/graph/capture_sim.h, told to refuse recording
// cross_entropy (as a kernel that read a value back would), so the step is
// probed, recorded and replayed in segments around a plain step. (On a GPU
// cross_entropy is captured: its target check reports without a wait.)

static run_out train_dev(const weft_model_cfg *cfg, bool graph, const char *device, const char *tag) {
    run_out o = {0};
    char ck[400], logd[400];
    snprintf(ck, sizeof ck, "%s/ck_%s", g_dir, tag);
    snprintf(logd, sizeof logd, "%s/log_%s", g_dir, tag);
    weft_train_opts t = {.ckpt_dir = ck, .quiet = true, .data_dir = g_dir, .text_path = g_text, .eval_batches = 2,
                         .log_dir = logd, .graph = graph, .device = device};
    o.st = weft_train(cfg, &t, &o.r);
    if (o.st) fprintf(stderr, "%s: %s\n", tag, weft_last_error());
    o.n_loss = read_losses(logd, o.loss, 64);
    int64_t step;
    if (weft_ckpt_latest(ck, &step, o.ckpt, sizeof o.ckpt) != WEFT_OK) o.ckpt[0] = 0;
    return o;
}

// Graph training on the accelerator ends where graph training on the CPU
// ends (bit for bit on the mock: the same kernels, captured and replayed) and
// where eager training on the accelerator ends (to fp tolerance, as graph
// and eager agree on the CPU).
static bool accelerator(bool *mock) {
    weft_device acc;
    return wt_accelerator(&acc, mock);
}

// deterministic: the model's CUDA kernels give the same bits on every run (no
// float atomics). kjv-gpt's are not: embedding_backward adds repeated token
// rows with atomicAdd (src/ops/cuda/index.c), in an order that varies from
// run to run on a GPU, so there two runs of one graph, captured or not, agree
// only to rounding (as graph and eager do), while on the mock they are exact.
static void graph_device_case(weft_model_cfg *cfg, const char *overrides, const char *tag, int steps,
                              bool deterministic) {
    bool mock = false;
    CHECK(cfg != NULL && accelerator(&mock));
    if (!cfg) return;
    if (mock) {
        sim_install();
        sim_reset_counts();
        sim.refuse = "cross_entropy";
    }
    char kv[512], t1[64], t2[64], t3[64];
    snprintf(kv, sizeof kv, "%s;steps=%d;log_every=1;ckpt_every=%d", overrides, steps, steps);
    CHECK(set_all(cfg, kv));
    snprintf(t1, sizeof t1, "%s_graph_cpu", tag);
    snprintf(t2, sizeof t2, "%s_graph_dev", tag);
    snprintf(t3, sizeof t3, "%s_eager_dev", tag);
    // The CPU graph as a device builds and runs it: the fused attention op
    // (what attention uses on CUDA), no co-scheduled matmul pairs (a pair
    // runs each product on one CPU thread, which can sum in another order; a
    // device runs its nodes one after the other).
    setenv("WEFT_GRAPH_COSCHEDULE", "0", 1);
    setenv("WEFT_FUSED_ATTENTION", "1", 1);
    run_out gc = train_dev(cfg, true, "cpu", t1);
    unsetenv("WEFT_GRAPH_COSCHEDULE");
    unsetenv("WEFT_FUSED_ATTENTION");
    run_out gd = train_dev(cfg, true, "cuda", t2), ed = train_dev(cfg, false, "cuda", t3);
    // Replays are plain launches recorded: the same run with WEFT_CUDA_GRAPHS=0 ends on the same bits
    // (where the kernels are deterministic).
    char t4[64];
    snprintf(t4, sizeof t4, "%s_graph_dev_plain", tag);
    setenv("WEFT_CUDA_GRAPHS", "0", 1);
    int kept = sim.kept;
    run_out gp = train_dev(cfg, true, "cuda", t4);
    unsetenv("WEFT_CUDA_GRAPHS");
    CHECK(gp.st == WEFT_OK && gp.n_loss == gd.n_loss && sim.kept == kept);
    bool exact = mock || deterministic;
    for (int i = 0; i < gd.n_loss && i < gp.n_loss; i++)
        CHECK(exact ? gd.loss[i] == gp.loss[i] : close_to(gd.loss[i], gp.loss[i], 1e-4, 0));
    CHECK(gc.st == WEFT_OK && gd.st == WEFT_OK && ed.st == WEFT_OK);
    CHECK(gd.r.steps == steps && gd.n_loss == gc.n_loss && gd.n_loss == ed.n_loss && gd.n_loss >= steps);
    double worst = 0;
    for (int i = 0; i < gd.n_loss && i < gc.n_loss && i < ed.n_loss; i++) {
        if (mock) CHECK(gd.loss[i] == gc.loss[i]);
        else CHECK(close_to(gd.loss[i], gc.loss[i], 1e-4, 0));
        CHECK(close_to(gd.loss[i], ed.loss[i], mock ? 1e-5 : 1e-4, 0));
        worst = fmax(worst, fabs(gd.loss[i] - ed.loss[i]) / fabs(ed.loss[i]));
    }
    double md;
    int nt;
    int64_t bad, all;
    if (exact) CHECK(gd.ckpt[0] && gp.ckpt[0] && ckpt_close(gd.ckpt, gp.ckpt, 0, 0, 0, &md, &nt, &bad, &all));
    else CHECK(gd.ckpt[0] && gp.ckpt[0] && ckpts_agree(gd.ckpt, gp.ckpt, cfg->net.lr, steps, t4));
    if (mock) CHECK(gd.ckpt[0] && gc.ckpt[0] && ckpt_close(gd.ckpt, gc.ckpt, 0, 0, 0, &md, &nt, &bad, &all));
    else CHECK(gd.ckpt[0] && gc.ckpt[0] && ckpts_agree(gd.ckpt, gc.ckpt, cfg->net.lr, steps, t1));
    CHECK(gd.ckpt[0] && ed.ckpt[0] && ckpts_agree(gd.ckpt, ed.ckpt, cfg->net.lr, steps, t3));
    fprintf(stderr, "  %s: %d steps on the %s, worst rel loss diff to eager %.2e\n", tag, steps, mock ? "mock" : "GPU", worst);
    if (mock) {
        CHECK(sim.kept >= 2 && sim.launches >= (steps - 2) * sim.kept); // recorded in step 2, replayed after
        sim.refuse = NULL;
        sim_uninstall();
    }
    weft_model_cfg_free(cfg);
}

static void test_graph_device_mlp(void) { graph_device_case(load_model("fmnist-mlp.cfg"), "batch=32", "dmlp", 5, true); }
static void test_graph_device_gpt(void) {
    graph_device_case(load_model_edit("kjv-gpt.cfg", "context = 128", "context = 16"), "batch=4", "dgpt", 4, false);
}

// A device that does not exist fails before any data is read, naming it
// (never "not supported").
static void test_graph_device_missing(void) {
    weft_model_cfg *cfg = load_model("fmnist-mlp.cfg");
    CHECK(cfg && set_all(cfg, "batch=32;steps=2"));
    if (!cfg) return;
    weft_train_opts t = {.quiet = true, .data_dir = g_dir, .graph = true, .device = "cuda:15"};
    weft_train_result r;
    CHECK(weft_train(cfg, &t, &r) != WEFT_OK);
    CHECK(wt_error_has("cuda:15") && !wt_error_has("not supported") && !wt_error_has("CPU only"));
    weft_model_cfg_free(cfg);
}

int main(void) {
    snprintf(g_models, sizeof g_models, "%s", wt_models_dir());
    snprintf(g_dir, sizeof g_dir, "/tmp/weft_test_gtrain_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    wt_write_fmnist_split(g_dir, "train", 500, 1);
    wt_write_fmnist_split(g_dir, "t10k", 200, 2);
    snprintf(g_text, sizeof g_text, "%s/text.txt", g_dir);
    FILE *f = fopen(g_text, "w");
    for (int i = 0; i < 60; i++) fputs("In the beginning God created the heaven and the earth. And the earth was. ", f);
    fclose(f);
    RUN(test_fmnist_mlp);
    RUN(test_fmnist_cnn);
    RUN(test_kjv_gpt);
    RUN(test_kjv_lstm);
    RUN(test_kjv_gru);
    RUN(test_kjv_gpt_bf16);
    RUN(test_fmnist_mlp_bf16);
    RUN(test_logreg_sgd_momentum);
    RUN(test_sgd_plain);
    RUN(test_clip_and_short_batch);
    RUN(test_adam_wd_schedule);
    RUN(test_resume);
    RUN(test_passes_env);
    RUN(test_every_optimizer_exact);
    RUN(test_graph_device_mlp);
    RUN(test_graph_device_gpt);
    RUN(test_graph_device_missing);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    return wt_summary();
}
