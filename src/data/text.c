// Byte-level text corpora, the cached KJV text, train/validation splits and
// language-model batches.
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <weft/data.h>
#include <weft/ops.h>

#include "../core/core_impl.h"
#include "data_impl.h"

// A 1-D tensor of dtype dt holding the n bytes of buf.
static weft_tensor *tokens_from_bytes(const char *what, const unsigned char *buf, int64_t n, weft_dtype dt) {
    if (dt != WEFT_U8 && dt != WEFT_I64)
        return weft_error_null(WEFT_ERR_DTYPE, "%s: dtype must be u8 or i64, got %s", what, weft_dtype_name(dt));
    weft_tensor *t = weft_tensor_empty_on(WEFT_DIMS(n), dt, WEFT_DEVICE_CPU); // filled from host memory
    if (!t) return NULL;
    if (dt == WEFT_U8) memcpy(weft_tensor_data(t), buf, (size_t)n);
    else {
        int64_t *p = weft_tensor_data(t);
        for (int64_t i = 0; i < n; i++) p[i] = buf[i];
    }
    return t;
}

weft_tensor *weft_text_load(const char *path, weft_dtype dt) {
    if (!path) return weft_error_null(WEFT_ERR_ARG, "text_load: path is NULL");
    if (dt != WEFT_U8 && dt != WEFT_I64)
        return weft_error_null(WEFT_ERR_DTYPE, "text_load: dtype must be u8 or i64, got %s", weft_dtype_name(dt));
    FILE *f = fopen(path, "rb");
    if (!f) return weft_error_null(WEFT_ERR_IO, "text_load: cannot open %s: %s", path, strerror(errno));
    weft_tensor *t = NULL;
    unsigned char *buf = NULL;
    if (fseeko(f, 0, SEEK_END) != 0) goto ioerr;
    off_t n = ftello(f);
    if (n < 0 || fseeko(f, 0, SEEK_SET) != 0) goto ioerr;
    if (n == 0) {
        weft_error(WEFT_ERR_FORMAT, "text_load: %s is empty", path);
        goto out;
    }
    buf = malloc((size_t)n);
    if (!buf) {
        weft_error(WEFT_ERR_OOM, "text_load: %s: out of memory for %lld bytes", path, (long long)n);
        goto out;
    }
    size_t got = fread(buf, 1, (size_t)n, f);
    if (got != (size_t)n) {
        weft_error(WEFT_ERR_IO, "text_load: %s: short read at byte offset %zu of %lld", path, got, (long long)n);
        goto out;
    }
    t = tokens_from_bytes("text_load", buf, n, dt);
    goto out;
ioerr:
    weft_error(WEFT_ERR_IO, "text_load: %s: %s", path, strerror(errno));
out:
    free(buf);
    fclose(f);
    return t;
}

// True when the program that `command` starts (its first word) can be run.
static bool program_exists(const char *command, char *prog, size_t progn) {
    while (*command == ' ' || *command == '\t') command++;
    size_t k = strcspn(command, " \t");
    if (k == 0 || k >= progn) return false;
    memcpy(prog, command, k);
    prog[k] = 0;
    if (strchr(prog, '/')) return access(prog, X_OK) == 0;
    const char *path = getenv("PATH");
    if (!path) return false;
    char full[4096];
    while (*path) {
        size_t len = strcspn(path, ":");
        if (len > 0 && len + k + 2 < sizeof full) {
            memcpy(full, path, len);
            full[len] = '/';
            memcpy(full + len + 1, prog, k + 1);
            if (access(full, X_OK) == 0) return true;
        }
        path += len;
        if (*path == ':') path++;
    }
    return false;
}

// mkdir -p of the directory that holds file (best effort: the later open reports failures).
static void make_parent_dirs(const char *file) {
    char *d = strdup(file);
    if (!d) return;
    for (char *p = d + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(d, 0777);
        *p = '/';
    }
    free(d);
}

// Writes buf to path atomically: a temp file in the same directory (so rename
// stays within one file system), fsync, rename over path, fsync the directory.
// A crash leaves either the old state or the complete file, never a torn one.
static weft_status write_atomic(const char *path, const unsigned char *buf, size_t n) {
    make_parent_dirs(path);
    size_t tl = strlen(path) + 16;
    char *tmp = malloc(tl);
    if (!tmp) return weft_error(WEFT_ERR_OOM, "text cache: out of memory");
    snprintf(tmp, tl, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        weft_status s = weft_error(WEFT_ERR_IO, "text cache: cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        return s;
    }
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, buf + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) goto fail;
        off += (size_t)w;
    }
    if (fsync(fd) != 0) goto fail;
    if (close(fd) != 0) {
        fd = -1;
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) != 0) goto fail;
    char *dcopy = strdup(path);
    if (dcopy) {
        int dfd = open(dirname(dcopy), O_RDONLY | O_DIRECTORY);
        if (dfd >= 0) {
            fsync(dfd); // makes the rename itself durable
            close(dfd);
        }
        free(dcopy);
    }
    free(tmp);
    return WEFT_OK;
fail:;
    weft_status s = weft_error(WEFT_ERR_IO, "text cache: writing %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    unlink(tmp);
    free(tmp);
    return s;
}

weft_tensor *weft_text_load_cached(const char *cache_path, const char *command, const char *package, weft_dtype dt) {
    if (!cache_path || !command) return weft_error_null(WEFT_ERR_ARG, "text_load_cached: NULL argument");
    if (dt != WEFT_U8 && dt != WEFT_I64)
        return weft_error_null(WEFT_ERR_DTYPE, "text_load_cached: dtype must be u8 or i64, got %s",
                               weft_dtype_name(dt));
    if (access(cache_path, F_OK) == 0) return weft_text_load(cache_path, dt);
    char prog[256];
    if (!program_exists(command, prog, sizeof prog)) {
        if (package)
            return weft_error_null(WEFT_ERR_IO,
                                   "text_load_cached: program '%s' not found (install the Debian package %s: "
                                   "apt-get install %s)",
                                   prog, package, package);
        return weft_error_null(WEFT_ERR_IO, "text_load_cached: program '%s' not found", prog);
    }
    fflush(NULL); // the child must not re-flush our buffered output
    FILE *p = popen(command, "r");
    if (!p) return weft_error_null(WEFT_ERR_IO, "text_load_cached: cannot run '%s': %s", command, strerror(errno));
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = malloc(cap);
    bool oom = !buf;
    while (!oom) {
        if (n == cap) {
            unsigned char *nb = realloc(buf, cap * 2);
            if (!nb) {
                oom = true;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, p);
        if (r == 0) break;
        n += r;
    }
    int st = pclose(p);
    weft_tensor *t = NULL;
    if (oom) weft_error(WEFT_ERR_OOM, "text_load_cached: out of memory reading the output of '%s'", command);
    else if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        weft_error(WEFT_ERR_IO, "text_load_cached: '%s' failed (exit status %d)%s%s", command,
                   st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1, package ? "; is the Debian package installed? " : "",
                   package ? package : "");
    else if (n == 0) weft_error(WEFT_ERR_FORMAT, "text_load_cached: '%s' printed nothing", command);
    else if (write_atomic(cache_path, buf, n) == WEFT_OK) t = tokens_from_bytes("text_load_cached", buf, (int64_t)n, dt);
    free(buf);
    return t;
}

weft_tensor *weft_kjv_load(const char *cache_path, weft_dtype dt) {
    return weft_text_load_cached(cache_path, WEFT_KJV_COMMAND, "bible-kjv", dt);
}

// ---- splits ----

weft_status weft_train_val_split(weft_tensor *t, double val_frac, weft_tensor **train, weft_tensor **val) {
    if (train) *train = NULL;
    if (val) *val = NULL;
    if (!t || !train || !val) return weft_error(WEFT_ERR_ARG, "train_val_split: NULL argument");
    if (!(val_frac >= 0 && val_frac < 1)) return weft_error(WEFT_ERR_ARG, "train_val_split: val_frac must be in [0,1), got %g", val_frac);
    if (weft_tensor_ndim(t) < 1) return weft_error(WEFT_ERR_SHAPE, "train_val_split: tensor must have at least 1 dimension");
    int64_t n = weft_tensor_size(t, 0);
    int64_t nv = (int64_t)(n * val_frac + 0.5);
    if (nv > n) nv = n;
    *train = weft_narrow(t, 0, 0, n - nv);
    *val = weft_narrow(t, 0, n - nv, nv);
    if (!*train || !*val) {
        weft_tensor_free(*train);
        weft_tensor_free(*val);
        *train = *val = NULL;
        return weft_last_status();
    }
    return WEFT_OK;
}

weft_status weft_dataset_split(const weft_dataset *d, double val_frac, weft_dataset **train, weft_dataset **val) {
    if (train) *train = NULL;
    if (val) *val = NULL;
    if (!d || !d->inputs || !train || !val) return weft_error(WEFT_ERR_ARG, "dataset_split: NULL argument");
    if (d->labels && weft_tensor_size(d->labels, 0) != weft_tensor_size(d->inputs, 0))
        return weft_error(WEFT_ERR_SHAPE, "dataset_split: %lld inputs but %lld labels",
                          (long long)weft_tensor_size(d->inputs, 0), (long long)weft_tensor_size(d->labels, 0));
    weft_dataset *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    if (!a || !b) {
        free(a);
        free(b);
        return weft_error(WEFT_ERR_OOM, "dataset_split: out of memory");
    }
    weft_status s = weft_train_val_split(d->inputs, val_frac, &a->inputs, &b->inputs);
    if (s == WEFT_OK && d->labels) s = weft_train_val_split(d->labels, val_frac, &a->labels, &b->labels);
    if (s != WEFT_OK) {
        weft_dataset_free(a);
        weft_dataset_free(b);
        return s;
    }
    *train = a;
    *val = b;
    return WEFT_OK;
}

// ---- language-model batches ----

weft_status weft_lm_batch(const weft_tensor *tokens, int64_t B, int64_t T, uint64_t seed, uint64_t step,
                          weft_tensor **x, weft_tensor **y) {
    if (x) *x = NULL;
    if (y) *y = NULL;
    if (!tokens || !x || !y) return weft_error(WEFT_ERR_ARG, "lm_batch: NULL argument");
    if (weft_tensor_ndim(tokens) != 1)
        return weft_error(WEFT_ERR_SHAPE, "lm_batch: tokens must be 1-D, got %d dimensions", weft_tensor_ndim(tokens));
    weft_dtype dt = weft_tensor_dtype(tokens);
    if (dt != WEFT_U8 && dt != WEFT_I64)
        return weft_error(WEFT_ERR_DTYPE, "lm_batch: tokens must be u8 or i64, got %s", weft_dtype_name(dt));
    if (weft_tensor_device(tokens).type != WEFT_CPU)
        return weft_error(WEFT_ERR_DEVICE, "lm_batch: tokens must be on the CPU");
    int64_t n = weft_tensor_size(tokens, 0);
    if (B <= 0 || T <= 0) return weft_error(WEFT_ERR_ARG, "lm_batch: B and T must be > 0, got B=%lld T=%lld",
                                            (long long)B, (long long)T);
    if (n <= T) return weft_error(WEFT_ERR_SHAPE, "lm_batch: corpus of %lld tokens is too short for windows of %lld+1",
                                  (long long)n, (long long)T);
    weft_tensor *xt = weft_tensor_empty_on(WEFT_DIMS(B, T), WEFT_I64, WEFT_DEVICE_CPU); // host batches
    weft_tensor *yt = weft_tensor_empty_on(WEFT_DIMS(B, T), WEFT_I64, WEFT_DEVICE_CPU);
    if (!xt || !yt) {
        weft_tensor_free(xt);
        weft_tensor_free(yt);
        return weft_last_status();
    }
    int64_t st = weft_tensor_stride(tokens, 0);
    const char *base = weft_tensor_data(tokens);
    int64_t *xp = weft_tensor_data(xt), *yp = weft_tensor_data(yt); // (B,T) each
    uint64_t key = weft_data_key(seed, step);
    for (int64_t b = 0; b < B; b++) {
        // Row b's window start depends only on (seed, step, b): resumable from the step alone.
        int64_t s0 = (int64_t)weft_data_bounded(weft_data_key(key, (uint64_t)b), (uint64_t)(n - T));
        int64_t *xr = xp + b * T, *yr = yp + b * T;
        if (dt == WEFT_U8) {
            const uint8_t *src = (const uint8_t *)base;
            for (int64_t t = 0; t < T; t++) {
                xr[t] = src[(s0 + t) * st];
                yr[t] = src[(s0 + t + 1) * st];
            }
        } else {
            const int64_t *src = (const int64_t *)base;
            for (int64_t t = 0; t < T; t++) {
                xr[t] = src[(s0 + t) * st];
                yr[t] = src[(s0 + t + 1) * st];
            }
        }
    }
    *x = xt;
    *y = yt;
    return WEFT_OK;
}
