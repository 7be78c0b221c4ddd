// Data: IDX files (gz and plain), Fashion-MNIST, text corpora and the KJV
// cache, train/validation splits, the prefetching loader (order, resume,
// backpressure, shutdown) and the language-model batcher. No network: small
// files are made in a temp dir; the real data sets are checked when installed.
#include <dirent.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "weft_test.h"

static char g_tmp[64];

static bool err_has(const char *s) {
    bool ok = strstr(weft_last_error(), s) != NULL;
    if (!ok) fprintf(stderr, "  error message \"%s\" lacks \"%s\"\n", weft_last_error(), s);
    return ok;
}

static char *tpath(const char *name) { // in a static ring, so a few can be live
    static char buf[8][256];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 256, "%s/%s", g_tmp, name);
    return p;
}

static void write_bytes(const char *path, const void *data, size_t n, bool gz) {
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (n) gzwrite(f, data, (unsigned)n);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        if (n) fwrite(data, 1, n, f);
        fclose(f);
    }
}

// An IDX u8 file: header for dims, then ndata bytes of data (may differ from
// the header's promise, to make broken files).
static size_t idx_bytes(unsigned char *out, int nd, const uint32_t *dims, const unsigned char *data, size_t ndata) {
    size_t o = 0;
    out[o++] = 0;
    out[o++] = 0;
    out[o++] = 0x08;
    out[o++] = (unsigned char)nd;
    for (int d = 0; d < nd; d++) {
        out[o++] = dims[d] >> 24;
        out[o++] = dims[d] >> 16;
        out[o++] = dims[d] >> 8;
        out[o++] = dims[d];
    }
    memcpy(out + o, data, ndata);
    return o + ndata;
}

static void write_idx(const char *path, bool gz, int nd, const uint32_t *dims, const unsigned char *data,
                      size_t ndata) {
    unsigned char *buf = malloc(64 + ndata);
    size_t n = idx_bytes(buf, nd, dims, data, ndata);
    write_bytes(path, buf, n, gz);
    free(buf);
}

static void test_idx_roundtrip(void) {
    unsigned char data[5 * 4 * 3];
    for (int i = 0; i < 60; i++) data[i] = (unsigned char)(i * 37 + 11);
    uint32_t dims[3] = {5, 4, 3};
    for (int gz = 0; gz < 2; gz++) {
        const char *p = tpath(gz ? "rt.idx.gz" : "rt.idx");
        write_idx(p, gz, 3, dims, data, sizeof data);
        weft_tensor *t = weft_idx_load(p, 3);
        CHECK(t != NULL);
        if (!t) continue;
        CHECK(weft_tensor_dtype(t) == WEFT_U8);
        CHECK(weft_tensor_ndim(t) == 3 && weft_tensor_size(t, 0) == 5 && weft_tensor_size(t, 1) == 4 &&
              weft_tensor_size(t, 2) == 3);
        CHECK(memcmp(weft_tensor_data(t), data, sizeof data) == 0);
        weft_tensor_free(t);
        t = weft_idx_load(p, -1); // any rank
        CHECK(t && weft_tensor_ndim(t) == 3);
        weft_tensor_free(t);
    }
    // labels: 1-D
    uint32_t ld[1] = {7};
    write_idx(tpath("lab.gz"), true, 1, ld, data, 7);
    weft_tensor *t = weft_idx_load(tpath("lab.gz"), 1);
    CHECK(t && weft_tensor_ndim(t) == 1 && weft_tensor_size(t, 0) == 7);
    if (t) CHECK(memcmp(weft_tensor_data(t), data, 7) == 0);
    weft_tensor_free(t);
}

static void test_idx_errors(void) {
    unsigned char data[64] = {0}, buf[256];
    uint32_t dims[3] = {2, 4, 4};
    for (int gz = 0; gz < 2; gz++) {
        // missing file
        const char *p = tpath(gz ? "missing.gz" : "missing");
        CHECK(weft_idx_load(p, 3) == NULL);
        CHECK(err_has(p));
        // bad magic
        p = tpath(gz ? "magic.gz" : "magic");
        size_t n = idx_bytes(buf, 3, dims, data, 32);
        buf[0] = 0x12;
        buf[1] = 0x34;
        write_bytes(p, buf, n, gz);
        CHECK(weft_idx_load(p, 3) == NULL);
        CHECK(err_has(p) && err_has("magic") && err_has("byte offset 0"));
        CHECK(weft_last_status() == WEFT_ERR_FORMAT);
        // wrong element type
        p = tpath(gz ? "type.gz" : "type");
        n = idx_bytes(buf, 3, dims, data, 32);
        buf[2] = 0x0D;
        write_bytes(p, buf, n, gz);
        CHECK(weft_idx_load(p, 3) == NULL);
        CHECK(err_has(p) && err_has("byte offset 2"));
        // wrong number of dimensions
        p = tpath(gz ? "dims.gz" : "dims");
        write_idx(p, gz, 2, dims, data, 8);
        CHECK(weft_idx_load(p, 3) == NULL);
        CHECK(err_has(p) && err_has("byte offset 3"));
        // a zero dimension
        p = tpath(gz ? "zero.gz" : "zero");
        uint32_t zd[3] = {2, 0, 4};
        write_idx(p, gz, 3, zd, data, 0);
        CHECK(weft_idx_load(p, 3) == NULL);
        CHECK(err_has(p) && err_has("byte offset 8"));
        // truncated data: 16 + 20 of 32 bytes
        p = tpath(gz ? "trunc.gz" : "trunc");
        write_idx(p, gz, 3, dims, data, 20);
        CHECK(weft_idx_load(p, 3) == NULL);
        CHECK(err_has(p) && err_has("truncated") && err_has("byte offset 36"));
        // truncated header
        p = tpath(gz ? "trunch.gz" : "trunch");
        n = idx_bytes(buf, 3, dims, data, 0);
        write_bytes(p, buf, 9, gz); // ends inside the first dimension
        CHECK(weft_idx_load(p, 3) == NULL);
        CHECK(err_has(p) && err_has("truncated") && err_has("byte offset 9"));
        // trailing data
        p = tpath(gz ? "trail.gz" : "trail");
        write_idx(p, gz, 3, dims, data, 33);
        CHECK(weft_idx_load(p, 3) == NULL);
        CHECK(err_has(p) && err_has("byte offset 48"));
        // empty file
        p = tpath(gz ? "empty.gz" : "empty");
        write_bytes(p, buf, 0, gz);
        CHECK(weft_idx_load(p, 3) == NULL);
        CHECK(err_has(p) && err_has("byte offset 0"));
    }
    // a corrupt gzip stream (valid gzip header, garbage after it)
    const char *p = tpath("corrupt.gz");
    write_idx(p, true, 3, dims, data, 32);
    FILE *f = fopen(p, "r+b");
    fseek(f, 12, SEEK_SET);
    for (int i = 0; i < 8; i++) fputc(0xFF, f);
    fclose(f);
    CHECK(weft_idx_load(p, 3) == NULL);
    CHECK(err_has(p));
    CHECK(weft_idx_load(NULL, 3) == NULL);
}

// A fake Fashion-MNIST directory with n images (optionally wrong size) and labels.
static void make_fmnist(const char *dir, const char *pre, uint32_t n, uint32_t h, uint32_t nlab, int badlabel) {
    char p[400];
    unsigned char *img = malloc(n * h * 28), *lab = malloc(nlab);
    for (uint32_t i = 0; i < n * h * 28; i++) img[i] = (unsigned char)(i * 7 + 3);
    for (uint32_t i = 0; i < nlab; i++) lab[i] = i % 10;
    if (badlabel >= 0) lab[badlabel] = 12;
    uint32_t d3[3] = {n, h, 28}, d1[1] = {nlab};
    snprintf(p, sizeof p, "%s/%s-images-idx3-ubyte.gz", dir, pre);
    write_idx(p, true, 3, d3, img, n * h * 28);
    snprintf(p, sizeof p, "%s/%s-labels-idx1-ubyte", dir, pre); // plain, not gzipped
    write_idx(p, false, 1, d1, lab, nlab);
    free(img);
    free(lab);
}

static void test_fmnist_fake(void) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/fm", g_tmp);
    mkdir(dir, 0777);
    // missing directory: names the file and the Debian package
    weft_dataset *d = weft_fmnist_load(tpath("nofm"), "train", 0, 1);
    CHECK(d == NULL);
    CHECK(err_has("nofm/train-images-idx3-ubyte.gz") && err_has("dataset-fashion-mnist"));
    CHECK(weft_fmnist_load(dir, "valid", 0, 1) == NULL && err_has("fmnist_load"));

    make_fmnist(dir, "train", 20, 28, 20, -1);
    double mean = 0.25, std = 0.5;
    d = weft_fmnist_load(dir, "train", mean, std);
    CHECK(d != NULL);
    if (d) {
        CHECK(weft_dataset_len(d) == 20);
        CHECK(weft_tensor_dtype(d->inputs) == WEFT_F32 && weft_tensor_ndim(d->inputs) == 4);
        CHECK(weft_tensor_size(d->inputs, 1) == 1 && weft_tensor_size(d->inputs, 2) == 28 &&
              weft_tensor_size(d->inputs, 3) == 28);
        CHECK(weft_tensor_dtype(d->labels) == WEFT_I64 && weft_tensor_size(d->labels, 0) == 20);
        const float *x = weft_tensor_data(d->inputs);
        int bad = 0;
        for (uint32_t i = 0; i < 20 * 784; i++) {
            double ref = ((unsigned char)(i * 7 + 3) / 255.0 - mean) / std;
            if (fabs(x[i] - ref) > 1e-6) bad++;
        }
        CHECK(bad == 0);
        const int64_t *y = weft_tensor_data(d->labels);
        bad = 0;
        for (int i = 0; i < 20; i++) bad += y[i] != i % 10;
        CHECK(bad == 0);
        weft_dataset_free(d);
    }
    // mean 0, std 1: plain [0, 1]
    d = weft_fmnist_load(dir, "train", 0, 1);
    if (d) CHECK_NEAR(((float *)weft_tensor_data(d->inputs))[1], 10 / 255.0, 1e-7);
    weft_dataset_free(d);
    CHECK(weft_fmnist_load(dir, "train", 0, 0) == NULL && err_has("std"));

    // test split: wrong image size
    make_fmnist(dir, "t10k", 4, 27, 4, -1);
    CHECK(weft_fmnist_load(dir, "test", 0, 1) == NULL);
    CHECK(err_has("t10k-images-idx3-ubyte.gz") && err_has("byte offset 8"));
    // label count does not match
    make_fmnist(dir, "t10k", 4, 28, 5, -1);
    CHECK(weft_fmnist_load(dir, "test", 0, 1) == NULL);
    CHECK(err_has("t10k-labels-idx1-ubyte") && err_has("byte offset 4"));
    // a label out of range: byte 8 + 3
    make_fmnist(dir, "t10k", 4, 28, 4, 3);
    CHECK(weft_fmnist_load(dir, "test", 0, 1) == NULL);
    CHECK(err_has("t10k-labels-idx1-ubyte") && err_has("byte offset 11"));
    // truncated image data
    uint32_t d3[3] = {4, 28, 28};
    unsigned char px[100] = {0};
    char p[400];
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte.gz", dir);
    write_idx(p, true, 3, d3, px, 100);
    CHECK(weft_fmnist_load(dir, "test", 0, 1) == NULL);
    CHECK(err_has(p) && err_has("byte offset 116"));
}

static void test_fmnist_real(void) {
    const char *img = WEFT_FMNIST_DIR "/train-images-idx3-ubyte.gz";
    if (access(img, R_OK) != 0) {
        printf("note: %s not installed (Debian dataset-fashion-mnist); real Fashion-MNIST checks skipped\n", img);
        return;
    }
    weft_dataset *tr = weft_fmnist_load(NULL, "train", WEFT_FMNIST_MEAN, WEFT_FMNIST_STD);
    weft_dataset *te = weft_fmnist_load(NULL, "test", WEFT_FMNIST_MEAN, WEFT_FMNIST_STD);
    CHECK(tr && te);
    if (tr && te) {
        CHECK(weft_dataset_len(tr) == 60000 && weft_dataset_len(te) == 10000);
        int64_t count[10] = {0}, bad = 0;
        const int64_t *y = weft_tensor_data(tr->labels);
        for (int64_t i = 0; i < 60000; i++) {
            if (y[i] < 0 || y[i] > 9) bad++;
            else count[y[i]]++;
        }
        CHECK(bad == 0);
        for (int c = 0; c < 10; c++) CHECK(count[c] == 6000);
        // Normalised with the published statistics: mean ~0, std ~1.
        const float *x = weft_tensor_data(tr->inputs);
        double s = 0, s2 = 0;
        int64_t n = 60000 * 784;
        for (int64_t i = 0; i < n; i++) {
            s += x[i];
            s2 += (double)x[i] * x[i];
        }
        double m = s / n, sd = sqrt(s2 / n - m * m);
        CHECK(fabs(m) < 0.01);
        CHECK(fabs(sd - 1) < 0.01);
    }
    weft_dataset_free(tr);
    weft_dataset_free(te);
}

static void test_text(void) {
    const char *txt = "In the beginning\nwas \xff\x01 bytes";
    size_t n = strlen(txt);
    write_bytes(tpath("t.txt"), txt, n, false);
    weft_tensor *a = weft_text_load(tpath("t.txt"), WEFT_U8), *b = weft_text_load(tpath("t.txt"), WEFT_I64);
    CHECK(a && b);
    if (a && b) {
        CHECK(weft_tensor_numel(a) == (int64_t)n && weft_tensor_numel(b) == (int64_t)n);
        CHECK(memcmp(weft_tensor_data(a), txt, n) == 0);
        const int64_t *bp = weft_tensor_data(b);
        int bad = 0;
        for (size_t i = 0; i < n; i++) bad += bp[i] != (unsigned char)txt[i];
        CHECK(bad == 0);
        CHECK(bp[n - 8] == 255); // bytes, not signed chars
    }
    weft_tensor_free(a);
    weft_tensor_free(b);
    CHECK(weft_text_load(tpath("nope.txt"), WEFT_U8) == NULL && err_has("nope.txt"));
    write_bytes(tpath("e.txt"), "", 0, false);
    CHECK(weft_text_load(tpath("e.txt"), WEFT_U8) == NULL && err_has("e.txt"));
    CHECK(weft_text_load(tpath("t.txt"), WEFT_F32) == NULL && err_has("text_load"));
}

static bool file_has(const char *path, const char *want) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char buf[256] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    return n == strlen(want) && memcmp(buf, want, n) == 0;
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static void test_text_cache(void) {
    // The cache does not exist (nor its directory): the command runs, its output is cached.
    const char *cache = tpath("cache/sub/corpus.txt");
    weft_tensor *t = weft_text_load_cached(cache, "printf 'hello, world'", "bible-kjv", WEFT_U8);
    CHECK(t && weft_tensor_numel(t) == 12);
    if (t) CHECK(memcmp(weft_tensor_data(t), "hello, world", 12) == 0);
    weft_tensor_free(t);
    CHECK(file_has(cache, "hello, world"));
    CHECK(count_entries(tpath("cache/sub")) == 1); // no temp file left behind
    // Present: read from the cache, the command is not run.
    t = weft_text_load_cached(cache, "false", NULL, WEFT_I64);
    CHECK(t && weft_tensor_numel(t) == 12 && weft_tensor_dtype(t) == WEFT_I64);
    weft_tensor_free(t);
    // A missing program: the message says which package to install; nothing cached.
    const char *c2 = tpath("cache/c2.txt");
    CHECK(weft_text_load_cached(c2, "weft-no-such-program-xyz -f a", "bible-kjv", WEFT_U8) == NULL);
    CHECK(err_has("weft-no-such-program-xyz") && err_has("bible-kjv"));
    CHECK(access(c2, F_OK) != 0);
    // A failing command, or one that prints nothing: an error, nothing cached.
    CHECK(weft_text_load_cached(c2, "sh -c 'echo partial; exit 3'", NULL, WEFT_U8) == NULL && err_has("exit status 3"));
    CHECK(access(c2, F_OK) != 0);
    CHECK(weft_text_load_cached(c2, "true", NULL, WEFT_U8) == NULL && err_has("nothing"));
    CHECK(access(c2, F_OK) != 0);
    CHECK(count_entries(tpath("cache")) == 1); // only sub/

    // The KJV with a fake corpus file as its cache: read, bible is not run.
    const char *fake = tpath("kjv-fake.txt");
    write_bytes(fake, "Ge1:1 fake", 10, false);
    t = weft_kjv_load(fake, WEFT_U8);
    CHECK(t && weft_tensor_numel(t) == 10);
    weft_tensor_free(t);
    // No `bible` on the PATH: the message names bible-kjv.
    char *old = strdup(getenv("PATH") ? getenv("PATH") : "");
    setenv("PATH", "/nonexistent-weft-dir", 1);
    CHECK(weft_kjv_load(tpath("kjv-none.txt"), WEFT_U8) == NULL);
    CHECK(err_has("bible") && err_has("install the Debian package bible-kjv"));
    setenv("PATH", old, 1);
    free(old);
    CHECK(access(tpath("kjv-none.txt"), F_OK) != 0);
}

static void test_kjv_real(void) {
    if (system("command -v bible >/dev/null 2>&1") != 0) {
        printf("note: `bible` not installed (Debian bible-kjv); real KJV checks skipped\n");
        return;
    }
    const char *cache = tpath("kjv/kjv.txt");
    weft_tensor *t = weft_kjv_load(cache, WEFT_U8);
    CHECK(t != NULL);
    if (t) {
        const char *want = "Ge1:1 In the beginning";
        CHECK(weft_tensor_numel(t) > 4000000);
        CHECK(memcmp(weft_tensor_data(t), want, strlen(want)) == 0);
        weft_tensor *c = weft_text_load(cache, WEFT_U8); // the cache holds the same bytes
        CHECK(c && weft_tensor_numel(c) == weft_tensor_numel(t) &&
              memcmp(weft_tensor_data(c), weft_tensor_data(t), weft_tensor_numel(t)) == 0);
        weft_tensor_free(c);
    }
    weft_tensor_free(t);
}

static void test_split(void) {
    weft_tensor *t = weft_tensor_arange(0, 10, 1, WEFT_I64), *tr, *va;
    CHECK(weft_train_val_split(t, 0.2, &tr, &va) == WEFT_OK);
    CHECK(tr && va && weft_tensor_numel(tr) == 8 && weft_tensor_numel(va) == 2);
    if (va) {
        double v[2];
        weft_tensor_to_f64(va, v, 2);
        CHECK(v[0] == 8 && v[1] == 9); // the last part is validation
        CHECK(weft_tensor_shares_storage(va, t));
    }
    weft_tensor_free(tr);
    weft_tensor_free(va);
    CHECK(weft_train_val_split(t, 1.5, &tr, &va) != WEFT_OK && err_has("train_val_split") && !tr && !va);
    CHECK(weft_train_val_split(t, 0, &tr, &va) == WEFT_OK && weft_tensor_numel(tr) == 10);
    weft_tensor_free(tr);
    weft_tensor_free(va);
    weft_tensor_free(t);

    weft_dataset d = {weft_tensor_zeros(WEFT_DIMS(10, 3), WEFT_F32), weft_tensor_arange(0, 10, 1, WEFT_I64)};
    weft_dataset *a, *b;
    CHECK(weft_dataset_split(&d, 0.3, &a, &b) == WEFT_OK);
    CHECK(a && b && weft_dataset_len(a) == 7 && weft_dataset_len(b) == 3 && weft_tensor_size(b->inputs, 1) == 3);
    if (b) {
        double v[3];
        CHECK(weft_tensor_to_f64(b->labels, v, 3) == WEFT_OK && v[0] == 7 && v[2] == 9);
    }
    weft_dataset_free(a);
    weft_dataset_free(b);
    weft_tensor_free(d.inputs);
    weft_tensor_free(d.labels);
}

// ---- loader ----

#define LN 103
static weft_tensor *g_in, *g_lab; // inputs[i] = {i, -i}, labels[i] = 7 i

static weft_loader *mk(int64_t bs, bool shuffle, uint64_t seed, bool drop_last, int prefetch) {
    weft_loader_opts o = {.batch_size = bs, .shuffle = shuffle, .seed = seed, .drop_last = drop_last, .prefetch = prefetch};
    return weft_loader_create(g_in, g_lab, &o);
}

// Consumes one epoch: records sample ids in order; checks x/y agree. Returns batches.
static int64_t run_epoch(weft_loader *l, int64_t *ids, int64_t *nids, int64_t *sizes) {
    int64_t nb = 0;
    *nids = 0;
    for (;;) {
        weft_tensor *x, *y;
        int r = weft_loader_next(l, &x, &y);
        if (r <= 0) {
            CHECK(r == 0);
            break;
        }
        int64_t b = weft_tensor_size(x, 0);
        CHECK(weft_tensor_size(x, 1) == 2 && weft_tensor_size(y, 0) == b);
        const float *xp = weft_tensor_data(x);
        const int64_t *yp = weft_tensor_data(y);
        int bad = 0;
        for (int64_t k = 0; k < b; k++) {
            bad += xp[2 * k + 1] != -xp[2 * k] || yp[k] != 7 * (int64_t)xp[2 * k];
            ids[(*nids)++] = (int64_t)xp[2 * k];
        }
        CHECK(bad == 0);
        if (sizes) sizes[nb] = b;
        nb++;
        weft_tensor_free(x);
        weft_tensor_free(y);
    }
    return nb;
}

static void test_loader_epochs(void) {
    int64_t ids0[LN], ids1[LN], idsb[LN], n0, n1, sizes[20];
    for (int prefetch = 0; prefetch <= 3; prefetch += 3) {
        weft_loader *l = mk(10, true, 42, false, prefetch);
        CHECK(l && weft_loader_batches_per_epoch(l) == 11);
        CHECK(run_epoch(l, ids0, &n0, sizes) == 11);
        CHECK(n0 == LN && sizes[10] == 3 && sizes[0] == 10);
        int seen[LN] = {0}, bad = 0;
        for (int i = 0; i < n0; i++) seen[ids0[i]]++;
        for (int i = 0; i < LN; i++) bad += seen[i] != 1;
        CHECK(bad == 0); // each sample exactly once
        int64_t e, ix;
        weft_loader_position(l, &e, &ix);
        CHECK(e == 1 && ix == 0);
        CHECK(run_epoch(l, ids1, &n1, NULL) == 11 && n1 == LN);
        CHECK(memcmp(ids0, ids1, sizeof ids0) != 0); // a new order each epoch
        int64_t ord[LN];
        weft_loader_epoch_order(l, 1, ord);
        CHECK(memcmp(ord, ids1, sizeof ord) == 0);
        int identity = 1;
        for (int i = 0; i < LN; i++) identity &= ids0[i] == i;
        CHECK(!identity);
        weft_loader_free(l);

        // the same seed: the same orders; another seed: another order
        l = mk(10, true, 42, false, 3 - prefetch);
        run_epoch(l, idsb, &n1, NULL);
        CHECK(memcmp(ids0, idsb, sizeof ids0) == 0);
        weft_loader_free(l);
        l = mk(10, true, 43, false, prefetch);
        run_epoch(l, idsb, &n1, NULL);
        CHECK(memcmp(ids0, idsb, sizeof ids0) != 0);
        weft_loader_free(l);

        // drop_last: 10 full batches; no shuffle: in order
        l = mk(10, false, 0, true, prefetch);
        CHECK(run_epoch(l, idsb, &n1, sizes) == 10 && n1 == 100 && sizes[9] == 10);
        bad = 0;
        for (int i = 0; i < 100; i++) bad += idsb[i] != i;
        CHECK(bad == 0);
        weft_loader_free(l);
    }
    // labels optional; y may be skipped
    weft_loader_opts o = weft_loader_default_opts();
    weft_loader *l = weft_loader_create(g_in, NULL, &o);
    weft_tensor *x, *y = (weft_tensor *)1;
    CHECK(l && weft_loader_next(l, &x, &y) == 1 && y == NULL && weft_tensor_size(x, 0) == 64);
    weft_tensor_free(x);
    weft_loader_free(l);
    // bad arguments
    CHECK(mk(0, true, 0, false, 2) == NULL && err_has("batch_size"));
    CHECK(mk(200, true, 0, true, 2) == NULL && err_has("loader_create"));
    weft_tensor *short_lab = weft_tensor_zeros(WEFT_DIMS(5), WEFT_I64);
    CHECK(weft_loader_create(g_in, short_lab, &o) == NULL && err_has("labels"));
    weft_tensor_free(short_lab);
}

// Records the next k batches' first-sample ids and sizes (0 for end of epoch).
static void take(weft_loader *l, int k, int64_t *rec) {
    for (int i = 0; i < k; i++) {
        weft_tensor *x, *y;
        int r = weft_loader_next(l, &x, &y);
        if (r == 1) {
            const float *xp = weft_tensor_data(x);
            uint64_t h = (uint64_t)weft_tensor_size(x, 0);
            for (int64_t j = 0; j < weft_tensor_size(x, 0); j++) h = h * 131 + (uint64_t)xp[2 * j];
            rec[i] = (int64_t)(h >> 2); // >= 0, unlike the end (-1) and error (-2) marks
        } else rec[i] = r == 0 ? -1 : -2;
        weft_tensor_free(x);
        weft_tensor_free(y);
    }
}

static void test_loader_resume(void) {
    for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
        int64_t a[30], b[30], junk[30];
        weft_loader *l = mk(10, true, 7, false, prefetch);
        take(l, 12 + 4, junk); // epoch 0 (11 batches + end) and 4 batches of epoch 1
        int64_t e, ix;
        weft_loader_position(l, &e, &ix);
        CHECK(e == 1 && ix == 4);
        take(l, 25, a); // crosses into epoch 2 and 3
        CHECK(a[7] == -1 && a[19] == -1);
        weft_loader_free(l);

        // A fresh loader set to the saved position gives exactly the same batches.
        weft_loader *r = mk(10, true, 7, false, 2 - prefetch);
        CHECK(weft_loader_set_position(r, 1, 4) == WEFT_OK);
        take(r, 25, b);
        CHECK(memcmp(a, b, sizeof a[0] * 25) == 0);
        // Rewinding the same loader, mid-way through a queue, replays them too.
        CHECK(weft_loader_set_position(r, 1, 4) == WEFT_OK);
        take(r, 25, b);
        CHECK(memcmp(a, b, sizeof a[0] * 25) == 0);
        // The end of an epoch is a position too: (e, nb) reports the end, then e+1.
        weft_loader_set_position(r, 0, 11);
        take(r, 2, b);
        weft_loader_set_position(r, 1, 0);
        take(r, 1, junk);
        CHECK(b[0] == -1 && b[1] == junk[0]);
        CHECK(weft_loader_set_position(r, 0, 12) != WEFT_OK && err_has("loader_set_position"));
        CHECK(weft_loader_set_position(r, -1, 0) != WEFT_OK);
        weft_loader_free(r);
    }
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

// Waits (up to 10 s) until the producer is blocked on a full queue.
static bool wait_blocked(weft_loader *l, weft_loader_stats *s) {
    for (int i = 0; i < 2000; i++) {
        weft_loader_get_stats(l, s);
        if (s->producer_blocked) return true;
        sleep_ms(5);
    }
    return false;
}

static void test_loader_backpressure(void) {
    weft_loader *l = mk(1, true, 1, false, 3); // 103 batches available, room for 3
    CHECK(l != NULL);
    weft_loader_stats s;
    CHECK(wait_blocked(l, &s));
    sleep_ms(50); // a producer without backpressure would run on meanwhile
    weft_loader_get_stats(l, &s);
    CHECK(s.capacity == 3 && s.queued == 3 && s.produced == 3 && s.producer_blocked);
    weft_tensor *x, *y;
    CHECK(weft_loader_next(l, &x, &y) == 1);
    weft_tensor_free(x);
    weft_tensor_free(y);
    CHECK(wait_blocked(l, &s));
    sleep_ms(20);
    weft_loader_get_stats(l, &s);
    CHECK(s.produced == 4 && s.queued == 3);
    weft_loader_free(l); // while the producer is blocked: must return, leak nothing

    // No thread: stats are zero.
    l = mk(4, true, 1, false, 0);
    weft_loader_get_stats(l, &s);
    CHECK(s.capacity == 0 && s.produced == 0);
    weft_loader_free(l);
    // Freeing right after creation (racing the producer), repeatedly.
    int ok = 1;
    for (int i = 0; i < 30; i++) {
        l = mk(2 + i % 3, true, i, false, 1 + i % 4);
        ok &= l != NULL;
        if (i % 2) {
            weft_tensor *x2, *y2;
            ok &= weft_loader_next(l, &x2, &y2) == 1;
            weft_tensor_free(x2);
            weft_tensor_free(y2);
        }
        weft_loader_free(l);
    }
    CHECK(ok);
}

// ---- language-model batches ----

static void test_lm_batch(void) {
    int64_t n = 500, B = 6, T = 16;
    weft_tensor *tok = weft_tensor_arange(0, (double)n, 1, WEFT_I64); // token i at position i
    weft_tensor *x, *y, *x2, *y2;
    CHECK(weft_lm_batch(tok, B, T, 5, 100, &x, &y) == WEFT_OK);
    CHECK(x && y && weft_tensor_dtype(x) == WEFT_I64 && weft_tensor_size(x, 0) == B && weft_tensor_size(x, 1) == T);
    if (!x || !y) return;
    const int64_t *xp = weft_tensor_data(x), *yp = weft_tensor_data(y);
    int bad = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t s0 = xp[b * T];
        bad += s0 < 0 || s0 + T >= n; // the window [s0, s0+T] lies in the corpus
        for (int64_t t = 0; t < T; t++) {
            bad += xp[b * T + t] != s0 + t;     // contiguous window
            bad += yp[b * T + t] != s0 + t + 1; // y is x shifted by one
        }
    }
    CHECK(bad == 0);
    // reproducible from (seed, step); different for another step or seed
    CHECK(weft_lm_batch(tok, B, T, 5, 100, &x2, &y2) == WEFT_OK);
    CHECK(memcmp(weft_tensor_data(x2), xp, sizeof(int64_t) * B * T) == 0 &&
          memcmp(weft_tensor_data(y2), yp, sizeof(int64_t) * B * T) == 0);
    weft_tensor_free(x2);
    weft_tensor_free(y2);
    CHECK(weft_lm_batch(tok, B, T, 5, 101, &x2, &y2) == WEFT_OK);
    CHECK(memcmp(weft_tensor_data(x2), xp, sizeof(int64_t) * B * T) != 0);
    weft_tensor_free(x2);
    weft_tensor_free(y2);
    CHECK(weft_lm_batch(tok, B, T, 6, 100, &x2, &y2) == WEFT_OK);
    CHECK(memcmp(weft_tensor_data(x2), xp, sizeof(int64_t) * B * T) != 0);
    weft_tensor_free(x2);
    weft_tensor_free(y2);
    weft_tensor_free(x);
    weft_tensor_free(y);

    // a u8 corpus gives the same windows as its i64 copy
    unsigned char bytes[300];
    for (int i = 0; i < 300; i++) bytes[i] = (unsigned char)(i * 13 + 1);
    weft_tensor *t8 = weft_tensor_from_data(bytes, WEFT_DIMS(300), WEFT_U8);
    weft_tensor *t64 = weft_tensor_empty(WEFT_DIMS(300), WEFT_I64);
    weft_tensor_copy_(t64, t8);
    CHECK(weft_lm_batch(t8, 4, 8, 1, 2, &x, &y) == WEFT_OK && weft_lm_batch(t64, 4, 8, 1, 2, &x2, &y2) == WEFT_OK);
    CHECK(memcmp(weft_tensor_data(x), weft_tensor_data(x2), 8 * 32) == 0 &&
          memcmp(weft_tensor_data(y), weft_tensor_data(y2), 8 * 32) == 0);
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_tensor_free(x2);
    weft_tensor_free(y2);
    weft_tensor_free(t8);
    weft_tensor_free(t64);

    // every start is reachable, including the first and the last (n - T - 1)
    weft_tensor *small = weft_tensor_arange(0, 11, 1, WEFT_I64); // T = 8: starts 0, 1, 2
    int seen[3] = {0}, out = 0;
    for (int step = 0; step < 50; step++) {
        CHECK(weft_lm_batch(small, 4, 8, 9, (uint64_t)step, &x, &y) == WEFT_OK);
        const int64_t *p = weft_tensor_data(x);
        for (int b = 0; b < 4; b++) {
            if (p[b * 8] >= 0 && p[b * 8] < 3) seen[p[b * 8]]++;
            else out++;
        }
        weft_tensor_free(x);
        weft_tensor_free(y);
    }
    CHECK(out == 0 && seen[0] > 0 && seen[1] > 0 && seen[2] > 0);
    // errors
    CHECK(weft_lm_batch(small, 4, 11, 0, 0, &x, &y) != WEFT_OK && err_has("lm_batch") && !x && !y);
    weft_tensor *two = weft_tensor_zeros(WEFT_DIMS(4, 4), WEFT_I64);
    CHECK(weft_lm_batch(two, 1, 2, 0, 0, &x, &y) != WEFT_OK && err_has("lm_batch"));
    weft_tensor *f = weft_tensor_zeros(WEFT_DIMS(40), WEFT_F32);
    CHECK(weft_lm_batch(f, 1, 2, 0, 0, &x, &y) != WEFT_OK && err_has("lm_batch"));
    weft_tensor_free(two);
    weft_tensor_free(f);
    weft_tensor_free(small);
    weft_tensor_free(tok);
}

// Data sets and batches are host tensors whatever the default device is:
// `weft train --device cuda` makes the accelerator the default while it
// builds the model, and the loader's prefetch thread used to allocate its
// batches there and memcpy host rows into device memory (a crash on a GPU).
static void test_host_under_device_default(void) {
    weft_device dev;
    if (!wt_accelerator(&dev, NULL)) {
        CHECK(!"no accelerator");
        return;
    }
    weft_device prev = weft_device_get_default();
    CHECK(weft_device_set_default(dev) == WEFT_OK);
    weft_loader *l = mk(10, false, 0, false, 3); // a prefetch thread
    weft_tensor *x = NULL, *y = NULL;
    CHECK(l && weft_loader_next(l, &x, &y) == 1);
    CHECK(x && y && weft_tensor_device(x).type == WEFT_CPU && weft_tensor_device(y).type == WEFT_CPU);
    if (x && y && weft_tensor_device(x).type == WEFT_CPU) { // samples 0..9 in order: (i, -i), label 7i
        const float *xp = weft_tensor_data(x);
        const int64_t *yp = weft_tensor_data(y);
        int bad = 0;
        for (int i = 0; i < 10; i++) bad += xp[2 * i] != (float)i || xp[2 * i + 1] != (float)-i || yp[i] != 7 * i;
        CHECK(bad == 0);
    }
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_loader_free(l);
    // language-model batches and token streams
    weft_tensor *tok = weft_tensor_arange(0, 200, 1, WEFT_I64); // made on the default device
    weft_tensor *toh = tok ? weft_tensor_to(tok, WEFT_DEVICE_CPU) : NULL;
    CHECK(toh && weft_lm_batch(toh, 2, 8, 1, 1, &x, &y) == WEFT_OK);
    CHECK(x && weft_tensor_device(x).type == WEFT_CPU && weft_tensor_device(y).type == WEFT_CPU);
    if (x && weft_tensor_device(x).type == WEFT_CPU) {
        const int64_t *xp = weft_tensor_data(x), *yp = weft_tensor_data(y);
        CHECK(yp[0] == xp[0] + 1 && xp[7] == xp[0] + 7);
    }
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_tensor_free(tok);
    weft_tensor_free(toh);
    // an IDX data set
    char dir[300];
    snprintf(dir, sizeof dir, "%s/fmdev", g_tmp);
    mkdir(dir, 0777);
    make_fmnist(dir, "train", 6, 28, 6, -1);
    weft_dataset *d = weft_fmnist_load(dir, "train", 0, 1);
    CHECK(d && weft_tensor_device(d->inputs).type == WEFT_CPU && weft_tensor_device(d->labels).type == WEFT_CPU);
    weft_dataset_free(d);
    weft_device_set_default(prev);
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/weft_data_XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 1;
    }
    float xs[LN * 2];
    int64_t ls[LN];
    for (int i = 0; i < LN; i++) {
        xs[2 * i] = (float)i;
        xs[2 * i + 1] = (float)-i;
        ls[i] = 7 * i;
    }
    g_in = weft_tensor_from_data(xs, WEFT_DIMS(LN, 2), WEFT_F32);
    g_lab = weft_tensor_from_data(ls, WEFT_DIMS(LN), WEFT_I64);

    RUN(test_idx_roundtrip);
    RUN(test_idx_errors);
    RUN(test_fmnist_fake);
    RUN(test_text);
    RUN(test_text_cache);
    RUN(test_kjv_real);
    RUN(test_split);
    RUN(test_loader_epochs);
    RUN(test_loader_resume);
    RUN(test_loader_backpressure);
    RUN(test_lm_batch);
    RUN(test_fmnist_real);
    RUN(test_host_under_device_default);

    weft_tensor_free(g_in);
    weft_tensor_free(g_lab);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
    return wt_summary();
}
