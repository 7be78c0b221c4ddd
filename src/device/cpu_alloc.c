// CPU caching allocator.
//
// Requests are rounded up to size classes (four per power of two, so at most
// 25% slack); freed blocks go on a per-class free list and are handed out
// again without a system call. Cached bytes are capped (WEFT_CPU_CACHE_MB,
// default min(4 GiB, RAM/4)); past the cap blocks go back to the system.
// WEFT_NO_CACHING=1 turns the cache off (every free goes to the system), which
// makes ASan/valgrind reports point at the real owner of a block.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../core/core_impl.h"
#include "device_impl.h"

#define HDR 64 // header before each block; keeps the user pointer 64-byte aligned
#define N_CLASSES 256

typedef struct block_hdr {
    struct block_hdr *next;
    size_t cls_size; // usable bytes of the class
    int cls;
    int kind;       // weft_memory_kind while live
    uint32_t magic; // BLOCK_MAGIC: a block of this allocator (memory_tag checks it)
} block_hdr;
#define BLOCK_MAGIC 0x77656674u // "weft"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static block_hdr *g_free[N_CLASSES];
static weft_memory_stats g_stats;
static size_t g_cap;
static int g_caching = -1; // -1: not read yet

static void read_env(void) {
    const char *s = getenv("WEFT_NO_CACHING");
    g_caching = !(s && *s && *s != '0');
    const char *c = getenv("WEFT_CPU_CACHE_MB");
    if (c && *c) {
        g_cap = (size_t)atoll(c) << 20;
    } else {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        size_t ram = (pages > 0 && psz > 0) ? (size_t)pages * (size_t)psz : ((size_t)8 << 30);
        g_cap = ram / 4;
        if (g_cap > ((size_t)4 << 30)) g_cap = (size_t)4 << 30;
    }
}

// Class index and rounded size: 64, 128, ... then 4 steps per power of two.
static int size_class(size_t n, size_t *rounded) {
    if (n <= 64) {
        *rounded = 64;
        return 0;
    }
    int lg = 63 - __builtin_clzll((unsigned long long)(n - 1)); // 2^lg < n <= 2^(lg+1)
    size_t base = (size_t)1 << lg, step = base >> 2;
    size_t k = (n - base + step - 1) / step; // 1..4
    *rounded = base + k * step;
    int cls = 1 + (lg - 6) * 4 + (int)(k - 1);
    return cls < N_CLASSES ? cls : -1; // -1: too large to classify (never cached)
}

void *weft_cpu_alloc(size_t nbytes) {
    pthread_mutex_lock(&g_mu);
    if (WEFT_UNLIKELY(g_caching < 0)) read_env();
    size_t rounded;
    int cls = size_class(nbytes, &rounded);
    g_stats.n_allocs++;
    block_hdr *h = NULL;
    if (cls >= 0 && g_free[cls]) {
        h = g_free[cls];
        g_free[cls] = h->next;
        g_stats.bytes_cached -= h->cls_size;
        g_stats.n_cache_hits++;
    }
    if (!h) {
        if (cls < 0) rounded = nbytes;
        pthread_mutex_unlock(&g_mu);
        size_t total = HDR + ((rounded + 63) & ~(size_t)63);
        if (rounded >= ((size_t)4 << 20)) {
            // Big buffers: 2 MiB aligned and backed by transparent huge pages
            // (fewer TLB misses and page faults when streaming).
            const size_t huge = (size_t)2 << 20;
            total = (total + huge - 1) & ~(huge - 1);
            h = aligned_alloc(huge, total);
            if (h) madvise(h, total, MADV_HUGEPAGE);
        } else {
            h = aligned_alloc(64, total);
        }
        if (!h) return NULL;
        h->cls = cls;
        h->cls_size = rounded;
        pthread_mutex_lock(&g_mu);
        g_stats.n_system_allocs++;
    }
    g_stats.bytes_in_use += h->cls_size;
    if (g_stats.bytes_in_use > g_stats.peak_bytes_in_use) g_stats.peak_bytes_in_use = g_stats.bytes_in_use;
    h->kind = WEFT_MEM_ACTIVATIONS;
    h->magic = BLOCK_MAGIC;
    weft_mem_kind_in(&g_stats, WEFT_MEM_ACTIVATIONS, h->cls_size);
    pthread_mutex_unlock(&g_mu);
    return (char *)h + HDR;
}

void weft_cpu_free(void *p) {
    if (!p) return;
    block_hdr *h = (block_hdr *)((char *)p - HDR);
    pthread_mutex_lock(&g_mu);
    g_stats.bytes_in_use -= h->cls_size;
    weft_mem_kind_out(&g_stats, h->kind, h->cls_size);
    if (g_caching && h->cls >= 0 && g_stats.bytes_cached + h->cls_size <= g_cap) {
        h->next = g_free[h->cls];
        g_free[h->cls] = h;
        g_stats.bytes_cached += h->cls_size;
        pthread_mutex_unlock(&g_mu);
        return;
    }
    g_stats.n_system_frees++;
    pthread_mutex_unlock(&g_mu);
    free(h);
}

void weft_cpu_memory_stats(weft_memory_stats *out) {
    pthread_mutex_lock(&g_mu);
    *out = g_stats;
    pthread_mutex_unlock(&g_mu);
}

void weft_cpu_memory_reset_peak(void) {
    pthread_mutex_lock(&g_mu);
    g_stats.peak_bytes_in_use = g_stats.bytes_in_use;
    weft_mem_kind_reset_peaks(&g_stats);
    pthread_mutex_unlock(&g_mu);
}

// p: a live block of this allocator (the caller's word, as for free; the
// magic only catches a backend that lent out its own memory under this table).
void weft_cpu_memory_tag(void *p, weft_memory_kind kind) {
    if (!p) return;
    block_hdr *h = (block_hdr *)((char *)p - HDR);
    if (h->magic != BLOCK_MAGIC) return;
    pthread_mutex_lock(&g_mu);
    weft_mem_kind_out(&g_stats, h->kind, h->cls_size);
    h->kind = kind;
    weft_mem_kind_in(&g_stats, kind, h->cls_size);
    pthread_mutex_unlock(&g_mu);
}

void weft_cpu_memory_empty_cache(void) {
    pthread_mutex_lock(&g_mu);
    block_hdr *all = NULL;
    for (int c = 0; c < N_CLASSES; c++) {
        while (g_free[c]) {
            block_hdr *h = g_free[c];
            g_free[c] = h->next;
            h->next = all;
            all = h;
            g_stats.n_system_frees++;
        }
    }
    g_stats.bytes_cached = 0;
    pthread_mutex_unlock(&g_mu);
    while (all) {
        block_hdr *n = all->next;
        free(all);
        all = n;
    }
}
