// The one thing the dispatcher knows about graph mode: a thread-local pointer
// to the graph being traced on this thread (NULL almost always). Eager ops pay
// one predictable branch on it.
#ifndef WEFT_TRACE_HOOK_H
#define WEFT_TRACE_HOOK_H

#include "../ops/op.h"

struct weft_graph;
extern _Thread_local struct weft_graph *weft_trace_active;

void weft_graph_trace_record(const weft_op_def *op, int n_in, weft_tensor *const *in, const weft_attrs *attrs,
                             weft_tensor *const *out);
// Called before the kernel of a WEFT_OPF_STATEFUL op while tracing: its state
// inputs become VARIABLE nodes, and their values are saved for trace_end.
void weft_graph_trace_before_stateful(const weft_op_def *op, int n_in, weft_tensor *const *in,
                                      const weft_attrs *attrs);

// Symbolic mode (graph autodiff, autodiff.c): ops infer shapes and make
// data-less outputs (weft_tensor_symbolic, tensor_impl.h), kernels are skipped.
extern _Thread_local bool weft_op_symbolic;

#endif
