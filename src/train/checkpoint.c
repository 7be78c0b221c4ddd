// Training checkpoints: everything needed to continue bit-identically.
//   tensors   model.<name>        parameters and buffers
//             optim.<param>.<s>   optimiser state (exp_avg, step, ...)
//   metadata  step, epoch, loader_epoch, loader_index, dropout_seed, dropout_offset, model,
//             optimizer (its kind: sgd, adam, ...), and for f16 runs loss_scale and
//             loss_scale_good (the grad scaler's state)
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/core_impl.h"
#include "train_impl.h"

typedef struct {
    int n, cap;
    char **names;
    weft_tensor **ts;
} list;

static bool list_add(list *l, const char *name, weft_tensor *t) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        char **nn = realloc(l->names, sizeof(char *) * (size_t)cap);
        if (nn) l->names = nn;
        weft_tensor **nt = realloc(l->ts, sizeof(weft_tensor *) * (size_t)cap);
        if (nt) l->ts = nt;
        if (!nn || !nt) return false;
        l->cap = cap;
    }
    l->names[l->n] = strdup(name);
    l->ts[l->n] = t;
    return l->names[l->n++] != NULL;
}
static void list_free(list *l) {
    for (int i = 0; i < l->n; i++) free(l->names[i]);
    free(l->names);
    free(l->ts);
}

int weft_run_meta(weft_run *r, const char **keys, char (*v)[32]) {
    int64_t le = 0, li = 0;
    if (r->loader) weft_loader_position(r->loader, &le, &li);
    uint64_t dseed, doff;
    weft_generator_get_state(r->dropout_gen, &dseed, &doff);
    static const char *const names[] = {"step", "epoch", "loader_epoch", "loader_index", "dropout_seed",
                                        "dropout_offset", "model", "optimizer"};
    snprintf(v[0], 32, "%" PRId64, r->step);
    snprintf(v[1], 32, "%" PRId64, r->epoch);
    snprintf(v[2], 32, "%" PRId64, le);
    snprintf(v[3], 32, "%" PRId64, li);
    snprintf(v[4], 32, "%" PRIu64, dseed);
    snprintf(v[5], 32, "%" PRIu64, doff);
    snprintf(v[6], 32, "%.31s", r->cfg->net.name);
    snprintf(v[7], 32, "%.31s", weft_optim_kind_name(weft_optim_get_opts(r->optim)->kind));
    int nk = 8;
    for (int i = 0; i < nk; i++) keys[i] = names[i];
    if (r->scaler) { // f16: the scale as "%.17g" reads back as the same double
        double scale;
        int64_t good;
        weft_grad_scaler_get_state(r->scaler, &scale, &good);
        snprintf(v[8], 32, "%.17g", scale);
        snprintf(v[9], 32, "%" PRId64, good);
        keys[nk++] = "loss_scale";
        keys[nk++] = "loss_scale_good";
    }
    return nk;
}

weft_status weft_run_save(weft_run *r) {
    list l = {0};
    char name[512];
    bool ok = true;
    for (int i = 0; ok && i < r->n_params; i++) ok = list_add(&l, r->names[i], r->params[i]);
    int nb = weft_module_buffer_count(r->net);
    for (int i = 0; ok && i < nb; i++) {
        strcpy(name, "model.");
        weft_tensor *b = weft_module_buffer_at(r->net, i, name + 6, sizeof name - 6);
        ok = list_add(&l, name, b);
    }
    int ns = weft_optim_state_count(r->optim);
    for (int i = 0; ok && i < ns; i++) {
        strcpy(name, "optim.");
        weft_tensor *s = weft_optim_state_at(r->optim, i, name + 6, sizeof name - 6);
        ok = list_add(&l, name, s);
    }
    if (!ok) {
        list_free(&l);
        return weft_error(WEFT_ERR_OOM, "checkpoint: out of memory");
    }
    char v[WEFT_RUN_META_MAX][32];
    const char *keys[WEFT_RUN_META_MAX], *vals[WEFT_RUN_META_MAX];
    int nk = weft_run_meta(r, keys, v);
    for (int i = 0; i < nk; i++) vals[i] = v[i];
    char path[1024];
    weft_status st = weft_mkdirs(r->opts.ckpt_dir);
    if (!st) {
        weft_ckpt_path(r->opts.ckpt_dir, r->step, path, sizeof path);
        st = weft_safetensors_save(path, l.n, (const char *const *)l.names, l.ts, nk, keys, vals);
    }
    list_free(&l);
    return st;
}

static bool meta_u64(const weft_meta_src *m, const char *key, uint64_t *out) {
    const char *s = m->get(m->src, key);
    if (!s || *s == '-') return false;
    char *end;
    unsigned long long v = strtoull(s, &end, 10); // generator seeds use all 64 bits
    if (end == s || *end) return false;
    *out = v;
    return true;
}
static bool meta_i64(const weft_meta_src *m, const char *key, int64_t *out) {
    uint64_t v;
    if (!meta_u64(m, key, &v) || v > (uint64_t)INT64_MAX) return false;
    *out = (int64_t)v;
    return true;
}

static bool meta_f64(const weft_meta_src *m, const char *key, double *out) {
    const char *s = m->get(m->src, key);
    if (!s) return false;
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end) return false;
    *out = v;
    return true;
}

static const char *st_meta(const void *src, const char *key) { return weft_safetensors_meta(src, key); }

// Copy every parameter and buffer of the model from the file.
static weft_status load_model(weft_run *r, const weft_safetensors *st, const char *path) {
    char name[512];
    for (int i = 0; i < r->n_params; i++) {
        weft_status s = weft_safetensors_copy_to(st, r->names[i], r->params[i]);
        if (s) return weft_error(s, "%s: %s", path, weft_last_error());
    }
    int nb = weft_module_buffer_count(r->net);
    for (int i = 0; i < nb; i++) {
        strcpy(name, "model.");
        weft_tensor *b = weft_module_buffer_at(r->net, i, name + 6, sizeof name - 6);
        weft_status s = weft_safetensors_copy_to(st, name, b);
        if (s) return weft_error(s, "%s: %s", path, weft_last_error());
    }
    return WEFT_OK;
}

static const weft_tensor *optim_lookup(const char *name, void *user) {
    char full[512];
    snprintf(full, sizeof full, "optim.%s", name);
    return weft_safetensors_find((const weft_safetensors *)user, full);
}

// The model's parameters and buffers only (eval, sample); r->step becomes
// the checkpoint's step, or -1 for a file that does not record one.
weft_status weft_run_load_weights(weft_run *r, const char *path) {
    size_t n = strlen(path);
    if (n > 14 && !strcmp(path + n - 14, ".manifest.json")) return weft_mp_load_weights(r, path); // a model-parallel one
    weft_safetensors *st = weft_safetensors_load(path);
    if (!st) return weft_last_status();
    weft_status s = load_model(r, st, path);
    weft_meta_src m = {st_meta, st};
    if (!meta_i64(&m, "step", &r->step)) r->step = -1;
    weft_safetensors_free(st);
    return s;
}

// The optimiser whose state a file of optim.<param>.<state> tensors holds,
// judged by a state name (files from before the "optimizer" metadata).
static const char *kind_of_state(const char *state) {
    static const char *const map[][2] = {{"exp_avg", "adam or adamw"},  {"exp_avg_sq", "adam or adamw"},
                                         {"max_exp_avg_sq", "adam or adamw (amsgrad)"}, {"sum", "adagrad"},
                                         {"square_avg", "rmsprop"},      {"grad_avg", "rmsprop (centered)"},
                                         {"momentum_buffer", "an optimiser with momentum"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(state, map[i][0])) return map[i][1];
    return "another optimiser";
}

// The checkpoint's optimiser state must be the run's optimiser's: the kind
// it records (if any) is the model file's, and it holds no state tensor that
// this optimiser lacks (missing ones are weft_optim_load_state's error).
// Without this, Adam's state resumed into an SGD model file (whose only
// state is a step count) would load without a word.
weft_status weft_run_check_optimizer(const weft_run *r, const char *theirs, const char *what);

static weft_status check_optimizer(const weft_run *r, const weft_safetensors *st, const char *path) {
    const char *mine = weft_optim_kind_name(weft_optim_get_opts(r->optim)->kind);
    const char *theirs = weft_safetensors_meta(st, "optimizer");
    weft_status ks = weft_run_check_optimizer(r, theirs, path);
    if (ks) return ks;
    for (int i = 0; i < weft_safetensors_count(st); i++) {
        const char *name = weft_safetensors_name_at(st, i);
        if (strncmp(name, "optim.", 6) || weft_optim_state_find(r->optim, name + 6)) continue;
        const char *dot = strrchr(name, '.'), *state = dot + 1;
        if (theirs) // the same kind with other settings (momentum, amsgrad, centered)
            return weft_error(WEFT_ERR_FORMAT,
                              "%s: checkpoint holds optimiser state '%s' that the model file's %s does not keep "
                              "(its settings differ from the checkpoint's)", path, name + 6, mine);
        return weft_error(WEFT_ERR_FORMAT,
                          "%s: checkpoint holds optimiser state '%s', written by %s, but the model file's optimiser "
                          "is %s (resume with the same optimiser, or start a new --ckpt-dir)", path, name + 6,
                          kind_of_state(state), mine);
    }
    return WEFT_OK;
}

weft_status weft_run_resume(weft_run *r) {
    int64_t step;
    char path[1024];
    weft_status s = weft_ckpt_latest(r->opts.ckpt_dir, &step, path, sizeof path);
    int64_t ms = -1;
    if (!s) s = weft_manifest_latest(r->opts.ckpt_dir, &ms);
    if (s) return s;
    if (ms > step) return weft_mp_resume(r); // a newer model-parallel checkpoint: its pieces, read whole
    if (step < 0) return WEFT_OK;            // nothing to resume from: start fresh
    return weft_run_resume_from(r, path);
}

// The checkpoint's counters: read and checked before anything is loaded.
typedef struct {
    int64_t step, epoch, le, li;
    uint64_t dseed, doff;
} run_meta;

static weft_status read_meta(const weft_meta_src *m, const char *what, run_meta *out) {
    if (!meta_i64(m, "step", &out->step) || !meta_i64(m, "epoch", &out->epoch) || !meta_i64(m, "loader_epoch", &out->le) ||
        !meta_i64(m, "loader_index", &out->li) || !meta_u64(m, "dropout_seed", &out->dseed) ||
        !meta_u64(m, "dropout_offset", &out->doff))
        return weft_error(WEFT_ERR_FORMAT, "%s: not a weft training checkpoint (metadata missing)", what);
    if (out->step > INT64_C(1) << 53 || out->epoch > INT64_C(1) << 53) // counts the loop adds to and turns into doubles
        return weft_error(WEFT_ERR_FORMAT, "%s: step %lld / epoch %lld out of range (at most 2^53)", what,
                          (long long)out->step, (long long)out->epoch);
    return WEFT_OK;
}

weft_status weft_run_apply_meta(weft_run *r, const weft_meta_src *m, const char *what) {
    run_meta rm = {0};
    weft_status s = read_meta(m, what, &rm);
    // f16: the loss scale and its growth tracker continue where they were (a
    // checkpoint without them, from an f32 / bf16 run, leaves the initial scale)
    double scale;
    int64_t good = 0;
    if (!s && r->scaler && meta_f64(m, "loss_scale", &scale)) {
        meta_i64(m, "loss_scale_good", &good);
        s = weft_grad_scaler_set_state(r->scaler, scale, good);
        if (s) s = weft_error(s, "%s: %s", what, weft_last_error());
    }
    if (s) return s;
    weft_optim_set_step_count(r->optim, rm.step);
    weft_generator_set_state(r->dropout_gen, rm.dseed, rm.doff);
    r->step = rm.step;
    r->epoch = rm.epoch;
    if (r->loader) return weft_loader_set_position(r->loader, rm.le, rm.li);
    return WEFT_OK;
}

weft_status weft_run_check_optimizer(const weft_run *r, const char *theirs, const char *what) {
    const char *mine = weft_optim_kind_name(weft_optim_get_opts(r->optim)->kind);
    if (theirs && strcmp(theirs, mine))
        return weft_error(WEFT_ERR_FORMAT,
                          "%s: checkpoint written by optimiser %s, but the model file's optimiser is %s (resume with "
                          "the same optimiser, or start a new --ckpt-dir)", what, theirs, mine);
    return WEFT_OK;
}

weft_status weft_run_resume_from(weft_run *r, const char *path) {
    weft_safetensors *st = weft_safetensors_load(path);
    if (!st) return weft_last_status();
    weft_meta_src m = {st_meta, st};
    run_meta rm = {0};
    weft_status s = read_meta(&m, path, &rm);
    if (!s) s = check_optimizer(r, st, path);
    if (!s) s = load_model(r, st, path);
    if (!s) {
        s = weft_optim_load_state(r->optim, optim_lookup, st);
        if (s) s = weft_error(s, "%s: %s", path, weft_last_error());
    }
    if (!s) s = weft_run_apply_meta(r, &m, path);
    weft_safetensors_free(st);
    return s;
}
