// ONNX ops the importer composes from weft's ops (src/graph/onnx_import_math.c, onnx_import_shape.c), in the
// forms ONNX's own operator tests (test_onnx_import.c) leave out: Einsum with an implicit output, three operands,
// a broadcast ellipsis and a trace; CumSum on integers, exclusive and reversed, over a length that is not a power
// of two; GatherND with a batch dim and negative indices; the gradients of a linear Resize and of GridSample; an If
// whose branches read outer values, and a Loop whose body does; an 8-D Tile, the hyperbolic functions and their
// slopes where plain formulas overflow or cancel, Dropout's mask by opset, and malformed nodes refused. One-node models
// are written here with protobuf-c; every expected value is computed by plain loops in this file.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft_test.h"

#ifdef WEFT_HAVE_ONNX
#include "graph/onnx.h"

typedef struct in_spec {
    const char *name;
    int ndim;
    int64_t sizes[8];
    int type; // ONNX TensorProto.DataType: 1 float, 6 int32, 7 int64
} in_spec;

// gp as a model of the given opset (IR 8) in a temporary file named after tag; its path in path.
static bool write_graph(Onnx__GraphProto *gp, int opset, const char *tag, char *path, size_t np) {
    Onnx__ModelProto mp = ONNX__MODEL_PROTO__INIT;
    Onnx__OperatorSetIdProto os = ONNX__OPERATOR_SET_ID_PROTO__INIT, *osp = &os;
    mp.has_ir_version = 1, mp.ir_version = 8, mp.n_opset_import = 1, mp.opset_import = &osp, mp.graph = gp;
    os.has_version = 1, os.version = opset, os.domain = "";
    size_t n = onnx__model_proto__get_packed_size(&mp);
    uint8_t *buf = malloc(n);
    if (!buf) return false;
    onnx__model_proto__pack(&mp, buf);
    snprintf(path, np, "/tmp/weft_onnx_compose_%d_%s.onnx", (int)getpid(), tag);
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(buf, 1, n, f) == n;
    if (f) ok &= fclose(f) == 0;
    free(buf);
    return ok;
}

// One node of op_type reading inputs in[0..n_in) (graph inputs) and writing "y"; attributes: one string
// (sname = sval) and up to two ints. Written to a temporary file; its path in path.
static bool write_model(const char *op, int opset, int n_in, const in_spec *in, const char *sname, const char *sval,
                        const char *i0, int64_t v0, const char *i1, int64_t v1, char *path, size_t np) {
    Onnx__GraphProto gp = ONNX__GRAPH_PROTO__INIT;
    Onnx__NodeProto nd = ONNX__NODE_PROTO__INIT, *ndp = &nd;
    Onnx__AttributeProto at[3] = {ONNX__ATTRIBUTE_PROTO__INIT, ONNX__ATTRIBUTE_PROTO__INIT, ONNX__ATTRIBUTE_PROTO__INIT};
    Onnx__AttributeProto *atp[3];
    Onnx__ValueInfoProto vi[5], vo = ONNX__VALUE_INFO_PROTO__INIT, *vip[5], *vop = &vo; // (at most 5 inputs)
    Onnx__TypeProto tp[5];
    Onnx__TypeProto__Tensor tt[5];
    Onnx__TensorShapeProto sp[5];
    Onnx__TensorShapeProto__Dimension dm[5][8], *dmp[5][8];
    char *names[5], *out = "y";
    gp.name = "g", gp.n_node = 1, gp.node = &ndp, gp.n_input = (size_t)n_in, gp.input = vip, gp.n_output = 1, gp.output = &vop;
    for (int k = 0; k < n_in; k++) {
        Onnx__ValueInfoProto v = ONNX__VALUE_INFO_PROTO__INIT;
        Onnx__TypeProto t = ONNX__TYPE_PROTO__INIT;
        Onnx__TypeProto__Tensor te = ONNX__TYPE_PROTO__TENSOR__INIT;
        Onnx__TensorShapeProto s = ONNX__TENSOR_SHAPE_PROTO__INIT;
        vi[k] = v, tp[k] = t, tt[k] = te, sp[k] = s;
        for (int d = 0; d < in[k].ndim; d++) {
            Onnx__TensorShapeProto__Dimension z = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
            dm[k][d] = z;
            dm[k][d].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE, dm[k][d].dim_value = in[k].sizes[d];
            dmp[k][d] = &dm[k][d];
        }
        sp[k].n_dim = (size_t)in[k].ndim, sp[k].dim = dmp[k];
        tt[k].has_elem_type = 1, tt[k].elem_type = in[k].type, tt[k].shape = &sp[k];
        tp[k].value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE, tp[k].tensor_type = &tt[k];
        vi[k].name = (char *)in[k].name, vi[k].type = &tp[k];
        vip[k] = &vi[k], names[k] = (char *)in[k].name;
    }
    vo.name = out;
    nd.op_type = (char *)op, nd.n_input = (size_t)n_in, nd.input = names, nd.n_output = 1, nd.output = &out;
    int na = 0;
    if (sname) {
        at[na].name = (char *)sname, at[na].has_type = 1, at[na].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
        at[na].has_s = 1, at[na].s.data = (uint8_t *)sval, at[na].s.len = strlen(sval), atp[na] = &at[na], na++;
    }
    const char *in_[2] = {i0, i1};
    int64_t iv[2] = {v0, v1};
    for (int k = 0; k < 2; k++)
        if (in_[k]) {
            at[na].name = (char *)in_[k], at[na].has_type = 1, at[na].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
            at[na].has_i = 1, at[na].i = iv[k], atp[na] = &at[na], na++;
        }
    nd.n_attribute = (size_t)na, nd.attribute = atp;
    return write_graph(&gp, opset, op, path, np);
}

static weft_tensor *seq(int nd, const int64_t *s, weft_dtype dt, double scale, double off) {
    weft_tensor *t = weft_tensor_empty(nd, s, dt);
    for (int64_t i = 0; t && i < weft_tensor_numel(t); i++) {
        double v = off + scale * (double)((i * 7) % 11);
        if (dt == WEFT_F32) ((float *)weft_tensor_data(t))[i] = (float)v;
        else if (dt == WEFT_I32) ((int32_t *)weft_tensor_data(t))[i] = (int32_t)v;
        else ((int64_t *)weft_tensor_data(t))[i] = (int64_t)v;
    }
    return t;
}

// Loads the model at path with the inputs fixed to vals (integer index inputs) or fed (the rest), runs it and
// returns y as f64 values (n of them), or NULL.
static double *run(const char *path, int n_in, const in_spec *in, weft_tensor **vals, int fixed_mask, int64_t *n) {
    weft_onnx_shape fix[5] = {{0}};
    int nf = 0, nfeed = 0;
    weft_value fv[5];
    weft_tensor *feeds[5];
    for (int k = 0; k < n_in; k++)
        if (fixed_mask >> k & 1) fix[nf++] = (weft_onnx_shape){.name = in[k].name, .value = vals[k]};
    weft_graph *g = weft_onnx_load(path, nf, fix);
    unlink(path);
    CHECK(g != NULL);
    if (!g) return NULL;
    for (int k = 0; k < n_in; k++)
        if (!(fixed_mask >> k & 1)) fv[nfeed] = weft_graph_find_value(g, in[k].name), feeds[nfeed++] = vals[k];
    weft_value y = weft_graph_find_value(g, "y");
    weft_tensor *out = NULL;
    double *r = NULL;
    CHECK(weft_graph_run(g, nfeed, fv, feeds, 1, &y, &out, 0, NULL) == WEFT_OK);
    if (out) {
        weft_tensor *d = weft_cast(out, WEFT_F64);
        *n = weft_tensor_numel(d);
        r = malloc(sizeof(double) * (size_t)(*n ? *n : 1));
        if (r && *n) memcpy(r, weft_tensor_data(d), sizeof(double) * (size_t)*n);
        weft_tensor_free(d);
    }
    weft_tensor_free(out);
    weft_graph_free(g);
    return r;
}

static float fat(const weft_tensor *t, int64_t i) { return ((const float *)weft_tensor_data(t))[i]; }

static void test_einsum(void) {
    char path[256];
    int64_t n;
    // implicit output: "ij,jk" is "ij,jk->ik"
    in_spec mm[2] = {{"a", 2, {3, 4}, 1}, {"b", 2, {4, 5}, 1}};
    weft_tensor *v[3] = {seq(2, mm[0].sizes, WEFT_F32, 0.5, -2), seq(2, mm[1].sizes, WEFT_F32, 0.25, -1)};
    CHECK(write_model("Einsum", 12, 2, mm, "equation", "ij,jk", NULL, 0, NULL, 0, path, sizeof path));
    double *y = run(path, 2, mm, v, 0, &n);
    CHECK(y && n == 15);
    for (int i = 0; y && n == 15 && i < 3; i++)
        for (int k = 0; k < 5; k++) {
            double s = 0;
            for (int j = 0; j < 4; j++) s += (double)fat(v[0], i * 4 + j) * fat(v[1], j * 5 + k);
            CHECK_NEAR(y[i * 5 + k], s, 1e-5);
        }
    free(y);
    // three operands: "ij,jk,kl->il"
    in_spec m3[3] = {{"a", 2, {3, 4}, 1}, {"b", 2, {4, 5}, 1}, {"c", 2, {5, 2}, 1}};
    v[2] = seq(2, m3[2].sizes, WEFT_F32, 0.125, 0.5);
    CHECK(write_model("Einsum", 12, 3, m3, "equation", "ij,jk,kl->il", NULL, 0, NULL, 0, path, sizeof path));
    y = run(path, 3, m3, v, 0, &n);
    CHECK(y && n == 6);
    for (int i = 0; y && n == 6 && i < 3; i++)
        for (int l = 0; l < 2; l++) {
            double s = 0;
            for (int j = 0; j < 4; j++)
                for (int k = 0; k < 5; k++) s += (double)fat(v[0], i * 4 + j) * fat(v[1], j * 5 + k) * fat(v[2], k * 2 + l);
            CHECK_NEAR(y[i * 2 + l], s, 1e-5);
        }
    free(y);
    for (int k = 0; k < 3; k++) weft_tensor_free(v[k]);
    // an ellipsis whose dims broadcast: (2,1,3,4) and (5,4,2) -> (2,5,3,2)
    in_spec el[2] = {{"a", 4, {2, 1, 3, 4}, 1}, {"b", 3, {5, 4, 2}, 1}};
    v[0] = seq(4, el[0].sizes, WEFT_F32, 0.5, -2), v[1] = seq(3, el[1].sizes, WEFT_F32, 0.25, -1);
    CHECK(write_model("Einsum", 12, 2, el, "equation", "...ij,...jk->...ik", NULL, 0, NULL, 0, path, sizeof path));
    y = run(path, 2, el, v, 0, &n);
    CHECK(y && n == 60);
    for (int p = 0; y && n == 60 && p < 2; p++)
        for (int q = 0; q < 5; q++)
            for (int i = 0; i < 3; i++)
                for (int k = 0; k < 2; k++) {
                    double s = 0;
                    for (int j = 0; j < 4; j++) s += (double)fat(v[0], (p * 3 + i) * 4 + j) * fat(v[1], (q * 4 + j) * 2 + k);
                    CHECK_NEAR(y[((p * 5 + q) * 3 + i) * 2 + k], s, 1e-5);
                }
    free(y);
    weft_tensor_free(v[0]), weft_tensor_free(v[1]);
    // a label twice in one term: "ii" is the trace (used twice: not in the implicit output), "bii->bi" diagonals
    in_spec tr[1] = {{"a", 2, {4, 4}, 1}};
    v[0] = seq(2, tr[0].sizes, WEFT_F32, 1, -3);
    CHECK(write_model("Einsum", 12, 1, tr, "equation", "ii", NULL, 0, NULL, 0, path, sizeof path));
    y = run(path, 1, tr, v, 0, &n);
    CHECK(y && n == 1);
    if (y && n == 1) CHECK_NEAR(y[0], fat(v[0], 0) + fat(v[0], 5) + fat(v[0], 10) + fat(v[0], 15), 1e-6);
    free(y);
    weft_tensor_free(v[0]);
    in_spec dg[1] = {{"a", 3, {2, 3, 3}, 1}};
    v[0] = seq(3, dg[0].sizes, WEFT_F32, 1, -3);
    CHECK(write_model("Einsum", 12, 1, dg, "equation", "bii->bi", NULL, 0, NULL, 0, path, sizeof path));
    y = run(path, 1, dg, v, 0, &n);
    CHECK(y && n == 6);
    for (int b = 0; y && n == 6 && b < 2; b++)
        for (int i = 0; i < 3; i++) CHECK_NEAR(y[b * 3 + i], fat(v[0], b * 9 + i * 4), 1e-6);
    free(y);
    weft_tensor_free(v[0]);
    // refusals: sizes that differ, a term that does not fit its operand
    CHECK(write_model("Einsum", 12, 2, mm, "equation", "ij,kj->ik", NULL, 0, NULL, 0, path, sizeof path));
    CHECK(weft_onnx_load(path, 0, NULL) == NULL && wt_error_has("size"));
    unlink(path);
    CHECK(write_model("Einsum", 12, 2, mm, "equation", "ijk,jk->ik", NULL, 0, NULL, 0, path, sizeof path));
    CHECK(weft_onnx_load(path, 0, NULL) == NULL && wt_error_has("does not fit"));
    unlink(path);
}

static void test_cumsum(void) {
    char path[256];
    int64_t n, s[2] = {2, 5}, one = 1;
    in_spec in[2] = {{"x", 2, {2, 5}, 6}, {"axis", 0, {0}, 7}};
    for (int mode = 0; mode < 4; mode++) { // exclusive, reverse
        bool excl = mode & 1, back = mode & 2;
        weft_tensor *v[2] = {seq(2, s, WEFT_I32, 3, -9), weft_tensor_from_data(&one, 0, NULL, WEFT_I64)};
        CHECK(write_model("CumSum", 14, 2, in, NULL, NULL, "exclusive", excl, "reverse", back, path, sizeof path));
        double *y = run(path, 2, in, v, 2, &n);
        CHECK(y && n == 10);
        const int32_t *x = weft_tensor_data(v[0]);
        for (int r = 0; y && n == 10 && r < 2; r++)
            for (int j = 0; j < 5; j++) {
                int64_t want = 0;
                for (int k = 0; k < 5; k++)
                    if (back ? (excl ? k > j : k >= j) : (excl ? k < j : k <= j)) want += x[r * 5 + k];
                CHECK(y[r * 5 + j] == (double)want);
            }
        free(y);
        weft_tensor_free(v[0]), weft_tensor_free(v[1]);
    }
}

static void test_gather_nd(void) {
    char path[256];
    int64_t n, ds[3] = {2, 3, 4}, is[3] = {2, 2, 1};
    in_spec in[2] = {{"data", 3, {2, 3, 4}, 1}, {"idx", 3, {2, 2, 1}, 7}};
    int64_t ix[4] = {2, -3, -1, 1}; // batch 0 picks rows 2 and 0; batch 1 rows 2 and 1
    weft_tensor *v[2] = {seq(3, ds, WEFT_F32, 1, 0), weft_tensor_from_data(ix, 3, is, WEFT_I64)};
    CHECK(write_model("GatherND", 13, 2, in, NULL, NULL, "batch_dims", 1, NULL, 0, path, sizeof path));
    double *y = run(path, 2, in, v, 2, &n);
    CHECK(y && n == 16);
    int rows[2][2] = {{2, 0}, {2, 1}};
    for (int b = 0; y && n == 16 && b < 2; b++)
        for (int p = 0; p < 2; p++)
            for (int k = 0; k < 4; k++) CHECK(y[(b * 2 + p) * 4 + k] == fat(v[0], (b * 3 + rows[b][p]) * 4 + k));
    free(y);
    weft_tensor_free(v[0]), weft_tensor_free(v[1]);
}

// A linear Resize (half_pixel, 3 -> 7 and 4 -> 6) is a linear map: the gradient of sum(w * y) with respect to x,
// by weft_graph_gradients on the loaded graph, matches central differences of the loaded graph's own output.
static void test_resize_gradient(void) {
    char path[256];
    int64_t xs[4] = {1, 1, 3, 4}, sz[4] = {1, 1, 7, 6};
    in_spec in[4] = {{"x", 4, {1, 1, 3, 4}, 1}, {"roi", 1, {0}, 1}, {"scales", 1, {0}, 1}, {"sizes", 1, {4}, 7}};
    CHECK(write_model("Resize", 13, 4, in, "mode", "linear", NULL, 0, NULL, 0, path, sizeof path));
    weft_tensor *xv = seq(4, xs, WEFT_F32, 0.3, -1), *roi = weft_tensor_empty(1, (int64_t[]){0}, WEFT_F32);
    weft_tensor *szv = weft_tensor_from_data(sz, 1, (int64_t[]){4}, WEFT_I64);
    weft_onnx_shape fix[3] = {{.name = "roi", .value = roi}, {.name = "scales", .value = roi}, {.name = "sizes", .value = szv}};
    weft_graph *g = weft_onnx_load(path, 3, fix);
    unlink(path);
    CHECK(g != NULL);
    if (g) {
        weft_value x = weft_graph_find_value(g, "x"), y = weft_graph_find_value(g, "y"), gx;
        weft_tensor *w = seq(4, sz, WEFT_F32, 0.1, -0.4);
        weft_value wv = weft_graph_constant(g, "w", w), p, l;
        int64_t at[3] = {15, 0, 0};
        CHECK(weft_graph_op(g, "mul", 2, (weft_value[]){y, wv}, NULL, 0, NULL, 0, &p) == WEFT_OK);
        CHECK(weft_graph_op(g, "sum", 1, &p, at, 3, NULL, 0, &l) == WEFT_OK);
        CHECK(weft_graph_gradients(g, l, 1, &x, &gx) == WEFT_OK);
        weft_tensor *gt = NULL, *lt = NULL;
        CHECK(weft_graph_run(g, 1, &x, &xv, 1, &gx, &gt, 0, NULL) == WEFT_OK);
        for (int64_t i = 0; gt && i < 12; i++) { // the loss is linear in x: central differences are exact up to rounding
            float *px = weft_tensor_data(xv), keep = px[i];
            double f[2];
            for (int s = 0; s < 2; s++) {
                px[i] = keep + (s ? -0.5f : 0.5f);
                CHECK(weft_graph_run(g, 1, &x, &xv, 1, &l, &lt, 0, NULL) == WEFT_OK);
                f[s] = lt ? weft_tensor_item(lt) : 0;
                weft_tensor_free(lt), lt = NULL;
            }
            px[i] = keep;
            CHECK_NEAR(fat(gt, i), f[0] - f[1], 1e-4);
        }
        weft_tensor_free(gt), weft_tensor_free(w);
        weft_graph_free(g);
    }
    weft_tensor_free(xv), weft_tensor_free(roi), weft_tensor_free(szv);
}

// A value info for a graph input: name, float or bool (ONNX types 1, 9), up to 4 dims (vinfo_init: a 1-D size, or
// 0-d for 0).
typedef struct vinfo {
    Onnx__ValueInfoProto vi;
    Onnx__TypeProto tp;
    Onnx__TypeProto__Tensor tt;
    Onnx__TensorShapeProto sp;
    Onnx__TensorShapeProto__Dimension dm[4], *dmp[4];
} vinfo;
static Onnx__ValueInfoProto *vinfo_dims(vinfo *v, const char *name, int type, int nd, const int64_t *sizes) {
    Onnx__ValueInfoProto vi = ONNX__VALUE_INFO_PROTO__INIT;
    Onnx__TypeProto tp = ONNX__TYPE_PROTO__INIT;
    Onnx__TypeProto__Tensor tt = ONNX__TYPE_PROTO__TENSOR__INIT;
    Onnx__TensorShapeProto sp = ONNX__TENSOR_SHAPE_PROTO__INIT;
    v->vi = vi, v->tp = tp, v->tt = tt, v->sp = sp;
    for (int d = 0; d < nd; d++) {
        Onnx__TensorShapeProto__Dimension dm = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
        v->dm[d] = dm, v->dmp[d] = &v->dm[d];
        v->dm[d].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE, v->dm[d].dim_value = sizes[d];
    }
    v->sp.n_dim = (size_t)nd, v->sp.dim = v->dmp;
    v->tt.has_elem_type = 1, v->tt.elem_type = type, v->tt.shape = &v->sp;
    v->tp.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE, v->tp.tensor_type = &v->tt;
    v->vi.name = (char *)name, v->vi.type = &v->tp;
    return &v->vi;
}
static Onnx__ValueInfoProto *vinfo_init(vinfo *v, const char *name, int type, int64_t n) {
    return vinfo_dims(v, name, type, n ? 1 : 0, &n);
}

// If(c) with then = x * x and else = (x + k) * s, where x is a graph input, k a Constant node and s an
// initializer of the outer graph: both branches read outer values (the cond's inputs, or constants copied in). The
// outputs and the gradient d sum(y) / dx (2x, or s) for both predicates, against loops here.
static void test_if(void) {
    char *x_in = "x", *k_in = "k", *s_in = "s", *c_in = "c", *y = "y", *t_out = "t", *e_mid = "m", *e_out = "e";
    Onnx__NodeProto kn = ONNX__NODE_PROTO__INIT, ifn = ONNX__NODE_PROTO__INIT, tn = ONNX__NODE_PROTO__INIT,
                    en1 = ONNX__NODE_PROTO__INIT, en2 = ONNX__NODE_PROTO__INIT;
    Onnx__AttributeProto kv = ONNX__ATTRIBUTE_PROTO__INIT, th = ONNX__ATTRIBUTE_PROTO__INIT, el = ONNX__ATTRIBUTE_PROTO__INIT;
    Onnx__TensorProto kt = ONNX__TENSOR_PROTO__INIT, st = ONNX__TENSOR_PROTO__INIT;
    Onnx__GraphProto tg = ONNX__GRAPH_PROTO__INIT, eg = ONNX__GRAPH_PROTO__INIT, gp = ONNX__GRAPH_PROTO__INIT;
    vinfo vx, vc, vy, vt, ve;
    float kvals[3] = {1, 2, 3}, svals[1] = {-0.5f};
    int64_t three = 3, one = 1;
    kt.n_dims = 1, kt.dims = &three, kt.has_data_type = 1, kt.data_type = 1, kt.n_float_data = 3, kt.float_data = kvals;
    st.n_dims = 1, st.dims = &one, st.has_data_type = 1, st.data_type = 1, st.n_float_data = 1, st.float_data = svals;
    st.name = s_in;
    kv.name = "value", kv.has_type = 1, kv.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR, kv.t = &kt;
    Onnx__AttributeProto *kvp = &kv, *ifa[2] = {&th, &el};
    kn.op_type = "Constant", kn.n_output = 1, kn.output = &k_in, kn.n_attribute = 1, kn.attribute = &kvp;
    char *tin[2] = {x_in, x_in}, *e1in[2] = {x_in, k_in}, *e2in[2] = {e_mid, s_in};
    tn.op_type = "Mul", tn.n_input = 2, tn.input = tin, tn.n_output = 1, tn.output = &t_out;
    en1.op_type = "Add", en1.n_input = 2, en1.input = e1in, en1.n_output = 1, en1.output = &e_mid;
    en2.op_type = "Mul", en2.n_input = 2, en2.input = e2in, en2.n_output = 1, en2.output = &e_out;
    Onnx__NodeProto *tnp = &tn, *enp[2] = {&en1, &en2}, *gn[2] = {&kn, &ifn};
    Onnx__ValueInfoProto *tvo = vinfo_init(&vt, t_out, 1, 3), *evo = vinfo_init(&ve, e_out, 1, 3);
    tg.name = "then", tg.n_node = 1, tg.node = &tnp, tg.n_output = 1, tg.output = &tvo;
    eg.name = "else", eg.n_node = 2, eg.node = enp, eg.n_output = 1, eg.output = &evo;
    th.name = "then_branch", th.has_type = 1, th.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH, th.g = &tg;
    el.name = "else_branch", el.has_type = 1, el.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH, el.g = &eg;
    ifn.op_type = "If", ifn.n_input = 1, ifn.input = &c_in, ifn.n_output = 1, ifn.output = &y, ifn.n_attribute = 2,
    ifn.attribute = ifa;
    Onnx__ValueInfoProto *gin[2] = {vinfo_init(&vc, c_in, 9, 0), vinfo_init(&vx, x_in, 1, 3)}, *gout = vinfo_init(&vy, y, 1, 3);
    Onnx__TensorProto *stp = &st;
    gp.name = "g", gp.n_node = 2, gp.node = gn, gp.n_input = 2, gp.input = gin, gp.n_output = 1, gp.output = &gout;
    gp.n_initializer = 1, gp.initializer = &stp;
    char path[256];
    CHECK(write_graph(&gp, 13, "if", path, sizeof path));
    weft_graph *g = weft_onnx_load(path, 0, NULL);
    unlink(path);
    CHECK(g != NULL);
    if (!g) return;
    weft_value xv = weft_graph_find_value(g, "x"), cv = weft_graph_find_value(g, "c"), yv = weft_graph_find_value(g, "y");
    weft_value l, gx;
    CHECK(weft_graph_op(g, "sum", 1, &yv, (int64_t[]){1, 0, 0}, 3, NULL, 0, &l) == WEFT_OK);
    CHECK(weft_graph_gradients(g, l, 1, &xv, &gx) == WEFT_OK);
    float xs[3] = {0.5f, -2, 3};
    for (int pred = 0; pred < 2; pred++) {
        uint8_t p = (uint8_t)pred;
        weft_tensor *xt = weft_tensor_from_data(xs, 1, (int64_t[]){3}, WEFT_F32), *ct = weft_tensor_from_data(&p, 0, NULL, WEFT_BOOL);
        weft_tensor *outs[2] = {NULL, NULL};
        CHECK(weft_graph_run(g, 2, (weft_value[]){xv, cv}, (weft_tensor *[]){xt, ct}, 2, (weft_value[]){yv, gx}, outs, 0, NULL) == WEFT_OK);
        for (int i = 0; outs[0] && outs[1] && i < 3; i++) {
            CHECK_NEAR(fat(outs[0], i), pred ? xs[i] * xs[i] : (xs[i] + kvals[i]) * svals[0], 1e-6);
            CHECK_NEAR(fat(outs[1], i), pred ? 2 * xs[i] : svals[0], 1e-6);
        }
        weft_tensor_free(outs[0]), weft_tensor_free(outs[1]), weft_tensor_free(xt), weft_tensor_free(ct);
    }
    weft_graph_free(g);
}

// Loop(M = 5, cond = true, v = x) with body v' = v * s + float(i) + b, where s is an initializer and b a graph input
// of the outer graph: v_5 = 32 x + sum_i 2^(4-i) (i + b); its gradients are 32 for x and 31 for b.
static void loop_case(bool scan, bool m_unknown) {
    char *m_in = "M", *c_in = "cond", *x_in = "x", *b_in = "b", *s_in = "s", *y = "y", *outs[2] = {"y", "ys"};
    char *bi = "i", *bc = "c_in", *bv = "v", *ic = "ic", *t = "t", *u = "u", *vo = "v_out", *co = "c_out";
    Onnx__NodeProto cast = ONNX__NODE_PROTO__INIT, mul = ONNX__NODE_PROTO__INIT, add1 = ONNX__NODE_PROTO__INIT,
                    add2 = ONNX__NODE_PROTO__INIT, idn = ONNX__NODE_PROTO__INIT, loop = ONNX__NODE_PROTO__INIT;
    Onnx__AttributeProto to = ONNX__ATTRIBUTE_PROTO__INIT, bd = ONNX__ATTRIBUTE_PROTO__INIT, *top = &to, *bdp = &bd;
    to.name = "to", to.has_type = 1, to.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, to.has_i = 1, to.i = 1;
    cast.op_type = "Cast", cast.n_input = 1, cast.input = &bi, cast.n_output = 1, cast.output = &ic, cast.n_attribute = 1,
    cast.attribute = &top;
    char *mi[2] = {bv, s_in}, *a1[2] = {t, ic}, *a2[2] = {u, b_in}, *li[3] = {m_in, c_in, x_in};
    mul.op_type = "Mul", mul.n_input = 2, mul.input = mi, mul.n_output = 1, mul.output = &t;
    add1.op_type = "Add", add1.n_input = 2, add1.input = a1, add1.n_output = 1, add1.output = &u;
    add2.op_type = "Add", add2.n_input = 2, add2.input = a2, add2.n_output = 1, add2.output = &vo;
    idn.op_type = "Identity", idn.n_input = 1, idn.input = &bc, idn.n_output = 1, idn.output = &co;
    Onnx__NodeProto *bn[5] = {&cast, &mul, &add1, &add2, &idn}, *lp = &loop;
    vinfo vi_i, vi_c, vi_v, vo_c, vo_v, vo_u, g_m, g_x, g_b, g_y, g_ys;
    Onnx__ValueInfoProto *bin[3] = {vinfo_init(&vi_i, bi, 7, 0), vinfo_init(&vi_c, bc, 9, 0), vinfo_init(&vi_v, bv, 1, 2)};
    Onnx__ValueInfoProto *bout[3] = {vinfo_init(&vo_c, co, 9, 0), vinfo_init(&vo_v, vo, 1, 2), vinfo_init(&vo_u, u, 1, 2)};
    Onnx__GraphProto body = ONNX__GRAPH_PROTO__INIT, gp = ONNX__GRAPH_PROTO__INIT;
    body.name = "body", body.n_node = 5, body.node = bn, body.n_input = 3, body.input = bin, body.n_output = scan ? 3 : 2, body.output = bout;
    bd.name = "body", bd.has_type = 1, bd.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH, bd.g = &body;
    loop.op_type = "Loop", loop.n_input = 3, loop.input = li, loop.n_output = scan ? 2 : 1, loop.output = outs, loop.n_attribute = 1,
    loop.attribute = &bdp;
    int64_t mval = 5, one = 1;
    int32_t cval = 1;
    float sval = 2;
    Onnx__TensorProto mt = ONNX__TENSOR_PROTO__INIT, ct = ONNX__TENSOR_PROTO__INIT, stt = ONNX__TENSOR_PROTO__INIT;
    mt.name = m_in, mt.has_data_type = 1, mt.data_type = 7, mt.n_int64_data = 1, mt.int64_data = &mval;
    ct.name = c_in, ct.has_data_type = 1, ct.data_type = 9, ct.n_int32_data = 1, ct.int32_data = &cval;
    stt.name = s_in, stt.n_dims = 1, stt.dims = &one, stt.has_data_type = 1, stt.data_type = 1, stt.n_float_data = 1,
    stt.float_data = &sval;
    Onnx__TensorProto *inits[3] = {&ct, &stt, &mt};
    Onnx__ValueInfoProto *gin[3] = {vinfo_init(&g_x, x_in, 1, 2), vinfo_init(&g_b, b_in, 1, 2), vinfo_init(&g_m, m_in, 7, 0)}, *gout[2] = {vinfo_init(&g_y, y, 1, 2), vinfo_init(&g_ys, "ys", 1, 0)};
    gp.name = "g", gp.n_node = 1, gp.node = &lp, gp.n_input = m_unknown ? 3 : 2, gp.input = gin, gp.n_output = scan ? 2 : 1, gp.output = gout;
    gp.n_initializer = m_unknown ? 2 : 3, gp.initializer = inits; // (M a graph input: fed at run time)
    char path[256];
    CHECK(write_graph(&gp, 13, "loop", path, sizeof path));
    weft_graph *g = weft_onnx_load(path, 0, NULL);
    unlink(path);
    if (m_unknown) { // scan outputs with M unknown at load: their length is not known
        CHECK(g == NULL && wt_error_has("scan outputs need M known at load"));
        weft_graph_free(g);
        return;
    }
    CHECK(g != NULL);
    if (!g) return;
    weft_value xv = weft_graph_find_value(g, "x"), bv2 = weft_graph_find_value(g, "b"), yv = weft_graph_find_value(g, "y");
    float xs[2] = {0.5f, -1}, bs[2] = {0.25f, 3};
    weft_tensor *xt = weft_tensor_from_data(xs, 1, (int64_t[]){2}, WEFT_F32), *bt = weft_tensor_from_data(bs, 1, (int64_t[]){2}, WEFT_F32);
    weft_tensor *out = NULL;
    CHECK(weft_graph_run(g, 2, (weft_value[]){xv, bv2}, (weft_tensor *[]){xt, bt}, 1, &yv, &out, 0, NULL) == WEFT_OK);
    for (int e = 0; out && e < 2; e++) {
        double v = xs[e];
        for (int i = 0; i < 5; i++) v = v * 2 + i + bs[e];
        CHECK_NEAR(fat(out, e), v, 1e-6);
    }
    weft_tensor_free(out);
    weft_value ysv = scan ? weft_graph_find_value(g, "ys") : yv, l, gr[2];
    if (scan) { // ys[i] = 2 v_i + i, v_i the value before iteration i
        CHECK(weft_graph_value_ndim(g, ysv) == 2 && weft_graph_value_sizes(g, ysv)[0] == 5);
        out = NULL;
        CHECK(weft_graph_run(g, 2, (weft_value[]){xv, bv2}, (weft_tensor *[]){xt, bt}, 1, &ysv, &out, 0, NULL) == WEFT_OK);
        for (int e = 0; out && e < 2; e++) {
            double v = xs[e];
            for (int i = 0; i < 5; i++) {
                CHECK_NEAR(fat(out, i * 2 + e), v * 2 + i, 1e-6);
                v = v * 2 + i + bs[e];
            }
        }
        weft_tensor_free(out);
    }
    CHECK(weft_graph_op(g, "sum", 1, &ysv, (int64_t[]){scan ? 3 : 1, 0, 0}, 3, NULL, 0, &l) == WEFT_OK);
    if (weft_graph_gradients(g, l, 2, (weft_value[]){xv, bv2}, gr) == WEFT_OK) {
        weft_tensor *go[2] = {NULL, NULL};
        CHECK(weft_graph_run(g, 2, (weft_value[]){xv, bv2}, (weft_tensor *[]){xt, bt}, 2, gr, go, 0, NULL) == WEFT_OK);
        for (int e = 0; go[0] && go[1] && e < 2; e++) {
            // d v_i / dx = 2^i, d v_i / db = 2^i - 1; sum(ys): sum over i < 5 of 2^(i+1) and 2 (2^i - 1)
            CHECK_NEAR(fat(go[0], e), scan ? 62 : 32, 1e-6);
            CHECK_NEAR(fat(go[1], e), scan ? 52 : 31, 1e-6);
        }
        weft_tensor_free(go[0]), weft_tensor_free(go[1]);
    } else {
        CHECK(!"gradients through the loop");
    }
    weft_tensor_free(xt), weft_tensor_free(bt);
    weft_graph_free(g);
}

// Loop(M = 5, cond = true, v = x): the final v, and (scan) the scan output of u = 2 v + i stacked over the trips
static void test_loop(void) { loop_case(false, false); }
static void test_loop_scan(void) {
    loop_case(true, false);
    loop_case(true, true);
}

// GridSample (bilinear, zeros padding) is differentiable in the input and the grid: weft_graph_gradients of
// sum(w * y) on the loaded graph against central differences, with the grid's points away from pixel edges.
static void test_grid_sample_gradient(void) {
    char path[256];
    int64_t xs[4] = {1, 2, 3, 4}, gsz[4] = {1, 2, 3, 2};
    in_spec in[2] = {{"x", 4, {1, 2, 3, 4}, 1}, {"grid", 4, {1, 2, 3, 2}, 1}};
    CHECK(write_model("GridSample", 16, 2, in, "mode", "bilinear", "align_corners", 0, NULL, 0, path, sizeof path));
    weft_graph *g = weft_onnx_load(path, 0, NULL);
    unlink(path);
    CHECK(g != NULL);
    if (!g) return;
    float gv[12] = {-0.8f, -0.55f, 0.3f, 0.1f, 0.95f, 0.7f, -0.2f, 0.45f, 0.6f, -0.9f, 1.1f, 0.25f}; // one tap outside
    weft_tensor *xv = seq(4, xs, WEFT_F32, 0.3, -1), *grid = weft_tensor_from_data(gv, 4, gsz, WEFT_F32);
    weft_value x = weft_graph_find_value(g, "x"), gr = weft_graph_find_value(g, "grid"), y = weft_graph_find_value(g, "y");
    weft_tensor *w = seq(4, (int64_t[]){1, 2, 2, 3}, WEFT_F32, 0.1, -0.4);
    weft_value wv = weft_graph_constant(g, "w", w), p, l, gd[2], wrt[2] = {x, gr};
    CHECK(weft_graph_op(g, "mul", 2, (weft_value[]){y, wv}, NULL, 0, NULL, 0, &p) == WEFT_OK);
    CHECK(weft_graph_op(g, "sum", 1, &p, (int64_t[]){15, 0, 0}, 3, NULL, 0, &l) == WEFT_OK);
    CHECK(weft_graph_gradients(g, l, 2, wrt, gd) == WEFT_OK);
    weft_tensor *feeds[2] = {xv, grid}, *got[2] = {NULL, NULL}, *lt = NULL;
    CHECK(weft_graph_run(g, 2, wrt, feeds, 2, gd, got, 0, NULL) == WEFT_OK);
    for (int k = 0; k < 2 && got[0] && got[1]; k++)
        for (int64_t i = 0; i < weft_tensor_numel(feeds[k]); i++) {
            float *px = weft_tensor_data(feeds[k]), keep = px[i];
            double f[2], h = k ? 1e-3 : 0.5; // the loss is linear in x; smooth in the grid away from pixel edges
            for (int s = 0; s < 2; s++) {
                px[i] = keep + (float)(s ? -h : h);
                CHECK(weft_graph_run(g, 2, wrt, feeds, 1, &l, &lt, 0, NULL) == WEFT_OK);
                f[s] = lt ? weft_tensor_item(lt) : 0;
                weft_tensor_free(lt), lt = NULL;
            }
            px[i] = keep;
            CHECK_NEAR(fat(got[k], i), (f[0] - f[1]) / (2 * h), k ? 5e-3 : 1e-4);
        }
    weft_tensor_free(got[0]), weft_tensor_free(got[1]), weft_tensor_free(w);
    weft_tensor_free(xv), weft_tensor_free(grid);
    weft_graph_free(g);
}

// Scan(h0, X, Y) with X read along axis 1, Y along axis 0 backwards, body h' = h * w + x_t + y_t (w an outer graph
// input the body reads), the scan output h' stacked along axis 1 backwards: O[:, 3 - t] = h_t. Outputs and the
// gradients of sum(O) against closed forms (d sum / d a_t = sum over s >= t of w^(s - t)).
static void scan_ints_attr(Onnx__AttributeProto *a, const char *name, int n, int64_t *v) {
    a->name = (char *)name, a->has_type = 1, a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, a->n_ints = (size_t)n;
    a->ints = v;
}
static void test_scan(void) {
    char *h = "h", *x = "x", *y = "y", *w = "w", *m = "m", *p = "p", *hn = "hn", *o = "o";
    char *mi[2] = {h, w}, *pi[2] = {m, x}, *hi[2] = {p, y};
    Onnx__NodeProto mul = ONNX__NODE_PROTO__INIT, add1 = ONNX__NODE_PROTO__INIT, add2 = ONNX__NODE_PROTO__INIT,
                    idn = ONNX__NODE_PROTO__INIT, scan = ONNX__NODE_PROTO__INIT;
    mul.op_type = "Mul", mul.n_input = 2, mul.input = mi, mul.n_output = 1, mul.output = &m;
    add1.op_type = "Add", add1.n_input = 2, add1.input = pi, add1.n_output = 1, add1.output = &p;
    add2.op_type = "Add", add2.n_input = 2, add2.input = hi, add2.n_output = 1, add2.output = &hn;
    idn.op_type = "Identity", idn.n_input = 1, idn.input = &hn, idn.n_output = 1, idn.output = &o;
    Onnx__NodeProto *bn[4] = {&mul, &add1, &add2, &idn}, *sp = &scan;
    vinfo bi[3], bo[2], gi[4], go[2];
    Onnx__ValueInfoProto *bin[3] = {vinfo_init(&bi[0], h, 1, 3), vinfo_init(&bi[1], x, 1, 3), vinfo_init(&bi[2], y, 1, 3)};
    Onnx__ValueInfoProto *bout[2] = {vinfo_init(&bo[0], hn, 1, 3), vinfo_init(&bo[1], o, 1, 3)};
    Onnx__GraphProto body = ONNX__GRAPH_PROTO__INIT, gp = ONNX__GRAPH_PROTO__INIT;
    body.name = "body", body.n_node = 4, body.node = bn, body.n_input = 3, body.input = bin, body.n_output = 2, body.output = bout;
    Onnx__AttributeProto at[6] = {ONNX__ATTRIBUTE_PROTO__INIT, ONNX__ATTRIBUTE_PROTO__INIT, ONNX__ATTRIBUTE_PROTO__INIT,
                                  ONNX__ATTRIBUTE_PROTO__INIT, ONNX__ATTRIBUTE_PROTO__INIT, ONNX__ATTRIBUTE_PROTO__INIT};
    Onnx__AttributeProto *atp[6] = {&at[0], &at[1], &at[2], &at[3], &at[4], &at[5]};
    int64_t iax[2] = {1, 0}, idir[2] = {0, 1}, oax[1] = {-1}, odir[1] = {1};
    at[0].name = "body", at[0].has_type = 1, at[0].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH, at[0].g = &body;
    at[1].name = "num_scan_inputs", at[1].has_type = 1, at[1].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    at[1].has_i = 1, at[1].i = 2;
    scan_ints_attr(&at[2], "scan_input_axes", 2, iax);
    scan_ints_attr(&at[3], "scan_input_directions", 2, idir);
    scan_ints_attr(&at[4], "scan_output_axes", 1, oax);
    scan_ints_attr(&at[5], "scan_output_directions", 1, odir);
    char *sin[3] = {"h0", "X", "Y"}, *sout[2] = {"hf", "O"};
    scan.op_type = "Scan", scan.n_input = 3, scan.input = sin, scan.n_output = 2, scan.output = sout;
    scan.n_attribute = 6, scan.attribute = atp;
    Onnx__ValueInfoProto *gin[4] = {vinfo_init(&gi[0], "h0", 1, 3), vinfo_dims(&gi[1], "X", 1, 2, (int64_t[]){3, 4}),
                                    vinfo_dims(&gi[2], "Y", 1, 2, (int64_t[]){4, 3}), vinfo_init(&gi[3], w, 1, 3)};
    Onnx__ValueInfoProto *gout[2] = {vinfo_init(&go[0], "hf", 1, 3), vinfo_dims(&go[1], "O", 1, 2, (int64_t[]){3, 4})};
    gp.name = "g", gp.n_node = 1, gp.node = &sp, gp.n_input = 4, gp.input = gin, gp.n_output = 2, gp.output = gout;
    char path[256];
    CHECK(write_graph(&gp, 16, "scan", path, sizeof path));
    weft_graph *g = weft_onnx_load(path, 0, NULL);
    unlink(path);
    CHECK(g != NULL);
    if (!g) return;
    float h0[3] = {0.5f, -1, 2}, X[12], Y[12], wv[3] = {0.5f, -1.5f, 1.25f};
    for (int i = 0; i < 12; i++) X[i] = 0.25f * (float)(i % 5) - 0.5f, Y[i] = 0.125f * (float)((i * 7) % 9) - 0.25f;
    weft_tensor *ft[4] = {weft_tensor_from_data(h0, 1, (int64_t[]){3}, WEFT_F32), weft_tensor_from_data(X, 2, (int64_t[]){3, 4}, WEFT_F32),
                          weft_tensor_from_data(Y, 2, (int64_t[]){4, 3}, WEFT_F32), weft_tensor_from_data(wv, 1, (int64_t[]){3}, WEFT_F32)};
    weft_value fv[4] = {weft_graph_find_value(g, "h0"), weft_graph_find_value(g, "X"), weft_graph_find_value(g, "Y"),
                        weft_graph_find_value(g, "w")};
    weft_value ov[2] = {weft_graph_find_value(g, "hf"), weft_graph_find_value(g, "O")}, l, gr[3];
    CHECK(weft_graph_op(g, "sum", 1, &ov[1], (int64_t[]){3, 0, 0}, 3, NULL, 0, &l) == WEFT_OK);
    CHECK(weft_graph_gradients(g, l, 3, fv, gr) == WEFT_OK);
    weft_tensor *out[5] = {NULL};
    CHECK(weft_graph_run(g, 4, fv, ft, 5, (weft_value[]){ov[0], ov[1], gr[0], gr[1], gr[2]}, out, 0, NULL) == WEFT_OK);
    for (int e = 0; out[0] && out[1] && out[2] && out[3] && out[4] && e < 3; e++) {
        double hh = h0[e], we = wv[e], want_h0 = 0;
        for (int t = 0; t < 4; t++) {
            hh = hh * we + X[e * 4 + t] + Y[(3 - t) * 3 + e];
            CHECK_NEAR(fat(out[1], e * 4 + (3 - t)), hh, 1e-5);
            want_h0 += pow(we, t + 1);
            double ga = 0; // d sum(O) / d a_t, a_t = x_t + y_t
            for (int s2 = t; s2 < 4; s2++) ga += pow(we, s2 - t);
            CHECK_NEAR(fat(out[3], e * 4 + t), ga, 1e-5);
            CHECK_NEAR(fat(out[4], (3 - t) * 3 + e), ga, 1e-5);
        }
        CHECK_NEAR(fat(out[0], e), hh, 1e-5);
        CHECK_NEAR(fat(out[2], e), want_h0, 1e-5);
    }
    for (int k = 0; k < 5; k++) weft_tensor_free(out[k]);
    for (int k = 0; k < 4; k++) weft_tensor_free(ft[k]);
    weft_graph_free(g);
    // scan inputs of different lengths are refused
    vinfo_dims(&gi[2], "Y", 1, 2, (int64_t[]){5, 3});
    CHECK(write_graph(&gp, 16, "scan", path, sizeof path));
    CHECK(weft_onnx_load(path, 0, NULL) == NULL && wt_error_has("lengths"));
    unlink(path);
    // 200,000 trips: each copies the (T, 3) buffer, 1.2e11 elements in all (over 2^36): refused at load
    vinfo_dims(&gi[1], "X", 1, 2, (int64_t[]){3, 200000});
    vinfo_dims(&gi[2], "Y", 1, 2, (int64_t[]){200000, 3});
    CHECK(write_graph(&gp, 16, "scan", path, sizeof path));
    CHECK(weft_onnx_load(path, 0, NULL) == NULL && wt_error_has("2^36 copied"));
    unlink(path);
}

// ReduceProd over every dim (keepdims 0) of a (3, 5) x: its value, and its gradient (the product of the others) with
// no zero, one zero (only that element's is not 0) and two zeros (all 0); on int32, the exact product.
static void test_reduce_prod(void) {
    char path[256];
    in_spec in[1] = {{"x", 2, {3, 5}, 1}};
    for (int zeros = 0; zeros < 3; zeros++) {
        float xs[15];
        for (int i = 0; i < 15; i++) xs[i] = (i % 2 ? -1.0f : 1.0f) * (0.75f + 0.0625f * (float)i);
        if (zeros >= 1) xs[7] = 0;
        if (zeros >= 2) xs[12] = 0;
        CHECK(write_model("ReduceProd", 13, 1, in, NULL, NULL, "keepdims", 0, NULL, 0, path, sizeof path));
        weft_graph *g = weft_onnx_load(path, 0, NULL);
        unlink(path);
        CHECK(g != NULL);
        if (!g) continue;
        weft_value xv = weft_graph_find_value(g, "x"), yv = weft_graph_find_value(g, "y"), gx;
        CHECK(weft_graph_value_ndim(g, yv) == 0);
        CHECK(weft_graph_gradients(g, yv, 1, &xv, &gx) == WEFT_OK);
        weft_tensor *xt = weft_tensor_from_data(xs, 2, (int64_t[]){3, 5}, WEFT_F32), *o[2] = {NULL, NULL};
        CHECK(weft_graph_run(g, 1, &xv, &xt, 2, (weft_value[]){yv, gx}, o, 0, NULL) == WEFT_OK);
        if (o[0] && o[1]) {
            double all = 1;
            for (int i = 0; i < 15; i++) all *= xs[i];
            CHECK_NEAR(fat(o[0], 0), all, 1e-6 * fabs(all) + 1e-30);
            for (int i = 0; i < 15; i++) {
                double others = 1;
                for (int j = 0; j < 15; j++)
                    if (j != i) others *= xs[j];
                CHECK_NEAR(fat(o[1], i), others, 1e-5 * fabs(others) + 1e-30);
            }
        }
        weft_tensor_free(o[0]), weft_tensor_free(o[1]), weft_tensor_free(xt);
        weft_graph_free(g);
    }
    in_spec ii[1] = {{"x", 2, {3, 5}, 6}};
    int64_t n;
    static const int32_t iv[15] = {1, -1, 2, 1, -2, 3, 1, 1, -1, 2, 1, 1, -3, 1, 2}; // product 144: no overflow
    weft_tensor *v[1] = {weft_tensor_from_data(iv, 2, (int64_t[]){3, 5}, WEFT_I32)};
    CHECK(write_model("ReduceProd", 13, 1, ii, NULL, NULL, "keepdims", 1, NULL, 0, path, sizeof path));
    double *y = run(path, 1, ii, v, 0, &n);
    CHECK(y && n == 1);
    int64_t want = 1;
    for (int i = 0; i < 15; i++) want *= iv[i];
    if (y && n == 1) CHECK(y[0] == (double)want && want == 144);
    free(y);
    weft_tensor_free(v[0]);
}

// QuantizeLinear to uint8: ties round to even, both ends saturate, with and without a zero point; DequantizeLinear
// back; a zero point of another type is refused.
static void test_quantize(void) {
    char path[256];
    int64_t n;
    static const float xs[7] = {-300, -0.5f, 0.5f, 1.5f, 2.5f, 254.5f, 300};
    static const double want[2][7] = {{0, 0, 0, 2, 2, 254, 255}, {0, 10, 10, 12, 12, 255, 255}};
    float one = 1;
    uint8_t ten = 10;
    for (int z = 0; z < 2; z++) {
        in_spec in[3] = {{"x", 1, {7}, 1}, {"s", 0, {0}, 1}, {"zp", 0, {0}, 2}};
        weft_tensor *v[3] = {weft_tensor_from_data(xs, 1, (int64_t[]){7}, WEFT_F32), weft_tensor_from_data(&one, 0, NULL, WEFT_F32),
                             weft_tensor_from_data(&ten, 0, NULL, WEFT_U8)};
        CHECK(write_model("QuantizeLinear", 13, 2 + z, in, NULL, NULL, NULL, 0, NULL, 0, path, sizeof path));
        double *y = run(path, 2 + z, in, v, 0, &n);
        CHECK(y && n == 7);
        for (int i = 0; y && n == 7 && i < 7; i++) CHECK(y[i] == want[z][i]);
        free(y);
        for (int k = 0; k < 3; k++) weft_tensor_free(v[k]);
    }
    // DequantizeLinear: (q - 10) * 0.5
    uint8_t qs[4] = {0, 10, 11, 255};
    float half = 0.5f;
    in_spec dq[3] = {{"x", 1, {4}, 2}, {"s", 0, {0}, 1}, {"zp", 0, {0}, 2}};
    weft_tensor *d[3] = {weft_tensor_from_data(qs, 1, (int64_t[]){4}, WEFT_U8), weft_tensor_from_data(&half, 0, NULL, WEFT_F32),
                         weft_tensor_from_data(&ten, 0, NULL, WEFT_U8)};
    CHECK(write_model("DequantizeLinear", 13, 3, dq, NULL, NULL, NULL, 0, NULL, 0, path, sizeof path));
    double *y = run(path, 3, dq, d, 0, &n);
    CHECK(y && n == 4);
    for (int i = 0; y && n == 4 && i < 4; i++) CHECK(y[i] == (qs[i] - 10.0) * 0.5);
    free(y);
    for (int k = 0; k < 3; k++) weft_tensor_free(d[k]);
    // a float zero point is refused (uint8 only)
    in_spec bad[3] = {{"x", 1, {7}, 1}, {"s", 0, {0}, 1}, {"zp", 0, {0}, 1}};
    CHECK(write_model("QuantizeLinear", 13, 3, bad, NULL, NULL, NULL, 0, NULL, 0, path, sizeof path));
    CHECK(weft_onnx_load(path, 0, NULL) == NULL && wt_error_has("uint8 only"));
    unlink(path);
}

// ReverseSequence of a (T 5, B 3, F 2) x, lengths fed at run time (5, 0, 3): y[t, b] = x[len_b - 1 - t, b] for t <
// len_b, else x[t, b]; the gradient of sum(y * W) is W read through the same map (the map is its own inverse).
static void test_reverse_sequence(void) {
    char path[256];
    in_spec in[2] = {{"x", 3, {5, 3, 2}, 1}, {"lens", 1, {3}, 7}};
    CHECK(write_model("ReverseSequence", 10, 2, in, NULL, NULL, "batch_axis", 1, "time_axis", 0, path, sizeof path));
    weft_graph *g = weft_onnx_load(path, 0, NULL);
    unlink(path);
    CHECK(g != NULL);
    if (!g) return;
    float xs[30], ws[30];
    for (int i = 0; i < 30; i++) xs[i] = (float)i, ws[i] = 0.5f + 0.25f * (float)((i * 7) % 11);
    int64_t lens[3] = {5, 0, 3};
    weft_tensor *xt = weft_tensor_from_data(xs, 3, (int64_t[]){5, 3, 2}, WEFT_F32), *lt = weft_tensor_from_data(lens, 1, (int64_t[]){3}, WEFT_I64);
    weft_tensor *wt = weft_tensor_from_data(ws, 3, (int64_t[]){5, 3, 2}, WEFT_F32);
    weft_value xv = weft_graph_find_value(g, "x"), lv = weft_graph_find_value(g, "lens"), yv = weft_graph_find_value(g, "y");
    weft_value wv = weft_graph_constant(g, "W", wt), p, l, gx;
    CHECK(weft_graph_op(g, "mul", 2, (weft_value[]){yv, wv}, NULL, 0, NULL, 0, &p) == WEFT_OK);
    CHECK(weft_graph_op(g, "sum", 1, &p, (int64_t[]){7, 0, 0}, 3, NULL, 0, &l) == WEFT_OK);
    CHECK(weft_graph_gradients(g, l, 1, &xv, &gx) == WEFT_OK);
    weft_tensor *o[2] = {NULL, NULL};
    CHECK(weft_graph_run(g, 2, (weft_value[]){xv, lv}, (weft_tensor *[]){xt, lt}, 2, (weft_value[]){yv, gx}, o, 0, NULL) == WEFT_OK);
    for (int t = 0; o[0] && o[1] && t < 5; t++)
        for (int b = 0; b < 3; b++)
            for (int f = 0; f < 2; f++) {
                int src = t < lens[b] ? (int)lens[b] - 1 - t : t, at = (t * 3 + b) * 2 + f, from = (src * 3 + b) * 2 + f;
                CHECK(fat(o[0], at) == xs[from]);
                CHECK(fat(o[1], at) == ws[from]);
            }
    weft_tensor_free(o[0]), weft_tensor_free(o[1]), weft_tensor_free(xt), weft_tensor_free(lt), weft_tensor_free(wt);
    weft_graph_free(g);
}

// Pow with an integer base and exponent fed at run time (int32, int64), and an int32 base with a float exponent
// (truncated, as numpy's astype): against plain loops.
static void test_pow_int(void) {
    char path[256];
    int64_t n;
    static const int32_t b32[5] = {2, -3, 5, 7, 0}, e32[5] = {10, 3, 0, 2, 4};
    static const int64_t b64[3] = {3, -2, 10}, e64[3] = {33, 51, 15}; // 3^33, -2^51, 10^15: below 2^53
    static const float ef[5] = {0.5f, 2, 1.5f, 0, 3};
    for (int k = 0; k < 3; k++) {
        int len = k == 1 ? 3 : 5, tb = k == 1 ? 7 : 6, te = k == 0 ? 6 : k == 1 ? 7 : 1;
        in_spec in[2] = {{"x", 1, {len}, tb}, {"e", 1, {len}, te}};
        weft_dtype db = k == 1 ? WEFT_I64 : WEFT_I32, de = k == 0 ? WEFT_I32 : k == 1 ? WEFT_I64 : WEFT_F32;
        const void *bp = k == 1 ? (const void *)b64 : b32, *ep = k == 0 ? (const void *)e32 : k == 1 ? (const void *)e64 : ef;
        weft_tensor *v[2] = {weft_tensor_from_data(bp, 1, (int64_t[]){len}, db), weft_tensor_from_data(ep, 1, (int64_t[]){len}, de)};
        CHECK(write_model("Pow", 13, 2, in, NULL, NULL, NULL, 0, NULL, 0, path, sizeof path));
        double *y = run(path, 2, in, v, 0, &n);
        CHECK(y && n == len);
        for (int i = 0; y && n == len && i < len; i++) {
            double want;
            if (k == 1) {
                int64_t r = 1;
                for (int j = 0; j < e64[i]; j++) r *= b64[i];
                want = (double)r;
            } else {
                want = k == 0 ? 1 : trunc(pow(b32[i], ef[i]));
                for (int j = 0; k == 0 && j < e32[i]; j++) want *= b32[i];
            }
            CHECK(y[i] == want);
        }
        free(y);
        weft_tensor_free(v[0]), weft_tensor_free(v[1]);
    }
}

// Compress with a condition known at load: along axis 1 with a condition shorter than the dim, with no axis (x
// flattened), all false (an empty result), and a condition longer than the dim refused.
static void test_compress(void) {
    char path[256];
    int64_t n;
    static const uint8_t c1[3] = {1, 0, 1}, cf[12] = {0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1}, c0[3] = {0, 0, 0}, c5[5] = {1, 1, 1, 1, 1};
    const uint8_t *conds[4] = {c1, cf, c0, c5};
    const int len[4] = {3, 12, 3, 5}, axis[4] = {1, -1, 0, 1};
    for (int k = 0; k < 4; k++) {
        in_spec in[2] = {{"x", 2, {3, 4}, 1}, {"cond", 1, {len[k]}, 9}};
        weft_tensor *v[2] = {seq(2, in[0].sizes, WEFT_F32, 1, 0), weft_tensor_from_data(conds[k], 1, (int64_t[]){len[k]}, WEFT_BOOL)};
        CHECK(write_model("Compress", 11, 2, in, NULL, NULL, axis[k] >= 0 ? "axis" : NULL, axis[k], NULL, 0, path, sizeof path));
        if (k == 3) {
            weft_onnx_shape fx = {.name = "cond", .value = v[1]};
            CHECK(weft_onnx_load(path, 1, &fx) == NULL && wt_error_has("condition of 5"));
            unlink(path);
        } else {
            double *y = run(path, 2, in, v, 2, &n);
            const float *x = weft_tensor_data(v[0]);
            int m = 0;
            if (k == 0)
                for (int r = 0; y && r < 3; r++)
                    for (int j = 0; j < 3; j++)
                        if (c1[j]) CHECK(y[m++] == x[r * 4 + j]);
            if (k == 1)
                for (int i = 0; y && i < 12; i++)
                    if (cf[i]) CHECK(y[m++] == x[i]);
            CHECK(y && n == m && n == (k == 0 ? 6 : k == 1 ? 3 : 0));
            free(y);
        }
        weft_tensor_free(v[0]), weft_tensor_free(v[1]);
    }
}

// BatchNormalization in training mode on f64 (4, 3, 2): y against the batch statistics computed here, and the
// gradients of sum(y * W) for x and scale against central differences of that same closed form.
static double bn_loss(const double *x, const double *sc, const double *b, const double *w, double eps, double *y) {
    double l = 0;
    for (int ch = 0; ch < 3; ch++) {
        double m = 0, v = 0;
        for (int n = 0; n < 4; n++)
            for (int k = 0; k < 2; k++) m += x[(n * 3 + ch) * 2 + k] / 8;
        for (int n = 0; n < 4; n++)
            for (int k = 0; k < 2; k++) v += (x[(n * 3 + ch) * 2 + k] - m) * (x[(n * 3 + ch) * 2 + k] - m) / 8;
        for (int n = 0; n < 4; n++)
            for (int k = 0; k < 2; k++) {
                int i = (n * 3 + ch) * 2 + k;
                double yi = (x[i] - m) / sqrt(v + eps) * sc[ch] + b[ch];
                if (y) y[i] = yi;
                l += yi * w[i];
            }
    }
    return l;
}
static void test_batch_norm_training(void) {
    char path[256];
    in_spec in[5] = {{"x", 3, {4, 3, 2}, 11}, {"scale", 1, {3}, 11}, {"B", 1, {3}, 11}, {"mean", 1, {3}, 11}, {"var", 1, {3}, 11}};
    CHECK(write_model("BatchNormalization", 15, 5, in, NULL, NULL, "training_mode", 1, NULL, 0, path, sizeof path));
    weft_graph *g = weft_onnx_load(path, 0, NULL);
    unlink(path);
    CHECK(g != NULL);
    if (!g) return;
    double x[24], sc[3] = {1.5, -0.5, 2}, b[3] = {0.25, 1, -1}, rm[3] = {0, 1, 2}, rv[3] = {1, 2, 3}, w[24], y[24];
    wt_vals(x, 24, -2, 2, 91), wt_vals(w, 24, -1, 1, 92);
    weft_tensor *t[5] = {weft_tensor_from_data(x, 3, (int64_t[]){4, 3, 2}, WEFT_F64), weft_tensor_from_data(sc, 1, (int64_t[]){3}, WEFT_F64),
                         weft_tensor_from_data(b, 1, (int64_t[]){3}, WEFT_F64), weft_tensor_from_data(rm, 1, (int64_t[]){3}, WEFT_F64),
                         weft_tensor_from_data(rv, 1, (int64_t[]){3}, WEFT_F64)};
    weft_tensor *wt = weft_tensor_from_data(w, 3, (int64_t[]){4, 3, 2}, WEFT_F64);
    weft_value fv[5], yv = weft_graph_find_value(g, "y"), p, l, gr[2];
    for (int k = 0; k < 5; k++) fv[k] = weft_graph_find_value(g, in[k].name);
    CHECK(weft_graph_op(g, "mul", 2, (weft_value[]){yv, weft_graph_constant(g, "W", wt)}, NULL, 0, NULL, 0, &p) == WEFT_OK);
    CHECK(weft_graph_op(g, "sum", 1, &p, (int64_t[]){7, 0, 0}, 3, NULL, 0, &l) == WEFT_OK);
    CHECK(weft_graph_gradients(g, l, 2, fv, gr) == WEFT_OK);
    weft_tensor *o[3] = {NULL, NULL, NULL};
    CHECK(weft_graph_run(g, 5, fv, t, 3, (weft_value[]){yv, gr[0], gr[1]}, o, 0, NULL) == WEFT_OK);
    bn_loss(x, sc, b, w, 1e-5, y);
    for (int i = 0; o[0] && o[1] && o[2] && i < 24; i++) {
        CHECK_NEAR(((const double *)weft_tensor_data(o[0]))[i], y[i], 1e-12);
        double h = 1e-6, xp[24], xm[24];
        memcpy(xp, x, sizeof x), memcpy(xm, x, sizeof x);
        xp[i] += h, xm[i] -= h;
        double fd = (bn_loss(xp, sc, b, w, 1e-5, NULL) - bn_loss(xm, sc, b, w, 1e-5, NULL)) / (2 * h);
        CHECK_NEAR(((const double *)weft_tensor_data(o[1]))[i], fd, 1e-6);
    }
    for (int ch = 0; o[2] && ch < 3; ch++) {
        double h = 1e-6, sp[3], sm[3];
        memcpy(sp, sc, sizeof sc), memcpy(sm, sc, sizeof sc);
        sp[ch] += h, sm[ch] -= h;
        double fd = (bn_loss(x, sp, b, w, 1e-5, NULL) - bn_loss(x, sm, b, w, 1e-5, NULL)) / (2 * h);
        CHECK_NEAR(((const double *)weft_tensor_data(o[2]))[ch], fd, 1e-6);
    }
    for (int k = 0; k < 3; k++) weft_tensor_free(o[k]);
    for (int k = 0; k < 5; k++) weft_tensor_free(t[k]);
    weft_tensor_free(wt);
    weft_graph_free(g);
}

// DFT on f64: a real (2, 5, 1) signal zero-padded to 8, onesided (5 bins), against the sum written out, and the
// gradient of sum(Y * W) against central differences of that sum; a complex (1, 6, 2) signal's inverse.
static double dft_naive(const double *x, int L, int N, int ch, bool inv, int k, int part) { // bin k, re or im
    double re = 0, im = 0;
    for (int n = 0; n < L && n < N; n++) {
        double th = 2 * M_PI * (double)((long)n * k % N) / N * (inv ? 1 : -1), a = x[n * ch], b = ch == 2 ? x[n * ch + 1] : 0;
        re += a * cos(th) - b * sin(th), im += a * sin(th) + b * cos(th);
    }
    return (part ? im : re) / (inv ? N : 1);
}
static double dft_loss(const double *x, const double *w) {
    double l = 0;
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < 5; k++)
            for (int q = 0; q < 2; q++) l += dft_naive(x + b * 5, 5, 8, 1, false, k, q) * w[(b * 5 + k) * 2 + q];
    return l;
}
static void test_dft(void) {
    char path[256];
    in_spec in[2] = {{"x", 3, {2, 5, 1}, 11}, {"len", 0, {0}, 7}};
    CHECK(write_model("DFT", 17, 2, in, NULL, NULL, "onesided", 1, "axis", 1, path, sizeof path));
    int64_t eight = 8;
    weft_tensor *lt = weft_tensor_from_data(&eight, 0, NULL, WEFT_I64);
    weft_onnx_shape fx = {.name = "len", .value = lt};
    weft_graph *g = weft_onnx_load(path, 1, &fx);
    unlink(path);
    CHECK(g != NULL);
    double x[10], w[20];
    wt_vals(x, 10, -1, 1, 93), wt_vals(w, 20, -1, 1, 94);
    if (g) {
        weft_tensor *xt = weft_tensor_from_data(x, 3, (int64_t[]){2, 5, 1}, WEFT_F64), *wt = weft_tensor_from_data(w, 3, (int64_t[]){2, 5, 2}, WEFT_F64);
        weft_value xv = weft_graph_find_value(g, "x"), yv = weft_graph_find_value(g, "y"), p, l, gx;
        CHECK(weft_graph_value_ndim(g, yv) == 3 && weft_graph_value_sizes(g, yv)[1] == 5 && weft_graph_value_sizes(g, yv)[2] == 2);
        CHECK(weft_graph_op(g, "mul", 2, (weft_value[]){yv, weft_graph_constant(g, "W", wt)}, NULL, 0, NULL, 0, &p) == WEFT_OK);
        CHECK(weft_graph_op(g, "sum", 1, &p, (int64_t[]){7, 0, 0}, 3, NULL, 0, &l) == WEFT_OK);
        CHECK(weft_graph_gradients(g, l, 1, &xv, &gx) == WEFT_OK);
        weft_tensor *o[2] = {NULL, NULL};
        CHECK(weft_graph_run(g, 1, &xv, &xt, 2, (weft_value[]){yv, gx}, o, 0, NULL) == WEFT_OK);
        for (int b = 0; o[0] && b < 2; b++)
            for (int k = 0; k < 5; k++)
                for (int q = 0; q < 2; q++)
                    CHECK_NEAR(((const double *)weft_tensor_data(o[0]))[(b * 5 + k) * 2 + q], dft_naive(x + b * 5, 5, 8, 1, false, k, q), 1e-12);
        for (int i = 0; o[1] && i < 10; i++) {
            double xp[10], xm[10], h = 1e-6;
            memcpy(xp, x, sizeof x), memcpy(xm, x, sizeof x);
            xp[i] += h, xm[i] -= h;
            CHECK_NEAR(((const double *)weft_tensor_data(o[1]))[i], (dft_loss(xp, w) - dft_loss(xm, w)) / (2 * h), 1e-6);
        }
        weft_tensor_free(o[0]), weft_tensor_free(o[1]), weft_tensor_free(xt), weft_tensor_free(wt);
        weft_graph_free(g);
    }
    weft_tensor_free(lt);
    in_spec ci[1] = {{"x", 3, {1, 6, 2}, 11}};
    double z[12];
    wt_vals(z, 12, -1, 1, 95);
    weft_tensor *v[1] = {weft_tensor_from_data(z, 3, (int64_t[]){1, 6, 2}, WEFT_F64)};
    CHECK(write_model("DFT", 17, 1, ci, NULL, NULL, "inverse", 1, "axis", 1, path, sizeof path));
    int64_t n;
    double *y = run(path, 1, ci, v, 0, &n);
    CHECK(y && n == 12);
    for (int k = 0; y && n == 12 && k < 6; k++)
        for (int q = 0; q < 2; q++) CHECK_NEAR(y[k * 2 + q], dft_naive(z, 6, 6, 2, true, k, q), 1e-12);
    free(y);
    weft_tensor_free(v[0]);
}

// STFT of a (1, 10, 1) f64 signal, frame_step 3, a window fed at run time, frame_length 4: 3 frames of 3 bins
// (onesided), each the DFT of the windowed frame written out.
static void test_stft(void) {
    char path[256];
    in_spec in[4] = {{"x", 3, {1, 10, 1}, 11}, {"step", 0, {0}, 7}, {"win", 1, {4}, 11}, {"len", 0, {0}, 7}};
    double x[10], win[4] = {0.25, 1, 0.75, 0.5};
    int64_t step = 3, fl = 4, n;
    wt_vals(x, 10, -1, 1, 96);
    weft_tensor *v[4] = {weft_tensor_from_data(x, 3, (int64_t[]){1, 10, 1}, WEFT_F64), weft_tensor_from_data(&step, 0, NULL, WEFT_I64),
                         weft_tensor_from_data(win, 1, (int64_t[]){4}, WEFT_F64), weft_tensor_from_data(&fl, 0, NULL, WEFT_I64)};
    CHECK(write_model("STFT", 17, 4, in, NULL, NULL, NULL, 0, NULL, 0, path, sizeof path));
    double *y = run(path, 4, in, v, 2 | 8, &n);
    CHECK(y && n == 3 * 3 * 2);
    for (int f = 0; y && n == 18 && f < 3; f++) {
        double fr[4];
        for (int j = 0; j < 4; j++) fr[j] = x[f * 3 + j] * win[j];
        for (int k = 0; k < 3; k++)
            for (int q = 0; q < 2; q++) CHECK_NEAR(y[(f * 3 + k) * 2 + q], dft_naive(fr, 4, 4, 1, false, k, q), 1e-12);
    }
    free(y);
    for (int k = 0; k < 4; k++) weft_tensor_free(v[k]);
}

// Tile of an 8-D x with two dims both repeated and longer than 1 (one view would need 10 dims: tiled a dim at a
// time), against y[i] = x[i mod size]; sinh, cosh, asinh, acosh from near 0 to where the plain formulas overflow,
// against libm; EyeLike with k past the columns; and forms refused with an error rather than a crash.
static void test_edges(void) {
    char path[256];
    int64_t n, xs[8] = {2, 2, 1, 1, 1, 1, 1, 3}, rp[8] = {2, 1, 3, 1, 1, 1, 2, 2}, os[8];
    in_spec ti[2] = {{"x", 8, {2, 2, 1, 1, 1, 1, 1, 3}, 1}, {"r", 1, {8}, 7}};
    weft_tensor *v[2] = {seq(8, xs, WEFT_F32, 1, -4), weft_tensor_from_data(rp, 1, (int64_t[]){8}, WEFT_I64)};
    CHECK(write_model("Tile", 13, 2, ti, NULL, NULL, NULL, 0, NULL, 0, path, sizeof path));
    double *y = run(path, 2, ti, v, 2, &n);
    int64_t want = 1;
    for (int d = 0; d < 8; d++) os[d] = xs[d] * rp[d], want *= os[d];
    CHECK(y && n == want);
    for (int64_t i = 0; y && n == want && i < n; i++) {
        int64_t r = i, src = 0, stride = 1;
        for (int d = 7; d >= 0; d--) src += (r % os[d]) % xs[d] * stride, stride *= xs[d], r /= os[d];
        CHECK(y[i] == fat(v[0], src));
    }
    free(y);
    weft_tensor_free(v[0]), weft_tensor_free(v[1]);

    static const char *fn[4] = {"Sinh", "Cosh", "Asinh", "Acosh"};
    static const float pts[4][12] = {
        {-89, -20, -1.5f, -0.999f, -1e-4f, 0, 3e-6f, 0.25f, 1.001f, 20, 88.9f, 89.2f},
        {-89, -20, -1.5f, -0.999f, -1e-4f, 0, 3e-6f, 0.25f, 1.001f, 20, 88.9f, 89.2f},
        {-3e38f, -1e20f, -7e7f, -2, -0.01f, 0, 1e-5f, 0.5f, 6e7f, 1e19f, 3e19f, 3e38f},
        {1, 1.0001f, 1.5f, 10, 1e4f, 6e7f, 7e7f, 1e19f, 3e19f, 1e30f, 2e38f, 3e38f}};
    for (int f = 0; f < 4; f++) {
        in_spec hi[1] = {{"x", 1, {12}, 1}};
        v[0] = weft_tensor_from_data(pts[f], 1, (int64_t[]){12}, WEFT_F32);
        CHECK(write_model(fn[f], 13, 1, hi, NULL, NULL, NULL, 0, NULL, 0, path, sizeof path));
        weft_graph *g = weft_onnx_load(path, 0, NULL);
        unlink(path);
        CHECK(g != NULL);
        if (!g) {
            weft_tensor_free(v[0]);
            continue;
        }
        weft_value xv = weft_graph_find_value(g, "x"), yv = weft_graph_find_value(g, "y"), l, gx;
        CHECK(weft_graph_op(g, "sum", 1, &yv, (int64_t[]){1, 0, 0}, 3, NULL, 0, &l) == WEFT_OK);
        CHECK(weft_graph_gradients(g, l, 1, &xv, &gx) == WEFT_OK);
        weft_tensor *o[2] = {NULL, NULL};
        CHECK(weft_graph_run(g, 1, &xv, v, 2, (weft_value[]){yv, gx}, o, 0, NULL) == WEFT_OK);
        for (int i = 0; o[0] && o[1] && i < 12; i++) { // values and derivatives: cosh, sinh, 1/sqrt(x^2 -+ 1)
            double x = pts[f][i], w = f == 0 ? sinh(x) : f == 1 ? cosh(x) : f == 2 ? asinh(x) : acosh(x);
            double dw = f == 0 ? cosh(x) : f == 1 ? sinh(x) : 1 / sqrt(f == 2 ? x * x + 1 : (x - 1) * (x + 1));
            double yi = fat(o[0], i), gi = fat(o[1], i);
            CHECK(isfinite(yi) && fabs(yi - w) <= 2e-6 * fabs(w) + 1e-30);
            if (isfinite((float)dw) && x != 1) CHECK(isfinite(gi) && fabs(gi - dw) <= 1e-4 * fabs(dw) + 1e-7);
        }
        weft_tensor_free(o[0]), weft_tensor_free(o[1]);
        weft_graph_free(g);
        weft_tensor_free(v[0]);
    }

    // in f16 (max 65504), where x^2 overflows from 256 on
    static const float hp[2][4] = {{-300, 0.5f, 200, 60000}, {1.5f, 200, 300, 60000}};
    for (int f = 0; f < 2; f++) {
        in_spec hi[1] = {{"x", 1, {4}, 10}};
        weft_tensor *x32 = weft_tensor_from_data(hp[f], 1, (int64_t[]){4}, WEFT_F32);
        v[0] = weft_cast(x32, WEFT_F16);
        weft_tensor_free(x32);
        CHECK(write_model(f ? "Acosh" : "Asinh", 13, 1, hi, NULL, NULL, NULL, 0, NULL, 0, path, sizeof path));
        y = run(path, 1, hi, v, 0, &n);
        CHECK(y && n == 4);
        for (int i = 0; y && n == 4 && i < 4; i++) {
            double w = f ? acosh(hp[f][i]) : asinh(hp[f][i]);
            CHECK(isfinite(y[i]) && fabs(y[i] - w) <= 2e-3 * fabs(w));
        }
        free(y);
        weft_tensor_free(v[0]);
    }

    // EyeLike with k = INT64_MAX and INT64_MIN: all zeros
    in_spec ey[1] = {{"x", 2, {3, 4}, 1}};
    for (int s = 0; s < 2; s++) {
        v[0] = seq(2, ey[0].sizes, WEFT_F32, 1, 0);
        CHECK(write_model("EyeLike", 9, 1, ey, NULL, NULL, "k", s ? INT64_MIN : INT64_MAX, NULL, 0, path, sizeof path));
        y = run(path, 1, ey, v, 0, &n);
        CHECK(y && n == 12);
        for (int i = 0; y && n == 12 && i < 12; i++) CHECK(y[i] == 0);
        free(y);
        weft_tensor_free(v[0]);
    }

    // refusals: a blocksize whose square overflows, Einsum with a missing operand or no equation, Tile's and
    // Resize's sizes past int64
    in_spec ds[1] = {{"x", 4, {1, 8, 2, 2}, 1}};
    const char *dmode[2] = {"DepthToSpace", "SpaceToDepth"};
    for (int k = 0; k < 2; k++) {
        CHECK(write_model(dmode[k], 13, 1, ds, NULL, NULL, "blocksize", INT64_C(1) << 33, NULL, 0, path, sizeof path));
        CHECK(weft_onnx_load(path, 0, NULL) == NULL && wt_error_has("blocksize"));
        unlink(path);
    }
    in_spec e3[3] = {{"a", 2, {3, 4}, 1}, {"", 2, {4, 5}, 1}, {"c", 2, {5, 2}, 1}};
    CHECK(write_model("Einsum", 12, 3, e3, "equation", "ij,jk,kl->il", NULL, 0, NULL, 0, path, sizeof path));
    CHECK(weft_onnx_load(path, 0, NULL) == NULL);
    unlink(path);
    CHECK(write_model("Einsum", 12, 1, ey, "equation", "", NULL, 0, NULL, 0, path, sizeof path));
    CHECK(weft_onnx_load(path, 0, NULL) == NULL && wt_error_has("Einsum"));
    unlink(path);
    int64_t big[8] = {INT64_C(1) << 62, 1, 1, 1, 1, 1, 1, 1};
    weft_onnx_shape fx = {.name = "r", .value = weft_tensor_from_data(big, 1, (int64_t[]){8}, WEFT_I64)};
    CHECK(write_model("Tile", 13, 2, ti, NULL, NULL, NULL, 0, NULL, 0, path, sizeof path));
    CHECK(weft_onnx_load(path, 1, &fx) == NULL && wt_error_has("repeat"));
    unlink(path);
    weft_tensor_free(fx.value);
    in_spec rs[2] = {{"x", 4, {1, 1, 0, 2}, 1}, {"s", 1, {4}, 1}};
    float inf4[4] = {1, 1, INFINITY, 1};
    fx = (weft_onnx_shape){.name = "s", .value = weft_tensor_from_data(inf4, 1, (int64_t[]){4}, WEFT_F32)};
    CHECK(write_model("Resize", 10, 2, rs, NULL, NULL, NULL, 0, NULL, 0, path, sizeof path));
    CHECK(weft_onnx_load(path, 1, &fx) == NULL && wt_error_has("scale"));
    unlink(path);
    weft_tensor_free(fx.value);
}

// Dropout's mask output: ones of x's type before opset 10 (Dropout-7), true from then on.
static void test_dropout_mask(void) {
    for (int k = 0; k < 2; k++) {
        char *x_in = "x", *outs[2] = {"y", "mask"};
        Onnx__NodeProto dn = ONNX__NODE_PROTO__INIT, *dnp = &dn;
        Onnx__GraphProto gp = ONNX__GRAPH_PROTO__INIT;
        vinfo vx, vy, vm;
        dn.op_type = "Dropout", dn.n_input = 1, dn.input = &x_in, dn.n_output = 2, dn.output = outs;
        Onnx__ValueInfoProto *gin = vinfo_init(&vx, x_in, 1, 3);
        Onnx__ValueInfoProto *gout[2] = {vinfo_init(&vy, outs[0], 1, 3), vinfo_init(&vm, outs[1], k ? 9 : 1, 3)};
        gp.name = "g", gp.n_node = 1, gp.node = &dnp, gp.n_input = 1, gp.input = &gin, gp.n_output = 2, gp.output = gout;
        char path[256];
        CHECK(write_graph(&gp, k ? 12 : 7, "dropout", path, sizeof path));
        weft_graph *g = weft_onnx_load(path, 0, NULL);
        unlink(path);
        CHECK(g != NULL);
        if (!g) continue;
        float xs[3] = {0.5f, -2, 3};
        weft_tensor *xt = weft_tensor_from_data(xs, 1, (int64_t[]){3}, WEFT_F32), *o[2] = {NULL, NULL};
        weft_value xv = weft_graph_find_value(g, "x");
        weft_value ov[2] = {weft_graph_find_value(g, "y"), weft_graph_find_value(g, "mask")};
        CHECK(weft_graph_run(g, 1, &xv, &xt, 2, ov, o, 0, NULL) == WEFT_OK);
        if (o[0] && o[1]) {
            CHECK(weft_tensor_dtype(o[1]) == (k ? WEFT_BOOL : WEFT_F32));
            weft_tensor *m = weft_cast(o[1], WEFT_F64);
            for (int i = 0; m && i < 3; i++) {
                CHECK(fat(o[0], i) == xs[i]);
                CHECK(((const double *)weft_tensor_data(m))[i] == 1);
            }
            weft_tensor_free(m);
        }
        weft_tensor_free(o[0]), weft_tensor_free(o[1]), weft_tensor_free(xt);
        weft_graph_free(g);
    }
}
#endif

int main(void) {
#ifdef WEFT_HAVE_ONNX
    RUN(test_einsum);
    RUN(test_cumsum);
    RUN(test_gather_nd);
    RUN(test_resize_gradient);
    RUN(test_grid_sample_gradient);
    RUN(test_if);
    RUN(test_loop);
    RUN(test_loop_scan);
    RUN(test_scan);
    RUN(test_reduce_prod);
    RUN(test_quantize);
    RUN(test_reverse_sequence);
    RUN(test_pow_int);
    RUN(test_compress);
    RUN(test_batch_norm_training);
    RUN(test_dft);
    RUN(test_stft);
    RUN(test_edges);
    RUN(test_dropout_mask);
#else
    printf("skip: built without ONNX (protobuf-c)\n");
#endif
    return wt_summary();
}
