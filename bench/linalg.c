// Linear-algebra benchmarks. sgemm_1024: weft_matmul of two (1024,1024) f32
// matrices in GFLOP/s; the fifth field is cblas_sgemm called directly on the
// same data in this binary (the ceiling weft should reach).
#include <cblas.h>
#include <weft.h>

#include "bench_util.h"

int main(int argc, char **argv) {
    if (bench_selected(argc, argv, "sgemm_1024")) {
        const int64_t n = 1024;
        weft_generator *g = weft_generator_create(1);
        weft_tensor *a = weft_tensor_rand(WEFT_DIMS(n, n), WEFT_F32, g), *b = weft_tensor_rand(WEFT_DIMS(n, n), WEFT_F32, g);
        weft_tensor *c = weft_tensor_empty(WEFT_DIMS(n, n), WEFT_F32);
        const float *pa = weft_tensor_data(a), *pb = weft_tensor_data(b);
        float *pc = weft_tensor_data(c);
        double flop = 2.0 * (double)n * (double)n * (double)n, tw = 1e30, tb = 1e30;
        weft_num_threads(); // sets OpenBLAS's thread count before either side runs
        for (int rep = 0; rep < 2; rep++) { // interleave so neither side gets a warmer machine
            double t1, t2;
            BENCH_BEST(t1, 3, 3, 0.2, {
                weft_tensor *r = weft_matmul(a, b);
                weft_tensor_free(r);
            });
            BENCH_BEST(t2, 3, 3, 0.2, cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n,
                                                  1.0f, pa, (int)n, pb, (int)n, 0.0f, pc, (int)n));
            if (t1 < tw) tw = t1;
            if (t2 < tb) tb = t2;
        }
        bench_report_peer("sgemm_1024", flop / tw * 1e-9, "GFLOP/s", 1, flop / tb * 1e-9);
        weft_tensor_free(a);
        weft_tensor_free(b);
        weft_tensor_free(c);
        weft_generator_free(g);
    }
    return 0;
}
