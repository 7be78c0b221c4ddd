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

// ==== checkpoints across layouts (weft_shard_*, src/train/shard_ckpt.c) ====
// As PyTorch's distributed checkpoint: each rank writes the pieces it holds
// of each global tensor, with where they sit; any layout reads them back,
// each rank taking from whichever pieces overlap the piece it now holds. So a
// checkpoint written with TP=2 x PP=2 resumes on one process or on TP=4, and
// a one-process checkpoint (a plain ckpt-STEP.safetensors) on any layout.
//
//   DIR/ckpt-STEP.rR.safetensors   rank R's pieces; "weft.shards" metadata maps
//                                  each name to {"global": [...], "offset": [...]}
//   DIR/ckpt-STEP.manifest.json    written last by rank 0, once every part is on
//                                  disk (weft launch's kill -9 recovery resumes
//                                  from the newest complete manifest)

// This rank's piece of one global tensor.
typedef struct weft_shard {
    const char *name;   // the global tensor's name, as a one-process checkpoint names it
    weft_tensor *local; // this rank's piece (any device, contiguous or not); read writes into it
    int ndim;           // the global tensor's dims; 0: local is the whole tensor
    int64_t global[WEFT_MAX_DIMS]; // the global shape
    int64_t offset[WEFT_MAX_DIMS]; // where local starts in it (local's sizes give the extent)
    bool skip_write;    // a copy another rank writes (a data-parallel replica): save leaves it out
} weft_shard;

// Collective over c (every rank of the job): each rank writes its part (the
// shards without skip_write; metadata pairs go into rank 0's part), then rank
// 0 writes the manifest naming `layout` (free text, e.g. "tp=2 pp=2 dp=1")
// once every rank has succeeded. Every rank gets the same status.
weft_status weft_shard_save(weft_comm *c, const char *dir, int64_t step, const char *layout, int n,
                            const weft_shard *shards, int n_meta, const char *const *meta_keys,
                            const char *const *meta_values);

typedef struct weft_shard_ckpt weft_shard_ckpt;
// Opens checkpoint `step` of dir (-1: the newest complete one, manifest or
// plain file): reads every part (each rank reads the whole checkpoint into
// host memory). NULL with an error when there is none or it is malformed.
weft_shard_ckpt *weft_shard_open(const char *dir, int64_t step);
int64_t weft_shard_step(const weft_shard_ckpt *k);
const char *weft_shard_layout(const weft_shard_ckpt *k); // the manifest's layout ("" for a plain file)
const char *weft_shard_meta(const weft_shard_ckpt *k, const char *key); // rank 0's metadata; NULL if absent
// Fills s->local (converting dtype and moving to its device) from every piece
// overlapping it. Errors name the tensor: missing, a different global shape,
// or part of the local piece covered by no piece of the checkpoint.
weft_status weft_shard_read(const weft_shard_ckpt *k, const weft_shard *s);
void weft_shard_close(weft_shard_ckpt *k);

// ==== end of checkpoints across layouts ====

// ==== sharded optimiser state (weft_zero_*, src/dist/zero.c) ====

// ==== end of sharded optimiser state ====

#ifdef __cplusplus
}
#endif
#endif
