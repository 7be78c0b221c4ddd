// Co-scheduling: pairs of independent matmuls that run at the same time, one
// core each, inside the serial (planned) run.
//
// Why: a training step's GEMMs are small enough that OpenBLAS's own
// threading loses much of the second core (a (128,256)x(256,256) product runs
// at ~100 GFLOP/s on one core of the 2-core CI VM and only ~110 on two),
// while two independent products, one per core, run at ~180 together. The
// backward has such pairs everywhere: every linear layer's input gradient
// dY W and weight gradient dY^T X, attention's dQ and dK. A static graph
// knows them ahead of the run; eager mode does not.
//
// How: over the memory-aware serial order, each heavy node A (a matmul, or a
// fused matmul epilogue group) takes the nearest later heavy node B that
// depends on nothing at or after A's step, except cheap nodes (views,
// elementwise, a rematerialised layer norm) that can move up with it; B
// moves up to run right after A, those just before A, and co[step of B] = 1. The executor runs a marked pair as one step on two OpenMP threads
// (kernels inside see one thread each), and the memory plan treats it as one
// step (both outputs live from its start, both nodes' inputs to its end).
// B never moves past an assign to a variable it reads, nor past stateful,
// queue or control-flow nodes.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fused.h"
#include "schedule.h"

#define PAIR_WINDOW 48         // how far ahead B may be found (steps)
#define PAIR_MIN_FLOPS 2000000 // smaller products are not worth a fork/join (~5 us)
#define PAIR_MAX_HOIST 12      // B and the cheap nodes it needs that move up with it

// Multiply-adds x2 of the matmul node id runs (0: not a matmul).
static double matmul_flops(const weft_graph *g, int32_t id) {
    const weft_gnode *n = &g->nodes[id];
    int32_t a;
    const weft_attrs *at;
    static const weft_attrs none; // attr i[0] is a transpose flag for matmul only (linear_gelu's is its GELU)
    const char *nm = n->kind == WEFT_NODE_OP ? n->op->name : "";
    // the products: matmul, linear and linear_gelu (x (.., K)), gelu_linear (h and a (.., K)), matmul_dgelu
    // (p (.., N) @ W (N, K)): the summed dim is in[0]'s last but for a transposed matmul operand
    if (n->kind == WEFT_NODE_OP && (weft_fused_head_op(n->op) || !strcmp(nm, "linear_gelu") ||
                                    !strcmp(nm, "gelu_linear") || !strcmp(nm, "matmul_dgelu"))) {
        a = n->in[0];
        at = !strcmp(nm, "matmul") ? &n->attrs : &none;
    } else if (n->kind == WEFT_NODE_FUSED && n->prog && n->prog->matmul_head && n->prog->instr[0].args[0] >= 0) {
        a = n->in[n->prog->instr[0].args[0]];
        at = &n->prog->instr[0].attrs;
    } else {
        return 0;
    }
    const weft_gvalue *av = &g->values[a], *ov = &g->values[n->out0];
    if (av->ndim < 2) return 0;
    int64_t K = av->sizes[av->ndim - (at->i[0] ? 2 : 1)];
    return 2.0 * (double)weft_shape_numel(ov->ndim, ov->sizes) * (double)K;
}

static bool barrier(const weft_gnode *n) {
    switch (n->kind) {
    case WEFT_NODE_OP:
        // An in-place update (WEFT_OPF_INPLACE) writes its variable only when
        // every reader of it is its ancestor (run.c, find_inplace): B cannot
        // read it. Otherwise the variable changes at its assign (checked).
        return (n->op->flags & WEFT_OPF_STATEFUL) != 0 || !strcmp(n->op->name, "batch_norm");
    case WEFT_NODE_FUSED:
    case WEFT_NODE_PLACEHOLDER:
    case WEFT_NODE_CONSTANT:
    case WEFT_NODE_VARIABLE:
        return false;
    default: // assigns (checked per variable by the caller), queues, control flow
        return n->kind != WEFT_NODE_ASSIGN && n->kind != WEFT_NODE_ASSIGN_ADD;
    }
}

static bool is_view(const weft_gnode *n) { return n->kind == WEFT_NODE_OP && (n->op->flags & WEFT_OPF_VIEW); }

// The variable node value v reads through views, or -1.
static int32_t var_of(const weft_graph *g, int32_t v) {
    for (int hops = 0; hops < 64; hops++) {
        const weft_gnode *n = &g->nodes[g->values[v].node];
        if (n->kind == WEFT_NODE_VARIABLE) return g->values[v].node;
        if (n->kind == WEFT_NODE_ASSIGN || n->kind == WEFT_NODE_ASSIGN_ADD) return n->var;
        if (!is_view(n) || n->n_in < 1) return -1;
        v = n->in[0];
    }
    return -1;
}

bool weft_coschedule_enabled(int threads) {
    const char *e = getenv("WEFT_GRAPH_COSCHEDULE");
    if (e && *e) return strcmp(e, "0") != 0 && threads >= 2;
    // Default: two threads, where one kernel per core is the whole machine.
    // With more, each side would run its GEMM on one core of many.
    return threads == 2;
}

int weft_schedule_pairs(const weft_graph *g, int32_t *order, int n, uint8_t *co) {
    memset(co, 0, (size_t)(n > 0 ? n : 1));
    if (n < 2) return 0;
    int32_t *pos = malloc((size_t)g->n_nodes * sizeof *pos), *hoist = malloc(((size_t)n + PAIR_MAX_HOIST + 2) * sizeof *hoist);
    uint8_t *paired = calloc((size_t)n, 1), *inh = calloc((size_t)g->n_nodes, 1);
    double *fl = malloc((size_t)n * sizeof *fl);
    if (!pos || !hoist || !paired || !inh || !fl) {
        free(pos), free(hoist), free(paired), free(inh), free(fl);
        return -1;
    }
    for (int s = 0; s < n; s++) pos[order[s]] = s, fl[s] = matmul_flops(g, order[s]);
    int n_pairs = 0;
    if (getenv("WEFT_SCHED_DEBUG"))
        for (int s = 0; s < n; s++)
            fprintf(stderr, "order %3d %-32s %-10s %.3g%s\n", s, g->nodes[order[s]].name,
                    g->nodes[order[s]].op ? g->nodes[order[s]].op->name : weft_graph_kind_name(g->nodes[order[s]].kind),
                    fl[s] * 1e-6, barrier(&g->nodes[order[s]]) ? " BARRIER" : "");
    for (int s = 0; s < n - 1; s++) {
        if (paired[s] || fl[s] < PAIR_MIN_FLOPS) continue;
        for (int t = s + 1; t < n && t <= s + PAIR_WINDOW; t++) {
            const weft_gnode *y = &g->nodes[order[t]];
            if (barrier(y)) break;
            if (paired[t] || fl[t] < PAIR_MIN_FLOPS) continue;
            // B = order[t] and the views between s and t it reads (recursively)
            // move up; everything else they read must exist before step s.
            int nh = 0, head = 0;
            bool ok = true;
            hoist[nh++] = order[t];
            inh[order[t]] = 1;
            while (head < nh && ok) {
                const weft_gnode *h = &g->nodes[hoist[head++]];
                for (int k = 0; k < h->n_in + h->n_ctrl && ok; k++) {
                    int32_t p = k < h->n_in ? g->values[h->in[k]].node : h->ctrl[k - h->n_in];
                    if (pos[p] < s || inh[p]) continue;
                    const weft_gnode *pn = &g->nodes[p];
                    bool cheap = is_view(pn) || ((pn->kind == WEFT_NODE_OP || pn->kind == WEFT_NODE_FUSED) &&
                                                 !barrier(pn) && fl[pos[p]] < PAIR_MIN_FLOPS);
                    if (pos[p] > s && pos[p] < t && cheap && nh < PAIR_MAX_HOIST) {
                        hoist[nh++] = p;
                        inh[p] = 1;
                    } else {
                        ok = false; // A itself, or a real op after A
                    }
                }
                // A variable read must not move above an assign to that variable.
                for (int k = 0; k < h->n_in && ok; k++) {
                    int32_t var = var_of(g, h->in[k]);
                    if (var < 0) continue;
                    for (int u = s + 1; u < pos[hoist[head - 1]] && ok; u++) {
                        const weft_gnode *w = &g->nodes[order[u]];
                        ok = !((w->kind == WEFT_NODE_ASSIGN || w->kind == WEFT_NODE_ASSIGN_ADD) && w->var == var);
                    }
                }
            }
            for (int k = 0; k < nh; k++) inh[hoist[k]] = 0;
            if (!ok) continue;
            // New order over [s, t]: the hoisted views, A, B, then the rest as before.
            int32_t A = order[s], B = order[t], *rest = hoist + nh; // hoist has room for both lists
            int nv = 0, nr = 0;
            for (int r = s + 1; r < t; r++) {
                int32_t id = order[r];
                bool h = false;
                for (int k = 1; k < nh && !h; k++) h = hoist[k] == id;
                if (h) order[s + nv++] = id; // s + nv <= r: writes behind the read
                else rest[nr++] = id;
            }
            int base = s + nv;
            order[base] = A;
            order[base + 1] = B;
            memcpy(order + base + 2, rest, (size_t)nr * sizeof *order);
            for (int r = s; r <= t; r++) pos[order[r]] = r, fl[r] = matmul_flops(g, order[r]);
            paired[base] = paired[base + 1] = 1;
            co[base + 1] = 1;
            if (getenv("WEFT_SCHED_DEBUG"))
                fprintf(stderr, "pair: %s (%.3g MFLOP) || %s (%.3g MFLOP) at step %d\n", g->nodes[A].name, fl[base] * 1e-6,
                        g->nodes[B].name, fl[base + 1] * 1e-6, base);
            n_pairs++;
            s = base; // continue after the pair (the loop's s++ skips B)
            break;
        }
    }
    free(pos), free(hoist), free(paired), free(inh), free(fl);
    return n_pairs;
}
