// Harness: checkpoint resume (weft_run_resume_from, src/train/checkpoint.c,
// and the optimiser state it loads, src/optim/optim.c). The bytes are a
// checkpoint for a small fixed model (below): parameters and buffers,
// Adam's state, the f16 loss scaler, the loader position and dropout stream
// in the metadata. Each input gets a freshly built run, as `weft train
// --resume` would have.
#include "fuzz.h"

#include "checkpoint_model.h"
#include "train/train_impl.h"

weft_status fuzz_one(const uint8_t *data, size_t size) {
    static weft_model_cfg *cfg;
    static weft_tensor *x, *y; // 8 samples for the loader
    if (!cfg) {
        cfg = weft_model_cfg_parse(k_fuzz_ckpt_model, strlen(k_fuzz_ckpt_model), "fuzz-checkpoint.cfg");
        x = weft_tensor_zeros(WEFT_DIMS(8, 1, 28, 28), WEFT_F32);
        y = weft_tensor_zeros(WEFT_DIMS(8), WEFT_I64);
        FUZZ_ASSERT(cfg && x && y, "cannot set up: %s", weft_last_error());
    }
    const char *path = fuzz_file(0, data, size);
    if (!path) return WEFT_ERR_IO;
    weft_run r = {.cfg = cfg};
    weft_loader_opts lo = weft_loader_default_opts();
    lo.batch_size = 4;
    lo.prefetch = 0; // no producer thread: one input, one thread
    weft_status st = weft_run_build(&r, true);
    FUZZ_ASSERT(st == WEFT_OK, "cannot build the run: %s", weft_last_error());
    r.loader = weft_loader_create(x, y, &lo);
    FUZZ_ASSERT(r.loader, "cannot make the loader: %s", weft_last_error());
    st = weft_run_resume_from(&r, path);
    weft_run_free(&r);
    return st;
}
