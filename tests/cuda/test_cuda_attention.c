// The fused causal attention ops on CUDA against the CPU: o and lse of
// causal_attention, and the gradients of q, k, v through
// causal_attention_backward, for T = 1, 7, 64, 129 (one query tile, tile
// edges, more tiles than one block), 1000 (one case), head dims 1, 32, 64,
// 100, 128, one head and (2,3) heads, inputs permuted from (B,T,H,D)
// (non-contiguous), f32 and f64; a head dim above 128 is an error naming the op.
// bf16 and f16 (the tensor-core kernels where D is 16, 32, 64 or 128, the f32
// kernels on widened copies otherwise) against the CPU's f32 arithmetic on the
// same rounded inputs, and attention under bf16 autocast. The packed op
// (causal_attention_qkv, one (B,T,3C) input) in all four dtypes. The bf16 / f16 cases again through
// cuDNN's fused attention (WEFT_ATTN_CUDNN=1) where the build has it, and at gpt2's shape every half-precision
// way (f32 kernels, tensor cores two ways, cuDNN) against the f32 kernels.
//
// The op is looked up in the table and applied by name (attrs f[0] = scale),
// so the test builds whether or not the public weft_causal_attention is
// there yet; without the op in the table it skips.
#include <stdint.h>

#include "cuda_test.h"
#include "ops/cuda/attention_cudnn.h"
// (weak: a build without CUDA has neither; then cuDNN never runs)
#pragma weak weft_cudnn_attention_enabled
#pragma weak weft_cudnn_attention_runs
static bool cudnn_on(void) { return weft_cudnn_attention_enabled && weft_cudnn_attention_enabled(); }
static int64_t cudnn_runs(void) { return weft_cudnn_attention_runs ? weft_cudnn_attention_runs() : 0; }
#include "ops/op.h"

static const weft_op_def *g_op;

static weft_tensor *rand_dt(int ndim, const int64_t *sizes, weft_dtype dt, uint64_t seed) {
    weft_tensor *r = wt_rand64(ndim, sizes, -2, 2, seed, false);
    if (dt == WEFT_F64) return r;
    weft_tensor *c = weft_cast(r, dt);
    weft_tensor_free(r);
    return c;
}

typedef struct attn_case {
    double scale;
    bool permuted; // inputs are (B,T,H,D): attend over transpose(x, 1, 2)
    int out;       // 0: o, 1: lse
    bool last;     // o with the heads last, (B,T,H,D) (attrs i[0])
} attn_case;

static weft_tensor *attn_fn(weft_tensor *const *in, void *ctx) {
    const attn_case *c = ctx;
    weft_tensor *x[3], *views[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) x[i] = c->permuted ? (views[i] = weft_transpose(in[i], 1, 2)) : in[i];
    weft_attrs at;
    memset(&at, 0, sizeof at);
    at.f[0] = c->scale;
    at.i[0] = c->last;
    weft_tensor *out[WEFT_MAX_OP_OUT] = {NULL};
    weft_tensor *r = NULL;
    if (weft_op_apply(g_op, 3, x, &at, out) == WEFT_OK) {
        r = out[c->out];
        weft_tensor_free(out[1 - c->out]);
    }
    for (int i = 0; i < 3; i++) weft_tensor_free(views[i]);
    return r;
}

// Compares o (with the gradients of q, k, v) and lse for q, k, v of shape
// (B,H,T,D), or (B,T,H,D) read transposed when permuted.
static void attn_check(int64_t B, int64_t H, int64_t T, int64_t D, weft_dtype dt, bool permuted, double tol) {
    int64_t sizes[4] = {B, H, T, D};
    if (permuted) sizes[1] = T, sizes[2] = H;
    weft_tensor *in[3];
    for (int i = 0; i < 3; i++) in[i] = rand_dt(4, sizes, dt, 100 * (uint64_t)T + 10 * (uint64_t)D + (uint64_t)i);
    char what[160];
    for (int out = 0; out < 2; out++) {
        attn_case c = {1 / sqrt((double)D), permuted, out};
        snprintf(what, sizeof what, "causal_attention %s B=%lld H=%lld T=%lld D=%lld%s %s", out ? "lse" : "o",
                 (long long)B, (long long)H, (long long)T, (long long)D, permuted ? " permuted" : "",
                 weft_dtype_name(dt));
        wt_cuda_compare(what, attn_fn, &c, 3, in, tol, out == 0); // lse carries no gradient
    }
    for (int i = 0; i < 3; i++) weft_tensor_free(in[i]);
}

static void test_shapes(void) {
    const int64_t Ts[] = {1, 7, 64, 129}, Ds[] = {1, 32, 64, 128};
    const weft_dtype dts[] = {WEFT_F32, WEFT_F64};
    for (int f = 0; f < 2; f++)
        for (int h = 0; h < 2; h++)
            for (int t = 0; t < 4; t++)
                for (int d = 0; d < 4; d++)
                    attn_check(h ? 2 : 1, h ? 3 : 1, Ts[t], Ds[d], dts[f], false, f ? 1e-12 : 1e-5);
}

// Head dims that are not a multiple of 32 (lanes past D idle).
static void test_odd_head_dims(void) {
    attn_check(2, 3, 129, 100, WEFT_F32, false, 1e-5);
    attn_check(2, 3, 129, 100, WEFT_F64, false, 1e-12);
    attn_check(1, 2, 33, 7, WEFT_F64, false, 1e-12);
}

static void test_long(void) { attn_check(1, 2, 1000, 64, WEFT_F32, false, 1e-4); }

static void test_permuted(void) {
    attn_check(2, 3, 129, 64, WEFT_F32, true, 1e-5);
    attn_check(2, 3, 129, 64, WEFT_F64, true, 1e-12);
    attn_check(1, 2, 7, 128, WEFT_F64, true, 1e-12);
}

// D = 129: the CPU computes it, the CUDA kernel refuses with an error naming the op.
// o with the heads last (the f32 / f64 kernels write a scratch, copied into (B,T,H,D) order), inputs the heads
// of (B,T,C) tensors, against the CPU with the gradients.
static void test_heads_last(void) {
    for (int f = 0; f < 2; f++) {
        weft_dtype dt = f ? WEFT_F64 : WEFT_F32;
        int64_t sizes[4] = {2, 70, 3, 32}; // (B,T,H,D)
        weft_tensor *in[3];
        for (int i = 0; i < 3; i++) in[i] = rand_dt(4, sizes, dt, 700 + (uint64_t)i);
        for (int out = 0; out < 2; out++) {
            attn_case c = {0.2, true, out, true};
            wt_cuda_compare(out ? "heads last: lse" : "heads last: o", attn_fn, &c, 3, in, f ? 1e-12 : 1e-4, out == 0);
        }
        for (int i = 0; i < 3; i++) weft_tensor_free(in[i]);
    }
}

static void test_head_dim_too_large(void) {
    int64_t sizes[4] = {1, 1, 5, 129};
    weft_tensor *in[3], *dev[3];
    for (int i = 0; i < 3; i++) {
        in[i] = rand_dt(4, sizes, WEFT_F32, 7 + (uint64_t)i);
        dev[i] = weft_tensor_to(in[i], WT_CUDA0);
    }
    attn_case c = {1 / sqrt(129.0), false, 0};
    weft_tensor *h = attn_fn(in, &c);
    CHECK(h != NULL);
    weft_tensor *d = attn_fn(dev, &c);
    CHECK(d == NULL);
    CHECK(wt_error_has("causal_attention"));
    weft_tensor_free(h);
    weft_tensor_free(d);
    for (int i = 0; i < 3; i++) {
        weft_tensor_free(in[i]);
        weft_tensor_free(dev[i]);
    }
}

// bf16 / f16: o, lse and the gradients of q, k, v on CUDA against the CPU on the same rounded values (its f32
// kernel on widened copies), each within tol of the largest CPU value: the GPU rounds P and dS to the input
// dtype as operands of the next product (2^-9 relative for bf16, 2^-12 for f16), so errors of a few units
// of the output dtype's ulp relative to the largest value (test_cuda_attention_emu bounds the same kernels
// against f64 on the CPU).
// permuted: q, k, v are the (B,H,T,D) views of (B,T,H,D) tensors (the heads of a (B,T,C) tensor), which the
// tensor-core kernels read in place.
// f on in64 cast to dt, run on the CPU and on CUDA: the output and each input's gradient within tol of the
// largest CPU value; what names the case in a failure.
static void lp_compare(wt_cuda_fn f, void *ctx, int n, weft_tensor *const *in64, weft_dtype dt, double tol,
                       const char *what) {
    double *cpu[4] = {0}, *gpu[4] = {0};
    int64_t lc[4] = {0}, lg[4] = {0};
    bool ok = wt_run_as(f, ctx, n, in64, dt, WEFT_DEVICE_CPU, cpu, lc) && wt_run_as(f, ctx, n, in64, dt, WT_CUDA0, gpu, lg);
    CHECK(ok);
    for (int r = 0; r <= n && ok; r++) {
        if (!cpu[r]) continue;
        CHECK(gpu[r] != NULL && lg[r] == lc[r]);
        if (!gpu[r] || lg[r] != lc[r]) continue;
        double big = 0, err = 0;
        int64_t at = 0;
        for (int64_t j = 0; j < lc[r]; j++) {
            big = fmax(big, fabs(cpu[r][j]));
            double e = fabs(gpu[r][j] - cpu[r][j]);
            if (!(e <= err)) err = e, at = j;
        }
        bool good = err <= tol * fmax(big, 1e-3);
        if (!good)
            fprintf(stderr, "%s %s: %s %d: element %lld: %.6g vs cpu %.6g (values up to %.3g)\n", what,
                    weft_dtype_name(dt), r ? "gradient of input" : "output", r - 1, (long long)at, gpu[r][at],
                    cpu[r][at], big);
        CHECK(good);
    }
    for (int r = 0; r < 4; r++) free(cpu[r]), free(gpu[r]);
}

static void lp_check(int64_t B, int64_t H, int64_t T, int64_t D, weft_dtype dt, double tol, bool permuted,
                     bool last) {
    int64_t sizes[4] = {B, H, T, D};
    if (permuted) sizes[1] = T, sizes[2] = H;
    weft_tensor *in64[3];
    for (int i = 0; i < 3; i++) in64[i] = wt_rand64(4, sizes, -2, 2, 100 * (uint64_t)T + 10 * (uint64_t)D + (uint64_t)i, false);
    char what[128];
    for (int out = 0; out < 2; out++) {
        attn_case c = {1 / sqrt((double)D), permuted, out, last};
        snprintf(what, sizeof what, "causal_attention %s B=%lld H=%lld T=%lld D=%lld", out ? "lse" : "o",
                 (long long)B, (long long)H, (long long)T, (long long)D);
        lp_compare(attn_fn, &c, 3, in64, dt, tol, what);
    }
    for (int i = 0; i < 3; i++) weft_tensor_free(in64[i]);
}

static void test_half(void) {
    const int64_t Ts[] = {1, 7, 64, 129, 1000}, Ds[] = {16, 32, 64, 128, 48}; // 48: the widened path
    for (int d = 0; d < 5; d++)
        for (int t = 0; t < 5; t++) {
            if (Ts[t] == 1000 && Ds[d] != 64) continue;
            lp_check(2, 3, Ts[t], Ds[d], WEFT_BF16, 2.5e-2, false, false);
            lp_check(1, 2, Ts[t], Ds[d], WEFT_F16, 4e-3, false, false);
            if (Ts[t] == 129) { // read in place from (B,T,H,D) memory, o written there too
                lp_check(2, 3, Ts[t], Ds[d], WEFT_BF16, 2.5e-2, true, false);
                lp_check(1, 2, Ts[t], Ds[d], WEFT_F16, 4e-3, true, true);
                lp_check(2, 3, Ts[t], Ds[d], WEFT_BF16, 2.5e-2, true, true);
            }
        }
}

// Under bf16 autocast, f32 q, k, v: the op runs in bf16 and its o stays bf16 (torch.autocast's rule); the
// same bits as the op on bf16 copies.
static void test_autocast(void) {
    int64_t sizes[4] = {2, 3, 129, 64};
    weft_tensor *x[3], *lo[3], *dx[3], *dlo[3];
    for (int i = 0; i < 3; i++) {
        x[i] = rand_dt(4, sizes, WEFT_F32, 50 + (uint64_t)i);
        lo[i] = weft_cast(x[i], WEFT_BF16);
        dx[i] = weft_tensor_to(x[i], WT_CUDA0);
        dlo[i] = weft_tensor_to(lo[i], WT_CUDA0);
    }
    attn_case c = {0.125, false, 0};
    CHECK(weft_autocast_set(WEFT_BF16) == WEFT_OK);
    weft_tensor *y = attn_fn(dx, &c);
    CHECK(weft_autocast_set(WEFT_F32) == WEFT_OK);
    weft_tensor *ylo = attn_fn(dlo, &c);
    CHECK(y && weft_tensor_dtype(y) == WEFT_BF16 && weft_device_equal(weft_tensor_device(y), WT_CUDA0));
    if (y && ylo) wt_check_same("autocast bf16 attention", y, ylo, 0);
    weft_tensor *all[] = {y, ylo};
    for (int i = 0; i < 2; i++) weft_tensor_free(all[i]);
    for (int i = 0; i < 3; i++) weft_tensor_free(x[i]), weft_tensor_free(lo[i]), weft_tensor_free(dx[i]), weft_tensor_free(dlo[i]);
}

// rms of a - b over rms of b; the mean of a - b over rms of b (an offset, where rounding alone averages out);
// and sum(a b) / sum(b b) - 1 (a scaling, e.g. P truncated instead of rounded, which zero-mean values hide
// from the mean), for two float tensors of one shape (any device).
static void err_stats(const weft_tensor *a, const weft_tensor *b, double *rel, double *bias, double *scale) {
    weft_tensor *ah = weft_tensor_to((weft_tensor *)a, WEFT_DEVICE_CPU), *bh = weft_tensor_to((weft_tensor *)b, WEFT_DEVICE_CPU);
    weft_tensor *a64 = ah ? weft_cast(ah, WEFT_F64) : NULL, *b64 = bh ? weft_cast(bh, WEFT_F64) : NULL;
    *rel = *bias = *scale = INFINITY;
    if (a64 && b64 && weft_tensor_numel(a64) == weft_tensor_numel(b64)) {
        const double *x = weft_tensor_data(a64), *y = weft_tensor_data(b64);
        int64_t n = weft_tensor_numel(b64);
        double d2 = 0, y2 = 0, d = 0, xy = 0;
        for (int64_t i = 0; i < n; i++)
            d2 += (x[i] - y[i]) * (x[i] - y[i]), y2 += y[i] * y[i], d += x[i] - y[i], xy += x[i] * y[i];
        *rel = sqrt(d2 / y2), *bias = (d / (double)n) / sqrt(y2 / (double)n), *scale = xy / y2 - 1;
    }
    weft_tensor_free(ah), weft_tensor_free(bh), weft_tensor_free(a64), weft_tensor_free(b64);
}

// The tensor-core kernels against the f32 kernels (WEFT_ATTN_MMA=0, on widened copies of the same bf16
// inputs), all on the GPU, at gpt2-small-bytes' shape: the packed op over (B,T,3C) with 12 heads of 64 and
// T = 1024, forward and backward, as the transformer runs it; the backward both as two kernels (the default)
// and in one pass with dq by atomics (WEFT_ATTN_BWD=fused). Both round o and the gradients to bf16 once;
// the tensor-core kernels also round P and dS to bf16 as operands (FlashAttention's choice), so they may
// differ by a few units of 2^-9 per element, but not on average: a bias that training would accumulate fails.
static void test_mma_vs_f32_gpt2(void) {
    const int64_t B = 2, T = 1024, H = 12, D = 64, C = H * D;
    int64_t sz[3] = {B, T, 3 * C};
    weft_tensor *h = rand_dt(3, sz, WEFT_BF16, 77), *w = rand_dt(3, (int64_t[]){B, T, C}, WEFT_BF16, 78);
    weft_tensor *wd = weft_tensor_to(w, WT_CUDA0);
    // 0: the f32 kernels (the reference), 1: tensor cores, two backward kernels, 2: tensor cores, one pass,
    // 3: cuDNN's fused attention (where this build has it and cuDNN runs this shape)
    const char *label[4] = {"f32 kernels", "two kernels", "one pass", "cuDNN"};
    weft_tensor *y[4] = {NULL, NULL, NULL, NULL}, *g[4] = {NULL, NULL, NULL, NULL};
    setenv("WEFT_ATTN_CUDNN", "1", 1);
    const int n = cudnn_on() ? 4 : 3;
    unsetenv("WEFT_ATTN_CUDNN");
    int64_t ran = 0; // cuDNN's runs in k = 3
    for (int k = 0; k < n; k++) {
        if (k == 0) setenv("WEFT_ATTN_MMA", "0", 1);
        if (k == 2) setenv("WEFT_ATTN_BWD", "fused", 1);
        if (k == 3) setenv("WEFT_ATTN_CUDNN", "1", 1), ran = cudnn_runs();
        weft_tensor *x = weft_tensor_to(h, WT_CUDA0);
        weft_tensor_set_requires_grad(x, true);
        y[k] = weft_causal_attention_qkv(x, H, 1 / sqrt((double)D));
        weft_tensor *m = y[k] ? weft_mul(y[k], wd) : NULL, *l = m ? weft_sum(m, 0, NULL, false) : NULL;
        CHECK(l && weft_backward(l, NULL, NULL) == WEFT_OK);
        g[k] = weft_tensor_grad(x) ? weft_tensor_ref(weft_tensor_grad(x)) : NULL;
        weft_tensor_free(m), weft_tensor_free(l), weft_tensor_free(x);
        unsetenv("WEFT_ATTN_MMA");
        unsetenv("WEFT_ATTN_BWD");
        if (k == 3) {
            unsetenv("WEFT_ATTN_CUDNN");
            ran = cudnn_runs() - ran;
            printf("  (2,12,1024,64) bf16 cuDNN: %lld of 2 calls ran on cuDNN\n", (long long)ran);
            CHECK(ran == 2); // (the build has cuDNN, and a GPU that runs this build's sm_90 code has its SDPA)
        }
    }
    for (int k = 1; k < n; k++) {
        CHECK(y[0] && y[k] && g[0] && g[k]);
        if (!(y[0] && y[k] && g[0] && g[k])) continue;
        // (H100, 2026-11-27: rel about 2e-3 for o and 2.7e-3 for the gradients, offsets up to 3e-6)
        double rel, bias, scale;
        err_stats(y[k], y[0], &rel, &bias, &scale);
        printf("  (2,12,1024,64) bf16 %-11s vs f32 kernels: o       rel %.3g, offset %.3g, scale %.3g\n", label[k],
               rel, bias, scale);
        CHECK(rel < 1e-2 && fabs(bias) < 1e-4 && fabs(scale) < 1e-3);
        const char *names[3] = {"grad q", "grad k", "grad v"};
        for (int p = 0; p < 3; p++) {
            weft_tensor *a = weft_narrow(g[k], 2, p * C, C), *b = weft_narrow(g[0], 2, p * C, C);
            err_stats(a, b, &rel, &bias, &scale);
            printf("  (2,12,1024,64) bf16 %-11s vs f32 kernels: %-7s rel %.3g, offset %.3g, scale %.3g\n", label[k],
                   names[p], rel, bias, scale);
            CHECK(rel < 2e-2 && fabs(bias) < 1e-4 && fabs(scale) < 1e-3);
            weft_tensor_free(a), weft_tensor_free(b);
        }
    }
    if (g[1] && g[2]) { // the single pass computes dk and dv as the two kernels do: the same bits
        weft_tensor *a = weft_narrow(g[2], 2, C, 2 * C), *b = weft_narrow(g[1], 2, C, 2 * C);
        wt_check_same("one pass vs two kernels: grad k, grad v", a, b, 0);
        weft_tensor_free(a), weft_tensor_free(b);
    }
    weft_tensor *all[] = {h, w, wd, y[0], y[1], y[2], y[3], g[0], g[1], g[2], g[3]};
    for (int i = 0; i < 11; i++) weft_tensor_free(all[i]);
}


// causal_attention_qkv: one packed (B,T,3C) input, C = H*D.
typedef struct qkv_case {
    int64_t H;
    double scale;
} qkv_case;
static weft_tensor *qkv_fn(weft_tensor *const *in, void *ctx) {
    const qkv_case *c = ctx;
    return weft_causal_attention_qkv(in[0], c->H, c->scale);
}
// qkv = in[0][..., 1:] of a (B,T,3C+1) tensor
static weft_tensor *qkv_narrow_fn(weft_tensor *const *in, void *ctx) {
    const qkv_case *c = ctx;
    weft_tensor *x = weft_narrow(in[0], 2, 1, weft_tensor_size(in[0], 2) - 1);
    weft_tensor *y = x ? weft_causal_attention_qkv(x, c->H, c->scale) : NULL;
    weft_tensor_free(x);
    return y;
}

// The packed op on CUDA against the CPU: f32 and f64 (the f32 kernels on copies of the heads, gradients copied
// into the packed buffer), bf16 and f16 (the tensor-core kernels reading the heads in place and writing the
// gradients into the three blocks of one (B,T,3C) buffer; the widened f32 kernels for D = 48 and D = 4). With
// qkv narrowed out of a (B,T,3C+1) tensor at element 1, its heads are not 16-byte aligned: the tensor-core
// kernels read contiguous copies. And empty batches and sequences.
static void test_packed(void) {
    const struct { int64_t B, T, H, D; } cs[] = {{2, 129, 3, 64}, {1, 64, 2, 32}, {2, 7, 4, 16}, {1, 70, 2, 48}, {1, 33, 3, 4}};
    char what[128];
    for (int i = 0; i < 5; i++) {
        const int64_t B = cs[i].B, T = cs[i].T, H = cs[i].H, D = cs[i].D;
        qkv_case c = {H, 1 / sqrt((double)D)};
        weft_tensor *x64 = wt_rand64(3, (const int64_t[]){B, T, 3 * H * D}, -2, 2, 70 + (uint64_t)i, false);
        snprintf(what, sizeof what, "causal_attention_qkv B=%lld T=%lld H=%lld D=%lld", (long long)B, (long long)T,
                 (long long)H, (long long)D);
        for (int f = 0; f < 2; f++) {
            weft_tensor *x = weft_cast(x64, f ? WEFT_F64 : WEFT_F32);
            wt_cuda_compare(what, qkv_fn, &c, 1, &x, f ? 1e-10 : 1e-4, true);
            weft_tensor_free(x);
        }
        lp_compare(qkv_fn, &c, 1, &x64, WEFT_BF16, 2.5e-2, what);
        lp_compare(qkv_fn, &c, 1, &x64, WEFT_F16, 4e-3, what);
        weft_tensor_free(x64);
    }
    qkv_case c = {2, 1 / sqrt(32.0)};
    weft_tensor *xn = wt_rand64(3, (const int64_t[]){2, 65, 3 * 64 + 1}, -2, 2, 80, false);
    lp_compare(qkv_narrow_fn, &c, 1, &xn, WEFT_BF16, 2.5e-2, "causal_attention_qkv narrowed (misaligned)");
    weft_tensor *xf = weft_cast(xn, WEFT_F32);
    wt_cuda_compare("causal_attention_qkv narrowed f32", qkv_narrow_fn, &c, 1, &xf, 1e-4, true);
    weft_tensor_free(xf);
    weft_tensor_free(xn);
    const int64_t empty[2][3] = {{0, 5, 192}, {2, 0, 192}};
    for (int e = 0; e < 2; e++) {
        weft_tensor *x0 = wt_rand64(3, empty[e], -1, 1, 81, false);
        lp_compare(qkv_fn, &c, 1, &x0, WEFT_BF16, 0, "causal_attention_qkv empty");
        wt_cuda_compare("causal_attention_qkv empty f64", qkv_fn, &c, 1, &x0, 0, true);
        weft_tensor_free(x0);
    }
}

// cuDNN's statistics are weft's lse: a cuDNN forward followed by weft's backward, and weft's forward followed by
// cuDNN's backward, give weft's own gradients (bf16 at (2,3,129,64), T not a multiple of cuDNN's tiles), and
// the two forwards the same lse.
static void test_cudnn_mixed(void) {
    const weft_op_def *fwd = weft_op_find("causal_attention"), *bwd = weft_op_find("causal_attention_backward");
    int64_t sz[4] = {2, 3, 129, 64};
    weft_tensor *x[4]; // q, k, v, go
    for (int i = 0; i < 4; i++) {
        weft_tensor *h = rand_dt(4, sz, WEFT_BF16, 90 + (uint64_t)i);
        x[i] = weft_tensor_to(h, WT_CUDA0);
        weft_tensor_free(h);
    }
    weft_attrs at = {.f = {0.125}};
    // k: which side cuDNN runs (0: neither, 1: the forward, 2: the backward)
    weft_tensor *o[3][WEFT_MAX_OP_OUT] = {{0}}, *g[3][WEFT_MAX_OP_OUT] = {{0}};
    for (int k = 0; k < 3; k++) {
        int64_t r0 = cudnn_runs();
        if (k == 1) setenv("WEFT_ATTN_CUDNN", "1", 1);
        CHECK(weft_op_apply(fwd, 3, x, &at, o[k]) == WEFT_OK);
        unsetenv("WEFT_ATTN_CUDNN");
        if (k == 2) setenv("WEFT_ATTN_CUDNN", "1", 1);
        weft_tensor *in[6] = {x[0], x[1], x[2], o[k][0], o[k][1], x[3]};
        CHECK(o[k][0] && weft_op_apply(bwd, 6, in, &at, g[k]) == WEFT_OK);
        unsetenv("WEFT_ATTN_CUDNN");
        CHECK(cudnn_runs() - r0 == (k ? 1 : 0));
    }
    double rel, bias, scale;
    err_stats(o[1][1], o[0][1], &rel, &bias, &scale); // lse, f32
    printf("  cuDNN lse vs weft's: rel %.3g, offset %.3g\n", rel, bias);
    CHECK(rel < 1e-4 && fabs(bias) < 1e-4); // (a log2-based lse would be off by 30%)
    for (int k = 1; k < 3; k++)
        for (int j = 0; j < 3 && g[k][j] && g[0][j]; j++) {
            err_stats(g[k][j], g[0][j], &rel, &bias, &scale);
            printf("  cuDNN %s: gradient %d vs weft's: rel %.3g, offset %.3g, scale %.3g\n",
                   k == 1 ? "forward + weft backward" : "weft forward + cuDNN backward", j, rel, bias, scale);
            CHECK(rel < 2e-2 && fabs(bias) < 1e-4 && fabs(scale) < 1e-3); // (test_mma_vs_f32_gpt2's bounds)
        }
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < WEFT_MAX_OP_OUT; j++) weft_tensor_free(o[k][j]), weft_tensor_free(g[k][j]);
    for (int i = 0; i < 4; i++) weft_tensor_free(x[i]);
}

// With WEFT_ATTN_CUDNN=1 (where this build has cuDNN): the half-precision cases of test_half and test_packed
// again, now through cuDNN's fused attention wherever cuDNN runs the shape, against the same CPU references and
// tolerances; it says how many calls cuDNN ran (a shape it refuses runs weft's kernels, checked the same way).
static void test_cudnn(void) {
    setenv("WEFT_ATTN_CUDNN", "1", 1);
    if (!cudnn_on()) {
        unsetenv("WEFT_ATTN_CUDNN");
        printf("  cuDNN attention: not in this build\n");
        return;
    }
    int64_t r0 = cudnn_runs();
    test_half();
    test_packed();
    printf("  cuDNN attention: %lld calls ran on cuDNN\n", (long long)(cudnn_runs() - r0));
    CHECK(cudnn_runs() - r0 > 0);
    unsetenv("WEFT_ATTN_CUDNN");
    test_cudnn_mixed();
}

int main(void) {
    WT_CUDA_OR_SKIP();
    g_op = weft_op_find("causal_attention");
    if (!g_op || !weft_op_find("causal_attention_backward")) {
        printf("skipped: causal_attention is not in the op table yet\n");
        return 77;
    }
    RUN(test_shapes);
    RUN(test_odd_head_dims);
    RUN(test_long);
    RUN(test_permuted);
    RUN(test_heads_last);
    RUN(test_head_dim_too_large);
    RUN(test_half);
    RUN(test_autocast);
    RUN(test_packed);
    RUN(test_mma_vs_f32_gpt2);
    RUN(test_cudnn);
    return wt_summary();
}
