// Memory-aware serial order: "sink" pass over a valid order.
//
// The executor's cycle check yields a FIFO (breadth-first) order, which runs
// a node as soon as its inputs exist. For a traced training step that is
// memory-bad: backward-only nodes whose inputs come from the forward
// (gelu_grad(h)) and the optimiser's reads of its state (m * beta1) run at
// the start and hold their outputs through the whole forward and backward.
// Walking the order from the back, each OP node is moved to just before its
// earliest consumer when that saves more live byte-steps (its output no
// longer lives across the gap) than it costs (inputs that were dead before
// the consumer now live up to it). Moving a node later keeps the order
// valid: its producers stay before it, its consumers after it. Each node is
// visited once after all its consumers, so chains settle in one sweep.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule.h"

static int64_t value_bytes(const weft_graph *g, int32_t v) {
    const weft_gvalue *gv = &g->values[v];
    return weft_shape_numel(gv->ndim, gv->sizes) * (int64_t)weft_dtype_size((weft_dtype)gv->dtype);
}

static bool movable(const weft_gnode *n) {
    // batch_norm writes running statistics in its kernel: keep its place.
    return (n->kind == WEFT_NODE_OP && strcmp(n->op->name, "batch_norm") != 0) || n->kind == WEFT_NODE_FUSED;
}

weft_status weft_schedule_memory(const weft_graph *g, int32_t *order, int n, const uint8_t *fetched) {
    if (n < 3) return WEFT_OK;
    size_t nN = (size_t)g->n_nodes, nV = (size_t)(g->n_values ? g->n_values : 1);
    int32_t *pos = malloc(nN * sizeof *pos), *orig = malloc((size_t)n * sizeof *orig);
    int32_t *soff = calloc(nN + 1, sizeof *soff), *root = malloc(nV * sizeof *root), *varof = malloc(nV * sizeof *varof);
    int32_t *coff = calloc(nV + 1, sizeof *coff), *succ = NULL, *cons = NULL, *fill = NULL;
    uint8_t *rfetch = calloc(nV, 1);
    weft_status st = WEFT_OK;
    if (!pos || !orig || !soff || !root || !varof || !coff || !rfetch) goto oom;
    for (size_t i = 0; i < nN; i++) pos[i] = -1;
    for (int s = 0; s < n; s++) pos[order[s]] = s;
    for (size_t v = 0; v < nV; v++) root[v] = -1, varof[v] = -1;

    // Roots (buffers: non-view op outputs; views alias input 0), the variable a
    // value reads through, successor and root-consumer counts.
    size_t n_edges = 0, n_cons = 0;
    for (int s = 0; s < n; s++) {
        const weft_gnode *x = &g->nodes[order[s]];
        for (int k = 0; k < x->n_in; k++) {
            soff[g->values[x->in[k]].node + 1]++;
            if (root[x->in[k]] >= 0) coff[root[x->in[k]] + 1]++, n_cons++;
        }
        for (int k = 0; k < x->n_ctrl; k++) soff[x->ctrl[k] + 1]++;
        n_edges += (size_t)(x->n_in + x->n_ctrl);
        bool view = x->kind == WEFT_NODE_OP && (x->op->flags & WEFT_OPF_VIEW);
        for (int j = 0; j < x->n_out; j++) {
            int32_t v = x->out0 + j;
            if (x->kind == WEFT_NODE_VARIABLE) varof[v] = order[s];
            else if (x->kind == WEFT_NODE_ASSIGN || x->kind == WEFT_NODE_ASSIGN_ADD) varof[v] = x->var;
            else if (view && x->n_in > 0) varof[v] = varof[x->in[0]], root[v] = root[x->in[0]];
            if ((x->kind == WEFT_NODE_OP && !view) || x->kind == WEFT_NODE_FUSED) root[v] = v; // a buffer of its own
        }
    }
    for (size_t v = 0; v < nV; v++)
        if (fetched[v] && root[v] >= 0) rfetch[root[v]] = 1;
    for (size_t i = 0; i < nN; i++) soff[i + 1] += soff[i];
    for (size_t v = 0; v < nV; v++) coff[v + 1] += coff[v];
    succ = malloc((n_edges ? n_edges : 1) * sizeof *succ);
    cons = malloc((n_cons ? n_cons : 1) * sizeof *cons);
    fill = malloc((nN > nV ? nN : nV) * sizeof *fill);
    if (!succ || !cons || !fill) goto oom;
    memcpy(fill, soff, nN * sizeof *fill);
    for (int s = 0; s < n; s++) {
        const weft_gnode *x = &g->nodes[order[s]];
        for (int k = 0; k < x->n_in; k++) succ[fill[g->values[x->in[k]].node]++] = order[s];
        for (int k = 0; k < x->n_ctrl; k++) succ[fill[x->ctrl[k]]++] = order[s];
    }
    memcpy(fill, coff, nV * sizeof *fill);
    for (int s = 0; s < n; s++) {
        const weft_gnode *x = &g->nodes[order[s]];
        for (int k = 0; k < x->n_in; k++)
            if (root[x->in[k]] >= 0) cons[fill[root[x->in[k]]]++] = order[s];
    }

    // A move can make another one pay (a duplicate moved down keeps an input
    // alive late, so its other readers may follow): sweep until stable (3 at most).
    for (int sweep = 0, moved = 1; sweep < 3 && moved; sweep++) {
    moved = 0;
    memcpy(orig, order, (size_t)n * sizeof *orig);
    for (int k = n - 1; k >= 0; k--) {
        int32_t id = orig[k];
        const weft_gnode *x = &g->nodes[id];
        if (!movable(x)) continue;
        int i = pos[id], t = n;
        bool used = false; // a data consumer (control successors alone do not keep outputs alive)
        for (int32_t e = soff[id]; e < soff[id + 1]; e++) {
            if (pos[succ[e]] < t) t = pos[succ[e]];
            const weft_gnode *y = &g->nodes[succ[e]];
            for (int k = 0; k < y->n_in && !used; k++) used = g->values[y->in[k]].node == id;
        }
        if (!used || t <= i + 1) continue; // nothing reads it, or already adjacent
        int to = t - 1;                     // the new step
        bool view = x->kind == WEFT_NODE_OP && (x->op->flags & WEFT_OPF_VIEW); // FUSED: no op
        int64_t gain = 0, cost = 0;
        for (int j = 0; j < x->n_out && !view; j++) gain += value_bytes(g, x->out0 + j) * (to - i);
        bool blocked = false;
        for (int a = 0; a < x->n_in && !blocked; a++) {
            int32_t in = x->in[a], r = root[in];
            bool dup = false;
            for (int b = 0; b < a; b++) dup |= root[x->in[b]] == r && r >= 0;
            if (r >= 0 && !rfetch[r] && !dup) {
                // Last step that keeps r alive without this node (its producer's step at least).
                int last = pos[g->values[r].node];
                for (int32_t e = coff[r]; e < coff[r + 1]; e++)
                    if (cons[e] != id && pos[cons[e]] > last) last = pos[cons[e]];
                if (last < to) cost += value_bytes(g, r) * (to - (last > i ? last : i));
            }
            // A variable read must not move past an assign to that variable.
            if (varof[in] >= 0)
                for (int s = i + 1; s < to && !blocked; s++) {
                    const weft_gnode *y = &g->nodes[order[s]];
                    blocked = (y->kind == WEFT_NODE_ASSIGN || y->kind == WEFT_NODE_ASSIGN_ADD) && y->var == varof[in];
                }
        }
        // A view allocates nothing and its consumers keep its base alive past
        // it anyway: it always moves down (so its base can follow).
        if (getenv("WEFT_SCHED_DEBUG") && strstr(x->name, getenv("WEFT_SCHED_DEBUG")))
            fprintf(stderr, "sched: %s at %d -> %d gain %lld cost %lld blocked %d\n", x->name, i, to, (long long)gain,
                    (long long)cost, blocked);
        // A tie moves too: an op whose input dies at it (softmax over the
        // scores) then takes its producer's cost along, and the producer
        // follows it down in the same sweep (chains of rematerialised ops).
        if (blocked || (!view && (gain < cost || gain == 0))) continue;
        memmove(order + i, order + i + 1, (size_t)(to - i) * sizeof *order);
        order[to] = id;
        for (int s = i; s <= to; s++) pos[order[s]] = s;
        moved++;
    }
    }
    goto done;
oom:
    st = weft_error(WEFT_ERR_OOM, "graph_schedule: out of memory");
done:
    free(pos);
    free(orig);
    free(soff);
    free(root);
    free(varof);
    free(coff);
    free(succ);
    free(cons);
    free(fill);
    free(rfetch);
    return st;
}
