// weft/queue.h — queues: bounded FIFOs of tensor tuples with blocking enqueue
// and dequeue (TensorFlow's FIFOQueue), for input pipelines and barriers.
//
// A queue is a stateful object: graph mode wraps it as enqueue/dequeue/close
// nodes, and it is also usable directly from threads. Every function is
// thread-safe except weft_queue_free, which must be the last call (no thread
// may still be blocked in the queue).
//
// Elements are tuples of n_components tensors whose dtypes (and, optionally,
// shapes) are fixed when the queue is created. The queue stores references,
// not copies: do not modify an enqueued tensor in place.
//
// Blocking: enqueue waits while the queue is full (backpressure on the
// producer), dequeue waits while it is empty. timeout_s < 0 waits forever;
// timeout_s == 0 never waits; a wait that runs out fails with WEFT_ERR_STATE and
// a message naming the queue and the operation, e.g.
//   "queue 'input': enqueue timed out after 0.5 s (full, capacity 4)".
//
// Closing: after weft_queue_close no new enqueue is accepted. Dequeues drain
// what is left and then fail with WEFT_ERR_STATE "... closed and empty": that is
// the end-of-data signal; test it with weft_queue_is_closed_and_empty(), which
// once true stays true. Enqueues already blocked when the queue is closed
// still complete when room appears, unless the close cancels them.
//
// Barrier: a queue of capacity >= N used as "N producers each enqueue one token,
// one consumer calls weft_queue_dequeue_many(q, N, ...)": the consumer returns
// only once all N producers have arrived (see tests/graph/test_queue.c).
#ifndef WEFT_QUEUE_H
#define WEFT_QUEUE_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_queue weft_queue;

// A FIFO of at most capacity (>= 1) elements, each a tuple of n_components (>= 1)
// tensors with dtypes[i]. Shapes: ndims == NULL accepts any shape; otherwise
// ndims[i] == -1 accepts any shape for component i, and ndims[i] >= 0 requires
// that rank with sizes[i][d] (sizes[i][d] == -1: any size in that dimension).
// name (copied; NULL: "queue") appears in every error message.
weft_queue *weft_queue_create(int capacity, int n_components, const weft_dtype *dtypes, const int *ndims,
                              const int64_t *const *sizes, const char *name);
// Drops one reference; the last one releases the tensors still queued (NULL is fine).
void weft_queue_free(weft_queue *q);
// Another reference (graph enqueue/dequeue nodes hold one): the queue lives
// until every holder has called weft_queue_free. Returns q.
weft_queue *weft_queue_ref(weft_queue *q);

// Appends one element (tuple[n_components]); takes new references. Blocks while
// the queue is full, up to timeout_s.
weft_status weft_queue_enqueue(weft_queue *q, weft_tensor *const *tuple, double timeout_s);
// Appends batch[i].size(0) elements: element j is (select(batch[0], 0, j), ...),
// views into the batch. The elements go in one at a time (a batch larger than
// the capacity is fine); on a timeout or a cancelling close the elements
// already queued stay queued and the error says how many went in.
weft_status weft_queue_enqueue_many(weft_queue *q, weft_tensor *const *batch, double timeout_s);

// Removes the oldest element; out[n_components] receives new references.
weft_status weft_queue_dequeue(weft_queue *q, weft_tensor **out, double timeout_s);
// Removes the n oldest elements at once and stacks each component along a new
// dim 0 (fresh tensors, not recorded by autograd). Waits until n elements are
// there; if the queue is closed with fewer it fails and removes nothing.
// Needs 1 <= n <= capacity, and the elements' shapes must agree.
weft_status weft_queue_dequeue_many(weft_queue *q, int n, weft_tensor **out, double timeout_s);
// Like dequeue_many, but once the queue is closed it returns the 1..n elements
// left (*n_out says how many) instead of failing: the last, short batch of an
// input pipeline. Fails with end-of-data only when closed and empty.
weft_status weft_queue_dequeue_up_to(weft_queue *q, int n, weft_tensor **out, int *n_out, double timeout_s);

// No more enqueues: they fail with an error naming the queue. With
// cancel_pending_enqueues, enqueues blocked right now also wake and fail.
// Blocked dequeues wake: they take what is left or fail with end-of-data.
// Closing twice is fine.
weft_status weft_queue_close(weft_queue *q, bool cancel_pending_enqueues);
bool weft_queue_is_closed(const weft_queue *q);
// True once the queue is closed, empty, and no blocked enqueue can still add an
// element: every later dequeue fails. The end-of-data test.
bool weft_queue_is_closed_and_empty(const weft_queue *q);

int weft_queue_size(const weft_queue *q);     // elements queued now (-1 for NULL)
int weft_queue_capacity(const weft_queue *q); // -1 for NULL
int weft_queue_num_components(const weft_queue *q);
const char *weft_queue_name(const weft_queue *q);
// Component c's dtype and shape spec (ndim -1: any shape; sizes[d] -1: any size).
weft_status weft_queue_component(const weft_queue *q, int c, weft_dtype *dtype, int *ndim, int64_t *sizes);

typedef struct weft_queue_stats {
    int64_t enqueued, dequeued;                // elements, over the queue's life
    int64_t enqueue_blocked, dequeue_blocked;  // times an enqueue/dequeue had to wait
    int max_size;                              // the largest size seen (<= capacity)
    int enqueuers_waiting, dequeuers_waiting;  // threads blocked in the queue right now
} weft_queue_stats;
void weft_queue_get_stats(const weft_queue *q, weft_queue_stats *s);

#ifdef __cplusplus
}
#endif
#endif
