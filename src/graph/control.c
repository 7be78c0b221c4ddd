// Control flow as graph nodes, functional style (TF2's If / While): a COND or
// WHILE node owns its subgraphs and runs them with weft_graph_run. The older
// dataflow form (Switch / Merge / Enter / Exit / NextIteration nodes in one
// flat graph) is what these lower to; keeping them as whole nodes lets the
// executor, the memory plan and the passes treat each as one opaque op.
#include <stdlib.h>
#include <string.h>

#include "graph_impl.h"
#include "rewrite.h"

// ---- node lifetime ----
void weft_control_free_node(weft_gnode *n) {
    for (int b = 0; b < 2; b++) {
        weft_graph_free(n->sub[b]);
        free(n->sub_in[b]);
        free(n->sub_out[b]);
        n->sub[b] = NULL;
        n->sub_in[b] = n->sub_out[b] = NULL;
    }
}

weft_graph *weft_graph_clone(const weft_graph *g) {
    weft_rw rw;
    if (weft_rw_init(&rw, g) != WEFT_OK) return NULL;
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (weft_rw_copy(&rw, i) < 0) {
            weft_rw_free(&rw, false);
            return NULL;
        }
    if (weft_rw_finish(&rw) != WEFT_OK) {
        weft_rw_free(&rw, false);
        return NULL;
    }
    weft_graph *d = rw.dst;
    weft_rw_free(&rw, true);
    return d;
}

static int32_t *dup_ids(const int32_t *a, int n) {
    int32_t *d = malloc((size_t)(n ? n : 1) * sizeof *d);
    if (d && n) memcpy(d, a, (size_t)n * sizeof *d);
    return d;
}

weft_status weft_control_copy_node(weft_gnode *dst, const weft_gnode *src) {
    // The copy starts from a bitwise copy of the interface sizes; pointers are its own.
    dst->n_sub_in = src->n_sub_in;
    dst->max_iter = src->max_iter;
    dst->while_grad = src->while_grad;
    for (int b = 0; b < 2; b++) {
        dst->sub[b] = NULL;
        dst->sub_in[b] = dst->sub_out[b] = NULL;
        dst->n_sub_out[b] = src->n_sub_out[b];
    }
    for (int b = 0; b < 2; b++) {
        // Clone ids are the source's: every node is copied in order.
        dst->sub[b] = weft_graph_clone(src->sub[b]);
        dst->sub_in[b] = dup_ids(src->sub_in[b], src->n_sub_in);
        dst->sub_out[b] = dup_ids(src->sub_out[b], src->n_sub_out[b]);
        if (!dst->sub[b] || !dst->sub_in[b] || !dst->sub_out[b]) {
            weft_control_free_node(dst);
            return weft_last_status() != WEFT_OK ? weft_last_status()
                                                 : weft_error(WEFT_ERR_OOM, "graph: out of memory copying node '%s'",
                                                              src->name);
        }
    }
    return WEFT_OK;
}

// ---- builders ----
static bool same_meta(const weft_gvalue *a, const weft_gvalue *b) {
    return a->dtype == b->dtype && weft_shape_equal(a->ndim, a->sizes, b->ndim, b->sizes);
}

static const char *meta_str(const weft_gvalue *v, char *buf, size_t n) {
    char s[96];
    snprintf(buf, n, "%s %s", weft_dtype_name((weft_dtype)v->dtype), weft_shape_fmt(v->ndim, v->sizes, s, sizeof s));
    return buf;
}

// The subgraph's placeholders (creation order) must match the inputs one to one.
static weft_status bind_inputs(const char *fn, const char *nm, const char *what, const weft_graph *g,
                               const weft_graph *sub, int n_in, const weft_value *in, int32_t *ph) {
    int k = 0;
    for (int32_t i = 0; i < sub->n_nodes; i++) {
        const weft_gnode *n = &sub->nodes[i];
        if (n->kind != WEFT_NODE_PLACEHOLDER) continue;
        if (k == n_in) {
            k++;
            break;
        }
        const weft_gvalue *a = &sub->values[n->out0], *b = &g->values[in[k].id];
        if (!same_meta(a, b)) {
            char s1[128], s2[128];
            return weft_error(WEFT_ERR_SHAPE, "%s: node '%s': %s placeholder %d ('%s') is %s but input %d is %s", fn, nm,
                              what, k, n->name, meta_str(a, s1, sizeof s1), k, meta_str(b, s2, sizeof s2));
        }
        ph[k++] = n->out0;
    }
    if (k != n_in)
        return weft_error(WEFT_ERR_ARG, "%s: node '%s': the %s graph has %s%d placeholders, expected %d (one per input)",
                          fn, nm, what, k > n_in ? "more than " : "", k > n_in ? n_in : k, n_in);
    return WEFT_OK;
}

static weft_status check_sub(const char *fn, const char *nm, const char *what, const weft_graph *g,
                             const weft_graph *sub) {
    if (!sub) return weft_error(WEFT_ERR_ARG, "%s: node '%s': NULL %s graph", fn, nm, what);
    if (sub == g) return weft_error(WEFT_ERR_ARG, "%s: node '%s': the %s graph is the graph itself", fn, nm, what);
    if (sub->tracing) return weft_error(WEFT_ERR_STATE, "%s: node '%s': the %s graph is being traced", fn, nm, what);
    return WEFT_OK;
}

static bool owned_elsewhere(const weft_graph *g, const weft_graph *sub) {
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].sub[0] == sub || g->nodes[i].sub[1] == sub) return true;
    return false;
}

// Common tail: add the node (inputs in[0..n_in)), take the subgraphs over.
static weft_status add_control_node(weft_graph *g, const char *fn, weft_node_kind kind, const char *name,
                                    int n_in, const int32_t *in, int n_out, const weft_gvalue *out_meta,
                                    weft_graph *sub0, weft_graph *sub1, int32_t *sub_in0, int32_t *sub_in1,
                                    int n_sub_in, const int32_t *out0, int n_out0, const int32_t *out1,
                                    int n_out1, int64_t max_iter, weft_value *out) {
    int32_t *so0 = dup_ids(out0, n_out0), *so1 = dup_ids(out1, n_out1);
    if (!so0 || !so1) {
        free(so0);
        free(so1);
        return weft_error(WEFT_ERR_OOM, "%s: out of memory", fn);
    }
    int32_t id = weft_graph_add_node(g, fn, kind, name, weft_graph_kind_name(kind), n_in, in, n_out);
    if (id < 0) {
        free(so0);
        free(so1);
        return weft_last_status();
    }
    weft_gnode *n = &g->nodes[id];
    n->sub[0] = sub0;
    n->sub[1] = sub1;
    n->sub_in[0] = sub_in0;
    n->sub_in[1] = sub_in1;
    n->n_sub_in = n_sub_in;
    n->sub_out[0] = so0;
    n->sub_out[1] = so1;
    n->n_sub_out[0] = n_out0;
    n->n_sub_out[1] = n_out1;
    n->max_iter = max_iter;
    for (int j = 0; j < n_out; j++) {
        weft_gvalue *v = &g->values[n->out0 + j];
        v->ndim = out_meta[j].ndim;
        v->dtype = out_meta[j].dtype;
        memcpy(v->sizes, out_meta[j].sizes, sizeof v->sizes);
        if (out) out[j] = (weft_value){n->out0 + j};
    }
    return WEFT_OK;
}

static bool numel1(const weft_gvalue *v) { return weft_shape_numel(v->ndim, v->sizes) == 1; }

weft_status weft_graph_cond(weft_graph *g, const char *name, weft_value pred, int n_in, const weft_value *inputs,
                            weft_graph *then_g, const weft_value *then_out, weft_graph *else_g,
                            const weft_value *else_out, int n_out, weft_value *out) {
    const char *fn = "graph_cond";
    if (!g) return weft_error(WEFT_ERR_ARG, "%s: NULL graph", fn);
    char auto_name[64];
    const char *nm = name;
    if (!nm) {
        snprintf(auto_name, sizeof auto_name, "cond_%d", g->n_nodes);
        nm = auto_name;
    }
    if (g->tracing) return weft_error(WEFT_ERR_STATE, "%s: node '%s': the graph is being traced", fn, nm);
    if (!weft_graph_value_ok(g, pred))
        return weft_error(WEFT_ERR_ARG, "%s: node '%s': the predicate is not a value of this graph", fn, nm);
    if (!numel1(&g->values[pred.id])) {
        char s[128];
        return weft_error(WEFT_ERR_SHAPE, "%s: node '%s': the predicate must have one element, got %s", fn, nm,
                          meta_str(&g->values[pred.id], s, sizeof s));
    }
    if (n_in < 0 || n_in > 1000 || (n_in && !inputs) || n_out < 1 || n_out > WEFT_GRAPH_MAX_OUT || !then_out ||
        !else_out)
        return weft_error(WEFT_ERR_ARG, "%s: node '%s': bad inputs or outputs (%d inputs, %d outputs; 1..%d outputs)",
                          fn, nm, n_in, n_out, WEFT_GRAPH_MAX_OUT);
    for (int i = 0; i < n_in; i++)
        if (!weft_graph_value_ok(g, inputs[i]))
            return weft_error(WEFT_ERR_ARG, "%s: node '%s': input %d is not a value of this graph", fn, nm, i);
    weft_status st = check_sub(fn, nm, "then", g, then_g);
    if (st == WEFT_OK) st = check_sub(fn, nm, "else", g, else_g);
    if (st != WEFT_OK) return st;
    if (then_g == else_g) return weft_error(WEFT_ERR_ARG, "%s: node '%s': then and else are the same graph", fn, nm);
    if (owned_elsewhere(g, then_g) || owned_elsewhere(g, else_g))
        return weft_error(WEFT_ERR_ARG, "%s: node '%s': a branch graph already belongs to another node", fn, nm);
    weft_gvalue meta[WEFT_GRAPH_MAX_OUT];
    int32_t o0[WEFT_GRAPH_MAX_OUT], o1[WEFT_GRAPH_MAX_OUT];
    for (int j = 0; j < n_out; j++) {
        if (!weft_graph_value_ok(then_g, then_out[j]) || !weft_graph_value_ok(else_g, else_out[j]))
            return weft_error(WEFT_ERR_ARG, "%s: node '%s': output %d is not a value of the %s graph", fn, nm, j,
                              weft_graph_value_ok(then_g, then_out[j]) ? "else" : "then");
        const weft_gvalue *a = &then_g->values[then_out[j].id], *b = &else_g->values[else_out[j].id];
        if (!same_meta(a, b)) {
            char s1[128], s2[128];
            return weft_error(WEFT_ERR_SHAPE,
                              "%s: node '%s': output %d is %s in the then branch but %s in the else branch", fn, nm, j,
                              meta_str(a, s1, sizeof s1), meta_str(b, s2, sizeof s2));
        }
        meta[j] = *a;
        o0[j] = then_out[j].id;
        o1[j] = else_out[j].id;
    }
    int32_t *ph0 = malloc((size_t)(n_in ? n_in : 1) * sizeof *ph0);
    int32_t *ph1 = malloc((size_t)(n_in ? n_in : 1) * sizeof *ph1);
    int32_t *in = malloc((size_t)(n_in + 1) * sizeof *in);
    if (!ph0 || !ph1 || !in) {
        st = weft_error(WEFT_ERR_OOM, "%s: out of memory", fn);
        goto fail;
    }
    if ((st = bind_inputs(fn, nm, "then", g, then_g, n_in, inputs, ph0)) != WEFT_OK) goto fail;
    if ((st = bind_inputs(fn, nm, "else", g, else_g, n_in, inputs, ph1)) != WEFT_OK) goto fail;
    in[0] = pred.id;
    for (int i = 0; i < n_in; i++) in[i + 1] = inputs[i].id;
    st = add_control_node(g, fn, WEFT_NODE_COND, name, n_in + 1, in, n_out, meta, then_g, else_g, ph0, ph1, n_in, o0,
                          n_out, o1, n_out, 0, out);
    free(in);
    if (st == WEFT_OK) return st;
    in = NULL;
fail:
    free(ph0);
    free(ph1);
    free(in);
    return st;
}

weft_status weft_graph_while_loop(weft_graph *g, const char *name, weft_graph *cond_g, weft_value cond_out,
                                  weft_graph *body_g, const weft_value *body_out, int n_loop,
                                  const weft_value *loop_vars_in, weft_value *out, int64_t max_iterations) {
    const char *fn = "graph_while_loop";
    if (!g) return weft_error(WEFT_ERR_ARG, "%s: NULL graph", fn);
    char auto_name[64];
    const char *nm = name;
    if (!nm) {
        snprintf(auto_name, sizeof auto_name, "while_loop_%d", g->n_nodes);
        nm = auto_name;
    }
    if (g->tracing) return weft_error(WEFT_ERR_STATE, "%s: node '%s': the graph is being traced", fn, nm);
    if (n_loop < 1 || n_loop > WEFT_GRAPH_MAX_OUT || !loop_vars_in || !body_out || max_iterations < 0)
        return weft_error(WEFT_ERR_ARG, "%s: node '%s': bad loop variables (%d; 1..%d) or max_iterations %lld", fn, nm,
                          n_loop, WEFT_GRAPH_MAX_OUT, (long long)max_iterations);
    for (int i = 0; i < n_loop; i++)
        if (!weft_graph_value_ok(g, loop_vars_in[i]))
            return weft_error(WEFT_ERR_ARG, "%s: node '%s': loop variable %d is not a value of this graph", fn, nm, i);
    weft_status st = check_sub(fn, nm, "cond", g, cond_g);
    if (st == WEFT_OK) st = check_sub(fn, nm, "body", g, body_g);
    if (st != WEFT_OK) return st;
    if (cond_g == body_g) return weft_error(WEFT_ERR_ARG, "%s: node '%s': cond and body are the same graph", fn, nm);
    if (owned_elsewhere(g, cond_g) || owned_elsewhere(g, body_g))
        return weft_error(WEFT_ERR_ARG, "%s: node '%s': a subgraph already belongs to another node", fn, nm);
    if (!weft_graph_value_ok(cond_g, cond_out))
        return weft_error(WEFT_ERR_ARG, "%s: node '%s': the predicate is not a value of the cond graph", fn, nm);
    if (!numel1(&cond_g->values[cond_out.id])) {
        char s[128];
        return weft_error(WEFT_ERR_SHAPE, "%s: node '%s': the cond graph's predicate must have one element, got %s",
                          fn, nm, meta_str(&cond_g->values[cond_out.id], s, sizeof s));
    }
    weft_gvalue meta[WEFT_GRAPH_MAX_OUT];
    int32_t o1[WEFT_GRAPH_MAX_OUT], in[WEFT_GRAPH_MAX_OUT], co = cond_out.id;
    for (int j = 0; j < n_loop; j++) {
        if (!weft_graph_value_ok(body_g, body_out[j]))
            return weft_error(WEFT_ERR_ARG, "%s: node '%s': body output %d is not a value of the body graph", fn, nm, j);
        const weft_gvalue *a = &body_g->values[body_out[j].id], *b = &g->values[loop_vars_in[j].id];
        if (!same_meta(a, b)) {
            char s1[128], s2[128];
            return weft_error(WEFT_ERR_SHAPE, "%s: node '%s': body output %d is %s but loop variable %d is %s", fn, nm,
                              j, meta_str(a, s1, sizeof s1), j, meta_str(b, s2, sizeof s2));
        }
        meta[j] = *b;
        o1[j] = body_out[j].id;
        in[j] = loop_vars_in[j].id;
    }
    int32_t *ph0 = malloc((size_t)n_loop * sizeof *ph0), *ph1 = malloc((size_t)n_loop * sizeof *ph1);
    if (!ph0 || !ph1) {
        st = weft_error(WEFT_ERR_OOM, "%s: out of memory", fn);
        goto fail;
    }
    if ((st = bind_inputs(fn, nm, "cond", g, cond_g, n_loop, loop_vars_in, ph0)) != WEFT_OK) goto fail;
    if ((st = bind_inputs(fn, nm, "body", g, body_g, n_loop, loop_vars_in, ph1)) != WEFT_OK) goto fail;
    st = add_control_node(g, fn, WEFT_NODE_WHILE, name, n_loop, in, n_loop, meta, cond_g, body_g, ph0, ph1, n_loop,
                          &co, 1, o1, n_loop, max_iterations, out);
    if (st == WEFT_OK) return st;
fail:
    free(ph0);
    free(ph1);
    return st;
}

// The gradient loop of a WHILE: one WHILE node flagged while_grad whose
// interfaces have m + f entries (see graph_impl.h). The forward WHILE node is
// left as it is; the gradient node recomputes the forward trajectory itself.
weft_status weft_control_while_grad(weft_graph *g, const char *name, weft_graph *cond_g, int32_t cond_out,
                                    weft_graph *gbody_g, const int32_t *gbody_out, int m, int f, const int32_t *in,
                                    int64_t max_iter, weft_value *out) {
    const char *fn = "graph_gradients";
    const char *nm = name ? name : "while_loop_grad";
    int n_in = m + f;
    if (m < 1 || f < 1 || f > WEFT_GRAPH_MAX_OUT || m > WEFT_GRAPH_MAX_OUT)
        return weft_error(WEFT_ERR_ARG, "%s: node '%s': bad gradient loop interface (%d loop vars, %d gradients)", fn,
                          nm, m, f);
    weft_value iv[2 * WEFT_GRAPH_MAX_OUT];
    weft_gvalue meta[WEFT_GRAPH_MAX_OUT];
    for (int k = 0; k < n_in; k++) iv[k] = (weft_value){in[k]};
    for (int k = 0; k < f; k++) meta[k] = g->values[in[m + k]];
    int32_t *ph0 = malloc((size_t)n_in * sizeof *ph0), *ph1 = malloc((size_t)n_in * sizeof *ph1);
    weft_status st;
    if (!ph0 || !ph1) {
        st = weft_error(WEFT_ERR_OOM, "%s: out of memory", fn);
        goto fail;
    }
    if ((st = bind_inputs(fn, nm, "cond", g, cond_g, n_in, iv, ph0)) != WEFT_OK) goto fail;
    if ((st = bind_inputs(fn, nm, "gradient body", g, gbody_g, n_in, iv, ph1)) != WEFT_OK) goto fail;
    st = add_control_node(g, fn, WEFT_NODE_WHILE, name, n_in, in, f, meta, cond_g, gbody_g, ph0, ph1, n_in,
                          &cond_out, 1, gbody_out, n_in, max_iter, out);
    if (st == WEFT_OK) {
        g->nodes[g->n_nodes - 1].while_grad = true;
        return st;
    }
fail:
    free(ph0);
    free(ph1);
    return st;
}

// ---- execution ----
static weft_value *as_values(const int32_t *ids, int n, weft_value *buf) {
    for (int k = 0; k < n; k++) buf[k] = (weft_value){ids[k]};
    return buf;
}

// Run sub with feeds, fetching n values (one thread: the node is one step of
// the caller's schedule; its own memory plan as the caller's options say by default).
static weft_status run_sub(weft_graph *sub, int n_feed, const int32_t *ph, weft_tensor *const *feeds, int n_fetch,
                           const int32_t *fetch, weft_tensor **out) {
    weft_value fv[WEFT_GRAPH_MAX_OUT + 1] = {{0}}, ft[WEFT_GRAPH_MAX_OUT + 1];
    weft_value *fvp = n_feed <= WEFT_GRAPH_MAX_OUT + 1 ? fv : malloc((size_t)n_feed * sizeof *fvp);
    if (!fvp) return weft_error(WEFT_ERR_OOM, "graph_run: out of memory");
    weft_graph_run_options opts = {.interop_threads = 1};
    weft_status st = weft_graph_run_ex(sub, n_feed, as_values(ph, n_feed, fvp), feeds, n_fetch,
                                       as_values(fetch, n_fetch, ft), out, 0, NULL, &opts);
    if (fvp != fv) free(fvp);
    return st;
}

static weft_status read_pred(const weft_tensor *t, bool *p) {
    double d = 0;
    weft_status st = weft_tensor_to_f64(t, &d, 1);
    *p = d != 0;
    return st;
}

// Results leave the node contiguous (what its autodiff stand-ins assume) and
// never aliasing an input: the caller's memory plan may reuse an input's
// bytes once this node, its last consumer, has run.
static weft_status own_output(weft_tensor **o, weft_tensor *const *in, int n_in) {
    bool alias = false;
    for (int k = 0; k < n_in && !alias; k++) alias = in[k] && weft_tensor_shares_storage(*o, in[k]);
    if (!alias && weft_tensor_is_contiguous(*o)) return WEFT_OK;
    weft_tensor *c = weft_tensor_clone(*o);
    if (!c) return weft_last_status();
    weft_tensor_free(*o);
    *o = c;
    return WEFT_OK;
}

static weft_status sub_failed(weft_status st, const char *what, int64_t it) {
    char msg[768];
    snprintf(msg, sizeof msg, "%s", weft_last_error());
    return weft_error(st, "%s (iteration %lld): %s", what, (long long)it, msg);
}

// Iterate a WHILE's cond and body from cur (m owned references, replaced by the
// final values). hist non-NULL: the loop vars at the start of each iteration
// are kept there (m per iteration, owned), *n_it the trip count. The body is
// sub[1]'s first m outputs: for a gradient loop the same graph also holds the
// gradient, which the executor prunes away here.
static weft_status while_forward(const weft_gnode *n, int m, weft_tensor **cur, weft_tensor ***hist, int64_t *n_it) {
    weft_tensor *nxt[WEFT_GRAPH_MAX_OUT] = {0};
    weft_status st = WEFT_OK;
    int64_t cap = 0, it = 0;
    for (;; it++) {
        weft_tensor *pt = NULL;
        st = run_sub(n->sub[0], m, n->sub_in[0], cur, 1, n->sub_out[0], &pt);
        bool p = false;
        if (st == WEFT_OK) st = read_pred(pt, &p);
        weft_tensor_free(pt);
        if (st != WEFT_OK) {
            st = sub_failed(st, "cond graph", it);
            break;
        }
        if (!p) break;
        if (n->max_iter > 0 && it >= n->max_iter) {
            st = weft_error(WEFT_ERR_STATE, "more than max_iterations = %lld iterations", (long long)n->max_iter);
            break;
        }
        st = run_sub(n->sub[1], m, n->sub_in[1], cur, m, n->sub_out[1], nxt);
        if (st != WEFT_OK) {
            st = sub_failed(st, "body graph", it);
            break;
        }
        if (hist && it == cap) {
            cap = cap ? 2 * cap : 16;
            weft_tensor **h = realloc(*hist, (size_t)(cap * m) * sizeof *h);
            if (!h) {
                for (int j = 0; j < m; j++) weft_tensor_free(nxt[j]);
                st = weft_error(WEFT_ERR_OOM, "graph_run: out of memory (while_loop history)");
                break;
            }
            *hist = h;
        }
        for (int j = 0; j < m; j++) {
            if (hist) (*hist)[it * m + j] = cur[j];
            else weft_tensor_free(cur[j]);
            cur[j] = nxt[j];
            nxt[j] = NULL;
        }
    }
    if (n_it) *n_it = it;
    return st;
}

// A gradient loop (while_grad): rerun the forward keeping each iteration's
// loop vars (memory: trip count x loop vars, freed when the node finishes),
// then run the gradient body for iterations n-1 .. 0, each mapping (loop vars
// of that iteration, gradients w.r.t. its outputs) to gradients w.r.t. its
// inputs. Zero iterations: the output gradients come back unchanged.
static weft_status while_backward(const weft_gnode *n, weft_tensor *const *in, weft_tensor **outs) {
    int f = n->n_out, m = n->n_in - f;
    weft_tensor *cur[WEFT_GRAPH_MAX_OUT] = {0}, *gr[WEFT_GRAPH_MAX_OUT] = {0}, *ng[WEFT_GRAPH_MAX_OUT] = {0};
    weft_tensor *feed[2 * WEFT_GRAPH_MAX_OUT];
    weft_tensor **hist = NULL;
    int64_t nit = 0;
    for (int j = 0; j < m; j++) cur[j] = weft_tensor_ref(in[j]);
    weft_status st = while_forward(n, m, cur, &hist, &nit);
    for (int j = 0; j < m; j++) weft_tensor_free(cur[j]);
    for (int k = 0; k < f; k++) gr[k] = weft_tensor_ref(in[m + k]);
    for (int64_t it = nit - 1; it >= 0 && st == WEFT_OK; it--) {
        for (int j = 0; j < m; j++) feed[j] = hist[it * m + j];
        for (int k = 0; k < f; k++) feed[m + k] = gr[k];
        st = run_sub(n->sub[1], m + f, n->sub_in[1], feed, f, n->sub_out[1] + m, ng);
        if (st != WEFT_OK) {
            st = sub_failed(st, "gradient body graph", it);
            break;
        }
        for (int k = 0; k < f; k++) {
            weft_tensor_free(gr[k]);
            gr[k] = ng[k];
            ng[k] = NULL;
        }
        for (int j = 0; j < m; j++) { // this iteration's vars are no longer needed
            weft_tensor_free(hist[it * m + j]);
            hist[it * m + j] = NULL;
        }
    }
    for (int64_t i = 0; i < nit * m; i++) weft_tensor_free(hist[i]);
    free(hist);
    for (int k = 0; k < f; k++) {
        if (st == WEFT_OK) outs[k] = gr[k];
        else weft_tensor_free(gr[k]);
    }
    return st;
}

weft_status weft_control_exec(weft_graph *g, int32_t id, weft_tensor *const *vals, weft_tensor **outs) {
    const weft_gnode *n = &g->nodes[id];
    int n_in = n->n_in;
    weft_tensor *inl[2 * WEFT_GRAPH_MAX_OUT + 2], **in = n_in <= (int)(sizeof inl / sizeof *inl) ? inl : malloc((size_t)n_in * sizeof *in);
    if (!in) return weft_error(WEFT_ERR_OOM, "graph_run: out of memory");
    for (int i = 0; i < n_in; i++) in[i] = vals[n->in[i]];
    weft_status st = WEFT_OK;
    if (n->kind == WEFT_NODE_COND) {
        bool p;
        if ((st = read_pred(in[0], &p)) != WEFT_OK) goto done;
        int b = p ? 0 : 1;
        st = run_sub(n->sub[b], n->n_sub_in, n->sub_in[b], in + 1, n->n_out, n->sub_out[b], outs);
        if (st != WEFT_OK) {
            char msg[768];
            snprintf(msg, sizeof msg, "%s", weft_last_error());
            st = weft_error(st, "%s branch: %s", p ? "then" : "else", msg);
            goto done;
        }
    } else if (!n->while_grad) { // WHILE
        weft_tensor *cur[WEFT_GRAPH_MAX_OUT] = {0};
        int m = n->n_out;
        for (int j = 0; j < m; j++) cur[j] = weft_tensor_ref(in[j]);
        st = while_forward(n, m, cur, NULL, NULL);
        for (int j = 0; j < m; j++) {
            if (st == WEFT_OK) outs[j] = cur[j];
            else weft_tensor_free(cur[j]);
        }
        if (st != WEFT_OK) goto done;
    } else if ((st = while_backward(n, in, outs)) != WEFT_OK) {
        goto done;
    }
    for (int j = 0; j < n->n_out && st == WEFT_OK; j++) st = own_output(&outs[j], in, n_in);
    if (st != WEFT_OK)
        for (int j = 0; j < n->n_out; j++) {
            weft_tensor_free(outs[j]);
            outs[j] = NULL;
        }
done:
    if (in != inl) free(in);
    return st;
}
