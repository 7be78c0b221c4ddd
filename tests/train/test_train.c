// Training from model files: learning on a small synthetic Fashion-MNIST,
// bit-identical resume (2N steps vs N + resume + N), NaN loss handling,
// checkpoint errors, eval, a tiny language model, and the hinge loss.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weft_test.h"

static char g_dir[256];

static const char *k_mlp = "[net]\ndataset = fmnist\nbatch = 32\nepochs = 3\noptimizer = adam\nlr = 1e-3\nseed = 5\n"
                           "[flatten]\n[linear]\nout = 32\n[relu]\n[dropout]\np = 0.2\n[linear]\nout = 10\n";

static weft_model_cfg *cfg_of(const char *text) { return weft_model_cfg_parse(text, strlen(text), "test.cfg"); }

static weft_train_opts opts_in(const char *ckdir) {
    weft_train_opts o = {.ckpt_dir = ckdir, .quiet = true, .data_dir = g_dir, .keep_last = 10};
    return o;
}

// Every tensor of two checkpoint files is bit-identical.
static bool same_ckpt(const char *a, const char *b) {
    weft_safetensors *x = weft_safetensors_load(a), *y = weft_safetensors_load(b);
    bool ok = x && y && weft_safetensors_count(x) == weft_safetensors_count(y);
    for (int i = 0; ok && i < weft_safetensors_count(x); i++) {
        weft_tensor *t = weft_safetensors_tensor_at(x, i), *u = weft_safetensors_find(y, weft_safetensors_name_at(x, i));
        ok = u && weft_tensor_numel(t) == weft_tensor_numel(u) && weft_tensor_dtype(t) == weft_tensor_dtype(u) &&
             !memcmp(weft_tensor_data(t), weft_tensor_data(u),
                     (size_t)weft_tensor_numel(t) * weft_dtype_size(weft_tensor_dtype(t)));
        if (!ok) fprintf(stderr, "checkpoints differ at %s\n", weft_safetensors_name_at(x, i));
    }
    weft_safetensors_free(x);
    weft_safetensors_free(y);
    return ok;
}

static void test_learns_and_evaluates(void) {
    weft_model_cfg *cfg = cfg_of(k_mlp);
    CHECK(cfg != NULL);
    char ck[300];
    snprintf(ck, sizeof ck, "%s/ck_learn", g_dir);
    weft_train_opts o = opts_in(ck);
    char logd[300];
    snprintf(logd, sizeof logd, "%s/logs", g_dir);
    o.log_dir = logd;
    weft_train_result r;
    CHECK(weft_train(cfg, &o, &r) == WEFT_OK);
    CHECK(!r.language_model && r.epochs == 3 && r.steps == 3 * 16); // 500 samples / 32 -> 16 batches
    if (r.steps != 48 || r.epochs != 3) fprintf(stderr, "epochs %lld steps %lld\n", (long long)r.epochs, (long long)r.steps);
    if (r.steps != 48) fprintf(stderr, "epochs %lld steps %lld\n", (long long)r.epochs, (long long)r.steps);
    CHECK(r.test_acc > 0.9);     // the bands are easy to tell apart
    CHECK(r.test_loss < 0.5);
    CHECK(r.samples_per_s > 0);
    // eval of the last checkpoint reproduces the final test numbers
    char path[512];
    int64_t step;
    CHECK(weft_ckpt_latest(ck, &step, path, sizeof path) == WEFT_OK && step == 48);
    weft_train_result e;
    CHECK(weft_evaluate(cfg, path, &o, &e) == WEFT_OK);
    CHECK_NEAR(e.test_loss, r.test_loss, 1e-9);
    CHECK_NEAR(e.test_acc, r.test_acc, 1e-12);
    // metrics were written: a CSV with a header and an event file
    char csv[512];
    snprintf(csv, sizeof csv, "%s/metrics.csv", logd);
    FILE *f = fopen(csv, "r");
    char line[256] = "";
    CHECK(f && fgets(line, sizeof line, f) && !strncmp(line, "step,epoch,train_loss,test_loss,test_acc", 40));
    if (f) fclose(f);
    weft_model_cfg_free(cfg);
}

static void test_resume_bit_identical(void) {
    weft_model_cfg *cfg = cfg_of(k_mlp);
    char a[300], b[300], pa[512], pb[512];
    snprintf(a, sizeof a, "%s/ck_a", g_dir);
    snprintf(b, sizeof b, "%s/ck_b", g_dir);
    weft_train_result r;
    // 2N = 24 steps in one go (crosses an epoch end at 16)
    CHECK(weft_model_cfg_set(cfg, "steps", "24") == WEFT_OK);
    weft_train_opts oa = opts_in(a);
    oa.ckpt_every = 12;
    CHECK(weft_train(cfg, &oa, &r) == WEFT_OK && r.steps == 24);
    // N = 12, then resume to 24
    CHECK(weft_model_cfg_set(cfg, "steps", "12") == WEFT_OK);
    weft_train_opts ob = opts_in(b);
    CHECK(weft_train(cfg, &ob, &r) == WEFT_OK && r.steps == 12);
    char a12[512], b12[512];
    snprintf(a12, sizeof a12, "%s/ckpt-000012.safetensors", a);
    snprintf(b12, sizeof b12, "%s/ckpt-000012.safetensors", b);
    CHECK(same_ckpt(a12, b12));
    CHECK(weft_model_cfg_set(cfg, "steps", "24") == WEFT_OK);
    ob.resume = true;
    CHECK(weft_train(cfg, &ob, &r) == WEFT_OK && r.steps == 24);
    int64_t sa, sb;
    CHECK(weft_ckpt_latest(a, &sa, pa, sizeof pa) == WEFT_OK && weft_ckpt_latest(b, &sb, pb, sizeof pb) == WEFT_OK);
    CHECK(sa == 24 && sb == 24);
    CHECK(same_ckpt(pa, pb));
    // a corrupt latest checkpoint: resume fails with a message naming the file
    FILE *f = fopen(pb, "r+b");
    if (f) {
        fseek(f, 0, SEEK_SET);
        fputc(0xff, f);
        fputc(0xff, f);
        fclose(f);
    }
    CHECK(weft_train(cfg, &ob, &r) != WEFT_OK && strstr(weft_last_error(), "ckpt-000024"));
    weft_model_cfg_free(cfg);
}

static void test_nan_loss_stops(void) {
    // Two stacked linear layers at a huge learning rate: each step multiplies
    // the weights' scale, so the logits overflow to inf within a few steps.
    const char *text = "[net]\ndataset = fmnist\nbatch = 32\nepochs = 2\noptimizer = sgd\nlr = 1000\nseed = 1\n"
                       "[flatten]\n[linear]\nout = 64\n[linear]\nout = 10\n";
    weft_model_cfg *cfg = cfg_of(text);
    char ck[300];
    snprintf(ck, sizeof ck, "%s/ck_nan", g_dir);
    weft_train_opts o = opts_in(ck);
    o.ckpt_every = 1;
    weft_train_result r;
    weft_status st = weft_train(cfg, &o, &r);
    CHECK(st != WEFT_OK);
    CHECK(strstr(weft_last_error(), "step") && (strstr(weft_last_error(), "NaN") || strstr(weft_last_error(), "infinite")));
    // the checkpoints left are from good steps only: the latest one loads and is finite
    int64_t step;
    char path[512];
    CHECK(weft_ckpt_latest(ck, &step, path, sizeof path) == WEFT_OK);
    if (step > 0) {
        weft_safetensors *s = weft_safetensors_load(path);
        weft_tensor *w = s ? weft_safetensors_find(s, "model.2.weight") : NULL;
        CHECK(w != NULL);
        if (w) {
            float *v = weft_tensor_data(w);
            bool finite = true;
            for (int64_t i = 0; i < weft_tensor_numel(w); i++) finite &= isfinite(v[i]);
            CHECK(finite);
        }
        weft_safetensors_free(s);
    }
    weft_model_cfg_free(cfg);
}

static void test_language_model(void) {
    char txt[300];
    snprintf(txt, sizeof txt, "%s/text.txt", g_dir);
    FILE *f = fopen(txt, "w");
    for (int i = 0; i < 400; i++) fputs("In the beginning God created the heaven and the earth. ", f);
    fclose(f);
    const char *text = "[net]\ndataset = kjv\ncontext = 16\nbatch = 8\nsteps = 60\noptimizer = adamw\nlr = 3e-3\n"
                       "seed = 2\n[embedding]\nvocab = 256\ndim = 32\nposition = learned\n[transformer]\nheads = 2\n"
                       "blocks = 1\n[layernorm]\n[linear]\nout = vocab\n";
    weft_model_cfg *cfg = cfg_of(text);
    CHECK(cfg != NULL);
    if (!cfg) {
        fprintf(stderr, "%s\n", weft_last_error());
        return;
    }
    char ck[300];
    snprintf(ck, sizeof ck, "%s/ck_lm", g_dir);
    weft_train_opts o = opts_in(ck);
    o.text_path = txt;
    o.eval_batches = 4;
    weft_train_result r;
    CHECK(weft_train(cfg, &o, &r) == WEFT_OK);
    CHECK(r.language_model && r.steps == 60 && r.tokens_per_s > 0);
    CHECK(r.val_loss < 2.0); // log(256) = 5.5 at the start; the text repeats
    char path[512];
    int64_t step;
    CHECK(weft_ckpt_latest(ck, &step, path, sizeof path) == WEFT_OK && step == 60);
    char out[4096] = "";
    FILE *mf = fmemopen(out, sizeof out, "w");
    CHECK(weft_sample(cfg, path, "In the", 20, 0.0, 1, mf) == WEFT_OK);
    fclose(mf);
    CHECK(!strncmp(out, "In the", 6) && strlen(out) >= 26);
    weft_model_cfg_free(cfg);
}

// multi_margin_loss against the closed form: mean_n sum_{j != y} max(0, 1 - x_y + x_j) / C
static void test_hinge_loss(void) {
    const char *text = "[net]\ndataset = fmnist\nloss = hinge\noptimizer = sgd\nlr = 0.1\n[flatten]\n[linear]\nout = 10\n";
    weft_model_cfg *cfg = cfg_of(text);
    float xv[20];
    for (int i = 0; i < 20; i++) xv[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
    int64_t yv[2] = {3, 8};
    weft_tensor *x = weft_tensor_from_data(xv, WEFT_DIMS(2, 10), WEFT_F32);
    weft_tensor *y = weft_tensor_from_data(yv, WEFT_DIMS(2), WEFT_I64);
    weft_tensor *l = weft_model_loss(cfg, x, y);
    double ref = 0;
    for (int n = 0; n < 2; n++)
        for (int j = 0; j < 10; j++)
            if (j != yv[n]) ref += fmax(0.0, 1.0 - xv[n * 10 + yv[n]] + xv[n * 10 + j]) / 10.0;
    ref /= 2;
    CHECK_NEAR(weft_tensor_item(l), ref, 1e-6);
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_tensor_free(l);
    weft_model_cfg_free(cfg);
}

// --device: "cpu" is the default path bit for bit; a missing device fails up
// front naming it; with a GPU, the same run on cuda ends where the CPU run does
// (same initial values and dropout masks; sums in another order).
static void test_device(void) {
    weft_model_cfg *cfg = cfg_of(k_mlp);
    char a[300], b[300];
    snprintf(a, sizeof a, "%s/ck_dev_default", g_dir);
    snprintf(b, sizeof b, "%s/ck_dev_cpu", g_dir);
    weft_train_opts oa = opts_in(a), ob = opts_in(b);
    ob.device = "cpu";
    weft_train_result ra, rb;
    CHECK(weft_train(cfg, &oa, &ra) == WEFT_OK && weft_train(cfg, &ob, &rb) == WEFT_OK);
    char pa[512], pb[512];
    int64_t sa = 0, sb = 0;
    CHECK(weft_ckpt_latest(a, &sa, pa, sizeof pa) == WEFT_OK && weft_ckpt_latest(b, &sb, pb, sizeof pb) == WEFT_OK);
    CHECK(sa == 48 && sb == 48 && same_ckpt(pa, pb));
    weft_train_opts oc = opts_in(NULL);
    oc.device = "cuda:15";
    weft_train_result rc;
    CHECK(weft_train(cfg, &oc, &rc) != WEFT_OK && wt_error_has("device cuda:15"));
    weft_device acc;
    bool mock = false;
    if (wt_accelerator(&acc, &mock)) { // a GPU, or the mock accelerator of tests/mock_device.c
        oc.device = "cuda";
        CHECK(weft_train(cfg, &oc, &rc) == WEFT_OK);
        if (mock) CHECK(rc.test_loss == ra.test_loss && rc.test_acc == ra.test_acc); // the CPU's kernels
        CHECK_NEAR(rc.test_loss, ra.test_loss, 1e-3);
        CHECK(fabs(rc.test_acc - ra.test_acc) <= 0.02);
    }
    weft_model_cfg_free(cfg);
}

// clip on the accelerator (device gradients; the norm computed there): the run
// ends where the CPU run ends (bit for bit on the mock), checkpoints included.
static void test_device_clip(void) {
    weft_device acc;
    bool mock = false;
    if (!wt_accelerator(&acc, &mock)) {
        CHECK(!"no accelerator");
        return;
    }
    const char *text = "[net]\ndataset = fmnist\nbatch = 32\nepochs = 2\noptimizer = sgd\nlr = 0.5\nclip = 0.25\n"
                       "seed = 3\n[flatten]\n[linear]\nout = 16\n[relu]\n[linear]\nout = 10\n";
    weft_model_cfg *cfg = cfg_of(text);
    char a[300], b[300];
    snprintf(a, sizeof a, "%s/ck_clip_cpu", g_dir);
    snprintf(b, sizeof b, "%s/ck_clip_dev", g_dir);
    weft_train_opts oa = opts_in(a), ob = opts_in(b);
    ob.device = "cuda";
    weft_train_result ra, rb;
    CHECK(cfg && weft_train(cfg, &oa, &ra) == WEFT_OK);
    CHECK(cfg && weft_train(cfg, &ob, &rb) == WEFT_OK);
    if (mock) {
        char pa[512], pb[512];
        int64_t sa = 0, sb = 0;
        CHECK(rb.test_loss == ra.test_loss && rb.train_loss == ra.train_loss);
        CHECK(weft_ckpt_latest(a, &sa, pa, sizeof pa) == WEFT_OK && weft_ckpt_latest(b, &sb, pb, sizeof pb) == WEFT_OK);
        CHECK(sa == sb && sa > 0 && same_ckpt(pa, pb));
    } else {
        CHECK_NEAR(rb.test_loss, ra.test_loss, 1e-3);
    }
    // the clip bit: without it the same run ends elsewhere
    weft_model_cfg *noclip = cfg_of("[net]\ndataset = fmnist\nbatch = 32\nepochs = 2\noptimizer = sgd\nlr = 0.5\n"
                                    "seed = 3\n[flatten]\n[linear]\nout = 16\n[relu]\n[linear]\nout = 10\n");
    weft_train_opts oc = opts_in(NULL);
    oc.device = "cuda";
    weft_train_result rc;
    CHECK(noclip && weft_train(noclip, &oc, &rc) == WEFT_OK && rc.train_loss != rb.train_loss);
    weft_model_cfg_free(noclip);
    weft_model_cfg_free(cfg);
}

// [net] precision = bf16 / f16: matmuls under autocast (f16 with loss
// scaling), f32 parameters; both learn the task, and neither is the f32 run.
static void test_precision(void) {
    const char *names[2] = {"bf16", "f16"};
    double loss32 = 0;
    {
        weft_model_cfg *cfg = cfg_of(k_mlp);
        weft_train_opts o = opts_in(NULL);
        weft_train_result r;
        CHECK(weft_train(cfg, &o, &r) == WEFT_OK);
        loss32 = r.test_loss;
        weft_model_cfg_free(cfg);
    }
    for (int k = 0; k < 2; k++) {
        char text[512];
        snprintf(text, sizeof text,
                 "[net]\ndataset = fmnist\nbatch = 32\nepochs = 3\noptimizer = adam\nlr = 1e-3\nseed = 5\nprecision = %s\n"
                 "[flatten]\n[linear]\nout = 32\n[relu]\n[dropout]\np = 0.2\n[linear]\nout = 10\n",
                 names[k]);
        weft_model_cfg *cfg = cfg_of(text);
        CHECK(cfg != NULL);
        if (!cfg) continue;
        weft_train_opts o = opts_in(NULL);
        weft_train_result r;
        CHECK(weft_train(cfg, &o, &r) == WEFT_OK);
        CHECK(r.test_acc > 0.9);
        CHECK(r.test_loss != loss32 && fabs(r.test_loss - loss32) < 0.1);
        weft_model_cfg_free(cfg);
    }
    weft_model_cfg *bad = cfg_of("[net]\ndataset = fmnist\nprecision = f8\n[flatten]\n[linear]\nout = 10\n");
    CHECK(bad == NULL && wt_error_has("test.cfg:3"));
}

// precision = f16 with clip: the gradients are unscaled before they are
// clipped. clip = 100 lies between this model's gradient norms (below 10)
// and their scaled norms (about 65536 times those): it never clips the
// unscaled gradients, so the run equals the run without clip bit for bit
// (and would not if the scaled ones were clipped, or divided twice); a small
// clip changes the run, which still learns.
static void test_f16_clip(void) {
    const char *clips[3] = {"0", "100", "0.05"};
    char dirs[3][600], last[3][700];
    weft_train_result r[3];
    for (int k = 0; k < 3; k++) {
        char text[512];
        snprintf(text, sizeof text,
                 "[net]\ndataset = fmnist\nbatch = 32\nepochs = 100\noptimizer = adam\nlr = 1e-3\nseed = 5\n"
                 "precision = f16\nclip = %s\n[flatten]\n[linear]\nout = 32\n[relu]\n[linear]\nout = 10\n", clips[k]);
        weft_model_cfg *cfg = cfg_of(text);
        CHECK(cfg != NULL);
        if (!cfg) return;
        snprintf(dirs[k], sizeof dirs[k], "%s/ck_f16clip%d", g_dir, k);
        snprintf(last[k], sizeof last[k], "%.600s/ckpt-000060.safetensors", dirs[k]);
        CHECK(weft_model_cfg_set(cfg, "steps", "60") == WEFT_OK);
        weft_train_opts o = opts_in(dirs[k]);
        o.ckpt_every = 60;
        CHECK(weft_train(cfg, &o, &r[k]) == WEFT_OK && r[k].steps == 60);
        weft_model_cfg_free(cfg);
    }
    CHECK(same_ckpt(last[0], last[1]));
    fprintf(stderr, "(a difference below is expected)\n");
    CHECK(!same_ckpt(last[0], last[2]) && r[2].test_loss != r[0].test_loss);
    CHECK(r[2].test_acc > 0.8);
}

// The metadata value `key` of a checkpoint file ("" when absent).
static void ckpt_meta(const char *path, const char *key, char *out, size_t n) {
    weft_safetensors *s = weft_safetensors_load(path);
    const char *v = s ? weft_safetensors_meta(s, key) : NULL;
    snprintf(out, n, "%s", v ? v : "");
    weft_safetensors_free(s);
}

// precision = f16 resumed: the loss scale and its growth tracker come back
// from the checkpoint, so N steps + resume + N equals 2N steps bit for bit
// (parameters, Adam state, and the scale). The scale must have moved from
// its initial 65536 by step N (f16 gradients of this model overflow at
// first), else the comparison would not tell.
static void test_f16_resume_scale(void) {
    // k_mlp at lr 0.1: its f16 gradients overflow at scale 65536 and again
    // later (8192 from step 4, 4096 from step 16)
    const char *text = "[net]\ndataset = fmnist\nbatch = 32\nepochs = 3\noptimizer = adam\nlr = 0.1\nseed = 5\n"
                       "precision = f16\n[flatten]\n[linear]\nout = 32\n[relu]\n[dropout]\np = 0.2\n[linear]\nout = 10\n";
    weft_model_cfg *cfg = cfg_of(text);
    CHECK(cfg != NULL);
    if (!cfg) return;
    char a[300], b[300], a12[512], b12[512], a24[512], b24[512];
    snprintf(a, sizeof a, "%s/ck_f16a", g_dir);
    snprintf(b, sizeof b, "%s/ck_f16b", g_dir);
    snprintf(a12, sizeof a12, "%s/ckpt-000012.safetensors", a);
    snprintf(b12, sizeof b12, "%s/ckpt-000012.safetensors", b);
    snprintf(a24, sizeof a24, "%s/ckpt-000024.safetensors", a);
    snprintf(b24, sizeof b24, "%s/ckpt-000024.safetensors", b);
    weft_train_result r;
    CHECK(weft_model_cfg_set(cfg, "steps", "24") == WEFT_OK);
    weft_train_opts oa = opts_in(a);
    oa.ckpt_every = 12;
    CHECK(weft_train(cfg, &oa, &r) == WEFT_OK && r.steps == 24);
    CHECK(weft_model_cfg_set(cfg, "steps", "12") == WEFT_OK);
    weft_train_opts ob = opts_in(b);
    CHECK(weft_train(cfg, &ob, &r) == WEFT_OK && r.steps == 12);
    char sa[64], sb[64], ga[64], gb[64];
    ckpt_meta(a12, "loss_scale", sa, sizeof sa);
    ckpt_meta(b12, "loss_scale", sb, sizeof sb);
    CHECK(sa[0] && !strcmp(sa, sb));
    CHECK(sa[0] && atof(sa) != 65536); // the scale moved: the resume below has something to restore
    CHECK(weft_model_cfg_set(cfg, "steps", "24") == WEFT_OK);
    ob.resume = true;
    CHECK(weft_train(cfg, &ob, &r) == WEFT_OK && r.steps == 24);
    CHECK(same_ckpt(a24, b24));
    ckpt_meta(a24, "loss_scale", sa, sizeof sa);
    ckpt_meta(b24, "loss_scale", sb, sizeof sb);
    ckpt_meta(a24, "loss_scale_good", ga, sizeof ga);
    ckpt_meta(b24, "loss_scale_good", gb, sizeof gb);
    if (strcmp(sa, sb) || strcmp(ga, gb)) fprintf(stderr, "scale %s/%s vs %s/%s\n", sa, ga, sb, gb);
    CHECK(sa[0] && !strcmp(sa, sb) && ga[0] && !strcmp(ga, gb));
    weft_model_cfg_free(cfg);
}

// `weft eval`'s numbers come with the checkpoint's step, and its final line
// has no training fields (they would be nan / 0).
static void test_eval_reports_step(void) {
    weft_model_cfg *cfg = cfg_of(k_mlp);
    char ck[300], path[512];
    snprintf(ck, sizeof ck, "%s/ck_eval", g_dir);
    CHECK(weft_model_cfg_set(cfg, "steps", "10") == WEFT_OK);
    weft_train_opts o = opts_in(ck);
    weft_train_result r, e;
    CHECK(weft_train(cfg, &o, &r) == WEFT_OK && r.steps == 10);
    snprintf(path, sizeof path, "%s/ckpt-000010.safetensors", ck);
    CHECK(weft_evaluate(cfg, path, &o, &e) == WEFT_OK);
    CHECK(e.steps == 10);
    CHECK_NEAR(e.test_loss, r.test_loss, 1e-9);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    weft_eval_print_final(f, &e);
    fclose(f);
    CHECK(buf && !strncmp(buf, "final: test_acc=", 16) && strstr(buf, " steps=10 ") && !strstr(buf, "nan") &&
          !strstr(buf, "train_loss") && !strstr(buf, "samples_per_s"));
    if (buf && (strstr(buf, "nan") || !strstr(buf, " steps=10 "))) fprintf(stderr, "eval line: %s", buf);
    free(buf);
    weft_model_cfg_free(cfg);
}

// A checkpoint of one optimiser (Adam) resumed by a model file with another
// (SGD, whose only state is a step count) is refused, naming both; so is a
// checkpoint written before the optimiser was recorded (judged by its state
// names), and one whose optimiser kept state this one's settings do not.
// [net] warmup precedes every schedule, not only cosine: SGD at lr 0.1 with 2 warm-up steps makes its first
// update at lr 0.05, bit for bit the first step of lr 0.05 without warm-up; its second at 0.1.
static void test_warmup_constant(void) {
    static const char *net = "[net]\ndataset = fmnist\nbatch = 16\nloss = cross_entropy\nseed = 4\noptimizer = sgd\n%s\n"
                             "[flatten]\n[linear]\nin = 784\nout = 10\n";
    const char *lr[3] = {"lr = 0.1\nwarmup = 2", "lr = 0.05", "lr = 0.1\nwarmup = 2\nschedule = step\nstep_size = 5"};
    char path[3][2][512];
    for (int k = 0; k < 3; k++) {
        char text[512], ck[300];
        snprintf(text, sizeof text, net, lr[k]);
        snprintf(ck, sizeof ck, "%s/ck_warm%d", g_dir, k);
        for (int steps = 1; steps <= 2; steps++) {
            weft_model_cfg *cfg = cfg_of(text);
            char sv[8];
            snprintf(sv, sizeof sv, "%d", steps);
            CHECK(cfg && weft_model_cfg_set(cfg, "steps", sv) == WEFT_OK);
            weft_train_opts o = opts_in(ck);
            weft_train_result r;
            CHECK(cfg && weft_train(cfg, &o, &r) == WEFT_OK && r.steps == steps);
            snprintf(path[k][steps - 1], sizeof path[k][steps - 1], "%s/ckpt-%06d.safetensors", ck, steps);
            weft_model_cfg_free(cfg);
        }
    }
    CHECK(same_ckpt(path[0][0], path[1][0])); // step 1 at 0.1 * 1/2
    CHECK(same_ckpt(path[2][0], path[1][0])); // the step schedule warms up too
    CHECK(same_ckpt(path[0][1], path[2][1])); // step 2 at 0.1 in both (step_size 5: no decay yet)
    fprintf(stderr, "(a difference below is expected)\n");
    CHECK(!same_ckpt(path[0][1], path[1][1])); // and not at 0.05
}

static void test_resume_other_optimizer(void) {
    // k_mlp with another optimiser line (momentum: a [net] key, not an override)
    char text[3][512];
    const char *opt = strstr(k_mlp, "optimizer = adam"), *rest = opt + strlen("optimizer = adam");
    const char *lines[3] = {"optimizer = adam", "optimizer = sgd", "optimizer = sgd\nmomentum = 0.9"};
    for (int i = 0; i < 3; i++) snprintf(text[i], sizeof text[i], "%.*s%s%s", (int)(opt - k_mlp), k_mlp, lines[i], rest);
    weft_model_cfg *adam = cfg_of(text[0]), *sgd = cfg_of(text[1]), *sgdm = cfg_of(text[2]);
    CHECK(adam && sgd && sgdm);
    if (!adam || !sgd || !sgdm) return;
    char ck[300], path[512];
    snprintf(ck, sizeof ck, "%s/ck_optim", g_dir);
    CHECK(weft_model_cfg_set(adam, "steps", "5") == WEFT_OK && weft_model_cfg_set(sgd, "steps", "10") == WEFT_OK);
    weft_train_opts o = opts_in(ck);
    weft_train_result r;
    CHECK(weft_train(adam, &o, &r) == WEFT_OK);
    snprintf(path, sizeof path, "%s/ckpt-000005.safetensors", ck);
    char kind[32];
    ckpt_meta(path, "optimizer", kind, sizeof kind);
    CHECK(!strcmp(kind, "adam"));
    o.resume = true;
    CHECK(weft_train(sgd, &o, &r) != WEFT_OK && wt_error_has("ckpt-000005") &&
          wt_error_has("written by optimiser adam, but the model file's optimiser is sgd"));
    // the same file without the "optimizer" record (as written before it existed)
    weft_safetensors *s = weft_safetensors_load(path);
    CHECK(s != NULL);
    if (s) {
        int n = weft_safetensors_count(s), nm = 0;
        const char *names[64], *keys[16], *vals[16];
        weft_tensor *ts[64];
        for (int i = 0; i < n && i < 64; i++) names[i] = weft_safetensors_name_at(s, i), ts[i] = weft_safetensors_tensor_at(s, i);
        for (int i = 0; i < weft_safetensors_meta_count(s) && nm < 16; i++)
            if (strcmp(weft_safetensors_meta_key_at(s, i), "optimizer"))
                keys[nm] = weft_safetensors_meta_key_at(s, i), vals[nm++] = weft_safetensors_meta_value_at(s, i);
        CHECK(n <= 64 && weft_safetensors_save(path, n, names, ts, nm, keys, vals) == WEFT_OK);
        weft_safetensors_free(s);
    }
    ckpt_meta(path, "optimizer", kind, sizeof kind);
    CHECK(kind[0] == 0);
    CHECK(weft_train(sgd, &o, &r) != WEFT_OK && wt_error_has("written by adam or adamw") &&
          wt_error_has("the model file's optimiser is sgd"));
    // adam resumes its own old-format file
    CHECK(weft_model_cfg_set(adam, "steps", "8") == WEFT_OK);
    CHECK(weft_train(adam, &o, &r) == WEFT_OK && r.steps == 8);
    // sgd with momentum, resumed without it: the momentum buffers would be dropped
    char ck2[300];
    snprintf(ck2, sizeof ck2, "%s/ck_momentum", g_dir);
    weft_train_opts o2 = opts_in(ck2);
    CHECK(weft_model_cfg_set(sgdm, "steps", "5") == WEFT_OK && weft_train(sgdm, &o2, &r) == WEFT_OK);
    o2.resume = true;
    CHECK(weft_train(sgd, &o2, &r) != WEFT_OK && wt_error_has("momentum_buffer") && wt_error_has("settings differ"));
    weft_model_cfg_free(adam);
    weft_model_cfg_free(sgd);
    weft_model_cfg_free(sgdm);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/weft_test_train_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    wt_write_fmnist_split(g_dir, "train", 500, 1);
    wt_write_fmnist_split(g_dir, "t10k", 200, 2);
    RUN(test_learns_and_evaluates);
    RUN(test_resume_bit_identical);
    RUN(test_nan_loss_stops);
    RUN(test_language_model);
    RUN(test_hinge_loss);
    RUN(test_device);
    RUN(test_device_clip);
    RUN(test_precision);
    RUN(test_f16_resume_scale);
    RUN(test_f16_clip);
    RUN(test_eval_reports_step);
    RUN(test_resume_other_optimizer);
    RUN(test_warmup_constant);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    return wt_summary();
}
