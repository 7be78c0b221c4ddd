// Model files: parse + validate the `[net]` + one-section-per-layer text format
// into a weft_model_cfg (include/weft/model.h, docs/model-files.md).
//
// Why not inih (the usual INI library): Debian's build passes no line number to
// the handler, never reports a section without keys ([relu], [flatten] are most
// of our layers), cannot tell two [linear] sections in a row apart from one,
// folds indented lines into the previous value and truncates lines at 200
// bytes. The syntax here is the same INI subset, read by a small line parser
// that keeps the line of every section and key for the error messages.
//
// Flow: read the text -> parse lines into raw values (a table of keys per
// section says name, type, range and where the value goes) -> resolve: apply
// dependent defaults, cross-check keys, infer every layer's input/output shape.
// The first error wins; it is formatted "FILE:LINE: message".
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <weft/model.h>

#include "../core/core_impl.h"

#define MAXK 48                      // keys per section (+1: a layer's `stage`)
#define MAX_FILE (16u << 20)         // a model file is a few hundred bytes; refuse silly ones
#define MAX_SIZE ((int64_t)1 << 24)  // largest single size (channels, features, ...)
#define MAX_NUMEL ((int64_t)1 << 40) // largest per-sample activation, keeps products in int64

// ---------------------------------------------------------------- key tables

typedef enum {
    K_INT,    // int64_t
    K_I32,    // int
    K_U64,    // uint64_t
    K_PAIR,   // int[2]; "5" means "5,5"
    K_FLOAT,  // double
    K_FLOAT2, // double[2]
    K_BOOL,   // bool
    K_ENUM,   // int-sized enum or bool (sz), value = index in names
    K_SHAPE,  // input shape: 1..4 sizes into net.input / net.input_ndim
    K_OUT,    // int64_t, or the word "vocab" (stored as -1, resolved later)
    K_STR,    // char[64]
} kkind;

enum { F_REQ = 1, F_LO_OPEN = 2, F_HI_OPEN = 4 };

typedef struct keydef {
    const char *name;
    kkind kind;
    size_t off, sz;
    double lo, hi;
    unsigned flags;
    const char *const *names; // K_ENUM
} keydef;

static const char *const DATASETS[] = {"fmnist", "kjv", NULL};
static const char *const OPTIMIZERS[] = {"sgd", "adam", "adamw", "adagrad", "rmsprop", NULL};
static const char *const SCHEDULES[] = {"constant", "step", "cosine", NULL};
static const char *const LOSSES[] = {"cross_entropy", "hinge", NULL};
static const char *const POSITIONS[] = {"none", "learned", NULL};
static const char *const GELU_FORMS[] = {"exact", "tanh", NULL};
static const char *const APPROXIMATE[] = {"none", "tanh", NULL};
static const char *const NONLINEARITIES[] = {"tanh", "relu", NULL};
static const char *const PRECISIONS[] = {"f32", "bf16", "f16", NULL};
static const char *const PP_SCHEDULES[] = {"1f1b", "gpipe", "interleaved", NULL};

#define NK(n, k, field, lo, hi, fl, nm) {n, k, offsetof(weft_net_cfg, field), sizeof(((weft_net_cfg *)0)->field), lo, hi, fl, nm}
#define LK(n, k, field, lo, hi, fl, nm) {n, k, offsetof(weft_layer_cfg, field), sizeof(((weft_layer_cfg *)0)->field), lo, hi, fl, nm}
#define BIG 1e12

// Order matters only for weft_model_cfg_write (it writes keys in table order).
static const keydef NET_KEYS[] = {
    NK("name", K_STR, name, 0, 0, 0, NULL),
    NK("dataset", K_ENUM, dataset, 0, 0, F_REQ, DATASETS),
    NK("input", K_SHAPE, input, 1, (double)MAX_SIZE, 0, NULL),
    NK("context", K_INT, context, 1, 1 << 20, 0, NULL),
    NK("val_fraction", K_FLOAT, val_fraction, 0, 1, F_LO_OPEN | F_HI_OPEN, NULL),
    NK("shuffle", K_BOOL, shuffle, 0, 0, 0, NULL),
    NK("batch", K_INT, batch, 1, 1 << 20, 0, NULL),
    NK("epochs", K_INT, epochs, 1, 1e6, 0, NULL),
    NK("steps", K_INT, steps, 0, BIG, 0, NULL),
    NK("seed", K_U64, seed, 0, 0, 0, NULL),
    NK("loss", K_ENUM, loss, 0, 0, 0, LOSSES),
    NK("optimizer", K_ENUM, optimizer, 0, 0, 0, OPTIMIZERS),
    NK("lr", K_FLOAT, lr, 0, 1e3, F_LO_OPEN, NULL),
    NK("momentum", K_FLOAT, momentum, 0, 1, F_HI_OPEN, NULL),
    NK("nesterov", K_BOOL, nesterov, 0, 0, 0, NULL),
    NK("betas", K_FLOAT2, betas, 0, 1, F_HI_OPEN, NULL),
    NK("alpha", K_FLOAT, alpha, 0, 1, F_LO_OPEN | F_HI_OPEN, NULL),
    NK("eps", K_FLOAT, eps, 0, 1, F_LO_OPEN, NULL),
    NK("weight_decay", K_FLOAT, weight_decay, 0, 10, 0, NULL),
    NK("schedule", K_ENUM, schedule, 0, 0, 0, SCHEDULES),
    NK("warmup", K_INT, warmup, 0, BIG, 0, NULL),
    NK("step_size", K_INT, step_size, 1, BIG, 0, NULL),
    NK("gamma", K_FLOAT, gamma, 0, 1, F_LO_OPEN, NULL),
    NK("min_lr", K_FLOAT, min_lr, 0, 1e3, 0, NULL),
    NK("clip", K_FLOAT, clip, 0, 1e9, 0, NULL),
    NK("precision", K_ENUM, precision, 0, 0, 0, PRECISIONS),
    NK("loss_scale", K_FLOAT, loss_scale, 0, 1e12, F_LO_OPEN, NULL), // (a scaled f32 loss stays finite)
    NK("eval_every", K_INT, eval_every, 0, BIG, 0, NULL),
    NK("ckpt_every", K_INT, ckpt_every, 0, BIG, 0, NULL),
    NK("log_every", K_INT, log_every, 0, BIG, 0, NULL),
    NK("tp", K_I32, tp, 1, 1024, 0, NULL),
    NK("pp", K_I32, pp, 1, 1024, 0, NULL),
    NK("microbatches", K_I32, microbatches, 0, 1 << 20, 0, NULL),
    NK("pp_schedule", K_ENUM, pp_schedule, 0, 0, 0, PP_SCHEDULES),
    NK("virtual_stages", K_I32, virtual_stages, 0, 1024, 0, NULL),
    NK("zero", K_I32, zero, 0, 2, 0, NULL),
    NK("recompute", K_BOOL, recompute, 0, 0, 0, NULL),
};
#define N_NET_KEYS ((int)(sizeof NET_KEYS / sizeof NET_KEYS[0]))
_Static_assert(N_NET_KEYS < MAXK, "MAXK too small for [net]");
// Every layer section also takes `stage` (its pipeline stage; -1 = not given,
// placed by the split), kept after the section's own keys (index nkeys).
static const keydef STAGE_KEY = LK("stage", K_I32, stage, 0, 1023, 0, NULL);

#define SZ (double)MAX_SIZE
static const keydef LINEAR_KEYS[] = {
    LK("in", K_INT, linear.in, 1, SZ, 0, NULL),
    LK("out", K_OUT, linear.out, 1, SZ, F_REQ, NULL),
    LK("bias", K_BOOL, linear.bias, 0, 0, 0, NULL),
};
static const keydef CONV_KEYS[] = {
    LK("in", K_INT, conv2d.in, 1, SZ, 0, NULL),
    LK("out", K_INT, conv2d.out, 1, SZ, F_REQ, NULL),
    LK("kernel", K_PAIR, conv2d.kernel, 1, 1024, F_REQ, NULL),
    LK("stride", K_PAIR, conv2d.stride, 1, 1024, 0, NULL),
    LK("pad", K_PAIR, conv2d.pad, 0, 1024, 0, NULL),
    LK("dilation", K_PAIR, conv2d.dilation, 1, 1024, 0, NULL),
    LK("groups", K_I32, conv2d.groups, 1, 1 << 20, 0, NULL),
    LK("bias", K_BOOL, conv2d.bias, 0, 0, 0, NULL),
};
static const keydef MAXPOOL_KEYS[] = {
    LK("kernel", K_PAIR, pool.kernel, 1, 1024, F_REQ, NULL),
    LK("stride", K_PAIR, pool.stride, 1, 1024, 0, NULL),
    LK("pad", K_PAIR, pool.pad, 0, 1024, 0, NULL),
};
static const keydef AVGPOOL_KEYS[] = {
    LK("kernel", K_PAIR, pool.kernel, 1, 1024, F_REQ, NULL),
    LK("stride", K_PAIR, pool.stride, 1, 1024, 0, NULL),
    LK("pad", K_PAIR, pool.pad, 0, 1024, 0, NULL),
    LK("count_include_pad", K_BOOL, pool.count_include_pad, 0, 0, 0, NULL),
};
static const keydef DROPOUT_KEYS[] = {
    LK("p", K_FLOAT, dropout.p, 0, 1, F_HI_OPEN, NULL),
};
static const keydef BATCHNORM_KEYS[] = {
    LK("momentum", K_FLOAT, batchnorm.momentum, 0, 1, 0, NULL),
    LK("eps", K_FLOAT, batchnorm.eps, 0, 1, F_LO_OPEN, NULL),
};
static const keydef LAYERNORM_KEYS[] = {
    LK("dim", K_INT, layernorm.dim, 1, SZ, 0, NULL),
    LK("eps", K_FLOAT, layernorm.eps, 0, 1, F_LO_OPEN, NULL),
};
static const keydef EMBEDDING_KEYS[] = {
    LK("vocab", K_INT, embedding.vocab, 1, SZ, 0, NULL),
    LK("dim", K_INT, embedding.dim, 1, SZ, F_REQ, NULL),
    LK("position", K_ENUM, embedding.learned_position, 0, 0, 0, POSITIONS),
};
static const keydef LSTM_KEYS[] = { // and [gru]
    LK("in", K_INT, rnn.in, 1, SZ, 0, NULL),
    LK("hidden", K_INT, rnn.hidden, 1, SZ, F_REQ, NULL),
    LK("layers", K_I32, rnn.layers, 1, 64, 0, NULL),
};
static const keydef RNN_KEYS[] = {
    LK("in", K_INT, rnn.in, 1, SZ, 0, NULL),
    LK("hidden", K_INT, rnn.hidden, 1, SZ, F_REQ, NULL),
    LK("layers", K_I32, rnn.layers, 1, 64, 0, NULL),
    LK("nonlinearity", K_ENUM, rnn.relu, 0, 0, 0, NONLINEARITIES),
};
static const keydef ATTENTION_KEYS[] = {
    LK("dim", K_INT, attn.dim, 1, SZ, 0, NULL),
    LK("heads", K_INT, attn.heads, 1, 4096, F_REQ, NULL),
};
static const keydef TRANSFORMER_KEYS[] = {
    LK("dim", K_INT, attn.dim, 1, SZ, 0, NULL),
    LK("heads", K_INT, attn.heads, 1, 4096, F_REQ, NULL),
    LK("blocks", K_I32, attn.blocks, 1, 1024, 0, NULL),
    LK("gelu", K_ENUM, attn.gelu_tanh, 0, 0, 0, GELU_FORMS),
};
static const keydef GELU_KEYS[] = {
    LK("approximate", K_ENUM, gelu.tanh, 0, 0, 0, APPROXIMATE),
};

typedef struct secdef {
    const char *name;
    const keydef *keys;
    int nkeys;
} secdef;

#define SEC(n, k) {n, k, (int)(sizeof k / sizeof k[0])}
// Indexed by weft_cfg_layer_type.
static const secdef LAYER_SECS[WEFT_CFG_NUM_LAYER_TYPES] = {
    [WEFT_CFG_LINEAR] = SEC("linear", LINEAR_KEYS),
    [WEFT_CFG_CONV2D] = SEC("conv2d", CONV_KEYS),
    [WEFT_CFG_MAXPOOL] = SEC("maxpool", MAXPOOL_KEYS),
    [WEFT_CFG_AVGPOOL] = SEC("avgpool", AVGPOOL_KEYS),
    [WEFT_CFG_FLATTEN] = {"flatten", NULL, 0},
    [WEFT_CFG_DROPOUT] = SEC("dropout", DROPOUT_KEYS),
    [WEFT_CFG_BATCHNORM] = SEC("batchnorm", BATCHNORM_KEYS),
    [WEFT_CFG_LAYERNORM] = SEC("layernorm", LAYERNORM_KEYS),
    [WEFT_CFG_EMBEDDING] = SEC("embedding", EMBEDDING_KEYS),
    [WEFT_CFG_LSTM] = SEC("lstm", LSTM_KEYS),
    [WEFT_CFG_ATTENTION] = SEC("attention", ATTENTION_KEYS),
    [WEFT_CFG_TRANSFORMER] = SEC("transformer", TRANSFORMER_KEYS),
    [WEFT_CFG_RELU] = {"relu", NULL, 0},
    [WEFT_CFG_GELU] = SEC("gelu", GELU_KEYS),
    [WEFT_CFG_TANH] = {"tanh", NULL, 0},
    [WEFT_CFG_SIGMOID] = {"sigmoid", NULL, 0},
    [WEFT_CFG_SILU] = {"silu", NULL, 0},
    [WEFT_CFG_GRU] = SEC("gru", LSTM_KEYS),
    [WEFT_CFG_RNN] = SEC("rnn", RNN_KEYS),
};
static const secdef NET_SEC = {"net", NET_KEYS, N_NET_KEYS};

const char *weft_cfg_layer_name(weft_cfg_layer_type t) {
    return (unsigned)t < WEFT_CFG_NUM_LAYER_TYPES ? LAYER_SECS[t].name : "?";
}
static const char *enum_name(const char *const *names, int n, int v) { return v >= 0 && v < n ? names[v] : "?"; }
const char *weft_cfg_dataset_name(weft_cfg_dataset d) { return enum_name(DATASETS, 2, (int)d); }
const char *weft_cfg_optimizer_name(weft_cfg_optimizer o) { return enum_name(OPTIMIZERS, 5, (int)o); }
const char *weft_cfg_schedule_name(weft_cfg_schedule s) { return enum_name(SCHEDULES, 3, (int)s); }
const char *weft_cfg_loss_name(weft_cfg_loss l) { return enum_name(LOSSES, 2, (int)l); }

static int key_index(const secdef *s, const char *name) {
    for (int i = 0; i < s->nkeys; i++)
        if (!strcmp(s->keys[i].name, name)) return i;
    return -1;
}

// ---------------------------------------------------------------- errors

typedef struct parser {
    const char *path;
    char err[1000];
    bool failed;
    weft_model_cfg *cfg;
    int cap;               // layers allocated
    bool have_net;
    int net_line;
    int net_lines[MAXK];   // line of each [net] key, 0 = not given
    int (*layer_lines)[MAXK]; // same per layer (parallel to cfg->layers)
} parser;

// Records the first error as "PATH:LINE: msg" (line 0: "PATH: msg").
WEFT_PRINTF(3, 4) static bool fail(parser *p, int line, const char *fmt, ...) {
    if (p->failed) return false;
    p->failed = true;
    int n = line > 0 ? snprintf(p->err, sizeof p->err, "%s:%d: ", p->path, line)
                     : snprintf(p->err, sizeof p->err, "%s: ", p->path);
    if (n < 0 || n >= (int)sizeof p->err) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + n, sizeof p->err - (size_t)n, fmt, ap);
    va_end(ap);
    return false;
}

// A value as it may be echoed in a message: at most 40 bytes, non-printables as '?'.
static const char *shown(const char *s, char buf[48]) {
    size_t i = 0;
    for (; s[i] && i < 40; i++) buf[i] = isprint((unsigned char)s[i]) ? s[i] : '?';
    if (s[i]) buf[i++] = '.', buf[i++] = '.', buf[i++] = '.';
    buf[i] = 0;
    return buf;
}

static void list_keys(const secdef *s, char *out, size_t n) {
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < s->nkeys && k < n; i++) {
        int w = snprintf(out + k, n - k, "%s%s", i ? ", " : "", s->keys[i].name);
        if (w < 0) break;
        k += (size_t)w;
    }
    if (s->nkeys == 0) snprintf(out, n, "none");
}

static const char *shape_str(const int64_t *s, int nd, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    k += (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < nd && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)s[i]);
    if (k < n) snprintf(buf + k, n - k, ")");
    return buf;
}

// ---------------------------------------------------------------- values

static bool parse_i64(const char *s, int64_t *out) {
    if (!*s) return false;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end || errno || isspace((unsigned char)*s)) return false;
    *out = v;
    return true;
}

static bool parse_f64(const char *s, double *out) {
    if (!*s || isspace((unsigned char)*s)) return false;
    char *end;
    double v = strtod(s, &end);
    if (*end || !isfinite(v)) return false; // rejects nan, inf, 1e999, hex junk tails
    *out = v;
    return true;
}

static char *trim(char *s) {
    while (*s && isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    return s;
}

// Splits a comma list in place; returns the number of items (up to max+1, so
// the caller can tell "too many"), or -1 for an empty item.
static int split_list(char *s, char **items, int max) {
    int n = 0;
    for (;;) {
        char *c = strchr(s, ',');
        if (c) *c = 0;
        char *t = trim(s);
        if (!*t) return -1;
        if (n <= max) items[n] = t;
        n++;
        if (!c || n > max) return n;
        s = c + 1;
    }
}

static bool in_range(const keydef *k, double v) {
    if (v < k->lo || v > k->hi) return false;
    if ((k->flags & F_LO_OPEN) && v == k->lo) return false;
    if ((k->flags & F_HI_OPEN) && v == k->hi) return false;
    return true;
}

static const char *range_str(const keydef *k, char *buf, size_t n, bool integer) {
    if (integer) snprintf(buf, n, "an integer in [%.0f, %.0f]", k->lo, k->hi);
    else
        snprintf(buf, n, "a number in %c%g, %g%c", (k->flags & F_LO_OPEN) ? '(' : '[', k->lo, k->hi,
                 (k->flags & F_HI_OPEN) ? ')' : ']');
    return buf;
}

// Parses value (modified in place) for key k into the object at base.
// sec names the section for messages.
static bool set_value(parser *p, int line, const char *sec, const keydef *k, char *value, void *base) {
    char vb[48], rb[96];
    char *dst = (char *)base + k->off;
    const char *v0 = shown(value, vb);
    switch (k->kind) {
    case K_INT:
    case K_I32:
    case K_OUT: {
        int64_t v;
        if (k->kind == K_OUT && !strcmp(value, "vocab")) {
            int64_t m = -1;
            memcpy(dst, &m, sizeof m);
            return true;
        }
        if (!parse_i64(value, &v))
            return fail(p, line, "[%s] key '%s': '%s' is not an integer%s", sec, k->name, v0,
                        k->kind == K_OUT ? " (or 'vocab')" : "");
        if (!in_range(k, (double)v))
            return fail(p, line, "[%s] key '%s': %lld is out of range (expected %s)", sec, k->name, (long long)v,
                        range_str(k, rb, sizeof rb, true));
        if (k->kind == K_I32) {
            int i = (int)v;
            memcpy(dst, &i, sizeof i);
        } else
            memcpy(dst, &v, sizeof v);
        return true;
    }
    case K_U64: {
        if (!*value || !isdigit((unsigned char)value[0]))
            return fail(p, line, "[%s] key '%s': '%s' is not a non-negative integer", sec, k->name, v0);
        errno = 0;
        char *end;
        unsigned long long v = strtoull(value, &end, 10);
        if (*end || errno)
            return fail(p, line, "[%s] key '%s': '%s' is not an integer in [0, 2^64)", sec, k->name, v0);
        uint64_t u = v;
        memcpy(dst, &u, sizeof u);
        return true;
    }
    case K_FLOAT: {
        double v;
        if (!parse_f64(value, &v)) return fail(p, line, "[%s] key '%s': '%s' is not a number", sec, k->name, v0);
        if (!in_range(k, v))
            return fail(p, line, "[%s] key '%s': %g is out of range (expected %s)", sec, k->name, v,
                        range_str(k, rb, sizeof rb, false));
        memcpy(dst, &v, sizeof v);
        return true;
    }
    case K_BOOL: {
        static const char *const T[] = {"true", "1", "yes", "on"}, *const F[] = {"false", "0", "no", "off"};
        for (int i = 0; i < 4; i++) {
            bool b = i < 4 && !strcmp(value, T[i]);
            if (b || !strcmp(value, F[i])) {
                memcpy(dst, &b, sizeof b);
                return true;
            }
        }
        return fail(p, line, "[%s] key '%s': '%s' is not a boolean (true or false)", sec, k->name, v0);
    }
    case K_ENUM: {
        for (int i = 0; k->names[i]; i++)
            if (!strcmp(value, k->names[i])) {
                if (k->sz == sizeof(bool)) {
                    bool b = i != 0;
                    memcpy(dst, &b, sizeof b);
                } else
                    memcpy(dst, &i, sizeof i);
                return true;
            }
        char opts[200];
        size_t n = 0;
        opts[0] = 0;
        for (int i = 0; k->names[i] && n < sizeof opts; i++)
            n += (size_t)snprintf(opts + n, sizeof opts - n, "%s%s", i ? " | " : "", k->names[i]);
        return fail(p, line, "[%s] key '%s': '%s' is not one of %s", sec, k->name, v0, opts);
    }
    case K_PAIR:
    case K_SHAPE: {
        int max = k->kind == K_PAIR ? 2 : 4;
        char *items[5];
        int n = split_list(value, items, max);
        if (n < 0) return fail(p, line, "[%s] key '%s': '%s' has an empty list item", sec, k->name, v0);
        if (n > max)
            return fail(p, line, "[%s] key '%s': '%s' has %s%d values (expected 1 to %d)", sec, k->name, v0,
                        n > max ? "more than " : "", max, max);
        int64_t vals[4];
        for (int i = 0; i < n; i++) {
            if (!parse_i64(items[i], &vals[i]))
                return fail(p, line, "[%s] key '%s': '%s' is not an integer", sec, k->name, shown(items[i], vb));
            if (!in_range(k, (double)vals[i]))
                return fail(p, line, "[%s] key '%s': %lld is out of range (expected %s)", sec, k->name,
                            (long long)vals[i], range_str(k, rb, sizeof rb, true));
        }
        if (k->kind == K_PAIR) {
            int pair[2] = {(int)vals[0], (int)vals[n == 2]};
            memcpy(dst, pair, sizeof pair);
        } else {
            weft_net_cfg *net = base;
            net->input_ndim = n;
            for (int i = 0; i < n; i++) net->input[i] = vals[i];
        }
        return true;
    }
    case K_FLOAT2: {
        char *items[3];
        int n = split_list(value, items, 2);
        if (n != 2)
            return fail(p, line, "[%s] key '%s': '%s' must be two numbers separated by a comma", sec, k->name, v0);
        double v[2];
        for (int i = 0; i < 2; i++) {
            if (!parse_f64(items[i], &v[i]))
                return fail(p, line, "[%s] key '%s': '%s' is not a number", sec, k->name, shown(items[i], vb));
            if (!in_range(k, v[i]))
                return fail(p, line, "[%s] key '%s': %g is out of range (expected %s)", sec, k->name, v[i],
                            range_str(k, rb, sizeof rb, false));
        }
        memcpy(dst, v, sizeof v);
        return true;
    }
    case K_STR: {
        size_t n = strlen(value);
        if (n >= k->sz)
            return fail(p, line, "[%s] key '%s': '%s' is longer than %zu characters", sec, k->name, v0, k->sz - 1);
        for (size_t i = 0; i < n; i++)
            if (!isalnum((unsigned char)value[i]) && !strchr("_.-", value[i]))
                return fail(p, line, "[%s] key '%s': '%s' may only contain letters, digits, '_', '.', '-'", sec,
                            k->name, v0);
        memcpy(dst, value, n + 1);
        return true;
    }
    }
    return fail(p, line, "[%s] key '%s': internal error (unknown kind)", sec, k->name);
}

// ---------------------------------------------------------------- defaults

static void net_defaults(weft_net_cfg *n) {
    memset(n, 0, sizeof *n);
    n->dataset = WEFT_CFG_FMNIST;
    n->val_fraction = 0.1;
    n->shuffle = true;
    n->batch = 32;
    n->epochs = 10;
    n->seed = 1;
    n->loss = WEFT_CFG_CROSS_ENTROPY;
    n->optimizer = WEFT_CFG_SGD;
    n->lr = 1e-3;
    n->betas[0] = 0.9;
    n->betas[1] = 0.999;
    n->alpha = 0.99;
    n->eps = 1e-8; // adagrad: 1e-10, set in resolve when not given
    n->schedule = WEFT_CFG_CONSTANT;
    n->gamma = 0.1;
    n->log_every = 100;
    n->loss_scale = 65536; // f16: torch.cuda.amp.GradScaler's init_scale
    n->tp = n->pp = 1;
}

static void layer_defaults(weft_layer_cfg *l, weft_cfg_layer_type t, int line) {
    memset(l, 0, sizeof *l);
    l->type = t;
    l->line = line;
    l->stage = -1;
    switch (t) {
    case WEFT_CFG_LINEAR: l->linear.bias = true; break;
    case WEFT_CFG_CONV2D:
        for (int i = 0; i < 2; i++) l->conv2d.stride[i] = l->conv2d.dilation[i] = 1;
        l->conv2d.groups = 1;
        l->conv2d.bias = true;
        break;
    case WEFT_CFG_AVGPOOL: l->pool.count_include_pad = true; break;
    case WEFT_CFG_DROPOUT: l->dropout.p = 0.5; break;
    case WEFT_CFG_BATCHNORM:
        l->batchnorm.momentum = 0.1;
        l->batchnorm.eps = 1e-5;
        break;
    case WEFT_CFG_LAYERNORM: l->layernorm.eps = 1e-5; break;
    case WEFT_CFG_LSTM:
    case WEFT_CFG_GRU:
    case WEFT_CFG_RNN: l->rnn.layers = 1; break;
    case WEFT_CFG_ATTENTION:
    case WEFT_CFG_TRANSFORMER: l->attn.blocks = 1; break;
    default: break;
    }
}

// Whether a [net] key means anything for this dataset / optimiser / schedule.
// Giving one that does not is an error (it is almost always a mistake), and
// weft_model_cfg_write leaves such keys out.
static const char *net_key_inapplicable(const weft_net_cfg *n, const char *key) {
    weft_cfg_optimizer o = n->optimizer;
    if (!strcmp(key, "momentum") && o != WEFT_CFG_SGD && o != WEFT_CFG_RMSPROP) return "optimizer";
    if (!strcmp(key, "nesterov") && o != WEFT_CFG_SGD) return "optimizer";
    if (!strcmp(key, "betas") && o != WEFT_CFG_ADAM && o != WEFT_CFG_ADAMW) return "optimizer";
    if (!strcmp(key, "alpha") && o != WEFT_CFG_RMSPROP) return "optimizer";
    if (!strcmp(key, "eps") && o == WEFT_CFG_SGD) return "optimizer";
    if ((!strcmp(key, "step_size") || !strcmp(key, "gamma")) && n->schedule != WEFT_CFG_STEP) return "schedule";
    if (!strcmp(key, "min_lr") && n->schedule != WEFT_CFG_COSINE) return "schedule";
    if ((!strcmp(key, "context") || !strcmp(key, "val_fraction")) && n->dataset != WEFT_CFG_KJV) return "dataset";
    if (!strcmp(key, "loss_scale") && n->precision != WEFT_CFG_F16) return "precision";
    return NULL;
}

static const char *net_enum_value(const weft_net_cfg *n, const char *what) {
    if (!strcmp(what, "optimizer")) return weft_cfg_optimizer_name(n->optimizer);
    if (!strcmp(what, "schedule")) return weft_cfg_schedule_name(n->schedule);
    if (!strcmp(what, "precision")) return enum_name(PRECISIONS, 3, (int)n->precision);
    return weft_cfg_dataset_name(n->dataset);
}

// ---------------------------------------------------------------- line parser

static weft_layer_cfg *new_layer(parser *p, weft_cfg_layer_type t, int line) {
    weft_model_cfg *c = p->cfg;
    if (c->n_layers == p->cap) {
        int cap = p->cap ? 2 * p->cap : 16;
        weft_layer_cfg *l = realloc(c->layers, (size_t)cap * sizeof *l);
        if (!l) return NULL;
        c->layers = l;
        int(*ll)[MAXK] = realloc(p->layer_lines, (size_t)cap * sizeof *ll);
        if (!ll) return NULL;
        p->layer_lines = ll;
        p->cap = cap;
    }
    weft_layer_cfg *l = &c->layers[c->n_layers];
    layer_defaults(l, t, line);
    memset(p->layer_lines[c->n_layers], 0, sizeof p->layer_lines[0]);
    c->n_layers++;
    return l;
}

static bool parse_lines(parser *p, const char *text, size_t len) {
    const char *s = text, *e = text + len;
    if (len >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) s += 3; // UTF-8 byte order mark
    const secdef *sec = NULL; // current section
    void *base = NULL;        // where its values go
    int *lines = NULL;        // line of each key given in it
    char *buf = NULL;
    size_t bufcap = 0;
    bool ok = true;
    for (int lineno = 1; s < e && ok; lineno++) {
        const char *nl = memchr(s, '\n', (size_t)(e - s));
        size_t n = (size_t)((nl ? nl : e) - s);
        if (n + 1 > bufcap) {
            bufcap = n + 64;
            char *b = realloc(buf, bufcap);
            if (!b) {
                ok = fail(p, lineno, "out of memory");
                break;
            }
            buf = b;
        }
        memcpy(buf, s, n);
        buf[n] = 0;
        s = nl ? nl + 1 : e;
        if (strlen(buf) != n) {
            ok = fail(p, lineno, "NUL byte in the file (not a text file?)");
            break;
        }
        // comments: everything from '#' or ';' (no value contains them)
        char *c = strpbrk(buf, "#;");
        if (c) *c = 0;
        char *line = trim(buf);
        if (!*line) continue;
        char vb[48];
        if (*line == '[') {
            size_t ln = strlen(line);
            if (line[ln - 1] != ']') {
                ok = fail(p, lineno, "section header '%s' does not end with ']'", shown(line, vb));
                break;
            }
            line[ln - 1] = 0;
            char *name = trim(line + 1);
            if (!*name) {
                ok = fail(p, lineno, "empty section name '[]'");
                break;
            }
            if (!strcmp(name, "net")) {
                if (p->have_net) {
                    ok = fail(p, lineno, "a second [net] section (the first is on line %d)", p->net_line);
                    break;
                }
                if (p->cfg->n_layers) {
                    ok = fail(p, lineno, "[net] must be the first section");
                    break;
                }
                p->have_net = true;
                p->net_line = lineno;
                sec = &NET_SEC;
                base = &p->cfg->net;
                lines = p->net_lines;
                continue;
            }
            int t = 0;
            while (t < WEFT_CFG_NUM_LAYER_TYPES && strcmp(LAYER_SECS[t].name, name)) t++;
            if (t == WEFT_CFG_NUM_LAYER_TYPES) {
                char known[400];
                size_t k = (size_t)snprintf(known, sizeof known, "net");
                for (int i = 0; i < WEFT_CFG_NUM_LAYER_TYPES && k < sizeof known; i++)
                    k += (size_t)snprintf(known + k, sizeof known - k, ", %s", LAYER_SECS[i].name);
                ok = fail(p, lineno, "unknown section [%s] (known: %s)", shown(name, vb), known);
                break;
            }
            if (!p->have_net) {
                ok = fail(p, lineno, "the first section must be [net], not [%s]", name);
                break;
            }
            weft_layer_cfg *l = new_layer(p, (weft_cfg_layer_type)t, lineno);
            if (!l) {
                ok = fail(p, lineno, "out of memory");
                break;
            }
            sec = &LAYER_SECS[t];
            base = l;
            lines = p->layer_lines[p->cfg->n_layers - 1];
            continue;
        }
        char *eq = strchr(line, '=');
        if (!eq) {
            ok = fail(p, lineno, "expected 'key = value' or '[section]', got '%s'", shown(line, vb));
            break;
        }
        *eq = 0;
        char *key = trim(line), *value = trim(eq + 1);
        if (!*key) {
            ok = fail(p, lineno, "missing key name before '='");
            break;
        }
        if (!sec) {
            ok = fail(p, lineno, "key '%s' before any section (a model file starts with [net])", shown(key, vb));
            break;
        }
        int ki = key_index(sec, key);
        const keydef *kd = ki >= 0 ? &sec->keys[ki] : NULL;
        if (ki < 0 && sec != &NET_SEC && !strcmp(key, STAGE_KEY.name)) ki = sec->nkeys, kd = &STAGE_KEY;
        if (ki < 0) {
            char acc[400];
            list_keys(sec, acc, sizeof acc);
            ok = fail(p, lineno, "[%s] unknown key '%s' (accepted: %s%s)", sec->name, shown(key, vb), acc,
                      sec != &NET_SEC ? ", stage" : "");
            break;
        }
        if (lines[ki]) {
            ok = fail(p, lineno, "[%s] duplicate key '%s' (first given on line %d)", sec->name, key, lines[ki]);
            break;
        }
        if (!*value) {
            ok = fail(p, lineno, "[%s] key '%s' has no value", sec->name, key);
            break;
        }
        lines[ki] = lineno;
        ok = set_value(p, lineno, sec->name, kd, value, base);
    }
    free(buf);
    if (!ok) return false;
    if (!p->have_net) return fail(p, 0, "no [net] section (a model file starts with [net])");
    if (!p->cfg->n_layers) return fail(p, 0, "no layer sections after [net]");
    return true;
}

// ---------------------------------------------------------------- resolve

static bool check_required(parser *p, const secdef *sec, const int *lines, int header_line) {
    for (int i = 0; i < sec->nkeys; i++)
        if ((sec->keys[i].flags & F_REQ) && !lines[i])
            return fail(p, header_line, "[%s] missing required key '%s'", sec->name, sec->keys[i].name);
    return true;
}

static bool resolve_net(parser *p) {
    weft_net_cfg *n = &p->cfg->net;
    const int *L = p->net_lines;
#define NL(k) L[key_index(&NET_SEC, k)]
    if (!check_required(p, &NET_SEC, L, p->net_line)) return false;
    for (int i = 0; i < N_NET_KEYS; i++) {
        const char *what = L[i] ? net_key_inapplicable(n, NET_KEYS[i].name) : NULL;
        if (what)
            return fail(p, L[i], "[net] key '%s' does not apply to %s = %s", NET_KEYS[i].name, what,
                        net_enum_value(n, what));
    }
    if (!NL("name")) {
        // the file name without directory and extension
        const char *b = strrchr(p->path, '/');
        b = b ? b + 1 : p->path;
        size_t len = strcspn(b, ".");
        if (len >= sizeof n->name) len = sizeof n->name - 1;
        for (size_t i = 0; i < len; i++) // keep it a valid `name` value
            n->name[i] = isalnum((unsigned char)b[i]) || strchr("_-", b[i]) ? b[i] : '_';
        n->name[len] = 0;
        if (!len) snprintf(n->name, sizeof n->name, "model");
    }
    if (n->optimizer == WEFT_CFG_ADAGRAD && !NL("eps")) n->eps = 1e-10; // PyTorch's defaults
    if (n->optimizer == WEFT_CFG_ADAMW && !NL("weight_decay")) n->weight_decay = 0.01;
    if (n->optimizer != WEFT_CFG_SGD && n->optimizer != WEFT_CFG_RMSPROP) n->momentum = 0;
    if (n->nesterov && n->momentum <= 0)
        return fail(p, NL("nesterov"), "[net] key 'nesterov': needs momentum > 0");
    if (n->schedule == WEFT_CFG_STEP && !NL("step_size"))
        return fail(p, NL("schedule"), "[net] schedule = step needs key 'step_size'");
    if (n->schedule == WEFT_CFG_COSINE && n->min_lr > n->lr)
        return fail(p, NL("min_lr"), "[net] key 'min_lr': %g is larger than lr = %g", n->min_lr, n->lr);
    char sb[128];
    if (n->dataset == WEFT_CFG_FMNIST) {
        n->classes = WEFT_CFG_FMNIST_CLASSES;
        n->vocab = n->context = 0;
        if (!NL("input")) {
            n->input_ndim = 3;
            n->input[0] = 1, n->input[1] = n->input[2] = 28;
        }
        int64_t numel = 1; // sizes are >= 1: stop before the product could overflow
        for (int i = 0; i < n->input_ndim && numel <= 28 * 28; i++) numel *= n->input[i];
        if (numel != 28 * 28)
            return fail(p, NL("input"), "[net] key 'input': %s has %s%lld values, fmnist images have 784 (1,28,28)",
                        shape_str(n->input, n->input_ndim, sb, sizeof sb), numel > 28 * 28 ? "more than " : "",
                        (long long)(numel > 28 * 28 ? 28 * 28 : numel));
    } else {
        n->classes = n->vocab = WEFT_CFG_BYTE_VOCAB;
        if (n->loss == WEFT_CFG_HINGE)
            return fail(p, NL("loss"), "[net] key 'loss': hinge needs a classifier (dataset = fmnist)");
        if (NL("input")) {
            if (n->input_ndim != 1)
                return fail(p, NL("input"), "[net] key 'input': kjv samples are token sequences (context), got %s",
                            shape_str(n->input, n->input_ndim, sb, sizeof sb));
            if (NL("context") && n->context != n->input[0])
                return fail(p, NL("input"), "[net] key 'input': %lld differs from context = %lld",
                            (long long)n->input[0], (long long)n->context);
            n->context = n->input[0];
        } else {
            if (!NL("context")) n->context = 128;
            n->input_ndim = 1;
            n->input[0] = n->context;
        }
    }
    return true;
#undef NL
}

// One layer: check it against its input shape (in, nd) and write its output shape.
static bool resolve_layer(parser *p, int idx, int64_t *shape, int *nd) {
    weft_layer_cfg *l = &p->cfg->layers[idx];
    const secdef *sec = &LAYER_SECS[l->type];
    const int *L = p->layer_lines[idx];
    const weft_net_cfg *net = &p->cfg->net;
#define LL(k) (L[key_index(sec, k)] ? L[key_index(sec, k)] : l->line)
    char sb[128];
    const char *nm = sec->name;
    if (!check_required(p, sec, L, l->line)) return false;
    l->in_ndim = *nd;
    memcpy(l->in_shape, shape, sizeof l->in_shape);
    int64_t last = shape[*nd - 1];
    bool tokens = net->dataset == WEFT_CFG_KJV && idx == 0;
    if (tokens && l->type != WEFT_CFG_EMBEDDING)
        return fail(p, l->line, "[%s] kjv samples are token ids: the first layer must be [embedding]", nm);
    // `given` is what the file said (0 = infer); it must equal what the shapes say.
#define MATCH(given, key, actual)                                                                                \
    do {                                                                                                         \
        if ((given) && (given) != (actual))                                                                      \
            return fail(p, LL(key), "[%s] key '%s' = %lld, but the input %s gives %lld", nm, key,                \
                        (long long)(given), shape_str(shape, *nd, sb, sizeof sb), (long long)(actual));          \
        (given) = (actual);                                                                                      \
    } while (0)
    switch (l->type) {
    case WEFT_CFG_EMBEDDING:
        if (!tokens)
            return fail(p, l->line, "[embedding] takes token ids: it must be the first layer of a kjv model");
        if (!L[key_index(sec, "vocab")]) l->embedding.vocab = net->vocab;
        if (l->embedding.vocab < net->vocab)
            return fail(p, LL("vocab"), "[embedding] key 'vocab': %lld is smaller than the dataset's %lld tokens",
                        (long long)l->embedding.vocab, (long long)net->vocab);
        l->embedding.context = net->context;
        shape[(*nd)++] = l->embedding.dim; // (T) -> (T, dim)
        break;
    case WEFT_CFG_LINEAR:
        MATCH(l->linear.in, "in", last);
        if (l->linear.out < 0) {
            if (!net->vocab) return fail(p, LL("out"), "[linear] key 'out': 'vocab' needs dataset = kjv");
            l->linear.out = net->vocab;
        }
        shape[*nd - 1] = l->linear.out;
        break;
    case WEFT_CFG_CONV2D: {
        if (*nd != 3)
            return fail(p, l->line, "[conv2d] needs a (C,H,W) input, got %s", shape_str(shape, *nd, sb, sizeof sb));
        MATCH(l->conv2d.in, "in", shape[0]);
        int g = l->conv2d.groups;
        if (shape[0] % g || l->conv2d.out % g)
            return fail(p, LL("groups"), "[conv2d] key 'groups' = %d does not divide in = %lld and out = %lld", g,
                        (long long)shape[0], (long long)l->conv2d.out);
        for (int i = 0; i < 2; i++) {
            int64_t span = (int64_t)l->conv2d.dilation[i] * (l->conv2d.kernel[i] - 1) + 1;
            int64_t o = shape[1 + i] + 2 * l->conv2d.pad[i] - span;
            if (o < 0)
                return fail(p, l->line, "[conv2d] the kernel (span %lld) is larger than the padded input %s",
                            (long long)span, shape_str(shape, *nd, sb, sizeof sb));
            shape[1 + i] = o / l->conv2d.stride[i] + 1;
        }
        shape[0] = l->conv2d.out;
        break;
    }
    case WEFT_CFG_MAXPOOL:
    case WEFT_CFG_AVGPOOL:
        if (*nd != 3)
            return fail(p, l->line, "[%s] needs a (C,H,W) input, got %s", nm, shape_str(shape, *nd, sb, sizeof sb));
        for (int i = 0; i < 2; i++) {
            if (!l->pool.stride[i]) l->pool.stride[i] = l->pool.kernel[i];
            if (2 * l->pool.pad[i] > l->pool.kernel[i])
                return fail(p, LL("pad"), "[%s] key 'pad': %d is more than half the kernel %d", nm, l->pool.pad[i],
                            l->pool.kernel[i]);
            int64_t o = shape[1 + i] + 2 * l->pool.pad[i] - l->pool.kernel[i];
            if (o < 0)
                return fail(p, l->line, "[%s] the kernel %d is larger than the padded input %s", nm,
                            l->pool.kernel[i], shape_str(shape, *nd, sb, sizeof sb));
            shape[1 + i] = o / l->pool.stride[i] + 1; // floor mode, as PyTorch's default
        }
        break;
    case WEFT_CFG_FLATTEN: {
        int64_t numel = 1;
        for (int i = 0; i < *nd; i++) numel *= shape[i]; // bounded by MAX_NUMEL below
        shape[0] = numel;
        *nd = 1;
        break;
    }
    case WEFT_CFG_BATCHNORM:
        // normalises dim 1 of (N,C) or (N,C,H,W); on a (N,T,C) sequence that would be T
        if (*nd != 1 && *nd != 3)
            return fail(p, l->line, "[batchnorm] needs a (C) or (C,H,W) input, got %s (use [layernorm] for sequences)",
                        shape_str(shape, *nd, sb, sizeof sb));
        l->batchnorm.channels = shape[0];
        break;
    case WEFT_CFG_LAYERNORM: MATCH(l->layernorm.dim, "dim", last); break;
    case WEFT_CFG_LSTM:
    case WEFT_CFG_GRU:
    case WEFT_CFG_RNN:
        if (*nd != 2)
            return fail(p, l->line, "[%s] needs a (T,C) sequence input, got %s", nm,
                        shape_str(shape, *nd, sb, sizeof sb));
        MATCH(l->rnn.in, "in", last);
        shape[1] = l->rnn.hidden;
        break;
    case WEFT_CFG_ATTENTION:
    case WEFT_CFG_TRANSFORMER:
        if (*nd != 2)
            return fail(p, l->line, "[%s] needs a (T,C) sequence input, got %s", nm,
                        shape_str(shape, *nd, sb, sizeof sb));
        MATCH(l->attn.dim, "dim", last);
        if (last % l->attn.heads)
            return fail(p, LL("heads"), "[%s] key 'heads': %lld heads do not divide dim = %lld", nm,
                        (long long)l->attn.heads, (long long)last);
        break;
    default: break; // activations, dropout: shape unchanged
    }
#undef MATCH
#undef LL
    int64_t numel = 1;
    for (int i = 0; i < *nd; i++) { // sizes are >= 1; divide first so the product cannot overflow
        if (shape[i] > MAX_NUMEL / numel) return fail(p, l->line, "[%s] output is too large", nm);
        numel *= shape[i];
    }
    l->out_ndim = *nd;
    memcpy(l->out_shape, shape, sizeof l->out_shape);
    return true;
}

// A value as weft_model_cfg_write writes it is in its key's range: what
// parses also parses again once written. Values the file gave were checked
// when read; this catches the ones resolve inferred (a layer's `in` or `dim`
// from the shapes, kjv's context from `input`). line: where to point.
static bool check_writable(parser *p, int line, const char *sec, const keydef *k, const void *base) {
    const char *src = (const char *)base + k->off;
    double v[4];
    int n = 1;
    switch (k->kind) {
    case K_INT:
    case K_OUT: {
        int64_t x;
        memcpy(&x, src, sizeof x);
        v[0] = (double)x;
        break;
    }
    case K_I32:
    case K_PAIR: {
        int x[2];
        memcpy(x, src, k->kind == K_PAIR ? sizeof x : sizeof x[0]);
        n = k->kind == K_PAIR ? 2 : 1;
        for (int i = 0; i < n; i++) v[i] = x[i];
        break;
    }
    case K_FLOAT:
    case K_FLOAT2:
        n = k->kind == K_FLOAT2 ? 2 : 1;
        memcpy(v, src, sizeof(double) * (size_t)n);
        break;
    case K_SHAPE: {
        const weft_net_cfg *net = base;
        n = net->input_ndim;
        for (int i = 0; i < n; i++) v[i] = (double)net->input[i];
        break;
    }
    default: return true; // strings, enums, booleans: read only from the file
    }
    char rb[96];
    bool integer = k->kind != K_FLOAT && k->kind != K_FLOAT2;
    for (int i = 0; i < n; i++)
        if (!in_range(k, v[i]))
            return fail(p, line, "[%s] key '%s' = %.17g (inferred from the shapes) is out of range (expected %s)", sec,
                        k->name, v[i], range_str(k, rb, sizeof rb, integer));
    return true;
}

static bool check_all_writable(parser *p) {
    const weft_model_cfg *c = p->cfg;
    for (int i = 0; i < N_NET_KEYS; i++) {
        const keydef *k = &NET_KEYS[i];
        if (net_key_inapplicable(&c->net, k->name)) continue; // the writer leaves these out
        if (!strcmp(k->name, "input") && c->net.dataset == WEFT_CFG_KJV) continue;
        int line = p->net_lines[i] ? p->net_lines[i] : p->net_lines[key_index(&NET_SEC, "input")];
        if (!check_writable(p, line ? line : p->net_line, "net", k, &c->net)) return false;
    }
    for (int l = 0; l < c->n_layers; l++) {
        const secdef *s = &LAYER_SECS[c->layers[l].type];
        for (int i = 0; i < s->nkeys; i++)
            if (!check_writable(p, c->layers[l].line, s->name, &s->keys[i], &c->layers[l])) return false;
    }
    return true;
}

static bool resolve(parser *p) {
    if (!resolve_net(p)) return false;
    const weft_net_cfg *net = &p->cfg->net;
    int64_t shape[WEFT_MAX_DIMS] = {0};
    int nd = net->input_ndim;
    memcpy(shape, net->input, sizeof shape);
    for (int i = 0; i < p->cfg->n_layers; i++) {
        if (nd >= WEFT_MAX_DIMS) return fail(p, p->cfg->layers[i].line, "too many dimensions");
        if (!resolve_layer(p, i, shape, &nd)) return false;
    }
    // Pipeline placement by hand: every layer or none, non-decreasing from stage 0.
    const weft_layer_cfg *ls = p->cfg->layers;
    for (int i = 0; i < p->cfg->n_layers; i++) {
        if ((ls[i].stage < 0) != (ls[0].stage < 0))
            return fail(p, ls[i].line, "[%s] `stage` is given for some layers but not for this one (give it for every "
                        "layer, or for none)", weft_cfg_layer_name(ls[i].type));
        if (ls[i].stage >= 0 && (i ? ls[i].stage < ls[i - 1].stage || ls[i].stage > ls[i - 1].stage + 1 : ls[i].stage != 0))
            return fail(p, ls[i].line, "[%s] stage = %d: stages start at 0 and go up by at most 1 from layer to layer",
                        weft_cfg_layer_name(ls[i].type), ls[i].stage);
    }
    const weft_layer_cfg *last = &p->cfg->layers[p->cfg->n_layers - 1];
    char sb[128], eb[64];
    int64_t want[2] = {net->context, net->classes};
    if (net->dataset == WEFT_CFG_FMNIST ? (nd != 1 || shape[0] != net->classes)
                                        : (nd != 2 || shape[0] != net->context || shape[1] != net->classes))
        return fail(p, last->line, "the last layer's output %s does not match %s, which needs %s",
                    shape_str(shape, nd, sb, sizeof sb), weft_cfg_dataset_name(net->dataset),
                    net->dataset == WEFT_CFG_FMNIST ? shape_str(want + 1, 1, eb, sizeof eb)
                                                    : shape_str(want, 2, eb, sizeof eb));
    return check_all_writable(p);
}

// ---------------------------------------------------------------- public

weft_model_cfg *weft_model_cfg_parse(const char *text, size_t len, const char *name) {
    if (!name) name = "<string>";
    if (!text && len) return weft_error_null(WEFT_ERR_ARG, "weft_model_cfg_parse: text is NULL");
    weft_model_cfg *cfg = calloc(1, sizeof *cfg);
    if (!cfg) return weft_error_null(WEFT_ERR_OOM, "%s: out of memory", name);
    snprintf(cfg->path, sizeof cfg->path, "%s", name);
    net_defaults(&cfg->net);
    parser p = {.path = cfg->path, .cfg = cfg};
    bool ok = parse_lines(&p, text ? text : "", len) && resolve(&p);
    free(p.layer_lines);
    if (!ok) {
        weft_model_cfg_free(cfg);
        return weft_error_null(WEFT_ERR_FORMAT, "%s", p.err);
    }
    return cfg;
}

weft_model_cfg *weft_model_cfg_load(const char *path) {
    if (!path) return weft_error_null(WEFT_ERR_ARG, "weft_model_cfg_load: path is NULL");
    FILE *f = fopen(path, "rb");
    if (!f) return weft_error_null(WEFT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *buf = malloc(MAX_FILE + 1);
    if (!buf) {
        fclose(f);
        return weft_error_null(WEFT_ERR_OOM, "%s: out of memory", path);
    }
    size_t n = fread(buf, 1, MAX_FILE + 1, f);
    bool err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return weft_error_null(WEFT_ERR_IO, "%s: read error", path);
    }
    if (n > MAX_FILE) {
        free(buf);
        return weft_error_null(WEFT_ERR_FORMAT, "%s: larger than %u MiB, not a model file", path, MAX_FILE >> 20);
    }
    weft_model_cfg *cfg = weft_model_cfg_parse(buf, n, path);
    free(buf);
    return cfg;
}

void weft_model_cfg_free(weft_model_cfg *cfg) {
    if (!cfg) return;
    free(cfg->layers);
    free(cfg);
}

weft_status weft_model_cfg_set(weft_model_cfg *cfg, const char *key, const char *value) {
    static const char *const OK_KEYS[] = {"name",       "batch",      "epochs",         "steps", "seed",
                                          "lr",         "clip",       "warmup",         "shuffle",
                                          "eval_every", "ckpt_every", "log_every",      "tp",
                                          "pp",         "microbatches", "pp_schedule",  "virtual_stages",
                                          "zero",       "recompute",  NULL};
    if (!cfg || !key || !value) return weft_error(WEFT_ERR_ARG, "weft_model_cfg_set: NULL argument");
    char vb[48];
    int ok = 0;
    for (int i = 0; OK_KEYS[i]; i++) ok |= !strcmp(OK_KEYS[i], key);
    if (!ok) {
        char acc[300];
        size_t k = 0;
        for (int i = 0; OK_KEYS[i] && k < sizeof acc; i++)
            k += (size_t)snprintf(acc + k, sizeof acc - k, "%s%s", i ? ", " : "", OK_KEYS[i]);
        return weft_error(WEFT_ERR_ARG, "override '%s': not a key that can be overridden (accepted: %s)",
                          shown(key, vb), acc);
    }
    size_t n = strlen(value);
    char *v = malloc(n + 1);
    if (!v) return weft_error(WEFT_ERR_OOM, "override '%s': out of memory", key);
    memcpy(v, value, n + 1);
    char label[80];
    snprintf(label, sizeof label, "override %s", key);
    parser p = {.path = label, .cfg = cfg};
    weft_net_cfg tmp = cfg->net;
    char *t = trim(v);
    bool good = *t ? set_value(&p, 0, "net", &NET_KEYS[key_index(&NET_SEC, key)], t, &tmp)
                   : fail(&p, 0, "[net] key '%s' has no value", key);
    free(v);
    if (!good) return weft_error(WEFT_ERR_ARG, "%s", p.err);
    cfg->net = tmp;
    return WEFT_OK;
}

// ---------------------------------------------------------------- writer

// The shortest of %.15g/%.16g/%.17g that reads back as exactly v ("0.1", not "0.10000000000000001").
static void write_double(FILE *f, double v) {
    char b[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(b, sizeof b, "%.*g", prec, v);
        if (strtod(b, NULL) == v) break;
    }
    fputs(b, f);
}

static void write_value(FILE *f, const keydef *k, const void *base) {
    const char *src = (const char *)base + k->off;
    switch (k->kind) {
    case K_INT:
    case K_OUT: {
        int64_t v;
        memcpy(&v, src, sizeof v);
        fprintf(f, "%lld", (long long)v);
        break;
    }
    case K_I32: {
        int v;
        memcpy(&v, src, sizeof v);
        fprintf(f, "%d", v);
        break;
    }
    case K_U64: {
        uint64_t v;
        memcpy(&v, src, sizeof v);
        fprintf(f, "%llu", (unsigned long long)v);
        break;
    }
    case K_PAIR: {
        int v[2];
        memcpy(v, src, sizeof v);
        fprintf(f, "%d,%d", v[0], v[1]);
        break;
    }
    case K_FLOAT: {
        double v;
        memcpy(&v, src, sizeof v);
        write_double(f, v);
        break;
    }
    case K_FLOAT2: {
        double v[2];
        memcpy(v, src, sizeof v);
        write_double(f, v[0]);
        fputc(',', f);
        write_double(f, v[1]);
        break;
    }
    case K_BOOL: {
        bool v;
        memcpy(&v, src, sizeof v);
        fputs(v ? "true" : "false", f);
        break;
    }
    case K_ENUM: {
        int v = 0;
        if (k->sz == sizeof(bool)) {
            bool b;
            memcpy(&b, src, sizeof b);
            v = b;
        } else
            memcpy(&v, src, sizeof v);
        int n = 0;
        while (k->names[n]) n++;
        fputs(enum_name(k->names, n, v), f); // "?" for a value set by hand out of range
        break;
    }
    case K_SHAPE: {
        const weft_net_cfg *n = base;
        for (int i = 0; i < n->input_ndim; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)n->input[i]);
        break;
    }
    case K_STR: fputs(src, f); break;
    }
}

weft_status weft_model_cfg_write(const weft_model_cfg *cfg, FILE *f) {
    if (!cfg || !f) return weft_error(WEFT_ERR_ARG, "weft_model_cfg_write: NULL argument");
    char path[sizeof cfg->path]; // a comment line: no control characters from the name
    size_t n = 0;
    for (; cfg->path[n] && n + 1 < sizeof path; n++) path[n] = isprint((unsigned char)cfg->path[n]) ? cfg->path[n] : '?';
    path[n] = 0;
    fprintf(f, "# %s, written by weft %s with every default spelled out\n[net]\n", path, weft_version());
    for (int i = 0; i < N_NET_KEYS; i++) {
        const keydef *k = &NET_KEYS[i];
        if (net_key_inapplicable(&cfg->net, k->name)) continue;
        if (!strcmp(k->name, "input") && cfg->net.dataset == WEFT_CFG_KJV) continue; // = context
        fprintf(f, "%s = ", k->name);
        write_value(f, k, &cfg->net);
        fputc('\n', f);
    }
    for (int i = 0; i < cfg->n_layers; i++) {
        const weft_layer_cfg *l = &cfg->layers[i];
        if ((unsigned)l->type >= WEFT_CFG_NUM_LAYER_TYPES) return weft_error(WEFT_ERR_ARG, "bad layer type");
        const secdef *s = &LAYER_SECS[l->type];
        fprintf(f, "\n[%s]\n", s->name);
        for (int j = 0; j < s->nkeys; j++) {
            fprintf(f, "%s = ", s->keys[j].name);
            write_value(f, &s->keys[j], l);
            fputc('\n', f);
        }
        if (l->stage >= 0) fprintf(f, "stage = %d\n", l->stage);
    }
    return ferror(f) ? weft_error(WEFT_ERR_IO, "weft_model_cfg_write: write error") : WEFT_OK;
}
