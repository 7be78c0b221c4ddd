// weft/parallel.h — model parallelism: 3D layouts (data × tensor × pipeline),
// tensor-parallel layers (Megatron-LM), pipeline schedules (GPipe, 1F1B,
// interleaved 1F1B) and sharded optimiser state (ZeRO).
//
// A job of N ranks is laid out as DP × TP × PP = N in Megatron's rank order,
// tensor-parallel fastest:
//
//     world rank = tp_rank + TP * (dp_rank + DP * pp_rank)
//
// so the TP ranks of one model replica's stage are neighbours (on one node,
// where the bandwidth is), the pipeline stages are furthest apart. Each rank
// belongs to one group of each kind:
//   tp: the TP ranks holding the shards of the same layers (same dp, pp)
//   dp: the replicas of the same shard (same tp, pp): gradients average here
//   pp: the stages of one replica's pipeline (same tp, dp)
//   mp: every rank of one replica (TP × PP ranks, same dp): a gradient norm
//       for clipping or a loss is complete over this group
// The groups are communicators of weft/dist.h: MPI on the CPU, NCCL for CUDA
// tensors where every rank has its own GPU.
#ifndef WEFT_PARALLEL_H
#define WEFT_PARALLEL_H

#include "dist.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_parallel {
    int dp, tp, pp;                // sizes; dp * tp * pp == size of world
    int dp_rank, tp_rank, pp_rank; // this rank's coordinates
    int rank;                      // in world
    weft_comm *world;              // borrowed
    weft_comm *tp_comm, *dp_comm, *pp_comm, *mp_comm; // owned
} weft_parallel;

// Collective over world: splits it into the groups above. tp and pp must be
// >= 1 and tp * pp must divide the world size (dp is the quotient); the error
// names the setting. Free with weft_parallel_free (collective-free).
weft_parallel *weft_parallel_create(weft_comm *world, int tp, int pp);
void weft_parallel_free(weft_parallel *p);
// The world rank at coordinates (dp_rank, tp_rank, pp_rank) of layout p.
int weft_parallel_rank_of(const weft_parallel *p, int dp_rank, int tp_rank, int pp_rank);

// ==== tensor parallel (weft_tp_*, src/dist/tp.c) ====

// ==== end of tensor parallel ====

// ==== pipeline parallel (weft_pp_*, src/dist/pp.c) ====

// ==== end of pipeline parallel ====

// ==== sharded optimiser state (weft_zero_*, src/dist/zero.c) ====
#include "nn.h"
#include "optim.h"

// ZeRO stages 1 and 2 (DeepSpeed) over a data-parallel communicator (dp_comm
// of weft_parallel_create, or any weft_comm). Every rank keeps the whole
// model; the optimiser state is split. The trainable parameters of each
// dtype are laid end to end (module order) into one flat index space of N
// elements, and rank r owns elements weft_dist_chunk(N, DP, r): a contiguous
// 1/DP shard. The optimiser (any weft_optim kind) runs only over that shard:
// its parameters are views into the module's parameters (one 1-D piece per
// parameter the shard touches), so its state exists for the shard alone.
// A step (weft_zero_step, after weft_backward):
//   stage 1  the gradients are flattened and all-reduced (averaged, as DDP);
//   stage 2  they are reduce-scattered (averaged): a rank keeps its shard's only;
//   then     each rank updates its shard (weft_optim_step, in place in the
//            module's parameters) and the shards are all-gathered into every
//            replica, so all replicas are identical again.
// A parameter without a .grad counts as zero (as in DDP: every shard steps).
// After the step the parameters have no .grad (set_to_none).
// Tensors live on the parameters' one device (CPU or accelerator); the
// collectives take the path weft/dist.h chooses for them.
//
//     weft_zero *z = weft_zero_create(p->dp_comm, net, &opts, 2);
//     for (...) { loss = ...; weft_backward(loss, NULL, NULL);
//                 weft_zero_step(z); }           // or, with clipping:
//     //          weft_zero_reduce_grads(z); weft_zero_clip_grad_norm(z, 1.0); weft_zero_update(z);
typedef struct weft_zero weft_zero;

// Collective over dp: broadcasts every parameter and buffer of m from rank 0
// (as weft_ddp_create), splits the trainable parameters (contiguous f32/f64,
// all on one device) into shards and builds this rank's optimiser with
// options o. stage is 1 or 2. m is borrowed and must outlive the handle.
// Every argument is checked before the first collective.
weft_zero *weft_zero_create(weft_comm *dp, weft_module *m, const weft_optim_opts *o, int stage);
void weft_zero_free(weft_zero *z);
// weft_zero_reduce_grads + weft_zero_update. The gradients are communicated
// after backward, one collective per dtype (not bucketed during backward as
// DDP's are), so after backward each rank holds its full local .grad in both
// stages; stage 2 saves on the averaged gradient held through the update.
// A rank whose reduce_grads fails after its collectives (a gradient of the
// wrong shape, dtype or device)
// still calls update's collectives, which then fail there without stepping:
// every rank's collectives match, none is left waiting.
weft_status weft_zero_step(weft_zero *z);
// Collective: flattens every parameter's .grad (accumulated over any number
// of backward passes; missing ones count as zero), averages it over dp
// (stage 1: all-reduce, stage 2: reduce-scatter), gives the shard's pieces
// their averaged gradient and drops the parameters' .grad.
weft_status weft_zero_reduce_grads(weft_zero *z);
// Collective, between reduce_grads and update: weft_clip_grad_norm over the
// whole model: the shards' sums of squares are all-reduced into the global
// norm, and every shard's gradient is scaled by max_norm / (norm + 1e-6)
// when that is below 1. Returns the norm before clipping, -1 on error.
double weft_zero_clip_grad_norm(weft_zero *z, double max_norm);
// Collective: one optimiser step over this rank's shard, then the shards are
// all-gathered into every replica's parameters.
weft_status weft_zero_update(weft_zero *z);
// Drops the parameters' .grad (and any reduced shard gradient not yet used).
void weft_zero_zero_grad(weft_zero *z);
int weft_zero_stage(const weft_zero *z);
// This rank's optimiser (borrowed; NULL on a rank whose shard is empty).
// Set its learning rate with weft_optim_set_lr; its state is this rank's
// shard of the optimiser state, named "<param>.<state>" as the unsharded
// optimiser's, shaped (count,): elements [off, off + count) of the flattened
// parameter (weft_zero_shard_of). Save it per rank and load it back with
// weft_optim_load_state into a run with the same layout.
weft_optim *weft_zero_optim(const weft_zero *z);
// This rank's elements [*off, *off + *count) of module parameter i
// (weft_module_param_at order, flattened); *count 0 when it owns none.
weft_status weft_zero_shard_of(const weft_zero *z, int i, int64_t *off, int64_t *count);

// Bytes this rank holds, and what one unsharded process (plain DDP and a
// weft_optim over the whole model) holds for the same model and optimiser.
// Between steps a rank holds its parameters and its optimiser state only;
// the gradient buffers exist inside weft_zero_step (reduce_grads to update).
typedef struct weft_zero_mem {
    int64_t param_bytes;  // the full parameters (every rank keeps a replica in stages 1 and 2)
    int64_t grad_bytes;   // the averaged gradient held through the update: all N (stage 1), the shard (stage 2)
    int64_t optim_bytes;  // the optimiser state: the shard's state tensors and a step counter per piece
    int64_t buffer_bytes; // further bytes inside a step: stage 2's flat buffer (N), which the gradients
                          // are reduce-scattered from and the parameters gathered into (stage 1 uses
                          // its gradient buffer for that)
    int64_t full_param_bytes, full_grad_bytes, full_optim_bytes; // the unsharded run's
} weft_zero_mem;
weft_status weft_zero_memory(const weft_zero *z, weft_zero_mem *out);

// Collective over dp: the whole optimiser state gathered on rank root, into
// full there: an unsharded weft_optim over the same module parameters (same
// names, same kind and options; NULL on other ranks). Its state tensors and
// step count are overwritten, so it can be saved as any checkpoint and
// loaded by a run without ZeRO (or with another DP size, through
// weft_zero_load_full_state).
weft_status weft_zero_gather_state(weft_zero *z, weft_optim *full, int root);
// Not collective: this rank's shard of an unsharded optimiser state.
// lookup(name, user) returns the full tensor "<param>.<state>" (the
// parameter's shape) or NULL when missing; this rank copies its elements.
// Checked before anything changes (as weft_optim_load_state). Set the step
// count with weft_optim_set_step_count(weft_zero_optim(z), ...).
weft_status weft_zero_load_full_state(weft_zero *z, weft_optim_lookup_fn lookup, void *user);

// ==== end of sharded optimiser state ====

#ifdef __cplusplus
}
#endif
#endif
