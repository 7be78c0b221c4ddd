// The fused optimiser updates on CUDA (sgd_update, sgd_momentum_update,
// adam_update) against the CPU kernel, which runs the eager optimiser's own
// loop (bit-identical to weft_optim_step, tests/graph/test_graph_train.c):
// several steps from the same start with the same gradients, parameters and
// state compared after each step; new outputs and in-place updates (outputs
// over their inputs, as the graph executor does); strided gradients; f32 and
// f64 host scalars.
#include <stdlib.h>

#include "cuda_test.h"
#include "ops/op.h"

// The graph executor's entry (src/graph/plan.h): outputs given by the caller.
weft_status weft_op_apply_into(const weft_op_def *op, int n_in, weft_tensor *const *in, const weft_attrs *attrs,
                               weft_tensor *const *out);

static weft_tensor *rand_t(int nd, const int64_t *sz, weft_dtype dt, double lo, double hi, uint64_t seed) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= sz[d];
    double *v = malloc(sizeof(double) * (size_t)n);
    wt_vals(v, n, lo, hi, seed);
    weft_tensor *t64 = weft_tensor_from_data(v, nd, sz, WEFT_F64), *t = weft_cast(t64, dt);
    weft_tensor_free(t64);
    free(v);
    return t;
}

enum { SGD, SGD_MOM, ADAM };
typedef struct opt_case {
    int kind;
    weft_attrs at;
    bool inplace;       // outputs written over the inputs (weft_op_apply_into)
    bool strided_grad;  // the gradient is a transposed view
    weft_dtype scalars; // dtype of the 0-d host scalars
} opt_case;

// One side's state: p and up to two state tensors.
typedef struct side {
    weft_tensor *s[3];
} side;

// Run one update on one side; scalars are made on that side's device.
static bool step(const opt_case *c, side *sd, weft_tensor *g, int t, weft_device dev) {
    const char *name = c->kind == SGD ? "sgd_update" : c->kind == SGD_MOM ? "sgd_momentum_update" : "adam_update";
    const weft_op_def *op = weft_op_find(name);
    int n_out = op->n_out;
    double lr = 0.01 + 0.002 * t, b1 = c->at.f[0], b2 = c->at.f[1];
    double sc[3];
    int n_sc = 0;
    sc[n_sc++] = lr;
    if (c->kind == SGD_MOM) sc[n_sc++] = t == 1 ? 1 : 0;
    if (c->kind == ADAM) {
        sc[n_sc++] = lr / (1 - pow(b1, t));
        sc[n_sc++] = sqrt(1 - pow(b2, t));
    }
    weft_tensor *in[8], *scal[3];
    int n = 0;
    for (int j = 0; j < n_out; j++) in[n++] = sd->s[j];
    in[n++] = g;
    for (int k = 0; k < n_sc; k++) {
        weft_tensor *h = weft_tensor_scalar(sc[k], c->scalars);
        scal[k] = dev.type == WEFT_CPU ? h : weft_tensor_to(h, dev);
        if (dev.type != WEFT_CPU) weft_tensor_free(h);
        in[n++] = scal[k];
    }
    bool ok;
    if (c->inplace) {
        ok = weft_op_apply_into(op, n, in, &c->at, sd->s) == WEFT_OK;
    } else {
        weft_tensor *out[3] = {NULL, NULL, NULL};
        ok = weft_op_apply(op, n, in, &c->at, out) == WEFT_OK;
        for (int j = 0; ok && j < n_out; j++) {
            weft_tensor_free(sd->s[j]);
            sd->s[j] = out[j];
        }
    }
    for (int k = 0; k < n_sc; k++) weft_tensor_free(scal[k]);
    return ok;
}

static void run_case(const char *what, const opt_case *c, weft_dtype dt, int64_t rows, int64_t cols) {
    int n_out = c->kind == SGD ? 1 : c->kind == SGD_MOM ? 2 : 3;
    const int64_t sz[2] = {rows, cols}, tsz[2] = {cols, rows};
    side h, d;
    for (int j = 0; j < n_out; j++) {
        // the state starts non-zero (as after earlier steps); v must be >= 0
        h.s[j] = rand_t(2, sz, dt, j == 2 ? 0 : -1, 1, 100 + (uint64_t)j);
        d.s[j] = weft_tensor_to(h.s[j], WT_CUDA0);
    }
    double tol = dt == WEFT_F32 ? 2e-6 : 1e-13;
    char buf[96];
    for (int t = 1; t <= 4; t++) {
        // gradient: (rows, cols), or a transposed view of a (cols, rows) tensor
        weft_tensor *gs = rand_t(2, c->strided_grad ? tsz : sz, dt, -2, 2, 200 + (uint64_t)t);
        weft_tensor *gh = c->strided_grad ? weft_transpose(gs, 0, 1) : weft_tensor_ref(gs);
        weft_tensor *gds = weft_tensor_to(gs, WT_CUDA0);
        weft_tensor *gd = c->strided_grad ? weft_transpose(gds, 0, 1) : weft_tensor_ref(gds);
        bool okh = step(c, &h, gh, t, (weft_device){WEFT_CPU, 0});
        bool okd = step(c, &d, gd, t, WT_CUDA0);
        CHECK(okh && okd);
        for (int j = 0; okh && okd && j < n_out; j++) {
            CHECK(weft_device_equal(weft_tensor_device(d.s[j]), WT_CUDA0));
            snprintf(buf, sizeof buf, "%s %s step %d tensor %d", what, weft_dtype_name(dt), t, j);
            wt_check_same(buf, d.s[j], h.s[j], tol);
        }
        weft_tensor_free(gs);
        weft_tensor_free(gh);
        weft_tensor_free(gds);
        weft_tensor_free(gd);
    }
    for (int j = 0; j < n_out; j++) {
        weft_tensor_free(h.s[j]);
        weft_tensor_free(d.s[j]);
    }
}

static void run_all(const char *what, opt_case c) {
    static const weft_dtype dts[] = {WEFT_F32, WEFT_F64};
    for (int k = 0; k < 2; k++)
        for (int mode = 0; mode < 4; mode++) {
            c.inplace = mode & 1;
            c.strided_grad = (mode & 2) != 0;
            c.scalars = mode == 3 ? WEFT_F32 : WEFT_F64;
            char buf[64];
            snprintf(buf, sizeof buf, "%s%s%s", what, c.inplace ? " in place" : "",
                     c.strided_grad ? " strided grad" : "");
            run_case(buf, &c, dts[k], 7, 33);
            if (mode == 0) run_case(buf, &c, dts[k], 301, 1000); // many blocks
        }
}

static void test_sgd(void) {
    run_all("sgd", (opt_case){SGD, .at = {.f = {0}}});
    run_all("sgd wd", (opt_case){SGD, .at = {.f = {0.01}}});
}

static void test_sgd_momentum(void) {
    run_all("momentum", (opt_case){SGD_MOM, .at = {.f = {0, 0.9, 0}}});
    run_all("momentum wd dampening", (opt_case){SGD_MOM, .at = {.f = {0.05, 0.8, 0.25}}});
    run_all("nesterov wd", (opt_case){SGD_MOM, .at = {.f = {0.01, 0.9, 0}, .i = {1}}});
}

static void test_adam(void) {
    run_all("adam", (opt_case){ADAM, .at = {.f = {0.9, 0.999, 1e-8, 0}}});
    run_all("adam l2", (opt_case){ADAM, .at = {.f = {0.8, 0.99, 1e-6, 0.02}}});
    run_all("adamw", (opt_case){ADAM, .at = {.f = {0.9, 0.999, 1e-8, 0.01}, .i = {1}}});
}

// Mismatched inputs are refused before any kernel (infer), on CUDA as on the CPU.
static void test_errors(void) {
    weft_tensor *p = weft_tensor_zeros(1, (const int64_t[]){4}, WEFT_F32), *d = weft_tensor_to(p, WT_CUDA0);
    weft_tensor *g = weft_tensor_zeros(1, (const int64_t[]){5}, WEFT_F32), *dg = weft_tensor_to(g, WT_CUDA0);
    weft_tensor *lr = weft_tensor_scalar(0.1, WEFT_F64), *dlr = weft_tensor_to(lr, WT_CUDA0);
    weft_tensor *r = weft_op_apply1(weft_op_find("sgd_update"), 3, (weft_tensor *[]){d, dg, dlr}, NULL);
    CHECK(r == NULL && wt_error_has("sgd_update"));
    r = weft_op_apply1(weft_op_find("sgd_update"), 3, (weft_tensor *[]){d, d, lr}, NULL);
    CHECK(r == NULL && wt_error_has("sgd_update") && wt_error_has("different devices"));
    weft_tensor *objs[] = {p, d, g, dg, lr, dlr};
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) weft_tensor_free(objs[i]);
}

int main(void) {
    WT_CUDA_OR_SKIP();
    RUN(test_sgd);
    RUN(test_sgd_momentum);
    RUN(test_adam);
    RUN(test_errors);
    return wt_summary();
}
