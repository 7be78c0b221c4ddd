// CPU kernels of the index family: embedding, index_select, gather,
// scatter_add, their backward ops, and concat.
//
// Each operand is seen as (outer, dim, inner) around the indexed dim. A `lin`
// maps a linear outer (or inner) position to an element offset with the
// operand's own strides: one stride when those dims coalesce (the usual case,
// so the inner loop is a plain strided or memcpy loop), else a small offset
// table. So any strides work without first copying the inputs.
//
// Index tensors are read as a contiguous int64 array (converted once when
// they are int32 or strided) and every value is checked before any work, so a
// bad index is an error naming the op, never an out-of-bounds access.
#include <stdlib.h>
#include <string.h>

#include "../index.h"
#include "iter.h"

// ---- linear position -> element offset ----
typedef struct lin {
    int64_t n;      // positions
    int64_t stride; // offset of position i is i * stride (when tab is NULL)
    int64_t *tab;   // else tab[i]
} lin;

static inline int64_t lin_at(const lin *l, int64_t i) { return l->tab ? l->tab[i] : i * l->stride; }
static inline bool lin_is_contig(const lin *l) { return !l->tab && (l->stride == 1 || l->n <= 1); }
static void lin_free(lin *l) {
    free(l->tab);
    l->tab = NULL;
}

// dims (sizes, strides) in row-major order. Size-1 dims are dropped and
// neighbours with stride[d] == stride[d+1] * size[d+1] merged; a table is
// built only when more than one dim is left.
static weft_status lin_init(lin *l, int nd, const int64_t *sizes, const int64_t *strides) {
    int m = 0;
    int64_t sz[WEFT_MAX_DIMS], st[WEFT_MAX_DIMS], n = 1;
    for (int d = 0; d < nd; d++) {
        n *= sizes[d];
        if (sizes[d] == 1) continue;
        if (m > 0 && st[m - 1] == strides[d] * sizes[d]) {
            sz[m - 1] *= sizes[d];
            st[m - 1] = strides[d];
        } else {
            sz[m] = sizes[d];
            st[m++] = strides[d];
        }
    }
    l->n = n;
    l->tab = NULL;
    l->stride = m == 1 ? st[0] : 1;
    if (m <= 1 || n == 0) return WEFT_OK;
    l->tab = malloc(sizeof(int64_t) * (size_t)n);
    if (!l->tab) return weft_error(WEFT_ERR_OOM, "index: out of memory (offset table of %lld entries)", (long long)n);
    int64_t idx[WEFT_MAX_DIMS] = {0}, off = 0;
    for (int64_t i = 0; i < n; i++) { // odometer over the coalesced dims
        l->tab[i] = off;
        for (int d = m - 1; d >= 0; d--) {
            off += st[d];
            if (++idx[d] < sz[d]) break;
            off -= st[d] * sz[d];
            idx[d] = 0;
        }
    }
    return WEFT_OK;
}

// ---- index values ----
// Branch-free check of n indices against [0, limit). 64-bit compares only
// vectorise well with AVX2 (vpcmpgtq), so that variant is picked at load time.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx2", "default")))
#endif
static bool any_out_of_range(const int64_t *v, int64_t n, int64_t limit) {
    uint64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad |= (uint64_t)v[i] >= (uint64_t)limit;
    return bad != 0;
}

// The values of an integer index tensor as a contiguous int64 array in
// row-major order: the tensor's own memory when it already is one, else a
// converted copy left in *tmp (free it). Each value must lie in [0, limit).
static weft_status index_load(const char *op, const weft_tensor *ix, int64_t limit, const int64_t **vals,
                              weft_tensor **tmp) {
    *tmp = NULL;
    *vals = NULL;
    if (ix->numel == 0) return WEFT_OK;
    if (ix->dtype == WEFT_I64 && weft_tensor_is_contiguous(ix)) {
        *vals = WEFT_PTR(const int64_t, ix);
    } else {
        *tmp = weft_tensor_new(ix->ndim, ix->sizes, WEFT_I64, ix->device);
        if (!*tmp) return weft_last_status();
        weft_status st = weft_cpu_copy(*tmp, ix);
        if (st) return st;
        *vals = WEFT_PTR(const int64_t, *tmp);
    }
    const int64_t *v = *vals;
    int64_t n = ix->numel;
    // Branch-free pass (vectorises); the rare failure is located afterwards.
    if (!any_out_of_range(v, n, limit)) return WEFT_OK;
    int64_t i = 0;
    while ((uint64_t)v[i] < (uint64_t)limit) i++;
    weft_status st = weft_error(WEFT_ERR_ARG, "%s: index %lld is out of range for a dim of size %lld (element %lld of the index)",
                                op, (long long)v[i], (long long)limit, (long long)i);
    weft_tensor_free(*tmp);
    *tmp = NULL;
    return st;
}

// ---- row primitives ----
#define ROW_COPY(T)                                                                         \
    do {                                                                                    \
        T *d_ = (T *)dst;                                                                   \
        const T *s_ = (const T *)src;                                                       \
        if (il->tab)                                                                        \
            for (int64_t k = 0; k < n; k++) d_[k] = s_[il->tab[k]];                         \
        else                                                                                \
            for (int64_t k = 0, st_ = il->stride; k < n; k++) d_[k] = s_[k * st_];          \
    } while (0)

// dst[0..n) (contiguous) = src at the offsets of il. Any dtype: moves bytes.
static void row_copy(char *dst, const char *src, const lin *il, int64_t esz) {
    int64_t n = il->n;
    if (lin_is_contig(il)) {
        memcpy(dst, src, (size_t)(n * esz));
        return;
    }
    switch (esz) {
    case 1: ROW_COPY(uint8_t); break;
    case 2: ROW_COPY(uint16_t); break;
    case 4: ROW_COPY(uint32_t); break;
    default: ROW_COPY(uint64_t); break;
    }
}

#define ROW_ADD(T)                                                                          \
    do {                                                                                    \
        T *d_ = (T *)dst;                                                                   \
        const T *s_ = (const T *)src;                                                       \
        if (il->tab)                                                                        \
            for (int64_t k = 0; k < n; k++) d_[k] += s_[il->tab[k]];                        \
        else if (il->stride == 1)                                                           \
            for (int64_t k = 0; k < n; k++) d_[k] += s_[k];                                 \
        else                                                                                \
            for (int64_t k = 0, st_ = il->stride; k < n; k++) d_[k] += s_[k * st_];         \
    } while (0)

// dst[0..n) (contiguous) += src at the offsets of il.
static void row_add(char *dst, const char *src, const lin *il, weft_dtype dt) {
    int64_t n = il->n;
    switch (dt) {
    case WEFT_F32: ROW_ADD(float); break;
    case WEFT_F64: ROW_ADD(double); break;
    case WEFT_I32: ROW_ADD(int32_t); break;
    default: ROW_ADD(int64_t); break;
    }
}

// ---- cores ----
#define TAKE_ELEMS(T)                                                                       \
    do {                                                                                    \
        T *d_ = (T *)out + o * n;                                                           \
        const T *b_ = (const T *)(src + lin_at(ol, o) * esz);                               \
        for (int64_t j = j0; j < j1; j++) d_[j] = b_[ix[j] * sd];                           \
    } while (0)

// out (outer, n) contiguous: out[o, j] = src[ol(o) + ix[j] * sd], where ix is
// idx (index_select) or idx + o * n (gather, per_row). Tasks split (o, blocks
// of j) so a single long row still uses every thread.
static void take_elems(char *out, const char *src, int64_t esz, const lin *ol, int64_t n, int64_t sd,
                       const int64_t *idx, bool per_row) {
    int64_t outer = ol->n;
    int nt = weft_num_threads();
    bool par = nt > 1 && outer * n > WEFT_PAR_GRAIN;
    int64_t nb = (!par || outer >= nt) ? 1 : nt;
#pragma omp parallel for num_threads(nt) if (par) schedule(static)
    for (int64_t task = 0; task < outer * nb; task++) {
        int64_t o = task / nb, b = task - o * nb, j0 = n * b / nb, j1 = n * (b + 1) / nb;
        const int64_t *ix = per_row ? idx + o * n : idx;
        switch (esz) {
        case 1: TAKE_ELEMS(uint8_t); break;
        case 2: TAKE_ELEMS(uint16_t); break;
        case 4: TAKE_ELEMS(uint32_t); break;
        default: TAKE_ELEMS(uint64_t); break;
        }
    }
}

// out (outer, n, inner) contiguous: out[o, j, :] = src[ol(o) + idx[j] * sd + il(:)]
// (index_select; embedding is the case outer = 1).
static void take_rows(char *out, const char *src, int64_t esz, const lin *ol, int64_t sd, const int64_t *idx,
                      int64_t n, const lin *il) {
    int64_t rows = ol->n * n, inner = il->n;
    if (inner == 1) { // selecting along the last dim: one element per row, no per-row call
        take_elems(out, src, esz, ol, n, sd, idx, false);
        return;
    }
#pragma omp parallel for num_threads(weft_num_threads()) if (rows * inner > WEFT_PAR_GRAIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t o = r / n, j = r - o * n;
        row_copy(out + r * inner * esz, src + (lin_at(ol, o) + idx[j] * sd) * esz, il, esz);
    }
}

// out (outer, N, inner) contiguous, zeroed by the caller:
//   out[o, idx[j], :] += src[ol(o) + jl(j) + il(:)]
// (index_add; embedding_backward is outer = 1 with j over the index's dims).
// Repeated indices must accumulate without races: each task owns the target
// rows (o, [v0, v1)) and scans every j in order, so the sums are also the
// same for any thread count.
static void add_rows(char *out, int64_t N, const char *src, weft_dtype dt, const lin *ol, const lin *jl,
                     const int64_t *idx, const lin *il) {
    int64_t outer = ol->n, n = jl->n, inner = il->n, esz = (int64_t)weft_dtype_size(dt);
    int nt = weft_num_threads();
    bool par = nt > 1 && outer * n * inner > WEFT_PAR_GRAIN;
    int64_t nb = (!par || outer >= nt) ? 1 : (N < nt ? N : nt);
    if (nb < 1) nb = 1;
#pragma omp parallel for num_threads(nt) if (par) schedule(static)
    for (int64_t task = 0; task < outer * nb; task++) {
        int64_t o = task / nb, b = task - o * nb, v0 = N * b / nb, v1 = N * (b + 1) / nb;
        const char *so = src + lin_at(ol, o) * esz;
        char *oo = out + o * N * inner * esz;
        for (int64_t j = 0; j < n; j++) {
            int64_t v = idx[j];
            if (v < v0 || v >= v1) continue;
            row_add(oo + v * inner * esz, so + lin_at(jl, j) * esz, il, dt);
        }
    }
}

#define GATHER(T)                                                                           \
    do {                                                                                    \
        T *d_ = (T *)dst;                                                                   \
        const T *b_ = (const T *)base;                                                      \
        if (il->tab)                                                                        \
            for (int64_t k = 0; k < inner; k++) d_[k] = b_[ix[k] * sd + il->tab[k]];        \
        else                                                                                \
            for (int64_t k = 0, st_ = il->stride; k < inner; k++) d_[k] = b_[ix[k] * sd + k * st_]; \
    } while (0)

// out (outer, n, inner) = the index's shape, contiguous:
//   out[o, j, k] = src[ol(o) + idx[o, j, k] * sd + il(k)]
static void gather_core(char *out, const char *src, int64_t esz, const lin *ol, int64_t n, int64_t sd,
                        const int64_t *idx, const lin *il) {
    int64_t rows = ol->n * n, inner = il->n;
    if (inner == 1) { // gathering along the last dim
        take_elems(out, src, esz, ol, n, sd, idx, true);
        return;
    }
#pragma omp parallel for num_threads(weft_num_threads()) if (rows * inner > WEFT_PAR_GRAIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const char *base = src + lin_at(ol, r / n) * esz;
        char *dst = out + r * inner * esz;
        const int64_t *ix = idx + r * inner;
        switch (esz) {
        case 1: GATHER(uint8_t); break;
        case 2: GATHER(uint16_t); break;
        case 4: GATHER(uint32_t); break;
        default: GATHER(uint64_t); break;
        }
    }
}

#define SCATTER(T)                                                                          \
    do {                                                                                    \
        T *D_ = (T *)d;                                                                     \
        const T *S_ = (const T *)s;                                                         \
        for (int64_t k = k0; k < k1; k++) D_[ix[k] * dsd + lin_at(dil, k)] += S_[lin_at(sil, k)]; \
    } while (0)

#define SCATTER_ROW(T)                                                                      \
    do {                                                                                    \
        T *D_ = (T *)d;                                                                     \
        const T *S_ = (const T *)s;                                                         \
        for (int64_t j = 0; j < n; j++) D_[ix[j] * dsd] += S_[j * ssd];                     \
    } while (0)

// out (already holding t) over the index's (outer, n, inner) positions:
//   out[dol(o) + idx[o, j, k] * dsd + dil(k)] += src[sol(o) + j * ssd + sil(k)]
// Positions with different (o, k) never hit the same element, so tasks split
// (o, blocks of k) and each runs j serially: no races, fixed summation order.
static void scatter_core(char *out, const char *src, weft_dtype dt, const lin *dol, int64_t dsd, const lin *dil,
                         const lin *sol, int64_t ssd, const lin *sil, const int64_t *idx, int64_t n) {
    int64_t outer = dol->n, inner = dil->n, esz = (int64_t)weft_dtype_size(dt);
    int nt = weft_num_threads();
    bool par = nt > 1 && outer * n * inner > WEFT_PAR_GRAIN;
    int64_t nb = (!par || outer >= nt) ? 1 : (inner < nt ? inner : nt);
    if (nb < 1) nb = 1;
    if (inner == 1) { // scattering along the last dim: a task per outer row, j in order
#pragma omp parallel for num_threads(nt) if (par) schedule(static)
        for (int64_t o = 0; o < outer; o++) {
            char *d = out + lin_at(dol, o) * esz;
            const char *s = src + lin_at(sol, o) * esz;
            const int64_t *ix = idx + o * n;
            switch (dt) {
            case WEFT_F32: SCATTER_ROW(float); break;
            case WEFT_F64: SCATTER_ROW(double); break;
            case WEFT_I32: SCATTER_ROW(int32_t); break;
            default: SCATTER_ROW(int64_t); break;
            }
        }
        return;
    }
#pragma omp parallel for num_threads(nt) if (par) schedule(static)
    for (int64_t task = 0; task < outer * nb; task++) {
        int64_t o = task / nb, b = task - o * nb, k0 = inner * b / nb, k1 = inner * (b + 1) / nb;
        char *d = out + lin_at(dol, o) * esz;
        for (int64_t j = 0; j < n; j++) {
            const char *s = src + (lin_at(sol, o) + j * ssd) * esz;
            const int64_t *ix = idx + (o * n + j) * inner;
            switch (dt) {
            case WEFT_F32: SCATTER(float); break;
            case WEFT_F64: SCATTER(double); break;
            case WEFT_I32: SCATTER(int32_t); break;
            default: SCATTER(int64_t); break;
            }
        }
    }
}

// ---- kernels ----
static weft_status finish(weft_status st, lin *a, lin *b, lin *c, lin *d, weft_tensor *tmp) {
    lin *ls[] = {a, b, c, d};
    for (int k = 0; k < 4; k++)
        if (ls[k]) lin_free(ls[k]);
    weft_tensor_free(tmp);
    return st;
}

// weight (V,D), indices (...) -> out (..., D)
weft_status weft_cpu_embedding(const weft_op_args *a) {
    const weft_tensor *w = a->in[0], *ix = a->in[1];
    weft_tensor *out = a->out[0];
    const int64_t *idx;
    weft_tensor *tmp;
    weft_status st = index_load("embedding", ix, w->sizes[0], &idx, &tmp);
    if (st || out->numel == 0) return finish(st, NULL, NULL, NULL, NULL, tmp);
    lin ol = {1, 0, NULL}, il;
    if ((st = lin_init(&il, 1, &w->sizes[1], &w->strides[1]))) return finish(st, NULL, NULL, NULL, NULL, tmp);
    take_rows(weft_tensor_ptr(out), weft_tensor_ptr(w), (int64_t)weft_dtype_size((weft_dtype)w->dtype), &ol,
              w->strides[0], idx, ix->numel, &il);
    return finish(WEFT_OK, &il, NULL, NULL, NULL, tmp);
}

static weft_status embedding_backward_half(const weft_op_args *a);

// g (..., D), indices (...) -> out (V, D): rows of g summed into their index's row
weft_status weft_cpu_embedding_backward(const weft_op_args *a) {
    const weft_tensor *g = a->in[0], *ix = a->in[1];
    weft_tensor *out = a->out[0];
    weft_dtype dt = (weft_dtype)out->dtype;
    if (dt == WEFT_BF16 || dt == WEFT_F16) return embedding_backward_half(a);
    if (out->numel) memset(weft_tensor_ptr(out), 0, (size_t)out->numel * weft_dtype_size(dt));
    const int64_t *idx;
    weft_tensor *tmp;
    weft_status st = index_load("embedding_backward", ix, out->sizes[0], &idx, &tmp);
    if (st || g->numel == 0) return finish(st, NULL, NULL, NULL, NULL, tmp);
    int nd = g->ndim;
    lin ol = {1, 0, NULL}, jl = {0}, il = {0};
    if ((st = lin_init(&jl, nd - 1, g->sizes, g->strides)) ||
        (st = lin_init(&il, 1, &g->sizes[nd - 1], &g->strides[nd - 1])))
        return finish(st, &jl, &il, NULL, NULL, tmp);
    add_rows(weft_tensor_ptr(out), out->sizes[0], weft_tensor_ptr(g), dt, &ol, &jl, idx, &il);
    return finish(WEFT_OK, &jl, &il, NULL, NULL, tmp);
}

// bf16 / f16 (a table made under autocast, such as the recurrent layers' folded input gates): g widened to f32
// (exact), its rows summed in f32 and each sum rounded once, as PyTorch accumulates a half embedding's gradient.
static weft_status embedding_backward_half(const weft_op_args *a) {
    weft_tensor *out = a->out[0];
    weft_tensor *g32 = weft_tensor_new(a->in[0]->ndim, a->in[0]->sizes, WEFT_F32, WEFT_DEVICE_CPU);
    weft_tensor *o32 = weft_tensor_new(out->ndim, out->sizes, WEFT_F32, WEFT_DEVICE_CPU);
    weft_status st = g32 && o32 ? weft_cpu_copy(g32, a->in[0]) : WEFT_ERR_OOM;
    if (st == WEFT_OK) {
        weft_tensor *in[2] = {g32, a->in[1]};
        weft_op_args f = *a;
        f.in = in;
        f.out = &o32;
        st = weft_cpu_embedding_backward(&f);
    }
    if (st == WEFT_OK) st = weft_cpu_copy(out, o32);
    weft_tensor_free(g32);
    weft_tensor_free(o32);
    return st == WEFT_ERR_OOM ? weft_error(WEFT_ERR_OOM, "embedding_backward: out of memory widening a half gradient")
                              : st;
}

// t (A.., N, B..), index (n) -> out (A.., n, B..)
weft_status weft_cpu_index_select(const weft_op_args *a) {
    const weft_tensor *t = a->in[0], *ix = a->in[1];
    weft_tensor *out = a->out[0];
    int dim = (int)a->attrs->i[0], nd = t->ndim;
    const int64_t *idx;
    weft_tensor *tmp;
    weft_status st = index_load("index_select", ix, t->sizes[dim], &idx, &tmp);
    if (st || out->numel == 0) return finish(st, NULL, NULL, NULL, NULL, tmp);
    lin ol = {0}, il = {0};
    if ((st = lin_init(&ol, dim, t->sizes, t->strides)) ||
        (st = lin_init(&il, nd - dim - 1, t->sizes + dim + 1, t->strides + dim + 1)))
        return finish(st, &ol, &il, NULL, NULL, tmp);
    take_rows(weft_tensor_ptr(out), weft_tensor_ptr(t), (int64_t)weft_dtype_size((weft_dtype)t->dtype), &ol,
              t->strides[dim], idx, ix->numel, &il);
    return finish(WEFT_OK, &ol, &il, NULL, NULL, tmp);
}

// g (A.., n, B..), index (n) -> out (A.., N, B..) = zeros with g's rows added at index
weft_status weft_cpu_index_select_backward(const weft_op_args *a) {
    const weft_tensor *g = a->in[0], *ix = a->in[1];
    weft_tensor *out = a->out[0];
    int dim = (int)a->attrs->i[0], nd = g->ndim;
    weft_dtype dt = (weft_dtype)out->dtype;
    if (out->numel) memset(weft_tensor_ptr(out), 0, (size_t)out->numel * weft_dtype_size(dt));
    const int64_t *idx;
    weft_tensor *tmp;
    weft_status st = index_load("index_select_backward", ix, out->sizes[dim], &idx, &tmp);
    if (st || g->numel == 0) return finish(st, NULL, NULL, NULL, NULL, tmp);
    lin ol = {0}, jl = {g->sizes[dim], g->strides[dim], NULL}, il = {0};
    if ((st = lin_init(&ol, dim, g->sizes, g->strides)) ||
        (st = lin_init(&il, nd - dim - 1, g->sizes + dim + 1, g->strides + dim + 1)))
        return finish(st, &ol, &il, NULL, NULL, tmp);
    add_rows(weft_tensor_ptr(out), out->sizes[dim], weft_tensor_ptr(g), dt, &ol, &jl, idx, &il);
    return finish(WEFT_OK, &ol, &il, NULL, NULL, tmp);
}

// t, index (same ndim) -> out (index's shape): out[..i..] = t[..index[..i..] at dim..]
weft_status weft_cpu_gather(const weft_op_args *a) {
    const weft_tensor *t = a->in[0], *ix = a->in[1];
    weft_tensor *out = a->out[0];
    int dim = (int)a->attrs->i[0], nd = t->ndim;
    const int64_t *idx;
    weft_tensor *tmp;
    weft_status st = index_load("gather", ix, t->sizes[dim], &idx, &tmp);
    if (st || out->numel == 0) return finish(st, NULL, NULL, NULL, NULL, tmp);
    lin ol = {0}, il = {0}; // the index's outer/inner positions, at t's strides
    if ((st = lin_init(&ol, dim, ix->sizes, t->strides)) ||
        (st = lin_init(&il, nd - dim - 1, ix->sizes + dim + 1, t->strides + dim + 1)))
        return finish(st, &ol, &il, NULL, NULL, tmp);
    gather_core(weft_tensor_ptr(out), weft_tensor_ptr(t), (int64_t)weft_dtype_size((weft_dtype)t->dtype), &ol,
                ix->sizes[dim], t->strides[dim], idx, &il);
    return finish(WEFT_OK, &ol, &il, NULL, NULL, tmp);
}

// ---- topk ----
// A stable merge sort of the positions ix[0..n) of a row (element j at p[j * sd]) into best-first order:
// largest: greater first, NaN before every number; smallest: less first, NaN last. Ties keep their order.
#define TOPK_SORT(T)                                                                                         \
    static void topk_sort_##T(int64_t *ix, int64_t *tmp, int64_t n, const T *p, int64_t sd, bool largest) {  \
        for (int64_t w = 1; w < n; w *= 2) {                                                                 \
            for (int64_t lo = 0; lo < n; lo += 2 * w) {                                                      \
                int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, i = lo, j = mid, o = lo; \
                while (i < mid && j < hi) {                                                                  \
                    T a = p[ix[i] * sd], b = p[ix[j] * sd];                                                  \
                    bool bfirst = largest ? (b > a || (b != b && a == a)) : (b < a || (a != a && b == b));   \
                    tmp[o++] = bfirst ? ix[j++] : ix[i++];                                                   \
                }                                                                                            \
                while (i < mid) tmp[o++] = ix[i++];                                                          \
                while (j < hi) tmp[o++] = ix[j++];                                                           \
            }                                                                                                \
            memcpy(ix, tmp, sizeof(int64_t) * (size_t)n);                                                    \
        }                                                                                                    \
    }
TOPK_SORT(float)
TOPK_SORT(double)
TOPK_SORT(int32_t)
TOPK_SORT(int64_t)

// x -> out (x's shape with k along dim, int64, contiguous): each row's positions along dim, best first.
weft_status weft_cpu_topk(const weft_op_args *a) {
    const weft_tensor *x = a->in[0];
    weft_tensor *out = a->out[0];
    int dim = (int)a->attrs->i[0], nd = x->ndim;
    int64_t k = a->attrs->i[1], n = x->sizes[dim], sd = x->strides[dim];
    bool largest = a->attrs->i[2] != 0;
    if (out->numel == 0) return WEFT_OK;
    lin ol = {0}, il = {0};
    weft_status st;
    if ((st = lin_init(&ol, dim, x->sizes, x->strides)) ||
        (st = lin_init(&il, nd - dim - 1, x->sizes + dim + 1, x->strides + dim + 1)))
        return finish(st, &ol, &il, NULL, NULL, NULL);
    int64_t rows = ol.n * il.n, inner = il.n, *o = WEFT_PTR(int64_t, out);
    size_t esz = weft_dtype_size((weft_dtype)x->dtype);
    const char *base = weft_tensor_ptr(x);
    int failed = 0;
#pragma omp parallel num_threads(weft_num_threads()) if (rows * n > WEFT_PAR_GRAIN)
    {
        int64_t *ix = malloc(sizeof(int64_t) * 2 * (size_t)n);
        if (!ix) failed = 1;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            if (!ix) continue;
            const char *p = base + (lin_at(&ol, r / inner) + lin_at(&il, r % inner)) * (int64_t)esz;
            for (int64_t j = 0; j < n; j++) ix[j] = j;
            switch (x->dtype) {
            case WEFT_F32: topk_sort_float(ix, ix + n, n, (const float *)p, sd, largest); break;
            case WEFT_F64: topk_sort_double(ix, ix + n, n, (const double *)p, sd, largest); break;
            case WEFT_I32: topk_sort_int32_t(ix, ix + n, n, (const int32_t *)p, sd, largest); break;
            default: topk_sort_int64_t(ix, ix + n, n, (const int64_t *)p, sd, largest); break;
            }
            int64_t *dst = o + (r / inner) * k * inner + r % inner;
            for (int64_t j = 0; j < k; j++) dst[j * inner] = ix[j];
        }
        free(ix);
    }
    if (failed) st = weft_error(WEFT_ERR_OOM, "topk: out of memory (a row of %lld)", (long long)n);
    return finish(st, &ol, &il, NULL, NULL, NULL);
}

// t, index, src (same ndim) -> out = t with src[..i..] added at t[..index[..i..] at dim..]
weft_status weft_cpu_scatter_add(const weft_op_args *a) {
    const weft_tensor *t = a->in[0], *ix = a->in[1], *src = a->in[2];
    weft_tensor *out = a->out[0];
    int dim = (int)a->attrs->i[0], nd = t->ndim;
    const int64_t *idx;
    weft_tensor *tmp;
    weft_status st = index_load("scatter_add", ix, t->sizes[dim], &idx, &tmp);
    if (st) return st;
    if ((st = weft_cpu_copy(out, t)) || ix->numel == 0) return finish(st, NULL, NULL, NULL, NULL, tmp);
    lin dol = {0}, dil = {0}, sol = {0}, sil = {0};
    if ((st = lin_init(&dol, dim, ix->sizes, out->strides)) ||
        (st = lin_init(&dil, nd - dim - 1, ix->sizes + dim + 1, out->strides + dim + 1)) ||
        (st = lin_init(&sol, dim, ix->sizes, src->strides)) ||
        (st = lin_init(&sil, nd - dim - 1, ix->sizes + dim + 1, src->strides + dim + 1)))
        return finish(st, &dol, &dil, &sol, &sil, tmp);
    scatter_core(weft_tensor_ptr(out), weft_tensor_ptr(src), (weft_dtype)out->dtype, &dol, out->strides[dim], &dil,
                 &sol, src->strides[dim], &sil, idx, ix->sizes[dim]);
    return finish(WEFT_OK, &dol, &dil, &sol, &sil, tmp);
}

// ts[i] (A.., C_i, B..) -> out (A.., sum C_i, B..)
weft_status weft_cpu_concat(const weft_op_args *a) {
    weft_tensor *out = a->out[0];
    int dim = (int)a->attrs->i[0], n = a->n_in;
    if (out->numel == 0) return WEFT_OK;
    int64_t outer = 1, inner = 1, ctot = out->sizes[dim], esz = (int64_t)weft_dtype_size((weft_dtype)out->dtype);
    for (int d = 0; d < dim; d++) outer *= out->sizes[d];
    for (int d = dim + 1; d < out->ndim; d++) inner *= out->sizes[d];
    int64_t *off = malloc(sizeof(int64_t) * (size_t)(n + 1)); // start of each input along dim
    if (!off) return weft_error(WEFT_ERR_OOM, "concat: out of memory");
    off[0] = 0;
    bool all_contig = true;
    for (int i = 0; i < n; i++) {
        off[i + 1] = off[i] + a->in[i]->sizes[dim];
        all_contig &= weft_tensor_is_contiguous(a->in[i]);
    }
    // Contiguous inputs: each (outer row, input) is one memcpy of C_i * inner
    // elements; the (o, i) pairs are the parallel tasks.
    char *po = weft_tensor_ptr(out);
#pragma omp parallel for collapse(2) num_threads(weft_num_threads()) if (out->numel > WEFT_PAR_GRAIN) schedule(static)
    for (int64_t o = 0; o < outer; o++)
        for (int i = 0; i < n; i++) {
            const weft_tensor *t = a->in[i];
            if (t->numel == 0 || !weft_tensor_is_contiguous(t)) continue;
            int64_t blk = t->sizes[dim] * inner;
            memcpy(po + (o * ctot + off[i]) * inner * esz, weft_tensor_ptr(t) + o * blk * esz, (size_t)(blk * esz));
        }
    // Strided inputs: copy through a view of their slot in out (the strided
    // copy iterator coalesces dims and threads itself).
    weft_status st = WEFT_OK;
    for (int i = 0; i < n && !all_contig && st == WEFT_OK; i++) {
        const weft_tensor *t = a->in[i];
        if (t->numel == 0 || weft_tensor_is_contiguous(t)) continue;
        weft_tensor *slot = weft_tensor_alias(out, t->ndim, t->sizes, out->strides, out->offset + off[i] * inner);
        st = slot ? weft_cpu_copy(slot, t) : weft_last_status();
        weft_tensor_free(slot);
    }
    free(off);
    return st;
}
