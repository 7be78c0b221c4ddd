// The weft command-line tool.
//   weft train MODEL.cfg [options]      train a model file (see usage())
//   weft launch -n N [...] -- CMD       run CMD on N ranks under mpirun, restarting it when a rank dies
//   weft eval MODEL.cfg --ckpt FILE     evaluate a checkpoint
//   weft sample MODEL.cfg --ckpt FILE   generate text from a language model
//   weft graph MODEL.cfg --dot FILE     trace one training step into a graph: DOT, optionally a graph file
//   weft export MODEL.cfg --onnx FILE   the model (and a checkpoint's weights) as an ONNX model
//   weft info [FILE.safetensors]        build/threads/devices, or a checkpoint's tensors
//   weft ops                            list the op table
//   weft version
// Errors are one line on stderr: exit 2 for bad usage (an unknown command or
// option, an option another command takes, a missing or unusable option
// value, a missing model file or --ckpt), 1 for everything else that fails.
//
// main = parse_cli (the whole command line, the model file included, into a
// `cli`; it runs nothing and never exits) + run_cli. weft_cli_parse_only
// gives the parsing alone to tests/fuzz/fuzz_cli.c (built with
// -DWEFT_CLI_NO_MAIN).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft.h>
#include <weft/dist.h>

int weft_cli_launch(int argc, char **argv); // launch.c

static FILE *g_errf; // where messages go (NULL: stderr)
static FILE *errf(void) { return g_errf ? g_errf : stderr; }

static int usage(void) {
    fprintf(errf(),
            "usage: weft <command> ...\n"
            "  train MODEL.cfg [--epochs N] [--steps N] [--batch B] [--lr X] [--clip X] [--threads T] [--seed S]\n"
            "                  [--ckpt-dir DIR] [--ckpt-every N] [--keep K] [--resume] [--log-dir DIR] [--quiet]\n"
            "                  [--data-dir DIR] [--text FILE] [--eval-batches N] [--graph] [--device D]\n"
            "                  [--dist ddp|ps] [--servers S] [--consistency bsp|asp|ssp:S] [--backup K]\n"
            "                  [--bucket-mb M] [--straggle RANK:FACTOR] [--tp T] [--pp P] [--microbatches M]\n"
            "                  [--schedule gpipe|1f1b|interleaved] [--virtual-stages V] [--zero 1|2] [--recompute]\n"
            "  launch -n N [--servers S] [--max-restarts R] [--hostfile F] -- weft train MODEL.cfg [...]\n"
            "  eval MODEL.cfg --ckpt FILE [--threads T] [--data-dir DIR] [--text FILE] [--eval-batches N]\n"
            "                  [--batch B] [--device D]\n"
            "  sample MODEL.cfg --ckpt FILE [--tokens N] [--prompt TEXT] [--temperature T] [--seed S] [--threads T]\n"
            "  graph MODEL.cfg --dot FILE [--optimize] [--save FILE.wgraph]\n"
            "  export MODEL.cfg --onnx FILE [--ckpt FILE] [--batch B]\n"
            "  info [FILE.safetensors]\n"
            "  ops\n"
            "  version\n");
    return 2;
}

static char g_err[512]; // a command-line problem (library errors come from weft_last_error)

static int fail(const char *what) {
    const char *msg = g_err[0] ? g_err : weft_last_error()[0] ? weft_last_error() : "failed";
    fprintf(errf(), "weft %s: %s\n", what, msg);
    return 1;
}

// Bad usage: the message in g_err (else the library's), exit status 2.
static int usage_fail(const char *what) {
    fail(what);
    return 2;
}

// A non-negative integer option value, else a one-line error.
static bool int_opt(const char *opt, const char *v, int64_t *out) {
    char *end;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || x < 0) {
        snprintf(g_err, sizeof g_err, "%s: expected a non-negative integer, got '%s'", opt, v);
        return false;
    }
    *out = x;
    return true;
}

// Options of train/eval/sample: which commands take each, and whether it
// has a value. An option of another command is a usage error, not ignored.
enum { TRAIN = 1, EVAL = 2, SAMPLE = 4 };
typedef struct cli_opt {
    const char *name;
    bool value;
    int cmds;
} cli_opt;
static const cli_opt k_opts[] = {
    {"--epochs", true, TRAIN},        {"--steps", true, TRAIN},         {"--batch", true, TRAIN | EVAL},
    {"--lr", true, TRAIN},            {"--seed", true, TRAIN | SAMPLE}, {"--clip", true, TRAIN},
    {"--threads", true, TRAIN | EVAL | SAMPLE},                         {"--ckpt-dir", true, TRAIN},
    {"--ckpt-every", true, TRAIN},    {"--keep", true, TRAIN},          {"--resume", false, TRAIN},
    {"--log-dir", true, TRAIN},       {"--quiet", false, TRAIN},        {"--data-dir", true, TRAIN | EVAL},
    {"--text", true, TRAIN | EVAL},   {"--eval-batches", true, TRAIN | EVAL},
    {"--graph", false, TRAIN},        {"--device", true, TRAIN | EVAL}, {"--dist", true, TRAIN},
    {"--servers", true, TRAIN},       {"--consistency", true, TRAIN},   {"--backup", true, TRAIN},
    {"--bucket-mb", true, TRAIN},     {"--straggle", true, TRAIN},      {"--ckpt", true, EVAL | SAMPLE},
    {"--prompt", true, SAMPLE},       {"--tokens", true, SAMPLE},       {"--temperature", true, SAMPLE},
    {"--tp", true, TRAIN},            {"--pp", true, TRAIN},            {"--microbatches", true, TRAIN},
    {"--schedule", true, TRAIN},      {"--virtual-stages", true, TRAIN}, {"--zero", true, TRAIN},
    {"--recompute", false, TRAIN},
};

static int cmd_bit(const char *cmd) { return !strcmp(cmd, "train") ? TRAIN : !strcmp(cmd, "eval") ? EVAL : SAMPLE; }

// Every argument is an option `cmd` takes, with its value where it has one
// (checked before the model file is read, so bad usage is reported as such).
// *ckpt: the value of --ckpt, if given.
static bool check_args(const char *cmd, int argc, char **argv, const char **ckpt) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const cli_opt *o = NULL;
        for (size_t k = 0; k < sizeof k_opts / sizeof k_opts[0] && !o; k++)
            if (!strcmp(a, k_opts[k].name)) o = &k_opts[k];
        if (!o) {
            snprintf(g_err, sizeof g_err, "unknown option '%s' (see weft --help)", a);
            return false;
        }
        if (!(o->cmds & cmd_bit(cmd))) {
            snprintf(g_err, sizeof g_err, "option '%s' is not one of weft %s's (see weft --help)", a, cmd);
            return false;
        }
        if (o->value && i + 1 >= argc) {
            snprintf(g_err, sizeof g_err, "option '%s' needs a value", a);
            return false;
        }
        if (!strcmp(a, "--ckpt")) *ckpt = argv[i + 1];
        i += o->value;
    }
    return true;
}

// A parsed command line: what run_cli runs.
typedef enum {
    CLI_VERSION, CLI_OPS, CLI_INFO, CLI_INFO_FILE, CLI_LAUNCH, CLI_GRAPH, CLI_EXPORT, CLI_TRAIN, CLI_EVAL, CLI_SAMPLE
} cli_kind;
typedef struct cli {
    cli_kind kind;
    const char *cmd;                  // argv[1]
    const char *file, *ckpt, *prompt; // file: info's FILE, or the model file
    weft_model_cfg *cfg;              // graph, train, eval, sample: the model file, read (owned)
    int64_t tokens;
    double temperature;
    uint64_t sample_seed;
    int threads; // --threads (0: not given)
    weft_train_opts t;
    const char *dot, *save; // graph
    const char *onnx;       // export (with ckpt and batch)
    int64_t batch;
    bool optimize;
    int argc; // launch: its own arguments
    char **argv;
} cli;

// The distributed-training options of `weft train` (a is one of them).
static bool parse_dist(const char *a, const char *v, weft_train_opts *t) {
    int64_t k;
    if (!strcmp(a, "--dist")) {
        if (!strcmp(v, "ddp")) t->dist = WEFT_TRAIN_DIST_DDP;
        else if (!strcmp(v, "ps")) t->dist = WEFT_TRAIN_DIST_PS;
        else if (!strcmp(v, "none")) t->dist = WEFT_TRAIN_DIST_NONE;
        else {
            snprintf(g_err, sizeof g_err, "--dist: expected ddp, ps or none, got '%s'", v);
            return false;
        }
    } else if (!strcmp(a, "--servers") || !strcmp(a, "--backup")) {
        if (!int_opt(a, v, &k)) return false;
        if (k > 1000000 || (k == 0 && a[2] == 's')) {
            snprintf(g_err, sizeof g_err, "%s: expected %s, got '%s'", a, a[2] == 's' ? "1 or more" : "a small count", v);
            return false;
        }
        *(a[2] == 's' ? &t->servers : &t->backup) = (int)k;
    } else if (!strcmp(a, "--consistency")) {
        if (weft_train_parse_consistency(v, &t->consistency, &t->staleness)) {
            snprintf(g_err, sizeof g_err, "%s", weft_last_error());
            return false;
        }
    } else if (!strcmp(a, "--bucket-mb")) {
        char *end;
        double m = strtod(v, &end);
        if (end == v || *end || !(m > 0) || m > 1e6) {
            snprintf(g_err, sizeof g_err, "--bucket-mb: expected a positive size in MB, got '%s'", v);
            return false;
        }
        t->bucket_mb = m;
    } else if (!strcmp(a, "--straggle")) {
        char *end;
        long r = strtol(v, &end, 10);
        double f = end != v && *end == ':' ? strtod(end + 1, &end) : -1;
        if (r < 0 || r > 1000000 || *end || !(f >= 1) || f > 1000) {
            snprintf(g_err, sizeof g_err, "--straggle: expected RANK:FACTOR with FACTOR >= 1 (e.g. 1:2), got '%s'", v);
            return false;
        }
        t->straggle_rank = (int)r;
        t->straggle_factor = f;
    }
    return true;
}

// The option values (check_args has vetted names and arity). false: a value
// it cannot take, with the reason in g_err.
static bool parse(int argc, char **argv, weft_model_cfg *cfg, cli *c) {
    // [net] keys that flags override, with the same validation as the file
    static const char *const net_flags[][2] = {
        {"--epochs", "epochs"}, {"--steps", "steps"}, {"--batch", "batch"},           {"--lr", "lr"},
        {"--seed", "seed"},     {"--clip", "clip"},   {"--tp", "tp"},                 {"--pp", "pp"},
        {"--microbatches", "microbatches"},           {"--schedule", "pp_schedule"},  {"--virtual-stages", "virtual_stages"},
        {"--zero", "zero"}};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool net = false;
        for (size_t k = 0; k < sizeof net_flags / sizeof net_flags[0]; k++)
            if (!strcmp(a, net_flags[k][0])) {
                if (weft_model_cfg_set(cfg, net_flags[k][1], v)) {
                    snprintf(g_err, sizeof g_err, "%s", weft_last_error());
                    return false;
                }
                if (!strcmp(a, "--seed")) c->sample_seed = strtoull(v, NULL, 10);
                net = true;
            }
        if (net) {
            i++;
            continue;
        }
        if (!strcmp(a, "--resume")) c->t.resume = true;
        else if (!strcmp(a, "--recompute")) { // [net] recompute = true
            if (weft_model_cfg_set(cfg, "recompute", "true")) {
                snprintf(g_err, sizeof g_err, "%s", weft_last_error());
                return false;
            }
        }
        else if (!strcmp(a, "--quiet")) c->t.quiet = true;
        else if (!strcmp(a, "--graph")) c->t.graph = true; // train in graph mode
        else if (!strcmp(a, "--threads")) {
            int64_t n;
            if (!int_opt(a, v, &n) || n < 1 || n > 4096) {
                snprintf(g_err, sizeof g_err, "--threads: expected a positive number, got '%s'", v);
                return false;
            }
            c->threads = (int)n, i++; // set by run_cli
        } else if (!strcmp(a, "--ckpt-dir")) c->t.ckpt_dir = v, i++;
        else if (!strcmp(a, "--ckpt-every")) {
            if (!int_opt(a, v, &c->t.ckpt_every)) return false;
            i++;
        } else if (!strcmp(a, "--keep")) {
            int64_t k;
            if (!int_opt(a, v, &k)) return false;
            c->t.keep_last = (int)(k > 1000000 ? 1000000 : k), i++;
        } else if (!strcmp(a, "--log-dir")) c->t.log_dir = v, i++;
        else if (!strcmp(a, "--data-dir")) c->t.data_dir = v, i++;
        else if (!strcmp(a, "--device")) { // cpu, cuda, cuda:N; one that is not there is the run's error
            weft_device d;
            if (weft_device_parse(v, &d)) {
                snprintf(g_err, sizeof g_err, "--device: %s", weft_last_error());
                return false;
            }
            c->t.device = v, i++;
        } else if (!strcmp(a, "--text")) c->t.text_path = v, i++;
        else if (!strcmp(a, "--eval-batches")) {
            if (!int_opt(a, v, &c->t.eval_batches)) return false;
            i++;
        } else if (!strcmp(a, "--ckpt")) c->ckpt = v, i++;
        else if (!strcmp(a, "--prompt")) c->prompt = v, i++;
        else if (!strcmp(a, "--tokens")) {
            if (!int_opt(a, v, &c->tokens)) return false;
            i++;
        } else if (!strcmp(a, "--temperature")) {
            char *end;
            c->temperature = strtod(v, &end);
            if (end == v || *end || !(c->temperature >= 0) || c->temperature > 1e30) {
                snprintf(g_err, sizeof g_err, "--temperature: expected a number >= 0, got '%s'", v);
                return false;
            }
            i++;
        } else if (!parse_dist(a, v, &c->t)) return false;
        else i++;
    }
    return true;
}

static int cmd_info_file(const char *path) {
    weft_safetensors *st = weft_safetensors_load(path);
    if (!st) return fail("info");
    int n = weft_safetensors_count(st);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        weft_tensor *t = weft_safetensors_tensor_at(st, i);
        char shp[128];
        printf("%-48s %-5s %s\n", weft_safetensors_name_at(st, i), weft_dtype_name(weft_tensor_dtype(t)),
               weft_tensor_shape_str(t, shp, sizeof shp));
        total += weft_tensor_numel(t);
    }
    for (int i = 0; i < weft_safetensors_meta_count(st); i++)
        printf("meta %s = %s\n", weft_safetensors_meta_key_at(st, i), weft_safetensors_meta_value_at(st, i));
    printf("%d tensors, %lld elements\n", n, (long long)total);
    weft_safetensors_free(st);
    return 0;
}

// DOT of g with the nodes from n_fwd on (the backward pass) in a filled,
// labelled cluster: the graph writer's text, closed with our additions.
static bool write_dot_marked(const weft_graph *g, int n_fwd, FILE *f) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return false;
    weft_status st = weft_graph_write_dot(g, m);
    fclose(m);
    // the writer ends with "}\n": reopen the graph body to add the marks
    while (len && (buf[len - 1] == '\n' || buf[len - 1] == ' ')) len--;
    if (st != WEFT_OK || !len || buf[len - 1] != '}') {
        free(buf);
        if (st == WEFT_OK) snprintf(g_err, sizeof g_err, "unexpected DOT text from the graph writer");
        return false;
    }
    fwrite(buf, 1, len - 1, f);
    free(buf);
    int n = weft_graph_node_count(g);
    if (n_fwd < n) {
        fprintf(f, "  subgraph cluster_backward {\n    label=\"backward (weft_backward)\"; style=dashed; color=gray40;\n");
        for (int i = n_fwd; i < n; i++) fprintf(f, "    n%d [style=filled, fillcolor=\"#fde2d6\"];\n", i);
        fprintf(f, "  }\n");
    }
    fprintf(f, "}\n");
    return !ferror(f);
}

// weft graph MODEL.cfg --dot FILE [--save FILE.wgraph]: traces one training
// step's computation (forward, loss, weft_backward) on a batch of the model
// file's shape (random inputs and labels: no data set is read).
//   --optimize: the DOT shows the graph after weft_graph_optimize (every pass
//   of weft_graph_passes_all, fused groups marked), keeping the loss and the
//   parameters' gradients; --save always saves the traced graph (fused nodes
//   are not stored in graph files).
// Its options, then the model file (parse_cli's part).
static int parse_graph(int argc, char **argv, cli *c) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--optimize")) {
            c->optimize = true;
            continue;
        }
        if (strcmp(a, "--dot") && strcmp(a, "--save")) {
            snprintf(g_err, sizeof g_err, "unknown option '%s' (see weft --help)", a);
            return usage_fail("graph");
        }
        if (i + 1 >= argc) {
            snprintf(g_err, sizeof g_err, "option '%s' needs a value", a);
            return usage_fail("graph");
        }
        *(a[2] == 'd' ? &c->dot : &c->save) = argv[++i];
    }
    if (!c->dot && !c->save) {
        fprintf(errf(), "weft graph: --dot FILE or --save FILE is needed\n");
        return 2;
    }
    if (!(c->cfg = weft_model_cfg_load(c->file))) return fail("graph");
    return -1;
}

// weft export MODEL.cfg --onnx FILE [--ckpt FILE] [--batch B]: its options, then the model file.
static int parse_export(int argc, char **argv, cli *c) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--onnx") && strcmp(a, "--ckpt") && strcmp(a, "--batch")) {
            snprintf(g_err, sizeof g_err, "unknown option '%s' (see weft --help)", a);
            return usage_fail("export");
        }
        if (i + 1 >= argc) {
            snprintf(g_err, sizeof g_err, "option '%s' needs a value", a);
            return usage_fail("export");
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--onnx")) c->onnx = v;
        else if (!strcmp(a, "--ckpt")) c->ckpt = v;
        else if (!int_opt(a, v, &c->batch) || c->batch < 1 || c->batch > (1 << 24)) {
            if (!g_err[0]) snprintf(g_err, sizeof g_err, "--batch: expected 1 to %d, got '%s'", 1 << 24, v);
            return usage_fail("export");
        }
    }
    if (!c->onnx) {
        fprintf(errf(), "weft export: --onnx FILE is needed\n");
        return 2;
    }
    if (!(c->cfg = weft_model_cfg_load(c->file))) return fail("export");
    return -1;
}

static int cmd_graph(const cli *c) {
    const weft_model_cfg *cfg = c->cfg;
    const char *dot = c->dot, *save = c->save;
    bool optimize = c->optimize;
    const weft_net_cfg *n = &cfg->net;
    int rc = 1;
    weft_generator *ig = weft_generator_create(n->seed), *dg = weft_generator_create(n->seed + 1);
    weft_module *net = ig && dg ? weft_model_build(cfg, ig, dg) : NULL;
    weft_graph *g = weft_graph_new(), *opt = NULL;
    weft_tensor *x = NULL, *y = NULL, *logits = NULL, *loss = NULL;
    int n_params = net ? weft_module_param_count(net) : 0, n_keep = 0;
    weft_value *keep = calloc((size_t)n_params + 1, sizeof *keep); // the loss, then each gradient
    weft_graph_pass_stats ps = {0};
    FILE *f = NULL;
    if (!keep) snprintf(g_err, sizeof g_err, "out of memory");
    if (!net || !g || !keep) goto out;
    int64_t shape[WEFT_MAX_DIMS + 1] = {n->batch};
    for (int d = 0; d < n->input_ndim; d++) shape[1 + d] = n->input[d];
    if (n->dataset == WEFT_CFG_KJV) { // (B,T) token ids -> next tokens
        x = weft_tensor_randint(2, shape, 0, n->vocab, WEFT_I64, ig);
        y = weft_tensor_randint(2, shape, 0, n->vocab, WEFT_I64, ig);
    } else {
        x = weft_tensor_rand(1 + n->input_ndim, shape, WEFT_F32, ig);
        y = weft_tensor_randint(1, shape, 0, n->classes, WEFT_I64, ig);
    }
    if (!x || !y || weft_graph_trace_begin(g) != WEFT_OK) goto out;
    weft_graph_trace_input(g, x, "x");
    weft_graph_trace_input(g, y, "labels");
    for (int i = 0; i < weft_module_param_count(net); i++) { // parameters as variables under their dotted names
        char name[256];
        weft_tensor *p = weft_module_param_at(net, i, name, sizeof name);
        weft_graph_trace_variable(g, p, name);
    }
    logits = weft_module_forward(net, x);
    loss = logits ? weft_model_loss(cfg, logits, y) : NULL;
    int n_fwd = weft_graph_node_count(g);
    weft_status bst = loss ? weft_backward(loss, NULL, NULL) : weft_last_status();
    char msg[512];
    snprintf(msg, sizeof msg, "%s", weft_last_error());
    if (bst == WEFT_OK) { // what an optimised graph must keep computing
        keep[n_keep++] = weft_graph_trace_output(g, loss);
        for (int i = 0; i < n_params; i++) {
            weft_tensor *gr = weft_tensor_grad(weft_module_param_at(net, i, NULL, 0));
            if (gr) keep[n_keep++] = weft_graph_trace_output(g, gr);
        }
    }
    weft_status tst = weft_graph_trace_end(g); // always end the trace, even after an error
    if (bst != WEFT_OK) {
        snprintf(g_err, sizeof g_err, "%s", msg);
        goto out;
    }
    if (tst != WEFT_OK) goto out;
    if (optimize && !(opt = weft_graph_optimize(g, n_keep, keep, keep, NULL, &ps))) goto out;
    if (dot) {
        if (!(f = fopen(dot, "w"))) {
            snprintf(g_err, sizeof g_err, "%s: cannot open for writing", dot);
            goto out;
        }
        // An optimised graph's nodes no longer split into forward and backward by id.
        bool ok = opt ? weft_graph_write_dot(opt, f) == WEFT_OK : write_dot_marked(g, n_fwd, f);
        ok = fclose(f) == 0 && ok;
        f = NULL;
        if (!ok) {
            if (!g_err[0]) snprintf(g_err, sizeof g_err, "%s: write failed", dot);
            goto out;
        }
    }
    if (save && weft_graph_save(g, save) != WEFT_OK) goto out;
    int counts[WEFT_NODE_NUM_KINDS] = {0}, total = weft_graph_node_count(g);
    for (int i = 0; i < total; i++) counts[weft_graph_node_kind(g, (weft_node_id){i})]++;
    printf("graph: %d nodes (%d forward, %d backward): %d ops, %d variables, %d constants, %d placeholders", total,
           n_fwd, total - n_fwd, counts[WEFT_NODE_OP], counts[WEFT_NODE_VARIABLE], counts[WEFT_NODE_CONSTANT],
           counts[WEFT_NODE_PLACEHOLDER]);
    if (opt)
        printf("; optimised: %d nodes, %d fused groups of %d ops, %d rematerialised", weft_graph_node_count(opt),
               ps.fused_groups, ps.fused_nodes, ps.rematerialized);
    if (dot) printf("; dot %s", dot);
    if (save) printf("; saved %s", save);
    printf("\n");
    rc = 0;
out:
    if (rc) fail("graph");
    weft_tensor *ts[] = {x, y, logits, loss};
    for (int i = 0; i < 4; i++) weft_tensor_free(ts[i]);
    weft_graph_free(g);
    weft_graph_free(opt);
    free(keep);
    weft_module_free(net);
    weft_generator_free(ig);
    weft_generator_free(dg);
    return rc;
}

// Under mpirun every rank runs this; only rank 0 reports. An error that not
// every rank shares ends the whole job (the others could wait forever).
static int cmd_train(const weft_model_cfg *cfg, const weft_train_opts *t) {
    weft_train_result r;
    weft_status st = weft_train(cfg, t, &r);
    int ranks = weft_dist_is_initialized() && weft_comm_world() ? weft_comm_size(weft_comm_world()) : 1;
    if (st != WEFT_OK) {
        if (ranks > 1 && !r.collective_error) {
            fprintf(stderr, "weft train (rank %d): %s\n", weft_comm_rank(weft_comm_world()),
                    weft_last_error()[0] ? weft_last_error() : "failed");
            fflush(stderr);
            weft_dist_abort(1);
            return 1; // MPI was not running after all
        }
        int rc = r.printer || ranks == 1 ? fail("train") : 1;
        if (weft_dist_is_initialized()) weft_dist_finalize();
        return rc;
    }
    if (r.printer) weft_train_print_final(stdout, &r);
    if (weft_dist_is_initialized() && weft_dist_finalize() != WEFT_OK) return fail("train");
    return 0;
}

// The whole command line into *c (zeroed first): -1 when there is something
// to run, else the exit status, its message written. Runs nothing and never
// exits; c->cfg is the caller's to free (cli_free).
static int parse_cli(int argc, char **argv, cli *c) {
    *c = (cli){.tokens = 200, .temperature = 1.0, .sample_seed = 1};
    if (argc < 2) return usage();
    const char *cmd = c->cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage();
        return 0;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "ops")) {
        if (argc > 2) {
            snprintf(g_err, sizeof g_err, "takes no arguments (got '%s')", argv[2]);
            return usage_fail(cmd);
        }
        c->kind = !strcmp(cmd, "version") ? CLI_VERSION : CLI_OPS;
        return -1;
    }
    if (!strcmp(cmd, "info")) {
        if (argc > 3 || (argc == 3 && argv[2][0] == '-')) { // info has no options: a flag is not a file name
            if (argc > 3) snprintf(g_err, sizeof g_err, "takes at most one file (got '%s' and '%s')", argv[2], argv[3]);
            else snprintf(g_err, sizeof g_err, "unknown option '%s' (usage: weft info [FILE.safetensors])", argv[2]);
            return usage_fail("info");
        }
        c->kind = argc == 3 ? CLI_INFO_FILE : CLI_INFO;
        c->file = argc == 3 ? argv[2] : NULL;
        return -1;
    }
    if (!strcmp(cmd, "launch")) { // launch.c reads its own arguments when it runs
        c->kind = CLI_LAUNCH;
        c->argc = argc - 2, c->argv = argv + 2;
        return -1;
    }
    if (strcmp(cmd, "train") && strcmp(cmd, "eval") && strcmp(cmd, "sample") && strcmp(cmd, "graph") &&
        strcmp(cmd, "export")) {
        fprintf(errf(), "weft: unknown command '%s' (see weft --help)\n", cmd);
        return 2;
    }
    if (argc < 3 || argv[2][0] == '-') {
        fprintf(errf(), "weft %s: a model file is needed (e.g. models/fmnist-mlp.cfg)\n", cmd);
        return 2;
    }
    c->file = argv[2];
    if (!strcmp(cmd, "graph")) {
        c->kind = CLI_GRAPH;
        return parse_graph(argc - 3, argv + 3, c);
    }
    if (!strcmp(cmd, "export")) {
        c->kind = CLI_EXPORT;
        return parse_export(argc - 3, argv + 3, c);
    }
    c->kind = !strcmp(cmd, "train") ? CLI_TRAIN : !strcmp(cmd, "eval") ? CLI_EVAL : CLI_SAMPLE;
    if (!check_args(cmd, argc - 3, argv + 3, &c->ckpt)) return usage_fail(cmd);
    if (strcmp(cmd, "train") && !c->ckpt) { // a usage error, reported before the model file is read
        fprintf(errf(), "weft %s: --ckpt FILE is needed\n", cmd);
        return 2;
    }
    if (!(c->cfg = weft_model_cfg_load(c->file))) return fail(cmd);
    if (!parse(argc - 3, argv + 3, c->cfg, c)) return usage_fail(cmd);
    return -1;
}

static void cli_free(cli *c) {
    weft_model_cfg_free(c->cfg);
    c->cfg = NULL;
}

int run_cli(const cli *c); // external: the fuzz build (no main) would call it unused
int run_cli(const cli *c) {
    if (c->threads) weft_set_num_threads(c->threads);
    switch (c->kind) {
    case CLI_VERSION: printf("weft %s\n", weft_version()); return 0;
    case CLI_OPS:
        for (int i = 0; i < weft_op_count(); i++) printf("%s\n", weft_op_name(i));
        return 0;
    case CLI_INFO_FILE: return cmd_info_file(c->file);
    case CLI_INFO:
        printf("weft %s\n", weft_version());
        printf("threads: %d\n", weft_num_threads());
        printf("devices: cpu x%d, cuda x%d\n", weft_device_count(WEFT_CPU), weft_device_count(WEFT_CUDA));
        printf("cpu kernels: %s\n", weft_cpu_kernels_info());
        printf("ops: %d\n", weft_op_count());
        return 0;
    case CLI_LAUNCH: return weft_cli_launch(c->argc, c->argv);
    case CLI_GRAPH: return cmd_graph(c);
    case CLI_EXPORT:
        if (weft_export_onnx(c->cfg, c->ckpt, c->batch, c->onnx) != WEFT_OK) return fail("export");
        printf("wrote %s\n", c->onnx);
        return 0;
    case CLI_TRAIN: return cmd_train(c->cfg, &c->t);
    case CLI_EVAL: {
        weft_train_result r;
        if (weft_evaluate(c->cfg, c->ckpt, &c->t, &r) != WEFT_OK) return fail("eval");
        weft_eval_print_final(stdout, &r);
        return 0;
    }
    case CLI_SAMPLE:
        if (weft_sample(c->cfg, c->ckpt, c->prompt, c->tokens, c->temperature, c->sample_seed, stdout) != WEFT_OK)
            return fail("sample");
        return 0;
    }
    return 1;
}

int weft_cli_parse_only(int argc, char **argv, FILE *err);
int weft_cli_parse_only(int argc, char **argv, FILE *err) {
    g_errf = err;
    g_err[0] = 0;
    cli c;
    int rc = parse_cli(argc, argv, &c);
    cli_free(&c);
    g_errf = NULL;
    return rc < 0 ? 0 : rc;
}

#ifndef WEFT_CLI_NO_MAIN
int main(int argc, char **argv) {
    cli c;
    int rc = parse_cli(argc, argv, &c);
    if (rc < 0) rc = run_cli(&c);
    cli_free(&c);
    return rc;
}
#endif
