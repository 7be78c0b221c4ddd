// The index family on CUDA against the CPU: embedding, index_select,
// gather, scatter_add and concat, forward and backward (the backward ops
// embedding_backward / index_select_backward / scatter_add run on CUDA
// through the same comparisons), repeated indices, every axis, strided
// views, int32 and int64 indices, and out-of-range indices reported as
// errors naming the op on both devices.
#include <stdlib.h>

#include "cuda_test.h"
#include "ops/op.h"

static weft_tensor *rand_t(int nd, const int64_t *sz, weft_dtype dt, uint64_t seed) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= sz[d];
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    wt_vals(v, n, -1, 1, seed);
    if (dt == WEFT_I32 || dt == WEFT_I64)
        for (int64_t i = 0; i < n; i++) v[i] = floor(v[i] * 50);
    weft_tensor *t64 = weft_tensor_from_data(v, nd, sz, WEFT_F64), *t = weft_cast(t64, dt);
    weft_tensor_free(t64);
    free(v);
    return t;
}

// n index values in [0, limit) with repeats (every value at least twice when n >= 2*limit)
static weft_tensor *index_t(int nd, const int64_t *sz, int64_t limit, weft_dtype dt, uint64_t seed) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= sz[d];
    int64_t *v = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = i < limit && n >= 2 * limit ? i : (int64_t)((s >> 33) % (uint64_t)limit);
    }
    if (n > 1) v[n - 1] = v[0]; // at least one repeat
    weft_tensor *t64 = weft_tensor_from_data(v, nd, sz, WEFT_I64), *t = weft_cast(t64, dt);
    weft_tensor_free(t64);
    free(v);
    return t;
}

typedef struct ix_ctx {
    int dim;
    int view; // 0: as given; 1: input 0 read through a transpose of its first two dims (made from the transposed data)
} ix_ctx;

// in[0] stored transposed (dims 0 and 1 swapped), viewed back: a strided operand.
static weft_tensor *view_of(weft_tensor *t, int view) {
    if (!view) return weft_tensor_ref(t);
    return weft_transpose(t, 0, 1);
}

static weft_tensor *f_embedding(weft_tensor *const *in, void *ctx) {
    weft_tensor *w = view_of(in[0], ((ix_ctx *)ctx)->view), *r = weft_embedding(w, in[1]);
    weft_tensor_free(w);
    return r;
}
static weft_tensor *f_index_select(weft_tensor *const *in, void *ctx) {
    ix_ctx *c = ctx;
    weft_tensor *t = view_of(in[0], c->view), *r = weft_index_select(t, c->dim, in[1]);
    weft_tensor_free(t);
    return r;
}
static weft_tensor *f_gather(weft_tensor *const *in, void *ctx) {
    ix_ctx *c = ctx;
    weft_tensor *t = view_of(in[0], c->view), *r = weft_gather(t, c->dim, in[1]);
    weft_tensor_free(t);
    return r;
}
static weft_tensor *f_scatter_add(weft_tensor *const *in, void *ctx) {
    ix_ctx *c = ctx;
    weft_tensor *t = view_of(in[0], c->view), *r = weft_scatter_add(t, c->dim, in[1], in[2]);
    weft_tensor_free(t);
    return r;
}
// concat of three inputs; with view, each is a transposed view of its stored data
static weft_tensor *f_concat(weft_tensor *const *in, void *ctx) {
    ix_ctx *c = ctx;
    weft_tensor *v[3];
    for (int i = 0; i < 3; i++) v[i] = view_of(in[i], c->view);
    weft_tensor *r = weft_concat(3, v, c->dim);
    for (int i = 0; i < 3; i++) weft_tensor_free(v[i]);
    return r;
}

static double tol_of(weft_dtype dt) { return dt == WEFT_F32 ? 1e-5 : dt == WEFT_F64 ? 1e-12 : 0; }

static void test_embedding(void) {
    static const weft_dtype dts[] = {WEFT_F32, WEFT_F64};
    for (int k = 0; k < 2; k++) {
        weft_dtype dt = dts[k];
        char what[96];
        // (V,D) small and odd; indices (3,7) with repeats, int64 and int32
        weft_tensor *w = rand_t(2, (const int64_t[]){10, 33}, dt, 1);
        for (int it = 0; it < 2; it++) {
            weft_tensor *ix = index_t(2, (const int64_t[]){3, 7}, 10, it ? WEFT_I32 : WEFT_I64, 2);
            ix_ctx c = {0, 0};
            snprintf(what, sizeof what, "embedding %s idx %s", weft_dtype_name(dt), it ? "i32" : "i64");
            wt_cuda_compare(what, f_embedding, &c, 2, (weft_tensor *[]){w, ix}, tol_of(dt), true);
            weft_tensor_free(ix);
        }
        // weight read through a transpose (stored (D,V)); many more lookups than rows, > one block
        weft_tensor *wt = rand_t(2, (const int64_t[]){48, 1000}, dt, 3);
        weft_tensor *ix = index_t(1, (const int64_t[]){2500}, 1000, WEFT_I64, 4);
        ix_ctx c = {0, 1};
        snprintf(what, sizeof what, "embedding %s transposed weight", weft_dtype_name(dt));
        wt_cuda_compare(what, f_embedding, &c, 2, (weft_tensor *[]){wt, ix}, tol_of(dt), true);
        // a 0-d index and an empty one
        weft_tensor *i0 = weft_tensor_scalar(3, WEFT_I64), *ie = index_t(1, (const int64_t[]){0}, 10, WEFT_I64, 5);
        wt_cuda_compare("embedding 0-d index", f_embedding, &(ix_ctx){0, 0}, 2, (weft_tensor *[]){w, i0}, tol_of(dt),
                        true);
        wt_cuda_compare("embedding empty index", f_embedding, &(ix_ctx){0, 0}, 2, (weft_tensor *[]){w, ie},
                        tol_of(dt), false);
        weft_tensor_free(i0);
        weft_tensor_free(ie);
        weft_tensor_free(wt);
        weft_tensor_free(ix);
        weft_tensor_free(w);
    }
    // int and half weights move bits (forward only)
    static const weft_dtype other[] = {WEFT_I32, WEFT_I64, WEFT_BF16, WEFT_U8};
    for (int k = 0; k < 4; k++) {
        weft_tensor *w = rand_t(2, (const int64_t[]){9, 5}, other[k] == WEFT_U8 ? WEFT_F64 : other[k], 6);
        if (other[k] == WEFT_U8) {
            weft_tensor *a = weft_abs(w), *s = weft_mul_scalar(a, 200), *u = weft_cast(s, WEFT_U8);
            weft_tensor_free(a);
            weft_tensor_free(s);
            weft_tensor_free(w);
            w = u;
        }
        weft_tensor *ix = index_t(1, (const int64_t[]){17}, 9, WEFT_I32, 7);
        wt_cuda_compare(weft_dtype_name(other[k]), f_embedding, &(ix_ctx){0, 0}, 2, (weft_tensor *[]){w, ix}, 0, false);
        weft_tensor_free(ix);
        weft_tensor_free(w);
    }
}

// embedding_backward of a bf16 / f16 gradient (autocast's folded recurrent input gates): both devices sum each row
// in f32 and round once, so they differ by at most one rounding of the result (CUDA adds in another order).
static void test_embedding_backward_half(void) {
    static const weft_dtype dts[2] = {WEFT_BF16, WEFT_F16};
    for (int k = 0; k < 2; k++) {
        weft_tensor *g = rand_t(2, (const int64_t[]){3000, 40}, dts[k], 7 + k);
        weft_tensor *ix = index_t(1, (const int64_t[]){3000}, 100, WEFT_I64, 9);
        weft_tensor *gd = weft_tensor_to(g, WT_CUDA0), *ixd = weft_tensor_to(ix, WT_CUDA0);
        weft_attrs at = {.i = {100}};
        weft_tensor *c = weft_op_apply1(weft_op_find("embedding_backward"), 2, (weft_tensor *[]){g, ix}, &at);
        weft_tensor *d = gd && ixd ? weft_op_apply1(weft_op_find("embedding_backward"), 2, (weft_tensor *[]){gd, ixd}, &at)
                                   : NULL;
        CHECK(c && d && weft_tensor_dtype(d) == dts[k]);
        char what[64];
        snprintf(what, sizeof what, "embedding_backward %s", weft_dtype_name(dts[k]));
        if (c && d) wt_check_same(what, d, c, k ? 2e-3 : 1.6e-2); // two roundings apart at most, on |sums| ~ 1..10
        weft_tensor *all[] = {g, ix, gd, ixd, c, d};
        for (int i = 0; i < 6; i++) weft_tensor_free(all[i]);
    }
}

static void test_index_select(void) {
    static const weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_I32, WEFT_I64};
    const int64_t sz[3] = {5, 6, 7};
    for (int k = 0; k < 4; k++) {
        weft_dtype dt = dts[k];
        bool fl = dt == WEFT_F32 || dt == WEFT_F64;
        for (int view = 0; view < 2; view++)
            for (int dim = -3; dim < 3; dim++) {
                char what[96];
                // stored with dims 0,1 swapped when read through a transpose
                int64_t ssz[3] = {view ? sz[1] : sz[0], view ? sz[0] : sz[1], sz[2]};
                weft_tensor *t = rand_t(3, ssz, dt, 10 + (uint64_t)dim);
                int d = dim < 0 ? dim + 3 : dim;
                weft_tensor *ix = index_t(1, (const int64_t[]){11}, sz[d], view ? WEFT_I32 : WEFT_I64, 11);
                ix_ctx c = {dim, view};
                snprintf(what, sizeof what, "index_select %s dim %d view %d", weft_dtype_name(dt), dim, view);
                wt_cuda_compare(what, f_index_select, &c, 2, (weft_tensor *[]){t, ix}, tol_of(dt), fl);
                weft_tensor_free(t);
                weft_tensor_free(ix);
            }
    }
    // rows larger than a block, many repeats
    weft_tensor *t = rand_t(2, (const int64_t[]){300, 1031}, WEFT_F32, 12);
    weft_tensor *ix = index_t(1, (const int64_t[]){700}, 300, WEFT_I64, 13);
    wt_cuda_compare("index_select big", f_index_select, &(ix_ctx){0, 0}, 2, (weft_tensor *[]){t, ix}, 1e-5, true);
    weft_tensor_free(t);
    weft_tensor_free(ix);
}

static void test_gather_scatter(void) {
    static const weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_I32, WEFT_I64};
    const int64_t tsz[3] = {4, 5, 6}, isz[3] = {3, 4, 5}, ssz[3] = {4, 6, 7};
    for (int k = 0; k < 4; k++) {
        weft_dtype dt = dts[k];
        bool fl = dt == WEFT_F32 || dt == WEFT_F64;
        for (int view = 0; view < 2; view++)
            for (int dim = 0; dim < 3; dim++) {
                char what[96];
                int64_t st[3] = {view ? tsz[1] : tsz[0], view ? tsz[0] : tsz[1], tsz[2]};
                // gather: the index may be larger than t along dim, not elsewhere
                int64_t gi[3] = {isz[0], isz[1], isz[2]};
                gi[dim] = 9;
                weft_tensor *t = rand_t(3, st, dt, 20 + (uint64_t)dim);
                weft_tensor *ig = index_t(3, gi, tsz[dim], view ? WEFT_I32 : WEFT_I64, 21);
                ix_ctx c = {dim, view};
                snprintf(what, sizeof what, "gather %s dim %d view %d", weft_dtype_name(dt), dim, view);
                wt_cuda_compare(what, f_gather, &c, 2, (weft_tensor *[]){t, ig}, tol_of(dt), fl);
                // scatter_add: index no larger than t off dim and than src everywhere; repeats accumulate
                weft_tensor *is = index_t(3, isz, tsz[dim], view ? WEFT_I64 : WEFT_I32, 22);
                weft_tensor *src = rand_t(3, ssz, dt, 23);
                snprintf(what, sizeof what, "scatter_add %s dim %d view %d", weft_dtype_name(dt), dim, view);
                wt_cuda_compare(what, f_scatter_add, &c, 3, (weft_tensor *[]){t, is, src}, tol_of(dt), fl);
                weft_tensor_free(t);
                weft_tensor_free(ig);
                weft_tensor_free(is);
                weft_tensor_free(src);
            }
    }
    // many elements scattered into few slots (heavy atomic contention)
    weft_tensor *t = rand_t(2, (const int64_t[]){3, 2000}, WEFT_F64, 24);
    weft_tensor *ix = index_t(2, (const int64_t[]){3000, 2000}, 3, WEFT_I64, 25);
    weft_tensor *src = rand_t(2, (const int64_t[]){3000, 2000}, WEFT_F64, 26);
    wt_cuda_compare("scatter_add contention", f_scatter_add, &(ix_ctx){0, 0}, 3, (weft_tensor *[]){t, ix, src}, 1e-11,
                    true);
    wt_cuda_compare("gather big", f_gather, &(ix_ctx){0, 0}, 2, (weft_tensor *[]){t, ix}, 1e-12, true);
    weft_tensor_free(t);
    weft_tensor_free(ix);
    weft_tensor_free(src);
}

static void test_concat(void) {
    static const weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_I64, WEFT_BF16};
    for (int k = 0; k < 4; k++) {
        weft_dtype dt = dts[k];
        bool fl = dt == WEFT_F32 || dt == WEFT_F64;
        for (int view = 0; view < 2; view++)
            for (int dim = 0; dim < 3; dim++) {
                weft_tensor *ts[3];
                for (int i = 0; i < 3; i++) {
                    int64_t sz[3] = {4, 5, 6};
                    sz[dim] = 3 + i; // 3, 4, 5 along dim
                    if (view) { // stored transposed
                        int64_t s0 = sz[0];
                        sz[0] = sz[1], sz[1] = s0;
                    }
                    ts[i] = rand_t(3, sz, dt, 30 + (uint64_t)(i + 3 * dim));
                }
                char what[96];
                snprintf(what, sizeof what, "concat %s dim %d view %d", weft_dtype_name(dt), dim, view);
                wt_cuda_compare(what, f_concat, &(ix_ctx){dim, view}, 3, ts, dt == WEFT_BF16 ? 0 : tol_of(dt), fl);
                for (int i = 0; i < 3; i++) weft_tensor_free(ts[i]);
            }
    }
    // an empty input in the middle, big ones around it
    weft_tensor *ts[3] = {rand_t(2, (const int64_t[]){700, 3}, WEFT_F32, 40),
                          rand_t(2, (const int64_t[]){0, 3}, WEFT_F32, 41),
                          rand_t(2, (const int64_t[]){1100, 3}, WEFT_F32, 42)};
    wt_cuda_compare("concat with an empty input", f_concat, &(ix_ctx){0, 0}, 3, ts, 0, true);
    for (int i = 0; i < 3; i++) weft_tensor_free(ts[i]);
}

// A CUDA op given a bad index returns at once (its kernel reports the value
// to the host without a wait); reading the result back fails with the
// report, naming the op, the value and its element. True when the error came
// (r is freed). WEFT_CUDA_SYNC=1 would make the op itself fail: also accepted.
static bool cuda_reports(weft_tensor *r, const char *op, const char *value) {
    if (r) weft_clear_error(); // the error comes from the read (else it came from the op)
    weft_tensor *h = r ? weft_tensor_to(r, WEFT_DEVICE_CPU) : NULL;
    bool ok = h == NULL && wt_error_has(op) && wt_error_has("out of range") && wt_error_has(value);
    if (!ok) printf("%s: expected an error naming %s, got: %s\n", op, value, h ? "a result" : weft_last_error());
    weft_tensor_free(h);
    weft_tensor_free(r);
    return ok;
}

// A bad index: an error on both devices, and the CUDA error names the op and the value.
static void check_bad(const char *op, wt_cuda_fn f, ix_ctx *c, int n, weft_tensor *const *in, const char *value) {
    weft_tensor *d[3];
    for (int i = 0; i < n; i++) d[i] = weft_tensor_to(in[i], WT_CUDA0);
    weft_tensor *hr = f(in, c);
    CHECK(hr == NULL && wt_error_has(op) && wt_error_has("out of range"));
    CHECK(cuda_reports(f(d, c), op, value));
    weft_tensor_free(hr);
    for (int i = 0; i < n; i++) weft_tensor_free(d[i]);
}

static void test_out_of_range(void) {
    weft_tensor *t = rand_t(2, (const int64_t[]){4, 5}, WEFT_F32, 50);
    int64_t bad[6] = {0, 1, 3, 7, 2, 1};
    weft_tensor *ib = weft_tensor_from_data(bad, 1, (const int64_t[]){6}, WEFT_I64), *ib32 = weft_cast(ib, WEFT_I32);
    int64_t neg[6] = {0, -1, 1, 1, 2, 3};
    weft_tensor *in = weft_tensor_from_data(neg, 1, (const int64_t[]){6}, WEFT_I64);
    check_bad("embedding", f_embedding, &(ix_ctx){0, 0}, 2, (weft_tensor *[]){t, ib}, "index 7");
    check_bad("embedding", f_embedding, &(ix_ctx){0, 0}, 2, (weft_tensor *[]){t, in}, "index -1");
    check_bad("index_select", f_index_select, &(ix_ctx){0, 0}, 2, (weft_tensor *[]){t, ib32}, "index 7");
    check_bad("index_select", f_index_select, &(ix_ctx){1, 0}, 2, (weft_tensor *[]){t, in}, "index -1");
    int64_t g2[2 * 3] = {0, 1, 2, 3, 4, 5}; // 5 is out of range along dim 1 (size 5)
    weft_tensor *ig = weft_tensor_from_data(g2, 2, (const int64_t[]){2, 3}, WEFT_I64);
    weft_tensor *src = rand_t(2, (const int64_t[]){2, 3}, WEFT_F32, 51);
    check_bad("gather", f_gather, &(ix_ctx){1, 0}, 2, (weft_tensor *[]){t, ig}, "index 5");
    check_bad("scatter_add", f_scatter_add, &(ix_ctx){1, 0}, 3, (weft_tensor *[]){t, ig, src}, "index 5");
    // the backward ops, applied directly with a too-small target
    weft_tensor *gy = rand_t(2, (const int64_t[]){6, 5}, WEFT_F32, 52);
    weft_tensor *dg = weft_tensor_to(gy, WT_CUDA0), *dib = weft_tensor_to(ib, WT_CUDA0);
    weft_attrs at = {.i = {5}};
    weft_tensor *r = weft_op_apply1(weft_op_find("embedding_backward"), 2, (weft_tensor *[]){dg, dib}, &at);
    CHECK(cuda_reports(r, "embedding_backward", "index 7"));
    weft_attrs at2 = {.i = {0, 5}};
    r = weft_op_apply1(weft_op_find("index_select_backward"), 2, (weft_tensor *[]){dg, dib}, &at2);
    CHECK(cuda_reports(r, "index_select_backward", "index 7"));
    // the report names the bad element, and a synchronize brings it too
    r = weft_index_select(dg, 0, dib);
    if (r) { // (NULL under WEFT_CUDA_SYNC=1: the op itself failed)
        weft_clear_error();
        CHECK(weft_device_synchronize(WT_CUDA0) != WEFT_OK && wt_error_has("index_select") &&
              wt_error_has("index 7") && wt_error_has("element 3"));
        weft_tensor_free(r);
    }
    CHECK(weft_device_synchronize(WT_CUDA0) == WEFT_OK); // taken once
    // after these errors the device still works: values 0..5 select along dim 0 (size 6), not dim 1 (size 5)
    weft_tensor *good = weft_tensor_to(ig, WT_CUDA0), *flat = weft_reshape(good, 1, (const int64_t[]){6});
    weft_tensor *hflat = weft_reshape(ig, 1, (const int64_t[]){6});
    weft_tensor *fine = weft_index_select(dg, 0, flat), *hfine = weft_index_select(gy, 0, hflat);
    CHECK(fine != NULL);
    if (fine && hfine) wt_check_same("index_select after errors", fine, hfine, 0);
    CHECK(cuda_reports(weft_index_select(dg, 1, flat), "index_select", "index 5"));
    weft_tensor *objs[] = {t, ib, ib32, in, ig, src, gy, dg, dib, good, flat, hflat, fine, hfine};
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) weft_tensor_free(objs[i]);
}

// topk: the indices, and the values (a gather) with their backward; strided inputs, ties (integers), both orders.
typedef struct topk_ctx {
    int dim, largest, view;
    int64_t k;
} topk_ctx;
static weft_tensor *f_topk(weft_tensor *const *in, void *ctx) {
    topk_ctx *c = ctx;
    weft_tensor *t = view_of(in[0], c->view), *ix = NULL;
    weft_topk(t, c->k, c->dim, c->largest, NULL, &ix);
    weft_tensor_free(t);
    return ix;
}
static weft_tensor *f_topk_vals(weft_tensor *const *in, void *ctx) {
    topk_ctx *c = ctx;
    weft_tensor *t = view_of(in[0], c->view), *v = NULL;
    weft_topk(t, c->k, c->dim, c->largest, &v, NULL);
    weft_tensor_free(t);
    return v;
}
static void test_topk(void) {
    static const weft_dtype dts[] = {WEFT_F32, WEFT_F64, WEFT_I32, WEFT_I64};
    const int64_t sz[3] = {5, 6, 33};
    for (int k = 0; k < 4; k++)
        for (int view = 0; view < 2; view++)
            for (int dim = 0; dim < 3; dim++)
                for (int largest = 0; largest < 2; largest++) {
                    char what[96];
                    int64_t st[3] = {view ? sz[1] : sz[0], view ? sz[0] : sz[1], sz[2]};
                    weft_tensor *t = rand_t(3, st, dts[k], 40 + (uint64_t)dim);
                    topk_ctx c = {dim, largest, view, sz[dim] > 4 ? 4 : sz[dim]};
                    snprintf(what, sizeof what, "topk %s dim %d view %d largest %d", weft_dtype_name(dts[k]), dim, view, largest);
                    wt_cuda_compare(what, f_topk, &c, 1, &t, 0, false);
                    if (k < 2) wt_cuda_compare(what, f_topk_vals, &c, 1, &t, 0, true);
                    weft_tensor_free(t);
                }
}

int main(void) {
    WT_CUDA_OR_SKIP();
    RUN(test_embedding);
    RUN(test_embedding_backward_half);
    RUN(test_index_select);
    RUN(test_gather_scatter);
    RUN(test_concat);
    RUN(test_topk);
    RUN(test_out_of_range);
    return wt_summary();
}
