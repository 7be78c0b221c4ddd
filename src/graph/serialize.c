// Graph files: a graph saved as a safetensors file, so standard tools read
// its weights. The tensors are the CONSTANT ("const/<node>") and VARIABLE
// ("var/<node>") values; the __metadata__ holds
//   "format":  "weft.graph"
//   "version": "1"
//   "graph":   {"nodes": [{"name", "kind", "op", "in", "i", "f", "out", "ctrl", "var"}, ...]}
//   "rng_runs": runs so far (optional; random ops derive their seed from it)
// (the node list as JSON, in node order; see docs/graph.md "Files").
//
// Loading trusts nothing: every field is type-checked, inputs must refer to
// earlier nodes, ops are looked up by name and rebuilt through the builder, so
// each op's own infer recomputes the static shapes and they must agree with the
// stored ones (a hand-edited file cannot lie about shapes).
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <weft/io.h>

#include "graph_impl.h"

#define GRAPH_FORMAT "weft.graph"
#define GRAPH_VERSION 1
#define JSON_INT_MAX 9007199254740992.0 // 2^53: larger integers are stored as strings

// ---------------------------------------------------------------- save

// An int64 attr: a JSON number when a double holds it exactly, else a string.
static cJSON *json_i64(int64_t v) {
    if ((double)v <= JSON_INT_MAX && (double)v >= -JSON_INT_MAX) return cJSON_CreateNumber((double)v);
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    return cJSON_CreateString(buf);
}

// A double attr: a number with 17 significant digits (exact on reading back;
// cJSON's own printer stops at 15 digits when they are merely close), or a
// string for what JSON cannot spell (inf, nan, -0).
static cJSON *json_f64(double v) {
    if (isfinite(v) && !(v == 0 && signbit(v))) {
        char buf[40];
        snprintf(buf, sizeof buf, "%.17g", v);
        return cJSON_CreateRaw(buf);
    }
    return cJSON_CreateString(isnan(v) ? "nan" : v == 0 ? "-0" : v > 0 ? "inf" : "-inf");
}

static bool f64_nonzero(double v) { return v != 0 || signbit(v); }

static cJSON *node_json(const weft_graph *g, int i) {
    const weft_gnode *n = &g->nodes[i];
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    bool ok = cJSON_AddStringToObject(o, "name", n->name) &&
              cJSON_AddStringToObject(o, "kind", weft_graph_kind_name(n->kind));
    if (ok && n->kind == WEFT_NODE_OP) {
        ok = cJSON_AddStringToObject(o, "op", n->op->name) != NULL;
        // attrs: trailing zeros dropped (most ops use few)
        int ni = 16, nf = 4;
        while (ni > 0 && n->attrs.i[ni - 1] == 0)
            ni--;
        while (nf > 0 && !f64_nonzero(n->attrs.f[nf - 1]))
            nf--;
        if (ok && ni) {
            cJSON *a = cJSON_AddArrayToObject(o, "i");
            for (int k = 0; a && k < ni; k++)
                ok = ok && cJSON_AddItemToArray(a, json_i64(n->attrs.i[k]));
            ok = ok && a;
        }
        if (ok && nf) {
            cJSON *a = cJSON_AddArrayToObject(o, "f");
            for (int k = 0; a && k < nf; k++)
                ok = ok && cJSON_AddItemToArray(a, json_f64(n->attrs.f[k]));
            ok = ok && a;
        }
    }
    if (ok && n->n_in) {
        cJSON *a = cJSON_AddArrayToObject(o, "in");
        for (int k = 0; a && k < n->n_in; k++)
            ok = ok && cJSON_AddItemToArray(a, cJSON_CreateNumber(n->in[k]));
        ok = ok && a;
    }
    cJSON *outs = ok ? cJSON_AddArrayToObject(o, "out") : NULL;
    ok = ok && outs;
    for (int j = 0; ok && j < n->n_out; j++) {
        const weft_gvalue *v = &g->values[n->out0 + j];
        cJSON *vo = cJSON_CreateObject(), *shape = vo ? cJSON_AddArrayToObject(vo, "shape") : NULL;
        ok = vo && cJSON_AddItemToArray(outs, vo) && shape &&
             cJSON_AddStringToObject(vo, "dtype", weft_dtype_name((weft_dtype)v->dtype));
        for (int d = 0; ok && d < v->ndim; d++)
            ok = cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)v->sizes[d]));
    }
    if (ok && n->n_ctrl) {
        cJSON *a = cJSON_AddArrayToObject(o, "ctrl");
        for (int k = 0; a && k < n->n_ctrl; k++)
            ok = ok && cJSON_AddItemToArray(a, cJSON_CreateNumber(n->ctrl[k]));
        ok = ok && a;
    }
    if (ok && (n->kind == WEFT_NODE_ASSIGN || n->kind == WEFT_NODE_ASSIGN_ADD))
        ok = cJSON_AddNumberToObject(o, "var", n->var) != NULL;
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static bool holds_tensor(weft_node_kind k) { return k == WEFT_NODE_CONSTANT || k == WEFT_NODE_VARIABLE; }

// "const/<name>" or "var/<name>" (malloc'd).
static char *tensor_key(const weft_gnode *n) {
    const char *pre = n->kind == WEFT_NODE_CONSTANT ? "const/" : "var/";
    size_t len = strlen(pre) + strlen(n->name) + 1;
    char *s = malloc(len);
    if (s) snprintf(s, len, "%s%s", pre, n->name);
    return s;
}

weft_status weft_graph_save(const weft_graph *g, const char *path) {
    if (!g || !path) return weft_error(WEFT_ERR_ARG, "graph_save: NULL %s", g ? "path" : "graph");
    if (g->tracing)
        return weft_error(WEFT_ERR_STATE, "graph_save: %s: the graph is being traced (call trace_end first)", path);
    // Fused nodes are made by weft_graph_optimize and are not stored: save the graph before optimising.
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].kind == WEFT_NODE_FUSED)
            return weft_error(WEFT_ERR_UNSUPPORTED,
                              "graph_save: %s: node '%s' is a fused node (fusion output is not stored; save the graph "
                              "before optimising)",
                              path, g->nodes[i].name);
    weft_status st = WEFT_OK;
    cJSON *root = cJSON_CreateObject(), *nodes = root ? cJSON_AddArrayToObject(root, "nodes") : NULL;
    int n_t = 0;
    for (int i = 0; i < g->n_nodes; i++)
        n_t += holds_tensor(g->nodes[i].kind);
    char **names = calloc((size_t)n_t + 1, sizeof *names);
    weft_tensor **ts = calloc((size_t)n_t + 1, sizeof *ts);
    char *json = NULL;
    if (!nodes || !names || !ts) {
        st = weft_error(WEFT_ERR_OOM, "graph_save: %s: out of memory", path);
        goto out;
    }
    int k = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const weft_gnode *n = &g->nodes[i];
        if (n->kind == WEFT_NODE_COND || n->kind == WEFT_NODE_WHILE) {
            st = weft_error(WEFT_ERR_UNSUPPORTED, "graph_save: %s: node '%s' (%s): control-flow nodes cannot be saved yet",
                            path, n->name, weft_graph_kind_name(n->kind));
            goto out;
        }
        if (n->kind == WEFT_NODE_ENQUEUE || n->kind == WEFT_NODE_DEQUEUE) { // a queue is live process state
            st = weft_error(WEFT_ERR_UNSUPPORTED, "graph_save: %s: node '%s' (%s): queue nodes cannot be saved", path,
                            n->name, weft_graph_kind_name(n->kind));
            goto out;
        }
        cJSON *o = node_json(g, i);
        if (!o || !cJSON_AddItemToArray(nodes, o)) {
            cJSON_Delete(o);
            st = weft_error(WEFT_ERR_OOM, "graph_save: %s: out of memory at node '%s'", path, n->name);
            goto out;
        }
        if (holds_tensor(n->kind)) {
            if (!n->tensor) {
                st = weft_error(WEFT_ERR_STATE, "graph_save: %s: node '%s' (%s) holds no tensor", path, n->name,
                                weft_graph_kind_name(n->kind));
                goto out;
            }
            ts[k] = n->tensor;
            if (!(names[k++] = tensor_key(n))) {
                st = weft_error(WEFT_ERR_OOM, "graph_save: %s: out of memory", path);
                goto out;
            }
        }
    }
    json = cJSON_PrintUnformatted(root);
    if (!json) {
        st = weft_error(WEFT_ERR_OOM, "graph_save: %s: out of memory printing the node list", path);
        goto out;
    }
    char version[16];
    snprintf(version, sizeof version, "%d", GRAPH_VERSION);
    // rng_runs: runs so far, so dropout in a loaded graph continues its stream (docs/graph.md, "Stateful ops").
    char runs[32];
    snprintf(runs, sizeof runs, "%llu", (unsigned long long)g->rng_runs);
    const char *mk[] = {"format", "version", "graph", "rng_runs"}, *mv[] = {GRAPH_FORMAT, version, json, runs};
    // the safetensors writer goes through a temporary file, fsync and rename
    if (weft_safetensors_save(path, n_t, (const char *const *)names, ts, 4, mk, mv) != WEFT_OK) {
        char msg[768];
        snprintf(msg, sizeof msg, "%s", weft_last_error());
        st = weft_error(weft_last_status(), "graph_save: %s", msg);
    }
out:
    if (names)
        for (int i = 0; i < n_t; i++)
            free(names[i]);
    free(names);
    free(ts);
    cJSON_free(json);
    cJSON_Delete(root);
    return st;
}

// ---------------------------------------------------------------- load

typedef struct loader {
    const char *path;
    const weft_safetensors *st;
    weft_graph *g;
    int node;         // index in the file's node list (-1: none yet)
    const char *name; // of the node being read (may be NULL)
    const char *op;   // its op or kind name (may be NULL)
    bool is_op;       // op names the op of an OP node
} loader;

// "graph_load: PATH: node 'NAME' (op OP): message"
static weft_status lfail(const loader *L, weft_status s, const char *fmt, ...) WEFT_PRINTF(3, 4);
static weft_status lfail(const loader *L, weft_status s, const char *fmt, ...) {
    char msg[640], where[320] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (L->node >= 0) {
        if (L->name && L->op)
            snprintf(where, sizeof where, "node '%s' (%s%s): ", L->name, L->is_op ? "op " : "", L->op);
        else if (L->name)
            snprintf(where, sizeof where, "node '%s': ", L->name);
        else
            snprintf(where, sizeof where, "node #%d: ", L->node);
    }
    return weft_error(s, "graph_load: %s: %s%s", L->path, where, msg);
}

// A builder error without its own "graph_xxx: node '...' (op ...): " prefix
// (the loader's prefix names the node already).
static const char *inner_msg(const char *m) {
    if (!strncmp(m, "graph_", 6)) {
        const char *c = strstr(m, ": ");
        if (c) m = c + 2;
    }
    if (!strncmp(m, "node '", 6)) {
        const char *c = strstr(m, "): ");
        if (c) m = c + 3;
    }
    return m;
}

static weft_status lfail_inner(const loader *L) {
    char msg[640];
    snprintf(msg, sizeof msg, "%s", inner_msg(weft_last_error()));
    weft_status s = weft_last_status();
    return lfail(L, s != WEFT_OK ? s : WEFT_ERR_FORMAT, "%s", msg);
}

// An exact integer in [lo, hi], from a JSON number (or a decimal string when strings are allowed).
static bool json_int(const cJSON *j, bool allow_string, int64_t lo, int64_t hi, int64_t *out) {
    if (cJSON_IsNumber(j)) {
        double v = j->valuedouble;
        if (!(v >= -JSON_INT_MAX && v <= JSON_INT_MAX) || v != floor(v)) return false;
        if (v < (double)lo || v > (double)hi) return false;
        *out = (int64_t)v;
        return true;
    }
    if (allow_string && cJSON_IsString(j) && j->valuestring[0]) {
        char *end;
        errno = 0;
        long long v = strtoll(j->valuestring, &end, 10);
        if (*end || errno || v < lo || v > hi) return false;
        *out = v;
        return true;
    }
    return false;
}

static bool json_double(const cJSON *j, double *out) {
    if (cJSON_IsNumber(j)) {
        *out = j->valuedouble;
        return true;
    }
    if (cJSON_IsString(j) && j->valuestring[0]) {
        char *end;
        *out = strtod(j->valuestring, &end);
        return !*end;
    }
    return false;
}

static bool parse_dtype(const char *s, weft_dtype *dt) {
    for (int d = 0; d < WEFT_NUM_DTYPES; d++)
        if (!strcmp(s, weft_dtype_name((weft_dtype)d))) {
            *dt = (weft_dtype)d;
            return true;
        }
    return false;
}

// A stored output: {"dtype": "f32", "shape": [..]}.
typedef struct out_meta {
    int ndim;
    weft_dtype dt;
    int64_t sizes[WEFT_MAX_DIMS];
} out_meta;

static weft_status parse_outs(const loader *L, const cJSON *o, int *n_out, out_meta *om) {
    const cJSON *outs = cJSON_GetObjectItemCaseSensitive(o, "out");
    if (!cJSON_IsArray(outs)) return lfail(L, WEFT_ERR_FORMAT, "'out' is missing or not an array");
    int n = cJSON_GetArraySize(outs);
    if (n < 1 || n > WEFT_GRAPH_MAX_OUT)
        return lfail(L, WEFT_ERR_FORMAT, "%d outputs (expected 1 to %d)", n, WEFT_GRAPH_MAX_OUT);
    int j = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, outs) {
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(v, "dtype"),
                    *sh = cJSON_GetObjectItemCaseSensitive(v, "shape");
        if (!cJSON_IsString(dt) || !parse_dtype(dt->valuestring, &om[j].dt))
            return lfail(L, WEFT_ERR_FORMAT, "output %d: bad or missing dtype", j);
        if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > WEFT_MAX_DIMS)
            return lfail(L, WEFT_ERR_FORMAT, "output %d: shape is not an array of at most %d sizes", j, WEFT_MAX_DIMS);
        int d = 0;
        const cJSON *s;
        cJSON_ArrayForEach(s, sh) {
            if (!json_int(s, false, 0, INT64_C(1) << 50, &om[j].sizes[d]))
                return lfail(L, WEFT_ERR_FORMAT, "output %d: shape entry %d is not a non-negative integer", j, d);
            d++;
        }
        om[j].ndim = d;
        j++;
    }
    *n_out = n;
    return WEFT_OK;
}

static bool meta_equal(const out_meta *m, int ndim, const int64_t *sizes, weft_dtype dt) {
    return m->dt == dt && weft_shape_equal(m->ndim, m->sizes, ndim, sizes);
}

static const char *fmt_meta(int ndim, const int64_t *sizes, weft_dtype dt, char *buf, size_t n) {
    char s[128];
    snprintf(buf, n, "%s %s", weft_dtype_name(dt), weft_shape_fmt(ndim, sizes, s, sizeof s));
    return buf;
}

// Checks the built node's outputs against the stored ones.
static weft_status check_outs(const loader *L, int32_t id, int n_out, const out_meta *om) {
    const weft_gnode *n = &L->g->nodes[id];
    if (n->n_out != n_out)
        return lfail(L, WEFT_ERR_FORMAT, "the file says %d outputs but the node has %d", n_out, n->n_out);
    for (int j = 0; j < n_out; j++) {
        const weft_gvalue *v = &L->g->values[n->out0 + j];
        if (!meta_equal(&om[j], v->ndim, v->sizes, (weft_dtype)v->dtype)) {
            char a[160], b[160];
            return lfail(L, WEFT_ERR_SHAPE, "stored output %d is %s but %s gives %s", j,
                         fmt_meta(om[j].ndim, om[j].sizes, om[j].dt, a, sizeof a),
                         n->kind == WEFT_NODE_OP ? "the op's infer" : "the node",
                         fmt_meta(v->ndim, v->sizes, (weft_dtype)v->dtype, b, sizeof b));
        }
    }
    return WEFT_OK;
}

// Reads an int array field (absent: 0 entries) into a malloc'd buffer.
static weft_status parse_ids(const loader *L, const cJSON *o, const char *key, int max, int *n, int32_t **ids) {
    *n = 0;
    *ids = NULL;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!a) return WEFT_OK;
    if (!cJSON_IsArray(a)) return lfail(L, WEFT_ERR_FORMAT, "'%s' is not an array", key);
    int cnt = cJSON_GetArraySize(a);
    if (cnt > max) return lfail(L, WEFT_ERR_FORMAT, "'%s' has %d entries (at most %d)", key, cnt, max);
    int32_t *b = malloc(sizeof *b * (size_t)(cnt ? cnt : 1));
    if (!b) return lfail(L, WEFT_ERR_OOM, "out of memory");
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        int64_t v;
        if (!json_int(e, false, -(INT64_C(1) << 40), INT64_C(1) << 40, &v)) {
            free(b);
            return lfail(L, WEFT_ERR_FORMAT, "'%s' entry %d is not an integer", key, k);
        }
        b[k++] = v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : (int32_t)v; // still out of range
    }
    *n = cnt;
    *ids = b;
    return WEFT_OK;
}

// The tensor "const/<name>" / "var/<name>" of a CONSTANT/VARIABLE node, checked against its stored output.
static weft_tensor *node_tensor(const loader *L, weft_node_kind kind, const char *name, const out_meta *om) {
    size_t len = strlen(name) + 8;
    char *key = malloc(len);
    if (!key) return lfail(L, WEFT_ERR_OOM, "out of memory"), NULL;
    snprintf(key, len, "%s%s", kind == WEFT_NODE_CONSTANT ? "const/" : "var/", name);
    weft_tensor *t = NULL;
    for (int i = 0; i < weft_safetensors_count(L->st); i++)
        if (!strcmp(weft_safetensors_name_at(L->st, i), key)) t = weft_safetensors_tensor_at(L->st, i);
    if (!t) {
        lfail(L, WEFT_ERR_FORMAT, "tensor '%s' is missing from the file", key);
    } else if (!meta_equal(om, weft_tensor_ndim(t), weft_tensor_sizes(t), weft_tensor_dtype(t))) {
        char a[160], b[160];
        lfail(L, WEFT_ERR_SHAPE, "tensor '%s' is %s but the node says %s", key,
              fmt_meta(weft_tensor_ndim(t), weft_tensor_sizes(t), weft_tensor_dtype(t), a, sizeof a),
              fmt_meta(om->ndim, om->sizes, om->dt, b, sizeof b));
        t = NULL;
    }
    free(key);
    return t;
}

static weft_node_kind parse_kind(const char *s) {
    for (int k = 0; k < WEFT_NODE_NUM_KINDS; k++)
        if (!strcmp(s, weft_graph_kind_name((weft_node_kind)k))) return (weft_node_kind)k;
    return WEFT_NODE_NUM_KINDS;
}

// Rebuilds node L->node from its JSON object o through the builder.
static weft_status load_node(loader *L, const cJSON *o) {
    weft_graph *g = L->g;
    if (!cJSON_IsObject(o)) return lfail(L, WEFT_ERR_FORMAT, "not a JSON object");
    const cJSON *jn = cJSON_GetObjectItemCaseSensitive(o, "name"), *jk = cJSON_GetObjectItemCaseSensitive(o, "kind");
    if (!cJSON_IsString(jn) || !jn->valuestring[0]) return lfail(L, WEFT_ERR_FORMAT, "missing or empty 'name'");
    L->name = jn->valuestring;
    if (!cJSON_IsString(jk)) return lfail(L, WEFT_ERR_FORMAT, "missing 'kind'");
    weft_node_kind kind = parse_kind(jk->valuestring);
    if (kind == WEFT_NODE_NUM_KINDS) return lfail(L, WEFT_ERR_FORMAT, "unknown kind '%s'", jk->valuestring);
    if (kind == WEFT_NODE_FUSED) return lfail(L, WEFT_ERR_FORMAT, "fused nodes are not stored in graph files");
    if (kind == WEFT_NODE_COND || kind == WEFT_NODE_WHILE) // never saved: their subgraphs are not in the format yet
        return lfail(L, WEFT_ERR_FORMAT, "%s nodes are not stored in graph files", jk->valuestring);
    L->op = weft_graph_kind_name(kind);
    const weft_op_def *op = NULL;
    if (kind == WEFT_NODE_OP) {
        const cJSON *jo = cJSON_GetObjectItemCaseSensitive(o, "op");
        if (!cJSON_IsString(jo)) return lfail(L, WEFT_ERR_FORMAT, "an op node without 'op'");
        L->op = jo->valuestring;
        L->is_op = true;
        if (!(op = weft_op_find(jo->valuestring)))
            return lfail(L, WEFT_ERR_FORMAT, "unknown op '%s' (not in this build's op table)", jo->valuestring);
    }
    if (weft_graph_find_node(g, L->name).id >= 0) return lfail(L, WEFT_ERR_FORMAT, "duplicate node name");
    int n_out = 0;
    out_meta om[WEFT_GRAPH_MAX_OUT];
    weft_status s = parse_outs(L, o, &n_out, om);
    if (s) return s;
    int n_in;
    int32_t *in;
    if ((s = parse_ids(L, o, "in", 1 << 20, &n_in, &in))) return s;
    for (int k = 0; k < n_in; k++)
        if (in[k] < 0 || in[k] >= g->n_values) {
            s = lfail(L, WEFT_ERR_FORMAT,
                      "input %d (value %d) out of range: it must be an output of an earlier node (%d so far)", k, in[k],
                      g->n_values);
            goto done;
        }
    if (kind == WEFT_NODE_ENQUEUE || kind == WEFT_NODE_DEQUEUE) { // never saved: a queue is live process state
        s = lfail(L, WEFT_ERR_FORMAT, "a %s node cannot be loaded (queues are not saved)", L->op);
        goto done;
    }
    int want_in = kind == WEFT_NODE_OP ? -2 : (kind == WEFT_NODE_ASSIGN || kind == WEFT_NODE_ASSIGN_ADD) ? 1 : 0;
    if (want_in >= 0 && n_in != want_in) {
        s = lfail(L, WEFT_ERR_FORMAT, "%d inputs (a %s node has %d)", n_in, L->op, want_in);
        goto done;
    }
    if (kind != WEFT_NODE_OP &&
        (cJSON_GetObjectItemCaseSensitive(o, "i") || cJSON_GetObjectItemCaseSensitive(o, "f"))) {
        s = lfail(L, WEFT_ERR_FORMAT, "attrs on a %s node", L->op);
        goto done;
    }
    int32_t id = -1;
    weft_value v = WEFT_VALUE_NONE;
    switch (kind) {
    case WEFT_NODE_PLACEHOLDER:
        if (n_out != 1) {
            s = lfail(L, WEFT_ERR_FORMAT, "%d outputs (a placeholder has 1)", n_out);
            goto done;
        }
        v = weft_graph_placeholder(g, L->name, om[0].ndim, om[0].sizes, om[0].dt);
        break;
    case WEFT_NODE_CONSTANT:
    case WEFT_NODE_VARIABLE: {
        if (n_out != 1) {
            s = lfail(L, WEFT_ERR_FORMAT, "%d outputs (a %s has 1)", n_out, L->op);
            goto done;
        }
        weft_tensor *t = node_tensor(L, kind, L->name, &om[0]);
        if (!t) {
            s = weft_last_status();
            goto done;
        }
        // a constant aliases the loaded tensor (its storage outlives the file object); a variable gets its own copy
        v = kind == WEFT_NODE_CONSTANT ? weft_graph_constant(g, L->name, t) : weft_graph_variable(g, L->name, t);
        break;
    }
    case WEFT_NODE_ASSIGN:
    case WEFT_NODE_ASSIGN_ADD: {
        int64_t var;
        const cJSON *jv = cJSON_GetObjectItemCaseSensitive(o, "var");
        if (!json_int(jv, false, -1, INT32_MAX, &var) || var < 0 || var >= g->n_nodes ||
            g->nodes[var].kind != WEFT_NODE_VARIABLE) {
            s = lfail(L, WEFT_ERR_FORMAT, "'var' must be the id of an earlier variable node");
            goto done;
        }
        weft_value target = {g->nodes[var].out0}, value = {in[0]};
        v = kind == WEFT_NODE_ASSIGN ? weft_graph_assign(g, L->name, target, value)
                                     : weft_graph_assign_add(g, L->name, target, value);
        break;
    }
    case WEFT_NODE_OP: {
        int64_t ia[16] = {0};
        double fa[4] = {0};
        const cJSON *ji = cJSON_GetObjectItemCaseSensitive(o, "i"), *jf = cJSON_GetObjectItemCaseSensitive(o, "f");
        if ((ji && (!cJSON_IsArray(ji) || cJSON_GetArraySize(ji) > 16)) ||
            (jf && (!cJSON_IsArray(jf) || cJSON_GetArraySize(jf) > 4))) {
            s = lfail(L, WEFT_ERR_FORMAT, "attrs 'i' / 'f' must be arrays of at most 16 / 4 numbers");
            goto done;
        }
        int k = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, ji) {
            if (!json_int(e, true, INT64_MIN, INT64_MAX, &ia[k])) {
                s = lfail(L, WEFT_ERR_FORMAT, "int attr %d is not an integer", k);
                goto done;
            }
            k++;
        }
        k = 0;
        cJSON_ArrayForEach(e, jf) {
            if (!json_double(e, &fa[k])) {
                s = lfail(L, WEFT_ERR_FORMAT, "float attr %d is not a number", k);
                goto done;
            }
            k++;
        }
        weft_value *vin = malloc(sizeof *vin * (size_t)(n_in ? n_in : 1));
        if (!vin) {
            s = lfail(L, WEFT_ERR_OOM, "out of memory");
            goto done;
        }
        for (int q = 0; q < n_in; q++)
            vin[q].id = in[q];
        weft_value outs[WEFT_GRAPH_MAX_OUT];
        // the builder re-runs the op's infer and checks its kernel for the dtype
        weft_status bs = weft_graph_op_named(g, L->name, op->name, n_in, vin, ia, 16, fa, 4, outs);
        free(vin);
        if (bs == WEFT_OK) v = outs[0];
        break;
    }
    default:
        break;
    }
    if (v.id < 0) {
        s = lfail_inner(L);
        goto done;
    }
    id = g->values[v.id].node;
    s = check_outs(L, id, n_out, om);
done:
    free(in);
    return s;
}

weft_graph *weft_graph_load(const char *path) {
    if (!path) return weft_error_null(WEFT_ERR_ARG, "graph_load: NULL path");
    loader L = {.path = path, .node = -1};
    weft_safetensors *st = weft_safetensors_load(path);
    if (!st) {
        char msg[768];
        snprintf(msg, sizeof msg, "%s", weft_last_error());
        weft_status s = weft_last_status();
        // safetensors messages name the file already
        if (strstr(msg, path)) return weft_error_null(s, "graph_load: %s", msg);
        return weft_error_null(s, "graph_load: %s: %s", path, msg);
    }
    L.st = st;
    weft_graph *g = NULL;
    cJSON *root = NULL;
    const char *fmt = weft_safetensors_meta(st, "format"), *ver = weft_safetensors_meta(st, "version");
    const char *text = weft_safetensors_meta(st, "graph");
    if (!fmt || strcmp(fmt, GRAPH_FORMAT)) {
        lfail(&L, WEFT_ERR_FORMAT, "not a weft graph file (metadata 'format' is %s%s%s, expected '%s')", fmt ? "'" : "",
              fmt ? fmt : "missing", fmt ? "'" : "", GRAPH_FORMAT);
        goto fail;
    }
    char *end = NULL;
    long version = ver ? strtol(ver, &end, 10) : -1;
    if (!ver || !*ver || *end || version != GRAPH_VERSION) {
        lfail(&L, WEFT_ERR_FORMAT, "unsupported graph file version '%s' (this build reads version %d)", ver ? ver : "",
              GRAPH_VERSION);
        goto fail;
    }
    if (!text) {
        lfail(&L, WEFT_ERR_FORMAT, "no 'graph' metadata (the node list)");
        goto fail;
    }
    root = cJSON_Parse(text);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        lfail(&L, WEFT_ERR_FORMAT, "the node list is not valid JSON (near character %ld of the 'graph' metadata)",
              at && at >= text ? (long)(at - text) : -1L);
        goto fail;
    }
    const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(root, "nodes");
    if (!cJSON_IsArray(nodes)) {
        lfail(&L, WEFT_ERR_FORMAT, "the node list has no 'nodes' array");
        goto fail;
    }
    if (!(g = weft_graph_new())) goto fail;
    L.g = g;
    const char *runs = weft_safetensors_meta(st, "rng_runs"); // optional: older files have none
    if (runs) {
        char *rend;
        unsigned long long r = strtoull(runs, &rend, 10);
        if (!*runs || *rend) {
            lfail(&L, WEFT_ERR_FORMAT, "metadata 'rng_runs' is not a count ('%s')", runs);
            goto fail;
        }
        g->rng_runs = r;
    }
    const cJSON *o;
    int i = 0, n_tensors = 0;
    cJSON_ArrayForEach(o, nodes) {
        L.node = i, L.name = NULL, L.op = NULL, L.is_op = false;
        if (load_node(&L, o) != WEFT_OK) goto fail;
        n_tensors += holds_tensor(g->nodes[i].kind);
        i++;
    }
    // control deps may point forward (even close a cycle, which run reports), so they come last
    i = 0;
    cJSON_ArrayForEach(o, nodes) {
        L.node = i, L.name = g->nodes[i].name, L.op = weft_graph_node_op(g, (weft_node_id){i});
        L.is_op = g->nodes[i].kind == WEFT_NODE_OP;
        int n_ctrl;
        int32_t *ctrl;
        if (parse_ids(&L, o, "ctrl", 1 << 20, &n_ctrl, &ctrl)) goto fail;
        for (int k = 0; k < n_ctrl; k++) {
            if (ctrl[k] < 0 || ctrl[k] >= g->n_nodes || ctrl[k] == i) {
                lfail(&L, WEFT_ERR_FORMAT, "control dependency %d (node %d) out of range (%d nodes)", k, ctrl[k],
                      g->n_nodes);
                free(ctrl);
                goto fail;
            }
            if (weft_graph_add_control_dep(g, (weft_node_id){i}, (weft_node_id){ctrl[k]}) != WEFT_OK) {
                lfail_inner(&L);
                free(ctrl);
                goto fail;
            }
        }
        free(ctrl);
        i++;
    }
    L.node = -1;
    if (n_tensors != weft_safetensors_count(st)) { // a tensor that no node claims: the file was edited or mixed up
        for (int k = 0; k < weft_safetensors_count(st); k++) {
            const char *nm = weft_safetensors_name_at(st, k);
            const char *slash = strchr(nm, '/');
            weft_node_id n = slash ? weft_graph_find_node(g, slash + 1) : WEFT_NODE_NONE;
            weft_node_kind want = !slash                      ? WEFT_NODE_NUM_KINDS
                                  : !strncmp(nm, "const/", 6) ? WEFT_NODE_CONSTANT
                                  : !strncmp(nm, "var/", 4)   ? WEFT_NODE_VARIABLE
                                                              : WEFT_NODE_NUM_KINDS;
            if (n.id < 0 || g->nodes[n.id].kind != want) {
                lfail(&L, WEFT_ERR_FORMAT, "tensor '%s' belongs to no constant or variable node", nm);
                goto fail;
            }
        }
    }
    cJSON_Delete(root);
    weft_safetensors_free(st);
    return g;
fail:;
    weft_status s = weft_last_status();
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", weft_last_error());
    cJSON_Delete(root);
    weft_graph_free(g);
    weft_safetensors_free(st);
    return weft_error_null(s != WEFT_OK ? s : WEFT_ERR_FORMAT, "%s", msg); // freeing must not change the message
}

weft_value weft_graph_find_output(const weft_graph *g, const char *node_name, int output) {
    return weft_graph_node_output(g, weft_graph_find_node(g, node_name), output);
}
