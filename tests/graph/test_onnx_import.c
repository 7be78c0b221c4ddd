// ONNX import (weft_onnx_load) against ONNX's own operator tests: Debian's
// libonnx-testdata ships, for every operator, small models (model.onnx) with
// inputs and the outputs ONNX's reference implementation computed
// (test_data_set_0/{input,output}_k.pb). Each model named in
// tests/data/onnx_node_tests.txt must load, run and match within ONNX's own
// tolerance (rtol 1e-3, atol 1e-7, as onnx.backend.test compares; integers
// and bools exactly). The folder: $WEFT_ONNX_TESTDATA, else the package's
// /usr/include/onnx/backend/test/data/node; without it that part is skipped
// (a note says so) and the rest runs. Without ONNX support: skipped (77).
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weft_test.h"

#ifdef WEFT_HAVE_ONNX
#include "graph/onnx.h"

static const char *data_dir(void) {
    const char *e = getenv("WEFT_ONNX_TESTDATA");
    return e && e[0] ? e : "/usr/include/onnx/backend/test/data/node";
}

// A TensorProto file (input_k.pb / output_k.pb) as a tensor; NULL if absent.
static weft_tensor *read_pb(const char *path) {
    uint8_t *buf;
    size_t n;
    struct stat sb;
    if (stat(path, &sb) != 0) return NULL;
    if (weft_onnx_read_file(path, &buf, &n) != WEFT_OK) return NULL;
    Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, n, buf);
    free(buf);
    if (!tp) return NULL;
    weft_tensor *t = NULL;
    weft_onnx_tensor_from(tp, path, &t);
    onnx__tensor_proto__free_unpacked(tp, NULL);
    return t;
}

// The graph inputs of model.onnx that are not initializers, in order (the input_k.pb files follow them).
static int model_inputs(const char *path, char names[][128], int cap, char outs[][128], int *n_out) {
    uint8_t *buf;
    size_t n;
    if (weft_onnx_read_file(path, &buf, &n) != WEFT_OK) return -1;
    Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, n, buf);
    free(buf);
    if (!mp || !mp->graph) return -1;
    int k = 0;
    for (size_t i = 0; i < mp->graph->n_input && k < cap; i++) {
        bool init = false;
        for (size_t j = 0; j < mp->graph->n_initializer; j++)
            init |= !strcmp(mp->graph->initializer[j]->name, mp->graph->input[i]->name);
        if (!init) snprintf(names[k++], 128, "%s", mp->graph->input[i]->name);
    }
    *n_out = 0;
    for (size_t i = 0; i < mp->graph->n_output && *n_out < cap; i++) snprintf(outs[(*n_out)++], 128, "%s", mp->graph->output[i]->name);
    onnx__model_proto__free_unpacked(mp, NULL);
    return k;
}

// Whether got matches want as onnx.backend.test compares: |got - want| <= 1e-7 + 1e-3 |want|.
static bool close_enough(const weft_tensor *got, const weft_tensor *want, char *why, size_t nw) {
    if (weft_tensor_ndim(got) != weft_tensor_ndim(want) || weft_tensor_numel(got) != weft_tensor_numel(want)) {
        snprintf(why, nw, "shape: %d-d %lld elements, expected %d-d %lld", weft_tensor_ndim(got),
                 (long long)weft_tensor_numel(got), weft_tensor_ndim(want), (long long)weft_tensor_numel(want));
        return false;
    }
    for (int d = 0; d < weft_tensor_ndim(got); d++)
        if (weft_tensor_sizes(got)[d] != weft_tensor_sizes(want)[d]) {
            snprintf(why, nw, "dim %d is %lld, expected %lld", d, (long long)weft_tensor_sizes(got)[d],
                     (long long)weft_tensor_sizes(want)[d]);
            return false;
        }
    if (weft_tensor_dtype(got) != weft_tensor_dtype(want)) {
        snprintf(why, nw, "dtype %s, expected %s", weft_dtype_name(weft_tensor_dtype(got)), weft_dtype_name(weft_tensor_dtype(want)));
        return false;
    }
    weft_tensor *g = weft_cast((weft_tensor *)got, WEFT_F64), *w = weft_cast((weft_tensor *)want, WEFT_F64);
    weft_tensor *gc = weft_tensor_contiguous(g), *wc = weft_tensor_contiguous(w);
    bool ok = true;
    const double *a = weft_tensor_data(gc), *b = weft_tensor_data(wc);
    bool exact = weft_tensor_dtype(want) != WEFT_F32 && weft_tensor_dtype(want) != WEFT_F64 &&
                 weft_tensor_dtype(want) != WEFT_F16 && weft_tensor_dtype(want) != WEFT_BF16;
    for (int64_t i = 0; ok && i < weft_tensor_numel(gc); i++) {
        bool same = (isnan(a[i]) && isnan(b[i])) || a[i] == b[i] ||
                    (!exact && fabs(a[i] - b[i]) <= 1e-7 + 1e-3 * fabs(b[i]));
        if (!same) {
            snprintf(why, nw, "element %lld is %.9g, expected %.9g", (long long)i, a[i], b[i]);
            ok = false;
        }
    }
    weft_tensor_free(g), weft_tensor_free(w), weft_tensor_free(gc), weft_tensor_free(wc);
    return ok;
}

// One operator test: 1 passed, 0 failed (why says why), -1 its files are missing.
static int run_case(const char *dir, const char *name, char *why, size_t nw) {
    char path[2400], in_names[8][128], out_names[8][128];
    snprintf(path, sizeof path, "%s/%s/model.onnx", dir, name);
    int n_out = 0, n_in = model_inputs(path, in_names, 8, out_names, &n_out);
    if (n_in < 0) return -1;
    // Integer and 0-d inputs are fixed at load (Reshape's shape, Slice's starts, ReduceSum's axes, Range's
    // bounds, Gather's indices: weft needs most of these as constants), and so are Resize's and Upsample's
    // float scales and roi and Compress's condition (its output's length); the others are fed at run time.
    weft_value fv[8], fetch[8];
    weft_tensor *feeds[8] = {0}, *outs[8] = {0}, *want[8] = {0}, *fixed[8] = {0};
    weft_onnx_shape fix[8];
    int n_fix = 0, n_feed = 0, ok = 1;
    for (int k = 0; k < n_in && ok; k++) {
        snprintf(path, sizeof path, "%s/%s/test_data_set_0/input_%d.pb", dir, name, k);
        weft_tensor *t = read_pb(path);
        if (!t) {
            snprintf(why, nw, "input %d (%s) unreadable", k, in_names[k]), ok = 0;
        } else if (weft_tensor_dtype(t) == WEFT_I64 || weft_tensor_dtype(t) == WEFT_I32 || weft_tensor_ndim(t) == 0 ||
                   !strcmp(in_names[k], "scales") || !strcmp(in_names[k], "roi") ||
                   (!strncmp(name, "test_compress", 13) && !strcmp(in_names[k], "condition"))) {
            fix[n_fix] = (weft_onnx_shape){.name = in_names[k], .value = t};
            fixed[n_fix++] = t;
        } else {
            feeds[n_feed++] = t;
        }
    }
    snprintf(path, sizeof path, "%s/%s/model.onnx", dir, name);
    weft_graph *g = ok ? weft_onnx_load(path, n_fix, fix) : NULL;
    if (!g && ok) snprintf(why, nw, "load: %s", weft_last_error()), ok = 0;
    for (int k = 0, f = 0; k < n_in && ok; k++) {
        bool is_fixed = false;
        for (int j = 0; j < n_fix; j++) is_fixed |= fix[j].name == in_names[k];
        if (is_fixed) continue;
        fv[f] = weft_graph_find_value(g, in_names[k]);
        if (fv[f++].id < 0) snprintf(why, nw, "input %d (%.120s) not in the graph", k, in_names[k]), ok = 0;
    }
    for (int k = 0; k < n_out && ok; k++) {
        snprintf(path, sizeof path, "%s/%s/test_data_set_0/output_%d.pb", dir, name, k);
        want[k] = read_pb(path);
        fetch[k] = weft_graph_find_value(g, out_names[k]);
        if (!want[k] || fetch[k].id < 0) snprintf(why, nw, "output %d (%s) %s", k, out_names[k], want[k] ? "not in the graph" : "unreadable"), ok = 0;
    }
    if (ok && weft_graph_run(g, n_feed, fv, feeds, n_out, fetch, outs, 0, NULL) != WEFT_OK) {
        snprintf(why, nw, "run: %s", weft_last_error());
        ok = 0;
    }
    for (int k = 0; k < n_out && ok; k++) {
        char w[256];
        if (!close_enough(outs[k], want[k], w, sizeof w)) snprintf(why, nw, "output %s: %s", out_names[k], w), ok = 0;
    }
    for (int k = 0; k < 8; k++)
        weft_tensor_free(feeds[k]), weft_tensor_free(outs[k]), weft_tensor_free(want[k]), weft_tensor_free(fixed[k]);
    weft_graph_free(g);
    return ok;
}

// Every case named in tests/data/onnx_node_tests.txt passes. WEFT_ONNX_ALL=1 runs every folder of the test
// data instead and prints what passes (how the list was made).
static void test_conformance(void) {
    const char *dir = data_dir();
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        printf("note: no ONNX operator tests at %s (Debian: libonnx-testdata); conformance skipped\n", dir);
        return;
    }
    if (getenv("WEFT_ONNX_ALL")) {
        DIR *d = opendir(dir);
        struct dirent *de;
        int pass = 0, total = 0;
        while (d && (de = readdir(d))) {
            if (de->d_name[0] == '.') continue;
            char why[1024] = "";
            int r = run_case(dir, de->d_name, why, sizeof why);
            if (r < 0) continue;
            total++, pass += r;
            printf("%s %s%s%s\n", r ? "PASS" : "fail", de->d_name, r ? "" : ": ", why);
        }
        if (d) closedir(d);
        printf("%d of %d ONNX operator tests pass\n", pass, total);
        return;
    }
    char list[1024], line[256];
    snprintf(list, sizeof list, "%s../tests/data/onnx_node_tests.txt", wt_models_dir()); // models/ is beside tests/
    FILE *f = fopen(list, "r");
    CHECK(f != NULL);
    if (!f) return;
    int n = 0, pass = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n# ")] = 0;
        if (!line[0]) continue;
        char why[1024] = "";
        int r = run_case(dir, line, why, sizeof why);
        n++;
        if (r == 1) pass++;
        else fprintf(stderr, "ONNX %s: %s\n", line, r < 0 ? "files missing" : why);
        CHECK(r == 1);
    }
    fclose(f);
    printf("%d of %d listed ONNX operator tests pass\n", pass, n);
    CHECK(n > 100);
}

// Cases in ONNX's test-data layout that a review made (tests/data/onnx_node_cases/, outputs from ONNX Runtime
// 1.32): SoftmaxCrossEntropyLoss on f16 with a weight, ignore_index and log_prob (its outputs stay f16), and
// ignore_index values past int32 or at INT64_MAX (read exactly, never through a double). Every one passes.
static void test_review_cases(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s../tests/data/onnx_node_cases", wt_models_dir());
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        char why[1024] = "";
        int r = run_case(dir, de->d_name, why, sizeof why);
        if (r != 1) fprintf(stderr, "ONNX %s: %s\n", de->d_name, r < 0 ? "files missing" : why);
        CHECK(r == 1);
        n++;
    }
    if (d) closedir(d);
    CHECK(n == 6);
}
#endif

// Files that are not ONNX, missing files and bad arguments come back as errors naming the file.
static void test_errors(void) {
    CHECK(weft_onnx_load("/nonexistent/model.onnx", 0, NULL) == NULL);
    CHECK(wt_error_has("/nonexistent/model.onnx"));
    char path[] = "/tmp/weft_onnx_bad_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    const char junk[] = "\xff\xff\xff\xff this is not a protobuf";
    CHECK(write(fd, junk, sizeof junk) == (ssize_t)sizeof junk);
    close(fd);
    CHECK(weft_onnx_load(path, 0, NULL) == NULL);
    CHECK(wt_error_has(path));
    CHECK(weft_onnx_load(path, -1, NULL) == NULL);
    CHECK(weft_onnx_load(NULL, 0, NULL) == NULL);
    unlink(path);
}

int main(void) {
    if (!weft_onnx_available()) {
        printf("built without ONNX support: skipped\n");
        return 77;
    }
    RUN(test_errors);
#ifdef WEFT_HAVE_ONNX
    RUN(test_conformance);
    RUN(test_review_cases);
#endif
    return wt_summary();
}
