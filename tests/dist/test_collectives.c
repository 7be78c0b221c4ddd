// mpirun: 2 3 4
#include "weft_test.h"

static int rank, size;

static void test_basic(void) {
    weft_comm *w = weft_comm_world();
    CHECK(weft_comm_size(w) == size);
    weft_tensor *t = weft_tensor_full(WEFT_DIMS(5), WEFT_F32, rank + 1);
    CHECK(weft_dist_all_reduce(w, t, WEFT_REDUCE_SUM) == WEFT_OK);
    float *p = weft_tensor_data(t);
    CHECK_NEAR(p[3], size * (size + 1) / 2.0, 1e-6);
    weft_tensor_fill_(t, rank);
    CHECK(weft_dist_broadcast(w, t, size - 1) == WEFT_OK);
    CHECK_NEAR(p[0], size - 1, 0);
    CHECK(weft_dist_barrier(w) == WEFT_OK);
    weft_tensor_free(t);
}

int main(int argc, char **argv) {
    if (weft_dist_init(&argc, &argv) != WEFT_OK) { fprintf(stderr, "%s\n", weft_last_error()); return 1; }
    rank = weft_comm_rank(weft_comm_world());
    size = weft_comm_size(weft_comm_world());
    RUN(test_basic);
    int rc = wt_summary();
    weft_dist_finalize();
    return rc;
}
