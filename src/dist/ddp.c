// Distributed data parallel: gradient buckets all-reduced from the autograd
// leaf hooks, so that communication overlaps the rest of backward.
//
// Life of a step (sync on):
//   backward   each parameter's hook marks it final; the last one of a bucket
//              flattens the bucket's gradients into its buffer (the bucket is
//              "ready"); ready buckets are issued strictly in bucket order
//              (k only after 0..k-1) as asynchronous all-reduces (all but
//              the last bucket: weft_ddp_wait runs that one itself),
//              because every rank must issue collectives in the same order
//              even when its buckets become ready in a different order.
//   wait       buckets not ready (parameters unused by this backward) are
//              filled now (a missing .grad counts as zero) and issued in
//              order; then every all-reduce is waited for and the averages
//              are copied back into .grad. The buckets are all-reduced as
//              sums and divided by the size in that copy: one pass over the
//              gradients instead of two.
//
// One path for every device. A bucket's buffer lives on its parameters'
// device, and each parameter's place in it is a view with the parameter's
// shape (slot.flat), so flattening and the copy back are ops on that device
// (weft_tensor_copy_, and mul_scalar or div into .grad). The collective (a
// sum all-reduce) is chosen by where the
// buffer lives (collectives.c): MPI for CPU buffers; NCCL for GPU buffers
// where the communicator has it, on its communication stream, ordered after
// the stream backward runs on and, at weft_ddp_wait, before it again (the
// optimiser step queued next waits for it on the GPU, the host does not);
// otherwise staged through host memory over MPI.
//
// Only the thread that runs backward touches this state (hooks fire there),
// so there is no locking; the communication thread only sees the buffers,
// which we leave alone from issue to wait.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/autograd.h>
#include <weft/ddp.h>
#include <weft/device.h>

#include "../core/core_impl.h"
#include "dist_impl.h"
#include "../ops/op.h"

extern weft_op_def weft_op_mul_scalar, weft_op_div;

#define DDP_DEFAULT_BUCKET_MB 25.0
#define DDP_NAME_LEN 160

typedef struct weft_ddp weft_ddp;

typedef struct slot {
    weft_ddp *d;
    weft_tensor *p; // borrowed from the module
    char name[DDP_NAME_LEN];
    int bucket;
    int64_t off, numel; // elements in the bucket buffer
    weft_tensor *flat;  // elements [off, off + numel) of the bucket buffer, viewed with p's shape
    int hook;           // handle, 0: none
    bool seen;          // hook fired in this step
} slot;

typedef struct bucket {
    int first, n; // slots [first, first + n)
    weft_tensor *buf; // (sum of its slots' numel), on the parameters' device
    int pending; // slots whose hook has not fired this step
    bool ready;  // buf holds this step's local gradients
    weft_work *work;
} bucket;

struct weft_ddp {
    weft_comm *c;
    weft_module *m;
    weft_device dev; // every parameter's
    weft_ddp_opts o;
    int ns, nb;
    slot *s;   // reverse parameter order, grouped by bucket
    bucket *b;
    int next;  // buckets 0..next-1 are issued this step
    bool sync;
    weft_tensor *size_t0; // 0-d: the communicator's size on dev, the divisor of the averages (lazily)
    weft_status err; // first error of the step (hooks cannot return one)
    char errmsg[512];
};

static void record_error(weft_ddp *d, weft_status st, const char *msg) {
    if (d->err != WEFT_OK) return;
    d->err = st != WEFT_OK ? st : WEFT_ERR_STATE;
    snprintf(d->errmsg, sizeof d->errmsg, "%s", msg);
}

// Flattens the bucket's current local gradients into its buffer (zeros for
// a parameter without a .grad), on the buffer's device.
static weft_status fill_bucket(weft_ddp *d, bucket *b) {
    for (int k = b->first; k < b->first + b->n; k++) {
        slot *s = &d->s[k];
        weft_tensor *g = weft_tensor_grad(s->p);
        if (!g) {
            if (weft_tensor_zero_(s->flat) != WEFT_OK) return weft_last_status();
            continue;
        }
        if (weft_tensor_numel(g) != s->numel || weft_tensor_dtype(g) != weft_tensor_dtype(b->buf) ||
            !weft_device_equal(weft_tensor_device(g), d->dev)) {
            char gd[32], pd[32];
            return weft_error(WEFT_ERR_SHAPE, "ddp: gradient of %s has %lld %s elements on %s, the parameter %lld %s on %s",
                              s->name, (long long)weft_tensor_numel(g), weft_dtype_name(weft_tensor_dtype(g)),
                              weft_device_str(weft_tensor_device(g), gd, sizeof gd), (long long)s->numel,
                              weft_dtype_name(weft_tensor_dtype(b->buf)), weft_device_str(d->dev, pd, sizeof pd));
        }
        weft_status st = weft_tensor_copy_(s->flat, g); // any strides
        if (st != WEFT_OK) return weft_error(st, "ddp: gradient of %s: %s", s->name, weft_last_error());
    }
    b->ready = true;
    return WEFT_OK;
}

// Issues ready buckets in order, stopping at the first one that is not
// ready. The last bucket is left to weft_ddp_wait: it holds the first
// layers' gradients, which are final only when backward is over, so nothing
// is left to overlap with, and the caller's own blocking all-reduce saves
// waking the communication thread (on a small machine that wake-up takes a
// core from a rank still computing).
static void issue_ready(weft_ddp *d) {
    while (d->next < d->nb - 1 && d->b[d->next].ready) {
        bucket *b = &d->b[d->next++];
        b->work = weft_dist_all_reduce_async(d->c, b->buf, WEFT_REDUCE_SUM); // averaged in the copy back
        if (!b->work) {
            char msg[480];
            snprintf(msg, sizeof msg, "ddp: all-reduce of bucket %d: %s", (int)(b - d->b), weft_last_error());
            record_error(d, weft_last_status(), msg);
        }
    }
}

static void on_grad_final(weft_tensor *leaf, void *user) {
    slot *s = user;
    weft_ddp *d = s->d;
    (void)leaf;
    if (!d->sync || d->o.no_comm) return;
    if (s->seen) {
        char msg[400];
        snprintf(msg, sizeof msg,
                 "ddp: the gradient of %s became final twice before weft_ddp_wait (call weft_ddp_wait after each "
                 "backward, or turn sync off with weft_ddp_set_sync for accumulation)",
                 s->name);
        record_error(d, WEFT_ERR_STATE, msg);
        return;
    }
    s->seen = true;
    bucket *b = &d->b[s->bucket];
    if (--b->pending > 0) return;
    if (fill_bucket(d, b) != WEFT_OK) {
        // Still issue it (with whatever it holds) so the other ranks are not left waiting.
        record_error(d, weft_last_status(), weft_last_error());
        b->ready = true;
    }
    issue_ready(d);
}

static void reset_step(weft_ddp *d) {
    for (int k = 0; k < d->ns; k++) d->s[k].seen = false;
    for (int k = 0; k < d->nb; k++) {
        d->b[k].pending = d->b[k].n;
        d->b[k].ready = false;
    }
    d->next = 0;
}

// dst = src / size, the average of the summed gradients, in one pass (the
// collective sums; dividing in the copy back saves a pass over the bucket):
// src * (1/size) where size is a power of two (the product is the exact
// quotient), else src / size through a 0-d divisor on the device.
static weft_status copy_average(weft_ddp *d, weft_tensor *dst, weft_tensor *src) {
    int size = weft_comm_size(d->c);
    weft_attrs at = {0};
    if ((size & (size - 1)) == 0) {
        at.f[0] = 1.0 / size;
        return weft_op_apply_into(&weft_op_mul_scalar, 1, &src, &at, &dst);
    }
    if (!d->size_t0 || weft_tensor_dtype(d->size_t0) != weft_tensor_dtype(src))
        weft_tensor_free(d->size_t0), d->size_t0 = weft_tensor_full_on(0, NULL, weft_tensor_dtype(src), size, d->dev);
    if (!d->size_t0) return weft_last_status();
    weft_tensor *in[2] = {src, d->size_t0};
    return weft_op_apply_into(&weft_op_div, 2, in, NULL, &dst);
}

// Copies a bucket's averages back into its parameters' .grad (making a .grad
// where there was none, so every rank's optimiser sees every parameter).
static weft_status unpack_bucket(weft_ddp *d, bucket *b) {
    for (int k = b->first; k < b->first + b->n; k++) {
        slot *s = &d->s[k];
        weft_tensor *g = weft_tensor_grad(s->p);
        weft_status st;
        if (g && weft_tensor_is_contiguous(g) && weft_tensor_numel(g) == s->numel &&
            weft_tensor_dtype(g) == weft_tensor_dtype(s->flat) && weft_device_equal(weft_tensor_device(g), d->dev)) {
            st = copy_average(d, g, s->flat);
        } else {
            weft_tensor *ng = weft_tensor_empty_on(weft_tensor_ndim(s->p), weft_tensor_sizes(s->p),
                                                   weft_tensor_dtype(s->flat), d->dev);
            st = ng ? copy_average(d, ng, s->flat) : weft_last_status();
            if (!st) st = weft_tensor_set_grad(s->p, ng);
            weft_tensor_free(ng);
        }
        if (st != WEFT_OK) return weft_error(st, "ddp: gradient of %s: %s", s->name, weft_last_error());
    }
    return WEFT_OK;
}

// Waits for every issued bucket; returns the first failure.
static weft_status wait_issued(weft_ddp *d) {
    weft_status first = WEFT_OK;
    for (int k = 0; k < d->nb; k++) {
        bucket *b = &d->b[k];
        if (!b->work) continue;
        weft_status st = weft_work_wait(b->work);
        b->work = NULL;
        if (st != WEFT_OK && first == WEFT_OK) {
            char msg[480];
            snprintf(msg, sizeof msg, "ddp: all-reduce of bucket %d: %s", k, weft_last_error());
            record_error(d, st, msg);
            first = st;
        }
    }
    return first;
}

weft_status weft_ddp_wait(weft_ddp *d) {
    if (!d) return weft_error(WEFT_ERR_ARG, "ddp_wait: handle is NULL");
    if (!d->sync || d->o.no_comm) return WEFT_OK;
    // Parameters that got no gradient in this backward: their buckets are
    // complete now. Issue them in order, as every rank does.
    for (int k = d->next; k < d->nb; k++) {
        bucket *b = &d->b[k];
        if (!b->ready && fill_bucket(d, b) != WEFT_OK) {
            record_error(d, weft_last_status(), weft_last_error());
            b->ready = true;
        }
    }
    issue_ready(d);
    if (d->next == d->nb - 1) {
        bucket *b = &d->b[d->next++];
        if (weft_dist_all_reduce(d->c, b->buf, WEFT_REDUCE_SUM) != WEFT_OK) {
            char msg[480];
            snprintf(msg, sizeof msg, "ddp: all-reduce of bucket %d: %s", d->nb - 1, weft_last_error());
            record_error(d, weft_last_status(), msg);
        }
    }
    wait_issued(d);
    weft_status st = d->err;
    if (st == WEFT_OK)
        for (int k = 0; k < d->nb && st == WEFT_OK; k++) st = unpack_bucket(d, &d->b[k]);
    else
        st = weft_error(st, "ddp_wait: %s", d->errmsg);
    d->err = WEFT_OK;
    d->errmsg[0] = 0;
    reset_step(d);
    return st;
}

void weft_ddp_set_sync(weft_ddp *d, bool on) {
    if (d) d->sync = on;
}

int weft_ddp_num_buckets(const weft_ddp *d) { return d ? d->nb : 0; }

void weft_ddp_free(weft_ddp *d) {
    if (!d) return;
    wait_issued(d); // the buffers must outlive their collectives
    for (int k = 0; k < d->ns; k++)
        if (d->s[k].hook > 0) weft_tensor_remove_grad_hook(d->s[k].p, d->s[k].hook);
    for (int k = 0; k < d->ns; k++) weft_tensor_free(d->s[k].flat);
    weft_tensor_free(d->size_t0);
    for (int k = 0; k < d->nb; k++) weft_tensor_free(d->b[k].buf);
    free(d->s);
    free(d->b);
    free(d);
}

weft_ddp *weft_ddp_create(weft_comm *c, weft_module *m, const weft_ddp_opts *opts) {
    if (!c || !m) return weft_error_null(WEFT_ERR_ARG, "ddp_create: %s is NULL", !c ? "communicator" : "module");
    weft_ddp_opts o = opts ? *opts : (weft_ddp_opts){0};
    if (!(o.bucket_mb >= 0) || o.bucket_mb > 1e6)
        return weft_error_null(WEFT_ERR_ARG, "ddp_create: bucket_mb must be in [0, 1e6], got %g", o.bucket_mb);
    if (o.bucket_mb == 0) o.bucket_mb = DDP_DEFAULT_BUCKET_MB;
    double cap = o.bucket_mb * 1024.0 * 1024.0;

    // Check every parameter before the first collective: a rank that fails
    // here must fail on all ranks alike (same model), not leave the others
    // waiting in a broadcast.
    int np = weft_module_param_count(m);
    char name[DDP_NAME_LEN], first[DDP_NAME_LEN] = "";
    weft_device dev = WEFT_DEVICE_CPU;
    for (int i = 0; i < np; i++) {
        weft_tensor *p = weft_module_param_at(m, i, name, sizeof name);
        if (!p) return weft_error_null(WEFT_ERR_STATE, "ddp_create: cannot read parameter %d", i);
        weft_dtype dt = weft_tensor_dtype(p);
        if (dt != WEFT_F32 && dt != WEFT_F64)
            return weft_error_null(WEFT_ERR_DTYPE, "ddp_create: parameter %s is %s (f32 or f64 only)", name,
                                   weft_dtype_name(dt));
        if (!weft_tensor_is_contiguous(p))
            return weft_error_null(WEFT_ERR_ARG, "ddp_create: parameter %s is not contiguous", name);
        if (i == 0) {
            dev = weft_tensor_device(p);
            snprintf(first, sizeof first, "%s", name);
        } else if (!weft_device_equal(weft_tensor_device(p), dev)) {
            char a[32], b[32];
            return weft_error_null(WEFT_ERR_DEVICE, "ddp_create: parameter %s is on %s but %s is on %s (one device per replica)",
                                   name, weft_device_str(weft_tensor_device(p), a, sizeof a), first,
                                   weft_device_str(dev, b, sizeof b));
        }
    }
    if (weft_dist_broadcast_module(c, m, "ddp_create") != WEFT_OK) return NULL;

    weft_ddp *d = calloc(1, sizeof *d);
    if (!d) return weft_error_null(WEFT_ERR_OOM, "ddp_create: out of memory");
    d->c = c;
    d->m = m;
    d->dev = dev;
    d->o = o;
    d->sync = true;
    d->s = calloc((size_t)(np > 0 ? np : 1), sizeof(slot));
    d->b = calloc((size_t)(np > 0 ? np : 1), sizeof(bucket));
    if (!d->s || !d->b) {
        weft_ddp_free(d);
        return weft_error_null(WEFT_ERR_OOM, "ddp_create: out of memory");
    }
    // Reverse parameter order: backward makes the last layers' gradients
    // first, so the first bucket completes (and starts communicating) early.
    // A bucket holds one dtype; a parameter larger than the capacity gets a
    // bucket of its own. Frozen parameters take no part.
    double bytes = 0;
    for (int i = np - 1; i >= 0; i--) {
        weft_tensor *p = weft_module_param_at(m, i, name, sizeof name);
        if (!weft_tensor_requires_grad(p)) continue;
        weft_dtype dt = weft_tensor_dtype(p);
        double pb = (double)weft_tensor_numel(p) * (double)weft_dtype_size(dt);
        bucket *cur = d->nb > 0 ? &d->b[d->nb - 1] : NULL;
        if (!cur || bytes + pb > cap || weft_tensor_dtype(d->s[cur->first].p) != dt) {
            cur = &d->b[d->nb++];
            cur->first = d->ns;
            bytes = 0;
        }
        slot *s = &d->s[d->ns++];
        s->d = d;
        s->p = p;
        snprintf(s->name, sizeof s->name, "%s", name);
        s->bucket = (int)(cur - d->b);
        s->numel = weft_tensor_numel(p);
        s->off = 0;
        for (int k = cur->first; k < cur->first + cur->n; k++) s->off += d->s[k].numel;
        cur->n++;
        bytes += pb;
    }
    for (int k = 0; k < d->nb; k++) {
        bucket *b = &d->b[k];
        slot *last = &d->s[b->first + b->n - 1];
        int64_t n = last->off + last->numel;
        b->buf = weft_tensor_empty_on(1, &n, weft_tensor_dtype(last->p), dev);
        if (!b->buf) {
            weft_ddp_free(d);
            return NULL;
        }
        for (int k2 = b->first; k2 < b->first + b->n; k2++) {
            slot *s = &d->s[k2];
            weft_tensor *part = weft_narrow(b->buf, 0, s->off, s->numel);
            s->flat = part ? weft_view(part, weft_tensor_ndim(s->p), weft_tensor_sizes(s->p)) : NULL;
            weft_tensor_free(part);
            if (!s->flat) {
                weft_ddp_free(d);
                return NULL;
            }
        }
    }
    for (int k = 0; k < d->ns; k++) {
        d->s[k].hook = weft_tensor_add_grad_hook(d->s[k].p, on_grad_final, &d->s[k]);
        if (d->s[k].hook <= 0) {
            weft_status st = weft_last_status();
            char msg[256];
            snprintf(msg, sizeof msg, "%s: %s", d->s[k].name, weft_last_error());
            weft_ddp_free(d);
            return weft_error_null(st, "ddp_create: cannot add the grad hook of %s", msg);
        }
    }
    reset_step(d);
    return d;
}
