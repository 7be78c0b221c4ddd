// oneDNN's engine, stream and primitive cache (onednn.h).
#ifdef WEFT_HAVE_ONEDNN
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "onednn.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t g_engine;
static dnnl_stream_t g_stream;
static pthread_mutex_t g_run_mu = PTHREAD_MUTEX_INITIALIZER;

static void create_engine(void) {
    if (dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success) g_engine = NULL;
    else if (dnnl_stream_create(&g_stream, g_engine, dnnl_stream_default_flags) != dnnl_success) g_stream = NULL;
}

dnnl_engine_t weft_onednn_engine(void) {
    pthread_once(&g_once, create_engine);
    return g_stream ? g_engine : NULL;
}

dnnl_stream_t weft_onednn_stream(void) { return weft_onednn_engine() ? g_stream : NULL; }

bool weft_onednn_run(dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args) {
    if (!p || !weft_onednn_engine()) return false;
    pthread_mutex_lock(&g_run_mu);
    bool ok = dnnl_primitive_execute(p, g_stream, nargs, args) == dnnl_success && dnnl_stream_wait(g_stream) == dnnl_success;
    pthread_mutex_unlock(&g_run_mu);
    return ok;
}

// ---- primitive cache: a hash table of (key bytes -> primitive or a remembered failure) ----

#define CACHE_N 1024 // slots; a training run uses tens of shapes
#define KEY_MAX 256  // bytes of a key at most

typedef struct entry {
    size_t size; // 0: empty slot
    unsigned char key[KEY_MAX];
    dnnl_primitive_t prim; // NULL: make failed for this key
} entry;

static entry g_cache[CACHE_N];
static int g_n;
static pthread_mutex_t g_cache_mu = PTHREAD_MUTEX_INITIALIZER;

static size_t slot_of(const void *key, size_t size) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++) h = (h ^ ((const unsigned char *)key)[i]) * 1099511628211ull;
    size_t s = (size_t)(h % CACHE_N);
    while (g_cache[s].size && (g_cache[s].size != size || memcmp(g_cache[s].key, key, size))) s = (s + 1) % CACHE_N;
    return s; // the key's slot, or the empty one where it goes (the table never fills: see g_n)
}

dnnl_primitive_t weft_onednn_primitive(const void *key, size_t key_size,
                                       dnnl_primitive_t (*make)(const void *key, void *ctx), void *ctx) {
    if (key_size == 0 || key_size > KEY_MAX || !weft_onednn_engine()) return NULL;
    pthread_mutex_lock(&g_cache_mu);
    size_t s = slot_of(key, key_size);
    if (g_cache[s].size) {
        dnnl_primitive_t p = g_cache[s].prim;
        pthread_mutex_unlock(&g_cache_mu);
        return p;
    }
    // Made under the lock: two threads never build the same primitive, and
    // making one is rare (once per shape).
    dnnl_primitive_t p = make(key, ctx);
    if (g_n < CACHE_N / 2) { // half full at most, so probing stays short and always ends
        g_cache[s].size = key_size;
        memcpy(g_cache[s].key, key, key_size);
        g_cache[s].prim = p;
        g_n++;
        pthread_mutex_unlock(&g_cache_mu);
        return p;
    }
    pthread_mutex_unlock(&g_cache_mu);
    if (p) dnnl_primitive_destroy(p); // not cached: a shape past the table's size falls back
    return NULL;
}
#else
typedef int weft_onednn_unused; // ISO C wants a translation unit to declare something
#endif
