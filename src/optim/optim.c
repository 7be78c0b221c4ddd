// Optimisers (SGD, AdaGrad, RMSProp, Adam, AdamW) with PyTorch 1.13's
// equations, gradient clipping by global norm, learning-rate schedules, and
// the optimiser state as named tensors for checkpoints.
//
// One step for every device: each parameter's update is one fused op of the
// op table (src/ops/def_optim.c), described once in update.c and run in
// place with weft_op_apply_into, so the dispatcher picks the kernel of the
// parameter's device (the CPU's loops, CUDA's kernels) and graph mode
// (src/train/graph_train.c) records the very same op. Nothing is recorded by
// autograd, and one step makes one pass over each parameter and its state.
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/optim.h"
#include "optim_impl.h"

extern weft_op_def weft_op_grad_sumsq, weft_op_grad_scale, weft_op_update_multi;

// Per-parameter state: the update op's state tensors, shaped like the
// parameter and on its device (slots 0..n_state-1, in the op's input order),
// plus a 0-d int64 step count on the host (slot 3). Which slots a kind uses
// is fixed at creation.
enum { N_SLOTS = WEFT_OPTIM_MAX_STATE + 1, SLOT_STEP = WEFT_OPTIM_MAX_STATE };

typedef struct oparam {
    weft_tensor *param; // a reference
    char *name;
    weft_tensor *slot[N_SLOTS]; // NULL when the kind does not use the slot
} oparam;

struct weft_optim {
    weft_optim_opts o;
    weft_optim_update u; // the op, attrs, state and host scalars of every parameter's update
    const char *kind;    // "adam", ... for messages
    int n;
    oparam *p;
    const char *slot_name[N_SLOTS]; // NULL: unused
    int n_states;
    int *state_index; // (n_states, 2): param, slot
    int64_t steps;
};

static const char *const kind_names[WEFT_OPTIM_NUM_KINDS] = {"sgd", "adagrad", "rmsprop", "adam", "adamw"};

const char *weft_optim_kind_name(weft_optim_kind k) {
    return (int)k >= 0 && k < WEFT_OPTIM_NUM_KINDS ? kind_names[k] : NULL;
}

weft_status weft_optim_kind_parse(const char *name, weft_optim_kind *kind) {
    if (!name || !kind) return weft_error(WEFT_ERR_ARG, "optim: NULL optimiser name");
    for (int k = 0; k < WEFT_OPTIM_NUM_KINDS; k++) {
        const char *a = kind_names[k], *b = name;
        while (*a && tolower((unsigned char)*b) == *a) a++, b++;
        if (!*a && !*b) {
            *kind = (weft_optim_kind)k;
            return WEFT_OK;
        }
    }
    return weft_error(WEFT_ERR_ARG, "optim: unknown optimiser '%s' (sgd, adagrad, rmsprop, adam, adamw)", name);
}

weft_optim_opts weft_optim_defaults(weft_optim_kind kind) {
    weft_optim_opts o = {.kind = kind, .beta1 = 0.9, .beta2 = 0.999, .alpha = 0.99};
    switch (kind) {
    case WEFT_OPTIM_SGD: o.lr = 1e-3; break; // PyTorch requires an lr; this one is weft's choice
    case WEFT_OPTIM_ADAGRAD: o.lr = 1e-2, o.eps = 1e-10; break;
    case WEFT_OPTIM_RMSPROP: o.lr = 1e-2, o.eps = 1e-8; break;
    case WEFT_OPTIM_ADAM: o.lr = 1e-3, o.eps = 1e-8; break;
    case WEFT_OPTIM_ADAMW: o.lr = 1e-3, o.eps = 1e-8, o.weight_decay = 1e-2; break;
    default: break;
    }
    return o;
}

// ---- validation ----
static bool nonneg(double x) { return x >= 0 && isfinite(x); }

static weft_status check_opts(const weft_optim_opts *o, const char *k) {
#define BAD(...) return weft_error(WEFT_ERR_ARG, __VA_ARGS__)
    if (!nonneg(o->lr)) BAD("%s: invalid learning rate %g (need lr >= 0)", k, o->lr);
    if (!nonneg(o->weight_decay)) BAD("%s: invalid weight_decay %g (need >= 0)", k, o->weight_decay);
    switch (o->kind) {
    case WEFT_OPTIM_SGD:
        if (!nonneg(o->momentum)) BAD("%s: invalid momentum %g (need >= 0)", k, o->momentum);
        if (!isfinite(o->dampening)) BAD("%s: invalid dampening %g", k, o->dampening);
        if (o->nesterov && (o->momentum <= 0 || o->dampening != 0))
            BAD("%s: Nesterov momentum requires a momentum and zero dampening", k);
        break;
    case WEFT_OPTIM_ADAGRAD:
        if (!nonneg(o->lr_decay)) BAD("%s: invalid lr_decay %g (need >= 0)", k, o->lr_decay);
        if (!nonneg(o->initial_accumulator_value))
            BAD("%s: invalid initial_accumulator_value %g (need >= 0)", k, o->initial_accumulator_value);
        if (!nonneg(o->eps)) BAD("%s: invalid eps %g (need >= 0)", k, o->eps);
        break;
    case WEFT_OPTIM_RMSPROP:
        if (!nonneg(o->eps)) BAD("%s: invalid eps %g (need >= 0)", k, o->eps);
        if (!nonneg(o->momentum)) BAD("%s: invalid momentum %g (need >= 0)", k, o->momentum);
        if (!(o->alpha >= 0 && o->alpha <= 1)) BAD("%s: invalid alpha %g (need 0 <= alpha <= 1)", k, o->alpha);
        break;
    case WEFT_OPTIM_ADAM:
    case WEFT_OPTIM_ADAMW:
        if (!nonneg(o->eps)) BAD("%s: invalid eps %g (need >= 0)", k, o->eps);
        if (!(o->beta1 >= 0 && o->beta1 < 1)) BAD("%s: invalid beta1 %g (need 0 <= beta1 < 1)", k, o->beta1);
        if (!(o->beta2 >= 0 && o->beta2 < 1)) BAD("%s: invalid beta2 %g (need 0 <= beta2 < 1)", k, o->beta2);
        break;
    default: BAD("optim: unknown optimiser kind %d", (int)o->kind);
    }
#undef BAD
    return WEFT_OK;
}

// ---- creation ----
static void set_slots(weft_optim *opt) {
    weft_optim_update_of(&opt->o, &opt->u);
    for (int s = 0; s < opt->u.n_state; s++) opt->slot_name[s] = opt->u.state[s];
    opt->slot_name[SLOT_STEP] = "step";
}

weft_optim *weft_optim_create(const weft_optim_opts *o, int n, weft_tensor *const *params,
                              const char *const *names) {
    if (!o) return weft_error_null(WEFT_ERR_ARG, "optim_create: NULL options");
    const char *k = weft_optim_kind_name(o->kind);
    if (!k) return weft_error_null(WEFT_ERR_ARG, "optim_create: unknown optimiser kind %d", (int)o->kind);
    if (n <= 0 || !params) return weft_error_null(WEFT_ERR_ARG, "%s: empty parameter list", k);
    if (check_opts(o, k) != WEFT_OK) return NULL;
    for (int i = 0; i < n; i++) {
        const weft_tensor *t = params[i];
        if (!t) return weft_error_null(WEFT_ERR_ARG, "%s: parameter %d is NULL", k, i);
        const char *nm = names ? names[i] : "";
        if (names && (!names[i] || !names[i][0]))
            return weft_error_null(WEFT_ERR_ARG, "%s: parameter %d has no name", k, i);
        if (t->grad_fn)
            return weft_error_null(WEFT_ERR_ARG, "%s: parameter %d '%s' is not a leaf (output of %s)", k, i, nm,
                                   weft_tensor_grad_fn_name(t));
        if (t->dtype != WEFT_F32 && t->dtype != WEFT_F64)
            return weft_error_null(WEFT_ERR_DTYPE, "%s: parameter %d '%s' is %s (need f32 or f64)", k, i, nm,
                                   weft_dtype_name((weft_dtype)t->dtype));
        if (!weft_tensor_is_contiguous(t))
            return weft_error_null(WEFT_ERR_ARG, "%s: parameter %d '%s' is not contiguous", k, i, nm);
        for (int j = 0; j < i; j++) {
            if (params[j] == t) return weft_error_null(WEFT_ERR_ARG, "%s: parameter %d '%s' is listed twice", k, i, nm);
            if (names && strcmp(names[j], names[i]) == 0)
                return weft_error_null(WEFT_ERR_ARG, "%s: two parameters are named '%s'", k, nm);
        }
    }
    weft_optim *opt = calloc(1, sizeof *opt);
    if (!opt || !(opt->p = calloc((size_t)n, sizeof(oparam)))) {
        free(opt);
        return weft_error_null(WEFT_ERR_OOM, "%s: out of memory", k);
    }
    opt->o = *o;
    opt->kind = k;
    opt->n = n;
    set_slots(opt);
    int used = 0;
    for (int s = 0; s < N_SLOTS; s++) used += opt->slot_name[s] != NULL;
    opt->n_states = used * n;
    opt->state_index = malloc(sizeof(int) * 2 * (size_t)opt->n_states);
    bool ok = opt->state_index != NULL;
    int si = 0;
    for (int i = 0; ok && i < n; i++) {
        oparam *p = &opt->p[i];
        p->param = weft_tensor_ref(params[i]);
        char buf[24];
        if (!names) snprintf(buf, sizeof buf, "%d", i);
        p->name = strdup(names ? names[i] : buf);
        ok = p->name != NULL;
        for (int s = 0; ok && s < N_SLOTS; s++) {
            if (!opt->slot_name[s]) continue;
            if (s == SLOT_STEP) p->slot[s] = weft_tensor_full_on(0, NULL, WEFT_I64, 0, WEFT_DEVICE_CPU); // host
            else // beside its parameter (AdaGrad's sum starts at initial_accumulator_value, the rest at 0)
                p->slot[s] = weft_tensor_full_on(p->param->ndim, p->param->sizes, (weft_dtype)p->param->dtype,
                                                 opt->u.state_init, p->param->device);
            ok = p->slot[s] != NULL;
            weft_tensor_memory_tag(p->slot[s], WEFT_MEM_OPTIMIZER);
            opt->state_index[2 * si] = i, opt->state_index[2 * si + 1] = s;
            si++;
        }
    }
    if (!ok) {
        weft_optim_free(opt);
        return weft_error_null(WEFT_ERR_OOM, "%s: out of memory for the optimiser state", k);
    }
    return opt;
}

void weft_optim_free(weft_optim *opt) {
    if (!opt) return;
    for (int i = 0; opt->p && i < opt->n; i++) {
        weft_tensor_free(opt->p[i].param);
        free(opt->p[i].name);
        for (int s = 0; s < N_SLOTS; s++) weft_tensor_free(opt->p[i].slot[s]);
    }
    free(opt->p);
    free(opt->state_index);
    free(opt);
}

// ---- the update ----
// The host scalars of one step number on one device: every value of
// weft_optim_scalar_values in one f64 tensor (one copy to an accelerator per
// step, not one per parameter and scalar; the copy is queued, not waited
// for) and a 0-d view of each, which the update ops take as inputs.
typedef struct scalar_pack {
    int64_t step;
    weft_device dev;
    weft_tensor *v[WEFT_OPTIM_NUM_SC];
} scalar_pack;
enum { MAX_PACKS = 8 }; // parameters of one step share a step number, save those that missed updates

static void packs_free(scalar_pack *pk, int n) {
    for (int i = 0; i < n; i++)
        for (int k = 0; k < WEFT_OPTIM_NUM_SC; k++) weft_tensor_free(pk[i].v[k]);
}

// The pack for (step, dev) among pk[0..*n), made when missing; NULL + error.
static const scalar_pack *pack_for(const weft_optim *opt, scalar_pack *pk, int *n, int64_t step, weft_device dev) {
    for (int i = 0; i < *n; i++)
        if (pk[i].step == step && weft_device_equal(pk[i].dev, dev)) return &pk[i];
    if (*n == MAX_PACKS) { // no longer needed: each parameter takes its pack's views for one op only
        packs_free(pk, *n);
        *n = 0;
    }
    int64_t ns = WEFT_OPTIM_NUM_SC;
    weft_tensor *h = weft_tensor_empty_on(1, &ns, WEFT_F64, WEFT_DEVICE_CPU), *all = NULL;
    if (h) {
        weft_optim_scalar_values(&opt->o, step, WEFT_PTR(double, h));
        all = dev.type == WEFT_CPU ? weft_tensor_ref(h) : weft_tensor_to(h, dev);
    }
    weft_tensor_free(h);
    if (!all) return NULL;
    scalar_pack *p = &pk[*n];
    *p = (scalar_pack){.step = step, .dev = dev};
    bool ok = true;
    for (int k = 0; k < WEFT_OPTIM_NUM_SC; k++)
        ok &= (p->v[k] = weft_tensor_alias(all, 0, NULL, NULL, all->offset + k)) != NULL;
    weft_tensor_free(all);
    if (!ok) {
        packs_free(p, 1);
        return weft_error_null(WEFT_ERR_OOM, "%s: out of memory", opt->kind);
    }
    (*n)++;
    return p;
}

// op(p, state..., g, scalars...) -> (p, state...) in place, on p's device.
static weft_status update_one(const weft_optim *opt, oparam *p, weft_tensor *g, const scalar_pack *sc) {
    const weft_optim_update *u = &opt->u;
    weft_tensor *in[2 + WEFT_OPTIM_MAX_STATE + WEFT_OPTIM_MAX_SC], *out[1 + WEFT_OPTIM_MAX_STATE];
    int n = 0;
    out[0] = in[n++] = p->param;
    for (int k = 0; k < u->n_state; k++) out[1 + k] = in[n++] = p->slot[k];
    in[n++] = g;
    for (int k = 0; k < u->n_scalar; k++) in[n++] = sc->v[u->scalar[k]];
    return weft_op_apply_into(u->op, n, in, &u->attrs, out);
}

// ---- many parameters in one op (update_multi) ----
// Parameters whose update can join one update_multi call: gradient present,
// contiguous parameter, state and gradient, the same device, dtype and step
// number. The op runs each group exactly as update_one would (on CUDA, Adam
// as a few multi-tensor launches instead of one per parameter).
enum { MULTI_MAX = 128 }; // groups per call

static bool multi_on(void) {
    const char *e = getenv("WEFT_OPTIM_MULTI");
    return !e || strcmp(e, "0");
}

static bool multi_fits(const weft_optim *opt, const oparam *p) {
    const weft_tensor *t = p->param, *g = t->grad;
    if (!g || !weft_tensor_is_contiguous(t) || !weft_tensor_is_contiguous(g)) return false;
    for (int k = 0; k < opt->u.n_state; k++)
        if (!weft_tensor_is_contiguous(p->slot[k])) return false;
    return true;
}

static bool multi_same(const oparam *a, const oparam *b) {
    const weft_tensor *x = a->param, *y = b->param;
    return x->dtype == y->dtype && weft_device_equal(x->device, y->device) &&
           *WEFT_PTR(int64_t, a->slot[SLOT_STEP]) == *WEFT_PTR(int64_t, b->slot[SLOT_STEP]);
}

// update_multi over the parameters idx[0..n) (n >= 1, all multi_same as the first).
static weft_status update_many(const weft_optim *opt, const int *idx, int n, const scalar_pack *sc) {
    const weft_optim_update *u = &opt->u;
    int G = u->n_state + 2;
    weft_tensor **in = malloc(sizeof *in * (size_t)(n * G + WEFT_OPTIM_MAX_SC));
    if (!in) return weft_error(WEFT_ERR_OOM, "%s: out of memory", opt->kind);
    int m = 0;
    for (int i = 0; i < n; i++) {
        const oparam *p = &opt->p[idx[i]];
        in[m++] = p->param;
        for (int k = 0; k < u->n_state; k++) in[m++] = p->slot[k];
        in[m++] = p->param->grad;
    }
    for (int k = 0; k < u->n_scalar; k++) in[m++] = sc->v[u->scalar[k]];
    weft_attrs at = u->attrs;
    at.i[WEFT_UPDATE_MULTI_OP] = weft_optim_update_op_index(u->op);
    weft_status st = weft_op_apply_into(&weft_op_update_multi, m, in, &at, NULL);
    free(in);
    return st;
}

weft_status weft_optim_step(weft_optim *opt) {
    if (!opt) return weft_error(WEFT_ERR_ARG, "optim_step: NULL optimiser");
    // Check every gradient first, so a bad one leaves all parameters untouched.
    for (int i = 0; i < opt->n; i++) {
        const weft_tensor *t = opt->p[i].param, *g = t->grad;
        if (g && (g->dtype != t->dtype || !weft_shape_equal(g->ndim, g->sizes, t->ndim, t->sizes) ||
                  !weft_device_equal(g->device, t->device))) {
            char a[96], b[96];
            return weft_error(WEFT_ERR_SHAPE, "%s: gradient of '%s' is %s %s, expected %s %s", opt->kind,
                              opt->p[i].name, weft_dtype_name((weft_dtype)g->dtype), weft_tensor_shape_str(g, a, sizeof a),
                              weft_dtype_name((weft_dtype)t->dtype), weft_tensor_shape_str(t, b, sizeof b));
        }
    }
    scalar_pack packs[MAX_PACKS];
    int n_packs = 0;
    weft_status st = WEFT_OK;
    // First the parameters that share one update_multi call (in batches of alike ones), then the rest one by one.
    bool *done = calloc((size_t)opt->n, sizeof *done);
    int *idx = malloc(sizeof *idx * MULTI_MAX);
    if (!done || !idx) st = weft_error(WEFT_ERR_OOM, "%s: out of memory", opt->kind);
    bool multi = multi_on();
    for (int i = 0; i < opt->n && st == WEFT_OK && multi; i++) {
        if (done[i] || !multi_fits(opt, &opt->p[i])) continue;
        int n = 0;
        for (int j = i; j < opt->n && n < MULTI_MAX; j++)
            if (!done[j] && multi_fits(opt, &opt->p[j]) && multi_same(&opt->p[i], &opt->p[j])) idx[n++] = j;
        if (n < 2) continue; // one parameter: the single op
        oparam *p = &opt->p[i];
        const scalar_pack *sc = pack_for(opt, packs, &n_packs, *WEFT_PTR(int64_t, p->slot[SLOT_STEP]) + 1, p->param->device);
        st = sc ? update_many(opt, idx, n, sc) : weft_last_status();
        if (st != WEFT_OK) {
            st = weft_error(st, "%s: parameters '%s' and %d more: %s", opt->kind, p->name, n - 1, weft_last_error());
            break;
        }
        for (int k = 0; k < n; k++) {
            done[idx[k]] = true;
            ++*WEFT_PTR(int64_t, opt->p[idx[k]].slot[SLOT_STEP]);
        }
    }
    for (int i = 0; i < opt->n && st == WEFT_OK; i++) {
        oparam *p = &opt->p[i];
        weft_tensor *g = p->param->grad; // may be a strided view (a stolen gradient): the kernels read strides
        if (!g || done[i]) continue;     // as PyTorch: no gradient, no update, no step
        int64_t *step = WEFT_PTR(int64_t, p->slot[SLOT_STEP]); // on the host whatever the device
        const scalar_pack *sc = pack_for(opt, packs, &n_packs, *step + 1, p->param->device);
        st = sc ? update_one(opt, p, g, sc) : weft_last_status();
        if (st == WEFT_OK) ++*step; // this parameter's update count, 1 after its first update
        else st = weft_error(st, "%s: parameter '%s': %s", opt->kind, p->name, weft_last_error());
    }
    free(done);
    free(idx);
    packs_free(packs, n_packs);
    if (st == WEFT_OK) opt->steps++;
    return st;
}

void weft_optim_zero_grad(weft_optim *opt) {
    if (!opt) return;
    for (int i = 0; i < opt->n; i++) weft_tensor_zero_grad(opt->p[i].param);
}

double weft_optim_get_lr(const weft_optim *opt) { return opt ? opt->o.lr : NAN; }
void weft_optim_set_lr(weft_optim *opt, double lr) {
    if (opt) opt->o.lr = lr;
}
weft_optim_kind weft_optim_get_kind(const weft_optim *opt) { return opt ? opt->o.kind : WEFT_OPTIM_NUM_KINDS; }
const weft_optim_opts *weft_optim_get_opts(const weft_optim *opt) { return opt ? &opt->o : NULL; }
int weft_optim_param_count(const weft_optim *opt) { return opt ? opt->n : 0; }
weft_tensor *weft_optim_param_at(const weft_optim *opt, int i) {
    return opt && i >= 0 && i < opt->n ? opt->p[i].param : NULL;
}
int64_t weft_optim_step_count(const weft_optim *opt) { return opt ? opt->steps : 0; }
void weft_optim_set_step_count(weft_optim *opt, int64_t steps) {
    if (opt) opt->steps = steps;
}

// ---- state for checkpoints ----
int weft_optim_state_count(const weft_optim *opt) { return opt ? opt->n_states : 0; }

weft_tensor *weft_optim_state_at(const weft_optim *opt, int i, char *name, size_t name_len) {
    if (!opt || i < 0 || i >= opt->n_states) {
        if (name && name_len) name[0] = 0;
        return weft_error_null(WEFT_ERR_ARG, "optim_state_at: index %d out of range", i);
    }
    const oparam *p = &opt->p[opt->state_index[2 * i]];
    int s = opt->state_index[2 * i + 1];
    if (name && name_len) snprintf(name, name_len, "%s.%s", p->name, opt->slot_name[s]);
    return p->slot[s];
}

weft_tensor *weft_optim_state_find(const weft_optim *opt, const char *name) {
    if (!opt || !name) return NULL;
    for (int i = 0; i < opt->n_states; i++) {
        const oparam *p = &opt->p[opt->state_index[2 * i]];
        int s = opt->state_index[2 * i + 1];
        size_t l = strlen(p->name);
        // state names have no dots, so "<param>.<state>" splits one way only
        if (strncmp(name, p->name, l) == 0 && name[l] == '.' && strcmp(name + l + 1, opt->slot_name[s]) == 0)
            return p->slot[s];
    }
    return NULL;
}

static weft_status check_fits(const weft_optim *opt, const char *name, const weft_tensor *dst,
                              const weft_tensor *v) {
    if (!dst) return weft_error(WEFT_ERR_FORMAT, "%s: no optimiser state named '%s'", opt->kind, name);
    if (!v) return weft_error(WEFT_ERR_FORMAT, "%s: optimiser state '%s' is missing", opt->kind, name);
    if (!weft_shape_equal(dst->ndim, dst->sizes, v->ndim, v->sizes)) {
        char a[96], b[96];
        return weft_error(WEFT_ERR_SHAPE, "%s: optimiser state '%s' has shape %s, expected %s", opt->kind, name,
                          weft_tensor_shape_str(v, a, sizeof a), weft_tensor_shape_str(dst, b, sizeof b));
    }
    // Its values must mean the same in dst's dtype. Float state takes any
    // float dtype (float-to-float conversion is exact or rounds). The step
    // count (i64) takes integers, or floats holding whole numbers (PyTorch
    // keeps its step as a float tensor); either way in [0, 2^53], where the
    // step's scalars (bias corrections) are exact and step + 1 cannot overflow.
    weft_dtype dt = (weft_dtype)dst->dtype, vt = (weft_dtype)v->dtype;
    if (weft_dtype_is_float(dt) ? !weft_dtype_is_float(vt) : vt == WEFT_BOOL)
        return weft_error(WEFT_ERR_DTYPE, "%s: optimiser state '%s' is %s, expected %s", opt->kind, name,
                          weft_dtype_name(vt), weft_dtype_name(dt));
    if (weft_dtype_is_float(dt)) return WEFT_OK;
    int64_t n = v->numel;
    double *x = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (!x) return weft_error(WEFT_ERR_OOM, "%s: out of memory", opt->kind);
    weft_status st = weft_tensor_to_f64(v, x, n); // exact for floats; i64 past 2^53 rounds, still past it
    for (int64_t i = 0; i < n && st == WEFT_OK; i++)
        if (!(x[i] >= 0 && x[i] <= 0x1p53 && x[i] == floor(x[i])))
            st = weft_error(WEFT_ERR_FORMAT, "%s: optimiser state '%s' holds %g, not a count in [0, 2^53]", opt->kind,
                            name, x[i]);
    free(x);
    return st;
}

weft_status weft_optim_state_set(weft_optim *opt, const char *name, const weft_tensor *value) {
    if (!opt || !name) return weft_error(WEFT_ERR_ARG, "optim_state_set: NULL argument");
    weft_tensor *dst = weft_optim_state_find(opt, name);
    weft_status st = check_fits(opt, name, dst, value);
    return st != WEFT_OK ? st : weft_tensor_copy_(dst, value);
}

weft_status weft_optim_load_state(weft_optim *opt, weft_optim_lookup_fn lookup, void *user) {
    if (!opt || !lookup) return weft_error(WEFT_ERR_ARG, "optim_load_state: NULL argument");
    char name[512];
    for (int pass = 0; pass < 2; pass++) { // pass 0 checks everything, pass 1 copies
        for (int i = 0; i < opt->n_states; i++) {
            weft_tensor *dst = weft_optim_state_at(opt, i, name, sizeof name);
            const weft_tensor *v = lookup(name, user);
            weft_status st = pass == 0 ? check_fits(opt, name, dst, v) : weft_tensor_copy_(dst, v);
            if (st != WEFT_OK) return st;
        }
    }
    return WEFT_OK;
}

// ---- gradient clipping ----
// The norm is summed on the gradients' device: a 0-d f64 accumulator there
// takes every gradient's sum of squares in parameter order (grad_sumsq, in
// place) and is read back once; the scaling is one grad_scale op per
// gradient, in place. On the CPU this is bit-identical to summing on the host.
// Gradients on several devices: one accumulator each, added up on the host.
typedef struct dev_acc {
    weft_device dev;
    weft_tensor *acc;
} dev_acc;

// One grad_sumsq per device over all of its gradients (on CUDA a few launches: the norm in one pass).
static weft_status clip_sum(int n, weft_tensor *const *params, double *sum) {
    dev_acc *acc = calloc((size_t)n + 1, sizeof *acc);
    weft_tensor **in = malloc(sizeof *in * ((size_t)n + 1));
    if (!acc || !in) {
        free(acc), free(in);
        return weft_error(WEFT_ERR_OOM, "out of memory");
    }
    int na = 0;
    weft_status st = WEFT_OK;
    for (int i = 0; i < n && st == WEFT_OK; i++) { // the devices, in order of first use
        weft_tensor *g = params[i]->grad;
        if (!g) continue;
        int k = 0;
        while (k < na && !weft_device_equal(acc[k].dev, g->device)) k++;
        if (k == na && !(acc[na++] = (dev_acc){g->device, weft_tensor_full_on(0, NULL, WEFT_F64, 0, g->device)}).acc)
            st = weft_last_status();
    }
    for (int k = 0; k < na && st == WEFT_OK; k++) {
        int m = 0;
        in[m++] = acc[k].acc;
        for (int i = 0; i < n; i++)
            if (params[i]->grad && weft_device_equal(params[i]->grad->device, acc[k].dev)) in[m++] = params[i]->grad;
        st = weft_op_apply_into(&weft_op_grad_sumsq, m, in, NULL, &acc[k].acc);
    }
    free(in);
    *sum = 0;
    for (int k = 0; k < na && st == WEFT_OK; k++) { // the one read back to the host (per device)
        double v = 0;
        st = weft_tensor_to_f64(acc[k].acc, &v, 1);
        *sum += v;
    }
    for (int k = 0; k < na; k++) weft_tensor_free(acc[k].acc);
    free(acc);
    return st;
}

static weft_status clip_scale(int n, weft_tensor *const *params, double coef) {
    weft_tensor *c = NULL; // coef as a 0-d f64 tensor on the current gradient's device
    weft_status st = WEFT_OK;
    for (int i = 0; i < n && st == WEFT_OK; i++) {
        weft_tensor *g = params[i]->grad;
        if (!g) continue;
        if (!c || !weft_device_equal(c->device, g->device)) {
            weft_tensor_free(c);
            if (!(c = weft_tensor_full_on(0, NULL, WEFT_F64, coef, g->device))) return weft_last_status();
        }
        st = weft_op_apply_into(&weft_op_grad_scale, 2, (weft_tensor *[]){g, c}, NULL, &g);
    }
    weft_tensor_free(c);
    return st;
}

// The gradients clip_sum and clip_scale may run over: f32/f64, contiguous
// (a non-contiguous one is replaced by a contiguous copy, scaled in place later).
static weft_status clip_check(const char *what, int n, weft_tensor *const *params) {
    if (n < 0 || (n > 0 && !params)) return weft_error(WEFT_ERR_ARG, "%s: bad parameter list", what);
    for (int i = 0; i < n; i++) {
        weft_tensor *t = params[i], *g = t ? t->grad : NULL;
        if (!t) return weft_error(WEFT_ERR_ARG, "%s: parameter %d is NULL", what, i);
        if (!g) continue;
        if (g->dtype != WEFT_F32 && g->dtype != WEFT_F64)
            return weft_error(WEFT_ERR_DTYPE, "%s: gradient of parameter %d is %s (need f32 or f64)", what, i,
                              weft_dtype_name((weft_dtype)g->dtype));
        if (!weft_tensor_is_contiguous(g)) {
            weft_tensor *c = weft_tensor_contiguous(g);
            weft_status st = c ? weft_tensor_set_grad(t, c) : weft_last_status();
            weft_tensor_free(c);
            if (st) return st;
        }
    }
    return WEFT_OK;
}

weft_status weft_grad_sum_squares(int n, weft_tensor *const *params, double *sum) {
    if (!sum) return weft_error(WEFT_ERR_ARG, "grad_sum_squares: NULL result");
    *sum = 0;
    weft_status st = clip_check("grad_sum_squares", n, params);
    if (!st) st = clip_sum(n, params, sum);
    return st;
}

weft_status weft_grad_scale(int n, weft_tensor *const *params, double coef) {
    weft_status st = clip_check("grad_scale", n, params);
    if (!st && !isfinite(coef)) st = weft_error(WEFT_ERR_ARG, "grad_scale: coefficient %g is not finite", coef);
    if (!st) st = clip_scale(n, params, coef);
    return st;
}

double weft_clip_grad_norm(int n, weft_tensor *const *params, double max_norm) {
    if (!(max_norm >= 0)) {
        weft_error(WEFT_ERR_ARG, "clip_grad_norm: invalid max_norm %g (need >= 0)", max_norm);
        return -1;
    }
    double sum = 0;
    weft_status st = clip_check("clip_grad_norm", n, params);
    if (st == WEFT_OK) st = clip_sum(n, params, &sum);
    double norm = sqrt(sum);
    double coef = max_norm / (norm + 1e-6);
    // coef < 1 is false for a NaN norm: leave the gradients alone (the trainer checks the loss)
    if (st == WEFT_OK && coef < 1) st = clip_scale(n, params, coef);
    if (st != WEFT_OK) {
        if (strncmp(weft_last_error(), "clip_grad_norm", 14)) weft_error(st, "clip_grad_norm: %s", weft_last_error());
        return -1;
    }
    return norm;
}

// ---- learning-rate schedules ----
double weft_lr_at(const weft_lr_schedule *s, int64_t step) {
    if (!s) return NAN;
    if (step < 0) step = 0;
    // the linear warm-up comes first for every kind; the schedule counts its steps after it
    if (step < s->warmup_steps) return s->base_lr * (double)step / (double)s->warmup_steps;
    int64_t after = step - (s->warmup_steps > 0 ? s->warmup_steps : 0);
    switch (s->kind) {
    case WEFT_LR_STEP:
        if (s->step_size <= 0) return s->base_lr;
        return s->base_lr * pow(s->gamma, (double)(after / s->step_size));
    case WEFT_LR_COSINE:
        if (step >= s->total_steps) return s->min_lr;
        {
            double progress = (double)(step - s->warmup_steps) / (double)(s->total_steps - s->warmup_steps);
            return s->min_lr + (s->base_lr - s->min_lr) * 0.5 * (1 + cos(M_PI * progress));
        }
    default: return s->base_lr;
    }
}

weft_status weft_lr_schedule_check(const weft_lr_schedule *s) {
    if (!s) return weft_error(WEFT_ERR_ARG, "lr schedule: NULL");
    if (!nonneg(s->base_lr)) return weft_error(WEFT_ERR_ARG, "lr schedule: invalid base lr %g (need >= 0)", s->base_lr);
    if (s->warmup_steps < 0)
        return weft_error(WEFT_ERR_ARG, "lr schedule: warmup_steps %lld (need >= 0)", (long long)s->warmup_steps);
    switch (s->kind) {
    case WEFT_LR_CONSTANT: return WEFT_OK;
    case WEFT_LR_STEP:
        if (s->step_size <= 0)
            return weft_error(WEFT_ERR_ARG, "lr schedule step: step_size %lld (need > 0)", (long long)s->step_size);
        if (!nonneg(s->gamma)) return weft_error(WEFT_ERR_ARG, "lr schedule step: invalid gamma %g", s->gamma);
        return WEFT_OK;
    case WEFT_LR_COSINE:
        if (s->warmup_steps < 0 || s->total_steps <= 0 || s->total_steps < s->warmup_steps)
            return weft_error(WEFT_ERR_ARG, "lr schedule cosine: need 0 <= warmup_steps (%lld) <= total_steps (%lld), total > 0",
                              (long long)s->warmup_steps, (long long)s->total_steps);
        if (!nonneg(s->min_lr) || s->min_lr > s->base_lr)
            return weft_error(WEFT_ERR_ARG, "lr schedule cosine: invalid min_lr %g (need 0 <= min_lr <= base lr %g)",
                              s->min_lr, s->base_lr);
        return WEFT_OK;
    default: return weft_error(WEFT_ERR_ARG, "lr schedule: unknown kind %d", (int)s->kind);
    }
}
