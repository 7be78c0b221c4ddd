// ONNX control flow (see onnx_import.h): If, as one cond node (weft_graph_cond), and Loop, as one while node
// (weft_graph_while_loop), whose subgraphs are imported like a model's graph. A subgraph may read any value of
// the scopes around it (ONNX's subgraphs see their outer names): those it reads are found by a scan of it (nested
// subgraphs included); the ones known at load are copied in as constants (so a Reshape there still finds its
// shape), the others become inputs of the node, one placeholder each in every subgraph.
#include <stdlib.h>

#include "onnx_import.h"

#ifdef WEFT_HAVE_ONNX

typedef struct names {
    const char **v;
    int n, cap;
} names;

static bool has_name(const names *s, const char *x) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->v[i], x)) return true;
    return false;
}
static bool add_name(names *s, const char *x) {
    if (has_name(s, x)) return true;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        const char **v = realloc(s->v, sizeof *v * (size_t)cap);
        if (!v) return false;
        s->v = v, s->cap = cap;
    }
    s->v[s->n++] = x;
    return true;
}

// The names gp's nodes (and the subgraphs of their attributes) read that gp does not define, added to out.
static bool free_names(const Onnx__GraphProto *gp, names *out, int depth) {
    names def = {0}, sub = {0};
    bool ok = depth < 32; // nesting deeper than this is refused (a file could nest without end)
    for (size_t k = 0; ok && k < gp->n_initializer; k++) ok = !gp->initializer[k]->name || add_name(&def, gp->initializer[k]->name);
    for (size_t k = 0; ok && k < gp->n_input; k++) ok = !gp->input[k]->name || add_name(&def, gp->input[k]->name);
    for (size_t k = 0; ok && k < gp->n_node; k++) {
        const Onnx__NodeProto *nd = gp->node[k];
        for (size_t i = 0; ok && i < nd->n_input; i++)
            if (nd->input[i] && nd->input[i][0] && !has_name(&def, nd->input[i])) ok = add_name(out, nd->input[i]);
        for (size_t a = 0; ok && a < nd->n_attribute; a++) {
            const Onnx__AttributeProto *at = nd->attribute[a];
            sub.n = 0;
            if (at->g) ok = free_names(at->g, &sub, depth + 1);
            for (size_t j = 0; ok && j < at->n_graphs; j++) ok = free_names(at->graphs[j], &sub, depth + 1);
            for (int j = 0; ok && j < sub.n; j++)
                if (!has_name(&def, sub.v[j])) ok = add_name(out, sub.v[j]);
        }
        for (size_t o = 0; ok && o < nd->n_output; o++)
            if (nd->output[o] && nd->output[o][0]) ok = add_name(&def, nd->output[o]);
    }
    free(def.v);
    free(sub.v);
    return ok;
}

// One subgraph: a new graph with placeholders for the n_lead values lead (bound to gp's first inputs: a loop's
// own variables) and for the outer values it may read (constants or placeholders, in the order of fr), then
// gp's own initializers and nodes; its outputs' values into so (NULL: not wanted), the placeholders into ph.
static weft_status branch(nctx *c, const Onnx__GraphProto *gp, int n_lead, const weft_value *lead, const names *fr,
                          const int *fk, weft_graph **sg, weft_value *so, weft_value *ph) {
    imp sm = {.path = c->m->path, .opset = c->m->opset, .steps = c->m->steps, .g = weft_graph_new()};
    *sg = sm.g;
    weft_status st = sm.g ? WEFT_OK : weft_error(WEFT_ERR_OOM, "no memory");
    for (int i = 0; !st && i < n_lead; i++) {
        const char *nm = i < (int)gp->n_input && gp->input[i]->name && gp->input[i]->name[0] ? gp->input[i]->name : NULL;
        char tmp[32];
        snprintf(tmp, sizeof tmp, "loop#%d", i);
        weft_value v = weft_graph_placeholder(sm.g, nm ? nm : tmp, ndim_of(c, lead[i]), sizes_of(c, lead[i]), dtype_of(c, lead[i]));
        st = OK(v) ? (nm ? oi_bind(&sm, nm, v, NULL) : WEFT_OK) : weft_last_status();
        if (ph) ph[i] = v;
    }
    for (int i = 0; !st && i < fr->n; i++) {
        const entry *e = &c->m->e[fk[i]];
        weft_tensor *t = e->konst ? weft_tensor_clone(e->konst) : NULL;
        weft_value v = t ? weft_graph_constant(sm.g, fr->v[i], t)
                         : weft_graph_placeholder(sm.g, fr->v[i], ndim_of(c, e->v), sizes_of(c, e->v), dtype_of(c, e->v));
        if (!OK(v)) weft_tensor_free(t);
        st = OK(v) ? oi_bind(&sm, fr->v[i], v, t) : weft_last_status();
        if (ph) ph[n_lead + i] = v;
    }
    if (!st) st = oi_import_graph(&sm, gp, 0, NULL);
    for (size_t j = 0; !st && so && j < gp->n_output; j++) {
        int k = gp->output[j]->name ? oi_find(&sm, gp->output[j]->name) : -1;
        if (k < 0) st = weft_error(WEFT_ERR_FORMAT, "branch '%s': output %zu is not computed", gp->name ? gp->name : "", j);
        else so[j] = sm.e[k].v;
    }
    c->m->steps = sm.steps; // the unrolling budget is shared
    oi_imp_clear(&sm);
    return st;
}

// If(cond; then_branch, else_branch): weft's cond; only the branch taken runs. The branches' outputs must agree
// in shape and dtype (weft's shapes are static).
weft_status oi_if(nctx *c, const char *arg) {
    (void)arg;
    const Onnx__AttributeProto *a[2] = {oi_attr_t(c, "then_branch", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH),
                                        oi_attr_t(c, "else_branch", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)};
    if (!a[0] || !a[0]->g || !a[1] || !a[1]->g) FAIL("needs then_branch and else_branch graphs");
    int n_out = (int)c->n->n_output;
    if (n_out < 1 || n_out > WEFT_GRAPH_MAX_OUT) FAIL("%d outputs (1 to %d)", n_out, WEFT_GRAPH_MAX_OUT);
    for (int b = 0; b < 2; b++)
        if ((int)a[b]->g->n_output != n_out) FAIL("a branch has %zu outputs for the node's %d", a[b]->g->n_output, n_out);
    names fr = {0};
    weft_status st = WEFT_OK;
    if (!free_names(a[0]->g, &fr, 0) || !free_names(a[1]->g, &fr, 0)) st = weft_error(WEFT_ERR_OOM, "no memory, or nesting past 32");
    int *fk = st ? NULL : malloc(sizeof(int) * (size_t)(fr.n + 1));
    weft_value *ins = st ? NULL : malloc(sizeof(weft_value) * (size_t)(fr.n + 1));
    if (!st && (!fk || !ins)) st = weft_error(WEFT_ERR_OOM, "no memory");
    int n_in = 0;
    for (int i = 0; !st && i < fr.n; i++) {
        fk[i] = oi_find(c->m, fr.v[i]);
        if (fk[i] < 0) st = weft_error(WEFT_ERR_FORMAT, "a branch reads '%s', which nothing before defines", fr.v[i]);
        else if (!c->m->e[fk[i]].konst) ins[n_in++] = c->m->e[fk[i]].v;
    }
    weft_graph *sg[2] = {NULL, NULL};
    weft_value so[2][WEFT_GRAPH_MAX_OUT], out[WEFT_GRAPH_MAX_OUT];
    for (int b = 0; !st && b < 2; b++) {
        st = branch(c, a[b]->g, 0, NULL, &fr, fk, &sg[b], so[b], NULL);
        if (st) st = weft_error(st, "%s branch: %s", b ? "else" : "then", weft_last_error());
    }
    if (!st) st = weft_graph_cond(c->m->g, oi_tmp_name(c), c->in[0], n_in, ins, sg[0], so[0], sg[1], so[1], n_out, out);
    if (st) weft_graph_free(sg[0]), weft_graph_free(sg[1]); // the caller keeps them on error
    for (int j = 0; !st && j < n_out; j++) // each output a view named after the ONNX value
        if (wants_out(c, j) && !OK(c->out[j] = oi_reshape(c, node_out(c, j), out[j], ndim_of(c, out[j]), sizes_of(c, out[j]))))
            st = weft_last_status();
    free(fr.v);
    free(fk);
    free(ins);
    return st;
}

// Loop(M, cond, v...; body): a while node over the variables (i, cond, v..., the outer values the body reads and
// the load does not know, M). The predicate graph computes cond and i < M; the body graph is ONNX's body
// (i, cond, v -> cond', v') with i + 1 and the passed-through values added. Scan outputs (the body's outputs
// past the loop-carried ones, stacked over the iterations) are not supported: their shape grows with the trip count.
weft_status oi_loop(nctx *c, const char *arg) {
    (void)arg;
    const Onnx__AttributeProto *a = oi_attr_t(c, "body", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH);
    if (!a || !a->g) FAIL("needs a body graph");
    const Onnx__GraphProto *body = a->g;
    int nv = c->n_in - 2; // loop-carried values
    if (nv < 0) nv = 0;
    if ((int)body->n_input != 2 + nv) FAIL("the body takes %zu inputs for %d loop-carried values", body->n_input, nv);
    if ((int)body->n_output != 1 + nv) FAIL("scan outputs are not supported (the body has %zu outputs for %d values)", body->n_output, nv);
    bool has_m = c->n_in > 0 && c->kin[0] >= 0, has_c = c->n_in > 1 && c->kin[1] >= 0;
    weft_tensor *mk = has_m ? c->m->e[c->kin[0]].konst : NULL; // M known at load: a constant of the predicate
    bool m_var = has_m && !mk;
    names fr = {0};
    weft_status st = free_names(body, &fr, 0) ? WEFT_OK : weft_error(WEFT_ERR_OOM, "no memory, or nesting past 32");
    int nl = 2 + nv + has_m, cap = nl + fr.n + 1;
    int *fk = st ? NULL : malloc(sizeof(int) * (size_t)(fr.n + 1));
    weft_value *vars = st ? NULL : malloc(sizeof(weft_value) * (size_t)cap), *ph = st ? NULL : malloc(sizeof(weft_value) * (size_t)cap);
    weft_value *nxt = st ? NULL : malloc(sizeof(weft_value) * (size_t)cap), *outs = st ? NULL : malloc(sizeof(weft_value) * (size_t)cap);
    if (!st && (!fk || !vars || !ph || !nxt || !outs)) st = weft_error(WEFT_ERR_OOM, "no memory");
    int n = 0;
    if (!st) { // i, cond, v...: the loop's own variables
        vars[n++] = oi_scalar(c, WEFT_I64, 0);
        vars[n++] = has_c ? oi_reshape(c, NULL, c->in[1], 0, NULL) : oi_scalar(c, WEFT_BOOL, 1);
        for (int j = 0; j < nv; j++) vars[n++] = c->in[2 + j];
    }
    for (int i = 0; !st && i < fr.n; i++) { // then the outer values (the body's own inputs are not among them)
        fk[i] = oi_find(c->m, fr.v[i]);
        if (fk[i] < 0) st = weft_error(WEFT_ERR_FORMAT, "the body reads '%s', which nothing before defines", fr.v[i]);
        else if (!c->m->e[fk[i]].konst) vars[n++] = c->m->e[fk[i]].v;
    }
    int im = n; // M, last
    if (!st && m_var) vars[n++] = oi_reshape(c, NULL, c->in[0], 0, NULL);
    for (int j = 0; !st && j < n; j++)
        if (!OK(vars[j])) st = weft_last_status();
    int64_t m_numel = 1;
    for (int d = 0; has_m && d < ndim_of(c, c->in[0]); d++) m_numel *= sizes_of(c, c->in[0])[d];
    if (!st && (dtype_of(c, vars[1]) != WEFT_BOOL || (has_m && (dtype_of(c, c->in[0]) != WEFT_I64 || m_numel != 1))))
        st = weft_error(WEFT_ERR_FORMAT, "M must be one int64 and cond one bool");
    if (!st && n > WEFT_GRAPH_MAX_OUT)
        st = weft_error(WEFT_ERR_UNSUPPORTED, "%d loop variables (the counter, cond, %d carried, %d outer values the "
                        "load does not know%s): weft's while takes at most %d", n, nv, n - 2 - nv - m_var,
                        m_var ? ", M" : "", WEFT_GRAPH_MAX_OUT);
    weft_graph *cg = NULL, *bg = NULL;
    weft_value pred = WEFT_VALUE_NONE;
    if (!st) { // the predicate: cond, and i < M
        cg = weft_graph_new();
        st = cg ? WEFT_OK : weft_error(WEFT_ERR_OOM, "no memory");
        for (int j = 0; !st && j < n; j++) {
            char nm[32];
            snprintf(nm, sizeof nm, "v%d", j);
            ph[j] = weft_graph_placeholder(cg, nm, ndim_of(c, vars[j]), sizes_of(c, vars[j]), dtype_of(c, vars[j]));
            if (!OK(ph[j])) st = weft_last_status();
        }
        pred = st ? WEFT_VALUE_NONE : ph[1];
        if (!st && has_m) {
            weft_tensor *mt = mk ? weft_cast(mk, WEFT_I64) : NULL, *m0 = mt ? weft_reshape(mt, 0, NULL) : NULL;
            weft_value mv = m_var ? ph[im] : m0 ? weft_graph_constant(cg, "M", m0) : WEFT_VALUE_NONE;
            weft_tensor_free(mt), weft_tensor_free(m0);
            weft_value lt = OK(mv) ? weft_graph_op1(cg, "lt", 2, (weft_value[]){ph[0], mv}, NULL, 0, NULL, 0) : mv;
            weft_tensor *f = weft_tensor_zeros(0, NULL, WEFT_BOOL);
            weft_value no = f ? weft_graph_constant(cg, "false", f) : WEFT_VALUE_NONE;
            weft_tensor_free(f);
            pred = OK(lt) && OK(no) ? weft_graph_op1(cg, "where", 3, (weft_value[]){lt, ph[1], no}, NULL, 0, NULL, 0) : WEFT_VALUE_NONE;
            if (!OK(pred)) st = weft_last_status();
        }
    }
    weft_value so[WEFT_GRAPH_MAX_OUT + 1];
    if (!st) st = branch(c, body, 2 + nv, vars, &fr, fk, &bg, so, ph);
    if (!st) { // the next variables: i + 1, cond' (one bool), v', the outer values and M as they are
        weft_tensor *t1 = weft_tensor_full(0, NULL, WEFT_I64, 1);
        weft_value one = t1 ? weft_graph_constant(bg, "loop#one", t1) : WEFT_VALUE_NONE;
        weft_tensor_free(t1);
        nxt[0] = OK(one) ? weft_graph_op1(bg, "add", 2, (weft_value[]){ph[0], one}, NULL, 0, NULL, 0) : one;
        nxt[1] = weft_graph_value_ndim(bg, so[0]) ? weft_graph_op1(bg, "view", 1, &so[0], (int64_t[]){0}, 1, NULL, 0) : so[0];
        for (int j = 0; j < nv; j++) nxt[2 + j] = so[1 + j];
        int k = 2 + nv; // branch() made placeholders for the loop's own variables, then the outer values
        for (int i = 0; i < fr.n; i++)
            if (!c->m->e[fk[i]].konst) nxt[k++] = ph[2 + nv + i];
        if (m_var) nxt[k++] = weft_graph_placeholder(bg, "loop#M", 0, NULL, WEFT_I64);
        for (int j = 0; j < n; j++)
            if (!OK(nxt[j])) st = weft_last_status();
    }
    if (!st) st = weft_graph_while_loop(c->m->g, oi_tmp_name(c), cg, pred, bg, nxt, n, vars, outs, 0);
    if (st) weft_graph_free(cg), weft_graph_free(bg);
    for (int j = 0; !st && j < nv; j++)
        if (wants_out(c, j) && !OK(c->out[j] = oi_reshape(c, node_out(c, j), outs[2 + j], ndim_of(c, outs[2 + j]), sizes_of(c, outs[2 + j]))))
            st = weft_last_status();
    free(fr.v), free(fk), free(vars), free(ph), free(nxt), free(outs);
    return st;
}

#endif
