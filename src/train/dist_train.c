// The distributed side of `weft train`: what changes when the run is one rank
// of an MPI job (data parallel or parameter server). train.c calls these
// hooks only when r->dist is set, so a single process runs exactly as before.
//
// Devices (--device cuda): DDP ranks and parameter-server workers hold their
// parameters, optimiser state and batches on their device; plain `cuda` on a
// machine with several GPUs gives each rank GPU (local rank mod GPUs), an
// explicit cuda:N is kept. Servers keep their shards on the CPU. The numbers
// the ranks agree on (loss checks, checkpoint status, throughput) are host
// tensors, whatever the device.
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft.h>
#include <weft/ddp.h>
#include <weft/dist.h>
#include <weft/parallel.h>
#include <weft/ps.h>

#include "../core/core_impl.h"
#include "train_impl.h"

struct weft_dist_run {
    weft_train_dist mode; // DDP or PS
    weft_comm *world;     // borrowed
    int rank, size;
    weft_ddp *ddp;
    weft_ps *ps;
    bool finished;        // ps: this worker told the servers it is done
    int servers;          // ps: the last `servers` ranks
    bool server;          // ps: this rank is a server
    int64_t kill_at_step; // test hook: this rank kills itself after this step (-1: never)
    char device[32];      // this rank's --device when chosen here (local rank mod GPUs)
};

// A one-element host f64 tensor (MPI's side of an agreement between ranks).
static weft_tensor *host_f64(double v) {
    int64_t one = 1;
    return weft_tensor_full_on(1, &one, WEFT_F64, v, WEFT_DEVICE_CPU);
}
static double host_value(const weft_tensor *t) { return ((const double *)weft_tensor_data(t))[0]; }

// --device for this rank. A server trains nothing and keeps its shards on the
// CPU (a device that is missing is still reported, by run_device, as on every
// rank). Plain `cuda` with several GPUs on the node: GPU (local rank mod GPUs),
// so that the ranks of one machine spread over its GPUs; NCCL needs one per rank.
static void pick_device(weft_run *r, struct weft_dist_run *d) {
    const char *s = r->opts.device;
    weft_device dev;
    if (!s || !*s || weft_device_parse(s, &dev) != WEFT_OK || dev.type == WEFT_CPU) return; // run_device reports bad names
    if (!weft_device_available(dev)) return;
    if (d->server) {
        r->opts.device = NULL;
        return;
    }
    int n = weft_device_count((weft_device_type)dev.type);
    if (strchr(s, ':') || n < 2) return;
    dev.index = (int16_t)(weft_dist_local_rank() % n);
    weft_device_str(dev, d->device, sizeof d->device);
    r->opts.device = d->device;
}

weft_status weft_train_parse_consistency(const char *s, weft_train_consistency *c, int *staleness) {
    if (!s || !c || !staleness) return weft_error(WEFT_ERR_ARG, "train_parse_consistency: NULL argument");
    if (!strcmp(s, "bsp") || !strcmp(s, "asp")) {
        *c = s[0] == 'b' ? WEFT_TRAIN_BSP : WEFT_TRAIN_ASP;
        *staleness = 0;
        return WEFT_OK;
    }
    char *end;
    long v = !strncmp(s, "ssp:", 4) ? strtol(s + 4, &end, 10) : -1;
    if (v < 0 || v > 1000000 || end == s + 4 || *end)
        return weft_error(WEFT_ERR_ARG, "--consistency: expected bsp, asp or ssp:S (S >= 0), got '%s'", s);
    *c = WEFT_TRAIN_SSP;
    *staleness = (int)v;
    return WEFT_OK;
}

// Test hook for fault tolerance: WEFT_TEST_KILL_AT_STEP=K and
// WEFT_TEST_KILL_RANK=R make rank R send itself SIGKILL right after step K,
// on the first attempt of a `weft launch` job only (WEFT_LAUNCH_ATTEMPT unset or 0).
static int64_t test_kill_step(int rank) {
    const char *k = getenv("WEFT_TEST_KILL_AT_STEP"), *r = getenv("WEFT_TEST_KILL_RANK");
    const char *a = getenv("WEFT_LAUNCH_ATTEMPT");
    if (!k || !*k || (a && *a && strcmp(a, "0"))) return -1;
    if ((r && *r ? atoi(r) : 1) != rank) return -1;
    return atoll(k);
}

static weft_status dist_init(weft_run *r);

weft_status weft_dist_run_init(weft_run *r) {
    weft_status st = dist_init(r);
    if (st || !weft_mp_requested(r->cfg)) return st;
    const weft_net_cfg *n = &r->cfg->net;
    if (!r->dist) {
        if (n->tp * n->pp == 1) return WEFT_OK; // zero alone in one process: nothing to shard
        return weft_error(WEFT_ERR_ARG, "train: tp = %d and pp = %d need at least %d processes (start the job with "
                          "weft launch -n N or mpirun)", n->tp, n->pp, n->tp * n->pp);
    }
    if (r->dist->mode == WEFT_TRAIN_DIST_PS)
        return weft_error(WEFT_ERR_ARG, "train: tp, pp and zero combine with data parallelism (ddp), not --dist ps");
    return weft_mp_run_init(r, r->dist->world);
}

static weft_status dist_init(weft_run *r) {
    weft_train_dist mode = r->opts.dist;
    r->printer = true;
    if (mode == WEFT_TRAIN_DIST_NONE) return WEFT_OK;
    if (mode == WEFT_TRAIN_DIST_AUTO) {
        if (!weft_dist_launched()) return WEFT_OK;
        if (weft_dist_init(NULL, NULL)) return weft_last_status();
        if (weft_comm_size(weft_comm_world()) < 2) return WEFT_OK;
        mode = r->opts.servers > 0 ? WEFT_TRAIN_DIST_PS : WEFT_TRAIN_DIST_DDP;
    } else if (weft_dist_init(NULL, NULL)) {
        return weft_error(weft_last_status(), "train --dist: %s", weft_last_error());
    }
    struct weft_dist_run *d = calloc(1, sizeof *d);
    if (!d) return weft_error(WEFT_ERR_OOM, "train: out of memory");
    r->dist = d;
    d->mode = mode;
    d->world = weft_comm_world();
    d->rank = weft_comm_rank(d->world);
    d->size = weft_comm_size(d->world);
    d->kill_at_step = test_kill_step(d->rank);
    if (mode == WEFT_TRAIN_DIST_PS) {
        d->servers = r->opts.servers > 0 ? r->opts.servers : 1;
        if (d->servers + 1 + r->opts.backup > d->size)
            return weft_error(WEFT_ERR_ARG, "train --dist ps: %d server(s) and %d backup worker(s) need at least %d ranks, the job has %d",
                              d->servers, r->opts.backup, d->servers + 1 + r->opts.backup, d->size);
        if (r->opts.backup > 0 && r->opts.consistency != WEFT_TRAIN_BSP)
            return weft_error(WEFT_ERR_ARG, "train --backup: backup workers need --consistency bsp");
        d->server = d->rank >= d->size - d->servers;
    } else if (r->opts.servers > 0 || r->opts.backup > 0 || r->opts.consistency != WEFT_TRAIN_BSP || r->opts.staleness) {
        return weft_error(WEFT_ERR_ARG, "train: --servers, --consistency and --backup need --dist ps");
    }
    pick_device(r, d);
    // Rank 0 (worker 0 under ps) reports; the others train silently and write no metrics.
    r->printer = d->rank == 0;
    if (!r->printer) {
        r->opts.quiet = true;
        r->opts.log_dir = NULL;
    }
    return WEFT_OK;
}

void weft_dist_run_loader(const weft_run *r, weft_loader_opts *lo) {
    const struct weft_dist_run *d = r->dist;
    if (!d || d->server) return; // a server's loader is never read
    const weft_parallel *L = weft_mp_layout(r);
    lo->num_replicas = L ? L->dp : d->size - d->servers; // workers are ranks 0..W-1
    lo->rank = L ? L->dp_rank : d->rank;                  // the ranks of one model replica read the same batches
}

// Language models: each data-parallel replica draws its own windows (the
// first keeps the single-process stream).
uint64_t weft_dist_run_lm_seed(const weft_run *r) {
    const weft_parallel *L = weft_mp_layout(r);
    int replica = L ? L->dp_rank : r->dist->server ? 0 : r->dist->rank;
    return r->cfg->net.seed + 0x9e3779b97f4a7c15ULL * (uint64_t)replica;
}

// The dropout generator's seed on this rank (rank 0 keeps the single-process seed).
static uint64_t dropout_seed(const weft_run *r) {
    return (r->cfg->net.seed ^ 0x9e3779b97f4a7c15ULL) + 0x632be59bd9b4e019ULL * (uint64_t)r->dist->rank;
}

weft_status weft_dist_run_attach(weft_run *r) {
    struct weft_dist_run *d = r->dist;
    if (r->mp) return weft_mp_attach(r); // DDP over the data-parallel group, or ZeRO
    // Dropout masks differ between ranks, as they would across the samples of one big batch.
    weft_generator_set_state(r->dropout_gen, dropout_seed(r), 0);
    if (d->mode == WEFT_TRAIN_DIST_DDP) {
        weft_ddp_opts o = {.bucket_mb = r->opts.bucket_mb};
        d->ddp = weft_ddp_create(d->world, r->net, &o); // rank 0's initial parameters everywhere
        return d->ddp ? WEFT_OK : weft_last_status();
    }
    weft_ps_opts o = weft_ps_defaults();
    o.servers = d->servers;
    o.mode = r->opts.consistency == WEFT_TRAIN_ASP ? WEFT_PS_ASP : r->opts.consistency == WEFT_TRAIN_SSP ? WEFT_PS_SSP : WEFT_PS_BSP;
    o.staleness = r->opts.staleness;
    o.backup = r->opts.backup;
    o.optim = weft_run_optim_opts(&r->cfg->net); // the servers run the model file's optimiser
    d->ps = weft_ps_create(d->world, r->n_params, r->params, (const char *const *)r->names, &o);
    return d->ps ? WEFT_OK : weft_last_status();
}

bool weft_dist_run_is_server(const weft_run *r) { return r->dist->server; }
weft_train_dist weft_dist_run_mode(const weft_run *r) { return r->dist ? r->dist->mode : WEFT_TRAIN_DIST_NONE; }

weft_status weft_dist_run_serve(weft_run *r) { return weft_ps_serve(r->dist->ps); }

// A worker is done: the servers stop once every worker has said so. Called
// on errors too, so that a failing worker does not leave the servers waiting.
static weft_status ps_worker_done(struct weft_dist_run *d) {
    if (!d->ps || d->server) return WEFT_OK;
    weft_ps *ps = d->ps;
    return weft_ps_finish(ps);
}

// Every rank learns whether any rank's loss is not finite, so all stop at the
// same step (a rank that stopped alone would leave the others waiting).
weft_status weft_dist_run_check_loss(weft_run *r, double loss) {
    struct weft_dist_run *d = r->dist;
    // ps workers do not move in step (and servers are serving): a worker's
    // NaN is its own error, and ends the job.
    if (d->mode == WEFT_TRAIN_DIST_PS) return WEFT_OK;
    // code: 2 * (rank + 1) + (NaN ? 1 : 0); the maximum names the highest failing rank
    double code = isfinite(loss) ? 0 : 2.0 * (d->rank + 1) + (isnan(loss) ? 1 : 0);
    weft_tensor *t = host_f64(code);
    if (!t) return weft_last_status();
    weft_status st = weft_dist_all_reduce(d->world, t, WEFT_REDUCE_MAX);
    double got = st ? 0 : host_value(t);
    weft_tensor_free(t);
    if (st) return st;
    if (got == 0) return WEFT_OK;
    int bad = (int)(got / 2) - 1;
    r->collective_error = true;
    return weft_error(WEFT_ERR_STATE, "step %lld: the loss is %s on rank %d; stopping every rank (the last good checkpoint is kept)",
                      (long long)(r->step + 1), ((int)got & 1) ? "NaN" : "infinite", bad);
}

static void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {}
}

weft_status weft_dist_run_after_backward(weft_run *r, double compute_s) {
    struct weft_dist_run *d = r->dist;
    if (r->opts.straggle_factor > 1 && r->opts.straggle_rank == d->rank)
        sleep_s((r->opts.straggle_factor - 1) * compute_s);
    if (r->mp) return weft_mp_after_backward(r);
    return d->ddp ? weft_ddp_wait(d->ddp) : WEFT_OK;
}

bool weft_dist_run_owns_step(const weft_run *r) { return r->dist->ps != NULL; }

// ps: push this worker's gradients, pull the parameters as the consistency model allows.
weft_status weft_dist_run_step(weft_run *r, double lr) { return weft_ps_step(r->dist->ps, lr); }

bool weft_dist_run_evaluates(const weft_run *r) {
    // DDP: every rank evaluates its identical replica (keeps them in step);
    // only rank 0 reports. Model parallel: every rank holds a part of the
    // model. ps: worker 0 alone (the others keep training).
    return r->mp || r->dist->mode == WEFT_TRAIN_DIST_DDP || r->dist->rank == 0;
}

void weft_dist_run_after_step(weft_run *r) {
    if (r->dist->kill_at_step >= 0 && r->step == r->dist->kill_at_step) {
        fprintf(stderr, "rank %d: WEFT_TEST_KILL_AT_STEP=%lld: killing myself\n", r->dist->rank, (long long)r->step);
        fflush(stderr);
        raise(SIGKILL);
    }
}

static const char *mode_name(const struct weft_dist_run *d) { return d->mode == WEFT_TRAIN_DIST_PS ? "ps" : "ddp"; }

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

// ps: every worker asks the servers to write their shards at this step (they
// act once all have asked, a consistent cut, and answer when written); then
// worker 0 writes the manifest. rank0_st: how worker 0's own part went.
static weft_status ps_save(weft_run *r, weft_status rank0_st) {
    struct weft_dist_run *d = r->dist;
    const char *dir = r->opts.ckpt_dir;
    weft_status st = weft_ps_save(d->ps, dir, r->step);
    if (st) return st;
    if (rank0_st) return rank0_st;
    if (d->rank != 0) return WEFT_OK;
    int np = 1 + d->servers;
    char (*names)[256] = calloc((size_t)np, sizeof *names);
    const char **parts = calloc((size_t)np, sizeof *parts);
    if (!names || !parts) st = weft_error(WEFT_ERR_OOM, "checkpoint: out of memory");
    for (int s = 0; !st && s < np; s++) {
        char path[4096];
        if (s == 0) snprintf(names[0], sizeof names[0], "ckpt-%06lld.safetensors", (long long)r->step);
        else if (!weft_ps_shard_path(dir, s - 1, r->step, path, sizeof path)) st = weft_last_status();
        else snprintf(names[s], sizeof names[s], "%.255s", base_name(path));
        parts[s] = names[s];
    }
    if (!st) st = weft_manifest_write(dir, r->step, d->size, mode_name(d), np, parts);
    if (!st) st = weft_manifest_keep_last(dir, r->opts.keep_last > 0 ? r->opts.keep_last : 3);
    free(names);
    free(parts);
    return st;
}

weft_status weft_dist_run_save(weft_run *r) {
    struct weft_dist_run *d = r->dist;
    if (r->mp) return weft_mp_save(r); // pieces of every rank, resharded when loading
    const char *dir = r->opts.ckpt_dir;
    weft_status st = WEFT_OK;
    if (d->rank == 0) st = weft_run_save(r); // the replicated state, in the single-process format
    if (d->mode == WEFT_TRAIN_DIST_PS) return ps_save(r, st);
    // Every part is on disk before the manifest says so. An error on any rank
    // is shared, so that no rank writes a manifest for a missing part.
    weft_tensor *t = host_f64(st ? 1 : 0);
    if (!t) return weft_last_status();
    weft_status cs = weft_dist_all_reduce(d->world, t, WEFT_REDUCE_MAX);
    double bad = cs ? 1 : host_value(t);
    weft_tensor_free(t);
    if (cs) return cs;
    if (st) return st;
    if (bad) {
        r->collective_error = true;
        return weft_error(WEFT_ERR_IO, "checkpoint at step %lld: another rank could not write its part", (long long)r->step);
    }
    if (d->rank != 0) return WEFT_OK;
    char part[64];
    snprintf(part, sizeof part, "ckpt-%06lld.safetensors", (long long)r->step);
    const char *parts[] = {part};
    st = weft_manifest_write(dir, r->step, d->size, mode_name(d), 1, parts);
    if (!st) st = weft_manifest_keep_last(dir, r->opts.keep_last > 0 ? r->opts.keep_last : 3);
    return st;
}

weft_status weft_dist_run_resume(weft_run *r) {
    struct weft_dist_run *d = r->dist;
    if (r->mp) return weft_mp_resume(r);
    // Rank 0 picks the step, so that every rank loads the same one.
    double step = -1;
    if (d->rank == 0) {
        int64_t s;
        weft_status st = weft_manifest_latest(r->opts.ckpt_dir, &s);
        step = st ? -2 : (double)s;
    }
    weft_tensor *t = host_f64(step);
    if (!t) return weft_last_status();
    weft_status st = weft_dist_broadcast(d->world, t, 0);
    step = host_value(t);
    weft_tensor_free(t);
    if (st) return st;
    if (step == -2) {
        r->collective_error = true;
        return weft_error(WEFT_ERR_IO, "resume: rank 0 cannot read the checkpoints in %s", r->opts.ckpt_dir);
    }
    if (step < 0) {
        if (r->printer && !r->opts.quiet)
            fprintf(r->opts.progress ? r->opts.progress : stderr, "resume: no complete checkpoint in %s; starting fresh\n",
                    r->opts.ckpt_dir);
        return WEFT_OK;
    }
    if (d->server) return WEFT_OK; // it restores its shard when the workers ask (weft_ps_load)
    char path[4096];
    if (!weft_ckpt_path(r->opts.ckpt_dir, (int64_t)step, path, sizeof path)) return weft_last_status();
    st = weft_run_resume_from(r, path); // step, data position, RNG (and, under ps, a copy of the parameters)
    // The servers restore their shards and optimiser state; every worker pulls them.
    if (!st && d->ps) st = weft_ps_load(d->ps, r->opts.ckpt_dir, (int64_t)step);
    if (st) return st;
    uint64_t seed, off;
    weft_generator_get_state(r->dropout_gen, &seed, &off);
    weft_generator_set_state(r->dropout_gen, dropout_seed(r), off);
    if (r->printer && !r->opts.quiet)
        fprintf(r->opts.progress ? r->opts.progress : stderr, "resumed from step %lld (%s)\n", (long long)r->step, path);
    return WEFT_OK;
}

weft_status weft_dist_run_finish(weft_run *r, double samples, double train_s, weft_train_result *out) {
    struct weft_dist_run *d = r->dist;
    weft_status fs = ps_worker_done(d);
    d->finished = true;
    if (fs) return fs;
    weft_tensor *a = host_f64(weft_mp_counts_samples(r) ? samples : 0), *b = host_f64(train_s);
    weft_status st = a && b ? WEFT_OK : weft_last_status();
    if (!st) st = weft_dist_all_reduce(d->world, a, WEFT_REDUCE_SUM);
    if (!st) st = weft_dist_all_reduce(d->world, b, WEFT_REDUCE_MAX);
    if (!st) {
        double total = host_value(a), secs = host_value(b);
        double rate = secs > 0 ? total / secs : 0; // every rank's samples over the slowest rank's training time
        if (out->language_model) out->tokens_per_s = rate;
        else out->samples_per_s = rate;
    }
    weft_tensor_free(a);
    weft_tensor_free(b);
    out->ranks = d->size;
    out->dist = d->mode;
    out->consistency = r->opts.consistency;
    out->staleness = r->opts.staleness;
    out->backup = r->opts.backup;
    weft_mp_result(r, out);
    return st;
}

void weft_dist_run_free(weft_run *r) {
    struct weft_dist_run *d = r->dist;
    if (!d) return;
    if (!d->finished) ps_worker_done(d); // after an error: release the servers (the CLI then ends the job)
    weft_mp_run_free(r);
    weft_ddp_free(d->ddp);
    weft_ps_free(d->ps);
    free(d);
    r->dist = NULL;
}
