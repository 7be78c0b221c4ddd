// Constant folding: an OP node whose inputs are all CONSTANT nodes is computed
// once, now, and becomes CONSTANT nodes (one per output, the first keeping
// the node's name). Variable reads and placeholders are never constants, so
// nothing that can change between runs is folded.
#include <stdio.h>
#include <stdlib.h>

#include "../rewrite.h"

// A folded result bigger than this stays an op: folding must not turn a cheap
// broadcast of a scalar into megabytes held by the graph for its lifetime.
#define FOLD_MAX_BYTES ((size_t)16 << 20)

// Try to fold source node s; true when it was replaced.
static bool try_fold(weft_rw *rw, int32_t s, weft_status *err) {
    const weft_gnode *n = &rw->src->nodes[s];
    if (!weft_rw_rewritable(n) || n->n_in == 0 || n->n_in > 16) return false;
    weft_tensor *in[16];
    for (int k = 0; k < n->n_in; k++)
        if (!(in[k] = weft_rw_const(rw, rw->vmap[n->in[k]]))) return false;
    for (int j = 0; j < n->n_out; j++) {
        const weft_gvalue *v = &rw->src->values[n->out0 + j];
        if ((size_t)weft_shape_numel(v->ndim, v->sizes) * weft_dtype_size((weft_dtype)v->dtype) > FOLD_MAX_BYTES)
            return false;
    }
    weft_tensor *out[WEFT_MAX_OP_OUT] = {0};
    if (weft_rw_eval(n->op, n->n_in, in, &n->attrs, out) != WEFT_OK) {
        weft_clear_error(); // it would fail at run time too: leave the node, the executor names it
        return false;
    }
    bool ok = true;
    for (int j = 0; j < n->n_out; j++) {
        const weft_gvalue *v = &rw->src->values[n->out0 + j];
        ok = ok && v->dtype == out[j]->dtype && weft_shape_equal(v->ndim, v->sizes, out[j]->ndim, out[j]->sizes);
    }
    if (!ok) {
        for (int j = 0; j < n->n_out; j++) weft_tensor_free(out[j]);
        return false;
    }
    int32_t dv[WEFT_MAX_OP_OUT];
    for (int j = 0; j < n->n_out; j++) {
        char hint[160];
        if (j == 0) snprintf(hint, sizeof hint, "%s", n->name);
        else snprintf(hint, sizeof hint, "%s:%d", n->name, j);
        dv[j] = weft_rw_constant(rw, s, hint, out[j]); // takes out[j]
        if (dv[j] < 0) {
            for (int k = j + 1; k < n->n_out; k++) weft_tensor_free(out[k]);
            *err = weft_last_status();
            return true;
        }
    }
    weft_rw_forward(rw, s, dv);
    return true;
}

weft_status weft_pass_constant_folding(weft_rw *rw, weft_pass_io *io) {
    for (int32_t s = 0; s < rw->src->n_nodes; s++) {
        weft_status err = WEFT_OK;
        if (try_fold(rw, s, &err)) {
            if (err != WEFT_OK) return err;
            io->changed++;
            continue;
        }
        if (weft_rw_copy(rw, s) < 0) return weft_last_status();
    }
    return WEFT_OK;
}
