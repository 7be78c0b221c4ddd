// Every op's infer function checks its own attributes: a graph file or any C
// caller can pass anything, and the kernel that runs after infer takes what
// it let through as given. For each op of the table, on inputs of assorted
// shapes and dtypes and attrs drawn from small values and hostile ones
// (negative, zero, huge, past int32, past the attrs' own slots), infer
// either refuses with a message or gives outputs of shapes a tensor may have
// (graph builder, shapes only); when it accepts with small outputs, the op
// runs eagerly on real tensors, which must not fault (make test-asan runs
// this under ASan and UBSan). Deterministic: a fixed stream of trials.
#include <string.h>

#include "ops/op.h"
#include "weft_test.h"

#define TRIALS 300
#define RUN_MAX_NUMEL 4096

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) { // xorshift64*
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return g_rng * 2685821657736338717ull;
}

static int64_t pick_int(void) {
    static const int64_t hostile[] = {-1, -2, -64, 8, 9, 16, 64, 100, INT32_MAX, (int64_t)INT32_MAX + 1, INT32_MIN,
                                      INT64_C(1) << 40, INT64_C(1) << 62, INT64_MAX, INT64_MIN, INT64_MAX / 2 + 1};
    uint64_t r = next();
    if (r % 10 < 7) return (int64_t)(r >> 8) % 6 - 1; // -1..4: often what an op takes
    return hostile[(r >> 8) % (sizeof hostile / sizeof hostile[0])];
}
static double pick_f(void) {
    static const double v[] = {0, 1, -1, 0.5, 1e-5, 2, NAN, INFINITY, -INFINITY, 1e300, -0.0};
    return v[next() % (sizeof v / sizeof v[0])];
}

// The input pool: shapes every family takes somewhere, in the dtypes that matter.
#define N_POOL 12
static weft_tensor *g_pool[N_POOL];
static void make_pool(void) {
    static const int64_t shapes[][5] = {{0}, {1, 3}, {2, 2, 3}, {3, 2, 3, 4}, {4, 1, 2, 4, 4}, {4, 2, 2, 3, 3}};
    int k = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int nd = (int)shapes[s][0];
        g_pool[k++] = wt_rand64(nd, &shapes[s][1], -2, 2, 10 + s, false);
        weft_tensor *f = g_pool[k - 1];
        if (s % 2 == 0) g_pool[k++] = weft_cast(f, WEFT_F32);
        else {
            weft_tensor *a = weft_abs(f), *c = weft_cast(a, WEFT_I64); // small non-negative indices
            g_pool[k++] = c;
            weft_tensor_free(a);
        }
    }
    for (int i = 0; i < N_POOL; i++) CHECK(g_pool[i] != NULL);
}

static int64_t numel_of(int nd, const int64_t *s) { return weft_shape_numel(nd, s); }

static void trial(const weft_op_def *op, int n_in, weft_tensor **in, const weft_attrs *at, int *accepted, int *ran) {
    // infer alone, through the graph builder (what a graph file reaches)
    weft_graph *g = weft_graph_new();
    weft_value v[8], out[WEFT_GRAPH_MAX_OUT];
    for (int i = 0; i < n_in; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "in%d", i);
        v[i] = weft_graph_placeholder(g, nm, in[i]->ndim, in[i]->sizes, (weft_dtype)in[i]->dtype);
    }
    weft_clear_error();
    weft_status st = weft_graph_op(g, op->name, n_in, v, at->i, 16, at->f, 4, out);
    bool small = st == WEFT_OK;
    if (st != WEFT_OK) {
        if (!weft_last_error()[0]) {
            wt_fail++;
            fprintf(stderr, "%s: refused without a message\n", op->name);
        }
    } else {
        ++*accepted;
        for (int j = 0; j < op->n_out; j++) {
            int64_t n = numel_of(weft_graph_value_ndim(g, out[j]), weft_graph_value_sizes(g, out[j]));
            if (n < 0) {
                wt_fail++;
                fprintf(stderr, "%s: output %d of an impossible shape\n", op->name, j);
            }
            small = small && n >= 0 && n <= RUN_MAX_NUMEL;
        }
    }
    weft_graph_free(g);
    if (!small) return;
    // accepted, small: run it on the real inputs (eager dispatch: infer again, then the kernel)
    weft_tensor *res[WEFT_MAX_OP_OUT] = {0};
    weft_clear_error();
    st = weft_op_apply(op, n_in, in, at, res);
    if (st == WEFT_OK) ++*ran;
    else if (!weft_last_error()[0]) {
        wt_fail++;
        fprintf(stderr, "%s: failed without a message\n", op->name);
    }
    for (int j = 0; j < op->n_out; j++) weft_tensor_free(res[j]);
}

static void test_every_op(void) {
    make_pool();
    bool prev = weft_grad_set_enabled(false);
    int total_accepted = 0, total_ran = 0;
    for (int k = 0; weft_op_at(k); k++) {
        const weft_op_def *op = weft_op_at(k);
        int accepted = 0, ran = 0;
        for (int t = 0; t < TRIALS; t++) {
            weft_attrs at;
            for (int i = 0; i < 16; i++) at.i[i] = pick_int();
            for (int i = 0; i < 4; i++) at.f[i] = pick_f();
            if (t % 3 == 0) // trailing zeros, as most callers leave them
                for (int i = 1 + (int)(next() % 10); i < 16; i++) at.i[i] = 0;
            int n_in = op->n_in >= 0 ? op->n_in : 1 + (int)(next() % 6);
            weft_tensor *in[8];
            int base = (int)(next() % N_POOL);
            for (int i = 0; i < n_in; i++) // mostly one shape for all inputs (what most ops need), sometimes mixed
                in[i] = g_pool[next() % 4 == 0 ? (int)(next() % N_POOL) : base];
            trial(op, n_in, in, &at, &accepted, &ran);
        }
        total_accepted += accepted;
        total_ran += ran;
    }
    weft_grad_set_enabled(prev);
    // the trials reach past the checks: many are accepted and run (a test that refuses everything tests nothing)
    printf("infer accepted %d trials, %d ran\n", total_accepted, total_ran);
    CHECK(total_accepted > 1000 && total_ran > 500);
    for (int i = 0; i < N_POOL; i++) weft_tensor_free(g_pool[i]);
    wt_pass++;
}

int main(void) {
    RUN(test_every_op);
    return wt_summary();
}
