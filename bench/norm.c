// layer_norm forward + backward on (4096,1024) f32: x, weight and bias
// require grad; backward with a fixed random gradient. Prints ms per iteration.
#include <weft.h>

#include "bench_util.h"

int main(int argc, char **argv) {
    if (!bench_selected(argc, argv, "layernorm_4096x1024")) return 0;
    const int64_t xs[2] = {4096, 1024}, ws[1] = {1024};
    weft_generator *g = weft_generator_create(0);
    weft_tensor *x = weft_tensor_randn(2, xs, WEFT_F32, g), *gy = weft_tensor_randn(2, xs, WEFT_F32, g);
    weft_tensor *w = weft_tensor_randn(1, ws, WEFT_F32, g), *b = weft_tensor_randn(1, ws, WEFT_F32, g);
    weft_tensor_set_requires_grad(x, true);
    weft_tensor_set_requires_grad(w, true);
    weft_tensor_set_requires_grad(b, true);
    double best;
    BENCH_BEST(best, 5, 10, 0.2, {
        weft_tensor_zero_grad(x);
        weft_tensor_zero_grad(w);
        weft_tensor_zero_grad(b);
        weft_tensor *y = weft_layer_norm(x, 1, w, b, 1e-5);
        if (!y || weft_backward(y, gy, NULL) != WEFT_OK) {
            fprintf(stderr, "layer_norm failed: %s\n", weft_last_error());
            return 1;
        }
        weft_tensor_free(y);
    });
    bench_report("layernorm_4096x1024", best * 1e3, "ms", 0);
    weft_tensor_free(x), weft_tensor_free(gy), weft_tensor_free(w), weft_tensor_free(b);
    weft_generator_free(g);
    return 0;
}
