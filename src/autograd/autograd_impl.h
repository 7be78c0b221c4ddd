// Autograd nodes and the hooks the dispatcher calls.
#ifndef WEFT_AUTOGRAD_IMPL_H
#define WEFT_AUTOGRAD_IMPL_H

#include "../ops/op.h"

// Where the gradient of one input goes: another node's output, or a leaf.
typedef struct weft_edge {
    struct weft_node *fn; // producer of the input (holds a reference), or NULL
    int32_t nr;           // output index of fn
    weft_tensor *leaf;    // leaf that requires grad (holds a reference), or NULL
} weft_edge;

typedef struct weft_node {
    int32_t refcount; // atomic
    bool released;    // saved tensors already freed by a backward pass
    const weft_op_def *op;
    weft_attrs attrs;
    uint64_t seq; // creation order: later nodes run first among ready ones
    int n_in, n_out;
    weft_edge *next;        // [n_in]
    weft_in_meta *in_meta;  // [n_in]
    weft_tensor **saved_in; // [n_in], entries NULL when not saved
    weft_tensor **saved_out; // [n_out] detached aliases (a cycle otherwise), NULL when not saved
    weft_in_meta *out_meta; // [n_out]
    // engine scratch, valid during one backward pass
    uint64_t epoch;
    int32_t deps;
    weft_tensor **gbuf; // [n_out]
} weft_node;

// Called by weft_op_apply after a kernel ran: records a node when grad mode is
// on and an input requires grad.
weft_status weft_autograd_record(const weft_op_def *op, int n_in, weft_tensor *const *in, const weft_attrs *attrs,
                                 int n_out, weft_tensor **out);
void weft_node_ref(weft_node *n);
void weft_node_release(weft_node *n);
// Free the saved tensors (after a backward without retain_graph, or at death).
void weft_node_free_saved(weft_node *n);
// Drop all hooks of a tensor (called when it is freed).
void weft_tensor_free_hooks(weft_tensor *t);

#endif
