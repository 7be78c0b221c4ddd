// Fused nodes: program helpers and the tiled executor (see fused.h).
#include "fused.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/cpu/iter.h"
#include "../ops/elementwise.h"
#include "plan.h"

// Below this many elements one thread runs every tile (thread start-up costs more).
#define PAR_MIN_ELEMS 32768

bool weft_fused_op_ok(const weft_op_def *op, weft_dtype dt) {
    if (!op || op->kernel[WEFT_CPU].fn != weft_cpu_elementwise || (op->flags & WEFT_OPF_VIEW)) return false;
    if (op->n_in != 1 && op->n_in != 2) return false;
    // Comparisons produce bool: the tile program keeps one dtype throughout.
    if (op->variant >= WEFT_EW_EQ && op->variant <= WEFT_EW_GE) return false;
    return (op->kernel[WEFT_CPU].dtypes & WEFT_DT(dt)) && weft_cpu_ew_loop(op->variant, dt) != NULL;
}

weft_fused_prog *weft_fused_prog_copy(const weft_fused_prog *p) {
    if (!p) return NULL;
    weft_fused_prog *c = malloc(sizeof *c);
    if (c) memcpy(c, p, sizeof *c);
    return c;
}

void weft_fused_prog_free(weft_fused_prog *p) { free(p); }

const char *weft_fused_prog_str(const weft_fused_prog *p, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int j = 0; p && j < p->n_instr && k + 1 < n; j++) {
        int w = snprintf(buf + k, n - k, "%s%s", j ? "+" : "", p->instr[j].op->name);
        if (w < 0) break;
        k += (size_t)w;
    }
    return buf;
}

// How one node input is read for a tile: directly (contiguous, full group
// shape) or gathered with broadcast byte strides over the group's dims.
typedef struct in_read {
    const char *base;
    bool direct;
    bool used; // read by an elementwise instruction (matmul operands need not be)
    int64_t st[WEFT_MAX_DIMS]; // bytes, 0 on broadcast dims
} in_read;

typedef struct fctx {
    const weft_gnode *n;
    const weft_fused_prog *p;
    int ndim;
    int64_t sizes[WEFT_MAX_DIMS];
    int64_t numel;
    size_t es;
    in_read rd[WEFT_FUSED_MAX_IN + 1]; // + the matmul result when it is read like an input
    int n_rd;
    int mm_rd; // index in rd of the matmul result, -1
    char *outp[WEFT_MAX_OP_OUT];
    weft_ew_loop_fn loop[WEFT_FUSED_MAX_INSTR];
    char *scratch;
    size_t slot_bytes, thread_bytes;
} fctx;

// Copy the group elements [t0, t0+len) of input r into dst (contiguous).
static void gather(const fctx *c, const in_read *r, int64_t t0, int64_t len, char *dst) {
    int nd = c->ndim;
    int64_t idx[WEFT_MAX_DIMS], rem = t0;
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = c->sizes[d] ? rem % c->sizes[d] : 0;
        rem = c->sizes[d] ? rem / c->sizes[d] : 0;
    }
    size_t es = c->es;
    int64_t inner = nd ? c->sizes[nd - 1] : 1, sin = nd ? r->st[nd - 1] : 0;
    while (len > 0) {
        int64_t off = 0;
        for (int d = 0; d < nd; d++) off += idx[d] * r->st[d];
        int64_t run = nd ? inner - idx[nd - 1] : 1;
        if (run > len) run = len;
        const char *src = r->base + off;
        if (sin == (int64_t)es) memcpy(dst, src, (size_t)run * es);
        else if (es == 4)
            for (int64_t i = 0; i < run; i++) memcpy(dst + i * 4, src + i * sin, 4);
        else
            for (int64_t i = 0; i < run; i++) memcpy(dst + i * 8, src + i * sin, 8);
        dst += run * (int64_t)es;
        len -= run;
        if (!nd) break;
        idx[nd - 1] += run;
        for (int d = nd - 1; d > 0 && idx[d] >= c->sizes[d]; d--) idx[d] = 0, idx[d - 1]++;
    }
}

static void run_tile(const fctx *c, int64_t t0, int64_t len, char *scratch) {
    const weft_fused_prog *p = c->p;
    const char *rv[WEFT_FUSED_MAX_IN + 1];
    for (int k = 0; k < c->n_rd; k++) {
        const in_read *r = &c->rd[k];
        if (!r->used) {
            rv[k] = NULL;
        } else if (r->direct) {
            rv[k] = r->base + t0 * (int64_t)c->es;
        } else {
            char *dst = scratch + (size_t)k * c->slot_bytes;
            gather(c, r, t0, len, dst);
            rv[k] = dst;
        }
    }
    char *iv[WEFT_FUSED_MAX_INSTR];
    int64_t s[1 + WEFT_FUSED_MAX_ARGS];
    for (int k = 0; k <= WEFT_FUSED_MAX_ARGS; k++) s[k] = (int64_t)c->es;
    for (int j = 0; j < p->n_instr; j++) {
        const weft_fused_instr *x = &p->instr[j];
        if (j == 0 && p->matmul_head) {
            iv[0] = (char *)rv[c->mm_rd];
            continue;
        }
        char *dst = x->export_idx >= 0 ? c->outp[x->export_idx] + t0 * (int64_t)c->es
                                       : scratch + (size_t)(c->n_rd + j) * c->slot_bytes;
        char *ptr[1 + WEFT_FUSED_MAX_ARGS];
        ptr[0] = dst;
        for (int a = 0; a < x->n_args; a++) {
            int32_t o = x->args[a];
            ptr[1 + a] = o >= 0 ? (char *)rv[o] : iv[-1 - o];
        }
        double sc = x->attrs.f[0];
        c->loop[j](ptr, s, len, &sc);
        iv[j] = dst;
    }
}

static void fill_read(fctx *c, in_read *r, const weft_tensor *t) {
    int nd = c->ndim, lead = nd - t->ndim;
    r->base = weft_tensor_ptr(t);
    for (int d = 0; d < nd; d++) {
        int td = d - lead;
        r->st[d] = (td < 0 || t->sizes[td] == 1) ? 0 : t->strides[td] * (int64_t)c->es;
    }
    r->direct = weft_tensor_is_contiguous(t) && weft_shape_equal(t->ndim, t->sizes, nd, c->sizes);
}

weft_status weft_fused_exec(const weft_gnode *n, const weft_gvalue *out_meta, weft_tensor *const *in,
                            weft_tensor *const *out) {
    const weft_fused_prog *p = n->prog;
    if (!p || p->n_instr < 1 || n->n_in > WEFT_FUSED_MAX_IN || n->n_out < 1 || n->n_out > WEFT_MAX_OP_OUT)
        return weft_error(WEFT_ERR_STATE, "fused: malformed program");
    fctx c = {.n = n, .p = p, .ndim = out_meta[0].ndim, .mm_rd = -1};
    memcpy(c.sizes, out_meta[0].sizes, sizeof c.sizes);
    weft_dtype dt = (weft_dtype)out_meta[0].dtype;
    c.es = weft_dtype_size(dt);
    c.numel = weft_shape_numel(c.ndim, c.sizes);
    for (int j = 0; j < n->n_out; j++) {
        if (!weft_tensor_is_contiguous(out[j]) || out[j]->dtype != dt ||
            !weft_shape_equal(out[j]->ndim, out[j]->sizes, c.ndim, c.sizes))
            return weft_error(WEFT_ERR_STATE, "fused: output %d is not a contiguous tensor of the group shape", j);
        c.outp[j] = weft_tensor_ptr(out[j]);
    }
    for (int k = 0; k < n->n_in; k++) {
        if (in[k]->dtype != dt && !(p->matmul_head && (p->instr[0].args[0] == k || p->instr[0].args[1] == k)))
            return weft_error(WEFT_ERR_DTYPE, "fused: input %d is %s, the group computes in %s", k,
                              weft_dtype_name((weft_dtype)in[k]->dtype), weft_dtype_name(dt));
        fill_read(&c, &c.rd[k], in[k]);
    }
    c.n_rd = n->n_in;
    for (int j = 0; j < p->n_instr; j++) {
        if (j == 0 && p->matmul_head) continue;
        for (int a = 0; a < p->instr[j].n_args; a++) {
            int32_t o = p->instr[j].args[a];
            if (o >= n->n_in || o < -1 - j)
                return weft_error(WEFT_ERR_STATE, "fused: instruction %d operand %d out of range", j, a);
            if (o >= 0) c.rd[o].used = true;
        }
        c.loop[j] = weft_cpu_ew_loop(p->instr[j].op->variant, dt);
        if (!c.loop[j])
            return weft_error(WEFT_ERR_UNSUPPORTED, "fused: no cpu loop for %s in %s", p->instr[j].op->name,
                              weft_dtype_name(dt));
    }
    if (p->matmul_head) {
        // The product goes into its own output when it is exported, else into
        // output 0 (overwritten tile by tile by the epilogue: each tile copies
        // the product into scratch before anything writes that tile).
        const weft_fused_instr *m = &p->instr[0];
        int ox = m->export_idx >= 0 ? m->export_idx : 0;
        weft_tensor *mi[2] = {in[m->args[0]], in[m->args[1]]};
        weft_tensor *mo = out[ox];
        weft_status st = weft_op_apply_into(m->op, 2, mi, &m->attrs, &mo);
        if (st != WEFT_OK) return st;
        c.mm_rd = c.n_rd++;
        fill_read(&c, &c.rd[c.mm_rd], out[ox]);
        c.rd[c.mm_rd].direct = m->export_idx >= 0; // in place: gather (copy) it first
        c.rd[c.mm_rd].used = true;
        if (p->n_instr == 1) return WEFT_OK;
    }
    if (c.numel == 0) return WEFT_OK;

    int64_t tile = WEFT_FUSED_TILE, n_tiles = (c.numel + tile - 1) / tile;
    int threads = c.numel >= PAR_MIN_ELEMS ? weft_num_threads() : 1;
    if (threads < 1) threads = 1;
    if (threads > n_tiles) threads = (int)n_tiles;
    c.slot_bytes = (size_t)tile * c.es;
    c.thread_bytes = (size_t)(c.n_rd + p->n_instr) * c.slot_bytes;
    c.scratch = aligned_alloc(64, (size_t)threads * c.thread_bytes);
    if (!c.scratch) return weft_error(WEFT_ERR_OOM, "fused: out of memory for tiles");
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int64_t t = 0; t < n_tiles; t++) {
        int64_t t0 = t * tile, len = c.numel - t0 < tile ? c.numel - t0 : tile;
        run_tile(&c, t0, len, c.scratch + (size_t)omp_get_thread_num() * c.thread_bytes);
    }
    free(c.scratch);
    return WEFT_OK;
}
