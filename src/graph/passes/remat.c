// Rematerialisation: recompute a cheap value for its late consumers instead
// of keeping it alive from the forward to the backward.
//
// A traced training step uses many cheap values twice: once in the forward
// (gelu(h) feeds the next matmul) and once much later in the backward
// (gelu(h) again, for that matmul's weight gradient). Keeping the value
// costs its bytes over the whole gap; recomputing it costs one cheap kernel,
// and nothing else when the op's inputs are alive at the late use anyway
// (h is, for gelu_grad(h)). Node ids stand in for time: data edges point
// backwards, and traced graphs are numbered in execution order.
//
// Rule: a pure, cheap OP node (an elementwise kernel or layer_norm's forward)
// whose uses (through views of its outputs) split, at the widest gap in node
// ids, into early ones and ones at least REMAT_GAP ids later, and whose
// intermediate inputs are used near (at most 1/8 of the gap before) or after
// the first late use by some other node, gets a duplicate (same op, attrs and inputs: bit-identical values);
// the late uses read the duplicate, and views between them are duplicated
// too. The executor's schedule (schedule.c) moves the duplicate down to its
// consumers. Runs once, after the other passes (CSE would merge it back).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ops/elementwise.h"
#include "../rewrite.h"

#define REMAT_GAP 24

static bool cheap(const weft_gnode *n) {
    if (!weft_rw_rewritable(n) || (n->op->flags & WEFT_OPF_VIEW)) return false;
    return n->op->kernel[WEFT_CPU].fn == weft_cpu_elementwise || !strcmp(n->op->name, "layer_norm") ||
           !strcmp(n->op->name, "softmax");
}

// A matmul may be recomputed inside a chain when its recompute costs at most
// 2*REMAT_MAX_K flops per output element (K <= 64: 32 flops per f32 byte it
// saves). Attention scores q k^T (K = head dim, an (B,nh,T,T) output much
// bigger than q and k) qualify; the projections (K = d_model) do not: they
// would cost 4x more per byte and their outputs are not bigger than the
// values kept to recompute them.
#define REMAT_MAX_K 64
#define REMAT_MAX_CHAIN 4 // nodes recomputed for one late value (the value itself included)

static bool chain_ok(const weft_graph *g, const weft_gnode *n) {
    if (cheap(n)) return true;
    if (!weft_rw_rewritable(n) || strcmp(n->op->name, "matmul") || n->n_in != 2) return false;
    const weft_gvalue *a = &g->values[n->in[0]];
    if (a->ndim < 2) return false;
    int64_t K = n->attrs.i[0] ? a->sizes[a->ndim - 2] : a->sizes[a->ndim - 1]; // trans_a swaps the last two
    return K <= REMAT_MAX_K;
}

typedef struct remat {
    weft_rw *rw;
    int32_t *root;  // [src values] source value that owns the memory (views: their base's), -1: none
    int32_t *split; // [src nodes] first late consumer id of a duplicated node, INT32_MAX: none
    int32_t *dup0;  // [src nodes] dst value of the duplicate's output 0
    int32_t *late;  // [src values] dst value of the late version (memo), -1: not made yet
} remat;

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

// The late version of source value sv, whose root belongs to a duplicated node.
static int32_t late_value(remat *r, int32_t sv) {
    if (r->late[sv] >= 0) return r->late[sv];
    const weft_graph *src = r->rw->src;
    const weft_gnode *p = &src->nodes[src->values[sv].node];
    int32_t dv;
    if (!(p->op->flags & WEFT_OPF_VIEW)) {
        dv = r->dup0[src->values[sv].node] + (sv - p->out0);
    } else {
        // A view of a duplicated value: the same view of the duplicate.
        int32_t base = late_value(r, p->in[0]);
        if (base < 0) return -1;
        char name[200];
        snprintf(name, sizeof name, "%s.remat", p->name);
        int32_t in[16];
        if (p->n_in > 16) return weft_error(WEFT_ERR_ARG, "graph_optimize: node '%s': too many inputs", p->name), -1;
        in[0] = base;
        for (int k = 1; k < p->n_in; k++) in[k] = r->rw->vmap[p->in[k]];
        int32_t first = weft_rw_op(r->rw, -1, name, p->op, p->n_in, in, &p->attrs);
        if (first < 0) return -1;
        dv = first + (sv - p->out0);
    }
    return r->late[sv] = dv;
}

// Duplicate source node s (already copied) into dst with its late inputs.
static int32_t emit_dup(remat *r, int32_t s) {
    weft_rw *rw = r->rw;
    const weft_gnode *n = &rw->src->nodes[s];
    int32_t in[16];
    for (int k = 0; k < n->n_in; k++) {
        int32_t sv = n->in[k], rt = r->root[sv];
        in[k] = rt >= 0 && r->dup0[rw->src->values[rt].node] >= 0 ? late_value(r, sv) : rw->vmap[sv];
        if (in[k] < 0) return -1;
    }
    char base[200], name[220];
    snprintf(base, sizeof base, "%s.remat", n->name);
    snprintf(name, sizeof name, "%s", base);
    for (int k = 1; weft_graph_find_node(rw->src, name).id >= 0 || weft_graph_find_node(rw->dst, name).id >= 0; k++)
        snprintf(name, sizeof name, "%s_%d", base, k);
    int32_t d = weft_graph_add_node(rw->dst, "graph_optimize", WEFT_NODE_OP, name, n->op->name, n->n_in, in, n->n_out);
    if (d < 0) return -1;
    weft_gnode *m = &rw->dst->nodes[d];
    m->op = n->op;
    m->attrs = n->attrs;
    for (int j = 0; j < n->n_out; j++) {
        weft_gvalue *dv = &rw->dst->values[m->out0 + j];
        const weft_gvalue *sv = &rw->src->values[n->out0 + j];
        dv->ndim = sv->ndim;
        dv->dtype = sv->dtype;
        memcpy(dv->sizes, sv->sizes, sizeof dv->sizes);
    }
    return m->out0;
}

weft_status weft_pass_remat(weft_rw *rw, weft_pass_io *io) {
    const weft_graph *src = rw->src;
    int N = src->n_nodes;
    size_t nN = (size_t)(N ? N : 1), nV = (size_t)(src->n_values ? src->n_values : 1);
    remat r = {.rw = rw};
    r.root = malloc(nV * sizeof *r.root);
    r.late = malloc(nV * sizeof *r.late);
    r.split = malloc(nN * sizeof *r.split);
    r.dup0 = malloc(nN * sizeof *r.dup0);
    int32_t *coff = calloc(nV + 1, sizeof *coff), *cons = NULL, *fill = NULL, *tmp = NULL;
    weft_status st = WEFT_OK;
    if (!r.root || !r.late || !r.split || !r.dup0 || !coff) goto oom;
    for (size_t v = 0; v < nV; v++) r.root[v] = -1, r.late[v] = -1;
    for (size_t i = 0; i < nN; i++) r.split[i] = INT32_MAX, r.dup0[i] = -1;

    // Roots, and the non-view consumers of each root (the uses that read its memory).
    size_t n_cons = 0;
    for (int32_t s = 0; s < N; s++) {
        const weft_gnode *n = &src->nodes[s];
        bool view = n->kind == WEFT_NODE_OP && (n->op->flags & WEFT_OPF_VIEW);
        for (int k = 0; k < n->n_in; k++) {
            int32_t rt = r.root[n->in[k]];
            if (rt < 0) continue;
            if (!view) coff[rt + 1]++, n_cons++;
        }
        for (int j = 0; j < n->n_out && n->kind == WEFT_NODE_OP; j++)
            r.root[n->out0 + j] = view ? (n->n_in > 0 ? r.root[n->in[0]] : -1) : n->out0 + j;
    }
    for (size_t v = 0; v < nV; v++) coff[v + 1] += coff[v];
    cons = malloc((n_cons ? n_cons : 1) * sizeof *cons);
    fill = malloc(nV * sizeof *fill);
    tmp = malloc((n_cons + 1) * sizeof *tmp);
    if (!cons || !fill || !tmp) goto oom;
    memcpy(fill, coff, nV * sizeof *fill);
    for (int32_t s = 0; s < N; s++) {
        const weft_gnode *n = &src->nodes[s];
        if (n->kind == WEFT_NODE_OP && (n->op->flags & WEFT_OPF_VIEW)) continue;
        for (int k = 0; k < n->n_in; k++)
            if (r.root[n->in[k]] >= 0) cons[fill[r.root[n->in[k]]]++] = s;
    }

    // Choose: the widest gap among a node's uses (sorted ids, from the node itself).
    for (int32_t s = 0; s < N; s++) {
        const weft_gnode *n = &src->nodes[s];
        if (!cheap(n) || n->n_in > 16) continue;
        int nt = 0;
        for (int j = 0; j < n->n_out; j++)
            for (int32_t e = coff[n->out0 + j]; e < coff[n->out0 + j + 1]; e++) tmp[nt++] = cons[e];
        if (nt < 2) continue;
        qsort(tmp, (size_t)nt, sizeof *tmp, cmp_i32);
        int32_t prev = s, best_gap = 0, first_late = -1;
        for (int k = 0; k < nt; k++) {
            if (tmp[k] - prev > best_gap) best_gap = tmp[k] - prev, first_late = tmp[k];
            prev = tmp[k];
        }
        if (best_gap < REMAT_GAP || first_late == tmp[0]) continue; // no early use: the schedule sinks it whole
        // Every input must be there at the late use: kept by some other node
        // anyway, or itself recomputed (a chain, e.g. softmax(q k^T + mask):
        // the scores die in the forward, q and k live on in the qkv output).
        int32_t chain[REMAT_MAX_CHAIN];
        int n_chain = 1;
        chain[0] = s;
        bool ok = true;
        for (int c = 0; c < n_chain && ok; c++) {
            const weft_gnode *m = &src->nodes[chain[c]];
            for (int k = 0; k < m->n_in && ok; k++) {
                int32_t rt = r.root[m->in[k]];
                if (rt < 0) continue; // placeholder, constant or variable: always there
                int32_t p = src->values[rt].node;
                bool member = false;
                for (int q = 0; q < n_chain; q++) member |= chain[q] == p;
                if (member) continue;
                // Some node outside the chain keeps the input's memory up to the late use.
                int32_t last = -1;
                for (int32_t e = coff[rt]; e < coff[rt + 1]; e++) {
                    bool in_chain = false;
                    for (int q = 0; q < n_chain; q++) in_chain |= chain[q] == cons[e];
                    if (!in_chain && cons[e] > last) last = cons[e];
                }
                // A little short of it is fine: the input lives a few nodes longer,
                // the value is not kept over the whole gap (1/8 of it as slack).
                if (last >= first_late - best_gap / 8) continue;
                const weft_gnode *pn = &src->nodes[p];
                // Else recompute the input too, when it is a single-output op
                // worth recomputing and not already chosen for its own late uses.
                ok = n_chain < REMAT_MAX_CHAIN && pn->kind == WEFT_NODE_OP && pn->n_out == 1 && pn->n_in <= 16 &&
                     r.split[p] == INT32_MAX && chain_ok(src, pn);
                if (ok) chain[n_chain++] = p;
            }
        }
        if (ok)
            for (int c = 0; c < n_chain; c++) r.split[chain[c]] = first_late;
    }

    // Copy every node; duplicates right after their originals; late uses rewired.
    for (int32_t s = 0; s < N && st == WEFT_OK; s++) {
        const weft_gnode *n = &src->nodes[s];
        bool view = n->kind == WEFT_NODE_OP && (n->op->flags & WEFT_OPF_VIEW); // views are rewired lazily
        // Late versions first: data edges must point to earlier nodes.
        int32_t lv[16];
        for (int k = 0; k < n->n_in && k < 16; k++) {
            int32_t rt = r.root[n->in[k]];
            lv[k] = -1;
            if (view || rt < 0) continue;
            int32_t p = src->values[rt].node;
            if (r.dup0[p] < 0 || s < r.split[p]) continue;
            if ((lv[k] = late_value(&r, n->in[k])) < 0) goto fail;
        }
        int32_t d = weft_rw_copy(rw, s);
        if (d < 0) goto fail;
        for (int k = 0; k < n->n_in && k < 16; k++)
            if (lv[k] >= 0) rw->dst->nodes[d].in[k] = lv[k];
        if (r.split[s] != INT32_MAX) {
            if ((r.dup0[s] = emit_dup(&r, s)) < 0) goto fail;
            io->changed++;
        }
    }
    goto done;
oom:
    st = weft_error(WEFT_ERR_OOM, "graph_optimize: out of memory");
    goto done;
fail:
    st = weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
done:
    free(r.root);
    free(r.late);
    free(r.split);
    free(r.dup0);
    free(coff);
    free(cons);
    free(fill);
    free(tmp);
    return st;
}
