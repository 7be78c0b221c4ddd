// weft/graph.h — graph mode: static dataflow graphs built once, run many times.
//
// A weft_graph holds nodes and values. A value is one edge: the output of
// exactly one node, with a static shape and dtype. Nodes are placeholders
// (feeds), constants, variables (persistent state owned by the graph), ops
// from the same op table eager mode uses, and assignments to variables.
//
// Two ways to build one: the builder below (weft_graph_op by op name), or
// tracing ordinary eager code between weft_graph_trace_begin/_end.
// weft_graph_run prunes to what the fetches and targets need and executes it.
//
// Errors: functions return a status (or an invalid value/node) and leave a
// message naming the function and the node/op in weft_last_error().
// Thread safety: a graph is not thread-safe; build and run it from one thread
// at a time (tracing is per thread: only the tracing thread's ops are recorded).
#ifndef WEFT_GRAPH_H
#define WEFT_GRAPH_H

#include <stdio.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_graph weft_graph;

// Handles are small indices into one graph (id < 0: invalid / none).
typedef struct weft_value {
    int32_t id;
} weft_value;
typedef struct weft_node_id {
    int32_t id;
} weft_node_id;
#define WEFT_VALUE_NONE ((weft_value){-1})
#define WEFT_NODE_NONE ((weft_node_id){-1})

typedef enum weft_node_kind {
    WEFT_NODE_PLACEHOLDER = 0, // a feed
    WEFT_NODE_CONSTANT,        // a tensor fixed at build time (held by reference)
    WEFT_NODE_VARIABLE,        // named persistent state; reading gives its current value
    WEFT_NODE_OP,              // an op from the op table
    WEFT_NODE_ASSIGN,          // variable := value (executor-only, see docs/graph.md)
    WEFT_NODE_ASSIGN_ADD,      // variable += value
    WEFT_NODE_COND,            // if/else over two subgraphs (weft_graph_cond)
    WEFT_NODE_WHILE,           // loop over a cond and a body subgraph (weft_graph_while_loop)
    WEFT_NODE_ENQUEUE,         // push its inputs onto a queue (no outputs; run as a target)
    WEFT_NODE_DEQUEUE,         // pop one element of a queue (blocks while it is empty)
    WEFT_NODE_FUSED,           // a fused group of ops made by weft_graph_optimize (fusion); kind name "fused"
    WEFT_NODE_NUM_KINDS
} weft_node_kind;

weft_graph *weft_graph_new(void);
void weft_graph_free(weft_graph *g); // NULL is fine

// ---- builder (name may be NULL: an automatic "<op>_<id>" name) ----
// Names are unique within a graph; a repeated name is an error.
weft_value weft_graph_placeholder(weft_graph *g, const char *name, int ndim, const int64_t *sizes, weft_dtype dt);
// Holds a reference to t's storage (a detached alias), not a copy.
weft_value weft_graph_constant(weft_graph *g, const char *name, weft_tensor *t);
// The graph owns a copy of `initial` (contiguous, no autograd history).
weft_value weft_graph_variable(weft_graph *g, const char *name, weft_tensor *initial);
// An op of the op table by name. Integer attrs go to attrs.i[0..], doubles to
// attrs.f[0..] (each op documents their meaning next to its entry). Static
// shapes come from the op's own infer; a mismatch is an error naming the op
// and the node. out receives the op's outputs (room for WEFT_GRAPH_MAX_OUT;
// may be NULL when only the node matters).
#define WEFT_GRAPH_MAX_OUT 16
weft_status weft_graph_op(weft_graph *g, const char *op_name, int n_in, const weft_value *in, const int64_t *iattrs,
                          int n_iattrs, const double *fattrs, int n_fattrs, weft_value *out);
weft_status weft_graph_op_named(weft_graph *g, const char *name, const char *op_name, int n_in, const weft_value *in,
                                const int64_t *iattrs, int n_iattrs, const double *fattrs, int n_fattrs,
                                weft_value *out);
// Single-output shorthand (WEFT_VALUE_NONE on error).
weft_value weft_graph_op1(weft_graph *g, const char *op_name, int n_in, const weft_value *in, const int64_t *iattrs,
                          int n_iattrs, const double *fattrs, int n_fattrs);
// variable := value / variable += value (shape and dtype of the variable).
// The output is the variable's value after the write; run the node as a
// target (or fetch its output) to perform the write.
weft_value weft_graph_assign(weft_graph *g, const char *name, weft_value variable, weft_value value);
weft_value weft_graph_assign_add(weft_graph *g, const char *name, weft_value variable, weft_value value);
// `before` must run before `node` (when both are run). May create a cycle;
// weft_graph_run reports it.
weft_status weft_graph_add_control_dep(weft_graph *g, weft_node_id node, weft_node_id before);

// ---- accessors ----
int weft_graph_node_count(const weft_graph *g);
int weft_graph_value_count(const weft_graph *g);
weft_node_id weft_graph_find_node(const weft_graph *g, const char *name); // WEFT_NODE_NONE if absent
weft_node_id weft_graph_value_node(const weft_graph *g, weft_value v);
int weft_graph_value_ndim(const weft_graph *g, weft_value v);             // -1 if invalid
const int64_t *weft_graph_value_sizes(const weft_graph *g, weft_value v); // NULL if invalid
weft_dtype weft_graph_value_dtype(const weft_graph *g, weft_value v);
const char *weft_graph_node_name(const weft_graph *g, weft_node_id n);    // NULL if invalid
// The op's name for OP nodes; "placeholder", "constant", "variable", "assign", "assign_add" otherwise.
const char *weft_graph_node_op(const weft_graph *g, weft_node_id n);
weft_node_kind weft_graph_node_kind(const weft_graph *g, weft_node_id n);
int weft_graph_node_num_outputs(const weft_graph *g, weft_node_id n);
weft_value weft_graph_node_output(const weft_graph *g, weft_node_id n, int i);
// The value a node's output i (convenience: output 0 of a named node).
weft_value weft_graph_find_value(const weft_graph *g, const char *node_name);
// The live tensor of a VARIABLE node (borrowed; it survives runs).
weft_tensor *weft_graph_variable_tensor(const weft_graph *g, weft_value variable);

// ---- tracing (tf.function / torch.jit.trace) ----
// While tracing, every op this thread runs through the op table computes as
// usual and is also recorded as an OP node. Inputs map to values already seen
// in the trace; a tensor never seen becomes a VARIABLE if it is a leaf that
// requires grad (a parameter: the variable shares its storage), else a
// CONSTANT (shares storage). The trace keeps a reference to every tensor it
// has seen until trace_end, so pointers are not reused while it runs.
weft_status weft_graph_trace_begin(weft_graph *g);
// Declare t as a placeholder (a feed of this shape and dtype).
weft_value weft_graph_trace_input(weft_graph *g, weft_tensor *t, const char *name);
// Declare t as a named variable explicitly (shares t's storage).
weft_value weft_graph_trace_variable(weft_graph *g, weft_tensor *t, const char *name);
// The value of a tensor computed during the trace (call before trace_end).
weft_value weft_graph_trace_output(weft_graph *g, weft_tensor *t);
// Stops recording; returns the first error met while recording, if any.
weft_status weft_graph_trace_end(weft_graph *g);

// ---- execution ----
// Feeds (placeholder value, tensor) must match the placeholder's shape and
// dtype. Runs the ancestors of fetches and targets only (data and control
// edges), in dependency order, under no-grad; frees each intermediate after
// its last consumer. out[i] receives a new reference per fetch (a snapshot
// copy when the fetch is a variable's value). Variables persist across runs.
weft_status weft_graph_run(weft_graph *g, int n_feeds, const weft_value *feed_vals, weft_tensor *const *feeds,
                           int n_fetch, const weft_value *fetch, weft_tensor **out, int n_targets,
                           const weft_node_id *targets);

// Options for weft_graph_run_ex (NULL or zeroed: defaults).
typedef struct weft_graph_run_options {
    // Inter-op threads popping ready nodes (each op still uses OpenMP inside).
    // 0: $WEFT_INTEROP_THREADS if set, else 1 (serial). Keep 1 on small
    // machines: the kernels' intra-op threads already use the cores, and the
    // serial run already overlaps independent matmuls (co_pairs below).
    int interop_threads;
    // Memory plan: 0 default ($WEFT_GRAPH_PLAN=0 turns it off, else on),
    // 1 on, -1 off. With the plan, a serial run puts every intermediate in
    // one arena at planned offsets (fetches are copied out of it). Parallel
    // runs (interop_threads > 1) allocate per op: the plan is for one order.
    int memory_plan;
} weft_graph_run_options;
weft_status weft_graph_run_ex(weft_graph *g, int n_feeds, const weft_value *feed_vals, weft_tensor *const *feeds,
                              int n_fetch, const weft_value *fetch, weft_tensor **out, int n_targets,
                              const weft_node_id *targets, const weft_graph_run_options *opts);

typedef struct weft_graph_run_stats {
    int nodes_executed; // nodes run by the last weft_graph_run (after pruning)
    size_t peak_bytes;  // peak bytes of live intermediates (distinct storages made by ops; the arena when planned)
    int interop_threads; // threads that ran nodes
    bool planned;        // intermediates lived in the planned arena
    size_t arena_bytes;  // its size (0 when not planned)
    int inplace_writes;  // op outputs written straight into the variable assigned from them (no copy)
    int co_pairs;        // pairs of independent matmuls run at the same time, one core each (serial runs;
                         // $WEFT_GRAPH_COSCHEDULE, on by default at 2 threads)
} weft_graph_run_stats;
weft_graph_run_stats weft_graph_last_run_stats(const weft_graph *g);

// Memory plan of the intermediates (outputs of non-view ops) that running
// these fetches/targets makes, in the serial execution order.
typedef struct weft_graph_plan_stats {
    int64_t planned_bytes;       // arena size: buffers with disjoint lifetimes share bytes (64-byte aligned)
    int64_t unplanned_bytes;     // every intermediate in its own allocation, none freed
    int64_t liveness_peak_bytes; // peak when each is freed after its last use (what the executor measures);
                                 // a lower bound for any plan of this order
    int n_buffers;               // intermediates planned
    int n_slots;                 // distinct arena offsets used
} weft_graph_plan_stats;
// Plans without running (no feeds needed). NULL arrays with zero counts are fine.
weft_status weft_graph_plan(weft_graph *g, int n_fetch, const weft_value *fetch, int n_targets,
                            const weft_node_id *targets, weft_graph_plan_stats *stats);

// ---- inspection ----
// Graphviz DOT: one box per node (name + op), data edges labelled with shape
// and dtype, control dependencies dashed.
weft_status weft_graph_write_dot(const weft_graph *g, FILE *f);

// ==== serialisation (src/graph/serialize.c; format: docs/graph.md "Files") ====
// A graph file is a safetensors file: its tensors are the CONSTANT values
// ("const/<node name>") and VARIABLE values ("var/<node name>"), so standard
// tools read the weights; its __metadata__ holds "format": "weft.graph",
// "version": "1" and "graph": the node list as JSON (kind, name, op by name,
// attrs, input value ids, output shapes/dtypes, control deps, assign target).
//
// Saves g (not while tracing). Variables are saved with their current values.
// Written atomically: a temporary file, fsync, rename (a crash leaves the old
// file or the new one). The directory must exist.
weft_status weft_graph_save(const weft_graph *g, const char *path);
// Loads a graph saved by weft_graph_save (in any process). Everything is
// validated: format and version, op names (looked up in this build's op table),
// input ids (earlier nodes only), attrs, shapes and dtypes (each op's infer is
// re-run and must reproduce the stored shapes), tensors present and matching
// their nodes, unique names. NULL on error, with a message naming the file and
// the node: "graph_load: m.wgraph: node 'fc1' (op matmul): input 1 (value 7) out of range ...".
// Variables of the loaded graph are owned by it (copies of the file's values).
weft_graph *weft_graph_load(const char *path);
// Output `output` of the node named node_name (WEFT_VALUE_NONE if absent):
// how a loaded graph's feeds and fetches are found.
weft_value weft_graph_find_output(const weft_graph *g, const char *node_name, int output);

// ==== ONNX interchange (src/graph/onnx_*.c; docs/graph.md "ONNX") ====
// Built with protobuf-c (CMake WEFT_ONNX); without it both calls fail with
// WEFT_ERR_UNSUPPORTED and weft_onnx_available() is false.
bool weft_onnx_available(void);

// A concrete shape for one input of an ONNX model, for dims the file leaves
// symbolic ("batch") or to replace the file's own sizes; or a value the input
// is fixed to (it becomes a constant: inputs that ops such as Reshape, Slice
// or ReduceSum read as their shape or axes, which weft needs at load).
typedef struct weft_onnx_shape {
    const char *name; // a graph input of the model
    int ndim;
    const int64_t *sizes;
    weft_tensor *value; // NULL, or the input's fixed value (ndim and sizes are then ignored; copied)
} weft_onnx_shape;

// Loads an ONNX model (opsets 7 to 17 of the default domain; 1 to 6 where every
// op is one whose old versions weft reads alike, docs/graph.md) as a weft graph:
// each graph input that is not an initializer becomes a placeholder named as
// the input, each initializer a CONSTANT, and each node one or more ops
// (docs/graph.md lists the ONNX ops weft reads and what they become). Every
// value the model names is found by its name: weft_graph_find_value(g,
// "logits") is the graph output "logits" (the node producing an ONNX value
// carries the value's name). Inputs take their sizes from shapes[] when named
// there, else from the file, which must then give every dim. NULL on error,
// with a message naming the file and the node: an op weft does not read, an
// attribute it does not support, a malformed file.
weft_graph *weft_onnx_load(const char *path, int n_shapes, const weft_onnx_shape *shapes);

// Writes the part of g that computes outputs[0..n_out) from inputs[0..n_in)
// (placeholders) as an ONNX model (opset 17, IR version 8): variables and
// constants become initializers with their current values, each op one or
// more ONNX nodes; graph inputs and outputs are named after their weft nodes.
// An op with no ONNX form is an error naming the node and the op. Written
// atomically (a temporary file, fsync, rename).
weft_status weft_onnx_save(const weft_graph *g, int n_in, const weft_value *inputs, int n_out,
                           const weft_value *outputs, const char *path);

// ==== symbolic autodiff (src/graph/autodiff.c; docs/graph.md "Symbolic autodiff") ====
// Appends to g the backward graph of y (one element, floating point) with
// respect to wrt[0..n_wrt) (any values: variables, placeholders, intermediates)
// and puts the gradient values in grads_out[0..n_wrt). Nothing is executed:
// the op table's backward rules run in a symbolic mode (shapes only, no
// kernels) while the graph records the ops they call. Gradients of values
// used several times are summed; none flows through NONDIFF ops, integer or
// bool values, assigns or the predicate of a cond. A wrt value y does not
// depend on gets an all-zero CONSTANT of its shape and dtype (never
// WEFT_VALUE_NONE). A differentiable path through an op without a backward
// rule, or through a while_loop, is an error naming the node and the op.
weft_status weft_graph_gradients(weft_graph *g, weft_value y, int n_wrt, const weft_value *wrt, weft_value *grads_out);

// ==== control flow (src/graph/control.c; docs/graph.md "Control flow") ====
// Functional if/while (TF2's If/While; they are what the older Switch/Merge
// dataflow primitives lower to). A subgraph receives its inputs through its
// PLACEHOLDERs in creation order (it must have exactly one per input, of the
// input's shape and dtype) and returns the values the caller names. On
// success g owns the subgraphs (freed with g; each subgraph belongs to one
// node); on error the caller keeps them. A subgraph shares state with g by
// holding the same tensors: weft_graph_variable_tensor(g, v) given to
// weft_graph_trace_variable of a subgraph (or any tensor held by both) is one
// storage. At most WEFT_GRAPH_MAX_OUT outputs / loop variables.
//
// out[j] = pred ? then_out[j] : else_out[j]; pred has one element (bool, u8
// or numeric; nonzero is true). Only the taken branch runs. The branches'
// outputs must agree in shape and dtype.
weft_status weft_graph_cond(weft_graph *g, const char *name, weft_value pred, int n_in, const weft_value *inputs,
                            weft_graph *then_g, const weft_value *then_out, weft_graph *else_g,
                            const weft_value *else_out, int n_out, weft_value *out);
// vars = loop_vars_in; while (cond_g(vars)) vars = body_g(vars); out = vars.
// cond_out: cond_g's one-element predicate; body_out[n_loop]: body_g's new
// loop variables (same shapes and dtypes as loop_vars_in). More than
// max_iterations iterations is a run-time error naming the node (0: no limit).
weft_status weft_graph_while_loop(weft_graph *g, const char *name, weft_graph *cond_g, weft_value cond_out,
                                  weft_graph *body_g, const weft_value *body_out, int n_loop,
                                  const weft_value *loop_vars_in, weft_value *out, int64_t max_iterations);
// ==== queues as graph nodes (src/graph/queue_nodes.c; docs/graph.md "Stateful ops") ====
// A queue (weft/queue.h) is process state shared between graphs and threads:
// a producer graph enqueues, a consumer graph dequeues (an input pipeline),
// each run on its own thread. The nodes hold a reference to the queue
// (weft_queue_ref), so the caller may weft_queue_free its own at any time.
// Graphs with queue nodes cannot be saved (weft_graph_save names the node).
struct weft_queue; // weft/queue.h
//
// An ENQUEUE node with inputs values[0..n) (n = the queue's components, each
// of the component's dtype and fitting its shape spec): running it as a
// target pushes COPIES of the values (later runs reuse the graph's buffers)
// and blocks while the queue is full (backpressure). No outputs. Passes keep
// it (a side effect, like an assign). Returns the node or WEFT_NODE_NONE.
weft_node_id weft_graph_enqueue(weft_graph *g, const char *name, struct weft_queue *q, int n,
                                const weft_value *values);
// A DEQUEUE node: outputs out[0..components) are one element of the queue
// (every component needs a fully known shape: static shapes). Running it
// blocks until an element is there; a closed and empty queue makes the run
// fail with an error naming the node and the queue ("graph_run: node 'deq'
// (dequeue): queue 'q': dequeue: the queue is closed and empty": the end of
// data, TF's OutOfRange). out needs room for the queue's component count.
weft_node_id weft_graph_dequeue(weft_graph *g, const char *name, struct weft_queue *q, weft_value *out);

#ifdef __cplusplus
}
#endif
#endif
