// weft/device.h — devices, streams, events and memory statistics.
//
// Callers only see weft_device values and opaque streams/events; each device
// type implements weft_device_impl (src/device/) so CUDA plugs in without
// changes to callers.
#ifndef WEFT_DEVICE_H
#define WEFT_DEVICE_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_stream weft_stream;
typedef struct weft_event weft_event;

// Parse "cpu", "cuda", "cuda:1". Returns WEFT_ERR_ARG on a bad string.
weft_status weft_device_parse(const char *s, weft_device *out);
// Writes e.g. "cuda:1" into buf.
const char *weft_device_str(weft_device d, char *buf, size_t n);
bool weft_device_equal(weft_device a, weft_device b);
// Number of devices of a type (cpu: 1; cuda: 0 when not built or no GPU).
int weft_device_count(weft_device_type t);
bool weft_device_available(weft_device d);
// Default device for new tensors (cpu unless set).
weft_device weft_device_get_default(void);
weft_status weft_device_set_default(weft_device d);
// Wait until all work queued on the device is done.
weft_status weft_device_synchronize(weft_device d);

// Raw device memory (mostly for backends and tests; tensors manage their own).
void *weft_device_alloc(weft_device d, size_t nbytes);
void weft_device_free(weft_device d, void *p, size_t nbytes);
// Copy nbytes between any two devices (host<->device<->device).
weft_status weft_device_copy(weft_device dst_dev, void *dst, weft_device src_dev, const void *src, size_t nbytes);
weft_status weft_device_memset(weft_device d, void *p, int value, size_t nbytes);

// Streams order work on a device; events mark points in a stream.
weft_stream *weft_stream_create(weft_device d);
void weft_stream_destroy(weft_stream *s);
weft_status weft_stream_synchronize(weft_stream *s);
bool weft_stream_query(weft_stream *s); // true when all queued work is done
// Ops the calling thread runs on device d from now on are queued on s (NULL:
// the device's default stream). Work on the CPU ignores it (one stream).
weft_status weft_stream_set_current(weft_device d, weft_stream *s);
weft_event *weft_event_create(weft_device d);
void weft_event_destroy(weft_event *e);
weft_status weft_event_record(weft_event *e, weft_stream *s);
weft_status weft_event_block(weft_event *e, weft_stream *s); // s waits for e
bool weft_event_query(weft_event *e);
weft_status weft_event_synchronize(weft_event *e);

// What a block of device memory holds, for the per-kind statistics below.
// Every block starts as WEFT_MEM_ACTIVATIONS; weft tags the others where it
// makes them: module parameters and buffers (weft_module_add_param /
// _add_buffer, weft_module_to_dtype), the gradients autograd leaves in .grad
// (and weft_tensor_set_grad), and the state weft_optim_create makes.
typedef enum weft_memory_kind {
    WEFT_MEM_ACTIVATIONS = 0, // everything else: activations, temporaries, inputs, outputs
    WEFT_MEM_PARAMETERS,
    WEFT_MEM_GRADIENTS,
    WEFT_MEM_OPTIMIZER,
    WEFT_MEM_NUM_KINDS
} weft_memory_kind;

// Allocator statistics for one device. Sizes are of the allocator's blocks
// (requests rounded up to its size classes).
typedef struct weft_memory_stats {
    size_t bytes_in_use;      // held by live tensors
    size_t bytes_cached;      // freed blocks kept for reuse
    size_t peak_bytes_in_use; // max of bytes_in_use since the last reset
    uint64_t n_system_allocs; // calls to the system allocator (malloc/cudaMalloc)
    uint64_t n_system_frees;
    uint64_t n_allocs;        // allocation requests
    uint64_t n_cache_hits;    // requests served from the cache
    // bytes_in_use by weft_memory_kind (they add up to it), and the max of
    // each since the last reset (each kind's own peak, not their shares at
    // the moment of peak_bytes_in_use).
    size_t kind_in_use[WEFT_MEM_NUM_KINDS];
    size_t kind_peak[WEFT_MEM_NUM_KINDS];
} weft_memory_stats;

weft_status weft_memory_stats_get(weft_device d, weft_memory_stats *out);
void weft_memory_reset_peak(weft_device d);
// Count the live block at p (a pointer weft_device_alloc returned on d) as
// kind from now on. WEFT_ERR_ARG for a bad kind. Where the allocator can tell
// (CUDA), a pointer that is not one of its live blocks is left alone; on a
// device whose allocator keeps no kinds this does nothing.
weft_status weft_memory_tag(weft_device d, void *p, weft_memory_kind kind);
// "activations", "parameters", "gradients", "optimizer" (NULL for a bad kind).
const char *weft_memory_kind_name(weft_memory_kind kind);
// Return all cached blocks to the system.
void weft_memory_empty_cache(weft_device d);

#ifdef __cplusplus
}
#endif
#endif
