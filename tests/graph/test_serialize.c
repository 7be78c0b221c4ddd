// Graph files: save -> load round trips (builder and traced forward+backward
// graphs), a load in a fresh process (fork + exec of this binary), training
// further from a loaded graph, and malformed files (each error names the file
// and the node). References: the original graph on the same feeds (bit-equal),
// eager code, closed-form values.
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "weft_test.h"

static char g_dir[256];

static const char *tmp_path(const char *name, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s", g_dir, name);
    return buf;
}


static bool shape_eq(int na, const int64_t *a, int nb, const int64_t *b) {
    if (na != nb) return false;
    for (int d = 0; d < na; d++)
        if (a[d] != b[d]) return false;
    return true;
}

// Every element of a equals b within tol (relative + absolute); tol 0: bit-equal values.

// The same nodes (names, kinds, ops, inputs, shapes, control deps) in the same order.
static void check_same_structure(const weft_graph *a, const weft_graph *b) {
    CHECK(weft_graph_node_count(a) == weft_graph_node_count(b));
    CHECK(weft_graph_value_count(a) == weft_graph_value_count(b));
    if (weft_graph_node_count(a) != weft_graph_node_count(b)) return;
    int bad = 0;
    for (int i = 0; i < weft_graph_node_count(a); i++) {
        weft_node_id n = {i};
        bad += strcmp(weft_graph_node_name(a, n), weft_graph_node_name(b, n)) != 0;
        bad += strcmp(weft_graph_node_op(a, n), weft_graph_node_op(b, n)) != 0;
        bad += weft_graph_node_kind(a, n) != weft_graph_node_kind(b, n);
        bad += weft_graph_node_num_outputs(a, n) != weft_graph_node_num_outputs(b, n);
    }
    for (int v = 0; v < weft_graph_value_count(a); v++) {
        weft_value x = {v};
        bad += weft_graph_value_node(a, x).id != weft_graph_value_node(b, x).id;
        bad += weft_graph_value_dtype(a, x) != weft_graph_value_dtype(b, x);
        bad += !shape_eq(weft_graph_value_ndim(a, x), weft_graph_value_sizes(a, x), weft_graph_value_ndim(b, x),
                         weft_graph_value_sizes(b, x));
    }
    CHECK(bad == 0);
    // DOT shows inputs, shapes, control deps and assign targets: equal text = equal edges
    char *da = NULL, *db = NULL;
    size_t la = 0, lb = 0;
    FILE *fa = open_memstream(&da, &la), *fb = open_memstream(&db, &lb);
    CHECK(weft_graph_write_dot(a, fa) == WEFT_OK && weft_graph_write_dot(b, fb) == WEFT_OK);
    fclose(fa);
    fclose(fb);
    CHECK(la == lb && !strcmp(da, db));
    free(da);
    free(db);
}

// ---- a builder graph: constants, variables, attrs, assign, a control dep ----
typedef struct bgraph {
    weft_graph *g;
    weft_tensor *w1, *b1, *w2;
} bgraph;

static bgraph builder_graph(void) {
    bgraph b = {weft_graph_new(), wt_rand64(WEFT_DIMS(3, 5), -1, 1, 1, false), wt_rand64(WEFT_DIMS(5), -1, 1, 2, false),
                wt_rand64(WEFT_DIMS(5, 2), -1, 1, 3, false)};
    weft_graph *g = b.g;
    weft_value vx = weft_graph_placeholder(g, "x", WEFT_DIMS(4, 3), WEFT_F64);
    weft_value vw1 = weft_graph_constant(g, "w1", b.w1), vb1 = weft_graph_variable(g, "b1", b.b1);
    weft_value vw2 = weft_graph_variable(g, "w2", b.w2);
    weft_value h = weft_graph_op1(g, "matmul", 2, (weft_value[]){vx, vw1}, NULL, 0, NULL, 0);
    h = weft_graph_op1(g, "add", 2, (weft_value[]){h, vb1}, NULL, 0, NULL, 0);
    h = weft_graph_op1(g, "relu", 1, &h, NULL, 0, NULL, 0);
    // a double that needs 17 digits, and one JSON cannot spell (-0 * y = -0 or 0: visible in 1/x)
    h = weft_graph_op1(g, "mul_scalar", 1, &h, NULL, 0, (double[]){0.1 + 0.2}, 1);
    weft_value y = weft_graph_op_named(g, "y", "matmul", 2, (weft_value[]){h, vw2}, NULL, 0, NULL, 0, NULL) == WEFT_OK
                       ? weft_graph_find_value(g, "y")
                       : WEFT_VALUE_NONE;
    weft_value s = WEFT_VALUE_NONE;
    CHECK(weft_graph_op_named(g, "total", "sum", 1, &y, (int64_t[]){3, 0}, 2, NULL, 0, &s) == WEFT_OK);
    weft_value upd = weft_graph_op1(g, "mul_scalar", 1, &y, NULL, 0, (double[]){-0.5}, 1);
    CHECK(weft_graph_op1(g, "sum", 1, &upd, (int64_t[]){1, 0}, 2, NULL, 0).id >= 0); // over rows: (2)
    weft_value ones = weft_graph_constant(g, "ones", wt_keep(weft_tensor_ones(WEFT_DIMS(5, 2), WEFT_F64)));
    weft_value step = weft_graph_assign_add(g, "w2_step", vw2, ones);
    // w2_step must run after total (reads of w2 before the write)
    CHECK(weft_graph_add_control_dep(g, weft_graph_value_node(g, step), weft_graph_value_node(g, s)) == WEFT_OK);
    CHECK(s.id >= 0 && step.id >= 0);
    return b;
}

static void bgraph_free(bgraph *b) {
    weft_graph_free(b->g);
    weft_tensor_free(b->w1);
    weft_tensor_free(b->b1);
    weft_tensor_free(b->w2);
    wt_drop_all();
}

static void test_builder_roundtrip(void) {
    char path[300];
    tmp_path("builder.wgraph", path, sizeof path);
    bgraph b = builder_graph();
    CHECK(weft_graph_save(b.g, path) == WEFT_OK);
    weft_graph *h = weft_graph_load(path);
    CHECK(h != NULL);
    if (!h) {
        bgraph_free(&b);
        return;
    }
    check_same_structure(b.g, h);
    // the file is plain safetensors: the weights under const/ and var/, the structure in the metadata
    weft_safetensors *st = weft_safetensors_load(path);
    CHECK(st && weft_safetensors_count(st) == 4);
    CHECK(st && !strcmp(weft_safetensors_meta(st, "format"), "weft.graph"));
    CHECK(st && !strcmp(weft_safetensors_meta(st, "version"), "1"));
    if (st) wt_check_same("var/w2 in the file", weft_safetensors_find(st, "var/w2"), b.w2, 0);
    if (st) wt_check_same("const/w1 in the file", weft_safetensors_find(st, "const/w1"), b.w1, 0);
    weft_safetensors_free(st);

    // same feeds -> identical outputs (bit-equal: same ops, same attrs to the last bit)
    weft_value vx = weft_graph_find_value(h, "x"), y = weft_graph_find_value(h, "y"),
               s = weft_graph_find_output(h, "total", 0);
    CHECK(vx.id >= 0 && y.id >= 0 && s.id >= 0);
    CHECK(weft_graph_find_output(h, "total", 1).id < 0 && weft_graph_find_output(h, "nope", 0).id < 0);
    weft_tensor *x = wt_rand64(WEFT_DIMS(4, 3), -1, 1, 4, false), *o1[2] = {0}, *o2[2] = {0};
    CHECK(weft_graph_run(b.g, 1, &vx, &x, 2, (weft_value[]){y, s}, o1, 0, NULL) == WEFT_OK);
    CHECK(weft_graph_run(h, 1, &vx, &x, 2, (weft_value[]){y, s}, o2, 0, NULL) == WEFT_OK);
    wt_check_same("loaded y", o2[0], o1[0], 0);
    wt_check_same("loaded total", o2[1], o1[1], 0);
    // and against eager: y = relu(x w1 + b1) * 0.3 w2
    weft_tensor *e1 = weft_matmul(x, b.w1), *e2 = weft_add(e1, b.b1), *e3 = weft_relu(e2),
                *e4 = weft_mul_scalar(e3, 0.1 + 0.2), *ey = weft_matmul(e4, b.w2);
    wt_check_same("loaded y vs eager", o2[0], ey, 1e-12);
    // variables round-trip, and are the loaded graph's own: the assign writes h's copy only
    weft_value w2 = weft_graph_find_value(h, "w2");
    wt_check_same("w2 value", weft_graph_variable_tensor(h, w2), b.w2, 0);
    weft_node_id stepn = weft_graph_find_node(h, "w2_step");
    CHECK(weft_graph_run(h, 1, &vx, &x, 0, NULL, NULL, 1, &stepn) == WEFT_OK);
    int executed = weft_graph_last_run_stats(h).nodes_executed;
    weft_tensor *w2p1 = weft_add_scalar(b.w2, 1.0);
    wt_check_same("w2 after assign_add in the loaded graph", weft_graph_variable_tensor(h, w2), w2p1, 0);
    wt_check_same("original untouched", weft_graph_variable_tensor(b.g, weft_graph_find_value(b.g, "w2")), b.w2, 0);
    // the loaded control dep and data edges prune the same way: 12 nodes minus the unused mul/sum pair
    CHECK(weft_graph_run(b.g, 1, &vx, &x, 0, NULL, NULL, 1, &stepn) == WEFT_OK);
    CHECK(executed == weft_graph_last_run_stats(b.g).nodes_executed && executed >= 11);
    weft_tensor *ts[] = {x, o1[0], o1[1], o2[0], o2[1], e1, e2, e3, e4, ey, w2p1};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
        weft_tensor_free(ts[i]);
    weft_graph_free(h);
    bgraph_free(&b);
}

// ---- a traced MLP forward + backward (with layer_norm: a 3-output op) ----
typedef struct mlp {
    weft_tensor *w1, *b1, *g1, *be1, *w2, *b2;
} mlp;
#define MLP_N 6

static mlp mlp_new(uint64_t seed) {
    mlp m = {wt_rand64(WEFT_DIMS(3, 6), -1, 1, seed + 1, true), wt_rand64(WEFT_DIMS(6), -1, 1, seed + 2, true),
             wt_rand64(WEFT_DIMS(6), 0.5, 1.5, seed + 3, true), wt_rand64(WEFT_DIMS(6), -0.5, 0.5, seed + 4, true),
             wt_rand64(WEFT_DIMS(6, 4), -1, 1, seed + 5, true), wt_rand64(WEFT_DIMS(4), -1, 1, seed + 6, true)};
    return m;
}
static weft_tensor **mlp_params(mlp *m) { return &m->w1; }
static void mlp_free(mlp *m) {
    for (int i = 0; i < MLP_N; i++)
        weft_tensor_free(mlp_params(m)[i]);
}

static weft_tensor *mlp_loss(mlp *m, weft_tensor *x, weft_tensor *y) {
    weft_tensor *a = weft_matmul(x, m->w1), *b = weft_add(a, m->b1), *n = weft_layer_norm(b, 1, m->g1, m->be1, 1e-5);
    weft_tensor *h = weft_tanh(n), *c = weft_matmul(h, m->w2), *l = weft_add(c, m->b2);
    weft_tensor *loss = weft_cross_entropy(l, y);
    weft_tensor *ts[] = {a, b, n, h, c, l};
    for (int i = 0; i < 6; i++)
        weft_tensor_free(ts[i]);
    return loss;
}

static weft_tensor *labels(uint64_t seed) {
    int64_t v[5];
    for (int i = 0; i < 5; i++)
        v[i] = (int64_t)((seed * 7 + (uint64_t)i * 3) % 4);
    return weft_tensor_from_data(v, WEFT_DIMS(5), WEFT_I64);
}

static const char *const param_names[MLP_N] = {"w1", "b1", "g1", "be1", "w2", "b2"};

// Traces loss + gradients, then adds SGD updates (assign_add of -lr * grad) as
// builder nodes named "sgd_<param>": one run of them is one training step.
// fetch receives loss and the gradients' values.
static weft_graph *trace_train_graph(mlp *m, double lr, weft_value fetch[1 + MLP_N]) {
    weft_graph *g = weft_graph_new();
    weft_tensor *x = wt_rand64(WEFT_DIMS(5, 3), -1, 1, 41, false), *y = labels(3);
    weft_tensor **p = mlp_params(m);
    CHECK(weft_graph_trace_begin(g) == WEFT_OK);
    weft_graph_trace_input(g, x, "x");
    weft_graph_trace_input(g, y, "y");
    for (int i = 0; i < MLP_N; i++)
        weft_graph_trace_variable(g, p[i], param_names[i]);
    weft_tensor *loss = mlp_loss(m, x, y);
    CHECK(weft_backward(loss, NULL, NULL) == WEFT_OK);
    fetch[0] = weft_graph_trace_output(g, loss);
    for (int i = 0; i < MLP_N; i++)
        fetch[1 + i] = weft_graph_trace_output(g, weft_tensor_grad(p[i]));
    CHECK(weft_graph_save(g, "/nonexistent-dir/x.wgraph") != WEFT_OK && wt_error_has("traced")); // not mid-trace
    CHECK(weft_graph_trace_end(g) == WEFT_OK);
    for (int i = 0; i < MLP_N; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "sgd_%s", param_names[i]);
        weft_value d = weft_graph_op1(g, "mul_scalar", 1, &fetch[1 + i], NULL, 0, (double[]){-lr}, 1);
        CHECK(weft_graph_assign_add(g, nm, weft_graph_find_value(g, param_names[i]), d).id >= 0);
    }
    for (int i = 0; i < MLP_N; i++)
        weft_tensor_zero_grad(p[i]);
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_tensor_free(loss);
    return g;
}

static void test_traced_roundtrip(void) {
    char path[300];
    tmp_path("mlp.wgraph", path, sizeof path);
    mlp m = mlp_new(10);
    weft_value fetch[1 + MLP_N];
    weft_graph *g = trace_train_graph(&m, 0.1, fetch);
    CHECK(weft_graph_save(g, path) == WEFT_OK);
    weft_graph *h = weft_graph_load(path);
    CHECK(h != NULL);
    if (!h) {
        weft_graph_free(g);
        mlp_free(&m);
        return;
    }
    check_same_structure(g, h);
    int n_ln = 0;
    for (int i = 0; i < weft_graph_node_count(h); i++)
        n_ln += !strcmp(weft_graph_node_op(h, (weft_node_id){i}), "layer_norm_backward");
    CHECK(n_ln == 1); // the backward ops came through by name
    weft_value vx = weft_graph_find_value(h, "x"), vy = weft_graph_find_value(h, "y");
    weft_tensor *x2 = wt_rand64(WEFT_DIMS(5, 3), -2, 2, 42, false), *y2 = labels(4);
    weft_tensor *o1[1 + MLP_N] = {0}, *o2[1 + MLP_N] = {0};
    CHECK(weft_graph_run(g, 2, (weft_value[]){vx, vy}, (weft_tensor *[]){x2, y2}, 1 + MLP_N, fetch, o1, 0, NULL) ==
          WEFT_OK);
    CHECK(weft_graph_run(h, 2, (weft_value[]){vx, vy}, (weft_tensor *[]){x2, y2}, 1 + MLP_N, fetch, o2, 0, NULL) ==
          WEFT_OK);
    wt_check_same("loaded loss", o2[0], o1[0], 0);
    for (int i = 0; i < MLP_N; i++)
        wt_check_same(param_names[i], o2[1 + i], o1[1 + i], 0);
    // and against eager gradients on the same inputs
    weft_tensor *eloss = mlp_loss(&m, x2, y2);
    CHECK(weft_backward(eloss, NULL, NULL) == WEFT_OK);
    wt_check_same("loaded loss vs eager", o2[0], eloss, 1e-9);
    for (int i = 0; i < MLP_N; i++)
        wt_check_same("loaded grad vs eager", o2[1 + i], weft_tensor_grad(mlp_params(&m)[i]), 1e-9);
    for (int i = 0; i < MLP_N; i++)
        weft_tensor_zero_grad(mlp_params(&m)[i]);

    // train further from the loaded graph: three SGD steps, each one run of the
    // sgd_* targets; the same steps on the original graph (whose variables are
    // the eager parameters) give the same losses and parameters
    weft_node_id tg[MLP_N], th[MLP_N];
    for (int i = 0; i < MLP_N; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "sgd_%s", param_names[i]);
        tg[i] = weft_graph_find_node(g, nm);
        th[i] = weft_graph_find_node(h, nm);
    }
    double first = 0, last = 0;
    for (int step = 0; step < 3; step++) {
        weft_tensor *lg = NULL, *lh = NULL;
        CHECK(weft_graph_run(g, 2, (weft_value[]){vx, vy}, (weft_tensor *[]){x2, y2}, 1, fetch, &lg, MLP_N, tg) ==
              WEFT_OK);
        CHECK(weft_graph_run(h, 2, (weft_value[]){vx, vy}, (weft_tensor *[]){x2, y2}, 1, fetch, &lh, MLP_N, th) ==
              WEFT_OK);
        wt_check_same("training loss", lh, lg, 0);
        if (step == 0) first = lh ? weft_tensor_item(lh) : 0;
        last = lh ? weft_tensor_item(lh) : 0;
        weft_tensor_free(lg);
        weft_tensor_free(lh);
    }
    CHECK(last < first); // it trains
    for (int i = 0; i < MLP_N; i++)
        wt_check_same("param after training", weft_graph_variable_tensor(h, weft_graph_find_value(h, param_names[i])),
                   mlp_params(&m)[i], 0);
    for (int i = 0; i < 1 + MLP_N; i++) {
        weft_tensor_free(o1[i]);
        weft_tensor_free(o2[i]);
    }
    weft_tensor *ts[] = {x2, y2, eloss};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
        weft_tensor_free(ts[i]);
    weft_graph_free(h);
    weft_graph_free(g);
    mlp_free(&m);
}

// ---- a fresh process ----
// The child (this binary run again: "test_serialize --child GRAPH OUT") loads the
// graph, runs it on fixed feeds and writes the loss and gradients as raw doubles.
static double *fixed_run(weft_graph *g, int *n_out) {
    weft_value vx = weft_graph_find_value(g, "x"), vy = weft_graph_find_value(g, "y");
    weft_tensor *x = wt_rand64(WEFT_DIMS(5, 3), -2, 2, 77, false), *y = labels(5);
    // fetch: the loss (by trace order the last forward value) and the sgd inputs' producers
    weft_value fetch[1 + MLP_N];
    fetch[0] = weft_graph_find_output(g, "loss", 0);
    for (int i = 0; i < MLP_N; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "grad_%s", param_names[i]);
        fetch[1 + i] = weft_graph_find_value(g, nm);
    }
    weft_tensor *out[1 + MLP_N] = {0};
    double *vals = NULL;
    int total = 0;
    if (weft_graph_run(g, 2, (weft_value[]){vx, vy}, (weft_tensor *[]){x, y}, 1 + MLP_N, fetch, out, 0, NULL) ==
        WEFT_OK) {
        for (int i = 0; i < 1 + MLP_N; i++)
            total += (int)weft_tensor_numel(out[i]);
        vals = malloc(sizeof(double) * (size_t)total);
        int k = 0;
        for (int i = 0; i < 1 + MLP_N; i++) {
            weft_tensor_to_f64(out[i], vals + k, weft_tensor_numel(out[i]));
            k += (int)weft_tensor_numel(out[i]);
        }
    }
    for (int i = 0; i < 1 + MLP_N; i++)
        weft_tensor_free(out[i]);
    weft_tensor_free(x);
    weft_tensor_free(y);
    *n_out = total;
    return vals;
}

static int child_main(const char *graph_path, const char *out_path) {
    weft_graph *g = weft_graph_load(graph_path);
    if (!g) {
        fprintf(stderr, "child: %s\n", weft_last_error());
        return 3;
    }
    int n = 0;
    double *v = fixed_run(g, &n);
    weft_graph_free(g);
    if (!v) {
        fprintf(stderr, "child: %s\n", weft_last_error());
        return 4;
    }
    FILE *f = fopen(out_path, "wb");
    bool ok = f && fwrite(&n, sizeof n, 1, f) == 1 && fwrite(v, sizeof *v, (size_t)n, f) == (size_t)n;
    if (f) ok = fclose(f) == 0 && ok;
    free(v);
    return ok ? 0 : 5;
}

// Names the fetches so that a process that never saw the trace can find them.
static weft_graph *named_train_graph(mlp *m) {
    weft_graph *g = weft_graph_new();
    weft_tensor *x = wt_rand64(WEFT_DIMS(5, 3), -1, 1, 51, false), *y = labels(6);
    weft_tensor **p = mlp_params(m);
    weft_graph_trace_begin(g);
    weft_graph_trace_input(g, x, "x");
    weft_graph_trace_input(g, y, "y");
    for (int i = 0; i < MLP_N; i++)
        weft_graph_trace_variable(g, p[i], param_names[i]);
    weft_tensor *loss = mlp_loss(m, x, y);
    weft_backward(loss, NULL, NULL);
    weft_value vl = weft_graph_trace_output(g, loss), vg[MLP_N];
    for (int i = 0; i < MLP_N; i++)
        vg[i] = weft_graph_trace_output(g, weft_tensor_grad(p[i]));
    CHECK(weft_graph_trace_end(g) == WEFT_OK);
    // identity nodes with stable names for the fetches
    CHECK(weft_graph_op_named(g, "loss", "mul_scalar", 1, &vl, NULL, 0, (double[]){1}, 1, NULL) == WEFT_OK);
    for (int i = 0; i < MLP_N; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "grad_%s", param_names[i]);
        CHECK(weft_graph_op_named(g, nm, "mul_scalar", 1, &vg[i], NULL, 0, (double[]){1}, 1, NULL) == WEFT_OK);
        weft_tensor_zero_grad(p[i]);
    }
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_tensor_free(loss);
    return g;
}

static void test_fresh_process(void) {
    char path[300], out[300];
    tmp_path("fresh.wgraph", path, sizeof path);
    tmp_path("fresh.out", out, sizeof out);
    mlp m = mlp_new(20);
    weft_graph *g = named_train_graph(&m);
    CHECK(weft_graph_save(g, path) == WEFT_OK);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) { // a new program image: nothing of this process's state survives
        execl("/proc/self/exe", "test_serialize", "--child", path, out, (char *)NULL);
        _exit(127);
    }
    CHECK(pid > 0);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    int n = 0, nc = 0;
    double *mine = fixed_run(g, &n), *theirs = NULL;
    FILE *f = fopen(out, "rb");
    CHECK(f != NULL);
    if (f) {
        if (fread(&nc, sizeof nc, 1, f) == 1 && nc == n && n > 0) {
            theirs = malloc(sizeof(double) * (size_t)n);
            if (fread(theirs, sizeof *theirs, (size_t)n, f) != (size_t)n) {
                free(theirs);
                theirs = NULL;
            }
        }
        fclose(f);
    }
    CHECK(mine && theirs && n == 1 + 18 + 6 + 6 + 6 + 24 + 4);
    if (mine && theirs) CHECK(!memcmp(mine, theirs, sizeof(double) * (size_t)n)); // bit-identical
    // and the values are right: eager on the same feeds
    weft_tensor *x = wt_rand64(WEFT_DIMS(5, 3), -2, 2, 77, false), *y = labels(5), *loss = mlp_loss(&m, x, y);
    CHECK(weft_backward(loss, NULL, NULL) == WEFT_OK);
    if (theirs) CHECK_NEAR(theirs[0], weft_tensor_item(loss), 1e-9);
    double gw1[18];
    weft_tensor_to_f64(weft_tensor_grad(m.w1), gw1, 18);
    if (theirs) CHECK_NEAR(theirs[1 + 17], gw1[17], 1e-9);
    free(mine);
    free(theirs);
    weft_tensor_free(x);
    weft_tensor_free(y);
    weft_tensor_free(loss);
    weft_graph_free(g);
    mlp_free(&m);
}

// ---- malformed files ----
// A graph file written by hand: a JSON node list and optional tensors.
static void write_raw(const char *path, const char *format, const char *version, const char *json, int n,
                      const char *const *names, weft_tensor *const *ts) {
    const char *mk[3] = {"format", "version", "graph"}, *mv[3] = {format, version, json};
    CHECK(weft_safetensors_save(path, n, names, ts, 3, mk, mv) == WEFT_OK);
}

// Loading must fail with a message containing every one of the strings.
static void expect_fail(const char *what, const char *path, const char *s1, const char *s2, const char *s3) {
    weft_graph *g = weft_graph_load(path);
    bool ok = !g && wt_error_has("graph_load") && wt_error_has(path) && (!s1 || wt_error_has(s1)) && (!s2 || wt_error_has(s2)) &&
              (!s3 || wt_error_has(s3));
    if (!ok || getenv("WT_VERBOSE"))
        fprintf(stderr, "%s: got %s: '%s'\n", what, g ? "a graph" : "error", weft_last_error());
    CHECK(ok);
    weft_graph_free(g);
}

#define X_NODE "{\"name\":\"x\",\"kind\":\"placeholder\",\"out\":[{\"dtype\":\"f32\",\"shape\":[4,3]}]}"
#define W_NODE "{\"name\":\"w\",\"kind\":\"variable\",\"out\":[{\"dtype\":\"f32\",\"shape\":[3,5]}]}"

static void test_malformed(void) {
    char p[300];
    tmp_path("bad.wgraph", p, sizeof p);
    weft_tensor *w = wt_keep(weft_tensor_ones(WEFT_DIMS(3, 5), WEFT_F32));
    weft_tensor *wt = wt_keep(weft_tensor_ones(WEFT_DIMS(5, 3), WEFT_F32));
    const char *wn[] = {"var/w"};

    // a well-formed hand-written file loads (the cases below each break one thing)
    write_raw(p, "weft.graph", "1",
              "{\"nodes\":[" X_NODE "," W_NODE ",{\"name\":\"fc1\",\"kind\":\"op\",\"op\":\"matmul\",\"in\":[0,1],"
              "\"out\":[{\"dtype\":\"f32\",\"shape\":[4,5]}]}]}",
              1, wn, &w);
    weft_graph *g = weft_graph_load(p);
    CHECK(g && weft_graph_node_count(g) == 3);
    weft_graph_free(g);

    write_raw(p, "weft.graph", "1", "{\"nodes\":[" X_NODE ",{\"name\":", 0, NULL, NULL);
    expect_fail("corrupt JSON", p, "not valid JSON", NULL, NULL);
    write_raw(p, "weft.graph", "3", "{\"nodes\":[]}", 0, NULL, NULL);
    expect_fail("version", p, "version '3'", NULL, NULL);
    write_raw(p, "onnx", "1", "{\"nodes\":[]}", 0, NULL, NULL);
    expect_fail("format", p, "not a weft graph file", NULL, NULL);
    write_raw(p, "weft.graph", "1",
              "{\"nodes\":[" X_NODE ",{\"name\":\"fc1\",\"kind\":\"op\",\"op\":\"frobnicate\",\"in\":[0],"
              "\"out\":[{\"dtype\":\"f32\",\"shape\":[4,3]}]}]}",
              0, NULL, NULL);
    expect_fail("unknown op", p, "node 'fc1'", "unknown op 'frobnicate'", NULL);
    write_raw(p, "weft.graph", "1",
              "{\"nodes\":[" X_NODE "," W_NODE ",{\"name\":\"fc1\",\"kind\":\"op\",\"op\":\"matmul\",\"in\":[0,7],"
              "\"out\":[{\"dtype\":\"f32\",\"shape\":[4,5]}]}]}",
              1, wn, &w);
    expect_fail("bad input id", p, "node 'fc1' (op matmul)", "input 1 (value 7) out of range", NULL);
    write_raw(p, "weft.graph", "1",
              "{\"nodes\":[" X_NODE ",{\"name\":\"r\",\"kind\":\"op\",\"op\":\"relu\",\"in\":[1],"
              "\"out\":[{\"dtype\":\"f32\",\"shape\":[4,3]}]}]}",
              0, NULL, NULL);
    expect_fail("input from itself", p, "node 'r' (op relu)", "out of range", NULL);
    write_raw(p, "weft.graph", "1",
              "{\"nodes\":[" X_NODE "," W_NODE ",{\"name\":\"fc1\",\"kind\":\"op\",\"op\":\"matmul\",\"in\":[0,1],"
              "\"out\":[{\"dtype\":\"f32\",\"shape\":[4,6]}]}]}",
              1, wn, &w);
    expect_fail("a lying shape", p, "node 'fc1' (op matmul)", "(4,6)", "infer gives f32 (4,5)");
    write_raw(p, "weft.graph", "1",
              "{\"nodes\":[" X_NODE ",{\"name\":\"fc1\",\"kind\":\"op\",\"op\":\"matmul\",\"in\":[0,0],"
              "\"out\":[{\"dtype\":\"f32\",\"shape\":[4,4]}]}]}",
              0, NULL, NULL);
    expect_fail("infer error", p, "node 'fc1' (op matmul)", "(4,3)", NULL);
    write_raw(p, "weft.graph", "1", "{\"nodes\":[" X_NODE "," W_NODE "]}", 1, wn, &wt);
    expect_fail("wrong tensor shape", p, "node 'w' (variable)", "tensor 'var/w' is f32 (5,3)", "f32 (3,5)");
    write_raw(p, "weft.graph", "1", "{\"nodes\":[" X_NODE "," W_NODE "]}", 0, NULL, NULL);
    expect_fail("missing tensor", p, "node 'w'", "'var/w' is missing", NULL);
    const char *extra[] = {"var/w", "const/ghost"};
    write_raw(p, "weft.graph", "1", "{\"nodes\":[" X_NODE "," W_NODE "]}", 2, extra, (weft_tensor *[]){w, w});
    expect_fail("extra tensor", p, "'const/ghost'", "no constant or variable", NULL);
    write_raw(p, "weft.graph", "1", "{\"nodes\":[" X_NODE "," X_NODE "]}", 0, NULL, NULL);
    expect_fail("duplicate names", p, "node 'x'", "duplicate", NULL);
    write_raw(p, "weft.graph", "1",
              "{\"nodes\":[" X_NODE
              ",{\"name\":\"s\",\"kind\":\"op\",\"op\":\"mul_scalar\",\"in\":[0],\"f\":[\"lots\"],"
              "\"out\":[{\"dtype\":\"f32\",\"shape\":[4,3]}]}]}",
              0, NULL, NULL);
    expect_fail("bad attr", p, "node 's' (op mul_scalar)", "float attr 0", NULL);
    write_raw(
        p, "weft.graph", "1",
        "{\"nodes\":[{\"name\":\"x\",\"kind\":\"placeholder\",\"out\":[{\"dtype\":\"f32\",\"shape\":[4,\"3\"]}]}]}", 0,
        NULL, NULL);
    expect_fail("bad shape type", p, "node 'x'", "shape entry 1", NULL);
    write_raw(p, "weft.graph", "1",
              "{\"nodes\":[" X_NODE ",{\"name\":\"a\",\"kind\":\"assign\",\"in\":[0],\"var\":0,"
              "\"out\":[{\"dtype\":\"f32\",\"shape\":[4,3]}]}]}",
              0, NULL, NULL);
    expect_fail("assign to a placeholder", p, "node 'a'", "variable", NULL);
    write_raw(p, "weft.graph", "1",
              "{\"nodes\":[{\"name\":\"x\",\"kind\":\"placeholder\",\"ctrl\":[5],"
              "\"out\":[{\"dtype\":\"f32\",\"shape\":[4,3]}]}]}",
              0, NULL, NULL);
    expect_fail("bad control dep", p, "node 'x'", "control dependency 0", NULL);
    write_raw(p, "weft.graph", "1", "{\"nodes\":[{\"name\":\"x\",\"kind\":\"gizmo\",\"out\":[]}]}", 0, NULL, NULL);
    expect_fail("unknown kind", p, "unknown kind 'gizmo'", NULL, NULL);
    write_raw(p, "weft.graph", "1", "{\"nodes\":[{\"kind\":\"placeholder\"}]}", 0, NULL, NULL);
    expect_fail("no name", p, "node #0", "name", NULL);

    // a real file cut short, and a missing one
    bgraph b = builder_graph();
    char good[300];
    tmp_path("good.wgraph", good, sizeof good);
    CHECK(weft_graph_save(b.g, good) == WEFT_OK);
    FILE *f = fopen(good, "rb");
    char buf[1 << 16];
    size_t len = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    CHECK(len > 100 && len < sizeof buf);
    f = fopen(p, "wb");
    if (f) {
        fwrite(buf, 1, len - 40, f);
        fclose(f);
    }
    expect_fail("truncated", p, "past the end of the file", NULL, NULL);
    f = fopen(p, "wb");
    if (f) {
        fwrite(buf, 1, 5, f);
        fclose(f);
    }
    expect_fail("truncated header", p, "too short", NULL, NULL);
    tmp_path("missing.wgraph", p, sizeof p);
    expect_fail("missing file", p, "cannot open", NULL, NULL);
    CHECK(weft_graph_load(NULL) == NULL);
    CHECK(weft_graph_save(NULL, good) != WEFT_OK);
    CHECK(weft_graph_save(b.g, NULL) != WEFT_OK);
    CHECK(weft_graph_save(b.g, "/nonexistent-dir/g.wgraph") != WEFT_OK && wt_error_has("graph_save"));
    bgraph_free(&b);
}

// A saved cycle (through control deps) loads; the run reports it, naming a node.
static void test_cycle_survives(void) {
    char p[300];
    tmp_path("cycle.wgraph", p, sizeof p);
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", WEFT_DIMS(2), WEFT_F32);
    weft_value a = weft_graph_op1(g, "exp", 1, &x, NULL, 0, NULL, 0),
               b = weft_graph_op1(g, "sin", 1, &a, NULL, 0, NULL, 0);
    CHECK(weft_graph_add_control_dep(g, weft_graph_value_node(g, a), weft_graph_value_node(g, b)) == WEFT_OK);
    CHECK(weft_graph_save(g, p) == WEFT_OK);
    weft_graph *h = weft_graph_load(p);
    CHECK(h != NULL);
    weft_tensor *xt = weft_tensor_ones(WEFT_DIMS(2), WEFT_F32), *o = NULL;
    CHECK(h && weft_graph_run(h, 1, &x, &xt, 1, &b, &o, 0, NULL) == WEFT_ERR_STATE && wt_error_has("cycle"));
    weft_tensor_free(xt);
    weft_graph_free(h);
    weft_graph_free(g);
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--child")) return child_main(argv[2], argv[3]);
    snprintf(g_dir, sizeof g_dir, "/tmp/weft_serialize_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_builder_roundtrip);
    RUN(test_traced_roundtrip);
    RUN(test_fresh_process);
    RUN(test_malformed);
    RUN(test_cycle_survives);
    char cmd[320];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return wt_summary();
}
