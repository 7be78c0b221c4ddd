// Atomic file replacement, checkpoint directories, mkdir -p.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io_impl.h"
#include <weft/io.h>

int weft_io_open_temp(const char *path, char *tmp, size_t n) {
    static atomic_uint counter;
    // pid + counter makes the name unique among writers on this machine;
    // O_EXCL turns any remaining clash (e.g. a stale file) into a retry.
    for (int tries = 0; tries < 100; tries++) {
        unsigned c = atomic_fetch_add(&counter, 1);
        int len = snprintf(tmp, n, "%s.tmp-%ld-%u", path, (long)getpid(), c);
        if (len < 0 || (size_t)len >= n) {
            weft_error(WEFT_ERR_ARG, "%s: path too long", path);
            return -1;
        }
        // 0666 minus umask: the final file gets the usual permissions.
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0) return fd;
        if (errno != EEXIST) {
            weft_error(WEFT_ERR_IO, "%s: cannot create %s: %s", path, tmp, strerror(errno));
            return -1;
        }
    }
    weft_error(WEFT_ERR_IO, "%s: cannot find a free temporary name", path);
    return -1;
}

// fsync the directory holding path, so the rename itself is durable.
static weft_status fsync_dir_of(const char *path) {
    char dir[4096];
    size_t len = strlen(path);
    if (len >= sizeof dir) return weft_error(WEFT_ERR_ARG, "%s: path too long", path);
    memcpy(dir, path, len + 1);
    char *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return weft_error(WEFT_ERR_IO, "%s: cannot open directory %s: %s", path, dir, strerror(errno));
    int r = fsync(fd);
    int e = errno;
    close(fd);
    // Some file systems refuse fsync on directories (EINVAL): nothing more to do there.
    if (r != 0 && e != EINVAL) return weft_error(WEFT_ERR_IO, "%s: fsync of %s: %s", path, dir, strerror(e));
    return WEFT_OK;
}

weft_status weft_io_commit_temp(int fd, const char *tmp, const char *path, weft_status st) {
    if (st == WEFT_OK && fsync(fd) != 0) st = weft_error(WEFT_ERR_IO, "%s: fsync of %s: %s", path, tmp, strerror(errno));
    if (close(fd) != 0 && st == WEFT_OK) st = weft_error(WEFT_ERR_IO, "%s: close of %s: %s", path, tmp, strerror(errno));
    if (st == WEFT_OK && rename(tmp, path) != 0)
        st = weft_error(WEFT_ERR_IO, "%s: cannot rename %s over it: %s", path, tmp, strerror(errno));
    if (st != WEFT_OK) {
        unlink(tmp);
        return st;
    }
    return fsync_dir_of(path);
}

weft_status weft_mkdirs(const char *path) {
    if (!path || !path[0]) return weft_error(WEFT_ERR_ARG, "mkdirs: empty path");
    char buf[4096];
    size_t len = strlen(path);
    if (len >= sizeof buf) return weft_error(WEFT_ERR_ARG, "mkdirs %s: path too long", path);
    memcpy(buf, path, len + 1);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != 0) continue;
        char c = *p;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return weft_error(WEFT_ERR_IO, "mkdirs %s: cannot create %s: %s", path, buf, strerror(errno));
        *p = c;
        if (!c) break;
    }
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return weft_error(WEFT_ERR_IO, "mkdirs %s: exists and is not a directory", path);
    return WEFT_OK;
}

// ---------------------------------------------------------------- checkpoints

const char *weft_ckpt_path(const char *dir, int64_t step, char *buf, size_t n) {
    if (!dir || !buf || step < 0) return weft_error_null(WEFT_ERR_ARG, "ckpt_path: bad arguments");
    size_t dl = strlen(dir);
    const char *sep = dl > 0 && dir[dl - 1] == '/' ? "" : "/";
    int len = snprintf(buf, n, "%s%sckpt-%06lld.safetensors", dir, sep, (long long)step);
    if (len < 0 || (size_t)len >= n) return weft_error_null(WEFT_ERR_ARG, "ckpt_path %s: buffer too small", dir);
    return buf;
}

// Step of a file named exactly "ckpt-<digits>.safetensors", else -1.
static int64_t ckpt_step(const char *name) {
    if (strncmp(name, "ckpt-", 5) != 0) return -1;
    const char *p = name + 5;
    int64_t v = 0;
    int nd = 0;
    for (; *p >= '0' && *p <= '9'; p++, nd++) {
        if (nd >= 18) return -1; // would overflow
        v = v * 10 + (*p - '0');
    }
    if (nd == 0 || strcmp(p, ".safetensors") != 0) return -1;
    // Only the canonical spelling (what weft_ckpt_path writes), so the path
    // rebuilt from the step names this very file.
    char canon[64];
    snprintf(canon, sizeof canon, "ckpt-%06lld.safetensors", (long long)v);
    return strcmp(canon, name) == 0 ? v : -1;
}

// All checkpoint steps in dir (malloc'd, *count of them); a missing dir is none.
static weft_status list_steps(const char *dir, int64_t **steps, int *count) {
    *steps = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return WEFT_OK;
        return weft_error(WEFT_ERR_IO, "checkpoints %s: cannot read directory: %s", dir, strerror(errno));
    }
    int cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        int64_t s = ckpt_step(de->d_name);
        if (s < 0) continue;
        if (*count == cap) {
            cap = cap ? cap * 2 : 16;
            int64_t *ns = realloc(*steps, (size_t)cap * sizeof *ns);
            if (!ns) {
                closedir(d);
                free(*steps);
                *steps = NULL;
                *count = 0;
                return weft_error(WEFT_ERR_OOM, "checkpoints %s: out of memory", dir);
            }
            *steps = ns;
        }
        (*steps)[(*count)++] = s;
    }
    closedir(d);
    return WEFT_OK;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

weft_status weft_ckpt_latest(const char *dir, int64_t *step, char *path, size_t n) {
    if (!dir || !step) return weft_error(WEFT_ERR_ARG, "ckpt_latest: NULL argument");
    *step = -1;
    if (path && n) path[0] = 0;
    int64_t *steps;
    int count;
    weft_status s = list_steps(dir, &steps, &count);
    if (s != WEFT_OK) return s;
    for (int i = 0; i < count; i++)
        if (steps[i] > *step) *step = steps[i];
    free(steps);
    if (*step >= 0 && path && !weft_ckpt_path(dir, *step, path, n)) return weft_last_status();
    return WEFT_OK;
}

weft_status weft_ckpt_keep_last(const char *dir, int k) {
    if (!dir || k < 1) return weft_error(WEFT_ERR_ARG, "ckpt_keep_last: need a directory and k >= 1 (got %d)", k);
    int64_t *steps;
    int count;
    weft_status s = list_steps(dir, &steps, &count);
    if (s != WEFT_OK) return s;
    qsort(steps, (size_t)count, sizeof *steps, cmp_desc);
    char p[4096];
    for (int i = k; i < count && s == WEFT_OK; i++) {
        if (!weft_ckpt_path(dir, steps[i], p, sizeof p)) s = weft_last_status();
        else if (unlink(p) != 0 && errno != ENOENT)
            s = weft_error(WEFT_ERR_IO, "checkpoints %s: cannot delete %s: %s", dir, p, strerror(errno));
    }
    free(steps);
    return s;
}
