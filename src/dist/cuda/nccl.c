// Collectives over CUDA tensors through NCCL, bootstrapped through MPI.
//
// The decision. On the first collective over a device tensor, every rank of
// the communicator says whether it can use NCCL there (a real GPU, not the
// tests' mock; WEFT_DIST_NCCL not 0; its stream and event made) and which GPU
// it is (host name + PCI bus id); the ranks all-gather that over MPI. NCCL is
// used only when every rank can and no two ranks share a GPU (NCCL refuses
// that: `mpirun -np 2` on a one-GPU machine stages through host memory
// instead). Everyone computes the same answer from the same table, so all
// take the same path. For NCCL, rank 0 makes the unique id, MPI broadcasts it
// and every rank joins (ncclCommInitRank) on the device of that first tensor;
// the device is fixed from then on (one GPU per rank).
//
// Streams. Each communicator has its own communication stream (high
// priority, non-blocking). A collective is issued there after the caller's
// current stream, which wrote its inputs (an event recorded on the caller's
// stream, waited on by the communication stream); an event recorded after it
// is the work item's. weft_work_wait makes the caller's current stream wait on
// that event: the host never waits, and ops queued after the wait see the
// result. Meanwhile the caller's stream goes on computing (DDP: the rest of
// backward). The tensors are referenced until the wait, and the allocator is
// told that they are used on the communication stream, so their memory is not
// reused before the collective has run.
//
// Every rank must issue the same collectives in the same order from one
// thread per communicator (NCCL's rule). Argument checks (collectives.c) come
// first and are the same on every rank. Failures that are one rank's alone
// leave the others waiting inside NCCL: an ncclCommInitRank that fails on one
// rank, and an NCCL call that fails to enqueue on one rank.
#if defined(WEFT_HAVE_MPI) && defined(WEFT_HAVE_NCCL)
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../device/cuda/cuda_impl.h"
#include "../../tensor/tensor_impl.h"
#include "../comm_impl.h"

static weft_status nccl_check(ncclResult_t r, const char *fn) {
    if (r == ncclSuccess) return WEFT_OK;
    return weft_error(WEFT_ERR_DEVICE, "%s: NCCL error: %s", fn, ncclGetErrorString(r));
}

static bool nccl_dtype(weft_dtype dt, ncclDataType_t *out) {
    switch (dt) {
    case WEFT_F32: *out = ncclFloat32; return true;
    case WEFT_F64: *out = ncclFloat64; return true;
    case WEFT_I32: *out = ncclInt32; return true;
    case WEFT_I64: *out = ncclInt64; return true;
    case WEFT_F16: *out = ncclFloat16; return true;
    case WEFT_BF16: *out = ncclBfloat16; return true;
    case WEFT_U8:
    case WEFT_BOOL: *out = ncclUint8; return true; // bools only move (collectives.c refuses to reduce them)
    default: return false;
    }
}

static ncclRedOp_t nccl_op(weft_reduce_op op) {
    return op == WEFT_REDUCE_MAX ? ncclMax : op == WEFT_REDUCE_AVG ? ncclAvg : ncclSum;
}

// ---- the decision (collective) ----

static uint64_t fnv1a(uint64_t h, const char *s) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

// Which physical GPU device `index` is: host name + PCI bus id (so ranks
// that see one GPU under different indices, or different GPUs under one
// index through CUDA_VISIBLE_DEVICES, are told apart). 0: unknown.
static int64_t gpu_key(int index) {
    char host[256] = "", bus[64] = "";
    gethostname(host, sizeof host - 1);
    if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, index) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    uint64_t h = fnv1a(fnv1a(14695981039346656037ull, host), bus);
    return (int64_t)(h >> 1) | 1; // positive, never 0
}

// This rank's stream and event for NCCL on device `index` (made before the
// ranks agree, so that only ncclCommInitRank itself can fail afterwards).
static bool make_stream(weft_comm *c, int index) {
    if (weft_device_count(WEFT_CUDA) <= index || weft_cuda_device_count() <= index) return false; // the mock
    if (!weft_cuda_stream(index)) return false; // sets the device up (and current)
    int lo = 0, hi = 0;
    cudaStream_t s = NULL;
    cudaEvent_t e = NULL;
    if (cudaDeviceGetStreamPriorityRange(&lo, &hi) != cudaSuccess ||
        cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, hi) != cudaSuccess ||
        cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        if (s) cudaStreamDestroy(s);
        return false;
    }
    c->nccl_stream = s;
    c->nccl_ready = e;
    return true;
}

static void drop_stream(weft_comm *c) {
    if (c->nccl_ready) cudaEventDestroy((cudaEvent_t)c->nccl_ready);
    if (c->nccl_stream) cudaStreamDestroy((cudaStream_t)c->nccl_stream);
    c->nccl_ready = c->nccl_stream = NULL;
}

// A host i64 tensor of n elements (MPI's side of the exchange, whatever the default device).
static weft_tensor *host_i64(int64_t n) { return weft_tensor_empty_on(1, &n, WEFT_I64, WEFT_DEVICE_CPU); }

// Joins every rank of c to one NCCL communicator on device `index`.
static weft_status join(weft_comm *c, int index, const char *fn) {
    // rank 0's id and whether it got one: on failure every rank stops here
    // instead of the others waiting in ncclCommInitRank for a rank 0 that never comes
    int64_t n = 8 + (int64_t)sizeof(ncclUniqueId);
    weft_tensor *msg = weft_tensor_empty_on(1, &n, WEFT_U8, WEFT_DEVICE_CPU);
    if (!msg) return weft_last_status();
    unsigned char *m = weft_tensor_data(msg);
    memset(m, 0, (size_t)n);
    if (c->rank == 0) m[0] = ncclGetUniqueId((ncclUniqueId *)(m + 8)) == ncclSuccess;
    weft_status st = weft_dist_broadcast(c, msg, 0);
    ncclUniqueId id;
    memcpy(&id, m + 8, sizeof id);
    bool ok = m[0] != 0;
    weft_tensor_free(msg);
    if (st) return st;
    if (!ok) return weft_error(WEFT_ERR_DEVICE, "%s: rank 0 could not make an NCCL id", fn);
    cudaSetDevice(index);
    ncclComm_t nc;
    st = nccl_check(ncclCommInitRank(&nc, c->size, id, c->rank), fn);
    if (st) return st;
    c->nccl = nc;
    return WEFT_OK;
}

// Decides c's path for device tensors (every rank the same way); see the top.
static int decide(weft_comm *c, weft_device d, const char *fn) {
    const char *env = getenv("WEFT_DIST_NCCL");
    bool can = d.type == WEFT_CUDA && !(env && !strcmp(env, "0")) && make_stream(c, d.index);
    int64_t key = can ? gpu_key(d.index) : 0;
    weft_tensor *mine = host_i64(2), *all = host_i64(2 * (int64_t)c->size);
    weft_status st = mine && all ? WEFT_OK : weft_last_status();
    if (!st) {
        int64_t *p = weft_tensor_data(mine);
        p[0] = can && key != 0;
        p[1] = key;
        st = weft_dist_all_gather(c, mine, all);
    }
    bool nccl = !st;
    for (int r = 0; nccl && r < c->size; r++) {
        const int64_t *a = (const int64_t *)weft_tensor_data(all) + 2 * r;
        nccl = a[0] != 0;
        for (int q = 0; nccl && q < r; q++) nccl = a[1] != ((const int64_t *)weft_tensor_data(all))[2 * q + 1];
    }
    weft_tensor_free(mine);
    weft_tensor_free(all);
    if (st) {
        drop_stream(c);
        weft_error(st, "%s: choosing how device tensors travel: %s", fn, weft_last_error());
        return -1;
    }
    c->dev = d;
    if (!nccl) {
        drop_stream(c);
        c->dev_path = DEV_STAGED;
        return 0;
    }
    st = join(c, d.index, fn);
    if (st) {
        drop_stream(c);
        return -1;
    }
    c->dev_path = DEV_NCCL;
    return 1;
}

int weft_nccl_wanted(weft_comm *c, weft_device d, const char *fn) {
    pthread_mutex_lock(&c->dev_mu);
    int r;
    if (c->dev_path == DEV_UNDECIDED) r = decide(c, d, fn);
    else if (c->dev_path == DEV_STAGED) r = 0; // host copies work from any device
    else if (!weft_device_equal(c->dev, d)) {
        char a[32], b[32];
        weft_error(WEFT_ERR_DEVICE, "%s: this communicator's NCCL ranks use %s, not %s (one GPU per rank)", fn,
                   weft_device_str(c->dev, a, sizeof a), weft_device_str(d, b, sizeof b));
        r = -1;
    } else r = 1;
    pthread_mutex_unlock(&c->dev_mu);
    return r;
}

void weft_nccl_comm_destroy(weft_comm *c) {
    if (c->nccl) {
        cudaStreamSynchronize((cudaStream_t)c->nccl_stream); // collectives still queued there
        // Tensors that went through a collective are recorded on the stream
        // (used_on); freed after it is gone, they must not record an event there.
        weft_cuda_forget_stream(c->dev.index, (cudaStream_t)c->nccl_stream);
        ncclCommDestroy((ncclComm_t)c->nccl);
    }
    c->nccl = NULL;
    drop_stream(c);
}

// ---- issuing ----

// Tell the allocator that t's memory is also used on stream s.
static void used_on(const weft_tensor *t, cudaStream_t s) {
    if (t && t->storage && t->storage->data) weft_cuda_record_stream(t->device.index, t->storage->data, s);
}

weft_work *weft_nccl_issue(weft_comm *c, const char *fn, int kind, weft_tensor *a, weft_tensor *b, weft_reduce_op op,
                           int root) {
    ncclDataType_t dt;
    if (!nccl_dtype((weft_dtype)a->dtype, &dt))
        return weft_error_null(WEFT_ERR_DTYPE, "%s: NCCL cannot move dtype %s", fn, weft_dtype_name((weft_dtype)a->dtype));
    weft_work *w = weft_dist_work_new(c, fn, kind);
    if (!w) return NULL;
    atomic_store(&w->refs, 1); // no communication thread takes part
    int dev = c->dev.index;
    pthread_mutex_lock(&c->dev_mu);
    ncclComm_t nc = (ncclComm_t)c->nccl;
    cudaStream_t cs = weft_cuda_stream(dev), ns = (cudaStream_t)c->nccl_stream;
    cudaEvent_t done = NULL;
    weft_status st = cs ? WEFT_OK : weft_error(WEFT_ERR_DEVICE, "%s: cuda:%d is not usable", fn, dev);
    // The inputs are written on the caller's stream: the communication stream waits for it.
    if (!st) st = weft_cuda_check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), fn);
    if (!st) st = weft_cuda_check(cudaEventRecord((cudaEvent_t)c->nccl_ready, cs), fn);
    if (!st) st = weft_cuda_check(cudaStreamWaitEvent(ns, (cudaEvent_t)c->nccl_ready, 0), fn);
    void *pa = weft_tensor_ptr(a), *pb = b ? weft_tensor_ptr(b) : NULL;
    size_t na = (size_t)a->numel, nb = b ? (size_t)b->numel : 0;
    if (!st && (na > 0 || nb > 0)) { // every rank has the same counts: an empty one is skipped everywhere
        ncclResult_t r = ncclSuccess;
        switch (kind) {
        case WK_BROADCAST: r = ncclBroadcast(pa, pa, na, dt, root, nc, ns); break;
        case WK_ALL_REDUCE: r = ncclAllReduce(pa, pa, na, dt, nccl_op(op), nc, ns); break;
        case WK_REDUCE: r = ncclReduce(pa, pa, na, dt, nccl_op(op), root, nc, ns); break;
        case WK_ALL_GATHER: r = ncclAllGather(pa, pb, na, dt, nc, ns); break; // in place when a is b's chunk
        case WK_REDUCE_SCATTER: r = ncclReduceScatter(pa, pb, nb, dt, nccl_op(op), nc, ns); break;
        default: r = ncclInvalidArgument; break;
        }
        st = nccl_check(r, fn);
    }
    if (!st) {
        used_on(a, ns);
        used_on(b, ns);
        st = weft_cuda_check(cudaEventRecord(done, ns), fn);
    }
    pthread_mutex_unlock(&c->dev_mu);
    if (st) {
        if (done) cudaEventDestroy(done);
        weft_dist_work_release(w);
        return NULL;
    }
    w->a = weft_tensor_ref(a);
    w->b = b ? weft_tensor_ref(b) : NULL;
    w->dt = (weft_dtype)a->dtype;
    w->rop = op;
    w->root = root;
    w->issued = true;
    w->nccl_done = done;
    w->nccl_device = dev;
    w->status = WEFT_OK;
    atomic_store(&w->done, 1); // for the host: the device side is the event
    return w;
}

weft_status weft_nccl_work_finish(weft_work *w) {
    ncclResult_t ar = ncclSuccess;
    if (w->c->nccl && ncclCommGetAsyncError((ncclComm_t)w->c->nccl, &ar) == ncclSuccess && ar != ncclSuccess &&
        ar != ncclInProgress)
        return weft_error(WEFT_ERR_DEVICE, "%s: NCCL error: %s", w->fn, ncclGetErrorString(ar));
    cudaStream_t cs = weft_cuda_stream(w->nccl_device);
    if (!cs) return weft_error(WEFT_ERR_DEVICE, "%s: cuda:%d is not usable", w->fn, w->nccl_device);
    return weft_cuda_check(cudaStreamWaitEvent(cs, (cudaEvent_t)w->nccl_done, 0), w->fn);
}

bool weft_nccl_work_query(weft_work *w) {
    cudaError_t e = cudaEventQuery((cudaEvent_t)w->nccl_done);
    if (e != cudaSuccess) cudaGetLastError(); // cudaErrorNotReady stays as the thread's last error otherwise
    return e != cudaErrorNotReady;
}

void weft_nccl_work_free(weft_work *w) {
    cudaEventDestroy((cudaEvent_t)w->nccl_done);
    w->nccl_done = NULL;
}

#endif
