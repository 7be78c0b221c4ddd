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

// ==== end of sharded optimiser state ====

#ifdef __cplusplus
}
#endif
#endif
