// ONNX control flow (see onnx_import.h): If, as one cond node (weft_graph_cond) whose branches are weft
// subgraphs imported like a model's graph. A branch may read any value of the scopes around it (ONNX's
// subgraphs see their outer names): those it reads are found by a scan of the branch (nested subgraphs
// included); the ones known at load are copied into both branches as constants (so a Reshape there still
// finds its shape), the others become the cond's inputs, one placeholder each in both branches.
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

// One branch: a new graph with the outer values it may read (constants or placeholders, in the order of fr),
// then the branch's own initializers and nodes; its outputs' values into so.
static weft_status branch(nctx *c, const Onnx__GraphProto *gp, const names *fr, const int *fk, weft_graph **sg,
                          weft_value *so) {
    imp sm = {.path = c->m->path, .opset = c->m->opset, .steps = c->m->steps, .g = weft_graph_new()};
    *sg = sm.g;
    weft_status st = sm.g ? WEFT_OK : weft_error(WEFT_ERR_OOM, "no memory");
    for (int i = 0; !st && i < fr->n; i++) {
        const entry *e = &c->m->e[fk[i]];
        weft_tensor *t = e->konst ? weft_tensor_clone(e->konst) : NULL;
        weft_value v = t ? weft_graph_constant(sm.g, fr->v[i], t)
                         : weft_graph_placeholder(sm.g, fr->v[i], ndim_of(c, e->v), sizes_of(c, e->v), dtype_of(c, e->v));
        if (!OK(v)) weft_tensor_free(t);
        st = OK(v) ? oi_bind(&sm, fr->v[i], v, t) : weft_last_status();
    }
    if (!st) st = oi_import_graph(&sm, gp, 0, NULL);
    for (size_t j = 0; !st && j < gp->n_output; j++) {
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
        st = branch(c, a[b]->g, &fr, fk, &sg[b], so[b]);
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

#endif
