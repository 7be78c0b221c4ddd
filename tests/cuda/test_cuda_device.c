// The CUDA device: without a GPU (CI), the backend reports no device and
// every CUDA request is an error that names cuda:0 and says why; with one,
// copies, async ordering, streams/events, the caching allocator's statistics
// and out-of-memory message, and matmul (cuBLAS) against the CPU.
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"

static void test_no_gpu(void) {
    CHECK(weft_device_count(WEFT_CUDA) == 0);
    CHECK(!weft_device_available(WT_CUDA0));
    weft_tensor *t = weft_tensor_ones(WEFT_DIMS(3), WEFT_F32);
    weft_tensor *d = weft_tensor_to(t, WT_CUDA0);
    CHECK(d == NULL);
    CHECK(wt_error_has("cuda:0") && wt_error_has("not available"));
    CHECK(weft_device_set_default(WT_CUDA0) != WEFT_OK);
    CHECK(weft_device_get_default().type == WEFT_CPU);
    CHECK(weft_stream_create(WT_CUDA0) == NULL);
    weft_memory_stats st;
    CHECK(weft_memory_stats_get(WT_CUDA0, &st) != WEFT_OK);
    // on the CPU the device pointer is the host pointer (a view's too)
    weft_tensor *v = weft_narrow(t, 0, 1, 2);
    CHECK(weft_tensor_device_ptr(v) == weft_tensor_data(v) && weft_tensor_data(v) != NULL);
    CHECK((char *)weft_tensor_device_ptr(v) == (char *)weft_tensor_device_ptr(t) + sizeof(float));
    CHECK(weft_tensor_device_ptr(NULL) == NULL);
    weft_tensor_free(v);
    weft_tensor_free(t);
}

static void test_copies(void) {
    double v[1000];
    wt_vals(v, 1000, -5, 5, 1);
    weft_tensor *h = weft_tensor_from_data(v, WEFT_DIMS(10, 100), WEFT_F64);
    weft_tensor *d = weft_tensor_to(h, WT_CUDA0);
    CHECK(d && weft_device_equal(weft_tensor_device(d), WT_CUDA0));
    // a strided view copied on the device, then back
    weft_tensor *dt = weft_transpose(d, 0, 1), *dtc = weft_tensor_contiguous(dt);
    weft_tensor *ht = weft_transpose(h, 0, 1), *htc = weft_tensor_contiguous(ht);
    wt_check_same("transpose round trip", dtc, htc, 0);
    // converting copies: f64 -> f32 -> bf16 -> f32 on the device vs the CPU
    weft_tensor *d32 = weft_cast(d, WEFT_F32), *dbf = weft_cast(d32, WEFT_BF16), *dback = weft_cast(dbf, WEFT_F32);
    weft_tensor *h32 = weft_cast(h, WEFT_F32), *hbf = weft_cast(h32, WEFT_BF16), *hback = weft_cast(hbf, WEFT_F32);
    wt_check_same("bf16 round trip", dback, hback, 0);
    // async ordering: many queued device copies, then one read
    weft_tensor *acc = weft_tensor_clone(d);
    for (int i = 0; i < 50; i++) {
        weft_tensor *n = weft_tensor_clone(acc);
        weft_tensor_free(acc);
        acc = n;
    }
    wt_check_same("50 queued clones", acc, h, 0);
    weft_tensor *objs[] = {h, d, dt, dtc, ht, htc, d32, dbf, dback, h32, hbf, hback, acc};
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) weft_tensor_free(objs[i]);
}

static void test_streams_events(void) {
    weft_stream *s = weft_stream_create(WT_CUDA0);
    weft_event *e = weft_event_create(WT_CUDA0);
    CHECK(s && e);
    CHECK(weft_stream_set_current(WT_CUDA0, s) == WEFT_OK);
    weft_tensor *h = weft_tensor_arange(0, 1 << 20, 1, WEFT_F32);
    weft_tensor *d = weft_tensor_to(h, WT_CUDA0), *d2 = weft_mul_scalar(d, 2);
    CHECK(weft_event_record(e, s) == WEFT_OK);
    CHECK(weft_event_synchronize(e) == WEFT_OK);
    CHECK(weft_event_query(e));
    CHECK(weft_stream_set_current(WT_CUDA0, NULL) == WEFT_OK);
    CHECK(weft_stream_synchronize(s) == WEFT_OK && weft_stream_query(s));
    // work queued on s, read on the default stream after s was synchronised
    double x = -1;
    CHECK(weft_tensor_get(d2, (int64_t[]){777777}, &x) == WEFT_OK);
    CHECK_NEAR(x, 2.0 * 777777, 0);
    weft_tensor_free(h);
    weft_tensor_free(d);
    weft_tensor_free(d2);
    weft_event_destroy(e);
    weft_stream_destroy(s);
}

static void test_allocator(void) {
    weft_memory_stats s0, s1, s2;
    weft_memory_empty_cache(WT_CUDA0);
    CHECK(weft_memory_stats_get(WT_CUDA0, &s0) == WEFT_OK);
    weft_tensor *a = weft_tensor_zeros_like(wt_keep(weft_tensor_to(wt_keep(weft_tensor_ones(WEFT_DIMS(1000), WEFT_F32)), WT_CUDA0)));
    CHECK(weft_memory_stats_get(WT_CUDA0, &s1) == WEFT_OK);
    CHECK(s1.bytes_in_use >= s0.bytes_in_use + 4096); // two 4000-byte tensors, rounded to 512
    weft_tensor_free(a);
    wt_drop_all();
    CHECK(weft_memory_stats_get(WT_CUDA0, &s2) == WEFT_OK);
    CHECK(s2.bytes_in_use == s0.bytes_in_use);
    CHECK(s2.bytes_cached > 0); // kept for reuse
    // a second round is served from the cache
    weft_tensor *b = weft_tensor_to(wt_keep(weft_tensor_ones(WEFT_DIMS(1000), WEFT_F32)), WT_CUDA0);
    weft_memory_stats s3;
    weft_memory_stats_get(WT_CUDA0, &s3);
    CHECK(s3.n_system_allocs == s2.n_system_allocs);
    CHECK(s3.n_cache_hits > s2.n_cache_hits);
    weft_tensor_free(b);
    wt_drop_all();
    // far more than any GPU has: an error that says what is in use and cached
    weft_tensor *huge = weft_tensor_empty_on(WEFT_DIMS((int64_t)1 << 40), WEFT_F32, WT_CUDA0);
    CHECK(huge == NULL);
    CHECK(wt_error_has("out of memory") && wt_error_has("cuda:0"));
}

// matmul through cuBLAS against OpenBLAS on the CPU.
static weft_tensor *mm(weft_tensor *const *in, void *ctx) {
    int mode = *(int *)ctx;
    if (mode == 1) { // a transposed view as the right operand
        weft_tensor *bt = weft_transpose(in[1], -1, -2), *r = weft_matmul(in[0], bt);
        weft_tensor_free(bt);
        return r;
    }
    return weft_matmul(in[0], in[1]);
}

static void test_matmul(void) {
    struct { int na, nb; int64_t a[4], b[4]; int mode; } cases[] = {
        {2, 2, {33, 17}, {17, 65}, 0},          // one product
        {3, 2, {4, 33, 17}, {17, 65}, 0},       // stacked left, shared right
        {3, 3, {4, 33, 17}, {4, 17, 65}, 0},    // strided batched
        {4, 3, {2, 3, 8, 5}, {3, 5, 7}, 0},     // broadcast batch dims
        {3, 3, {4, 33, 17}, {4, 65, 17}, 1},    // right operand transposed (a view)
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int f = 0; f < 2; f++) {
            weft_dtype dt = f ? WEFT_F64 : WEFT_F32;
            weft_tensor *a64 = wt_rand64(cases[c].na, cases[c].a, -1, 1, 10 + c, false);
            weft_tensor *b64 = wt_rand64(cases[c].nb, cases[c].b, -1, 1, 20 + c, false);
            weft_tensor *in[2] = {weft_cast(a64, dt), weft_cast(b64, dt)};
            char what[64];
            snprintf(what, sizeof what, "matmul case %zu %s", c, weft_dtype_name(dt));
            wt_cuda_compare(what, mm, &cases[c].mode, 2, in, f ? 1e-12 : 1e-5, true);
            weft_tensor_free(a64);
            weft_tensor_free(b64);
            weft_tensor_free(in[0]);
            weft_tensor_free(in[1]);
        }
    }
}

// Async ordering: a few training steps of a small MLP give the same bits
// whether every op is waited for (WEFT_CUDA_SYNC=1) or not.
static void mlp_steps(double *out, int n_out) {
    weft_generator *g = weft_generator_create(3);
    weft_device prev = weft_device_get_default();
    weft_device_set_default(WT_CUDA0);
    weft_module *net = weft_nn_sequential();
    weft_nn_sequential_append(net, weft_nn_linear(20, 64, true, g));
    weft_nn_sequential_append(net, weft_nn_activation(WEFT_ACT_GELU));
    weft_nn_sequential_append(net, weft_nn_linear(64, 5, true, g));
    weft_device_set_default(prev);
    int np = weft_module_param_count(net);
    weft_tensor *ps[8];
    for (int i = 0; i < np && i < 8; i++) ps[i] = weft_module_param_at(net, i, NULL, 0);
    weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_ADAM);
    weft_optim *opt = weft_optim_create(&o, np, ps, NULL);
    weft_tensor *x = wt_keep(weft_tensor_to(wt_keep(weft_tensor_randn(WEFT_DIMS(32, 20), WEFT_F32, g)), WT_CUDA0));
    weft_tensor *y = wt_keep(weft_tensor_to(wt_keep(weft_tensor_randint(WEFT_DIMS(32), 0, 5, WEFT_I64, g)), WT_CUDA0));
    for (int s = 0; s < 5; s++) {
        weft_tensor *l = wt_keep(weft_cross_entropy(wt_keep(weft_module_forward(net, x)), y));
        CHECK(weft_backward(l, NULL, NULL) == WEFT_OK && weft_optim_step(opt) == WEFT_OK);
        weft_optim_zero_grad(opt);
    }
    CHECK(weft_tensor_to_f64(ps[0], out, n_out) == WEFT_OK);
    weft_optim_free(opt);
    weft_module_free(net);
    weft_generator_free(g);
    wt_drop_all();
}

static void test_async_ordering(void) {
    static double a[64 * 20], b[64 * 20];
    mlp_steps(a, 64 * 20);
    setenv("WEFT_CUDA_SYNC", "1", 1);
    mlp_steps(b, 64 * 20);
    unsetenv("WEFT_CUDA_SYNC");
    CHECK(memcmp(a, b, sizeof a) == 0);
}

int main(void) {
    if (weft_device_count(WEFT_CUDA) < 1) {
        RUN(test_no_gpu);
        printf("GPU part skipped: no CUDA device\n");
        return wt_summary();
    }
    RUN(test_copies);
    RUN(test_streams_events);
    RUN(test_allocator);
    RUN(test_matmul);
    RUN(test_async_ordering);
    return wt_summary();
}
