// CRC32C, TensorBoard event files (framing, CRCs, decoded fields), CSV
// writer, checkpoint directory helpers.
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "weft_test.h"

static char g_dir[256];

static unsigned char *read_file(const char *p, long *n) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*n + 1);
    if (fread(b, 1, (size_t)*n, f) != (size_t)*n) *n = -1;
    b[*n > 0 ? *n : 0] = 0;
    fclose(f);
    return b;
}

// Independent bitwise CRC32C (no table) to cross-check the library's.
static uint32_t crc_bitwise(const unsigned char *p, size_t n) {
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    }
    return ~c;
}
static uint32_t mask(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

static void test_crc32c(void) {
    CHECK(weft_crc32c("123456789", 9) == 0xE3069283u);
    CHECK(weft_crc32c("", 0) == 0);
    unsigned char z[32] = {0}, ff[32];
    memset(ff, 0xff, 32);
    CHECK(weft_crc32c(z, 32) == 0x8A9136AAu); // RFC 3720 B.4 test vectors
    CHECK(weft_crc32c(ff, 32) == 0x62A8AB43u);
    unsigned char r[1000];
    for (int i = 0; i < 1000; i++) r[i] = (unsigned char)(i * 131 + 7);
    CHECK(weft_crc32c(r, 1000) == crc_bitwise(r, 1000));
    CHECK(weft_crc32c_masked(r, 1000) == mask(crc_bitwise(r, 1000)));
}

// ---- a minimal protobuf reader for the test ----
typedef struct {
    const unsigned char *p, *end;
    bool bad;
} pb;
static uint64_t rd_varint(pb *b) {
    uint64_t v = 0;
    for (int s = 0; s < 64; s += 7) {
        if (b->p >= b->end) {
            b->bad = true;
            return 0;
        }
        unsigned char c = *b->p++;
        v |= (uint64_t)(c & 0x7f) << s;
        if (!(c & 0x80)) return v;
    }
    b->bad = true;
    return 0;
}

typedef struct {
    bool has_wall, has_step, has_version, has_summary;
    double wall;
    int64_t step;
    char version[64], tag[64];
    float value;
    int n_values;
} event;

static void parse_value(const unsigned char *p, size_t n, event *e) {
    pb b = {p, p + n, false};
    while (b.p < b.end && !b.bad) {
        uint64_t key = rd_varint(&b);
        if (key == (1 << 3 | 2)) {
            uint64_t l = rd_varint(&b);
            if (l >= sizeof e->tag || l > (uint64_t)(b.end - b.p)) return;
            memcpy(e->tag, b.p, l);
            e->tag[l] = 0;
            b.p += l;
        } else if (key == (2 << 3 | 5)) {
            memcpy(&e->value, b.p, 4);
            b.p += 4;
        } else return;
    }
}

static bool parse_event(const unsigned char *p, size_t n, event *e) {
    memset(e, 0, sizeof *e);
    pb b = {p, p + n, false};
    while (b.p < b.end && !b.bad) {
        uint64_t key = rd_varint(&b);
        switch (key) {
        case 1 << 3 | 1: memcpy(&e->wall, b.p, 8), b.p += 8, e->has_wall = true; break;
        case 2 << 3 | 0: e->step = (int64_t)rd_varint(&b), e->has_step = true; break;
        case 3 << 3 | 2: {
            uint64_t l = rd_varint(&b);
            if (l >= sizeof e->version) return false;
            memcpy(e->version, b.p, l);
            e->version[l] = 0;
            b.p += l;
            e->has_version = true;
            break;
        }
        case 5 << 3 | 2: {
            uint64_t l = rd_varint(&b);
            const unsigned char *se = b.p + l;
            e->has_summary = true;
            pb s = {b.p, se, false};
            while (s.p < s.end && !s.bad) {
                if (rd_varint(&s) != (1 << 3 | 2)) return false;
                uint64_t vl = rd_varint(&s);
                parse_value(s.p, vl, e);
                e->n_values++;
                s.p += vl;
            }
            b.p = se;
            break;
        }
        default: return false;
        }
    }
    return !b.bad && b.p == b.end;
}

static void test_tensorboard(void) {
    char logdir[512];
    snprintf(logdir, sizeof logdir, "%s/runs/a", g_dir); // created by tb_open
    double t0 = (double)time(NULL);
    weft_tb_writer *w = weft_tb_open(logdir);
    CHECK(w != NULL);
    if (!w) return;
    const char *path = weft_tb_path(w);
    const char *base = strrchr(path, '/') + 1;
    char host[256] = "";
    gethostname(host, sizeof host);
    long ts = 0;
    char hn[256] = "";
    CHECK(sscanf(base, "events.out.tfevents.%ld.%255s", &ts, hn) == 2 && strcmp(hn, host) == 0);
    CHECK(ts >= (long)t0 - 1 && ts <= (long)t0 + 5);
    const char *tags[3] = {"train/loss", "train/lr", "test/acc"};
    const double vals[3] = {2.5, 1e-3, 0.875};
    for (int s = 0; s < 5; s++)
        for (int k = 0; k < 3; k++) CHECK(weft_tb_scalar(w, tags[k], 100 * s, vals[k] + s) == WEFT_OK);
    CHECK(weft_tb_scalar(w, "neg", -3, -1.0) == WEFT_OK);
    // flushed per scalar: readable before close
    long n;
    unsigned char *raw = read_file(path, &n);
    long n_open = n;
    free(raw);
    char pathcopy[1024];
    snprintf(pathcopy, sizeof pathcopy, "%s", path);
    weft_tb_close(w);
    raw = read_file(pathcopy, &n);
    CHECK(n == n_open && n > 0);
    // walk the records
    long off = 0;
    int rec = 0, bad = 0;
    while (off + 12 <= n) {
        uint64_t len;
        uint32_t lc, dc;
        memcpy(&len, raw + off, 8);
        memcpy(&lc, raw + off + 8, 4);
        if (lc != mask(crc_bitwise(raw + off, 8))) bad++;
        if (off + 12 + (long)len + 4 > n) {
            bad++;
            break;
        }
        const unsigned char *data = raw + off + 12;
        memcpy(&dc, data + len, 4);
        if (dc != mask(crc_bitwise(data, len))) bad++;
        event e;
        if (!parse_event(data, len, &e)) bad++;
        else if (rec == 0) {
            CHECK(e.has_wall && e.has_version && strcmp(e.version, "brain.Event:2") == 0 && !e.has_summary);
            CHECK(e.wall >= t0 - 1 && e.wall <= t0 + 60);
        } else if (rec <= 15) {
            int s = (rec - 1) / 3, k = (rec - 1) % 3;
            CHECK(e.has_wall && e.has_step && e.step == 100 * s && e.has_summary && e.n_values == 1);
            CHECK(strcmp(e.tag, tags[k]) == 0);
            CHECK(e.value == (float)(vals[k] + s));
            CHECK(e.wall >= t0 - 1 && e.wall <= t0 + 60);
        } else {
            CHECK(e.step == -3 && strcmp(e.tag, "neg") == 0 && e.value == -1.0f);
        }
        rec++;
        off += 12 + (long)len + 4;
    }
    CHECK(bad == 0);
    CHECK(off == n);
    CHECK(rec == 17);
    free(raw);
    // a second writer in the same second gets a different file
    weft_tb_writer *w1 = weft_tb_open(logdir), *w2 = weft_tb_open(logdir);
    CHECK(w1 && w2 && strcmp(weft_tb_path(w1), weft_tb_path(w2)) != 0);
    if (w1) unlink(weft_tb_path(w1));
    if (w2) unlink(weft_tb_path(w2));
    weft_tb_close(w1);
    weft_tb_close(w2);
    unlink(pathcopy);
    rmdir(logdir);
    snprintf(logdir, sizeof logdir, "%s/runs", g_dir);
    rmdir(logdir);
    // a log dir that cannot be created
    CHECK(weft_tb_open("/proc/no/such") == NULL && weft_last_error()[0]);
}

static void test_csv(void) {
    char p[512];
    snprintf(p, sizeof p, "%s/metrics.csv", g_dir);
    const char *cols[4] = {"step", "loss", "lr", "odd,name"};
    weft_csv_writer *w = weft_csv_open(p, 4, cols, false);
    CHECK(w != NULL);
    double r1[4] = {1, 2.5, 0.001, -3}, r2[4] = {2, 0.1, 1e-20, NAN};
    CHECK(weft_csv_log(w, r1) == WEFT_OK);
    long n;
    unsigned char *raw = read_file(p, &n); // flushed: visible before close
    CHECK(raw && strcmp((char *)raw, "step,loss,lr,\"odd,name\"\n1,2.5,0.001,-3\n") == 0);
    free(raw);
    CHECK(weft_csv_log(w, r2) == WEFT_OK);
    weft_csv_close(w);
    // append (a resumed run): no second header
    w = weft_csv_open(p, 4, cols, true);
    double r3[4] = {3, 0.05, 1234567.125, 0};
    CHECK(weft_csv_log(w, r3) == WEFT_OK);
    weft_csv_close(w);
    raw = read_file(p, &n);
    CHECK(raw && strcmp((char *)raw, "step,loss,lr,\"odd,name\"\n1,2.5,0.001,-3\n2,0.1,1e-20,nan\n"
                                     "3,0.05,1234567.12,0\n") == 0);
    if (raw) printf("%s", raw);
    free(raw);
    // overwrite mode starts over
    w = weft_csv_open(p, 1, cols, false);
    weft_csv_close(w);
    raw = read_file(p, &n);
    CHECK(raw && strcmp((char *)raw, "step\n") == 0);
    free(raw);
    unlink(p);
    CHECK(weft_csv_open("/no/such/dir/m.csv", 1, cols, false) == NULL && strstr(weft_last_error(), "/no/such/dir"));
    CHECK(weft_csv_open(p, 0, cols, false) == NULL);
}

static void touch(const char *p) {
    FILE *f = fopen(p, "wb");
    fputs("x", f);
    fclose(f);
}
static bool exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

static void test_ckpt_dir(void) {
    char dir[512], p[1024], q[1024];
    snprintf(dir, sizeof dir, "%s/ck/nested", g_dir);
    int64_t step = 99;
    CHECK(weft_ckpt_latest(dir, &step, p, sizeof p) == WEFT_OK && step == -1 && p[0] == 0); // missing dir: none
    CHECK(weft_mkdirs(dir) == WEFT_OK);
    CHECK(weft_mkdirs(dir) == WEFT_OK); // exists: fine
    CHECK(weft_ckpt_latest(dir, &step, p, sizeof p) == WEFT_OK && step == -1);
    CHECK(weft_ckpt_path(dir, 123, p, sizeof p) && strstr(p, "/ck/nested/ckpt-000123.safetensors"));
    snprintf(q, sizeof q, "%s/", dir);
    CHECK(weft_ckpt_path(q, 5, p, sizeof p) && strstr(p, "nested/ckpt-000005.safetensors") && !strstr(p, "//"));
    CHECK(weft_ckpt_path(dir, 1, p, 10) == NULL);
    // steps out of lexical order, one beyond 6 digits, and files that are not checkpoints
    int64_t steps[] = {5, 40, 1234567, 300, 2};
    for (int i = 0; i < 5; i++) touch(weft_ckpt_path(dir, steps[i], p, sizeof p));
    const char *others[] = {"ckpt-000999.safetensors.tmp-1-0", "ckpt-9999999.txt", "ckpt-.safetensors", "ckpt-0042.safetensors",
                            "notes.txt"};
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, others[i]);
        touch(p);
    }
    CHECK(weft_ckpt_latest(dir, &step, p, sizeof p) == WEFT_OK && step == 1234567 &&
          strstr(p, "ckpt-1234567.safetensors"));
    CHECK(weft_ckpt_keep_last(dir, 2) == WEFT_OK);
    CHECK(exists(weft_ckpt_path(dir, 1234567, p, sizeof p)) && exists(weft_ckpt_path(dir, 300, p, sizeof p)));
    CHECK(!exists(weft_ckpt_path(dir, 40, p, sizeof p)) && !exists(weft_ckpt_path(dir, 5, p, sizeof p)) &&
          !exists(weft_ckpt_path(dir, 2, p, sizeof p)));
    for (int i = 0; i < 5; i++) { // other files untouched
        snprintf(p, sizeof p, "%s/%s", dir, others[i]);
        CHECK(exists(p));
        unlink(p);
    }
    CHECK(weft_ckpt_keep_last(dir, 5) == WEFT_OK && exists(weft_ckpt_path(dir, 300, p, sizeof p)));
    CHECK(weft_ckpt_keep_last(dir, 0) == WEFT_ERR_ARG);
    // a real checkpoint flow: save at steps, keep last 2, load the latest
    weft_tensor *w = weft_tensor_full(WEFT_DIMS(2, 2), WEFT_F32, 0);
    const char *nm[1] = {"w"};
    for (int s = 1; s <= 4; s++) {
        weft_tensor_fill_(w, s);
        char sv[16];
        snprintf(sv, sizeof sv, "%d", 2000000 + s);
        const char *mk[1] = {"step"}, *mv[1] = {sv};
        CHECK(weft_safetensors_save(weft_ckpt_path(dir, 2000000 + s, p, sizeof p), 1, nm, &w, 1, mk, mv) == WEFT_OK);
        CHECK(weft_ckpt_keep_last(dir, 2) == WEFT_OK);
    }
    CHECK(weft_ckpt_latest(dir, &step, p, sizeof p) == WEFT_OK && step == 2000004);
    weft_safetensors *st = weft_safetensors_load(p);
    CHECK(st && strcmp(weft_safetensors_meta(st, "step"), "2000004") == 0);
    double v[4];
    if (st) {
        weft_tensor_to_f64(weft_safetensors_find(st, "w"), v, 4);
        CHECK(v[0] == 4 && v[3] == 4);
    }
    weft_safetensors_free(st);
    int count = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while ((de = readdir(d))) count += de->d_name[0] != '.';
    closedir(d);
    CHECK(count == 2);
    CHECK(weft_ckpt_keep_last(dir, 1) == WEFT_OK);
    CHECK(unlink(weft_ckpt_path(dir, 2000004, p, sizeof p)) == 0);
    CHECK(rmdir(dir) == 0);
    snprintf(dir, sizeof dir, "%s/ck", g_dir);
    rmdir(dir);
    weft_tensor_free(w);
    // mkdirs on a path through a file fails
    snprintf(p, sizeof p, "%s/file", g_dir);
    touch(p);
    snprintf(q, sizeof q, "%s/file/sub", g_dir);
    CHECK(weft_mkdirs(q) == WEFT_ERR_IO);
    CHECK(weft_mkdirs(p) == WEFT_ERR_IO);
    unlink(p);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/weft_io_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    RUN(test_crc32c);
    RUN(test_tensorboard);
    RUN(test_csv);
    RUN(test_ckpt_dir);
    if (rmdir(g_dir) != 0) fprintf(stderr, "left files in %s\n", g_dir);
    return wt_summary();
}
