// Stateful ops in graph mode: dropout draws a fresh mask per run (forward and
// backward agreeing within a run), batch_norm's running statistics are graph
// variables updated by each run exactly as eager updates them, and queues are
// graph nodes (enqueue as a target, dequeue feeding a computation) with
// backpressure, ordering, end-of-data errors and an input-pipeline training step.
// References: eager modules on the same batches, closed forms (1/(1-p)), the
// binomial distribution, and the values the producer sent.
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <weft/graph.h>
#include <weft/graph_passes.h>
#include <weft/nn.h>
#include <weft/queue.h>

#include "weft_test.h"

static double *to_f64(const weft_tensor *t) {
    int64_t n = weft_tensor_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    weft_tensor_to_f64(t, v, n);
    return v;
}

static bool same_bits(const weft_tensor *a, const weft_tensor *b) {
    if (!a || !b || weft_tensor_numel(a) != weft_tensor_numel(b)) return false;
    double *x = to_f64(a), *y = to_f64(b);
    bool ok = memcmp(x, y, sizeof(double) * (size_t)weft_tensor_numel(a)) == 0;
    free(x);
    free(y);
    return ok;
}

// ---------------------------------------------------------------- dropout

// Trace y = dropout(w), loss = sum(y), backward: fetch y and dL/dw per run.
typedef struct drop_graph {
    weft_graph *g;
    weft_tensor *w, *y_eager;
    weft_value y, gw;
} drop_graph;

static drop_graph trace_dropout(int64_t n, double p, bool training, weft_generator *gen) {
    drop_graph d = {.g = weft_graph_new()};
    d.w = wt_rand64(1, (int64_t[]){n}, 1.0, 2.0, 7, true); // nonzero: a zero output means dropped
    CHECK(weft_graph_trace_begin(d.g) == WEFT_OK);
    weft_tensor *y = weft_dropout(d.w, p, training, gen), *y2 = weft_mul_scalar(y, 1.0), *s = weft_sum(y2, 0, NULL, false);
    d.y = weft_graph_trace_output(d.g, y2);
    CHECK(weft_backward(s, NULL, NULL) == WEFT_OK);
    d.gw = weft_graph_trace_output(d.g, weft_tensor_grad(d.w));
    CHECK(weft_graph_trace_end(d.g) == WEFT_OK);
    d.y_eager = y2;
    weft_tensor_free(y);
    weft_tensor_free(s);
    return d;
}

static void drop_free(drop_graph *d) {
    weft_graph_free(d->g);
    weft_tensor_free(d->w);
    weft_tensor_free(d->y_eager);
}

// One run: y and the gradient; checks the mask agreement and the scale. Returns the dropped count.
static int64_t run_dropout(drop_graph *d, double p, double **y_out) {
    weft_tensor *out[2] = {0};
    CHECK(weft_graph_run(d->g, 0, NULL, NULL, 2, (weft_value[]){d->y, d->gw}, out, 0, NULL) == WEFT_OK);
    if (!out[0] || !out[1]) return -1;
    int64_t n = weft_tensor_numel(out[0]), dropped = 0, bad_mask = 0, bad_scale = 0;
    double *y = to_f64(out[0]), *gw = to_f64(out[1]), *w = to_f64(d->w), scale = 1.0 / (1.0 - p);
    for (int64_t i = 0; i < n; i++) {
        bool zy = y[i] == 0, zg = gw[i] == 0;
        if (zy != zg) bad_mask++;
        if (zy) dropped++;
        else if (gw[i] != scale || y[i] != w[i] * scale) bad_scale++;
    }
    CHECK(bad_mask == 0);  // the backward node recomputed the forward's mask
    CHECK(bad_scale == 0); // kept: x / (1-p), gradient 1 / (1-p)
    free(gw);
    free(w);
    weft_tensor_free(out[0]);
    weft_tensor_free(out[1]);
    if (y_out) *y_out = y;
    else free(y);
    return dropped;
}

static void test_dropout_fresh_mask_per_run(void) {
    const int64_t n = 100000;
    const double p = 0.3;
    weft_generator *gen = weft_generator_create(11);
    drop_graph d = trace_dropout(n, p, true, gen);
    double *y1 = NULL, *y2 = NULL, *y3 = NULL;
    int64_t k1 = run_dropout(&d, p, &y1), k2 = run_dropout(&d, p, &y2), k3 = run_dropout(&d, p, &y3);
    // Binomial(n, p): mean 30000, sd 145; 6 sd either way.
    double sd = sqrt((double)n * p * (1 - p));
    for (int r = 0; r < 3; r++) {
        int64_t k = r == 0 ? k1 : r == 1 ? k2 : k3;
        CHECK(fabs((double)k - (double)n * p) <= 6 * sd);
    }
    // The first run replays the traced (eager) mask; later runs draw new ones.
    double *ye = to_f64(d.y_eager);
    CHECK(y1 && memcmp(y1, ye, sizeof(double) * (size_t)n) == 0);
    int64_t diff12 = 0, diff23 = 0;
    for (int64_t i = 0; y1 && y2 && y3 && i < n; i++) {
        diff12 += (y1[i] == 0) != (y2[i] == 0);
        diff23 += (y2[i] == 0) != (y3[i] == 0);
    }
    // Independent masks disagree on 2p(1-p) = 42% of the elements.
    CHECK(fabs((double)diff12 - 2 * p * (1 - p) * (double)n) <= 6 * sqrt((double)n * 0.25));
    CHECK(fabs((double)diff23 - 2 * p * (1 - p) * (double)n) <= 6 * sqrt((double)n * 0.25));
    printf("  dropout p=%.1f n=%lld: dropped %lld, %lld, %lld; masks of runs 1/2 differ in %lld elements\n", p,
           (long long)n, (long long)k1, (long long)k2, (long long)k3, (long long)diff12);
    free(ye);
    free(y1);
    free(y2);
    free(y3);
    drop_free(&d);
    weft_generator_free(gen);
}

// The run counter is saved with the graph: a loaded graph continues the stream.
static void test_dropout_counter_saved(void) {
    const double p = 0.5;
    weft_generator *gen = weft_generator_create(3);
    drop_graph d = trace_dropout(4096, p, true, gen);
    run_dropout(&d, p, NULL);
    run_dropout(&d, p, NULL);
    char path[] = "/tmp/weft_test_stateful_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    CHECK(weft_graph_save(d.g, path) == WEFT_OK);
    weft_graph *h = weft_graph_load(path);
    CHECK(h != NULL);
    double *ya = NULL;
    run_dropout(&d, p, &ya); // run 2 of the original
    if (h) {
        drop_graph dl = {.g = h, .y = weft_graph_find_output(h, weft_graph_node_name(d.g, weft_graph_value_node(d.g, d.y)), 0),
                         .gw = weft_graph_find_output(h, weft_graph_node_name(d.g, weft_graph_value_node(d.g, d.gw)), 0)};
        dl.w = weft_tensor_ref(d.w);
        double *yb = NULL;
        run_dropout(&dl, p, &yb); // run 2 of the loaded copy
        CHECK(ya && yb && memcmp(ya, yb, sizeof(double) * 4096) == 0);
        free(yb);
        drop_free(&dl);
    }
    free(ya);
    remove(path);
    drop_free(&d);
    weft_generator_free(gen);
}

// p = 0 and eval mode record no dropout at all: the graph is the identity.
static void test_dropout_identity_cases(void) {
    for (int c = 0; c < 2; c++) {
        double p = c == 0 ? 0.0 : 0.5;
        drop_graph d = trace_dropout(1000, p, c == 0, NULL);
        for (int r = 0; r < 2; r++) {
            weft_tensor *y = NULL;
            CHECK(weft_graph_run(d.g, 0, NULL, NULL, 1, &d.y, &y, 0, NULL) == WEFT_OK);
            CHECK(same_bits(y, d.w));
            weft_tensor_free(y);
        }
        drop_free(&d);
    }
}

// Passes never fold a random op: dropout of a constant still draws per run.
static void test_dropout_not_folded(void) {
    weft_graph *g = weft_graph_new();
    weft_tensor *c = weft_tensor_ones(WEFT_DIMS(2000), WEFT_F64);
    weft_value cv = weft_graph_constant(g, "c", c);
    int64_t ia[2] = {1234, 0};
    double fa[1] = {0.5};
    weft_value y = weft_graph_op1(g, "dropout", 1, &cv, ia, 2, fa, 1);
    weft_value y2 = weft_graph_op1(g, "dropout", 1, &cv, ia, 2, fa, 1); // same seed: the same mask as y
    weft_value s = weft_graph_op1(g, "sub", 2, (weft_value[]){y, y2}, NULL, 0, NULL, 0);
    weft_value keep[2] = {y, s}, kout[2];
    weft_graph_pass_stats st;
    weft_graph *o = weft_graph_optimize(g, 2, keep, kout, NULL, &st);
    CHECK(o != NULL && st.folded == 0);
    weft_tensor *a[2] = {0}, *b[2] = {0};
    CHECK(o && weft_graph_run(o, 0, NULL, NULL, 2, kout, a, 0, NULL) == WEFT_OK);
    CHECK(o && weft_graph_run(o, 0, NULL, NULL, 2, kout, b, 0, NULL) == WEFT_OK);
    CHECK(a[0] && b[0] && !same_bits(a[0], b[0]));
    weft_tensor *z = a[1] ? weft_sum(a[1], 0, NULL, false) : NULL;
    CHECK(z && weft_tensor_item(z) == 0); // one seed, one mask within a run
    weft_tensor_free(z);
    for (int k = 0; k < 2; k++) weft_tensor_free(a[k]), weft_tensor_free(b[k]);
    weft_graph_free(o);
    weft_graph_free(g);
    weft_tensor_free(c);
}

// ---------------------------------------------------------------- batch_norm

static weft_module *bn_net(void) { // two batch norms: two zero running means that must not merge
    weft_module *s = weft_nn_sequential();
    weft_nn_sequential_append(s, weft_nn_batch_norm(3, 0.1, 1e-5));
    weft_nn_sequential_append(s, weft_nn_activation(WEFT_ACT_RELU));
    weft_nn_sequential_append(s, weft_nn_batch_norm(3, 0.2, 1e-5));
    weft_module_set_training(s, true);
    return s;
}

static weft_tensor *rand32(int nd, const int64_t *sz, double lo, double hi, uint64_t seed) { // modules are f32
    weft_tensor *t = wt_rand64(nd, sz, lo, hi, seed, false), *c = weft_cast(t, WEFT_F32);
    weft_tensor_free(t);
    return c;
}

static int count_kind(const weft_graph *g, weft_node_kind k) {
    int c = 0;
    for (int i = 0; i < weft_graph_node_count(g); i++) c += weft_graph_node_kind(g, (weft_node_id){i}) == k;
    return c;
}

static void test_batch_norm_running_stats(void) {
    enum { STEPS = 4 };
    const int64_t sz[4] = {6, 3, 2, 2};
    weft_module *ge = bn_net(), *ea = bn_net();
    weft_tensor *x0 = rand32(4, sz, -1, 3, 100);
    weft_graph *g = weft_graph_new();
    CHECK(weft_graph_trace_begin(g) == WEFT_OK);
    weft_value xv = weft_graph_trace_input(g, x0, "x");
    weft_tensor *y0 = weft_module_forward(ge, x0);
    if (!y0) fprintf(stderr, "bn forward: %s\n", weft_last_error());
    weft_value yv = weft_graph_trace_output(g, y0);
    CHECK(weft_graph_trace_end(g) == WEFT_OK);
    weft_tensor_free(y0);
    // 2 weights, 2 biases, 2 running means, 2 running vars; no constants.
    CHECK(count_kind(g, WEFT_NODE_VARIABLE) == 8);
    CHECK(count_kind(g, WEFT_NODE_CONSTANT) == 0);
    // The trace's own update is undone: the graph's first run is the first update.
    const char *names[4] = {"0.running_mean", "0.running_var", "2.running_mean", "2.running_var"};
    weft_tensor *rm0 = weft_module_get(weft_module_child_at(ge, 0), "running_mean");
    weft_tensor *rv0 = weft_module_get(weft_module_child_at(ge, 0), "running_var");
    double v0[3];
    weft_tensor_to_f64(rm0, v0, 3);
    CHECK(v0[0] == 0 && v0[1] == 0 && v0[2] == 0);
    weft_tensor_to_f64(rv0, v0, 3);
    CHECK(v0[0] == 1 && v0[1] == 1 && v0[2] == 1);
    // Optimised (folding, CSE, DCE): the batch_norm nodes and their state survive.
    weft_value keep[2] = {yv, xv}, kout[2];
    weft_graph *o = weft_graph_optimize(g, 2, keep, kout, NULL, NULL);
    CHECK(o != NULL);
    if (!o) return;
    int n_bn = 0;
    for (int i = 0; i < weft_graph_node_count(o); i++)
        n_bn += !strcmp(weft_graph_node_op(o, (weft_node_id){i}), "batch_norm");
    CHECK(n_bn == 2 && count_kind(o, WEFT_NODE_VARIABLE) == 8);
    bool all_same = true;
    for (int s = 0; s < STEPS; s++) {
        weft_tensor *x = rand32(4, sz, -2 + s, 2 + 2 * s, 200 + (uint64_t)s), *yg = NULL;
        weft_graph *run = s % 2 ? o : g; // both share the variables
        weft_value xin = s % 2 ? kout[1] : xv, yout = s % 2 ? kout[0] : yv;
        CHECK(weft_graph_run(run, 1, &xin, &x, 1, &yout, &yg, 0, NULL) == WEFT_OK);
        weft_tensor *ye = weft_module_forward(ea, x);
        all_same = all_same && same_bits(yg, ye);
        weft_tensor_free(yg);
        weft_tensor_free(ye);
        weft_tensor_free(x);
    }
    CHECK(all_same);
    for (int k = 0; k < 4; k++) {
        weft_module *mg = weft_module_child_at(ge, k < 2 ? 0 : 2), *me = weft_module_child_at(ea, k < 2 ? 0 : 2);
        const char *nm = k % 2 ? "running_var" : "running_mean";
        bool same = same_bits(weft_module_get(mg, nm), weft_module_get(me, nm));
        if (!same) fprintf(stderr, "  %s differs from eager after %d steps\n", names[k], STEPS);
        CHECK(same);
    }
    // Saved with the graph (var/<node>) and loaded as variables.
    char path[] = "/tmp/weft_test_bn_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    CHECK(weft_graph_save(g, path) == WEFT_OK);
    weft_graph *h = weft_graph_load(path);
    CHECK(h && count_kind(h, WEFT_NODE_VARIABLE) == 8);
    weft_graph_free(h);
    remove(path);
    weft_graph_free(o);
    weft_graph_free(g);
    weft_tensor_free(x0);
    weft_module_free(ge);
    weft_module_free(ea);
}

// ---------------------------------------------------------------- queues

static weft_queue *vec_queue(int cap, int64_t len, const char *name) {
    int nd = 1;
    const int64_t *sizes[1] = {(int64_t[]){len}};
    return weft_queue_create(cap, 1, (weft_dtype[]){WEFT_F64}, &nd, sizes, name);
}

typedef struct producer {
    weft_graph *g;
    weft_value x;
    weft_node_id enq;
    int n_runs;
    atomic_int done;
    weft_status last;
} producer;

// x (4) -> 2x -> enqueue.
static void producer_build(producer *p, weft_queue *q) {
    p->g = weft_graph_new();
    p->x = weft_graph_placeholder(p->g, "x", WEFT_DIMS(4), WEFT_F64);
    double two = 2;
    weft_value y = weft_graph_op1(p->g, "mul_scalar", 1, &p->x, NULL, 0, &two, 1);
    p->enq = weft_graph_enqueue(p->g, "enq", q, 1, &y);
    CHECK(p->enq.id >= 0);
}

static void *producer_main(void *arg) {
    producer *p = arg;
    for (int i = 0; i < p->n_runs; i++) {
        double v[4] = {i, i + 0.25, i + 0.5, i + 0.75};
        weft_tensor *x = weft_tensor_from_data(v, WEFT_DIMS(4), WEFT_F64);
        p->last = weft_graph_run(p->g, 1, &p->x, &x, 0, NULL, NULL, 1, &p->enq);
        weft_tensor_free(x);
        if (p->last != WEFT_OK) break;
        atomic_fetch_add(&p->done, 1);
    }
    return NULL;
}

typedef struct consumer {
    weft_graph *g;
    weft_value out;
} consumer;

// dequeue -> + 1.
static void consumer_build(consumer *c, weft_queue *q) {
    c->g = weft_graph_new();
    weft_value d;
    CHECK(weft_graph_dequeue(c->g, "deq", q, &d).id >= 0);
    double one = 1;
    c->out = weft_graph_op1(c->g, "add_scalar", 1, &d, NULL, 0, &one, 1);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Waits (at most 10 s) until cond holds.
#define WAIT_FOR(cond)                                                                  \
    do {                                                                                \
        double _t0 = now_s();                                                           \
        while (!(cond) && now_s() - _t0 < 10) {                                         \
            struct timespec _d = {0, 1000000};                                          \
            nanosleep(&_d, NULL);                                                       \
        }                                                                               \
    } while (0)

static void test_queue_order_and_backpressure(void) {
    weft_queue *q = vec_queue(2, 4, "q");
    producer p = {.n_runs = 6};
    consumer c;
    producer_build(&p, q);
    consumer_build(&c, q);
    pthread_t t;
    pthread_create(&t, NULL, producer_main, &p);
    // Capacity 2: two runs complete, the third blocks inside its enqueue node.
    weft_queue_stats st;
    WAIT_FOR((weft_queue_get_stats(q, &st), st.enqueuers_waiting == 1));
    CHECK(st.enqueuers_waiting == 1);
    CHECK(atomic_load(&p.done) == 2 && weft_queue_size(q) == 2);
    for (int i = 0; i < 6; i++) {
        weft_tensor *o = NULL;
        CHECK(weft_graph_run(c.g, 0, NULL, NULL, 1, &c.out, &o, 0, NULL) == WEFT_OK);
        double v[4] = {0};
        if (o) weft_tensor_to_f64(o, v, 4);
        CHECK(v[0] == 2 * i + 1 && v[3] == 2 * (i + 0.75) + 1); // in order, computed by both graphs
        weft_tensor_free(o);
        if (i == 0) { // one slot freed: the blocked third run completes
            WAIT_FOR(atomic_load(&p.done) >= 3);
            CHECK(atomic_load(&p.done) >= 3);
        }
    }
    pthread_join(t, NULL);
    CHECK(p.last == WEFT_OK && atomic_load(&p.done) == 6);
    weft_queue_get_stats(q, &st);
    CHECK(st.enqueued == 6 && st.dequeued == 6 && st.max_size == 2 && st.enqueue_blocked >= 1);
    // Closed and empty: the run fails naming the node and the queue.
    weft_queue_close(q, false);
    weft_tensor *o = NULL;
    CHECK(weft_graph_run(c.g, 0, NULL, NULL, 1, &c.out, &o, 0, NULL) != WEFT_OK);
    CHECK(wt_error_has("node 'deq'") && wt_error_has("queue 'q'") && wt_error_has("closed"));
    CHECK(o == NULL);
    // A closed queue refuses the producer's run too, naming its node.
    double v[4] = {0};
    weft_tensor *x = weft_tensor_from_data(v, WEFT_DIMS(4), WEFT_F64);
    CHECK(weft_graph_run(p.g, 1, &p.x, &x, 0, NULL, NULL, 1, &p.enq) != WEFT_OK);
    CHECK(wt_error_has("node 'enq'") && wt_error_has("closed"));
    weft_tensor_free(x);
    weft_queue_free(q); // the graphs still hold the queue
    weft_graph_free(p.g);
    weft_graph_free(c.g);
}

typedef struct blocked_run {
    consumer *c;
    weft_status st;
    char msg[512];
} blocked_run;

static void *consumer_main(void *arg) {
    blocked_run *b = arg;
    weft_tensor *o = NULL;
    b->st = weft_graph_run(b->c->g, 0, NULL, NULL, 1, &b->c->out, &o, 0, NULL);
    snprintf(b->msg, sizeof b->msg, "%s", weft_last_error());
    weft_tensor_free(o);
    return NULL;
}

// A consumer blocked on an empty queue wakes with the end-of-data error when it closes.
static void test_queue_close_wakes_consumer(void) {
    weft_queue *q = vec_queue(2, 4, "input");
    consumer c;
    consumer_build(&c, q);
    blocked_run b = {.c = &c};
    pthread_t t;
    pthread_create(&t, NULL, consumer_main, &b);
    weft_queue_stats st;
    WAIT_FOR((weft_queue_get_stats(q, &st), st.dequeuers_waiting == 1));
    CHECK(st.dequeuers_waiting == 1);
    weft_queue_close(q, false);
    pthread_join(t, NULL);
    CHECK(b.st != WEFT_OK && strstr(b.msg, "node 'deq' (dequeue)") && strstr(b.msg, "queue 'input'") &&
          strstr(b.msg, "closed"));
    weft_graph_free(c.g);
    weft_queue_free(q);
}

// Passes keep the enqueue (a side effect) and copy both nodes with their queue;
// graphs with queue nodes are refused by save; DOT names the kinds; bad builds name the node.
static void test_queue_nodes_passes_save_dot_errors(void) {
    weft_queue *q = vec_queue(4, 4, "q");
    producer p;
    consumer c;
    producer_build(&p, q);
    consumer_build(&c, q);
    weft_graph_pass_stats st;
    weft_graph *po = weft_graph_optimize(p.g, 0, NULL, NULL, NULL, &st);
    weft_value ck[1] = {c.out}, cko[1];
    weft_graph *co = weft_graph_optimize(c.g, 1, ck, cko, NULL, NULL);
    CHECK(po && co);
    weft_node_id enq = po ? weft_graph_find_node(po, "enq") : WEFT_NODE_NONE;
    CHECK(enq.id >= 0 && weft_graph_node_kind(po, enq) == WEFT_NODE_ENQUEUE);
    CHECK(co && weft_graph_find_node(co, "deq").id >= 0);
    weft_graph_free(p.g); // the optimised graphs hold their own references
    weft_graph_free(c.g);
    if (po && co) {
        double v[4] = {1, 2, 3, 4};
        weft_tensor *x = weft_tensor_from_data(v, WEFT_DIMS(4), WEFT_F64), *o = NULL;
        weft_value xv = weft_graph_find_value(po, "x");
        CHECK(weft_graph_run(po, 1, &xv, &x, 0, NULL, NULL, 1, &enq) == WEFT_OK);
        v[0] = 100; // the queue holds a copy, not the fed tensor
        weft_tensor_free(x);
        x = weft_tensor_from_data(v, WEFT_DIMS(4), WEFT_F64);
        CHECK(weft_graph_run(co, 0, NULL, NULL, 1, cko, &o, 0, NULL) == WEFT_OK);
        double r[4] = {0};
        if (o) weft_tensor_to_f64(o, r, 4);
        CHECK(r[0] == 3 && r[3] == 9);
        weft_tensor_free(o);
        weft_tensor_free(x);
        CHECK(weft_graph_save(po, "/tmp/weft_never_written.wgraph") != WEFT_OK);
        CHECK(wt_error_has("node 'enq'") && wt_error_has("enqueue"));
        CHECK(weft_graph_save(co, "/tmp/weft_never_written.wgraph") != WEFT_OK);
        CHECK(wt_error_has("node 'deq'"));
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        CHECK(weft_graph_write_dot(po, f) == WEFT_OK);
        fclose(f);
        CHECK(buf && strstr(buf, "enq\\nenqueue"));
        free(buf);
    }
    // Build errors name the node and the queue.
    weft_graph *g = weft_graph_new();
    weft_value bad = weft_graph_placeholder(g, "b", WEFT_DIMS(5), WEFT_F64);
    CHECK(weft_graph_enqueue(g, "e", q, 1, &bad).id < 0 && wt_error_has("'e'") && wt_error_has("queue 'q'"));
    CHECK(weft_graph_enqueue(g, "e", q, 2, (weft_value[]){bad, bad}).id < 0 && wt_error_has("2 values"));
    CHECK(weft_graph_enqueue(g, "e", NULL, 1, &bad).id < 0 && wt_error_has("NULL queue"));
    weft_queue *anyq = weft_queue_create(2, 1, (weft_dtype[]){WEFT_F64}, NULL, NULL, "any");
    weft_value d;
    CHECK(weft_graph_dequeue(g, "d", anyq, &d).id < 0 && wt_error_has("'d'") && wt_error_has("no fixed shape"));
    weft_queue_free(anyq);
    weft_graph_free(g);
    weft_graph_free(po);
    weft_graph_free(co);
    weft_queue_free(q);
}

// ---- an input pipeline: a producer thread enqueues batches, the step graph
// dequeues one and trains a small MLP on it (forward, hand-written backward,
// SGD assigns) each run.
enum { B = 32, IN = 4, HID = 16, CLS = 3, STEPS = 60 };

typedef struct feeder {
    weft_queue *q;
    int n;
} feeder;

static void make_batch(int step, weft_tensor **x, weft_tensor **y) {
    double xv[B * IN], noise[B * IN];
    int64_t yv[B];
    wt_vals(noise, B * IN, -0.5, 0.5, 1000 + (uint64_t)step);
    for (int i = 0; i < B; i++) {
        int c = (i * 7 + step) % CLS;
        yv[i] = c;
        for (int j = 0; j < IN; j++) xv[i * IN + j] = (j == c ? 1.5 : 0.0) - (j == 3 ? 0.5 * c : 0.0) + noise[i * IN + j];
    }
    *x = weft_tensor_from_data(xv, WEFT_DIMS(B, IN), WEFT_F64);
    *y = weft_tensor_from_data(yv, WEFT_DIMS(B), WEFT_I64);
}

static void *feeder_main(void *arg) {
    feeder *f = arg;
    for (int s = 0; s < f->n; s++) {
        weft_tensor *e[2];
        make_batch(s, &e[0], &e[1]);
        weft_status st = weft_queue_enqueue(f->q, e, -1);
        weft_tensor_free(e[0]);
        weft_tensor_free(e[1]);
        if (st != WEFT_OK) break;
    }
    weft_queue_close(f->q, false); // end of data
    return NULL;
}

static weft_value gop(weft_graph *g, const char *op, int n, const weft_value *in, const int64_t *ia, int nia) {
    return weft_graph_op1(g, op, n, in, ia, nia, NULL, 0);
}

static void test_queue_input_pipeline_training(void) {
    int nd[2] = {2, 1};
    const int64_t *sizes[2] = {(int64_t[]){B, IN}, (int64_t[]){B}};
    weft_queue *q = weft_queue_create(3, 2, (weft_dtype[]){WEFT_F64, WEFT_I64}, nd, sizes, "batches");
    weft_graph *g = weft_graph_new();
    weft_value xy[2];
    CHECK(weft_graph_dequeue(g, "batch", q, xy).id >= 0);
    weft_tensor *w1 = wt_rand64(2, (int64_t[]){IN, HID}, -0.5, 0.5, 1, false), *w2 = wt_rand64(2, (int64_t[]){HID, CLS}, -0.5, 0.5, 2, false);
    weft_tensor *b1 = weft_tensor_zeros(WEFT_DIMS(HID), WEFT_F64), *b2 = weft_tensor_zeros(WEFT_DIMS(CLS), WEFT_F64);
    weft_tensor *one_t = weft_tensor_scalar(1.0, WEFT_F64);
    weft_value W1 = weft_graph_variable(g, "w1", w1), B1 = weft_graph_variable(g, "b1", b1);
    weft_value W2 = weft_graph_variable(g, "w2", w2), B2 = weft_graph_variable(g, "b2", b2);
    weft_value one = weft_graph_constant(g, "one", one_t);
    int64_t tr[2] = {1, 0}, ax0[2] = {1, 0};
    weft_value X = xy[0], Y = xy[1];
    weft_value H = gop(g, "add", 2, (weft_value[]){gop(g, "matmul", 2, (weft_value[]){X, W1}, NULL, 0), B1}, NULL, 0);
    weft_value A = gop(g, "relu", 1, &H, NULL, 0);
    weft_value L = gop(g, "add", 2, (weft_value[]){gop(g, "matmul", 2, (weft_value[]){A, W2}, NULL, 0), B2}, NULL, 0);
    weft_value loss = gop(g, "cross_entropy", 2, (weft_value[]){L, Y}, NULL, 0);
    weft_value dL = gop(g, "cross_entropy_backward", 3, (weft_value[]){L, Y, one}, NULL, 0);
    weft_value dW2 = gop(g, "matmul", 2, (weft_value[]){gop(g, "permute", 1, &A, tr, 2), dL}, NULL, 0);
    weft_value dB2 = gop(g, "sum", 1, &dL, ax0, 2);
    weft_value dA = gop(g, "matmul", 2, (weft_value[]){dL, gop(g, "permute", 1, &W2, tr, 2)}, NULL, 0);
    weft_value dH = gop(g, "relu_backward", 2, (weft_value[]){dA, H}, NULL, 0);
    weft_value dW1 = gop(g, "matmul", 2, (weft_value[]){gop(g, "permute", 1, &X, tr, 2), dH}, NULL, 0);
    weft_value dB1 = gop(g, "sum", 1, &dH, ax0, 2);
    CHECK(dB1.id >= 0 && dW1.id >= 0 && dB2.id >= 0 && dW2.id >= 0);
    weft_value vars[4] = {W1, B1, W2, B2}, grads[4] = {dW1, dB1, dW2, dB2};
    weft_node_id targets[4];
    double lr = -0.5;
    for (int k = 0; k < 4; k++) {
        weft_value step = weft_graph_op1(g, "mul_scalar", 1, &grads[k], NULL, 0, &lr, 1);
        weft_value a = weft_graph_assign_add(g, NULL, vars[k], step);
        targets[k] = weft_graph_value_node(g, a);
        // Variables are read by reference: every update waits for every gradient.
        for (int j = 0; j < 4; j++) weft_graph_add_control_dep(g, targets[k], weft_graph_value_node(g, grads[j]));
        weft_graph_add_control_dep(g, targets[k], weft_graph_value_node(g, dA));
    }
    feeder f = {.q = q, .n = STEPS};
    pthread_t t;
    pthread_create(&t, NULL, feeder_main, &f);
    double first = 0, last = 0;
    int ok_runs = 0;
    for (int s = 0; s < STEPS; s++) {
        weft_tensor *lt = NULL;
        if (weft_graph_run(g, 0, NULL, NULL, 1, &loss, &lt, 4, targets) != WEFT_OK) break;
        double l = weft_tensor_item(lt);
        weft_tensor_free(lt);
        if (s < 5) first += l / 5;
        if (s >= STEPS - 5) last += l / 5;
        ok_runs++;
    }
    CHECK(ok_runs == STEPS);
    // One more run: the feeder closed the queue after the last batch.
    weft_tensor *lt = NULL;
    CHECK(weft_graph_run(g, 0, NULL, NULL, 1, &loss, &lt, 4, targets) != WEFT_OK);
    CHECK(wt_error_has("node 'batch'") && wt_error_has("closed"));
    pthread_join(t, NULL);
    printf("  input pipeline: mean loss of the first 5 steps %.4f, of the last 5 %.4f\n", first, last);
    CHECK(last < 0.5 * first);
    weft_tensor *wv = weft_graph_variable_tensor(g, W1);
    CHECK(wv && !same_bits(wv, w1)); // trained in place
    weft_graph_free(g);
    weft_queue_free(q);
    weft_tensor_free(w1), weft_tensor_free(w2), weft_tensor_free(b1), weft_tensor_free(b2), weft_tensor_free(one_t);
}

int main(void) {
    RUN(test_dropout_fresh_mask_per_run);
    RUN(test_dropout_counter_saved);
    RUN(test_dropout_identity_cases);
    RUN(test_dropout_not_folded);
    RUN(test_batch_norm_running_stats);
    RUN(test_queue_order_and_backpressure);
    RUN(test_queue_close_wakes_consumer);
    RUN(test_queue_nodes_passes_save_dot_errors);
    RUN(test_queue_input_pipeline_training);
    return wt_summary();
}
