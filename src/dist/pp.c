// Pipeline parallelism, part 1: the messages between stages and their
// autograd ops, and cutting a sequential into stages (weft/parallel.h).
//
// A send never blocks: its tensor goes out from a host copy with
// MPI_Isend and stays referenced until weft_pp_wait_sends sees it received.
// Receives block (polled, under the communicator's timeout). So a schedule
// can only deadlock when a receive waits for a message whose send comes
// after something that waits on this rank, which the schedules in
// pp_schedule.c never do. A message to this rank itself (one process
// running several chunks) goes through a mailbox instead of MPI.
//
// The autograd ops are custom functions (weft_function_record): the send's
// node takes x and outputs a one-element token, and its backward receives
// x's gradient; the receive's node hangs off a one-element anchor leaf (a
// recorded function needs an input that requires grad) and its backward
// posts the gradient back.
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft/autograd.h>

#include "../core/core_impl.h"
#include "comm_impl.h"
#include "pp_impl.h"

double weft_pp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

weft_tensor *weft_pp_host(const void *data, int64_t n, weft_dtype dt) {
    weft_tensor *t = weft_tensor_empty_on(1, &n, dt, WEFT_DEVICE_CPU);
    if (t) memcpy(weft_tensor_data(t), data, (size_t)n * weft_dtype_size(dt));
    return t;
}

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static double g_wait_s; // seconds in blocking receives (the bubble's measure)

double weft_pp_wait_seconds(void) {
    pthread_mutex_lock(&g_mu);
    double w = g_wait_s;
    pthread_mutex_unlock(&g_mu);
    return w;
}

static void add_wait(double s) {
    pthread_mutex_lock(&g_mu);
    g_wait_s += s;
    pthread_mutex_unlock(&g_mu);
}

// ---- the mailbox: messages from this rank to itself ----
typedef struct mail {
    const weft_comm *c;
    int tag, dir;
    weft_tensor *t;
    struct mail *next;
} mail;
static mail *g_mail;

static int rank_of(const weft_comm *c) { return c ? weft_comm_rank(c) : 0; }
static int size_of(const weft_comm *c) { return c ? weft_comm_size(c) : 1; }

static weft_status mail_post(const weft_comm *c, weft_tensor *t, int tag, int dir) {
    mail *m = malloc(sizeof *m);
    if (!m) return weft_error(WEFT_ERR_OOM, "pp_send: out of memory");
    *m = (mail){.c = c, .tag = tag, .dir = dir, .t = NULL, .next = NULL};
    WEFT_NO_GRAD {
        weft_tensor *d = weft_tensor_detach(t); // a copy, for the reason weft_pp_post gives
        m->t = d ? weft_tensor_clone(d) : NULL;
        weft_tensor_free(d);
    }
    if (!m->t) {
        free(m);
        return weft_last_status();
    }
    pthread_mutex_lock(&g_mu);
    mail **e = &g_mail;
    while (*e) e = &(*e)->next;
    *e = m;
    pthread_mutex_unlock(&g_mu);
    return WEFT_OK;
}

static weft_tensor *mail_take(const weft_comm *c, int tag, int dir) {
    pthread_mutex_lock(&g_mu);
    weft_tensor *t = NULL;
    for (mail **e = &g_mail; *e; e = &(*e)->next)
        if ((*e)->c == c && (*e)->tag == tag && (*e)->dir == dir) {
            mail *m = *e;
            *e = m->next;
            t = m->t;
            free(m);
            break;
        }
    pthread_mutex_unlock(&g_mu);
    return t;
}

// ---- sends in flight ----
#ifdef WEFT_HAVE_MPI
typedef struct pending {
    weft_comm *c;
    MPI_Request req;
    weft_tensor *buf; // the host copy being sent
    int dst, tag;
    struct pending *next;
} pending;
static pending *g_pending;

// Frees the finished sends of c (all communicators: c NULL). Under g_mu.
static void reap(const weft_comm *c) {
    for (pending **e = &g_pending; *e;) {
        int done = 0;
        if ((!c || (*e)->c == c) && MPI_Test(&(*e)->req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) {
            pending *p = *e;
            *e = p->next;
            weft_tensor_free(p->buf);
            free(p);
        } else
            e = &(*e)->next;
    }
}
#endif

static int wire_tag(int tag, int dir) { return 2 * tag + dir; }

weft_status weft_pp_post(weft_comm *c, weft_tensor *t, int dst, int tag, int dir) {
    if (!t) return weft_error(WEFT_ERR_ARG, "pp_send: tensor is NULL");
    if (tag < 0 || tag > (1 << 28)) return weft_error(WEFT_ERR_ARG, "pp_send: bad tag %d", tag);
    if (dst < 0 || dst >= size_of(c))
        return weft_error(WEFT_ERR_ARG, "pp_send: dst %d is not a rank of the communicator (size %d)", dst, size_of(c));
    if (dst == rank_of(c)) return mail_post(c, t, tag, dir);
#ifdef WEFT_HAVE_MPI
    MPI_Datatype dt = weft_dist_mpi_dtype(weft_tensor_dtype(t));
    if (dt == MPI_DATATYPE_NULL)
        return weft_error(WEFT_ERR_DTYPE, "pp_send: dtype %s cannot be sent", weft_dtype_name(weft_tensor_dtype(t)));
    if (weft_tensor_numel(t) > 0x7fffffff) return weft_error(WEFT_ERR_ARG, "pp_send: tensor too large for MPI");
    int *ub = NULL, flag = 0; // MPI promises tags up to 32767 only
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    if (flag && wire_tag(tag, dir) > *ub)
        return weft_error(WEFT_ERR_ARG, "pp_send: tag %d is too large for this MPI (wire tag %d > MPI_TAG_UB %d)", tag,
                          wire_tag(tag, dir), *ub);
    weft_tensor *h = NULL;
    WEFT_NO_GRAD {
        // A host copy owned by the send: the caller may free or overwrite t
        // at once (a gradient handed to a backward may be accumulated into
        // in place after it returns).
        weft_tensor *d = weft_tensor_detach(t);
        if (d && weft_tensor_device(d).type == WEFT_CPU) h = weft_tensor_clone(d);
        else if (d) {
            weft_tensor *hc = weft_tensor_to(d, WEFT_DEVICE_CPU);
            h = hc ? weft_tensor_contiguous(hc) : NULL;
            weft_tensor_free(hc);
        }
        weft_tensor_free(d);
    }
    if (!h) return weft_error(weft_last_status(), "pp_send: %s", weft_last_error());
    pending *p = malloc(sizeof *p);
    if (!p) {
        weft_tensor_free(h);
        return weft_error(WEFT_ERR_OOM, "pp_send: out of memory");
    }
    *p = (pending){.c = c, .buf = h, .dst = dst, .tag = tag};
    if (MPI_Isend(weft_tensor_data(h), (int)weft_tensor_numel(h), dt, dst, wire_tag(tag, dir), weft_comm_mpi(c),
                  &p->req) != MPI_SUCCESS) {
        weft_tensor_free(h);
        free(p);
        return weft_error(WEFT_ERR_STATE, "pp_send: MPI_Isend to rank %d failed", dst);
    }
    pthread_mutex_lock(&g_mu);
    p->next = g_pending;
    g_pending = p;
    reap(c);
    pthread_mutex_unlock(&g_mu);
    return WEFT_OK;
#else
    return weft_error(WEFT_ERR_UNSUPPORTED, "pp_send: weft built without MPI");
#endif
}

weft_tensor *weft_pp_take(weft_comm *c, int ndim, const int64_t *sizes, weft_dtype dt, weft_device dev, int src,
                          int tag, int dir) {
    if (src < 0 || src >= size_of(c))
        return weft_error_null(WEFT_ERR_ARG, "pp_recv: src %d is not a rank of the communicator (size %d)", src,
                               size_of(c));
    if (src == rank_of(c)) {
        weft_tensor *t = mail_take(c, tag, dir);
        if (!t)
            return weft_error_null(WEFT_ERR_STATE, "pp_recv: no message from this rank itself with tag %d (a "
                                                   "schedule that receives before it sends)", tag);
        if (weft_tensor_ndim(t) != ndim || weft_tensor_dtype(t) != dt ||
            memcmp(weft_tensor_sizes(t), sizes, sizeof(int64_t) * (size_t)ndim)) {
            weft_tensor_free(t);
            return weft_error_null(WEFT_ERR_SHAPE, "pp_recv: the message with tag %d has another shape or dtype", tag);
        }
        if (weft_device_equal(weft_tensor_device(t), dev)) return t;
        weft_tensor *r = weft_tensor_to(t, dev); // t has no history: a plain move
        weft_tensor_free(t);
        return r;
    }
    weft_tensor *t = weft_tensor_empty_on(ndim, sizes, dt, dev);
    if (!t) return NULL;
    double t0 = weft_pp_now();
    weft_status s = weft_dist_recv(c, t, src, wire_tag(tag, dir));
    add_wait(weft_pp_now() - t0);
    if (s) {
        weft_tensor_free(t);
        return weft_error_null(s, "pp_recv: the %s with tag %d (wire tag %d) from rank %d: %s",
                               dir == PP_DIR_ACT ? "tensor" : "gradient", tag, wire_tag(tag, dir), src, weft_last_error());
    }
    return t;
}

weft_status weft_pp_wait_sends(weft_comm *c) {
    weft_status st = WEFT_OK;
    pthread_mutex_lock(&g_mu);
    for (mail **e = &g_mail; *e;) // dropped: reported once
        if ((*e)->c == c) {
            mail *m = *e;
            *e = m->next;
            st = weft_error(WEFT_ERR_STATE, "pp_wait_sends: a message to this rank itself (tag %d) was never received",
                            m->tag);
            weft_tensor_free(m->t);
            free(m);
        } else
            e = &(*e)->next;
#ifdef WEFT_HAVE_MPI
    double t0 = weft_pp_now(), to = c ? atomic_load(&c->timeout) : 0;
    for (;;) {
        reap(c);
        pending *left = NULL;
        for (pending *p = g_pending; p && !left; p = p->next)
            if (p->c == c) left = p;
        if (!left) break;
        if (to > 0 && weft_pp_now() - t0 > to) {
            // Give up on them: MPI may still read the buffers, so they leak
            // (the job ends on this error anyway).
            st = weft_error(WEFT_ERR_STATE, "pp_wait_sends: message to rank %d (tag %d) not received after %.1f s",
                            left->dst, left->tag, to);
            for (pending **e = &g_pending; *e;)
                if ((*e)->c == c) {
                    pending *p = *e;
                    *e = p->next;
                    MPI_Request_free(&p->req);
                    free(p);
                } else
                    e = &(*e)->next;
            break;
        }
        pthread_mutex_unlock(&g_mu);
        sched_yield();
        pthread_mutex_lock(&g_mu);
    }
#endif
    pthread_mutex_unlock(&g_mu);
    return st;
}

// ---- autograd: the send ----
typedef struct {
    weft_comm *c;
    int peer, tag;
    int ndim;
    int64_t sizes[WEFT_MAX_DIMS];
    weft_dtype dt;
    weft_device dev;
} p2p_ctx;

static p2p_ctx *ctx_new(weft_comm *c, int peer, int tag, const weft_tensor *t) {
    p2p_ctx *x = calloc(1, sizeof *x);
    if (!x) return weft_error_null(WEFT_ERR_OOM, "pp: out of memory");
    *x = (p2p_ctx){.c = c, .peer = peer, .tag = tag, .ndim = weft_tensor_ndim(t), .dt = weft_tensor_dtype(t),
                   .dev = weft_tensor_device(t)};
    memcpy(x->sizes, weft_tensor_sizes(t), sizeof(int64_t) * (size_t)x->ndim);
    return x;
}

// The token's gradient is ignored: x's comes from the next stage.
static weft_status send_backward(void *ctx, int n_out, weft_tensor *const *gout, int n_in, const bool *needs,
                                 weft_tensor **gin) {
    (void)n_out;
    (void)gout;
    (void)n_in;
    p2p_ctx *x = ctx;
    weft_tensor *g = weft_pp_take(x->c, x->ndim, x->sizes, x->dt, x->dev, x->peer, x->tag, PP_DIR_GRAD);
    if (!g) return weft_last_status();
    if (needs[0]) gin[0] = g;
    else weft_tensor_free(g);
    return WEFT_OK;
}

weft_tensor *weft_pp_send_token(weft_comm *c, weft_tensor *x, int dst, int tag, bool post) {
    if (!x) return weft_error_null(WEFT_ERR_ARG, "pp_send: tensor is NULL");
    if (post && weft_pp_post(c, x, dst, tag, PP_DIR_ACT)) return NULL;
    weft_tensor *tok = weft_tensor_scalar(0, WEFT_F64);
    if (!tok || !weft_tensor_requires_grad(x) || !weft_grad_is_enabled()) return tok;
    p2p_ctx *cx = ctx_new(c, dst, tag, x);
    if (!cx || weft_function_record("pp_send", 1, &x, 1, &tok, send_backward, cx, free)) {
        weft_tensor_free(tok);
        return NULL;
    }
    return tok;
}

weft_tensor *weft_pp_send(weft_comm *c, weft_tensor *x, int dst, int tag) {
    return weft_pp_send_token(c, x, dst, tag, true);
}

// ---- autograd: the receive ----
static weft_status recv_backward(void *ctx, int n_out, weft_tensor *const *gout, int n_in, const bool *needs,
                                 weft_tensor **gin) {
    (void)n_out;
    (void)n_in;
    (void)needs;
    (void)gin; // the anchor's gradient: none
    p2p_ctx *x = ctx;
    if (gout[0]) return weft_pp_post(x->c, gout[0], x->peer, x->tag, PP_DIR_GRAD);
    // No gradient reached the received tensor: the sender still waits for one.
    weft_tensor *z = weft_tensor_zeros(x->ndim, x->sizes, x->dt);
    weft_status s = z ? weft_pp_post(x->c, z, x->peer, x->tag, PP_DIR_GRAD) : weft_last_status();
    weft_tensor_free(z);
    return s;
}

weft_tensor *weft_pp_recv(weft_comm *c, int ndim, const int64_t *sizes, weft_dtype dt, weft_device dev, int src,
                          int tag, bool requires_grad) {
    if (ndim < 0 || ndim > WEFT_MAX_DIMS || (ndim && !sizes))
        return weft_error_null(WEFT_ERR_ARG, "pp_recv: bad shape (ndim %d)", ndim);
    if (tag < 0 || tag > (1 << 28)) return weft_error_null(WEFT_ERR_ARG, "pp_recv: bad tag %d", tag);
    if (requires_grad && !weft_dtype_is_float(dt))
        return weft_error_null(WEFT_ERR_DTYPE, "pp_recv: a %s tensor cannot require grad", weft_dtype_name(dt));
    weft_tensor *t = weft_pp_take(c, ndim, sizes, dt, dev, src, tag, PP_DIR_ACT);
    if (!t || !requires_grad || !weft_grad_is_enabled()) return t;
    weft_tensor *anchor = weft_tensor_scalar(0, WEFT_F64);
    p2p_ctx *cx = anchor ? ctx_new(c, src, tag, t) : NULL;
    weft_status s = cx ? weft_tensor_set_requires_grad(anchor, true) : weft_last_status();
    if (!s) s = weft_function_record("pp_recv", 1, &anchor, 1, &t, recv_backward, cx, free);
    else free(cx);
    weft_tensor_free(anchor); // the node holds it
    if (s) {
        weft_tensor_free(t);
        return NULL;
    }
    return t;
}

// ---- splitting ----
weft_status weft_pp_partition(int n, const double *cost, int parts, int *part_of) {
    if (parts < 1 || parts > n)
        return weft_error(WEFT_ERR_ARG, "pp_partition: cannot cut %d layers into %d non-empty stages", n, parts);
    if (!cost || !part_of) return weft_error(WEFT_ERR_ARG, "pp_partition: NULL argument");
    // best[k*(n+1)+i]: the smallest largest-run total cutting items [0, i)
    // into k runs; cut[.]: where its last run starts. O(parts * n^2).
    size_t cells = (size_t)(parts + 1) * (size_t)(n + 1);
    double *best = malloc(sizeof(double) * cells), *pre = malloc(sizeof(double) * (size_t)(n + 1));
    int *cut = malloc(sizeof(int) * cells);
    if (!best || !pre || !cut) {
        free(best);
        free(pre);
        free(cut);
        return weft_error(WEFT_ERR_OOM, "pp_partition: out of memory");
    }
    pre[0] = 0;
    for (int i = 0; i < n; i++) pre[i + 1] = pre[i] + (cost[i] > 0 ? cost[i] : 0);
    for (size_t i = 0; i < cells; i++) best[i] = -1; // -1: impossible
    best[0] = 0;
    for (int k = 1; k <= parts; k++)
        for (int i = k; i <= n - (parts - k); i++) {
            double b = -1;
            int bj = -1;
            for (int j = k - 1; j < i; j++) {
                double prev = best[(size_t)(k - 1) * (size_t)(n + 1) + (size_t)j];
                if (prev < 0) continue;
                double run = pre[i] - pre[j], m = prev > run ? prev : run;
                if (b < 0 || m < b) b = m, bj = j;
            }
            best[(size_t)k * (size_t)(n + 1) + (size_t)i] = b;
            cut[(size_t)k * (size_t)(n + 1) + (size_t)i] = bj;
        }
    for (int k = parts, i = n; k >= 1; k--) {
        int j = cut[(size_t)k * (size_t)(n + 1) + (size_t)i];
        for (int t = j; t < i; t++) part_of[t] = k - 1;
        i = j;
    }
    free(best);
    free(pre);
    free(cut);
    return WEFT_OK;
}

// Forward + backward time of each child on a micro-batch flowing through the
// whole sequential (best of 3), the same on every rank (rank 0's numbers).
static weft_status measure_costs(weft_comm *c, weft_module *seq, weft_module **layers, weft_tensor *sample, int n,
                                 double *cost) {
    weft_status st = WEFT_OK;
    weft_tensor *cur = weft_tensor_detach(sample);
    for (int i = 0; i < n && !st; i++) {
        weft_module *ch = layers[i];
        weft_tensor *next = NULL;
        cost[i] = -1;
        for (int r = 0; r < 3 && !st; r++) {
            weft_tensor *in = weft_tensor_detach(cur);
            if (in && weft_dtype_is_float(weft_tensor_dtype(in))) weft_tensor_set_requires_grad(in, true);
            double t0 = weft_pp_now();
            weft_tensor *y = in ? weft_module_forward(ch, in) : NULL;
            weft_tensor *s = y ? weft_sum(y, 0, NULL, false) : NULL;
            if (!s) st = weft_error(weft_last_status(), "pp_create: measuring layer %d: %s", i, weft_last_error());
            else if (weft_tensor_requires_grad(s) && (st = weft_backward(s, NULL, NULL)))
                st = weft_error(st, "pp_create: measuring layer %d: %s", i, weft_last_error());
            double t = weft_pp_now() - t0;
            if (cost[i] < 0 || t < cost[i]) cost[i] = t;
            weft_tensor_free(next);
            next = y ? weft_tensor_detach(y) : NULL;
            weft_tensor_free(s);
            weft_tensor_free(y);
            weft_tensor_free(in);
        }
        weft_tensor_free(cur);
        cur = next;
    }
    weft_tensor_free(cur);
    weft_module_zero_grad(seq); // the measurement's gradients are not the step's
    if (size_of(c) == 1) return st;
    // Every rank must cut the same way: rank 0's timings for all. A failed
    // rank still joins the broadcast and returns its own error.
    weft_tensor *t = weft_pp_host(cost, n, WEFT_F64);
    weft_status bs = t ? weft_dist_broadcast(c, t, 0) : weft_last_status();
    if (!bs) bs = weft_tensor_to_f64(t, cost, n);
    weft_tensor_free(t);
    return st ? st : bs;
}

void weft_pp_free(weft_pp *p) {
    if (!p) return;
    free(p->layers);
    free(p->chunk_of);
    free(p->first);
    free(p->count);
    free(p);
}

static bool is_seq(const weft_module *m) { return !strcmp(weft_module_kind(m), "sequential"); }

// The layers of seq in order, a nested sequential's children in its place
// (its forward applies them in order, so the model computes the same).
// Returns their number; fills out when not NULL.
static int flatten(weft_module *seq, weft_module **out, int n) {
    for (int i = 0; i < weft_module_child_count(seq); i++) {
        weft_module *ch = weft_module_child_at(seq, i);
        if (is_seq(ch)) n = flatten(ch, out, n);
        else {
            if (out) out[n] = ch;
            n++;
        }
    }
    return n;
}

int weft_pp_count_layers(const weft_module *m) { return is_seq(m) ? flatten((weft_module *)m, NULL, 0) : 1; }

weft_pp *weft_pp_create(weft_comm *c, weft_module *seq, const weft_pp_opts *opts) {
    weft_pp_opts o = opts ? *opts : (weft_pp_opts){0};
    if (!seq || !is_seq(seq))
        return weft_error_null(WEFT_ERR_ARG, "pp_create: the model must be a sequential (got %s)",
                               seq ? weft_module_kind(seq) : "NULL");
    int n = flatten(seq, NULL, 0), P = size_of(c), rank = rank_of(c);
    if (o.schedule != WEFT_PP_GPIPE && o.schedule != WEFT_PP_1F1B && o.schedule != WEFT_PP_INTERLEAVED)
        return weft_error_null(WEFT_ERR_ARG, "pp_create: unknown schedule %d", (int)o.schedule);
    int M = o.microbatches ? o.microbatches : 1;
    if (M < 1) return weft_error_null(WEFT_ERR_ARG, "pp_create: microbatches = %d must be at least 1", M);
    int V = 1;
    if (o.schedule == WEFT_PP_INTERLEAVED) {
        V = o.virtual_stages ? o.virtual_stages : 2;
        if (V < 1) return weft_error_null(WEFT_ERR_ARG, "pp_create: virtual_stages = %d must be at least 1", V);
        // Megatron's order runs the micro-batches in groups of P per chunk.
        if (M % P)
            return weft_error_null(WEFT_ERR_ARG, "pp_create: microbatches = %d must be a multiple of pp = %d for the "
                                                 "interleaved schedule", M, P);
    } else if (o.virtual_stages > 1)
        return weft_error_null(WEFT_ERR_ARG, "pp_create: virtual_stages = %d needs the interleaved schedule",
                               o.virtual_stages);
    int K = P * V; // chunks
    if (K > n) {
        if (V > 1)
            return weft_error_null(WEFT_ERR_ARG, "pp_create: pp = %d x virtual_stages = %d = %d chunks exceed the %d "
                                                 "layers of the model", P, V, K, n);
        return weft_error_null(WEFT_ERR_ARG, "pp_create: pp = %d stages exceed the %d layers of the model", P, n);
    }
    weft_pp *p = calloc(1, sizeof *p);
    if (!p) return weft_error_null(WEFT_ERR_OOM, "pp_create: out of memory");
    *p = (weft_pp){.comm = c, .P = P, .rank = rank, .V = V, .M = M, .schedule = o.schedule,
                   .recompute = o.recompute, .seq = seq, .n = n};
    p->layers = malloc(sizeof(weft_module *) * (size_t)(n ? n : 1));
    if (p->layers) flatten(seq, p->layers, 0);
    p->chunk_of = malloc(sizeof(int) * (size_t)(n ? n : 1));
    p->first = calloc((size_t)K, sizeof(int));
    p->count = calloc((size_t)K, sizeof(int));
    double *cost = malloc(sizeof(double) * (size_t)n);
    weft_status st = p->layers && p->chunk_of && p->first && p->count && cost ? WEFT_OK
                                                                  : weft_error(WEFT_ERR_OOM, "pp_create: out of memory");
    if (!st && o.stage_of) {
        for (int i = 0; i < n && !st; i++) {
            int k = o.stage_of[i], prev = i ? o.stage_of[i - 1] : 0;
            if (k < 0 || k >= K)
                st = weft_error(WEFT_ERR_ARG, "pp_create: stage_of[%d] = %d is not a chunk in [0, %d)", i, k, K);
            else if (i ? (k != prev && k != prev + 1) : k != 0)
                st = weft_error(WEFT_ERR_ARG, "pp_create: stage_of[%d] = %d: chunks must follow the layers in order, "
                                              "each used (after %d comes %d or %d)", i, k, prev, prev, prev + 1);
            else p->chunk_of[i] = k;
        }
        if (!st && p->chunk_of[n - 1] != K - 1)
            st = weft_error(WEFT_ERR_ARG, "pp_create: stage_of uses chunks 0..%d, but pp = %d x virtual_stages = %d "
                                          "needs %d", p->chunk_of[n - 1], P, V, K);
    } else if (!st) {
        if (o.split == WEFT_PP_SPLIT_LAYERS)
            for (int i = 0; i < n; i++) cost[i] = 1;
        else if (o.split == WEFT_PP_SPLIT_PARAMS)
            for (int i = 0; i < n; i++) cost[i] = (double)weft_module_num_elements(p->layers[i]);
        else if (o.split == WEFT_PP_SPLIT_COST) {
            if (!o.cost_sample)
                st = weft_error(WEFT_ERR_ARG, "pp_create: split by cost needs cost_sample (a micro-batch of inputs)");
            else st = measure_costs(c, seq, p->layers, o.cost_sample, n, cost);
        } else
            st = weft_error(WEFT_ERR_ARG, "pp_create: unknown split %d", (int)o.split);
        if (!st && o.split == WEFT_PP_SPLIT_LAYERS) // as weft_dist_chunk: the first n % K chunks get one more
            for (int k = 0, i = 0; k < K; k++) {
                int64_t off, cnt;
                weft_dist_chunk(n, K, k, &off, &cnt);
                for (int j = 0; j < cnt; j++) p->chunk_of[i++] = k;
            }
        else if (!st)
            st = weft_pp_partition(n, cost, K, p->chunk_of);
    }
    free(cost);
    if (st) {
        weft_pp_free(p);
        return NULL;
    }
    for (int i = n - 1; i >= 0; i--) {
        p->first[p->chunk_of[i]] = i;
        p->count[p->chunk_of[i]]++;
    }
    return p;
}

int weft_pp_num_layers(const weft_pp *p) { return p ? p->n : 0; }

weft_module *weft_pp_layer(const weft_pp *p, int i) { return p && i >= 0 && i < p->n ? p->layers[i] : NULL; }

int weft_pp_chunk_of(const weft_pp *p, int layer) {
    return p && layer >= 0 && layer < p->n ? p->chunk_of[layer] : -1;
}

bool weft_pp_holds(const weft_pp *p, int layer) {
    int k = weft_pp_chunk_of(p, layer);
    return k >= 0 && k % p->P == p->rank;
}

int weft_pp_params(const weft_pp *p, weft_tensor **params) {
    int n = 0;
    for (int i = 0; p && i < p->n; i++) {
        if (!weft_pp_holds(p, i)) continue;
        weft_module *ch = p->layers[i];
        for (int j = 0; j < weft_module_param_count(ch); j++, n++)
            if (params) params[n] = weft_module_param_at(ch, j, NULL, 0);
    }
    return n;
}
