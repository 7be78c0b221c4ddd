// The byte-level GPT trained on the accelerator against the same run on the CPU, tensor by tensor (issue 16's
// learning check, taken apart): from the same initial weights and batches, after step 1 each parameter's
// AdamW first moment is 0.1 x its gradient and the second 0.05 x its square, so the step-1 checkpoints
// compare every gradient of the network, one by one; after step 3 they compare the optimiser's history,
// the training loss and the validation loss. An evaluation follows every step (as at an epoch's end), so the
// steps after one run as they do in a long run. In f32 and under bf16 autocast, so every path a GPU step
// takes (tensor-core attention, half-precision norms, fused add + norm, cuBLASLt epilogues, the weight cast
// cache, multi-tensor AdamW, the evaluation's no-grad forward) meets its CPU twin at its real sizes.
//
// On a GPU (cuda:0) the network has gpt2-small-bytes' width (d 768, 12 heads of 64, context 1024) and two
// blocks; each tensor's relative error (the norm of the difference over the CPU's norm) must stay within
// the rounding of its precision. Without one the mock accelerator of tests/mock_device.c runs the CPU's
// kernels through the device paths at a small width, and everything must match bit for bit. The table of
// errors is printed either way (tools/gpu-session.sh's parity step keeps it).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft_test.h"

static char g_dir[256], g_text[300];

// ||a - b|| / ||b|| over every element (host tensors of one dtype and size); -1 when they do not match up.
static double rel_err(const weft_tensor *a, const weft_tensor *b, double *norm_b) {
    int64_t n = weft_tensor_numel(b);
    if (weft_tensor_numel(a) != n || weft_tensor_dtype(a) != WEFT_F32 || weft_tensor_dtype(b) != WEFT_F32) return -1;
    const float *x = weft_tensor_data(a), *y = weft_tensor_data(b);
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        s += (double)y[i] * y[i];
    }
    *norm_b = sqrt(s);
    return s > 0 ? sqrt(d / s) : (d > 0 ? INFINITY : 0);
}

// Compares the optimiser states named *.exp_avg / *.exp_avg_sq (and, with params, every parameter) of
// two checkpoints: each within tol (0: bit for bit), or, given a third checkpoint ref (the CPU's run in f32),
// within max(tol, 3 x the CPU's own bf16 error against it), tensor by tensor: a gradient that rounding
// disturbs a lot on the CPU may move as much on the GPU, a wrong kernel moves it much more. Returns the worst
// error over its tolerance.
static double compare_ckpt(const char *what, const char *dev_path, const char *cpu_path, const char *ref_path,
                           double tol, bool params) {
    weft_safetensors *d = weft_safetensors_load(dev_path), *c = weft_safetensors_load(cpu_path);
    weft_safetensors *f = ref_path ? weft_safetensors_load(ref_path) : NULL;
    CHECK(d && c && (!ref_path || f));
    double worst = 0;
    int compared = 0;
    for (int i = 0; d && c && (!ref_path || f) && i < weft_safetensors_count(c); i++) {
        const char *name = weft_safetensors_name_at(c, i);
        size_t len = strlen(name);
        bool state = !strncmp(name, "optim.", 6) &&
                     ((len > 8 && !strcmp(name + len - 8, ".exp_avg")) || (len > 11 && !strcmp(name + len - 11, ".exp_avg_sq")));
        bool param = !strncmp(name, "model.", 6);
        if (!state && !(params && param)) continue;
        weft_tensor *tc = weft_safetensors_tensor_at(c, i), *td = weft_safetensors_find(d, name);
        weft_tensor *tf = f ? weft_safetensors_find(f, name) : NULL;
        double norm = 0, e = td ? rel_err(td, tc, &norm) : -1, nf, ef = tf ? rel_err(tc, tf, &nf) : 0;
        double t = ef > 0 ? fmax(tol, 3 * ef) : tol;
        bool ok = e >= 0 && ef >= 0 && (t > 0 ? e <= t : e == 0);
        if (!ok) fprintf(stderr, "%s: %s differs: relative error %.3g (tolerance %.3g)\n", what, name, e, t);
        CHECK(ok);
        if (f) printf("  %-5s %-44s rel_err %.3e  (cpu bf16 vs f32 %.3e)  norm %.4g\n", what, name, e, ef, norm);
        else printf("  %-5s %-44s rel_err %.3e  norm %.4g\n", what, name, e, norm);
        double r = e < 0 || ef < 0 ? INFINITY : t > 0 ? e / t : (e > 0 ? INFINITY : 0);
        if (r > worst) worst = r;
        compared++;
    }
    CHECK(compared > 0);
    weft_safetensors_free(d);
    weft_safetensors_free(c);
    weft_safetensors_free(f);
    return worst;
}

// One run of `steps` steps on device dev ("cpu" or "cuda"), a checkpoint after each; fills *r.
static bool run(const char *cfg_text, const char *dev, const char *dir, weft_train_result *r) {
    weft_model_cfg *cfg = weft_model_cfg_parse(cfg_text, strlen(cfg_text), "gpt.cfg");
    CHECK(cfg != NULL);
    if (!cfg) return false;
    weft_train_opts o = {.ckpt_dir = dir, .ckpt_every = 1, .keep_last = 10, .quiet = true, .text_path = g_text,
                         .eval_batches = 2, .device = dev};
    weft_status st = weft_train(cfg, &o, r);
    if (st) fprintf(stderr, "%s: %s\n", dev, weft_last_error());
    CHECK(st == WEFT_OK && r->steps == 3);
    weft_model_cfg_free(cfg);
    return st == WEFT_OK;
}

// The runs of one precision, on the CPU and on the accelerator, in g_dir/<precision>_cpu and _dev.
static bool run_pair(const char *precision, bool small, weft_train_result *rc, weft_train_result *rd) {
    // gpt2-small-bytes' width and optimiser on a GPU (or with WEFT_TEST_FULL_WIDTH=1); two blocks, and a
    // batch the CPU twin can take
    int d = small ? 64 : 768, heads = small ? 4 : 12, ctx = small ? 64 : 1024, batch = 2;
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "[net]\ndataset = kjv\ncontext = %d\nbatch = %d\nsteps = 3\noptimizer = adamw\nlr = 6e-4\n"
             "betas = 0.9, 0.95\nweight_decay = 0.1\nwarmup = 2\nprecision = %s\nseed = 1\neval_every = 1\n"
             "[embedding]\nvocab = 256\ndim = %d\nposition = learned\n[transformer]\nheads = %d\nblocks = 2\n"
             "[layernorm]\n[linear]\nout = vocab\n",
             ctx, batch, precision, d, heads);
    char dc[400], dd[400];
    snprintf(dc, sizeof dc, "%s/%s_cpu", g_dir, precision);
    snprintf(dd, sizeof dd, "%s/%s_dev", g_dir, precision);
    if (!run(cfg, "cpu", dc, rc) || !run(cfg, "cuda", dd, rd)) return false;
    for (int k = 0; k < 2; k++) { // only steps 1 and 3 are compared (at gpt2 width a checkpoint is 185 MB)
        char two[500];
        snprintf(two, sizeof two, "%s/ckpt-000002.safetensors", k ? dd : dc);
        unlink(two);
    }
    printf("%s, d %d, context %d, %s: train loss %.6f (cpu %.6f), val loss %.6f (cpu %.6f)\n", precision, d, ctx,
           small ? "small" : "gpt2-small-bytes' width", rd->train_loss, rc->train_loss, rd->val_loss, rc->val_loss);
    return true;
}

static void ckpt_path(char *buf, size_t n, const char *precision, const char *side, int step) {
    snprintf(buf, n, "%s/%s_%s/ckpt-%06d.safetensors", g_dir, precision, side, step);
}

// f32 on a GPU: cuBLAS and the attention kernels sum in f32 in other orders (1e-6 per op), so every gradient
// agrees within 2e-3. bf16: both sides round every matmul output, norm output and attention tile to bf16
// (2^-9 relative), in other places where the sums differ in their last f32 bits, so a gradient moves by a
// few of those roundings: each tensor's tolerance is 3 x the CPU's own bf16-vs-f32 error for it (at least
// 1e-2). A wrong kernel moves a gradient by its whole size. On the mock accelerator (the CPU's kernels) the
// runs must be the same bits.
static void test_device_vs_cpu(void) {
    bool mock = false;
    weft_device acc;
    CHECK(wt_accelerator(&acc, &mock));
    const char *fw = getenv("WEFT_TEST_FULL_WIDTH");
    bool small = mock && !(fw && *fw == '1');
    weft_train_result rc[2], rd[2];
    const char *prec[2] = {"f32", "bf16"};
    for (int k = 0; k < 2; k++)
        if (!run_pair(prec[k], small, &rc[k], &rd[k])) return;
    for (int k = 0; k < 2; k++) {
        char a[600], b[600], f[600];
        double worst[2];
        for (int step = 1, j = 0; step <= 3; step += 2, j++) {
            ckpt_path(a, sizeof a, prec[k], "dev", step);
            ckpt_path(b, sizeof b, prec[k], "cpu", step);
            ckpt_path(f, sizeof f, "f32", "cpu", step);
            double tol = mock ? 0 : k ? 1e-2 : 2e-3;
            worst[j] = compare_ckpt(step == 1 ? "step1" : "step3", a, b, k && !mock ? f : NULL, tol, step == 3);
        }
        printf("%s: worst error over its tolerance: %.3g after step 1 (every gradient), %.3g after step 3\n",
               prec[k], worst[0], worst[1]);
        if (mock) {
            CHECK(rd[k].train_loss == rc[k].train_loss && rd[k].val_loss == rc[k].val_loss);
        } else {
            CHECK_NEAR(rd[k].train_loss, rc[k].train_loss, k ? 5e-3 : 1e-4);
            CHECK_NEAR(rd[k].val_loss, rc[k].val_loss, k ? 5e-3 : 1e-4);
        }
    }
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/weft_test_devgpt_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    // a text of some variety (a repeated sentence would be learned in a step): verses built from word lists
    snprintf(g_text, sizeof g_text, "%s/text.txt", g_dir);
    if (!wt_write_verses(g_text, 3000)) return 1;
    RUN(test_device_vs_cpu);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    return wt_summary();
}
