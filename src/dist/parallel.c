// 3D layouts: world = DP × TP × PP, Megatron's rank order (TP fastest, then
// DP, then PP), and one communicator per group (weft/parallel.h).
#include <stdlib.h>

#include <weft/parallel.h>

#include "../core/core_impl.h"

int weft_parallel_rank_of(const weft_parallel *p, int dp_rank, int tp_rank, int pp_rank) {
    return tp_rank + p->tp * (dp_rank + p->dp * pp_rank);
}

void weft_parallel_free(weft_parallel *p) {
    if (!p) return;
    weft_comm_free(p->tp_comm);
    weft_comm_free(p->dp_comm);
    weft_comm_free(p->pp_comm);
    weft_comm_free(p->mp_comm);
    free(p);
}

weft_parallel *weft_parallel_create(weft_comm *world, int tp, int pp) {
    if (!world) {
        weft_error(WEFT_ERR_ARG, "parallel: no communicator (call weft_dist_init first)");
        return NULL;
    }
    int n = weft_comm_size(world);
    if (tp < 1 || pp < 1) {
        weft_error(WEFT_ERR_ARG, "parallel: tp = %d and pp = %d must both be at least 1", tp, pp);
        return NULL;
    }
    if ((int64_t)tp * pp > n || n % (tp * pp) != 0) {
        weft_error(WEFT_ERR_ARG, "parallel: %d processes are not divisible by tp * pp = %d * %d (the data-parallel "
                   "size is processes / (tp * pp))", n, tp, pp);
        return NULL;
    }
    weft_parallel *p = calloc(1, sizeof *p);
    if (!p) {
        weft_error(WEFT_ERR_OOM, "parallel: out of memory");
        return NULL;
    }
    p->world = world;
    p->tp = tp;
    p->pp = pp;
    p->dp = n / (tp * pp);
    p->rank = weft_comm_rank(world);
    p->tp_rank = p->rank % tp;
    p->dp_rank = p->rank / tp % p->dp;
    p->pp_rank = p->rank / (tp * p->dp);
    // Every rank makes the same four splits in the same order (they are collective).
    p->tp_comm = weft_comm_split(world, p->dp_rank + p->dp * p->pp_rank, p->tp_rank);
    p->dp_comm = p->tp_comm ? weft_comm_split(world, p->tp_rank + tp * p->pp_rank, p->dp_rank) : NULL;
    p->pp_comm = p->dp_comm ? weft_comm_split(world, p->tp_rank + tp * p->dp_rank, p->pp_rank) : NULL;
    p->mp_comm = p->pp_comm ? weft_comm_split(world, p->dp_rank, p->tp_rank + tp * p->pp_rank) : NULL;
    if (!p->mp_comm) {
        weft_parallel_free(p);
        return NULL;
    }
    return p;
}
