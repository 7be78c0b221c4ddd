// ONNX import: an ONNX model file -> a weft graph (weft_onnx_load).
//
// The file is unpacked by protobuf-c (onnx.pb-c.h, generated from
// third_party/onnx/onnx.proto) and rebuilt through the graph builder, so
// every op's own infer checks shapes and dtypes as it would for a graph made
// in C. Initializers become CONSTANT nodes, graph inputs placeholders (with
// the sizes the caller gives or the file's), and each ONNX node one or more
// weft ops (the table `ops` below); the op that produces an ONNX value is
// named after it, so every value of the model is found by its ONNX name.
//
// weft's graphs have static shapes. Inputs that ONNX ops read as data but
// weft needs as attributes (Reshape's shape, Slice's starts, ReduceSum's
// axes, ...) must be constants: an initializer, a Constant node, Shape of a
// value (its static sizes), or anything computed from those, which is run
// once at import (the graph evaluates the value with no feeds). Models that
// PyTorch exports with shape arithmetic (Shape -> Gather -> Concat ->
// Reshape) import this way.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_import.h"

#ifndef WEFT_HAVE_ONNX
bool weft_onnx_available(void) { return false; }
weft_graph *weft_onnx_load(const char *path, int n_shapes, const weft_onnx_shape *shapes) {
    (void)n_shapes, (void)shapes;
    weft_error(WEFT_ERR_UNSUPPORTED, "onnx_load: %s: weft was built without ONNX support (protobuf-c)",
               path ? path : "(null)");
    return NULL;
}
#else

bool weft_onnx_available(void) { return true; }

// The most elements a constant the loader makes itself may have (ConstantOfShape, Range, Trilu's mask): a file
// cannot ask for more memory than this with a few bytes.
#define MAX_MADE_ELEMS (INT64_C(1) << 26)

weft_status oi_check_made(int nd, const int64_t *s) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) {
        if (s[d] < 0) return weft_error(WEFT_ERR_ARG, "dim %d is %lld", d, (long long)s[d]);
        if (s[d] && n > MAX_MADE_ELEMS / s[d]) n = MAX_MADE_ELEMS + 1;
        else n *= s[d];
    }
    if (n > MAX_MADE_ELEMS)
        return weft_error(WEFT_ERR_UNSUPPORTED, "a constant of more than %lld elements", (long long)MAX_MADE_ELEMS);
    return WEFT_OK;
}

// ---------------------------------------------------------------- names -> values


static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static int find(const imp *m, const char *name) {
    if (!m->n_slots) return -1;
    for (size_t i = hash_str(name) & (m->n_slots - 1);; i = (i + 1) & (m->n_slots - 1)) {
        int32_t k = m->slots[i];
        if (k < 0) return -1;
        if (!strcmp(m->e[k].name, name)) return k;
    }
}

// Binds name to v (a later binding of the same name replaces it: ONNX names are single-assignment, but a
// graph input may shadow an initializer of the same name). Takes konst.
static weft_status bind(imp *m, const char *name, weft_value v, weft_tensor *konst) {
    int k = find(m, name);
    if (k >= 0) {
        weft_tensor_free(m->e[k].konst);
        m->e[k].v = v, m->e[k].konst = konst;
        return WEFT_OK;
    }
    if (m->n == m->cap || (size_t)(m->n + 1) * 2 > m->n_slots) {
        int cap = m->cap ? 2 * m->cap : 64;
        entry *e = realloc(m->e, sizeof *e * (size_t)cap);
        if (!e) goto oom;
        m->e = e, m->cap = cap;
        size_t ns = (size_t)cap * 2;
        int32_t *s = malloc(sizeof *s * ns);
        if (!s) goto oom;
        for (size_t i = 0; i < ns; i++) s[i] = -1;
        free(m->slots);
        m->slots = s, m->n_slots = ns;
        for (int j = 0; j < m->n; j++) {
            size_t i = hash_str(m->e[j].name) & (ns - 1);
            while (s[i] >= 0) i = (i + 1) & (ns - 1);
            s[i] = j;
        }
    }
    m->e[m->n] = (entry){name, v, konst};
    size_t i = hash_str(name) & (m->n_slots - 1);
    while (m->slots[i] >= 0) i = (i + 1) & (m->n_slots - 1);
    m->slots[i] = m->n++;
    return WEFT_OK;
oom:
    weft_tensor_free(konst);
    return weft_error(WEFT_ERR_OOM, "onnx_load: %s: no memory", m->path);
}

// ---------------------------------------------------------------- one node



// The node's first named output (the recurrent ops may leave output 0, Y, unnamed); NULL if none.
static const char *first_out(const nctx *c) {
    for (int k = 0; k < (int)c->n->n_output; k++)
        if (node_out(c, k)) return node_out(c, k);
    return NULL;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

// A fresh name for an intermediate op of this node (the output's name cut short enough that "#k" always fits),
// past the names the graph has (a file weft saved holds its earlier import's "#k" constants as initializers) and
// the names later nodes of the file give their outputs.
static const char *tmp_name(nctx *c) {
    const char *key = c->tname;
    do snprintf(c->tname, sizeof c->tname, "%.*s#%d", (int)sizeof c->tname - 16, first_out(c), c->tmp++);
    while ((weft_graph_find_node(c->m->g, c->tname).id >= 0 ||
            (c->m->n_outs && bsearch(&key, c->m->outs, c->m->n_outs, sizeof *c->m->outs, cmp_str))) &&
           c->tmp < INT32_MAX);
    return c->tname;
}


// An op of the table; name NULL: a temporary. Errors already name the op; the caller adds the node.
weft_value oi_op(nctx *c, const char *name, const char *opn, int n_in, const weft_value *in, const int64_t *ia,
                     int nia, const double *fa, int nfa) {
    weft_value out[WEFT_GRAPH_MAX_OUT];
    if (weft_graph_op_named(c->m->g, name ? name : tmp_name(c), opn, n_in, in, ia, nia, fa, nfa, out) != WEFT_OK)
        return WEFT_VALUE_NONE;
    return out[0];
}

// A CONSTANT holding t (taken), also known at import.
weft_value oi_konst(nctx *c, const char *name, weft_tensor *t, weft_tensor **keep) {
    if (!t) {
        weft_error(WEFT_ERR_OOM, "no memory for a constant");
        return WEFT_VALUE_NONE;
    }
    weft_value v = weft_graph_constant(c->m->g, name ? name : tmp_name(c), t);
    if (keep && OK(v)) *keep = t;
    else weft_tensor_free(t);
    return v;
}
weft_tensor *oi_index_new(int64_t len) {
    return oi_check_made(1, &len) ? NULL : weft_tensor_empty(1, &len, WEFT_I64);
}

weft_value oi_select(nctx *c, const char *name, weft_value v, int64_t dim, weft_tensor *idx) {
    weft_value iv = oi_konst(c, NULL, idx, NULL);
    return OK(iv) ? oi_op(c, name, "index_select", 2, (weft_value[]){v, iv}, &dim, 1, NULL, 0) : iv;
}

weft_value oi_scalar(nctx *c, weft_dtype dt, double x) {
    weft_tensor *t = weft_tensor_empty(0, NULL, dt);
    if (t) {
        void *p = weft_tensor_data(t);
        switch (dt) {
        case WEFT_F32: *(float *)p = (float)x; break;
        case WEFT_F64: *(double *)p = x; break;
        case WEFT_I32: *(int32_t *)p = (int32_t)x; break;
        case WEFT_I64: *(int64_t *)p = (int64_t)x; break;
        case WEFT_U8: *(uint8_t *)p = (uint8_t)x; break;
        case WEFT_BOOL: *(uint8_t *)p = x != 0; break;
        default: weft_tensor_free(t); t = NULL; weft_error(WEFT_ERR_DTYPE, "no scalar of dtype %s", weft_dtype_name(dt));
            return WEFT_VALUE_NONE;
        }
    }
    return oi_konst(c, NULL, t, NULL);
}

// Whether computing value v at load makes no op output of more than MAX_MADE_ELEMS elements: the op nodes it
// depends on, walked from v (shapes are static, so this costs no arithmetic). Constants and variables are the
// file's own tensors, already in memory.
static weft_status check_eval_size(const weft_graph *g, int32_t v) {
    uint8_t *seen = calloc((size_t)g->n_nodes + 1, 1);
    int32_t *stack = malloc(sizeof(int32_t) * ((size_t)g->n_nodes + 1));
    weft_status st = seen && stack ? WEFT_OK : weft_error(WEFT_ERR_OOM, "no memory");
    int top = 0;
    if (!st) stack[top++] = g->values[v].node, seen[g->values[v].node] = 1;
    while (!st && top > 0) {
        const weft_gnode *nd = &g->nodes[stack[--top]];
        if (nd->kind != WEFT_NODE_OP) continue;
        for (int o = 0; o < nd->n_out && !st; o++) {
            const weft_gvalue *gv = &g->values[nd->out0 + o];
            st = oi_check_made(gv->ndim, gv->sizes);
        }
        for (int i = 0; i < nd->n_in; i++) {
            int32_t p = g->values[nd->in[i]].node;
            if (!seen[p]) seen[p] = 1, stack[top++] = p;
        }
    }
    free(seen);
    free(stack);
    return st;
}

// A scalar of dtype dt, made in f32 and cast where scalar() has no such dtype (f16, bf16).
weft_value oi_scalar_as(nctx *c, weft_dtype dt, double x) {
    if (dt != WEFT_F16 && dt != WEFT_BF16) return oi_scalar(c, dt, x);
    weft_value v = oi_scalar(c, WEFT_F32, x);
    int64_t d = dt;
    return OK(v) ? oi_op(c, NULL, "cast", 1, &v, &d, 1, NULL, 0) : v;
}

// The value known at import of input k: a constant, or computed from constants by running the graph.
weft_status oi_konst_in(nctx *c, int k, weft_tensor **out) {
    *out = NULL;
    if (k >= c->n_in || c->kin[k] < 0) return weft_error(WEFT_ERR_ARG, "input %d is missing", k);
    entry *e = &c->m->e[c->kin[k]];
    if (!e->konst) {
        weft_tensor *t = NULL;
        weft_status st = check_eval_size(c->m->g, e->v.id);
        if (st)
            return weft_error(WEFT_ERR_UNSUPPORTED, "input '%s' must be known when the model is loaded, and computing "
                              "it would make %s", e->name, weft_last_error());
        st = weft_graph_run(c->m->g, 0, NULL, NULL, 1, &e->v, &t, 0, NULL);
        if (st != WEFT_OK)
            return weft_error(WEFT_ERR_UNSUPPORTED,
                              "input '%s' must be known when the model is loaded (weft's shapes are static), and "
                              "computing it failed: %s", e->name, weft_last_error());
        e->konst = t;
    }
    *out = e->konst;
    return WEFT_OK;
}

// The integers of a known input (int32 or int64), at most cap of them.
weft_status oi_konst_ints(nctx *c, int k, int64_t *v, int cap, int *n) {
    weft_tensor *t;
    weft_status st = oi_konst_in(c, k, &t);
    if (st) return st;
    int64_t numel = weft_tensor_numel(t);
    weft_dtype dt = weft_tensor_dtype(t);
    if (dt != WEFT_I64 && dt != WEFT_I32) return weft_error(WEFT_ERR_DTYPE, "input %d must hold integers", k);
    if (numel > cap) return weft_error(WEFT_ERR_UNSUPPORTED, "input %d has %lld values (at most %d)", k, (long long)numel, cap);
    for (int64_t i = 0; i < numel; i++)
        v[i] = dt == WEFT_I64 ? ((const int64_t *)weft_tensor_data(t))[i] : ((const int32_t *)weft_tensor_data(t))[i];
    *n = (int)numel;
    return WEFT_OK;
}

// ---- attributes

const Onnx__AttributeProto *oi_attr(const nctx *c, const char *name) {
    for (size_t i = 0; i < c->n->n_attribute; i++)
        if (c->n->attribute[i]->name && !strcmp(c->n->attribute[i]->name, name)) return c->n->attribute[i];
    return NULL;
}
// Attribute name read as type t: NULL when absent, and when the file gives it another type (then noted in
// c->bad_attr: import_node turns it into the node's error, rather than reading a default in its place). A file
// from before attributes carried their type (UNDEFINED) is read as the op expects.
const Onnx__AttributeProto *oi_attr_t(nctx *c, const char *name, Onnx__AttributeProto__AttributeType t) {
    const Onnx__AttributeProto *a = oi_attr(c, name);
    if (a && a->has_type && a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED && a->type != t) {
        if (!c->bad_attr) c->bad_attr = name;
        return NULL;
    }
    return a;
}
int64_t oi_attr_i(nctx *c, const char *name, int64_t def) {
    const Onnx__AttributeProto *a = oi_attr_t(c, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    return a ? a->i : def;
}
double oi_attr_f(nctx *c, const char *name, double def) {
    const Onnx__AttributeProto *a = oi_attr_t(c, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    return a ? (double)a->f : def;
}
// The ints of an attribute (n = -1 when absent).
const int64_t *oi_attr_ints(nctx *c, const char *name, int *n) {
    const Onnx__AttributeProto *a = oi_attr_t(c, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    *n = a ? (int)a->n_ints : -1;
    return a ? a->ints : NULL;
}
bool oi_attr_s_is(nctx *c, const char *name, const char *def, const char *want) {
    const Onnx__AttributeProto *a = oi_attr_t(c, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    if (!a || !a->has_s) return !strcmp(def, want);
    return strlen(want) == a->s.len && (!a->s.len || !memcmp(a->s.data, want, a->s.len));
}


// ---- shapes

// v viewed as sizes (a copy first where v may not be contiguous: a view op's output).
// sizes may point into the graph's values (sizes_of): they are copied before the copy op can move them.
weft_value oi_reshape(nctx *c, const char *name, weft_value v, int nd, const int64_t *sizes) {
    if (!OK(v)) return v; // an op before failed (its error is set)
    int64_t at[1 + WEFT_MAX_DIMS] = {nd};
    if (nd) memcpy(at + 1, sizes, sizeof(int64_t) * (size_t)nd);
    weft_node_id p = weft_graph_value_node(c->m->g, v);
    const char *pop = weft_graph_node_op(c->m->g, p);
    if (pop && (!strcmp(pop, "permute") || !strcmp(pop, "slice") || !strcmp(pop, "expand"))) {
        v = oi_op(c, NULL, "copy", 1, &v, NULL, 0, NULL, 0);
        if (!OK(v)) return v;
    }
    return oi_op(c, name, "view", 1, &v, at, 1 + nd, NULL, 0);
}

// ---------------------------------------------------------------- handlers


static weft_status h_unary(nctx *c, const char *opn) { OUT0(oi_op(c, node_out(c, 0), opn, 1, c->in, NULL, 0, NULL, 0)); }

static weft_status h_binary(nctx *c, const char *opn) {
    if (c->n_in != 2) FAIL("takes 2 inputs, has %d", c->n_in);
    weft_value in[2] = {c->in[0], c->in[1]};
    weft_dtype bt = dtype_of(c, in[0]);
    if (!strcmp(opn, "pow") && (bt == WEFT_I32 || bt == WEFT_I64 || bt == WEFT_U8)) {
        // an integer base: pow in f64 (exact for results below 2^53), truncated back to the base's type, as numpy's
        int64_t f = WEFT_F64, b = bt;
        weft_value p[2] = {oi_op(c, NULL, "cast", 1, &in[0], &f, 1, NULL, 0), oi_op(c, NULL, "cast", 1, &in[1], &f, 1, NULL, 0)};
        weft_value r = OK(p[0]) && OK(p[1]) ? oi_op(c, NULL, "pow", 2, p, NULL, 0, NULL, 0) : WEFT_VALUE_NONE;
        OUT0(OK(r) ? oi_op(c, node_out(c, 0), "cast", 1, &r, &b, 1, NULL, 0) : r);
    }
    if (!strcmp(opn, "pow") && dtype_of(c, in[1]) != dtype_of(c, in[0])) { // ONNX lets the exponent's type differ
        int64_t dt = dtype_of(c, in[0]);
        in[1] = oi_op(c, NULL, "cast", 1, &in[1], &dt, 1, NULL, 0);
        if (!OK(in[1])) return weft_last_status();
    }
    OUT0(oi_op(c, node_out(c, 0), opn, 2, in, NULL, 0, NULL, 0));
}

// Max / Min / Sum of any number of inputs, pairwise.
// LeakyRelu: where(x > 0, x, alpha x), weft_leaky_relu's form.
static weft_status h_leaky_relu(nctx *c, const char *arg) {
    (void)arg;
    double alpha = oi_attr_f(c, "alpha", 0.01);
    weft_value zero = oi_scalar_as(c, dtype_of(c, c->in[0]), 0);
    weft_value pos = OK(zero) ? oi_op(c, NULL, "gt", 2, (weft_value[]){c->in[0], zero}, NULL, 0, NULL, 0) : zero;
    weft_value s = OK(pos) ? oi_op(c, NULL, "mul_scalar", 1, c->in, NULL, 0, &alpha, 1) : pos;
    if (!OK(s)) return weft_last_status();
    OUT0(oi_op(c, node_out(c, 0), "where", 3, (weft_value[]){pos, c->in[0], s}, NULL, 0, NULL, 0));
}

// And, Or, Xor, Not on bools (numpy broadcasting): where(a, b, false), where(a, true, b), a != b, a == false.
static weft_status h_logic(nctx *c, const char *arg) {
    bool not = !strcmp(arg, "not");
    if (c->n_in != (not ? 1 : 2)) FAIL("takes %d input%s", not ? 1 : 2, not ? "" : "s");
    for (int k = 0; k < c->n_in; k++)
        if (dtype_of(c, c->in[k]) != WEFT_BOOL) FAIL("input %d is %s (it takes bool)", k, weft_dtype_name(dtype_of(c, c->in[k])));
    if (!strcmp(arg, "xor")) OUT0(oi_op(c, node_out(c, 0), "ne", 2, c->in, NULL, 0, NULL, 0));
    weft_value k = oi_scalar(c, WEFT_BOOL, !strcmp(arg, "or"));
    if (!OK(k)) return weft_last_status();
    if (not) OUT0(oi_op(c, node_out(c, 0), "eq", 2, (weft_value[]){c->in[0], k}, NULL, 0, NULL, 0));
    weft_value in[3] = {c->in[0], k, c->in[1]}; // or: where(a, true, b)
    if (!strcmp(arg, "and")) in[1] = c->in[1], in[2] = k; // and: where(a, b, false)
    OUT0(oi_op(c, node_out(c, 0), "where", 3, in, NULL, 0, NULL, 0));
}

// Mean (of any number of inputs): their sum, times 1/n.
static weft_status h_mean(nctx *c, const char *arg) {
    (void)arg;
    weft_value acc = c->in[0];
    for (int k = 1; k < c->n_in; k++)
        if (!OK(acc = oi_op(c, NULL, "add", 2, (weft_value[]){acc, c->in[k]}, NULL, 0, NULL, 0))) return weft_last_status();
    double inv = 1.0 / c->n_in;
    OUT0(oi_op(c, node_out(c, 0), "mul_scalar", 1, &acc, NULL, 0, &inv, 1));
}

static weft_status h_variadic(nctx *c, const char *opn) {
    if (c->n_in < 1) FAIL("needs an input");
    weft_value acc = c->in[0];
    if (c->n_in == 1) OUT0(oi_reshape(c, node_out(c, 0), acc, ndim_of(c, acc), sizes_of(c, acc)));
    for (int k = 1; k < c->n_in; k++) {
        weft_value in[2] = {acc, c->in[k]};
        acc = oi_op(c, k == c->n_in - 1 ? node_out(c, 0) : NULL, opn, 2, in, NULL, 0, NULL, 0);
        if (!OK(acc)) return weft_last_status();
    }
    c->out[0] = acc;
    return WEFT_OK;
}

// Mod: fmod = 1 is C's fmod (the dividend's sign), fmod = 0 the divisor's sign (integers only, as ONNX says).
static weft_status h_mod(nctx *c, const char *arg) {
    (void)arg;
    bool f = oi_attr_i(c, "fmod", 0) != 0;
    weft_dtype dt = dtype_of(c, c->in[0]);
    if (!f && (dt == WEFT_F32 || dt == WEFT_F64 || dt == WEFT_F16 || dt == WEFT_BF16)) FAIL("fmod = 0 on floats");
    OUT0(oi_op(c, node_out(c, 0), f ? "fmod" : "remainder", 2, c->in, NULL, 0, NULL, 0));
}

// Identity, and Dropout where it keeps everything: at inference, or in training with a ratio of 0 (the mask
// output, all true, or all ones before opset 10). A training Dropout that drops is random and is not read.
static weft_status h_identity(nctx *c, const char *arg) {
    (void)arg;
    bool train = !strcmp(c->n->op_type, "Dropout") && oi_attr_i(c, "training_mode", 0);
    weft_tensor *t;
    weft_status st;
    if (c->n_in > 2 && c->kin[2] >= 0) { // opset 12+: training_mode as an input
        if ((st = oi_konst_in(c, 2, &t))) return st;
        if (weft_tensor_dtype(t) != WEFT_BOOL || weft_tensor_numel(t) != 1) FAIL("training_mode must be one bool");
        train = *(const uint8_t *)weft_tensor_data(t) != 0;
    }
    if (train) { // the ratio: an attribute before opset 12, an input (default 0.5) from then on
        double ratio = oi_attr_f(c, "ratio", 0.5);
        if (c->n_in > 1 && c->kin[1] >= 0) {
            if ((st = oi_konst_in(c, 1, &t))) return st;
            if (weft_tensor_numel(t) != 1) FAIL("ratio must be one value");
            ratio = weft_tensor_item(t);
        }
        if (ratio != 0) FAIL("training_mode with a ratio other than 0 (a random mask) is not supported");
    }
    int nd = ndim_of(c, c->in[0]);
    int64_t at[1 + WEFT_MAX_DIMS] = {nd};
    sizes_copy(c, c->in[0], at + 1);
    if (wants_out(c, 1)) { // the mask: true everywhere (a broadcast view of one true; ones of x's dtype before opset 10)
        weft_value k = oi_scalar(c, c->m->opset < 10 ? dtype_of(c, c->in[0]) : WEFT_BOOL, 1);
        if (!OK(k) || !OK(c->out[1] = oi_op(c, node_out(c, 1), "expand", 1, &k, at, 1 + nd, NULL, 0)))
            return weft_last_status();
    }
    OUT0(oi_reshape(c, node_out(c, 0), c->in[0], nd, at + 1));
}

static weft_status h_reciprocal(nctx *c, const char *arg) {
    (void)arg;
    weft_value in[2] = {oi_scalar(c, dtype_of(c, c->in[0]), 1.0), c->in[0]};
    if (!OK(in[0])) return weft_last_status();
    OUT0(oi_op(c, node_out(c, 0), "div", 2, in, NULL, 0, NULL, 0));
}

static weft_status h_cast(nctx *c, const char *arg) {
    (void)arg;
    weft_dtype dt;
    if (!weft_onnx_dtype_from((int32_t)oi_attr_i(c, "to", 0), &dt)) FAIL("type %lld is not one weft has", (long long)oi_attr_i(c, "to", 0));
    int64_t a = dt;
    OUT0(oi_op(c, node_out(c, 0), "cast", 1, c->in, &a, 1, NULL, 0));
}

static weft_status h_where(nctx *c, const char *arg) {
    (void)arg;
    if (c->n_in != 3) FAIL("takes 3 inputs");
    OUT0(oi_op(c, node_out(c, 0), "where", 3, c->in, NULL, 0, NULL, 0));
}

// MatMul: numpy's matmul; 1-D operands promoted as numpy does and the added dim removed.
static weft_status h_matmul(nctx *c, const char *arg) {
    (void)arg;
    if (c->n_in != 2) FAIL("takes 2 inputs");
    weft_value a = c->in[0], b = c->in[1];
    int na = ndim_of(c, a), nb = ndim_of(c, b);
    if (na < 1 || nb < 1) FAIL("0-d operands");
    if (na == 1) a = oi_reshape(c, NULL, a, 2, (int64_t[]){1, sizes_of(c, a)[0]});
    if (nb == 1) b = oi_reshape(c, NULL, b, 2, (int64_t[]){sizes_of(c, b)[0], 1});
    if (!OK(a) || !OK(b)) return weft_last_status();
    bool squeeze = na == 1 || nb == 1;
    weft_value y = oi_op(c, squeeze ? NULL : node_out(c, 0), "matmul", 2, (weft_value[]){a, b}, NULL, 0, NULL, 0);
    if (!OK(y) || !squeeze) OUT0(y);
    int nd = ndim_of(c, y);
    int64_t s[WEFT_MAX_DIMS];
    memcpy(s, sizes_of(c, y), sizeof(int64_t) * (size_t)nd);
    if (na == 1 && nb == 1) nd -= 2;                  // a dot product: (1,1) -> 0-d
    else if (nb == 1) nd--;                           // (..., M, 1) -> (..., M)
    else s[nd - 2] = s[nd - 1], nd--;                 // (..., 1, N) -> (..., N)
    OUT0(oi_reshape(c, node_out(c, 0), y, nd, s));
}

// Gemm: alpha op(A) op(B) + beta C.
static weft_status h_gemm(nctx *c, const char *arg) {
    (void)arg;
    if (c->n_in < 2) FAIL("takes 2 or 3 inputs");
    double alpha = oi_attr_f(c, "alpha", 1.0), beta = oi_attr_f(c, "beta", 1.0);
    int64_t tr[2] = {oi_attr_i(c, "transA", 0) != 0, oi_attr_i(c, "transB", 0) != 0};
    bool has_c = c->n_in > 2 && c->kin[2] >= 0 && beta != 0;
    bool last = !has_c && alpha == 1.0;
    weft_value y = oi_op(c, last ? node_out(c, 0) : NULL, "matmul", 2, c->in, tr, 2, NULL, 0);
    if (!OK(y)) return weft_last_status();
    if (alpha != 1.0) {
        y = oi_op(c, has_c ? NULL : node_out(c, 0), "mul_scalar", 1, &y, NULL, 0, &alpha, 1);
        if (!OK(y)) return weft_last_status();
    }
    if (has_c) {
        weft_value cc = c->in[2];
        if (beta != 1.0 && !OK(cc = oi_op(c, NULL, "mul_scalar", 1, &cc, NULL, 0, &beta, 1))) return weft_last_status();
        y = oi_op(c, node_out(c, 0), "add", 2, (weft_value[]){y, cc}, NULL, 0, NULL, 0);
    }
    OUT0(y);
}

static weft_status h_transpose(nctx *c, const char *arg) {
    (void)arg;
    int nd = ndim_of(c, c->in[0]), np;
    const int64_t *perm = oi_attr_ints(c, "perm", &np);
    int64_t p[WEFT_MAX_DIMS];
    if (np >= 0 && np != nd) FAIL("perm has %d entries for %d dims", np, nd);
    for (int d = 0; d < nd; d++) p[d] = perm ? perm[d] : nd - 1 - d;
    OUT0(oi_op(c, node_out(c, 0), "permute", 1, c->in, p, nd, NULL, 0));
}

// Reshape (shape: 0 copies the input's dim unless allowzero, -1 is inferred), Flatten, Squeeze, Unsqueeze.
static weft_status h_reshape(nctx *c, const char *arg) {
    (void)arg;
    int64_t s[WEFT_MAX_DIMS + 1];
    int n;
    weft_status st = oi_konst_ints(c, 1, s, WEFT_MAX_DIMS, &n);
    if (st) return st;
    int nd = ndim_of(c, c->in[0]);
    const int64_t *xs = sizes_of(c, c->in[0]);
    int64_t numel = 1, known = 1;
    for (int d = 0; d < nd; d++) numel *= xs[d];
    int infer = -1;
    for (int d = 0; d < n; d++) {
        if (s[d] == 0 && !oi_attr_i(c, "allowzero", 0)) {
            if (d >= nd) FAIL("shape[%d] = 0 copies a dim the %d-d input lacks", d, nd);
            s[d] = xs[d];
        }
        if (s[d] == -1) {
            if (infer >= 0) FAIL("two -1 in the shape");
            infer = d;
        } else if (s[d] < 0) {
            FAIL("shape[%d] = %lld", d, (long long)s[d]);
        } else if (__builtin_mul_overflow(known, s[d], &known)) {
            FAIL("the shape's product overflows");
        }
    }
    if (infer >= 0) s[infer] = known ? numel / known : 0;
    OUT0(oi_reshape(c, node_out(c, 0), c->in[0], n, s));
}

static weft_status h_flatten(nctx *c, const char *arg) {
    (void)arg;
    int nd = ndim_of(c, c->in[0]);
    const int64_t *xs = sizes_of(c, c->in[0]);
    int64_t ax = oi_attr_i(c, "axis", 1);
    if (ax < 0) ax += nd;
    if (ax < 0 || ax > nd) FAIL("axis %lld for %d dims", (long long)oi_attr_i(c, "axis", 1), nd);
    int64_t s[2] = {1, 1};
    for (int d = 0; d < nd; d++) s[d >= ax] *= xs[d];
    OUT0(oi_reshape(c, node_out(c, 0), c->in[0], 2, s));
}

// The axes of Squeeze / Unsqueeze / the Reduce ops: an attribute before opset 13 (18 for ReduceMean/Max), an
// input from then on. n = -1 when none is given.
static weft_status axes_of(nctx *c, bool as_input, int64_t *ax, int *n) {
    if (as_input) {
        *n = -1;
        if (c->n_in > 1 && c->kin[1] >= 0) return oi_konst_ints(c, 1, ax, WEFT_MAX_DIMS + 1, n);
        return WEFT_OK;
    }
    const int64_t *a = oi_attr_ints(c, "axes", n);
    if (*n > WEFT_MAX_DIMS + 1) FAIL("%d axes", *n);
    for (int i = 0; i < *n; i++) ax[i] = a[i];
    return WEFT_OK;
}

static weft_status h_squeeze(nctx *c, const char *arg) {
    bool unsq = !strcmp(arg, "unsqueeze");
    int64_t ax[WEFT_MAX_DIMS + 1];
    int na;
    weft_status st = axes_of(c, c->m->opset >= 13, ax, &na);
    if (st) return st;
    int nd = ndim_of(c, c->in[0]);
    const int64_t *xs = sizes_of(c, c->in[0]);
    int64_t s[WEFT_MAX_DIMS];
    int n = 0;
    if (unsq) {
        int on = nd + (na > 0 ? na : 0);
        if (na < 1 || on > WEFT_MAX_DIMS) FAIL("bad axes (%d) for %d dims", na, nd);
        bool ins[WEFT_MAX_DIMS] = {false};
        for (int i = 0; i < na; i++) {
            int a = oi_axis(ax[i], on);
            if (a < 0 || ins[a]) FAIL("axis %lld", (long long)ax[i]);
            ins[a] = true;
        }
        for (int d = 0, k = 0; d < on; d++) s[n++] = ins[d] ? 1 : xs[k++];
    } else {
        bool drop[WEFT_MAX_DIMS] = {false};
        for (int i = 0; i < na; i++) {
            int a = oi_axis(ax[i], nd);
            if (a < 0 || xs[a] != 1) FAIL("axis %lld is not a dim of size 1", (long long)ax[i]);
            drop[a] = true;
        }
        for (int d = 0; d < nd; d++)
            if (!(na < 0 ? xs[d] == 1 : drop[d])) s[n++] = xs[d];
    }
    OUT0(oi_reshape(c, node_out(c, 0), c->in[0], n, s));
}

// Slice: starts, ends, axes, steps (inputs from opset 10, attributes before). A negative step (PyTorch's
// exporter reverses pad lists so) runs as index_select with the indices it walks.
static weft_status h_slice(nctx *c, const char *arg) {
    (void)arg;
    int nd = ndim_of(c, c->in[0]);
    int64_t xs[WEFT_MAX_DIMS]; // a copy: adding values may move the graph's
    sizes_copy(c, c->in[0], xs);
    int64_t st_[WEFT_MAX_DIMS], en[WEFT_MAX_DIMS], ax[WEFT_MAX_DIMS], sp[WEFT_MAX_DIMS];
    int ns, ne, na = -1, np = -1;
    weft_status st = WEFT_OK;
    if (c->m->opset >= 10) {
        if ((st = oi_konst_ints(c, 1, st_, WEFT_MAX_DIMS, &ns)) || (st = oi_konst_ints(c, 2, en, WEFT_MAX_DIMS, &ne))) return st;
        if (c->n_in > 3 && c->kin[3] >= 0 && (st = oi_konst_ints(c, 3, ax, WEFT_MAX_DIMS, &na))) return st;
        if (c->n_in > 4 && c->kin[4] >= 0 && (st = oi_konst_ints(c, 4, sp, WEFT_MAX_DIMS, &np))) return st;
    } else {
        const int64_t *a;
        if (!(a = oi_attr_ints(c, "starts", &ns)) || ns > WEFT_MAX_DIMS) FAIL("starts");
        memcpy(st_, a, sizeof(int64_t) * (size_t)ns);
        if (!(a = oi_attr_ints(c, "ends", &ne)) || ne > WEFT_MAX_DIMS) FAIL("ends");
        memcpy(en, a, sizeof(int64_t) * (size_t)ne);
        if ((a = oi_attr_ints(c, "axes", &na))) {
            if (na > WEFT_MAX_DIMS) FAIL("axes");
            memcpy(ax, a, sizeof(int64_t) * (size_t)na);
        }
    }
    if (ne != ns || (na >= 0 && na != ns) || (np >= 0 && np != ns)) FAIL("starts, ends, axes and steps differ in length");
    weft_value v = c->in[0];
    for (int i = 0; i < ns; i++) {
        int d = oi_axis(na >= 0 ? ax[i] : i, nd);
        if (d < 0) FAIL("axis %lld", (long long)(na >= 0 ? ax[i] : i));
        int64_t step = np >= 0 ? sp[i] : 1, n = xs[d];
        if (step == 0) FAIL("step 0");
        for (int j = 0; j < i; j++)
            if (oi_axis(na >= 0 ? ax[j] : j, nd) == d) FAIL("axis %d sliced twice", d);
        if (step < -n && n > 0) step = -n; // (one element, as any step past the dim; INT64_MIN included)
        if (step < 0) { // from b down to e (exclusive): b clamped to [0, n-1], e to [-1, n-1], as ONNX says
            int64_t b = st_[i] < 0 ? (st_[i] < -n ? 0 : st_[i] + n) : st_[i] > n - 1 ? n - 1 : st_[i];
            int64_t e = en[i] < 0 ? (en[i] < -n ? -1 : en[i] + n) : en[i] > n - 1 ? n - 1 : en[i];
            int64_t len = n > 0 && b > e ? (b - e - 1) / -step + 1 : 0;
            weft_tensor *idx = len ? oi_index_new(len) : NULL;
            if (len && !idx) return weft_last_status();
            for (int64_t j = 0; j < len; j++) ((int64_t *)weft_tensor_data(idx))[j] = b + j * step;
            const char *nm = i == ns - 1 ? node_out(c, 0) : NULL;
            v = len ? oi_select(c, nm, v, d, idx) : oi_op(c, nm, "slice", 1, &v, (int64_t[]){d, 0, 0, 1}, 4, NULL, 0);
            if (!OK(v)) return weft_last_status();
            xs[d] = len;
            continue;
        }
        int64_t b = st_[i] < 0 ? st_[i] + n : st_[i], e = en[i] < 0 ? en[i] + n : en[i];
        b = b < 0 ? 0 : b > n ? n : b;
        e = e < 0 ? 0 : e > n ? n : e;
        if (e < b) e = b;
        int64_t at[4] = {d, b, e, step};
        v = oi_op(c, i == ns - 1 ? node_out(c, 0) : NULL, "slice", 1, &v, at, 4, NULL, 0);
        if (!OK(v)) return weft_last_status();
    }
    if (ns == 0) v = oi_reshape(c, node_out(c, 0), v, nd, xs);
    OUT0(v);
}

// Expand: numpy broadcasting of the input against the shape (either side's 1s give way).
static weft_status h_expand(nctx *c, const char *arg) {
    (void)arg;
    int64_t s[WEFT_MAX_DIMS];
    int n;
    weft_status st = oi_konst_ints(c, 1, s, WEFT_MAX_DIMS, &n);
    if (st) return st;
    int nd = ndim_of(c, c->in[0]);
    const int64_t *xs = sizes_of(c, c->in[0]);
    int on = n > nd ? n : nd;
    int64_t at[1 + WEFT_MAX_DIMS] = {on};
    for (int d = 0; d < on; d++) {
        int64_t a = d - (on - nd) >= 0 ? xs[d - (on - nd)] : 1, b = d - (on - n) >= 0 ? s[d - (on - n)] : 1;
        if (a != b && a != 1 && b != 1) FAIL("cannot broadcast dim %d (%lld) to %lld", d, (long long)a, (long long)b);
        at[1 + d] = a == 1 ? b : a;
    }
    OUT0(oi_op(c, node_out(c, 0), "expand", 1, c->in, at, 1 + on, NULL, 0));
}

static weft_status h_concat(nctx *c, const char *arg) {
    (void)arg;
    int64_t d = oi_axis(oi_attr_i(c, "axis", 0), ndim_of(c, c->in[0]));
    if (d < 0) FAIL("axis %lld", (long long)oi_attr_i(c, "axis", 0));
    OUT0(oi_op(c, node_out(c, 0), "concat", c->n_in, c->in, &d, 1, NULL, 0));
}

// Gather along an axis: index_select with the indices flattened, viewed back to
// data[:axis] + indices + data[axis+1:]. Known negative indices are made positive.
// Indices known only at run: where(idx < 0, idx + n, idx), as ONNX's Gather reads them.
weft_value oi_wrap_negative(nctx *c, weft_value idx, int64_t n) {
    weft_dtype dt = dtype_of(c, idx);
    weft_value zero = oi_scalar(c, dt, 0), len = oi_scalar(c, dt, (double)n);
    if (!OK(zero) || !OK(len)) return WEFT_VALUE_NONE;
    weft_value neg = oi_op(c, NULL, "lt", 2, (weft_value[]){idx, zero}, NULL, 0, NULL, 0);
    weft_value up = OK(neg) ? oi_op(c, NULL, "add", 2, (weft_value[]){idx, len}, NULL, 0, NULL, 0) : WEFT_VALUE_NONE;
    return OK(up) ? oi_op(c, NULL, "where", 3, (weft_value[]){neg, up, idx}, NULL, 0, NULL, 0) : WEFT_VALUE_NONE;
}

static weft_status h_gather(nctx *c, const char *arg) {
    (void)arg;
    weft_value x = c->in[0], idx = c->in[1];
    int nd = ndim_of(c, x), ni = ndim_of(c, idx), ax = oi_axis(oi_attr_i(c, "axis", 0), nd);
    if (ax < 0) FAIL("axis %lld", (long long)oi_attr_i(c, "axis", 0));
    if (nd - 1 + ni > WEFT_MAX_DIMS) FAIL("too many dims");
    int64_t xs[WEFT_MAX_DIMS], is[WEFT_MAX_DIMS]; // copies: adding values may move the graph's
    memcpy(xs, sizes_of(c, x), sizeof(int64_t) * (size_t)nd);
    memcpy(is, sizes_of(c, idx), sizeof(int64_t) * (size_t)ni);
    if (dtype_of(c, idx) != WEFT_I32 && dtype_of(c, idx) != WEFT_I64)
        FAIL("indices of type %s (int32 or int64 only)", weft_dtype_name(dtype_of(c, idx)));
    int64_t count = 1;
    for (int d = 0; d < ni; d++) count *= is[d];
    weft_tensor *k = NULL;
    if (c->m->e[c->kin[1]].konst || weft_graph_node_kind(c->m->g, weft_graph_value_node(c->m->g, idx)) == WEFT_NODE_CONSTANT)
        (void)oi_konst_in(c, 1, &k);
    if (k) { // known: negatives wrapped, as int64
        weft_tensor *t = weft_tensor_empty(1, &count, WEFT_I64);
        if (!t) return weft_error(WEFT_ERR_OOM, "no memory");
        int64_t *p = weft_tensor_data(t);
        for (int64_t i = 0; i < count; i++) {
            int64_t v = weft_tensor_dtype(k) == WEFT_I64 ? ((const int64_t *)weft_tensor_data(k))[i]
                                                        : ((const int32_t *)weft_tensor_data(k))[i];
            p[i] = v < 0 ? v + xs[ax] : v;
        }
        idx = oi_konst(c, NULL, t, NULL);
    } else {
        idx = oi_reshape(c, NULL, oi_wrap_negative(c, idx, xs[ax]), 1, &count);
    }
    if (!OK(idx)) return weft_last_status();
    int64_t d = ax;
    weft_value y = oi_op(c, NULL, "index_select", 2, (weft_value[]){x, idx}, &d, 1, NULL, 0);
    if (!OK(y)) return weft_last_status();
    int64_t s[WEFT_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < ax; i++) s[n++] = xs[i];
    for (int i = 0; i < ni; i++) s[n++] = is[i];
    for (int i = ax + 1; i < nd; i++) s[n++] = xs[i];
    OUT0(oi_reshape(c, node_out(c, 0), y, n, s));
}

// Softmax / LogSoftmax: one axis from opset 13; before, the input flattened to 2-D at the axis (default 1).
static weft_status h_softmax(nctx *c, const char *opn) {
    int nd = ndim_of(c, c->in[0]);
    int64_t xs[WEFT_MAX_DIMS]; // a copy: adding values may move the graph's
    sizes_copy(c, c->in[0], xs);
    bool old = c->m->opset < 13;
    int64_t ax = oi_axis(oi_attr_i(c, "axis", old ? 1 : -1), nd);
    if (ax < 0 && nd > 0) FAIL("axis %lld", (long long)oi_attr_i(c, "axis", old ? 1 : -1));
    if (!old || ax == nd - 1 || nd == 0) {
        int64_t d = nd ? ax : 0;
        OUT0(oi_op(c, node_out(c, 0), opn, 1, c->in, &d, 1, NULL, 0));
    }
    int64_t s2[2] = {1, 1}, one = 1;
    for (int d = 0; d < nd; d++) s2[d >= ax] *= xs[d];
    weft_value v = oi_reshape(c, NULL, c->in[0], 2, s2);
    if (!OK(v) || !OK(v = oi_op(c, NULL, opn, 1, &v, &one, 1, NULL, 0))) return weft_last_status();
    OUT0(oi_reshape(c, node_out(c, 0), v, nd, xs));
}

// LayerNormalization(X, Scale, [B]): layer_norm over the dims from axis on; Mean and InvStdDev as views.
static weft_status h_layer_norm(nctx *c, const char *arg) {
    (void)arg;
    int nd = ndim_of(c, c->in[0]);
    int ax = oi_axis(oi_attr_i(c, "axis", -1), nd);
    if (ax < 0) FAIL("axis %lld", (long long)oi_attr_i(c, "axis", -1));
    bool has_b = c->n_in > 2 && c->kin[2] >= 0;
    int64_t at[4] = {nd - ax, 1, has_b, 0};
    double eps = oi_attr_f(c, "epsilon", 1e-5);
    weft_value in[3] = {c->in[0], c->in[1], has_b ? c->in[2] : WEFT_VALUE_NONE}, out[WEFT_GRAPH_MAX_OUT];
    bool stats = wants_out(c, 1) || wants_out(c, 2);
    if (weft_graph_op_named(c->m->g, stats ? tmp_name(c) : node_out(c, 0), "layer_norm", has_b ? 3 : 2, in, at, 4,
                            &eps, 1, out) != WEFT_OK)
        return weft_last_status();
    if (!stats) OUT0(out[0]);
    int64_t xs[WEFT_MAX_DIMS]; // a copy: adding values may move the graph's
    sizes_copy(c, c->in[0], xs);
    int64_t s[WEFT_MAX_DIMS];
    for (int d = 0; d < nd; d++) s[d] = d < ax ? xs[d] : 1;
    for (int k = 0; k < 3; k++) {
        if (!wants_out(c, k)) continue;
        c->out[k] = k == 0 ? oi_reshape(c, node_out(c, 0), out[0], nd, xs) : oi_reshape(c, node_out(c, k), out[k], nd, s);
        if (!OK(c->out[k])) return weft_last_status();
    }
    return WEFT_OK;
}

static weft_status h_batch_norm(nctx *c, const char *arg) {
    (void)arg;
    if (c->n_in != 5) FAIL("takes 5 inputs");
    if (oi_attr_i(c, "training_mode", 0) && c->m->opset >= 14) return oi_batch_norm_train(c, arg);
    if (oi_attr_i(c, "training_mode", 0) || wants_out(c, 1))
        FAIL("training mode before opset 14 (its outputs were others) is not supported");
    int64_t at[5] = {1, 1, 1, 1, 0};
    // ONNX's momentum weighs the running statistics, weft's (PyTorch's) the batch's (unused at inference)
    double f[2] = {1.0 - oi_attr_f(c, "momentum", 0.9), oi_attr_f(c, "epsilon", 1e-5)};
    weft_value out[WEFT_GRAPH_MAX_OUT];
    if (weft_graph_op_named(c->m->g, node_out(c, 0), "batch_norm", 5, c->in, at, 5, f, 2, out) != WEFT_OK)
        return weft_last_status();
    c->out[0] = out[0];
    return WEFT_OK;
}

// ReduceSum (axes an input from opset 13), ReduceMean / ReduceMax / ReduceProd (an attribute up to opset 17).
// ReduceSumSquare ("sum_square") and ReduceLogSum ("log_sum") are sum after x*x and before log.
static weft_status h_reduce(nctx *c, const char *opn) {
    bool square = !strcmp(opn, "sum_square") || !strcmp(opn, "l2"), logsum = !strcmp(opn, "log_sum");
    bool l1 = !strcmp(opn, "l1"), l2 = !strcmp(opn, "l2");
    bool axes_in = !strcmp(opn, "sum") && c->m->opset >= 13; // ReduceSum's only, before opset 18
    if (square || logsum || l1) opn = "sum";
    int nd = ndim_of(c, c->in[0]);
    int64_t ax[WEFT_MAX_DIMS + 1];
    int na;
    weft_status st = axes_of(c, axes_in, ax, &na);
    if (st) return st;
    int64_t mask = 0;
    if (na <= 0) { // none (or an empty axes input): every dim, or nothing with noop_with_empty_axes
        if (oi_attr_i(c, "noop_with_empty_axes", 0) && (square || logsum || l1)) FAIL("noop_with_empty_axes");
        if (oi_attr_i(c, "noop_with_empty_axes", 0)) OUT0(oi_reshape(c, node_out(c, 0), c->in[0], nd, sizes_of(c, c->in[0])));
        mask = nd ? (INT64_C(1) << nd) - 1 : 0;
    }
    for (int i = 0; i < na; i++) {
        int a = oi_axis(ax[i], nd);
        if (a < 0) FAIL("axis %lld", (long long)ax[i]);
        mask |= INT64_C(1) << a;
    }
    int64_t at[3] = {mask, oi_attr_i(c, "keepdims", 1) != 0, 0};
    weft_value x = c->in[0];
    if (!strcmp(opn, "prod")) { // composed (onnx_import_math.c): the output's shape here
        int64_t os[WEFT_MAX_DIMS];
        int on = 0;
        for (int d = 0; d < nd; d++)
            if (!(mask >> d & 1)) os[on++] = sizes_of(c, x)[d];
            else if (at[1]) os[on++] = 1;
        OUT0(oi_prod(c, node_out(c, 0), x, mask, on, os));
    }
    if (square && !OK(x = oi_op(c, NULL, "mul", 2, (weft_value[]){x, x}, NULL, 0, NULL, 0))) return weft_last_status();
    if (l1 && !OK(x = oi_op(c, NULL, "abs", 1, &x, NULL, 0, NULL, 0))) return weft_last_status();
    weft_value y = oi_op(c, logsum || l2 ? NULL : node_out(c, 0), opn, 1, &x, at, 3, NULL, 0);
    if (!(logsum || l2) || !OK(y)) OUT0(y);
    OUT0(oi_op(c, node_out(c, 0), logsum ? "log" : "sqrt", 1, &y, NULL, 0, NULL, 0));
}

// Constant: its value as a CONSTANT node.
static weft_status h_constant(nctx *c, const char *arg) {
    (void)arg;
    const Onnx__AttributeProto *a;
    weft_tensor *t = NULL;
    weft_status st = WEFT_OK;
    if ((a = oi_attr(c, "value")) && a->t) {
        st = weft_onnx_tensor_from(a->t, "value", &t);
    } else if ((a = oi_attr(c, "value_float")) && a->has_f) {
        float f = a->f;
        t = weft_tensor_from_data(&f, 0, NULL, WEFT_F32);
    } else if ((a = oi_attr(c, "value_int")) && a->has_i) {
        t = weft_tensor_from_data(&a->i, 0, NULL, WEFT_I64);
    } else if ((a = oi_attr(c, "value_floats"))) {
        int64_t n = (int64_t)a->n_floats;
        t = weft_tensor_from_data(a->floats, 1, &n, WEFT_F32);
    } else if ((a = oi_attr(c, "value_ints"))) {
        int64_t n = (int64_t)a->n_ints;
        t = weft_tensor_from_data(a->ints, 1, &n, WEFT_I64);
    } else {
        FAIL("only value, value_float(s) and value_int(s) are supported");
    }
    if (st) return st;
    c->out[0] = oi_konst(c, node_out(c, 0), t, &c->konst0);
    return OK(c->out[0]) ? WEFT_OK : weft_last_status();
}

// Shape: the input's static sizes (start / end from opset 15), as a constant.
static weft_status h_shape(nctx *c, const char *arg) {
    (void)arg;
    int nd = ndim_of(c, c->in[0]);
    const int64_t *xs = sizes_of(c, c->in[0]);
    int64_t b = oi_attr_i(c, "start", 0), e = oi_attr_i(c, "end", nd);
    b = b < 0 ? b + nd : b, e = e < 0 ? e + nd : e;
    b = b < 0 ? 0 : b > nd ? nd : b, e = e < 0 ? 0 : e > nd ? nd : e;
    int64_t n = e > b ? e - b : 0;
    weft_tensor *t = weft_tensor_from_data(xs + b, 1, &n, WEFT_I64);
    c->out[0] = oi_konst(c, node_out(c, 0), t, &c->konst0);
    return OK(c->out[0]) ? WEFT_OK : weft_last_status();
}

// Trilu: x where the mask (upper: j - i >= k, else j - i <= k over the last two dims) holds, else 0.
static weft_status h_trilu(nctx *c, const char *arg) {
    (void)arg;
    int nd = ndim_of(c, c->in[0]);
    if (nd < 2) FAIL("needs at least 2 dims");
    int64_t k = 0;
    int n;
    if (c->n_in > 1 && c->kin[1] >= 0) {
        weft_status st = oi_konst_ints(c, 1, &k, 1, &n);
        if (st) return st;
    }
    const int64_t *xs = sizes_of(c, c->in[0]);
    int64_t s[2] = {xs[nd - 2], xs[nd - 1]};
    weft_status st = oi_check_made(2, s);
    if (st) return st;
    weft_tensor *m = weft_tensor_empty(2, s, WEFT_BOOL);
    if (!m) return weft_error(WEFT_ERR_OOM, "no memory");
    uint8_t *p = weft_tensor_data(m);
    bool upper = oi_attr_i(c, "upper", 1) != 0;
    for (int64_t i = 0; i < s[0]; i++)
        for (int64_t j = 0; j < s[1]; j++) p[i * s[1] + j] = upper ? j - i >= k : j - i <= k;
    weft_value mv = oi_konst(c, NULL, m, NULL), zero = oi_scalar(c, dtype_of(c, c->in[0]), 0.0);
    if (!OK(mv) || !OK(zero)) return weft_last_status();
    OUT0(oi_op(c, node_out(c, 0), "where", 3, (weft_value[]){mv, c->in[0], zero}, NULL, 0, NULL, 0));
}

// GatherElements: weft's gather (torch.gather); known negative indices wrapped.
static weft_status h_gather_elements(nctx *c, const char *arg) {
    (void)arg;
    int nd = ndim_of(c, c->in[0]), ax = oi_axis(oi_attr_i(c, "axis", 0), nd);
    if (ax < 0) FAIL("axis %lld", (long long)oi_attr_i(c, "axis", 0));
    weft_value idx = c->in[1];
    if (dtype_of(c, idx) != WEFT_I32 && dtype_of(c, idx) != WEFT_I64)
        FAIL("indices of type %s (int32 or int64 only)", weft_dtype_name(dtype_of(c, idx)));
    weft_tensor *k = NULL;
    if (c->m->e[c->kin[1]].konst) (void)oi_konst_in(c, 1, &k);
    if (k) {
        weft_tensor *t64 = weft_cast(k, WEFT_I64), *t = t64 ? weft_tensor_clone(t64) : NULL; // a copy: k is shared
        weft_tensor_free(t64);
        if (!t) return weft_last_status();
        int64_t *p = weft_tensor_data(t), n = sizes_of(c, c->in[0])[ax];
        for (int64_t i = 0; i < weft_tensor_numel(t); i++) p[i] += p[i] < 0 ? n : 0;
        if (!OK(idx = oi_konst(c, NULL, t, NULL))) return weft_last_status();
    } else if (!OK(idx = oi_wrap_negative(c, idx, sizes_of(c, c->in[0])[ax]))) {
        return weft_last_status();
    }
    int64_t d = ax;
    OUT0(oi_op(c, node_out(c, 0), "gather", 2, (weft_value[]){c->in[0], idx}, &d, 1, NULL, 0));
}

// Split: consecutive slices along an axis, sizes from the split input (opset 13) or attribute, else equal.
static weft_status h_split(nctx *c, const char *arg) {
    (void)arg;
    int nd = ndim_of(c, c->in[0]), ax = oi_axis(oi_attr_i(c, "axis", 0), nd), no = (int)c->n->n_output, n = -1;
    if (ax < 0) FAIL("axis %lld", (long long)oi_attr_i(c, "axis", 0));
    if (no > 8) FAIL("%d outputs", no);
    int64_t sp[8], len = sizes_of(c, c->in[0])[ax];
    weft_status st;
    if (c->m->opset >= 13 && c->n_in > 1 && c->kin[1] >= 0) {
        if ((st = oi_konst_ints(c, 1, sp, 8, &n))) return st;
    } else if (c->m->opset < 13) {
        const int64_t *a = oi_attr_ints(c, "split", &n);
        if (n > 8) FAIL("split has %d entries", n);
        for (int i = 0; i < n; i++) sp[i] = a[i];
    }
    if (n < 0) { // equal parts (the last smaller when they do not divide)
        int64_t part = (len + no - 1) / no;
        for (int i = 0; i < no; i++) sp[i] = part * (i + 1) <= len ? part : len - part * i > 0 ? len - part * i : 0;
        n = no;
    }
    if (n != no) FAIL("%d split sizes for %d outputs", n, no);
    int64_t at = 0;
    for (int i = 0; i < no; i++) {
        if (sp[i] < 0 || sp[i] > len - at) FAIL("split sizes do not fit dim %d (%lld)", ax, (long long)len);
        int64_t a[4] = {ax, at, at + sp[i], 1};
        at += sp[i];
        if (!wants_out(c, i)) continue;
        if (!OK(c->out[i] = oi_op(c, node_out(c, i), "slice", 1, c->in, a, 4, NULL, 0))) return weft_last_status();
    }
    if (at != len) FAIL("split sizes add up to %lld, dim %d is %lld", (long long)at, ax, (long long)len);
    return WEFT_OK;
}

// Clip: maximum with min, then minimum with max (inputs from opset 11, attributes before).
static weft_status h_clip(nctx *c, const char *arg) {
    (void)arg;
    weft_value lo = WEFT_VALUE_NONE, hi = WEFT_VALUE_NONE, v = c->in[0];
    weft_dtype dt = dtype_of(c, v);
    if (c->m->opset >= 11) {
        if (c->n_in > 1 && c->kin[1] >= 0) lo = c->in[1];
        if (c->n_in > 2 && c->kin[2] >= 0) hi = c->in[2];
    } else {
        if (oi_attr(c, "min") && !OK(lo = oi_scalar_as(c, dt, oi_attr_f(c, "min", 0)))) return weft_last_status();
        if (oi_attr(c, "max") && !OK(hi = oi_scalar_as(c, dt, oi_attr_f(c, "max", 0)))) return weft_last_status();
    }
    if (OK(lo) && !OK(v = oi_op(c, OK(hi) ? NULL : node_out(c, 0), "maximum", 2, (weft_value[]){v, lo}, NULL, 0, NULL, 0)))
        return weft_last_status();
    if (OK(hi)) v = oi_op(c, node_out(c, 0), "minimum", 2, (weft_value[]){v, hi}, NULL, 0, NULL, 0);
    if (!OK(lo) && !OK(hi)) v = oi_reshape(c, node_out(c, 0), v, ndim_of(c, v), sizes_of(c, v));
    OUT0(v);
}

// ArgMax / ArgMin (argmax of the negation) along one axis, the first index of the extreme.
static weft_status h_argmax(nctx *c, const char *arg) {
    bool last = oi_attr_i(c, "select_last_index", 0) != 0;
    int nd = ndim_of(c, c->in[0]), ax = oi_axis(oi_attr_i(c, "axis", 0), nd);
    if (ax < 0) FAIL("axis %lld", (long long)oi_attr_i(c, "axis", 0));
    weft_value v = c->in[0];
    int64_t n = sizes_of(c, v)[ax];
    if (last && n > 1) { // the first extreme of the axis reversed, counted from the end
        weft_tensor *rev = oi_index_new(n);
        if (!rev) return weft_last_status();
        for (int64_t i = 0; i < n; i++) ((int64_t *)weft_tensor_data(rev))[i] = n - 1 - i;
        if (!OK(v = oi_select(c, NULL, v, ax, rev))) return weft_last_status();
    }
    if (!strcmp(arg, "argmin")) { // order reversed: -x for floats, -1 - x (= ~x, never overflowing) for integers
        weft_dtype dt = dtype_of(c, v);
        if (dt == WEFT_F32 || dt == WEFT_F64 || dt == WEFT_F16 || dt == WEFT_BF16) {
            v = oi_op(c, NULL, "neg", 1, &v, NULL, 0, NULL, 0);
        } else {
            int64_t wide = WEFT_I32;
            if (dt == WEFT_U8 && !OK(v = oi_op(c, NULL, "cast", 1, &v, &wide, 1, NULL, 0))) return weft_last_status();
            weft_value m1 = oi_scalar(c, dtype_of(c, v), -1);
            v = OK(m1) ? oi_op(c, NULL, "sub", 2, (weft_value[]){m1, v}, NULL, 0, NULL, 0) : m1;
        }
        if (!OK(v)) return weft_last_status();
    }
    int64_t at[3] = {INT64_C(1) << ax, oi_attr_i(c, "keepdims", 1) != 0, 0};
    if (!last || n <= 1) OUT0(oi_op(c, node_out(c, 0), "argmax", 1, &v, at, 3, NULL, 0));
    weft_value r = oi_op(c, NULL, "argmax", 1, &v, at, 3, NULL, 0), top = oi_scalar(c, WEFT_I64, (double)(n - 1));
    if (!OK(r) || !OK(top)) return weft_last_status();
    OUT0(oi_op(c, node_out(c, 0), "sub", 2, (weft_value[]){top, r}, NULL, 0, NULL, 0));
}

// Size: the element count, as an int64 constant.
static weft_status h_size(nctx *c, const char *arg) {
    (void)arg;
    int64_t n = 1;
    for (int d = 0; d < ndim_of(c, c->in[0]); d++) n *= sizes_of(c, c->in[0])[d];
    c->out[0] = oi_konst(c, node_out(c, 0), weft_tensor_from_data(&n, 0, NULL, WEFT_I64), &c->konst0);
    return OK(c->out[0]) ? WEFT_OK : weft_last_status();
}

// ConstantOfShape: a tensor of the (known) shape filled with the value attribute's one element (0.f default).
static weft_status h_constant_of_shape(nctx *c, const char *arg) {
    (void)arg;
    int64_t s[WEFT_MAX_DIMS];
    int n;
    weft_status st = oi_konst_ints(c, 0, s, WEFT_MAX_DIMS, &n);
    if (st || (st = oi_check_made(n, s))) return st;
    const Onnx__AttributeProto *a = oi_attr(c, "value");
    if (!a || !a->t) {
        c->out[0] = oi_konst(c, node_out(c, 0), weft_tensor_zeros(n, s, WEFT_F32), &c->konst0);
        return OK(c->out[0]) ? WEFT_OK : weft_last_status();
    }
    weft_tensor *t, *r = NULL;
    if ((st = weft_onnx_tensor_from(a->t, "value", &t))) return st;
    if (weft_tensor_numel(t) != 1) st = weft_error(WEFT_ERR_FORMAT, "value must hold one element");
    else r = weft_tensor_empty(n, s, weft_tensor_dtype(t));
    if (r) { // the element's bytes repeated (exact for every dtype)
        size_t es = weft_dtype_size(weft_tensor_dtype(t));
        char *p = weft_tensor_data(r);
        for (int64_t i = 0; i < weft_tensor_numel(r); i++) memcpy(p + (size_t)i * es, weft_tensor_data(t), es);
    }
    weft_tensor_free(t);
    if (st) return st;
    c->out[0] = oi_konst(c, node_out(c, 0), r, &c->konst0);
    return OK(c->out[0]) ? WEFT_OK : weft_last_status();
}

// Range(start, limit, delta), all known: start + k delta while short of limit, in their dtype.
static weft_status h_range(nctx *c, const char *arg) {
    (void)arg;
    weft_tensor *t[3];
    weft_status st;
    for (int k = 0; k < 3; k++) {
        if ((st = oi_konst_in(c, k, &t[k]))) return st;
        if (weft_tensor_numel(t[k]) != 1) FAIL("input %d is not a scalar", k);
    }
    weft_dtype dt = weft_tensor_dtype(t[0]);
    if (weft_tensor_dtype(t[1]) != dt || weft_tensor_dtype(t[2]) != dt) FAIL("start, limit and delta differ in type");
    double start = weft_tensor_item(t[0]), limit = weft_tensor_item(t[1]), delta = weft_tensor_item(t[2]);
    int64_t n, is = 0, id = 0;
    if (dt == WEFT_I32 || dt == WEFT_I64) { // exact: ceil((limit - start) / delta) in integers
        int64_t il = dt == WEFT_I64 ? *(const int64_t *)weft_tensor_data(t[1]) : *(const int32_t *)weft_tensor_data(t[1]);
        is = dt == WEFT_I64 ? *(const int64_t *)weft_tensor_data(t[0]) : *(const int32_t *)weft_tensor_data(t[0]);
        id = dt == WEFT_I64 ? *(const int64_t *)weft_tensor_data(t[2]) : *(const int32_t *)weft_tensor_data(t[2]);
        __int128 span = (__int128)il - is, q = id ? span / id : 0;
        if (!id) FAIL("bad range (delta 0)");
        if (q * id != span) q++; // span and id of one sign: the quotient rounds toward 0, i.e. down here
        if (q > MAX_MADE_ELEMS) FAIL("more than %lld elements", (long long)MAX_MADE_ELEMS);
        n = q > 0 ? (int64_t)q : 0;
    } else {
        if (delta == 0 || !isfinite(start) || !isfinite(limit) || !isfinite(delta)) FAIL("bad range");
        double cnt = ceil((limit - start) / delta);
        if (cnt > (double)MAX_MADE_ELEMS) FAIL("%g elements (at most %lld)", cnt, (long long)MAX_MADE_ELEMS);
        n = cnt > 0 ? (int64_t)cnt : 0;
    }
    weft_tensor *r = weft_tensor_empty(1, &n, dt);
    if (!r) return weft_error(WEFT_ERR_OOM, "no memory");
    for (int64_t i = 0; i < n; i++) {
        double x = start + (double)i * delta;
        void *p = weft_tensor_data(r);
        switch (dt) {
        case WEFT_F32: ((float *)p)[i] = (float)((float)start + (float)i * (float)delta); break;
        case WEFT_F64: ((double *)p)[i] = x; break;
        case WEFT_I32: ((int32_t *)p)[i] = (int32_t)(is + (__int128)i * id); break; // i < n: within [start, limit)
        case WEFT_I64: ((int64_t *)p)[i] = (int64_t)(is + (__int128)i * id); break;
        default: weft_tensor_free(r); FAIL("dtype %s", weft_dtype_name(dt));
        }
    }
    c->out[0] = oi_konst(c, node_out(c, 0), r, &c->konst0);
    return OK(c->out[0]) ? WEFT_OK : weft_last_status();
}

// The ONNX ops weft reads (default domain), by op_type.
static const struct {
    const char *onnx;
    handler fn;
    const char *arg; // the weft op, for handlers shared by several
    int min_in;      // inputs it needs
} ops[] = {
    {"Add", h_binary, "add", 2},
    {"Sub", h_binary, "sub", 2},
    {"Mul", h_binary, "mul", 2},
    {"Div", h_binary, "div", 2},
    {"Pow", h_binary, "pow", 2},
    {"Equal", h_binary, "eq", 2},
    {"Less", h_binary, "lt", 2},
    {"LessOrEqual", h_binary, "le", 2},
    {"Greater", h_binary, "gt", 2},
    {"GreaterOrEqual", h_binary, "ge", 2},
    {"Max", h_variadic, "maximum", 1},
    {"Min", h_variadic, "minimum", 1},
    {"Sum", h_variadic, "add", 1},
    {"Mean", h_mean, NULL, 1},
    {"LeakyRelu", h_leaky_relu, NULL, 1},
    {"And", h_logic, "and", 2},
    {"Or", h_logic, "or", 2},
    {"Xor", h_logic, "xor", 2},
    {"Not", h_logic, "not", 1},
    {"Neg", h_unary, "neg", 1},
    {"Abs", h_unary, "abs", 1},
    {"Exp", h_unary, "exp", 1},
    {"Log", h_unary, "log", 1},
    {"Sqrt", h_unary, "sqrt", 1},
    {"Sin", h_unary, "sin", 1},
    {"Cos", h_unary, "cos", 1},
    {"Tanh", h_unary, "tanh", 1},
    {"Sigmoid", h_unary, "sigmoid", 1},
    {"Relu", h_unary, "relu", 1},
    {"Sign", h_unary, "sign", 1},
    {"Erf", h_unary, "erf", 1},
    {"Floor", h_unary, "floor", 1},
    {"Ceil", h_unary, "ceil", 1},
    {"Round", h_unary, "round", 1},
    {"Asin", h_unary, "asin", 1},
    {"Acos", h_unary, "acos", 1},
    {"Atan", h_unary, "atan", 1},
    {"Mod", h_mod, NULL, 2},
    {"Reciprocal", h_reciprocal, NULL, 1},
    {"Identity", h_identity, NULL, 1},
    {"Dropout", h_identity, NULL, 1},
    {"Cast", h_cast, NULL, 1},
    {"Where", h_where, NULL, 3},
    {"MatMul", h_matmul, NULL, 2},
    {"Gemm", h_gemm, NULL, 2},
    {"Transpose", h_transpose, NULL, 1},
    {"Reshape", h_reshape, NULL, 2},
    {"Flatten", h_flatten, NULL, 1},
    {"Squeeze", h_squeeze, "squeeze", 1},
    {"Unsqueeze", h_squeeze, "unsqueeze", 1},
    {"Slice", h_slice, NULL, 1},
    {"Expand", h_expand, NULL, 2},
    {"Concat", h_concat, NULL, 1},
    {"Gather", h_gather, NULL, 2},
    {"Softmax", h_softmax, "softmax", 1},
    {"LogSoftmax", h_softmax, "log_softmax", 1},
    {"LayerNormalization", h_layer_norm, NULL, 2},
    {"BatchNormalization", h_batch_norm, NULL, 5},
    {"Conv", oi_conv, NULL, 2},
    {"Pad", oi_pad, NULL, 1},
    {"ConvTranspose", oi_conv_t, NULL, 2},
    {"MaxPool", oi_pool, "max_pool2d", 1},
    {"AveragePool", oi_pool, "avg_pool2d", 1},
    {"GlobalAveragePool", oi_global_pool, "mean", 1},
    {"GlobalMaxPool", oi_global_pool, "max", 1},
    {"MaxUnpool", oi_max_unpool, NULL, 2},
    {"ReduceSum", h_reduce, "sum", 1},
    {"ReduceProd", h_reduce, "prod", 1},
    {"QuantizeLinear", oi_quant, "q", 2},
    {"DequantizeLinear", oi_quant, "dq", 2},
    {"DynamicQuantizeLinear", oi_dyn_quant, NULL, 1},
    {"ReverseSequence", oi_reverse_sequence, NULL, 2},
    {"Compress", oi_compress, NULL, 2},
    {"DFT", oi_dft, NULL, 1},
    {"STFT", oi_stft, NULL, 2},
    {"ReduceMean", h_reduce, "mean", 1},
    {"ReduceSumSquare", h_reduce, "sum_square", 1},
    {"ReduceLogSum", h_reduce, "log_sum", 1},
    {"ReduceL1", h_reduce, "l1", 1},
    {"ReduceL2", h_reduce, "l2", 1},
    {"ReduceMax", h_reduce, "max", 1},
    {"Constant", h_constant, NULL, 0},
    {"Shape", h_shape, NULL, 1},
    {"Trilu", h_trilu, NULL, 1},
    {"GatherElements", h_gather_elements, NULL, 2},
    {"Split", h_split, NULL, 1},
    {"Clip", h_clip, NULL, 1},
    {"ArgMax", h_argmax, "argmax", 1},
    {"ArgMin", h_argmax, "argmin", 1},
    {"Size", h_size, NULL, 1},
    {"ReduceMin", h_reduce, "min", 1},
    {"ReduceLogSumExp", h_reduce, "logsumexp", 1},
    {"ConstantOfShape", h_constant_of_shape, NULL, 1},
    {"Range", h_range, NULL, 3},
    {"NegativeLogLikelihoodLoss", oi_nll, "nll", 2},
    {"SoftmaxCrossEntropyLoss", oi_nll, "sce", 2},
    {"RNN", oi_rnn, "RNN", 3},
    {"GRU", oi_rnn, "GRU", 3},
    {"LSTM", oi_rnn, "LSTM", 3},
    {"Elu", oi_act, "elu", 1},
    {"Selu", oi_act, "selu", 1},
    {"Celu", oi_act, "celu", 1},
    {"HardSigmoid", oi_act, "hardsigmoid", 1},
    {"HardSwish", oi_act, "hardswish", 1},
    {"ThresholdedRelu", oi_act, "thresholdedrelu", 1},
    {"Shrink", oi_act, "shrink", 1},
    {"Softplus", oi_act, "softplus", 1},
    {"Softsign", oi_act, "softsign", 1},
    {"Tan", oi_act, "tan", 1},
    {"Sinh", oi_act, "sinh", 1},
    {"Cosh", oi_act, "cosh", 1},
    {"Asinh", oi_act, "asinh", 1},
    {"Acosh", oi_act, "acosh", 1},
    {"Atanh", oi_act, "atanh", 1},
    {"IsInf", oi_act, "isinf", 1},
    {"IsNaN", oi_act, "isnan", 1},
    {"PRelu", oi_prelu, NULL, 2},
    {"CastLike", oi_cast_like, NULL, 2},
    {"Hardmax", oi_hardmax, NULL, 1},
    {"OneHot", oi_one_hot, NULL, 3},
    {"CumSum", oi_cumsum, NULL, 2},
    {"EyeLike", oi_eye_like, NULL, 1},
    {"HannWindow", oi_window, "hann", 1},
    {"HammingWindow", oi_window, "hamming", 1},
    {"BlackmanWindow", oi_window, "blackman", 1},
    {"MeanVarianceNormalization", oi_mvn, NULL, 1},
    {"LRN", oi_lrn, NULL, 1},
    {"InstanceNormalization", oi_instance_norm, NULL, 3},
    {"Tile", oi_tile, NULL, 2},
    {"DepthToSpace", oi_depth_space, "d2s", 1},
    {"SpaceToDepth", oi_depth_space, "s2d", 1},
    {"Einsum", oi_einsum, NULL, 1},
    {"GatherND", oi_gather_nd, NULL, 2},
    {"ScatterElements", oi_scatter_elements, NULL, 3},
    {"Scatter", oi_scatter_elements, NULL, 3},
    {"ScatterND", oi_scatter_nd, NULL, 3},
    {"TopK", oi_topk, NULL, 1},
    {"GridSample", oi_grid_sample, NULL, 2},
    {"If", oi_if, NULL, 1},
    {"Loop", oi_loop, NULL, 0},
    {"Scan", oi_scan, NULL, 1},
    {"Resize", oi_resize, "resize", 1},
    {"Upsample", oi_resize, "upsample", 1},
};

// The ops read below opset 7: those whose versions from opset 1 on differ from the one weft reads at most by
// the dropped consumed_inputs attribute, or (Sum, Max, Min, Mean) by broadcasting where they had none. The
// others had legacy broadcasting (Add, ...), other attributes (Pad's paddings, Cast's string type) or a training
// default (Dropout, BatchNormalization).
static const char *const old_ok[] = {
    "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Relu", "Sigmoid", "Tanh", "Elu", "Selu", "HardSigmoid",
    "LeakyRelu", "Softplus", "Softsign", "Not", "Identity", "Flatten", "Transpose", "Shape", "Size", "Softmax",
    "LogSoftmax", "Hardmax", "MatMul", "GlobalAveragePool", "GlobalMaxPool", "ReduceSum", "ReduceMean", "ReduceMax",
    "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp", "ReduceL1", "ReduceL2", "ArgMax", "ArgMin",
    "Squeeze", "Unsqueeze", "Conv", "MaxPool", "AveragePool", "LRN", "Gather", "Clip", "Constant", "Slice", "Sum",
    "Max", "Min", "Mean", "InstanceNormalization",
};

// ---------------------------------------------------------------- the model

static weft_status import_node(imp *m, const Onnx__NodeProto *n, int idx) {
    nctx *c = calloc(1, sizeof *c);
    if (!c) return weft_error(WEFT_ERR_OOM, "onnx_load: %s: no memory", m->path);
    c->m = m, c->n = n;
    weft_status st = WEFT_OK;
    const char *type = n->op_type ? n->op_type : "";
    char why[768] = "";
    int fn = -1;
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        if (!strcmp(ops[k].onnx, type)) fn = (int)k;
    if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx")) {
        st = WEFT_ERR_UNSUPPORTED;
        snprintf(why, sizeof why, "domain '%s' is not supported", n->domain);
    } else if (fn < 0) {
        st = WEFT_ERR_UNSUPPORTED;
        snprintf(why, sizeof why, "weft does not read this op");
    } else if (n->n_output > WEFT_GRAPH_MAX_OUT || n->n_input > MAX_IN) {
        st = WEFT_ERR_UNSUPPORTED;
        snprintf(why, sizeof why, "%zu inputs, %zu outputs", n->n_input, n->n_output);
    }
    if (st == WEFT_OK && m->opset < 7) {
        bool ok = false;
        for (size_t k = 0; k < sizeof old_ok / sizeof old_ok[0]; k++) ok |= !strcmp(old_ok[k], type);
        if (!ok) st = WEFT_ERR_UNSUPPORTED;
        if (!ok) snprintf(why, sizeof why, "weft reads this op from opset 7 (the file's is %lld)", (long long)m->opset);
    }
    if (st == WEFT_OK) {
        size_t cap = n->n_input > MIN_IN ? n->n_input : MIN_IN;
        c->in = malloc(sizeof *c->in * cap), c->kin = malloc(sizeof *c->kin * cap);
        if (!c->in || !c->kin) {
            free(c->in), free(c->kin), free(c);
            return weft_error(WEFT_ERR_OOM, "onnx_load: %s: no memory", m->path);
        }
        for (size_t k = 0; k < cap; k++) c->kin[k] = -1, c->in[k] = WEFT_VALUE_NONE;
        c->n_in = (int)n->n_input;
        while (c->n_in > 0 && !n->input[c->n_in - 1][0]) c->n_in--;
        for (int k = 0; k < c->n_in && st == WEFT_OK; k++) {
            c->kin[k] = n->input[k][0] ? find(m, n->input[k]) : -1;
            c->in[k] = c->kin[k] >= 0 ? m->e[c->kin[k]].v : WEFT_VALUE_NONE;
            if (n->input[k][0] && c->kin[k] < 0) {
                st = WEFT_ERR_FORMAT;
                snprintf(why, sizeof why, "input '%s' is not defined before this node", n->input[k]);
            }
        }
        if (st == WEFT_OK && c->n_in < ops[fn].min_in) {
            st = WEFT_ERR_FORMAT;
            snprintf(why, sizeof why, "%d inputs (it takes at least %d)", c->n_in, ops[fn].min_in);
        }
        for (int k = 0; k < ops[fn].min_in && st == WEFT_OK; k++)
            if (c->kin[k] < 0) { // an empty name where the op needs an input
                st = WEFT_ERR_FORMAT;
                snprintf(why, sizeof why, "input %d is required (its name is empty)", k);
            }
        if (st == WEFT_OK && !first_out(c)) {
            st = WEFT_ERR_FORMAT;
            snprintf(why, sizeof why, "no output name");
        }
    }
    if (st == WEFT_OK) {
        for (int k = 0; k < WEFT_GRAPH_MAX_OUT; k++) c->out[k] = WEFT_VALUE_NONE;
        st = ops[fn].fn(c, ops[fn].arg);
        if (c->bad_attr) { // read as absent: whatever the handler made of that is not the file's model
            st = WEFT_ERR_FORMAT;
            const Onnx__AttributeProto *a = oi_attr(c, c->bad_attr);
            snprintf(why, sizeof why, "attribute '%s' has type %d, not the one the op takes", c->bad_attr, (int)a->type);
        } else if (st != WEFT_OK) {
            snprintf(why, sizeof why, "%s", weft_last_error());
        }
    }
    // bind the outputs the handler made
    for (int k = 0; st == WEFT_OK && k < (int)n->n_output; k++) {
        if (!wants_out(c, k)) continue;
        if (!OK(c->out[k])) {
            st = WEFT_ERR_UNSUPPORTED;
            snprintf(why, sizeof why, "output %d ('%s') is not supported", k, n->output[k]);
        } else {
            st = bind(m, n->output[k], c->out[k], k == 0 ? c->konst0 : NULL);
            if (k == 0) c->konst0 = NULL; // taken
            if (st) snprintf(why, sizeof why, "%s", weft_last_error());
        }
    }
    weft_tensor_free(c->konst0);
    if (st != WEFT_OK)
        weft_error(st, "onnx_load: %s: node %d '%s' (%s): %s", m->path, idx, n->name && n->name[0] ? n->name : "",
                   type, why);
    free(c->in), free(c->kin), free(c);
    return st;
}

// The sizes of graph input vi: from shapes[] when named there, else the file's (every dim a number).
static weft_status input_shape(const imp *m, const Onnx__ValueInfoProto *vi, int n_shapes, const weft_onnx_shape *shapes,
                               int *nd, int64_t *sizes, weft_dtype *dt) {
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type ||
        !tp->tensor_type->has_elem_type || !weft_onnx_dtype_from(tp->tensor_type->elem_type, dt))
        return weft_error(WEFT_ERR_UNSUPPORTED, "onnx_load: %s: input '%s': not a tensor of a type weft has", m->path,
                          vi->name);
    for (int k = 0; k < n_shapes; k++)
        if (shapes[k].name && !strcmp(shapes[k].name, vi->name)) {
            if (shapes[k].ndim < 0 || shapes[k].ndim > WEFT_MAX_DIMS || (shapes[k].ndim && !shapes[k].sizes))
                return weft_error(WEFT_ERR_ARG, "onnx_load: %s: input '%s': bad shape given", m->path, vi->name);
            *nd = shapes[k].ndim;
            if (*nd) memcpy(sizes, shapes[k].sizes, sizeof(int64_t) * (size_t)*nd);
            return WEFT_OK;
        }
    const Onnx__TensorShapeProto *sh = tp->tensor_type->shape;
    if (!sh) return weft_error(WEFT_ERR_ARG, "onnx_load: %s: input '%s' has no shape in the file: give one", m->path, vi->name);
    if (sh->n_dim > WEFT_MAX_DIMS)
        return weft_error(WEFT_ERR_UNSUPPORTED, "onnx_load: %s: input '%s' has %zu dims", m->path, vi->name, sh->n_dim);
    *nd = (int)sh->n_dim;
    for (int d = 0; d < *nd; d++) {
        const Onnx__TensorShapeProto__Dimension *dim = sh->dim[d];
        if (dim->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE || dim->dim_value < 0)
            return weft_error(WEFT_ERR_ARG, "onnx_load: %s: input '%s': dim %d is symbolic ('%s'): give its sizes "
                              "(weft_onnx_shape)", m->path, vi->name, d,
                              dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM ? dim->dim_param : "");
        sizes[d] = dim->dim_value;
    }
    return WEFT_OK;
}

static weft_status import_model(imp *m, const Onnx__ModelProto *mp, int n_shapes, const weft_onnx_shape *shapes) {
    m->opset = -1;
    for (size_t k = 0; k < mp->n_opset_import; k++) {
        const Onnx__OperatorSetIdProto *o = mp->opset_import[k];
        if (!o->domain || !o->domain[0] || !strcmp(o->domain, "ai.onnx")) m->opset = o->has_version ? o->version : 1;
    }
    if (m->opset < 0 && mp->has_ir_version && mp->ir_version <= 2) m->opset = 1;
    if (m->opset < 1 || m->opset > WEFT_ONNX_OPSET) // below 7, only the ops of old_ok (import_node)
        return weft_error(WEFT_ERR_UNSUPPORTED, "onnx_load: %s: opset %lld of the default domain (weft reads 1 to %d)",
                          m->path, (long long)m->opset, WEFT_ONNX_OPSET);
    if (!mp->graph) return weft_error(WEFT_ERR_FORMAT, "onnx_load: %s: no graph", m->path);
    return oi_import_graph(m, mp->graph, n_shapes, shapes);
}

int oi_find(const imp *m, const char *name) { return find(m, name); }
const char *oi_tmp_name(nctx *c) { return tmp_name(c); }
weft_status oi_bind(imp *m, const char *name, weft_value v, weft_tensor *konst) { return bind(m, name, v, konst); }
void oi_imp_clear(imp *m) {
    for (int k = 0; k < m->n; k++) weft_tensor_free(m->e[k].konst);
    free(m->e);
    free(m->slots);
    free(m->outs);
    m->e = NULL, m->slots = NULL, m->outs = NULL, m->n = m->cap = 0, m->n_slots = m->n_outs = 0;
}

// A graph's initializers, inputs and nodes into m (names bound before, such as a branch's outer values, stay).
weft_status oi_import_graph(imp *m, const Onnx__GraphProto *gp, int n_shapes, const weft_onnx_shape *shapes) {
    if (gp->n_sparse_initializer)
        return weft_error(WEFT_ERR_UNSUPPORTED, "onnx_load: %s: sparse initializers are not supported", m->path);
    weft_status st;
    for (size_t k = 0; k < gp->n_initializer; k++) {
        const Onnx__TensorProto *tp = gp->initializer[k];
        if (!tp->name || !tp->name[0]) return weft_error(WEFT_ERR_FORMAT, "onnx_load: %s: initializer %zu has no name", m->path, k);
        weft_tensor *t;
        char what[600];
        snprintf(what, sizeof what, "onnx_load: %s: initializer '%s'", m->path, tp->name);
        if ((st = weft_onnx_tensor_from(tp, what, &t))) return st;
        weft_value v = weft_graph_constant(m->g, tp->name, t);
        if (!OK(v)) {
            weft_tensor_free(t);
            return weft_error(weft_last_status(), "onnx_load: %s: initializer '%s': %s", m->path, tp->name, weft_last_error());
        }
        if ((st = bind(m, tp->name, v, t))) return st;
    }
    for (size_t k = 0; k < gp->n_input; k++) {
        const Onnx__ValueInfoProto *vi = gp->input[k];
        if (!vi->name || !vi->name[0]) return weft_error(WEFT_ERR_FORMAT, "onnx_load: %s: input %zu has no name", m->path, k);
        bool given = false;
        for (int s = 0; s < n_shapes; s++) given |= shapes[s].name && !strcmp(shapes[s].name, vi->name);
        if (find(m, vi->name) >= 0 && !given) continue; // an initializer listed as an input (IR < 4): its default
        const weft_onnx_shape *fixed = NULL;
        for (int s = 0; s < n_shapes; s++)
            if (shapes[s].name && !strcmp(shapes[s].name, vi->name) && shapes[s].value) fixed = &shapes[s];
        if (fixed) { // a constant from here on (a host copy, known at import)
            weft_tensor *c = weft_tensor_to(fixed->value, WEFT_DEVICE_CPU), *t = c ? weft_tensor_clone(c) : NULL;
            weft_tensor_free(c);
            weft_value v = t ? weft_graph_constant(m->g, vi->name, t) : WEFT_VALUE_NONE;
            if (!OK(v)) {
                weft_tensor_free(t);
                return weft_error(WEFT_ERR_ARG, "onnx_load: %s: input '%s': its value: %s", m->path, vi->name,
                                  weft_last_error());
            }
            if ((st = bind(m, vi->name, v, t))) return st;
            continue;
        }
        int nd = 0;
        int64_t sizes[WEFT_MAX_DIMS];
        weft_dtype dt = WEFT_F32;
        if ((st = input_shape(m, vi, n_shapes, shapes, &nd, sizes, &dt))) return st;
        char name[600];
        snprintf(name, sizeof name, "%s", vi->name);
        if (find(m, vi->name) >= 0) snprintf(name, sizeof name, "%s#input", vi->name); // the initializer has its name
        weft_value v = weft_graph_placeholder(m->g, name, nd, sizes, dt);
        if (!OK(v)) return weft_error(weft_last_status(), "onnx_load: %s: input '%s': %s", m->path, vi->name, weft_last_error());
        if ((st = bind(m, vi->name, v, NULL))) return st;
    }
    size_t n_outs = 0;
    for (size_t k = 0; k < gp->n_node; k++) n_outs += gp->node[k]->n_output;
    if (n_outs && !(m->outs = malloc(n_outs * sizeof *m->outs)))
        return weft_error(WEFT_ERR_OOM, "onnx_load: %s: out of memory", m->path);
    for (size_t k = 0; k < gp->n_node; k++)
        for (size_t j = 0; j < gp->node[k]->n_output; j++)
            if (gp->node[k]->output[j] && gp->node[k]->output[j][0]) m->outs[m->n_outs++] = gp->node[k]->output[j];
    if (m->n_outs) qsort(m->outs, m->n_outs, sizeof *m->outs, cmp_str);
    for (size_t k = 0; k < gp->n_node; k++)
        if ((st = import_node(m, gp->node[k], (int)k))) return st;
    for (size_t k = 0; k < gp->n_output; k++) {
        const char *name = gp->output[k]->name;
        if (!name || find(m, name) < 0)
            return weft_error(WEFT_ERR_FORMAT, "onnx_load: %s: output '%s' is not computed by the graph", m->path,
                              name ? name : "");
        // an output that is an input or an initializer itself keeps that node's name, found the same way
    }
    return WEFT_OK;
}

weft_graph *weft_onnx_load(const char *path, int n_shapes, const weft_onnx_shape *shapes) {
    if (!path || n_shapes < 0 || (n_shapes > 0 && !shapes)) {
        weft_error(WEFT_ERR_ARG, "onnx_load: bad arguments (path %p, %d shapes at %p)", (const void *)path, n_shapes,
                   (const void *)shapes);
        return NULL;
    }
    uint8_t *buf;
    size_t len;
    if (weft_onnx_read_file(path, &buf, &len) != WEFT_OK) return NULL;
    Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, len, buf);
    free(buf);
    if (!mp) {
        weft_error(WEFT_ERR_FORMAT, "onnx_load: %s: not an ONNX model (the protobuf does not parse)", path);
        return NULL;
    }
    imp m = {.path = path, .g = weft_graph_new()};
    weft_status st = m.g ? import_model(&m, mp, n_shapes, shapes) : weft_error(WEFT_ERR_OOM, "onnx_load: no memory");
    oi_imp_clear(&m);
    onnx__model_proto__free_unpacked(mp, NULL);
    if (st != WEFT_OK) {
        weft_graph_free(m.g);
        return NULL;
    }
    return m.g;
}
#endif
