// Collectives on tensors: argument checks (all before any communication, so
// a call that is wrong everywhere fails everywhere without desynchronising),
// then a work item for the communication thread (comm.c). Blocking calls go
// through the same queue and state machine (weft_dist_run), so both kinds are
// ordered together.
//
// Where the tensors live chooses the path (route()):
//   CPU      MPI on the tensors' own memory.
//   device   NCCL where the communicator has it for that device (cuda/nccl.c:
//            a GPU per rank, weft built with NCCL): issued on the
//            communication stream, ordered after the caller's stream and
//            before it again at weft_work_wait, with no host wait. Otherwise
//            (no NCCL, ranks sharing a GPU, the tests' mock accelerator, or a
//            collective NCCL lacks: gather, scatter, all-to-all, uneven
//            chunks, an integer average) staged: the work item's device
//            tensors are swapped for host copies before it is queued (the
//            inputs copied down on the caller's thread), MPI runs on those,
//            and the waiting thread copies the result back up (stage()).
// Every rank must pass tensors on the same kind of device to one collective.
//
// Uneven counts follow weft_dist_chunk (the first n % size ranks get one
// more element) and use MPI's v-variants. AVG is SUM divided by the size
// afterwards; for integer dtypes that division truncates toward zero.
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <weft/nn.h>

#include "../core/core_impl.h"
#include "comm_impl.h"
#include "dist_impl.h"

#ifdef WEFT_HAVE_MPI

static weft_status check_comm(const char *fn, weft_comm *c) {
    if (!c) return weft_error(WEFT_ERR_ARG, "%s: communicator is NULL", fn);
    return WEFT_OK;
}

static weft_status check_tensor(const char *fn, const char *name, const weft_tensor *t) {
    if (!t) return weft_error(WEFT_ERR_ARG, "%s: %s is NULL", fn, name);
    if (!weft_tensor_is_contiguous(t)) return weft_error(WEFT_ERR_ARG, "%s: %s is not contiguous", fn, name);
    if (weft_dist_mpi_dtype(weft_tensor_dtype(t)) == MPI_DATATYPE_NULL)
        return weft_error(WEFT_ERR_DTYPE, "%s: %s has dtype %s, which cannot be sent", fn, name,
                          weft_dtype_name(weft_tensor_dtype(t)));
    if (weft_tensor_numel(t) > INT_MAX)
        return weft_error(WEFT_ERR_ARG, "%s: %s has %lld elements, more than MPI's int count", fn, name,
                          (long long)weft_tensor_numel(t));
    return WEFT_OK;
}

static weft_status check_reduce(const char *fn, weft_dtype dt, weft_reduce_op op) {
    if (op != WEFT_REDUCE_SUM && op != WEFT_REDUCE_AVG && op != WEFT_REDUCE_MAX)
        return weft_error(WEFT_ERR_ARG, "%s: unknown reduce op %d", fn, (int)op);
    if (dt != WEFT_F32 && dt != WEFT_F64 && dt != WEFT_I32 && dt != WEFT_I64 && dt != WEFT_U8)
        return weft_error(WEFT_ERR_DTYPE, "%s: cannot reduce dtype %s (f32, f64, i32, i64, u8)", fn,
                          weft_dtype_name(dt));
    return WEFT_OK;
}

static weft_status check_root(const char *fn, const weft_comm *c, int root) {
    if (root < 0 || root >= c->size)
        return weft_error(WEFT_ERR_ARG, "%s: root %d is not a rank of this communicator (size %d)", fn, root,
                          c->size);
    return WEFT_OK;
}

// Same dtype and same device (the in-place and overlap checks compare
// addresses on that device).
static weft_status check_same_dtype(const char *fn, const weft_tensor *in, const weft_tensor *out) {
    if (weft_tensor_dtype(in) != weft_tensor_dtype(out))
        return weft_error(WEFT_ERR_DTYPE, "%s: in is %s but out is %s", fn, weft_dtype_name(weft_tensor_dtype(in)),
                          weft_dtype_name(weft_tensor_dtype(out)));
    if (!weft_device_equal(weft_tensor_device(in), weft_tensor_device(out))) {
        char a[32], b[32];
        return weft_error(WEFT_ERR_DEVICE, "%s: in is on %s but out is on %s", fn,
                          weft_device_str(weft_tensor_device(in), a, sizeof a),
                          weft_device_str(weft_tensor_device(out), b, sizeof b));
    }
    return WEFT_OK;
}

// The address of t's first element on its own device (host memory for a CPU tensor).
static char *dptr(const weft_tensor *t) { return t ? weft_tensor_device_ptr(t) : NULL; }

static bool overlap(const weft_tensor *a, const weft_tensor *b) {
    size_t es = weft_dtype_size(weft_tensor_dtype(a));
    const char *pa = dptr(a), *pb = dptr(b);
    size_t na = (size_t)weft_tensor_numel(a) * es, nb = (size_t)weft_tensor_numel(b) * es;
    if (!pa || !pb || !na || !nb) return false;
    return pa < pb + nb && pb < pa + na;
}

// Counts and displacements of n split over size ranks (weft_dist_chunk).
static bool chunks(int64_t n, int size, int **counts, int **displs) {
    *counts = malloc(sizeof(int) * (size_t)size);
    *displs = malloc(sizeof(int) * (size_t)size);
    if (!*counts || !*displs) return false;
    for (int r = 0; r < size; r++) {
        int64_t o, k;
        weft_dist_chunk(n, size, r, &o, &k);
        (*counts)[r] = (int)k;
        (*displs)[r] = (int)o;
    }
    return true;
}

static int64_t chunk_of(int64_t n, int size, int r) {
    int64_t k;
    weft_dist_chunk(n, size, r, NULL, &k);
    return k;
}

static weft_work *oom(weft_work *w, const char *fn) {
    atomic_store(&w->refs, 1);
    weft_dist_work_release(w);
    return weft_error_null(WEFT_ERR_OOM, "%s: out of memory", fn);
}

// ---- async ----

static weft_work *inplace_op(const char *fn, int kind, weft_comm *c, weft_tensor *t, weft_reduce_op op, int root) {
    if (check_comm(fn, c) || check_tensor(fn, "tensor", t)) return NULL;
    if ((kind == WK_ALL_REDUCE || kind == WK_REDUCE) && check_reduce(fn, weft_tensor_dtype(t), op)) return NULL;
    if ((kind == WK_BROADCAST || kind == WK_REDUCE) && check_root(fn, c, root)) return NULL;
    weft_work *w = weft_dist_work_new(c, fn, kind);
    if (!w) return NULL;
    w->a = weft_tensor_ref(t);
    w->dt = weft_tensor_dtype(t);
    w->rop = op;
    w->root = kind == WK_ALL_REDUCE ? -1 : root;
    w->rbuf = dptr(t);
    w->rcount = (int)weft_tensor_numel(t);
    w->n_total = w->n_local = w->rcount;
    return w;
}

static weft_work *all_reduce_build(weft_comm *c, weft_tensor *t, weft_reduce_op op) {
    return inplace_op("dist_all_reduce", WK_ALL_REDUCE, c, t, op, -1);
}

static weft_work *broadcast_build(weft_comm *c, weft_tensor *t, int root) {
    return inplace_op("dist_broadcast", WK_BROADCAST, c, t, WEFT_REDUCE_SUM, root);
}

static weft_work *reduce_build(weft_comm *c, weft_tensor *t, weft_reduce_op op, int root) {
    return inplace_op("dist_reduce", WK_REDUCE, c, t, op, root);
}

// MPI_IN_PLACE when `part` is exactly chunk `off` of `whole`; otherwise the
// two must not overlap (MPI forbids aliased buffers).
static bool in_place_or_apart(const char *fn, const weft_tensor *part, const weft_tensor *whole, int64_t off,
                              void **buf) {
    size_t es = weft_dtype_size(weft_tensor_dtype(whole));
    if (weft_tensor_numel(part) > 0 && dptr(part) == (char *)dptr(whole) + off * (int64_t)es) {
        *buf = MPI_IN_PLACE;
        return true;
    }
    if (overlap(part, whole)) {
        weft_error(WEFT_ERR_ARG, "%s: in and out overlap (only in == this rank's chunk of out is allowed)", fn);
        return false;
    }
    *buf = dptr(part);
    return true;
}

static weft_work *all_gather_build(weft_comm *c, const weft_tensor *in, weft_tensor *out) {
    const char *fn = "dist_all_gather";
    if (check_comm(fn, c) || check_tensor(fn, "in", in) || check_tensor(fn, "out", out) ||
        check_same_dtype(fn, in, out))
        return NULL;
    int64_t n = weft_tensor_numel(out), off, k;
    weft_dist_chunk(n, c->size, c->rank, &off, &k);
    if (weft_tensor_numel(in) != k) {
        weft_error(WEFT_ERR_SHAPE,
                   "dist_all_gather: in has %lld elements, expected %lld (rank %d's chunk of out's %lld over %d ranks)",
                   (long long)weft_tensor_numel(in), (long long)k, c->rank, (long long)n, c->size);
        return NULL;
    }
    void *sbuf;
    if (!in_place_or_apart(fn, in, out, off, &sbuf)) return NULL;
    weft_work *w = weft_dist_work_new(c, fn, WK_ALL_GATHER);
    if (!w) return NULL;
    w->a = weft_tensor_ref((weft_tensor *)in);
    w->b = weft_tensor_ref(out);
    w->dt = weft_tensor_dtype(out);
    w->sbuf = sbuf;
    w->scount = (int)k;
    w->rbuf = dptr(out);
    w->n_total = n;
    w->n_local = k;
    if (!chunks(n, c->size, &w->rcounts, &w->rdispls)) return oom(w, fn);
    return w;
}

static weft_work *gather_build(weft_comm *c, const weft_tensor *in, weft_tensor *out, int root) {
    const char *fn = "dist_gather";
    if (check_comm(fn, c) || check_root(fn, c, root) || check_tensor(fn, "in", in)) return NULL;
    bool is_root = c->rank == root;
    int64_t n = -1, off = 0;
    void *sbuf = dptr(in);
    if (is_root) {
        if (check_tensor(fn, "out (on the root)", out) || check_same_dtype(fn, in, out)) return NULL;
        int64_t k;
        n = weft_tensor_numel(out);
        weft_dist_chunk(n, c->size, c->rank, &off, &k);
        if (weft_tensor_numel(in) != k) {
            weft_error(WEFT_ERR_SHAPE,
                       "dist_gather: in has %lld elements, expected %lld (rank %d's chunk of out's %lld over %d ranks)",
                       (long long)weft_tensor_numel(in), (long long)k, c->rank, (long long)n, c->size);
            return NULL;
        }
        if (!in_place_or_apart(fn, in, out, off, &sbuf)) return NULL;
    }
    weft_work *w = weft_dist_work_new(c, fn, WK_GATHER);
    if (!w) return NULL;
    w->a = weft_tensor_ref((weft_tensor *)in);
    w->b = is_root ? weft_tensor_ref(out) : NULL;
    w->dt = weft_tensor_dtype(in);
    w->root = root;
    w->sbuf = sbuf;
    w->scount = (int)weft_tensor_numel(in);
    w->rbuf = is_root ? dptr(out) : NULL;
    w->n_total = n;
    w->n_local = w->scount;
    if (is_root && !chunks(n, c->size, &w->rcounts, &w->rdispls)) return oom(w, fn);
    return w;
}

static weft_work *scatter_build(weft_comm *c, const weft_tensor *in, weft_tensor *out, int root) {
    const char *fn = "dist_scatter";
    if (check_comm(fn, c) || check_root(fn, c, root) || check_tensor(fn, "out", out)) return NULL;
    bool is_root = c->rank == root;
    int64_t n = -1;
    void *rbuf = dptr(out);
    if (is_root) {
        if (check_tensor(fn, "in (on the root)", in) || check_same_dtype(fn, in, out)) return NULL;
        int64_t off, k;
        n = weft_tensor_numel(in);
        weft_dist_chunk(n, c->size, c->rank, &off, &k);
        if (weft_tensor_numel(out) != k) {
            weft_error(WEFT_ERR_SHAPE,
                       "dist_scatter: out has %lld elements, expected %lld (rank %d's chunk of in's %lld over %d ranks)",
                       (long long)weft_tensor_numel(out), (long long)k, c->rank, (long long)n, c->size);
            return NULL;
        }
        if (!in_place_or_apart(fn, out, in, off, &rbuf)) return NULL;
    }
    weft_work *w = weft_dist_work_new(c, fn, WK_SCATTER);
    if (!w) return NULL;
    w->a = is_root ? weft_tensor_ref((weft_tensor *)in) : NULL;
    w->b = weft_tensor_ref(out);
    w->dt = weft_tensor_dtype(out);
    w->root = root;
    w->sbuf = is_root ? dptr(in) : NULL;
    w->rbuf = rbuf;
    w->rcount = (int)weft_tensor_numel(out);
    w->n_total = n;
    w->n_local = w->rcount;
    if (is_root && !chunks(n, c->size, &w->counts, &w->displs)) return oom(w, fn);
    return w;
}

static weft_work *reduce_scatter_build(weft_comm *c, const weft_tensor *in, weft_tensor *out, weft_reduce_op op) {
    const char *fn = "dist_reduce_scatter";
    if (check_comm(fn, c) || check_tensor(fn, "in", in) || check_tensor(fn, "out", out) ||
        check_same_dtype(fn, in, out) || check_reduce(fn, weft_tensor_dtype(in), op))
        return NULL;
    int64_t n = weft_tensor_numel(in), k = chunk_of(n, c->size, c->rank);
    if (weft_tensor_numel(out) != k) {
        weft_error(WEFT_ERR_SHAPE,
                   "dist_reduce_scatter: out has %lld elements, expected %lld (rank %d's chunk of in's %lld over %d "
                   "ranks)",
                   (long long)weft_tensor_numel(out), (long long)k, c->rank, (long long)n, c->size);
        return NULL;
    }
    if (overlap(in, out)) return weft_error_null(WEFT_ERR_ARG, "%s: in and out overlap", fn);
    weft_work *w = weft_dist_work_new(c, fn, WK_REDUCE_SCATTER);
    if (!w) return NULL;
    w->a = weft_tensor_ref((weft_tensor *)in);
    w->b = weft_tensor_ref(out);
    w->dt = weft_tensor_dtype(in);
    w->rop = op;
    w->sbuf = dptr(in);
    w->rbuf = dptr(out);
    w->n_total = n;
    w->n_local = k;
    if (!chunks(n, c->size, &w->rcounts, &w->rdispls)) return oom(w, fn);
    return w;
}

static weft_work *all_to_all_build(weft_comm *c, const weft_tensor *in, weft_tensor *out) {
    const char *fn = "dist_all_to_all";
    if (check_comm(fn, c) || check_tensor(fn, "in", in) || check_tensor(fn, "out", out) ||
        check_same_dtype(fn, in, out))
        return NULL;
    int64_t n = weft_tensor_numel(in), k = chunk_of(n, c->size, c->rank);
    if (weft_tensor_numel(out) != k * c->size) {
        weft_error(WEFT_ERR_SHAPE,
                   "dist_all_to_all: out has %lld elements, expected %lld (%d ranks x rank %d's chunk %lld of in's "
                   "%lld)",
                   (long long)weft_tensor_numel(out), (long long)(k * c->size), c->size, c->rank, (long long)k,
                   (long long)n);
        return NULL;
    }
    if ((int64_t)k * c->size > INT_MAX)
        return weft_error_null(WEFT_ERR_ARG, "%s: out is larger than MPI's int count", fn);
    if (overlap(in, out)) return weft_error_null(WEFT_ERR_ARG, "%s: in and out overlap", fn);
    weft_work *w = weft_dist_work_new(c, fn, WK_ALL_TO_ALL);
    if (!w) return NULL;
    w->a = weft_tensor_ref((weft_tensor *)in);
    w->b = weft_tensor_ref(out);
    w->dt = weft_tensor_dtype(in);
    w->sbuf = dptr(in);
    w->rbuf = dptr(out);
    w->n_total = n;
    w->n_local = k;
    if (!chunks(n, c->size, &w->counts, &w->displs)) return oom(w, fn);
    w->rcounts = malloc(sizeof(int) * (size_t)c->size);
    w->rdispls = malloc(sizeof(int) * (size_t)c->size);
    if (!w->rcounts || !w->rdispls) return oom(w, fn);
    for (int r = 0; r < c->size; r++) {
        w->rcounts[r] = (int)k;
        w->rdispls[r] = (int)(r * k);
    }
    return w;
}

static weft_work *barrier_build(weft_comm *c) {
    if (check_comm("dist_barrier", c)) return NULL;
    weft_work *w = weft_dist_work_new(c, "dist_barrier", WK_BARRIER);
    return w;
}

// ---- device tensors ----

// The tensor every rank passes (its device chooses the path for all ranks).
static const weft_tensor *routed_by(const weft_work *w) {
    switch (w->kind) {
    case WK_SCATTER: return w->b;
    default: return w->a;
    }
}

// Whether NCCL has this collective: no gather, scatter or all-to-all, equal
// chunks only, and an average of floats only (MPI's truncating integer
// average is not NCCL's).
static bool nccl_has(const weft_work *w) {
    switch (w->kind) {
    case WK_BROADCAST: return true;
    case WK_ALL_REDUCE:
    case WK_REDUCE: return w->rop != WEFT_REDUCE_AVG || w->dt == WEFT_F32 || w->dt == WEFT_F64;
    case WK_ALL_GATHER: return w->n_total % w->c->size == 0;
    case WK_REDUCE_SCATTER:
        return w->n_total % w->c->size == 0 && (w->rop != WEFT_REDUCE_AVG || w->dt == WEFT_F32 || w->dt == WEFT_F64);
    default: return false;
    }
}

// Whether p is an address inside device tensor d (its first element when empty).
static bool inside(const void *p, const weft_tensor *d) {
    const char *base = dptr(d);
    size_t n = (size_t)weft_tensor_numel(d) * weft_dtype_size(weft_tensor_dtype(d));
    return (const char *)p >= base && ((const char *)p < base + n || p == base);
}

// p (an address inside device tensor a or b, or MPI_IN_PLACE / NULL) moved
// to the same element of that tensor's host copy (ha or hb; NULL: not copied).
static void rebase(void **p, const weft_tensor *a, const weft_tensor *ha, const weft_tensor *b, const weft_tensor *hb) {
    if (!*p || *p == MPI_IN_PLACE) return;
    if (a && ha && inside(*p, a)) *p = dptr(ha) + ((char *)*p - dptr(a));
    else if (b && hb && inside(*p, b)) *p = dptr(hb) + ((char *)*p - dptr(b));
}

// A host tensor of t's shape and dtype, holding t's values when `read`.
static weft_tensor *host_copy(weft_tensor *t, bool read) {
    if (read) return weft_tensor_to(t, WEFT_DEVICE_CPU); // waits for the device's work on t
    return weft_tensor_empty_on(weft_tensor_ndim(t), weft_tensor_sizes(t), weft_tensor_dtype(t), WEFT_DEVICE_CPU);
}

// Swaps w's device tensors for host copies (the inputs copied down now, on
// the caller's thread); MPI then runs on those, and the waiting thread copies
// the result into the device tensor (weft_dist_work_finish). Which tensor is
// read and which written depends on the kind and the rank:
//   broadcast a: read on the root, written elsewhere   all_reduce a: both
//   reduce    a: read, written on the root
//   all_gather / gather  a read; b written (and read where a is b's chunk, in place)
//   scatter   a read (root); b written unless it is a's chunk (in place: already there)
//   reduce_scatter / all_to_all  a read, b written
static weft_work *stage(weft_work *w) {
    const char *fn = w->fn;
    bool root = w->c->rank == w->root, a_read = w->a != NULL, b_read = false;
    weft_tensor *dst = NULL; // the device tensor the result goes to
    switch (w->kind) {
    case WK_BROADCAST:
        a_read = root;
        dst = root ? NULL : w->a;
        break;
    case WK_ALL_REDUCE: dst = w->a; break;
    case WK_REDUCE: dst = root ? w->a : NULL; break;
    case WK_ALL_GATHER:
    case WK_GATHER:
        b_read = w->sbuf == MPI_IN_PLACE;
        a_read = !b_read;
        dst = w->b;
        break;
    case WK_SCATTER: dst = w->rbuf == MPI_IN_PLACE ? NULL : w->b; break;
    default: dst = w->b; break; // reduce_scatter, all_to_all
    }
    weft_tensor *ha = NULL, *hb = NULL;
    bool ok = true;
    if (w->a && a_read) ok = (ha = host_copy(w->a, true)) != NULL;
    else if (w->a && dst == w->a) ok = (ha = host_copy(w->a, false)) != NULL;
    if (ok && w->b && (b_read || dst == w->b)) ok = (hb = host_copy(w->b, b_read)) != NULL;
    if (!ok) {
        weft_tensor_free(ha);
        weft_tensor_free(hb);
        atomic_store(&w->refs, 1);
        weft_dist_work_release(w);
        return weft_error_null(weft_last_status(), "%s: staging through host memory: %s", fn, weft_last_error());
    }
    rebase(&w->sbuf, w->a, ha, w->b, hb);
    rebase(&w->rbuf, w->a, ha, w->b, hb);
    if (dst) {
        w->back_dst = weft_tensor_ref(dst);
        w->back_src = weft_tensor_ref(dst == w->a ? ha : hb);
    }
    weft_tensor_free(w->a);
    weft_tensor_free(w->b);
    w->a = ha;
    w->b = hb;
    return w;
}

// A built work item over device tensors goes to NCCL or is staged; one over
// CPU tensors is left as it is. Every rank routes the same way: the path
// depends on the communicator's (collective) decision and on what all ranks
// share (kind, dtype, counts).
static weft_work *route(weft_work *w) {
    if (!w) return NULL;
    const weft_tensor *t = routed_by(w);
    if (!t || weft_tensor_device(t).type == WEFT_CPU) return w;
#ifdef WEFT_HAVE_NCCL
    int nccl = weft_nccl_wanted(w->c, weft_tensor_device(t), w->fn);
    if (nccl < 0) {
        atomic_store(&w->refs, 1);
        weft_dist_work_release(w);
        return NULL;
    }
    if (nccl && nccl_has(w)) {
        weft_work *n = weft_nccl_issue(w->c, w->fn, w->kind, w->a, w->b, w->rop, w->root);
        atomic_store(&w->refs, 1);
        weft_dist_work_release(w);
        return n;
    }
#else
    (void)nccl_has;
#endif
    return stage(w);
}

weft_status weft_dist_work_finish(weft_work *w) {
#ifdef WEFT_HAVE_NCCL
    if (w->nccl_done) return weft_nccl_work_finish(w);
#endif
    if (!w->back_dst) return WEFT_OK;
    weft_status st = weft_tensor_copy_(w->back_dst, w->back_src);
    if (st != WEFT_OK) return weft_error(st, "%s: copying the result back to the device: %s", w->fn, weft_last_error());
    return WEFT_OK;
}

bool weft_dist_work_query(weft_work *w) {
#ifdef WEFT_HAVE_NCCL
    if (w->nccl_done) return weft_nccl_work_query(w);
#endif
    (void)w;
    return true;
}

// ---- async: queued for the communication thread ----

// NCCL's items are issued already (route); the others go to the queue.
static weft_work *submit(weft_work *w) {
    w = route(w);
    return !w || w->issued ? w : weft_dist_submit(w);
}

weft_work *weft_dist_all_reduce_async(weft_comm *c, weft_tensor *t, weft_reduce_op op) {
    return submit(all_reduce_build(c, t, op));
}
weft_work *weft_dist_broadcast_async(weft_comm *c, weft_tensor *t, int root) {
    return submit(broadcast_build(c, t, root));
}
weft_work *weft_dist_all_gather_async(weft_comm *c, const weft_tensor *in, weft_tensor *out) {
    return submit(all_gather_build(c, in, out));
}
weft_work *weft_dist_reduce_scatter_async(weft_comm *c, const weft_tensor *in, weft_tensor *out, weft_reduce_op op) {
    return submit(reduce_scatter_build(c, in, out, op));
}

// ---- blocking ----

// NCCL's items: wait for them as for async ones (the caller's stream is then
// ordered after the collective; the host does not wait).
static weft_status run(weft_work *w) {
    w = route(w);
    if (!w) return weft_last_status();
    return w->issued ? weft_work_wait(w) : weft_dist_run(w);
}

weft_status weft_dist_broadcast(weft_comm *c, weft_tensor *t, int root) { return run(broadcast_build(c, t, root)); }
weft_status weft_dist_all_reduce(weft_comm *c, weft_tensor *t, weft_reduce_op op) {
    return run(all_reduce_build(c, t, op));
}
weft_status weft_dist_reduce(weft_comm *c, weft_tensor *t, weft_reduce_op op, int root) {
    return run(reduce_build(c, t, op, root));
}
weft_status weft_dist_all_gather(weft_comm *c, const weft_tensor *in, weft_tensor *out) {
    return run(all_gather_build(c, in, out));
}
weft_status weft_dist_gather(weft_comm *c, const weft_tensor *in, weft_tensor *out, int root) {
    return run(gather_build(c, in, out, root));
}
weft_status weft_dist_scatter(weft_comm *c, const weft_tensor *in, weft_tensor *out, int root) {
    return run(scatter_build(c, in, out, root));
}
weft_status weft_dist_reduce_scatter(weft_comm *c, const weft_tensor *in, weft_tensor *out, weft_reduce_op op) {
    return run(reduce_scatter_build(c, in, out, op));
}
weft_status weft_dist_all_to_all(weft_comm *c, const weft_tensor *in, weft_tensor *out) {
    return run(all_to_all_build(c, in, out));
}
weft_status weft_dist_barrier(weft_comm *c) { return run(barrier_build(c)); }

#else // !WEFT_HAVE_MPI

#define NOMPI(fn) weft_error(WEFT_ERR_UNSUPPORTED, "%s: weft built without MPI", fn)
#define NOMPI_NULL(fn) weft_error_null(WEFT_ERR_UNSUPPORTED, "%s: weft built without MPI", fn)
weft_status weft_dist_broadcast(weft_comm *c, weft_tensor *t, int root) { return NOMPI("dist_broadcast"); }
weft_status weft_dist_all_reduce(weft_comm *c, weft_tensor *t, weft_reduce_op op) { return NOMPI("dist_all_reduce"); }
weft_status weft_dist_reduce(weft_comm *c, weft_tensor *t, weft_reduce_op op, int root) { return NOMPI("dist_reduce"); }
weft_status weft_dist_all_gather(weft_comm *c, const weft_tensor *in, weft_tensor *out) {
    return NOMPI("dist_all_gather");
}
weft_status weft_dist_gather(weft_comm *c, const weft_tensor *in, weft_tensor *out, int root) {
    return NOMPI("dist_gather");
}
weft_status weft_dist_scatter(weft_comm *c, const weft_tensor *in, weft_tensor *out, int root) {
    return NOMPI("dist_scatter");
}
weft_status weft_dist_reduce_scatter(weft_comm *c, const weft_tensor *in, weft_tensor *out, weft_reduce_op op) {
    return NOMPI("dist_reduce_scatter");
}
weft_status weft_dist_all_to_all(weft_comm *c, const weft_tensor *in, weft_tensor *out) {
    return NOMPI("dist_all_to_all");
}
weft_status weft_dist_barrier(weft_comm *c) { return NOMPI("dist_barrier"); }
weft_work *weft_dist_all_reduce_async(weft_comm *c, weft_tensor *t, weft_reduce_op op) {
    return NOMPI_NULL("dist_all_reduce");
}
weft_work *weft_dist_broadcast_async(weft_comm *c, weft_tensor *t, int root) { return NOMPI_NULL("dist_broadcast"); }
weft_work *weft_dist_all_gather_async(weft_comm *c, const weft_tensor *in, weft_tensor *out) {
    return NOMPI_NULL("dist_all_gather");
}
weft_work *weft_dist_reduce_scatter_async(weft_comm *c, const weft_tensor *in, weft_tensor *out, weft_reduce_op op) {
    return NOMPI_NULL("dist_reduce_scatter");
}
#endif

weft_status weft_dist_broadcast_module(weft_comm *c, struct weft_module *m, const char *who) {
    char name[256];
    int np = weft_module_param_count(m), nbuf = weft_module_buffer_count(m);
    for (int i = 0; i < np + nbuf; i++) {
        weft_tensor *t = i < np ? weft_module_param_at(m, i, name, sizeof name)
                                : weft_module_buffer_at(m, i - np, name, sizeof name);
        if (!t) return weft_error(WEFT_ERR_STATE, "%s: cannot read %s %d", who, i < np ? "parameter" : "buffer",
                                  i < np ? i : i - np);
        if (weft_dist_broadcast(c, t, 0) != WEFT_OK)
            return weft_error(weft_last_status(), "%s: broadcast of %s: %s", who, name, weft_last_error());
    }
    return WEFT_OK;
}
