// IR rewrite helpers: build a destination graph from a source graph node by
// node, recording where each source value and node went (see rewrite.h).
#include <stdlib.h>
#include <string.h>

#include <weft/queue.h>

#include "fused.h"
#include "rewrite.h"
#include "trace_hook.h"

weft_status weft_rw_init(weft_rw *rw, const weft_graph *src) {
    memset(rw, 0, sizeof *rw);
    rw->src = src;
    size_t nv = (size_t)(src->n_values ? src->n_values : 1), nn = (size_t)(src->n_nodes ? src->n_nodes : 1);
    rw->vmap = malloc(nv * sizeof *rw->vmap);
    rw->nmap = malloc(nn * sizeof *rw->nmap);
    rw->copied = calloc(nn, 1);
    rw->dst = calloc(1, sizeof *rw->dst); // weft_graph_new without its error path
    if (!rw->vmap || !rw->nmap || !rw->copied || !rw->dst) {
        weft_rw_free(rw, false);
        return weft_error(WEFT_ERR_OOM, "graph_optimize: out of memory");
    }
    for (size_t i = 0; i < nv; i++) rw->vmap[i] = -1;
    for (size_t i = 0; i < nn; i++) rw->nmap[i] = -1;
    return WEFT_OK;
}

void weft_rw_free(weft_rw *rw, bool take_dst) {
    free(rw->vmap);
    free(rw->nmap);
    free(rw->copied);
    if (!take_dst) weft_graph_free(rw->dst);
    memset(rw, 0, sizeof *rw);
}

weft_status weft_rw_finish(weft_rw *rw) {
    const weft_graph *s = rw->src;
    for (int32_t i = 0; i < s->n_nodes; i++) {
        if (!rw->copied[i]) continue;
        const weft_gnode *n = &s->nodes[i];
        for (int k = 0; k < n->n_ctrl; k++) {
            int32_t d = rw->nmap[n->ctrl[k]];
            // A control target that was dropped did no work anyone needs; one
            // forwarded onto this very node is satisfied by running it.
            if (d < 0 || d == rw->nmap[i]) continue;
            weft_status st = weft_graph_add_control_dep(rw->dst, (weft_node_id){rw->nmap[i]}, (weft_node_id){d});
            if (st != WEFT_OK) return st;
        }
    }
    return WEFT_OK;
}

// A name free in both graphs: hint, hint_1, hint_2, ... Copied source names
// are unique in the source, so a synthetic name never collides with a copy
// made later in the same walk.
// The source node `owner` (being replaced, never copied) lends its own name.
static void unique_name(const weft_rw *rw, int32_t owner, const char *hint, char *buf, size_t n) {
    snprintf(buf, n, "%s", hint);
    for (int k = 1;; k++) {
        int32_t s = weft_graph_find_node(rw->src, buf).id;
        if ((s < 0 || (s == owner && !rw->copied[s])) && weft_graph_find_node(rw->dst, buf).id < 0) return;
        snprintf(buf, n, "%s_%d", hint, k);
    }
}

int32_t weft_rw_copy(weft_rw *rw, int32_t s) {
    const weft_graph *src = rw->src;
    const weft_gnode *n = &src->nodes[s];
    int32_t inl[16], *in = n->n_in <= 16 ? inl : malloc((size_t)n->n_in * sizeof *in);
    if (!in) return weft_error(WEFT_ERR_OOM, "graph_optimize: out of memory"), -1;
    for (int k = 0; k < n->n_in; k++) {
        in[k] = rw->vmap[n->in[k]];
        if (in[k] < 0) {
            if (in != inl) free(in);
            return weft_error(WEFT_ERR_STATE, "graph_optimize: node '%s': input %d was dropped", n->name, k), -1;
        }
    }
    const char *base = n->kind == WEFT_NODE_OP ? n->op->name : weft_graph_kind_name(n->kind);
    int32_t d = weft_graph_add_node(rw->dst, "graph_optimize", n->kind, n->name, base, n->n_in, in, n->n_out);
    if (in != inl) free(in);
    if (d < 0) return -1;
    weft_gnode *m = &rw->dst->nodes[d];
    m->op = n->op;
    m->attrs = n->attrs;
    // Variables and constants share the source's tensor: one state for both graphs.
    m->tensor = n->tensor ? weft_tensor_ref(n->tensor) : NULL;
    m->var = n->var >= 0 ? rw->nmap[n->var] : -1;
    if (n->sub[0] && weft_control_copy_node(m, n) != WEFT_OK) return -1; // COND / WHILE: own copies of the subgraphs
    m->queue = n->queue ? weft_queue_ref(n->queue) : NULL; // enqueue/dequeue: the same queue
    if (n->prog && !(m->prog = weft_fused_prog_copy(n->prog)))
        return weft_error(WEFT_ERR_OOM, "graph_optimize: node '%s': out of memory", n->name), -1;
    for (int j = 0; j < n->n_out; j++) {
        weft_gvalue *dv = &rw->dst->values[m->out0 + j];
        const weft_gvalue *sv = &src->values[n->out0 + j];
        dv->ndim = sv->ndim;
        dv->dtype = sv->dtype;
        memcpy(dv->sizes, sv->sizes, sizeof dv->sizes);
        rw->vmap[n->out0 + j] = m->out0 + j;
    }
    rw->nmap[s] = d;
    rw->copied[s] = 1;
    return d;
}

void weft_rw_forward(weft_rw *rw, int32_t s, const int32_t *dv) {
    const weft_gnode *n = &rw->src->nodes[s];
    for (int j = 0; j < n->n_out; j++) rw->vmap[n->out0 + j] = dv[j];
    rw->nmap[s] = rw->dst->values[dv[0]].node;
}

int32_t weft_rw_constant(weft_rw *rw, int32_t owner, const char *hint, weft_tensor *t) {
    char name[160];
    unique_name(rw, owner, hint, name, sizeof name);
    weft_value v = weft_graph_constant(rw->dst, name, t); // a detached alias: same storage
    weft_tensor_free(t);
    return v.id;
}

int32_t weft_rw_op(weft_rw *rw, int32_t owner, const char *hint, const weft_op_def *op, int n_in, const int32_t *in,
                   const weft_attrs *at) {
    char name[160];
    unique_name(rw, owner, hint, name, sizeof name);
    weft_value vin[16], out[WEFT_GRAPH_MAX_OUT];
    if (n_in > 16) return weft_error(WEFT_ERR_ARG, "graph_optimize: node '%s': too many inputs", name), -1;
    for (int k = 0; k < n_in; k++) vin[k] = (weft_value){in[k]};
    if (weft_graph_op_named(rw->dst, name, op->name, n_in, vin, at->i, 16, at->f, 4, out) != WEFT_OK) return -1;
    return out[0].id;
}

const weft_gnode *weft_rw_producer(const weft_rw *rw, int32_t dv) {
    return &rw->dst->nodes[rw->dst->values[dv].node];
}

weft_tensor *weft_rw_const(const weft_rw *rw, int32_t dv) {
    const weft_gnode *n = weft_rw_producer(rw, dv);
    return n->kind == WEFT_NODE_CONSTANT ? n->tensor : NULL;
}

bool weft_rw_const_all(const weft_rw *rw, int32_t dv, double c) {
    weft_tensor *t = weft_rw_const(rw, dv);
    if (!t || t->numel > 4096 || t->numel == 0) return false; // a 0-element constant still broadcasts
    double buf[4096];
    if (weft_tensor_to_f64(t, buf, t->numel) != WEFT_OK) {
        weft_clear_error();
        return false;
    }
    for (int64_t i = 0; i < t->numel; i++)
        if (!(buf[i] == c)) return false;
    return true;
}

bool weft_rw_aliases_state(const weft_rw *rw, int32_t dv) {
    for (;;) {
        const weft_gnode *n = weft_rw_producer(rw, dv);
        if (n->kind == WEFT_NODE_VARIABLE || n->kind == WEFT_NODE_ASSIGN || n->kind == WEFT_NODE_ASSIGN_ADD)
            return true;
        if (n->kind != WEFT_NODE_OP || !(n->op->flags & WEFT_OPF_VIEW)) return false;
        dv = n->in[0];
    }
}

bool weft_rw_contiguous(const weft_rw *rw, int32_t dv) {
    for (;;) {
        const weft_gnode *n = weft_rw_producer(rw, dv);
        switch (n->kind) {
        case WEFT_NODE_PLACEHOLDER: return true; // the executor makes feeds contiguous
        case WEFT_NODE_CONSTANT:
        case WEFT_NODE_VARIABLE: return weft_tensor_is_contiguous(n->tensor);
        case WEFT_NODE_OP:
            if (!(n->op->flags & WEFT_OPF_VIEW)) return true; // the dispatcher allocates contiguous outputs
            if (strcmp(n->op->name, "view") != 0) return false;
            dv = n->in[0]; // a view of a contiguous tensor is contiguous
            continue;
        default: return false;
        }
    }
}

bool weft_rw_rewritable(const weft_gnode *n) {
    if (n->kind != WEFT_NODE_OP || n->n_ctrl > 0) return false;
    // batch_norm writes its running statistics in place: not a pure function;
    // a random op (dropout) draws a fresh mask each run: folding would freeze one.
    return !(n->op->flags & (WEFT_OPF_STATEFUL | WEFT_OPF_RANDOM)) && strcmp(n->op->name, "batch_norm") != 0;
}

bool weft_rw_same_meta(const weft_rw *rw, int32_t dv, int32_t sv) {
    const weft_gvalue *a = &rw->dst->values[dv], *b = &rw->src->values[sv];
    return a->dtype == b->dtype && weft_shape_equal(a->ndim, a->sizes, b->ndim, b->sizes);
}

weft_status weft_rw_eval(const weft_op_def *op, int n_in, weft_tensor *const *in, const weft_attrs *at,
                         weft_tensor **out) {
    struct weft_graph *tracing = weft_trace_active; // a pass must not record into a trace
    weft_trace_active = NULL;
    bool prev = weft_grad_set_enabled(false);
    weft_status st = weft_op_apply(op, n_in, in, at, out);
    weft_grad_set_enabled(prev);
    weft_trace_active = tracing;
    return st;
}

weft_status weft_rw_each(weft_rw *rw, weft_pass_io *io, weft_rw_node_fn fn) {
    for (int32_t s = 0; s < rw->src->n_nodes; s++) {
        int r = fn(rw, s, io);
        if (r < 0) return weft_last_status();
        if (r > 0) io->changed += r;
        else if (weft_rw_copy(rw, s) < 0) return weft_last_status();
    }
    return WEFT_OK;
}
