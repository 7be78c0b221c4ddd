#include "weft_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int wt_pass, wt_fail;

int wt_summary(void) {
    printf("%d passed, %d failed\n", wt_pass, wt_fail);
    return wt_fail ? 1 : 0;
}

void wt_check_values(const char *what, const weft_tensor *t, const double *ref, int64_t n, double tol) {
    if (!t) {
        wt_fail++;
        fprintf(stderr, "%s: tensor is NULL (%s)\n", what, weft_last_error());
        return;
    }
    if (weft_tensor_numel(t) != n) {
        wt_fail++;
        fprintf(stderr, "%s: %lld elements, expected %lld\n", what, (long long)weft_tensor_numel(t), (long long)n);
        return;
    }
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    weft_tensor_to_f64(t, v, n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        bool ok = fabs(v[i] - ref[i]) <= tol * (1 + fabs(ref[i])) || (isnan(v[i]) && isnan(ref[i])) ||
                  (isinf(v[i]) && v[i] == ref[i]);
        if (!ok && bad++ < 5)
            fprintf(stderr, "%s[%lld] = %.10g, expected %.10g\n", what, (long long)i, v[i], ref[i]);
    }
    if (bad) wt_fail++;
    else wt_pass++;
    free(v);
}

weft_tensor *wt_f64(const double *v, int ndim, const int64_t *sizes, bool rg) {
    weft_tensor *t = weft_tensor_from_data(v, ndim, sizes, WEFT_F64);
    if (t && rg) weft_tensor_set_requires_grad(t, true);
    return t;
}

weft_tensor *wt_rand64(int ndim, const int64_t *sizes, double lo, double hi, uint64_t seed, bool rg) {
    weft_generator *g = weft_generator_create(seed);
    weft_tensor *t = weft_tensor_empty(ndim, sizes, WEFT_F64);
    weft_tensor_uniform_(t, lo, hi, g);
    weft_generator_free(g);
    if (t && rg) weft_tensor_set_requires_grad(t, true);
    return t;
}

static weft_tensor **g_keep;
static int g_nkeep, g_capkeep;

weft_tensor *wt_keep(weft_tensor *t) {
    if (!t) return t;
    if (g_nkeep == g_capkeep) {
        int cap = g_capkeep ? 2 * g_capkeep : 256;
        weft_tensor **k = realloc(g_keep, sizeof *k * (size_t)cap);
        if (!k) return t; // leaks t in a test under memory pressure; never frees twice
        g_keep = k;
        g_capkeep = cap;
    }
    g_keep[g_nkeep++] = t;
    return t;
}

void wt_drop_all(void) {
    while (g_nkeep) weft_tensor_free(g_keep[--g_nkeep]);
    free(g_keep);
    g_keep = NULL;
    g_capkeep = 0;
}

FILE *wt_open_data(const char *name) {
    char path[1024];
    const char *f = __FILE__, *slash = strrchr(f, '/');
    if (slash) snprintf(path, sizeof path, "%.*s/data/%s", (int)(slash - f), f, name);
    else snprintf(path, sizeof path, "data/%s", name);
    FILE *fp = fopen(path, "r");
    if (!fp) fprintf(stderr, "cannot open %s\n", path);
    return fp;
}

bool wt_write_verses(const char *path, int n) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    static const char *const w[] = {"and", "the", "LORD", "said", "unto", "Moses", "behold", "I", "will", "send", "thee",
                                    "into", "land", "of", "Egypt", "children", "Israel", "went", "up", "out", "house",
                                    "bondage"};
    uint64_t s = 7;
    for (int v = 0; v < n; v++) {
        fprintf(f, "%d:%d ", v / 30 + 1, v % 30 + 1);
        for (int k = 0; k < 12; k++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            fprintf(f, "%s%s", k ? " " : "", w[(s >> 33) % (sizeof w / sizeof *w)]);
        }
        fputs(".\n", f);
    }
    return fclose(f) == 0;
}

void wt_vals(double *v, int64_t n, double lo, double hi, uint64_t seed) {
    uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        v[i] = lo + (hi - lo) * (double)(s >> 11) / 9007199254740992.0;
    }
}

void wt_check_same(const char *what, const weft_tensor *a, const weft_tensor *b, double tol) {
    if (!a || !b) {
        wt_fail++;
        fprintf(stderr, "%s: tensor is NULL (%s)\n", what, weft_last_error());
        return;
    }
    int nd = weft_tensor_ndim(a);
    bool same = weft_tensor_dtype(a) == weft_tensor_dtype(b) && nd == weft_tensor_ndim(b) &&
                memcmp(weft_tensor_sizes(a), weft_tensor_sizes(b), sizeof(int64_t) * (size_t)nd) == 0;
    if (!same) {
        wt_fail++;
        fprintf(stderr, "%s: dtype or shape differ\n", what);
        return;
    }
    int64_t n = weft_tensor_numel(a);
    double *x = malloc(sizeof(double) * (size_t)(n ? n : 1)), *y = malloc(sizeof(double) * (size_t)(n ? n : 1));
    weft_tensor_to_f64(a, x, n);
    weft_tensor_to_f64(b, y, n);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        // NaN agrees with NaN, and an infinity with the same infinity (two devices computing one value)
        if (!(fabs(x[i] - y[i]) <= tol * (1 + fabs(y[i])) || x[i] == y[i] || (isnan(x[i]) && isnan(y[i])))) {
            if (!bad) fprintf(stderr, "%s: element %lld: %.17g vs %.17g\n", what, (long long)i, x[i], y[i]);
            bad++;
        }
    if (bad) wt_fail++;
    else wt_pass++;
    free(x);
    free(y);
}

bool wt_error_has(const char *s) { return strstr(weft_last_error(), s) != NULL; }

void wt_onnx_name(const weft_graph *g, weft_value v, char *buf, size_t n) {
    weft_node_id nd = weft_graph_value_node(g, v);
    int i = 0;
    while (i < weft_graph_node_num_outputs(g, nd) && weft_graph_node_output(g, nd, i).id != v.id) i++;
    if (i) snprintf(buf, n, "%s:%d", weft_graph_node_name(g, nd), i);
    else snprintf(buf, n, "%s", weft_graph_node_name(g, nd));
}

const char *wt_models_dir(void) {
    static char dir[1024];
    const char *env = getenv("WEFT_MODELS_DIR");
#ifdef WEFT_SOURCE_DIR
    snprintf(dir, sizeof dir, "%s/", env ? env : WEFT_SOURCE_DIR "/models");
#else
    snprintf(dir, sizeof dir, "%s/", env ? env : "../models");
#endif
    return dir;
}

static void put_be32(FILE *f, uint32_t v) {
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8), (unsigned char)v};
    fwrite(b, 1, 4, f);
}

void wt_write_fmnist_split(const char *dir, const char *prefix, int n, uint32_t seed) {
    char p[1100];
    snprintf(p, sizeof p, "%.1000s/%s-images-idx3-ubyte", dir, prefix);
    FILE *fi = fopen(p, "wb");
    snprintf(p, sizeof p, "%.1000s/%s-labels-idx1-ubyte", dir, prefix);
    FILE *fl = fopen(p, "wb");
    if (!fi || !fl) {
        fprintf(stderr, "wt_write_fmnist_split: cannot write %s\n", p);
        if (fi) fclose(fi);
        if (fl) fclose(fl);
        return;
    }
    put_be32(fi, 0x803), put_be32(fi, (uint32_t)n), put_be32(fi, 28), put_be32(fi, 28);
    put_be32(fl, 0x801), put_be32(fl, (uint32_t)n);
    uint32_t s = seed;
    for (int i = 0; i < n; i++) {
        int k = i % 10;
        for (int r = 0; r < 28 * 28; r++) {
            s = s * 1664525u + 1013904223u;
            int v = (int)(s >> 26); // noise 0..63
            if (r / 28 >= 2 * k + 4 && r / 28 < 2 * k + 7) v += 150;
            fputc(v, fi);
        }
        fputc(k, fl);
    }
    fclose(fi);
    fclose(fl);
}

int wt_count_traced_ops(weft_module *m, weft_tensor *x, weft_dtype ac, const char *name) {
    weft_graph *g = weft_graph_new();
    int n = -1;
    if (g && weft_graph_trace_begin(g) == WEFT_OK) {
        weft_graph_trace_input(g, x, "x");
        weft_dtype prev = weft_autocast_get();
        weft_autocast_set(ac);
        weft_tensor *y = weft_module_forward(m, x);
        weft_autocast_set(prev);
        if (y) weft_graph_trace_output(g, y);
        weft_graph_trace_end(g);
        weft_tensor_free(y);
        n = 0;
        for (int i = 0; i < weft_graph_node_count(g); i++) {
            const char *op = weft_graph_node_op(g, (weft_node_id){i});
            n += op && !strcmp(op, name);
        }
    }
    weft_graph_free(g);
    return n;
}
