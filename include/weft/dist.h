// weft/dist.h — communicators and collectives over MPI.
//
// One process per rank, started by mpirun (or `weft launch`). MPI is the
// engine: weft adds tensors, sub-groups, asynchronous handles progressed by a
// communication thread, and safety (every collective is numbered; a debug
// mode checks that all ranks issue the same one; a watchdog turns a stuck
// collective into an error naming the op and the ranks that have not arrived).
//
// Tensors passed to collectives are contiguous (reductions: f32, f64, i32,
// i64, u8; moves: also f16, bf16, bool), on the CPU or on a device; the
// tensors of one call share a device, and every rank passes tensors on the
// same kind of device. Where they live chooses the path: MPI for CPU
// tensors; for CUDA tensors NCCL, on the communicator's own communication
// stream, when weft is built with NCCL and every rank of the communicator has
// a GPU of its own (decided collectively on the first collective over device
// tensors; WEFT_DIST_NCCL=0 turns it off); otherwise (ranks sharing a GPU, no
// NCCL) the tensors are staged through host memory over MPI. A collective
// over device tensors is ordered after the work queued before it on the
// calling thread's current stream, and its result is there for the work
// queued there after it returns (blocking) or after weft_work_wait (async):
// with NCCL the host does not wait for the GPU in either.
//
// A collective returns an error (never aborts) on bad arguments; a watchdog
// timeout leaves the communicator unusable: report the error and exit
// (weft_dist_abort ends every rank). The watchdog and the debug mode cover
// the MPI paths (NCCL's collectives are not numbered).
#ifndef WEFT_DIST_H
#define WEFT_DIST_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- process setup ----
bool weft_dist_available(void);  // built with MPI
bool weft_dist_launched(void);   // this process was started by mpirun (its environment says so)
// Initialises MPI (thread level MULTIPLE) once; later calls do nothing.
// argc/argv may be NULL.
weft_status weft_dist_init(int *argc, char ***argv);
bool weft_dist_is_initialized(void);
// This process's rank among the ranks on its node, and how many share the
// node (0 and 1 before weft_dist_init or without MPI). weft train gives rank
// r the GPU (local rank mod GPUs) when it is asked for plain `--device cuda`.
int weft_dist_local_rank(void);
int weft_dist_local_size(void);
// Waits for pending work, frees the world communicator, finalises MPI.
weft_status weft_dist_finalize(void);
// Asks MPI to end every rank of the job now (MPI_Abort) with this exit code.
// Returns only when MPI is not running; the caller then ends its own process.
void weft_dist_abort(int code);

// ---- communicators ----
typedef struct weft_comm weft_comm;
weft_comm *weft_comm_world(void);  // borrowed; NULL (with an error) before weft_dist_init
// Ranks with the same color form a new communicator, ordered by key (then by
// rank). color < 0: this rank joins none and gets NULL without an error.
// Collective over c.
weft_comm *weft_comm_split(weft_comm *c, int color, int key);
void weft_comm_free(weft_comm *c); // not the world
int weft_comm_rank(const weft_comm *c);
int weft_comm_size(const weft_comm *c);
// Rank in the world communicator of rank r of c.
int weft_comm_world_rank(const weft_comm *c, int r);
// Collectives issued on c so far (each one gets the next sequence number).
uint64_t weft_comm_seq(const weft_comm *c);
// A collective not finished after `seconds` fails with the watchdog's error.
// Default: $WEFT_DIST_TIMEOUT or 600 s. <= 0: no timeout.
void weft_comm_set_timeout(weft_comm *c, double seconds);
// Debug mode: before each collective the ranks exchange (op, dtype, count,
// sequence) and fail with an error naming the ranks that disagree. Default:
// on when $WEFT_DIST_DEBUG is set to a non-zero value.
void weft_comm_set_debug(weft_comm *c, bool on);

// ---- how uneven counts are split ----
// Elements [*offset, *offset + *count) of n go to rank r of size ranks: the
// first n % size ranks get one more (as torch.tensor_split).
void weft_dist_chunk(int64_t n, int size, int r, int64_t *offset, int64_t *count);

// ---- collectives (blocking; every rank of c calls them in the same order) ----
typedef enum { WEFT_REDUCE_SUM, WEFT_REDUCE_AVG, WEFT_REDUCE_MAX } weft_reduce_op;

weft_status weft_dist_broadcast(weft_comm *c, weft_tensor *t, int root);               // in place
weft_status weft_dist_all_reduce(weft_comm *c, weft_tensor *t, weft_reduce_op op);    // in place
weft_status weft_dist_reduce(weft_comm *c, weft_tensor *t, weft_reduce_op op, int root); // in place; result on root
// in: this rank's chunk of out (weft_dist_chunk of numel(out)); out: everything, on every rank.
weft_status weft_dist_all_gather(weft_comm *c, const weft_tensor *in, weft_tensor *out);
// As all_gather, with out only on root (NULL elsewhere).
weft_status weft_dist_gather(weft_comm *c, const weft_tensor *in, weft_tensor *out, int root);
// Root's in (NULL elsewhere) is split by weft_dist_chunk; each rank gets its chunk in out.
weft_status weft_dist_scatter(weft_comm *c, const weft_tensor *in, weft_tensor *out, int root);
// in (same numel on every rank) is reduced elementwise; this rank keeps its chunk in out.
weft_status weft_dist_reduce_scatter(weft_comm *c, const weft_tensor *in, weft_tensor *out, weft_reduce_op op);
// in (numel n, same on every rank) is split by weft_dist_chunk into size chunks; chunk j
// goes to rank j. out holds what every rank sent here, in rank order (size * chunk(n, r)).
weft_status weft_dist_all_to_all(weft_comm *c, const weft_tensor *in, weft_tensor *out);
weft_status weft_dist_barrier(weft_comm *c);
// Point to point (not numbered as collectives; tag >= 0).
weft_status weft_dist_send(weft_comm *c, const weft_tensor *t, int dst, int tag);
weft_status weft_dist_recv(weft_comm *c, weft_tensor *t, int src, int tag);

// ---- asynchronous collectives ----
// Start the operation on the communication thread and return at once. The
// tensors are referenced until it completes; do not touch their data before
// weft_work_wait. Operations on one communicator run in the order issued.
// Device tensors: a staged collective copies its inputs to the host before
// returning, and weft_work_wait copies the result back; NCCL's is queued on
// the communication stream, and weft_work_wait makes the caller's current
// stream wait for it (issue and wait from one thread per communicator).
typedef struct weft_work weft_work;
weft_work *weft_dist_all_reduce_async(weft_comm *c, weft_tensor *t, weft_reduce_op op);
weft_work *weft_dist_broadcast_async(weft_comm *c, weft_tensor *t, int root);
weft_work *weft_dist_all_gather_async(weft_comm *c, const weft_tensor *in, weft_tensor *out);
weft_work *weft_dist_reduce_scatter_async(weft_comm *c, const weft_tensor *in, weft_tensor *out, weft_reduce_op op);
// 1: finished (call wait to collect the status), 0: still running. NCCL: the GPU has run it.
int weft_work_test(weft_work *w);
// Waits for completion, frees w and returns the operation's status.
weft_status weft_work_wait(weft_work *w);

#ifdef __cplusplus
}
#endif
#endif
