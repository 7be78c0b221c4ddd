// weft/graph_passes.h — graph optimisation passes.
//
// Passes are functional: weft_graph_optimize builds a NEW graph from a graph
// and leaves the original untouched, so handles into the original stay valid.
// The caller names the values it will fetch (`keep`, the roots of dead-code
// elimination) and gets the same values in the new graph back (`keep_out`).
//
// What the new graph keeps, whatever the passes:
// - every PLACEHOLDER and VARIABLE node, under its name (the graph's
//   interface: feed by name or pass the placeholder in `keep`);
// - every ASSIGN / ASSIGN_ADD node, under its name (side effects are never
//   dead code): find them with weft_graph_find_node to run them as targets;
// - control dependencies (mapped to the nodes that replace their targets).
// Variables of the new graph SHARE the original's variable tensors (one
// reference, not a copy), so training state is one: an assign run in either
// graph is seen by both. Constants are shared too and are treated as
// immutable (a pass may read them once, at optimisation time).
//
// Passes never touch OP nodes that carry control dependencies or ops with side
// effects (batch_norm updates running statistics in its kernel).
//
// Errors: NULL graph, a keep value that is not a value of the graph, or a
// failure while building return NULL with a message naming
// "graph_optimize" (and the node when there is one).
#ifndef WEFT_GRAPH_PASSES_H
#define WEFT_GRAPH_PASSES_H

#include "graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_graph_passes {
    bool constant_folding; // OP nodes whose inputs are all CONSTANT become CONSTANTs
    bool cse;              // identical OP nodes (op, attrs, inputs) and identical constants merge
    bool dce;              // nodes the roots do not need are dropped
    bool algebraic;        // x*1, x+0, x*0, Add(c1, Add(x, c2)), Cast(Cast(x)), Reshape(Reshape(x))
    // Allow rewrites that are exact in real arithmetic but not bit-identical
    // in IEEE floats: float x*0 -> 0 (wrong for inf/NaN) and reassociating
    // float constants (c1 + (x + c2) -> x + (c1 + c2)). Integer forms of these
    // rules are exact and always on. Off in weft_graph_passes_all().
    bool fast_math;
    // Chains of elementwise ops (and a matmul's elementwise epilogue, e.g.
    // bias add + gelu) become one FUSED node run in one pass over memory;
    // bit-identical results. Runs once after the other passes converged.
    bool fusion;
    // ---- issue 5 passes (see docs/graph.md "Matmul, fusion and layout passes") ----
    // matmul(transpose(x), y) and matmul(copy(transpose(x)), y) -> matmul with
    // its trans flag (attrs i[0] / i[1]); the transpose (and its copy) die.
    bool transpose_fold;
    // >= 2 matmuls sharing their first operand, 2-D second operands of the same
    // K and dtype -> concat(weights) + one matmul + slices. Not bit-identical
    // (BLAS blocks a wider product differently): off in weft_graph_passes_all().
    bool hfuse;
    // conv2d in NHWC where a one-off timing at optimisation time says it is
    // > 10% faster on the node's shapes. Off in weft_graph_passes_all().
    bool layout;
    // Rematerialisation (runs once, after the others): a cheap value (elementwise,
    // layer_norm) used early and much later is recomputed for the late uses when
    // its inputs are alive then anyway, instead of being kept (bit-identical).
    bool remat;
} weft_graph_passes;

// Every exact pass on (transpose_fold included); fast_math, hfuse, layout off.
weft_graph_passes weft_graph_passes_all(void);

typedef struct weft_graph_pass_stats {
    int nodes_before, nodes_after;
    int folded;      // OP nodes replaced by constants
    int cse_merged;  // nodes merged into an identical earlier one
    int dce_removed; // nodes dropped as dead
    int simplified;  // algebraic rewrites applied
    int rounds;      // pipeline rounds run (passes repeat until nothing changes, at most 8)
    int fused_groups; // FUSED nodes made by fusion
    int fused_nodes;  // OP nodes they replace
    int transposes_folded; // matmul operands that became a trans flag
    int hfused;            // matmuls merged into a wider one (a group of 3 counts 3)
    int layout_changed;    // conv2d nodes switched to NHWC
    int rematerialized; // nodes duplicated for their late uses (remat)
} weft_graph_pass_stats;

// Optimise g into a new graph (free it with weft_graph_free; g is unchanged).
// keep[0..n_keep): values the caller will fetch; keep_out[i] receives the
// same value in the new graph (keep_out may alias keep). passes NULL: all
// (weft_graph_passes_all()). stats may be NULL. Fixed order per round:
// constant folding, algebraic simplification, transpose folding, CSE,
// horizontal fusion, layout, DCE.
weft_graph *weft_graph_optimize(const weft_graph *g, int n_keep, const weft_value *keep, weft_value *keep_out,
                                const weft_graph_passes *passes, weft_graph_pass_stats *stats);

// Same, plus nodes to keep (e.g. targets the caller will run): keep_nodes are
// DCE roots too and keep_nodes_out[j] is the node that does their work in the
// new graph (for an OP node merged or simplified away: the producer of its
// replacement).
weft_graph *weft_graph_optimize_nodes(const weft_graph *g, int n_keep, const weft_value *keep, weft_value *keep_out,
                                      int n_keep_nodes, const weft_node_id *keep_nodes, weft_node_id *keep_nodes_out,
                                      const weft_graph_passes *passes, weft_graph_pass_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
