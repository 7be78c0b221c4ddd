// A device-agnostic caching allocator: PyTorch's CUDACachingAllocator in
// plain C. A backend (the CUDA device code) supplies raw alloc/free of device
// memory and, optionally, events; this file knows nothing about CUDA, so it is
// tested on the CPU with a malloc-backed fake backend.
//
// Device memory is taken from the backend in segments and cut into blocks:
//
//   segment: one raw_alloc, owned by one stream and one pool
//   +-----------+--------------+-------------------+----------------------+
//   | live 4 MB | free 2 MB    | live 6 MB         | free 8 MB            |
//   +-----------+--------------+-------------------+----------------------+
//    block <---> block <-------> block <------------> block   (prev/next, by address)
//
// - Requests round up to multiples of 512 bytes (0 -> 512).
// - Small pool: requests <= 1 MiB, carved out of 2 MiB segments.
//   Large pool: requests < 10 MiB get a 20 MiB segment, bigger ones a segment
//   of the request rounded up to a multiple of 2 MiB.
// - Free blocks are kept per pool sorted by (stream, size, address): a request
//   takes the smallest free block of its pool and stream that fits (ties: the
//   lowest address), found by binary search. A block freed on one stream is
//   never handed to another: work queued on its old stream may still use it.
// - The block taken is split when the remainder is splittable (small pool:
//   >= 512 bytes, i.e. always; large pool: > 1 MiB), so a request never holds
//   more than 1 MiB beyond its rounded size (weft_block_alloc_size says how much).
// - A freed block merges with its free neighbours in the segment; a segment
//   whose blocks are all free is one block again and can go back to the
//   backend (empty_cache, or when a raw_alloc fails).
// - record_stream: memory also used on other streams gets an event on each of
//   them when freed, and is reused only once all those events are done.
//
// Thread safety: one mutex per allocator, held across every backend call too
// (raw_alloc, raw_free, events) for simplicity, as PyTorch does; so a backend
// callback must never call back into the same allocator.
#ifndef WEFT_BLOCK_ALLOC_H
#define WEFT_BLOCK_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <weft/device.h>

typedef struct weft_block_backend {
    void *ctx;
    // Device memory: NULL when the device is out of memory (no weft_error needed).
    void *(*raw_alloc)(void *ctx, size_t nbytes);
    void (*raw_free)(void *ctx, void *p, size_t nbytes);
    // Optional, all three or none: events for blocks used on streams other than
    // the one they were allocated on. event_record records a new event on stream
    // and returns it; if it returns NULL the block is never reused (it stays
    // pending until destroy) rather than risk handing out memory still in use.
    void *(*event_record)(void *ctx, void *stream);
    bool (*event_done)(void *ctx, void *event);
    void (*event_free)(void *ctx, void *event);
    const char *name; // "cuda:0", copied; used in error messages
} weft_block_backend;

typedef struct weft_block_alloc weft_block_alloc;

// NULL + WEFT_ERR_ARG when b or its raw_alloc/raw_free is missing.
weft_block_alloc *weft_block_alloc_create(const weft_block_backend *b);
// Returns every segment to the backend, including ones that still hold live
// blocks (their pointers dangle afterwards): destroy is device teardown, and
// leaking device memory then helps no one. Pending events are freed without
// waiting for them; synchronize the device first.
void weft_block_alloc_destroy(weft_block_alloc *a);

// nbytes on stream (an opaque handle, NULL is a stream like any other).
// NULL + WEFT_ERR_OOM when the backend has no memory left even after the cache
// is emptied, or when nbytes is too large to round.
void *weft_block_alloc_malloc(weft_block_alloc *a, size_t nbytes, void *stream);
// free(NULL) is a no-op; a pointer that is not a live block (never allocated,
// freed twice, inside a block) is WEFT_ERR_ARG and changes nothing.
weft_status weft_block_alloc_free(weft_block_alloc *a, void *p);
// p is also used on stream: when freed, it waits for an event recorded there
// before reuse. A no-op for p's own stream or when the backend has no events.
weft_status weft_block_alloc_record_stream(weft_block_alloc *a, void *p, void *stream);
// stream's work has all finished and the handle is about to be destroyed:
// live blocks recorded on it no longer wait for it when freed (an event
// recorded on a destroyed stream is undefined). Pending blocks keep the
// events they already have.
void weft_block_alloc_forget_stream(weft_block_alloc *a, void *stream);

// bytes_in_use: sizes of live blocks (blocks freed but waiting for events are
// not live); bytes_cached: reserved (all segments) - in use; n_system_*: raw
// calls that succeeded; n_allocs: malloc calls; n_cache_hits: those served
// without a raw_alloc.
void weft_block_alloc_stats(weft_block_alloc *a, weft_memory_stats *out);
void weft_block_alloc_reset_peak(weft_block_alloc *a);
// Count the live block p as kind in the per-kind statistics (every block
// starts as WEFT_MEM_ACTIVATIONS). False, and nothing changed, if p is not a
// live block of a (memory of a captured graph's pool, say) or kind is bad.
bool weft_block_alloc_tag(weft_block_alloc *a, void *p, weft_memory_kind kind);
// Hands every wholly free segment back to the backend (after collecting
// blocks whose events are done).
void weft_block_alloc_empty_cache(weft_block_alloc *a);
// The size a live block holds (its request rounded up, plus an unsplit
// remainder of at most 1 MiB in the large pool); 0 + WEFT_ERR_ARG if p is not live.
size_t weft_block_alloc_size(weft_block_alloc *a, void *p);

#endif
