// A transformer block under bf16 autocast, as torch.autocast runs it: the
// linear layers (the fused linear ops) run in bf16 and hand bf16 to the next
// bf16 op (attention, the next linear), the residual stream and the layer
// norms stay f32 (type promotion; the fused add + norm reads the attention's
// bf16 output itself), and the parameters' gradients are f32.
// Checked against the f32 block (bf16 tolerances) and by the ops and casts a
// traced forward pass runs.
// The weight cast cache: two micro-batches in one region (forward, backward,
// forward, backward) cast each parameter once and give bit for bit the
// gradients of two regions; leaving the region drops the copies, and the next
// region sees a parameter's new value; a copy made under no-grad does not
// serve a forward that records; tracing casts for itself.
// A stack of blocks (weft_nn_transformer) and a layer norm after it: each
// block's last residual add runs in the next norm's add_layer_norm. The same
// values and gradients as the blocks run one by one (f64), and under bf16 no
// cast of the mlp's output (10 casts a block instead of 11) and no add.
// The cross-entropy loss and a layer norm read a linear layer's bf16 output without a cast.
// weft_autocast_cache_fill (the weights' casts in one cast_multi op as a training step's region starts) gives
// the bits of casts made on first use; cast_multi gives each pair's cast.
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "weft_test.h"

// Every parameter's gradient, flattened in order into out (each CHECKed present and, unless dt < 0, of dtype
// dt); returns the count.
static int64_t param_grads(weft_module *m, int dt, double *out) {
    int64_t at = 0;
    for (int i = 0; i < weft_module_param_count(m); i++) {
        weft_tensor *p = weft_module_param_at(m, i, NULL, 0), *g = weft_tensor_grad(p);
        CHECK(g && (dt < 0 || (int)weft_tensor_dtype(g) == dt));
        if (g) weft_tensor_to_f64(g, out + at, weft_tensor_numel(p));
        at += weft_tensor_numel(p);
    }
    return at;
}

// y = m(x) under autocast ac, loss = sum(y * w): y and every parameter's gradient (flattened, in order).
static void run_once(weft_module *m, weft_tensor *x, weft_tensor *w, weft_dtype ac, double *y_out, double *grads) {
    weft_module_zero_grad(m);
    weft_autocast_set(ac);
    weft_tensor *y = weft_module_forward(m, x);
    weft_autocast_set(WEFT_F32);
    CHECK(y && weft_tensor_dtype(y) == WEFT_F32); // the residual stream stays f32
    if (!y) return;
    weft_tensor_to_f64(y, y_out, weft_tensor_numel(y));
    CHECK(weft_backward(y, w, NULL) == WEFT_OK);
    param_grads(m, WEFT_F32, grads);
    weft_tensor_free(y);
}

// max |a - b| over max |b|
static double rel_err(const double *a, const double *b, int64_t n) {
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs(a[i] - b[i]));
        s = fmax(s, fabs(b[i]));
    }
    return s > 0 ? e / s : e;
}

// An f64 block under bf16 autocast is left alone, norms included: the plain f64 output, bit for bit.
static void test_block_f64(void) {
    weft_generator *gen = weft_generator_create(21);
    weft_module *m = weft_nn_transformer_block(16, 2, gen);
    CHECK(m && weft_module_to_dtype(m, WEFT_F64) == WEFT_OK);
    weft_tensor *x = wt_rand64(WEFT_DIMS(2, 5, 16), -1, 1, 22, false);
    weft_tensor *y0 = weft_module_forward(m, x);
    weft_autocast_set(WEFT_BF16);
    weft_tensor *y1 = weft_module_forward(m, x);
    weft_autocast_set(WEFT_F32);
    CHECK(y0 && y1 && weft_tensor_dtype(y1) == WEFT_F64);
    if (y0 && y1) wt_check_same("f64 block under autocast", y1, y0, 0);
    weft_tensor_free(x), weft_tensor_free(y0), weft_tensor_free(y1);
    weft_module_free(m);
    weft_generator_free(gen);
}

static void test_block_bf16(void) {
    const int64_t B = 2, T = 8, C = 32, nh = 4;
    weft_generator *gen = weft_generator_create(11);
    weft_module *m = weft_nn_transformer_block(C, nh, gen);
    CHECK(m != NULL);
    if (!m) return;
    weft_tensor *x64 = wt_rand64(WEFT_DIMS(B, T, C), -1, 1, 12, false), *x = weft_cast(x64, WEFT_F32);
    weft_tensor *w64 = wt_rand64(WEFT_DIMS(B, T, C), -1, 1, 13, false), *w = weft_cast(w64, WEFT_F32);
    int64_t ny = B * T * C, ng = weft_module_num_elements(m);
    double *y0 = malloc(sizeof(double) * (size_t)ny), *g0 = malloc(sizeof(double) * (size_t)ng);
    double *y1 = malloc(sizeof(double) * (size_t)ny), *g1 = malloc(sizeof(double) * (size_t)ng);
    run_once(m, x, w, WEFT_F32, y0, g0);
    run_once(m, x, w, WEFT_BF16, y1, g1);
    double ey = rel_err(y1, y0, ny), eg = rel_err(g1, g0, ng);
    printf("  bf16 autocast vs f32: output %.3g, gradients %.3g (relative to the largest)\n", ey, eg);
    CHECK(ey > 0 && ey < 2e-2); // it ran in bf16 (8 significant bits), and only that far off
    CHECK(eg < 5e-2);
    // the norms writing bf16 for the linear layers after them give the bits of a cast of their f32 output
    // (WEFT_NORM_HALF_OUT=0), forward and backward
    double *y2 = malloc(sizeof(double) * (size_t)ny), *g2 = malloc(sizeof(double) * (size_t)ng);
    setenv("WEFT_NORM_HALF_OUT", "0", 1);
    run_once(m, x, w, WEFT_BF16, y2, g2);
    unsetenv("WEFT_NORM_HALF_OUT");
    CHECK(rel_err(y2, y1, ny) == 0 && rel_err(g2, g1, ng) == 0);
    // GELU's backward inside proj's backward product (gelu_linear; WEFT_FUSED_GELU_BW=0: linear_gelu's backward
    // pass over proj's input gradient): in f32 the same product and the same loop, so the same bits; in bf16
    // the fused one rounds (g W) ∘ gelu'(h) once where the other rounds g W first, within bf16's rounding
    setenv("WEFT_FUSED_GELU_BW", "0", 1);
    run_once(m, x, w, WEFT_F32, y2, g2);
    CHECK(rel_err(y2, y0, ny) == 0 && rel_err(g2, g0, ng) == 0);
    run_once(m, x, w, WEFT_BF16, y2, g2);
    unsetenv("WEFT_FUSED_GELU_BW");
    double eg2 = rel_err(g2, g1, ng);
    printf("  bf16, GELU's backward fused vs apart: output %.3g, gradients %.3g\n", rel_err(y2, y1, ny), eg2);
    CHECK(rel_err(y2, y1, ny) == 0 && eg2 < 2e-2);
    free(y2);
    free(g2);

    // the ops: two linear products (qkv as one, the attention's proj), one with GELU and the mlp's proj
    // reading GELU's input too (gelu_linear), all in bf16; no matmul of the composed path; casts: each weight
    // and bias down (4 layers: 8), the mlp's output up into the f32 residual add (1); ln1 and ln2 write bf16
    // for the qkv and fc products themselves, and the attention's output goes into add_layer_norm as bf16,
    // which reads it as it is (the residual add fused with ln2)
    CHECK(wt_count_traced_ops(m, x, WEFT_BF16, "linear") == 2);
    CHECK(wt_count_traced_ops(m, x, WEFT_BF16, "gelu_linear") == 1);
    setenv("WEFT_FUSED_GELU_BW", "0", 1);
    CHECK(wt_count_traced_ops(m, x, WEFT_BF16, "linear") == 3 && wt_count_traced_ops(m, x, WEFT_BF16, "gelu_linear") == 0);
    unsetenv("WEFT_FUSED_GELU_BW");
    CHECK(wt_count_traced_ops(m, x, WEFT_BF16, "linear_gelu") == 1);
    CHECK(wt_count_traced_ops(m, x, WEFT_BF16, "matmul") == 0);
    CHECK(wt_count_traced_ops(m, x, WEFT_BF16, "causal_attention_qkv") == 1);
    int casts = wt_count_traced_ops(m, x, WEFT_BF16, "cast");
    printf("  casts in a bf16 block's forward: %d\n", casts);
    CHECK(casts == 9);
    CHECK(wt_count_traced_ops(m, x, WEFT_BF16, "add_layer_norm") == 1);
    CHECK(wt_count_traced_ops(m, x, WEFT_BF16, "layer_norm") == 1);
    setenv("WEFT_FUSED_ADD_NORM", "0", 1); // the add, then ln2: one more cast
    CHECK(wt_count_traced_ops(m, x, WEFT_BF16, "cast") == 10);
    unsetenv("WEFT_FUSED_ADD_NORM");
    setenv("WEFT_NORM_HALF_OUT", "0", 1); // f32 norms: their outputs cast down for the products
    CHECK(wt_count_traced_ops(m, x, WEFT_BF16, "cast") == 11);
    unsetenv("WEFT_NORM_HALF_OUT");
    // the composed path (WEFT_FUSED_LINEAR=0) casts each matmul's output up for its f32 bias add
    setenv("WEFT_FUSED_LINEAR", "0", 1);
    int casts_composed = wt_count_traced_ops(m, x, WEFT_BF16, "cast");
    unsetenv("WEFT_FUSED_LINEAR");
    printf("  with matmul + add: %d\n", casts_composed);
    CHECK(casts_composed > casts);

    free(y0);
    free(g0);
    free(y1);
    free(g1);
    weft_tensor *ts[] = {x64, x, w64, w};
    for (int i = 0; i < 4; i++) weft_tensor_free(ts[i]);
    weft_module_free(m);
    weft_generator_free(gen);
}

// An MLP (linear, GELU, linear) on x under bf16: loss_k = sum(m(x_k) * w) for micro-batches k = 0, 1.
// one_region: both micro-batches (forward then backward each) in one autocast region, else a region each.
// grads: the gradients summed over both, flattened; returns the cache size seen after the second forward.
static int micro_batches(weft_module *m, weft_tensor *const *xs, weft_tensor *w, bool one_region, double *grads) {
    weft_module_zero_grad(m);
    int seen = -1;
    for (int k = 0; k < 2; k++) {
        if (k == 0 || !one_region) weft_autocast_set(WEFT_BF16);
        weft_tensor *y = weft_module_forward(m, xs[k]);
        CHECK(y && weft_tensor_dtype(y) == WEFT_BF16);
        if (k == 1) seen = weft_autocast_cache_size();
        weft_tensor *yf = y ? weft_cast(y, WEFT_F32) : NULL;
        CHECK(yf && weft_backward(yf, w, NULL) == WEFT_OK); // inside the region, as a pipeline schedule runs it
        weft_tensor_free(y);
        weft_tensor_free(yf);
        if (!one_region) {
            weft_autocast_set(WEFT_F32);
            CHECK(weft_autocast_cache_size() == 0);
        }
    }
    weft_autocast_set(WEFT_F32);
    param_grads(m, WEFT_F32, grads);
    return seen;
}

// linear (16 -> 24), GELU, linear (24 -> 8), with biases: 4 parameters for autocast to cast.
static weft_module *mlp(weft_generator *gen) {
    weft_module *m = weft_nn_sequential();
    CHECK(weft_nn_sequential_append(m, weft_nn_linear(16, 24, true, gen)) == WEFT_OK);
    CHECK(weft_nn_sequential_append(m, weft_nn_activation(WEFT_ACT_GELU)) == WEFT_OK);
    CHECK(weft_nn_sequential_append(m, weft_nn_linear(24, 8, true, gen)) == WEFT_OK);
    return m;
}

static void test_weight_cast_cache(void) {
    weft_generator *gen = weft_generator_create(21);
    weft_module *m = mlp(gen);
    weft_tensor *x64[2] = {wt_rand64(WEFT_DIMS(5, 16), -1, 1, 22, false), wt_rand64(WEFT_DIMS(5, 16), -1, 1, 23, false)};
    weft_tensor *xs[2] = {weft_cast(x64[0], WEFT_F32), weft_cast(x64[1], WEFT_F32)};
    weft_tensor *w64 = wt_rand64(WEFT_DIMS(5, 8), -1, 1, 24, false), *w = weft_cast(w64, WEFT_F32);
    int64_t ng = weft_module_num_elements(m);
    double *ga = calloc((size_t)ng, sizeof(double)), *gb = calloc((size_t)ng, sizeof(double));
    // two regions: nothing cached across them; one region: the 4 parameters cast once, reused by the second
    // micro-batch, whose backward runs through the same cast records again
    CHECK(micro_batches(m, xs, w, false, ga) == 4);
    CHECK(micro_batches(m, xs, w, true, gb) == 4);
    double e = 0, s = 0;
    for (int64_t i = 0; i < ng; i++) e = fmax(e, fabs(ga[i] - gb[i])), s = fmax(s, fabs(ga[i]));
    CHECK(s > 0 && e == 0); // the same bf16 copies, the same sums
    CHECK(weft_autocast_cache_size() == 0);

    // the next region sees an update made outside: w1 *= 2 doubles the first layer's pre-activation
    weft_tensor *w1 = weft_module_find(m, "0.weight"), *b1 = weft_module_find(m, "0.bias");
    weft_autocast_set(WEFT_BF16);
    weft_tensor *y0 = weft_module_forward(m, xs[0]);
    weft_autocast_set(WEFT_F32);
    WEFT_NO_GRAD {
        weft_tensor *w2 = weft_mul_scalar(w1, 2.0), *bz = weft_mul_scalar(b1, 2.0);
        CHECK(weft_tensor_copy_(w1, w2) == WEFT_OK && weft_tensor_copy_(b1, bz) == WEFT_OK);
        weft_tensor_free(w2);
        weft_tensor_free(bz);
    }
    weft_autocast_set(WEFT_BF16);
    weft_tensor *y1 = weft_module_forward(m, xs[0]);
    weft_tensor *h = weft_linear(xs[0], w1, b1); // the first layer's new output, in bf16 from the new weights
    CHECK(h && weft_tensor_dtype(h) == WEFT_BF16);
    weft_autocast_set(WEFT_F32);
    double a0[40], a1[40];
    CHECK(y0 && y1 && weft_tensor_numel(y1) == 40);
    if (y0 && y1) {
        weft_tensor_to_f64(y0, a0, 40);
        weft_tensor_to_f64(y1, a1, 40);
        double d = 0;
        for (int i = 0; i < 40; i++) d = fmax(d, fabs(a0[i] - a1[i]));
        CHECK(d > 1e-2); // not the old copies
    }

    // a copy cast under no-grad has no autograd record: a forward that records casts its own
    weft_autocast_set(WEFT_BF16);
    weft_tensor *yn = NULL;
    WEFT_NO_GRAD { yn = weft_module_forward(m, xs[0]); }
    CHECK(weft_autocast_cache_size() == 4);
    weft_module_zero_grad(m);
    weft_tensor *yg = weft_module_forward(m, xs[0]);
    CHECK(weft_autocast_cache_size() == 8);
    weft_tensor *ygf = yg ? weft_cast(yg, WEFT_F32) : NULL;
    CHECK(ygf && weft_backward(ygf, w, NULL) == WEFT_OK);
    CHECK(weft_tensor_grad(w1) != NULL);
    // WEFT_AUTOCAST_CACHE=0, read as a region starts: nothing kept
    weft_autocast_set(WEFT_F32);
    setenv("WEFT_AUTOCAST_CACHE", "0", 1);
    weft_autocast_set(WEFT_BF16);
    weft_tensor *yo = weft_module_forward(m, xs[0]);
    CHECK(yo && weft_autocast_cache_size() == 0);
    weft_tensor_free(yo);
    weft_autocast_set(WEFT_F32);
    unsetenv("WEFT_AUTOCAST_CACHE");
    weft_autocast_set(WEFT_BF16);
    weft_tensor_free(weft_module_forward(m, xs[0]));
    CHECK(weft_autocast_cache_size() == 4);
    weft_tensor_free(weft_module_forward(m, xs[0])); // the second forward reads the same copies
    CHECK(weft_autocast_cache_size() == 4);
    // tracing does not read the cache: the traced forward casts its 4 parameters
    CHECK(wt_count_traced_ops(m, xs[0], WEFT_BF16, "cast") == 5); // and the input x
    CHECK(weft_autocast_get() == WEFT_BF16 && weft_autocast_cache_size() == 4);
    weft_autocast_set(WEFT_F32);
    CHECK(weft_autocast_cache_size() == 0);

    // the LSTM hands autocast its W_ih itself (not a transposed view): cast once for two forwards
    weft_module *lstm = weft_nn_lstm(16, 8, gen);
    weft_tensor *xl = weft_view(xs[0], WEFT_DIMS(1, 5, 16));
    weft_autocast_set(WEFT_BF16);
    weft_tensor *l1 = weft_module_forward(lstm, xl), *l2 = weft_module_forward(lstm, xl);
    CHECK(l1 && l2 && weft_autocast_cache_size() == 1);
    weft_autocast_set(WEFT_F32);
    weft_tensor_free(l1);
    weft_tensor_free(l2);
    weft_tensor_free(xl);
    weft_module_free(lstm);

    weft_tensor *ts[] = {x64[0], x64[1], xs[0], xs[1], w64, w, y0, y1, h, yn, yg, ygf};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) weft_tensor_free(ts[i]);
    free(ga);
    free(gb);
    weft_module_free(m);
    weft_generator_free(gen);
}

// One region of the MLP under bf16: fill the cache from ps (unless n < 0), then y = m(x) and loss = sum(y * w);
// y and every gradient into out (flattened); returns the cache size right after the fill.
static int fill_region(weft_module *m, weft_tensor *const *ps, int n, weft_tensor *x, weft_tensor *w, double *out) {
    weft_module_zero_grad(m);
    weft_autocast_set(WEFT_BF16);
    CHECK(n < 0 || weft_autocast_cache_fill(ps, n) == WEFT_OK);
    int filled = weft_autocast_cache_size();
    weft_tensor *y = weft_module_forward(m, x), *yf = y ? weft_cast(y, WEFT_F32) : NULL;
    CHECK(yf && weft_autocast_cache_size() == 4); // every parameter cast once, filled or not
    weft_autocast_set(WEFT_F32);
    CHECK(yf && weft_backward(yf, w, NULL) == WEFT_OK);
    if (yf) weft_tensor_to_f64(yf, out, 40);
    param_grads(m, WEFT_F32, out + 40);
    weft_tensor_free(y);
    weft_tensor_free(yf);
    return filled;
}

// The order in which the backward of sum(m(x) * w) under bf16 reaches the 4 parameters ('0'..'3') and a copy of
// x that requires grad ('x'), into order (5 characters); the region's cache filled from ps first unless n < 0.
static char *g_order;
static void note_grad(weft_tensor *leaf, void *user) {
    (void)leaf;
    size_t k = strlen(g_order);
    g_order[k] = *(const char *)user, g_order[k + 1] = 0;
}
static void hook_order(weft_module *m, weft_tensor *x, weft_tensor *const *ps, int n, char *order) {
    static const char names[] = "0123x";
    weft_tensor *xg = weft_tensor_detach(x);
    weft_tensor_set_requires_grad(xg, true);
    weft_tensor *leaves[5] = {ps[0], ps[1], ps[2], ps[3], xg};
    int h[5];
    for (int i = 0; i < 5; i++) h[i] = weft_tensor_add_grad_hook(leaves[i], note_grad, (void *)&names[i]);
    order[0] = 0;
    g_order = order;
    weft_module_zero_grad(m);
    weft_autocast_set(WEFT_BF16);
    CHECK(n < 0 || weft_autocast_cache_fill(ps, n) == WEFT_OK);
    weft_tensor *y = weft_module_forward(m, xg), *yf = y ? weft_cast(y, WEFT_F32) : NULL;
    weft_autocast_set(WEFT_F32);
    weft_tensor *w = weft_tensor_ones(weft_tensor_ndim(yf), weft_tensor_sizes(yf), WEFT_F32);
    CHECK(yf && weft_backward(yf, w, NULL) == WEFT_OK && strlen(order) == 5);
    for (int i = 0; i < 5; i++) CHECK(weft_tensor_remove_grad_hook(leaves[i], h[i]) == WEFT_OK);
    weft_tensor *ts[] = {xg, y, yf, w};
    for (int i = 0; i < 4; i++) weft_tensor_free(ts[i]);
}

// weft_autocast_cache_fill (a training loop's weight casts in one cast_multi op as its region starts) casts
// what the thread's previous region cast, here the MLP's 4 parameters, and not a tensor no op read nor one
// listed twice; the forward and backward after it give bit for bit the values and gradients of copies cast
// on first use, also after an update made between regions, and reach the parameters in the same order. Outside a region and with
// WEFT_AUTOCAST_CACHE=0 it does nothing; a copy filled under no-grad serves only no-grad ops.
static void test_cache_fill(void) {
    weft_generator *gen = weft_generator_create(31);
    weft_module *m = mlp(gen);
    weft_tensor *x64 = wt_rand64(WEFT_DIMS(5, 16), -1, 1, 32, false), *x = weft_cast(x64, WEFT_F32);
    weft_tensor *w64 = wt_rand64(WEFT_DIMS(5, 8), -1, 1, 33, false), *w = weft_cast(w64, WEFT_F32);
    weft_tensor *other64 = wt_rand64(WEFT_DIMS(16, 16), -1, 1, 34, false), *other = weft_cast(other64, WEFT_F32);
    weft_tensor_set_requires_grad(other, true);
    weft_tensor *ps[6];
    for (int i = 0; i < 4; i++) ps[i] = weft_module_param_at(m, i, NULL, 0);
    ps[4] = other, ps[5] = ps[1];
    int64_t n = 40 + weft_module_num_elements(m);
    double *lazy = calloc((size_t)n, sizeof(double)), *filled = calloc((size_t)n, sizeof(double));
    // outside a region: nothing
    CHECK(weft_autocast_cache_fill(ps, 6) == WEFT_OK && weft_autocast_cache_size() == 0);
    // a region that casts only `other` (the hint of what the MLP's first region has to fill)
    weft_autocast_set(WEFT_BF16);
    weft_tensor *o = weft_matmul(x, other);
    weft_autocast_set(WEFT_F32);
    weft_tensor_free(o);
    CHECK(fill_region(m, ps, 4, x, w, lazy) == 0); // nothing of the MLP cast last time: all cast on first use
    CHECK(fill_region(m, ps, 6, x, w, filled) == 4);
    double d = 0;
    for (int64_t i = 0; i < n; i++) d = fmax(d, fabs(lazy[i] - filled[i]));
    CHECK(d == 0);
    // a second fill in the region adds nothing; copies no op reads are not hinted to the next region
    weft_autocast_set(WEFT_BF16);
    CHECK(weft_autocast_cache_fill(ps, 6) == WEFT_OK && weft_autocast_cache_size() == 4);
    CHECK(weft_autocast_cache_fill(ps, 6) == WEFT_OK && weft_autocast_cache_size() == 4);
    weft_autocast_set(WEFT_F32);
    weft_autocast_set(WEFT_BF16);
    CHECK(weft_autocast_cache_fill(ps, 6) == WEFT_OK && weft_autocast_cache_size() == 0);
    weft_tensor_free(weft_module_forward(m, x)); // first-use casts: hinted again
    weft_autocast_set(WEFT_F32);

    // the cast records come where first-use casts make them: the backward reaches each parameter right after
    // the op that read its copy (x, the input, last), with or without the fill, so DDP's hooks fire as early
    char lazy_order[8], fill_order[8];
    hook_order(m, x, ps, -1, lazy_order);
    hook_order(m, x, ps, 4, fill_order);
    CHECK(!strcmp(lazy_order, fill_order) && lazy_order[4] == 'x');

    // an update between regions (w1 *= 2): the filled copies are the new values, as first-use copies are
    WEFT_NO_GRAD {
        weft_tensor *w2 = weft_mul_scalar(ps[0], 2.0);
        CHECK(weft_tensor_copy_(ps[0], w2) == WEFT_OK);
        weft_tensor_free(w2);
    }
    double *after = calloc((size_t)n, sizeof(double));
    CHECK(fill_region(m, ps, 6, x, w, after) == 4);
    setenv("WEFT_AUTOCAST_CACHE", "0", 1); // and with the cache off, fill does nothing: first-use casts
    weft_module_zero_grad(m);
    weft_autocast_set(WEFT_BF16);
    CHECK(weft_autocast_cache_fill(ps, 6) == WEFT_OK && weft_autocast_cache_size() == 0);
    weft_autocast_set(WEFT_F32);
    unsetenv("WEFT_AUTOCAST_CACHE");
    CHECK(fill_region(m, ps, -1, x, w, lazy) == 0);
    double moved = 0;
    d = 0;
    for (int64_t i = 0; i < n; i++) d = fmax(d, fabs(lazy[i] - after[i])), moved = fmax(moved, fabs(after[i] - filled[i]));
    CHECK(d == 0 && moved > 1e-2);

    // under no-grad: copies without autograd records, which a recording forward does not take
    weft_autocast_set(WEFT_BF16);
    WEFT_NO_GRAD {
        CHECK(weft_autocast_cache_fill(ps, 6) == WEFT_OK && weft_autocast_cache_size() == 4);
        weft_tensor_free(weft_module_forward(m, x));
        CHECK(weft_autocast_cache_size() == 4);
    }
    weft_tensor_free(weft_module_forward(m, x));
    CHECK(weft_autocast_cache_size() == 8);
    // bad arguments
    CHECK(weft_autocast_cache_fill(NULL, 2) != WEFT_OK && wt_error_has("autocast_cache_fill"));
    CHECK(weft_autocast_cache_fill(ps, -1) != WEFT_OK && wt_error_has("autocast_cache_fill"));
    CHECK(weft_autocast_cache_fill(NULL, 0) == WEFT_OK);
    weft_autocast_set(WEFT_F32);

    free(lazy);
    free(filled);
    free(after);
    weft_tensor *ts[] = {x64, x, w64, w, other64, other};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) weft_tensor_free(ts[i]);
    weft_module_free(m);
    weft_generator_free(gen);
}

// cast_multi: every pair as cast computes it, bit for bit, whatever the dtypes and layouts (a transposed
// source, a destination of another float type, an empty pair); mismatched pairs are refused naming the op.
static void test_cast_multi(void) {
    const weft_op_def *op = weft_op_find("cast_multi");
    CHECK(op != NULL);
    if (!op) return;
    weft_tensor *a = wt_rand64(WEFT_DIMS(7, 5), -3, 3, 41, false), *b = weft_cast(a, WEFT_F32);
    weft_tensor *bt = weft_transpose(b, 0, 1), *e = weft_tensor_zeros(1, (const int64_t[]){0}, WEFT_F32);
    weft_tensor *src[4] = {b, bt, a, e};
    weft_dtype to[4] = {WEFT_BF16, WEFT_F16, WEFT_BF16, WEFT_BF16};
    weft_tensor *in[8];
    for (int j = 0; j < 4; j++) {
        in[j] = src[j];
        in[4 + j] = weft_tensor_zeros(weft_tensor_ndim(src[j]), weft_tensor_sizes(src[j]), to[j]);
    }
    CHECK(weft_op_apply_into(op, 8, in, NULL, NULL) == WEFT_OK);
    for (int j = 0; j < 4; j++) {
        weft_tensor *c = weft_cast(src[j], to[j]);
        wt_check_same("cast_multi pair", in[4 + j], c, 0);
        weft_tensor_free(c);
    }
    weft_tensor *bad[2] = {b, e};
    CHECK(weft_op_apply_into(op, 2, bad, NULL, NULL) != WEFT_OK && wt_error_has("cast_multi"));
    CHECK(weft_op_apply_into(op, 3, in, NULL, NULL) != WEFT_OK && wt_error_has("cast_multi"));
    weft_tensor *nc[2] = {bt, bt}; // a destination that is not contiguous
    CHECK(weft_op_apply_into(op, 2, nc, NULL, NULL) != WEFT_OK && wt_error_has("contiguous"));
    for (int j = 0; j < 4; j++) weft_tensor_free(in[4 + j]);
    weft_tensor *ts[] = {a, b, bt, e};
    for (int i = 0; i < 4; i++) weft_tensor_free(ts[i]);
}

// y = ln(stack(x)), loss sum(y * w): y, then the gradients of x and of every parameter, flattened into out.
// one_by_one: each block's own forward (the residual added there) and then the norm's.
static int64_t stack_run(weft_module *seq, weft_tensor *x0, weft_tensor *w, bool one_by_one, double *out) {
    weft_module_zero_grad(seq);
    weft_tensor *x = weft_tensor_detach(x0);
    weft_tensor_set_requires_grad(x, true);
    weft_tensor *y;
    if (one_by_one) {
        weft_module *stack = weft_module_child_at(seq, 0);
        weft_tensor *h = weft_tensor_ref(x);
        for (int i = 0; i < weft_module_child_count(stack) && h; i++) {
            weft_tensor *n = weft_module_forward(weft_module_child_at(stack, i), h);
            weft_tensor_free(h);
            h = n;
        }
        y = h ? weft_module_forward(weft_module_child_at(seq, 1), h) : NULL;
        weft_tensor_free(h);
    } else {
        y = weft_module_forward(seq, x);
    }
    CHECK(y && weft_backward(y, w, NULL) == WEFT_OK);
    int64_t at = 0;
    if (y) weft_tensor_to_f64(y, out, weft_tensor_numel(y)), at += weft_tensor_numel(y);
    weft_tensor *gx = weft_tensor_grad(x);
    CHECK(gx != NULL);
    if (gx) weft_tensor_to_f64(gx, out + at, weft_tensor_numel(x));
    at += weft_tensor_numel(x);
    at += param_grads(seq, -1, out + at);
    weft_tensor_free(y);
    weft_tensor_free(x);
    return at;
}

static void test_stack(void) {
    const int64_t B = 2, T = 6, C = 16, nh = 2;
    weft_generator *gen = weft_generator_create(31);
    weft_module *seq = weft_nn_sequential();
    CHECK(weft_nn_sequential_append(seq, weft_nn_transformer(C, nh, 3, gen)) == WEFT_OK);
    CHECK(weft_nn_sequential_append(seq, weft_nn_layer_norm(C, 1e-5)) == WEFT_OK);
    CHECK(weft_module_child_count(weft_module_child_at(seq, 0)) == 3 &&
          !strcmp(weft_module_kind(weft_module_child_at(seq, 0)), "sequential")); // a pipeline splits it by block
    CHECK(weft_module_find(seq, "0.2.mlp.proj.bias") != NULL);                  // the names of a sequential's
    CHECK(weft_module_to_dtype(seq, WEFT_F64) == WEFT_OK);
    weft_tensor *x = wt_rand64(WEFT_DIMS(B, T, C), -1, 1, 32, false), *w = wt_rand64(WEFT_DIMS(B, T, C), -1, 1, 33, false);
    int64_t n = 2 * B * T * C + weft_module_num_elements(seq);
    double *a = calloc((size_t)n, sizeof(double)), *b = calloc((size_t)n, sizeof(double));
    CHECK(stack_run(seq, x, w, false, a) == n);
    CHECK(stack_run(seq, x, w, true, b) == n);
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) e = fmax(e, fabs(a[i] - b[i])), s = fmax(s, fabs(b[i]));
    printf("  stack + norm vs block by block (f64): %.3g of %.3g\n", e, s);
    CHECK(s > 0 && e < 1e-12 * s);
    // the stack alone: its output is the last block's x1 + h
    weft_tensor *ys = weft_module_forward(weft_module_child_at(seq, 0), x);
    weft_tensor *h = weft_tensor_ref(x);
    for (int i = 0; i < 3 && h; i++) {
        weft_tensor *nx = weft_module_forward(weft_module_child_at(weft_module_child_at(seq, 0), i), h);
        weft_tensor_free(h);
        h = nx;
    }
    CHECK(ys && h);
    if (ys && h) wt_check_same("stack alone vs block by block", ys, h, 1e-12);
    // a wrong input is the block's error, as without the stack
    weft_tensor *x2d = wt_rand64(WEFT_DIMS(T, C), -1, 1, 34, false), *bad = weft_module_forward(seq, x2d);
    CHECK(bad == NULL && wt_error_has("transformer_block: expected input (B,T,16)"));
    weft_tensor_free(x2d);
    weft_tensor_free(ys);
    weft_tensor_free(h);

    // bf16: casts and ops of the traced forward, against one block's 9: the weights' 8 a block (each mlp
    // output goes into the next add_layer_norm as bf16)
    CHECK(weft_module_to_dtype(seq, WEFT_F32) == WEFT_OK);
    weft_tensor *xf = weft_cast(x, WEFT_F32);
    CHECK(wt_count_traced_ops(seq, xf, WEFT_BF16, "cast") == 3 * 8);
    CHECK(wt_count_traced_ops(seq, xf, WEFT_BF16, "add") == 0);
    CHECK(wt_count_traced_ops(seq, xf, WEFT_BF16, "add_layer_norm") == 3 + 2 + 1); // ln2s, ln1s after block 0, the norm
    CHECK(wt_count_traced_ops(seq, xf, WEFT_BF16, "layer_norm") == 1);            // block 0's ln1
    setenv("WEFT_FUSED_ADD_NORM", "0", 1); // every add apart, each mlp output cast up for its add
    CHECK(wt_count_traced_ops(seq, xf, WEFT_BF16, "cast") == 3 * 10);
    unsetenv("WEFT_FUSED_ADD_NORM");
    free(a);
    free(b);
    weft_tensor_free(x);
    weft_tensor_free(w);
    weft_tensor_free(xf);
    weft_module_free(seq);
    weft_generator_free(gen);
}

// The casts of a traced forward of m under bf16 followed by after(y) (y's consumer), and whether op `name` ran.
static int traced_casts(weft_module *m, weft_tensor *x, weft_tensor *(*after)(weft_tensor *, void *), void *ctx,
                        const char *name) {
    weft_graph *g = weft_graph_new();
    int casts = -1, seen = 0;
    if (g && weft_graph_trace_begin(g) == WEFT_OK) {
        weft_graph_trace_input(g, x, "x");
        weft_autocast_set(WEFT_BF16);
        weft_tensor *y = weft_module_forward(m, x), *l = y ? after(y, ctx) : NULL;
        weft_autocast_set(WEFT_F32);
        CHECK(l != NULL);
        if (l) weft_graph_trace_output(g, l);
        weft_graph_trace_end(g);
        casts = 0;
        for (int i = 0; i < weft_graph_node_count(g); i++) {
            const char *op = weft_graph_node_op(g, (weft_node_id){i});
            casts += op && !strcmp(op, "cast");
            seen += op && !strcmp(op, name);
        }
        weft_tensor_free(y);
        weft_tensor_free(l);
    }
    weft_graph_free(g);
    return seen == 1 ? casts : -1;
}

static weft_tensor *ce_after(weft_tensor *y, void *t) { return weft_cross_entropy(y, t); }
static weft_tensor *ln_after(weft_tensor *y, void *ln) { return weft_module_forward(ln, y); }
static weft_tensor *sm_after(weft_tensor *y, void *lg) { return lg ? weft_log_softmax(y, 1) : weft_softmax(y, 1); }

// The loss reads the last linear layer's bf16 logits as they are: a traced forward + cross-entropy casts
// only the input and the two parameters (no f32 copy of the logits), the loss is f32 and equals the f64
// cross-entropy of the bf16 logits, and the gradients reach the f32 parameters. A layer norm after a linear
// layer reads its bf16 output the same way: f32 out, f32 gradients of both layers' parameters. So do softmax
// and log_softmax (f32 out, no cast of their input).
// An embedding then a recurrent layer (LSTM, GRU, RNN) under bf16 autocast, its input gates folded into the table
// (a bf16 (V,G*H) table looked up: the lookup's gradient is a bf16 embedding_backward) and not: both run, agree
// with each other within bf16's rounding, and with f32 within what 8 significant bits allow over 12 steps.
static void test_recurrent_bf16(void) {
    const int64_t V = 12, I = 16, H = 8, B = 3, T = 12;
    int64_t idv[B * T];
    for (int64_t i = 0; i < B * T; i++) idv[i] = (i * 5 + i / 7) % V;
    weft_tensor *ids = weft_tensor_from_data(idv, WEFT_DIMS(B, T), WEFT_I64);
    weft_tensor *w64 = wt_rand64(WEFT_DIMS(B, T, H), -1, 1, 81, false), *w = weft_cast(w64, WEFT_F32);
    for (int kind = 0; kind < 3; kind++) {
        weft_generator *gen = weft_generator_create(80);
        weft_module *m = weft_nn_sequential();
        CHECK(weft_nn_sequential_append(m, weft_nn_embedding(V, I, gen)) == WEFT_OK);
        weft_module *rec = kind == 0 ? weft_nn_lstm(I, H, gen) : kind == 1 ? weft_nn_gru(I, H, gen)
                                                                         : weft_nn_rnn(I, H, WEFT_ACT_TANH, gen);
        CHECK(weft_nn_sequential_append(m, rec) == WEFT_OK);
        int64_t ny = B * T * H, ng = weft_module_num_elements(m);
        double *y[3], *g[3];
        for (int r = 0; r < 3; r++) { // f32 folded, bf16 folded, bf16 not folded
            y[r] = malloc(sizeof(double) * (size_t)ny);
            g[r] = malloc(sizeof(double) * (size_t)ng);
            if (r == 2) setenv("WEFT_LSTM_FOLD", "0", 1);
            weft_module_zero_grad(m);
            weft_autocast_set(r ? WEFT_BF16 : WEFT_F32);
            weft_tensor *out = weft_module_forward(m, ids), *o32 = out ? weft_cast(out, WEFT_F32) : NULL;
            weft_autocast_set(WEFT_F32);
            weft_tensor *ow = o32 ? weft_mul(o32, w) : NULL, *l = ow ? weft_sum(ow, 0, NULL, false) : NULL;
            CHECK(l && weft_backward(l, NULL, NULL) == WEFT_OK);
            if (o32) weft_tensor_to_f64(o32, y[r], ny);
            param_grads(m, WEFT_F32, g[r]);
            unsetenv("WEFT_LSTM_FOLD");
            weft_tensor *ts[] = {out, o32, ow, l};
            for (int i = 0; i < 4; i++) weft_tensor_free(ts[i]);
        }
        double ey = rel_err(y[1], y[0], ny), eg = rel_err(g[1], g[0], ng);
        printf("  %s under bf16 autocast vs f32: output %.3g, gradients %.3g\n", weft_module_kind(rec), ey, eg);
        CHECK(ey > 0 && ey < 2e-2 && eg < 3e-2);
        CHECK(rel_err(y[2], y[1], ny) < 2e-2 && rel_err(g[2], g[1], ng) < 3e-2);
        for (int r = 0; r < 3; r++) {
            free(y[r]);
            free(g[r]);
        }
        weft_module_free(m);
        weft_generator_free(gen);
    }
    weft_tensor_free(ids);
    weft_tensor_free(w64);
    weft_tensor_free(w);
}

static void test_reads_bf16(void) {
    weft_generator *gen = weft_generator_create(7);
    weft_module *m = weft_nn_linear(16, 10, true, gen), *ln = weft_nn_layer_norm(10, 1e-5);
    weft_tensor *x = wt_rand64(WEFT_DIMS(6, 16), -1, 1, 3, false), *xf = weft_cast(x, WEFT_F32);
    int64_t tv[6] = {0, 9, 3, 3, 7, 1};
    weft_tensor *t = weft_tensor_from_data(tv, WEFT_DIMS(6), WEFT_I64);
    CHECK(traced_casts(m, xf, ce_after, t, "cross_entropy") == 3);
    CHECK(traced_casts(m, xf, ln_after, ln, "layer_norm") == 3);
    CHECK(traced_casts(m, xf, sm_after, NULL, "softmax") == 3);
    CHECK(traced_casts(m, xf, sm_after, (void *)1, "log_softmax") == 3);

    weft_autocast_set(WEFT_BF16);
    weft_tensor *y = weft_module_forward(m, xf), *l = y ? weft_cross_entropy(y, t) : NULL;
    weft_tensor *n = y ? weft_module_forward(ln, y) : NULL;
    weft_autocast_set(WEFT_F32);
    CHECK(y && l && n && weft_tensor_dtype(y) == WEFT_BF16 && weft_tensor_dtype(l) == WEFT_F32 &&
          weft_tensor_dtype(n) == WEFT_F32);
    if (y && l && n) {
        double yv[60], ref = 0;
        weft_tensor_to_f64(y, yv, 60);
        for (int r = 0; r < 6; r++) {
            double mx = yv[r * 10], s = 0;
            for (int c = 1; c < 10; c++) mx = fmax(mx, yv[r * 10 + c]);
            for (int c = 0; c < 10; c++) s += exp(yv[r * 10 + c] - mx);
            ref += (mx + log(s) - yv[r * 10 + tv[r]]) / 6;
        }
        CHECK_NEAR(weft_tensor_item(l), ref, 1e-5);
        weft_tensor *ns = weft_sum(n, 0, NULL, false), *tot = ns ? weft_add(l, ns) : NULL;
        CHECK(tot && weft_backward(tot, NULL, NULL) == WEFT_OK);
        double gr[170];
        CHECK(param_grads(m, WEFT_F32, gr) == 170);
        CHECK(param_grads(ln, WEFT_F32, gr) == 20);
        weft_tensor_free(ns);
        weft_tensor_free(tot);
    }
    weft_tensor *fr[] = {x, xf, t, y, l, n};
    for (int i = 0; i < 6; i++) weft_tensor_free(fr[i]);
    weft_module_free(m);
    weft_module_free(ln);
    weft_generator_free(gen);
}

int main(void) {
    RUN(test_block_bf16);
    RUN(test_block_f64);
    RUN(test_weight_cast_cache);
    RUN(test_cache_fill);
    RUN(test_cast_multi);
    RUN(test_stack);
    RUN(test_reads_bf16);
    RUN(test_recurrent_bf16);
    return wt_summary();
}
