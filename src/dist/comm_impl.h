// Internal to the communication layer (comm.c, collectives.c): the
// communicator, the work item and the queue to the communication thread.
#ifndef WEFT_DIST_COMM_IMPL_H
#define WEFT_DIST_COMM_IMPL_H

#include "dist_impl.h"

#ifdef WEFT_HAVE_MPI
#include <pthread.h>
#include <stdatomic.h>

typedef enum {
    WK_BROADCAST,
    WK_ALL_REDUCE,
    WK_REDUCE,
    WK_ALL_GATHER,
    WK_GATHER,
    WK_SCATTER,
    WK_REDUCE_SCATTER,
    WK_ALL_TO_ALL,
    WK_BARRIER,
    WK_FREE, // tear down a communicator's control traffic (not a collective)
    WK_NUM_KINDS,
    WK_ABANDON = 99 // control message: this rank gave up collective #seq (its watchdog fired)
} wk_kind;

const char *weft_dist_kind_name(int kind);

// Collectives over device tensors (collectives.c chooses by where a tensor
// lives): NCCL where weft has it and every rank of the communicator has a GPU
// of its own (cuda/nccl.c), else staged through host memory over MPI.
//
// NCCL's path issues the collective on the communicator's communication
// stream after the caller's current stream (which wrote the inputs) and
// returns a work item already issued: its event, recorded after the
// collective, is what weft_work_wait makes the caller's stream wait on (no
// host wait). Every rank must decide the same way, so the decision is a
// collective itself, made on the first collective over a device tensor.
typedef enum { DEV_UNDECIDED, DEV_NCCL, DEV_STAGED } dev_path;
#ifdef WEFT_HAVE_NCCL
// Whether c's collectives over tensors on device d go through NCCL: decided
// (collectively, over MPI) on the first call, then cached; the NCCL
// communicator and the communication stream are made then. -1 with an error.
int weft_nccl_wanted(weft_comm *c, weft_device d, const char *fn);
// Issues a collective whose arguments collectives.c has checked (kind: one of
// WK_BROADCAST, WK_ALL_REDUCE, WK_REDUCE, WK_ALL_GATHER, WK_REDUCE_SCATTER;
// a: in or in place, b: out). Returns an issued work item (done for the host).
struct weft_work *weft_nccl_issue(weft_comm *c, const char *fn, int kind, weft_tensor *a, weft_tensor *b,
                                  weft_reduce_op op, int root);
weft_status weft_nccl_work_finish(struct weft_work *w); // the caller's stream waits for it
bool weft_nccl_work_query(struct weft_work *w);         // the GPU has run it
void weft_nccl_work_free(struct weft_work *w);
void weft_nccl_comm_destroy(weft_comm *c);
#endif

#define ANN_SLOTS 64

struct weft_comm {
    MPI_Comm coll; // weft's collectives
    MPI_Comm ctl;  // arrival announcements and the debug exchange
    MPI_Comm user; // the caller's point-to-point traffic (weft_comm_mpi)
    // Collectives over device tensors (cuda/nccl.c), set up on the first one.
    pthread_mutex_t dev_mu;
    int dev_path;          // dev_path: NCCL or staged, the same on every rank
    weft_device dev;       // the device that decision was made for
    void *nccl;            // ncclComm_t
    void *nccl_stream;     // cudaStream_t: the communication stream
    void *nccl_ready;      // cudaEvent_t: recorded on the caller's stream before each collective
    int rank, size;
    int *world_ranks;
    bool is_world;
    _Atomic double timeout;
    atomic_bool debug;
    // Issue side (under the queue lock).
    uint64_t seq;
    struct weft_work *qhead, *qtail;
    // This communicator's communication thread (see comm.c).
    pthread_t thread;
    pthread_cond_t cv_work; // wakes it
    bool stop, has_thread;
    // Communication thread only.
    bool busy;
    atomic_bool broken;
    char broken_msg[1024];
    void *tmp; // scratch for the ring's incoming chunks
    size_t tmp_bytes;
    uint64_t *arr_seq; // last collective each rank announced
    uint64_t *abandoned; // last collective each rank gave up on (0: none)
    int *arr_kind;
    MPI_Request arr_req;
    int64_t arr_buf[2];
    bool arr_posted;
    struct {
        MPI_Request req;
        int64_t buf[2];
    } ann[ANN_SLOTS];
    int ann_next;
};

struct weft_work {
    weft_comm *c;
    const char *fn; // public function name, for messages
    int kind;
    weft_reduce_op rop;
    weft_dtype dt;
    int root;
    weft_tensor *a, *b; // referenced while in flight (a: in / in-place, b: out)
    void *sbuf, *rbuf;  // MPI buffers (MPI_IN_PLACE where applicable)
    int scount, rcount;
    int *counts, *displs, *rcounts, *rdispls; // v-variants (size entries each)
    int64_t n_total, n_local;                 // what the debug mode compares
    uint64_t seq;
    int state;
    MPI_Request req;
    struct weft_ring *ring; // large all-reduces: a ring over point-to-point (ring.c)
    int64_t dbg_mine[8], *dbg_all;
    double t_start;
    weft_status status;
    char msg[1024];
    atomic_int done;
    atomic_int refs; // the caller's handle + the communication thread
    struct weft_work *next;
    // Device tensors (collectives.c). Staged over MPI: the collective runs on
    // host copies, and the waiting thread copies the result (back_src, on the
    // host) into the device tensor back_dst. NCCL: issued already; nccl_done
    // is its event on the communication stream (device nccl_device).
    weft_tensor *back_dst, *back_src;
    bool issued;
    void *nccl_done;
    int nccl_device;
};

// Queue w on its communicator (numbering it if it is a collective); NULL and
// an error when the communicator is broken. Takes ownership of w.
weft_work *weft_dist_submit(weft_work *w);
// Submit + wait, on the caller's thread when the communicator is idle.
weft_status weft_dist_run(weft_work *w);
weft_work *weft_dist_work_new(weft_comm *c, const char *fn, int kind);
void weft_dist_work_release(weft_work *w);
// Run by the thread that waits, once w's collective has finished: a staged
// result's copy back to its device tensor, or the caller's stream waiting on
// NCCL's event (collectives.c).
weft_status weft_dist_work_finish(weft_work *w);
// Whether an issued (NCCL) item's collective has finished on the device.
bool weft_dist_work_query(weft_work *w);
double weft_dist_now(void);

// All-reduces of at least this many bytes run as a ring (reduce-scatter then
// all-gather) over MPI_Isend/Irecv: for large buffers OpenMPI's blocking
// MPI_Allreduce measured slower than the ring here (2.6 vs 4.8 GB/s at 32 MB,
// 2 ranks), while below it its tuned algorithms win (18.6 vs 13 GB/s at
// 4 MB). Every rank picks the same path (it depends only on the count and
// dtype, which all ranks share).
#define WEFT_RING_MIN_BYTES (16 * 1024 * 1024)
bool weft_ring_wanted(const weft_work *w);
int weft_ring_start(weft_work *w); // MPI_SUCCESS or an MPI error code
int weft_ring_test(weft_work *w, int *done);
void weft_ring_free(weft_work *w);
#endif

#endif
