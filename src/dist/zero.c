// Sharded optimiser state: ZeRO stages 1 and 2 (DeepSpeed) over a
// data-parallel communicator (weft/parallel.h).
//
// Layout. The trainable parameters of one dtype, flattened and laid end to
// end in module order, form a group of n elements; rank r owns the
// contiguous shard [off, off + cnt) = weft_dist_chunk(n, size, r). A shard
// meets each parameter in at most one contiguous range, its "piece": a 1-D
// view (detached, so a leaf) into the parameter's own storage. This rank's
// optimiser is an ordinary weft_optim over its pieces, so its state exists
// for the shard alone and its update writes straight into the module's
// parameters: one optimiser step path for every kind and device, composed,
// not forked.
//
//   group flat index:  | p0 ......... | p1 ...... | p2 ............... |
//   shards (size 3):   | rank 0        | rank 1         | rank 2         |
//   rank 1's pieces:           [p0 tail][p1 .....][p2 head]
//
// A step:
//   reduce_grads  each parameter's .grad is copied into its place in a flat
//                 buffer (n, on the parameters' device; zeros for a missing
//                 .grad) and dropped; stage 1 all-reduces the buffer
//                 (average) and the pieces' gradients are views into it;
//                 stage 2 reduce-scatters it (average) into the shard's own
//                 gradient (cnt) and frees it.
//   clip          (optional) the pieces' sums of squares (grad_sumsq, on the
//                 device), all-reduced on the host into the global norm; the
//                 pieces are scaled (grad_scale) when it is above max_norm.
//   update        weft_optim_step over the pieces (in place in the
//                 parameters); each rank copies its pieces into its chunk of
//                 a flat buffer, the buffer is all-gathered in place, and
//                 every parameter is copied out of it.
// Every rank issues the same collectives in the same order; a local failure
// (a bad gradient, a failed update) still takes part in them, so the other
// ranks are not left waiting, and is returned afterwards.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/autograd.h>
#include <weft/parallel.h>

#include "../ops/op.h"
#include "dist_impl.h"

extern weft_op_def weft_op_grad_sumsq, weft_op_grad_scale;

#define ZERO_NAME_LEN 160
enum { MAX_GROUPS = 2, MAX_SLOTS = 4 }; // groups: f32, f64; slots: float state tensors per parameter

typedef struct zparam {
    weft_tensor *p; // borrowed from the module
    char name[ZERO_NAME_LEN];
    int mi;              // index among the module's parameters
    int group;           // its dtype group
    int64_t off, numel;  // its elements [off, off + numel) of the group's flat index
    int64_t s_off, s_cnt; // this rank's piece: elements [s_off, s_off + s_cnt) of p, flattened (s_cnt 0: none)
    weft_tensor *piece;  // (s_cnt) view into p's storage, a leaf; NULL when s_cnt == 0
} zparam;

typedef struct zgroup {
    weft_dtype dt;
    int64_t n;          // elements of all its parameters
    int64_t off, cnt;   // this rank's shard of [0, n)
    weft_tensor *flat;  // (n) inside a step only: gradients in, parameters out
    weft_tensor *gshard; // stage 2, inside a step only: (cnt) the shard's averaged gradient
} zgroup;

struct weft_zero {
    weft_comm *c;
    int stage, size, rank;
    weft_device dev; // every parameter's
    int np;
    zparam *p; // trainable parameters, module order
    int ng;
    zgroup g[MAX_GROUPS];
    weft_optim *opt; // over the pieces; NULL when this rank's shard is empty
    bool reduced;    // reduce_grads done (its collectives issued), update pending
    bool bad;        // reduce_grads failed here: update skips the optimiser but still gathers
    int n_slots;     // float state tensors per parameter for this optimiser kind
    char slot[MAX_SLOTS][64];
};

// ---- helpers ----

// Elements [off, off + n) of flat, viewed with the shape (ndim, sizes).
static weft_tensor *flat_part(weft_tensor *flat, int64_t off, int64_t n, int ndim, const int64_t *sizes) {
    weft_tensor *part = weft_narrow(flat, 0, off, n);
    weft_tensor *v = part ? weft_view(part, ndim, sizes) : NULL;
    weft_tensor_free(part);
    return v;
}

static zparam *find_param(const weft_zero *z, const char *name, const char **rest) {
    for (int i = 0; i < z->np; i++) {
        size_t l = strlen(z->p[i].name);
        if (strncmp(name, z->p[i].name, l) == 0 && name[l] == '.') {
            *rest = name + l + 1;
            return &z->p[i];
        }
    }
    return NULL;
}

// The optimiser's options are checked, and its state slots named, by a
// throw-away optimiser over one element ("p.exp_avg", ..., "p.step").
static weft_status probe_slots(weft_zero *z, const weft_optim_opts *o) {
    weft_tensor *t = weft_tensor_zeros(WEFT_DIMS(1), WEFT_F64);
    const char *nm = "p";
    weft_optim *opt = t ? weft_optim_create(o, 1, &t, &nm) : NULL;
    weft_tensor_free(t);
    if (!opt) return weft_error(weft_last_status(), "zero_create: %s", weft_last_error());
    char name[64];
    for (int i = 0; i < weft_optim_state_count(opt); i++) {
        weft_optim_state_at(opt, i, name, sizeof name);
        if (strcmp(name, "p.step") == 0 || z->n_slots == MAX_SLOTS) continue;
        snprintf(z->slot[z->n_slots++], sizeof z->slot[0], "%s", name + 2);
    }
    weft_optim_free(opt);
    return WEFT_OK;
}

// Checks every trainable parameter (before any collective, so that every
// rank fails alike); returns their count or -1.
static int check_params(weft_module *m, weft_device *dev) {
    char name[ZERO_NAME_LEN], first[ZERO_NAME_LEN] = "";
    int n = 0;
    for (int i = 0; i < weft_module_param_count(m); i++) {
        weft_tensor *p = weft_module_param_at(m, i, name, sizeof name);
        if (!p) return weft_error(WEFT_ERR_STATE, "zero_create: cannot read parameter %d", i), -1;
        if (!weft_tensor_requires_grad(p)) continue; // frozen: no part in it
        weft_dtype dt = weft_tensor_dtype(p);
        if (dt != WEFT_F32 && dt != WEFT_F64)
            return weft_error(WEFT_ERR_DTYPE, "zero_create: parameter %s is %s (f32 or f64 only)", name,
                              weft_dtype_name(dt)), -1;
        if (!weft_tensor_is_contiguous(p))
            return weft_error(WEFT_ERR_ARG, "zero_create: parameter %s is not contiguous", name), -1;
        if (n++ == 0) {
            *dev = weft_tensor_device(p);
            snprintf(first, sizeof first, "%s", name);
        } else if (!weft_device_equal(weft_tensor_device(p), *dev)) {
            char a[32], b[32];
            return weft_error(WEFT_ERR_DEVICE, "zero_create: parameter %s is on %s but %s is on %s (one device per replica)",
                              name, weft_device_str(weft_tensor_device(p), a, sizeof a), first,
                              weft_device_str(*dev, b, sizeof b)), -1;
        }
    }
    if (n == 0) return weft_error(WEFT_ERR_ARG, "zero_create: the module has no trainable parameter"), -1;
    return n;
}

// ---- creation ----

// Groups by dtype, the shards, and this rank's pieces.
static weft_status build_layout(weft_zero *z, weft_module *m) {
    char name[ZERO_NAME_LEN];
    for (int i = 0, k = 0; i < weft_module_param_count(m); i++) {
        weft_tensor *p = weft_module_param_at(m, i, name, sizeof name);
        if (!weft_tensor_requires_grad(p)) continue;
        zparam *zp = &z->p[k++];
        zp->p = p;
        zp->mi = i;
        snprintf(zp->name, sizeof zp->name, "%s", name);
        weft_dtype dt = weft_tensor_dtype(p);
        int g = 0;
        while (g < z->ng && z->g[g].dt != dt) g++;
        if (g == z->ng) z->g[z->ng++] = (zgroup){.dt = dt};
        zp->group = g;
        zp->numel = weft_tensor_numel(p);
        zp->off = z->g[g].n;
        z->g[g].n += zp->numel;
    }
    for (int g = 0; g < z->ng; g++) {
        zgroup *G = &z->g[g];
        weft_dist_chunk(G->n, z->size, z->rank, &G->off, &G->cnt);
    }
    for (int i = 0; i < z->np; i++) {
        zparam *zp = &z->p[i];
        const zgroup *G = &z->g[zp->group];
        int64_t lo = zp->off > G->off ? zp->off : G->off;
        int64_t hi = zp->off + zp->numel < G->off + G->cnt ? zp->off + zp->numel : G->off + G->cnt;
        if (hi <= lo) continue;
        zp->s_off = lo - zp->off, zp->s_cnt = hi - lo;
        weft_tensor *d = weft_tensor_detach(zp->p); // same storage, no history: the piece is a leaf
        weft_tensor *d1 = d ? weft_view(d, 1, &zp->numel) : NULL;
        zp->piece = d1 ? weft_narrow(d1, 0, zp->s_off, zp->s_cnt) : NULL;
        weft_tensor_free(d1);
        weft_tensor_free(d);
        if (!zp->piece) return weft_last_status();
    }
    return WEFT_OK;
}

// This rank's optimiser over its pieces (group by group, in flat order).
static weft_status build_optim(weft_zero *z, const weft_optim_opts *o) {
    weft_tensor **t = malloc(sizeof *t * (size_t)z->np);
    const char **names = malloc(sizeof *names * (size_t)z->np);
    if (!t || !names) {
        free(t), free(names);
        return weft_error(WEFT_ERR_OOM, "zero_create: out of memory");
    }
    int n = 0;
    for (int g = 0; g < z->ng; g++)
        for (int i = 0; i < z->np; i++)
            if (z->p[i].group == g && z->p[i].piece) t[n] = z->p[i].piece, names[n++] = z->p[i].name;
    weft_status st = WEFT_OK;
    if (n > 0 && !(z->opt = weft_optim_create(o, n, t, names)))
        st = weft_error(weft_last_status(), "zero_create: %s", weft_last_error());
    free(t);
    free(names);
    return st;
}

weft_zero *weft_zero_create(weft_comm *dp, weft_module *m, const weft_optim_opts *o, int stage) {
    if (!dp || !m || !o)
        return weft_error_null(WEFT_ERR_ARG, "zero_create: %s is NULL", !dp ? "communicator" : !m ? "module" : "optimiser options");
    if (stage != 1 && stage != 2)
        return weft_error_null(WEFT_ERR_ARG, "zero_create: stage %d (ZeRO stage 1 or 2)", stage);
    weft_zero *z = calloc(1, sizeof *z);
    if (!z) return weft_error_null(WEFT_ERR_OOM, "zero_create: out of memory");
    z->c = dp;
    z->stage = stage;
    z->size = weft_comm_size(dp);
    z->rank = weft_comm_rank(dp);
    if ((z->np = check_params(m, &z->dev)) < 0 || probe_slots(z, o) != WEFT_OK) {
        free(z);
        return NULL;
    }
    if (weft_dist_broadcast_module(dp, m, "zero_create") != WEFT_OK) {
        free(z);
        return NULL;
    }
    if (!(z->p = calloc((size_t)z->np, sizeof *z->p))) {
        free(z);
        return weft_error_null(WEFT_ERR_OOM, "zero_create: out of memory");
    }
    if (build_layout(z, m) != WEFT_OK || build_optim(z, o) != WEFT_OK) {
        weft_status st = weft_last_status();
        char msg[480];
        snprintf(msg, sizeof msg, "%s", weft_last_error());
        weft_zero_free(z);
        return weft_error_null(st, "%s", msg);
    }
    return z;
}

static void drop_step(weft_zero *z) {
    for (int i = 0; i < z->np; i++)
        if (z->p[i].piece) weft_tensor_set_grad(z->p[i].piece, NULL);
    for (int g = 0; g < z->ng; g++) {
        weft_tensor_free(z->g[g].flat);
        weft_tensor_free(z->g[g].gshard);
        z->g[g].flat = z->g[g].gshard = NULL;
    }
    z->reduced = z->bad = false;
}

void weft_zero_free(weft_zero *z) {
    if (!z) return;
    if (z->p) drop_step(z);
    weft_optim_free(z->opt);
    for (int i = 0; z->p && i < z->np; i++) weft_tensor_free(z->p[i].piece);
    free(z->p);
    free(z);
}

// ---- the step ----

// Copies every parameter's .grad into its place in the group's flat buffer
// (zeros without one) and drops the .grad.
static weft_status flatten_grads(weft_zero *z, int g) {
    zgroup *G = &z->g[g];
    weft_status first = WEFT_OK;
    for (int i = 0; i < z->np; i++) {
        zparam *zp = &z->p[i];
        if (zp->group != g) continue;
        weft_tensor *dst = flat_part(G->flat, zp->off, zp->numel, weft_tensor_ndim(zp->p), weft_tensor_sizes(zp->p));
        weft_tensor *gr = weft_tensor_grad(zp->p);
        weft_status st;
        if (!dst) st = weft_last_status();
        else if (!gr) st = weft_tensor_zero_(dst);
        else if (!weft_shape_equal(weft_tensor_ndim(gr), weft_tensor_sizes(gr), weft_tensor_ndim(zp->p),
                                   weft_tensor_sizes(zp->p)) ||
                 weft_tensor_dtype(gr) != G->dt || !weft_device_equal(weft_tensor_device(gr), z->dev)) {
            char a[96], b[96], da[32], db[32];
            st = weft_error(WEFT_ERR_SHAPE, "zero: the gradient of %s is %s %s on %s, the parameter %s %s on %s",
                            zp->name, weft_dtype_name(weft_tensor_dtype(gr)), weft_tensor_shape_str(gr, a, sizeof a),
                            weft_device_str(weft_tensor_device(gr), da, sizeof da), weft_dtype_name(G->dt),
                            weft_tensor_shape_str(zp->p, b, sizeof b), weft_device_str(z->dev, db, sizeof db));
        } else if ((st = weft_tensor_copy_(dst, gr)) != WEFT_OK) // any strides
            st = weft_error(st, "zero: gradient of %s: %s", zp->name, weft_last_error());
        weft_tensor_free(dst);
        weft_tensor_zero_grad(zp->p);
        if (first == WEFT_OK) first = st;
    }
    return first;
}

weft_status weft_zero_reduce_grads(weft_zero *z) {
    if (!z) return weft_error(WEFT_ERR_ARG, "zero_reduce_grads: handle is NULL");
    drop_step(z);
    weft_status first = WEFT_OK;
    char msg[480] = "";
    for (int g = 0; g < z->ng; g++) {
        zgroup *G = &z->g[g];
        if (!(G->flat = weft_tensor_empty_on(1, &G->n, G->dt, z->dev)) ||
            (z->stage == 2 && !(G->gshard = weft_tensor_empty_on(1, &G->cnt, G->dt, z->dev))))
            return weft_last_status(); // out of memory
        weft_status st = flatten_grads(z, g);
        if (st != WEFT_OK && first == WEFT_OK) first = st, snprintf(msg, sizeof msg, "%s", weft_last_error());
        // Taken part in even after a local failure: the other ranks wait for it.
        st = z->stage == 1 ? weft_dist_all_reduce(z->c, G->flat, WEFT_REDUCE_AVG)
                           : weft_dist_reduce_scatter(z->c, G->flat, G->gshard, WEFT_REDUCE_AVG);
        if (st != WEFT_OK && first == WEFT_OK)
            first = st, snprintf(msg, sizeof msg, "zero_reduce_grads: %s", weft_last_error());
        if (z->stage == 2) { // the full gradient is not needed any more
            weft_tensor_free(G->flat);
            G->flat = NULL;
        }
    }
    // The pieces' gradients: their elements of the averaged gradient.
    for (int i = 0; i < z->np && first == WEFT_OK; i++) {
        zparam *zp = &z->p[i];
        if (!zp->piece) continue;
        const zgroup *G = &z->g[zp->group];
        weft_tensor *v = z->stage == 1 ? weft_narrow(G->flat, 0, zp->off + zp->s_off, zp->s_cnt)
                                       : weft_narrow(G->gshard, 0, zp->off + zp->s_off - G->off, zp->s_cnt);
        first = v ? weft_tensor_set_grad(zp->piece, v) : weft_last_status();
        weft_tensor_free(v);
        if (first != WEFT_OK) snprintf(msg, sizeof msg, "zero_reduce_grads: %s", weft_last_error());
    }
    // Even after a failure here, clip and update must still issue their
    // collectives (the other ranks do): they see `bad` and skip the update.
    z->reduced = true;
    z->bad = first != WEFT_OK;
    return first == WEFT_OK ? WEFT_OK : weft_error(first, "%s", msg);
}

weft_status weft_zero_grad_sum_squares(weft_zero *z, const bool *count, double *sum) {
    if (!z || !sum) return weft_error(WEFT_ERR_ARG, "zero_grad_sum_squares: NULL argument");
    *sum = NAN;
    if (!z->reduced) return weft_error(WEFT_ERR_STATE, "zero_grad_sum_squares: call weft_zero_reduce_grads first");
    // This shard's sum of squares, on the device in f64, then over the ranks on the host.
    weft_tensor *acc = weft_tensor_full_on(0, NULL, WEFT_F64, 0, z->dev);
    weft_status st = acc ? WEFT_OK : weft_last_status();
    for (int i = 0; i < z->np && st == WEFT_OK; i++) {
        weft_tensor *gr = z->p[i].piece && (!count || count[i]) ? weft_tensor_grad(z->p[i].piece) : NULL;
        if (gr) st = weft_op_apply_into(&weft_op_grad_sumsq, 2, (weft_tensor *[]){acc, gr}, NULL, &acc);
    }
    double local = 0;
    if (st == WEFT_OK) st = weft_tensor_to_f64(acc, &local, 1);
    weft_tensor_free(acc);
    weft_tensor *t = weft_tensor_full_on(0, NULL, WEFT_F64, st == WEFT_OK ? local : NAN, WEFT_DEVICE_CPU); // NaN: every rank skips the scaling
    weft_status cst = t ? weft_dist_all_reduce(z->c, t, WEFT_REDUCE_SUM) : weft_last_status();
    if (cst == WEFT_OK) *sum = weft_tensor_item(t);
    weft_tensor_free(t);
    return st != WEFT_OK ? st : cst;
}

weft_status weft_zero_grad_scale(weft_zero *z, double coef) {
    if (!z) return weft_error(WEFT_ERR_ARG, "zero_grad_scale: NULL handle");
    weft_tensor *c = weft_tensor_full_on(0, NULL, WEFT_F64, coef, z->dev);
    weft_status st = c ? WEFT_OK : weft_last_status();
    for (int i = 0; i < z->np && st == WEFT_OK; i++) {
        weft_tensor *gr = z->p[i].piece ? weft_tensor_grad(z->p[i].piece) : NULL;
        if (gr) st = weft_op_apply_into(&weft_op_grad_scale, 2, (weft_tensor *[]){gr, c}, NULL, &gr);
    }
    weft_tensor_free(c);
    return st;
}

double weft_zero_clip_grad_norm(weft_zero *z, double max_norm) {
    if (!z || !(max_norm >= 0)) {
        weft_error(WEFT_ERR_ARG, "zero_clip_grad_norm: %s", !z ? "handle is NULL" : "invalid max_norm (need >= 0)");
        return -1;
    }
    double sum = NAN;
    weft_status st = weft_zero_grad_sum_squares(z, NULL, &sum);
    double norm = sqrt(sum), coef = max_norm / (norm + 1e-6);
    if (st == WEFT_OK && coef < 1) st = weft_zero_grad_scale(z, coef); // false for a NaN norm, as weft_clip_grad_norm
    if (st != WEFT_OK) {
        weft_error(st, "zero_clip_grad_norm: %s", weft_last_error());
        return -1;
    }
    return norm;
}

// Every rank's updated shard into every replica: each rank's pieces go into
// its chunk of the flat buffer, which is all-gathered in place; every
// parameter is then copied out of it.
static weft_status gather_params(weft_zero *z, int g) {
    zgroup *G = &z->g[g];
    if (!G->flat && !(G->flat = weft_tensor_empty_on(1, &G->n, G->dt, z->dev))) return weft_last_status();
    weft_status st = WEFT_OK;
    for (int i = 0; i < z->np && st == WEFT_OK; i++) {
        zparam *zp = &z->p[i];
        if (zp->group != g || !zp->piece) continue;
        weft_tensor *dst = weft_narrow(G->flat, 0, zp->off + zp->s_off, zp->s_cnt);
        st = dst ? weft_tensor_copy_(dst, zp->piece) : weft_last_status();
        weft_tensor_free(dst);
    }
    weft_tensor *mine = weft_narrow(G->flat, 0, G->off, G->cnt);
    weft_status cst = mine ? weft_dist_all_gather(z->c, mine, G->flat) : weft_last_status();
    weft_tensor_free(mine);
    if (st == WEFT_OK && cst != WEFT_OK) st = weft_error(cst, "zero_update: all-gather: %s", weft_last_error());
    for (int i = 0; i < z->np && st == WEFT_OK; i++) {
        zparam *zp = &z->p[i];
        if (zp->group != g) continue;
        weft_tensor *src = flat_part(G->flat, zp->off, zp->numel, weft_tensor_ndim(zp->p), weft_tensor_sizes(zp->p));
        st = src ? weft_tensor_copy_(zp->p, src) : weft_last_status();
        weft_tensor_free(src);
    }
    weft_tensor_free(G->flat);
    G->flat = NULL;
    return st;
}

// The update, or (skip) its collectives alone: every rank gathers the parameters either way.
static weft_status update(weft_zero *z, bool skip) {
    if (!z) return weft_error(WEFT_ERR_ARG, "zero_update: handle is NULL");
    if (!z->reduced) return weft_error(WEFT_ERR_STATE, "zero_update: call weft_zero_reduce_grads first");
    weft_status first = z->bad ? WEFT_ERR_STATE : z->opt && !skip ? weft_optim_step(z->opt) : WEFT_OK;
    char msg[480] = "zero_update: the gradients' reduction failed on this rank; parameters not updated";
    if (first != WEFT_OK && !z->bad) snprintf(msg, sizeof msg, "zero_update: %s", weft_last_error());
    for (int i = 0; i < z->np; i++) // the gradient views may hold the flat buffer (stage 1)
        if (z->p[i].piece) weft_tensor_set_grad(z->p[i].piece, NULL);
    for (int g = 0; g < z->ng; g++) {
        weft_tensor_free(z->g[g].flat);
        z->g[g].flat = NULL;
        weft_status st = gather_params(z, g); // even after a failed update: the other ranks wait for it
        if (st != WEFT_OK && first == WEFT_OK) first = st, snprintf(msg, sizeof msg, "%s", weft_last_error());
    }
    drop_step(z);
    return first == WEFT_OK ? WEFT_OK : weft_error(first, "%s", msg);
}

weft_status weft_zero_update(weft_zero *z) { return update(z, false); }
weft_status weft_zero_skip_update(weft_zero *z) { return update(z, true); }

weft_status weft_zero_step(weft_zero *z) {
    weft_status st = weft_zero_reduce_grads(z);
    if (st == WEFT_OK) return weft_zero_update(z);
    if (!z || !z->reduced) return st; // failed before its collectives
    char msg[480];
    snprintf(msg, sizeof msg, "%s", weft_last_error());
    weft_zero_update(z); // its collectives still, as on the other ranks (it skips the update here)
    return weft_error(st, "%s", msg);
}

void weft_zero_zero_grad(weft_zero *z) {
    if (!z) return;
    drop_step(z);
    for (int i = 0; i < z->np; i++) weft_tensor_zero_grad(z->p[i].p);
}

int weft_zero_stage(const weft_zero *z) { return z ? z->stage : 0; }
weft_optim *weft_zero_optim(const weft_zero *z) { return z ? z->opt : NULL; }

weft_status weft_zero_shard_of(const weft_zero *z, int i, int64_t *off, int64_t *count) {
    if (!z || !off || !count) return weft_error(WEFT_ERR_ARG, "zero_shard_of: NULL argument");
    *off = *count = 0;
    for (int k = 0; k < z->np; k++)
        if (z->p[k].mi == i) *off = z->p[k].s_off, *count = z->p[k].s_cnt;
    return WEFT_OK;
}

// ---- memory ----

weft_status weft_zero_memory(const weft_zero *z, weft_zero_mem *out) {
    if (!z || !out) return weft_error(WEFT_ERR_ARG, "zero_memory: NULL argument");
    *out = (weft_zero_mem){0};
    for (int g = 0; g < z->ng; g++) {
        int64_t es = (int64_t)weft_dtype_size(z->g[g].dt), n = z->g[g].n * es, shard = z->g[g].cnt * es;
        out->param_bytes += n;
        out->grad_bytes += z->stage == 1 ? n : shard;
        out->buffer_bytes += z->stage == 1 ? 0 : n;
        out->full_param_bytes += n;
        out->full_grad_bytes += n;
        out->full_optim_bytes += z->n_slots * n;
    }
    out->full_optim_bytes += z->np * (int64_t)sizeof(int64_t); // a step counter per parameter
    for (int i = 0; i < weft_optim_state_count(z->opt); i++) {
        weft_tensor *t = weft_optim_state_at(z->opt, i, NULL, 0);
        out->optim_bytes += weft_tensor_numel(t) * (int64_t)weft_dtype_size(weft_tensor_dtype(t));
    }
    return WEFT_OK;
}

// ---- checkpoints ----

// The pieces' step counter (they all step together) and the optimiser's
// step count, the largest over the ranks (a rank with an empty shard has
// neither): steps[0], steps[1].
static weft_status max_steps(weft_zero *z, int64_t steps[2]) {
    int64_t v[2] = {0, weft_optim_step_count(z->opt)};
    char name[ZERO_NAME_LEN + 8];
    for (int i = 0; i < z->np; i++) {
        if (!z->p[i].piece) continue;
        snprintf(name, sizeof name, "%s.step", z->p[i].name);
        weft_tensor *t = weft_optim_state_find(z->opt, name);
        int64_t s = t ? (int64_t)weft_tensor_item(t) : 0;
        if (s > v[0]) v[0] = s;
    }
    weft_tensor *t = weft_tensor_from_data(v, WEFT_DIMS(2), WEFT_I64);
    weft_status st = t ? weft_dist_all_reduce(z->c, t, WEFT_REDUCE_MAX) : weft_last_status();
    double d[2] = {0, 0};
    if (st == WEFT_OK) st = weft_tensor_to_f64(t, d, 2); // exact: counts stay far below 2^53
    steps[0] = (int64_t)d[0], steps[1] = (int64_t)d[1];
    weft_tensor_free(t);
    return st;
}

// One state slot of group g: this rank's pieces packed into its chunk (cnt),
// gathered on root into the whole group (n), and set there into full's
// "<param>.<slot>" tensors.
static weft_status gather_slot(weft_zero *z, int g, const char *slot, weft_optim *full, int root) {
    const zgroup *G = &z->g[g];
    char name[ZERO_NAME_LEN + 40];
    weft_tensor *in = weft_tensor_empty_on(1, &G->cnt, G->dt, z->dev);
    weft_tensor *out = z->rank == root ? weft_tensor_empty_on(1, &G->n, G->dt, z->dev) : NULL;
    weft_status st = in && (out || z->rank != root) ? WEFT_OK : weft_last_status();
    for (int i = 0; i < z->np && st == WEFT_OK; i++) {
        zparam *zp = &z->p[i];
        if (zp->group != g || !zp->piece) continue;
        snprintf(name, sizeof name, "%s.%s", zp->name, slot);
        weft_tensor *src = weft_optim_state_find(z->opt, name);
        weft_tensor *dst = weft_narrow(in, 0, zp->off + zp->s_off - G->off, zp->s_cnt);
        st = !src ? weft_error(WEFT_ERR_STATE, "zero_gather_state: no state %s", name)
             : dst ? weft_tensor_copy_(dst, src) : weft_last_status();
        weft_tensor_free(dst);
    }
    // Taken part in whatever happened here: the other ranks wait for it.
    weft_status cst = in ? weft_dist_gather(z->c, in, out, root) : WEFT_ERR_OOM;
    if (st == WEFT_OK) st = cst;
    if (st == WEFT_OK && out && !full)
        st = weft_error(WEFT_ERR_ARG, "zero_gather_state: no optimiser to gather into on the root rank %d", root);
    for (int i = 0; i < z->np && st == WEFT_OK && out; i++) {
        zparam *zp = &z->p[i];
        if (zp->group != g) continue;
        snprintf(name, sizeof name, "%s.%s", zp->name, slot);
        weft_tensor *v = flat_part(out, zp->off, zp->numel, weft_tensor_ndim(zp->p), weft_tensor_sizes(zp->p));
        st = v ? weft_optim_state_set(full, name, v) : weft_last_status();
        weft_tensor_free(v);
    }
    weft_tensor_free(in);
    weft_tensor_free(out);
    return st;
}

weft_status weft_zero_gather_state(weft_zero *z, weft_optim *full, int root) {
    if (!z) return weft_error(WEFT_ERR_ARG, "zero_gather_state: handle is NULL");
    if (root < 0 || root >= z->size)
        return weft_error(WEFT_ERR_ARG, "zero_gather_state: root %d is not a rank of the communicator (size %d)", root,
                          z->size);
    // A missing optimiser on root is reported after the collectives, so that no rank is left waiting.
    weft_status first = WEFT_OK;
    char msg[480] = "";
    for (int g = 0; g < z->ng; g++)
        for (int s = 0; s < z->n_slots; s++)
            if (gather_slot(z, g, z->slot[s], full, root) != WEFT_OK && first == WEFT_OK)
                first = weft_last_status(), snprintf(msg, sizeof msg, "%s", weft_last_error());
    int64_t steps[2];
    weft_status st = max_steps(z, steps);
    if (st != WEFT_OK && first == WEFT_OK) first = st, snprintf(msg, sizeof msg, "zero_gather_state: %s", weft_last_error());
    if (first == WEFT_OK && z->rank == root && full) {
        char name[ZERO_NAME_LEN + 8];
        weft_tensor *t = weft_tensor_from_data(&steps[0], 0, NULL, WEFT_I64);
        for (int i = 0; i < z->np && first == WEFT_OK; i++) {
            snprintf(name, sizeof name, "%s.step", z->p[i].name);
            first = t ? weft_optim_state_set(full, name, t) : weft_last_status();
            if (first != WEFT_OK) snprintf(msg, sizeof msg, "zero_gather_state: %s", weft_last_error());
        }
        weft_tensor_free(t);
        weft_optim_set_step_count(full, steps[1]);
    }
    return first == WEFT_OK ? WEFT_OK : weft_error(first, "%s", msg);
}

// weft_optim_load_state's lookup for this rank's pieces: the user's full
// tensor for "<param>.<state>", narrowed to the piece (the step counters
// pass as they are). The views are kept until the load is over.
typedef struct load_ctx {
    weft_zero *z;
    weft_optim_lookup_fn lookup;
    void *user;
    weft_tensor **keep;
    int n_keep;
} load_ctx;

static const weft_tensor *piece_lookup(const char *name, void *user) {
    load_ctx *cx = user;
    const char *rest = NULL;
    zparam *zp = find_param(cx->z, name, &rest);
    const weft_tensor *v = zp ? cx->lookup(name, cx->user) : NULL;
    if (!v || strcmp(rest, "step") == 0) return v;
    if (weft_tensor_numel(v) != zp->numel) return v; // weft_optim_load_state reports the shape mismatch
    weft_tensor *c = weft_tensor_contiguous((weft_tensor *)v);
    weft_tensor *whole = c ? weft_view(c, 1, &zp->numel) : NULL;
    weft_tensor *piece = whole ? weft_narrow(whole, 0, zp->s_off, zp->s_cnt) : NULL;
    weft_tensor_free(whole);
    weft_tensor_free(c);
    if (piece) cx->keep[cx->n_keep++] = piece;
    return piece;
}

weft_status weft_zero_load_full_state(weft_zero *z, weft_optim_lookup_fn lookup, void *user) {
    if (!z || !lookup) return weft_error(WEFT_ERR_ARG, "zero_load_full_state: NULL argument");
    if (!z->opt) return WEFT_OK; // an empty shard holds no state
    int n = weft_optim_state_count(z->opt);
    load_ctx cx = {z, lookup, user, calloc((size_t)2 * (size_t)n + 1, sizeof(weft_tensor *)), 0};
    if (!cx.keep) return weft_error(WEFT_ERR_OOM, "zero_load_full_state: out of memory");
    weft_status st = weft_optim_load_state(z->opt, piece_lookup, &cx); // looks each name up twice: check, copy
    for (int i = 0; i < cx.n_keep; i++) weft_tensor_free(cx.keep[i]);
    free(cx.keep);
    return st == WEFT_OK ? WEFT_OK : weft_error(st, "zero_load_full_state: %s", weft_last_error());
}
