// Graph files with COND / WHILE subgraphs and FUSED programs: save -> load ->
// run is bit-identical to the original graph (cond on both predicate values, a
// while_loop, a cond with its symbolic gradient, an optimised traced MLP
// training step with fused nodes, trained further after loading), a variable
// shared by a parent and its branches loads as ONE tensor, a fresh process
// (fork + exec of this binary) loads and runs the files, and corrupted files
// are errors naming the node. References: the original graph (bit-equal) and
// closed forms.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <weft/graph_passes.h>

#include "../../src/graph/graph_impl.h" // the while_grad flag of gradient loops

#include "graph_test.h"
#include "weft_test.h"

static char g_dir[256];

static const char *tmp_path(const char *name, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s", g_dir, name);
    return buf;
}

static weft_tensor *f64v(const double *v, int n) { return weft_tensor_from_data(v, 1, (int64_t[]){n}, WEFT_F64); }

// Deterministic feeds for every placeholder of g (by node order): bool ones get
// `pred`, numbers LCG values; so two processes feed the same bits.
static int feeds_for(const weft_graph *g, bool pred, weft_value *fv, weft_tensor **ft, int max) {
    int n = 0;
    for (int i = 0; i < weft_graph_node_count(g) && n < max; i++) {
        weft_node_id id = {i};
        if (weft_graph_node_kind(g, id) != WEFT_NODE_PLACEHOLDER) continue;
        weft_value v = weft_graph_node_output(g, id, 0);
        weft_dtype dt = weft_graph_value_dtype(g, v);
        int nd = weft_graph_value_ndim(g, v);
        const int64_t *sz = weft_graph_value_sizes(g, v);
        weft_tensor *t;
        if (dt == WEFT_BOOL) {
            t = weft_tensor_scalar(pred, WEFT_BOOL);
        } else {
            int64_t numel = 1;
            for (int d = 0; d < nd; d++) numel *= sz[d];
            double *vals = malloc(sizeof(double) * (size_t)(numel ? numel : 1));
            wt_vals(vals, numel, -1, 1, 100 + (uint64_t)i);
            weft_tensor *d64 = weft_tensor_from_data(vals, nd, sz, WEFT_F64);
            t = dt == WEFT_F64 ? d64 : weft_cast(d64, dt);
            if (t != d64) weft_tensor_free(d64);
            free(vals);
        }
        fv[n] = v;
        ft[n++] = t;
    }
    return n;
}

// Runs g on feeds_for(pred) fetching values ids[0..n); the fetched elements as
// doubles (malloc'd, *len of them), NULL on error.
static double *run_ids(weft_graph *g, bool pred, int n, const int32_t *ids, int *len) {
    weft_value fv[16], fetch[16];
    weft_tensor *ft[16], *out[16] = {0};
    int nf = feeds_for(g, pred, fv, ft, 16);
    for (int k = 0; k < n; k++) fetch[k] = (weft_value){ids[k]};
    double *vals = NULL;
    int total = 0;
    if (weft_graph_run(g, nf, fv, ft, n, fetch, out, 0, NULL) == WEFT_OK) {
        for (int k = 0; k < n; k++) total += (int)weft_tensor_numel(out[k]);
        vals = malloc(sizeof(double) * (size_t)(total ? total : 1));
        int at = 0;
        for (int k = 0; k < n; k++) {
            weft_tensor_to_f64(out[k], vals + at, weft_tensor_numel(out[k]));
            at += (int)weft_tensor_numel(out[k]);
        }
    }
    for (int k = 0; k < n; k++) weft_tensor_free(out[k]);
    for (int k = 0; k < nf; k++) weft_tensor_free(ft[k]);
    *len = total;
    return vals;
}

// Runs a and b (same structure: value ids carry over) and checks bit-equal results.
static void check_same_run(const char *what, weft_graph *a, weft_graph *b, bool pred, int n, const int32_t *ids) {
    int na = 0, nb = 0;
    double *ra = run_ids(a, pred, n, ids, &na), *rb = run_ids(b, pred, n, ids, &nb);
    bool ok = ra && rb && na == nb && na > 0 && !memcmp(ra, rb, sizeof(double) * (size_t)na);
    if (!ok) fprintf(stderr, "%s (pred %d): runs differ or failed: %s\n", what, pred, weft_last_error());
    CHECK(ok);
    free(ra);
    free(rb);
}

static weft_graph *roundtrip(weft_graph *g, const char *name, const char *want_version) {
    char path[300];
    tmp_path(name, path, sizeof path);
    CHECK(weft_graph_save(g, path) == WEFT_OK);
    weft_safetensors *st = weft_safetensors_load(path);
    CHECK(st && !strcmp(weft_safetensors_meta(st, "version"), want_version));
    weft_safetensors_free(st);
    weft_graph *h = weft_graph_load(path);
    if (!h) fprintf(stderr, "load %s: %s\n", name, weft_last_error());
    CHECK(h && weft_graph_node_count(h) == weft_graph_node_count(g) && weft_graph_value_count(h) == weft_graph_value_count(g));
    return h;
}

// ---- cond: out = p ? sum(exp(a) * w) : sum(a * w * w), plus its gradient w.r.t. a and w ----
static weft_graph *cond_grad_graph(int32_t ids[3], bool with_grad) {
    weft_graph *g = weft_graph_new(), *tg = weft_graph_new(), *eg = weft_graph_new();
    weft_value p = weft_graph_placeholder(g, "p", 0, NULL, WEFT_BOOL);
    weft_value a = weft_graph_placeholder(g, "a", 1, (int64_t[]){3}, WEFT_F64);
    weft_tensor *w0 = f64v((double[]){0.5, -1.5, 2.0}, 3);
    weft_value w = weft_graph_variable(g, "w", w0);
    weft_tensor_free(w0);
    weft_value ta = weft_graph_placeholder(tg, "a", 1, (int64_t[]){3}, WEFT_F64);
    weft_value tw = weft_graph_placeholder(tg, "w", 1, (int64_t[]){3}, WEFT_F64);
    weft_value to = sum_all(tg, op2(tg, "mul", op1(tg, "exp", ta), tw));
    weft_value ea = weft_graph_placeholder(eg, "a", 1, (int64_t[]){3}, WEFT_F64);
    weft_value ew = weft_graph_placeholder(eg, "w", 1, (int64_t[]){3}, WEFT_F64);
    weft_value eo = sum_all(eg, op2(eg, "mul", op2(eg, "mul", ea, ew), ew));
    weft_value out;
    CHECK(weft_graph_cond(g, "pick", p, 2, (weft_value[]){a, w}, tg, &to, eg, &eo, 1, &out) == WEFT_OK);
    ids[0] = out.id;
    if (with_grad) {
        weft_value gr[2];
        CHECK(weft_graph_gradients(g, out, 2, (weft_value[]){a, w}, gr) == WEFT_OK);
        ids[1] = gr[0].id;
        ids[2] = gr[1].id;
    }
    return g;
}

static void test_cond_roundtrip(void) {
    int32_t ids[3];
    weft_graph *g = cond_grad_graph(ids, false);
    weft_graph *h = roundtrip(g, "cond.wgraph", "2");
    if (h) {
        CHECK(weft_graph_node_kind(h, weft_graph_find_node(h, "pick")) == WEFT_NODE_COND);
        check_same_run("cond", g, h, true, 1, ids);
        check_same_run("cond", g, h, false, 1, ids);
        // closed form on the loaded graph
        for (int pv = 0; pv < 2; pv++) {
            int n = 0;
            double *r = run_ids(h, pv, 1, ids, &n), av[3], want = 0, wv[3] = {0.5, -1.5, 2.0};
            wt_vals(av, 3, -1, 1, 100 + 1); // "a" is node 1
            for (int k = 0; k < 3; k++) want += pv ? exp(av[k]) * wv[k] : av[k] * wv[k] * wv[k];
            CHECK(r && n == 1);
            if (r) CHECK_NEAR(r[0], want, 1e-12);
            free(r);
        }
    }
    weft_graph_free(h);
    weft_graph_free(g);
}

static void test_cond_gradient_roundtrip(void) {
    int32_t ids[3];
    weft_graph *g = cond_grad_graph(ids, true);
    int n_cond = 0;
    for (int i = 0; i < weft_graph_node_count(g); i++) n_cond += weft_graph_node_kind(g, (weft_node_id){i}) == WEFT_NODE_COND;
    CHECK(n_cond >= 2); // the forward cond and the gradient cond
    weft_graph *h = roundtrip(g, "cond_grad.wgraph", "2");
    if (h) {
        check_same_run("cond gradient", g, h, true, 3, ids);
        check_same_run("cond gradient", g, h, false, 3, ids);
        double av[3], wv[3] = {0.5, -1.5, 2.0};
        wt_vals(av, 3, -1, 1, 101);
        for (int pv = 0; pv < 2; pv++) {
            int n = 0;
            double *r = run_ids(h, pv, 3, ids, &n);
            CHECK(r && n == 7);
            for (int k = 0; r && k < 3; k++) {
                CHECK_NEAR(r[1 + k], pv ? exp(av[k]) * wv[k] : wv[k] * wv[k], 1e-12);     // d/da
                CHECK_NEAR(r[4 + k], pv ? exp(av[k]) : 2 * av[k] * wv[k], 1e-12);         // d/dw
            }
            free(r);
        }
    }
    weft_graph_free(h);
    weft_graph_free(g);
}

// ---- while_loop: (i, x) -> while i < 5: (i + 1, 1.5 x + i) ----
// Builds it into a new graph: *x0 is the x placeholder, o[2] the loop's outputs.
static weft_graph *while_graph(weft_value *x0, weft_value o[2]) {
    weft_graph *g = weft_graph_new(), *cg = weft_graph_new(), *bg = weft_graph_new();
    weft_value i0 = weft_graph_placeholder(g, "i", 0, NULL, WEFT_F64);
    *x0 = weft_graph_placeholder(g, "x", 1, (int64_t[]){4}, WEFT_F64);
    weft_value ci = weft_graph_placeholder(cg, "i", 0, NULL, WEFT_F64);
    weft_graph_placeholder(cg, "x", 1, (int64_t[]){4}, WEFT_F64);
    weft_value pr = op2(cg, "lt", ci, cst(cg, 5));
    weft_value bi = weft_graph_placeholder(bg, "i", 0, NULL, WEFT_F64);
    weft_value bx = weft_graph_placeholder(bg, "x", 1, (int64_t[]){4}, WEFT_F64);
    weft_value bo[2] = {scal(bg, "add_scalar", bi, 1.0), op2(bg, "add", scal(bg, "mul_scalar", bx, 1.5), bi)};
    CHECK(weft_graph_while_loop(g, "loop", cg, pr, bg, bo, 2, (weft_value[]){i0, *x0}, o, 77) == WEFT_OK);
    return g;
}

static void test_while_roundtrip(void) {
    weft_value x0, o[2];
    weft_graph *g = while_graph(&x0, o), *cg, *bg;
    weft_value i0, ci, pr, bi, bo[2];
    int32_t ids[2] = {o[0].id, o[1].id};
    weft_graph *h = roundtrip(g, "while.wgraph", "2");
    if (h) {
        check_same_run("while", g, h, true, 2, ids);
        // closed form: the feed for i is wt_vals(seed 100) in [-1, 1)
        double iv, xv[4];
        wt_vals(&iv, 1, -1, 1, 100);
        wt_vals(xv, 4, -1, 1, 101);
        int iters = 0;
        for (double i = iv; i < 5; i += 1, iters++)
            for (int k = 0; k < 4; k++) xv[k] = xv[k] * 1.5 + i;
        int n = 0;
        double *r = run_ids(h, true, 2, ids, &n);
        CHECK(r && n == 5 && iters >= 5);
        if (r) {
            CHECK_NEAR(r[0], iv + iters, 0);
            for (int k = 0; k < 4; k++) CHECK_NEAR(r[1 + k], xv[k], 1e-12);
        }
        free(r);
    }
    weft_graph_free(h);
    weft_graph_free(g);
    // max_iterations survives: a loop that needs 5+ iterations with a bound of 3 fails after loading
    g = weft_graph_new(), cg = weft_graph_new(), bg = weft_graph_new();
    i0 = weft_graph_placeholder(g, "i", 0, NULL, WEFT_F64);
    ci = weft_graph_placeholder(cg, "i", 0, NULL, WEFT_F64);
    pr = op2(cg, "lt", ci, cst(cg, 5));
    bi = weft_graph_placeholder(bg, "i", 0, NULL, WEFT_F64);
    bo[0] = scal(bg, "add_scalar", bi, 1.0);
    CHECK(weft_graph_while_loop(g, "bounded", cg, pr, bg, bo, 1, &i0, o, 3) == WEFT_OK);
    h = roundtrip(g, "while_bounded.wgraph", "2");
    int n = 0;
    double *r = h ? run_ids(h, true, 1, &o[0].id, &n) : NULL;
    CHECK(h && !r && wt_error_has("bounded") && wt_error_has("max_iterations"));
    free(r);
    weft_graph_free(h);
    weft_graph_free(g);
}

// ---- the gradient of a while_loop (a WHILE flagged while_grad) survives a round trip ----
// (i, x) -> while i < 5: (i + 1, 1.5 x + i); y = sum(x_out * x_out); dy/dx0 = 2 x_out * 1.5^iters
static void test_while_gradient_roundtrip(void) {
    weft_value x0, o[2], gx;
    weft_graph *g = while_graph(&x0, o);
    weft_value y = sum_all(g, op2(g, "mul", o[1], o[1]));
    CHECK(weft_graph_gradients(g, y, 1, &x0, &gx) == WEFT_OK);
    bool flagged = false;
    for (int i = 0; i < g->n_nodes; i++) flagged |= g->nodes[i].kind == WEFT_NODE_WHILE && g->nodes[i].while_grad;
    CHECK(flagged);
    int32_t ids[2] = {o[1].id, gx.id};
    weft_graph *h = roundtrip(g, "while_grad.wgraph", "2");
    if (h) {
        bool kept = false;
        for (int i = 0; i < h->n_nodes; i++) kept |= h->nodes[i].kind == WEFT_NODE_WHILE && h->nodes[i].while_grad;
        CHECK(kept); // loaded as a gradient loop, not as a second forward loop
        check_same_run("while gradient", g, h, true, 2, ids);
        int n = 0;
        double *r = run_ids(h, true, 2, ids, &n);
        double iv;
        wt_vals(&iv, 1, -1, 1, 100);
        int iters = 0;
        for (double i = iv; i < 5; i += 1) iters++;
        CHECK(r && n == 8);
        for (int k = 0; r && k < 4; k++) CHECK_NEAR(r[4 + k], 2 * r[k] * pow(1.5, iters), 1e-9 * fabs(r[k]) + 1e-9);
        free(r);
    }
    weft_graph_free(h);
    weft_graph_free(g);
}

// ---- a gradient loop with more variables than a forward loop may have (m + f = 18 > WEFT_GRAPH_MAX_OUT) ----
// (i, x_1..x_8) -> while i < 3: (i + 1, 1.5 x_k + i); y = sum_k x_k,out^2; dy/dx_k,0 = 2 x_k,out 1.5^iters. Its
// body has 18 outputs; loading it once wrote them into an array of 16 (review).
static void test_while_gradient_wide(void) {
    enum { NX = 8 }; // (run_ids fetches at most 16 values)
    weft_graph *g = weft_graph_new(), *cg = weft_graph_new(), *bg = weft_graph_new();
    weft_value in[1 + NX], bo[1 + NX], o[1 + NX], gx[NX], bp[1 + NX], cp = WEFT_VALUE_NONE;
    for (int k = 0; k <= NX; k++) {
        char nm[16];
        snprintf(nm, sizeof nm, k ? "x%d" : "i", k);
        int nd = k ? 1 : 0;
        in[k] = weft_graph_placeholder(g, nm, nd, (int64_t[]){1}, WEFT_F64);
        weft_value c = weft_graph_placeholder(cg, nm, nd, (int64_t[]){1}, WEFT_F64);
        if (!k) cp = c;
        bp[k] = weft_graph_placeholder(bg, nm, nd, (int64_t[]){1}, WEFT_F64);
    }
    weft_value pr = op2(cg, "lt", cp, cst(cg, 3));
    bo[0] = scal(bg, "add_scalar", bp[0], 1.0);
    for (int k = 1; k <= NX; k++) bo[k] = op2(bg, "add", scal(bg, "mul_scalar", bp[k], 1.5), bp[0]);
    CHECK(weft_graph_while_loop(g, "wide", cg, pr, bg, bo, 1 + NX, in, o, 0) == WEFT_OK);
    weft_value y = sum_all(g, op2(g, "mul", o[1], o[1]));
    for (int k = 2; k <= NX; k++) y = op2(g, "add", y, sum_all(g, op2(g, "mul", o[k], o[k])));
    CHECK(weft_graph_gradients(g, y, NX, in + 1, gx) == WEFT_OK);
    int32_t ids[2 * NX];
    for (int k = 0; k < NX; k++) ids[k] = o[1 + k].id, ids[NX + k] = gx[k].id;
    weft_graph *h = roundtrip(g, "while_grad_wide.wgraph", "2");
    if (h) {
        check_same_run("wide while gradient", g, h, true, 2 * NX, ids);
        int n = 0;
        double *r = run_ids(h, true, 2 * NX, ids, &n), iv;
        wt_vals(&iv, 1, -1, 1, 100); // the feed of i, the first placeholder
        int iters = 0;
        for (double i = iv; i < 3; i += 1) iters++;
        CHECK(r && n == 2 * NX && iters >= 3);
        for (int k = 0; r && n == 2 * NX && k < NX; k++)
            CHECK_NEAR(r[NX + k], 2 * r[k] * pow(1.5, iters), 1e-9 * fabs(r[k]) + 1e-9);
        free(r);
    }
    weft_graph_free(h);
    weft_graph_free(g);
}

// ---- a variable shared by the parent and both branches ----
// then: out = a * v (v traced from the parent's variable tensor);
// else: out = assign_add(v, a) (writes the parent's variable).
static weft_graph *shared_graph(int32_t *out_id, int32_t *bump_id) {
    weft_graph *g = weft_graph_new(), *tg = weft_graph_new(), *eg = weft_graph_new();
    weft_value p = weft_graph_placeholder(g, "p", 0, NULL, WEFT_BOOL);
    weft_value a = weft_graph_placeholder(g, "a", 1, (int64_t[]){3}, WEFT_F64);
    weft_tensor *v0 = f64v((double[]){1, 2, 3}, 3);
    weft_value v = weft_graph_variable(g, "v", v0);
    weft_tensor_free(v0);
    weft_tensor *vt = weft_graph_variable_tensor(g, v);
    weft_tensor *ain = weft_tensor_zeros(1, (int64_t[]){3}, WEFT_F64);
    CHECK(weft_graph_trace_begin(tg) == WEFT_OK);
    weft_graph_trace_input(tg, ain, "a");
    weft_graph_trace_variable(tg, vt, "v");
    weft_tensor *prod = weft_mul(ain, vt);
    weft_value to = weft_graph_trace_output(tg, prod);
    CHECK(weft_graph_trace_end(tg) == WEFT_OK);
    weft_tensor_free(prod);
    CHECK(weft_graph_trace_begin(eg) == WEFT_OK);
    weft_value ea = weft_graph_trace_input(eg, ain, "a");
    weft_value ev = weft_graph_trace_variable(eg, vt, "v");
    CHECK(weft_graph_trace_end(eg) == WEFT_OK);
    weft_value eo = weft_graph_assign_add(eg, "bump", ev, ea);
    weft_tensor_free(ain);
    weft_value out;
    CHECK(weft_graph_cond(g, "pick", p, 1, &a, tg, &to, eg, &eo, 1, &out) == WEFT_OK);
    // the parent's own update: v += 10
    weft_value ten = scal(g, "add_scalar", scal(g, "mul_scalar", v, 0.0), 10.0);
    weft_value bump = weft_graph_assign_add(g, "parent_bump", v, ten);
    *out_id = out.id;
    *bump_id = bump.id;
    return g;
}

static void test_shared_variable(void) {
    int32_t out_id, bump_id;
    weft_graph *g = shared_graph(&out_id, &bump_id);
    char path[300];
    tmp_path("shared.wgraph", path, sizeof path);
    CHECK(weft_graph_save(g, path) == WEFT_OK);
    // one tensor in the file: the branches name the parent's
    weft_safetensors *st = weft_safetensors_load(path);
    CHECK(st && weft_safetensors_count(st) == 1 && !strcmp(weft_safetensors_name_at(st, 0), "var/v"));
    weft_safetensors_free(st);
    weft_graph *h = weft_graph_load(path);
    CHECK(h != NULL);
    if (!h) {
        weft_graph_free(g);
        return;
    }
    weft_value hv = weft_graph_find_value(h, "v");
    weft_tensor *vt = weft_graph_variable_tensor(h, hv);
    CHECK(vt && !weft_tensor_shares_storage(vt, weft_graph_variable_tensor(g, weft_graph_find_value(g, "v"))));
    double av[3], vv[3] = {1, 2, 3};
    wt_vals(av, 3, -1, 1, 101);
    // an assign in the loaded parent is seen by the loaded branch
    int n = 0;
    double *r = run_ids(h, true, 1, &bump_id, &n);
    free(r);
    for (int k = 0; k < 3; k++) vv[k] += 10;
    r = run_ids(h, true, 1, &out_id, &n);
    CHECK(r && n == 3);
    for (int k = 0; r && k < 3; k++) CHECK_NEAR(r[k], av[k] * vv[k], 0);
    free(r);
    // an assign in the loaded branch is seen by the parent (and the other branch)
    r = run_ids(h, false, 1, &out_id, &n);
    for (int k = 0; k < 3; k++) vv[k] += av[k];
    for (int k = 0; r && k < 3; k++) CHECK_NEAR(r[k], vv[k], 0);
    free(r);
    double got[3] = {0};
    weft_tensor_to_f64(vt, got, 3);
    for (int k = 0; k < 3; k++) CHECK_NEAR(got[k], vv[k], 0);
    r = run_ids(h, true, 1, &out_id, &n);
    for (int k = 0; r && k < 3; k++) CHECK_NEAR(r[k], av[k] * vv[k], 0);
    free(r);
    // the original graph did the same steps: same bits
    free(run_ids(g, true, 1, &bump_id, &n));
    free(run_ids(g, true, 1, &out_id, &n));
    free(run_ids(g, false, 1, &out_id, &n));
    check_same_run("shared after steps", g, h, true, 1, &out_id);
    weft_graph_free(h);
    weft_graph_free(g);
}

// ---- an optimised traced MLP training step (fusion on) ----
#define N_PAR 4
static weft_graph *fused_step(weft_graph **orig, int32_t fetch_ids[1 + N_PAR], weft_tensor *params[N_PAR]) {
    params[0] = wt_rand64(WEFT_DIMS(8, 16), -0.3, 0.3, 11, true);
    params[1] = wt_rand64(WEFT_DIMS(16), -0.1, 0.1, 12, true);
    params[2] = wt_rand64(WEFT_DIMS(16, 4), -0.3, 0.3, 13, true);
    params[3] = wt_rand64(WEFT_DIMS(4), -0.1, 0.1, 14, true);
    static const char *const names[N_PAR] = {"w1", "b1", "w2", "b2"};
    weft_tensor *x = wt_rand64(WEFT_DIMS(6, 8), -1, 1, 15, false), *y = wt_rand64(WEFT_DIMS(6, 4), -1, 1, 16, false);
    weft_graph *g = weft_graph_new();
    CHECK(weft_graph_trace_begin(g) == WEFT_OK);
    weft_graph_trace_input(g, x, "x");
    weft_graph_trace_input(g, y, "y");
    for (int i = 0; i < N_PAR; i++) weft_graph_trace_variable(g, params[i], names[i]);
    weft_tensor *a = weft_matmul(x, params[0]), *h = weft_add(a, params[1]), *z = weft_gelu(h);
    weft_tensor *c = weft_matmul(z, params[2]), *l = weft_add(c, params[3]), *d = weft_sub(l, y), *sq = weft_mul(d, d);
    weft_tensor *loss = weft_mean(sq, 0, NULL, false);
    CHECK(loss && weft_backward(loss, NULL, NULL) == WEFT_OK);
    weft_value keep[1 + N_PAR];
    keep[0] = weft_graph_trace_output(g, loss);
    weft_value grads[N_PAR];
    for (int i = 0; i < N_PAR; i++) grads[i] = weft_graph_trace_output(g, weft_tensor_grad(params[i]));
    CHECK(weft_graph_trace_end(g) == WEFT_OK);
    // SGD: w += -0.1 grad (fetching an assign's output runs the update)
    for (int i = 0; i < N_PAR; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "sgd_%s", names[i]);
        keep[1 + i] = weft_graph_assign_add(g, nm, weft_graph_find_value(g, names[i]), scal(g, "mul_scalar", grads[i], -0.1));
        weft_tensor_zero_grad(params[i]);
    }
    weft_value kout[1 + N_PAR];
    weft_graph_pass_stats pst;
    weft_graph *o = weft_graph_optimize(g, 1 + N_PAR, keep, kout, NULL, &pst);
    CHECK(o && pst.fused_groups >= 1);
    for (int i = 0; i < 1 + N_PAR; i++) fetch_ids[i] = kout[i].id;
    weft_tensor *ts[] = {a, h, z, c, l, d, sq, loss, x, y};
    for (int i = 0; i < 10; i++) weft_tensor_free(ts[i]);
    *orig = g;
    return o;
}

static int count_kind(const weft_graph *g, weft_node_kind k) {
    int n = 0;
    for (int i = 0; i < weft_graph_node_count(g); i++) n += weft_graph_node_kind(g, (weft_node_id){i}) == k;
    return n;
}

static void test_fused_step_roundtrip(void) {
    weft_graph *g;
    int32_t ids[1 + N_PAR];
    weft_tensor *params[N_PAR];
    weft_graph *o = fused_step(&g, ids, params);
    if (!o) return;
    CHECK(count_kind(o, WEFT_NODE_FUSED) >= 1);
    weft_graph *h = roundtrip(o, "fused.wgraph", "2");
    if (h) {
        CHECK(count_kind(h, WEFT_NODE_FUSED) == count_kind(o, WEFT_NODE_FUSED));
        // train three steps in each: losses and updated weights bit-equal
        // (o's variables are the eager params; h's are its own copies)
        for (int step = 0; step < 3; step++) check_same_run("fused step", o, h, true, 1 + N_PAR, ids);
        // and the unfused original (sharing o's variables) agrees with where they got to
        int n = 0;
        double *r1 = run_ids(h, true, 1, ids, &n);
        double *r0 = run_ids(o, true, 1, ids, &n);
        CHECK(r0 && r1 && r0[0] == r1[0]);
        free(r0);
        free(r1);
    }
    weft_graph_free(h);
    weft_graph_free(o);
    weft_graph_free(g);
    for (int i = 0; i < N_PAR; i++) weft_tensor_free(params[i]);
}

// ---- a fresh process ----
// "test_serialize_control --child GRAPH OUT PRED ID..." loads GRAPH, runs it on
// feeds_for(PRED) fetching the value ids and writes the results as raw doubles.
static int child_main(int argc, char **argv) {
    weft_graph *g = weft_graph_load(argv[2]);
    if (!g) {
        fprintf(stderr, "child: %s\n", weft_last_error());
        return 3;
    }
    int32_t ids[16];
    int n = argc - 5 < 16 ? argc - 5 : 16;
    for (int k = 0; k < n; k++) ids[k] = atoi(argv[5 + k]);
    int len = 0;
    double *v = run_ids(g, atoi(argv[4]) != 0, n, ids, &len);
    weft_graph_free(g);
    if (!v) {
        fprintf(stderr, "child: %s\n", weft_last_error());
        return 4;
    }
    FILE *f = fopen(argv[3], "wb");
    bool ok = f && fwrite(&len, sizeof len, 1, f) == 1 && fwrite(v, sizeof *v, (size_t)len, f) == (size_t)len;
    if (f) ok = fclose(f) == 0 && ok;
    free(v);
    return ok ? 0 : 5;
}

static void fresh_check(const char *what, weft_graph *g, const char *file, bool pred, int n, const int32_t *ids) {
    char path[300], out[300], pv[8], idv[16][16];
    tmp_path(file, path, sizeof path);
    tmp_path("fresh.out", out, sizeof out);
    remove(out);
    CHECK(weft_graph_save(g, path) == WEFT_OK);
    char *args[32] = {"test_serialize_control", "--child", path, out, pv};
    snprintf(pv, sizeof pv, "%d", pred);
    for (int k = 0; k < n; k++) {
        snprintf(idv[k], sizeof idv[k], "%d", ids[k]);
        args[5 + k] = idv[k];
    }
    args[5 + n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) { // a new program image: nothing of this process's state survives
        execv("/proc/self/exe", args);
        _exit(127);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    int mine_n = 0, theirs_n = 0;
    double *mine = run_ids(g, pred, n, ids, &mine_n), *theirs = NULL;
    FILE *f = fopen(out, "rb");
    if (f) {
        if (fread(&theirs_n, sizeof theirs_n, 1, f) == 1 && theirs_n == mine_n && mine_n > 0) {
            theirs = malloc(sizeof(double) * (size_t)theirs_n);
            if (fread(theirs, sizeof *theirs, (size_t)theirs_n, f) != (size_t)theirs_n) {
                free(theirs);
                theirs = NULL;
            }
        }
        fclose(f);
    }
    bool ok = mine && theirs && !memcmp(mine, theirs, sizeof(double) * (size_t)mine_n);
    if (!ok) fprintf(stderr, "%s: the fresh process's results differ\n", what);
    CHECK(ok);
    free(mine);
    free(theirs);
}

static void test_fresh_process(void) {
    int32_t ids[3];
    weft_graph *g = cond_grad_graph(ids, true);
    fresh_check("cond gradient, then", g, "fresh_cond.wgraph", true, 3, ids);
    fresh_check("cond gradient, else", g, "fresh_cond.wgraph", false, 3, ids);
    weft_graph_free(g);
    weft_graph *orig;
    int32_t fid[1 + N_PAR];
    weft_tensor *params[N_PAR];
    weft_graph *o = fused_step(&orig, fid, params);
    if (o) fresh_check("fused step", o, "fresh_fused.wgraph", true, 1 + N_PAR, fid); // one step each from the saved state
    weft_graph_free(o);
    weft_graph_free(orig);
    for (int i = 0; i < N_PAR; i++) weft_tensor_free(params[i]);
}

// ---- corrupted files ----
// Rewrites src's graph metadata with `from` (first occurrence) replaced by `to`
// (to NULL: the JSON cut off at `from`), dropping tensor `drop` (NULL: none).
static void mutate(const char *src, const char *dst, const char *from, const char *to, const char *drop) {
    weft_safetensors *st = weft_safetensors_load(src);
    CHECK(st != NULL);
    if (!st) return;
    const char *json = weft_safetensors_meta(st, "graph");
    const char *at = strstr(json, from);
    CHECK(at != NULL);
    size_t len = strlen(json) + (to ? strlen(to) : 0) + 1;
    char *j2 = malloc(len);
    if (!at) snprintf(j2, len, "%s", json);
    else if (!to) snprintf(j2, len, "%.*s", (int)(at - json), json);
    else snprintf(j2, len, "%.*s%s%s", (int)(at - json), json, to, at + strlen(from));
    int n = 0;
    const char *names[64];
    weft_tensor *ts[64];
    for (int i = 0; i < weft_safetensors_count(st) && n < 64; i++) {
        if (drop && !strcmp(weft_safetensors_name_at(st, i), drop)) continue;
        names[n] = weft_safetensors_name_at(st, i);
        ts[n++] = weft_safetensors_tensor_at(st, i);
    }
    const char *mk[3] = {"format", "version", "graph"}, *mv[3] = {"weft.graph", weft_safetensors_meta(st, "version"), j2};
    CHECK(weft_safetensors_save(dst, n, names, ts, 3, mk, mv) == WEFT_OK);
    free(j2);
    weft_safetensors_free(st);
}

static void expect_fail(const char *what, const char *path, const char *s1, const char *s2, const char *s3) {
    weft_graph *g = weft_graph_load(path);
    bool ok = !g && wt_error_has("graph_load") && wt_error_has(path) && (!s1 || wt_error_has(s1)) &&
              (!s2 || wt_error_has(s2)) && (!s3 || wt_error_has(s3));
    if (!ok || getenv("WT_VERBOSE")) fprintf(stderr, "%s: got %s: '%s'\n", what, g ? "a graph" : "error", weft_last_error());
    CHECK(ok);
    weft_graph_free(g);
}

static void test_corrupted(void) {
    char good[300], bad[300];
    tmp_path("bad.wgraph", bad, sizeof bad);
    // control flow
    int32_t ids[3];
    weft_graph *g = cond_grad_graph(ids, true);
    CHECK(weft_graph_save(g, tmp_path("good_cond.wgraph", good, sizeof good)) == WEFT_OK);
    weft_graph_free(g);
    mutate(good, bad, "\"sub\":[", NULL, NULL);
    expect_fail("truncated JSON", bad, "not valid JSON", NULL, NULL);
    mutate(good, bad, "\"out\":[4],\"rng_runs\"", "\"out\":[9999],\"rng_runs\"", NULL); // a branch's fetched value
    expect_fail("subgraph out id", bad, "node 'pick' (cond)", "out of range", "9999");
    mutate(good, bad, "\"in\":[0,1],\"out\":[4]", "\"in\":[77,1],\"out\":[4]", NULL); // a branch's placeholder
    expect_fail("subgraph in id", bad, "node 'pick' (cond)", "out of range", "77");
    mutate(good, bad, "\"in\":[0,1],\"out\":[4]", "\"in\":[1,0],\"out\":[4]", NULL); // not the placeholders' order
    expect_fail("subgraph in order", bad, "node 'pick' (cond)", "placeholder", NULL);
    mutate(good, bad, "\"sub\":[", "\"sub\":[{\"nodes\":[]},", NULL); // three subgraphs
    expect_fail("three subgraphs", bad, "node 'pick' (cond)", "'sub'", NULL);
    mutate(good, bad, "\"op\":\"exp\"", "\"op\":\"frobnicate\"", NULL); // inside the then branch
    expect_fail("unknown op in a branch", bad, "node 'pick' (cond) then graph", "frobnicate", NULL);
    mutate(good, bad, "\"out\":[{\"shape\":[3],\"dtype\":\"f64\"}]},{\"name\":\"exp_2\"",
           "\"out\":[{\"shape\":[4],\"dtype\":\"f64\"}]},{\"name\":\"exp_2\"", NULL); // then's 'w' placeholder
    expect_fail("branch placeholder shape", bad, "node 'pick' (cond)", NULL, NULL);
    mutate(good, bad, "\"name\":\"pick\",\"kind\":\"cond\",\"in\":[0,1,2]", "\"name\":\"pick\",\"kind\":\"while_loop\",\"in\":[0,1,2]",
           NULL);
    expect_fail("cond stored as a while_loop", bad, "node 'pick'", NULL, NULL);
    mutate(good, bad, "\"name\":\"pick\"", "\"name\":\"pick\"", "const/constant_4");
    expect_fail("missing tensor", bad, "const/constant_4", "missing", NULL);
    // a shared tensor: the branches name the parent's
    int32_t oid, bid;
    g = shared_graph(&oid, &bid);
    CHECK(weft_graph_save(g, tmp_path("good_shared.wgraph", good, sizeof good)) == WEFT_OK);
    weft_graph_free(g);
    mutate(good, bad, "\"tensor\":\"var/v\"", "\"tensor\":\"var/nope\"", NULL);
    expect_fail("shared tensor name", bad, "node 'pick' (cond) then graph: node 'v'", "var/nope", NULL);
    mutate(good, bad, "\"tensor\":\"var/v\"", "\"tensor\":7", NULL);
    expect_fail("shared tensor type", bad, "node 'v'", "'tensor'", NULL);
    mutate(good, bad, "\"name\":\"pick\"", "\"name\":\"pick\"", "var/v");
    expect_fail("missing shared tensor", bad, "node 'v'", "var/v", "missing");

    // fused programs
    weft_graph *orig;
    int32_t fid[1 + N_PAR];
    weft_tensor *params[N_PAR];
    weft_graph *o = fused_step(&orig, fid, params);
    if (o) {
        CHECK(weft_graph_save(o, tmp_path("good_fused.wgraph", good, sizeof good)) == WEFT_OK);
        mutate(good, bad, "\"prog\":{\"instr\":[{\"op\":\"", "\"prog\":{\"instr\":[{\"op\":\"frobnicate_", NULL);
        expect_fail("unknown op in a fused program", bad, "(fused)", "frobnicate", "instruction 0");
        mutate(good, bad, "\"prog\":{\"instr\":[{\"op\":\"", "\"prog\":{\"instr\":[{\"op\":\"sum\",\"xx\":\"", NULL);
        expect_fail("non-elementwise op in a fused program", bad, "(fused)", "instruction 0", NULL);
        mutate(good, bad, "\"args\":[0,1]", "\"args\":[0,40]", NULL);
        expect_fail("fused operand out of range", bad, "(fused)", "instruction 0", "out of range");
        mutate(good, bad, "\"args\":[0,1]", "\"args\":[0,1,2,3]", NULL);
        expect_fail("fused operand count", bad, "(fused)", "'args'", NULL);
        mutate(good, bad, "\"args\":[0,1]", "\"args\":[0,1,2]", NULL);
        expect_fail("fused matmul operand count", bad, "(fused)", "3 operands (the op takes 2)", NULL);
        mutate(good, bad, "{\"op\":\"add\",\"args\":[-1,2]}", "{\"op\":\"add\",\"args\":[-1,-2]}", NULL);
        expect_fail("fused forward reference", bad, "(fused)", "instruction 1", "out of range");
        mutate(good, bad, "{\"op\":\"add\",\"args\":[-1,2]}", "{\"op\":\"add\",\"args\":[-1,0]}", NULL);
        expect_fail("fused shape", bad, "(fused)", "instruction 1", NULL); // x (6,8) does not broadcast to (6,16)
        mutate(good, bad, "\"export\":0", "\"export\":3", NULL);
        expect_fail("fused export", bad, "(fused)", "export", NULL);
        mutate(good, bad, "\"prog\":{\"instr\":", "\"prog\":{\"instr\":7,\"old\":", NULL);
        expect_fail("fused program shape", bad, "(fused)", "instr", NULL);
        mutate(good, bad, "\"prog\":{", NULL, NULL);
        expect_fail("truncated fused JSON", bad, "not valid JSON", NULL, NULL);
    }
    weft_graph_free(o);
    weft_graph_free(orig);
    for (int i = 0; i < N_PAR; i++) weft_tensor_free(params[i]);
}

int main(int argc, char **argv) {
    if (argc >= 6 && !strcmp(argv[1], "--child")) return child_main(argc, argv);
    snprintf(g_dir, sizeof g_dir, "/tmp/weft_serctl_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_cond_roundtrip);
    RUN(test_cond_gradient_roundtrip);
    RUN(test_while_roundtrip);
    RUN(test_while_gradient_roundtrip);
    RUN(test_while_gradient_wide);
    RUN(test_shared_variable);
    RUN(test_fused_step_roundtrip);
    RUN(test_fresh_process);
    RUN(test_corrupted);
    char cmd[320];
    if (getenv("WT_KEEP")) return wt_summary();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return wt_summary();
}
