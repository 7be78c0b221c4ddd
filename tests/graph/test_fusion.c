// Vertical fusion: elementwise chains and matmul epilogues become FUSED nodes
// (node counts checked) that compute bit-identical values to the unfused
// graph and to eager ops; broadcasting, exported intermediates, f64, erf
// (the GELU PyTorch exports), non-contiguous inputs, the memory plan on and
// off, the cycle guard, DOT, saving, and a traced MLP training step with and
// without fusion.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weft/graph_passes.h>

#include "weft_test.h"

static weft_graph_passes fusion_only(void) {
    weft_graph_passes p = {0};
    p.fusion = true;
    return p;
}

static int count_kind(const weft_graph *g, weft_node_kind k) {
    int c = 0;
    for (int i = 0; i < weft_graph_node_count(g); i++) c += weft_graph_node_kind(g, (weft_node_id){i}) == k;
    return c;
}

// Bit-identical: same shape, dtype and bytes.
static void check_bits(const char *what, weft_tensor *a, weft_tensor *b) {
    CHECK(a && b);
    if (!a || !b) return;
    int nd = weft_tensor_ndim(a);
    bool meta = weft_tensor_dtype(a) == weft_tensor_dtype(b) && nd == weft_tensor_ndim(b) &&
                !memcmp(weft_tensor_sizes(a), weft_tensor_sizes(b), (size_t)nd * sizeof(int64_t));
    CHECK(meta);
    if (!meta) return;
    weft_tensor *ca = weft_tensor_contiguous(a), *cb = weft_tensor_contiguous(b);
    size_t n = (size_t)weft_tensor_numel(a) * weft_dtype_size(weft_tensor_dtype(a));
    bool same = memcmp(weft_tensor_data(ca), weft_tensor_data(cb), n) == 0;
    if (!same) printf("  %s: values differ\n", what);
    CHECK(same);
    weft_tensor_free(ca);
    weft_tensor_free(cb);
}

static weft_tensor *rand_dt(int nd, const int64_t *sz, double lo, double hi, uint64_t seed, weft_dtype dt) {
    weft_tensor *t = wt_rand64(nd, sz, lo, hi, seed, false), *c = weft_cast(t, dt);
    weft_tensor_free(t);
    return c;
}

// Run g (fetch keep) and o (fetch kout) on the same feeds (found by name in o); compare bitwise.
static void same_bits_run(const char *what, weft_graph *g, weft_graph *o, int n_feed, const weft_value *feed,
                          weft_tensor *const *ft, int n, const weft_value *keep, const weft_value *kout, int plan,
                          weft_tensor **keep_o) {
    weft_value nf[8];
    for (int i = 0; i < n_feed; i++)
        nf[i] = weft_graph_find_value(o, weft_graph_node_name(g, weft_graph_value_node(g, feed[i])));
    weft_tensor *a[8] = {0}, *b[8] = {0};
    weft_graph_run_options opt = {.memory_plan = plan};
    CHECK(weft_graph_run_ex(g, n_feed, feed, ft, n, keep, a, 0, NULL, &opt) == WEFT_OK);
    CHECK(weft_graph_run_ex(o, n_feed, nf, ft, n, kout, b, 0, NULL, &opt) == WEFT_OK);
    if (plan > 0) CHECK(weft_graph_last_run_stats(o).planned);
    for (int i = 0; i < n; i++) {
        check_bits(what, b[i], a[i]);
        if (keep_o) keep_o[i] = b[i];
        else weft_tensor_free(b[i]);
        weft_tensor_free(a[i]);
    }
}

// (x*2 + 1) -> tanh -> * y, sizes spanning several tiles and threads (last tile partial).
static void chain_case(weft_dtype dt, bool transposed) {
    int64_t M = 300, N = 129;
    weft_graph *g = weft_graph_new();
    weft_value x = transposed ? weft_graph_placeholder(g, "x", WEFT_DIMS(N, M), dt)
                              : weft_graph_placeholder(g, "x", WEFT_DIMS(M, N), dt);
    weft_value y = weft_graph_placeholder(g, "y", WEFT_DIMS(M, N), dt);
    weft_value xx = x;
    if (transposed) xx = weft_graph_op1(g, "permute", 1, &x, (int64_t[]){1, 0}, 2, NULL, 0); // a strided view
    weft_value a = weft_graph_op1(g, "mul_scalar", 1, &xx, NULL, 0, (double[]){2}, 1);
    weft_value b = weft_graph_op1(g, "add_scalar", 1, &a, NULL, 0, (double[]){1}, 1);
    weft_value c = weft_graph_op1(g, "tanh", 1, &b, NULL, 0, NULL, 0);
    weft_value d = weft_graph_op1(g, "mul", 2, (weft_value[]){c, y}, NULL, 0, NULL, 0);
    CHECK(d.id >= 0);
    weft_graph_passes p = fusion_only();
    weft_graph_pass_stats st;
    weft_value kout;
    weft_graph *o = weft_graph_optimize(g, 1, &d, &kout, &p, &st);
    CHECK(o != NULL);
    if (!o) return;
    CHECK(st.fused_groups == 1 && st.fused_nodes == 4);
    CHECK(count_kind(o, WEFT_NODE_FUSED) == 1);
    CHECK(weft_graph_node_count(o) == (transposed ? 4 : 3)); // x, y, (permute), fused
    CHECK(weft_graph_node_kind(o, weft_graph_value_node(o, kout)) == WEFT_NODE_FUSED);
    CHECK(!strcmp(weft_graph_node_op(o, weft_graph_value_node(o, kout)), "fused"));

    weft_tensor *xt = transposed ? rand_dt(WEFT_DIMS(N, M), -2, 2, 1, dt) : rand_dt(WEFT_DIMS(M, N), -2, 2, 1, dt);
    weft_tensor *yt = rand_dt(WEFT_DIMS(M, N), -1, 1, 2, dt);
    weft_tensor *res[1];
    same_bits_run("chain plan on", g, o, 2, (weft_value[]){x, y}, (weft_tensor *[]){xt, yt}, 1, &d, &kout, 1, res);
    same_bits_run("chain plan off", g, o, 2, (weft_value[]){x, y}, (weft_tensor *[]){xt, yt}, 1, &d, &kout, -1, NULL);
    // eager
    weft_tensor *xv = transposed ? weft_transpose(xt, 0, 1) : weft_tensor_ref(xt);
    weft_tensor *e1 = weft_mul_scalar(xv, 2), *e2 = weft_add_scalar(e1, 1), *e3 = weft_tanh(e2), *e4 = weft_mul(e3, yt);
    check_bits("chain vs eager", res[0], e4);
    weft_tensor *ts[] = {xv, e1, e2, e3, e4, xt, yt, res[0]};
    for (int i = 0; i < 8; i++) weft_tensor_free(ts[i]);
    weft_graph_free(o);
    weft_graph_free(g);
}

static void test_chain_f32(void) { chain_case(WEFT_F32, false); }
static void test_chain_f64(void) { chain_case(WEFT_F64, false); }
static void test_chain_noncontiguous(void) { chain_case(WEFT_F32, true); }

// bias (N) and a column (M,1) broadcast over (M,N); gelu; an intermediate also used outside.
static void test_broadcast_and_export(void) {
    int64_t M = 70, N = 600;
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(M, N), WEFT_F32);
    weft_value bias = weft_graph_placeholder(g, "bias", WEFT_DIMS(N), WEFT_F32);
    weft_value col = weft_graph_placeholder(g, "col", WEFT_DIMS(M, 1), WEFT_F32);
    weft_value h = weft_graph_op1(g, "add", 2, (weft_value[]){x, bias}, NULL, 0, NULL, 0);
    weft_value a = weft_graph_op1(g, "gelu", 1, &h, NULL, 0, NULL, 0);
    weft_value b = weft_graph_op1(g, "mul", 2, (weft_value[]){col, a}, NULL, 0, NULL, 0);
    weft_value s = weft_graph_op1(g, "sum", 1, &h, (int64_t[]){0}, 1, NULL, 0); // h used outside the group
    weft_value keep[2] = {b, s}, kout[2];
    weft_graph_passes p = fusion_only();
    weft_graph_pass_stats st;
    weft_graph *o = weft_graph_optimize(g, 2, keep, kout, &p, &st);
    CHECK(o && st.fused_groups == 1 && st.fused_nodes == 3);
    if (!o) return;
    weft_node_id fn = weft_graph_value_node(o, kout[0]);
    CHECK(weft_graph_node_kind(o, fn) == WEFT_NODE_FUSED);
    CHECK(weft_graph_node_num_outputs(o, fn) == 2); // h (for sum) and b
    weft_tensor *xt = wt_rand64(WEFT_DIMS(M, N), -3, 3, 3, false), *bt = wt_rand64(WEFT_DIMS(N), -1, 1, 4, false);
    weft_tensor *ct = wt_rand64(WEFT_DIMS(M, 1), -1, 1, 5, false);
    weft_tensor *xf = weft_cast(xt, WEFT_F32), *bf = weft_cast(bt, WEFT_F32), *cf = weft_cast(ct, WEFT_F32);
    weft_tensor *res[2];
    same_bits_run("broadcast", g, o, 3, (weft_value[]){x, bias, col}, (weft_tensor *[]){xf, bf, cf}, 2, keep, kout,
                  1, res);
    weft_tensor *e1 = weft_add(xf, bf), *e2 = weft_gelu(e1), *e3 = weft_mul(cf, e2);
    check_bits("broadcast vs eager", res[0], e3);
    weft_tensor *ts[] = {xt, bt, ct, xf, bf, cf, res[0], res[1], e1, e2, e3};
    for (int i = 0; i < 11; i++) weft_tensor_free(ts[i]);
    weft_graph_free(o);
    weft_graph_free(g);
}

// The exact GELU as PyTorch exports it to ONNX, x * 0.5 * (1 + erf(x / sqrt 2)) (mul_scalar, erf, add_scalar, mul,
// mul_scalar): one fused group, bit-identical to the unfused graph and to eager ops; against weft_gelu within
// f32's GELU polynomial (1e-6 relative) and 1e-15 in f64.
static void erf_gelu_case(weft_dtype dt) {
    int64_t M = 37, N = 300;
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(M, N), dt);
    weft_value a = weft_graph_op1(g, "mul_scalar", 1, &x, NULL, 0, (double[]){M_SQRT1_2}, 1);
    weft_value b = weft_graph_op1(g, "erf", 1, &a, NULL, 0, NULL, 0);
    weft_value c = weft_graph_op1(g, "add_scalar", 1, &b, NULL, 0, (double[]){1}, 1);
    weft_value d = weft_graph_op1(g, "mul", 2, (weft_value[]){c, x}, NULL, 0, NULL, 0);
    weft_value y = weft_graph_op1(g, "mul_scalar", 1, &d, NULL, 0, (double[]){0.5}, 1);
    CHECK(y.id >= 0);
    weft_graph_passes p = fusion_only();
    weft_graph_pass_stats st;
    weft_value kout;
    weft_graph *o = weft_graph_optimize(g, 1, &y, &kout, &p, &st);
    CHECK(o && st.fused_groups == 1 && st.fused_nodes == 5);
    if (!o) return;
    CHECK(count_kind(o, WEFT_NODE_FUSED) == 1 && weft_graph_node_count(o) == 2); // x, fused
    weft_tensor *xt = rand_dt(WEFT_DIMS(M, N), -5, 5, 9, dt), *res[1];
    same_bits_run("erf gelu", g, o, 1, &x, &xt, 1, &y, &kout, 1, res);
    weft_tensor *e1 = weft_mul_scalar(xt, M_SQRT1_2), *e2 = weft_erf(e1), *e3 = weft_add_scalar(e2, 1);
    weft_tensor *e4 = weft_mul(e3, xt), *e5 = weft_mul_scalar(e4, 0.5), *ge = weft_gelu(xt);
    check_bits("erf gelu vs eager", res[0], e5);
    wt_check_same("erf gelu vs gelu", res[0], ge, dt == WEFT_F32 ? 1e-6 : 1e-15);
    weft_tensor *ts[] = {xt, res[0], e1, e2, e3, e4, e5, ge};
    for (int i = 0; i < 8; i++) weft_tensor_free(ts[i]);
    weft_graph_free(o);
    weft_graph_free(g);
}
static void test_erf_gelu_f32(void) { erf_gelu_case(WEFT_F32); }
static void test_erf_gelu_f64(void) { erf_gelu_case(WEFT_F64); }

// b = a * rowsum(a): b's other input depends on a, so a and b must not fuse (a cycle).
static void test_no_cycle(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(8, 16), WEFT_F64);
    weft_value a = weft_graph_op1(g, "exp", 1, &x, NULL, 0, NULL, 0);
    weft_value s = weft_graph_op1(g, "sum", 1, &a, (int64_t[]){2, 1}, 2, NULL, 0); // (8,1)
    weft_value b = weft_graph_op1(g, "mul", 2, (weft_value[]){a, s}, NULL, 0, NULL, 0);
    weft_value c = weft_graph_op1(g, "neg", 1, &b, NULL, 0, NULL, 0);
    CHECK(c.id >= 0);
    weft_graph_passes p = fusion_only();
    weft_graph_pass_stats st;
    weft_value kout;
    weft_graph *o = weft_graph_optimize(g, 1, &c, &kout, &p, &st);
    CHECK(o && st.fused_groups == 1 && st.fused_nodes == 2); // mul+neg only
    if (!o) return;
    CHECK(count_kind(o, WEFT_NODE_FUSED) == 1);
    weft_tensor *xt = wt_rand64(WEFT_DIMS(8, 16), -1, 1, 6, false);
    same_bits_run("no cycle", g, o, 1, &x, &xt, 1, &c, &kout, 0, NULL);
    weft_tensor_free(xt);
    weft_graph_free(o);
    weft_graph_free(g);
}

// The graph's DOT text contains s.
static bool dot_has(const weft_graph *o, const char *s) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    bool ok = f && weft_graph_write_dot(o, f) == WEFT_OK;
    if (f) fclose(f);
    ok = ok && buf && strstr(buf, s) != NULL;
    free(buf);
    return ok;
}

// matmul + bias + gelu: one fused node, bit-identical to eager; the product exported too.
static void epilogue_case(bool fetch_product) {
    int64_t M = 96, K = 40, N = 130;
    weft_graph *g = weft_graph_new();
    weft_value a = weft_graph_placeholder(g, "a", WEFT_DIMS(M, K), WEFT_F32);
    weft_tensor *w0 = wt_rand64(WEFT_DIMS(K, N), -0.3, 0.3, 7, false), *b0 = wt_rand64(WEFT_DIMS(N), -1, 1, 8, false);
    weft_tensor *wf = weft_cast(w0, WEFT_F32), *bf = weft_cast(b0, WEFT_F32);
    weft_value w = weft_graph_variable(g, "w", wf), bias = weft_graph_variable(g, "b", bf);
    weft_value mm = weft_graph_op1(g, "matmul", 2, (weft_value[]){a, w}, NULL, 0, NULL, 0);
    weft_value h = weft_graph_op1(g, "add", 2, (weft_value[]){mm, bias}, NULL, 0, NULL, 0);
    weft_value y = weft_graph_op1(g, "gelu", 1, &h, NULL, 0, NULL, 0);
    weft_value keep[2] = {y, mm}, kout[2];
    int nk = fetch_product ? 2 : 1;
    weft_graph_passes p = weft_graph_passes_all();
    weft_graph_pass_stats st;
    weft_graph *o = weft_graph_optimize(g, nk, keep, kout, &p, &st);
    CHECK(o && st.fused_groups == 1 && st.fused_nodes == 3);
    if (!o) return;
    weft_node_id fn = weft_graph_value_node(o, kout[0]);
    CHECK(weft_graph_node_kind(o, fn) == WEFT_NODE_FUSED);
    CHECK(weft_graph_node_num_outputs(o, fn) == nk);
    CHECK(weft_graph_node_count(o) == 4); // a, w, b, fused
    weft_tensor *at = wt_rand64(WEFT_DIMS(M, K), -1, 1, 9, false), *af = weft_cast(at, WEFT_F32);
    weft_tensor *res[2];
    same_bits_run("epilogue plan on", g, o, 1, &a, &af, nk, keep, kout, 1, res);
    weft_tensor *e1 = weft_matmul(af, wf), *e2 = weft_add(e1, bf), *e3 = weft_gelu(e2);
    check_bits("epilogue vs eager", res[0], e3);
    if (fetch_product) check_bits("product vs eager", res[1], e1);
    for (int i = 0; i < nk; i++) weft_tensor_free(res[i]);
    same_bits_run("epilogue plan off", g, o, 1, &a, &af, nk, keep, kout, -1, NULL);

    CHECK(dot_has(o, "fused: matmul+add+gelu")); // DOT marks the group with its ops
    // fused graphs are saved with their programs (round trips: tests/graph/test_serialize_control.c)
    CHECK(weft_graph_save(o, "/tmp/weft_fusion_test.wgraph") == WEFT_OK);
    remove("/tmp/weft_fusion_test.wgraph");
    weft_tensor *ts[] = {w0, b0, wf, bf, at, af, e1, e2, e3};
    for (int i = 0; i < 9; i++) weft_tensor_free(ts[i]);
    weft_graph_free(o);
    weft_graph_free(g);
}

static void test_matmul_epilogue(void) { epilogue_case(false); }
static void test_matmul_epilogue_product_exported(void) { epilogue_case(true); }

// linear (x, w, b: the bias already in its own epilogue) heads a group too: linear + relu + add
// is one fused node, bit-identical to eager, and it survives a save / load round trip.
static void test_linear_epilogue(void) {
    int64_t M = 70, K = 24, N = 33;
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(M, K), WEFT_F32);
    weft_value r = weft_graph_placeholder(g, "r", WEFT_DIMS(M, N), WEFT_F32);
    weft_tensor *wf = rand_dt(WEFT_DIMS(N, K), -0.5, 0.5, 11, WEFT_F32), *bf = rand_dt(WEFT_DIMS(N), -1, 1, 12, WEFT_F32);
    weft_value w = weft_graph_variable(g, "w", wf), b = weft_graph_variable(g, "b", bf);
    weft_value l = weft_graph_op1(g, "linear", 3, (weft_value[]){x, w, b}, NULL, 0, NULL, 0);
    weft_value a = weft_graph_op1(g, "relu", 1, &l, NULL, 0, NULL, 0);
    weft_value y = weft_graph_op1(g, "add", 2, (weft_value[]){a, r}, NULL, 0, NULL, 0), ko;
    weft_graph_passes p = weft_graph_passes_all();
    weft_graph_pass_stats st;
    weft_graph *o = weft_graph_optimize(g, 1, &y, &ko, &p, &st);
    CHECK(o && st.fused_groups == 1 && st.fused_nodes == 3);
    if (!o) return;
    CHECK(weft_graph_node_kind(o, weft_graph_value_node(o, ko)) == WEFT_NODE_FUSED);
    weft_tensor *xt = rand_dt(WEFT_DIMS(M, K), -1, 1, 13, WEFT_F32), *rt = rand_dt(WEFT_DIMS(M, N), -1, 1, 14, WEFT_F32);
    weft_tensor *res;
    same_bits_run("linear epilogue", g, o, 2, (weft_value[]){x, r}, (weft_tensor *[]){xt, rt}, 1, &y, &ko, 1, &res);
    weft_tensor *e1 = weft_linear(xt, wf, bf), *e2 = weft_relu(e1), *e3 = weft_add(e2, rt);
    check_bits("linear epilogue vs eager", res, e3);
    CHECK(dot_has(o, "fused: linear+relu+add"));
    const char *path = "/tmp/weft_fusion_linear_test.wgraph";
    CHECK(weft_graph_save(o, path) == WEFT_OK);
    weft_graph *ld = weft_graph_load(path);
    remove(path);
    CHECK(ld != NULL);
    if (ld) {
        weft_value lf[2] = {weft_graph_find_value(ld, "x"), weft_graph_find_value(ld, "r")};
        weft_value lo = weft_graph_find_value(ld, weft_graph_node_name(o, weft_graph_value_node(o, ko)));
        weft_tensor *out = NULL;
        CHECK(weft_graph_run(ld, 2, lf, (weft_tensor *[]){xt, rt}, 1, &lo, &out, 0, NULL) == WEFT_OK);
        check_bits("loaded linear epilogue", out, e3);
        weft_tensor_free(out);
        weft_graph_free(ld);
    }
    weft_tensor *ts[] = {wf, bf, xt, rt, res, e1, e2, e3};
    for (int i = 0; i < 8; i++) weft_tensor_free(ts[i]);
    weft_graph_free(o);
    weft_graph_free(g);
}

// passes_all with fusion off leaves the graph unfused; fusion off by a zeroed struct too.
static void test_fusion_off(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(4, 5), WEFT_F32);
    weft_value a = weft_graph_op1(g, "exp", 1, &x, NULL, 0, NULL, 0);
    weft_value b = weft_graph_op1(g, "neg", 1, &a, NULL, 0, NULL, 0);
    weft_graph_passes p = weft_graph_passes_all();
    CHECK(p.fusion);
    p.fusion = false;
    weft_graph_pass_stats st;
    weft_value kout;
    weft_graph *o = weft_graph_optimize(g, 1, &b, &kout, &p, &st);
    CHECK(o && count_kind(o, WEFT_NODE_FUSED) == 0 && st.fused_groups == 0 && weft_graph_node_count(o) == 3);
    weft_graph_free(o);
    // optimising a fused graph again keeps its fused node working (the program is copied)
    weft_graph *f1 = weft_graph_optimize(g, 1, &b, &kout, NULL, NULL);
    weft_value k2;
    weft_graph *f2 = f1 ? weft_graph_optimize(f1, 1, &kout, &k2, NULL, NULL) : NULL;
    CHECK(f2 && count_kind(f2, WEFT_NODE_FUSED) == 1);
    if (f2) {
        weft_tensor *xt = weft_tensor_full(WEFT_DIMS(4, 5), WEFT_F32, 0.5), *r = NULL;
        weft_value nx = weft_graph_find_value(f2, "x");
        CHECK(weft_graph_run(f2, 1, &nx, &xt, 1, &k2, &r, 0, NULL) == WEFT_OK);
        float v = r ? ((float *)weft_tensor_data(r))[7] : 0;
        CHECK(v == -expf(0.5f));
        weft_tensor_free(xt);
        weft_tensor_free(r);
    }
    weft_graph_free(f1);
    weft_graph_free(f2);
    weft_graph_free(g);
}

// ---- traced MLP step (gelu), forward + backward: same loss and gradients with fusion ----
static void test_traced_mlp(void) {
    weft_tensor *w1 = wt_rand64(WEFT_DIMS(32, 64), -0.2, 0.2, 11, true), *b1 = wt_rand64(WEFT_DIMS(64), -0.1, 0.1, 12, true);
    weft_tensor *w2 = wt_rand64(WEFT_DIMS(64, 10), -0.2, 0.2, 13, true), *b2 = wt_rand64(WEFT_DIMS(10), -0.1, 0.1, 14, true);
    weft_tensor *params[4] = {w1, b1, w2, b2};
    weft_tensor *x = wt_rand64(WEFT_DIMS(16, 32), -1, 1, 15, false), *y = wt_rand64(WEFT_DIMS(16, 10), -1, 1, 16, false);
    weft_graph *g = weft_graph_new();
    CHECK(weft_graph_trace_begin(g) == WEFT_OK);
    weft_value vx = weft_graph_trace_input(g, x, "x"), vy = weft_graph_trace_input(g, y, "y");
    weft_tensor *a = weft_matmul(x, w1), *h = weft_add(a, b1), *z = weft_gelu(h), *c = weft_matmul(z, w2);
    weft_tensor *l = weft_add(c, b2), *d = weft_sub(l, y), *sq = weft_mul(d, d), *loss = weft_mean(sq, 0, NULL, false);
    CHECK(loss && weft_backward(loss, NULL, NULL) == WEFT_OK);
    weft_value fetch[5];
    fetch[0] = weft_graph_trace_output(g, loss);
    for (int i = 0; i < 4; i++) fetch[1 + i] = weft_graph_trace_output(g, weft_tensor_grad(params[i]));
    CHECK(weft_graph_trace_end(g) == WEFT_OK);
    weft_graph_passes on = weft_graph_passes_all(), off = on;
    off.fusion = false;
    weft_value fo_on[5], fo_off[5];
    weft_graph_pass_stats st;
    weft_graph *gon = weft_graph_optimize(g, 5, fetch, fo_on, &on, &st);
    weft_graph *goff = weft_graph_optimize(g, 5, fetch, fo_off, &off, NULL);
    CHECK(gon && goff);
    if (!gon || !goff) return;
    printf("traced MLP step: %d nodes -> %d, %d groups fusing %d ops\n", st.nodes_before, st.nodes_after,
           st.fused_groups, st.fused_nodes);
    CHECK(st.fused_groups >= 2 && count_kind(gon, WEFT_NODE_FUSED) == st.fused_groups);
    CHECK(weft_graph_node_count(gon) < weft_graph_node_count(goff));
    weft_tensor *x2 = wt_rand64(WEFT_DIMS(16, 32), -1, 1, 17, false), *y2 = wt_rand64(WEFT_DIMS(16, 10), -1, 1, 18, false);
    weft_value non[2] = {weft_graph_find_value(gon, "x"), weft_graph_find_value(gon, "y")};
    weft_value noff[2] = {weft_graph_find_value(goff, "x"), weft_graph_find_value(goff, "y")};
    weft_tensor *ra[5] = {0}, *rb[5] = {0}, *rc[5] = {0};
    CHECK(weft_graph_run(gon, 2, non, (weft_tensor *[]){x2, y2}, 5, fo_on, ra, 0, NULL) == WEFT_OK);
    CHECK(weft_graph_run(goff, 2, noff, (weft_tensor *[]){x2, y2}, 5, fo_off, rb, 0, NULL) == WEFT_OK);
    CHECK(weft_graph_run(g, 2, (weft_value[]){vx, vy}, (weft_tensor *[]){x2, y2}, 5, fetch, rc, 0, NULL) == WEFT_OK);
    for (int i = 0; i < 5; i++) {
        check_bits("mlp fused vs unfused", ra[i], rb[i]);
        check_bits("mlp fused vs traced graph", ra[i], rc[i]);
        weft_tensor_free(ra[i]);
        weft_tensor_free(rb[i]);
        weft_tensor_free(rc[i]);
    }
    weft_tensor *ts[] = {a, h, z, c, l, d, sq, loss, x, y, x2, y2, w1, b1, w2, b2};
    for (int i = 0; i < 16; i++) weft_tensor_free(ts[i]);
    weft_graph_free(gon);
    weft_graph_free(goff);
    weft_graph_free(g);
}

// Locality: c = exp(a) is made next to the chain a -> b but read only 30
// nodes later. Fusing it would compute c with the chain and keep it alive
// over the gap; it stays a plain op (the schedule runs it late).
static void test_late_consumer_not_fused(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(256), WEFT_F64);
    weft_value a = weft_graph_op1(g, "mul_scalar", 1, &x, NULL, 0, (double[]){2.0}, 1);
    weft_value b = weft_graph_op1(g, "add_scalar", 1, &a, NULL, 0, (double[]){1.0}, 1);
    weft_value c = weft_graph_op1(g, "exp", 1, &a, NULL, 0, NULL, 0);
    weft_value t = weft_graph_op1(g, "sum", 1, &b, (int64_t[]){1, 0}, 2, NULL, 0);
    for (int k = 0; k < 30; k++) t = weft_graph_op1(g, "sin", 1, &t, NULL, 0, NULL, 0);
    weft_value zin[2] = {c, t};
    weft_value z = weft_graph_op1(g, "mul", 2, zin, NULL, 0, NULL, 0);
    CHECK(z.id >= 0);
    weft_graph_passes ps = fusion_only();
    weft_graph_pass_stats st;
    weft_value zo;
    weft_graph *o = weft_graph_optimize(g, 1, &z, &zo, &ps, &st);
    CHECK(o != NULL);
    if (!o) {
        weft_graph_free(g);
        return;
    }
    // a + b fuse (b is read at once); exp stays out of their group and fuses
    // with its late reader instead (that group runs late, after t).
    char *dot = NULL;
    size_t dot_len = 0;
    FILE *f = open_memstream(&dot, &dot_len);
    CHECK(f && weft_graph_write_dot(o, f) == WEFT_OK);
    if (f) fclose(f);
    printf("late consumer: %d groups fusing %d ops\n", st.fused_groups, st.fused_nodes);
    CHECK(dot && strstr(dot, "mul_scalar+add_scalar") && strstr(dot, "exp+mul"));
    CHECK(dot && !strstr(dot, "add_scalar+exp") && !strstr(dot, "mul_scalar+exp"));
    free(dot);
    weft_tensor *xt = rand_dt(WEFT_DIMS(256), -1, 1, 77, WEFT_F64);
    same_bits_run("late consumer", g, o, 1, &x, &xt, 1, &z, &zo, 1, NULL);
    weft_tensor_free(xt);
    weft_graph_free(o);
    weft_graph_free(g);
}

int main(void) {
    RUN(test_chain_f32);
    RUN(test_chain_f64);
    RUN(test_chain_noncontiguous);
    RUN(test_broadcast_and_export);
    RUN(test_erf_gelu_f32);
    RUN(test_erf_gelu_f64);
    RUN(test_no_cycle);
    RUN(test_matmul_epilogue);
    RUN(test_matmul_epilogue_product_exported);
    RUN(test_linear_epilogue);
    RUN(test_fusion_off);
    RUN(test_late_consumer_not_fused);
    RUN(test_traced_mlp);
    return wt_summary();
}
