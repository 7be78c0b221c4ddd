// Op entries of the view family. Views alias input 0's storage: infer gives
// the new sizes/strides/offset and no kernel runs. slice_backward is the one
// real kernel here (scatter a gradient into a zero tensor).
#include <string.h>

#include "cpu/iter.h"
#include "op.h"

// (op.h) PyTorch's computeStride rule: each run of new dims must map onto a run
// of old dims that is contiguous in itself.
bool weft_view_strides(int ond, const int64_t *osz, const int64_t *ost, int nnd, const int64_t *nsz, int64_t *nst) {
    int64_t numel = weft_shape_numel(ond, osz);
    if (numel == 0 || ond == 0) return weft_contiguous_strides(nnd, nsz, nst);
    int view_d = nnd - 1;
    int64_t chunk_base = ost[ond - 1], tensor_numel = 1, view_numel = 1;
    for (int d = ond - 1; d >= 0; d--) {
        tensor_numel *= osz[d];
        if (d == 0 || (osz[d - 1] != 1 && ost[d - 1] != tensor_numel * chunk_base)) {
            while (view_d >= 0 && (view_numel < tensor_numel || nsz[view_d] == 1)) {
                nst[view_d] = view_numel * chunk_base;
                view_numel *= nsz[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return false;
            if (d > 0) {
                chunk_base = ost[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

// Resolve one -1 in sizes; checks the element count.
static weft_status resolve_shape(const char *op, const weft_tensor *t, int64_t nnd, const int64_t *in, int64_t *out) {
    if (nnd < 0 || nnd > WEFT_MAX_DIMS)
        return weft_error(WEFT_ERR_ARG, "%s: %lld dims (at most %d)", op, (long long)nnd, WEFT_MAX_DIMS);
    int infer = -1;
    int64_t prod = 1; // of the sizes given, zeros left out (checked against overflow)
    bool zero = false;
    for (int d = 0; d < nnd; d++) {
        out[d] = in[d];
        if (in[d] == -1) {
            if (infer >= 0) return weft_error(WEFT_ERR_ARG, "%s: only one size may be -1", op);
            infer = d;
        } else if (in[d] < 0) {
            return weft_error(WEFT_ERR_ARG, "%s: bad size %lld", op, (long long)in[d]);
        } else if (in[d] == 0) {
            zero = true;
        } else if (prod > WEFT_MAX_NUMEL / in[d]) {
            goto bad; // more elements than any tensor holds
        } else {
            prod *= in[d];
        }
    }
    if (infer >= 0) {
        if (zero || t->numel % prod) goto bad;
        out[infer] = t->numel / prod;
    } else if ((zero ? 0 : prod) != t->numel) {
        goto bad;
    }
    return WEFT_OK;
bad:;
    char a[96], b[200];
    return weft_error(WEFT_ERR_SHAPE, "%s: cannot reshape %s (%lld elements) to %s", op,
                      weft_tensor_shape_str(t, a, sizeof a), (long long)t->numel,
                      weft_shape_fmt((int)nnd, in, b, sizeof b));
}

// ---- view: attrs i[0] = ndim, i[1..] = sizes (already resolved) ----
static weft_status infer_view(const weft_op_args *a, weft_out_meta *o) {
    const weft_tensor *t = a->in[0];
    weft_status st = resolve_shape("view", t, a->attrs->i[0], &a->attrs->i[1], o->sizes);
    if (st) return st;
    int nnd = (int)a->attrs->i[0]; // in range: resolve_shape checked it
    if (!weft_view_strides(t->ndim, t->sizes, t->strides, nnd, o->sizes, o->strides)) {
        char s[96], b[96];
        return weft_error(WEFT_ERR_SHAPE, "view: a tensor of shape %s with these strides cannot be viewed as %s "
                                          "without a copy (use reshape)",
                          weft_tensor_shape_str(t, s, sizeof s), weft_shape_fmt(nnd, o->sizes, b, sizeof b));
    }
    o->ndim = nnd;
    o->dtype = (weft_dtype)t->dtype;
    o->offset = t->offset;
    return WEFT_OK;
}
static weft_status bw_view(const weft_bw_args *b) {
    const weft_in_meta *m = &b->in_meta[0];
    b->gin[0] = weft_reshape(b->gout[0], m->ndim, m->sizes);
    return b->gin[0] ? WEFT_OK : weft_last_status();
}
weft_op_def weft_op_view = {.name = "view", .n_in = 1, .n_out = 1, .flags = WEFT_OPF_VIEW, .infer = infer_view,
                            .backward = bw_view};

// ---- permute: attrs i[0..ndim-1] = source dim of each output dim ----
static weft_status infer_permute(const weft_op_args *a, weft_out_meta *o) {
    const weft_tensor *t = a->in[0];
    uint32_t seen = 0;
    for (int d = 0; d < t->ndim; d++) {
        int64_t s = a->attrs->i[d];
        if (s < 0) s += t->ndim;
        if (s < 0 || s >= t->ndim || (seen & (1u << s)))
            return weft_error(WEFT_ERR_ARG, "permute: dims are not a permutation of 0..%d", t->ndim - 1);
        seen |= 1u << s;
        o->sizes[d] = t->sizes[s];
        o->strides[d] = t->strides[s];
    }
    o->ndim = t->ndim;
    o->dtype = (weft_dtype)t->dtype;
    o->offset = t->offset;
    return WEFT_OK;
}
static weft_status bw_permute(const weft_bw_args *b) {
    int nd = b->in_meta[0].ndim, inv[WEFT_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        int64_t s = b->attrs->i[d];
        inv[s < 0 ? s + nd : s] = d;
    }
    b->gin[0] = weft_permute(b->gout[0], inv);
    return b->gin[0] ? WEFT_OK : weft_last_status();
}
weft_op_def weft_op_permute = {.name = "permute", .n_in = 1, .n_out = 1, .flags = WEFT_OPF_VIEW,
                               .infer = infer_permute, .backward = bw_permute};

// ---- slice: attrs i[0] = dim, i[1] = start, i[2] = end, i[3] = step ----
// weft_slice normalises them (0 <= start <= end <= size, step >= 1); a graph
// file or a C caller may not, so infer takes nothing else. *len: the sliced size.
static weft_status slice_check(const char *op, int ndim, const int64_t *sizes, const weft_attrs *at, int64_t *len) {
    int64_t d = at->i[0], start = at->i[1], end = at->i[2], step = at->i[3];
    if (ndim == 0) return weft_error(WEFT_ERR_ARG, "%s: cannot slice a 0-d tensor", op);
    if (d < 0 || d >= ndim)
        return weft_error(WEFT_ERR_ARG, "%s: dim %lld out of range for %d dims", op, (long long)d, ndim);
    if (step < 1) return weft_error(WEFT_ERR_ARG, "%s: step must be positive (got %lld)", op, (long long)step);
    if (start < 0 || start > end || end > sizes[d])
        return weft_error(WEFT_ERR_ARG, "%s: [%lld, %lld) is not a range within dim %lld of size %lld", op,
                          (long long)start, (long long)end, (long long)d, (long long)sizes[d]);
    *len = end == start ? 0 : (end - start - 1) / step + 1;
    return WEFT_OK;
}

// The slice of t (sizes, strides, offset); attrs passed slice_check.
static void slice_meta(const weft_tensor *t, const weft_attrs *at, int64_t len, weft_out_meta *o) {
    int d = (int)at->i[0];
    weft_meta_set(o, t->ndim, t->sizes, (weft_dtype)t->dtype);
    memcpy(o->strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
    o->sizes[d] = len;
    if (len > 1) o->strides[d] = t->strides[d] * at->i[3]; // step < size: the stride stays inside t
    o->offset = t->offset + at->i[1] * t->strides[d];
}

static weft_status infer_slice(const weft_op_args *a, weft_out_meta *o) {
    const weft_tensor *t = a->in[0];
    int64_t len = 0;
    weft_status st = slice_check("slice", t->ndim, t->sizes, a->attrs, &len);
    if (st) return st;
    slice_meta(t, a->attrs, len, o);
    return WEFT_OK;
}
static weft_status bw_slice(const weft_bw_args *b) {
    weft_attrs at = *b->attrs; // slice_backward: same slice, plus the input's shape
    const weft_in_meta *m = &b->in_meta[0];
    at.i[4] = m->ndim;
    for (int d = 0; d < m->ndim; d++) at.i[5 + d] = m->sizes[d];
    weft_tensor *g = b->gout[0];
    b->gin[0] = weft_op_apply1(weft_op_find("slice_backward"), 1, &g, &at);
    return b->gin[0] ? WEFT_OK : weft_last_status();
}
weft_op_def weft_op_slice = {.name = "slice", .n_in = 1, .n_out = 1, .flags = WEFT_OPF_VIEW, .infer = infer_slice,
                             .backward = bw_slice};

// slice_backward: zeros of shape attrs i[4] (ndim), i[5..] (sizes) with g
// written into the slice i[0..3] of it; g must be exactly that slice.
static weft_status infer_slice_bw(const weft_op_args *a, weft_out_meta *o) {
    const char *op = "slice_backward";
    const weft_tensor *g = a->in[0];
    int64_t nd = a->attrs->i[4], len = 0;
    const int64_t *sizes = &a->attrs->i[5];
    if (nd < 1 || nd > WEFT_MAX_DIMS) // 5 + 8 attrs: they fit in i[16]
        return weft_error(WEFT_ERR_ARG, "%s: %lld output dims (1 to %d)", op, (long long)nd, WEFT_MAX_DIMS);
    weft_status st = weft_shape_check(op, (int)nd, sizes);
    if (st || (st = slice_check(op, (int)nd, sizes, a->attrs, &len))) return st;
    bool ok = g->ndim == nd;
    for (int d = 0; ok && d < nd; d++) ok = g->sizes[d] == (d == a->attrs->i[0] ? len : sizes[d]);
    if (!ok) {
        char s1[96], s2[96];
        return weft_error(WEFT_ERR_SHAPE, "%s: gradient %s is not the slice [%lld:%lld:%lld] of dim %lld of %s", op,
                          weft_tensor_shape_str(g, s1, sizeof s1), (long long)a->attrs->i[1],
                          (long long)a->attrs->i[2], (long long)a->attrs->i[3], (long long)a->attrs->i[0],
                          weft_shape_fmt((int)nd, sizes, s2, sizeof s2));
    }
    weft_meta_set(o, (int)nd, sizes, (weft_dtype)g->dtype);
    return WEFT_OK;
}
static weft_status cpu_slice_bw(const weft_op_args *a) {
    weft_tensor *out = a->out[0];
    memset(weft_tensor_ptr(out), 0, (size_t)out->numel * weft_dtype_size((weft_dtype)out->dtype));
    int64_t len = 0;
    weft_status st = slice_check("slice_backward", out->ndim, out->sizes, a->attrs, &len);
    if (st) return st;
    weft_out_meta m;
    slice_meta(out, a->attrs, len, &m);
    weft_tensor *view = weft_tensor_alias(out, m.ndim, m.sizes, m.strides, m.offset);
    if (!view) return weft_last_status();
    st = weft_cpu_copy(view, a->in[0]);
    weft_tensor_free(view);
    return st;
}
static weft_status bw_slice_bw(const weft_bw_args *b) {
    weft_tensor *gg = b->gout[0];
    b->gin[0] = weft_op_apply1(&weft_op_slice, 1, &gg, b->attrs);
    return b->gin[0] ? WEFT_OK : weft_last_status();
}
weft_op_def weft_op_slice_backward = {.name = "slice_backward", .n_in = 1, .n_out = 1, .infer = infer_slice_bw,
                                      .backward = bw_slice_bw,
                                      .kernel = {[WEFT_CPU] = {cpu_slice_bw, WEFT_DT_ALL}}};

// ---- expand: attrs i[0] = ndim, i[1..] = sizes (-1 keeps) ----
static weft_status infer_expand(const weft_op_args *a, weft_out_meta *o) {
    const weft_tensor *t = a->in[0];
    if (a->attrs->i[0] < t->ndim || a->attrs->i[0] > WEFT_MAX_DIMS)
        return weft_error(WEFT_ERR_ARG, "expand: cannot expand a %d-d tensor to %lld dims", t->ndim,
                          (long long)a->attrs->i[0]);
    int nd = (int)a->attrs->i[0], lead = nd - t->ndim;
    for (int d = 0; d < nd; d++) {
        int64_t want = a->attrs->i[1 + d];
        int td = d - lead;
        int64_t have = td >= 0 ? t->sizes[td] : 1;
        if (want == -1) {
            if (td < 0) return weft_error(WEFT_ERR_ARG, "expand: -1 is not allowed for a new leading dim");
            want = have;
        } else if (want < 0) {
            return weft_error(WEFT_ERR_ARG, "expand: bad size %lld for dim %d", (long long)want, d);
        }
        if (have != want && have != 1) {
            char s[96];
            return weft_error(WEFT_ERR_SHAPE, "expand: size %lld of dim %d of %s cannot become %lld",
                              (long long)have, td, weft_tensor_shape_str(t, s, sizeof s), (long long)want);
        }
        o->sizes[d] = want;
        o->strides[d] = (td < 0 || (have == 1 && want != 1)) ? 0 : t->strides[td];
    }
    o->ndim = nd;
    o->dtype = (weft_dtype)t->dtype;
    o->offset = t->offset;
    return WEFT_OK;
}
static weft_status bw_expand(const weft_bw_args *b) {
    const weft_in_meta *m = &b->in_meta[0];
    b->gin[0] = weft_sum_to(b->gout[0], m->ndim, m->sizes);
    return b->gin[0] ? WEFT_OK : weft_last_status();
}
weft_op_def weft_op_expand = {.name = "expand", .n_in = 1, .n_out = 1, .flags = WEFT_OPF_VIEW,
                              .infer = infer_expand, .backward = bw_expand};

// ---- public constructors ----
static weft_tensor *view_op(weft_tensor *t, int ndim, const int64_t *sizes) {
    if (ndim < 0 || ndim > WEFT_MAX_DIMS) return weft_error_null(WEFT_ERR_ARG, "view: %d dims", ndim);
    if (ndim > 0 && !sizes) return weft_error_null(WEFT_ERR_ARG, "view: NULL sizes");
    weft_attrs at = {.i = {ndim}};
    if (ndim) memcpy(&at.i[1], sizes, sizeof(int64_t) * (size_t)ndim);
    return weft_op_apply1(&weft_op_view, 1, &t, &at);
}

weft_tensor *weft_view(weft_tensor *t, int ndim, const int64_t *sizes) {
    if (!t) return weft_error_null_input("view");
    return view_op(t, ndim, sizes);
}

weft_tensor *weft_reshape(weft_tensor *t, int ndim, const int64_t *sizes) {
    if (!t) return weft_error_null_input("reshape");
    if (ndim > 0 && !sizes) return weft_error_null(WEFT_ERR_ARG, "reshape: NULL sizes");
    int64_t res[WEFT_MAX_DIMS], st[WEFT_MAX_DIMS];
    if (resolve_shape("reshape", t, ndim, sizes, res)) return NULL;
    if (weft_view_strides(t->ndim, t->sizes, t->strides, ndim, res, st)) return view_op(t, ndim, res);
    weft_tensor *c = weft_tensor_contiguous(t); // the only copy: layout cannot be viewed
    weft_tensor *r = c ? view_op(c, ndim, res) : NULL;
    weft_tensor_free(c);
    return r;
}

weft_tensor *weft_flatten(weft_tensor *t, int start, int end) {
    if (!t) return weft_error_null_input("flatten");
    int nd = t->ndim ? t->ndim : 1;
    int s = weft_axis("flatten", start, nd), e = weft_axis("flatten", end, nd);
    if (s < 0 || e < 0) return NULL;
    if (t->ndim == 0) return weft_reshape(t, 1, (int64_t[]){1});
    if (e < s) return weft_error_null(WEFT_ERR_ARG, "flatten: end dim %d before start dim %d", end, start);
    int64_t sz[WEFT_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < s; d++) sz[n++] = t->sizes[d];
    int64_t p = 1;
    for (int d = s; d <= e; d++) p *= t->sizes[d];
    sz[n++] = p;
    for (int d = e + 1; d < t->ndim; d++) sz[n++] = t->sizes[d];
    return weft_reshape(t, n, sz);
}

weft_tensor *weft_permute(weft_tensor *t, const int *dims) {
    if (!t) return weft_error_null_input("permute");
    if (!dims && t->ndim) return weft_error_null(WEFT_ERR_ARG, "permute: NULL dims");
    weft_attrs at = {0};
    for (int d = 0; d < t->ndim; d++) at.i[d] = dims[d];
    return weft_op_apply1(&weft_op_permute, 1, &t, &at);
}

weft_tensor *weft_transpose(weft_tensor *t, int d0, int d1) {
    if (!t) return weft_error_null_input("transpose");
    int a = weft_axis("transpose", d0, t->ndim), b = weft_axis("transpose", d1, t->ndim);
    if (a < 0 || b < 0) return NULL;
    int dims[WEFT_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) dims[d] = d;
    if (t->ndim) {
        dims[a] = b;
        dims[b] = a;
    }
    return weft_permute(t, dims);
}

weft_tensor *weft_slice(weft_tensor *t, int dim, int64_t start, int64_t end, int64_t step) {
    if (!t) return weft_error_null_input("slice");
    int d = weft_axis("slice", dim, t->ndim);
    if (d < 0) return NULL;
    if (t->ndim == 0) return weft_error_null(WEFT_ERR_ARG, "slice: cannot slice a 0-d tensor");
    if (step <= 0) return weft_error_null(WEFT_ERR_ARG, "slice: step must be positive (got %lld)", (long long)step);
    int64_t n = t->sizes[d];
    // Python semantics: negative indices count from the end, out-of-range clamps.
    if (start < 0) start += n;
    if (end < 0) end += n;
    start = start < 0 ? 0 : start > n ? n : start;
    end = end < start ? start : end > n ? n : end;
    weft_attrs at = {.i = {d, start, end, step}};
    return weft_op_apply1(&weft_op_slice, 1, &t, &at);
}

weft_tensor *weft_narrow(weft_tensor *t, int dim, int64_t start, int64_t length) {
    if (!t) return weft_error_null_input("narrow");
    int d = weft_axis("narrow", dim, t->ndim);
    if (d < 0) return NULL;
    if (t->ndim == 0) return weft_error_null(WEFT_ERR_ARG, "narrow: cannot narrow a 0-d tensor");
    if (start < 0) start += t->sizes[d];
    if (start < 0 || start > t->sizes[d] || length < 0 || length > t->sizes[d] - start)
        return weft_error_null(WEFT_ERR_ARG, "narrow: %lld elements from %lld are outside dim %d of size %lld",
                               (long long)length, (long long)start, d, (long long)t->sizes[d]);
    return weft_slice(t, d, start, start + length, 1);
}

weft_tensor *weft_squeeze(weft_tensor *t, int dim) {
    if (!t) return weft_error_null_input("squeeze");
    int d = weft_axis("squeeze", dim, t->ndim);
    if (d < 0) return NULL;
    if (t->ndim == 0 || t->sizes[d] != 1) return weft_tensor_ref(t);
    int64_t sz[WEFT_MAX_DIMS];
    int n = 0;
    for (int k = 0; k < t->ndim; k++)
        if (k != d) sz[n++] = t->sizes[k];
    return view_op(t, n, sz);
}

weft_tensor *weft_unsqueeze(weft_tensor *t, int dim) {
    if (!t) return weft_error_null_input("unsqueeze");
    int d = weft_axis("unsqueeze", dim, t->ndim + 1);
    if (d < 0) return NULL;
    if (t->ndim >= WEFT_MAX_DIMS) return weft_error_null(WEFT_ERR_ARG, "unsqueeze: already %d dims", t->ndim);
    int64_t sz[WEFT_MAX_DIMS];
    int n = 0;
    for (int k = 0; k <= t->ndim; k++) {
        if (k == d) sz[n++] = 1;
        if (k < t->ndim) sz[n++] = t->sizes[k];
    }
    return view_op(t, n, sz);
}

weft_tensor *weft_select(weft_tensor *t, int dim, int64_t index) {
    if (!t) return weft_error_null_input("select");
    int d = weft_axis("select", dim, t->ndim);
    if (d < 0) return NULL;
    if (t->ndim == 0) return weft_error_null(WEFT_ERR_ARG, "select: cannot select from a 0-d tensor");
    if (index < 0) index += t->sizes[d];
    if (index < 0 || index >= t->sizes[d])
        return weft_error_null(WEFT_ERR_ARG, "select: index %lld out of range for dim %d of size %lld",
                               (long long)index, d, (long long)t->sizes[d]);
    weft_tensor *s = weft_slice(t, d, index, index + 1, 1);
    weft_tensor *r = s ? weft_squeeze(s, d) : NULL;
    weft_tensor_free(s);
    return r;
}

weft_tensor *weft_expand(weft_tensor *t, int ndim, const int64_t *sizes) {
    if (!t) return weft_error_null_input("expand");
    if (ndim < 0 || ndim > WEFT_MAX_DIMS) return weft_error_null(WEFT_ERR_ARG, "expand: %d dims", ndim);
    if (ndim > 0 && !sizes) return weft_error_null(WEFT_ERR_ARG, "expand: NULL sizes");
    weft_attrs at = {.i = {ndim}};
    if (ndim) memcpy(&at.i[1], sizes, sizeof(int64_t) * (size_t)ndim);
    return weft_op_apply1(&weft_op_expand, 1, &t, &at);
}

weft_status weft_split(weft_tensor *t, int dim, int n, const int64_t *sizes, weft_tensor **out) {
    if (!t) {
        weft_error_null_input("split");
        return weft_last_status();
    }
    if (n < 0 || (n > 0 && (!sizes || !out))) return weft_error(WEFT_ERR_ARG, "split: NULL sizes or outputs");
    int d = weft_axis("split", dim, t->ndim);
    if (d < 0) return WEFT_ERR_ARG;
    if (t->ndim == 0) return weft_error(WEFT_ERR_ARG, "split: cannot split a 0-d tensor");
    int64_t total = 0;
    for (int k = 0; k < n; k++) {
        if (sizes[k] < 0) return weft_error(WEFT_ERR_ARG, "split: negative size %lld", (long long)sizes[k]);
        if (sizes[k] > t->sizes[d] - total) // (checked before adding, so the sum cannot overflow)
            return weft_error(WEFT_ERR_SHAPE, "split: sizes add up to more than dim %d's %lld", d,
                              (long long)t->sizes[d]);
        total += sizes[k];
    }
    if (total != t->sizes[d])
        return weft_error(WEFT_ERR_SHAPE, "split: sizes add up to %lld but dim %d has %lld", (long long)total, d,
                          (long long)t->sizes[d]);
    int64_t at = 0;
    for (int k = 0; k < n; k++) {
        out[k] = weft_narrow(t, d, at, sizes[k]);
        if (!out[k]) {
            for (int j = 0; j < k; j++) weft_tensor_free(out[j]);
            return weft_last_status();
        }
        at += sizes[k];
    }
    return WEFT_OK;
}
