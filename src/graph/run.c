// The executor: prune -> check feeds -> order (cycle check) -> plan memory ->
// run from a ready queue, freeing each intermediate after its last consumer.
//
// Serial runs (the default) follow the order the cycle check produced (a FIFO
// ready queue over node ids) and, with the memory plan, put every
// intermediate into one arena at planned offsets (plan.c). Parallel runs
// (interop_threads > 1) let a pool of pthreads pop nodes from a shared ready
// queue: a node becomes ready when its data and control predecessors are
// done; bookkeeping (use counts, liveness, ready queue) is under one mutex,
// kernels run outside it. Parallel runs allocate per op, since a static plan
// is only valid for one order.
//
// A run happens on one device, its variables' and feeds' (resolve_device):
// every node runs there and the arena is allocated there. On a device that
// can capture, serial planned runs are recorded and replayed as CUDA graphs
// (capture.c drives the same node functions through run_impl.h).
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fused.h"
#include "graph_impl.h"
#include "plan.h"
#include "run_impl.h"
#include "schedule.h"
#include "trace_hook.h"


// ---- storage use counts (the peak in O(1) per value instead of a sort per node) ----
static size_t smap_slot(const run_ctx *c, const void *key) {
    size_t h = (size_t)(((uintptr_t)key >> 4) * 0x9E3779B97F4A7C15ull) & (c->scap - 1);
    while (c->skey[h] && c->skey[h] != key) h = (h + 1) & (c->scap - 1);
    return h;
}

static void smap_mark_ext(run_ctx *c, const void *key) {
    size_t h = smap_slot(c, key);
    c->skey[h] = key;
    c->scount[h] = -1;
}

void weft_run_mark_ext(run_ctx *c, const void *storage) {
    c->ext[c->n_ext++] = storage;
    smap_mark_ext(c, storage);
}

// +1 / -1 use of value v's storage when v is made by an op (views of a
// variable or feed share its storage and cost nothing extra).
static void smap_use(run_ctx *c, int32_t v, int delta) {
    weft_node_kind kind = c->g->nodes[c->g->values[v].node].kind;
    if (kind != WEFT_NODE_OP && kind != WEFT_NODE_FUSED) return;
    const weft_storage *st = c->vals[v]->storage;
    size_t h = smap_slot(c, st);
    if (!c->skey[h]) c->skey[h] = st, c->scount[h] = 0;
    if (c->scount[h] < 0) return;
    c->scount[h] += delta;
    if (delta > 0 && c->scount[h] == 1) c->cur_bytes += st->nbytes;
    if (delta < 0 && c->scount[h] == 0) c->cur_bytes -= st->nbytes;
}

void weft_run_set_val(run_ctx *c, int32_t v, weft_tensor *t) {
    c->vals[v] = t;
    smap_use(c, v, +1);
    c->live_pos[v] = c->n_live;
    c->live[c->n_live++] = v;
}

static void drop_val(run_ctx *c, int32_t v) {
    smap_use(c, v, -1);
    weft_tensor_free(c->vals[v]);
    c->vals[v] = NULL;
    int p = c->live_pos[v];
    if (p < 0) return;
    int32_t last = c->live[--c->n_live];
    c->live[p] = last;
    c->live_pos[last] = p;
    c->live_pos[v] = -1;
}

// Bytes of distinct storages made by ops that are alive now (kept by smap_use).
static void account_peak(run_ctx *c) {
    if (c->cur_bytes > c->peak) c->peak = c->cur_bytes;
}

// splitmix64 of the recorded seed and the run number: distinct runs give
// unrelated Philox keys; run 0 keeps the recorded seed.
int64_t weft_graph_run_seed(int64_t seed, uint64_t run) {
    if (run == 0) return seed;
    uint64_t z = (uint64_t)seed ^ (run * 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (int64_t)(z ^ (z >> 31));
}

static weft_status node_error(const weft_gnode *n, weft_status st) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", weft_last_error());
    return weft_error(st != WEFT_OK ? st : WEFT_ERR_STATE, "graph_run: node '%s' (%s): %s", n->name,
                      n->kind == WEFT_NODE_OP ? n->op->name : weft_graph_kind_name(n->kind), msg);
}

// ---- fused nodes (src/graph/fused.c): outputs allocated like a non-view op's ----
static weft_status exec_fused(run_ctx *c, int32_t id, weft_tensor **outs) {
    weft_graph *g = c->g;
    const weft_gnode *n = &g->nodes[id];
    weft_tensor *inl[WEFT_FUSED_MAX_IN];
    if (n->n_in > WEFT_FUSED_MAX_IN) return weft_error(WEFT_ERR_STATE, "graph_run: node '%s' (fused): too many inputs", n->name);
    for (int i = 0; i < n->n_in; i++) inl[i] = c->vals[n->in[i]];
    weft_status st = WEFT_OK;
    for (int j = 0; j < n->n_out && st == WEFT_OK; j++) {
        const weft_gvalue *v = &g->values[n->out0 + j];
        outs[j] = c->use_plan ? weft_plan_tensor_at(c->arena, c->plan.offset[n->out0 + j], v->ndim, v->sizes,
                                                    (weft_dtype)v->dtype)
                              : weft_tensor_new(v->ndim, v->sizes, (weft_dtype)v->dtype, c->dev);
        if (!outs[j]) st = weft_last_status();
    }
    if (st == WEFT_OK) st = weft_fused_exec(n, &g->values[n->out0], inl, outs);
    if (st != WEFT_OK) {
        for (int j = 0; j < n->n_out; j++) {
            weft_tensor_free(outs[j]);
            outs[j] = NULL;
        }
        return node_error(n, st);
    }
    return WEFT_OK;
}

// The variable tensor value v is written into in place this run, or NULL:
// marked by the run cache, and the variable still fits (a variable's tensor
// is fixed, but check: it costs nothing and keeps a stale mark harmless).
weft_tensor *weft_run_inplace_var(const run_ctx *c, int32_t v) {
    int32_t vn = c->inplace[v];
    if (vn < 0) return NULL;
    weft_tensor *t = c->g->nodes[vn].tensor;
    const weft_gvalue *gv = &c->g->values[v];
    if (!t || !weft_tensor_is_contiguous(t) || t->dtype != gv->dtype || !weft_shape_equal(t->ndim, t->sizes, gv->ndim, gv->sizes))
        return NULL;
    return t;
}

// Run one node into outs[0..n_out) (new references; not yet published in
// c->vals). Reads c->vals of its inputs only, so several nodes may run at once.
weft_status weft_run_exec_node(run_ctx *c, int32_t id, weft_tensor **outs) {
    weft_graph *g = c->g;
    weft_gnode *n = &g->nodes[id];
    switch (n->kind) {
    case WEFT_NODE_PLACEHOLDER: {
        // Contiguous, so view ops recorded on a contiguous trace input see the same layout.
        outs[0] = weft_tensor_contiguous(c->feed[n->out0]);
        if (!outs[0]) return node_error(n, weft_last_status());
        return WEFT_OK;
    }
    case WEFT_NODE_CONSTANT:
    case WEFT_NODE_VARIABLE:
        outs[0] = weft_tensor_ref(n->tensor);
        return WEFT_OK;
    case WEFT_NODE_ASSIGN:
    case WEFT_NODE_ASSIGN_ADD: {
        weft_tensor *var = g->nodes[n->var].tensor, *src = c->vals[n->in[0]], *tmp = NULL;
        if (n->kind == WEFT_NODE_ASSIGN_ADD) {
            tmp = weft_add(var, src);
            if (!tmp) return node_error(n, weft_last_status());
            src = tmp;
        }
        // Already there when the producer wrote the value in place (c->inplace).
        bool same = !tmp && weft_tensor_ptr(src) == weft_tensor_ptr(var) && weft_tensor_is_contiguous(src) &&
                    weft_tensor_is_contiguous(var) && src->dtype == var->dtype && src->numel == var->numel;
        weft_status st = same ? WEFT_OK : weft_tensor_copy_(var, src);
        weft_tensor_free(tmp);
        if (st != WEFT_OK) return node_error(n, st);
        outs[0] = weft_tensor_ref(var);
        return WEFT_OK;
    }
    case WEFT_NODE_OP: {
        weft_tensor *inl[16], **in = n->n_in <= 16 ? inl : malloc((size_t)n->n_in * sizeof *in);
        weft_tensor **out = outs;
        if (!in) return weft_error(WEFT_ERR_OOM, "graph_run: out of memory");
        for (int i = 0; i < n->n_in; i++) in[i] = c->vals[n->in[i]];
        // Random ops draw afresh each run; nodes recorded with one seed agree within a run.
        weft_attrs ra;
        const weft_attrs *at = &n->attrs;
        if (n->op->flags & WEFT_OPF_RANDOM) {
            ra = n->attrs;
            ra.i[0] = weft_graph_run_seed(ra.i[0], c->run_no);
            at = &ra;
        }
        weft_status st;
        bool inplace = false;
        for (int j = 0; j < n->n_out && c->inplace; j++) inplace |= weft_run_inplace_var(c, n->out0 + j) != NULL;
        if ((c->use_plan || inplace) && !(n->op->flags & WEFT_OPF_VIEW)) {
            // Outputs are tensors over the arena at their planned offsets, or
            // the variable an output is assigned to (written in place).
            st = WEFT_OK;
            for (int j = 0; j < n->n_out; j++) out[j] = NULL;
            for (int j = 0; j < n->n_out && st == WEFT_OK; j++) {
                const weft_gvalue *v = &g->values[n->out0 + j];
                weft_tensor *var = inplace ? weft_run_inplace_var(c, n->out0 + j) : NULL;
                if (var) __atomic_fetch_add(&g->stats.inplace_writes, 1, __ATOMIC_RELAXED); // parallel runs too
                // (offset -1: planned into a variable that no longer fits; its own allocation then)
                out[j] = var ? weft_tensor_ref(var)
                         : c->use_plan && c->plan.offset[n->out0 + j] >= 0
                             ? weft_plan_tensor_at(c->arena, c->plan.offset[n->out0 + j], v->ndim, v->sizes,
                                                   (weft_dtype)v->dtype)
                                       : weft_tensor_new(v->ndim, v->sizes, (weft_dtype)v->dtype, c->dev);
                if (!out[j]) st = weft_last_status();
            }
            if (st == WEFT_OK) st = weft_op_apply_into(n->op, n->n_in, in, at, out);
            if (st != WEFT_OK) {
                for (int j = 0; j < n->n_out; j++) weft_tensor_free(out[j]);
                for (int j = 0; j < n->n_out; j++) out[j] = NULL;
            }
        } else {
            st = weft_op_apply(n->op, n->n_in, in, at, out);
        }
        if (in != inl) free(in);
        if (st != WEFT_OK) return node_error(n, st);
        for (int j = 0; j < n->n_out; j++) {
            const weft_gvalue *v = &g->values[n->out0 + j];
            if (!weft_shape_equal(v->ndim, v->sizes, out[j]->ndim, out[j]->sizes) || v->dtype != out[j]->dtype) {
                char a[96], b[96];
                st = weft_error(WEFT_ERR_STATE, "graph_run: node '%s' (%s): output %d is %s %s, the graph says %s %s",
                                n->name, n->op->name, j, weft_dtype_name((weft_dtype)out[j]->dtype),
                                weft_tensor_shape_str(out[j], a, 96), weft_dtype_name((weft_dtype)v->dtype),
                                weft_shape_fmt(v->ndim, v->sizes, b, 96));
                for (int k = 0; k < n->n_out; k++) {
                    weft_tensor_free(out[k]);
                    out[k] = NULL;
                }
                return st;
            }
        }
        return WEFT_OK;
    }
    case WEFT_NODE_COND:
    case WEFT_NODE_WHILE: { // control.c runs the subgraphs
        weft_status st = weft_control_exec(g, id, c->vals, outs);
        return st != WEFT_OK ? node_error(n, st) : WEFT_OK;
    }
    case WEFT_NODE_ENQUEUE: // queue_nodes.c
        return weft_graph_exec_enqueue(g, n, c->vals);
    case WEFT_NODE_DEQUEUE:
        return weft_graph_exec_dequeue(g, n, outs);
    case WEFT_NODE_FUSED:
        return exec_fused(c, id, outs);
    default:
        return weft_error(WEFT_ERR_STATE, "graph_run: node '%s' has an unknown kind %d", n->name, (int)n->kind);
    }
}

// A value with no consumer left: dropped now, or after the recording (c->defer_drops).
static void dead_val(run_ctx *c, int32_t v) {
    if (c->defer_drops && c->vals[v]) c->pending[c->n_pending++] = v;
    else if (!c->defer_drops) drop_val(c, v);
}

void weft_run_flush_drops(run_ctx *c) {
    for (int k = 0; k < c->n_pending; k++)
        if (c->vals[c->pending[k]]) drop_val(c, c->pending[k]);
    c->n_pending = 0;
}

// Publish a run node's outputs, then liveness: an input dies with its last
// consumer, an unused output at once. (Under c->mu in parallel runs.)
void weft_run_commit_node(run_ctx *c, int32_t x, weft_tensor **outs) {
    const weft_gnode *n = &c->g->nodes[x];
    for (int j = 0; j < n->n_out; j++) weft_run_set_val(c, n->out0 + j, outs[j]);
    account_peak(c);
    for (int k = 0; k < n->n_in; k++) {
        int32_t v = n->in[k];
        if (--c->uses[v] == 0 && !c->fetched[v]) dead_val(c, v);
    }
    for (int j = 0; j < n->n_out; j++) {
        int32_t v = n->out0 + j;
        if (c->uses[v] == 0 && !c->fetched[v]) dead_val(c, v);
    }
}

// Visit pred(id): producers of data inputs and control deps.
#define FOR_PREDS(g, n, P, BODY)                                                                  \
    do {                                                                                          \
        for (int _i = 0; _i < (n)->n_in; _i++) {                                                  \
            int32_t P = (g)->values[(n)->in[_i]].node;                                            \
            BODY;                                                                                 \
        }                                                                                         \
        for (int _i = 0; _i < (n)->n_ctrl; _i++) {                                                \
            int32_t P = (n)->ctrl[_i];                                                            \
            BODY;                                                                                 \
        }                                                                                         \
    } while (0)

// Name a node on a cycle among the needed nodes that never became ready.
static weft_status cycle_error(run_ctx *c, const uint8_t *done) {
    weft_graph *g = c->g;
    int32_t x = -1;
    for (int32_t i = 0; i < g->n_nodes && x < 0; i++)
        if (c->needed[i] && !done[i]) x = i;
    // Walk backwards through not-done predecessors: every such node has one,
    // so after at most n steps the walk is inside a cycle.
    for (int step = 0; step < g->n_nodes; step++) {
        const weft_gnode *n = &g->nodes[x];
        int32_t next = -1;
        FOR_PREDS(g, n, p, if (next < 0 && c->needed[p] && !done[p]) next = p);
        if (next < 0) break;
        x = next;
    }
    const weft_gnode *n = &g->nodes[x];
    return weft_error(WEFT_ERR_STATE, "graph_run: cycle through node '%s' (%s) (via control dependencies)", n->name,
                      n->kind == WEFT_NODE_OP ? n->op->name : weft_graph_kind_name(n->kind));
}

static void ctx_free(run_ctx *c) {
    if (c->vals)
        for (int v = 0; v < c->g->n_values; v++) weft_tensor_free(c->vals[v]);
    weft_tensor_free(c->arena);
    weft_plan_free(&c->plan);
    free(c->needed);
    free(c->indeg);
    free(c->succ_off);
    free(c->succ);
    free(c->uses);
    free(c->fetched);
    free(c->vals);
    free(c->feed);
    free(c->queue);
    free(c->order);
    free(c->co);
    free(c->live);
    free(c->live_pos);
    free(c->ext);
    free(c->scratch);
    free(c->pending);
    free(c->skey);
    free(c->scount);
}

static weft_status ctx_alloc(run_ctx *c, int n_feeds) {
    weft_graph *g = c->g;
    size_t nN = (size_t)(g->n_nodes ? g->n_nodes : 1), nV = (size_t)(g->n_values ? g->n_values : 1);
    c->needed = calloc(nN, 1);
    c->indeg = calloc(nN, sizeof *c->indeg);
    c->succ_off = calloc(nN + 1, sizeof *c->succ_off);
    c->uses = calloc(nV, sizeof *c->uses);
    c->fetched = calloc(nV, 1);
    c->vals = calloc(nV, sizeof *c->vals);
    c->feed = calloc(nV, sizeof *c->feed);
    c->queue = malloc(nN * sizeof *c->queue);
    c->order = malloc(nN * sizeof *c->order);
    c->co = calloc(nN, 1);
    c->live = malloc(nV * sizeof *c->live);
    c->live_pos = malloc(nV * sizeof *c->live_pos);
    c->ext = malloc((nV + 2 * (size_t)n_feeds) * sizeof *c->ext); // + the capture's fixed feed buffers
    c->scratch = malloc(nV * sizeof *c->scratch);
    c->pending = malloc(nV * sizeof *c->pending);
    if (!c->needed || !c->indeg || !c->succ_off || !c->uses || !c->fetched || !c->vals || !c->feed || !c->queue ||
        !c->order || !c->co || !c->live || !c->live_pos || !c->ext || !c->scratch || !c->pending)
        return weft_error(WEFT_ERR_OOM, "graph_run: out of memory");
    for (int v = 0; v < g->n_values; v++) c->live_pos[v] = -1;
    return WEFT_OK;
}

// Feeds: placeholders only, matching shape and dtype.
static weft_status check_feeds(run_ctx *c, int n_feeds, const weft_value *feed_vals, weft_tensor *const *feeds) {
    weft_graph *g = c->g;
    for (int k = 0; k < n_feeds; k++) {
        weft_value fv = feed_vals[k];
        if (!weft_graph_value_ok(g, fv)) return weft_error(WEFT_ERR_ARG, "graph_run: feed %d is not a value of this graph", k);
        const weft_gvalue *v = &g->values[fv.id];
        const weft_gnode *n = &g->nodes[v->node];
        if (n->kind != WEFT_NODE_PLACEHOLDER)
            return weft_error(WEFT_ERR_ARG, "graph_run: feed %d is node '%s' (%s), not a placeholder", k, n->name,
                              weft_graph_node_op(g, (weft_node_id){v->node}));
        weft_tensor *t = feeds[k];
        if (!t) return weft_error(WEFT_ERR_ARG, "graph_run: placeholder '%s' is fed NULL", n->name);
        if (c->feed[fv.id]) return weft_error(WEFT_ERR_ARG, "graph_run: placeholder '%s' is fed twice", n->name);
        if (!weft_shape_equal(v->ndim, v->sizes, t->ndim, t->sizes) || v->dtype != t->dtype) {
            char a[96], b[96];
            return weft_error(WEFT_ERR_SHAPE, "graph_run: placeholder '%s' expects %s %s, fed %s %s", n->name,
                              weft_dtype_name((weft_dtype)v->dtype), weft_shape_fmt(v->ndim, v->sizes, a, 96),
                              weft_dtype_name((weft_dtype)t->dtype), weft_tensor_shape_str(t, b, 96));
        }
        c->feed[fv.id] = t;
    }
    return WEFT_OK;
}

// Co-scheduled matmul pairs (coschedule.c) use two CPU threads: only for a
// run on the CPU. The device is known after pruning (resolve_device); the
// order is made before it, so this looks at what decides it: the first fed
// tensor, else the first variable (a graph on two devices fails anyway).
static bool pairs_wanted(const run_ctx *c) {
    if (!weft_coschedule_enabled(weft_num_threads())) return false;
    const weft_graph *g = c->g;
    for (int v = 0; v < g->n_values; v++)
        if (c->feed[v]) return c->feed[v]->device.type == WEFT_CPU;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].kind == WEFT_NODE_VARIABLE && g->nodes[i].tensor) return g->nodes[i].tensor->device.type == WEFT_CPU;
    return true;
}

// Prune to the ancestors of fetches and targets, build successor lists and
// in-degrees, and find the serial order (Kahn, FIFO over node ids) — which
// is also the cycle check, done before anything runs (an assign must not run
// in a graph that turns out cyclic). feeding: placeholders must be fed.
static weft_status prepare(run_ctx *c, bool feeding, int n_fetch, const weft_value *fetch, int n_targets,
                           const weft_node_id *targets, const char *fn) {
    weft_graph *g = c->g;
    int N = g->n_nodes;
    size_t nN = (size_t)(N ? N : 1);
    int32_t *stack = c->queue, sp = 0;
    for (int k = 0; k < n_fetch; k++) {
        if (!weft_graph_value_ok(g, fetch[k]))
            return weft_error(WEFT_ERR_ARG, "%s: fetch %d is not a value of this graph", fn, k);
        c->fetched[fetch[k].id] = 1;
        int32_t p = g->values[fetch[k].id].node;
        if (!c->needed[p]) c->needed[p] = 1, stack[sp++] = p;
    }
    for (int k = 0; k < n_targets; k++) {
        if (targets[k].id < 0 || targets[k].id >= N)
            return weft_error(WEFT_ERR_ARG, "%s: target %d is not a node of this graph", fn, k);
        int32_t p = targets[k].id;
        if (!c->needed[p]) c->needed[p] = 1, stack[sp++] = p;
    }
    size_t n_edges = 0;
    int n_needed = 0;
    while (sp) {
        const weft_gnode *n = &g->nodes[stack[--sp]];
        n_needed++;
        n_edges += (size_t)(n->n_in + n->n_ctrl);
        FOR_PREDS(g, n, p, if (!c->needed[p]) { c->needed[p] = 1; stack[sp++] = p; });
    }
    if (feeding)
        for (int32_t i = 0; i < N; i++) {
            const weft_gnode *n = &g->nodes[i];
            if (c->needed[i] && n->kind == WEFT_NODE_PLACEHOLDER && !c->feed[n->out0])
                return weft_error(WEFT_ERR_ARG, "%s: placeholder '%s' is needed but not fed", fn, n->name);
        }

    // Successor lists (CSR) and in-degrees over the needed subgraph.
    c->succ = malloc((n_edges ? n_edges : 1) * sizeof *c->succ);
    if (!c->succ) return weft_error(WEFT_ERR_OOM, "%s: out of memory", fn);
    for (int32_t i = 0; i < N; i++) {
        if (!c->needed[i]) continue;
        const weft_gnode *n = &g->nodes[i];
        FOR_PREDS(g, n, p, c->succ_off[p + 1]++);
        c->indeg[i] = n->n_in + n->n_ctrl;
        for (int k = 0; k < n->n_in; k++) c->uses[n->in[k]]++;
    }
    for (int32_t i = 0; i < N; i++) c->succ_off[i + 1] += c->succ_off[i];
    int32_t *fill = malloc(nN * sizeof *fill);
    if (!fill) return weft_error(WEFT_ERR_OOM, "%s: out of memory", fn);
    memcpy(fill, c->succ_off, nN * sizeof *fill);
    for (int32_t i = 0; i < N; i++) {
        if (!c->needed[i]) continue;
        const weft_gnode *n = &g->nodes[i];
        FOR_PREDS(g, n, p, c->succ[fill[p]++] = i);
    }
    free(fill);

    int32_t *deg = malloc(nN * sizeof *deg);
    uint8_t *done = calloc(nN, 1);
    if (!deg || !done) {
        free(deg);
        free(done);
        return weft_error(WEFT_ERR_OOM, "%s: out of memory", fn);
    }
    memcpy(deg, c->indeg, nN * sizeof *deg);
    int head = 0, tail = 0;
    for (int32_t i = 0; i < N; i++)
        if (c->needed[i] && deg[i] == 0) c->order[tail++] = i;
    while (head < tail) {
        int32_t x = c->order[head++];
        done[x] = 1;
        for (int32_t e = c->succ_off[x]; e < c->succ_off[x + 1]; e++)
            if (--deg[c->succ[e]] == 0) c->order[tail++] = c->succ[e];
    }
    c->n_order = tail;
    weft_status st = tail < n_needed ? cycle_error(c, done) : WEFT_OK;
    // Memory-aware serial order (schedule.c); WEFT_GRAPH_SCHEDULE=0 keeps the FIFO one.
    const char *sched = getenv("WEFT_GRAPH_SCHEDULE");
    if (st == WEFT_OK && !(sched && !strcmp(sched, "0"))) st = weft_schedule_memory(g, c->order, c->n_order, c->fetched);
    // Independent matmuls in pairs, one core each (coschedule.c).
    if (st == WEFT_OK && pairs_wanted(c) &&
        weft_schedule_pairs(g, c->order, c->n_order, c->co) < 0)
        st = weft_error(WEFT_ERR_OOM, "%s: out of memory", fn);
    free(deg);
    free(done);
    return st;
}

// ---- the run cache: what prepare (and the plan) computed, per (fetches, targets) ----
// Reused while the graph's structure (nodes, edges, value shapes) hashes the
// same, so a training loop's runs skip pruning, the successor lists, the
// order and the memory plan. Whatever prepare computes is copied in and out
// whole, so a different ordering inside prepare needs no change here.
#define RUN_CACHE_SLOTS 4

typedef struct run_entry {
    bool used;
    uint64_t fp; // structure hash when filled
    int n_fetch, n_targets;
    int32_t *key; // fetch value ids, then target node ids
    uint8_t *needed, *fetched;
    int32_t *indeg, *succ_off, *succ, *uses, *order, *inplace;
    uint8_t *co;
    size_t n_edges;
    int n_order;
    bool has_plan;
    weft_plan plan;
    weft_capture *cap; // CUDA-graph capture of planned serial runs (capture.c)
} run_entry;

struct weft_run_cache {
    run_entry e[RUN_CACHE_SLOTS];
    int next; // round-robin victim
};

static void entry_free(run_entry *e) {
    free(e->key);
    free(e->needed);
    free(e->fetched);
    free(e->indeg);
    free(e->succ_off);
    free(e->succ);
    free(e->uses);
    free(e->order);
    free(e->co);
    free(e->inplace);
    weft_plan_free(&e->plan);
    weft_capture_free(e->cap);
    memset(e, 0, sizeof *e);
}

void weft_graph_run_cache_free(weft_graph *g) {
    if (!g || !g->run_cache) return;
    for (int k = 0; k < RUN_CACHE_SLOTS; k++) entry_free(&g->run_cache->e[k]);
    free(g->run_cache);
    g->run_cache = NULL;
}

static uint64_t mix(uint64_t h, uint64_t x) {
    h ^= x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

// A hash of everything prepare and the plan read: nodes (kind, op, edges,
// outputs, variable) and values (shape, dtype). O(nodes + edges + values).
// The switches the schedule and the plan read are part of it, so changing
// them between runs in one process takes effect.
static uint64_t graph_fingerprint(const run_ctx *c) {
    const weft_graph *g = c->g;
    uint64_t h = mix((uint64_t)g->n_nodes, (uint64_t)g->n_values);
    static const char *const env[] = {"WEFT_GRAPH_SCHEDULE", "WEFT_GRAPH_INPLACE", "WEFT_GRAPH_COSCHEDULE"};
    for (size_t k = 0; k < sizeof env / sizeof *env; k++)
        for (const char *e = getenv(env[k]); e && *e; e++) h = mix(h, (uint64_t)(unsigned char)*e + (k << 8));
    h = mix(h, (uint64_t)pairs_wanted(c)); // pairs or not
    for (int i = 0; i < g->n_nodes; i++) {
        const weft_gnode *n = &g->nodes[i];
        h = mix(h, (uint64_t)n->kind ^ ((uint64_t)(uintptr_t)n->op << 8));
        h = mix(h, ((uint64_t)(uint32_t)n->n_in << 32) ^ (uint64_t)(uint32_t)n->n_ctrl);
        h = mix(h, ((uint64_t)(uint32_t)n->out0 << 32) ^ ((uint64_t)(uint32_t)n->n_out << 8) ^ (uint64_t)(uint32_t)n->var);
        for (int k = 0; k < n->n_in; k++) h = mix(h, (uint64_t)(uint32_t)n->in[k]);
        for (int k = 0; k < n->n_ctrl; k++) h = mix(h, (uint64_t)(uint32_t)n->ctrl[k] << 1);
    }
    for (int v = 0; v < g->n_values; v++) {
        const weft_gvalue *x = &g->values[v];
        h = mix(h, ((uint64_t)(uint8_t)x->ndim << 8) ^ x->dtype);
        for (int d = 0; d < x->ndim; d++) h = mix(h, (uint64_t)x->sizes[d]);
    }
    return h;
}

static void *dup_mem(const void *p, size_t n) {
    void *q = malloc(n ? n : 1);
    if (q && n) memcpy(q, p, n);
    return q;
}

static bool plan_copy(weft_plan *dst, const weft_plan *src, size_t nV) {
    *dst = *src;
    dst->root = dup_mem(src->root, nV * sizeof *src->root);
    dst->offset = dup_mem(src->offset, nV * sizeof *src->offset);
    if (dst->root && dst->offset) return true;
    weft_plan_free(dst);
    return false;
}

// Mark the OP outputs that can be written straight into the variable they
// are assigned to (WEFT_OPF_INPLACE): output j of X has exactly one consumer,
// an ASSIGN to V, is not fetched; X's input j is V's value and no other input
// of X aliases V; no other needed assign writes V; and every other needed
// node that reads V (directly or through views) is an ancestor of X, so it
// has run (serial or parallel) before X overwrites V.
static weft_status find_inplace(const run_ctx *c, int32_t *inplace) {
    const weft_graph *g = c->g;
    int N = g->n_nodes, V = g->n_values;
    for (int v = 0; v < V; v++) inplace[v] = -1;
    int32_t *root = malloc(((size_t)V + 1) * sizeof *root), *writes = calloc((size_t)N + 1, sizeof *writes);
    int32_t *mark = calloc((size_t)N + 1, sizeof *mark), *stack = malloc(((size_t)N + 1) * sizeof *stack);
    weft_status st = WEFT_OK;
    if (!root || !writes || !mark || !stack) {
        st = weft_error(WEFT_ERR_OOM, "graph_run: out of memory");
        goto done;
    }
    // root[v]: the VARIABLE node whose storage v aliases (views of it), -1. Data edges go to earlier nodes.
    for (int v = 0; v < V; v++) root[v] = g->nodes[g->values[v].node].kind == WEFT_NODE_VARIABLE ? g->values[v].node : -1;
    for (int i = 0; i < N; i++) {
        const weft_gnode *n = &g->nodes[i];
        if (!c->needed[i]) continue;
        if (n->kind == WEFT_NODE_OP && (n->op->flags & WEFT_OPF_VIEW) && n->n_in > 0) root[n->out0] = root[n->in[0]];
        if (n->kind == WEFT_NODE_ASSIGN || n->kind == WEFT_NODE_ASSIGN_ADD) writes[n->var]++;
    }
    int stamp = 0;
    for (int a = 0; a < N; a++) {
        const weft_gnode *an = &g->nodes[a];
        if (!c->needed[a] || an->kind != WEFT_NODE_ASSIGN || writes[an->var] != 1) continue;
        int32_t s = an->in[0], x = g->values[s].node, var = an->var;
        const weft_gnode *xn = &g->nodes[x];
        if (xn->kind != WEFT_NODE_OP || !(xn->op->flags & WEFT_OPF_INPLACE) || c->uses[s] != 1 || c->fetched[s]) continue;
        int j = s - xn->out0;
        if (j >= xn->n_in || g->values[xn->in[j]].node != var) continue;
        bool ok = true;
        for (int k = 0; k < xn->n_in && ok; k++) ok = k == j || root[xn->in[k]] != var;
        if (!ok) continue;
        // Ancestors of X (mark == stamp).
        stamp++;
        int sp = 0;
        stack[sp++] = x;
        mark[x] = stamp;
        while (sp) {
            const weft_gnode *n = &g->nodes[stack[--sp]];
            FOR_PREDS(g, n, p, if (mark[p] != stamp) { mark[p] = stamp; stack[sp++] = p; });
        }
        for (int i = 0; i < N && ok; i++) {
            const weft_gnode *n = &g->nodes[i];
            if (!c->needed[i] || i == x || mark[i] == stamp) continue;
            if (n->kind == WEFT_NODE_OP && (n->op->flags & WEFT_OPF_VIEW)) continue; // aliases, reads nothing
            for (int k = 0; k < n->n_in && ok; k++) ok = root[n->in[k]] != var;
        }
        if (ok) inplace[s] = var;
    }
done:
    free(root);
    free(writes);
    free(mark);
    free(stack);
    return st;
}

static bool key_equal(const run_entry *e, int n_fetch, const weft_value *fetch, int n_targets,
                      const weft_node_id *targets) {
    if (!e->used || e->n_fetch != n_fetch || e->n_targets != n_targets) return false;
    for (int k = 0; k < n_fetch; k++)
        if (e->key[k] != fetch[k].id) return false;
    for (int k = 0; k < n_targets; k++)
        if (e->key[n_fetch + k] != targets[k].id) return false;
    return true;
}

// prepare() through the cache; *entry: the cache entry now holding the result (NULL if not cached).
static weft_status prepare_cached(run_ctx *c, int n_fetch, const weft_value *fetch, int n_targets,
                                  const weft_node_id *targets, run_entry **entry) {
    weft_graph *g = c->g;
    size_t nN = (size_t)(g->n_nodes ? g->n_nodes : 1), nV = (size_t)(g->n_values ? g->n_values : 1);
    *entry = NULL;
    if (!g->run_cache && !(g->run_cache = calloc(1, sizeof *g->run_cache)))
        return weft_error(WEFT_ERR_OOM, "graph_run: out of memory");
    uint64_t fp = graph_fingerprint(c);
    struct weft_run_cache *rc = g->run_cache;
    for (int k = 0; k < RUN_CACHE_SLOTS; k++) {
        run_entry *e = &rc->e[k];
        if (!key_equal(e, n_fetch, fetch, n_targets, targets)) continue;
        if (e->fp != fp) {
            entry_free(e); // the graph changed since
            break;
        }
        for (int32_t i = 0; i < g->n_nodes; i++) {
            const weft_gnode *n = &g->nodes[i];
            if (e->needed[i] && n->kind == WEFT_NODE_PLACEHOLDER && !c->feed[n->out0])
                return weft_error(WEFT_ERR_ARG, "graph_run: placeholder '%s' is needed but not fed", n->name);
        }
        memcpy(c->needed, e->needed, nN);
        memcpy(c->fetched, e->fetched, nV);
        memcpy(c->indeg, e->indeg, nN * sizeof *c->indeg);
        memcpy(c->succ_off, e->succ_off, (nN + 1) * sizeof *c->succ_off);
        memcpy(c->uses, e->uses, nV * sizeof *c->uses);
        memcpy(c->order, e->order, nN * sizeof *c->order);
        memcpy(c->co, e->co, nN);
        c->n_order = e->n_order;
        c->succ = dup_mem(e->succ, e->n_edges * sizeof *c->succ);
        if (!c->succ) return weft_error(WEFT_ERR_OOM, "graph_run: out of memory");
        c->inplace = e->inplace;
        *entry = e;
        return WEFT_OK;
    }
    weft_status st = prepare(c, true, n_fetch, fetch, n_targets, targets, "graph_run");
    if (st != WEFT_OK) return st;
    run_entry *e = &rc->e[rc->next];
    rc->next = (rc->next + 1) % RUN_CACHE_SLOTS;
    entry_free(e);
    size_t n_edges = (size_t)c->succ_off[g->n_nodes];
    e->key = malloc(((size_t)(n_fetch + n_targets) + 1) * sizeof *e->key);
    e->inplace = malloc(nV * sizeof *e->inplace);
    if (e->key) {
        for (int k = 0; k < n_fetch; k++) e->key[k] = fetch[k].id;
        for (int k = 0; k < n_targets; k++) e->key[n_fetch + k] = targets[k].id;
    }
    e->needed = dup_mem(c->needed, nN);
    e->fetched = dup_mem(c->fetched, nV);
    e->indeg = dup_mem(c->indeg, nN * sizeof *c->indeg);
    e->succ_off = dup_mem(c->succ_off, (nN + 1) * sizeof *c->succ_off);
    e->succ = dup_mem(c->succ, n_edges * sizeof *c->succ);
    e->uses = dup_mem(c->uses, nV * sizeof *c->uses);
    e->order = dup_mem(c->order, nN * sizeof *c->order);
    e->co = dup_mem(c->co, nN);
    if (!e->key || !e->inplace || !e->needed || !e->fetched || !e->indeg || !e->succ_off || !e->succ || !e->uses ||
        !e->order || !e->co || (st = find_inplace(c, e->inplace)) != WEFT_OK) {
        entry_free(e);
        return st != WEFT_OK ? st : weft_error(WEFT_ERR_OOM, "graph_run: out of memory");
    }
    e->used = true;
    e->fp = fp;
    e->n_fetch = n_fetch, e->n_targets = n_targets;
    e->n_edges = n_edges;
    e->n_order = c->n_order;
    c->inplace = e->inplace;
    *entry = e;
    return WEFT_OK;
}

// ---- co-scheduled pairs (coschedule.c) ----
// Two independent nodes at once, one OpenMP thread each: inside the region
// kernels see one thread (weft_num_threads) and OpenBLAS's OpenMP build runs
// single-threaded. A team of one (nested in a caller's region, or one
// thread configured) runs them one after the other. Outputs are committed
// after both finished: the plan kept both nodes' inputs alive through the pair.
static weft_status exec_pair(run_ctx *c, int32_t a, int32_t b) {
    int32_t ids[2] = {a, b};
    weft_tensor *outs[2][WEFT_NODE_MAX_OUT] = {{NULL}};
    weft_status st[2] = {WEFT_OK, WEFT_OK};
    char msg[2][1024] = {"", ""};
    int nt = weft_num_threads() >= 2 ? 2 : 1;
#pragma omp parallel for num_threads(nt) schedule(static, 1)
    for (int k = 0; k < 2; k++) {
        bool prev = weft_grad_set_enabled(false); // per thread: a pool thread starts with grad on
        st[k] = weft_run_exec_node(c, ids[k], outs[k]);
        if (st[k] != WEFT_OK) snprintf(msg[k], sizeof msg[k], "%s", weft_last_error());
        weft_grad_set_enabled(prev);
    }
    if (st[0] != WEFT_OK || st[1] != WEFT_OK) {
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < WEFT_NODE_MAX_OUT; j++) weft_tensor_free(outs[k][j]);
        int k = st[0] != WEFT_OK ? 0 : 1;
        return weft_error(st[k], "%s", msg[k]);
    }
    weft_run_commit_node(c, a, outs[0]);
    weft_run_commit_node(c, b, outs[1]);
    c->g->stats.co_pairs++;
    return WEFT_OK;
}

// ---- parallel execution ----
static void *worker(void *arg) {
    run_ctx *c = arg;
    bool prev = weft_grad_set_enabled(false); // a no-op on the caller's thread; new threads start with grad on
    weft_tensor *outs[WEFT_NODE_MAX_OUT];
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->err == WEFT_OK && c->head == c->tail && c->done < c->n_order) pthread_cond_wait(&c->cv, &c->mu);
        if (c->err != WEFT_OK || c->done == c->n_order) break;
        int32_t x = c->queue[c->head++];
        pthread_mutex_unlock(&c->mu);
        for (int j = 0; j < WEFT_NODE_MAX_OUT; j++) outs[j] = NULL;
        weft_status st = weft_run_exec_node(c, x, outs);
        pthread_mutex_lock(&c->mu);
        if (st != WEFT_OK) {
            if (c->err == WEFT_OK) {
                c->err = st;
                snprintf(c->errmsg, sizeof c->errmsg, "%s", weft_last_error());
            }
            pthread_cond_broadcast(&c->cv);
            break;
        }
        weft_run_commit_node(c, x, outs); // also when another node failed meanwhile: ctx_free releases the outputs
        c->done++;
        int pushed = 0;
        for (int32_t e = c->succ_off[x]; e < c->succ_off[x + 1]; e++)
            if (--c->indeg[c->succ[e]] == 0) c->queue[c->tail++] = c->succ[e], pushed++;
        if (pushed > 1 || c->done == c->n_order) pthread_cond_broadcast(&c->cv);
        else if (pushed == 1) pthread_cond_signal(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    weft_grad_set_enabled(prev);
    return NULL;
}

static weft_status run_parallel(run_ctx *c, int threads) {
    if (pthread_mutex_init(&c->mu, NULL) != 0) return weft_error(WEFT_ERR_STATE, "graph_run: pthread_mutex_init failed");
    if (pthread_cond_init(&c->cv, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        return weft_error(WEFT_ERR_STATE, "graph_run: pthread_cond_init failed");
    }
    c->head = c->tail = c->done = 0;
    c->err = WEFT_OK;
    for (int32_t i = 0; i < c->g->n_nodes; i++)
        if (c->needed[i] && c->indeg[i] == 0) c->queue[c->tail++] = i;
    pthread_t tids[64];
    int n_started = 0;
    for (int t = 1; t < threads && t < 64; t++)
        if (pthread_create(&tids[n_started], NULL, worker, c) == 0) n_started++;
    worker(c); // the calling thread is a worker too (enough on its own if creation failed)
    for (int t = 0; t < n_started; t++) pthread_join(tids[t], NULL);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    c->g->stats.interop_threads = n_started + 1;
    if (c->err != WEFT_OK) return weft_error(c->err, "%s", c->errmsg);
    return WEFT_OK;
}

static int env_int(const char *name, int dflt) {
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end;
    long v = strtol(s, &end, 10);
    return (*end || v < 0 || v > 1024) ? dflt : (int)v;
}

static const char *dev_str(weft_device d, char *b) { return weft_device_str(d, b, 32); }

// Value v is a placeholder's, or a view of one (through view ops).
static bool of_feed(const weft_graph *g, int32_t v) {
    for (;;) {
        const weft_gnode *n = &g->nodes[g->values[v].node];
        if (n->kind == WEFT_NODE_PLACEHOLDER) return true;
        if (n->kind != WEFT_NODE_OP || !(n->op->flags & WEFT_OPF_VIEW) || n->n_in < 1) return false;
        v = n->in[0];
    }
}

// The device this run happens on: the needed variables' and the fed
// placeholders' (state and inputs decide, and must agree: a graph runs on
// one device, and moving them behind the caller's back would copy every
// run or break the storage a variable shares with its eager parameter);
// without either, the needed constants'; without any, the CPU. Constants
// are values: one on another device is copied to the run's device once (the
// node then holds the copy), so constants made by passes or by hand never
// stop a run.
static weft_status resolve_device(run_ctx *c, int n_feeds, const weft_value *feed_vals, weft_tensor *const *feeds) {
    weft_graph *g = c->g;
    const char *by = NULL, *by_kind = NULL;
    weft_device dev = WEFT_DEVICE_CPU;
    char a[32], b[32];
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const weft_gnode *n = &g->nodes[i];
        if (!c->needed[i] || n->kind != WEFT_NODE_VARIABLE || !n->tensor) continue;
        if (!by) by = n->name, by_kind = "variable", dev = n->tensor->device;
        else if (!weft_device_equal(n->tensor->device, dev))
            return weft_error(WEFT_ERR_DEVICE, "graph_run: variable '%s' is on %s, but %s '%s' is on %s: a graph runs "
                              "on one device", n->name, dev_str(n->tensor->device, a), by_kind, by, dev_str(dev, b));
    }
    for (int k = 0; k < n_feeds; k++) {
        const weft_gnode *n = &g->nodes[g->values[feed_vals[k].id].node];
        if (!c->needed[g->values[feed_vals[k].id].node]) continue;
        if (!by) by = n->name, by_kind = "placeholder", dev = feeds[k]->device;
        else if (!weft_device_equal(feeds[k]->device, dev))
            return weft_error(WEFT_ERR_DEVICE, "graph_run: placeholder '%s' is fed a tensor on %s, but %s '%s' is on "
                              "%s: a graph runs on one device (move the feed there with weft_tensor_to)", n->name,
                              dev_str(feeds[k]->device, a), by_kind, by, dev_str(dev, b));
    }
    for (int32_t i = 0; i < g->n_nodes && !by; i++) {
        const weft_gnode *n = &g->nodes[i];
        if (c->needed[i] && n->kind == WEFT_NODE_CONSTANT && n->tensor) by = n->name, dev = n->tensor->device;
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        weft_gnode *n = &g->nodes[i];
        if (!c->needed[i] || n->kind != WEFT_NODE_CONSTANT || !n->tensor || weft_device_equal(n->tensor->device, dev))
            continue;
        weft_tensor *m = weft_tensor_to(n->tensor, dev);
        if (!m) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", weft_last_error());
            return weft_error(weft_last_status(), "graph_run: constant '%s': copying it to %s: %s", n->name,
                              dev_str(dev, a), msg);
        }
        weft_tensor_free(n->tensor);
        n->tensor = m;
    }
    c->dev = dev;
    return WEFT_OK;
}

static weft_status run_impl(run_ctx *c, int n_feeds, const weft_value *feed_vals, weft_tensor *const *feeds,
                            int n_fetch, const weft_value *fetch, weft_tensor **out, int n_targets,
                            const weft_node_id *targets, const weft_graph_run_options *opts) {
    weft_graph *g = c->g;
    weft_status st = ctx_alloc(c, n_feeds);
    run_entry *entry = NULL;
    if (st == WEFT_OK) st = check_feeds(c, n_feeds, feed_vals, feeds);
    if (st == WEFT_OK) st = prepare_cached(c, n_fetch, fetch, n_targets, targets, &entry);
    if (st == WEFT_OK) st = resolve_device(c, n_feeds, feed_vals, feeds);
    if (st != WEFT_OK) return st;

    // Storages that are not intermediates.
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const weft_gnode *n = &g->nodes[i];
        if (c->needed[i] && n->tensor) c->ext[c->n_ext++] = n->tensor->storage;
    }
    for (int k = 0; k < n_feeds; k++) c->ext[c->n_ext++] = feeds[k]->storage;
    for (c->scap = 16; c->scap < 2 * ((size_t)g->n_values + (size_t)c->n_ext); c->scap *= 2) {}
    c->skey = calloc(c->scap, sizeof *c->skey);
    c->scount = calloc(c->scap, sizeof *c->scount);
    if (!c->skey || !c->scount) return weft_error(WEFT_ERR_OOM, "graph_run: out of memory");
    for (int k = 0; k < c->n_ext; k++) smap_mark_ext(c, c->ext[k]);

    int threads = opts && opts->interop_threads > 0 ? opts->interop_threads : env_int("WEFT_INTEROP_THREADS", 1);
    if (threads < 1) threads = 1;
    int plan_opt = opts ? opts->memory_plan : 0;
    bool want_plan = plan_opt > 0 || (plan_opt == 0 && env_int("WEFT_GRAPH_PLAN", 1) != 0), capture = false;
    if (threads == 1 && want_plan && c->n_order > 0) {
        size_t nV = (size_t)(g->n_values ? g->n_values : 1);
        if (entry && entry->has_plan) {
            if (!plan_copy(&c->plan, &entry->plan, nV)) return weft_error(WEFT_ERR_OOM, "graph_run: out of memory");
        } else {
            st = weft_plan_build(g, c->order, c->n_order, c->fetched, c->co, c->inplace, &c->plan);
            if (st != WEFT_OK) return st;
            if (entry && plan_copy(&entry->plan, &c->plan, nV)) entry->has_plan = true;
        }
        // CUDA graphs (capture.c): the capture keeps its arena from run to run.
        const char *why = NULL;
        capture = entry && weft_capture_wanted(c, &entry->cap, &why);
        if (!capture && why) snprintf(g->cap_stats.why, sizeof g->cap_stats.why, "%s", why);
        if (c->plan.stats.n_buffers > 0 || capture) {
            // One allocation for every intermediate, on the run's device.
            int64_t sz = c->plan.arena_bytes ? c->plan.arena_bytes : 1;
            c->arena = capture ? weft_capture_arena(&entry->cap, c, sz) : weft_tensor_new(1, &sz, WEFT_U8, c->dev);
            if (!c->arena) return weft_last_status();
            c->use_plan = true;
            g->stats.planned = true;
            g->stats.arena_bytes = (size_t)c->plan.arena_bytes;
        }
    }

    if (capture) {
        g->stats.interop_threads = 1;
        if ((st = weft_capture_run(&entry->cap, c)) != WEFT_OK) return st;
    } else if (threads > 1) {
        st = run_parallel(c, threads);
        if (st != WEFT_OK) return st;
    } else {
        g->stats.interop_threads = 1;
        weft_tensor *outs[WEFT_NODE_MAX_OUT];
        for (int s = 0; s < c->n_order; s++) {
            // A co-scheduled pair: two CPU threads; a device runs the two one after the other.
            if (s + 1 < c->n_order && c->co[s + 1] && c->dev.type == WEFT_CPU) {
                if ((st = exec_pair(c, c->order[s], c->order[s + 1])) != WEFT_OK) return st;
                s++;
                continue;
            }
            for (int j = 0; j < WEFT_NODE_MAX_OUT; j++) outs[j] = NULL;
            st = weft_run_exec_node(c, c->order[s], outs);
            if (st != WEFT_OK) return st;
            weft_run_commit_node(c, c->order[s], outs);
        }
    }
    g->stats.nodes_executed = c->n_order;
    g->stats.peak_bytes = c->peak;

    // Fetches: new references; a variable's value is a snapshot (later runs
    // write into it), and so is a value in the arena (freed after the run)
    // or in a captured run's fixed feed buffer (the next run's feed goes there).
    for (int k = 0; k < n_fetch; k++) {
        int32_t v = fetch[k].id;
        weft_node_kind kind = g->nodes[g->values[v].node].kind;
        bool stateful = kind == WEFT_NODE_VARIABLE || kind == WEFT_NODE_ASSIGN || kind == WEFT_NODE_ASSIGN_ADD;
        bool in_arena = c->use_plan && c->plan.root[v] >= 0;
        out[k] = stateful || in_arena || (capture && of_feed(g, v)) ? weft_tensor_clone(c->vals[v])
                                                                     : weft_tensor_ref(c->vals[v]);
        if (!out[k]) return weft_last_status();
    }
    return WEFT_OK;
}

weft_status weft_graph_run_ex(weft_graph *g, int n_feeds, const weft_value *feed_vals, weft_tensor *const *feeds,
                              int n_fetch, const weft_value *fetch, weft_tensor **out, int n_targets,
                              const weft_node_id *targets, const weft_graph_run_options *opts) {
    if (!g) return weft_error(WEFT_ERR_ARG, "graph_run: NULL graph");
    if (n_feeds < 0 || n_fetch < 0 || n_targets < 0 || (n_feeds && (!feed_vals || !feeds)) ||
        (n_fetch && (!fetch || !out)) || (n_targets && !targets))
        return weft_error(WEFT_ERR_ARG, "graph_run: bad feeds, fetches or targets (NULL arrays or negative counts)");
    if (g->tracing) return weft_error(WEFT_ERR_STATE, "graph_run: the graph is being traced");
    for (int k = 0; k < n_fetch; k++) out[k] = NULL;
    g->stats = (weft_graph_run_stats){0};
    memset(&g->cap_stats, 0, sizeof g->cap_stats);
    // Run outside any trace on this thread and without recording autograd.
    struct weft_graph *tracing = weft_trace_active;
    weft_trace_active = NULL;
    bool prev = weft_grad_set_enabled(false);
    run_ctx c = {.g = g, .run_no = g->rng_runs++};
    weft_status st = run_impl(&c, n_feeds, feed_vals, feeds, n_fetch, fetch, out, n_targets, targets, opts);
    ctx_free(&c);
    weft_grad_set_enabled(prev);
    weft_trace_active = tracing;
    if (st != WEFT_OK)
        for (int k = 0; k < n_fetch; k++) {
            weft_tensor_free(out[k]);
            out[k] = NULL;
        }
    return st;
}

weft_status weft_graph_run(weft_graph *g, int n_feeds, const weft_value *feed_vals, weft_tensor *const *feeds,
                           int n_fetch, const weft_value *fetch, weft_tensor **out, int n_targets,
                           const weft_node_id *targets) {
    return weft_graph_run_ex(g, n_feeds, feed_vals, feeds, n_fetch, fetch, out, n_targets, targets, NULL);
}

weft_graph_run_stats weft_graph_last_run_stats(const weft_graph *g) {
    return g ? g->stats : (weft_graph_run_stats){0};
}

weft_graph_capture_stats weft_graph_capture_last(const weft_graph *g) {
    return g ? g->cap_stats : (weft_graph_capture_stats){0};
}

weft_status weft_graph_plan(weft_graph *g, int n_fetch, const weft_value *fetch, int n_targets,
                            const weft_node_id *targets, weft_graph_plan_stats *stats) {
    if (!g || !stats) return weft_error(WEFT_ERR_ARG, "graph_plan: NULL graph or stats");
    if (n_fetch < 0 || n_targets < 0 || (n_fetch && !fetch) || (n_targets && !targets))
        return weft_error(WEFT_ERR_ARG, "graph_plan: bad fetches or targets (NULL arrays or negative counts)");
    *stats = (weft_graph_plan_stats){0};
    run_ctx c = {.g = g};
    weft_status st = ctx_alloc(&c, 0);
    if (st == WEFT_OK) st = prepare(&c, false, n_fetch, fetch, n_targets, targets, "graph_plan");
    int32_t *inplace = NULL;
    if (st == WEFT_OK && !(inplace = malloc(((size_t)g->n_values + 1) * sizeof *inplace)))
        st = weft_error(WEFT_ERR_OOM, "graph_plan: out of memory");
    if (st == WEFT_OK) st = find_inplace(&c, inplace);
    if (st == WEFT_OK) st = weft_plan_build(g, c.order, c.n_order, c.fetched, c.co, inplace, &c.plan);
    free(inplace);
    if (st == WEFT_OK) *stats = c.plan.stats;
    ctx_free(&c);
    return st;
}
