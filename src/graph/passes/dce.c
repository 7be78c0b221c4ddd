// Dead-code elimination: keep the ancestors of the roots through data and
// control edges; drop everything else. The pipeline makes roots of the
// caller's keep values and nodes, every placeholder and variable (the graph's
// interface) and every assign (side effects).
#include <stdlib.h>

#include "../rewrite.h"

weft_status weft_pass_dce(weft_rw *rw, weft_pass_io *io) {
    const weft_graph *g = rw->src;
    int N = g->n_nodes;
    uint8_t *need = calloc((size_t)(N ? N : 1), 1);
    int32_t *stack = malloc((size_t)(N ? N : 1) * sizeof *stack);
    if (!need || !stack) {
        free(need);
        free(stack);
        return weft_error(WEFT_ERR_OOM, "graph_optimize: out of memory");
    }
    int sp = 0;
    for (int32_t i = 0; i < N; i++)
        if (io->roots[i]) need[i] = 1, stack[sp++] = i;
    while (sp) {
        const weft_gnode *n = &g->nodes[stack[--sp]];
        for (int k = 0; k < n->n_in; k++) {
            int32_t p = g->values[n->in[k]].node;
            if (!need[p]) need[p] = 1, stack[sp++] = p;
        }
        for (int k = 0; k < n->n_ctrl; k++) {
            int32_t p = n->ctrl[k];
            if (!need[p]) need[p] = 1, stack[sp++] = p;
        }
        if (n->var >= 0 && !need[n->var]) need[n->var] = 1, stack[sp++] = n->var; // an assign's variable
    }
    weft_status st = WEFT_OK;
    for (int32_t i = 0; i < N && st == WEFT_OK; i++) {
        if (!need[i]) {
            io->changed++;
            continue;
        }
        if (weft_rw_copy(rw, i) < 0) st = weft_last_status();
    }
    free(need);
    free(stack);
    return st;
}
