// safetensors files: save (atomic: temp file, fsync, rename, fsync dir) and
// load with full validation (every error names the tensor or byte offset).
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../tensor/tensor_impl.h"
#include "io_impl.h"
#include <weft/io.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this writer assumes a little-endian host"
#endif

// Headers above this are refused (the Python library's limit is 100 MB too):
// a corrupt length must not make us allocate gigabytes.
#define ST_MAX_HEADER (100u << 20)

static const char *const k_st_dtype[WEFT_NUM_DTYPES] = {
    [WEFT_F32] = "F32", [WEFT_F64] = "F64", [WEFT_I32] = "I32",  [WEFT_I64] = "I64",
    [WEFT_BOOL] = "BOOL", [WEFT_U8] = "U8", [WEFT_F16] = "F16", [WEFT_BF16] = "BF16",
};

static int st_dtype_from(const char *s) {
    for (int d = 0; d < WEFT_NUM_DTYPES; d++)
        if (strcmp(s, k_st_dtype[d]) == 0) return d;
    return -1;
}

// ---------------------------------------------------------------- save

// One tensor to write: a contiguous host copy (or the tensor itself) and its place.
typedef struct st_item {
    const char *name;
    weft_tensor *host; // contiguous CPU tensor, one reference
    uint64_t begin, end;
} st_item;

static weft_tensor *host_contiguous(weft_tensor *t) {
    // detach: the copy must not join the autograd graph of a parameter.
    weft_tensor *d = weft_tensor_detach(t);
    weft_tensor *c = d ? weft_tensor_to(d, WEFT_DEVICE_CPU) : NULL;
    weft_tensor_free(d);
    weft_tensor *r = c ? weft_tensor_contiguous(c) : NULL;
    weft_tensor_free(c);
    return r;
}

static char *build_header(int n, const st_item *items, int n_meta, const char *const *mk, const char *const *mv,
                          const char *path) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    if (n_meta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; m && i < n_meta; i++) cJSON_AddStringToObject(m, mk[i], mv[i]);
    }
    for (int i = 0; i < n; i++) {
        const weft_tensor *t = items[i].host;
        cJSON *o = cJSON_AddObjectToObject(root, items[i].name);
        if (!o) break;
        cJSON_AddStringToObject(o, "dtype", k_st_dtype[t->dtype]);
        cJSON *shape = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; shape && d < t->ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->sizes[d]));
        cJSON *off = cJSON_AddArrayToObject(o, "data_offsets");
        if (off) {
            cJSON_AddItemToArray(off, cJSON_CreateNumber((double)items[i].begin));
            cJSON_AddItemToArray(off, cJSON_CreateNumber((double)items[i].end));
        }
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!s) weft_error(WEFT_ERR_OOM, "safetensors save %s: cannot build the header", path);
    return s;
}

static weft_status write_all(int fd, const void *p, size_t n, const char *tmp) {
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return weft_error(WEFT_ERR_IO, "safetensors save: writing %s: %s", tmp, strerror(errno));
        }
        c += w;
        n -= (size_t)w;
    }
    return WEFT_OK;
}

weft_status weft_safetensors_save(const char *path, int n, const char *const *names, weft_tensor *const *tensors,
                                  int n_meta, const char *const *meta_keys, const char *const *meta_values) {
    if (!path || n < 0 || (n > 0 && (!names || !tensors)) || n_meta < 0 ||
        (n_meta > 0 && (!meta_keys || !meta_values)))
        return weft_error(WEFT_ERR_ARG, "safetensors save: bad arguments");
    for (int i = 0; i < n; i++) {
        if (!names[i] || !names[i][0]) return weft_error(WEFT_ERR_ARG, "safetensors save %s: tensor %d has no name", path, i);
        if (!tensors[i]) return weft_error(WEFT_ERR_ARG, "safetensors save %s: tensor '%s' is NULL", path, names[i]);
        if (strcmp(names[i], "__metadata__") == 0)
            return weft_error(WEFT_ERR_ARG, "safetensors save %s: '__metadata__' is reserved", path);
        for (int j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0)
                return weft_error(WEFT_ERR_ARG, "safetensors save %s: duplicate tensor name '%s'", path, names[i]);
    }
    for (int i = 0; i < n_meta; i++)
        if (!meta_keys[i] || !meta_values[i])
            return weft_error(WEFT_ERR_ARG, "safetensors save %s: metadata entry %d is NULL", path, i);

    weft_status st = WEFT_OK;
    st_item *items = calloc((size_t)(n > 0 ? n : 1), sizeof *items);
    if (!items) return weft_error(WEFT_ERR_OOM, "safetensors save %s: out of memory", path);
    // Data order: widest dtype first (stable), as the Python library does, so
    // every tensor starts aligned to its element size in the file.
    int k = 0;
    for (size_t w = 8; w >= 1; w /= 2)
        for (int i = 0; i < n; i++)
            if (weft_dtype_size((weft_dtype)tensors[i]->dtype) == w) {
                items[k].name = names[i];
                items[k].host = tensors[i]; // replaced by its host copy below
                k++;
            }
    uint64_t pos = 0;
    for (int i = 0; i < n; i++) {
        weft_tensor *h = host_contiguous(items[i].host);
        items[i].host = h;
        if (!h) {
            st = weft_last_status() != WEFT_OK ? weft_last_status() : WEFT_ERR_IO;
            weft_error(st, "safetensors save %s: tensor '%s': %s", path, items[i].name, weft_last_error());
            for (int j = i + 1; j < n; j++) items[j].host = NULL;
            goto out;
        }
        items[i].begin = pos;
        pos += (uint64_t)h->numel * weft_dtype_size((weft_dtype)h->dtype);
        items[i].end = pos;
    }

    char *json = build_header(n, items, n_meta, meta_keys, meta_values, path);
    if (!json) {
        st = WEFT_ERR_OOM;
        goto out;
    }
    size_t jlen = strlen(json), hlen = (jlen + 7) / 8 * 8;
    char *hdr = malloc(8 + hlen);
    if (!hdr) {
        free(json);
        st = weft_error(WEFT_ERR_OOM, "safetensors save %s: out of memory", path);
        goto out;
    }
    uint64_t hl = hlen;
    memcpy(hdr, &hl, 8); // little-endian host (checked above)
    memcpy(hdr + 8, json, jlen);
    memset(hdr + 8 + jlen, ' ', hlen - jlen);
    free(json);

    char tmp[4096];
    int fd = weft_io_open_temp(path, tmp, sizeof tmp);
    if (fd < 0) {
        free(hdr);
        st = weft_last_status();
        goto out;
    }
    st = write_all(fd, hdr, 8 + hlen, tmp);
    free(hdr);
    for (int i = 0; st == WEFT_OK && i < n; i++)
        if (items[i].end > items[i].begin)
            st = write_all(fd, weft_tensor_ptr(items[i].host), (size_t)(items[i].end - items[i].begin), tmp);
    st = weft_io_commit_temp(fd, tmp, path, st);
out:
    for (int i = 0; i < n; i++) weft_tensor_free(items[i].host);
    free(items);
    return st;
}

// ---------------------------------------------------------------- load

typedef struct st_entry {
    char *name;
    weft_tensor *t;
    uint64_t begin, end;
    int dtype, ndim;
    int64_t sizes[WEFT_MAX_DIMS];
} st_entry;

struct weft_safetensors {
    char *path;
    int n;
    st_entry *e;
    int n_meta;
    char **meta_k, **meta_v;
};

void weft_safetensors_free(weft_safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->n; i++) {
        free(st->e[i].name);
        weft_tensor_free(st->e[i].t);
    }
    for (int i = 0; i < st->n_meta; i++) {
        free(st->meta_k[i]);
        free(st->meta_v[i]);
    }
    free(st->meta_k);
    free(st->meta_v);
    free(st->e);
    free(st->path);
    free(st);
}

// A JSON number that is a non-negative integer exactly representable (< 2^53).
static bool json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    double v = j->valuedouble;
    if (!(v >= 0) || v > 9007199254740992.0 || v != floor(v)) return false;
    *out = (uint64_t)v;
    return true;
}

static int cmp_entry(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

// Parses one tensor's header object into e (the name is already set).
static weft_status parse_entry(const char *path, const cJSON *o, st_entry *e, uint64_t data_size, uint64_t data_start) {
    const char *nm = e->name;
    if (!cJSON_IsObject(o))
        return weft_error(WEFT_ERR_FORMAT, "safetensors %s: tensor '%s': header entry is not an object", path, nm);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(o, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(o, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(o, "data_offsets");
    if (!cJSON_IsString(dt))
        return weft_error(WEFT_ERR_FORMAT, "safetensors %s: tensor '%s': missing or non-string dtype", path, nm);
    e->dtype = st_dtype_from(dt->valuestring);
    if (e->dtype < 0)
        return weft_error(WEFT_ERR_FORMAT, "safetensors %s: tensor '%s': unknown dtype '%s'", path, nm, dt->valuestring);
    if (!cJSON_IsArray(sh))
        return weft_error(WEFT_ERR_FORMAT, "safetensors %s: tensor '%s': missing shape", path, nm);
    int nd = cJSON_GetArraySize(sh);
    if (nd > WEFT_MAX_DIMS)
        return weft_error(WEFT_ERR_FORMAT, "safetensors %s: tensor '%s': %d dims (at most %d)", path, nm, nd,
                          WEFT_MAX_DIMS);
    e->ndim = nd;
    for (int d = 0; d < nd; d++) {
        uint64_t s;
        if (!json_uint(cJSON_GetArrayItem(sh, d), &s))
            return weft_error(WEFT_ERR_FORMAT, "safetensors %s: tensor '%s': shape[%d] is not a non-negative integer",
                              path, nm, d);
        e->sizes[d] = (int64_t)s; // < 2^53
    }
    // Element count, refusing overflow (weft_shape_numel: the rule every
    // tensor's shape meets, a zero size not excusing huge others): a corrupt
    // shape must not wrap around to a small number that matches the offsets.
    int64_t n_el = weft_shape_numel(nd, e->sizes);
    bool big = n_el < 0;
    uint64_t numel = big ? 0 : (uint64_t)n_el;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_uint(cJSON_GetArrayItem(off, 0), &e->begin) ||
        !json_uint(cJSON_GetArrayItem(off, 1), &e->end))
        return weft_error(WEFT_ERR_FORMAT, "safetensors %s: tensor '%s': data_offsets must be [begin, end]", path, nm);
    if (e->end < e->begin)
        return weft_error(WEFT_ERR_FORMAT, "safetensors %s: tensor '%s': data_offsets [%llu, %llu) end before begin",
                          path, nm, (unsigned long long)e->begin, (unsigned long long)e->end);
    if (big)
        return weft_error(WEFT_ERR_FORMAT, "safetensors %s: tensor '%s': shape has too many elements", path, nm);
    uint64_t want = numel * weft_dtype_size((weft_dtype)e->dtype);
    if (want != e->end - e->begin) {
        char b[128];
        return weft_error(WEFT_ERR_FORMAT,
                          "safetensors %s: tensor '%s': shape %s of %s needs %llu bytes, data_offsets span %llu", path,
                          nm, weft_shape_fmt(nd, e->sizes, b, sizeof b), dt->valuestring, (unsigned long long)want,
                          (unsigned long long)(e->end - e->begin));
    }
    if (e->end > data_size)
        return weft_error(WEFT_ERR_FORMAT,
                          "safetensors %s: tensor '%s': data ends at byte offset %llu, past the end of the file (%llu "
                          "bytes; truncated?)",
                          path, nm, (unsigned long long)(data_start + e->end),
                          (unsigned long long)(data_start + data_size));
    return WEFT_OK;
}

static weft_status parse_meta(weft_safetensors *st, const cJSON *m) {
    if (!cJSON_IsObject(m))
        return weft_error(WEFT_ERR_FORMAT, "safetensors %s: __metadata__ is not an object", st->path);
    int n = cJSON_GetArraySize(m);
    st->meta_k = calloc((size_t)n + 1, sizeof(char *));
    st->meta_v = calloc((size_t)n + 1, sizeof(char *));
    if (!st->meta_k || !st->meta_v) return weft_error(WEFT_ERR_OOM, "safetensors %s: out of memory", st->path);
    for (const cJSON *c = m->child; c; c = c->next) {
        if (!cJSON_IsString(c))
            return weft_error(WEFT_ERR_FORMAT, "safetensors %s: __metadata__ value '%s' is not a string", st->path,
                              c->string);
        st->meta_k[st->n_meta] = strdup(c->string);
        st->meta_v[st->n_meta] = strdup(c->valuestring);
        st->n_meta++;
        if (!st->meta_k[st->n_meta - 1] || !st->meta_v[st->n_meta - 1])
            return weft_error(WEFT_ERR_OOM, "safetensors %s: out of memory", st->path);
    }
    return WEFT_OK;
}

// what: "" or "tensor 'x': " for the message.
static weft_status read_at(FILE *f, void *p, size_t n, uint64_t off, const char *path, const char *what) {
    if (n == 0) return WEFT_OK;
    if (fseeko(f, (off_t)off, SEEK_SET) != 0 || fread(p, 1, n, f) != n)
        return weft_error(WEFT_ERR_FORMAT, "safetensors %s: %scannot read %zu bytes at byte offset %llu (truncated?)",
                          path, what, n, (unsigned long long)off);
    return WEFT_OK;
}

weft_safetensors *weft_safetensors_load(const char *path) {
    if (!path) return weft_error_null(WEFT_ERR_ARG, "safetensors load: NULL path");
    FILE *f = fopen(path, "rb");
    if (!f) return weft_error_null(WEFT_ERR_IO, "safetensors %s: cannot open: %s", path, strerror(errno));
    weft_safetensors *st = calloc(1, sizeof *st);
    char *hdr = NULL;
    cJSON *root = NULL;
    weft_status s = WEFT_OK;
    if (!st || !(st->path = strdup(path))) {
        s = weft_error(WEFT_ERR_OOM, "safetensors %s: out of memory", path);
        goto fail;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        s = weft_error(WEFT_ERR_IO, "safetensors %s: not a regular file", path);
        goto fail;
    }
    uint64_t fsize = (uint64_t)sb.st_size, hl = 0;
    if (fsize < 8) {
        s = weft_error(WEFT_ERR_FORMAT, "safetensors %s: %llu bytes, too short for the 8-byte header length", path,
                       (unsigned long long)fsize);
        goto fail;
    }
    unsigned char lb[8];
    if ((s = read_at(f, lb, 8, 0, path, "")) != WEFT_OK) goto fail;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | lb[i];
    if (hl > fsize - 8 || hl > ST_MAX_HEADER) {
        s = weft_error(WEFT_ERR_FORMAT,
                       "safetensors %s: header length %llu at byte offset 0 goes past the end of the file (%llu bytes)",
                       path, (unsigned long long)hl, (unsigned long long)fsize);
        goto fail;
    }
    if (hl < 2) {
        s = weft_error(WEFT_ERR_FORMAT, "safetensors %s: header length %llu at byte offset 0 is too small", path,
                       (unsigned long long)hl);
        goto fail;
    }
    hdr = malloc(hl + 1);
    if (!hdr) {
        s = weft_error(WEFT_ERR_OOM, "safetensors %s: out of memory for a %llu-byte header", path,
                       (unsigned long long)hl);
        goto fail;
    }
    if ((s = read_at(f, hdr, hl, 8, path, "")) != WEFT_OK) goto fail;
    hdr[hl] = 0;
    if (strlen(hdr) != hl) {
        s = weft_error(WEFT_ERR_FORMAT, "safetensors %s: NUL byte in the header at byte offset %zu", path,
                       8 + strlen(hdr));
        goto fail;
    }
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(hdr, hl, &end, false);
    if (!root) {
        const char *ep = cJSON_GetErrorPtr();
        size_t at = ep && ep >= hdr && ep <= hdr + hl ? (size_t)(ep - hdr) : 0;
        s = weft_error(WEFT_ERR_FORMAT, "safetensors %s: header is not valid JSON (near byte offset %zu)", path, 8 + at);
        goto fail;
    }
    // Only padding (spaces) may follow the JSON object.
    for (const char *p = end; p && p < hdr + hl; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            s = weft_error(WEFT_ERR_FORMAT, "safetensors %s: junk after the JSON header at byte offset %zu", path,
                           8 + (size_t)(p - hdr));
            goto fail;
        }
    if (!cJSON_IsObject(root)) {
        s = weft_error(WEFT_ERR_FORMAT, "safetensors %s: header is not a JSON object", path);
        goto fail;
    }
    uint64_t data_start = 8 + hl, data_size = fsize - data_start;
    int cap = cJSON_GetArraySize(root);
    st->e = calloc((size_t)cap + 1, sizeof *st->e);
    if (!st->e) {
        s = weft_error(WEFT_ERR_OOM, "safetensors %s: out of memory", path);
        goto fail;
    }
    bool seen_meta = false;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (!c->string) continue;
        if (strcmp(c->string, "__metadata__") == 0) {
            if (seen_meta) {
                s = weft_error(WEFT_ERR_FORMAT, "safetensors %s: __metadata__ appears twice", path);
                goto fail;
            }
            seen_meta = true;
            if ((s = parse_meta(st, c)) != WEFT_OK) goto fail;
            continue;
        }
        for (int j = 0; j < st->n; j++)
            if (strcmp(st->e[j].name, c->string) == 0) {
                s = weft_error(WEFT_ERR_FORMAT, "safetensors %s: tensor '%s' appears twice in the header", path,
                               c->string);
                goto fail;
            }
        st_entry *e = &st->e[st->n++];
        if (!(e->name = strdup(c->string))) {
            s = weft_error(WEFT_ERR_OOM, "safetensors %s: out of memory", path);
            goto fail;
        }
        if ((s = parse_entry(path, c, e, data_size, data_start)) != WEFT_OK) goto fail;
    }
    // Overlap check on the offset-sorted list (also the order tensors are exposed in).
    qsort(st->e, (size_t)st->n, sizeof *st->e, cmp_entry);
    // Empty tensors own no bytes; among the others, each must start at or after
    // the furthest end so far.
    int last = -1;
    for (int i = 0; i < st->n; i++) {
        const st_entry *e = &st->e[i];
        if (e->end == e->begin) continue;
        if (last >= 0 && e->begin < st->e[last].end) {
            const st_entry *p = &st->e[last];
            s = weft_error(WEFT_ERR_FORMAT,
                           "safetensors %s: tensor '%s' (byte offsets %llu..%llu) overlaps tensor '%s' (byte offsets "
                           "%llu..%llu)",
                           path, e->name, (unsigned long long)(data_start + e->begin),
                           (unsigned long long)(data_start + e->end), p->name,
                           (unsigned long long)(data_start + p->begin), (unsigned long long)(data_start + p->end));
            goto fail;
        }
        if (last < 0 || e->end > st->e[last].end) last = i;
    }
    for (int i = 0; i < st->n; i++) {
        st_entry *e = &st->e[i];
        e->t = weft_tensor_empty_on(e->ndim, e->sizes, (weft_dtype)e->dtype, WEFT_DEVICE_CPU);
        if (!e->t) {
            s = weft_error(WEFT_ERR_OOM, "safetensors %s: tensor '%s': %s", path, e->name, weft_last_error());
            goto fail;
        }
        char what[300];
        snprintf(what, sizeof what, "tensor '%.250s': ", e->name);
        if ((s = read_at(f, weft_tensor_ptr(e->t), (size_t)(e->end - e->begin), data_start + e->begin, path, what)) !=
            WEFT_OK)
            goto fail;
    }
    cJSON_Delete(root);
    free(hdr);
    fclose(f);
    return st;
fail:
    (void)s;
    cJSON_Delete(root);
    free(hdr);
    fclose(f);
    weft_safetensors_free(st);
    return NULL;
}

int weft_safetensors_count(const weft_safetensors *st) { return st ? st->n : 0; }

const char *weft_safetensors_name_at(const weft_safetensors *st, int i) {
    if (!st || i < 0 || i >= st->n)
        return weft_error_null(WEFT_ERR_ARG, "safetensors: index %d out of range [0, %d)", i, st ? st->n : 0);
    return st->e[i].name;
}

weft_tensor *weft_safetensors_tensor_at(const weft_safetensors *st, int i) {
    if (!st || i < 0 || i >= st->n)
        return weft_error_null(WEFT_ERR_ARG, "safetensors: index %d out of range [0, %d)", i, st ? st->n : 0);
    return st->e[i].t;
}

weft_tensor *weft_safetensors_find(const weft_safetensors *st, const char *name) {
    if (!st || !name) return weft_error_null(WEFT_ERR_ARG, "safetensors find: NULL argument");
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->e[i].name, name) == 0) return st->e[i].t;
    return weft_error_null(WEFT_ERR_ARG, "safetensors %s: no tensor '%s'", st->path, name);
}

const char *weft_safetensors_meta(const weft_safetensors *st, const char *key) {
    if (!st || !key) return NULL;
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_k[i], key) == 0) return st->meta_v[i];
    return NULL;
}

int weft_safetensors_meta_count(const weft_safetensors *st) { return st ? st->n_meta : 0; }
const char *weft_safetensors_meta_key_at(const weft_safetensors *st, int i) {
    return st && i >= 0 && i < st->n_meta ? st->meta_k[i] : NULL;
}
const char *weft_safetensors_meta_value_at(const weft_safetensors *st, int i) {
    return st && i >= 0 && i < st->n_meta ? st->meta_v[i] : NULL;
}

weft_status weft_safetensors_copy_to(const weft_safetensors *st, const char *name, weft_tensor *dst) {
    if (!dst) return weft_error(WEFT_ERR_ARG, "safetensors copy_to '%s': NULL destination", name ? name : "?");
    weft_tensor *src = weft_safetensors_find(st, name);
    if (!src) return weft_last_status();
    if (!weft_shape_equal(src->ndim, src->sizes, dst->ndim, dst->sizes)) {
        char a[128], b[128];
        return weft_error(WEFT_ERR_SHAPE, "safetensors %s: tensor '%s' has shape %s in the file, %s expected", st->path,
                          name, weft_shape_fmt(src->ndim, src->sizes, a, sizeof a),
                          weft_shape_fmt(dst->ndim, dst->sizes, b, sizeof b));
    }
    weft_status s = weft_tensor_copy_(dst, src);
    if (s != WEFT_OK) return weft_error(s, "safetensors %s: tensor '%s': %s", st->path, name, weft_last_error());
    return WEFT_OK;
}
