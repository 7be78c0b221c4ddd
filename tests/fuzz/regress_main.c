// Replays inputs through a harness's fuzz_one (fuzz.h), built with the
// normal compiler (no libFuzzer): the ctest fuzz/<harness>.
//
//   fuzz_regress_<harness> REGRESS_DIR [CORPUS_DIR]
//
// REGRESS_DIR holds every input that ever crashed the harness, and
// expect.txt, one line per input: "FILE<TAB>TEXT", TEXT a piece of the error
// message the input must now get (a clean error: a status and that message,
// no crash, no sanitizer report). Every file there must have a line. The
// seed corpus in CORPUS_DIR (optional) must merely not crash. Each input may
// make weft allocate at most 256 MiB at a time (libFuzzer's limit is 2 GiB;
// an 8-byte file that promised gigabytes used to be allocated first).
#include "fuzz.h" // first: it asks for _GNU_SOURCE

#include <dirent.h>
#include <sys/stat.h>

#define PEAK_LIMIT ((size_t)256 << 20)

static int n_pass, n_fail;

// ASan: report an over-large allocation as a failure, not a crash of the runner.
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    unsigned char *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + len, 1, cap - len, f)) > 0;) {
        len += r;
        if (len == cap) {
            unsigned char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    *n = len;
    return buf;
}

// Runs one input; want: the message piece a regression input must get (NULL: a corpus input).
static void replay(const char *path, const char *name, const char *want) {
    size_t n = 0;
    unsigned char *data = read_all(path, &n);
    if (!data) {
        fprintf(stderr, "FAIL %s: cannot read it\n", name);
        n_fail++;
        return;
    }
    weft_clear_error();
    weft_memory_reset_peak(WEFT_DEVICE_CPU);
    weft_status st = fuzz_one(data, n);
    weft_memory_stats ms = {0};
    weft_memory_stats_get(WEFT_DEVICE_CPU, &ms);
    free(data);
    const char *msg = weft_last_error();
    bool ok = true;
    if (ms.peak_bytes_in_use > PEAK_LIMIT) {
        fprintf(stderr, "FAIL %s: weft held %zu bytes at once (at most %zu)\n", name, ms.peak_bytes_in_use, PEAK_LIMIT);
        ok = false;
    }
    if (want && (st == WEFT_OK || !msg[0] || !strstr(msg, want))) {
        fprintf(stderr, "FAIL %s: expected an error with '%s', got %s: %s\n", name, want, weft_status_name(st), msg);
        ok = false;
    }
    if (ok) n_pass++;
    else n_fail++;
    if (getenv("FUZZ_VERBOSE")) printf("%-40s %s %s\n", name, weft_status_name(st), st ? msg : "");
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// The regular files of dir, sorted (malloc'd, NULL-terminated).
static char **list_dir(const char *dir, int *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **names = NULL;
    int cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        char p[4096];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (stat(p, &sb) || !S_ISREG(sb.st_mode)) continue;
        if (*n + 1 >= cap) names = realloc(names, sizeof *names * (size_t)(cap = cap ? 2 * cap : 64));
        names[(*n)++] = strdup(e->d_name);
    }
    closedir(d);
    if (names) qsort(names, (size_t)*n, sizeof *names, cmp_str);
    return names;
}

static void free_list(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

static void run_regress(const char *dir) {
    char path[4096], line[1024];
    snprintf(path, sizeof path, "%s/expect.txt", dir);
    FILE *f = fopen(path, "r");
    int n = 0;
    char **files = list_dir(dir, &n);
    if (!f || !files) {
        fprintf(stderr, "FAIL %s: no expect.txt or no inputs\n", dir);
        n_fail++;
        if (f) fclose(f);
        free_list(files, n);
        return;
    }
    bool *listed = calloc((size_t)n, 1);
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0] || line[0] == '#') continue;
        char *tab = strchr(line, '\t');
        if (!tab) {
            fprintf(stderr, "FAIL expect.txt: line '%s' is not FILE<TAB>TEXT\n", line);
            n_fail++;
            continue;
        }
        *tab = 0;
        int k = 0;
        while (k < n && strcmp(files[k], line)) k++;
        if (k == n) {
            fprintf(stderr, "FAIL expect.txt: no input %s\n", line);
            n_fail++;
            continue;
        }
        listed[k] = true;
        snprintf(path, sizeof path, "%s/%s", dir, line);
        replay(path, line, tab + 1);
    }
    fclose(f);
    for (int k = 0; k < n; k++)
        if (!listed[k] && strcmp(files[k], "expect.txt")) {
            fprintf(stderr, "FAIL %s: not in expect.txt (what must it get?)\n", files[k]);
            n_fail++;
        }
    free(listed);
    free_list(files, n);
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s REGRESS_DIR [CORPUS_DIR]\n", argv[0]);
        return 2;
    }
    setenv("WEFT_NO_CACHING", "1", 0); // as the fuzzer runs (fuzz_libfuzzer.c)
    weft_set_num_threads(1);
    run_regress(argv[1]);
    if (argc == 3) {
        int n = 0;
        char **files = list_dir(argv[2], &n);
        char path[4096];
        for (int k = 0; k < n; k++) {
            snprintf(path, sizeof path, "%s/%s", argv[2], files[k]);
            replay(path, files[k], NULL);
        }
        free_list(files, n);
    }
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
