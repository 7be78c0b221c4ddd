// The CUDA device behind weft_device_impl.
//
// Work is asynchronous: kernels and device-side copies are queued on the
// calling thread's current stream (weft's own non-blocking stream per device
// unless weft_stream_set_current picked another) and the host only waits
// where it needs a value: a copy to host memory, weft_device_synchronize,
// stream/event synchronisation. Host-to-device copies go through pinned
// staging buffers so they too return before the GPU has run them; a staging
// buffer is reused only once the event recorded after its copy has passed.
// Memory comes from the caching block allocator (block_alloc.c), one per
// device, keyed by stream.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../block_alloc.h"
#include "cuda_impl.h"

typedef struct staging {
    void *host; // pinned
    size_t size;
    cudaEvent_t done; // recorded after the copy that read it
    bool busy;
} staging;

#define N_STAGING 8
#define STAGING_MAX ((size_t)64 << 20) // larger copies wait for the GPU instead of holding pinned memory

typedef struct dev_state {
    bool ready;
    cudaStream_t stream; // weft's default stream on this device
    weft_block_alloc *alloc;
    pthread_mutex_t mu; // staging buffers
    staging stage[N_STAGING];
} dev_state;

static int g_count;
static char g_reason[160];
static dev_state g_dev[WEFT_CUDA_MAX_DEVICES];
static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local cudaStream_t tl_stream[WEFT_CUDA_MAX_DEVICES]; // NULL: the device's default

int weft_cuda_device_count(void) { return g_count; }
const char *weft_cuda_unavailable_reason(void) { return g_reason; }

weft_status weft_cuda_check(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return WEFT_OK;
    cudaGetLastError(); // clear a sticky launch error so the next call starts clean
    return weft_error(e == cudaErrorMemoryAllocation ? WEFT_ERR_OOM : WEFT_ERR_DEVICE, "%s: CUDA error %s (%s)",
                      what, cudaGetErrorName(e), cudaGetErrorString(e));
}

// ---- the allocator's backend: cudaMalloc/cudaFree and events ----
typedef struct alloc_ctx {
    int index;
} alloc_ctx;
static alloc_ctx g_actx[WEFT_CUDA_MAX_DEVICES];

static void *raw_alloc(void *ctx, size_t n) {
    void *p = NULL;
    cudaSetDevice(((alloc_ctx *)ctx)->index);
    if (cudaMalloc(&p, n) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}
static void raw_free(void *ctx, void *p, size_t n) {
    (void)n;
    cudaSetDevice(((alloc_ctx *)ctx)->index);
    cudaFree(p); // synchronises the device: only on empty_cache and out-of-memory retries
}
// An event or stream query: true when done. cudaErrorNotReady is also left
// as the thread's last error, which the next kernel launcher's
// cudaGetLastError would report as its own failure: clear it.
static bool query_done(cudaError_t e) {
    if (e == cudaErrorNotReady) cudaGetLastError();
    return e != cudaErrorNotReady;
}

static void *ev_record(void *ctx, void *stream) {
    cudaEvent_t e;
    cudaSetDevice(((alloc_ctx *)ctx)->index);
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    if (cudaEventRecord(e, (cudaStream_t)stream) != cudaSuccess) {
        cudaGetLastError();
        cudaEventDestroy(e);
        return NULL;
    }
    return e;
}
static bool ev_done(void *ctx, void *e) {
    (void)ctx;
    return query_done(cudaEventQuery((cudaEvent_t)e));
}
static void ev_free(void *ctx, void *e) {
    (void)ctx;
    cudaEventDestroy((cudaEvent_t)e);
}

// Lazily set up device `index` (stream, allocator) on first use.
static dev_state *dev_get(int index) {
    if (index < 0 || index >= g_count) return NULL;
    dev_state *d = &g_dev[index];
    if (__atomic_load_n(&d->ready, __ATOMIC_ACQUIRE)) return d;
    pthread_mutex_lock(&g_init_mu);
    if (!d->ready) {
        cudaSetDevice(index);
        if (weft_cuda_check(cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking), "cuda stream") != WEFT_OK) {
            pthread_mutex_unlock(&g_init_mu);
            return NULL;
        }
        g_actx[index].index = index;
        static char names[WEFT_CUDA_MAX_DEVICES][16];
        snprintf(names[index], sizeof names[index], "cuda:%d", index);
        weft_block_backend b = {.ctx = &g_actx[index],
                                .raw_alloc = raw_alloc,
                                .raw_free = raw_free,
                                .event_record = ev_record,
                                .event_done = ev_done,
                                .event_free = ev_free,
                                .name = names[index]};
        d->alloc = weft_block_alloc_create(&b);
        pthread_mutex_init(&d->mu, NULL);
        if (!d->alloc) {
            cudaStreamDestroy(d->stream);
            pthread_mutex_unlock(&g_init_mu);
            return NULL;
        }
        __atomic_store_n(&d->ready, true, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_init_mu);
    return d;
}

cudaStream_t weft_cuda_stream(int index) {
    dev_state *d = dev_get(index);
    if (!d) return NULL;
    cudaSetDevice(index);
    return tl_stream[index] ? tl_stream[index] : d->stream;
}

void weft_cuda_record_stream(int index, void *p, cudaStream_t s) {
    dev_state *d = dev_get(index);
    if (d) weft_block_alloc_record_stream(d->alloc, p, s);
}

// ---- weft_device_impl ----
static int cu_count(void) { return g_count; }

static void *cu_alloc(int index, size_t n) {
    dev_state *d = dev_get(index);
    return d ? weft_block_alloc_malloc(d->alloc, n, weft_cuda_stream(index)) : NULL;
}
static void cu_free(int index, void *p, size_t n) {
    (void)n;
    dev_state *d = dev_get(index);
    if (d) weft_block_alloc_free(d->alloc, p);
}

// A free pinned buffer of at least n bytes (d->mu held), or NULL.
static staging *stage_get(dev_state *d, size_t n) {
    staging *best = NULL;
    for (int i = 0; i < N_STAGING; i++) {
        staging *s = &d->stage[i];
        if (s->busy && query_done(cudaEventQuery(s->done))) s->busy = false;
        if (!s->busy && s->host && s->size >= n && (!best || s->size < best->size)) best = s;
    }
    if (best) return best;
    for (int i = 0; i < N_STAGING; i++) { // grow an idle slot
        staging *s = &d->stage[i];
        if (s->busy) continue;
        if (s->host) cudaFreeHost(s->host);
        s->host = NULL;
        size_t sz = n < ((size_t)1 << 20) ? ((size_t)1 << 20) : n;
        if (cudaHostAlloc(&s->host, sz, cudaHostAllocDefault) != cudaSuccess) {
            cudaGetLastError();
            s->host = NULL;
            return NULL;
        }
        if (!s->done && cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming) != cudaSuccess) {
            cudaGetLastError();
            s->done = NULL;
            cudaFreeHost(s->host); // no slot without an event (cu_copy would record on NULL)
            s->host = NULL;
            return NULL;
        }
        s->size = sz;
        return s;
    }
    return NULL;
}

static weft_status cu_copy(int index, void *dst, const void *src, size_t n, weft_copy_kind kind) {
    dev_state *d = dev_get(index);
    if (!d) return weft_error(WEFT_ERR_DEVICE, "cuda:%d: device not usable", index);
    if (!n) return WEFT_OK;
    cudaStream_t s = weft_cuda_stream(index);
    switch (kind) {
    case WEFT_COPY_H2D: {
        // Stage through pinned memory so the call returns before the copy runs
        // (the caller may free or reuse src at once).
        if (n <= STAGING_MAX) {
            pthread_mutex_lock(&d->mu);
            staging *st = stage_get(d, n);
            if (st) {
                memcpy(st->host, src, n);
                weft_status r = weft_cuda_check(cudaMemcpyAsync(dst, st->host, n, cudaMemcpyHostToDevice, s),
                                                "copy to cuda");
                if (r == WEFT_OK && cudaEventRecord(st->done, s) != cudaSuccess) {
                    // no event marks the copy's end: wait for it before the buffer is reused
                    r = weft_cuda_check(cudaStreamSynchronize(s), "copy to cuda");
                    cudaGetLastError();
                    st->busy = false;
                } else {
                    st->busy = r == WEFT_OK;
                }
                pthread_mutex_unlock(&d->mu);
                return r;
            }
            pthread_mutex_unlock(&d->mu);
        }
        weft_status r = weft_cuda_check(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s), "copy to cuda");
        return r == WEFT_OK ? weft_cuda_check(cudaStreamSynchronize(s), "copy to cuda") : r;
    }
    case WEFT_COPY_D2H: {
        // The host wants the bytes now: wait for everything queued before.
        weft_status r = weft_cuda_check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s), "copy from cuda");
        return r == WEFT_OK ? weft_cuda_check(cudaStreamSynchronize(s), "copy from cuda") : r;
    }
    case WEFT_COPY_D2D:
        return weft_cuda_check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s), "copy on cuda");
    }
    return weft_error(WEFT_ERR_ARG, "cuda copy: bad kind %d", (int)kind);
}

static weft_status cu_memset(int index, void *p, int v, size_t n) {
    cudaStream_t s = weft_cuda_stream(index);
    if (!s) return weft_error(WEFT_ERR_DEVICE, "cuda:%d: device not usable", index);
    return n ? weft_cuda_check(cudaMemsetAsync(p, v, n, s), "memset on cuda") : WEFT_OK;
}

static weft_status cu_sync(int index) {
    if (!dev_get(index)) return weft_error(WEFT_ERR_DEVICE, "cuda:%d: device not usable", index);
    cudaSetDevice(index);
    return weft_cuda_check(cudaDeviceSynchronize(), "cuda synchronize");
}

// Stream and event handles remember their device (cudaSetDevice before use).
typedef struct cu_stream {
    int index;
    cudaStream_t s;
} cu_stream;
typedef struct cu_event {
    int index;
    cudaEvent_t e;
} cu_event;

static void *cu_stream_create(int index) {
    if (!dev_get(index)) return NULL;
    cu_stream *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->index = index;
    cudaSetDevice(index);
    if (cudaStreamCreateWithFlags(&h->s, cudaStreamNonBlocking) != cudaSuccess) {
        cudaGetLastError();
        free(h);
        return NULL;
    }
    return h;
}
static void cu_stream_destroy(void *p) {
    cu_stream *h = p;
    if (tl_stream[h->index] == h->s) tl_stream[h->index] = NULL;
    cudaStreamDestroy(h->s);
    free(h);
}
static weft_status cu_stream_sync(void *p) {
    return weft_cuda_check(cudaStreamSynchronize(((cu_stream *)p)->s), "stream synchronize");
}
static bool cu_stream_query(void *p) { return query_done(cudaStreamQuery(((cu_stream *)p)->s)); }
static weft_status cu_stream_set_current(int index, void *p) {
    if (!dev_get(index)) return weft_error(WEFT_ERR_DEVICE, "cuda:%d: device not usable", index);
    tl_stream[index] = p ? ((cu_stream *)p)->s : NULL;
    return WEFT_OK;
}

static void *cu_event_create(int index) {
    if (!dev_get(index)) return NULL;
    cu_event *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->index = index;
    cudaSetDevice(index);
    if (cudaEventCreateWithFlags(&h->e, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        free(h);
        return NULL;
    }
    return h;
}
static void cu_event_destroy(void *p) {
    cudaEventDestroy(((cu_event *)p)->e);
    free(p);
}
static weft_status cu_event_record(void *e, void *s) {
    return weft_cuda_check(cudaEventRecord(((cu_event *)e)->e, ((cu_stream *)s)->s), "event record");
}
static weft_status cu_event_block(void *e, void *s) {
    return weft_cuda_check(cudaStreamWaitEvent(((cu_stream *)s)->s, ((cu_event *)e)->e, 0), "event block");
}
static bool cu_event_query(void *e) { return query_done(cudaEventQuery(((cu_event *)e)->e)); }
static weft_status cu_event_sync(void *e) {
    return weft_cuda_check(cudaEventSynchronize(((cu_event *)e)->e), "event synchronize");
}

static void cu_stats(int index, weft_memory_stats *out) {
    dev_state *d = dev_get(index);
    if (d) weft_block_alloc_stats(d->alloc, out);
    else memset(out, 0, sizeof *out);
}
static void cu_reset_peak(int index) {
    dev_state *d = dev_get(index);
    if (d) weft_block_alloc_reset_peak(d->alloc);
}
static void cu_empty_cache(int index) {
    dev_state *d = dev_get(index);
    if (d) weft_block_alloc_empty_cache(d->alloc);
}

// Page-locked host memory, portable (usable with every device of the process).
static void *cu_host_alloc(size_t n) {
    void *p = NULL;
    if (cudaHostAlloc(&p, n, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}
static void cu_host_free(void *p) {
    if (cudaFreeHost(p) != cudaSuccess) cudaGetLastError();
}

static const weft_device_impl k_cuda_impl = {
    .name = "cuda",
    .count = cu_count,
    .alloc = cu_alloc,
    .free = cu_free,
    .copy = cu_copy,
    .memset = cu_memset,
    .synchronize = cu_sync,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .stream_synchronize = cu_stream_sync,
    .stream_query = cu_stream_query,
    .stream_set_current = cu_stream_set_current,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .event_block = cu_event_block,
    .event_query = cu_event_query,
    .event_synchronize = cu_event_sync,
    .memory_stats = cu_stats,
    .memory_reset_peak = cu_reset_peak,
    .memory_empty_cache = cu_empty_cache,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
};

void weft_cuda_backend_init(void) {
    // The kernels go into the op table whether or not a GPU is present: no
    // CUDA tensor can exist without one, and a GPU-less build machine can
    // still check that the table is complete (tests/cuda/test_cuda_table.c).
    weft_cuda_register_kernels();
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        cudaGetLastError();
        if (e != cudaSuccess) snprintf(g_reason, sizeof g_reason, "no usable GPU: cudaGetDeviceCount says: %s", cudaGetErrorString(e));
        else snprintf(g_reason, sizeof g_reason, "no CUDA device");
        g_count = 0;
        return;
    }
    g_count = n < WEFT_CUDA_MAX_DEVICES ? n : WEFT_CUDA_MAX_DEVICES;
    weft_device_register(WEFT_CUDA, &k_cuda_impl);
}
