// Shared by the fuzz harnesses (tests/fuzz/fuzz_*.c; docs/reliability.md).
//
// Each harness defines one entry point,
//     weft_status fuzz_one(const uint8_t *data, size_t size);
// which feeds the bytes to one parser, frees everything it made (so a leak is
// a finding) and returns the parser's status: WEFT_OK when the input was
// accepted, else the error, its message in weft_last_error(). An input that
// breaks an invariant the parser promises (a model file that parses but does
// not parse again once written) aborts. Two drivers call it:
//   fuzz_libfuzzer.c   libFuzzer's LLVMFuzzerTestOneInput (make fuzz, clang)
//   regress_main.c     the ctest that replays tests/fuzz/regress/<harness>/
//                      (every input that ever crashed a harness) and the seed
//                      corpus, built with the normal compiler
#ifndef WEFT_FUZZ_H
#define WEFT_FUZZ_H

#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <weft.h>

#include "core/core_impl.h" // weft_error: a harness may restate an error in its own words

weft_status fuzz_one(const uint8_t *data, size_t size);

// The bytes as a file that the loaders open by path: a memfd, named
// "/proc/self/fd/N" (no disk I/O), rewritten for every input. Slot k (0..3)
// gives one file each, for harnesses that need several. NULL on failure.
static inline const char *fuzz_file(int k, const void *data, size_t size) {
    static int fd[4] = {-1, -1, -1, -1};
    static char path[4][48];
    if (k < 0 || k >= 4) return NULL;
    if (fd[k] < 0) {
        if ((fd[k] = memfd_create("weft-fuzz", 0)) < 0) return NULL;
        snprintf(path[k], sizeof path[k], "/proc/self/fd/%d", fd[k]);
    }
    if (ftruncate(fd[k], 0) != 0) return NULL;
    const char *p = data;
    for (size_t off = 0; off < size;) {
        ssize_t w = pwrite(fd[k], p + off, size - off, (off_t)off);
        if (w <= 0) return NULL;
        off += (size_t)w;
    }
    return path[k];
}

static char g_fuzz_dir[64];

static inline void fuzz_rm_tmpdir(void) {
    DIR *d = opendir(g_fuzz_dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char p[sizeof g_fuzz_dir + sizeof e->d_name + 1];
        snprintf(p, sizeof p, "%s/%s", g_fuzz_dir, e->d_name);
        if (e->d_name[0] != '.') unlink(p);
    }
    if (d) closedir(d);
    rmdir(g_fuzz_dir);
}

// A scratch directory for files a harness writes by name (removed at exit).
static inline const char *fuzz_tmpdir(void) {
    if (!g_fuzz_dir[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(g_fuzz_dir, sizeof g_fuzz_dir, "%s/weft-fuzz-XXXXXX", base);
        if (!mkdtemp(g_fuzz_dir)) {
            g_fuzz_dir[0] = 0;
            return NULL;
        }
        atexit(fuzz_rm_tmpdir);
    }
    return g_fuzz_dir;
}

// Ends the process on a broken invariant: the fuzzer reports it as a crash.
#define FUZZ_ASSERT(cond, ...)                                                                  \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "fuzz invariant broken at %s:%d: ", __FILE__, __LINE__);              \
            fprintf(stderr, __VA_ARGS__);                                                        \
            fprintf(stderr, "\n");                                                               \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

#endif
