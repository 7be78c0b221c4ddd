// Sequence layers: LSTM, causal self-attention, transformer block.
// Outputs and all gradients are compared with PyTorch (tests/data/seq_ref.txt,
// written by tests/data/gen_seq.py with the same weights, which the test loads
// into the modules by name); causality, prefix consistency, non-contiguous
// input, parameter names/shapes/init and bad arguments are checked directly.
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

// ---- the reference file ----
typedef struct ref_tensor {
    char name[96];
    int ndim;
    int64_t sizes[4];
    int64_t n;
    double *v;
} ref_tensor;
static ref_tensor *refs;
static int n_refs;

// tests/data/seq_ref.txt
static bool load_refs(void) {
    FILE *fp = wt_open_data("seq_ref.txt");
    if (!fp) return false;
    int c;
    while ((c = fgetc(fp)) != EOF) {
        if (c == '#' || c == '\n') { // comment or blank line
            while (c != '\n' && c != EOF) c = fgetc(fp);
            continue;
        }
        ungetc(c, fp);
        ref_tensor r = {0};
        if (fscanf(fp, "%95s %d", r.name, &r.ndim) != 2 || r.ndim < 0 || r.ndim > 4) break;
        r.n = 1;
        for (int d = 0; d < r.ndim; d++) {
            if (fscanf(fp, "%lld", (long long *)&r.sizes[d]) != 1) goto bad;
            r.n *= r.sizes[d];
        }
        r.v = malloc(sizeof(double) * (size_t)r.n);
        for (int64_t i = 0; i < r.n; i++)
            if (fscanf(fp, "%lf", &r.v[i]) != 1) {
                free(r.v);
                goto bad;
            }
        refs = realloc(refs, sizeof *refs * (size_t)(n_refs + 1));
        refs[n_refs++] = r;
    }
    fclose(fp);
    return n_refs > 0;
bad:
    fclose(fp);
    fprintf(stderr, "tests/data/seq_ref.txt: malformed entry\n");
    return false;
}

static void free_refs(void) {
    for (int i = 0; i < n_refs; i++) free(refs[i].v);
    free(refs);
    refs = NULL;
    n_refs = 0;
}

static const ref_tensor *ref_get(const char *tag, const char *what) {
    char name[320];
    snprintf(name, sizeof name, "%s/%s", tag, what);
    for (int i = 0; i < n_refs; i++)
        if (!strcmp(refs[i].name, name)) return &refs[i];
    fprintf(stderr, "reference %s missing\n", name);
    return NULL;
}

// An f32 tensor from a reference entry.
static weft_tensor *ref_tensor_f32(const ref_tensor *r) {
    if (!r) return NULL;
    float *v = malloc(sizeof(float) * (size_t)r->n);
    for (int64_t i = 0; i < r->n; i++) v[i] = (float)r->v[i];
    weft_tensor *t = weft_tensor_from_data(v, r->ndim, r->sizes, WEFT_F32);
    free(v);
    return t;
}

static bool same_shape(const weft_tensor *t, const ref_tensor *r) {
    if (!t || !r || weft_tensor_ndim(t) != r->ndim) return false;
    for (int d = 0; d < r->ndim; d++)
        if (weft_tensor_size(t, d) != r->sizes[d]) return false;
    return true;
}

// Loads the PyTorch weights into m by name (every parameter of m must have one,
// and every weight in the file must name a parameter of m), runs x, backpropagates
// dy, and compares y, dx and every parameter gradient.
static void check_against_torch(const char *tag, weft_module *m, double tol) {
    char name[128], what[160];
    int np = weft_module_param_count(m), n_file = 0;
    size_t tl = strlen(tag); // "tag/...": "block" is not "block_tanh"
    for (int i = 0; i < n_refs; i++)
        if (!strncmp(refs[i].name, tag, tl) && refs[i].name[tl] == '/' && strstr(refs[i].name, "/param.")) n_file++;
    CHECK(np == n_file);
    for (int i = 0; i < np; i++) {
        weft_tensor *p = weft_module_param_at(m, i, name, sizeof name);
        snprintf(what, sizeof what, "param.%s", name);
        const ref_tensor *r = ref_get(tag, what);
        CHECK(r && same_shape(p, r));
        if (!r || !same_shape(p, r)) continue;
        CHECK(weft_module_find(m, name) == p);
        weft_tensor *src = ref_tensor_f32(r);
        CHECK(weft_tensor_copy_(weft_module_find(m, name), src) == WEFT_OK);
        weft_tensor_free(src);
    }
    const ref_tensor *rx = ref_get(tag, "x"), *rdy = ref_get(tag, "dy"), *ry = ref_get(tag, "y"),
                     *rdx = ref_get(tag, "dx");
    if (!rx || !rdy || !ry || !rdx) {
        CHECK(!"reference entries present");
        return;
    }
    weft_tensor *x = ref_tensor_f32(rx), *dy = ref_tensor_f32(rdy);
    weft_tensor_set_requires_grad(x, true);
    weft_module_zero_grad(m);
    weft_tensor *y = weft_module_forward(m, x);
    CHECK(same_shape(y, ry));
    snprintf(what, sizeof what, "%s forward", tag);
    wt_check_values(what, y, ry->v, ry->n, tol);
    CHECK(weft_backward(y, dy, NULL) == WEFT_OK);
    snprintf(what, sizeof what, "%s dx", tag);
    wt_check_values(what, weft_tensor_grad(x), rdx->v, rdx->n, tol);
    for (int i = 0; i < np; i++) {
        weft_tensor *p = weft_module_param_at(m, i, name, sizeof name);
        char gname[160];
        snprintf(gname, sizeof gname, "grad.%s", name);
        const ref_tensor *r = ref_get(tag, gname);
        if (!r) {
            CHECK(!"gradient reference present");
            continue;
        }
        snprintf(what, sizeof what, "%s d%s", tag, name);
        wt_check_values(what, weft_tensor_grad(p), r->v, r->n, tol);
    }
    weft_tensor_free(x);
    weft_tensor_free(dy);
    weft_tensor_free(y);
}

// ---- vs PyTorch ----
// Every path of the layer (WEFT_LSTM_PATH: the fused recurrence lstm_seq,
// the per-step fused cell, the composed cell) against PyTorch's numbers.
static void test_lstm_torch(void) {
    static const char *paths[3] = {"seq", "cell", "composed"};
    for (int k = 0; k < 3; k++) {
        setenv("WEFT_LSTM_PATH", paths[k], 1);
        weft_generator *g = weft_generator_create(1);
        weft_module *m = weft_nn_lstm(3, 4, g);
        CHECK(m && !strcmp(weft_module_kind(m), "lstm"));
        check_against_torch("lstm", m, 1e-5);
        weft_module_free(m);
        weft_generator_free(g);
    }
    unsetenv("WEFT_LSTM_PATH");
}

// nn.GRU and nn.RNN (tanh, relu), the layer alone and folded into an embedding before it (the fold's input
// gates come from the table; the same numbers).
static void test_gru_rnn_torch(void) {
    static const char *tags[3] = {"gru", "rnn_tanh", "rnn_relu"};
    for (int k = 0; k < 3; k++) {
        weft_generator *g = weft_generator_create(4);
        weft_module *m = k == 0 ? weft_nn_gru(3, 4, g) : weft_nn_rnn(3, 4, k == 1 ? WEFT_ACT_TANH : WEFT_ACT_RELU, g);
        CHECK(m && !strcmp(weft_module_kind(m), k == 0 ? "gru" : "rnn"));
        check_against_torch(tags[k], m, 1e-5);
        weft_module_free(m);
        weft_generator_free(g);
    }
}

// An embedding then a recurrent layer: folded (the input gates of each table row once) and not
// (WEFT_LSTM_FOLD=0) give the same outputs and gradients, for all three kinds.
static void test_fold(void) {
    for (int k = 0; k < 3; k++) {
        double y[2][2 * 9 * 5], ge[2][6 * 4], gw[2][4 * 5 * 4]; // gw: up to G = 4 (the LSTM)
        for (int fold = 0; fold < 2; fold++) {
            if (!fold) setenv("WEFT_LSTM_FOLD", "0", 1);
            weft_generator *g = weft_generator_create(21);
            weft_module *s = weft_nn_sequential();
            weft_module *rec = k == 0 ? weft_nn_gru(4, 5, g) : k == 1 ? weft_nn_rnn(4, 5, WEFT_ACT_TANH, g)
                                                                      : weft_nn_lstm(4, 5, g);
            CHECK(weft_nn_sequential_append(s, weft_nn_embedding(6, 4, g)) == WEFT_OK);
            CHECK(weft_nn_sequential_append(s, rec) == WEFT_OK);
            int64_t idx[18] = {0, 5, 2, 2, 1, 3, 4, 0, 5, 1, 1, 2, 3, 0, 4, 5, 2, 3};
            weft_tensor *x = weft_tensor_from_data(idx, WEFT_DIMS(2, 9), WEFT_I64);
            weft_tensor *out = weft_module_forward(s, x);
            CHECK(out && weft_tensor_size(out, 2) == 5);
            weft_tensor *l = out ? weft_sum(out, 0, NULL, false) : NULL;
            weft_tensor *sq = out ? weft_mul(out, out) : NULL, *l2 = sq ? weft_sum(sq, 0, NULL, false) : NULL;
            CHECK(l2 && weft_backward(l2, NULL, NULL) == WEFT_OK);
            if (out) weft_tensor_to_f64(out, y[fold], 2 * 9 * 5);
            weft_tensor *gE = weft_tensor_grad(weft_module_find(s, "0.weight"));
            weft_tensor *gW = weft_tensor_grad(weft_module_find(s, "1.weight_ih"));
            CHECK(gE && gW);
            int64_t G = k == 0 ? 3 : k == 1 ? 1 : 4;
            if (gE) weft_tensor_to_f64(gE, ge[fold], 6 * 4);
            if (gW) weft_tensor_to_f64(gW, gw[fold], G * 5 * 4);
            weft_tensor_free(l);
            weft_tensor_free(sq);
            weft_tensor_free(l2);
            weft_tensor_free(out);
            weft_tensor_free(x);
            weft_module_free(s);
            weft_generator_free(g);
            unsetenv("WEFT_LSTM_FOLD");
            if (fold) {
                double dy = 0, dE = 0, dW = 0;
                for (int i = 0; i < 90; i++) dy = fmax(dy, fabs(y[0][i] - y[1][i]));
                for (int i = 0; i < 24; i++) dE = fmax(dE, fabs(ge[0][i] - ge[1][i]));
                for (int i = 0; i < G * 20; i++) dW = fmax(dW, fabs(gw[0][i] - gw[1][i]));
                CHECK(dy < 1e-5 && dE < 1e-4 && dW < 1e-4);
            }
        }
    }
}

// Finite differences in f64 through the GRU and the RNN: the module's output against x and every parameter.
static weft_tensor *module_fn(weft_tensor *const *in, void *user) { return weft_module_forward(user, in[0]); }

// q(x) = sum(dL/dx), L = sum(y*y): its gradient by double backward against central differences of q.
static double grad_sum(weft_module *m, weft_tensor *x, weft_tensor **gq) {
    weft_tensor *y = weft_module_forward(m, x), *yy = y ? weft_mul(y, y) : NULL;
    weft_tensor *l = yy ? weft_sum(yy, 0, NULL, false) : NULL;
    weft_backward_opts o = {.create_graph = gq != NULL};
    double q = NAN;
    if (l && weft_backward(l, NULL, &o) == WEFT_OK) {
        weft_tensor *gx = weft_tensor_ref(weft_tensor_grad(x));
        weft_tensor_zero_grad(x);
        for (int p = 0; p < weft_module_param_count(m); p++) weft_tensor_zero_grad(weft_module_param_at(m, p, NULL, 0));
        weft_tensor *s = weft_sum(gx, 0, NULL, false);
        q = s ? weft_tensor_item(s) : NAN;
        if (gq && s && weft_backward(s, NULL, NULL) == WEFT_OK) *gq = weft_tensor_ref(weft_tensor_grad(x));
        weft_tensor_free(s);
        weft_tensor_free(gx);
    }
    weft_tensor_free(y);
    weft_tensor_free(yy);
    weft_tensor_free(l);
    return q;
}

static void test_gru_rnn_gradcheck(void) {
    for (int k = 0; k < 3; k++) {
        weft_generator *g = weft_generator_create(31 + k);
        weft_module *m = k == 0 ? weft_nn_gru(3, 4, g) : weft_nn_rnn(3, 4, k == 1 ? WEFT_ACT_TANH : WEFT_ACT_RELU, g);
        CHECK(m && weft_module_to_dtype(m, WEFT_F64) == WEFT_OK);
        weft_tensor *x = wt_rand64(3, (const int64_t[]){2, 4, 3}, -1, 1, 70 + k, true);
        weft_tensor *in[5] = {x, weft_module_find(m, "weight_ih"), weft_module_find(m, "weight_hh"),
                              weft_module_find(m, "bias_ih"), weft_module_find(m, "bias_hh")};
        CHECK_GRAD(module_fn, 5, in, m);
        if (k < 2) { // second order (relu's second derivative is 0 almost everywhere: tanh and the GRU)
            weft_tensor *gq = NULL;
            grad_sum(m, x, &gq);
            weft_tensor_zero_grad(x);
            CHECK(gq != NULL);
            double an[24] = {0}, fd[24];
            if (gq) weft_tensor_to_f64(gq, an, 24);
            double *xv = weft_tensor_data(x), err = 0, eps = 1e-5; // contiguous f64 on the CPU
            for (int i = 0; i < 24 && xv; i++) {
                double x0 = xv[i];
                xv[i] = x0 + eps;
                double qp = grad_sum(m, x, NULL);
                xv[i] = x0 - eps;
                double qm = grad_sum(m, x, NULL);
                xv[i] = x0;
                fd[i] = (qp - qm) / (2 * eps);
                err = fmax(err, fabs(fd[i] - an[i]) / (1 + fabs(fd[i])));
            }
            CHECK(xv && err < 1e-6);
            weft_tensor_free(gq);
        }
        weft_tensor_free(x);
        weft_module_free(m);
        weft_generator_free(g);
    }
}

static void test_attn_torch(void) {
    weft_generator *g = weft_generator_create(2);
    weft_module *m = weft_nn_causal_self_attention(8, 2, g);
    CHECK(m && !strcmp(weft_module_kind(m), "causal_self_attention"));
    check_against_torch("attn", m, 1e-5);
    weft_module_free(m);
    weft_generator_free(g);
}

static void test_block_torch(void) {
    weft_generator *g = weft_generator_create(3);
    weft_module *m = weft_nn_transformer_block(8, 2, g);
    CHECK(m && !strcmp(weft_module_kind(m), "transformer_block"));
    check_against_torch("block", m, 1e-5);
    weft_module_free(m);
    weft_generator_free(g);
}

// GPT-2's block: the mlp's GELU in its tanh form (PyTorch's F.gelu(approximate='tanh')), the rest as above.
static void test_block_tanh_torch(void) {
    weft_generator *g = weft_generator_create(3);
    weft_module *m = weft_nn_transformer_block_act(8, 2, WEFT_ACT_GELU_TANH, g);
    CHECK(m && !strcmp(weft_module_kind(m), "transformer_block"));
    check_against_torch("block_tanh", m, 1e-5);
    weft_module_free(m);
    weft_generator_free(g);
    CHECK(weft_nn_transformer_block_act(8, 2, WEFT_ACT_RELU, NULL) == NULL && strstr(weft_last_error(), "gelu"));
    CHECK(weft_nn_transformer_act(8, 2, 0, WEFT_ACT_GELU_TANH, NULL) == NULL);
}

// ---- names, shapes, init ----
static void check_names(weft_module *m, int n, const char *const *names, const int64_t (*shapes)[2]) {
    CHECK(weft_module_param_count(m) == n);
    char name[128];
    for (int i = 0; i < n && i < weft_module_param_count(m); i++) {
        weft_tensor *p = weft_module_param_at(m, i, name, sizeof name);
        if (strcmp(name, names[i])) {
            fprintf(stderr, "param %d is '%s', expected '%s'\n", i, name, names[i]);
            CHECK(!"parameter name");
        }
        CHECK(weft_tensor_size(p, 0) == shapes[i][0]);
        CHECK(shapes[i][1] ? weft_tensor_ndim(p) == 2 && weft_tensor_size(p, 1) == shapes[i][1]
                           : weft_tensor_ndim(p) == 1);
        CHECK(weft_tensor_requires_grad(p) && weft_tensor_dtype(p) == WEFT_F32);
    }
}

static void test_names_and_init(void) {
    weft_generator *g = weft_generator_create(9);
    weft_module *lstm = weft_nn_lstm(5, 6, g);
    static const char *lnames[] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
    check_names(lstm, 4, lnames, (const int64_t[][2]){{24, 5}, {24, 6}, {24, 0}, {24, 0}});
    // PyTorch's init: every parameter ~ U(-1/sqrt(H), 1/sqrt(H)), and spread out
    double k = 1 / sqrt(6.0);
    for (int i = 0; i < 4; i++) {
        weft_tensor *p = weft_module_param_at(lstm, i, NULL, 0);
        int64_t n = weft_tensor_numel(p);
        double *v = malloc(sizeof(double) * (size_t)n), lo = 1, hi = -1;
        weft_tensor_to_f64(p, v, n);
        for (int64_t j = 0; j < n; j++) lo = fmin(lo, v[j]), hi = fmax(hi, v[j]);
        CHECK(lo >= -k && hi <= k && hi - lo > k);
        free(v);
    }
    weft_module *blk = weft_nn_transformer_block(16, 4, g);
    static const char *bnames[] = {"ln1.weight",     "ln1.bias",        "attn.qkv.weight", "attn.qkv.bias",
                                   "attn.proj.weight", "attn.proj.bias", "ln2.weight",      "ln2.bias",
                                   "mlp.fc.weight",  "mlp.fc.bias",     "mlp.proj.weight", "mlp.proj.bias"};
    check_names(blk, 12, bnames,
                (const int64_t[][2]){{16, 0}, {16, 0}, {48, 16}, {48, 0}, {16, 16}, {16, 0},
                                     {16, 0}, {16, 0}, {64, 16}, {64, 0}, {16, 64}, {16, 0}});
    CHECK(weft_module_num_elements(blk) == 4 * 16 + 48 * 17 + 16 * 17 + 64 * 17 + 16 * 65);
    double ones[16], zeros[16] = {0};
    for (int i = 0; i < 16; i++) ones[i] = 1;
    wt_check_values("ln2.weight init", weft_module_find(blk, "ln2.weight"), ones, 16, 0);
    wt_check_values("ln1.bias init", weft_module_find(blk, "ln1.bias"), zeros, 16, 0);
    CHECK(!strcmp(weft_module_kind(weft_module_child_at(blk, 3)), "mlp"));
    // seeded: the same seed gives the same weights
    weft_generator *g1 = weft_generator_create(5), *g2 = weft_generator_create(5);
    weft_module *a = weft_nn_transformer_block(8, 2, g1), *b = weft_nn_transformer_block(8, 2, g2);
    weft_tensor *wa = weft_module_find(a, "mlp.fc.weight"), *wb = weft_module_find(b, "mlp.fc.weight");
    weft_tensor *eq = weft_eq(wa, wb);
    weft_tensor *eqd = weft_cast(eq, WEFT_F64);
    weft_tensor *s = weft_sum(eqd, 0, NULL, false);
    weft_tensor_free(eq);
    weft_tensor_free(eqd);
    CHECK(s && weft_tensor_item(s) == (double)weft_tensor_numel(wa));
    weft_tensor_free(s);
    weft_module_free(a);
    weft_module_free(b);
    weft_generator_free(g1);
    weft_generator_free(g2);
    weft_module_free(lstm);
    weft_module_free(blk);
    weft_generator_free(g);
}

// ---- causality ----
// Changing x at time t0 leaves outputs before t0 unchanged and changes t0 itself;
// running only the prefix x[:, :t0+1] gives the same outputs as the full sequence there.
static void check_causal(weft_module *m, int64_t B, int64_t T, int64_t C, int64_t Cout, int64_t t0) {
    weft_tensor *x = wt_keep(weft_tensor_randn(WEFT_DIMS(B, T, C), WEFT_F32, NULL));
    weft_tensor *y1 = wt_keep(weft_module_forward(m, x));
    weft_tensor *x2 = wt_keep(weft_tensor_clone(x));
    weft_tensor *at = wt_keep(weft_narrow(x2, 1, t0, 1));
    weft_tensor_fill_(at, 3.0);
    weft_tensor *y2 = wt_keep(weft_module_forward(m, x2));
    CHECK(y1 && y2);
    if (!y1 || !y2) return;
    int64_t n = B * T * Cout;
    double *a = malloc(sizeof(double) * (size_t)n), *b = malloc(sizeof(double) * (size_t)n);
    weft_tensor_to_f64(y1, a, n);
    weft_tensor_to_f64(y2, b, n);
    double before = 0, at_t0 = 0;
    for (int64_t i = 0; i < B; i++)
        for (int64_t t = 0; t <= t0; t++)
            for (int64_t c = 0; c < Cout; c++) {
                double d = fabs(a[(i * T + t) * Cout + c] - b[(i * T + t) * Cout + c]);
                if (t < t0) before = fmax(before, d);
                else at_t0 = fmax(at_t0, d);
            }
    CHECK(before == 0.0);
    CHECK(at_t0 > 1e-3);
    // prefix run: the mask is rebuilt for the shorter T
    weft_tensor *xp = wt_keep(weft_narrow(x, 1, 0, t0 + 1));
    weft_tensor *yp = wt_keep(weft_module_forward(m, xp));
    CHECK(yp && weft_tensor_size(yp, 1) == t0 + 1 && weft_tensor_size(yp, 2) == Cout);
    double *ref = malloc(sizeof(double) * (size_t)(B * (t0 + 1) * Cout));
    for (int64_t i = 0; i < B; i++)
        for (int64_t t = 0; t <= t0; t++)
            for (int64_t c = 0; c < Cout; c++) ref[(i * (t0 + 1) + t) * Cout + c] = a[(i * T + t) * Cout + c];
    wt_check_values("prefix run", yp, ref, B * (t0 + 1) * Cout, 1e-5);
    free(ref);
    free(a);
    free(b);
}

static void test_causality(void) {
    weft_manual_seed(11);
    weft_module *attn = weft_nn_causal_self_attention(12, 3, NULL);
    weft_module *blk = weft_nn_transformer_block(12, 3, NULL);
    weft_module *lstm = weft_nn_lstm(12, 7, NULL);
    weft_module *gru = weft_nn_gru(12, 7, NULL), *rnn = weft_nn_rnn(12, 7, WEFT_ACT_TANH, NULL);
    check_causal(attn, 2, 9, 12, 12, 4);
    check_causal(blk, 3, 7, 12, 12, 5);
    check_causal(lstm, 2, 8, 12, 7, 3);
    check_causal(gru, 2, 8, 12, 7, 3);
    check_causal(rnn, 2, 8, 12, 7, 0);
    check_causal(attn, 1, 6, 12, 12, 0); // t0 = 0: only position 0 changes first
    wt_drop_all();
    weft_module_free(attn);
    weft_module_free(blk);
    weft_module_free(lstm);
    weft_module_free(gru);
    weft_module_free(rnn);
}

// ---- non-contiguous input and T = 1 ----
static void test_noncontiguous(void) {
    weft_manual_seed(12);
    weft_module *mods[5] = {weft_nn_lstm(8, 5, NULL), weft_nn_causal_self_attention(8, 4, NULL),
                            weft_nn_transformer_block(8, 4, NULL), weft_nn_gru(8, 5, NULL),
                            weft_nn_rnn(8, 5, WEFT_ACT_RELU, NULL)};
    int64_t cout[5] = {5, 8, 8, 5, 5};
    // x (B,T,C) as a transposed view of a (T,B,C) tensor
    weft_tensor *base = wt_keep(weft_tensor_randn(WEFT_DIMS(6, 3, 8), WEFT_F32, NULL));
    weft_tensor *xv = wt_keep(weft_transpose(base, 0, 1));
    weft_tensor *xc = wt_keep(weft_tensor_contiguous(xv));
    CHECK(!weft_tensor_is_contiguous(xv));
    for (int i = 0; i < 5; i++) {
        weft_tensor *y1 = wt_keep(weft_module_forward(mods[i], xv)), *y2 = wt_keep(weft_module_forward(mods[i], xc));
        CHECK(y1 && weft_tensor_size(y1, 0) == 3 && weft_tensor_size(y1, 1) == 6 && weft_tensor_size(y1, 2) == cout[i]);
        double v[3 * 6 * 8];
        if (y2 && weft_tensor_to_f64(y2, v, 3 * 6 * cout[i]) == WEFT_OK)
            wt_check_values("non-contiguous input", y1, v, 3 * 6 * cout[i], 1e-6);
        // T = 1
        weft_tensor *x1 = wt_keep(weft_narrow(xc, 1, 2, 1));
        weft_tensor *y3 = wt_keep(weft_module_forward(mods[i], x1));
        CHECK(y3 && weft_tensor_size(y3, 1) == 1 && weft_tensor_size(y3, 2) == cout[i]);
    }
    wt_drop_all();
    for (int i = 0; i < 5; i++) weft_module_free(mods[i]);
}

// ---- bad arguments ----
static void test_bad_args(void) {
    CHECK(weft_nn_causal_self_attention(10, 3, NULL) == NULL && strstr(weft_last_error(), "causal_self_attention"));
    CHECK(weft_nn_causal_self_attention(8, 0, NULL) == NULL && strstr(weft_last_error(), "causal_self_attention"));
    CHECK(weft_nn_transformer_block(10, 4, NULL) == NULL && strstr(weft_last_error(), "transformer_block"));
    CHECK(weft_nn_transformer_block(-8, 2, NULL) == NULL && strstr(weft_last_error(), "transformer_block"));
    CHECK(weft_nn_lstm(0, 4, NULL) == NULL && strstr(weft_last_error(), "lstm"));
    CHECK(weft_nn_lstm(3, -1, NULL) == NULL && strstr(weft_last_error(), "lstm"));
    CHECK(weft_nn_gru(0, 4, NULL) == NULL && strstr(weft_last_error(), "gru"));
    CHECK(weft_nn_gru(3, INT64_MAX / 2, NULL) == NULL && strstr(weft_last_error(), "gru"));
    CHECK(weft_nn_rnn(3, -2, WEFT_ACT_TANH, NULL) == NULL && strstr(weft_last_error(), "rnn"));
    CHECK(weft_nn_rnn(3, 4, WEFT_ACT_GELU, NULL) == NULL && strstr(weft_last_error(), "tanh or relu"));
    weft_module *gru = weft_nn_gru(4, 3, NULL), *rnn = weft_nn_rnn(4, 3, WEFT_ACT_RELU, NULL);
    weft_tensor *x35 = weft_tensor_ones(WEFT_DIMS(3, 5), WEFT_F32), *x256 = weft_tensor_ones(WEFT_DIMS(2, 5, 6), WEFT_F32);
    weft_tensor *x204 = weft_tensor_ones(WEFT_DIMS(2, 0, 4), WEFT_F32);
    CHECK(weft_module_forward(gru, x35) == NULL && strstr(weft_last_error(), "gru"));
    CHECK(weft_module_forward(gru, x256) == NULL && strstr(weft_last_error(), "gru"));
    CHECK(weft_module_forward(rnn, x204) == NULL && strstr(weft_last_error(), "rnn: empty input"));
    weft_tensor_free(x35);
    weft_tensor_free(x256);
    weft_tensor_free(x204);
    weft_module_free(gru);
    weft_module_free(rnn);

    weft_module *lstm = weft_nn_lstm(4, 3, NULL);
    weft_module *attn = weft_nn_causal_self_attention(8, 2, NULL);
    weft_module *blk = weft_nn_transformer_block(8, 2, NULL);
    weft_tensor *x2d = weft_tensor_ones(WEFT_DIMS(5, 8), WEFT_F32);
    weft_tensor *x4d = weft_tensor_ones(WEFT_DIMS(1, 2, 5, 8), WEFT_F32);
    weft_tensor *xc = weft_tensor_ones(WEFT_DIMS(2, 5, 6), WEFT_F32); // wrong feature size
    CHECK(weft_module_forward(attn, x2d) == NULL && strstr(weft_last_error(), "causal_self_attention"));
    CHECK(weft_module_forward(attn, x4d) == NULL && strstr(weft_last_error(), "causal_self_attention"));
    CHECK(weft_module_forward(attn, xc) == NULL && strstr(weft_last_error(), "causal_self_attention"));
    CHECK(weft_module_forward(blk, x2d) == NULL && strstr(weft_last_error(), "transformer_block"));
    CHECK(weft_module_forward(blk, xc) == NULL && strstr(weft_last_error(), "transformer_block"));
    CHECK(weft_module_forward(lstm, x2d) == NULL && strstr(weft_last_error(), "lstm"));
    CHECK(weft_module_forward(lstm, xc) == NULL && strstr(weft_last_error(), "lstm"));
    // f64 input against f32 weights: an error from an op, not a crash
    weft_tensor *x64 = weft_tensor_ones(WEFT_DIMS(2, 5, 8), WEFT_F64);
    CHECK(weft_module_forward(blk, x64) == NULL);
    CHECK(weft_module_forward(attn, x64) == NULL);
    weft_tensor *x64l = weft_tensor_ones(WEFT_DIMS(2, 5, 4), WEFT_F64);
    CHECK(weft_module_forward(lstm, x64l) == NULL);
    weft_tensor *xi = weft_tensor_ones(WEFT_DIMS(2, 5, 8), WEFT_I32);
    CHECK(weft_module_forward(attn, xi) == NULL && strstr(weft_last_error(), "causal_self_attention"));
    // still usable afterwards
    weft_tensor *ok = weft_tensor_ones(WEFT_DIMS(2, 5, 8), WEFT_F32);
    weft_tensor *y = weft_module_forward(blk, ok);
    CHECK(y != NULL);
    weft_tensor_free(y);
    weft_tensor_free(ok);
    weft_tensor_free(xi);
    weft_tensor_free(x64);
    weft_tensor_free(x64l);
    weft_tensor_free(x2d);
    weft_tensor_free(x4d);
    weft_tensor_free(xc);
    weft_module_free(lstm);
    weft_module_free(attn);
    weft_module_free(blk);
}

int main(void) {
    if (!load_refs()) {
        CHECK(!"reference file tests/data/seq_ref.txt loads");
        return wt_summary();
    }
    RUN(test_lstm_torch);
    RUN(test_gru_rnn_torch);
    RUN(test_fold);
    RUN(test_gru_rnn_gradcheck);
    RUN(test_attn_torch);
    RUN(test_block_torch);
    RUN(test_block_tanh_torch);
    RUN(test_names_and_init);
    RUN(test_causality);
    RUN(test_noncontiguous);
    RUN(test_bad_args);
    free_refs();
    return wt_summary();
}
