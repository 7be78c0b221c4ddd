// Queues: a bounded FIFO of tensor tuples with blocking enqueue and dequeue
// (TensorFlow's FIFOQueue). See include/weft/queue.h for the semantics.
//
// One mutex guards everything; two condition variables on CLOCK_MONOTONIC (so a
// wall-clock jump neither fires nor stretches a timeout) wake enqueuers when room
// appears and dequeuers when elements do. Both are broadcast, never signalled:
// waiters want different amounts (dequeue_many(n) needs n elements, a plain
// dequeue one), so waking only one could wake the wrong one and lose the wakeup.
//
// Storage is a ring of capacity slots of n_components tensor pointers each; the
// queue owns one reference per stored tensor.
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft/autograd.h>
#include <weft/ops.h>
#include <weft/queue.h>

#include "core/core_impl.h"

struct weft_queue {
    char *name;
    int capacity, ncomp;
    weft_dtype *dtypes;
    int *ndims;       // ncomp entries; -1: any shape
    int64_t *sizes;   // ncomp * WEFT_MAX_DIMS; -1: any size in that dimension
    weft_tensor **slots; // capacity * ncomp
    int head, count;
    // Elements that enqueue calls already admitted (before a close) still mean to
    // add. Dequeues count them as "coming": the queue is at its end only when it
    // is closed, empty, and pending == 0 — after that it can never refill.
    int64_t pending;
    bool closed, cancelled;
    int refs; // references (weft_queue_ref / weft_queue_free): graph nodes hold one each
    weft_queue_stats st;
    pthread_mutex_t mu;
    pthread_cond_t not_full, not_empty;
};

// ---- helpers ----

static const char *qname(const weft_queue *q) { return q->name; }

static void spec_str(const weft_queue *q, int c, char *buf, size_t n) {
    if (q->ndims[c] < 0) {
        snprintf(buf, n, "(any)");
        return;
    }
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "(");
    for (int d = 0; d < q->ndims[c] && k < n; d++) {
        int64_t s = q->sizes[c * WEFT_MAX_DIMS + d];
        if (s < 0) k += (size_t)snprintf(buf + k, n - k, "%s?", d ? "," : "");
        else k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? "," : "", (long long)s);
    }
    if (k < n) snprintf(buf + k, n - k, ")");
}

// Does a shape (ndim, sizes) fit component c's spec?
static bool shape_fits(const weft_queue *q, int c, int ndim, const int64_t *sizes) {
    if (q->ndims[c] < 0) return true;
    if (ndim != q->ndims[c]) return false;
    for (int d = 0; d < ndim; d++) {
        int64_t want = q->sizes[c * WEFT_MAX_DIMS + d];
        if (want >= 0 && sizes[d] != want) return false;
    }
    return true;
}

// Checks component c of an element (batched: t has an extra leading dim).
static weft_status check_component(const weft_queue *q, const char *fn, int c, const weft_tensor *t, bool batched) {
    if (!t) return weft_error(WEFT_ERR_ARG, "%s: queue '%s': component %d is NULL", fn, qname(q), c);
    if (weft_tensor_dtype(t) != q->dtypes[c])
        return weft_error(WEFT_ERR_DTYPE, "%s: queue '%s': component %d has dtype %s, expected %s", fn, qname(q), c,
                          weft_dtype_name(weft_tensor_dtype(t)), weft_dtype_name(q->dtypes[c]));
    int nd = weft_tensor_ndim(t);
    const int64_t *sz = weft_tensor_sizes(t);
    if (batched && nd < 1)
        return weft_error(WEFT_ERR_SHAPE, "%s: queue '%s': component %d is 0-d, a batch needs a leading dim", fn,
                          qname(q), c);
    if (!shape_fits(q, c, batched ? nd - 1 : nd, batched ? sz + 1 : sz)) {
        char got[128], want[128];
        weft_tensor_shape_str(t, got, sizeof got);
        spec_str(q, c, want, sizeof want);
        return weft_error(WEFT_ERR_SHAPE, "%s: queue '%s': component %d has shape %s, expected %s%s", fn, qname(q),
                          c, got, batched ? "(batch)+" : "", want);
    }
    return WEFT_OK;
}

// Timeouts beyond ~3 years are "forever" (and keep the deadline's time_t in range).
static double norm_timeout(double timeout_s) { return timeout_s > 1e8 ? -1 : timeout_s; }

// Absolute CLOCK_MONOTONIC deadline timeout_s from now (only for timeout_s > 0).
static struct timespec deadline_after(double timeout_s) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double whole = (double)(time_t)timeout_s;
    ts.tv_sec += (time_t)timeout_s;
    ts.tv_nsec += (long)((timeout_s - whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

// One wait on cv; false when the deadline has passed (or timeout_s == 0: never wait).
// The deadline is fixed once per call, so spurious wake-ups do not stretch it.
static bool wait_until(weft_queue *q, pthread_cond_t *cv, double timeout_s, const struct timespec *dl) {
    if (timeout_s == 0) return false;
    if (timeout_s < 0) {
        pthread_cond_wait(cv, &q->mu);
        return true;
    }
    return pthread_cond_timedwait(cv, &q->mu, dl) != ETIMEDOUT;
}

static void push_locked(weft_queue *q, weft_tensor *const *elem) {
    int slot = (q->head + q->count) % q->capacity;
    memcpy(q->slots + (size_t)slot * q->ncomp, elem, sizeof(weft_tensor *) * q->ncomp);
    q->count++;
    q->st.enqueued++;
    if (q->count > q->st.max_size) q->st.max_size = q->count;
    // Per element, not once per call: an enqueue_many that blocks on a full
    // queue half-way must have woken the consumers that will make room.
    pthread_cond_broadcast(&q->not_empty);
}

// Moves the oldest element's references into out (ncomp pointers).
static void pop_locked(weft_queue *q, weft_tensor **out) {
    weft_tensor **s = q->slots + (size_t)q->head * q->ncomp;
    memcpy(out, s, sizeof(weft_tensor *) * q->ncomp);
    memset(s, 0, sizeof(weft_tensor *) * q->ncomp);
    q->head = (q->head + 1) % q->capacity;
    q->count--;
    q->st.dequeued++;
}

static weft_tensor *slot_at(const weft_queue *q, int i, int c) { // i-th oldest element
    return q->slots[(size_t)((q->head + i) % q->capacity) * q->ncomp + c];
}

// ---- lifetime ----

weft_queue *weft_queue_create(int capacity, int n_components, const weft_dtype *dtypes, const int *ndims,
                              const int64_t *const *sizes, const char *name) {
    const char *nm = name ? name : "queue";
    if (capacity < 1)
        return weft_error_null(WEFT_ERR_ARG, "weft_queue_create: queue '%s': capacity must be >= 1 (got %d)", nm,
                               capacity);
    if (n_components < 1 || !dtypes)
        return weft_error_null(WEFT_ERR_ARG, "weft_queue_create: queue '%s': needs n_components >= 1 and dtypes "
                               "(got %d, %s)", nm, n_components, dtypes ? "dtypes" : "NULL dtypes");
    for (int c = 0; c < n_components; c++) {
        if ((int)dtypes[c] < 0 || dtypes[c] >= WEFT_NUM_DTYPES)
            return weft_error_null(WEFT_ERR_DTYPE, "weft_queue_create: queue '%s': component %d has a bad dtype (%d)",
                                   nm, c, (int)dtypes[c]);
        if (!ndims) continue;
        if (ndims[c] < -1 || ndims[c] > WEFT_MAX_DIMS)
            return weft_error_null(WEFT_ERR_SHAPE, "weft_queue_create: queue '%s': component %d has ndim %d "
                                   "(want -1..%d)", nm, c, ndims[c], WEFT_MAX_DIMS);
        if (ndims[c] > 0 && (!sizes || !sizes[c]))
            return weft_error_null(WEFT_ERR_ARG, "weft_queue_create: queue '%s': component %d has ndim %d but no "
                                   "sizes", nm, c, ndims[c]);
        for (int d = 0; d < ndims[c] && ndims[c] > 0; d++)
            if (sizes[c][d] < -1)
                return weft_error_null(WEFT_ERR_SHAPE, "weft_queue_create: queue '%s': component %d dim %d has size "
                                       "%lld", nm, c, d, (long long)sizes[c][d]);
    }
    weft_queue *q = calloc(1, sizeof *q);
    if (!q) return weft_error_null(WEFT_ERR_OOM, "weft_queue_create: queue '%s': out of memory", nm);
    q->capacity = capacity;
    q->refs = 1;
    q->ncomp = n_components;
    q->name = strdup(nm);
    q->dtypes = malloc(sizeof(weft_dtype) * n_components);
    q->ndims = malloc(sizeof(int) * n_components);
    q->sizes = calloc((size_t)n_components * WEFT_MAX_DIMS, sizeof(int64_t));
    q->slots = calloc((size_t)capacity * n_components, sizeof(weft_tensor *));
    if (!q->name || !q->dtypes || !q->ndims || !q->sizes || !q->slots) {
        free(q->name), free(q->dtypes), free(q->ndims), free(q->sizes), free(q->slots), free(q);
        return weft_error_null(WEFT_ERR_OOM, "weft_queue_create: queue '%s': out of memory", nm);
    }
    for (int c = 0; c < n_components; c++) {
        q->dtypes[c] = dtypes[c];
        q->ndims[c] = ndims ? ndims[c] : -1;
        for (int d = 0; d < q->ndims[c]; d++) q->sizes[c * WEFT_MAX_DIMS + d] = sizes[c][d];
    }
    pthread_mutex_init(&q->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->not_full, &ca);
    pthread_cond_init(&q->not_empty, &ca);
    pthread_condattr_destroy(&ca);
    return q;
}

weft_queue *weft_queue_ref(weft_queue *q) {
    if (q) __atomic_add_fetch(&q->refs, 1, __ATOMIC_RELAXED);
    return q;
}

void weft_queue_free(weft_queue *q) {
    if (!q || __atomic_sub_fetch(&q->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    while (q->count > 0) {
        weft_tensor *tmp[q->ncomp];
        pop_locked(q, tmp);
        for (int c = 0; c < q->ncomp; c++) weft_tensor_free(tmp[c]);
    }
    pthread_cond_destroy(&q->not_full);
    pthread_cond_destroy(&q->not_empty);
    pthread_mutex_destroy(&q->mu);
    free(q->name), free(q->dtypes), free(q->ndims), free(q->sizes), free(q->slots), free(q);
}

// ---- enqueue ----

// Adds m elements (elems: m * ncomp references, owned by the caller until they
// are queued; the ones queued are set to NULL). Blocks per element while full.
static weft_status enqueue_elems(weft_queue *q, const char *op, weft_tensor **elems, int64_t m, double timeout_s) {
    if (isnan(timeout_s)) return weft_error(WEFT_ERR_ARG, "queue '%s': %s: timeout is NaN", qname(q), op);
    timeout_s = norm_timeout(timeout_s);
    struct timespec dl = timeout_s > 0 ? deadline_after(timeout_s) : (struct timespec){0};
    weft_status st = WEFT_OK;
    pthread_mutex_lock(&q->mu);
    if (q->closed) {
        pthread_mutex_unlock(&q->mu);
        return weft_error(WEFT_ERR_STATE, "queue '%s': %s: the queue is closed", qname(q), op);
    }
    q->pending += m;
    int64_t done = 0;
    for (; done < m; done++) {
        if (q->count == q->capacity) {
            if (timeout_s != 0) { // timeout 0: fail at once, without counting a wait
                q->st.enqueue_blocked++;
                q->st.enqueuers_waiting++;
                while (q->count == q->capacity && !q->cancelled)
                    if (!wait_until(q, &q->not_full, timeout_s, &dl)) break;
                q->st.enqueuers_waiting--;
            }
            if (q->cancelled) {
                st = weft_error(WEFT_ERR_STATE, "queue '%s': %s cancelled: the queue was closed", qname(q), op);
                break;
            }
            if (q->count == q->capacity) {
                st = weft_error(WEFT_ERR_STATE, "queue '%s': %s timed out after %g s (full, capacity %d)", qname(q), op,
                                timeout_s, q->capacity);
                break;
            }
        }
        push_locked(q, elems + done * q->ncomp);
        memset(elems + done * q->ncomp, 0, sizeof(weft_tensor *) * q->ncomp);
        q->pending--;
    }
    if (st != WEFT_OK) {
        q->pending -= m - done;
        if (m > 1) { // say how far it got (the message above is the cause)
            char cause[512];
            snprintf(cause, sizeof cause, "%s", weft_last_error());
            weft_error(st, "%s; %lld of %lld elements were queued", cause, (long long)done, (long long)m);
        }
    }
    // Broadcast even on failure: pending fell, so a dequeue_many waiting for the
    // elements this call promised must re-check whether it can still succeed.
    pthread_cond_broadcast(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
    return st;
}

weft_status weft_queue_enqueue(weft_queue *q, weft_tensor *const *tuple, double timeout_s) {
    if (!q) return weft_error(WEFT_ERR_ARG, "weft_queue_enqueue: queue is NULL");
    if (!tuple) return weft_error(WEFT_ERR_ARG, "weft_queue_enqueue: queue '%s': tuple is NULL", qname(q));
    for (int c = 0; c < q->ncomp; c++) {
        weft_status st = check_component(q, "weft_queue_enqueue", c, tuple[c], false);
        if (st) return st;
    }
    weft_tensor *elem[q->ncomp];
    for (int c = 0; c < q->ncomp; c++) elem[c] = weft_tensor_ref(tuple[c]);
    weft_status st = enqueue_elems(q, "enqueue", elem, 1, timeout_s);
    for (int c = 0; c < q->ncomp; c++) weft_tensor_free(elem[c]); // NULL once queued
    return st;
}

weft_status weft_queue_enqueue_many(weft_queue *q, weft_tensor *const *batch, double timeout_s) {
    const char *fn = "weft_queue_enqueue_many";
    if (!q) return weft_error(WEFT_ERR_ARG, "%s: queue is NULL", fn);
    if (!batch) return weft_error(WEFT_ERR_ARG, "%s: queue '%s': batch is NULL", fn, qname(q));
    int64_t m = -1;
    for (int c = 0; c < q->ncomp; c++) {
        weft_status st = check_component(q, fn, c, batch[c], true);
        if (st) return st;
        int64_t b = weft_tensor_size(batch[c], 0);
        if (m >= 0 && b != m)
            return weft_error(WEFT_ERR_SHAPE, "%s: queue '%s': component %d has %lld rows, component 0 has %lld", fn,
                              qname(q), c, (long long)b, (long long)m);
        m = b;
    }
    if (m == 0) return WEFT_OK;
    weft_tensor **elems = calloc((size_t)m * q->ncomp, sizeof *elems);
    if (!elems) return weft_error(WEFT_ERR_OOM, "%s: queue '%s': out of memory", fn, qname(q));
    weft_status st = WEFT_OK;
    for (int64_t j = 0; j < m && !st; j++)
        for (int c = 0; c < q->ncomp && !st; c++) {
            weft_tensor *v = weft_select(batch[c], 0, j);
            elems[j * q->ncomp + c] = v;
            if (!v) st = weft_error(weft_last_status(), "%s: queue '%s': component %d row %lld: %s", fn, qname(q), c,
                                    (long long)j, weft_last_error());
        }
    if (!st) st = enqueue_elems(q, "enqueue_many", elems, m, timeout_s);
    for (int64_t i = 0; i < m * q->ncomp; i++) weft_tensor_free(elems[i]);
    free(elems);
    return st;
}

// ---- dequeue ----

// Waits until n elements can be taken (or, with up_to, until the queue is closed
// with 1..n-1 left and nothing pending), then moves them into taken[k * ncomp].
// *k receives the number taken. Elements are removed only on success.
static weft_status take_elems(weft_queue *q, const char *op, int n, bool up_to, bool check_stack, weft_tensor **taken,
                              int *k, double timeout_s) {
    *k = 0;
    if (isnan(timeout_s)) return weft_error(WEFT_ERR_ARG, "queue '%s': %s: timeout is NaN", qname(q), op);
    timeout_s = norm_timeout(timeout_s);
    struct timespec dl = timeout_s > 0 ? deadline_after(timeout_s) : (struct timespec){0};
    weft_status st = WEFT_OK;
    *k = 0;
    pthread_mutex_lock(&q->mu);
    bool counted = false, expired = false;
    for (;;) {
        if (q->count >= n) {
            *k = n;
            break;
        }
        if (q->closed && q->count + q->pending < n) {
            if (q->count == 0 && q->pending == 0) {
                st = weft_error(WEFT_ERR_STATE, "queue '%s': %s: the queue is closed and empty", qname(q), op);
                break;
            }
            if (!up_to) {
                st = weft_error(WEFT_ERR_STATE, "queue '%s': %s: the queue is closed with %d element%s left, fewer "
                                "than %d", qname(q), op, q->count, q->count == 1 ? "" : "s", n);
                break;
            }
            if (q->pending == 0) { // the short final batch
                *k = q->count;
                break;
            }
        }
        if (expired || timeout_s == 0) {
            if (n == 1)
                st = weft_error(WEFT_ERR_STATE, "queue '%s': %s timed out after %g s (empty)", qname(q), op, timeout_s);
            else
                st = weft_error(WEFT_ERR_STATE, "queue '%s': %s timed out after %g s (%d of %d elements queued)",
                                qname(q), op, timeout_s, q->count, n);
            break;
        }
        if (!counted) {
            q->st.dequeue_blocked++;
            q->st.dequeuers_waiting++;
            counted = true;
        }
        // Past the deadline, loop once more: the state may have changed during the wait.
        if (!wait_until(q, &q->not_empty, timeout_s, &dl)) expired = true;
    }
    if (counted) q->st.dequeuers_waiting--;
    // Stacking happens after the lock is released; check here, while nothing has
    // been removed yet, that it cannot fail on shapes, so a refusal loses no data.
    if (!st && check_stack && *k > 1)
        for (int c = 0; c < q->ncomp && !st; c++) {
            weft_tensor *t0 = slot_at(q, 0, c);
            for (int i = 1; i < *k; i++) {
                weft_tensor *ti = slot_at(q, i, c);
                int nd = weft_tensor_ndim(t0);
                bool same = weft_tensor_ndim(ti) == nd &&
                            !memcmp(weft_tensor_sizes(ti), weft_tensor_sizes(t0), sizeof(int64_t) * nd) &&
                            weft_tensor_device(ti).type == weft_tensor_device(t0).type &&
                            weft_tensor_device(ti).index == weft_tensor_device(t0).index;
                if (!same) {
                    char a[128], b[128];
                    st = weft_error(WEFT_ERR_SHAPE, "queue '%s': %s: cannot stack component %d: element %d has shape "
                                    "%s, element 0 has %s (or another device)", qname(q), op, c, i,
                                    weft_tensor_shape_str(ti, a, sizeof a), weft_tensor_shape_str(t0, b, sizeof b));
                    *k = 0;
                    break;
                }
            }
        }
    if (!st) {
        for (int i = 0; i < *k; i++) pop_locked(q, taken + (size_t)i * q->ncomp);
        if (*k > 0) pthread_cond_broadcast(&q->not_full);
    }
    pthread_mutex_unlock(&q->mu);
    return st;
}

weft_status weft_queue_dequeue(weft_queue *q, weft_tensor **out, double timeout_s) {
    if (!q) return weft_error(WEFT_ERR_ARG, "weft_queue_dequeue: queue is NULL");
    if (!out) return weft_error(WEFT_ERR_ARG, "weft_queue_dequeue: queue '%s': out is NULL", qname(q));
    for (int c = 0; c < q->ncomp; c++) out[c] = NULL;
    int k;
    return take_elems(q, "dequeue", 1, false, false, out, &k, timeout_s);
}

// dequeue_many and dequeue_up_to: take, then stack outside the lock.
static weft_status dequeue_stacked(weft_queue *q, const char *fn, const char *op, int n, bool up_to, weft_tensor **out,
                                   int *n_out, double timeout_s) {
    if (!q) return weft_error(WEFT_ERR_ARG, "%s: queue is NULL", fn);
    if (!out) return weft_error(WEFT_ERR_ARG, "%s: queue '%s': out is NULL", fn, qname(q));
    for (int c = 0; c < q->ncomp; c++) out[c] = NULL;
    if (n_out) *n_out = 0;
    // n > capacity could never be satisfied at once: the producers would block
    // on a full queue while this call waits for more.
    if (n < 1 || n > q->capacity)
        return weft_error(WEFT_ERR_ARG, "%s: queue '%s': n must be in 1..capacity %d (got %d)", fn, qname(q),
                          q->capacity, n);
    weft_tensor **taken = calloc((size_t)n * q->ncomp, sizeof *taken);
    if (!taken) return weft_error(WEFT_ERR_OOM, "%s: queue '%s': out of memory", fn, qname(q));
    int k = 0;
    char opn[64];
    snprintf(opn, sizeof opn, "%s(%d)", op, n);
    weft_status st = take_elems(q, opn, n, up_to, true, taken, &k, timeout_s);
    if (!st) {
        weft_tensor *col[k];
        WEFT_NO_GRAD {
            for (int c = 0; c < q->ncomp && !st; c++) {
                for (int i = 0; i < k; i++) col[i] = taken[(size_t)i * q->ncomp + c];
                out[c] = weft_stack(k, col, 0);
                if (!out[c])
                    st = weft_error(weft_last_status(), "queue '%s': %s: stacking component %d: %s", qname(q), opn, c,
                                    weft_last_error());
            }
        }
        if (st)
            for (int c = 0; c < q->ncomp; c++) weft_tensor_free(out[c]), out[c] = NULL;
        else if (n_out) *n_out = k;
    }
    for (size_t i = 0; i < (size_t)k * q->ncomp; i++) weft_tensor_free(taken[i]);
    free(taken);
    return st;
}

weft_status weft_queue_dequeue_many(weft_queue *q, int n, weft_tensor **out, double timeout_s) {
    return dequeue_stacked(q, "weft_queue_dequeue_many", "dequeue_many", n, false, out, NULL, timeout_s);
}

weft_status weft_queue_dequeue_up_to(weft_queue *q, int n, weft_tensor **out, int *n_out, double timeout_s) {
    return dequeue_stacked(q, "weft_queue_dequeue_up_to", "dequeue_up_to", n, true, out, n_out, timeout_s);
}

// ---- close and inspection ----

weft_status weft_queue_close(weft_queue *q, bool cancel_pending_enqueues) {
    if (!q) return weft_error(WEFT_ERR_ARG, "weft_queue_close: queue is NULL");
    pthread_mutex_lock(&q->mu);
    q->closed = true;
    if (cancel_pending_enqueues) q->cancelled = true;
    pthread_cond_broadcast(&q->not_full);
    pthread_cond_broadcast(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
    return WEFT_OK;
}

// The const accessors lock too: the mutex is logically not part of the value.
#define LOCKED(q, expr)                                        \
    do {                                                       \
        weft_queue *_mq = (weft_queue *)(q);                   \
        pthread_mutex_lock(&_mq->mu);                          \
        expr;                                                  \
        pthread_mutex_unlock(&_mq->mu);                        \
    } while (0)

bool weft_queue_is_closed(const weft_queue *q) {
    if (!q) return false;
    bool r;
    LOCKED(q, r = q->closed);
    return r;
}

bool weft_queue_is_closed_and_empty(const weft_queue *q) {
    if (!q) return false;
    bool r;
    LOCKED(q, r = q->closed && q->count == 0 && q->pending == 0);
    return r;
}

int weft_queue_size(const weft_queue *q) {
    if (!q) return -1;
    int r;
    LOCKED(q, r = q->count);
    return r;
}

int weft_queue_capacity(const weft_queue *q) { return q ? q->capacity : -1; }
int weft_queue_num_components(const weft_queue *q) { return q ? q->ncomp : -1; }
const char *weft_queue_name(const weft_queue *q) { return q ? q->name : NULL; }

void weft_queue_get_stats(const weft_queue *q, weft_queue_stats *s) {
    if (!s) return;
    if (!q) {
        memset(s, 0, sizeof *s);
        return;
    }
    LOCKED(q, *s = q->st);
}

weft_status weft_queue_component(const weft_queue *q, int c, weft_dtype *dtype, int *ndim, int64_t *sizes) {
    if (!q) return weft_error(WEFT_ERR_ARG, "weft_queue_component: NULL queue");
    if (c < 0 || c >= q->ncomp)
        return weft_error(WEFT_ERR_ARG, "weft_queue_component: queue '%s': component %d of %d", qname(q), c, q->ncomp);
    if (dtype) *dtype = q->dtypes[c];
    if (ndim) *ndim = q->ndims[c];
    if (sizes)
        for (int d = 0; d < q->ndims[c]; d++) sizes[d] = q->sizes[c * WEFT_MAX_DIMS + d];
    return WEFT_OK;
}
