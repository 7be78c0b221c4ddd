// The recurrent layers, batch first: x (B,T,I) -> all hidden states (B,T,H), zero
// initial state. Parameters, gate order and init follow PyTorch's nn.LSTM, nn.GRU
// and nn.RNN (weight_ih (G*H,I), weight_hh (G*H,H), bias_ih, bias_hh (G*H), all
// U(-1/sqrt(H), 1/sqrt(H)), in this order; G = 4, 3, 1):
//   LSTM: gates = x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh     (B,4H), order (i,f,g,o)
//         i,f,o = sigmoid(.), g = tanh(.)
//         c_t = f*c_{t-1} + i*g,  h_t = o*tanh(c_t)
//   GRU:  gi = x_t W_ih^T + b_ih, gh = h_{t-1} W_hh^T + b_hh   (B,3H), order (r,z,n)
//         r,z = sigmoid(gi + gh) (their first 2H), n = tanh(gi_n + r*gh_n)
//         h_t = (1-z)*n + z*h_{t-1}
//   RNN:  h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh), act tanh or relu
// The input projection does not depend on the recurrence, so it runs for all
// time steps as one (B*T,I) @ (I,G*H) product (a linear op) before the loop.
// The GRU and the RNN then run per step from public ops (so they differentiate
// twice and run on every device and in graphs). The LSTM's recurrence takes one
// of three paths, chosen by WEFT_LSTM_PATH in the environment (read at every
// forward; tests compare them):
//   seq (default): the fused op lstm_seq, the whole recurrence in one call
//     (per step one product and one gate pass, forward and backward; one
//     weight-gradient product): differentiable once.
//   cell: per step a recorded product h W_hh^T, an add and the fused op
//     lstm_cell: differentiable once.
//   composed: per step the cell from public ops (~10 recorded ops), so double
//     backward works through it. WEFT_LSTM_COMPOSED=1 also selects it.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weft/nn.h>

#include "../core/core_impl.h"
#include "nn_impl.h"

typedef enum rnn_kind { RNN_LSTM, RNN_GRU, RNN_TANH, RNN_RELU } rnn_kind;

typedef struct rnn_impl {
    rnn_kind kind;
    int64_t input, hidden;
} rnn_impl;

static void rnn_impl_free(void *p) { free(p); }

// Gates per hidden unit: G, where the weights have G*H rows.
static int64_t n_gates(rnn_kind k) { return k == RNN_LSTM ? 4 : k == RNN_GRU ? 3 : 1; }
static const char *kind_name(rnn_kind k) { return k == RNN_LSTM ? "lstm" : k == RNN_GRU ? "gru" : "rnn"; }

// The cell from public ops: gates (B,4H), *c (B,H) or NULL (zero state, so
// f*c vanishes); takes the reference to gates. Returns h_t and replaces *c with c_t.
static weft_tensor *cell_composed(weft_tensor *gates, weft_tensor **c, int64_t H) {
    // gate views (B,H) each; no copies
    weft_tensor *gi = weft_narrow(gates, 1, 0 * H, H), *gf = weft_narrow(gates, 1, 1 * H, H);
    weft_tensor *gg = weft_narrow(gates, 1, 2 * H, H), *go = weft_narrow(gates, 1, 3 * H, H);
    weft_tensor_free(gates);
    weft_tensor *i = weft_sigmoid(gi), *g = weft_tanh(gg), *o = weft_sigmoid(go);
    weft_tensor_free(gi);
    weft_tensor_free(gg);
    weft_tensor_free(go);
    weft_tensor *c_new = weft_mul(i, g); // i*g
    weft_tensor_free(i);
    weft_tensor_free(g);
    if (*c) {
        weft_tensor *f = weft_sigmoid(gf);
        weft_tensor *fc = weft_mul(f, *c);
        weft_tensor *sum = weft_add(fc, c_new);
        weft_tensor_free(f);
        weft_tensor_free(fc);
        weft_tensor_free(c_new);
        c_new = sum;
    }
    weft_tensor_free(gf);
    weft_tensor_free(*c);
    *c = c_new;
    weft_tensor *tc = weft_tanh(c_new);
    weft_tensor *h_new = weft_mul(o, tc);
    weft_tensor_free(o);
    weft_tensor_free(tc);
    return h_new;
}

// One step from the precomputed input part of the gates xg_t (B,4H).
// h and c are the previous state (NULL at t = 0: zero state, so the recurrent
// product and f*c vanish). Returns h_t and replaces *c with c_t.
static weft_tensor *lstm_step(weft_tensor *xg_t, weft_tensor *whh_t, weft_tensor *h, weft_tensor **c, int64_t H,
                              bool composed) {
    weft_tensor *gates;
    if (h) {
        weft_tensor *hh = weft_matmul(h, whh_t); // (B,H) @ (H,4H) -> (B,4H)
        gates = weft_add(xg_t, hh);
        weft_tensor_free(hh);
    } else {
        gates = weft_tensor_ref(xg_t);
    }
    if (!gates) return NULL;
    if (composed) return cell_composed(gates, c, H); // takes gates
    weft_tensor *h_new = NULL, *c_new = NULL;
    weft_lstm_cell(gates, *c, &h_new, &c_new); // on failure both NULL, the error set
    weft_tensor_free(gates);
    weft_tensor_free(*c);
    *c = c_new;
    return h_new;
}

// The per-step views xs[t] = xg[:, t] (B,4H) for t in [a,b) of xg (B,b-a,4H),
// taken through a binary tree of narrows rather than T selects of xg.
// Why: the backward of a view is "zeros of the parent's shape with the gradient
// written into the slice", and the engine then adds it into the parent's
// gradient. T selects of the full (B,T,4H) tensor cost T full-size memsets and
// adds (O(T^2) memory traffic: it was ~60% of an LSTM backward at T=128); the
// tree costs one full size per level, log2(T) levels.
static weft_status split_steps(weft_tensor *xg, int64_t a, int64_t b, weft_tensor **xs) {
    if (b - a == 1) {
        xs[a] = weft_select(xg, 1, 0);
        return xs[a] ? WEFT_OK : weft_last_status();
    }
    int64_t mid = a + (b - a) / 2;
    weft_tensor *lo = weft_narrow(xg, 1, 0, mid - a), *hi = weft_narrow(xg, 1, mid - a, b - mid);
    weft_status st = lo && hi ? WEFT_OK : weft_last_status();
    if (!st) st = split_steps(lo, a, mid, xs);
    if (!st) st = split_steps(hi, mid, b, xs);
    weft_tensor_free(lo);
    weft_tensor_free(hi);
    return st;
}

typedef enum lstm_path { PATH_SEQ, PATH_CELL, PATH_COMPOSED } lstm_path;

static lstm_path path_from_env(void) {
    const char *c = getenv("WEFT_LSTM_COMPOSED"), *p = getenv("WEFT_LSTM_PATH");
    if ((c && c[0] == '1') || (p && !strcmp(p, "composed"))) return PATH_COMPOSED;
    if (p && !strcmp(p, "cell")) return PATH_CELL;
    return PATH_SEQ;
}

// One GRU step from the input part gi = x_t W_ih^T + b_ih (B,3H) and the previous state h (NULL at t = 0:
// zero state, so gh is b_hh and z*h vanishes).
static weft_tensor *gru_step(weft_tensor *gi, weft_tensor *whh, weft_tensor *bhh, weft_tensor *h, int64_t H) {
    weft_tensor *gh = h ? weft_nn_linear_apply(h, whh, bhh, WEFT_NN_NO_ACT) : weft_tensor_ref(bhh); // (B,3H) or (3H)
    if (!gh) return NULL;
    int d = weft_tensor_ndim(gh) - 1;
    weft_tensor *gi_rz = weft_narrow(gi, 1, 0, 2 * H), *gh_rz = weft_narrow(gh, d, 0, 2 * H);
    weft_tensor *gi_n = weft_narrow(gi, 1, 2 * H, H), *gh_n = weft_narrow(gh, d, 2 * H, H);
    weft_tensor_free(gh);
    weft_tensor *s = weft_add(gi_rz, gh_rz);
    weft_tensor *rz = weft_sigmoid(s); // (B,2H): r then z
    weft_tensor_free(s);
    weft_tensor_free(gi_rz);
    weft_tensor_free(gh_rz);
    weft_tensor *r = weft_narrow(rz, 1, 0, H), *z = weft_narrow(rz, 1, H, H);
    weft_tensor_free(rz);
    weft_tensor *rh = weft_mul(r, gh_n);
    weft_tensor *a = weft_add(gi_n, rh);
    weft_tensor *n = weft_tanh(a);
    weft_tensor *all[] = {r, gh_n, gi_n, rh, a};
    for (int k = 0; k < 5; k++) weft_tensor_free(all[k]);
    // h_t = n + z*(h - n), which is (1-z)*n + z*h; at t = 0, n - z*n
    weft_tensor *d_hn = h ? weft_sub(h, n) : weft_tensor_ref(n);
    weft_tensor *zd = weft_mul(z, d_hn);
    weft_tensor *h_new = h ? weft_add(n, zd) : weft_sub(n, zd);
    weft_tensor_free(d_hn);
    weft_tensor_free(zd);
    weft_tensor_free(z);
    weft_tensor_free(n);
    return h_new;
}

// One step of the plain RNN from xg_t = x_t W_ih^T + b_ih + b_hh (B,H).
static weft_tensor *rnn_step(weft_tensor *xg_t, weft_tensor *whh, weft_tensor *h, bool relu) {
    weft_tensor *pre;
    if (h) {
        weft_tensor *hh = weft_nn_linear_apply(h, whh, NULL, WEFT_NN_NO_ACT);
        pre = weft_add(xg_t, hh);
        weft_tensor_free(hh);
    } else {
        pre = weft_tensor_ref(xg_t);
    }
    weft_tensor *h_new = relu ? weft_relu(pre) : weft_tanh(pre);
    weft_tensor_free(pre);
    return h_new;
}

// The per-step paths (the GRU, the RNN, and the LSTM's cell and composed): xg (B,T,G*H) -> (B,T,H).
static weft_tensor *recur_steps(weft_module *m, weft_tensor *xg, bool composed) {
    const rnn_impl *L = weft_module_impl(m);
    int64_t T = weft_tensor_size(xg, 1), H = L->hidden;
    weft_tensor *whh = weft_module_get(m, "weight_hh"), *bhh = weft_module_get(m, "bias_hh");
    weft_tensor *whh_t = L->kind == RNN_LSTM ? weft_transpose(whh, 0, 1) : NULL; // (H,4H) view
    weft_tensor **hs = calloc((size_t)T, sizeof *hs), **xs = calloc((size_t)T, sizeof *xs);
    if (!hs || !xs) weft_error(WEFT_ERR_OOM, "%s: out of memory", kind_name(L->kind));
    bool ok = hs && xs && (whh_t || L->kind != RNN_LSTM) && split_steps(xg, 0, T, xs) == WEFT_OK;
    weft_tensor *h = NULL, *c = NULL, *out = NULL;
    for (int64_t t = 0; t < T && ok; t++) {
        weft_tensor *h_new; // xs[t] (B,G*H), row stride T*G*H
        switch (L->kind) {
        case RNN_LSTM: h_new = lstm_step(xs[t], whh_t, h, &c, H, composed); break;
        case RNN_GRU: h_new = gru_step(xs[t], whh, bhh, h, H); break;
        default: h_new = rnn_step(xs[t], whh, h, L->kind == RNN_RELU); break;
        }
        hs[t] = h_new; // the stack below holds its own reference
        h = h_new;
        ok = h_new && (c || L->kind != RNN_LSTM);
    }
    if (ok) out = weft_stack((int)T, hs, 1); // (B,T,H)
    for (int64_t t = 0; t < T; t++) {
        if (hs) weft_tensor_free(hs[t]);
        if (xs) weft_tensor_free(xs[t]);
    }
    free(hs);
    free(xs);
    weft_tensor_free(c);
    weft_tensor_free(whh_t);
    return out;
}

// The input part of the gates of rows x2 (N,I): x2 W_ih^T + b (N,G*H), one linear product with the bias in its
// epilogue (where the fused op applies: weft_nn_linear_apply). b is b_ih + b_hh, but b_ih alone for the GRU,
// whose b_hn sits inside r*(.). W_ih goes in as the parameter itself, so autocast casts it once per region.
static weft_tensor *input_gates(weft_module *m, weft_tensor *x2) {
    const rnn_impl *L = weft_module_impl(m);
    weft_tensor *bih = weft_module_get(m, "bias_ih");
    weft_tensor *b = L->kind == RNN_GRU ? weft_tensor_ref(bih) : weft_add(bih, weft_module_get(m, "bias_hh"));
    weft_tensor *xg = b ? weft_nn_linear_apply(x2, weft_module_get(m, "weight_ih"), b, WEFT_NN_NO_ACT) : NULL;
    weft_tensor_free(b);
    return xg;
}

// The recurrence from the input part of the gates of every step, xg (B,T,G*H) (the reference taken).
static weft_tensor *recurrence(weft_module *m, weft_tensor *xg) {
    if (!xg) return NULL;
    const rnn_impl *L = weft_module_impl(m);
    lstm_path path = L->kind == RNN_LSTM ? path_from_env() : PATH_CELL;
    weft_tensor *out = path == PATH_SEQ ? weft_lstm_seq(xg, weft_module_get(m, "weight_hh"))
                                        : recur_steps(m, xg, path == PATH_COMPOSED);
    weft_tensor_free(xg);
    return out;
}

static weft_tensor *rnn_forward(weft_module *m, weft_tensor *x) {
    const rnn_impl *L = weft_module_impl(m);
    const char *nm = kind_name(L->kind);
    char buf[64];
    if (weft_tensor_ndim(x) != 3 || weft_tensor_size(x, 2) != L->input)
        return weft_error_null(WEFT_ERR_SHAPE, "%s: expected input (B,T,%lld), got %s", nm, (long long)L->input,
                               weft_tensor_shape_str(x, buf, sizeof buf));
    int64_t B = weft_tensor_size(x, 0), T = weft_tensor_size(x, 1), GH = n_gates(L->kind) * L->hidden;
    if (B == 0 || T == 0)
        return weft_error_null(WEFT_ERR_SHAPE, "%s: empty input %s", nm, weft_tensor_shape_str(x, buf, sizeof buf));
    // Input part of the gates for every step at once: one (B*T,I) @ (I,G*H) product.
    weft_tensor *x2 = weft_reshape(x, WEFT_DIMS(B * T, L->input));
    weft_tensor *xg2 = input_gates(m, x2);
    weft_tensor_free(x2);
    weft_tensor *xg = weft_view(xg2, WEFT_DIMS(B, T, GH)); // (B,T,G*H)
    weft_tensor_free(xg2);
    return recurrence(m, xg);
}

// After an embedding E (V,I) with fewer rows than the batch has tokens, the input part of a token's gates is
// row idx of the table E W_ih^T + b (V,4H): that product runs once per table row instead of once per token
// (and its backward: the token gradients summed into V rows, then two products of V rows instead of N).
// kjv-lstm: V = 256 against N = 4,096 tokens, 6.3 of a step's 14.4 GFLOP become 0.4. The same values as the
// lookup then the layer, summed in another order. WEFT_LSTM_FOLD=0 keeps the two apart (for the GRU and the
// RNN too).
static weft_status rnn_fold(weft_module *m, weft_module *prev, weft_tensor *idx, weft_tensor **out) {
    *out = NULL;
    const rnn_impl *L = weft_module_impl(m);
    weft_tensor *E = weft_nn_embedding_table(prev);
    const char *env = getenv("WEFT_LSTM_FOLD");
    if (!E || (env && env[0] == '0') || weft_tensor_ndim(idx) != 2 || weft_tensor_ndim(E) != 2 ||
        weft_tensor_size(E, 1) != L->input || weft_tensor_size(E, 0) >= weft_tensor_numel(idx))
        return WEFT_OK; // the lookup, then the layer
    weft_tensor *table = input_gates(m, E); // (V,G*H)
    weft_tensor *xg = weft_embedding(table, idx); // (B,T,G*H); refuses what the lookup would refuse
    weft_tensor_free(table);
    *out = recurrence(m, xg);
    return *out ? WEFT_OK : weft_last_status();
}

static weft_module *rnn_new(rnn_kind kind, int64_t input, int64_t hidden, weft_generator *g) {
    const char *nm = kind_name(kind);
    int64_t G = n_gates(kind);
    if (input <= 0 || hidden <= 0 || hidden > INT64_MAX / 4 / (input > hidden ? input : hidden))
        return weft_error_null(WEFT_ERR_ARG, "%s: sizes must be positive and fit (input %lld, hidden %lld)", nm,
                               (long long)input, (long long)hidden);
    rnn_impl *L = malloc(sizeof *L);
    if (!L) return weft_error_null(WEFT_ERR_OOM, "%s: out of memory", nm);
    *L = (rnn_impl){kind, input, hidden};
    weft_module *m = weft_module_new(nm, rnn_forward, L, rnn_impl_free);
    if (!m) return NULL;
    weft_module_set_fold(m, rnn_fold);
    // PyTorch: every parameter ~ U(-1/sqrt(H), 1/sqrt(H)), in this order.
    double k = 1.0 / sqrt((double)hidden);
    const char *names[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
    int64_t cols[4] = {input, hidden, 0, 0};
    weft_status st = WEFT_OK;
    for (int p = 0; p < 4 && !st; p++) {
        int64_t sizes[2] = {G * hidden, cols[p]};
        st = weft_nn_add_uniform_param(m, names[p], cols[p] ? 2 : 1, sizes, k, g);
    }
    if (st) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}

weft_module *weft_nn_lstm(int64_t input, int64_t hidden, weft_generator *g) {
    return rnn_new(RNN_LSTM, input, hidden, g);
}

weft_module *weft_nn_gru(int64_t input, int64_t hidden, weft_generator *g) {
    return rnn_new(RNN_GRU, input, hidden, g);
}

weft_module *weft_nn_rnn(int64_t input, int64_t hidden, weft_activation act, weft_generator *g) {
    if (act != WEFT_ACT_TANH && act != WEFT_ACT_RELU)
        return weft_error_null(WEFT_ERR_ARG, "rnn: the nonlinearity must be tanh or relu (PyTorch's nn.RNN), got %d",
                               (int)act);
    return rnn_new(act == WEFT_ACT_RELU ? RNN_RELU : RNN_TANH, input, hidden, g);
}
