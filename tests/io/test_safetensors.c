// safetensors: round trips (every dtype, non-contiguous, 0-d, empty, metadata),
// a file written by the Python safetensors library, atomic replacement, and
// malformed files (each error names the tensor or byte offset; no crash).
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weft_test.h"

static char g_dir[256];

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    char *b = buf[k++ & 3];
    snprintf(b, 512, "%s/%s", g_dir, name);
    return b;
}

static long file_size(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

static unsigned char *read_file(const char *p, long *n) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*n + 1);
    if (fread(b, 1, (size_t)*n, f) != (size_t)*n) *n = -1;
    fclose(f);
    return b;
}

static void write_file(const char *p, const void *d, size_t n) {
    FILE *f = fopen(p, "wb");
    fwrite(d, 1, n, f);
    fclose(f);
}

// A file from a JSON header (padded to 8) and n data bytes of value `fill`.
static void write_st(const char *p, const char *json, size_t ndata) {
    size_t jl = strlen(json), hl = (jl + 7) / 8 * 8;
    unsigned char *b = calloc(8 + hl + ndata + 1, 1);
    uint64_t h = hl;
    memcpy(b, &h, 8);
    memcpy(b + 8, json, jl);
    memset(b + 8 + jl, ' ', hl - jl);
    for (size_t i = 0; i < ndata; i++) b[8 + hl + i] = (unsigned char)i;
    write_file(p, b, 8 + hl + ndata);
    free(b);
}

// Temporary files (".tmp-") left in the test directory.
static int count_temp_files(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) n += strstr(de->d_name, ".tmp-") != NULL;
    closedir(d);
    return n;
}

static bool same_bytes(const weft_tensor *a, const weft_tensor *b) {
    if (weft_tensor_dtype(a) != weft_tensor_dtype(b) || weft_tensor_ndim(a) != weft_tensor_ndim(b)) return false;
    for (int d = 0; d < weft_tensor_ndim(a); d++)
        if (weft_tensor_size(a, d) != weft_tensor_size(b, d)) return false;
    size_t nb = (size_t)weft_tensor_numel(a) * weft_dtype_size(weft_tensor_dtype(a));
    return nb == 0 || memcmp(weft_tensor_data(a), weft_tensor_data(b), nb) == 0;
}

// Every dtype, with bit patterns that would not survive a conversion.
static void test_roundtrip_dtypes(void) {
    float f32[6] = {1.5f, -0.0f, 3.4e38f, 1e-45f, NAN, -INFINITY};
    double f64[3] = {1e-310, -2.5, 1e300};
    int32_t i32[4] = {INT32_MIN, -1, 0, INT32_MAX};
    int64_t i64[2] = {INT64_MIN, INT64_MAX};
    uint8_t b8[3] = {1, 0, 1}, u8[4] = {0, 1, 128, 255};
    uint16_t f16[3] = {0x3c00, 0x7bff, 0x8001}, bf16[3] = {0x3f80, 0xff80, 0x0001};
    weft_tensor *ts[8] = {
        weft_tensor_from_data(f32, WEFT_DIMS(2, 3), WEFT_F32), weft_tensor_from_data(f64, WEFT_DIMS(3), WEFT_F64),
        weft_tensor_from_data(i32, WEFT_DIMS(2, 2), WEFT_I32), weft_tensor_from_data(i64, WEFT_DIMS(2, 1), WEFT_I64),
        weft_tensor_from_data(b8, WEFT_DIMS(3), WEFT_BOOL),    weft_tensor_from_data(u8, WEFT_DIMS(4), WEFT_U8),
        weft_tensor_from_data(f16, WEFT_DIMS(3), WEFT_F16),    weft_tensor_from_data(bf16, WEFT_DIMS(1, 3), WEFT_BF16),
    };
    const char *names[8] = {"a.f32", "b.f64", "c.i32", "d.i64", "e.bool", "f.u8", "g.f16", "h.bf16"};
    const char *mk[2] = {"format", "note"}, *mv[2] = {"pt", "quote \" and, comma"};
    const char *p = tmp_path("all.safetensors");
    CHECK(weft_safetensors_save(p, 8, names, ts, 2, mk, mv) == WEFT_OK);
    CHECK(count_temp_files() == 0); // no temp file left
    long n;
    unsigned char *raw = read_file(p, &n);
    uint64_t hl;
    memcpy(&hl, raw, 8);
    CHECK(hl % 8 == 0 && 8 + hl <= (uint64_t)n && raw[8] == '{');
    free(raw);
    weft_safetensors *st = weft_safetensors_load(p);
    CHECK(st != NULL);
    if (!st) goto done;
    CHECK(weft_safetensors_count(st) == 8);
    for (int i = 0; i < 8; i++) {
        weft_tensor *t = weft_safetensors_find(st, names[i]);
        CHECK(t != NULL);
        if (t) CHECK(same_bytes(t, ts[i]));
    }
    // tensor_at / name_at agree with find; offsets order puts 8-byte types first
    for (int i = 0; i < weft_safetensors_count(st); i++)
        CHECK(weft_safetensors_tensor_at(st, i) == weft_safetensors_find(st, weft_safetensors_name_at(st, i)));
    CHECK(weft_tensor_dtype(weft_safetensors_tensor_at(st, 0)) == WEFT_F64 ||
          weft_tensor_dtype(weft_safetensors_tensor_at(st, 0)) == WEFT_I64);
    CHECK(weft_safetensors_meta_count(st) == 2);
    CHECK(weft_safetensors_meta(st, "format") && strcmp(weft_safetensors_meta(st, "format"), "pt") == 0);
    CHECK(weft_safetensors_meta(st, "note") && strcmp(weft_safetensors_meta(st, "note"), mv[1]) == 0);
    CHECK(weft_safetensors_meta(st, "nope") == NULL);
    CHECK(weft_safetensors_find(st, "nope") == NULL && strstr(weft_last_error(), "nope"));
    CHECK(weft_safetensors_tensor_at(st, 8) == NULL);
    weft_safetensors_free(st);
done:
    for (int i = 0; i < 8; i++) weft_tensor_free(ts[i]);
}

// Non-contiguous views are written as their logical (row-major) contents.
static void test_noncontiguous(void) {
    weft_tensor *a = weft_tensor_arange(0, 24, 1, WEFT_F32);
    int64_t sz[3] = {2, 3, 4};
    weft_tensor *r = weft_reshape(a, 3, sz);
    weft_tensor *tr = weft_transpose(r, 0, 2);            // (4,3,2)
    weft_tensor *sl = weft_slice(r, 2, 1, 4, 2);          // (2,3,2), step 2
    weft_tensor *ts[2] = {tr, sl};
    const char *names[2] = {"tr", "sl"};
    CHECK(!weft_tensor_is_contiguous(tr) && !weft_tensor_is_contiguous(sl));
    const char *p = tmp_path("nc.safetensors");
    CHECK(weft_safetensors_save(p, 2, names, ts, 0, NULL, NULL) == WEFT_OK);
    weft_safetensors *st = weft_safetensors_load(p);
    CHECK(st != NULL);
    if (st) {
        weft_tensor *t = weft_safetensors_find(st, "tr");
        CHECK(t && weft_tensor_ndim(t) == 3 && weft_tensor_size(t, 0) == 4 && weft_tensor_size(t, 2) == 2);
        const float *d = t ? weft_tensor_data(t) : NULL;
        int bad = 0;
        for (int k = 0; d && k < 4; k++)
            for (int j = 0; j < 3; j++)
                for (int i = 0; i < 2; i++) bad += d[(k * 3 + j) * 2 + i] != (float)(i * 12 + j * 4 + k);
        CHECK(d && bad == 0);
        t = weft_safetensors_find(st, "sl");
        d = t ? weft_tensor_data(t) : NULL;
        bad = 0;
        for (int i = 0; d && i < 2; i++)
            for (int j = 0; j < 3; j++)
                for (int k = 0; k < 2; k++) bad += d[(i * 3 + j) * 2 + k] != (float)(i * 12 + j * 4 + 1 + 2 * k);
        CHECK(d && bad == 0);
        weft_safetensors_free(st);
    }
    weft_tensor_free(sl);
    weft_tensor_free(tr);
    weft_tensor_free(r);
    weft_tensor_free(a);
}

static void test_scalar_empty_nometa(void) {
    weft_tensor *s = weft_tensor_scalar(-7.25, WEFT_F64);
    weft_tensor *e = weft_tensor_zeros(WEFT_DIMS(0, 5), WEFT_F32);
    weft_tensor *e2 = weft_tensor_zeros(WEFT_DIMS(3, 0), WEFT_I64);
    weft_tensor *ts[3] = {s, e, e2};
    const char *names[3] = {"s", "e", "e2"};
    const char *p = tmp_path("se.safetensors");
    CHECK(weft_safetensors_save(p, 3, names, ts, 0, NULL, NULL) == WEFT_OK);
    weft_safetensors *st = weft_safetensors_load(p);
    CHECK(st != NULL);
    if (st) {
        weft_tensor *t = weft_safetensors_find(st, "s");
        CHECK(t && weft_tensor_ndim(t) == 0 && weft_tensor_item(t) == -7.25);
        t = weft_safetensors_find(st, "e");
        CHECK(t && weft_tensor_ndim(t) == 2 && weft_tensor_size(t, 0) == 0 && weft_tensor_size(t, 1) == 5 &&
              weft_tensor_dtype(t) == WEFT_F32);
        t = weft_safetensors_find(st, "e2");
        CHECK(t && weft_tensor_numel(t) == 0 && weft_tensor_size(t, 0) == 3 && weft_tensor_dtype(t) == WEFT_I64);
        CHECK(weft_safetensors_meta_count(st) == 0);
        weft_safetensors_free(st);
    }
    // no tensors at all
    CHECK(weft_safetensors_save(tmp_path("none.safetensors"), 0, NULL, NULL, 0, NULL, NULL) == WEFT_OK);
    st = weft_safetensors_load(tmp_path("none.safetensors"));
    CHECK(st && weft_safetensors_count(st) == 0);
    weft_safetensors_free(st);
    unlink(tmp_path("none.safetensors"));
    for (int i = 0; i < 3; i++) weft_tensor_free(ts[i]);
}

// Written by the Python safetensors library (tests/data/make_ref_safetensors.py).
static void test_python_reference(void) {
    char p[1024];
    const char *env = getenv("WEFT_TEST_DATA");
    if (env) snprintf(p, sizeof p, "%s/ref.safetensors", env);
    else {
        snprintf(p, sizeof p, "%s", __FILE__); // .../tests/io/test_safetensors.c
        char *s = strrchr(p, '/');
        if (s) *s = 0;
        s = strrchr(p, '/');
        if (s) *s = 0;
        strncat(p, "/data/ref.safetensors", sizeof p - strlen(p) - 1);
    }
    weft_safetensors *st = weft_safetensors_load(p);
    CHECK(st != NULL);
    if (!st) return;
    CHECK(weft_safetensors_count(st) == 11);
    CHECK(weft_safetensors_meta(st, "step") && strcmp(weft_safetensors_meta(st, "step"), "42") == 0);
    CHECK(weft_safetensors_meta(st, "format") && strcmp(weft_safetensors_meta(st, "format"), "pt") == 0);
    double v[24];
    weft_tensor *t = weft_safetensors_find(st, "f32");
    CHECK(t && weft_tensor_dtype(t) == WEFT_F32 && weft_tensor_size(t, 0) == 2 && weft_tensor_size(t, 1) == 3);
    if (t) {
        weft_tensor_to_f64(t, v, 6);
        for (int i = 0; i < 6; i++) CHECK(v[i] == i * 0.5);
    }
    t = weft_safetensors_find(st, "layer.0.weight");
    CHECK(t && weft_tensor_ndim(t) == 3 && weft_tensor_size(t, 2) == 4);
    if (t) {
        weft_tensor_to_f64(t, v, 24);
        int bad = 0;
        for (int i = 0; i < 24; i++) bad += v[i] != i - 12;
        CHECK(bad == 0);
    }
    t = weft_safetensors_find(st, "f64");
    CHECK(t && weft_tensor_dtype(t) == WEFT_F64);
    if (t) {
        const double *d = weft_tensor_data(t);
        CHECK(d[0] == 1.5 && d[1] == -2.25 && d[2] == 1e300);
    }
    t = weft_safetensors_find(st, "i32");
    CHECK(t && weft_tensor_dtype(t) == WEFT_I32);
    if (t) {
        const int32_t *d = weft_tensor_data(t);
        CHECK(d[0] == -1 && d[1] == 2 && d[2] == INT32_MAX);
    }
    t = weft_safetensors_find(st, "i64");
    CHECK(t && weft_tensor_dtype(t) == WEFT_I64);
    if (t) {
        const int64_t *d = weft_tensor_data(t);
        CHECK(d[0] == -(INT64_C(1) << 40) && d[1] == 7);
    }
    t = weft_safetensors_find(st, "bool");
    CHECK(t && weft_tensor_dtype(t) == WEFT_BOOL);
    if (t) {
        const uint8_t *d = weft_tensor_data(t);
        CHECK(d[0] == 1 && d[1] == 0 && d[2] == 1);
    }
    t = weft_safetensors_find(st, "u8");
    CHECK(t && weft_tensor_dtype(t) == WEFT_U8);
    if (t) {
        const uint8_t *d = weft_tensor_data(t);
        CHECK(d[0] == 0 && d[1] == 255 && d[2] == 7);
    }
    t = weft_safetensors_find(st, "f16");
    CHECK(t && weft_tensor_dtype(t) == WEFT_F16);
    if (t) {
        const uint16_t *d = weft_tensor_data(t);
        CHECK(weft_f16_to_f32(d[0]) == 1.0f && weft_f16_to_f32(d[1]) == -0.5f && weft_f16_to_f32(d[2]) == 65504.0f);
    }
    t = weft_safetensors_find(st, "bf16");
    CHECK(t && weft_tensor_dtype(t) == WEFT_BF16);
    if (t) {
        const uint16_t *d = weft_tensor_data(t);
        CHECK(weft_bf16_to_f32(d[0]) == 1.0f && weft_bf16_to_f32(d[1]) == -2.0f &&
              weft_bf16_to_f32(d[2]) == 0.15625f);
    }
    t = weft_safetensors_find(st, "scalar");
    CHECK(t && weft_tensor_ndim(t) == 0 && weft_tensor_item(t) == 3.25);
    t = weft_safetensors_find(st, "empty");
    CHECK(t && weft_tensor_ndim(t) == 2 && weft_tensor_size(t, 0) == 0 && weft_tensor_size(t, 1) == 4);
    // copy_to: into a parameter-like tensor; shape mismatch and missing names are errors naming the tensor
    weft_tensor *dst = weft_tensor_zeros(WEFT_DIMS(2, 3), WEFT_F64);
    CHECK(weft_safetensors_copy_to(st, "f32", dst) == WEFT_OK);
    weft_tensor_to_f64(dst, v, 6);
    CHECK(v[5] == 2.5);
    CHECK(weft_safetensors_copy_to(st, "layer.0.weight", dst) == WEFT_ERR_SHAPE &&
          strstr(weft_last_error(), "layer.0.weight"));
    CHECK(weft_safetensors_copy_to(st, "missing.bias", dst) != WEFT_OK && strstr(weft_last_error(), "missing.bias"));
    weft_tensor_free(dst);
    weft_safetensors_free(st);
}

// Atomic replacement: an existing file is replaced, nothing else is left;
// a missing directory is an error; bad arguments are errors.
static void test_atomic(void) {
    weft_tensor *a = weft_tensor_full(WEFT_DIMS(100), WEFT_F32, 1.0);
    weft_tensor *b = weft_tensor_full(WEFT_DIMS(3), WEFT_F32, 2.0);
    const char *na[1] = {"x"};
    const char *p = tmp_path("atomic.safetensors");
    CHECK(weft_safetensors_save(p, 1, na, &a, 0, NULL, NULL) == WEFT_OK);
    long big = file_size(p);
    CHECK(weft_safetensors_save(p, 1, na, &b, 0, NULL, NULL) == WEFT_OK);
    CHECK(file_size(p) < big);
    CHECK(count_temp_files() == 0);
    weft_safetensors *st = weft_safetensors_load(p);
    weft_tensor *x = st ? weft_safetensors_find(st, "x") : NULL;
    CHECK(x && weft_tensor_numel(x) == 3 && ((float *)weft_tensor_data(x))[2] == 2.0f);
    weft_safetensors_free(st);
    struct stat sb;
    CHECK(stat(p, &sb) == 0 && (sb.st_mode & 0444) != 0);
    unlink(p);
    // missing directory
    CHECK(weft_safetensors_save(tmp_path("no/such/dir.safetensors"), 1, na, &a, 0, NULL, NULL) == WEFT_ERR_IO);
    CHECK(strstr(weft_last_error(), "no/such/dir") != NULL);
    CHECK(count_temp_files() == 0);
    struct stat nb;
    CHECK(stat(tmp_path("no"), &nb) != 0); // nothing created on the way
    // duplicate names, reserved name, NULL tensor
    weft_tensor *two[2] = {a, b};
    const char *dup[2] = {"x", "x"}, *res[1] = {"__metadata__"};
    CHECK(weft_safetensors_save(p, 2, dup, two, 0, NULL, NULL) == WEFT_ERR_ARG && strstr(weft_last_error(), "'x'"));
    CHECK(weft_safetensors_save(p, 1, res, &a, 0, NULL, NULL) == WEFT_ERR_ARG);
    weft_tensor *nul[1] = {NULL};
    CHECK(weft_safetensors_save(p, 1, na, nul, 0, NULL, NULL) == WEFT_ERR_ARG);
    CHECK(count_temp_files() == 0);
    // loading a file that does not exist
    CHECK(weft_safetensors_load(tmp_path("missing.safetensors")) == NULL && weft_last_status() == WEFT_ERR_IO);
    weft_tensor_free(a);
    weft_tensor_free(b);
}

// Loads p, expects failure whose message contains `want`.
static void expect_fail(const char *p, const char *want, int line) {
    weft_clear_error();
    weft_safetensors *st = weft_safetensors_load(p);
    if (st || !strstr(weft_last_error(), want)) {
        wt_fail++;
        fprintf(stderr, "%s:%d: expected a load error containing \"%s\", got %s \"%s\"\n", __FILE__, line, want,
                st ? "success" : "error", weft_last_error());
    } else wt_pass++;
    weft_safetensors_free(st);
}
#define EXPECT_FAIL(p, want) expect_fail(p, want, __LINE__)

static void test_malformed(void) {
    const char *p = tmp_path("bad.safetensors");
    // a good file to cut down
    weft_tensor *a = weft_tensor_arange(0, 10, 1, WEFT_F32), *b = weft_tensor_arange(0, 4, 1, WEFT_I64);
    weft_tensor *ts[2] = {a, b};
    const char *names[2] = {"w", "idx"};
    const char *good = tmp_path("good.safetensors");
    CHECK(weft_safetensors_save(good, 2, names, ts, 0, NULL, NULL) == WEFT_OK);
    long n;
    unsigned char *raw = read_file(good, &n);
    // truncated: inside the data (names the tensor), inside the header, inside the length
    write_file(p, raw, (size_t)n - 1);
    EXPECT_FAIL(p, "'w'"); // w (f32) is written after idx (i64): the last tensor is cut
    write_file(p, raw, (size_t)n - 20);
    EXPECT_FAIL(p, "'w'");
    write_file(p, raw, (size_t)n - 60); // cuts into idx too: the first tensor found short is named
    EXPECT_FAIL(p, "'idx'");
    write_file(p, raw, 20);
    EXPECT_FAIL(p, "byte offset 0");
    write_file(p, raw, 5);
    EXPECT_FAIL(p, "too short");
    write_file(p, raw, 0);
    EXPECT_FAIL(p, "too short");
    // header length beyond EOF
    unsigned char *c = malloc((size_t)n);
    memcpy(c, raw, (size_t)n);
    uint64_t huge = (uint64_t)n;
    memcpy(c, &huge, 8);
    write_file(p, c, (size_t)n);
    EXPECT_FAIL(p, "header length");
    huge = UINT64_MAX;
    memcpy(c, &huge, 8);
    write_file(p, c, (size_t)n);
    EXPECT_FAIL(p, "past the end");
    free(c);
    free(raw);
    // bad JSON, not an object, junk after JSON
    write_st(p, "{\"w\": {\"dtype\": \"F32\",", 0);
    EXPECT_FAIL(p, "not valid JSON");
    write_st(p, "[1, 2, 3]", 0);
    EXPECT_FAIL(p, "not a JSON object");
    write_st(p, "{} x", 0);
    EXPECT_FAIL(p, "junk after");
    // unknown dtype
    write_st(p, "{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2);
    EXPECT_FAIL(p, "'w': unknown dtype 'F8_E4M3'");
    write_st(p, "{\"w\":{\"dtype\":3,\"shape\":[2],\"data_offsets\":[0,2]}}", 2);
    EXPECT_FAIL(p, "'w'");
    // shape / size mismatch
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24);
    EXPECT_FAIL(p, "'w': shape (2,3) of F32 needs 24 bytes, data_offsets span 20");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8);
    EXPECT_FAIL(p, "'w': shape[0]");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", 8);
    EXPECT_FAIL(p, "'w': shape[0]");
    write_st(p, "{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,0]}}", 8);
    EXPECT_FAIL(p, "'w': shape has too many elements"); // element count overflows 64 bits
    write_st(p, "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 8);
    EXPECT_FAIL(p, "'w': 9 dims");
    write_st(p, "{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 8);
    EXPECT_FAIL(p, "'w': missing shape");
    // offsets out of range, reversed, malformed, overlapping
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", 16);
    EXPECT_FAIL(p, "'w': data ends at byte offset");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,0]}}", 16);
    EXPECT_FAIL(p, "'w': data_offsets [16, 0)");
    write_st(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0]}}", 16);
    EXPECT_FAIL(p, "'w': data_offsets must be");
    write_st(p,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
             16);
    EXPECT_FAIL(p, "'b' (byte offsets");
    write_st(p,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
             "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
             "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[12,14]}}",
             16);
    EXPECT_FAIL(p, "overlaps tensor 'a'");
    write_st(p,
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
             8);
    EXPECT_FAIL(p, "'a' appears twice");
    // metadata must be string -> string
    write_st(p, "{\"__metadata__\":{\"step\":42}}", 0);
    EXPECT_FAIL(p, "'step' is not a string");
    // a valid hand-made file with an empty tensor sharing an offset still loads
    write_st(p,
             "{\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[4,4]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}}",
             6);
    weft_safetensors *st = weft_safetensors_load(p);
    CHECK(st && weft_safetensors_count(st) == 3 && strcmp(weft_safetensors_name_at(st, 0), "a") == 0);
    weft_safetensors_free(st);
    unlink(p);
    unlink(good);
    weft_tensor_free(a);
    weft_tensor_free(b);
}

// Random byte corruptions (header and data) and random truncations: every load
// either succeeds or fails with a message; never a crash (ASan run included).
static void test_fuzz(void) {
    weft_tensor *a = weft_tensor_arange(0, 12, 1, WEFT_F32), *b = weft_tensor_arange(0, 3, 1, WEFT_I64);
    weft_tensor *ts[2] = {a, b};
    const char *names[2] = {"layer.weight", "layer.bias"};
    const char *mk[1] = {"step"}, *mv[1] = {"7"};
    const char *good = tmp_path("fz.safetensors"), *p = tmp_path("fz_bad.safetensors");
    CHECK(weft_safetensors_save(good, 2, names, ts, 1, mk, mv) == WEFT_OK);
    long n;
    unsigned char *raw = read_file(good, &n);
    unsigned char *c = malloc((size_t)n);
    uint64_t rng = 12345;
    int failed = 0, silent = 0;
    for (int it = 0; it < 600; it++) {
        memcpy(c, raw, (size_t)n);
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        long len = n;
        int mode = (int)(rng >> 60) % 3;
        if (mode == 2) len = (long)((rng >> 20) % (uint64_t)n);
        else {
            int k = 1 + (int)((rng >> 33) % 4);
            for (int j = 0; j < k; j++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                // mostly the length and header bytes, where structure lives
                long pos = mode == 0 ? (long)((rng >> 24) % 120) : (long)((rng >> 24) % (uint64_t)n);
                c[pos] = (unsigned char)(rng >> 56);
            }
        }
        write_file(p, c, (size_t)len);
        weft_clear_error();
        weft_safetensors *st = weft_safetensors_load(p);
        if (!st) {
            failed++;
            if (!weft_last_error()[0]) silent++;
        }
        weft_safetensors_free(st);
    }
    CHECK(failed > 100); // most corruptions are caught
    CHECK(silent == 0);  // every failure says why
    free(c);
    free(raw);
    unlink(p);
    unlink(good);
    weft_tensor_free(a);
    weft_tensor_free(b);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/weft_st_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    RUN(test_roundtrip_dtypes);
    RUN(test_noncontiguous);
    RUN(test_scalar_empty_nometa);
    RUN(test_python_reference);
    RUN(test_atomic);
    RUN(test_malformed);
    RUN(test_fuzz);
    unlink(tmp_path("all.safetensors"));
    unlink(tmp_path("nc.safetensors"));
    unlink(tmp_path("se.safetensors"));
    rmdir(g_dir);
    return wt_summary();
}
