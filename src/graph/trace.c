// Tracing: record the ops that ordinary eager code runs into a graph.
//
// The dispatcher calls weft_graph_trace_record after every successful op while
// this thread's weft_trace_active is set. Tensors are identified by pointer; the
// trace holds a reference to every tensor it maps, so a pointer cannot be freed
// and reused for a different tensor while the trace runs.
#include <stdlib.h>
#include <string.h>

#include "../autograd/autograd_impl.h"
#include "graph_impl.h"
#include "trace_hook.h"

_Thread_local struct weft_graph *weft_trace_active;

// ---- pointer map ----
static size_t hash_ptr(const void *p, size_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

int32_t weft_ptrmap_get(const weft_ptrmap *m, const void *key) {
    if (!m->cap) return -1;
    for (size_t i = hash_ptr(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (!m->keys[i]) return -1;
        if (m->keys[i] == key) return m->vals[i];
    }
}

bool weft_ptrmap_put(weft_ptrmap *m, const void *key, int32_t val) {
    if ((m->n + 1) * 2 > m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 256;
        const void **nk = calloc(nc, sizeof *nk);
        int32_t *nv = malloc(nc * sizeof *nv);
        if (!nk || !nv) {
            free(nk);
            free(nv);
            return false;
        }
        for (size_t k = 0; k < m->cap; k++) {
            if (!m->keys[k]) continue;
            size_t i = hash_ptr(m->keys[k], nc);
            while (nk[i]) i = (i + 1) & (nc - 1);
            nk[i] = m->keys[k];
            nv[i] = m->vals[k];
        }
        free(m->keys);
        free(m->vals);
        m->keys = nk;
        m->vals = nv;
        m->cap = nc;
    }
    size_t i = hash_ptr(key, m->cap);
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    if (!m->keys[i]) m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
    return true;
}

void weft_ptrmap_free(weft_ptrmap *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

// ---- trace state ----
static void trace_fail(weft_graph *g, weft_status st) {
    if (g->trace_status == WEFT_OK) g->trace_status = st != WEFT_OK ? st : WEFT_ERR_STATE;
}

// Map t -> value and keep t alive until trace_end (also used by autodiff.c).
bool weft_graph_trace_map(weft_graph *g, weft_tensor *t, int32_t vid) {
    if (g->n_held == g->cap_held) {
        size_t nc = g->cap_held ? g->cap_held * 2 : 256;
        weft_tensor **nh = realloc(g->trace_held, nc * sizeof *nh);
        if (!nh) return false;
        g->trace_held = nh;
        g->cap_held = nc;
    }
    if (weft_ptrmap_get(&g->trace_map, t) < 0) g->trace_held[g->n_held++] = weft_tensor_ref(t);
    return weft_ptrmap_put(&g->trace_map, t, vid);
}

void weft_graph_trace_release(weft_graph *g) {
    for (size_t i = 0; i < g->n_held; i++) weft_tensor_free(g->trace_held[i]);
    g->n_held = 0;
    weft_ptrmap_free(&g->trace_map);
}

weft_status weft_graph_trace_begin(weft_graph *g) {
    if (!g) return weft_error(WEFT_ERR_ARG, "graph_trace_begin: NULL graph");
    if (weft_trace_active) return weft_error(WEFT_ERR_STATE, "graph_trace_begin: this thread is already tracing");
    g->tracing = true;
    g->trace_status = WEFT_OK;
    weft_trace_active = g;
    return WEFT_OK;
}

weft_status weft_graph_trace_end(weft_graph *g) {
    if (!g) return weft_error(WEFT_ERR_ARG, "graph_trace_end: NULL graph");
    if (!g->tracing || weft_trace_active != g)
        return weft_error(WEFT_ERR_STATE, "graph_trace_end: this graph is not being traced on this thread");
    weft_trace_active = NULL;
    g->tracing = false;
    weft_graph_trace_state_release(g, true);
    weft_graph_trace_release(g);
    weft_status st = g->trace_status;
    g->trace_status = WEFT_OK;
    if (st != WEFT_OK) return weft_error(st, "graph_trace_end: recording failed earlier (see the first error)");
    return WEFT_OK;
}

static bool check_tracing(weft_graph *g, const char *fn, weft_tensor *t) {
    if (!g || !t) return weft_error(WEFT_ERR_ARG, "%s: NULL %s", fn, g ? "tensor" : "graph"), false;
    if (!g->tracing) return weft_error(WEFT_ERR_STATE, "%s: no trace in progress on this graph", fn), false;
    return true;
}

weft_value weft_graph_trace_input(weft_graph *g, weft_tensor *t, const char *name) {
    if (!check_tracing(g, "graph_trace_input", t)) return WEFT_VALUE_NONE;
    if (weft_ptrmap_get(&g->trace_map, t) >= 0)
        return weft_error(WEFT_ERR_STATE, "graph_trace_input: '%s': this tensor is already in the trace",
                          name ? name : "?"),
               WEFT_VALUE_NONE;
    weft_value v = weft_graph_placeholder(g, name, t->ndim, t->sizes, (weft_dtype)t->dtype);
    if (v.id >= 0 && !weft_graph_trace_map(g, t, v.id))
        return weft_error(WEFT_ERR_OOM, "graph_trace_input: out of memory"), WEFT_VALUE_NONE;
    return v;
}

// A variable sharing t's storage: graph assigns and eager updates see each other.
static weft_value shared_variable(weft_graph *g, const char *fn, weft_tensor *t, const char *name) {
    weft_tensor *d = weft_tensor_detach(t);
    if (!d) return WEFT_VALUE_NONE;
    int32_t id = weft_graph_add_node(g, fn, WEFT_NODE_VARIABLE, name, "variable", 0, NULL, 1);
    if (id < 0) {
        weft_tensor_free(d);
        return WEFT_VALUE_NONE;
    }
    weft_gnode *n = &g->nodes[id];
    n->tensor = d;
    weft_gvalue *v = &g->values[n->out0];
    v->ndim = d->ndim;
    v->dtype = d->dtype;
    memcpy(v->sizes, d->sizes, sizeof v->sizes);
    if (!weft_graph_trace_map(g, t, n->out0)) return weft_error(WEFT_ERR_OOM, "%s: out of memory", fn), WEFT_VALUE_NONE;
    return (weft_value){n->out0};
}

weft_value weft_graph_trace_variable(weft_graph *g, weft_tensor *t, const char *name) {
    if (!check_tracing(g, "graph_trace_variable", t)) return WEFT_VALUE_NONE;
    if (weft_ptrmap_get(&g->trace_map, t) >= 0)
        return weft_error(WEFT_ERR_STATE, "graph_trace_variable: '%s': this tensor is already in the trace",
                          name ? name : "?"),
               WEFT_VALUE_NONE;
    return shared_variable(g, "graph_trace_variable", t, name);
}

weft_value weft_graph_trace_output(weft_graph *g, weft_tensor *t) {
    if (!check_tracing(g, "graph_trace_output", t)) return WEFT_VALUE_NONE;
    int32_t v = weft_ptrmap_get(&g->trace_map, t);
    if (v < 0)
        return weft_error(WEFT_ERR_ARG, "graph_trace_output: this tensor was not computed during the trace"),
               WEFT_VALUE_NONE;
    return (weft_value){v};
}

// The value for an op input: seen before, or a new parameter/constant.
static int32_t input_value(weft_graph *g, weft_tensor *t) {
    int32_t v = weft_ptrmap_get(&g->trace_map, t);
    if (v >= 0) return v;
    weft_value nv;
    if (t->requires_grad && !t->grad_fn) {
        nv = shared_variable(g, "graph_trace", t, NULL);
    } else {
        nv = weft_graph_constant(g, NULL, t);
        if (nv.id >= 0 && !weft_graph_trace_map(g, t, nv.id)) nv = WEFT_VALUE_NONE;
    }
    return nv.id;
}

void weft_graph_trace_record(const weft_op_def *op, int n_in, weft_tensor *const *in, const weft_attrs *attrs,
                             weft_tensor *const *out) {
    weft_graph *g = weft_trace_active;
    if (!g || g->trace_status != WEFT_OK) return;
    // Recording must not disturb the eager computation: keep the caller's error state.
    int32_t ids[64], *idp = n_in <= 64 ? ids : malloc((size_t)n_in * sizeof *idp);
    if (!idp) {
        trace_fail(g, weft_error(WEFT_ERR_OOM, "graph_trace: out of memory recording %s", op->name));
        return;
    }
    for (int i = 0; i < n_in; i++) {
        idp[i] = input_value(g, in[i]);
        if (idp[i] < 0) {
            trace_fail(g, weft_last_status());
            goto done;
        }
    }
    int32_t id = weft_graph_add_node(g, "graph_trace", WEFT_NODE_OP, NULL, op->name, n_in, idp, op->n_out);
    if (id < 0) {
        trace_fail(g, weft_last_status());
        goto done;
    }
    weft_gnode *n = &g->nodes[id];
    n->op = op;
    n->attrs = *attrs;
    for (int j = 0; j < op->n_out; j++) {
        weft_tensor *o = out[j];
        weft_gvalue *v = &g->values[n->out0 + j];
        v->ndim = o->ndim;
        v->dtype = o->dtype;
        memcpy(v->sizes, o->sizes, sizeof v->sizes);
        bool ok = weft_graph_trace_map(g, o, n->out0 + j);
        // Autograd saves outputs as detached aliases (new tensor structs); a
        // backward rule traced later reads those, so they name the same value.
        weft_tensor *saved = o->grad_fn && o->output_nr == j ? o->grad_fn->saved_out[j] : NULL;
        if (ok && saved) ok = weft_graph_trace_map(g, saved, n->out0 + j);
        if (!ok) {
            trace_fail(g, weft_error(WEFT_ERR_OOM, "graph_trace: out of memory recording %s", op->name));
            goto done;
        }
    }
done:
    if (idp != ids) free(idp);
}

// ---- stateful ops (batch_norm's running statistics) ----
// A stateful op's kernel writes some inputs in place. Those inputs are graph
// state: they become VARIABLE nodes (saved with the graph, never folded or
// merged like constants). The trace is a recording: its in-place writes are
// undone at trace_end, so the graph's first run is the first real update (as
// `weft train --graph` drops the traced step's gradients).

static bool state_saved(const weft_graph *g, const weft_tensor *t) {
    for (size_t k = 0; k < g->n_trace_state; k++)
        if (g->trace_state[2 * k] == t) return true;
    return false;
}

void weft_graph_trace_before_stateful(const weft_op_def *op, int n_in, weft_tensor *const *in,
                                      const weft_attrs *attrs) {
    weft_graph *g = weft_trace_active;
    if (!g || g->trace_status != WEFT_OK || !op->state_inputs) return;
    uint32_t mask = op->state_inputs(attrs, n_in);
    weft_trace_active = NULL; // the clones below are not part of the trace
    bool prev = weft_grad_set_enabled(false);
    for (int i = 0; i < n_in && i < 32; i++) {
        if (!(mask >> i & 1)) continue;
        weft_tensor *t = in[i];
        int32_t v = weft_ptrmap_get(&g->trace_map, t);
        if (v < 0) {
            if (shared_variable(g, "graph_trace", t, NULL).id < 0) {
                trace_fail(g, weft_last_status());
                break;
            }
        } else {
            weft_gnode *n = &g->nodes[g->values[v].node];
            if (n->kind == WEFT_NODE_CONSTANT) n->kind = WEFT_NODE_VARIABLE; // seen read-only before: it is state
            else if (n->kind != WEFT_NODE_VARIABLE) continue; // an intermediate: the write is part of the run
        }
        if (state_saved(g, t)) continue;
        if (g->n_trace_state == g->cap_trace_state) {
            size_t nc = g->cap_trace_state ? g->cap_trace_state * 2 : 8;
            weft_tensor **ns = realloc(g->trace_state, 2 * nc * sizeof *ns);
            if (!ns) {
                trace_fail(g, weft_error(WEFT_ERR_OOM, "graph_trace: out of memory recording %s", op->name));
                break;
            }
            g->trace_state = ns;
            g->cap_trace_state = nc;
        }
        weft_tensor *snap = weft_tensor_clone(t);
        if (!snap) {
            trace_fail(g, weft_last_status());
            break;
        }
        g->trace_state[2 * g->n_trace_state] = weft_tensor_ref(t);
        g->trace_state[2 * g->n_trace_state + 1] = snap;
        g->n_trace_state++;
    }
    weft_grad_set_enabled(prev);
    weft_trace_active = g;
}

void weft_graph_trace_state_release(weft_graph *g, bool restore) {
    struct weft_graph *tracing = weft_trace_active;
    weft_trace_active = NULL;
    bool prev = weft_grad_set_enabled(false);
    for (size_t k = 0; k < g->n_trace_state; k++) {
        weft_tensor *t = g->trace_state[2 * k], *snap = g->trace_state[2 * k + 1];
        if (restore && weft_tensor_copy_(t, snap) != WEFT_OK) trace_fail(g, weft_last_status());
        weft_tensor_free(t);
        weft_tensor_free(snap);
    }
    weft_grad_set_enabled(prev);
    weft_trace_active = tracing;
    free(g->trace_state);
    g->trace_state = NULL;
    g->n_trace_state = g->cap_trace_state = 0;
}
