// IDX files: the header's sizes are a promise the bytes must keep before
// weft allocates for them (an 8-byte file claiming 4 GB used to get its 4 GB
// first). Plain and gzipped files (whose size says nothing about what they
// inflate to) alike; a valid file large enough to grow the read buffer a
// few times still loads byte for byte.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "weft_test.h"

static char g_dir[64];

static const char *write_file(const char *name, const unsigned char *b, size_t n, bool gz) {
    static char p[128];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    if (gz) {
        gzFile f = gzopen(p, "wb");
        gzwrite(f, b, (unsigned)n);
        gzclose(f);
    } else {
        FILE *f = fopen(p, "wb");
        fwrite(b, 1, n, f);
        fclose(f);
    }
    return p;
}

// Loads p and returns the tensor, with the CPU bytes weft held at most meanwhile in *peak.
static weft_tensor *load(const char *p, int nd, size_t *peak) {
    weft_memory_reset_peak(WEFT_DEVICE_CPU);
    weft_memory_stats s0, s1;
    weft_memory_stats_get(WEFT_DEVICE_CPU, &s0);
    weft_clear_error();
    weft_tensor *t = weft_idx_load(p, nd);
    weft_memory_stats_get(WEFT_DEVICE_CPU, &s1);
    *peak = s1.peak_bytes_in_use - s0.bytes_in_use;
    return t;
}

static void test_promises(void) {
    for (int gz = 0; gz < 2; gz++) {
        size_t peak;
        // 4294967295 bytes promised, none there
        unsigned char h[] = {0, 0, 8, 1, 0xFF, 0xFF, 0xFF, 0xFF};
        const char *p = write_file(gz ? "big.gz" : "big", h, sizeof h, gz);
        CHECK(!load(p, 1, &peak) && wt_error_has("truncated data at byte offset 8") &&
              wt_error_has("promises 4294967295 bytes"));
        CHECK(peak < (1u << 20)); // nothing like the promise was allocated
        // 2^30 promised (32768 x 32768), 10 there
        unsigned char h2[22] = {0, 0, 8, 2, 0, 0, 0x80, 0, 0, 0, 0x80, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
        p = write_file(gz ? "mid.gz" : "mid", h2, sizeof h2, gz);
        CHECK(!load(p, 2, &peak) && wt_error_has("truncated data at byte offset 22"));
        CHECK(peak < (1u << 20));
        // a valid 3 MiB file: the buffer grows past its first 1 MiB, every byte arrives
        int64_t n = 3 << 20;
        unsigned char *b = malloc((size_t)n + 8);
        memcpy(b, (unsigned char[]){0, 0, 8, 1, 0, 0x30, 0, 0}, 8);
        for (int64_t i = 0; i < n; i++) b[8 + i] = (unsigned char)(i * 2654435761u >> 13);
        p = write_file(gz ? "ok.gz" : "ok", b, (size_t)n + 8, gz);
        weft_tensor *t = load(p, 1, &peak);
        CHECK(t && weft_tensor_numel(t) == n && !memcmp(weft_tensor_data(t), b + 8, (size_t)n));
        weft_tensor_free(t);
        free(b);
    }
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/weft_idx_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    RUN(test_promises);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    return wt_summary();
}
