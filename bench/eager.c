// Eager-mode overheads and elementwise bandwidth.
//   eager_add_1elem                 us per weft_add of two 1-element tensors (result freed)
//   eager_mul_grad_backward_1elem   us per (y = x * w; backward(y)) with x requiring grad
//   add_16M_fresh_output            GB/s of c = a + b on 16M f32, c allocated each call
#include <weft.h>

#include "bench_util.h"

int main(int argc, char **argv) {
    double s;
    if (bench_selected(argc, argv, "eager_add_1elem")) {
        weft_tensor *a = weft_tensor_ones(WEFT_DIMS(1), WEFT_F32), *b = weft_tensor_ones(WEFT_DIMS(1), WEFT_F32);
        BENCH_BEST(s, 5, 20000, 0.2, {
            weft_tensor *c = weft_add(a, b);
            weft_tensor_free(c);
        });
        bench_report("eager_add_1elem", s * 1e6, "us/op", 0);
        weft_tensor_free(a);
        weft_tensor_free(b);
    }
    if (bench_selected(argc, argv, "eager_mul_grad_backward_1elem")) {
        weft_tensor *x = weft_tensor_ones(WEFT_DIMS(1), WEFT_F32), *w = weft_tensor_full(WEFT_DIMS(1), WEFT_F32, 2);
        weft_tensor_set_requires_grad(x, true);
        BENCH_BEST(s, 5, 20000, 0.2, {
            weft_tensor *y = weft_mul(x, w);
            weft_backward(y, NULL, NULL);
            weft_tensor_free(y);
        });
        bench_report("eager_mul_grad_backward_1elem", s * 1e6, "us/op", 0);
        weft_tensor_free(x);
        weft_tensor_free(w);
    }
    if (bench_selected(argc, argv, "add_16M_fresh_output")) {
        int64_t n = 16 << 20;
        weft_tensor *a = weft_tensor_rand(1, &n, WEFT_F32, NULL), *b = weft_tensor_rand(1, &n, WEFT_F32, NULL);
        BENCH_BEST(s, 5, 10, 0.3, {
            weft_tensor *c = weft_add(a, b);
            weft_tensor_free(c);
        });
        bench_report("add_16M_fresh_output", 3.0 * 4.0 * (double)n / s / 1e9, "GB/s", 1);
        weft_tensor_free(a);
        weft_tensor_free(b);
    }
    return 0;
}
