// The CUDA kernels' strided index math (src/ops/cuda/cu_index.h), checked on the
// host, where it compiles as plain C (no GPU needed): the multiply-shift division
// against '/' for divisors and numerators over the whole 31-bit range, and the
// shared layout's offsets against a plain per-dim walk.
#include <stdint.h>

#include "ops/cuda/cu_index.h"
#include "weft_test.h"

static uint64_t g_rng = 88172645463325252ull;
static uint32_t rnd(void) { // xorshift64
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}

static void test_div(void) {
    const uint32_t top = 0x7fffffffu; // numerators and divisors below 2^31
    uint32_t ds[64];
    int nd = 0;
    for (uint32_t d = 1; d <= 40; d++) ds[nd++] = d;
    const uint32_t special[] = {64, 100, 255, 256, 257, 768, 1000, 1023, 1024, 1025, 3072, 65535, 65536, 65537,
                                1u << 30, (1u << 30) + 1, top - 1, top, 12345678, 2147483, 7, 3};
    for (size_t i = 0; i < sizeof special / sizeof *special; i++) ds[nd++] = special[i];
    long bad = 0;
    for (int j = 0; j < nd; j++) {
        weft_cu_divmod v = weft_cu_divmod_make(ds[j]);
        const uint32_t ns[] = {0, 1, ds[j] - 1, ds[j], ds[j] + 1, 2 * ds[j] - 1, top - 1, top, top - ds[j]};
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
            if (ns[i] <= top && weft_cu_div(v, ns[i]) != ns[i] / ds[j]) bad++;
        for (int i = 0; i < 20000; i++) {
            uint32_t n = rnd() & top;
            if (weft_cu_div(v, n) != n / ds[j]) bad++;
        }
    }
    for (int i = 0; i < 200000; i++) { // random divisors of every magnitude
        uint32_t d = (rnd() & top) >> (rnd() % 31);
        if (!d) d = 1;
        uint32_t n = rnd() & top;
        if (weft_cu_div(weft_cu_divmod_make(d), n) != n / d) bad++;
    }
    if (bad) fprintf(stderr, "test_div: %ld wrong quotients\n", bad);
    CHECK(bad == 0);
}

// offset of index i by the plain walk (what weft_cu_offset does on the device)
static int64_t walk(int nd, const int64_t *sizes, const int64_t *strides, int64_t i) {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        off += (i % sizes[d]) * strides[d];
        i /= sizes[d];
    }
    return off;
}

static void test_offsets(void) {
    long bad = 0;
    for (int trial = 0; trial < 300; trial++) {
        int64_t sizes[WEFT_CU_MAX_DIMS], st[3][WEFT_CU_MAX_DIMS];
        const int64_t *sp[3] = {st[0], st[1], st[2]};
        int nd = 1 + (int)(rnd() % 6);
        int64_t numel = 1;
        for (int d = 0; d < nd; d++) {
            sizes[d] = 1 + rnd() % 13;
            numel *= sizes[d];
        }
        for (int k = 0; k < 3; k++) { // k 0: contiguous; 1: some dims broadcast; 2: gaps between rows
            int64_t s = 1;
            for (int d = nd - 1; d >= 0; d--) {
                st[k][d] = k == 0 ? s : k == 1 ? (rnd() % 3 ? s : 0) : s * 2 + (int64_t)(rnd() % 3);
                s *= sizes[d] + (k == 2);
            }
        }
        weft_cu_index x;
        CHECK(weft_cu_index_make(&x, nd, sizes, 3, sp));
        for (int64_t i = 0; i < numel; i++) {
            uint32_t off[3];
            weft_cu_index_offsets(&x, 3, (uint32_t)i, off);
            for (int k = 0; k < 3; k++)
                if ((int64_t)off[k] != walk(nd, sizes, st[k], i)) bad++;
        }
    }
    if (bad) fprintf(stderr, "test_offsets: %ld wrong offsets\n", bad);
    CHECK(bad == 0);

    // 32 bits do not hold these: the kernels take their 64-bit path
    int64_t sizes[2] = {1 << 16, 1 << 15}, a[2] = {1 << 15, 1}, b[2] = {(int64_t)1 << 17, 1}, neg[2] = {-1, 1};
    const int64_t *pa[2] = {a, a}, *pb[2] = {a, b}, *pn[1] = {neg};
    weft_cu_index x;
    CHECK(!weft_cu_index_make(&x, 2, sizes, 1, pa)); // 2^31 elements
    sizes[0] = 1 << 15;                              // 2^30 elements
    CHECK(weft_cu_index_make(&x, 2, sizes, 2, pa));
    CHECK(!weft_cu_index_make(&x, 2, sizes, 2, pb)); // the second operand's offsets reach 2^32
    CHECK(!weft_cu_index_make(&x, 2, sizes, 1, pn));
    CHECK(!weft_cu_index_make(&x, 2, sizes, WEFT_CU_INDEX_OPS + 1, pa));
}

int main(void) {
    RUN(test_div);
    RUN(test_offsets);
    return wt_summary();
}
