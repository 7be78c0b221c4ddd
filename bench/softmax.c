// softmax_4096x1024: forward + backward of softmax over the last dim of a
// (4096,1024) f32 tensor that requires grad, with a random upstream gradient;
// ms per iteration, best of several reps. Twin: bench/peers/softmax.py.
#include <weft.h>

#include "bench_util.h"

int main(int argc, char **argv) {
    if (bench_selected(argc, argv, "softmax_4096x1024")) {
        weft_generator *gen = weft_generator_create(1);
        weft_tensor *x = weft_tensor_randn(WEFT_DIMS(4096, 1024), WEFT_F32, gen);
        weft_tensor *g = weft_tensor_rand(WEFT_DIMS(4096, 1024), WEFT_F32, gen);
        weft_tensor_set_requires_grad(x, true);
        weft_tensor *y0 = weft_softmax(x, -1);
        if (!y0 || weft_backward(y0, g, NULL) != WEFT_OK || !weft_tensor_grad(x)) {
            fprintf(stderr, "softmax bench: %s\n", weft_last_error());
            return 1;
        }
        weft_tensor_zero_grad(x);
        weft_tensor_free(y0);
        double t;
        BENCH_BEST(t, 7, 5, 0.15, {
            weft_tensor *y = weft_softmax(x, -1);
            weft_backward(y, g, NULL);
            weft_tensor_zero_grad(x);
            weft_tensor_free(y);
        });
        bench_report("softmax_4096x1024", t * 1e3, "ms", 0);
        weft_tensor_free(x);
        weft_tensor_free(g);
        weft_generator_free(gen);
    }
    return 0;
}
