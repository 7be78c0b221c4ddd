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
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "graph_impl.h"
#include "plan.h"
#include "schedule.h"
#include "trace_hook.h"

typedef struct run_ctx {
    weft_graph *g;
    uint8_t *needed;    // [nodes]
    int32_t *indeg;     // [nodes] predecessors not yet run (data edges + control deps)
    int32_t *succ_off;  // [nodes+1] CSR of successors
    int32_t *succ;      // [edges]
    int32_t *uses;      // [values] consumers (input edges) still to run
    uint8_t *fetched;   // [values]
    weft_tensor **vals; // [values] live tensors
    weft_tensor **feed; // [values] fed tensors (placeholders)
    int32_t *queue;     // [nodes] ready queue (FIFO)
    int32_t *order;     // [nodes] serial execution order (from the cycle check)
    int n_order;
    int32_t *live;      // [values] ids of values holding a tensor
    int32_t *live_pos;  // [values] index in live, -1
    int n_live;
    const void **ext; // sorted storages that are not intermediates (feeds, constants, variables)
    int n_ext;
    const void **scratch; // [values]
    size_t peak;
    // memory plan (serial runs)
    bool use_plan;
    weft_plan plan;
    weft_tensor *arena;
    // parallel runs
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int head, tail, done;
    weft_status err;
    char errmsg[1024];
} run_ctx;

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (const void *const *)a, y = (uintptr_t) * (const void *const *)b;
    return x < y ? -1 : x > y;
}

static void set_val(run_ctx *c, int32_t v, weft_tensor *t) {
    c->vals[v] = t;
    c->live_pos[v] = c->n_live;
    c->live[c->n_live++] = v;
}

static void drop_val(run_ctx *c, int32_t v) {
    weft_tensor_free(c->vals[v]);
    c->vals[v] = NULL;
    int p = c->live_pos[v];
    if (p < 0) return;
    int32_t last = c->live[--c->n_live];
    c->live[p] = last;
    c->live_pos[last] = p;
    c->live_pos[v] = -1;
}

// Bytes of distinct storages made by ops that are alive now (views of a
// variable or feed share its storage and cost nothing extra).
static void account_peak(run_ctx *c) {
    int n = 0;
    for (int k = 0; k < c->n_live; k++) {
        int32_t v = c->live[k];
        if (c->g->nodes[c->g->values[v].node].kind != WEFT_NODE_OP) continue;
        const void *s = c->vals[v]->storage;
        if (c->n_ext && bsearch(&s, c->ext, (size_t)c->n_ext, sizeof *c->ext, cmp_ptr)) continue;
        c->scratch[n++] = s;
    }
    qsort(c->scratch, (size_t)n, sizeof *c->scratch, cmp_ptr);
    size_t bytes = 0;
    for (int k = 0; k < n; k++)
        if (k == 0 || c->scratch[k] != c->scratch[k - 1]) bytes += ((const weft_storage *)c->scratch[k])->nbytes;
    if (bytes > c->peak) c->peak = bytes;
}

static weft_status node_error(const weft_gnode *n, weft_status st) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", weft_last_error());
    return weft_error(st != WEFT_OK ? st : WEFT_ERR_STATE, "graph_run: node '%s' (%s): %s", n->name,
                      n->kind == WEFT_NODE_OP ? n->op->name : weft_graph_kind_name(n->kind), msg);
}

// Run one node into outs[0..n_out) (new references; not yet published in
// c->vals). Reads c->vals of its inputs only, so several nodes may run at once.
static weft_status exec_node(run_ctx *c, int32_t id, weft_tensor **outs) {
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
        weft_status st = weft_tensor_copy_(var, src);
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
        weft_status st;
        if (c->use_plan && !(n->op->flags & WEFT_OPF_VIEW)) {
            // Outputs are tensors over the arena at their planned offsets.
            st = WEFT_OK;
            for (int j = 0; j < n->n_out; j++) out[j] = NULL;
            for (int j = 0; j < n->n_out && st == WEFT_OK; j++) {
                const weft_gvalue *v = &g->values[n->out0 + j];
                out[j] = weft_plan_tensor_at(c->arena, c->plan.offset[n->out0 + j], v->ndim, v->sizes,
                                             (weft_dtype)v->dtype);
                if (!out[j]) st = weft_last_status();
            }
            if (st == WEFT_OK) st = weft_op_apply_into(n->op, n->n_in, in, &n->attrs, out);
            if (st != WEFT_OK) {
                for (int j = 0; j < n->n_out; j++) weft_tensor_free(out[j]);
                for (int j = 0; j < n->n_out; j++) out[j] = NULL;
            }
        } else {
            st = weft_op_apply(n->op, n->n_in, in, &n->attrs, out);
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
    default:
        return weft_error(WEFT_ERR_STATE, "graph_run: node '%s' has an unknown kind %d", n->name, (int)n->kind);
    }
}

// Publish a run node's outputs, then liveness: an input dies with its last
// consumer, an unused output at once. (Under c->mu in parallel runs.)
static void commit_node(run_ctx *c, int32_t x, weft_tensor **outs) {
    const weft_gnode *n = &c->g->nodes[x];
    for (int j = 0; j < n->n_out; j++) set_val(c, n->out0 + j, outs[j]);
    account_peak(c);
    for (int k = 0; k < n->n_in; k++) {
        int32_t v = n->in[k];
        if (--c->uses[v] == 0 && !c->fetched[v]) drop_val(c, v);
    }
    for (int j = 0; j < n->n_out; j++) {
        int32_t v = n->out0 + j;
        if (c->uses[v] == 0 && !c->fetched[v]) drop_val(c, v);
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
    free(c->live);
    free(c->live_pos);
    free(c->ext);
    free(c->scratch);
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
    c->live = malloc(nV * sizeof *c->live);
    c->live_pos = malloc(nV * sizeof *c->live_pos);
    c->ext = malloc((nV + (size_t)n_feeds) * sizeof *c->ext);
    c->scratch = malloc(nV * sizeof *c->scratch);
    if (!c->needed || !c->indeg || !c->succ_off || !c->uses || !c->fetched || !c->vals || !c->feed || !c->queue ||
        !c->order || !c->live || !c->live_pos || !c->ext || !c->scratch)
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
    free(deg);
    free(done);
    return st;
}

// ---- parallel execution ----
static void *worker(void *arg) {
    run_ctx *c = arg;
    bool prev = weft_grad_set_enabled(false); // a no-op on the caller's thread; new threads start with grad on
    weft_tensor *outs[WEFT_MAX_OP_OUT];
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->err == WEFT_OK && c->head == c->tail && c->done < c->n_order) pthread_cond_wait(&c->cv, &c->mu);
        if (c->err != WEFT_OK || c->done == c->n_order) break;
        int32_t x = c->queue[c->head++];
        pthread_mutex_unlock(&c->mu);
        for (int j = 0; j < WEFT_MAX_OP_OUT; j++) outs[j] = NULL;
        weft_status st = exec_node(c, x, outs);
        pthread_mutex_lock(&c->mu);
        if (st != WEFT_OK) {
            if (c->err == WEFT_OK) {
                c->err = st;
                snprintf(c->errmsg, sizeof c->errmsg, "%s", weft_last_error());
            }
            pthread_cond_broadcast(&c->cv);
            break;
        }
        commit_node(c, x, outs); // also when another node failed meanwhile: ctx_free releases the outputs
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

static weft_status run_impl(run_ctx *c, int n_feeds, const weft_value *feed_vals, weft_tensor *const *feeds,
                            int n_fetch, const weft_value *fetch, weft_tensor **out, int n_targets,
                            const weft_node_id *targets, const weft_graph_run_options *opts) {
    weft_graph *g = c->g;
    weft_status st = ctx_alloc(c, n_feeds);
    if (st == WEFT_OK) st = check_feeds(c, n_feeds, feed_vals, feeds);
    if (st == WEFT_OK) st = prepare(c, true, n_fetch, fetch, n_targets, targets, "graph_run");
    if (st != WEFT_OK) return st;

    // Storages that are not intermediates.
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const weft_gnode *n = &g->nodes[i];
        if (c->needed[i] && n->tensor) c->ext[c->n_ext++] = n->tensor->storage;
    }
    for (int k = 0; k < n_feeds; k++) c->ext[c->n_ext++] = feeds[k]->storage;
    qsort(c->ext, (size_t)c->n_ext, sizeof *c->ext, cmp_ptr);

    int threads = opts && opts->interop_threads > 0 ? opts->interop_threads : env_int("WEFT_INTEROP_THREADS", 1);
    if (threads < 1) threads = 1;
    int plan_opt = opts ? opts->memory_plan : 0;
    bool want_plan = plan_opt > 0 || (plan_opt == 0 && env_int("WEFT_GRAPH_PLAN", 1) != 0);
    if (threads == 1 && want_plan && c->n_order > 0) {
        st = weft_plan_build(g, c->order, c->n_order, c->fetched, &c->plan);
        if (st != WEFT_OK) return st;
        if (c->plan.stats.n_buffers > 0) {
            // One allocation for every intermediate; the device is the inputs' (CPU today).
            int64_t sz = c->plan.arena_bytes ? c->plan.arena_bytes : 1;
            c->arena = weft_tensor_new(1, &sz, WEFT_U8, weft_device_get_default());
            if (!c->arena) return weft_last_status();
            c->use_plan = true;
            g->stats.planned = true;
            g->stats.arena_bytes = (size_t)c->plan.arena_bytes;
        }
    }

    if (threads > 1) {
        st = run_parallel(c, threads);
        if (st != WEFT_OK) return st;
    } else {
        g->stats.interop_threads = 1;
        weft_tensor *outs[WEFT_MAX_OP_OUT];
        for (int s = 0; s < c->n_order; s++) {
            for (int j = 0; j < WEFT_MAX_OP_OUT; j++) outs[j] = NULL;
            st = exec_node(c, c->order[s], outs);
            if (st != WEFT_OK) return st;
            commit_node(c, c->order[s], outs);
        }
    }
    g->stats.nodes_executed = c->n_order;
    g->stats.peak_bytes = c->peak;

    // Fetches: new references; a variable's value is a snapshot (later runs
    // write into it), and so is a value in the arena (freed after the run).
    for (int k = 0; k < n_fetch; k++) {
        int32_t v = fetch[k].id;
        weft_node_kind kind = g->nodes[g->values[v].node].kind;
        bool stateful = kind == WEFT_NODE_VARIABLE || kind == WEFT_NODE_ASSIGN || kind == WEFT_NODE_ASSIGN_ADD;
        bool in_arena = c->use_plan && c->plan.root[v] >= 0;
        out[k] = stateful || in_arena ? weft_tensor_clone(c->vals[v]) : weft_tensor_ref(c->vals[v]);
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
    // Run outside any trace on this thread and without recording autograd.
    struct weft_graph *tracing = weft_trace_active;
    weft_trace_active = NULL;
    bool prev = weft_grad_set_enabled(false);
    run_ctx c = {.g = g};
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

weft_status weft_graph_plan(weft_graph *g, int n_fetch, const weft_value *fetch, int n_targets,
                            const weft_node_id *targets, weft_graph_plan_stats *stats) {
    if (!g || !stats) return weft_error(WEFT_ERR_ARG, "graph_plan: NULL graph or stats");
    if (n_fetch < 0 || n_targets < 0 || (n_fetch && !fetch) || (n_targets && !targets))
        return weft_error(WEFT_ERR_ARG, "graph_plan: bad fetches or targets (NULL arrays or negative counts)");
    *stats = (weft_graph_plan_stats){0};
    run_ctx c = {.g = g};
    weft_status st = ctx_alloc(&c, 0);
    if (st == WEFT_OK) st = prepare(&c, false, n_fetch, fetch, n_targets, targets, "graph_plan");
    if (st == WEFT_OK) st = weft_plan_build(g, c.order, c.n_order, c.fetched, &c.plan);
    if (st == WEFT_OK) *stats = c.plan.stats;
    ctx_free(&c);
    return st;
}
