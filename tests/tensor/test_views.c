// Views: layout (sizes/strides/offset), aliasing (writes through a view are
// seen in the base), copy-vs-view decisions of reshape, contiguous/clone, and
// gradients through chains of views.
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

// (2,3,4) f64 with x[i][j][k] = 100i + 10j + k
static weft_tensor *base234(void) {
    double v[24];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) v[(i * 3 + j) * 4 + k] = 100 * i + 10 * j + k;
    return wt_keep(weft_tensor_from_data(v, WEFT_DIMS(2, 3, 4), WEFT_F64));
}
static double get(const weft_tensor *t, const int64_t *idx) {
    double v = NAN;
    CHECK(weft_tensor_get(t, idx, &v) == WEFT_OK);
    return v;
}
static bool strides_are(const weft_tensor *t, int nd, const int64_t *st) {
    if (!t || weft_tensor_ndim(t) != nd) return false;
    for (int d = 0; d < nd; d++)
        if (weft_tensor_stride(t, d) != st[d]) return false;
    return true;
}
static bool sizes_are(const weft_tensor *t, int nd, const int64_t *sz) {
    if (!t || weft_tensor_ndim(t) != nd) return false;
    for (int d = 0; d < nd; d++)
        if (weft_tensor_size(t, d) != sz[d]) return false;
    return true;
}
#define SIZES(t, ...) sizes_are(t, WEFT_DIMS(__VA_ARGS__))
#define STRIDES(t, ...) strides_are(t, WEFT_DIMS(__VA_ARGS__))
#define IDX(...) ((const int64_t[]){__VA_ARGS__})

static void test_reshape_view(void) {
    weft_tensor *x = base234();
    weft_tensor *r = wt_keep(weft_reshape(x, WEFT_DIMS(6, 4)));
    CHECK(SIZES(r, 6, 4) && STRIDES(r, 4, 1) && weft_tensor_shares_storage(r, x));
    CHECK(get(r, IDX(4, 2)) == 112); // row 4 = (1,1)
    weft_tensor *r2 = wt_keep(weft_reshape(x, WEFT_DIMS(-1, 12)));
    CHECK(SIZES(r2, 2, 12) && weft_tensor_shares_storage(r2, x));
    weft_tensor *v = wt_keep(weft_view(x, WEFT_DIMS(4, 3, 2)));
    CHECK(SIZES(v, 4, 3, 2) && weft_tensor_shares_storage(v, x));
    CHECK(get(v, IDX(3, 2, 1)) == 123);
    // write through the view, read in the base
    CHECK(weft_tensor_set(v, IDX(0, 1, 0), -5) == WEFT_OK);
    CHECK(get(x, IDX(0, 0, 2)) == -5);
    CHECK(weft_tensor_set(r, IDX(5, 3), -7) == WEFT_OK);
    CHECK(get(x, IDX(1, 2, 3)) == -7);
    // transposed: reshape must copy; view must fail naming the op
    weft_tensor *t = wt_keep(weft_transpose(x, 1, 2)); // (2,4,3)
    CHECK(SIZES(t, 2, 4, 3) && STRIDES(t, 12, 1, 4) && !weft_tensor_is_contiguous(t));
    weft_tensor *rc = wt_keep(weft_reshape(t, WEFT_DIMS(2, 12)));
    CHECK(rc && !weft_tensor_shares_storage(rc, x) && weft_tensor_is_contiguous(rc));
    CHECK(get(rc, IDX(1, 4)) == 111); // t[1][1][1] = x[1][1][1]
    CHECK(get(rc, IDX(0, 2)) == 20);  // t[0][0][2] = x[0][2][0]
    weft_clear_error();
    CHECK(weft_view(t, WEFT_DIMS(2, 12)) == NULL);
    CHECK(strstr(weft_last_error(), "view") != NULL);
    // ...but a layout that can be viewed is not copied, even when not contiguous
    weft_tensor *t2 = wt_keep(weft_reshape(t, WEFT_DIMS(2, 4, 3, 1)));
    CHECK(t2 && weft_tensor_shares_storage(t2, x));
    weft_tensor *t3 = wt_keep(weft_view(t, WEFT_DIMS(2, 2, 2, 3)));
    CHECK(t3 && weft_tensor_shares_storage(t3, x) && get(t3, IDX(1, 1, 0, 2)) == 122);
    weft_tensor *s = wt_keep(weft_slice(x, 2, 0, 4, 2)); // (2,3,2) with step
    weft_tensor *s2 = wt_keep(weft_view(s, WEFT_DIMS(6, 2)));
    CHECK(s2 && weft_tensor_shares_storage(s2, x) && get(s2, IDX(5, 1)) == 122);
    weft_tensor *s12 = wt_keep(weft_view(s, WEFT_DIMS(12))); // uniformly strided: one dim of stride 2
    CHECK(SIZES(s12, 12) && STRIDES(s12, 2) && get(s12, IDX(11)) == 122);
    weft_tensor *s3 = wt_keep(weft_slice(x, 2, 0, 3, 1)); // (2,3,3) strides (12,4,1): rows not joined
    weft_clear_error();
    CHECK(weft_view(s3, WEFT_DIMS(18)) == NULL && strstr(weft_last_error(), "view"));
    weft_tensor *s3r = wt_keep(weft_reshape(s3, WEFT_DIMS(18)));
    CHECK(s3r && !weft_tensor_shares_storage(s3r, x) && get(s3r, IDX(17)) == 122);
    // wrong element count
    weft_clear_error();
    CHECK(weft_reshape(x, WEFT_DIMS(5, 5)) == NULL && strstr(weft_last_error(), "reshape"));
    weft_clear_error();
    CHECK(weft_reshape(x, WEFT_DIMS(-1, 5)) == NULL && strstr(weft_last_error(), "reshape"));
    weft_clear_error();
    CHECK(weft_reshape(x, WEFT_DIMS(-1, -1)) == NULL && strstr(weft_last_error(), "reshape"));
    // 0-d <-> 1-element
    weft_tensor *sc = wt_keep(weft_tensor_scalar(3, WEFT_F32));
    weft_tensor *one = wt_keep(weft_reshape(sc, WEFT_DIMS(1, 1)));
    CHECK(SIZES(one, 1, 1) && weft_tensor_shares_storage(one, sc));
    weft_tensor *back = wt_keep(weft_reshape(one, 0, NULL));
    CHECK(back && weft_tensor_ndim(back) == 0 && weft_tensor_item(back) == 3);
    wt_drop_all();
}

static void test_flatten_permute_transpose(void) {
    weft_tensor *x = base234();
    weft_tensor *f = wt_keep(weft_flatten(x, 1, 2));
    CHECK(SIZES(f, 2, 12) && weft_tensor_shares_storage(f, x) && get(f, IDX(1, 11)) == 123);
    weft_tensor *fa = wt_keep(weft_flatten(x, 0, -1));
    CHECK(SIZES(fa, 24) && get(fa, IDX(13)) == 101);
    weft_tensor *p = wt_keep(weft_permute(x, (int[]){2, 0, 1})); // (4,2,3)
    CHECK(SIZES(p, 4, 2, 3) && STRIDES(p, 1, 12, 4) && weft_tensor_shares_storage(p, x));
    CHECK(get(p, IDX(3, 1, 2)) == 123 && get(p, IDX(1, 0, 2)) == 21);
    weft_tensor *pf = wt_keep(weft_flatten(p, 0, 1)); // not viewable -> copy
    CHECK(SIZES(pf, 8, 3) && !weft_tensor_shares_storage(pf, x) && get(pf, IDX(7, 1)) == 113);
    weft_tensor *pn = wt_keep(weft_permute(x, (int[]){-1, 0, 1}));
    CHECK(SIZES(pn, 4, 2, 3));
    weft_tensor *t = wt_keep(weft_transpose(x, 0, -1)); // (4,3,2)
    CHECK(SIZES(t, 4, 3, 2) && STRIDES(t, 1, 4, 12));
    CHECK(weft_tensor_set(t, IDX(2, 1, 1), 999) == WEFT_OK && get(x, IDX(1, 1, 2)) == 999);
    weft_tensor *tt = wt_keep(weft_transpose(t, 0, 2));
    CHECK(tt && weft_tensor_is_contiguous(tt) && weft_tensor_shares_storage(tt, x));
    weft_tensor *same = wt_keep(weft_transpose(x, 1, 1));
    CHECK(SIZES(same, 2, 3, 4) && STRIDES(same, 12, 4, 1));
    wt_drop_all();
}

static void test_slice_narrow_select(void) {
    weft_tensor *x = base234();
    weft_tensor *s = wt_keep(weft_slice(x, 2, 1, 4, 2)); // k = 1, 3
    CHECK(SIZES(s, 2, 3, 2) && STRIDES(s, 12, 4, 2) && weft_tensor_offset(s) == 1);
    CHECK(get(s, IDX(1, 2, 1)) == 123 && get(s, IDX(0, 1, 0)) == 11);
    CHECK(weft_tensor_set(s, IDX(1, 0, 1), -1) == WEFT_OK && get(x, IDX(1, 0, 3)) == -1);
    // python-style: negative start/end, clamping, empty
    weft_tensor *s2 = wt_keep(weft_slice(x, 1, -2, 100, 1));
    CHECK(SIZES(s2, 2, 2, 4) && get(s2, IDX(0, 0, 0)) == 10);
    weft_tensor *s3 = wt_keep(weft_slice(x, -1, -100, -1, 2)); // k = 0, 2
    CHECK(SIZES(s3, 2, 3, 2) && get(s3, IDX(0, 0, 1)) == 2);
    weft_tensor *s4 = wt_keep(weft_slice(x, 0, 1, 1, 1));
    CHECK(SIZES(s4, 0, 3, 4) && weft_tensor_numel(s4) == 0);
    weft_tensor *s5 = wt_keep(weft_slice(x, 1, 0, 3, 5)); // step past the end: one element
    CHECK(SIZES(s5, 2, 1, 4));
    // slice of a slice of a transpose
    weft_tensor *t = wt_keep(weft_transpose(x, 0, 2)); // (4,3,2)
    weft_tensor *ts = wt_keep(weft_slice(t, 0, 1, 4, 2)), *tss = wt_keep(weft_slice(ts, 1, 1, 3, 1)); // (2,2,2)
    CHECK(SIZES(tss, 2, 2, 2) && get(tss, IDX(1, 1, 1)) == 123 && get(tss, IDX(0, 0, 0)) == 11);
    CHECK(weft_tensor_set(tss, IDX(1, 0, 0), 4242) == WEFT_OK && get(x, IDX(0, 1, 3)) == 4242);
    weft_tensor *n = wt_keep(weft_narrow(x, 1, 1, 2));
    CHECK(SIZES(n, 2, 2, 4) && get(n, IDX(1, 1, 2)) == 122 && weft_tensor_shares_storage(n, x));
    weft_tensor *nn = wt_keep(weft_narrow(x, 2, -2, 2));
    CHECK(SIZES(nn, 2, 3, 2) && get(nn, IDX(0, 0, 0)) == 2);
    weft_tensor *sel = wt_keep(weft_select(x, 1, -1)); // (2,4): j = 2
    CHECK(SIZES(sel, 2, 4) && get(sel, IDX(1, 0)) == 120);
    CHECK(weft_tensor_set(sel, IDX(0, 3), 77) == WEFT_OK && get(x, IDX(0, 2, 3)) == 77);
    weft_tensor *sel2 = wt_keep(weft_select(sel, 0, 1)); // (4)
    CHECK(SIZES(sel2, 4) && get(sel2, IDX(1)) == 121 && weft_tensor_shares_storage(sel2, x));
    weft_tensor *sel3 = wt_keep(weft_select(sel2, 0, 2)); // 0-d
    CHECK(sel3 && weft_tensor_ndim(sel3) == 0 && weft_tensor_item(sel3) == 122);
    weft_clear_error();
    CHECK(weft_select(x, 1, 3) == NULL && strstr(weft_last_error(), "select"));
    weft_clear_error();
    CHECK(weft_narrow(x, 1, 2, 2) == NULL && strstr(weft_last_error(), "narrow"));
    weft_clear_error();
    CHECK(weft_slice(x, 0, 0, 2, 0) == NULL && strstr(weft_last_error(), "slice"));
    weft_clear_error();
    CHECK(weft_slice(x, 3, 0, 2, 1) == NULL && strstr(weft_last_error(), "slice"));
    wt_drop_all();
}

static void test_expand_squeeze_unsqueeze(void) {
    double v[3] = {1, 2, 3};
    weft_tensor *c = wt_keep(weft_tensor_from_data(v, WEFT_DIMS(3, 1), WEFT_F64));
    weft_tensor *e = wt_keep(weft_expand(c, WEFT_DIMS(2, 3, 4)));
    CHECK(SIZES(e, 2, 3, 4) && STRIDES(e, 0, 1, 0) && weft_tensor_shares_storage(e, c));
    CHECK(get(e, IDX(1, 2, 3)) == 3 && get(e, IDX(0, 1, 0)) == 2);
    // a write through the expanded view lands in the single base element
    CHECK(weft_tensor_set(e, IDX(1, 0, 2), 10) == WEFT_OK && get(c, IDX(0, 0)) == 10 && get(e, IDX(0, 0, 3)) == 10);
    weft_tensor *e2 = wt_keep(weft_expand(c, WEFT_DIMS(-1, 5)));
    CHECK(SIZES(e2, 3, 5) && STRIDES(e2, 1, 0));
    weft_tensor *e3 = wt_keep(weft_expand(c, WEFT_DIMS(3, 1))); // no-op sizes keep strides
    CHECK(SIZES(e3, 3, 1));
    weft_clear_error();
    CHECK(weft_expand(c, WEFT_DIMS(4, 4)) == NULL && strstr(weft_last_error(), "expand"));
    weft_clear_error();
    CHECK(weft_expand(c, WEFT_DIMS(4)) == NULL && strstr(weft_last_error(), "expand"));
    weft_clear_error();
    CHECK(weft_expand(c, WEFT_DIMS(3, -2)) == NULL && strstr(weft_last_error(), "expand"));
    weft_clear_error();
    CHECK(weft_expand(c, WEFT_DIMS(-1, 3, 1)) == NULL && strstr(weft_last_error(), "expand"));
    // contiguous() of an expanded view materialises it
    weft_tensor *ec = wt_keep(weft_tensor_contiguous(e));
    CHECK(ec && weft_tensor_is_contiguous(ec) && !weft_tensor_shares_storage(ec, c) && get(ec, IDX(1, 0, 1)) == 10);
    weft_tensor *sq = wt_keep(weft_squeeze(c, 1));
    CHECK(SIZES(sq, 3) && weft_tensor_shares_storage(sq, c) && get(sq, IDX(2)) == 3);
    weft_tensor *sq2 = wt_keep(weft_squeeze(c, -1));
    CHECK(SIZES(sq2, 3));
    weft_tensor *sq3 = wt_keep(weft_squeeze(c, 0)); // size 3: unchanged
    CHECK(SIZES(sq3, 3, 1));
    weft_tensor *u = wt_keep(weft_unsqueeze(sq, 0)), *u2 = wt_keep(weft_unsqueeze(sq, -1)), *u3 = wt_keep(weft_unsqueeze(sq, 1));
    CHECK(SIZES(u, 1, 3) && SIZES(u2, 3, 1) && SIZES(u3, 3, 1) && weft_tensor_shares_storage(u, c));
    CHECK(weft_tensor_set(u, IDX(0, 1), 20) == WEFT_OK && get(c, IDX(1, 0)) == 20);
    // unsqueeze of a transposed (non-contiguous) view stays a view
    weft_tensor *x = base234(), *t = wt_keep(weft_transpose(x, 0, 2)), *tu = wt_keep(weft_unsqueeze(t, 1));
    CHECK(SIZES(tu, 4, 1, 3, 2) && weft_tensor_shares_storage(tu, x) && get(tu, IDX(3, 0, 2, 1)) == 123);
    weft_tensor *tq = wt_keep(weft_squeeze(tu, 1));
    CHECK(SIZES(tq, 4, 3, 2) && STRIDES(tq, 1, 4, 12));
    weft_clear_error();
    CHECK(weft_unsqueeze(sq, 3) == NULL && strstr(weft_last_error(), "unsqueeze"));
    weft_clear_error();
    CHECK(weft_squeeze(sq, 1) == NULL && strstr(weft_last_error(), "squeeze"));
    wt_drop_all();
}

static void test_split(void) {
    weft_tensor *x = base234(), *parts[3] = {0};
    CHECK(weft_split(x, 2, 3, (const int64_t[]){1, 2, 1}, parts) == WEFT_OK);
    CHECK(SIZES(parts[0], 2, 3, 1) && SIZES(parts[1], 2, 3, 2) && SIZES(parts[2], 2, 3, 1));
    for (int k = 0; k < 3; k++) {
        wt_keep(parts[k]);
        CHECK(weft_tensor_shares_storage(parts[k], x));
    }
    CHECK(get(parts[1], IDX(1, 2, 1)) == 122 && get(parts[2], IDX(0, 1, 0)) == 13);
    CHECK(weft_tensor_set(parts[1], IDX(0, 0, 0), -3) == WEFT_OK && get(x, IDX(0, 0, 1)) == -3);
    weft_tensor *q[2] = {0};
    CHECK(weft_split(x, -3, 2, (const int64_t[]){1, 1}, q) == WEFT_OK);
    CHECK(SIZES(q[0], 1, 3, 4) && get(q[1], IDX(0, 2, 3)) == 123);
    wt_keep(q[0]);
    wt_keep(q[1]);
    weft_tensor *bad[2] = {0};
    weft_clear_error();
    CHECK(weft_split(x, 1, 2, (const int64_t[]){1, 1}, bad) != WEFT_OK && strstr(weft_last_error(), "split"));
    CHECK(bad[0] == NULL && bad[1] == NULL);
    weft_clear_error();
    CHECK(weft_split(x, 5, 2, (const int64_t[]){1, 1}, bad) != WEFT_OK && strstr(weft_last_error(), "split"));
    wt_drop_all();
}

static void test_contiguous_clone_detach(void) {
    weft_tensor *x = base234();
    weft_tensor *c = wt_keep(weft_tensor_contiguous(x));
    CHECK(c == x); // already contiguous: the same tensor (new reference)
    weft_tensor *t = wt_keep(weft_transpose(x, 1, 2)), *tc = wt_keep(weft_tensor_contiguous(t));
    CHECK(tc && tc != t && weft_tensor_is_contiguous(tc) && !weft_tensor_shares_storage(tc, x));
    CHECK(SIZES(tc, 2, 4, 3) && STRIDES(tc, 12, 3, 1) && get(tc, IDX(1, 3, 2)) == 123);
    weft_tensor *cl = wt_keep(weft_tensor_clone(x));
    CHECK(cl && !weft_tensor_shares_storage(cl, x) && get(cl, IDX(1, 2, 3)) == 123);
    CHECK(weft_tensor_set(cl, IDX(0, 0, 0), 5) == WEFT_OK && get(x, IDX(0, 0, 0)) == 0);
    weft_tensor *sl = wt_keep(weft_slice(x, 2, 1, 4, 2)), *slc = wt_keep(weft_tensor_clone(sl));
    CHECK(SIZES(slc, 2, 3, 2) && weft_tensor_is_contiguous(slc) && get(slc, IDX(1, 2, 1)) == 123);
    weft_tensor *d = wt_keep(weft_tensor_detach(t));
    CHECK(d && weft_tensor_shares_storage(d, x) && SIZES(d, 2, 4, 3) && !weft_tensor_requires_grad(d));
    // to_f64 reads logical order of any view
    double v[24], ref[24];
    CHECK(weft_tensor_to_f64(t, v, 24) == WEFT_OK);
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 3; j++) ref[(i * 4 + k) * 3 + j] = 100 * i + 10 * j + k;
    CHECK(memcmp(v, ref, sizeof v) == 0);
    // views of f16/i32 storage
    weft_tensor *h = wt_keep(weft_cast(x, WEFT_F16)), *ht = wt_keep(weft_transpose(h, 0, 2));
    CHECK(get(ht, IDX(3, 2, 1)) == 123);
    CHECK(weft_tensor_set(ht, IDX(0, 0, 1), 0.5) == WEFT_OK && get(h, IDX(1, 0, 0)) == 0.5);
    wt_drop_all();
}

// ---- gradients through view chains ----
static weft_tensor *g_w; // fixed weights
static weft_tensor *chain1(weft_tensor *const *in, void *u) { // sum over axis of slice(transpose(x))
    (void)u;
    weft_tensor *t = weft_transpose(in[0], 0, 1), *s = weft_slice(t, 0, 1, 5, 2), *y = weft_sum(s, 1, (int[]){1}, false);
    weft_tensor_free(t);
    weft_tensor_free(s);
    return y;
}
static weft_tensor *chain2(weft_tensor *const *in, void *u) { // expand then mul
    (void)u;
    weft_tensor *e = weft_expand(in[0], WEFT_DIMS(2, 3, 4)), *y = weft_mul(e, in[1]);
    weft_tensor_free(e);
    return y;
}
static weft_tensor *chain3(weft_tensor *const *in, void *u) { // reshape of a transposed view (copy path)
    (void)u;
    weft_tensor *t = weft_transpose(in[0], 0, 1), *r = weft_reshape(t, WEFT_DIMS(2, 10)), *y = weft_mul(r, r);
    weft_tensor_free(t);
    weft_tensor_free(r);
    return y;
}
static weft_tensor *chain4(weft_tensor *const *in, void *u) { // select, narrow, unsqueeze, squeeze, permute
    (void)u;
    weft_tensor *s = weft_select(in[0], 0, 1), *n = weft_narrow(s, 1, 1, 3), *us = weft_unsqueeze(n, 0);
    weft_tensor *p = weft_permute(us, (int[]){2, 0, 1}), *q = weft_squeeze(p, 1), *y = weft_mul(q, g_w);
    weft_tensor *ts[] = {s, n, us, p, q};
    for (int i = 0; i < 5; i++) weft_tensor_free(ts[i]);
    return y;
}
static weft_tensor *chain5(weft_tensor *const *in, void *u) { // split pieces combined; flatten; clone
    (void)u;
    weft_tensor *parts[2] = {0};
    if (weft_split(in[0], 1, 2, (const int64_t[]){2, 2}, parts) != WEFT_OK) return NULL;
    weft_tensor *m = weft_mul(parts[0], parts[1]), *f = weft_flatten(m, 0, 1), *c = weft_tensor_clone(f);
    weft_tensor *y = weft_exp(c);
    weft_tensor *ts[] = {parts[0], parts[1], m, f, c};
    for (int i = 0; i < 5; i++) weft_tensor_free(ts[i]);
    return y;
}
static weft_tensor *chain6(weft_tensor *const *in, void *u) { // view + contiguous of a transpose + overlapping slices
    (void)u;
    weft_tensor *v = weft_view(in[0], WEFT_DIMS(5, 4)), *t = weft_transpose(v, 0, 1), *c = weft_tensor_contiguous(t);
    weft_tensor *a = weft_slice(c, 1, 0, 4, 1), *b = weft_slice(c, 1, 1, 5, 1), *y = weft_mul(a, b);
    weft_tensor *ts[] = {v, t, c, a, b};
    for (int i = 0; i < 5; i++) weft_tensor_free(ts[i]);
    return y;
}
static void test_grad_chains(void) {
    double a[40], b[40], w[9];
    wt_vals(a, 40, -1, 1, 1);
    wt_vals(b, 40, -1, 1, 2);
    wt_vals(w, 9, -1, 1, 3);
    weft_tensor *x = wt_keep(wt_f64(a, WEFT_DIMS(4, 5), true));
    CHECK_GRAD(chain1, 1, &x, NULL);
    weft_tensor *in2[2] = {wt_keep(wt_f64(a, WEFT_DIMS(3, 1), true)), wt_keep(wt_f64(b, WEFT_DIMS(2, 3, 4), true))};
    CHECK_GRAD(chain2, 2, in2, NULL);
    CHECK_GRAD(chain3, 1, &x, NULL);
    g_w = wt_keep(weft_tensor_from_data(w, WEFT_DIMS(3, 3), WEFT_F64));
    weft_tensor *x3 = wt_keep(wt_f64(a, WEFT_DIMS(2, 3, 5), true));
    CHECK_GRAD(chain4, 1, &x3, NULL);
    weft_tensor *x4 = wt_keep(wt_f64(a, WEFT_DIMS(3, 4), true));
    CHECK_GRAD(chain5, 1, &x4, NULL);
    weft_tensor *x5 = wt_keep(wt_f64(a, WEFT_DIMS(20), true));
    CHECK_GRAD(chain6, 1, &x5, NULL);
    wt_drop_all();
}

// gradient of an expanded input sums over the broadcast dims; slice gradient is zero outside
static void test_grad_values(void) {
    double v[3] = {1, 2, 3};
    weft_tensor *c = wt_keep(wt_f64(v, WEFT_DIMS(3, 1), true));
    weft_tensor *e = wt_keep(weft_expand(c, WEFT_DIMS(2, 3, 4))), *s = wt_keep(weft_sum(e, 0, NULL, false));
    CHECK(weft_backward(s, NULL, NULL) == WEFT_OK);
    double g8[3] = {8, 8, 8};
    wt_check_values("expand grad", weft_tensor_grad(c), g8, 3, 0);
    double xv[6] = {1, 2, 3, 4, 5, 6};
    weft_tensor *x = wt_keep(wt_f64(xv, WEFT_DIMS(6), true));
    weft_tensor *sl = wt_keep(weft_slice(x, 0, 1, 6, 2)), *cube = wt_keep(weft_pow_scalar(sl, 3)), *y = wt_keep(weft_sum(cube, 0, NULL, false));
    weft_backward_opts o = {.create_graph = true};
    CHECK(weft_backward(y, NULL, &o) == WEFT_OK);
    double g1[6] = {0, 12, 0, 48, 0, 108};
    wt_check_values("slice grad", weft_tensor_grad(x), g1, 6, 1e-12);
    // second order through slice_backward: d/dx sum(3 x^2 on the slice) = 6x there
    weft_tensor *g = wt_keep(weft_tensor_ref(weft_tensor_grad(x)));
    weft_tensor_zero_grad(x);
    weft_tensor *gs = wt_keep(weft_sum(g, 0, NULL, false));
    CHECK(gs && weft_backward(gs, NULL, NULL) == WEFT_OK);
    double g2[6] = {0, 12, 0, 24, 0, 36};
    wt_check_values("slice second order", weft_tensor_grad(x), g2, 6, 1e-12);
    wt_drop_all();
}

int main(void) {
    RUN(test_reshape_view);
    RUN(test_flatten_permute_transpose);
    RUN(test_slice_narrow_select);
    RUN(test_expand_squeeze_unsqueeze);
    RUN(test_split);
    RUN(test_contiguous_clone_detach);
    RUN(test_grad_chains);
    RUN(test_grad_values);
    return wt_summary();
}
