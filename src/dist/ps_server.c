// Parameter server: the server side. One loop takes requests from any worker
// (in the order each worker sent them), applies pushes to this server's shards
// with the optimiser, and answers pulls when the consistency mode allows;
// pulls that must wait are kept until a push or a finishing worker lets them go.
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ps_proto.h"

#ifdef WEFT_HAVE_MPI
#include <weft/io.h>

// Spin briefly, then sleep: oversubscribed ranks (tests run 5 ranks on 2
// cores) must not burn the cores the others need, and MPI's own blocking
// waits busy-poll.
void ps_backoff(int *spins) {
    if (*spins < 64) sched_yield();
    else {
        struct timespec ts = {0, *spins < 1024 ? 5000 : 50000};
        nanosleep(&ts, NULL);
    }
    (*spins)++;
}

typedef struct pending {
    int worker;
    int64_t need;        // BSP: steps applied; SSP: slowest clock + s; ASP: none
    int64_t reply_clock; // -1: the steps applied when answered (BSP steps)
    unsigned char *want; // flags per shard (owned)
} pending;

typedef struct outmsg {
    MPI_Request req;
    char *buf;
} outmsg;

struct ps_server {
    int ns;              // shards here (parameters ps->shards[server][0..ns))
    weft_tensor **shard; // leaves of shape (rows here, sizes[1:]...)
    weft_tensor **acc;   // BSP: gradient sum; ASP/SSP: the scaled gradient
    // BSP: each accepted push's gradients are kept per worker and summed in
    // worker order when the step completes, so the result does not depend on
    // the order pushes arrive in (float sums are not associative).
    char **slot;         // per worker: gradients, shard j at slot_off[j]
    unsigned char **slot_flags;
    bool *took;          // per worker: its push counts for the current step
    size_t *slot_off, slot_bytes;
    weft_optim *opt;     // NULL when this server holds nothing
    int64_t applied;     // BSP: steps applied
    int accepted;        // BSP: pushes taken for step `applied`
    double step_lr;
    int64_t *clock;      // per worker: pushes made (BSP: the step it is at)
    bool *done;
    int ndone;
    pending *pend;
    int npend, cappend;
    outmsg *out;
    int nout, capout;
    // checkpoint barrier: workers that asked, and what
    bool *ck_in;
    int ck_n, ck_kind;
    int64_t ck_step;
    char *ck_dir;
    char *rbuf;
    size_t rcap;
    weft_status err; // first internal error, returned by weft_ps_serve
    char errmsg[512];
    int64_t pushes, applied_n, dropped, pulls, max_stale, rows_touched;
};

static weft_status srv_fail(ps_server *v, weft_status s) {
    if (!v->err) {
        v->err = s;
        snprintf(v->errmsg, sizeof v->errmsg, "%s", weft_last_error());
    }
    return s;
}

weft_status ps_server_init(weft_ps *ps) {
    int s = ps->server, W = ps->workers;
    ps_server *v = calloc(1, sizeof *v);
    if (!v) return weft_error(WEFT_ERR_OOM, "weft_ps_create: out of memory");
    ps->srv = v;
    v->ns = ps->nshards[s];
    v->shard = calloc((size_t)v->ns + 1, sizeof *v->shard);
    v->acc = calloc((size_t)v->ns + 1, sizeof *v->acc);
    v->slot = calloc((size_t)W, sizeof *v->slot);
    v->slot_flags = calloc((size_t)W, sizeof *v->slot_flags);
    v->took = calloc((size_t)W, sizeof *v->took);
    v->slot_off = calloc((size_t)v->ns + 1, sizeof *v->slot_off);
    v->clock = calloc((size_t)W, sizeof *v->clock);
    v->done = calloc((size_t)W, sizeof *v->done);
    v->ck_in = calloc((size_t)W, sizeof *v->ck_in);
    const char **names = calloc((size_t)v->ns + 1, sizeof *names);
    size_t bytes = 0;
    for (int j = 0; j < v->ns; j++) bytes += ps_shard_bytes(&ps->p[ps->shards[s][j]], s);
    char *buf = malloc(bytes + 1);
    weft_status st = WEFT_OK;
    if (!v->shard || !v->acc || !v->slot || !v->slot_flags || !v->took || !v->slot_off || !v->clock || !v->done || !v->ck_in || !names || !buf)
        st = weft_error(WEFT_ERR_OOM, "weft_ps_create: out of memory");
    // Always receive, so rank 0's send completes even when this server fails.
    MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, PS_TAG_INIT, ps->comm, MPI_STATUS_IGNORE);
    v->rows_touched = 0;
    size_t off = 0;
    for (int j = 0; j < v->ns && !st; j++) {
        const ps_param *p = &ps->p[ps->shards[s][j]];
        int64_t sz[WEFT_MAX_DIMS];
        memcpy(sz, p->sizes, sizeof sz);
        if (p->ndim > 0) sz[0] = p->row_cnt[s];
        // Servers keep their shards on the CPU, whatever the default device.
        v->shard[j] = weft_tensor_empty_on(p->ndim, sz, p->dt, WEFT_DEVICE_CPU);
        v->acc[j] = weft_tensor_full_on(p->ndim, sz, p->dt, 0, WEFT_DEVICE_CPU);
        if (!v->shard[j] || !v->acc[j]) {
            st = weft_error(WEFT_ERR_OOM, "weft_ps_create: out of memory for the shard of '%s'", p->name);
            break;
        }
        memcpy(weft_tensor_data(v->shard[j]), buf + off, ps_shard_bytes(p, s));
        v->slot_off[j] = off;
        off += ps_shard_bytes(p, s);
        names[j] = p->name;
    }
    v->slot_bytes = bytes;
    ps->st.bytes_in += (double)bytes;
    if (!st && v->ns > 0) {
        v->opt = weft_optim_create(&ps->o.optim, v->ns, v->shard, names);
        if (!v->opt) st = weft_error(weft_last_status(), "weft_ps_create: %s", weft_last_error());
    }
    free(names);
    free(buf);
    return st;
}

void ps_server_free(weft_ps *ps) {
    ps_server *v = ps->srv;
    if (!v) return;
    for (int j = 0; j < v->ns; j++) {
        weft_tensor_free(v->shard ? v->shard[j] : NULL);
        weft_tensor_free(v->acc ? v->acc[j] : NULL);
    }
    weft_optim_free(v->opt);
    for (int k = 0; k < v->npend; k++) free(v->pend[k].want);
    for (int k = 0; k < v->nout; k++) {
        MPI_Wait(&v->out[k].req, MPI_STATUS_IGNORE);
        free(v->out[k].buf);
    }
    free(v->shard);
    free(v->acc);
    for (int w = 0; w < ps->workers; w++) {
        free(v->slot ? v->slot[w] : NULL);
        free(v->slot_flags ? v->slot_flags[w] : NULL);
    }
    free(v->slot);
    free(v->slot_flags);
    free(v->took);
    free(v->slot_off);
    free(v->clock);
    free(v->done);
    free(v->ck_in);
    free(v->ck_dir);
    free(v->pend);
    free(v->out);
    free(v->rbuf);
    free(v);
    ps->srv = NULL;
}

void ps_server_stats(const weft_ps *ps, weft_ps_stats *s) {
    const ps_server *v = ps->srv;
    if (!v) return;
    s->pushes = v->pushes;
    s->applied = v->applied_n;
    s->dropped = v->dropped;
    s->pulls = v->pulls;
    s->max_staleness = v->max_stale;
    s->rows_touched = v->rows_touched;
}

// ---- sending ----

// Takes ownership of buf (malloc'd) and sends it without blocking: a server
// never waits on one worker while others wait on it.
static void srv_send(weft_ps *ps, int worker, char *buf, size_t bytes) {
    ps_server *v = ps->srv;
    if (v->nout == v->capout) {
        int cap = v->capout ? 2 * v->capout : 16;
        outmsg *o = realloc(v->out, sizeof *o * (size_t)cap);
        if (!o) {
            srv_fail(v, weft_error(WEFT_ERR_OOM, "weft_ps_serve: out of memory"));
            free(buf);
            return;
        }
        v->out = o;
        v->capout = cap;
    }
    outmsg *m = &v->out[v->nout++];
    m->buf = buf;
    MPI_Isend(buf, (int)bytes, MPI_BYTE, worker, PS_TAG_REP, ps->comm, &m->req);
    ps->st.bytes_out += (double)bytes;
}

static bool srv_progress_sends(ps_server *v) {
    bool any = false;
    for (int k = 0; k < v->nout;) {
        int f = 0;
        MPI_Test(&v->out[k].req, &f, MPI_STATUS_IGNORE);
        if (f) {
            free(v->out[k].buf);
            v->out[k] = v->out[--v->nout];
            any = true;
        } else k++;
    }
    return any;
}

static void srv_reply_status(weft_ps *ps, int worker, int kind, weft_status st) {
    const char *msg = st ? weft_last_error() : "";
    size_t ml = strlen(msg) + 1;
    if (ml > 1000) ml = 1000;
    char *b = malloc(sizeof(ps_hdr) + ml);
    if (!b) {
        srv_fail(ps->srv, weft_error(WEFT_ERR_OOM, "weft_ps_serve: out of memory"));
        return;
    }
    ps_hdr h = {.kind = kind, .status = st};
    memcpy(b, &h, sizeof h);
    memcpy(b + sizeof h, msg, ml);
    b[sizeof h + ml - 1] = 0;
    srv_send(ps, worker, b, sizeof h + ml);
}

// ---- consistency ----

static int64_t slowest(const weft_ps *ps) {
    const ps_server *v = ps->srv;
    int64_t m = INT64_MAX;
    for (int w = 0; w < ps->workers; w++)
        if (!v->done[w] && v->clock[w] < m) m = v->clock[w];
    return m;
}

static bool pull_ready(const weft_ps *ps, const pending *p) {
    const ps_server *v = ps->srv;
    switch (ps->o.mode) {
    case WEFT_PS_BSP: return v->applied >= p->need;
    case WEFT_PS_ASP: return true;
    case WEFT_PS_SSP: return slowest(ps) >= p->need - ps->o.staleness;
    }
    return true;
}

static void answer_pull(weft_ps *ps, pending *p) {
    ps_server *v = ps->srv;
    int s = ps->server;
    size_t bytes = sizeof(ps_hdr);
    for (int j = 0; j < v->ns; j++)
        if (p->want[j] & PS_F_WANT) bytes += ps_shard_bytes(&ps->p[ps->shards[s][j]], s);
    char *b = malloc(bytes);
    if (!b) {
        srv_fail(v, weft_error(WEFT_ERR_OOM, "weft_ps_serve: out of memory"));
        return;
    }
    int64_t clock = p->reply_clock >= 0 ? p->reply_clock : v->applied;
    ps_hdr h = {.kind = PS_PULL, .clock = clock};
    memcpy(b, &h, sizeof h);
    size_t off = sizeof h;
    for (int j = 0; j < v->ns; j++) {
        if (!(p->want[j] & PS_F_WANT)) continue;
        size_t sb = ps_shard_bytes(&ps->p[ps->shards[s][j]], s);
        memcpy(b + off, weft_tensor_data(v->shard[j]), sb);
        off += sb;
    }
    int64_t slow = slowest(ps);
    if (slow != INT64_MAX && clock - slow > v->max_stale) v->max_stale = clock - slow;
    v->pulls++;
    srv_send(ps, p->worker, b, bytes);
}

// Answers every waiting pull the mode now allows.
static void release_pulls(weft_ps *ps) {
    ps_server *v = ps->srv;
    for (int k = 0; k < v->npend;) {
        if (pull_ready(ps, &v->pend[k])) {
            answer_pull(ps, &v->pend[k]);
            free(v->pend[k].want);
            // Keep the order of the rest (earlier requests first).
            memmove(&v->pend[k], &v->pend[k + 1], sizeof *v->pend * (size_t)(v->npend - k - 1));
            v->npend--;
        } else k++;
    }
}

static void queue_pull(weft_ps *ps, int worker, int64_t need, int64_t reply_clock, const unsigned char *flags) {
    ps_server *v = ps->srv;
    if (v->npend == v->cappend) {
        int cap = v->cappend ? 2 * v->cappend : 16;
        pending *p = realloc(v->pend, sizeof *p * (size_t)cap);
        if (!p) {
            srv_fail(v, weft_error(WEFT_ERR_OOM, "weft_ps_serve: out of memory"));
            return;
        }
        v->pend = p;
        v->cappend = cap;
    }
    pending *p = &v->pend[v->npend];
    p->worker = worker;
    p->need = need;
    p->reply_clock = reply_clock;
    p->want = malloc((size_t)v->ns + 1);
    if (!p->want) {
        srv_fail(v, weft_error(WEFT_ERR_OOM, "weft_ps_serve: out of memory"));
        return;
    }
    memcpy(p->want, flags, (size_t)v->ns);
    v->npend++;
}

// ---- applying gradients ----

static void axpy_into(weft_tensor *dst, const char *src, double a, bool accumulate) {
    int64_t n = weft_tensor_numel(dst);
    if (weft_tensor_dtype(dst) == WEFT_F32) {
        float *d = weft_tensor_data(dst);
        const float *g = (const float *)src;
        float af = (float)a;
        if (accumulate)
            for (int64_t k = 0; k < n; k++) d[k] += af * g[k];
        else
            for (int64_t k = 0; k < n; k++) d[k] = af * g[k];
    } else {
        double *d = weft_tensor_data(dst);
        const double *g = (const double *)src;
        if (accumulate)
            for (int64_t k = 0; k < n; k++) d[k] += a * g[k];
        else
            for (int64_t k = 0; k < n; k++) d[k] = a * g[k];
    }
}

static void scale(weft_tensor *t, double a) {
    if (a == 1) return;
    axpy_into(t, weft_tensor_data(t), a, false);
}

// One optimiser update from the acc tensors flagged in use[].
static void optimise(weft_ps *ps, const bool *use, double lr) {
    ps_server *v = ps->srv;
    bool any = false;
    for (int j = 0; j < v->ns; j++)
        if (use[j]) {
            weft_tensor_set_grad(v->shard[j], v->acc[j]);
            any = true;
        }
    if (!any) return;
    weft_optim_set_lr(v->opt, lr);
    if (weft_optim_step(v->opt)) srv_fail(v, weft_error(weft_last_status(), "weft_ps_serve: %s", weft_last_error()));
    weft_optim_zero_grad(v->opt);
    v->applied_n++;
}

static void bsp_apply(weft_ps *ps) {
    ps_server *v = ps->srv;
    bool use[v->ns + 1];
    for (int j = 0; j < v->ns; j++) {
        use[j] = false;
        for (int w = 0; w < ps->workers; w++)
            if (v->took[w] && (v->slot_flags[w][j] & PS_F_GRAD)) {
                axpy_into(v->acc[j], v->slot[w] + v->slot_off[j], 1.0, use[j]);
                use[j] = true;
            }
        if (use[j]) scale(v->acc[j], 1.0 / v->accepted); // missing gradients count as zero
    }
    optimise(ps, use, v->step_lr);
    for (int w = 0; w < ps->workers; w++) v->took[w] = false;
    v->applied++;
    v->accepted = 0;
}

// BSP needs the first N = workers - backup pushes, or every unfinished worker when fewer remain.
static void bsp_maybe_apply(weft_ps *ps) {
    ps_server *v = ps->srv;
    int need = ps->workers - ps->o.backup, active = ps->workers - v->ndone;
    if (active < need) need = active;
    if (v->accepted > 0 && v->accepted >= need) bsp_apply(ps);
}

static void handle_step(weft_ps *ps, int w, const ps_hdr *h, const char *msg, size_t len, bool push) {
    ps_server *v = ps->srv;
    int s = ps->server;
    const unsigned char *flags = (const unsigned char *)msg + sizeof *h;
    size_t need = sizeof *h + ps_pad8((size_t)v->ns);
    for (int j = 0; push && j < v->ns; j++)
        if (flags[j] & PS_F_GRAD) need += ps_shard_bytes(&ps->p[ps->shards[s][j]], s);
    if (len < need) {
        srv_fail(v, weft_error(WEFT_ERR_FORMAT, "weft_ps_serve: short request from worker %d (%zu < %zu bytes)", w, len,
                               need));
        return;
    }
    const char *g = msg + sizeof *h + ps_pad8((size_t)v->ns);
    int64_t c = h->clock;
    if (!push) { // a pull at the worker's clock
        queue_pull(ps, w, c, c, flags);
        release_pulls(ps);
        return;
    }
    v->pushes++;
    if (ps->o.mode == WEFT_PS_BSP) {
        if (c != v->applied) {
            // Late (a backup worker): this step is applied without it. It gets the
            // current parameters and continues at the current step.
            v->dropped++;
            v->clock[w] = v->applied;
            queue_pull(ps, w, v->applied, -1, flags);
        } else {
            if (!v->slot[w]) v->slot[w] = malloc(v->slot_bytes + 1);
            if (!v->slot_flags[w]) v->slot_flags[w] = malloc((size_t)v->ns + 1);
            if (!v->slot[w] || !v->slot_flags[w]) {
                srv_fail(v, weft_error(WEFT_ERR_OOM, "weft_ps_serve: out of memory"));
                return;
            }
            memcpy(v->slot_flags[w], flags, (size_t)v->ns);
            for (int j = 0; j < v->ns; j++) {
                if (!(flags[j] & PS_F_GRAD)) continue;
                size_t b = ps_shard_bytes(&ps->p[ps->shards[s][j]], s);
                memcpy(v->slot[w] + v->slot_off[j], g, b);
                g += b;
            }
            v->took[w] = true;
            v->accepted++;
            v->step_lr = h->lr;
            v->clock[w] = c + 1;
            queue_pull(ps, w, c + 1, -1, flags);
            bsp_maybe_apply(ps);
        }
    } else {
        bool use[v->ns + 1];
        for (int j = 0; j < v->ns; j++) {
            use[j] = flags[j] & PS_F_GRAD;
            if (!use[j]) continue;
            axpy_into(v->acc[j], g, 1.0 / ps->workers, false); // ASP/SSP: lr means what it means in BSP
            g += ps_shard_bytes(&ps->p[ps->shards[s][j]], s);
        }
        optimise(ps, use, h->lr);
        v->clock[w] = c + 1;
        queue_pull(ps, w, c + 1, c + 1, flags);
    }
    release_pulls(ps);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void handle_rows(weft_ps *ps, int w, const ps_hdr *h, const char *msg, size_t len) {
    ps_server *v = ps->srv;
    int s = ps->server;
    int j = -1;
    for (int k = 0; k < v->ns; k++)
        if (ps->shards[s][k] == h->param) j = k;
    bool push = h->kind == PS_PUSH_ROWS;
    const ps_param *p = h->param >= 0 && h->param < ps->n ? &ps->p[h->param] : NULL;
    size_t rowb = p ? ps_row_bytes(p) : 0;
    size_t need = sizeof *h + (size_t)h->count * (sizeof(int64_t) + (push ? rowb : 0));
    if (j < 0 || h->count < 0 || len < need) {
        srv_fail(v, weft_error(WEFT_ERR_FORMAT, "weft_ps_serve: bad row request from worker %d (parameter %d)", w,
                               h->param));
        if (!push) srv_reply_status(ps, w, h->kind, WEFT_ERR_FORMAT); // never leave a worker waiting
        return;
    }
    const int64_t *ids = (const int64_t *)(msg + sizeof *h);
    int64_t k = h->count, nrows = p->row_cnt[s];
    char *data = weft_tensor_data(v->shard[j]);
    if (push) {
        const char *g = msg + sizeof *h + sizeof(int64_t) * (size_t)k;
        for (int64_t r = 0; r < k; r++) {
            if (ids[r] < 0 || ids[r] >= nrows) continue; // checked by the worker
            char *row = data + (size_t)ids[r] * rowb;
            if (p->dt == WEFT_F32) {
                float *d = (float *)row, lr = (float)h->lr;
                const float *gr = (const float *)(g + (size_t)r * rowb);
                for (int64_t e = 0; e < p->row_len; e++) d[e] -= lr * gr[e];
            } else {
                double *d = (double *)row;
                const double *gr = (const double *)(g + (size_t)r * rowb);
                for (int64_t e = 0; e < p->row_len; e++) d[e] -= h->lr * gr[e];
            }
        }
        int64_t *u = malloc(sizeof(int64_t) * (size_t)(k + 1));
        if (!u) {
            srv_fail(v, weft_error(WEFT_ERR_OOM, "weft_ps_serve: out of memory"));
            return;
        }
        memcpy(u, ids, sizeof(int64_t) * (size_t)k);
        qsort(u, (size_t)k, sizeof *u, cmp_i64);
        for (int64_t r = 0; r < k; r++)
            if ((r == 0 || u[r] != u[r - 1]) && u[r] >= 0 && u[r] < nrows) v->rows_touched++;
        free(u);
        return;
    }
    size_t bytes = sizeof *h + (size_t)k * rowb;
    char *b = malloc(bytes);
    if (!b) {
        srv_fail(v, weft_error(WEFT_ERR_OOM, "weft_ps_serve: out of memory"));
        return;
    }
    ps_hdr r = {.kind = PS_PULL_ROWS, .param = h->param, .count = k};
    memcpy(b, &r, sizeof r);
    for (int64_t q = 0; q < k; q++) {
        char *dst = b + sizeof r + (size_t)q * rowb;
        if (ids[q] >= 0 && ids[q] < nrows) memcpy(dst, data + (size_t)ids[q] * rowb, rowb);
        else memset(dst, 0, rowb);
    }
    srv_send(ps, w, b, bytes);
}

// ---- checkpoints ----

static const weft_tensor *optim_lookup(const char *name, void *user) {
    char key[512];
    snprintf(key, sizeof key, "optim/%s", name);
    weft_safetensors *st = user;
    weft_tensor *t = weft_safetensors_find(st, key);
    if (!t) weft_clear_error();
    return t;
}

static weft_status srv_save(weft_ps *ps, const char *dir, int64_t step) {
    ps_server *v = ps->srv;
    char path[4200];
    if (!weft_ps_shard_path(dir, ps->server, step, path, sizeof path))
        return weft_error(WEFT_ERR_ARG, "weft_ps_save: path too long");
    weft_status st = weft_mkdirs(dir);
    if (st) return weft_error(st, "weft_ps_save: %s", weft_last_error());
    int nst = v->opt ? weft_optim_state_count(v->opt) : 0, n = v->ns + nst;
    char **names = calloc((size_t)n + 1, sizeof *names);
    weft_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
    if (!names || !ts) st = weft_error(WEFT_ERR_OOM, "weft_ps_save: out of memory");
    for (int j = 0; j < v->ns && !st; j++) {
        const char *nm = ps->p[ps->shards[ps->server][j]].name;
        names[j] = malloc(strlen(nm) + 8);
        if (!names[j]) st = weft_error(WEFT_ERR_OOM, "weft_ps_save: out of memory");
        else sprintf(names[j], "param/%s", nm);
        ts[j] = v->shard[j];
    }
    for (int k = 0; k < nst && !st; k++) {
        char nm[480];
        ts[v->ns + k] = weft_optim_state_at(v->opt, k, nm, sizeof nm);
        names[v->ns + k] = malloc(strlen(nm) + 8);
        if (!names[v->ns + k]) st = weft_error(WEFT_ERR_OOM, "weft_ps_save: out of memory");
        else sprintf(names[v->ns + k], "optim/%s", nm);
    }
    if (!st) {
        char srv[16], nsrv[16], stp[24], ost[24];
        snprintf(srv, sizeof srv, "%d", ps->server);
        snprintf(nsrv, sizeof nsrv, "%d", ps->servers);
        snprintf(stp, sizeof stp, "%lld", (long long)step);
        snprintf(ost, sizeof ost, "%lld", (long long)(v->opt ? weft_optim_step_count(v->opt) : 0));
        const char *keys[] = {"format", "server", "servers", "step", "optim_steps"};
        const char *vals[] = {"weft-ps-shard", srv, nsrv, stp, ost};
        st = weft_safetensors_save(path, n, (const char *const *)names, ts, 5, keys, vals);
        if (st) st = weft_error(st, "weft_ps_save: %s", weft_last_error());
    }
    for (int k = 0; names && k < n; k++) free(names[k]);
    free(names);
    free(ts);
    return st;
}

static weft_status srv_load(weft_ps *ps, const char *dir, int64_t step) {
    ps_server *v = ps->srv;
    char path[4200];
    if (!weft_ps_shard_path(dir, ps->server, step, path, sizeof path))
        return weft_error(WEFT_ERR_ARG, "weft_ps_load: path too long");
    weft_safetensors *f = weft_safetensors_load(path);
    if (!f) return weft_error(weft_last_status(), "weft_ps_load: %s", weft_last_error());
    weft_status st = WEFT_OK;
    const char *fmt = weft_safetensors_meta(f, "format"), *ns = weft_safetensors_meta(f, "servers");
    const char *ost = weft_safetensors_meta(f, "optim_steps");
    if (!fmt || strcmp(fmt, "weft-ps-shard") || !ns || !ost)
        st = weft_error(WEFT_ERR_FORMAT, "weft_ps_load: %s is not a parameter-server shard", path);
    else if (atoi(ns) != ps->servers)
        st = weft_error(WEFT_ERR_FORMAT, "weft_ps_load: %s was written by %s servers, this job has %d", path, ns,
                        ps->servers);
    // Check every shard before changing anything.
    for (int j = 0; j < v->ns && !st; j++) {
        char key[512];
        snprintf(key, sizeof key, "param/%s", ps->p[ps->shards[ps->server][j]].name);
        weft_tensor *t = weft_safetensors_find(f, key);
        if (!t) st = weft_error(WEFT_ERR_FORMAT, "weft_ps_load: %s lacks '%s'", path, key);
        else if (weft_tensor_numel(t) != weft_tensor_numel(v->shard[j]) || weft_tensor_ndim(t) != weft_tensor_ndim(v->shard[j]))
            st = weft_error(WEFT_ERR_SHAPE, "weft_ps_load: '%s' in %s has another shape than this server's shard", key,
                            path);
    }
    if (!st && v->opt) {
        st = weft_optim_load_state(v->opt, optim_lookup, f);
        if (st) st = weft_error(st, "weft_ps_load: %s: %s", path, weft_last_error());
        else weft_optim_set_step_count(v->opt, atoll(ost));
    }
    for (int j = 0; j < v->ns && !st; j++) {
        char key[512];
        snprintf(key, sizeof key, "param/%s", ps->p[ps->shards[ps->server][j]].name);
        st = weft_safetensors_copy_to(f, key, v->shard[j]);
        if (st) st = weft_error(st, "weft_ps_load: %s", weft_last_error());
    }
    weft_safetensors_free(f);
    if (!st) { // clocks restart with the loaded run
        v->applied = 0;
        v->accepted = 0;
        for (int w = 0; w < ps->workers; w++) {
            v->clock[w] = 0;
            v->took[w] = false;
        }
    }
    return st;
}

// Acts once every unfinished worker has asked; answers each of them.
static void ckpt_maybe_run(weft_ps *ps) {
    ps_server *v = ps->srv;
    if (v->ck_n == 0 || v->ck_n < ps->workers - v->ndone) return;
    weft_status st = v->ck_kind == -1 ? weft_error(WEFT_ERR_ARG, "weft_ps_serve: workers mixed save and load, or steps")
                     : v->ck_kind == PS_SAVE ? srv_save(ps, v->ck_dir, v->ck_step)
                                             : srv_load(ps, v->ck_dir, v->ck_step);
    for (int w = 0; w < ps->workers; w++)
        if (v->ck_in[w]) {
            srv_reply_status(ps, w, v->ck_kind, st);
            v->ck_in[w] = false;
        }
    v->ck_n = 0;
    free(v->ck_dir);
    v->ck_dir = NULL;
}

static void handle_ckpt(weft_ps *ps, int w, const ps_hdr *h, const char *msg, size_t len) {
    ps_server *v = ps->srv;
    const char *dir = msg + sizeof *h;
    if (h->count <= 0 || len < sizeof *h + (size_t)h->count || dir[h->count - 1] != 0) {
        srv_reply_status(ps, w, h->kind, weft_error(WEFT_ERR_FORMAT, "weft_ps_serve: malformed checkpoint request"));
        return;
    }
    if (v->ck_n == 0) {
        v->ck_kind = h->kind;
        v->ck_step = h->step;
        v->ck_dir = strdup(dir);
        if (!v->ck_dir) srv_fail(v, weft_error(WEFT_ERR_OOM, "weft_ps_serve: out of memory"));
    } else if (v->ck_kind != h->kind || v->ck_step != h->step || !v->ck_dir || strcmp(v->ck_dir, dir))
        v->ck_kind = -1;
    if (!v->ck_in[w]) {
        v->ck_in[w] = true;
        v->ck_n++;
    }
    ckpt_maybe_run(ps);
}

// ---- the loop ----

static void handle(weft_ps *ps, int w, const char *msg, size_t len) {
    ps_server *v = ps->srv;
    ps_hdr h;
    if (len < sizeof h || w < 0 || w >= ps->workers) {
        srv_fail(v, weft_error(WEFT_ERR_FORMAT, "weft_ps_serve: malformed message from rank %d", w));
        return;
    }
    memcpy(&h, msg, sizeof h);
    switch (h.kind) {
    case PS_STEP: handle_step(ps, w, &h, msg, len, true); break;
    case PS_PULL: handle_step(ps, w, &h, msg, len, false); break;
    case PS_PUSH_ROWS:
    case PS_PULL_ROWS: handle_rows(ps, w, &h, msg, len); break;
    case PS_SAVE:
    case PS_LOAD: handle_ckpt(ps, w, &h, msg, len); break;
    case PS_FINISH:
        if (!v->done[w]) {
            v->done[w] = true;
            v->ndone++;
        }
        // The finished worker no longer holds back BSP steps, SSP pulls or checkpoints.
        if (ps->o.mode == WEFT_PS_BSP) bsp_maybe_apply(ps);
        release_pulls(ps);
        ckpt_maybe_run(ps);
        break;
    default: srv_fail(v, weft_error(WEFT_ERR_FORMAT, "weft_ps_serve: unknown request %d from worker %d", h.kind, w));
    }
}

weft_status weft_ps_serve(weft_ps *ps) {
    if (!ps) return weft_error(WEFT_ERR_ARG, "weft_ps_serve: NULL parameter server");
    if (ps->server < 0 || !ps->srv)
        return weft_error(WEFT_ERR_STATE, "weft_ps_serve: rank %d is a worker, not a server", ps->rank);
    ps_server *v = ps->srv;
    int spins = 0;
    while (v->ndone < ps->workers || v->npend > 0 || v->nout > 0) {
        int flag = 0;
        MPI_Status stt;
        bool progress = false;
        MPI_Iprobe(MPI_ANY_SOURCE, PS_TAG_REQ, ps->comm, &flag, &stt);
        if (flag) {
            int cnt = 0;
            MPI_Get_count(&stt, MPI_BYTE, &cnt);
            if ((size_t)cnt + 1 > v->rcap) {
                char *b = realloc(v->rbuf, (size_t)cnt + 1);
                if (!b) return srv_fail(v, weft_error(WEFT_ERR_OOM, "weft_ps_serve: out of memory (%d bytes)", cnt));
                v->rbuf = b;
                v->rcap = (size_t)cnt + 1;
            }
            MPI_Recv(v->rbuf, cnt, MPI_BYTE, stt.MPI_SOURCE, PS_TAG_REQ, ps->comm, MPI_STATUS_IGNORE);
            ps->st.bytes_in += cnt;
            handle(ps, stt.MPI_SOURCE, v->rbuf, (size_t)cnt);
            progress = true;
        }
        if (srv_progress_sends(v)) progress = true;
        if (progress) spins = 0;
        else ps_backoff(&spins);
    }
    if (v->err) return weft_error(v->err, "%s", v->errmsg);
    return WEFT_OK;
}

#else
void ps_backoff(int *spins) { (void)spins; }
weft_status ps_server_init(weft_ps *ps) { return WEFT_ERR_UNSUPPORTED; }
void ps_server_free(weft_ps *ps) {}
#endif
