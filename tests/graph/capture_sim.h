// A simulated CUDA-graph capture for the mock accelerator (tests/mock_device.c),
// so the graph executor's capture and replay (src/graph/capture.c) run on
// machines without a GPU.
//
// It does what a CUDA stream capture does, one level up: between
// capture_begin and capture_end, every kernel of the CUDA column of the op
// table, every same-device copy and every device memset is RECORDED (the op,
// its attrs, references to its input and output tensors; the fused op's
// program copied, as kernel parameters are) instead of run; a launch runs the
// records in order on whatever the recorded tensors hold then. Copies
// between host and device memory fail while recording, as in the CUDA
// backend. sim.refuse names an op whose kernel "reads the host" (fails while
// recording, as a kernel that waits for the device would on a GPU); sim.fail_end
// makes the next capture_end fail (an invalidated capture).
//
// What it cannot check: CUDA's own rules and the CUDA backend's memory
// holding (src/device/cuda/cuda_device.c): records keep their tensors alive.
// On a real GPU the tests use the real capture instead (sim_install is not called).
#ifndef WEFT_TEST_CAPTURE_SIM_H
#define WEFT_TEST_CAPTURE_SIM_H

#include <stdlib.h>
#include <string.h>

#include "device/device_impl.h"
#include "ops/fused.h"
#include "ops/op.h"
#include "tensor/tensor_impl.h"

weft_status weft_cpu_copy(weft_tensor *dst, const weft_tensor *src); // src/ops/cpu/copy.c

enum { SIM_KERNEL, SIM_COPY, SIM_MEMSET, SIM_RAW_COPY };

typedef struct sim_rec {
    int kind;
    const weft_op_def *op;
    weft_kernel_fn fn;
    int n_in, n_out;
    weft_tensor **in, *out[WEFT_MAX_OP_OUT];
    weft_attrs attrs;
    weft_ew_prog *prog; // fused_elementwise: its program, copied
    weft_tensor *dst;
    const weft_tensor *src;
    void *p;
    const void *q;
    int value;
    size_t n;
} sim_rec;

typedef struct sim_graph {
    sim_rec *r;
    int n, cap;
} sim_graph;

static struct {
    bool installed, recording;
    sim_graph *cur;
    const char *refuse; // op name whose kernel fails while recording
    bool fail_end;      // the next capture_end fails
    int begins, ends, kept, launches, destroys, live;
    weft_kernel real[512]; // the mock's CUDA column, by op index
    const weft_device_impl *mock;
    weft_device_impl impl;
} sim;

static sim_rec *sim_push(void) {
    sim_graph *g = sim.cur;
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 64;
        g->r = realloc(g->r, (size_t)g->cap * sizeof *g->r);
    }
    sim_rec *r = &g->r[g->n++];
    memset(r, 0, sizeof *r);
    return r;
}

static int sim_op_index(const weft_op_def *op) {
    for (int i = 0; weft_op_at(i); i++)
        if (weft_op_at(i) == op) return i;
    return -1;
}

static weft_status sim_kernel(const weft_op_args *a) {
    int i = sim_op_index(a->op);
    if (i < 0) return weft_error(WEFT_ERR_STATE, "sim: unknown op");
    if (!sim.recording) return sim.real[i].fn(a);
    if (sim.refuse && !strcmp(a->op->name, sim.refuse))
        return weft_error(WEFT_ERR_STATE, "sim: %s reads a value back to the host", a->op->name);
    sim_rec *r = sim_push();
    r->kind = SIM_KERNEL, r->op = a->op, r->fn = sim.real[i].fn, r->n_in = a->n_in, r->n_out = a->n_out;
    r->in = calloc((size_t)a->n_in + 1, sizeof *r->in);
    for (int k = 0; k < a->n_in; k++) r->in[k] = weft_tensor_ref(a->in[k]);
    for (int j = 0; j < a->n_out; j++) r->out[j] = weft_tensor_ref(a->out[j]);
    r->attrs = *a->attrs;
    if (a->op == &weft_op_fused_elementwise) { // the program lives on the caller's stack: copy it
        r->prog = malloc(sizeof *r->prog);
        memcpy(r->prog, (const void *)(intptr_t)a->attrs->i[0], sizeof *r->prog);
        r->attrs.i[0] = (int64_t)(intptr_t)r->prog;
    }
    return WEFT_OK;
}

static weft_status sim_copy(weft_tensor *dst, const weft_tensor *src) {
    if (!sim.recording) return weft_cpu_copy(dst, src);
    sim_rec *r = sim_push();
    r->kind = SIM_COPY, r->dst = weft_tensor_ref(dst), r->src = weft_tensor_ref((weft_tensor *)src);
    return WEFT_OK;
}

static weft_status sim_memset(int index, void *p, int v, size_t n) {
    if (!sim.recording) return sim.mock->memset(index, p, v, n);
    sim_rec *r = sim_push();
    r->kind = SIM_MEMSET, r->p = p, r->value = v, r->n = n;
    return WEFT_OK;
}

static weft_status sim_raw_copy(int index, void *dst, const void *src, size_t n, weft_copy_kind kind) {
    if (!sim.recording) return sim.mock->copy(index, dst, src, n, kind);
    if (kind != WEFT_COPY_D2D)
        return weft_error(WEFT_ERR_STATE, "sim: a copy between host and device memory cannot be captured");
    sim_rec *r = sim_push();
    r->kind = SIM_RAW_COPY, r->p = dst, r->q = src, r->n = n;
    return WEFT_OK;
}

static void sim_graph_free(sim_graph *g) {
    for (int i = 0; g && i < g->n; i++) {
        sim_rec *r = &g->r[i];
        for (int k = 0; k < r->n_in; k++) weft_tensor_free(r->in[k]);
        for (int j = 0; j < r->n_out; j++) weft_tensor_free(r->out[j]);
        free(r->in);
        free(r->prog);
        weft_tensor_free(r->dst);
        weft_tensor_free((weft_tensor *)r->src);
    }
    if (g) free(g->r);
    free(g);
}

static weft_status sim_begin(int index) {
    (void)index;
    if (sim.recording) return weft_error(WEFT_ERR_STATE, "sim: already recording");
    sim.recording = true;
    sim.cur = calloc(1, sizeof *sim.cur);
    sim.begins++;
    return WEFT_OK;
}

static weft_status sim_end(int index, bool keep, void **graph) {
    (void)index;
    *graph = NULL;
    if (!sim.recording) return weft_error(WEFT_ERR_STATE, "sim: not recording");
    sim.recording = false;
    sim.ends++;
    if (sim.fail_end) {
        sim.fail_end = false;
        sim_graph_free(sim.cur);
        return weft_error(WEFT_ERR_DEVICE, "sim: the capture was invalidated");
    }
    if (keep) *graph = sim.cur, sim.kept++, sim.live++;
    else sim_graph_free(sim.cur);
    sim.cur = NULL;
    return WEFT_OK;
}

static weft_status sim_launch(int index, void *graph) {
    sim_graph *g = graph;
    sim.launches++;
    for (int i = 0; i < g->n; i++) {
        sim_rec *r = &g->r[i];
        weft_status st = WEFT_OK;
        if (r->kind == SIM_KERNEL) {
            weft_op_args a = {.op = r->op, .n_in = r->n_in, .in = r->in, .attrs = &r->attrs, .n_out = r->n_out,
                              .out = r->out};
            st = r->fn(&a);
        } else if (r->kind == SIM_COPY) {
            st = weft_cpu_copy(r->dst, r->src);
        } else if (r->kind == SIM_MEMSET) {
            st = sim.mock->memset(index, r->p, r->value, r->n);
        } else {
            st = sim.mock->copy(index, r->p, r->q, r->n, WEFT_COPY_D2D);
        }
        if (st != WEFT_OK) return st;
    }
    return WEFT_OK;
}

static void sim_destroy(int index, void *graph) {
    (void)index;
    sim.destroys++, sim.live--;
    sim_graph_free(graph);
}

static void sim_reset_counts(void) {
    sim.begins = sim.ends = sim.kept = sim.launches = sim.destroys = 0;
    sim.refuse = NULL;
    sim.fail_end = false;
}

// Install over the mock accelerator (call after wt_accelerator gave a mock).
static void sim_install(void) {
    if (sim.installed) return;
    weft_device d = {WEFT_CUDA, 0};
    sim.mock = weft_device_impl_get(d);
    sim.impl = *sim.mock;
    sim.impl.memset = sim_memset;
    sim.impl.copy = sim_raw_copy;
    sim.impl.capture_begin = sim_begin;
    sim.impl.capture_end = sim_end;
    sim.impl.graph_launch = sim_launch;
    sim.impl.graph_destroy = sim_destroy;
    weft_device_register(WEFT_CUDA, &sim.impl);
    for (int i = 0; weft_op_at(i) && i < 512; i++) {
        const weft_op_def *op = weft_op_at(i);
        sim.real[i] = op->kernel[WEFT_CUDA];
        if (sim.real[i].fn) weft_op_register_kernel(op->name, WEFT_CUDA, sim_kernel, sim.real[i].dtypes);
    }
    weft_tensor_copy_register(WEFT_CUDA, sim_copy);
    sim.installed = true;
    sim_reset_counts();
}

// Back to the plain mock (no capture members).
static void sim_uninstall(void) {
    if (!sim.installed) return;
    for (int i = 0; weft_op_at(i) && i < 512; i++)
        if (sim.real[i].fn) weft_op_register_kernel(weft_op_at(i)->name, WEFT_CUDA, sim.real[i].fn, sim.real[i].dtypes);
    weft_tensor_copy_register(WEFT_CUDA, weft_cpu_copy);
    weft_device_register(WEFT_CUDA, sim.mock);
    sim.installed = false;
}

#endif
