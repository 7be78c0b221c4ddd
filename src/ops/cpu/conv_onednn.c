// conv2d on the CPU through oneDNN's convolution primitives, where that
// measures faster than im2col + GEMM (conv.c). See conv_onednn.h.
//
// Why: im2col copies every input pixel KH*KW times and runs one GEMM per
// image; oneDNN's JIT convolutions (AVX-512 / AMX) work on blocked layouts
// without the column matrix, which is what PyTorch runs on the CPU.
//
// Primitives. Each direction (forward with optional bias, backward data,
// backward weights) is a oneDNN primitive created for one shape. Its memory
// descriptors say format_tag_any, so oneDNN picks its internal layouts (e.g.
// nChw16c, OIhw16i16o); the user's tensors (NCHW or NHWC activations, OIHW /
// GOIHW weights, as weft stores them) are reordered into them on the way in
// and out only where they differ. Creating a primitive costs milliseconds
// (implementation dispatch, JIT), far more than running a small one, so
// primitives live in a bounded cache keyed by shape, attrs, dtype, direction
// and thread count, shared by all threads under a mutex (entries are
// reference-counted: one evicted while another thread runs it is destroyed
// by that thread). Scratchpads are user-managed (allocated per call from the
// caching allocator), so a primitive may run on several threads at once.
// One CPU engine and stream serve the process (created once).
//
// Threads: this oneDNN is built on OpenMP and uses omp_get_max_threads(),
// which weft sets to WEFT_NUM_THREADS (core/runtime.c); inside an OpenMP
// parallel region (the graph executor's co-scheduled pairs) conv2d runs
// im2col on the calling thread instead, as the GEMM does.
//
// Choice (WEFT_CONV=auto, the default): per key, the first call runs both
// paths on the op's own operands, one warm-up each, then the best of three
// alternating rounds; oneDNN is kept only when it is more than 10% faster.
// The chosen path runs last, so the output is its result. Choices live for
// the process. WEFT_CONV=im2col or onednn forces one (f64 always im2col:
// oneDNN has no f64 convolution). A oneDNN failure of any kind falls back to
// im2col, whose errors are the op's.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef WEFT_HAVE_ONEDNN
#include <dnnl.h>
#endif

#include "../../device/device_impl.h"
#include "conv_onednn.h"
#include "onednn.h"
#include "iter.h"

// ---- the backend setting ----

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static weft_conv_backend g_backend;
static int64_t g_runs;

static void read_env(void) {
    const char *e = getenv("WEFT_CONV");
    if (e && !strcmp(e, "im2col")) g_backend = WEFT_CONV_IM2COL;
    else if (e && !strcmp(e, "onednn")) g_backend = WEFT_CONV_ONEDNN;
    else g_backend = WEFT_CONV_AUTO;
}

void weft_cpu_conv_set_backend(weft_conv_backend b) {
    pthread_once(&g_once, read_env);
    __atomic_store_n(&g_backend, b, __ATOMIC_RELAXED);
}

weft_conv_backend weft_cpu_conv_get_backend(void) {
    pthread_once(&g_once, read_env);
    return __atomic_load_n(&g_backend, __ATOMIC_RELAXED);
}

bool weft_cpu_conv_have_onednn(void) {
#ifdef WEFT_HAVE_ONEDNN
    return true;
#else
    return false;
#endif
}

int64_t weft_cpu_conv_onednn_runs(void) { return __atomic_load_n(&g_runs, __ATOMIC_RELAXED); }

// ---- the key: one convolution problem ----

typedef struct conv_key {
    int64_t x[4], w[4], y[4]; // (N,C,H,W) input, (O,C/G,KH,KW) weight, (N,O,OH,OW) output: logical sizes
    int64_t at[7];            // stride (h,w), padding (h,w), dilation (h,w), groups
    int32_t dir, dtype, nhwc, bias, threads, pad;
} conv_key;

// The key of a, or false when oneDNN does not apply: strided or empty operands.
static bool make_key(weft_conv_dir dir, const weft_op_args *a, conv_key *k) {
    memset(k, 0, sizeof *k); // no undefined padding bytes: keys are compared with memcmp
    const weft_tensor *x, *w, *y;
    if (dir == WEFT_CONV_FWD) x = a->in[0], w = a->in[1], y = a->out[0];
    else if (dir == WEFT_CONV_BWD_DATA) y = a->in[0], w = a->in[1], x = a->out[0];
    else y = a->in[0], x = a->in[1], w = a->out[0];
    const weft_tensor *b = dir == WEFT_CONV_FWD && a->n_in > 2 ? a->in[2] : NULL;
    if (!weft_tensor_is_contiguous(x) || !weft_tensor_is_contiguous(w) || !weft_tensor_is_contiguous(y) ||
        (b && !weft_tensor_is_contiguous(b)) || x->numel == 0 || w->numel == 0 || y->numel == 0)
        return false;
    k->nhwc = dir == WEFT_CONV_FWD && a->attrs->i[7] == 1; // the backward ops are NCHW
    static const int from_nhwc[4] = {0, 3, 1, 2};
    for (int d = 0; d < 4; d++) {
        int s = k->nhwc ? from_nhwc[d] : d;
        k->x[d] = x->sizes[s], k->y[d] = y->sizes[s], k->w[d] = w->sizes[d];
    }
    for (int i = 0; i < 7; i++) k->at[i] = a->attrs->i[i];
    k->dir = (int32_t)dir, k->dtype = x->dtype, k->bias = b != NULL;
#ifdef _OPENMP
    k->threads = omp_get_max_threads(); // what oneDNN's OpenMP runtime will use
#endif
    return true;
}

// ---- oneDNN ----

#ifdef WEFT_HAVE_ONEDNN

// The process's engine and stream are the shared ones (onednn.h).

// Execute arguments of the two inputs and the output, per direction
// (conv_onednn.h lists the operands).
static const int k_args[3][3] = {
    {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
    {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
    {DNNL_ARG_DIFF_DST, DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS},
};

// A primitive and the reorders between the user's layouts and its own.
// Slot r: 0, 1 the inputs, 2 the output (conv_onednn.h); 3 the bias.
typedef struct prim {
    conv_key k;
    dnnl_primitive_t conv, reorder[3]; // reorder[r]: user -> inner (inputs), inner -> user (output); NULL: same
    dnnl_memory_desc_t user[4], inner[3], scratch_md[4]; // scratch_md[0] conv, [1 + r] reorder r
    size_t inner_off[3], scratch_bytes, buf_bytes;       // one buffer: inner copies, then the scratchpad
    int refs;
    uint64_t used;
} prim;

#define ALIGN64(n) (((n) + 63) & ~(size_t)63)

static void prim_destroy(prim *p) {
    if (!p) return;
    if (p->conv) dnnl_primitive_destroy(p->conv);
    for (int r = 0; r < 3; r++)
        if (p->reorder[r]) dnnl_primitive_destroy(p->reorder[r]);
    free(p);
}

static dnnl_data_type_t dnnl_dt(int dt) { return dt == WEFT_BF16 ? dnnl_bf16 : dnnl_f32; }

// User descriptors: activations (N,C,H,W) as NCHW or NHWC; the weight
// (O,C/G,KH,KW), which is (G,O/G,C/G,KH,KW) goihw when grouped; bias (O).
static bool user_mds(const conv_key *k, dnnl_memory_desc_t *x, dnnl_memory_desc_t *w, dnnl_memory_desc_t *y,
                     dnnl_memory_desc_t *b, bool any) {
    dnnl_data_type_t dt = dnnl_dt(k->dtype);
    int64_t G = k->at[6];
    dnnl_dims_t xd = {k->x[0], k->x[1], k->x[2], k->x[3]}, yd = {k->y[0], k->y[1], k->y[2], k->y[3]};
    dnnl_dims_t wd = {k->w[0], k->w[1], k->w[2], k->w[3]}, wd5 = {G, k->w[0] / G, k->w[1], k->w[2], k->w[3]};
    dnnl_dims_t bd = {k->w[0]};
    dnnl_format_tag_t act = any ? dnnl_format_tag_any : k->nhwc ? dnnl_nhwc : dnnl_nchw;
    dnnl_format_tag_t wt = any ? dnnl_format_tag_any : G > 1 ? dnnl_goihw : dnnl_oihw;
    return dnnl_memory_desc_init_by_tag(x, 4, xd, dt, act) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(y, 4, yd, dt, act) == dnnl_success &&
           (G > 1 ? dnnl_memory_desc_init_by_tag(w, 5, wd5, dt, wt)
                  : dnnl_memory_desc_init_by_tag(w, 4, wd, dt, wt)) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(b, 1, bd, dt, dnnl_a) == dnnl_success;
}

// The convolution descriptor of k for direction dir (FWD with prop_kind prop).
static bool conv_desc(const conv_key *k, int dir, dnnl_prop_kind_t prop, dnnl_convolution_desc_t *d) {
    dnnl_memory_desc_t x, w, y, b;
    if (!user_mds(k, &x, &w, &y, &b, true)) return false;
    dnnl_dims_t stride = {k->at[0], k->at[1]}, pad = {k->at[2], k->at[3]};
    dnnl_dims_t dil = {k->at[4] - 1, k->at[5] - 1}; // oneDNN counts the gaps between taps
    // Symmetric padding: the right side may be more than needed; the output
    // size formula (floor division) is the same as weft's.
    dnnl_status_t s;
    if (dir == WEFT_CONV_FWD)
        s = dnnl_dilated_convolution_forward_desc_init(d, prop, dnnl_convolution_direct, &x, &w, k->bias ? &b : NULL, &y,
                                                       stride, dil, pad, pad);
    else if (dir == WEFT_CONV_BWD_DATA)
        s = dnnl_dilated_convolution_backward_data_desc_init(d, dnnl_convolution_direct, &x, &w, &y, stride, dil, pad,
                                                             pad);
    else
        s = dnnl_dilated_convolution_backward_weights_desc_init(d, dnnl_convolution_direct, &x, &w, NULL, &y, stride,
                                                                dil, pad, pad);
    return s == dnnl_success;
}

static size_t scratch_of(const_dnnl_primitive_desc_t pd, dnnl_memory_desc_t *md) {
    const dnnl_memory_desc_t *m = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (m) *md = *m;
    else memset(md, 0, sizeof *md);
    return m ? dnnl_memory_desc_get_size(m) : 0;
}

// Creates the primitive of k and its reorders; NULL on any failure.
static prim *prim_create(const conv_key *k) {
    if (!weft_onednn_engine()) return NULL;
    prim *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->k = *k;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t hint = NULL, pd = NULL;
    dnnl_convolution_desc_t d;
    bool ok = dnnl_primitive_attr_create(&attr) == dnnl_success &&
              dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    if (ok && k->dir != WEFT_CONV_FWD) // the backward primitives are chosen to match a forward one
        ok = conv_desc(k, WEFT_CONV_FWD, dnnl_forward_training, &d) &&
             dnnl_primitive_desc_create(&hint, &d, attr, weft_onednn_engine(), NULL) == dnnl_success;
    ok = ok && conv_desc(k, k->dir, dnnl_forward_inference, &d) &&
         dnnl_primitive_desc_create(&pd, &d, attr, weft_onednn_engine(), hint) == dnnl_success &&
         dnnl_primitive_create(&p->conv, pd) == dnnl_success;
    // User layouts in slot order: FWD (x, w, y), BWD_DATA (gy, w, dx), BWD_WEIGHT (gy, x, dw).
    dnnl_memory_desc_t x, w, y;
    ok = ok && user_mds(k, &x, &w, &y, &p->user[3], false);
    if (ok) {
        const dnnl_memory_desc_t *u[3][3] = {{&x, &w, &y}, {&y, &w, &x}, {&y, &x, &w}};
        for (int r = 0; r < 3; r++) p->user[r] = *u[k->dir][r];
        p->scratch_bytes = scratch_of(pd, &p->scratch_md[0]);
    }
    size_t off = 0;
    for (int r = 0; ok && r < 3; r++) {
        const dnnl_memory_desc_t *m = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, k_args[k->dir][r]);
        ok = m != NULL;
        if (!ok) break;
        p->inner[r] = *m;
        if (dnnl_memory_desc_equal(&p->user[r], m)) continue;
        const dnnl_memory_desc_t *from = r < 2 ? &p->user[r] : m, *to = r < 2 ? m : &p->user[r];
        dnnl_primitive_desc_t rpd = NULL;
        ok = dnnl_reorder_primitive_desc_create(&rpd, from, weft_onednn_engine(), to, weft_onednn_engine(), attr) == dnnl_success &&
             dnnl_primitive_create(&p->reorder[r], rpd) == dnnl_success;
        if (ok) {
            size_t s = scratch_of(rpd, &p->scratch_md[1 + r]);
            if (s > p->scratch_bytes) p->scratch_bytes = s;
            p->inner_off[r] = off;
            off += ALIGN64(dnnl_memory_desc_get_size(m));
        }
        if (rpd) dnnl_primitive_desc_destroy(rpd);
    }
    p->buf_bytes = off + p->scratch_bytes;
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (hint) dnnl_primitive_desc_destroy(hint);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (!ok) {
        prim_destroy(p);
        return NULL;
    }
    return p;
}

// Runs p on the user buffers ptr[0..2] (slot order) and bias (FWD, or NULL).
static bool prim_exec(const prim *p, void *const ptr[3], void *bias) {
    char *buf = p->buf_bytes ? weft_cpu_alloc(p->buf_bytes) : NULL;
    if (p->buf_bytes && !buf) return false;
    char *scratch = buf + (p->buf_bytes - p->scratch_bytes);
    dnnl_memory_t um[3] = {0}, im[3] = {0}, bm = NULL, sm[4] = {0};
    bool ok = true;
    for (int r = 0; ok && r < 3; r++) {
        ok = dnnl_memory_create(&um[r], &p->user[r], weft_onednn_engine(), ptr[r]) == dnnl_success;
        if (ok && p->reorder[r])
            ok = dnnl_memory_create(&im[r], &p->inner[r], weft_onednn_engine(), buf + p->inner_off[r]) == dnnl_success;
    }
    if (ok && bias) ok = dnnl_memory_create(&bm, &p->user[3], weft_onednn_engine(), bias) == dnnl_success;
    for (int i = 0; ok && i < 4; i++) // scratchpads share one buffer: the primitives run one after another
        if (i == 0 || p->reorder[i - 1])
            ok = dnnl_memory_create(&sm[i], &p->scratch_md[i], weft_onednn_engine(), scratch) == dnnl_success;
    // Inputs into the primitive's layouts.
    for (int r = 0; ok && r < 2; r++) {
        if (!p->reorder[r]) continue;
        dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, um[r]}, {DNNL_ARG_TO, im[r]}, {DNNL_ARG_SCRATCHPAD, sm[1 + r]}};
        ok = dnnl_primitive_execute(p->reorder[r], weft_onednn_stream(), 3, args) == dnnl_success;
    }
    if (ok) {
        dnnl_exec_arg_t args[5];
        int n = 0;
        for (int r = 0; r < 3; r++) args[n++] = (dnnl_exec_arg_t){k_args[p->k.dir][r], im[r] ? im[r] : um[r]};
        if (bm) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, bm};
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, sm[0]};
        ok = dnnl_primitive_execute(p->conv, weft_onednn_stream(), n, args) == dnnl_success;
    }
    if (ok && p->reorder[2]) { // the output back into the user's layout
        dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, im[2]}, {DNNL_ARG_TO, um[2]}, {DNNL_ARG_SCRATCHPAD, sm[3]}};
        ok = dnnl_primitive_execute(p->reorder[2], weft_onednn_stream(), 3, args) == dnnl_success;
    }
    if (ok) ok = dnnl_stream_wait(weft_onednn_stream()) == dnnl_success;
    for (int r = 0; r < 3; r++) {
        if (um[r]) dnnl_memory_destroy(um[r]);
        if (im[r]) dnnl_memory_destroy(im[r]);
    }
    for (int i = 0; i < 4; i++)
        if (sm[i]) dnnl_memory_destroy(sm[i]);
    if (bm) dnnl_memory_destroy(bm);
    weft_cpu_free(buf);
    return ok;
}

// ---- the primitive cache ----

#define PRIM_CACHE_N 128
static prim *g_prims[PRIM_CACHE_N];
static uint64_t g_tick;
static pthread_mutex_t g_prim_mu = PTHREAD_MUTEX_INITIALIZER;

static void prim_release(prim *p) {
    pthread_mutex_lock(&g_prim_mu);
    bool last = --p->refs == 0;
    pthread_mutex_unlock(&g_prim_mu);
    if (last) prim_destroy(p);
}

// The cached primitive of k (created if new), held until prim_release.
static prim *prim_get(const conv_key *k) {
    pthread_mutex_lock(&g_prim_mu);
    for (int i = 0; i < PRIM_CACHE_N; i++)
        if (g_prims[i] && !memcmp(&g_prims[i]->k, k, sizeof *k)) {
            prim *p = g_prims[i];
            p->refs++, p->used = ++g_tick;
            pthread_mutex_unlock(&g_prim_mu);
            return p;
        }
    pthread_mutex_unlock(&g_prim_mu);
    prim *p = prim_create(k); // outside the lock: slow
    if (!p) return NULL;
    prim *evict = NULL;
    pthread_mutex_lock(&g_prim_mu);
    for (int i = 0; i < PRIM_CACHE_N; i++) // another thread created it meanwhile: use that one
        if (g_prims[i] && !memcmp(&g_prims[i]->k, k, sizeof *k)) {
            prim *q = g_prims[i];
            q->refs++, q->used = ++g_tick;
            pthread_mutex_unlock(&g_prim_mu);
            prim_destroy(p);
            return q;
        }
    int slot = 0; // an empty slot, else the least recently used
    for (int i = 0; i < PRIM_CACHE_N; i++) {
        if (!g_prims[i]) {
            slot = i;
            break;
        }
        if (g_prims[i]->used < g_prims[slot]->used) slot = i;
    }
    if (g_prims[slot] && --g_prims[slot]->refs == 0) evict = g_prims[slot];
    g_prims[slot] = p;
    p->refs = 2, p->used = ++g_tick; // the cache's reference and the caller's
    pthread_mutex_unlock(&g_prim_mu);
    prim_destroy(evict);
    return p;
}

// Computes a through oneDNN; false when it did not (the output is then undefined).
static bool onednn_run(const conv_key *k, const weft_op_args *a) {
    prim *p = prim_get(k);
    if (!p) return false;
    void *ptr[3] = {weft_tensor_ptr(a->in[0]), weft_tensor_ptr(a->in[1]), weft_tensor_ptr(a->out[0])};
    void *bias = k->bias ? weft_tensor_ptr(a->in[2]) : NULL;
    bool ok = prim_exec(p, ptr, bias);
    prim_release(p);
    if (ok) __atomic_add_fetch(&g_runs, 1, __ATOMIC_RELAXED);
    return ok;
}

#else

static bool onednn_run(const conv_key *k, const weft_op_args *a) {
    (void)k, (void)a;
    return false;
}

#endif

bool weft_cpu_conv_have_onednn_bf16(void) {
#ifdef WEFT_HAVE_ONEDNN
    static int have = -1; // decided once: can oneDNN build a bf16 convolution on this CPU (AVX512-BF16, AMX)?
    int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (h < 0) {
        conv_key k; // (1,16,8,8) * (16,16,1,1), stride 1, no padding, dilation 1, one group
        memset(&k, 0, sizeof k);
        for (int d = 0; d < 4; d++) k.x[d] = k.w[d] = k.y[d] = 1;
        k.x[1] = k.w[0] = k.w[1] = k.y[1] = 16, k.x[2] = k.x[3] = k.y[2] = k.y[3] = 8;
        k.at[0] = k.at[1] = k.at[4] = k.at[5] = k.at[6] = 1;
        k.dtype = WEFT_BF16;
        prim *p = prim_create(&k);
        h = p != NULL;
        prim_destroy(p);
        __atomic_store_n(&have, h, __ATOMIC_RELAXED);
    }
    return h;
#else
    return false;
#endif
}

// ---- bf16 on the im2col path ----

weft_status weft_cpu_conv_widened(const weft_op_args *a, weft_conv_kernel f32) {
    return a->in[0]->dtype == WEFT_BF16 ? weft_kernel_widened(a, f32) : f32(a);
}

// ---- auto: measured once per key ----

#define CHOICE_N 1024 // open addressing; when full, new keys run im2col unmeasured
static struct {
    conv_key k;
    int8_t used, onednn;
} g_choice[CHOICE_N];
static int g_choice_n;
static pthread_mutex_t g_choice_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t key_hash(const conv_key *k) {
    const unsigned char *b = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

// The slot of k, or of the empty slot where it would go; -1 when full.
static int choice_slot(const conv_key *k) {
    for (uint64_t i = key_hash(k) % CHOICE_N, n = 0; n < CHOICE_N; i = (i + 1) % CHOICE_N, n++)
        if (!g_choice[i].used || !memcmp(&g_choice[i].k, k, sizeof *k)) return (int)i;
    return -1;
}

// Times both paths on a (writing its output each time) and leaves the
// chosen path's result there. *onednn receives the choice.
static weft_status measure(const conv_key *k, const weft_op_args *a, weft_conv_kernel im2col, bool *onednn) {
    double best[2] = {1e30, 1e30};
    *onednn = false;
    for (int round = 0; round < 4; round++) // round 0 warms up (primitive creation, caches)
        for (int lib = 0; lib < 2; lib++) {
            double t0 = weft_now_s();
            if (lib == 0) {
                weft_status st = weft_cpu_conv_widened(a, im2col);
                if (st != WEFT_OK) return st;
            } else if (!onednn_run(k, a)) {
                return weft_cpu_conv_widened(a, im2col);
            }
            double dt = weft_now_s() - t0;
            if (round > 0 && dt < best[lib]) best[lib] = dt;
        }
    *onednn = best[1] < 0.9 * best[0];
    return *onednn ? WEFT_OK : weft_cpu_conv_widened(a, im2col); // the last run was oneDNN's
}

weft_status weft_cpu_conv_run(weft_conv_dir dir, const weft_op_args *a, weft_conv_kernel im2col) {
    weft_conv_backend b = weft_cpu_conv_get_backend();
    int dt = a->in[0]->dtype;
    if (b == WEFT_CONV_IM2COL || !weft_cpu_conv_have_onednn() || (dt != WEFT_F32 && dt != WEFT_BF16))
        return weft_cpu_conv_widened(a, im2col);
#ifdef _OPENMP
    if (omp_in_parallel()) return weft_cpu_conv_widened(a, im2col);
#endif
    weft_num_threads(); // sets omp_set_num_threads(WEFT_NUM_THREADS) once, before the key reads it
    conv_key k;
    if (!make_key(dir, a, &k)) return weft_cpu_conv_widened(a, im2col);
    if (b == WEFT_CONV_ONEDNN) return onednn_run(&k, a) ? WEFT_OK : weft_cpu_conv_widened(a, im2col);

    pthread_mutex_lock(&g_choice_mu);
    int s = choice_slot(&k);
    int choice = s >= 0 && g_choice[s].used ? g_choice[s].onednn : -1;
    bool full = s < 0 || g_choice_n >= CHOICE_N - 1;
    pthread_mutex_unlock(&g_choice_mu);
    if (choice == 1) return onednn_run(&k, a) ? WEFT_OK : weft_cpu_conv_widened(a, im2col);
    if (choice == 0 || full) return weft_cpu_conv_widened(a, im2col);
    bool onednn;
    weft_status st = measure(&k, a, im2col, &onednn);
    if (st != WEFT_OK) return st;
    pthread_mutex_lock(&g_choice_mu);
    s = choice_slot(&k); // another thread may have measured it meanwhile: the first answer stays
    if (s >= 0 && !g_choice[s].used) {
        g_choice[s].k = k, g_choice[s].used = 1, g_choice[s].onednn = (int8_t)onednn;
        g_choice_n++;
    }
    pthread_mutex_unlock(&g_choice_mu);
    return WEFT_OK;
}
