// Memory planning for the graph executor (plan.c), shared with run.c.
//
// A "buffer" is the output of a non-view OP node: the only values that own
// fresh memory. Views alias their input's buffer (root), so a buffer lives
// from its producer's step to the last use of any value rooted at it;
// fetched buffers live to the end. Buffers whose lifetimes do not overlap
// share arena bytes (greedy by size, best-fit gap, 64-byte aligned).
#ifndef WEFT_GRAPH_PLAN_H
#define WEFT_GRAPH_PLAN_H

#include "graph_impl.h"

#define WEFT_PLAN_ALIGN 64

typedef struct weft_plan {
    int32_t *root;   // [values] buffer (value id) a value's memory belongs to; -1: not an intermediate
    int64_t *offset; // [values] byte offset in the arena of each buffer (root values); -1 elsewhere
    int64_t arena_bytes;
    weft_graph_plan_stats stats;
} weft_plan;

// Plan the values made by order[0..n_order) (a valid execution order of the
// pruned graph). fetched[v] != 0: v must survive the run. co (or NULL):
// co[s] = 1 when step s runs at the same time as step s-1 (coschedule.c).
// inplace (or NULL): inplace[v] >= 0 when the executor writes op output v
// straight into that variable (run.c): v takes no arena bytes.
weft_status weft_plan_build(const weft_graph *g, const int32_t *order, int n_order, const uint8_t *fetched,
                            const uint8_t *co, const int32_t *inplace, weft_plan *p);
void weft_plan_free(weft_plan *p);

// A contiguous tensor of (ndim, sizes, dt) over `arena`'s storage at a byte
// offset (a multiple of the dtype size). New reference.
weft_tensor *weft_plan_tensor_at(weft_tensor *arena, int64_t byte_offset, int ndim, const int64_t *sizes,
                                 weft_dtype dt);

// weft_op_apply_into (runs an op into preallocated outputs): declared in ops/op.h.

#endif
