// Op entries of the fused LSTM: the cell of one time step (lstm_cell) and the
// whole recurrence of a layer (lstm_seq), each with its backward op.
// Kernels: cpu/lstm.c (CUDA registers its own at init: cuda/lstm.c).
//
// lstm_cell: (gates (B,4H)[, c_prev (B,H)]) of one float dtype, any strides
//   gates = x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh, order (i,f,g,o) as PyTorch;
//   no c_prev (one input) is the zero state of t = 0.
//   -> out 0: h (B,H) = o*tanh(c)
//      out 1: c (B,H) = f*c_prev + i*g,   i,f,o = sigmoid, g = tanh of their gate.
// lstm_cell_backward: (gates, [c_prev], c, [dh], [dc]) -> (dgates (B,4H), dc_prev (B,H))
//   attrs i[0] = has c_prev, i[1] = has dh, i[2] = has dc (flags; at least one
//   of dh, dc); the inputs present follow in that order. With dc_tot = dc +
//   dh*o*(1-tanh(c)^2): dgates = (dc_tot*g*i(1-i), dc_tot*c_prev*f(1-f),
//   dc_tot*i*(1-g^2), dh*tanh(c)*o(1-o)), dc_prev = dc_tot*f (computed even
//   without c_prev, which then counts as zero; the caller drops it).
// lstm_cell takes no attrs.
//
// lstm_seq: (xg (B,T,4H), w_hh (4H,H)) of one float dtype, any strides; zero
//   initial state. xg is the input part of every step's gates, x_t W_ih^T +
//   b_ih + b_hh (the layer computes it for all steps with one product). For
//   t = 0..T-1: gates_t = xg[:,t] + h_{t-1} W_hh^T, then the cell as above.
//   -> out 0: hs (B,T,H), h_t of every step
//      out 1: acts (B,T,4H), the activated gates (i,f,g,o after sigmoid/tanh)
//      out 2: cs (B,T,H), c_t of every step
//   Outputs 1 and 2 are internal (saved for the backward; the constructor
//   drops them); a gradient reaching them is an error.
// lstm_seq_backward: (w_hh, hs, acts, cs, dhs (B,T,H)) -> (dxg (B,T,4H), dw_hh (4H,H))
//   walks time in reverse: dh_t = dhs[:,t] + dxg[:,t+1] W_hh, the cell's
//   backward gives dxg[:,t] (= dgates_t) and carries dc; then one product
//   dw_hh = sum_t dgates_t^T h_{t-1} over all (b,t) at once.
// Neither takes attrs.
#include <limits.h>

#include "op.h"

weft_status weft_cpu_lstm_cell(const weft_op_args *a);
weft_status weft_cpu_lstm_cell_backward(const weft_op_args *a);
weft_status weft_cpu_lstm_seq(const weft_op_args *a);
weft_status weft_cpu_lstm_seq_backward(const weft_op_args *a);

extern weft_op_def weft_op_lstm_cell_backward;
extern weft_op_def weft_op_lstm_seq_backward;

// x is 2-D (rows, cols), float, of ref's dtype; what names it in the error.
static weft_status check_2d(const char *op, const weft_tensor *ref, const weft_tensor *x, int64_t rows, int64_t cols,
                            const char *what) {
    char s1[96];
    weft_status st = weft_check_dtype(op, x, WEFT_DT_FLOAT, what);
    if (st) return st;
    if (x->dtype != ref->dtype)
        return weft_error(WEFT_ERR_DTYPE, "%s: %s is %s, the gates are %s", op, what,
                          weft_dtype_name((weft_dtype)x->dtype), weft_dtype_name((weft_dtype)ref->dtype));
    if (x->ndim != 2 || x->sizes[0] != rows || x->sizes[1] != cols)
        return weft_error(WEFT_ERR_SHAPE, "%s: %s must be (%lld,%lld), got %s", op, what, (long long)rows,
                          (long long)cols, weft_tensor_shape_str(x, s1, sizeof s1));
    return WEFT_OK;
}

// gates (B,4H) -> B, H.
static weft_status check_gates(const char *op, const weft_tensor *g, int64_t *B, int64_t *H) {
    char s1[96];
    weft_status st = weft_check_dtype(op, g, WEFT_DT_FLOAT, "the gates");
    if (st) return st;
    if (g->ndim != 2 || g->sizes[1] % 4 != 0)
        return weft_error(WEFT_ERR_SHAPE, "%s: the gates must be (B,4H), got %s", op,
                          weft_tensor_shape_str(g, s1, sizeof s1));
    *B = g->sizes[0];
    *H = g->sizes[1] / 4;
    return WEFT_OK;
}

static weft_status infer_cell(const weft_op_args *a, weft_out_meta *o) {
    if (a->n_in < 1 || a->n_in > 2)
        return weft_error(WEFT_ERR_ARG, "%s: expected gates and optionally c_prev, got %d inputs", a->op->name,
                          a->n_in);
    int64_t B = 0, H = 0;
    const weft_tensor *g = a->in[0];
    weft_status st = check_gates(a->op->name, g, &B, &H);
    if (!st && a->n_in == 2) st = check_2d(a->op->name, g, a->in[1], B, H, "c_prev");
    if (st) return st;
    int64_t s[2] = {B, H};
    weft_meta_set(&o[0], 2, s, (weft_dtype)g->dtype);
    weft_meta_set(&o[1], 2, s, (weft_dtype)g->dtype);
    return WEFT_OK;
}

static weft_status infer_cell_bw(const weft_op_args *a, weft_out_meta *o) {
    const char *op = a->op->name;
    weft_status st = weft_check_flags(op, a->attrs, 0, 3, "has_c_prev, has_dh, has_dc");
    if (st) return st;
    const int64_t *f = a->attrs->i;
    if (!f[1] && !f[2]) return weft_error(WEFT_ERR_ARG, "%s: needs dh or dc (attrs i[1], i[2] both 0)", op);
    int want = 2 + (int)(f[0] + f[1] + f[2]);
    if (a->n_in != want)
        return weft_error(WEFT_ERR_ARG, "%s: the attrs ask for %d inputs, got %d", op, want, a->n_in);
    int64_t B = 0, H = 0;
    const weft_tensor *g = a->in[0];
    if ((st = check_gates(op, g, &B, &H))) return st;
    static const char *what[5] = {"c_prev", "c", "dh", "dc"};
    const bool present[4] = {f[0] != 0, true, f[1] != 0, f[2] != 0};
    int k = 1;
    for (int j = 0; j < 4 && !st; j++)
        if (present[j]) st = check_2d(op, g, a->in[k++], B, H, what[j]);
    if (st) return st;
    int64_t s[2] = {B, H};
    weft_meta_set(&o[0], 2, g->sizes, (weft_dtype)g->dtype);
    weft_meta_set(&o[1], 2, s, (weft_dtype)g->dtype);
    return WEFT_OK;
}

// Gradients of h and c (either may be missing) into gates and c_prev, by the
// fused backward op; it has no backward rule itself, so double backward
// through lstm_cell is an error naming lstm_cell_backward.
static weft_status bw_cell(const weft_bw_args *b) {
    if (!b->gout[0] && !b->gout[1]) return WEFT_OK;
    bool has_cp = b->n_in == 2;
    weft_tensor *in[5];
    int n = 0;
    in[n++] = b->in[0];
    if (has_cp) in[n++] = b->in[1];
    in[n++] = b->out[1];
    if (b->gout[0]) in[n++] = b->gout[0];
    if (b->gout[1]) in[n++] = b->gout[1];
    weft_attrs at = {.i = {has_cp, b->gout[0] != NULL, b->gout[1] != NULL}};
    weft_tensor *g[WEFT_MAX_OP_OUT];
    weft_status st = weft_op_apply(&weft_op_lstm_cell_backward, n, in, &at, g);
    if (st != WEFT_OK) return st;
    if (b->needs[0]) b->gin[0] = g[0];
    else weft_tensor_free(g[0]);
    if (has_cp && b->needs[1]) b->gin[1] = g[1];
    else weft_tensor_free(g[1]);
    return WEFT_OK;
}

weft_op_def weft_op_lstm_cell = {.name = "lstm_cell", .n_in = -1, .n_out = 2,
                                 .save = WEFT_SAVE_ALL_IN | WEFT_SAVE_OUT(1), .infer = infer_cell,
                                 .backward = bw_cell,
                                 .kernel = {[WEFT_CPU] = {weft_cpu_lstm_cell, WEFT_DT_FLOAT}}};
// No backward rule of its own: a second-order gradient through it is an error naming it.
weft_op_def weft_op_lstm_cell_backward = {
    .name = "lstm_cell_backward", .n_in = -1, .n_out = 2, .infer = infer_cell_bw,
    .kernel = {[WEFT_CPU] = {weft_cpu_lstm_cell_backward, WEFT_DT_FLOAT}}};

weft_status weft_lstm_cell(weft_tensor *gates, weft_tensor *c_prev, weft_tensor **h, weft_tensor **c) {
    if (!h || !c) return weft_error(WEFT_ERR_ARG, "lstm_cell: h and c must not be NULL");
    *h = *c = NULL;
    if (!gates) return weft_error(WEFT_ERR_ARG, "lstm_cell: the gates are NULL");
    weft_tensor *in[2] = {gates, c_prev}, *out[WEFT_MAX_OP_OUT];
    weft_status st = weft_op_apply(&weft_op_lstm_cell, c_prev ? 2 : 1, in, NULL, out);
    if (st != WEFT_OK) return st;
    *h = out[0];
    *c = out[1];
    return WEFT_OK;
}

// ---- lstm_seq ----

// x is float of ref's dtype with exactly (ndim, sizes); what names it in the error.
static weft_status check_like(const char *op, const weft_tensor *ref, const weft_tensor *x, int ndim,
                              const int64_t *sizes, const char *what) {
    char s1[96], s2[96];
    weft_status st = weft_check_dtype(op, x, WEFT_DT_FLOAT, what);
    if (st) return st;
    if (x->dtype != ref->dtype)
        return weft_error(WEFT_ERR_DTYPE, "%s: %s is %s, expected %s", op, what, weft_dtype_name((weft_dtype)x->dtype),
                          weft_dtype_name((weft_dtype)ref->dtype));
    if (!weft_shape_equal(x->ndim, x->sizes, ndim, sizes)) {
        weft_tensor_shape_str(ref, s2, sizeof s2);
        return weft_error(WEFT_ERR_SHAPE, "%s: %s has the wrong shape %s (reference %s)", op, what,
                          weft_tensor_shape_str(x, s1, sizeof s1), s2);
    }
    return WEFT_OK;
}

// A (B,T,4H) tensor -> B, T, H; the kernels' products take B*T and T*4H as
// BLAS int dims and leading dims, so those must fit in an int.
static weft_status check_seq(const char *op, const weft_tensor *g, const char *what, int64_t *B, int64_t *T,
                             int64_t *H) {
    char s1[96];
    weft_status st = weft_check_dtype(op, g, WEFT_DT_FLOAT, what);
    if (st) return st;
    if (g->ndim != 3 || g->sizes[2] % 4 != 0)
        return weft_error(WEFT_ERR_SHAPE, "%s: %s must be (B,T,4H), got %s", op, what,
                          weft_tensor_shape_str(g, s1, sizeof s1));
    *B = g->sizes[0];
    *T = g->sizes[1];
    *H = g->sizes[2] / 4;
    if (*T > 0 && (*B > INT_MAX / *T || *T * 4 * *H > INT_MAX))
        return weft_error(WEFT_ERR_SHAPE, "%s: %s %s exceeds the int range of the matrix products", op, what,
                          weft_tensor_shape_str(g, s1, sizeof s1));
    return WEFT_OK;
}

static weft_status infer_seq(const weft_op_args *a, weft_out_meta *o) {
    const char *op = a->op->name;
    if (a->n_in != 2) return weft_error(WEFT_ERR_ARG, "%s: expected xg and w_hh, got %d inputs", op, a->n_in);
    int64_t B = 0, T = 0, H = 0;
    const weft_tensor *xg = a->in[0];
    weft_status st = check_seq(op, xg, "xg", &B, &T, &H);
    if (!st) st = check_like(op, xg, a->in[1], 2, (const int64_t[]){4 * H, H}, "w_hh (4H,H)");
    if (st) return st;
    weft_dtype dt = (weft_dtype)xg->dtype;
    weft_meta_set(&o[0], 3, (const int64_t[]){B, T, H}, dt);
    weft_meta_set(&o[1], 3, xg->sizes, dt);
    weft_meta_set(&o[2], 3, (const int64_t[]){B, T, H}, dt);
    return WEFT_OK;
}

// (w_hh, hs, acts, cs, dhs): acts (B,T,4H) sets the shape.
static weft_status infer_seq_bw(const weft_op_args *a, weft_out_meta *o) {
    const char *op = a->op->name;
    if (a->n_in != 5)
        return weft_error(WEFT_ERR_ARG, "%s: expected (w_hh, hs, acts, cs, dhs), got %d inputs", op, a->n_in);
    int64_t B = 0, T = 0, H = 0;
    const weft_tensor *acts = a->in[2];
    weft_status st = check_seq(op, acts, "acts", &B, &T, &H);
    const int64_t sw[2] = {4 * H, H}, sh[3] = {B, T, H};
    if (!st) st = check_like(op, acts, a->in[0], 2, sw, "w_hh (4H,H)");
    static const char *what[3] = {"hs (B,T,H)", "cs (B,T,H)", "dhs (B,T,H)"};
    const int idx[3] = {1, 3, 4};
    for (int k = 0; k < 3 && !st; k++) st = check_like(op, acts, a->in[idx[k]], 3, sh, what[k]);
    if (st) return st;
    weft_dtype dt = (weft_dtype)acts->dtype;
    weft_meta_set(&o[0], 3, acts->sizes, dt);
    weft_meta_set(&o[1], 2, sw, dt);
    return WEFT_OK;
}

// Gradient of hs into xg and w_hh by the fused backward op (no backward rule
// of its own: double backward through lstm_seq is an error naming it).
static weft_status bw_seq(const weft_bw_args *b) {
    if (b->gout[1] || b->gout[2])
        return weft_error(WEFT_ERR_ARG, "lstm_seq: outputs 1 and 2 (gates, cells) are internal; no gradient flows "
                                        "through them");
    if (!b->gout[0]) return WEFT_OK;
    weft_tensor *in[5] = {b->in[1], b->out[0], b->out[1], b->out[2], b->gout[0]};
    weft_tensor *g[WEFT_MAX_OP_OUT];
    weft_status st = weft_op_apply(&weft_op_lstm_seq_backward, 5, in, NULL, g);
    if (st != WEFT_OK) return st;
    if (b->needs[0]) b->gin[0] = g[0];
    else weft_tensor_free(g[0]);
    // T = 1: w_hh never met a nonzero h, so it gets no gradient (NULL), as
    // the per-step layer never used it; its dw_hh is zeros.
    if (b->needs[1] && b->in_meta[0].sizes[1] > 1) b->gin[1] = g[1];
    else weft_tensor_free(g[1]);
    return WEFT_OK;
}

weft_op_def weft_op_lstm_seq = {.name = "lstm_seq", .n_in = 2, .n_out = 3,
                                .save = WEFT_SAVE_IN(1) | WEFT_SAVE_OUT(0) | WEFT_SAVE_OUT(1) | WEFT_SAVE_OUT(2),
                                .infer = infer_seq, .backward = bw_seq,
                                .kernel = {[WEFT_CPU] = {weft_cpu_lstm_seq, WEFT_DT_FLOAT}}};
// No backward rule of its own: a second-order gradient through it is an error naming it.
weft_op_def weft_op_lstm_seq_backward = {
    .name = "lstm_seq_backward", .n_in = 5, .n_out = 2, .dispatch_in = 2, .infer = infer_seq_bw,
    .kernel = {[WEFT_CPU] = {weft_cpu_lstm_seq_backward, WEFT_DT_FLOAT}}};

weft_tensor *weft_lstm_seq(weft_tensor *xg, weft_tensor *w_hh) {
    if (!xg || !w_hh) return weft_error_null(WEFT_ERR_ARG, "lstm_seq: xg and w_hh must not be NULL");
    weft_tensor *in[2] = {xg, w_hh}, *out[WEFT_MAX_OP_OUT];
    if (weft_op_apply(&weft_op_lstm_seq, 2, in, NULL, out) != WEFT_OK) return NULL;
    weft_tensor_free(out[1]); // acts and cs stay saved for backward
    weft_tensor_free(out[2]);
    return out[0];
}
