// Metrics writers: CSV rows and TensorBoard event files (TFRecord framing,
// Event/Summary protobufs encoded by hand), plus CRC32C.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "io_impl.h"
#include <weft/io.h>

// ---------------------------------------------------------------- CRC32C

// Castagnoli polynomial, reflected (0x82F63B78); table built once.
static uint32_t g_crc_table[256];
static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        g_crc_table[i] = c;
    }
}

uint32_t weft_crc32c(const void *data, size_t n) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, crc_init);
    const unsigned char *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = g_crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t weft_crc32c_masked(const void *data, size_t n) {
    uint32_t c = weft_crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

// ---------------------------------------------------------------- CSV

struct weft_csv_writer {
    FILE *f;
    int n_cols;
    char *path;
};

// A CSV field: quoted when it holds a comma, quote or newline.
static void csv_field(FILE *f, const char *s) {
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

weft_csv_writer *weft_csv_open(const char *path, int n_cols, const char *const *cols, bool append) {
    if (!path || n_cols < 1 || !cols) return weft_error_null(WEFT_ERR_ARG, "csv_open: bad arguments");
    for (int i = 0; i < n_cols; i++)
        if (!cols[i]) return weft_error_null(WEFT_ERR_ARG, "csv_open %s: column %d has no name", path, i);
    FILE *f = fopen(path, append ? "ab" : "wb");
    if (!f) return weft_error_null(WEFT_ERR_IO, "csv %s: cannot open: %s", path, strerror(errno));
    weft_csv_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        fclose(f);
        return weft_error_null(WEFT_ERR_OOM, "csv %s: out of memory", path);
    }
    w->f = f;
    w->n_cols = n_cols;
    // Appending to a file that already has rows: its header is there already.
    if (ftell(f) == 0) {
        for (int i = 0; i < n_cols; i++) {
            if (i) fputc(',', f);
            csv_field(f, cols[i]);
        }
        fputc('\n', f);
        if (fflush(f) != 0 || ferror(f)) {
            weft_csv_close(w);
            return weft_error_null(WEFT_ERR_IO, "csv %s: write failed: %s", path, strerror(errno));
        }
    }
    return w;
}

weft_status weft_csv_log(weft_csv_writer *w, const double *values) {
    if (!w || !values) return weft_error(WEFT_ERR_ARG, "csv_log: NULL argument");
    for (int i = 0; i < w->n_cols; i++) {
        if (i) fputc(',', w->f);
        double v = values[i];
        // Integers (steps, epochs) print exactly; other values with 9
        // significant digits, enough to round-trip a float.
        if (v == floor(v) && fabs(v) < 1e15) fprintf(w->f, "%.0f", v);
        else fprintf(w->f, "%.9g", v);
    }
    fputc('\n', w->f);
    if (fflush(w->f) != 0 || ferror(w->f))
        return weft_error(WEFT_ERR_IO, "csv %s: write failed: %s", w->path, strerror(errno));
    return WEFT_OK;
}

void weft_csv_close(weft_csv_writer *w) {
    if (!w) return;
    fclose(w->f);
    free(w->path);
    free(w);
}

// ---------------------------------------------------------------- TensorBoard

struct weft_tb_writer {
    FILE *f;
    char *path;
};

// Protobuf wire format: a growable byte buffer.
typedef struct pbuf {
    unsigned char *p;
    size_t n, cap;
    bool oom;
} pbuf;

static void pb_bytes(pbuf *b, const void *d, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) cap *= 2;
        unsigned char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void pb_varint(pbuf *b, uint64_t v) {
    unsigned char t[10];
    int k = 0;
    do {
        t[k++] = (unsigned char)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
    pb_bytes(b, t, (size_t)k);
}
// key = field number << 3 | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32)
static void pb_key(pbuf *b, int field, int wt) { pb_varint(b, (uint64_t)field << 3 | (uint64_t)wt); }
static void pb_double(pbuf *b, int field, double v) {
    pb_key(b, field, 1);
    pb_bytes(b, &v, 8); // little-endian host
}
static void pb_float(pbuf *b, int field, float v) {
    pb_key(b, field, 5);
    pb_bytes(b, &v, 4);
}
static void pb_int64(pbuf *b, int field, int64_t v) {
    pb_key(b, field, 0);
    pb_varint(b, (uint64_t)v); // negative int64: 10-byte two's complement, as protobuf does
}
static void pb_len(pbuf *b, int field, const void *d, size_t n) {
    pb_key(b, field, 2);
    pb_varint(b, n);
    pb_bytes(b, d, n);
}

// One TFRecord: u64 length, masked crc of the length, data, masked crc of data.
static weft_status tb_record(weft_tb_writer *w, const pbuf *b) {
    if (b->oom) return weft_error(WEFT_ERR_OOM, "tensorboard %s: out of memory", w->path);
    uint64_t len = b->n;
    unsigned char head[12];
    memcpy(head, &len, 8);
    uint32_t lc = weft_crc32c_masked(head, 8), dc = weft_crc32c_masked(b->p, b->n);
    memcpy(head + 8, &lc, 4);
    if (fwrite(head, 1, 12, w->f) != 12 || (b->n && fwrite(b->p, 1, b->n, w->f) != b->n) ||
        fwrite(&dc, 1, 4, w->f) != 4 || fflush(w->f) != 0)
        return weft_error(WEFT_ERR_IO, "tensorboard %s: write failed: %s", w->path, strerror(errno));
    return WEFT_OK;
}

static double wall_time(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}

weft_tb_writer *weft_tb_open(const char *logdir) {
    if (!logdir) return weft_error_null(WEFT_ERR_ARG, "tb_open: NULL log directory");
    if (weft_mkdirs(logdir) != WEFT_OK) return NULL;
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "localhost");
    host[sizeof host - 1] = 0;
    for (char *p = host; *p; p++)
        if (*p == '/') *p = '_';
    char path[4096];
    long t = (long)time(NULL);
    int fd = -1;
    // Two writers in one second in one directory: add a suffix (TensorBoard
    // reads any file whose name contains "tfevents").
    for (int k = 0; k < 1000 && fd < 0; k++) {
        int len = k ? snprintf(path, sizeof path, "%s/events.out.tfevents.%ld.%s.%d", logdir, t, host, k)
                    : snprintf(path, sizeof path, "%s/events.out.tfevents.%ld.%s", logdir, t, host);
        if (len < 0 || (size_t)len >= sizeof path) return weft_error_null(WEFT_ERR_ARG, "tensorboard %s: path too long", logdir);
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            return weft_error_null(WEFT_ERR_IO, "tensorboard %s: cannot create: %s", path, strerror(errno));
    }
    if (fd < 0) return weft_error_null(WEFT_ERR_IO, "tensorboard %s: no free file name", logdir);
    weft_tb_writer *w = calloc(1, sizeof *w);
    FILE *f = fdopen(fd, "wb");
    if (!w || !f || !(w->path = strdup(path))) {
        if (f) fclose(f);
        else close(fd);
        free(w);
        return weft_error_null(WEFT_ERR_OOM, "tensorboard %s: out of memory", path);
    }
    w->f = f;
    pbuf b = {0};
    pb_double(&b, 1, wall_time());
    static const char ver[] = "brain.Event:2";
    pb_len(&b, 3, ver, sizeof ver - 1); // Event.file_version
    weft_status s = tb_record(w, &b);
    free(b.p);
    if (s != WEFT_OK) {
        weft_tb_close(w);
        return NULL;
    }
    return w;
}

weft_status weft_tb_scalar(weft_tb_writer *w, const char *tag, int64_t step, double value) {
    if (!w || !tag) return weft_error(WEFT_ERR_ARG, "tb_scalar: NULL argument");
    pbuf val = {0}, sum = {0}, ev = {0};
    pb_len(&val, 1, tag, strlen(tag)); // Summary.Value.tag
    pb_float(&val, 2, (float)value);   // Summary.Value.simple_value
    pb_len(&sum, 1, val.p, val.n);     // Summary.value
    pb_double(&ev, 1, wall_time());    // Event.wall_time
    pb_int64(&ev, 2, step);            // Event.step
    pb_len(&ev, 5, sum.p, sum.n);      // Event.summary
    ev.oom |= val.oom | sum.oom;
    weft_status s = tb_record(w, &ev);
    free(val.p);
    free(sum.p);
    free(ev.p);
    return s;
}

const char *weft_tb_path(const weft_tb_writer *w) { return w ? w->path : NULL; }

void weft_tb_close(weft_tb_writer *w) {
    if (!w) return;
    fclose(w->f);
    free(w->path);
    free(w);
}
