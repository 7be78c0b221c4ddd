// Writes the fuzz harnesses' seed corpora, tests/fuzz/corpus/<harness>/ (run
// again after a format change; docs/reliability.md):
//   fuzz_make_corpus SOURCE_DIR OUT_DIR
// Seeds are small valid inputs that reach deep into each parser: the model
// files of models/, safetensors of every dtype, checkpoints of the
// checkpoint harness's model, graph files with every kind of node (view ops,
// conv, norms, index ops, cond, while, fused groups, a traced training step),
// IDX files plain and gzipped, text, and command lines.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <weft.h>
#include <weft/graph_passes.h>

#include "../../tests/fuzz/checkpoint_model.h"
#include "train/train_impl.h"

static const char *g_out;
static int g_fail;

static void put(const char *harness, const char *name, const void *data, size_t n) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", g_out, harness);
    mkdir(p, 0777);
    snprintf(p, sizeof p, "%s/%s/%s", g_out, harness, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", p);
        g_fail = 1;
    }
    if (f) fclose(f);
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    *n = b ? fread(b, 1, (size_t)len, f) : 0;
    fclose(f);
    return b;
}

static void put_file(const char *harness, const char *name, const char *path) {
    size_t n = 0;
    unsigned char *b = slurp(path, &n);
    if (!b) {
        fprintf(stderr, "cannot read %s\n", path);
        g_fail = 1;
        return;
    }
    put(harness, name, b, n);
    free(b);
}

static void check(weft_status st, const char *what) {
    if (st == WEFT_OK) return;
    fprintf(stderr, "%s: %s\n", what, weft_last_error());
    g_fail = 1;
}

// ---- model files ----
static void model_files(const char *src) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models", src);
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strstr(e->d_name, ".cfg")) continue;
        char p[8192];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        put_file("model_file", e->d_name, p);
    }
    if (d) closedir(d);
    static const char every_key[] =
        "[net]\nname = all\ndataset = fmnist\ninput = 1,28,28\nshuffle = false\nbatch = 16\nepochs = 2\nsteps = 10\n"
        "seed = 7\nloss = hinge\noptimizer = rmsprop\nlr = 0.01\nmomentum = 0.5\nalpha = 0.9\neps = 1e-6\n"
        "weight_decay = 0.001\nschedule = cosine\nwarmup = 2\nmin_lr = 0.0001\nclip = 1.5\nprecision = bf16\n"
        "eval_every = 5\nckpt_every = 5\nlog_every = 1\n"
        "[conv2d]\nin = 1\nout = 4\nkernel = 3,3\nstride = 1\npad = 1\ndilation = 1\ngroups = 1\nbias = true\n"
        "[batchnorm]\nmomentum = 0.2\neps = 1e-5\n[relu]\n[maxpool]\nkernel = 2\nstride = 2\npad = 0\n"
        "[avgpool]\nkernel = 3\nstride = 1\npad = 1\ncount_include_pad = false\n[gelu]\napproximate = tanh\n[flatten]\n[dropout]\np = 0.25\n"
        "[linear]\nin = 784\nout = 32\nbias = false\n[layernorm]\ndim = 32\neps = 1e-6\n[tanh]\n[sigmoid]\n[silu]\n"
        "[linear]\nout = 10\n";
    put("model_file", "every_key.cfg", every_key, sizeof every_key - 1);
    static const char lm[] = "[net]\ndataset = kjv\ncontext = 32\nval_fraction = 0.2\noptimizer = sgd\nmomentum = 0.9\n"
                             "nesterov = true\nschedule = step\nstep_size = 100\ngamma = 0.5\n"
                             "[embedding]\nvocab = 256\ndim = 16\nposition = learned\n[lstm]\nin = 16\nhidden = 16\n"
                             "layers = 2\n[gru]\nhidden = 16\nlayers = 1\n[rnn]\nin = 16\nhidden = 16\nnonlinearity = relu\n"
                             "[attention]\ndim = 16\nheads = 4\n[transformer]\nheads = 2\nblocks = 2\ngelu = tanh\n"
                             "[linear]\nout = vocab\n";
    put("model_file", "every_layer_lm.cfg", lm, sizeof lm - 1);
}

// ---- safetensors ----
static void safetensors_files(const char *src) {
    char p[4096];
    snprintf(p, sizeof p, "%s/tests/data/ref.safetensors", src);
    put_file("safetensors", "ref.safetensors", p);
    const char *names[WEFT_NUM_DTYPES + 1];
    weft_tensor *ts[WEFT_NUM_DTYPES + 1];
    char nb[WEFT_NUM_DTYPES][16];
    for (int d = 0; d < WEFT_NUM_DTYPES; d++) {
        snprintf(nb[d], sizeof nb[d], "t_%s", weft_dtype_name((weft_dtype)d));
        names[d] = nb[d];
        ts[d] = weft_tensor_arange(0, 6, 1, WEFT_F64);
        weft_tensor *r = weft_reshape(ts[d], WEFT_DIMS(2, 3)), *c = weft_cast(r, (weft_dtype)d);
        weft_tensor_free(ts[d]);
        weft_tensor_free(r);
        ts[d] = c;
    }
    names[WEFT_NUM_DTYPES] = "empty";
    ts[WEFT_NUM_DTYPES] = weft_tensor_zeros(WEFT_DIMS(0, 4), WEFT_F32);
    const char *mk[] = {"format", "note"}, *mv[] = {"pt", "seed"};
    snprintf(p, sizeof p, "%s/st.tmp", g_out);
    check(weft_safetensors_save(p, WEFT_NUM_DTYPES + 1, names, ts, 2, mk, mv), "safetensors");
    put_file("safetensors", "every_dtype.safetensors", p);
    unlink(p);
    for (int d = 0; d <= WEFT_NUM_DTYPES; d++) weft_tensor_free(ts[d]);
}

// ---- checkpoints of the checkpoint harness's model ----
static void checkpoint(const char *model, const char *name) {
    weft_model_cfg *cfg = weft_model_cfg_parse(model, strlen(model), "fuzz-checkpoint.cfg");
    char dir[4096], p[4200];
    snprintf(dir, sizeof dir, "%s/ckpt.tmp", g_out);
    weft_run r = {.cfg = cfg, .opts = {.ckpt_dir = dir}};
    r.step = 3;
    check(cfg ? weft_run_build(&r, true) : weft_last_status(), "checkpoint build");
    check(weft_run_save(&r), "checkpoint save");
    weft_ckpt_path(dir, 3, p, sizeof p);
    put_file("checkpoint", name, p);
    unlink(p);
    rmdir(dir);
    weft_run_free(&r);
    weft_model_cfg_free(cfg);
}

// ---- graphs ----
static weft_value op(weft_graph *g, const char *name, int n, const weft_value *in, int ni, const int64_t *ia, int nf,
                     const double *fa) {
    weft_value v = weft_graph_op1(g, name, n, in, ia, ni, fa, nf);
    if (v.id < 0) {
        fprintf(stderr, "graph op %s: %s\n", name, weft_last_error());
        g_fail = 1;
    }
    return v;
}
#define VALS(...) (int)(sizeof((weft_value[]){__VA_ARGS__}) / sizeof(weft_value)), (weft_value[]){__VA_ARGS__}
#define I(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}
#define OP(g, name, ...) op(g, name, VALS(__VA_ARGS__), 0, NULL, 0, NULL)
#define OPI(g, name, ia, ...) op(g, name, VALS(__VA_ARGS__), ia, 0, NULL)

static void save_graph(weft_graph *g, const char *name) {
    char p[4096];
    snprintf(p, sizeof p, "%s/g.tmp", g_out);
    check(weft_graph_save(g, p), name);
    put_file("graph", name, p);
    unlink(p);
    weft_graph_free(g);
}

static weft_value constant(weft_graph *g, const char *name, weft_tensor *t) {
    weft_value v = weft_graph_constant(g, name, t);
    weft_tensor_free(t);
    return v;
}

// view ops, elementwise, reductions, index ops
static void graph_views(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", 3, (int64_t[]){2, 3, 4}, WEFT_F32);
    weft_value v = OPI(g, "view", I(2, 6, 4), x);
    weft_value p = OPI(g, "permute", I(2, 0, 1), x);
    weft_value s = OPI(g, "slice", I(2, 1, 4, 2), x);
    weft_value sb = OPI(g, "slice_backward", I(2, 1, 4, 2, 3, 2, 3, 4), s);
    weft_value e = OPI(g, "expand", I(4, 5, 2, 3, 4), x);
    weft_value r = OPI(g, "sum", I(3, 0), e);
    weft_value m = OPI(g, "mean", I(4, 1), x);
    weft_value vr = OPI(g, "var", I(1, 0, 1), x);
    weft_value am = OPI(g, "argmax", I(2, 0), x);
    weft_value sm = OPI(g, "softmax", I(2), x);
    weft_value ls = OPI(g, "log_softmax", I(0), p);
    weft_value c = OPI(g, "cast", I(WEFT_F64), x);
    weft_value cc = OPI(g, "concat", I(1), x, sb, x);
    weft_value ix = constant(g, "ix", weft_tensor_arange(0, 3, 1, WEFT_I64));
    weft_value is = OPI(g, "index_select", I(1), x, ix);
    weft_value gi = constant(g, "gi", weft_tensor_zeros(WEFT_DIMS(2, 3, 2), WEFT_I64));
    weft_value ga = OPI(g, "gather", I(2), x, gi);
    weft_value sa = OPI(g, "scatter_add", I(2), x, gi, ga);
    weft_value gt = OP(g, "gt", x, sb);
    weft_value wh = OP(g, "where", gt, x, sb);
    weft_value ad = OP(g, "add", OP(g, "mul", wh, sa), OP(g, "exp", OP(g, "neg", x)));
    weft_value ps = op(g, "pow_scalar", 1, &ad, 0, NULL, 1, (double[]){2.0});
    (void)v, (void)r, (void)m, (void)vr, (void)am, (void)sm, (void)ls, (void)c, (void)cc, (void)is, (void)ps;
    save_graph(g, "views.wgraph");
}

// conv, pooling, norms, matmul, attention, losses, an optimiser update and assign
static void graph_nn(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", 4, (int64_t[]){2, 2, 6, 6}, WEFT_F32);
    weft_value w = weft_graph_variable(g, "w", weft_tensor_ones(WEFT_DIMS(3, 2, 3, 3), WEFT_F32));
    weft_value y = OPI(g, "conv2d", I(1, 1, 1, 1, 1, 1, 1, 0), x, w);
    weft_value bi = OPI(g, "conv2d_backward_input", I(1, 1, 1, 1, 1, 1, 1, 0, 6, 6), y, w);
    weft_value bw = OPI(g, "conv2d_backward_weight", I(1, 1, 1, 1, 1, 1, 1, 0, 3, 3), y, x);
    weft_value mp = OPI(g, "max_pool2d", I(2, 2, 2, 2, 0, 0, 0), y);
    weft_value ap = OPI(g, "avg_pool2d", I(3, 3, 1, 1, 1, 1, 1), y);
    weft_value apb = OPI(g, "avg_pool2d_backward", I(3, 3, 1, 1, 1, 1, 1, 0, 6, 6), ap);
    weft_value bn[3], ln[3];
    check(weft_graph_op(g, "batch_norm", 1, &y, (int64_t[]){0, 0, 0, 0, 1}, 5, (double[]){0.1, 1e-5}, 2, bn), "bn");
    check(weft_graph_op(g, "layer_norm", 1, &y, (int64_t[]){2, 0, 0}, 3, (double[]){1e-5}, 1, ln), "ln");
    weft_value a = weft_graph_placeholder(g, "a", 2, (int64_t[]){4, 3}, WEFT_F32);
    weft_value b = weft_graph_variable(g, "b", weft_tensor_ones(WEFT_DIMS(4, 3), WEFT_F32));
    weft_value mm = OPI(g, "matmul", I(0, 1), a, b);
    weft_value lab = constant(g, "lab", weft_tensor_zeros(WEFT_DIMS(4), WEFT_I64));
    weft_value ce = OP(g, "cross_entropy", mm, lab);
    weft_value q = weft_graph_placeholder(g, "q", 4, (int64_t[]){1, 2, 3, 4}, WEFT_F32);
    weft_value at[2];
    check(weft_graph_op(g, "causal_attention", 3, (weft_value[]){q, q, q}, NULL, 0, (double[]){0.5}, 1, at), "attn");
    weft_value dr = op(g, "dropout", 1, &mm, 2, (int64_t[]){7, 0}, 1, (double[]){0.5});
    weft_value emb = OP(g, "embedding", b, lab);
    weft_value lr = constant(g, "lr", weft_tensor_scalar(0.1, WEFT_F32));
    weft_value up = op(g, "sgd_update", 3, (weft_value[]){b, b, lr}, 0, NULL, 0, NULL);
    weft_graph_assign(g, "step", b, up);
    (void)bi, (void)bw, (void)mp, (void)apb, (void)ce, (void)dr, (void)emb;
    save_graph(g, "nn.wgraph");
}

// cond and while_loop (version 2 files)
static void graph_control(void) {
    weft_graph *g = weft_graph_new(), *tg = weft_graph_new(), *eg = weft_graph_new();
    weft_value pr = weft_graph_placeholder(g, "p", 0, NULL, WEFT_BOOL);
    weft_value a = weft_graph_placeholder(g, "a", 1, (int64_t[]){3}, WEFT_F64);
    weft_value ta = weft_graph_placeholder(tg, "a", 1, (int64_t[]){3}, WEFT_F64);
    weft_value ea = weft_graph_placeholder(eg, "a", 1, (int64_t[]){3}, WEFT_F64);
    weft_value to = OP(tg, "exp", ta), eo = OP(eg, "neg", ea), out;
    check(weft_graph_cond(g, "pick", pr, 1, &a, tg, &to, eg, &eo, 1, &out), "cond");
    weft_graph *cg = weft_graph_new(), *bg = weft_graph_new();
    weft_value i0 = weft_graph_placeholder(g, "i", 0, NULL, WEFT_F64);
    weft_value ci = weft_graph_placeholder(cg, "i", 0, NULL, WEFT_F64);
    weft_value five = constant(cg, "five", weft_tensor_scalar(5, WEFT_F64));
    weft_value cp = OP(cg, "lt", ci, five);
    weft_value bi = weft_graph_placeholder(bg, "i", 0, NULL, WEFT_F64);
    weft_value bo = op(bg, "add_scalar", 1, &bi, 0, NULL, 1, (double[]){1.0}), lo;
    check(weft_graph_while_loop(g, "loop", cg, cp, bg, &bo, 1, &i0, &lo, 100), "while");
    save_graph(g, "control.wgraph");
}

// a fused group (weft_graph_optimize) and a traced training step of a tiny MLP
static void graph_fused_and_traced(void) {
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", 2, (int64_t[]){4, 8}, WEFT_F32);
    weft_value w = weft_graph_variable(g, "w", weft_tensor_ones(WEFT_DIMS(8, 8), WEFT_F32));
    weft_value y = OP(g, "tanh", OP(g, "add", OP(g, "relu", OP(g, "matmul", x, w)), x));
    weft_value keep = OP(g, "sigmoid", op(g, "mul_scalar", 1, &y, 0, NULL, 1, (double[]){0.5}));
    weft_value keep_out;
    weft_graph *o = weft_graph_optimize(g, 1, &keep, &keep_out, NULL, NULL);
    check(o ? WEFT_OK : weft_last_status(), "optimize");
    save_graph(g, "plain.wgraph");
    if (o) save_graph(o, "fused.wgraph");

    weft_graph *t = weft_graph_new();
    weft_generator *gen = weft_generator_create(1);
    weft_tensor *xt = weft_tensor_randn(WEFT_DIMS(4, 1, 6, 6), WEFT_F32, gen);
    weft_tensor *lab = weft_tensor_zeros(WEFT_DIMS(4), WEFT_I64);
    weft_tensor *wc = weft_tensor_randn(WEFT_DIMS(2, 1, 3, 3), WEFT_F32, gen);
    weft_tensor *wl = weft_tensor_randn(WEFT_DIMS(3, 8), WEFT_F32, gen);
    weft_tensor_set_requires_grad(wc, true);
    weft_tensor_set_requires_grad(wl, true);
    check(weft_graph_trace_begin(t), "trace");
    weft_graph_trace_input(t, xt, "x");
    weft_graph_trace_input(t, lab, "labels");
    weft_graph_trace_variable(t, wc, "conv.weight");
    weft_graph_trace_variable(t, wl, "fc.weight");
    weft_tensor *c = weft_conv2d(xt, wc, NULL, NULL), *r = weft_relu(c);
    weft_pool2d_params pp = {.kernel = {2, 2}};
    weft_tensor *mp = weft_max_pool2d(r, &pp), *fl = weft_flatten(mp, 1, -1);
    weft_tensor *sl = weft_narrow(fl, 1, 0, 8), *wt = weft_transpose(wl, 0, 1), *lg = weft_matmul(sl, wt);
    weft_tensor *loss = weft_cross_entropy(lg, lab);
    check(loss ? weft_backward(loss, NULL, NULL) : weft_last_status(), "backward");
    weft_graph_trace_output(t, loss);
    weft_graph_trace_output(t, weft_tensor_grad(wc));
    check(weft_graph_trace_end(t), "trace_end");
    save_graph(t, "traced_step.wgraph");
    weft_tensor *all[] = {xt, lab, wc, wl, c, r, mp, fl, sl, wt, lg, loss};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) weft_tensor_free(all[i]);
    weft_generator_free(gen);
}

// ---- IDX ----
static void idx_files(void) {
    unsigned char lab[8 + 5] = {0, 0, 8, 1, 0, 0, 0, 5, 0, 1, 2, 9, 3};
    put("idx", "labels.idx1", lab, sizeof lab);
    unsigned char img[16 + 2 * 28 * 28] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 28, 0, 0, 0, 28};
    for (size_t i = 16; i < sizeof img; i++) img[i] = (unsigned char)(i * 7);
    put("idx", "images.idx3", img, sizeof img);
    unsigned char two[] = {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6};
    put("idx", "matrix.idx2", two, sizeof two);
    unsigned char gz[4096];
    // a gzip stream (zlib's compress2 writes zlib format; gzip needs deflateInit2 with windowBits 31)
    z_stream zs = {0};
    deflateInit2(&zs, 9, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY);
    zs.next_in = img, zs.avail_in = sizeof img, zs.next_out = gz, zs.avail_out = sizeof gz;
    deflate(&zs, Z_FINISH);
    deflateEnd(&zs);
    put("idx", "images.idx3.gz", gz, zs.total_out);
}

// ---- text ----
static void text_files(void) {
    static const char kjv[] = "\x35\x40In the beginning God created the heaven and the earth.\nAnd the earth was without "
                              "form, and void; and darkness was upon the face of the deep.\n";
    put("text", "kjv.bin", kjv, sizeof kjv - 1);
    static const char i64[] = "\xf3\x10" "0123456789abcdefghijklmnopqrstuvwxyz";
    put("text", "i64.bin", i64, sizeof i64 - 1);
    static const char tiny[] = "\x00\x00" "ab";
    put("text", "tiny.bin", tiny, sizeof tiny - 1);
}

// ---- command lines (arguments after "weft", NUL-separated; @mlp @gpt @bad: fuzz_cli.c's model files) ----
static void cli_lines(void) {
    static const char *const k[][2] = { // '|' separates the arguments here
        {"train", "train|@mlp|--steps|5|--batch|8|--lr|0.01|--clip|1|--threads|2|--seed|9|--quiet"},
        {"train_dirs", "train|@mlp|--ckpt-dir|/tmp/x|--ckpt-every|10|--keep|2|--resume|--log-dir|/tmp/l|"
                       "--data-dir|/tmp/d|--eval-batches|3|--graph|--device|cpu"},
        {"train_dist", "train|@gpt|--dist|ps|--servers|2|--consistency|ssp:3|--backup|1|--bucket-mb|2.5|"
                       "--straggle|1:2|--text|/tmp/t"},
        {"eval", "eval|@mlp|--ckpt|c.safetensors|--batch|4|--device|cuda:0"},
        {"sample", "sample|@gpt|--ckpt|c|--tokens|10|--prompt|In the|--temperature|0.5|--seed|3"},
        {"graph", "graph|@mlp|--dot|/tmp/g.dot|--optimize|--save|/tmp/g.wgraph"},
        {"bad_model", "train|@bad"},
        {"info", "info|x.safetensors"},
        {"version", "version"},
        {"ops", "ops"},
        {"help", "--help"},
        {"launch", "launch|-n|2|--|weft|train|@mlp"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char b[512];
        size_t n = strlen(k[i][1]);
        memcpy(b, k[i][1], n);
        for (size_t j = 0; j < n; j++)
            if (b[j] == '|') b[j] = 0;
        put("cli", k[i][0], b, n);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s SOURCE_DIR OUT_DIR (e.g. . tests/fuzz/corpus)\n", argv[0]);
        return 2;
    }
    g_out = argv[2];
    mkdir(g_out, 0777);
    weft_manual_seed(1);
    model_files(argv[1]);
    safetensors_files(argv[1]);
    checkpoint(k_fuzz_ckpt_model, "adam_f16.safetensors");
    static const char sgd[] = "[net]\ndataset = fmnist\noptimizer = sgd\nmomentum = 0.9\nbatch = 4\n[avgpool]\nkernel = 7\n"
                              "[flatten]\n[batchnorm]\n[dropout]\np = 0.1\n[linear]\nout = 10\n";
    checkpoint(sgd, "sgd.safetensors"); // another optimiser's: refused, naming both
    graph_views();
    graph_nn();
    graph_control();
    graph_fused_and_traced();
    idx_files();
    text_files();
    cli_lines();
    return g_fail;
}
