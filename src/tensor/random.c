// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011).
// Element i of a call draws from counter (offset + i) under key = seed, so the
// values do not depend on the number of threads or on the device.
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "philox.h"
#include "tensor_impl.h"

struct weft_generator {
    uint64_t seed, offset;
    pthread_mutex_t mu;
};

static weft_generator g_default = {0x5eedULL, 0, PTHREAD_MUTEX_INITIALIZER};

void weft_philox(uint64_t key, uint64_t chi, uint64_t clo, uint32_t out[4]) { weft_philox4x32(key, chi, clo, out); }

weft_generator *weft_generator_create(uint64_t seed) {
    weft_generator *g = malloc(sizeof *g);
    if (!g) return weft_error_null(WEFT_ERR_OOM, "generator_create: out of memory");
    g->seed = seed;
    g->offset = 0;
    pthread_mutex_init(&g->mu, NULL);
    return g;
}
void weft_generator_free(weft_generator *g) {
    if (!g || g == &g_default) return;
    pthread_mutex_destroy(&g->mu);
    free(g);
}
weft_generator *weft_generator_default(void) { return &g_default; }
void weft_generator_set_state(weft_generator *g, uint64_t seed, uint64_t offset) {
    if (!g) g = &g_default;
    pthread_mutex_lock(&g->mu);
    g->seed = seed;
    g->offset = offset;
    pthread_mutex_unlock(&g->mu);
}
void weft_generator_get_state(const weft_generator *g, uint64_t *seed, uint64_t *offset) {
    if (!g) g = &g_default;
    if (seed) *seed = g->seed;
    if (offset) *offset = g->offset;
}
void weft_manual_seed(uint64_t seed) { weft_generator_set_state(&g_default, seed, 0); }

void weft_generator_reserve(weft_generator *g, uint64_t n, uint64_t *seed, uint64_t *offset) {
    if (!g) g = &g_default;
    pthread_mutex_lock(&g->mu);
    *seed = g->seed;
    *offset = g->offset;
    g->offset += n;
    pthread_mutex_unlock(&g->mu);
}


enum { R_UNIFORM, R_NORMAL };

static weft_status fill_random(weft_tensor *t, int kind, double p0, double p1, weft_generator *g) {
    if (!t) return weft_error(WEFT_ERR_ARG, "random fill: NULL tensor");
    if (!weft_dtype_is_float((weft_dtype)t->dtype) && kind == R_NORMAL)
        return weft_error(WEFT_ERR_DTYPE, "normal_: needs a floating dtype, got %s", weft_dtype_name((weft_dtype)t->dtype));
    weft_tensor *h = t;
    if (t->device.type != WEFT_CPU || !weft_tensor_is_contiguous(t)) {
        h = weft_tensor_new(t->ndim, t->sizes, (weft_dtype)t->dtype, WEFT_DEVICE_CPU);
        if (!h) return weft_last_status();
    }
    uint64_t seed, off;
    weft_generator_reserve(g, (uint64_t)t->numel, &seed, &off);
    char *p = weft_tensor_ptr(h);
    weft_dtype dt = (weft_dtype)h->dtype;
    bool integer = !weft_dtype_is_float(dt);
    // Uniform floats are drawn on the dtype's significand grid (k * 2^-bits):
    // a 53-bit u just below 1 would otherwise round up to 1.0 when stored as
    // f32 (u > 1 - 2^-25), f16 or bf16, outside [0, 1).
    int bits = dt == WEFT_F32 ? 24 : dt == WEFT_F16 ? 11 : dt == WEFT_BF16 ? 8 : 53;
    const double grid = ldexp(1.0, bits);
    int64_t n = h->numel;
#pragma omp parallel for if (n > 65536) num_threads(weft_num_threads())
    for (int64_t i = 0; i < n; i++) {
        uint32_t w[4];
        weft_philox(seed, 0, off + (uint64_t)i, w);
        double v;
        if (kind == R_UNIFORM) {
            double u = weft_philox_u01(w[0], w[1]);
            if (integer) {
                v = floor(p0 + u * (p1 - p0));
                if (v >= p1) v = p1 - 1; // wide ranges: p0 + u (p1 - p0) can round up to p1
            } else {
                v = p0 + floor(u * grid) / grid * (p1 - p0);
            }
        } else { // Box-Muller
            double u1 = weft_philox_u01(w[0], w[1]), u2 = weft_philox_u01(w[2], w[3]);
            v = p0 + p1 * sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
        }
        weft_store_f64(p, dt, i, v);
        // [lo, hi) with general bounds: the value rounded to the dtype may still reach hi
        if (kind == R_UNIFORM && !integer && weft_load_f64(p, dt, i) >= p1) weft_store_f64(p, dt, i, p0);
    }
    weft_status st = WEFT_OK;
    if (h != t) {
        st = weft_tensor_copy_(t, h);
        weft_tensor_free(h);
    }
    return st;
}

weft_status weft_tensor_uniform_(weft_tensor *t, double lo, double hi, weft_generator *g) {
    return fill_random(t, R_UNIFORM, lo, hi, g);
}
weft_status weft_tensor_normal_(weft_tensor *t, double mean, double std, weft_generator *g) {
    return fill_random(t, R_NORMAL, mean, std, g);
}

static weft_tensor *make_random(int ndim, const int64_t *sizes, weft_dtype dt, int kind, double a, double b,
                                weft_generator *g) {
    weft_tensor *t = weft_tensor_empty(ndim, sizes, dt);
    if (t && fill_random(t, kind, a, b, g) != WEFT_OK) {
        weft_tensor_free(t);
        return NULL;
    }
    return t;
}

weft_tensor *weft_tensor_rand(int ndim, const int64_t *sizes, weft_dtype dt, weft_generator *g) {
    if (!weft_dtype_is_float(dt)) return weft_error_null(WEFT_ERR_DTYPE, "rand: needs a floating dtype");
    return make_random(ndim, sizes, dt, R_UNIFORM, 0, 1, g);
}
weft_tensor *weft_tensor_randn(int ndim, const int64_t *sizes, weft_dtype dt, weft_generator *g) {
    if (!weft_dtype_is_float(dt)) return weft_error_null(WEFT_ERR_DTYPE, "randn: needs a floating dtype");
    return make_random(ndim, sizes, dt, R_NORMAL, 0, 1, g);
}
weft_tensor *weft_tensor_randint(int ndim, const int64_t *sizes, int64_t lo, int64_t hi, weft_dtype dt,
                                 weft_generator *g) {
    if (hi <= lo) return weft_error_null(WEFT_ERR_ARG, "randint: empty range [%lld, %lld)", (long long)lo, (long long)hi);
    if (weft_dtype_is_float(dt)) return weft_error_null(WEFT_ERR_DTYPE, "randint: needs an integer dtype");
    return make_random(ndim, sizes, dt, R_UNIFORM, (double)lo, (double)hi, g);
}
