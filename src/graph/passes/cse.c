// Common-subexpression elimination: an OP node with the same op, the same
// attrs (bytewise) and the same inputs as an earlier one is the same value
// (every op is a pure function of inputs and attrs; dropout carries its seed
// and counter in its attrs). Constants with the same dtype, shape and bytes
// merge too. The first node is kept; later ones forward to it.
#include <stdlib.h>
#include <string.h>

#include "../rewrite.h"

typedef struct cse_table {
    int32_t *slots; // dst node ids, -1 empty
    size_t cap;
    // Host copies of device constants, made once each (their bytes are
    // compared on the host; a device pointer is not host memory).
    weft_ptrmap host_of; // constant tensor -> index in host
    weft_tensor **host;
    int n_host, cap_host;
} cse_table;

static uint64_t mix(uint64_t h, uint64_t x) { return (h ^ x) * 1099511628211ull; }

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = mix(h, b[i]);
    return h;
}

// Constants are compared by contents only when laid out contiguously (and not
// too big to hash); others never merge.
static bool const_mergeable(const weft_tensor *t) {
    return t && weft_tensor_is_contiguous(t) && t->storage->data &&
           (size_t)t->numel * weft_dtype_size((weft_dtype)t->dtype) <= ((size_t)1 << 20);
}

// The bytes of constant x in host memory (a copy for a device constant), NULL on failure.
static const void *const_bytes(cse_table *t, const weft_tensor *x) {
    if (x->device.type == WEFT_CPU) return weft_tensor_ptr(x);
    int32_t i = weft_ptrmap_get(&t->host_of, x);
    if (i >= 0) return weft_tensor_ptr(t->host[i]);
    if (t->n_host == t->cap_host) {
        int cap = t->cap_host ? 2 * t->cap_host : 16;
        weft_tensor **q = realloc(t->host, (size_t)cap * sizeof *q);
        if (!q) return NULL;
        t->host = q, t->cap_host = cap;
    }
    weft_tensor *h = weft_tensor_to((weft_tensor *)x, WEFT_DEVICE_CPU);
    if (!h || !weft_ptrmap_put(&t->host_of, x, t->n_host)) {
        weft_tensor_free(h);
        weft_clear_error();
        return NULL;
    }
    t->host[t->n_host++] = h;
    return weft_tensor_ptr(h);
}

static uint64_t node_hash(cse_table *tb, const weft_gnode *n) {
    uint64_t h = 1469598103934665603ull;
    h = mix(h, (uint64_t)n->kind);
    if (n->kind == WEFT_NODE_CONSTANT) {
        const weft_tensor *t = n->tensor;
        const void *b = const_bytes(tb, t);
        h = mix(h, t->dtype);
        h = hash_bytes(h, t->sizes, sizeof(int64_t) * (size_t)t->ndim);
        return b ? hash_bytes(h, b, (size_t)t->numel * weft_dtype_size((weft_dtype)t->dtype)) : h;
    }
    h = mix(h, (uint64_t)(uintptr_t)n->op);
    h = hash_bytes(h, &n->attrs, sizeof n->attrs);
    for (int k = 0; k < n->n_in; k++) h = mix(h, (uint64_t)n->in[k]);
    return h;
}

static bool node_equal(cse_table *tb, const weft_gnode *a, const weft_gnode *b) {
    if (a->kind != b->kind) return false;
    if (a->kind == WEFT_NODE_CONSTANT) {
        const weft_tensor *x = a->tensor, *y = b->tensor;
        if (x->dtype != y->dtype || !weft_device_equal(x->device, y->device) ||
            !weft_shape_equal(x->ndim, x->sizes, y->ndim, y->sizes))
            return false;
        const void *bx = const_bytes(tb, x), *by = const_bytes(tb, y);
        return bx && by && !memcmp(bx, by, (size_t)x->numel * weft_dtype_size((weft_dtype)x->dtype));
    }
    return a->op == b->op && a->n_in == b->n_in && !memcmp(&a->attrs, &b->attrs, sizeof a->attrs) &&
           !memcmp(a->in, b->in, sizeof(int32_t) * (size_t)a->n_in);
}

// The dst node equal to `probe` (a node not in dst yet), or -1.
static int32_t find(cse_table *t, const weft_graph *dst, const weft_gnode *p) {
    for (size_t i = node_hash(t, p) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        int32_t id = t->slots[i];
        if (id < 0) return -1;
        if (node_equal(t, &dst->nodes[id], p)) return id;
    }
}

static void insert(cse_table *t, const weft_graph *dst, int32_t id) {
    size_t i = node_hash(t, &dst->nodes[id]) & (t->cap - 1);
    while (t->slots[i] >= 0) i = (i + 1) & (t->cap - 1);
    t->slots[i] = id;
}

static bool mergeable(const weft_gnode *n) {
    if (n->kind == WEFT_NODE_CONSTANT) return n->n_ctrl == 0 && const_mergeable(n->tensor);
    return weft_rw_rewritable(n);
}

weft_status weft_pass_cse(weft_rw *rw, weft_pass_io *io) {
    cse_table t = {0};
    t.cap = 64;
    while (t.cap < (size_t)rw->src->n_nodes * 2) t.cap *= 2;
    t.slots = malloc(t.cap * sizeof *t.slots);
    if (!t.slots) return weft_error(WEFT_ERR_OOM, "graph_optimize: out of memory");
    for (size_t i = 0; i < t.cap; i++) t.slots[i] = -1;
    weft_status st = WEFT_OK;
    for (int32_t s = 0; s < rw->src->n_nodes; s++) {
        const weft_gnode *n = &rw->src->nodes[s];
        bool m = mergeable(n);
        if (m && n->n_in <= 16) {
            // The probe: this node with its inputs already mapped onto representatives.
            weft_gnode probe = *n;
            int32_t in[16];
            for (int k = 0; k < n->n_in; k++) in[k] = rw->vmap[n->in[k]];
            probe.in = in;
            int32_t rep = find(&t, rw->dst, &probe);
            if (rep >= 0) {
                int32_t dv[WEFT_MAX_OP_OUT];
                for (int j = 0; j < n->n_out; j++) dv[j] = rw->dst->nodes[rep].out0 + j;
                weft_rw_forward(rw, s, dv);
                io->changed++;
                continue;
            }
        }
        int32_t d = weft_rw_copy(rw, s);
        if (d < 0) {
            st = weft_last_status();
            break;
        }
        if (m && n->n_in <= 16) insert(&t, rw->dst, d);
    }
    free(t.slots);
    for (int i = 0; i < t.n_host; i++) weft_tensor_free(t.host[i]);
    free(t.host);
    weft_ptrmap_free(&t.host_of);
    return st;
}
