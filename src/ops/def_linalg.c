// Op entries of the linear-algebra family. Kernel: cpu/matmul.c.
//
// matmul (op entry): a (...,M,K) @ b (...,K,N) -> (...,M,N), both at least
// 2-D, batch dims broadcast. The public weft_matmul adds torch.matmul's 1-D
// promotion on top with unsqueeze/squeeze views, so the op (and its backward)
// only ever sees matrices.
//
// matmul attrs: i[0] = trans_a, i[1] = trans_b (0 default). A set flag means
// "use the transpose of the operand's last two dims": the graph pass
// transpose_fold rewrites matmul(transpose(x), y) into matmul(x, y, trans_a=1)
// so a transposed copy (contiguous(transpose(w))) never materialises. The
// kernel reads the flagged operand through BLAS's Trans flag.
#include <limits.h>
#include <string.h>

#include "elementwise.h"
#include "linalg.h"

static bool mat_view_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs, weft_mat_view *v) {
    int64_t need_rows = cols > 1 ? cols : 1, need_cols = rows > 1 ? rows : 1;
    if ((cols <= 1 || cs == 1) && (rows <= 1 || rs >= need_rows)) {
        v->trans = false;
        v->ld = rows <= 1 ? need_rows : rs;
        return v->ld <= INT_MAX;
    }
    if ((rows <= 1 || rs == 1) && (cols <= 1 || cs >= need_cols)) {
        v->trans = true;
        v->ld = cols <= 1 ? need_cols : cs;
        return v->ld <= INT_MAX;
    }
    return false;
}

weft_tensor *weft_matmul_operand(weft_tensor *t, bool tr, weft_mat_view *v,
                                 weft_status (*copy)(weft_tensor *dst, const weft_tensor *src)) {
    int nd = t->ndim, r = tr ? nd - 1 : nd - 2, c = tr ? nd - 2 : nd - 1;
    if (mat_view_of(t->sizes[r], t->sizes[c], t->strides[r], t->strides[c], v)) return weft_tensor_ref(t);
    weft_tensor *cp = weft_tensor_new(nd, t->sizes, (weft_dtype)t->dtype, t->device);
    if (!cp) return NULL;
    if (copy(cp, t) != WEFT_OK) {
        weft_tensor_free(cp);
        return NULL;
    }
    mat_view_of(cp->sizes[r], cp->sizes[c], cp->strides[r], cp->strides[c], v);
    return cp;
}

weft_status weft_cpu_matmul(const weft_op_args *a);

static weft_status infer_matmul(const weft_op_args *a, weft_out_meta *o) {
    const weft_tensor *x = a->in[0], *y = a->in[1];
    weft_status st = weft_check_same_dtype("matmul", 2, a->in);
    if (st) return st;
    if ((st = weft_check_dtype("matmul", x, WEFT_DT_FLOAT | WEFT_DT(WEFT_BF16) | WEFT_DT(WEFT_F16), "the first operand")))
        return st;
    const weft_attrs *at = a->attrs;
    if (at && (at->i[0] < 0 || at->i[0] > 1 || at->i[1] < 0 || at->i[1] > 1))
        return weft_error(WEFT_ERR_ARG, "matmul: trans_a / trans_b must be 0 or 1 (got %lld, %lld)",
                          (long long)at->i[0], (long long)at->i[1]);
    bool ta = at && at->i[0], tb = at && at->i[1];
    char sa[96], sb[96];
    if (x->ndim < 2 || y->ndim < 2)
        return weft_error(WEFT_ERR_SHAPE, "matmul: the op entry needs operands of at least 2 dims, got %s and %s",
                          weft_tensor_shape_str(x, sa, sizeof sa), weft_tensor_shape_str(y, sb, sizeof sb));
    // (M, K) of a and (K, N) of b after the flags
    int64_t M = x->sizes[x->ndim - (ta ? 1 : 2)], Ka = x->sizes[x->ndim - (ta ? 2 : 1)];
    int64_t Kb = y->sizes[y->ndim - (tb ? 1 : 2)], N = y->sizes[y->ndim - (tb ? 2 : 1)];
    if (Ka != Kb)
        return weft_error(WEFT_ERR_SHAPE, "matmul: shapes %s and %s (trans_a %d, trans_b %d) do not match (%lld != %lld)",
                          weft_tensor_shape_str(x, sa, sizeof sa), weft_tensor_shape_str(y, sb, sizeof sb), ta, tb,
                          (long long)Ka, (long long)Kb);
    // batch dims: NumPy broadcasting of everything but the last two dims
    int nbx = x->ndim - 2, nby = y->ndim - 2, nb = nbx > nby ? nbx : nby;
    for (int d = 0; d < nb; d++) {
        int dx = d - (nb - nbx), dy = d - (nb - nby);
        int64_t sx = dx >= 0 ? x->sizes[dx] : 1, sy = dy >= 0 ? y->sizes[dy] : 1;
        if (sx != sy && sx != 1 && sy != 1)
            return weft_error(WEFT_ERR_SHAPE, "matmul: batch dims of %s and %s do not broadcast",
                              weft_tensor_shape_str(x, sa, sizeof sa), weft_tensor_shape_str(y, sb, sizeof sb));
        o->sizes[d] = sx == 1 ? sy : sx;
    }
    o->sizes[nb] = M;
    o->sizes[nb + 1] = N;
    o->ndim = nb + 2;
    o->dtype = (weft_dtype)x->dtype;
    o->offset = 0;
    return WEFT_OK;
}


// With A' = op_a(A), B' = op_b(B) (op: transpose of the last two dims when
// the flag is set): grad_A' = g @ B'^T, grad_B' = A'^T @ g, and grad_A =
// op_a(grad_A') (transposing back), then summed over broadcast batch dims.
// Transposes are views: BLAS gets the flag.
static weft_tensor *flagged(weft_tensor *t, bool tr) { return tr ? weft_transpose(t, -1, -2) : weft_tensor_ref(t); }

// Takes g; transposes it back when the operand was flagged.
static weft_tensor *unflag(weft_tensor *g, bool tr) {
    if (!g || !tr) return g;
    weft_tensor *r = weft_transpose(g, -1, -2);
    weft_tensor_free(g);
    return r;
}

static weft_status bw_matmul(const weft_bw_args *b) {
    bool ta = b->attrs && b->attrs->i[0], tb = b->attrs && b->attrs->i[1];
    weft_tensor *A = flagged(b->in[0], ta), *B = flagged(b->in[1], tb), *G = b->gout[0];
    if (!A || !B) {
        weft_tensor_free(A);
        weft_tensor_free(B);
        return weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
    }
    if (b->needs[0]) {
        weft_tensor *bt = weft_transpose(B, -1, -2);
        b->gin[0] = weft_bw_unbroadcast(b, 0, unflag(weft_matmul(G, bt), ta));
        weft_tensor_free(bt);
    }
    if (b->needs[1]) {
        if (b->in_meta[1].ndim == 2 && A->ndim >= 2) {
            // b (K,N) shared by every batch: fold the batch into the rows, one
            // (K, B*M) @ (B*M, N) product instead of B products summed afterwards.
            int64_t K = A->sizes[A->ndim - 1], N = G->sizes[G->ndim - 1];
            weft_tensor *af = weft_reshape(A, WEFT_DIMS(-1, K)), *gf = weft_reshape(G, WEFT_DIMS(-1, N));
            weft_tensor *gb = NULL;
            if (B->strides[0] == 1 && B->strides[1] == K && K > 1 && N > 1) {
                // b is a transposed view (a linear layer's W^T): give its gradient
                // the same layout, (g^T a)^T, so W's gradient comes out contiguous
                // and is not copied again on its way to W.grad (as PyTorch's mm backward).
                weft_tensor *gt = weft_transpose(gf, 0, 1), *t = weft_matmul(gt, af); // (N,K)
                gb = t ? weft_transpose(t, 0, 1) : NULL;
                weft_tensor_free(gt);
                weft_tensor_free(t);
            } else {
                weft_tensor *at = weft_transpose(af, 0, 1);
                gb = weft_matmul(at, gf);
                weft_tensor_free(at);
            }
            b->gin[1] = unflag(gb, tb);
            weft_tensor_free(af);
            weft_tensor_free(gf);
        } else {
            weft_tensor *at = weft_transpose(A, -1, -2);
            b->gin[1] = weft_bw_unbroadcast(b, 1, unflag(weft_matmul(at, G), tb));
            weft_tensor_free(at);
        }
    }
    weft_tensor_free(A);
    weft_tensor_free(B);
    for (int i = 0; i < 2; i++)
        if (b->needs[i] && !b->gin[i]) return weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
    return WEFT_OK;
}

// bf16 / f16 operands (mixed precision): products of the operands' values
// summed in f32, the result rounded once to the operands' dtype.
weft_op_def weft_op_matmul = {.name = "matmul", .n_in = 2, .n_out = 1, .flags = WEFT_OPF_AUTOCAST,
                              .save = WEFT_SAVE_IN(0) | WEFT_SAVE_IN(1), .infer = infer_matmul, .backward = bw_matmul,
                              .kernel = {[WEFT_CPU] = {weft_cpu_matmul, WEFT_DT_FLOAT | WEFT_DT(WEFT_BF16) | WEFT_DT(WEFT_F16)}}};

weft_tensor *weft_matmul(weft_tensor *a, weft_tensor *b) {
    if (!a || !b) return weft_error_null_input("matmul");
    if (a->ndim == 0 || b->ndim == 0)
        return weft_error_null(WEFT_ERR_SHAPE, "matmul: both operands need at least 1 dim (got %d-d and %d-d)",
                               a->ndim, b->ndim);
    bool a1 = a->ndim == 1, b1 = b->ndim == 1;
    // 1-D operands: a (K) -> (1,K), b (K) -> (K,1); the added dim is removed afterwards.
    weft_tensor *a2 = a1 ? weft_unsqueeze(a, 0) : weft_tensor_ref(a);
    weft_tensor *b2 = b1 ? weft_unsqueeze(b, 1) : weft_tensor_ref(b);
    weft_tensor *in[2] = {a2, b2};
    weft_tensor *r = (a2 && b2) ? weft_op_apply1(&weft_op_matmul, 2, in, NULL) : NULL;
    weft_tensor_free(a2);
    weft_tensor_free(b2);
    if (r && b1) {
        weft_tensor *s = weft_squeeze(r, -1);
        weft_tensor_free(r);
        r = s;
    }
    if (r && a1) {
        weft_tensor *s = weft_squeeze(r, b1 ? -1 : -2);
        weft_tensor_free(r);
        r = s;
    }
    return r;
}

// ---- linear: y = act(x W^T + b), PyTorch's F.linear with the bias (and GELU) in the GEMM's epilogue ----
// Inputs x (..., K) with at least 2 dims, W (N, K), optionally b (N); one dtype
// (f32, f64, or bf16 / f16: sums, bias and GELU in f32, each output rounded once).
// Autocast runs them in its dtype (the outputs stay in it).
// linear: one output y (..., N). linear_gelu: y = gelu(h) and h = x W^T + b,
// kept for the backward; attr i[0] picks the GELU: 0 the exact (erf) form, 1
// the tanh approximation (gelu_tanh). Kernels: cpu/matmul.c, cuda/linalg.c.
static weft_status infer_linear(const weft_op_args *a, weft_out_meta *o) {
    const char *nm = a->op->name;
    if (a->n_in != 2 && a->n_in != 3)
        return weft_error(WEFT_ERR_ARG, "%s: takes x, weight and an optional bias (got %d inputs)", nm, a->n_in);
    if (a->op->n_out == 2 && (a->attrs->i[0] < 0 || a->attrs->i[0] > 1))
        return weft_error(WEFT_ERR_ARG, "%s: approximate is 0 (exact) or 1 (tanh), got %lld", nm,
                          (long long)a->attrs->i[0]);
    weft_status st = weft_check_same_dtype(nm, a->n_in, a->in);
    if (st) return st;
    if ((st = weft_check_dtype(nm, a->in[0], WEFT_DT_FLOAT | WEFT_DT_HALF, "x"))) return st;
    const weft_tensor *x = a->in[0], *w = a->in[1], *b = a->n_in == 3 ? a->in[2] : NULL;
    char sx[96], sw[96];
    if (x->ndim < 2 || w->ndim != 2 || x->sizes[x->ndim - 1] != w->sizes[1])
        return weft_error(WEFT_ERR_SHAPE, "%s: x %s and weight %s do not match (x (..., K) with 2+ dims, weight (N, K))",
                          nm, weft_tensor_shape_str(x, sx, sizeof sx), weft_tensor_shape_str(w, sw, sizeof sw));
    if (b && (b->ndim != 1 || b->sizes[0] != w->sizes[0]))
        return weft_error(WEFT_ERR_SHAPE, "%s: bias %s does not match weight %s (wants (%lld))", nm,
                          weft_tensor_shape_str(b, sx, sizeof sx), weft_tensor_shape_str(w, sw, sizeof sw),
                          (long long)w->sizes[0]);
    int64_t sizes[WEFT_MAX_DIMS];
    memcpy(sizes, x->sizes, sizeof(int64_t) * (size_t)x->ndim);
    sizes[x->ndim - 1] = w->sizes[0];
    for (int j = 0; j < a->op->n_out; j++) weft_meta_set(&o[j], x->ndim, sizes, (weft_dtype)x->dtype);
    return WEFT_OK;
}

// The weight and bias gradients of a product y = x W^T + b (linear, linear_gelu, gelu_linear), and W's of
// matmul_dgelu: p^T x over all rows, p (..., N) and x (..., K) read as (R, N) and (R, K), an (N, K) result
// contiguous like W; and p summed over all dims but its last.
static weft_tensor *rows_tprod(weft_tensor *p, weft_tensor *x) {
    int64_t N = p->sizes[p->ndim - 1], K = x->sizes[x->ndim - 1];
    weft_tensor *p2 = weft_reshape(p, WEFT_DIMS(-1, N)), *x2 = weft_reshape(x, WEFT_DIMS(-1, K));
    weft_tensor *pt = p2 ? weft_transpose(p2, 0, 1) : NULL;
    weft_tensor *r = pt && x2 ? weft_matmul(pt, x2) : NULL;
    weft_tensor_free(p2);
    weft_tensor_free(x2);
    weft_tensor_free(pt);
    return r;
}
static weft_tensor *rows_sum(weft_tensor *p) {
    int axes[WEFT_MAX_DIMS];
    for (int d = 0; d < p->ndim - 1; d++) axes[d] = d;
    return weft_sum(p, p->ndim - 1, axes, false);
}

// With p = h's gradient (gelu: g gelu'(h) in one pass, exact or tanh as the forward, plus any gradient of
// h itself): grad_x = p W, grad_W = p^T x over all rows (one (N, rows) @
// (rows, K) product, contiguous like W), grad_b = p summed over rows. All in
// the inputs' dtype (bf16 / f16: f32 math inside each op, each result rounded once).
static weft_status bw_linear(const weft_bw_args *b) {
    weft_tensor *x = b->in[0], *w = b->in[1], *g = b->gout[0], *p;
    if (b->n_out == 2) {
        weft_tensor *gh = g ? weft_gelu_backward_as(g, b->out[1], b->attrs && b->attrs->i[0]) : NULL;
        weft_tensor *g1 = b->gout[1];
        p = !g1 ? gh : !gh ? weft_tensor_ref(g1) : weft_add(gh, g1);
        if (gh && g1) weft_tensor_free(gh);
    } else {
        p = weft_tensor_ref(g);
    }
    if (!p) return weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
    if (b->needs[0]) b->gin[0] = weft_matmul(p, w);
    if (b->needs[1]) b->gin[1] = rows_tprod(p, x);
    if (b->n_in == 3 && b->needs[2]) b->gin[2] = rows_sum(p);
    weft_tensor_free(p);
    for (int i = 0; i < b->n_in; i++)
        if (b->needs[i] && !b->gin[i]) return weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
    return WEFT_OK;
}

weft_op_def weft_op_linear = {.name = "linear", .n_in = -1, .n_out = 1, .flags = WEFT_OPF_AUTOCAST,
                              .save = WEFT_SAVE_IN(0) | WEFT_SAVE_IN(1), .infer = infer_linear,
                              .backward = bw_linear,
                              .kernel = {[WEFT_CPU] = {weft_cpu_linear, WEFT_DT_FLOAT | WEFT_DT_HALF}}};
weft_op_def weft_op_linear_gelu = {.name = "linear_gelu", .n_in = -1, .n_out = 2, .flags = WEFT_OPF_AUTOCAST,
                                   .save = WEFT_SAVE_IN(0) | WEFT_SAVE_IN(1) | WEFT_SAVE_OUT(1),
                                   .infer = infer_linear, .backward = bw_linear,
                                   .kernel = {[WEFT_CPU] = {weft_cpu_linear, WEFT_DT_FLOAT | WEFT_DT_HALF}}};

static weft_tensor *linear_apply(const weft_op_def *op, weft_tensor *x, weft_tensor *w, weft_tensor *b, int approx) {
    if (!x || !w) return weft_error_null_input(op->name);
    if (x->ndim == 0) return weft_error_null(WEFT_ERR_SHAPE, "%s: x needs at least 1 dim", op->name);
    weft_tensor *x2 = x->ndim == 1 ? weft_unsqueeze(x, 0) : weft_tensor_ref(x); // (K) -> (1,K), squeezed after
    if (!x2) return NULL;
    weft_tensor *in[3] = {x2, w, b}, *out[WEFT_MAX_OP_OUT] = {0};
    weft_attrs at = {.i = {approx}};
    weft_status st = weft_op_apply(op, b ? 3 : 2, in, &at, out);
    weft_tensor_free(x2);
    if (st) return NULL;
    for (int j = 1; j < op->n_out; j++) weft_tensor_free(out[j]); // h lives on in the autograd record
    if (x->ndim == 1) {
        weft_tensor *s = weft_squeeze(out[0], 0);
        weft_tensor_free(out[0]);
        return s;
    }
    return out[0];
}
weft_tensor *weft_linear(weft_tensor *x, weft_tensor *w, weft_tensor *b) {
    return linear_apply(&weft_op_linear, x, w, b, 0);
}
weft_tensor *weft_linear_gelu(weft_tensor *x, weft_tensor *w, weft_tensor *b) {
    return linear_apply(&weft_op_linear_gelu, x, w, b, 0);
}
weft_tensor *weft_linear_gelu_tanh(weft_tensor *x, weft_tensor *w, weft_tensor *b) {
    return linear_apply(&weft_op_linear_gelu, x, w, b, 1);
}

// ---- the MLP pair with GELU's backward inside a product ----
// gelu_linear(h, a, w[, b]), attr i[0] = approximate (0 exact, 1 tanh): y = a W^T + b where a = gelu(h),
// handed in as computed (linear_gelu's two outputs are a and h). The forward is linear's product on a.
// The backward gives h its gradient (g W) ∘ gelu'(h) in one matmul_dgelu, W and b theirs as linear's, and
// a none: a is a function of h, whose gradient carries a's (so a must be gelu(h), in the form the attr names).
// matmul_dgelu(p, w, h), attr i[0] = approximate: (p @ W) ∘ gelu'(h) with p (..., N), W (N, K) and h (..., K)
// (the same leading dims): on CUDA, the tanh form is one cuBLASLt call with the DGELU epilogue (no (..., K)
// gradient is written and read again); elsewhere the product, then gelu_backward's pass in place.
// Kernels: cpu/matmul.c, cuda/linalg.c.
static weft_status check_approximate(const weft_op_args *a) {
    if (a->attrs->i[0] < 0 || a->attrs->i[0] > 1)
        return weft_error(WEFT_ERR_ARG, "%s: approximate is 0 (exact) or 1 (tanh), got %lld", a->op->name,
                          (long long)a->attrs->i[0]);
    return WEFT_OK;
}

static weft_status infer_gelu_linear(const weft_op_args *a, weft_out_meta *o) {
    const char *nm = a->op->name;
    if (a->n_in != 3 && a->n_in != 4)
        return weft_error(WEFT_ERR_ARG, "%s: takes h, a = gelu(h), weight and an optional bias (got %d inputs)", nm,
                          a->n_in);
    weft_status st = check_approximate(a);
    if (!st) st = weft_check_same_dtype(nm, a->n_in, a->in);
    if (!st) st = weft_check_dtype(nm, a->in[0], WEFT_DT_FLOAT | WEFT_DT_HALF, "h");
    if (st) return st;
    const weft_tensor *h = a->in[0], *x = a->in[1];
    char s1[96], s2[96];
    if (!weft_shape_equal(h->ndim, h->sizes, x->ndim, x->sizes))
        return weft_error(WEFT_ERR_SHAPE, "%s: h %s and a %s differ (a is gelu(h))", nm,
                          weft_tensor_shape_str(h, s1, sizeof s1), weft_tensor_shape_str(x, s2, sizeof s2));
    if (x->ndim < 2 || a->in[2]->ndim != 2 || x->sizes[x->ndim - 1] != a->in[2]->sizes[1])
        return weft_error(WEFT_ERR_SHAPE, "%s: a %s and weight %s do not match (a (..., K) with 2+ dims, weight (N, K))",
                          nm, weft_tensor_shape_str(x, s1, sizeof s1), weft_tensor_shape_str(a->in[2], s2, sizeof s2));
    weft_op_args l = *a; // the rest of the product's checks, and its shape: linear's, on (a, w, b)
    l.n_in = a->n_in - 1;
    l.in = a->in + 1;
    return infer_linear(&l, o);
}

static weft_status bw_gelu_linear(const weft_bw_args *b) {
    weft_tensor *h = b->in[0], *x = b->in[1], *w = b->in[2], *p = b->gout[0];
    if (b->needs[0]) b->gin[0] = weft_matmul_dgelu(p, w, h, b->attrs && b->attrs->i[0]);
    if (b->needs[2]) b->gin[2] = rows_tprod(p, x); // p^T a
    if (b->n_in == 4 && b->needs[3]) b->gin[3] = rows_sum(p);
    for (int i = 0; i < b->n_in; i++)
        if (i != 1 && b->needs[i] && !b->gin[i]) return weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
    return WEFT_OK;
}

static weft_status cpu_gelu_linear(const weft_op_args *a) {
    weft_op_args l = *a; // linear's kernel on (a, w, b); one output, so no activation
    l.n_in = a->n_in - 1;
    l.in = a->in + 1;
    return weft_cpu_linear(&l);
}

weft_op_def weft_op_gelu_linear = {.name = "gelu_linear", .n_in = -1, .n_out = 1, .flags = WEFT_OPF_AUTOCAST,
                                   .save = WEFT_SAVE_IN(0) | WEFT_SAVE_IN(1) | WEFT_SAVE_IN(2),
                                   .infer = infer_gelu_linear, .backward = bw_gelu_linear,
                                   .kernel = {[WEFT_CPU] = {cpu_gelu_linear, WEFT_DT_FLOAT | WEFT_DT_HALF}}};

static weft_status infer_matmul_dgelu(const weft_op_args *a, weft_out_meta *o) {
    const char *nm = a->op->name;
    weft_status st = check_approximate(a);
    if (!st) st = weft_check_same_dtype(nm, 3, a->in);
    if (!st) st = weft_check_dtype(nm, a->in[0], WEFT_DT_FLOAT | WEFT_DT_HALF, "p");
    if (st) return st;
    const weft_tensor *p = a->in[0], *w = a->in[1], *h = a->in[2];
    char s1[96], s2[96], s3[96];
    bool ok = p->ndim >= 2 && w->ndim == 2 && h->ndim == p->ndim && p->sizes[p->ndim - 1] == w->sizes[0] &&
              h->sizes[h->ndim - 1] == w->sizes[1];
    for (int d = 0; ok && d < p->ndim - 1; d++) ok = p->sizes[d] == h->sizes[d];
    if (!ok)
        return weft_error(WEFT_ERR_SHAPE, "%s: p %s, weight %s and h %s do not match (p (..., N), weight (N, K), h (..., K))",
                          nm, weft_tensor_shape_str(p, s1, sizeof s1), weft_tensor_shape_str(w, s2, sizeof s2),
                          weft_tensor_shape_str(h, s3, sizeof s3));
    weft_meta_set(o, h->ndim, h->sizes, (weft_dtype)h->dtype);
    return WEFT_OK;
}

// q = m ∘ f'(h), m = p W: gm = g ∘ f'(h) gives p (gm W^T) and W (p^T gm); h gets g ∘ m ∘ f''(h).
static weft_status bw_matmul_dgelu(const weft_bw_args *b) {
    weft_tensor *p = b->in[0], *w = b->in[1], *h = b->in[2], *g = b->gout[0];
    bool tanh_form = b->attrs && b->attrs->i[0];
    weft_tensor *gm = weft_gelu_backward_as(g, h, tanh_form);
    if (!gm) return weft_last_status();
    if (b->needs[0]) {
        weft_tensor *wt = weft_transpose(w, 0, 1);
        b->gin[0] = wt ? weft_matmul(gm, wt) : NULL;
        weft_tensor_free(wt);
    }
    if (b->needs[1]) b->gin[1] = rows_tprod(p, gm); // p^T gm
    if (b->needs[2]) {
        weft_tensor *m = weft_matmul(p, w), *d = weft_gelu_second(h, tanh_form);
        weft_tensor *gmd = m ? weft_mul(g, m) : NULL;
        b->gin[2] = gmd && d ? weft_mul(gmd, d) : NULL;
        weft_tensor_free(m);
        weft_tensor_free(d);
        weft_tensor_free(gmd);
    }
    weft_tensor_free(gm);
    for (int i = 0; i < 3; i++)
        if (b->needs[i] && !b->gin[i]) return weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
    return WEFT_OK;
}

weft_op_def weft_op_matmul_dgelu = {.name = "matmul_dgelu", .n_in = 3, .n_out = 1,
                                    .save = WEFT_SAVE_IN(0) | WEFT_SAVE_IN(1) | WEFT_SAVE_IN(2),
                                    .infer = infer_matmul_dgelu, .backward = bw_matmul_dgelu,
                                    .kernel = {[WEFT_CPU] = {weft_cpu_matmul_dgelu, WEFT_DT_FLOAT | WEFT_DT_HALF}}};

weft_tensor *weft_matmul_dgelu(weft_tensor *p, weft_tensor *w, weft_tensor *h, bool tanh_form) {
    weft_tensor *in[3] = {p, w, h};
    weft_attrs at = {.i = {tanh_form}};
    return weft_op_apply1(&weft_op_matmul_dgelu, 3, in, &at);
}

weft_tensor *weft_linear_gelu_pre(weft_tensor *x, weft_tensor *w, weft_tensor *b, bool tanh_form, weft_tensor **h) {
    if (!h) return weft_error_null(WEFT_ERR_ARG, "linear_gelu: no place for h (NULL)");
    *h = NULL;
    if (!x || !w) return weft_error_null_input(weft_op_linear_gelu.name);
    if (x->ndim < 2) return weft_error_null(WEFT_ERR_SHAPE, "linear_gelu: x needs at least 2 dims here");
    weft_tensor *in[3] = {x, w, b}, *out[WEFT_MAX_OP_OUT] = {0};
    weft_attrs at = {.i = {tanh_form}};
    if (weft_op_apply(&weft_op_linear_gelu, b ? 3 : 2, in, &at, out)) return NULL;
    *h = out[1];
    return out[0];
}

weft_tensor *weft_gelu_linear(weft_tensor *h, weft_tensor *a, weft_tensor *w, weft_tensor *b, bool tanh_form) {
    if (!h || !a || !w) return weft_error_null_input(weft_op_gelu_linear.name);
    weft_tensor *in[4] = {h, a, w, b};
    weft_attrs at = {.i = {tanh_form}};
    return weft_op_apply1(&weft_op_gelu_linear, b ? 4 : 3, in, &at);
}
