// Op entries of the index family: embedding, index_select, gather,
// scatter_add, concat (and stack on top of it), with the backward ops that
// scatter gradients back (embedding_backward, index_select_backward).
// Kernels: cpu/index.c. Attrs are documented in index.h.
#include <stdlib.h>
#include <string.h>

#include "index.h"

static weft_status check_index(const char *op, const weft_tensor *ix) {
    return weft_check_dtype(op, ix, WEFT_DT_INT, "the index");
}
// attrs come normalised from the constructors; an op applied directly (graph
// files) is still checked.
static weft_status check_dim(const char *op, const weft_tensor *t, int64_t dim) {
    if (dim >= 0 && dim < t->ndim) return WEFT_OK;
    return weft_error(WEFT_ERR_ARG, "%s: dim %lld is out of range for %d dims", op, (long long)dim, t->ndim);
}

// ---- inference ----
static weft_status infer_embedding(const weft_op_args *a, weft_out_meta *o) {
    const weft_tensor *w = a->in[0], *ix = a->in[1];
    weft_status st = check_index("embedding", ix);
    if (st) return st;
    if (w->ndim != 2) {
        char s[96];
        return weft_error(WEFT_ERR_SHAPE, "embedding: weight must be 2-D (V,D), got %s", weft_tensor_shape_str(w, s, sizeof s));
    }
    if (ix->ndim + 1 > WEFT_MAX_DIMS)
        return weft_error(WEFT_ERR_SHAPE, "embedding: indices have %d dims (at most %d)", ix->ndim, WEFT_MAX_DIMS - 1);
    weft_meta_set(o, ix->ndim, ix->sizes, (weft_dtype)w->dtype);
    o->sizes[o->ndim++] = w->sizes[1];
    return WEFT_OK;
}
static weft_status infer_embedding_bw(const weft_op_args *a, weft_out_meta *o) {
    const weft_tensor *g = a->in[0], *ix = a->in[1];
    weft_status st = check_index("embedding_backward", ix);
    if (st) return st;
    if (g->ndim != ix->ndim + 1 || !weft_shape_equal(ix->ndim, ix->sizes, ix->ndim, g->sizes)) {
        char s[96], t[96];
        return weft_error(WEFT_ERR_SHAPE, "embedding_backward: gradient %s does not match indices %s plus one dim",
                          weft_tensor_shape_str(g, s, sizeof s), weft_tensor_shape_str(ix, t, sizeof t));
    }
    if (a->attrs->i[0] < 0) // the rows V; the kernel checks each index against it
        return weft_error(WEFT_ERR_ARG, "embedding_backward: %lld rows", (long long)a->attrs->i[0]);
    int64_t sz[2] = {a->attrs->i[0], g->sizes[g->ndim - 1]};
    weft_meta_set(o, 2, sz, (weft_dtype)g->dtype);
    return WEFT_OK;
}
static weft_status infer_index_select(const weft_op_args *a, weft_out_meta *o) {
    const weft_tensor *t = a->in[0], *ix = a->in[1];
    weft_status st = check_index("index_select", ix);
    if (st || (st = check_dim("index_select", t, a->attrs->i[0]))) return st;
    int dim = (int)a->attrs->i[0];
    if (ix->ndim > 1) return weft_error(WEFT_ERR_SHAPE, "index_select: index must be 1-D, got %d dims", ix->ndim);
    weft_meta_set(o, t->ndim, t->sizes, (weft_dtype)t->dtype);
    o->sizes[dim] = ix->numel;
    return WEFT_OK;
}
static weft_status infer_index_select_bw(const weft_op_args *a, weft_out_meta *o) {
    const weft_tensor *g = a->in[0], *ix = a->in[1];
    weft_status st = check_index("index_select_backward", ix);
    if (st || (st = check_dim("index_select_backward", g, a->attrs->i[0]))) return st;
    int dim = (int)a->attrs->i[0];
    if (ix->ndim > 1 || g->sizes[dim] != ix->numel)
        return weft_error(WEFT_ERR_SHAPE, "index_select_backward: gradient and index do not match");
    if (a->attrs->i[1] < 0) // the input's size along dim; the kernel checks each index against it
        return weft_error(WEFT_ERR_ARG, "index_select_backward: size %lld", (long long)a->attrs->i[1]);
    weft_meta_set(o, g->ndim, g->sizes, (weft_dtype)g->dtype);
    o->sizes[dim] = a->attrs->i[1];
    return WEFT_OK;
}
// torch.gather/scatter rules: same ndim; index no larger than t off dim (and than src everywhere).
static weft_status check_gather_shapes(const char *op, const weft_tensor *t, const weft_tensor *ix,
                                       const weft_tensor *src, int dim) {
    char s[96], u[96];
    if (ix->ndim != t->ndim || (src && src->ndim != t->ndim))
        return weft_error(WEFT_ERR_SHAPE, "%s: index %s must have as many dims as the input %s", op,
                          weft_tensor_shape_str(ix, s, sizeof s), weft_tensor_shape_str(t, u, sizeof u));
    for (int d = 0; d < t->ndim; d++) {
        if (d != dim && ix->sizes[d] > t->sizes[d])
            return weft_error(WEFT_ERR_SHAPE, "%s: index %s is larger than the input %s in dim %d", op,
                              weft_tensor_shape_str(ix, s, sizeof s), weft_tensor_shape_str(t, u, sizeof u), d);
        if (src && ix->sizes[d] > src->sizes[d])
            return weft_error(WEFT_ERR_SHAPE, "%s: index %s is larger than src %s in dim %d", op,
                              weft_tensor_shape_str(ix, s, sizeof s), weft_tensor_shape_str(src, u, sizeof u), d);
    }
    return WEFT_OK;
}
static weft_status infer_gather(const weft_op_args *a, weft_out_meta *o) {
    const weft_tensor *t = a->in[0], *ix = a->in[1];
    weft_status st = check_index("gather", ix);
    if (st || (st = check_dim("gather", t, a->attrs->i[0])) ||
        (st = check_gather_shapes("gather", t, ix, NULL, (int)a->attrs->i[0])))
        return st;
    weft_meta_set(o, ix->ndim, ix->sizes, (weft_dtype)t->dtype);
    return WEFT_OK;
}
static weft_status infer_scatter_add(const weft_op_args *a, weft_out_meta *o) {
    const weft_tensor *t = a->in[0], *ix = a->in[1], *src = a->in[2];
    weft_status st = check_index("scatter_add", ix);
    if (st || (st = check_dim("scatter_add", t, a->attrs->i[0]))) return st;
    weft_tensor *ts[2] = {a->in[0], a->in[2]};
    if ((st = weft_check_same_dtype("scatter_add", 2, ts))) return st;
    if ((st = check_gather_shapes("scatter_add", t, ix, src, (int)a->attrs->i[0]))) return st;
    weft_meta_set(o, t->ndim, t->sizes, (weft_dtype)t->dtype);
    return WEFT_OK;
}
static weft_status infer_concat(const weft_op_args *a, weft_out_meta *o) {
    const weft_tensor *t0 = a->in[0];
    weft_status st = weft_check_same_dtype("concat", a->n_in, a->in);
    if (st || (st = check_dim("concat", t0, a->attrs->i[0]))) return st;
    int dim = (int)a->attrs->i[0];
    weft_meta_set(o, t0->ndim, t0->sizes, (weft_dtype)t0->dtype);
    o->sizes[dim] = 0;
    for (int i = 0; i < a->n_in; i++) {
        const weft_tensor *t = a->in[i];
        bool ok = t->ndim == t0->ndim;
        for (int d = 0; ok && d < t0->ndim; d++) ok = d == dim || t->sizes[d] == t0->sizes[d];
        if (!ok) {
            char s[96], u[96];
            return weft_error(WEFT_ERR_SHAPE, "concat: input %d has shape %s, which does not match %s outside dim %d", i,
                              weft_tensor_shape_str(t, s, sizeof s), weft_tensor_shape_str(t0, u, sizeof u), dim);
        }
        if (t->sizes[dim] > WEFT_MAX_NUMEL - o->sizes[dim]) // the sum is checked in full later; keep it from overflowing
            return weft_error(WEFT_ERR_SHAPE, "concat: the inputs add up to too many elements along dim %d", dim);
        o->sizes[dim] += t->sizes[dim];
    }
    return WEFT_OK;
}

// ---- internal constructors of the backward ops ----
extern weft_op_def weft_op_embedding_backward, weft_op_index_select_backward;

static weft_tensor *embedding_backward(weft_tensor *g, weft_tensor *ix, int64_t V) {
    weft_tensor *in[2] = {g, ix};
    weft_attrs at = {.i = {V}};
    return weft_op_apply1(&weft_op_embedding_backward, 2, in, &at);
}
static weft_tensor *index_select_backward(weft_tensor *g, int dim, weft_tensor *ix, int64_t size) {
    weft_tensor *in[2] = {g, ix};
    weft_attrs at = {.i = {dim, size}};
    return weft_op_apply1(&weft_op_index_select_backward, 2, in, &at);
}

// ---- backward rules (in terms of ops, so they differentiate again) ----
static weft_status done(const weft_bw_args *b) {
    for (int i = 0; i < b->n_in; i++)
        if (b->needs[i] && !b->gin[i]) return weft_last_status() ? weft_last_status() : WEFT_ERR_STATE;
    return WEFT_OK;
}
static weft_status bw_embedding(const weft_bw_args *b) {
    if (b->needs[0]) b->gin[0] = embedding_backward(b->gout[0], b->in[1], b->in_meta[0].sizes[0]);
    return done(b);
}
static weft_status bw_embedding_bw(const weft_bw_args *b) { // linear in g: its adjoint is the lookup
    if (b->needs[0]) b->gin[0] = weft_embedding(b->gout[0], b->in[1]);
    return done(b);
}
static weft_status bw_index_select(const weft_bw_args *b) {
    int dim = (int)b->attrs->i[0];
    if (b->needs[0]) b->gin[0] = index_select_backward(b->gout[0], dim, b->in[1], b->in_meta[0].sizes[dim]);
    return done(b);
}
static weft_status bw_index_select_bw(const weft_bw_args *b) {
    if (b->needs[0]) b->gin[0] = weft_index_select(b->gout[0], (int)b->attrs->i[0], b->in[1]);
    return done(b);
}
static weft_status bw_gather(const weft_bw_args *b) { // scatter_add of g into zeros of t's shape
    if (b->needs[0]) {
        const weft_in_meta *m = &b->in_meta[0];
        // a broadcast zero, not a full tensor: scatter_add copies it into its output anyway
        weft_tensor *z0 = weft_tensor_full_on(1, (const int64_t[]){1}, m->dtype, 0, b->gout[0]->device);
        weft_tensor *z = weft_expand(z0, m->ndim, m->sizes);
        b->gin[0] = weft_scatter_add(z, (int)b->attrs->i[0], b->in[1], b->gout[0]);
        weft_tensor_free(z0);
        weft_tensor_free(z);
    }
    return done(b);
}
// Zero-pad t (at the end of each dim) to sizes, with slice_backward (differentiable).
static weft_tensor *pad_to(weft_tensor *t, int nd, const int64_t *sizes) {
    weft_tensor *cur = weft_tensor_ref(t);
    int64_t sz[WEFT_MAX_DIMS];
    memcpy(sz, t->sizes, sizeof(int64_t) * (size_t)nd);
    for (int d = 0; d < nd && cur; d++) {
        if (sz[d] == sizes[d]) continue;
        weft_attrs at = {.i = {d, 0, sz[d], 1, nd}};
        sz[d] = sizes[d];
        memcpy(&at.i[5], sz, sizeof(int64_t) * (size_t)nd);
        weft_tensor *next = weft_op_apply1(weft_op_find("slice_backward"), 1, &cur, &at);
        weft_tensor_free(cur);
        cur = next;
    }
    return cur;
}
static weft_status bw_scatter_add(const weft_bw_args *b) {
    weft_tensor *g = b->gout[0];
    if (b->needs[0]) b->gin[0] = weft_tensor_ref(g);
    if (b->needs[2]) {
        const weft_in_meta *m = &b->in_meta[2];
        weft_tensor *gs = weft_gather(g, (int)b->attrs->i[0], b->in[1]);
        b->gin[2] = gs ? pad_to(gs, m->ndim, m->sizes) : NULL; // src may be larger than index
        weft_tensor_free(gs);
    }
    return done(b);
}
static weft_status bw_concat(const weft_bw_args *b) { // each input gets its slice of g (a view)
    int dim = (int)b->attrs->i[0];
    int64_t at = 0;
    for (int i = 0; i < b->n_in; i++) {
        int64_t len = b->in_meta[i].sizes[dim];
        if (b->needs[i]) {
            b->gin[i] = weft_narrow(b->gout[0], dim, at, len);
            if (!b->gin[i]) break;
        }
        at += len;
    }
    return done(b);
}

// ---- entries ----
#define K_IX(fn, mask) .kernel = {[WEFT_CPU] = {fn, (mask)}}
weft_op_def weft_op_embedding = {.name = "embedding", .n_in = 2, .n_out = 1, .save = WEFT_SAVE_IN(1),
                                 .infer = infer_embedding, .backward = bw_embedding,
                                 K_IX(weft_cpu_embedding, WEFT_DT_ALL)};
weft_op_def weft_op_embedding_backward = {.name = "embedding_backward", .n_in = 2, .n_out = 1,
                                          .save = WEFT_SAVE_IN(1), .infer = infer_embedding_bw,
                                          .backward = bw_embedding_bw,
                                          K_IX(weft_cpu_embedding_backward, WEFT_DT_NUM | WEFT_DT_HALF)};
weft_op_def weft_op_index_select = {.name = "index_select", .n_in = 2, .n_out = 1, .save = WEFT_SAVE_IN(1),
                                    .infer = infer_index_select, .backward = bw_index_select,
                                    K_IX(weft_cpu_index_select, WEFT_DT_ALL)};
weft_op_def weft_op_index_select_backward = {.name = "index_select_backward", .n_in = 2, .n_out = 1,
                                             .save = WEFT_SAVE_IN(1), .infer = infer_index_select_bw,
                                             .backward = bw_index_select_bw,
                                             K_IX(weft_cpu_index_select_backward, WEFT_DT_NUM)};
weft_op_def weft_op_gather = {.name = "gather", .n_in = 2, .n_out = 1, .save = WEFT_SAVE_IN(1),
                              .infer = infer_gather, .backward = bw_gather, K_IX(weft_cpu_gather, WEFT_DT_ALL)};
weft_op_def weft_op_scatter_add = {.name = "scatter_add", .n_in = 3, .n_out = 1, .save = WEFT_SAVE_IN(1),
                                   .infer = infer_scatter_add, .backward = bw_scatter_add,
                                   K_IX(weft_cpu_scatter_add, WEFT_DT_NUM)};
// topk: attrs i[0] = dim, i[1] = k, i[2] = largest; int64 indices along dim, best first (the values are a gather).
static weft_status infer_topk(const weft_op_args *a, weft_out_meta *o) {
    const weft_tensor *t = a->in[0];
    weft_status st = check_dim("topk", t, a->attrs->i[0]);
    if (st) return st;
    int64_t d = a->attrs->i[0], k = a->attrs->i[1];
    if (k < 0 || k > t->sizes[d])
        return weft_error(WEFT_ERR_ARG, "topk: k = %lld for a dim of size %lld", (long long)k, (long long)t->sizes[d]);
    int64_t s[WEFT_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) s[i] = i == d ? k : t->sizes[i];
    weft_meta_set(o, t->ndim, s, WEFT_I64);
    return WEFT_OK;
}
weft_op_def weft_op_topk = {.name = "topk", .n_in = 1, .n_out = 1, .flags = WEFT_OPF_NONDIFF, .infer = infer_topk,
                            K_IX(weft_cpu_topk, WEFT_DT_NUM)};
weft_op_def weft_op_concat = {.name = "concat", .n_in = -1, .n_out = 1, .infer = infer_concat,
                              .backward = bw_concat, K_IX(weft_cpu_concat, WEFT_DT_ALL)};

// ---- public constructors ----
// Normalise dim for a tensor of nd dims (error names op); -1 on failure.
static int norm_dim(const char *op, const weft_tensor *t, int dim, int extra) {
    if (t->ndim == 0) {
        weft_error(WEFT_ERR_ARG, "%s: the input must have at least one dim", op);
        return -1;
    }
    return weft_axis(op, dim, t->ndim + extra);
}

weft_tensor *weft_embedding(weft_tensor *weight, weft_tensor *indices) {
    weft_tensor *in[2] = {weight, indices};
    return weft_op_apply1(&weft_op_embedding, 2, in, NULL);
}

weft_tensor *weft_index_select(weft_tensor *t, int dim, weft_tensor *index) {
    if (!t || !index) return weft_error_null_input("index_select");
    int d = norm_dim("index_select", t, dim, 0);
    if (d < 0) return NULL;
    weft_tensor *in[2] = {t, index};
    weft_attrs at = {.i = {d}};
    return weft_op_apply1(&weft_op_index_select, 2, in, &at);
}

weft_tensor *weft_gather(weft_tensor *t, int dim, weft_tensor *index) {
    if (!t || !index) return weft_error_null_input("gather");
    int d = norm_dim("gather", t, dim, 0);
    if (d < 0) return NULL;
    weft_tensor *in[2] = {t, index};
    weft_attrs at = {.i = {d}};
    return weft_op_apply1(&weft_op_gather, 2, in, &at);
}

weft_tensor *weft_scatter_add(weft_tensor *t, int dim, weft_tensor *index, weft_tensor *src) {
    if (!t || !index || !src) return weft_error_null_input("scatter_add");
    int d = norm_dim("scatter_add", t, dim, 0);
    if (d < 0) return NULL;
    weft_tensor *in[3] = {t, index, src};
    weft_attrs at = {.i = {d}};
    return weft_op_apply1(&weft_op_scatter_add, 3, in, &at);
}

weft_status weft_topk(weft_tensor *t, int64_t k, int dim, bool largest, weft_tensor **values, weft_tensor **indices) {
    if (values) *values = NULL;
    if (indices) *indices = NULL;
    if (!t) return weft_error(WEFT_ERR_ARG, "topk: NULL input");
    int d = norm_dim("topk", t, dim, 0);
    if (d < 0) return weft_last_status();
    weft_attrs at = {.i = {d, k, largest}};
    weft_tensor *ix = weft_op_apply1(&weft_op_topk, 1, &t, &at);
    if (!ix) return weft_last_status();
    if (values && !(*values = weft_gather(t, d, ix))) {
        weft_tensor_free(ix);
        return weft_last_status();
    }
    if (indices) *indices = ix;
    else weft_tensor_free(ix);
    return WEFT_OK;
}

weft_status weft_sort(weft_tensor *t, int dim, bool descending, weft_tensor **values, weft_tensor **indices) {
    if (!t) return weft_error(WEFT_ERR_ARG, "sort: NULL input");
    int d = norm_dim("sort", t, dim, 0);
    if (d < 0) return weft_last_status();
    return weft_topk(t, t->sizes[d], d, descending, values, indices);
}

weft_tensor *weft_concat(int n, weft_tensor *const *ts, int dim) {
    if (n < 1 || !ts) return weft_error_null(WEFT_ERR_ARG, "concat: needs at least one tensor (got %d)", n);
    for (int i = 0; i < n; i++)
        if (!ts[i]) return weft_error_null_input("concat");
    int d = norm_dim("concat", ts[0], dim, 0);
    if (d < 0) return NULL;
    weft_attrs at = {.i = {d}};
    return weft_op_apply1(&weft_op_concat, n, ts, &at);
}

weft_tensor *weft_stack(int n, weft_tensor *const *ts, int dim) {
    if (n < 1 || !ts) return weft_error_null(WEFT_ERR_ARG, "stack: needs at least one tensor (got %d)", n);
    for (int i = 0; i < n; i++)
        if (!ts[i]) return weft_error_null_input("stack");
    int d = weft_axis("stack", dim, ts[0]->ndim + 1);
    if (d < 0) return NULL;
    for (int i = 1; i < n; i++)
        if (!weft_shape_equal(ts[i]->ndim, ts[i]->sizes, ts[0]->ndim, ts[0]->sizes)) {
            char s[96], u[96];
            return weft_error_null(WEFT_ERR_SHAPE, "stack: input %d has shape %s but input 0 has %s", i,
                                   weft_tensor_shape_str(ts[i], s, sizeof s), weft_tensor_shape_str(ts[0], u, sizeof u));
        }
    weft_tensor **us = calloc((size_t)n, sizeof *us);
    if (!us) return weft_error_null(WEFT_ERR_OOM, "stack: out of memory");
    weft_tensor *r = NULL;
    int k = 0;
    for (; k < n; k++)
        if (!(us[k] = weft_unsqueeze(ts[k], d))) break;
    if (k == n) r = weft_concat(n, us, d);
    for (int i = 0; i < k; i++) weft_tensor_free(us[i]);
    free(us);
    return r;
}
