// mpirun: 1 2
// Collectives over CUDA tensors (NCCL, bootstrapped through MPI) against the
// same collectives over CPU tensors (MPI), and DDP over NCCL against DDP on
// the CPU. One GPU per rank (rank r on cuda:r): with fewer GPUs than ranks
// (or none, as in CI) the test skips (exit 77 on every rank).
//
// Stream ordering: a collective's input is written by a long kernel just
// before the async all-reduce (the communication stream must wait for it),
// and its result is read by an op queued right after weft_work_wait (the
// caller's stream must wait for the collective), with no host wait between.
// Either ordering missing gives wrong numbers here, not a crash.
#include <stdlib.h>
#include <string.h>

#include <weft/ddp.h>
#include <weft/dist.h>

#include "cuda_test.h"

static weft_comm *W;
static int R, N;
static weft_device DEV; // cuda:R, one GPU per rank on one node

// in-place collective on a CPU tensor and on its device copy; results must agree.
static void compare_all_reduce(weft_comm *c, weft_dtype dt, weft_reduce_op op) {
    double v[1001];
    wt_vals(v, 1001, -3, 3, 100 + (uint64_t)R);
    weft_tensor *h64 = weft_tensor_from_data(v, WEFT_DIMS(1001), WEFT_F64), *h = weft_cast(h64, dt);
    weft_tensor *d = weft_tensor_to(h, DEV);
    CHECK(weft_dist_all_reduce(c, h, op) == WEFT_OK);
    CHECK(weft_dist_all_reduce(c, d, op) == WEFT_OK);
    wt_check_same("all_reduce", d, h, dt == WEFT_F32 ? 1e-6 : 1e-13);
    weft_tensor_free(h64);
    weft_tensor_free(h);
    weft_tensor_free(d);
}

static void all_reduces(weft_comm *c) {
    compare_all_reduce(c, WEFT_F32, WEFT_REDUCE_SUM);
    compare_all_reduce(c, WEFT_F64, WEFT_REDUCE_SUM);
    compare_all_reduce(c, WEFT_F64, WEFT_REDUCE_AVG);
    compare_all_reduce(c, WEFT_F32, WEFT_REDUCE_MAX);
    compare_all_reduce(c, WEFT_I64, WEFT_REDUCE_AVG); // integer average: staged (MPI's truncation)
}

static void test_all_reduce(void) { all_reduces(W); }

static void test_broadcast_gather_scatter(void) {
    weft_device cu = DEV;
    weft_tensor *h = weft_tensor_full(WEFT_DIMS(64), WEFT_F32, R + 1), *d = weft_tensor_to(h, cu);
    CHECK(weft_dist_broadcast(W, d, N - 1) == WEFT_OK);
    CHECK_NEAR(weft_tensor_item(wt_keep(weft_sum(d, 0, NULL, false))), 64.0 * N, 0);
    weft_tensor *go = weft_tensor_empty_on(WEFT_DIMS(64 * N), WEFT_F32, cu);
    CHECK(weft_dist_all_gather(W, d, go) == WEFT_OK);
    CHECK_NEAR(weft_tensor_item(wt_keep(weft_sum(go, 0, NULL, false))), 64.0 * N * N, 0);
    weft_tensor *rs = weft_tensor_empty_on(WEFT_DIMS(64), WEFT_F32, cu);
    CHECK(weft_dist_reduce_scatter(W, go, rs, WEFT_REDUCE_SUM) == WEFT_OK);
    CHECK_NEAR(weft_tensor_item(wt_keep(weft_sum(rs, 0, NULL, false))), 64.0 * N * N, 0);
    // uneven chunks (NCCL has none): staged through host memory, same result as MPI's
    int64_t n = 64 * N + 1, off, k;
    weft_dist_chunk(n, N, R, &off, &k);
    weft_tensor *in = weft_tensor_full_on(WEFT_DIMS(k), WEFT_F32, R + 1, cu);
    weft_tensor *un = weft_tensor_empty_on(WEFT_DIMS(n), WEFT_F32, cu);
    CHECK(weft_dist_all_gather(W, in, un) == WEFT_OK);
    double want = 0;
    for (int r = 0; r < N; r++) {
        int64_t c;
        weft_dist_chunk(n, N, r, NULL, &c);
        want += (double)c * (r + 1);
    }
    CHECK_NEAR(weft_tensor_item(wt_keep(weft_sum(un, 0, NULL, false))), want, 0);
    weft_tensor *objs[] = {h, d, go, rs, in, un};
    for (int i = 0; i < 6; i++) weft_tensor_free(objs[i]);
    wt_drop_all();
}

// A DDP-sized bucket: written by a long kernel (a 1024^3 matmul) right
// before the async all-reduce, read by a sum right after the wait; the
// caller's stream meanwhile keeps computing. The host waits only for the
// final item().
static void test_bucket_ordering(void) {
    const int64_t M = 1024;
    weft_tensor *a = weft_tensor_to(wt_keep(weft_tensor_full(WEFT_DIMS(M, M), WEFT_F32, 1.0 / 1024)), DEV);
    weft_tensor *b = weft_tensor_to(wt_keep(weft_tensor_full(WEFT_DIMS(M, M), WEFT_F32, R + 1.0)), DEV);
    for (int rep = 0; rep < 3; rep++) {
        weft_tensor *bucket = weft_matmul(a, b); // every element R + 1 (1024 terms of (R+1)/1024)
        weft_work *w = weft_dist_all_reduce_async(W, bucket, WEFT_REDUCE_SUM);
        CHECK(w != NULL);
        weft_tensor *busy = weft_matmul(a, a); // more work on the caller's stream meanwhile
        CHECK(w && weft_work_wait(w) == WEFT_OK);
        weft_tensor *s = weft_sum(bucket, 0, NULL, false); // queued after the wait: sees the sum over ranks
        double want = (double)M * M * N * (N + 1) / 2.0;
        CHECK_NEAR(weft_tensor_item(s), want, 1e-6);
        weft_tensor_free(bucket);
        weft_tensor_free(busy);
        weft_tensor_free(s);
    }
    // weft_work_test turns 1 once the GPU has run it
    weft_tensor *t = weft_tensor_full_on(WEFT_DIMS(4096), WEFT_F32, 1.0, DEV);
    weft_work *w = weft_dist_all_reduce_async(W, t, WEFT_REDUCE_SUM);
    while (w && !weft_work_test(w)) {}
    CHECK(w && weft_work_wait(w) == WEFT_OK);
    CHECK_NEAR(weft_tensor_item(wt_keep(weft_sum(t, 0, NULL, false))), 4096.0 * N, 0);
    weft_tensor_free(t);
    weft_tensor_free(a);
    weft_tensor_free(b);
    wt_drop_all();
}

// WEFT_DIST_NCCL=0 on a new communicator: the same collectives staged
// through host memory over MPI give the same numbers.
static void test_staged_when_asked(void) {
    setenv("WEFT_DIST_NCCL", "0", 1);
    weft_comm *c = weft_comm_split(W, 0, R);
    CHECK(c != NULL);
    if (c) all_reduces(c);
    weft_comm_free(c);
    unsetenv("WEFT_DIST_NCCL");
}

// DDP over NCCL (3 buckets, issued from the hooks during backward) against
// DDP on the CPU from the same initial values.
static weft_module *make_mlp(weft_device dev) {
    weft_device prev = weft_device_get_default();
    weft_device_set_default(dev);
    weft_generator *g = weft_generator_create(1 + (uint64_t)R);
    weft_module *m = weft_nn_sequential();
    weft_nn_sequential_append(m, weft_nn_linear(6, 16, true, g));
    weft_nn_sequential_append(m, weft_nn_activation(WEFT_ACT_TANH));
    weft_nn_sequential_append(m, weft_nn_linear(16, 12, true, g));
    weft_nn_sequential_append(m, weft_nn_activation(WEFT_ACT_TANH));
    weft_nn_sequential_append(m, weft_nn_linear(12, 4, true, g));
    weft_generator_free(g);
    weft_device_set_default(prev);
    return m;
}

static void test_ddp(void) {
    weft_module *mc = make_mlp(WEFT_DEVICE_CPU), *md = make_mlp(DEV);
    weft_ddp_opts o = {.bucket_mb = 0.0005};
    weft_ddp *dc = weft_ddp_create(W, mc, &o), *dd = weft_ddp_create(W, md, &o);
    CHECK(dc && dd && weft_ddp_num_buckets(dd) == 3);
    weft_tensor *pc[8], *pd[8];
    int np = weft_module_param_count(mc);
    for (int i = 0; i < np; i++) {
        pc[i] = weft_module_param_at(mc, i, NULL, 0);
        pd[i] = weft_module_param_at(md, i, NULL, 0);
    }
    weft_optim_opts oo = weft_optim_defaults(WEFT_OPTIM_SGD); // rounding differences stay small (Adam's can grow)
    oo.lr = 0.1;
    oo.momentum = 0.9;
    weft_optim *oc = weft_optim_create(&oo, np, pc, NULL), *od = weft_optim_create(&oo, np, pd, NULL);
    for (int s = 0; dc && dd && s < 4; s++) {
        weft_generator *g = weft_generator_create(50 + (uint64_t)s * 7 + (uint64_t)R);
        weft_tensor *x = wt_keep(weft_tensor_randn(WEFT_DIMS(4, 6), WEFT_F32, g));
        weft_tensor *y = wt_keep(weft_tensor_randint(WEFT_DIMS(4), 0, 4, WEFT_I64, g));
        weft_generator_free(g);
        weft_module *m[2] = {mc, md};
        weft_ddp *d[2] = {dc, dd};
        weft_optim *op[2] = {oc, od};
        for (int k = 0; k < 2; k++) {
            weft_device dv = k ? DEV : WEFT_DEVICE_CPU;
            weft_tensor *xd = wt_keep(weft_tensor_to(x, dv)), *yd = wt_keep(weft_tensor_to(y, dv));
            weft_tensor *l = wt_keep(weft_cross_entropy(wt_keep(weft_module_forward(m[k], xd)), yd));
            CHECK(weft_backward(l, NULL, NULL) == WEFT_OK && weft_ddp_wait(d[k]) == WEFT_OK);
            CHECK(weft_optim_step(op[k]) == WEFT_OK); // queued after the buckets' events on the GPU
            weft_optim_zero_grad(op[k]);
        }
        wt_drop_all();
    }
    for (int i = 0; i < np; i++) wt_check_same("ddp over nccl", pd[i], pc[i], 1e-5);
    weft_optim_free(oc);
    weft_optim_free(od);
    weft_ddp_free(dc);
    weft_ddp_free(dd);
    weft_module_free(mc);
    weft_module_free(md);
}

int main(int argc, char **argv) {
    if (weft_dist_init(&argc, &argv) != WEFT_OK) return 1;
    W = weft_comm_world();
    R = weft_comm_rank(W);
    N = weft_comm_size(W);
    // every rank decides the same way: skip unless each rank has its own GPU
    if (weft_device_count(WEFT_CUDA) < N) {
        if (R == 0) printf("skipped: %d ranks, %d CUDA devices\n", N, weft_device_count(WEFT_CUDA));
        weft_dist_finalize();
        return 77;
    }
    weft_comm_set_timeout(W, 120);
    DEV = (weft_device){WEFT_CUDA, (int16_t)R};
    RUN(test_all_reduce);
    RUN(test_broadcast_gather_scatter);
    RUN(test_bucket_ordering);
    RUN(test_staged_when_asked);
    RUN(test_ddp);
    int rc = wt_summary();
    weft_dist_finalize();
    return rc;
}
