// Custom autograd functions (weft_function_record), as PyTorch's
// torch.autograd.Function: the caller computes the outputs itself (with
// anything, collectives included) and hands a backward callback; the node
// recorded for them calls it. Each record owns a small heap op def, so the
// node's name is the function's, and frees it (and the callback's context)
// when the node dies. The differentiable device transfer weft_tensor_to is
// the first user.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd_impl.h"

typedef struct weft_function {
    weft_op_def def; // first: the node's op points here
    char name[48];
    weft_function_backward_fn backward;
    void *ctx;
    void (*ctx_free)(void *ctx);
} weft_function;

static weft_function *fn_of(const weft_op_def *op) { return (weft_function *)op; }

static weft_status fn_backward(const weft_bw_args *b) {
    weft_function *f = fn_of(b->op);
    return f->backward(f->ctx, b->n_out, b->gout, b->n_in, b->needs, b->gin);
}

static void fn_release(const weft_op_def *op, const weft_attrs *attrs) {
    (void)attrs;
    weft_function *f = fn_of(op);
    if (f->ctx_free) f->ctx_free(f->ctx);
    free(f);
}

weft_status weft_function_record(const char *name, int n_in, weft_tensor *const *in, int n_out,
                                 weft_tensor *const *out, weft_function_backward_fn backward, void *ctx,
                                 void (*ctx_free)(void *ctx)) {
    weft_status st = WEFT_OK;
    const char *nm = name ? name : "function";
    if (!backward || n_in < 1 || n_out < 1 || n_out > WEFT_MAX_OP_OUT || !in || !out) {
        st = weft_error(WEFT_ERR_ARG, "%s: a custom function needs a backward, 1 or more inputs and 1 to %d outputs", nm,
                        WEFT_MAX_OP_OUT);
        goto fail;
    }
    for (int i = 0; i < n_in; i++)
        if (!in[i]) {
            st = weft_error(WEFT_ERR_ARG, "%s: input %d is NULL", nm, i);
            goto fail;
        }
    for (int j = 0; j < n_out; j++)
        if (!out[j] || out[j]->grad_fn || out[j]->requires_grad) {
            st = weft_error(WEFT_ERR_ARG, "%s: output %d must be a fresh tensor without autograd history (compute the "
                            "outputs with grad disabled, or detach them)", nm, j);
            goto fail;
        }
    bool any = false;
    for (int i = 0; i < n_in; i++) any |= in[i]->requires_grad;
    if (!any || !weft_grad_is_enabled()) goto fail; // nothing to record: not an error
    weft_function *f = calloc(1, sizeof *f);
    if (!f) {
        st = weft_error(WEFT_ERR_OOM, "%s: out of memory", nm);
        goto fail;
    }
    snprintf(f->name, sizeof f->name, "%s", nm);
    f->def = (weft_op_def){.name = f->name, .n_in = -1, .n_out = n_out, .backward = fn_backward,
                           .node_release = fn_release};
    f->backward = backward;
    f->ctx = ctx;
    f->ctx_free = ctx_free;
    weft_attrs attrs = {0};
    // The node references the def from here on; a failed record never made one.
    st = weft_autograd_record(&f->def, n_in, in, &attrs, n_out, (weft_tensor **)out);
    if (st != WEFT_OK) free(f);
    if (st != WEFT_OK && ctx_free) ctx_free(ctx);
    return st;
fail:
    if (ctx_free) ctx_free(ctx);
    return st;
}

// ---- weft_tensor_to: the move, and a node whose backward moves the gradient back ----
typedef struct {
    weft_device from;
} to_ctx;

static weft_status to_backward(void *ctx, int n_out, weft_tensor *const *gout, int n_in, const bool *needs,
                               weft_tensor **gin) {
    (void)n_out;
    (void)n_in;
    if (!needs[0] || !gout[0]) return WEFT_OK;
    gin[0] = weft_tensor_to(gout[0], ((to_ctx *)ctx)->from); // recorded too under create_graph
    return gin[0] ? WEFT_OK : weft_last_status();
}

weft_tensor *weft_tensor_to(weft_tensor *t, weft_device dev) {
    weft_tensor *r = weft_tensor_to_raw(t, dev);
    if (!r || r == t || !t->requires_grad || !weft_grad_is_enabled()) return r;
    to_ctx *c = malloc(sizeof *c);
    if (!c) {
        weft_tensor_free(r);
        weft_error(WEFT_ERR_OOM, "to: out of memory");
        return NULL;
    }
    c->from = t->device;
    if (weft_function_record("to", 1, &t, 1, &r, to_backward, c, free) != WEFT_OK) {
        weft_tensor_free(r);
        return NULL;
    }
    return r;
}
