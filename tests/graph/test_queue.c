// Queues (weft/queue.h): FIFO order across threads, backpressure, blocking
// dequeue, timeouts, close/cancel semantics, dequeue_many stacking, many
// producers and consumers, the barrier pattern, and bad input.
//
// No test asserts on timing beyond generous bounds: "blocked" is observed
// through the queue's own counters (enqueuers_waiting, dequeuers_waiting, which
// a thread sets under the lock just before it waits) and atomic progress
// counters, polled with WAIT_UNTIL.
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "weft_test.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Polls cond every 0.2 ms for up to 30 s (only a hung test ever gets near that).
#define WAIT_UNTIL(cond)                                                           \
    ({                                                                             \
        double _t0 = now_s();                                                      \
        bool _ok;                                                                  \
        while (!(_ok = (cond)) && now_s() - _t0 < 30) nanosleep(&(struct timespec){0, 200000}, NULL); \
        _ok;                                                                       \
    })

static weft_queue_stats stats(weft_queue *q) {
    weft_queue_stats s;
    weft_queue_get_stats(q, &s);
    return s;
}

static bool has(const char *msg, const char *part) { return strstr(msg, part) != NULL; }

static weft_status enqueue_scalar(weft_queue *q, double v, weft_dtype dt, double timeout_s) {
    weft_tensor *t = weft_tensor_scalar(v, dt);
    weft_status st = weft_queue_enqueue(q, &t, timeout_s);
    weft_tensor_free(t);
    return st;
}

// Dequeues one scalar element; NAN on failure.
static double dequeue_scalar(weft_queue *q, double timeout_s) {
    weft_tensor *t = NULL;
    if (weft_queue_dequeue(q, &t, timeout_s) != WEFT_OK) return NAN;
    double v = weft_tensor_item(t);
    weft_tensor_free(t);
    return v;
}

// ---- FIFO order: one producer thread, one consumer thread ----

enum { FIFO_N = 3000 };

static void *fifo_producer(void *arg) {
    weft_queue *q = arg;
    for (int i = 0; i < FIFO_N; i++) {
        // component 0: scalar f32 i; component 1: i64 (2,) = [i, -3i]
        int64_t v[2] = {i, -3 * i};
        weft_tensor *tup[2] = {weft_tensor_scalar(i, WEFT_F32), weft_tensor_from_data(v, WEFT_DIMS(2), WEFT_I64)};
        if (weft_queue_enqueue(q, tup, -1) != WEFT_OK) return (void *)1;
        weft_tensor_free(tup[0]), weft_tensor_free(tup[1]);
    }
    return NULL;
}

static atomic_int fifo_bad;

static void *fifo_consumer(void *arg) {
    weft_queue *q = arg;
    for (int i = 0; i < FIFO_N; i++) {
        weft_tensor *out[2] = {NULL, NULL};
        if (weft_queue_dequeue(q, out, -1) != WEFT_OK) {
            atomic_fetch_add(&fifo_bad, 1);
            break;
        }
        int64_t idx0[1] = {0}, idx1[1] = {1};
        double a, b;
        weft_tensor_get(out[1], idx0, &a), weft_tensor_get(out[1], idx1, &b);
        if (weft_tensor_item(out[0]) != i || a != i || b != -3.0 * i) atomic_fetch_add(&fifo_bad, 1);
        weft_tensor_free(out[0]), weft_tensor_free(out[1]);
    }
    return NULL;
}

static void test_fifo_order(void) {
    weft_dtype dts[2] = {WEFT_F32, WEFT_I64};
    int nd[2] = {0, 1};
    const int64_t s1[1] = {2};
    const int64_t *sz[2] = {NULL, s1};
    weft_queue *q = weft_queue_create(8, 2, dts, nd, sz, "fifo");
    CHECK(q != NULL);
    atomic_store(&fifo_bad, 0);
    pthread_t p, c;
    pthread_create(&c, NULL, fifo_consumer, q);
    pthread_create(&p, NULL, fifo_producer, q);
    void *pr;
    pthread_join(p, &pr);
    pthread_join(c, NULL);
    CHECK(pr == NULL);
    CHECK(atomic_load(&fifo_bad) == 0);
    weft_queue_stats s = stats(q);
    CHECK(s.enqueued == FIFO_N && s.dequeued == FIFO_N);
    CHECK(s.max_size >= 1 && s.max_size <= 8);
    CHECK(weft_queue_size(q) == 0);
    weft_queue_free(q);
}

// ---- backpressure: the producer blocks at capacity ----

enum { BP_CAP = 4, BP_EXTRA = 3 };
static atomic_int bp_returned; // enqueues that have returned
static atomic_int bp_failed;

static void *bp_producer(void *arg) {
    weft_queue *q = arg;
    for (int i = 0; i < BP_CAP + BP_EXTRA; i++) {
        if (enqueue_scalar(q, 100 + i, WEFT_I32, -1) != WEFT_OK) atomic_fetch_add(&bp_failed, 1);
        atomic_fetch_add(&bp_returned, 1);
    }
    return NULL;
}

static void test_backpressure(void) {
    weft_dtype dt = WEFT_I32;
    weft_queue *q = weft_queue_create(BP_CAP, 1, &dt, NULL, NULL, "bp");
    atomic_store(&bp_returned, 0), atomic_store(&bp_failed, 0);
    pthread_t p;
    pthread_create(&p, NULL, bp_producer, q);
    // The producer fills the queue, then blocks on element BP_CAP+1.
    CHECK(WAIT_UNTIL(stats(q).enqueuers_waiting == 1));
    CHECK(atomic_load(&bp_returned) == BP_CAP); // really blocked: the 5th enqueue has not returned
    CHECK(weft_queue_size(q) == BP_CAP);
    CHECK(stats(q).enqueue_blocked == 1);
    for (int i = 0; i < BP_CAP + BP_EXTRA; i++) {
        CHECK(dequeue_scalar(q, -1) == 100 + i); // FIFO, values as enqueued
        int want = i < BP_EXTRA ? BP_CAP + i + 1 : BP_CAP + BP_EXTRA;
        // Each dequeue frees exactly one slot, so exactly one more enqueue returns,
        // and the producer blocks again while it has elements left.
        CHECK(WAIT_UNTIL(atomic_load(&bp_returned) == want &&
                         (i + 1 >= BP_EXTRA || stats(q).enqueuers_waiting == 1)));
        CHECK(atomic_load(&bp_returned) == want);
        CHECK(weft_queue_size(q) <= BP_CAP);
    }
    pthread_join(p, NULL);
    weft_queue_stats s = stats(q);
    CHECK(atomic_load(&bp_failed) == 0);
    CHECK(s.enqueue_blocked == BP_EXTRA); // each of the k extra elements waited once
    CHECK(s.max_size == BP_CAP);          // never above capacity
    CHECK(s.enqueued == BP_CAP + BP_EXTRA && s.dequeued == BP_CAP + BP_EXTRA);
    CHECK(weft_queue_size(q) == 0);
    weft_queue_free(q);
}

// ---- dequeue on empty blocks until an enqueue ----

static atomic_int deq_done;
static double deq_value;

static void *blocking_consumer(void *arg) {
    deq_value = dequeue_scalar(arg, -1);
    atomic_store(&deq_done, 1);
    return NULL;
}

static void test_dequeue_blocks(void) {
    weft_dtype dt = WEFT_F64;
    weft_queue *q = weft_queue_create(2, 1, &dt, NULL, NULL, "empty");
    atomic_store(&deq_done, 0);
    pthread_t c;
    pthread_create(&c, NULL, blocking_consumer, q);
    CHECK(WAIT_UNTIL(stats(q).dequeuers_waiting == 1));
    CHECK(atomic_load(&deq_done) == 0);
    CHECK(enqueue_scalar(q, 42.5, WEFT_F64, -1) == WEFT_OK);
    pthread_join(c, NULL);
    CHECK(atomic_load(&deq_done) == 1);
    CHECK(deq_value == 42.5);
    CHECK(stats(q).dequeue_blocked == 1);
    CHECK(stats(q).dequeuers_waiting == 0);
    weft_queue_free(q);
}

// ---- timeouts ----

static void test_timeouts(void) {
    weft_dtype dt = WEFT_F32;
    weft_queue *q = weft_queue_create(1, 1, &dt, NULL, NULL, "input");
    CHECK(enqueue_scalar(q, 1, WEFT_F32, 0) == WEFT_OK); // room: timeout 0 is fine
    double t0 = now_s();
    CHECK(enqueue_scalar(q, 2, WEFT_F32, 0.02) == WEFT_ERR_STATE);
    double el = now_s() - t0;
    CHECK(el >= 0.019 && el < 10);
    CHECK(has(weft_last_error(), "queue 'input': enqueue timed out after 0.02 s (full, capacity 1)"));
    CHECK(enqueue_scalar(q, 2, WEFT_F32, 0) == WEFT_ERR_STATE); // full, no wait
    CHECK(has(weft_last_error(), "timed out"));
    CHECK(weft_queue_size(q) == 1);
    CHECK(stats(q).enqueue_blocked == 1); // the timeout-0 call did not wait
    // dequeue_many(1..) on too few: times out and removes nothing
    weft_queue *q2 = weft_queue_create(3, 1, &dt, NULL, NULL, "many");
    CHECK(enqueue_scalar(q2, 7, WEFT_F32, 0) == WEFT_OK);
    weft_tensor *out = (weft_tensor *)1;
    CHECK(weft_queue_dequeue_many(q2, 2, &out, 0.01) == WEFT_ERR_STATE);
    CHECK(out == NULL);
    CHECK(has(weft_last_error(), "queue 'many': dequeue_many(2) timed out after 0.01 s (1 of 2 elements queued)"));
    CHECK(weft_queue_size(q2) == 1);
    CHECK(dequeue_scalar(q2, 0) == 7);
    t0 = now_s();
    CHECK(weft_queue_dequeue(q2, &out, 0.02) == WEFT_ERR_STATE);
    el = now_s() - t0;
    CHECK(el >= 0.019 && el < 10);
    CHECK(has(weft_last_error(), "queue 'many': dequeue timed out after 0.02 s (empty)"));
    CHECK(!weft_queue_is_closed_and_empty(q2)); // a timeout is not end-of-data
    CHECK(enqueue_scalar(q2, 3, WEFT_F32, 1e300) == WEFT_OK); // a huge timeout means forever
    CHECK(dequeue_scalar(q2, 1e300) == 3);
    CHECK(enqueue_scalar(q2, 3, WEFT_F32, NAN) == WEFT_ERR_ARG);
    CHECK(has(weft_last_error(), "queue 'many': enqueue: timeout is NaN"));
    weft_queue_free(q);
    weft_queue_free(q2);
}

// ---- close ----

static atomic_int close_rc; // status of the background call, +1000 until it returns

static void *producer_one(void *arg) {
    atomic_store(&close_rc, enqueue_scalar(arg, 99, WEFT_F32, -1));
    return NULL;
}

static void *consumer_one(void *arg) {
    weft_tensor *t = NULL;
    weft_status st = weft_queue_dequeue(arg, &t, -1);
    weft_tensor_free(t);
    atomic_store(&close_rc, st);
    return NULL;
}

static void test_close(void) {
    weft_dtype dt = WEFT_F32;
    weft_queue *q = weft_queue_create(5, 1, &dt, NULL, NULL, "data");
    for (int i = 0; i < 3; i++) CHECK(enqueue_scalar(q, i, WEFT_F32, 0) == WEFT_OK);
    CHECK(weft_queue_close(q, false) == WEFT_OK);
    CHECK(weft_queue_is_closed(q));
    CHECK(!weft_queue_is_closed_and_empty(q));
    CHECK(enqueue_scalar(q, 9, WEFT_F32, -1) == WEFT_ERR_STATE);
    CHECK(has(weft_last_error(), "queue 'data'") && has(weft_last_error(), "closed"));
    for (int i = 0; i < 3; i++) CHECK(dequeue_scalar(q, -1) == i); // drains
    weft_tensor *t = NULL;
    CHECK(weft_queue_dequeue(q, &t, -1) == WEFT_ERR_STATE); // does not block
    CHECK(t == NULL);
    CHECK(has(weft_last_error(), "queue 'data': dequeue: the queue is closed and empty"));
    CHECK(weft_queue_is_closed_and_empty(q));
    CHECK(weft_queue_close(q, true) == WEFT_OK); // twice is fine
    weft_queue_free(q);

    // close wakes a blocked consumer with end-of-data
    q = weft_queue_create(2, 1, &dt, NULL, NULL, "wake");
    atomic_store(&close_rc, 1000);
    pthread_t th;
    pthread_create(&th, NULL, consumer_one, q);
    CHECK(WAIT_UNTIL(stats(q).dequeuers_waiting == 1));
    CHECK(atomic_load(&close_rc) == 1000);
    weft_queue_close(q, false);
    pthread_join(th, NULL);
    CHECK(atomic_load(&close_rc) == WEFT_ERR_STATE);
    weft_queue_free(q);

    // close with cancel wakes a blocked producer with an error; what was queued stays
    q = weft_queue_create(1, 1, &dt, NULL, NULL, "cancel");
    CHECK(enqueue_scalar(q, 5, WEFT_F32, 0) == WEFT_OK);
    atomic_store(&close_rc, 1000);
    pthread_create(&th, NULL, producer_one, q);
    CHECK(WAIT_UNTIL(stats(q).enqueuers_waiting == 1));
    CHECK(atomic_load(&close_rc) == 1000);
    weft_queue_close(q, true);
    pthread_join(th, NULL);
    CHECK(atomic_load(&close_rc) == WEFT_ERR_STATE);
    CHECK(weft_queue_size(q) == 1);
    CHECK(dequeue_scalar(q, -1) == 5);
    CHECK(weft_queue_is_closed_and_empty(q));
    weft_queue_free(q);

    // close without cancel: an enqueue already blocked still completes when room appears
    q = weft_queue_create(1, 1, &dt, NULL, NULL, "pending");
    CHECK(enqueue_scalar(q, 5, WEFT_F32, 0) == WEFT_OK);
    atomic_store(&close_rc, 1000);
    pthread_create(&th, NULL, producer_one, q);
    CHECK(WAIT_UNTIL(stats(q).enqueuers_waiting == 1));
    weft_queue_close(q, false);
    CHECK(!weft_queue_is_closed_and_empty(q));
    CHECK(dequeue_scalar(q, -1) == 5);
    CHECK(dequeue_scalar(q, -1) == 99); // waits for the pending element rather than ending early
    pthread_join(th, NULL);
    CHECK(atomic_load(&close_rc) == WEFT_OK);
    CHECK(weft_queue_is_closed_and_empty(q));
    CHECK(isnan(dequeue_scalar(q, -1)));
    weft_queue_free(q);
}

// ---- dequeue_many / enqueue_many / dequeue_up_to ----

static void test_dequeue_many(void) {
    weft_dtype dts[2] = {WEFT_F64, WEFT_I32};
    int nd[2] = {1, 0};
    const int64_t s0[1] = {3};
    const int64_t *sz[2] = {s0, NULL};
    weft_queue *q = weft_queue_create(10, 2, dts, nd, sz, "batch");
    for (int i = 0; i < 7; i++) {
        double v[3] = {i, 10 * i, -i - 0.5};
        weft_tensor *tup[2] = {weft_tensor_from_data(v, WEFT_DIMS(3), WEFT_F64), weft_tensor_scalar(i, WEFT_I32)};
        CHECK(weft_queue_enqueue(q, tup, 0) == WEFT_OK);
        weft_tensor_free(tup[0]), weft_tensor_free(tup[1]);
    }
    weft_tensor *out[2] = {NULL, NULL};
    CHECK(weft_queue_dequeue_many(q, 4, out, 0) == WEFT_OK);
    CHECK(weft_tensor_ndim(out[0]) == 2 && weft_tensor_size(out[0], 0) == 4 && weft_tensor_size(out[0], 1) == 3);
    CHECK(weft_tensor_ndim(out[1]) == 1 && weft_tensor_size(out[1], 0) == 4);
    CHECK(weft_tensor_dtype(out[0]) == WEFT_F64 && weft_tensor_dtype(out[1]) == WEFT_I32);
    double ref0[12], ref1[4];
    for (int i = 0; i < 4; i++) ref0[3 * i] = i, ref0[3 * i + 1] = 10 * i, ref0[3 * i + 2] = -i - 0.5, ref1[i] = i;
    wt_check_values("dequeue_many c0", out[0], ref0, 12, 0);
    wt_check_values("dequeue_many c1", out[1], ref1, 4, 0);
    weft_tensor_free(out[0]), weft_tensor_free(out[1]);
    CHECK(weft_queue_size(q) == 3);

    // enqueue_many: a (2,3)/(2,) batch adds two elements, rows in order
    double bv[6] = {100, 101, 102, 200, 201, 202};
    int32_t bi[2] = {70, 80};
    weft_tensor *batch[2] = {weft_tensor_from_data(bv, WEFT_DIMS(2, 3), WEFT_F64),
                             weft_tensor_from_data(bi, WEFT_DIMS(2), WEFT_I32)};
    CHECK(weft_queue_enqueue_many(q, batch, 0) == WEFT_OK);
    weft_tensor_free(batch[0]), weft_tensor_free(batch[1]);
    CHECK(weft_queue_size(q) == 5);
    CHECK(weft_queue_dequeue_many(q, 5, out, 0) == WEFT_OK);
    double ref0b[15], ref1b[5] = {4, 5, 6, 70, 80};
    for (int i = 0; i < 3; i++) ref0b[3 * i] = i + 4, ref0b[3 * i + 1] = 10 * (i + 4), ref0b[3 * i + 2] = -(i + 4) - 0.5;
    for (int j = 0; j < 6; j++) ref0b[9 + j] = bv[j];
    wt_check_values("dequeue_many after enqueue_many c0", out[0], ref0b, 15, 0);
    wt_check_values("dequeue_many after enqueue_many c1", out[1], ref1b, 5, 0);
    weft_tensor_free(out[0]), weft_tensor_free(out[1]);

    // closed with too few: dequeue_many fails naming the queue and removes nothing;
    // dequeue_up_to returns the short final batch, then end-of-data
    for (int i = 0; i < 2; i++) {
        double v[3] = {i, i, i};
        weft_tensor *tup[2] = {weft_tensor_from_data(v, WEFT_DIMS(3), WEFT_F64), weft_tensor_scalar(i, WEFT_I32)};
        CHECK(weft_queue_enqueue(q, tup, 0) == WEFT_OK);
        weft_tensor_free(tup[0]), weft_tensor_free(tup[1]);
    }
    weft_queue_close(q, false);
    CHECK(weft_queue_dequeue_many(q, 3, out, -1) == WEFT_ERR_STATE);
    CHECK(has(weft_last_error(), "queue 'batch': dequeue_many(3): the queue is closed with 2 elements left"));
    CHECK(out[0] == NULL && out[1] == NULL);
    CHECK(weft_queue_size(q) == 2);
    int got = -1;
    CHECK(weft_queue_dequeue_up_to(q, 3, out, &got, -1) == WEFT_OK);
    CHECK(got == 2);
    CHECK(weft_tensor_size(out[0], 0) == 2 && weft_tensor_size(out[1], 0) == 2);
    double r0[6] = {0, 0, 0, 1, 1, 1}, r1[2] = {0, 1};
    wt_check_values("dequeue_up_to c0", out[0], r0, 6, 0);
    wt_check_values("dequeue_up_to c1", out[1], r1, 2, 0);
    weft_tensor_free(out[0]), weft_tensor_free(out[1]);
    CHECK(weft_queue_dequeue_up_to(q, 3, out, &got, -1) == WEFT_ERR_STATE);
    CHECK(has(weft_last_error(), "closed and empty") && got == 0);
    CHECK(weft_queue_is_closed_and_empty(q));
    weft_queue_free(q);
}

// enqueue_many of more rows than the capacity goes in as a consumer makes room
static void *many_producer(void *arg) {
    float v[10];
    for (int i = 0; i < 10; i++) v[i] = (float)(i * i);
    weft_tensor *b = weft_tensor_from_data(v, WEFT_DIMS(10), WEFT_F32);
    atomic_store(&close_rc, weft_queue_enqueue_many(arg, &b, -1));
    weft_tensor_free(b);
    return NULL;
}

static void test_enqueue_many_over_capacity(void) {
    weft_dtype dt = WEFT_F32;
    int nd = 0;
    weft_queue *q = weft_queue_create(3, 1, &dt, &nd, NULL, "big");
    atomic_store(&close_rc, 1000);
    pthread_t th;
    pthread_create(&th, NULL, many_producer, q);
    for (int i = 0; i < 10; i++) CHECK(dequeue_scalar(q, -1) == i * i);
    pthread_join(th, NULL);
    CHECK(atomic_load(&close_rc) == WEFT_OK);
    CHECK(stats(q).max_size <= 3);
    weft_queue_free(q);
}

// ---- many producers, many consumers: every element exactly once ----

enum { MP_P = 4, MP_C = 3, MP_PER = 2500 };
static atomic_int mp_seen[MP_P * MP_PER];
static atomic_int mp_order_bad;
static atomic_llong mp_sum;

static void *mp_producer(void *arg) {
    weft_queue *q = ((void **)arg)[0];
    int p = (int)(intptr_t)((void **)arg)[1];
    for (int i = 0; i < MP_PER; i++)
        if (enqueue_scalar(q, p * MP_PER + i, WEFT_I64, -1) != WEFT_OK) atomic_fetch_add(&mp_order_bad, 1);
    return NULL;
}

static void *mp_consumer(void *arg) {
    weft_queue *q = arg;
    int last[MP_P];
    for (int p = 0; p < MP_P; p++) last[p] = -1;
    for (;;) {
        weft_tensor *t = NULL;
        if (weft_queue_dequeue(q, &t, -1) != WEFT_OK) {
            if (!weft_queue_is_closed_and_empty(q)) atomic_fetch_add(&mp_order_bad, 1);
            break;
        }
        long long v = (long long)weft_tensor_item(t);
        weft_tensor_free(t);
        atomic_fetch_add(&mp_seen[v], 1);
        atomic_fetch_add(&mp_sum, v);
        // FIFO: one consumer sees each producer's elements in increasing order
        int p = (int)(v / MP_PER), i = (int)(v % MP_PER);
        if (i <= last[p]) atomic_fetch_add(&mp_order_bad, 1);
        last[p] = i;
    }
    return NULL;
}

static void test_many_producers_consumers(void) {
    weft_dtype dt = WEFT_I64;
    weft_queue *q = weft_queue_create(16, 1, &dt, NULL, NULL, "mpmc");
    for (int i = 0; i < MP_P * MP_PER; i++) atomic_store(&mp_seen[i], 0);
    atomic_store(&mp_order_bad, 0), atomic_store(&mp_sum, 0);
    pthread_t prod[MP_P], cons[MP_C];
    void *args[MP_P][2];
    for (int c = 0; c < MP_C; c++) pthread_create(&cons[c], NULL, mp_consumer, q);
    for (int p = 0; p < MP_P; p++) {
        args[p][0] = q, args[p][1] = (void *)(intptr_t)p;
        pthread_create(&prod[p], NULL, mp_producer, args[p]);
    }
    for (int p = 0; p < MP_P; p++) pthread_join(prod[p], NULL);
    weft_queue_close(q, false); // end-of-data for the consumers
    for (int c = 0; c < MP_C; c++) pthread_join(cons[c], NULL);
    long long n = (long long)MP_P * MP_PER;
    CHECK(atomic_load(&mp_sum) == n * (n - 1) / 2);
    int once = 0;
    for (int i = 0; i < n; i++) once += atomic_load(&mp_seen[i]) == 1;
    CHECK(once == n);
    CHECK(atomic_load(&mp_order_bad) == 0);
    weft_queue_stats s = stats(q);
    CHECK(s.enqueued == n && s.dequeued == n && s.max_size <= 16);
    weft_queue_free(q);
}

// ---- barrier: N producers each enqueue one token; dequeue_many(N) returns when all arrived ----

enum { BAR_N = 5 };
static atomic_int bar_done;
static weft_tensor *bar_tokens;

static void *bar_token(void *arg) {
    weft_queue *q = ((void **)arg)[0];
    enqueue_scalar(q, (double)(intptr_t)((void **)arg)[1], WEFT_I32, -1);
    return NULL;
}

static void *bar_wait(void *arg) {
    if (weft_queue_dequeue_many(arg, BAR_N, &bar_tokens, -1) != WEFT_OK) bar_tokens = NULL;
    atomic_store(&bar_done, 1);
    return NULL;
}

static void test_barrier(void) {
    weft_dtype dt = WEFT_I32;
    int nd = 0;
    weft_queue *q = weft_queue_create(BAR_N, 1, &dt, &nd, NULL, "barrier");
    for (int round = 0; round < 3; round++) { // the same queue is a reusable barrier
        atomic_store(&bar_done, 0);
        bar_tokens = NULL;
        pthread_t w, prod[BAR_N];
        void *args[BAR_N][2];
        pthread_create(&w, NULL, bar_wait, q);
        for (int p = 0; p < BAR_N - 1; p++) {
            args[p][0] = q, args[p][1] = (void *)(intptr_t)(round * 10 + p);
            pthread_create(&prod[p], NULL, bar_token, args[p]);
        }
        for (int p = 0; p < BAR_N - 1; p++) pthread_join(prod[p], NULL);
        // N-1 arrived: the waiter is still blocked
        CHECK(weft_queue_size(q) == BAR_N - 1);
        CHECK(WAIT_UNTIL(stats(q).dequeuers_waiting == 1));
        CHECK(atomic_load(&bar_done) == 0);
        args[BAR_N - 1][0] = q, args[BAR_N - 1][1] = (void *)(intptr_t)(round * 10 + BAR_N - 1);
        pthread_create(&prod[BAR_N - 1], NULL, bar_token, args[BAR_N - 1]);
        pthread_join(prod[BAR_N - 1], NULL);
        pthread_join(w, NULL);
        CHECK(atomic_load(&bar_done) == 1);
        CHECK(bar_tokens && weft_tensor_numel(bar_tokens) == BAR_N);
        double v[BAR_N], sum = 0;
        if (bar_tokens && weft_tensor_to_f64(bar_tokens, v, BAR_N) == WEFT_OK)
            for (int i = 0; i < BAR_N; i++) sum += v[i];
        CHECK(sum == round * 10 * BAR_N + BAR_N * (BAR_N - 1) / 2); // every producer's token, once
        weft_tensor_free(bar_tokens);
        CHECK(weft_queue_size(q) == 0);
    }
    weft_queue_free(q);
}

// ---- bad input ----

static void test_bad_input(void) {
    weft_dtype dts[2] = {WEFT_F32, WEFT_I64};
    weft_clear_error();
    CHECK(weft_queue_create(0, 2, dts, NULL, NULL, "zero") == NULL);
    CHECK(has(weft_last_error(), "weft_queue_create") && has(weft_last_error(), "'zero'") &&
          has(weft_last_error(), "capacity"));
    CHECK(weft_queue_create(2, 0, dts, NULL, NULL, "nocomp") == NULL);
    CHECK(weft_queue_create(2, 2, NULL, NULL, NULL, "nodt") == NULL);
    int bad_nd[2] = {2, 0};
    CHECK(weft_queue_create(2, 2, dts, bad_nd, NULL, "nosizes") == NULL);
    CHECK(has(weft_last_error(), "'nosizes'") && has(weft_last_error(), "component 0"));

    CHECK(weft_queue_enqueue(NULL, NULL, 0) == WEFT_ERR_ARG);
    CHECK(has(weft_last_error(), "weft_queue_enqueue"));
    CHECK(weft_queue_dequeue(NULL, NULL, 0) == WEFT_ERR_ARG);
    CHECK(has(weft_last_error(), "weft_queue_dequeue"));
    CHECK(weft_queue_dequeue_many(NULL, 1, NULL, 0) == WEFT_ERR_ARG);
    CHECK(weft_queue_close(NULL, false) == WEFT_ERR_ARG);
    CHECK(weft_queue_size(NULL) == -1 && weft_queue_capacity(NULL) == -1);
    weft_queue_free(NULL);

    // component 1: i64 of shape (?, 2) — any rows, two columns
    int nd[2] = {0, 2};
    const int64_t s1[2] = {-1, 2};
    const int64_t *sz[2] = {NULL, s1};
    weft_queue *q = weft_queue_create(4, 2, dts, nd, sz, "typed");
    CHECK(q && weft_queue_capacity(q) == 4 && weft_queue_num_components(q) == 2);
    CHECK(q && !strcmp(weft_queue_name(q), "typed"));
    weft_tensor *f32s = weft_tensor_scalar(1, WEFT_F32), *f64s = weft_tensor_scalar(1, WEFT_F64);
    weft_tensor *ok1 = weft_tensor_zeros(WEFT_DIMS(3, 2), WEFT_I64), *ok2 = weft_tensor_zeros(WEFT_DIMS(1, 2), WEFT_I64);
    weft_tensor *bad_shape = weft_tensor_zeros(WEFT_DIMS(3, 3), WEFT_I64);
    weft_tensor *bad_dt = weft_tensor_zeros(WEFT_DIMS(3, 2), WEFT_F32);
    weft_tensor *vec = weft_tensor_zeros(WEFT_DIMS(2), WEFT_F32);

    CHECK(weft_queue_enqueue(q, (weft_tensor *[]){f64s, ok1}, 0) == WEFT_ERR_DTYPE);
    CHECK(has(weft_last_error(), "weft_queue_enqueue: queue 'typed': component 0 has dtype f64, expected f32"));
    CHECK(weft_queue_enqueue(q, (weft_tensor *[]){f32s, bad_dt}, 0) == WEFT_ERR_DTYPE);
    CHECK(has(weft_last_error(), "component 1"));
    CHECK(weft_queue_enqueue(q, (weft_tensor *[]){f32s, bad_shape}, 0) == WEFT_ERR_SHAPE);
    CHECK(has(weft_last_error(), "queue 'typed': component 1 has shape (3,3), expected (?,2)"));
    CHECK(weft_queue_enqueue(q, (weft_tensor *[]){vec, ok1}, 0) == WEFT_ERR_SHAPE);
    CHECK(has(weft_last_error(), "component 0"));
    CHECK(weft_queue_enqueue(q, (weft_tensor *[]){f32s, NULL}, 0) == WEFT_ERR_ARG);
    CHECK(has(weft_last_error(), "queue 'typed': component 1 is NULL"));
    CHECK(weft_queue_enqueue(q, NULL, 0) == WEFT_ERR_ARG);
    CHECK(weft_queue_size(q) == 0); // nothing bad got in

    // any rows: both (3,2) and (1,2) fit; stacking them cannot work, and fails
    // without losing the elements
    CHECK(weft_queue_enqueue(q, (weft_tensor *[]){f32s, ok1}, 0) == WEFT_OK);
    CHECK(weft_queue_enqueue(q, (weft_tensor *[]){f32s, ok2}, 0) == WEFT_OK);
    weft_tensor *out[2] = {NULL, NULL};
    CHECK(weft_queue_dequeue_many(q, 2, out, 0) == WEFT_ERR_SHAPE);
    CHECK(has(weft_last_error(), "queue 'typed': dequeue_many(2): cannot stack component 1"));
    CHECK(weft_queue_size(q) == 2);
    CHECK(weft_queue_dequeue_many(q, 0, out, 0) == WEFT_ERR_ARG);
    CHECK(weft_queue_dequeue_many(q, 5, out, 0) == WEFT_ERR_ARG); // n > capacity could never be met
    CHECK(has(weft_last_error(), "weft_queue_dequeue_many: queue 'typed'"));
    CHECK(weft_queue_dequeue(q, NULL, 0) == WEFT_ERR_ARG);
    // dequeue returns the very tensors enqueued (references, not copies)
    CHECK(weft_queue_dequeue(q, out, 0) == WEFT_OK);
    CHECK(out[0] == f32s && out[1] == ok1);
    weft_tensor_free(out[0]), weft_tensor_free(out[1]);

    // enqueue_many: rows must agree; 0-d components cannot be batches
    weft_tensor *rows2 = weft_tensor_zeros(WEFT_DIMS(2), WEFT_F32);
    weft_tensor *rows3 = weft_tensor_zeros(WEFT_DIMS(3, 1, 2), WEFT_I64);
    CHECK(weft_queue_enqueue_many(q, (weft_tensor *[]){rows2, rows3}, 0) == WEFT_ERR_SHAPE);
    CHECK(has(weft_last_error(), "weft_queue_enqueue_many: queue 'typed': component 1 has 3 rows, component 0 has 2"));
    CHECK(weft_queue_enqueue_many(q, (weft_tensor *[]){f32s, rows3}, 0) == WEFT_ERR_SHAPE);
    CHECK(has(weft_last_error(), "component 0 is 0-d"));
    // a batch that does not fit: three elements go in (room for 3), the fourth times out
    weft_tensor *r4a = weft_tensor_zeros(WEFT_DIMS(4), WEFT_F32), *r4b = weft_tensor_zeros(WEFT_DIMS(4, 1, 2), WEFT_I64);
    CHECK(weft_queue_enqueue_many(q, (weft_tensor *[]){r4a, r4b}, 0) == WEFT_ERR_STATE);
    CHECK(has(weft_last_error(), "3 of 4 elements were queued"));
    CHECK(weft_queue_size(q) == 4);

    weft_tensor *all[] = {f32s, f64s, ok1, ok2, bad_shape, bad_dt, vec, rows2, rows3, r4a, r4b};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) weft_tensor_free(all[i]);
    weft_queue_free(q); // frees the four elements still queued
}

int main(void) {
    RUN(test_fifo_order);
    RUN(test_backpressure);
    RUN(test_dequeue_blocks);
    RUN(test_timeouts);
    RUN(test_close);
    RUN(test_dequeue_many);
    RUN(test_enqueue_many_over_capacity);
    RUN(test_many_producers_consumers);
    RUN(test_barrier);
    RUN(test_bad_input);
    return wt_summary();
}
