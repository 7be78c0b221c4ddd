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

#include "kgen_impl.h"

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

static void emit_idx(sb *b, const weft_kg *kg, const weft_kg_expr *e) {
    switch (e->kind) {
    case KG_CONST: sb_add(b, e->c < 0 ? "(%lld)" : "%lld", (long long)e->c); break; // never "--2"
    case KG_AXIS: sb_add(b, "a_%s", kg->axis[e->id].name); break;
    case KG_UN:
        sb_add(b, "(- ");
        emit_idx(b, kg, e->a[0]);
        sb_add(b, ")");
        break;
    default:
        sb_add(b, "(");
        emit_idx(b, kg, e->a[0]);
        sb_add(b, e->op == WEFT_KG_ADD ? " + " : e->op == WEFT_KG_SUB ? " - " : " * ");
        emit_idx(b, kg, e->a[1]);
        sb_add(b, ")");
    }
}

static void emit_val(sb *b, const weft_kg *kg, const weft_kg_expr *e, const char *acc) {
    static const char *bin[] = {" + ", " - ", " * ", " / "};
    static const char *un[] = {"-", "expf", "logf", "sqrtf", "tanhf"};
    if (e->is_int) {
        sb_add(b, "(float)");
        emit_idx(b, kg, e);
        return;
    }
    switch (e->kind) {
    case KG_CONST: sb_add(b, "%af", (double)(float)e->c); break;
    case KG_ACC: sb_add(b, "%s", acc); break;
    case KG_LOAD: {
        const kg_input *in = &kg->in[e->id];
        if (e->pad) {
            sb_add(b, "(");
            for (int d = 0; d < e->n; d++) {
                sb_add(b, "%s(uint64_t)", d ? " && " : "");
                emit_idx(b, kg, e->a[d]);
                sb_add(b, " < %lldu", (long long)in->size[d]);
            }
            sb_add(b, " ? ");
        }
        sb_add(b, "I_%s[", in->name);
        int64_t stride = 1;
        for (int d = e->n - 1; d >= 0; d--) {
            emit_idx(b, kg, e->a[d]);
            sb_add(b, " * %lld%s", (long long)stride, d ? " + " : "]");
            stride *= in->size[d];
        }
        if (e->pad) sb_add(b, " : %af)", (double)(float)e->c);
        break;
    }
    case KG_UN:
        sb_add(b, "%s(", un[e->op - WEFT_KG_NEG]);
        emit_val(b, kg, e->a[0], acc);
        sb_add(b, ")");
        break;
    default:
        if (e->op == WEFT_KG_MAX || e->op == WEFT_KG_MIN) {
            sb_add(b, e->op == WEFT_KG_MAX ? "fmaxf(" : "fminf(");
            emit_val(b, kg, e->a[0], acc);
            sb_add(b, ", ");
            emit_val(b, kg, e->a[1], acc);
            sb_add(b, ")");
        } else {
            sb_add(b, "(");
            emit_val(b, kg, e->a[0], acc);
            sb_add(b, "%s", bin[e->op]);
            emit_val(b, kg, e->a[1], acc);
            sb_add(b, ")");
        }
    }
}

// ---- loops ----

typedef struct gen {
    sb b;
    const weft_kg_sched *s;
    const weft_kg *kg;
    int last[2 * WEFT_KG_MAX_AXES]; // position of each axis's innermost loop
    int cache_pos;                  // -1: no local tile
    int64_t tstride[WEFT_KG_MAX_LOOPS]; // a tile loop's stride in acc_
    int64_t tile;
} gen;

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
        emit_val(b, kg, kg->body, "");
        sb_add(b, "; ");
        emit_out_off(g);
        sb_add(b, " = ");
        if (kg->epi) emit_val(b, kg, kg->epi, "acc_v");
        else sb_add(b, "acc_v");
        sb_add(b, "; }\n");
        return;
    }
    if (tile) emit_tile_off(g);
    else emit_out_off(g);
    if (kg->red == WEFT_KG_NONE) sb_add(b, " = ");
    else if (kg->red == WEFT_KG_SUM) sb_add(b, " += ");
    else {
        sb_add(b, " = fmaxf(");
        if (tile) emit_tile_off(g);
        else emit_out_off(g);
        sb_add(b, ", ");
    }
    emit_val(b, kg, kg->body, "");
    sb_add(b, kg->red == WEFT_KG_MAXRED ? ");\n" : ";\n");
}

static void gen_nest(gen *g, int p);

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
        if (g->kg->epi) emit_val(b, g->kg, g->kg->epi, t.b.p ? t.b.p : "0");
        else sb_add(b, "%s", t.b.p ? t.b.p : "0");
        free(t.b.p);
        sb_add(b, ";\n");
        return;
    }
    open_loop(g, p, true);
    gen_writeback(g, p + 1);
    close_loops(g, 1);
}

static void gen_nest(gen *g, int p) {
    if (p == g->s->n_order) {
        emit_update(g);
        return;
    }
    open_loop(g, p, false);
    if (g->s->order[p] == g->s->cache_at) {
        g->cache_pos = p;
        int64_t t = 1;
        for (int q = g->s->n_order - 1; q > p; q--)
            if (!is_red(g, q)) g->tstride[q] = t, t *= at(g, q)->ext;
        g->tile = t;
        sb_line(&g->b, "float acc_[%lld];", (long long)t);
        if (g->kg->red != WEFT_KG_NONE)
            sb_line(&g->b, "for (int t_ = 0; t_ < %lld; t_++) acc_[t_] = %s;", (long long)t,
                    g->kg->red == WEFT_KG_SUM ? "0.0f" : "-INFINITY");
        gen_nest(g, p + 1);
        gen_writeback(g, p + 1);
        g->cache_pos = -1;
    } else gen_nest(g, p + 1);
    close_loops(g, 1);
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
        emit_val(b, kg, kg->epi, t.b.p ? t.b.p : "0");
        sb_add(b, ";\n");
        free(t.b.p);
    }
    close_loops(g, kg->n_out);
}

char *weft_kg_source(const weft_kg_sched *s) {
    if (!s) return weft_error_null(WEFT_ERR_ARG, "kgen: source of a NULL schedule");
    if (kg_sched_check(s)) return NULL;
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
    sb_line(b, "void weft_kg_main(const float *const *in_, float *restrict O_, int nt_) {");
    b->ind++;
    sb_line(b, "(void)nt_;");
    for (int i = 0; i < kg->n_in; i++)
        sb_line(b, "const float *restrict I_%s = in_[%d];", kg->in[i].name, i);
    if (kg->red != WEFT_KG_NONE && s->cache_at < 0) gen_out_pass(&g, true);
    gen_nest(&g, 0);
    if (kg->epi && kg->red != WEFT_KG_NONE && s->cache_at < 0) gen_out_pass(&g, false);
    b->ind--;
    sb_line(b, "}");
    if (b->oom) {
        free(b->p);
        return weft_error_null(WEFT_ERR_OOM, "kgen '%s': out of memory generating code", kg->name);
    }
    return b->p;
}
