// mpirun: 1 2
// Collectives over CUDA tensors (NCCL, bootstrapped through MPI) against the
// same collectives over CPU tensors (MPI). One GPU per rank: with fewer GPUs
// than ranks (or none, as in CI) the test skips (exit 77 on every rank).
#include <weft/dist.h>

#include "cuda_test.h"

static weft_comm *W;
static int R, N;
static weft_device DEV; // cuda:R, one GPU per rank on one node

// in-place collective on a CPU tensor and on its cuda:0 copy; results must agree.
static void compare_all_reduce(weft_dtype dt, weft_reduce_op op) {
    double v[1001];
    wt_vals(v, 1001, -3, 3, 100 + (uint64_t)R);
    weft_tensor *h64 = weft_tensor_from_data(v, WEFT_DIMS(1001), WEFT_F64), *h = weft_cast(h64, dt);
    weft_tensor *d = weft_tensor_to(h, DEV);
    CHECK(weft_dist_all_reduce(W, h, op) == WEFT_OK);
    CHECK(weft_dist_all_reduce(W, d, op) == WEFT_OK);
    wt_check_same("all_reduce", d, h, dt == WEFT_F32 ? 1e-6 : 1e-13);
    weft_tensor_free(h64);
    weft_tensor_free(h);
    weft_tensor_free(d);
}

static void test_all_reduce(void) {
    compare_all_reduce(WEFT_F32, WEFT_REDUCE_SUM);
    compare_all_reduce(WEFT_F64, WEFT_REDUCE_SUM);
    compare_all_reduce(WEFT_F64, WEFT_REDUCE_AVG);
    compare_all_reduce(WEFT_F32, WEFT_REDUCE_MAX);
}

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
    // unequal chunks are an error on every rank (NCCL needs equal ones)
    weft_tensor *bad = weft_tensor_empty_on(WEFT_DIMS(64 * N + 1), WEFT_F32, cu);
    CHECK(weft_dist_all_gather(W, d, bad) != WEFT_OK && wt_error_has("equal chunks"));
    weft_tensor *objs[] = {h, d, go, rs, bad};
    for (int i = 0; i < 5; i++) weft_tensor_free(objs[i]);
    wt_drop_all();
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
    DEV = (weft_device){WEFT_CUDA, (int16_t)R};
    RUN(test_all_reduce);
    RUN(test_broadcast_gather_scatter);
    int rc = wt_summary();
    weft_dist_finalize();
    return rc;
}
