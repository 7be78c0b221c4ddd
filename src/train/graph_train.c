// `weft train --graph`: each training step is one run of a graph holding the
// forward pass, the loss, the backward pass, gradient clipping and the
// optimiser update (assigns into variables), so one weft_graph_run is one step.
//
// The update is one fused op per parameter (src/ops/def_optim.c), taken with
// its attrs, state and host scalars from the optimiser's own description
// (src/optim/optim_impl.h) that weft_optim_step runs, so parameters match
// the eager step bit for bit, for every optimiser kind. The executor writes it
// straight into the variables (WEFT_OPF_INPLACE) and the assigns copy
// nothing. Ordering is per variable: each update waits for exactly the
// nodes that read its parameter or state (directly or through views), not
// for the whole backward pass.
//
// The step graph is built once per batch shape by TRACING one eager forward
// on a real batch, adding the backward with symbolic autodiff
// (weft_graph_gradients: the op table's backward rules, nothing executed;
// WEFT_GRAPH_BACKWARD=trace traces weft_backward instead, docs/graph.md
// "Tracing through weft_backward"), then appending the optimiser's update
// with the builder.
// Parameters and the optimiser's state tensors are declared as trace
// variables, so the graph's variables SHARE their storage with the eager
// module and the eager optimiser: evaluation, checkpoints (parameters and
// optimiser state), sampling and resume keep using the eager paths unchanged.
// What stays on the host: the step count, the learning-rate schedule and the
// scalars that depend on it (bias corrections, AdaGrad's decayed rate), fed
// each step as 0-d tensors, and the per-parameter ".step" counters of the
// optimiser state (written after each run).
//
// On a device (--device cuda) the batch is moved to the run's device before
// the step (the trace and every run see device feeds), the host scalars are
// 0-d tensors there, refilled each step by an asynchronous copy, and the
// executor replays the step as CUDA graphs (src/graph/capture.c), copying
// these feeds into its fixed buffers first.
//
// Dropout draws a fresh mask each run (WEFT_OPF_RANDOM: the executor derives
// the seed from the recorded one and the run number) and batch_norm's running
// statistics are graph variables its kernel updates (docs/graph.md, "Stateful
// ops"). Not supported (an error at the first step, naming the feature):
// distributed runs.
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <weft.h>
#include <weft/graph.h>
#include <weft/graph_passes.h>
#include <weft/optim.h>
#include <weft/train.h>

#include "../core/core_impl.h"
#include "../graph/graph_impl.h"
#include "../optim/optim_impl.h"
#include "train_impl.h"

// Host scalars fed each step: the update op's weft_optim_scalar inputs as
// placeholders "step.<name>" of 0-d f64 tensors, so the update ops round them
// to the dtype exactly as weft_optim_step does.
enum { N_SC = WEFT_OPTIM_NUM_SC };
static void sc_name(int k, char *buf, size_t n) { snprintf(buf, n, "step.%s", weft_optim_scalar_name(k)); }

// The step graph for one batch shape.
typedef struct gstep {
    weft_graph *g;
    int xnd, ynd;
    int64_t xs[WEFT_MAX_DIMS], ys[WEFT_MAX_DIMS];
    weft_dtype xdt, ydt;
    weft_value x, y, loss, sc[N_SC]; // sc[k].id < 0: not used by this optimiser
    int n_targets;
    weft_node_id *targets; // the assigns
} gstep;

#define MAX_SHAPES 4 // a classifier's last, shorter batch needs a second graph

struct weft_graph_train {
    gstep s[MAX_SHAPES];
    int n;
    bool *updated;     // [n_params] the parameter has a gradient (and an update) in the graph
    weft_graph_pass_stats pass_stats;
    // The host scalars' tensors on the run's device, refilled each step (a
    // device fill is an asynchronous copy from the host: no wait), so the
    // step's feeds keep their addresses (CUDA graphs copy them each run).
    weft_tensor *sc[N_SC];
};

#define GERR(code, ...) weft_error(code, "train --graph: " __VA_ARGS__)

// ---- what graph mode supports ----
weft_status weft_graph_train_check(const weft_run *r) {
    if (r->dist) return GERR(WEFT_ERR_ARG, "distributed training is not supported in graph mode yet");
    if (!weft_optim_get_opts(r->optim)) return GERR(WEFT_ERR_ARG, "no optimiser");
    return WEFT_OK;
}

// ---- graph building helpers (a NONE input propagates: one check at the end) ----
static weft_value op1(weft_graph *g, const char *op, weft_value a) {
    return a.id < 0 ? WEFT_VALUE_NONE : weft_graph_op1(g, op, 1, &a, NULL, 0, NULL, 0);
}
static weft_value op2(weft_graph *g, const char *op, weft_value a, weft_value b) {
    if (a.id < 0 || b.id < 0) return WEFT_VALUE_NONE;
    weft_value in[2] = {a, b};
    return weft_graph_op1(g, op, 2, in, NULL, 0, NULL, 0);
}
static weft_value opf(weft_graph *g, const char *op, weft_value a, double f) { // mul_scalar, add_scalar
    return a.id < 0 ? WEFT_VALUE_NONE : weft_graph_op1(g, op, 1, &a, NULL, 0, &f, 1);
}
static weft_value const_scalar(weft_graph *g, double v, weft_dtype dt) {
    weft_tensor *t = weft_tensor_full_on(0, NULL, dt, v, weft_graph_device(g)); // beside the parameters
    weft_value c = t ? weft_graph_constant(g, NULL, t) : WEFT_VALUE_NONE;
    weft_tensor_free(t);
    return c;
}

// Clipping by global norm with weft_clip_grad_norm's own ops: every
// gradient's sum of squares added to one f64 accumulator in parameter order
// (grad_sumsq), coef = max_norm / (sqrt(total) + 1e-6) in f64, every gradient
// scaled by min(coef, 1) with grad_scale (scaling by exactly 1 leaves it
// bit-identical, as eager's "no scaling").
static void add_clip(weft_graph *g, int n, weft_value *grad, double max_norm) {
    weft_value total = WEFT_VALUE_NONE;
    for (int i = 0; i < n; i++) {
        if (grad[i].id < 0) continue;
        if (total.id < 0) total = const_scalar(g, 0, WEFT_F64);
        total = op2(g, "grad_sumsq", total, grad[i]);
    }
    if (total.id < 0) return;
    weft_value norm = opf(g, "add_scalar", op1(g, "sqrt", total), 1e-6);
    weft_value coef = op2(g, "div", const_scalar(g, max_norm, WEFT_F64), norm);
    coef = op2(g, "minimum", coef, const_scalar(g, 1.0, WEFT_F64));
    for (int i = 0; i < n; i++)
        if (grad[i].id >= 0) grad[i] = op2(g, "grad_scale", grad[i], coef);
}

// WEFT_GRAPH_PASSES: "0" turns every pass off (handled by the caller); else a
// comma list of passes to turn off ("-fusion,-remat") or on ("+hfuse") on top
// of weft_graph_passes_all(), to measure what each pass does to a model.
static weft_status passes_from_env(const char *env, weft_graph_passes *ps) {
    static const struct {
        const char *name;
        size_t off;
    } flags[] = {{"constant_folding", offsetof(weft_graph_passes, constant_folding)},
                 {"cse", offsetof(weft_graph_passes, cse)},
                 {"dce", offsetof(weft_graph_passes, dce)},
                 {"algebraic", offsetof(weft_graph_passes, algebraic)},
                 {"fast_math", offsetof(weft_graph_passes, fast_math)},
                 {"fusion", offsetof(weft_graph_passes, fusion)},
                 {"transpose_fold", offsetof(weft_graph_passes, transpose_fold)},
                 {"hfuse", offsetof(weft_graph_passes, hfuse)},
                 {"layout", offsetof(weft_graph_passes, layout)},
                 {"remat", offsetof(weft_graph_passes, remat)}};
    for (const char *p = env; *p;) {
        size_t len = strcspn(p, ",");
        bool on = *p == '+';
        if ((*p != '+' && *p != '-') || len < 2)
            return GERR(WEFT_ERR_ARG, "WEFT_GRAPH_PASSES: '%.*s': expected +name or -name", (int)len, p);
        size_t k = 0, n = sizeof flags / sizeof *flags;
        while (k < n && (strlen(flags[k].name) != len - 1 || strncmp(flags[k].name, p + 1, len - 1))) k++;
        if (k == n) return GERR(WEFT_ERR_ARG, "WEFT_GRAPH_PASSES: unknown pass '%.*s'", (int)len - 1, p + 1);
        *(bool *)((char *)ps + flags[k].off) = on;
        p += len + (p[len] == ',');
    }
    return WEFT_OK;
}

// Gradients of the loss w.r.t. every parameter by symbolic autodiff. A
// parameter the loss does not depend on gets no update (updated[i] false), as
// with the eager optimiser, whose such parameters have no .grad: found by a
// forward sweep from its variable through differentiable op outputs.
static weft_status symbolic_grads(weft_graph *g, weft_value loss, int np, const weft_value *vp, weft_value *vg,
                                  bool *updated) {
    int nv = weft_graph_value_count(g), nn = weft_graph_node_count(g);
    uint8_t *reach = malloc((size_t)(nv ? nv : 1));
    weft_value *wrt = malloc(sizeof *wrt * (size_t)(np ? np : 1));
    int *idx = malloc(sizeof *idx * (size_t)(np ? np : 1)), n_wrt = 0;
    weft_status st = WEFT_OK;
    if (!reach || !wrt || !idx) st = GERR(WEFT_ERR_OOM, "out of memory");
    for (int i = 0; !st && i < np; i++) {
        memset(reach, 0, (size_t)nv);
        reach[vp[i].id] = 1;
        for (int n = 0; n < nn; n++) {
            const weft_gnode *x = &g->nodes[n];
            if (x->kind != WEFT_NODE_OP || (x->op->flags & WEFT_OPF_NONDIFF)) continue;
            bool any = false;
            for (int k = 0; k < x->n_in && !any; k++) any = reach[x->in[k]];
            for (int j = 0; any && j < x->n_out; j++) reach[x->out0 + j] = 1;
        }
        updated[i] = reach[loss.id];
        vg[i] = WEFT_VALUE_NONE;
        if (updated[i]) idx[n_wrt] = i, wrt[n_wrt++] = vp[i];
    }
    weft_value *out = st ? NULL : malloc(sizeof *out * (size_t)(n_wrt ? n_wrt : 1));
    if (!st && !out) st = GERR(WEFT_ERR_OOM, "out of memory");
    if (!st && n_wrt) st = weft_graph_gradients(g, loss, n_wrt, wrt, out);
    for (int k = 0; !st && k < n_wrt; k++) vg[idx[k]] = out[k];
    free(out);
    free(reach);
    free(wrt);
    free(idx);
    return st;
}

// Free a step graph's fields.
static void gstep_free(gstep *s) {
    weft_graph_free(s->g);
    free(s->targets);
    memset(s, 0, sizeof *s);
}

// The optimiser's state tensor "<param>.<slot>" (borrowed).
static weft_tensor *state_of(const weft_run *r, int i, const char *slot) {
    char name[512];
    snprintf(name, sizeof name, "%s.%s", r->names[i], slot);
    return weft_optim_state_find(r->optim, name);
}

// Who reads each variable among nodes [0, n): pairs (variable node, reader
// node) in *pairs (malloc'd), reading through view ops too (a transposed
// weight aliases the variable's storage, so its consumers read the variable).
static weft_status var_readers(const weft_graph *g, int n, int32_t **pairs, int *n_pairs) {
    int32_t *root = malloc(((size_t)g->n_values + 1) * sizeof *root); // value -> variable node, -1
    size_t cap = 64, np = 0;
    int32_t *pr = malloc(cap * 2 * sizeof *pr);
    if (!root || !pr) {
        free(root);
        free(pr);
        return GERR(WEFT_ERR_OOM, "out of memory");
    }
    for (int v = 0; v < g->n_values; v++) {
        const weft_gnode *p = &g->nodes[g->values[v].node];
        root[v] = p->kind == WEFT_NODE_VARIABLE ? g->values[v].node : -1;
    }
    for (int id = 0; id < n; id++) { // data edges point to earlier nodes: one pass in id order
        const weft_gnode *x = &g->nodes[id];
        if (x->kind == WEFT_NODE_OP && (x->op->flags & WEFT_OPF_VIEW) && x->n_in > 0) root[x->out0] = root[x->in[0]];
        for (int k = 0; k < x->n_in; k++) {
            int32_t var = root[x->in[k]];
            if (var < 0) continue;
            bool dup = false;
            for (size_t e = np; e-- > 0 && pr[2 * e + 1] == id;) dup |= pr[2 * e] == var;
            if (dup) continue;
            if (np == cap) {
                int32_t *q = realloc(pr, cap * 4 * sizeof *pr);
                if (!q) {
                    free(root);
                    free(pr);
                    return GERR(WEFT_ERR_OOM, "out of memory");
                }
                pr = q, cap *= 2;
            }
            pr[2 * np] = var, pr[2 * np + 1] = id, np++;
        }
    }
    free(root);
    *pairs = pr, *n_pairs = (int)np;
    return WEFT_OK;
}

// Build the step graph for batch (x, y) into *s.
static weft_status build_step(weft_run *r, struct weft_graph_train *gt, weft_tensor *x, weft_tensor *y, gstep *s) {
    weft_optim_update u; // the op, attrs, state and host scalars of every parameter's update
    weft_optim_update_of(weft_optim_get_opts(r->optim), &u);
    enum { MS = WEFT_OPTIM_MAX_STATE };
    int np = r->n_params;
    weft_graph *g = s->g = weft_graph_new();
    // vs[i * MS + k]: parameter i's state u.state[k]
    weft_value *vp = calloc((size_t)np * (2 + MS) + 1, sizeof *vp), *vg = vp + np, *vs = vp + 2 * np;
    if (!g || !vp) {
        free(vp);
        return GERR(WEFT_ERR_OOM, "out of memory");
    }
    weft_status st = WEFT_OK;
    // 1. trace one eager forward + backward. Parameters and optimiser state are
    //    declared first, so they become named variables sharing eager storage.
    weft_tensor *logits = NULL, *loss = NULL;
    if ((st = weft_graph_trace_begin(g))) goto done;
    s->x = weft_graph_trace_input(g, x, "x");
    s->y = weft_graph_trace_input(g, y, "y");
    for (int i = 0; i < np; i++) {
        vp[i] = weft_graph_trace_variable(g, r->params[i], r->names[i]);
        for (int k = 0; k < u.n_state; k++) {
            weft_tensor *t = state_of(r, i, u.state[k]);
            char nm[512];
            snprintf(nm, sizeof nm, "optim.%s.%s", r->names[i], u.state[k]);
            weft_value v = t ? weft_graph_trace_variable(g, t, nm) : WEFT_VALUE_NONE;
            if (v.id < 0 && !st) st = t ? weft_last_status() : GERR(WEFT_ERR_STATE, "no optimiser state %s", nm);
            vs[i * MS + k] = v;
        }
        if (vp[i].id < 0 && !st) st = weft_last_status();
    }
    if (!st && (s->x.id < 0 || s->y.id < 0)) st = weft_last_status();
    if (!st) { // under [net] precision's autocast, as the eager step: the casts are traced ops
        weft_dtype prev_ac = weft_autocast_get();
        weft_autocast_set(weft_run_autocast(r));
        logits = weft_module_forward(r->net, x);
        loss = logits ? weft_model_loss(r->cfg, logits, y) : NULL;
        weft_autocast_set(prev_ac);
        if (!loss) st = weft_last_status();
    }
    if (!st) s->loss = weft_graph_trace_output(g, loss);
    // The backward: symbolic (weft_graph_gradients from the op table's rules,
    // nothing executed) unless WEFT_GRAPH_BACKWARD=trace asks for the traced
    // weft_backward. Both record the same rules.
    const char *bw = getenv("WEFT_GRAPH_BACKWARD");
    bool traced_bw = bw && !strcmp(bw, "trace");
    if (bw && *bw && !traced_bw && strcmp(bw, "symbolic") && !st)
        st = GERR(WEFT_ERR_ARG, "WEFT_GRAPH_BACKWARD='%s': expected 'symbolic' or 'trace'", bw);
    if (!st && traced_bw) st = weft_backward(loss, NULL, NULL);
    for (int i = 0; !st && traced_bw && i < np; i++) {
        weft_tensor *gr = weft_tensor_grad(r->params[i]);
        vg[i] = gr ? weft_graph_trace_output(g, gr) : WEFT_VALUE_NONE;
        gt->updated[i] = gr != NULL; // no gradient: no update, as the eager optimiser
        if (gr && vg[i].id < 0) st = weft_last_status();
    }
    weft_status st_end = weft_graph_trace_end(g);
    if (!st) st = st_end;
    if (!st && !traced_bw) st = symbolic_grads(g, s->loss, np, vp, vg, gt->updated);
    weft_tensor_free(logits);
    weft_tensor_free(loss);
    // The traced step only computed gradients: drop them so the first real step is not doubled.
    weft_optim_zero_grad(r->optim);
    if (st) goto done;
    int n_traced = weft_graph_node_count(g);

    // 2. the host scalars the update reads
    for (int k = 0; k < N_SC; k++) s->sc[k] = WEFT_VALUE_NONE;
    for (int k = 0; k < u.n_scalar; k++) {
        char nm[64];
        sc_name(u.scalar[k], nm, sizeof nm);
        if ((s->sc[u.scalar[k]] = weft_graph_placeholder(g, nm, 0, NULL, WEFT_F64)).id < 0) {
            st = weft_last_status();
            goto done;
        }
    }

    // 3. clipping, then one fused update op per parameter (src/ops/def_optim.c)
    if (r->cfg->net.clip > 0) add_clip(g, np, vg, r->cfg->net.clip);
    s->targets = calloc((size_t)np * (1 + MS) + 1, sizeof *s->targets);
    int32_t *rd = NULL;
    int n_rd = 0;
    if (!s->targets || (st = var_readers(g, n_traced, &rd, &n_rd))) {
        if (!st) st = GERR(WEFT_ERR_OOM, "out of memory");
        goto done;
    }
    for (int i = 0; !st && i < np; i++) {
        if (vg[i].id < 0) continue;
        const char *pname = r->names[i];
        // op(p, state..., g, scalars...) -> (p', state'...), as weft_optim_step runs it
        weft_value in[2 + MS + WEFT_OPTIM_MAX_SC], out[1 + MS], var[1 + MS];
        int n_in = 0, n_out = 1 + u.n_state;
        var[0] = vp[i];
        for (int k = 0; k < u.n_state; k++) var[1 + k] = vs[i * MS + k];
        for (int k = 0; k < n_out; k++) in[n_in++] = var[k];
        in[n_in++] = vg[i];
        for (int k = 0; k < u.n_scalar; k++) in[n_in++] = s->sc[u.scalar[k]];
        char nm[560];
        snprintf(nm, sizeof nm, "update.%s", pname);
        st = weft_graph_op_named(g, nm, u.op->name, n_in, in, u.attrs.i, 16, u.attrs.f, 4, out);
        // Per-variable ordering: the update writes p (and its state) in place,
        // so it waits for exactly the nodes that read their old values.
        weft_node_id un = st ? WEFT_NODE_NONE : weft_graph_value_node(g, out[0]);
        for (int k = 0; k < n_out && !st; k++) {
            int32_t vn = g->values[var[k].id].node;
            for (int e = 0; e < n_rd && !st; e++)
                if (rd[2 * e] == vn && rd[2 * e + 1] != un.id)
                    st = weft_graph_add_control_dep(g, un, (weft_node_id){rd[2 * e + 1]});
        }
        for (int k = 0; k < n_out && !st; k++) {
            snprintf(nm, sizeof nm, "update.%s.%s", pname, k == 0 ? "param" : u.state[k - 1]);
            weft_value a = weft_graph_assign(g, nm, var[k], out[k]);
            if (a.id < 0) st = weft_last_status();
            else s->targets[s->n_targets++] = weft_graph_value_node(g, a);
        }
        if (st) st = weft_error(st, "train --graph: update of '%s': %s", pname, weft_last_error());
    }
    free(rd);
    if (st) goto done;

    // 4. optimisation passes (WEFT_GRAPH_PASSES=0 turns them off)
    const char *env = getenv("WEFT_GRAPH_PASSES");
    if (!env || strcmp(env, "0")) {
        weft_value keep[1] = {s->loss};
        weft_graph_passes ps = weft_graph_passes_all();
        if (env && (st = passes_from_env(env, &ps))) goto done;
        weft_graph *opt = weft_graph_optimize_nodes(g, 1, keep, keep, s->n_targets, s->targets, s->targets, &ps,
                                                    &gt->pass_stats);
        if (!opt) {
            st = weft_last_status();
            goto done;
        }
        s->loss = keep[0];
        s->x = weft_graph_find_value(opt, "x");
        s->y = weft_graph_find_value(opt, "y");
        for (int k = 0; k < N_SC; k++) {
            char nm[64];
            sc_name(k, nm, sizeof nm);
            if (s->sc[k].id >= 0) s->sc[k] = weft_graph_find_value(opt, nm);
        }
        weft_graph_free(g);
        s->g = opt;
    }
    s->xnd = weft_tensor_ndim(x), s->ynd = weft_tensor_ndim(y);
    memcpy(s->xs, weft_tensor_sizes(x), sizeof(int64_t) * (size_t)s->xnd);
    memcpy(s->ys, weft_tensor_sizes(y), sizeof(int64_t) * (size_t)s->ynd);
    s->xdt = weft_tensor_dtype(x), s->ydt = weft_tensor_dtype(y);
done:
    free(vp);
    if (st) gstep_free(s);
    return st;
}

static bool same_shape(int nd, const int64_t *s, const weft_tensor *t) {
    return weft_tensor_ndim(t) == nd && !memcmp(weft_tensor_sizes(t), s, sizeof(int64_t) * (size_t)nd);
}

void weft_graph_train_free(weft_run *r) {
    struct weft_graph_train *gt = r->graph;
    if (!gt) return;
    for (int i = 0; i < gt->n; i++) gstep_free(&gt->s[i]);
    for (int k = 0; k < N_SC; k++) weft_tensor_free(gt->sc[k]);
    free(gt->updated);
    free(gt);
    r->graph = NULL;
}

static weft_status graph_step(weft_run *r, weft_tensor *x, weft_tensor *y, double *loss_out);

// The step on the run's device: the batch (host memory from the loader) is
// moved there first, so the trace and every run see device feeds.
weft_status weft_graph_train_step(weft_run *r, weft_tensor *x, weft_tensor *y, double *loss_out) {
    weft_tensor *xd = weft_run_to_device(r, x), *yd = xd ? weft_run_to_device(r, y) : NULL;
    weft_status st = yd ? graph_step(r, xd, yd, loss_out) : weft_last_status();
    weft_tensor_free(xd);
    weft_tensor_free(yd);
    return st;
}

static weft_status graph_step(weft_run *r, weft_tensor *x, weft_tensor *y, double *loss_out) {
    weft_status st;
    struct weft_graph_train *gt = r->graph;
    if (!gt) {
        if ((st = weft_graph_train_check(r))) return st;
        gt = r->graph = calloc(1, sizeof *gt);
        if (gt) gt->updated = calloc((size_t)r->n_params + 1, sizeof(bool));
        if (!gt || !gt->updated) {
            weft_graph_train_free(r);
            return GERR(WEFT_ERR_OOM, "out of memory");
        }
    }
    gstep *s = NULL;
    for (int i = 0; i < gt->n && !s; i++)
        if (same_shape(gt->s[i].xnd, gt->s[i].xs, x) && same_shape(gt->s[i].ynd, gt->s[i].ys, y) &&
            gt->s[i].xdt == weft_tensor_dtype(x) && gt->s[i].ydt == weft_tensor_dtype(y))
            s = &gt->s[i];
    if (!s) {
        if (gt->n == MAX_SHAPES) return GERR(WEFT_ERR_SHAPE, "more than %d batch shapes", MAX_SHAPES);
        if ((st = build_step(r, gt, x, y, &gt->s[gt->n]))) return st;
        s = &gt->s[gt->n++];
    }

    // Host scalars of this step, from the same description weft_optim_step uses.
    double lr = weft_lr_at(&r->sched, r->step + 1); // step k uses lr(k), k from 1
    weft_optim_set_lr(r->optim, lr);
    int64_t pstep = 1; // the parameters' update count after this step (all updated parameters step together)
    for (int i = 0; i < r->n_params; i++)
        if (gt->updated[i]) {
            weft_tensor *t = state_of(r, i, "step");
            pstep = t ? (int64_t)weft_tensor_item(t) + 1 : 1;
            break;
        }
    double v[N_SC];
    weft_optim_scalar_values(weft_optim_get_opts(r->optim), pstep, v); // at lr, set above
    weft_value fv[2 + N_SC];
    weft_tensor *ft[2 + N_SC];
    int nf = 0;
    fv[nf] = s->x, ft[nf++] = x;
    fv[nf] = s->y, ft[nf++] = y;
    st = WEFT_OK;
    for (int k = 0; k < N_SC && !st; k++) {
        if (s->sc[k].id < 0) continue;
        if (!gt->sc[k] && !(gt->sc[k] = weft_tensor_empty_on(0, NULL, WEFT_F64, r->device))) st = weft_last_status();
        else st = weft_tensor_fill_(gt->sc[k], v[k]);
        fv[nf] = s->sc[k], ft[nf++] = gt->sc[k];
    }
    weft_tensor *loss = NULL;
    if (!st) st = weft_graph_run(s->g, nf, fv, ft, 1, &s->loss, &loss, s->n_targets, s->targets);
    if (st) return st;
    double l = weft_tensor_item(loss);
    weft_tensor_free(loss);
    // The host's share of the optimiser's state: its step count and each parameter's.
    weft_optim_set_step_count(r->optim, weft_optim_step_count(r->optim) + 1);
    for (int i = 0; i < r->n_params; i++) {
        weft_tensor *t = gt->updated[i] ? state_of(r, i, "step") : NULL;
        if (t && (st = weft_tensor_fill_(t, (double)pstep))) return st;
    }
    if (!isfinite(l)) // the update ran in the same graph run; the last good checkpoint is kept
        return weft_error(WEFT_ERR_STATE, "step %lld: the loss is %s; stopping (the last good checkpoint is kept)",
                          (long long)(r->step + 1), isnan(l) ? "NaN" : "infinite");
    r->step++;
    *loss_out = l;
    return WEFT_OK;
}

weft_graph *weft_graph_train_graph(const weft_run *r, int i) {
    return r->graph && i >= 0 && i < r->graph->n ? r->graph->s[i].g : NULL;
}
