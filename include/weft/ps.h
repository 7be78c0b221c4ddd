// weft/ps.h — parameter server over MPI.
//
// The ranks of a communicator split into workers (ranks 0..W-1) and servers
// (the last `servers` ranks). Servers hold the parameters sharded by key and
// apply the optimiser; workers push gradients and pull parameters.
//
//     weft_ps *ps = weft_ps_create(comm, n, params, names, &opts);   // every rank
//     if (weft_ps_is_server(ps)) weft_ps_serve(ps);                 // until all workers finish
//     else { for (...) { backward...; weft_ps_step(ps, lr); } weft_ps_finish(ps); }
//     weft_ps_free(ps);
//
// Sharding. A tensor with at most split_elems elements lives whole on one
// server, chosen by the FNV-1a hash of its name. A larger one is split across
// all servers by its first dimension (rows; a 1-D tensor by elements), with
// weft_dist_chunk: server s holds rows [off, off + count). Splitting by rows
// keeps every row of an embedding on one server, so sparse row operations go
// to exactly the servers that own the rows (Part -> Gather per shard -> Stitch).
//
// Dense updates. The server's optimiser (any weft_optim kind) runs on its
// shard tensors, with the learning rate a push carries.
//   BSP: step t is applied when the first N = workers - backup pushes for
//        clock t have arrived: their gradients are averaged (a parameter a
//        push has no gradient for counts as zero) and applied once, with the
//        lr of the push that completes the step. A pull for clock t+1 waits
//        for it. A push for a step already applied (a late backup worker) is
//        dropped; that worker gets the current parameters and continues at the
//        current step. When workers finish, a step needs only the unfinished
//        ones (min(N, unfinished)).
//   ASP: every push is applied on arrival, its gradient scaled by 1/workers so
//        that lr means what it means in BSP (W pushes ~ one averaged step).
//        Pulls never wait.
//   SSP(s): applied as ASP; the server keeps every worker's clock (pushes
//        made); a pull at clock c waits until the slowest unfinished worker's
//        clock >= c - s.
// Backup workers apply to BSP only.
//
// Sparse rows (embeddings). weft_ps_push_rows applies plain SGD on arrival to
// the rows named, in every mode (p[r] -= lr * g, a row named twice gets both
// updates), and touches no other row; it neither uses the optimiser's state
// nor advances clocks. weft_ps_pull_rows answers at once. Mark such a
// parameter with weft_ps_set_sparse so dense steps neither push nor pull it.
//
// Ordering: requests from one worker to one server are handled in the order
// sent, so a worker's pull after its push sees its push.
#ifndef WEFT_PS_H
#define WEFT_PS_H

#include "dist.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { WEFT_PS_BSP, WEFT_PS_ASP, WEFT_PS_SSP } weft_ps_mode;

typedef struct weft_ps_opts {
    int servers;            // number of server ranks: the LAST `servers` ranks of the communicator (>= 1)
    weft_ps_mode mode;
    int staleness;          // SSP bound s (>= 0)
    int backup;             // BSP backup workers k: each step applies the first (workers - k) gradients
    weft_optim_opts optim;  // the optimiser the servers apply
    int64_t split_elems;    // tensors with more elements are split across all servers (0: 65536)
} weft_ps_opts;

// servers 1, BSP, SGD (weft_optim_defaults), split_elems 65536.
weft_ps_opts weft_ps_defaults(void);
// "bsp", "asp", "ssp" (NULL for an unknown mode).
const char *weft_ps_mode_name(weft_ps_mode m);

typedef struct weft_ps weft_ps;

// Collective over c. params/names: the model's parameters (contiguous f32/f64
// tensors on one device; same names, shapes and dtypes on every rank,
// checked: a mismatch fails on every rank). A worker's parameters may be on
// an accelerator: it pushes their gradients and pulls into them through
// page-locked host memory. Servers keep their shards on the CPU (their
// params give only names, shapes and dtypes). On server ranks only shapes/dtypes/names
// matter; initial VALUES come from rank 0 (worker 0), and every worker's
// params are set to them. names may be NULL ("0", "1", ...).
weft_ps *weft_ps_create(weft_comm *c, int n, weft_tensor *const *params, const char *const *names,
                        const weft_ps_opts *o);
void weft_ps_free(weft_ps *ps); // NULL is fine; not collective
bool weft_ps_is_server(const weft_ps *ps);
int weft_ps_worker_rank(const weft_ps *ps);  // 0..workers-1 on workers, -1 on servers
int weft_ps_num_workers(const weft_ps *ps);
int weft_ps_num_servers(const weft_ps *ps);
// Server holding element 0 of parameter i (for a split tensor: server 0).
int weft_ps_param_server(const weft_ps *ps, int i);
bool weft_ps_param_is_split(const weft_ps *ps, int i);
// This worker's clock: the dense steps it has made (as the servers count them).
int64_t weft_ps_clock(const weft_ps *ps);

// Server ranks: serve until every worker has called weft_ps_finish.
weft_status weft_ps_serve(weft_ps *ps);

// Worker: exclude parameter i from dense steps (it is updated with the row
// functions). Every worker should mark the same parameters.
weft_status weft_ps_set_sparse(weft_ps *ps, int i, bool sparse);
// Worker: push the .grad of every (dense) param (lr is the rate the servers
// apply for this push; params without .grad are skipped), advance this
// worker's clock, then pull the parameters into params (in place) as the
// consistency mode allows.
weft_status weft_ps_step(weft_ps *ps, double lr);
// Worker: pull the dense parameters at the current clock, pushing nothing.
weft_status weft_ps_pull(weft_ps *ps);
// Worker: sparse rows of param i (rows along its first dimension, e.g. an
// embedding (V,D)). rows: i64 (K) ids in [0, V); grad and out: (K,D...) of the
// param's dtype, contiguous (on a device: staged through host copies).
weft_status weft_ps_push_rows(weft_ps *ps, int i, const weft_tensor *rows, const weft_tensor *grad, double lr);
weft_status weft_ps_pull_rows(weft_ps *ps, int i, const weft_tensor *rows, weft_tensor *out);
// Worker: no more requests from this worker.
weft_status weft_ps_finish(weft_ps *ps);

// Checkpoints. Every (unfinished) worker calls these with the same dir and
// step; each server acts once all of them have asked, so the shards form a
// consistent cut. save: server s writes its shard and its optimiser state to
// dir/ps-shard-<s>-<step>.safetensors atomically (dir is created). load:
// servers restore their shards and optimiser state, all clocks restart at 0,
// and the workers pull the restored parameters. An error on any server is
// returned on every worker.
weft_status weft_ps_save(weft_ps *ps, const char *dir, int64_t step);
weft_status weft_ps_load(weft_ps *ps, const char *dir, int64_t step);
// "DIR/ps-shard-<server>-<step>.safetensors" into buf (NULL when it does not fit).
const char *weft_ps_shard_path(const char *dir, int server, int64_t step, char *buf, size_t n);

typedef struct weft_ps_stats {
    int64_t pushes;        // dense pushes (worker: sent; server: received)
    int64_t applied;       // server: optimiser updates made (BSP: steps; ASP/SSP: pushes)
    int64_t dropped;       // server: late pushes dropped (BSP with backup workers)
    int64_t pulls;         // dense pulls (worker: made; server: answered)
    int64_t max_staleness; // server: max over answered pulls of (worker clock - slowest unfinished clock)
    int64_t rows_touched;  // server: distinct rows updated, summed over row pushes
    double bytes_in, bytes_out; // message bytes received / sent by this rank
} weft_ps_stats;
void weft_ps_get_stats(const weft_ps *ps, weft_ps_stats *s); // per rank

#ifdef __cplusplus
}
#endif
#endif
