// Generated kernels (src/kgen), each tuned in this run by weft_kg_tune and then
// timed against a peer measured in this binary on the same data:
//   kgen_matmul_512   C = A @ B, (512,512) f32, GFLOP/s; peer: cblas_sgemm (OpenBLAS)
//   kgen_conv_14      a 3x3 convolution, padding 1, (32,32,14,14) -> (32,64,14,14), GFLOP/s; peer: weft_conv2d
//                     (oneDNN or im2col + GEMM, src/ops/cpu)
//   kgen_softmax      softmax over the rows of (4096,1024) in stages (row max, exp(x - max), row sum, the output
//                     ex * (1 / sum)), each computed at the row loop (compute_at), GB/s (4 bytes read, 4 written per element);
//                     peer: weft_softmax. Not tuned: the schedule is written out (stderr: the stages at root)
//   kgen_softmax_tuned the same definition tuned (the stages' places searched too); peer: weft_softmax
// stderr: the default schedule's speed, the schedule chosen, the search's size and time.
// WEFT_KGEN_TRIALS sets the schedules measured per kernel (default 48).
#include <cblas.h>
#include <stdlib.h>
#include <weft.h>

#include "bench_util.h"

typedef weft_kg_expr E;

static weft_kg_sched *tune(const char *name, weft_kg *kg, double flop, const char *unit) {
    const char *t = getenv("WEFT_KGEN_TRIALS");
    int trials = t && atoi(t) > 0 ? atoi(t) : 48;
    weft_kg_tune_report rep;
    double t0 = bench_now();
    weft_kg_sched *s = weft_kg_tune(kg, &(weft_kg_tune_opts){.trials = trials, .seed = 1}, &rep);
    if (!s) {
        fprintf(stderr, "%s: %s\n", name, weft_last_error());
        return NULL;
    }
    fprintf(stderr, "%s: tuned in %.1f s, %d of %d schedules measured: %.1f %s [%s]; default schedule %.2f %s\n",
            name, bench_now() - t0, rep.measured, rep.candidates, flop / rep.best_ms * 1e-6, unit, rep.best,
            flop / rep.default_ms * 1e-6, unit);
    return s;
}

// Times the kernel and the peer alternately on the same data and prints the line (flop: the work per run, in
// the unit's numerator; the peer's rate fifth).
static void race(const char *name, double flop, const char *unit, const weft_kg_kernel *k, int n,
                 weft_tensor *const *in, weft_tensor *out, void (*peer)(void *), void *ctx) {
    double tw = 1e30, tb = 1e30;
    for (int rep = 0; rep < 2; rep++) { // interleaved, so neither side gets a warmer machine
        double t1, t2;
        BENCH_BEST(t1, 3, 3, 0.2, weft_kg_run(k, n, in, out));
        BENCH_BEST(t2, 3, 3, 0.2, peer(ctx));
        tw = t1 < tw ? t1 : tw;
        tb = t2 < tb ? t2 : tb;
    }
    bench_report_peer(name, flop / tw * 1e-9, unit, 1, flop / tb * 1e-9);
}

typedef struct gemm_args {
    int M, N, K;
    const float *a, *b;
    float *c;
} gemm_args;

static void sgemm(void *p) {
    gemm_args *g = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->M, g->N, g->K, 1.0f, g->a, g->K, g->b, g->N, 0.0f, g->c,
                g->N);
}

typedef struct conv_args {
    weft_tensor *x, *w;
    weft_conv2d_params p;
} conv_args;

static void conv2d(void *p) {
    conv_args *c = p;
    weft_tensor_free(weft_conv2d(c->x, c->w, NULL, &c->p));
}

static void matmul(void) {
    const int64_t M = 512, N = 512, K = 512;
    weft_kg *kg = weft_kg_new("matmul");
    int A = weft_kg_input(kg, "A", 2, (int64_t[]){M, K}), B = weft_kg_input(kg, "B", 2, (int64_t[]){K, N});
    E *i = weft_kg_axis(kg, "i", M), *j = weft_kg_axis(kg, "j", N), *k = weft_kg_reduce_axis(kg, "k", K);
    E *body = weft_kg_bin(kg, WEFT_KG_MUL, weft_kg_load(kg, A, (E *[]){i, k}), weft_kg_load(kg, B, (E *[]){k, j}));
    double flop = 2.0 * M * N * K;
    weft_kg_sched *s = weft_kg_compute(kg, 2, (E *[]){i, j}, WEFT_KG_SUM, body, NULL) ? NULL : tune("kgen_matmul_512", kg, flop, "GFLOP/s");
    weft_kg_kernel *kern = s ? weft_kg_build(s) : NULL;
    if (!kern) {
        fprintf(stderr, "kgen_matmul_512: %s\n", weft_last_error());
        weft_kg_free(kg);
        return;
    }
    weft_generator *g = weft_generator_create(1);
    weft_tensor *a = weft_tensor_rand(WEFT_DIMS(M, K), WEFT_F32, g), *b = weft_tensor_rand(WEFT_DIMS(K, N), WEFT_F32, g);
    weft_tensor *c = weft_tensor_empty(WEFT_DIMS(M, N), WEFT_F32);
    weft_tensor *c2 = weft_tensor_empty(WEFT_DIMS(M, N), WEFT_F32);
    gemm_args ga = {(int)M, (int)N, (int)K, weft_tensor_data(a), weft_tensor_data(b), weft_tensor_data(c2)};
    race("kgen_matmul_512", flop, "GFLOP/s", kern, 2, (weft_tensor *[]){a, b}, c, sgemm, &ga);
    weft_tensor_free(c2);
    weft_tensor_free(a), weft_tensor_free(b), weft_tensor_free(c);
    weft_generator_free(g);
    weft_kg_kernel_free(kern);
    weft_kg_sched_free(s);
    weft_kg_free(kg);
}

static void conv(void) {
    const int64_t N = 32, C = 32, H = 14, W = 14, O = 64, KS = 3;
    weft_kg *kg = weft_kg_new("conv");
    int X = weft_kg_input(kg, "X", 4, (int64_t[]){N, C, H, W}), Wt = weft_kg_input(kg, "W", 4, (int64_t[]){O, C, KS, KS});
    E *n = weft_kg_axis(kg, "n", N), *o = weft_kg_axis(kg, "o", O), *y = weft_kg_axis(kg, "y", H),
      *x = weft_kg_axis(kg, "x", W);
    E *c = weft_kg_reduce_axis(kg, "c", C), *ky = weft_kg_reduce_axis(kg, "ky", KS), *kx = weft_kg_reduce_axis(kg, "kx", KS);
    E *one = weft_kg_const(kg, 1);
    E *iy = weft_kg_bin(kg, WEFT_KG_SUB, weft_kg_bin(kg, WEFT_KG_ADD, y, ky), one);
    E *ix = weft_kg_bin(kg, WEFT_KG_SUB, weft_kg_bin(kg, WEFT_KG_ADD, x, kx), one);
    E *body = weft_kg_bin(kg, WEFT_KG_MUL, weft_kg_load_pad(kg, X, (E *[]){n, c, iy, ix}, 0),
                          weft_kg_load(kg, Wt, (E *[]){o, c, ky, kx}));
    double flop = 2.0 * N * O * H * W * C * KS * KS;
    weft_kg_sched *s = weft_kg_compute(kg, 4, (E *[]){n, o, y, x}, WEFT_KG_SUM, body, NULL) ? NULL : tune("kgen_conv_14", kg, flop, "GFLOP/s");
    weft_kg_kernel *kern = s ? weft_kg_build(s) : NULL;
    if (!kern) {
        fprintf(stderr, "kgen_conv_14: %s\n", weft_last_error());
        weft_kg_free(kg);
        return;
    }
    weft_generator *g = weft_generator_create(2);
    weft_tensor *xt = weft_tensor_rand(WEFT_DIMS(N, C, H, W), WEFT_F32, g), *wt = weft_tensor_rand(WEFT_DIMS(O, C, KS, KS), WEFT_F32, g);
    weft_tensor *out = weft_tensor_empty(WEFT_DIMS(N, O, H, W), WEFT_F32);
    conv_args ca = {xt, wt, {{1, 1}, {1, 1}, {1, 1}, 1}};
    race("kgen_conv_14", flop, "GFLOP/s", kern, 2, (weft_tensor *[]){xt, wt}, out, conv2d, &ca);
    weft_tensor_free(xt), weft_tensor_free(wt), weft_tensor_free(out);
    weft_generator_free(g);
    weft_kg_kernel_free(kern);
    weft_kg_sched_free(s);
    weft_kg_free(kg);
}

static void softmax_peer(void *p) { weft_tensor_free(weft_softmax(p, 1)); }

static void softmax(void) {
    const int64_t R = 4096, C = 1024;
    weft_kg *kg = weft_kg_new("softmax");
    int X = weft_kg_input(kg, "X", 2, (int64_t[]){R, C});
    E *r = weft_kg_axis(kg, "r", R), *c = weft_kg_reduce_axis(kg, "c", C);
    int mx = weft_kg_stage(kg, "mx", 1, (E *[]){r}, WEFT_KG_MAXRED, weft_kg_load(kg, X, (E *[]){r, c}), NULL);
    E *re = weft_kg_axis(kg, "re", R), *ce = weft_kg_axis(kg, "ce", C);
    E *de = weft_kg_bin(kg, WEFT_KG_SUB, weft_kg_load(kg, X, (E *[]){re, ce}), weft_kg_load(kg, mx, (E *[]){re}));
    int ex = weft_kg_stage(kg, "ex", 2, (E *[]){re, ce}, WEFT_KG_NONE, weft_kg_un(kg, WEFT_KG_EXP, de), NULL);
    E *r2 = weft_kg_axis(kg, "r2", R), *c2 = weft_kg_reduce_axis(kg, "c2", C);
    int sm = weft_kg_stage(kg, "sm", 1, (E *[]){r2}, WEFT_KG_SUM, weft_kg_load(kg, ex, (E *[]){r2, c2}), NULL);
    E *i = weft_kg_axis(kg, "i", R), *j = weft_kg_axis(kg, "j", C);
    E *inv = weft_kg_bin(kg, WEFT_KG_DIV, weft_kg_const(kg, 1), weft_kg_load(kg, sm, (E *[]){i})); // (hoisted)
    E *body = weft_kg_bin(kg, WEFT_KG_MUL, weft_kg_load(kg, ex, (E *[]){i, j}), inv);
    weft_kg_kernel *kern = NULL, *root = NULL;
    weft_kg_sched *s = NULL, *s0 = NULL;
    if (!weft_kg_compute(kg, 2, (E *[]){i, j}, WEFT_KG_NONE, body, NULL) && (s = weft_kg_schedule(kg)) &&
        (s0 = weft_kg_schedule(kg))) {
        weft_kg_loop li = weft_kg_get_loop(s, "i"), lj = weft_kg_get_loop(s, "j");
        if (!weft_kg_compute_at(s, mx, li) && !weft_kg_compute_at(s, ex, li) && !weft_kg_compute_at(s, sm, li) &&
            !weft_kg_parallel(s, li) &&
            !weft_kg_vectorize(s, lj) && !weft_kg_parallel(s0, weft_kg_get_loop(s0, "i")) &&
            !weft_kg_vectorize(s0, weft_kg_get_loop(s0, "j")))
            kern = weft_kg_build(s), root = weft_kg_build(s0);
    }
    if (!kern || !root) {
        fprintf(stderr, "kgen_softmax: %s\n", weft_last_error());
    } else {
        weft_generator *g = weft_generator_create(3);
        weft_tensor *xt = weft_tensor_rand(WEFT_DIMS(R, C), WEFT_F32, g), *out = weft_tensor_empty(WEFT_DIMS(R, C), WEFT_F32);
        double bytes = 8.0 * R * C, t;
        BENCH_BEST(t, 3, 3, 0.2, weft_kg_run(root, 1, &xt, out));
        fprintf(stderr, "kgen_softmax: the stages at root (their own passes over X): %.2f GB/s\n", bytes / t * 1e-9);
        race("kgen_softmax", bytes, "GB/s", kern, 1, &xt, out, softmax_peer, xt);
        weft_kg_sched *st = tune("kgen_softmax_tuned", kg, bytes, "GB/s");
        weft_kg_kernel *kt = st ? weft_kg_build(st) : NULL;
        if (kt) race("kgen_softmax_tuned", bytes, "GB/s", kt, 1, &xt, out, softmax_peer, xt);
        else fprintf(stderr, "kgen_softmax_tuned: %s\n", weft_last_error());
        weft_kg_kernel_free(kt);
        weft_kg_sched_free(st);
        weft_tensor_free(xt), weft_tensor_free(out);
        weft_generator_free(g);
    }
    weft_kg_kernel_free(kern), weft_kg_kernel_free(root);
    weft_kg_sched_free(s), weft_kg_sched_free(s0);
    weft_kg_free(kg);
}

int main(int argc, char **argv) {
    if (!weft_kg_available()) {
        fprintf(stderr, "kgen: no C compiler (cc, or $WEFT_KGEN_CC)\n");
        return 0;
    }
    weft_num_threads(); // OpenBLAS's thread count set before either side runs
    if (bench_selected(argc, argv, "kgen_matmul_512")) matmul();
    if (bench_selected(argc, argv, "kgen_conv_14")) conv();
    if (bench_selected(argc, argv, "kgen_softmax")) softmax();
    return 0;
}
