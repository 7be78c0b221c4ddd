// Layout pass: run a conv2d in NHWC (conv attrs i[7] = 1) where that measures
// faster on the node's own shapes.
//
//   y = conv2d(x, w, b)  ->  xh = copy(permute(x, 0,2,3,1));  yh = conv2d(xh, w, b, NHWC);
//                            y = copy(permute(yh, 0,3,1,2))
//
// The output is converted back to a contiguous NCHW tensor: consumers (relu,
// pools, a flattening view) then run exactly as before. Left as a strided
// view, they read it slower and a view reader may fail; with the copy, the
// timing below sees every cost the rewrite adds.
// The decision is measured once per shape at optimisation time (auto-tune):
// both forms run on dummy data of the node's shapes, conversions included,
// and the pass rewrites only when NHWC is more than 10% faster. Decisions are
// cached per (shapes, attrs, dtype, device) for the life of the process. The
// dummy data lives on the graph's device (weft_graph_device), and a device
// run is timed up to its end (synchronised).
// WEFT_GRAPH_LAYOUT=nhwc / nchw forces the decision (tests, experiments).
//
// Boundaries: a conv whose input is already the NCHW copy of an NHWC conv
// output (conv directly after conv) reads the NHWC value without converting.
// Elementwise ops and pools between convs still see NCHW (each NHWC conv
// converts at both ends); see docs/graph.md for what is left.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../rewrite.h"

static const int64_t to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};

typedef struct layout_key {
    int64_t x[4], w[4], at[7];
    int dtype, bias;
    weft_device dev; // measured where the graph runs (its state's device)
    int32_t pad;     // no implicit padding: keys are compared with memcmp
} layout_key;

#define CACHE_N 64
static struct {
    layout_key k;
    int nhwc;
} cache[CACHE_N];
static int n_cache;
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;

static weft_tensor *apply1(const char *op, int n, weft_tensor **in, const weft_attrs *at) {
    weft_tensor *out = NULL;
    return weft_rw_eval(weft_op_find(op), n, in, at, &out) == WEFT_OK ? out : NULL;
}

// One forward in either form; returns seconds or -1.
static double time_once(bool nhwc, weft_tensor *x, weft_tensor *w, weft_tensor *b, const weft_attrs *at) {
    double t0 = weft_now_s();
    weft_tensor *in[3] = {x, w, b}, *y = NULL;
    if (!nhwc) {
        y = apply1("conv2d", b ? 3 : 2, in, at);
    } else {
        weft_attrs p = {0}, a2 = *at;
        memcpy(p.i, to_nhwc, sizeof to_nhwc);
        a2.i[7] = 1;
        weft_tensor *xp = apply1("permute", 1, &x, &p), *xc = xp ? apply1("copy", 1, &xp, NULL) : NULL;
        in[0] = xc;
        weft_tensor *yh = xc ? apply1("conv2d", b ? 3 : 2, in, &a2) : NULL;
        memcpy(p.i, to_nchw, sizeof to_nchw);
        weft_tensor *yv = yh ? apply1("permute", 1, &yh, &p) : NULL;
        y = yv ? apply1("copy", 1, &yv, NULL) : NULL;
        weft_tensor_free(xp), weft_tensor_free(xc), weft_tensor_free(yh), weft_tensor_free(yv);
    }
    double dt = weft_now_s() - t0;
    weft_tensor_free(y);
    return y ? dt : -1;
}

// One forward, waited for: a device queues its kernels and returns at once.
static double time_synced(bool nhwc, weft_tensor *x, weft_tensor *w, weft_tensor *b, const weft_attrs *at) {
    weft_device d = weft_tensor_device(x);
    if (weft_device_synchronize(d) != WEFT_OK) return -1;
    double t0 = weft_now_s(), t = time_once(nhwc, x, w, b, at);
    if (t < 0 || weft_device_synchronize(d) != WEFT_OK) return -1;
    return weft_now_s() - t0;
}

// Measure both layouts on dummy data (best of a few runs each, alternating).
static int measure(const layout_key *k, const weft_attrs *at) {
    weft_dtype dt = (weft_dtype)k->dtype;
    weft_tensor *x = weft_tensor_full_on(4, k->x, dt, 0.5, k->dev), *w = weft_tensor_full_on(4, k->w, dt, 0.01, k->dev);
    weft_tensor *b = k->bias ? weft_tensor_full_on(1, k->w, dt, 0.1, k->dev) : NULL;
    int r = 0;
    if (x && w && (b || !k->bias)) {
        double best[2] = {1e30, 1e30};
        for (int it = 0; it < 6; it++) // the first round warms caches and the allocator
            for (int m = 0; m < 2; m++) {
                double t = k->dev.type == WEFT_CPU ? time_once(m, x, w, b, at) : time_synced(m, x, w, b, at);
                if (t < 0) {
                    weft_clear_error();
                    best[1] = 1e30; // NHWC failed: keep NCHW
                    it = 6;
                    break;
                }
                if (it > 0 && t < best[m]) best[m] = t;
            }
        r = best[1] < 0.9 * best[0];
    }
    weft_clear_error();
    weft_tensor_free(x), weft_tensor_free(w), weft_tensor_free(b);
    return r;
}

static int decide(const layout_key *k, const weft_attrs *at) {
    const char *env = getenv("WEFT_GRAPH_LAYOUT");
    if (env && !strcmp(env, "nhwc")) return 1;
    if (env && !strcmp(env, "nchw")) return 0;
    pthread_mutex_lock(&cache_mu);
    for (int i = 0; i < n_cache; i++)
        if (!memcmp(&cache[i].k, k, sizeof *k)) {
            int r = cache[i].nhwc;
            pthread_mutex_unlock(&cache_mu);
            return r;
        }
    pthread_mutex_unlock(&cache_mu);
    int r = measure(k, at);
    pthread_mutex_lock(&cache_mu);
    if (n_cache < CACHE_N) cache[n_cache++] = (typeof(cache[0])){*k, r};
    pthread_mutex_unlock(&cache_mu);
    return r;
}

static int32_t op_named(weft_rw *rw, int32_t owner, const char *base, const char *suffix, const char *op, int n,
                        const int32_t *in, const weft_attrs *at) {
    static const weft_attrs none;
    char hint[160];
    snprintf(hint, sizeof hint, "%s%s", base, suffix);
    return weft_rw_op(rw, owner, hint, weft_op_find(op), n, in, at ? at : &none);
}

static int rewrite(weft_rw *rw, int32_t s) {
    const weft_gnode *n = &rw->src->nodes[s];
    const weft_gvalue *xv = &rw->src->values[n->in[0]], *wv = &rw->src->values[n->in[1]];
    if (n->attrs.i[7] != 0 || n->attrs.i[6] != 1 || xv->ndim != 4 || wv->ndim != 4 ||
        (xv->dtype != WEFT_F32 && xv->dtype != WEFT_F64))
        return 0;
    layout_key k = {.dtype = xv->dtype, .bias = n->n_in == 3, .dev = weft_graph_device(rw->src)};
    memcpy(k.x, xv->sizes, sizeof k.x);
    memcpy(k.w, wv->sizes, sizeof k.w);
    memcpy(k.at, n->attrs.i, sizeof k.at);
    if (!decide(&k, &n->attrs)) return 0;
    int32_t in[3];
    for (int i = 0; i < n->n_in; i++) in[i] = rw->vmap[n->in[i]];
    // conv after conv: the input is copy(permute(yh, to_nchw)) of an NHWC conv: read yh itself
    const weft_gnode *c = weft_rw_producer(rw, in[0]);
    int32_t xh = -1;
    if (weft_rw_rewritable(c) && !strcmp(c->op->name, "copy")) {
        const weft_gnode *p = weft_rw_producer(rw, c->in[0]);
        if (weft_rw_rewritable(p) && !strcmp(p->op->name, "permute") && !memcmp(p->attrs.i, to_nchw, sizeof to_nchw)) {
            const weft_gnode *q = weft_rw_producer(rw, p->in[0]);
            if (weft_rw_rewritable(q) && !strcmp(q->op->name, "conv2d") && q->attrs.i[7] == 1) xh = p->in[0];
        }
    }
    weft_attrs pa = {0};
    if (xh < 0) {
        memcpy(pa.i, to_nhwc, sizeof to_nhwc);
        int32_t xp = op_named(rw, -1, n->name, "/to_nhwc", "permute", 1, &in[0], &pa);
        if (xp < 0) return -1;
        if ((xh = op_named(rw, -1, n->name, "/to_nhwc_copy", "copy", 1, &xp, NULL)) < 0) return -1;
    }
    in[0] = xh;
    weft_attrs ca = n->attrs;
    ca.i[7] = 1;
    int32_t yh = op_named(rw, -1, n->name, "/nhwc", "conv2d", n->n_in, in, &ca);
    if (yh < 0) return -1;
    memcpy(pa.i, to_nchw, sizeof to_nchw);
    int32_t y = op_named(rw, -1, n->name, "/to_nchw", "permute", 1, &yh, &pa);
    if (y >= 0) y = op_named(rw, s, n->name, "", "copy", 1, &y, NULL);
    if (y < 0) return -1;
    if (!weft_rw_same_meta(rw, y, n->out0))
        return weft_error(WEFT_ERR_STATE, "graph_optimize: node '%s': the layout pass changed its shape", n->name), -1;
    weft_rw_forward(rw, s, &y);
    return 1;
}

static int node_rewrite(weft_rw *rw, int32_t s, weft_pass_io *io) {
    (void)io;
    const weft_gnode *n = &rw->src->nodes[s];
    if (!weft_rw_rewritable(n) || n->n_out != 1 || n->n_in < 2 || strcmp(n->op->name, "conv2d")) return 0;
    int r = rewrite(rw, s);
    return r > 0 ? 1 : r;
}

weft_status weft_pass_layout(weft_rw *rw, weft_pass_io *io) { return weft_rw_each(rw, io, node_rewrite); }
