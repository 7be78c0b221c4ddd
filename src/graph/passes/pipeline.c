// The pass pipeline: weft_graph_optimize. Each pass builds a new graph from
// the current one; the caller's keep values and nodes are carried through
// every pass's map. Rounds repeat (folding exposes simplifications, which
// expose merges, which leave dead code) until a round changes nothing.
#include <stdlib.h>
#include <string.h>

#include "../rewrite.h"

#define MAX_ROUNDS 8

weft_graph_passes weft_graph_passes_all(void) {
    return (weft_graph_passes){.constant_folding = true, .cse = true, .dce = true, .algebraic = true,
                                .fusion = true, .transpose_fold = true, .remat = true};
}

// Identity copy (every pass off).
static weft_status pass_copy(weft_rw *rw, weft_pass_io *io) {
    (void)io;
    for (int32_t s = 0; s < rw->src->n_nodes; s++)
        if (weft_rw_copy(rw, s) < 0) return weft_last_status();
    return WEFT_OK;
}

typedef struct pipe {
    const weft_graph *orig;
    weft_graph *cur; // owned unless == orig
    int32_t *kv;     // keep values in cur
    int32_t *kn;     // keep nodes in cur
    int n_kv, n_kn;
} pipe;

static weft_status run_pass_io(pipe *p, weft_pass_fn fn, bool fast_math, int *changed, int *groups);
static weft_status run_pass(pipe *p, weft_pass_fn fn, bool fast_math, int *changed) {
    return run_pass_io(p, fn, fast_math, changed, NULL);
}

static weft_status run_pass_io(pipe *p, weft_pass_fn fn, bool fast_math, int *changed, int *groups) {
    const weft_graph *src = p->cur ? p->cur : p->orig;
    weft_rw rw;
    weft_status st = weft_rw_init(&rw, src);
    if (st != WEFT_OK) return st;
    uint8_t *roots = NULL;
    if (fn == weft_pass_dce) {
        roots = calloc((size_t)(src->n_nodes ? src->n_nodes : 1), 1);
        if (!roots) {
            weft_rw_free(&rw, false);
            return weft_error(WEFT_ERR_OOM, "graph_optimize: out of memory");
        }
        for (int32_t i = 0; i < src->n_nodes; i++) {
            weft_node_kind k = src->nodes[i].kind;
            roots[i] = k == WEFT_NODE_PLACEHOLDER || k == WEFT_NODE_VARIABLE || k == WEFT_NODE_ASSIGN ||
                       k == WEFT_NODE_ASSIGN_ADD || k == WEFT_NODE_ENQUEUE;
        }
        for (int i = 0; i < p->n_kv; i++) roots[src->values[p->kv[i]].node] = 1;
        for (int i = 0; i < p->n_kn; i++) roots[p->kn[i]] = 1;
    }
    weft_pass_io io = {.roots = roots, .fast_math = fast_math};
    uint8_t *keep_vals = NULL; // fusion: fetched values must stay outputs of the fused node
    if (fn == weft_pass_fusion) {
        keep_vals = calloc((size_t)(src->n_values ? src->n_values : 1), 1);
        if (!keep_vals) {
            weft_rw_free(&rw, false);
            return weft_error(WEFT_ERR_OOM, "graph_optimize: out of memory");
        }
        for (int i = 0; i < p->n_kv; i++) keep_vals[p->kv[i]] = 1;
        io.keep_vals = keep_vals;
    }
    st = fn(&rw, &io);
    free(roots);
    free(keep_vals);
    if (groups) *groups = io.fused_groups;
    if (st == WEFT_OK) st = weft_rw_finish(&rw);
    if (st == WEFT_OK)
        for (int i = 0; i < p->n_kv && st == WEFT_OK; i++)
            if ((p->kv[i] = rw.vmap[p->kv[i]]) < 0)
                st = weft_error(WEFT_ERR_STATE, "graph_optimize: keep value %d was dropped by a pass", i);
    if (st == WEFT_OK)
        for (int i = 0; i < p->n_kn && st == WEFT_OK; i++)
            if ((p->kn[i] = rw.nmap[p->kn[i]]) < 0)
                st = weft_error(WEFT_ERR_STATE, "graph_optimize: keep node %d was dropped by a pass", i);
    if (st != WEFT_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", weft_last_error());
        weft_rw_free(&rw, false);
        // Every message names the function (a pass's own already does).
        return strncmp(msg, "graph_optimize", 14) ? weft_error(st, "graph_optimize: %s", msg) : st;
    }
    if (p->cur) weft_graph_free(p->cur);
    p->cur = rw.dst;
    weft_rw_free(&rw, true);
    *changed = io.changed;
    return WEFT_OK;
}

weft_graph *weft_graph_optimize_nodes(const weft_graph *g, int n_keep, const weft_value *keep, weft_value *keep_out,
                                      int n_keep_nodes, const weft_node_id *keep_nodes, weft_node_id *keep_nodes_out,
                                      const weft_graph_passes *passes, weft_graph_pass_stats *stats) {
    if (!g) return weft_error_null(WEFT_ERR_ARG, "graph_optimize: NULL graph");
    if (n_keep < 0 || n_keep_nodes < 0 || (n_keep && (!keep || !keep_out)) ||
        (n_keep_nodes && (!keep_nodes || !keep_nodes_out)))
        return weft_error_null(WEFT_ERR_ARG, "graph_optimize: bad keep lists (NULL arrays or negative counts)");
    if (g->tracing) return weft_error_null(WEFT_ERR_STATE, "graph_optimize: the graph is being traced");
    for (int i = 0; i < n_keep; i++)
        if (!weft_graph_value_ok(g, keep[i]))
            return weft_error_null(WEFT_ERR_ARG, "graph_optimize: keep value %d (id %d) is not a value of this graph",
                                   i, (int)keep[i].id);
    for (int i = 0; i < n_keep_nodes; i++)
        if (keep_nodes[i].id < 0 || keep_nodes[i].id >= g->n_nodes)
            return weft_error_null(WEFT_ERR_ARG, "graph_optimize: keep node %d (id %d) is not a node of this graph",
                                   i, (int)keep_nodes[i].id);
    weft_graph_passes ps = passes ? *passes : weft_graph_passes_all();
    weft_graph_pass_stats stt = {.nodes_before = g->n_nodes};
    pipe p = {.orig = g, .n_kv = n_keep, .n_kn = n_keep_nodes};
    p.kv = malloc((size_t)(n_keep + 1) * sizeof *p.kv);
    p.kn = malloc((size_t)(n_keep_nodes + 1) * sizeof *p.kn);
    if (!p.kv || !p.kn) {
        free(p.kv);
        free(p.kn);
        return weft_error_null(WEFT_ERR_OOM, "graph_optimize: out of memory");
    }
    for (int i = 0; i < n_keep; i++) p.kv[i] = keep[i].id;
    for (int i = 0; i < n_keep_nodes; i++) p.kn[i] = keep_nodes[i].id;

    // Fixed order per round.
    struct {
        bool on;
        weft_pass_fn fn;
        int *count;
    } order[] = {{ps.constant_folding, weft_pass_constant_folding, &stt.folded},
                 {ps.algebraic, weft_pass_algebraic, &stt.simplified},
                 {ps.transpose_fold, weft_pass_transpose_fold, &stt.transposes_folded},
                 {ps.cse, weft_pass_cse, &stt.cse_merged},
                 {ps.hfuse, weft_pass_hfuse, &stt.hfused},
                 {ps.layout, weft_pass_layout, &stt.layout_changed},
                 {ps.dce, weft_pass_dce, &stt.dce_removed}};
    weft_status st = WEFT_OK;
    for (int round = 0; round < MAX_ROUNDS && st == WEFT_OK; round++) {
        int total = 0;
        for (size_t k = 0; k < sizeof order / sizeof *order && st == WEFT_OK; k++) {
            if (!order[k].on) continue;
            int changed = 0;
            st = run_pass(&p, order[k].fn, ps.fast_math, &changed);
            *order[k].count += changed;
            total += changed;
        }
        stt.rounds = round + 1;
        if (!total) break;
    }
    // Rematerialisation once at the end: CSE would merge its duplicates back.
    if (st == WEFT_OK && ps.remat) st = run_pass(&p, weft_pass_remat, false, &stt.rematerialized);
    if (st == WEFT_OK && ps.fusion) // fused nodes are opaque to the other passes: once, at the end
        st = run_pass_io(&p, weft_pass_fusion, false, &stt.fused_nodes, &stt.fused_groups);
    if (st == WEFT_OK && !p.cur) { // nothing ran: still a new graph
        int changed = 0;
        st = run_pass(&p, pass_copy, false, &changed);
    }
    if (st != WEFT_OK) {
        weft_graph_free(p.cur);
        free(p.kv);
        free(p.kn);
        return NULL;
    }
    for (int i = 0; i < n_keep; i++) keep_out[i] = (weft_value){p.kv[i]};
    for (int i = 0; i < n_keep_nodes; i++) keep_nodes_out[i] = (weft_node_id){p.kn[i]};
    stt.nodes_after = p.cur->n_nodes;
    if (stats) *stats = stt;
    free(p.kv);
    free(p.kn);
    return p.cur;
}

weft_graph *weft_graph_optimize(const weft_graph *g, int n_keep, const weft_value *keep, weft_value *keep_out,
                                const weft_graph_passes *passes, weft_graph_pass_stats *stats) {
    return weft_graph_optimize_nodes(g, n_keep, keep, keep_out, 0, NULL, NULL, passes, stats);
}
