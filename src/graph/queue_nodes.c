// Queues as graph nodes: ENQUEUE (push its inputs, no outputs) and DEQUEUE
// (pop one element into its outputs). The queue itself (queue.c) does the
// blocking and the closing; these nodes only check static types at build
// time and move tensors at run time. Each node holds one queue reference.
#include <string.h>

#include <weft/queue.h>

#include "graph_impl.h"

static int32_t add_queue_node(weft_graph *g, const char *fn, weft_node_kind kind, const char *name, weft_queue *q,
                              int n_in, const int32_t *in, int n_out) {
    int32_t id = weft_graph_add_node(g, fn, kind, name, weft_graph_kind_name(kind), n_in, in, n_out);
    if (id >= 0) g->nodes[id].queue = weft_queue_ref(q);
    return id;
}

weft_node_id weft_graph_enqueue(weft_graph *g, const char *name, weft_queue *q, int n, const weft_value *values) {
    const char *nm = name ? name : "(unnamed)";
    if (!g || !q) return weft_error(WEFT_ERR_ARG, "graph_enqueue: '%s': NULL %s", nm, g ? "queue" : "graph"), WEFT_NODE_NONE;
    if (g->tracing) return weft_error(WEFT_ERR_STATE, "graph_enqueue: '%s': the graph is being traced", nm), WEFT_NODE_NONE;
    int nc = weft_queue_num_components(q);
    if (n != nc || (n && !values))
        return weft_error(WEFT_ERR_ARG, "graph_enqueue: '%s': queue '%s' has %d components, got %d values%s", nm,
                          weft_queue_name(q), nc, n, n && !values ? " (NULL array)" : ""),
               WEFT_NODE_NONE;
    int32_t in[64];
    if (n > 64) return weft_error(WEFT_ERR_ARG, "graph_enqueue: '%s': more than 64 components", nm), WEFT_NODE_NONE;
    for (int k = 0; k < n; k++) {
        if (!weft_graph_value_ok(g, values[k]))
            return weft_error(WEFT_ERR_ARG, "graph_enqueue: '%s': value %d is not a value of this graph", nm, k),
                   WEFT_NODE_NONE;
        const weft_gvalue *v = &g->values[values[k].id];
        weft_dtype dt;
        int nd;
        int64_t sz[WEFT_MAX_DIMS];
        weft_queue_component(q, k, &dt, &nd, sz);
        bool fits = nd < 0 || nd == v->ndim;
        for (int d = 0; fits && nd > 0 && d < nd; d++) fits = sz[d] < 0 || sz[d] == v->sizes[d];
        if (v->dtype != dt || !fits) {
            char a[96];
            return weft_error(WEFT_ERR_SHAPE, "graph_enqueue: '%s': value %d is %s %s, which queue '%s' does not take "
                              "as component %d (%s)", nm, k, weft_dtype_name((weft_dtype)v->dtype),
                              weft_shape_fmt(v->ndim, v->sizes, a, sizeof a), weft_queue_name(q), k, weft_dtype_name(dt)),
                   WEFT_NODE_NONE;
        }
        in[k] = values[k].id;
    }
    int32_t id = add_queue_node(g, "graph_enqueue", WEFT_NODE_ENQUEUE, name, q, n, in, 0);
    return (weft_node_id){id};
}

weft_node_id weft_graph_dequeue(weft_graph *g, const char *name, weft_queue *q, weft_value *out) {
    const char *nm = name ? name : "(unnamed)";
    if (!g || !q || !out)
        return weft_error(WEFT_ERR_ARG, "graph_dequeue: '%s': NULL %s", nm, !g ? "graph" : !q ? "queue" : "out"),
               WEFT_NODE_NONE;
    if (g->tracing) return weft_error(WEFT_ERR_STATE, "graph_dequeue: '%s': the graph is being traced", nm), WEFT_NODE_NONE;
    int nc = weft_queue_num_components(q);
    if (nc > WEFT_GRAPH_MAX_OUT)
        return weft_error(WEFT_ERR_ARG, "graph_dequeue: '%s': queue '%s' has %d components (at most %d)", nm,
                          weft_queue_name(q), nc, WEFT_GRAPH_MAX_OUT),
               WEFT_NODE_NONE;
    weft_dtype dt[WEFT_GRAPH_MAX_OUT];
    int nd[WEFT_GRAPH_MAX_OUT];
    int64_t sz[WEFT_GRAPH_MAX_OUT][WEFT_MAX_DIMS];
    for (int k = 0; k < nc; k++) {
        weft_queue_component(q, k, &dt[k], &nd[k], sz[k]);
        bool known = nd[k] >= 0;
        for (int d = 0; known && d < nd[k]; d++) known = sz[k][d] >= 0;
        if (!known) // graph values have static shapes
            return weft_error(WEFT_ERR_SHAPE, "graph_dequeue: '%s': component %d of queue '%s' has no fixed shape", nm,
                              k, weft_queue_name(q)),
                   WEFT_NODE_NONE;
    }
    int32_t id = add_queue_node(g, "graph_dequeue", WEFT_NODE_DEQUEUE, name, q, 0, NULL, nc);
    if (id < 0) return WEFT_NODE_NONE;
    for (int k = 0; k < nc; k++) {
        weft_gvalue *v = &g->values[g->nodes[id].out0 + k];
        v->ndim = (int8_t)nd[k];
        v->dtype = (uint8_t)dt[k];
        memset(v->sizes, 0, sizeof v->sizes);
        memcpy(v->sizes, sz[k], sizeof(int64_t) * (size_t)nd[k]);
        out[k] = (weft_value){g->nodes[id].out0 + k};
    }
    return (weft_node_id){id};
}

static weft_status queue_error(const weft_gnode *n, weft_status st) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", weft_last_error());
    return weft_error(st != WEFT_OK ? st : WEFT_ERR_STATE, "graph_run: node '%s' (%s): %s", n->name,
                      weft_graph_kind_name(n->kind), msg);
}

// Copies go in: the values may live in the run's arena or alias a variable,
// both overwritten by later runs, while the element waits in the queue.
weft_status weft_graph_exec_enqueue(weft_graph *g, const weft_gnode *n, weft_tensor *const *vals) {
    (void)g;
    weft_tensor *tuple[64] = {0};
    weft_status st = WEFT_OK;
    for (int k = 0; k < n->n_in && st == WEFT_OK; k++)
        if (!(tuple[k] = weft_tensor_clone(vals[n->in[k]]))) st = weft_last_status();
    if (st == WEFT_OK) st = weft_queue_enqueue(n->queue, tuple, -1);
    for (int k = 0; k < n->n_in; k++) weft_tensor_free(tuple[k]);
    return st == WEFT_OK ? WEFT_OK : queue_error(n, st);
}

weft_status weft_graph_exec_dequeue(weft_graph *g, const weft_gnode *n, weft_tensor **outs) {
    (void)g;
    weft_status st = weft_queue_dequeue(n->queue, outs, -1);
    if (st != WEFT_OK) return queue_error(n, st);
    return WEFT_OK;
}
