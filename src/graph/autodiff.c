// Symbolic autodiff: append the backward graph of a scalar to a graph without
// running the forward.
//
// The op table's backward rules are written with public ops, so they can be
// replayed on stand-in tensors: every forward value the rules read gets a
// data-less tensor of its shape, dtype and run-time layout, mapped to that
// value in the graph's trace map. The rules then run with this thread in
// symbolic mode (the dispatcher infers shapes and skips kernels) and the
// graph tracing (the dispatcher's trace hook records each op they call as a
// new node consuming the mapped values). Tensors the rules make from data
// (zeros, scalars) become CONSTANTs when an op consumes them.
//
// No rule reads tensor data on the host (checked: src/ops/def_*.c backward
// rules only call ops and make constants), so the replay is exact.
#include <stdlib.h>
#include <string.h>

#include "graph_impl.h"
#include "trace_hook.h"

_Thread_local bool weft_op_symbolic;

// Thread state while rules are replayed into one graph (nests for cond branches).
typedef struct sym_state {
    struct weft_graph *trace;
    bool symbolic, grad;
} sym_state;

static sym_state sym_enter(weft_graph *g) {
    sym_state s = {weft_trace_active, weft_op_symbolic, weft_grad_set_enabled(false)};
    weft_trace_active = g;
    weft_op_symbolic = true;
    return s;
}
static void sym_leave(sym_state s) {
    weft_trace_active = s.trace;
    weft_op_symbolic = s.symbolic;
    weft_grad_set_enabled(s.grad);
}

typedef struct ad_ctx {
    weft_graph *g;
    const char *fn;
    int32_t N0, V0;   // forward nodes and values (backward nodes come after)
    uint8_t *rg;      // [V0] value requires grad: reached from wrt through differentiable nodes
    weft_tensor **sv; // [V0] stand-ins of forward values
    weft_tensor **gb; // [V0] accumulated gradients (stand-ins of backward values or data constants)
    weft_device dev;  // where the graph's state lives: stand-ins and seeds are made there
} ad_ctx;

static const char *node_op(const weft_gnode *n) {
    return n->kind == WEFT_NODE_OP ? n->op->name : weft_graph_kind_name(n->kind);
}

static weft_status fail_at(const ad_ctx *c, int32_t node, weft_status st, const char *what) {
    char msg[640];
    snprintf(msg, sizeof msg, "%s", weft_last_error());
    const weft_gnode *n = &c->g->nodes[node];
    return weft_error(st != WEFT_OK ? st : WEFT_ERR_STATE, "%s: node '%s' (op %s): %s%s%s", c->fn, n->name, node_op(n),
                      what, *msg ? ": " : "", msg);
}

// The value a tensor stands for; a data tensor never seen becomes a CONSTANT.
static int32_t value_of(ad_ctx *c, weft_tensor *t) {
    int32_t v = weft_ptrmap_get(&c->g->trace_map, t);
    if (v >= 0) return v;
    if (!t->storage->data && t->numel > 0)
        return weft_error(WEFT_ERR_STATE, "%s: a symbolic tensor was never recorded (internal)", c->fn), -1;
    weft_value cv = weft_graph_constant(c->g, NULL, t);
    if (cv.id < 0) return -1;
    if (!weft_graph_trace_map(c->g, t, cv.id)) return weft_error(WEFT_ERR_OOM, "%s: out of memory", c->fn), -1;
    return cv.id;
}

// The stand-in of forward value v: the run-time layout matters (rules test
// contiguity), so views are replayed symbolically on their input's stand-in.
static weft_tensor *standin(ad_ctx *c, int32_t v) {
    if (c->sv[v]) return c->sv[v];
    weft_graph *g = c->g;
    const weft_gvalue *gv = &g->values[v];
    const weft_gnode *n = &g->nodes[gv->node];
    weft_tensor *t = NULL;
    if (n->kind == WEFT_NODE_CONSTANT || n->kind == WEFT_NODE_VARIABLE) {
        t = weft_tensor_detach(n->tensor); // real data and layout; never read by a rule
    } else if (n->kind == WEFT_NODE_OP && (n->op->flags & WEFT_OPF_VIEW)) {
        weft_tensor *in[16], *out[WEFT_MAX_OP_OUT];
        if (n->n_in > 16) return weft_error_null(WEFT_ERR_ARG, "%s: node '%s': too many inputs", c->fn, n->name);
        int32_t nid = gv->node;
        for (int k = 0; k < g->nodes[nid].n_in; k++)
            if (!(in[k] = standin(c, g->nodes[nid].in[k]))) return NULL;
        n = &g->nodes[nid];
        struct weft_graph *tr = weft_trace_active; // a stand-in is not a new node
        weft_trace_active = NULL;
        bool sym = weft_op_symbolic, gr = weft_grad_set_enabled(false);
        weft_op_symbolic = true;
        weft_status st = weft_op_apply(n->op, n->n_in, in, &n->attrs, out);
        weft_op_symbolic = sym;
        weft_grad_set_enabled(gr);
        weft_trace_active = tr;
        if (st != WEFT_OK) return NULL;
        for (int j = 1; j < n->op->n_out; j++) weft_tensor_free(out[j]);
        t = out[0];
    } else { // placeholders, op results, assigns, control flow: contiguous
        t = weft_tensor_symbolic(gv->ndim, gv->sizes, (weft_dtype)gv->dtype, c->dev);
    }
    if (!t) return NULL;
    if (!weft_graph_trace_map(g, t, v)) {
        weft_tensor_free(t);
        return weft_error_null(WEFT_ERR_OOM, "%s: out of memory", c->fn);
    }
    c->sv[v] = t;
    return t;
}

// acc += g (takes g), recorded as an add node.
static weft_status accumulate(ad_ctx *c, int32_t v, weft_tensor *t) {
    if (!c->gb[v]) {
        c->gb[v] = t;
        return WEFT_OK;
    }
    sym_state s = sym_enter(c->g);
    weft_tensor *sum = weft_add(c->gb[v], t);
    sym_leave(s);
    weft_tensor_free(t);
    if (!sum || c->g->trace_status != WEFT_OK)
        return weft_tensor_free(sum), weft_error(weft_last_status() ? weft_last_status() : WEFT_ERR_STATE,
                                                 "%s: accumulating the gradient of value %d failed", c->fn, (int)v);
    weft_tensor_free(c->gb[v]);
    c->gb[v] = sum;
    return WEFT_OK;
}

// acc(v) += the graph value gv (a gradient a control node computes), through a
// data-less stand-in mapped to gv.
static weft_status accumulate_value(ad_ctx *c, int32_t v, int32_t gv) {
    const weft_gvalue *ov = &c->g->values[gv];
    weft_tensor *t = weft_tensor_symbolic(ov->ndim, ov->sizes, (weft_dtype)ov->dtype, c->dev);
    if (!t || !weft_graph_trace_map(c->g, t, gv)) {
        weft_tensor_free(t);
        return weft_error(WEFT_ERR_OOM, "%s: out of memory", c->fn);
    }
    return accumulate(c, v, t);
}

// Differentiable dtypes: f32, f64, and bf16 / f16 (the values an autocast region makes).
static bool is_float(uint8_t dt) { return weft_dtype_is_float((weft_dtype)dt); }

static weft_status grad_impl(weft_graph *g, const char *fn, int n_y, const int32_t *ys, const int32_t *seeds,
                             int n_wrt, const int32_t *wrt, int32_t *grads);

static weft_status op_backward(ad_ctx *c, int32_t id) {
    weft_graph *g = c->g;
    const weft_gnode *n = &g->nodes[id];
    const weft_op_def *op = n->op;
    if (op->flags & WEFT_OPF_NONDIFF) return WEFT_OK;
    if (!op->backward)
        return fail_at(c, id, WEFT_ERR_UNSUPPORTED, "the op is not differentiable (no backward rule)");
    int n_in = n->n_in;
    if (n_in > 64) return fail_at(c, id, WEFT_ERR_ARG, "too many inputs to differentiate");
    weft_tensor *in[64] = {0}, *out[WEFT_MAX_OP_OUT] = {0}, *gout[WEFT_MAX_OP_OUT] = {0}, *gin[64] = {0};
    weft_in_meta meta[64];
    bool needs[64];
    for (int k = 0; k < n_in; k++) {
        int32_t v = g->nodes[id].in[k];
        const weft_gvalue *gv = &g->values[v];
        meta[k].ndim = gv->ndim;
        meta[k].dtype = (weft_dtype)gv->dtype;
        memcpy(meta[k].sizes, gv->sizes, sizeof meta[k].sizes);
        needs[k] = c->rg[v];
        if (k < 16 && (op->save & WEFT_SAVE_IN(k)) && !(in[k] = standin(c, v)))
            return fail_at(c, id, weft_last_status(), "making a stand-in");
    }
    for (int j = 0; j < op->n_out; j++) {
        int32_t v = g->nodes[id].out0 + j;
        gout[j] = c->gb[v];
        if ((op->save & WEFT_SAVE_OUT(j)) && !(out[j] = standin(c, v)))
            return fail_at(c, id, weft_last_status(), "making a stand-in");
    }
    n = &g->nodes[id];
    weft_attrs attrs = n->attrs; // the node array may move while the rule appends nodes
    weft_bw_args b = {.op = op, .attrs = &attrs, .n_in = n_in, .n_out = op->n_out, .in = in, .in_meta = meta,
                      .out = out, .gout = gout, .needs = needs, .gin = gin};
    sym_state s = sym_enter(g);
    weft_status st = op->backward(&b);
    sym_leave(s);
    if (st == WEFT_OK && g->trace_status != WEFT_OK) st = g->trace_status;
    for (int k = 0; k < n_in && st == WEFT_OK; k++) {
        if (!gin[k]) continue;
        if (!weft_shape_equal(meta[k].ndim, meta[k].sizes, gin[k]->ndim, gin[k]->sizes) ||
            meta[k].dtype != (weft_dtype)gin[k]->dtype) {
            char a[96], bb[96];
            st = weft_error(WEFT_ERR_STATE, "gradient of input %d is %s %s, expected %s %s", k,
                            weft_dtype_name((weft_dtype)gin[k]->dtype), weft_tensor_shape_str(gin[k], a, sizeof a),
                            weft_dtype_name(meta[k].dtype), weft_shape_fmt(meta[k].ndim, meta[k].sizes, bb, sizeof bb));
        }
    }
    if (st != WEFT_OK) {
        for (int k = 0; k < n_in; k++) weft_tensor_free(gin[k]);
        return fail_at(c, id, st, "backward rule failed");
    }
    for (int k = 0; k < n_in; k++) {
        weft_tensor *t = gin[k];
        gin[k] = NULL;
        if (!t) continue;
        if (!needs[k] || st != WEFT_OK) {
            weft_tensor_free(t);
            continue;
        }
        st = accumulate(c, g->nodes[id].in[k], t); // a value used twice by this node sums both
    }
    return st;
}

// Gradient of a COND: for each branch, a copy of the branch with placeholders
// for the output gradients appended, differentiated with grad_impl
// (recursively: conds inside branches work too); then a COND in g on the same
// predicate picks the gradient branch. The branch forward is recomputed inside
// the gradient branch (its intermediates are not outputs of the forward node).
static weft_status cond_backward(ad_ctx *c, int32_t id) {
    weft_graph *g = c->g;
    const weft_gnode *n = &g->nodes[id];
    int n_data = n->n_in - 1, n_out = n->n_out;
    int32_t pred = n->in[0];
    int32_t need[1024], n_need = 0;
    for (int k = 0; k < n_data && n_need < 1024; k++)
        if (c->rg[n->in[k + 1]]) need[n_need++] = k;
    if (!n_need) return WEFT_OK;
    int32_t go_v[WEFT_GRAPH_MAX_OUT], go_j[WEFT_GRAPH_MAX_OUT], n_go = 0;
    for (int j = 0; j < n_out; j++) {
        weft_tensor *t = c->gb[g->nodes[id].out0 + j];
        if (!t) continue;
        int32_t v = value_of(c, t);
        if (v < 0) return fail_at(c, id, weft_last_status(), "naming an output gradient");
        go_v[n_go] = v;
        go_j[n_go++] = j;
    }
    // Gradient-cond inputs: the forward data inputs, then the output gradients.
    int n_gin = n_data + n_go;
    int32_t *gin_ids = malloc((size_t)(n_gin ? n_gin : 1) * sizeof *gin_ids);
    weft_value *gin_vals = malloc((size_t)(n_gin ? n_gin : 1) * sizeof *gin_vals);
    weft_status st = WEFT_OK;
    if (!gin_ids || !gin_vals) {
        st = weft_error(WEFT_ERR_OOM, "%s: out of memory", c->fn);
        goto out;
    }
    for (int k = 0; k < n_data; k++) gin_vals[k] = (weft_value){g->nodes[id].in[k + 1]};
    for (int j = 0; j < n_go; j++) gin_vals[n_data + j] = (weft_value){go_v[j]};
    // One gradient COND per chunk of WEFT_GRAPH_MAX_OUT inputs (each owns its branch copies).
    for (int c0 = 0; c0 < n_need && st == WEFT_OK; c0 += WEFT_GRAPH_MAX_OUT) {
        int m = n_need - c0 < WEFT_GRAPH_MAX_OUT ? n_need - c0 : WEFT_GRAPH_MAX_OUT;
        weft_graph *br[2] = {NULL, NULL};
        weft_value bout[2][WEFT_GRAPH_MAX_OUT];
        for (int b = 0; b < 2 && st == WEFT_OK; b++) {
            const weft_gnode *fn_ = &g->nodes[id];
            br[b] = weft_graph_clone(fn_->sub[b]);
            if (!br[b]) {
                st = fail_at(c, id, weft_last_status(), "copying a branch");
                break;
            }
            int32_t ys[WEFT_GRAPH_MAX_OUT], seeds[WEFT_GRAPH_MAX_OUT], wrt[WEFT_GRAPH_MAX_OUT], gr[WEFT_GRAPH_MAX_OUT];
            for (int j = 0; j < n_go && st == WEFT_OK; j++) {
                const weft_gvalue *ov = &g->values[g->nodes[id].out0 + go_j[j]];
                char nm[64];
                snprintf(nm, sizeof nm, "grad_out_%d", go_j[j]);
                weft_value p = weft_graph_placeholder(br[b], weft_graph_find_node(br[b], nm).id < 0 ? nm : NULL,
                                                      ov->ndim, ov->sizes, (weft_dtype)ov->dtype);
                if (p.id < 0) st = fail_at(c, id, weft_last_status(), "adding a gradient placeholder");
                seeds[j] = p.id;
                ys[j] = g->nodes[id].sub_out[b][go_j[j]];
            }
            for (int k = 0; k < m; k++) wrt[k] = g->nodes[id].sub_in[b][need[c0 + k]];
            if (st == WEFT_OK && (st = grad_impl(br[b], c->fn, n_go, ys, seeds, m, wrt, gr)) != WEFT_OK)
                st = fail_at(c, id, st, b == 0 ? "differentiating the then branch" : "differentiating the else branch");
            for (int k = 0; k < m && st == WEFT_OK; k++) bout[b][k] = (weft_value){gr[k]};
        }
        weft_value outv[WEFT_GRAPH_MAX_OUT];
        if (st == WEFT_OK) {
            char nm[160];
            snprintf(nm, sizeof nm, "%s_grad", g->nodes[id].name);
            const char *name = weft_graph_find_node(g, nm).id < 0 ? nm : NULL;
            st = weft_graph_cond(g, name, (weft_value){pred}, n_gin, gin_vals, br[0], bout[0], br[1], bout[1], m, outv);
            if (st == WEFT_OK) br[0] = br[1] = NULL; // g owns them now
            else st = fail_at(c, id, st, "building the gradient cond");
        }
        weft_graph_free(br[0]);
        weft_graph_free(br[1]);
        for (int k = 0; k < m && st == WEFT_OK; k++) {
            st = accumulate_value(c, g->nodes[id].in[need[c0 + k] + 1], outv[k].id);
        }
    }
out:
    free(gin_ids);
    free(gin_vals);
    return st;
}

// First node of sg (or of a subgraph inside it) whose rerun would not repeat
// the forward run: state writes, queue traffic, random or stateful ops.
static const weft_gnode *impure_node(const weft_graph *sg) {
    for (int32_t i = 0; i < sg->n_nodes; i++) {
        const weft_gnode *n = &sg->nodes[i];
        if (n->kind == WEFT_NODE_ASSIGN || n->kind == WEFT_NODE_ASSIGN_ADD || n->kind == WEFT_NODE_ENQUEUE ||
            n->kind == WEFT_NODE_DEQUEUE)
            return n;
        if (n->kind == WEFT_NODE_OP && (n->op->flags & (WEFT_OPF_RANDOM | WEFT_OPF_STATEFUL))) return n;
        for (int b = 0; b < 2; b++) {
            const weft_gnode *in = n->sub[b] ? impure_node(n->sub[b]) : NULL;
            if (in) return in;
        }
    }
    return NULL;
}

// Gradient of a WHILE over loop vars x (m of them, f floating point): a
// gradient loop node `<node>_grad` (control.c, while_grad) that reruns the
// forward from x0 keeping every iteration's x, then applies the body's
// gradient graph backwards over the iterations. The body's gradient graph is
// a copy of the body with placeholders for the gradients of its float
// outputs, differentiated with grad_impl (recursively: loops and conds inside
// the body work too); it keeps the body outputs, so the same graph serves the
// forward rerun (the executor prunes the gradient part away there). A body
// reads only its loop vars (subgraphs have no captures), so the gradients go
// to the loop vars' initial values; to differentiate w.r.t. a parameter the
// body uses, make it a loop var passed through unchanged.
static weft_status while_backward(ad_ctx *c, int32_t id) {
    weft_graph *g = c->g;
    const weft_gnode *n = &g->nodes[id];
    if (n->while_grad)
        return fail_at(c, id, WEFT_ERR_UNSUPPORTED,
                       "second-order gradients through a while_loop gradient are not supported");
    int m = n->n_in;
    bool any = false;
    for (int k = 0; k < m; k++) any |= c->rg[n->in[k]] != 0;
    if (!any) return WEFT_OK;
    for (int b = 0; b < 2; b++) {
        const weft_gnode *bad = impure_node(n->sub[b]);
        if (bad) {
            char what[320];
            snprintf(what, sizeof what,
                     "gradient of while_loop needs a pure %s graph (it is rerun by the gradient), but node '%s' (%s) "
                     "has side effects or draws random numbers",
                     b ? "body" : "cond", bad->name, node_op(bad));
            weft_clear_error();
            return fail_at(c, id, WEFT_ERR_UNSUPPORTED, what);
        }
    }
    int32_t fidx[WEFT_GRAPH_MAX_OUT], f = 0;
    for (int k = 0; k < m; k++)
        if (is_float(g->values[n->in[k]].dtype)) fidx[f++] = k;
    // Gradient loop inputs: the loop vars' initial values, then the output gradients.
    int32_t gin[2 * WEFT_GRAPH_MAX_OUT];
    for (int k = 0; k < m; k++) gin[k] = n->in[k];
    for (int k = 0; k < f; k++) {
        int32_t ov = n->out0 + fidx[k];
        weft_tensor *t = c->gb[ov];
        int32_t v;
        if (t) {
            v = value_of(c, t);
        } else { // this output does not reach y
            const weft_gvalue *gv = &g->values[ov];
            weft_tensor *z = weft_tensor_full_on(gv->ndim, gv->sizes, (weft_dtype)gv->dtype, 0, c->dev);
            v = z ? weft_graph_constant(g, NULL, z).id : -1;
            weft_tensor_free(z);
        }
        if (v < 0) return fail_at(c, id, weft_last_status(), "naming an output gradient");
        gin[m + k] = v;
    }
    n = &g->nodes[id];
    weft_graph *cg = weft_graph_clone(n->sub[0]), *bg = weft_graph_clone(n->sub[1]);
    weft_status st = WEFT_OK;
    if (!cg || !bg) {
        st = fail_at(c, id, weft_last_status(), "copying the cond and body graphs");
        goto out;
    }
    int32_t ys[WEFT_GRAPH_MAX_OUT], seeds[WEFT_GRAPH_MAX_OUT], wrt[WEFT_GRAPH_MAX_OUT], gout[2 * WEFT_GRAPH_MAX_OUT];
    for (int k = 0; k < f && st == WEFT_OK; k++) {
        const weft_gvalue *gv = &g->values[n->in[fidx[k]]];
        char nm[64];
        snprintf(nm, sizeof nm, "grad_out_%d", fidx[k]);
        // The cond copy gets the same placeholders, unused: both subgraphs share one interface.
        weft_value pc = weft_graph_placeholder(cg, NULL, gv->ndim, gv->sizes, (weft_dtype)gv->dtype);
        weft_value pb = weft_graph_placeholder(bg, weft_graph_find_node(bg, nm).id < 0 ? nm : NULL, gv->ndim,
                                               gv->sizes, (weft_dtype)gv->dtype);
        if (pc.id < 0 || pb.id < 0) st = fail_at(c, id, weft_last_status(), "adding a gradient placeholder");
        seeds[k] = pb.id;
        ys[k] = n->sub_out[1][fidx[k]];
        wrt[k] = n->sub_in[1][fidx[k]];
    }
    if (st == WEFT_OK && (st = grad_impl(bg, c->fn, f, ys, seeds, f, wrt, gout + m)) != WEFT_OK)
        st = fail_at(c, id, st, "differentiating the body");
    if (st != WEFT_OK) goto out;
    n = &g->nodes[id];
    for (int k = 0; k < m; k++) gout[k] = n->sub_out[1][k];
    weft_value outv[WEFT_GRAPH_MAX_OUT];
    char nm[160];
    snprintf(nm, sizeof nm, "%s_grad", n->name);
    st = weft_control_while_grad(g, weft_graph_find_node(g, nm).id < 0 ? nm : NULL, cg, n->sub_out[0][0], bg, gout,
                                 m, f, gin, n->max_iter, outv);
    if (st != WEFT_OK) {
        st = fail_at(c, id, st, "building the gradient loop");
        goto out;
    }
    cg = bg = NULL; // g owns them now
    for (int k = 0; k < f && st == WEFT_OK; k++) {
        int32_t xv = g->nodes[id].in[fidx[k]];
        if (!c->rg[xv]) continue;
        st = accumulate_value(c, xv, outv[k].id);
    }
out:
    weft_graph_free(cg);
    weft_graph_free(bg);
    return st;
}

// ys[i] gets seed seeds[i] (a value of g; -1: ones). The thread state is
// saved and restored around each replay, so a branch can be differentiated
// from inside its parent's build.
static weft_status grad_impl(weft_graph *g, const char *fn, int n_y, const int32_t *ys, const int32_t *seeds,
                             int n_wrt, const int32_t *wrt, int32_t *grads) {
    if (g->tracing || g->n_held)
        return weft_error(WEFT_ERR_STATE, "%s: the graph is being traced (call trace_end first)", fn);
    ad_ctx c = {.g = g, .fn = fn, .N0 = g->n_nodes, .V0 = g->n_values, .dev = weft_graph_device(g)};
    size_t nv = (size_t)(c.V0 ? c.V0 : 1);
    c.rg = calloc(nv, 1);
    c.sv = calloc(nv, sizeof *c.sv);
    c.gb = calloc(nv, sizeof *c.gb);
    weft_status st = WEFT_OK;
    g->trace_status = WEFT_OK;
    if (!c.rg || !c.sv || !c.gb) {
        st = weft_error(WEFT_ERR_OOM, "%s: out of memory", fn);
        goto done;
    }
    // Which values carry gradient: forward from wrt through differentiable nodes.
    for (int k = 0; k < n_wrt; k++) c.rg[wrt[k]] = is_float(g->values[wrt[k]].dtype);
    for (int32_t i = 0; i < c.N0; i++) {
        const weft_gnode *n = &g->nodes[i];
        bool diff = (n->kind == WEFT_NODE_OP && !(n->op->flags & WEFT_OPF_NONDIFF)) || n->kind == WEFT_NODE_COND ||
                    n->kind == WEFT_NODE_WHILE;
        if (!diff) continue;
        bool any = false;
        for (int k = n->kind == WEFT_NODE_COND ? 1 : 0; k < n->n_in; k++) any |= c.rg[n->in[k]] != 0;
        if (!any) continue;
        for (int j = 0; j < n->n_out; j++)
            if (is_float(g->values[n->out0 + j].dtype)) c.rg[n->out0 + j] = 1;
    }
    // Seeds.
    for (int i = 0; i < n_y && st == WEFT_OK; i++) {
        if (!c.rg[ys[i]]) continue; // y does not depend on wrt: every gradient is zero
        const weft_gvalue *yv = &g->values[ys[i]];
        weft_tensor *s = seeds[i] >= 0 ? weft_tensor_ref(standin(&c, seeds[i]))
                                       : weft_tensor_full_on(yv->ndim, yv->sizes, (weft_dtype)yv->dtype, 1, c.dev);
        if (!s) st = weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
        else st = accumulate(&c, ys[i], s);
    }
    // Reverse walk: node ids are a topological order of the data edges.
    for (int32_t i = c.N0 - 1; i >= 0 && st == WEFT_OK; i--) {
        const weft_gnode *n = &g->nodes[i];
        bool has = false;
        for (int j = 0; j < n->n_out; j++) has |= c.gb[n->out0 + j] != NULL;
        if (!has) continue;
        switch (n->kind) {
        case WEFT_NODE_OP: st = op_backward(&c, i); break;
        case WEFT_NODE_COND: st = cond_backward(&c, i); break;
        case WEFT_NODE_WHILE: st = while_backward(&c, i); break;
        default: break; // leaves; assigns stop the gradient
        }
    }
    for (int k = 0; k < n_wrt && st == WEFT_OK; k++) {
        weft_tensor *t = c.gb[wrt[k]];
        if (t) {
            grads[k] = value_of(&c, t);
        } else { // y does not depend on it (or it is not floating point): zeros
            const weft_gvalue *wv = &g->values[wrt[k]];
            weft_tensor *z = weft_tensor_full_on(wv->ndim, wv->sizes, (weft_dtype)wv->dtype, 0, c.dev);
            grads[k] = z ? weft_graph_constant(g, NULL, z).id : -1;
            weft_tensor_free(z);
        }
        if (grads[k] < 0) st = weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
    }
done:
    if (c.sv)
        for (int32_t v = 0; v < c.V0; v++) weft_tensor_free(c.sv[v]);
    if (c.gb)
        for (int32_t v = 0; v < c.V0; v++) weft_tensor_free(c.gb[v]);
    free(c.rg);
    free(c.sv);
    free(c.gb);
    weft_graph_trace_release(g);
    g->trace_status = WEFT_OK;
    return st;
}

weft_status weft_graph_gradients(weft_graph *g, weft_value y, int n_wrt, const weft_value *wrt, weft_value *grads_out) {
    const char *fn = "graph_gradients";
    if (!g) return weft_error(WEFT_ERR_ARG, "%s: NULL graph", fn);
    if (n_wrt < 0 || (n_wrt && (!wrt || !grads_out)))
        return weft_error(WEFT_ERR_ARG, "%s: bad wrt list (NULL arrays or negative count)", fn);
    if (!weft_graph_value_ok(g, y)) return weft_error(WEFT_ERR_ARG, "%s: y is not a value of this graph", fn);
    const weft_gvalue *yv = &g->values[y.id];
    const weft_gnode *yn = &g->nodes[yv->node];
    if (weft_shape_numel(yv->ndim, yv->sizes) != 1 || !is_float(yv->dtype)) {
        char s[96];
        return weft_error(WEFT_ERR_SHAPE, "%s: y (node '%s') must be one floating-point element, got %s %s", fn,
                          yn->name, weft_dtype_name((weft_dtype)yv->dtype), weft_shape_fmt(yv->ndim, yv->sizes, s, 96));
    }
    for (int k = 0; k < n_wrt; k++)
        if (!weft_graph_value_ok(g, wrt[k]))
            return weft_error(WEFT_ERR_ARG, "%s: wrt %d is not a value of this graph", fn, k);
    int32_t wl[16], gl[16];
    int32_t *w = n_wrt <= 16 ? wl : malloc((size_t)n_wrt * sizeof *w);
    int32_t *gr = n_wrt <= 16 ? gl : malloc((size_t)n_wrt * sizeof *gr);
    if (!w || !gr) {
        if (w != wl) free(w);
        if (gr != gl) free(gr);
        return weft_error(WEFT_ERR_OOM, "%s: out of memory", fn);
    }
    for (int k = 0; k < n_wrt; k++) w[k] = wrt[k].id;
    int32_t seed = -1;
    weft_status st = grad_impl(g, fn, 1, &y.id, &seed, n_wrt, w, gr);
    for (int k = 0; k < n_wrt; k++) grads_out[k] = st == WEFT_OK ? (weft_value){gr[k]} : WEFT_VALUE_NONE;
    if (w != wl) free(w);
    if (gr != gl) free(gr);
    return st;
}
