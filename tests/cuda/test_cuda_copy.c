// Copies and casts on CUDA (src/ops/cuda/copy_kernels.cu) against the CPU, bit
// for bit: every pair of the 8 dtypes, through each of the kernel's paths:
// contiguous (vector loads where aligned; sliced one element in, so the
// pointers are not), strided with 32-bit indices (a transpose, a broadcast, a
// permuted 3-d view), and the 64-bit walk (more than 2^31 elements, where the
// GPU has the memory for it). Lengths around the vector width (4) and past
// one grid-stride step. cast_multi (autocast's weight casts in few launches) as the CPU's casts.
#include <stdlib.h>

#include "cuda_test.h"
#include "ops/op.h"

static const weft_dtype k_dts[] = {WEFT_F32, WEFT_F64, WEFT_I32, WEFT_I64, WEFT_BOOL, WEFT_U8, WEFT_F16, WEFT_BF16};
#define N_DTS 8

// Values every dtype holds and every conversion defines (no negative or out-of-range value into an integer
// type): [0, 120) with fractions, zeros and whole numbers mixed in; as dtype dt.
static weft_tensor *values(int nd, const int64_t *sizes, weft_dtype dt, uint64_t seed) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= sizes[d];
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    wt_vals(v, n, 0, 120, seed);
    for (int64_t i = 0; i < n; i++) {
        if (i % 7 == 3) v[i] = 0;
        if (i % 5 == 1) v[i] = floor(v[i]);
        if (i % 11 == 2) v[i] = floor(v[i]) + 0.5; // a tie for the integer and half-precision roundings
    }
    weft_tensor *t64 = weft_tensor_from_data(v, nd, sizes, WEFT_F64), *t = weft_cast(t64, dt);
    free(v);
    weft_tensor_free(t64);
    return t;
}

typedef struct ccase {
    weft_dtype to;
    int view; // 0: as is; 1: from element 1 (misaligned); 2: transposed; 3: broadcast rows; 4: permuted 3-d
} ccase;

static weft_tensor *run_cast(weft_tensor *const *in, void *c) {
    const ccase *k = c;
    weft_tensor *v = NULL;
    switch (k->view) {
    case 0: v = weft_tensor_ref(in[0]); break;
    case 1: v = weft_slice(in[0], 0, 1, weft_tensor_sizes(in[0])[0], 1); break;
    case 2: v = weft_transpose(in[0], 0, 1); break;
    case 3: v = weft_expand(in[0], WEFT_DIMS(37, -1)); break; // (1,N) read as (37,N)
    case 4: v = weft_permute(in[0], (const int[]){2, 0, 1}); break;
    }
    if (!v) return NULL;
    // a cast to the same dtype returns its input: a copy then (contiguous() of the view, a kernel where strided)
    weft_tensor *r = weft_tensor_dtype(v) == k->to ? weft_tensor_contiguous(v) : weft_cast(v, k->to);
    weft_tensor_free(v);
    return r;
}

static void one(const char *shape, int nd, const int64_t *sizes, int view) {
    for (int i = 0; i < N_DTS; i++)
        for (int j = 0; j < N_DTS; j++) {
            weft_tensor *x = values(nd, sizes, k_dts[i], 40 + (uint64_t)(i * N_DTS + j));
            ccase k = {k_dts[j], view};
            char what[96];
            snprintf(what, sizeof what, "%s -> %s, %s", weft_dtype_name(k_dts[i]), weft_dtype_name(k_dts[j]), shape);
            wt_cuda_compare(what, run_cast, &k, 1, &x, 0, false);
            weft_tensor_free(x);
        }
}

static void test_contiguous(void) {
    const int64_t ns[] = {1, 3, 4, 5, 8, 1023, (1 << 20) + 3};
    char s[64];
    for (int i = 0; i < 7; i++) {
        snprintf(s, sizeof s, "%lld elements", (long long)ns[i]);
        one(s, 1, &ns[i], 0);
        if (ns[i] > 1) {
            snprintf(s, sizeof s, "%lld elements from the second", (long long)ns[i]);
            one(s, 1, &ns[i], 1);
        }
    }
}

static void test_strided(void) {
    one("(53,37) transposed", WEFT_DIMS(53, 37), 2);
    one("(1,300) broadcast to (37,300)", WEFT_DIMS(1, 300), 3);
    one("(5,6,7) permuted", WEFT_DIMS(5, 6, 7), 4);
    one("(1024,1030) transposed", WEFT_DIMS(1024, 1030), 2);
}

// Both ends of a u8 tensor on the device hold want.
static void check_ends(const char *what, weft_tensor *t, int64_t n, double want) {
    weft_tensor *flat = weft_view(t, 1, &n);
    weft_tensor *ends[2] = {flat ? weft_slice(flat, 0, 0, 3, 1) : NULL, flat ? weft_slice(flat, 0, n - 3, n, 1) : NULL};
    for (int p = 0; p < 2; p++) {
        weft_tensor *h = ends[p] ? weft_tensor_to(ends[p], WEFT_DEVICE_CPU) : NULL;
        double v[3] = {-1, -1, -1};
        CHECK(h != NULL);
        if (h) weft_tensor_to_f64(h, v, 3);
        if (v[0] != want || v[1] != want || v[2] != want)
            fprintf(stderr, "%s: %s: %g %g %g, want %g\n", what, p ? "tail" : "head", v[0], v[1], v[2], want);
        CHECK(v[0] == want && v[1] == want && v[2] == want);
        weft_tensor_free(h);
        weft_tensor_free(ends[p]);
    }
    weft_tensor_free(flat);
}

// 2^31 + 6 elements: the 64-bit paths of the converting copy (a broadcast f32 read into u8) and of the bit copy
// (a transposed (2, n/2) u8 made contiguous). Needs 4 GiB of device memory; where the GPU lacks it, says so.
static void test_huge(void) {
    const int64_t n = ((int64_t)1 << 31) + 6;
    const float x = 37.75f; // u8 of it: 37
    weft_tensor *h = weft_tensor_from_data(&x, WEFT_DIMS(1), WEFT_F32);
    weft_tensor *d = weft_tensor_to(h, WT_CUDA0);
    weft_tensor *wide = d ? weft_expand(d, 1, &n) : NULL;
    weft_tensor *u8 = wide ? weft_cast(wide, WEFT_U8) : NULL;
    weft_tensor *two = u8 ? weft_view(u8, WEFT_DIMS(2, n / 2)) : NULL;
    weft_tensor *tr = two ? weft_transpose(two, 0, 1) : NULL;
    weft_tensor *c = tr ? weft_tensor_contiguous(tr) : NULL;
    if (!c) {
        printf("test_huge: not run (%s)\n", weft_last_error());
    } else {
        check_ends("cast of a broadcast to u8", u8, n, 37);
        check_ends("transposed u8 made contiguous", c, n, 37);
    }
    weft_tensor *all[] = {h, d, wide, u8, two, tr, c};
    for (int i = 0; i < 7; i++) weft_tensor_free(all[i]);
}

// Source j of test_cast_multi as a view of base: from its second element (not 16-byte aligned) for j = 13,
// transposed (2, n/2) -> (n/2, 2) for j = 17, else base itself.
static weft_tensor *pair_view(weft_tensor *base, int j) {
    int64_t n = weft_tensor_numel(base);
    if (j == 13) return weft_slice(base, 0, 1, n, 1);
    if (j != 17) return weft_tensor_ref(base);
    weft_tensor *v = weft_view(base, WEFT_DIMS(2, n / 2)), *t = v ? weft_transpose(v, 0, 1) : NULL;
    weft_tensor_free(v);
    return t;
}

// cast_multi against the CPU's casts, bit for bit: 60 pairs, so two launches of the 48-tensor table, f32 to
// bf16 and to f16 by turns (the table closed at each change), lengths around the vector width and the
// 16384-element chunks, one empty; the pairs the table does not take run cast's own kernel: a source from
// its second element (not 16-byte aligned), a transposed one, an f64 one.
static void test_cast_multi(void) {
    enum { K = 60 };
    const weft_op_def *op = weft_op_find("cast_multi");
    CHECK(op != NULL);
    if (!op) return;
    weft_tensor *h[2 * K], *d[2 * K];
    for (int j = 0; j < K; j++) {
        int64_t n = j == 7 ? 0 : j == 13 ? 1001 : j == 17 ? 2 * 333 : j % 4 == 0 ? 16384 * (j / 8) + 5 : 1 + 13 * j;
        weft_dtype from = j == 11 ? WEFT_F64 : WEFT_F32, to = (j / 5) % 2 ? WEFT_F16 : WEFT_BF16;
        weft_tensor *hb = values(1, &n, from, 500 + (uint64_t)j), *db = hb ? weft_tensor_to(hb, WT_CUDA0) : NULL;
        h[j] = hb ? pair_view(hb, j) : NULL, d[j] = db ? pair_view(db, j) : NULL;
        CHECK(h[j] && d[j]);
        weft_tensor_free(hb);
        weft_tensor_free(db);
        h[K + j] = h[j] ? weft_tensor_zeros(weft_tensor_ndim(h[j]), weft_tensor_sizes(h[j]), to) : NULL;
        d[K + j] = h[K + j] ? weft_tensor_to(h[K + j], WT_CUDA0) : NULL;
    }
    CHECK(weft_op_apply_into(op, 2 * K, h, NULL, NULL) == WEFT_OK);
    CHECK(weft_op_apply_into(op, 2 * K, d, NULL, NULL) == WEFT_OK);
    for (int j = 0; j < K; j++) {
        weft_tensor *want = weft_cast(h[j], weft_tensor_dtype(h[K + j]));
        char what[64];
        snprintf(what, sizeof what, "cast_multi pair %d", j);
        wt_check_same(what, h[K + j], want, 0);
        wt_check_same(what, d[K + j], want, 0);
        weft_tensor_free(want);
    }
    for (int j = 0; j < 2 * K; j++) weft_tensor_free(h[j]), weft_tensor_free(d[j]);
}

int main(int argc, char **argv) {
    (void)argv;
    WT_CUDA_OR_SKIP();
    RUN(test_contiguous);
    RUN(test_strided);
    RUN(test_cast_multi);
    if (argc < 2) RUN(test_huge); // any argument leaves it out
    return wt_summary();
}
