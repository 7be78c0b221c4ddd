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

// A Scan's body reads, per iteration t, element t of each scan input along its axis (T - 1 - t where reversed).
typedef struct scan_in {
    int n_state, n_scan;
    const int64_t *axis;
    const bool *rev;
    int64_t trips;
} scan_in;

// Iteration t's position: t, or T - 1 - t where reversed (a 0-d int64 of sg).
static weft_value iter_pos(weft_graph *sg, weft_value t, bool rev, int64_t trips) {
    if (!rev) return t;
    weft_tensor *k = weft_tensor_full(0, NULL, WEFT_I64, (double)(trips - 1));
    weft_value kv = k ? weft_graph_constant(sg, NULL, k) : WEFT_VALUE_NONE;
    weft_tensor_free(k);
    return OK(kv) ? weft_graph_op1(sg, "sub", 2, (weft_value[]){kv, t}, NULL, 0, NULL, 0) : kv;
}

// Element t of x (a placeholder of sg) along axis: index_select of one index, that dim dropped.
static weft_value scan_elem(weft_graph *sg, weft_value t, weft_value x, int axis, bool rev, int64_t trips) {
    weft_value ix = iter_pos(sg, t, rev, trips);
    ix = OK(ix) ? weft_graph_op1(sg, "view", 1, &ix, (int64_t[]){1, 1}, 2, NULL, 0) : ix;
    weft_value e = OK(ix) ? weft_graph_op1(sg, "index_select", 2, (weft_value[]){x, ix}, (int64_t[]){axis}, 1, NULL, 0) : ix;
    int nd = weft_graph_value_ndim(sg, x);
    if (!OK(e) || nd < 1) return WEFT_VALUE_NONE;
    int64_t at[WEFT_MAX_DIMS] = {nd - 1};
    for (int d = 0, k = 1; d < nd; d++)
        if (d != axis) at[k++] = weft_graph_value_sizes(sg, x)[d];
    return weft_graph_op1(sg, "view", 1, &e, at, nd, NULL, 0);
}

// One subgraph: a new graph with placeholders for the n_lead values lead (bound to gp's first inputs: a loop's
// own variables) and for the outer values it may read (constants or placeholders, in the order of fr), then
// gp's own initializers and nodes; its outputs' values into so (NULL: not wanted), the placeholders into ph.
// With si (a Scan), lead is (t, the states, the scan inputs): the states are bound to gp's first inputs, element t
// of each scan input to the inputs after them.
static weft_status branch(nctx *c, const Onnx__GraphProto *gp, int n_lead, const weft_value *lead, const names *fr,
                          const int *fk, const scan_in *si, weft_graph **sg, weft_value *so, weft_value *ph) {
    imp sm = {.path = c->m->path, .opset = c->m->opset, .steps = c->m->steps, .g = weft_graph_new()};
    *sg = sm.g;
    weft_status st = sm.g ? WEFT_OK : weft_error(WEFT_ERR_OOM, "no memory");
    weft_value sp[WEFT_GRAPH_MAX_OUT + 1]; // (Scan: t, then the scan inputs' placeholders)
    for (int i = 0; !st && i < n_lead; i++) {
        int gi = si ? (i >= 1 && i <= si->n_state ? i - 1 : -1) : i; // the body input lead i is bound to
        const char *nm = gi >= 0 && gi < (int)gp->n_input && gp->input[gi]->name && gp->input[gi]->name[0] ? gp->input[gi]->name : NULL;
        char tmp[32];
        snprintf(tmp, sizeof tmp, "loop#%d", i);
        weft_value v = weft_graph_placeholder(sm.g, nm ? nm : tmp, ndim_of(c, lead[i]), sizes_of(c, lead[i]), dtype_of(c, lead[i]));
        st = OK(v) ? (nm ? oi_bind(&sm, nm, v, NULL) : WEFT_OK) : weft_last_status();
        if (ph) ph[i] = v;
        if (si && (i == 0 || i > si->n_state)) sp[i ? i - si->n_state : 0] = v;
    }
    for (int j = 0; !st && si && j < si->n_scan; j++) { // element t of each scan input
        const char *nm = si->n_state + j < (int)gp->n_input ? gp->input[si->n_state + j]->name : NULL;
        weft_value e = scan_elem(sm.g, sp[0], sp[1 + j], (int)si->axis[j], si->rev[j], si->trips);
        st = !OK(e) ? weft_last_status() : nm && nm[0] ? oi_bind(&sm, nm, e, NULL) : WEFT_OK;
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
        st = branch(c, a[b]->g, 0, NULL, &fr, fk, NULL, &sg[b], so[b], NULL);
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

// A while node's predicate graph (*cg, the caller's to free either way) with a placeholder per loop variable, in cph.
static weft_status pred_graph(nctx *c, int n, const weft_value *vars, weft_graph **cg, weft_value *cph) {
    if (!(*cg = weft_graph_new())) return weft_error(WEFT_ERR_OOM, "no memory");
    for (int j = 0; j < n; j++) {
        char nm[32];
        snprintf(nm, sizeof nm, "v%d", j);
        cph[j] = weft_graph_placeholder(*cg, nm, ndim_of(c, vars[j]), sizes_of(c, vars[j]), dtype_of(c, vars[j]));
        if (!OK(cph[j])) return weft_last_status();
    }
    return WEFT_OK;
}

// Whether a Loop body's cond output is always true: its cond input passed through (itself, or an Identity of it), or
// a Constant true. (The loop's initial cond is checked by the caller.)
static bool cond_stays_true(const Onnx__GraphProto *body) {
    const char *out = body->n_output ? body->output[0]->name : NULL, *in = body->n_input > 1 ? body->input[1]->name : NULL;
    if (!out || !out[0]) return false;
    if (in && !strcmp(in, out)) return true;
    for (size_t k = 0; k < body->n_node; k++) {
        const Onnx__NodeProto *nd = body->node[k];
        bool makes = false;
        for (size_t j = 0; j < nd->n_output; j++) makes |= nd->output[j] && !strcmp(nd->output[j], out);
        if (!makes) continue;
        if (!strcmp(nd->op_type, "Identity")) return in && nd->n_input == 1 && nd->input[0] && !strcmp(nd->input[0], in);
        if (strcmp(nd->op_type, "Constant") || nd->n_attribute != 1 || !nd->attribute[0]->t) return false;
        const Onnx__TensorProto *t = nd->attribute[0]->t; // one bool: in int32_data or raw_data
        if (!t->has_data_type || t->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__BOOL) return false;
        size_t numel = 1;
        for (size_t d = 0; d < t->n_dims; d++) numel *= t->dims[d] >= 0 ? (size_t)t->dims[d] : 0;
        if (numel != 1) return false;
        return t->n_int32_data == 1 ? t->int32_data[0] != 0 : t->has_raw_data && t->raw_data.len == 1 && t->raw_data.data[0];
    }
    return false;
}

// The shapes of the body's scan outputs so[0..ns) (values of the body graph bg), each as (trips, its dims): nd counts
// the trips; their numel. Each trip copies the (trips, numel) buffer (scatter_add makes a new one), so a buffer may
// hold at most 2^26 elements and the copies 2^36 in all.
static weft_status scan_meta(weft_graph *bg, const weft_value *so, int ns, int64_t trips, int *nd,
                             int64_t (*sizes)[WEFT_MAX_DIMS], int64_t *numel, weft_dtype *dt) {
    for (int k = 0; k < ns; k++) {
        int r = weft_graph_value_ndim(bg, so[k]);
        if (r < 0 || r + 1 > WEFT_MAX_DIMS)
            return weft_error(WEFT_ERR_UNSUPPORTED, "scan output %d has %d dims (at most %d)", k, r, WEFT_MAX_DIMS - 1);
        nd[k] = r + 1, dt[k] = weft_graph_value_dtype(bg, so[k]), sizes[k][0] = trips, numel[k] = 1;
        for (int d = 0; d < r; d++) numel[k] *= (sizes[k][1 + d] = weft_graph_value_sizes(bg, so[k])[d]);
        double all = (double)trips * (double)numel[k];
        if (all > (double)(INT64_C(1) << 26) || all * (double)trips > (double)(INT64_C(1) << 36))
            return weft_error(WEFT_ERR_UNSUPPORTED, "scan output %d: %lld trips of %lld elements (each trip copies the "
                              "buffer of them all: at most 2^26 elements, 2^36 copied)", k, (long long)trips,
                              (long long)numel[k]);
    }
    return WEFT_OK;
}

// Zero buffers (trips, numel[k]) as constants of g, appended to vars at *n.
static weft_status scan_buffers(weft_graph *g, int ns, int64_t trips, const int64_t *numel, const weft_dtype *dt,
                                weft_value *vars, int *n) {
    for (int k = 0; k < ns; k++) {
        weft_tensor *z = weft_tensor_zeros(2, (int64_t[]){trips, numel[k]}, dt[k]);
        weft_value v = z ? weft_graph_constant(g, NULL, z) : WEFT_VALUE_NONE;
        weft_tensor_free(z);
        if (!OK(v)) return weft_last_status();
        vars[(*n)++] = v;
    }
    return WEFT_OK;
}

// Iteration i's row of a scan output: buf (M, numel) with row v added at position i (buf is zero there).
static weft_value scan_row(weft_graph *bg, weft_value i, weft_value buf, weft_value v, int64_t numel) {
    if (!OK(i)) return i;
    v = weft_graph_op1(bg, "copy", 1, &v, NULL, 0, NULL, 0); // (contiguous, for the view)
    weft_value src = OK(v) ? weft_graph_op1(bg, "view", 1, &v, (int64_t[]){2, 1, numel}, 3, NULL, 0) : v;
    weft_value ix = weft_graph_op1(bg, "view", 1, &i, (int64_t[]){2, 1, 1}, 3, NULL, 0);
    ix = OK(ix) ? weft_graph_op1(bg, "expand", 1, &ix, (int64_t[]){2, 1, numel}, 3, NULL, 0) : ix;
    ix = OK(ix) ? weft_graph_op1(bg, "copy", 1, &ix, NULL, 0, NULL, 0) : ix;
    if (!OK(src) || !OK(ix)) return WEFT_VALUE_NONE;
    return weft_graph_op1(bg, "scatter_add", 3, (weft_value[]){buf, ix, src}, (int64_t[]){0}, 1, NULL, 0);
}

// Loop(M, cond, v...; body): a while node over the variables (i, cond, v..., the outer values the body reads and
// the load does not know, M). The predicate graph computes cond and i < M; the body graph is ONNX's body
// (i, cond, v -> cond', v') with i + 1 and the passed-through values added. Scan outputs (the body's outputs
// past the loop-carried ones, stacked over the iterations) need a trip count known at load: M known, and a cond
// that cannot end the loop early (absent or a known true, passed through by the body or a true constant). Each is
// then one more variable, an (M, numel) buffer of zeros that iteration i adds its row to (scatter_add), viewed as
// (M, dims...) after the loop; the rows' shapes come from the body, imported before the predicate.
weft_status oi_loop(nctx *c, const char *arg) {
    (void)arg;
    const Onnx__AttributeProto *a = oi_attr_t(c, "body", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH);
    if (!a || !a->g) FAIL("needs a body graph");
    const Onnx__GraphProto *body = a->g;
    int nv = c->n_in - 2; // loop-carried values
    if (nv < 0) nv = 0;
    if ((int)body->n_input != 2 + nv) FAIL("the body takes %zu inputs for %d loop-carried values", body->n_input, nv);
    int ns = (int)body->n_output - 1 - nv; // scan outputs
    if (ns < 0) FAIL("the body has %zu outputs for %d loop-carried values", body->n_output, nv);
    bool has_m = c->n_in > 0 && c->kin[0] >= 0, has_c = c->n_in > 1 && c->kin[1] >= 0;
    int64_t trips = 0;
    if (ns) { // (M and cond computed at load where they can be)
        weft_tensor *mt = NULL, *ct = NULL;
        double mv = 0, cv = 0;
        if (!has_m || oi_konst_in(c, 0, &mt) || weft_tensor_numel(mt) != 1 || weft_tensor_to_f64(mt, &mv, 1) ||
            !(mv >= 0 && mv <= (1 << 24)))
            FAIL("scan outputs need M known at load (0 to 2^24 trips)");
        if ((has_c && (oi_konst_in(c, 1, &ct) || weft_tensor_numel(ct) != 1 || weft_tensor_to_f64(ct, &cv, 1) || cv == 0)) ||
            !cond_stays_true(body))
            FAIL("scan outputs need a loop that cannot end early (cond absent or a known true, and the body's cond "
                 "its input or a true constant)");
        trips = (int64_t)mv;
    }
    weft_tensor *mk = has_m ? c->m->e[c->kin[0]].konst : NULL; // M known at load: a constant of the predicate
    bool m_var = has_m && !mk;
    names fr = {0};
    weft_status st = free_names(body, &fr, 0) ? WEFT_OK : weft_error(WEFT_ERR_OOM, "no memory, or nesting past 32");
    int nl = 2 + nv + has_m, cap = nl + fr.n + ns + 1;
    int *fk = st ? NULL : malloc(sizeof(int) * (size_t)(fr.n + 1));
    weft_value *vars = st ? NULL : malloc(sizeof(weft_value) * (size_t)cap), *ph = st ? NULL : malloc(sizeof(weft_value) * (size_t)cap);
    weft_value *nxt = st ? NULL : malloc(sizeof(weft_value) * (size_t)cap), *outs = st ? NULL : malloc(sizeof(weft_value) * (size_t)cap);
    weft_value *cph = st ? NULL : malloc(sizeof(weft_value) * (size_t)cap);
    if (!st && (!fk || !vars || !ph || !nxt || !outs || !cph)) st = weft_error(WEFT_ERR_OOM, "no memory");
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
    if (!st && n + ns > WEFT_GRAPH_MAX_OUT)
        st = weft_error(WEFT_ERR_UNSUPPORTED, "%d loop variables (the counter, cond, %d carried, %d outer values the "
                        "load does not know%s, %d scan outputs): weft's while takes at most %d", n + ns, nv,
                        n - 2 - nv - m_var, m_var ? ", M" : "", ns, WEFT_GRAPH_MAX_OUT);
    weft_graph *cg = NULL, *bg = NULL;
    weft_value so[WEFT_GRAPH_MAX_OUT + 1], pred = WEFT_VALUE_NONE;
    if (!st) st = branch(c, body, 2 + nv, vars, &fr, fk, NULL, &bg, so, ph);
    int nb = n, scan_nd[WEFT_GRAPH_MAX_OUT];
    int64_t scan_sizes[WEFT_GRAPH_MAX_OUT][WEFT_MAX_DIMS], scan_numel[WEFT_GRAPH_MAX_OUT];
    weft_dtype scan_dt[WEFT_GRAPH_MAX_OUT];
    if (!st && ns) st = scan_meta(bg, so + 1 + nv, ns, trips, scan_nd, scan_sizes, scan_numel, scan_dt);
    if (!st && ns) st = scan_buffers(c->m->g, ns, trips, scan_numel, scan_dt, vars, &n); // after every other variable
    if (!st) { // the predicate: cond, and i < M (its own placeholders, in cph)
        st = pred_graph(c, n, vars, &cg, cph);
        pred = st ? WEFT_VALUE_NONE : cph[1];
        if (!st && has_m) {
            weft_tensor *mt = mk ? weft_cast(mk, WEFT_I64) : NULL, *m0 = mt ? weft_reshape(mt, 0, NULL) : NULL;
            weft_value mv = m_var ? cph[im] : m0 ? weft_graph_constant(cg, "M", m0) : WEFT_VALUE_NONE;
            weft_tensor_free(mt), weft_tensor_free(m0);
            weft_value lt = OK(mv) ? weft_graph_op1(cg, "lt", 2, (weft_value[]){cph[0], mv}, NULL, 0, NULL, 0) : mv;
            weft_tensor *f = weft_tensor_zeros(0, NULL, WEFT_BOOL);
            weft_value no = f ? weft_graph_constant(cg, "false", f) : WEFT_VALUE_NONE;
            weft_tensor_free(f);
            pred = OK(lt) && OK(no) ? weft_graph_op1(cg, "where", 3, (weft_value[]){lt, cph[1], no}, NULL, 0, NULL, 0) : WEFT_VALUE_NONE;
            if (!OK(pred)) st = weft_last_status();
        }
    }
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
        for (int j = 0; j < ns; j++, k++) {
            weft_value b = weft_graph_placeholder(bg, NULL, 2, (int64_t[]){trips, scan_numel[j]}, scan_dt[j]);
            nxt[k] = OK(b) ? scan_row(bg, ph[0], b, so[1 + nv + j], scan_numel[j]) : b;
        }
        for (int j = 0; j < n; j++)
            if (!OK(nxt[j])) st = weft_last_status();
    }
    if (!st) st = weft_graph_while_loop(c->m->g, oi_tmp_name(c), cg, pred, bg, nxt, n, vars, outs, 0);
    if (st) weft_graph_free(cg), weft_graph_free(bg);
    for (int j = 0; !st && j < nv; j++)
        if (wants_out(c, j) && !OK(c->out[j] = oi_reshape(c, node_out(c, j), outs[2 + j], ndim_of(c, outs[2 + j]), sizes_of(c, outs[2 + j]))))
            st = weft_last_status();
    for (int j = 0; !st && j < ns; j++) // (M, numel) as (M, the row's dims)
        if (wants_out(c, nv + j) && !OK(c->out[nv + j] = oi_reshape(c, node_out(c, nv + j), outs[nb + j], scan_nd[j], scan_sizes[j])))
            st = weft_last_status();
    free(fr.v), free(fk), free(vars), free(ph), free(nxt), free(outs), free(cph);
    return st;
}

// Scan (opset 9 on; states, then num_scan_inputs scan inputs; body: states and one element of each -> states' and
// one element of each scan output): a while node over (t, the states, the scan inputs passed through, the outer
// values the body reads that the load does not know, the scan outputs' buffers), predicate t < T, T the scan
// inputs' length along their axes (static). Element t is read with index_select (T - 1 - t where reversed); scan
// outputs are built as Loop's are, then their dim of T moved to scan_output_axes.
weft_status oi_scan(nctx *c, const char *arg) {
    (void)arg;
    if (c->m->opset < 9) FAIL("Scan-8 (batched, with sequence_lens) is not read: Scan from opset 9");
    const Onnx__AttributeProto *a = oi_attr_t(c, "body", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH);
    if (!a || !a->g) FAIL("needs a body graph");
    const Onnx__GraphProto *body = a->g;
    int64_t nsi = oi_attr_i(c, "num_scan_inputs", 0);
    int ns_in = nsi >= 1 && nsi <= WEFT_GRAPH_MAX_OUT ? (int)nsi : 0, N = c->n_in - ns_in, K = (int)c->n->n_output - N;
    if (!ns_in || N < 0) FAIL("num_scan_inputs %lld for %d inputs", (long long)nsi, c->n_in);
    if (K < 0 || (int)body->n_input != N + ns_in || (int)body->n_output != N + K)
        FAIL("the body's %zu inputs and %zu outputs do not fit %d states, %d scan inputs, %d scan outputs",
             body->n_input, body->n_output, N, ns_in, K);
    if (1 + N + ns_in + K > WEFT_GRAPH_MAX_OUT)
        FAIL("%d states, %d scan inputs, %d scan outputs: weft's while takes at most %d variables with the counter", N,
             ns_in, K, WEFT_GRAPH_MAX_OUT);
    for (int k = 0; k < c->n_in; k++)
        if (c->kin[k] < 0) FAIL("input %d is missing", k);
    int n_ia, n_id, n_oa, n_od;
    const int64_t *ia = oi_attr_ints(c, "scan_input_axes", &n_ia), *id = oi_attr_ints(c, "scan_input_directions", &n_id);
    const int64_t *oa = oi_attr_ints(c, "scan_output_axes", &n_oa), *od = oi_attr_ints(c, "scan_output_directions", &n_od);
    if ((ia && n_ia != ns_in) || (id && n_id != ns_in) || (oa && n_oa != K) || (od && n_od != K))
        FAIL("scan axes or directions: one per scan input or output");
    int64_t iax[WEFT_GRAPH_MAX_OUT], T = -1;
    bool irev[WEFT_GRAPH_MAX_OUT];
    for (int j = 0; j < ns_in; j++) {
        weft_value x = c->in[N + j];
        int r = ndim_of(c, x);
        iax[j] = ia ? ia[j] : 0;
        if (iax[j] < 0) iax[j] += r;
        if (iax[j] < 0 || iax[j] >= r) FAIL("scan input %d: axis %lld of %d dims", j, (long long)(ia ? ia[j] : 0), r);
        int64_t len = sizes_of(c, x)[iax[j]];
        if (T >= 0 && len != T) FAIL("scan inputs of lengths %lld and %lld", (long long)T, (long long)len);
        T = len, irev[j] = id && id[j] != 0;
    }
    scan_in si = {N, ns_in, iax, irev, T};
    names fr = {0};
    weft_status st = free_names(body, &fr, 0) ? WEFT_OK : weft_error(WEFT_ERR_OOM, "no memory, or nesting past 32");
    int cap = 1 + N + ns_in + fr.n + K + 1;
    int *fk = st ? NULL : malloc(sizeof(int) * (size_t)(fr.n + 1));
    weft_value *vars = st ? NULL : malloc(sizeof(weft_value) * (size_t)cap), *ph = st ? NULL : malloc(sizeof(weft_value) * (size_t)cap);
    weft_value *nxt = st ? NULL : malloc(sizeof(weft_value) * (size_t)cap), *outs = st ? NULL : malloc(sizeof(weft_value) * (size_t)cap);
    weft_value *cph = st ? NULL : malloc(sizeof(weft_value) * (size_t)cap);
    if (!st && (!fk || !vars || !ph || !nxt || !outs || !cph)) st = weft_error(WEFT_ERR_OOM, "no memory");
    int n = 0;
    if (!st) {
        vars[n++] = oi_scalar(c, WEFT_I64, 0);
        for (int j = 0; j < N + ns_in; j++) vars[n++] = c->in[j];
    }
    for (int i = 0; !st && i < fr.n; i++) {
        fk[i] = oi_find(c->m, fr.v[i]);
        if (fk[i] < 0) st = weft_error(WEFT_ERR_FORMAT, "the body reads '%s', which nothing before defines", fr.v[i]);
        else if (!c->m->e[fk[i]].konst) vars[n++] = c->m->e[fk[i]].v;
    }
    if (!st && n + K > WEFT_GRAPH_MAX_OUT)
        st = weft_error(WEFT_ERR_UNSUPPORTED, "%d loop variables with the outer values the body reads (at most %d)",
                        n + K, WEFT_GRAPH_MAX_OUT);
    for (int j = 0; !st && j < n; j++)
        if (!OK(vars[j])) st = weft_last_status();
    weft_graph *cg = NULL, *bg = NULL;
    weft_value so[WEFT_GRAPH_MAX_OUT + 1], pred = WEFT_VALUE_NONE;
    if (!st) st = branch(c, body, 1 + N + ns_in, vars, &fr, fk, &si, &bg, so, ph);
    int nb = n, o_nd[WEFT_GRAPH_MAX_OUT];
    int64_t o_sizes[WEFT_GRAPH_MAX_OUT][WEFT_MAX_DIMS], o_numel[WEFT_GRAPH_MAX_OUT];
    weft_dtype o_dt[WEFT_GRAPH_MAX_OUT];
    if (!st && K) st = scan_meta(bg, so + N, K, T, o_nd, o_sizes, o_numel, o_dt);
    if (!st && K) st = scan_buffers(c->m->g, K, T, o_numel, o_dt, vars, &n);
    if (!st) { // t < T (its own placeholders, in cph)
        st = pred_graph(c, n, vars, &cg, cph);
        weft_tensor *tt = st ? NULL : weft_tensor_full(0, NULL, WEFT_I64, (double)T);
        weft_value tv = tt ? weft_graph_constant(cg, "T", tt) : WEFT_VALUE_NONE;
        weft_tensor_free(tt);
        pred = OK(tv) ? weft_graph_op1(cg, "lt", 2, (weft_value[]){cph[0], tv}, NULL, 0, NULL, 0) : tv;
        if (!st && !OK(pred)) st = weft_last_status();
    }
    if (!st) { // t + 1, the states', the scan inputs and the outer values as they are, each buffer with its row
        weft_tensor *t1 = weft_tensor_full(0, NULL, WEFT_I64, 1);
        weft_value one = t1 ? weft_graph_constant(bg, "scan#one", t1) : WEFT_VALUE_NONE;
        weft_tensor_free(t1);
        nxt[0] = OK(one) ? weft_graph_op1(bg, "add", 2, (weft_value[]){ph[0], one}, NULL, 0, NULL, 0) : one;
        int k = 1;
        for (int j = 0; j < N; j++) nxt[k++] = so[j];
        for (int j = 0; j < ns_in; j++, k++) nxt[k] = ph[k];
        for (int i = 0; i < fr.n; i++)
            if (!c->m->e[fk[i]].konst) nxt[k++] = ph[1 + N + ns_in + i];
        for (int j = 0; j < K; j++, k++) {
            weft_value b = weft_graph_placeholder(bg, NULL, 2, (int64_t[]){T, o_numel[j]}, o_dt[j]);
            weft_value pos = OK(b) ? iter_pos(bg, ph[0], od && od[j] != 0, T) : b;
            nxt[k] = scan_row(bg, pos, b, so[N + j], o_numel[j]);
        }
        for (int j = 0; j < n; j++)
            if (!OK(nxt[j])) st = weft_last_status();
    }
    if (!st) st = weft_graph_while_loop(c->m->g, oi_tmp_name(c), cg, pred, bg, nxt, n, vars, outs, 0);
    if (st) weft_graph_free(cg), weft_graph_free(bg);
    for (int j = 0; !st && j < N; j++)
        if (wants_out(c, j) && !OK(c->out[j] = oi_reshape(c, node_out(c, j), outs[1 + j], ndim_of(c, outs[1 + j]), sizes_of(c, outs[1 + j]))))
            st = weft_last_status();
    for (int k = 0; !st && k < K; k++) { // (T, numel) as (T, the element's dims), T's dim moved to its axis
        if (!wants_out(c, N + k)) continue;
        int r = o_nd[k];
        int64_t ax = oa ? oa[k] : 0;
        if (ax < 0) ax += r;
        if (ax < 0 || ax >= r) {
            st = weft_error(WEFT_ERR_FORMAT, "scan output %d: axis %lld of %d dims", k, (long long)(oa ? oa[k] : 0), r);
            break;
        }
        weft_value v = oi_reshape(c, ax ? NULL : node_out(c, N + k), outs[nb + k], r, o_sizes[k]);
        if (ax && OK(v)) {
            int64_t p[WEFT_MAX_DIMS];
            for (int d = 0; d < r; d++) p[d] = d < ax ? d + 1 : d == ax ? 0 : d;
            v = oi_op(c, NULL, "permute", 1, &v, p, r, NULL, 0);
            v = oi_reshape(c, node_out(c, N + k), v, r, sizes_of(c, v));
        }
        if (!OK(c->out[N + k] = v)) st = weft_last_status();
    }
    free(fr.v), free(fk), free(vars), free(ph), free(nxt), free(outs), free(cph);
    return st;
}

#endif
