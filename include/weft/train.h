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
} weft_train_result;

// Trains cfg as the model file says (overridden by opts). Errors (missing
// data, NaN/Inf loss, corrupt checkpoint, ...) come back as a status with a
// one-line message; a NaN loss names the step and writes no checkpoint after it.
weft_status weft_train(const weft_model_cfg *cfg, const weft_train_opts *opts, weft_train_result *out);

// Loads a checkpoint written by weft_train and evaluates it on the test or
// validation split (fills test_* or val_loss).
weft_status weft_evaluate(const weft_model_cfg *cfg, const char *ckpt, const weft_train_opts *opts,
                          weft_train_result *out);

// Language models: continue `prompt` by n_tokens bytes sampled at `temperature`
// (0: greedy), written to out.
weft_status weft_sample(const weft_model_cfg *cfg, const char *ckpt, const char *prompt, int64_t n_tokens,
                        double temperature, uint64_t seed, FILE *out);

// The "final: key=value ..." line for a result.
void weft_train_print_final(FILE *f, const weft_train_result *r);

#ifdef __cplusplus
}
#endif
#endif
