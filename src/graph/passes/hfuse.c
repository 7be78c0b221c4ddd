// Horizontal fusion: matmuls that share their first operand (the q, k, v
// projections of one input) become one wider matmul.
//
//   y_i = matmul(x, w_i)  (w_i 2-D (K, N_i), or a linear's transpose(W_i) /
//                          W_i with trans_b: (N_i, K))
//   ->  w = concat(w_1..w_n) along N;  y = matmul(x, w);  y_i = slice(y, -1, off_i, off_i + N_i)
//
// Members agree on x (the same value: CSE runs first), trans_a, the weights'
// K, dtype and orientation. One GEMM of width sum(N_i) replaces n narrow ones;
// the weight concat copies K*sum(N_i) elements, small next to M*K*sum(N_i)
// multiply-adds. Not bit-identical: BLAS blocks the wider product
// differently, so sums may round differently in the last bits.
//
// The fused nodes are emitted at the last member's position E (every
// member's inputs exist by then); a member joins only if nothing reads its
// output before E (no node is moved ahead of its consumers). The slices are
// strided views; a `view` consumer is allowed only when it regroups the rows
// and splits the last dim, which a column slice supports without a copy.
#include <stdlib.h>
#include <string.h>

#include "../rewrite.h"

typedef struct member {
    int32_t s;      // source matmul node
    int32_t x;      // source value of the first operand
    int32_t w;      // source value of the 2-D weight (through a last-two-dims transpose)
    int tb;         // effective trans_b of w
    int64_t K, N;   // weight dims after the flag
    int group;      // group id, -1: none
} member;

// Source value sv produced by a pure permute swapping a 2-D value's dims.
static bool src_transpose2d(const weft_graph *g, int32_t sv) {
    const weft_gnode *p = &g->nodes[g->values[sv].node];
    return weft_rw_rewritable(p) && !strcmp(p->op->name, "permute") && g->values[sv].ndim == 2 && p->attrs.i[0] == 1 &&
           p->attrs.i[1] == 0;
}

// A `view` to shape (nd, sz) of a column slice (rows contiguous among
// themselves, last dim n of a wider row) exists iff some suffix of the new
// shape multiplies to n (the last dim splits) and the rest regroups the rows.
static bool view_of_slice_ok(int nd, const int64_t *sz, int64_t n) {
    int64_t suf = 1;
    for (int k = nd; k >= 0; k--) {
        if (suf == n) return true;
        if (k == 0 || suf > n) break;
        suf *= sz[k - 1];
    }
    return false;
}

// Every reader of member m's output comes after node e, and its view readers
// can view a slice.
static bool readers_ok(const weft_graph *g, const member *m, int32_t e) {
    int32_t out = g->nodes[m->s].out0;
    for (int32_t i = m->s + 1; i < g->n_nodes; i++) {
        const weft_gnode *c = &g->nodes[i];
        for (int k = 0; k < c->n_in; k++) {
            if (c->in[k] != out) continue;
            if (i <= e) return false;
            if (c->kind == WEFT_NODE_OP && !strcmp(c->op->name, "view")) {
                const weft_gvalue *v = &g->values[c->out0];
                if (!view_of_slice_ok(v->ndim, v->sizes, m->N)) return false;
            }
        }
    }
    return true;
}

static bool same_key(const weft_graph *g, const member *a, const member *b) {
    return a->x == b->x && g->nodes[a->s].attrs.i[0] == g->nodes[b->s].attrs.i[0] && a->tb == b->tb && a->K == b->K &&
           g->values[a->w].dtype == g->values[b->w].dtype;
}

// Emit the fused matmul for members idx[0..n) at node e; forwards each member.
static int emit(weft_rw *rw, const member *ms, const int *idx, int n, int32_t e) {
    const weft_graph *g = rw->src;
    const member *m0 = &ms[idx[0]];
    const weft_gnode *n0 = &g->nodes[m0->s];
    int32_t win[16];
    for (int j = 0; j < n; j++) win[j] = rw->vmap[ms[idx[j]].w];
    char hint[160];
    snprintf(hint, sizeof hint, "%s/hfuse_w", n0->name);
    weft_attrs cat = {.i = {m0->tb ? 0 : 1}}; // weights (N_i, K) stack rows; (K, N_i) stack columns
    int32_t w = weft_rw_op(rw, -1, hint, weft_op_find("concat"), n, win, &cat);
    if (w < 0) return -1;
    weft_attrs mm = n0->attrs;
    mm.i[1] = m0->tb;
    snprintf(hint, sizeof hint, "%s/hfuse", n0->name);
    int32_t y = weft_rw_op(rw, -1, hint, n0->op, 2, (int32_t[]){rw->vmap[m0->x], w}, &mm);
    if (y < 0) return -1;
    int nd = rw->dst->values[y].ndim;
    int64_t off = 0;
    for (int j = 0; j < n; j++) {
        const member *m = &ms[idx[j]];
        const weft_gnode *nj = &g->nodes[m->s];
        weft_attrs sl = {.i = {nd - 1, off, off + m->N, 1}};
        off += m->N;
        int32_t v = weft_rw_op(rw, m->s, nj->name, weft_op_find("slice"), 1, &y, &sl);
        if (v < 0) return -1;
        if (!weft_rw_same_meta(rw, v, nj->out0))
            return weft_error(WEFT_ERR_STATE, "graph_optimize: node '%s': horizontal fusion changed its shape", nj->name),
                   -1;
        weft_rw_forward(rw, m->s, &v);
    }
    (void)e;
    return n;
}

weft_status weft_pass_hfuse(weft_rw *rw, weft_pass_io *io) {
    const weft_graph *g = rw->src;
    int nn = g->n_nodes;
    member *ms = malloc((size_t)(nn ? nn : 1) * sizeof *ms);
    int32_t *emit_at = malloc((size_t)(nn ? nn : 1) * sizeof *emit_at); // node -> group emitted there, -1
    uint8_t *deferred = calloc((size_t)(nn ? nn : 1), 1);
    int *idx = malloc((size_t)(nn ? nn : 1) * sizeof *idx);
    if (!ms || !emit_at || !deferred || !idx) {
        free(ms), free(emit_at), free(deferred), free(idx);
        return weft_error(WEFT_ERR_OOM, "graph_optimize: out of memory");
    }
    int nm = 0;
    for (int32_t s = 0; s < nn; s++) {
        emit_at[s] = -1;
        const weft_gnode *n = &g->nodes[s];
        if (!weft_rw_rewritable(n) || strcmp(n->op->name, "matmul") != 0 || n->n_in != 2) continue;
        member m = {.s = s, .x = n->in[0], .w = n->in[1], .tb = (int)n->attrs.i[1], .group = -1};
        if (src_transpose2d(g, m.w)) {
            m.w = g->nodes[g->values[m.w].node].in[0];
            m.tb ^= 1;
        }
        const weft_gvalue *wv = &g->values[m.w];
        if (wv->ndim != 2) continue;
        m.K = wv->sizes[m.tb ? 1 : 0];
        m.N = wv->sizes[m.tb ? 0 : 1];
        ms[nm++] = m;
    }
    // Groups: members with the same key, in index order; for each group the
    // emission point E (a member's index) that admits the most members.
    int ngroups = 0;
    for (int a = 0; a < nm; a++) {
        if (ms[a].group >= 0) continue;
        int n = 0;
        for (int b = a; b < nm && n < 16; b++)
            if (ms[b].group < 0 && same_key(g, &ms[a], &ms[b])) idx[n++] = b;
        if (n < 2) continue;
        int best = 0, best_e = -1;
        for (int ei = n - 1; ei >= 1; ei--) {
            int32_t e = ms[idx[ei]].s, c = 0;
            for (int j = 0; j <= ei; j++) c += readers_ok(g, &ms[idx[j]], e);
            if (c > best) best = c, best_e = ei;
        }
        if (best < 2) continue;
        int32_t e = ms[idx[best_e]].s;
        int gid = ngroups++;
        for (int j = 0; j <= best_e; j++)
            if (readers_ok(g, &ms[idx[j]], e)) {
                ms[idx[j]].group = gid;
                deferred[ms[idx[j]].s] = 1;
            }
        emit_at[e] = gid;
    }
    weft_status st = WEFT_OK;
    for (int32_t s = 0; s < nn && st == WEFT_OK; s++) {
        if (emit_at[s] >= 0) {
            int n = 0;
            for (int a = 0; a < nm; a++)
                if (ms[a].group == emit_at[s]) idx[n++] = a;
            int r = emit(rw, ms, idx, n, s);
            if (r < 0) st = weft_last_status();
            else io->changed += r;
            continue;
        }
        if (deferred[s]) continue; // its slice is emitted at the group's point
        if (weft_rw_copy(rw, s) < 0) st = weft_last_status();
    }
    free(ms), free(emit_at), free(deferred), free(idx);
    return st;
}
