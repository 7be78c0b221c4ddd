// The CPU device: memory from the caching allocator; work runs synchronously
// on the calling thread (plus kernel threads), so streams and events are
// already complete when created.
#include <stdlib.h>
#include <string.h>

#include "../core/core_impl.h"
#include "device_impl.h"

static int cpu_count(void) { return 1; }
static void *cpu_alloc(int index, size_t n) {
    (void)index;
    return weft_cpu_alloc(n);
}
static void cpu_free(int index, void *p, size_t n) {
    (void)index;
    (void)n;
    weft_cpu_free(p);
}
static weft_status cpu_copy(int index, void *dst, const void *src, size_t n, weft_copy_kind kind) {
    (void)index;
    (void)kind;
    if (n) memmove(dst, src, n);
    return WEFT_OK;
}
static weft_status cpu_memset(int index, void *p, int v, size_t n) {
    (void)index;
    if (n) memset(p, v, n);
    return WEFT_OK;
}
static weft_status cpu_sync(int index) {
    (void)index;
    return WEFT_OK;
}

// Streams and events carry a recorded flag so the API behaves like CUDA's.
typedef struct cpu_event {
    int recorded;
} cpu_event;
static void *cpu_stream_create(int index) {
    (void)index;
    return calloc(1, 1);
}
static void cpu_stream_destroy(void *s) { free(s); }
static weft_status cpu_stream_sync(void *s) {
    (void)s;
    return WEFT_OK;
}
static bool cpu_stream_query(void *s) {
    (void)s;
    return true;
}
static void *cpu_event_create(int index) {
    (void)index;
    return calloc(1, sizeof(cpu_event));
}
static void cpu_event_destroy(void *e) { free(e); }
static weft_status cpu_event_record(void *e, void *s) {
    (void)s;
    ((cpu_event *)e)->recorded = 1;
    return WEFT_OK;
}
static weft_status cpu_event_block(void *e, void *s) {
    (void)e;
    (void)s;
    return WEFT_OK;
}
static bool cpu_event_query(void *e) {
    (void)e;
    return true;
}
static weft_status cpu_event_sync(void *e) {
    (void)e;
    return WEFT_OK;
}
static void cpu_stats(int index, weft_memory_stats *out) {
    (void)index;
    weft_cpu_memory_stats(out);
}
static void cpu_reset_peak(int index) {
    (void)index;
    weft_cpu_memory_reset_peak();
}
static weft_status cpu_tag(int index, void *p, weft_memory_kind kind) {
    (void)index;
    weft_cpu_memory_tag(p, kind);
    return WEFT_OK;
}
static void cpu_empty_cache(int index) {
    (void)index;
    weft_cpu_memory_empty_cache();
}

const weft_device_impl weft_cpu_device_impl = {
    .name = "cpu",
    .count = cpu_count,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .memset = cpu_memset,
    .synchronize = cpu_sync,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_synchronize = cpu_stream_sync,
    .stream_query = cpu_stream_query,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_block = cpu_event_block,
    .event_query = cpu_event_query,
    .event_synchronize = cpu_event_sync,
    .memory_stats = cpu_stats,
    .memory_reset_peak = cpu_reset_peak,
    .memory_empty_cache = cpu_empty_cache,
    .memory_tag = cpu_tag,
};
