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
    pthread_mutex_t mu; // staging buffers, the report record's reads
    staging stage[N_STAGING];
    weft_cuda_report *report; // device memory: the kernels' report of bad input (cuda_report.h)
    unsigned int *seen;       // pinned: a copy of report->ready, brought over with each wait
} dev_state;

static int g_count;
static char g_reason[160];
static dev_state g_dev[WEFT_CUDA_MAX_DEVICES];
static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local cudaStream_t tl_stream[WEFT_CUDA_MAX_DEVICES]; // NULL: the device's default

// Graph capture (the capture members of weft_device_impl; see "graph capture" below).
typedef struct cu_capture cu_capture;
static _Thread_local cu_capture *tl_cap; // this thread's recording, NULL: none
static bool capture_track_alloc(int index, void *p);
static bool capture_hold_free(int index, void *p);
static weft_status capture_refuses(int index, const char *what);
static bool capture_on(int index);

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
        // the report record, cleared (a device without one still works: its kernels report nothing).
        // cudaMemset runs on the legacy stream, which d->stream (non-blocking) does not wait for: wait
        // for the clear here, or a first kernel could claim the record before it or read garbage.
        if (cudaMalloc((void **)&d->report, sizeof *d->report) != cudaSuccess ||
            cudaMemset(d->report, 0, sizeof *d->report) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess ||
            cudaHostAlloc((void **)&d->seen, sizeof *d->seen, cudaHostAllocDefault) != cudaSuccess) {
            cudaGetLastError();
            if (d->report) cudaFree(d->report);
            d->report = NULL, d->seen = NULL;
        } else {
            *d->seen = 0;
        }
        if (!d->alloc) {
            // the device stays not ready and the next dev_get sets it up again: free the report record
            // made above, or every retry leaks a device and a pinned allocation
            if (d->report) cudaFree(d->report);
            if (d->seen) cudaFreeHost(d->seen);
            d->report = NULL, d->seen = NULL;
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

void weft_cuda_forget_stream(int index, cudaStream_t s) {
    dev_state *d = dev_get(index);
    if (d) weft_block_alloc_forget_stream(d->alloc, s);
}

// ---- weft_device_impl ----
// ---- the kernels' reports of bad input (cuda_report.h) ----
weft_cuda_report *weft_cuda_report_slot(int index) {
    dev_state *d = dev_get(index);
    return d ? d->report : NULL;
}

// Before a wait for stream s: queue a copy of the record's ready word behind
// s's work, so the wait also brings it over (no second wait).
static void report_peek(dev_state *d, cudaStream_t s) {
    if (d->seen && cudaMemcpyAsync(d->seen, &d->report->ready, sizeof *d->seen, cudaMemcpyDeviceToHost, s) != cudaSuccess)
        cudaGetLastError();
}

// The record as an error (and cleared), or WEFT_OK when there is none.
static weft_status report_fetch(int index, dev_state *d) {
    weft_cuda_report r = {0};
    cudaStream_t s = weft_cuda_stream(index);
    pthread_mutex_lock(&d->mu);
    cudaError_t e = cudaMemcpyAsync(&r, d->report, sizeof r, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e == cudaSuccess && r.ready) e = cudaMemsetAsync(d->report, 0, sizeof *d->report, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    __atomic_store_n(d->seen, 0u, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&d->mu);
    if (e != cudaSuccess) return weft_cuda_check(e, "reading the device's report");
    if (!r.ready) return WEFT_OK; // another thread took it
    const char *op = r.what ? (const char *)(uintptr_t)r.what : "a kernel";
    if (r.kind == WEFT_CUDA_REPORT_INDEX)
        return weft_error(WEFT_ERR_ARG,
                          "%s: index %lld is out of range for a dim of size %lld (element %lld of the index; found on "
                          "cuda:%d, reported at the next wait for the device)",
                          op, r.value, r.limit, r.pos, index);
    if (r.kind == WEFT_CUDA_REPORT_TARGET)
        return weft_error(WEFT_ERR_ARG,
                          "%s: target %lld of row %lld is out of range [0, %lld) (found on cuda:%d, reported at the "
                          "next wait for the device)",
                          op, r.value, r.pos, r.limit, index);
    return weft_error(WEFT_ERR_ARG, "%s: bad input found on cuda:%d (report kind %lld)", op, index, r.kind);
}

// After a wait that returned st: the report the wait brought over, if any.
// Not while this thread records on the device (a wait for another stream,
// cu_stream_sync): report_fetch's copy and wait on the current stream, the
// capturing one, would end the capture; a later wait takes the report.
static weft_status report_take(int index, dev_state *d, weft_status st) {
    if (st != WEFT_OK || !d->seen || !__atomic_load_n(d->seen, __ATOMIC_ACQUIRE)) return st;
    if (capture_on(index)) return st;
    return report_fetch(index, d);
}

weft_status weft_cuda_report_poll(int index) {
    dev_state *d = dev_get(index);
    if (!d || !d->seen) return WEFT_OK;
    cudaStream_t s = weft_cuda_stream(index);
    report_peek(d, s);
    return report_take(index, d, weft_cuda_check(cudaStreamSynchronize(s), "cuda synchronize"));
}

static int cu_count(void) { return g_count; }

static void *cu_alloc(int index, size_t n) {
    dev_state *d = dev_get(index);
    void *p = d ? weft_block_alloc_malloc(d->alloc, n, weft_cuda_stream(index)) : NULL;
    if (p && !capture_track_alloc(index, p)) { // recording, and no room to remember p: fail the allocation
        weft_block_alloc_free(d->alloc, p);
        return NULL;
    }
    return p;
}
static void cu_free(int index, void *p, size_t n) {
    (void)n;
    dev_state *d = dev_get(index);
    if (d && p && !capture_hold_free(index, p)) weft_block_alloc_free(d->alloc, p);
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
    if (kind != WEFT_COPY_D2D && capture_refuses(index, "a copy between host and device memory") != WEFT_OK)
        return weft_last_status();
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
        // The host wants the bytes now: wait for everything queued before (and
        // bring over whether a kernel reported bad input: then the copy fails with it).
        weft_status r = weft_cuda_check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s), "copy from cuda");
        if (r == WEFT_OK) report_peek(d, s);
        return report_take(index, d, r == WEFT_OK ? weft_cuda_check(cudaStreamSynchronize(s), "copy from cuda") : r);
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
    dev_state *d = dev_get(index);
    if (!d) return weft_error(WEFT_ERR_DEVICE, "cuda:%d: device not usable", index);
    if (capture_refuses(index, "waiting for the device") != WEFT_OK) return weft_last_status();
    cudaSetDevice(index);
    weft_status st = weft_cuda_check(cudaDeviceSynchronize(), "cuda synchronize");
    // every stream has finished: read the record behind all of them (one small copy and wait)
    return st == WEFT_OK ? weft_cuda_report_poll(index) : st;
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
    cu_stream *h = p;
    dev_state *d = dev_get(h->index);
    if (d) report_peek(d, h->s);
    weft_status st = weft_cuda_check(cudaStreamSynchronize(h->s), "stream synchronize");
    return d ? report_take(h->index, d, st) : st;
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
static weft_status cu_tag(int index, void *p, weft_memory_kind kind) {
    dev_state *d = dev_get(index);
    if (d) weft_block_alloc_tag(d->alloc, p, kind); // memory it does not know stays as it is
    return WEFT_OK;
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

// ---- graph capture (CUDA Graphs) ----
// capture_begin puts the calling thread's current stream into capture mode
// (relaxed, so the caching allocator may still cudaMalloc); kernels queued
// there are recorded, not run. A replay writes and reads exactly the
// addresses the recorded kernels saw, so that memory must not go to anyone
// else while the graph exists:
// - memory freed on the device by the recording thread while it records is
//   held back (rec->freed) and released when the graph is destroyed (or at
//   capture_end when nothing is kept: the recorded work never ran);
// - memory allocated while recording (rec->made; a kernel's temporaries, an
//   op's output) belongs to its owner as usual, but when the owner frees it
//   while the graph exists, the free is held back too (capture_hold_free)
//   and done when the graph is destroyed.
// Copies between host and device memory and device-wide waits fail while
// recording (capture_refuses): a replay would not redo their host side, so
// a step that needs them cannot be captured; CUDA itself rejects a stream
// synchronisation in a capture (the capture then ends invalidated).
typedef struct ptrvec {
    void **p;
    size_t n, cap;
} ptrvec;

static bool pv_push(ptrvec *v, void *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 64;
        void **q = realloc(v->p, cap * sizeof *q);
        if (!q) return false;
        v->p = q, v->cap = cap;
    }
    v->p[v->n++] = x;
    return true;
}

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

struct cu_capture {
    int index;
    cudaStream_t s;
    ptrvec made, freed;
    bool broken; // a free could not be held back: the capture must not be kept
};

typedef struct cu_graph {
    int index;
    cudaGraphExec_t exec;
    cudaStream_t last; // stream of the last launch
    bool launched, many_streams;
    ptrvec hold;        // released at destroy
    void **made;        // [n_made] sorted: allocated while recording, still owned elsewhere
    uint8_t *made_freed; // [n_made] its owner freed it since (released at destroy)
    size_t n_made;
    struct cu_graph *next;
} cu_graph;

static pthread_mutex_t g_graph_mu = PTHREAD_MUTEX_INITIALIZER; // g_graphs and every made_freed
static cu_graph *g_graphs[WEFT_CUDA_MAX_DEVICES];             // live graphs per device
static int g_n_graphs[WEFT_CUDA_MAX_DEVICES];                 // their count (read without the lock)

static weft_status capture_refuses(int index, const char *what) {
    cu_capture *c = tl_cap;
    if (!c || c->index != index) return WEFT_OK;
    return weft_error(WEFT_ERR_STATE, "cuda:%d: %s cannot be captured in a CUDA graph (a replay would skip it)",
                      index, what);
}

// True while this thread records a graph on device index.
static bool capture_on(int index) { return tl_cap && tl_cap->index == index; }

static bool capture_track_alloc(int index, void *p) {
    cu_capture *c = tl_cap;
    return !c || c->index != index || pv_push(&c->made, p);
}

// True when the free of p is held back (recording, or p belongs to a live graph).
static bool capture_hold_free(int index, void *p) {
    cu_capture *c = tl_cap;
    if (c && c->index == index) {
        if (pv_push(&c->freed, p)) return true;
        c->broken = true; // no room to hold it: free it now and fail the capture
        return false;
    }
    if (__atomic_load_n(&g_n_graphs[index], __ATOMIC_ACQUIRE) == 0) return false;
    bool held = false;
    pthread_mutex_lock(&g_graph_mu);
    for (cu_graph *g = g_graphs[index]; g && !held; g = g->next) {
        void **at = g->n_made ? bsearch(&p, g->made, g->n_made, sizeof *g->made, cmp_ptr) : NULL;
        if (at && !g->made_freed[at - g->made]) g->made_freed[at - g->made] = 1, held = true;
    }
    pthread_mutex_unlock(&g_graph_mu);
    return held;
}

static weft_status cu_capture_begin(int index) {
    if (!dev_get(index)) return weft_error(WEFT_ERR_DEVICE, "cuda:%d: device not usable", index);
    if (tl_cap) return weft_error(WEFT_ERR_STATE, "cuda:%d: this thread is already recording a graph", index);
    cu_capture *c = calloc(1, sizeof *c);
    if (!c) return weft_error(WEFT_ERR_OOM, "cuda graph capture: out of memory");
    c->index = index;
    c->s = weft_cuda_stream(index);
    weft_status st = weft_cuda_check(cudaStreamBeginCapture(c->s, cudaStreamCaptureModeRelaxed), "cuda graph capture");
    if (st != WEFT_OK) {
        free(c);
        return st;
    }
    tl_cap = c;
    return WEFT_OK;
}

static void release_all(int index, void **p, size_t n) {
    dev_state *d = dev_get(index);
    for (size_t i = 0; d && i < n; i++) weft_block_alloc_free(d->alloc, p[i]);
}

// The graph of recording c (instantiated), its memory bookkeeping moved in; NULL + error.
static cu_graph *graph_make(cu_capture *c, cudaGraph_t cg) {
    cu_graph *g = calloc(1, sizeof *g);
    if (!g) return weft_error_null(WEFT_ERR_OOM, "cuda graph capture: out of memory");
    g->index = c->index;
    if (c->freed.n) qsort(c->freed.p, c->freed.n, sizeof *c->freed.p, cmp_ptr); // p is NULL when empty
    g->made = malloc((c->made.n + 1) * sizeof *g->made);
    g->made_freed = calloc(c->made.n + 1, 1);
    if (!g->made || !g->made_freed) {
        free(g->made);
        free(g->made_freed);
        free(g);
        return weft_error_null(WEFT_ERR_OOM, "cuda graph capture: out of memory");
    }
    for (size_t i = 0; i < c->made.n; i++) // made and freed while recording: already in hold
        if (!(c->freed.n && bsearch(&c->made.p[i], c->freed.p, c->freed.n, sizeof *c->freed.p, cmp_ptr)))
            g->made[g->n_made++] = c->made.p[i];
    qsort(g->made, g->n_made, sizeof *g->made, cmp_ptr);
    // A library may allocate stream-ordered memory inside the capture (since
    // CUDA 12.2 cuBLAS is said to take its workspace with cudaMallocAsync; as
    // PyTorch, instantiate for that): an allocation the graph leaves unfreed
    // makes the next launch fail with cudaErrorInvalidValue, unless the graph
    // is instantiated to free it before relaunching. Harmless otherwise.
    cudaError_t e = cudaGraphInstantiate(&g->exec, cg, cudaGraphInstantiateFlagAutoFreeOnLaunch);
    if (e != cudaSuccess) {
        weft_cuda_check(e, "cuda graph instantiate");
        free(g->made);
        free(g->made_freed);
        free(g);
        return NULL;
    }
    g->hold = c->freed;
    c->freed = (ptrvec){0};
    pthread_mutex_lock(&g_graph_mu);
    g->next = g_graphs[g->index];
    g_graphs[g->index] = g;
    __atomic_add_fetch(&g_n_graphs[g->index], 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_graph_mu);
    return g;
}

static weft_status cu_capture_end(int index, bool keep, void **graph) {
    *graph = NULL;
    cu_capture *c = tl_cap;
    if (!c || c->index != index) return weft_error(WEFT_ERR_STATE, "cuda:%d: this thread is not recording a graph", index);
    tl_cap = NULL;
    cudaGraph_t cg = NULL;
    cudaError_t e = cudaStreamEndCapture(c->s, &cg);
    weft_status st = WEFT_OK;
    if (e != cudaSuccess || !cg)
        st = weft_cuda_check(e != cudaSuccess ? e : cudaErrorStreamCaptureInvalidated, "cuda graph capture");
    else if (c->broken)
        st = weft_error(WEFT_ERR_OOM, "cuda graph capture: out of host memory holding the graph's device memory");
    cu_graph *g = st == WEFT_OK && keep ? graph_make(c, cg) : NULL;
    if (st == WEFT_OK && keep && !g) st = weft_last_status();
    if (cg) cudaGraphDestroy(cg);
    cudaGetLastError(); // an invalidated capture leaves its error behind
    release_all(index, c->freed.p, c->freed.n); // nothing kept them (empty when g took them)
    free(c->freed.p);
    free(c->made.p);
    free(c);
    *graph = g;
    return st;
}

static weft_status cu_graph_launch(int index, void *h) {
    cu_graph *g = h;
    if (tl_cap) return weft_error(WEFT_ERR_STATE, "cuda:%d: launching a captured graph while recording one", index);
    cudaStream_t s = weft_cuda_stream(index);
    if (!s) return weft_error(WEFT_ERR_DEVICE, "cuda:%d: device not usable", index);
    weft_status st = weft_cuda_check(cudaGraphLaunch(g->exec, s), "cuda graph launch");
    if (st == WEFT_OK) {
        if (g->launched && g->last != s) g->many_streams = true;
        g->last = s, g->launched = true;
    }
    return st;
}

static void cu_graph_destroy(int index, void *h) {
    cu_graph *g = h;
    pthread_mutex_lock(&g_graph_mu);
    for (cu_graph **pp = &g_graphs[index]; *pp; pp = &(*pp)->next)
        if (*pp == g) {
            *pp = g->next;
            __atomic_sub_fetch(&g_n_graphs[index], 1, __ATOMIC_RELEASE);
            break;
        }
    pthread_mutex_unlock(&g_graph_mu);
    // Its last run must be over before the memory it held goes back.
    cudaSetDevice(index);
    if (g->launched) {
        if (g->many_streams) cudaDeviceSynchronize();
        else cudaStreamSynchronize(g->last);
        cudaGetLastError();
    }
    cudaGraphExecDestroy(g->exec);
    release_all(index, g->hold.p, g->hold.n);
    for (size_t i = 0; i < g->n_made; i++)
        if (g->made_freed[i]) release_all(index, &g->made[i], 1);
    free(g->hold.p);
    free(g->made);
    free(g->made_freed);
    free(g);
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
    .memory_tag = cu_tag,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .capture_begin = cu_capture_begin,
    .capture_end = cu_capture_end,
    .graph_launch = cu_graph_launch,
    .graph_destroy = cu_graph_destroy,
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
