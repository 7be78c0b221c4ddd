// weft/train.h — build the network of a model file and train, evaluate or
// sample it: what `weft train`, `weft eval` and `weft sample` run.
#ifndef WEFT_TRAIN_H
#define WEFT_TRAIN_H

#include <stdio.h>

#include "model.h"
#include "nn.h"

#ifdef __cplusplus
extern "C" {
#endif

// The network of a model file: a sequential module "0", "1", ... mapping a
// batch of inputs to logits: (B,C,H,W) -> (B,classes) for images, (B,T) token
// ids -> (B,T,vocab) for language models. Dropout layers draw from `dropout_gen`
// (borrowed: it must outlive the module).
weft_module *weft_model_build(const weft_model_cfg *cfg, weft_generator *init_gen, weft_generator *dropout_gen);

// Loss of the model file's kind: mean cross-entropy, or the multi-class hinge
// loss (PyTorch's multi_margin_loss, margin 1). logits (N,C) or (B,T,C); labels (N) or (B,T).
weft_tensor *weft_model_loss(const weft_model_cfg *cfg, weft_tensor *logits, weft_tensor *labels);

// How a run is spread over the ranks of an MPI job (see docs/distributed.md).
typedef enum {
    WEFT_TRAIN_DIST_AUTO = 0, // data parallel when started by mpirun with more than one rank, else one process
    WEFT_TRAIN_DIST_NONE,     // one process (each rank of an MPI job would train alone)
    WEFT_TRAIN_DIST_DDP,      // data parallel: gradients all-reduced, the model file's batch is per rank
    WEFT_TRAIN_DIST_PS,       // parameter server: the last `servers` ranks hold the parameters
} weft_train_dist;

typedef enum { WEFT_TRAIN_BSP = 0, WEFT_TRAIN_ASP, WEFT_TRAIN_SSP } weft_train_consistency;

typedef struct weft_train_opts {
    const char *ckpt_dir;  // NULL: no checkpoints
    int64_t ckpt_every;    // steps; 0: the model file's ckpt_every (0 there: once per epoch)
    int keep_last;         // checkpoints kept (0: 3)
    bool resume;           // continue from the latest checkpoint in ckpt_dir
    const char *log_dir;   // NULL: no metrics files; else metrics.csv + TensorBoard events
    bool quiet;            // no progress output (the final line is the caller's)
    const char *data_dir;  // Fashion-MNIST directory (NULL: /usr/share/datasets/fashion-mnist)
    const char *text_path; // KJV text cache (NULL: ~/.cache/weft/kjv.txt)
    int64_t eval_batches;  // language models: validation batches per evaluation (0: 50)
    FILE *progress;        // where progress goes (NULL: stderr)
    bool graph;            // graph mode: each step is one run of a traced step graph (docs/graph.md)
    const char *device;    // "cpu" (NULL), "cuda", "cuda:N": where the network, its optimiser state
                           // and each batch live (data sets are read on the CPU; batches are copied)
    // distributed runs (ignored by a single process)
    weft_train_dist dist;
    int servers;           // ps: server ranks (0: 1)
    weft_train_consistency consistency; // ps
    int staleness;         // ps, SSP: the bound s
    int backup;            // ps: backup workers (late pushes of each step are dropped)
    double bucket_mb;      // ddp: gradient bucket size in MB (0: 25)
    int straggle_rank;     // this rank sleeps (straggle_factor - 1) x its compute time each step...
    double straggle_factor; // ...when > 1 (experiments)
} weft_train_opts;

typedef struct weft_train_result {
    bool language_model;
    int64_t steps;         // optimiser steps taken in total (including before a resume)
    int64_t epochs;        // epochs completed
    double seconds;        // wall time of this run
    double samples_per_s;  // classifiers: training samples per second of this run
    double tokens_per_s;   // language models: training tokens per second of this run
    double train_loss;     // mean loss over the last logging window
    double test_loss, test_acc; // classifiers: on the test split
    double val_loss;       // language models: on the validation split
    // distributed runs: throughput above counts the samples of every rank
    int ranks;             // 0: a single process
    weft_train_dist dist;
    weft_train_consistency consistency;
    int staleness, backup;
    int tp, pp, dp, zero;  // model-parallel runs ([net] tp, pp, zero): the layout; 0 otherwise
    bool printer;          // this rank reports (rank 0, or a single process); others print nothing
    bool collective_error; // a failure every rank knows of (e.g. a NaN loss on one rank stops them all)
} weft_train_result;

// Parses "bsp", "asp" or "ssp:S" (S >= 0).
weft_status weft_train_parse_consistency(const char *s, weft_train_consistency *c, int *staleness);

// Trains cfg as the model file says (overridden by opts). Errors (missing
// data, NaN/Inf loss, corrupt checkpoint, ...) come back as a status with a
// one-line message; a NaN loss names the step and writes no checkpoint after it.
weft_status weft_train(const weft_model_cfg *cfg, const weft_train_opts *opts, weft_train_result *out);

// Loads a checkpoint written by weft_train and evaluates it on the test or
// validation split (fills test_* or val_loss, seconds, and steps: the
// checkpoint's step, -1 when the file does not record one; the training
// fields stay NaN / 0).
weft_status weft_evaluate(const weft_model_cfg *cfg, const char *ckpt, const weft_train_opts *opts,
                          weft_train_result *out);
// weft_evaluate's "final: ..." line: test_acc / test_loss or val_loss, the
// checkpoint's step and the evaluation's seconds (no training fields).
void weft_eval_print_final(FILE *f, const weft_train_result *r);

// Language models: continue `prompt` by n_tokens bytes sampled at `temperature`
// (0: greedy), written to out.
weft_status weft_sample(const weft_model_cfg *cfg, const char *ckpt, const char *prompt, int64_t n_tokens,
                        double temperature, uint64_t seed, FILE *out);

// The model of a model file as an ONNX file (weft_onnx_save): its inference
// forward (dropout off) traced on a batch of `batch` inputs (0: the model
// file's batch), input "x" ((batch, input...) f32, or (batch, context) int64
// token ids for language models) and output "logits", the weights from ckpt
// (NULL: the model file's initial weights, drawn from its seed).
weft_status weft_export_onnx(const weft_model_cfg *cfg, const char *ckpt, int64_t batch, const char *path);

// The "final: key=value ..." line for a result.
void weft_train_print_final(FILE *f, const weft_train_result *r);

#ifdef __cplusplus
}
#endif
#endif
