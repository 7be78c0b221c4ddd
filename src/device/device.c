// Device registry and the device-generic API of weft/device.h.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/core_impl.h"
#include "device_impl.h"

static const weft_device_impl *g_impl[WEFT_NUM_DEVICE_TYPES] = {&weft_cpu_device_impl};
static weft_device g_default = {WEFT_CPU, 0};

struct weft_stream {
    weft_device dev;
    void *h;
};
struct weft_event {
    weft_device dev;
    void *h;
};

weft_status weft_device_register(weft_device_type t, const weft_device_impl *impl) {
    if ((unsigned)t >= WEFT_NUM_DEVICE_TYPES) return weft_error(WEFT_ERR_ARG, "device_register: bad type %d", t);
    g_impl[t] = impl;
    return WEFT_OK;
}

static const char *type_name(int t) { return t == WEFT_CPU ? "cpu" : t == WEFT_CUDA ? "cuda" : "?"; }

// Accelerator backends register themselves the first time the registry is
// asked about devices (a GPU-less machine pays one cudaGetDeviceCount).
#ifdef WEFT_HAVE_CUDA
static pthread_once_t g_backends_once = PTHREAD_ONCE_INIT;
static void backends_init(void) { pthread_once(&g_backends_once, weft_cuda_backend_init); }
static const char *unavailable_reason(int t) {
    return t == WEFT_CUDA ? weft_cuda_unavailable_reason() : "weft built without it";
}
#else
static void backends_init(void) {}
static const char *unavailable_reason(int t) {
    return t == WEFT_CUDA ? "weft built without CUDA: nvcc was not found at configure time" : "weft built without it";
}
#endif

const weft_device_impl *weft_device_impl_get(weft_device d) {
    backends_init();
    if ((unsigned)d.type >= WEFT_NUM_DEVICE_TYPES || !g_impl[d.type])
        return weft_error_null(WEFT_ERR_DEVICE, "device %s:%d is not available (%s)", type_name(d.type), d.index,
                               unavailable_reason(d.type));
    const weft_device_impl *im = g_impl[d.type];
    if (d.index < 0 || d.index >= im->count())
        return weft_error_null(WEFT_ERR_DEVICE, "device %s:%d does not exist (%d present)", im->name, d.index,
                               im->count());
    return im;
}

weft_status weft_device_parse(const char *s, weft_device *out) {
    if (!s || !out) return weft_error(WEFT_ERR_ARG, "device_parse: NULL argument");
    int type;
    const char *rest;
    if (!strncmp(s, "cpu", 3)) {
        type = WEFT_CPU;
        rest = s + 3;
    } else if (!strncmp(s, "cuda", 4)) {
        type = WEFT_CUDA;
        rest = s + 4;
    } else {
        return weft_error(WEFT_ERR_ARG, "device_parse: unknown device '%s' (expected cpu, cuda or cuda:N)", s);
    }
    int index = 0;
    if (*rest == ':') {
        char *end;
        long v = strtol(rest + 1, &end, 10);
        if (end == rest + 1 || *end || v < 0 || v > 1024)
            return weft_error(WEFT_ERR_ARG, "device_parse: bad device index in '%s'", s);
        index = (int)v;
    } else if (*rest) {
        return weft_error(WEFT_ERR_ARG, "device_parse: unknown device '%s'", s);
    }
    out->type = (int16_t)type;
    out->index = (int16_t)index;
    return WEFT_OK;
}

const char *weft_device_str(weft_device d, char *buf, size_t n) {
    if (d.type == WEFT_CPU) snprintf(buf, n, "cpu");
    else snprintf(buf, n, "%s:%d", type_name(d.type), d.index);
    return buf;
}

bool weft_device_equal(weft_device a, weft_device b) { return a.type == b.type && a.index == b.index; }

int weft_device_count(weft_device_type t) {
    backends_init();
    if ((unsigned)t >= WEFT_NUM_DEVICE_TYPES || !g_impl[t]) return 0;
    return g_impl[t]->count();
}

bool weft_device_available(weft_device d) {
    backends_init();
    return (unsigned)d.type < WEFT_NUM_DEVICE_TYPES && g_impl[d.type] && d.index >= 0 &&
           d.index < g_impl[d.type]->count();
}

weft_device weft_device_get_default(void) { return g_default; }

weft_status weft_device_set_default(weft_device d) {
    if (!weft_device_impl_get(d)) return weft_last_status();
    g_default = d;
    return WEFT_OK;
}

weft_status weft_device_synchronize(weft_device d) {
    const weft_device_impl *im = weft_device_impl_get(d);
    return im ? im->synchronize(d.index) : weft_last_status();
}

void *weft_device_alloc(weft_device d, size_t nbytes) {
    const weft_device_impl *im = weft_device_impl_get(d);
    if (!im) return NULL;
    void *p = im->alloc(d.index, nbytes);
    if (!p) {
        char b[32];
        weft_memory_stats st = {0};
        im->memory_stats(d.index, &st);
        return weft_error_null(WEFT_ERR_OOM, "%s: out of memory allocating %zu bytes (in use %zu, cached %zu)",
                               weft_device_str(d, b, sizeof b), nbytes, st.bytes_in_use, st.bytes_cached);
    }
    return p;
}

void weft_device_free(weft_device d, void *p, size_t nbytes) {
    if (!p || (unsigned)d.type >= WEFT_NUM_DEVICE_TYPES || !g_impl[d.type]) return;
    g_impl[d.type]->free(d.index, p, nbytes);
}

weft_status weft_device_copy(weft_device dd, void *dst, weft_device sd, const void *src, size_t n) {
    const weft_device_impl *di = weft_device_impl_get(dd), *si = weft_device_impl_get(sd);
    if (!di || !si) return weft_last_status();
    if (dd.type == WEFT_CPU && sd.type == WEFT_CPU) return di->copy(0, dst, src, n, WEFT_COPY_D2D);
    if (sd.type == WEFT_CPU) return di->copy(dd.index, dst, src, n, WEFT_COPY_H2D);
    if (dd.type == WEFT_CPU) return si->copy(sd.index, dst, src, n, WEFT_COPY_D2H);
    if (weft_device_equal(dd, sd)) return di->copy(dd.index, dst, src, n, WEFT_COPY_D2D);
    // Between two accelerators without a peer path: stage through the host.
    void *tmp = malloc(n ? n : 1);
    if (!tmp) return weft_error(WEFT_ERR_OOM, "device_copy: out of host memory staging %zu bytes", n);
    weft_status s = si->copy(sd.index, tmp, src, n, WEFT_COPY_D2H);
    if (s == WEFT_OK) s = di->copy(dd.index, dst, tmp, n, WEFT_COPY_H2D);
    free(tmp);
    return s;
}

void *weft_device_host_alloc(weft_device d, size_t n) {
    const weft_device_impl *im = weft_device_impl_get(d);
    if (!im) return NULL;
    void *p = im->host_alloc ? im->host_alloc(n ? n : 1) : malloc(n ? n : 1);
    if (!p) {
        char b[32];
        return weft_error_null(WEFT_ERR_OOM, "%s: out of host memory allocating %zu staging bytes",
                               weft_device_str(d, b, sizeof b), n);
    }
    return p;
}

void weft_device_host_free(weft_device d, void *p) {
    if (!p) return;
    const weft_device_impl *im = (unsigned)d.type < WEFT_NUM_DEVICE_TYPES ? g_impl[d.type] : NULL;
    if (im && im->host_free) im->host_free(p);
    else free(p);
}

weft_status weft_device_memset(weft_device d, void *p, int v, size_t n) {
    const weft_device_impl *im = weft_device_impl_get(d);
    return im ? im->memset(d.index, p, v, n) : weft_last_status();
}

weft_stream *weft_stream_create(weft_device d) {
    const weft_device_impl *im = weft_device_impl_get(d);
    if (!im) return NULL;
    weft_stream *s = malloc(sizeof *s);
    if (!s) return weft_error_null(WEFT_ERR_OOM, "stream_create: out of memory");
    s->dev = d;
    s->h = im->stream_create(d.index);
    if (!s->h) {
        free(s);
        return weft_error_null(WEFT_ERR_DEVICE, "stream_create: backend failed");
    }
    return s;
}
void weft_stream_destroy(weft_stream *s) {
    if (!s) return;
    g_impl[s->dev.type]->stream_destroy(s->h);
    free(s);
}
weft_status weft_stream_synchronize(weft_stream *s) {
    if (!s) return weft_error(WEFT_ERR_ARG, "stream_synchronize: NULL stream");
    return g_impl[s->dev.type]->stream_synchronize(s->h);
}
bool weft_stream_query(weft_stream *s) { return s && g_impl[s->dev.type]->stream_query(s->h); }
weft_status weft_stream_set_current(weft_device d, weft_stream *s) {
    const weft_device_impl *im = weft_device_impl_get(d);
    if (!im) return weft_last_status();
    if (s && !weft_device_equal(s->dev, d))
        return weft_error(WEFT_ERR_DEVICE, "stream_set_current: the stream belongs to another device");
    return im->stream_set_current ? im->stream_set_current(d.index, s ? s->h : NULL) : WEFT_OK;
}

weft_event *weft_event_create(weft_device d) {
    const weft_device_impl *im = weft_device_impl_get(d);
    if (!im) return NULL;
    weft_event *e = malloc(sizeof *e);
    if (!e) return weft_error_null(WEFT_ERR_OOM, "event_create: out of memory");
    e->dev = d;
    e->h = im->event_create(d.index);
    if (!e->h) {
        free(e);
        return weft_error_null(WEFT_ERR_DEVICE, "event_create: backend failed");
    }
    return e;
}
void weft_event_destroy(weft_event *e) {
    if (!e) return;
    g_impl[e->dev.type]->event_destroy(e->h);
    free(e);
}
weft_status weft_event_record(weft_event *e, weft_stream *s) {
    if (!e || !s) return weft_error(WEFT_ERR_ARG, "event_record: NULL argument");
    if (!weft_device_equal(e->dev, s->dev)) return weft_error(WEFT_ERR_DEVICE, "event_record: event and stream on different devices");
    return g_impl[e->dev.type]->event_record(e->h, s->h);
}
weft_status weft_event_block(weft_event *e, weft_stream *s) {
    if (!e || !s) return weft_error(WEFT_ERR_ARG, "event_block: NULL argument");
    if (e->dev.type != s->dev.type) {
        // A stream of another device type waits by having the host wait.
        return g_impl[e->dev.type]->event_synchronize(e->h);
    }
    return g_impl[e->dev.type]->event_block(e->h, s->h);
}
bool weft_event_query(weft_event *e) { return e && g_impl[e->dev.type]->event_query(e->h); }
weft_status weft_event_synchronize(weft_event *e) {
    if (!e) return weft_error(WEFT_ERR_ARG, "event_synchronize: NULL event");
    return g_impl[e->dev.type]->event_synchronize(e->h);
}

weft_status weft_memory_stats_get(weft_device d, weft_memory_stats *out) {
    const weft_device_impl *im = weft_device_impl_get(d);
    if (!im) return weft_last_status();
    if (!out) return weft_error(WEFT_ERR_ARG, "memory_stats: NULL output");
    im->memory_stats(d.index, out);
    return WEFT_OK;
}
weft_status weft_memory_tag(weft_device d, void *p, weft_memory_kind kind) {
    if ((unsigned)kind >= WEFT_MEM_NUM_KINDS)
        return weft_error(WEFT_ERR_ARG, "memory_tag: bad memory kind %d", (int)kind);
    const weft_device_impl *im = weft_device_impl_get(d);
    if (!im) return weft_last_status();
    if (!p || !im->memory_tag) return WEFT_OK;
    return im->memory_tag(d.index, p, kind);
}

const char *weft_memory_kind_name(weft_memory_kind kind) {
    static const char *names[WEFT_MEM_NUM_KINDS] = {"activations", "parameters", "gradients", "optimizer"};
    return (unsigned)kind < WEFT_MEM_NUM_KINDS ? names[kind] : NULL;
}

void weft_memory_reset_peak(weft_device d) {
    const weft_device_impl *im = weft_device_impl_get(d);
    if (im) im->memory_reset_peak(d.index);
}
void weft_memory_empty_cache(weft_device d) {
    const weft_device_impl *im = weft_device_impl_get(d);
    if (im) im->memory_empty_cache(d.index);
}

// ---- graph capture (device_impl.h) ----
static const weft_device_impl *capture_impl(weft_device d) {
    const weft_device_impl *im = weft_device_impl_get(d);
    if (!im) return NULL;
    if (!im->capture_begin || !im->capture_end || !im->graph_launch || !im->graph_destroy) {
        char b[32];
        return weft_error_null(WEFT_ERR_UNSUPPORTED, "%s: the device cannot capture graphs",
                               weft_device_str(d, b, sizeof b));
    }
    return im;
}
bool weft_device_can_capture(weft_device d) {
    backends_init();
    if (!weft_device_available(d)) return false;
    const weft_device_impl *im = g_impl[d.type];
    return im->capture_begin && im->capture_end && im->graph_launch && im->graph_destroy;
}
weft_status weft_device_capture_begin(weft_device d) {
    const weft_device_impl *im = capture_impl(d);
    return im ? im->capture_begin(d.index) : weft_last_status();
}
weft_status weft_device_capture_end(weft_device d, bool keep, void **graph) {
    if (graph) *graph = NULL;
    const weft_device_impl *im = capture_impl(d);
    if (!im) return weft_last_status();
    void *tmp = NULL;
    return im->capture_end(d.index, keep && graph, graph ? graph : &tmp);
}
weft_status weft_device_graph_launch(weft_device d, void *graph) {
    const weft_device_impl *im = capture_impl(d);
    if (!im) return weft_last_status();
    if (!graph) return weft_error(WEFT_ERR_ARG, "graph_launch: NULL graph");
    return im->graph_launch(d.index, graph);
}
void weft_device_graph_destroy(weft_device d, void *graph) {
    if (!graph || (unsigned)d.type >= WEFT_NUM_DEVICE_TYPES || !g_impl[d.type] || !g_impl[d.type]->graph_destroy) return;
    g_impl[d.type]->graph_destroy(d.index, graph);
}
