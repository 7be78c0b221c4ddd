// Parameter server: creation, placement of shards, and the worker side
// (dense step/pull, sparse rows, checkpoints). The server loop is in
// ps_server.c; the wire format in ps_proto.h.
//
// Device workers: a worker's parameters (and so its gradients) may live on
// an accelerator. Its message buffers are then page-locked host memory
// (weft_device_host_alloc): a push copies each gradient shard from the device
// straight into the message (weft_device_copy, which waits for the stream
// that computed it), and a pull copies each parameter shard from the reply
// into the device parameter (queued on the caller's stream, ordered before
// the next forward). Servers keep their shards on the CPU.
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../device/device_impl.h"
#include "ps_proto.h"

weft_ps_opts weft_ps_defaults(void) {
    weft_ps_opts o;
    memset(&o, 0, sizeof o);
    o.servers = 1;
    o.mode = WEFT_PS_BSP;
    o.optim = weft_optim_defaults(WEFT_OPTIM_SGD);
    o.split_elems = 65536;
    return o;
}

const char *weft_ps_mode_name(weft_ps_mode m) {
    switch (m) {
    case WEFT_PS_BSP: return "bsp";
    case WEFT_PS_ASP: return "asp";
    case WEFT_PS_SSP: return "ssp";
    }
    return NULL;
}

const char *weft_ps_shard_path(const char *dir, int server, int64_t step, char *buf, size_t n) {
    if (!dir || !buf) return NULL;
    int k = snprintf(buf, n, "%s/ps-shard-%d-%lld.safetensors", dir, server, (long long)step);
    return k < 0 || (size_t)k >= n ? NULL : buf;
}

bool weft_ps_is_server(const weft_ps *ps) { return ps && ps->server >= 0; }
int weft_ps_worker_rank(const weft_ps *ps) { return ps && ps->server < 0 ? ps->rank : -1; }
int weft_ps_num_workers(const weft_ps *ps) { return ps ? ps->workers : 0; }
int weft_ps_num_servers(const weft_ps *ps) { return ps ? ps->servers : 0; }
int weft_ps_param_server(const weft_ps *ps, int i) { return ps && i >= 0 && i < ps->n ? ps->p[i].owner : -1; }
bool weft_ps_param_is_split(const weft_ps *ps, int i) { return ps && i >= 0 && i < ps->n && ps->p[i].split; }
int64_t weft_ps_clock(const weft_ps *ps) { return ps ? ps->clock : -1; }

void weft_ps_get_stats(const weft_ps *ps, weft_ps_stats *s) {
    if (!s) return;
    memset(s, 0, sizeof *s);
    if (!ps) return;
    *s = ps->st;
    if (ps->server >= 0) ps_server_stats(ps, s);
}

weft_status weft_ps_set_sparse(weft_ps *ps, int i, bool sparse) {
    if (!ps) return weft_error(WEFT_ERR_ARG, "weft_ps_set_sparse: NULL parameter server");
    if (i < 0 || i >= ps->n)
        return weft_error(WEFT_ERR_ARG, "weft_ps_set_sparse: parameter %d out of range [0, %d)", i, ps->n);
    ps->p[i].sparse = sparse;
    return WEFT_OK;
}

#ifdef WEFT_HAVE_MPI

// ---- placement ----

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

// Rows of parameter i on each server; the list of shards of each server.
static weft_status ps_place(weft_ps *ps) {
    int S = ps->servers;
    ps->shards = calloc((size_t)S, sizeof *ps->shards);
    ps->nshards = calloc((size_t)S, sizeof *ps->nshards);
    if (!ps->shards || !ps->nshards) return weft_error(WEFT_ERR_OOM, "weft_ps_create: out of memory");
    for (int i = 0; i < ps->n; i++) {
        ps_param *p = &ps->p[i];
        p->row_off = calloc((size_t)S, sizeof(int64_t));
        p->row_cnt = calloc((size_t)S, sizeof(int64_t));
        if (!p->row_off || !p->row_cnt) return weft_error(WEFT_ERR_OOM, "weft_ps_create: out of memory");
        int64_t numel = p->rows * p->row_len;
        // A split tensor with fewer rows than servers leaves some servers without a shard.
        p->split = S > 1 && p->ndim > 0 && numel > ps->o.split_elems && p->rows > 1;
        if (p->split) {
            p->owner = 0;
            for (int s = 0; s < S; s++) weft_dist_chunk(p->rows, S, s, &p->row_off[s], &p->row_cnt[s]);
        } else {
            p->owner = (int)(fnv1a(14695981039346656037ull, p->name, strlen(p->name)) % (uint64_t)S);
            p->row_cnt[p->owner] = p->rows;
        }
        for (int s = 0; s < S; s++)
            if (p->row_cnt[s] > 0) ps->nshards[s]++;
    }
    for (int s = 0; s < S; s++) {
        ps->shards[s] = malloc(sizeof(int) * (size_t)(ps->nshards[s] + 1));
        if (!ps->shards[s]) return weft_error(WEFT_ERR_OOM, "weft_ps_create: out of memory");
        int k = 0;
        for (int i = 0; i < ps->n; i++)
            if (ps->p[i].row_cnt[s] > 0) ps->shards[s][k++] = i;
        // The biggest dense message a server takes (a push of every shard) must fit an MPI count.
        size_t bytes = sizeof(ps_hdr) + ps_pad8((size_t)k);
        for (int j = 0; j < k; j++) bytes += ps_shard_bytes(&ps->p[ps->shards[s][j]], s);
        if (bytes > (size_t)INT32_MAX)
            return weft_error(WEFT_ERR_ARG, "weft_ps_create: server %d would receive %zu bytes per push (limit 2 GiB); "
                              "use more servers or a smaller split_elems", s, bytes);
    }
    return WEFT_OK;
}

// ---- waiting for requests (polling, so oversubscribed ranks do not starve each other) ----

void ps_backoff(int *spins); // ps_server.c

static weft_status ps_waitall(weft_ps *ps, int n, MPI_Request *r, const char *fn) {
    double t0 = weft_now_s();
    int spins = 0;
    for (;;) {
        int done = 0;
        if (MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
            return weft_error(WEFT_ERR_STATE, "%s: MPI error while talking to the servers", fn);
        if (done) return WEFT_OK;
        if (ps->timeout > 0 && weft_now_s() - t0 > ps->timeout) {
            char who[256] = "";
            size_t k = 0;
            for (int i = 0; i < n && k + 16 < sizeof who; i++) {
                int f = 0;
                if (r[i] != MPI_REQUEST_NULL) MPI_Test(&r[i], &f, MPI_STATUS_IGNORE);
                if (r[i] != MPI_REQUEST_NULL) k += (size_t)snprintf(who + k, sizeof who - k, " %d", i);
            }
            return weft_error(WEFT_ERR_STATE, "%s: no answer after %.0f s (pending requests:%s)", fn, ps->timeout, who);
        }
        ps_backoff(&spins);
    }
}

// A message buffer of at least `need` bytes (its old contents are not kept):
// host memory the worker's device copies to and from directly.
static weft_status ps_reserve(weft_ps *ps, char **buf, size_t *cap, size_t need, const char *fn) {
    if (need <= *cap) return WEFT_OK;
    weft_device_host_free(ps->dev, *buf);
    *cap = 0;
    *buf = weft_device_host_alloc(ps->dev, need);
    if (!*buf) return weft_error(WEFT_ERR_OOM, "%s: out of memory (%zu bytes): %s", fn, need, weft_last_error());
    *cap = need;
    return WEFT_OK;
}

// The address of element 0 of t on its device (host memory for a CPU tensor).
static char *dptr(const weft_tensor *t) { return weft_tensor_device_ptr(t); }

static weft_status worker_check(weft_ps *ps, const char *fn) {
    if (!ps) return weft_error(WEFT_ERR_ARG, "%s: NULL parameter server", fn);
    if (ps->server >= 0) return weft_error(WEFT_ERR_STATE, "%s: called on a server rank (rank %d)", fn, ps->rank);
    if (ps->finished) return weft_error(WEFT_ERR_STATE, "%s: this worker has already called weft_ps_finish", fn);
    return WEFT_OK;
}

// ---- creation ----

static weft_status check_param(const weft_tensor *t, int i, const char *name) {
    if (!t) return weft_error(WEFT_ERR_ARG, "weft_ps_create: parameter %d is NULL", i);
    weft_dtype dt = weft_tensor_dtype(t);
    if (dt != WEFT_F32 && dt != WEFT_F64)
        return weft_error(WEFT_ERR_DTYPE, "weft_ps_create: parameter %d '%s' is %s (need f32 or f64)", i, name,
                          weft_dtype_name(dt));
    if (!weft_tensor_is_contiguous(t))
        return weft_error(WEFT_ERR_ARG, "weft_ps_create: parameter %d '%s' is not contiguous", i, name);
    if (weft_tensor_numel(t) == 0)
        return weft_error(WEFT_ERR_SHAPE, "weft_ps_create: parameter %d '%s' is empty", i, name);
    return WEFT_OK;
}

static weft_status ps_fill_params(weft_ps *ps, weft_tensor *const *params, const char *const *names) {
    for (int i = 0; i < ps->n; i++) {
        char dflt[24];
        snprintf(dflt, sizeof dflt, "%d", i);
        const char *nm = names && names[i] ? names[i] : dflt;
        weft_status s = check_param(params ? params[i] : NULL, i, nm);
        if (s) return s;
        if (i == 0) ps->dev = weft_tensor_device(params[0]);
        else if (!weft_device_equal(weft_tensor_device(params[i]), ps->dev)) {
            char a[32], b[32];
            return weft_error(WEFT_ERR_DEVICE, "weft_ps_create: parameter %d '%s' is on %s, parameter 0 on %s (one device per rank)",
                              i, nm, weft_device_str(weft_tensor_device(params[i]), a, sizeof a),
                              weft_device_str(ps->dev, b, sizeof b));
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(ps->p[j].name, nm))
                return weft_error(WEFT_ERR_ARG, "weft_ps_create: two parameters are named '%s'", nm);
        ps_param *p = &ps->p[i];
        p->name = strdup(nm);
        if (!p->name) return weft_error(WEFT_ERR_OOM, "weft_ps_create: out of memory");
        p->dt = weft_tensor_dtype(params[i]);
        p->elsize = weft_dtype_size(p->dt);
        p->ndim = weft_tensor_ndim(params[i]);
        memcpy(p->sizes, weft_tensor_sizes(params[i]), sizeof(int64_t) * (size_t)p->ndim);
        p->rows = p->ndim > 0 ? p->sizes[0] : 1;
        p->row_len = weft_tensor_numel(params[i]) / p->rows;
    }
    return WEFT_OK;
}

static weft_status check_opts(const weft_ps_opts *o, int size) {
    if (!o) return weft_error(WEFT_ERR_ARG, "weft_ps_create: NULL options");
    if (o->servers < 1 || o->servers >= size)
        return weft_error(WEFT_ERR_ARG, "weft_ps_create: %d servers on %d ranks (need 1 <= servers < ranks)",
                          o->servers, size);
    if (o->mode != WEFT_PS_BSP && o->mode != WEFT_PS_ASP && o->mode != WEFT_PS_SSP)
        return weft_error(WEFT_ERR_ARG, "weft_ps_create: unknown consistency mode %d", (int)o->mode);
    if (o->staleness < 0) return weft_error(WEFT_ERR_ARG, "weft_ps_create: negative staleness bound %d", o->staleness);
    int workers = size - o->servers;
    if (o->backup < 0 || o->backup >= workers)
        return weft_error(WEFT_ERR_ARG, "weft_ps_create: %d backup workers of %d workers (need 0 <= backup < workers)",
                          o->backup, workers);
    if (o->backup > 0 && o->mode != WEFT_PS_BSP)
        return weft_error(WEFT_ERR_ARG, "weft_ps_create: backup workers need BSP (mode is %s)",
                          weft_ps_mode_name(o->mode));
    if (o->split_elems < 0) return weft_error(WEFT_ERR_ARG, "weft_ps_create: negative split_elems");
    return WEFT_OK;
}

static uint64_t ps_signature(const weft_ps *ps) {
    uint64_t h = 14695981039346656037ull;
    h = fnv1a(h, &ps->n, sizeof ps->n);
    int32_t opt[5] = {ps->o.servers, (int32_t)ps->o.mode, ps->o.staleness, ps->o.backup, (int32_t)ps->o.optim.kind};
    h = fnv1a(h, opt, sizeof opt);
    h = fnv1a(h, &ps->o.split_elems, sizeof ps->o.split_elems);
    for (int i = 0; i < ps->n; i++) {
        const ps_param *p = &ps->p[i];
        h = fnv1a(h, p->name, strlen(p->name) + 1);
        int32_t m[2] = {(int32_t)p->dt, p->ndim};
        h = fnv1a(h, m, sizeof m);
        h = fnv1a(h, p->sizes, sizeof(int64_t) * (size_t)p->ndim);
    }
    return h;
}

// Every rank learns whether all ranks are fine (and agree on the signature);
// a rank that is fine reports the first failing rank's trouble by number.
static bool all_ok(MPI_Comm comm, int rank, bool ok, uint64_t sig, const char *what) {
    uint64_t v[3] = {ok ? 0 : 1, sig, ~sig}, r[3];
    int bad_rank = ok ? 1 << 30 : rank, first;
    MPI_Allreduce(v, r, 3, MPI_UINT64_T, MPI_MAX, comm);
    MPI_Allreduce(&bad_rank, &first, 1, MPI_INT, MPI_MIN, comm);
    if (!ok) return false;
    if (r[0]) {
        weft_error(WEFT_ERR_ARG, "weft_ps_create: %s failed on rank %d", what, first);
        return false;
    }
    if (r[1] != ~r[2]) {
        weft_error(WEFT_ERR_ARG, "weft_ps_create: ranks disagree on the parameters (names, shapes, dtypes) or options");
        return false;
    }
    return true;
}

// Rank 0 sends each server the initial values of its shards.
static weft_status send_initial(weft_ps *ps) {
    int S = ps->servers;
    MPI_Request *r = malloc(sizeof(MPI_Request) * (size_t)S);
    char **bufs = calloc((size_t)S, sizeof(char *));
    weft_status st = WEFT_OK;
    if (!r || !bufs) st = weft_error(WEFT_ERR_OOM, "weft_ps_create: out of memory");
    for (int s = 0; s < S && !st; s++) {
        size_t bytes = 0;
        for (int j = 0; j < ps->nshards[s]; j++) bytes += ps_shard_bytes(&ps->p[ps->shards[s][j]], s);
        bufs[s] = weft_device_host_alloc(ps->dev, bytes + 1);
        if (!bufs[s]) {
            st = weft_error(WEFT_ERR_OOM, "weft_ps_create: out of memory");
            for (int k = s; k < S; k++) r[k] = MPI_REQUEST_NULL;
            break;
        }
        size_t off = 0;
        for (int j = 0; j < ps->nshards[s]; j++) {
            int i = ps->shards[s][j];
            const ps_param *p = &ps->p[i];
            size_t b = ps_shard_bytes(p, s);
            weft_status cs = weft_device_copy(WEFT_DEVICE_CPU, bufs[s] + off, ps->dev,
                                              dptr(ps->params[i]) + (size_t)p->row_off[s] * ps_row_bytes(p), b);
            if (cs && !st) st = cs; // still sent: the server is waiting for it (all_ok then fails everywhere)
            off += b;
        }
        MPI_Isend(bufs[s], (int)bytes, MPI_BYTE, ps->workers + s, PS_TAG_INIT, ps->comm, &r[s]);
        ps->st.bytes_out += (double)bytes;
    }
    if (r) MPI_Waitall(S, r, MPI_STATUSES_IGNORE);
    for (int s = 0; bufs && s < S; s++) weft_device_host_free(ps->dev, bufs[s]);
    free(bufs);
    free(r);
    return st;
}

// Worker 0's values to every worker (the servers got theirs from send_initial);
// device parameters travel through one host buffer, as large as the largest.
static bool bcast_workers(weft_ps *ps) {
    bool on_host = ps->dev.type == WEFT_CPU;
    size_t most = 0;
    for (int i = 0; i < ps->n; i++) {
        size_t bytes = (size_t)(ps->p[i].rows * ps->p[i].row_len) * ps->p[i].elsize;
        if (bytes > most) most = bytes;
    }
    char *stage = on_host ? NULL : weft_device_host_alloc(ps->dev, most);
    int ok = on_host || stage, all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, ps->wcomm); // no rank may skip the broadcasts alone
    for (int i = 0; all && i < ps->n; i++) {
        size_t bytes = (size_t)(ps->p[i].rows * ps->p[i].row_len) * ps->p[i].elsize;
        char *d = on_host ? dptr(ps->params[i]) : stage;
        if (!on_host && ps->rank == 0 && weft_device_copy(WEFT_DEVICE_CPU, stage, ps->dev, dptr(ps->params[i]), bytes))
            ok = 0; // still broadcast: the others are waiting
        for (size_t off = 0; off < bytes; off += (size_t)1 << 30) {
            size_t b = bytes - off < (size_t)1 << 30 ? bytes - off : (size_t)1 << 30;
            MPI_Bcast(d + off, (int)b, MPI_BYTE, 0, ps->wcomm);
        }
        if (!on_host && ps->rank != 0 && weft_device_copy(ps->dev, dptr(ps->params[i]), WEFT_DEVICE_CPU, stage, bytes))
            ok = 0;
    }
    weft_device_host_free(ps->dev, stage);
    if (!all && ok) weft_error(WEFT_ERR_OOM, "weft_ps_create: a worker could not stage the parameters in host memory");
    return all && ok;
}

weft_ps *weft_ps_create(weft_comm *c, int n, weft_tensor *const *params, const char *const *names,
                        const weft_ps_opts *o) {
    if (!c) return weft_error_null(WEFT_ERR_ARG, "weft_ps_create: NULL communicator");
    MPI_Comm base = weft_comm_mpi(c);
    if (base == MPI_COMM_NULL) return NULL;
    // Everything, the argument checks included, runs on a dup of our own, so
    // no other user of c's point-to-point communicator can see our traffic.
    MPI_Comm comm;
    if (MPI_Comm_dup(base, &comm) != MPI_SUCCESS)
        return weft_error_null(WEFT_ERR_STATE, "weft_ps_create: MPI_Comm_dup failed");
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    weft_ps *ps = calloc(1, sizeof *ps);
    bool ok = ps != NULL;
    if (!ok) weft_error(WEFT_ERR_OOM, "weft_ps_create: out of memory");
    if (ok) {
        ps->comm = comm;
        ps->wcomm = MPI_COMM_NULL;
        ps->rank = rank;
        ps->size = size;
        ps->server = -1;
        ok = check_opts(o, size) == WEFT_OK;
    }
    if (ok && (n <= 0 || !params)) ok = !weft_error(WEFT_ERR_ARG, "weft_ps_create: empty parameter list");
    if (ok) {
        ps->o = *o;
        if (ps->o.split_elems == 0) ps->o.split_elems = 65536;
        ps->servers = o->servers;
        ps->workers = size - o->servers;
        ps->server = rank >= ps->workers ? rank - ps->workers : -1;
        ps->n = n;
        ps->p = calloc((size_t)n, sizeof *ps->p);
        ps->params = calloc((size_t)n, sizeof *ps->params);
        ok = ps->p && ps->params ? ps_fill_params(ps, params, names) == WEFT_OK
                                 : !weft_error(WEFT_ERR_OOM, "weft_ps_create: out of memory");
    }
    if (ok) ok = ps_place(ps) == WEFT_OK;
    if (!all_ok(comm, rank, ok, ok ? ps_signature(ps) : 0, "checking the arguments")) {
        if (ps) weft_ps_free(ps); // frees comm
        else MPI_Comm_free(&comm);
        return NULL;
    }
    const char *t = getenv("WEFT_DIST_TIMEOUT");
    ps->timeout = t ? atof(t) : 600.0;
    MPI_Comm_split(ps->comm, ps->server >= 0, rank, &ps->wcomm);
    if (ps->server >= 0) MPI_Comm_free(&ps->wcomm); // servers talk point to point only
    for (int i = 0; i < n; i++) ps->params[i] = weft_tensor_ref(params[i]);
    if (rank == 0) ok = send_initial(ps) == WEFT_OK;
    if (ps->server >= 0) ok = ps_server_init(ps) == WEFT_OK;
    else ok = bcast_workers(ps) && ok;
    if (!all_ok(ps->comm, rank, ok, 0, "setting up the servers")) {
        weft_ps_free(ps);
        return NULL;
    }
    int S = ps->servers;
    ps->sbuf = calloc((size_t)S, sizeof(char *));
    ps->rbuf = calloc((size_t)S, sizeof(char *));
    ps->scap = calloc((size_t)S, sizeof(size_t));
    ps->rcap = calloc((size_t)S, sizeof(size_t));
    if (!ps->sbuf || !ps->rbuf || !ps->scap || !ps->rcap) {
        weft_ps_free(ps);
        return weft_error_null(WEFT_ERR_OOM, "weft_ps_create: out of memory");
    }
    return ps;
}

void weft_ps_free(weft_ps *ps) {
    if (!ps) return;
    ps_server_free(ps);
    for (int i = 0; ps->p && i < ps->n; i++) {
        free(ps->p[i].name);
        free(ps->p[i].row_off);
        free(ps->p[i].row_cnt);
        if (ps->params) weft_tensor_free(ps->params[i]);
    }
    for (int s = 0; ps->shards && s < ps->servers; s++) free(ps->shards[s]);
    for (int s = 0; ps->sbuf && s < ps->servers; s++) weft_device_host_free(ps->dev, ps->sbuf[s]);
    for (int s = 0; ps->rbuf && s < ps->servers; s++) weft_device_host_free(ps->dev, ps->rbuf[s]);
    free(ps->shards);
    free(ps->nshards);
    free(ps->sbuf);
    free(ps->rbuf);
    free(ps->scap);
    free(ps->rcap);
    free(ps->p);
    free(ps->params);
    if (ps->wcomm != MPI_COMM_NULL) MPI_Comm_free(&ps->wcomm);
    if (ps->comm != MPI_COMM_NULL) MPI_Comm_free(&ps->comm);
    free(ps);
}

// ---- worker: dense step / pull ----

static weft_status ps_dense(weft_ps *ps, int kind, double lr, const char *fn) {
    weft_status st = worker_check(ps, fn);
    if (st) return st;
    int S = ps->servers, W = ps->workers;
    // Gradients first, all checked before anything is sent.
    weft_tensor **g = calloc((size_t)ps->n, sizeof *g);
    MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)(2 * S));
    size_t *rsize = malloc(sizeof(size_t) * (size_t)S), *ssize = malloc(sizeof(size_t) * (size_t)S);
    if (!g || !req || !rsize || !ssize) {
        st = weft_error(WEFT_ERR_OOM, "%s: out of memory", fn);
        goto done;
    }
    for (int i = 0; kind == PS_STEP && i < ps->n; i++) {
        if (ps->p[i].sparse) continue;
        weft_tensor *gi = weft_tensor_grad(ps->params[i]);
        if (!gi) continue;
        if (weft_tensor_dtype(gi) != ps->p[i].dt || weft_tensor_numel(gi) != ps->p[i].rows * ps->p[i].row_len ||
            !weft_device_equal(weft_tensor_device(gi), ps->dev)) {
            char a[96], gd[32], pd[32];
            st = weft_error(WEFT_ERR_SHAPE, "%s: gradient of '%s' is %s %s on %s (parameter is %s with %lld elements on %s)",
                            fn, ps->p[i].name, weft_dtype_name(weft_tensor_dtype(gi)),
                            weft_tensor_shape_str(gi, a, sizeof a), weft_device_str(weft_tensor_device(gi), gd, sizeof gd),
                            weft_dtype_name(ps->p[i].dt), (long long)(ps->p[i].rows * ps->p[i].row_len),
                            weft_device_str(ps->dev, pd, sizeof pd));
            goto done;
        }
        g[i] = weft_tensor_contiguous(gi);
        if (!g[i]) {
            st = weft_error(weft_last_status(), "%s: %s", fn, weft_last_error());
            goto done;
        }
    }
    // Every message is built (gradients copied in from their device) before
    // any is sent, so that a failure here leaves no server half-asked.
    for (int s = 0; s < S; s++) {
        int ns = ps->nshards[s];
        size_t sb = sizeof(ps_hdr) + ps_pad8((size_t)ns), rb = sizeof(ps_hdr);
        for (int j = 0; j < ns; j++) {
            int i = ps->shards[s][j];
            if (g[i]) sb += ps_shard_bytes(&ps->p[i], s);
            if (!ps->p[i].sparse) rb += ps_shard_bytes(&ps->p[i], s);
        }
        if ((st = ps_reserve(ps, &ps->sbuf[s], &ps->scap[s], sb, fn)) ||
            (st = ps_reserve(ps, &ps->rbuf[s], &ps->rcap[s], rb, fn)))
            goto done;
        rsize[s] = rb;
        ps_hdr h = {.kind = kind, .clock = ps->clock, .lr = lr};
        char *b = ps->sbuf[s];
        memcpy(b, &h, sizeof h);
        unsigned char *flags = (unsigned char *)b + sizeof h;
        memset(flags, 0, ps_pad8((size_t)ns));
        size_t off = sizeof h + ps_pad8((size_t)ns);
        for (int j = 0; j < ns; j++) {
            int i = ps->shards[s][j];
            const ps_param *p = &ps->p[i];
            if (!p->sparse) flags[j] |= PS_F_WANT;
            if (!g[i]) continue;
            flags[j] |= PS_F_GRAD;
            size_t bytes = ps_shard_bytes(p, s);
            st = weft_device_copy(WEFT_DEVICE_CPU, b + off, ps->dev, dptr(g[i]) + (size_t)p->row_off[s] * ps_row_bytes(p),
                                  bytes);
            if (st) {
                st = weft_error(st, "%s: gradient of '%s': %s", fn, p->name, weft_last_error());
                goto done;
            }
            off += bytes;
        }
        ssize[s] = off;
    }
    for (int s = 0; s < S; s++) {
        MPI_Irecv(ps->rbuf[s], (int)rsize[s], MPI_BYTE, W + s, PS_TAG_REP, ps->comm, &req[S + s]);
        MPI_Isend(ps->sbuf[s], (int)ssize[s], MPI_BYTE, W + s, PS_TAG_REQ, ps->comm, &req[s]);
        ps->st.bytes_out += (double)ssize[s];
    }
    if ((st = ps_waitall(ps, 2 * S, req, fn))) goto done;
    int64_t clock = INT64_MAX;
    for (int s = 0; s < S; s++) {
        ps_hdr h;
        memcpy(&h, ps->rbuf[s], sizeof h);
        if (h.clock < clock) clock = h.clock;
        size_t off = sizeof h;
        for (int j = 0; j < ps->nshards[s]; j++) {
            int i = ps->shards[s][j];
            const ps_param *p = &ps->p[i];
            if (p->sparse) continue;
            size_t bytes = ps_shard_bytes(p, s);
            weft_status cs = weft_device_copy(ps->dev, dptr(ps->params[i]) + (size_t)p->row_off[s] * ps_row_bytes(p),
                                              WEFT_DEVICE_CPU, ps->rbuf[s] + off, bytes);
            if (cs && !st) st = weft_error(cs, "%s: parameter '%s': %s", fn, p->name, weft_last_error());
            off += bytes;
        }
        ps->st.bytes_in += (double)rsize[s];
    }
    // BSP: a server that dropped a late push answers with the step it is at;
    // all servers answer the same clock unless a backup worker's push raced
    // between them, and the smallest keeps this worker's next push acceptable.
    ps->clock = clock;
    if (kind == PS_STEP) ps->st.pushes++;
    ps->st.pulls++;
done:
    for (int i = 0; g && i < ps->n; i++) weft_tensor_free(g[i]);
    free(g);
    free(req);
    free(rsize);
    free(ssize);
    return st;
}

weft_status weft_ps_step(weft_ps *ps, double lr) {
    if (ps && !(lr >= 0)) return weft_error(WEFT_ERR_ARG, "weft_ps_step: invalid learning rate %g", lr);
    return ps_dense(ps, PS_STEP, lr, "weft_ps_step");
}
weft_status weft_ps_pull(weft_ps *ps) { return ps_dense(ps, PS_PULL, 0, "weft_ps_pull"); }

// ---- worker: sparse rows (Part -> Gather per shard -> Stitch) ----

static int row_server(const ps_param *p, int S, int64_t r) {
    if (!p->split) return p->owner;
    for (int s = 0; s < S; s++)
        if (r >= p->row_off[s] && r < p->row_off[s] + p->row_cnt[s]) return s;
    return -1;
}

static weft_status check_rows(weft_ps *ps, int i, const weft_tensor *rows, const weft_tensor *vals, const char *fn,
                              const char *what, const int64_t **ids, int64_t *k) {
    weft_status st = worker_check(ps, fn);
    if (st) return st;
    if (i < 0 || i >= ps->n) return weft_error(WEFT_ERR_ARG, "%s: parameter %d out of range [0, %d)", fn, i, ps->n);
    const ps_param *p = &ps->p[i];
    if (p->ndim < 1) return weft_error(WEFT_ERR_SHAPE, "%s: parameter '%s' is 0-d (no rows)", fn, p->name);
    if (!rows || !vals) return weft_error(WEFT_ERR_ARG, "%s: NULL rows or %s", fn, what);
    if (weft_tensor_dtype(rows) != WEFT_I64 || weft_tensor_ndim(rows) != 1 || !weft_tensor_is_contiguous(rows) ||
        weft_tensor_device(rows).type != WEFT_CPU)
        return weft_error(WEFT_ERR_DTYPE, "%s: rows must be a contiguous 1-d i64 tensor (got %s, %d-d)", fn,
                          weft_dtype_name(weft_tensor_dtype(rows)), weft_tensor_ndim(rows));
    *k = weft_tensor_numel(rows);
    if (weft_tensor_dtype(vals) != p->dt)
        return weft_error(WEFT_ERR_DTYPE, "%s: %s is %s, parameter '%s' is %s", fn, what,
                          weft_dtype_name(weft_tensor_dtype(vals)), p->name, weft_dtype_name(p->dt));
    if (!weft_tensor_is_contiguous(vals) || weft_tensor_device(vals).type != WEFT_CPU)
        return weft_error(WEFT_ERR_ARG, "%s: %s must be a contiguous tensor", fn, what);
    if (weft_tensor_ndim(vals) < 1 || weft_tensor_size(vals, 0) != *k || weft_tensor_numel(vals) != *k * p->row_len) {
        char a[96];
        return weft_error(WEFT_ERR_SHAPE, "%s: %s is %s, expected %lld rows of %lld elements of '%s'", fn, what,
                          weft_tensor_shape_str(vals, a, sizeof a), (long long)*k, (long long)p->row_len, p->name);
    }
    *ids = weft_tensor_data(rows);
    for (int64_t j = 0; j < *k; j++)
        if ((*ids)[j] < 0 || (*ids)[j] >= p->rows)
            return weft_error(WEFT_ERR_ARG, "%s: row id %lld (position %lld) out of range [0, %lld) of '%s'", fn,
                              (long long)(*ids)[j], (long long)j, (long long)p->rows, p->name);
    return WEFT_OK;
}

// Part: the positions of the row ids each server owns, in order.
static weft_status part_rows(weft_ps *ps, const ps_param *p, const int64_t *ids, int64_t k, int64_t **pos,
                             int64_t *cnt, const char *fn) {
    int S = ps->servers;
    *pos = malloc(sizeof(int64_t) * (size_t)(k + 1));
    if (!*pos) return weft_error(WEFT_ERR_OOM, "%s: out of memory", fn);
    memset(cnt, 0, sizeof(int64_t) * (size_t)(S + 1));
    // Counting sort by server: cnt[s+1] first counts, then becomes offsets.
    int *who = malloc(sizeof(int) * (size_t)(k + 1));
    if (!who) return weft_error(WEFT_ERR_OOM, "%s: out of memory", fn);
    for (int64_t j = 0; j < k; j++) cnt[(who[j] = row_server(p, S, ids[j])) + 1]++;
    for (int s = 0; s < S; s++) cnt[s + 1] += cnt[s];
    int64_t *fill = malloc(sizeof(int64_t) * (size_t)S);
    if (!fill) {
        free(who);
        return weft_error(WEFT_ERR_OOM, "%s: out of memory", fn);
    }
    memcpy(fill, cnt, sizeof(int64_t) * (size_t)S);
    for (int64_t j = 0; j < k; j++) (*pos)[fill[who[j]]++] = j;
    free(fill);
    free(who);
    return WEFT_OK;
}

static weft_status ps_rows(weft_ps *ps, int i, const weft_tensor *rows, const weft_tensor *grad, weft_tensor *out,
                           double lr, const char *fn) {
    const int64_t *ids = NULL;
    int64_t k = 0;
    bool push = grad != NULL;
    weft_status st = check_rows(ps, i, rows, push ? grad : out, fn, push ? "grad" : "out", &ids, &k);
    if (st) return st;
    if (push && !(lr >= 0)) return weft_error(WEFT_ERR_ARG, "%s: invalid learning rate %g", fn, lr);
    const ps_param *p = &ps->p[i];
    int S = ps->servers, W = ps->workers;
    size_t rowb = ps_row_bytes(p);
    int64_t *pos = NULL, *cnt = calloc((size_t)S + 1, sizeof(int64_t));
    MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)(2 * S));
    if (!cnt || !req) {
        st = weft_error(WEFT_ERR_OOM, "%s: out of memory", fn);
        goto done;
    }
    if ((st = part_rows(ps, p, ids, k, &pos, cnt, fn))) goto done;
    for (int s = 0; s < 2 * S; s++) req[s] = MPI_REQUEST_NULL;
    for (int s = 0; s < S; s++) {
        int64_t ks = cnt[s + 1] - cnt[s];
        if (ks == 0) continue;
        size_t sb = sizeof(ps_hdr) + sizeof(int64_t) * (size_t)ks + (push ? (size_t)ks * rowb : 0);
        size_t rb = sizeof(ps_hdr) + (push ? 0 : (size_t)ks * rowb);
        if (sb > (size_t)INT32_MAX || rb > (size_t)INT32_MAX) {
            st = weft_error(WEFT_ERR_ARG, "%s: %lld rows for server %d exceed one message (2 GiB)", fn, (long long)ks, s);
            goto done;
        }
        if ((st = ps_reserve(ps, &ps->sbuf[s], &ps->scap[s], sb, fn)) ||
            (st = ps_reserve(ps, &ps->rbuf[s], &ps->rcap[s], rb, fn)))
            goto done;
    }
    for (int s = 0; s < S; s++) {
        int64_t ks = cnt[s + 1] - cnt[s];
        if (ks == 0) continue;
        ps_hdr h = {.kind = push ? PS_PUSH_ROWS : PS_PULL_ROWS, .param = i, .clock = ps->clock, .count = ks, .lr = lr};
        char *b = ps->sbuf[s];
        memcpy(b, &h, sizeof h);
        int64_t *lid = (int64_t *)(b + sizeof h);
        char *gd = b + sizeof h + sizeof(int64_t) * (size_t)ks;
        for (int64_t j = 0; j < ks; j++) {
            int64_t at = pos[cnt[s] + j];
            lid[j] = ids[at] - p->row_off[s];
            if (push) memcpy(gd + (size_t)j * rowb, (const char *)weft_tensor_data(grad) + (size_t)at * rowb, rowb);
        }
        size_t sb = sizeof h + sizeof(int64_t) * (size_t)ks + (push ? (size_t)ks * rowb : 0);
        if (!push) {
            size_t rb = sizeof h + (size_t)ks * rowb;
            MPI_Irecv(ps->rbuf[s], (int)rb, MPI_BYTE, W + s, PS_TAG_REP, ps->comm, &req[S + s]);
            ps->st.bytes_in += (double)rb;
        }
        // A synchronous send for pushes: it completes once the server has taken
        // the push, which it applies before reading any later request, so
        // whatever anyone asks after this call returns sees the update.
        if (push) MPI_Issend(b, (int)sb, MPI_BYTE, W + s, PS_TAG_REQ, ps->comm, &req[s]);
        else MPI_Isend(b, (int)sb, MPI_BYTE, W + s, PS_TAG_REQ, ps->comm, &req[s]);
        ps->st.bytes_out += (double)sb;
    }
    if ((st = ps_waitall(ps, 2 * S, req, fn))) goto done;
    for (int s = 0; !push && s < S; s++) {
        ps_hdr r;
        if (cnt[s + 1] == cnt[s]) continue;
        memcpy(&r, ps->rbuf[s], sizeof r);
        if (r.status != WEFT_OK) {
            st = weft_error((weft_status)r.status, "%s: server %d could not answer", fn, s);
            goto done;
        }
    }
    // Stitch: every server's rows back to their positions.
    for (int s = 0; !push && s < S; s++)
        for (int64_t j = 0; j < cnt[s + 1] - cnt[s]; j++)
            memcpy((char *)weft_tensor_data(out) + (size_t)pos[cnt[s] + j] * rowb,
                   ps->rbuf[s] + sizeof(ps_hdr) + (size_t)j * rowb, rowb);
done:
    free(pos);
    free(cnt);
    free(req);
    return st;
}

// t itself (a new reference) on the CPU, else a contiguous host copy
// (`read`: of its values); NULL stays NULL. Row ids and values on a device
// travel through these.
static weft_tensor *on_host(const weft_tensor *t, bool read, bool *failed) {
    if (!t) return NULL;
    if (weft_tensor_device(t).type == WEFT_CPU) return weft_tensor_ref((weft_tensor *)t);
    if (!weft_tensor_is_contiguous(t)) return weft_tensor_ref((weft_tensor *)t); // check_rows says what is wrong
    weft_tensor *h = read ? weft_tensor_to((weft_tensor *)t, WEFT_DEVICE_CPU)
                          : weft_tensor_empty_on(weft_tensor_ndim(t), weft_tensor_sizes(t), weft_tensor_dtype(t),
                                                 WEFT_DEVICE_CPU);
    if (!h) *failed = true;
    return h;
}

weft_status weft_ps_push_rows(weft_ps *ps, int i, const weft_tensor *rows, const weft_tensor *grad, double lr) {
    const char *fn = "weft_ps_push_rows";
    if (ps && !grad) return weft_error(WEFT_ERR_ARG, "%s: NULL grad", fn);
    bool failed = false;
    weft_tensor *hr = on_host(rows, true, &failed), *hg = on_host(grad, true, &failed);
    weft_status st = failed ? weft_error(weft_last_status(), "%s: %s", fn, weft_last_error())
                            : ps_rows(ps, i, hr, hg, NULL, lr, fn);
    weft_tensor_free(hr);
    weft_tensor_free(hg);
    return st;
}
weft_status weft_ps_pull_rows(weft_ps *ps, int i, const weft_tensor *rows, weft_tensor *out) {
    const char *fn = "weft_ps_pull_rows";
    if (ps && !out) return weft_error(WEFT_ERR_ARG, "%s: NULL out", fn);
    bool failed = false;
    weft_tensor *hr = on_host(rows, true, &failed), *ho = on_host(out, false, &failed);
    weft_status st = failed ? weft_error(weft_last_status(), "%s: %s", fn, weft_last_error())
                            : ps_rows(ps, i, hr, NULL, ho, 0, fn);
    if (!st && ho != out && (st = weft_tensor_copy_(out, ho))) st = weft_error(st, "%s: %s", fn, weft_last_error());
    weft_tensor_free(hr);
    weft_tensor_free(ho);
    return st;
}

// ---- worker: control messages ----

enum { PS_ERRMSG = 1024 };

// Sends a header (+ text) to every server; when reply, collects their
// answers and returns the first error one reports.
static weft_status ps_control(weft_ps *ps, ps_hdr h, const char *text, bool reply, const char *fn) {
    int S = ps->servers, W = ps->workers;
    size_t tl = text ? strlen(text) + 1 : 0;
    h.count = (int64_t)tl;
    MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)(2 * S));
    if (!req) return weft_error(WEFT_ERR_OOM, "%s: out of memory", fn);
    weft_status st = WEFT_OK;
    for (int s = 0; s < S && !st; s++)
        if (!(st = ps_reserve(ps, &ps->sbuf[s], &ps->scap[s], sizeof h + tl, fn)))
            st = ps_reserve(ps, &ps->rbuf[s], &ps->rcap[s], sizeof h + PS_ERRMSG, fn);
    if (st) {
        free(req);
        return st;
    }
    for (int s = 0; s < S; s++) {
        memcpy(ps->sbuf[s], &h, sizeof h);
        if (tl) memcpy(ps->sbuf[s] + sizeof h, text, tl);
        req[S + s] = MPI_REQUEST_NULL;
        if (reply) MPI_Irecv(ps->rbuf[s], (int)(sizeof h + PS_ERRMSG), MPI_BYTE, W + s, PS_TAG_REP, ps->comm, &req[S + s]);
        MPI_Isend(ps->sbuf[s], (int)(sizeof h + tl), MPI_BYTE, W + s, PS_TAG_REQ, ps->comm, &req[s]);
        ps->st.bytes_out += (double)(sizeof h + tl);
    }
    st = ps_waitall(ps, 2 * S, req, fn);
    free(req);
    for (int s = 0; reply && !st && s < S; s++) {
        ps_hdr r;
        memcpy(&r, ps->rbuf[s], sizeof r);
        ps->st.bytes_in += (double)sizeof r;
        if (r.status != WEFT_OK) {
            ps->rbuf[s][sizeof r + PS_ERRMSG - 1] = 0;
            st = weft_error((weft_status)r.status, "%s: server %d: %s", fn, s, ps->rbuf[s] + sizeof r);
        }
    }
    return st;
}

static weft_status ps_ckpt(weft_ps *ps, int kind, const char *dir, int64_t step, const char *fn) {
    weft_status st = worker_check(ps, fn);
    if (st) return st;
    if (!dir || !dir[0]) return weft_error(WEFT_ERR_ARG, "%s: empty directory", fn);
    if (step < 0) return weft_error(WEFT_ERR_ARG, "%s: negative step %lld", fn, (long long)step);
    if (strlen(dir) > 4000) return weft_error(WEFT_ERR_ARG, "%s: directory name too long", fn);
    ps_hdr h = {.kind = kind, .clock = ps->clock, .step = step};
    return ps_control(ps, h, dir, true, fn);
}

weft_status weft_ps_save(weft_ps *ps, const char *dir, int64_t step) {
    return ps_ckpt(ps, PS_SAVE, dir, step, "weft_ps_save");
}

weft_status weft_ps_load(weft_ps *ps, const char *dir, int64_t step) {
    weft_status st = ps_ckpt(ps, PS_LOAD, dir, step, "weft_ps_load");
    if (st) return st;
    ps->clock = 0;
    st = ps_dense(ps, PS_PULL, 0, "weft_ps_load");
    return st;
}

weft_status weft_ps_finish(weft_ps *ps) {
    weft_status st = worker_check(ps, "weft_ps_finish");
    if (st) return st;
    ps_hdr h = {.kind = PS_FINISH, .clock = ps->clock};
    st = ps_control(ps, h, NULL, false, "weft_ps_finish");
    ps->finished = true;
    return st;
}

#else // !WEFT_HAVE_MPI

#define NOMPI(fn) weft_error(WEFT_ERR_UNSUPPORTED, "%s: weft built without MPI", fn)
weft_ps *weft_ps_create(weft_comm *c, int n, weft_tensor *const *params, const char *const *names,
                        const weft_ps_opts *o) {
    NOMPI("weft_ps_create");
    return NULL;
}
void weft_ps_free(weft_ps *ps) {}
weft_status weft_ps_serve(weft_ps *ps) { return NOMPI("weft_ps_serve"); }
weft_status weft_ps_step(weft_ps *ps, double lr) { return NOMPI("weft_ps_step"); }
weft_status weft_ps_pull(weft_ps *ps) { return NOMPI("weft_ps_pull"); }
weft_status weft_ps_push_rows(weft_ps *ps, int i, const weft_tensor *rows, const weft_tensor *grad, double lr) {
    return NOMPI("weft_ps_push_rows");
}
weft_status weft_ps_pull_rows(weft_ps *ps, int i, const weft_tensor *rows, weft_tensor *out) {
    return NOMPI("weft_ps_pull_rows");
}
weft_status weft_ps_finish(weft_ps *ps) { return NOMPI("weft_ps_finish"); }
weft_status weft_ps_save(weft_ps *ps, const char *dir, int64_t step) { return NOMPI("weft_ps_save"); }
weft_status weft_ps_load(weft_ps *ps, const char *dir, int64_t step) { return NOMPI("weft_ps_load"); }
void ps_server_stats(const weft_ps *ps, weft_ps_stats *s) {}
#endif
