// Communicators over MPI and the communication thread that runs their
// collectives.
//
// Design
// - MPI is initialised with MPI_THREAD_MULTIPLE: the caller's threads, the
//   communication thread and other parts of weft (parameter server) all call
//   MPI.
// - Every weft_comm owns three dups of one MPI group: `coll` carries weft's
//   collectives, `ctl` the small control traffic below, `user` the caller's
//   point-to-point messages (weft_comm_mpi). Separate communicators are
//   separate matching spaces, so none of these can steal another's messages.
// - One communication thread per communicator. A collective (blocking or
//   async) is numbered (#1, #2, ... per communicator) and queued on its
//   communicator; that communicator's thread runs the queue in issue order,
//   one collective at a time, so ranks that issue the same sequence run the
//   same sequence (MPI matches collectives by order). Communicators have
//   their own threads because a thread inside a blocking MPI call on one
//   communicator cannot serve another: with one thread for all, two ranks
//   could enter two communicators' collectives in opposite orders and wait
//   on each other forever. Blocking calls, and a wait on work the thread has
//   not picked up yet, run on the caller's thread instead (no handoff); the
//   communicator's busy flag keeps the order.
// - The gate: a collective first waits (polling, so the watchdog can see
//   it) until every rank has announced it (below); only then does it make
//   the blocking MPI call, which can no longer wait on a rank that is not
//   coming. OpenMPI's blocking collectives run its tuned algorithms; its
//   non-blocking ones (libnbc) measured at a third of the bandwidth. Large
//   all-reduces run as a ring over non-blocking point-to-point (ring.c).
// - Arrival: when a rank starts collective #s it sends (s, op) to every
//   other rank on `ctl` (a few eight-byte eager messages, microseconds); a
//   wildcard receive, reposted as each arrives, records every rank's last
//   announced collective.
// - Watchdog: polling the gate (or the ring's requests) is what lets the
//   thread notice a collective unfinished after the communicator's timeout.
//   It then fails with an error naming the op, its number and the ranks
//   whose announcement for #s never came, tells the other ranks it gave up
//   on #s (a late rank then fails at its gate instead of entering the
//   blocking call alone), and marks the communicator broken: every later
//   call on it fails at once with the same error. A ring request already
//   started cannot be cancelled; it stays referenced (with its tensors) and
//   polled, and weft_dist_finalize refuses to finalise MPI while one is
//   unfinished (the caller should weft_dist_abort).
// - Debug mode: before the collective itself, the ranks all-gather
//   (seq, op, dtype, root, counts) on `ctl` and fail with an error listing
//   what every rank issued when they disagree. A mismatch is seen by every
//   rank, so all of them fail the same call and stay in step.
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/core_impl.h"
#include "comm_impl.h"

void weft_dist_chunk(int64_t n, int size, int r, int64_t *offset, int64_t *count) {
    if (size <= 0 || r < 0 || r >= size || n < 0) {
        if (offset) *offset = 0;
        if (count) *count = 0;
        return;
    }
    int64_t base = n / size, rem = n % size;
    if (offset) *offset = r * base + (r < rem ? r : rem);
    if (count) *count = base + (r < rem ? 1 : 0);
}

bool weft_dist_launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

#ifdef WEFT_HAVE_MPI

enum { S_NEW, S_DEBUG, S_GATE, S_RUN };
#define TAG_ARRIVE 1

static struct {
    pthread_mutex_t mu;     // the queues, busy flags and the zombie list
    pthread_cond_t cv_done; // wakes waiters
    weft_work **zombies;    // ring requests stuck past the watchdog
    int nzombies, capzombies;
    atomic_int nzombies_live;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv_done = PTHREAD_COND_INITIALIZER};

static weft_comm *g_world;
static bool g_we_initialized;
static int g_local_rank, g_local_size = 1; // this process among the ranks on its node

bool weft_dist_available(void) { return true; }

double weft_dist_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char *weft_dist_kind_name(int kind) {
    static const char *names[] = {"broadcast",      "all_reduce", "reduce",  "all_gather", "gather", "scatter",
                                  "reduce_scatter", "all_to_all", "barrier", "free"};
    return kind >= 0 && kind < WK_NUM_KINDS ? names[kind] : "?";
}

MPI_Datatype weft_dist_mpi_dtype(weft_dtype dt) {
    switch (dt) {
    case WEFT_F32: return MPI_FLOAT;
    case WEFT_F64: return MPI_DOUBLE;
    case WEFT_I32: return MPI_INT32_T;
    case WEFT_I64: return MPI_INT64_T;
    case WEFT_U8:
    case WEFT_BOOL: return MPI_UINT8_T;
    case WEFT_F16:
    case WEFT_BF16: return MPI_UINT16_T;
    default: return MPI_DATATYPE_NULL;
    }
}

// ---- work items ----
weft_work *weft_dist_work_new(weft_comm *c, const char *fn, int kind) {
    weft_work *w = calloc(1, sizeof *w);
    if (!w) return weft_error_null(WEFT_ERR_OOM, "%s: out of memory", fn);
    w->c = c;
    w->fn = fn;
    w->kind = kind;
    w->root = -1;
    w->n_total = w->n_local = -1;
    atomic_init(&w->refs, 2);
    return w;
}

static void work_free(weft_work *w) {
    weft_ring_free(w);
#ifdef WEFT_HAVE_NCCL
    if (w->nccl_done) weft_nccl_work_free(w);
#endif
    weft_tensor_free(w->a);
    weft_tensor_free(w->b);
    weft_tensor_free(w->back_dst);
    weft_tensor_free(w->back_src);
    free(w->counts);
    free(w->displs);
    free(w->rcounts);
    free(w->rdispls);
    free(w->dbg_all);
    free(w);
}

void weft_dist_work_release(weft_work *w) {
    if (w && atomic_fetch_sub(&w->refs, 1) == 1) work_free(w);
}

weft_work *weft_dist_submit(weft_work *w) {
    weft_comm *c = w->c;
    pthread_mutex_lock(&g.mu);
    if (w->kind != WK_FREE && atomic_load(&c->broken)) {
        // broken_msg is written before `broken` is set and never again.
        pthread_mutex_unlock(&g.mu);
        weft_error(WEFT_ERR_STATE, "%s: %s", w->fn, c->broken_msg);
        atomic_store(&w->refs, 1);
        weft_dist_work_release(w);
        return NULL;
    }
    if (w->kind != WK_FREE) w->seq = ++c->seq;
    if (c->qtail) c->qtail->next = w;
    else c->qhead = w;
    c->qtail = w;
    pthread_cond_signal(&c->cv_work);
    pthread_mutex_unlock(&g.mu);
    return w;
}

static bool step(weft_work *w, bool *progressed);
static void complete(weft_work *w);

// Under g.mu: takes the head of c's queue to run it now; c is busy until it ends.
static weft_work *take_head(weft_comm *c) {
    weft_work *w = c->qhead;
    c->qhead = w->next;
    if (!c->qhead) c->qtail = NULL;
    w->next = NULL;
    c->busy = true;
    return w;
}

// Runs w to its end on the calling thread; the caller has marked its
// communicator busy (so nothing else on it starts meanwhile).
static void drive(weft_work *w, bool on_thread) {
    weft_comm *c = w->c;
    // Poll without yielding for the first milliseconds: giving the core
    // away on a loaded machine costs a whole time slice, longer than a
    // collective of a few MB.
    bool progressed;
    double t0 = weft_dist_now();
    for (int i = 0;; i++) {
        progressed = false;
        if (step(w, &progressed)) break;
        if (!progressed && (i & 255) == 255 && weft_dist_now() - t0 > 2e-3) {
            // Past that, a waiting communication thread sleeps: its spinning
            // would take the core from the computation it overlaps.
            if (on_thread) nanosleep(&(struct timespec){0, 50000}, NULL);
            else sched_yield();
        }
    }
    pthread_mutex_lock(&g.mu);
    c->busy = false;
    if (c->qhead) pthread_cond_signal(&c->cv_work);
    pthread_mutex_unlock(&g.mu);
}

// Blocking calls: when the communicator has nothing queued or running, the
// caller runs the collective itself (same state machine, same ordering: the
// communicator is marked busy, so later work queues behind it). This saves
// the handoff to the communication thread and back, and keeps two threads
// from polling at once on a machine with few cores.
weft_status weft_dist_run(weft_work *w) {
    weft_comm *c = w->c;
    pthread_mutex_lock(&g.mu);
    bool mine = w->kind != WK_FREE && !c->busy && !c->qhead && !atomic_load(&c->broken);
    if (mine) {
        c->busy = true;
        w->seq = ++c->seq;
    }
    pthread_mutex_unlock(&g.mu);
    if (!mine) {
        w = weft_dist_submit(w);
        return w ? weft_work_wait(w) : weft_last_status();
    }
    drive(w, false);
    weft_status s = w->status;
    if (s != WEFT_OK) weft_error(s, "%s", w->msg);
    else s = weft_dist_work_finish(w);
    weft_dist_work_release(w); // the thread's reference (a stuck request holds a third)
    weft_dist_work_release(w);
    return s;
}

int weft_work_test(weft_work *w) {
    if (!w || !atomic_load_explicit(&w->done, memory_order_acquire)) return 0;
    return !w->issued || weft_dist_work_query(w) ? 1 : 0; // issued (NCCL): done when the device is
}

weft_status weft_work_wait(weft_work *w) {
    if (!w) return weft_error(WEFT_ERR_ARG, "work_wait: handle is NULL");
    // Not picked up by the communication thread yet and next on its
    // communicator: run it here rather than hand it over and wait (on a
    // machine with few cores the handoff costs more than the collective).
    weft_comm *c = w->c;
    pthread_mutex_lock(&g.mu);
    bool mine = w->kind != WK_FREE && !atomic_load(&w->done) && c->qhead == w && !c->busy;
    if (mine) take_head(c);
    pthread_mutex_unlock(&g.mu);
    if (mine) {
        drive(w, false);
        complete(w); // drops the thread's reference
    }
    // Spin briefly first: a collective of a few MB finishes within a
    // millisecond, and a condition-variable wakeup costs tens of
    // microseconds on a loaded machine.
    for (int i = 0; i < 2000 && !atomic_load_explicit(&w->done, memory_order_acquire); i++) {
        if (i > 200) sched_yield();
    }
    if (!atomic_load_explicit(&w->done, memory_order_acquire)) {
        pthread_mutex_lock(&g.mu);
        while (!atomic_load(&w->done)) pthread_cond_wait(&g.cv_done, &g.mu);
        pthread_mutex_unlock(&g.mu);
    }
    weft_status s = w->status;
    if (s != WEFT_OK) weft_error(s, "%s", w->msg);
    else s = weft_dist_work_finish(w);
    weft_dist_work_release(w);
    return s;
}

// ---- communicators ----
static void *comm_thread(void *arg);

// Frees what comm_wrap made (its thread already stopped or never started).
static void comm_destroy(weft_comm *c) {
#ifdef WEFT_HAVE_NCCL
    weft_nccl_comm_destroy(c);
#endif
    pthread_cond_destroy(&c->cv_work);
    pthread_mutex_destroy(&c->dev_mu);
    MPI_Comm_free(&c->user);
    MPI_Comm_free(&c->ctl);
    MPI_Comm_free(&c->coll);
    free(c->world_ranks);
    free(c->arr_seq);
    free(c->arr_kind);
    free(c->abandoned);
    free(c->tmp);
    free(c);
}

static weft_comm *comm_wrap(MPI_Comm base, bool is_world, const weft_comm *parent) {
    weft_comm *c = calloc(1, sizeof *c);
    if (!c) return weft_error_null(WEFT_ERR_OOM, "dist: out of memory");
    c->coll = base;
    MPI_Comm_set_errhandler(base, MPI_ERRORS_RETURN);
    MPI_Comm_dup(base, &c->ctl);
    MPI_Comm_dup(base, &c->user);
    MPI_Comm_rank(base, &c->rank);
    MPI_Comm_size(base, &c->size);
    c->is_world = is_world;
    c->world_ranks = malloc(sizeof(int) * (size_t)c->size);
    int *mine = malloc(sizeof(int) * (size_t)c->size);
    c->arr_seq = calloc((size_t)c->size, sizeof *c->arr_seq);
    c->arr_kind = calloc((size_t)c->size, sizeof *c->arr_kind);
    c->abandoned = calloc((size_t)c->size, sizeof *c->abandoned);
    MPI_Group grp, wgrp;
    MPI_Comm_group(base, &grp);
    MPI_Comm_group(MPI_COMM_WORLD, &wgrp);
    for (int i = 0; i < c->size; i++) mine[i] = i;
    MPI_Group_translate_ranks(grp, c->size, mine, wgrp, c->world_ranks);
    free(mine);
    MPI_Group_free(&grp);
    MPI_Group_free(&wgrp);
    for (int i = 0; i < ANN_SLOTS; i++) c->ann[i].req = MPI_REQUEST_NULL;
    c->arr_req = MPI_REQUEST_NULL;
    if (parent) {
        atomic_init(&c->timeout, atomic_load(&parent->timeout));
        atomic_init(&c->debug, atomic_load(&parent->debug));
    } else {
        const char *t = getenv("WEFT_DIST_TIMEOUT");
        atomic_init(&c->timeout, t && *t ? atof(t) : 600.0);
        const char *d = getenv("WEFT_DIST_DEBUG");
        atomic_init(&c->debug, d && *d && strcmp(d, "0") != 0);
    }
    pthread_cond_init(&c->cv_work, NULL);
    pthread_mutex_init(&c->dev_mu, NULL);
    c->dev_path = DEV_UNDECIDED;
    if (pthread_create(&c->thread, NULL, comm_thread, c) != 0) {
        weft_error(WEFT_ERR_STATE, "dist: cannot start a communication thread");
        comm_destroy(c);
        return NULL;
    }
    c->has_thread = true;
    return c;
}

// Runs the communicator's WK_FREE through its queue (so the thread is done
// with it), then frees its MPI communicators.
static weft_status comm_release(weft_comm *c) {
    weft_work *w = weft_dist_work_new(c, "comm_free", WK_FREE);
    if (w) {
        w = weft_dist_submit(w);
        if (w) weft_work_wait(w);
    }
    pthread_mutex_lock(&g.mu);
    c->stop = true;
    pthread_cond_signal(&c->cv_work);
    pthread_mutex_unlock(&g.mu);
    pthread_join(c->thread, NULL);
    comm_destroy(c);
    return WEFT_OK;
}


weft_status weft_dist_init(int *argc, char ***argv) {
    if (g_world) return WEFT_OK;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
            return weft_error(WEFT_ERR_STATE, "dist_init: MPI_Init_thread failed");
        g_we_initialized = true;
        if (provided < MPI_THREAD_MULTIPLE)
            return weft_error(WEFT_ERR_UNSUPPORTED,
                              "dist_init: MPI provides thread level %d, weft needs MPI_THREAD_MULTIPLE", provided);
    } else {
        int provided = 0;
        MPI_Query_thread(&provided);
        if (provided < MPI_THREAD_MULTIPLE)
            return weft_error(WEFT_ERR_UNSUPPORTED,
                              "dist_init: MPI was initialised with thread level %d, weft needs MPI_THREAD_MULTIPLE",
                              provided);
    }
    // The ranks sharing this node (and its GPUs): a rank's device is its
    // local rank modulo the device count (weft train --device cuda).
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &g_local_rank);
        MPI_Comm_size(node, &g_local_size);
        MPI_Comm_free(&node);
    }
    MPI_Comm w;
    MPI_Comm_dup(MPI_COMM_WORLD, &w);
    g_world = comm_wrap(w, true, NULL);
    return g_world ? WEFT_OK : weft_last_status();
}

bool weft_dist_is_initialized(void) { return g_world != NULL; }
int weft_dist_local_rank(void) { return g_world ? g_local_rank : 0; }
int weft_dist_local_size(void) { return g_world ? g_local_size : 1; }

weft_status weft_dist_finalize(void) {
    if (!g_world) return WEFT_OK;
    // A request stuck past the watchdog may still finish (the late rank
    // catches up); give it a moment, then refuse: MPI_Finalize would hang.
    double t0 = weft_dist_now();
    while (atomic_load(&g.nzombies_live) > 0 && weft_dist_now() - t0 < 1.0) sched_yield();
    if (atomic_load(&g.nzombies_live) > 0)
        return weft_error(WEFT_ERR_STATE, "dist_finalize: a collective stuck since the watchdog fired is still "
                                          "unfinished; MPI cannot be finalised (end the job with weft_dist_abort)");
    comm_release(g_world);
    g_world = NULL;
    free(g.zombies);
    g.zombies = NULL;
    g.nzombies = g.capzombies = 0;
    if (g_we_initialized) MPI_Finalize();
    return WEFT_OK;
}

void weft_dist_abort(int code) {
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    fflush(stdout);
    fflush(stderr);
    if (inited && !fin) MPI_Abort(MPI_COMM_WORLD, code);
}

weft_comm *weft_comm_world(void) {
    if (!g_world) return weft_error_null(WEFT_ERR_STATE, "comm_world: call weft_dist_init first");
    return g_world;
}

weft_comm *weft_comm_split(weft_comm *c, int color, int key) {
    if (!c) return weft_error_null(WEFT_ERR_ARG, "comm_split: communicator is NULL");
    // Exchange (color, key) as a numbered collective first: the watchdog and
    // the debug check cover it, and once it is done every rank is at the split.
    // Host tensors whatever the default device: the exchange is MPI's.
    weft_tensor *mine = weft_tensor_empty_on(WEFT_DIMS(2), WEFT_I32, WEFT_DEVICE_CPU);
    weft_tensor *all = weft_tensor_empty_on(WEFT_DIMS(2 * (int64_t)c->size), WEFT_I32, WEFT_DEVICE_CPU);
    if (mine) memcpy(weft_tensor_data(mine), (int32_t[]){color, key}, 2 * sizeof(int32_t));
    weft_status s = mine && all ? weft_dist_all_gather(c, mine, all) : weft_last_status();
    weft_tensor_free(mine);
    weft_tensor_free(all);
    if (s != WEFT_OK) return weft_error_null(s, "comm_split: %s", weft_last_error());
    MPI_Comm nc;
    if (MPI_Comm_split(c->coll, color < 0 ? MPI_UNDEFINED : color, key, &nc) != MPI_SUCCESS)
        return weft_error_null(WEFT_ERR_STATE, "comm_split: MPI_Comm_split failed");
    if (nc == MPI_COMM_NULL) return NULL;
    return comm_wrap(nc, false, c);
}

void weft_comm_free(weft_comm *c) {
    if (!c || c->is_world) return;
    comm_release(c);
}

int weft_comm_rank(const weft_comm *c) { return c ? c->rank : -1; }
int weft_comm_size(const weft_comm *c) { return c ? c->size : 0; }
int weft_comm_world_rank(const weft_comm *c, int r) { return (c && r >= 0 && r < c->size) ? c->world_ranks[r] : -1; }
uint64_t weft_comm_seq(const weft_comm *c) {
    if (!c) return 0;
    pthread_mutex_lock(&g.mu);
    uint64_t s = c->seq;
    pthread_mutex_unlock(&g.mu);
    return s;
}
void weft_comm_set_timeout(weft_comm *c, double seconds) {
    if (c) atomic_store(&c->timeout, seconds);
}
void weft_comm_set_debug(weft_comm *c, bool on) {
    if (c) atomic_store(&c->debug, on);
}

MPI_Comm weft_comm_mpi(const weft_comm *c) {
    if (!c) {
        weft_error(WEFT_ERR_ARG, "comm_mpi: communicator is NULL");
        return MPI_COMM_NULL;
    }
    return c->user;
}

// ---- the communication thread ----

static void arrivals_drain(weft_comm *c) {
    for (;;) {
        if (!c->arr_posted) {
            if (MPI_Irecv(c->arr_buf, 2, MPI_INT64_T, MPI_ANY_SOURCE, TAG_ARRIVE, c->ctl, &c->arr_req) != MPI_SUCCESS)
                return;
            c->arr_posted = true;
        }
        int flag = 0;
        MPI_Status st;
        MPI_Test(&c->arr_req, &flag, &st);
        if (!flag) return;
        c->arr_posted = false;
        int src = st.MPI_SOURCE;
        if (src >= 0 && src < c->size) {
            if (c->arr_buf[1] == WK_ABANDON) {
                c->abandoned[src] = (uint64_t)c->arr_buf[0];
                continue;
            }
            c->arr_seq[src] = (uint64_t)c->arr_buf[0];
            c->arr_kind[src] = (int)c->arr_buf[1];
        }
    }
}

static void announce_kind(weft_comm *c, uint64_t seq, int kind) {
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank) continue;
        int i = c->ann_next;
        c->ann_next = (c->ann_next + 1) % ANN_SLOTS;
        // Eager eight-byte sends finish at once; waiting on a slot's previous
        // send is only a safeguard before its buffer is reused.
        if (c->ann[i].req != MPI_REQUEST_NULL) MPI_Wait(&c->ann[i].req, MPI_STATUS_IGNORE);
        c->ann[i].buf[0] = (int64_t)seq;
        c->ann[i].buf[1] = kind;
        MPI_Isend(c->ann[i].buf, 2, MPI_INT64_T, r, TAG_ARRIVE, c->ctl, &c->ann[i].req);
    }
}

static void announce(weft_comm *c, weft_work *w) {
    announce_kind(c, w->seq, w->kind);
    c->arr_seq[c->rank] = w->seq;
    c->arr_kind[c->rank] = w->kind;
}

static void fail(weft_work *w, weft_status s, const char *fmt, ...) WEFT_PRINTF(3, 4);
static void fail(weft_work *w, weft_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(w->msg, sizeof w->msg, "%s: ", w->fn);
    vsnprintf(w->msg + n, sizeof w->msg - (size_t)n, fmt, ap);
    va_end(ap);
    w->status = s;
}

static void mark_broken(weft_comm *c, const char *msg) {
    if (atomic_load(&c->broken)) return;
    snprintf(c->broken_msg, sizeof c->broken_msg, "communicator broken: %s", msg);
    atomic_store(&c->broken, true);
}

static const char *mpi_err(int rc, char *buf) {
    int len = 0;
    if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) snprintf(buf, 64, "MPI error %d", rc);
    return buf;
}

static void describe(const int64_t *d, char *buf, size_t n) {
    // d: seq, kind, dtype, root, n_total, n_local, rop
    int k = snprintf(buf, n, "#%lld %s(%s", (long long)d[0], weft_dist_kind_name((int)d[1]),
                     d[1] == WK_BARRIER ? "" : weft_dtype_name((weft_dtype)d[2]));
    if (d[1] != WK_BARRIER) k += snprintf(buf + k, n - (size_t)k, ", %lld elements", (long long)d[4]);
    if (d[5] != d[4] && d[5] >= 0) k += snprintf(buf + k, n - (size_t)k, ", %lld here", (long long)d[5]);
    if (d[3] >= 0) k += snprintf(buf + k, n - (size_t)k, ", root %lld", (long long)d[3]);
    if (d[1] == WK_ALL_REDUCE || d[1] == WK_REDUCE || d[1] == WK_REDUCE_SCATTER)
        k += snprintf(buf + k, n - (size_t)k, ", %s", d[6] == WEFT_REDUCE_SUM ? "sum" : d[6] == WEFT_REDUCE_AVG ? "avg" : "max");
    snprintf(buf + k, n - (size_t)k, ")");
}

// Every rank's (seq, op, dtype, root, counts) against rank 0's; n_total is
// -1 where a rank cannot know it (gather off the root).
static bool debug_agree(weft_work *w) {
    int n = w->c->size;
    const int64_t *ref = NULL;
    for (int r = 0; r < n; r++)
        if (w->dbg_all[8 * r + 4] >= 0) {
            ref = w->dbg_all + 8 * r;
            break;
        }
    if (!ref) ref = w->dbg_all;
    for (int r = 0; r < n; r++) {
        const int64_t *d = w->dbg_all + 8 * r;
        if (d[0] != ref[0] || d[1] != ref[1] || d[2] != ref[2] || d[3] != ref[3] || d[6] != ref[6]) return false;
        if (d[4] >= 0 && d[4] != ref[4]) return false;
        // Each rank's own part must be its chunk of the whole.
        bool chunked = d[1] == WK_ALL_GATHER || d[1] == WK_GATHER || d[1] == WK_SCATTER || d[1] == WK_REDUCE_SCATTER;
        int64_t k;
        weft_dist_chunk(ref[4], n, r, NULL, &k);
        if (chunked && ref[4] >= 0 && d[5] != k) return false;
    }
    return true;
}

static void debug_report(weft_work *w) {
    char all[700] = "", one[160];
    size_t k = 0;
    for (int r = 0; r < w->c->size && k < sizeof all - 1; r++) {
        describe(w->dbg_all + 8 * r, one, sizeof one);
        k += (size_t)snprintf(all + k, sizeof all - k, "%srank %d issued %s", r ? "; " : "", r, one);
    }
    char msg[900];
    snprintf(msg, sizeof msg, "debug check: ranks disagree on collective #%llu of a communicator of %d ranks: %s",
             (unsigned long long)w->seq, w->c->size, all);
    fail(w, WEFT_ERR_STATE, "%s", msg);
    mark_broken(w->c, msg);
}

// Once every rank has announced the collective (the gate), the blocking MPI
// call cannot wait on a rank that is not coming, and it is much faster than
// the non-blocking one: OpenMPI's blocking collectives use its tuned
// algorithms, its MPI_I* ones (libnbc) move data at a third of the speed.
static int run_blocking(weft_work *w) {
    weft_comm *c = w->c;
    MPI_Datatype dt = weft_dist_mpi_dtype(w->dt);
    MPI_Op op = w->rop == WEFT_REDUCE_MAX ? MPI_MAX : MPI_SUM;
    switch (w->kind) {
    case WK_BROADCAST: return MPI_Bcast(w->rbuf, w->rcount, dt, w->root, c->coll);
    case WK_ALL_REDUCE: return MPI_Allreduce(MPI_IN_PLACE, w->rbuf, w->rcount, dt, op, c->coll);
    case WK_REDUCE:
        return MPI_Reduce(c->rank == w->root ? MPI_IN_PLACE : w->rbuf, c->rank == w->root ? w->rbuf : NULL,
                          w->rcount, dt, op, w->root, c->coll);
    case WK_ALL_GATHER:
        return MPI_Allgatherv(w->sbuf, w->scount, dt, w->rbuf, w->rcounts, w->rdispls, dt, c->coll);
    case WK_GATHER:
        return MPI_Gatherv(w->sbuf, w->scount, dt, w->rbuf, w->rcounts, w->rdispls, dt, w->root, c->coll);
    case WK_SCATTER:
        return MPI_Scatterv(w->sbuf, w->counts, w->displs, dt, w->rbuf, w->rcount, dt, w->root, c->coll);
    case WK_REDUCE_SCATTER: return MPI_Reduce_scatter(w->sbuf, w->rbuf, w->rcounts, dt, op, c->coll);
    case WK_ALL_TO_ALL:
        return MPI_Alltoallv(w->sbuf, w->counts, w->displs, dt, w->rbuf, w->rcounts, w->rdispls, dt, c->coll);
    case WK_BARRIER: return MPI_SUCCESS; // the gate itself was the barrier
    }
    return MPI_ERR_OTHER;
}

// AVG is a sum divided by the size; integers divide truncating toward zero.
static void finish_avg(weft_work *w) {
    if (w->rop != WEFT_REDUCE_AVG) return;
    if (w->kind == WK_REDUCE && w->c->rank != w->root) return;
    int64_t n = w->kind == WK_REDUCE_SCATTER ? w->rcounts[w->c->rank] : w->rcount;
    int p = w->c->size;
    void *d = w->rbuf;
    bool pow2 = (p & (p - 1)) == 0; // then the product by 1/p is the exact quotient, and faster
    switch (w->dt) {
    case WEFT_F32:
        if (pow2)
            for (int64_t i = 0; i < n; i++) ((float *)d)[i] *= 1.0f / (float)p;
        else
            for (int64_t i = 0; i < n; i++) ((float *)d)[i] /= (float)p;
        break;
    case WEFT_F64:
        if (pow2)
            for (int64_t i = 0; i < n; i++) ((double *)d)[i] *= 1.0 / p;
        else
            for (int64_t i = 0; i < n; i++) ((double *)d)[i] /= p;
        break;
    case WEFT_I32:
        for (int64_t i = 0; i < n; i++) ((int32_t *)d)[i] /= p;
        break;
    case WEFT_I64:
        for (int64_t i = 0; i < n; i++) ((int64_t *)d)[i] /= p;
        break;
    case WEFT_U8:
        for (int64_t i = 0; i < n; i++) ((uint8_t *)d)[i] /= (uint8_t)p;
        break;
    default: break;
    }
}

static void watchdog(weft_work *w, double waited) {
    weft_comm *c = w->c;
    arrivals_drain(c);
    char missing[600] = "";
    size_t k = 0;
    int nmiss = 0;
    for (int r = 0; r < c->size && k < sizeof missing - 80; r++) {
        if (r == c->rank || c->arr_seq[r] >= w->seq) continue;
        k += (size_t)snprintf(missing + k, sizeof missing - k, "%s%d", nmiss ? ", " : "", r);
        if (!c->is_world) k += (size_t)snprintf(missing + k, sizeof missing - k, " (world rank %d)", c->world_ranks[r]);
        if (c->arr_seq[r] > 0)
            k += (size_t)snprintf(missing + k, sizeof missing - k, " [last at #%llu %s]",
                                  (unsigned long long)c->arr_seq[r], weft_dist_kind_name(c->arr_kind[r]));
        else k += (size_t)snprintf(missing + k, sizeof missing - k, " [no collective yet]");
        nmiss++;
    }
    char msg[900];
    if (nmiss)
        snprintf(msg, sizeof msg,
                 "watchdog: collective #%llu (%s) on a communicator of %d ranks not finished after %.1f s; "
                 "ranks that have not arrived: %s",
                 (unsigned long long)w->seq, weft_dist_kind_name(w->kind), c->size, waited, missing);
    else
        snprintf(msg, sizeof msg,
                 "watchdog: collective #%llu (%s) on a communicator of %d ranks not finished after %.1f s; "
                 "every rank has arrived (the transfer itself is stuck)",
                 (unsigned long long)w->seq, weft_dist_kind_name(w->kind), c->size, waited);
    fail(w, WEFT_ERR_STATE, "%s", msg);
    mark_broken(c, msg);
    // A rank that comes later must not enter the blocking call alone: it
    // sees this notice at its gate and fails instead.
    if (w->state == S_GATE) announce_kind(c, w->seq, WK_ABANDON);
}

// The gate: every rank has announced #seq (it is in this collective), or one
// gave up on it, or none of these yet.
static int gate(weft_work *w) {
    weft_comm *c = w->c;
    arrivals_drain(c);
    for (int r = 0; r < c->size; r++)
        if (c->abandoned[r] >= w->seq) {
            char msg[600];
            snprintf(msg, sizeof msg,
                     "collective #%llu (%s): rank %d gave up on it after its watchdog fired (this rank came too late)",
                     (unsigned long long)w->seq, weft_dist_kind_name(w->kind), r);
            fail(w, WEFT_ERR_STATE, "%s", msg);
            mark_broken(c, msg);
            return -1;
        }
    for (int r = 0; r < c->size; r++)
        if (c->arr_seq[r] < w->seq) return 0;
    return 1;
}

// Runs the collective's blocking MPI call once every rank is in it.
static bool finish_blocking(weft_work *w) {
    char eb[MPI_MAX_ERROR_STRING];
    int rc = run_blocking(w);
    if (rc != MPI_SUCCESS) fail(w, WEFT_ERR_STATE, "%s", mpi_err(rc, eb));
    else {
        finish_avg(w);
        w->status = WEFT_OK;
    }
    return true;
}

static void free_control(weft_comm *c) {
    if (!atomic_load(&c->broken)) {
        // Take in the announcements still on their way (every peer announces
        // what this rank finished, soon) so none is left unreceived.
        double t0 = weft_dist_now();
        for (;;) {
            arrivals_drain(c);
            bool all = true;
            for (int r = 0; r < c->size; r++) all = all && c->arr_seq[r] >= c->seq;
            if (all || weft_dist_now() - t0 > 0.2) break;
            sched_yield();
        }
    }
    if (c->arr_posted) {
        MPI_Cancel(&c->arr_req);
        MPI_Wait(&c->arr_req, MPI_STATUS_IGNORE);
        c->arr_posted = false;
    }
    for (int i = 0; i < ANN_SLOTS; i++)
        if (c->ann[i].req != MPI_REQUEST_NULL) {
            int flag = 0;
            MPI_Test(&c->ann[i].req, &flag, MPI_STATUS_IGNORE);
            if (!flag) MPI_Request_free(&c->ann[i].req);
        }
}

// Advances w; returns true when it is finished (status and msg set).
static bool step(weft_work *w, bool *progressed) {
    weft_comm *c = w->c;
    char eb[MPI_MAX_ERROR_STRING];
    int rc, flag = 0;
    if (w->kind == WK_FREE) {
        free_control(c);
        return true;
    }
    if (w->state == S_NEW) {
        *progressed = true;
        if (atomic_load(&c->broken)) {
            fail(w, WEFT_ERR_STATE, "%s", c->broken_msg);
            return true;
        }
        arrivals_drain(c);
        announce(c, w);
        w->t_start = weft_dist_now();
        if (atomic_load(&c->debug)) {
            int64_t *d = w->dbg_mine;
            d[0] = (int64_t)w->seq, d[1] = w->kind, d[2] = w->kind == WK_BARRIER ? 0 : w->dt, d[3] = w->root;
            d[4] = w->n_total, d[5] = w->n_local, d[6] = (w->kind == WK_ALL_REDUCE || w->kind == WK_REDUCE ||
                                                          w->kind == WK_REDUCE_SCATTER) ? (int64_t)w->rop : -1;
            d[7] = 0;
            w->dbg_all = malloc(sizeof(int64_t) * 8 * (size_t)c->size);
            rc = MPI_Iallgather(d, 8, MPI_INT64_T, w->dbg_all, 8, MPI_INT64_T, c->ctl, &w->req);
            if (rc != MPI_SUCCESS) {
                fail(w, WEFT_ERR_STATE, "debug exchange: %s", mpi_err(rc, eb));
                return true;
            }
            w->state = S_DEBUG;
        } else if (weft_ring_wanted(w)) {
            rc = weft_ring_start(w); // the only collective that stays non-blocking
            if (rc != MPI_SUCCESS) {
                fail(w, WEFT_ERR_STATE, "%s", mpi_err(rc, eb));
                return true;
            }
            w->state = S_RUN;
        } else {
            w->state = S_GATE;
        }
    }
    if (w->state == S_GATE) {
        int g = gate(w);
        if (g < 0) return true;
        if (g > 0) {
            *progressed = true;
            return finish_blocking(w);
        }
        double to = atomic_load(&c->timeout), waited = weft_dist_now() - w->t_start;
        if (to > 0 && waited > to) {
            watchdog(w, waited); // nothing was started: no request to keep
            return true;
        }
        return false;
    }
    rc = w->ring ? weft_ring_test(w, &flag) : MPI_Test(&w->req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
        fail(w, WEFT_ERR_STATE, "%s", mpi_err(rc, eb));
        return true;
    }
    if (flag) {
        *progressed = true;
        if (w->state == S_DEBUG) {
            if (!debug_agree(w)) {
                debug_report(w);
                return true;
            }
            // The exchange finished, so every rank is in this collective.
            if (!weft_ring_wanted(w)) return finish_blocking(w);
            rc = weft_ring_start(w); // the only collective that stays non-blocking
            if (rc != MPI_SUCCESS) {
                fail(w, WEFT_ERR_STATE, "%s", mpi_err(rc, eb));
                return true;
            }
            w->state = S_RUN;
            return false;
        }
        finish_avg(w);
        w->status = WEFT_OK;
        return true;
    }
    double to = atomic_load(&c->timeout), waited = weft_dist_now() - w->t_start;
    if (to > 0 && waited > to) {
        watchdog(w, waited);
        // The request lives on: its buffers stay referenced until it ends.
        pthread_mutex_lock(&g.mu);
        if (g.nzombies == g.capzombies) {
            g.capzombies = g.capzombies ? 2 * g.capzombies : 4;
            g.zombies = realloc(g.zombies, sizeof *g.zombies * (size_t)g.capzombies);
        }
        atomic_fetch_add(&w->refs, 1);
        g.zombies[g.nzombies++] = w;
        atomic_fetch_add(&g.nzombies_live, 1);
        pthread_mutex_unlock(&g.mu);
        return true;
    }
    return false;
}

static void complete(weft_work *w) {
    pthread_mutex_lock(&g.mu);
    atomic_store_explicit(&w->done, 1, memory_order_release);
    pthread_cond_broadcast(&g.cv_done);
    pthread_mutex_unlock(&g.mu);
    weft_dist_work_release(w);
}

static void poll_zombies(void) {
    pthread_mutex_lock(&g.mu);
    for (int i = 0; i < g.nzombies;) {
        weft_work *z = g.zombies[i];
        int flag = 0;
        if (z->ring) weft_ring_test(z, &flag);
        else MPI_Test(&z->req, &flag, MPI_STATUS_IGNORE);
        if (flag) {
            g.zombies[i] = g.zombies[--g.nzombies];
            atomic_fetch_sub(&g.nzombies_live, 1);
            weft_dist_work_release(z);
        } else i++;
    }
    pthread_mutex_unlock(&g.mu);
}

// One per communicator: runs its queue in order. Idle, it sleeps on the
// communicator's condition variable (waking every millisecond while a stuck
// ring request is left to poll).
static void *comm_thread(void *arg) {
    weft_comm *c = arg;
    for (;;) {
        pthread_mutex_lock(&g.mu);
        while (!c->stop && (c->busy || !c->qhead)) {
            if (atomic_load(&g.nzombies_live) > 0) {
                pthread_mutex_unlock(&g.mu);
                poll_zombies();
                struct timespec ts = {0, 1000000};
                nanosleep(&ts, NULL);
                pthread_mutex_lock(&g.mu);
                continue;
            }
            pthread_cond_wait(&c->cv_work, &g.mu);
        }
        if (c->stop && (c->busy || !c->qhead)) {
            pthread_mutex_unlock(&g.mu);
            break;
        }
        weft_work *w = take_head(c);
        pthread_mutex_unlock(&g.mu);
        drive(w, true);
        complete(w);
    }
    return NULL;
}

#else // !WEFT_HAVE_MPI

#define NOMPI(fn) weft_error(WEFT_ERR_UNSUPPORTED, "%s: weft built without MPI", fn)
bool weft_dist_available(void) { return false; }
weft_status weft_dist_init(int *argc, char ***argv) { return NOMPI("dist_init"); }
bool weft_dist_is_initialized(void) { return false; }
int weft_dist_local_rank(void) { return 0; }
int weft_dist_local_size(void) { return 1; }
weft_status weft_dist_finalize(void) { return WEFT_OK; }
void weft_dist_abort(int code) {}
weft_comm *weft_comm_world(void) { return weft_error_null(WEFT_ERR_UNSUPPORTED, "comm_world: weft built without MPI"); }
weft_comm *weft_comm_split(weft_comm *c, int color, int key) {
    return weft_error_null(WEFT_ERR_UNSUPPORTED, "comm_split: weft built without MPI");
}
void weft_comm_free(weft_comm *c) {}
int weft_comm_rank(const weft_comm *c) { return -1; }
int weft_comm_size(const weft_comm *c) { return 0; }
int weft_comm_world_rank(const weft_comm *c, int r) { return -1; }
uint64_t weft_comm_seq(const weft_comm *c) { return 0; }
void weft_comm_set_timeout(weft_comm *c, double seconds) {}
void weft_comm_set_debug(weft_comm *c, bool on) {}
int weft_work_test(weft_work *w) { return 0; }
weft_status weft_work_wait(weft_work *w) { return NOMPI("work_wait"); }
#endif
