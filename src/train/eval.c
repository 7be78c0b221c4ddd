// `weft eval` and `weft sample`: a model file plus a checkpoint.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/core_impl.h"
#include "train_impl.h"

weft_status weft_evaluate(const weft_model_cfg *cfg, const char *ckpt, const weft_train_opts *opts,
                          weft_train_result *out) {
    if (!cfg || !ckpt || !out) return weft_error(WEFT_ERR_ARG, "evaluate: NULL argument");
    weft_run run = {0};
    run.cfg = cfg;
    if (opts) run.opts = *opts;
    memset(out, 0, sizeof *out);
    out->language_model = cfg->net.dataset == WEFT_CFG_KJV;
    out->test_loss = out->test_acc = out->val_loss = out->train_loss = NAN;
    weft_status st = weft_run_load_data(&run);
    if (!st) st = weft_run_build(&run, false);
    if (!st) st = weft_run_load_weights(&run, ckpt);
    struct timespec ts0, ts1;
    clock_gettime(CLOCK_MONOTONIC, &ts0);
    double loss = NAN, acc = NAN;
    if (!st) st = weft_run_evaluate(&run, &loss, &acc);
    if (!st) {
        if (out->language_model) out->val_loss = loss;
        else {
            out->test_loss = loss;
            out->test_acc = acc;
        }
        clock_gettime(CLOCK_MONOTONIC, &ts1);
        out->seconds = (double)(ts1.tv_sec - ts0.tv_sec) + 1e-9 * (double)(ts1.tv_nsec - ts0.tv_nsec);
        out->steps = run.step; // the checkpoint's (-1: not recorded)
    }
    weft_run_free(&run);
    return st;
}

// weft_evaluate's fields only: train_loss and the throughput belong to a
// training run, and are left out rather than printed as nan / 0.
void weft_eval_print_final(FILE *f, const weft_train_result *r) {
    char steps[32] = "";
    if (r->steps >= 0) snprintf(steps, sizeof steps, " steps=%lld", (long long)r->steps);
    if (r->language_model) fprintf(f, "final: val_loss=%.4f%s seconds=%.1f\n", r->val_loss, steps, r->seconds);
    else fprintf(f, "final: test_acc=%.4f test_loss=%.4f%s seconds=%.1f\n", r->test_acc, r->test_loss, steps, r->seconds);
    fflush(f);
}

weft_status weft_sample(const weft_model_cfg *cfg, const char *ckpt, const char *prompt, int64_t n_tokens,
                        double temperature, uint64_t seed, FILE *out) {
    if (!cfg || !ckpt || !out) return weft_error(WEFT_ERR_ARG, "sample: NULL argument");
    if (cfg->net.dataset != WEFT_CFG_KJV)
        return weft_error(WEFT_ERR_ARG, "sample: %s is not a language model", cfg->path);
    if (temperature < 0 || !isfinite(temperature)) return weft_error(WEFT_ERR_ARG, "sample: bad temperature %g", temperature);
    weft_run run = {0};
    run.cfg = cfg;
    weft_status st = weft_run_build(&run, false);
    if (!st) st = weft_run_load_weights(&run, ckpt);
    int64_t T = cfg->net.context, V = cfg->net.vocab;
    size_t plen = prompt ? strlen(prompt) : 0;
    int64_t cap = (int64_t)plen + n_tokens + 1;
    int64_t *toks = st ? NULL : malloc(sizeof(int64_t) * (size_t)cap);
    float *probs = st ? NULL : malloc(sizeof(float) * (size_t)V);
    if (!st && (!toks || !probs)) st = weft_error(WEFT_ERR_OOM, "sample: out of memory");
    int64_t n = 0;
    if (!st) {
        if (plen == 0) toks[n++] = '\n';
        for (size_t i = 0; i < plen; i++) toks[n++] = (unsigned char)prompt[i];
        if (plen) fputs(prompt, out);
    }
    weft_module_set_training(run.net, false);
    weft_generator *g = weft_generator_create(seed);
    bool prev = weft_grad_set_enabled(false);
    for (int64_t k = 0; !st && k < n_tokens; k++) {
        int64_t start = n > T ? n - T : 0, len = n - start;
        weft_tensor *x = weft_tensor_from_data(toks + start, WEFT_DIMS(1, len), WEFT_I64);
        weft_tensor *logits = weft_module_forward(run.net, x); // (1,len,V)
        weft_tensor *last = logits ? weft_select(logits, 1, len - 1) : NULL; // (1,V)
        weft_tensor *scaled = last && temperature > 0 ? weft_mul_scalar(last, 1.0 / temperature) : NULL;
        weft_tensor *p = scaled ? weft_softmax(scaled, -1) : NULL;
        int64_t next = 0;
        if (!last || (temperature > 0 && !p)) st = weft_last_status();
        else if (temperature == 0) {
            weft_tensor *am = weft_argmax(last, -1, false);
            next = (int64_t)weft_tensor_item(am);
            weft_tensor_free(am);
        } else {
            weft_tensor_to_f32(p, probs, V);
            weft_tensor *u = weft_tensor_rand(WEFT_DIMS(1), WEFT_F64, g);
            double r = weft_tensor_item(u), c = 0;
            weft_tensor_free(u);
            next = V - 1;
            for (int64_t v = 0; v < V; v++) {
                c += probs[v];
                if (r < c) {
                    next = v;
                    break;
                }
            }
        }
        weft_tensor *t[] = {x, logits, last, scaled, p};
        for (int i = 0; i < 5; i++) weft_tensor_free(t[i]);
        if (st) break;
        toks[n++] = next;
        fputc((int)next, out);
    }
    fputc('\n', out);
    weft_grad_set_enabled(prev);
    weft_generator_free(g);
    free(toks);
    free(probs);
    weft_run_free(&run);
    return st;
}
