// conv2d benchmark: two conv layers on an FMNIST-sized batch, forward +
// backward per iteration (grads for both weights and biases; x needs none).
//   x (64,1,28,28) f32 -> conv 1->32 3x3 pad 1 (+bias) -> conv 32->64 3x3 pad 1 (+bias)
// backward from a fixed random output gradient. Twin: bench/peers/conv.py.
#include <weft.h>

#include "bench_util.h"

int main(int argc, char **argv) {
    if (!bench_selected(argc, argv, "conv2d_fmnist")) return 0;
    weft_generator *g = weft_generator_create(0);
    weft_tensor *x = weft_tensor_randn(WEFT_DIMS(64, 1, 28, 28), WEFT_F32, g);
    weft_tensor *w1 = weft_tensor_randn(WEFT_DIMS(32, 1, 3, 3), WEFT_F32, g);
    weft_tensor *b1 = weft_tensor_randn(WEFT_DIMS(32), WEFT_F32, g);
    weft_tensor *w2 = weft_tensor_randn(WEFT_DIMS(64, 32, 3, 3), WEFT_F32, g);
    weft_tensor *b2 = weft_tensor_randn(WEFT_DIMS(64), WEFT_F32, g);
    weft_tensor *gy = weft_tensor_randn(WEFT_DIMS(64, 64, 28, 28), WEFT_F32, g);
    weft_tensor *params[] = {w1, b1, w2, b2};
    for (int i = 0; i < 4; i++) weft_tensor_set_requires_grad(params[i], true);
    weft_conv2d_params p = {.padding = {1, 1}};
    int fail = 0;
#define STEP()                                                                   \
    do {                                                                         \
        for (int i_ = 0; i_ < 4; i_++) weft_tensor_zero_grad(params[i_]);        \
        weft_tensor *h = weft_conv2d(x, w1, b1, &p), *y = weft_conv2d(h, w2, b2, &p); \
        if (!y || weft_backward(y, gy, NULL) != WEFT_OK) fail = 1;               \
        weft_tensor_free(h);                                                     \
        weft_tensor_free(y);                                                     \
    } while (0)
    for (int i = 0; i < 3; i++) STEP();
    if (fail) {
        fprintf(stderr, "conv bench failed: %s\n", weft_last_error());
        return 1;
    }
    double s;
    BENCH_BEST(s, 5, 3, 0.3, STEP());
    bench_report("conv2d_fmnist", s * 1e3, "ms", 0);
    for (int i = 0; i < 4; i++) weft_tensor_free(params[i]);
    weft_tensor_free(x);
    weft_tensor_free(gy);
    weft_generator_free(g);
    return fail;
}
