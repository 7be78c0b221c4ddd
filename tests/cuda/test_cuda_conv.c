// conv2d and 2-D pooling on CUDA against the CPU, forward and backward
// (conv2d_backward_input / _weight / _bias, max_pool2d_backward and
// avg_pool2d_backward run on CUDA through the gradient comparisons):
// stride, padding, dilation, groups, 1x1 convs, the NHWC layout, strided
// inputs, odd sizes, a batch split into several column-buffer chunks;
// pools with and without padding, overlapping windows and ties.
#include <stdlib.h>

#include "cuda_test.h"
#include "ops/op.h"

// values in [-1, 1); ties: rounded to the five levels -1, -0.5, 0, 0.5, 1 (pooling windows with equal maxima)
static weft_tensor *rand_q(int nd, const int64_t *sz, weft_dtype dt, uint64_t seed, bool ties) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= sz[d];
    double *v = malloc(sizeof(double) * (size_t)n);
    wt_vals(v, n, -1, 1, seed);
    if (ties)
        for (int64_t i = 0; i < n; i++) v[i] = round(v[i] * 2) / 2;
    weft_tensor *t64 = weft_tensor_from_data(v, nd, sz, WEFT_F64), *t = weft_cast(t64, dt);
    weft_tensor_free(t64);
    free(v);
    return t;
}
static weft_tensor *rand_t(int nd, const int64_t *sz, weft_dtype dt, uint64_t seed) {
    return rand_q(nd, sz, dt, seed, false);
}

typedef struct conv_ctx {
    weft_conv2d_params p;
    bool bias;
    bool permuted; // x stored (N,H,W,C) and read through a permute to (N,C,H,W): strided
    bool nhwc;     // the NHWC layout (attrs i[7] = 1): x (N,H,W,C) -> y (N,OH,OW,O)
} conv_ctx;

static weft_tensor *f_conv(weft_tensor *const *in, void *vc) {
    conv_ctx *c = vc;
    if (c->nhwc) { // the layout the graph pass sets; no public constructor
        weft_attrs at = {.i = {c->p.stride[0] ? c->p.stride[0] : 1, c->p.stride[1] ? c->p.stride[1] : 1,
                               c->p.padding[0], c->p.padding[1], c->p.dilation[0] ? c->p.dilation[0] : 1,
                               c->p.dilation[1] ? c->p.dilation[1] : 1, 1, 1}};
        return weft_op_apply1(weft_op_find("conv2d"), c->bias ? 3 : 2, in, &at);
    }
    weft_tensor *x = c->permuted ? weft_permute(in[0], (const int[]){0, 3, 1, 2}) : weft_tensor_ref(in[0]);
    weft_tensor *y = weft_conv2d(x, in[1], c->bias ? in[2] : NULL, &c->p);
    weft_tensor_free(x);
    return y;
}

static void conv_case(const char *what, weft_dtype dt, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                      int64_t KH, int64_t KW, conv_ctx c, bool backward) {
    int G = c.p.groups ? c.p.groups : 1;
    bool nhwc_store = c.permuted || c.nhwc;
    int64_t xs[4] = {N, C, H, W}, xs_nhwc[4] = {N, H, W, C};
    weft_tensor *x = rand_t(4, nhwc_store ? xs_nhwc : xs, dt, 1);
    weft_tensor *w = rand_t(4, (const int64_t[]){O, C / G, KH, KW}, dt, 2);
    weft_tensor *b = rand_t(1, (const int64_t[]){O}, dt, 3);
    double tol = dt == WEFT_F32 ? 1e-4 : 1e-11;
    char buf[96];
    snprintf(buf, sizeof buf, "%s %s", what, weft_dtype_name(dt));
    wt_cuda_compare(buf, f_conv, &c, c.bias ? 3 : 2, (weft_tensor *[]){x, w, b}, tol, backward);
    weft_tensor_free(x);
    weft_tensor_free(w);
    weft_tensor_free(b);
}

static void test_conv2d(void) {
    static const weft_dtype dts[] = {WEFT_F32, WEFT_F64};
    for (int k = 0; k < 2; k++) {
        weft_dtype dt = dts[k];
        conv_case("plain 3x3", dt, 3, 4, 9, 11, 5, 3, 3, (conv_ctx){{{0}}, true}, true);
        conv_case("stride 2 pad 1 dil 2", dt, 3, 4, 13, 11, 6, 3, 3,
                  (conv_ctx){{{2, 2}, {1, 1}, {2, 2}, 1}, true}, true);
        conv_case("asymmetric stride/pad/dil, 3x2 kernel", dt, 3, 3, 10, 7, 4, 3, 2,
                  (conv_ctx){{{1, 2}, {2, 0}, {1, 3}, 1}, false}, true);
        conv_case("groups 2", dt, 3, 6, 8, 9, 4, 3, 3, (conv_ctx){{{2, 1}, {1, 1}, {1, 1}, 2}, true}, true);
        conv_case("depthwise (groups = C)", dt, 2, 5, 7, 7, 10, 3, 3, (conv_ctx){{{1, 1}, {1, 1}, {1, 1}, 5}, true}, true);
        conv_case("1x1 direct", dt, 3, 7, 5, 6, 4, 1, 1, (conv_ctx){{{0}}, true}, true);
        conv_case("1x1 direct over a strided input", dt, 3, 7, 5, 6, 4, 1, 1, (conv_ctx){{{0}}, true, true}, true);
        conv_case("1x1 stride 2", dt, 3, 7, 5, 6, 4, 1, 1, (conv_ctx){{{2, 2}}, false}, true);
        conv_case("strided input, pad 1", dt, 3, 4, 9, 8, 5, 3, 3, (conv_ctx){{{1, 1}, {1, 1}}, true, true}, true);
        conv_case("kernel as big as the padded input", dt, 1, 2, 3, 4, 3, 5, 6, (conv_ctx){{{1, 1}, {1, 1}}, true}, true);
        conv_case("1x1 image", dt, 3, 3, 1, 1, 2, 1, 1, (conv_ctx){{{0}}, true}, true);
        conv_case("NHWC", dt, 3, 4, 9, 7, 5, 3, 3, (conv_ctx){{{2, 1}, {1, 1}, {1, 2}, 1}, true, false, true}, true);
        conv_case("NHWC 1x1", dt, 2, 6, 5, 5, 3, 1, 1, (conv_ctx){{{0}}, false, false, true}, true);
        conv_case("more than a block", dt, 3, 8, 33, 35, 16, 3, 3, (conv_ctx){{{1, 1}, {1, 1}}, true}, true);
    }
    // 2.4M column entries per image: a batch of 16 runs in two chunks (the
    // weight gradient accumulates across them)
    conv_case("chunked batch", WEFT_F32, 16, 16, 128, 128, 8, 3, 3, (conv_ctx){{{1, 1}, {1, 1}}, true}, true);
}

typedef struct pool_ctx {
    weft_pool2d_params p;
    bool avg;
    bool permuted;
} pool_ctx;

static weft_tensor *f_pool(weft_tensor *const *in, void *vc) {
    pool_ctx *c = vc;
    weft_tensor *x = c->permuted ? weft_permute(in[0], (const int[]){0, 3, 1, 2}) : weft_tensor_ref(in[0]);
    weft_tensor *y = c->avg ? weft_avg_pool2d(x, &c->p) : weft_max_pool2d(x, &c->p);
    weft_tensor_free(x);
    return y;
}

static void pool_case(const char *what, weft_dtype dt, int64_t N, int64_t C, int64_t H, int64_t W, pool_ctx c,
                      bool ties) {
    int64_t sz[4] = {N, C, H, W}, szp[4] = {N, H, W, C};
    weft_tensor *x = rand_q(4, c.permuted ? szp : sz, dt, 7, ties);
    char buf[96];
    snprintf(buf, sizeof buf, "%s %s %s%s", c.avg ? "avg_pool2d" : "max_pool2d", what, weft_dtype_name(dt),
             ties ? " ties" : "");
    wt_cuda_compare(buf, f_pool, &c, 1, &x, dt == WEFT_F32 ? 1e-5 : 1e-12, true);
    weft_tensor_free(x);
}

static void test_pools(void) {
    static const weft_dtype dts[] = {WEFT_F32, WEFT_F64};
    for (int k = 0; k < 2; k++)
        for (int avg = 0; avg < 2; avg++)
            for (int ties = 0; ties < 2; ties++) {
                weft_dtype dt = dts[k];
                pool_case("2x2", dt, 3, 4, 8, 10, (pool_ctx){{{2, 2}}, avg}, ties);
                pool_case("2x2 odd sizes", dt, 3, 4, 9, 11, (pool_ctx){{{2, 2}}, avg}, ties);
                pool_case("2x2 strided input", dt, 3, 4, 9, 11, (pool_ctx){{{2, 2}}, avg, true}, ties);
                pool_case("3x3 stride 2 pad 1 (overlapping)", dt, 3, 5, 9, 12, (pool_ctx){{{3, 3}, {2, 2}, {1, 1}}, avg},
                          ties);
                pool_case("3x3 stride 1 pad 1, count_include_pad", dt, 2, 3, 7, 8,
                          (pool_ctx){{{3, 3}, {1, 1}, {1, 1}, true}, avg}, ties);
                pool_case("3x2 stride (1,2) pad (1,0)", dt, 2, 3, 7, 9, (pool_ctx){{{3, 2}, {1, 2}, {1, 0}}, avg}, ties);
                pool_case("5x4 stride 3 pad 2 strided input", dt, 2, 3, 11, 10,
                          (pool_ctx){{{5, 4}, {3, 3}, {2, 2}, true}, avg, true}, ties);
                pool_case("window = input", dt, 2, 3, 4, 5, (pool_ctx){{{4, 5}}, avg}, ties);
                pool_case("more than a block", dt, 4, 16, 33, 35, (pool_ctx){{{3, 3}, {2, 2}, {1, 1}}, avg}, ties);
            }
}

int main(void) {
    WT_CUDA_OR_SKIP();
    RUN(test_conv2d);
    RUN(test_pools);
    return wt_summary();
}
