// CPU kernel of fused_elementwise (../fused.h): the program runs over the
// group shape in tiles of TILE elements, threads over tiles. Each tile reads
// its inputs directly when they are contiguous with the group's shape, else
// gathers them with broadcast byte strides (a bias (N), a column (M,1), a
// transposed view); each instruction calls the elementwise kernel's own
// inner loop (weft_cpu_ew_loop), so results are bit-identical to the
// unfused ops; exported instructions write straight into their output.
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../elementwise.h"
#include "../fused.h"

#define TILE 1024
// Below this many elements one thread runs every tile (thread start-up costs more).
#define PAR_MIN_ELEMS 32768

// How one input is read for a tile: directly (contiguous, full group shape,
// not overlapping an output) or gathered with broadcast byte strides.
typedef struct in_read {
    const char *base;
    bool direct;
    bool used; // read by some instruction
    int64_t st[WEFT_MAX_DIMS]; // bytes, 0 on broadcast dims
} in_read;

typedef struct fctx {
    const weft_ew_prog *p;
    int ndim;
    int64_t sizes[WEFT_MAX_DIMS];
    int64_t numel;
    size_t es;
    in_read rd[WEFT_EW_PROG_MAX_IN];
    int n_rd;
    char *outp[WEFT_EW_PROG_MAX_OUT];
    weft_ew_loop_fn loop[WEFT_EW_PROG_MAX_INSTR];
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

// Every input is gathered or pointed at before the first instruction writes
// an output, so an input over an output's memory is read first (it is never
// direct: see fill_read).
static void run_tile(const fctx *c, int64_t t0, int64_t len, char *scratch) {
    const weft_ew_prog *p = c->p;
    const char *rv[WEFT_EW_PROG_MAX_IN];
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
    char *iv[WEFT_EW_PROG_MAX_INSTR];
    int64_t s[3];
    for (int k = 0; k < 3; k++) s[k] = (int64_t)c->es;
    for (int j = 0; j < p->n_instr; j++) {
        const weft_ew_instr *x = &p->instr[j];
        char *dst = x->out >= 0 ? c->outp[x->out] + t0 * (int64_t)c->es
                                : scratch + (size_t)(c->n_rd + j) * c->slot_bytes;
        char *ptr[3];
        ptr[0] = dst;
        for (int a = 0; a < x->n_args; a++) {
            int32_t o = x->args[a];
            ptr[1 + a] = o >= 0 ? (char *)rv[o] : iv[-1 - o];
        }
        c->loop[j](ptr, s, len, &x->scalar);
        iv[j] = dst;
    }
}

// Byte range [lo, hi) that t's elements span.
static void extent(const weft_tensor *t, const char **lo, const char **hi) {
    const char *b = weft_tensor_ptr(t);
    int64_t mn = 0, mx = 0, es = (int64_t)weft_dtype_size((weft_dtype)t->dtype);
    for (int d = 0; d < t->ndim; d++) {
        if (t->sizes[d] == 0) { // no elements
            *lo = *hi = b;
            return;
        }
        int64_t span = (t->sizes[d] - 1) * t->strides[d] * es;
        if (span < 0) mn += span;
        else mx += span;
    }
    *lo = b + mn;
    *hi = b + mx + es;
}

static void fill_read(fctx *c, in_read *r, const weft_tensor *t, weft_tensor *const *out, int n_out) {
    int nd = c->ndim, lead = nd - t->ndim;
    r->base = weft_tensor_ptr(t);
    for (int d = 0; d < nd; d++) {
        int td = d - lead;
        r->st[d] = (td < 0 || t->sizes[td] == 1) ? 0 : t->strides[td] * (int64_t)c->es;
    }
    r->direct = weft_tensor_is_contiguous(t) && weft_shape_equal(t->ndim, t->sizes, nd, c->sizes);
    const char *lo, *hi;
    extent(t, &lo, &hi);
    for (int j = 0; j < n_out && r->direct; j++) { // over an output: copy each tile before it is written
        const char *olo, *ohi;
        extent(out[j], &olo, &ohi);
        r->direct = hi <= olo || ohi <= lo;
    }
}

weft_status weft_cpu_fused_elementwise(const weft_op_args *a) {
    const weft_ew_prog *p = weft_ew_prog_of(a);
    if (!p) return weft_last_status();
    const weft_tensor *o0 = a->out[0];
    fctx c = {.p = p, .ndim = o0->ndim, .numel = o0->numel, .n_rd = a->n_in};
    memcpy(c.sizes, o0->sizes, sizeof c.sizes);
    weft_dtype dt = (weft_dtype)o0->dtype;
    c.es = weft_dtype_size(dt);
    for (int j = 0; j < a->n_out; j++) c.outp[j] = weft_tensor_ptr(a->out[j]);
    for (int k = 0; k < a->n_in; k++) fill_read(&c, &c.rd[k], a->in[k], a->out, a->n_out);
    for (int j = 0; j < p->n_instr; j++) {
        const weft_ew_instr *x = &p->instr[j];
        for (int k = 0; k < x->n_args; k++)
            if (x->args[k] >= 0) c.rd[x->args[k]].used = true;
        c.loop[j] = weft_cpu_ew_loop(x->variant, dt);
        if (!c.loop[j])
            return weft_error(WEFT_ERR_UNSUPPORTED, "fused_elementwise: instruction %d (elementwise variant %d) has "
                                                    "no cpu loop for %s", j, x->variant, weft_dtype_name(dt));
    }
    if (c.numel == 0) return WEFT_OK;

    int64_t n_tiles = (c.numel + TILE - 1) / TILE;
    int threads = c.numel >= PAR_MIN_ELEMS ? weft_num_threads() : 1;
    if (threads < 1) threads = 1;
    if (threads > n_tiles) threads = (int)n_tiles;
    c.slot_bytes = (size_t)TILE * c.es;
    c.thread_bytes = (size_t)(c.n_rd + p->n_instr) * c.slot_bytes;
    c.scratch = aligned_alloc(64, (size_t)threads * c.thread_bytes);
    if (!c.scratch) return weft_error(WEFT_ERR_OOM, "fused_elementwise: out of memory for tiles");
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int64_t t = 0; t < n_tiles; t++) {
        int64_t t0 = t * TILE, len = c.numel - t0 < TILE ? c.numel - t0 : TILE;
        run_tile(&c, t0, len, c.scratch + (size_t)omp_get_thread_num() * c.thread_bytes);
    }
    free(c.scratch);
    return WEFT_OK;
}
