// weft/model.h — model files: a plain-text network + training description.
//
// A model file is a `[net]` section (dataset, input, optimiser, schedule, ...)
// followed by one section per layer, applied in file order:
//
//     [net]
//     dataset = fmnist
//     batch = 128
//     optimizer = adam
//     lr = 1e-3
//
//     [flatten]
//     [linear]
//     out = 256
//     [relu]
//     [linear]
//     out = 10
//
// docs/model-files.md lists every section and key. Loading validates
// everything (unknown section or key, bad value, duplicate key, missing key,
// shapes that do not chain from one layer to the next) and fails with a message
// "FILE:LINE: ..." naming the key. After a successful load every field below is
// filled in: defaults applied and layer sizes inferred, so a consumer never has
// to look at the text again.
#ifndef WEFT_MODEL_H
#define WEFT_MODEL_H

#include <stdio.h>

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum weft_cfg_dataset {
    WEFT_CFG_FMNIST = 0, // Fashion-MNIST images (1,28,28) -> 10 classes
    WEFT_CFG_KJV,        // KJV text, byte-level tokens (vocabulary 256), next-byte prediction
} weft_cfg_dataset;

typedef enum weft_cfg_optimizer {
    WEFT_CFG_SGD = 0,
    WEFT_CFG_ADAM,
    WEFT_CFG_ADAMW,
    WEFT_CFG_ADAGRAD,
    WEFT_CFG_RMSPROP,
} weft_cfg_optimizer;

typedef enum weft_cfg_schedule {
    WEFT_CFG_CONSTANT = 0,
    WEFT_CFG_STEP,   // lr * gamma^floor(step / step_size)
    WEFT_CFG_COSINE, // min_lr + (lr - min_lr) * (1 + cos(pi * step / total)) / 2
} weft_cfg_schedule;

// Mixed precision of training steps (weft_autocast_set for the forward pass;
// f16 adds dynamic loss scaling, weft_grad_scaler). Parameters stay f32.
typedef enum weft_cfg_precision {
    WEFT_CFG_F32 = 0,
    WEFT_CFG_BF16,
    WEFT_CFG_F16,
} weft_cfg_precision;

// Pipeline schedule of a model-parallel run (docs/parallelism.md).
typedef enum weft_cfg_pp_schedule {
    WEFT_CFG_PP_1F1B = 0,     // PipeDream-Flush
    WEFT_CFG_PP_GPIPE,        // all forwards, then all backwards
    WEFT_CFG_PP_INTERLEAVED,  // Megatron's interleaved 1F1B, virtual_stages chunks per rank
} weft_cfg_pp_schedule;

typedef enum weft_cfg_loss {
    WEFT_CFG_CROSS_ENTROPY = 0,
    WEFT_CFG_HINGE, // multi-class hinge (PyTorch's multi_margin_loss, margin 1)
} weft_cfg_loss;

typedef enum weft_cfg_layer_type {
    WEFT_CFG_LINEAR = 0,
    WEFT_CFG_CONV2D,
    WEFT_CFG_MAXPOOL,
    WEFT_CFG_AVGPOOL,
    WEFT_CFG_FLATTEN,
    WEFT_CFG_DROPOUT,
    WEFT_CFG_BATCHNORM,
    WEFT_CFG_LAYERNORM,
    WEFT_CFG_EMBEDDING,
    WEFT_CFG_LSTM,
    WEFT_CFG_ATTENTION,   // multi-head causal self-attention
    WEFT_CFG_TRANSFORMER, // `blocks` pre-LayerNorm transformer blocks
    WEFT_CFG_RELU,
    WEFT_CFG_GELU,
    WEFT_CFG_TANH,
    WEFT_CFG_SIGMOID,
    WEFT_CFG_SILU,
    WEFT_CFG_GRU,
    WEFT_CFG_RNN, // Elman RNN, tanh or relu
    WEFT_CFG_NUM_LAYER_TYPES
} weft_cfg_layer_type;

// The vocabulary of the byte-level KJV dataset: every byte value is a token.
#define WEFT_CFG_BYTE_VOCAB 256
// Fashion-MNIST classes.
#define WEFT_CFG_FMNIST_CLASSES 10

// One layer. Shapes are per sample (no batch dimension): an image is (C,H,W),
// a token sequence (T), a sequence of vectors (T,C).
typedef struct weft_layer_cfg {
    weft_cfg_layer_type type;
    int line; // line of the [section] header in the file
    int in_ndim, out_ndim;
    int64_t in_shape[WEFT_MAX_DIMS], out_shape[WEFT_MAX_DIMS];
    union {
        struct { int64_t in, out; bool bias; } linear; // over the last dim
        struct {
            int64_t in, out; // channels
            int kernel[2], stride[2], pad[2], dilation[2], groups; // (h, w)
            bool bias;
        } conv2d;
        struct { int kernel[2], stride[2], pad[2]; bool count_include_pad; } pool; // maxpool, avgpool
        struct { double p; } dropout;
        struct { int64_t channels; double momentum, eps; } batchnorm;
        struct { int64_t dim; double eps; } layernorm; // over the last dim
        struct {
            int64_t vocab, dim;
            bool learned_position; // adds a learned (context, dim) position table
            int64_t context;       // = net.context
        } embedding;
        struct { int64_t in, hidden; int layers; bool relu; } rnn; // lstm, gru, rnn (relu: `nonlinearity = relu`)
        struct {
            int64_t dim, heads;
            int blocks;
            bool gelu_tanh; // transformer: `gelu = tanh`, the mlp's GELU in its tanh form (GPT-2's)
        } attn; // attention (blocks = 1) and transformer
        struct { bool tanh; } gelu; // `approximate = tanh` (PyTorch's nn.GELU(approximate='tanh'))
    };
    int stage; // `stage = K` (any layer): its pipeline stage; -1 (not given): placed by the split
} weft_layer_cfg;

typedef struct weft_net_cfg {
    char name[64];            // `name`, default: the file name without directory and extension
    weft_cfg_dataset dataset;
    int input_ndim;           // per-sample input shape: (1,28,28) for fmnist, (context) for kjv
    int64_t input[WEFT_MAX_DIMS];
    int64_t classes;          // size of the output: 10 for fmnist, 256 (vocabulary) for kjv
    int64_t vocab;            // 256 for kjv, 0 for fmnist
    int64_t context;          // tokens per sample (kjv), 0 for fmnist
    double val_fraction;      // kjv: share of the text held out for validation
    bool shuffle;
    int64_t batch, epochs, steps; // steps 0: run all epochs
    uint64_t seed;
    weft_cfg_loss loss;
    weft_cfg_optimizer optimizer;
    double lr, momentum, weight_decay, betas[2], eps, alpha; // alpha: RMSProp smoothing
    bool nesterov;
    weft_cfg_schedule schedule;
    int64_t warmup, step_size; // in optimiser steps
    double gamma, min_lr;
    double clip;               // max global gradient norm, 0 = off
    weft_cfg_precision precision; // matmul/conv precision of training steps (f32 = off)
    double loss_scale;            // f16: the loss scaler's initial scale (65536)
    int64_t eval_every, ckpt_every, log_every; // in steps, 0 = once per epoch
    // Model parallelism (a job of N ranks: data parallel N / (tp * pp)); docs/parallelism.md
    int tp, pp;                // tensor- and pipeline-parallel sizes (1: off)
    int microbatches;          // per global batch (pipeline; 0: pp, at least 1)
    weft_cfg_pp_schedule pp_schedule;
    int virtual_stages;        // interleaved: chunks per rank (0: 2)
    int zero;                  // sharded optimiser state over the data-parallel group: 0 (off), 1, 2
    bool recompute;            // pipeline stages keep only their input and recompute in backward
} weft_net_cfg;

typedef struct weft_model_cfg {
    char path[256];          // the file it came from (or the name given to _parse)
    weft_net_cfg net;
    int n_layers;
    weft_layer_cfg *layers;  // n_layers entries, in file order
} weft_model_cfg;

// Loads and validates a model file. NULL on failure, with weft_last_error()
// "PATH:LINE: message" (or "PATH: message" for a whole-file problem) and
// weft_last_status() WEFT_ERR_IO (cannot read) or WEFT_ERR_FORMAT.
weft_model_cfg *weft_model_cfg_load(const char *path);
// The same from text in memory (len bytes; NUL bytes are an error). name
// stands for the file in messages (NULL: "<string>").
weft_model_cfg *weft_model_cfg_parse(const char *text, size_t len, const char *name);
void weft_model_cfg_free(weft_model_cfg *cfg);

// Overrides one [net] key with the same validation as the file (for command
// line flags: "batch", "epochs", "steps", "lr", "seed", "ckpt_every", ...).
// Keys that change shapes (dataset, input, context) cannot be overridden.
// On error the message names the key and cfg is unchanged.
weft_status weft_model_cfg_set(weft_model_cfg *cfg, const char *key, const char *value);

// Writes cfg back as a model file with every key spelled out (defaults and
// inferred sizes included); loading that text gives the same cfg.
weft_status weft_model_cfg_write(const weft_model_cfg *cfg, FILE *f);

// Names as written in model files ("linear", "adamw", "cosine", ...).
const char *weft_cfg_layer_name(weft_cfg_layer_type t);
const char *weft_cfg_dataset_name(weft_cfg_dataset d);
const char *weft_cfg_optimizer_name(weft_cfg_optimizer o);
const char *weft_cfg_schedule_name(weft_cfg_schedule s);
const char *weft_cfg_loss_name(weft_cfg_loss l);

#ifdef __cplusplus
}
#endif
#endif
