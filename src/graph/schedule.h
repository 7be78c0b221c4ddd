// Memory-aware serial order for the graph executor (schedule.c), used by
// run.c after its Kahn pass (which stays the cycle check).
#ifndef WEFT_GRAPH_SCHEDULE_H
#define WEFT_GRAPH_SCHEDULE_H

#include "graph_impl.h"

// Reorder order[0..n) in place: it must be a valid execution order of the
// pruned graph (data and control deps) and stays one. fetched[v] != 0: v
// lives to the end. Nodes whose output would otherwise wait long for its
// first consumer are moved down to just before it ("as late as possible")
// when that shortens live byte-steps (output bytes saved over the gap
// against the bytes of inputs whose lifetime the move extends). OP nodes
// only; never past an assign to a variable the node reads; batch_norm
// (side effects in its kernel) stays.
weft_status weft_schedule_memory(const weft_graph *g, int32_t *order, int n, const uint8_t *fetched);

// Co-scheduling (coschedule.c): pair independent matmuls to run at once, one
// core each. Reorders order[0..n) (staying valid) and sets co[s] = 1 when
// step s runs together with step s-1. Returns the number of pairs, -1 when
// out of memory (order untouched then).
int weft_schedule_pairs(const weft_graph *g, int32_t *order, int n, uint8_t *co);
// Whether runs with this many threads pair nodes (WEFT_GRAPH_COSCHEDULE=0/1
// forces it off / on for 2 threads or more; default: exactly 2 threads).
bool weft_coschedule_enabled(int threads);

#endif
