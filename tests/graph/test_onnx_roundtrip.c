// weft_onnx_save, op by op: a small graph per exported op (or attribute form) is run, saved as ONNX, loaded
// back with weft_onnx_load and run on the same feeds; the outputs must agree (f64 to 1e-12, except the
// composed forms noted). The loader's reading of each ONNX op is itself checked against ONNX's operator tests
// (test_onnx_import.c), and ONNX Runtime ran weft's exports of the model files with weft's results (docs/graph.md),
// so a round trip that holds is the exporter writing what each op computes. Then what cannot be exported
// must be refused, naming the node. Without ONNX support: skipped (77).
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft_test.h"

static char g_path[64];
static weft_generator *g_rng;

typedef struct built {
    weft_graph *g;
    weft_value in[4], out;
    weft_tensor *feed[4];
    int n_in;
} built;

// A placeholder x_k of sizes (and its feed: N(0,1), or integers in [0, hi) when hi > 0).
static weft_value ph(built *b, int nd, const int64_t *s, weft_dtype dt, int hi) {
    char name[16];
    snprintf(name, sizeof name, "x%d", b->n_in);
    weft_value v = weft_graph_placeholder(b->g, name, nd, s, dt);
    weft_tensor *t = hi > 0 ? weft_tensor_randint(nd, s, 0, hi, dt, g_rng) : weft_tensor_randn(nd, s, dt, g_rng);
    if (dt == WEFT_BOOL) { // a mask
        weft_tensor_free(t);
        weft_tensor *r = weft_tensor_randint(nd, s, 0, 2, WEFT_I64, g_rng);
        t = weft_cast(r, WEFT_BOOL);
        weft_tensor_free(r);
    }
    b->in[b->n_in] = v, b->feed[b->n_in++] = t;
    return v;
}
static weft_value var(built *b, const char *name, int nd, const int64_t *s) {
    weft_tensor *t = weft_tensor_randn(nd, s, WEFT_F64, g_rng);
    weft_value v = weft_graph_variable(b->g, name, t);
    weft_tensor_free(t);
    return v;
}
// Runs b, saves, loads, runs again: the outputs agree within tol.
static void round_trip(const char *what, built *b, double tol) {
    weft_tensor *want = NULL, *got = NULL;
    CHECK(b->out.id >= 0);
    if (b->out.id < 0) {
        fprintf(stderr, "%s: building failed: %s\n", what, weft_last_error());
        return;
    }
    CHECK(weft_graph_run(b->g, b->n_in, b->in, b->feed, 1, &b->out, &want, 0, NULL) == WEFT_OK);
    weft_status st = weft_onnx_save(b->g, b->n_in, b->in, 1, &b->out, g_path);
    CHECK(st == WEFT_OK);
    if (st) fprintf(stderr, "%s: %s\n", what, weft_last_error());
    weft_graph *g2 = st ? NULL : weft_onnx_load(g_path, 0, NULL);
    CHECK(st || g2);
    if (g2) {
        char oname[128];
        wt_onnx_name(b->g, b->out, oname, sizeof oname);
        weft_value in2[4], out2 = weft_graph_find_value(g2, oname);
        for (int k = 0; k < b->n_in; k++) {
            char name[16];
            snprintf(name, sizeof name, "x%d", k);
            in2[k] = weft_graph_find_value(g2, name);
        }
        CHECK(out2.id >= 0);
        CHECK(weft_graph_run(g2, b->n_in, in2, b->feed, 1, &out2, &got, 0, NULL) == WEFT_OK);
        if (got && want) wt_check_same(what, got, want, tol);
        else fprintf(stderr, "%s: %s\n", what, weft_last_error());
    }
    weft_tensor_free(want), weft_tensor_free(got);
    weft_graph_free(g2);
    for (int k = 0; k < b->n_in; k++) weft_tensor_free(b->feed[k]);
    weft_graph_free(b->g);
}

#define B0 built b = {.g = weft_graph_new()}
static const int64_t S34[2] = {3, 4}, S4[1] = {4}, S234[3] = {2, 3, 4};

static void test_elementwise(void) {
    const char *unary[] = {"neg", "abs", "exp", "tanh", "sigmoid", "relu", "sign", "erf", "sin", "cos", "copy",
                           "gelu", "gelu_tanh", "silu"};
    for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++) {
        B0;
        weft_value x = ph(&b, 3, S234, WEFT_F64, 0);
        b.out = weft_graph_op1(b.g, unary[i], 1, &x, NULL, 0, NULL, 0);
        // gelu's ONNX form is composed (erf and four products), so its rounding differs from the fused op
        round_trip(unary[i], &b, !strncmp(unary[i], "gelu", 4) || !strcmp(unary[i], "silu") ? 1e-12 : 0);
    }
    { // log, sqrt, rsqrt on positive values
        const char *pos[] = {"log", "sqrt", "rsqrt"};
        for (int i = 0; i < 3; i++) {
            B0;
            weft_value x = ph(&b, 2, S34, WEFT_F64, 0), a = weft_graph_op1(b.g, "abs", 1, &x, NULL, 0, NULL, 0);
            b.out = weft_graph_op1(b.g, pos[i], 1, &a, NULL, 0, NULL, 0);
            round_trip(pos[i], &b, 1e-15);
        }
    }
    const char *binary[] = {"add", "sub", "mul", "div", "maximum", "minimum"};
    for (int i = 0; i < 6; i++) { // broadcasting (3,4) with (4)
        B0;
        weft_value in[2] = {ph(&b, 2, S34, WEFT_F64, 0), ph(&b, 1, S4, WEFT_F64, 0)};
        b.out = weft_graph_op1(b.g, binary[i], 2, in, NULL, 0, NULL, 0);
        round_trip(binary[i], &b, 0);
    }
    const char *cmp[] = {"eq", "lt", "le", "gt", "ge", "ne"};
    for (int i = 0; i < 6; i++) { // integers, so eq and the rest are not all false (ne: Not(Equal))
        B0;
        weft_value in[2] = {ph(&b, 2, S34, WEFT_I64, 3), ph(&b, 2, S34, WEFT_I64, 3)};
        b.out = weft_graph_op1(b.g, cmp[i], 2, in, NULL, 0, NULL, 0);
        round_trip(cmp[i], &b, 0);
    }
    { // ne on bools: Xor
        B0;
        weft_value in[2] = {ph(&b, 2, S34, WEFT_BOOL, 0), ph(&b, 1, S4, WEFT_BOOL, 0)};
        b.out = weft_graph_op1(b.g, "ne", 2, in, NULL, 0, NULL, 0);
        round_trip("ne bool", &b, 0);
    }
    { // where, cast, scalar ops
        B0;
        weft_value c = ph(&b, 2, S34, WEFT_BOOL, 0), x = ph(&b, 2, S34, WEFT_F64, 0), y = ph(&b, 1, S4, WEFT_F64, 0);
        weft_value w = weft_graph_op1(b.g, "where", 3, (weft_value[]){c, x, y}, NULL, 0, NULL, 0);
        double two = 2.5, half = 0.5, sq = 2;
        weft_value a = weft_graph_op1(b.g, "add_scalar", 1, &w, NULL, 0, &two, 1);
        weft_value m = weft_graph_op1(b.g, "mul_scalar", 1, &a, NULL, 0, &half, 1);
        weft_value p = weft_graph_op1(b.g, "pow_scalar", 1, &m, NULL, 0, &sq, 1);
        int64_t f32 = WEFT_F32;
        b.out = weft_graph_op1(b.g, "cast", 1, &p, &f32, 1, NULL, 0);
        round_trip("where+scalars+cast", &b, 0);
    }
}

static void test_linalg(void) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) { // (2,3,4)@(2,4,5), either transposed in storage
            B0;
            int64_t sa[3] = {2, ta ? 4 : 3, ta ? 3 : 4}, sb[3] = {2, tb ? 5 : 4, tb ? 4 : 5}, t[2] = {ta, tb};
            weft_value in[2] = {ph(&b, 3, sa, WEFT_F64, 0), ph(&b, 3, sb, WEFT_F64, 0)};
            b.out = weft_graph_op1(b.g, "matmul", 2, in, t, 2, NULL, 0);
            round_trip("matmul", &b, 1e-14);
        }
    for (int nd = 2; nd <= 3; nd++) { // Gemm (2-D) or MatMul + Add; linear_gelu both forms
        for (int kind = 0; kind < 3; kind++) {
            B0;
            int64_t sx[3] = {2, 3, 4}, sw[2] = {5, 4}, sb[1] = {5};
            weft_value x = ph(&b, nd, nd == 2 ? sx + 1 : sx, WEFT_F64, 0), w = var(&b, "w", 2, sw), bb = var(&b, "b", 1, sb);
            int64_t approx = kind == 2;
            weft_value outs[4];
            weft_graph_op_named(b.g, "y", kind ? "linear_gelu" : "linear", 3, (weft_value[]){x, w, bb}, &approx,
                                kind ? 1 : 0, NULL, 0, outs);
            b.out = outs[0];
            round_trip(kind ? "linear_gelu" : "linear", &b, 1e-12);
        }
    }
}

static void test_shapes(void) {
    { // permute, view of it (a copy on reading back), slice with a step, expand, concat
        B0;
        weft_value x = ph(&b, 3, S234, WEFT_F64, 0);
        int64_t perm[3] = {2, 0, 1}, vw[3] = {2, 4, 6}, sl[4] = {1, 1, 6, 2}, ex[4] = {3, 2, 4, 3};
        weft_value p = weft_graph_op1(b.g, "permute", 1, &x, perm, 3, NULL, 0);
        weft_value c = weft_graph_op1(b.g, "copy", 1, &p, NULL, 0, NULL, 0);
        weft_value v = weft_graph_op1(b.g, "view", 1, &c, vw, 3, NULL, 0);   // (4,6)
        weft_value s = weft_graph_op1(b.g, "slice", 1, &v, sl, 4, NULL, 0);  // (4,3): columns 1, 3, 5
        weft_value e = weft_graph_op1(b.g, "expand", 1, &s, ex, 4, NULL, 0); // (2,4,3)
        int64_t d = 0;
        b.out = weft_graph_op1(b.g, "concat", 2, (weft_value[]){e, e}, &d, 1, NULL, 0);
        round_trip("permute/view/slice/expand/concat", &b, 0);
    }
    { // embedding, index_select along dim 1, gather
        B0;
        int64_t sw[2] = {10, 4}, si[2] = {2, 3}, s1[1] = {3};
        weft_value w = var(&b, "table", 2, sw), idx = ph(&b, 2, si, WEFT_I64, 10);
        weft_value e = weft_graph_op1(b.g, "embedding", 2, (weft_value[]){w, idx}, NULL, 0, NULL, 0); // (2,3,4)
        weft_value j = ph(&b, 1, s1, WEFT_I64, 4);
        int64_t d = 2;
        weft_value s = weft_graph_op1(b.g, "index_select", 2, (weft_value[]){e, j}, &d, 1, NULL, 0);
        weft_value gi = ph(&b, 3, (int64_t[]){2, 3, 2}, WEFT_I64, 3);
        b.out = weft_graph_op1(b.g, "gather", 2, (weft_value[]){s, gi}, &d, 1, NULL, 0);
        round_trip("embedding/index_select/gather", &b, 0);
    }
}

static void test_reductions(void) {
    const char *red[] = {"sum", "mean", "max", "min", "logsumexp", "argmax"};
    for (int i = 0; i < 6; i++)
        for (int keep = 0; keep < 2; keep++) {
            B0;
            weft_value x = ph(&b, 3, S234, WEFT_F64, 0);
            int64_t at[3] = {i == 5 ? 2 : 5, keep, 0}; // dims 0 and 2 (argmax: dim 1)
            b.out = weft_graph_op1(b.g, red[i], 1, &x, at, 3, NULL, 0);
            round_trip(red[i], &b, 1e-14);
        }
    for (int lg = 0; lg < 2; lg++) {
        B0;
        weft_value x = ph(&b, 3, S234, WEFT_F64, 0);
        int64_t d = 1;
        b.out = weft_graph_op1(b.g, lg ? "log_softmax" : "softmax", 1, &x, &d, 1, NULL, 0);
        round_trip(lg ? "log_softmax" : "softmax", &b, 1e-14);
    }
}

static void test_nn(void) {
    { // cross_entropy (mean over the batch): SoftmaxCrossEntropyLoss, read back as log_softmax, gather and mean
        B0;
        weft_value x = ph(&b, 2, (int64_t[]){5, 7}, WEFT_F64, 0), t = ph(&b, 1, (int64_t[]){5}, WEFT_I64, 7);
        b.out = weft_graph_op1(b.g, "cross_entropy", 2, (weft_value[]){x, t}, NULL, 0, NULL, 0);
        round_trip("cross_entropy", &b, 1e-14);
    }
    for (int form = 0; form < 3; form++) { // layer_norm with weight and bias, with neither; add_layer_norm
        B0;
        weft_value x = ph(&b, 3, S234, WEFT_F64, 0), w = var(&b, "w", 1, S4), bb = var(&b, "b", 1, S4);
        double eps = 1e-5;
        weft_value outs[4];
        if (form == 2) {
            weft_value r = ph(&b, 3, S234, WEFT_F64, 0);
            int64_t at[4] = {1, 1, 1, 0};
            weft_graph_op_named(b.g, "y", "add_layer_norm", 4, (weft_value[]){x, r, w, bb}, at, 4, &eps, 1, outs);
            b.out = outs[1];
        } else {
            int64_t at[4] = {1, form == 0, form == 0, 0};
            weft_graph_op_named(b.g, "y", "layer_norm", form == 0 ? 3 : 1, (weft_value[]){x, w, bb}, at, 4, &eps, 1, outs);
            b.out = outs[0];
        }
        round_trip("layer_norm", &b, 1e-10); // ONNX's epsilon is a float attribute: 1e-5 comes back as f32's
    }
    { // conv2d (stride 2, pad 1, groups 2) + bias, batch_norm (eval), max and average pools
        B0;
        int64_t sx[4] = {2, 4, 8, 8}, sw[4] = {6, 2, 3, 3}, sb[1] = {6};
        weft_value x = ph(&b, 4, sx, WEFT_F64, 0), w = var(&b, "w", 4, sw), bb = var(&b, "b", 1, sb);
        int64_t ca[8] = {2, 2, 1, 1, 1, 1, 2, 0};
        weft_value c = weft_graph_op1(b.g, "conv2d", 3, (weft_value[]){x, w, bb}, ca, 8, NULL, 0); // (2,6,4,4)
        weft_tensor *rv = weft_tensor_full(1, sb, WEFT_F64, 1.7);
        weft_value g = var(&b, "g", 1, sb), be = var(&b, "be", 1, sb), rm = var(&b, "rm", 1, sb),
                   rvv = weft_graph_variable(b.g, "rv", rv);
        weft_tensor_free(rv);
        int64_t ba[5] = {1, 1, 1, 1, 0};
        double bf[2] = {0.1, 1e-5};
        weft_value outs[4];
        weft_graph_op_named(b.g, "bn", "batch_norm", 5, (weft_value[]){c, g, be, rm, rvv}, ba, 5, bf, 2, outs);
        int64_t pa[7] = {3, 3, 1, 1, 1, 1, 0};
        weft_value mp[4];
        weft_graph_op_named(b.g, "mp", "max_pool2d", 1, outs, pa, 7, NULL, 0, mp); // (2,6,4,4)
        int64_t aa[7] = {2, 2, 2, 2, 1, 1, 1};
        b.out = weft_graph_op1(b.g, "avg_pool2d", 1, mp, aa, 7, NULL, 0);
        round_trip("conv/batch_norm/pools", &b, 1e-13);
    }
    for (int form = 0; form < 2; form++) { // conv_transpose2d: ConvTranspose (with output_padding), then the bias
        B0;
        int64_t sx[4] = {2, 4, 3, 4}, sw[4] = {4, 3, 3, 2}, sb[1] = {6};
        weft_value x = ph(&b, 4, sx, WEFT_F64, 0), w = var(&b, "w", 4, sw);
        // stride (2,3), pad (1,0), dilation (1,2), groups 2: H = 2*2 - 2 + 2 + 1 (+1), W = 3*3 + 2 + 1 (+2)
        int64_t ca[10] = {2, 3, 1, 0, 1, 2, 2, 0, form ? 6 : 5, form ? 14 : 12};
        weft_value y = weft_graph_op1(b.g, "conv2d_backward_input", 2, (weft_value[]){x, w}, ca, 10, NULL, 0);
        if (form) {
            weft_value bb = var(&b, "b", 1, sb), b4 = weft_graph_op1(b.g, "view", 1, &bb, (int64_t[]){4, 1, 6, 1, 1}, 5,
                                                                      NULL, 0);
            y = weft_graph_op1(b.g, "add", 2, (weft_value[]){y, b4}, NULL, 0, NULL, 0);
        }
        b.out = y;
        round_trip(form ? "conv_transpose2d (output_padding, bias)" : "conv_transpose2d", &b, 1e-13);
    }
    for (int layout = 0; layout < 3; layout++) { // causal attention (B,H,T,D), heads-last output, packed qkv
        B0;
        int64_t s4[4] = {2, 2, 5, 3}, s3[3] = {2, 5, 12};
        double scale = 0.4;
        if (layout < 2) {
            weft_value q = ph(&b, 4, s4, WEFT_F64, 0), k = ph(&b, 4, s4, WEFT_F64, 0), v = ph(&b, 4, s4, WEFT_F64, 0);
            int64_t hl = layout;
            weft_value outs[4];
            weft_graph_op_named(b.g, "o", "causal_attention", 3, (weft_value[]){q, k, v}, &hl, 1, &scale, 1, outs);
            b.out = outs[0];
        } else {
            weft_value x = ph(&b, 3, s3, WEFT_F64, 0), outs[4];
            int64_t h = 2;
            weft_graph_op_named(b.g, "o", "causal_attention_qkv", 1, &x, &h, 1, &scale, 1, outs);
            b.out = outs[0];
        }
        round_trip("causal_attention", &b, 1e-13);
    }
}

// What has no ONNX form is refused, naming the node and the op; bad arguments too; nothing is written.
// Rounding, remainders and topk (run last: the inputs of the tests above come from one random stream).
static void test_rounding_mod(void) {
    for (int largest = 0; largest < 2; largest++) { // topk's indices along dim 1, and the values gathered
        B0;
        weft_value x = ph(&b, 3, S234, WEFT_F64, 0);
        int64_t at[3] = {1, 2, largest}, d = 1;
        weft_value ix = weft_graph_op1(b.g, "topk", 1, &x, at, 3, NULL, 0);
        weft_value v = weft_graph_op1(b.g, "gather", 2, (weft_value[]){x, ix}, &d, 1, NULL, 0);
        b.out = weft_graph_op1(b.g, "add", 2, (weft_value[]){v, weft_graph_op1(b.g, "cast", 1, &ix, (int64_t[]){WEFT_F64}, 1, NULL, 0)}, NULL, 0, NULL, 0);
        round_trip(largest ? "topk largest" : "topk smallest", &b, 0);
    }
    const char *unary[] = {"floor", "ceil", "round", "atan"};
    for (int i = 0; i < 4; i++) {
        B0;
        weft_value x = ph(&b, 3, S234, WEFT_F64, 0), s = weft_graph_op1(b.g, "mul_scalar", 1, &x, NULL, 0, (double[]){4}, 1);
        b.out = weft_graph_op1(b.g, unary[i], 1, &s, NULL, 0, NULL, 0);
        round_trip(unary[i], &b, 0);
    }
    { // fmod on floats (Mod fmod = 1), fmod and remainder on integers (Mod fmod = 1, 0), broadcast
        const char *mods[3] = {"fmod", "fmod", "remainder"};
        for (int i = 0; i < 3; i++) {
            B0;
            weft_dtype dt = i ? WEFT_I64 : WEFT_F64;
            weft_value in[2] = {ph(&b, 2, S34, dt, i ? 9 : 0), ph(&b, 1, S4, dt, i ? 4 : 0)};
            b.out = weft_graph_op1(b.g, mods[i], 2, in, NULL, 0, NULL, 0);
            round_trip(mods[i], &b, 0);
        }
    }
}

static void test_refusals(void) {
    built b = {.g = weft_graph_new()};
    weft_value x = ph(&b, 2, S34, WEFT_F64, 0), y = ph(&b, 2, S34, WEFT_F64, 0);
    weft_value d = weft_graph_op1(b.g, "relu_backward", 2, (weft_value[]){x, y}, NULL, 0, NULL, 0);
    unlink(g_path);
    CHECK(weft_onnx_save(b.g, 2, b.in, 1, &d, g_path) == WEFT_ERR_UNSUPPORTED);
    CHECK(wt_error_has("(op relu_backward)") && wt_error_has("no ONNX form"));
    CHECK(access(g_path, F_OK) != 0);
    weft_value r = weft_graph_op1(b.g, "remainder", 2, (weft_value[]){x, y}, NULL, 0, NULL, 0);
    CHECK(weft_onnx_save(b.g, 2, b.in, 1, &r, g_path) == WEFT_ERR_UNSUPPORTED); // ONNX's Mod fmod = 0: integers
    CHECK(wt_error_has("remainder of floats"));
    CHECK(access(g_path, F_OK) != 0);
    weft_value s = weft_graph_op1(b.g, "add", 2, (weft_value[]){x, y}, NULL, 0, NULL, 0);
    CHECK(weft_onnx_save(b.g, 1, b.in, 1, &s, g_path) == WEFT_ERR_ARG); // x1 is needed but not an input
    CHECK(wt_error_has("'x1'"));
    CHECK(weft_onnx_save(b.g, 1, &s, 1, &s, g_path) == WEFT_ERR_ARG); // an input that is no placeholder
    CHECK(weft_onnx_save(b.g, 2, b.in, 1, &s, "/nonexistent/dir/m.onnx") == WEFT_ERR_IO);
    CHECK(weft_onnx_save(b.g, 2, b.in, 0, &s, g_path) == WEFT_ERR_ARG);
    for (int k = 0; k < b.n_in; k++) weft_tensor_free(b.feed[k]);
    weft_graph_free(b.g);
}

int main(void) {
    if (!weft_onnx_available()) {
        printf("built without ONNX support: skipped\n");
        return 77;
    }
    snprintf(g_path, sizeof g_path, "/tmp/weft_onnx_rt_%d.onnx", (int)getpid());
    g_rng = weft_generator_create(7);
    RUN(test_elementwise);
    RUN(test_linalg);
    RUN(test_shapes);
    RUN(test_reductions);
    RUN(test_nn);
    RUN(test_refusals);
    RUN(test_rounding_mod);
    unlink(g_path);
    weft_generator_free(g_rng);
    return wt_summary();
}
