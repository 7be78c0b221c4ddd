// The executor's per-run state (run.c), shared with the CUDA-graph capture
// of serial planned runs (capture.c), which drives the same node functions.
#ifndef WEFT_GRAPH_RUN_IMPL_H
#define WEFT_GRAPH_RUN_IMPL_H

#include <pthread.h>

#include "graph_impl.h"
#include "plan.h"

typedef struct run_ctx {
    weft_graph *g;
    uint8_t *needed;    // [nodes]
    int32_t *indeg;     // [nodes] predecessors not yet run (data edges + control deps)
    int32_t *succ_off;  // [nodes+1] CSR of successors
    int32_t *succ;      // [edges]
    int32_t *uses;      // [values] consumers (input edges) still to run
    uint8_t *fetched;   // [values]
    weft_tensor **vals; // [values] live tensors
    weft_tensor **feed; // [values] fed tensors (placeholders)
    int32_t *queue;     // [nodes] ready queue (FIFO)
    int32_t *order;     // [nodes] serial execution order (from the cycle check)
    uint8_t *co;        // [nodes] co[s]: step s runs together with step s-1 (coschedule.c)
    int n_order;
    int32_t *live;      // [values] ids of values holding a tensor
    int32_t *live_pos;  // [values] index in live, -1
    int n_live;
    const void **ext; // sorted storages that are not intermediates (feeds, constants, variables)
    int n_ext;
    const void **scratch; // [values]
    size_t peak;
    // memory plan (serial runs)
    bool use_plan;
    weft_plan plan;
    weft_tensor *arena;
    // the device every node runs on (resolve_device in run.c)
    weft_device dev;
    // CUDA-graph recording (capture.c): values whose last use came while
    // recording are dropped after the recording ends (kept for a plain rerun)
    bool defer_drops;
    int32_t *pending; // [values]
    int n_pending;
    // parallel runs
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int head, tail, done;
    weft_status err;
    char errmsg[1024];
    uint64_t run_no; // this run's number (g->rng_runs before it): random ops' seeds
    // in-place updates: [values] the VARIABLE node an OP output is written
    // into (-1: none); borrowed from the run cache
    const int32_t *inplace;
    // peak accounting: storage -> live values using it (-1: not an
    // intermediate), an open-addressing map, and the bytes of live storages
    const void **skey;
    int32_t *scount;
    size_t scap, cur_bytes;
} run_ctx;

// Run one node into outs[0..n_out) (new references; not yet published in
// c->vals). Reads c->vals of its inputs only, so several nodes may run at once.
weft_status weft_run_exec_node(run_ctx *c, int32_t id, weft_tensor **outs);
// Publish a run node's outputs, then liveness: an input dies with its last
// consumer, an unused output at once (later, with c->defer_drops).
void weft_run_commit_node(run_ctx *c, int32_t x, weft_tensor **outs);
// Publish value v (a new reference) / drop the values deferred by c->defer_drops.
void weft_run_set_val(run_ctx *c, int32_t v, weft_tensor *t);
void weft_run_flush_drops(run_ctx *c);
// The variable op output v is written into in place this run, or NULL.
weft_tensor *weft_run_inplace_var(const run_ctx *c, int32_t v);
// A storage that holds no intermediate (the peak accounting skips it); at most n_feeds more.
void weft_run_mark_ext(run_ctx *c, const void *storage);

// ---- CUDA-graph capture of a planned serial run (capture.c) ----
// What one (fetches, targets) entry of the run cache captured: a segment
// plan, the recorded graphs, and the memory they write (one arena, fixed
// buffers for the feeds). Freed with the entry.
typedef struct weft_capture weft_capture;
void weft_capture_free(weft_capture *k);
// Whether this serial planned run captures: the device has capture,
// WEFT_CUDA_GRAPHS is not 0, and *kp has not given up (*why says why not;
// a switched-off capture is freed, so switching it on again probes afresh).
bool weft_capture_wanted(const run_ctx *c, weft_capture **kp, const char **why);
// The arena for this run (the capture's own, made on first use; a new reference).
weft_tensor *weft_capture_arena(weft_capture **kp, run_ctx *c, int64_t bytes);
// Run every step of c->order, capturing and replaying through *kp (made on
// first use; dropped when capture turns out impossible, so the next run is plain).
weft_status weft_capture_run(weft_capture **kp, run_ctx *c);

#endif
