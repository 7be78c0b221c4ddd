// `weft train --graph` with stateful layers, against eager training on the
// same synthetic Fashion-MNIST batches: batch_norm's running statistics in the
// final checkpoint are bit-identical to eager's (dense and convolutional
// batch norm), and the per-step losses agree; dropout trains with a fresh mask
// per step (finite losses that differ from the same model without dropout).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft_test.h"

static char g_dir[256];

typedef struct run_out {
    weft_status st;
    weft_train_result r;
    double loss[32];
    int n_loss;
    char ckpt[512];
} run_out;

static int read_losses(const char *logdir, double *loss, int max) {
    char p[1100], line[512];
    snprintf(p, sizeof p, "%.1000s/metrics.csv", logdir);
    FILE *f = fopen(p, "r");
    if (!f) return -1;
    int n = 0;
    if (!fgets(line, sizeof line, f)) n = -1;
    while (n >= 0 && n < max && fgets(line, sizeof line, f)) {
        double step, epoch, l;
        if (sscanf(line, "%lf,%lf,%lf", &step, &epoch, &l) == 3 && !isnan(l)) loss[n++] = l;
    }
    fclose(f);
    return n;
}

static run_out train(const char *text, const char *tag, bool graph) {
    run_out o = {0};
    weft_model_cfg *cfg = weft_model_cfg_parse(text, strlen(text), tag);
    CHECK(cfg != NULL);
    if (!cfg) return (o.st = WEFT_ERR_ARG, o);
    char ck[400], logd[400];
    snprintf(ck, sizeof ck, "%s/ck_%s_%s", g_dir, tag, graph ? "graph" : "eager");
    snprintf(logd, sizeof logd, "%s/log_%s_%s", g_dir, tag, graph ? "graph" : "eager");
    weft_train_opts t = {.ckpt_dir = ck, .quiet = true, .data_dir = g_dir, .eval_batches = 2, .log_dir = logd,
                         .graph = graph};
    o.st = weft_train(cfg, &t, &o.r);
    if (o.st) fprintf(stderr, "%s (%s): %s\n", tag, graph ? "graph" : "eager", weft_last_error());
    o.n_loss = read_losses(logd, o.loss, 32);
    int64_t step;
    if (weft_ckpt_latest(ck, &step, o.ckpt, sizeof o.ckpt) != WEFT_OK) o.ckpt[0] = 0;
    weft_model_cfg_free(cfg);
    return o;
}

// The running statistics of two checkpoints agree within max_rel (0: bit-identical);
// returns how many tensors were compared, -1 on a difference.
static int same_running_stats(const char *a, const char *b, double max_rel) {
    weft_safetensors *x = weft_safetensors_load(a), *y = weft_safetensors_load(b);
    int n = 0;
    bool ok = x && y;
    for (int i = 0; ok && i < weft_safetensors_count(x); i++) {
        const char *nm = weft_safetensors_name_at(x, i);
        if (!strstr(nm, "running_")) continue;
        weft_tensor *t = weft_safetensors_tensor_at(x, i), *u = weft_safetensors_find(y, nm);
        ok = u && weft_tensor_numel(t) == weft_tensor_numel(u);
        if (!ok) break;
        int64_t m = weft_tensor_numel(t), bad = 0;
        double *p = malloc(sizeof(double) * (size_t)m), *q = malloc(sizeof(double) * (size_t)m), worst = 0;
        weft_tensor_to_f64(t, p, m);
        weft_tensor_to_f64(u, q, m);
        for (int64_t k = 0; k < m; k++) {
            bad += p[k] != q[k];
            worst = fmax(worst, fabs(p[k] - q[k]) / fmax(fabs(p[k]), fabs(q[k])));
        }
        if (bad) fprintf(stderr, "  %s: %lld of %lld elements differ (max rel %.3g)\n", nm, (long long)bad, (long long)m, worst);
        ok = max_rel == 0 ? bad == 0 : worst <= max_rel;
        n++;
        free(p);
        free(q);
    }
    weft_safetensors_free(x);
    weft_safetensors_free(y);
    return ok ? n : -1;
}

#define NET "[net]\ndataset = fmnist\ninput = 1,28,28\nbatch = 16\nsteps = %d\noptimizer = %s\nlr = 1e-3\n" \
            "loss = cross_entropy\nseed = 1\nlog_every = 1\nckpt_every = %d\n"

static void compare_bn(const char *layers, const char *tag, int steps, int n_stats, const char *opt, double max_rel) {
    char text[2048];
    snprintf(text, sizeof text, NET "%s", steps, opt, steps, layers);
    run_out e = train(text, tag, false), g = train(text, tag, true);
    CHECK(e.st == WEFT_OK && g.st == WEFT_OK && e.r.steps == steps && g.r.steps == steps);
    CHECK(e.n_loss >= steps && g.n_loss == e.n_loss);
    double worst = 0;
    for (int i = 0; i < e.n_loss && i < g.n_loss; i++) {
        worst = fmax(worst, fabs(e.loss[i] - g.loss[i]) / fabs(e.loss[i]));
        CHECK(fabs(e.loss[i] - g.loss[i]) <= 1e-5 * fabs(e.loss[i]));
    }
    CHECK(fabs(e.r.test_loss - g.r.test_loss) <= 1e-5 * fabs(e.r.test_loss)); // eval mode reads the running stats
    int n = e.ckpt[0] && g.ckpt[0] ? same_running_stats(e.ckpt, g.ckpt, max_rel) : -1;
    CHECK(n == n_stats);
    printf("  %s: %d steps, %d running-stat tensors equal to eager's (max rel %.0e), worst rel loss diff %.2e, test loss %.6f\n",
           tag, steps, n, max_rel, worst, g.r.test_loss);
}

// No bias before a batch norm: its gradient is zero in exact arithmetic, so
// Adam turns rounding noise (which differs between the modes where BLAS sums
// in another order) into +-lr steps that shift the batch means, and with them
// the running means, while leaving the loss unchanged (the norm removes them).
// One step is bit-identical (the same batch through the same parameters);
// after more steps the parameters themselves differ in their last bits between
// the modes (graph_train's update ops vs the eager optimiser), so the running
// statistics agree to a few f32 ulps (1 ulp = 1.2e-7 relative).
static void test_batchnorm_dense(void) {
    const char *net = "[flatten]\n[linear]\nout = 32\nbias = false\n[batchnorm]\n[relu]\n[linear]\nout = 10\n";
    compare_bn(net, "bn_dense1", 1, 2, "sgd", 0);
    compare_bn(net, "bn_dense", 4, 2, "sgd", 6e-7);
}

static void test_batchnorm_conv(void) {
    compare_bn("[conv2d]\nout = 4\nkernel = 3\npad = 1\nbias = false\n[batchnorm]\nmomentum = 0.3\n[relu]\n[maxpool]\nkernel = 2\n"
               "[flatten]\n[linear]\nout = 10\n",
               "bn_conv", 3, 2, "adam", 0);
}

static void test_dropout_graph(void) {
    char with[1024], without[1024];
    const char *layers = "[flatten]\n[linear]\nout = 64\n[relu]\n[dropout]\np = %s\n[linear]\nout = 10\n";
    char l1[256], l2[256];
    snprintf(l1, sizeof l1, layers, "0.5");
    snprintf(l2, sizeof l2, layers, "0");
    snprintf(with, sizeof with, NET "%s", 2, "adam", 2, l1);
    snprintf(without, sizeof without, NET "%s", 2, "adam", 2, l2);
    run_out d = train(with, "drop", true), n = train(without, "nodrop", true);
    CHECK(d.st == WEFT_OK && n.st == WEFT_OK && d.r.steps == 2 && n.r.steps == 2);
    CHECK(d.n_loss >= 2 && n.n_loss >= 2);
    for (int i = 0; i < 2 && i < d.n_loss && i < n.n_loss; i++) {
        CHECK(isfinite(d.loss[i]) && isfinite(n.loss[i]));
        CHECK(fabs(d.loss[i] - n.loss[i]) > 1e-6 * fabs(n.loss[i])); // half the hidden units dropped
    }
    // Evaluation runs eager in eval mode (no dropout): same parameters would give the same
    // test loss; here they differ only through the training steps.
    CHECK(isfinite(d.r.test_loss));
    printf("  dropout: graph losses %.6f %.6f (p=0.5) vs %.6f %.6f (p=0)\n", d.loss[0], d.loss[1], n.loss[0], n.loss[1]);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/weft_test_gstate_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    wt_write_fmnist_split(g_dir, "train", 200, 1);
    wt_write_fmnist_split(g_dir, "t10k", 64, 2);
    RUN(test_batchnorm_dense);
    RUN(test_batchnorm_conv);
    RUN(test_dropout_graph);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    return wt_summary();
}
