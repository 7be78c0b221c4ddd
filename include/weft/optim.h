// weft/optim.h — optimisers, gradient clipping, learning-rate schedules.
//
// An optimiser updates a fixed list of named parameters (leaf tensors, f32 or
// f64, contiguous, on any device) in place from their .grad, with the update
// equations and defaults of PyTorch 1.13 (torch.optim.*). The update is not
// recorded by autograd. A parameter without a gradient is skipped, as in
// PyTorch (its per-parameter step count does not advance either). Each
// parameter's update is one fused op of the op table, run on the parameter's
// device (the CPU's results do not depend on the thread count); graph mode
// (weft train --graph) records the same op, so both give the same bits.
// Alike parameters (contiguous, one device, dtype and step count) share one
// update_multi op that runs that update for each of them (on CUDA, Adam as
// multi-tensor launches); WEFT_OPTIM_MULTI=0 runs them one by one.
//
//     weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_ADAMW);
//     o.lr = 3e-4;
//     weft_optim *opt = weft_optim_create(&o, n, params, names);
//     for (...) { loss = ...; weft_backward(loss, NULL, NULL);
//                 weft_clip_grad_norm(n, params, 1.0);
//                 weft_optim_set_lr(opt, weft_lr_at(&sched, weft_optim_step_count(opt) + 1));
//                 weft_optim_step(opt); weft_optim_zero_grad(opt); }
//
// Checkpoints: the optimiser's state is a list of (name, tensor) pairs named
// "<param name>.<state>", with PyTorch's state names:
//   sgd      momentum_buffer (momentum != 0)
//   adagrad  sum
//   rmsprop  square_avg, momentum_buffer (momentum > 0), grad_avg (centered)
//   adam(w)  exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad)
// and, for every kind, "<param name>.step": a 0-d int64 tensor counting the
// updates this parameter received. State tensors have the parameter's shape
// and dtype, live on its device and exist from creation (zeros, or
// initial_accumulator_value), so the list is fixed; the ".step" counters are
// host tensors whatever the device. Save them with the optimiser's step count; load them back
// with weft_optim_load_state and continue bit-identically.
#ifndef WEFT_OPTIM_H
#define WEFT_OPTIM_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum weft_optim_kind {
    WEFT_OPTIM_SGD = 0,
    WEFT_OPTIM_ADAGRAD,
    WEFT_OPTIM_RMSPROP,
    WEFT_OPTIM_ADAM,
    WEFT_OPTIM_ADAMW,
    WEFT_OPTIM_NUM_KINDS
} weft_optim_kind;

// Hyper-parameters. Start from weft_optim_defaults(kind) (PyTorch's defaults);
// fields a kind does not use are ignored.
typedef struct weft_optim_opts {
    weft_optim_kind kind;
    double lr;           // sgd 1e-3 (PyTorch has no default), adagrad 1e-2, rmsprop 1e-2, adam(w) 1e-3
    double weight_decay; // L2 added to the gradient; adamw: decoupled, p *= 1 - lr*wd (default 1e-2, others 0)
    double eps;          // adagrad 1e-10, rmsprop 1e-8, adam(w) 1e-8
    // sgd: buf = momentum*buf + (1-dampening)*g (buf = g on the first step)
    double momentum; // sgd and rmsprop, default 0
    double dampening;
    bool nesterov; // requires momentum > 0 and dampening == 0
    // adagrad: lr / (1 + (step-1)*lr_decay), sum starts at initial_accumulator_value
    double lr_decay;
    double initial_accumulator_value;
    // rmsprop: square_avg = alpha*square_avg + (1-alpha)*g^2 (default 0.99)
    double alpha;
    bool centered;
    // adam(w): betas (0.9, 0.999)
    double beta1, beta2;
    bool amsgrad;
} weft_optim_opts;

typedef struct weft_optim weft_optim;

// PyTorch 1.13's defaults for a kind.
weft_optim_opts weft_optim_defaults(weft_optim_kind kind);
// "sgd", "adagrad", "rmsprop", "adam", "adamw" (NULL for an unknown kind).
const char *weft_optim_kind_name(weft_optim_kind kind);
// Parse a name (case-insensitive) into *kind; WEFT_ERR_ARG for an unknown one.
weft_status weft_optim_kind_parse(const char *name, weft_optim_kind *kind);

// An optimiser over n parameters (takes a reference to each). names[i] is
// the parameter's dotted name (names may be NULL: "0", "1", ...); names must
// be unique. NULL with a message naming the optimiser for an empty list, a
// bad hyper-parameter (negative lr, beta >= 1, ...), a parameter that is not
// a contiguous f32/f64 leaf, or a parameter listed twice.
weft_optim *weft_optim_create(const weft_optim_opts *o, int n, weft_tensor *const *params,
                              const char *const *names);
void weft_optim_free(weft_optim *opt);

// One update of every parameter that has a gradient (one fused op each, or
// one update_multi for alike parameters, in place, on their device). Every gradient is checked first (dtype,
// shape, device), so a bad one leaves all parameters untouched.
weft_status weft_optim_step(weft_optim *opt);
// Drop every parameter's gradient (set_to_none).
void weft_optim_zero_grad(weft_optim *opt);

double weft_optim_get_lr(const weft_optim *opt);
void weft_optim_set_lr(weft_optim *opt, double lr);
weft_optim_kind weft_optim_get_kind(const weft_optim *opt);
const weft_optim_opts *weft_optim_get_opts(const weft_optim *opt);
int weft_optim_param_count(const weft_optim *opt);
weft_tensor *weft_optim_param_at(const weft_optim *opt, int i); // borrowed; NULL when out of range
// Number of weft_optim_step calls so far (saved in checkpoints).
int64_t weft_optim_step_count(const weft_optim *opt);
void weft_optim_set_step_count(weft_optim *opt, int64_t steps);

// ---- state for checkpoints ----
int weft_optim_state_count(const weft_optim *opt);
// The i-th state tensor (borrowed; writes to it change the optimiser) and its
// name into name[0..name_len) (may be NULL). NULL when i is out of range.
weft_tensor *weft_optim_state_at(const weft_optim *opt, int i, char *name, size_t name_len);
// A state tensor by full name ("fc1.weight.exp_avg"), borrowed; NULL if none.
weft_tensor *weft_optim_state_find(const weft_optim *opt, const char *name);
// Copy value into the state tensor called name (shapes must agree; dtypes are converted).
weft_status weft_optim_state_set(weft_optim *opt, const char *name, const weft_tensor *value);
// Load every state tensor: lookup(name, user) returns the saved tensor for a
// name (borrowed) or NULL when the checkpoint lacks it. All are checked first
// (missing -> WEFT_ERR_FORMAT, shape mismatch -> WEFT_ERR_SHAPE, the message
// names the tensor); nothing is changed unless all are present and fit.
typedef const weft_tensor *(*weft_optim_lookup_fn)(const char *name, void *user);
weft_status weft_optim_load_state(weft_optim *opt, weft_optim_lookup_fn lookup, void *user);

// ---- loss scaling for f16 mixed precision (torch.cuda.amp.GradScaler) ----
// f16 gradients underflow below 6e-8: the loss is multiplied by a scale
// before backward, and the step divides the gradients by it again. A step
// whose gradients hold Inf/NaN is skipped and the scale is multiplied by
// backoff; after growth_interval good steps in a row it is multiplied by
// growth. Usage per step:
//   weft_tensor *sl = weft_grad_scaler_scale(gs, loss);
//   weft_backward(sl, NULL, NULL);
//   weft_grad_scaler_unscale(gs, opt);         // optional: before clipping
//   weft_clip_grad_norm(n, params, 1.0);       // (overflowed: an Inf/NaN norm, and the step skips)
//   weft_grad_scaler_step(gs, opt, &stepped);  // unscale unless done, check, step or skip, update
// Unscaling and the check run on the gradients' devices, with one number
// read back per call (their sum of squares in f64), whatever the count.
typedef struct weft_grad_scaler weft_grad_scaler;
// Zero arguments take PyTorch's defaults: 65536, 2.0, 0.5, 2000.
weft_grad_scaler *weft_grad_scaler_create(double init_scale, double growth, double backoff, int growth_interval);
void weft_grad_scaler_free(weft_grad_scaler *gs);
weft_tensor *weft_grad_scaler_scale(weft_grad_scaler *gs, weft_tensor *loss); // loss * scale (new tensor)
// PyTorch's scaler.unscale_(opt): divides every gradient of opt's parameters
// (f32/f64) by the scale, in place, and notes whether all of them are finite
// (their f64 sum of squares: f64 gradients above about 1e154 read as
// overflowed). Once between steps: a second call is WEFT_ERR_STATE.
weft_status weft_grad_scaler_unscale(weft_grad_scaler *gs, weft_optim *opt);
// Unscales (unless weft_grad_scaler_unscale did), steps opt unless a gradient
// is not finite, and updates the scale. *stepped (may be NULL) says whether
// opt stepped. Gradients are left unscaled either way.
weft_status weft_grad_scaler_step(weft_grad_scaler *gs, weft_optim *opt, bool *stepped);
// The scale's update alone (PyTorch's scaler.update()), for a caller that
// divided and checked the gradients itself, as model parallelism does (its
// check spans processes) with weft_grad_scale: found_inf, or an overflow that
// weft_grad_scaler_unscale found this step, backs the scale off; anything
// else counts a good step. It also ends the step for weft_grad_scaler_unscale.
weft_status weft_grad_scaler_update(weft_grad_scaler *gs, bool found_inf);
double weft_grad_scaler_get_scale(const weft_grad_scaler *gs);
// What a checkpoint keeps so that a resumed run scales as the uninterrupted
// one would (PyTorch's GradScaler.state_dict): the current scale and the
// growth tracker, the number of good steps in a row since the scale last
// changed. set_state checks scale > 0 (finite) and good >= 0; growth,
// backoff and the interval stay the scaler's own.
void weft_grad_scaler_get_state(const weft_grad_scaler *gs, double *scale, int64_t *good);
weft_status weft_grad_scaler_set_state(weft_grad_scaler *gs, double scale, int64_t good);

// ---- gradient clipping ----
// torch.nn.utils.clip_grad_norm_: the L2 norm over all gradients of params
// (parameters without a gradient are skipped); when above max_norm, every
// gradient is scaled in place by max_norm / (norm + 1e-6). Returns the norm
// before clipping (0 when no parameter has a gradient; NaN/Inf gradients give
// a NaN/Inf norm: a NaN one leaves the gradients alone, an infinite one scales
// them by 0, as PyTorch's does), or -1 with an error for bad arguments.
// Gradients may be on any device: each one's sum of squares (f64) is computed
// and summed there in parameter order, the norm is read back once, and the
// scaling runs there. Non-contiguous gradients are replaced by contiguous
// copies (then scaled in place).
double weft_clip_grad_norm(int n, weft_tensor *const *params, double max_norm);
// Its two halves, for a norm over several processes (model parallelism: sum
// the ranks' sums of squares, then scale): the sum of squares of params'
// gradients (f64, on their devices, read back once), and every gradient
// scaled in place by coef.
weft_status weft_grad_sum_squares(int n, weft_tensor *const *params, double *sum);
weft_status weft_grad_scale(int n, weft_tensor *const *params, double coef);

// ---- learning-rate schedules ----
// Every kind starts with warmup_steps of linear warm-up (0: none), and then
// counts s = step - warmup_steps:
typedef enum weft_lr_kind {
    WEFT_LR_CONSTANT = 0, // lr = base_lr
    WEFT_LR_STEP,         // lr = base_lr * gamma^floor(s / step_size)
    WEFT_LR_COSINE,       // cosine down to min_lr at total_steps (see weft_lr_at)
} weft_lr_kind;

typedef struct weft_lr_schedule {
    weft_lr_kind kind;
    double base_lr;
    int64_t step_size;                 // step
    double gamma;                      // step
    int64_t warmup_steps, total_steps; // every kind; total: cosine
    double min_lr;                     // cosine
} weft_lr_schedule;

// The learning rate at `step` (>= 0; callers usually pass the 1-based number
// of the update about to be made):
//   step <  warmup:          base * step / warmup
// then constant, step (above), or cosine:
//   warmup <= step < total:  min + (base - min) * (1 + cos(pi * (step - warmup) / (total - warmup))) / 2
//   step >= total:           min
double weft_lr_at(const weft_lr_schedule *s, int64_t step);
// WEFT_OK when the schedule's fields make sense (step_size > 0, 0 <= warmup <= total, ...).
weft_status weft_lr_schedule_check(const weft_lr_schedule *s);

#ifdef __cplusplus
}
#endif
#endif
