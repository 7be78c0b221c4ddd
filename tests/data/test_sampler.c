// Distributed sampling (weft_dist_sampler_indices and the loader's
// num_replicas/rank): every rank gets n / R distinct samples per epoch, the
// ranks' shares are disjoint and together are the first R * (n / R) entries
// of the epoch's permutation, taken with stride R; the permutation is the
// single-process loader's, checked against a naive re-implementation of the
// documented Fisher-Yates over a splitmix64 stream keyed by (seed, epoch).
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

// ---- reference: splitmix64 Fisher-Yates, written out independently ----
static uint64_t ref_mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void ref_perm(int64_t n, uint64_t seed, uint64_t epoch, int64_t *out) {
    for (int64_t i = 0; i < n; i++) out[i] = i;
    uint64_t st = ref_mix(ref_mix(seed) ^ (epoch * 0xD6E8FEB86659FD93ull + 0x632BE59BD9B4E019ull));
    for (int64_t i = n - 1; i > 0; i--) {
        st += 0x9E3779B97F4A7C15ull; // the stream's next value is the mix of the advanced state
        uint64_t r = ref_mix(st - 0x9E3779B97F4A7C15ull);
        int64_t j = (int64_t)(((unsigned __int128)r * (uint64_t)(i + 1)) >> 64);
        int64_t t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
}

static bool err_has(const char *s) {
    bool ok = strstr(weft_last_error(), s) != NULL;
    if (!ok) fprintf(stderr, "  error message \"%s\" lacks \"%s\"\n", weft_last_error(), s);
    return ok;
}

#define N 103

static void test_single_process_order(void) {
    int64_t ref[N], got[N];
    for (uint64_t e = 0; e < 3; e++) {
        ref_perm(N, 42, e, ref);
        CHECK(weft_dist_sampler_len(N, 1) == N && weft_dist_sampler_len(N, 0) == N);
        CHECK(weft_dist_sampler_indices(N, 1, 0, 42, (int64_t)e, true, got) == WEFT_OK);
        CHECK(memcmp(ref, got, sizeof ref) == 0);
        CHECK(weft_dist_sampler_indices(N, 0, 0, 42, (int64_t)e, true, got) == WEFT_OK);
        CHECK(memcmp(ref, got, sizeof ref) == 0);
    }
    // The loader without replicas still yields that order.
    weft_tensor *in = weft_tensor_arange(0, N, 1, WEFT_F32);
    weft_loader_opts o = {.batch_size = 8, .shuffle = true, .seed = 42, .prefetch = 0};
    weft_loader *l = weft_loader_create(in, NULL, &o);
    CHECK(l && weft_loader_epoch_order(l, 2, got) == WEFT_OK);
    ref_perm(N, 42, 2, ref);
    CHECK(memcmp(ref, got, sizeof ref) == 0);
    weft_loader_free(l);
    weft_tensor_free(in);
    // shuffle off: 0..n-1
    CHECK(weft_dist_sampler_indices(N, 1, 0, 42, 5, false, got) == WEFT_OK);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += got[i] != i;
    CHECK(bad == 0);
}

static void test_shares(void) {
    for (int R = 2; R <= 5; R++) { // 103 % R = 1, 1, 3, 3
        int64_t len = weft_dist_sampler_len(N, R);
        CHECK(len == N / R);
        for (int64_t e = 0; e < 3; e++) {
            int64_t ref[N], share[N], again[N];
            ref_perm(N, 7, (uint64_t)e, ref);
            int owner[N];
            for (int i = 0; i < N; i++) owner[i] = -1;
            int bad_pos = 0, overlap = 0;
            for (int r = 0; r < R; r++) {
                CHECK(weft_dist_sampler_indices(N, R, r, 7, e, true, share) == WEFT_OK);
                for (int64_t k = 0; k < len; k++) {
                    bad_pos += share[k] != ref[r + k * R];
                    if (owner[share[k]] >= 0) overlap++;
                    owner[share[k]] = r;
                }
                // A pure function of (seed, epoch): every rank computes the same permutation.
                CHECK(weft_dist_sampler_indices(N, R, r, 7, e, true, again) == WEFT_OK);
                CHECK(memcmp(share, again, sizeof share[0] * (size_t)len) == 0);
            }
            CHECK(bad_pos == 0);
            CHECK(overlap == 0);
            // The union is exactly the permutation's first R * len entries; the tail is dropped.
            int missing = 0, extra = 0;
            for (int64_t k = 0; k < N; k++) {
                if (k < R * len) missing += owner[ref[k]] < 0;
                else extra += owner[ref[k]] >= 0;
            }
            CHECK(missing == 0 && extra == 0);
        }
        // Epochs shuffle differently.
        int64_t a[N], b[N];
        weft_dist_sampler_indices(N, R, 1, 7, 0, true, a);
        weft_dist_sampler_indices(N, R, 1, 7, 1, true, b);
        CHECK(memcmp(a, b, sizeof a[0] * (size_t)len) != 0);
    }
    // Without shuffling, rank r takes r, r + R, ...
    int64_t s[N];
    CHECK(weft_dist_sampler_indices(10, 3, 2, 0, 0, false, s) == WEFT_OK);
    CHECK(s[0] == 2 && s[1] == 5 && s[2] == 8);
    // Bad arguments name the function.
    CHECK(weft_dist_sampler_indices(N, 3, 3, 0, 0, true, s) != WEFT_OK && err_has("dist_sampler_indices"));
    CHECK(weft_dist_sampler_indices(N, 3, -1, 0, 0, true, s) != WEFT_OK && err_has("rank"));
    CHECK(weft_dist_sampler_indices(N, -2, 0, 0, 0, true, s) != WEFT_OK && err_has("num_replicas"));
    CHECK(weft_dist_sampler_indices(N, 2, 0, 0, 0, true, NULL) != WEFT_OK && err_has("NULL"));
    CHECK(weft_dist_sampler_indices(N, 2, 0, 0, -1, true, s) != WEFT_OK && err_has("epoch"));
    CHECK(weft_dist_sampler_len(3, 4) == 0);
}

// Consumes one epoch of a loader over arange(N): the sample ids in order.
static int64_t run_epoch(weft_loader *l, int64_t *ids, int64_t *nb) {
    int64_t n = 0;
    *nb = 0;
    for (;;) {
        weft_tensor *x;
        int r = weft_loader_next(l, &x, NULL);
        if (r <= 0) {
            CHECK(r == 0);
            break;
        }
        const float *xp = weft_tensor_data(x);
        for (int64_t k = 0; k < weft_tensor_size(x, 0); k++) ids[n++] = (int64_t)xp[k];
        (*nb)++;
        weft_tensor_free(x);
    }
    return n;
}

static void test_loader(void) {
    weft_tensor *in = weft_tensor_arange(0, N, 1, WEFT_F32);
    for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
        const int R = 3; // 34 samples each, the tail of 1 dropped
        int64_t nall[2] = {0};
        int cnt[2][N];
        memset(cnt, 0, sizeof cnt);
        for (int r = 0; r < R; r++) {
            weft_loader_opts o = {.batch_size = 8, .shuffle = true, .seed = 3, .prefetch = prefetch,
                                  .num_replicas = R, .rank = r};
            weft_loader *l = weft_loader_create(in, NULL, &o);
            CHECK(l != NULL);
            if (!l) continue;
            CHECK(weft_loader_num_samples(l) == 34 && weft_loader_batches_per_epoch(l) == 5);
            for (int e = 0; e < 2; e++) { // the epoch advances by itself
                int64_t ids[N], ref[N], nb;
                int64_t n = run_epoch(l, ids, &nb);
                CHECK(n == 34 && nb == 5);
                weft_dist_sampler_indices(N, R, r, 3, e, true, ref);
                CHECK(memcmp(ids, ref, sizeof ids[0] * 34) == 0);
                int64_t ord[N];
                CHECK(weft_loader_epoch_order(l, e, ord) == WEFT_OK && memcmp(ord, ref, sizeof ord[0] * 34) == 0);
                for (int64_t k = 0; k < n; k++) {
                    cnt[e][ids[k]]++;
                    nall[e]++;
                }
            }
            // Position save/restore within the share.
            int64_t a[20], b[20];
            weft_loader_set_position(l, 1, 2);
            int64_t na = 0;
            for (int k = 0; k < 3; k++) {
                weft_tensor *x;
                if (weft_loader_next(l, &x, NULL) == 1) {
                    for (int64_t j = 0; j < weft_tensor_size(x, 0); j++) a[na++] = (int64_t)((float *)weft_tensor_data(x))[j];
                    weft_tensor_free(x);
                }
            }
            int64_t ref[N];
            weft_dist_sampler_indices(N, R, r, 3, 1, true, ref);
            for (int64_t j = 0; j < na; j++) b[j] = ref[16 + j];
            CHECK(na == 18 && memcmp(a, b, sizeof a[0] * (size_t)na) == 0);
            weft_loader_free(l);
        }
        for (int e = 0; e < 2; e++) {
            int dup = 0, seen = 0;
            for (int i = 0; i < N; i++) {
                dup += cnt[e][i] > 1;
                seen += cnt[e][i] == 1;
            }
            CHECK(dup == 0 && seen == 102 && nall[e] == 102);
        }
    }
    // drop_last within the share: 34 / 8 = 4 batches.
    weft_loader_opts o = {.batch_size = 8, .shuffle = false, .drop_last = true, .num_replicas = 3, .rank = 1};
    weft_loader *l = weft_loader_create(in, NULL, &o);
    CHECK(l && weft_loader_batches_per_epoch(l) == 4 && weft_loader_num_samples(l) == 34);
    weft_tensor *x = NULL;
    CHECK(l && weft_loader_next(l, &x, NULL) == 1 && weft_tensor_size(x, 0) == 8);
    CHECK(x && ((float *)weft_tensor_data(x))[0] == 1 && ((float *)weft_tensor_data(x))[1] == 4);
    weft_tensor_free(x);
    weft_loader_free(l);
    // Bad replica settings.
    o = (weft_loader_opts){.batch_size = 8, .num_replicas = 3, .rank = 3};
    CHECK(weft_loader_create(in, NULL, &o) == NULL && err_has("loader_create") && err_has("rank"));
    o = (weft_loader_opts){.batch_size = 8, .num_replicas = -1};
    CHECK(weft_loader_create(in, NULL, &o) == NULL && err_has("num_replicas"));
    o = (weft_loader_opts){.batch_size = 8, .num_replicas = 200};
    CHECK(weft_loader_create(in, NULL, &o) == NULL && err_has("replicas"));
    weft_tensor_free(in);
}

int main(void) {
    RUN(test_single_process_order);
    RUN(test_shares);
    RUN(test_loader);
    return wt_summary();
}
