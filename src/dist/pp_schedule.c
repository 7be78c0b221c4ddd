// Pipeline parallelism, part 2: the schedules and the step
// (weft/parallel.h).
//
// A schedule is, for each rank, a list of actions F(v, m) / B(v, m): the
// forward or backward of micro-batch m through this rank's local chunk v
// (global chunk k = v * P + rank). With P = 4, M = 4, a forward and a
// backward taking one column each (dots: the bubble):
//
//   GPipe   rank 0  F0 F1 F2 F3 .  .  .  .  .  .  B0 B1 B2 B3
//           rank 1  .  F0 F1 F2 F3 .  .  .  .  B0 B1 B2 B3 .
//           rank 2  .  .  F0 F1 F2 F3 .  .  B0 B1 B2 B3 .  .
//           rank 3  .  .  .  F0 F1 F2 F3 B0 B1 B2 B3 .  .  .
//   1F1B    rank 0  F0 F1 F2 F3 .  .  .  B0 .  B1 .  B2 .  B3
//           rank 1  .  F0 F1 F2 .  .  B0 F3 B1 .  B2 .  B3 .
//           rank 2  .  .  F0 F1 .  B0 F2 B1 F3 B2 .  B3 .  .
//           rank 3  .  .  .  F0 B0 F1 B1 F2 B2 F3 B3 .  .  .
//
// Both idle (p-1)/(m+p-1) of the step; 1F1B (PipeDream-Flush) holds at most
// P - rank micro-batches' activations instead of M. Interleaved 1F1B
// (Megatron) gives each rank V chunks k = rank, rank + P, ...; a
// micro-batch passes every rank V times, each pass 1/V of the work, and the
// bubble shrinks to (p-1)/(v*m+p-1). docs/parallelism.md draws it.
//
// Every rank's backwards of one chunk run in micro-batch order 0, 1, ...,
// so the gradients accumulate in the same order under every schedule (and
// the schedules agree bit for bit with one another).
//
// Messages: the activation into chunk k of micro-batch m has tag
// 2 * (k * M + m), preceded by a header (tag + 1: ndim, dtype, sizes) so
// that the receiver knows its shape; its gradient comes back with the same
// tag in the other direction.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <weft/autograd.h>

#include "../core/core_impl.h"
#include "pp_impl.h"

// The i-th forward (or backward) of an interleaved rank (Megatron's
// get_model_chunk_id): micro-batches go in groups of P through local chunk
// 0, then the same group through chunk 1, ...; backwards visit the chunks
// in reverse.
static weft_pp_action nth(int P, int V, int i, bool fwd) {
    int v = (i % (P * V)) / P;
    return (weft_pp_action){fwd, fwd ? v : V - 1 - v, i / (P * V) * P + i % P};
}

int weft_pp_actions(weft_pp_schedule s, int P, int V, int M, int r, weft_pp_action *a) {
    int n = V * M, k = 0;
    if (s == WEFT_PP_GPIPE) {
        for (int m = 0; m < M; m++) a[k++] = (weft_pp_action){true, 0, m};
        for (int m = 0; m < M; m++) a[k++] = (weft_pp_action){false, 0, m};
        return k;
    }
    // 1F1B and interleaved: warm-up forwards (as many as the ranks after
    // this one need to fill the pipe), then one forward, one backward, then
    // the remaining backwards. Interleaved with M == P: all forwards first.
    int warm;
    if (s == WEFT_PP_1F1B) warm = P - r - 1;
    else warm = M == P ? n : (P - r - 1) * 2 + (V - 1) * P;
    if (warm > n) warm = n;
    // (1F1B is the interleaved order with V = 1: the i-th micro-batch.)
    for (int i = 0; i < warm; i++) a[k++] = nth(P, V, i, true);
    for (int i = 0; i < n - warm; i++) a[k++] = nth(P, V, warm + i, true), a[k++] = nth(P, V, i, false);
    for (int i = n - warm; i < n; i++) a[k++] = nth(P, V, i, false);
    return k;
}

double weft_pp_bubble_theory(weft_pp_schedule s, int p, int m, int v) {
    if (p < 1 || m < 1) return 0;
    if (s != WEFT_PP_INTERLEAVED || v < 1) v = 1;
    return (double)(p - 1) / ((double)v * m + p - 1);
}

weft_pp_stats weft_pp_last_stats(const weft_pp *p) { return p ? p->stats : (weft_pp_stats){0}; }

// Children [first, first + count) of chunk k applied to x (not consumed).
static weft_tensor *run_chunk(weft_pp *p, int k, weft_tensor *x) {
    weft_tensor *cur = weft_tensor_ref(x);
    for (int i = p->first[k]; i < p->first[k] + p->count[k] && cur; i++) {
        weft_tensor *y = weft_module_forward(p->layers[i], cur);
        if (!y) weft_error(weft_last_status(), "pp_step: layer %d (%s): %s", i, weft_module_kind(p->layers[i]),
                           weft_last_error());
        weft_tensor_free(cur);
        cur = y;
    }
    return cur;
}

// Where chunk k's inputs live: the device of its first parameter; for a
// chunk without parameters (activations only), the model's first one's; CPU
// if the model has none.
static weft_device chunk_device(const weft_pp *p, int k) {
    for (int i = p->first[k]; i < p->first[k] + p->count[k]; i++) {
        weft_module *ch = p->layers[i];
        if (weft_module_param_count(ch)) return weft_tensor_device(weft_module_param_at(ch, 0, NULL, 0));
    }
    if (weft_module_param_count(p->seq)) return weft_tensor_device(weft_module_param_at(p->seq, 0, NULL, 0));
    return WEFT_DEVICE_CPU;
}

// What one (chunk, micro-batch) keeps from its forward to its backward.
typedef struct {
    weft_tensor *root; // the scaled loss (last chunk) or the send's token; NULL under recompute
    weft_tensor *in;   // the chunk's input (recompute only)
    weft_tensor *tgt;  // the targets (last chunk)
    int ndim;          // the output's shape, for a gradient that must be drained
    int64_t sizes[WEFT_MAX_DIMS];
    weft_dtype dt;
    weft_device dev;
} slot;

static void slot_clear(slot *s) {
    weft_tensor_free(s->root);
    weft_tensor_free(s->in);
    weft_tensor_free(s->tgt);
    memset(s, 0, sizeof *s);
}

static int tag_of(const weft_pp *p, int k, int m) { return 2 * (k * p->M + m); }

// Rows [off, off + n) of t, contiguous.
static weft_tensor *rows_at(weft_tensor *t, int64_t off, int64_t n) {
    weft_tensor *v = weft_narrow(t, 0, off, n);
    weft_tensor *c = v ? weft_tensor_contiguous(v) : NULL;
    weft_tensor_free(v);
    return c;
}

// Rows [m * b, (m + 1) * b) of t.
static weft_tensor *rows(weft_tensor *t, int m, int64_t b) { return rows_at(t, m * b, b); }

static weft_tensor *scaled_loss(weft_pp *p, weft_tensor *out, weft_tensor *tgt, weft_pp_loss_fn loss, void *user) {
    weft_tensor *l = loss(out, tgt, user);
    if (!l) return weft_error_null(weft_last_status(), "pp_step: loss: %s", weft_last_error());
    weft_tensor *s = weft_tensor_numel(l) == 1 ? weft_mul_scalar(l, 1.0 / p->M) : NULL;
    if (!s && weft_tensor_numel(l) != 1)
        weft_error(WEFT_ERR_SHAPE, "pp_step: the loss must have one element (got %lld)", (long long)weft_tensor_numel(l));
    weft_tensor_free(l);
    return s;
}

// An activation travels after a header (tag + 1: ndim, dtype, sizes) so that
// the receiver knows its shape. post_header sends out's; take_header
// receives one from src into (ndim, sizes, dt).
typedef struct {
    int ndim;
    int64_t sizes[WEFT_MAX_DIMS];
    weft_dtype dt;
} act_shape;

static weft_status post_header(const weft_pp *p, const weft_tensor *out, int dst, int tag) {
    int64_t h[2 + WEFT_MAX_DIMS] = {weft_tensor_ndim(out), weft_tensor_dtype(out)};
    memcpy(h + 2, weft_tensor_sizes(out), sizeof(int64_t) * (size_t)weft_tensor_ndim(out));
    weft_tensor *ht = weft_pp_host(h, 2 + WEFT_MAX_DIMS, WEFT_I64);
    weft_status st = ht ? weft_pp_post(p->comm, ht, dst, tag + 1, PP_DIR_ACT) : weft_last_status();
    weft_tensor_free(ht);
    return st;
}

static weft_status take_header(const weft_pp *p, int src, int tag, act_shape *a) {
    int64_t h[2 + WEFT_MAX_DIMS];
    weft_tensor *ht = weft_pp_take(p->comm, WEFT_DIMS(2 + WEFT_MAX_DIMS), WEFT_I64, WEFT_DEVICE_CPU, src, tag + 1,
                                   PP_DIR_ACT);
    if (!ht) return weft_last_status();
    memcpy(h, weft_tensor_data(ht), sizeof h);
    weft_tensor_free(ht);
    a->ndim = (int)h[0];
    a->dt = (weft_dtype)h[1];
    memcpy(a->sizes, h + 2, sizeof a->sizes);
    return WEFT_OK;
}

static weft_status forward(weft_pp *p, slot *s, int v, int m, int64_t b, weft_tensor *x, weft_tensor *y,
                           weft_pp_loss_fn loss, void *user, double *loss_sum) {
    int P = p->P, k = v * P + p->rank, K = P * p->V;
    weft_tensor *in = NULL, *out = NULL;
    weft_status st = WEFT_OK;
    if (k == 0) in = rows(x, m, b);
    else {
        // The header first (blocking like the data), then the data as an
        // autograd receive whose backward returns the gradient.
        act_shape a;
        if ((st = take_header(p, (k - 1) % P, tag_of(p, k, m), &a))) return st;
        in = weft_pp_recv(p->comm, a.ndim, a.sizes, a.dt, chunk_device(p, k), (k - 1) % P, tag_of(p, k, m), true);
    }
    if (!in) return weft_last_status();
    if (p->recompute) {
        WEFT_NO_GRAD { out = run_chunk(p, k, in); }
    } else
        out = run_chunk(p, k, in);
    if (!out) st = weft_last_status();
    if (!st && k == K - 1) {
        s->tgt = rows(y, m, b);
        weft_tensor *l = NULL;
        if (!s->tgt) st = weft_last_status();
        else if (p->recompute) {
            WEFT_NO_GRAD { l = scaled_loss(p, out, s->tgt, loss, user); }
        } else
            l = scaled_loss(p, out, s->tgt, loss, user);
        if (!l) st = weft_last_status();
        else *loss_sum += weft_tensor_item(l);
        if (p->recompute) weft_tensor_free(l);
        else s->root = l;
    } else if (!st) {
        s->ndim = weft_tensor_ndim(out);
        memcpy(s->sizes, weft_tensor_sizes(out), sizeof(int64_t) * (size_t)s->ndim);
        s->dt = weft_tensor_dtype(out);
        s->dev = weft_tensor_device(out);
        st = post_header(p, out, (k + 1) % P, tag_of(p, k + 1, m));
        if (!st && p->recompute) st = weft_pp_post(p->comm, out, (k + 1) % P, tag_of(p, k + 1, m), PP_DIR_ACT);
        else if (!st && !(s->root = weft_pp_send(p->comm, out, (k + 1) % P, tag_of(p, k + 1, m))))
            st = weft_last_status();
    }
    if (p->recompute && !st) s->in = weft_tensor_ref(in);
    weft_tensor_free(in);
    weft_tensor_free(out);
    return st;
}

static weft_status backward(weft_pp *p, slot *s, int v, int m, weft_pp_loss_fn loss, void *user) {
    int P = p->P, k = v * P + p->rank, K = P * p->V;
    weft_status st = WEFT_OK;
    if (p->recompute) { // the forward again, this time recorded
        weft_tensor *out = run_chunk(p, k, s->in);
        if (!out) return weft_last_status();
        if (k == K - 1) s->root = scaled_loss(p, out, s->tgt, loss, user);
        else s->root = weft_pp_send_token(p->comm, out, (k + 1) % P, tag_of(p, k + 1, m), false);
        weft_tensor_free(out);
        if (!s->root) return weft_last_status();
    }
    if (weft_tensor_requires_grad(s->root)) st = weft_backward(s->root, NULL, NULL);
    else if (k < K - 1) { // nothing here needs it, but the next stage sent it
        weft_tensor *g = weft_pp_take(p->comm, s->ndim, s->sizes, s->dt, s->dev, (k + 1) % P, tag_of(p, k + 1, m),
                                      PP_DIR_GRAD);
        if (!g) st = weft_last_status();
        weft_tensor_free(g);
    }
    if (st) st = weft_error(st, "pp_step: backward of micro-batch %d, chunk %d: %s", m, k, weft_last_error());
    return st;
}

// Every rank learns the batch size and whether the input and the targets
// are there, so that all of them fail together (before any message).
static weft_status agree_batch(weft_pp *p, weft_tensor *x, weft_tensor *y, weft_pp_loss_fn loss, bool divisible,
                               int64_t *batch) {
    bool first = p->rank == 0, last = p->rank == (p->P * p->V - 1) % p->P;
    int64_t v[4] = {0, 0, 0, 0}; // batch of x, batch of y, x missing, y or loss missing
    if (first) {
        if (x && weft_tensor_ndim(x) >= 1) v[0] = weft_tensor_size(x, 0);
        else v[2] = 1;
    }
    if (last) {
        if (y && weft_tensor_ndim(y) >= 1 && loss) v[1] = weft_tensor_size(y, 0);
        else v[3] = 1;
    }
    if (p->comm && p->P > 1) {
        weft_tensor *t = weft_pp_host(v, 4, WEFT_I64);
        weft_status st = t ? weft_dist_all_reduce(p->comm, t, WEFT_REDUCE_MAX) : weft_last_status();
        if (!st) memcpy(v, weft_tensor_data(t), sizeof v);
        weft_tensor_free(t);
        if (st) return weft_error(st, "pp_step: %s", weft_last_error());
    }
    if (v[2]) return weft_error(WEFT_ERR_ARG, "pp_step: no input batch x (with a batch dimension) on the first stage");
    if (v[3]) return weft_error(WEFT_ERR_ARG, "pp_step: no targets y or no loss function on the last stage");
    if (v[0] != v[1])
        return weft_error(WEFT_ERR_SHAPE, "pp_step: the batch of x (%lld) and of y (%lld) differ", (long long)v[0],
                          (long long)v[1]);
    if (v[0] < p->M || (divisible && v[0] % p->M))
        return weft_error(WEFT_ERR_ARG, "pp_step: microbatches = %d does not divide the batch of %lld", p->M,
                          (long long)v[0]);
    *batch = v[0];
    return WEFT_OK;
}

weft_status weft_pp_step(weft_pp *p, weft_tensor *x, weft_tensor *y, weft_pp_loss_fn loss, void *user,
                         double *loss_out) {
    if (!p) return weft_error(WEFT_ERR_ARG, "pp_step: NULL pipeline");
    int64_t batch = 0;
    weft_status st = agree_batch(p, x, y, loss, true, &batch);
    if (st) return st;
    int64_t b = batch / p->M;
    int n = p->V * p->M;
    weft_pp_action *a = malloc(sizeof(weft_pp_action) * (size_t)(2 * n));
    if (a) weft_pp_actions(p->schedule, p->P, p->V, p->M, p->rank, a);
    slot *slots = calloc((size_t)n, sizeof(slot));
    if (!a || !slots) {
        free(a);
        free(slots);
        return weft_error(WEFT_ERR_OOM, "pp_step: out of memory");
    }
    bool grad_was = weft_grad_set_enabled(true);
    double loss_sum = 0, busy = 0, t0 = weft_pp_now();
    for (int i = 0; i < 2 * n && !st; i++) {
        double ta = weft_pp_now(), wa = weft_pp_wait_seconds();
        slot *s = &slots[a[i].v * p->M + a[i].m];
        if (a[i].fwd) st = forward(p, s, a[i].v, a[i].m, b, x, y, loss, user, &loss_sum);
        else {
            st = backward(p, s, a[i].v, a[i].m, loss, user);
            slot_clear(s);
        }
        busy += (weft_pp_now() - ta) - (weft_pp_wait_seconds() - wa);
    }
    weft_grad_set_enabled(grad_was);
    for (int i = 0; i < n; i++) slot_clear(&slots[i]);
    free(slots);
    free(a);
    // On an error the other ranks' receives fail by their timeout; still
    // wait for this rank's sends so that their buffers are not in flight.
    weft_status ws = weft_pp_wait_sends(p->comm);
    if (!st) st = ws;
    // The loss lives on the last chunk's rank: an all-reduce (the others add
    // zeros, exactly) gives it to every rank and ends the step together, so
    // that each rank's step time is the pipeline's, flush included.
    if (!st && p->comm && p->P > 1) {
        double mine = p->rank == (p->P * p->V - 1) % p->P ? loss_sum : 0;
        weft_tensor *t = weft_pp_host(&mine, 1, WEFT_F64);
        st = t ? weft_dist_all_reduce(p->comm, t, WEFT_REDUCE_SUM) : weft_last_status();
        if (!st) loss_sum = weft_tensor_item(t);
        weft_tensor_free(t);
        if (st) st = weft_error(st, "pp_step: %s", weft_last_error());
    }
    double t1 = weft_pp_now();
    p->stats = (weft_pp_stats){.step_s = t1 - t0, .busy_s = busy,
                               .idle_fraction = t1 > t0 ? 1 - busy / (t1 - t0) : 0,
                               .theory = weft_pp_bubble_theory(p->schedule, p->P, p->M, p->V)};
    if (st) return st;
    if (loss_out) *loss_out = loss_sum;
    return WEFT_OK;
}

// ---- forward only (evaluation) ----
// Each rank runs its (micro-batch, chunk) pairs in micro-batch order, chunks
// in order within one: every receive waits on a pair that comes earlier in
// that order on another rank, so no rank waits on one that waits on it.
// The tags differ from a training step's (odd tags, above theirs).
static int eval_tag(const weft_pp *p, int k, int m) { return 2 * (p->P * p->V * p->M) + 2 * (k * p->M + m) + 2; }

weft_status weft_pp_forward(weft_pp *p, weft_tensor *x, weft_tensor *y, weft_pp_eval_fn fn, void *user, int n_acc,
                            double *acc) {
    if (!p || !fn || n_acc < 1 || n_acc > 64 || !acc) return weft_error(WEFT_ERR_ARG, "pp_forward: bad arguments");
    int64_t batch = 0;
    // (any non-NULL loss: y must be there; the micro-batches may differ by a row: an evaluation's last batch)
    weft_status st = agree_batch(p, x, y, (weft_pp_loss_fn)1, false, &batch);
    if (st) return weft_error(st, "%s", weft_last_error());
    int P = p->P, K = P * p->V;
    double local[64] = {0};
    bool grad_was = weft_grad_set_enabled(false);
    for (int m = 0; m < p->M && !st; m++)
        for (int v = 0; v < p->V && !st; v++) {
            int k = v * P + p->rank;
            int64_t off, cnt; // micro-batch m: rows [off, off + cnt)
            weft_dist_chunk(batch, p->M, m, &off, &cnt);
            weft_tensor *in = NULL, *out = NULL;
            if (k == 0) in = rows_at(x, off, cnt);
            else {
                act_shape a;
                in = take_header(p, (k - 1) % P, eval_tag(p, k, m), &a)
                         ? NULL
                         : weft_pp_take(p->comm, a.ndim, a.sizes, a.dt, chunk_device(p, k), (k - 1) % P,
                                        eval_tag(p, k, m), PP_DIR_ACT);
            }
            out = in ? run_chunk(p, k, in) : NULL;
            if (!out) st = weft_last_status();
            else if (k == K - 1) {
                weft_tensor *tgt = rows_at(y, off, cnt);
                st = tgt ? fn(out, tgt, user, local) : weft_last_status();
                weft_tensor_free(tgt);
            } else {
                st = post_header(p, out, (k + 1) % P, eval_tag(p, k + 1, m));
                if (!st) st = weft_pp_post(p->comm, out, (k + 1) % P, eval_tag(p, k + 1, m), PP_DIR_ACT);
            }
            weft_tensor_free(in);
            weft_tensor_free(out);
        }
    weft_grad_set_enabled(grad_was);
    weft_status ws = weft_pp_wait_sends(p->comm);
    if (!st) st = ws;
    // The sums live on the last chunk's rank; every rank gets them (and they
    // all fail together: a failed rank adds NaN).
    if (p->comm && P > 1) {
        int last = (K - 1) % P;
        for (int i = 0; i < n_acc; i++) local[i] = st ? NAN : p->rank == last ? local[i] : 0;
        int64_t na = n_acc;
        weft_tensor *t = weft_pp_host(local, na, WEFT_F64);
        weft_status cs = t ? weft_dist_all_reduce(p->comm, t, WEFT_REDUCE_SUM) : weft_last_status();
        if (!cs) memcpy(local, weft_tensor_data(t), sizeof(double) * (size_t)n_acc);
        weft_tensor_free(t);
        if (!st && cs) st = cs;
        if (!st && isnan(local[0]))
            st = weft_error(WEFT_ERR_STATE, "pp_forward: another stage of the pipeline failed");
    }
    if (st) return st;
    for (int i = 0; i < n_acc; i++) acc[i] += local[i];
    return WEFT_OK;
}
