// Vertical fusion: chains of elementwise OP nodes (and the elementwise
// epilogue of a matmul) become one FUSED node that runs them in one pass over
// memory (src/graph/fused.c), so intermediates are never materialised.
//
// Grouping is greedy along producer -> consumer edges, in a topological order
// of the source graph: a fusable node joins the group of its first input's
// producer that accepts it, else starts a group. A group accepts a node when
// - the node's output has the group's shape and dtype (inputs may broadcast);
// - no input from outside the group depends on a member (the fused node would
//   have to run both before and after that input: a cycle);
// - the program stays small (instructions, inputs, exported values).
// A member value used outside the group (or kept by the caller) is exported:
// the fused node still writes it once, its consumers inside read it from cache.
// Groups of one op stay plain OP nodes.
#include <stdlib.h>
#include <string.h>

#include "../fused.h"
#include "../rewrite.h"

#define FUSE_MAX_GAP 16 // node ids between a group's last member and a joining consumer

typedef struct group {
    int32_t mem[WEFT_FUSED_MAX_INSTR]; // src node ids, in join order (topological)
    int n;
    int32_t minpos; // smallest topological position of a member
    int32_t ext[WEFT_FUSED_MAX_IN];    // src values read from outside
    int n_ext;
    bool emitted;
} group;

typedef struct fz {
    const weft_graph *s;
    const uint8_t *kept; // [values]
    int32_t *grp;        // [nodes] group id, -1
    int32_t *pos;        // [nodes] topological position
    int32_t *uses;       // [values] consumer edges in the graph
    int32_t *inuse;      // [values] consumer edges from members of the producer's group
    int32_t *first_use;  // [values] smallest consumer node id (INT32_MAX: none)
    int32_t *stamp, *stack;
    int32_t cur_stamp;
    group *groups;
    int n_groups;
} fz;

static bool is_matmul(const weft_gnode *n) {
    return weft_rw_rewritable(n) && weft_fused_head_op(n->op) && n->n_out == 1 && n->n_in >= 2 &&
           n->n_in <= (strcmp(n->op->name, "matmul") ? 3 : 2);
}

static weft_dtype out_dtype(const fz *z, const weft_gnode *n) { return (weft_dtype)z->s->values[n->out0].dtype; }

static bool fusable_ew(const fz *z, const weft_gnode *n) {
    if (!weft_rw_rewritable(n) || n->n_out != 1 || n->n_in > 2) return false;
    weft_dtype dt = out_dtype(z, n);
    if (!weft_fused_op_ok(n->op, dt)) return false;
    for (int k = 0; k < n->n_in; k++)
        if (z->s->values[n->in[k]].dtype != dt) return false;
    return true;
}

// Does src node q (transitively, data and control edges) depend on a member of group g?
static bool depends_on(fz *z, int32_t q, int32_t g) {
    const weft_graph *s = z->s;
    int32_t lo = z->groups[g].minpos, sp = 0;
    z->cur_stamp++;
    z->stack[sp++] = q;
    z->stamp[q] = z->cur_stamp;
    while (sp) {
        int32_t x = z->stack[--sp];
        if (z->grp[x] == g) return true;
        const weft_gnode *n = &s->nodes[x];
        for (int k = 0; k < n->n_in + n->n_ctrl; k++) {
            int32_t p = k < n->n_in ? s->values[n->in[k]].node : n->ctrl[k - n->n_in];
            // Nothing before the group's first member in topological order can depend on it.
            if (z->pos[p] < lo || z->stamp[p] == z->cur_stamp) continue;
            z->stamp[p] = z->cur_stamp;
            z->stack[sp++] = p;
        }
    }
    return false;
}

// Values of group g (plus candidate node s when s >= 0) that must be exported.
static int count_exports(const fz *z, const group *G, int32_t s) {
    const weft_graph *src = z->s;
    int c = 0;
    for (int m = 0; m < G->n; m++) {
        int32_t v = src->nodes[G->mem[m]].out0, inside = z->inuse[v];
        if (s >= 0)
            for (int k = 0; k < src->nodes[s].n_in; k++) inside += src->nodes[s].in[k] == v;
        c += z->kept[v] || z->uses[v] > inside;
    }
    if (s >= 0) c += z->kept[src->nodes[s].out0] || z->uses[src->nodes[s].out0] > 0;
    return c;
}

static bool try_join(fz *z, int32_t g, int32_t s) {
    const weft_graph *src = z->s;
    const weft_gnode *n = &src->nodes[s];
    group *G = &z->groups[g];
    if (G->n >= WEFT_FUSED_MAX_INSTR) return false;
    // Locality: node ids follow the order the graph was built (a traced
    // forward, then its backward). A node whose first consumer is far behind
    // the group belongs to a later phase (gelu_grad(h), or a rematerialised
    // copy made for the backward); fusing it would compute its output with
    // the forward and keep it alive across the gap, undoing the memory
    // schedule and rematerialisation.
    int32_t last = G->mem[0];
    for (int k = 1; k < G->n; k++) last = G->mem[k] > last ? G->mem[k] : last;
    if (z->first_use[n->out0] != INT32_MAX && z->first_use[n->out0] - last > FUSE_MAX_GAP) return false;
    const weft_gvalue *gv = &src->values[src->nodes[G->mem[0]].out0], *nv = &src->values[n->out0];
    if (gv->dtype != nv->dtype || !weft_shape_equal(gv->ndim, gv->sizes, nv->ndim, nv->sizes)) return false;
    int32_t fresh[WEFT_FUSED_MAX_ARGS];
    int n_fresh = 0;
    for (int k = 0; k < n->n_in; k++) {
        int32_t v = n->in[k], p = src->values[v].node;
        if (z->grp[p] == g) continue;
        bool seen = false;
        for (int e = 0; e < G->n_ext && !seen; e++) seen = G->ext[e] == v;
        for (int e = 0; e < n_fresh && !seen; e++) seen = fresh[e] == v;
        if (seen) continue;
        if (depends_on(z, p, g)) return false;
        fresh[n_fresh++] = v;
    }
    if (G->n_ext + n_fresh > WEFT_FUSED_MAX_IN) return false;
    if (count_exports(z, G, s) > WEFT_MAX_OP_OUT) return false;
    // Join.
    for (int k = 0; k < n->n_in; k++)
        if (z->grp[src->values[n->in[k]].node] == g) z->inuse[n->in[k]]++;
    for (int e = 0; e < n_fresh; e++) G->ext[G->n_ext++] = fresh[e];
    G->mem[G->n++] = s;
    z->grp[s] = g;
    return true;
}

static void new_group(fz *z, int32_t s) {
    const weft_gnode *n = &z->s->nodes[s];
    group *G = &z->groups[z->n_groups];
    memset(G, 0, sizeof *G);
    G->mem[0] = s;
    G->n = 1;
    G->minpos = z->pos[s];
    for (int k = 0; k < n->n_in; k++) {
        bool seen = false;
        for (int e = 0; e < G->n_ext && !seen; e++) seen = G->ext[e] == n->in[k];
        if (!seen) G->ext[G->n_ext++] = n->in[k];
    }
    z->grp[s] = z->n_groups++;
}

// A topological order of the source nodes (data and control edges; Kahn,
// smallest id first among ready nodes is not needed: any order works).
static bool topo(fz *z) {
    const weft_graph *s = z->s;
    int N = s->n_nodes;
    size_t nN = (size_t)(N > 0 ? N : 1);
    int32_t *indeg = calloc(nN, sizeof *indeg), *off = calloc(nN + 1, sizeof *off);
    int32_t *succ = NULL, *q = z->stack;
    bool ok = indeg && off;
    size_t E = 0;
    for (int i = 0; ok && i < N; i++) E += (size_t)(s->nodes[i].n_in + s->nodes[i].n_ctrl);
    if (ok) ok = (succ = malloc((E ? E : 1) * sizeof *succ)) != NULL;
    if (ok) {
        for (int i = 0; i < N; i++) {
            const weft_gnode *n = &s->nodes[i];
            indeg[i] = n->n_in + n->n_ctrl;
            for (int k = 0; k < n->n_in + n->n_ctrl; k++)
                off[(k < n->n_in ? s->values[n->in[k]].node : n->ctrl[k - n->n_in]) + 1]++;
        }
        for (int i = 0; i < N; i++) off[i + 1] += off[i];
        int32_t *fill = z->stamp; // borrowed as a cursor; reset below
        for (int i = 0; i < N; i++) fill[i] = off[i];
        for (int i = 0; i < N; i++) {
            const weft_gnode *n = &s->nodes[i];
            for (int k = 0; k < n->n_in + n->n_ctrl; k++)
                succ[fill[k < n->n_in ? s->values[n->in[k]].node : n->ctrl[k - n->n_in]]++] = i;
        }
        int h = 0, t = 0;
        for (int i = 0; i < N; i++)
            if (!indeg[i]) q[t++] = i;
        while (h < t) {
            int32_t x = q[h];
            z->pos[x] = h++;
            for (int32_t e = off[x]; e < off[x + 1]; e++)
                if (--indeg[succ[e]] == 0) q[t++] = succ[e];
        }
        ok = t == N; // a control cycle: leave the graph alone (run reports it)
        memset(z->stamp, 0, nN * sizeof *z->stamp);
    }
    free(indeg);
    free(off);
    free(succ);
    return ok;
}

// The FUSED node of group G (inputs and exported values mapped).
static weft_status emit_group(weft_rw *rw, fz *z, group *G) {
    const weft_graph *src = z->s;
    weft_fused_prog *p = calloc(1, sizeof *p);
    if (!p) return weft_error(WEFT_ERR_OOM, "graph_optimize: out of memory");
    int32_t in[WEFT_FUSED_MAX_IN], exported[WEFT_MAX_OP_OUT];
    int n_exp = 0;
    for (int e = 0; e < G->n_ext; e++) in[e] = rw->vmap[G->ext[e]];
    p->n_instr = G->n;
    p->matmul_head = is_matmul(&src->nodes[G->mem[0]]);
    for (int m = 0; m < G->n; m++) {
        const weft_gnode *n = &src->nodes[G->mem[m]];
        weft_fused_instr *x = &p->instr[m];
        x->op = n->op;
        x->attrs = n->attrs;
        x->n_args = n->n_in;
        for (int k = 0; k < n->n_in; k++) {
            int32_t v = n->in[k], prod = src->values[v].node;
            int32_t a = -1;
            if (z->grp[prod] == z->grp[G->mem[0]]) {
                for (int j = 0; j < m && a < 0; j++)
                    if (G->mem[j] == prod) a = WEFT_FUSED_INSTR(j);
            } else {
                for (int e = 0; e < G->n_ext && a < 0; e++)
                    if (G->ext[e] == v) a = WEFT_FUSED_IN(e);
            }
            x->args[k] = a;
        }
        int32_t v = n->out0;
        bool exp = z->kept[v] || z->uses[v] > z->inuse[v];
        if (!exp && m == G->n - 1 && n_exp == 0) exp = true; // dead group (DCE off): still one output
        x->export_idx = exp ? n_exp : -1;
        if (exp) exported[n_exp++] = v;
    }
    // Name: "fused_<last member>", unique in both graphs.
    char name[192], hint[160];
    snprintf(hint, sizeof hint, "fused_%s", src->nodes[G->mem[G->n - 1]].name);
    snprintf(name, sizeof name, "%s", hint);
    for (int k = 1; weft_graph_find_node(src, name).id >= 0 || weft_graph_find_node(rw->dst, name).id >= 0; k++)
        snprintf(name, sizeof name, "%s_%d", hint, k);
    int32_t d = weft_graph_add_node(rw->dst, "graph_optimize", WEFT_NODE_FUSED, name, "fused", G->n_ext, in, n_exp);
    if (d < 0) {
        free(p);
        return weft_last_status();
    }
    weft_gnode *fn = &rw->dst->nodes[d];
    fn->prog = p;
    for (int j = 0; j < n_exp; j++) {
        weft_gvalue *dv = &rw->dst->values[fn->out0 + j];
        const weft_gvalue *sv = &src->values[exported[j]];
        dv->ndim = sv->ndim;
        dv->dtype = sv->dtype;
        memcpy(dv->sizes, sv->sizes, sizeof dv->sizes);
        rw->vmap[exported[j]] = fn->out0 + j;
    }
    for (int m = 0; m < G->n; m++) rw->nmap[G->mem[m]] = d;
    return WEFT_OK;
}

// A unit (a node, or a fused group) can be emitted when every input it reads
// from outside is in the destination already.
static bool unit_ready(const weft_rw *rw, const fz *z, int32_t s, bool fused) {
    const weft_graph *src = z->s;
    if (fused) {
        const group *G = &z->groups[z->grp[s]];
        for (int e = 0; e < G->n_ext; e++)
            if (rw->vmap[G->ext[e]] < 0) return false;
        return true;
    }
    const weft_gnode *n = &src->nodes[s];
    for (int k = 0; k < n->n_in; k++)
        if (rw->vmap[n->in[k]] < 0) return false;
    if (n->var >= 0 && rw->nmap[n->var] < 0) return false;
    return true;
}

weft_status weft_pass_fusion(weft_rw *rw, weft_pass_io *io) {
    const weft_graph *s = rw->src;
    int N = s->n_nodes, V = s->n_values;
    size_t nN = (size_t)(N ? N : 1), nV = (size_t)(V ? V : 1);
    fz z = {.s = s, .kept = io->keep_vals};
    uint8_t *nokeep = NULL, *done = calloc(nN, 1);
    z.grp = malloc(nN * sizeof *z.grp);
    z.pos = malloc(nN * sizeof *z.pos);
    z.stamp = calloc(nN, sizeof *z.stamp);
    z.stack = malloc(nN * sizeof *z.stack);
    z.uses = calloc(nV, sizeof *z.uses);
    z.inuse = calloc(nV, sizeof *z.inuse);
    z.first_use = malloc(nV * sizeof *z.first_use);
    z.groups = malloc(nN * sizeof *z.groups);
    if (!z.kept) z.kept = nokeep = calloc(nV, 1);
    weft_status st = WEFT_OK;
    if (!done || !z.grp || !z.pos || !z.stamp || !z.stack || !z.uses || !z.inuse || !z.first_use || !z.groups || !z.kept) {
        st = weft_error(WEFT_ERR_OOM, "graph_optimize: out of memory");
        goto out;
    }
    for (int i = 0; i < N; i++) z.grp[i] = -1;
    for (int v = 0; v < V; v++) z.first_use[v] = INT32_MAX;
    for (int i = 0; i < N; i++)
        for (int k = 0; k < s->nodes[i].n_in; k++) {
            int32_t v = s->nodes[i].in[k];
            z.uses[v]++;
            if (i < z.first_use[v]) z.first_use[v] = i;
        }
    bool ordered = topo(&z);

    // Grouping, in topological order (z.stack holds it after topo; copy it out first).
    int32_t *order = malloc(nN * sizeof *order);
    if (!order) {
        st = weft_error(WEFT_ERR_OOM, "graph_optimize: out of memory");
        goto out;
    }
    memcpy(order, z.stack, nN * sizeof *order);
    for (int t = 0; ordered && t < N; t++) {
        int32_t x = order[t];
        const weft_gnode *n = &s->nodes[x];
        if (is_matmul(n)) {
            weft_dtype dt = out_dtype(&z, n);
            if (dt == WEFT_F32 || dt == WEFT_F64) new_group(&z, x);
            continue;
        }
        if (!fusable_ew(&z, n)) continue;
        bool joined = false;
        for (int k = 0; k < n->n_in && !joined; k++) {
            int32_t g = z.grp[s->values[n->in[k]].node];
            if (g >= 0) joined = try_join(&z, g, x);
        }
        if (!joined) new_group(&z, x);
    }
    free(order);

    // Emission: sweep in id order, each unit once its inputs exist.
    int left = N;
    while (left > 0 && st == WEFT_OK) {
        int progress = 0;
        for (int32_t i = 0; i < N && st == WEFT_OK; i++) {
            if (done[i]) continue;
            int32_t g = z.grp[i];
            bool fused = g >= 0 && z.groups[g].n > 1;
            if (!unit_ready(rw, &z, i, fused)) continue;
            if (fused) {
                group *G = &z.groups[g];
                st = emit_group(rw, &z, G);
                for (int m = 0; m < G->n; m++) done[G->mem[m]] = 1;
                left -= G->n;
                progress += G->n;
                io->changed += G->n;
                io->fused_groups++;
            } else {
                if (weft_rw_copy(rw, i) < 0) st = weft_last_status();
                done[i] = 1;
                left--;
                progress++;
            }
        }
        if (!progress && st == WEFT_OK)
            st = weft_error(WEFT_ERR_STATE, "graph_optimize: fusion: %d nodes could not be ordered", left);
    }
out:
    free(done);
    free(nokeep);
    free(z.grp);
    free(z.pos);
    free(z.stamp);
    free(z.stack);
    free(z.uses);
    free(z.inuse);
    free(z.first_use);
    free(z.groups);
    return st;
}
