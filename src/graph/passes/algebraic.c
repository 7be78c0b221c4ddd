// Algebraic simplification (the seeds' rewrite rules). Each rule fires only
// when the result is the same value: same static shape and dtype as the node
// it replaces, and the same numbers (bit-identical, or equal under IEEE
// comparison for x + 0, which turns -0 into +0). Rules that are exact only in
// real arithmetic (float x*0, float reassociation) need fast_math.
//
//   mul(x, 1), mul(1, x), mul_scalar(x, 1)      -> x
//   add(x, 0), add(0, x), sub(x, 0), add_scalar(x, 0) -> x
//   mul(x, 0), mul(0, x), mul_scalar(x, 0)      -> zeros (integers; floats with fast_math)
//   add(c1, add(x, c2)) and commuted forms      -> add(x, c1 + c2)   (ditto)
//   add_scalar(add_scalar(x, a), b)             -> add_scalar(x, a + b) (ditto)
//   cast(cast(x, T1), T2), T1 lossless for x    -> cast(x, T2), or x when T2 is x's dtype
//   cast(x, dtype of x)                         -> x
//   view(view(x, s1), s2), x contiguous         -> view(x, s2), or x when s2 is x's shape
//   view(x, shape of x), x contiguous           -> x
//   copy(x), x contiguous                       -> x  (values are immutable; layout kept)
//
// A rule that would return x itself is skipped when x aliases graph state (a
// variable read, through views): the op's output is a private value, the
// variable is live and may be assigned later in the same run.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../rewrite.h"

typedef struct alg {
    weft_rw *rw;
    weft_pass_io *io;
    int32_t s;            // source node
    const weft_gnode *n;  // its source node
    int32_t out;          // its source output value
    int32_t in[2];        // its dst inputs
} alg;

static bool is_op(const weft_gnode *n, const char *name) {
    return n->kind == WEFT_NODE_OP && !strcmp(n->op->name, name);
}
static weft_dtype vdt(const weft_rw *rw, int32_t dv) { return (weft_dtype)rw->dst->values[dv].dtype; }
static bool is_int(weft_dtype dt) { return dt == WEFT_I32 || dt == WEFT_I64 || dt == WEFT_U8 || dt == WEFT_BOOL; }

// Replace the node by dst value x (when allowed).
static int to_value(alg *a, int32_t x) {
    if (!weft_rw_same_meta(a->rw, x, a->out) || weft_rw_aliases_state(a->rw, x)) return 0;
    weft_rw_forward(a->rw, a->s, &x);
    return 1;
}

// Replace the node by a zeros constant of its own shape.
static int to_zeros(alg *a) {
    const weft_gvalue *v = &a->rw->src->values[a->out];
    weft_tensor *z = weft_tensor_full_on(v->ndim, v->sizes, (weft_dtype)v->dtype, 0, weft_graph_device(a->rw->src));
    if (!z) return -1;
    int32_t dv = weft_rw_constant(a->rw, a->s, a->n->name, z);
    if (dv < 0) return -1;
    weft_rw_forward(a->rw, a->s, &dv);
    return 1;
}

// Replace the node by a new op (named after it); checked against its shape.
static int to_op(alg *a, const weft_op_def *op, int n_in, const int32_t *in, const weft_attrs *at) {
    int32_t dv = weft_rw_op(a->rw, a->s, a->n->name, op, n_in, in, at);
    if (dv < 0) return -1;
    if (!weft_rw_same_meta(a->rw, dv, a->out))
        return weft_error(WEFT_ERR_STATE, "graph_optimize: node '%s': a rewrite changed its shape", a->n->name), -1;
    weft_rw_forward(a->rw, a->s, &dv);
    return 1;
}

// Exact for integers; floats only with fast_math.
static bool exact_or_fast(const alg *a, weft_dtype dt) { return is_int(dt) || a->io->fast_math; }

static void bcast(const weft_gvalue *x, const weft_gvalue *y, int *nd, int64_t *sz) {
    *nd = x->ndim > y->ndim ? x->ndim : y->ndim;
    for (int d = 0; d < *nd; d++) {
        int dx = d - (*nd - x->ndim), dy = d - (*nd - y->ndim);
        int64_t a = dx >= 0 ? x->sizes[dx] : 1, b = dy >= 0 ? y->sizes[dy] : 1;
        sz[d] = a == 1 ? b : a;
    }
}

// add(c1, add(x, c2)) in any operand order -> add(x, c1 + c2).
static int add_chain(alg *a) {
    weft_rw *rw = a->rw;
    for (int o = 0; o < 2; o++) {
        int32_t c1 = a->in[o], inner = a->in[1 - o];
        weft_tensor *t1 = weft_rw_const(rw, c1);
        const weft_gnode *m = weft_rw_producer(rw, inner);
        if (!t1 || !is_op(m, "add") || !weft_rw_rewritable(m)) continue;
        for (int p = 0; p < 2; p++) {
            int32_t c2 = m->in[p], x = m->in[1 - p];
            weft_tensor *t2 = weft_rw_const(rw, c2);
            if (!t2 || weft_rw_const(rw, x)) continue; // both constant: folding's job
            // The new add's shape: broadcast(x, broadcast(c1, c2)), the same as
            // before by associativity of broadcasting; checked anyway.
            int nd, nd2;
            int64_t sz[WEFT_MAX_DIMS] = {0}, sz2[WEFT_MAX_DIMS] = {0};
            bcast(&rw->dst->values[c1], &rw->dst->values[c2], &nd, sz);
            weft_gvalue cv = {.ndim = (int8_t)nd};
            memcpy(cv.sizes, sz, sizeof sz);
            bcast(&rw->dst->values[x], &cv, &nd2, sz2);
            const weft_gvalue *ov = &rw->src->values[a->out];
            if (!weft_shape_equal(nd2, sz2, ov->ndim, ov->sizes)) continue;
            weft_tensor *sum = NULL;
            if (weft_rw_eval(a->n->op, 2, (weft_tensor *[]){t1, t2}, &a->n->attrs, &sum) != WEFT_OK) {
                weft_clear_error();
                continue;
            }
            char hint[160];
            snprintf(hint, sizeof hint, "%s/const", a->n->name);
            int32_t c = weft_rw_constant(rw, -1, hint, sum);
            if (c < 0) return -1;
            return to_op(a, a->n->op, 2, (int32_t[]){x, c}, &a->n->attrs);
        }
    }
    return 0;
}

// Casts that keep every value of `from` exactly (so a second cast from `to`
// sees the same number the first one did). Conservative on purpose.
static bool lossless(weft_dtype from, weft_dtype to) {
    if (from == to) return true;
    switch (from) {
    case WEFT_BOOL: return true; // 0 and 1 are exact everywhere
    case WEFT_U8: return to != WEFT_BOOL;
    case WEFT_I32: return to == WEFT_I64 || to == WEFT_F64;
    case WEFT_F16:
    case WEFT_BF16: return to == WEFT_F32 || to == WEFT_F64;
    case WEFT_F32: return to == WEFT_F64;
    default: return false;
    }
}

static int rule(alg *a) {
    weft_rw *rw = a->rw;
    const weft_gnode *n = a->n;
    const char *op = n->op->name;
    weft_dtype dt = (weft_dtype)rw->src->values[a->out].dtype;
    double f0 = n->attrs.f[0];
    if (!strcmp(op, "mul")) {
        for (int o = 0; o < 2; o++)
            if (weft_rw_const_all(rw, a->in[1 - o], 1.0)) return to_value(a, a->in[o]);
        for (int o = 0; o < 2; o++)
            if (weft_rw_const_all(rw, a->in[o], 0.0) && exact_or_fast(a, dt)) return to_zeros(a);
        return 0;
    }
    if (!strcmp(op, "mul_scalar")) {
        if (f0 == 1.0) return to_value(a, a->in[0]);
        if (f0 == 0.0 && exact_or_fast(a, dt)) return to_zeros(a);
        return 0;
    }
    if (!strcmp(op, "add") || !strcmp(op, "sub")) {
        bool add = !strcmp(op, "add");
        if (weft_rw_const_all(rw, a->in[1], 0.0)) return to_value(a, a->in[0]);
        if (add && weft_rw_const_all(rw, a->in[0], 0.0)) return to_value(a, a->in[1]);
        if (add && exact_or_fast(a, dt)) return add_chain(a);
        return 0;
    }
    if (!strcmp(op, "add_scalar")) {
        if (f0 == 0.0) return to_value(a, a->in[0]);
        const weft_gnode *m = weft_rw_producer(rw, a->in[0]);
        if (!is_op(m, "add_scalar") || !weft_rw_rewritable(m)) return 0;
        double f1 = m->attrs.f[0];
        // Integer kernels truncate the scalar first: exact only for whole numbers.
        bool ok = is_int(dt) ? (f0 == trunc(f0) && f1 == trunc(f1) && fabs(f0 + f1) < 9e15) : a->io->fast_math;
        if (!ok) return 0;
        weft_attrs at = n->attrs;
        at.f[0] = f0 + f1;
        return to_op(a, n->op, 1, &m->in[0], &at);
    }
    if (!strcmp(op, "cast")) {
        int32_t x = a->in[0];
        if (vdt(rw, x) == dt) return to_value(a, x);
        const weft_gnode *m = weft_rw_producer(rw, x);
        if (!is_op(m, "cast") || !weft_rw_rewritable(m)) return 0;
        int32_t xx = m->in[0];
        if (!lossless(vdt(rw, xx), (weft_dtype)m->attrs.i[0])) return 0;
        if (vdt(rw, xx) == dt) {
            int r = to_value(a, xx);
            if (r) return r;
        }
        return to_op(a, n->op, 1, &xx, &n->attrs);
    }
    if (!strcmp(op, "copy")) {
        // A private copy of an immutable value is that value, unless a
        // consumer relies on the copy's contiguous layout (a later view).
        if (weft_rw_contiguous(rw, a->in[0])) return to_value(a, a->in[0]);
        return 0;
    }
    if (!strcmp(op, "view")) {
        // view(x) to x's own shape (reshape(-1, K) in backward rules) is x.
        if (weft_rw_contiguous(rw, a->in[0]) && weft_rw_same_meta(rw, a->in[0], a->out)) {
            int r = to_value(a, a->in[0]);
            if (r) return r;
        }
        const weft_gnode *m = weft_rw_producer(rw, a->in[0]);
        if (!is_op(m, "view") || !weft_rw_rewritable(m)) return 0;
        int32_t xx = m->in[0];
        if (!weft_rw_contiguous(rw, xx)) return 0; // a view of a contiguous tensor always exists
        if (weft_rw_same_meta(rw, xx, a->out)) {
            int r = to_value(a, xx);
            if (r) return r;
        }
        return to_op(a, n->op, 1, &xx, &n->attrs);
    }
    return 0;
}

static int node_rule(weft_rw *rw, int32_t s, weft_pass_io *io) {
    const weft_gnode *n = &rw->src->nodes[s];
    if (!weft_rw_rewritable(n) || n->n_out != 1 || n->n_in > 2) return 0;
    alg a = {.rw = rw, .io = io, .s = s, .n = n, .out = n->out0};
    for (int k = 0; k < n->n_in; k++) a.in[k] = rw->vmap[n->in[k]];
    int r = rule(&a);
    return r > 0 ? 1 : r; // one simplification per node
}

weft_status weft_pass_algebraic(weft_rw *rw, weft_pass_io *io) { return weft_rw_each(rw, io, node_rule); }
