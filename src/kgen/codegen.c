// C code from a definition and a schedule (load.c compiles and loads it).
//
// The generated function is
//   void weft_kg_main(const float *const *in_, float *restrict O_, int nt_)
// with one loop per scheduled loop (l<id>), each axis's value defined where its
// last loop opens (a_<axis> = sum of loop vars times strides), guarded where a
// split left a tail, and the update in the innermost loop: O_ (or the local
// tile acc_ of a cache_write) += body. Without a local tile a reduction first
// sets the output to its initial value, and an epilogue runs as its own pass.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "../ops/cpu/vmath.h"
#include "kgen_impl.h"

#define KG_STR_(...) #__VA_ARGS__
#define KG_STR(...) KG_STR_(__VA_ARGS__)

// ---- a string builder ----

typedef struct sb {
    char *p;
    size_t n, cap;
    bool oom;
    int ind;
} sb;

static void sb_vadd(sb *b, const char *fmt, va_list ap) {
    if (b->oom) return;
    for (;;) {
        va_list aq;
        va_copy(aq, ap);
        int w = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, aq);
        va_end(aq);
        if (w < 0) {
            b->oom = true;
            return;
        }
        if (b->p && b->n + (size_t)w < b->cap) {
            b->n += (size_t)w;
            return;
        }
        size_t cap = b->cap ? 2 * b->cap : 4096;
        while (cap <= b->n + (size_t)w) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

static void sb_add(sb *b, const char *fmt, ...) WEFT_PRINTF(2, 3);
static void sb_add(sb *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sb_vadd(b, fmt, ap);
    va_end(ap);
}

// One line at the current indentation.
static void sb_line(sb *b, const char *fmt, ...) WEFT_PRINTF(2, 3);
static void sb_line(sb *b, const char *fmt, ...) {
    sb_add(b, "%*s", 4 * b->ind, "");
    va_list ap;
    va_start(ap, fmt);
    sb_vadd(b, fmt, ap);
    va_end(ap);
    sb_add(b, "\n");
}

// ---- expressions ----

typedef struct gen gen;

// An inlined stage's axes stand for the indices of the load that reads it.
typedef struct subst {
    int stage;
    weft_kg_expr *const *idx;
    const struct subst *up; // the context those indices are in
} subst;

typedef struct ectx {
    const weft_kg *kg;
    const gen *g;
    bool local;       // loads of a tensor with a local buffer read it (the output's nest)
    const subst *sub;
    const char *acc;  // what acc reads
} ectx;

static void emit_idx(sb *b, const ectx *x, const weft_kg_expr *e) {
    switch (e->kind) {
    case KG_CONST: sb_add(b, e->c < 0 ? "(%lld)" : "%lld", (long long)e->c); break; // never "--2"
    case KG_AXIS: {
        const kg_axis *a = &x->kg->axis[e->id];
        if (x->sub && a->stage == x->sub->stage) {
            const kg_stage *t = &x->kg->stage[a->stage];
            int d = 0;
            while (t->out_axis[d] != e->id) d++;
            ectx up = *x;
            up.sub = x->sub->up;
            sb_add(b, "(");
            emit_idx(b, &up, x->sub->idx[d]);
            sb_add(b, ")");
        } else sb_add(b, "a_%s", a->name);
        break;
    }
    case KG_UN:
        sb_add(b, "(- ");
        emit_idx(b, x, e->a[0]);
        sb_add(b, ")");
        break;
    default:
        sb_add(b, "(");
        emit_idx(b, x, e->a[0]);
        sb_add(b, e->op == WEFT_KG_ADD ? " + " : e->op == WEFT_KG_SUB ? " - " : " * ");
        emit_idx(b, x, e->a[1]);
        sb_add(b, ")");
    }
}

static void emit_val(sb *b, const ectx *x, const weft_kg_expr *e);

// ---- loops ----

#define KG_MAX_T (WEFT_KG_MAX_INPUTS + KG_MAX_STAGES) // tensor handles
#define KG_MAX_LOCAL 65536                           // elements of a local buffer

struct gen {
    sb b;
    const weft_kg_sched *s;
    const weft_kg *kg;
    int last[KG_MAX_AXIS];           // position of each axis's innermost loop
    int cache_pos;                   // -1: no local tile
    int64_t tstride[WEFT_KG_MAX_LOOPS]; // a tile loop's stride in acc_
    int64_t tile;
    bool loc[KG_MAX_T];              // a local buffer L_<t> is open
    int64_t lsum;                    // elements of the local buffers and tile open (all on the stack)
    int64_t lext[KG_MAX_T][WEFT_MAX_DIMS];
};

static void emit_load(sb *b, const ectx *x, const weft_kg_expr *e) {
    const weft_kg *kg = x->kg;
    const int64_t *size;
    int nd = kg_tdims(kg, e->id, &size);
    const char *name = kg_tname(kg, e->id);
    if (e->pad) {
        sb_add(b, "(");
        for (int d = 0; d < nd; d++) {
            sb_add(b, "%s(uint64_t)", d ? " && " : "");
            emit_idx(b, x, e->a[d]);
            sb_add(b, " < %lldu", (long long)size[d]);
        }
        sb_add(b, " ? ");
    }
    int st = e->id - WEFT_KG_MAX_INPUTS;
    if (kg_is_stage(e->id) && x->g->s->place[st] == KG_INLINE) {
        const kg_stage *t = &kg->stage[st];
        subst sub = {.stage = st, .idx = e->a, .up = x->sub};
        ectx in = {.kg = kg, .g = x->g, .local = false, .sub = &sub, .acc = ""};
        if (t->epi) { // acc is the body's value, spelled out
            sb body = {0};
            emit_val(&body, &in, t->body);
            if (body.oom) b->oom = true;
            in.acc = body.p ? body.p : "0";
            emit_val(b, &in, t->epi);
            free(body.p);
        } else emit_val(b, &in, t->body);
    } else { // a local buffer (indices from its start, its extents) or the tensor
        bool loc = x->local && x->g->loc[e->id];
        const int64_t *ext = loc ? x->g->lext[e->id] : size;
        sb_add(b, "%s_%s[", loc ? "L" : kg_is_stage(e->id) ? "S" : "I", name);
        int64_t stride = 1;
        for (int d = nd - 1; d >= 0; d--) {
            if (loc) sb_add(b, "(");
            emit_idx(b, x, e->a[d]);
            if (loc) sb_add(b, " - Ls_%s_%d)", name, d);
            sb_add(b, " * %lld%s", (long long)stride, d ? " + " : "]");
            stride *= ext[d];
        }
    }
    if (e->pad) sb_add(b, " : %af)", (double)(float)e->c);
}

static void emit_val(sb *b, const ectx *x, const weft_kg_expr *e) {
    static const char *bin[] = {" + ", " - ", " * ", " / "};
    static const char *un[] = {"-", "kg_exp", "logf", "sqrtf", "tanhf"};
    if (e->is_int) {
        sb_add(b, "(float)");
        emit_idx(b, x, e);
        return;
    }
    switch (e->kind) {
    case KG_CONST: sb_add(b, "%af", (double)(float)e->c); break;
    case KG_ACC: sb_add(b, "%s", x->acc); break;
    case KG_LOAD: emit_load(b, x, e); break;
    case KG_UN:
        sb_add(b, "%s(", un[e->op - WEFT_KG_NEG]);
        emit_val(b, x, e->a[0]);
        sb_add(b, ")");
        break;
    default:
        if (e->op == WEFT_KG_MAX || e->op == WEFT_KG_MIN) {
            sb_add(b, e->op == WEFT_KG_MAX ? "kg_max(" : "kg_min(");
            emit_val(b, x, e->a[0]);
            sb_add(b, ", ");
            emit_val(b, x, e->a[1]);
            sb_add(b, ")");
        } else {
            sb_add(b, "(");
            emit_val(b, x, e->a[0]);
            sb_add(b, "%s", bin[e->op]);
            emit_val(b, x, e->a[1]);
            sb_add(b, ")");
        }
    }
}

// An expression of the output's stage: in the nest (local buffers read) or not.
static void emit_out_val(gen *g, const weft_kg_expr *e, const char *acc, bool local) {
    ectx x = {.kg = g->kg, .g = g, .local = local, .acc = acc};
    emit_val(&g->b, &x, e);
}

static const kg_loop *at(const gen *g, int p) { return &g->s->loop[g->s->order[p]]; }
static bool is_red(const gen *g, int p) { return g->kg->axis[at(g, p)->axis].reduce; }

// The output element's offset, from the output axes.
static void emit_out_off(gen *g) {
    int64_t stride = 1;
    sb_add(&g->b, "O_[");
    for (int d = g->kg->n_out - 1; d >= 0; d--) {
        sb_add(&g->b, "%sa_%s * %lld", d == g->kg->n_out - 1 ? "" : " + ", g->kg->axis[g->kg->out_axis[d]].name,
               (long long)stride);
        stride *= g->kg->axis[g->kg->out_axis[d]].ext;
    }
    sb_add(&g->b, "]");
}

static void emit_tile_off(gen *g) {
    sb_add(&g->b, "acc_[0");
    for (int p = g->cache_pos + 1; p < g->s->n_order; p++)
        if (!is_red(g, p)) sb_add(&g->b, " + l%d * %lld", g->s->order[p], (long long)g->tstride[p]);
    sb_add(&g->b, "]");
}

// ---- stages and local buffers ----

// Whether the output's epilogue runs in the innermost loop (no reduction, no local tile): it reads local buffers.
static bool epi_in_nest(const gen *g) { return g->kg->red == WEFT_KG_NONE && g->s->cache_at < 0; }

typedef struct region {
    int nd;
    int64_t lo[WEFT_MAX_DIMS], ext[WEFT_MAX_DIMS];
    int64_t mul[WEFT_MAX_DIMS][WEFT_KG_MAX_LOOPS]; // the outer loops' part of the start (by position)
    int n;                                          // loads seen
} region;

// How an axis moves where a load is evaluated: base + sum over loop positions q of m[q] * l_q + [0, ext).
typedef struct amap {
    int64_t base, ext;
    int64_t m[WEFT_KG_MAX_LOOPS];
} amap;

// Adds the loads of t in e (not inside inlined stages, whose loads read the tensor itself) to the region of t
// over the loops inside position pc; map says how the axes of e move.
static weft_status region_add(const gen *g, int t, int pc, const weft_kg_expr *e, const amap *map, region *r,
                              int64_t *budget) {
    if (--*budget < 0) return weft_error(WEFT_ERR_ARG, "kgen '%s': expressions too large", g->kg->name);
    const weft_kg *kg = g->kg;
    if (e->kind == KG_LOAD && e->id == t) {
        int64_t lo[WEFT_MAX_DIMS], hi[WEFT_MAX_DIMS], mul[WEFT_MAX_DIMS][WEFT_KG_MAX_LOOPS] = {{0}};
        bool ovf = false;
        for (int d = 0; d < e->n && !ovf; d++) {
            int64_t coef[KG_MAX_AXIS] = {0}, c0 = 0, m, span;
            if (!kg_affine(e->a[d], coef, &c0))
                return weft_error(WEFT_ERR_ARG, "kgen '%s': %s at a loop: index %d of a load of %s is not affine (a "
                                  "sum of axes times constants)", kg->name, kg_is_stage(t) ? "compute" : "cache_read",
                                  d, kg_tname(kg, t));
            lo[d] = hi[d] = c0;
            for (int a = 0; a < kg->n_axis && !ovf; a++) {
                if (!coef[a]) continue;
                const amap *x = &map[a];
                ovf |= __builtin_mul_overflow(coef[a], x->base, &m) || __builtin_add_overflow(lo[d], m, &lo[d]) ||
                       __builtin_add_overflow(hi[d], m, &hi[d]) || __builtin_mul_overflow(coef[a], x->ext - 1, &span);
                if (!ovf) ovf |= __builtin_add_overflow(span < 0 ? lo[d] : hi[d], span, span < 0 ? &lo[d] : &hi[d]);
                for (int q = 0; q < g->s->n_order && !ovf; q++) {
                    ovf |= __builtin_mul_overflow(coef[a], x->m[q], &m);
                    if (q <= pc) ovf |= __builtin_add_overflow(mul[d][q], m, &mul[d][q]);
                    else if (!(ovf |= __builtin_mul_overflow(m, at(g, q)->ext - 1, &span)))
                        ovf |= __builtin_add_overflow(span < 0 ? lo[d] : hi[d], span, span < 0 ? &lo[d] : &hi[d]);
                }
            }
        }
        if (ovf)
            return weft_error(WEFT_ERR_ARG, "kgen '%s': the region of %s at a loop overflows", kg->name,
                              kg_tname(kg, t));
        if (r->n && memcmp(mul, r->mul, sizeof mul))
            return weft_error(WEFT_ERR_ARG, "kgen '%s': the loads of %s move differently with the loop it is placed at or "
                              "those outside it (one region cannot serve them)", kg->name, kg_tname(kg, t));
        for (int d = 0; d < e->n; d++) {
            int64_t h = r->n ? r->lo[d] + r->ext[d] - 1 : hi[d];
            r->lo[d] = r->n && r->lo[d] < lo[d] ? r->lo[d] : lo[d];
            h = h > hi[d] ? h : hi[d];
            if (__builtin_sub_overflow(h, r->lo[d], &r->ext[d]) || r->ext[d] >= KG_MAX_LOCAL)
                return weft_error(WEFT_ERR_ARG, "kgen '%s': the region of %s at a loop has more than %d elements",
                                  kg->name, kg_tname(kg, t), KG_MAX_LOCAL);
            r->ext[d]++;
        }
        memcpy(r->mul, mul, sizeof mul);
        r->nd = e->n;
        r->n++;
    }
    for (int i = 0; i < e->n; i++) {
        weft_status st = region_add(g, t, pc, e->a[i], map, r, budget);
        if (st) return st;
    }
    return WEFT_OK;
}

// The region of t (an input copied, or a stage placed at a loop) that is read inside loop position pc: by the
// output's nest, and by the stages placed at loops inside it, which read it from its local buffer.
static weft_status region_of(const gen *g, int t, int pc, region *r) {
    const weft_kg *kg = g->kg;
    const weft_kg_sched *s = g->s;
    memset(r, 0, sizeof *r);
    amap *map = calloc(KG_MAX_AXIS, sizeof *map);
    if (!map) return weft_error(WEFT_ERR_OOM, "kgen '%s': out of memory", kg->name);
    for (int a = 0; a < kg->n_axis; a++) map[a].ext = 1;
    for (int q = 0; q < s->n_order; q++) map[at(g, q)->axis].m[q] = at(g, q)->stride;
    int64_t budget = 4 * (int64_t)KG_MAX_TREE;
    weft_status st = region_add(g, t, pc, kg->body, map, r, &budget);
    if (!st && kg->epi && epi_in_nest(g)) st = region_add(g, t, pc, kg->epi, map, r, &budget);
    for (int u = 0; u < kg->n_stage && !st; u++) { // the stages at loops that read t
        const kg_stage *us = &kg->stage[u];
        if (s->place[u] != KG_AT || !(kg_reads(NULL, us->body, t) || kg_reads(NULL, us->epi, t))) continue;
        int pu = kg_pos(s, s->at[u]);
        if (pu < pc && kg_is_stage(t)) { // (an input's reader outside reads the input itself)
            st = weft_error(WEFT_ERR_ARG, "kgen '%s': stage %s, at loop %s, reads %s, placed at %s inside it", kg->name,
                            us->name, s->loop[s->at[u]].name, kg_tname(kg, t), at(g, pc)->name);
            break;
        }
        region ru;
        if (pu < pc) continue;
        if ((st = region_of(g, WEFT_KG_MAX_INPUTS + u, pu, &ru))) break;
        if (!ru.n) continue; // not computed: nothing reads it
        for (int a = 0; a < kg->n_axis; a++) map[a] = (amap){.ext = kg->axis[a].ext};
        for (int d = 0; d < us->n_out; d++) {
            amap *x = &map[us->out_axis[d]];
            x->base = ru.lo[d];
            x->ext = ru.n ? ru.ext[d] : 1;
            for (int q = 0; q <= pu; q++) x->m[q] = ru.mul[d][q];
        }
        st = region_add(g, t, pc, us->body, map, r, &budget);
        if (!st && us->epi) st = region_add(g, t, pc, us->epi, map, r, &budget);
    }
    free(map);
    if (st) return st;
    int64_t n = 1;
    for (int d = 0; d < r->nd; d++)
        if (__builtin_mul_overflow(n, r->ext[d], &n) || n > KG_MAX_LOCAL)
            return weft_error(WEFT_ERR_ARG, "kgen '%s': the region of %s at a loop has more than %d elements", kg->name,
                              kg_tname(kg, t), KG_MAX_LOCAL);
    return WEFT_OK;
}

// Offset in a row-major buffer of dims ext over the variables <v>0_, <v>1_, ...
static void emit_buf_off(sb *b, int nd, const int64_t *ext, char v) {
    int64_t stride = 1;
    for (int d = nd - 1; d >= 0; d--) {
        sb_add(b, "%c%d_ * %lld%s", v, d, (long long)stride, d ? " + " : "");
        stride *= ext[d];
    }
}

// A stage computed, or an input copied, over a region into buf (dims ext, from Ls_<t>_<d>; inside NULL: a root
// stage, the whole of it from 0). Elements outside the tensor are skipped (no iteration that runs reads them),
// checked in the dims not known to be inside it.
static void gen_region(gen *g, int t, const int64_t *ext, const bool *inside, const char *buf) {
    sb *b = &g->b;
    const weft_kg *kg = g->kg;
    const int64_t *size;
    int nd = kg_tdims(kg, t, &size);
    const char *name = kg_tname(kg, t);
    const kg_stage *st = kg_is_stage(t) ? &kg->stage[t - WEFT_KG_MAX_INPUTS] : NULL;
    for (int d = 0; d < nd; d++) {
        // (no omp simd here: GCC 12 at -O3 vectorised such a copy into a local buffer with an aligned store to
        // an unaligned address, review 2026-11-28; the compiler vectorises these loops without it)
        if (d == 0 && !inside && g->s->n_order && at(g, 0)->ann == KG_ANN_PAR)
            sb_line(b, "#pragma omp parallel for num_threads(nt_) schedule(static)");
        sb_line(b, "for (int64_t r%d_ = 0; r%d_ < %lld; r%d_++) {", d, d, (long long)ext[d], d);
        b->ind++;
        if (!inside) sb_line(b, "const int64_t g%d_ = r%d_;", d, d);
        else {
            sb_line(b, "const int64_t g%d_ = Ls_%s_%d + r%d_;", d, name, d, d);
            if (!inside[d]) sb_line(b, "if ((uint64_t)g%d_ >= %lldu) continue;", d, (long long)size[d]);
        }
    }
    if (!st) { // a copy
        sb_add(b, "%*s%s[", 4 * b->ind, "", buf);
        emit_buf_off(b, nd, ext, 'r');
        sb_add(b, "] = I_%s[", name);
        emit_buf_off(b, nd, size, 'g');
        sb_add(b, "];\n");
    } else { // the stage at (g0_, g1_, ...): its axes, its reduction, its epilogue
        for (int d = 0; d < nd; d++) sb_line(b, "const int64_t a_%s = g%d_;", kg->axis[st->out_axis[d]].name, d);
        ectx x = {.kg = kg, .g = g, .local = inside != NULL, .acc = "acc_s"}; // (a stage at a loop reads local buffers)
        if (st->red == WEFT_KG_NONE) sb_add(b, "%*sconst float acc_s = ", 4 * b->ind, "");
        else {
            sb_line(b, "float acc_s = %s;", st->red == WEFT_KG_SUM ? "0.0f" : "-INFINITY");
            int nr = 0, last = -1;
            for (int a = 0; a < kg->n_axis; a++)
                if (kg->axis[a].reduce && kg->axis[a].stage == t - WEFT_KG_MAX_INPUTS) last = a;
            for (int a = 0; a <= last; a++) {
                if (!kg->axis[a].reduce || kg->axis[a].stage != t - WEFT_KG_MAX_INPUTS) continue;
                const char *an = kg->axis[a].name;
                if (a == last) // (a stage's reduction is not held to one order: vectorised, in lanes)
                    sb_line(b, "#pragma omp simd reduction(%s:acc_s)", st->red == WEFT_KG_SUM ? "+" : "max");
                sb_line(b, "for (int64_t a_%s = 0; a_%s < %lld; a_%s++)", an, an, (long long)kg->axis[a].ext, an);
                nr++;
            }
            sb_add(b, "%*s%s", 4 * (b->ind + (nr > 0)), "",
                   st->red == WEFT_KG_SUM ? "acc_s += " : "acc_s = kg_max(acc_s, ");
        }
        emit_val(b, &x, st->body);
        sb_add(b, st->red == WEFT_KG_MAXRED ? ");\n" : ";\n");
        sb_add(b, "%*s%s[", 4 * b->ind, "", buf);
        emit_buf_off(b, nd, ext, 'r');
        sb_add(b, "] = ");
        if (st->epi) emit_val(b, &x, st->epi);
        else sb_add(b, "acc_s");
        sb_add(b, ";\n");
    }
    for (int d = 0; d < nd; d++) {
        b->ind--;
        sb_line(b, "}");
    }
}

// The local buffers placed at loop position p: each tensor's region, its start from the loops outside, and its
// values (a stage computed, an input copied), in scope for the loops inside.
static weft_status open_locals(gen *g, int p) {
    const weft_kg_sched *s = g->s;
    int id = s->order[p];
    for (int t = 0; t < KG_MAX_T; t++) {
        int i = t - WEFT_KG_MAX_INPUTS;
        bool here = kg_is_stage(t) ? i < g->kg->n_stage && s->place[i] == KG_AT && s->at[i] == id
                                   : t < g->kg->n_in && s->read_at[t] == id;
        if (!here) continue;
        region r;
        weft_status st = region_of(g, t, p, &r);
        if (st) return st;
        if (!r.n) continue; // nothing in the nest reads it
        const char *name = kg_tname(g->kg, t);
        int64_t n = 1;
        for (int d = 0; d < r.nd; d++) {
            sb_add(&g->b, "%*sconst int64_t Ls_%s_%d = %lld", 4 * g->b.ind, "", name, d, (long long)r.lo[d]);
            for (int q = 0; q <= p; q++)
                if (r.mul[d][q]) sb_add(&g->b, " + l%d * %lld", s->order[q], (long long)r.mul[d][q]);
            sb_add(&g->b, ";\n");
            g->lext[t][d] = r.ext[d];
            n *= r.ext[d];
        }
        if ((g->lsum += n) > KG_MAX_LOCAL)
            return weft_error(WEFT_ERR_ARG, "kgen '%s': the local buffers open at loop %s hold more than %d elements "
                              "(they live on the stack)", g->kg->name, at(g, p)->name, KG_MAX_LOCAL);
        sb_line(&g->b, "float L_%s[%lld];", name, (long long)n);
        char buf[48];
        snprintf(buf, sizeof buf, "L_%s", name);
        // a dim whose region stays inside the tensor for every value of the loops outside needs no guard
        bool inside[WEFT_MAX_DIMS];
        const int64_t *size;
        kg_tdims(g->kg, t, &size);
        for (int d = 0; d < r.nd; d++) {
            int64_t lo = r.lo[d], hi = r.lo[d] + r.ext[d] - 1, span;
            bool ovf = false;
            for (int q = 0; q <= p && !ovf; q++)
                ovf = __builtin_mul_overflow(r.mul[d][q], at(g, q)->ext - 1, &span) ||
                      __builtin_add_overflow(span < 0 ? lo : hi, span, span < 0 ? &lo : &hi);
            inside[d] = !ovf && lo >= 0 && hi < size[d];
        }
        gen_region(g, t, r.ext, inside, buf);
        g->loc[t] = true;
    }
    return WEFT_OK;
}

// Opens loop p: its pragma, the for, the guards of the splits it completes, the axes it completes.
static void open_loop(gen *g, int p, bool wb) {
    const kg_loop *l = at(g, p);
    int id = g->s->order[p];
    if (l->ann == KG_ANN_PAR && !wb) sb_line(&g->b, "#pragma omp parallel for num_threads(nt_) schedule(static)");
    if (l->ann == KG_ANN_VEC) sb_line(&g->b, "#pragma omp simd");
    if (l->ann == KG_ANN_UNROLL) sb_line(&g->b, "#pragma GCC unroll %lld", (long long)l->ext);
    sb_line(&g->b, "for (int64_t l%d = 0; l%d < %lld; l%d++) { // %s", id, id, (long long)l->ext, id, l->name);
    g->b.ind++;
    // a split that leaves a tail: its part of the axis stops at its extent (the axis's own split, and any
    // inner loop split again by a factor that does not divide it)
    for (int x = 0; x < g->s->n_loops; x++) {
        int pos[WEFT_KG_MAX_LOOPS], n, last = -1;
        if (!kg_split_has_tail(g->s, x)) continue;
        n = kg_leaf_positions(g->s, x, pos);
        for (int q = 0; q < n; q++) last = pos[q] > last ? pos[q] : last;
        if (last != p) continue;
        sb_add(&g->b, "%*sif (", 4 * g->b.ind, "");
        for (int q = 0; q < n; q++)
            sb_add(&g->b, "%sl%d * %lld", q ? " + " : "", g->s->order[pos[q]],
                   (long long)(at(g, pos[q])->stride / g->s->loop[x].stride));
        sb_add(&g->b, " >= %lld) continue; // %s\n", (long long)g->s->loop[x].ext, g->s->loop[x].name);
    }
    for (int a = 0; a < g->kg->n_axis; a++) {
        if (g->last[a] != p) continue;
        sb_add(&g->b, "%*sconst int64_t a_%s = ", 4 * g->b.ind, "", g->kg->axis[a].name);
        const char *sep = "";
        for (int q = 0; q < g->s->n_order; q++)
            if (at(g, q)->axis == a) {
                sb_add(&g->b, "%sl%d * %lld", sep, g->s->order[q], (long long)at(g, q)->stride);
                sep = " + ";
            }
        sb_add(&g->b, ";\n");
    }
}

static void close_loops(gen *g, int n) {
    for (int i = 0; i < n; i++) {
        g->b.ind--;
        sb_line(&g->b, "}");
    }
}

// The update of the innermost loop.
static void emit_update(gen *g) {
    const weft_kg *kg = g->kg;
    sb *b = &g->b;
    sb_add(b, "%*s", 4 * b->ind, "");
    bool tile = g->cache_pos >= 0;
    if (kg->red == WEFT_KG_NONE && !tile) { // out = epi(body), the body computed once however often acc is read
        sb_add(b, "{ const float acc_v = ");
        emit_out_val(g, kg->body, "", true);
        sb_add(b, "; ");
        emit_out_off(g);
        sb_add(b, " = ");
        if (kg->epi) emit_out_val(g, kg->epi, "acc_v", true);
        else sb_add(b, "acc_v");
        sb_add(b, "; }\n");
        return;
    }
    if (tile) emit_tile_off(g);
    else emit_out_off(g);
    if (kg->red == WEFT_KG_NONE) sb_add(b, " = ");
    else if (kg->red == WEFT_KG_SUM) sb_add(b, " += ");
    else {
        sb_add(b, " = kg_max(");
        if (tile) emit_tile_off(g);
        else emit_out_off(g);
        sb_add(b, ", ");
    }
    emit_out_val(g, kg->body, "", true);
    sb_add(b, kg->red == WEFT_KG_MAXRED ? ");\n" : ";\n");
}

// The local tile's write-back: the output loops inside the tile's loop, then out = epi(acc).
static void gen_writeback(gen *g, int p) {
    while (p < g->s->n_order && is_red(g, p)) p++;
    if (p == g->s->n_order) {
        sb *b = &g->b;
        sb_add(b, "%*s", 4 * b->ind, "");
        emit_out_off(g);
        sb_add(b, " = ");
        gen t = {.s = g->s, .kg = g->kg, .cache_pos = g->cache_pos};
        memcpy(t.tstride, g->tstride, sizeof t.tstride);
        emit_tile_off(&t);
        if (t.b.oom) b->oom = true;
        if (g->kg->epi) emit_out_val(g, g->kg->epi, t.b.p ? t.b.p : "0", false);
        else sb_add(b, "%s", t.b.p ? t.b.p : "0");
        free(t.b.p);
        sb_add(b, ";\n");
        return;
    }
    open_loop(g, p, true);
    gen_writeback(g, p + 1);
    close_loops(g, 1);
}

// ---- tensorize ----

// The GEMM micro-kernel's text (the generated file's prelude when a schedule tensorizes): c[i][j] += a[i,k] *
// b[k,j] over m rows, n columns, kk steps; register-blocked with AVX2/FMA for m <= 6, n of 8 or 16, b's rows
// contiguous (m, n are constants at the call: the loops unroll into registers); plain loops otherwise.
static const char kg_gemm_src[] =
    "#if defined(__AVX2__) && defined(__FMA__)\n"
    "#include <immintrin.h>\n"
    "#endif\n"
    "static inline __attribute__((always_inline)) void kg_gemm(float *restrict c, int64_t ci, const float *restrict a,\n"
    "        int64_t ai, int64_t ak, const float *restrict b, int64_t bk, int64_t bj, int64_t m, int64_t n, int64_t kk) {\n"
    "#if defined(__AVX2__) && defined(__FMA__)\n"
    "    if (bj == 1 && m <= 6 && (n == 8 || n == 16)) {\n"
    "        __m256 acc[6][2], bv[2];\n"
    "        const int nv = (int)(n / 8);\n"
    "        for (int i = 0; i < m; i++)\n"
    "            for (int v = 0; v < nv; v++) acc[i][v] = _mm256_loadu_ps(c + i * ci + 8 * v);\n"
    "        for (int64_t k = 0; k < kk; k++) {\n"
    "            for (int v = 0; v < nv; v++) bv[v] = _mm256_loadu_ps(b + k * bk + 8 * v);\n"
    "            for (int i = 0; i < m; i++) {\n"
    "                const __m256 av = _mm256_broadcast_ss(a + i * ai + k * ak);\n"
    "                for (int v = 0; v < nv; v++) acc[i][v] = _mm256_fmadd_ps(av, bv[v], acc[i][v]);\n"
    "            }\n"
    "        }\n"
    "        for (int i = 0; i < m; i++)\n"
    "            for (int v = 0; v < nv; v++) _mm256_storeu_ps(c + i * ci + 8 * v, acc[i][v]);\n"
    "        return;\n"
    "    }\n"
    "#endif\n"
    "    for (int64_t k = 0; k < kk; k++)\n"
    "        for (int64_t i = 0; i < m; i++) {\n"
    "            const float av = a[i * ai + k * ak];\n"
    "            #pragma omp simd\n"
    "            for (int64_t j = 0; j < n; j++) c[i * ci + j] += av * b[k * bk + j * bj];\n"
    "        }\n"
    "}\n";

// The step of a load's offset (in its buffer: a local one while open, else the tensor) per iteration of the loop
// at position q; false on overflow or a load that is not affine.
static bool load_step(const gen *g, const weft_kg_expr *e, int q, int64_t *step) {
    const int64_t *size;
    int nd = kg_tdims(g->kg, e->id, &size);
    int64_t stride = 1, total = 0;
    bool ovf = false;
    for (int d = nd - 1; d >= 0 && !ovf; d--) {
        int64_t coef[KG_MAX_AXIS] = {0}, c0 = 0, m;
        if (!kg_affine(e->a[d], coef, &c0)) return false;
        ovf = __builtin_mul_overflow(coef[at(g, q)->axis], at(g, q)->stride, &m) ||
              __builtin_mul_overflow(m, stride, &m) || __builtin_add_overflow(total, m, &total) ||
              __builtin_mul_overflow(stride, g->loc[e->id] ? g->lext[e->id][d] : size[d], &stride);
    }
    *step = total;
    return !ovf;
}

// Loop position p and all inside it as one call of the GEMM micro-kernel: the checks, then the call with the
// operands' first elements (the inner loops at 0) and their steps.
static weft_status gen_tensorized(gen *g, int p) {
    const weft_kg_sched *s = g->s;
    const weft_kg *kg = g->kg;
    const char *ln = at(g, p)->name;
    if (s->n_order - p != 3)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': tensorize at %s: the GEMM micro-kernel replaces 3 loops (a "
                          "reduction, a row and a column loop), and %d are there", kg->name, ln, s->n_order - p);
    int r = -1, oi = -1, oj = -1;
    for (int q = p; q < s->n_order; q++) {
        if (is_red(g, q)) r = r < 0 ? q : -2;
        else if (oi < 0) oi = q;
        else oj = q;
        if (at(g, q)->ann == KG_ANN_PAR)
            return weft_error(WEFT_ERR_ARG, "kgen '%s': tensorize at %s: loop %s inside it is parallel", kg->name, ln,
                              at(g, q)->name);
    }
    if (r < 0 || oj < 0)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': tensorize at %s: the loops there are not one reduction and two "
                          "output loops", kg->name, ln);
    if (g->cache_pos < 0)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': tensorize at %s: the micro-kernel updates a local tile "
                          "(cache_write at a loop outside it)", kg->name, ln);
    for (int x = 0; x < s->n_loops; x++) {
        int pos[WEFT_KG_MAX_LOOPS], n = kg_split_has_tail(s, x) ? kg_leaf_positions(s, x, pos) : 0;
        for (int q = 0; q < n; q++)
            if (pos[q] >= p)
                return weft_error(WEFT_ERR_ARG, "kgen '%s': tensorize at %s: the split of %s leaves a tail there",
                                  kg->name, ln, s->loop[x].name);
    }
    for (int q = p; q < s->n_order; q++) {
        bool placed = s->cache_at == s->order[q];
        for (int t = 0; t < kg->n_stage; t++) placed |= s->place[t] == KG_AT && s->at[t] == s->order[q];
        for (int t = 0; t < kg->n_in; t++) placed |= s->read_at[t] == s->order[q];
        if (placed)
            return weft_error(WEFT_ERR_ARG, "kgen '%s': tensorize at %s: something is placed at loop %s, at or inside it",
                              kg->name, ln, at(g, q)->name);
    }
    const weft_kg_expr *e = kg->body, *ld[2];
    bool ok = e->kind == KG_BIN && e->op == WEFT_KG_MUL;
    for (int i = 0; ok && i < 2; i++) {
        ld[i] = e->a[i];
        ok = ld[i]->kind == KG_LOAD && !ld[i]->pad &&
             !(kg_is_stage(ld[i]->id) && s->place[ld[i]->id - WEFT_KG_MAX_INPUTS] == KG_INLINE);
    }
    int64_t st[2][3]; // each load's steps per iteration of the r, oi, oj loops
    for (int i = 0; ok && i < 2; i++)
        ok = load_step(g, ld[i], r, &st[i][0]) && load_step(g, ld[i], oi, &st[i][1]) && load_step(g, ld[i], oj, &st[i][2]);
    int A = ok && st[0][2] == 0 && st[1][1] == 0 ? 0 : ok && st[1][2] == 0 && st[0][1] == 0 ? 1 : -1;
    if (A < 0)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': tensorize at %s: the body is not a product of two loads (no pad, "
                          "affine), one fixed along the column loop and the other along the row loop", kg->name, ln);
    sb *b = &g->b;
    sb_line(b, "{ // %s %s %s: the GEMM micro-kernel", at(g, p)->name, at(g, p + 1)->name, at(g, p + 2)->name);
    b->ind++;
    for (int a = 0; a < kg->n_axis; a++) { // the axes with loops here, at their first iteration
        if (g->last[a] < p) continue;
        sb_add(b, "%*sconst int64_t a_%s = 0", 4 * b->ind, "", kg->axis[a].name);
        for (int q = 0; q < p; q++)
            if (at(g, q)->axis == a) sb_add(b, " + l%d * %lld", s->order[q], (long long)at(g, q)->stride);
        sb_add(b, ";\n");
    }
    sb_add(b, "%*skg_gemm(acc_ + 0", 4 * b->ind, "");
    for (int q = g->cache_pos + 1; q < p; q++)
        if (!is_red(g, q)) sb_add(b, " + l%d * %lld", s->order[q], (long long)g->tstride[q]);
    sb_add(b, ", %lld, &", (long long)g->tstride[oi]);
    ectx x = {.kg = kg, .g = g, .local = true, .acc = ""};
    emit_load(b, &x, ld[A]);
    sb_add(b, ", %lld, %lld, &", (long long)st[A][1], (long long)st[A][0]);
    emit_load(b, &x, ld[1 - A]);
    sb_add(b, ", %lld, %lld, %lld, %lld, %lld);\n", (long long)st[1 - A][0], (long long)st[1 - A][2],
           (long long)at(g, oi)->ext, (long long)at(g, oj)->ext, (long long)at(g, r)->ext);
    b->ind--;
    sb_line(b, "}");
    return WEFT_OK;
}

static weft_status gen_nest(gen *g, int p) {
    if (p == g->s->n_order) {
        emit_update(g);
        return WEFT_OK;
    }
    if (g->s->order[p] == g->s->tensor_at) return gen_tensorized(g, p);
    open_loop(g, p, false);
    bool was[KG_MAX_T];
    memcpy(was, g->loc, sizeof was);
    int64_t lsum = g->lsum;
    weft_status st = WEFT_OK;
    if (g->s->order[p] == g->s->cache_at) {
        g->cache_pos = p;
        int64_t t = 1;
        for (int q = g->s->n_order - 1; q > p; q--)
            if (!is_red(g, q)) g->tstride[q] = t, t *= at(g, q)->ext;
        g->tile = t;
        g->lsum += t;
        sb_line(&g->b, "float acc_[%lld];", (long long)t);
        if (g->kg->red != WEFT_KG_NONE)
            sb_line(&g->b, "for (int t_ = 0; t_ < %lld; t_++) acc_[t_] = %s;", (long long)t,
                    g->kg->red == WEFT_KG_SUM ? "0.0f" : "-INFINITY");
        if (!(st = open_locals(g, p)) && !(st = gen_nest(g, p + 1))) gen_writeback(g, p + 1);
        g->cache_pos = -1;
    } else if (!(st = open_locals(g, p))) st = gen_nest(g, p + 1);
    memcpy(g->loc, was, sizeof was);
    g->lsum = lsum;
    close_loops(g, 1);
    return st;
}

// Loops over the output axes in order (the initial value and the epilogue passes without a tile).
static void gen_out_pass(gen *g, bool init) {
    const weft_kg *kg = g->kg;
    sb *b = &g->b;
    bool par = g->s->n_order && at(g, 0)->ann == KG_ANN_PAR;
    if (par) sb_line(b, "#pragma omp parallel for num_threads(nt_) schedule(static)");
    for (int d = 0; d < kg->n_out; d++) {
        const kg_axis *a = &kg->axis[kg->out_axis[d]];
        sb_line(b, "for (int64_t a_%s = 0; a_%s < %lld; a_%s++) {", a->name, a->name, (long long)a->ext, a->name);
        b->ind++;
    }
    sb_add(b, "%*s", 4 * b->ind, "");
    emit_out_off(g);
    if (init) sb_add(b, " = %s;\n", kg->red == WEFT_KG_SUM ? "0.0f" : "-INFINITY");
    else {
        gen t = {.s = g->s, .kg = kg};
        emit_out_off(&t);
        if (t.b.oom) b->oom = true;
        sb_add(b, " = ");
        emit_out_val(g, kg->epi, t.b.p ? t.b.p : "0", false);
        sb_add(b, ";\n");
        free(t.b.p);
    }
    close_loops(g, kg->n_out);
}

// A stage at a loop lives in that loop's local buffer: nothing else may read it (other stages, or the output's
// epilogue where it runs after the nest), and the loop must still be there.
static weft_status check_places(const weft_kg_sched *s) {
    const weft_kg *kg = s->kg;
    for (int i = 0; i < kg->n_stage; i++) {
        if (s->place[i] != KG_AT) continue;
        int t = WEFT_KG_MAX_INPUTS + i;
        weft_status st = kg_check_local(s, t);
        if (st) return st;
        if (kg->epi && !(kg->red == WEFT_KG_NONE && s->cache_at < 0) && kg_reads(s, kg->epi, t))
            return weft_error(WEFT_ERR_ARG, "kgen '%s': the epilogue reads %s after the loops, where its local buffer "
                              "is gone (compute it at root)", kg->name, kg->stage[i].name);
    }
    return WEFT_OK;
}

char *weft_kg_source(const weft_kg_sched *s) {
    if (!s) return weft_error_null(WEFT_ERR_ARG, "kgen: source of a NULL schedule");
    if (kg_sched_check(s) || check_places(s)) return NULL;
    const weft_kg *kg = s->kg;
    gen g = {.s = s, .kg = kg, .cache_pos = -1};
    for (int a = 0; a < kg->n_axis; a++) g.last[a] = -1;
    for (int p = 0; p < s->n_order; p++) g.last[at(&g, p)->axis] = p;
    char desc[512];
    sb *b = &g.b;
    sb_line(b, "// generated by weft (src/kgen) for kernel '%s'", kg->name);
    sb_line(b, "// schedule: %s", weft_kg_sched_str(s, desc, sizeof desc));
    sb_line(b, "#include <math.h>");
    sb_line(b, "#include <stdint.h>");
    sb_line(b, "#include <stdlib.h>");
    // exp without a libm call, so loops that use it vectorise: weft's own (src/ops/cpu/vmath.h), with inf above
    // its clamp
    sb_line(b, "static inline float weft_vexp_f32(float x) %s", KG_STR(WEFT_VEXP_F32_BODY));
    // (weft_vexp_f32 clamps at 88: above, e * exp(x - 1), which overflows to inf past 88.72)
    sb_line(b, "static inline float kg_exp(float x) { return x > 88.0f ? (x > 89.0f ? INFINITY : "
               "2.718281828f * weft_vexp_f32(x - 1.0f)) : weft_vexp_f32(x); }");
    // fmaxf / fminf (a NaN operand gives the other), as compares that vectorise instead of libm calls
    sb_line(b, "static inline float kg_max(float a, float b) { return b != b || a > b ? a : b; }");
    sb_line(b, "static inline float kg_min(float a, float b) { return b != b || a < b ? a : b; }");
    if (s->tensor_at >= 0) sb_add(b, "%s", kg_gemm_src);
    sb_line(b, "int weft_kg_main(const float *const *in_, float *restrict O_, int nt_) {");
    b->ind++;
    sb_line(b, "(void)nt_;");
    for (int i = 0; i < kg->n_in; i++)
        sb_line(b, "const float *restrict I_%s = in_[%d];", kg->in[i].name, i);
    int n_root = 0;
    for (int i = 0; i < kg->n_stage; i++) {
        if (s->place[i] != KG_ROOT) continue;
        int64_t n = 1;
        for (int d = 0; d < kg->stage[i].n_out; d++) n *= kg->stage[i].size[d];
        sb_line(b, "float *restrict S_%s = malloc(%lldu * sizeof(float));", kg->stage[i].name, (long long)n);
        n_root++;
    }
    if (n_root) {
        sb_add(b, "%*sif (", 4 * b->ind, "");
        for (int i = 0, k = 0; i < kg->n_stage; i++)
            if (s->place[i] == KG_ROOT) sb_add(b, "%s!S_%s", k++ ? " || " : "", kg->stage[i].name);
        sb_add(b, ") {\n");
        for (int i = 0; i < kg->n_stage; i++)
            if (s->place[i] == KG_ROOT) sb_line(b, "    free(S_%s);", kg->stage[i].name);
        sb_line(b, "    return 1;");
        sb_line(b, "}");
    }
    for (int i = 0; i < kg->n_stage; i++) {
        if (s->place[i] != KG_ROOT) continue;
        char buf[48];
        snprintf(buf, sizeof buf, "S_%s", kg->stage[i].name);
        gen_region(&g, WEFT_KG_MAX_INPUTS + i, kg->stage[i].size, NULL, buf);
    }
    if (kg->red != WEFT_KG_NONE && s->cache_at < 0) gen_out_pass(&g, true);
    weft_status st = gen_nest(&g, 0);
    if (kg->epi && kg->red != WEFT_KG_NONE && s->cache_at < 0) gen_out_pass(&g, false);
    for (int i = 0; i < kg->n_stage; i++)
        if (s->place[i] == KG_ROOT) sb_line(b, "free(S_%s);", kg->stage[i].name);
    sb_line(b, "return 0;");
    b->ind--;
    sb_line(b, "}");
    if (st || b->oom) {
        free(b->p);
        return st ? NULL : weft_error_null(WEFT_ERR_OOM, "kgen '%s': out of memory generating code", kg->name);
    }
    return b->p;
}
