// Tensor parallelism (Megatron-LM), part 1: the conjugate operators and the
// vocab-parallel cross-entropy, each an autograd function over the TP group's
// communicator (weft_function_record); and how parameters are split, so a
// sharded layer can be made from the whole one and gathered back into it.
//
//   f  weft_tp_copy     identity            backward: all-reduce SUM (= g)
//   g  weft_tp_reduce   all-reduce SUM      backward: identity       (= f)
//      weft_tp_gather   all-gather on dim   backward: own slice      (= scatter)
//      weft_tp_scatter  own slice of dim    backward: all-gather     (= gather)
// and, for sequence parallelism (activations outside the split layers split
// along the sequence instead of replicated):
//      weft_tp_seq_gather          all-gather on dim   backward: reduce-scatter
//      weft_tp_seq_reduce_scatter  reduce-scatter      backward: all-gather
//
// Each backward is the conjugate operator itself, called on the gradient, so
// under create_graph the backward is recorded too. Every rank of the group
// runs the same graph, so the collectives of a backward pass are issued in
// the same order everywhere. The layers built from these are in tp_layers.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weft/autograd.h>
#include <weft/ops.h>
#include <weft/parallel.h>

#include "../core/core_impl.h"
#include "tp_impl.h"

// ---- checks ----
static weft_status check_comm(const char *op, weft_comm *c, const weft_tensor *x) {
    if (!c) return weft_error(WEFT_ERR_ARG, "%s: no tensor-parallel communicator", op);
    if (!x) {
        weft_error_null_input(op);
        return weft_last_status();
    }
    return WEFT_OK;
}

static weft_status norm_dim(const char *op, const weft_tensor *x, int dim, int *d) {
    int nd = weft_tensor_ndim(x);
    *d = dim < 0 ? dim + nd : dim;
    if (*d < 0 || *d >= nd) return weft_error(WEFT_ERR_ARG, "%s: dim %d out of range for %d dims", op, dim, nd);
    return WEFT_OK;
}

// ---- the four operators ----
typedef struct tp_ctx {
    weft_comm *c; // borrowed: outlives the graph
    int dim;
} tp_ctx;

static tp_ctx *ctx_new(weft_comm *c, int dim) {
    tp_ctx *k = malloc(sizeof *k);
    if (k) *k = (tp_ctx){c, dim};
    else weft_error(WEFT_ERR_OOM, "tensor parallel: out of memory");
    return k;
}

// Records out as fn(in) with the given backward; frees out on failure.
static weft_tensor *record(const char *name, weft_tensor *in, weft_tensor *out, weft_function_backward_fn bw,
                           weft_comm *c, int dim) {
    if (!out) return NULL;
    if (!weft_tensor_requires_grad(in) || !weft_grad_is_enabled()) return out;
    tp_ctx *k = ctx_new(c, dim);
    if (!k || weft_function_record(name, 1, &in, 1, &out, bw, k, free) != WEFT_OK) {
        weft_tensor_free(out);
        return NULL;
    }
    return out;
}

static weft_status copy_bw(void *ctx, int n_out, weft_tensor *const *gout, int n_in, const bool *needs,
                           weft_tensor **gin) {
    (void)n_out, (void)n_in;
    if (!needs[0] || !gout[0]) return WEFT_OK;
    gin[0] = weft_tp_reduce(((tp_ctx *)ctx)->c, gout[0]);
    return gin[0] ? WEFT_OK : weft_last_status();
}

static weft_status reduce_bw(void *ctx, int n_out, weft_tensor *const *gout, int n_in, const bool *needs,
                             weft_tensor **gin) {
    (void)n_out, (void)n_in;
    if (!needs[0] || !gout[0]) return WEFT_OK;
    gin[0] = weft_tp_copy(((tp_ctx *)ctx)->c, gout[0]);
    return gin[0] ? WEFT_OK : weft_last_status();
}

static weft_status gather_bw(void *ctx, int n_out, weft_tensor *const *gout, int n_in, const bool *needs,
                             weft_tensor **gin) {
    (void)n_out, (void)n_in;
    if (!needs[0] || !gout[0]) return WEFT_OK;
    const tp_ctx *k = ctx;
    gin[0] = weft_tp_scatter(k->c, gout[0], k->dim);
    return gin[0] ? WEFT_OK : weft_last_status();
}

static weft_status scatter_bw(void *ctx, int n_out, weft_tensor *const *gout, int n_in, const bool *needs,
                              weft_tensor **gin) {
    (void)n_out, (void)n_in;
    if (!needs[0] || !gout[0]) return WEFT_OK;
    const tp_ctx *k = ctx;
    gin[0] = weft_tp_gather(k->c, gout[0], k->dim);
    return gin[0] ? WEFT_OK : weft_last_status();
}

weft_tensor *weft_tp_copy(weft_comm *c, weft_tensor *x) {
    if (check_comm("tp_copy", c, x)) return NULL;
    return record("tp_copy", x, weft_tensor_detach(x), copy_bw, c, 0); // same storage, no history
}

weft_tensor *weft_tp_reduce(weft_comm *c, weft_tensor *x) {
    if (check_comm("tp_reduce", c, x)) return NULL;
    weft_tensor *y = NULL;
    WEFT_NO_GRAD {
        y = weft_tensor_clone(x); // fresh contiguous copy: the all-reduce works in place
        if (y && weft_dist_all_reduce(c, y, WEFT_REDUCE_SUM) != WEFT_OK) weft_tensor_free(y), y = NULL;
    }
    return record("tp_reduce", x, y, reduce_bw, c, 0);
}

// All-gather along dim d: the ranks' x concatenated in rank order (fresh, no history).
static weft_tensor *all_gather_dim(weft_comm *c, weft_tensor *x, int d) {
    int n = weft_comm_size(c), nd = weft_tensor_ndim(x);
    int64_t bsz[WEFT_MAX_DIMS + 1], osz[WEFT_MAX_DIMS];
    if (nd + 1 > WEFT_MAX_DIMS) return weft_error_null(WEFT_ERR_SHAPE, "tp_gather: too many dims (%d)", nd);
    int perm[WEFT_MAX_DIMS + 1], k = 0;
    bsz[0] = n;
    for (int i = 0; i < nd; i++) bsz[i + 1] = osz[i] = weft_tensor_size(x, i);
    osz[d] *= n;
    // buf (n, ...x) holds the ranks' tensors one after another; moving the
    // rank axis next to dim d and merging the two gives the concatenation.
    for (int i = 0; i < d; i++) perm[k++] = i + 1;
    perm[k++] = 0;
    for (int i = d; i < nd; i++) perm[k++] = i + 1;
    weft_tensor *y = NULL;
    WEFT_NO_GRAD {
        weft_tensor *xd = weft_tensor_detach(x), *xc = weft_tensor_contiguous(xd);
        weft_tensor *buf = xc ? weft_tensor_empty_on(nd + 1, bsz, weft_tensor_dtype(x), weft_tensor_device(x)) : NULL;
        if (buf && weft_dist_all_gather(c, xc, buf) == WEFT_OK) {
            weft_tensor *p = weft_permute(buf, perm);
            y = p ? weft_reshape(p, nd, osz) : NULL; // copies unless d == 0
            weft_tensor_free(p);
        }
        weft_tensor_free(buf);
        weft_tensor_free(xc);
        weft_tensor_free(xd);
    }
    return y;
}

// Reduce-scatter along dim d: the ranks' x summed, this rank's slice of dim d kept.
static weft_tensor *reduce_scatter_dim(weft_comm *c, weft_tensor *x, int d) {
    int n = weft_comm_size(c), nd = weft_tensor_ndim(x);
    int64_t S = weft_tensor_size(x, d);
    if (S % n)
        return weft_error_null(WEFT_ERR_SHAPE, "tp_reduce_scatter: dim %d of size %lld is not divisible by the "
                               "tensor-parallel size %d", d, (long long)S, n);
    // dim d first and contiguous, so rank r's chunk (weft_dist_chunk) is rows [r S/n, (r+1) S/n) of it
    int perm[WEFT_MAX_DIMS], inv[WEFT_MAX_DIMS], k = 0;
    int64_t osz[WEFT_MAX_DIMS];
    perm[k++] = d;
    for (int i = 0; i < nd; i++)
        if (i != d) perm[k++] = i;
    for (int i = 0; i < nd; i++) {
        inv[perm[i]] = i;
        osz[i] = weft_tensor_size(x, perm[i]);
    }
    osz[0] = S / n;
    weft_tensor *y = NULL;
    WEFT_NO_GRAD {
        weft_tensor *xd = weft_tensor_detach(x), *xp = weft_permute(xd, perm);
        weft_tensor *xc = xp ? weft_tensor_contiguous(xp) : NULL;
        weft_tensor *out = xc ? weft_tensor_empty_on(nd, osz, weft_tensor_dtype(x), weft_tensor_device(x)) : NULL;
        if (out && weft_dist_reduce_scatter(c, xc, out, WEFT_REDUCE_SUM) == WEFT_OK) y = weft_permute(out, inv);
        weft_tensor *t[] = {xd, xp, xc, out};
        for (int i = 0; i < 4; i++) weft_tensor_free(t[i]);
    }
    return y;
}

weft_tensor *weft_tp_gather(weft_comm *c, weft_tensor *x, int dim) {
    int d;
    if (check_comm("tp_gather", c, x) || norm_dim("tp_gather", x, dim, &d)) return NULL;
    return record("tp_gather", x, all_gather_dim(c, x, d), gather_bw, c, d);
}

weft_tensor *weft_tp_scatter(weft_comm *c, weft_tensor *x, int dim) {
    int d;
    if (check_comm("tp_scatter", c, x) || norm_dim("tp_scatter", x, dim, &d)) return NULL;
    int n = weft_comm_size(c), r = weft_comm_rank(c);
    int64_t s = weft_tensor_size(x, d);
    if (s % n)
        return weft_error_null(WEFT_ERR_SHAPE,
                               "tp_scatter: dim %d of size %lld is not divisible by the tensor-parallel "
                               "size %d", d, (long long)s, n);
    weft_tensor *y = NULL;
    WEFT_NO_GRAD {
        weft_tensor *xd = weft_tensor_detach(x);
        y = weft_narrow(xd, d, r * (s / n), s / n); // a view of this rank's slice
        weft_tensor_free(xd);
    }
    return record("tp_scatter", x, y, scatter_bw, c, d);
}

// ---- the sequence-parallel pair ----
static weft_status seq_gather_bw(void *ctx, int n_out, weft_tensor *const *gout, int n_in, const bool *needs,
                                 weft_tensor **gin) {
    (void)n_out, (void)n_in;
    if (!needs[0] || !gout[0]) return WEFT_OK;
    const tp_ctx *k = ctx;
    gin[0] = weft_tp_seq_reduce_scatter(k->c, gout[0], k->dim);
    return gin[0] ? WEFT_OK : weft_last_status();
}

static weft_status seq_rs_bw(void *ctx, int n_out, weft_tensor *const *gout, int n_in, const bool *needs,
                             weft_tensor **gin) {
    (void)n_out, (void)n_in;
    if (!needs[0] || !gout[0]) return WEFT_OK;
    const tp_ctx *k = ctx;
    gin[0] = weft_tp_seq_gather(k->c, gout[0], k->dim);
    return gin[0] ? WEFT_OK : weft_last_status();
}

weft_tensor *weft_tp_seq_gather(weft_comm *c, weft_tensor *x, int dim) {
    int d;
    if (check_comm("tp_seq_gather", c, x) || norm_dim("tp_seq_gather", x, dim, &d)) return NULL;
    return record("tp_seq_gather", x, all_gather_dim(c, x, d), seq_gather_bw, c, d);
}

weft_tensor *weft_tp_seq_reduce_scatter(weft_comm *c, weft_tensor *x, int dim) {
    int d;
    if (check_comm("tp_seq_reduce_scatter", c, x) || norm_dim("tp_seq_reduce_scatter", x, dim, &d)) return NULL;
    return record("tp_seq_reduce_scatter", x, reduce_scatter_dim(c, x, d), seq_rs_bw, c, d);
}

// ---- the sequence-parallel column layer's product ----
// y = seq_gather(x) W^T + b, as one function that saves x's own tokens only:
// the backward gathers them again (Megatron does the same), so the gathered
// (.., T, in) input is never kept. Once differentiable.
//   x (.., T/n, in), w (out_l, in), b (out_l) or NULL -> y (.., T, out_l)
typedef struct seq_col_ctx {
    weft_comm *c;
    int d;           // token dim
    weft_tensor *x;  // this rank's tokens (detached)
    weft_tensor *w;  // detached
} seq_col_ctx;

static void seq_col_free(void *p) {
    seq_col_ctx *k = p;
    if (!k) return;
    weft_tensor_free(k->x);
    weft_tensor_free(k->w);
    free(k);
}

static weft_status seq_col_bw(void *ctx, int n_out, weft_tensor *const *gout, int n_in, const bool *needs,
                              weft_tensor **gin) {
    (void)n_out;
    const seq_col_ctx *k = ctx;
    weft_tensor *g = gout[0];
    if (!g) return WEFT_OK;
    int64_t in = weft_tensor_size(k->w, 1), out = weft_tensor_size(k->w, 0);
    weft_status st = WEFT_OK;
    if (needs[0]) { // dx = reduce-scatter(g W) over the tokens
        weft_tensor *dxf = weft_matmul(g, k->w);
        gin[0] = dxf ? reduce_scatter_dim(k->c, dxf, k->d) : NULL;
        weft_tensor_free(dxf);
        if (!gin[0]) st = weft_last_status();
    }
    if (!st && needs[1]) { // dW = g^T gather(x), over every token of the batch
        weft_tensor *xg = all_gather_dim(k->c, k->x, k->d);
        weft_tensor *g2 = xg ? weft_reshape(g, WEFT_DIMS(-1, out)) : NULL;
        weft_tensor *x2 = g2 ? weft_reshape(xg, WEFT_DIMS(-1, in)) : NULL;
        weft_tensor *g2t = x2 ? weft_transpose(g2, 0, 1) : NULL;
        gin[1] = g2t ? weft_matmul(g2t, x2) : NULL;
        weft_tensor *t[] = {xg, g2, x2, g2t};
        for (int i = 0; i < 4; i++) weft_tensor_free(t[i]);
        if (!gin[1]) st = weft_last_status();
    }
    if (!st && n_in > 2 && needs[2]) { // db = g summed over every token
        int nd = weft_tensor_ndim(g), axes[WEFT_MAX_DIMS];
        for (int i = 0; i < nd - 1; i++) axes[i] = i;
        gin[2] = weft_sum(g, nd - 1, axes, false);
        if (!gin[2]) st = weft_last_status();
    }
    return st;
}

weft_tensor *weft_tp_seq_column_product(weft_comm *c, weft_tensor *x, weft_tensor *w, weft_tensor *b) {
    const char *op = "tp_seq_column_linear";
    if (check_comm(op, c, x)) return NULL;
    if (!w) return weft_error_null_input(op);
    int nd = weft_tensor_ndim(x);
    if (nd < 2) return weft_error_null(WEFT_ERR_SHAPE, "%s: x must be (..., tokens, features)", op);
    int d = nd - 2;
    weft_tensor *y = NULL;
    WEFT_NO_GRAD {
        weft_tensor *xg = all_gather_dim(c, x, d), *wd = weft_tensor_detach(w), *wt = weft_transpose(wd, 0, 1);
        weft_tensor *p = xg && wt ? weft_matmul(xg, wt) : NULL;
        y = p && b ? weft_add(p, b) : p ? weft_tensor_ref(p) : NULL;
        weft_tensor *t[] = {xg, wd, wt, p};
        for (int i = 0; i < 4; i++) weft_tensor_free(t[i]);
    }
    if (!y) return NULL;
    weft_tensor *ins[3] = {x, w, b};
    int n_in = b ? 3 : 2;
    bool any = false;
    for (int i = 0; i < n_in; i++) any |= weft_tensor_requires_grad(ins[i]);
    if (!any || !weft_grad_is_enabled()) return y;
    seq_col_ctx *k = calloc(1, sizeof *k);
    if (!k) {
        weft_tensor_free(y);
        return weft_error_null(WEFT_ERR_OOM, "%s: out of memory", op);
    }
    *k = (seq_col_ctx){c, d, weft_tensor_detach(x), weft_tensor_detach(w)};
    if (weft_function_record(op, n_in, ins, 1, &y, seq_col_bw, k, seq_col_free) != WEFT_OK) {
        weft_tensor_free(y);
        return NULL;
    }
    return y;
}

// ---- vocab-parallel cross-entropy ----
// logits z (N, V/n) hold vocabulary entries [lo, lo + V/n) of each row; targets (N).
//   m_i = max over all ranks of max_j z_ij          (all-reduce MAX)
//   s_i = sum over all ranks of sum_j exp(z_ij - m_i) (all-reduce SUM)
//   t_i = z_i,y_i on the rank holding y_i, 0 elsewhere (all-reduce SUM)
//   loss = mean_i (log s_i + m_i - t_i)
// Backward: dz = (softmax(z) - onehot(y)) * dloss / N, all local (softmax and
// the target mask are saved from the forward). Only (N) vectors are reduced:
// the (N, V) logits never exist on one rank.
typedef struct ce_ctx {
    weft_tensor *sm;    // (N, V/n) softmax, this rank's columns
    weft_tensor *idx;   // (N, 1) i64 local target column (0 where the target lives elsewhere)
    weft_tensor *onhot; // (N, 1) 1 where this rank holds the target, else 0 (logits' dtype)
} ce_ctx;

static void ce_free(void *p) {
    ce_ctx *k = p;
    if (!k) return;
    weft_tensor_free(k->sm);
    weft_tensor_free(k->idx);
    weft_tensor_free(k->onhot);
    free(k);
}

static weft_status ce_bw(void *ctx, int n_out, weft_tensor *const *gout, int n_in, const bool *needs,
                         weft_tensor **gin) {
    (void)n_out, (void)n_in;
    if (!needs[0] || !gout[0]) return WEFT_OK;
    const ce_ctx *k = ctx;
    int64_t N = weft_tensor_size(k->sm, 0);
    // onehot (N, V/n): the mask scattered into zeros at the local target column
    weft_tensor *z = weft_tensor_zeros_like(k->sm);
    weft_tensor *oh = weft_scatter_add(z, 1, k->idx, k->onhot);
    weft_tensor *d = weft_sub(k->sm, oh);
    weft_tensor *gs = weft_mul_scalar(gout[0], 1.0 / (double)N);
    gin[0] = weft_mul(d, gs); // gs is 0-d: broadcasts
    weft_tensor *t[] = {z, oh, d, gs};
    for (int i = 0; i < 4; i++) weft_tensor_free(t[i]);
    return gin[0] ? WEFT_OK : weft_last_status();
}

weft_tensor *weft_tp_vocab_cross_entropy(weft_comm *c, weft_tensor *logits, weft_tensor *targets) {
    const char *op = "tp_vocab_cross_entropy";
    char b1[64], b2[64];
    if (check_comm(op, c, logits)) return NULL;
    if (!targets) return weft_error_null_input(op);
    weft_dtype dt = weft_tensor_dtype(logits), it = weft_tensor_dtype(targets);
    if (dt == WEFT_BF16 || dt == WEFT_F16) { // the lm head's output under autocast: the loss in f32, as autocast's
        weft_tensor *l32 = weft_cast(logits, WEFT_F32);
        weft_tensor *r = l32 ? weft_tp_vocab_cross_entropy(c, l32, targets) : NULL;
        weft_tensor_free(l32);
        return r;
    }
    if (weft_tensor_ndim(logits) != 2 || weft_tensor_ndim(targets) != 1 ||
        weft_tensor_size(targets, 0) != weft_tensor_size(logits, 0))
        return weft_error_null(WEFT_ERR_SHAPE, "%s: expected logits (N, V/tp) and targets (N), got %s and %s", op,
                               weft_tensor_shape_str(logits, b1, sizeof b1),
                               weft_tensor_shape_str(targets, b2, sizeof b2));
    if (dt != WEFT_F32 && dt != WEFT_F64) return weft_error_null(WEFT_ERR_DTYPE, "%s: logits must be f32 or f64", op);
    if (it != WEFT_I32 && it != WEFT_I64) return weft_error_null(WEFT_ERR_DTYPE, "%s: targets must be i32 or i64", op);
    int64_t N = weft_tensor_size(logits, 0), Vs = weft_tensor_size(logits, 1);
    int64_t lo = Vs * weft_comm_rank(c);
    weft_device dev = weft_tensor_device(logits);
    ce_ctx *k = calloc(1, sizeof *k);
    if (!k) return weft_error_null(WEFT_ERR_OOM, "%s: out of memory", op);
    weft_tensor *loss = NULL;
    WEFT_NO_GRAD {
        weft_tensor *z = weft_tensor_detach(logits);
        // the global row max, then exp(z - m) and its global row sum
        weft_tensor *m = weft_max(z, 1, (const int[]){1}, true); // (N,1)
        weft_tensor *mc = m ? weft_tensor_contiguous(m) : NULL;
        if (mc && weft_dist_all_reduce(c, mc, WEFT_REDUCE_MAX) != WEFT_OK) weft_tensor_free(mc), mc = NULL;
        weft_tensor *zs = mc ? weft_sub(z, mc) : NULL;
        weft_tensor *e = weft_exp(zs);
        weft_tensor *s = weft_sum(e, 1, (const int[]){1}, true); // (N,1)
        if (s && weft_dist_all_reduce(c, s, WEFT_REDUCE_SUM) != WEFT_OK) weft_tensor_free(s), s = NULL;
        k->sm = s ? weft_div(e, s) : NULL;
        // the target's logit, from the rank that holds it: local index and mask
        weft_tensor *t64 = weft_cast(targets, WEFT_I64);
        weft_tensor *t2 = weft_reshape(t64, WEFT_DIMS(N, 1));
        weft_tensor *lo_t = weft_tensor_full_on(0, NULL, WEFT_I64, (double)lo, dev);
        weft_tensor *hi_t = weft_tensor_full_on(0, NULL, WEFT_I64, (double)(lo + Vs), dev);
        weft_tensor *zero = weft_tensor_full_on(0, NULL, WEFT_I64, 0, dev);
        weft_tensor *ge = weft_ge(t2, lo_t), *lt = weft_lt(t2, hi_t), *sh = weft_sub(t2, lo_t);
        weft_tensor *in = weft_where(lt, sh, zero); // lo <= y < hi: y - lo, else 0
        k->idx = weft_where(ge, in, zero);
        weft_tensor *gef = weft_cast(ge, dt), *ltf = weft_cast(lt, dt);
        k->onhot = weft_mul(gef, ltf);
        weft_tensor_free(gef);
        weft_tensor_free(ltf);
        weft_tensor *zt = k->idx ? weft_gather(z, 1, k->idx) : NULL; // (N,1)
        weft_tensor *ztm = weft_mul(zt, k->onhot);
        if (ztm && weft_dist_all_reduce(c, ztm, WEFT_REDUCE_SUM) != WEFT_OK) weft_tensor_free(ztm), ztm = NULL;
        // loss = mean(log s + m - t)
        weft_tensor *ls = weft_log(s), *a = weft_add(ls, mc), *per = ztm ? weft_sub(a, ztm) : NULL;
        loss = weft_mean(per, 0, NULL, false);
        weft_tensor *tmp[] = {z, m, mc, zs, e, s, t64, t2, lo_t, hi_t, zero, ge, lt, sh, in, zt, ztm, ls, a, per};
        for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) weft_tensor_free(tmp[i]);
    }
    if (!loss || !k->sm || !k->idx || !k->onhot) {
        ce_free(k);
        weft_tensor_free(loss);
        return NULL;
    }
    if (!weft_tensor_requires_grad(logits) || !weft_grad_is_enabled()) {
        ce_free(k);
        return loss;
    }
    if (weft_function_record(op, 1, &logits, 1, &loss, ce_bw, k, ce_free) != WEFT_OK) {
        weft_tensor_free(loss);
        return NULL;
    }
    return loss;
}

// ---- shards of a whole tensor ----
// whole's dim is `groups` blocks; each block is split over the n ranks and
// rank r takes its piece of every block: (.., S, ..) -> (.., S/n, ..).
weft_tensor *weft_tp_shard(weft_comm *c, weft_tensor *whole, int dim, int groups) {
    int d;
    if (check_comm("tp_shard", c, whole) || norm_dim("tp_shard", whole, dim, &d)) return NULL;
    int n = weft_comm_size(c), r = weft_comm_rank(c);
    int64_t S = weft_tensor_size(whole, d);
    if (groups < 1 || groups > 16 || S % ((int64_t)groups * n))
        return weft_error_null(WEFT_ERR_SHAPE, "tp_shard: dim %d of size %lld is not %d blocks divisible by the "
                               "tensor-parallel size %d", d, (long long)S, groups, n);
    int64_t p = S / groups / n;
    weft_tensor *pieces[16] = {NULL}, *y = NULL;
    WEFT_NO_GRAD {
        weft_tensor *wd = weft_tensor_detach(whole);
        for (int gi = 0; gi < groups; gi++) pieces[gi] = weft_narrow(wd, d, gi * (S / groups) + r * p, p);
        y = groups == 1 ? weft_tensor_clone(pieces[0]) : weft_concat(groups, pieces, d);
        for (int gi = 0; gi < groups; gi++) weft_tensor_free(pieces[gi]);
        weft_tensor_free(wd);
    }
    return y;
}
