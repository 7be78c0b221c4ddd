// Internal to pipeline parallelism (pp.c: messages, autograd sends and
// receives, splitting; pp_schedule.c: the schedules and the step).
#ifndef WEFT_DIST_PP_IMPL_H
#define WEFT_DIST_PP_IMPL_H

#include <weft/nn.h>
#include <weft/parallel.h>

// Messages of one (tag) travel in two directions: activations forward,
// their gradients back; the direction is part of the wire tag.
enum { PP_DIR_ACT = 0, PP_DIR_GRAD = 1 };

// Posts t to dst (never blocks: a host copy stays in flight until
// weft_pp_wait_sends). dst == this rank (or c NULL): a local mailbox.
weft_status weft_pp_post(weft_comm *c, weft_tensor *t, int dst, int tag, int dir);
// Receives a tensor of (ndim, sizes, dt) on dev from src (blocking, polled
// under the communicator's timeout); the time spent waiting is added to
// weft_pp_wait_seconds. A new tensor without history, or NULL.
weft_tensor *weft_pp_take(weft_comm *c, int ndim, const int64_t *sizes, weft_dtype dt, weft_device dev, int src,
                          int tag, int dir);
// Seconds this process has spent in blocking receives so far.
double weft_pp_wait_seconds(void);
// A token whose backward receives x's gradient from dst (see weft_pp_send);
// post = false records the node without sending x (it was sent already:
// activation recomputation).
weft_tensor *weft_pp_send_token(weft_comm *c, weft_tensor *x, int dst, int tag, bool post);
double weft_pp_now(void);
// A CPU tensor (whatever the default device) holding a copy of n values of
// dt from host memory: what the host reads back after a collective.
weft_tensor *weft_pp_host(const void *data, int64_t n, weft_dtype dt);

// One entry of a rank's schedule: the forward or backward of micro-batch m
// through local chunk v (global chunk v * P + rank).
typedef struct {
    bool fwd;
    int v, m;
} weft_pp_action;
// Rank r's actions under schedule s (V = 1 unless interleaved), in order:
// fills a[0 .. 2 * V * M) and returns 2 * V * M.
int weft_pp_actions(weft_pp_schedule s, int P, int V, int M, int r, weft_pp_action *a);

struct weft_pp {
    weft_comm *comm; // borrowed; NULL: one process
    int P, rank;     // pipeline size and this rank's stage
    int V, M;        // chunks per rank, micro-batches
    weft_pp_schedule schedule;
    bool recompute;
    weft_module *seq;     // borrowed
    int n;                // layers: the children of seq, nested sequentials flattened
    weft_module **layers; // (n) borrowed
    int *chunk_of;        // (n) chunk of each layer
    int *first, *count;   // (P*V) layers [first, first+count) of each chunk
    weft_pp_stats stats;
};

#endif
