// weft/ddp.h — distributed data parallel training (as PyTorch's DDP).
//
// Every rank holds a full replica of the model and trains it on its own share
// of each batch (weft_loader_opts.num_replicas / rank). After backward, every
// parameter's .grad is the average over ranks, so an optimiser step keeps the
// replicas identical: the result is the same as one process training on the
// combined batch (up to floating-point rounding).
//
// Gradients are grouped into buckets (parameters in reverse order, since
// backward produces the last layers' gradients first). The autograd leaf
// hooks count down each bucket; when all its gradients are final it is
// flattened into a buffer and an asynchronous all-reduce (average) starts at
// once, so communication overlaps the rest of backward. Buckets are issued in
// the same order on every rank (bucket k only after 0..k-1), as collectives
// must be.
//
// The model may live on any one device: the buffers are on the parameters'
// device and the all-reduce takes the path the collectives choose for it
// (weft/dist.h): MPI on the CPU; on a GPU, NCCL on the communication stream
// where every rank has a GPU of its own (the step after weft_ddp_wait is
// ordered after it on the GPU, the host does not wait), else staged through
// host memory.
//
//     weft_ddp *d = weft_ddp_create(weft_comm_world(), net, NULL);
//     for (...) { loss = ...; weft_backward(loss, NULL, NULL);
//                 weft_ddp_wait(d);          // .grad now averaged over ranks
//                 weft_optim_step(opt); weft_optim_zero_grad(opt); }
//
// Gradient accumulation: weft_ddp_set_sync(d, false) for the first micro-
// batches (local sums only), true again before the last one, whose backward
// all-reduces the accumulated sums.
//
// A parameter that gets no gradient in a backward (unused) counts as zero
// there; after weft_ddp_wait every parameter has a .grad on every rank (the
// average), so the replicas' optimiser steps stay identical.
#ifndef WEFT_DDP_H
#define WEFT_DDP_H

#include "dist.h"
#include "nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_ddp_opts {
    double bucket_mb; // bucket capacity in MB (0: 25)
    bool no_comm;     // skip the all-reduce entirely (benchmarks: the cost of communication)
} weft_ddp_opts;

typedef struct weft_ddp weft_ddp;

// Collective over c: broadcasts every parameter and buffer of m from rank 0
// (parameters: contiguous f32/f64, all on one device),
// groups the parameters into buckets (reverse parameter order, capacity
// bucket_mb; one dtype per bucket) and registers grad hooks on them. m is
// borrowed and must outlive the handle. opts may be NULL (defaults).
weft_ddp *weft_ddp_create(weft_comm *c, weft_module *m, const weft_ddp_opts *opts);
// After weft_backward: issues the buckets still pending (unused parameters
// count as zero), waits for every bucket; the parameters' .grad are then the
// average over ranks. Returns the first error of the step (a failed
// all-reduce, a gradient whose shape changed, ...).
weft_status weft_ddp_wait(weft_ddp *d);
// no_sync: while off, backward only accumulates local gradients (no
// communication; weft_ddp_wait does nothing); the first backward after
// turning it back on all-reduces the accumulated sums.
void weft_ddp_set_sync(weft_ddp *d, bool on);
int weft_ddp_num_buckets(const weft_ddp *d);
void weft_ddp_free(weft_ddp *d); // removes the hooks (waits for buckets in flight)

#ifdef __cplusplus
}
#endif
#endif
