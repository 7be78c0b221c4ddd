// The training run `weft train` builds from a model file, for the graph-mode
// benchmarks (graph_train.c, graph_passes.c, graph_fusion.c): the network in
// training mode, its optimiser, and one synthetic batch of the file's shape.
#ifndef WEFT_BENCH_RUN_H
#define WEFT_BENCH_RUN_H

#include <stdio.h>
#include <stdlib.h>

#include "../src/train/train_impl.h"
#include "bench_model.h"

typedef struct bench_run {
    weft_model_cfg *cfg;
    weft_run run;
    weft_generator *gen;
    weft_tensor *x, *y;
} bench_run;

static inline void bench_run_close(bench_run *b) {
    weft_tensor_free(b->x);
    weft_tensor_free(b->y);
    weft_generator_free(b->gen);
    weft_run_free(&b->run);
    weft_model_cfg_free(b->cfg);
    *b = (bench_run){0};
}

// 0, or 1 after printing "<name>: <error>" (everything freed).
static inline int bench_run_open(bench_run *b, const char *name, const char *path) {
    *b = (bench_run){0};
    if (!(b->cfg = weft_model_cfg_load(path))) {
        fprintf(stderr, "%s: %s\n", name, weft_last_error());
        return 1;
    }
    b->run.cfg = b->cfg;
    b->run.total_steps = 100000;
    b->run.opts.device = getenv("WEFT_BENCH_DEVICE"); // e.g. cuda: parameters there (the batch stays on the host)
    if (weft_run_build(&b->run, true) != WEFT_OK || !(b->gen = weft_generator_create(7))) {
        fprintf(stderr, "%s: %s\n", name, weft_last_error());
        bench_run_close(b);
        return 1;
    }
    bench_model_batch(&b->cfg->net, b->gen, &b->x, &b->y);
    weft_module_set_training(b->run.net, true);
    return 0;
}

#endif
