// Memory statistics by kind (weft_memory_stats.kind_in_use / kind_peak) on
// the CPU allocator, through a training step: a linear layer's parameters,
// Adam's state, the gradients autograd leaves in .grad, and the activations
// in between, each against the byte sizes of the tensors involved (sizes
// chosen as whole size classes of the allocator: powers of two, and 64 bytes
// for anything smaller); parameters cast to another dtype stay parameters;
// weft_tensor_set_grad tags a gradient; the public weft_memory_tag and its
// errors.
#include <string.h>

#include <weft.h>
#include <weft/device.h>

#include "weft_test.h"

static weft_memory_stats stats(void) {
    weft_memory_stats s;
    memset(&s, 0, sizeof s);
    CHECK(weft_memory_stats_get(WEFT_DEVICE_CPU, &s) == WEFT_OK);
    return s;
}

// The allocator's block for n bytes, for the sizes this test uses.
static size_t block_of(size_t n) {
    CHECK(n <= 64 || (n & (n - 1)) == 0);
    return n <= 64 ? 64 : n;
}

static size_t tensor_block(weft_tensor *t) {
    return block_of((size_t)weft_tensor_numel(t) * weft_dtype_size(weft_tensor_dtype(t)));
}

// kind_in_use of s1 minus s0, per kind
static long long delta(const weft_memory_stats *s1, const weft_memory_stats *s0, weft_memory_kind k) {
    return (long long)s1->kind_in_use[k] - (long long)s0->kind_in_use[k];
}

static void one_step(weft_module *m, weft_optim *opt, weft_tensor *x, weft_memory_stats *after_backward) {
    weft_tensor *y = weft_module_forward(m, x), *y2 = weft_mul(y, y), *l = weft_sum(y2, 0, NULL, false);
    CHECK(l && weft_backward(l, NULL, NULL) == WEFT_OK);
    if (after_backward) *after_backward = stats();
    weft_tensor_free(l);
    weft_tensor_free(y2);
    weft_tensor_free(y);
    CHECK(weft_optim_step(opt) == WEFT_OK);
    weft_optim_zero_grad(opt);
}

static void test_training_step(void) {
    weft_generator *g = weft_generator_create(3);
    weft_memory_stats s0 = stats();
    weft_module *m = weft_nn_linear(64, 64, true, g); // weight 16 KiB, bias 256 bytes
    weft_memory_stats s1 = stats();
    size_t params = 64 * 64 * 4 + 64 * 4;
    CHECK(delta(&s1, &s0, WEFT_MEM_PARAMETERS) == (long long)params);
    CHECK(delta(&s1, &s0, WEFT_MEM_ACTIVATIONS) == 0);

    int np = weft_module_param_count(m);
    weft_tensor *ps[2] = {weft_module_param_at(m, 0, NULL, 0), weft_module_param_at(m, 1, NULL, 0)};
    CHECK(np == 2);
    weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_ADAM);
    weft_optim *opt = weft_optim_create(&o, np, ps, NULL);
    weft_memory_stats s2 = stats();
    size_t state = 0;
    for (int i = 0; i < weft_optim_state_count(opt); i++) state += tensor_block(weft_optim_state_at(opt, i, NULL, 0));
    CHECK(state >= 2 * params); // exp_avg and exp_avg_sq of both, and the step counts
    CHECK(delta(&s2, &s1, WEFT_MEM_OPTIMIZER) == (long long)state);
    CHECK(delta(&s2, &s1, WEFT_MEM_PARAMETERS) == 0 && delta(&s2, &s1, WEFT_MEM_ACTIVATIONS) == 0);

    weft_tensor *x = weft_tensor_randn(WEFT_DIMS(32, 64), WEFT_F32, g); // 8 KiB: an activation
    one_step(m, opt, x, NULL);                                       // any lazily made state exists now
    weft_memory_stats s3 = stats();
    weft_memory_reset_peak(WEFT_DEVICE_CPU);
    weft_memory_stats after_bw;
    one_step(m, opt, x, &after_bw);
    weft_memory_stats s4 = stats();
    // during the step: the two gradients, and y (8 KiB) among the activations
    CHECK(delta(&after_bw, &s3, WEFT_MEM_GRADIENTS) == (long long)params);
    CHECK(after_bw.kind_in_use[WEFT_MEM_ACTIVATIONS] >= s3.kind_in_use[WEFT_MEM_ACTIVATIONS] + 32 * 64 * 4);
    CHECK(s4.kind_peak[WEFT_MEM_ACTIVATIONS] >= after_bw.kind_in_use[WEFT_MEM_ACTIVATIONS]);
    CHECK(s4.kind_peak[WEFT_MEM_GRADIENTS] >= s3.kind_in_use[WEFT_MEM_GRADIENTS] + params);
    // after it (zero_grad frees the gradients): the same bytes of every kind as before it
    for (int k = 0; k < WEFT_MEM_NUM_KINDS; k++) CHECK(delta(&s4, &s3, (weft_memory_kind)k) == 0);
    size_t sum = 0;
    for (int k = 0; k < WEFT_MEM_NUM_KINDS; k++) sum += s4.kind_in_use[k];
    CHECK(sum == s4.bytes_in_use);

    // without the optimiser (it holds the f32 parameters), parameters cast to
    // f64 are still parameters, twice the bytes
    weft_optim_free(opt);
    weft_memory_stats s4b = stats();
    CHECK(delta(&s4b, &s4, WEFT_MEM_OPTIMIZER) == -(long long)state);
    CHECK(weft_module_to_dtype(m, WEFT_F64) == WEFT_OK);
    weft_memory_stats s5 = stats();
    CHECK(delta(&s5, &s4b, WEFT_MEM_PARAMETERS) == (long long)params);
    CHECK(delta(&s5, &s4b, WEFT_MEM_ACTIVATIONS) == 0);

    // a gradient set by hand counts as one
    weft_tensor *w = weft_module_param_at(m, 0, NULL, 0);
    weft_tensor *gw = weft_tensor_zeros(WEFT_DIMS(64, 64), WEFT_F64);
    weft_memory_stats s6 = stats();
    CHECK(weft_tensor_set_grad(w, gw) == WEFT_OK);
    weft_memory_stats s7 = stats();
    CHECK(delta(&s7, &s6, WEFT_MEM_GRADIENTS) == 64 * 64 * 8 && delta(&s7, &s6, WEFT_MEM_ACTIVATIONS) == -64 * 64 * 8);
    weft_tensor_free(gw);
    weft_tensor_zero_grad(w);
    weft_memory_stats s7b = stats();
    CHECK(delta(&s7b, &s6, WEFT_MEM_GRADIENTS) == 0 && delta(&s7b, &s6, WEFT_MEM_ACTIVATIONS) == -64 * 64 * 8);

    weft_tensor_free(x);
    weft_module_free(m);
    weft_memory_stats s8 = stats();
    for (int k = 0; k < WEFT_MEM_NUM_KINDS; k++) CHECK(delta(&s8, &s0, (weft_memory_kind)k) == 0);
    weft_generator_free(g);
}

static void test_tag_api(void) {
    void *p = weft_device_alloc(WEFT_DEVICE_CPU, 4096);
    weft_memory_stats s0 = stats();
    CHECK(weft_memory_tag(WEFT_DEVICE_CPU, p, WEFT_MEM_OPTIMIZER) == WEFT_OK);
    weft_memory_stats s1 = stats();
    CHECK(delta(&s1, &s0, WEFT_MEM_OPTIMIZER) == 4096 && delta(&s1, &s0, WEFT_MEM_ACTIVATIONS) == -4096);
    CHECK(weft_memory_tag(WEFT_DEVICE_CPU, p, WEFT_MEM_NUM_KINDS) == WEFT_ERR_ARG && wt_error_has("memory kind"));
    CHECK(weft_memory_tag(WEFT_DEVICE_CPU, p, (weft_memory_kind)-1) == WEFT_ERR_ARG);
    CHECK(weft_memory_tag(WEFT_DEVICE_CPU, NULL, WEFT_MEM_GRADIENTS) == WEFT_OK); // nothing to tag
    weft_memory_stats s2 = stats();
    CHECK(delta(&s2, &s1, WEFT_MEM_OPTIMIZER) == 0);
    weft_device_free(WEFT_DEVICE_CPU, p, 4096);
    weft_memory_stats s3 = stats();
    CHECK(delta(&s3, &s0, WEFT_MEM_OPTIMIZER) == 0 && delta(&s3, &s0, WEFT_MEM_ACTIVATIONS) == -4096);
    CHECK(!strcmp(weft_memory_kind_name(WEFT_MEM_ACTIVATIONS), "activations") &&
          !strcmp(weft_memory_kind_name(WEFT_MEM_OPTIMIZER), "optimizer") &&
          weft_memory_kind_name(WEFT_MEM_NUM_KINDS) == NULL);
}

int main(void) {
    RUN(test_training_step);
    RUN(test_tag_api);
    return wt_summary();
}
