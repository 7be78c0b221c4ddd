// The data loader: batches of (inputs, labels) in a per-epoch order, made by a
// background thread into a bounded queue.
//
// The producer makes batch (epoch, index) for every position in order, across
// epochs, and blocks when the queue holds `capacity` batches: backpressure, so
// a slow consumer bounds memory. The consumer's position (epoch, batches
// returned) is the checkpointed state; the order of epoch e is a pure function
// of (seed, e), so setting a position (which restarts the producer there)
// reproduces exactly the batches that would have followed.
//
// With num_replicas > 1 the order is this rank's share of the epoch
// (weft_dist_sampler_indices): positions and counts are in the share.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/data.h>

#include "../core/core_impl.h"
#include "data_impl.h"

typedef struct item {
    weft_tensor *x, *y;
    int64_t epoch, index;
} item;

struct weft_loader {
    weft_tensor *inputs, *labels; // contiguous (N, ...)
    int64_t n, bs, nb;            // samples (this rank's share), batch size, batches per epoch
    int64_t n_all;                // samples in the data set
    int replicas, rank;           // distributed sampling (replicas 1: all samples)
    size_t xrow, yrow;            // bytes per sample
    bool shuffle, drop_last;
    uint64_t seed;
    int64_t epoch, index; // consumer position
    // Synchronous mode (capacity 0) and the producer each keep a permutation.
    int64_t *sync_perm, sync_perm_epoch;

    // ---- producer (capacity > 0); fields below mu are guarded by it ----
    int cap;
    pthread_t th;
    bool th_running;
    pthread_mutex_t mu;
    pthread_cond_t not_full, not_empty;
    item *q;
    int head, count;
    bool stop, failed, blocked;
    int64_t p_epoch, p_index, produced;
    weft_status err_status;
    char err[512];
    int64_t *perm, perm_epoch; // producer-owned
};

weft_loader_opts weft_loader_default_opts(void) {
    return (weft_loader_opts){.batch_size = 64, .shuffle = true, .seed = 0, .drop_last = false, .prefetch = 4};
}

// The epoch's order: a permutation keyed by (seed, epoch), this rank's share of it.
static weft_status make_order(const weft_loader *l, int64_t epoch, int64_t *out) {
    return weft_dist_sampler_indices(l->n_all, l->replicas, l->rank, l->seed, epoch, l->shuffle, out);
}

static weft_tensor *gather_rows(const weft_tensor *src, size_t row, const int64_t *idx, int64_t b) {
    int nd = weft_tensor_ndim(src);
    int64_t sizes[WEFT_MAX_DIMS];
    memcpy(sizes, weft_tensor_sizes(src), sizeof(int64_t) * nd);
    sizes[0] = b;
    // A host batch whatever the default device is (weft train --device cuda
    // moves it itself): the rows are memcpy'd from host memory.
    weft_tensor *t = weft_tensor_empty_on(nd, sizes, weft_tensor_dtype(src), WEFT_DEVICE_CPU);
    if (!t) return NULL;
    const char *s = weft_tensor_data(src);
    char *d = weft_tensor_data(t); // (b, row bytes)
    for (int64_t k = 0; k < b; k++) memcpy(d + k * row, s + idx[k] * row, row);
    return t;
}

// Batch (epoch, index) using *perm (recomputed when it belongs to another epoch).
static int make_batch(const weft_loader *l, int64_t epoch, int64_t index, int64_t **perm, int64_t *perm_epoch,
                      weft_tensor **x, weft_tensor **y) {
    *x = *y = NULL;
    if (!*perm) {
        *perm = malloc(sizeof(int64_t) * (size_t)l->n);
        if (!*perm) return weft_error(WEFT_ERR_OOM, "loader: out of memory for the sample order");
        *perm_epoch = -1;
    }
    if (*perm_epoch != epoch) {
        *perm_epoch = -1;
        weft_status s = make_order(l, epoch, *perm);
        if (s != WEFT_OK) return s;
        *perm_epoch = epoch;
    }
    int64_t start = index * l->bs, b = l->bs;
    if (start + b > l->n) b = l->n - start;
    *x = gather_rows(l->inputs, l->xrow, *perm + start, b);
    if (*x && l->labels) *y = gather_rows(l->labels, l->yrow, *perm + start, b);
    if (!*x || (l->labels && !*y)) {
        weft_tensor_free(*x);
        *x = NULL;
        return weft_last_status() != WEFT_OK ? weft_last_status() : WEFT_ERR_OOM;
    }
    return WEFT_OK;
}

static void *producer_main(void *arg) {
    weft_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        if (l->count == l->cap) {
            l->blocked = true;
            pthread_cond_wait(&l->not_full, &l->mu);
            l->blocked = false;
            continue;
        }
        int64_t e = l->p_epoch, i = l->p_index;
        pthread_mutex_unlock(&l->mu);
        weft_clear_error();
        weft_tensor *x, *y;
        int s = make_batch(l, e, i, &l->perm, &l->perm_epoch, &x, &y);
        pthread_mutex_lock(&l->mu);
        if (s != WEFT_OK) {
            // Errors are per thread: hand the message to the consumer.
            l->failed = true;
            l->err_status = s;
            snprintf(l->err, sizeof l->err, "%s", weft_last_error());
            pthread_cond_broadcast(&l->not_empty);
            break;
        }
        if (l->stop) {
            weft_tensor_free(x);
            weft_tensor_free(y);
            break;
        }
        l->q[(l->head + l->count) % l->cap] = (item){x, y, e, i};
        l->count++;
        l->produced++;
        if (++l->p_index == l->nb) {
            l->p_index = 0;
            l->p_epoch++;
        }
        pthread_cond_signal(&l->not_empty);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void producer_stop(weft_loader *l) {
    if (!l->th_running) return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->not_full);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->th, NULL);
    l->th_running = false;
    for (int k = 0; k < l->count; k++) {
        item *it = &l->q[(l->head + k) % l->cap];
        weft_tensor_free(it->x);
        weft_tensor_free(it->y);
    }
    l->head = l->count = 0;
}

// (Re)starts the producer at the consumer's position.
static weft_status producer_start(weft_loader *l) {
    int64_t e = l->epoch, i = l->index;
    if (i >= l->nb) { // the consumer will report the end of epoch e first
        e++;
        i = 0;
    }
    l->p_epoch = e;
    l->p_index = i;
    l->stop = l->failed = l->blocked = false;
    l->produced = 0;
    l->err[0] = 0;
    int rc = pthread_create(&l->th, NULL, producer_main, l);
    if (rc != 0) return weft_error(WEFT_ERR_STATE, "loader: cannot start the prefetch thread: %s", strerror(rc));
    l->th_running = true;
    return WEFT_OK;
}

weft_loader *weft_loader_create(weft_tensor *inputs, weft_tensor *labels, const weft_loader_opts *opts) {
    if (!inputs) return weft_error_null(WEFT_ERR_ARG, "loader_create: inputs is NULL");
    weft_loader_opts o = opts ? *opts : weft_loader_default_opts();
    if (o.batch_size <= 0)
        return weft_error_null(WEFT_ERR_ARG, "loader_create: batch_size must be > 0, got %lld", (long long)o.batch_size);
    if (o.prefetch < 0 || o.prefetch > 4096)
        return weft_error_null(WEFT_ERR_ARG, "loader_create: prefetch must be in 0..4096, got %d", o.prefetch);
    if (weft_tensor_ndim(inputs) < 1 || (labels && weft_tensor_ndim(labels) < 1))
        return weft_error_null(WEFT_ERR_SHAPE, "loader_create: inputs and labels need a sample dimension");
    if (weft_tensor_device(inputs).type != WEFT_CPU || (labels && weft_tensor_device(labels).type != WEFT_CPU))
        return weft_error_null(WEFT_ERR_DEVICE, "loader_create: data sets must be on the CPU");
    int64_t n = weft_tensor_size(inputs, 0);
    if (labels && weft_tensor_size(labels, 0) != n)
        return weft_error_null(WEFT_ERR_SHAPE, "loader_create: %lld inputs but %lld labels", (long long)n,
                               (long long)weft_tensor_size(labels, 0));
    if (n == 0) return weft_error_null(WEFT_ERR_SHAPE, "loader_create: the data set is empty");
    if (o.num_replicas < 0)
        return weft_error_null(WEFT_ERR_ARG, "loader_create: num_replicas must be >= 0, got %d", o.num_replicas);
    int replicas = o.num_replicas > 1 ? o.num_replicas : 1;
    if (o.rank < 0 || o.rank >= replicas)
        return weft_error_null(WEFT_ERR_ARG, "loader_create: rank %d is not in 0..%d (num_replicas %d)", o.rank,
                               replicas - 1, o.num_replicas);
    int64_t n_all = n;
    n = weft_dist_sampler_len(n_all, replicas);
    if (n == 0)
        return weft_error_null(WEFT_ERR_SHAPE, "loader_create: %lld samples cannot give each of %d replicas one",
                               (long long)n_all, replicas);
    int64_t nb = o.drop_last ? n / o.batch_size : (n + o.batch_size - 1) / o.batch_size;
    if (nb == 0)
        return weft_error_null(WEFT_ERR_SHAPE, "loader_create: %lld samples make no full batch of %lld (drop_last)",
                               (long long)n, (long long)o.batch_size);
    weft_loader *l = calloc(1, sizeof *l);
    if (!l) return weft_error_null(WEFT_ERR_OOM, "loader_create: out of memory");
    l->inputs = weft_tensor_contiguous(inputs);
    l->labels = labels ? weft_tensor_contiguous(labels) : NULL;
    if (!l->inputs || (labels && !l->labels)) {
        weft_tensor_free(l->inputs);
        weft_tensor_free(l->labels);
        free(l);
        return NULL;
    }
    l->n = n;
    l->bs = o.batch_size;
    l->nb = nb;
    l->n_all = n_all;
    l->replicas = replicas;
    l->rank = o.rank;
    l->xrow = (size_t)(weft_tensor_numel(inputs) / n_all) * weft_dtype_size(weft_tensor_dtype(inputs));
    l->yrow = labels ? (size_t)(weft_tensor_numel(labels) / n_all) * weft_dtype_size(weft_tensor_dtype(labels)) : 0;
    l->shuffle = o.shuffle;
    l->drop_last = o.drop_last;
    l->seed = o.seed;
    l->cap = o.prefetch;
    l->sync_perm_epoch = l->perm_epoch = -1;
    if (l->cap > 0) {
        l->q = calloc((size_t)l->cap, sizeof(item));
        pthread_mutex_init(&l->mu, NULL);
        pthread_cond_init(&l->not_full, NULL);
        pthread_cond_init(&l->not_empty, NULL);
        if (!l->q || producer_start(l) != WEFT_OK) {
            if (!l->q) weft_error(WEFT_ERR_OOM, "loader_create: out of memory");
            weft_loader_free(l);
            return NULL;
        }
    }
    return l;
}

void weft_loader_free(weft_loader *l) {
    if (!l) return;
    if (l->cap > 0) {
        producer_stop(l);
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->not_full);
        pthread_cond_destroy(&l->not_empty);
    }
    free(l->q);
    free(l->perm);
    free(l->sync_perm);
    weft_tensor_free(l->inputs);
    weft_tensor_free(l->labels);
    free(l);
}

int weft_loader_next(weft_loader *l, weft_tensor **x, weft_tensor **y) {
    if (x) *x = NULL;
    if (y) *y = NULL;
    if (!l || !x) return weft_error(WEFT_ERR_ARG, "loader_next: NULL argument");
    if (l->index >= l->nb) {
        l->epoch++;
        l->index = 0;
        return 0;
    }
    weft_tensor *bx, *by;
    if (l->cap == 0) {
        int s = make_batch(l, l->epoch, l->index, &l->sync_perm, &l->sync_perm_epoch, &bx, &by);
        if (s != WEFT_OK) return s;
    } else {
        pthread_mutex_lock(&l->mu);
        while (l->count == 0 && !l->failed) pthread_cond_wait(&l->not_empty, &l->mu);
        if (l->count == 0) {
            weft_status s = l->err_status;
            char msg[512];
            snprintf(msg, sizeof msg, "%s", l->err);
            pthread_mutex_unlock(&l->mu);
            return weft_error(s, "loader_next: prefetch thread failed: %s", msg);
        }
        item it = l->q[l->head];
        l->head = (l->head + 1) % l->cap;
        l->count--;
        pthread_cond_signal(&l->not_full);
        pthread_mutex_unlock(&l->mu);
        bx = it.x;
        by = it.y;
        if (it.epoch != l->epoch || it.index != l->index) { // cannot happen: the producer follows the consumer
            weft_tensor_free(bx);
            weft_tensor_free(by);
            return weft_error(WEFT_ERR_STATE, "loader_next: queue out of step (got %lld/%lld, want %lld/%lld)",
                              (long long)it.epoch, (long long)it.index, (long long)l->epoch, (long long)l->index);
        }
    }
    l->index++;
    *x = bx;
    if (y) *y = by;
    else weft_tensor_free(by);
    return 1;
}

int64_t weft_loader_batches_per_epoch(const weft_loader *l) { return l ? l->nb : 0; }
int64_t weft_loader_num_samples(const weft_loader *l) { return l ? l->n : 0; }

void weft_loader_position(const weft_loader *l, int64_t *epoch, int64_t *index) {
    if (epoch) *epoch = l ? l->epoch : 0;
    if (index) *index = l ? l->index : 0;
}

weft_status weft_loader_set_position(weft_loader *l, int64_t epoch, int64_t index) {
    if (!l) return weft_error(WEFT_ERR_ARG, "loader_set_position: loader is NULL");
    if (epoch < 0 || index < 0 || index > l->nb)
        return weft_error(WEFT_ERR_ARG, "loader_set_position: position (%lld, %lld) out of range (index 0..%lld)",
                          (long long)epoch, (long long)index, (long long)l->nb);
    if (l->cap > 0) producer_stop(l); // drops batches made for the old position
    l->epoch = epoch;
    l->index = index;
    return l->cap > 0 ? producer_start(l) : WEFT_OK;
}

weft_status weft_loader_epoch_order(const weft_loader *l, int64_t epoch, int64_t *out) {
    if (!l || !out) return weft_error(WEFT_ERR_ARG, "loader_epoch_order: NULL argument");
    if (epoch < 0) return weft_error(WEFT_ERR_ARG, "loader_epoch_order: epoch %lld is negative", (long long)epoch);
    return make_order(l, epoch, out);
}

void weft_loader_get_stats(weft_loader *l, weft_loader_stats *s) {
    if (!s) return;
    memset(s, 0, sizeof *s);
    if (!l || l->cap == 0) return;
    pthread_mutex_lock(&l->mu);
    s->produced = l->produced;
    s->queued = l->count;
    s->capacity = l->cap;
    s->producer_blocked = l->blocked;
    pthread_mutex_unlock(&l->mu);
}
