// Transpose folding (the seeds' rule MatMul(Transpose(x), y) -> MatMul with a
// transpose flag). A matmul operand produced by a permute that swaps only the
// last two dims, or by a copy of such a permute (contiguous(transpose(w)):
// a real copy), is replaced by the permute's input with the operand's
// trans flag (matmul attrs i[0] / i[1]) toggled. The kernel reads the
// untransposed value through BLAS's Trans flag, so the copy disappears and the
// permute / copy nodes die in DCE when nothing else reads them.
//
// Toggling (not setting) makes the rule compose: matmul(g, transpose(
// transpose(w))) from a backward rule folds in two rounds back to flags 0.
#include <string.h>

#include "../rewrite.h"

// dv is produced by a pure permute that swaps the last two dims (nothing else).
static bool swaps_last_two(const weft_rw *rw, int32_t dv) {
    const weft_gnode *p = weft_rw_producer(rw, dv);
    if (!weft_rw_rewritable(p) || strcmp(p->op->name, "permute") != 0) return false;
    int nd = rw->dst->values[dv].ndim;
    if (nd < 2) return false;
    for (int d = 0; d < nd - 2; d++)
        if (p->attrs.i[d] != d) return false;
    return p->attrs.i[nd - 2] == nd - 1 && p->attrs.i[nd - 1] == nd - 2;
}

// The untransposed value behind operand dv, or -1.
static int32_t untransposed(const weft_rw *rw, int32_t dv) {
    if (swaps_last_two(rw, dv)) return weft_rw_producer(rw, dv)->in[0];
    const weft_gnode *p = weft_rw_producer(rw, dv);
    if (weft_rw_rewritable(p) && !strcmp(p->op->name, "copy") && swaps_last_two(rw, p->in[0]))
        return weft_rw_producer(rw, p->in[0])->in[0];
    return -1;
}

static int fold(weft_rw *rw, int32_t s) {
    const weft_gnode *n = &rw->src->nodes[s];
    int32_t in[2] = {rw->vmap[n->in[0]], rw->vmap[n->in[1]]};
    weft_attrs at = n->attrs;
    int hits = 0;
    for (int k = 0; k < 2; k++) {
        int32_t u = untransposed(rw, in[k]);
        if (u < 0) continue;
        in[k] = u;
        at.i[k] ^= 1;
        hits++;
    }
    if (!hits) return 0;
    int32_t dv = weft_rw_op(rw, s, n->name, n->op, 2, in, &at);
    if (dv < 0) return -1;
    if (!weft_rw_same_meta(rw, dv, n->out0))
        return weft_error(WEFT_ERR_STATE, "graph_optimize: node '%s': transpose folding changed its shape", n->name), -1;
    weft_rw_forward(rw, s, &dv);
    return hits;
}

static int node_fold(weft_rw *rw, int32_t s, weft_pass_io *io) {
    (void)io;
    const weft_gnode *n = &rw->src->nodes[s];
    if (!weft_rw_rewritable(n) || n->n_in != 2 || n->n_out != 1 || strcmp(n->op->name, "matmul")) return 0;
    return fold(rw, s); // the operands folded
}

weft_status weft_pass_transpose_fold(weft_rw *rw, weft_pass_io *io) { return weft_rw_each(rw, io, node_fold); }
