// Model files: every shipped file in models/ parses to the intended network,
// write -> parse gives the same struct, each kind of mistake is an error that
// names FILE:LINE and the key, overrides, and random/truncated/mutated input
// never crashes (the suite also runs under ASan).
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

static char g_models[512]; // .../models/

static void find_models(void) { snprintf(g_models, sizeof g_models, "%s", wt_models_dir()); }

static weft_model_cfg *load_model(const char *file) {
    char path[600];
    snprintf(path, sizeof path, "%s%s", g_models, file);
    weft_model_cfg *c = weft_model_cfg_load(path);
    if (!c) fprintf(stderr, "loading %s: %s\n", path, weft_last_error());
    return c;
}

static char *read_all(const char *file, size_t *len) {
    char path[600];
    snprintf(path, sizeof path, "%s%s", g_models, file);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = malloc(1 << 16);
    *len = fread(b, 1, (1 << 16) - 1, f);
    b[*len] = 0;
    fclose(f);
    return b;
}

static weft_model_cfg *parse(const char *text) { return weft_model_cfg_parse(text, strlen(text), "t.cfg"); }

static bool shape_is(const int64_t *s, int nd, int want_nd, int64_t a, int64_t b, int64_t c) {
    int64_t w[3] = {a, b, c};
    if (nd != want_nd) return false;
    for (int i = 0; i < nd; i++)
        if (s[i] != w[i]) return false;
    return true;
}

static const char *SHIPPED[] = {"fmnist-mlp.cfg", "fmnist-cnn.cfg", "kjv-gpt.cfg",          "kjv-lstm.cfg",
                                "logreg.cfg",     "svm.cfg",        "gpt2-small-bytes.cfg", "kjv-gru.cfg"};
#define N_SHIPPED 8

static void test_mlp(void) {
    weft_model_cfg *c = load_model("fmnist-mlp.cfg");
    CHECK(c);
    if (!c) return;
    const weft_net_cfg *n = &c->net;
    CHECK(!strcmp(n->name, "fmnist-mlp"));
    CHECK(n->dataset == WEFT_CFG_FMNIST && n->batch == 128 && n->optimizer == WEFT_CFG_ADAM);
    CHECK(n->lr == 1e-3 && n->betas[0] == 0.9 && n->betas[1] == 0.999 && n->eps == 1e-8 && n->weight_decay == 0);
    CHECK(n->loss == WEFT_CFG_CROSS_ENTROPY && n->classes == 10 && n->schedule == WEFT_CFG_COSINE &&
          n->warmup == 0 && n->min_lr == 0);
    CHECK(shape_is(n->input, n->input_ndim, 3, 1, 28, 28));
    static const weft_cfg_layer_type want[] = {WEFT_CFG_FLATTEN, WEFT_CFG_LINEAR, WEFT_CFG_RELU,
                                               WEFT_CFG_LINEAR,  WEFT_CFG_RELU,   WEFT_CFG_LINEAR};
    CHECK(c->n_layers == 6);
    for (int i = 0; i < c->n_layers && i < 6; i++) CHECK(c->layers[i].type == want[i]);
    if (c->n_layers == 6) {
        const weft_layer_cfg *L = c->layers;
        CHECK(shape_is(L[0].out_shape, L[0].out_ndim, 1, 784, 0, 0));
        CHECK(L[1].linear.in == 784 && L[1].linear.out == 256 && L[1].linear.bias);
        CHECK(L[3].linear.in == 256 && L[3].linear.out == 256);
        CHECK(L[5].linear.in == 256 && L[5].linear.out == 10);
        CHECK(shape_is(L[5].out_shape, L[5].out_ndim, 1, 10, 0, 0));
        CHECK(L[1].line == 16); // the header line of the first [linear]
    }
    weft_model_cfg_free(c);
}

static void test_cnn(void) {
    weft_model_cfg *c = load_model("fmnist-cnn.cfg");
    CHECK(c);
    if (!c) return;
    CHECK(c->net.batch == 64 && c->net.optimizer == WEFT_CFG_ADAM && c->net.lr == 1e-3);
    CHECK(c->n_layers == 10);
    if (c->n_layers == 10) {
        const weft_layer_cfg *L = c->layers;
        CHECK(L[0].type == WEFT_CFG_CONV2D && L[0].conv2d.in == 1 && L[0].conv2d.out == 32);
        CHECK(L[0].conv2d.kernel[0] == 5 && L[0].conv2d.kernel[1] == 5 && L[0].conv2d.pad[0] == 2 &&
              L[0].conv2d.pad[1] == 2 && L[0].conv2d.stride[0] == 1 && L[0].conv2d.dilation[1] == 1 &&
              L[0].conv2d.groups == 1 && L[0].conv2d.bias);
        CHECK(shape_is(L[0].out_shape, L[0].out_ndim, 3, 32, 28, 28));
        CHECK(L[1].type == WEFT_CFG_RELU);
        CHECK(L[2].type == WEFT_CFG_MAXPOOL && L[2].pool.kernel[0] == 2 && L[2].pool.stride[0] == 2 &&
              L[2].pool.stride[1] == 2 && L[2].pool.pad[0] == 0);
        CHECK(shape_is(L[2].out_shape, L[2].out_ndim, 3, 32, 14, 14));
        CHECK(L[3].conv2d.in == 32 && L[3].conv2d.out == 64);
        CHECK(shape_is(L[5].out_shape, L[5].out_ndim, 3, 64, 7, 7));
        CHECK(L[6].type == WEFT_CFG_FLATTEN && shape_is(L[6].out_shape, L[6].out_ndim, 1, 3136, 0, 0));
        CHECK(L[7].linear.in == 3136 && L[7].linear.out == 512);
        CHECK(L[9].type == WEFT_CFG_LINEAR && L[9].linear.in == 512 && L[9].linear.out == 10);
    }
    weft_model_cfg_free(c);
}

static void test_gpt_lstm(void) {
    weft_model_cfg *c = load_model("kjv-gpt.cfg");
    CHECK(c);
    if (c) {
        const weft_net_cfg *n = &c->net;
        CHECK(n->dataset == WEFT_CFG_KJV && n->context == 128 && n->batch == 32 && n->vocab == 256);
        CHECK(n->optimizer == WEFT_CFG_ADAMW && n->lr == 1e-3 && n->weight_decay == 0.01);
        CHECK(shape_is(n->input, n->input_ndim, 1, 128, 0, 0));
        CHECK(c->n_layers == 4);
        if (c->n_layers == 4) {
            const weft_layer_cfg *L = c->layers;
            CHECK(L[0].type == WEFT_CFG_EMBEDDING && L[0].embedding.vocab == 256 && L[0].embedding.dim == 128 &&
                  L[0].embedding.learned_position && L[0].embedding.context == 128);
            CHECK(L[1].type == WEFT_CFG_TRANSFORMER && L[1].attn.dim == 128 && L[1].attn.heads == 4 &&
                  L[1].attn.blocks == 4);
            CHECK(L[2].type == WEFT_CFG_LAYERNORM && L[2].layernorm.dim == 128 && L[2].layernorm.eps == 1e-5);
            CHECK(L[3].type == WEFT_CFG_LINEAR && L[3].linear.in == 128 && L[3].linear.out == 256);
            CHECK(shape_is(L[3].out_shape, L[3].out_ndim, 2, 128, 256, 0));
        }
        weft_model_cfg_free(c);
    }
    c = load_model("kjv-lstm.cfg");
    CHECK(c);
    if (c) {
        CHECK(c->net.optimizer == WEFT_CFG_ADAMW && c->net.context == 128 && c->net.batch == 32);
        CHECK(c->n_layers == 3);
        if (c->n_layers == 3) {
            const weft_layer_cfg *L = c->layers;
            CHECK(L[0].embedding.dim == 256 && !L[0].embedding.learned_position);
            CHECK(L[1].type == WEFT_CFG_LSTM && L[1].rnn.in == 256 && L[1].rnn.hidden == 256 &&
                  L[1].rnn.layers == 1);
            CHECK(L[2].linear.in == 256 && L[2].linear.out == 256);
        }
        weft_model_cfg_free(c);
    }
}

static void test_classic(void) {
    weft_model_cfg *c = load_model("logreg.cfg");
    CHECK(c && c->n_layers == 2 && c->net.loss == WEFT_CFG_CROSS_ENTROPY && c->net.optimizer == WEFT_CFG_SGD);
    if (c && c->n_layers == 2) CHECK(c->layers[1].linear.in == 784 && c->layers[1].linear.out == 10);
    weft_model_cfg_free(c);
    c = load_model("svm.cfg");
    CHECK(c && c->n_layers == 2 && c->net.loss == WEFT_CFG_HINGE && c->net.momentum == 0.9);
    weft_model_cfg_free(c);
}

// The GPT-2-small-sized GPU workload: its shape, and 86,235,904 parameters counted by hand (embeddings
// 256*768 + 1024*768; per block 2 layer norms 2*1536, qkv 768*2304 + 2304, projection 768*768 + 768,
// MLP 768*3072 + 3072 + 3072*768 + 768; final layer norm 1536; head 768*256 + 256).
static void test_gpt2_small(void) {
    weft_model_cfg *c = load_model("gpt2-small-bytes.cfg");
    CHECK(c);
    if (!c) return;
    const weft_net_cfg *n = &c->net;
    CHECK(n->context == 1024 && n->batch == 8 && n->vocab == 256 && n->precision == WEFT_CFG_BF16);
    CHECK(n->optimizer == WEFT_CFG_ADAMW && n->lr == 6e-4 && n->weight_decay == 0.1);
    CHECK(c->n_layers == 4 && c->layers[1].attn.dim == 768 && c->layers[1].attn.heads == 12 &&
          c->layers[1].attn.blocks == 12 && c->layers[1].attn.gelu_tanh); // GPT-2's GELU
    int64_t block = 2 * 1536 + 768 * 2304 + 2304 + 768 * 768 + 768 + 768 * 3072 + 3072 + 3072 * 768 + 768;
    int64_t want = 256 * 768 + 1024 * 768 + 12 * block + 1536 + 768 * 256 + 256;
    weft_generator *g = weft_generator_create(1);
    weft_module *m = weft_model_build(c, g, g);
    CHECK(m && want == 86235904 && weft_module_num_elements(m) == want);
    weft_module_free(m);
    weft_generator_free(g);
    weft_model_cfg_free(c);
}

// write -> parse gives the same struct (every default spelled out).
static void test_roundtrip(void) {
    for (int i = 0; i < N_SHIPPED; i++) {
        weft_model_cfg *a = load_model(SHIPPED[i]);
        CHECK(a);
        if (!a) continue;
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        CHECK(weft_model_cfg_write(a, f) == WEFT_OK);
        fclose(f);
        weft_model_cfg *b = weft_model_cfg_parse(text, len, SHIPPED[i]);
        CHECK(b);
        if (!b) fprintf(stderr, "%s\n---\n%s\n", weft_last_error(), text);
        if (b) {
            CHECK(!memcmp(&a->net, &b->net, sizeof a->net));
            CHECK(a->n_layers == b->n_layers);
            for (int j = 0; j < a->n_layers && j < b->n_layers; j++) {
                weft_layer_cfg x = a->layers[j], y = b->layers[j];
                x.line = y.line = 0;
                CHECK(!memcmp(&x, &y, sizeof x));
            }
        }
        weft_model_cfg_free(a);
        weft_model_cfg_free(b);
        free(text);
    }
}

// The GELU keys: [transformer] gelu = exact | tanh, [gelu] approximate = none | tanh; anything else is refused
// with the line and the choices.
static void test_gelu_keys(void) {
    const char *lm = "[net]\ndataset = kjv\n[embedding]\ndim = 8\n[transformer]\nheads = 2\ngelu = %s\n"
                     "[gelu]\napproximate = %s\n[linear]\nout = vocab\n";
    const char *forms[][2] = {{"tanh", "tanh"}, {"exact", "none"}};
    for (int i = 0; i < 2; i++) {
        char text[400];
        snprintf(text, sizeof text, lm, forms[i][0], forms[i][1]);
        weft_model_cfg *c = weft_model_cfg_parse(text, strlen(text), "g.cfg");
        CHECK(c && c->n_layers == 4);
        if (c && c->n_layers == 4) {
            CHECK(c->layers[1].attn.gelu_tanh == (i == 0) && c->layers[2].gelu.tanh == (i == 0));
            CHECK(c->layers[2].type == WEFT_CFG_GELU);
        }
        weft_model_cfg_free(c);
    }
    // the default: exact, in both
    const char *plain = "[net]\ndataset = kjv\n[embedding]\ndim = 8\n[transformer]\nheads = 2\n[gelu]\n"
                        "[linear]\nout = vocab\n";
    weft_model_cfg *c = weft_model_cfg_parse(plain, strlen(plain), "p.cfg");
    CHECK(c && !c->layers[1].attn.gelu_tanh && !c->layers[2].gelu.tanh);
    weft_model_cfg_free(c);
    const char *bad[][3] = {{"erf", "none", "g.cfg:7:"}, {"tanh", "exact", "g.cfg:9:"}};
    for (int i = 0; i < 2; i++) {
        char text[400];
        snprintf(text, sizeof text, lm, bad[i][0], bad[i][1]);
        c = weft_model_cfg_parse(text, strlen(text), "g.cfg");
        CHECK(c == NULL && wt_error_has(bad[i][2]) && wt_error_has("tanh"));
        weft_model_cfg_free(c);
    }
}

static const char *NET = "[net]\ndataset = fmnist\n"; // lines 1-2

typedef struct {
    const char *text;
    const char *want[3]; // substrings of the message
} bad_case;

static void test_errors(void) {
    char buf[4096];
    static const bad_case cases[] = {
        // the layer part follows NET, so its first line is line 3
        {"[flatten]\n[linear]\nout = 10\n[bogus]\n", {"t.cfg:6:", "unknown section [bogus]"}},
        {"[flatten]\n[linear]\nout = 10\nsize = 3\n", {"t.cfg:6:", "unknown key 'size'", "accepted: in, out, bias"}},
        {"[flatten]\n[linear]\nout = ten\n", {"t.cfg:5:", "'out'", "not an integer"}},
        {"[flatten]\n[linear]\nout = 10.5\n", {"t.cfg:5:", "'out'", "not an integer"}},
        {"[flatten]\n[linear]\nout = 0\n", {"t.cfg:5:", "'out'", "out of range"}},
        {"[flatten]\n[linear]\nout = 99999999999999999999\n", {"t.cfg:5:", "'out'"}},
        {"[flatten]\n[linear]\nout = 10\nout = 10\n", {"t.cfg:6:", "duplicate key 'out'", "line 5"}},
        {"[flatten]\n[linear]\nbias = false\n", {"t.cfg:4:", "missing required key 'out'"}},
        {"[flatten]\n[linear]\nout = 10\nbias = maybe\n", {"t.cfg:6:", "'bias'", "boolean"}},
        {"[flatten]\n[linear]\nout =\n", {"t.cfg:5:", "'out'", "no value"}},
        {"[flatten]\n[linear]\nout 10\n", {"t.cfg:5:", "expected 'key = value'"}},
        {"[flatten\n", {"t.cfg:3:", "does not end with ']'"}},
        {"[]\n", {"t.cfg:3:", "empty section"}},
        {"[flatten]\n[linear]\nout = 10\n[net]\n", {"t.cfg:6:", "second [net]", "line 1"}},
        {"[flatten]\n[linear]\nout = 10\n = 3\n", {"t.cfg:6:", "missing key"}},
        // shapes
        {"[flatten]\n[linear]\nin = 100\nout = 10\n", {"t.cfg:5:", "'in' = 100", "784"}},
        {"[flatten]\n[linear]\nout = 5\n", {"t.cfg:4:", "output (5)", "(10)"}},
        {"[linear]\nout = 10\n", {"t.cfg:3:", "(1,28,10)", "(10)"}},
        {"[flatten]\n[conv2d]\nout = 4\nkernel = 3\n", {"t.cfg:4:", "conv2d", "(C,H,W)"}},
        {"[conv2d]\nout = 4\nkernel = 3,3,3\n", {"t.cfg:5:", "'kernel'", "expected 1 to 2"}},
        {"[conv2d]\nout = 4\nkernel = 29\n", {"t.cfg:3:", "larger than the padded input"}},
        {"[conv2d]\nout = 3\nkernel = 3\ngroups = 2\n", {"t.cfg:6:", "'groups'"}},
        {"[maxpool]\nkernel = 2\npad = 2\n", {"t.cfg:5:", "'pad'", "half"}},
        {"[flatten]\n[dropout]\np = 1\n", {"t.cfg:5:", "'p'", "out of range"}},
        {"[flatten]\n[batchnorm]\neps = 0\n", {"t.cfg:5:", "'eps'", "out of range"}},
        {"[embedding]\ndim = 4\n", {"t.cfg:3:", "[embedding]", "first layer of a kjv"}},
        {"[flatten]\n[linear]\nout = vocab\n", {"t.cfg:5:", "'out'", "'vocab' needs dataset = kjv"}},
        {"[flatten]\n[linear]\nout = 10\n[lstm]\nhidden = 4\n", {"t.cfg:6:", "[lstm]", "(T,C)"}},
        {"[flatten]\n[linear]\nout = 10\n[gru]\nhidden = 4\n", {"t.cfg:6:", "[gru]", "(T,C)"}},
        {"[flatten]\n[linear]\nout = 10\n[rnn]\nhidden = 4\nnonlinearity = sigmoid\n", {"t.cfg:8:", "'nonlinearity'"}},
        {"precision = bf16\nloss_scale = 8\n[flatten]\n[linear]\nout = 10\n",
         {"t.cfg:4:", "'loss_scale' does not apply to precision = bf16"}},
        {"precision = f16\nloss_scale = 0\n[flatten]\n[linear]\nout = 10\n", {"t.cfg:4:", "'loss_scale'", "out of range"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(buf, sizeof buf, "%s%s", NET, cases[i].text);
        weft_model_cfg *c = parse(buf);
        CHECK(c == NULL && weft_last_status() == WEFT_ERR_FORMAT);
        for (int k = 0; k < 3 && cases[i].want[k]; k++)
            if (!strstr(weft_last_error(), cases[i].want[k])) {
                wt_fail++;
                fprintf(stderr, "case %zu: message '%s' lacks '%s'\n", i, weft_last_error(), cases[i].want[k]);
            } else
                wt_pass++;
        weft_model_cfg_free(c);
    }
    // [net] problems and whole-file problems
    static const bad_case net_cases[] = {
        {"", {"t.cfg: no [net] section"}},
        {"# only a comment\n\n", {"t.cfg: no [net] section"}},
        {"[net]\ndataset = fmnist\n", {"t.cfg: no layer sections"}},
        {"[linear]\nout = 10\n[net]\n", {"t.cfg:1:", "first section must be [net]"}},
        {"lr = 1\n[net]\n", {"t.cfg:1:", "key 'lr' before any section"}},
        {"[net]\nbatch = 8\n[relu]\n", {"t.cfg:1:", "missing required key 'dataset'"}},
        {"[net]\ndataset = mnist\n[relu]\n", {"t.cfg:2:", "'dataset'", "fmnist | kjv"}},
        {"[net]\ndataset = fmnist\nlr = nan\n[relu]\n", {"t.cfg:3:", "'lr'", "not a number"}},
        {"[net]\ndataset = fmnist\nlr = inf\n[relu]\n", {"t.cfg:3:", "'lr'", "not a number"}},
        {"[net]\ndataset = fmnist\nlr = 1e-3x\n[relu]\n", {"t.cfg:3:", "'lr'", "not a number"}},
        {"[net]\ndataset = fmnist\nlr = 0\n[relu]\n", {"t.cfg:3:", "'lr'", "out of range"}},
        {"[net]\ndataset = fmnist\nbatch = -1\n[relu]\n", {"t.cfg:3:", "'batch'", "out of range"}},
        {"[net]\ndataset = fmnist\nseed = -1\n[relu]\n", {"t.cfg:3:", "'seed'"}},
        {"[net]\ndataset = fmnist\noptimizer = adam\nbetas = 0.9\n[relu]\n", {"t.cfg:4:", "'betas'", "two numbers"}},
        {"[net]\ndataset = fmnist\noptimizer = adam\nbetas = 0.9,1\n[relu]\n", {"t.cfg:4:", "'betas'", "range"}},
        {"[net]\ndataset = fmnist\noptimizer = adam\nmomentum = 0.9\n[relu]\n",
         {"t.cfg:4:", "'momentum'", "optimizer = adam"}},
        {"[net]\ndataset = fmnist\nschedule = step\n[relu]\n", {"t.cfg:3:", "'step_size'"}},
        {"[net]\ndataset = fmnist\ngamma = 0.5\n[relu]\n", {"t.cfg:3:", "'gamma'", "schedule = constant"}},
        {"[net]\ndataset = fmnist\nnesterov = true\n[relu]\n", {"t.cfg:3:", "'nesterov'", "momentum"}},
        {"[net]\ndataset = fmnist\ncontext = 64\n[relu]\n", {"t.cfg:3:", "'context'", "dataset = fmnist"}},
        {"[net]\ndataset = fmnist\ninput = 1,28\n[relu]\n", {"t.cfg:3:", "'input'", "784"}},
        {"[net]\ndataset = fmnist\ninput = 1,1,1,28,28\n[relu]\n", {"t.cfg:3:", "'input'", "expected 1 to 4"}},
        {"[net]\ndataset = fmnist\ninput = 1,,28\n[relu]\n", {"t.cfg:3:", "'input'", "empty"}},
        {"[net]\ndataset = kjv\nloss = hinge\n[relu]\n", {"t.cfg:3:", "'loss'", "hinge"}},
        {"[net]\ndataset = kjv\n[relu]\n", {"t.cfg:3:", "first layer must be [embedding]"}},
        {"[net]\ndataset = kjv\ninput = 64\ncontext = 32\n[relu]\n", {"t.cfg:3:", "'input'", "context"}},
        {"[net]\ndataset = kjv\n[embedding]\ndim = 6\n[transformer]\nheads = 4\n[linear]\nout = vocab\n",
         {"t.cfg:6:", "'heads'", "dim = 6"}},
        {"[net]\ndataset = kjv\n[embedding]\ndim = 8\nvocab = 100\n[linear]\nout = vocab\n",
         {"t.cfg:5:", "'vocab'", "256"}},
        {"[net]\ndataset = kjv\n[embedding]\ndim = 8\n[linear]\nout = 10\n", {"t.cfg:5:", "(128,10)", "(128,256)"}},
        {"[net]\ndataset = kjv\n[embedding]\ndim = 8\n[batchnorm]\n[linear]\nout = vocab\n",
         {"t.cfg:5:", "[batchnorm]", "layernorm"}},
        {"[net]\ndataset = fmnist\nname = a b\n[relu]\n", {"t.cfg:3:", "'name'"}},
        {"[net]\ndataset = fmnist\n[conv2d]\nout = 16777216\nkernel = 1\npad = 1024\n[flatten]\n[linear]\nout = 10\n",
         {"t.cfg:3:", "too large"}},
    };
    for (size_t i = 0; i < sizeof net_cases / sizeof net_cases[0]; i++) {
        weft_model_cfg *c = parse(net_cases[i].text);
        CHECK(c == NULL && weft_last_status() == WEFT_ERR_FORMAT);
        for (int k = 0; k < 3 && net_cases[i].want[k]; k++)
            if (!strstr(weft_last_error(), net_cases[i].want[k])) {
                wt_fail++;
                fprintf(stderr, "net case %zu: message '%s' lacks '%s'\n", i, weft_last_error(), net_cases[i].want[k]);
            } else
                wt_pass++;
        weft_model_cfg_free(c);
    }
    // a NUL byte (len counts it)
    static const char nul[] = "[net]\ndataset = fmnist\n\0[relu]\n";
    CHECK(!weft_model_cfg_parse(nul, sizeof nul - 1, "t.cfg") && strstr(weft_last_error(), "t.cfg:3:") &&
          strstr(weft_last_error(), "NUL"));
    // a missing file is an I/O error naming it
    CHECK(!weft_model_cfg_load("/nonexistent/x.cfg") && weft_last_status() == WEFT_ERR_IO &&
          strstr(weft_last_error(), "/nonexistent/x.cfg"));
    CHECK(!weft_model_cfg_load(NULL) && weft_last_status() == WEFT_ERR_ARG);
    // a directory is not a model file
    CHECK(!weft_model_cfg_load("/"));
}

// Syntax details: comments, CRLF, BOM, whitespace, long lines, line counting.
static void test_syntax(void) {
    char longc[1200];
    memset(longc, 'x', sizeof longc - 1);
    longc[sizeof longc - 1] = 0;
    char buf[4096];
    snprintf(buf, sizeof buf,
             "\xEF\xBB\xBF; a comment\r\n"            // 1
             "  [ net ]  # trailing comment\r\n"       // 2
             "dataset=fmnist;no space needed\r\n"      // 3
             "# %s\r\n"                                // 4: a 1200-byte comment line
             "\tlr   =   0.5e-2\r\n"                   // 5
             "batch = 7\n"                             // 6
             "optimizer = adagrad\n"                   // 7
             "\n"                                      // 8
             "[flatten]\n"                             // 9
             "[linear]\n"                              // 10
             "out = 10\n"                              // 11
             "bias = off\n"                            // 12
             "[softmax]\n",                            // 13
             longc);
    weft_model_cfg *c = parse(buf);
    CHECK(!c && strstr(weft_last_error(), "t.cfg:13:") && strstr(weft_last_error(), "[softmax]"));
    char *cut = strstr(buf, "[softmax]");
    *cut = 0;
    c = parse(buf);
    CHECK(c);
    if (c) {
        CHECK(c->net.lr == 0.5e-2 && c->net.batch == 7 && c->n_layers == 2 && !c->layers[1].linear.bias);
        CHECK(c->net.optimizer == WEFT_CFG_ADAGRAD && c->net.eps == 1e-10); // PyTorch's AdaGrad default
        CHECK(c->layers[0].line == 9 && c->layers[1].line == 10);
        CHECK(!strcmp(c->net.name, "t")); // from the file name
    }
    weft_model_cfg_free(c);
    // the same net, AdamW without weight_decay: PyTorch's default 0.01; with a key value list spacing
    c = parse("[net]\ndataset = fmnist\noptimizer = adamw\nbetas = 0.8 , 0.95\n[flatten]\n[linear]\nout=10\n");
    CHECK(c && c->net.weight_decay == 0.01 && c->net.betas[0] == 0.8 && c->net.betas[1] == 0.95);
    weft_model_cfg_free(c);
    // stride defaults to the kernel for pooling; a (C,H,W) input given as 784 is refused for conv
    c = parse("[net]\ndataset = fmnist\n[avgpool]\nkernel = 2, 4\n[flatten]\n[linear]\nout = 10\n");
    CHECK(c && c->layers[0].pool.stride[0] == 2 && c->layers[0].pool.stride[1] == 4 &&
          shape_is(c->layers[0].out_shape, c->layers[0].out_ndim, 3, 1, 14, 7) && c->layers[0].pool.count_include_pad);
    weft_model_cfg_free(c);
    // cosine with warm-up and a floor; step schedule
    c = parse("[net]\ndataset = fmnist\nschedule = cosine\nwarmup = 100\nmin_lr = 1e-5\n[flatten]\n[linear]\nout=10\n");
    CHECK(c && c->net.schedule == WEFT_CFG_COSINE && c->net.warmup == 100 && c->net.min_lr == 1e-5);
    weft_model_cfg_free(c);
    c = parse("[net]\ndataset = fmnist\nschedule = step\nstep_size = 3\ngamma = 0.5\n[flatten]\n[linear]\nout=10\n");
    CHECK(c && c->net.schedule == WEFT_CFG_STEP && c->net.step_size == 3 && c->net.gamma == 0.5);
    weft_model_cfg_free(c);
    // kjv: input gives the context
    c = parse("[net]\ndataset = kjv\ninput = 64\n[embedding]\ndim = 16\n[lstm]\nhidden = 8\nlayers = 2\n"
              "[linear]\nout = 256\n");
    CHECK(c && c->net.context == 64 && c->layers[1].rnn.layers == 2 &&
          shape_is(c->layers[2].out_shape, c->layers[2].out_ndim, 2, 64, 256, 0));
    weft_model_cfg_free(c);
    // [gru] and [rnn]: shapes, keys, what they build (PyTorch's parameter shapes, stacks as children 0, 1, ...)
    c = parse("[net]\ndataset = kjv\ninput = 32\n[embedding]\ndim = 16\n[gru]\nhidden = 12\nlayers = 2\n"
              "[rnn]\nhidden = 8\nnonlinearity = relu\n[linear]\nout = 256\n");
    CHECK(c && c->layers[1].type == WEFT_CFG_GRU && c->layers[1].rnn.in == 16 && c->layers[1].rnn.layers == 2 &&
          c->layers[2].type == WEFT_CFG_RNN && c->layers[2].rnn.in == 12 && c->layers[2].rnn.relu &&
          shape_is(c->layers[2].out_shape, c->layers[2].out_ndim, 2, 32, 8, 0));
    weft_module *m = c ? weft_model_build(c, NULL, NULL) : NULL;
    CHECK(m && !strcmp(weft_module_kind(weft_module_child_at(m, 2)), "rnn"));
    weft_tensor *w = m ? weft_module_find(m, "1.1.weight_hh") : NULL, *r = m ? weft_module_find(m, "2.weight_ih") : NULL;
    CHECK(w && weft_tensor_size(w, 0) == 36 && weft_tensor_size(w, 1) == 12);
    CHECK(r && weft_tensor_size(r, 0) == 8 && weft_tensor_size(r, 1) == 12);
    weft_module_free(m);
    weft_model_cfg_free(c);
    c = parse("[net]\ndataset = kjv\ninput = 32\n[embedding]\ndim = 16\n[rnn]\nhidden = 8\n[linear]\nout = 256\n");
    CHECK(c && !c->layers[1].rnn.relu && c->layers[1].rnn.layers == 1);
    weft_model_cfg_free(c);
}

// Model-parallel settings: [net] keys, `stage` on layers, their checks,
// overrides, and a write/parse round trip that keeps them.
static void test_parallel_keys(void) {
    const char *gpt = "[net]\ndataset = kjv\ncontext = 16\ntp = 2\npp = 2\nmicrobatches = 4\n"
                      "pp_schedule = interleaved\nvirtual_stages = 2\nzero = 1\nrecompute = true\n"
                      "[embedding]\ndim = 32\nposition = learned\nstage = 0\n"
                      "[transformer]\nheads = 4\nblocks = 2\nstage = 0\n"
                      "[layernorm]\nstage = 1\n[linear]\nout = vocab\nstage = 1\n";
    weft_model_cfg *c = parse(gpt);
    CHECK(c);
    if (!c) return;
    CHECK(c->net.tp == 2 && c->net.pp == 2 && c->net.microbatches == 4 && c->net.pp_schedule == WEFT_CFG_PP_INTERLEAVED &&
          c->net.virtual_stages == 2 && c->net.zero == 1 && c->net.recompute);
    CHECK(c->layers[0].stage == 0 && c->layers[1].stage == 0 && c->layers[2].stage == 1 && c->layers[3].stage == 1);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(weft_model_cfg_write(c, f) == WEFT_OK);
    fclose(f);
    weft_model_cfg *d = weft_model_cfg_parse(text, len, "w.cfg");
    CHECK(d && d->net.tp == 2 && d->net.pp_schedule == WEFT_CFG_PP_INTERLEAVED && d->net.recompute &&
          d->layers[2].stage == 1 && d->layers[1].stage == 0);
    free(text);
    weft_model_cfg_free(d);
    CHECK(weft_model_cfg_set(c, "tp", "4") == WEFT_OK && c->net.tp == 4);
    CHECK(weft_model_cfg_set(c, "pp_schedule", "gpipe") == WEFT_OK && c->net.pp_schedule == WEFT_CFG_PP_GPIPE);
    CHECK(weft_model_cfg_set(c, "zero", "3") == WEFT_ERR_ARG && strstr(weft_last_error(), "zero"));
    CHECK(weft_model_cfg_set(c, "pp", "0") == WEFT_ERR_ARG && strstr(weft_last_error(), "pp"));
    weft_model_cfg_free(c);
    // defaults: one rank's worth of everything, no stage given
    c = parse("[net]\ndataset = fmnist\ninput = 784\n[linear]\nin = 784\nout = 10\n");
    CHECK(c && c->net.tp == 1 && c->net.pp == 1 && c->net.zero == 0 && c->net.pp_schedule == WEFT_CFG_PP_1F1B &&
          c->layers[0].stage == -1);
    weft_model_cfg_free(c);
    // stages: all or none, from 0, up by at most 1
    CHECK(!parse("[net]\ndataset = fmnist\ninput = 784\n[linear]\nin = 784\nout = 32\nstage = 0\n[linear]\nout = 10\n") &&
          strstr(weft_last_error(), "t.cfg:8:") && strstr(weft_last_error(), "for some layers"));
    CHECK(!parse("[net]\ndataset = fmnist\ninput = 784\n[linear]\nin = 784\nout = 32\nstage = 1\n[linear]\nout = 10\nstage = 1\n") &&
          strstr(weft_last_error(), "stage = 1"));
    CHECK(!parse("[net]\ndataset = fmnist\ninput = 784\n[linear]\nin = 784\nout = 32\nstage = 0\n[linear]\nout = 10\nstage = 2\n") &&
          strstr(weft_last_error(), "t.cfg:8:"));
    CHECK(!parse("[net]\ndataset = fmnist\ninput = 784\n[linear]\nin = 784\nout = 32\nstage = 1\n[relu]\nstage = 0\n[linear]\nout = 10\nstage = 1\n"));
    CHECK(!parse("[net]\ndataset = fmnist\ninput = 784\n[relu]\nstage = x\n[linear]\nin = 784\nout = 10\n") && strstr(weft_last_error(), "stage"));
    CHECK(!parse("[net]\ndataset = fmnist\ninput = 784\n[relu]\nstage = 0\nstage = 0\n[linear]\nin = 784\nout = 10\n") &&
          strstr(weft_last_error(), "duplicate"));
    CHECK(!parse("[net]\ndataset = fmnist\nstage = 0\n[linear]\nin = 784\nout = 10\n") && strstr(weft_last_error(), "unknown key"));
}

static void test_override(void) {
    weft_model_cfg *c = load_model("fmnist-mlp.cfg");
    CHECK(c);
    if (!c) return;
    CHECK(weft_model_cfg_set(c, "lr", "0.01") == WEFT_OK && c->net.lr == 0.01);
    CHECK(weft_model_cfg_set(c, "epochs", " 3 ") == WEFT_OK && c->net.epochs == 3);
    CHECK(weft_model_cfg_set(c, "seed", "18446744073709551615") == WEFT_OK && c->net.seed == UINT64_MAX);
    weft_net_cfg before = c->net;
    CHECK(weft_model_cfg_set(c, "batch", "0") == WEFT_ERR_ARG && strstr(weft_last_error(), "batch") &&
          strstr(weft_last_error(), "out of range"));
    CHECK(weft_model_cfg_set(c, "lr", "fast") == WEFT_ERR_ARG && strstr(weft_last_error(), "'lr'"));
    CHECK(weft_model_cfg_set(c, "lr", "") == WEFT_ERR_ARG);
    CHECK(weft_model_cfg_set(c, "dataset", "kjv") == WEFT_ERR_ARG && strstr(weft_last_error(), "dataset"));
    CHECK(weft_model_cfg_set(c, "nonsense", "1") == WEFT_ERR_ARG);
    CHECK(!memcmp(&before, &c->net, sizeof before));
    weft_model_cfg_free(c);
}

// Random bytes, truncations and mutations of the shipped files: a cfg or NULL
// with a message that names the file, never a crash (ASan checks the rest).
static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void fuzz_one(const char *text, size_t len, int *ok, int *bad) {
    weft_model_cfg *c = weft_model_cfg_parse(text, len, "fz.cfg");
    if (c) { // whatever parses also survives write -> parse unchanged
        (*ok)++;
        char *text = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&text, &n);
        weft_model_cfg_write(c, f);
        fclose(f);
        weft_model_cfg *d = weft_model_cfg_parse(text, n, "fz.cfg");
        bool same = d && !memcmp(&c->net, &d->net, sizeof c->net) && c->n_layers == d->n_layers;
        for (int i = 0; same && i < c->n_layers; i++) {
            weft_layer_cfg x = c->layers[i], y = d->layers[i];
            x.line = y.line = 0;
            same = !memcmp(&x, &y, sizeof x);
        }
        if (!same) {
            wt_fail++;
            fprintf(stderr, "fuzz: round trip differs (%s):\n%.*s\n", d ? "" : weft_last_error(), (int)n, text);
        }
        weft_model_cfg_free(d);
        free(text);
    } else if (strncmp(weft_last_error(), "fz.cfg", 6)) {
        wt_fail++;
        fprintf(stderr, "fuzz: message without the file name: %s\n", weft_last_error());
    } else
        (*bad)++;
    weft_model_cfg_free(c);
}

static void test_fuzz(void) {
    int ok = 0, bad = 0;
    char *buf = malloc(1 << 16);
    for (int i = 0; i < 2000; i++) { // random bytes, biased towards the format's own characters
        size_t n = next() % 300;
        static const char alpha[] = "[]=#;,\n \tnetlinrauy01239.e-";
        for (size_t j = 0; j < n; j++) buf[j] = (next() & 1) ? (char)next() : alpha[next() % (sizeof alpha - 1)];
        fuzz_one(buf, n, &ok, &bad);
    }
    for (int f = 0; f < N_SHIPPED; f++) {
        size_t len;
        char *orig = read_all(SHIPPED[f], &len);
        CHECK(orig);
        if (!orig) continue;
        for (size_t cut = 0; cut <= len; cut += 1 + cut / 64) fuzz_one(orig, cut, &ok, &bad); // truncations
        for (int i = 0; i < 400; i++) { // 1-3 byte mutations
            memcpy(buf, orig, len);
            for (int m = 1 + (int)(next() % 3); m > 0; m--) buf[next() % len] = (char)next();
            fuzz_one(buf, len, &ok, &bad);
        }
        free(orig);
    }
    free(buf);
    CHECK(ok > 0 && bad > 0);
    printf("fuzz: %d parsed, %d rejected\n", ok, bad);
}


static char *read_path(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = malloc(1 << 17);
    size_t n = fread(b, 1, (1 << 17) - 1, f);
    b[n] = 0;
    fclose(f);
    return b;
}

// The part of docs/model-files.md about one section: from its "### `[name]`"
// heading (or the "[relu]"-style list heading) to the next heading.
static const char *doc_section(const char *doc, const char *sec, size_t *len) {
    char pat[64];
    snprintf(pat, sizeof pat, "`[%s]`", sec);
    const char *h = strstr(doc, pat);
    while (h) { // must be on a heading line
        const char *bol = h;
        while (bol > doc && bol[-1] != '\n') bol--;
        if (*bol == '#') break;
        h = strstr(h + 1, pat);
    }
    if (!h) return NULL;
    const char *end = strstr(h, "\n#");
    *len = end ? (size_t)(end - h) : strlen(h);
    return h;
}

// [net] loss_scale: f16's initial loss scale, PyTorch's 65536 unless given.
static void test_loss_scale(void) {
    const char *f16 = "[net]\ndataset = fmnist\nprecision = f16\nloss_scale = 1024\n[flatten]\n[linear]\nout = 10\n";
    const char *dflt = "[net]\ndataset = fmnist\nprecision = f16\n[flatten]\n[linear]\nout = 10\n";
    weft_model_cfg *a = weft_model_cfg_parse(f16, strlen(f16), "a.cfg"), *b = weft_model_cfg_parse(dflt, strlen(dflt), "b.cfg");
    CHECK(a && a->net.loss_scale == 1024 && b && b->net.loss_scale == 65536);
    weft_model_cfg_free(a);
    weft_model_cfg_free(b);
}

// Every section and every key the writer knows is documented in a table row of
// its own section in docs/model-files.md, and the worked example loads.
static void test_docs(void) {
    char path[600];
    snprintf(path, sizeof path, "%s../docs/model-files.md", g_models);
    char *doc = read_path(path);
    CHECK(doc);
    if (!doc) return;
    // a cfg with one layer of each type and nets with each optimiser/schedule/dataset
    weft_model_cfg c = {0};
    weft_layer_cfg layers[WEFT_CFG_NUM_LAYER_TYPES] = {0};
    for (int t = 0; t < WEFT_CFG_NUM_LAYER_TYPES; t++) {
        layers[t].type = (weft_cfg_layer_type)t;
        layers[t].stage = -1; // not given (its row is in the layer sections' introduction)
    }
    c.layers = layers;
    c.n_layers = WEFT_CFG_NUM_LAYER_TYPES;
    int checked = 0;
    for (int variant = 0; variant < 5; variant++) {
        c.net.optimizer = (weft_cfg_optimizer)variant;
        c.net.schedule = (weft_cfg_schedule)(variant % 3);
        c.net.dataset = (weft_cfg_dataset)(variant % 2);
        c.net.precision = (weft_cfg_precision)(variant % 3); // f16 brings loss_scale
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        CHECK(weft_model_cfg_write(&c, f) == WEFT_OK);
        fclose(f);
        char sec[64] = "";
        const char *part = NULL;
        size_t plen = 0;
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
            if (line[0] == '#') continue;
            if (line[0] == '[') {
                snprintf(sec, sizeof sec, "%.*s", (int)(strcspn(line + 1, "]")), line + 1);
                part = doc_section(doc, sec, &plen);
                if (!part) {
                    wt_fail++;
                    fprintf(stderr, "docs: no heading for [%s]\n", sec);
                } else
                    wt_pass++;
                continue;
            }
            char key[64], row[80];
            snprintf(key, sizeof key, "%.*s", (int)strcspn(line, " ="), line);
            snprintf(row, sizeof row, "| `%s` |", key);
            bool found = false;
            for (const char *q = part; q && (q = strstr(q, row)) && q < part + plen; q++) found = true;
            if (!found) {
                wt_fail++;
                fprintf(stderr, "docs: key '%s' of [%s] has no table row\n", key, sec);
            } else
                wt_pass++;
            checked++;
        }
        free(text);
    }
    CHECK(checked > 60);
    // the worked example is a complete model file
    const char *ex = strstr(doc, "## Worked example");
    ex = ex ? strstr(ex, "```ini\n") : NULL;
    CHECK(ex);
    if (ex) {
        ex += 7;
        const char *end = strstr(ex, "```");
        weft_model_cfg *w = end ? weft_model_cfg_parse(ex, (size_t)(end - ex), "example") : NULL;
        CHECK(w && w->n_layers == 10 && w->layers[6].out_shape[0] == 3136);
        weft_model_cfg_free(w);
    }
    free(doc);
}

int main(void) {
    find_models();
    RUN(test_mlp);
    RUN(test_cnn);
    RUN(test_gpt_lstm);
    RUN(test_gpt2_small);
    RUN(test_gelu_keys);
    RUN(test_classic);
    RUN(test_roundtrip);
    RUN(test_errors);
    RUN(test_syntax);
    RUN(test_override);
    RUN(test_fuzz);
    RUN(test_parallel_keys);
    RUN(test_loss_scale);
    RUN(test_docs);
    return wt_summary();
}
