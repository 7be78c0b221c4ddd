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
// Inter-layer model parallelism: a weft_nn_sequential is cut into P stages
// (one per rank of a pipeline communicator), each global batch into M
// micro-batches, and a schedule decides the order in which every rank runs
// the forward (F) and backward (B) of its micro-batches. Activations go
// forward and their gradients back over point-to-point messages that are
// themselves autograd ops, so a stage's backward is an ordinary
// weft_backward. Sends never block (they complete in the background); only
// receives wait, so any schedule in which each rank's receives come after
// the matching sends of the ranks it depends on is deadlock-free. A receive
// that never comes fails after the communicator's timeout.

// Autograd-aware point to point. weft_pp_send posts x (any device; copied to
// the host while in flight) to rank dst of c with this tag and returns a
// one-element f64 token: weft_backward(token, NULL, NULL) receives the
// gradient of x from dst (same tag, the other direction) and backpropagates
// it through x's graph. When x does not require grad the token does not
// either, and the receiver must not ask for a gradient. weft_pp_recv
// receives a tensor of (ndim, sizes, dt) on dev from src; with
// requires_grad its backward sends the gradient back to src (same tag).
// dst/src may be this rank itself (delivered through a local mailbox). c
// NULL means a job of one process. Tags are 0 .. 2^28.
weft_tensor *weft_pp_send(weft_comm *c, weft_tensor *x, int dst, int tag);
weft_tensor *weft_pp_recv(weft_comm *c, int ndim, const int64_t *sizes, weft_dtype dt, weft_device dev, int src,
                          int tag, bool requires_grad);
// Waits until every send this process posted on c (forward or from a
// backward) has been received, or the communicator's timeout.
weft_status weft_pp_wait_sends(weft_comm *c);

typedef enum {
    WEFT_PP_GPIPE,      // all M forwards, then all M backwards
    WEFT_PP_1F1B,       // PipeDream-Flush: P-1-rank warm-up forwards, then one forward / one backward
    WEFT_PP_INTERLEAVED // Megatron's interleaved 1F1B: V chunks per rank, chunk k on rank k % P
} weft_pp_schedule;

typedef enum {
    WEFT_PP_SPLIT_LAYERS, // the same number of layers per stage (the first ones get one more)
    WEFT_PP_SPLIT_PARAMS, // contiguous, minimising the largest stage's parameter count
    WEFT_PP_SPLIT_COST    // contiguous, minimising the largest stage's measured forward+backward time
} weft_pp_split;

typedef struct weft_pp_opts {
    weft_pp_schedule schedule;
    int microbatches;   // M >= 1 (0: 1); must divide the batch; interleaved: a multiple of P
    int virtual_stages; // V, interleaved only (0: 2); the model is cut into P * V chunks
    weft_pp_split split;
    // Manual placement (overrides split): chunk number of each layer,
    // non-decreasing, every chunk 0 .. P*V-1 used. With V = 1 a chunk is a
    // stage; interleaved, chunk k runs on rank k % P.
    const int *stage_of;
    weft_tensor *cost_sample; // SPLIT_COST: a micro-batch of inputs, the same on every rank
    bool recompute;           // keep only each chunk's input; rerun its forward in the backward
                              // (dropout would draw new masks in the rerun)
} weft_pp_opts;

typedef struct weft_pp weft_pp;
typedef struct weft_module weft_module; // weft/nn.h
// Collective over c (the pipeline group: layout->pp_comm, or NULL for one
// process): this rank's stage(s) of seq, whose layers are cut into P * V
// contiguous chunks. The layers are seq's children, a child that is itself
// a sequential counting as its own children (weft_model_build's stack of
// transformer blocks: one layer per block). seq stays the caller's (every
// rank may hold all of it; only this rank's chunks run and get gradients).
// Errors name the setting: P * V greater than the number of layers, a bad
// stage_of. opts NULL: GPipe, M = 1, split by layers.
weft_pp *weft_pp_create(weft_comm *c, weft_module *seq, const weft_pp_opts *opts);
void weft_pp_free(weft_pp *p);
// The layers (borrowed; NULL out of range), the chunk of layer i (-1 out
// of range) and whether this rank runs it; this rank's parameters (the
// layers' order, depth first): returns their number, fills params[0..] when
// params is not NULL.
// Layers m makes in a pipeline (not collective, no pipeline needed): a
// sequential's layers, nested ones flattened; 1 for any other module.
int weft_pp_count_layers(const weft_module *m);
int weft_pp_num_layers(const weft_pp *p);
weft_module *weft_pp_layer(const weft_pp *p, int i);
int weft_pp_chunk_of(const weft_pp *p, int layer);
bool weft_pp_holds(const weft_pp *p, int layer);
int weft_pp_params(const weft_pp *p, weft_tensor **params);

// The per-micro-batch loss: a one-element tensor (a mean over the
// micro-batch, so that the mean over micro-batches is the batch's mean).
typedef weft_tensor *(*weft_pp_loss_fn)(weft_tensor *out, weft_tensor *target, void *user);
// One global batch through the pipeline, forward and backward: x (batch on
// dim 0) is read on the rank holding chunk 0, y (targets, batch on dim 0) on
// the rank holding the last chunk; either may be NULL elsewhere. Each lives
// where its chunk's layers do; activations are received onto the device of
// their chunk's first parameter. The chunks pass one tensor each. Each
// micro-batch's loss is scaled by 1/M before its backward, so the gradients
// accumulated into this rank's parameters' .grad (added to what is there:
// zero them before) are those of the batch's mean loss. *loss_out (may be
// NULL) gets that mean loss on every rank. The caller then steps its own
// optimiser over weft_pp_params (and all-reduces over a data-parallel group
// first, if any). Collective over c.
weft_status weft_pp_step(weft_pp *p, weft_tensor *x, weft_tensor *y, weft_pp_loss_fn loss, void *user,
                         double *loss_out);

// Forward only (evaluation; nothing is recorded): the batch through the
// pipeline in M micro-batches. On the rank of the last chunk, fn gets each
// micro-batch's output and targets and adds what it measures into acc[0..n_acc)
// (n_acc <= 64); the sums over micro-batches are added to acc on every rank.
// x and y as for weft_pp_step, but M need not divide the batch (the
// micro-batches then differ by a row; the batch must hold at least M rows).
// Collective over the pipeline group.
typedef weft_status (*weft_pp_eval_fn)(weft_tensor *out, weft_tensor *target, void *user, double *acc);
weft_status weft_pp_forward(weft_pp *p, weft_tensor *x, weft_tensor *y, weft_pp_eval_fn fn, void *user, int n_acc,
                            double *acc);

// The last step on this rank: wall time, time spent computing (forwards and
// backwards, not waiting for messages), idle fraction 1 - busy/step, and the
// schedule's theoretical bubble fraction (weft_pp_bubble_theory).
typedef struct weft_pp_stats {
    double step_s, busy_s, idle_fraction, theory;
} weft_pp_stats;
weft_pp_stats weft_pp_last_stats(const weft_pp *p);
// Idle fraction of an ideal pipeline with equal stages: (p-1)/(m+p-1) for
// GPipe and 1F1B, (p-1)/(v*m+p-1) interleaved (Narayanan et al. 2021, the
// bubble (p-1)/v micro-batch times against m of work).
double weft_pp_bubble_theory(weft_pp_schedule s, int p, int m, int v);
// Contiguous split of n items with costs cost[0..n) into parts non-empty
// runs, minimising the largest run's total (deterministic: the same cut on
// every rank). part_of[i] gets item i's run. Errors when parts > n or parts < 1.
weft_status weft_pp_partition(int n, const double *cost, int parts, int *part_of);

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
// A tensor may be read in another view of the same values (the same element
// count, e.g. (3 n, m) and (3, n, m)): a piece stored whole is reshaped to
// the reader's view, and a reader asking for the whole tensor reads through
// a reshape of its own; other pieces in another view are an error.
weft_status weft_shard_read(const weft_shard_ckpt *k, const weft_shard *s);
// The stored pieces, one per (part, tensor): name, and the global shape
// (global: WEFT_MAX_DIMS entries; may be NULL). NULL when i is out of range.
int weft_shard_count(const weft_shard_ckpt *k);
const char *weft_shard_name_at(const weft_shard_ckpt *k, int i, int *ndim, int64_t *global);
void weft_shard_close(weft_shard_ckpt *k);

// ==== end of checkpoints across layouts ====

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
// Its halves, for a norm over more than the dp group (model parallelism:
// the caller sums over the model-parallel ranks too): the sum of squares of
// the shards' averaged gradients over the parameters i with count[i] (NULL:
// all), summed over dp (NaN when a rank failed); and every shard gradient
// scaled by coef. Collective / not collective respectively.
weft_status weft_zero_grad_sum_squares(weft_zero *z, const bool *count, double *sum);
weft_status weft_zero_grad_scale(weft_zero *z, double coef);
// Collective: one optimiser step over this rank's shard, then the shards are
// all-gathered into every replica's parameters.
weft_status weft_zero_update(weft_zero *z);
// Collective: weft_zero_update without the optimiser step (f16 loss scaling's
// skipped step, whose gradients overflowed): the step's collectives still run,
// as every rank of the group must.
weft_status weft_zero_skip_update(weft_zero *z);
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
