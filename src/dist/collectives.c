// Collectives on tensors: argument checks (all before any communication, so
// a call that is wrong everywhere fails everywhere without desynchronising),
// then a work item for the communication thread (comm.c). Blocking calls go
// through the same queue and state machine (weft_dist_run), so both kinds are
// ordered together.
//
// Uneven counts follow weft_dist_chunk (the first n % size ranks get one
// more element) and use MPI's v-variants. AVG is SUM divided by the size
// afterwards; for integer dtypes that division truncates toward zero.
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../core/core_impl.h"
#include "comm_impl.h"

#ifdef WEFT_HAVE_MPI

static weft_status check_comm(const char *fn, weft_comm *c) {
    if (!c) return weft_error(WEFT_ERR_ARG, "%s: communicator is NULL", fn);
    return WEFT_OK;
}

static weft_status check_tensor(const char *fn, const char *name, const weft_tensor *t) {
    if (!t) return weft_error(WEFT_ERR_ARG, "%s: %s is NULL", fn, name);
    if (weft_tensor_device(t).type != WEFT_CPU)
        return weft_error(WEFT_ERR_DEVICE, "%s: %s is not on the CPU", fn, name);
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

static weft_status check_same_dtype(const char *fn, const weft_tensor *in, const weft_tensor *out) {
    if (weft_tensor_dtype(in) != weft_tensor_dtype(out))
        return weft_error(WEFT_ERR_DTYPE, "%s: in is %s but out is %s", fn, weft_dtype_name(weft_tensor_dtype(in)),
                          weft_dtype_name(weft_tensor_dtype(out)));
    return WEFT_OK;
}

static bool overlap(const weft_tensor *a, const weft_tensor *b) {
    size_t es = weft_dtype_size(weft_tensor_dtype(a));
    const char *pa = weft_tensor_data(a), *pb = weft_tensor_data(b);
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
    w->rbuf = weft_tensor_data(t);
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
    if (weft_tensor_numel(part) > 0 && weft_tensor_data(part) == (char *)weft_tensor_data(whole) + off * (int64_t)es) {
        *buf = MPI_IN_PLACE;
        return true;
    }
    if (overlap(part, whole)) {
        weft_error(WEFT_ERR_ARG, "%s: in and out overlap (only in == this rank's chunk of out is allowed)", fn);
        return false;
    }
    *buf = weft_tensor_data(part);
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
    w->rbuf = weft_tensor_data(out);
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
    void *sbuf = weft_tensor_data(in);
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
    w->rbuf = is_root ? weft_tensor_data(out) : NULL;
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
    void *rbuf = weft_tensor_data(out);
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
    w->sbuf = is_root ? weft_tensor_data(in) : NULL;
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
    w->sbuf = weft_tensor_data(in);
    w->rbuf = weft_tensor_data(out);
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
    w->sbuf = weft_tensor_data(in);
    w->rbuf = weft_tensor_data(out);
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

// ---- async: queued for the communication thread ----

static weft_work *submit(weft_work *w) { return w ? weft_dist_submit(w) : NULL; }

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

static weft_status run(weft_work *w) { return w ? weft_dist_run(w) : weft_last_status(); }

// Tensors on a CUDA device take the NCCL path (cuda/nccl.c) where weft has it.
#ifdef WEFT_HAVE_NCCL
#define ON_CUDA(t) ((t) && weft_tensor_device(t).type == WEFT_CUDA)
#else
#define ON_CUDA(t) false
#define weft_nccl_broadcast(c, t, r) WEFT_ERR_UNSUPPORTED
#define weft_nccl_all_reduce(c, t, o) WEFT_ERR_UNSUPPORTED
#define weft_nccl_reduce(c, t, o, r) WEFT_ERR_UNSUPPORTED
#define weft_nccl_all_gather(c, i, o) WEFT_ERR_UNSUPPORTED
#define weft_nccl_reduce_scatter(c, i, o, op) WEFT_ERR_UNSUPPORTED
#endif

weft_status weft_dist_broadcast(weft_comm *c, weft_tensor *t, int root) {
    return ON_CUDA(t) ? weft_nccl_broadcast(c, t, root) : run(broadcast_build(c, t, root));
}
weft_status weft_dist_all_reduce(weft_comm *c, weft_tensor *t, weft_reduce_op op) {
    return ON_CUDA(t) ? weft_nccl_all_reduce(c, t, op) : run(all_reduce_build(c, t, op));
}
weft_status weft_dist_reduce(weft_comm *c, weft_tensor *t, weft_reduce_op op, int root) {
    return ON_CUDA(t) ? weft_nccl_reduce(c, t, op, root) : run(reduce_build(c, t, op, root));
}
weft_status weft_dist_all_gather(weft_comm *c, const weft_tensor *in, weft_tensor *out) {
    return ON_CUDA(in) ? weft_nccl_all_gather(c, in, out) : run(all_gather_build(c, in, out));
}
weft_status weft_dist_gather(weft_comm *c, const weft_tensor *in, weft_tensor *out, int root) {
    return run(gather_build(c, in, out, root));
}
weft_status weft_dist_scatter(weft_comm *c, const weft_tensor *in, weft_tensor *out, int root) {
    return run(scatter_build(c, in, out, root));
}
weft_status weft_dist_reduce_scatter(weft_comm *c, const weft_tensor *in, weft_tensor *out, weft_reduce_op op) {
    return ON_CUDA(in) ? weft_nccl_reduce_scatter(c, in, out, op) : run(reduce_scatter_build(c, in, out, op));
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
