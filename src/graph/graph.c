// The graph IR and its builder: nodes, values, unique names, op nodes whose
// static shapes come from the op table's own infer functions.
#include <stdlib.h>
#include <string.h>

#include <weft/queue.h>

#include "fused.h"
#include "graph_impl.h"
#include "trace_hook.h"

// ---- small helpers ----
static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; // FNV-1a
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

// ---- name map (node names are unique; lookup by name is O(1)) ----
static int32_t names_get(const weft_graph *g, const char *name) {
    const weft_strmap *m = &g->names;
    if (!m->cap) return -1;
    for (size_t i = hash_str(name) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        int32_t id = m->slots[i];
        if (id < 0) return -1;
        if (!strcmp(g->nodes[id].name, name)) return id;
    }
}

static bool names_put(weft_graph *g, int32_t id) {
    weft_strmap *m = &g->names;
    if ((m->n + 1) * 2 > m->cap) { // keep the load under 1/2
        size_t nc = m->cap ? m->cap * 2 : 64;
        int32_t *ns = malloc(nc * sizeof *ns);
        if (!ns) return false;
        for (size_t i = 0; i < nc; i++) ns[i] = -1;
        for (size_t k = 0; k < m->cap; k++) {
            int32_t o = m->slots[k];
            if (o < 0) continue;
            size_t i = hash_str(g->nodes[o].name) & (nc - 1);
            while (ns[i] >= 0) i = (i + 1) & (nc - 1);
            ns[i] = o;
        }
        free(m->slots);
        m->slots = ns;
        m->cap = nc;
    }
    size_t i = hash_str(g->nodes[id].name) & (m->cap - 1);
    while (m->slots[i] >= 0) i = (i + 1) & (m->cap - 1);
    m->slots[i] = id;
    m->n++;
    return true;
}

// ---- lifetime ----
weft_graph *weft_graph_new(void) {
    weft_graph *g = calloc(1, sizeof *g);
    if (!g) return weft_error_null(WEFT_ERR_OOM, "graph_new: out of memory");
    return g;
}

void weft_graph_free(weft_graph *g) {
    if (!g) return;
    if (weft_trace_active == g) weft_trace_active = NULL; // freed mid-trace: stop recording into it
    for (size_t i = 0; i < g->n_held; i++) weft_tensor_free(g->trace_held[i]);
    free(g->trace_held);
    weft_ptrmap_free(&g->trace_map);
    for (int i = 0; i < g->n_nodes; i++) {
        weft_gnode *n = &g->nodes[i];
        free(n->name);
        free(n->in);
        free(n->ctrl);
        weft_tensor_free(n->tensor);
        weft_control_free_node(n); // COND / WHILE subgraphs
        weft_queue_free(n->queue); // drops the node's reference
        weft_fused_prog_free(n->prog);
    }
    weft_graph_trace_state_release(g, false);
    free(g->nodes);
    free(g->values);
    free(g->names.slots);
    weft_graph_run_cache_free(g);
    free(g);
}

weft_device weft_graph_device(const weft_graph *g) {
    for (int pass = 0; g && pass < 2; pass++) // variables first: they are the graph's state
        for (int i = 0; i < g->n_nodes; i++) {
            const weft_gnode *n = &g->nodes[i];
            if (n->tensor && n->kind == (pass ? WEFT_NODE_CONSTANT : WEFT_NODE_VARIABLE)) return n->tensor->device;
        }
    for (int i = 0; g && i < g->n_nodes; i++) // control flow: its subgraphs' state
        for (int b = 0; b < 2; b++)
            if (g->nodes[i].sub[b]) {
                weft_device d = weft_graph_device(g->nodes[i].sub[b]);
                if (d.type != WEFT_CPU) return d;
            }
    return WEFT_DEVICE_CPU;
}

const char *weft_graph_kind_name(weft_node_kind k) {
    static const char *names[] = {"placeholder", "constant", "variable", "op",      "assign",
                                  "assign_add",  "cond",     "while_loop", "enqueue", "dequeue", "fused"};
    return (unsigned)k < WEFT_NODE_NUM_KINDS ? names[k] : "?";
}

bool weft_graph_value_ok(const weft_graph *g, weft_value v) { return g && v.id >= 0 && v.id < g->n_values; }

int32_t weft_graph_add_node(weft_graph *g, const char *fn, weft_node_kind kind, const char *name, const char *base,
                            int n_in, const int32_t *in, int n_out) {
    char auto_name[96];
    if (name) {
        if (!*name) return weft_error(WEFT_ERR_ARG, "%s: empty node name", fn), -1;
        if (names_get(g, name) >= 0) return weft_error(WEFT_ERR_ARG, "%s: node name '%s' is already used", fn, name), -1;
    } else {
        // "<base>_<id>"; a user may have taken it already, then add a suffix.
        snprintf(auto_name, sizeof auto_name, "%s_%d", base, g->n_nodes);
        for (int k = 1; names_get(g, auto_name) >= 0; k++)
            snprintf(auto_name, sizeof auto_name, "%s_%d_%d", base, g->n_nodes, k);
        name = auto_name;
    }
    if (g->n_nodes == g->cap_nodes) {
        int nc = g->cap_nodes ? g->cap_nodes * 2 : 32;
        weft_gnode *nn = realloc(g->nodes, (size_t)nc * sizeof *nn);
        if (!nn) goto oom;
        g->nodes = nn;
        g->cap_nodes = nc;
    }
    if (g->n_values + n_out > g->cap_values) {
        int nc = g->cap_values ? g->cap_values * 2 : 32;
        while (nc < g->n_values + n_out) nc *= 2;
        weft_gvalue *nv = realloc(g->values, (size_t)nc * sizeof *nv);
        if (!nv) goto oom;
        g->values = nv;
        g->cap_values = nc;
    }
    int32_t id = g->n_nodes;
    weft_gnode *n = &g->nodes[id];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->var = -1;
    n->name = dup_str(name);
    n->in = n_in ? malloc((size_t)n_in * sizeof *n->in) : NULL;
    if (!n->name || (n_in && !n->in)) {
        free(n->name);
        free(n->in);
        goto oom;
    }
    if (n_in) memcpy(n->in, in, (size_t)n_in * sizeof *in);
    n->n_in = n_in;
    n->n_out = n_out;
    n->out0 = g->n_values;
    g->n_nodes++;
    if (!names_put(g, id)) {
        g->n_nodes--;
        free(n->name);
        free(n->in);
        goto oom;
    }
    for (int j = 0; j < n_out; j++) {
        weft_gvalue *v = &g->values[g->n_values++];
        memset(v, 0, sizeof *v);
        v->node = id;
        v->index = j;
    }
    return id;
oom:
    weft_error(WEFT_ERR_OOM, "%s: out of memory adding node '%s'", fn, name);
    return -1;
}

static void set_value_meta(weft_graph *g, int32_t vid, int ndim, const int64_t *sizes, weft_dtype dt) {
    weft_gvalue *v = &g->values[vid];
    v->ndim = (int8_t)ndim;
    v->dtype = (uint8_t)dt;
    if (ndim) memcpy(v->sizes, sizes, sizeof(int64_t) * (size_t)ndim);
}

// ---- builder ----
weft_value weft_graph_placeholder(weft_graph *g, const char *name, int ndim, const int64_t *sizes, weft_dtype dt) {
    if (!g) return weft_error(WEFT_ERR_ARG, "graph_placeholder: NULL graph"), WEFT_VALUE_NONE;
    char what[160];
    snprintf(what, sizeof what, "graph_placeholder: '%s'", name ? name : "?");
    if (weft_shape_check(what, ndim, sizes)) return WEFT_VALUE_NONE; // as any tensor's shape
    if ((unsigned)dt >= WEFT_NUM_DTYPES)
        return weft_error(WEFT_ERR_DTYPE, "graph_placeholder: '%s': bad dtype %d", name ? name : "?", (int)dt),
               WEFT_VALUE_NONE;
    int32_t id = weft_graph_add_node(g, "graph_placeholder", WEFT_NODE_PLACEHOLDER, name, "placeholder", 0, NULL, 1);
    if (id < 0) return WEFT_VALUE_NONE;
    set_value_meta(g, g->nodes[id].out0, ndim, sizes, dt);
    return (weft_value){g->nodes[id].out0};
}

// CONSTANT or VARIABLE holding `held` (one reference, taken over).
static weft_value tensor_node(weft_graph *g, const char *fn, weft_node_kind kind, const char *name, weft_tensor *held) {
    int32_t id = weft_graph_add_node(g, fn, kind, name, weft_graph_kind_name(kind), 0, NULL, 1);
    if (id < 0) {
        weft_tensor_free(held);
        return WEFT_VALUE_NONE;
    }
    g->nodes[id].tensor = held;
    set_value_meta(g, g->nodes[id].out0, held->ndim, held->sizes, (weft_dtype)held->dtype);
    return (weft_value){g->nodes[id].out0};
}

weft_value weft_graph_constant(weft_graph *g, const char *name, weft_tensor *t) {
    if (!g || !t)
        return weft_error(WEFT_ERR_ARG, "graph_constant: NULL %s", g ? "tensor" : "graph"), WEFT_VALUE_NONE;
    weft_tensor *d = weft_tensor_detach(t); // shares storage, drops autograd history
    if (!d) return WEFT_VALUE_NONE;
    return tensor_node(g, "graph_constant", WEFT_NODE_CONSTANT, name, d);
}

weft_value weft_graph_variable(weft_graph *g, const char *name, weft_tensor *initial) {
    if (!g || !initial)
        return weft_error(WEFT_ERR_ARG, "graph_variable: NULL %s", g ? "initial tensor" : "graph"), WEFT_VALUE_NONE;
    // The graph owns its state: a private contiguous copy, made without recording.
    bool prev = weft_grad_set_enabled(false);
    weft_tensor *c = weft_tensor_empty_like(initial);
    weft_status st = c ? weft_tensor_copy_(c, initial) : weft_last_status();
    weft_grad_set_enabled(prev);
    if (st != WEFT_OK) {
        weft_tensor_free(c);
        return WEFT_VALUE_NONE;
    }
    return tensor_node(g, "graph_variable", WEFT_NODE_VARIABLE, name, c);
}

weft_status weft_graph_op_named(weft_graph *g, const char *name, const char *op_name, int n_in, const weft_value *in,
                                const int64_t *iattrs, int n_iattrs, const double *fattrs, int n_fattrs,
                                weft_value *out) {
    if (!g || !op_name) return weft_error(WEFT_ERR_ARG, "graph_op: NULL %s", g ? "op name" : "graph");
    const weft_op_def *op = weft_op_find(op_name);
    if (!op) return weft_error(WEFT_ERR_ARG, "graph_op: unknown op '%s'", op_name);
    char auto_name[96];
    const char *nm = name;
    if (!nm) { // the name the node would get, for messages
        snprintf(auto_name, sizeof auto_name, "%s_%d", op->name, g->n_nodes);
        nm = auto_name;
    }
    if ((op->n_in >= 0 && n_in != op->n_in) || (op->n_in < 0 && n_in < 1) || (n_in > 0 && !in))
        return weft_error(WEFT_ERR_ARG, "graph_op: node '%s' (op %s): expected %d inputs, got %d", nm, op->name,
                          op->n_in, n_in);
    if (op->n_out == 0) // update_multi, cast_multi: they write their inputs, which a graph value never is
        return weft_error(WEFT_ERR_ARG, "graph_op: node '%s' (op %s): an op that writes its inputs in place has no "
                          "place in a graph (use the single ops)", nm, op->name);
    if (n_iattrs < 0 || n_iattrs > 16 || n_fattrs < 0 || n_fattrs > 4 || (n_iattrs && !iattrs) ||
        (n_fattrs && !fattrs))
        return weft_error(WEFT_ERR_ARG, "graph_op: node '%s' (op %s): bad attrs (%d ints, %d doubles; at most 16, 4)",
                          nm, op->name, n_iattrs, n_fattrs);
    for (int i = 0; i < n_in; i++)
        if (!weft_graph_value_ok(g, in[i]))
            return weft_error(WEFT_ERR_ARG, "graph_op: node '%s' (op %s): input %d is not a value of this graph", nm,
                              op->name, i);
    weft_attrs at = {0};
    for (int k = 0; k < n_iattrs; k++) at.i[k] = iattrs[k];
    for (int k = 0; k < n_fattrs; k++) at.f[k] = fattrs[k];

    // Static shapes: run the op's own infer on metadata-only tensors (no data,
    // contiguous layout), so builder and eager mode agree by construction.
    weft_tensor *sym = calloc((size_t)n_in, sizeof *sym);
    weft_tensor **symp = calloc((size_t)n_in, sizeof *symp);
    weft_storage nostore; // the stand-ins' shared (empty) storage
    if (!sym || !symp) {
        free(sym);
        free(symp);
        return weft_error(WEFT_ERR_OOM, "graph_op: out of memory");
    }
    weft_status st = WEFT_OK;
    for (int i = 0; i < n_in && !st; i++) { // values passed weft_shape_check when they were made
        const weft_gvalue *v = &g->values[in[i].id];
        st = weft_tensor_standin(&sym[i], &nostore, v->ndim, v->sizes, (weft_dtype)v->dtype);
        symp[i] = &sym[i];
    }
    weft_op_args args = {.op = op, .n_in = n_in, .in = symp, .attrs = &at, .n_out = op->n_out, .out = NULL};
    weft_out_meta meta[WEFT_MAX_OP_OUT];
    if (!st) st = op->infer(&args, meta);
    for (int j = 0; j < op->n_out && !st; j++) // a value is held to the shape rules of a tensor
        st = weft_shape_check("output", meta[j].ndim, meta[j].sizes);
    // (a variadic op's dispatch input may be past a short input list: infer has refused that list)
    weft_dtype kdt = op->dispatch_in < n_in ? (weft_dtype)sym[op->dispatch_in].dtype : WEFT_F32;
    free(sym);
    free(symp);
    if (st != WEFT_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", weft_last_error());
        return weft_error(st, "graph_op: node '%s' (op %s): %s", nm, op->name, msg);
    }
    if (!(op->flags & WEFT_OPF_VIEW)) {
        const weft_kernel *k = &op->kernel[WEFT_CPU];
        if (!k->fn || !(k->dtypes & WEFT_DT(kdt)))
            return weft_error(WEFT_ERR_DTYPE, "graph_op: node '%s' (op %s): no kernel for dtype %s", nm, op->name,
                              weft_dtype_name(kdt));
    }
    int32_t ids[64], *idp = n_in <= 64 ? ids : malloc((size_t)n_in * sizeof *idp);
    if (!idp) return weft_error(WEFT_ERR_OOM, "graph_op: out of memory");
    for (int i = 0; i < n_in; i++) idp[i] = in[i].id;
    int32_t id = weft_graph_add_node(g, "graph_op", WEFT_NODE_OP, name, op->name, n_in, idp, op->n_out);
    if (idp != ids) free(idp);
    if (id < 0) return weft_last_status();
    weft_gnode *n = &g->nodes[id];
    n->op = op;
    n->attrs = at;
    for (int j = 0; j < op->n_out; j++) {
        set_value_meta(g, n->out0 + j, meta[j].ndim, meta[j].sizes, meta[j].dtype);
        if (out) out[j] = (weft_value){n->out0 + j};
    }
    return WEFT_OK;
}

weft_status weft_graph_op(weft_graph *g, const char *op_name, int n_in, const weft_value *in, const int64_t *iattrs,
                          int n_iattrs, const double *fattrs, int n_fattrs, weft_value *out) {
    return weft_graph_op_named(g, NULL, op_name, n_in, in, iattrs, n_iattrs, fattrs, n_fattrs, out);
}

weft_value weft_graph_op1(weft_graph *g, const char *op_name, int n_in, const weft_value *in, const int64_t *iattrs,
                          int n_iattrs, const double *fattrs, int n_fattrs) {
    weft_value out[WEFT_GRAPH_MAX_OUT];
    if (weft_graph_op(g, op_name, n_in, in, iattrs, n_iattrs, fattrs, n_fattrs, out) != WEFT_OK)
        return WEFT_VALUE_NONE;
    return out[0];
}

static weft_value assign_node(weft_graph *g, const char *fn, weft_node_kind kind, const char *name,
                              weft_value variable, weft_value value) {
    if (!g) return weft_error(WEFT_ERR_ARG, "%s: NULL graph", fn), WEFT_VALUE_NONE;
    if (!weft_graph_value_ok(g, variable) || g->nodes[g->values[variable.id].node].kind != WEFT_NODE_VARIABLE)
        return weft_error(WEFT_ERR_ARG, "%s: the target is not a variable of this graph", fn), WEFT_VALUE_NONE;
    const weft_gnode *vn = &g->nodes[g->values[variable.id].node];
    if (!weft_graph_value_ok(g, value))
        return weft_error(WEFT_ERR_ARG, "%s: variable '%s': the value is not a value of this graph", fn, vn->name),
               WEFT_VALUE_NONE;
    const weft_gvalue *a = &g->values[variable.id], *b = &g->values[value.id];
    if (!weft_shape_equal(a->ndim, a->sizes, b->ndim, b->sizes) || a->dtype != b->dtype) {
        char s1[96], s2[96];
        return weft_error(WEFT_ERR_SHAPE, "%s: variable '%s' is %s %s but the value (from '%s') is %s %s", fn,
                          vn->name, weft_dtype_name((weft_dtype)a->dtype), weft_shape_fmt(a->ndim, a->sizes, s1, 96),
                          g->nodes[b->node].name, weft_dtype_name((weft_dtype)b->dtype),
                          weft_shape_fmt(b->ndim, b->sizes, s2, 96)),
               WEFT_VALUE_NONE;
    }
    int32_t var_node = a->node, in = value.id;
    int32_t id = weft_graph_add_node(g, fn, kind, name, weft_graph_kind_name(kind), 1, &in, 1);
    if (id < 0) return WEFT_VALUE_NONE;
    g->nodes[id].var = var_node;
    const weft_gvalue *va = &g->values[variable.id]; // re-read: values may have moved
    set_value_meta(g, g->nodes[id].out0, va->ndim, va->sizes, (weft_dtype)va->dtype);
    return (weft_value){g->nodes[id].out0};
}

weft_value weft_graph_assign(weft_graph *g, const char *name, weft_value variable, weft_value value) {
    return assign_node(g, "graph_assign", WEFT_NODE_ASSIGN, name, variable, value);
}
weft_value weft_graph_assign_add(weft_graph *g, const char *name, weft_value variable, weft_value value) {
    return assign_node(g, "graph_assign_add", WEFT_NODE_ASSIGN_ADD, name, variable, value);
}

static bool node_ok(const weft_graph *g, weft_node_id n) { return g && n.id >= 0 && n.id < g->n_nodes; }

weft_status weft_graph_add_control_dep(weft_graph *g, weft_node_id node, weft_node_id before) {
    if (!node_ok(g, node) || !node_ok(g, before))
        return weft_error(WEFT_ERR_ARG, "graph_add_control_dep: %s is not a node of this graph",
                          node_ok(g, node) ? "'before'" : "'node'");
    weft_gnode *n = &g->nodes[node.id];
    for (int k = 0; k < n->n_ctrl; k++)
        if (n->ctrl[k] == before.id) return WEFT_OK;
    int32_t *nc = realloc(n->ctrl, (size_t)(n->n_ctrl + 1) * sizeof *nc);
    if (!nc) return weft_error(WEFT_ERR_OOM, "graph_add_control_dep: out of memory");
    n->ctrl = nc;
    n->ctrl[n->n_ctrl++] = before.id;
    return WEFT_OK;
}

// ---- accessors ----
int weft_graph_node_count(const weft_graph *g) { return g ? g->n_nodes : 0; }
int weft_graph_value_count(const weft_graph *g) { return g ? g->n_values : 0; }

weft_node_id weft_graph_find_node(const weft_graph *g, const char *name) {
    if (!g || !name) return WEFT_NODE_NONE;
    return (weft_node_id){names_get(g, name)};
}

weft_node_id weft_graph_value_node(const weft_graph *g, weft_value v) {
    return weft_graph_value_ok(g, v) ? (weft_node_id){g->values[v.id].node} : WEFT_NODE_NONE;
}
int weft_graph_value_ndim(const weft_graph *g, weft_value v) {
    return weft_graph_value_ok(g, v) ? g->values[v.id].ndim : -1;
}
const int64_t *weft_graph_value_sizes(const weft_graph *g, weft_value v) {
    return weft_graph_value_ok(g, v) ? g->values[v.id].sizes : NULL;
}
weft_dtype weft_graph_value_dtype(const weft_graph *g, weft_value v) {
    return weft_graph_value_ok(g, v) ? (weft_dtype)g->values[v.id].dtype : WEFT_F32;
}
const char *weft_graph_node_name(const weft_graph *g, weft_node_id n) {
    return node_ok(g, n) ? g->nodes[n.id].name : NULL;
}
const char *weft_graph_node_op(const weft_graph *g, weft_node_id n) {
    if (!node_ok(g, n)) return NULL;
    const weft_gnode *x = &g->nodes[n.id];
    return x->kind == WEFT_NODE_OP ? x->op->name : weft_graph_kind_name(x->kind);
}
weft_node_kind weft_graph_node_kind(const weft_graph *g, weft_node_id n) {
    return node_ok(g, n) ? g->nodes[n.id].kind : WEFT_NODE_NUM_KINDS;
}
int weft_graph_node_num_outputs(const weft_graph *g, weft_node_id n) {
    return node_ok(g, n) ? g->nodes[n.id].n_out : 0;
}
weft_value weft_graph_node_output(const weft_graph *g, weft_node_id n, int i) {
    if (!node_ok(g, n) || i < 0 || i >= g->nodes[n.id].n_out) return WEFT_VALUE_NONE;
    return (weft_value){g->nodes[n.id].out0 + i};
}
weft_value weft_graph_find_value(const weft_graph *g, const char *node_name) {
    return weft_graph_node_output(g, weft_graph_find_node(g, node_name), 0);
}
weft_tensor *weft_graph_variable_tensor(const weft_graph *g, weft_value variable) {
    if (!weft_graph_value_ok(g, variable) || g->nodes[g->values[variable.id].node].kind != WEFT_NODE_VARIABLE)
        return weft_error_null(WEFT_ERR_ARG, "graph_variable_tensor: not a variable of this graph");
    return g->nodes[g->values[variable.id].node].tensor;
}
