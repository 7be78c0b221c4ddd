// The dispatcher: infer -> allocate -> kernel for (device, dtype) -> record.
#include <stdlib.h>
#include <string.h>

#include "../autograd/autograd_impl.h"
#include "../graph/trace_hook.h"
#include "elementwise.h"
#include "op.h"

static const weft_attrs k_zero_attrs;

// Arity, NULL inputs and one device for all inputs (returned in *dev).
static weft_status check_inputs(const weft_op_def *op, int n_in, weft_tensor *const *in, weft_device *dev) {
    if ((op->n_in >= 0 && n_in != op->n_in) || (op->n_in < 0 && n_in < 1))
        return weft_error(WEFT_ERR_ARG, "%s: expected %d inputs, got %d", op->name, op->n_in, n_in);
    for (int i = 0; i < n_in; i++)
        if (!in[i]) {
            weft_error_null_input(op->name);
            return weft_last_status();
        }
    *dev = in[0]->device;
    for (int i = 1; i < n_in; i++)
        if (!weft_device_equal(in[i]->device, *dev)) {
            char a[32], b[32];
            return weft_error(WEFT_ERR_DEVICE, "%s: inputs on different devices (%s and %s)", op->name,
                              weft_device_str(*dev, a, sizeof a), weft_device_str(in[i]->device, b, sizeof b));
        }
    return WEFT_OK;
}

// The start of weft_op_apply and weft_op_apply_into: inputs on one device,
// then the op's shape and dtype inference.
static weft_status check_and_infer(const weft_op_args *args, weft_device *dev, weft_out_meta *meta) {
    weft_status st = check_inputs(args->op, args->n_in, args->in, dev);
    return st != WEFT_OK ? st : args->op->infer(args, meta);
}

// The kernel for (device, dispatch input's dtype), or NULL with an error naming the op.
static const weft_kernel *find_kernel(const weft_op_def *op, weft_tensor *const *in, weft_device dev) {
    const weft_kernel *k = &op->kernel[dev.type];
    weft_dtype kdt = (weft_dtype)in[op->dispatch_in]->dtype;
    if (k->fn && (k->dtypes & WEFT_DT(kdt))) return k;
    char d[32];
    weft_error(WEFT_ERR_UNSUPPORTED, "%s: no kernel for device %s and dtype %s", op->name,
               weft_device_str(dev, d, sizeof d), weft_dtype_name(kdt));
    return NULL;
}

// ---- mixed precision (autocast) ----
static _Thread_local weft_dtype tl_autocast = WEFT_F32; // WEFT_F32: off

// The weight cast cache (torch.autocast's): inside a region, an f32 leaf that requires grad (a parameter) is
// cast down once, and every later op of the region that casts it reads that copy: a pipeline's micro-batches,
// gradient accumulation, a weight used twice. Leaving the region drops the copies, so the next region sees
// the optimiser's update. A copy made with grad mode off serves only ops run with it off (it has no
// autograd record). Not used while tracing a graph or building one symbolically: a graph casts its own
// variables at every run. WEFT_AUTOCAST_CACHE=0 turns it off (torch.autocast's cache_enabled=False).
// weft_autocast_cache_fill makes many copies ahead of their first use; each gets its autograd record at that
// first use, so the cast nodes stand in the graph where first-use casts would (the backward runs each right
// after the last op that read the copy: a weight's gradient, and DDP's hook, come as early as without the fill).
typedef struct cast_entry {
    weft_tensor *src, *lo; // references held: src cannot be freed and its address reused while cached
    bool grad;
    bool pending; // made by the fill with grad on: the autograd record comes at the first use
    bool used;    // read by an op of the region: a hint for the next region's fill
} cast_entry;
static _Thread_local cast_entry *tl_casts;
static _Thread_local int tl_n_casts, tl_cap_casts;
static _Thread_local bool tl_cache_off; // WEFT_AUTOCAST_CACHE=0, read when a region starts

// The sources whose copies the last region's ops read (addresses only, no references: a hint for
// weft_autocast_cache_fill, which casts only these; an address reused by another tensor costs at most one
// unused copy).
enum { HINT_MAX = 512 };
static _Thread_local const weft_tensor *tl_hint[HINT_MAX];
static _Thread_local int tl_n_hint;

static void cast_cache_clear(void) {
    if (tl_n_casts) tl_n_hint = 0;
    for (int i = 0; i < tl_n_casts; i++)
        if (tl_n_hint < HINT_MAX && tl_casts[i].used && (tl_n_hint == 0 || tl_casts[i].src != tl_hint[tl_n_hint - 1]))
            tl_hint[tl_n_hint++] = tl_casts[i].src;
    for (int i = 0; i < tl_n_casts; i++) {
        weft_tensor_free(tl_casts[i].src);
        weft_tensor_free(tl_casts[i].lo);
    }
    free(tl_casts);
    tl_casts = NULL;
    tl_n_casts = tl_cap_casts = 0;
}

static bool cast_cacheable(const weft_tensor *t) {
    return t->requires_grad && !t->grad_fn && t->dtype == WEFT_F32 && !tl_cache_off && !weft_trace_active &&
           !weft_op_symbolic;
}

// The entry of t's copy in dtype lo made with grad mode `grad`, or NULL.
static cast_entry *cache_find(const weft_tensor *t, bool grad, weft_dtype lo) {
    for (int i = 0; i < tl_n_casts; i++)
        if (tl_casts[i].src == t && tl_casts[i].grad == grad && tl_casts[i].lo->dtype == lo) return &tl_casts[i];
    return NULL;
}

// Keeps c as t's copy (both referenced); with no room the copy is still right, just not kept.
static void cache_put(weft_tensor *t, weft_tensor *c, cast_entry e) {
    if (tl_n_casts == tl_cap_casts) {
        int cap = tl_cap_casts ? 2 * tl_cap_casts : 64;
        cast_entry *a = realloc(tl_casts, (size_t)cap * sizeof *a);
        if (!a) return;
        tl_casts = a, tl_cap_casts = cap;
    }
    e.src = weft_tensor_ref(t), e.lo = weft_tensor_ref(c);
    tl_casts[tl_n_casts++] = e;
}

// t cast to lo through the cache (a new reference), or NULL with the error set.
static weft_tensor *cast_cached(weft_tensor *t, weft_dtype lo) {
    bool grad = weft_grad_is_enabled();
    cast_entry *e = cache_find(t, grad, lo);
    if (e) {
        if (e->pending) { // a filled copy's first use: its record now, as a first-use cast would make it
            weft_attrs at = {.i = {lo}};
            if (weft_autograd_record(&weft_op_cast, 1, &t, &at, 1, &e->lo) != WEFT_OK) return NULL;
            e->pending = false;
        }
        e->used = true;
        return weft_tensor_ref(e->lo);
    }
    weft_tensor *c = weft_cast(t, lo);
    if (c) cache_put(t, c, (cast_entry){.grad = grad, .used = true});
    return c;
}

int weft_autocast_cache_size(void) { return tl_n_casts; }

// Whether an op of the last region read a copy of t: a search from the previous hit on (the sources come in
// about the order their casts did).
static bool hinted(const weft_tensor *t, int *from) {
    for (int k = 0; k < tl_n_hint; k++) {
        int i = (*from + k) % tl_n_hint;
        if (tl_hint[i] == t) {
            *from = i + 1;
            return true;
        }
    }
    return false;
}

// The copies of a run of up to FILL_RUN sources on one device, made by one cast_multi op and cached (their
// autograd records wait for their first use).
enum { FILL_RUN = 64 };
static weft_status fill_run(weft_tensor **src, weft_tensor **lo, int n, bool grad) {
    weft_tensor *in[2 * FILL_RUN];
    for (int j = 0; j < n; j++) in[j] = src[j], in[n + j] = lo[j];
    weft_status st = weft_op_apply_into(&weft_op_cast_multi, 2 * n, in, NULL, NULL);
    for (int j = 0; j < n && st == WEFT_OK; j++) cache_put(src[j], lo[j], (cast_entry){.grad = grad, .pending = grad});
    return st;
}

weft_status weft_autocast_cache_fill(weft_tensor *const *ts, int n) {
    if (n < 0 || (n > 0 && !ts)) return weft_error(WEFT_ERR_ARG, "autocast_cache_fill: %d tensors at %p", n, (void *)ts);
    const char *e = getenv("WEFT_AUTOCAST_FILL"); // 0: leave every cast to its first use (to compare)
    if (tl_autocast == WEFT_F32 || (e && e[0] == '0')) return WEFT_OK;
    bool grad = weft_grad_is_enabled();
    weft_tensor *src[FILL_RUN], *lo[FILL_RUN];
    int m = 0, from = 0;
    weft_status st = WEFT_OK;
    for (int i = 0; i <= n && st == WEFT_OK; i++) {
        weft_tensor *t = i < n ? ts[i] : NULL;
        bool take = t && cast_cacheable(t) && hinted(t, &from) && !cache_find(t, grad, tl_autocast);
        for (int j = 0; j < m && take; j++) take = src[j] != t; // listed twice
        if (m && (!t || m == FILL_RUN || (take && !weft_device_equal(t->device, src[0]->device)))) {
            st = fill_run(src, lo, m, grad);
            for (int j = 0; j < m; j++) weft_tensor_free(lo[j]);
            m = 0;
        }
        if (!take || st) continue;
        if (!(lo[m] = weft_tensor_new(t->ndim, t->sizes, tl_autocast, t->device))) st = weft_last_status();
        else src[m++] = t;
    }
    for (int j = 0; j < m; j++) weft_tensor_free(lo[j]);
    return st;
}

weft_status weft_autocast_set(weft_dtype dt) {
    if (dt != WEFT_F32 && dt != WEFT_BF16 && dt != WEFT_F16)
        return weft_error(WEFT_ERR_DTYPE, "autocast: %s is not a mixed-precision dtype (bf16, f16, or f32 = off)",
                          weft_dtype_name(dt));
    if (dt != tl_autocast) { // leaving (or changing) the region
        cast_cache_clear();
        const char *e = getenv("WEFT_AUTOCAST_CACHE");
        tl_cache_off = e && e[0] == '0';
    }
    tl_autocast = dt;
    return WEFT_OK;
}
weft_dtype weft_autocast_get(void) { return tl_autocast; }

// Mixed precision as PyTorch has it:
// - Inside an autocast region, an op marked WEFT_OPF_AUTOCAST whose float
//   inputs are f32 or already the autocast dtype lo, on a device with a kernel
//   for lo, runs in lo: the f32 inputs are cast down, and the outputs stay in
//   lo for the next op to read (torch.autocast's lower-precision ops).
// - An op that cannot run a bf16 / f16 input as given (its inference rejects
//   the mix of dtypes, or it has no kernel for the dtype) runs on copies of
//   its half inputs in f32 (f64 when another input is f64): type promotion
//   when float dtypes mix (bf16 + f32 is f32), always; and, inside an
//   autocast region, autocast's f32 ops (norms, softmax, losses, and here
//   every op without a half kernel). Ops that take a mix themselves (attention's
//   backward reads bf16 q with its f32 logsumexp) run as they are.
// The casts are ordinary ops, so autograd sends each input a gradient of its
// own dtype through them (f32 to f32 parameters, the optimiser's master
// weights), and graph tracing records them.
enum { CAST_HALF = -1 }; // run_cast's `from` for every bf16 / f16 input

// Runs op on its inputs with those of dtype `from` (CAST_HALF: every bf16 / f16 one) cast to `to`.
static weft_status run_cast(const weft_op_def *op, int n_in, weft_tensor *const *in, const weft_attrs *attrs,
                            weft_tensor **out, int from, weft_dtype to) {
    weft_tensor *cin[8] = {0};
    int n = 0;
    weft_status st = WEFT_OK;
    for (; n < n_in && st == WEFT_OK; n++) {
        int dt = in[n]->dtype;
        bool cast = from == CAST_HALF ? weft_dtype_is_half(dt) : dt == from;
        if (!cast) cin[n] = weft_tensor_ref(in[n]);
        else if (from == WEFT_F32 && to == tl_autocast && cast_cacheable(in[n])) cin[n] = cast_cached(in[n], to);
        else cin[n] = weft_cast(in[n], to);
        if (!cin[n]) st = weft_last_status();
    }
    if (st == WEFT_OK) st = weft_op_apply(op, n_in, cin, attrs, out);
    for (int i = 0; i < n; i++) weft_tensor_free(cin[i]);
    return st;
}

// The float dtypes among the inputs: any f32 / f64 / half, and whether they differ.
typedef struct float_mix {
    bool f32, f64, half, mixed, other_half; // other_half: a half input not in the autocast dtype
} float_mix;
static float_mix mix_of(int n_in, weft_tensor *const *in, weft_dtype lo) {
    float_mix m = {0};
    int first = -1;
    for (int i = 0; i < n_in; i++) {
        int dt = in[i] ? in[i]->dtype : -1;
        if (dt < 0 || !weft_dtype_is_float((weft_dtype)dt)) continue;
        if (first < 0) first = dt;
        m.mixed |= dt != first;
        m.f32 |= dt == WEFT_F32;
        m.f64 |= dt == WEFT_F64;
        m.half |= weft_dtype_is_half(dt);
        m.other_half |= weft_dtype_is_half(dt) && dt != (int)lo;
    }
    return m;
}

// The first rule; returns 1 when it does not apply.
static int autocast_down(const weft_op_def *op, int n_in, weft_tensor *const *in, const weft_attrs *attrs,
                         weft_tensor **out, weft_status *st) {
    weft_dtype lo = tl_autocast;
    if (!(op->flags & WEFT_OPF_AUTOCAST) || n_in > 8) return 1;
    for (int i = 0; i < n_in; i++)
        if (!in[i]) return 1; // the normal path reports it
    float_mix m = mix_of(n_in, in, lo);
    const weft_kernel *k = &op->kernel[in[0]->device.type];
    if (!m.f32 || m.f64 || m.other_half || !k->fn || !(k->dtypes & WEFT_DT(lo))) return 1;
    *st = run_cast(op, n_in, in, attrs, out, WEFT_F32, lo);
    return 0;
}

// The second rule, after the op failed its inference or kernel lookup with these inputs; returns 1 when
// it does not apply (the failure stands).
static int promote(const weft_op_def *op, int n_in, weft_tensor *const *in, const weft_attrs *attrs,
                   weft_tensor **out, weft_status *st) {
    if (n_in > 8 || (op->flags & WEFT_OPF_VIEW)) return 1;
    for (int i = 0; i < n_in; i++)
        if (!in[i]) return 1;
    float_mix m = mix_of(n_in, in, tl_autocast);
    // (not for a same-dtype half op whose kernel exists: its failure is not the dtype's, and casting could loop
    // through the first rule)
    const weft_kernel *k = &op->kernel[in[0]->device.type];
    int ddt = in[op->dispatch_in >= 0 && op->dispatch_in < n_in ? op->dispatch_in : 0]->dtype;
    bool lacks = !k->fn || !(k->dtypes & WEFT_DT(ddt));
    if (!m.half || !(m.mixed || (tl_autocast != WEFT_F32 && lacks))) return 1;
    weft_clear_error();
    *st = run_cast(op, n_in, in, attrs, out, CAST_HALF, m.f64 ? WEFT_F64 : WEFT_F32);
    return 0;
}

weft_status weft_op_apply(const weft_op_def *op, int n_in, weft_tensor *const *in, const weft_attrs *attrs,
                          weft_tensor **out) {
    if (!attrs) attrs = &k_zero_attrs;
    for (int j = 0; j < op->n_out; j++) out[j] = NULL;
    weft_status ast;
    if (WEFT_UNLIKELY(tl_autocast != WEFT_F32) && autocast_down(op, n_in, in, attrs, out, &ast) == 0) return ast;
    weft_device dev;
    weft_op_args args = {.op = op, .n_in = n_in, .in = in, .attrs = attrs, .n_out = op->n_out, .out = out};
    weft_out_meta meta[WEFT_MAX_OP_OUT];
    weft_status st = check_and_infer(&args, &dev, meta);
    if (st != WEFT_OK) return promote(op, n_in, in, attrs, out, &ast) == 0 ? ast : st;

    if (op->flags & WEFT_OPF_VIEW) {
        out[0] = weft_tensor_alias(in[0], meta[0].ndim, meta[0].sizes, meta[0].strides, meta[0].offset);
        if (!out[0]) return weft_last_status();
    } else {
        const weft_kernel *k = find_kernel(op, in, dev);
        if (!k) return promote(op, n_in, in, attrs, out, &ast) == 0 ? ast : weft_last_status();
        for (int j = 0; j < op->n_out; j++) {
            out[j] = WEFT_UNLIKELY(weft_op_symbolic) ? weft_tensor_symbolic(meta[j].ndim, meta[j].sizes, meta[j].dtype, dev)
                                                     : weft_tensor_new(meta[j].ndim, meta[j].sizes, meta[j].dtype, dev);
            if (!out[j]) goto fail;
        }
        // Tracing an op that writes its inputs: save them first (restored at trace_end).
        if (WEFT_UNLIKELY(weft_trace_active != NULL) && (op->flags & WEFT_OPF_STATEFUL) && !weft_op_symbolic)
            weft_graph_trace_before_stateful(op, n_in, in, attrs);
        st = WEFT_UNLIKELY(weft_op_symbolic) ? WEFT_OK : k->fn(&args); // symbolic: shapes only (graph autodiff)
        if (st != WEFT_OK) goto fail;
    }
    if (!(op->flags & WEFT_OPF_NONDIFF)) {
        st = weft_autograd_record(op, n_in, in, attrs, op->n_out, out);
        if (st != WEFT_OK) goto fail;
    }
    // Graph-mode tracing: record the op (after autograd, so saved outputs exist).
    if (WEFT_UNLIKELY(weft_trace_active != NULL)) weft_graph_trace_record(op, n_in, in, attrs, out);
    return WEFT_OK;
fail:
    st = weft_last_status() != WEFT_OK ? weft_last_status() : WEFT_ERR_STATE;
    for (int j = 0; j < op->n_out; j++) {
        weft_tensor_free(out[j]);
        out[j] = NULL;
    }
    return st;
}

weft_tensor *weft_op_apply1(const weft_op_def *op, int n_in, weft_tensor *const *in, const weft_attrs *attrs) {
    weft_tensor *out[WEFT_MAX_OP_OUT];
    if (weft_op_apply(op, n_in, in, attrs, out) != WEFT_OK) return NULL;
    for (int j = 1; j < op->n_out; j++) weft_tensor_free(out[j]);
    return out[0];
}

// Graph executor with a memory plan: run a non-view op into caller-provided
// outputs (contiguous tensors over a planned arena) instead of allocating.
// Each out[j] must have exactly the shape and dtype infer gives. No autograd
// recording and no tracing: graph execution runs under no-grad with tracing
// suspended. Declared in src/graph/plan.h (its only caller).
weft_status weft_op_apply_into(const weft_op_def *op, int n_in, weft_tensor *const *in, const weft_attrs *attrs,
                               weft_tensor *const *out) {
    if (!attrs) attrs = &k_zero_attrs;
    if (op->flags & WEFT_OPF_VIEW)
        return weft_error(WEFT_ERR_ARG, "%s: op_apply_into: a view op has no output buffer", op->name);
    weft_device dev;
    weft_op_args args = {.op = op, .n_in = n_in, .in = in, .attrs = attrs, .n_out = op->n_out, .out = out};
    weft_out_meta meta[WEFT_MAX_OP_OUT];
    weft_status st = check_and_infer(&args, &dev, meta);
    if (st != WEFT_OK) return st;
    for (int j = 0; j < op->n_out; j++) {
        const weft_tensor *o = out[j];
        if (!o || !weft_shape_equal(meta[j].ndim, meta[j].sizes, o->ndim, o->sizes) || o->dtype != meta[j].dtype ||
            !weft_device_equal(o->device, dev) || !weft_tensor_is_contiguous(o)) {
            char a[96];
            return weft_error(WEFT_ERR_SHAPE, "%s: op_apply_into: output %d must be a contiguous %s %s", op->name, j,
                              weft_dtype_name(meta[j].dtype), weft_shape_fmt(meta[j].ndim, meta[j].sizes, a, 96));
        }
    }
    const weft_kernel *k = find_kernel(op, in, dev);
    return k ? k->fn(&args) : weft_last_status();
}
