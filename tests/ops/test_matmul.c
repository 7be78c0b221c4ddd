// matmul: torch.matmul semantics against a naive reference (1-D promotion,
// batch broadcasting, transposed and strided operands, f32 and f64), finite-
// difference gradients, and errors that name the op.
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

// Naive reference of a @ b for tensors of >= 1 dim, read element by element.
// Returns the result (row-major) in a malloc'd buffer; *n gets its size.
static double *ref_matmul(const weft_tensor *a, const weft_tensor *b, int64_t *n) {
    int na = weft_tensor_ndim(a), nbd = weft_tensor_ndim(b);
    const int64_t *sa = weft_tensor_sizes(a), *sb = weft_tensor_sizes(b);
    // promoted shapes
    int64_t pa[8], pb[8];
    int pna = na, pnb = nbd;
    if (na == 1) { pa[0] = 1; pa[1] = sa[0]; pna = 2; } else memcpy(pa, sa, sizeof(int64_t) * (size_t)na);
    if (nbd == 1) { pb[0] = sb[0]; pb[1] = 1; pnb = 2; } else memcpy(pb, sb, sizeof(int64_t) * (size_t)nbd);
    int64_t M = pa[pna - 2], K = pa[pna - 1], N = pb[pnb - 1];
    int nba = pna - 2, nbb = pnb - 2, nb = nba > nbb ? nba : nbb;
    int64_t bs[8], nbatch = 1;
    for (int d = 0; d < nb; d++) {
        int64_t x = d - (nb - nba) >= 0 ? pa[d - (nb - nba)] : 1, y = d - (nb - nbb) >= 0 ? pb[d - (nb - nbb)] : 1;
        bs[d] = x > y ? x : y;
        nbatch *= bs[d];
    }
    double *r = calloc((size_t)(nbatch * M * N + 1), sizeof(double));
    for (int64_t bi = 0; bi < nbatch; bi++) {
        int64_t bidx[8], rem = bi;
        for (int d = nb - 1; d >= 0; d--) { bidx[d] = rem % bs[d]; rem /= bs[d]; }
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) {
                    int64_t ia[8], ib[8];
                    for (int d = 0; d < nba; d++) { int od = d + (nb - nba); ia[d] = pa[d] == 1 ? 0 : bidx[od]; }
                    for (int d = 0; d < nbb; d++) { int od = d + (nb - nbb); ib[d] = pb[d] == 1 ? 0 : bidx[od]; }
                    double va, vb;
                    if (na == 1) ia[0] = k; else { ia[nba] = i; ia[nba + 1] = k; }
                    if (nbd == 1) ib[0] = k; else { ib[nbb] = k; ib[nbb + 1] = j; }
                    weft_tensor_get(a, ia, &va);
                    weft_tensor_get(b, ib, &vb);
                    s += va * vb;
                }
                r[(bi * M + i) * N + j] = s;
            }
    }
    *n = nbatch * M * N;
    return r;
}

static weft_tensor *randt(int nd, const int64_t *sz, weft_dtype dt, uint64_t seed) {
    weft_tensor *t = wt_rand64(nd, sz, -1, 1, seed, false);
    weft_tensor *c = weft_cast(t, dt);
    weft_tensor_free(t);
    return c;
}

// own: bit 0 frees a afterwards, bit 1 frees b (for operands built inline).
static void check_own(const char *what, weft_tensor *a, weft_tensor *b, int exp_nd, const int64_t *exp_sz, double tol,
                      int own);
static void check_against_ref(const char *what, weft_tensor *a, weft_tensor *b, int exp_nd, const int64_t *exp_sz,
                              double tol) {
    check_own(what, a, b, exp_nd, exp_sz, tol, 0);
}
static void check_own(const char *what, weft_tensor *a, weft_tensor *b, int exp_nd, const int64_t *exp_sz, double tol,
                      int own) {
    weft_tensor *c = weft_matmul(a, b);
    CHECK(c != NULL);
    if (!c) {
        if (own & 1) weft_tensor_free(a);
        if (own & 2) weft_tensor_free(b);
        return;
    }
    CHECK(weft_tensor_ndim(c) == exp_nd);
    if (weft_tensor_ndim(c) == exp_nd)
        for (int d = 0; d < exp_nd; d++) CHECK(weft_tensor_size(c, d) == exp_sz[d]);
    int64_t n;
    double *r = ref_matmul(a, b, &n);
    wt_check_values(what, c, r, n, tol);
    free(r);
    weft_tensor_free(c);
    if (own & 1) weft_tensor_free(a);
    if (own & 2) weft_tensor_free(b);
}

static void test_shapes(void) {
    weft_dtype dts[2] = {WEFT_F32, WEFT_F64};
    for (int k = 0; k < 2; k++) {
        weft_dtype dt = dts[k];
        double tol = dt == WEFT_F32 ? 1e-5 : 1e-12;
        weft_tensor *m23 = randt(WEFT_DIMS(2, 3), dt, 1), *m34 = randt(WEFT_DIMS(3, 4), dt, 2);
        weft_tensor *v3 = randt(WEFT_DIMS(3), dt, 3), *v2 = randt(WEFT_DIMS(2), dt, 4);
        weft_tensor *b534 = randt(WEFT_DIMS(5, 3, 4), dt, 5), *b2123 = randt(WEFT_DIMS(2, 1, 2, 3), dt, 6);
        weft_tensor *b634 = randt(WEFT_DIMS(6, 3, 4), dt, 7), *b423 = randt(WEFT_DIMS(4, 2, 3), dt, 8);
        check_against_ref("2d", m23, m34, WEFT_DIMS(2, 4), tol);
        check_against_ref("vec.vec", v3, v3, 0, NULL, tol);
        check_against_ref("mat@vec", m23, v3, WEFT_DIMS(2), tol);
        check_against_ref("vec@mat", v3, m34, WEFT_DIMS(4), tol);
        check_against_ref("vec@mat2", v2, m23, WEFT_DIMS(3), tol);
        check_own("batch@mat", b534, randt(WEFT_DIMS(4, 2), dt, 9), WEFT_DIMS(5, 3, 2), tol, 2);
        check_against_ref("mat@batch", m23, b534, WEFT_DIMS(5, 2, 4), tol);
        check_against_ref("batch bcast", b2123, b634, WEFT_DIMS(2, 6, 2, 4), tol);
        check_own("batch@vec", b534, randt(WEFT_DIMS(4), dt, 10), WEFT_DIMS(5, 3), tol, 2);
        check_against_ref("vec@batch", v2, b423, WEFT_DIMS(4, 3), tol);
        weft_tensor *ts[] = {m23, m34, v3, v2, b534, b2123, b634, b423};
        for (int i = 0; i < 8; i++) weft_tensor_free(ts[i]);
    }
}

// Transposed views go to BLAS with the transpose flag; strided views are copied.
static void test_layouts(void) {
    weft_dtype dts[2] = {WEFT_F32, WEFT_F64};
    for (int k = 0; k < 2; k++) {
        weft_dtype dt = dts[k];
        double tol = dt == WEFT_F32 ? 1e-5 : 1e-12;
        weft_tensor *w = randt(WEFT_DIMS(7, 5), dt, 11), *x = randt(WEFT_DIMS(3, 7), dt, 12);
        weft_tensor *wt = weft_transpose(w, 0, 1); // (5,7), strides (1,5)
        weft_tensor *xt = weft_transpose(x, 0, 1); // (7,3)
        check_against_ref("x@w", x, w, WEFT_DIMS(3, 5), tol);
        check_against_ref("wt@xt", wt, xt, WEFT_DIMS(5, 3), tol);
        check_own("xt^T@w", weft_transpose(xt, 0, 1), w, WEFT_DIMS(3, 5), tol, 1);
        // batched transposed: (4,7,5) -> (4,5,7)
        weft_tensor *bw = randt(WEFT_DIMS(4, 7, 5), dt, 13), *bwt = weft_transpose(bw, 1, 2);
        check_own("batched T", bwt, randt(WEFT_DIMS(4, 7, 2), dt, 14), WEFT_DIMS(4, 5, 2), tol, 2);
        // step-2 slice along the last dim: neither layout, copied
        weft_tensor *big = randt(WEFT_DIMS(3, 14), dt, 15), *sl = weft_slice(big, 1, 0, 14, 2); // (3,7)
        check_against_ref("slice step", sl, w, WEFT_DIMS(3, 5), tol);
        // column slice: row stride 14 > 7 is a valid ld
        weft_tensor *cs = weft_slice(big, 1, 2, 9, 1);
        check_against_ref("col slice", cs, w, WEFT_DIMS(3, 5), tol);
        // expanded (stride 0) batch dim
        weft_tensor *e = weft_expand(x, WEFT_DIMS(4, 3, 7));
        check_against_ref("expanded", e, w, WEFT_DIMS(4, 3, 5), tol);
        weft_tensor *ts[] = {w, x, wt, xt, bw, bwt, big, sl, cs, e};
        for (int i = 0; i < 10; i++) weft_tensor_free(ts[i]);
    }
    // K = 0 gives zeros; M = 0 gives an empty result
    weft_tensor *a = weft_tensor_ones(WEFT_DIMS(2, 0), WEFT_F32), *b = weft_tensor_ones(WEFT_DIMS(0, 3), WEFT_F32);
    weft_tensor *c = weft_matmul(a, b);
    double z[6] = {0};
    wt_check_values("k=0", c, z, 6, 0);
    weft_tensor *a0 = weft_tensor_ones(WEFT_DIMS(0, 2), WEFT_F32), *b0 = weft_tensor_ones(WEFT_DIMS(2, 3), WEFT_F32);
    weft_tensor *c0 = weft_matmul(a0, b0);
    CHECK(c0 && weft_tensor_numel(c0) == 0 && weft_tensor_size(c0, 1) == 3);
    weft_tensor *ts[] = {a, b, c, a0, b0, c0};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
}

static weft_tensor *f_mm(weft_tensor *const *in, void *u) { return weft_matmul(in[0], in[1]); }
static weft_tensor *f_mm_ta(weft_tensor *const *in, void *u) { // a^T @ b with a transposed view
    weft_tensor *t = weft_transpose(in[0], -1, -2), *r = weft_matmul(t, in[1]);
    weft_tensor_free(t);
    return r;
}
static weft_tensor *f_mm_sl(weft_tensor *const *in, void *u) { // strided slice operand
    weft_tensor *t = weft_slice(in[0], 1, 0, 6, 2), *r = weft_matmul(t, in[1]);
    weft_tensor_free(t);
    return r;
}

static void grad_case(weft_gradcheck_fn f, int nda, const int64_t *sa, int ndb, const int64_t *sb, uint64_t seed) {
    weft_tensor *in[2] = {wt_rand64(nda, sa, -1, 1, seed, true), wt_rand64(ndb, sb, -1, 1, seed + 1, true)};
    CHECK_GRAD(f, 2, in, NULL);
    weft_tensor_free(in[0]);
    weft_tensor_free(in[1]);
}

static void test_backward(void) {
    grad_case(f_mm, WEFT_DIMS(2, 3), WEFT_DIMS(3, 4), 20);
    grad_case(f_mm, WEFT_DIMS(3), WEFT_DIMS(3), 21);
    grad_case(f_mm, WEFT_DIMS(3), WEFT_DIMS(3, 2), 22);
    grad_case(f_mm, WEFT_DIMS(2, 3), WEFT_DIMS(3), 23);
    grad_case(f_mm, WEFT_DIMS(2, 1, 2, 3), WEFT_DIMS(4, 3, 2), 24); // batch broadcast both ways
    grad_case(f_mm, WEFT_DIMS(3, 2, 4), WEFT_DIMS(4, 5), 25);      // shared b: folded grad_b
    grad_case(f_mm, WEFT_DIMS(2, 4), WEFT_DIMS(3, 4, 5), 26);      // shared a
    grad_case(f_mm, WEFT_DIMS(3, 2, 4), WEFT_DIMS(4), 27);
    grad_case(f_mm_ta, WEFT_DIMS(2, 4, 3), WEFT_DIMS(2, 4, 2), 28);
    grad_case(f_mm_sl, WEFT_DIMS(2, 6), WEFT_DIMS(3, 2), 29);

    // grad of sum(a @ b) in closed form: grad_a[i,k] = sum_j b[k,j], grad_b[k,j] = sum_i a[i,k]
    weft_tensor *a = wt_rand64(WEFT_DIMS(2, 3), -1, 1, 30, true), *b = wt_rand64(WEFT_DIMS(3, 4), -1, 1, 31, true);
    weft_tensor *c = weft_matmul(a, b), *s = weft_sum(c, 0, NULL, false);
    CHECK(weft_backward(s, NULL, NULL) == WEFT_OK);
    double av[6], bv[12], ga[6], gb[12];
    weft_tensor_to_f64(a, av, 6);
    weft_tensor_to_f64(b, bv, 12);
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 3; k++) ga[i * 3 + k] = bv[k * 4] + bv[k * 4 + 1] + bv[k * 4 + 2] + bv[k * 4 + 3];
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 4; j++) gb[k * 4 + j] = av[k] + av[3 + k];
    wt_check_values("grad a", weft_tensor_grad(a), ga, 6, 1e-12);
    wt_check_values("grad b", weft_tensor_grad(b), gb, 12, 1e-12);
    weft_tensor *ts[] = {a, b, c, s};
    for (int i = 0; i < 4; i++) weft_tensor_free(ts[i]);
}

static void expect_error(weft_tensor *r) {
    CHECK(r == NULL);
    CHECK(strstr(weft_last_error(), "matmul") != NULL);
    weft_tensor_free(r);
    weft_clear_error();
}

static void test_errors(void) {
    weft_tensor *a = weft_tensor_ones(WEFT_DIMS(2, 3), WEFT_F32), *b = weft_tensor_ones(WEFT_DIMS(4, 2), WEFT_F32);
    weft_tensor *d = weft_tensor_ones(WEFT_DIMS(3, 2), WEFT_F64), *s = weft_tensor_scalar(1, WEFT_F32);
    weft_tensor *i = weft_tensor_ones(WEFT_DIMS(2, 2), WEFT_I32);
    weft_tensor *b1 = weft_tensor_ones(WEFT_DIMS(2, 2, 3), WEFT_F32), *b2 = weft_tensor_ones(WEFT_DIMS(3, 3, 2), WEFT_F32);
    expect_error(weft_matmul(a, b));   // K mismatch
    expect_error(weft_matmul(a, d));   // dtype mismatch
    expect_error(weft_matmul(a, s));   // 0-d
    expect_error(weft_matmul(i, i));   // integer dtype
    expect_error(weft_matmul(b1, b2)); // batch 2 vs 3
    expect_error(weft_matmul(NULL, a));
    weft_tensor *ts[] = {a, b, d, s, i, b1, b2};
    for (int k = 0; k < 7; k++) weft_tensor_free(ts[k]);
}

static uint64_t n_allocs(void) {
    weft_memory_stats st;
    weft_memory_stats_get(WEFT_DEVICE_CPU, &st);
    return st.n_allocs;
}

// Transposed operands reach BLAS without a copy: the output is the only allocation.
static void test_no_copy(void) {
    weft_tensor *w = randt(WEFT_DIMS(6, 5), WEFT_F32, 50), *x = randt(WEFT_DIMS(4, 6, 3), WEFT_F32, 51);
    weft_tensor *wt = weft_transpose(w, 0, 1), *xt = weft_transpose(x, 1, 2); // (5,6), (4,3,6)
    uint64_t before = n_allocs();
    weft_tensor *c = weft_matmul(xt, w); // (4,3,6) @ (6,5)
    CHECK(c && n_allocs() - before == 1);
    before = n_allocs();
    weft_tensor *d = weft_matmul(wt, w); // (5,6) @ (6,5)
    CHECK(d && n_allocs() - before == 1);
    before = n_allocs();
    weft_tensor *sl = weft_slice(x, 2, 0, 3, 2); // (4,6,2), last-dim step 2: copied
    weft_tensor *e = weft_matmul(wt, sl);
    CHECK(e && n_allocs() - before == 2);
    weft_tensor *ts[] = {w, x, wt, xt, c, d, sl, e};
    for (int k = 0; k < 8; k++) weft_tensor_free(ts[k]);
}

// A larger product through the threaded BLAS path, against the naive loop.
static void test_large(void) {
    weft_tensor *a = randt(WEFT_DIMS(67, 129), WEFT_F32, 40), *b = randt(WEFT_DIMS(129, 33), WEFT_F32, 41);
    weft_tensor *bt = weft_transpose(b, 0, 1), *btc = weft_tensor_contiguous(bt), *btt = weft_transpose(btc, 0, 1);
    check_against_ref("large", a, b, WEFT_DIMS(67, 33), 1e-4);
    check_against_ref("large T", a, btt, WEFT_DIMS(67, 33), 1e-4);
    weft_tensor *ts[] = {a, b, bt, btc, btt};
    for (int k = 0; k < 5; k++) weft_tensor_free(ts[k]);
}

// Small products are split into row or column blocks, one per thread (and
// batches of small products one per thread): every layout through those
// paths against the naive loop, at 2 threads, and against one thread.
static void test_split(void) {
    weft_dtype dts[2] = {WEFT_F32, WEFT_F64};
    for (int k = 0; k < 2; k++) {
        weft_dtype dt = dts[k];
        double tol = dt == WEFT_F32 ? 1e-4 : 1e-12;
        weft_tensor *tall = randt(WEFT_DIMS(70, 129), dt, 50), *thin = randt(WEFT_DIMS(129, 9), dt, 51);
        weft_tensor *wide = randt(WEFT_DIMS(129, 70), dt, 52), *flat = randt(WEFT_DIMS(9, 129), dt, 53);
        weft_tensor *tall_t = weft_transpose(wide, 0, 1), *thin_t = weft_transpose(flat, 0, 1); // (70,129), (129,9)
        weft_tensor *wide_t = weft_transpose(tall, 0, 1), *flat_t = weft_transpose(thin, 0, 1); // (129,70), (9,129)
        weft_set_num_threads(2);
        check_against_ref("rows", tall, thin, WEFT_DIMS(70, 9), tol);
        check_against_ref("rows, A^T", tall_t, thin, WEFT_DIMS(70, 9), tol);
        check_against_ref("rows, B^T", tall, thin_t, WEFT_DIMS(70, 9), tol);
        check_against_ref("cols", flat, wide, WEFT_DIMS(9, 70), tol);
        check_against_ref("cols, A^T", flat_t, wide, WEFT_DIMS(9, 70), tol);
        check_against_ref("cols, B^T", flat, wide_t, WEFT_DIMS(9, 70), tol);
        // batches: per-batch b (not foldable into one product), broadcast b with transposed a
        weft_tensor *ba = randt(WEFT_DIMS(6, 40, 33), dt, 54), *bb = randt(WEFT_DIMS(6, 33, 50), dt, 55);
        weft_tensor *bat = randt(WEFT_DIMS(6, 33, 40), dt, 56), *bat_t = weft_transpose(bat, 1, 2);
        weft_tensor *b2 = randt(WEFT_DIMS(33, 50), dt, 57);
        check_against_ref("batched", ba, bb, WEFT_DIMS(6, 40, 50), tol);
        check_against_ref("batched A^T, shared b", bat_t, b2, WEFT_DIMS(6, 40, 50), tol);
        // the same numbers on one thread (one BLAS call per product)
        weft_tensor *c2 = weft_matmul(tall_t, thin_t), *d2 = weft_matmul(ba, bb);
        weft_set_num_threads(1);
        weft_tensor *c1 = weft_matmul(tall_t, thin_t), *d1 = weft_matmul(ba, bb);
        weft_set_num_threads(2);
        wt_check_same("split vs one thread", c2, c1, tol);
        wt_check_same("batched vs one thread", d2, d1, tol);
        weft_tensor *ts[] = {tall, thin, wide, flat, tall_t, thin_t, wide_t, flat_t, ba, bb, bat, bat_t, b2, c2, d2, c1, d1};
        for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) weft_tensor_free(ts[i]);
    }
}

int main(void) {
    RUN(test_shapes);
    RUN(test_split);
    RUN(test_layouts);
    RUN(test_backward);
    RUN(test_errors);
    RUN(test_large);
    RUN(test_no_copy);
    return wt_summary();
}
