// IR rewrite helpers for graph passes.
//
// A pass never edits a graph in place: it walks the source graph's nodes in
// index order (data inputs always point to earlier nodes, so inputs are
// already decided) and, for each node, either copies it into a new
// destination graph, forwards its outputs to values already in the
// destination (merged or simplified away), emits replacement nodes (a folded
// constant), or drops it (dead). vmap/nmap record where every source value and
// node went, so the pipeline can map the caller's handles.
#ifndef WEFT_GRAPH_REWRITE_H
#define WEFT_GRAPH_REWRITE_H

#include <weft/graph_passes.h>

#include "graph_impl.h"

typedef struct weft_rw {
    const weft_graph *src;
    weft_graph *dst;
    int32_t *vmap;   // [src values] -> dst value id, -1: dropped
    int32_t *nmap;   // [src nodes] -> dst node doing its work, -1: dropped
    uint8_t *copied; // [src nodes] 1: nmap[i] is a copy of node i (its control deps get remapped)
} weft_rw;

// What the pipeline hands each pass.
typedef struct weft_pass_io {
    const uint8_t *roots; // [src nodes] DCE roots
    bool fast_math;
    int changed; // out: rewrites made (folded / merged / removed / simplified)
    // ---- fusion ----
    const uint8_t *keep_vals; // [src values] the caller fetches them (NULL: none)
    int fused_groups;         // out: FUSED nodes made
} weft_pass_io;

typedef weft_status (*weft_pass_fn)(weft_rw *rw, weft_pass_io *io);

// The passes (one file each under passes/).
weft_status weft_pass_constant_folding(weft_rw *rw, weft_pass_io *io);
weft_status weft_pass_algebraic(weft_rw *rw, weft_pass_io *io);
weft_status weft_pass_cse(weft_rw *rw, weft_pass_io *io);
weft_status weft_pass_dce(weft_rw *rw, weft_pass_io *io);
// Vertical fusion (passes/fuse.c): runs once, after the other passes converged.
weft_status weft_pass_fusion(weft_rw *rw, weft_pass_io *io);
// Issue-5 passes (passes/transpose_fold.c, hfuse.c, layout.c).
weft_status weft_pass_transpose_fold(weft_rw *rw, weft_pass_io *io);
weft_status weft_pass_hfuse(weft_rw *rw, weft_pass_io *io);
weft_status weft_pass_layout(weft_rw *rw, weft_pass_io *io);
// Rematerialisation (passes/remat.c); once, after the rounds.
weft_status weft_pass_remat(weft_rw *rw, weft_pass_io *io);

weft_status weft_rw_init(weft_rw *rw, const weft_graph *src);
// The usual pass body: each source node in index order goes to fn, which
// returns > 0 when it rewrote the node (that many rewrites, added to
// io->changed; its outputs are forwarded or replaced), 0 to leave it (it is
// copied), < 0 on error (set).
typedef int (*weft_rw_node_fn)(weft_rw *rw, int32_t s, weft_pass_io *io);
weft_status weft_rw_each(weft_rw *rw, weft_pass_io *io, weft_rw_node_fn fn);
// Remap control dependencies of copied nodes (after every node is decided).
weft_status weft_rw_finish(weft_rw *rw);
// Frees the maps and, unless take_dst, the destination graph.
void weft_rw_free(weft_rw *rw, bool take_dst);

// Copy source node s (inputs remapped, same name, kind, op, attrs, tensor
// reference, value shapes). Returns the dst node id or -1 (error set).
int32_t weft_rw_copy(weft_rw *rw, int32_t s);
// Source node s's outputs become dst values dv[0..n_out); it does no work of its own.
void weft_rw_forward(weft_rw *rw, int32_t s, const int32_t *dv);
// A new CONSTANT holding t (reference taken over), named after hint (made
// unique against both graphs; the source node `owner`, which it replaces,
// lends its own name; -1: none). Returns the dst value or -1.
int32_t weft_rw_constant(weft_rw *rw, int32_t owner, const char *hint, weft_tensor *t);
// A new OP node (shapes from the op's infer). Returns the dst value of output 0 or -1.
int32_t weft_rw_op(weft_rw *rw, int32_t owner, const char *hint, const weft_op_def *op, int n_in, const int32_t *in,
                   const weft_attrs *at);

// ---- queries on the destination graph (by dst value id) ----
const weft_gnode *weft_rw_producer(const weft_rw *rw, int32_t dv);
// The CONSTANT tensor behind dst value dv, or NULL.
weft_tensor *weft_rw_const(const weft_rw *rw, int32_t dv);
// Every element of constant value dv equals c (small constants only).
bool weft_rw_const_all(const weft_rw *rw, int32_t dv, double c);
// The value aliases graph state (a variable read or assign output, through views):
// forwarding a pure op's output to it would turn a private result into a live alias.
bool weft_rw_aliases_state(const weft_rw *rw, int32_t dv);
// The value is contiguous at run time (placeholders, op outputs, views of those).
bool weft_rw_contiguous(const weft_rw *rw, int32_t dv);
// Passes only rewrite pure OP nodes without control dependencies.
bool weft_rw_rewritable(const weft_gnode *n);
// Same static shape and dtype (dst value vs src value).
bool weft_rw_same_meta(const weft_rw *rw, int32_t dv, int32_t sv);

// Run an op on concrete tensors for a pass (no-grad, outside any trace).
weft_status weft_rw_eval(const weft_op_def *op, int n_in, weft_tensor *const *in, const weft_attrs *at,
                         weft_tensor **out);

#endif
