// linear and linear_gelu on CUDA against the CPU, values and every input's
// gradient: f32, bf16 and f16 with a bias take cuBLASLt's bias epilogue; f64,
// no bias and WEFT_CUDA_LT=0 take cuBLAS plus the bias/GELU kernel; both are
// covered, with 2-D, 3-D and 1-D x, x rows at a stride and a transposed-view
// weight. Half results (f32 sums rounded once; the fallback rounds h twice)
// agree with the CPU's (widened f32, rounded once) within a few units of the
// last bf16 place: tolerance 2e-2.
#include "cuda_test.h"

typedef struct lcase {
    int nx;
    int64_t x[3];
    int64_t n;
    bool bias, gelu;
    int mode; // 0: as given; 1: x every other row of a taller tensor; 2: weight a transposed view
} lcase;

static weft_tensor *run(weft_tensor *const *in, void *ctx) {
    const lcase *c = ctx;
    weft_tensor *x = c->mode == 1 ? weft_slice(in[0], c->nx - 2, 0, weft_tensor_sizes(in[0])[c->nx - 2], 2)
                                  : weft_tensor_ref(in[0]);
    weft_tensor *w = c->mode == 2 ? weft_transpose(in[1], 0, 1) : weft_tensor_ref(in[1]);
    weft_tensor *b = c->bias ? in[2] : NULL;
    weft_tensor *y = c->gelu ? weft_linear_gelu(x, w, b) : weft_linear(x, w, b);
    weft_tensor_free(x);
    weft_tensor_free(w);
    return y;
}

static void test_linear(void) {
    const lcase base[] = {
        {2, {33, 17}, 65, true, false, 0},   {3, {4, 33, 17}, 65, true, false, 0}, {1, {17}, 9, true, false, 0},
        {3, {2, 8, 64}, 256, false, false, 0}, {3, {2, 16, 17}, 31, true, false, 1}, {2, {40, 24}, 48, true, false, 2},
    };
    for (int lt = 0; lt < 2; lt++) {
        setenv("WEFT_CUDA_LT", lt ? "1" : "0", 1);
        for (size_t i = 0; i < sizeof base / sizeof base[0]; i++)
            for (int g = 0; g < 2; g++)
                for (int f = 0; f < 4; f++) {
                    lcase c = base[i];
                    c.gelu = g;
                    static const weft_dtype dts[4] = {WEFT_F32, WEFT_F64, WEFT_BF16, WEFT_F16};
                    static const double tols[4] = {2e-5, 1e-12, 2e-2, 2e-2};
                    weft_dtype dt = dts[f];
                    int64_t K = c.x[c.nx - 1];
                    int64_t ws[2] = {c.mode == 2 ? K : c.n, c.mode == 2 ? c.n : K};
                    weft_tensor *x64 = wt_rand64(c.nx, c.x, -1, 1, 10 + i, false);
                    weft_tensor *w64 = wt_rand64(2, ws, -1, 1, 20 + i, false);
                    weft_tensor *b64 = wt_rand64(1, &c.n, -1, 1, 30 + i, false);
                    weft_tensor *in[3] = {weft_cast(x64, dt), weft_cast(w64, dt), weft_cast(b64, dt)};
                    char what[96];
                    snprintf(what, sizeof what, "linear%s case %zu %s lt=%d", g ? "_gelu" : "", i,
                             weft_dtype_name(dt), lt);
                    wt_cuda_compare(what, run, &c, c.bias ? 3 : 2, in, tols[f], true);
                    weft_tensor *ts[] = {x64, w64, b64, in[0], in[1], in[2]};
                    for (int k = 0; k < 6; k++) weft_tensor_free(ts[k]);
                }
    }
    unsetenv("WEFT_CUDA_LT");
}

int main(void) {
    WT_CUDA_OR_SKIP();
    RUN(test_linear);
    return wt_summary();
}
