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
// Megatron-LM's intra-layer model parallelism over a TP group (p->tp_comm):
// weights split by rows or columns, joined by autograd operators. Every
// function here is collective over the group (all its ranks call it in the
// same order, with tensors of the same shape on the same kind of device).
// Tensors may live on any device: the collectives of weft/dist.h move them.
//
// The conjugate operators (each one's backward is the other of its pair):
//   copy    f: identity forward, all-reduce SUM of the gradient backward
//   reduce  g: all-reduce SUM forward, identity backward
//   gather  all-gather along dim (every rank's x, in rank order) forward, this
//           rank's slice of the gradient backward
//   scatter this rank's slice of dim (size divisible by the group) forward,
//           all-gather of the gradient backward
typedef struct weft_module weft_module;       // weft/nn.h
typedef struct weft_model_cfg weft_model_cfg; // weft/model.h
weft_tensor *weft_tp_copy(weft_comm *tp, weft_tensor *x);
weft_tensor *weft_tp_reduce(weft_comm *tp, weft_tensor *x);
weft_tensor *weft_tp_gather(weft_comm *tp, weft_tensor *x, int dim);
weft_tensor *weft_tp_scatter(weft_comm *tp, weft_tensor *x, int dim);
// Sequence parallelism (Korthikanti et al. 2022): where activations are
// split along the sequence instead of replicated, these replace f and g:
//   seq_gather          all-gather along dim forward, reduce-scatter (sum,
//                       then this rank's slice) of the gradient backward
//   seq_reduce_scatter  reduce-scatter along dim forward (size divisible by
//                       the group), all-gather of the gradient backward
weft_tensor *weft_tp_seq_gather(weft_comm *tp, weft_tensor *x, int dim);
weft_tensor *weft_tp_seq_reduce_scatter(weft_comm *tp, weft_tensor *x, int dim);

// Cross-entropy (mean over N) of logits split over the vocabulary: rank r
// holds columns [r*V/T, (r+1)*V/T) of the (N, V) logits as (N, V/T); targets
// (N) are global ids (i32/i64, the same on every rank). Only (N)-vectors are
// all-reduced (row max, sum of exponentials, target logit): the full logits
// are never gathered. The loss is the same on every rank.
weft_tensor *weft_tp_vocab_cross_entropy(weft_comm *tp, weft_tensor *logits, weft_tensor *targets);

// Layers. Each is made whole with weft's own layer and init (the same
// generator draws, in the same order) and then split, so a layer made with
// TP = T equals the weft_nn_* layer made from the same seed, split. Sizes
// that T does not divide are errors naming the setting. Parameters keep
// weft_nn_*'s names; replicated ones (layer norms, a row layer's bias) get
// the same gradient on every rank of the group, so they stay equal.
//   column: weight (out/T, in) = rows of weft's (out, in), bias (out/T);
//           x (..., in) -> (..., out/T), or (..., out) with gather_output
//   row:    weight (out, in/T) = columns, bias (out) added after the
//           reduce; x (..., in/T) if input_is_parallel, else (..., in)
//           (then scattered) -> (..., out)
weft_module *weft_tp_column_linear(weft_comm *tp, int64_t in, int64_t out, bool bias, bool gather_output,
                                   weft_generator *g);
weft_module *weft_tp_row_linear(weft_comm *tp, int64_t in, int64_t out, bool bias, bool input_is_parallel,
                                weft_generator *g);
// mlp: fc column-parallel (no gather), GELU, proj row-parallel: one
// all-reduce forward (after proj), one backward (before fc). As
// weft_nn_transformer_block's "mlp" (d_model -> 4 d_model -> d_model).
weft_module *weft_tp_mlp(weft_comm *tp, int64_t d_model, weft_generator *g);
// Causal self-attention, heads split over the group (T must divide n_heads):
// qkv column-parallel holding this rank's heads of q, k and v, proj
// row-parallel. Equals weft_nn_causal_self_attention.
weft_module *weft_tp_causal_self_attention(weft_comm *tp, int64_t d_model, int64_t n_heads,
                                           weft_generator *g);
// Pre-LayerNorm block: the two above, layer norms replicated. Equals
// weft_nn_transformer_block.
weft_module *weft_tp_transformer_block(weft_comm *tp, int64_t d_model, int64_t n_heads, weft_generator *g);
// Embedding with the vocabulary split: rank r holds rows [r*num/T, ...) of
// weft_nn_embedding's weight; tokens outside them give zeros, then the rows
// are all-reduced. Indices outside [0, num) give zero rows (not an error).
weft_module *weft_tp_vocab_embedding(weft_comm *tp, int64_t num, int64_t dim, weft_generator *g);

// How parameter i of a model built from these layers is split: *dim is the
// split dim of the whole tensor (-1: replicated, the same on every rank) and
// the whole dim is `groups` equal blocks, each split over the group (1 for a
// plain split; 3 for attention's qkv, whose q, k and v blocks are each split
// by heads). Rank r's shard is its piece of every block, in block order.
weft_status weft_tp_param_split(const weft_module *m, int i, int *dim, int *groups);
// Rank's shard of a whole tensor (a new contiguous tensor without history).
weft_tensor *weft_tp_shard(weft_comm *tp, weft_tensor *whole, int dim, int groups);
// The whole tensor of parameter i (its shards gathered; a copy of a
// replicated one), the same on every rank: for checkpoints and comparisons.
weft_tensor *weft_tp_param_gather(weft_comm *tp, const weft_module *m, int i);

// A model file's network with tensor parallelism (what weft_model_build
// makes, same seed, same parameters once gathered): embedding ->
// vocab-parallel (learned positions replicated), transformer / attention ->
// the blocks above, a linear followed (through activations) by another
// linear -> column then row, the last linear of a cross-entropy model ->
// column-parallel with its logits left split (N, ..., classes/T), any other
// linear -> column with gather_output (whole where T does not divide its
// outputs); layer norms, activations, flatten and
// dropout replicated. Other layers (conv, pools, batch norm, LSTM) are an
// error naming the layer.
//
// opts (NULL: defaults) sequence_parallel: the activations outside the split
// layers (embedding output, layer norms, residuals) are split along the
// tokens as well (Korthikanti et al. 2022), so a rank holds about 1/T of all
// activations; the sequence length must then be divisible by T. Only for
// token models: an embedding first, a linear last, transformer, attention
// and layernorm layers between.
typedef struct weft_tp_opts {
    bool sequence_parallel;
} weft_tp_opts;
weft_module *weft_tp_model_build(weft_comm *tp, const weft_model_cfg *cfg, weft_generator *init_gen,
                                 weft_generator *dropout_gen, const weft_tp_opts *opts);
// The model's loss (as weft_model_loss): vocab-parallel cross-entropy when
// the logits' last dim is classes/T, else weft_model_loss.
weft_tensor *weft_tp_model_loss(weft_comm *tp, const weft_model_cfg *cfg, weft_tensor *logits,
                                weft_tensor *labels);

// ==== end of tensor parallel ====

// ==== pipeline parallel (weft_pp_*, src/dist/pp.c) ====

// ==== end of pipeline parallel ====

// ==== sharded optimiser state (weft_zero_*, src/dist/zero.c) ====

// ==== end of sharded optimiser state ====

#ifdef __cplusplus
}
#endif
#endif
