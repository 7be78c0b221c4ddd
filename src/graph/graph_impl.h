// Graph IR internals shared by the builder, tracer, executor and DOT writer.
//
// Nodes and values live in two growable arrays and refer to each other by
// index, so a graph is cheap to copy, serialise or rewrite (passes) later.
// Data edges always point to earlier nodes (a value must exist before it is
// consumed), so only control dependencies can close a cycle.
#ifndef WEFT_GRAPH_IMPL_H
#define WEFT_GRAPH_IMPL_H

#include <weft/graph.h>

#include "../ops/op.h"

// The most outputs a node has: an op's, or a control node's (cond, while); the executor's per-node arrays.
#define WEFT_NODE_MAX_OUT (WEFT_GRAPH_MAX_OUT > WEFT_MAX_OP_OUT ? WEFT_GRAPH_MAX_OUT : WEFT_MAX_OP_OUT)

typedef struct weft_gvalue {
    int32_t node;  // producer
    int32_t index; // output index of the producer
    int8_t ndim;
    uint8_t dtype;
    int64_t sizes[WEFT_MAX_DIMS];
} weft_gvalue;

typedef struct weft_gnode {
    weft_node_kind kind;
    char *name;
    const weft_op_def *op; // OP nodes
    weft_attrs attrs;      // OP nodes
    int n_in;
    int32_t *in; // [n_in] value ids
    int n_out;
    int32_t out0; // value ids out0 .. out0+n_out-1
    int n_ctrl;
    int32_t *ctrl;      // [n_ctrl] node ids that must run before this one
    weft_tensor *tensor; // CONSTANT / VARIABLE: the held tensor (one reference)
    int32_t var;         // ASSIGN / ASSIGN_ADD: the VARIABLE node written
    // COND / WHILE (control.c): subgraphs owned by the node and their interfaces.
    // COND: sub[0] then, sub[1] else; inputs in[0] = pred, in[1..] = data.
    // WHILE: sub[0] cond (sub_out[0][0] is the predicate), sub[1] body.
    struct weft_graph *sub[2];
    int32_t *sub_in[2];  // placeholder value ids receiving the data inputs
    int32_t *sub_out[2]; // value ids fetched (COND: n_out each; WHILE: 1 and n_out)
    int n_sub_in, n_sub_out[2];
    int64_t max_iter; // WHILE (0: no limit)
    struct weft_queue *queue; // ENQUEUE / DEQUEUE: the queue (one reference, weft_queue_ref)
    struct weft_fused_prog *prog; // FUSED: its program (owned; src/graph/fused.h)
    // WHILE made by autodiff as the gradient of a WHILE (control.c): inputs are
    // the m loop vars' initial values then f output gradients; see control.c.
    bool while_grad;
} weft_gnode;

// CUDA-graph capture in the last run (src/graph/capture.c): for tests and
// WEFT_CUDA_GRAPHS_DEBUG=1.
typedef struct weft_graph_capture_stats {
    int mode;           // 0: not captured (why says why), 1: probed (a plain run trying each
                        // node alone), 2: recorded, 3: replayed
    int graphs;         // captured graphs launched by the run
    int captured_steps; // steps inside them
    int plain_steps;    // steps that queue device work and run plainly (modes 2 and 3)
    char why[320];      // why not captured / the first nodes that run plainly and why
} weft_graph_capture_stats;
weft_graph_capture_stats weft_graph_capture_last(const weft_graph *g);

// A pointer-keyed open-addressing map (tensor -> value id) for tracing.
typedef struct weft_ptrmap {
    const void **keys;
    int32_t *vals;
    size_t cap, n;
} weft_ptrmap;

// A string-keyed map (node name -> node id) for unique names.
typedef struct weft_strmap {
    int32_t *slots; // node ids, -1 empty
    size_t cap, n;
} weft_strmap;

struct weft_graph {
    weft_gnode *nodes;
    int n_nodes, cap_nodes;
    weft_gvalue *values;
    int n_values, cap_values;
    weft_strmap names;
    // tracing
    bool tracing;
    weft_status trace_status; // first error while recording (sticky until trace_end)
    weft_ptrmap trace_map;
    weft_tensor **trace_held; // references keeping traced tensors (and their pointers) alive
    size_t n_held, cap_held;
    // execution
    weft_graph_run_stats stats;
    // Runs started so far: WEFT_OPF_RANDOM ops draw from (recorded seed, run number).
    uint64_t rng_runs;
    // Tracing: state inputs of stateful ops, restored at trace_end (trace_state.c).
    weft_tensor **trace_state;      // [2*n]: the tensor, its value before the trace
    size_t n_trace_state, cap_trace_state;
    // What weft_graph_run's prepare computed per (fetches, targets) set, reused
    // while the graph's structure is unchanged (run.c; freed by weft_graph_free).
    struct weft_run_cache *run_cache;
    weft_graph_capture_stats cap_stats; // of the last run
};

// Append a node of `kind` with n_out outputs (shapes filled by the caller);
// returns its id or -1. name NULL: auto "<base>_<id>". in/ctrl are copied.
int32_t weft_graph_add_node(weft_graph *g, const char *fn, weft_node_kind kind, const char *name, const char *base,
                            int n_in, const int32_t *in, int n_out);
bool weft_graph_value_ok(const weft_graph *g, weft_value v);
const char *weft_graph_kind_name(weft_node_kind k);
// The device of g's state: its first variable's (else constant's, else a
// subgraph's) tensor, the CPU without any. Passes make their constants
// there (the executor copies a constant on another device to the run's once).
weft_device weft_graph_device(const weft_graph *g);

// ptrmap
bool weft_ptrmap_put(weft_ptrmap *m, const void *key, int32_t val);
int32_t weft_ptrmap_get(const weft_ptrmap *m, const void *key); // -1 if absent
void weft_ptrmap_free(weft_ptrmap *m);

// Derived seed of a WEFT_OPF_RANDOM op for run number `run` (run 0: the
// recorded seed itself, so the first run replays the traced step).
int64_t weft_graph_run_seed(int64_t seed, uint64_t run);
// The executor's cases for queue nodes (queue_nodes.c): errors name the node.
weft_status weft_graph_exec_enqueue(weft_graph *g, const weft_gnode *n, weft_tensor *const *vals);
weft_status weft_graph_exec_dequeue(weft_graph *g, const weft_gnode *n, weft_tensor **outs);
// Release trace_state (restoring the values first when restore).
void weft_graph_trace_state_release(weft_graph *g, bool restore);
// Free g->run_cache (run.c).
void weft_graph_run_cache_free(weft_graph *g);

// Tracing's tensor -> value map (trace.c): map t to value vid, holding a
// reference to t until the map is released (so its pointer is not reused).
bool weft_graph_trace_map(weft_graph *g, weft_tensor *t, int32_t vid);
void weft_graph_trace_release(weft_graph *g);

// The tracing hook called by weft_op_apply after a successful op.
void weft_graph_trace_record(const weft_op_def *op, int n_in, weft_tensor *const *in, const weft_attrs *attrs,
                             weft_tensor *const *out);

// ---- control flow (control.c) ----
// Run a COND / WHILE node (vals: the executor's live values by id).
weft_status weft_control_exec(weft_graph *g, int32_t id, weft_tensor *const *vals, weft_tensor **outs);
void weft_control_free_node(weft_gnode *n);
// Deep-copy src's subgraphs and interfaces into dst (a copy of src otherwise).
weft_status weft_control_copy_node(weft_gnode *dst, const weft_gnode *src);
// A deep copy of g (same node and value ids; tensors shared by reference).
weft_graph *weft_graph_clone(const weft_graph *g);
// The gradient loop of a WHILE (autodiff.c builds the subgraphs): inputs in =
// m initial loop vars then f output gradients; cond_g and gbody_g have m + f
// placeholders (cond_g's last f unused); gbody_out = the m body outputs then
// the f gradients w.r.t. the float loop vars. Takes the subgraphs on success.
weft_status weft_control_while_grad(weft_graph *g, const char *name, weft_graph *cond_g, int32_t cond_out,
                                    weft_graph *gbody_g, const int32_t *gbody_out, int m, int f, const int32_t *in,
                                    int64_t max_iter, weft_value *out);

#endif
