// conv2d through oneDNN (src/ops/cpu/conv_onednn.c) against the im2col path
// (src/ops/cpu/conv.c, itself checked against naive loops and finite
// differences in test_conv.c): the forward (NCHW and NHWC, with and without
// bias), the input gradient and the weight gradient over a grid of shapes
// (groups, depthwise, stride 2, padding, dilation 2, 1x1 kernels, batch 1 and
// 64, odd sizes), each op run once with WEFT_CONV forced to im2col and once
// forced to onednn; bf16 through oneDNN and widened im2col; the auto choice; the fallbacks (inside an OpenMP
// parallel region, f64); and a short CNN training run whose loss curve must
// match. Without oneDNN in the build, forcing it must give im2col's numbers
// bit for bit.
//
// Tolerance (f32): an output that sums n products of values uniform in
// [-1,1] (rms 1/3) has a typical size sqrt(n)/3; the two paths sum in
// different orders, so they may differ by a few ulp of the partial sums.
// wt_check_same's |a - b| <= tol (1 + |b|) with tol = 3e-5 sqrt(n) allows
// about 1e-4 of that typical size (the weight gradient of fmnist-cnn's conv1
// sums n = 50,176 products and differs by up to 4e-4 absolute, 5e-6 of its
// size); a wrong tap, stride or padding moves an output by about its size.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "ops/cpu/conv_onednn.h"
#include "ops/op.h"
#include "weft_test.h"

#define TOL 1e-4 // where the summed terms are few (autograd, auto: n <= 300)
static double tol_of(int64_t n) { return 3e-5 * sqrt((double)n); }

typedef struct shape {
    int64_t N, C, H, W, O, KH, KW;
    int64_t sh, sw, ph, pw, dh, dw, G;
    bool nhwc, bias;
} shape;

static const shape k_shapes[] = {
    // N   C   H   W   O KH KW  sh sw ph pw dh dw G  nhwc   bias
    {64, 1, 28, 28, 32, 5, 5, 1, 1, 2, 2, 1, 1, 1, false, true},  // fmnist-cnn conv1, batch 64
    {2, 32, 14, 14, 64, 5, 5, 1, 1, 2, 2, 1, 1, 1, false, true},  // fmnist-cnn conv2
    {3, 4, 11, 9, 6, 3, 3, 2, 2, 1, 1, 2, 2, 2, false, true},     // groups 2, stride 2, dilation 2, odd sizes
    {2, 6, 8, 11, 9, 2, 3, 1, 2, 0, 1, 1, 2, 3, false, false},    // groups 3, rectangular kernel, mixed stride
    {1, 8, 7, 5, 16, 1, 1, 1, 1, 0, 0, 1, 1, 1, false, true},     // 1x1, batch 1
    {2, 3, 9, 9, 5, 1, 1, 2, 2, 0, 0, 1, 1, 1, false, false},     // 1x1, stride 2
    {2, 4, 9, 7, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4, false, true},      // depthwise
    {1, 16, 10, 10, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, false, false}, // batch 1, blocked channels
    {5, 6, 10, 7, 8, 3, 3, 2, 1, 1, 1, 1, 1, 1, true, true},      // NHWC, stride (2,1)
    {1, 3, 13, 12, 4, 3, 2, 1, 1, 2, 1, 2, 2, 1, true, false},    // NHWC, dilation 2, batch 1
    {64, 1, 28, 28, 32, 5, 5, 1, 1, 2, 2, 1, 1, 1, true, true},   // NHWC fmnist conv1, batch 64
};

static int64_t olen(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

static weft_tensor *rand32(int nd, const int64_t *sizes, uint64_t seed) {
    weft_tensor *d = wt_rand64(nd, sizes, -1, 1, seed, false), *f = weft_cast(d, WEFT_F32);
    weft_tensor_free(d);
    return f;
}

static weft_attrs attrs_of(const shape *s) {
    return (weft_attrs){.i = {s->sh, s->sw, s->ph, s->pw, s->dh, s->dw, s->G, s->nhwc}};
}

// The three ops of one shape under one backend: out[0] y, out[1] dx, out[2] dw
// (the backward ops exist in NCHW only: an NHWC shape runs its forward only).
static void run_ops(const shape *s, weft_conv_backend b, weft_tensor *const in[5], weft_tensor *out[3]) {
    weft_cpu_conv_set_backend(b);
    weft_attrs at = attrs_of(s);
    weft_tensor *fin[] = {in[0], in[1], in[2]};
    out[0] = weft_op_apply1(weft_op_find("conv2d"), s->bias ? 3 : 2, fin, &at);
    out[1] = out[2] = NULL;
    if (s->nhwc) return;
    at.i[8] = s->H, at.i[9] = s->W;
    weft_tensor *bi[] = {in[3], in[1]};
    out[1] = weft_op_apply1(weft_op_find("conv2d_backward_input"), 2, bi, &at);
    at.i[8] = s->KH, at.i[9] = s->KW;
    weft_tensor *bw[] = {in[3], in[0]};
    out[2] = weft_op_apply1(weft_op_find("conv2d_backward_weight"), 2, bw, &at);
}

static void test_grid(void) {
    bool have = weft_cpu_conv_have_onednn();
    if (!have) printf("  (no oneDNN in this build: forced onednn must run im2col)\n");
    for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; i++) {
        const shape *s = &k_shapes[i];
        int64_t OH = olen(s->H, s->KH, s->sh, s->ph, s->dh), OW = olen(s->W, s->KW, s->sw, s->pw, s->dw);
        weft_tensor *in[5];
        in[0] = s->nhwc ? rand32(WEFT_DIMS(s->N, s->H, s->W, s->C), 10 * i + 1)
                        : rand32(WEFT_DIMS(s->N, s->C, s->H, s->W), 10 * i + 1);
        in[1] = rand32(WEFT_DIMS(s->O, s->C / s->G, s->KH, s->KW), 10 * i + 2);
        in[2] = rand32(WEFT_DIMS(s->O), 10 * i + 3);
        in[3] = rand32(WEFT_DIMS(s->N, s->O, OH, OW), 10 * i + 4);
        in[4] = NULL;
        weft_tensor *ref[3], *got[3];
        run_ops(s, WEFT_CONV_IM2COL, in, ref);
        int64_t runs = weft_cpu_conv_onednn_runs();
        run_ops(s, WEFT_CONV_ONEDNN, in, got);
        int n_ops = s->nhwc ? 1 : 3;
        // oneDNN computed every op (or, without it, none)
        CHECK(weft_cpu_conv_onednn_runs() - runs == (have ? n_ops : 0));
        static const char *const what[] = {"onednn y", "onednn dx", "onednn dw"};
        for (int k = 0; k < n_ops; k++) {
            CHECK(ref[k] && got[k]);
            if (!ref[k] || !got[k]) continue;
            char msg[64];
            snprintf(msg, sizeof msg, "%s (shape %zu)", what[k], i);
            // products summed per output: y Cg*KH*KW, dx at most Og*KH*KW, dw N*OH*OW
            int64_t n = k == 0 ? s->C / s->G * s->KH * s->KW : k == 1 ? s->O / s->G * s->KH * s->KW : s->N * OH * OW;
            wt_check_same(msg, got[k], ref[k], have ? tol_of(n) : 0);
        }
        for (int k = 0; k < 3; k++) weft_tensor_free(ref[k]), weft_tensor_free(got[k]);
        for (int k = 0; k < 4; k++) weft_tensor_free(in[k]);
    }
    weft_cpu_conv_set_backend(WEFT_CONV_AUTO);
}

// bf16 (the CPU's autocast dtype for conv2d): each op on bf16 operands,
// through oneDNN (its bf16 convolution, f32 accumulation) and through im2col
// (operands widened to f32), against the f32 im2col op on the same (rounded)
// values with its result rounded to bf16. im2col must match bit for bit;
// oneDNN sums in another order, so a result may round to the neighbouring
// bf16 value: one ulp is 2^-8 (0.4%) relative, tolerance 1e-2 (1 + |b|).
static weft_tensor *bf16_round_trip(weft_tensor *t, weft_dtype to) {
    weft_tensor *h = weft_cast(t, WEFT_BF16), *r = to == WEFT_BF16 ? weft_tensor_ref(h) : weft_cast(h, to);
    weft_tensor_free(h);
    return r;
}
static void test_bf16(void) {
    bool have = weft_cpu_conv_have_onednn_bf16(); // else oneDNN's bf16 attempt falls back to im2col
    static const int which[] = {0, 1, 2, 8};
    for (size_t j = 0; j < sizeof which / sizeof which[0]; j++) {
        const shape *s = &k_shapes[which[j]];
        int64_t OH = olen(s->H, s->KH, s->sh, s->ph, s->dh), OW = olen(s->W, s->KW, s->sw, s->pw, s->dw);
        weft_tensor *in32[5], *in16[5] = {0};
        in32[0] = s->nhwc ? rand32(WEFT_DIMS(s->N, s->H, s->W, s->C), 200 + j)
                          : rand32(WEFT_DIMS(s->N, s->C, s->H, s->W), 200 + j);
        in32[1] = rand32(WEFT_DIMS(s->O, s->C / s->G, s->KH, s->KW), 210 + j);
        in32[2] = rand32(WEFT_DIMS(s->O), 220 + j);
        in32[3] = rand32(WEFT_DIMS(s->N, s->O, OH, OW), 230 + j);
        in32[4] = NULL;
        for (int i = 0; i < 4; i++) { // the f32 operands hold bf16 values exactly
            weft_tensor *t = bf16_round_trip(in32[i], WEFT_F32);
            weft_tensor_free(in32[i]);
            in32[i] = t;
            in16[i] = weft_cast(in32[i], WEFT_BF16);
        }
        weft_tensor *ref[3], *got[3];
        run_ops(s, WEFT_CONV_IM2COL, in32, ref);
        for (int b = 0; b < 2; b++) {
            int64_t runs = weft_cpu_conv_onednn_runs();
            run_ops(s, b ? WEFT_CONV_ONEDNN : WEFT_CONV_IM2COL, in16, got);
            int n_ops = s->nhwc ? 1 : 3;
            CHECK(weft_cpu_conv_onednn_runs() - runs == (b && have ? n_ops : 0));
            static const char *const what[] = {"bf16 y", "bf16 dx", "bf16 dw"};
            for (int k = 0; k < n_ops; k++) {
                CHECK(got[k] && weft_tensor_dtype(got[k]) == WEFT_BF16);
                if (!got[k] || !ref[k]) continue;
                weft_tensor *g = weft_cast(got[k], WEFT_F32), *want = bf16_round_trip(ref[k], WEFT_F32);
                char msg[64];
                snprintf(msg, sizeof msg, "%s %s (shape %d)", b ? "onednn" : "im2col", what[k], which[j]);
                wt_check_same(msg, g, want, b && have ? 1e-2 : 0);
                weft_tensor_free(g), weft_tensor_free(want);
            }
            for (int k = 0; k < 3; k++) weft_tensor_free(got[k]);
        }
        for (int k = 0; k < 3; k++) weft_tensor_free(ref[k]);
        for (int i = 0; i < 4; i++) weft_tensor_free(in32[i]), weft_tensor_free(in16[i]);
    }
    weft_cpu_conv_set_backend(WEFT_CONV_AUTO);
}

// More shapes than the primitive cache holds (128): the least recently used
// primitives are evicted and re-created when they come back, with the same
// numbers.
static void test_cache_eviction(void) {
    int bad = 0;
    int64_t runs = weft_cpu_conv_onednn_runs();
    weft_attrs at = {.i = {1, 1, 1, 1, 1, 1, 1, 0}};
    for (int i = 0; i < 136; i++) { // 132 shapes, then the first 4 again (evicted by then)
        int64_t h = 3 + (i < 132 ? i : i - 132);
        weft_tensor *x = rand32(WEFT_DIMS(1, 2, h, 4), 300 + h), *w = rand32(WEFT_DIMS(3, 2, 3, 3), 301);
        weft_tensor *in[] = {x, w}, *y[2];
        for (int b = 0; b < 2; b++) {
            weft_cpu_conv_set_backend(b ? WEFT_CONV_ONEDNN : WEFT_CONV_IM2COL);
            y[b] = weft_op_apply1(weft_op_find("conv2d"), 2, in, &at);
        }
        const float *p = y[0] ? weft_tensor_data(y[0]) : NULL, *q = y[1] ? weft_tensor_data(y[1]) : NULL;
        for (int64_t k = 0; p && q && k < weft_tensor_numel(y[0]); k++) bad += fabs(p[k] - q[k]) > 1e-5 * (1 + fabs(p[k]));
        bad += !p || !q;
        weft_tensor_free(x), weft_tensor_free(w), weft_tensor_free(y[0]), weft_tensor_free(y[1]);
    }
    CHECK(bad == 0);
    CHECK(weft_cpu_conv_onednn_runs() - runs == (weft_cpu_conv_have_onednn() ? 136 : 0));
    weft_cpu_conv_set_backend(WEFT_CONV_AUTO);
}

// Autograd through conv2d (the bias gradient included) with oneDNN forced:
// the same gradients as im2col's.
static void test_autograd(void) {
    weft_conv2d_params p = {{2, 1}, {1, 1}, {1, 2}, 2};
    weft_tensor *x = rand32(WEFT_DIMS(4, 4, 9, 8), 71), *w = rand32(WEFT_DIMS(6, 2, 3, 3), 72);
    weft_tensor *b = rand32(WEFT_DIMS(6), 73);
    weft_tensor *gr[2][4];
    for (int k = 0; k < 2; k++) {
        weft_cpu_conv_set_backend(k ? WEFT_CONV_ONEDNN : WEFT_CONV_IM2COL);
        weft_tensor *in[] = {weft_tensor_clone(x), weft_tensor_clone(w), weft_tensor_clone(b)};
        for (int i = 0; i < 3; i++) weft_tensor_set_requires_grad(in[i], true);
        weft_tensor *y = weft_conv2d(in[0], in[1], in[2], &p);
        weft_tensor *gy = rand32(4, weft_tensor_sizes(y), 74);
        CHECK(weft_backward(y, gy, NULL) == WEFT_OK);
        gr[k][0] = weft_tensor_detach(y);
        for (int i = 0; i < 3; i++) gr[k][i + 1] = weft_tensor_clone(weft_tensor_grad(in[i]));
        weft_tensor_free(y), weft_tensor_free(gy);
        for (int i = 0; i < 3; i++) weft_tensor_free(in[i]);
    }
    static const char *const what[] = {"autograd y", "autograd dx", "autograd dw", "autograd db"};
    double tol = weft_cpu_conv_have_onednn() ? TOL : 0;
    for (int i = 0; i < 4; i++) {
        wt_check_same(what[i], gr[1][i], gr[0][i], tol);
        weft_tensor_free(gr[0][i]), weft_tensor_free(gr[1][i]);
    }
    weft_tensor_free(x), weft_tensor_free(w), weft_tensor_free(b);
    weft_cpu_conv_set_backend(WEFT_CONV_AUTO);
}

// Auto: whichever path the measurement keeps, the numbers are im2col's within
// the tolerance, on the first call (measured) and the next (cached).
static void test_auto(void) {
    double tol = tol_of(800); // shape 1: 32 channels x 25 taps
    const shape *s = &k_shapes[1];
    weft_tensor *x = rand32(WEFT_DIMS(s->N, s->C, s->H, s->W), 81);
    weft_tensor *w = rand32(WEFT_DIMS(s->O, s->C, s->KH, s->KW), 82), *b = rand32(WEFT_DIMS(s->O), 83);
    weft_tensor *in[] = {x, w, b};
    weft_attrs at = attrs_of(s);
    weft_cpu_conv_set_backend(WEFT_CONV_IM2COL);
    weft_tensor *ref = weft_op_apply1(weft_op_find("conv2d"), 3, in, &at);
    weft_cpu_conv_set_backend(WEFT_CONV_AUTO);
    for (int k = 0; k < 2; k++) {
        weft_tensor *y = weft_op_apply1(weft_op_find("conv2d"), 3, in, &at);
        wt_check_same(k ? "auto y (cached choice)" : "auto y (measured)", y, ref, tol);
        weft_tensor_free(y);
    }
    weft_tensor_free(ref), weft_tensor_free(x), weft_tensor_free(w), weft_tensor_free(b);
}

// Where oneDNN must not run even when forced: f64 (no f64 convolution) and
// inside an OpenMP parallel region. Both give im2col's numbers bit for bit.
static void test_fallbacks(void) {
    const shape *s = &k_shapes[2];
    weft_tensor *x = rand32(WEFT_DIMS(s->N, s->C, s->H, s->W), 91);
    weft_tensor *w = rand32(WEFT_DIMS(s->O, s->C / s->G, s->KH, s->KW), 92);
    weft_attrs at = attrs_of(s);
    weft_tensor *in[] = {x, w};
    weft_cpu_conv_set_backend(WEFT_CONV_IM2COL);
    weft_tensor *ref = weft_op_apply1(weft_op_find("conv2d"), 2, in, &at);
    weft_cpu_conv_set_backend(WEFT_CONV_ONEDNN);
    weft_tensor *y = NULL;
    int64_t runs = weft_cpu_conv_onednn_runs();
    bool par = false;
#pragma omp parallel num_threads(2)
    {
#pragma omp master
        {
#ifdef _OPENMP
            par = omp_in_parallel(); // a team of one is not a parallel region
#endif
            y = weft_op_apply1(weft_op_find("conv2d"), 2, in, &at);
        }
    }
    if (par) {
        CHECK(weft_cpu_conv_onednn_runs() == runs);
        wt_check_same("parallel region: im2col", y, ref, 0);
    }
    weft_tensor *x64 = weft_cast(x, WEFT_F64), *w64 = weft_cast(w, WEFT_F64), *in64[] = {x64, w64};
    weft_tensor *y64 = weft_op_apply1(weft_op_find("conv2d"), 2, in64, &at);
    weft_cpu_conv_set_backend(WEFT_CONV_IM2COL);
    weft_tensor *r64 = weft_op_apply1(weft_op_find("conv2d"), 2, in64, &at);
    wt_check_same("f64: im2col", y64, r64, 0);
    weft_tensor *ts[] = {x, w, ref, y, x64, w64, y64, r64};
    for (int i = 0; i < 8; i++) weft_tensor_free(ts[i]);
    weft_cpu_conv_set_backend(WEFT_CONV_AUTO);
}

// A small CNN (fmnist-cnn's layers, narrower) trained for 2 epochs on a
// synthetic Fashion-MNIST with each backend: the logged losses agree within
// f32 noise (1e-3 relative after 30 Adam steps).
static char g_dir[256];
static const char *k_cnn = "[net]\ndataset = fmnist\ninput = 1,28,28\nbatch = 32\nepochs = 2\noptimizer = adam\n"
                           "lr = 1e-3\nseed = 3\n[conv2d]\nout = 8\nkernel = 5\npad = 2\n[relu]\n[maxpool]\nkernel = 2\n"
                           "[conv2d]\nout = 16\nkernel = 3\npad = 1\n[relu]\n[maxpool]\nkernel = 2\n[flatten]\n"
                           "[linear]\nout = 10\n";

static void train_with(weft_conv_backend b, weft_train_result *r) {
    weft_cpu_conv_set_backend(b);
    weft_model_cfg *cfg = weft_model_cfg_parse(k_cnn, strlen(k_cnn), "cnn.cfg");
    CHECK(cfg != NULL);
    char ck[300];
    snprintf(ck, sizeof ck, "%s/ck%d", g_dir, (int)b);
    weft_train_opts o = {.ckpt_dir = ck, .quiet = true, .data_dir = g_dir, .keep_last = 1};
    memset(r, 0, sizeof *r);
    CHECK(cfg && weft_train(cfg, &o, r) == WEFT_OK);
    weft_model_cfg_free(cfg);
}

static void test_train_cnn(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/weft_conv_onednn_%d", (int)getpid());
    mkdir(g_dir, 0755);
    wt_write_fmnist_split(g_dir, "train", 480, 11);
    wt_write_fmnist_split(g_dir, "t10k", 96, 12);
    weft_train_result a, b;
    int64_t runs = weft_cpu_conv_onednn_runs();
    train_with(WEFT_CONV_IM2COL, &a);
    train_with(WEFT_CONV_ONEDNN, &b);
    CHECK(weft_cpu_conv_onednn_runs() > runs || !weft_cpu_conv_have_onednn());
    CHECK(a.steps == 30 && b.steps == 30);
    CHECK_NEAR(b.train_loss, a.train_loss, 1e-3);
    CHECK_NEAR(b.test_loss, a.test_loss, 1e-3);
    CHECK(a.test_loss < 1.0); // it learned something: chance is ln 10 = 2.3
    weft_cpu_conv_set_backend(WEFT_CONV_AUTO);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    CHECK(system(cmd) == 0);
}

int main(void) {
    RUN(test_grid);
    RUN(test_bf16);
    RUN(test_cache_eviction);
    RUN(test_autograd);
    RUN(test_auto);
    RUN(test_fallbacks);
    RUN(test_train_cnn);
    return wt_summary();
}
