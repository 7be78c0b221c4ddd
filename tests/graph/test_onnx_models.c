// ONNX models as PyTorch exports them, loaded by weft: tests/data/gen_onnx_twins.py exported a small GPT
// (embeddings, a pre-LN block with causal self-attention and an Erf GELU, the exporter's Shape / Gather /
// Concat / Reshape arithmetic) and a CNN (Conv, BatchNormalization, ReLU, MaxPool, Flatten, Gemm) with a
// symbolic batch dim, and stored PyTorch's outputs (onnx_twins_ref.txt). weft loads each with the batch
// given, runs it and must agree with PyTorch; saved again by weft_onnx_save and reloaded, the model must
// give the same outputs. Without ONNX support: skipped (77).
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft_test.h"

#define MAXV 4096

typedef struct ref {
    char name[64];
    int ndim;
    int64_t sizes[8];
    double v[MAXV];
    int64_t n;
} ref;

// The line of onnx_twins_ref.txt named name.
static bool read_ref(const char *name, ref *r) {
    char path[1024];
    snprintf(path, sizeof path, "%s../tests/data/onnx_twins_ref.txt", wt_models_dir());
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool found = false;
    while (!found && fscanf(f, "%63s %d", r->name, &r->ndim) == 2) {
        r->n = 1;
        for (int d = 0; d < r->ndim; d++) {
            if (fscanf(f, "%lld", (long long *)&r->sizes[d]) != 1) goto out;
            r->n *= r->sizes[d];
        }
        if (r->n > MAXV) goto out;
        for (int64_t i = 0; i < r->n; i++)
            if (fscanf(f, "%lf", &r->v[i]) != 1) goto out;
        found = !strcmp(r->name, name);
    }
out:
    fclose(f);
    return found;
}

static char *model_path(const char *file, char *buf, size_t n) {
    snprintf(buf, n, "%s../tests/data/%s", wt_models_dir(), file);
    return buf;
}

// Runs g on one feed and compares its output with PyTorch's.
static void check_run(weft_graph *g, const char *in_name, weft_tensor *x, const char *out_name, const ref *want,
                      double tol) {
    weft_value xv = weft_graph_find_value(g, in_name), yv = weft_graph_find_value(g, out_name);
    CHECK(xv.id >= 0 && yv.id >= 0);
    weft_tensor *y = NULL;
    CHECK(weft_graph_run(g, 1, &xv, &x, 1, &yv, &y, 0, NULL) == WEFT_OK);
    if (!y) return;
    CHECK(weft_tensor_ndim(y) == want->ndim);
    for (int d = 0; d < want->ndim && d < weft_tensor_ndim(y); d++) CHECK(weft_tensor_sizes(y)[d] == want->sizes[d]);
    wt_check_values(out_name, y, want->v, want->n, tol);
    weft_tensor_free(y);
}

// Loads file with the batch dim of its input set to 3, checks it against PyTorch, saves and reloads it.
static void check_model(const char *file, const char *in_name, const char *out_name, const char *ref_in,
                        const char *ref_out, weft_dtype in_dtype) {
    static ref rin, rout;
    CHECK(read_ref(ref_in, &rin));
    CHECK(read_ref(ref_out, &rout));
    char path[1024];
    model_path(file, path, sizeof path);
    weft_onnx_shape shp = {.name = in_name, .ndim = rin.ndim, .sizes = rin.sizes};
    weft_graph *g = weft_onnx_load(path, 1, &shp);
    CHECK(g != NULL);
    if (!g) return;
    weft_tensor *x = weft_tensor_empty(rin.ndim, rin.sizes, in_dtype);
    for (int64_t i = 0; i < rin.n; i++) {
        if (in_dtype == WEFT_I64) ((int64_t *)weft_tensor_data(x))[i] = (int64_t)rin.v[i];
        else ((float *)weft_tensor_data(x))[i] = (float)rin.v[i];
    }
    check_run(g, in_name, x, out_name, &rout, 2e-5);

    // weft's own export of what it loaded, loaded again: the same outputs
    char saved[] = "/tmp/weft_onnx_twin_XXXXXX";
    int fd = mkstemp(saved);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    weft_value xv = weft_graph_find_value(g, in_name), yv = weft_graph_find_value(g, out_name);
    CHECK(weft_onnx_save(g, 1, &xv, 1, &yv, saved) == WEFT_OK);
    weft_graph *g2 = weft_onnx_load(saved, 0, NULL);
    CHECK(g2 != NULL);
    if (g2) check_run(g2, in_name, x, out_name, &rout, 2e-5);
    unlink(saved);
    weft_graph_free(g2);
    weft_tensor_free(x);
    weft_graph_free(g);
}

static void test_gpt(void) { check_model("onnx_gpt.onnx", "idx", "logits", "gpt/idx", "gpt/logits", WEFT_I64); }
static void test_cnn(void) { check_model("onnx_cnn.onnx", "x", "y", "cnn/x", "cnn/y", WEFT_F32); }

// The symbolic batch dim must be given: the error names the input and the dim's name.
static void test_symbolic_dim(void) {
    char path[1024];
    CHECK(weft_onnx_load(model_path("onnx_cnn.onnx", path, sizeof path), 0, NULL) == NULL);
    CHECK(wt_error_has("'x'") && wt_error_has("batch"));
    // a shape that does not fit the model is refused by the op it reaches, naming the ONNX node
    weft_onnx_shape shp = {.name = "x", .ndim = 4, .sizes = (int64_t[]){2, 3, 8, 8}}; // 3 channels, not 1
    CHECK(weft_onnx_load(path, 1, &shp) == NULL);
    CHECK(wt_error_has("Conv"));
}

// MatMul with a 1-D operand, promoted as numpy does and the added dim removed: (4)@(2,4,3) -> (2,3),
// (2,3,4)@(4) -> (2,3), (4)@(4) -> 0-d; against the sums computed here.
static void test_matmul_1d(void) {
    const char *files[3] = {"onnx_matmul_vm.onnx", "onnx_matmul_mv.onnx", "onnx_matmul_vv.onnx"};
    const int64_t sa[3][3] = {{4}, {2, 3, 4}, {4}}, sb[3][3] = {{2, 4, 3}, {4}, {4}};
    const int na[3] = {1, 3, 1}, nb[3] = {3, 1, 1}, ny[3] = {2, 2, 0};
    for (int c = 0; c < 3; c++) {
        char path[1024];
        weft_graph *g = weft_onnx_load(model_path(files[c], path, sizeof path), 0, NULL);
        CHECK(g != NULL);
        if (!g) continue;
        weft_generator *gen = weft_generator_create(5 + c);
        weft_tensor *in[2] = {weft_tensor_randn(na[c], sa[c], WEFT_F32, gen), weft_tensor_randn(nb[c], sb[c], WEFT_F32, gen)};
        weft_value iv[2] = {weft_graph_find_value(g, "a"), weft_graph_find_value(g, "b")}, yv = weft_graph_find_value(g, "y");
        weft_tensor *y = NULL;
        CHECK(weft_graph_run(g, 2, iv, in, 1, &yv, &y, 0, NULL) == WEFT_OK);
        const float *a = weft_tensor_data(in[0]), *b = weft_tensor_data(in[1]);
        double want[6];
        for (int r = 0; r < 6; r++) { // element r of the (2,3) result (or the dot product)
            double s = 0;
            for (int k = 0; k < 4; k++)
                s += c == 0 ? a[k] * b[(r / 3) * 12 + k * 3 + r % 3] : c == 1 ? a[r * 4 + k] * b[k] : a[k] * b[k];
            want[r] = s;
        }
        if (y) {
            CHECK(weft_tensor_ndim(y) == ny[c]);
            wt_check_values(files[c], y, want, c == 2 ? 1 : 6, 1e-5);
        }
        weft_tensor_free(y), weft_tensor_free(in[0]), weft_tensor_free(in[1]);
        weft_generator_free(gen);
        weft_graph_free(g);
    }
}

int main(void) {
    if (!weft_onnx_available()) {
        printf("built without ONNX support: skipped\n");
        return 77;
    }
    RUN(test_gpt);
    RUN(test_cnn);
    RUN(test_symbolic_dim);
    RUN(test_matmul_1d);
    return wt_summary();
}
