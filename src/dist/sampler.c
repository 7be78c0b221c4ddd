// Distributed sampling: every rank computes the same epoch order of all n
// samples (a pure function of (seed, epoch), so no communication is needed)
// and keeps every R-th entry from its rank. Dropping the tail n % R first
// gives every rank the same number of distinct samples, so ranks run the same
// number of steps and their collectives line up. This is also the loader's
// single-process order (R <= 1), which is why the permutation lives here.
#include <stdlib.h>

#include <weft/data.h>

#include "../core/core_impl.h"
#include "../data/data_impl.h"

int64_t weft_dist_sampler_len(int64_t n, int num_replicas) {
    if (n <= 0) return 0;
    return num_replicas > 1 ? n / num_replicas : n;
}

// Fisher-Yates over 0..n-1 from a stream keyed by (seed, epoch).
static void epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle, int64_t *out) {
    for (int64_t i = 0; i < n; i++) out[i] = i;
    if (!shuffle) return;
    uint64_t st = weft_data_key(seed, (uint64_t)epoch);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)weft_data_bounded(weft_data_next(&st), (uint64_t)(i + 1));
        int64_t t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
}

weft_status weft_dist_sampler_indices(int64_t n, int num_replicas, int rank, uint64_t seed, int64_t epoch,
                                      bool shuffle, int64_t *out) {
    if (!out) return weft_error(WEFT_ERR_ARG, "dist_sampler_indices: out is NULL");
    if (n < 0) return weft_error(WEFT_ERR_ARG, "dist_sampler_indices: n = %lld is negative", (long long)n);
    if (epoch < 0)
        return weft_error(WEFT_ERR_ARG, "dist_sampler_indices: epoch = %lld is negative", (long long)epoch);
    if (num_replicas < 0)
        return weft_error(WEFT_ERR_ARG, "dist_sampler_indices: num_replicas = %d is negative", num_replicas);
    int R = num_replicas > 1 ? num_replicas : 1;
    if (rank < 0 || rank >= R)
        return weft_error(WEFT_ERR_ARG, "dist_sampler_indices: rank %d is not in 0..%d", rank, R - 1);
    if (R == 1) {
        epoch_order(n, seed, epoch, shuffle, out);
        return WEFT_OK;
    }
    int64_t len = n / R;
    if (len == 0) return WEFT_OK;
    int64_t *all = malloc(sizeof(int64_t) * (size_t)n);
    if (!all) return weft_error(WEFT_ERR_OOM, "dist_sampler_indices: out of memory for %lld indices", (long long)n);
    epoch_order(n, seed, epoch, shuffle, all);
    for (int64_t k = 0; k < len; k++) out[k] = all[rank + k * R];
    free(all);
    return WEFT_OK;
}
