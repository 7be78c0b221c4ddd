// Recording: one node per op call that involves a tensor requiring grad.
#include <stdlib.h>
#include <string.h>

#include "autograd_impl.h"

static _Thread_local bool g_grad_enabled = true;
static uint64_t g_seq; // atomic

bool weft_grad_set_enabled(bool enabled) {
    bool prev = g_grad_enabled;
    g_grad_enabled = enabled;
    return prev;
}
bool weft_grad_is_enabled(void) { return g_grad_enabled; }

void weft_node_ref(weft_node *n) { __atomic_fetch_add(&n->refcount, 1, __ATOMIC_RELAXED); }

// A builtin op's node that saved nothing (a cast, an add) can run its backward again, as in PyTorch: the
// autocast weight cache hands one cast to every micro-batch of a region, and each one's backward runs
// through it. A custom function's state is its own (a pipeline's send waits for a gradient once), so its
// node is released like one that saved tensors.
void weft_node_free_saved(weft_node *n) {
    bool any = false;
    for (int i = 0; i < n->n_in; i++) {
        any |= n->saved_in[i] != NULL;
        weft_tensor_free(n->saved_in[i]);
        n->saved_in[i] = NULL;
    }
    for (int j = 0; j < n->n_out; j++) {
        any |= n->saved_out[j] != NULL;
        weft_tensor_free(n->saved_out[j]);
        n->saved_out[j] = NULL;
    }
    n->released |= any || n->op->node_release != NULL;
}

// Releasing the last tensor of a long chain frees thousands of nodes; a
// worklist keeps that iterative instead of recursing once per node.
static _Thread_local weft_node *g_dead; // singly linked through gbuf (unused once dead)
static _Thread_local bool g_draining;

void weft_node_release(weft_node *n) {
    if (__atomic_sub_fetch(&n->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
    n->gbuf = (weft_tensor **)g_dead;
    g_dead = n;
    if (g_draining) return;
    g_draining = true;
    while (g_dead) {
        weft_node *d = g_dead;
        g_dead = (weft_node *)d->gbuf;
        weft_node_free_saved(d);
        for (int i = 0; i < d->n_in; i++) {
            if (d->next[i].fn) weft_node_release(d->next[i].fn);
            weft_tensor_free(d->next[i].leaf);
        }
        if (d->op->node_release) d->op->node_release(d->op, &d->attrs);
        free(d);
    }
    g_draining = false;
}

weft_status weft_autograd_record(const weft_op_def *op, int n_in, weft_tensor *const *in, const weft_attrs *attrs,
                                 int n_out, weft_tensor **out) {
    if (!g_grad_enabled) return WEFT_OK;
    bool any = false;
    for (int i = 0; i < n_in; i++) any |= in[i]->requires_grad;
    if (!any) return WEFT_OK;
    // One block: node, then its arrays.
    size_t sz = sizeof(weft_node) + (size_t)n_in * (sizeof(weft_edge) + sizeof(weft_in_meta) + sizeof(weft_tensor *)) +
                (size_t)n_out * (sizeof(weft_tensor *) * 2 + sizeof(weft_in_meta));
    weft_node *n = malloc(sz);
    if (!n) return weft_error(WEFT_ERR_OOM, "%s: out of memory recording autograd node", op->name);
    memset(n, 0, sizeof *n);
    char *p = (char *)(n + 1);
    n->next = (weft_edge *)p;
    p += (size_t)n_in * sizeof(weft_edge);
    n->in_meta = (weft_in_meta *)p;
    p += (size_t)n_in * sizeof(weft_in_meta);
    n->out_meta = (weft_in_meta *)p;
    p += (size_t)n_out * sizeof(weft_in_meta);
    n->saved_in = (weft_tensor **)p;
    p += (size_t)n_in * sizeof(weft_tensor *);
    n->saved_out = (weft_tensor **)p;
    p += (size_t)n_out * sizeof(weft_tensor *);
    n->gbuf = (weft_tensor **)p;
    n->refcount = 0; // references come from the outputs below
    n->op = op;
    n->attrs = *attrs;
    n->seq = __atomic_add_fetch(&g_seq, 1, __ATOMIC_RELAXED);
    n->n_in = n_in;
    n->n_out = n_out;
    for (int i = 0; i < n_in; i++) {
        weft_tensor *t = in[i];
        weft_in_meta *m = &n->in_meta[i];
        m->ndim = t->ndim;
        m->dtype = (weft_dtype)t->dtype;
        memcpy(m->sizes, t->sizes, sizeof(int64_t) * (size_t)t->ndim);
        n->next[i] = (weft_edge){0};
        if (t->requires_grad) {
            if (t->grad_fn) {
                weft_node_ref(t->grad_fn);
                n->next[i].fn = t->grad_fn;
                n->next[i].nr = t->output_nr;
            } else {
                n->next[i].leaf = weft_tensor_ref(t);
            }
        }
        n->saved_in[i] = (op->save & WEFT_SAVE_IN(i < 16 ? i : 15)) ? weft_tensor_ref(t) : NULL;
    }
    for (int j = 0; j < n_out; j++) {
        weft_tensor *o = out[j];
        weft_in_meta *m = &n->out_meta[j];
        m->ndim = o->ndim;
        m->dtype = (weft_dtype)o->dtype;
        memcpy(m->sizes, o->sizes, sizeof(int64_t) * (size_t)o->ndim);
        n->saved_out[j] = (op->save & WEFT_SAVE_OUT(j)) ? weft_tensor_detach(o) : NULL;
        n->gbuf[j] = NULL;
        // Only floating outputs carry gradients (argmax-like integer outputs do not).
        if (weft_dtype_is_float((weft_dtype)o->dtype)) {
            o->requires_grad = true;
            o->grad_fn = n;
            o->output_nr = j;
            weft_node_ref(n);
        }
    }
    if (n->refcount == 0) { // no differentiable output: nothing will ever reach this node
        n->refcount = 1;
        weft_node_release(n);
    }
    return WEFT_OK;
}

// ---- leaf API ----
weft_status weft_tensor_set_requires_grad(weft_tensor *t, bool rg) {
    if (!t) return weft_error(WEFT_ERR_ARG, "set_requires_grad: NULL tensor");
    if (t->grad_fn) return weft_error(WEFT_ERR_STATE, "set_requires_grad: only leaves can be changed (this is the output of %s)", t->grad_fn->op->name);
    if (rg && !weft_dtype_is_float((weft_dtype)t->dtype))
        return weft_error(WEFT_ERR_DTYPE, "set_requires_grad: only floating tensors can require grad (got %s)",
                          weft_dtype_name((weft_dtype)t->dtype));
    t->requires_grad = rg;
    return WEFT_OK;
}
bool weft_tensor_requires_grad(const weft_tensor *t) { return t && t->requires_grad; }
bool weft_tensor_is_leaf(const weft_tensor *t) { return t && !t->grad_fn; }
weft_tensor *weft_tensor_grad(const weft_tensor *t) { return t ? t->grad : NULL; }
void weft_tensor_zero_grad(weft_tensor *t) {
    if (!t) return;
    weft_tensor_free(t->grad);
    t->grad = NULL;
}
weft_status weft_tensor_set_grad(weft_tensor *t, weft_tensor *g) {
    if (!t) return weft_error(WEFT_ERR_ARG, "set_grad: NULL tensor");
    if (g && !weft_shape_equal(g->ndim, g->sizes, t->ndim, t->sizes)) {
        char a[96], b[96];
        return weft_error(WEFT_ERR_SHAPE, "set_grad: gradient shape %s differs from tensor shape %s",
                          weft_tensor_shape_str(g, a, sizeof a), weft_tensor_shape_str(t, b, sizeof b));
    }
    weft_tensor_ref(g);
    weft_tensor_free(t->grad);
    t->grad = g;
    weft_tensor_memory_tag(g, WEFT_MEM_GRADIENTS);
    return WEFT_OK;
}
const char *weft_tensor_grad_fn_name(const weft_tensor *t) { return t && t->grad_fn ? t->grad_fn->op->name : ""; }

int weft_tensor_add_grad_hook(weft_tensor *t, weft_grad_hook_fn fn, void *user) {
    if (!t || !fn) {
        weft_error(WEFT_ERR_ARG, "add_grad_hook: NULL argument");
        return -1;
    }
    weft_hook *h = realloc(t->hooks, sizeof(weft_hook) * (size_t)(t->n_hooks + 1));
    if (!h) {
        weft_error(WEFT_ERR_OOM, "add_grad_hook: out of memory");
        return -1;
    }
    t->hooks = h;
    h[t->n_hooks++] = (weft_hook){fn, user, ++t->next_hook_id};
    return t->next_hook_id;
}

weft_status weft_tensor_remove_grad_hook(weft_tensor *t, int id) {
    if (!t) return weft_error(WEFT_ERR_ARG, "remove_grad_hook: NULL tensor");
    for (int k = 0; k < t->n_hooks; k++)
        if (t->hooks[k].id == id) {
            memmove(&t->hooks[k], &t->hooks[k + 1], sizeof(weft_hook) * (size_t)(t->n_hooks - k - 1));
            t->n_hooks--;
            return WEFT_OK;
        }
    return weft_error(WEFT_ERR_ARG, "remove_grad_hook: no hook %d on this tensor", id);
}

void weft_tensor_free_hooks(weft_tensor *t) {
    free(t->hooks);
    t->hooks = NULL;
    t->n_hooks = 0;
}
