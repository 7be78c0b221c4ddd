// mpirun: 1 4 8
// 3D layouts (weft/parallel.h): every layout of the world into DP × TP × PP
// has the coordinates of Megatron's rank order, and each group holds exactly
// the world ranks that order says, checked by gathering the members' world
// ranks and comparing with the list computed here from the formula. Bad
// layouts are errors naming the setting.
#include "weft_test.h"

#include <weft/parallel.h>

static int size, rank;

// The world ranks that group g of p should hold, in group-rank order.
static int expect_members(const weft_parallel *p, char g, int *out) {
    int n = 0;
    if (g == 't')
        for (int t = 0; t < p->tp; t++) out[n++] = weft_parallel_rank_of(p, p->dp_rank, t, p->pp_rank);
    if (g == 'd')
        for (int d = 0; d < p->dp; d++) out[n++] = weft_parallel_rank_of(p, d, p->tp_rank, p->pp_rank);
    if (g == 'p')
        for (int s = 0; s < p->pp; s++) out[n++] = weft_parallel_rank_of(p, p->dp_rank, p->tp_rank, s);
    if (g == 'm')
        for (int s = 0; s < p->pp; s++)
            for (int t = 0; t < p->tp; t++) out[n++] = weft_parallel_rank_of(p, p->dp_rank, t, s);
    return n;
}

static void check_group(const weft_parallel *p, weft_comm *c, char g) {
    int want[64], n = expect_members(p, g, want);
    CHECK(weft_comm_size(c) == n);
    weft_tensor *me = weft_tensor_scalar(rank, WEFT_I64), *all = weft_tensor_empty(WEFT_DIMS(n), WEFT_I64);
    CHECK(weft_dist_all_gather(c, me, all) == WEFT_OK);
    for (int i = 0; i < n; i++) {
        double v = -1;
        weft_tensor_get(all, (int64_t[]){i}, &v);
        if ((int)v != want[i]) fprintf(stderr, "group %c member %d: world rank %d, want %d\n", g, i, (int)v, want[i]);
        CHECK((int)v == want[i]);
    }
    weft_tensor_free(me);
    weft_tensor_free(all);
}

static void test_layouts(void) {
    for (int tp = 1; tp <= size; tp++)
        for (int pp = 1; pp <= size; pp++) {
            if (size % (tp * pp)) continue;
            weft_parallel *p = weft_parallel_create(weft_comm_world(), tp, pp);
            CHECK(p != NULL);
            if (!p) continue;
            CHECK(p->dp * p->tp * p->pp == size && p->dp == size / (tp * pp));
            CHECK(p->rank == rank && weft_parallel_rank_of(p, p->dp_rank, p->tp_rank, p->pp_rank) == rank);
            CHECK(p->tp_rank == rank % tp && p->pp_rank == rank / (tp * p->dp));
            CHECK(weft_comm_rank(p->tp_comm) == p->tp_rank && weft_comm_rank(p->dp_comm) == p->dp_rank &&
                  weft_comm_rank(p->pp_comm) == p->pp_rank);
            check_group(p, p->tp_comm, 't');
            check_group(p, p->dp_comm, 'd');
            check_group(p, p->pp_comm, 'p');
            check_group(p, p->mp_comm, 'm');
            // an all-reduce over tp sums exactly the tp group's ranks
            weft_tensor *x = weft_tensor_scalar(rank, WEFT_F64);
            CHECK(weft_dist_all_reduce(p->tp_comm, x, WEFT_REDUCE_SUM) == WEFT_OK);
            int want[64], n = expect_members(p, 't', want), s = 0;
            for (int i = 0; i < n; i++) s += want[i];
            CHECK_NEAR(weft_tensor_item(x), s, 0);
            weft_tensor_free(x);
            weft_parallel_free(p);
        }
}

static void test_bad_layouts(void) {
    CHECK(weft_parallel_create(weft_comm_world(), 0, 1) == NULL && wt_error_has("tp = 0"));
    CHECK(weft_parallel_create(weft_comm_world(), 1, -2) == NULL && wt_error_has("pp = -2"));
    CHECK(weft_parallel_create(weft_comm_world(), size + 1, 1) == NULL && wt_error_has("not divisible"));
    if (size == 4) CHECK(weft_parallel_create(weft_comm_world(), 3, 1) == NULL && wt_error_has("tp * pp = 3 * 1"));
    CHECK(weft_parallel_create(NULL, 1, 1) == NULL);
}

int main(int argc, char **argv) {
    if (weft_dist_init(&argc, &argv) != WEFT_OK) {
        fprintf(stderr, "dist init: %s\n", weft_last_error());
        return 1;
    }
    size = weft_comm_size(weft_comm_world());
    rank = weft_comm_rank(weft_comm_world());
    RUN(test_layouts);
    RUN(test_bad_layouts);
    int rc = wt_summary();
    weft_dist_finalize();
    return rc;
}
