// The training loop behind `weft train`: data, model, optimiser, schedule,
// evaluation, checkpoints (with exact resume), metrics and progress.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <weft.h>
#include <weft/optim.h>
#include <weft/train.h>

#include "../core/core_impl.h"
#include "train_impl.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ---- data ----
weft_status weft_run_load_data(weft_run *r) {
    const weft_net_cfg *n = &r->cfg->net;
    if (n->dataset == WEFT_CFG_FMNIST) {
        r->train = weft_fmnist_load(r->opts.data_dir, "train", WEFT_FMNIST_MEAN, WEFT_FMNIST_STD);
        if (!r->train) return weft_last_status();
        r->test = weft_fmnist_load(r->opts.data_dir, "test", WEFT_FMNIST_MEAN, WEFT_FMNIST_STD);
        if (!r->test) return weft_last_status();
        return WEFT_OK;
    }
    char path[1024];
    const char *p = r->opts.text_path;
    if (!p) {
        const char *home = getenv("HOME");
        snprintf(path, sizeof path, "%s/.cache/weft/kjv.txt", home && *home ? home : "/tmp");
        p = path;
    }
    weft_tensor *all = weft_kjv_load(p, WEFT_U8);
    if (!all) return weft_last_status();
    weft_status st = weft_train_val_split(all, n->val_fraction, &r->train_tokens, &r->val_tokens);
    weft_tensor_free(all);
    if (st) return st;
    if (weft_tensor_numel(r->train_tokens) <= n->context + 1 || weft_tensor_numel(r->val_tokens) <= n->context + 1)
        return weft_error(WEFT_ERR_FORMAT, "%s: the text is too short for a context of %lld", p, (long long)n->context);
    return WEFT_OK;
}

// ---- model + optimiser ----
static weft_optim_kind optim_kind(weft_cfg_optimizer o) {
    switch (o) {
    case WEFT_CFG_SGD: return WEFT_OPTIM_SGD;
    case WEFT_CFG_ADAM: return WEFT_OPTIM_ADAM;
    case WEFT_CFG_ADAMW: return WEFT_OPTIM_ADAMW;
    case WEFT_CFG_ADAGRAD: return WEFT_OPTIM_ADAGRAD;
    case WEFT_CFG_RMSPROP: return WEFT_OPTIM_RMSPROP;
    }
    return WEFT_OPTIM_SGD;
}

weft_optim_opts weft_run_optim_opts(const weft_net_cfg *n) {
    weft_optim_opts o = weft_optim_defaults(optim_kind(n->optimizer));
    o.lr = n->lr;
    o.weight_decay = n->weight_decay;
    o.eps = n->eps;
    o.beta1 = n->betas[0];
    o.beta2 = n->betas[1];
    if (o.kind == WEFT_OPTIM_SGD || o.kind == WEFT_OPTIM_RMSPROP) o.momentum = n->momentum;
    if (o.kind == WEFT_OPTIM_SGD) o.nesterov = n->nesterov;
    if (o.kind == WEFT_OPTIM_RMSPROP) o.alpha = n->alpha;
    return o;
}

weft_tensor *weft_run_to_device(const weft_run *r, weft_tensor *x) {
    if (!x) return NULL;
    return r->device.type == WEFT_CPU ? weft_tensor_ref(x) : weft_tensor_to(x, r->device);
}

// The device of opts.device: checked here, before anything is built there.
static weft_status run_device(weft_run *r) {
    r->device = WEFT_DEVICE_CPU;
    const char *d = r->opts.device;
    if (!d || !*d) return WEFT_OK;
    if (weft_device_parse(d, &r->device) != WEFT_OK) return weft_error(WEFT_ERR_ARG, "--device: %s", weft_last_error());
    if (r->device.type == WEFT_CPU) return WEFT_OK;
    if (!weft_device_available(r->device)) {
        weft_device_synchronize(r->device); // leaves the registry's message (which device, and why)
        return weft_error(WEFT_ERR_DEVICE, "--device %s: %s", d, weft_last_error());
    }
    return WEFT_OK;
}

// [net] precision: which training paths take it, and f16's loss scaler.
static weft_status run_precision(weft_run *r) {
    const weft_net_cfg *n = &r->cfg->net;
    if (n->precision == WEFT_CFG_F32) return WEFT_OK;
    const char *p = n->precision == WEFT_CFG_BF16 ? "bf16" : "f16";
    if (r->opts.graph && n->precision == WEFT_CFG_F16)
        return weft_error(WEFT_ERR_UNSUPPORTED, "train: precision = %s (loss scaling) runs eager steps only (not --graph)", p);
    if (n->precision == WEFT_CFG_F16 && weft_dist_run_mode(r) == WEFT_TRAIN_DIST_PS)
        return weft_error(WEFT_ERR_UNSUPPORTED,
                          "train: precision = f16 (loss scaling) does not run under --dist ps (the servers step)");
    if (n->precision == WEFT_CFG_F16 && !r->scaler && !(r->scaler = weft_grad_scaler_create(n->loss_scale, 0, 0, 0)))
        return weft_last_status();
    return WEFT_OK;
}

weft_status weft_run_build(weft_run *r, bool with_optim) {
    const weft_net_cfg *n = &r->cfg->net;
    weft_status st = run_device(r);
    if (!st) st = run_precision(r);
    if (st) return st;
    r->init_gen = weft_generator_create(n->seed);
    r->dropout_gen = weft_generator_create(n->seed ^ 0x9e3779b97f4a7c15ULL);
    if (!r->init_gen || !r->dropout_gen) return weft_last_status();
    // Parameters and buffers are made on the run's device (initialised from the
    // same random streams as on the CPU, so both start from the same values).
    weft_device prev = weft_device_get_default();
    if (r->device.type != WEFT_CPU) weft_device_set_default(r->device);
    bool *held = NULL; // model parallel: the parameters of this rank's pipeline stage
    r->net = r->mp ? weft_mp_build(r, &held) : weft_model_build(r->cfg, r->init_gen, r->dropout_gen);
    weft_device_set_default(prev);
    if (!r->net) return weft_last_status();
    int np = weft_module_param_count(r->net);
    r->params = calloc((size_t)np + 1, sizeof *r->params);
    r->names = calloc((size_t)np + 1, sizeof *r->names);
    if (!r->params || !r->names) {
        free(held);
        return weft_error(WEFT_ERR_OOM, "train: out of memory");
    }
    for (int i = 0; i < np; i++) {
        if (held && !held[i]) continue;
        char name[256] = "model.";
        r->params[r->n_params] = weft_module_param_at(r->net, i, name + 6, sizeof name - 6);
        if (!(r->names[r->n_params++] = strdup(name))) {
            free(held);
            return weft_error(WEFT_ERR_OOM, "train: out of memory");
        }
    }
    free(held);
    if (!with_optim) return WEFT_OK;
    weft_optim_opts o = weft_run_optim_opts(n);
    r->optim = weft_optim_create(&o, r->n_params, r->params, (const char *const *)r->names);
    if (!r->optim) return weft_last_status();
    // [net] warmup precedes every schedule (it was read only with cosine before)
    r->sched = (weft_lr_schedule){.kind = WEFT_LR_CONSTANT, .base_lr = n->lr, .warmup_steps = n->warmup};
    if (n->schedule == WEFT_CFG_STEP)
        r->sched = (weft_lr_schedule){.kind = WEFT_LR_STEP, .base_lr = n->lr, .step_size = n->step_size, .gamma = n->gamma,
                                      .warmup_steps = n->warmup};
    else if (n->schedule == WEFT_CFG_COSINE)
        r->sched = (weft_lr_schedule){.kind = WEFT_LR_COSINE, .base_lr = n->lr, .warmup_steps = n->warmup,
                                      .total_steps = r->total_steps > 0 ? r->total_steps : 1, .min_lr = n->min_lr};
    return weft_lr_schedule_check(&r->sched);
}

void weft_run_free(weft_run *r) {
    weft_dist_run_free(r); // before the module: DDP's hooks sit on its parameters
    weft_graph_train_free(r);
    weft_loader_free(r->loader);
    weft_optim_free(r->optim);
    weft_grad_scaler_free(r->scaler);
    weft_module_free(r->net);
    for (int i = 0; r->names && i < r->n_params; i++) free(r->names[i]);
    free(r->names);
    free(r->params);
    weft_generator_free(r->init_gen);
    weft_generator_free(r->dropout_gen);
    weft_dataset_free(r->train);
    weft_dataset_free(r->test);
    weft_tensor_free(r->train_tokens);
    weft_tensor_free(r->val_tokens);
    weft_csv_close(r->csv);
    weft_tb_close(r->tb);
    memset(r, 0, sizeof *r);
}

// ---- evaluation ----
weft_dtype weft_run_autocast(const weft_run *r) {
    switch (r->cfg->net.precision) {
    case WEFT_CFG_BF16: return WEFT_BF16;
    case WEFT_CFG_F16: return WEFT_F16;
    default: return WEFT_F32;
    }
}

// One evaluation batch (on the run's device): its mean loss and, for a
// classifier, how many it gets right. A model-parallel run's goes through
// the pipeline and the tensor-parallel shards (every rank takes part).
static weft_status eval_batch(weft_run *r, weft_tensor *x, weft_tensor *y, double *mean, double *correct) {
    *mean = *correct = 0;
    if (!x || !y) return weft_last_status();
    if (r->mp) {
        double a[3] = {0, 0, 0}; // loss x samples, samples, correct
        weft_status st = weft_mp_eval_batch(r, x, y, a);
        *mean = a[1] > 0 ? a[0] / a[1] : 0;
        *correct = a[2];
        return st;
    }
    weft_tensor *logits = weft_module_forward(r->net, x), *l = weft_model_loss(r->cfg, logits, y);
    weft_tensor *pred = NULL, *eq = NULL, *eqf = NULL, *c = NULL;
    weft_status st = l ? WEFT_OK : weft_last_status();
    if (!st) *mean = weft_tensor_item(l);
    if (!st && r->cfg->net.dataset == WEFT_CFG_FMNIST) {
        pred = weft_argmax(logits, 1, false), eq = weft_eq(pred, y);
        eqf = weft_cast(eq, WEFT_F64), c = weft_sum(eqf, 0, NULL, false);
        if (c) *correct = weft_tensor_item(c);
        else st = weft_last_status();
    }
    weft_tensor *t[] = {logits, l, pred, eq, eqf, c};
    for (int k = 0; k < 6; k++) weft_tensor_free(t[k]);
    return st;
}

weft_status weft_run_evaluate(weft_run *r, double *loss, double *acc) {
    const weft_net_cfg *n = &r->cfg->net;
    bool was_training = weft_module_is_training(r->net);
    weft_module_set_training(r->net, false);
    bool prev = weft_grad_set_enabled(false);
    weft_dtype prev_ac = weft_autocast_get();
    weft_autocast_set(weft_run_autocast(r)); // evaluate the model as it trains
    weft_status st = weft_autocast_cache_fill(r->params, r->n_params); // its weights' casts in a few launches
    double sum_loss = 0, correct = 0, count = 0, mean, right;
    if (n->dataset == WEFT_CFG_FMNIST) {
        int64_t N = weft_dataset_len(r->test), B = 1000;
        for (int64_t i = 0; i < N && !st; i += B) {
            int64_t b = N - i < B ? N - i : B;
            weft_tensor *xh = weft_narrow(r->test->inputs, 0, i, b), *yh = weft_narrow(r->test->labels, 0, i, b);
            weft_tensor *x = weft_run_to_device(r, xh), *y = weft_run_to_device(r, yh);
            st = eval_batch(r, x, y, &mean, &right);
            sum_loss += mean * (double)b;
            correct += right;
            count += (double)b;
            weft_tensor *t[] = {xh, yh, x, y};
            for (int k = 0; k < 4; k++) weft_tensor_free(t[k]);
        }
    } else {
        int64_t nb = r->opts.eval_batches > 0 ? r->opts.eval_batches : 50;
        for (int64_t i = 0; i < nb && !st; i++) {
            weft_tensor *xh = NULL, *yh = NULL, *x = NULL, *y = NULL;
            // Fixed windows (seed 0xe7a1, step i): every evaluation sees the same text.
            st = weft_lm_batch(r->val_tokens, n->batch, n->context, 0xe7a1, (uint64_t)i, &xh, &yh);
            if (!st) {
                x = weft_run_to_device(r, xh), y = weft_run_to_device(r, yh);
                st = eval_batch(r, x, y, &mean, &right);
                sum_loss += mean;
                count += 1;
            }
            weft_tensor *t[] = {xh, yh, x, y};
            for (int k = 0; k < 4; k++) weft_tensor_free(t[k]);
        }
    }
    weft_grad_set_enabled(prev);
    weft_autocast_set(prev_ac);
    weft_module_set_training(r->net, was_training);
    if (st) return st;
    // fmnist sums loss x samples over the test set; kjv sums the batches' mean losses (count = batches)
    *loss = count > 0 ? sum_loss / count : NAN;
    if (acc) *acc = n->dataset == WEFT_CFG_FMNIST && count > 0 ? correct / count : NAN;
    return WEFT_OK;
}

// ---- one optimiser step ----
static weft_status finish_step(weft_run *r, double t0, double l, double *loss_out);
static weft_status train_step(weft_run *r, weft_tensor *x, weft_tensor *y, double *loss_out) {
    if (r->opts.graph) return weft_graph_train_step(r, x, y, loss_out); // --graph: one graph run per step
    double t0 = now_s();
    weft_tensor *xd = weft_run_to_device(r, x), *yd = weft_run_to_device(r, y);
    if (!xd || !yd) {
        weft_tensor_free(xd);
        return weft_last_status();
    }
    weft_dtype prev_ac = weft_autocast_get();
    weft_autocast_set(weft_run_autocast(r));
    double l = 0;
    weft_status st = weft_autocast_cache_fill(r->params, r->n_params); // the weights' casts in a few launches
    if (st) {
        weft_autocast_set(prev_ac);
        weft_tensor_free(xd);
        weft_tensor_free(yd);
        return st;
    }
    if (r->mp) { // the pipeline's micro-batches, tensor-parallel shards (mp_train.c)
        st = weft_mp_forward_backward(r, xd, yd, &l);
        weft_autocast_set(prev_ac);
        weft_tensor_free(xd);
        weft_tensor_free(yd);
        if (st) return st;
        return finish_step(r, t0, l, loss_out);
    }
    weft_tensor *logits = weft_module_forward(r->net, xd);
    weft_tensor *loss = weft_model_loss(r->cfg, logits, yd);
    weft_autocast_set(prev_ac);
    weft_tensor_free(logits);
    weft_tensor_free(xd);
    weft_tensor_free(yd);
    if (!loss) return weft_last_status();
    l = weft_tensor_item(loss);
    st = r->dist ? weft_dist_run_check_loss(r, l) : WEFT_OK;
    if (st) {
        weft_tensor_free(loss);
        return st;
    }
    if (!isfinite(l)) {
        weft_tensor_free(loss);
        return weft_error(WEFT_ERR_STATE, "step %lld: the loss is %s; stopping (the last good checkpoint is kept)",
                          (long long)(r->step + 1), isnan(l) ? "NaN" : "infinite");
    }
    if (r->scaler) { // f16: backward from the scaled loss (weft_grad_scaler_step unscales)
        weft_tensor *sl = weft_grad_scaler_scale(r->scaler, loss);
        st = sl ? weft_backward(sl, NULL, NULL) : weft_last_status();
        weft_tensor_free(sl);
    } else {
        st = weft_backward(loss, NULL, NULL);
    }
    weft_tensor_free(loss);
    if (st) return st;
    return finish_step(r, t0, l, loss_out);
}

// After the backward: gradients averaged across ranks, clipped, one optimiser step.
// f16 (r->scaler): the gradients are unscaled before clipping, and a step
// whose gradients are not finite is skipped, on every rank alike (DDP's
// ranks hold the same averaged gradients; model parallelism checks them
// over the group).
static weft_status finish_step(weft_run *r, double t0, double l, double *loss_out) {
    const weft_net_cfg *n = &r->cfg->net;
    weft_status st;
    bool found_inf = false;
    if (r->dist && (st = weft_dist_run_after_backward(r, now_s() - t0))) return st;
    if (r->mp) {
        if ((st = weft_mp_unscale_clip(r, n->clip, &found_inf))) return st;
    } else if (n->clip > 0) {
        if (r->scaler && (st = weft_grad_scaler_unscale(r->scaler, r->optim))) return st;
        if (weft_clip_grad_norm(r->n_params, r->params, n->clip) < 0) return weft_last_status();
    }
    double lr = weft_lr_at(&r->sched, r->step + 1); // step k uses lr(k), k from 1
    if (r->mp && weft_mp_owns_step(r)) {
        if ((st = weft_mp_step(r, lr, found_inf))) return st;
    } else if (r->dist && weft_dist_run_owns_step(r)) {
        if ((st = weft_dist_run_step(r, lr))) return st;
    } else {
        weft_optim_set_lr(r->optim, lr);
        if (r->scaler && !r->mp) st = weft_grad_scaler_step(r->scaler, r->optim, NULL); // skips an overflowed step
        else if (!found_inf) st = weft_optim_step(r->optim);
        if (st) return st;
    }
    if (r->mp && r->scaler && (st = weft_grad_scaler_update(r->scaler, found_inf))) return st;
    weft_optim_zero_grad(r->optim);
    r->step++;
    *loss_out = l;
    return WEFT_OK;
}

// ---- progress and metrics ----
static void progress(weft_run *r, double loss, double rate, bool force) {
    if (r->opts.quiet) return;
    FILE *f = r->opts.progress ? r->opts.progress : stderr;
    double t = now_s();
    bool tty = isatty(fileno(f));
    if (!force && t - r->last_print < (tty ? 0.2 : 10.0)) return;
    r->last_print = t;
    double left = r->total_steps > r->step && rate > 0 ? (double)(r->total_steps - r->step) / rate : 0;
    if (tty) {
        int width = 30, done = r->total_steps > 0 ? (int)((double)width * (double)r->step / (double)r->total_steps) : 0;
        char bar[64];
        for (int i = 0; i < width; i++) bar[i] = i < done ? '#' : '.';
        bar[width] = 0;
        fprintf(f, "\repoch %lld [%s] step %lld/%lld loss %.4f %.0f %s/s eta %.0fs   ", (long long)r->epoch + 1, bar,
                (long long)r->step, (long long)r->total_steps, loss, rate * r->items_per_step,
                r->cfg->net.dataset == WEFT_CFG_KJV ? "tok" : "samples", left);
    } else {
        fprintf(f, "epoch %lld step %lld/%lld loss %.4f %.0f %s/s eta %.0fs\n", (long long)r->epoch + 1,
                (long long)r->step, (long long)r->total_steps, loss, rate * r->items_per_step,
                r->cfg->net.dataset == WEFT_CFG_KJV ? "tokens" : "samples", left);
    }
    fflush(f);
}

static weft_status log_metrics(weft_run *r, double loss, double eval_loss, double eval_acc) {
    if (r->csv) {
        double row[5] = {(double)r->step, (double)r->epoch, loss, eval_loss, eval_acc};
        weft_status st = weft_csv_log(r->csv, row);
        if (st) return st;
    }
    if (r->tb) {
        if (!isnan(loss)) weft_tb_scalar(r->tb, "train/loss", r->step, loss);
        weft_tb_scalar(r->tb, "train/lr", r->step, weft_optim_get_lr(r->optim));
        const char *tag = r->cfg->net.dataset == WEFT_CFG_KJV ? "val/loss" : "test/loss";
        if (!isnan(eval_loss)) weft_tb_scalar(r->tb, tag, r->step, eval_loss);
        if (!isnan(eval_acc)) weft_tb_scalar(r->tb, "test/acc", r->step, eval_acc);
    }
    return WEFT_OK;
}

static weft_status evaluate_and_log(weft_run *r, double train_loss, weft_train_result *out) {
    double l, a;
    weft_status st = weft_run_evaluate(r, &l, &a);
    if (st) return st;
    if (r->cfg->net.dataset == WEFT_CFG_KJV) out->val_loss = l;
    else {
        out->test_loss = l;
        out->test_acc = a;
    }
    if (!r->opts.quiet) {
        FILE *f = r->opts.progress ? r->opts.progress : stderr;
        if (isatty(fileno(f))) fputc('\n', f);
        if (r->cfg->net.dataset == WEFT_CFG_KJV)
            fprintf(f, "step %lld: train loss %.4f, val loss %.4f\n", (long long)r->step, train_loss, l);
        else if (r->steps_per_epoch > 0 && r->step % r->steps_per_epoch == 0)
            fprintf(f, "epoch %lld: train loss %.4f, test loss %.4f, test accuracy %.2f%%\n", (long long)r->epoch,
                    train_loss, l, 100 * a);
        else
            fprintf(f, "step %lld (epoch %lld): train loss %.4f, test loss %.4f, test accuracy %.2f%%\n",
                    (long long)r->step, (long long)r->epoch + 1, train_loss, l, 100 * a);
        fflush(f);
    }
    return log_metrics(r, train_loss, l, r->cfg->net.dataset == WEFT_CFG_KJV ? NAN : a);
}

static weft_status checkpoint(weft_run *r) {
    if (!r->opts.ckpt_dir) return WEFT_OK;
    if (r->dist) return weft_dist_run_save(r);
    weft_status st = weft_run_save(r);
    if (st) return st;
    return weft_ckpt_keep_last(r->opts.ckpt_dir, r->opts.keep_last > 0 ? r->opts.keep_last : 3);
}

weft_status weft_train(const weft_model_cfg *cfg, const weft_train_opts *opts, weft_train_result *out) {
    if (!cfg || !out) return weft_error(WEFT_ERR_ARG, "train: NULL argument");
    weft_run run = {0}, *r = &run;
    r->cfg = cfg;
    if (opts) r->opts = *opts;
    const weft_net_cfg *n = &cfg->net;
    memset(out, 0, sizeof *out);
    out->language_model = n->dataset == WEFT_CFG_KJV;
    out->test_loss = out->test_acc = out->val_loss = out->train_loss = NAN;
    weft_status st = weft_dist_run_init(r);
    if (!st) st = run_device(r); // a bad --device or precision fails before the data is read
    if (!st) st = run_precision(r);
    if (!st) st = weft_run_load_data(r);
    int64_t steps_per_epoch = 0;
    if (!st) {
        if (n->dataset == WEFT_CFG_FMNIST) {
            weft_loader_opts lo = weft_loader_default_opts();
            lo.batch_size = n->batch;
            lo.shuffle = n->shuffle;
            lo.seed = n->seed;
            lo.prefetch = 4;
            weft_dist_run_loader(r, &lo);
            r->loader = weft_loader_create(r->train->inputs, r->train->labels, &lo);
            if (!r->loader) st = weft_last_status();
            else steps_per_epoch = weft_loader_batches_per_epoch(r->loader);
            r->items_per_step = (double)n->batch; // per rank in a distributed run
        } else {
            steps_per_epoch = weft_tensor_numel(r->train_tokens) / (n->batch * n->context);
            if (steps_per_epoch < 1) steps_per_epoch = 1;
            r->items_per_step = (double)(n->batch * n->context);
        }
        r->steps_per_epoch = steps_per_epoch;
        r->total_steps = n->epochs * steps_per_epoch;
        if (n->steps > 0 && n->steps < r->total_steps) r->total_steps = n->steps;
    }
    if (!st) st = weft_run_build(r, true);
    if (!st && r->dist) st = weft_dist_run_attach(r);
    if (!st && r->opts.graph) st = weft_graph_train_check(r); // fail before any data is read for training
    if (!st && r->opts.resume && r->opts.ckpt_dir) st = r->dist ? weft_dist_run_resume(r) : weft_run_resume(r);
    if (!st && r->opts.log_dir) {
        st = weft_mkdirs(r->opts.log_dir);
        char path[1024];
        snprintf(path, sizeof path, "%s/metrics.csv", r->opts.log_dir);
        const char *cols[] = {"step", "epoch", "train_loss", n->dataset == WEFT_CFG_KJV ? "val_loss" : "test_loss",
                              "test_acc"};
        if (!st) r->csv = weft_csv_open(path, 5, cols, r->step > 0);
        if (!st && !r->csv) st = weft_last_status();
        if (!st) r->tb = weft_tb_open(r->opts.log_dir);
        if (!st && !r->tb) st = weft_last_status();
    }
    int64_t ckpt_every = r->opts.ckpt_every > 0 ? r->opts.ckpt_every : n->ckpt_every;
    int64_t eval_every = n->eval_every, log_every = n->log_every > 0 ? n->log_every : 50;
    double t0 = now_s(), aside = 0, window_loss = 0, window_n = 0, train_loss = NAN;
    int64_t step0 = r->step;
    r->last_print = 0;
    weft_module_set_training(r->net, true);
    if (!st && r->dist && weft_dist_run_is_server(r)) st = weft_dist_run_serve(r); // a parameter server trains nothing
    while (!st && !(r->dist && weft_dist_run_is_server(r)) && r->step < r->total_steps) {
        weft_tensor *x = NULL, *y = NULL;
        if (n->dataset == WEFT_CFG_FMNIST) {
            int got = weft_loader_next(r->loader, &x, &y);
            if (got < 0) {
                st = (weft_status)got;
                break;
            }
            if (got == 0) continue; // the loader's end-of-epoch mark; epochs are counted in steps below
        } else {
            st = weft_lm_batch(r->train_tokens, n->batch, n->context, r->dist ? weft_dist_run_lm_seed(r) : n->seed,
                               (uint64_t)r->step, &x, &y);
        }
        double l = 0;
        if (!st) st = train_step(r, x, y, &l);
        weft_tensor_free(x);
        weft_tensor_free(y);
        if (st) break;
        if (r->dist) weft_dist_run_after_step(r);
        window_loss += l;
        window_n += 1;
        train_loss = window_loss / window_n;
        double el = now_s() - t0;
        progress(r, l, el - aside > 0 ? (double)(r->step - step0) / (el - aside) : 0, false);
        if (r->step % log_every == 0) {
            st = log_metrics(r, train_loss, NAN, NAN);
            window_loss = window_n = 0;
        }
        bool epoch_end = r->step % steps_per_epoch == 0, last = r->step >= r->total_steps;
        if (epoch_end) r->epoch++;
        // Evaluate at epoch ends (or every eval_every steps) and after the last step.
        bool eval_now = last || (eval_every > 0 ? r->step % eval_every == 0 : epoch_end);
        double t_aside = now_s(); // evaluation and checkpoints do not count as training time
        if (!st && eval_now && (!r->dist || weft_dist_run_evaluates(r))) st = evaluate_and_log(r, train_loss, out);
        bool ckpt_now = last || (ckpt_every > 0 ? r->step % ckpt_every == 0 : epoch_end);
        if (!st && ckpt_now) st = checkpoint(r);
        aside += now_s() - t_aside;
    }
    double el = now_s() - t0;
    out->steps = r->step;
    out->epochs = r->epoch;
    out->seconds = el;
    out->train_loss = train_loss;
    double rate = el - aside > 0 ? (double)(r->step - step0) * r->items_per_step / (el - aside) : 0;
    if (out->language_model) out->tokens_per_s = rate;
    else out->samples_per_s = rate;
    if (!st && r->dist) {
        bool server = weft_dist_run_is_server(r);
        st = weft_dist_run_finish(r, server ? 0 : (double)(r->step - step0) * r->items_per_step, server ? 0 : el - aside, out);
    }
    out->printer = r->printer;
    out->collective_error = r->collective_error;
    if (!r->opts.quiet) {
        FILE *f = r->opts.progress ? r->opts.progress : stderr;
        if (isatty(fileno(f))) fputc('\n', f);
    }
    weft_run_free(r);
    return st;
}

void weft_train_print_final(FILE *f, const weft_train_result *r) {
    char dist[128] = ""; // distributed runs: ranks=N, and the parameter server's consistency model
    if (r->ranks > 0) {
        int k = snprintf(dist, sizeof dist, " ranks=%d", r->ranks);
        if (r->dist == WEFT_TRAIN_DIST_PS) {
            const char *c = r->consistency == WEFT_TRAIN_BSP ? "bsp" : r->consistency == WEFT_TRAIN_ASP ? "asp" : "ssp";
            k += snprintf(dist + k, sizeof dist - (size_t)k, " consistency=%s", c);
            if (r->consistency == WEFT_TRAIN_SSP) k += snprintf(dist + k, sizeof dist - (size_t)k, ":%d", r->staleness);
            if (r->backup > 0) k += snprintf(dist + k, sizeof dist - (size_t)k, " backup=%d", r->backup);
        }
        if (r->tp > 0) // model parallel: the layout
            snprintf(dist + k, sizeof dist - (size_t)k, " tp=%d pp=%d dp=%d zero=%d", r->tp, r->pp, r->dp, r->zero);
    }
    if (r->language_model)
        fprintf(f, "final: val_loss=%.4f train_loss=%.4f tokens_per_s=%.0f steps=%lld seconds=%.1f%s\n", r->val_loss,
                r->train_loss, r->tokens_per_s, (long long)r->steps, r->seconds, dist);
    else
        fprintf(f, "final: test_acc=%.4f test_loss=%.4f train_loss=%.4f samples_per_s=%.0f steps=%lld seconds=%.1f%s\n",
                r->test_acc, r->test_loss, r->train_loss, r->samples_per_s, (long long)r->steps, r->seconds, dist);
    fflush(f);
}
