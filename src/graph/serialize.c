// Graph files: a graph saved as a safetensors file, so standard tools read
// its weights. The tensors are the CONSTANT ("const/<node>") and VARIABLE
// ("var/<node>") values; the __metadata__ holds
//   "format":  "weft.graph"
//   "version": "1", or "2" when the graph has cond/while subgraphs, fused programs
//              or tensors shared between nodes ("sub", "prog", "tensor" fields)
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

#include "fused.h"
#include "graph_impl.h"

#define GRAPH_FORMAT "weft.graph"
#define GRAPH_VERSION 1
#define GRAPH_VERSION_SUB 2 // files with cond/while subgraphs, fused programs or shared tensors
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

// ---- tensors shared between nodes (and between a graph and its subgraphs) ----
// A branch shares state with its parent by holding the same tensor (or a
// detached alias of it: same storage, offset, shape and strides). Such a
// tensor is written once, under the key of the first node that holds it (in
// depth-first node order, which is the order the loader reads); later holders
// name that key in their "tensor" field and load as aliases of one tensor.
typedef struct saver {
    const char *path;
    char **names;
    weft_tensor **ts;
    int n, cap;
    bool v2; // something only a version-2 reader understands was written
} saver;

static bool same_tensor(const weft_tensor *a, const weft_tensor *b) {
    if (a == b) return true;
    if (a->storage != b->storage || a->offset != b->offset || a->dtype != b->dtype || a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->sizes[d] != b->sizes[d] || a->strides[d] != b->strides[d]) return false;
    return true;
}

static cJSON *ids_json(const int32_t *ids, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int k = 0; a && k < n; k++)
        if (!cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[k]))) {
            cJSON_Delete(a);
            return NULL;
        }
    return a;
}

// attrs as "i" / "f" arrays (trailing zeros dropped), as for OP nodes.
static bool attrs_json(cJSON *o, const weft_attrs *at) {
    int ni = 16, nf = 4;
    while (ni > 0 && at->i[ni - 1] == 0)
        ni--;
    while (nf > 0 && !f64_nonzero(at->f[nf - 1]))
        nf--;
    bool ok = true;
    if (ni) {
        cJSON *a = cJSON_AddArrayToObject(o, "i");
        for (int k = 0; a && k < ni; k++)
            ok = ok && cJSON_AddItemToArray(a, json_i64(at->i[k]));
        ok = ok && a;
    }
    if (ok && nf) {
        cJSON *a = cJSON_AddArrayToObject(o, "f");
        for (int k = 0; a && k < nf; k++)
            ok = ok && cJSON_AddItemToArray(a, json_f64(at->f[k]));
        ok = ok && a;
    }
    return ok;
}

// A FUSED node's program: {"matmul_head": bool, "instr": [{"op", "i", "f", "args", "export"}, ...]}
// ("export" absent: an internal value).
static cJSON *prog_json(const weft_fused_prog *p) {
    cJSON *o = cJSON_CreateObject(), *ins = o ? cJSON_AddArrayToObject(o, "instr") : NULL;
    bool ok = ins && cJSON_AddBoolToObject(o, "matmul_head", p->matmul_head);
    for (int j = 0; ok && j < p->n_instr; j++) {
        const weft_fused_instr *x = &p->instr[j];
        cJSON *xo = cJSON_CreateObject();
        ok = xo && cJSON_AddItemToArray(ins, xo) && cJSON_AddStringToObject(xo, "op", x->op->name) &&
             attrs_json(xo, &x->attrs) && cJSON_AddItemToObject(xo, "args", ids_json(x->args, x->n_args)) &&
             (x->export_idx < 0 || cJSON_AddNumberToObject(xo, "export", x->export_idx));
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

#define SUB_MAX_DEPTH 32 // nested cond/while levels (the loader refuses deeper files)

static cJSON *graph_json(saver *S, const weft_graph *g, const char *prefix, int depth);

// "sub": [{"nodes": [...], "in": [placeholder values], "out": [fetched values], "rng_runs": n}, x2]
static weft_status control_json(saver *S, const weft_gnode *n, const char *prefix, int depth, cJSON *o) {
    if (depth >= SUB_MAX_DEPTH)
        return weft_error(WEFT_ERR_UNSUPPORTED, "graph_save: %s: node '%s' (%s): control flow nested deeper than %d",
                          S->path, n->name, weft_graph_kind_name(n->kind), SUB_MAX_DEPTH);
    cJSON *subs = cJSON_AddArrayToObject(o, "sub");
    bool ok = subs != NULL;
    if (ok && n->kind == WEFT_NODE_WHILE && n->max_iter) ok = cJSON_AddItemToObject(o, "max_iter", json_i64(n->max_iter));
    // A gradient loop (weft_graph_gradients of a while_loop): n_in - n_out loop
    // variables, then n_out output gradients; loaded through weft_control_while_grad.
    if (ok && n->kind == WEFT_NODE_WHILE && n->while_grad)
        ok = cJSON_AddItemToObject(o, "while_grad", json_i64(n->n_out));
    for (int b = 0; ok && b < 2; b++) {
        size_t len = strlen(prefix) + strlen(n->name) + 16;
        char *pre = malloc(len);
        if (!pre) break;
        snprintf(pre, len, "%ssub/%s/%d/", prefix, n->name, b);
        cJSON *so = graph_json(S, n->sub[b], pre, depth + 1);
        free(pre);
        if (!so) return weft_last_status();
        char runs[32];
        snprintf(runs, sizeof runs, "%llu", (unsigned long long)n->sub[b]->rng_runs);
        ok = cJSON_AddItemToArray(subs, so) && cJSON_AddItemToObject(so, "in", ids_json(n->sub_in[b], n->n_sub_in)) &&
             cJSON_AddItemToObject(so, "out", ids_json(n->sub_out[b], n->n_sub_out[b])) &&
             cJSON_AddStringToObject(so, "rng_runs", runs);
    }
    return ok ? WEFT_OK : weft_error(WEFT_ERR_OOM, "graph_save: %s: out of memory at node '%s'", S->path, n->name);
}

// Registers n's tensor under prefix + "const/<name>" | "var/<name>", or points
// the node at an earlier holder of the same tensor.
static weft_status tensor_entry(saver *S, const weft_gnode *n, const char *prefix, cJSON *o) {
    if (!n->tensor)
        return weft_error(WEFT_ERR_STATE, "graph_save: %s: node '%s' (%s) holds no tensor", S->path, n->name,
                          weft_graph_kind_name(n->kind));
    for (int k = 0; k < S->n; k++)
        if (same_tensor(S->ts[k], n->tensor)) {
            S->v2 = true;
            return cJSON_AddStringToObject(o, "tensor", S->names[k])
                       ? WEFT_OK
                       : weft_error(WEFT_ERR_OOM, "graph_save: %s: out of memory", S->path);
        }
    char *key = tensor_key(n), *full = NULL;
    if (key) {
        size_t len = strlen(prefix) + strlen(key) + 1;
        if ((full = malloc(len))) snprintf(full, len, "%s%s", prefix, key);
    }
    free(key);
    if (!full) return weft_error(WEFT_ERR_OOM, "graph_save: %s: out of memory", S->path);
    for (int k = 0; k < S->n; k++)
        if (!strcmp(S->names[k], full)) { // only possible with '/' in node names
            weft_error(WEFT_ERR_ARG, "graph_save: %s: node '%s': its tensor key '%s' is taken by another node", S->path,
                       n->name, full);
            free(full);
            return WEFT_ERR_ARG;
        }
    if (S->n == S->cap) {
        int nc = S->cap ? 2 * S->cap : 16;
        char **nn = realloc(S->names, (size_t)nc * sizeof *nn);
        if (nn) S->names = nn;
        weft_tensor **nt = nn ? realloc(S->ts, (size_t)nc * sizeof *nt) : NULL;
        if (nt) S->ts = nt;
        if (!nn || !nt) {
            free(full);
            return weft_error(WEFT_ERR_OOM, "graph_save: %s: out of memory", S->path);
        }
        S->cap = nc;
    }
    S->names[S->n] = full;
    S->ts[S->n++] = n->tensor;
    return WEFT_OK;
}

// {"nodes": [...]} of g (subgraphs recursively; their tensor keys start with prefix).
static cJSON *graph_json(saver *S, const weft_graph *g, const char *prefix, int depth) {
    cJSON *root = cJSON_CreateObject(), *nodes = root ? cJSON_AddArrayToObject(root, "nodes") : NULL;
    if (!nodes) {
        cJSON_Delete(root);
        return weft_error_null(WEFT_ERR_OOM, "graph_save: %s: out of memory", S->path);
    }
    weft_status st = WEFT_OK;
    for (int i = 0; i < g->n_nodes && st == WEFT_OK; i++) {
        const weft_gnode *n = &g->nodes[i];
        if (n->kind == WEFT_NODE_ENQUEUE || n->kind == WEFT_NODE_DEQUEUE) { // a queue is live process state
            st = weft_error(WEFT_ERR_UNSUPPORTED, "graph_save: %s: node '%s' (%s): queue nodes cannot be saved",
                            S->path, n->name, weft_graph_kind_name(n->kind));
            break;
        }
        cJSON *o = node_json(g, i);
        if (!o || !cJSON_AddItemToArray(nodes, o)) {
            cJSON_Delete(o);
            st = weft_error(WEFT_ERR_OOM, "graph_save: %s: out of memory at node '%s'", S->path, n->name);
            break;
        }
        if (holds_tensor(n->kind)) {
            st = tensor_entry(S, n, prefix, o);
        } else if (n->kind == WEFT_NODE_COND || n->kind == WEFT_NODE_WHILE) {
            S->v2 = true;
            st = control_json(S, n, prefix, depth, o);
        } else if (n->kind == WEFT_NODE_FUSED) {
            S->v2 = true;
            cJSON *p = n->prog ? prog_json(n->prog) : NULL;
            if (!p || !cJSON_AddItemToObject(o, "prog", p)) {
                cJSON_Delete(p);
                st = n->prog ? weft_error(WEFT_ERR_OOM, "graph_save: %s: out of memory at node '%s'", S->path, n->name)
                             : weft_error(WEFT_ERR_STATE, "graph_save: %s: node '%s' (fused) has no program", S->path,
                                          n->name);
            }
        }
    }
    if (st != WEFT_OK) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

weft_status weft_graph_save(const weft_graph *g, const char *path) {
    if (!g || !path) return weft_error(WEFT_ERR_ARG, "graph_save: NULL %s", g ? "path" : "graph");
    if (g->tracing)
        return weft_error(WEFT_ERR_STATE, "graph_save: %s: the graph is being traced (call trace_end first)", path);
    weft_status st = WEFT_OK;
    saver S = {.path = path};
    char *json = NULL;
    cJSON *root = graph_json(&S, g, "", 0);
    if (!root) {
        st = weft_last_status();
        goto out;
    }
    json = cJSON_PrintUnformatted(root);
    if (!json) {
        st = weft_error(WEFT_ERR_OOM, "graph_save: %s: out of memory printing the node list", path);
        goto out;
    }
    // Version 2 only when the file needs it (subgraphs, fused programs, shared
    // tensors), so plain graphs stay readable by version-1 builds.
    char version[16];
    snprintf(version, sizeof version, "%d", S.v2 ? GRAPH_VERSION_SUB : GRAPH_VERSION);
    // rng_runs: runs so far, so dropout in a loaded graph continues its stream (docs/graph.md, "Stateful ops").
    char runs[32];
    snprintf(runs, sizeof runs, "%llu", (unsigned long long)g->rng_runs);
    const char *mk[] = {"format", "version", "graph", "rng_runs"}, *mv[] = {GRAPH_FORMAT, version, json, runs};
    // the safetensors writer goes through a temporary file, fsync and rename
    if (weft_safetensors_save(path, S.n, (const char *const *)S.names, S.ts, 4, mk, mv) != WEFT_OK) {
        char msg[768];
        snprintf(msg, sizeof msg, "%s", weft_last_error());
        st = weft_error(weft_last_status(), "graph_save: %s", msg);
    }
out:
    for (int i = 0; i < S.n; i++)
        free(S.names[i]);
    free(S.names);
    free(S.ts);
    cJSON_free(json);
    cJSON_Delete(root);
    return st;
}

// ---------------------------------------------------------------- load

// Tensors claimed while loading (the whole file: parent and subgraphs): key ->
// the tensor the loaded node holds, so later nodes naming the key share it.
typedef struct load_shared {
    char **keys;
    weft_tensor **ts;
    int n, cap;
} load_shared;

typedef struct loader {
    const char *path;
    const weft_safetensors *st;
    weft_graph *g;
    int node;         // index in the file's node list (-1: none yet)
    const char *name; // of the node being read (may be NULL)
    const char *op;   // its op or kind name (may be NULL)
    bool is_op;       // op names the op of an OP node
    // subgraphs (cond / while): where the graph sits, for keys and messages
    const char *prefix; // tensor key prefix ("" at the top, "sub/<node>/<b>/" below)
    const char *ctx;    // "node 'c' (cond) then graph: " (nested), "" at the top
    int depth;
    load_shared *sh;
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
    return weft_error(s, "graph_load: %s: %s%s%s", L->path, L->ctx ? L->ctx : "", where, msg);
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

// ---- tensors of CONSTANT / VARIABLE nodes (shared ones included) ----
static int shared_find(const load_shared *sh, const char *key) {
    for (int k = 0; k < sh->n; k++)
        if (!strcmp(sh->keys[k], key)) return k;
    return -1;
}

static weft_status shared_add(const loader *L, const char *key, weft_tensor *t) {
    load_shared *sh = L->sh;
    if (sh->n == sh->cap) {
        int nc = sh->cap ? 2 * sh->cap : 16;
        char **nk = realloc(sh->keys, (size_t)nc * sizeof *nk);
        if (nk) sh->keys = nk;
        weft_tensor **nt = nk ? realloc(sh->ts, (size_t)nc * sizeof *nt) : NULL;
        if (nt) sh->ts = nt;
        if (!nk || !nt) return lfail(L, WEFT_ERR_OOM, "out of memory");
        sh->cap = nc;
    }
    if (!(sh->keys[sh->n] = strdup(key))) return lfail(L, WEFT_ERR_OOM, "out of memory");
    sh->ts[sh->n++] = t;
    return WEFT_OK;
}

static void shared_free(load_shared *sh) {
    for (int k = 0; k < sh->n; k++)
        free(sh->keys[k]);
    free(sh->keys);
    free(sh->ts);
}

static weft_status check_tensor_meta(const loader *L, const char *key, const weft_tensor *t, const out_meta *om) {
    if (meta_equal(om, weft_tensor_ndim(t), weft_tensor_sizes(t), weft_tensor_dtype(t))) return WEFT_OK;
    char a[160], b[160];
    return lfail(L, WEFT_ERR_SHAPE, "tensor '%s' is %s but the node says %s", key,
                 fmt_meta(weft_tensor_ndim(t), weft_tensor_sizes(t), weft_tensor_dtype(t), a, sizeof a),
                 fmt_meta(om->ndim, om->sizes, om->dt, b, sizeof b));
}

// The file's tensor `key`, checked against the node's stored output.
static weft_tensor *node_tensor(const loader *L, const char *key, const out_meta *om) {
    if (shared_find(L->sh, key) >= 0)
        return lfail(L, WEFT_ERR_FORMAT, "tensor '%s' is claimed by an earlier node (use 'tensor' to share it)", key),
               NULL;
    weft_tensor *t = NULL;
    for (int i = 0; i < weft_safetensors_count(L->st); i++)
        if (!strcmp(weft_safetensors_name_at(L->st, i), key)) t = weft_safetensors_tensor_at(L->st, i);
    if (!t) return lfail(L, WEFT_ERR_FORMAT, "tensor '%s' is missing from the file", key), NULL;
    return check_tensor_meta(L, key, t, om) == WEFT_OK ? t : NULL;
}

// A CONSTANT / VARIABLE node holding an alias of t (same storage: shared state).
static weft_value alias_node(weft_graph *g, weft_node_kind kind, const char *name, weft_tensor *t) {
    weft_tensor *d = weft_tensor_detach(t);
    if (!d) return WEFT_VALUE_NONE;
    int32_t id = weft_graph_add_node(g, "graph_load", kind, name, weft_graph_kind_name(kind), 0, NULL, 1);
    if (id < 0) {
        weft_tensor_free(d);
        return WEFT_VALUE_NONE;
    }
    g->nodes[id].tensor = d;
    weft_gvalue *v = &g->values[g->nodes[id].out0];
    v->ndim = d->ndim;
    v->dtype = d->dtype;
    memcpy(v->sizes, d->sizes, sizeof v->sizes);
    return (weft_value){g->nodes[id].out0};
}

// A CONSTANT / VARIABLE node: its own tensor prefix + "const/<name>" | "var/<name>",
// or, with "tensor": KEY, an alias of the tensor an earlier node loaded from KEY.
static weft_status load_tensor_node(const loader *L, const cJSON *o, weft_node_kind kind, const out_meta *om,
                                    weft_value *v) {
    const cJSON *jt = cJSON_GetObjectItemCaseSensitive(o, "tensor");
    if (jt) {
        if (!cJSON_IsString(jt)) return lfail(L, WEFT_ERR_FORMAT, "'tensor' is not a string");
        int k = shared_find(L->sh, jt->valuestring);
        if (k < 0)
            return lfail(L, WEFT_ERR_FORMAT, "'tensor' names '%s', which no earlier node loaded", jt->valuestring);
        weft_status s = check_tensor_meta(L, jt->valuestring, L->sh->ts[k], om);
        if (s) return s;
        *v = alias_node(L->g, kind, L->name, L->sh->ts[k]);
        return v->id >= 0 ? WEFT_OK : lfail_inner(L);
    }
    size_t len = strlen(L->prefix) + strlen(L->name) + 8;
    char *key = malloc(len);
    if (!key) return lfail(L, WEFT_ERR_OOM, "out of memory");
    snprintf(key, len, "%s%s%s", L->prefix, kind == WEFT_NODE_CONSTANT ? "const/" : "var/", L->name);
    weft_tensor *t = node_tensor(L, key, om);
    weft_status s = t ? WEFT_OK : weft_last_status();
    if (t) {
        // a constant aliases the loaded tensor (its storage outlives the file object); a variable gets its own copy
        *v = kind == WEFT_NODE_CONSTANT ? weft_graph_constant(L->g, L->name, t) : weft_graph_variable(L->g, L->name, t);
        if (v->id < 0) s = lfail_inner(L);
        else s = shared_add(L, key, L->g->nodes[L->g->values[v->id].node].tensor);
    }
    free(key);
    return s;
}

// ---- FUSED nodes ----
static weft_status parse_attrs(const loader *L, const cJSON *o, weft_attrs *at, int j) {
    memset(at, 0, sizeof *at);
    const cJSON *ji = cJSON_GetObjectItemCaseSensitive(o, "i"), *jf = cJSON_GetObjectItemCaseSensitive(o, "f");
    if ((ji && (!cJSON_IsArray(ji) || cJSON_GetArraySize(ji) > 16)) ||
        (jf && (!cJSON_IsArray(jf) || cJSON_GetArraySize(jf) > 4)))
        return lfail(L, WEFT_ERR_FORMAT, "instruction %d: attrs 'i' / 'f' must be arrays of at most 16 / 4 numbers", j);
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, ji) {
        if (!json_int(e, true, INT64_MIN, INT64_MAX, &at->i[k]))
            return lfail(L, WEFT_ERR_FORMAT, "instruction %d: int attr %d is not an integer", j, k);
        k++;
    }
    k = 0;
    cJSON_ArrayForEach(e, jf) {
        if (!json_double(e, &at->f[k]))
            return lfail(L, WEFT_ERR_FORMAT, "instruction %d: float attr %d is not a number", j, k);
        k++;
    }
    return WEFT_OK;
}

// Rebuilds the program of FUSED node L->name and checks it as fusion would have
// built it: each op is in the op table and is a tile-loop elementwise op (or the
// leading matmul), operands are node inputs or earlier instructions, each
// instruction's infer gives the group's shape and dtype (so tiles never read
// past an input), and every output is exported by exactly one instruction.
static weft_status load_fused(const loader *L, const cJSON *o, int n_in, const int32_t *in, int n_out,
                              weft_value *v) {
    weft_graph *g = L->g;
    const cJSON *jp = cJSON_GetObjectItemCaseSensitive(o, "prog");
    const cJSON *jins = cJSON_IsObject(jp) ? cJSON_GetObjectItemCaseSensitive(jp, "instr") : NULL;
    const cJSON *jmh = cJSON_IsObject(jp) ? cJSON_GetObjectItemCaseSensitive(jp, "matmul_head") : NULL;
    if (!cJSON_IsArray(jins)) return lfail(L, WEFT_ERR_FORMAT, "'prog' is missing or has no 'instr' array");
    if (jmh && !cJSON_IsBool(jmh)) return lfail(L, WEFT_ERR_FORMAT, "'matmul_head' is not a boolean");
    int n_instr = cJSON_GetArraySize(jins);
    if (n_instr < 1 || n_instr > WEFT_FUSED_MAX_INSTR)
        return lfail(L, WEFT_ERR_FORMAT, "%d instructions (1 to %d)", n_instr, WEFT_FUSED_MAX_INSTR);
    if (n_in > WEFT_FUSED_MAX_IN || n_out > WEFT_MAX_OP_OUT)
        return lfail(L, WEFT_ERR_FORMAT, "%d inputs, %d outputs (at most %d, %d)", n_in, n_out, WEFT_FUSED_MAX_IN,
                     WEFT_MAX_OP_OUT);
    weft_fused_prog *p = calloc(1, sizeof *p);
    if (!p) return lfail(L, WEFT_ERR_OOM, "out of memory");
    p->n_instr = n_instr;
    p->matmul_head = cJSON_IsTrue(jmh);
    weft_storage nostore; // the stand-ins' (empty) storage
    weft_tensor sin[WEFT_FUSED_MAX_IN], sres[WEFT_FUSED_MAX_INSTR];
    weft_out_meta grp = {0}; // the group's shape and dtype: instruction 0's result
    bool exported[WEFT_MAX_OP_OUT] = {0};
    weft_status s = WEFT_OK;
    for (int k = 0; k < n_in; k++) {
        const weft_gvalue *gv = &g->values[in[k]];
        if (weft_tensor_standin(&sin[k], &nostore, gv->ndim, gv->sizes, (weft_dtype)gv->dtype)) {
            s = lfail_inner(L);
            goto fail;
        }
    }
    int j = 0;
    const cJSON *xo;
    cJSON_ArrayForEach(xo, jins) {
        weft_fused_instr *x = &p->instr[j];
        const cJSON *jop = cJSON_IsObject(xo) ? cJSON_GetObjectItemCaseSensitive(xo, "op") : NULL;
        if (!cJSON_IsString(jop)) {
            s = lfail(L, WEFT_ERR_FORMAT, "instruction %d has no 'op'", j);
            goto fail;
        }
        if (!(x->op = weft_op_find(jop->valuestring))) {
            s = lfail(L, WEFT_ERR_FORMAT, "instruction %d: unknown op '%s' (not in this build's op table)", j,
                      jop->valuestring);
            goto fail;
        }
        bool head = j == 0 && p->matmul_head;
        if (head ? !weft_fused_head_op(x->op) : x->op->n_in < 1 || x->op->n_in > 2) {
            s = lfail(L, WEFT_ERR_FORMAT, "instruction %d: op '%s' cannot be %s", j, x->op->name,
                      head ? "the matmul head" : "a fused elementwise instruction");
            goto fail;
        }
        if ((s = parse_attrs(L, xo, &x->attrs, j))) goto fail;
        int na;
        int32_t *args;
        if ((s = parse_ids(L, xo, "args", WEFT_FUSED_MAX_ARGS, &na, &args))) goto fail;
        if (na) memcpy(x->args, args, (size_t)na * sizeof *args); // no "args": no buffer either
        free(args);
        x->n_args = na;
        if (x->op->n_in >= 0 ? na != x->op->n_in : na < 2 || na > 3) { // variadic: linear's x, weight [, bias]
            s = lfail(L, WEFT_ERR_FORMAT, "instruction %d (%s): %d operands (the op takes %d)", j, x->op->name, na,
                      x->op->n_in >= 0 ? x->op->n_in : 3);
            goto fail;
        }
        weft_tensor *ain[WEFT_FUSED_MAX_ARGS];
        for (int a = 0; a < na; a++) {
            int32_t r = x->args[a];
            if (r >= n_in || (r < 0 && (head || -1 - (int64_t)r >= j))) {
                s = lfail(L, WEFT_ERR_FORMAT,
                          "instruction %d (%s): operand %d (%d) out of range: a node input (0..%d)%s", j, x->op->name,
                          a, r, n_in - 1, head ? "" : " or an earlier instruction (-1 - index)");
                goto fail;
            }
            ain[a] = r >= 0 ? &sin[r] : &sres[-1 - r];
        }
        const cJSON *je = cJSON_GetObjectItemCaseSensitive(xo, "export");
        int64_t ex = -1;
        if (je && (!json_int(je, false, 0, n_out - 1, &ex) || exported[ex])) {
            s = lfail(L, WEFT_ERR_FORMAT, "instruction %d (%s): 'export' must be a distinct output index (0..%d)", j,
                      x->op->name, n_out - 1);
            goto fail;
        }
        x->export_idx = (int32_t)ex;
        if (ex >= 0) exported[ex] = true;
        weft_op_args oa = {.op = x->op, .n_in = na, .in = ain, .attrs = &x->attrs, .n_out = x->op->n_out};
        weft_out_meta m[WEFT_MAX_OP_OUT];
        if (x->op->n_out != 1) {
            s = lfail(L, WEFT_ERR_FORMAT, "instruction %d (%s): not a one-output op", j, x->op->name);
            goto fail;
        }
        if ((s = x->op->infer(&oa, m)) != WEFT_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", weft_last_error());
            s = lfail(L, s, "instruction %d (%s): %s", j, x->op->name, msg);
            goto fail;
        }
        if (j == 0) grp = m[0];
        weft_dtype dt = grp.dtype;
        bool ok = m[0].dtype == dt && weft_shape_equal(m[0].ndim, m[0].sizes, grp.ndim, grp.sizes);
        if (!ok) {
            char a[160], b[160];
            s = lfail(L, WEFT_ERR_SHAPE, "instruction %d (%s) gives %s but the group computes %s", j, x->op->name,
                      fmt_meta(m[0].ndim, m[0].sizes, m[0].dtype, a, sizeof a),
                      fmt_meta(grp.ndim, grp.sizes, dt, b, sizeof b));
            goto fail;
        }
        if (head) {
            const weft_kernel *kr = &x->op->kernel[WEFT_CPU];
            ok = kr->fn && (kr->dtypes & WEFT_DT(ain[x->op->dispatch_in]->dtype));
        } else {
            ok = weft_fused_op_ok(x->op, dt);
            for (int a = 0; a < na; a++)
                ok = ok && ain[a]->dtype == dt;
        }
        if (!ok) {
            s = lfail(L, WEFT_ERR_DTYPE, "instruction %d (%s): no fused kernel for %s", j, x->op->name,
                      weft_dtype_name(dt));
            goto fail;
        }
        if (weft_tensor_standin(&sres[j], &nostore, m[0].ndim, m[0].sizes, m[0].dtype)) {
            s = lfail_inner(L);
            goto fail;
        }
        j++;
    }
    for (int k = 0; k < n_out; k++)
        if (!exported[k]) {
            s = lfail(L, WEFT_ERR_FORMAT, "output %d is exported by no instruction", k);
            goto fail;
        }
    for (int k = 0; k < n_in; k++) // the tile loop reads every other input in the group's dtype
        if (sin[k].dtype != grp.dtype &&
            !(p->matmul_head && (p->instr[0].args[0] == k || p->instr[0].args[1] == k ||
                                 (p->instr[0].n_args == 3 && p->instr[0].args[2] == k)))) {
            s = lfail(L, WEFT_ERR_DTYPE, "input %d is %s, the group computes in %s", k,
                      weft_dtype_name((weft_dtype)sin[k].dtype), weft_dtype_name(grp.dtype));
            goto fail;
        }
    int32_t id = weft_graph_add_node(g, "graph_load", WEFT_NODE_FUSED, L->name, "fused", n_in, in, n_out);
    if (id < 0) {
        s = lfail_inner(L);
        goto fail;
    }
    g->nodes[id].prog = p;
    for (int k = 0; k < n_out; k++) {
        weft_gvalue *gv = &g->values[g->nodes[id].out0 + k];
        gv->ndim = (int8_t)grp.ndim;
        gv->dtype = (uint8_t)grp.dtype;
        memcpy(gv->sizes, grp.sizes, sizeof gv->sizes);
    }
    *v = (weft_value){g->nodes[id].out0};
    return WEFT_OK;
fail:
    free(p);
    return s;
}

// ---- COND / WHILE nodes ----
static weft_status load_nodes(loader *L, const cJSON *nodes);

// Subgraph b of COND / WHILE node L->name: {"nodes", "in", "out", "rng_runs"},
// loaded like a file's top graph (its tensors under "sub/<node>/<b>/...").
static weft_status load_sub(const loader *L, weft_node_kind kind, const cJSON *jo, int b, weft_graph **sub,
                            int *n_in, int32_t **in, int *n_out, int32_t **out) {
    static const char *const what[2][2] = {{"then", "else"}, {"cond", "body"}};
    const char *bn = what[kind == WEFT_NODE_WHILE][b];
    *sub = NULL;
    *in = *out = NULL;
    if (L->depth + 1 >= SUB_MAX_DEPTH)
        return lfail(L, WEFT_ERR_FORMAT, "control flow nested deeper than %d", SUB_MAX_DEPTH);
    const cJSON *nodes = cJSON_IsObject(jo) ? cJSON_GetObjectItemCaseSensitive(jo, "nodes") : NULL;
    if (!cJSON_IsArray(nodes)) return lfail(L, WEFT_ERR_FORMAT, "the %s graph has no 'nodes' array", bn);
    size_t plen = strlen(L->prefix) + strlen(L->name) + 16, clen = strlen(L->ctx) + strlen(L->name) + 48;
    char *pre = malloc(plen), *ctx = malloc(clen);
    weft_graph *g = weft_graph_new();
    weft_status s = WEFT_OK;
    if (!pre || !ctx || !g) {
        s = lfail(L, WEFT_ERR_OOM, "out of memory");
        goto fail;
    }
    snprintf(pre, plen, "%ssub/%s/%d/", L->prefix, L->name, b);
    snprintf(ctx, clen, "%snode '%s' (%s) %s graph: ", L->ctx, L->name, L->op, bn);
    loader SL = {.path = L->path, .st = L->st, .g = g, .node = -1, .prefix = pre, .ctx = ctx, .depth = L->depth + 1,
                 .sh = L->sh};
    const cJSON *jr = cJSON_GetObjectItemCaseSensitive(jo, "rng_runs");
    int64_t runs = 0;
    if (jr && !json_int(jr, true, 0, INT64_MAX, &runs)) {
        s = lfail(L, WEFT_ERR_FORMAT, "the %s graph's 'rng_runs' is not a count", bn);
        goto fail;
    }
    g->rng_runs = (uint64_t)runs;
    if ((s = load_nodes(&SL, nodes))) goto fail;
    if ((s = parse_ids(L, jo, "in", 1 << 20, n_in, in)) || (s = parse_ids(L, jo, "out", 1 << 20, n_out, out)))
        goto fail;
    for (int k = 0; k < *n_in + *n_out; k++) {
        int32_t id = k < *n_in ? (*in)[k] : (*out)[k - *n_in];
        if (id < 0 || id >= g->n_values) {
            s = lfail(L, WEFT_ERR_FORMAT, "the %s graph's '%s' entry %d (value %d) out of range (%d values)", bn,
                      k < *n_in ? "in" : "out", k < *n_in ? k : k - *n_in, id, g->n_values);
            goto fail;
        }
    }
    free(pre);
    free(ctx);
    *sub = g;
    return WEFT_OK;
fail:
    free(*in);
    free(*out);
    *in = *out = NULL;
    weft_graph_free(g);
    free(pre);
    free(ctx);
    return s;
}

// A COND / WHILE node: both subgraphs, then the builder (which binds each
// subgraph's placeholders, in creation order, to the node's inputs and checks
// shapes and dtypes across the interface). The stored interface must be the
// one the builder derives.
static weft_status load_control(const loader *L, const cJSON *o, weft_node_kind kind, int n_in, const int32_t *in,
                                int n_out, weft_value *v) {
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(o, "sub");
    if (!cJSON_IsArray(js) || cJSON_GetArraySize(js) != 2)
        return lfail(L, WEFT_ERR_FORMAT, "'sub' must be an array of 2 subgraphs");
    weft_graph *sub[2] = {0};
    int32_t *sin[2] = {0}, *sout[2] = {0};
    int nsi[2] = {0}, nso[2] = {0};
    weft_value *vin = NULL;
    weft_status s = WEFT_OK;
    bool cond = kind == WEFT_NODE_COND;
    for (int b = 0; b < 2 && s == WEFT_OK; b++)
        s = load_sub(L, kind, cJSON_GetArrayItem(js, b), b, &sub[b], &nsi[b], &sin[b], &nso[b], &sout[b]);
    if (s) goto done;
    int n_data = cond ? n_in - 1 : n_in;
    if (cond && n_in < 1) {
        s = lfail(L, WEFT_ERR_FORMAT, "a cond node needs its predicate as input 0");
        goto done;
    }
    // A gradient loop stores its gradient count f: inputs are n_in - f loop
    // variables then f gradients, outputs the f gradients w.r.t. the loop vars.
    int64_t wg_f = 0;
    const cJSON *jw = cJSON_GetObjectItemCaseSensitive(o, "while_grad");
    if (jw && (cond || !json_int(jw, false, 1, WEFT_GRAPH_MAX_OUT, &wg_f) || wg_f != n_out || n_in - wg_f < 1)) {
        s = lfail(L, WEFT_ERR_FORMAT, "'while_grad' must be the gradient count (the node's %d outputs) of a while_loop "
                                      "with more inputs than outputs",
                  n_out);
        goto done;
    }
    if (!cond && !jw && n_out != n_in) {
        s = lfail(L, WEFT_ERR_FORMAT, "%d outputs for %d loop variables", n_out, n_in);
        goto done;
    }
    for (int b = 0; b < 2; b++) {
        int want_out = cond ? n_out : b == 0 ? 1 : n_in;
        if (nsi[b] != n_data || nso[b] != want_out) {
            s = lfail(L, WEFT_ERR_FORMAT, "subgraph %d lists %d inputs and %d outputs (the node needs %d and %d)", b,
                      nsi[b], nso[b], n_data, want_out);
            goto done;
        }
    }
    int64_t max_iter = 0;
    const cJSON *jm = cJSON_GetObjectItemCaseSensitive(o, "max_iter");
    if (jm && (cond || !json_int(jm, true, 0, INT64_MAX, &max_iter))) {
        s = lfail(L, WEFT_ERR_FORMAT, "'max_iter' must be a non-negative count on a while_loop node");
        goto done;
    }
    if (!(vin = malloc(sizeof *vin * (size_t)(n_in ? n_in : 1)))) {
        s = lfail(L, WEFT_ERR_OOM, "out of memory");
        goto done;
    }
    for (int k = 0; k < n_in; k++)
        vin[k] = (weft_value){in[k]};
    // (a gradient loop's body has m + f outputs, up to twice the others; it is passed sout[1] itself)
    if (nso[0] > WEFT_GRAPH_MAX_OUT || nso[1] > (jw ? 2 * WEFT_GRAPH_MAX_OUT : WEFT_GRAPH_MAX_OUT)) {
        s = lfail(L, WEFT_ERR_FORMAT, "subgraphs with %d and %d outputs (at most %d)", nso[0], nso[1], WEFT_GRAPH_MAX_OUT);
        goto done;
    }
    weft_value o0[WEFT_GRAPH_MAX_OUT], o1[WEFT_GRAPH_MAX_OUT], outs[WEFT_GRAPH_MAX_OUT];
    for (int k = 0; k < nso[0]; k++)
        o0[k] = (weft_value){sout[0][k]};
    for (int k = 0; !jw && k < nso[1]; k++)
        o1[k] = (weft_value){sout[1][k]};
    s = cond  ? weft_graph_cond(L->g, L->name, vin[0], n_data, vin + 1, sub[0], o0, sub[1], o1, n_out, outs)
        : jw  ? weft_control_while_grad(L->g, L->name, sub[0], sout[0][0], sub[1], sout[1], (int)(n_in - wg_f),
                                        (int)wg_f, in, max_iter, outs)
              : weft_graph_while_loop(L->g, L->name, sub[0], o0[0], sub[1], o1, n_in, vin, outs, max_iter);
    if (s) {
        s = lfail_inner(L);
        goto done;
    }
    sub[0] = sub[1] = NULL; // the node owns them now
    const weft_gnode *n = &L->g->nodes[L->g->values[outs[0].id].node];
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < n_data; k++)
            if (n->sub_in[b][k] != sin[b][k]) {
                s = lfail(L, WEFT_ERR_FORMAT, "subgraph %d: 'in' entry %d is value %d but placeholder %d is value %d", b,
                          k, sin[b][k], k, n->sub_in[b][k]);
                goto done;
            }
    *v = outs[0];
done:
    for (int b = 0; b < 2; b++) {
        weft_graph_free(sub[b]);
        free(sin[b]);
        free(sout[b]);
    }
    free(vin);
    return s;
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
    bool sub_kind = kind == WEFT_NODE_COND || kind == WEFT_NODE_WHILE || kind == WEFT_NODE_FUSED; // any inputs
    int want_in = kind == WEFT_NODE_OP || sub_kind ? -2 : (kind == WEFT_NODE_ASSIGN || kind == WEFT_NODE_ASSIGN_ADD) ? 1 : 0;
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
        if ((s = load_tensor_node(L, o, kind, &om[0], &v))) goto done;
        break;
    }
    case WEFT_NODE_COND:
    case WEFT_NODE_WHILE:
        if ((s = load_control(L, o, kind, n_in, in, n_out, &v))) goto done;
        break;
    case WEFT_NODE_FUSED:
        if ((s = load_fused(L, o, n_in, in, n_out, &v))) goto done;
        break;
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

// Loads a node list into L->g: the nodes in order, then their control deps.
static weft_status load_nodes(loader *L, const cJSON *nodes) {
    weft_graph *g = L->g;
    const cJSON *o;
    int i = 0;
    cJSON_ArrayForEach(o, nodes) {
        L->node = i, L->name = NULL, L->op = NULL, L->is_op = false;
        weft_status s = load_node(L, o);
        if (s != WEFT_OK) return s;
        i++;
    }
    // control deps may point forward (even close a cycle, which run reports), so they come last
    i = 0;
    cJSON_ArrayForEach(o, nodes) {
        L->node = i, L->name = g->nodes[i].name, L->op = weft_graph_node_op(g, (weft_node_id){i});
        L->is_op = g->nodes[i].kind == WEFT_NODE_OP;
        int n_ctrl;
        int32_t *ctrl;
        weft_status s = parse_ids(L, o, "ctrl", 1 << 20, &n_ctrl, &ctrl);
        if (s) return s;
        for (int k = 0; k < n_ctrl && s == WEFT_OK; k++) {
            if (ctrl[k] < 0 || ctrl[k] >= g->n_nodes || ctrl[k] == i)
                s = lfail(L, WEFT_ERR_FORMAT, "control dependency %d (node %d) out of range (%d nodes)", k, ctrl[k],
                          g->n_nodes);
            else if (weft_graph_add_control_dep(g, (weft_node_id){i}, (weft_node_id){ctrl[k]}) != WEFT_OK)
                s = lfail_inner(L);
        }
        free(ctrl);
        if (s) return s;
        i++;
    }
    L->node = -1;
    return WEFT_OK;
}

weft_graph *weft_graph_load(const char *path) {
    if (!path) return weft_error_null(WEFT_ERR_ARG, "graph_load: NULL path");
    load_shared sh = {0};
    loader L = {.path = path, .node = -1, .prefix = "", .ctx = "", .sh = &sh};
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
    if (!ver || !*ver || *end || (version != GRAPH_VERSION && version != GRAPH_VERSION_SUB)) {
        lfail(&L, WEFT_ERR_FORMAT, "unsupported graph file version '%s' (this build reads versions %d and %d)",
              ver ? ver : "", GRAPH_VERSION, GRAPH_VERSION_SUB);
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
    if (load_nodes(&L, nodes) != WEFT_OK) goto fail;
    // Every claimed key is a distinct tensor of the file, so equal counts mean none is left over.
    if (sh.n != weft_safetensors_count(st)) { // a tensor that no node claims: the file was edited or mixed up
        for (int k = 0; k < weft_safetensors_count(st); k++) {
            const char *nm = weft_safetensors_name_at(st, k);
            if (shared_find(&sh, nm) < 0) {
                lfail(&L, WEFT_ERR_FORMAT, "tensor '%s' belongs to no constant or variable node", nm);
                goto fail;
            }
        }
    }
    shared_free(&sh);
    cJSON_Delete(root);
    weft_safetensors_free(st);
    return g;
fail:;
    weft_status s = weft_last_status();
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", weft_last_error());
    shared_free(&sh);
    cJSON_Delete(root);
    weft_graph_free(g);
    weft_safetensors_free(st);
    return weft_error_null(s != WEFT_OK ? s : WEFT_ERR_FORMAT, "%s", msg); // freeing must not change the message
}

weft_value weft_graph_find_output(const weft_graph *g, const char *node_name, int output) {
    return weft_graph_node_output(g, weft_graph_find_node(g, node_name), output);
}
