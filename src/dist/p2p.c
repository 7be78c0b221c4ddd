// Point-to-point send/recv of tensors on the communicator's `user` dup, on
// the caller's thread. Not numbered as collectives, but polled so that the
// communicator's timeout turns a message that never comes into an error.
// A device tensor travels through a host copy (sent from it, received into
// it and then copied up).
#include <sched.h>

#include "../core/core_impl.h"
#include "comm_impl.h"

#ifdef WEFT_HAVE_MPI

static weft_status p2p_check(const char *fn, weft_comm *c, const weft_tensor *t, int peer, const char *pname,
                             int tag) {
    if (!c) return weft_error(WEFT_ERR_ARG, "%s: communicator is NULL", fn);
    if (!t) return weft_error(WEFT_ERR_ARG, "%s: tensor is NULL", fn);
    if (!weft_tensor_is_contiguous(t)) return weft_error(WEFT_ERR_ARG, "%s: tensor is not contiguous", fn);
    if (weft_dist_mpi_dtype(weft_tensor_dtype(t)) == MPI_DATATYPE_NULL)
        return weft_error(WEFT_ERR_DTYPE, "%s: dtype %s cannot be sent", fn, weft_dtype_name(weft_tensor_dtype(t)));
    if (weft_tensor_numel(t) > 0x7fffffff) return weft_error(WEFT_ERR_ARG, "%s: tensor too large for MPI", fn);
    if (peer < 0 || peer >= c->size || peer == c->rank)
        return weft_error(WEFT_ERR_ARG, "%s: %s %d is not another rank of this communicator (size %d, rank %d)", fn,
                          pname, peer, c->size, c->rank);
    int *ub = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    if (tag < 0 || (flag && tag > *ub)) return weft_error(WEFT_ERR_ARG, "%s: bad tag %d", fn, tag);
    return WEFT_OK;
}

// Polls req until done or the communicator's timeout; 1 when done.
static int poll(weft_comm *c, MPI_Request *req, MPI_Status *st) {
    double to = atomic_load(&c->timeout), t0 = weft_dist_now();
    for (int i = 0;; i++) {
        int flag = 0;
        if (MPI_Test(req, &flag, st) != MPI_SUCCESS) return -1;
        if (flag) return 1;
        if ((i & 63) == 63) {
            if (to > 0 && weft_dist_now() - t0 > to) return 0;
            sched_yield();
        }
    }
}

static weft_status send_host(weft_comm *c, const weft_tensor *t, int dst, int tag) {
    MPI_Request req;
    if (MPI_Isend(weft_tensor_data(t), (int)weft_tensor_numel(t), weft_dist_mpi_dtype(weft_tensor_dtype(t)), dst, tag,
                  c->user, &req) != MPI_SUCCESS)
        return weft_error(WEFT_ERR_STATE, "dist_send: MPI_Isend failed");
    int r = poll(c, &req, MPI_STATUS_IGNORE);
    if (r == 1) return WEFT_OK;
    if (r == 0) {
        // The send may still complete later and read the data: keep the
        // tensor alive for it (a leak on a path that ends the job anyway).
        weft_tensor_ref((weft_tensor *)t);
        MPI_Request_free(&req);
        return weft_error(WEFT_ERR_STATE, "dist_send: message to rank %d (tag %d) not received after %.1f s", dst, tag,
                          atomic_load(&c->timeout));
    }
    return weft_error(WEFT_ERR_STATE, "dist_send: MPI error");
}

static weft_status recv_host(weft_comm *c, weft_tensor *t, int src, int tag) {
    MPI_Request req;
    MPI_Datatype dt = weft_dist_mpi_dtype(weft_tensor_dtype(t));
    int n = (int)weft_tensor_numel(t);
    if (MPI_Irecv(weft_tensor_data(t), n, dt, src, tag, c->user, &req) != MPI_SUCCESS)
        return weft_error(WEFT_ERR_STATE, "dist_recv: MPI_Irecv failed");
    MPI_Status st;
    int r = poll(c, &req, &st);
    if (r == 0) {
        MPI_Cancel(&req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        return weft_error(WEFT_ERR_STATE, "dist_recv: no message from rank %d (tag %d) after %.1f s", src, tag,
                          atomic_load(&c->timeout));
    }
    if (r < 0) // MPI_ERR_TRUNCATE
        return weft_error(WEFT_ERR_SHAPE, "dist_recv: message from rank %d (tag %d) is larger than the %d elements "
                                          "expected", src, tag, n);
    int got = 0;
    MPI_Get_count(&st, dt, &got);
    if (got != n)
        return weft_error(WEFT_ERR_SHAPE, "dist_recv: got %d elements from rank %d (tag %d), expected %d", got, src,
                          tag, n);
    return WEFT_OK;
}

weft_status weft_dist_send(weft_comm *c, const weft_tensor *t, int dst, int tag) {
    weft_status s = p2p_check("dist_send", c, t, dst, "dst", tag);
    if (s) return s;
    if (weft_tensor_device(t).type == WEFT_CPU) return send_host(c, t, dst, tag);
    weft_tensor *h = weft_tensor_to((weft_tensor *)t, WEFT_DEVICE_CPU);
    s = h ? send_host(c, h, dst, tag) : weft_error(weft_last_status(), "dist_send: %s", weft_last_error());
    weft_tensor_free(h);
    return s;
}

weft_status weft_dist_recv(weft_comm *c, weft_tensor *t, int src, int tag) {
    weft_status s = p2p_check("dist_recv", c, t, src, "src", tag);
    if (s) return s;
    if (weft_tensor_device(t).type == WEFT_CPU) return recv_host(c, t, src, tag);
    weft_tensor *h = weft_tensor_empty_on(weft_tensor_ndim(t), weft_tensor_sizes(t), weft_tensor_dtype(t), WEFT_DEVICE_CPU);
    s = h ? recv_host(c, h, src, tag) : weft_last_status();
    if (!s && (s = weft_tensor_copy_(t, h))) s = weft_error(s, "dist_recv: %s", weft_last_error());
    weft_tensor_free(h);
    return s;
}

#else
weft_status weft_dist_send(weft_comm *c, const weft_tensor *t, int dst, int tag) {
    return weft_error(WEFT_ERR_UNSUPPORTED, "dist_send: weft built without MPI");
}
weft_status weft_dist_recv(weft_comm *c, weft_tensor *t, int src, int tag) {
    return weft_error(WEFT_ERR_UNSUPPORTED, "dist_recv: weft built without MPI");
}
#endif
