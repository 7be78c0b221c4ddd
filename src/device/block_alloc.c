// Caching allocator over a backend's raw device memory (see block_alloc.h for
// the design). Where PyTorch's CUDACachingAllocator does the same thing the
// names follow it: round_size, get_allocation_size, free_block, process_events.
//
// Every block is in exactly one place: its pool's free set (B_FREE), the live
// map (B_LIVE), or the pending list (B_PENDING: freed, waiting for events).
// destroy finds every block struct through those three.
#include "block_alloc.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/core_impl.h"
#include "device_impl.h"

#define MIN_BLOCK ((size_t)512)              // every size is a multiple of this
#define SMALL_SIZE ((size_t)1 << 20)         // largest request served by the small pool
#define SMALL_SEGMENT ((size_t)2 << 20)      // small pool segments
#define MIN_LARGE_ALLOC ((size_t)10 << 20)   // large requests below this share a LARGE_SEGMENT
#define LARGE_SEGMENT ((size_t)20 << 20)
#define ROUND_LARGE ((size_t)2 << 20)        // bigger requests get their own segment, rounded to this
// Requests above this are refused before rounding: it leaves room to round up
// to ROUND_LARGE without overflowing, and no device has that much memory.
#define MAX_REQUEST (SIZE_MAX / 2)

enum { POOL_SMALL, POOL_LARGE, N_POOLS };
typedef enum { B_FREE, B_LIVE, B_PENDING } block_state;

typedef struct segment {
    char *ptr;
    size_t size;
    struct segment *prev, *next; // the allocator's list of segments
} segment;

typedef struct block {
    char *ptr;
    size_t size;
    void *stream; // the segment's stream (copied here: the free-set order compares it)
    segment *seg;
    int pool;
    int kind; // weft_memory_kind while live
    block_state state;
    struct block *prev, *next; // neighbours in the segment, by address
    // Live: the other streams p was recorded on. Pending: the events recorded
    // on them at free (same slots, so freeing needs no host allocation).
    void **uses;
    int n_uses, cap_uses;
    struct block *next_pending;
} block;

// Free blocks of one pool sorted by (stream, size, address). cap is kept >=
// n_blocks (every block of the pool, whatever its state), so inserting a freed
// block never allocates: only creating a block does, and malloc can fail then.
typedef struct {
    block **v;
    size_t n, cap;
    size_t n_blocks;
} free_set;

struct weft_block_alloc {
    pthread_mutex_t mu;
    weft_block_backend be;
    bool has_events;
    char name[64];
    free_set pools[N_POOLS];
    // Live blocks by address: open addressing, linear probing, kept at most
    // half full (grown at the start of malloc, so inserting never allocates).
    block **live;
    int live_bits;
    size_t n_live;
    block *pending;
    segment *segs;
    size_t n_segs, reserved;
    weft_memory_stats st; // bytes_cached is filled in by stats()
};

// ---------------------------------------------------------------------------
// Sizes

static size_t round_size(size_t n) {
    if (n < MIN_BLOCK) return MIN_BLOCK;
    return (n + MIN_BLOCK - 1) / MIN_BLOCK * MIN_BLOCK;
}

static size_t get_allocation_size(size_t size) {
    if (size <= SMALL_SIZE) return SMALL_SEGMENT;
    if (size < MIN_LARGE_ALLOC) return LARGE_SEGMENT;
    return (size + ROUND_LARGE - 1) / ROUND_LARGE * ROUND_LARGE;
}

// "64.0 MiB": for error messages.
static const char *fmt_bytes(char buf[32], size_t n) {
    if (n < 1024) snprintf(buf, 32, "%zu B", n);
    else if (n < ((size_t)1 << 20)) snprintf(buf, 32, "%.1f KiB", n / 1024.0);
    else if (n < ((size_t)1 << 30)) snprintf(buf, 32, "%.1f MiB", n / 1048576.0);
    else snprintf(buf, 32, "%.1f GiB", n / 1073741824.0);
    return buf;
}

// ---------------------------------------------------------------------------
// Free sets

// Order of b against the key (stream, size, ptr): <0, 0, >0.
static int cmp_key(const block *b, void *stream, size_t size, const char *ptr) {
    uintptr_t bs = (uintptr_t)b->stream, ks = (uintptr_t)stream;
    if (bs != ks) return bs < ks ? -1 : 1;
    if (b->size != size) return b->size < size ? -1 : 1;
    if (b->ptr != ptr) return (uintptr_t)b->ptr < (uintptr_t)ptr ? -1 : 1;
    return 0;
}

// First index whose block is >= the key.
static size_t lower_bound(const free_set *s, void *stream, size_t size, const char *ptr) {
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_key(s->v[mid], stream, size, ptr) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static void set_insert(free_set *s, block *b) {
    size_t i = lower_bound(s, b->stream, b->size, b->ptr);
    memmove(s->v + i + 1, s->v + i, (s->n - i) * sizeof *s->v); // cap >= n_blocks > n
    s->v[i] = b;
    s->n++;
}

static void set_remove(free_set *s, block *b) {
    size_t i = lower_bound(s, b->stream, b->size, b->ptr);
    if (i >= s->n || s->v[i] != b) return; // not there: cannot happen while the invariants hold
    memmove(s->v + i, s->v + i + 1, (s->n - i - 1) * sizeof *s->v);
    s->n--;
}

// Best fit: the smallest free block of the stream with size >= size, lowest address first.
static block *best_fit(free_set *s, void *stream, size_t size) {
    size_t i = lower_bound(s, stream, size, NULL);
    return i < s->n && s->v[i]->stream == stream ? s->v[i] : NULL;
}

// ---------------------------------------------------------------------------
// Live map

static size_t hash_slot(const void *p, int bits) {
    uint64_t h = (uint64_t)(uintptr_t)p * UINT64_C(0x9E3779B97F4A7C15); // Fibonacci hashing
    return (size_t)(h >> (64 - bits));
}

static block *map_find(const weft_block_alloc *a, const void *p, size_t *slot) {
    size_t mask = ((size_t)1 << a->live_bits) - 1;
    for (size_t i = hash_slot(p, a->live_bits);; i = (i + 1) & mask) {
        block *b = a->live[i];
        if (!b) return NULL;
        if (b->ptr == (const char *)p) {
            if (slot) *slot = i;
            return b;
        }
    }
}

static void map_put(block **tab, int bits, block *b) {
    size_t mask = ((size_t)1 << bits) - 1, i = hash_slot(b->ptr, bits);
    while (tab[i]) i = (i + 1) & mask;
    tab[i] = b;
}

// Room for one more live block at most half full; false when the host is out of memory.
static bool map_reserve(weft_block_alloc *a) {
    if ((a->n_live + 1) * 2 <= ((size_t)1 << a->live_bits)) return true;
    int bits = a->live_bits + 1;
    block **tab = calloc((size_t)1 << bits, sizeof *tab);
    if (!tab) return false;
    for (size_t i = 0; i < ((size_t)1 << a->live_bits); i++)
        if (a->live[i]) map_put(tab, bits, a->live[i]);
    free(a->live);
    a->live = tab;
    a->live_bits = bits;
    return true;
}

static void map_insert(weft_block_alloc *a, block *b) {
    map_put(a->live, a->live_bits, b);
    a->n_live++;
}

// Deletion by backward shift (no tombstones): later entries of the probe run
// move up into the hole unless their home slot lies cyclically in (hole, j].
static void map_erase(weft_block_alloc *a, size_t i) {
    size_t mask = ((size_t)1 << a->live_bits) - 1;
    a->live[i] = NULL;
    for (size_t j = (i + 1) & mask; a->live[j]; j = (j + 1) & mask) {
        size_t k = hash_slot(a->live[j]->ptr, a->live_bits);
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays) continue;
        a->live[i] = a->live[j];
        a->live[j] = NULL;
        i = j;
    }
    a->n_live--;
}

// ---------------------------------------------------------------------------
// Blocks and segments

// A new block struct of a pool, with room for it in the pool's free set; NULL
// when the host is out of memory.
static block *block_new(weft_block_alloc *a, int pool) {
    free_set *s = &a->pools[pool];
    if (s->n_blocks + 1 > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        block **v = realloc(s->v, cap * sizeof *v);
        if (!v) return NULL;
        s->v = v;
        s->cap = cap;
    }
    block *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->pool = pool;
    s->n_blocks++;
    return b;
}

static void block_delete(weft_block_alloc *a, block *b) {
    a->pools[b->pool].n_blocks--;
    free(b->uses);
    free(b);
}

// A new segment of size bytes for stream, as one free block (not yet in the
// free set). NULL with *host_oom false when the backend has no memory.
static block *new_segment(weft_block_alloc *a, int pool, void *stream, size_t size, bool *host_oom) {
    *host_oom = false;
    segment *seg = malloc(sizeof *seg);
    block *b = seg ? block_new(a, pool) : NULL;
    if (!b) {
        free(seg);
        *host_oom = true;
        return NULL;
    }
    char *p = a->be.raw_alloc(a->be.ctx, size);
    if (!p) {
        block_delete(a, b);
        free(seg);
        return NULL;
    }
    a->st.n_system_allocs++;
    *seg = (segment){.ptr = p, .size = size, .next = a->segs};
    if (a->segs) a->segs->prev = seg;
    a->segs = seg;
    a->n_segs++;
    a->reserved += size;
    b->ptr = p;
    b->size = size;
    b->stream = stream;
    b->seg = seg;
    b->state = B_FREE;
    return b;
}

static void release_segment(weft_block_alloc *a, segment *seg) {
    a->be.raw_free(a->be.ctx, seg->ptr, seg->size);
    a->st.n_system_frees++;
    if (seg->prev) seg->prev->next = seg->next;
    else a->segs = seg->next;
    if (seg->next) seg->next->prev = seg->prev;
    a->n_segs--;
    a->reserved -= seg->size;
    free(seg);
}

// Cut b (out of any set) down to size when the remainder is worth a block of
// its own; the remainder goes to the free set. Small pool: any remainder
// (sizes are multiples of 512). Large pool: only one > 1 MiB, so a large
// block never carries more than 1 MiB of slack and big cached blocks are
// never handed whole to small requests.
static void maybe_split(weft_block_alloc *a, block *b, size_t size) {
    size_t rest = b->size - size;
    bool split = b->pool == POOL_SMALL ? rest >= MIN_BLOCK : rest > SMALL_SIZE;
    if (!split) return;
    block *r = block_new(a, b->pool);
    if (!r) return; // host out of memory: hand out the whole block rather than fail
    r->ptr = b->ptr + size;
    r->size = rest;
    r->stream = b->stream;
    r->seg = b->seg;
    r->state = B_FREE;
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = size;
    set_insert(&a->pools[r->pool], r);
}

// b goes back to its free set, merged with free neighbours (which belong to
// the same segment, hence the same stream and pool).
static void free_block(weft_block_alloc *a, block *b) {
    free_set *s = &a->pools[b->pool];
    b->state = B_FREE;
    b->n_uses = 0;
    block *p = b->prev;
    if (p && p->state == B_FREE) {
        set_remove(s, p);
        p->size += b->size;
        p->next = b->next;
        if (b->next) b->next->prev = p;
        block_delete(a, b);
        b = p;
    }
    block *n = b->next;
    if (n && n->state == B_FREE) {
        set_remove(s, n);
        b->size += n->size;
        b->next = n->next;
        if (n->next) n->next->prev = b;
        block_delete(a, n);
    }
    set_insert(s, b);
}

// Blocks whose events are all done go back to the free sets. A NULL event
// (event_record failed) never completes: that block is not reused.
static void process_events(weft_block_alloc *a) {
    block **pp = &a->pending;
    while (*pp) {
        block *b = *pp;
        bool done = true;
        for (int i = 0; i < b->n_uses && done; i++) done = b->uses[i] && a->be.event_done(a->be.ctx, b->uses[i]);
        if (!done) {
            pp = &b->next_pending;
            continue;
        }
        *pp = b->next_pending;
        b->next_pending = NULL;
        for (int i = 0; i < b->n_uses; i++) a->be.event_free(a->be.ctx, b->uses[i]);
        free_block(a, b);
    }
}

// Every wholly free segment (one free block, no neighbours) back to the backend.
static void empty_cache_locked(weft_block_alloc *a) {
    process_events(a);
    for (int p = 0; p < N_POOLS; p++) {
        free_set *s = &a->pools[p];
        size_t w = 0;
        for (size_t i = 0; i < s->n; i++) {
            block *b = s->v[i];
            if (b->prev || b->next) {
                s->v[w++] = b;
                continue;
            }
            release_segment(a, b->seg);
            block_delete(a, b);
        }
        s->n = w;
    }
}

// The message says what the request needed and where the memory is, so one
// can tell "tensors hold it all" from "the cache holds it" from fragmentation.
static void oom_error(const weft_block_alloc *a, size_t size, size_t seg_size, bool host_oom) {
    char req[32], seg[32], used[32], cached[32], res[32], segnote[64] = "";
    if (host_oom) {
        weft_error(WEFT_ERR_OOM, "%s: out of host memory allocating %s", a->name, fmt_bytes(req, size));
        return;
    }
    if (seg_size != size) snprintf(segnote, sizeof segnote, " (a %s segment)", fmt_bytes(seg, seg_size));
    size_t in_use = a->st.bytes_in_use;
    weft_error(WEFT_ERR_OOM,
               "%s out of memory allocating %s%s: %s in use by tensors, %s cached, %s reserved in %zu segment%s",
               a->name, fmt_bytes(req, size), segnote, fmt_bytes(used, in_use), fmt_bytes(cached, a->reserved - in_use),
               fmt_bytes(res, a->reserved), a->n_segs, a->n_segs == 1 ? "" : "s");
}

// ---------------------------------------------------------------------------
// API

weft_block_alloc *weft_block_alloc_create(const weft_block_backend *be) {
    if (!be || !be->raw_alloc || !be->raw_free)
        return weft_error_null(WEFT_ERR_ARG, "block_alloc_create: backend %s",
                               be ? "lacks raw_alloc/raw_free" : "is NULL");
    weft_block_alloc *a = calloc(1, sizeof *a);
    if (!a) return weft_error_null(WEFT_ERR_OOM, "block_alloc_create: out of host memory");
    a->live_bits = 6;
    a->live = calloc((size_t)1 << a->live_bits, sizeof *a->live);
    if (!a->live || pthread_mutex_init(&a->mu, NULL) != 0) {
        free(a->live);
        free(a);
        return weft_error_null(WEFT_ERR_OOM, "block_alloc_create: out of host memory");
    }
    a->be = *be;
    a->has_events = be->event_record && be->event_done && be->event_free;
    snprintf(a->name, sizeof a->name, "%s", be->name ? be->name : "device");
    a->be.name = a->name;
    return a;
}

void weft_block_alloc_destroy(weft_block_alloc *a) {
    if (!a) return;
    for (block *b = a->pending, *next; b; b = next) {
        next = b->next_pending;
        for (int i = 0; i < b->n_uses; i++)
            if (b->uses[i]) a->be.event_free(a->be.ctx, b->uses[i]);
        block_delete(a, b);
    }
    for (size_t i = 0; i < ((size_t)1 << a->live_bits); i++)
        if (a->live[i]) block_delete(a, a->live[i]);
    for (int p = 0; p < N_POOLS; p++) {
        for (size_t i = 0; i < a->pools[p].n; i++) block_delete(a, a->pools[p].v[i]);
        free(a->pools[p].v);
    }
    while (a->segs) release_segment(a, a->segs);
    free(a->live);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

void *weft_block_alloc_malloc(weft_block_alloc *a, size_t nbytes, void *stream) {
    if (!a) return weft_error_null(WEFT_ERR_ARG, "block_alloc_malloc: allocator is NULL");
    pthread_mutex_lock(&a->mu);
    a->st.n_allocs++;
    if (nbytes > MAX_REQUEST) {
        pthread_mutex_unlock(&a->mu);
        return weft_error_null(WEFT_ERR_OOM, "%s out of memory: %zu bytes requested, more than any device holds",
                               a->name, nbytes);
    }
    process_events(a);
    if (!map_reserve(a)) {
        pthread_mutex_unlock(&a->mu);
        return weft_error_null(WEFT_ERR_OOM, "%s: out of host memory for the allocator's tables", a->name);
    }
    size_t size = round_size(nbytes);
    int pool = size <= SMALL_SIZE ? POOL_SMALL : POOL_LARGE;
    block *b = best_fit(&a->pools[pool], stream, size);
    if (b) {
        set_remove(&a->pools[pool], b);
        a->st.n_cache_hits++;
    } else {
        size_t seg_size = get_allocation_size(size);
        bool host_oom;
        b = new_segment(a, pool, stream, seg_size, &host_oom);
        if (!b && !host_oom) {
            // The device is full: give back what the cache holds and try once more.
            empty_cache_locked(a);
            b = new_segment(a, pool, stream, seg_size, &host_oom);
        }
        if (!b) {
            oom_error(a, size, seg_size, host_oom);
            pthread_mutex_unlock(&a->mu);
            return NULL;
        }
    }
    maybe_split(a, b, size);
    b->state = B_LIVE;
    map_insert(a, b);
    a->st.bytes_in_use += b->size;
    if (a->st.bytes_in_use > a->st.peak_bytes_in_use) a->st.peak_bytes_in_use = a->st.bytes_in_use;
    b->kind = WEFT_MEM_ACTIVATIONS;
    weft_mem_kind_in(&a->st, WEFT_MEM_ACTIVATIONS, b->size);
    pthread_mutex_unlock(&a->mu);
    return b->ptr;
}

weft_status weft_block_alloc_free(weft_block_alloc *a, void *p) {
    if (!p) return WEFT_OK;
    if (!a) return weft_error(WEFT_ERR_ARG, "block_alloc_free: allocator is NULL");
    pthread_mutex_lock(&a->mu);
    size_t slot;
    block *b = map_find(a, p, &slot);
    if (!b) {
        pthread_mutex_unlock(&a->mu);
        return weft_error(WEFT_ERR_ARG, "%s: free of %p, which is not a live block of this allocator", a->name, p);
    }
    map_erase(a, slot);
    a->st.bytes_in_use -= b->size;
    weft_mem_kind_out(&a->st, b->kind, b->size);
    if (b->n_uses > 0) {
        // Work queued on the other streams may still touch the block: reuse
        // waits for an event on each (slots now hold events, not streams).
        for (int i = 0; i < b->n_uses; i++) b->uses[i] = a->be.event_record(a->be.ctx, b->uses[i]);
        b->state = B_PENDING;
        b->next_pending = a->pending;
        a->pending = b;
    } else {
        free_block(a, b);
    }
    pthread_mutex_unlock(&a->mu);
    return WEFT_OK;
}

weft_status weft_block_alloc_record_stream(weft_block_alloc *a, void *p, void *stream) {
    if (!a || !p) return weft_error(WEFT_ERR_ARG, "block_alloc_record_stream: %s is NULL", a ? "pointer" : "allocator");
    pthread_mutex_lock(&a->mu);
    block *b = map_find(a, p, NULL);
    weft_status st = WEFT_OK;
    if (!b) {
        st = weft_error(WEFT_ERR_ARG, "%s: record_stream of %p, which is not a live block", a->name, p);
    } else if (a->has_events && stream != b->stream) {
        bool seen = false;
        for (int i = 0; i < b->n_uses && !seen; i++) seen = b->uses[i] == stream;
        if (!seen && b->n_uses == b->cap_uses) {
            int cap = b->cap_uses ? 2 * b->cap_uses : 2;
            void **u = realloc(b->uses, (size_t)cap * sizeof *u);
            if (!u) st = weft_error(WEFT_ERR_OOM, "%s: record_stream: out of host memory", a->name);
            else {
                b->uses = u;
                b->cap_uses = cap;
            }
        }
        if (!seen && st == WEFT_OK) b->uses[b->n_uses++] = stream;
    }
    pthread_mutex_unlock(&a->mu);
    return st;
}

void weft_block_alloc_forget_stream(weft_block_alloc *a, void *stream) {
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < ((size_t)1 << a->live_bits); i++) {
        block *b = a->live[i];
        if (!b) continue;
        int w = 0;
        for (int k = 0; k < b->n_uses; k++)
            if (b->uses[k] != stream) b->uses[w++] = b->uses[k];
        b->n_uses = w;
    }
    pthread_mutex_unlock(&a->mu);
}

void weft_block_alloc_stats(weft_block_alloc *a, weft_memory_stats *out) {
    if (!a || !out) return;
    pthread_mutex_lock(&a->mu);
    *out = a->st;
    out->bytes_cached = a->reserved - a->st.bytes_in_use;
    pthread_mutex_unlock(&a->mu);
}

void weft_block_alloc_reset_peak(weft_block_alloc *a) {
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->st.peak_bytes_in_use = a->st.bytes_in_use;
    weft_mem_kind_reset_peaks(&a->st);
    pthread_mutex_unlock(&a->mu);
}

bool weft_block_alloc_tag(weft_block_alloc *a, void *p, weft_memory_kind kind) {
    if (!a || !p || (unsigned)kind >= WEFT_MEM_NUM_KINDS) return false;
    pthread_mutex_lock(&a->mu);
    block *b = map_find(a, p, NULL);
    if (b) {
        weft_mem_kind_out(&a->st, b->kind, b->size);
        b->kind = kind;
        weft_mem_kind_in(&a->st, kind, b->size);
    }
    pthread_mutex_unlock(&a->mu);
    return b != NULL;
}

void weft_block_alloc_empty_cache(weft_block_alloc *a) {
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    empty_cache_locked(a);
    pthread_mutex_unlock(&a->mu);
}

size_t weft_block_alloc_size(weft_block_alloc *a, void *p) {
    if (!a) return 0;
    pthread_mutex_lock(&a->mu);
    block *b = map_find(a, p, NULL);
    size_t n = b ? b->size : 0;
    pthread_mutex_unlock(&a->mu);
    if (!b) weft_error(WEFT_ERR_ARG, "%s: %p is not a live block", a->name, p);
    return n;
}
