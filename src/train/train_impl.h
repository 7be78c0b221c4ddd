// State of one training / evaluation run, shared by the files of src/train.
#ifndef WEFT_TRAIN_IMPL_H
#define WEFT_TRAIN_IMPL_H

#include <weft.h>

typedef struct weft_run {
    const weft_model_cfg *cfg;
    weft_train_opts opts;
    weft_module *net;
    int n_params;
    weft_tensor **params; // borrowed from net, [n_params]
    char **names;         // "model.<dotted name>", [n_params]
    weft_optim *optim;
    weft_lr_schedule sched;
    weft_generator *init_gen, *dropout_gen;
    // data: a classifier's splits, or a language model's token streams
    weft_dataset *train, *test;
    weft_loader *loader;
    weft_tensor *train_tokens, *val_tokens;
    int64_t step, epoch, total_steps, steps_per_epoch;
    double items_per_step; // samples or tokens
    weft_csv_writer *csv;
    weft_tb_writer *tb;
    double last_print;
    // distributed runs (dist_train.c); NULL: a single process
    struct weft_dist_run *dist;
    bool printer;          // rank 0 or a single process: prints and writes metrics
    bool collective_error; // the current error is known to every rank
    struct weft_graph_train *graph; // opts.graph: the step graphs (graph_train.c)
    weft_device device;             // opts.device parsed (weft_run_build)
    weft_grad_scaler *scaler;       // [net] precision = f16: dynamic loss scaling
    struct weft_mp_run *mp;         // [net] tp, pp or zero in a distributed run (mp_train.c); NULL: none
} weft_run;

// x on the run's device: a new reference (x itself on the CPU), NULL + error on failure.
weft_tensor *weft_run_to_device(const weft_run *r, weft_tensor *x);

// A model file's network, layer by layer from layer(cfg, i, user) in a
// sequential; a failed layer's error is prefixed with its file, line and
// section. weft_model_build and the tensor-parallel build (tp_model.c) use it.
typedef weft_module *(*weft_layer_builder)(const weft_model_cfg *cfg, int i, void *user);
weft_module *weft_model_build_with(const weft_model_cfg *cfg, weft_layer_builder layer, void *user);

weft_status weft_run_load_data(weft_run *r);
weft_status weft_run_build(weft_run *r, bool with_optim);
weft_optim_opts weft_run_optim_opts(const weft_net_cfg *n); // the model file's optimiser
weft_dtype weft_run_autocast(const weft_run *r);            // the forward pass's autocast dtype ([net] precision)
void weft_run_free(weft_run *r);
weft_status weft_run_evaluate(weft_run *r, double *loss, double *acc);
// Checkpoints (checkpoint.c): model parameters and buffers ("model.*"),
// optimiser state ("optim.*"), and in the metadata the step, the epoch, the
// loader position and the dropout generator's state.
weft_status weft_run_save(weft_run *r);
weft_status weft_run_resume(weft_run *r);                    // from the latest in opts.ckpt_dir, if any
weft_status weft_run_resume_from(weft_run *r, const char *path); // from this checkpoint file
weft_status weft_run_load_weights(weft_run *r, const char *path); // model only (eval, sample)
// The checkpoint metadata (step, epoch, loader position, dropout stream,
// model, optimiser kind; f16's loss scale): keys and values (at most
// WEFT_RUN_META_MAX); and applying them on resume, read through get.
#define WEFT_RUN_META_MAX 10
int weft_run_meta(weft_run *r, const char **keys, char (*vals)[32]);
typedef struct weft_meta_src {
    const char *(*get)(const void *src, const char *key); // NULL when absent
    const void *src;
} weft_meta_src;
weft_status weft_run_apply_meta(weft_run *r, const weft_meta_src *m, const char *what);
// The checkpoint's optimiser kind (theirs, may be NULL) must be the model file's.
weft_status weft_run_check_optimizer(const weft_run *r, const char *theirs, const char *what);

// Graph mode (graph_train.c): one step is one weft_graph_run of a traced
// forward + backward + optimiser update; the graph's variables share the
// module's parameters and the optimiser's state tensors.
weft_status weft_graph_train_check(const weft_run *r); // what graph mode cannot do yet
weft_status weft_graph_train_step(weft_run *r, weft_tensor *x, weft_tensor *y, double *loss_out);
void weft_graph_train_free(weft_run *r);
struct weft_graph *weft_graph_train_graph(const weft_run *r, int i); // step graph i (benchmarks), NULL if none

// Distributed runs (dist_train.c). weft_dist_run_init decides the mode
// (opts.dist; AUTO is DDP under mpirun with more than one rank) and sets
// r->dist, or leaves it NULL for a single process; every other hook is
// called only when r->dist is set.
weft_status weft_dist_run_init(weft_run *r);
weft_train_dist weft_dist_run_mode(const weft_run *r); // WEFT_TRAIN_DIST_NONE without r->dist
void weft_dist_run_loader(const weft_run *r, weft_loader_opts *lo);  // this rank's share of the data
weft_status weft_dist_run_attach(weft_run *r);   // after the model and optimiser exist
bool weft_dist_run_is_server(const weft_run *r); // a parameter server: serves instead of training
weft_status weft_dist_run_serve(weft_run *r);
weft_status weft_dist_run_check_loss(weft_run *r, double loss); // agreed across ranks
weft_status weft_dist_run_after_backward(weft_run *r, double compute_s); // straggling, gradient averaging
bool weft_dist_run_owns_step(const weft_run *r); // the optimiser step happens elsewhere (ps)
weft_status weft_dist_run_step(weft_run *r, double lr);
bool weft_dist_run_evaluates(const weft_run *r);
void weft_dist_run_after_step(weft_run *r);      // test hooks
uint64_t weft_dist_run_lm_seed(const weft_run *r); // language models: this replica's window stream
weft_status weft_dist_run_save(weft_run *r);     // every part, then the manifest
weft_status weft_dist_run_resume(weft_run *r);   // from the latest complete checkpoint
weft_status weft_dist_run_finish(weft_run *r, double samples, double train_s, weft_train_result *out);
void weft_dist_run_free(weft_run *r);

// Model parallelism (mp_train.c): [net] tp, pp, zero. weft_dist_run_init
// calls weft_mp_run_init when the model file asks for it (r->mp is set from
// then on, with the layout); the other hooks run only when r->mp is set.
bool weft_mp_requested(const weft_model_cfg *cfg);
weft_status weft_mp_run_init(weft_run *r, weft_comm *world); // layout and checks, before the data is read
const struct weft_parallel *weft_mp_layout(const weft_run *r);
weft_module *weft_mp_build(weft_run *r, bool **is_held); // the network; is_held[i]: this rank runs parameter i
weft_status weft_mp_attach(weft_run *r);                 // DDP over the dp group, or ZeRO
weft_status weft_mp_forward_backward(weft_run *r, weft_tensor *x, weft_tensor *y, double *loss_out);
weft_status weft_mp_after_backward(weft_run *r);         // gradients averaged over the dp group
// f16 (r->scaler): every gradient divided by the scale, *found_inf agreed over the group; then, for
// max_norm > 0, clipped by the norm over the whole model. Nothing to do without either.
weft_status weft_mp_unscale_clip(weft_run *r, double max_norm, bool *found_inf);
bool weft_mp_owns_step(const weft_run *r);               // ZeRO steps the optimiser
weft_status weft_mp_step(weft_run *r, double lr, bool skip); // skip: the collectives alone (f16 overflow)
weft_tensor *weft_mp_loss(const weft_run *r, weft_tensor *logits, weft_tensor *labels);
weft_status weft_mp_eval_batch(const weft_run *r, weft_tensor *x, weft_tensor *y, double *acc); // acc[3]
bool weft_mp_counts_samples(const weft_run *r);
void weft_mp_result(const weft_run *r, weft_train_result *out);
void weft_mp_run_free(weft_run *r);
int weft_mp_param_index(const weft_run *r, int k);          // r->params[k]'s index in the network
bool weft_mp_holds_buffer(const weft_run *r, const weft_tensor *b);
weft_status weft_mp_gather_optim(weft_run *r);  // ZeRO: the whole state into r->optim (dp rank 0)
weft_status weft_mp_after_resume(weft_run *r);  // ZeRO: shards from r->optim; the dropout stream
// Checkpoints across layouts (mp_ckpt.c, weft_shard_*): a model-parallel
// run's save and resume; weft_mp_resume also serves a single process
// (r->mp NULL) resuming from a model-parallel checkpoint.
weft_status weft_mp_save(weft_run *r);
weft_status weft_mp_resume(weft_run *r);
weft_status weft_mp_load_weights(weft_run *r, const char *manifest); // eval, sample: parameters and buffers whole

// Manifests of distributed checkpoints (dist_ckpt.c).
const char *weft_manifest_path(const char *dir, int64_t step, char *buf, size_t n);
weft_status weft_manifest_write(const char *dir, int64_t step, int ranks, const char *dist, int n_parts,
                                const char *const *parts);
weft_status weft_manifest_latest(const char *dir, int64_t *step); // -1: none complete
weft_status weft_manifest_keep_last(const char *dir, int k);     // every file of older steps goes
typedef struct weft_manifest {
    int64_t step;
    int ranks;
    char dist[64];
    int n_parts;
    char **parts; // file names in the checkpoint directory, each present
} weft_manifest;
// Reads a complete manifest (error: missing, malformed, or a part missing).
weft_status weft_manifest_read(const char *dir, int64_t step, weft_manifest *m);
void weft_manifest_clear(weft_manifest *m);

#endif
