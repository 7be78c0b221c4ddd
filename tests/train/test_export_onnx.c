// weft_export_onnx (`weft export`): each shipped model file's inference forward as an ONNX model. The file is
// loaded back by weft_onnx_load (whose reading of every op it uses is checked against ONNX's own operator
// tests, tests/graph/test_onnx_import.c) and must compute what weft's own forward computes, in eval mode, from
// the same weights: the model file's initial draw, and a checkpoint's after two training steps. Where Debian's
// python3-onnx is installed, onnx.checker.check_model(full_check=True) must accept each file. Without ONNX
// support: skipped (77).
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weft_test.h"

static char g_dir[64];

// A python with the onnx package: Debian's (/usr/bin/python3), else the first python3 on PATH; NULL: none.
static const char *onnx_python(void) {
    static const char *cands[] = {"/usr/bin/python3", "python3"};
    for (int i = 0; i < 2; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "%s -c 'import onnx' >/dev/null 2>&1", cands[i]);
        if (system(cmd) == 0) return cands[i];
    }
    return NULL;
}

static void check_with_onnx(const char *path) {
    const char *py = onnx_python();
    if (!py) {
        printf("note: no python with onnx: %s not checked by onnx.checker\n", path);
        return;
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s -c 'import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)' %s", py, path);
    CHECK(system(cmd) == 0);
}

// The model of cfg_name exported (with ckpt, or its initial weights), loaded back and run on a batch of 2,
// against the model's own forward in eval mode with the same weights (net; built by the caller).
static void check_export(weft_model_cfg *cfg, weft_module *net, const char *ckpt, const char *file) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_dir, file);
    CHECK(weft_export_onnx(cfg, ckpt, 2, path) == WEFT_OK);
    weft_graph *g = weft_onnx_load(path, 0, NULL);
    CHECK(g != NULL);
    if (!g) return;
    check_with_onnx(path);
    const weft_net_cfg *n = &cfg->net;
    weft_generator *gen = weft_generator_create(99);
    int64_t shape[WEFT_MAX_DIMS + 1] = {2};
    weft_tensor *x;
    if (n->dataset == WEFT_CFG_KJV) {
        shape[1] = n->context;
        x = weft_tensor_randint(2, shape, 0, n->vocab, WEFT_I64, gen);
    } else {
        for (int d = 0; d < n->input_ndim; d++) shape[1 + d] = n->input[d];
        x = weft_tensor_rand(1 + n->input_ndim, shape, WEFT_F32, gen);
    }
    weft_module_set_training(net, false);
    weft_tensor *want = NULL;
    WEFT_NO_GRAD { want = weft_module_forward(net, x); }
    weft_value xv = weft_graph_find_value(g, "x"), yv = weft_graph_find_value(g, "logits");
    CHECK(xv.id >= 0 && yv.id >= 0);
    weft_tensor *got = NULL;
    CHECK(weft_graph_run(g, 1, &xv, &x, 1, &yv, &got, 0, NULL) == WEFT_OK);
    if (got && want) wt_check_same(file, got, want, 1e-5);
    weft_tensor_free(got), weft_tensor_free(want), weft_tensor_free(x);
    weft_generator_free(gen);
    weft_graph_free(g);
}

// A checkpoint's parameters ("model.<name>") into net.
static weft_status load_ckpt(const char *path, weft_module *net) {
    weft_safetensors *st = weft_safetensors_load(path);
    if (!st) return weft_last_status();
    weft_status s = WEFT_OK;
    for (int i = 0; i < weft_module_param_count(net) && !s; i++) {
        char name[256] = "model.";
        weft_tensor *p = weft_module_param_at(net, i, name + 6, sizeof name - 6);
        s = weft_safetensors_copy_to(st, name, p);
    }
    weft_safetensors_free(st);
    return s;
}

// The model file's own initial weights, as weft_train draws them.
static weft_module *build(const weft_model_cfg *cfg, weft_generator **ig, weft_generator **dg) {
    *ig = weft_generator_create(cfg->net.seed);
    *dg = weft_generator_create(cfg->net.seed ^ 0x9e3779b97f4a7c15ULL);
    return weft_model_build(cfg, *ig, *dg);
}

static void test_model_files(void) {
    const char *files[] = {"logreg.cfg", "fmnist-mlp.cfg", "fmnist-cnn.cfg", "kjv-gpt.cfg", "kjv-lstm.cfg", "kjv-gru.cfg"};
    for (int i = 0; i < (int)(sizeof files / sizeof *files); i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s%s", wt_models_dir(), files[i]);
        weft_model_cfg *cfg = weft_model_cfg_load(path);
        CHECK(cfg != NULL);
        if (!cfg) continue;
        weft_generator *ig, *dg;
        weft_module *net = build(cfg, &ig, &dg);
        CHECK(net != NULL);
        char out[64];
        snprintf(out, sizeof out, "%.40s.onnx", files[i]);
        if (net) check_export(cfg, net, NULL, out);
        weft_module_free(net);
        weft_generator_free(ig), weft_generator_free(dg);
        weft_model_cfg_free(cfg);
    }
}

// After two training steps (a synthetic Fashion-MNIST), the checkpoint's weights are exported, not the draw's.
static void test_checkpoint(void) {
    char data[128], ckdir[128], cfgp[1024];
    snprintf(data, sizeof data, "%s/data", g_dir);
    snprintf(ckdir, sizeof ckdir, "%s/ck", g_dir);
    mkdir(data, 0755);
    wt_write_fmnist_split(data, "train", 64, 1);
    wt_write_fmnist_split(data, "t10k", 32, 2);
    snprintf(cfgp, sizeof cfgp, "%sfmnist-mlp.cfg", wt_models_dir());
    weft_model_cfg *cfg = weft_model_cfg_load(cfgp);
    CHECK(cfg != NULL);
    if (!cfg) return;
    CHECK(weft_model_cfg_set(cfg, "steps", "2") == WEFT_OK);
    weft_train_opts o = {.data_dir = data, .ckpt_dir = ckdir, .ckpt_every = 2, .quiet = true};
    weft_train_result r;
    CHECK(weft_train(cfg, &o, &r) == WEFT_OK);
    char ck[512];
    int64_t step = -1;
    CHECK(weft_ckpt_latest(ckdir, &step, ck, sizeof ck) == WEFT_OK && step == 2);
    weft_generator *ig, *dg;
    weft_module *net = build(cfg, &ig, &dg), *net0 = NULL;
    CHECK(net && load_ckpt(ck, net) == WEFT_OK);
    if (net) check_export(cfg, net, ck, "trained.onnx");
    // the trained weights differ from the draw: the export did read the checkpoint
    weft_generator *ig0, *dg0;
    net0 = build(cfg, &ig0, &dg0);
    const weft_tensor *a = weft_module_param_at(net, 0, NULL, 0), *b = weft_module_param_at(net0, 0, NULL, 0);
    double diff = 0;
    for (int64_t i = 0; a && b && i < weft_tensor_numel(a); i++)
        diff += fabs(((const float *)weft_tensor_data(a))[i] - ((const float *)weft_tensor_data(b))[i]);
    CHECK(diff > 0);
    CHECK(weft_export_onnx(cfg, "/nonexistent/ckpt.safetensors", 2, "/tmp/never.onnx") != WEFT_OK);
    CHECK(wt_error_has("/nonexistent/ckpt.safetensors"));
    weft_module_free(net), weft_module_free(net0);
    weft_generator_free(ig), weft_generator_free(dg), weft_generator_free(ig0), weft_generator_free(dg0);
    weft_model_cfg_free(cfg);
}

// An op with no ONNX form (the LSTM's per-step fused cell, WEFT_LSTM_PATH=cell) is an error naming it, and
// nothing is written. (The default path, lstm_seq, is an ONNX LSTM: test_model_files.)
static void test_unsupported(void) {
    char cfgp[1024], out[256];
    snprintf(cfgp, sizeof cfgp, "%skjv-lstm.cfg", wt_models_dir());
    snprintf(out, sizeof out, "%s/lstm_cell.onnx", g_dir);
    weft_model_cfg *cfg = weft_model_cfg_load(cfgp);
    CHECK(cfg != NULL);
    if (!cfg) return;
    setenv("WEFT_LSTM_PATH", "cell", 1);
    CHECK(weft_export_onnx(cfg, NULL, 2, out) != WEFT_OK);
    unsetenv("WEFT_LSTM_PATH");
    CHECK(wt_error_has("lstm_cell"));
    CHECK(access(out, F_OK) != 0);
    weft_model_cfg_free(cfg);
}

int main(void) {
    if (!weft_onnx_available()) {
        printf("built without ONNX support: skipped\n");
        return 77;
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/weft_export_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    RUN(test_model_files);
    RUN(test_checkpoint);
    RUN(test_unsupported);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", g_dir);
    return wt_summary();
}
