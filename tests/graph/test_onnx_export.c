// weft_onnx_save's files checked as ONNX files, apart from weft's own reader. Each file is unpacked here and
// must be what ONNX asks of a model (IR version 8, opset 17, single assignment, every node input produced
// before the node, static input shapes, only the ONNX ops weft writes) and what the API promises (inputs named
// after their placeholders, outputs after their nodes with "node:i" for output i > 0, initializers holding the
// variables' current values and nothing the outputs do not need). After all cases, tests/graph/onnx_check.py
// runs onnx.checker (full check: ONNX's own type and shape inference over every node) on every file where a
// python with onnx exists, and, where onnxruntime is importable too, runs the f32 and integer files on the
// inputs saved beside them and compares with weft's outputs; without them those parts are skipped with a
// note. ($WEFT_ONNX_PYTHON picks the python.) Each file is also loaded back with weft_onnx_load and run on the
// same feeds: f32 within 1e-5 of the graph's own run, and selected outputs within 1e-5 of closed forms
// computed here (exact GELU within 1e-6, linear_gelu, layer norm, causal attention). Traced nn modules (an MLP
// with each activation, a CNN, two small GPTs) match their eager forward. Refusals name the node and the op
// and write nothing. test_onnx_roundtrip.c covers each op in f64; this file adds f32, the file's structure,
// the independent checkers and the cases that once wrote invalid files (comparisons of bool masks, a u8
// condition, half-precision norms and softmax under autocast, reductions over no axes, concat of more than 8
// inputs, name collisions). Without ONNX support: skipped (77).
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weft_test.h"

#ifdef WEFT_HAVE_ONNX
#include "graph/onnx.h"

#define MAX_IO 20

static char g_dir[64];
static char g_files[160][96]; // every model written, for onnx_check.py at the end
static int g_n_files;
static weft_generator *g_rng;

static const char *new_file(void) {
    if (g_n_files == (int)(sizeof g_files / sizeof g_files[0])) return NULL;
    snprintf(g_files[g_n_files], sizeof g_files[0], "%s/m%03d.onnx", g_dir, g_n_files);
    return g_files[g_n_files++];
}

// ---------------------------------------------------------------- the file as ONNX

// The ONNX ops weft writes: the list the importer and exporter agreed on, and GatherElements, ArgMax,
// ReduceMin, ReduceLogSumExp (gather, argmax, min, logsumexp), which the importer reads too.
static const char *const k_ops[] = {
    "Add", "Sub", "Mul", "Div", "Pow", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Sin", "Cos", "Tanh",
    "Sigmoid", "Relu", "Sign", "Erf", "Max", "Min", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual",
    "Where", "Cast", "Identity", "MatMul", "Gemm", "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
    "Slice", "Expand", "Concat", "Gather", "Softmax", "LogSoftmax", "LayerNormalization", "BatchNormalization",
    "Conv", "MaxPool", "AveragePool", "ReduceSum", "ReduceMean", "ReduceMax", "Constant", "Trilu",
    "GatherElements", "ArgMax", "ReduceMin", "ReduceLogSumExp"};

static bool known_op(const char *t) {
    for (size_t k = 0; k < sizeof k_ops / sizeof k_ops[0]; k++)
        if (!strcmp(k_ops[k], t)) return true;
    return false;
}

static Onnx__ModelProto *read_model(const char *path) {
    uint8_t *buf;
    size_t n;
    if (weft_onnx_read_file(path, &buf, &n) != WEFT_OK) return NULL;
    Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, n, buf);
    free(buf);
    return mp;
}

typedef struct names {
    const char **p;
    size_t n;
} names;
static bool has(const names *s, const char *x) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->p[i], x)) return true;
    return false;
}
// A tensor type with an element type and every dim a concrete size.
static bool static_tensor_type(const Onnx__ValueInfoProto *vi) {
    const Onnx__TypeProto__Tensor *tt = vi->type ? vi->type->tensor_type : NULL;
    if (!tt || !tt->has_elem_type || !tt->elem_type || !tt->shape) return false;
    for (size_t d = 0; d < tt->shape->n_dim; d++)
        if (tt->shape->dim[d]->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ||
            tt->shape->dim[d]->dim_value < 0)
            return false;
    return true;
}

// The model at path, checked as ONNX requires (and weft promises) of every file it writes; NULL when it does not
// unpack. Free with onnx__model_proto__free_unpacked.
static Onnx__ModelProto *check_structure(const char *what, const char *path) {
    Onnx__ModelProto *mp = read_model(path);
    CHECK(mp && mp->graph);
    if (!mp || !mp->graph) {
        fprintf(stderr, "%s: %s does not unpack as a model\n", what, path);
        if (mp) onnx__model_proto__free_unpacked(mp, NULL);
        return NULL;
    }
    int f0 = wt_fail;
    const Onnx__GraphProto *gp = mp->graph;
    CHECK(mp->has_ir_version && mp->ir_version == 8);
    CHECK(mp->n_opset_import == 1 && (!mp->opset_import[0]->domain || !mp->opset_import[0]->domain[0]) &&
          mp->opset_import[0]->has_version && mp->opset_import[0]->version == 17);
    CHECK(mp->producer_name && !strcmp(mp->producer_name, "weft"));
    CHECK(gp->name && gp->name[0]);
    size_t cap = gp->n_input + gp->n_initializer + 1;
    for (size_t i = 0; i < gp->n_node; i++) cap += gp->node[i]->n_output;
    names def = {malloc(sizeof(char *) * cap), 0}; // names produced so far (single assignment: each once)
    for (size_t i = 0; i < gp->n_input; i++) {
        CHECK(static_tensor_type(gp->input[i]));
        CHECK(!has(&def, gp->input[i]->name));
        def.p[def.n++] = gp->input[i]->name;
    }
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *t = gp->initializer[i];
        CHECK(t->has_raw_data && t->has_data_type && !has(&def, t->name));
        def.p[def.n++] = t->name;
    }
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *nd = gp->node[i];
        bool ok = known_op(nd->op_type);
        for (size_t k = 0; k < nd->n_input; k++) ok &= nd->input[k][0] && has(&def, nd->input[k]); // produced before
        for (size_t k = 0; k < nd->n_output; k++) {
            ok &= !has(&def, nd->output[k]);
            def.p[def.n++] = nd->output[k];
        }
        CHECK(ok);
        if (!ok) fprintf(stderr, "%s: node %zu (%s -> %s) is not well formed\n", what, i, nd->op_type, nd->output[0]);
    }
    for (size_t i = 0; i < gp->n_output; i++) CHECK(static_tensor_type(gp->output[i]) && has(&def, gp->output[i]->name));
    free(def.p);
    if (wt_fail != f0) fprintf(stderr, "%s: %s is not a well-formed model\n", what, path);
    return mp;
}

// t as a TensorProto file, ONNX's test data layout (input_k.pb, output_k.pb).
static bool write_pb(const char *path, weft_tensor *t) {
    Onnx__TensorProto tp;
    onnx__tensor_proto__init(&tp);
    if (weft_onnx_tensor_to(t, "t", &tp)) return false;
    size_t n = onnx__tensor_proto__get_packed_size(&tp);
    uint8_t *buf = malloc(n ? n : 1);
    bool ok = buf != NULL;
    FILE *f = ok ? fopen(path, "wb") : NULL;
    if (f) {
        onnx__tensor_proto__pack(&tp, buf);
        ok = fwrite(buf, 1, n, f) == n;
        ok &= fclose(f) == 0;
    }
    free(buf);
    weft_onnx_tensor_proto_clear(&tp);
    return ok && f;
}
// path.data/ with the feeds and weft's outputs for onnx_check.py's ONNX Runtime run; only for f32 and integer
// graphs (ONNX Runtime's CPU kernels lack f64 and bf16 for several of the ops written).
static void write_data(const char *path, int n_in, weft_tensor *const *in, int n_out, weft_tensor *const *out) {
    for (int k = 0; k < n_in + n_out; k++) {
        weft_dtype dt = weft_tensor_dtype(k < n_in ? in[k] : out[k - n_in]);
        if (dt == WEFT_F64 || dt == WEFT_F16 || dt == WEFT_BF16) return;
    }
    char dir[160], f[200];
    snprintf(dir, sizeof dir, "%s.data", path);
    if (mkdir(dir, 0755) != 0) return;
    for (int k = 0; k < n_in + n_out; k++) {
        snprintf(f, sizeof f, "%s/%s_%d.pb", dir, k < n_in ? "input" : "output", k < n_in ? k : k - n_in);
        CHECK(write_pb(f, k < n_in ? in[k] : out[k - n_in]));
    }
}

// ---------------------------------------------------------------- graphs to export

typedef struct rt {
    weft_graph *g;
    int n_in, n_out;
    weft_value in[MAX_IO], out[MAX_IO];
    weft_tensor *feed[MAX_IO];
} rt;

// A placeholder fed with t (taken).
static weft_value ph_t(rt *c, const char *name, weft_tensor *t) {
    weft_value v = weft_graph_placeholder(c->g, name, weft_tensor_ndim(t), weft_tensor_sizes(t), weft_tensor_dtype(t));
    c->in[c->n_in] = v, c->feed[c->n_in++] = t;
    return v;
}
// A placeholder fed N(0,1) f32.
static weft_value ph(rt *c, const char *name, int nd, const int64_t *s) {
    return ph_t(c, name, weft_tensor_randn(nd, s, WEFT_F32, g_rng));
}
// A placeholder fed integers in [0, hi) of dtype dt (bool, u8 by a cast).
static weft_value ph_int(rt *c, const char *name, int nd, const int64_t *s, int64_t hi, weft_dtype dt) {
    weft_tensor *r = weft_tensor_randint(nd, s, 0, hi, WEFT_I64, g_rng);
    weft_tensor *t = dt == WEFT_I64 ? weft_tensor_ref(r) : weft_cast(r, dt);
    weft_tensor_free(r);
    return ph_t(c, name, t);
}
static weft_value var(rt *c, const char *name, int nd, const int64_t *s) {
    weft_tensor *t = weft_tensor_randn(nd, s, WEFT_F32, g_rng);
    weft_value v = weft_graph_variable(c->g, name, t);
    weft_tensor_free(t);
    return v;
}
static void out(rt *c, weft_value v) { c->out[c->n_out++] = v; }
static weft_value op(rt *c, const char *name, const char *o, int n, const weft_value *in, const int64_t *ia, int ni,
                     const double *fa, int nf) {
    weft_value outs[WEFT_GRAPH_MAX_OUT];
    if (weft_graph_op_named(c->g, name, o, n, in, ia, ni, fa, nf, outs) != WEFT_OK) {
        fprintf(stderr, "building %s (%s): %s\n", name ? name : "?", o, weft_last_error());
        return WEFT_VALUE_NONE;
    }
    return outs[0];
}
#define OP1(c, o, x) op(c, NULL, o, 1, (weft_value[]){x}, NULL, 0, NULL, 0)
#define OP2(c, o, x, y) op(c, NULL, o, 2, (weft_value[]){x, y}, NULL, 0, NULL, 0)

static void rt_free(rt *c) {
    for (int k = 0; k < c->n_in; k++) weft_tensor_free(c->feed[k]);
    weft_graph_free(c->g);
}

// Runs c, saves it, checks the file, loads it back and runs it on the same feeds: each output within tol
// (relative + absolute) of the graph's own. got (may be NULL) receives the loaded graph's outputs.
static void round_trip(const char *what, rt *c, double tol, weft_tensor **got) {
    weft_tensor *want[MAX_IO] = {0}, *back[MAX_IO] = {0};
    bool built = c->n_out > 0;
    for (int k = 0; k < c->n_out; k++) built &= c->out[k].id >= 0;
    CHECK(built);
    const char *path = new_file();
    CHECK(path != NULL);
    weft_status st = built && path ? weft_graph_run(c->g, c->n_in, c->in, c->feed, c->n_out, c->out, want, 0, NULL)
                                   : WEFT_ERR_ARG;
    CHECK(st == WEFT_OK);
    if (!st) {
        st = weft_onnx_save(c->g, c->n_in, c->in, c->n_out, c->out, path);
        CHECK(st == WEFT_OK);
        if (st) fprintf(stderr, "%s: %s\n", what, weft_last_error());
    }
    Onnx__ModelProto *mp = st ? NULL : check_structure(what, path);
    if (mp) { // the interface carries the weft names
        const Onnx__GraphProto *gp = mp->graph;
        CHECK(gp->n_input == (size_t)c->n_in && gp->n_output == (size_t)c->n_out);
        for (int k = 0; k < c->n_in && k < (int)gp->n_input; k++)
            CHECK(!strcmp(gp->input[k]->name, weft_graph_node_name(c->g, weft_graph_value_node(c->g, c->in[k]))));
        for (int k = 0; k < c->n_out && k < (int)gp->n_output; k++) {
            char nm[160];
            wt_onnx_name(c->g, c->out[k], nm, sizeof nm);
            CHECK(!strcmp(gp->output[k]->name, nm));
            CHECK(gp->output[k]->type->tensor_type->elem_type == weft_onnx_dtype_to(weft_graph_value_dtype(c->g, c->out[k])));
            CHECK(gp->output[k]->type->tensor_type->shape->n_dim == (size_t)weft_graph_value_ndim(c->g, c->out[k]));
        }
        onnx__model_proto__free_unpacked(mp, NULL);
        write_data(path, c->n_in, c->feed, c->n_out, want);
    }
    weft_graph *g2 = st ? NULL : weft_onnx_load(path, 0, NULL);
    CHECK(st || g2);
    if (g2) {
        weft_value in2[MAX_IO], out2[MAX_IO];
        bool found = true;
        for (int k = 0; k < c->n_in; k++) {
            in2[k] = weft_graph_find_value(g2, weft_graph_node_name(c->g, weft_graph_value_node(c->g, c->in[k])));
            found &= in2[k].id >= 0;
        }
        for (int k = 0; k < c->n_out; k++) {
            char nm[160];
            wt_onnx_name(c->g, c->out[k], nm, sizeof nm);
            out2[k] = weft_graph_find_value(g2, nm);
            found &= out2[k].id >= 0;
        }
        CHECK(found);
        CHECK(found && weft_graph_run(g2, c->n_in, in2, c->feed, c->n_out, out2, back, 0, NULL) == WEFT_OK);
        for (int k = 0; k < c->n_out && back[0]; k++) {
            char w[160];
            snprintf(w, sizeof w, "%s (output %d)", what, k);
            wt_check_same(w, back[k], want[k], tol);
        }
    } else if (!st) {
        fprintf(stderr, "%s: load: %s\n", what, weft_last_error());
    }
    for (int k = 0; k < c->n_out; k++) {
        weft_tensor_free(want[k]);
        if (got) got[k] = back[k];
        else weft_tensor_free(back[k]);
    }
    weft_graph_free(g2);
}

static double *host(const weft_tensor *t) { // t's values as doubles (free)
    int64_t n = weft_tensor_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    weft_tensor_to_f64(t, v, n);
    return v;
}
static double gelu_ref(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }

static const int64_t S234[3] = {2, 3, 4}, S34[2] = {3, 4}, S4[1] = {4};

// ---------------------------------------------------------------- per op, f32

static void test_elementwise(void) {
    { // every unary op on one input: one file, 17 outputs
        rt c = {.g = weft_graph_new()};
        weft_value x = ph(&c, "x", 3, S234);
        const char *un[] = {"neg", "abs", "exp", "tanh", "sigmoid", "relu", "sign", "erf", "sin", "cos", "copy",
                            "gelu", "gelu_tanh", "silu"};
        for (int i = 0; i < 14; i++) out(&c, OP1(&c, un[i], x));
        double eps = 0.1;
        weft_value a = OP1(&c, "abs", x), p = op(&c, "pos", "add_scalar", 1, &a, NULL, 0, &eps, 1);
        out(&c, OP1(&c, "log", p)), out(&c, OP1(&c, "sqrt", p)), out(&c, OP1(&c, "rsqrt", p));
        weft_tensor *got[MAX_IO] = {0};
        round_trip("unary", &c, 1e-5, got);
        if (got[11]) { // gelu's composed Erf form against the closed form, within 1e-6
            double *xv = host(c.feed[0]), ref[24];
            for (int i = 0; i < 24; i++) ref[i] = gelu_ref(xv[i]);
            wt_check_values("gelu (closed form)", got[11], ref, 24, 1e-6);
            free(xv);
        }
        for (int k = 0; k < c.n_out; k++) weft_tensor_free(got[k]);
        rt_free(&c);
    }
    { // binary ops with broadcasting (3,4) with (4); pow on a positive base
        rt c = {.g = weft_graph_new()};
        weft_value a = ph(&c, "a", 2, S34), b = ph(&c, "b", 1, S4);
        const char *bin[] = {"add", "sub", "mul", "div", "maximum", "minimum"};
        for (int i = 0; i < 6; i++) out(&c, OP2(&c, bin[i], a, b));
        double h = 0.5;
        weft_value aa = OP1(&c, "abs", a), pa = op(&c, "base", "add_scalar", 1, &aa, NULL, 0, &h, 1);
        out(&c, OP2(&c, "pow", pa, b));
        round_trip("binary", &c, 1e-5, NULL);
        rt_free(&c);
    }
    // comparisons of integers, and of bool masks (ONNX orders no bool: weft's false < true through uint8)
    const weft_dtype cdt[2] = {WEFT_I64, WEFT_BOOL};
    for (int t = 0; t < 2; t++) {
        rt c = {.g = weft_graph_new()};
        weft_value a = ph_int(&c, "a", 2, S34, t ? 2 : 3, cdt[t]), b = ph_int(&c, "b", 2, S34, t ? 2 : 3, cdt[t]);
        const char *cmp[] = {"eq", "lt", "le", "gt", "ge"};
        for (int i = 0; i < 5; i++) out(&c, OP2(&c, cmp[i], a, b));
        round_trip(t ? "compare bool" : "compare i64", &c, 0, NULL);
        rt_free(&c);
    }
    { // where on a bool and on a u8 condition (nonzero: true; ONNX's is bool), scalar ops, casts
        rt c = {.g = weft_graph_new()};
        weft_value cb = ph_int(&c, "cb", 2, S34, 2, WEFT_BOOL), cu = ph_int(&c, "cu", 2, S34, 3, WEFT_U8);
        weft_value x = ph(&c, "x", 2, S34), y = ph(&c, "y", 1, S4);
        out(&c, op(&c, "w1", "where", 3, (weft_value[]){cb, x, y}, NULL, 0, NULL, 0));
        weft_value w = op(&c, "w2", "where", 3, (weft_value[]){cu, x, y}, NULL, 0, NULL, 0);
        out(&c, w);
        double two = 2.5, half = 0.5, sq = 2;
        weft_value s = op(&c, "s1", "add_scalar", 1, &w, NULL, 0, &two, 1);
        s = op(&c, "s2", "mul_scalar", 1, &s, NULL, 0, &half, 1);
        s = op(&c, "s3", "pow_scalar", 1, &s, NULL, 0, &sq, 1);
        out(&c, s);
        int64_t i64 = WEFT_I64, tb = WEFT_BOOL;
        weft_value m = op(&c, "m3", "mul_scalar", 1, &x, NULL, 0, (double[]){3}, 1);
        weft_value ci = op(&c, "ci", "cast", 1, &m, &i64, 1, NULL, 0); // toward zero, in both
        out(&c, ci), out(&c, op(&c, "cb2", "cast", 1, &ci, &tb, 1, NULL, 0)); // nonzero is true
        out(&c, op(&c, "cb3", "cast", 1, &cb, &i64, 1, NULL, 0));
        round_trip("where/scalars/cast", &c, 1e-5, NULL);
        rt_free(&c);
    }
}

static void test_linalg(void) {
    { // matmul with each transpose flag: (2,3,4)@(2,4,5), flagged operands stored transposed
        rt c = {.g = weft_graph_new()};
        weft_value a = ph(&c, "a", 3, (int64_t[]){2, 3, 4}), at = ph(&c, "at", 3, (int64_t[]){2, 4, 3});
        weft_value b = ph(&c, "b", 3, (int64_t[]){2, 4, 5}), bt = ph(&c, "bt", 3, (int64_t[]){2, 5, 4});
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int64_t fl[2] = {ta, tb};
                out(&c, op(&c, NULL, "matmul", 2, (weft_value[]){ta ? at : a, tb ? bt : b}, fl, 2, NULL, 0));
            }
        round_trip("matmul", &c, 1e-5, NULL);
        rt_free(&c);
    }
    { // linear as Gemm (2-D) and MatMul + Add (3-D), without bias; linear_gelu both forms with h as "lg:1";
      // gelu_linear on linear_gelu's pair
        rt c = {.g = weft_graph_new()};
        weft_value x2 = ph(&c, "x2", 2, S34), x3 = ph(&c, "x3", 3, S234);
        weft_value w = var(&c, "w", 2, (int64_t[]){5, 4}), b = var(&c, "b", 1, (int64_t[]){5});
        weft_value w2 = var(&c, "w2", 2, (int64_t[]){3, 5}), b2 = var(&c, "b2", 1, (int64_t[]){3});
        out(&c, op(&c, "gemm", "linear", 3, (weft_value[]){x2, w, b}, NULL, 0, NULL, 0));
        out(&c, op(&c, "mm", "linear", 3, (weft_value[]){x3, w, b}, NULL, 0, NULL, 0));
        out(&c, op(&c, "nob", "linear", 2, (weft_value[]){x3, w}, NULL, 0, NULL, 0));
        weft_value lg[WEFT_GRAPH_MAX_OUT], lt[WEFT_GRAPH_MAX_OUT];
        int64_t exact = 0, tanh_form = 1;
        CHECK(weft_graph_op_named(c.g, "lg", "linear_gelu", 3, (weft_value[]){x3, w, b}, &exact, 1, NULL, 0, lg) == 0);
        CHECK(weft_graph_op_named(c.g, "lt", "linear_gelu", 3, (weft_value[]){x2, w, b}, &tanh_form, 1, NULL, 0, lt) == 0);
        out(&c, lg[0]), out(&c, lg[1]), out(&c, lt[0]);
        out(&c, op(&c, "gl", "gelu_linear", 4, (weft_value[]){lg[1], lg[0], w2, b2}, &exact, 1, NULL, 0));
        weft_tensor *got[MAX_IO] = {0};
        round_trip("linear", &c, 1e-5, got);
        if (got[3]) { // linear_gelu's y = gelu(x W^T + b) against the closed form
            double *xv = host(c.feed[1]), *wv = host(weft_graph_variable_tensor(c.g, w)),
                   *bv = host(weft_graph_variable_tensor(c.g, b)), ref[30];
            for (int r = 0; r < 6; r++)
                for (int n = 0; n < 5; n++) {
                    double h = bv[n];
                    for (int k = 0; k < 4; k++) h += xv[r * 4 + k] * wv[n * 4 + k];
                    ref[r * 5 + n] = gelu_ref(h);
                }
            wt_check_values("linear_gelu (closed form)", got[3], ref, 30, 1e-5);
            free(xv), free(wv), free(bv);
        }
        for (int k = 0; k < c.n_out; k++) weft_tensor_free(got[k]);
        rt_free(&c);
    }
}

static void test_shapes(void) {
    { // permute, copy, view, slice with a step, expand, concat; a concat of 10 inputs
        rt c = {.g = weft_graph_new()};
        weft_value x = ph(&c, "x", 3, S234);
        int64_t perm[3] = {2, 0, 1}, vw[3] = {2, 4, 6}, sl[4] = {1, 1, 6, 2}, ex[4] = {3, 2, 4, 3}, d1 = 1;
        weft_value p = op(&c, "p", "permute", 1, &x, perm, 3, NULL, 0);
        weft_value cp = OP1(&c, "copy", p);
        weft_value v = op(&c, "v", "view", 1, &cp, vw, 3, NULL, 0);   // (4,6)
        weft_value s = op(&c, "s", "slice", 1, &v, sl, 4, NULL, 0);   // (4,3): columns 1, 3, 5
        weft_value e = op(&c, "e", "expand", 1, &s, ex, 4, NULL, 0);  // (2,4,3)
        out(&c, op(&c, "cat", "concat", 2, (weft_value[]){e, e}, &d1, 1, NULL, 0));
        weft_value ten[10];
        for (int k = 0; k < 10; k++) ten[k] = x;
        out(&c, op(&c, "cat10", "concat", 10, ten, &d1, 1, NULL, 0)); // (2,30,4)
        round_trip("shapes", &c, 0, NULL);
        rt_free(&c);
    }
    { // embedding, index_select along dim 2, gather
        rt c = {.g = weft_graph_new()};
        weft_value w = var(&c, "table", 2, (int64_t[]){10, 4}), idx = ph_int(&c, "idx", 2, (int64_t[]){2, 3}, 10, WEFT_I64);
        weft_value e = OP2(&c, "embedding", w, idx); // (2,3,4)
        weft_value j = ph_int(&c, "j", 1, (int64_t[]){3}, 4, WEFT_I64);
        int64_t d = 2;
        weft_value s = op(&c, "sel", "index_select", 2, (weft_value[]){e, j}, &d, 1, NULL, 0);
        weft_value gi = ph_int(&c, "gi", 3, (int64_t[]){2, 3, 2}, 3, WEFT_I64);
        out(&c, e), out(&c, op(&c, "ga", "gather", 2, (weft_value[]){s, gi}, &d, 1, NULL, 0));
        round_trip("embedding/index_select/gather", &c, 0, NULL);
        rt_free(&c);
    }
}

static void test_reductions(void) {
    rt c = {.g = weft_graph_new()};
    weft_value x = ph(&c, "x", 3, S234);
    const char *red[] = {"sum", "mean", "max", "min", "logsumexp", "argmax"};
    for (int i = 0; i < 6; i++)
        for (int keep = 0; keep < 2; keep++) {
            int64_t at[3] = {i == 5 ? 2 : 5, keep, 0}; // dims 0 and 2 (argmax: dim 1)
            out(&c, op(&c, NULL, red[i], 1, &x, at, 3, NULL, 0));
        }
    // a mask of no axes reduces nothing in weft (ONNX's empty axes would reduce every axis)
    const char *none[] = {"sum", "mean", "max"};
    for (int i = 0; i < 3; i++) out(&c, op(&c, NULL, none[i], 1, &x, (int64_t[]){0, 0, 0}, 3, NULL, 0));
    int64_t d = 1;
    out(&c, op(&c, "sm", "softmax", 1, &x, &d, 1, NULL, 0)), out(&c, op(&c, "lsm", "log_softmax", 1, &x, &d, 1, NULL, 0));
    weft_tensor *got[MAX_IO] = {0};
    round_trip("reductions", &c, 1e-5, got);
    if (got[12]) { // the empty mask's sum is x itself
        CHECK(weft_tensor_ndim(got[12]) == 3);
        wt_check_same("sum over no axes", got[12], c.feed[0], 0);
    }
    for (int k = 0; k < c.n_out; k++) weft_tensor_free(got[k]);
    rt_free(&c);
}

// Causal attention of (B,H,T,D) q, k, v in doubles: o_i = sum_{j<=i} softmax_j(scale q_i.k_j) v_j.
static void attention_ref(const double *q, const double *k, const double *v, int BH, int T, int D, double scale,
                          double *o) {
    for (int b = 0; b < BH; b++)
        for (int i = 0; i < T; i++) {
            double s[16], m = -INFINITY, z = 0;
            for (int j = 0; j <= i; j++) {
                s[j] = 0;
                for (int d = 0; d < D; d++) s[j] += q[(b * T + i) * D + d] * k[(b * T + j) * D + d];
                s[j] *= scale;
                m = fmax(m, s[j]);
            }
            for (int j = 0; j <= i; j++) z += s[j] = exp(s[j] - m);
            for (int d = 0; d < D; d++) {
                double acc = 0;
                for (int j = 0; j <= i; j++) acc += s[j] / z * v[(b * T + j) * D + d];
                o[(b * T + i) * D + d] = acc;
            }
        }
}

static void test_nn(void) {
    { // layer_norm with weight and bias, with neither, with a weight only; add_layer_norm's s and y
        rt c = {.g = weft_graph_new()};
        weft_value x = ph(&c, "x", 3, S234), r = ph(&c, "r", 3, S234), w = var(&c, "w", 1, S4), b = var(&c, "b", 1, S4);
        double eps = 1e-5;
        out(&c, op(&c, "ln", "layer_norm", 3, (weft_value[]){x, w, b}, (int64_t[]){1, 1, 1, 0}, 4, &eps, 1));
        out(&c, op(&c, "ln0", "layer_norm", 1, &x, (int64_t[]){2, 0, 0, 0}, 4, &eps, 1)); // over the last two dims
        out(&c, op(&c, "lnw", "layer_norm", 2, (weft_value[]){x, w}, (int64_t[]){1, 1, 0, 0}, 4, &eps, 1));
        weft_value al[WEFT_GRAPH_MAX_OUT];
        CHECK(weft_graph_op_named(c.g, "aln", "add_layer_norm", 4, (weft_value[]){x, r, w, b}, (int64_t[]){1, 1, 1, 0},
                                  4, &eps, 1, al) == WEFT_OK);
        out(&c, al[0]), out(&c, al[1]);
        weft_tensor *got[MAX_IO] = {0};
        round_trip("layer_norm", &c, 1e-5, got);
        if (got[0]) { // y = (x - mean) / sqrt(var + eps) w + b over the last dim
            double *xv = host(c.feed[0]), *wv = host(weft_graph_variable_tensor(c.g, w)),
                   *bv = host(weft_graph_variable_tensor(c.g, b)), ref[24];
            for (int row = 0; row < 6; row++) {
                double mu = 0, var = 0;
                for (int k = 0; k < 4; k++) mu += xv[row * 4 + k] / 4;
                for (int k = 0; k < 4; k++) var += (xv[row * 4 + k] - mu) * (xv[row * 4 + k] - mu) / 4;
                for (int k = 0; k < 4; k++) ref[row * 4 + k] = (xv[row * 4 + k] - mu) / sqrt(var + eps) * wv[k] + bv[k];
            }
            wt_check_values("layer_norm (closed form)", got[0], ref, 24, 1e-5);
            free(xv), free(wv), free(bv);
        }
        for (int k = 0; k < c.n_out; k++) weft_tensor_free(got[k]);
        rt_free(&c);
    }
    { // conv2d (stride 2, pad 1, dilation 2, groups 2) + bias, batch_norm (eval), max and average pools
        rt c = {.g = weft_graph_new()};
        weft_value x = ph(&c, "x", 4, (int64_t[]){2, 4, 9, 9});
        int64_t s6[1] = {6};
        weft_value w = var(&c, "w", 4, (int64_t[]){6, 2, 3, 3}), b = var(&c, "b", 1, s6);
        int64_t ca[8] = {2, 2, 1, 1, 2, 2, 2, 0};
        weft_value cv = op(&c, "conv", "conv2d", 3, (weft_value[]){x, w, b}, ca, 8, NULL, 0); // (2,6,4,4)
        weft_tensor *rv = weft_tensor_rand(1, s6, WEFT_F32, g_rng), *rv1 = weft_add_scalar(rv, 0.5);
        weft_value g = var(&c, "g", 1, s6), be = var(&c, "be", 1, s6), rm = var(&c, "rm", 1, s6),
                   rvv = weft_graph_variable(c.g, "rv", rv1);
        weft_tensor_free(rv), weft_tensor_free(rv1);
        weft_value bn = op(&c, "bn", "batch_norm", 5, (weft_value[]){cv, g, be, rm, rvv}, (int64_t[]){1, 1, 1, 1, 0},
                           5, (double[]){0.1, 1e-5}, 2);
        weft_value mp = op(&c, "mp", "max_pool2d", 1, &bn, (int64_t[]){3, 3, 1, 1, 1, 1, 0}, 7, NULL, 0); // (2,6,4,4)
        out(&c, mp);
        out(&c, op(&c, "ap", "avg_pool2d", 1, &mp, (int64_t[]){2, 2, 2, 2, 1, 1, 0}, 7, NULL, 0)); // (2,6,3,3)
        out(&c, op(&c, "api", "avg_pool2d", 1, &mp, (int64_t[]){2, 2, 2, 2, 1, 1, 1}, 7, NULL, 0));
        round_trip("conv/batch_norm/pools", &c, 1e-5, NULL);
        rt_free(&c);
    }
    { // causal attention (B,H,T,D) with both output layouts, and packed (B,T,3C)
        rt c = {.g = weft_graph_new()};
        int64_t s4[4] = {2, 2, 5, 3};
        weft_value q = ph(&c, "q", 4, s4), k = ph(&c, "k", 4, s4), v = ph(&c, "v", 4, s4);
        weft_value qkv = ph(&c, "qkv", 3, (int64_t[]){2, 5, 12});
        double scale = 0.4;
        for (int hl = 0; hl < 2; hl++) {
            int64_t a = hl;
            out(&c, op(&c, hl ? "att_hl" : "att", "causal_attention", 3, (weft_value[]){q, k, v}, &a, 1, &scale, 1));
        }
        out(&c, op(&c, "attqkv", "causal_attention_qkv", 1, &qkv, (int64_t[]){2}, 1, &scale, 1));
        weft_tensor *got[MAX_IO] = {0};
        round_trip("causal_attention", &c, 1e-5, got);
        if (got[0]) {
            double *qv = host(c.feed[0]), *kv = host(c.feed[1]), *vv = host(c.feed[2]), ref[60];
            attention_ref(qv, kv, vv, 4, 5, 3, scale, ref);
            wt_check_values("causal_attention (closed form)", got[0], ref, 60, 1e-5);
            free(qv), free(kv), free(vv);
        }
        for (int k2 = 0; k2 < c.n_out; k2++) weft_tensor_free(got[k2]);
        rt_free(&c);
    }
}

// Under autocast a bf16 x reaches softmax and the norms, which read it in f32 (and give f32, or a bf16 y for
// i[3]): the file needs Casts there, or ONNX's type inference rejects it.
static void test_half(void) {
    rt c = {.g = weft_graph_new()};
    weft_value x = ph(&c, "x", 3, S234), r = ph(&c, "r", 3, S234), w = var(&c, "w", 1, S4), b = var(&c, "b", 1, S4);
    int64_t bf = WEFT_BF16, d = 2;
    double eps = 1e-5;
    weft_value xh = op(&c, "xh", "cast", 1, &x, &bf, 1, NULL, 0), rh = op(&c, "rh", "cast", 1, &r, &bf, 1, NULL, 0);
    out(&c, op(&c, "sm", "softmax", 1, &xh, &d, 1, NULL, 0));
    out(&c, op(&c, "lsm", "log_softmax", 1, &xh, &d, 1, NULL, 0));
    out(&c, op(&c, "ln", "layer_norm", 3, (weft_value[]){xh, w, b}, (int64_t[]){1, 1, 1, 0}, 4, &eps, 1));
    out(&c, op(&c, "lnh", "layer_norm", 1, &xh, (int64_t[]){1, 0, 0, 1 + WEFT_BF16}, 4, &eps, 1)); // y in bf16
    weft_value al[WEFT_GRAPH_MAX_OUT];
    CHECK(weft_graph_op_named(c.g, "aln", "add_layer_norm", 4, (weft_value[]){x, rh, w, b},
                              (int64_t[]){1, 1, 1, 1 + WEFT_BF16}, 4, &eps, 1, al) == WEFT_OK);
    out(&c, al[0]), out(&c, al[1]);
    const char *ew[4] = {"gelu", "gelu_tanh", "silu", "rsqrt"};
    weft_value ax = OP1(&c, "abs", xh);
    for (int i = 0; i < 4; i++) out(&c, OP1(&c, ew[i], i == 3 ? ax : xh));
    out(&c, op(&c, "ms", "mul_scalar", 1, &xh, NULL, 0, (double[]){0.1}, 1));
    out(&c, op(&c, "as", "add_scalar", 1, &xh, NULL, 0, (double[]){0.1}, 1));
    round_trip("bf16 under autocast", &c, 0, NULL);
    rt_free(&c);
}

// ---------------------------------------------------------------- traced modules against their eager forward

// m's eval forward on x traced into a graph (parameters as named variables), exported, loaded back and run:
// within tol of the forward the trace itself ran eagerly.
static void traced(const char *what, weft_module *m, weft_tensor *x, double tol) {
    weft_module_set_training(m, false);
    weft_graph *g = weft_graph_new();
    bool prev = weft_grad_set_enabled(false);
    weft_status st = weft_graph_trace_begin(g);
    weft_value xv = weft_graph_trace_input(g, x, "x"), yv = WEFT_VALUE_NONE;
    for (int i = 0; i < weft_module_param_count(m); i++) {
        char name[256];
        weft_tensor *p = weft_module_param_at(m, i, name, sizeof name);
        weft_graph_trace_variable(g, p, name);
    }
    weft_tensor *y = weft_module_forward(m, x);
    if (y) yv = weft_graph_trace_output(g, y);
    weft_status st2 = weft_graph_trace_end(g);
    weft_grad_set_enabled(prev);
    CHECK(!st && !st2 && y);
    const char *path = new_file();
    CHECK(path && weft_onnx_save(g, 1, &xv, 1, &yv, path) == WEFT_OK);
    weft_graph *g2 = NULL;
    if (y && path) {
        Onnx__ModelProto *mp = check_structure(what, path);
        if (mp) onnx__model_proto__free_unpacked(mp, NULL);
        write_data(path, 1, &x, 1, &y);
        g2 = weft_onnx_load(path, 0, NULL);
    }
    CHECK(g2 != NULL);
    if (g2) {
        char nm[160];
        wt_onnx_name(g, yv, nm, sizeof nm);
        weft_value x2 = weft_graph_find_value(g2, "x"), y2 = weft_graph_find_value(g2, nm);
        weft_tensor *got = NULL;
        CHECK(weft_graph_run(g2, 1, &x2, &x, 1, &y2, &got, 0, NULL) == WEFT_OK);
        if (got) wt_check_same(what, got, y, tol);
        weft_tensor_free(got);
    } else {
        fprintf(stderr, "%s: %s\n", what, weft_last_error());
    }
    weft_graph_free(g2);
    weft_graph_free(g);
    weft_tensor_free(y);
}

static void test_traced_mlp(void) {
    weft_module *m = weft_nn_sequential();
    const weft_activation acts[6] = {WEFT_ACT_GELU, WEFT_ACT_TANH, WEFT_ACT_SIGMOID, WEFT_ACT_SILU, WEFT_ACT_GELU_TANH,
                                     WEFT_ACT_RELU};
    weft_nn_sequential_append(m, weft_nn_linear(6, 16, true, g_rng));
    for (int i = 0; i < 6; i++) {
        weft_nn_sequential_append(m, weft_nn_activation(acts[i]));
        weft_nn_sequential_append(m, weft_nn_linear(16, 16, i != 2, g_rng));
    }
    weft_nn_sequential_append(m, weft_nn_dropout(0.3, g_rng)); // eval: no op
    weft_nn_sequential_append(m, weft_nn_layer_norm(16, 1e-5));
    weft_nn_sequential_append(m, weft_nn_linear(16, 3, true, g_rng));
    weft_tensor *x2 = weft_tensor_randn(2, (int64_t[]){4, 6}, WEFT_F32, g_rng);
    weft_tensor *x3 = weft_tensor_randn(3, (int64_t[]){2, 3, 6}, WEFT_F32, g_rng);
    traced("MLP (4,6)", m, x2, 1e-5);    // linear as Gemm
    traced("MLP (2,3,6)", m, x3, 1e-5);  // as MatMul + Add
    weft_tensor_free(x2), weft_tensor_free(x3);
    weft_module_free(m);
}

static void test_traced_cnn(void) {
    weft_module *m = weft_nn_sequential();
    weft_nn_sequential_append(m, weft_nn_conv2d(3, 4, 3, 3, &(weft_conv2d_params){.padding = {1, 1}}, true, g_rng));
    weft_nn_sequential_append(m, weft_nn_batch_norm(4, 0.1, 1e-5));
    weft_nn_sequential_append(m, weft_nn_activation(WEFT_ACT_RELU));
    weft_nn_sequential_append(m, weft_nn_max_pool2d(&(weft_pool2d_params){.kernel = {2, 2}}));  // (2,4,4,4)
    weft_nn_sequential_append(m, weft_nn_conv2d(4, 6, 3, 3, &(weft_conv2d_params){.stride = {2, 2}, .padding = {1, 1},
                                                                                    .groups = 2}, true, g_rng)); // (2,6,2,2)
    weft_nn_sequential_append(m, weft_nn_avg_pool2d(&(weft_pool2d_params){.kernel = {2, 2}, .stride = {1, 1},
                                                                         .padding = {1, 1}})); // (2,6,3,3)
    weft_nn_sequential_append(m, weft_nn_flatten());
    weft_nn_sequential_append(m, weft_nn_linear(54, 5, true, g_rng));
    // running statistics and affine parameters away from their 0/1 start, so the file's must be used
    const char *bn[4] = {"1.running_mean", "1.running_var", "1.weight", "1.bias"};
    for (int k = 0; k < 4; k++) {
        weft_tensor *t = weft_module_find(m, bn[k]);
        CHECK(t != NULL);
        for (int c = 0; t && c < 4; c++) ((float *)weft_tensor_data(t))[c] = 0.3f + 0.2f * (float)(c + k);
    }
    weft_tensor *x = weft_tensor_randn(4, (int64_t[]){2, 3, 8, 8}, WEFT_F32, g_rng);
    traced("CNN", m, x, 1e-5);
    weft_tensor_free(x);
    weft_module_free(m);
}

static void test_traced_gpt(void) {
    for (int form = 0; form < 2; form++) { // two blocks (add_layer_norm between them), exact and tanh GELU
        weft_module *m = weft_nn_sequential();
        weft_nn_sequential_append(m, weft_nn_embedding(11, 8, g_rng));
        weft_nn_sequential_append(m, weft_nn_transformer_act(8, 2, 2, form ? WEFT_ACT_GELU_TANH : WEFT_ACT_GELU, g_rng));
        weft_nn_sequential_append(m, weft_nn_layer_norm(8, 1e-5));
        weft_nn_sequential_append(m, weft_nn_linear(8, 11, false, g_rng));
        weft_tensor *idx = weft_tensor_randint(2, (int64_t[]){2, 5}, 0, 11, WEFT_I64, g_rng);
        traced(form ? "GPT (tanh GELU)" : "GPT", m, idx, 1e-5);
        weft_tensor_free(idx);
        weft_module_free(m);
    }
}

// ---------------------------------------------------------------- what the file holds

// Initializers are the variables' and constants' current tensors, only those the outputs need; the inputs carry
// their element types and sizes.
static void test_initializers(void) {
    rt c = {.g = weft_graph_new()};
    weft_value x = ph(&c, "x", 2, S34), i = ph_int(&c, "i", 1, S4, 5, WEFT_I64);
    weft_value w = var(&c, "w", 2, S34);
    var(&c, "spare", 2, S34); // unused: not in the file
    weft_tensor *ct = weft_tensor_full(1, S4, WEFT_I64, 7);
    weft_value k = weft_graph_constant(c.g, "k", ct);
    weft_tensor_free(ct);
    float *wd = weft_tensor_data(weft_graph_variable_tensor(c.g, w));
    for (int j = 0; j < 12; j++) wd[j] = (float)j - 5.5f; // changed after creation: the file has these
    out(&c, OP2(&c, "add", x, w)), out(&c, OP2(&c, "add", i, k));
    const char *path = new_file();
    CHECK(weft_onnx_save(c.g, 2, c.in, 2, c.out, path) == WEFT_OK);
    Onnx__ModelProto *mp = check_structure("initializers", path);
    if (mp) {
        const Onnx__GraphProto *gp = mp->graph;
        CHECK(gp->n_initializer == 2);
        for (size_t j = 0; j < gp->n_initializer; j++) {
            const Onnx__TensorProto *t = gp->initializer[j];
            CHECK(strcmp(t->name, "spare") != 0);
            if (!strcmp(t->name, "w")) {
                CHECK(t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && t->n_dims == 2 && t->dims[0] == 3 &&
                      t->dims[1] == 4 && t->raw_data.len == 48);
                CHECK(t->raw_data.len == 48 && !memcmp(t->raw_data.data, wd, 48));
            } else {
                CHECK(!strcmp(t->name, "k") && t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 && t->raw_data.len == 32);
                CHECK(t->raw_data.len == 32 && ((const int64_t *)t->raw_data.data)[3] == 7);
            }
        }
        CHECK(gp->n_input == 2 && !strcmp(gp->input[0]->name, "x") && !strcmp(gp->input[1]->name, "i"));
        const Onnx__TypeProto__Tensor *t0 = gp->input[0]->type->tensor_type, *t1 = gp->input[1]->type->tensor_type;
        CHECK(t0->elem_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && t0->shape->n_dim == 2 &&
              t0->shape->dim[0]->dim_value == 3 && t0->shape->dim[1]->dim_value == 4);
        CHECK(t1->elem_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64 && t1->shape->n_dim == 1 &&
              t1->shape->dim[0]->dim_value == 4);
        onnx__model_proto__free_unpacked(mp, NULL);
    }
    rt_free(&c);
}

// A variable on an accelerator (the real cuda:0, else the tests' mock device) is written from a host copy.
static void test_device_variable(void) {
    weft_device dev;
    bool mock = true;
    if (!wt_accelerator(&dev, &mock)) {
        printf("note: no accelerator could be set up: device variable not tested\n");
        return;
    }
    weft_tensor *wh = weft_tensor_randn(2, S34, WEFT_F32, g_rng), *wd = weft_tensor_to(wh, dev);
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", 2, S34, WEFT_F32);
    CHECK(weft_graph_trace_begin(g) == WEFT_OK); // a variable sharing wd's device storage, as a trace makes them
    weft_value w = weft_graph_trace_variable(g, wd, "w");
    CHECK(weft_graph_trace_end(g) == WEFT_OK);
    CHECK(w.id >= 0 && weft_tensor_device(weft_graph_variable_tensor(g, w)).type == dev.type);
    weft_value y = weft_graph_op1(g, "add", 2, (weft_value[]){x, w}, NULL, 0, NULL, 0);
    const char *path = new_file();
    CHECK(weft_onnx_save(g, 1, &x, 1, &y, path) == WEFT_OK);
    Onnx__ModelProto *mp = check_structure("device variable", path);
    if (mp) {
        CHECK(mp->graph->n_initializer == 1 && mp->graph->initializer[0]->raw_data.len == 48 &&
              !memcmp(mp->graph->initializer[0]->raw_data.data, weft_tensor_data(wh), 48));
        onnx__model_proto__free_unpacked(mp, NULL);
    }
    weft_graph *g2 = weft_onnx_load(path, 0, NULL);
    CHECK(g2 != NULL);
    if (g2) { // on the CPU: x + w from the host copy
        weft_tensor *xt = weft_tensor_randn(2, S34, WEFT_F32, g_rng), *got = NULL, *want = weft_add(xt, wh);
        weft_value x2 = weft_graph_find_value(g2, "x"), y2 = weft_graph_find_value(g2, weft_graph_node_name(g, weft_graph_value_node(g, y)));
        CHECK(weft_graph_run(g2, 1, &x2, &xt, 1, &y2, &got, 0, NULL) == WEFT_OK);
        wt_check_same("device variable", got, want, 0);
        weft_tensor_free(xt), weft_tensor_free(got), weft_tensor_free(want);
    }
    weft_graph_free(g2);
    weft_graph_free(g);
    weft_tensor_free(wd), weft_tensor_free(wh);
    if (mock) printf("note: device variable tested on the mock accelerator\n");
}

// ---------------------------------------------------------------- refusals

static int dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

// save(outputs) fails with want, its message has each of the strings, and path is left as it was.
static void refused(const char *what, weft_graph *g, int n_in, const weft_value *in, weft_value o, const char *path,
                    weft_status want, const char *s1, const char *s2) {
    struct stat before, after;
    bool existed = stat(path, &before) == 0;
    int entries = dir_entries(g_dir);
    weft_status st = weft_onnx_save(g, n_in, in, 1, &o, path);
    CHECK(st == want);
    CHECK(!s1 || wt_error_has(s1));
    CHECK(!s2 || wt_error_has(s2));
    if (st != want || (s1 && !wt_error_has(s1)) || (s2 && !wt_error_has(s2)))
        fprintf(stderr, "%s: status %d, message: %s\n", what, (int)st, weft_last_error());
    bool now = stat(path, &after) == 0;
    CHECK(now == existed);
    if (existed && now) CHECK(after.st_size == before.st_size && after.st_mtime == before.st_mtime);
    CHECK(dir_entries(g_dir) == entries); // no temporary file left behind
}

static void test_refusals(void) {
    char path[128], msg[256];
    snprintf(path, sizeof path, "%s/refused.onnx", g_dir);
    rt c = {.g = weft_graph_new()};
    weft_graph *g = c.g;
    weft_value x = ph(&c, "x", 2, S34), y = ph(&c, "y", 2, S34);
    weft_value good = op(&c, "good", "add", 2, (weft_value[]){x, y}, NULL, 0, NULL, 0);
    CHECK(weft_onnx_save(g, 2, c.in, 1, &good, path) == WEFT_OK); // a file is there: a failed save keeps it
    snprintf(msg, sizeof msg, "onnx_save: %s: node 'rb0' (op relu_backward)", path);
    refused("relu_backward", g, 2, c.in, op(&c, "rb0", "relu_backward", 2, (weft_value[]){x, y}, NULL, 0, NULL, 0),
            path, WEFT_ERR_UNSUPPORTED, msg, "no ONNX form");
    // backward ops (a symbolic gradient)
    weft_value rl = OP1(&c, "relu", x), s = op(&c, "s", "sum", 1, &rl, (int64_t[]){3, 0, 0}, 3, NULL, 0), gx;
    CHECK(weft_graph_gradients(g, s, 1, &x, &gx) == WEFT_OK);
    refused("gradient", g, 2, c.in, gx, path, WEFT_ERR_UNSUPPORTED, "_backward)", "no ONNX form");
    // an optimiser update, a loss, training-mode dropout
    weft_tensor *lr = weft_tensor_scalar(0.1, WEFT_F32);
    weft_value w = var(&c, "w", 2, S34), lrv = weft_graph_constant(g, "lr", lr);
    weft_tensor_free(lr);
    refused("sgd", g, 2, c.in, op(&c, "upd", "sgd_update", 3, (weft_value[]){w, y, lrv}, NULL, 0, (double[]){0}, 1), path,
            WEFT_ERR_UNSUPPORTED, "node 'upd' (op sgd_update)", NULL);
    refused("dropout", g, 2, c.in, op(&c, "dr", "dropout", 1, &x, (int64_t[]){5, 0}, 2, (double[]){0.5}, 1), path,
            WEFT_ERR_UNSUPPORTED, "node 'dr' (op dropout)", "eval mode");
    // nodes that are not ops: an assign, a cond, a fused group
    weft_value v = var(&c, "v", 2, S34), as = weft_graph_assign(g, "set_v", v, x);
    refused("assign", g, 2, c.in, OP2(&c, "add", as, y), path, WEFT_ERR_UNSUPPORTED, "node 'set_v' (assign)", NULL);
    weft_graph *tg = weft_graph_new(), *eg = weft_graph_new();
    weft_value tp = weft_graph_placeholder(tg, "p", 2, S34, WEFT_F32), ep = weft_graph_placeholder(eg, "p", 2, S34, WEFT_F32);
    weft_value to = weft_graph_op1(tg, "neg", 1, &tp, NULL, 0, NULL, 0), eo = weft_graph_op1(eg, "abs", 1, &ep, NULL, 0, NULL, 0);
    weft_value pred = ph_int(&c, "pred", 0, NULL, 2, WEFT_BOOL), co;
    CHECK(weft_graph_cond(g, "branch", pred, 1, &x, tg, &to, eg, &eo, 1, &co) == WEFT_OK);
    weft_value pin[3] = {x, y, pred};
    refused("cond", g, 3, pin, co, path, WEFT_ERR_UNSUPPORTED, "node 'branch' (cond)", NULL);
    { // a fused group: export the graph from before weft_graph_optimize's fusion
        weft_graph *f = weft_graph_new();
        weft_value fx = weft_graph_placeholder(f, "x", 2, S34, WEFT_F32);
        weft_value a = weft_graph_op1(f, "mul_scalar", 1, &fx, NULL, 0, (double[]){2}, 1);
        a = weft_graph_op1(f, "add_scalar", 1, &a, NULL, 0, (double[]){1}, 1);
        a = weft_graph_op1(f, "tanh", 1, &a, NULL, 0, NULL, 0);
        weft_graph_passes ps = weft_graph_passes_all();
        ps.fusion = true;
        weft_graph_pass_stats stats;
        weft_value ko;
        weft_graph *opt = weft_graph_optimize(f, 1, &a, &ko, &ps, &stats);
        CHECK(opt && stats.fused_groups == 1);
        weft_value ox = opt ? weft_graph_find_value(opt, "x") : WEFT_VALUE_NONE;
        if (opt) refused("fused", opt, 1, &ox, ko, path, WEFT_ERR_UNSUPPORTED, "(fused)", "before weft_graph_optimize");
        weft_graph_free(opt);
        weft_graph_free(f);
    }
    // the interface: a needed placeholder not given, an input that is no placeholder, an input given twice
    refused("missing input", g, 1, c.in, good, path, WEFT_ERR_ARG, "placeholder 'y' is needed", NULL);
    weft_value notph[2] = {x, good};
    refused("not a placeholder", g, 2, notph, good, path, WEFT_ERR_ARG, "input 1 is not a placeholder", NULL);
    weft_value twice[3] = {x, y, x};
    refused("input twice", g, 3, twice, good, path, WEFT_ERR_ARG, "input 2 repeats input 0", NULL);
    // a node whose own name is another's intermediate ("e/0": the first of gelu e's)
    weft_value clash = op(&c, "e/0", "neg", 1, &x, NULL, 0, NULL, 0), e = op(&c, "e", "gelu", 1, &x, NULL, 0, NULL, 0);
    refused("name clash", g, 2, c.in, OP2(&c, "add", clash, e), path, WEFT_ERR_ARG, "'e/0'", "rename the node");
    // I/O: a missing directory, and a directory where the file would go (the rename fails): nothing is left
    refused("missing dir", g, 2, c.in, good, "/nonexistent/dir/m.onnx", WEFT_ERR_IO, "/nonexistent/dir/m.onnx", NULL);
    char sub[128];
    snprintf(sub, sizeof sub, "%s/adir", g_dir);
    CHECK(mkdir(sub, 0755) == 0);
    refused("onto a directory", g, 2, c.in, good, sub, WEFT_ERR_IO, sub, NULL);
    rmdir(sub);
    unlink(path);
    rt_free(&c);
}

// onnx.checker over every file written (and ONNX Runtime where installed), in one python process.
static void test_checker(void) {
    static const char *cands[] = {NULL, "/usr/bin/python3", "python3"};
    cands[0] = getenv("WEFT_ONNX_PYTHON");
    const char *py = NULL;
    for (int i = 0; i < 3 && !py; i++) {
        char cmd[512];
        if (!cands[i] || !cands[i][0]) continue;
        snprintf(cmd, sizeof cmd, "%s -c 'import onnx' >/dev/null 2>&1", cands[i]);
        if (system(cmd) == 0) py = cands[i];
    }
    if (!py) {
        printf("note: no python with onnx: the %d files were not checked by onnx.checker\n", g_n_files);
        return;
    }
    char script[1024];
    const char *f = __FILE__, *slash = strrchr(f, '/');
    if (slash) snprintf(script, sizeof script, "%.*s/onnx_check.py", (int)(slash - f), f);
    else snprintf(script, sizeof script, "tests/graph/onnx_check.py");
    size_t cap = 2048 + (size_t)g_n_files * sizeof g_files[0];
    char *cmd = malloc(cap);
    int n = snprintf(cmd, cap, "%s %s", py, script);
    for (int i = 0; i < g_n_files; i++) n += snprintf(cmd + n, cap - (size_t)n, " %s", g_files[i]);
    CHECK(g_n_files > 0 && system(cmd) == 0);
    free(cmd);
}
#endif

int main(void) {
#ifndef WEFT_HAVE_ONNX
    printf("built without ONNX support: skipped\n");
    return 77;
#else
    if (!weft_onnx_available()) {
        printf("built without ONNX support: skipped\n");
        return 77;
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/weft_onnx_export_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    g_rng = weft_generator_create(11);
    RUN(test_elementwise);
    RUN(test_linalg);
    RUN(test_shapes);
    RUN(test_reductions);
    RUN(test_nn);
    RUN(test_half);
    RUN(test_traced_mlp);
    RUN(test_traced_cnn);
    RUN(test_traced_gpt);
    RUN(test_initializers);
    RUN(test_device_variable);
    RUN(test_refusals);
    RUN(test_checker);
    weft_generator_free(g_rng);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (getenv("WEFT_KEEP_ONNX")) printf("files kept in %s\n", g_dir);
    else if (system(cmd) != 0) printf("note: could not remove %s\n", g_dir);
    return wt_summary();
#endif
}
