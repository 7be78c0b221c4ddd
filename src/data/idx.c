// IDX files (the MNIST container format) and Fashion-MNIST.
//
// IDX layout (big-endian): bytes 0-1 zero, byte 2 the element type (0x08 =
// unsigned byte), byte 3 the number of dimensions d, then d u32 sizes, then
// the data in row-major order. Everything goes through zlib's gzread, which
// reads gzipped and plain files alike; offsets in errors are positions in the
// uncompressed stream.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <weft/data.h>

#include "../core/core_impl.h"

// Reads exactly n bytes (n may exceed gzread's unsigned int range). Returns
// the number read; *zerr is set on a zlib error (not on a clean end of file).
static int64_t read_full(gzFile f, void *buf, int64_t n, const char **zerr) {
    int64_t got = 0;
    *zerr = NULL;
    while (got < n) {
        int64_t want = n - got;
        if (want > (1 << 30)) want = 1 << 30;
        int r = gzread(f, (char *)buf + got, (unsigned)want);
        if (r < 0) {
            int code = 0;
            *zerr = gzerror(f, &code);
            return got;
        }
        if (r == 0) break;
        got += r;
    }
    return got;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

weft_tensor *weft_idx_load(const char *path, int expect_ndim) {
    if (!path) return weft_error_null(WEFT_ERR_ARG, "idx_load: path is NULL");
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) return weft_error_null(WEFT_ERR_IO, "idx_load: cannot open %s: %s", path, strerror(errno ? errno : ENOENT));
    gzbuffer(f, 1 << 17);
    weft_tensor *t = NULL;
    const char *zerr;
    unsigned char hdr[4 + 4 * WEFT_MAX_DIMS];
    int64_t got = read_full(f, hdr, 4, &zerr);
    if (zerr) {
        weft_error(WEFT_ERR_IO, "idx_load: %s: read error at byte offset %lld: %s", path, (long long)got, zerr);
        goto done;
    }
    if (got < 4) {
        weft_error(WEFT_ERR_FORMAT, "idx_load: %s: truncated header at byte offset %lld (file has %lld bytes)", path,
                   (long long)got, (long long)got);
        goto done;
    }
    if (hdr[0] != 0 || hdr[1] != 0) {
        weft_error(WEFT_ERR_FORMAT, "idx_load: %s: bad magic 0x%08x at byte offset 0 (not an IDX file)", path,
                   (unsigned)be32(hdr));
        goto done;
    }
    if (hdr[2] != 0x08) {
        weft_error(WEFT_ERR_FORMAT,
                   "idx_load: %s: unsupported element type 0x%02x at byte offset 2 (only unsigned bytes, 0x08)", path,
                   hdr[2]);
        goto done;
    }
    int nd = hdr[3];
    if (nd < 1 || nd > WEFT_MAX_DIMS || (expect_ndim >= 0 && nd != expect_ndim)) {
        if (expect_ndim >= 0)
            weft_error(WEFT_ERR_FORMAT, "idx_load: %s: %d dimensions at byte offset 3, expected %d", path, nd,
                       expect_ndim);
        else
            weft_error(WEFT_ERR_FORMAT, "idx_load: %s: %d dimensions at byte offset 3, expected 1..%d", path, nd,
                       WEFT_MAX_DIMS);
        goto done;
    }
    got = read_full(f, hdr + 4, 4 * nd, &zerr);
    if (zerr || got < 4 * nd) {
        weft_error(zerr ? WEFT_ERR_IO : WEFT_ERR_FORMAT, "idx_load: %s: truncated header at byte offset %lld%s%s",
                   path, (long long)(4 + got), zerr ? ": " : "", zerr ? zerr : "");
        goto done;
    }
    int64_t sizes[WEFT_MAX_DIMS], total = 1;
    for (int d = 0; d < nd; d++) {
        sizes[d] = be32(hdr + 4 + 4 * d);
        if (sizes[d] == 0) {
            weft_error(WEFT_ERR_FORMAT, "idx_load: %s: dimension %d is 0 at byte offset %d", path, d, 4 + 4 * d);
            goto done;
        }
        // A corrupt header must not make us allocate terabytes: cap at 2^40 bytes.
        if (total > (INT64_C(1) << 40) / sizes[d]) {
            weft_error(WEFT_ERR_FORMAT, "idx_load: %s: dimension %d = %lld at byte offset %d makes the data too large",
                       path, d, (long long)sizes[d], 4 + 4 * d);
            goto done;
        }
        total *= sizes[d];
    }
    int64_t data_off = 4 + 4 * nd;
    // The header's promise is only a promise (8 bytes can claim 4 GB), and a
    // gzipped file's size says nothing about what it inflates to: read into a
    // buffer that grows with the bytes actually there, and allocate the
    // tensor once they are all in.
    int64_t cap = total < (1 << 20) ? total : (1 << 20);
    unsigned char *buf = malloc((size_t)cap), extra;
    got = 0;
    zerr = NULL;
    while (buf) {
        got += read_full(f, buf + got, cap - got, &zerr);
        if (zerr || got < cap || cap == total) break;
        int64_t nc = cap < total / 2 ? 2 * cap : total;
        unsigned char *nb = realloc(buf, (size_t)nc);
        if (!nb) break;
        buf = nb;
        cap = nc;
    }
    if (!buf || (!zerr && got == cap && cap < total)) // the realloc failed
        weft_error(WEFT_ERR_OOM, "idx_load: %s: out of memory after %lld bytes of data", path, (long long)got);
    else if (zerr)
        weft_error(WEFT_ERR_IO, "idx_load: %s: read error at byte offset %lld: %s", path, (long long)(data_off + got),
                   zerr);
    else if (got < total)
        weft_error(WEFT_ERR_FORMAT,
                   "idx_load: %s: truncated data at byte offset %lld (the header promises %lld bytes, up to offset %lld)",
                   path, (long long)(data_off + got), (long long)total, (long long)(data_off + total));
    else if (read_full(f, &extra, 1, &zerr) != 0)
        weft_error(WEFT_ERR_FORMAT, "idx_load: %s: unexpected trailing data at byte offset %lld", path,
                   (long long)(data_off + total));
    else if ((t = weft_tensor_empty_on(nd, sizes, WEFT_U8, WEFT_DEVICE_CPU))) // host memory
        memcpy(weft_tensor_data(t), buf, (size_t)total);
    free(buf);
done:
    gzclose(f);
    return t;
}

// ---- data sets ----

void weft_dataset_free(weft_dataset *d) {
    if (!d) return;
    weft_tensor_free(d->inputs);
    weft_tensor_free(d->labels);
    free(d);
}

int64_t weft_dataset_len(const weft_dataset *d) {
    return d && d->inputs ? weft_tensor_size(d->inputs, 0) : 0;
}

// <dir>/<name>.gz if it exists, else <dir>/<name>; NULL (with the error) if neither.
static char *find_file(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 8;
    char *p = malloc(n);
    if (!p) return weft_error_null(WEFT_ERR_OOM, "fmnist_load: out of memory");
    snprintf(p, n, "%s/%s.gz", dir, name);
    if (access(p, R_OK) == 0) return p;
    snprintf(p, n, "%s/%s", dir, name);
    if (access(p, R_OK) == 0) return p;
    snprintf(p, n, "%s/%s.gz", dir, name);
    weft_error(WEFT_ERR_IO,
               "fmnist_load: missing file %s (install the Debian package dataset-fashion-mnist: apt-get install "
               "dataset-fashion-mnist)",
               p);
    free(p);
    return NULL;
}

weft_dataset *weft_fmnist_load(const char *dir, const char *split, double mean, double std) {
    if (!dir) dir = WEFT_FMNIST_DIR;
    const char *pre;
    if (split && strcmp(split, "train") == 0) pre = "train";
    else if (split && (strcmp(split, "test") == 0 || strcmp(split, "t10k") == 0)) pre = "t10k";
    else return weft_error_null(WEFT_ERR_ARG, "fmnist_load: split must be \"train\" or \"test\", got \"%s\"",
                                split ? split : "(null)");
    if (!(std > 0)) return weft_error_null(WEFT_ERR_ARG, "fmnist_load: std must be > 0, got %g", std);
    char name[64];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", pre);
    char *ipath = find_file(dir, name);
    if (!ipath) return NULL;
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", pre);
    char *lpath = find_file(dir, name);
    if (!lpath) {
        free(ipath);
        return NULL;
    }
    weft_dataset *ds = NULL;
    weft_tensor *img = weft_idx_load(ipath, 3), *lab = NULL, *x = NULL, *y = NULL;
    if (!img) goto fail;
    const int64_t *is = weft_tensor_sizes(img);
    if (is[1] != 28 || is[2] != 28) {
        weft_error(WEFT_ERR_FORMAT, "fmnist_load: %s: image size %lldx%lld at byte offset 8, expected 28x28", ipath,
                   (long long)is[1], (long long)is[2]);
        goto fail;
    }
    lab = weft_idx_load(lpath, 1);
    if (!lab) goto fail;
    int64_t n = is[0];
    if (weft_tensor_size(lab, 0) != n) {
        weft_error(WEFT_ERR_FORMAT, "fmnist_load: %s: %lld labels at byte offset 4, but %s has %lld images", lpath,
                   (long long)weft_tensor_size(lab, 0), ipath, (long long)n);
        goto fail;
    }
    x = weft_tensor_empty_on(WEFT_DIMS(n, 1, 28, 28), WEFT_F32, WEFT_DEVICE_CPU); // data sets live on the host
    y = weft_tensor_empty_on(WEFT_DIMS(n), WEFT_I64, WEFT_DEVICE_CPU);
    if (!x || !y) goto fail;
    const uint8_t *lb = weft_tensor_data(lab);
    int64_t *yp = weft_tensor_data(y);
    for (int64_t i = 0; i < n; i++) {
        if (lb[i] > 9) {
            weft_error(WEFT_ERR_FORMAT, "fmnist_load: %s: label %d at byte offset %lld is out of range 0..9", lpath,
                       lb[i], (long long)(8 + i));
            goto fail;
        }
        yp[i] = lb[i];
    }
    // A 256-entry table makes every pixel value map to the same float, exactly.
    float lut[256];
    for (int v = 0; v < 256; v++) lut[v] = (float)((v / 255.0 - mean) / std);
    const uint8_t *ib = weft_tensor_data(img);
    float *xp = weft_tensor_data(x);
    int64_t total = n * 784;
    for (int64_t i = 0; i < total; i++) xp[i] = lut[ib[i]];
    ds = malloc(sizeof *ds);
    if (!ds) {
        weft_error(WEFT_ERR_OOM, "fmnist_load: out of memory");
        goto fail;
    }
    ds->inputs = x;
    ds->labels = y;
    x = y = NULL;
fail:
    weft_tensor_free(img);
    weft_tensor_free(lab);
    weft_tensor_free(x);
    weft_tensor_free(y);
    free(ipath);
    free(lpath);
    return ds;
}
