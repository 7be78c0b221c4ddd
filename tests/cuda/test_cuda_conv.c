// conv2d, conv_transpose2d and 2-D pooling on CUDA against the CPU, forward and backward
// (conv2d_backward_input / _weight / _bias, max_pool2d_backward and
// avg_pool2d_backward run on CUDA through the gradient comparisons):
// stride, padding, dilation, groups, 1x1 convs, the NHWC layout, strided
// inputs, odd sizes, a batch split into several column-buffer chunks, in
// f32, f64, and under bf16 / f16 autocast; pools with and without padding,
// overlapping windows and ties.
#include <stdlib.h>
#include <string.h>

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
    bool transposed; // conv_transpose2d (conv2d_backward_input on CUDA) with p's stride, padding, ... and out_pad
    int out_pad[2];
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
    weft_conv_transpose2d_params tp = {{c->p.stride[0], c->p.stride[1]}, {c->p.padding[0], c->p.padding[1]},
                                       {c->out_pad[0], c->out_pad[1]}, {c->p.dilation[0], c->p.dilation[1]},
                                       c->p.groups};
    weft_tensor *y = c->transposed ? weft_conv_transpose2d(x, in[1], c->bias ? in[2] : NULL, &tp)
                                   : weft_conv2d(x, in[1], c->bias ? in[2] : NULL, &c->p);
    weft_tensor_free(x);
    return y;
}

// ---- checking a conv against the exact result, within a bound that scales with the terms ----
//
// Every element of a conv's output and of its input gradients is a sum of
// products: y = sum x*w + b, dx = sum gy*w, dw = sum gy*x, db = sum gy. An
// implementation in floating point differs from the exact sum by at most
// about k*B, where B is the sum of |terms| of that element (not |y|: where
// the terms cancel, y is near 0 while the rounding errors are not). So each
// element is compared with the CPU's f64 result on the same (f32 or f64)
// inputs, allowed k*B, where B comes from the same conv run on |x|, |w|, |b|
// with loss weights |r| in f64 on the CPU (conv of absolute values gives
// exactly sum |x||w| + |b|, and its backward sum |gy||w|, sum |gy||x|, sum |gy|).
//
// k for f32 and f64 sums: 16 eps (eps = 2^-23, 2^-52). Worst-case bounds
// for a sum of n terms in any order grow with the depth of the summation
// tree (up to n eps B for a sequential sum: far too loose at n = 262144);
// rounding errors of random sign add like a random walk, so in practice the
// error stays within a few eps B. Measured with the CPU's f32 kernels over
// every case below: at most 2.45 eps B (the chunked case's forward, the
// worst of its 2M outputs, each a sum of 145 terms); on the weight gradient
// of "chunked batch f32" (n = 16*128*128 terms), element 36 (B = 64400,
// exact value -0.1357710) the CPU's -0.1360168 is 0.032 eps B off and the
// H100's -0.1357570 0.002 eps B. So 16 eps B leaves 6x over the worst seen,
// while a real error (a chunk of 2 images dropped or overwritten, a window
// shifted by one) moves an element by a sum of thousands of products, about
// 0.3 sqrt(n) (60 for that element, against 0.12 allowed).
//
// Under autocast (f16 / bf16 with unit roundoff u = 2^-11 / 2^-8): x, w, b
// and the incoming gradient are each rounded to the low type (relative error
// u), their products are exact in f32, the sums run in f32 (16 eps B as
// above) and the result is rounded once more: at most 3 roundings on any term
// plus one on the result, so k = 4u + 16 eps_f32 bounds every element.
//
// What settled issue 13's defect 5 (the f32 chunked case failing with a
// relative tolerance of 1e-4): f32 summation order, not a bug. The CUDA
// value is closer to the exact sum than the CPU's; both are within 0.04
// eps*B. Reading cuda/conv.c found the chunks right (the first chunk's
// weight-gradient GEMM writes with beta 0, later ones add with beta 1, all in
// f32 via cublasSgemm). The f64 run of the same case below checks the same
// code with the rounding taken out: it must agree to 16 eps_f64 * B.

typedef struct conv_run {
    weft_tensor *y, *g[3]; // f64 on the CPU; g[i] NULL where no gradient
} conv_run;

static void run_free(conv_run *r) {
    weft_tensor_free(r->y);
    for (int i = 0; i < 3; i++) weft_tensor_free(r->g[i]);
}

// t (any device, any dtype) as a contiguous f64 CPU tensor.
static weft_tensor *host64(weft_tensor *t) {
    if (!t) return NULL;
    weft_tensor *h = weft_tensor_to(t, WEFT_DEVICE_CPU), *c = h ? weft_cast(h, WEFT_F64) : NULL;
    weft_tensor *r = c ? weft_tensor_contiguous(c) : NULL;
    weft_tensor_free(h);
    weft_tensor_free(c);
    return r;
}

// f_conv on in[0..n) (each |in[i]| with absval) cast to dt and moved to dev,
// under autocast `ac` (WEFT_F32: off); backward of loss = sum(y * rw) with rw
// = wt_vals of y's size rounded to rdt (|rw| with absval). Checks that the
// output lives on dev in dt, or under autocast in its dtype (torch.autocast's
// rule: the result stays bf16 / f16), and the gradients on dev in dt.
static conv_run run_conv(conv_ctx *c, int n, weft_tensor *const *in, weft_dtype dt, weft_device dev, bool absval,
                         weft_dtype ac, weft_dtype rdt, bool backward) {
    conv_run out = {0};
    weft_tensor *leaf[3] = {0};
    for (int i = 0; i < n; i++) {
        weft_tensor *a = absval ? weft_abs(in[i]) : weft_tensor_ref(in[i]), *b = weft_cast(a, dt);
        leaf[i] = weft_tensor_to(b, dev);
        weft_tensor_free(a);
        weft_tensor_free(b);
        CHECK(leaf[i] != NULL);
        if (!leaf[i]) goto done;
        weft_tensor *d = weft_tensor_detach(leaf[i]); // a leaf of its own (weft_tensor_to may return b itself)
        weft_tensor_free(leaf[i]);
        leaf[i] = d;
        if (backward) weft_tensor_set_requires_grad(leaf[i], true);
    }
    CHECK(weft_autocast_set(ac) == WEFT_OK);
    weft_tensor *y = f_conv(leaf, c);
    weft_autocast_set(WEFT_F32);
    CHECK(y != NULL);
    if (!y) goto done;
    CHECK(weft_device_equal(weft_tensor_device(y), dev) && weft_tensor_dtype(y) == (ac != WEFT_F32 ? ac : dt));
    if (backward) {
        int64_t m = weft_tensor_numel(y);
        double *v = malloc(sizeof(double) * (size_t)(m ? m : 1));
        wt_vals(v, m, -1, 1, 12345);
        weft_tensor *r64 = weft_tensor_from_data(v, 1, &m, WEFT_F64), *rr = weft_cast(r64, rdt);
        weft_tensor *ra = absval ? weft_abs(rr) : weft_tensor_ref(rr), *rc = weft_cast(ra, dt);
        weft_tensor *rv = weft_view(rc, weft_tensor_ndim(y), weft_tensor_sizes(y)), *rd = weft_tensor_to(rv, dev);
        weft_tensor *prod = weft_mul(y, rd), *loss = weft_sum(prod, 0, NULL, false);
        CHECK(loss && weft_backward(loss, NULL, NULL) == WEFT_OK);
        for (int i = 0; i < n; i++) {
            weft_tensor *g = weft_tensor_grad(leaf[i]);
            CHECK(g && weft_device_equal(weft_tensor_device(g), dev) && weft_tensor_dtype(g) == dt);
            out.g[i] = host64(g);
        }
        free(v);
        weft_tensor *tmp[] = {r64, rr, ra, rc, rv, rd, prod, loss};
        for (int i = 0; i < 8; i++) weft_tensor_free(tmp[i]);
    }
    out.y = host64(y);
    weft_tensor_free(y);
done:
    for (int i = 0; i < n; i++) weft_tensor_free(leaf[i]);
    return out;
}

// |got - ref| <= k * bound element by element (all f64 CPU tensors of one
// shape); returns the largest |got - ref| / bound seen (0 where bound is 0).
static double check_bounded(const char *what, const weft_tensor *got, const weft_tensor *ref,
                            const weft_tensor *bound, double k) {
    if (!got || !ref || !bound || weft_tensor_numel(got) != weft_tensor_numel(ref) ||
        weft_tensor_numel(bound) != weft_tensor_numel(ref)) {
        wt_fail++;
        fprintf(stderr, "%s: missing or mis-shaped result (%s)\n", what, weft_last_error());
        return 0;
    }
    const double *a = weft_tensor_data(got), *e = weft_tensor_data(ref), *b = weft_tensor_data(bound);
    int64_t n = weft_tensor_numel(ref), bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - e[i]);
        if (b[i] > 0 && d / b[i] > worst) worst = d / b[i];
        if (d <= k * b[i]) continue;
        if (bad++ < 3)
            fprintf(stderr, "%s: element %lld: %.9g vs exact %.9g (|terms| sum %.6g, allowed %.3g)\n", what,
                    (long long)i, a[i], e[i], b[i], k * b[i]);
    }
    if (bad) wt_fail++;
    else wt_pass++;
    return worst;
}

// dt: f32 / f64 (inputs and compute), or f16 / bf16 (f32 inputs run under
// autocast to that type). The CUDA run, and for f32 / f64 the CPU run too,
// against the exact result within k * B (see above).
static void conv_case(const char *what, weft_dtype dt, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                      int64_t KH, int64_t KW, conv_ctx c, bool backward) {
    int G = c.p.groups ? c.p.groups : 1;
    bool low = dt == WEFT_F16 || dt == WEFT_BF16;
    weft_dtype in_dt = low ? WEFT_F32 : dt, ac = low ? dt : WEFT_F32;
    bool nhwc_store = c.permuted || c.nhwc;
    int64_t xs[4] = {N, C, H, W}, xs_nhwc[4] = {N, H, W, C};
    int n = c.bias ? 3 : 2;
    weft_tensor *in[3] = {rand_t(4, nhwc_store ? xs_nhwc : xs, in_dt, 1),
                          rand_t(4, c.transposed ? (const int64_t[]){C, O / G, KH, KW} : (const int64_t[]){O, C / G, KH, KW},
                                 in_dt, 2),
                          rand_t(1, (const int64_t[]){O}, in_dt, 3)};
    double eps = in_dt == WEFT_F32 ? 0x1p-23 : 0x1p-52, u = dt == WEFT_BF16 ? 0x1p-8 : dt == WEFT_F16 ? 0x1p-11 : 0;
    double k = 4 * u + 16 * eps;
    char buf[160];
    const char *dn = low ? (dt == WEFT_BF16 ? "bf16 autocast" : "f16 autocast") : weft_dtype_name(dt);
    conv_run ref = run_conv(&c, n, in, WEFT_F64, WEFT_DEVICE_CPU, false, WEFT_F32, in_dt, backward);
    conv_run bnd = run_conv(&c, n, in, WEFT_F64, WEFT_DEVICE_CPU, true, WEFT_F32, in_dt, backward);
    conv_run dev = run_conv(&c, n, in, in_dt, WT_CUDA0, false, ac, in_dt, backward);
    conv_run cpu = {0};
    if (!low && dt != WEFT_F64) cpu = run_conv(&c, n, in, in_dt, WEFT_DEVICE_CPU, false, WEFT_F32, in_dt, backward);
    double worst = 0, wc = 0, r;
    for (int j = -1; j < (backward ? n : 0); j++) {
        weft_tensor *e = j < 0 ? ref.y : ref.g[j], *b = j < 0 ? bnd.y : bnd.g[j];
        if (j < 0) snprintf(buf, sizeof buf, "%s %s: forward", what, dn);
        else snprintf(buf, sizeof buf, "%s %s: grad of input %d", what, dn, j);
        if ((r = check_bounded(buf, j < 0 ? dev.y : dev.g[j], e, b, k)) > worst) worst = r;
        if (cpu.y) {
            strcat(buf, " (cpu)");
            if ((r = check_bounded(buf, j < 0 ? cpu.y : cpu.g[j], e, b, k)) > wc) wc = r;
        }
    }
    // autocast took effect: some element is further from the exact sum than f32 arithmetic goes
    if (low) CHECK(worst > 16 * eps);
    printf("  %-44s %-13s largest |error| / sum|terms|: cuda %.3g%s", what, dn, worst, cpu.y ? "" : "\n");
    if (cpu.y) printf(", cpu %.3g\n", wc);
    run_free(&ref);
    run_free(&bnd);
    run_free(&dev);
    run_free(&cpu);
    for (int i = 0; i < 3; i++) weft_tensor_free(in[i]);
}

static void test_conv2d(void) {
    static const weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_BF16, WEFT_F16};
    for (int k = 0; k < 4; k++) {
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
        // 2.4M column entries per image: a batch of 16 runs in two chunks of
        // 14 and 2 images (the weight gradient accumulates across them);
        // 262144 terms per weight-gradient element
        conv_case("chunked batch", dt, 16, 16, 128, 128, 8, 3, 3, (conv_ctx){{{1, 1}, {1, 1}}, true}, true);
        // conv_transpose2d (conv2d_backward_input forward, conv2d and conv2d_backward_weight backward); its
        // autocast runs stay f32 (no autocast rule), so only f32 and f64 here
        if (dt == WEFT_F32 || dt == WEFT_F64) {
            conv_case("transposed k4 s2 p1 (DCGAN)", dt, 3, 8, 7, 7, 4, 4, 4,
                      (conv_ctx){{{2, 2}, {1, 1}}, true, .transposed = true}, true);
            conv_case("transposed groups 2, dil 2, output_padding", dt, 2, 6, 5, 6, 4, 3, 3,
                      (conv_ctx){{{2, 3}, {1, 0}, {2, 1}, 2}, false, .transposed = true, .out_pad = {1, 2}}, true);
            conv_case("transposed strided input", dt, 2, 4, 6, 5, 3, 3, 3,
                      (conv_ctx){{{1, 1}, {1, 1}}, true, true, .transposed = true}, true);
        }
    }
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
