// The model-parallel side of `weft train` ([net] tp, pp, zero; docs/parallelism.md):
// a job of N ranks laid out as DP x TP x PP (weft_parallel_create). Each
// rank builds the network with its tensor-parallel shards (weft_tp_model_build),
// runs its pipeline stage (weft_pp_step) and keeps only that stage's
// parameters in its optimiser; the data-parallel replicas of each shard
// average their gradients with DDP over the dp group, or shard the optimiser
// state with ZeRO. train.c and dist_train.c call these hooks only when r->mp
// is set; everything else (data, schedule, metrics) is the ordinary loop.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft.h>
#include <weft/ddp.h>
#include <weft/parallel.h>

#include "../core/core_impl.h"
#include "train_impl.h"

struct weft_mp_run {
    weft_parallel *layout;
    int M, V;              // micro-batches, virtual stages
    weft_pp *pp;           // pp > 1
    weft_module *held;     // this rank's parameters (references): what DDP and ZeRO see
    weft_ddp *ddp;         // dp > 1 without zero
    weft_zero *zero;       // zero > 0 and dp > 1
    int *index;            // [r->n_params] each held parameter's index among the network's parameters
    bool *count_norm;      // [r->n_params] counted in the gradient norm (a TP-replicated one on tp rank 0 only)
    weft_tensor **counted; // those parameters (borrowed), n_counted of them
    int n_counted;
    int n_buffers;
    const weft_tensor **buffers; // the buffers of this rank's pipeline stage (pp > 1)
};

static weft_pp_schedule schedule_of(weft_cfg_pp_schedule s) {
    return s == WEFT_CFG_PP_GPIPE ? WEFT_PP_GPIPE : s == WEFT_CFG_PP_INTERLEAVED ? WEFT_PP_INTERLEAVED : WEFT_PP_1F1B;
}

// Dropout: the same stream on the ranks of one replica (TP ranks see the
// same replicated activations), another on each replica.
static uint64_t dropout_seed_of(const weft_run *r) {
    return (r->cfg->net.seed ^ 0x9e3779b97f4a7c15ULL) + 0x632be59bd9b4e019ULL * (uint64_t)r->mp->layout->dp_rank;
}

bool weft_mp_requested(const weft_model_cfg *cfg) { return cfg->net.tp > 1 || cfg->net.pp > 1 || cfg->net.zero > 0; }

// The network this rank builds: tensor-parallel shards when tp > 1.
static weft_module *build_net(const weft_run *r, weft_comm *tp, weft_generator *g, weft_generator *dg) {
    if (r->cfg->net.tp > 1) return weft_tp_model_build(tp, r->cfg, g, dg, NULL);
    return weft_model_build(r->cfg, g, dg);
}

// Layers of the pipeline as weft_pp_create counts them: children of the
// network, a child that is itself a sequential (a block stack) counting as
// its children. stage_of[layer] from the model file's per-layer `stage`.
static int count_layers(const weft_module *net, const weft_model_cfg *cfg, int *stage_of) {
    int n = 0, nc = weft_module_child_count(net);
    for (int i = 0; i < nc; i++) {
        int k = weft_pp_count_layers(weft_module_child_at(net, i));
        for (int j = 0; j < k; j++, n++)
            if (stage_of) stage_of[n] = i < cfg->n_layers ? cfg->layers[i].stage : -1;
    }
    return n;
}

// Everything that can be checked before the data is read: the layout, the
// micro-batches, the stages and (by building it once) that the network
// has a tensor-parallel form of this size.
weft_status weft_mp_run_init(weft_run *r, weft_comm *world) {
    const weft_net_cfg *n = &r->cfg->net;
    if (r->opts.graph) return weft_error(WEFT_ERR_ARG, "train --graph: model-parallel runs (tp, pp, zero) take eager steps");
    struct weft_mp_run *m = calloc(1, sizeof *m);
    if (!m) return weft_error(WEFT_ERR_OOM, "train: out of memory");
    r->mp = m;
    m->layout = weft_parallel_create(world, n->tp, n->pp);
    if (!m->layout) return weft_error(weft_last_status(), "train: %s", weft_last_error());
    m->M = n->microbatches > 0 ? n->microbatches : n->pp;
    m->V = n->pp_schedule == WEFT_CFG_PP_INTERLEAVED ? (n->virtual_stages > 0 ? n->virtual_stages : 2) : 1;
    if (n->virtual_stages > 0 && n->pp_schedule != WEFT_CFG_PP_INTERLEAVED)
        return weft_error(WEFT_ERR_ARG, "train: virtual_stages = %d needs pp_schedule = interleaved", n->virtual_stages);
    if (n->pp == 1 && n->microbatches > 1)
        return weft_error(WEFT_ERR_ARG, "train: microbatches = %d needs pp > 1 (a pipeline)", n->microbatches);
    if (n->batch % m->M)
        return weft_error(WEFT_ERR_ARG, "train: microbatches = %d does not divide batch = %lld", m->M, (long long)n->batch);
    if (m->V > 1 && m->M % n->pp)
        return weft_error(WEFT_ERR_ARG, "train: pp_schedule = interleaved needs microbatches (%d) to be a multiple of pp = %d",
                          m->M, n->pp);
    // Build once, from a scratch generator: the tensor-parallel form's errors
    // (tp not dividing the heads, a layer without one) and the layer count.
    weft_generator *g = weft_generator_create(n->seed), *dg = weft_generator_create(n->seed);
    weft_module *net = g && dg ? build_net(r, m->layout->tp_comm, g, dg) : NULL;
    weft_status st = net ? WEFT_OK : weft_error(weft_last_status(), "train: tp = %d: %s", n->tp, weft_last_error());
    int layers = net ? count_layers(net, r->cfg, NULL) : 0;
    weft_module_free(net);
    weft_generator_free(g);
    weft_generator_free(dg);
    if (st) return st;
    if (n->pp * m->V > layers)
        return weft_error(WEFT_ERR_ARG, "train: pp = %d%s is more than the model's %d layers", n->pp,
                          m->V > 1 ? " x virtual_stages" : "", layers);
    int top = r->cfg->n_layers ? r->cfg->layers[r->cfg->n_layers - 1].stage : -1;
    if (top >= 0 && top + 1 != n->pp * m->V)
        return weft_error(WEFT_ERR_ARG, "train: the model file places layers on stages 0..%d, but pp = %d%s makes %d stages",
                          top, n->pp, m->V > 1 ? " x virtual_stages" : "", n->pp * m->V);
    return WEFT_OK;
}

const weft_parallel *weft_mp_layout(const weft_run *r) { return r->mp ? r->mp->layout : NULL; }
int weft_mp_microbatches(const weft_run *r) { return r->mp ? r->mp->M : 1; }

// The network, the pipeline over it, and which of its parameters this rank
// holds (is_held[i] for the network's parameter i).
weft_module *weft_mp_build(weft_run *r, bool **is_held) {
    struct weft_mp_run *m = r->mp;
    const weft_net_cfg *n = &r->cfg->net;
    *is_held = NULL;
    weft_module *net = build_net(r, m->layout->tp_comm, r->init_gen, r->dropout_gen);
    if (!net) return NULL;
    int np = weft_module_param_count(net);
    bool *held = calloc((size_t)np + 1, sizeof *held);
    if (!held) {
        weft_module_free(net);
        return weft_error_null(WEFT_ERR_OOM, "train: out of memory");
    }
    for (int i = 0; i < np; i++) held[i] = true;
    if (n->pp > 1) {
        int L = count_layers(net, r->cfg, NULL);
        int *stage_of = calloc((size_t)L + 1, sizeof *stage_of);
        if (stage_of) count_layers(net, r->cfg, stage_of);
        weft_pp_opts o = {.schedule = schedule_of(n->pp_schedule), .microbatches = m->M,
                          .virtual_stages = m->V, .split = WEFT_PP_SPLIT_LAYERS, .recompute = n->recompute,
                          .stage_of = stage_of && L && stage_of[0] >= 0 ? stage_of : NULL};
        m->pp = stage_of ? weft_pp_create(m->layout->pp_comm, net, &o) : NULL;
        free(stage_of);
        weft_tensor **mine = m->pp ? calloc((size_t)np + 1, sizeof *mine) : NULL;
        int k = mine ? weft_pp_params(m->pp, mine) : 0;
        for (int i = 0; mine && i < np; i++) {
            weft_tensor *t = weft_module_param_at(net, i, NULL, 0);
            held[i] = false;
            for (int j = 0; j < k && !held[i]; j++) held[i] = mine[j] == t;
        }
        if (!mine) {
            free(mine);
            free(held);
            weft_module_free(net);
            return weft_error_null(weft_last_status(), "train: pp = %d: %s", n->pp, weft_last_error());
        }
        free(mine);
    }
    *is_held = held;
    return net;
}

// After weft_run_build chose r->params: each one's place in the network, and
// whether the gradient norm counts it here (a TP-replicated parameter has
// the same gradient on every tp rank: counted on tp rank 0 only).
weft_status weft_mp_attach(weft_run *r) {
    struct weft_mp_run *m = r->mp;
    const weft_parallel *L = m->layout;
    int np = weft_module_param_count(r->net);
    m->index = calloc((size_t)r->n_params + 1, sizeof *m->index);
    m->count_norm = calloc((size_t)r->n_params + 1, sizeof *m->count_norm);
    m->counted = calloc((size_t)r->n_params + 1, sizeof *m->counted);
    m->held = weft_module_new("held", NULL, NULL, NULL);
    if (!m->index || !m->count_norm || !m->counted || !m->held) return weft_error(WEFT_ERR_OOM, "train: out of memory");
    for (int k = 0, i = 0; k < r->n_params; k++) {
        while (i < np && weft_module_param_at(r->net, i, NULL, 0) != r->params[k]) i++;
        if (i == np) return weft_error(WEFT_ERR_STATE, "train: parameter %s is not in the network", r->names[k]);
        m->index[k] = i;
        int dim = -1, groups = 1;
        if (L->tp > 1 && weft_tp_param_split(r->net, i, &dim, &groups)) return weft_last_status();
        m->count_norm[k] = dim >= 0 || L->tp_rank == 0;
        if (m->count_norm[k]) m->counted[m->n_counted++] = r->params[k];
        char nm[32];
        snprintf(nm, sizeof nm, "p%d", k);
        if (weft_module_add_param(m->held, nm, weft_tensor_ref(r->params[k]))) return weft_last_status();
    }
    if (m->pp) { // the buffers this rank keeps up to date (and writes to checkpoints)
        int nl = weft_pp_num_layers(m->pp), cap = 0;
        for (int i = 0; i < nl; i++) {
            const weft_module *lay = weft_pp_layer(m->pp, i);
            int nb = weft_pp_holds(m->pp, i) ? weft_module_buffer_count(lay) : 0;
            for (int j = 0; j < nb; j++) {
                if (m->n_buffers == cap) {
                    cap = cap ? 2 * cap : 16;
                    const weft_tensor **b = realloc(m->buffers, sizeof *b * (size_t)cap);
                    if (!b) return weft_error(WEFT_ERR_OOM, "train: out of memory");
                    m->buffers = b;
                }
                m->buffers[m->n_buffers++] = weft_module_buffer_at(lay, j, NULL, 0);
            }
        }
    }
    if (L->dp > 1 && r->cfg->net.zero > 0) {
        weft_optim_opts o = weft_run_optim_opts(&r->cfg->net);
        m->zero = weft_zero_create(L->dp_comm, m->held, &o, r->cfg->net.zero);
        if (!m->zero) return weft_last_status();
    } else if (L->dp > 1 && !m->pp) { // a pipeline runs several backwards per step: averaged after them instead
        weft_ddp_opts o = {.bucket_mb = r->opts.bucket_mb};
        m->ddp = weft_ddp_create(L->dp_comm, m->held, &o);
        if (!m->ddp) return weft_last_status();
    }
    weft_generator_set_state(r->dropout_gen, dropout_seed_of(r), 0);
    return WEFT_OK;
}

weft_tensor *weft_mp_loss(const weft_run *r, weft_tensor *logits, weft_tensor *labels) {
    if (r->mp && r->cfg->net.tp > 1) return weft_tp_model_loss(r->mp->layout->tp_comm, r->cfg, logits, labels);
    return weft_model_loss(r->cfg, logits, labels);
}

// A micro-batch's loss, times the loss scale under f16 (its backward starts there).
static weft_tensor *pp_loss(weft_tensor *out, weft_tensor *target, void *user) {
    const weft_run *r = user;
    weft_tensor *l = weft_mp_loss(r, out, target);
    if (!l || !r->scaler) return l;
    weft_tensor *sl = weft_grad_scaler_scale(r->scaler, l);
    weft_tensor_free(l);
    return sl;
}

// Forward and backward of one batch: through the pipeline in micro-batches
// (the mean loss of the batch on every rank), or whole. f16: the backward
// runs from the scaled loss; *loss_out is the loss itself.
weft_status weft_mp_forward_backward(weft_run *r, weft_tensor *x, weft_tensor *y, double *loss_out) {
    struct weft_mp_run *m = r->mp;
    if (m->pp) {
        weft_status st = weft_pp_step(m->pp, x, y, pp_loss, r, loss_out);
        if (!st && r->scaler) *loss_out /= weft_grad_scaler_get_scale(r->scaler);
        return st ? st : weft_dist_run_check_loss(r, *loss_out);
    }
    weft_tensor *logits = weft_module_forward(r->net, x), *loss = weft_mp_loss(r, logits, y);
    weft_tensor_free(logits);
    if (!loss) return weft_last_status();
    *loss_out = weft_tensor_item(loss);
    weft_status st = weft_dist_run_check_loss(r, *loss_out);
    weft_tensor *sl = !st && r->scaler ? weft_grad_scaler_scale(r->scaler, loss) : NULL;
    if (!st && r->scaler && !sl) st = weft_last_status();
    if (!st) st = weft_backward(sl ? sl : loss, NULL, NULL);
    weft_tensor_free(sl);
    weft_tensor_free(loss);
    return st;
}

weft_status weft_mp_after_backward(weft_run *r) {
    struct weft_mp_run *m = r->mp;
    if (m->ddp) return weft_ddp_wait(m->ddp);
    if (m->zero) return weft_zero_reduce_grads(m->zero);
    if (m->layout->dp == 1) return WEFT_OK;
    // A pipeline's gradients, summed over its micro-batches: averaged over the
    // replicas once per step (a parameter without one counts as zero).
    weft_status st = WEFT_OK;
    for (int i = 0; i < r->n_params && !st; i++) {
        weft_tensor *p = r->params[i], *g = weft_tensor_grad(p);
        if (!g) {
            weft_tensor *z = weft_tensor_zeros_like(p);
            st = z ? weft_tensor_set_grad(p, z) : weft_last_status();
            weft_tensor_free(z);
            if (st) break;
            g = weft_tensor_grad(p);
        }
        if (!weft_tensor_is_contiguous(g)) {
            weft_tensor *c = weft_tensor_contiguous(g);
            st = c ? weft_tensor_set_grad(p, c) : weft_last_status();
            weft_tensor_free(c);
            g = weft_tensor_grad(p);
        }
        if (!st) st = weft_dist_all_reduce(m->layout->dp_comm, g, WEFT_REDUCE_AVG);
    }
    return st;
}

// Every gradient this rank holds (ZeRO: its shards') times coef.
static weft_status mp_grad_scale(weft_run *r, double coef) {
    struct weft_mp_run *m = r->mp;
    return m->zero ? weft_zero_grad_scale(m->zero, coef) : weft_grad_scale(r->n_params, r->params, coef);
}

// Unscaling (f16), the overflow check and clip_grad_norm over the whole model: this rank's sum of squares
// (each TP-replicated parameter counted on one tp rank), summed over the model-parallel group; with ZeRO,
// over the shards' gradients.
weft_status weft_mp_unscale_clip(weft_run *r, double max_norm, bool *found_inf) {
    struct weft_mp_run *m = r->mp;
    *found_inf = false;
    if (!(max_norm > 0) && !r->scaler) return WEFT_OK;
    double inv = r->scaler ? 1.0 / weft_grad_scaler_get_scale(r->scaler) : 1, sum = 0;
    // unscaled first: the check and the norm are the unscaled gradients'
    weft_status st = inv != 1 ? mp_grad_scale(r, inv) : WEFT_OK;
    if (!st) {
        if (m->zero) st = weft_zero_grad_sum_squares(m->zero, m->count_norm, &sum); // the shards' gradients
        else st = weft_grad_sum_squares(m->n_counted, m->counted, &sum);
    }
    // Over the model-parallel group (the dp replicas hold the same averaged
    // gradients, or ZeRO summed their shards already). A failed rank adds NaN.
    weft_tensor *t = weft_tensor_scalar(st ? NAN : sum, WEFT_F64);
    weft_status cs = t ? weft_dist_all_reduce(m->layout->mp_comm, t, WEFT_REDUCE_SUM) : weft_last_status();
    if (!cs) sum = weft_tensor_item(t);
    weft_tensor_free(t);
    if (st || cs) return st ? st : cs;
    *found_inf = r->scaler && !isfinite(sum); // an Inf/NaN anywhere in the model: every rank skips the step
    if (!(max_norm > 0) || *found_inf) return WEFT_OK;
    double coef = max_norm / (sqrt(sum) + 1e-6);
    if (!(coef < 1)) return WEFT_OK; // (a NaN norm: left alone, as weft_clip_grad_norm)
    return mp_grad_scale(r, coef);
}

bool weft_mp_owns_step(const weft_run *r) { return r->mp && r->mp->zero; }

weft_status weft_mp_step(weft_run *r, double lr, bool skip) {
    weft_optim *o = weft_zero_optim(r->mp->zero);
    if (o) weft_optim_set_lr(o, lr);
    weft_optim_set_lr(r->optim, lr); // what the metrics report
    return skip ? weft_zero_skip_update(r->mp->zero) : weft_zero_update(r->mp->zero);
}

// Evaluation of one batch: the loss (and, for a classifier, the number of
// correct predictions) on every rank.
typedef struct {
    const weft_run *r;
    bool classifier;
} eval_ctx;

static weft_status eval_batch(weft_tensor *out, weft_tensor *target, void *user, double *acc) {
    const eval_ctx *e = user;
    const weft_run *r = e->r;
    weft_tensor *l = weft_mp_loss(r, out, target);
    if (!l) return weft_last_status();
    int64_t b = weft_tensor_size(target, 0);
    acc[0] += weft_tensor_item(l) * (double)b;
    acc[1] += (double)b;
    weft_tensor_free(l);
    if (!e->classifier) return WEFT_OK;
    weft_tensor *full = weft_tensor_ref(out);
    if (r->cfg->net.tp > 1 && weft_tensor_size(out, -1) != r->cfg->net.classes) { // vocab-split logits
        weft_tensor_free(full);
        full = weft_tp_gather(r->mp->layout->tp_comm, out, -1);
    }
    weft_tensor *pred = full ? weft_argmax(full, 1, false) : NULL, *eq = pred ? weft_eq(pred, target) : NULL;
    weft_tensor *eqf = eq ? weft_cast(eq, WEFT_F64) : NULL, *c = eqf ? weft_sum(eqf, 0, NULL, false) : NULL;
    weft_status st = c ? WEFT_OK : weft_last_status();
    if (c) acc[2] += weft_tensor_item(c);
    weft_tensor *t[] = {full, pred, eq, eqf, c};
    for (int i = 0; i < 5; i++) weft_tensor_free(t[i]);
    return st;
}

// acc[0] += loss x samples, acc[1] += samples, acc[2] += correct.
weft_status weft_mp_eval_batch(const weft_run *r, weft_tensor *x, weft_tensor *y, double *acc) {
    eval_ctx e = {r, r->cfg->net.dataset == WEFT_CFG_FMNIST};
    if (r->mp->pp) return weft_pp_forward(r->mp->pp, x, y, eval_batch, &e, 3, acc);
    weft_tensor *out = weft_module_forward(r->net, x);
    if (!out) return weft_last_status();
    weft_status st = eval_batch(out, y, &e, acc);
    weft_tensor_free(out);
    return st;
}

// One sample counts once per replica: on its tp rank 0 of pipeline stage 0.
bool weft_mp_counts_samples(const weft_run *r) {
    return !r->mp || (r->mp->layout->tp_rank == 0 && r->mp->layout->pp_rank == 0);
}

void weft_mp_result(const weft_run *r, weft_train_result *out) {
    if (!r->mp) return;
    out->tp = r->mp->layout->tp;
    out->pp = r->mp->layout->pp;
    out->dp = r->mp->layout->dp;
    out->zero = r->mp->zero ? r->cfg->net.zero : 0;
}

int weft_mp_param_index(const weft_run *r, int k) { return r->mp->index[k]; }

bool weft_mp_holds_buffer(const weft_run *r, const weft_tensor *b) {
    if (!r->mp->pp) return true;
    for (int i = 0; i < r->mp->n_buffers; i++)
        if (r->mp->buffers[i] == b) return true;
    return false;
}

// ZeRO keeps the optimiser state in shards; checkpoints hold it whole, in
// r->optim (an unsharded optimiser over the same parameters, never stepped
// under ZeRO): gathered there on dp rank 0 before a save...
weft_status weft_mp_gather_optim(weft_run *r) {
    struct weft_mp_run *m = r->mp;
    if (!m || !m->zero) return WEFT_OK;
    bool root = m->layout->dp_rank == 0;
    // ZeRO fills an optimiser over its own parameter names (p<k>); r->optim's are "model.<name>"
    weft_optim *full = NULL;
    char **names = root ? calloc((size_t)r->n_params + 1, sizeof *names) : NULL;
    weft_status st = root && !names ? weft_error(WEFT_ERR_OOM, "checkpoint: out of memory") : WEFT_OK;
    for (int k = 0; root && !st && k < r->n_params; k++)
        if (!(names[k] = malloc(16))) st = weft_error(WEFT_ERR_OOM, "checkpoint: out of memory");
        else snprintf(names[k], 16, "p%d", k);
    if (root && !st) {
        weft_optim_opts o = weft_run_optim_opts(&r->cfg->net);
        full = weft_optim_create(&o, r->n_params, r->params, (const char *const *)names);
        if (!full) st = weft_last_status();
    }
    // Collective over dp: every rank takes part, even after a failure above.
    weft_status gs = weft_zero_gather_state(m->zero, st ? NULL : full, 0);
    if (!st) st = gs;
    int ns = full && !st ? weft_optim_state_count(full) : 0;
    for (int i = 0; i < ns && !st; i++) {
        char name[600];
        weft_tensor *t = weft_optim_state_at(full, i, name, sizeof name);
        char *end, tr[700];
        long k = strtol(name + 1, &end, 10);
        if (k < 0 || k >= r->n_params || *end != '.') continue;
        snprintf(tr, sizeof tr, "%s%s", r->names[k], end);
        st = weft_optim_state_set(r->optim, tr, t);
    }
    if (root && !st) weft_optim_set_step_count(r->optim, r->step);
    weft_optim_free(full);
    for (int k = 0; names && k < r->n_params; k++) free(names[k]);
    free(names);
    return st;
}

// ...and handed to the shards after a resume read it there. ZeRO names its
// parameters p<k> (k: this rank's parameter k), r->optim "model.<name>".
static const weft_tensor *zero_lookup(const char *name, void *user) {
    const weft_run *r = user;
    char *end;
    if (name[0] != 'p') return NULL;
    long k = strtol(name + 1, &end, 10);
    if (end == name + 1 || *end != '.' || k < 0 || k >= r->n_params) return NULL;
    char full[600];
    snprintf(full, sizeof full, "%s%s", r->names[k], end);
    return weft_optim_state_find(r->optim, full);
}

weft_status weft_mp_after_resume(weft_run *r) {
    struct weft_mp_run *m = r->mp;
    if (m->zero) {
        weft_status st = weft_zero_load_full_state(m->zero, zero_lookup, r);
        if (st) return st;
        weft_optim *o = weft_zero_optim(m->zero);
        if (o) weft_optim_set_step_count(o, r->step);
    }
    uint64_t seed, off;
    weft_generator_get_state(r->dropout_gen, &seed, &off);
    weft_generator_set_state(r->dropout_gen, dropout_seed_of(r), off);
    return WEFT_OK;
}

void weft_mp_run_free(weft_run *r) {
    struct weft_mp_run *m = r->mp;
    if (!m) return;
    weft_ddp_free(m->ddp);
    weft_zero_free(m->zero);
    weft_module_free(m->held);
    weft_pp_free(m->pp);
    weft_parallel_free(m->layout);
    free(m->index);
    free(m->count_norm);
    free(m->counted);
    free(m->buffers);
    free(m);
    r->mp = NULL;
}
