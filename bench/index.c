// Index ops: embedding (forward, forward+backward), index_select, gather,
// scatter_add, concat. Lower is better (us per call).
#include <weft.h>

#include "bench_util.h"

static weft_tensor *randint(int nd, const int64_t *sz, int64_t hi, uint64_t seed) {
    weft_generator *g = weft_generator_create(seed);
    weft_tensor *t = weft_tensor_randint(nd, sz, 0, hi, WEFT_I64, g);
    weft_generator_free(g);
    return t;
}

int main(int argc, char **argv) {
    double s;
    weft_tensor *w = weft_tensor_randn(WEFT_DIMS(32000, 512), WEFT_F32, NULL);
    weft_tensor *ix = randint(2, (int64_t[]){8, 512}, 32000, 1);
    if (bench_selected(argc, argv, "embedding_fwd")) {
        BENCH_BEST(s, 5, 5, 0.2, { weft_tensor_free(weft_embedding(w, ix)); });
        bench_report("embedding_fwd", s * 1e6, "us", 0);
    }
    if (bench_selected(argc, argv, "embedding_fwd_bwd")) {
        weft_tensor *wl = weft_tensor_randn(WEFT_DIMS(32000, 512), WEFT_F32, NULL);
        weft_tensor_set_requires_grad(wl, true);
        weft_tensor *g = weft_tensor_randn(WEFT_DIMS(8, 512, 512), WEFT_F32, NULL);
        BENCH_BEST(s, 5, 3, 0.3, {
            weft_tensor *y = weft_embedding(wl, ix);
            weft_backward(y, g, NULL);
            weft_tensor_free(y);
            weft_tensor_zero_grad(wl);
        });
        bench_report("embedding_fwd_bwd", s * 1e6, "us", 0);
        weft_tensor_free(wl);
        weft_tensor_free(g);
    }
    weft_tensor *x = weft_tensor_randn(WEFT_DIMS(256, 1024), WEFT_F32, NULL);
    weft_tensor *isel = randint(1, (int64_t[]){512}, 1024, 2);
    if (bench_selected(argc, argv, "index_select_dim1")) {
        BENCH_BEST(s, 5, 5, 0.2, { weft_tensor_free(weft_index_select(x, 1, isel)); });
        bench_report("index_select_dim1", s * 1e6, "us", 0);
    }
    weft_tensor *ig = randint(2, (int64_t[]){256, 1024}, 1024, 3);
    if (bench_selected(argc, argv, "gather_dim1")) {
        BENCH_BEST(s, 5, 5, 0.2, { weft_tensor_free(weft_gather(x, 1, ig)); });
        bench_report("gather_dim1", s * 1e6, "us", 0);
    }
    if (bench_selected(argc, argv, "scatter_add_dim1")) {
        BENCH_BEST(s, 5, 5, 0.2, { weft_tensor_free(weft_scatter_add(x, 1, ig, x)); });
        bench_report("scatter_add_dim1", s * 1e6, "us", 0);
    }
    if (bench_selected(argc, argv, "concat_dim1")) {
        weft_tensor *ts[3] = {x, x, x};
        BENCH_BEST(s, 5, 5, 0.2, { weft_tensor_free(weft_concat(3, ts, 1)); });
        bench_report("concat_dim1", s * 1e6, "us", 0);
    }
    weft_tensor *all[] = {w, ix, x, isel, ig};
    for (int i = 0; i < 5; i++) weft_tensor_free(all[i]);
    return 0;
}
