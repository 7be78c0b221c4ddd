// Index ops: embedding, index_select, gather, scatter_add, concat, stack.
// Forward against naive loops over the logical values (so strided inputs are
// checked against what they mean, not their memory), backward by finite
// differences (repeated indices, so accumulation is exercised), the backward
// ops' own backward, the multithreaded paths, and error cases.
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "weft_test.h"

#define FREE(...)                                                                     \
    do {                                                                              \
        weft_tensor *ts_[] = {__VA_ARGS__};                                           \
        for (size_t k_ = 0; k_ < sizeof ts_ / sizeof ts_[0]; k_++) weft_tensor_free(ts_[k_]); \
    } while (0)

static double *values(const weft_tensor *t) {
    int64_t n = weft_tensor_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    weft_tensor_to_f64(t, v, n);
    return v;
}
static weft_tensor *idx64(const int64_t *v, int ndim, const int64_t *sizes) {
    return weft_tensor_from_data(v, ndim, sizes, WEFT_I64);
}
static weft_tensor *idx32(const int64_t *v, int ndim, const int64_t *sizes) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= sizes[d];
    int32_t *w = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) w[i] = (int32_t)v[i];
    weft_tensor *t = weft_tensor_from_data(w, ndim, sizes, WEFT_I32);
    free(w);
    return t;
}
static bool err_names(const char *op) { return strstr(weft_last_error(), op) != NULL; }

// Row-major linear index <-> multi-index.
static void unravel(int64_t i, int nd, const int64_t *sz, int64_t *m) {
    for (int d = nd - 1; d >= 0; d--) {
        m[d] = i % sz[d];
        i /= sz[d];
    }
}
static int64_t ravel(int nd, const int64_t *sz, const int64_t *m) {
    int64_t i = 0;
    for (int d = 0; d < nd; d++) i = i * sz[d] + m[d];
    return i;
}

// ---------------------------------------------------------------- embedding
static void check_embedding(weft_tensor *w, weft_tensor *ix, const char *what) {
    weft_tensor *y = weft_embedding(w, ix);
    CHECK(y != NULL);
    if (!y) return;
    int64_t D = weft_tensor_size(w, 1), n = weft_tensor_numel(ix);
    CHECK(weft_tensor_ndim(y) == weft_tensor_ndim(ix) + 1 && weft_tensor_size(y, -1) == D);
    CHECK(weft_tensor_dtype(y) == weft_tensor_dtype(w));
    double *wv = values(w), *iv = values(ix), *ref = malloc(sizeof(double) * (size_t)(n * D + 1));
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < D; k++) ref[i * D + k] = wv[(int64_t)iv[i] * D + k];
    wt_check_values(what, y, ref, n * D, 1e-12);
    free(wv);
    free(iv);
    free(ref);
    weft_tensor_free(y);
}

static void test_embedding_forward(void) {
    int64_t iv[] = {3, 0, 3, 4, 1, 3};
    weft_tensor *w64 = wt_rand64(WEFT_DIMS(5, 4), -1, 1, 1, false);
    weft_tensor *w32 = weft_cast(w64, WEFT_F32);
    weft_tensor *i1 = idx64(iv, WEFT_DIMS(6)), *i2 = idx32(iv, WEFT_DIMS(2, 3));
    check_embedding(w64, i1, "embedding f64 i64 1-d");
    check_embedding(w32, i2, "embedding f32 i32 2-d");
    // strided weight (a transposed (D,V)) and strided indices (a transposed (3,2))
    weft_tensor *wt_ = wt_rand64(WEFT_DIMS(4, 5), -1, 1, 2, false), *wT = weft_transpose(wt_, 0, 1);
    weft_tensor *i3 = idx64(iv, WEFT_DIMS(3, 2)), *i3T = weft_transpose(i3, 0, 1);
    CHECK(!weft_tensor_is_contiguous(wT) && !weft_tensor_is_contiguous(i3T));
    check_embedding(wT, i3T, "embedding strided weight+indices");
    // integer tables work too
    weft_tensor *wi = weft_tensor_arange(0, 20, 1, WEFT_I64), *wi2 = weft_reshape(wi, WEFT_DIMS(5, 4));
    check_embedding(wi2, i1, "embedding i64 table");
    // empty indices
    weft_tensor *ie = weft_tensor_empty(WEFT_DIMS(0), WEFT_I64), *ye = weft_embedding(w64, ie);
    CHECK(ye && weft_tensor_size(ye, 0) == 0 && weft_tensor_size(ye, 1) == 4);
    FREE(w64, w32, i1, i2, wt_, wT, i3, i3T, wi, wi2, ie, ye);
}

typedef struct {
    weft_tensor *ix, *ix2;
    int dim;
    bool transpose; // take a transposed view of input 0 first
} gc_user;

static weft_tensor *maybe_t(weft_tensor *x, const gc_user *u) {
    return u->transpose ? weft_transpose(x, 0, 1) : weft_tensor_ref(x);
}
static weft_tensor *f_embedding(weft_tensor *const *in, void *user) {
    gc_user *u = user;
    weft_tensor *w = maybe_t(in[0], u), *y = weft_embedding(w, u->ix);
    weft_tensor_free(w);
    return y;
}

static void test_embedding_grad(void) {
    int64_t iv[] = {2, 0, 2, 2, 4, 0}; // row 2 three times, row 0 twice, rows 1,3 never
    weft_tensor *ix = idx64(iv, WEFT_DIMS(2, 3));
    weft_tensor *w = wt_rand64(WEFT_DIMS(5, 3), -1, 1, 3, true);
    gc_user u = {.ix = ix};
    CHECK_GRAD(f_embedding, 1, &w, &u);
    // exact counts: d sum(y) / d w[v, :] = occurrences of v
    weft_tensor *y = weft_embedding(w, ix), *s = weft_sum(y, 0, NULL, false);
    CHECK(weft_backward(s, NULL, NULL) == WEFT_OK);
    double cnt[5] = {2, 0, 3, 0, 1}, ref[15];
    for (int v = 0; v < 5; v++)
        for (int k = 0; k < 3; k++) ref[v * 3 + k] = cnt[v];
    wt_check_values("embedding grad counts", weft_tensor_grad(w), ref, 15, 0);
    // strided weight: leaf (D,V), transposed inside f; int32 indices
    weft_tensor *ix32 = idx32(iv, WEFT_DIMS(6)), *wt_ = wt_rand64(WEFT_DIMS(3, 5), -1, 1, 4, true);
    gc_user u2 = {.ix = ix32, .transpose = true};
    CHECK_GRAD(f_embedding, 1, &wt_, &u2);
    FREE(ix, w, y, s, ix32, wt_);
}

// The backward op differentiates again (its adjoint is the lookup).
static weft_tensor *f_embedding_bw(weft_tensor *const *in, void *user) {
    gc_user *u = user;
    weft_tensor *args[2] = {in[0], u->ix};
    weft_attrs at = {.i = {5}};
    return weft_op_apply1(weft_op_find("embedding_backward"), 2, args, &at);
}
static void test_embedding_double_backward(void) {
    int64_t iv[] = {1, 4, 1, 1};
    weft_tensor *ix = idx64(iv, WEFT_DIMS(2, 2)), *g = wt_rand64(WEFT_DIMS(2, 2, 3), -1, 1, 5, true);
    gc_user u = {.ix = ix};
    CHECK_GRAD(f_embedding_bw, 1, &g, &u);
    // second order through the public op: d/dw of sum((dL/dw)^2) where L = sum(emb(w)^2)
    weft_tensor *w = wt_rand64(WEFT_DIMS(5, 3), -1, 1, 6, true);
    weft_tensor *y = weft_embedding(w, ix), *y2 = weft_mul(y, y), *L = weft_sum(y2, 0, NULL, false);
    weft_backward_opts o = {.create_graph = true};
    CHECK(weft_backward(L, NULL, &o) == WEFT_OK);
    weft_tensor *gw = weft_tensor_ref(weft_tensor_grad(w));
    CHECK(weft_tensor_requires_grad(gw));
    weft_tensor_zero_grad(w);
    weft_tensor *g2 = weft_mul(gw, gw), *L2 = weft_sum(g2, 0, NULL, false);
    CHECK(weft_backward(L2, NULL, NULL) == WEFT_OK);
    // dL/dw[v] = 2 c_v w[v]  =>  L2 = sum 4 c_v^2 w^2  =>  d/dw = 8 c_v^2 w
    double cnt[5] = {0, 3, 0, 0, 1}, *wv = values(w), ref[15];
    for (int v = 0; v < 5; v++)
        for (int k = 0; k < 3; k++) ref[v * 3 + k] = 8 * cnt[v] * cnt[v] * wv[v * 3 + k];
    wt_check_values("embedding second order", weft_tensor_grad(w), ref, 15, 1e-12);
    free(wv);
    FREE(ix, g, w, y, y2, L, gw, g2, L2);
}

// A bf16 / f16 gradient (a table made under autocast, as the recurrent layers' folded input gates): each row sum
// is taken in f32 and rounded once, so it is within one rounding (2^-8 bf16, 2^-11 f16, relative) of the exact sum
// of the half values; rows never looked up are 0. Also through the public op's autograd: the lookup's gradient.
static void test_embedding_backward_half(void) {
    int64_t n = 600, V = 7, D = 5; // 600 rows into 7: long sums, where rounding each partial sum would drift
    int64_t *iv = malloc(sizeof(int64_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) iv[i] = i % 5 == 4 ? 6 : (i * 3) % 5; // rows 0-4 and 6; row 5 never
    weft_tensor *ix = idx64(iv, WEFT_DIMS(n));
    static const weft_dtype dts[2] = {WEFT_BF16, WEFT_F16};
    for (int k = 0; k < 2; k++) {
        weft_tensor *g64 = wt_rand64(WEFT_DIMS(n, D), 0.5, 1, 40 + k, false); // positive: no cancellation
        weft_tensor *g = weft_cast(g64, dts[k]), *gw = weft_cast(g, WEFT_F64); // the half values, exactly
        double *gv = values(gw), ref[7 * 5] = {0};
        for (int64_t i = 0; i < n; i++)
            for (int64_t d = 0; d < D; d++) ref[iv[i] * D + d] += gv[i * D + d];
        weft_tensor *args[2] = {g, ix};
        weft_attrs at = {.i = {V}};
        weft_tensor *out = weft_op_apply1(weft_op_find("embedding_backward"), 2, args, &at);
        CHECK(out && weft_tensor_dtype(out) == dts[k]);
        double *ov = out ? values(out) : NULL, worst = 0, u = k ? 0x1p-11 : 0x1p-8;
        for (int64_t j = 0; ov && j < V * D; j++) {
            if (ref[j] == 0) CHECK(ov[j] == 0);
            else worst = fmax(worst, fabs(ov[j] - ref[j]) / ref[j]);
        }
        CHECK(ov && worst <= u * (1 + 1e-3));
        // the lookup of a half table differentiates: its gradient is this op's
        weft_tensor *w = weft_tensor_zeros(WEFT_DIMS(V, D), dts[k]);
        weft_tensor_set_requires_grad(w, true);
        weft_tensor *y = weft_embedding(w, ix);
        CHECK(y && weft_backward(y, g, NULL) == WEFT_OK);
        double *wg = weft_tensor_grad(w) ? values(weft_tensor_grad(w)) : NULL;
        CHECK(wg && ov && !memcmp(wg, ov, sizeof(double) * (size_t)(V * D)));
        free(wg);
        free(ov);
        free(gv);
        FREE(g64, g, gw, out, w, y);
    }
    free(iv);
    weft_tensor_free(ix);
}

// ------------------------------------------------------------- index_select
static void check_index_select(weft_tensor *t, int dim, weft_tensor *ix, const char *what) {
    weft_tensor *y = weft_index_select(t, dim, ix);
    CHECK(y != NULL);
    if (!y) return;
    int nd = weft_tensor_ndim(t), d = dim < 0 ? dim + nd : dim;
    int64_t osz[WEFT_MAX_DIMS], m[WEFT_MAX_DIMS];
    memcpy(osz, weft_tensor_sizes(t), sizeof(int64_t) * (size_t)nd);
    osz[d] = weft_tensor_numel(ix);
    CHECK(weft_tensor_ndim(y) == nd && weft_tensor_size(y, d) == osz[d]);
    int64_t n = weft_tensor_numel(y);
    double *tv = values(t), *iv = values(ix), *ref = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) {
        unravel(i, nd, osz, m);
        m[d] = (int64_t)iv[m[d]];
        ref[i] = tv[ravel(nd, weft_tensor_sizes(t), m)];
    }
    wt_check_values(what, y, ref, n, 1e-12);
    free(tv);
    free(iv);
    free(ref);
    weft_tensor_free(y);
}

static void test_index_select_forward(void) {
    int64_t iv[] = {2, 0, 2, 1, 2};
    weft_tensor *ix = idx64(iv, WEFT_DIMS(5)), *ix32 = idx32(iv, WEFT_DIMS(5));
    weft_tensor *t = wt_rand64(WEFT_DIMS(3, 4, 5), -1, 1, 7, false), *t32 = weft_cast(t, WEFT_F32);
    check_index_select(t, 0, ix, "index_select dim0");
    check_index_select(t, 1, ix32, "index_select dim1 i32");
    check_index_select(t32, 2, ix, "index_select dim2 f32");
    check_index_select(t, -1, ix, "index_select dim -1");
    // strided input (permuted) and strided index (a step-2 slice)
    weft_tensor *p = weft_permute(t, (int[]){2, 0, 1}); // (5,3,4)
    int64_t iv2[] = {4, 9, 0, 9, 2, 9, 4, 9};
    weft_tensor *ixl = idx64(iv2, WEFT_DIMS(8)), *ixs = weft_slice(ixl, 0, 0, 8, 2); // {4,0,2,4}
    check_index_select(p, 0, ixs, "index_select permuted dim0");
    check_index_select(p, 1, ix, "index_select permuted dim1");
    check_index_select(p, 2, ix32, "index_select permuted dim2");
    // integer data
    weft_tensor *ti = weft_tensor_arange(0, 12, 1, WEFT_I64), *ti2 = weft_reshape(ti, WEFT_DIMS(3, 4));
    check_index_select(ti2, 0, ix, "index_select i64 data");
    FREE(ix, ix32, t, t32, p, ixl, ixs, ti, ti2);
}

static weft_tensor *f_index_select(weft_tensor *const *in, void *user) {
    gc_user *u = user;
    weft_tensor *x = maybe_t(in[0], u), *y = weft_index_select(x, u->dim, u->ix);
    weft_tensor_free(x);
    return y;
}
static weft_tensor *f_index_select_bw(weft_tensor *const *in, void *user) {
    gc_user *u = user;
    weft_tensor *args[2] = {in[0], u->ix};
    weft_attrs at = {.i = {u->dim, 4}};
    return weft_op_apply1(weft_op_find("index_select_backward"), 2, args, &at);
}

static void test_index_select_grad(void) {
    int64_t iv[] = {1, 3, 1, 1, 0};
    weft_tensor *ix = idx64(iv, WEFT_DIMS(5));
    weft_tensor *x = wt_rand64(WEFT_DIMS(4, 4, 3), -1, 1, 8, true);
    for (int dim = 0; dim < 2; dim++) {
        gc_user u = {.ix = ix, .dim = dim};
        CHECK_GRAD(f_index_select, 1, &x, &u);
        u.transpose = true; // non-contiguous input
        CHECK_GRAD(f_index_select, 1, &x, &u);
    }
    // the backward op's own backward
    weft_tensor *g = wt_rand64(WEFT_DIMS(3, 5), -1, 1, 9, true);
    gc_user ub = {.ix = ix, .dim = 1};
    CHECK_GRAD(f_index_select_bw, 1, &g, &ub);
    FREE(ix, x, g);
}

// ------------------------------------------------------------------- gather
static double *gather_ref(weft_tensor *t, int d, weft_tensor *ix) {
    int nd = weft_tensor_ndim(t);
    int64_t n = weft_tensor_numel(ix), m[WEFT_MAX_DIMS];
    double *tv = values(t), *iv = values(ix), *ref = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) {
        unravel(i, nd, weft_tensor_sizes(ix), m);
        m[d] = (int64_t)iv[i];
        ref[i] = tv[ravel(nd, weft_tensor_sizes(t), m)];
    }
    free(tv);
    free(iv);
    return ref;
}
static void check_gather(weft_tensor *t, int d, weft_tensor *ix, const char *what) {
    weft_tensor *y = weft_gather(t, d, ix);
    CHECK(y && weft_shape_equal(weft_tensor_ndim(y), weft_tensor_sizes(y), weft_tensor_ndim(ix), weft_tensor_sizes(ix)));
    double *ref = gather_ref(t, d < 0 ? d + weft_tensor_ndim(t) : d, ix);
    wt_check_values(what, y, ref, weft_tensor_numel(ix), 1e-12);
    free(ref);
    weft_tensor_free(y);
}

// Random valid index of the given shape for gather/scatter along d of t.
static weft_tensor *rand_index(int nd, const int64_t *sizes, int64_t hi, uint64_t seed, weft_dtype dt) {
    weft_generator *g = weft_generator_create(seed);
    weft_tensor *r = weft_tensor_randint(nd, sizes, 0, hi, dt, g);
    weft_generator_free(g);
    return r;
}

static void test_gather_forward(void) {
    weft_tensor *t = wt_rand64(WEFT_DIMS(4, 5, 6), -1, 1, 10, false), *t32 = weft_cast(t, WEFT_F32);
    for (int d = 0; d < 3; d++) {
        int64_t isz[3] = {3, 4, 5}; // smaller than t off dim, any size along dim
        isz[d] = 7;
        weft_tensor *ix = rand_index(3, isz, weft_tensor_size(t, d), 11 + d, d == 1 ? WEFT_I32 : WEFT_I64);
        check_gather(t, d, ix, "gather f64");
        check_gather(t32, d - 3, ix, "gather f32 negative dim");
        weft_tensor_free(ix);
    }
    // strided input and strided index
    weft_tensor *p = weft_transpose(t, 0, 2); // (6,5,4)
    weft_tensor *ixb = rand_index(3, (int64_t[]){6, 5, 3}, 5, 20, WEFT_I64), *ixT = weft_transpose(ixb, 0, 2); // (3,5,6)
    weft_tensor *ixs = weft_slice(ixT, 1, 0, 5, 2); // (3,3,6)
    weft_tensor *p2 = weft_slice(p, 2, 1, 4, 1);  // (6,5,3)
    weft_tensor *ixg = rand_index(3, (int64_t[]){6, 2, 3}, 5, 21, WEFT_I64);
    check_gather(p2, 1, ixg, "gather strided input");
    weft_tensor *tt = wt_rand64(WEFT_DIMS(3, 5, 6), -1, 1, 22, false);
    check_gather(tt, 1, ixs, "gather strided index");
    FREE(t, t32, p, ixb, ixT, ixs, p2, ixg, tt);
}

static weft_tensor *f_gather(weft_tensor *const *in, void *user) {
    gc_user *u = user;
    weft_tensor *x = maybe_t(in[0], u), *y = weft_gather(x, u->dim, u->ix);
    weft_tensor_free(x);
    return y;
}

static void test_gather_grad(void) {
    weft_tensor *x = wt_rand64(WEFT_DIMS(4, 3, 2), -1, 1, 23, true);
    for (int d = 0; d < 3; d++) {
        int64_t isz[3] = {3, 3, 2};
        isz[d] = 6; // more picks than the dim has: repeats
        weft_tensor *ix = rand_index(3, isz, d == 0 ? 4 : d == 1 ? 3 : 2, 24 + d, WEFT_I64);
        gc_user u = {.ix = ix, .dim = d};
        CHECK_GRAD(f_gather, 1, &x, &u);
        weft_tensor_free(ix);
    }
    // transposed input: (3,4,2) view, gather along dim 1
    weft_tensor *ix = rand_index(3, (int64_t[]){2, 5, 2}, 4, 30, WEFT_I32);
    gc_user u = {.ix = ix, .dim = 1, .transpose = true};
    CHECK_GRAD(f_gather, 1, &x, &u);
    FREE(x, ix);
}

// -------------------------------------------------------------- scatter_add
static void check_scatter(weft_tensor *t, int d, weft_tensor *ix, weft_tensor *src, const char *what) {
    weft_tensor *y = weft_scatter_add(t, d, ix, src);
    CHECK(y && weft_shape_equal(weft_tensor_ndim(y), weft_tensor_sizes(y), weft_tensor_ndim(t), weft_tensor_sizes(t)));
    int nd = weft_tensor_ndim(t);
    int64_t n = weft_tensor_numel(ix), m[WEFT_MAX_DIMS];
    double *ref = values(t), *iv = values(ix), *sv = values(src);
    for (int64_t i = 0; i < n; i++) {
        unravel(i, nd, weft_tensor_sizes(ix), m);
        double v = sv[ravel(nd, weft_tensor_sizes(src), m)];
        m[d] = (int64_t)iv[i];
        ref[ravel(nd, weft_tensor_sizes(t), m)] += v;
    }
    wt_check_values(what, y, ref, weft_tensor_numel(t), 1e-6);
    free(ref);
    free(iv);
    free(sv);
    weft_tensor_free(y);
}

static void test_scatter_add_forward(void) {
    weft_tensor *t = wt_rand64(WEFT_DIMS(4, 5, 6), -1, 1, 40, false);
    weft_tensor *src = wt_rand64(WEFT_DIMS(8, 9, 8), -1, 1, 41, false);
    weft_tensor *t32 = weft_cast(t, WEFT_F32), *s32 = weft_cast(src, WEFT_F32);
    for (int d = 0; d < 3; d++) {
        int64_t isz[3] = {3, 4, 5};
        isz[d] = 8; // more sources than targets: collisions
        weft_tensor *ix = rand_index(3, isz, weft_tensor_size(t, d), 42 + d, WEFT_I64);
        check_scatter(t, d, ix, src, "scatter_add f64");
        check_scatter(t32, d, ix, s32, "scatter_add f32");
        weft_tensor_free(ix);
    }
    // strided t, index and src
    weft_tensor *tb = wt_rand64(WEFT_DIMS(6, 4), -1, 1, 45, false), *tT = weft_transpose(tb, 0, 1); // (4,6)
    weft_tensor *sb = wt_rand64(WEFT_DIMS(7, 5), -1, 1, 46, false), *sT = weft_transpose(sb, 0, 1); // (5,7)
    weft_tensor *ib = rand_index(2, (int64_t[]){7, 5}, 6, 47, WEFT_I32), *iT = weft_transpose(ib, 0, 1); // (5,7)
    weft_tensor *iS = weft_slice(iT, 0, 0, 4, 1); // (4,7)
    check_scatter(tT, 1, iS, sT, "scatter_add strided");
    // integer data
    weft_tensor *ti = weft_tensor_zeros(WEFT_DIMS(3), WEFT_I64), *si = weft_tensor_ones(WEFT_DIMS(5), WEFT_I64);
    int64_t iv[] = {0, 2, 2, 2, 1};
    weft_tensor *ix = idx64(iv, WEFT_DIMS(5));
    check_scatter(ti, 0, ix, si, "scatter_add i64 counts");
    FREE(t, src, t32, s32, tb, tT, sb, sT, ib, iT, iS, ti, si, ix);
}

static weft_tensor *f_scatter(weft_tensor *const *in, void *user) {
    gc_user *u = user;
    weft_tensor *x = maybe_t(in[0], u), *y = weft_scatter_add(x, u->dim, u->ix, in[1]);
    weft_tensor_free(x);
    return y;
}

static void test_scatter_add_grad(void) {
    weft_tensor *t = wt_rand64(WEFT_DIMS(3, 4), -1, 1, 50, true);
    weft_tensor *src = wt_rand64(WEFT_DIMS(7, 6), -1, 1, 51, true); // larger than index: padded grad
    for (int d = 0; d < 2; d++) {
        int64_t isz[2] = {3, 4};
        isz[d] = 6;
        if (d == 1) isz[0] = 2;
        weft_tensor *ix = rand_index(2, isz, d ? 4 : 3, 52 + d, WEFT_I64);
        gc_user u = {.ix = ix, .dim = d};
        weft_tensor *in[2] = {t, src};
        CHECK_GRAD(f_scatter, 2, in, &u);
        weft_tensor_free(ix);
    }
    // transposed t (4,3) view, scatter along dim 0
    weft_tensor *ix = rand_index(2, (int64_t[]){6, 3}, 4, 55, WEFT_I64);
    gc_user u = {.ix = ix, .dim = 0, .transpose = true};
    weft_tensor *in[2] = {t, src};
    CHECK_GRAD(f_scatter, 2, in, &u);
    FREE(t, src, ix);
}

// ------------------------------------------------------------ concat, stack
static void check_concat(int n, weft_tensor *const *ts, int dim, const char *what) {
    weft_tensor *y = weft_concat(n, ts, dim);
    CHECK(y != NULL);
    if (!y) return;
    int nd = weft_tensor_ndim(ts[0]), d = dim < 0 ? dim + nd : dim;
    int64_t ny = weft_tensor_numel(y), m[WEFT_MAX_DIMS];
    double *ref = malloc(sizeof(double) * (size_t)(ny + 1));
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        double *v = values(ts[i]);
        for (int64_t e = 0; e < weft_tensor_numel(ts[i]); e++) {
            unravel(e, nd, weft_tensor_sizes(ts[i]), m);
            m[d] += at;
            ref[ravel(nd, weft_tensor_sizes(y), m)] = v[e];
        }
        at += weft_tensor_size(ts[i], d);
        free(v);
    }
    CHECK(weft_tensor_size(y, d) == at);
    wt_check_values(what, y, ref, ny, 0);
    free(ref);
    weft_tensor_free(y);
}

static void test_concat_forward(void) {
    weft_tensor *a = wt_rand64(WEFT_DIMS(2, 3, 4), -1, 1, 60, false);
    weft_tensor *b = wt_rand64(WEFT_DIMS(2, 1, 4), -1, 1, 61, false);
    weft_tensor *c = wt_rand64(WEFT_DIMS(2, 5, 4), -1, 1, 62, false);
    weft_tensor *e = weft_tensor_empty(WEFT_DIMS(2, 0, 4), WEFT_F64);
    weft_tensor *s1[] = {a, b, e, c};
    check_concat(4, s1, 1, "concat dim1");
    check_concat(1, s1, 0, "concat single");
    weft_tensor *s0[] = {a, a};
    check_concat(2, s0, 0, "concat dim0");
    check_concat(2, s0, -1, "concat dim -1");
    // strided inputs mixed with contiguous ones
    weft_tensor *cb = wt_rand64(WEFT_DIMS(2, 4, 5), -1, 1, 63, false), *cT = weft_transpose(cb, 1, 2); // (2,5,4)
    weft_tensor *sa = weft_slice(c, 1, 0, 5, 2); // (2,3,4)
    weft_tensor *s2[] = {cT, a, sa, b};
    check_concat(4, s2, 1, "concat strided");
    // f32 and i64
    weft_tensor *a32 = weft_cast(a, WEFT_F32), *c32 = weft_cast(c, WEFT_F32);
    weft_tensor *s3[] = {a32, c32};
    check_concat(2, s3, 1, "concat f32");
    weft_tensor *i1 = weft_tensor_arange(0, 6, 1, WEFT_I64), *i2 = weft_tensor_arange(10, 14, 1, WEFT_I64);
    weft_tensor *s4[] = {i1, i2};
    check_concat(2, s4, 0, "concat i64");
    // stack
    weft_tensor *s5[] = {a, c};
    CHECK(weft_stack(2, s5, 0) == NULL && err_names("stack")); // shapes differ
    weft_tensor *st = weft_stack(2, s0, 1);
    CHECK(st && weft_tensor_ndim(st) == 4 && weft_tensor_size(st, 1) == 2);
    double *av = values(a), *sv = st ? values(st) : NULL;
    bool ok = sv != NULL;
    for (int i = 0; ok && i < 2; i++)
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < 12; k++) ok &= sv[(i * 2 + j) * 12 + k] == av[i * 12 + k];
    CHECK(ok);
    free(av);
    free(sv);
    weft_tensor *sl = weft_stack(2, s0, -1);
    CHECK(sl && weft_tensor_ndim(sl) == 4 && weft_tensor_size(sl, 3) == 2);
    FREE(a, b, c, e, cb, cT, sa, a32, c32, i1, i2, st, sl);
}

static weft_tensor *f_concat(weft_tensor *const *in, void *user) {
    gc_user *u = user;
    weft_tensor *x = maybe_t(in[0], u); // (3,4) or transposed (4,3)->(3,4) when input is (4,3)
    weft_tensor *ts[3] = {x, in[1], in[2]};
    weft_tensor *y = weft_concat(3, ts, u->dim);
    weft_tensor_free(x);
    return y;
}
static weft_tensor *f_stack(weft_tensor *const *in, void *user) {
    gc_user *u = user;
    return weft_stack(3, in, u->dim);
}

static void test_concat_grad(void) {
    weft_tensor *a = wt_rand64(WEFT_DIMS(3, 4), -1, 1, 70, true), *b = wt_rand64(WEFT_DIMS(3, 2), -1, 1, 71, true);
    weft_tensor *c = wt_rand64(WEFT_DIMS(3, 1), -1, 1, 72, true);
    weft_tensor *in[3] = {a, b, c};
    gc_user u = {.dim = 1};
    CHECK_GRAD(f_concat, 3, in, &u);
    weft_tensor *aT = wt_rand64(WEFT_DIMS(4, 3), -1, 1, 73, true); // used transposed
    weft_tensor *in2[3] = {aT, b, c};
    gc_user u2 = {.dim = -1, .transpose = true};
    CHECK_GRAD(f_concat, 3, in2, &u2);
    weft_tensor *d = wt_rand64(WEFT_DIMS(2, 4), -1, 1, 74, true), *e = wt_rand64(WEFT_DIMS(1, 4), -1, 1, 75, true);
    weft_tensor *in3[3] = {a, d, e};
    gc_user u3 = {.dim = 0};
    CHECK_GRAD(f_concat, 3, in3, &u3);
    weft_tensor *p = wt_rand64(WEFT_DIMS(3, 4), -1, 1, 76, true), *q = wt_rand64(WEFT_DIMS(3, 4), -1, 1, 77, true);
    weft_tensor *in5[3] = {a, p, q};
    for (int dim = 0; dim < 3; dim++) {
        gc_user us = {.dim = dim};
        CHECK_GRAD(f_stack, 3, in5, &us);
    }
    FREE(a, b, c, aT, d, e, p, q);
}

// ---------------------------------------------- large (multithreaded paths)
static void test_large(void) {
    // embedding: 4000 x 64 outputs, vocab 50 (lots of repeats)
    int64_t V = 50, D = 64, N = 4000;
    weft_tensor *w = wt_rand64(WEFT_DIMS(V, D), -1, 1, 80, true);
    weft_tensor *ix = rand_index(1, (int64_t[]){N}, V, 81, WEFT_I64);
    check_embedding(w, ix, "embedding large");
    weft_tensor *y = weft_embedding(w, ix), *s = weft_sum(y, 0, NULL, false);
    CHECK(weft_backward(s, NULL, NULL) == WEFT_OK);
    double *iv = values(ix), *ref = calloc((size_t)(V * D), sizeof(double));
    for (int64_t i = 0; i < N; i++)
        for (int64_t k = 0; k < D; k++) ref[(int64_t)iv[i] * D + k] += 1;
    wt_check_values("embedding large grad", weft_tensor_grad(w), ref, V * D, 0);
    free(iv);
    free(ref);
    // index_select backward along dim 1 of (3, 40, 500): outer 3, target blocks split over the vocab
    weft_tensor *x = wt_rand64(WEFT_DIMS(3, 40, 500), -1, 1, 82, false);
    weft_tensor *ixs = rand_index(1, (int64_t[]){100}, 40, 83, WEFT_I64);
    check_index_select(x, 1, ixs, "index_select large");
    weft_tensor *g = wt_rand64(WEFT_DIMS(3, 100, 500), -1, 1, 84, false), *gin[2] = {g, ixs};
    weft_attrs at = {.i = {1, 40}};
    weft_tensor *gx = weft_op_apply1(weft_op_find("index_select_backward"), 2, gin, &at);
    double *gv = values(g), *xi = values(ixs), *r2 = calloc(3 * 40 * 500, sizeof(double));
    for (int o = 0; o < 3; o++)
        for (int j = 0; j < 100; j++)
            for (int k = 0; k < 500; k++) r2[(o * 40 + (int64_t)xi[j]) * 500 + k] += gv[(o * 100 + j) * 500 + k];
    wt_check_values("index_select_backward large", gx, r2, 3 * 40 * 500, 1e-12);
    free(gv);
    free(xi);
    free(r2);
    // gather / scatter_add along dim 0 of (300, 400): outer 1, split over inner
    weft_tensor *t = wt_rand64(WEFT_DIMS(300, 400), -1, 1, 85, false), *src = wt_rand64(WEFT_DIMS(500, 400), -1, 1, 86, false);
    weft_tensor *ig = rand_index(2, (int64_t[]){500, 400}, 300, 87, WEFT_I64);
    check_gather(t, 0, ig, "gather large");
    check_scatter(t, 0, ig, src, "scatter_add large");
    // along the last dim with one outer row: the element path splits the row over threads
    weft_tensor *r1 = wt_rand64(WEFT_DIMS(1, 50000), -1, 1, 88, false), *v1 = weft_reshape(r1, WEFT_DIMS(50000));
    weft_tensor *i1 = rand_index(2, (int64_t[]){1, 60000}, 50000, 89, WEFT_I64), *i1f = weft_reshape(i1, WEFT_DIMS(60000));
    check_gather(r1, 1, i1, "gather large last dim");
    check_index_select(v1, 0, i1f, "index_select large 1-d");
    weft_tensor *s1 = wt_rand64(WEFT_DIMS(1, 60000), -1, 1, 90, false);
    check_scatter(r1, 1, i1, s1, "scatter_add large last dim");
    FREE(r1, v1, i1, i1f, s1);
    // concat of large pieces
    weft_tensor *ca[] = {t, src, t};
    check_concat(3, ca, 0, "concat large dim0");
    weft_tensor *tT = weft_transpose(src, 0, 1), *tt = weft_transpose(t, 0, 1); // (400,500), (400,300)
    weft_tensor *cb[] = {tT, tt};
    check_concat(2, cb, 1, "concat large strided");
    FREE(w, ix, y, s, x, ixs, g, gx, t, src, ig, tT, tt);
}

// ------------------------------------------------------------------- errors
// ---------------------------------------------------------------- topk, sort
static weft_tensor *topk_vals(weft_tensor *const *in, void *user) {
    (void)user;
    weft_tensor *v = NULL;
    weft_topk(in[0], 3, 1, true, &v, NULL);
    return v;
}
// The reference: a selection over each row's logical values (best first, ties by the lower position, NaN largest).
static void topk_ref(const double *v, int nd, const int64_t *sz, int dim, int64_t k, bool largest, int64_t *ix) {
    int64_t n = sz[dim], rows = 1, inner = 1, m[8], osz[8];
    for (int d = 0; d < nd; d++) rows *= d == dim ? 1 : sz[d], inner *= d > dim ? sz[d] : 1, osz[d] = d == dim ? k : sz[d];
    bool *taken = malloc((size_t)n + 1);
    for (int64_t r = 0; r < rows; r++) {
        int64_t o = r / inner, in = r % inner;
        memset(taken, 0, (size_t)n + 1);
        for (int64_t t = 0; t < k; t++) {
            int64_t best = -1;
            double bv = 0;
            for (int64_t j = 0; j < n; j++) {
                unravel(o * n * inner + j * inner + in, nd, sz, m); // (o, j, in) in x's row-major order
                double x = v[ravel(nd, sz, m)];
                if (taken[j]) continue;
                bool better = best < 0 || (largest ? (x > bv || (isnan(x) && !isnan(bv))) : (x < bv || (isnan(bv) && !isnan(x))));
                if (better) best = j, bv = x;
            }
            taken[best] = true;
            unravel(o * k * inner + t * inner + in, nd, osz, m);
            ix[ravel(nd, osz, m)] = best;
        }
    }
    free(taken);
}

static void test_topk(void) {
    const int64_t sz[3] = {3, 7, 4};
    const weft_dtype dts[4] = {WEFT_F64, WEFT_F32, WEFT_I32, WEFT_I64};
    double v[84];
    for (int i = 0; i < 84; i++) v[i] = (double)((i * 37) % 11) - 5; // many ties
    v[9] = NAN, v[30] = NAN;
    for (int di = 0; di < 4; di++)
        for (int dim = 0; dim < 3; dim++)
            for (int largest = 0; largest < 2; largest++)
                for (int64_t k = 0; k <= sz[dim]; k += sz[dim] > 3 ? 3 : 1) {
                    bool fl = di < 2;
                    double vv[84];
                    for (int i = 0; i < 84; i++) vv[i] = !fl && isnan(v[i]) ? 6 : v[i];
                    weft_tensor *x64 = weft_tensor_from_data(vv, 3, sz, WEFT_F64), *x = weft_cast(x64, dts[di]);
                    weft_tensor *xt = weft_transpose(x, 0, 2), *xs = weft_tensor_clone(xt), *back = weft_transpose(xs, 0, 2);
                    for (int strided = 0; strided < 2; strided++) { // as given, and a transposed copy viewed back
                        weft_tensor *val = NULL, *ix = NULL;
                        CHECK(weft_topk(strided ? back : x, k, dim - 3, largest, &val, &ix) == WEFT_OK);
                        int64_t osz[3] = {sz[0], sz[1], sz[2]}, want[84];
                        osz[dim] = k;
                        int64_t n = osz[0] * osz[1] * osz[2];
                        topk_ref(vv, 3, sz, dim, k, largest, want);
                        double wantd[84], wantv[84];
                        for (int64_t i = 0; i < n; i++) {
                            int64_t m[3];
                            unravel(i, 3, osz, m);
                            m[dim] = want[i];
                            wantd[i] = (double)want[i], wantv[i] = vv[ravel(3, sz, m)];
                        }
                        char what[96];
                        snprintf(what, sizeof what, "topk %s dim %d k %lld %s%s", weft_dtype_name(dts[di]), dim,
                                 (long long)k, largest ? "largest" : "smallest", strided ? " strided" : "");
                        CHECK(ix && weft_tensor_dtype(ix) == WEFT_I64 && weft_tensor_size(ix, dim) == k);
                        CHECK(val && weft_tensor_dtype(val) == dts[di]);
                        if (ix) wt_check_values(what, ix, wantd, n, 0);
                        if (val) wt_check_values(what, val, wantv, n, 0);
                        FREE(val, ix);
                    }
                    FREE(x64, x, xt, xs, back);
                }
    // sort: the whole dim, stable; descending puts NaN first
    double s[6] = {2, NAN, -1, 2, 0.5, -1}, asc[6] = {-1, -1, 0.5, 2, 2, NAN}, ai[6] = {2, 5, 4, 0, 3, 1};
    double des[6] = {NAN, 2, 2, 0.5, -1, -1}, dsi[6] = {1, 0, 3, 4, 2, 5};
    weft_tensor *st = weft_tensor_from_data(s, 1, (int64_t[]){6}, WEFT_F64), *sv = NULL, *si = NULL;
    CHECK(weft_sort(st, 0, false, &sv, &si) == WEFT_OK);
    if (sv && si) wt_check_values("sort ascending", sv, asc, 6, 0), wt_check_values("sort ascending indices", si, ai, 6, 0);
    FREE(sv, si);
    CHECK(weft_sort(st, -1, true, &sv, &si) == WEFT_OK);
    if (sv && si) wt_check_values("sort descending", sv, des, 6, 0), wt_check_values("sort descending indices", si, dsi, 6, 0);
    FREE(sv, si);
    // the values' gradient: a gather, checked by finite differences (distinct values, so no ties)
    double g[24];
    for (int i = 0; i < 24; i++) g[i] = (double)((i * 7) % 24) * 0.1 - 1;
    weft_tensor *gx = wt_f64(g, 2, (int64_t[]){4, 6}, true);
    weft_status gs = weft_gradcheck(topk_vals, 1, &gx, NULL, NULL);
    if (gs) fprintf(stderr, "topk grad: %s\n", weft_last_error());
    CHECK(gs == WEFT_OK);
    // errors: k past the dim, a bad dim, a dtype without a kernel, NULL
    CHECK(weft_topk(st, 7, 0, true, &sv, &si) != WEFT_OK && err_names("topk") && sv == NULL && si == NULL);
    CHECK(weft_topk(st, 1, 1, true, &sv, NULL) != WEFT_OK && err_names("topk"));
    weft_tensor *b = weft_tensor_zeros(1, (int64_t[]){3}, WEFT_BOOL);
    CHECK(weft_topk(b, 1, 0, true, &sv, NULL) != WEFT_OK && err_names("topk"));
    CHECK(weft_topk(NULL, 1, 0, true, &sv, NULL) != WEFT_OK);
    FREE(st, gx, b);
}

static void test_errors(void) {
    weft_tensor *w = wt_rand64(WEFT_DIMS(5, 3), -1, 1, 90, false);
    int64_t bad[] = {1, 5, 0}, neg[] = {1, -1};
    weft_tensor *ib = idx64(bad, WEFT_DIMS(3)), *in = idx64(neg, WEFT_DIMS(2)), *ib32 = idx32(bad, WEFT_DIMS(3));
    weft_tensor *fidx = weft_tensor_zeros(WEFT_DIMS(3), WEFT_F32);
    weft_clear_error();
    CHECK(weft_embedding(w, ib) == NULL && err_names("embedding") && strstr(weft_last_error(), "5"));
    CHECK(weft_embedding(w, in) == NULL && err_names("embedding") && strstr(weft_last_error(), "-1"));
    CHECK(weft_embedding(w, ib32) == NULL && err_names("embedding"));
    CHECK(weft_embedding(w, fidx) == NULL && err_names("embedding") && weft_last_status() == WEFT_ERR_DTYPE);
    weft_tensor *w1 = weft_tensor_zeros(WEFT_DIMS(5), WEFT_F64);
    CHECK(weft_embedding(w1, ib) == NULL && err_names("embedding"));
    CHECK(weft_embedding(NULL, ib) == NULL);

    CHECK(weft_index_select(w, 0, ib) == NULL && err_names("index_select"));
    CHECK(weft_index_select(w, 1, in) == NULL && err_names("index_select"));
    CHECK(weft_index_select(w, 0, fidx) == NULL && err_names("index_select"));
    CHECK(weft_index_select(w, 2, in) == NULL && err_names("index_select"));
    CHECK(weft_index_select(w, -3, in) == NULL && err_names("index_select"));
    weft_tensor *i2d = weft_tensor_zeros(WEFT_DIMS(2, 2), WEFT_I64);
    CHECK(weft_index_select(w, 0, i2d) == NULL && err_names("index_select"));

    weft_tensor *gi = weft_tensor_zeros(WEFT_DIMS(2, 3), WEFT_I64);
    weft_tensor_set(gi, (int64_t[]){1, 1}, 7);
    CHECK(weft_gather(w, 0, gi) == NULL && err_names("gather") && strstr(weft_last_error(), "7"));
    CHECK(weft_gather(w, 2, gi) == NULL && err_names("gather"));
    CHECK(weft_gather(w, 0, ib) == NULL && err_names("gather")); // ndim mismatch
    weft_tensor *gbig = weft_tensor_zeros(WEFT_DIMS(2, 4), WEFT_I64); // larger than w off dim
    CHECK(weft_gather(w, 0, gbig) == NULL && err_names("gather"));
    weft_tensor *gf = weft_tensor_zeros(WEFT_DIMS(2, 3), WEFT_F64);
    CHECK(weft_gather(w, 0, gf) == NULL && err_names("gather"));

    weft_tensor *src = weft_tensor_ones(WEFT_DIMS(2, 3), WEFT_F64), *src32 = weft_tensor_ones(WEFT_DIMS(2, 3), WEFT_F32);
    CHECK(weft_scatter_add(w, 0, gi, src) == NULL && err_names("scatter_add")); // index 7
    weft_tensor *gz = weft_tensor_zeros(WEFT_DIMS(2, 3), WEFT_I64);
    weft_tensor *ok = weft_scatter_add(w, 0, gz, src);
    CHECK(ok != NULL);
    CHECK(weft_scatter_add(w, 0, gz, src32) == NULL && err_names("scatter_add"));
    weft_tensor *small = weft_tensor_ones(WEFT_DIMS(1, 3), WEFT_F64);
    CHECK(weft_scatter_add(w, 0, gz, small) == NULL && err_names("scatter_add")); // src smaller than index
    CHECK(weft_scatter_add(w, 5, gz, src) == NULL && err_names("scatter_add"));
    CHECK(weft_scatter_add(w, 0, gf, src) == NULL && err_names("scatter_add"));

    weft_tensor *a = weft_tensor_zeros(WEFT_DIMS(2, 3), WEFT_F64), *b = weft_tensor_zeros(WEFT_DIMS(3, 3), WEFT_F64);
    weft_tensor *c32 = weft_tensor_zeros(WEFT_DIMS(2, 3), WEFT_F32), *v1 = weft_tensor_zeros(WEFT_DIMS(6), WEFT_F64);
    weft_tensor *ab[] = {a, b}, *ac[] = {a, c32}, *av[] = {a, v1};
    CHECK(weft_concat(2, ab, 1) == NULL && err_names("concat") && weft_last_status() == WEFT_ERR_SHAPE);
    CHECK(weft_concat(2, ac, 0) == NULL && err_names("concat"));
    CHECK(weft_concat(2, av, 0) == NULL && err_names("concat"));
    CHECK(weft_concat(2, ab, 2) == NULL && err_names("concat"));
    CHECK(weft_concat(0, ab, 0) == NULL && err_names("concat"));
    weft_tensor *abn[] = {a, NULL};
    CHECK(weft_concat(2, abn, 0) == NULL);
    CHECK(weft_stack(2, ab, 0) == NULL && err_names("stack"));
    weft_tensor *aa[] = {a, a};
    CHECK(weft_stack(2, aa, 3) == NULL && err_names("stack"));
    weft_tensor *r = weft_concat(2, ab, 0);
    CHECK(r && weft_tensor_size(r, 0) == 5);
    FREE(w, ib, in, ib32, fidx, w1, i2d, gi, gbig, gf, src, src32, gz, ok, small, a, b, c32, v1, r);
}

int main(void) {
    RUN(test_embedding_forward);
    RUN(test_embedding_grad);
    RUN(test_embedding_double_backward);
    RUN(test_embedding_backward_half);
    RUN(test_index_select_forward);
    RUN(test_index_select_grad);
    RUN(test_gather_forward);
    RUN(test_gather_grad);
    RUN(test_scatter_add_forward);
    RUN(test_scatter_add_grad);
    RUN(test_concat_forward);
    RUN(test_concat_grad);
    RUN(test_large);
    RUN(test_topk);
    RUN(test_errors);
    return wt_summary();
}
