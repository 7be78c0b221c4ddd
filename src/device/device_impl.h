// What a device type implements. Callers use weft/device.h; the CPU backend
// lives in cpu.c, and a CUDA backend registers its own table the same way.
#ifndef WEFT_DEVICE_IMPL_H
#define WEFT_DEVICE_IMPL_H

#include <weft/device.h>

typedef enum { WEFT_COPY_H2D, WEFT_COPY_D2H, WEFT_COPY_D2D } weft_copy_kind;

typedef struct weft_device_impl {
    const char *name; // "cpu", "cuda"
    int (*count)(void);
    // Memory through the device's (caching) allocator; NULL on exhaustion.
    void *(*alloc)(int index, size_t nbytes);
    void (*free)(int index, void *p, size_t nbytes);
    // Copy between host memory and this device's memory (or within the device).
    weft_status (*copy)(int index, void *dst, const void *src, size_t nbytes, weft_copy_kind kind);
    weft_status (*memset)(int index, void *p, int value, size_t nbytes);
    weft_status (*synchronize)(int index);
    // Streams and events as opaque handles.
    void *(*stream_create)(int index);
    void (*stream_destroy)(void *s);
    weft_status (*stream_synchronize)(void *s);
    bool (*stream_query)(void *s);
    // Make s (NULL: the device's default) the calling thread's current stream
    // for work on device `index`. NULL member: the device has one stream.
    weft_status (*stream_set_current)(int index, void *s);
    void *(*event_create)(int index);
    void (*event_destroy)(void *e);
    weft_status (*event_record)(void *e, void *s);
    weft_status (*event_block)(void *e, void *s);
    bool (*event_query)(void *e);
    weft_status (*event_synchronize)(void *e);
    // Allocator statistics.
    void (*memory_stats)(int index, weft_memory_stats *out);
    void (*memory_reset_peak)(int index);
    void (*memory_empty_cache)(int index);
    // Count the live block p as kind (weft_memory_tag); NULL: the allocator keeps no kinds.
    weft_status (*memory_tag)(int index, void *p, weft_memory_kind kind);
    // ---- page-locked host memory (distributed staging) ----
    // Host memory the device copies to and from by DMA (CUDA: cudaHostAlloc):
    // the parameter server stages device gradients and parameters through it.
    // NULL members (the CPU): plain malloc/free serve.
    void *(*host_alloc)(size_t nbytes);
    void (*host_free)(void *p);
    // ---- graph capture (CUDA Graphs); all NULL where the device has none (the CPU) ----
    // Record, instead of running, the work the calling thread queues on its
    // current stream of device `index` until capture_end. While recording,
    // device memory that is allocated or freed on that device stays reserved
    // for the captured graph (a replay writes where the recorded kernels
    // did), and copies between host and device memory fail (a replay would
    // not redo the host's part): a step that needs the host cannot be captured.
    weft_status (*capture_begin)(int index);
    // Stop recording. keep: *graph = what was recorded, ready to launch (an
    // opaque handle). !keep, or an error (something in the recording failed,
    // e.g. a kernel waited for the device): nothing is kept, *graph = NULL.
    weft_status (*capture_end)(int index, bool keep, void **graph);
    // Queue one run of a captured graph on the calling thread's current stream.
    weft_status (*graph_launch)(int index, void *graph);
    // Release a captured graph and the memory it reserved, once its runs are done.
    void (*graph_destroy)(int index, void *graph);
} weft_device_impl;

// A backend installs itself here (the CPU one is built in).
weft_status weft_device_register(weft_device_type t, const weft_device_impl *impl);
const weft_device_impl *weft_device_impl_get(weft_device d); // NULL + error when unavailable

// Host memory for staging copies to and from device d: page-locked where d's
// backend has it, else malloc. NULL + error on exhaustion or a missing device.
// Free with weft_device_host_free on the same device (NULL is fine).
void *weft_device_host_alloc(weft_device d, size_t nbytes);
void weft_device_host_free(weft_device d, void *p);

extern const weft_device_impl weft_cpu_device_impl;

// Graph capture through the registry (the members above): can_capture is
// false where the device has no capture (then the others fail naming it).
// Used by the graph executor (src/graph/capture.c).
bool weft_device_can_capture(weft_device d);
weft_status weft_device_capture_begin(weft_device d);
weft_status weft_device_capture_end(weft_device d, bool keep, void **graph);
weft_status weft_device_graph_launch(weft_device d, void *graph);
void weft_device_graph_destroy(weft_device d, void *graph);

#ifdef WEFT_HAVE_CUDA
// src/device/cuda/cuda_device.c: run once before the registry is first used.
void weft_cuda_backend_init(void);
const char *weft_cuda_unavailable_reason(void);
#endif

// CPU caching allocator (cpu_alloc.c).
void *weft_cpu_alloc(size_t nbytes);
void weft_cpu_free(void *p);
void weft_cpu_memory_stats(weft_memory_stats *out);
void weft_cpu_memory_reset_peak(void);
void weft_cpu_memory_empty_cache(void);
void weft_cpu_memory_tag(void *p, weft_memory_kind kind);

// Per-kind accounting shared by the allocators: n bytes of kind come into use
// (kind_in), or leave it (kind_out); peaks follow.
static inline void weft_mem_kind_in(weft_memory_stats *st, int kind, size_t n) {
    st->kind_in_use[kind] += n;
    if (st->kind_in_use[kind] > st->kind_peak[kind]) st->kind_peak[kind] = st->kind_in_use[kind];
}
static inline void weft_mem_kind_out(weft_memory_stats *st, int kind, size_t n) { st->kind_in_use[kind] -= n; }
static inline void weft_mem_kind_reset_peaks(weft_memory_stats *st) {
    for (int k = 0; k < WEFT_MEM_NUM_KINDS; k++) st->kind_peak[k] = st->kind_in_use[k];
}

#endif
