// ONNX export: the part of a weft graph between placeholders and outputs as an
// ONNX model (weft_onnx_save), opset 17, IR version 8.
//
// Every value the outputs need is walked back to placeholders, variables and
// constants. Variables and constants become initializers (their tensors as
// they are now), placeholders graph inputs, and each op one or more ONNX nodes
// (the table `emitters` below; an op without one is an error naming the node).
// ONNX value names are the weft node names ("name:i" for output i > 0), and an
// op that takes several ONNX nodes names its intermediates "name/k"; the
// constants an emitter needs (Reshape's shape, a scalar) are initializers
// named the same way. Where weft reads a value in another type than ONNX's op
// would (a u8 condition, bool masks compared, bf16 / f16 values that weft's
// softmax, norms and elementwise ops compute in f32 under autocast), Casts
// say so, so that ONNX's type inference accepts the file and it rounds where
// weft does. What the file computes is checked by reading it back
// (onnx_import.c, itself checked against ONNX's operator tests), and the
// files by onnx.checker and ONNX Runtime (tests/graph/test_onnx_export.c).
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onnx.h"

#ifndef WEFT_HAVE_ONNX
weft_status weft_onnx_save(const weft_graph *g, int n_in, const weft_value *inputs, int n_out,
                           const weft_value *outputs, const char *path) {
    (void)g, (void)n_in, (void)inputs, (void)n_out, (void)outputs;
    return weft_error(WEFT_ERR_UNSUPPORTED, "onnx_save: %s: weft was built without ONNX support (protobuf-c)",
                      path ? path : "(null)");
}
#else
#include "../io/io_impl.h"

// A growable array of pointers (nodes, initializers, attributes, strings).
typedef struct vec {
    void **p;
    size_t n, cap;
} vec;

static bool push(vec *v, void *x) {
    if (!x) return false;
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 16;
        void **p = realloc(v->p, sizeof *p * cap);
        if (!p) return false;
        v->p = p, v->cap = cap;
    }
    v->p[v->n++] = x;
    return true;
}

typedef struct ex {
    const weft_graph *g;
    const char *path;
    vec nodes, inits, inputs, outputs; // NodeProto, TensorProto, ValueInfoProto, ValueInfoProto
    vec strs;                           // intermediate names (nodes hold copies)
    char **vname; // ONNX name of each weft value id (NULL: not named yet)
    bool oom;
    char why[512]; // an emitter's refusal
} ex;

static char *dupf(ex *e, const char *fmt, ...) WEFT_PRINTF(2, 3);
static char *dupf(ex *e, const char *fmt, ...) {
    char buf[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char *s = strdup(buf);
    if (!s) e->oom = true;
    return s;
}

// The ONNX name of weft value v: its node's name, ":i" for output i > 0.
static const char *vname(ex *e, int32_t v) {
    if (!e->vname[v]) {
        const weft_gvalue *gv = &e->g->values[v];
        const char *n = e->g->nodes[gv->node].name;
        e->vname[v] = gv->index ? dupf(e, "%s:%d", n, gv->index) : dupf(e, "%s", n);
    }
    return e->vname[v] ? e->vname[v] : "";
}

// ---------------------------------------------------------------- building nodes

// A node op_type(in...) -> out..., appended; the names are copied. NULL on OOM (e->oom set).
static Onnx__NodeProto *add_node(ex *e, const char *type, int n_in, const char *const *in, int n_out,
                                 const char *const *out) {
    Onnx__NodeProto *nd = calloc(1, sizeof *nd);
    if (!nd || !push(&e->nodes, nd)) { // in the list from here on: freed with it
        free(nd);
        e->oom = true;
        return NULL;
    }
    onnx__node_proto__init(nd);
    nd->op_type = strdup(type);
    nd->input = calloc((size_t)n_in + 1, sizeof(char *));
    nd->output = calloc((size_t)n_out + 1, sizeof(char *));
    if (!nd->op_type || !nd->input || !nd->output) {
        e->oom = true;
        return NULL;
    }
    nd->n_input = (size_t)n_in, nd->n_output = (size_t)n_out;
    for (int k = 0; k < n_in; k++) e->oom |= !(nd->input[k] = strdup(in[k]));
    for (int k = 0; k < n_out; k++) e->oom |= !(nd->output[k] = strdup(out[k]));
    return e->oom ? NULL : nd;
}

static Onnx__AttributeProto *add_attr(ex *e, Onnx__NodeProto *nd, const char *name,
                                      Onnx__AttributeProto__AttributeType type) {
    if (!nd) return NULL;
    Onnx__AttributeProto *a = calloc(1, sizeof *a);
    Onnx__AttributeProto **arr = realloc(nd->attribute, sizeof *arr * (nd->n_attribute + 1));
    if (arr) nd->attribute = arr;
    if (a) onnx__attribute_proto__init(a);
    if (!a || !arr || !(a->name = strdup(name))) {
        free(a);
        e->oom = true;
        return NULL;
    }
    a->has_type = 1, a->type = type;
    nd->attribute[nd->n_attribute++] = a;
    return a;
}
static void attr_int(ex *e, Onnx__NodeProto *nd, const char *name, int64_t v) {
    Onnx__AttributeProto *a = add_attr(e, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (a) a->has_i = 1, a->i = v;
}
static void attr_float(ex *e, Onnx__NodeProto *nd, const char *name, double v) {
    Onnx__AttributeProto *a = add_attr(e, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (a) a->has_f = 1, a->f = (float)v;
}
static void attr_ints(ex *e, Onnx__NodeProto *nd, const char *name, int n, const int64_t *v) {
    Onnx__AttributeProto *a = add_attr(e, nd, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    if (!a) return;
    a->ints = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!a->ints) {
        e->oom = true;
        return;
    }
    a->n_ints = (size_t)n;
    if (n) memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
}

// An initializer named name holding t (taken); returns name (the initializer's own copy).
static const char *add_init(ex *e, const char *name, weft_tensor *t) {
    Onnx__TensorProto *tp = calloc(1, sizeof *tp);
    if (!tp || !t) {
        free(tp);
        weft_tensor_free(t);
        e->oom = true;
        return "";
    }
    onnx__tensor_proto__init(tp);
    weft_status st = weft_onnx_tensor_to(t, name, tp);
    weft_tensor_free(t);
    if (st || !push(&e->inits, tp)) {
        if (!st) weft_onnx_tensor_proto_clear(tp);
        free(tp);
        e->oom = true;
        return "";
    }
    return tp->name;
}

// A constant: a 1-d int64 initializer (n values), or a 0-d one of dtype dt holding x.
static const char *ints_const(ex *e, const char *name, int n, const int64_t *v) {
    int64_t len = n;
    return add_init(e, name, weft_tensor_from_data(v, 1, &len, WEFT_I64));
}
static const char *scalar_const(ex *e, const char *name, weft_dtype dt, double x) {
    weft_tensor *t = weft_tensor_full(0, NULL, dt, x);
    return add_init(e, name, t);
}

// ---------------------------------------------------------------- emitters

// One weft OP node's ONNX form. Its input names in[], output names out[] (out[i] is NULL for an output
// nothing exported reads). Returns false with e->why set when the op (or these attrs) has no ONNX form.
typedef struct em {
    ex *e;
    const weft_gnode *n;
    const char **in; // [n_in] (concat takes any number)
    const char *out[WEFT_GRAPH_MAX_OUT];
    int k; // intermediates "name/k"
    char tbuf[600];
} em;

static const char *tmp(em *m) {
    snprintf(m->tbuf, sizeof m->tbuf, "%s/%d", m->n->name, m->k++);
    char *s = dupf(m->e, "%s", m->tbuf);
    if (s && !push(&m->e->strs, s)) {
        free(s);
        m->e->oom = true;
        return "";
    }
    return s ? s : "";
}

// in[0] dtype and sizes of the node's input k / output k.
static const weft_gvalue *in_v(const em *m, int k) { return &m->e->g->values[m->n->in[k]]; }
static const weft_gvalue *out_v(const em *m, int k) { return &m->e->g->values[m->n->out0 + k]; }

static const char *node1(em *m, const char *type, const char *o, int n_in, const char *a, const char *b,
                         const char *c) {
    const char *ins[3] = {a, b, c};
    add_node(m->e, type, n_in, ins, 1, &o);
    return o;
}
static bool refuse(em *m, const char *fmt, const char *detail) {
    snprintf(m->e->why, sizeof m->e->why, fmt, detail);
    return false;
}
// Only output 0 may be read (the others have no ONNX form here).
static bool only_out0(em *m) {
    for (int k = 1; k < m->n->n_out; k++)
        if (m->out[k]) return refuse(m, "its output %s has no ONNX form here", m->out[k]);
    return true;
}

static const char *onnx_unary(const char *op) {
    static const char *map[][2] = {{"neg", "Neg"},   {"abs", "Abs"},       {"exp", "Exp"},   {"log", "Log"},
                                   {"sqrt", "Sqrt"}, {"sin", "Sin"},       {"cos", "Cos"},   {"tanh", "Tanh"},
                                   {"relu", "Relu"}, {"sigmoid", "Sigmoid"}, {"sign", "Sign"}, {"erf", "Erf"},
                                   {"copy", "Identity"}, {"floor", "Floor"}, {"ceil", "Ceil"}, {"round", "Round"},
                                   {"asin", "Asin"}, {"acos", "Acos"}, {"atan", "Atan"}};
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
        if (!strcmp(map[k][0], op)) return map[k][1];
    return NULL;
}
static const char *onnx_binary(const char *op) {
    static const char *map[][2] = {{"add", "Add"},     {"sub", "Sub"},     {"mul", "Mul"}, {"div", "Div"},
                                   {"pow", "Pow"},     {"maximum", "Max"}, {"minimum", "Min"}, {"eq", "Equal"},
                                   {"lt", "Less"},     {"le", "LessOrEqual"}, {"gt", "Greater"},
                                   {"ge", "GreaterOrEqual"}};
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
        if (!strcmp(map[k][0], op)) return map[k][1];
    return NULL;
}

static bool e_unary(em *m) {
    node1(m, onnx_unary(m->n->op->name), m->out[0], 1, m->in[0], NULL, NULL);
    return true;
}
// x cast to ONNX type `to` into o, or into a new intermediate.
static const char *cast_into(em *m, const char *x, int to, const char *o) {
    attr_int(m->e, add_node(m->e, "Cast", 1, &x, 1, &o), "to", to);
    return o;
}
static const char *cast_to(em *m, const char *x, int to) { return cast_into(m, x, to, tmp(m)); }

// Under autocast weft computes an elementwise op on bf16 / f16 in f32 and rounds the result once
// (def_elementwise.c); an op written as several ONNX nodes does the same between a Cast to f32 (widen: *x and
// *dt become the f32 ones, and the result goes to a new intermediate) and a Cast back (narrow), rather than
// rounding after every node.
typedef struct wide {
    bool half;
    weft_dtype dt; // the value's own dtype
    const char *o; // where the result goes
} wide;
static wide widen(em *m, const char **x, weft_dtype *dt, const char **o) {
    wide w = {weft_dtype_is_half(*dt), *dt, *o};
    if (w.half) *x = cast_to(m, *x, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT), *dt = WEFT_F32, *o = tmp(m);
    return w;
}
static void narrow(em *m, wide w, const char *r) {
    if (w.half) cast_into(m, r, weft_onnx_dtype_to(w.dt), w.o);
}
static bool e_binary(em *m) {
    const char *name = m->n->op->name, *a = m->in[0], *b = m->in[1];
    // weft orders bool masks (false < true); ONNX's Less/Greater(OrEqual) take no bool: compare them as uint8
    bool order = !strcmp(name, "lt") || !strcmp(name, "le") || !strcmp(name, "gt") || !strcmp(name, "ge");
    if (order && in_v(m, 0)->dtype == WEFT_BOOL) {
        a = cast_to(m, a, ONNX__TENSOR_PROTO__DATA_TYPE__UINT8);
        b = cast_to(m, b, ONNX__TENSOR_PROTO__DATA_TYPE__UINT8);
    }
    if (!strcmp(name, "ne")) { // ONNX has no NotEqual: Not(Equal), and Xor where both are bool
        bool bools = in_v(m, 0)->dtype == WEFT_BOOL && in_v(m, 1)->dtype == WEFT_BOOL;
        if (bools) node1(m, "Xor", m->out[0], 2, a, b, NULL);
        else node1(m, "Not", m->out[0], 1, node1(m, "Equal", tmp(m), 2, a, b, NULL), NULL, NULL);
        return true;
    }
    node1(m, onnx_binary(name), m->out[0], 2, a, b, NULL);
    return true;
}
// fmod: Mod with fmod = 1 (C's fmod, any type); remainder: Mod with fmod = 0 (the divisor's sign), which ONNX
// allows on integers only.
static bool e_mod(em *m) {
    bool rem = !strcmp(m->n->op->name, "remainder");
    weft_dtype dt = (weft_dtype)in_v(m, 0)->dtype;
    if (rem && dt != WEFT_I32 && dt != WEFT_I64 && dt != WEFT_U8)
        return refuse(m, "%s", "remainder of floats has no ONNX form here (Mod with fmod = 0 takes integers)");
    attr_int(m->e, add_node(m->e, "Mod", 2, (const char *[]){m->in[0], m->in[1]}, 1, &m->out[0]), "fmod", !rem);
    return true;
}
// topk (the indices): TopK with K an initializer, sorted; its Values output a temporary.
static bool e_topk(em *m) {
    const weft_attrs *at = &m->n->attrs;
    const char *ins[2] = {m->in[0], ints_const(m->e, tmp(m), 1, &at->i[1])}, *outs[2] = {tmp(m), m->out[0]};
    Onnx__NodeProto *nd = add_node(m->e, "TopK", 2, ins, 2, outs);
    attr_int(m->e, nd, "axis", at->i[0]);
    attr_int(m->e, nd, "largest", at->i[2] != 0);
    attr_int(m->e, nd, "sorted", 1);
    return true;
}
static bool e_where(em *m) { // weft's condition may be u8 (nonzero: true); ONNX's is bool
    const char *c = in_v(m, 0)->dtype == WEFT_U8 ? cast_to(m, m->in[0], ONNX__TENSOR_PROTO__DATA_TYPE__BOOL) : m->in[0];
    node1(m, "Where", m->out[0], 3, c, m->in[1], m->in[2]);
    return true;
}
static bool e_scalar(em *m) { // add_scalar, mul_scalar, pow_scalar: x op s, s of x's dtype
    const char *type = !strcmp(m->n->op->name, "add_scalar") ? "Add" : !strcmp(m->n->op->name, "mul_scalar") ? "Mul" : "Pow";
    const char *x = m->in[0], *o = m->out[0];
    weft_dtype dt = (weft_dtype)in_v(m, 0)->dtype;
    wide w = widen(m, &x, &dt, &o);
    narrow(m, w, node1(m, type, o, 2, x, scalar_const(m->e, tmp(m), dt, m->n->attrs.f[0]), NULL));
    return true;
}
static bool e_rsqrt(em *m) {
    const char *x = m->in[0], *o = m->out[0];
    weft_dtype dt = (weft_dtype)in_v(m, 0)->dtype;
    wide w = widen(m, &x, &dt, &o);
    narrow(m, w, node1(m, "Reciprocal", o, 1, node1(m, "Sqrt", tmp(m), 1, x, NULL, NULL), NULL, NULL));
    return true;
}
static bool e_silu(em *m) {
    const char *x = m->in[0], *o = m->out[0];
    weft_dtype dt = (weft_dtype)in_v(m, 0)->dtype;
    wide w = widen(m, &x, &dt, &o);
    narrow(m, w, node1(m, "Mul", o, 2, x, node1(m, "Sigmoid", tmp(m), 1, x, NULL, NULL), NULL));
    return true;
}

// GELU of x into o: exact 0.5 x (1 + erf(x / sqrt 2)) (torch.onnx's opset-17 form), or the tanh form.
static void gelu_into(em *m, const char *x, const char *o, weft_dtype dt, bool tanh_form) {
    wide w = widen(m, &x, &dt, &o);
    const char *t;
    if (!tanh_form) {
        t = node1(m, "Mul", tmp(m), 2, x, scalar_const(m->e, tmp(m), dt, M_SQRT1_2), NULL);
        t = node1(m, "Erf", tmp(m), 1, t, NULL, NULL);
    } else { // tanh(sqrt(2/pi) (x + 0.044715 x^3))
        t = node1(m, "Mul", tmp(m), 2, x, x, NULL);
        t = node1(m, "Mul", tmp(m), 2, t, x, NULL);
        t = node1(m, "Mul", tmp(m), 2, t, scalar_const(m->e, tmp(m), dt, 0.044715), NULL);
        t = node1(m, "Add", tmp(m), 2, x, t, NULL);
        t = node1(m, "Mul", tmp(m), 2, t, scalar_const(m->e, tmp(m), dt, 0.7978845608028654), NULL);
        t = node1(m, "Tanh", tmp(m), 1, t, NULL, NULL);
    }
    t = node1(m, "Add", tmp(m), 2, t, scalar_const(m->e, tmp(m), dt, 1.0), NULL);
    t = node1(m, "Mul", tmp(m), 2, x, t, NULL);
    narrow(m, w, node1(m, "Mul", o, 2, t, scalar_const(m->e, tmp(m), dt, 0.5), NULL));
}
static bool e_gelu(em *m) {
    gelu_into(m, m->in[0], m->out[0], (weft_dtype)in_v(m, 0)->dtype, !strcmp(m->n->op->name, "gelu_tanh"));
    return true;
}

static bool e_cast(em *m) {
    int to = weft_onnx_dtype_to((weft_dtype)m->n->attrs.i[0]);
    if (!to) return refuse(m, "cast to %s has no ONNX type", weft_dtype_name((weft_dtype)m->n->attrs.i[0]));
    attr_int(m->e, add_node(m->e, "Cast", 1, m->in, 1, m->out), "to", to);
    return true;
}

// a @ b with weft's transpose flags on the last two dims.
static const char *transposed(em *m, const char *x, int nd) {
    int64_t perm[WEFT_MAX_DIMS];
    for (int d = 0; d < nd; d++) perm[d] = d;
    perm[nd - 1] = nd - 2, perm[nd - 2] = nd - 1;
    const char *o = tmp(m);
    attr_ints(m->e, add_node(m->e, "Transpose", 1, &x, 1, &o), "perm", nd, perm);
    return o;
}
static bool e_matmul(em *m) {
    const char *a = m->in[0], *b = m->in[1];
    if (m->n->attrs.i[0]) a = transposed(m, a, in_v(m, 0)->ndim);
    if (m->n->attrs.i[1]) b = transposed(m, b, in_v(m, 1)->ndim);
    node1(m, "MatMul", m->out[0], 2, a, b, NULL);
    return true;
}

// x W^T + b into o: Gemm for a 2-D x, else MatMul with W^T and Add.
static void linear_into(em *m, const char *x, int x_nd, const char *w, const char *b, const char *o) {
    if (x_nd == 2) {
        const char *ins[3] = {x, w, b};
        attr_int(m->e, add_node(m->e, "Gemm", b ? 3 : 2, ins, 1, &o), "transB", 1);
        return;
    }
    const char *y = node1(m, "MatMul", b ? tmp(m) : o, 2, x, transposed(m, w, 2), NULL);
    if (b) node1(m, "Add", o, 2, y, b, NULL);
}
static bool e_linear(em *m) { // linear(x, w[, b]); linear_gelu -> (y = gelu(h), h); gelu_linear(h, a, w[, b])
    const char *name = m->n->op->name;
    bool gl = !strcmp(name, "gelu_linear");
    int x = gl ? 1 : 0, nb = gl ? 4 : 3;
    const char *b = m->n->n_in >= nb ? m->in[nb - 1] : NULL;
    if (strcmp(name, "linear_gelu")) {
        linear_into(m, m->in[x], in_v(m, x)->ndim, m->in[x + 1], b, m->out[0]);
        return true;
    }
    const char *h = m->out[1] ? m->out[1] : tmp(m);
    linear_into(m, m->in[0], in_v(m, 0)->ndim, m->in[1], b, h);
    if (m->out[0]) gelu_into(m, h, m->out[0], (weft_dtype)out_v(m, 0)->dtype, m->n->attrs.i[0] == 1);
    return true;
}

// x reshaped to sizes into o; a 0 among them is a size 0 (allowzero: ONNX's default copies the input's dim).
static const char *reshape_to(em *m, const char *x, int nd, const int64_t *sizes, const char *o) {
    bool zero = false;
    for (int d = 0; d < nd; d++) zero |= sizes[d] == 0;
    Onnx__NodeProto *r = add_node(m->e, "Reshape", 2, (const char *[]){x, ints_const(m->e, tmp(m), nd, sizes)}, 1, &o);
    if (zero) attr_int(m->e, r, "allowzero", 1);
    return o;
}
static bool e_view(em *m) { // view: Reshape to the output's sizes
    const weft_gvalue *o = out_v(m, 0);
    reshape_to(m, m->in[0], o->ndim, o->sizes, m->out[0]);
    return true;
}
static bool e_expand(em *m) {
    const weft_gvalue *o = out_v(m, 0);
    node1(m, "Expand", m->out[0], 2, m->in[0], ints_const(m->e, tmp(m), o->ndim, o->sizes), NULL);
    return true;
}
static bool e_permute(em *m) {
    attr_ints(m->e, add_node(m->e, "Transpose", 1, m->in, 1, m->out), "perm", in_v(m, 0)->ndim, m->n->attrs.i);
    return true;
}
static bool e_slice(em *m) {
    const int64_t *a = m->n->attrs.i;
    const char *ins[5] = {m->in[0], ints_const(m->e, tmp(m), 1, &a[1]), ints_const(m->e, tmp(m), 1, &a[2]),
                          ints_const(m->e, tmp(m), 1, &a[0]), ints_const(m->e, tmp(m), 1, &a[3])};
    add_node(m->e, "Slice", 5, ins, 1, m->out);
    return true;
}
static bool e_concat(em *m) {
    attr_int(m->e, add_node(m->e, "Concat", m->n->n_in, m->in, 1, m->out), "axis", m->n->attrs.i[0]);
    return true;
}
static bool e_gather(em *m) { // embedding(weight, idx); index_select(t, idx, dim); gather(t, idx, dim)
    const char *name = m->n->op->name;
    if (!strcmp(name, "embedding")) {
        node1(m, "Gather", m->out[0], 2, m->in[0], m->in[1], NULL);
        return true;
    }
    Onnx__NodeProto *nd = add_node(m->e, strcmp(name, "gather") ? "Gather" : "GatherElements", 2, m->in, 1, m->out);
    attr_int(m->e, nd, "axis", m->n->attrs.i[0]);
    return true;
}
static bool e_softmax(em *m) { // a bf16 / f16 x (autocast) is read in f32 and y is f32: a Cast first
    if (!only_out0(m)) return false;
    const char *x = weft_dtype_is_half(in_v(m, 0)->dtype) ? cast_to(m, m->in[0], ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
                                                           : m->in[0];
    attr_int(m->e, add_node(m->e, strcmp(m->n->op->name, "softmax") ? "LogSoftmax" : "Softmax", 1, &x, 1, m->out),
             "axis", m->n->attrs.i[0]);
    return true;
}
static bool e_reduce(em *m) { // sum mean max min logsumexp: attrs i[0] axes mask, i[1] keepdim; argmax: one axis
    const char *name = m->n->op->name;
    int nd = in_v(m, 0)->ndim, n = 0;
    int64_t axes[WEFT_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        if (m->n->attrs.i[0] >> d & 1) axes[n++] = d;
    if (!n && nd) { // weft's empty mask reduces nothing (each output is one element); ONNX's empty axes, every axis
        node1(m, "Identity", m->out[0], 1, m->in[0], NULL, NULL);
        return true;
    }
    Onnx__NodeProto *r;
    if (!strcmp(name, "argmax")) {
        r = add_node(m->e, "ArgMax", 1, m->in, 1, m->out);
        attr_int(m->e, r, "axis", n ? axes[0] : 0);
    } else if (!strcmp(name, "sum")) {
        const char *ins[2] = {m->in[0], ints_const(m->e, tmp(m), n, axes)};
        r = add_node(m->e, "ReduceSum", 2, ins, 1, m->out);
    } else {
        const char *type = !strcmp(name, "mean") ? "ReduceMean" : !strcmp(name, "max") ? "ReduceMax"
                         : !strcmp(name, "min") ? "ReduceMin" : "ReduceLogSumExp";
        r = add_node(m->e, type, 1, m->in, 1, m->out);
        attr_ints(m->e, r, "axes", n, axes);
    }
    attr_int(m->e, r, "keepdims", m->n->attrs.i[1] != 0);
    return true;
}

// A constant of the normalised shape (layer_norm's missing weight or bias; batch_norm's): ones or zeros.
static const char *filled(em *m, weft_dtype dt, int nd, const int64_t *s, double v) {
    return add_init(m->e, tmp(m), weft_tensor_full(nd, s, dt, v));
}
// Under autocast (def_norm.c) a bf16 / f16 x is normalised in f32 with f32 weight and bias, add_layer_norm's
// residual may be half beside an f32 x, and attr i[3] = 1 + dtype writes y in half: Casts around the node.
static bool e_layer_norm(em *m) { // layer_norm(x[, w][, b]); add_layer_norm(x, r[, w][, b]) -> (s, y, ...)
    bool add = !strcmp(m->n->op->name, "add_layer_norm");
    int o = add ? 1 : 0, x = add ? 1 : 0;
    for (int k = o + 1; k < m->n->n_out; k++)
        if (m->out[k]) return refuse(m, "its statistics output %s has no ONNX form here", m->out[k]);
    const weft_attrs *at = &m->n->attrs;
    const weft_gvalue *xv = in_v(m, 0);
    const int f32 = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    bool half = weft_dtype_is_half(xv->dtype);
    const char *xin = half ? cast_to(m, m->in[0], f32) : m->in[0];
    if (add) {
        const char *r = in_v(m, 1)->dtype != xv->dtype ? cast_to(m, m->in[1], weft_onnx_dtype_to((weft_dtype)xv->dtype))
                                                       : m->in[1];
        xin = node1(m, "Add", m->out[0] ? m->out[0] : tmp(m), 2, m->in[0], r, NULL);
    }
    if (!m->out[o]) return true;
    int nn = (int)at->i[0];
    weft_dtype ft = half ? WEFT_F32 : (weft_dtype)xv->dtype; // the statistics', weight's and bias' dtype
    const char *w = at->i[1] ? m->in[x + 1] : filled(m, ft, nn, xv->sizes + xv->ndim - nn, 1.0);
    const char *b = at->i[2] ? m->in[x + 1 + (at->i[1] != 0)] : NULL;
    const char *ins[3] = {xin, w, b}, *y = at->i[3] ? tmp(m) : m->out[o];
    Onnx__NodeProto *nd = add_node(m->e, "LayerNormalization", b ? 3 : 2, ins, 1, &y);
    attr_int(m->e, nd, "axis", -nn);
    attr_float(m->e, nd, "epsilon", at->f[0]);
    if (at->i[3])
        attr_int(m->e, add_node(m->e, "Cast", 1, &y, 1, &m->out[o]), "to", weft_onnx_dtype_to((weft_dtype)(at->i[3] - 1)));
    return true;
}
static bool e_batch_norm(em *m) { // (x[, w][, b][, running_mean][, running_var]), eval only
    const weft_attrs *at = &m->n->attrs;
    if (at->i[4]) return refuse(m, "%s", "training mode has no ONNX form (export the model in eval mode)");
    if (!only_out0(m)) return false;
    const weft_gvalue *xv = in_v(m, 0);
    int64_t c = xv->sizes[1];
    weft_dtype dt = (weft_dtype)xv->dtype;
    const char *ins[5];
    int k = 1;
    ins[0] = m->in[0];
    for (int j = 0; j < 4; j++) ins[1 + j] = at->i[j] ? m->in[k++] : filled(m, dt, 1, &c, j == 0 || j == 3 ? 1.0 : 0.0);
    Onnx__NodeProto *nd = add_node(m->e, "BatchNormalization", 5, ins, 1, m->out);
    attr_float(m->e, nd, "epsilon", at->f[1]);
    attr_float(m->e, nd, "momentum", 1.0 - at->f[0]); // ONNX's momentum weighs the old statistics
    return true;
}
static bool e_conv(em *m) {
    const int64_t *a = m->n->attrs.i;
    if (a[7]) return refuse(m, "%s", "the NHWC layout (a graph pass's) has no ONNX form: export before weft_graph_optimize");
    Onnx__NodeProto *nd = add_node(m->e, "Conv", m->n->n_in, m->in, 1, m->out);
    int64_t pads[4] = {a[2], a[3], a[2], a[3]};
    attr_ints(m->e, nd, "strides", 2, a);
    attr_ints(m->e, nd, "pads", 4, pads);
    attr_ints(m->e, nd, "dilations", 2, a + 4);
    attr_int(m->e, nd, "group", a[6]);
    return true;
}
// conv2d_backward_input (conv_transpose2d): ConvTranspose with weft's symmetric crop, and output_padding the
// rows and columns its output size (attrs i[8..9]) has past the cropped full output.
static bool e_conv_t(em *m) {
    const int64_t *a = m->n->attrs.i, *xs = in_v(m, 0)->sizes, *ws = in_v(m, 1)->sizes;
    int64_t pads[4] = {a[2], a[3], a[2], a[3]}, opad[2];
    for (int k = 0; k < 2; k++) opad[k] = a[8 + k] - ((xs[2 + k] - 1) * a[k] - 2 * a[2 + k] + a[4 + k] * (ws[2 + k] - 1) + 1);
    Onnx__NodeProto *nd = add_node(m->e, "ConvTranspose", 2, m->in, 1, m->out);
    attr_ints(m->e, nd, "strides", 2, a);
    attr_ints(m->e, nd, "pads", 4, pads);
    attr_ints(m->e, nd, "dilations", 2, a + 4);
    attr_ints(m->e, nd, "output_padding", 2, opad);
    attr_int(m->e, nd, "group", a[6]);
    return true;
}
static bool e_pool(em *m) {
    if (!only_out0(m)) return false;
    const int64_t *a = m->n->attrs.i;
    bool mx = !strcmp(m->n->op->name, "max_pool2d");
    Onnx__NodeProto *nd = add_node(m->e, mx ? "MaxPool" : "AveragePool", 1, m->in, 1, m->out);
    int64_t pads[4] = {a[4], a[5], a[4], a[5]};
    attr_ints(m->e, nd, "kernel_shape", 2, a);
    attr_ints(m->e, nd, "strides", 2, a + 2);
    attr_ints(m->e, nd, "pads", 4, pads);
    if (!mx) attr_int(m->e, nd, "count_include_pad", a[6] != 0);
    return true;
}

// Causal attention written out: softmax(scale q k^T + mask) v over (B,H,T,D) q, k, v (the causal mask an
// initializer: 0 on and below the diagonal, -inf above).
static const char *attention(em *m, const char *q, const char *k, const char *v, int64_t T, weft_dtype dt,
                             double scale, const char *o) {
    int64_t s[2] = {T, T};
    weft_tensor *mask = weft_tensor_zeros(2, s, dt);
    if (mask && (dt == WEFT_F32 || dt == WEFT_F64))
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = i + 1; j < T; j++) {
                if (dt == WEFT_F32) ((float *)weft_tensor_data(mask))[i * T + j] = -INFINITY;
                else ((double *)weft_tensor_data(mask))[i * T + j] = -INFINITY;
            }
    const char *mk = add_init(m->e, tmp(m), mask);
    const char *sc = node1(m, "MatMul", tmp(m), 2, q, transposed(m, k, 4), NULL);
    sc = node1(m, "Mul", tmp(m), 2, sc, scalar_const(m->e, tmp(m), dt, scale), NULL);
    sc = node1(m, "Add", tmp(m), 2, sc, mk, NULL);
    const char *p = tmp(m);
    attr_int(m->e, add_node(m->e, "Softmax", 1, &sc, 1, &p), "axis", -1);
    return node1(m, "MatMul", o, 2, p, v, NULL);
}
static const char *perm4(em *m, const char *x, int64_t a, int64_t b, int64_t c, int64_t d, const char *o) {
    int64_t perm[4] = {a, b, c, d};
    attr_ints(m->e, add_node(m->e, "Transpose", 1, &x, 1, &o), "perm", 4, perm);
    return o;
}
static bool e_attention(em *m) {
    if (!only_out0(m)) return false;
    const weft_gvalue *q = in_v(m, 0);
    weft_dtype dt = (weft_dtype)q->dtype;
    if (dt != WEFT_F32 && dt != WEFT_F64) return refuse(m, "%s", "half-precision attention has no ONNX form here");
    bool heads_last = m->n->attrs.i[0] != 0;
    const char *o = attention(m, m->in[0], m->in[1], m->in[2], q->sizes[2], dt, m->n->attrs.f[0],
                              heads_last ? tmp(m) : m->out[0]);
    if (heads_last) perm4(m, o, 0, 2, 1, 3, m->out[0]);
    return true;
}
static bool e_attention_qkv(em *m) { // (B,T,3C) -> (B,T,C), i[0] = H
    if (!only_out0(m)) return false;
    const weft_gvalue *x = in_v(m, 0);
    weft_dtype dt = (weft_dtype)x->dtype;
    if (dt != WEFT_F32 && dt != WEFT_F64) return refuse(m, "%s", "half-precision attention has no ONNX form here");
    int64_t B = x->sizes[0], T = x->sizes[1], C = x->sizes[2] / 3, H = m->n->attrs.i[0], D = C / H;
    int64_t s5[5] = {B, T, 3, H, D};
    const char *r = reshape_to(m, m->in[0], 5, s5, tmp(m));
    const char *qkv[3];
    for (int j = 0; j < 3; j++) { // (B,T,H,D) block j, then (B,H,T,D)
        int64_t st = j, en = j + 1, ax = 2;
        const char *ins[4] = {r, ints_const(m->e, tmp(m), 1, &st), ints_const(m->e, tmp(m), 1, &en),
                              ints_const(m->e, tmp(m), 1, &ax)};
        const char *sl = tmp(m);
        add_node(m->e, "Slice", 4, ins, 1, &sl);
        int64_t s4[4] = {B, T, H, D};
        const char *v4 = reshape_to(m, sl, 4, s4, tmp(m));
        qkv[j] = perm4(m, v4, 0, 2, 1, 3, tmp(m));
    }
    const char *o = attention(m, qkv[0], qkv[1], qkv[2], T, dt, m->n->attrs.f[0], tmp(m));
    const char *ot = perm4(m, o, 0, 2, 1, 3, tmp(m));
    int64_t s3[3] = {B, T, C};
    reshape_to(m, ot, 3, s3, m->out[0]);
    return true;
}
// lstm_seq(xg (B,T,4H), w_hh (4H,H)) -> (B,T,H): an ONNX LSTM whose input X is xg itself (the input part of the
// gates, biases included, as the layer computes it) through a W that only reorders weft's gate blocks (i,f,g,o)
// into ONNX's (i,o,f,c): a (1,4H,4H) 0/1 initializer. R is w_hh's rows in ONNX's order (a Gather). No B, zero
// initial states, as the layer. Y (T,1,B,H) back to batch first.
static bool e_lstm_seq(em *m) {
    if (!only_out0(m)) return false;
    const weft_gvalue *x = in_v(m, 0);
    weft_dtype dt = (weft_dtype)x->dtype;
    if (dt != WEFT_F32 && dt != WEFT_F64) return refuse(m, "%s", "a half-precision LSTM has no ONNX form here");
    int64_t B = x->sizes[0], T = x->sizes[1], G4 = x->sizes[2], H = G4 / 4;
    static const int64_t from[4] = {0, 3, 1, 2}; // ONNX block k reads weft block from[k]
    int64_t ws[3] = {1, G4, G4};
    weft_tensor *w = weft_tensor_zeros(3, ws, dt), *idx = weft_tensor_empty(1, &G4, WEFT_I64);
    for (int64_t k = 0; w && idx && k < 4; k++)
        for (int64_t j = 0; j < H; j++) {
            int64_t r = k * H + j, c = from[k] * H + j;
            if (dt == WEFT_F32) ((float *)weft_tensor_data(w))[r * G4 + c] = 1;
            else ((double *)weft_tensor_data(w))[r * G4 + c] = 1;
            ((int64_t *)weft_tensor_data(idx))[r] = c;
        }
    const char *W = add_init(m->e, tmp(m), w), *perm = add_init(m->e, tmp(m), idx);
    const char *xt = tmp(m);
    attr_ints(m->e, add_node(m->e, "Transpose", 1, &m->in[0], 1, &xt), "perm", 3, (const int64_t[]){1, 0, 2});
    const char *rg = node1(m, "Gather", tmp(m), 2, m->in[1], perm, NULL); // axis 0
    const char *R = reshape_to(m, rg, 3, (const int64_t[]){1, G4, H}, tmp(m));
    const char *y = tmp(m);
    attr_int(m->e, add_node(m->e, "LSTM", 3, (const char *[]){xt, W, R}, 1, &y), "hidden_size", H);
    const char *y3 = reshape_to(m, y, 3, (const int64_t[]){T, B, H}, tmp(m));
    attr_ints(m->e, add_node(m->e, "Transpose", 1, &y3, 1, &m->out[0]), "perm", 3, (const int64_t[]){1, 0, 2});
    return true;
}
// cross_entropy(logits (N,C), targets (N)): SoftmaxCrossEntropyLoss, reduction mean (f32, f64).
static bool e_cross_entropy(em *m) {
    weft_dtype dt = (weft_dtype)in_v(m, 0)->dtype;
    if (dt != WEFT_F32 && dt != WEFT_F64) return refuse(m, "%s", "a half-precision cross_entropy has no ONNX form here");
    node1(m, "SoftmaxCrossEntropyLoss", m->out[0], 2, m->in[0], m->in[1], NULL); // reduction: mean, the default
    return true;
}
static bool e_dropout(em *m) { // a dropout op is in the graph only in training (eval mode traces none)
    return refuse(m, "%s", "dropout has no ONNX form here: export the model in eval mode (dropout off)");
}

static const struct {
    const char *op;
    bool (*fn)(em *);
} emitters[] = {
    {"neg", e_unary},         {"abs", e_unary},         {"exp", e_unary},          {"log", e_unary},
    {"sqrt", e_unary},        {"sin", e_unary},         {"cos", e_unary},          {"tanh", e_unary},
    {"relu", e_unary},        {"sigmoid", e_unary},     {"sign", e_unary},         {"erf", e_unary},
    {"copy", e_unary},        {"rsqrt", e_rsqrt},       {"silu", e_silu},          {"gelu", e_gelu},
    {"gelu_tanh", e_gelu},    {"add_scalar", e_scalar}, {"mul_scalar", e_scalar},  {"pow_scalar", e_scalar},
    {"add", e_binary},        {"sub", e_binary},        {"mul", e_binary},         {"div", e_binary},
    {"pow", e_binary},        {"maximum", e_binary},    {"minimum", e_binary},     {"eq", e_binary},
    {"lt", e_binary},         {"le", e_binary},         {"gt", e_binary},          {"ge", e_binary},
    {"ne", e_binary},         {"floor", e_unary},       {"ceil", e_unary},         {"round", e_unary},
    {"fmod", e_mod},          {"remainder", e_mod},     {"topk", e_topk},          {"asin", e_unary},
    {"acos", e_unary},        {"atan", e_unary},
    {"where", e_where},       {"cast", e_cast},         {"matmul", e_matmul},      {"linear", e_linear},
    {"linear_gelu", e_linear}, {"gelu_linear", e_linear}, {"view", e_view},        {"expand", e_expand},
    {"permute", e_permute},   {"slice", e_slice},       {"concat", e_concat},      {"embedding", e_gather},
    {"index_select", e_gather}, {"gather", e_gather},   {"softmax", e_softmax},    {"log_softmax", e_softmax},
    {"sum", e_reduce},        {"mean", e_reduce},       {"max", e_reduce},         {"min", e_reduce},
    {"logsumexp", e_reduce},  {"argmax", e_reduce},     {"layer_norm", e_layer_norm},
    {"add_layer_norm", e_layer_norm}, {"batch_norm", e_batch_norm}, {"conv2d", e_conv},
    {"conv2d_backward_input", e_conv_t},
    {"max_pool2d", e_pool},   {"avg_pool2d", e_pool},   {"causal_attention", e_attention},
    {"causal_attention_qkv", e_attention_qkv}, {"dropout", e_dropout}, {"lstm_seq", e_lstm_seq},
    {"cross_entropy", e_cross_entropy},
};

// ---------------------------------------------------------------- the model

// A ValueInfo for value v under name (type and static dims).
static Onnx__ValueInfoProto *value_info(ex *e, int32_t v, const char *name) {
    const weft_gvalue *gv = &e->g->values[v];
    Onnx__ValueInfoProto *vi = calloc(1, sizeof *vi);
    Onnx__TypeProto *tp = calloc(1, sizeof *tp);
    Onnx__TypeProto__Tensor *tt = calloc(1, sizeof *tt);
    Onnx__TensorShapeProto *sh = calloc(1, sizeof *sh);
    Onnx__TensorShapeProto__Dimension **dims = calloc((size_t)gv->ndim + 1, sizeof *dims);
    bool ok = vi && tp && tt && sh && dims;
    for (int d = 0; ok && d < gv->ndim; d++) ok = (dims[d] = calloc(1, sizeof **dims)) != NULL;
    char *nm = ok ? strdup(name) : NULL;
    if (!nm) {
        for (int d = 0; dims && d < gv->ndim; d++) free(dims[d]);
        free(vi), free(tp), free(tt), free(sh), free(dims);
        e->oom = true;
        return NULL;
    }
    onnx__value_info_proto__init(vi);
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    onnx__tensor_shape_proto__init(sh);
    for (int d = 0; d < gv->ndim; d++) {
        onnx__tensor_shape_proto__dimension__init(dims[d]);
        dims[d]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        dims[d]->dim_value = gv->sizes[d];
    }
    sh->n_dim = (size_t)gv->ndim, sh->dim = dims;
    tt->has_elem_type = 1, tt->elem_type = weft_onnx_dtype_to((weft_dtype)gv->dtype), tt->shape = sh;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE, tp->tensor_type = tt;
    vi->name = nm, vi->type = tp;
    return vi;
}

static void free_value_info(Onnx__ValueInfoProto *vi) {
    if (!vi) return;
    if (vi->type && vi->type->tensor_type) {
        Onnx__TensorShapeProto *sh = vi->type->tensor_type->shape;
        for (size_t d = 0; sh && d < sh->n_dim; d++) free(sh->dim[d]);
        if (sh) free(sh->dim);
        free(sh);
        free(vi->type->tensor_type);
    }
    free(vi->type);
    free(vi->name);
    free(vi);
}
static void free_node(Onnx__NodeProto *nd) {
    for (size_t k = 0; nd->input && k < nd->n_input; k++) free(nd->input[k]);
    for (size_t k = 0; nd->output && k < nd->n_output; k++) free(nd->output[k]);
    for (size_t k = 0; k < nd->n_attribute; k++) {
        free(nd->attribute[k]->name);
        free(nd->attribute[k]->ints);
        free(nd->attribute[k]);
    }
    free(nd->attribute), free(nd->input), free(nd->output), free(nd->op_type), free(nd);
}

static void push_vi(ex *e, vec *v, Onnx__ValueInfoProto *vi) {
    if (vi && !push(v, vi)) {
        free_value_info(vi);
        e->oom = true;
    }
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

// ONNX graphs are single-assignment: each name has one producer (graph input, initializer or node output).
// weft's node names are unique, but "a/0" or "a:1" may be a node's own name as well as the name this file
// gives another node's intermediate or second output: that is refused, not written as an invalid model.
static weft_status unique_names(ex *e) {
    size_t n = e->inputs.n + e->inits.n, k = 0;
    for (size_t i = 0; i < e->nodes.n; i++) n += ((Onnx__NodeProto *)e->nodes.p[i])->n_output;
    const char **all = malloc(sizeof *all * (n ? n : 1));
    if (!all) return weft_error(WEFT_ERR_OOM, "onnx_save: %s: no memory", e->path);
    for (size_t i = 0; i < e->inputs.n; i++) all[k++] = ((Onnx__ValueInfoProto *)e->inputs.p[i])->name;
    for (size_t i = 0; i < e->inits.n; i++) all[k++] = ((Onnx__TensorProto *)e->inits.p[i])->name;
    for (size_t i = 0; i < e->nodes.n; i++) {
        const Onnx__NodeProto *nd = e->nodes.p[i];
        for (size_t j = 0; j < nd->n_output; j++) all[k++] = nd->output[j];
    }
    qsort(all, n, sizeof *all, cmp_str);
    weft_status st = WEFT_OK;
    for (size_t i = 1; !st && i < n; i++)
        if (!strcmp(all[i - 1], all[i]))
            st = weft_error(WEFT_ERR_ARG,
                            "onnx_save: %s: the ONNX name '%s' would be given to two values (a node named with '/' or "
                            "':' meets the name of another node's intermediate or output): rename the node",
                            e->path, all[i]);
    free(all);
    return st;
}

// The nodes the outputs need, in graph order (data edges point to earlier nodes).
static weft_status walk(ex *e, int n_in, const weft_value *inputs, int n_out, const weft_value *outputs, uint8_t *need) {
    const weft_graph *g = e->g;
    for (int k = 0; k < n_out; k++) need[g->values[outputs[k].id].node] = 1;
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        if (!need[i]) continue;
        const weft_gnode *n = &g->nodes[i];
        bool is_in = false;
        for (int k = 0; k < n_in; k++) is_in |= g->values[inputs[k].id].node == i;
        if (n->kind == WEFT_NODE_PLACEHOLDER && !is_in)
            return weft_error(WEFT_ERR_ARG, "onnx_save: %s: placeholder '%s' is needed but not among the inputs",
                              e->path, n->name);
        if (n->kind != WEFT_NODE_OP && n->kind != WEFT_NODE_PLACEHOLDER && n->kind != WEFT_NODE_CONSTANT &&
            n->kind != WEFT_NODE_VARIABLE)
            return weft_error(WEFT_ERR_UNSUPPORTED, "onnx_save: %s: node '%s' (%s) has no ONNX form%s", e->path, n->name,
                              weft_graph_kind_name(n->kind),
                              n->kind == WEFT_NODE_FUSED ? ": export before weft_graph_optimize's fusion" : "");
        for (int k = 0; k < n->n_in; k++) need[g->values[n->in[k]].node] = 1;
    }
    return WEFT_OK;
}

static weft_status build(ex *e, int n_in, const weft_value *inputs, int n_out, const weft_value *outputs) {
    const weft_graph *g = e->g;
    uint8_t *need = calloc((size_t)g->n_nodes + 1, 1), *read = calloc((size_t)g->n_values + 1, 1);
    weft_status st = need && read ? walk(e, n_in, inputs, n_out, outputs, need) : weft_error(WEFT_ERR_OOM, "onnx_save: no memory");
    // which values an exported node or an output reads (an unread output of a multi-output op is left out)
    for (int i = 0; !st && i < g->n_nodes; i++)
        if (need[i])
            for (int k = 0; k < g->nodes[i].n_in; k++) read[g->nodes[i].in[k]] = 1;
    for (int k = 0; !st && k < n_out; k++) read[outputs[k].id] = 1;
    for (int k = 0; !st && k < n_in; k++) push_vi(e, &e->inputs, value_info(e, inputs[k].id, vname(e, inputs[k].id)));
    for (int i = 0; !st && !e->oom && i < g->n_nodes; i++) {
        if (!need[i]) continue;
        const weft_gnode *n = &g->nodes[i];
        if (n->kind == WEFT_NODE_CONSTANT || n->kind == WEFT_NODE_VARIABLE) {
            if (!weft_onnx_dtype_to(weft_tensor_dtype(n->tensor)))
                st = weft_error(WEFT_ERR_DTYPE, "onnx_save: %s: node '%s': dtype %s has no ONNX type", e->path, n->name,
                                weft_dtype_name(weft_tensor_dtype(n->tensor)));
            else add_init(e, vname(e, n->out0), weft_tensor_ref(n->tensor));
            continue;
        }
        if (n->kind != WEFT_NODE_OP) continue;
        int fn = -1;
        for (size_t k = 0; k < sizeof emitters / sizeof emitters[0]; k++)
            if (!strcmp(emitters[k].op, n->op->name)) fn = (int)k;
        em m = {.e = e, .n = n, .in = calloc((size_t)n->n_in + 1, sizeof(char *))};
        bool ok = fn >= 0 && m.in;
        if (fn < 0) snprintf(e->why, sizeof e->why, "no ONNX form here (docs/graph.md lists the ops weft writes)");
        else if (!m.in) e->oom = true;
        for (int k = 0; ok && k < n->n_in; k++) m.in[k] = vname(e, n->in[k]);
        for (int k = 0; ok && k < n->n_out; k++) m.out[k] = read[n->out0 + k] ? vname(e, n->out0 + k) : NULL;
        if (ok && !m.out[0] && strcmp(n->op->name, "linear_gelu") && strcmp(n->op->name, "add_layer_norm"))
            m.out[0] = vname(e, n->out0); // output 0 is always written (a node with no reader is an output's)
        if (ok) ok = emitters[fn].fn(&m);
        free(m.in);
        if (!ok && e->oom) break;
        if (!ok)
            st = weft_error(WEFT_ERR_UNSUPPORTED, "onnx_save: %s: node '%s' (op %s): %s", e->path, n->name, n->op->name,
                            e->why);
    }
    for (int k = 0; !st && k < n_out; k++) push_vi(e, &e->outputs, value_info(e, outputs[k].id, vname(e, outputs[k].id)));
    if (!st && !e->oom) st = unique_names(e);
    free(need);
    free(read);
    if (!st && e->oom) st = weft_error(WEFT_ERR_OOM, "onnx_save: %s: no memory", e->path);
    return st;
}

weft_status weft_onnx_save(const weft_graph *g, int n_in, const weft_value *inputs, int n_out,
                           const weft_value *outputs, const char *path) {
    if (!g || !path || n_in < 0 || n_out < 1 || (n_in && !inputs) || !outputs)
        return weft_error(WEFT_ERR_ARG, "onnx_save: bad arguments (%d inputs, %d outputs, path %s)", n_in, n_out,
                          path ? path : "NULL");
    if (g->tracing) return weft_error(WEFT_ERR_STATE, "onnx_save: %s: the graph is being traced", path);
    for (int k = 0; k < n_in; k++)
        if (!weft_graph_value_ok(g, inputs[k]) || g->nodes[g->values[inputs[k].id].node].kind != WEFT_NODE_PLACEHOLDER)
            return weft_error(WEFT_ERR_ARG, "onnx_save: %s: input %d is not a placeholder's value", path, k);
    for (int k = 0; k < n_in; k++)
        for (int j = 0; j < k; j++)
            if (inputs[j].id == inputs[k].id)
                return weft_error(WEFT_ERR_ARG, "onnx_save: %s: input %d repeats input %d", path, k, j);
    for (int k = 0; k < n_out; k++)
        if (!weft_graph_value_ok(g, outputs[k]))
            return weft_error(WEFT_ERR_ARG, "onnx_save: %s: output %d is not a value of the graph", path, k);
    ex e = {.g = g, .path = path};
    e.vname = calloc((size_t)g->n_values + 1, sizeof *e.vname);
    if (!e.vname) return weft_error(WEFT_ERR_OOM, "onnx_save: no memory");
    Onnx__ModelProto mp;
    Onnx__GraphProto gp;
    Onnx__OperatorSetIdProto opset, *opsets[1] = {&opset};
    onnx__model_proto__init(&mp);
    onnx__graph_proto__init(&gp);
    onnx__operator_set_id_proto__init(&opset);
    weft_status st = build(&e, n_in, inputs, n_out, outputs);
    uint8_t *buf = NULL;
    size_t len = 0;
    if (!st) {
        opset.domain = (char *)"", opset.has_version = 1, opset.version = WEFT_ONNX_OPSET;
        mp.has_ir_version = 1, mp.ir_version = WEFT_ONNX_IR_VERSION;
        mp.n_opset_import = 1, mp.opset_import = opsets;
        mp.producer_name = (char *)"weft", mp.producer_version = (char *)weft_version();
        mp.graph = &gp;
        gp.name = (char *)"weft";
        gp.n_node = e.nodes.n, gp.node = (Onnx__NodeProto **)e.nodes.p;
        gp.n_initializer = e.inits.n, gp.initializer = (Onnx__TensorProto **)e.inits.p;
        gp.n_input = e.inputs.n, gp.input = (Onnx__ValueInfoProto **)e.inputs.p;
        gp.n_output = e.outputs.n, gp.output = (Onnx__ValueInfoProto **)e.outputs.p;
        len = onnx__model_proto__get_packed_size(&mp);
        buf = malloc(len ? len : 1);
        if (!buf) st = weft_error(WEFT_ERR_OOM, "onnx_save: %s: no memory for %zu bytes", path, len);
        else onnx__model_proto__pack(&mp, buf);
    }
    if (!st) { // a temporary file, fsync, rename: the old file or the new one, never half of one
        char tmpf[4096];
        int fd = weft_io_open_temp(path, tmpf, sizeof tmpf);
        if (fd < 0) {
            st = weft_error(WEFT_ERR_IO, "onnx_save: %s", weft_last_error());
        } else {
            size_t off = 0;
            while (!st && off < len) {
                ssize_t w = write(fd, buf + off, len - off);
                if (w <= 0) st = weft_error(WEFT_ERR_IO, "onnx_save: %s: write failed", path);
                else off += (size_t)w;
            }
            st = weft_io_commit_temp(fd, tmpf, path, st);
        }
    }
    free(buf);
    for (size_t k = 0; k < e.nodes.n; k++) free_node(e.nodes.p[k]);
    for (size_t k = 0; k < e.inits.n; k++) {
        weft_onnx_tensor_proto_clear(e.inits.p[k]);
        free(e.inits.p[k]);
    }
    for (size_t k = 0; k < e.inputs.n; k++) free_value_info(e.inputs.p[k]);
    for (size_t k = 0; k < e.outputs.n; k++) free_value_info(e.outputs.p[k]);
    for (size_t k = 0; k < e.strs.n; k++) free(e.strs.p[k]);
    for (int v = 0; v < g->n_values; v++) free(e.vname[v]);
    free(e.nodes.p), free(e.inits.p), free(e.inputs.p), free(e.outputs.p), free(e.strs.p), free(e.vname);
    return st;
}
#endif
