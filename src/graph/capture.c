// CUDA Graphs for graph mode: a planned serial run on a device that can
// capture (weft_device_impl's capture members; the CUDA backend) is recorded
// once and then replayed each run as a few graph launches instead of one
// launch per kernel. Small-kernel steps are bound by launches on a GPU;
// a replay costs one launch per captured segment.
//
// Why this is sound: every address a recorded kernel touches is the same in
// each run. Intermediates live in the memory plan's arena, which the capture
// keeps from run to run (same offsets: the plan belongs to the same run-cache
// entry); variables and constants are the graph's own tensors; placeholders
// read fixed buffers that each run first copies its feeds into (on the
// run's stream, before the replay). Kernels' temporaries made while
// recording stay reserved for the graph (the device layer holds their frees).
//
// Runs of one run-cache entry go through three states:
// 1. probe (the first run): every node runs plainly, and each node that
//    queues device work is also recorded alone and the recording dropped.
//    A node whose recording fails (a kernel that waits for the device or
//    reads a value back to the host, or copies to or from host memory) runs
//    plainly from then on. Some nodes run plainly by rule: control flow and
//    queues (the host decides and allocates), random ops (a new seed each
//    run), nodes reading what those make anew each run, and outputs outside
//    the plan. The other steps form segments (maximal runs of capturable
//    steps with at least two that queue work).
// 2. record (the second run): each segment is recorded as one graph and
//    launched; plain steps run between them as usual. If anything fails the
//    segment's steps are rerun plainly (nothing recorded has run) and the
//    entry stops capturing.
// 3. replay: segments are launched; only plain steps run through the host.
//    Values leaving a segment for a plain step or a fetch are published as
//    the tensors the recording run made (same memory).
// WEFT_CUDA_GRAPHS=0 turns it off; WEFT_CUDA_GRAPHS_DEBUG=1 prints what was
// captured and why steps run plainly (also weft_graph_capture_last).
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../device/device_impl.h"
#include "run_impl.h"

enum { K_PROBE, K_RECORD, K_REPLAY, K_OFF };
#define MIN_SEG_WORK 2 // a graph of one kernel saves nothing

typedef struct seg {
    int first, last; // steps
    void *graph;
} seg;

struct weft_capture {
    int state;
    weft_device dev;
    int n_order, n_values;
    int64_t arena_bytes;
    weft_tensor *arena;
    weft_tensor **fixed; // [values] a placeholder's fixed buffer
    weft_tensor **saved; // [values] a value leaving a segment: the recording run's tensor
    uint8_t *escapes;    // [values] read by a plain step or fetched, made in a segment
    uint8_t *plain;      // [n_order] the step runs plainly
    int32_t *seg_of;     // [n_order] its segment, -1
    seg *segs;
    int n_seg;
    char why[320];
};

static void note(weft_capture *k, const char *fmt, ...) {
    size_t n = strlen(k->why);
    if (n + 8 >= sizeof k->why) return;
    if (n) n += (size_t)snprintf(k->why + n, sizeof k->why - n, "; ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->why + n, sizeof k->why - n, fmt, ap);
    va_end(ap);
}

static bool debug_on(void) {
    const char *e = getenv("WEFT_CUDA_GRAPHS_DEBUG");
    return e && *e && strcmp(e, "0");
}

// Everything but the state and why: graphs (after their runs), memory.
static void release(weft_capture *k) {
    for (int i = 0; i < k->n_seg; i++) weft_device_graph_destroy(k->dev, k->segs[i].graph);
    for (int v = 0; v < k->n_values; v++) {
        if (k->fixed) weft_tensor_free(k->fixed[v]);
        if (k->saved) weft_tensor_free(k->saved[v]);
    }
    weft_tensor_free(k->arena);
    free(k->fixed), free(k->saved), free(k->escapes), free(k->plain), free(k->seg_of), free(k->segs);
    k->fixed = k->saved = NULL, k->escapes = k->plain = NULL, k->seg_of = NULL, k->segs = NULL;
    k->arena = NULL;
    k->n_seg = 0;
}

void weft_capture_free(weft_capture *k) {
    if (!k) return;
    release(k);
    free(k);
}

// Stop capturing this entry for good (its runs are plain from now on), keeping why.
static void turn_off(weft_capture *k) {
    release(k);
    k->state = K_OFF;
    if (debug_on()) fprintf(stderr, "graph_run: CUDA graphs: not for these fetches of this graph: %s\n", k->why);
}

bool weft_capture_wanted(const run_ctx *c, weft_capture **kp, const char **why) {
    *why = NULL;
    weft_capture *k = *kp;
    const char *e = getenv("WEFT_CUDA_GRAPHS"), *sync = getenv("WEFT_CUDA_SYNC");
    if (c->dev.type == WEFT_CPU || (e && !strcmp(e, "0")) || (sync && *sync == '1') ||
        !weft_device_can_capture(c->dev)) {
        if (c->dev.type != WEFT_CPU)
            *why = e && !strcmp(e, "0") ? "WEFT_CUDA_GRAPHS=0"
                   : sync && *sync == '1' ? "WEFT_CUDA_SYNC=1 waits for every kernel"
                                          : "the device has no graph capture";
        weft_capture_free(k); // switched off: a later run probes afresh
        *kp = NULL;
        return false;
    }
    if (k && k->state == K_OFF) {
        *why = k->why;
        return false;
    }
    return true;
}

weft_tensor *weft_capture_arena(weft_capture **kp, run_ctx *c, int64_t bytes) {
    weft_capture *k = *kp;
    int nV = c->g->n_values;
    if (k && (!weft_device_equal(k->dev, c->dev) || k->arena_bytes != bytes || k->n_order != c->n_order ||
              k->n_values != nV)) {
        weft_capture_free(k);
        *kp = k = NULL;
    }
    if (!k) {
        size_t nv = (size_t)(nV ? nV : 1), no = (size_t)(c->n_order ? c->n_order : 1);
        k = calloc(1, sizeof *k);
        if (!k) return weft_error_null(WEFT_ERR_OOM, "graph_run: out of memory");
        k->dev = c->dev, k->n_order = c->n_order, k->n_values = nV, k->arena_bytes = bytes;
        k->fixed = calloc(nv, sizeof *k->fixed);
        k->saved = calloc(nv, sizeof *k->saved);
        k->escapes = calloc(nv, 1);
        k->plain = calloc(no, 1);
        k->seg_of = malloc(no * sizeof *k->seg_of);
        k->arena = k->fixed && k->saved && k->escapes && k->plain && k->seg_of
                       ? weft_tensor_new(1, &bytes, WEFT_U8, c->dev)
                       : weft_error_null(WEFT_ERR_OOM, "graph_run: out of memory");
        if (!k->arena) {
            weft_capture_free(k);
            return NULL;
        }
        *kp = k;
    }
    return weft_tensor_ref(k->arena);
}

// Feeds go into the fixed buffers (queued on the run's stream before any
// kernel of this run), which the placeholders then hand out.
static weft_status feed_fixed(weft_capture *k, run_ctx *c) {
    const weft_graph *g = c->g;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const weft_gnode *n = &g->nodes[i];
        if (!c->needed[i] || n->kind != WEFT_NODE_PLACEHOLDER) continue;
        int32_t v = n->out0;
        const weft_gvalue *gv = &g->values[v];
        if (!k->fixed[v] && !(k->fixed[v] = weft_tensor_new(gv->ndim, gv->sizes, (weft_dtype)gv->dtype, k->dev)))
            return weft_last_status();
        weft_status st = weft_tensor_copy_(k->fixed[v], c->feed[v]);
        if (st != WEFT_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", weft_last_error());
            return weft_error(st, "graph_run: placeholder '%s': %s", n->name, msg);
        }
        c->feed[v] = k->fixed[v];
        weft_run_mark_ext(c, k->fixed[v]->storage);
    }
    return WEFT_OK;
}

// Does the node queue device work when it runs?
static bool queues_work(const weft_gnode *n) {
    switch (n->kind) {
    case WEFT_NODE_PLACEHOLDER: // its fixed buffer, as it is
    case WEFT_NODE_CONSTANT:
    case WEFT_NODE_VARIABLE:
        return false;
    case WEFT_NODE_OP:
        return !(n->op->flags & WEFT_OPF_VIEW);
    default:
        return true;
    }
}

// The steps that run plainly by rule (see the top of the file).
static weft_status static_rules(weft_capture *k, const run_ctx *c) {
    const weft_graph *g = c->g;
    uint8_t *fresh = calloc((size_t)g->n_values + 1, 1); // memory made anew each run
    if (!fresh) return weft_error(WEFT_ERR_OOM, "graph_run: out of memory");
    for (int s = 0; s < c->n_order; s++) {
        const weft_gnode *n = &g->nodes[c->order[s]];
        const char *why = NULL;
        bool outs_fresh = false;
        if (n->kind == WEFT_NODE_COND || n->kind == WEFT_NODE_WHILE || n->kind == WEFT_NODE_ENQUEUE ||
            n->kind == WEFT_NODE_DEQUEUE)
            why = "control flow and queues run on the host", outs_fresh = true;
        else if (n->kind == WEFT_NODE_OP && (n->op->flags & WEFT_OPF_RANDOM))
            why = "a new random seed each run";
        for (int i = 0; i < n->n_in && !why; i++)
            if (fresh[n->in[i]]) why = "reads memory made anew each run";
        if (n->kind == WEFT_NODE_OP && (n->op->flags & WEFT_OPF_VIEW)) {
            outs_fresh = n->n_in > 0 && fresh[n->in[0]];
        } else if (n->kind == WEFT_NODE_OP || n->kind == WEFT_NODE_FUSED) {
            for (int j = 0; j < n->n_out; j++) {
                int32_t v = n->out0 + j;
                bool in_var = n->kind == WEFT_NODE_OP && c->inplace && weft_run_inplace_var(c, v);
                if (c->plan.offset[v] < 0 && !in_var) {
                    why = why ? why : "an output outside the memory plan";
                    outs_fresh = true;
                }
            }
        }
        if (outs_fresh)
            for (int j = 0; j < n->n_out; j++) fresh[n->out0 + j] = 1;
        if (why) {
            k->plain[s] = 1;
            if (queues_work(n)) note(k, "'%s' (%s): %s", n->name, n->op ? n->op->name : weft_graph_kind_name(n->kind), why);
        }
    }
    free(fresh);
    return WEFT_OK;
}

// Record node id alone and drop the recording: can it be captured? (The
// node has already run plainly; its inputs are still live.)
static bool probe(weft_capture *k, run_ctx *c, int32_t id) {
    weft_graph *g = c->g;
    uint64_t iw = g->stats.inplace_writes;
    weft_tensor *tmp[WEFT_NODE_MAX_OUT] = {0};
    char msg[256] = "";
    bool named = false; // the message names the node already
    weft_status st = weft_device_capture_begin(k->dev);
    if (st == WEFT_OK) {
        st = weft_run_exec_node(c, id, tmp);
        if (st != WEFT_OK) snprintf(msg, sizeof msg, "%s", weft_last_error()), named = true;
        for (int j = 0; j < WEFT_NODE_MAX_OUT; j++) weft_tensor_free(tmp[j]);
        weft_status se = weft_device_capture_end(k->dev, false, NULL);
        if (st == WEFT_OK && se != WEFT_OK) st = se, snprintf(msg, sizeof msg, "%s", weft_last_error());
    } else {
        snprintf(msg, sizeof msg, "%s", weft_last_error());
    }
    g->stats.inplace_writes = iw;
    if (st == WEFT_OK) return true;
    const weft_gnode *n = &g->nodes[id];
    if (named) note(k, "%s", msg);
    else note(k, "'%s' (%s): %s", n->name, n->op ? n->op->name : weft_graph_kind_name(n->kind), msg);
    weft_clear_error();
    return false;
}

static weft_status run_step(run_ctx *c, int32_t id) {
    weft_tensor *outs[WEFT_NODE_MAX_OUT] = {0};
    weft_status st = weft_run_exec_node(c, id, outs);
    if (st == WEFT_OK) weft_run_commit_node(c, id, outs);
    return st;
}

// Segments from k->plain, and the values that leave them.
static weft_status make_segments(weft_capture *k, const run_ctx *c) {
    const weft_graph *g = c->g;
    int n = c->n_order;
    k->segs = malloc(((size_t)n / 2 + 1) * sizeof *k->segs);
    int32_t *step_of = malloc(((size_t)g->n_nodes + 1) * sizeof *step_of);
    if (!k->segs || !step_of) {
        free(step_of);
        return weft_error(WEFT_ERR_OOM, "graph_run: out of memory");
    }
    for (int s = 0; s < n; s++) k->seg_of[s] = -1, step_of[c->order[s]] = s;
    for (int s = 0; s < n;) {
        if (k->plain[s]) {
            s++;
            continue;
        }
        int e = s, work = 0;
        for (; e < n && !k->plain[e]; e++) work += queues_work(&g->nodes[c->order[e]]);
        if (work >= MIN_SEG_WORK) {
            k->segs[k->n_seg] = (seg){.first = s, .last = e - 1};
            for (int t = s; t < e; t++) k->seg_of[t] = k->n_seg;
            k->n_seg++;
        }
        s = e;
    }
    memset(k->escapes, 0, (size_t)k->n_values);
    for (int s = 0; s < n; s++) {
        const weft_gnode *x = &g->nodes[c->order[s]];
        for (int i = 0; i < x->n_in && k->seg_of[s] < 0; i++)
            if (k->seg_of[step_of[g->values[x->in[i]].node]] >= 0) k->escapes[x->in[i]] = 1;
    }
    for (int v = 0; v < g->n_values; v++)
        if (c->fetched[v] && c->needed[g->values[v].node] && k->seg_of[step_of[g->values[v].node]] >= 0)
            k->escapes[v] = 1;
    free(step_of);
    return WEFT_OK;
}

static weft_status run_probe(weft_capture *k, run_ctx *c) {
    weft_graph *g = c->g;
    weft_status st = static_rules(k, c);
    int n_plain = 0;
    for (int s = 0; s < c->n_order && st == WEFT_OK; s++) {
        int32_t id = c->order[s];
        weft_tensor *outs[WEFT_NODE_MAX_OUT] = {0};
        if ((st = weft_run_exec_node(c, id, outs)) != WEFT_OK) break;
        if (!k->plain[s] && queues_work(&g->nodes[id]) && !probe(k, c, id)) k->plain[s] = 1;
        weft_run_commit_node(c, id, outs);
        n_plain += k->plain[s] && queues_work(&g->nodes[id]);
    }
    if (st == WEFT_OK) st = make_segments(k, c);
    if (st != WEFT_OK) return st;
    g->cap_stats.mode = 1;
    g->cap_stats.plain_steps = n_plain;
    if (k->n_seg == 0) {
        note(k, "no two steps in a row can be captured");
        turn_off(k);
    } else {
        k->state = K_RECORD;
        if (debug_on()) {
            int cap = 0;
            for (int i = 0; i < k->n_seg; i++) cap += k->segs[i].last - k->segs[i].first + 1;
            fprintf(stderr, "graph_run: CUDA graphs: %d segments hold %d of %d steps; %d steps with device work run "
                            "plainly%s%s\n", k->n_seg, cap, c->n_order, n_plain, *k->why ? ": " : "", k->why);
        }
    }
    return WEFT_OK;
}

// Segment q failed at step t (not committed; q->last + 1: every step
// committed, the recording or its launch failed). Nothing recorded ran:
// rerun the committed steps plainly into the same memory, then the rest.
static weft_status recover(run_ctx *c, const seg *q, int t) {
    weft_graph *g = c->g;
    uint64_t iw = g->stats.inplace_writes;
    weft_status st = WEFT_OK;
    for (int u = q->first; u < t && st == WEFT_OK; u++) {
        weft_tensor *tmp[WEFT_NODE_MAX_OUT] = {0};
        st = weft_run_exec_node(c, c->order[u], tmp); // the committed outputs name the same memory
        for (int j = 0; j < WEFT_NODE_MAX_OUT; j++) weft_tensor_free(tmp[j]);
    }
    g->stats.inplace_writes = iw;
    c->defer_drops = false;
    weft_run_flush_drops(c);
    for (int u = t; u <= q->last && st == WEFT_OK; u++) st = run_step(c, c->order[u]);
    return st;
}

static weft_status record_segment(weft_capture *k, run_ctx *c, seg *q, bool *failed) {
    weft_graph *g = c->g;
    char msg[256] = "";
    int t = q->first;
    weft_status st = weft_device_capture_begin(k->dev);
    if (st == WEFT_OK) {
        c->defer_drops = true;
        for (; t <= q->last && st == WEFT_OK; t++) {
            weft_tensor *outs[WEFT_NODE_MAX_OUT] = {0};
            if ((st = weft_run_exec_node(c, c->order[t], outs)) == WEFT_OK) weft_run_commit_node(c, c->order[t], outs);
        }
        if (st != WEFT_OK) t--; // the failing step
        void *graph = NULL;
        if (st != WEFT_OK) snprintf(msg, sizeof msg, "%s", weft_last_error());
        weft_status se = weft_device_capture_end(k->dev, st == WEFT_OK, &graph);
        if (st == WEFT_OK && se == WEFT_OK && (se = weft_device_graph_launch(k->dev, graph)) != WEFT_OK)
            weft_device_graph_destroy(k->dev, graph);
        if (st == WEFT_OK && se != WEFT_OK) st = se, snprintf(msg, sizeof msg, "%s", weft_last_error());
        if (st == WEFT_OK) q->graph = graph;
    } else {
        snprintf(msg, sizeof msg, "%s", weft_last_error());
    }
    if (st != WEFT_OK) {
        note(k, "recording steps %d..%d failed: %s", q->first, q->last, msg);
        weft_clear_error();
        *failed = true;
        return recover(c, q, t);
    }
    for (int u = q->first; u <= q->last; u++) {
        const weft_gnode *n = &g->nodes[c->order[u]];
        for (int j = 0; j < n->n_out; j++) {
            int32_t v = n->out0 + j;
            if (k->escapes[v] && c->vals[v] && !k->saved[v]) k->saved[v] = weft_tensor_ref(c->vals[v]);
        }
    }
    c->defer_drops = false;
    weft_run_flush_drops(c);
    g->cap_stats.graphs++;
    g->cap_stats.captured_steps += q->last - q->first + 1;
    return WEFT_OK;
}

static weft_status run_record(weft_capture *k, run_ctx *c) {
    weft_graph *g = c->g;
    bool failed = false;
    weft_status st = WEFT_OK;
    g->cap_stats.mode = 2;
    for (int s = 0; s < c->n_order && st == WEFT_OK; s++) {
        int q = k->seg_of[s];
        if (q >= 0 && !failed) {
            st = record_segment(k, c, &k->segs[q], &failed);
            s = k->segs[q].last;
            continue;
        }
        g->cap_stats.plain_steps += queues_work(&g->nodes[c->order[s]]);
        st = run_step(c, c->order[s]);
    }
    if (st != WEFT_OK) return st;
    if (failed) turn_off(k); // after the run's launches (destroying a graph waits for its run)
    else k->state = K_REPLAY;
    return WEFT_OK;
}

static weft_status run_replay(weft_capture *k, run_ctx *c) {
    weft_graph *g = c->g;
    g->cap_stats.mode = 3;
    for (int s = 0; s < c->n_order; s++) {
        int qi = k->seg_of[s];
        if (qi < 0) {
            g->cap_stats.plain_steps += queues_work(&g->nodes[c->order[s]]);
            weft_status st = run_step(c, c->order[s]);
            if (st != WEFT_OK) return st;
            continue;
        }
        const seg *q = &k->segs[qi];
        weft_status st = weft_device_graph_launch(k->dev, q->graph);
        if (st != WEFT_OK) return st;
        for (int u = q->first; u <= q->last; u++) {
            const weft_gnode *n = &g->nodes[c->order[u]];
            for (int j = 0; j < n->n_out; j++)
                if (k->saved[n->out0 + j]) weft_run_set_val(c, n->out0 + j, weft_tensor_ref(k->saved[n->out0 + j]));
        }
        g->cap_stats.graphs++;
        g->cap_stats.captured_steps += q->last - q->first + 1;
        s = q->last;
    }
    return WEFT_OK;
}

weft_status weft_capture_run(weft_capture **kp, run_ctx *c) {
    weft_capture *k = *kp;
    weft_status st = feed_fixed(k, c);
    if (st != WEFT_OK) return st;
    switch (k->state) {
    case K_PROBE: st = run_probe(k, c); break;
    case K_RECORD: st = run_record(k, c); break;
    default: st = run_replay(k, c); break;
    }
    snprintf(c->g->cap_stats.why, sizeof c->g->cap_stats.why, "%s", k->why);
    return st;
}
