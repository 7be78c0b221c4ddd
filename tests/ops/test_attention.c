// causal_attention (fused): forward and backward against the composed path
// built from public ops (matmul, mul_scalar, add of a -inf mask, softmax,
// matmul) in f64, on several shapes and on strided views; lse against
// logsumexp of the masked scores; f32 within a tolerance; finite-difference
// gradients; errors naming the op; no second-order gradient.
// causal_attention_qkv (one packed (B,T,3C) input) against the split heads
// through causal_attention in f64, f32 and bf16, on a transposed qkv, by
// finite differences, and its errors.
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "weft_test.h"

// (T,T) mask: 0 on and below the diagonal, -inf above.
static weft_tensor *mask_tt(int64_t T, weft_dtype dt) {
    double *m = malloc(sizeof(double) * (size_t)(T * T + 1));
    for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++) m[i * T + j] = j > i ? -INFINITY : 0.0;
    weft_tensor *t = wt_f64(m, WEFT_DIMS(T, T), false), *c = weft_cast(t, dt);
    weft_tensor_free(t);
    free(m);
    return c;
}

// Masked scores scale q k^T + mask (B,H,T,T) from public ops.
static weft_tensor *masked_scores(weft_tensor *q, weft_tensor *k, double scale) {
    int64_t T = weft_tensor_size(q, 2);
    weft_tensor *qs = weft_mul_scalar(q, scale), *kt = weft_transpose(k, 2, 3);
    weft_tensor *s = weft_matmul(qs, kt), *mask = mask_tt(T, weft_tensor_dtype(q));
    weft_tensor *sm = weft_add(s, mask);
    weft_tensor *ts[] = {qs, kt, s, mask};
    for (int i = 0; i < 4; i++) weft_tensor_free(ts[i]);
    return sm;
}

// The composed path: softmax(scale q k^T + mask) v.
static weft_tensor *composed(weft_tensor *q, weft_tensor *k, weft_tensor *v, double scale) {
    weft_tensor *sm = masked_scores(q, k, scale), *att = weft_softmax(sm, -1), *y = weft_matmul(att, v);
    weft_tensor_free(sm);
    weft_tensor_free(att);
    return y;
}

// Both outputs of the op: o and lse.
static weft_status fused2(weft_tensor *q, weft_tensor *k, weft_tensor *v, double scale, weft_tensor **out) {
    weft_tensor *in[3] = {q, k, v};
    weft_attrs at = {.f = {scale}};
    return weft_op_apply(weft_op_find("causal_attention"), 3, in, &at, out);
}

static weft_tensor *rand_as(const int64_t *sz, weft_dtype dt, uint64_t seed, bool rg) {
    weft_tensor *t = wt_rand64(4, sz, -1.5, 1.5, seed, false), *c = weft_cast(t, dt);
    weft_tensor_free(t);
    if (rg) weft_tensor_set_requires_grad(c, true);
    return c;
}

// Forward + backward of fused vs composed on leaves of shape sz (f64),
// loss = sum(y * w): o, lse and all three gradients agree within tol.
static void check_case(int64_t B, int64_t H, int64_t T, int64_t D, uint64_t seed, double tol) {
    const int64_t sz[4] = {B, H, T, D};
    double scale = 1.0 / sqrt((double)D);
    weft_tensor *a[3], *b[3];
    for (int i = 0; i < 3; i++) {
        a[i] = rand_as(sz, WEFT_F64, seed + (uint64_t)i, true);
        b[i] = weft_tensor_contiguous(a[i]); // same values
        weft_tensor *bl = weft_tensor_detach(b[i]);
        weft_tensor_free(b[i]);
        b[i] = bl;
        weft_tensor_set_requires_grad(b[i], true);
    }
    weft_tensor *out[WEFT_MAX_OP_OUT] = {0};
    CHECK(fused2(a[0], a[1], a[2], scale, out) == WEFT_OK);
    weft_tensor *ref = composed(b[0], b[1], b[2], scale);
    CHECK(out[0] && ref && weft_tensor_is_contiguous(out[0]) && weft_tensor_dtype(out[0]) == WEFT_F64);
    CHECK(out[1] && weft_tensor_ndim(out[1]) == 3 && weft_tensor_size(out[1], 2) == T);
    char what[96];
    snprintf(what, sizeof what, "o (%lld,%lld,%lld,%lld)", (long long)B, (long long)H, (long long)T, (long long)D);
    if (out[0] && ref) wt_check_same(what, out[0], ref, tol);
    // lse = logsumexp of the masked scores over the keys
    weft_tensor *sm = masked_scores(b[0], b[1], scale);
    int ax = 3;
    weft_tensor *lref = weft_logsumexp(sm, 1, &ax, false);
    if (out[1] && lref) wt_check_same("lse", out[1], lref, tol);
    // backward: the same upstream gradient w into both
    weft_tensor *w = rand_as(sz, WEFT_F64, seed + 7, false);
    CHECK(out[0] && weft_backward(out[0], w, NULL) == WEFT_OK);
    CHECK(ref && weft_backward(ref, w, NULL) == WEFT_OK);
    static const char *gname[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++) {
        weft_tensor *ga = weft_tensor_grad(a[i]), *gb = weft_tensor_grad(b[i]);
        CHECK(ga && gb);
        if (ga && gb) wt_check_same(gname[i], ga, gb, tol);
    }
    weft_tensor *ts[] = {out[0], out[1], ref, sm, lref, w};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
    for (int i = 0; i < 3; i++) {
        weft_tensor_free(a[i]);
        weft_tensor_free(b[i]);
    }
}

static void test_shapes(void) {
    check_case(1, 1, 1, 4, 1, 1e-12);   // T = 1
    check_case(2, 3, 7, 5, 2, 1e-12);   // B=2, H=3, T=7
    check_case(1, 1, 64, 8, 3, 1e-12);  // B*H = 1, one full row block
    check_case(1, 2, 64, 16, 4, 1e-12); // T = 64
    check_case(2, 1, 9, 1, 5, 1e-12);   // D = 1
    check_case(1, 3, 150, 4, 6, 1e-11); // T not a multiple of the row block, 3 blocks
    check_case(2, 3, 1, 1, 7, 1e-12);   // T = D = 1
}

// T = 1: each row sees itself only, so o = v and lse = scale q.k.
static void test_t1(void) {
    const int64_t sz[4] = {2, 2, 1, 3};
    weft_tensor *q = rand_as(sz, WEFT_F64, 20, false), *k = rand_as(sz, WEFT_F64, 21, false);
    weft_tensor *v = rand_as(sz, WEFT_F64, 22, false), *out[WEFT_MAX_OP_OUT] = {0};
    CHECK(fused2(q, k, v, 0.7, out) == WEFT_OK);
    double vq[12], vk[12], vv[12], l[4];
    weft_tensor_to_f64(q, vq, 12);
    weft_tensor_to_f64(k, vk, 12);
    weft_tensor_to_f64(v, vv, 12);
    for (int r = 0; r < 4; r++) {
        l[r] = 0;
        for (int d = 0; d < 3; d++) l[r] += 0.7 * vq[3 * r + d] * vk[3 * r + d];
    }
    if (out[0]) wt_check_values("T=1 o", out[0], vv, 12, 1e-15);
    if (out[1]) wt_check_values("T=1 lse", out[1], l, 4, 1e-14);
    weft_tensor *ts[] = {q, k, v, out[0], out[1]};
    for (int i = 0; i < 5; i++) weft_tensor_free(ts[i]);
}

// Strided inputs as the attention module makes them: q, k, v split out of
// one (B,T,3*H*D) tensor, viewed (B,T,H,D) and permuted to (B,H,T,D); and a
// transposed (B,H,D,T) tensor. Forward and the gradient of the base agree.
static void test_noncontiguous(void) {
    const int64_t B = 2, T = 11, H = 3, D = 4, C = H * D;
    double scale = 0.4;
    weft_tensor *xa = wt_rand64(WEFT_DIMS(B, T, 3 * C), -1, 1, 30, true);
    weft_tensor *xb = wt_rand64(WEFT_DIMS(B, T, 3 * C), -1, 1, 30, true);
    weft_tensor *ya = NULL, *yb = NULL;
    static const int perm[4] = {0, 2, 1, 3};
    for (int path = 0; path < 2; path++) {
        weft_tensor *parts[3], *h[3];
        CHECK(weft_split(path ? xb : xa, 2, 3, (const int64_t[]){C, C, C}, parts) == WEFT_OK);
        for (int p = 0; p < 3; p++) {
            weft_tensor *v4 = weft_view(parts[p], WEFT_DIMS(B, T, H, D));
            h[p] = weft_permute(v4, perm);
            weft_tensor_free(v4);
            weft_tensor_free(parts[p]);
        }
        CHECK(!weft_tensor_is_contiguous(h[0]) && !weft_tensor_is_contiguous(h[1]));
        if (path) yb = composed(h[0], h[1], h[2], scale);
        else ya = weft_causal_attention(h[0], h[1], h[2], scale);
        for (int p = 0; p < 3; p++) weft_tensor_free(h[p]);
    }
    CHECK(ya && yb);
    if (ya && yb) wt_check_same("strided o", ya, yb, 1e-12);
    weft_tensor *w = rand_as((const int64_t[]){B, H, T, D}, WEFT_F64, 31, false);
    CHECK(ya && weft_backward(ya, w, NULL) == WEFT_OK);
    CHECK(yb && weft_backward(yb, w, NULL) == WEFT_OK);
    if (weft_tensor_grad(xa) && weft_tensor_grad(xb))
        wt_check_same("strided d(base)", weft_tensor_grad(xa), weft_tensor_grad(xb), 1e-12);
    else CHECK(!"gradients of the base");

    // k given as a transposed view of a (B,H,D,T) tensor; v a column slice
    weft_tensor *kt = wt_rand64(WEFT_DIMS(B, H, D, T), -1, 1, 32, false), *k = weft_transpose(kt, 2, 3);
    weft_tensor *vw = wt_rand64(WEFT_DIMS(B, H, T, 2 * D), -1, 1, 33, false), *v = weft_narrow(vw, 3, 1, D);
    weft_tensor *q = rand_as((const int64_t[]){B, H, T, D}, WEFT_F64, 34, false);
    weft_tensor *yf = weft_causal_attention(q, k, v, scale), *yc = composed(q, k, v, scale);
    CHECK(yf && yc && !weft_tensor_is_contiguous(k) && !weft_tensor_is_contiguous(v));
    if (yf && yc) wt_check_same("transposed k, sliced v", yf, yc, 1e-12);
    weft_tensor *ts[] = {xa, xb, ya, yb, w, kt, k, vw, v, q, yf, yc};
    for (int i = 0; i < 12; i++) weft_tensor_free(ts[i]);
}

// f32 (several row blocks, threaded) against the f64 composed path.
static void test_f32(void) {
    const int64_t sz[4] = {2, 3, 130, 16};
    double scale = 0.25;
    weft_tensor *d[3], *f[3];
    for (int i = 0; i < 3; i++) {
        d[i] = rand_as(sz, WEFT_F64, 40 + (uint64_t)i, true);
        f[i] = weft_cast(d[i], WEFT_F32);
        weft_tensor *l = weft_tensor_detach(f[i]);
        weft_tensor_free(f[i]);
        f[i] = l;
        weft_tensor_set_requires_grad(f[i], true);
    }
    weft_tensor *out[WEFT_MAX_OP_OUT] = {0};
    CHECK(fused2(f[0], f[1], f[2], scale, out) == WEFT_OK);
    CHECK(out[0] && weft_tensor_dtype(out[0]) == WEFT_F32 && weft_tensor_dtype(out[1]) == WEFT_F32);
    weft_tensor *ref = composed(d[0], d[1], d[2], scale), *sm = masked_scores(d[0], d[1], scale);
    int ax = 3;
    weft_tensor *lref = weft_logsumexp(sm, 1, &ax, false);
    weft_tensor *o64 = out[0] ? weft_cast(out[0], WEFT_F64) : NULL, *l64 = out[1] ? weft_cast(out[1], WEFT_F64) : NULL;
    if (o64 && ref) wt_check_same("f32 o", o64, ref, 2e-5);
    if (l64 && lref) wt_check_same("f32 lse", l64, lref, 2e-5);
    weft_tensor *w = rand_as(sz, WEFT_F64, 47, false), *w32 = weft_cast(w, WEFT_F32);
    CHECK(out[0] && weft_backward(out[0], w32, NULL) == WEFT_OK);
    CHECK(ref && weft_backward(ref, w, NULL) == WEFT_OK);
    for (int i = 0; i < 3; i++) {
        weft_tensor *gf = weft_tensor_grad(f[i]), *gd = weft_tensor_grad(d[i]);
        weft_tensor *g64 = gf ? weft_cast(gf, WEFT_F64) : NULL;
        CHECK(g64 && gd && weft_tensor_dtype(gf) == WEFT_F32);
        if (g64 && gd) wt_check_same("f32 gradient", g64, gd, 1e-4);
        weft_tensor_free(g64);
    }
    weft_tensor *ts[] = {out[0], out[1], ref, sm, lref, o64, l64, w, w32};
    for (int i = 0; i < 9; i++) weft_tensor_free(ts[i]);
    for (int i = 0; i < 3; i++) {
        weft_tensor_free(d[i]);
        weft_tensor_free(f[i]);
    }
}

// Large scores stay finite (max-subtracted): scale 100 on values up to 1.5.
static void test_stability(void) {
    const int64_t sz[4] = {1, 2, 20, 3};
    weft_tensor *q = rand_as(sz, WEFT_F64, 50, false), *k = rand_as(sz, WEFT_F64, 51, false);
    weft_tensor *v = rand_as(sz, WEFT_F64, 52, false);
    for (int dt = 0; dt < 2; dt++) {
        weft_tensor *qc = weft_cast(q, dt ? WEFT_F64 : WEFT_F32), *kc = weft_cast(k, weft_tensor_dtype(qc));
        weft_tensor *vc = weft_cast(v, weft_tensor_dtype(qc));
        weft_tensor *y = weft_causal_attention(qc, kc, vc, 100.0), *y64 = y ? weft_cast(y, WEFT_F64) : NULL;
        weft_tensor *ref = composed(q, k, v, 100.0);
        CHECK(y64 && ref);
        if (y64 && ref) wt_check_same("scale 100", y64, ref, dt ? 1e-12 : 1e-4);
        weft_tensor *ts[] = {qc, kc, vc, y, y64, ref};
        for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
    }
    weft_tensor_free(q);
    weft_tensor_free(k);
    weft_tensor_free(v);
}

typedef struct {
    double scale;
    bool permuted;   // inputs given (B,T,H,D): attend over the permuted views
    bool heads_last; // the output in (B,T,H,D) order (weft_causal_attention_heads_last)
} ga_case;
static weft_tensor *f_attn(weft_tensor *const *in, void *u) {
    const ga_case *c = u;
    static const int perm[4] = {0, 2, 1, 3};
    weft_tensor *h[3];
    for (int i = 0; i < 3; i++) h[i] = c->permuted ? weft_permute(in[i], perm) : weft_tensor_ref(in[i]);
    weft_tensor *y = c->heads_last ? weft_causal_attention_heads_last(h[0], h[1], h[2], c->scale)
                                   : weft_causal_attention(h[0], h[1], h[2], c->scale);
    for (int i = 0; i < 3; i++) weft_tensor_free(h[i]);
    return y;
}

static void test_gradcheck(void) {
    ga_case c0 = {0.8, false, false}, c1 = {1.0 / sqrt(3.0), true, false}, c2 = {0.8, false, true},
            c3 = {1.0 / sqrt(3.0), true, true};
    weft_tensor *a[3], *b[3], *d1[3];
    for (int i = 0; i < 3; i++) {
        a[i] = wt_rand64(WEFT_DIMS(1, 2, 5, 3), -1, 1, 60 + (uint64_t)i, true);
        b[i] = wt_rand64(WEFT_DIMS(2, 4, 1, 3), -1, 1, 63 + (uint64_t)i, true); // (B,T,H,D) -> (2,1,4,3)
        d1[i] = wt_rand64(WEFT_DIMS(1, 1, 6, 1), -1, 1, 66 + (uint64_t)i, true);
    }
    CHECK_GRAD(f_attn, 3, a, &c0);
    CHECK_GRAD(f_attn, 3, b, &c1);
    CHECK_GRAD(f_attn, 3, d1, &c0);
    CHECK_GRAD(f_attn, 3, a, &c2); // the output with the heads last
    CHECK_GRAD(f_attn, 3, b, &c3);
    for (int i = 0; i < 3; i++) {
        weft_tensor_free(a[i]);
        weft_tensor_free(b[i]);
        weft_tensor_free(d1[i]);
    }
}

// The output with the heads last is the transpose of the usual one, bit for bit, and so are the gradients
// it sends back (f32 and f64, threaded sizes, the inputs as a transformer hands them over: heads of (B,T,C)).
static void test_heads_last(void) {
    for (int f = 0; f < 2; f++) {
        weft_dtype dt = f ? WEFT_F64 : WEFT_F32;
        ga_case c[2] = {{0.125, true, false}, {0.125, true, true}};
        weft_tensor *in[2][3], *y[2], *l[2];
        for (int r = 0; r < 2; r++) {
            for (int i = 0; i < 3; i++) in[r][i] = rand_as((const int64_t[]){2, 70, 3, 16}, dt, 90 + (uint64_t)i, true);
            y[r] = f_attn(in[r], &c[r]);
            CHECK(y[r] != NULL);
        }
        if (!y[0] || !y[1]) continue;
        CHECK(weft_tensor_size(y[1], 1) == 70 && weft_tensor_size(y[1], 2) == 3 && weft_tensor_is_contiguous(y[1]));
        weft_tensor *yt = weft_transpose(y[0], 1, 2);
        wt_check_same("heads-last output", y[1], yt, 0);
        weft_tensor *w = rand_as((const int64_t[]){2, 70, 3, 16}, dt, 99, false), *m0 = weft_mul(yt, w), *m1 = weft_mul(y[1], w);
        l[0] = weft_sum(m0, 0, NULL, false), l[1] = weft_sum(m1, 0, NULL, false);
        CHECK(weft_backward(l[0], NULL, NULL) == WEFT_OK && weft_backward(l[1], NULL, NULL) == WEFT_OK);
        for (int i = 0; i < 3; i++)
            wt_check_same("heads-last gradient", weft_tensor_grad(in[1][i]), weft_tensor_grad(in[0][i]), 0);
        weft_tensor *ts[] = {yt, w, m0, m1, l[0], l[1], y[0], y[1]};
        for (int i = 0; i < 8; i++) weft_tensor_free(ts[i]);
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < 3; i++) weft_tensor_free(in[r][i]);
    }
    // the backward op refuses an o of the other order
    weft_tensor *q = wt_rand64(WEFT_DIMS(1, 2, 3, 4), -1, 1, 5, false), *o = wt_rand64(WEFT_DIMS(1, 2, 3, 4), -1, 1, 6, false);
    weft_tensor *lse = wt_rand64(WEFT_DIMS(1, 2, 3), -1, 1, 7, false), *g[WEFT_MAX_OP_OUT];
    weft_attrs at = {.i = {1}, .f = {0.5}};
    CHECK(weft_op_apply(weft_op_find("causal_attention_backward"), 6, (weft_tensor *[]){q, q, q, o, lse, o}, &at, g) !=
              WEFT_OK &&
          wt_error_has("causal_attention_backward") && wt_error_has("expected (1,3,2,4)"));
    weft_tensor_free(q), weft_tensor_free(o), weft_tensor_free(lse);
    // i[1]: the backward op writes gq, gk, gv with the heads last, (B,T,H,D), the transposes of i[1] = 0's
    // results bit for bit (what the forward's backward rule asks for with the heads last: no copy to merge them)
    const int64_t sz[4] = {2, 3, 37, 8};
    weft_tensor *in[6], *g0[WEFT_MAX_OP_OUT] = {0}, *g1[WEFT_MAX_OP_OUT] = {0};
    for (int i = 0; i < 3; i++) in[i] = rand_as(sz, WEFT_F64, 110 + (uint64_t)i, false);
    weft_tensor *fw[WEFT_MAX_OP_OUT] = {0};
    CHECK(fused2(in[0], in[1], in[2], 0.3, fw) == WEFT_OK);
    in[3] = fw[0], in[4] = fw[1], in[5] = rand_as(sz, WEFT_F64, 113, false);
    weft_attrs a0 = {.f = {0.3}}, a1 = {.i = {0, 1}, .f = {0.3}}, bad = {.i = {0, 2}, .f = {0.3}};
    const weft_op_def *bw = weft_op_find("causal_attention_backward");
    CHECK(weft_op_apply(bw, 6, in, &a0, g0) == WEFT_OK && weft_op_apply(bw, 6, in, &a1, g1) == WEFT_OK);
    for (int j = 0; j < 3 && g0[j] && g1[j]; j++) {
        CHECK(weft_tensor_size(g1[j], 1) == 37 && weft_tensor_size(g1[j], 2) == 3);
        weft_tensor *t = weft_transpose(g1[j], 1, 2);
        wt_check_same("heads-last gradient op", t, g0[j], 0);
        weft_tensor_free(t);
    }
    weft_tensor *gb[WEFT_MAX_OP_OUT] = {0};
    CHECK(weft_op_apply(bw, 6, in, &bad, gb) != WEFT_OK && wt_error_has("gradients heads last"));
    for (int j = 0; j < 3; j++) weft_tensor_free(g0[j]), weft_tensor_free(g1[j]);
    for (int i = 0; i < 6; i++) weft_tensor_free(in[i]);
}

// A gradient reaching only lse gives the inputs none (lse carries no gradient).
static void test_lse_no_grad(void) {
    const int64_t sz[4] = {1, 1, 4, 2};
    weft_tensor *q = rand_as(sz, WEFT_F64, 70, true), *k = rand_as(sz, WEFT_F64, 71, true);
    weft_tensor *v = rand_as(sz, WEFT_F64, 72, true), *out[WEFT_MAX_OP_OUT] = {0};
    CHECK(fused2(q, k, v, 1.0, out) == WEFT_OK);
    weft_tensor *s = out[1] ? weft_sum(out[1], 0, NULL, false) : NULL;
    CHECK(s && weft_backward(s, NULL, NULL) == WEFT_OK);
    CHECK(weft_tensor_grad(q) == NULL && weft_tensor_grad(k) == NULL && weft_tensor_grad(v) == NULL);
    weft_tensor *ts[] = {q, k, v, out[0], out[1], s};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
}

// expr returns NULL with an error naming `what`.
#define EXPECT_NULL(expr, what)                                                                       \
    do {                                                                                              \
        weft_clear_error();                                                                           \
        weft_tensor *_r = (expr);                                                                     \
        CHECK(_r == NULL && weft_last_status() != WEFT_OK && strstr(weft_last_error(), what) != NULL); \
        weft_tensor_free(_r);                                                                         \
    } while (0)

static void test_errors(void) {
    weft_tensor *q = weft_tensor_zeros(WEFT_DIMS(1, 2, 5, 4), WEFT_F64);
    weft_tensor *k = weft_tensor_zeros(WEFT_DIMS(1, 2, 5, 4), WEFT_F64);
    weft_tensor *q3 = weft_tensor_zeros(WEFT_DIMS(2, 5, 4), WEFT_F64);
    weft_tensor *k6 = weft_tensor_zeros(WEFT_DIMS(1, 2, 6, 4), WEFT_F64);
    weft_tensor *kf = weft_tensor_zeros(WEFT_DIMS(1, 2, 5, 4), WEFT_F32);
    weft_tensor *qi = weft_tensor_zeros(WEFT_DIMS(1, 2, 5, 4), WEFT_I32);
    weft_tensor *ki = weft_tensor_zeros(WEFT_DIMS(1, 2, 5, 4), WEFT_I32);
    EXPECT_NULL(weft_causal_attention(q3, q3, q3, 1), "causal_attention");  // wrong ndim
    EXPECT_NULL(weft_causal_attention(q, q3, q, 1), "causal_attention");    // k wrong ndim
    EXPECT_NULL(weft_causal_attention(q, k6, k, 1), "causal_attention");    // shapes differ
    EXPECT_NULL(weft_causal_attention(q, k, k6, 1), "causal_attention");    // v's shape differs
    EXPECT_NULL(weft_causal_attention(qi, ki, ki, 1), "causal_attention");  // int dtype
    EXPECT_NULL(weft_causal_attention(q, kf, k, 1), "causal_attention");    // mixed dtypes
    EXPECT_NULL(weft_causal_attention(q, NULL, k, 1), "causal_attention");  // NULL input
    // the backward op checks its own inputs: lse of the wrong shape
    weft_tensor *in[6] = {q, k, k, q, q, q}, *out[WEFT_MAX_OP_OUT];
    weft_clear_error();
    CHECK(weft_op_apply(weft_op_find("causal_attention_backward"), 6, in, NULL, out) != WEFT_OK &&
          strstr(weft_last_error(), "causal_attention_backward"));
    // still usable afterwards
    weft_tensor *y = weft_causal_attention(q, k, k, 1);
    CHECK(y != NULL);
    weft_tensor *ts[] = {q, k, q3, k6, kf, qi, ki, y};
    for (int i = 0; i < 8; i++) weft_tensor_free(ts[i]);
}

// Differentiable once: under create_graph the gradient is recorded through
// causal_attention_backward, which has no backward rule of its own.
static void test_no_second_order(void) {
    const int64_t sz[4] = {1, 1, 3, 2};
    weft_tensor *q = rand_as(sz, WEFT_F64, 80, true), *k = rand_as(sz, WEFT_F64, 81, true);
    weft_tensor *v = rand_as(sz, WEFT_F64, 82, true);
    weft_tensor *y = weft_causal_attention(q, k, v, 1.0), *s = weft_sum(y, 0, NULL, false);
    weft_backward_opts o = {.create_graph = true};
    CHECK(weft_backward(s, NULL, &o) == WEFT_OK);
    weft_tensor *gq = weft_tensor_grad(q);
    CHECK(gq && weft_tensor_requires_grad(gq));
    weft_tensor *gs = gq ? weft_sum(gq, 0, NULL, false) : NULL;
    weft_clear_error();
    CHECK(gs && weft_backward(gs, NULL, NULL) != WEFT_OK && strstr(weft_last_error(), "causal_attention"));
    weft_tensor_free(gs);
    // the recorded gradients hold the graph that holds q, k, v: drop them first
    weft_tensor_zero_grad(q);
    weft_tensor_zero_grad(k);
    weft_tensor_zero_grad(v);
    weft_tensor *ts[] = {q, k, v, y, s};
    for (int i = 0; i < 5; i++) weft_tensor_free(ts[i]);
}

// The split path the packed op replaces: qkv (B,T,3C) split into q, k, v, their heads (B,H,T,D) views,
// the heads-last attention merged back to (B,T,C) by a view.
static weft_tensor *split_heads_attention(weft_tensor *qkv, int64_t H, double scale) {
    const int64_t B = weft_tensor_size(qkv, 0), T = weft_tensor_size(qkv, 1), C = weft_tensor_size(qkv, 2) / 3;
    static const int perm[4] = {0, 2, 1, 3};
    weft_tensor *parts[3], *h[3];
    if (weft_split(qkv, 2, 3, (const int64_t[]){C, C, C}, parts) != WEFT_OK) return NULL;
    for (int p = 0; p < 3; p++) {
        weft_tensor *v4 = weft_view(parts[p], WEFT_DIMS(B, T, H, C / H));
        h[p] = weft_permute(v4, perm);
        weft_tensor_free(v4);
        weft_tensor_free(parts[p]);
    }
    weft_tensor *y = weft_causal_attention_heads_last(h[0], h[1], h[2], scale);
    for (int p = 0; p < 3; p++) weft_tensor_free(h[p]);
    weft_tensor *ym = y ? weft_view(y, WEFT_DIMS(B, T, C)) : NULL;
    weft_tensor_free(y);
    return ym;
}

// Packed vs split on leaves of one dtype: the output and the gradient of qkv (loss sum(y * w)).
static void packed_case(int64_t B, int64_t T, int64_t H, int64_t D, weft_dtype dt, double tol) {
    const int64_t C = H * D;
    const double scale = 1.0 / sqrt((double)D);
    weft_tensor *x[2], *y[2], *g[2];
    weft_tensor *w = rand_as((const int64_t[]){B, T, C, 1}, dt, 41, false), *w3 = weft_view(w, WEFT_DIMS(B, T, C));
    for (int r = 0; r < 2; r++) {
        weft_tensor *x64 = wt_rand64(WEFT_DIMS(B, T, 3 * C), -1.5, 1.5, 40, false);
        x[r] = weft_cast(x64, dt);
        weft_tensor_free(x64);
        weft_tensor_set_requires_grad(x[r], true);
        y[r] = r ? weft_causal_attention_qkv(x[r], H, scale) : split_heads_attention(x[r], H, scale);
        CHECK(y[r] && weft_tensor_ndim(y[r]) == 3 && weft_tensor_size(y[r], 2) == C);
        CHECK(y[r] && weft_backward(y[r], w3, NULL) == WEFT_OK);
        g[r] = weft_tensor_grad(x[r]);
        CHECK(g[r] && weft_tensor_dtype(g[r]) == dt);
    }
    if (y[0] && y[1]) wt_check_same("packed o", y[1], y[0], tol);
    if (g[0] && g[1]) wt_check_same("packed d(qkv)", g[1], g[0], tol);
    weft_tensor *ts[] = {w, w3, x[0], x[1], y[0], y[1]};
    for (int i = 0; i < 6; i++) weft_tensor_free(ts[i]);
}

typedef struct qkv_case {
    int64_t H;
    double scale;
    bool transposed; // qkv given as a (B,3C,T) tensor transposed: no unit stride in its last dim
} qkv_case;
static weft_tensor *f_qkv(weft_tensor *const *in, void *u) {
    const qkv_case *c = u;
    weft_tensor *x = c->transposed ? weft_transpose(in[0], 1, 2) : weft_tensor_ref(in[0]);
    weft_tensor *y = weft_causal_attention_qkv(x, c->H, c->scale);
    weft_tensor_free(x);
    return y;
}

static void test_packed(void) {
    // the same kernels on the same values (bit for bit with OpenBLAS and oneDNN here; a BLAS may round
    // products of another row stride differently): f64, f32 threaded, bf16 (one bf16 step of 1 at most)
    packed_case(2, 37, 3, 5, WEFT_F64, 1e-13);   // T past one row block
    packed_case(2, 70, 4, 16, WEFT_F32, 1e-6);   // threaded
    packed_case(1, 33, 2, 32, WEFT_BF16, 1.6e-2); // widened to f32, rounded once
    // finite differences: contiguous, two heads; transposed; one head of D = 1
    qkv_case c0 = {2, 0.7, false}, c1 = {3, 0.5, true}, c2 = {1, 1.0, false};
    weft_tensor *a = wt_rand64(WEFT_DIMS(2, 5, 12), -1, 1, 50, true);
    weft_tensor *b = wt_rand64(WEFT_DIMS(1, 18, 4), -1, 1, 51, true); // (B,3C,T): qkv (1,4,18), C = 6
    weft_tensor *d = wt_rand64(WEFT_DIMS(1, 6, 3), -1, 1, 52, true);
    CHECK_GRAD(f_qkv, 1, &a, &c0);
    CHECK_GRAD(f_qkv, 1, &b, &c1);
    CHECK_GRAD(f_qkv, 1, &d, &c2);
    // the transposed qkv against the same values contiguous
    weft_tensor *bt = weft_transpose(b, 1, 2), *bc = weft_tensor_clone(bt);
    weft_tensor *y0 = weft_causal_attention_qkv(bt, 3, 0.5), *y1 = weft_causal_attention_qkv(bc, 3, 0.5);
    CHECK(y0 && y1 && !weft_tensor_is_contiguous(bt));
    if (y0 && y1) wt_check_same("transposed qkv", y0, y1, 0);
    weft_tensor *ts[] = {a, b, d, bt, bc, y0, y1};
    for (int i = 0; i < 7; i++) weft_tensor_free(ts[i]);
    // empty batches and sequences: empty outputs, and an empty gradient of qkv's shape
    const int64_t empty[2][3] = {{0, 5, 12}, {2, 0, 12}};
    for (int e = 0; e < 2; e++) {
        weft_tensor *x = wt_rand64(3, empty[e], -1, 1, 53, true), *y = weft_causal_attention_qkv(x, 2, 0.5);
        CHECK(y && weft_tensor_size(y, 0) == empty[e][0] && weft_tensor_size(y, 1) == empty[e][1] &&
              weft_tensor_size(y, 2) == 4);
        weft_tensor *sy = y ? weft_sum(y, 0, NULL, false) : NULL;
        CHECK(sy && weft_backward(sy, NULL, NULL) == WEFT_OK);
        weft_tensor *g = weft_tensor_grad(x);
        CHECK(g && weft_tensor_numel(g) == 0 && weft_tensor_size(g, 2) == 12);
        weft_tensor_free(sy);
        weft_tensor_free(y);
        weft_tensor_free(x);
    }
}

static void test_packed_errors(void) {
    weft_tensor *x = weft_tensor_zeros(WEFT_DIMS(2, 5, 12), WEFT_F64), *x2 = weft_tensor_zeros(WEFT_DIMS(5, 12), WEFT_F64);
    weft_tensor *x13 = weft_tensor_zeros(WEFT_DIMS(2, 5, 13), WEFT_F64), *xi = weft_tensor_zeros(WEFT_DIMS(2, 5, 12), WEFT_I32);
    EXPECT_NULL(weft_causal_attention_qkv(x2, 2, 1), "causal_attention_qkv: qkv must be (B,T,3C)");
    EXPECT_NULL(weft_causal_attention_qkv(x13, 1, 1), "causal_attention_qkv: qkv must be (B,T,3C)");
    EXPECT_NULL(weft_causal_attention_qkv(xi, 2, 1), "causal_attention_qkv: qkv has dtype i32");
    EXPECT_NULL(weft_causal_attention_qkv(x, 3, 1), "causal_attention_qkv: 3 heads do not divide C = 4");
    EXPECT_NULL(weft_causal_attention_qkv(x, 0, 1), "0 heads");
    EXPECT_NULL(weft_causal_attention_qkv(x, 8, 1), "8 heads");
    EXPECT_NULL(weft_causal_attention_qkv(NULL, 2, 1), "causal_attention_qkv");
    // the backward op checks its own inputs: an o of qkv's shape, an lse of the wrong dtype
    weft_tensor *o = weft_tensor_zeros(WEFT_DIMS(2, 5, 4), WEFT_F64), *lse = weft_tensor_zeros(WEFT_DIMS(2, 2, 5), WEFT_F64);
    weft_tensor *lsef = weft_tensor_zeros(WEFT_DIMS(2, 2, 5), WEFT_F32);
    const weft_op_def *bw = weft_op_find("causal_attention_qkv_backward");
    weft_attrs at = {.i = {2}, .f = {1}};
    weft_tensor *g[WEFT_MAX_OP_OUT];
    weft_clear_error();
    CHECK(weft_op_apply(bw, 4, (weft_tensor *[]){x, x, lse, o}, &at, g) != WEFT_OK && wt_error_has("o must be f64 (2,5,4)"));
    CHECK(weft_op_apply(bw, 4, (weft_tensor *[]){x, o, lsef, o}, &at, g) != WEFT_OK && wt_error_has("lse must be f64"));
    CHECK(weft_op_apply(bw, 4, (weft_tensor *[]){x, o, lse, o}, &at, g) == WEFT_OK);
    if (g[0]) CHECK(weft_tensor_ndim(g[0]) == 3 && weft_tensor_size(g[0], 2) == 12);
    weft_tensor *ts[] = {x, x2, x13, xi, o, lse, lsef, g[0]};
    for (int i = 0; i < 8; i++) weft_tensor_free(ts[i]);
}

int main(void) {
    RUN(test_shapes);
    RUN(test_t1);
    RUN(test_noncontiguous);
    RUN(test_f32);
    RUN(test_stability);
    RUN(test_gradcheck);
    RUN(test_heads_last);
    RUN(test_lse_no_grad);
    RUN(test_errors);
    RUN(test_no_second_order);
    RUN(test_packed);
    RUN(test_packed_errors);
    return wt_summary();
}
