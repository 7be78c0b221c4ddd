// Checkpoints of model-parallel runs (docs/parallelism.md): every rank
// writes the pieces it holds of the parameters, buffers and optimiser state,
// each placed in its global tensor by the tensor-parallel split; reading
// intersects the pieces this rank holds now with the stored ones
// (weft_shard_*), so a run resumes on any layout, and a single process
// resumes from a model-parallel checkpoint (r->mp NULL: every tensor whole).
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft.h>
#include <weft/parallel.h>

#include "../core/core_impl.h"
#include "train_impl.h"

typedef struct {
    int dim, groups; // split dim of the whole tensor (-1: the same on every tp rank), blocks along it
} split;

typedef struct {
    int n, cap;
    weft_shard *s;
    char **names;        // owned
    weft_tensor **views; // owned (reshaped views of grouped tensors)
} shard_list;

static void list_free(shard_list *l) {
    for (int i = 0; i < l->n; i++) {
        free(l->names[i]);
        weft_tensor_free(l->views[i]);
    }
    free(l->s);
    free(l->names);
    free(l->views);
}

// Appends tensor t (this rank's piece) named `name`, placed by sp.
static weft_status add(const weft_run *r, shard_list *l, const char *prefix, const char *name, weft_tensor *t, split sp) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        weft_shard *s = realloc(l->s, sizeof *s * (size_t)cap);
        if (s) l->s = s;
        char **nm = realloc(l->names, sizeof *nm * (size_t)cap);
        if (nm) l->names = nm;
        weft_tensor **v = realloc(l->views, sizeof *v * (size_t)cap);
        if (v) l->views = v;
        if (!s || !nm || !v) return weft_error(WEFT_ERR_OOM, "checkpoint: out of memory");
        l->cap = cap;
    }
    const weft_parallel *L = weft_mp_layout(r);
    int tp = L ? L->tp : 1, tr = L ? L->tp_rank : 0, dr = L ? L->dp_rank : 0;
    size_t len = strlen(prefix) + strlen(name) + 1;
    char *full = malloc(len);
    if (!full) return weft_error(WEFT_ERR_OOM, "checkpoint: out of memory");
    snprintf(full, len, "%s%s", prefix, name);
    weft_shard *s = &l->s[l->n];
    *s = (weft_shard){.name = full, .local = t};
    l->names[l->n] = full;
    l->views[l->n] = NULL;
    l->n++;
    if (sp.dim < 0 || tp == 1) { // whole: one replica writes it
        s->skip_write = tr != 0 || dr != 0;
        return WEFT_OK;
    }
    s->skip_write = dr != 0;
    int nd = weft_tensor_ndim(t), d0 = sp.dim;
    int64_t v[WEFT_MAX_DIMS];
    if (sp.groups > 1) { // (.., G * b, ..) seen as (.., G, b, ..): rank r's piece is one box in it
        if (nd + 1 > WEFT_MAX_DIMS) return weft_error(WEFT_ERR_SHAPE, "checkpoint: %s has too many dims", full);
        for (int d = 0, e = 0; d < nd; d++) {
            if (d == sp.dim) {
                v[e++] = sp.groups;
                v[e++] = weft_tensor_size(t, d) / sp.groups;
            } else {
                v[e++] = weft_tensor_size(t, d);
            }
        }
        bool prev = weft_grad_set_enabled(false);
        weft_tensor *view = weft_reshape(t, nd + 1, v);
        weft_grad_set_enabled(prev);
        if (!view) return weft_last_status();
        l->views[l->n - 1] = view;
        s->local = view;
        nd++;
        d0 = sp.dim + 1;
    } else {
        for (int d = 0; d < nd; d++) v[d] = weft_tensor_size(t, d);
    }
    s->ndim = nd;
    for (int d = 0; d < nd; d++) s->global[d] = v[d], s->offset[d] = 0;
    s->global[d0] = v[d0] * tp;
    s->offset[d0] = (int64_t)tr * v[d0];
    return WEFT_OK;
}

static split param_split(const weft_run *r, int k) {
    split sp = {-1, 1};
    const weft_parallel *L = weft_mp_layout(r);
    if (L && L->tp > 1 && weft_tp_param_split(r->net, weft_mp_param_index(r, k), &sp.dim, &sp.groups)) sp.dim = -1;
    return sp;
}

// The buffers this rank keeps up to date: those of its pipeline stage's layers.
static bool holds_buffer(const weft_run *r, const weft_tensor *b) { return !r->mp || weft_mp_holds_buffer(r, b); }

// Every tensor of this rank's part: parameters, buffers, optimiser state.
static weft_status collect(const weft_run *r, weft_optim *optim, shard_list *l) {
    weft_status st = WEFT_OK;
    for (int k = 0; !st && k < r->n_params; k++) st = add(r, l, "", r->names[k], r->params[k], param_split(r, k));
    char name[512];
    int nb = weft_module_buffer_count(r->net);
    for (int i = 0; !st && i < nb; i++) {
        weft_tensor *b = weft_module_buffer_at(r->net, i, name, sizeof name);
        if (holds_buffer(r, b)) st = add(r, l, "model.", name, b, (split){-1, 1});
    }
    int ns = optim ? weft_optim_state_count(optim) : 0;
    for (int i = 0; !st && i < ns; i++) {
        weft_tensor *t = weft_optim_state_at(optim, i, name, sizeof name);
        char *dot = strrchr(name, '.');
        split sp = {-1, 1};
        if (dot) { // "<param>.<state>": a state of the parameter's shape is split as it is
            *dot = 0;
            for (int k = 0; k < r->n_params; k++)
                if (!strcmp(r->names[k], name) && weft_tensor_ndim(t) == weft_tensor_ndim(r->params[k]) &&
                    weft_tensor_numel(t) == weft_tensor_numel(r->params[k])) {
                    sp = param_split(r, k);
                    break;
                }
            *dot = '.';
        }
        st = add(r, l, "optim.", name, t, sp);
    }
    return st;
}

static void layout_str(const weft_run *r, char *buf, size_t n) {
    const weft_parallel *L = weft_mp_layout(r);
    snprintf(buf, n, "tp=%d pp=%d dp=%d zero=%d", L ? L->tp : 1, L ? L->pp : 1, L ? L->dp : 1, r->cfg->net.zero);
}

weft_status weft_mp_save(weft_run *r) {
    const weft_parallel *L = weft_mp_layout(r);
    shard_list l = {0};
    weft_status st = weft_mp_gather_optim(r); // ZeRO: the whole optimiser state into r->optim on dp rank 0
    if (!st) st = collect(r, r->optim, &l);
    char v[WEFT_RUN_META_MAX][32], layout[96];
    const char *keys[WEFT_RUN_META_MAX], *vals[WEFT_RUN_META_MAX];
    int nk = weft_run_meta(r, keys, v);
    for (int i = 0; i < nk; i++) vals[i] = v[i];
    layout_str(r, layout, sizeof layout);
    // Collective: a rank that failed above still takes part, with nothing to write.
    weft_status ss = weft_shard_save(L->world, r->opts.ckpt_dir, r->step, layout, st ? 0 : l.n, l.s, nk, keys, vals);
    if (!st) st = ss;
    if (st) r->collective_error = true;
    if (!st && L->rank == 0) st = weft_manifest_keep_last(r->opts.ckpt_dir, r->opts.keep_last > 0 ? r->opts.keep_last : 3);
    list_free(&l);
    return st;
}

static const char *shard_meta(const void *src, const char *key) { return weft_shard_meta(src, key); }

// Every rank reads the step rank 0 chose; a failure anywhere fails all.
static weft_status agree(const weft_parallel *L, weft_status st, weft_run *r) {
    if (!L) return st;
    weft_tensor *t = weft_tensor_scalar(st ? 1 : 0, WEFT_F64);
    weft_status cs = t ? weft_dist_all_reduce(L->world, t, WEFT_REDUCE_MAX) : weft_last_status();
    bool bad = cs || weft_tensor_item(t) != 0;
    weft_tensor_free(t);
    if (cs) return cs;
    if (!bad) return WEFT_OK;
    r->collective_error = true;
    return st ? st : weft_error(WEFT_ERR_IO, "resume: another rank could not read its part of the checkpoint");
}

weft_status weft_mp_resume(weft_run *r) {
    const weft_parallel *L = weft_mp_layout(r);
    const char *dir = r->opts.ckpt_dir;
    double step = -1;
    if (!L || L->rank == 0) {
        int64_t ms = -1, ps = -1;
        weft_status s = weft_manifest_latest(dir, &ms);
        if (!s) s = weft_ckpt_latest(dir, &ps, NULL, 0);
        step = s ? -2 : (double)(ms > ps ? ms : ps);
    }
    if (L) {
        weft_tensor *t = weft_tensor_scalar(step, WEFT_F64);
        weft_status s = t ? weft_dist_broadcast(L->world, t, 0) : weft_last_status();
        step = s ? -2 : weft_tensor_item(t);
        weft_tensor_free(t);
        if (s) return s;
    }
    if (step == -2) {
        r->collective_error = L != NULL;
        return weft_error(WEFT_ERR_IO, "resume: cannot read the checkpoints in %s", dir);
    }
    if (step < 0) {
        if (r->printer && !r->opts.quiet)
            fprintf(r->opts.progress ? r->opts.progress : stderr, "resume: no complete checkpoint in %s; starting fresh\n", dir);
        return WEFT_OK;
    }
    weft_shard_ckpt *k = weft_shard_open(dir, (int64_t)step);
    weft_status st = k ? WEFT_OK : weft_last_status();
    if (!st) st = weft_run_check_optimizer(r, weft_shard_meta(k, "optimizer"), dir);
    shard_list l = {0};
    if (!st) st = collect(r, r->optim, &l); // the whole state of this rank's parameters into r->optim
    for (int i = 0; !st && i < l.n; i++) st = weft_shard_read(k, &l.s[i]);
    list_free(&l);
    if (!st) {
        weft_meta_src m = {shard_meta, k};
        st = weft_run_apply_meta(r, &m, dir);
    }
    weft_shard_close(k);
    if (!st && r->mp) st = weft_mp_after_resume(r); // ZeRO's shards from r->optim; this replica's dropout stream
    st = agree(L, st, r);
    if (st) return st;
    char layout[96];
    layout_str(r, layout, sizeof layout);
    if (r->printer && !r->opts.quiet)
        fprintf(r->opts.progress ? r->opts.progress : stderr, "resumed from step %lld (%s, now %s)\n", (long long)r->step,
                dir, layout);
    return WEFT_OK;
}

// eval / sample from a model-parallel checkpoint (`--ckpt DIR/ckpt-N.manifest.json`):
// the parameters and buffers, read whole from the pieces of every rank.
weft_status weft_mp_load_weights(weft_run *r, const char *manifest) {
    const char *base = strrchr(manifest, '/');
    size_t dl = base ? (size_t)(base - manifest) : 0;
    base = base ? base + 1 : manifest;
    char dir[4096], *end;
    long long step = strncmp(base, "ckpt-", 5) ? -1 : strtoll(base + 5, &end, 10);
    if (step < 0 || strcmp(end, ".manifest.json") || dl >= sizeof dir)
        return weft_error(WEFT_ERR_ARG, "%s: expected a checkpoint manifest DIR/ckpt-<step>.manifest.json", manifest);
    snprintf(dir, sizeof dir, "%.*s", (int)(dl ? dl : 1), dl ? manifest : ".");
    weft_shard_ckpt *k = weft_shard_open(dir, step);
    if (!k) return weft_last_status();
    shard_list l = {0};
    weft_status st = collect(r, NULL, &l);
    for (int i = 0; !st && i < l.n; i++) st = weft_shard_read(k, &l.s[i]);
    list_free(&l);
    r->step = weft_shard_step(k);
    weft_shard_close(k);
    return st;
}
