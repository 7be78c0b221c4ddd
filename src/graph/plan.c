// Static memory planning: lifetimes from the execution order, then offsets in
// one arena so that buffers whose lifetimes do not overlap share bytes.
//
// Assignment is "greedy by size" (as TFLite's and ONNX Runtime's planners):
// biggest buffers first, each into the best-fitting gap (smallest that fits)
// among the already-placed buffers whose lifetimes overlap it, else on top.
// Lifetimes are closed intervals of steps [def, last]: an op's inputs are
// still live at its own step, so no op ever writes over its inputs.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/elementwise.h"
#include "plan.h"

typedef struct buf {
    int32_t v;      // root value id
    int32_t def;    // producer step
    int32_t last;   // last step that uses it (n_order for fetched)
    int64_t nbytes; // exact bytes
    int64_t size;   // aligned bytes
    int64_t off;
} buf;

static int64_t align_up(int64_t x) { return (x + WEFT_PLAN_ALIGN - 1) / WEFT_PLAN_ALIGN * WEFT_PLAN_ALIGN; }

static int cmp_size_desc(const void *a, const void *b) {
    const buf *x = a, *y = b;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    return x->def - y->def; // deterministic
}

static int cmp_off(const void *a, const void *b) {
    int64_t x = (*(const buf *const *)a)->off, y = (*(const buf *const *)b)->off;
    return x < y ? -1 : x > y;
}

// WEFT_PLAN_DEBUG=1: what is live at the peak step (stderr), by producing
// op, then each buffer with its producer step and last use (=n: fetched).
static void debug_dump(const weft_graph *g, const int32_t *order, int n_order, const buf *bufs, int nb, int peak_step,
                       int64_t peak) {
    fprintf(stderr, "plan: %d steps, %d buffers, liveness peak %lld bytes at step %d (%s '%s')\n", n_order, nb,
            (long long)peak, peak_step, peak_step < n_order ? weft_graph_kind_name(g->nodes[order[peak_step]].kind) : "end",
            peak_step < n_order ? g->nodes[order[peak_step]].name : "");
    const char *seen[256];
    int n_seen = 0;
    for (int b = 0; b < nb; b++) {
        if (bufs[b].def > peak_step || bufs[b].last < peak_step) continue;
        const weft_gnode *pn = &g->nodes[g->values[bufs[b].v].node];
        const char *op = pn->op ? pn->op->name : weft_graph_kind_name(pn->kind); // FUSED: no op
        bool dup = false;
        for (int k = 0; k < n_seen; k++) dup |= seen[k] == op;
        if (dup || n_seen == 256) continue;
        seen[n_seen++] = op;
        int cnt = 0;
        int64_t bytes = 0;
        for (int c = 0; c < nb; c++)
            if (bufs[c].def <= peak_step && bufs[c].last >= peak_step &&
                g->nodes[g->values[bufs[c].v].node].op == pn->op &&
                g->nodes[g->values[bufs[c].v].node].kind == pn->kind)
                cnt++, bytes += bufs[c].nbytes;
        fprintf(stderr, "plan:   %-16s %4d bufs %12lld bytes\n", op, cnt, (long long)bytes);
    }
    if (getenv("WEFT_PLAN_DEBUG")[0] == '2')
        for (int b = 0; b < nb; b++)
            if (bufs[b].def <= peak_step && bufs[b].last >= peak_step)
            {
                const weft_gnode *n = &g->nodes[g->values[bufs[b].v].node];
                fprintf(stderr, "plan:     %-32s %10lld bytes steps %d..%d <-", n->name, (long long)bufs[b].nbytes,
                        bufs[b].def, bufs[b].last);
                for (int k = 0; k < n->n_in; k++) fprintf(stderr, " %s", g->nodes[g->values[n->in[k]].node].name);
                fprintf(stderr, "\n");
            }
}

static bool inplace_off(void) {
    const char *e = getenv("WEFT_GRAPH_INPLACE");
    return e && !strcmp(e, "0");
}

// In-place reuse: an elementwise op (out[i] = f(in[i], ...), one output) may
// write its output over an input buffer that dies at this very step, when
// both have the same dtype and shape (same bytes at the same index; the
// kernel reads in[i] before it writes out[i]). The input must be a buffer
// itself (not a view of one: a strided alias would be read after being
// overwritten) and no other input may be a different view of it. The output
// joins the input's buffer (alias[out] = its root, the buffer lives to the
// output's last use) and leaves bufs. Returns the new number of buffers.
static int merge_inplace(const weft_graph *g, const int32_t *order, int n_order, const uint8_t *co,
                         const int32_t *root, const int32_t *bidx, buf *bufs, int nb, int32_t *alias) {
    for (int s = 0; s < n_order; s++) {
        const weft_gnode *n = &g->nodes[order[s]];
        if (co && (co[s] || (s + 1 < n_order && co[s + 1]))) continue; // half of a pair: the other reads on

        if (n->kind != WEFT_NODE_OP || n->n_out != 1 || n->op->kernel[WEFT_CPU].fn != weft_cpu_elementwise) continue;
        int32_t o = n->out0, ob = bidx[o];
        if (ob < 0) continue;
        const weft_gvalue *ov = &g->values[o];
        for (int k = 0; k < n->n_in; k++) {
            int32_t x = n->in[k];
            if (root[x] != x || bidx[x] < 0) continue; // a view, or not an intermediate
            int32_t h = alias[x] >= 0 ? alias[x] : x; // the buffer x lives in
            buf *hb = &bufs[bidx[h]];
            const weft_gvalue *xv = &g->values[x];
            if (hb->last != s || xv->dtype != ov->dtype || !weft_shape_equal(xv->ndim, xv->sizes, ov->ndim, ov->sizes))
                continue;
            bool clash = false;
            for (int j = 0; j < n->n_in; j++) clash |= n->in[j] != x && root[n->in[j]] == x;
            if (clash) continue;
            alias[o] = h;
            if (bufs[ob].last > hb->last) hb->last = bufs[ob].last;
            bufs[ob].nbytes = -1; // dropped below
            break;
        }
    }
    int m = 0;
    for (int b = 0; b < nb; b++)
        if (bufs[b].nbytes >= 0) bufs[m++] = bufs[b];
    return m;
}

void weft_plan_free(weft_plan *p) {
    free(p->root);
    free(p->offset);
    memset(p, 0, sizeof *p);
}

weft_status weft_plan_build(const weft_graph *g, const int32_t *order, int n_order, const uint8_t *fetched,
                            const uint8_t *co, const int32_t *inplace, weft_plan *p) {
    memset(p, 0, sizeof *p);
    size_t nV = (size_t)(g->n_values ? g->n_values : 1);
    p->root = malloc(nV * sizeof *p->root);
    p->offset = malloc(nV * sizeof *p->offset);
    int32_t *bidx = malloc(nV * sizeof *bidx); // root value -> index in bufs
    buf *bufs = malloc(nV * sizeof *bufs);
    buf **placed = malloc(2 * nV * sizeof *placed); // placed buffers, then the overlapping ones
    int64_t *delta = calloc((size_t)n_order + 2, sizeof *delta);
    int32_t *alias = malloc(nV * sizeof *alias); // value written in place over buffer (root value) alias[v], -1
    weft_status st = WEFT_OK;
    if (!p->root || !p->offset || !bidx || !bufs || !placed || !delta || !alias) {
        st = weft_error(WEFT_ERR_OOM, "graph_plan: out of memory");
        goto done;
    }
    for (int v = 0; v < g->n_values; v++) p->root[v] = -1, p->offset[v] = -1, bidx[v] = -1, alias[v] = -1;

    // Buffers and roots in execution order (a view's input is defined earlier).
    int nb = 0;
    for (int s = 0; s < n_order; s++) {
        const weft_gnode *n = &g->nodes[order[s]];
        // Uses: each input keeps its root's buffer alive through this step.
        for (int k = 0; k < n->n_in; k++) {
            int32_t r = p->root[n->in[k]];
            if (r >= 0 && bufs[bidx[r]].last < s) bufs[bidx[r]].last = s;
        }
        if (n->kind != WEFT_NODE_OP && n->kind != WEFT_NODE_FUSED) continue; // fused outputs are buffers too
        if (n->kind == WEFT_NODE_OP && (n->op->flags & WEFT_OPF_VIEW)) {
            p->root[n->out0] = n->n_in > 0 ? p->root[n->in[0]] : -1; // aliases input 0 (maybe a variable: -1)
            continue;
        }
        for (int j = 0; j < n->n_out; j++) {
            int32_t v = n->out0 + j;
            if (inplace && inplace[v] >= 0) continue; // lives in its variable (root -1, like a variable's read)
            const weft_gvalue *gv = &g->values[v];
            int64_t nbytes = weft_shape_numel(gv->ndim, gv->sizes) * (int64_t)weft_dtype_size((weft_dtype)gv->dtype);
            p->root[v] = v;
            bidx[v] = nb;
            bufs[nb++] = (buf){.v = v, .def = s, .last = s, .nbytes = nbytes, .size = align_up(nbytes), .off = -1};
        }
    }
    // Fetched values (or views of them) keep their buffer to the end.
    for (int v = 0; v < g->n_values; v++)
        if (fetched[v] && p->root[v] >= 0) bufs[bidx[p->root[v]]].last = n_order;

    int64_t total = 0, live = 0, peak = 0;
    for (int b = 0; b < nb; b++) total += bufs[b].nbytes;
    int n_all = nb;
    if (!inplace_off()) nb = merge_inplace(g, order, n_order, co, p->root, bidx, bufs, nb, alias);
    // A co-scheduled pair (steps s-1, s) is one step: both outputs exist from
    // its start, both nodes' inputs live to its end.
    if (co)
        for (int b = 0; b < nb; b++) {
            if (bufs[b].def < n_order && co[bufs[b].def]) bufs[b].def--;
            if (bufs[b].last + 1 < n_order && co[bufs[b].last + 1]) bufs[b].last++;
        }

    // The liveness peak (a sweep over steps, exact bytes).
    for (int b = 0; b < nb; b++) {
        delta[bufs[b].def] += bufs[b].nbytes;
        delta[bufs[b].last + 1] -= bufs[b].nbytes;
    }
    int peak_step = 0;
    for (int s = 0; s <= n_order; s++) {
        live += delta[s];
        if (live > peak) peak = live, peak_step = s;
    }
    if (getenv("WEFT_PLAN_DEBUG")) debug_dump(g, order, n_order, bufs, nb, peak_step, peak);

    // Greedy by size, best-fit gap among overlapping placed buffers.
    qsort(bufs, (size_t)nb, sizeof *bufs, cmp_size_desc);
    int64_t arena = 0;
    int n_placed = 0;
    for (int b = 0; b < nb; b++) {
        buf *x = &bufs[b];
        int no = 0;
        for (int k = 0; k < n_placed; k++)
            if (placed[k]->def <= x->last && x->def <= placed[k]->last) placed[n_placed + no++] = placed[k];
        buf **ov = placed + n_placed; // overlapping ones, sorted by offset
        qsort(ov, (size_t)no, sizeof *ov, cmp_off);
        int64_t best = -1, best_gap = INT64_MAX, cur = 0;
        for (int k = 0; k < no; k++) {
            int64_t gap = ov[k]->off - cur;
            if (gap >= x->size && gap < best_gap) best = cur, best_gap = gap;
            if (ov[k]->off + ov[k]->size > cur) cur = ov[k]->off + ov[k]->size;
        }
        x->off = best >= 0 ? best : cur;
        if (x->off + x->size > arena) arena = x->off + x->size;
        placed[n_placed++] = x;
    }
    // Distinct offsets (slots) for the report.
    int n_slots = 0;
    for (int b = 0; b < nb; b++) {
        p->offset[bufs[b].v] = bufs[b].off;
        placed[b] = &bufs[b];
    }
    for (int v = 0; v < g->n_values; v++) // outputs written in place: their input's bytes
        if (alias[v] >= 0) p->offset[v] = p->offset[alias[v]];
    qsort(placed, (size_t)nb, sizeof *placed, cmp_off);
    for (int b = 0; b < nb; b++)
        if (b == 0 || placed[b]->off != placed[b - 1]->off) n_slots++;
    p->arena_bytes = arena;
    p->stats = (weft_graph_plan_stats){.planned_bytes = arena, .unplanned_bytes = total, .liveness_peak_bytes = peak,
                                       .n_buffers = n_all, .n_slots = n_slots};
done:
    free(bidx);
    free(bufs);
    free(placed);
    free(delta);
    free(alias);
    if (st != WEFT_OK) weft_plan_free(p);
    return st;
}

weft_tensor *weft_plan_tensor_at(weft_tensor *arena, int64_t byte_offset, int ndim, const int64_t *sizes,
                                 weft_dtype dt) {
    int64_t strides[WEFT_MAX_DIMS];
    weft_contiguous_strides(ndim, sizes, strides);
    size_t es = weft_dtype_size(dt);
    weft_tensor *t = weft_tensor_alias(arena, ndim, sizes, strides, byte_offset / (int64_t)es);
    if (t) t->dtype = (uint8_t)dt; // same bytes, the value's own dtype
    return t;
}
