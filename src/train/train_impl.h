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
} weft_run;

weft_status weft_run_load_data(weft_run *r);
weft_status weft_run_build(weft_run *r, bool with_optim);
void weft_run_free(weft_run *r);
weft_status weft_run_evaluate(weft_run *r, double *loss, double *acc);
// Checkpoints (checkpoint.c): model parameters and buffers ("model.*"),
// optimiser state ("optim.*"), and in the metadata the step, the epoch, the
// loader position and the dropout generator's state.
weft_status weft_run_save(weft_run *r);
weft_status weft_run_resume(weft_run *r);                    // from the latest in opts.ckpt_dir, if any
weft_status weft_run_load_weights(weft_run *r, const char *path); // model only (eval, sample)

#endif
