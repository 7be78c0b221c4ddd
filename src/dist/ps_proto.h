// Internal state and wire format of the parameter server (ps.c: creation and
// the worker side; ps_server.c: the server loop).
#ifndef WEFT_PS_PROTO_H
#define WEFT_PS_PROTO_H

#include <weft/autograd.h>
#include <weft/ps.h>

#include "../core/core_impl.h"

#ifdef WEFT_HAVE_MPI
#include "dist_impl.h"

// Tags on the PS's own communicator: requests go to servers on one tag (so a
// server sees one worker's requests in the order sent), replies on another.
enum { PS_TAG_REQ = 1, PS_TAG_REP = 2, PS_TAG_INIT = 3 };

enum {
    PS_STEP = 1,  // push gradients, advance the clock, pull parameters
    PS_PULL,      // pull parameters at the current clock
    PS_PUSH_ROWS, // sparse SGD on rows (no reply)
    PS_PULL_ROWS, // rows of one parameter
    PS_SAVE,      // write this server's shard (barrier over the workers)
    PS_LOAD,      // read it back, clocks restart (barrier over the workers)
    PS_FINISH,    // this worker is done (no reply)
};

// Every message starts with this header (48 bytes; all ranks share one ABI).
typedef struct ps_hdr {
    int32_t kind;
    int32_t param;  // row ops: parameter index
    int64_t clock;  // request: the worker's clock; reply: the clock it continues at
    int64_t count;  // row ops: row ids; save/load: bytes of the directory name that follows
    double lr;
    int32_t status; // reply: WEFT_OK or an error (its message follows)
    int32_t pad;
    int64_t step;   // save/load
} ps_hdr;

// Dense requests carry one flag byte per shard the server holds (in parameter
// order), padded to 8 bytes, then the gradient of every shard flagged GRAD.
enum { PS_F_GRAD = 1, PS_F_WANT = 2 };
static inline size_t ps_pad8(size_t n) { return (n + 7) & ~(size_t)7; }
#endif

// Where parameter i lives: rows [row_off[s], row_off[s] + row_cnt[s]) of its
// first dimension on server s (a whole tensor: all rows on one server).
typedef struct ps_param {
    char *name;
    weft_dtype dt;
    size_t elsize;
    int ndim;
    int64_t sizes[WEFT_MAX_DIMS];
    int64_t rows, row_len; // rows = size(0) (1 for a 0-d tensor), row_len = numel / rows
    bool split;
    int owner;             // the server of a whole tensor; 0 for a split one
    int64_t *row_off, *row_cnt; // per server
    bool sparse;           // worker: left out of dense steps
} ps_param;

typedef struct ps_server ps_server;

struct weft_ps {
    weft_ps_opts o;
    int n;
    ps_param *p;
    weft_tensor **params; // workers: references to the caller's tensors
    weft_device dev;      // where params live (one device; servers: unused); message buffers are its host memory
    int rank, size, workers, servers;
    int server;           // this rank's server index, -1 on workers
    int64_t clock;
    bool finished;
    double timeout;       // seconds a worker waits for a reply
    weft_ps_stats st;
    // Per server: the parameters it holds a shard of, in order.
    int **shards;
    int *nshards;
#ifdef WEFT_HAVE_MPI
    MPI_Comm comm;        // private dup for PS traffic
    MPI_Comm wcomm;       // workers only (MPI_COMM_NULL on servers)
#endif
    ps_server *srv;       // server state (ps_server.c)
    // Worker scratch buffers, one send and one receive per server, reused.
    char **sbuf, **rbuf;
    size_t *scap, *rcap;
};

// Bytes of one row of parameter i / of server s's shard of it.
static inline size_t ps_row_bytes(const ps_param *p) { return (size_t)p->row_len * p->elsize; }
static inline size_t ps_shard_bytes(const ps_param *p, int s) { return (size_t)p->row_cnt[s] * ps_row_bytes(p); }

// ps_server.c
weft_status ps_server_init(weft_ps *ps); // shards, optimiser; values arrive from rank 0 (collective)
void ps_server_free(weft_ps *ps);
void ps_server_stats(const weft_ps *ps, weft_ps_stats *s);

#endif
