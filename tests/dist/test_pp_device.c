// mpirun: 1 2
// Pipeline parallelism with the model, its inputs and its activations on a
// device (the accelerator of tests/mock_device.c: the real cuda:0 where there
// is a GPU, else the mock, whose memory is reached only through the device
// copy path): an f64 MLP trained 4 steps through weft_pp_step under 1F1B and
// under interleaved 1F1B with recomputation must give the parameters of the
// same pipeline on the CPU, bit for bit on the mock (its kernels are the
// CPU's), within 1e-12 relative on a GPU. Activations and gradients cross
// the ranks through host copies (1 process: the mailbox, moving to the
// device on receipt).
#include <math.h>
#include <stdlib.h>

#include "weft_test.h"

#include <weft/parallel.h>

static int size, rank;
static weft_device g_dev;
static bool g_mock;

enum { IN = 6, OUT = 3, BATCH = 8, STEPS = 4 };

static weft_tensor *lin_forward(weft_module *m, weft_tensor *x) {
    weft_tensor *wt = weft_transpose(weft_module_get(m, "weight"), 0, 1);
    weft_tensor *y = weft_matmul(x, wt), *yb = y ? weft_add(y, weft_module_get(m, "bias")) : NULL;
    weft_tensor_free(wt);
    weft_tensor_free(y);
    return yb;
}

static weft_tensor *on(weft_tensor *t, weft_device d) {
    weft_tensor *r = weft_tensor_to(t, d);
    weft_tensor_free(t);
    return r;
}

static weft_module *lin64(int64_t in, int64_t out, weft_generator *g, weft_device d) {
    weft_module *m = weft_module_new("linear64", lin_forward, NULL, NULL);
    weft_tensor *w = weft_tensor_empty(WEFT_DIMS(out, in), WEFT_F64), *b = weft_tensor_empty(WEFT_DIMS(out), WEFT_F64);
    double bound = 1 / sqrt((double)in);
    weft_init_uniform(w, -bound, bound, g);
    weft_init_uniform(b, -bound, bound, g);
    weft_module_add_param(m, "weight", on(w, d));
    weft_module_add_param(m, "bias", on(b, d));
    return m;
}

// 5 children: linear, relu, linear, tanh, linear.
static weft_module *mlp(weft_device d) {
    weft_generator *g = weft_generator_create(3);
    weft_module *s = weft_nn_sequential();
    weft_nn_sequential_append(s, lin64(IN, 10, g, d));
    weft_nn_sequential_append(s, weft_nn_activation(WEFT_ACT_RELU));
    weft_nn_sequential_append(s, lin64(10, 8, g, d));
    weft_nn_sequential_append(s, weft_nn_activation(WEFT_ACT_TANH));
    weft_nn_sequential_append(s, lin64(8, OUT, g, d));
    weft_generator_free(g);
    return s;
}

static weft_tensor *ce(weft_tensor *out, weft_tensor *tgt, void *user) {
    (void)user;
    return weft_cross_entropy(out, tgt);
}

// Trains on device d; returns the model and the losses.
static weft_module *train(weft_device d, const weft_pp_opts *o, double *loss) {
    weft_module *net = mlp(d);
    weft_pp *p = weft_pp_create(weft_comm_world(), net, o);
    CHECK(p != NULL);
    if (!p) return net;
    weft_tensor *ps[16];
    int n = weft_pp_params(p, ps);
    weft_optim_opts oo = weft_optim_defaults(WEFT_OPTIM_SGD);
    oo.lr = 0.3;
    weft_optim *opt = n ? weft_optim_create(&oo, n, ps, NULL) : NULL;
    for (int s = 0; s < STEPS; s++) {
        weft_generator *g = weft_generator_create(40 + (uint64_t)s);
        weft_tensor *x = on(weft_tensor_randn(WEFT_DIMS(BATCH, IN), WEFT_F64, g), d);
        weft_tensor *y = on(weft_tensor_randint(WEFT_DIMS(BATCH), 0, OUT, WEFT_I64, g), d);
        if (opt) weft_optim_zero_grad(opt);
        weft_status st = weft_pp_step(p, x, y, ce, NULL, &loss[s]);
        CHECK(st == WEFT_OK);
        if (st) fprintf(stderr, "rank %d: %s\n", rank, weft_last_error());
        CHECK(!opt || weft_optim_step(opt) == WEFT_OK);
        weft_tensor_free(x);
        weft_tensor_free(y);
        weft_generator_free(g);
    }
    weft_optim_free(opt);
    weft_pp_free(p);
    return net;
}

static void compare(const char *what, const weft_pp_opts *o) {
    double lc[STEPS], ld[STEPS];
    weft_module *cpu = train(WEFT_DEVICE_CPU, o, lc), *dev = train(g_dev, o, ld);
    double tol = g_mock ? 0 : 1e-12;
    for (int s = 0; s < STEPS; s++)
        if (!(fabs(lc[s] - ld[s]) <= tol * fabs(lc[s]))) {
            fprintf(stderr, "%s: step %d: loss %.17g on the device, %.17g on the CPU\n", what, s, ld[s], lc[s]);
            CHECK(false);
        }
    // Every parameter of the model: those of other ranks' chunks never moved.
    for (int i = 0; i < weft_module_param_count(cpu); i++) {
        weft_tensor *a = weft_module_param_at(cpu, i, NULL, 0), *b = weft_module_param_at(dev, i, NULL, 0);
        CHECK(weft_device_equal(weft_tensor_device(b), g_dev));
        weft_tensor *bh = weft_tensor_to(b, WEFT_DEVICE_CPU);
        wt_check_same(what, bh, a, tol);
        weft_tensor_free(bh);
    }
    weft_module_free(cpu);
    weft_module_free(dev);
}

static void test_device(void) {
    compare("1f1b", &(weft_pp_opts){.schedule = WEFT_PP_1F1B, .microbatches = 4});
    compare("interleaved recompute",
            &(weft_pp_opts){.schedule = WEFT_PP_INTERLEAVED, .microbatches = 4, .virtual_stages = 2, .recompute = true});
}

int main(int argc, char **argv) {
    if (weft_dist_init(&argc, &argv) != WEFT_OK) {
        fprintf(stderr, "dist init: %s\n", weft_last_error());
        return 1;
    }
    size = weft_comm_size(weft_comm_world());
    rank = weft_comm_rank(weft_comm_world());
    weft_comm_set_timeout(weft_comm_world(), 60); // a bug here must fail, not hang the suite
    if (!wt_accelerator(&g_dev, &g_mock)) {
        fprintf(stderr, "no accelerator: %s\n", weft_last_error());
        return 1;
    }
    RUN(test_device);
    int rc = wt_summary();
    weft_dist_finalize();
    return rc;
}
