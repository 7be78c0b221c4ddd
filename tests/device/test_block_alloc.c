// The device-agnostic caching allocator (src/device/block_alloc.c) over a fake
// backend: malloc with a byte limit (to force out-of-memory), counted raw
// calls, and events that are done when the test says so.
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "device/block_alloc.h"
#include "weft_test.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

// Streams are opaque handles to the allocator: any distinct values do.
#define SA ((void *)0x10)
#define SB ((void *)0x20)
#define SC ((void *)0x30)

typedef struct fake_event {
    bool done;
    struct fake_event *next;
} fake_event;

typedef struct {
    size_t limit, used, last_size; // bytes
    int n_alloc, n_free, n_fail;   // raw calls (succeeded, succeeded, refused)
    fake_event *events;            // live events, newest first
    int n_events, n_events_made;
    bool events_fail;              // event_record returns NULL
} fake_dev;

static void *fake_alloc(void *ctx, size_t n) {
    fake_dev *d = ctx;
    if (n > d->limit - d->used) {
        d->n_fail++;
        return NULL;
    }
    void *p = malloc(n);
    if (!p) return NULL;
    d->used += n;
    d->last_size = n;
    d->n_alloc++;
    return p;
}

static void fake_free(void *ctx, void *p, size_t n) {
    fake_dev *d = ctx;
    d->used -= n;
    d->n_free++;
    free(p);
}

static void *fake_event_record(void *ctx, void *stream) {
    fake_dev *d = ctx;
    if (d->events_fail) return NULL;
    fake_event *e = calloc(1, sizeof *e);
    e->next = d->events;
    d->events = e;
    d->n_events++;
    d->n_events_made++;
    return e;
}

static bool fake_event_done(void *ctx, void *e) { return ((fake_event *)e)->done; }

static void fake_event_free(void *ctx, void *ev) {
    fake_dev *d = ctx;
    for (fake_event **pp = &d->events; *pp; pp = &(*pp)->next)
        if (*pp == ev) {
            *pp = ((fake_event *)ev)->next;
            break;
        }
    d->n_events--;
    free(ev);
}

static void flip_all(fake_dev *d) {
    for (fake_event *e = d->events; e; e = e->next) e->done = true;
}

// A fresh fake device with limit bytes (0: no limit), with or without events.
static weft_block_alloc *make(fake_dev *d, size_t limit, bool events) {
    memset(d, 0, sizeof *d);
    d->limit = limit ? limit : SIZE_MAX;
    weft_block_backend be = {.ctx = d, .raw_alloc = fake_alloc, .raw_free = fake_free, .name = "test:0"};
    if (events) {
        be.event_record = fake_event_record;
        be.event_done = fake_event_done;
        be.event_free = fake_event_free;
    }
    weft_block_alloc *a = weft_block_alloc_create(&be);
    CHECK(a != NULL);
    return a;
}

static weft_memory_stats stats(weft_block_alloc *a) {
    weft_memory_stats s;
    memset(&s, 0xff, sizeof s);
    weft_block_alloc_stats(a, &s);
    return s;
}
static size_t reserved(weft_block_alloc *a) {
    weft_memory_stats s = stats(a);
    return s.bytes_in_use + s.bytes_cached;
}

// The segment size the first request of n bytes makes the allocator reserve.
static size_t segment_for(size_t n) {
    fake_dev d;
    weft_block_alloc *a = make(&d, 0, false);
    void *p = weft_block_alloc_malloc(a, n, NULL);
    CHECK(p != NULL && d.n_alloc == 1 && reserved(a) == d.last_size);
    weft_block_alloc_destroy(a);
    return d.last_size;
}

static size_t size_for(size_t n) {
    fake_dev d;
    weft_block_alloc *a = make(&d, 0, false);
    size_t s = weft_block_alloc_size(a, weft_block_alloc_malloc(a, n, NULL));
    weft_block_alloc_destroy(a);
    return s;
}

static void test_rounding_and_pools(void) {
    CHECK(size_for(0) == 512);
    CHECK(size_for(1) == 512);
    CHECK(size_for(512) == 512);
    CHECK(size_for(513) == 1024);
    CHECK(size_for(MiB) == MiB);
    CHECK(size_for(MiB + 1) == MiB + 512);
    CHECK(size_for(9 * MiB) == 9 * MiB);             // 20 MiB segment, 11 MiB remainder split off
    CHECK(size_for(18 * MiB + 512 * KiB) == 18 * MiB + 512 * KiB); // remainder 1.5 MiB: split
    CHECK(size_for(19 * MiB) == 20 * MiB);           // remainder exactly 1 MiB: not split, handed out whole
    CHECK(size_for(19 * MiB + 512 * KiB) == 20 * MiB);
    // small pool: 2 MiB segments; large: 20 MiB below 10 MiB, else rounded to 2 MiB
    CHECK(segment_for(0) == 2 * MiB);
    CHECK(segment_for(1) == 2 * MiB);
    CHECK(segment_for(MiB) == 2 * MiB);
    CHECK(segment_for(MiB + 1) == 20 * MiB);
    CHECK(segment_for(2 * MiB) == 20 * MiB);
    CHECK(segment_for(10 * MiB - 512) == 20 * MiB);
    CHECK(segment_for(10 * MiB - 1) == 10 * MiB); // the rule sees the rounded size, 10 MiB
    CHECK(segment_for(10 * MiB) == 10 * MiB);
    CHECK(segment_for(30 * MiB + 1) == 32 * MiB);
    CHECK(segment_for(64 * MiB) == 64 * MiB);

    // A 1-byte alloc reserves 2 MiB with 512 bytes in use; the pools do not share segments.
    fake_dev d;
    weft_block_alloc *a = make(&d, 0, false);
    void *p = weft_block_alloc_malloc(a, 1, NULL);
    weft_memory_stats s = stats(a);
    CHECK(p && s.bytes_in_use == 512 && s.bytes_cached == 2 * MiB - 512 && d.n_alloc == 1);
    void *q = weft_block_alloc_malloc(a, 2 * MiB, NULL); // does not fit the small segment's rest anyway
    void *r = weft_block_alloc_malloc(a, MiB, NULL);     // largest small request: from the small segment
    s = stats(a);
    CHECK(q && r && d.n_alloc == 2 && d.used == 22 * MiB);
    CHECK((char *)r == (char *)p + 512);
    CHECK(s.bytes_in_use == 512 + 2 * MiB + MiB && s.bytes_cached == 22 * MiB - s.bytes_in_use);
    void *t = weft_block_alloc_malloc(a, MiB + 1, NULL); // smallest large request: from the large segment
    CHECK((char *)t == (char *)q + 2 * MiB && d.n_alloc == 2);
    weft_block_alloc_destroy(a);
    CHECK(d.used == 0 && d.n_free == 2);
}

static void test_split(void) {
    fake_dev d;
    weft_block_alloc *a = make(&d, 0, false);
    char *p1 = weft_block_alloc_malloc(a, 512, NULL);
    char *p2 = weft_block_alloc_malloc(a, 512, NULL);
    char *p3 = weft_block_alloc_malloc(a, 1000, NULL);
    char *p4 = weft_block_alloc_malloc(a, 7, NULL);
    CHECK(d.n_alloc == 1);
    CHECK(p2 == p1 + 512 && p3 == p2 + 512 && p4 == p3 + 1024);
    CHECK(weft_block_alloc_size(a, p3) == 1024);
    weft_memory_stats s = stats(a);
    CHECK(s.n_allocs == 4 && s.n_cache_hits == 3 && s.n_system_allocs == 1);
    // large pool: 3 MiB then 4 MiB from one 20 MiB segment, back to back
    char *q1 = weft_block_alloc_malloc(a, 3 * MiB, NULL);
    char *q2 = weft_block_alloc_malloc(a, 4 * MiB, NULL);
    CHECK(d.n_alloc == 2 && q2 == q1 + 3 * MiB);
    weft_block_alloc_destroy(a);
}

static void test_merge(void) {
    fake_dev d;
    weft_block_alloc *a = make(&d, 0, false);
    // small pool: three 512-byte blocks and the segment's tail
    char *p1 = weft_block_alloc_malloc(a, 512, NULL);
    char *p2 = weft_block_alloc_malloc(a, 512, NULL);
    char *p3 = weft_block_alloc_malloc(a, 512, NULL);
    CHECK(weft_block_alloc_free(a, p2) == WEFT_OK);
    CHECK(weft_block_alloc_free(a, p1) == WEFT_OK);
    CHECK(weft_block_alloc_free(a, p3) == WEFT_OK);
    // one free block from p1 over the whole segment: 1 MiB comes from p1, not
    // from the tail at p1 + 1536 (which would also fit if nothing had merged)
    char *big = weft_block_alloc_malloc(a, MiB, NULL);
    CHECK(big == p1 && d.n_alloc == 1);
    weft_block_alloc_free(a, big);
    weft_block_alloc_empty_cache(a); // wholly free: returned
    CHECK(d.n_free == 1 && d.used == 0 && reserved(a) == 0);

    // large pool: 4 + 4 + 5 MiB from a 20 MiB segment, 7 MiB tail
    char *q1 = weft_block_alloc_malloc(a, 4 * MiB, NULL);
    char *q2 = weft_block_alloc_malloc(a, 4 * MiB, NULL);
    char *q3 = weft_block_alloc_malloc(a, 5 * MiB, NULL);
    CHECK(d.n_alloc == 2 && q2 == q1 + 4 * MiB && q3 == q2 + 4 * MiB);
    weft_block_alloc_free(a, q2);
    weft_block_alloc_free(a, q1);
    char *m = weft_block_alloc_malloc(a, 8 * MiB, NULL); // only left + middle merged holds 8 MiB
    CHECK(m == q1 && d.n_alloc == 2);
    weft_block_alloc_free(a, m);
    weft_block_alloc_free(a, q3);
    weft_memory_stats s0 = stats(a);
    char *w = weft_block_alloc_malloc(a, 20 * MiB, NULL); // the whole segment: a cache hit
    weft_memory_stats s1 = stats(a);
    CHECK(w == q1 && d.n_alloc == 2 && s1.n_cache_hits == s0.n_cache_hits + 1);
    CHECK(weft_block_alloc_size(a, w) == 20 * MiB && s1.bytes_in_use == 20 * MiB && s1.bytes_cached == 0);
    weft_block_alloc_free(a, w);
    weft_block_alloc_destroy(a);
    CHECK(d.used == 0);
}

static void test_best_fit(void) {
    fake_dev d;
    weft_block_alloc *a = make(&d, 0, false);
    // holes of 1024 (A), 2048 (C), 1536 (E), 1024 (G) between live 512-byte blocks
    size_t sizes[] = {1024, 512, 2048, 512, 1536, 512, 1024, 512};
    char *p[8];
    for (int i = 0; i < 8; i++) p[i] = weft_block_alloc_malloc(a, sizes[i], NULL);
    for (int i = 1; i < 8; i++) CHECK(p[i] == p[i - 1] + sizes[i - 1]);
    for (int i = 0; i < 8; i += 2) weft_block_alloc_free(a, p[i]);
    CHECK(weft_block_alloc_malloc(a, 1100, NULL) == p[4]); // 1536: E, not C or the tail
    CHECK(weft_block_alloc_malloc(a, 1800, NULL) == p[2]); // 2048: C
    CHECK(weft_block_alloc_malloc(a, 700, NULL) == p[0]);  // 1024: A and G tie, lowest address
    CHECK(weft_block_alloc_malloc(a, 1000, NULL) == p[6]); // G
    CHECK(weft_block_alloc_malloc(a, 1024, NULL) == p[7] + 512); // only the tail is left
    // a smaller request takes the smallest hole, split: 512 out of the 1536 hole
    weft_block_alloc_free(a, p[4]);
    weft_block_alloc_free(a, p[2]);
    CHECK(weft_block_alloc_malloc(a, 300, NULL) == p[4]);
    CHECK(weft_block_alloc_malloc(a, 1024, NULL) == p[4] + 512); // the 1024 left of E beats C
    CHECK(d.n_alloc == 1);
    weft_block_alloc_destroy(a);
}

static void test_streams(void) {
    fake_dev d;
    weft_block_alloc *a = make(&d, 0, false);
    char *p = weft_block_alloc_malloc(a, 4096, SA);
    weft_block_alloc_free(a, p);
    char *q = weft_block_alloc_malloc(a, 4096, SB); // SA's cache is not SB's
    CHECK(q && q != p && d.n_alloc == 2);
    char *n = weft_block_alloc_malloc(a, 4096, NULL); // nor the NULL stream's
    CHECK(n && n != p && n != q && d.n_alloc == 3);
    char *r = weft_block_alloc_malloc(a, 4096, SA);
    CHECK(r == p && d.n_alloc == 3);
    // SB's segment holds q; the next SB block follows it
    CHECK(weft_block_alloc_malloc(a, 512, SB) == q + 4096);
    // large pool too
    char *l = weft_block_alloc_malloc(a, 12 * MiB, SA);
    weft_block_alloc_free(a, l);
    char *l2 = weft_block_alloc_malloc(a, 12 * MiB, SB);
    CHECK(l2 != l && d.n_alloc == 5);
    CHECK(weft_block_alloc_malloc(a, 12 * MiB, SA) == l && d.n_alloc == 5);
    weft_block_alloc_destroy(a);
    CHECK(d.used == 0 && d.n_free == 5);
}

static void test_record_stream(void) {
    fake_dev d;
    weft_block_alloc *a = make(&d, 0, true);
    char *p = weft_block_alloc_malloc(a, 512, SA);
    CHECK(weft_block_alloc_record_stream(a, p, SB) == WEFT_OK);
    CHECK(weft_block_alloc_record_stream(a, p, SB) == WEFT_OK); // twice: one event
    CHECK(weft_block_alloc_record_stream(a, p, SA) == WEFT_OK); // its own stream: nothing
    CHECK(weft_block_alloc_record_stream(a, p, SC) == WEFT_OK);
    CHECK(weft_block_alloc_free(a, p) == WEFT_OK);
    CHECK(d.n_events == 2);
    weft_memory_stats s = stats(a);
    CHECK(s.bytes_in_use == 0 && s.bytes_cached == 2 * MiB); // freed, not yet reusable
    char *q = weft_block_alloc_malloc(a, 512, SA);
    CHECK(q == p + 512); // not p: SB and SC may still use it
    if (d.events) d.events->done = true; // one of two
    char *r = weft_block_alloc_malloc(a, 512, SA);
    CHECK(r == q + 512 && d.n_events == 2);
    flip_all(&d);
    char *t = weft_block_alloc_malloc(a, 512, SA);
    CHECK(t == p && d.n_events == 0 && d.n_events_made == 2); // reused, events freed
    // reused block starts with no recorded streams: freeing it is immediate
    weft_block_alloc_free(a, t);
    CHECK(d.n_events_made == 2 && weft_block_alloc_malloc(a, 512, SA) == p);

    // a pending block keeps its segment out of empty_cache until its events are done
    fake_dev d2;
    weft_block_alloc *b = make(&d2, 0, true);
    char *x = weft_block_alloc_malloc(b, 3 * MiB, SA);
    weft_block_alloc_record_stream(b, x, SB);
    weft_block_alloc_free(b, x);
    weft_block_alloc_empty_cache(b);
    CHECK(d2.n_free == 0 && reserved(b) == 20 * MiB);
    flip_all(&d2);
    weft_block_alloc_empty_cache(b);
    CHECK(d2.n_free == 1 && d2.used == 0 && d2.n_events == 0 && reserved(b) == 0);
    // pending blocks merge with their neighbours once done
    char *y1 = weft_block_alloc_malloc(b, 3 * MiB, SA), *y2 = weft_block_alloc_malloc(b, 3 * MiB, SA);
    weft_block_alloc_record_stream(b, y1, SB);
    weft_block_alloc_free(b, y1);
    weft_block_alloc_free(b, y2);
    flip_all(&d2);
    CHECK(weft_block_alloc_malloc(b, 20 * MiB, SA) == y1 && d2.n_alloc == 2);
    // an event that could not be recorded: the block is never handed out again
    fake_dev d3;
    weft_block_alloc *c = make(&d3, 0, true);
    d3.events_fail = true;
    char *z = weft_block_alloc_malloc(c, 512, SA);
    weft_block_alloc_record_stream(c, z, SB);
    weft_block_alloc_free(c, z);
    for (int i = 0; i < 4; i++) CHECK(weft_block_alloc_malloc(c, 512, SA) != z);
    weft_block_alloc_destroy(c);
    CHECK(d3.used == 0 && d3.n_free == 1);
    weft_block_alloc_destroy(b);
    weft_block_alloc_destroy(a);
    CHECK(d.used == 0 && d2.used == 0);

    // without event callbacks record_stream is a no-op and reuse is immediate
    fake_dev d4;
    weft_block_alloc *e = make(&d4, 0, false);
    char *u = weft_block_alloc_malloc(e, 512, SA);
    CHECK(weft_block_alloc_record_stream(e, u, SB) == WEFT_OK);
    weft_block_alloc_free(e, u);
    CHECK(weft_block_alloc_malloc(e, 512, SA) == u);
    weft_clear_error();
    CHECK(weft_block_alloc_record_stream(e, u + 512, SB) == WEFT_ERR_ARG && wt_error_has("not a live block"));
    weft_block_alloc_destroy(e);
}

// A stream about to be destroyed (its work done: NCCL's communication stream
// at communicator teardown) is forgotten: a live block recorded on it no
// longer records an event there when freed, and is reusable at once; other
// streams it was recorded on still count, and pending blocks keep their events.
static void test_forget_stream(void) {
    fake_dev d;
    weft_block_alloc *a = make(&d, 0, true);
    char *p = weft_block_alloc_malloc(a, 512, SA), *q = weft_block_alloc_malloc(a, 512, SA);
    char *r = weft_block_alloc_malloc(a, 512, SA);
    CHECK(weft_block_alloc_record_stream(a, p, SB) == WEFT_OK);
    CHECK(weft_block_alloc_record_stream(a, q, SB) == WEFT_OK && weft_block_alloc_record_stream(a, q, SC) == WEFT_OK);
    CHECK(weft_block_alloc_record_stream(a, r, SB) == WEFT_OK);
    CHECK(weft_block_alloc_free(a, r) == WEFT_OK && d.n_events_made == 1); // pending on SB's event
    weft_block_alloc_forget_stream(a, SB);
    CHECK(weft_block_alloc_free(a, p) == WEFT_OK);
    CHECK(d.n_events_made == 1);                                     // no event recorded on SB for p
    CHECK(weft_block_alloc_malloc(a, 512, SA) == p);                 // p reusable at once
    CHECK(weft_block_alloc_free(a, q) == WEFT_OK && d.n_events_made == 2); // q still waits for SC
    CHECK(weft_block_alloc_malloc(a, 512, SA) != q);
    CHECK(d.n_events == 2); // r's event (recorded before) is kept until done
    flip_all(&d);
    CHECK(weft_block_alloc_malloc(a, 512, SA) != NULL && d.n_events == 0);
    weft_block_alloc_forget_stream(NULL, SB); // no-op
    weft_block_alloc_destroy(a);
}

static void test_oom(void) {
    fake_dev d;
    // fits only once the cache is emptied: 2 MiB cached + a 24 MiB segment > 24 MiB
    weft_block_alloc *a = make(&d, 24 * MiB, false);
    weft_block_alloc_free(a, weft_block_alloc_malloc(a, 512, NULL));
    CHECK(reserved(a) == 2 * MiB);
    char *big = weft_block_alloc_malloc(a, 23 * MiB, NULL);
    weft_memory_stats s = stats(a);
    CHECK(big != NULL && d.n_fail == 1 && d.n_free == 1 && d.n_alloc == 2);
    CHECK(s.n_system_frees == 1 && s.n_system_allocs == 2 && reserved(a) == 24 * MiB);
    weft_block_alloc_destroy(a);

    // never fits: nothing wholly free to give back
    a = make(&d, 24 * MiB, false);
    char *p = weft_block_alloc_malloc(a, 512, NULL), *q = weft_block_alloc_malloc(a, 20 * MiB, NULL);
    CHECK(p && q && d.used == 22 * MiB);
    weft_memory_stats s0 = stats(a);
    weft_clear_error();
    CHECK(weft_block_alloc_malloc(a, 4 * MiB, NULL) == NULL);
    CHECK(weft_last_status() == WEFT_ERR_OOM);
    CHECK(strcmp(weft_last_error(), "test:0 out of memory allocating 4.0 MiB (a 20.0 MiB segment): 20.0 MiB in use "
                                    "by tensors, 2.0 MiB cached, 22.0 MiB reserved in 2 segments") == 0);
    if (!wt_error_has("out of memory")) fprintf(stderr, "message: %s\n", weft_last_error());
    s = stats(a);
    CHECK(d.n_fail == 2 && d.n_free == 0); // tried twice, gave nothing back
    CHECK(s.bytes_in_use == s0.bytes_in_use && s.bytes_cached == s0.bytes_cached && s.n_allocs == s0.n_allocs + 1);
    // a 1 MiB request still fits in the small segment
    CHECK(weft_block_alloc_malloc(a, MiB, NULL) == p + 512);
    // once q is freed the 4 MiB request is served from its segment
    weft_block_alloc_free(a, q);
    CHECK(weft_block_alloc_malloc(a, 4 * MiB, NULL) == q && d.n_free == 0 && d.n_alloc == 2);
    // sizes too large to round, or far beyond the device
    weft_clear_error();
    CHECK(weft_block_alloc_malloc(a, SIZE_MAX, NULL) == NULL && weft_last_status() == WEFT_ERR_OOM);
    weft_clear_error();
    CHECK(weft_block_alloc_malloc(a, SIZE_MAX - 100, NULL) == NULL && weft_last_status() == WEFT_ERR_OOM);
    weft_clear_error();
    CHECK(weft_block_alloc_malloc(a, (size_t)1 << 40, NULL) == NULL);
    CHECK(wt_error_has("test:0 out of memory allocating 1024.0 GiB: "));
    CHECK(wt_error_has(" reserved in 2 segments")); // small + the 20 MiB one; the 4 MiB block is live
    weft_block_alloc_destroy(a);
    CHECK(d.used == 0);
}

static void test_stats(void) {
    fake_dev d;
    weft_block_alloc *a = make(&d, 0, false);
    weft_memory_stats s = stats(a);
    CHECK(s.bytes_in_use == 0 && s.bytes_cached == 0 && s.peak_bytes_in_use == 0 && s.n_allocs == 0);
    void *p1 = weft_block_alloc_malloc(a, 1000, NULL);  // 1024, new small segment
    void *p2 = weft_block_alloc_malloc(a, 3 * MiB, SA); // 3 MiB, new 20 MiB segment
    void *p3 = weft_block_alloc_malloc(a, 100, NULL);   // 512, hit
    size_t use = 1024 + 3 * MiB + 512;
    s = stats(a);
    CHECK(s.bytes_in_use == use && s.bytes_cached == 22 * MiB - use && s.peak_bytes_in_use == use);
    CHECK(s.n_allocs == 3 && s.n_cache_hits == 1 && s.n_system_allocs == 2 && s.n_system_frees == 0);
    weft_block_alloc_free(a, p2);
    s = stats(a);
    CHECK(s.bytes_in_use == 1536 && s.bytes_cached == 22 * MiB - 1536 && s.peak_bytes_in_use == use);
    weft_block_alloc_reset_peak(a);
    CHECK(stats(a).peak_bytes_in_use == 1536);
    void *p4 = weft_block_alloc_malloc(a, 5 * MiB, SA);
    weft_block_alloc_free(a, p4);
    s = stats(a);
    CHECK(s.peak_bytes_in_use == 1536 + 5 * MiB && s.bytes_in_use == 1536 && s.n_cache_hits == 2);
    weft_block_alloc_empty_cache(a); // the large segment only: the small one holds p1, p3
    s = stats(a);
    CHECK(s.bytes_in_use == 1536 && s.bytes_cached == 2 * MiB - 1536 && s.n_system_frees == 1 && d.n_free == 1);
    weft_block_alloc_free(a, p1);
    weft_block_alloc_empty_cache(a);
    CHECK(stats(a).n_system_frees == 1); // p3 still holds it
    weft_block_alloc_free(a, p3);
    weft_block_alloc_empty_cache(a);
    s = stats(a);
    CHECK(s.bytes_in_use == 0 && s.bytes_cached == 0 && s.n_system_frees == 2 && s.n_system_allocs == 2);
    CHECK(s.n_allocs == 4 && s.peak_bytes_in_use == 1536 + 5 * MiB);
    weft_block_alloc_empty_cache(a); // nothing left: a no-op
    CHECK(stats(a).n_system_frees == 2);
    weft_block_alloc_stats(a, NULL); // no crash
    weft_block_alloc_destroy(a);
}

// Per-kind bytes: blocks start as activations, a tag moves a block's whole
// size between kinds, frees take it from its kind; each kind keeps its own
// peak, and reset_peak brings them down to what is in use.
static void test_kinds(void) {
    fake_dev d;
    weft_block_alloc *a = make(&d, 0, false);
    void *p1 = weft_block_alloc_malloc(a, 1000, NULL);  // 1024
    void *p2 = weft_block_alloc_malloc(a, 3 * MiB, NULL); // 3 MiB
    void *p3 = weft_block_alloc_malloc(a, 600, NULL);   // 1024
    weft_memory_stats s = stats(a);
    CHECK(s.kind_in_use[WEFT_MEM_ACTIVATIONS] == 2048 + 3 * MiB && s.kind_peak[WEFT_MEM_ACTIVATIONS] == 2048 + 3 * MiB);
    CHECK(s.kind_in_use[WEFT_MEM_PARAMETERS] == 0 && s.kind_in_use[WEFT_MEM_GRADIENTS] == 0 &&
          s.kind_in_use[WEFT_MEM_OPTIMIZER] == 0);
    CHECK(weft_block_alloc_tag(a, p2, WEFT_MEM_PARAMETERS) && weft_block_alloc_tag(a, p3, WEFT_MEM_OPTIMIZER));
    s = stats(a);
    CHECK(s.kind_in_use[WEFT_MEM_ACTIVATIONS] == 1024 && s.kind_in_use[WEFT_MEM_PARAMETERS] == 3 * MiB &&
          s.kind_in_use[WEFT_MEM_OPTIMIZER] == 1024);
    size_t sum = 0;
    for (int k = 0; k < WEFT_MEM_NUM_KINDS; k++) sum += s.kind_in_use[k];
    CHECK(sum == s.bytes_in_use);
    // not a live block (inside one, freed, NULL) or a bad kind: nothing changes
    CHECK(!weft_block_alloc_tag(a, (char *)p2 + 512, WEFT_MEM_GRADIENTS));
    CHECK(!weft_block_alloc_tag(a, p1, WEFT_MEM_NUM_KINDS) && !weft_block_alloc_tag(a, NULL, WEFT_MEM_GRADIENTS));
    weft_block_alloc_free(a, p2);
    CHECK(!weft_block_alloc_tag(a, p2, WEFT_MEM_GRADIENTS));
    s = stats(a);
    CHECK(s.kind_in_use[WEFT_MEM_PARAMETERS] == 0 && s.kind_peak[WEFT_MEM_PARAMETERS] == 3 * MiB);
    CHECK(s.kind_in_use[WEFT_MEM_GRADIENTS] == 0 && s.kind_in_use[WEFT_MEM_ACTIVATIONS] == 1024);
    weft_block_alloc_reset_peak(a);
    s = stats(a);
    CHECK(s.kind_peak[WEFT_MEM_PARAMETERS] == 0 && s.kind_peak[WEFT_MEM_ACTIVATIONS] == 1024 &&
          s.kind_peak[WEFT_MEM_OPTIMIZER] == 1024);
    weft_block_alloc_free(a, p3); // freed from its tagged kind
    s = stats(a);
    CHECK(s.kind_in_use[WEFT_MEM_OPTIMIZER] == 0 && s.kind_peak[WEFT_MEM_OPTIMIZER] == 1024);
    void *p4 = weft_block_alloc_malloc(a, 3 * MiB, NULL); // reuses the freed block: an activation again
    CHECK(stats(a).kind_in_use[WEFT_MEM_ACTIVATIONS] == 1024 + 3 * MiB);
    weft_block_alloc_free(a, p4);
    weft_block_alloc_free(a, p1);
    s = stats(a);
    for (int k = 0; k < WEFT_MEM_NUM_KINDS; k++) CHECK(s.kind_in_use[k] == 0);
    weft_block_alloc_destroy(a);
}

static void test_bad_input(void) {
    fake_dev d;
    weft_block_alloc *a = make(&d, 0, false);
    char *p = weft_block_alloc_malloc(a, 1024, NULL);
    weft_memory_stats s0 = stats(a);
    weft_clear_error();
    CHECK(weft_block_alloc_free(a, NULL) == WEFT_OK && weft_last_error()[0] == 0);
    int on_stack;
    CHECK(weft_block_alloc_free(a, &on_stack) == WEFT_ERR_ARG && wt_error_has("test:0: free of"));
    weft_clear_error();
    CHECK(weft_block_alloc_free(a, p + 512) == WEFT_ERR_ARG && wt_error_has("not a live block")); // inside a block
    weft_clear_error();
    CHECK(weft_block_alloc_size(a, &on_stack) == 0 && weft_last_status() == WEFT_ERR_ARG);
    CHECK(weft_block_alloc_record_stream(a, &on_stack, SA) == WEFT_ERR_ARG);
    CHECK(weft_block_alloc_record_stream(a, NULL, SA) == WEFT_ERR_ARG);
    weft_memory_stats s1 = stats(a);
    CHECK(s1.bytes_in_use == s0.bytes_in_use && s1.bytes_cached == s0.bytes_cached);
    CHECK(weft_block_alloc_free(a, p) == WEFT_OK);
    weft_clear_error();
    CHECK(weft_block_alloc_free(a, p) == WEFT_ERR_ARG); // twice
    CHECK(stats(a).bytes_in_use == 0);
    // NULL allocator or backend
    weft_clear_error();
    CHECK(weft_block_alloc_create(NULL) == NULL && weft_last_status() == WEFT_ERR_ARG);
    weft_block_backend half = {.ctx = &d, .raw_alloc = fake_alloc};
    CHECK(weft_block_alloc_create(&half) == NULL && wt_error_has("raw_alloc/raw_free"));
    CHECK(weft_block_alloc_malloc(NULL, 10, NULL) == NULL);
    CHECK(weft_block_alloc_free(NULL, p) == WEFT_ERR_ARG);
    CHECK(weft_block_alloc_size(NULL, p) == 0);
    weft_block_alloc_stats(NULL, &s1);
    weft_block_alloc_reset_peak(NULL);
    weft_block_alloc_empty_cache(NULL);
    weft_block_alloc_destroy(NULL);
    // a backend without a name
    weft_block_backend anon = {.ctx = &d, .raw_alloc = fake_alloc, .raw_free = fake_free};
    weft_block_alloc *b = weft_block_alloc_create(&anon);
    CHECK(weft_block_alloc_free(b, &on_stack) == WEFT_ERR_ARG && wt_error_has("device: free of"));
    weft_block_alloc_destroy(b);
    weft_block_alloc_destroy(a);
}

// destroy hands back every segment, live and pending blocks included.
static void test_destroy(void) {
    fake_dev d;
    weft_block_alloc *a = make(&d, 0, true);
    void *p = weft_block_alloc_malloc(a, 100, SA);
    void *q = weft_block_alloc_malloc(a, 15 * MiB, SB);
    weft_block_alloc_malloc(a, 40 * MiB, NULL);
    weft_block_alloc_record_stream(a, q, SA);
    weft_block_alloc_free(a, q);
    weft_block_alloc_free(a, weft_block_alloc_malloc(a, 512, SC));
    CHECK(p && d.n_alloc == 4 && d.n_events == 1);
    weft_block_alloc_destroy(a);
    CHECK(d.used == 0 && d.n_free == 4 && d.n_events == 0);
}

// ---------------------------------------------------------------------------
// Randomized: allocations across both pools and three streams, some recorded
// on other streams. Each block carries a stamp every 512 bytes (its id and the
// offset) over its whole rounded size: blocks sharing memory would overwrite
// each other's stamps.

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

typedef struct {
    char *p;
    size_t n, size;
    uint32_t id;
} shadow;

static uint32_t stamp(uint32_t id, size_t k) { return id * 2654435761u ^ (uint32_t)k; }

static void fill(const shadow *b) {
    for (size_t off = 0; off < b->size; off += 512) {
        uint32_t v = stamp(b->id, off / 512);
        memcpy(b->p + off, &v, 4);
    }
}

static bool intact(const shadow *b) {
    for (size_t off = 0; off < b->size; off += 512) {
        uint32_t v;
        memcpy(&v, b->p + off, 4);
        if (v != stamp(b->id, off / 512)) return false;
    }
    return true;
}

static size_t random_size(uint64_t *s) {
    uint64_t r = lcg(s) % 100;
    if (r < 55) return 1 + lcg(s) % (8 * KiB);
    if (r < 85) return 8 * KiB + lcg(s) % MiB; // both sides of the 1 MiB pool boundary
    if (r < 98) return MiB + lcg(s) % (12 * MiB);
    return 12 * MiB + lcg(s) % (28 * MiB);
}

static void test_stress(void) {
    fake_dev d;
    weft_block_alloc *a = make(&d, 0, true);
    enum { MAX_LIVE = 64, N_OPS = 4000 };
    shadow live[MAX_LIVE], pend[N_OPS];
    int n_live = 0, n_pend = 0, bad = 0, oversize = 0;
    void *streams[3] = {NULL, SA, SB};
    uint64_t seed = 12345;
    uint32_t next_id = 1;
    for (int op = 0; op < N_OPS; op++) {
        bool do_alloc = n_live == 0 || (n_live < MAX_LIVE && lcg(&seed) % 100 < 55);
        if (do_alloc) {
            size_t n = random_size(&seed);
            void *st = streams[lcg(&seed) % 3];
            shadow b = {weft_block_alloc_malloc(a, n, st), n, 0, next_id++};
            if (!b.p) {
                bad++;
                continue;
            }
            b.size = weft_block_alloc_size(a, b.p);
            size_t rounded = (n + 511) / 512 * 512;
            if (b.size < rounded || b.size > rounded + (n > MiB ? MiB : 0)) oversize++;
            fill(&b);
            if (lcg(&seed) % 10 == 0) weft_block_alloc_record_stream(a, b.p, streams[lcg(&seed) % 3]);
            live[n_live++] = b;
        } else {
            int i = (int)(lcg(&seed) % (uint64_t)n_live);
            if (!intact(&live[i])) bad++;
            int ev = d.n_events_made;
            if (weft_block_alloc_free(a, live[i].p) != WEFT_OK) bad++;
            if (d.n_events_made > ev) pend[n_pend++] = live[i]; // must stay untouched until its events are done
            live[i] = live[--n_live];
        }
        if (op % 97 == 96) {
            for (int i = 0; i < n_pend; i++)
                if (!intact(&pend[i])) bad++;
            flip_all(&d);
            n_pend = 0;
        }
        if (op % 500 == 499) weft_block_alloc_empty_cache(a);
        if (op % 50 == 0) {
            size_t sum = 0;
            for (int i = 0; i < n_live; i++) sum += live[i].size;
            weft_memory_stats s = stats(a);
            if (s.bytes_in_use != sum || s.bytes_in_use + s.bytes_cached != d.used) bad++;
        }
    }
    CHECK(bad == 0 && oversize == 0);
    for (int i = 0; i < n_live; i++) {
        CHECK(intact(&live[i]));
        weft_block_alloc_free(a, live[i].p);
    }
    for (int i = 0; i < n_pend; i++) CHECK(intact(&pend[i]));
    flip_all(&d);
    weft_memory_stats s = stats(a);
    CHECK(s.bytes_in_use == 0 && s.n_allocs == (uint64_t)(next_id - 1));
    CHECK(s.n_cache_hits > s.n_allocs / 2); // the cache is doing its job
    weft_block_alloc_empty_cache(a);
    s = stats(a);
    CHECK(s.bytes_in_use == 0 && s.bytes_cached == 0 && d.used == 0 && d.n_events == 0);
    CHECK(d.n_alloc == d.n_free && s.n_system_allocs == (uint64_t)d.n_alloc && s.n_system_frees == (uint64_t)d.n_free);
    weft_block_alloc_destroy(a);
}

// Threads sharing one allocator (and one stream, so blocks pass between them).
typedef struct {
    weft_block_alloc *a;
    uint64_t seed;
    int bad;
} thread_arg;

static void *thread_main(void *arg) {
    thread_arg *t = arg;
    shadow live[32];
    int n_live = 0;
    for (int op = 0; op < 3000; op++) {
        if (n_live == 0 || (n_live < 32 && lcg(&t->seed) % 2)) {
            size_t n = lcg(&t->seed) % 5 == 0 ? MiB + lcg(&t->seed) % (4 * MiB) : 1 + lcg(&t->seed) % (64 * KiB);
            shadow b = {weft_block_alloc_malloc(t->a, n, NULL), n, 0, (uint32_t)(t->seed >> 8)};
            if (!b.p) {
                t->bad++;
                continue;
            }
            b.size = weft_block_alloc_size(t->a, b.p);
            fill(&b);
            live[n_live++] = b;
        } else {
            int i = (int)(lcg(&t->seed) % (uint64_t)n_live);
            if (!intact(&live[i]) || weft_block_alloc_free(t->a, live[i].p) != WEFT_OK) t->bad++;
            live[i] = live[--n_live];
        }
    }
    for (int i = 0; i < n_live; i++)
        if (!intact(&live[i]) || weft_block_alloc_free(t->a, live[i].p) != WEFT_OK) t->bad++;
    return NULL;
}

static void test_threads(void) {
    fake_dev d;
    weft_block_alloc *a = make(&d, 0, false);
    enum { NT = 4 };
    pthread_t th[NT];
    thread_arg args[NT];
    for (int i = 0; i < NT; i++) {
        args[i] = (thread_arg){a, 1000u + (uint64_t)i * 7919u, 0};
        CHECK(pthread_create(&th[i], NULL, thread_main, &args[i]) == 0);
    }
    int bad = 0;
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        bad += args[i].bad;
    }
    CHECK(bad == 0);
    weft_memory_stats s = stats(a);
    CHECK(s.bytes_in_use == 0 && s.n_allocs >= 4 * 1500);
    weft_block_alloc_empty_cache(a);
    CHECK(d.used == 0 && d.n_alloc == d.n_free);
    weft_block_alloc_destroy(a);
}

int main(void) {
    RUN(test_rounding_and_pools);
    RUN(test_split);
    RUN(test_merge);
    RUN(test_best_fit);
    RUN(test_streams);
    RUN(test_record_stream);
    RUN(test_forget_stream);
    RUN(test_oom);
    RUN(test_stats);
    RUN(test_kinds);
    RUN(test_bad_input);
    RUN(test_destroy);
    RUN(test_stress);
    RUN(test_threads);
    return wt_summary();
}
