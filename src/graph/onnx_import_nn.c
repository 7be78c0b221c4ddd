// ONNX import of the recurrent layers (RNN, GRU, LSTM, unrolled over their static sequence length) and the
// losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss), composed of weft graph ops. The node loop and
// the helpers are onnx_import.c's (onnx_import.h).
#include <stdlib.h>
#include <string.h>

#include "onnx_import.h"

#ifdef WEFT_HAVE_ONNX

// ---- the recurrent ops: RNN, GRU, LSTM (unrolled over the sequence, which has a static length)

static weft_value slice1(nctx *c, weft_value v, int dim, int64_t b, int64_t e) {
    int64_t at[4] = {dim, b, e, 1};
    return OK(v) ? oi_op(c, NULL, "slice", 1, &v, at, 4, NULL, 0) : v;
}
static weft_value bin(nctx *c, const char *opn, weft_value a, weft_value b) {
    return OK(a) && OK(b) ? oi_op(c, NULL, opn, 2, (weft_value[]){a, b}, NULL, 0, NULL, 0) : WEFT_VALUE_NONE;
}
static weft_value un(nctx *c, const char *opn, weft_value a) {
    return OK(a) ? oi_op(c, NULL, opn, 1, &a, NULL, 0, NULL, 0) : a;
}
// a (rows, k) times b (n, k) transposed: (rows, n)
static weft_value matmul_t(nctx *c, weft_value a, weft_value b) {
    int64_t tr[2] = {0, 1};
    return OK(a) && OK(b) ? oi_op(c, NULL, "matmul", 2, (weft_value[]){a, b}, tr, 2, NULL, 0) : WEFT_VALUE_NONE;
}
// v's slice [d] of dim 0, viewed without that dim (nd - 1 dims).
static weft_value pick(nctx *c, weft_value v, int64_t d) {
    if (!OK(v)) return v;
    int nd = ndim_of(c, v);
    int64_t s[WEFT_MAX_DIMS];
    sizes_copy(c, v, s);
    return oi_reshape(c, NULL, slice1(c, v, 0, d, d + 1), nd - 1, s + 1);
}

// Activation k of direction d from the `activations` attribute (def when absent), as a weft op name.
static const char *rnn_act(nctx *c, int d, int nact, int k, const char *def) {
    const Onnx__AttributeProto *a = oi_attr_t(c, "activations", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS);
    const char *nm = def;
    char buf[32];
    if (a && a->n_strings) {
        size_t i = (size_t)(d * nact + k);
        if (i >= a->n_strings || !a->strings[i].len || a->strings[i].len >= sizeof buf ||
            memchr(a->strings[i].data, 0, a->strings[i].len))
            return NULL;
        memcpy(buf, a->strings[i].data, a->strings[i].len);
        buf[a->strings[i].len] = 0;
        nm = buf;
    }
    return !strcmp(nm, "Sigmoid") ? "sigmoid" : !strcmp(nm, "Tanh") ? "tanh" : !strcmp(nm, "Relu") ? "relu" : NULL;
}

enum { RK_LSTM, RK_GRU, RK_RNN };

// The recurrent steps a model may unroll, over all its RNN / GRU / LSTM nodes, each direction counted: each step is
// a dozen to two dozen graph nodes, so a file of a few hundred bytes declaring a long sequence must not build
// millions of them. 4096 covers a bidirectional two-layer LSTM over 1024 steps; WEFT_ONNX_MAX_STEPS raises it.
static int64_t max_steps(void) {
    const char *e = getenv("WEFT_ONNX_MAX_STEPS");
    long long v = e && *e ? atoll(e) : 0;
    return v > 0 ? (int64_t)v : 4096;
}

// One direction: x (T*B,I) rows of the sequence in time order, Wd (G*H,I), Rd (G*H,H), bias (2*G*H) or NONE,
// h / cc the initial states (B,H), P (3H) or NONE (LSTM's peepholes), lens (B,1) or NONE. Writes ys[t] (B,H)
// (0 past a sequence's length) when ys is given, and the final states into *h, *cc.
typedef struct rnn_dir {
    int kind, G;
    int64_t T, B, H;
    bool reverse, lbr; // lbr: GRU's linear_before_reset
    const char *f, *g, *hf; // activations (hf: LSTM's third)
} rnn_dir;

static weft_status rnn_direction(nctx *c, const rnn_dir *r, weft_value x, weft_value Wd, weft_value Rd, weft_value bias,
                                 weft_value P, weft_value lens, weft_value *h, weft_value *cc, weft_value *ys) {
    int64_t T = r->T, B = r->B, H = r->H, GH = r->G * H;
    weft_value xg = matmul_t(c, x, Wd); // (T*B, G*H): the input part of every step in one product
    weft_value rb = WEFT_VALUE_NONE;
    if (OK(bias)) {
        weft_value wb = slice1(c, bias, 0, 0, GH);
        rb = slice1(c, bias, 0, GH, 2 * GH);
        // the recurrent bias joins the input part, except GRU's Rb_h with linear_before_reset (inside r * (.))
        weft_value b = bin(c, "add", wb, rb);
        if (r->kind == RK_GRU && r->lbr && OK(b))
            b = oi_op(c, NULL, "concat", 2, (weft_value[]){slice1(c, b, 0, 0, 2 * H), slice1(c, wb, 0, 2 * H, 3 * H)},
                   (int64_t[]){0}, 1, NULL, 0);
        xg = bin(c, "add", xg, b);
    }
    if (OK(xg)) xg = oi_reshape(c, NULL, xg, 3, (int64_t[]){T, B, GH});
    weft_value pi = WEFT_VALUE_NONE, po = WEFT_VALUE_NONE, pf = WEFT_VALUE_NONE;
    if (OK(P)) pi = slice1(c, P, 0, 0, H), po = slice1(c, P, 0, H, 2 * H), pf = slice1(c, P, 0, 2 * H, 3 * H);
    weft_value R_zr = WEFT_VALUE_NONE, R_h = WEFT_VALUE_NONE, rb_h = WEFT_VALUE_NONE, zero = WEFT_VALUE_NONE;
    if (r->kind == RK_GRU) {
        R_zr = slice1(c, Rd, 0, 0, 2 * H), R_h = slice1(c, Rd, 0, 2 * H, 3 * H);
        if (OK(rb) && r->lbr) rb_h = slice1(c, rb, 0, 2 * H, 3 * H);
    }
    if (OK(lens)) zero = oi_scalar_as(c, dtype_of(c, *h), 0);
    if (!OK(xg)) return weft_last_status();
    for (int64_t s = 0; s < T; s++) {
        int64_t t = r->reverse ? T - 1 - s : s;
        weft_value xt = oi_reshape(c, NULL, slice1(c, xg, 0, t, t + 1), 2, (int64_t[]){B, GH}), hn, cn = WEFT_VALUE_NONE;
        if (r->kind == RK_RNN) {
            hn = un(c, r->f, bin(c, "add", xt, matmul_t(c, *h, Rd)));
        } else if (r->kind == RK_GRU) { // gates (z, r, h): z, r = f(x + h R); h~ = g(x_h + (r h) R_h) or g(x_h + r (h R_h + Rb_h))
            weft_value zr = un(c, r->f, bin(c, "add", slice1(c, xt, 1, 0, 2 * H), matmul_t(c, *h, R_zr)));
            weft_value z = slice1(c, zr, 1, 0, H), rr = slice1(c, zr, 1, H, 2 * H), hh;
            if (r->lbr) {
                hh = matmul_t(c, *h, R_h);
                if (OK(rb_h)) hh = bin(c, "add", hh, rb_h);
                hh = bin(c, "mul", rr, hh);
            } else {
                hh = matmul_t(c, bin(c, "mul", rr, *h), R_h);
            }
            weft_value ht = un(c, r->g, bin(c, "add", slice1(c, xt, 1, 2 * H, 3 * H), hh));
            hn = bin(c, "add", ht, bin(c, "mul", z, bin(c, "sub", *h, ht))); // (1 - z) h~ + z h
        } else { // LSTM, gates (i, o, f, c): peepholes read c_{t-1} for i and f, c_t for o
            weft_value gt = bin(c, "add", xt, matmul_t(c, *h, Rd));
            weft_value gi = slice1(c, gt, 1, 0, H), go = slice1(c, gt, 1, H, 2 * H);
            weft_value gf = slice1(c, gt, 1, 2 * H, 3 * H), gc = slice1(c, gt, 1, 3 * H, 4 * H);
            if (OK(P)) gi = bin(c, "add", gi, bin(c, "mul", pi, *cc)), gf = bin(c, "add", gf, bin(c, "mul", pf, *cc));
            weft_value ig = un(c, r->f, gi), fg = un(c, r->f, gf), ct = un(c, r->g, gc);
            cn = bin(c, "add", bin(c, "mul", fg, *cc), bin(c, "mul", ig, ct));
            if (OK(P)) go = bin(c, "add", go, bin(c, "mul", po, cn));
            hn = bin(c, "mul", un(c, r->f, go), un(c, r->hf, cn));
        }
        weft_value y = hn;
        if (OK(lens)) { // steps past a sequence's length keep the state and output 0
            weft_value m = bin(c, "lt", oi_scalar(c, dtype_of(c, lens), (double)t), lens); // (B,1)
            hn = OK(m) ? oi_op(c, NULL, "where", 3, (weft_value[]){m, hn, *h}, NULL, 0, NULL, 0) : m;
            if (r->kind == RK_LSTM && OK(m)) cn = oi_op(c, NULL, "where", 3, (weft_value[]){m, cn, *cc}, NULL, 0, NULL, 0);
            y = OK(m) && OK(hn) ? oi_op(c, NULL, "where", 3, (weft_value[]){m, hn, zero}, NULL, 0, NULL, 0) : m;
        }
        if (!OK(hn) || !OK(y) || (r->kind == RK_LSTM && !OK(cn))) return weft_last_status();
        *h = hn;
        if (r->kind == RK_LSTM) *cc = cn;
        if (ys) ys[t] = y;
    }
    return WEFT_OK;
}

// RNN (activation Tanh or Relu), GRU (both linear_before_reset forms) and LSTM (peepholes included), in every
// direction and layout, with initial states and sequence_lens (a run-time value: steps past a sequence's
// length keep its state and output 0, in either direction). Gate orders are ONNX's: GRU (z, r, h), LSTM
// (i, o, f, c). Activations: Sigmoid, Tanh and Relu in any place; clip and input_forget are refused.
weft_status oi_rnn(nctx *c, const char *arg) {
    rnn_dir r = {.kind = arg[0] == 'L' ? RK_LSTM : arg[0] == 'G' ? RK_GRU : RK_RNN};
    r.G = r.kind == RK_LSTM ? 4 : r.kind == RK_GRU ? 3 : 1;
    int nact = r.kind == RK_LSTM ? 3 : r.kind == RK_GRU ? 2 : 1;
    bool bi = oi_attr_s_is(c, "direction", "forward", "bidirectional"), rev = oi_attr_s_is(c, "direction", "forward", "reverse");
    if (!bi && !rev && !oi_attr_s_is(c, "direction", "forward", "forward")) FAIL("direction must be forward, reverse or bidirectional");
    int D = bi ? 2 : 1;
    int64_t layout = oi_attr_i(c, "layout", 0);
    if (layout != 0 && layout != 1) FAIL("layout %lld", (long long)layout);
    if (oi_attr(c, "clip")) FAIL("clip is not supported");
    if (oi_attr(c, "activation_alpha") || oi_attr(c, "activation_beta")) FAIL("activation_alpha / activation_beta are not supported");
    if (r.kind == RK_LSTM && oi_attr_i(c, "input_forget", 0)) FAIL("input_forget = 1 is not supported");
    r.lbr = r.kind == RK_GRU && oi_attr_i(c, "linear_before_reset", 0) != 0;
    if (c->n_in < 3 || c->kin[1] < 0 || c->kin[2] < 0) FAIL("needs X, W and R");
    if (ndim_of(c, c->in[0]) != 3 || ndim_of(c, c->in[1]) != 3 || ndim_of(c, c->in[2]) != 3) FAIL("X, W and R must be 3-D");
    int64_t xs[3], ws[3], rs[3];
    sizes_copy(c, c->in[0], xs);
    sizes_copy(c, c->in[1], ws);
    sizes_copy(c, c->in[2], rs);
    r.T = layout ? xs[1] : xs[0], r.B = layout ? xs[0] : xs[1];
    r.H = oi_attr_i(c, "hidden_size", rs[2]);
    int64_t I = xs[2], GH = r.G * r.H;
    if (r.T < 1 || r.B < 1 || r.H < 1 || r.H > (INT64_C(1) << 24)) FAIL("sizes: sequence %lld, batch %lld, hidden %lld",
                                                                  (long long)r.T, (long long)r.B, (long long)r.H);
    if (ws[0] != D || ws[1] != GH || ws[2] != I) FAIL("W must be (%d,%lld,%lld)", D, (long long)GH, (long long)I);
    if (rs[0] != D || rs[1] != GH || rs[2] != r.H) FAIL("R must be (%d,%lld,%lld)", D, (long long)GH, (long long)r.H);
    int64_t lim = max_steps();
    if (r.T > lim / D || c->m->steps > lim - r.T * D)
        FAIL("a sequence of %lld steps (%d directions) is too long to unroll: with the model's other recurrent nodes "
             "(%lld steps) it passes %lld (WEFT_ONNX_MAX_STEPS)", (long long)r.T, D, (long long)c->m->steps,
             (long long)lim);
    c->m->steps += r.T * D;
    if (c->n_in > (r.kind == RK_LSTM ? 8 : 6)) FAIL("%d inputs (at most %d)", c->n_in, r.kind == RK_LSTM ? 8 : 6);
    if (oi_check_made(2, (int64_t[]){r.B, r.H})) FAIL("a zero state of (%lld,%lld) is too large", (long long)r.B, (long long)r.H);
    weft_value in[8];
    for (int k = 0; k < 8; k++) in[k] = k < c->n_in && c->kin[k] >= 0 ? c->in[k] : WEFT_VALUE_NONE;
    int64_t sz[3];
    if (OK(in[3]) && (ndim_of(c, in[3]) != 2 || (sizes_copy(c, in[3], sz), sz[0] != D || sz[1] != 2 * GH)))
        FAIL("B must be (%d,%lld)", D, (long long)(2 * GH));
    if (OK(in[4])) {
        weft_dtype lt = dtype_of(c, in[4]);
        if (ndim_of(c, in[4]) != 1 || sizes_of(c, in[4])[0] != r.B || (lt != WEFT_I32 && lt != WEFT_I64))
            FAIL("sequence_lens must be (%lld) integers", (long long)r.B);
        in[4] = oi_reshape(c, NULL, in[4], 2, (int64_t[]){r.B, 1});
    }
    for (int k = 5; k <= 6; k++) // initial_h, initial_c: (D,B,H), batch first in layout 1
        if (OK(in[k])) {
            if (ndim_of(c, in[k]) != 3) FAIL("input %d must be 3-D", k);
            sizes_copy(c, in[k], sz);
            if (sz[layout ? 1 : 0] != D || sz[layout ? 0 : 1] != r.B || sz[2] != r.H)
                FAIL("input %d has the wrong shape", k);
            if (layout) in[k] = oi_op(c, NULL, "permute", 1, &in[k], (int64_t[]){1, 0, 2}, 3, NULL, 0);
        }
    if (OK(in[7]) && (ndim_of(c, in[7]) != 2 || (sizes_copy(c, in[7], sz), sz[0] != D || sz[1] != 3 * r.H)))
        FAIL("P must be (%d,%lld)", D, (long long)(3 * r.H));
    weft_value x = c->in[0];
    if (layout) x = oi_op(c, NULL, "permute", 1, &x, (int64_t[]){1, 0, 2}, 3, NULL, 0); // (T,B,I)
    if (OK(x)) x = oi_reshape(c, NULL, x, 2, (int64_t[]){r.T * r.B, I});
    bool want_y = wants_out(c, 0);
    weft_value *ys = want_y ? calloc((size_t)(r.T * D), sizeof *ys) : NULL;
    if (want_y && !ys) return weft_error(WEFT_ERR_OOM, "no memory");
    weft_value hs[2], cs[2], yd[2];
    weft_status st = OK(x) ? WEFT_OK : weft_last_status();
    for (int d = 0; d < D && !st; d++) {
        r.reverse = rev || d == 1;
        r.f = rnn_act(c, d, nact, 0, r.kind == RK_RNN ? "Tanh" : "Sigmoid");
        r.g = nact > 1 ? rnn_act(c, d, nact, 1, "Tanh") : r.f;
        r.hf = nact > 2 ? rnn_act(c, d, nact, 2, "Tanh") : r.f;
        if (!r.f || !r.g || !r.hf) {
            st = weft_error(WEFT_ERR_UNSUPPORTED, "activations: only Sigmoid, Tanh and Relu (%d for each direction)", nact);
            break;
        }
        weft_tensor *z = weft_tensor_zeros(WEFT_DIMS(r.B, r.H), dtype_of(c, x));
        weft_value zeros = oi_konst(c, NULL, z, NULL);
        hs[d] = OK(in[5]) ? pick(c, in[5], d) : zeros;
        cs[d] = OK(in[6]) ? pick(c, in[6], d) : zeros;
        st = rnn_direction(c, &r, x, pick(c, c->in[1], d), pick(c, c->in[2], d), OK(in[3]) ? pick(c, in[3], d) : in[3],
                           OK(in[7]) ? pick(c, in[7], d) : in[7], in[4], &hs[d], &cs[d], ys ? ys + d * r.T : NULL);
        if (!st && want_y) { // (T,1,B,H)
            for (int64_t t = 0; t < r.T && !st; t++) {
                weft_value *y = &ys[d * r.T + t];
                *y = oi_reshape(c, NULL, *y, 4, (int64_t[]){1, 1, r.B, r.H});
                if (!OK(*y)) st = weft_last_status();
            }
            if (!st) yd[d] = oi_op(c, NULL, "concat", (int)r.T, ys + d * r.T, (int64_t[]){0}, 1, NULL, 0);
            if (!st && !OK(yd[d])) st = weft_last_status();
        }
    }
    free(ys);
    if (st) return st;
    // Y (T,D,B,H), batch first (B,T,D,H) in layout 1; Y_h, Y_c (D,B,H), (B,D,H) in layout 1
    if (want_y) {
        weft_value y = D == 2 ? oi_op(c, NULL, "concat", 2, yd, (int64_t[]){1}, 1, NULL, 0) : yd[0];
        if (layout && OK(y)) y = oi_op(c, NULL, "permute", 1, &y, (int64_t[]){2, 0, 1, 3}, 4, NULL, 0); // (B,T,D,H)
        int64_t s4[4] = {r.T, D, r.B, r.H};
        if (layout) s4[0] = r.B, s4[1] = r.T, s4[2] = D;
        if (!OK(c->out[0] = OK(y) ? oi_reshape(c, node_out(c, 0), y, 4, s4) : y)) return weft_last_status();
    }
    for (int k = 1; k <= 2; k++) {
        if (!wants_out(c, k)) continue;
        if (k == 2 && r.kind != RK_LSTM) FAIL("has no output 2");
        weft_value parts[2];
        for (int d = 0; d < D; d++) parts[d] = oi_reshape(c, NULL, k == 1 ? hs[d] : cs[d], 3, (int64_t[]){1, r.B, r.H});
        weft_value v = D == 2 ? oi_op(c, NULL, "concat", 2, parts, (int64_t[]){0}, 1, NULL, 0) : parts[0];
        if (layout && OK(v)) v = oi_op(c, NULL, "permute", 1, &v, (int64_t[]){1, 0, 2}, 3, NULL, 0);
        int64_t s3[3] = {layout ? r.B : D, layout ? D : r.B, r.H};
        if (!OK(c->out[k] = OK(v) ? oi_reshape(c, node_out(c, k), v, 3, s3) : v)) return weft_last_status();
    }
    return WEFT_OK;
}

// ---- the losses: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss

// sum of every element of v (a 0-d value)
static weft_value sum_all(nctx *c, const char *name, weft_value v) {
    int nd = ndim_of(c, v);
    int64_t at[3] = {nd ? (INT64_C(1) << nd) - 1 : 0, 0, 0};
    return OK(v) ? oi_op(c, name, "sum", 1, &v, at, 3, NULL, 0) : v;
}

// NLL(input (N,C,d..), target (N,d..)[, weight (C)]): l = -w[t] input[n, t, d..], 0 where t == ignore_index;
// reduction none, sum, or mean = sum(l) / sum(w[t]) over the targets not ignored. SoftmaxCrossEntropyLoss
// is NLL of log_softmax(scores) over dim 1 (its optional output 1, log_prob). The targets not ignored must lie in
// [0, C): the gather reports one that does not at run.
weft_status oi_nll(nctx *c, const char *arg) {
    bool sce = arg[0] == 's';
    if (c->n_in > 3) FAIL("%d inputs (at most 3)", c->n_in);
    weft_value x = c->in[0], t = c->in[1], w = c->n_in > 2 && c->kin[2] >= 0 ? c->in[2] : WEFT_VALUE_NONE;
    int nd = ndim_of(c, x);
    int64_t xs[WEFT_MAX_DIMS], ts[WEFT_MAX_DIMS];
    if (nd < 2 || ndim_of(c, t) != nd - 1) FAIL("input must be (N,C,...) and target (N,...)");
    sizes_copy(c, x, xs);
    sizes_copy(c, t, ts);
    for (int d = 0; d < nd - 1; d++)
        if (ts[d] != xs[d ? d + 1 : 0]) FAIL("target's dim %d is %lld, the input's %lld", d, (long long)ts[d],
                                              (long long)xs[d ? d + 1 : 0]);
    weft_dtype tdt = dtype_of(c, t), xdt = dtype_of(c, x);
    if (tdt != WEFT_I32 && tdt != WEFT_I64) FAIL("target of type %s (int32 or int64)", weft_dtype_name(tdt));
    if (xdt != WEFT_F32 && xdt != WEFT_F64 && xdt != WEFT_F16 && xdt != WEFT_BF16) FAIL("input of type %s", weft_dtype_name(xdt));
    if (OK(w) && (ndim_of(c, w) != 1 || sizes_of(c, w)[0] != xs[1] || dtype_of(c, w) != xdt))
        FAIL("weight must be (%lld) of the input's type", (long long)xs[1]);
    int red = oi_attr_s_is(c, "reduction", "mean", "none") ? 0 : oi_attr_s_is(c, "reduction", "mean", "sum") ? 1
            : oi_attr_s_is(c, "reduction", "mean", "mean") ? 2 : -1;
    if (red < 0) FAIL("reduction must be none, sum or mean");
    bool has_ii = oi_attr_t(c, "ignore_index", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT) != NULL;
    int64_t ii = oi_attr_i(c, "ignore_index", 0);
    if (tdt == WEFT_I32 && (ii < INT32_MIN || ii > INT32_MAX)) has_ii = false; // no int32 target can equal it
    weft_value lp = x;
    if (sce) { // log_prob in the input's dtype (weft's log_softmax of a half input is f32)
        int64_t one = 1, dt = xdt;
        bool back = xdt == WEFT_F16 || xdt == WEFT_BF16;
        lp = oi_op(c, back ? NULL : node_out(c, 1), "log_softmax", 1, &x, &one, 1, NULL, 0);
        if (back && OK(lp) && dtype_of(c, lp) != xdt) lp = oi_op(c, node_out(c, 1), "cast", 1, &lp, &dt, 1, NULL, 0);
        if (!OK(lp)) return weft_last_status();
        c->out[1] = lp;
    } else if (wants_out(c, 1)) {
        FAIL("has one output");
    }
    weft_value m = WEFT_VALUE_NONE, tsafe = t; // targets ignored read row 0 instead: any index in range
    if (has_ii) { // the index made exactly (a double would round it past 2^53)
        weft_tensor *k = weft_tensor_empty(0, NULL, tdt);
        if (k && tdt == WEFT_I64) *(int64_t *)weft_tensor_data(k) = ii;
        else if (k) *(int32_t *)weft_tensor_data(k) = (int32_t)ii;
        m = bin(c, "ne", t, oi_konst(c, NULL, k, NULL));
        tsafe = OK(m) ? oi_op(c, NULL, "where", 3, (weft_value[]){m, t, oi_scalar(c, tdt, 0)}, NULL, 0, NULL, 0) : m;
    }
    int64_t is[WEFT_MAX_DIMS], one_dim = 1;
    is[0] = ts[0], is[1] = 1;
    for (int d = 1; d < nd - 1; d++) is[d + 1] = ts[d];
    weft_value g = OK(tsafe) ? oi_op(c, NULL, "gather", 2, (weft_value[]){lp, oi_reshape(c, NULL, tsafe, nd, is)}, &one_dim,
                                  1, NULL, 0)
                             : tsafe;
    weft_value l = un(c, "neg", oi_reshape(c, NULL, g, nd - 1, ts)); // (N,d..)
    weft_value wt = WEFT_VALUE_NONE; // each target's weight, 0 where ignored
    if (OK(w)) {
        int64_t n = 1, zero = 0;
        for (int d = 0; d < nd - 1; d++) n *= ts[d];
        weft_value flat = oi_reshape(c, NULL, tsafe, 1, &n);
        wt = OK(flat) ? oi_op(c, NULL, "index_select", 2, (weft_value[]){w, flat}, &zero, 1, NULL, 0) : flat;
        wt = oi_reshape(c, NULL, wt, nd - 1, ts);
    }
    if (OK(m)) {
        int64_t dt = xdt;
        weft_value mf = oi_op(c, NULL, "cast", 1, &m, &dt, 1, NULL, 0);
        wt = OK(w) ? bin(c, "mul", wt, mf) : mf;
    }
    if (OK(wt)) l = bin(c, "mul", l, wt);
    if (!OK(l)) return weft_last_status();
    if (red == 0) OUT0(oi_reshape(c, node_out(c, 0), l, nd - 1, ts));
    if (red == 1) OUT0(sum_all(c, node_out(c, 0), l));
    if (!OK(wt)) { // mean over every element
        int64_t at[3] = {(INT64_C(1) << (nd - 1)) - 1, 0, 0};
        OUT0(oi_op(c, node_out(c, 0), "mean", 1, &l, at, 3, NULL, 0));
    }
    weft_value num = sum_all(c, NULL, l), den = sum_all(c, NULL, wt);
    OUT0(OK(num) && OK(den) ? oi_op(c, node_out(c, 0), "div", 2, (weft_value[]){num, den}, NULL, 0, NULL, 0) : num);
}

#endif
