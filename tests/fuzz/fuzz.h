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

#define RUN_MAX_NUMEL 4096
#define RUN_MAX_NODES 64

// Runs a loaded graph g when it is small (every value at most 4096 elements, at most 64 nodes) and has no while
// loop (one may never end): placeholders fed zeros, every value fetched. Its status (an error is fine: the data
// may be wrong for the op, e.g. an index out of range). For the graph-file and ONNX harnesses.
static inline weft_status fuzz_run_small(weft_graph *g) {
    int nn = weft_graph_node_count(g), nv = weft_graph_value_count(g);
    if (nn > RUN_MAX_NODES) return WEFT_OK;
    for (int i = 0; i < nn; i++)
        if (weft_graph_node_kind(g, (weft_node_id){i}) == WEFT_NODE_WHILE) return WEFT_OK;
    for (int v = 0; v < nv; v++) {
        int64_t n = 1;
        const int64_t *s = weft_graph_value_sizes(g, (weft_value){v});
        for (int d = 0; d < weft_graph_value_ndim(g, (weft_value){v}); d++) n = s[d] > RUN_MAX_NUMEL ? RUN_MAX_NUMEL + 1 : n * s[d];
        if (n > RUN_MAX_NUMEL) return WEFT_OK;
    }
    weft_value feed_vals[RUN_MAX_NODES], fetch[RUN_MAX_NODES * 4];
    weft_tensor *feeds[RUN_MAX_NODES] = {0}, *out[RUN_MAX_NODES * 4] = {0};
    int n_feeds = 0, n_fetch = 0;
    weft_status st = WEFT_OK;
    for (int i = 0; i < nn && !st; i++) {
        weft_node_id id = {i};
        weft_value v0 = weft_graph_node_output(g, id, 0);
        if (weft_graph_node_kind(g, id) == WEFT_NODE_PLACEHOLDER) {
            feed_vals[n_feeds] = v0;
            feeds[n_feeds] = weft_tensor_zeros(weft_graph_value_ndim(g, v0), weft_graph_value_sizes(g, v0),
                                               weft_graph_value_dtype(g, v0));
            if (!feeds[n_feeds++]) st = weft_last_status();
        }
        for (int j = 0; j < weft_graph_node_num_outputs(g, id); j++) fetch[n_fetch++] = weft_graph_node_output(g, id, j);
    }
    if (!st) st = weft_graph_run(g, n_feeds, feed_vals, feeds, n_fetch, fetch, out, 0, NULL);
    for (int k = 0; k < n_feeds; k++) weft_tensor_free(feeds[k]);
    for (int k = 0; k < n_fetch; k++) weft_tensor_free(out[k]);
    return st;
}

#endif
