// The backward engine: reverse topological walk over recorded nodes.
//
// 1. A depth-first pass from the roots counts, for every reachable node, the
//    edges that will deliver a gradient to it (deps), and for every leaf the
//    contributions it will receive (bw_pending).
// 2. Nodes whose deps reach zero are ready; among ready nodes the most
//    recently created runs first (like PyTorch), which keeps peak memory low.
// 3. A node's backward rule turns its output gradients into input gradients;
//    they are summed into the producer's buffer or into the leaf's .grad.
//    When a leaf has received all its contributions its hooks fire.
#include <stdlib.h>
#include <string.h>

#include "autograd_impl.h"

// A growable array that starts in inline storage: small graphs (the common
// eager case) run backward without touching malloc.
#define VEC_INLINE 32
typedef struct {
    void **v;
    int n, cap;
    void *inl[VEC_INLINE];
} vec;

static void vec_init(vec *a) {
    a->v = a->inl;
    a->n = 0;
    a->cap = VEC_INLINE;
}
static void vec_free(vec *a) {
    if (a->v != a->inl) free(a->v);
}
static bool vec_push(vec *a, void *x) {
    if (a->n == a->cap) {
        int cap = a->cap * 2;
        void **v = a->v == a->inl ? malloc(sizeof(void *) * (size_t)cap) : realloc(a->v, sizeof(void *) * (size_t)cap);
        if (!v) return false;
        if (a->v == a->inl) memcpy(v, a->inl, sizeof a->inl);
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return true;
}

// max-heap on seq
static void heap_push(vec *h, weft_node *n) {
    int i = h->n - 1;
    h->v[i] = n;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (((weft_node *)h->v[p])->seq >= n->seq) break;
        h->v[i] = h->v[p];
        h->v[p] = n;
        i = p;
    }
}
static weft_node *heap_pop(vec *h) {
    weft_node *top = h->v[0];
    weft_node *last = h->v[--h->n];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        uint64_t ms = last->seq;
        if (l < h->n && ((weft_node *)h->v[l])->seq > ms) m = l, ms = ((weft_node *)h->v[l])->seq;
        if (r < h->n && ((weft_node *)h->v[r])->seq > ms) m = r;
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n) h->v[i] = last;
    return top;
}

static uint64_t g_epoch; // atomic

// acc = acc + g (takes ownership of g).
static weft_status accumulate(weft_tensor **acc, weft_tensor *g) {
    if (!*acc) {
        *acc = g;
        return WEFT_OK;
    }
    weft_tensor *s = weft_add(*acc, g);
    weft_tensor_free(g);
    if (!s) return weft_last_status();
    weft_tensor_free(*acc);
    *acc = s;
    return WEFT_OK;
}

static weft_status check_grad(const char *op, const weft_in_meta *m, const weft_tensor *g, int i) {
    if (!weft_shape_equal(m->ndim, m->sizes, g->ndim, g->sizes) || m->dtype != (weft_dtype)g->dtype) {
        char a[96], b[96];
        return weft_error(WEFT_ERR_STATE, "%s backward: gradient of input %d is %s %s, expected %s %s", op, i,
                          weft_dtype_name((weft_dtype)g->dtype), weft_tensor_shape_str(g, a, sizeof a),
                          weft_dtype_name(m->dtype), weft_shape_fmt(m->ndim, m->sizes, b, sizeof b));
    }
    return WEFT_OK;
}

// Add g into a leaf's .grad. Steal g only when nobody else can see its memory.
static weft_status leaf_accumulate(weft_tensor *leaf, weft_tensor *g, bool create_graph) {
    if (!leaf->grad && !create_graph && (g->refcount > 1 || g->storage->refcount > 1 || g->grad_fn)) {
        weft_tensor *c = weft_tensor_clone(g);
        weft_tensor_free(g);
        if (!c) return weft_last_status();
        g = c;
    }
    weft_status st = accumulate(&leaf->grad, g);
    // A .grad with memory of its own (stolen, cloned, or the sum) counts as a gradient.
    if (!st && leaf->grad->storage->refcount == 1) weft_tensor_memory_tag(leaf->grad, WEFT_MEM_GRADIENTS);
    return st;
}

static void fire_hooks(weft_tensor *leaf) {
    for (int k = 0; k < leaf->n_hooks; k++) leaf->hooks[k].fn(leaf, leaf->hooks[k].user);
}

static weft_status released_error(const weft_node *n) {
    return weft_error(WEFT_ERR_STATE,
                      "%s backward: saved tensors were already freed by an earlier backward; pass retain_graph to "
                      "backward through the graph a second time",
                      n->op->name);
}

static weft_status run_node(weft_node *n, bool create_graph, weft_tensor **gin) {
    bool any = false;
    for (int j = 0; j < n->n_out; j++) any |= n->gbuf[j] != NULL;
    for (int i = 0; i < n->n_in; i++) gin[i] = NULL;
    if (!any) return WEFT_OK;
    if (n->released) return released_error(n);
    if (!n->op->backward) return weft_error(WEFT_ERR_UNSUPPORTED, "%s: this op is not differentiable (no backward rule; e.g. a fused backward op under create_graph)", n->op->name);
    bool needs[64], *need = n->n_in <= 64 ? needs : malloc((size_t)n->n_in);
    weft_tensor *outs_local[WEFT_MAX_OP_OUT] = {0};
    if (!need) return weft_error(WEFT_ERR_OOM, "backward: out of memory");
    for (int i = 0; i < n->n_in; i++) need[i] = n->next[i].fn || n->next[i].leaf;
    weft_tensor *const *outs = n->saved_out;
    if (create_graph) {
        // Saved outputs were stored detached (else output -> node -> output is a
        // cycle); for higher-order gradients give them their history back.
        for (int j = 0; j < n->n_out; j++) {
            weft_tensor *s = n->saved_out[j];
            if (!s) continue;
            weft_tensor *a = weft_tensor_detach(s);
            if (!a) break;
            a->requires_grad = true;
            a->grad_fn = n;
            a->output_nr = j;
            weft_node_ref(n);
            outs_local[j] = a;
        }
        outs = outs_local;
    }
    weft_bw_args b = {.op = n->op, .attrs = &n->attrs, .n_in = n->n_in, .n_out = n->n_out, .in = n->saved_in,
                      .in_meta = n->in_meta, .out = outs, .gout = n->gbuf, .needs = need, .gin = gin};
    weft_status st = n->op->backward(&b);
    for (int j = 0; j < n->n_out; j++) weft_tensor_free(outs_local[j]);
    if (need != needs) free(need);
    if (st != WEFT_OK) {
        for (int i = 0; i < n->n_in; i++) {
            weft_tensor_free(gin[i]);
            gin[i] = NULL;
        }
        return st;
    }
    for (int i = 0; i < n->n_in; i++)
        if (gin[i] && (st = check_grad(n->op->name, &n->in_meta[i], gin[i], i)) != WEFT_OK) return st;
    return WEFT_OK;
}

weft_status weft_backward_multi(int nr, weft_tensor *const *roots, weft_tensor *const *grads,
                                const weft_backward_opts *opts) {
    weft_backward_opts o = opts ? *opts : (weft_backward_opts){0};
    if (o.create_graph) o.retain_graph = true; // as PyTorch: the new graph still needs the saved tensors
    vec visited, stack, heap, leaves;
    vec_init(&visited);
    vec_init(&stack);
    vec_init(&heap);
    vec_init(&leaves);
    weft_tensor *gin_inl[8], *rg_inl[8], **gin = NULL;
    weft_status st = WEFT_OK;
    uint64_t epoch = __atomic_add_fetch(&g_epoch, 1, __ATOMIC_RELAXED);
    bool prev_mode = weft_grad_set_enabled(o.create_graph);
    int max_in = 1;

    // Root gradients.
    weft_tensor **rg = nr <= 8 ? rg_inl : calloc((size_t)nr, sizeof *rg);
    if (rg == rg_inl) memset(rg_inl, 0, sizeof rg_inl);
    if (!rg) {
        st = weft_error(WEFT_ERR_OOM, "backward: out of memory");
        goto done;
    }
    for (int r = 0; r < nr; r++) {
        weft_tensor *t = roots[r];
        if (!t) {
            st = weft_error(WEFT_ERR_ARG, "backward: root %d is NULL", r);
            goto done;
        }
        if (!t->requires_grad) {
            st = weft_error(WEFT_ERR_STATE, "backward: root %d does not require grad and has no grad_fn", r);
            goto done;
        }
        weft_tensor *g = grads ? grads[r] : NULL;
        if (g) {
            if (!weft_shape_equal(g->ndim, g->sizes, t->ndim, t->sizes) || g->dtype != t->dtype) {
                char a[96], b[96];
                st = weft_error(WEFT_ERR_SHAPE, "backward: gradient %s %s does not match root %s %s",
                                weft_dtype_name((weft_dtype)g->dtype), weft_tensor_shape_str(g, a, sizeof a),
                                weft_dtype_name((weft_dtype)t->dtype), weft_tensor_shape_str(t, b, sizeof b));
                goto done;
            }
            rg[r] = weft_tensor_ref(g);
        } else {
            if (t->numel != 1) {
                st = weft_error(WEFT_ERR_SHAPE, "backward: a gradient is needed for a root with %lld elements "
                                                "(implicit only for one-element roots)",
                                (long long)t->numel);
                goto done;
            }
            rg[r] = weft_tensor_ones_like(t);
            if (!rg[r]) {
                st = weft_last_status();
                goto done;
            }
        }
    }

    // 1. count dependencies
    for (int r = 0; r < nr; r++) {
        weft_node *n = roots[r]->grad_fn;
        if (n && n->epoch != epoch) {
            n->epoch = epoch;
            n->deps = 0;
            for (int j = 0; j < n->n_out; j++) n->gbuf[j] = NULL;
            if (!vec_push(&stack, n) || !vec_push(&visited, n)) goto oom;
        }
    }
    while (stack.n) {
        weft_node *n = stack.v[--stack.n];
        if (n->released) { // before any gradient reaches a leaf: nothing half accumulated
            st = released_error(n);
            goto done;
        }
        if (n->n_in > max_in) max_in = n->n_in;
        for (int i = 0; i < n->n_in; i++) {
            weft_edge *e = &n->next[i];
            if (e->fn) {
                if (e->fn->epoch != epoch) {
                    e->fn->epoch = epoch;
                    e->fn->deps = 0;
                    for (int j = 0; j < e->fn->n_out; j++) e->fn->gbuf[j] = NULL;
                    if (!vec_push(&stack, e->fn) || !vec_push(&visited, e->fn)) goto oom;
                }
                e->fn->deps++;
            } else if (e->leaf) {
                if (e->leaf->bw_pending++ == 0 && !vec_push(&leaves, e->leaf)) goto oom;
            }
        }
    }

    // Seed: roots that are leaves take their gradient directly.
    for (int r = 0; r < nr; r++) {
        weft_tensor *t = roots[r];
        weft_tensor *g = rg[r];
        rg[r] = NULL;
        if (t->grad_fn) {
            if ((st = accumulate(&t->grad_fn->gbuf[t->output_nr], g)) != WEFT_OK) goto done;
        } else {
            if ((st = leaf_accumulate(t, g, o.create_graph)) != WEFT_OK) goto done;
            if (t->bw_pending == 0) fire_hooks(t);
        }
    }
    for (int r = 0; r < nr; r++) {
        weft_node *n = roots[r]->grad_fn;
        if (n && n->deps == 0) {
            n->deps = -1; // queued once even if several roots share it
            if (!vec_push(&heap, n)) goto oom;
            heap_push(&heap, n);
        }
    }

    gin = max_in <= 8 ? gin_inl : calloc((size_t)max_in, sizeof *gin);
    if (gin == gin_inl) memset(gin_inl, 0, sizeof gin_inl);
    if (!gin) goto oom;
    // 2-3. run ready nodes, newest first
    while (heap.n) {
        weft_node *n = heap_pop(&heap);
        st = run_node(n, o.create_graph, gin);
        for (int j = 0; j < n->n_out; j++) {
            weft_tensor_free(n->gbuf[j]);
            n->gbuf[j] = NULL;
        }
        if (st != WEFT_OK) goto done;
        for (int i = 0; i < n->n_in; i++) {
            weft_edge *e = &n->next[i];
            weft_tensor *g = gin[i];
            gin[i] = NULL;
            if (e->fn) {
                if (g && (st = accumulate(&e->fn->gbuf[e->nr], g)) != WEFT_OK) goto done;
                if (--e->fn->deps == 0) {
                    e->fn->deps = -1;
                    if (!vec_push(&heap, e->fn)) goto oom;
                    heap_push(&heap, e->fn);
                }
            } else if (e->leaf) {
                if (g && (st = leaf_accumulate(e->leaf, g, o.create_graph)) != WEFT_OK) goto done;
                if (--e->leaf->bw_pending == 0) fire_hooks(e->leaf);
            } else {
                weft_tensor_free(g);
            }
        }
        if (!o.retain_graph) weft_node_free_saved(n);
    }
    goto done;
oom:
    st = weft_error(WEFT_ERR_OOM, "backward: out of memory");
done:
    // Leave no scratch behind, also after an error.
    for (int k = 0; k < visited.n; k++) {
        weft_node *n = visited.v[k];
        for (int j = 0; j < n->n_out; j++) {
            weft_tensor_free(n->gbuf[j]);
            n->gbuf[j] = NULL;
        }
        n->deps = 0;
    }
    for (int k = 0; k < leaves.n; k++) ((weft_tensor *)leaves.v[k])->bw_pending = 0;
    if (rg)
        for (int r = 0; r < nr; r++) weft_tensor_free(rg[r]);
    if (gin)
        for (int i = 0; i < max_in; i++) weft_tensor_free(gin[i]);
    if (rg != rg_inl) free(rg);
    if (gin != gin_inl) free(gin);
    vec_free(&visited);
    vec_free(&stack);
    vec_free(&heap);
    vec_free(&leaves);
    weft_grad_set_enabled(prev_mode);
    return st;
}

weft_status weft_backward(weft_tensor *root, weft_tensor *grad, const weft_backward_opts *opts) {
    weft_tensor *g[1] = {grad};
    return weft_backward_multi(1, &root, g, opts);
}
