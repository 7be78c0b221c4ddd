// Checkpoints across layouts (weft/parallel.h): each rank writes the pieces
// it holds, with their place in the global tensor; reading intersects the
// piece a rank holds now with every stored piece, so any layout reads any
// other (resharding when loading, where Megatron needs offline conversion).
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/autograd.h>
#include <weft/io.h>
#include <weft/ops.h>
#include <weft/parallel.h>

#include "../core/core_impl.h"
#include "../tensor/tensor_impl.h"
#include "train_impl.h"

#define SHARDS_KEY "weft.shards"
#define LAYOUT_KEY "weft.layout"

static const char *part_name(int64_t step, int rank, char *buf, size_t n) {
    snprintf(buf, n, "ckpt-%06" PRId64 ".r%d.safetensors", step, rank);
    return buf;
}

static const char *in_dir(const char *dir, const char *file, char *buf, size_t n) {
    size_t dl = strlen(dir);
    int len = snprintf(buf, n, "%s%s%s", dir, dl && dir[dl - 1] == '/' ? "" : "/", file);
    if (len < 0 || (size_t)len >= n) return weft_error_null(WEFT_ERR_ARG, "checkpoint %s: path too long", dir);
    return buf;
}

static bool add_ints(cJSON *o, const char *key, int n, const int64_t *v) {
    cJSON *a = cJSON_AddArrayToObject(o, key);
    for (int d = 0; a && d < n; d++) {
        cJSON *x = cJSON_CreateNumber((double)v[d]);
        if (!x || !cJSON_AddItemToArray(a, x)) return false;
    }
    return a != NULL;
}

// The piece's place checked against the global shape: 0 <= offset, offset + size <= global.
static weft_status check_shard(const weft_shard *s) {
    if (!s->name || !s->local) return weft_error(WEFT_ERR_ARG, "checkpoint: a shard without a name or a tensor");
    int nd = weft_tensor_ndim(s->local);
    if (s->ndim == 0) return WEFT_OK;
    if (s->ndim != nd)
        return weft_error(WEFT_ERR_SHAPE, "checkpoint: shard %s has %d dims, its global tensor %d", s->name, nd, s->ndim);
    for (int d = 0; d < nd; d++) {
        int64_t sz = weft_tensor_size(s->local, d);
        if (s->offset[d] < 0 || s->global[d] < 0 || s->offset[d] > s->global[d] || sz > s->global[d] - s->offset[d])
            return weft_error(WEFT_ERR_SHAPE, "checkpoint: shard %s dim %d: offset %" PRId64 " + size %" PRId64
                              " outside the global size %" PRId64, s->name, d, s->offset[d], sz, s->global[d]);
    }
    return WEFT_OK;
}

static weft_status write_part(const char *dir, int64_t step, int rank, const char *layout, int n,
                              const weft_shard *shards, int n_meta, const char *const *mk, const char *const *mv) {
    weft_status st = WEFT_OK;
    const char **names = calloc((size_t)n + 1, sizeof *names);
    weft_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
    const char **keys = calloc((size_t)n_meta + 2, sizeof *keys), **vals = calloc((size_t)n_meta + 2, sizeof *vals);
    cJSON *map = cJSON_CreateObject();
    char *text = NULL;
    if (!names || !ts || !keys || !vals || !map) st = weft_error(WEFT_ERR_OOM, "checkpoint: out of memory");
    int k = 0;
    for (int i = 0; !st && i < n; i++) {
        const weft_shard *s = &shards[i];
        if ((st = check_shard(s)) || s->skip_write) continue;
        if (s->ndim) {
            cJSON *o = cJSON_CreateObject();
            if (!o || !cJSON_AddItemToObject(map, s->name, o) || !add_ints(o, "global", s->ndim, s->global) ||
                !add_ints(o, "offset", s->ndim, s->offset))
                st = weft_error(WEFT_ERR_OOM, "checkpoint: out of memory");
        }
        names[k] = s->name;
        ts[k++] = s->local;
    }
    int m = 0;
    if (!st && !(text = cJSON_PrintUnformatted(map))) st = weft_error(WEFT_ERR_OOM, "checkpoint: out of memory");
    if (!st) {
        keys[m] = SHARDS_KEY, vals[m++] = text;
        keys[m] = LAYOUT_KEY, vals[m++] = layout ? layout : "";
        for (int i = 0; rank == 0 && i < n_meta; i++) keys[m] = mk[i], vals[m++] = mv[i];
        char file[128], path[4096];
        part_name(step, rank, file, sizeof file);
        st = in_dir(dir, file, path, sizeof path) ? weft_safetensors_save(path, k, names, ts, m, keys, vals)
                                                  : weft_last_status();
    }
    free(text);
    cJSON_Delete(map);
    free(names);
    free(ts);
    free(keys);
    free(vals);
    return st;
}

weft_status weft_shard_save(weft_comm *c, const char *dir, int64_t step, const char *layout, int n,
                            const weft_shard *shards, int n_meta, const char *const *meta_keys,
                            const char *const *meta_values) {
    if (!c || !dir || step < 0 || n < 0 || (n && !shards) || n_meta < 0 || (n_meta && (!meta_keys || !meta_values)))
        return weft_error(WEFT_ERR_ARG, "checkpoint: bad arguments to weft_shard_save");
    int rank = weft_comm_rank(c), size = weft_comm_size(c);
    weft_status st = weft_mkdirs(dir);
    if (!st) st = write_part(dir, step, rank, layout, n, shards, n_meta, meta_keys, meta_values);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", st ? weft_last_error() : "");
    // Agree: the manifest appears only when every part is on disk.
    weft_tensor *bad = weft_tensor_scalar(st ? 1 : 0, WEFT_I32);
    weft_status cst = bad ? weft_dist_all_reduce(c, bad, WEFT_REDUCE_MAX) : weft_last_status();
    int any = cst ? 1 : (int)weft_tensor_item(bad);
    weft_tensor_free(bad);
    if (cst) return cst;
    if (any) return st ? weft_error(st, "%s", msg)
                       : weft_error(WEFT_ERR_IO, "checkpoint %s: another rank failed writing its part of step %" PRId64,
                                    dir, step);
    if (rank == 0) {
        char **parts = calloc((size_t)size, sizeof *parts);
        for (int r = 0; parts && r < size; r++)
            if ((parts[r] = malloc(128))) part_name(step, r, parts[r], 128);
        bool ok = parts != NULL;
        for (int r = 0; ok && r < size; r++) ok = parts[r] != NULL;
        st = ok ? weft_manifest_write(dir, step, size, layout ? layout : "", size, (const char *const *)parts)
                : weft_error(WEFT_ERR_OOM, "checkpoint: out of memory");
        for (int r = 0; parts && r < size; r++) free(parts[r]);
        free(parts);
    }
    // Every rank returns rank 0's outcome.
    weft_tensor *ok0 = weft_tensor_scalar(st ? 1 : 0, WEFT_I32);
    cst = ok0 ? weft_dist_broadcast(c, ok0, 0) : weft_last_status();
    int failed = cst ? 1 : (int)weft_tensor_item(ok0);
    weft_tensor_free(ok0);
    if (cst) return cst;
    if (failed && !st) return weft_error(WEFT_ERR_IO, "checkpoint %s: rank 0 failed writing the manifest of step %" PRId64, dir, step);
    return st;
}

// ---- reading ----
typedef struct piece {
    const char *name; // borrowed from its file
    weft_tensor *t;   // borrowed from its file
    int ndim;
    int64_t global[WEFT_MAX_DIMS], offset[WEFT_MAX_DIMS];
} piece;

struct weft_shard_ckpt {
    int64_t step;
    char layout[128];
    int n_files;
    weft_safetensors **files; // files[0] holds rank 0's metadata
    int n_pieces;
    piece *pieces;
};

void weft_shard_close(weft_shard_ckpt *k) {
    if (!k) return;
    for (int i = 0; i < k->n_files; i++) weft_safetensors_free(k->files[i]);
    free(k->files);
    free(k->pieces);
    free(k);
}

static bool read_ints(const cJSON *a, int nd, int64_t *v) {
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != nd) return false;
    int d = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 9.0e15) return false;
        v[d++] = (int64_t)x->valuedouble;
    }
    return true;
}

// Every tensor of file f as a piece: its place from the "weft.shards" map, else the whole tensor.
static weft_status add_pieces(weft_shard_ckpt *k, const weft_safetensors *f, const char *path) {
    int n = weft_safetensors_count(f);
    const char *text = weft_safetensors_meta(f, SHARDS_KEY);
    cJSON *map = text ? cJSON_Parse(text) : NULL;
    if (text && !cJSON_IsObject(map)) {
        cJSON_Delete(map);
        return weft_error(WEFT_ERR_FORMAT, "checkpoint %s: malformed %s metadata", path, SHARDS_KEY);
    }
    piece *p = realloc(k->pieces, sizeof *p * (size_t)(k->n_pieces + n));
    if (!p && n) {
        cJSON_Delete(map);
        return weft_error(WEFT_ERR_OOM, "checkpoint: out of memory");
    }
    k->pieces = p;
    weft_status st = WEFT_OK;
    for (int i = 0; !st && i < n; i++) {
        piece *q = &k->pieces[k->n_pieces];
        q->name = weft_safetensors_name_at(f, i);
        q->t = weft_safetensors_tensor_at(f, i);
        q->ndim = weft_tensor_ndim(q->t);
        const cJSON *o = map ? cJSON_GetObjectItemCaseSensitive(map, q->name) : NULL;
        for (int d = 0; d < q->ndim; d++) q->global[d] = weft_tensor_size(q->t, d), q->offset[d] = 0;
        if (o && !(read_ints(cJSON_GetObjectItemCaseSensitive(o, "global"), q->ndim, q->global) &&
                   read_ints(cJSON_GetObjectItemCaseSensitive(o, "offset"), q->ndim, q->offset)))
            st = weft_error(WEFT_ERR_FORMAT, "checkpoint %s: tensor %s: bad global shape or offset", path, q->name);
        for (int d = 0; !st && d < q->ndim; d++)
            if (q->offset[d] > q->global[d] || weft_tensor_size(q->t, d) > q->global[d] - q->offset[d])
                st = weft_error(WEFT_ERR_FORMAT, "checkpoint %s: tensor %s dim %d lies outside its global shape", path,
                                q->name, d);
        if (!st) k->n_pieces++;
    }
    cJSON_Delete(map);
    return st;
}

static weft_status open_file(weft_shard_ckpt *k, const char *path) {
    weft_safetensors **fs = realloc(k->files, sizeof *fs * (size_t)(k->n_files + 1));
    if (!fs) return weft_error(WEFT_ERR_OOM, "checkpoint: out of memory");
    k->files = fs;
    weft_safetensors *f = weft_safetensors_load(path);
    if (!f) return weft_last_status();
    k->files[k->n_files++] = f;
    return add_pieces(k, f, path);
}

weft_shard_ckpt *weft_shard_open(const char *dir, int64_t step) {
    if (!dir) return weft_error_null(WEFT_ERR_ARG, "checkpoint: no directory");
    int64_t ms = -1, ps = -1;
    char path[4096];
    if (weft_manifest_latest(dir, &ms) || weft_ckpt_latest(dir, &ps, NULL, 0)) return NULL;
    if (step < 0) step = ms > ps ? ms : ps; // the newest complete one, of either kind
    if (step < 0) return weft_error_null(WEFT_ERR_IO, "checkpoint %s: no checkpoint there", dir);
    weft_shard_ckpt *k = calloc(1, sizeof *k);
    if (!k) return weft_error_null(WEFT_ERR_OOM, "checkpoint: out of memory");
    k->step = step;
    weft_manifest m;
    weft_status st;
    char mpath[4096];
    FILE *probe = weft_manifest_path(dir, step, mpath, sizeof mpath) ? fopen(mpath, "rb") : NULL;
    if (probe) {
        fclose(probe);
        st = weft_manifest_read(dir, step, &m);
        if (!st) snprintf(k->layout, sizeof k->layout, "%s", m.dist);
        for (int i = 0; !st && i < m.n_parts; i++)
            st = in_dir(dir, m.parts[i], path, sizeof path) ? open_file(k, path) : weft_last_status();
        weft_manifest_clear(&m);
    } else {
        st = weft_ckpt_path(dir, step, path, sizeof path) ? open_file(k, path) : weft_last_status();
    }
    if (st) {
        weft_shard_close(k);
        return NULL;
    }
    return k;
}

int64_t weft_shard_step(const weft_shard_ckpt *k) { return k ? k->step : -1; }

int weft_shard_count(const weft_shard_ckpt *k) { return k ? k->n_pieces : 0; }
const char *weft_shard_name_at(const weft_shard_ckpt *k, int i, int *ndim, int64_t *global) {
    if (!k || i < 0 || i >= k->n_pieces) return NULL;
    const piece *q = &k->pieces[i];
    if (ndim) *ndim = q->ndim;
    if (global) memcpy(global, q->global, sizeof(int64_t) * (size_t)q->ndim);
    return q->name;
}
const char *weft_shard_layout(const weft_shard_ckpt *k) { return k ? k->layout : ""; }
const char *weft_shard_meta(const weft_shard_ckpt *k, const char *key) {
    return k && k->n_files && key ? weft_safetensors_meta(k->files[0], key) : NULL;
}

static bool same_box(const piece *a, const piece *b) {
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->offset[d] != b->offset[d] || weft_tensor_size(a->t, d) != weft_tensor_size(b->t, d) ||
            a->global[d] != b->global[d])
            return false;
    return true;
}

// Copies the part of q that overlaps the piece dst (at goff in the global
// tensor, in q's coordinates) into it; *covered += its element count.
static weft_status copy_overlap(weft_tensor *dst0, const int64_t *goff, const piece *q, weft_tensor *src0,
                                int64_t *covered) {
    int nd = q->ndim;
    int64_t lo[WEFT_MAX_DIMS], len[WEFT_MAX_DIMS], count = 1;
    for (int d = 0; d < nd; d++) {
        int64_t a = goff[d] > q->offset[d] ? goff[d] : q->offset[d];
        int64_t e1 = goff[d] + weft_tensor_size(dst0, d), e2 = q->offset[d] + weft_tensor_size(src0, d);
        int64_t b = e1 < e2 ? e1 : e2;
        if (b <= a) return WEFT_OK;
        lo[d] = a;
        len[d] = b - a;
        count *= len[d];
    }
    weft_status st = WEFT_OK;
    bool prev = weft_grad_set_enabled(false); // narrowing a parameter records nothing
    weft_tensor *dst = weft_tensor_ref(dst0), *src = weft_tensor_ref(src0);
    for (int d = 0; d < nd && dst && src; d++) {
        weft_tensor *a = weft_narrow(dst, d, lo[d] - goff[d], len[d]), *b = weft_narrow(src, d, lo[d] - q->offset[d], len[d]);
        weft_tensor_free(dst);
        weft_tensor_free(src);
        dst = a, src = b;
    }
    st = dst && src ? weft_tensor_copy_(dst, src) : weft_last_status();
    weft_tensor_free(dst);
    weft_tensor_free(src);
    weft_grad_set_enabled(prev);
    if (!st) *covered += count;
    return st;
}

static int64_t numel_of(int nd, const int64_t *s) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= s[d];
    return n;
}

static bool is_whole(const piece *q) {
    for (int d = 0; d < q->ndim; d++)
        if (q->offset[d] || weft_tensor_size(q->t, d) != q->global[d]) return false;
    return true;
}

// A tensor stored in another view of the same values: the global shapes
// differ but hold as many elements (attention's qkv, written by tensor-
// parallel ranks as (3, rows, cols) blocks, read whole as (3 rows, cols), and
// back). A whole stored piece is read through a reshape of it; a request for
// the whole tensor reads through a reshape of the destination. Other pieces
// cannot be placed and are an error naming the tensor.
static weft_status copy_piece(const weft_shard *s, int nd, const int64_t *global, const int64_t *goff, bool whole_request,
                              const piece *q, int64_t *covered, const char *stepname) {
    bool same = q->ndim == nd;
    for (int d = 0; same && d < nd; d++) same = q->global[d] == global[d];
    if (same) return copy_overlap(s->local, goff, q, q->t, covered);
    char a[96], b[96];
    if (numel_of(q->ndim, q->global) == numel_of(nd, global)) {
        weft_status st = WEFT_OK;
        bool prev = weft_grad_set_enabled(false);
        if (is_whole(q)) { // the stored tensor, reshaped to this view
            weft_tensor *v = weft_reshape(q->t, nd, global);
            piece p2 = {.name = q->name, .t = v, .ndim = nd};
            for (int d = 0; d < nd; d++) p2.global[d] = global[d];
            st = v ? copy_overlap(s->local, goff, &p2, v, covered) : weft_last_status();
            weft_tensor_free(v);
        } else if (whole_request && weft_tensor_is_contiguous(s->local)) { // this rank's tensor, in the stored view
            weft_tensor *v = weft_reshape(s->local, q->ndim, q->global);
            int64_t zero[WEFT_MAX_DIMS] = {0};
            st = v ? copy_overlap(v, zero, q, q->t, covered) : weft_last_status();
            weft_tensor_free(v);
        } else {
            st = weft_error(WEFT_ERR_SHAPE, "checkpoint %s: tensor %s is stored as pieces of %s, which cannot be placed in "
                            "%s here", stepname, s->name, weft_shape_fmt(q->ndim, q->global, a, sizeof a),
                            weft_shape_fmt(nd, global, b, sizeof b));
        }
        weft_grad_set_enabled(prev);
        return st;
    }
    return weft_error(WEFT_ERR_SHAPE, "checkpoint %s: tensor %s is %s there, %s here", stepname, s->name,
                      weft_shape_fmt(q->ndim, q->global, a, sizeof a), weft_shape_fmt(nd, global, b, sizeof b));
}

weft_status weft_shard_read(const weft_shard_ckpt *k, const weft_shard *s) {
    if (!k || !s) return weft_error(WEFT_ERR_ARG, "checkpoint: NULL argument to weft_shard_read");
    weft_status st = check_shard(s);
    if (st) return st;
    int nd = weft_tensor_ndim(s->local);
    int64_t global[WEFT_MAX_DIMS], goff[WEFT_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        global[d] = s->ndim ? s->global[d] : weft_tensor_size(s->local, d);
        goff[d] = s->ndim ? s->offset[d] : 0;
    }
    int64_t covered = 0, want = weft_tensor_numel(s->local);
    bool found = false, whole = true;
    for (int d = 0; d < nd; d++) whole &= goff[d] == 0 && weft_tensor_size(s->local, d) == global[d];
    char stepname[32];
    snprintf(stepname, sizeof stepname, "step %" PRId64, k->step);
    int n_used = 0, *used = malloc(sizeof *used * (size_t)(k->n_pieces + 1)); // pieces of this name copied so far
    if (!used) return weft_error(WEFT_ERR_OOM, "checkpoint: out of memory");
    for (int i = 0; !st && i < k->n_pieces; i++) {
        const piece *q = &k->pieces[i];
        if (strcmp(q->name, s->name)) continue;
        found = true;
        bool dup = false; // the same piece written by two ranks counts once
        for (int j = 0; !dup && j < n_used; j++) dup = same_box(&k->pieces[used[j]], q);
        if (dup) continue;
        used[n_used++] = i;
        st = copy_piece(s, nd, global, goff, whole, q, &covered, stepname);
    }
    free(used);
    if (st) return st;
    if (!found) return weft_error(WEFT_ERR_FORMAT, "checkpoint step %" PRId64 ": no tensor %s", k->step, s->name);
    if (covered != want)
        return weft_error(WEFT_ERR_FORMAT, "checkpoint step %" PRId64 ": tensor %s: %" PRId64 " of the %" PRId64
                          " values this rank holds are in no piece of the checkpoint", k->step, s->name, want - covered, want);
    return WEFT_OK;
}
