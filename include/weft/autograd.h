// weft/autograd.h — eager reverse-mode automatic differentiation.
//
// Ops on tensors that require grad record a node (what the backward rule
// needs, saved). weft_backward walks the recorded graph in reverse
// topological order, sums gradients where a value fans out, and accumulates
// into the .grad of leaves.
#ifndef WEFT_AUTOGRAD_H
#define WEFT_AUTOGRAD_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

weft_status weft_tensor_set_requires_grad(weft_tensor *t, bool requires_grad); // leaves only
bool weft_tensor_requires_grad(const weft_tensor *t);
bool weft_tensor_is_leaf(const weft_tensor *t);
// Accumulated gradient of a leaf (a borrowed pointer, NULL if none yet).
weft_tensor *weft_tensor_grad(const weft_tensor *t);
// Drop the accumulated gradient (like optimizer.zero_grad(set_to_none=True)).
void weft_tensor_zero_grad(weft_tensor *t);
// Replace a leaf's gradient (takes a new reference to g; g may be NULL).
weft_status weft_tensor_set_grad(weft_tensor *t, weft_tensor *g);
// Name of the op that produced t ("" for leaves).
const char *weft_tensor_grad_fn_name(const weft_tensor *t);

typedef struct weft_backward_opts {
    bool retain_graph;  // keep saved tensors so backward can run again
    bool create_graph;  // record the backward pass itself (higher-order gradients); implies retain_graph
} weft_backward_opts;

// Gradient of `root` w.r.t. every leaf that requires grad. grad may be NULL
// for a one-element root (meaning 1). opts may be NULL (both false).
weft_status weft_backward(weft_tensor *root, weft_tensor *grad, const weft_backward_opts *opts);
// Several roots at once (grads[i] may be NULL for one-element roots).
weft_status weft_backward_multi(int n, weft_tensor *const *roots, weft_tensor *const *grads,
                                const weft_backward_opts *opts);

// Grad mode: while disabled, ops record nothing. Returns the previous value.
bool weft_grad_set_enabled(bool enabled);
bool weft_grad_is_enabled(void);
#define WEFT_NO_GRAD for (bool _weft_prev = weft_grad_set_enabled(false), _weft_once = true; _weft_once; \
                          weft_grad_set_enabled(_weft_prev), _weft_once = false)

// Hook fired when a leaf's gradient for this backward pass is final (all
// contributions summed into .grad). Distributed data parallel starts its
// all-reduce buckets from here. Returns a handle for removal.
typedef void (*weft_grad_hook_fn)(weft_tensor *leaf, void *user);
int weft_tensor_add_grad_hook(weft_tensor *leaf, weft_grad_hook_fn fn, void *user);
weft_status weft_tensor_remove_grad_hook(weft_tensor *leaf, int handle);

// Custom autograd functions (as torch.autograd.Function): compute the
// outputs yourself (grad disabled, or detached: fresh tensors without
// history), then record them so backward reaches `backward`. It gets the
// outputs' gradients (gout[j] NULL: none reached output j) and fills gin[i]
// (a new reference, of input i's shape, on its device; NULL means zero) for
// each input with needs[i]. ctx is the callback's; ctx_free(ctx) runs once,
// when the node is freed, or at once when nothing was recorded (grad mode
// off, no input requiring grad) or on error. Eager mode only: graph tracing
// does not see these. Tensor parallelism's f/g operators and pipeline sends
// are built on it.
typedef weft_status (*weft_function_backward_fn)(void *ctx, int n_out, weft_tensor *const *gout, int n_in,
                                                 const bool *needs, weft_tensor **gin);
weft_status weft_function_record(const char *name, int n_in, weft_tensor *const *in, int n_out,
                                 weft_tensor *const *out, weft_function_backward_fn backward, void *ctx,
                                 void (*ctx_free)(void *ctx));

// Finite-difference check of every op's backward: f maps n inputs (f64
// leaves that require grad) to one output; compares the analytic gradient of
// sum(out * w) (w random, fixed) with central differences.
typedef weft_tensor *(*weft_gradcheck_fn)(weft_tensor *const *inputs, void *user);
typedef struct weft_gradcheck_opts {
    double eps;  // step (default 1e-6)
    double atol; // default 1e-5
    double rtol; // default 1e-4
} weft_gradcheck_opts;
// Returns WEFT_OK when all partial derivatives agree; otherwise WEFT_ERR_STATE
// with the first mismatch (input, element, analytic, numeric) in the message.
weft_status weft_gradcheck(weft_gradcheck_fn f, int n, weft_tensor *const *inputs, void *user,
                           const weft_gradcheck_opts *opts);

#ifdef __cplusplus
}
#endif
#endif
