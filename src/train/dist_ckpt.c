// Checkpoints of a distributed run: several files per step (rank 0's
// replicated state, one shard per parameter server), made one checkpoint by a
// manifest that rank 0 writes last, atomically, once every part is on disk:
//   DIR/ckpt-000123.manifest.json
//   {"format": "weft-checkpoint-manifest", "version": 1, "step": 123, "ranks": 3,
//    "dist": "ps", "parts": ["ckpt-000123.safetensors", "ckpt-000123.ps0.safetensors"]}
// A step without a manifest (a job killed while writing) is ignored by resume
// and removed once a newer checkpoint is complete.
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/core_impl.h"
#include "../io/io_impl.h"
#include "train_impl.h"

#define MANIFEST_FORMAT "weft-checkpoint-manifest"

const char *weft_manifest_path(const char *dir, int64_t step, char *buf, size_t n) {
    size_t dl = strlen(dir);
    int len = snprintf(buf, n, "%s%sckpt-%06" PRId64 ".manifest.json", dir, dl && dir[dl - 1] == '/' ? "" : "/", step);
    if (len < 0 || (size_t)len >= n) return weft_error_null(WEFT_ERR_ARG, "checkpoint manifest %s: path too long", dir);
    return buf;
}

weft_status weft_manifest_write(const char *dir, int64_t step, int ranks, const char *dist, int n_parts,
                                const char *const *parts) {
    char path[4096], tmp[4200];
    if (!weft_manifest_path(dir, step, path, sizeof path)) return weft_last_status();
    cJSON *j = cJSON_CreateObject();
    cJSON *list = j ? cJSON_AddArrayToObject(j, "parts") : NULL;
    bool ok = list && cJSON_AddStringToObject(j, "format", MANIFEST_FORMAT) && cJSON_AddNumberToObject(j, "version", 1) &&
              cJSON_AddNumberToObject(j, "step", (double)step) && cJSON_AddNumberToObject(j, "ranks", ranks) &&
              cJSON_AddStringToObject(j, "dist", dist);
    for (int i = 0; ok && i < n_parts; i++) {
        cJSON *s = cJSON_CreateString(parts[i]);
        ok = s && cJSON_AddItemToArray(list, s);
    }
    char *text = ok ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    if (!text) return weft_error(WEFT_ERR_OOM, "checkpoint manifest %s: out of memory", path);
    int fd = weft_io_open_temp(path, tmp, sizeof tmp);
    weft_status st = fd < 0 ? weft_last_status() : WEFT_OK;
    if (fd >= 0) {
        size_t len = strlen(text), off = 0;
        while (!st && off < len) {
            ssize_t w = write(fd, text + off, len - off);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) st = weft_error(WEFT_ERR_IO, "checkpoint manifest: writing %s: %s", tmp, strerror(errno));
            else off += (size_t)w;
        }
        st = weft_io_commit_temp(fd, tmp, path, st); // fsync + rename: the manifest appears whole or not at all
    }
    free(text);
    return st;
}

void weft_manifest_clear(weft_manifest *m) {
    for (int i = 0; i < m->n_parts; i++) free(m->parts[i]);
    free(m->parts);
    *m = (weft_manifest){0};
}

// Reads and checks a manifest: its format and step, and that every part it
// lists is a plain file name present in dir.
weft_status weft_manifest_read(const char *dir, int64_t step, weft_manifest *m) {
    *m = (weft_manifest){0};
    char path[4096];
    if (!weft_manifest_path(dir, step, path, sizeof path)) return weft_last_status();
    FILE *f = fopen(path, "rb");
    if (!f) return weft_error(WEFT_ERR_IO, "checkpoint manifest %s: %s", path, strerror(errno));
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format"), *s = cJSON_GetObjectItemCaseSensitive(j, "step");
    const cJSON *parts = cJSON_GetObjectItemCaseSensitive(j, "parts"), *p;
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(j, "ranks"), *dist = cJSON_GetObjectItemCaseSensitive(j, "dist");
    bool ok = cJSON_IsString(fmt) && !strcmp(fmt->valuestring, MANIFEST_FORMAT) && cJSON_IsNumber(s) &&
              (int64_t)s->valuedouble == step && cJSON_IsArray(parts) && cJSON_GetArraySize(parts) > 0 &&
              cJSON_GetArraySize(parts) <= 65536;
    if (ok) {
        m->step = step;
        m->ranks = cJSON_IsNumber(ranks) && ranks->valuedouble >= 1 && ranks->valuedouble <= 1e6 ? (int)ranks->valuedouble : 1;
        snprintf(m->dist, sizeof m->dist, "%s", cJSON_IsString(dist) ? dist->valuestring : "");
        m->parts = calloc((size_t)cJSON_GetArraySize(parts), sizeof *m->parts);
        ok = m->parts != NULL;
    }
    cJSON_ArrayForEach(p, parts) {
        if (!ok) break;
        struct stat sb;
        size_t dl = strlen(dir);
        ok = cJSON_IsString(p) && !strchr(p->valuestring, '/') &&
             snprintf(path, sizeof path, "%s%s%s", dir, dl && dir[dl - 1] == '/' ? "" : "/", p->valuestring) <
                 (int)sizeof path &&
             stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (m->parts[m->n_parts] = strdup(p->valuestring));
        if (ok) m->n_parts++;
    }
    cJSON_Delete(j);
    if (ok) return WEFT_OK;
    weft_manifest_clear(m);
    return weft_error(WEFT_ERR_FORMAT, "checkpoint manifest %s: not a complete manifest of step %lld (bad format, or a "
                      "part it lists is missing)", dir, (long long)step);
}

// Whether the manifest of `step` exists and every part it lists is there.
static bool manifest_complete(const char *dir, int64_t step) {
    weft_manifest m;
    bool ok = weft_manifest_read(dir, step, &m) == WEFT_OK;
    weft_manifest_clear(&m);
    return ok;
}

static const char *digits(const char *p, int64_t *v) {
    int nd = 0;
    *v = 0;
    for (; *p >= '0' && *p <= '9'; p++, nd++) {
        if (nd >= 18) return NULL;
        *v = *v * 10 + (*p - '0');
    }
    return nd ? p : NULL;
}

// Step of a checkpoint file: "ckpt-<step>.<anything>" (rank 0's part, the
// manifest, their temporary files) or a server's shard
// "ps-shard-<server>-<step>.<anything>" (weft_ps_shard_path); else -1.
static int64_t file_step(const char *name, bool *is_manifest) {
    int64_t v, server;
    const char *p = NULL;
    if (!strncmp(name, "ckpt-", 5)) p = digits(name + 5, &v);
    else if (!strncmp(name, "ps-shard-", 9) && (p = digits(name + 9, &server)) && *p == '-') p = digits(p + 1, &v);
    else return -1;
    if (!p || *p != '.') return -1;
    *is_manifest = name[0] == 'c' && !strcmp(p, ".manifest.json");
    return v;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

// The steps of all complete checkpoints, newest first.
static weft_status complete_steps(const char *dir, int64_t **out, int *count) {
    *out = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? WEFT_OK : weft_error(WEFT_ERR_IO, "checkpoints %s: %s", dir, strerror(errno));
    int cap = 0;
    struct dirent *de;
    weft_status st = WEFT_OK;
    while (!st && (de = readdir(d))) {
        bool man = false;
        int64_t s = file_step(de->d_name, &man);
        if (s < 0 || !man || !manifest_complete(dir, s)) continue;
        if (*count == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *ns = realloc(*out, (size_t)cap * sizeof *ns);
            if (!ns) {
                st = weft_error(WEFT_ERR_OOM, "checkpoints %s: out of memory", dir);
                break;
            }
            *out = ns;
        }
        (*out)[(*count)++] = s;
    }
    closedir(d);
    if (st) {
        free(*out);
        *out = NULL;
        *count = 0;
        return st;
    }
    if (*count > 1) qsort(*out, (size_t)*count, sizeof **out, cmp_desc);
    return WEFT_OK;
}

weft_status weft_manifest_latest(const char *dir, int64_t *step) {
    int64_t *steps;
    int n;
    *step = -1;
    weft_status st = complete_steps(dir, &steps, &n);
    if (!st && n > 0) *step = steps[0];
    free(steps);
    return st;
}

weft_status weft_manifest_keep_last(const char *dir, int k) {
    if (k < 1) return weft_error(WEFT_ERR_ARG, "checkpoints: keep_last needs k >= 1 (got %d)", k);
    int64_t *steps;
    int n;
    weft_status st = complete_steps(dir, &steps, &n);
    if (st || n <= k) {
        free(steps);
        return st;
    }
    int64_t oldest_kept = steps[k - 1];
    free(steps);
    DIR *d = opendir(dir);
    if (!d) return weft_error(WEFT_ERR_IO, "checkpoints %s: %s", dir, strerror(errno));
    struct dirent *de;
    char path[4096];
    size_t dl = strlen(dir);
    // A crash in this loop can leave an old step partly deleted; resume
    // checks every part a manifest lists, so it skips such a step.
    while ((de = readdir(d))) {
        bool man = false;
        int64_t s = file_step(de->d_name, &man);
        if (s < 0 || s >= oldest_kept) continue;
        snprintf(path, sizeof path, "%s%s%s", dir, dl && dir[dl - 1] == '/' ? "" : "/", de->d_name);
        if (unlink(path) != 0 && errno != ENOENT) {
            st = weft_error(WEFT_ERR_IO, "checkpoints %s: cannot delete %s: %s", dir, path, strerror(errno));
            break;
        }
    }
    closedir(d);
    return st;
}
