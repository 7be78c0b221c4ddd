// Collectives over CUDA tensors through NCCL, bootstrapped through MPI.
//
// A weft_comm gets its NCCL communicator on the first collective over device
// tensors: rank 0 makes the unique id, MPI broadcasts it on the comm's own
// MPI communicator, and every rank joins with the device its tensor is on
// (one GPU per rank: NCCL refuses two ranks on one GPU). Calls are queued on
// the calling thread's current stream and return at once; the result is
// there for any later op on that stream, and a host read waits for it like
// any other device result. Argument checks come first and are the same on
// every rank, so a call that is wrong is wrong everywhere (no rank is left
// waiting in NCCL). Two failures are one rank's alone and leave the others
// waiting in NCCL: a collective over a tensor on another device than the
// first one used on this communicator (keep one device per rank), and an
// ncclCommInitRank that fails on one rank only.
#if defined(WEFT_HAVE_MPI) && defined(WEFT_HAVE_NCCL)
#include <nccl.h>
#include <string.h>

#include "../../device/cuda/cuda_impl.h"
#include "../../tensor/tensor_impl.h"
#include "../comm_impl.h"

static weft_status nccl_check(ncclResult_t r, const char *fn) {
    if (r == ncclSuccess) return WEFT_OK;
    return weft_error(WEFT_ERR_DEVICE, "%s: NCCL error: %s", fn, ncclGetErrorString(r));
}

static bool nccl_dtype(weft_dtype dt, ncclDataType_t *out, bool reduce) {
    switch (dt) {
    case WEFT_F32: *out = ncclFloat32; return true;
    case WEFT_F64: *out = ncclFloat64; return true;
    case WEFT_I32: *out = ncclInt32; return true;
    case WEFT_I64: *out = ncclInt64; return true;
    case WEFT_F16: *out = ncclFloat16; return true;
    case WEFT_BF16: *out = ncclBfloat16; return true;
    case WEFT_U8: *out = ncclUint8; return true;
    case WEFT_BOOL: *out = ncclUint8; return !reduce; // a sum of flags is not a flag
    default: return false;
    }
}

static bool nccl_op(weft_reduce_op op, ncclRedOp_t *out) {
    switch (op) {
    case WEFT_REDUCE_SUM: *out = ncclSum; return true;
    case WEFT_REDUCE_AVG: *out = ncclAvg; return true;
    case WEFT_REDUCE_MAX: *out = ncclMax; return true;
    default: return false;
    }
}

static weft_status check(const char *fn, weft_comm *c, const weft_tensor *t, const char *name, bool reduce,
                         ncclDataType_t *dt) {
    if (!c) return weft_error(WEFT_ERR_ARG, "%s: communicator is NULL", fn);
    if (!t) return weft_error(WEFT_ERR_ARG, "%s: %s is NULL", fn, name);
    if (t->device.type != WEFT_CUDA) return weft_error(WEFT_ERR_DEVICE, "%s: %s is not on a CUDA device", fn, name);
    if (!weft_tensor_is_contiguous(t)) return weft_error(WEFT_ERR_ARG, "%s: %s is not contiguous", fn, name);
    if (!nccl_dtype((weft_dtype)t->dtype, dt, reduce))
        return weft_error(WEFT_ERR_DTYPE, "%s: %s has dtype %s, which NCCL cannot %s", fn, name,
                          weft_dtype_name((weft_dtype)t->dtype), reduce ? "reduce" : "move");
    return WEFT_OK;
}

// c's NCCL communicator on `device`, made collectively on first use.
static ncclComm_t comm_for(weft_comm *c, int device, const char *fn) {
    if (c->nccl) {
        if (c->nccl_device != device)
            return weft_error_null(WEFT_ERR_DEVICE, "%s: this communicator's NCCL ranks use cuda:%d, not cuda:%d", fn,
                                   c->nccl_device, device);
        return (ncclComm_t)c->nccl;
    }
    // rank 0's id and whether it got one: on failure every rank stops here
    // instead of the others waiting in ncclCommInitRank for a rank 0 that never comes
    struct {
        int ok;
        ncclUniqueId id;
    } msg;
    memset(&msg, 0, sizeof msg);
    if (c->rank == 0) msg.ok = ncclGetUniqueId(&msg.id) == ncclSuccess;
    if (MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, 0, c->user) != MPI_SUCCESS)
        return weft_error_null(WEFT_ERR_STATE, "%s: broadcasting the NCCL id over MPI failed", fn);
    if (!msg.ok) return weft_error_null(WEFT_ERR_DEVICE, "%s: rank 0 could not make an NCCL id", fn);
    cudaSetDevice(device);
    ncclComm_t nc;
    if (nccl_check(ncclCommInitRank(&nc, c->size, msg.id, c->rank), fn) != WEFT_OK) return NULL;
    c->nccl = nc;
    c->nccl_device = device;
    return nc;
}

void weft_nccl_comm_destroy(weft_comm *c) {
    if (c->nccl) ncclCommDestroy((ncclComm_t)c->nccl);
    c->nccl = NULL;
}

weft_status weft_nccl_broadcast(weft_comm *c, weft_tensor *t, int root) {
    const char *fn = "dist_broadcast";
    ncclDataType_t dt = ncclFloat32;
    weft_status st = check(fn, c, t, "t", false, &dt);
    if (st) return st;
    if (root < 0 || root >= c->size) return weft_error(WEFT_ERR_ARG, "%s: root %d out of range", fn, root);
    ncclComm_t nc = comm_for(c, t->device.index, fn);
    if (!nc) return weft_last_status();
    void *p = weft_tensor_ptr(t);
    return nccl_check(ncclBroadcast(p, p, (size_t)t->numel, dt, root, nc, weft_cuda_stream(t->device.index)), fn);
}

static weft_status reduce_common(const char *fn, weft_comm *c, weft_tensor *t, weft_reduce_op op, int root,
                                 bool all) {
    ncclDataType_t dt = ncclFloat32;
    ncclRedOp_t rop;
    weft_status st = check(fn, c, t, "t", true, &dt);
    if (st) return st;
    if (!nccl_op(op, &rop)) return weft_error(WEFT_ERR_ARG, "%s: unknown reduce op %d", fn, (int)op);
    if (!all && (root < 0 || root >= c->size)) return weft_error(WEFT_ERR_ARG, "%s: root %d out of range", fn, root);
    ncclComm_t nc = comm_for(c, t->device.index, fn);
    if (!nc) return weft_last_status();
    void *p = weft_tensor_ptr(t);
    cudaStream_t s = weft_cuda_stream(t->device.index);
    ncclResult_t r = all ? ncclAllReduce(p, p, (size_t)t->numel, dt, rop, nc, s)
                         : ncclReduce(p, p, (size_t)t->numel, dt, rop, root, nc, s);
    return nccl_check(r, fn);
}

weft_status weft_nccl_all_reduce(weft_comm *c, weft_tensor *t, weft_reduce_op op) {
    return reduce_common("dist_all_reduce", c, t, op, 0, true);
}
weft_status weft_nccl_reduce(weft_comm *c, weft_tensor *t, weft_reduce_op op, int root) {
    return reduce_common("dist_reduce", c, t, op, root, false);
}

// Shared by all_gather and reduce_scatter: `big` holds size equal chunks of `small`'s length.
static weft_status check_pair(const char *fn, weft_comm *c, const weft_tensor *small, const char *sn,
                              const weft_tensor *big, const char *bn, bool reduce, ncclDataType_t *dt) {
    ncclDataType_t d2;
    weft_status st = check(fn, c, small, sn, reduce, dt);
    if (!st) st = check(fn, c, big, bn, reduce, &d2);
    if (st) return st;
    if (small->dtype != big->dtype) return weft_error(WEFT_ERR_DTYPE, "%s: in and out differ in dtype", fn);
    if (!weft_device_equal(small->device, big->device)) return weft_error(WEFT_ERR_DEVICE, "%s: in and out on different devices", fn);
    if (big->numel != small->numel * c->size)
        return weft_error(WEFT_ERR_SHAPE,
                          "%s: %s has %lld elements, expected %d x %lld (NCCL needs equal chunks on every rank)", fn,
                          bn, (long long)big->numel, c->size, (long long)small->numel);
    return WEFT_OK;
}

weft_status weft_nccl_all_gather(weft_comm *c, const weft_tensor *in, weft_tensor *out) {
    const char *fn = "dist_all_gather";
    ncclDataType_t dt = ncclFloat32;
    weft_status st = check_pair(fn, c, in, "in", out, "out", false, &dt);
    if (st) return st;
    ncclComm_t nc = comm_for(c, in->device.index, fn);
    if (!nc) return weft_last_status();
    return nccl_check(ncclAllGather(weft_tensor_ptr(in), weft_tensor_ptr(out), (size_t)in->numel, dt, nc,
                                    weft_cuda_stream(in->device.index)),
                      fn);
}

weft_status weft_nccl_reduce_scatter(weft_comm *c, const weft_tensor *in, weft_tensor *out, weft_reduce_op op) {
    const char *fn = "dist_reduce_scatter";
    ncclDataType_t dt = ncclFloat32;
    ncclRedOp_t rop;
    weft_status st = check_pair(fn, c, out, "out", in, "in", true, &dt);
    if (st) return st;
    if (!nccl_op(op, &rop)) return weft_error(WEFT_ERR_ARG, "%s: unknown reduce op %d", fn, (int)op);
    ncclComm_t nc = comm_for(c, in->device.index, fn);
    if (!nc) return weft_last_status();
    return nccl_check(ncclReduceScatter(weft_tensor_ptr(in), weft_tensor_ptr(out), (size_t)out->numel, dt, rop, nc,
                                        weft_cuda_stream(in->device.index)),
                      fn);
}

#endif
