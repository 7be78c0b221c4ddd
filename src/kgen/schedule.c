// Schedules: the loop nest of a definition and the primitives that reshape it
// (split, reorder, unroll, vectorize, parallel, cache_write). A schedule never
// changes what is computed, only the order: codegen.c turns it into loops.
#include <stdio.h>
#include <stdlib.h>

#include "kgen_impl.h"

static weft_status check_cache(const weft_kg_sched *s);

weft_kg_sched *weft_kg_schedule(const weft_kg *kg) {
    if (!kg) return weft_error_null(WEFT_ERR_ARG, "kgen: schedule of a NULL definition");
    if (!kg->defined) return weft_error_null(WEFT_ERR_STATE, "kgen '%s': schedule before compute", kg->name);
    weft_kg_sched *s = calloc(1, sizeof *s);
    if (!s) return weft_error_null(WEFT_ERR_OOM, "kgen '%s': out of memory", kg->name);
    s->kg = kg;
    s->cache_at = -1;
    s->tensor_at = -1;
    for (int i = 0; i < KG_MAX_STAGES; i++) s->place[i] = KG_ROOT, s->at[i] = -1;
    for (int i = 0; i < WEFT_KG_MAX_INPUTS; i++) s->read_at[i] = -1;
    int ids[2 * WEFT_KG_MAX_AXES], n = 0;
    for (int i = 0; i < kg->n_out; i++) ids[n++] = kg->out_axis[i];
    for (int i = 0; i < kg->n_axis; i++)
        if (kg->axis[i].reduce && kg->axis[i].stage == KG_MAIN) ids[n++] = i;
    for (int i = 0; i < n; i++) {
        kg_loop *l = &s->loop[i];
        snprintf(l->name, sizeof l->name, "%s", kg->axis[ids[i]].name);
        l->axis = ids[i];
        l->ext = kg->axis[ids[i]].ext;
        l->stride = 1;
        l->live = true;
        s->order[i] = i;
    }
    s->n_loops = s->n_order = n;
    return s;
}

void weft_kg_sched_free(weft_kg_sched *s) { free(s); }

int kg_pos(const weft_kg_sched *s, int l) {
    for (int p = 0; p < s->n_order; p++)
        if (s->order[p] == l) return p;
    return -1;
}

static weft_status check_loop(const weft_kg_sched *s, weft_kg_loop l, const char *what) {
    if (!s) return weft_error(WEFT_ERR_ARG, "kgen: %s on a NULL schedule", what);
    if (l < 0 || l >= s->n_loops || !s->loop[l].live)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': %s of loop %d, which is not a loop of the schedule%s", s->kg->name,
                          what, l, l >= 0 && l < s->n_loops ? " (it was split)" : "");
    return WEFT_OK;
}

weft_kg_loop weft_kg_get_loop(const weft_kg_sched *s, const char *name) {
    if (!s || !name) return weft_error(WEFT_ERR_ARG, "kgen: get_loop given NULL"), -1;
    for (int i = 0; i < s->n_loops; i++)
        if (s->loop[i].live && !strcmp(s->loop[i].name, name)) return i;
    return weft_error(WEFT_ERR_ARG, "kgen '%s': no loop named '%s'", s->kg->name, name), -1;
}

weft_status weft_kg_split(weft_kg_sched *s, weft_kg_loop l, int64_t factor, weft_kg_loop *outer, weft_kg_loop *inner) {
    weft_status st = check_loop(s, l, "split");
    if (st) return st;
    kg_loop *x = &s->loop[l];
    if (factor < 1 || factor > x->ext)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': split of %s (extent %lld) by %lld", s->kg->name, x->name,
                          (long long)x->ext, (long long)factor);
    if (s->n_loops + 2 > WEFT_KG_MAX_LOOPS)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': more than %d loops", s->kg->name, WEFT_KG_MAX_LOOPS);
    if (strlen(x->name) + 2 >= sizeof x->name)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': loop %s split too deep", s->kg->name, x->name);
    int o = s->n_loops++, i = s->n_loops++;
    kg_loop *lo = &s->loop[o], *li = &s->loop[i];
    char base[sizeof x->name];
    memcpy(base, x->name, sizeof base);
    *lo = *x;
    *li = *x;
    snprintf(lo->name, sizeof lo->name, "%.45s.o", base);
    snprintf(li->name, sizeof li->name, "%.45s.i", base);
    lo->ext = (x->ext + factor - 1) / factor;
    lo->stride = x->stride * factor;
    li->ext = factor;
    lo->ann = li->ann = KG_ANN_NONE;
    x->live = false;
    x->child[0] = o;
    x->child[1] = i;
    // what was placed at l moves to its outer loop (the same work, over a larger region)
    if (s->cache_at == l) s->cache_at = o;
    if (s->tensor_at == l) s->tensor_at = o;
    for (int t = 0; t < KG_MAX_STAGES; t++)
        if (s->at[t] == l) s->at[t] = o;
    for (int t = 0; t < WEFT_KG_MAX_INPUTS; t++)
        if (s->read_at[t] == l) s->read_at[t] = o;
    int p = kg_pos(s, l);
    memmove(&s->order[p + 2], &s->order[p + 1], (size_t)(s->n_order - p - 1) * sizeof s->order[0]);
    s->order[p] = o;
    s->order[p + 1] = i;
    s->n_order++;
    if (outer) *outer = o;
    if (inner) *inner = i;
    return WEFT_OK;
}

weft_status weft_kg_reorder(weft_kg_sched *s, int n, const weft_kg_loop *loops) {
    if (!s || !loops || n < 1 || n > s->n_order)
        return weft_error(WEFT_ERR_ARG, "kgen%s%s: reorder of %d loops", s ? " " : "", s ? s->kg->name : "", n);
    int pos[WEFT_KG_MAX_LOOPS];
    for (int i = 0; i < n; i++) {
        weft_status st = check_loop(s, loops[i], "reorder");
        if (st) return st;
        for (int j = 0; j < i; j++)
            if (loops[j] == loops[i])
                return weft_error(WEFT_ERR_ARG, "kgen '%s': reorder names loop %s twice", s->kg->name,
                                  s->loop[loops[i]].name);
        pos[i] = kg_pos(s, loops[i]);
    }
    // the places they hold, in increasing order, get the loops in the given order
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && pos[j - 1] > pos[j]; j--) {
            int t = pos[j];
            pos[j] = pos[j - 1];
            pos[j - 1] = t;
        }
    for (int i = 0; i < n; i++) s->order[pos[i]] = loops[i];
    return WEFT_OK;
}

static weft_status annotate(weft_kg_sched *s, weft_kg_loop l, int ann, const char *what) {
    weft_status st = check_loop(s, l, what);
    if (st) return st;
    if (ann == KG_ANN_UNROLL && s->loop[l].ext > 64)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': unroll of %s, extent %lld (at most 64)", s->kg->name,
                          s->loop[l].name, (long long)s->loop[l].ext);
    if (ann != KG_ANN_UNROLL && s->kg->axis[s->loop[l].axis].reduce)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': %s of %s, a reduction loop (its iterations depend on each other)",
                          s->kg->name, what, s->loop[l].name);
    s->loop[l].ann = ann;
    return WEFT_OK;
}

weft_status weft_kg_unroll(weft_kg_sched *s, weft_kg_loop l) { return annotate(s, l, KG_ANN_UNROLL, "unroll"); }
weft_status weft_kg_vectorize(weft_kg_sched *s, weft_kg_loop l) { return annotate(s, l, KG_ANN_VEC, "vectorize"); }
weft_status weft_kg_parallel(weft_kg_sched *s, weft_kg_loop l) { return annotate(s, l, KG_ANN_PAR, "parallel"); }

weft_status weft_kg_cache_write(weft_kg_sched *s, weft_kg_loop l) {
    weft_status st = check_loop(s, l, "cache_write");
    if (st) return st;
    int old = s->cache_at;
    s->cache_at = l;
    st = check_cache(s);
    if (st) s->cache_at = old;
    return st;
}

// Whether expression e reads tensor t (directly, or through an inlined stage when s is given).
static bool reads(const weft_kg_sched *s, const weft_kg_expr *e, int t, int64_t *budget) {
    if (--*budget < 0) return true; // (a definition's expressions expand to at most KG_MAX_TREE nodes)
    if (e->kind == KG_LOAD && e->id == t) return true;
    if (e->kind == KG_LOAD && kg_is_stage(e->id) && s && s->place[e->id - WEFT_KG_MAX_INPUTS] == KG_INLINE) {
        const kg_stage *u = &s->kg->stage[e->id - WEFT_KG_MAX_INPUTS];
        if (reads(s, u->body, t, budget) || (u->epi && reads(s, u->epi, t, budget))) return true;
    }
    for (int i = 0; i < e->n; i++)
        if (reads(s, e->a[i], t, budget)) return true;
    return false;
}

bool kg_reads(const weft_kg_sched *s, const weft_kg_expr *e, int t) {
    int64_t budget = 4 * (int64_t)KG_MAX_TREE;
    return e && reads(s, e, t, &budget);
}

static weft_status check_stage(const weft_kg_sched *s, int stage, const char *what) {
    if (!s) return weft_error(WEFT_ERR_ARG, "kgen: %s on a NULL schedule", what);
    if (stage < WEFT_KG_MAX_INPUTS || stage >= WEFT_KG_MAX_INPUTS + s->kg->n_stage)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': %s of %d, which is not a stage's handle", s->kg->name, what, stage);
    return WEFT_OK;
}

// A stage at a loop lives in that loop's local buffer: only the output's nest and the stages at loops inside it
// read it there; a stage computed at root or inlined cannot (region_of checks the loops when code is made).
weft_status kg_check_local(const weft_kg_sched *s, int t) {
    const weft_kg *kg = s->kg;
    for (int u = 0; u < kg->n_stage; u++) {
        const kg_stage *st = &kg->stage[u];
        if (s->place[u] != KG_AT && (kg_reads(NULL, st->body, t) || kg_reads(NULL, st->epi, t)))
            return weft_error(WEFT_ERR_ARG, "kgen '%s': %s is read by stage %s, %s, so it cannot live in a loop's "
                              "local buffer", kg->name, kg_tname(kg, t), st->name,
                              s->place[u] == KG_ROOT ? "computed at root" : "inlined");
    }
    return WEFT_OK;
}

weft_status weft_kg_compute_at(weft_kg_sched *s, int stage, weft_kg_loop l) {
    weft_status st = check_stage(s, stage, "compute_at");
    if (!st) st = check_loop(s, l, "compute_at");
    if (st) return st;
    s->place[stage - WEFT_KG_MAX_INPUTS] = KG_AT;
    s->at[stage - WEFT_KG_MAX_INPUTS] = l;
    return WEFT_OK;
}

weft_status weft_kg_compute_inline(weft_kg_sched *s, int stage) {
    weft_status st = check_stage(s, stage, "compute_inline");
    if (st) return st;
    const kg_stage *t = &s->kg->stage[stage - WEFT_KG_MAX_INPUTS];
    if (t->red != WEFT_KG_NONE)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': compute_inline of %s, a reduction (computed once per element, not "
                          "at each read)", s->kg->name, t->name);
    s->place[stage - WEFT_KG_MAX_INPUTS] = KG_INLINE;
    s->at[stage - WEFT_KG_MAX_INPUTS] = -1;
    return WEFT_OK;
}

weft_status weft_kg_compute_root(weft_kg_sched *s, int stage) {
    weft_status st = check_stage(s, stage, "compute_root");
    if (st) return st;
    s->place[stage - WEFT_KG_MAX_INPUTS] = KG_ROOT;
    s->at[stage - WEFT_KG_MAX_INPUTS] = -1;
    return WEFT_OK;
}

weft_status weft_kg_cache_read(weft_kg_sched *s, int input, weft_kg_loop l) {
    weft_status st = check_loop(s, l, "cache_read");
    if (st) return st;
    if (input < 0 || input >= s->kg->n_in)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': cache_read of %d, which is not an input (%d inputs)", s->kg->name,
                          input, s->kg->n_in);
    s->read_at[input] = l;
    return WEFT_OK;
}

weft_status weft_kg_tensorize(weft_kg_sched *s, weft_kg_loop l, weft_kg_intrin intrin) {
    weft_status st = check_loop(s, l, "tensorize");
    if (st) return st;
    if (intrin != WEFT_KG_INTRIN_GEMM)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': tensorize with intrinsic %d (WEFT_KG_INTRIN_GEMM only)", s->kg->name,
                          (int)intrin);
    if (s->kg->red != WEFT_KG_SUM)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': tensorize with the GEMM micro-kernel needs a sum", s->kg->name);
    s->tensor_at = l;
    return WEFT_OK;
}

bool kg_split_has_tail(const weft_kg_sched *s, int l) {
    const kg_loop *x = &s->loop[l];
    return !x->live && x->ext % s->loop[x->child[1]].ext != 0;
}

int kg_leaf_positions(const weft_kg_sched *s, int l, int *pos) {
    if (s->loop[l].live) {
        pos[0] = kg_pos(s, l);
        return 1;
    }
    int n = kg_leaf_positions(s, s->loop[l].child[0], pos);
    return n + kg_leaf_positions(s, s->loop[l].child[1], pos + n);
}

// Elements of the local tile at loop position pc: the output loops inside it.
static int64_t tile_elems(const weft_kg_sched *s, int pc) {
    int64_t n = 1;
    for (int p = pc + 1; p < s->n_order; p++) {
        const kg_loop *l = &s->loop[s->order[p]];
        if (!s->kg->axis[l->axis].reduce) n *= l->ext;
        if (n > 4096) return n;
    }
    return n;
}

// The local tile's loop is outside every reduction loop, and the tile is small.
static weft_status check_cache(const weft_kg_sched *s) {
    const weft_kg *kg = s->kg;
    if (s->cache_at < 0) return WEFT_OK;
    int pc = kg_pos(s, s->cache_at);
    for (int p = 0; p <= pc; p++) {
        const kg_loop *l = &s->loop[s->order[p]];
        if (kg->axis[l->axis].reduce)
            return weft_error(WEFT_ERR_ARG, "kgen '%s': cache_write at %s, inside reduction loop %s", kg->name,
                              s->loop[s->cache_at].name, l->name);
    }
    if (tile_elems(s, pc) > 4096)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': cache_write at %s: a tile of more than 4096 elements", kg->name,
                          s->loop[s->cache_at].name);
    return WEFT_OK;
}

weft_status kg_sched_check(const weft_kg_sched *s) {
    const weft_kg *kg = s->kg;
    for (int p = 0; p < s->n_order; p++) {
        const kg_loop *l = &s->loop[s->order[p]];
        if (l->ann == KG_ANN_VEC && p != s->n_order - 1)
            return weft_error(WEFT_ERR_ARG, "kgen '%s': vectorize of %s, which is not the innermost loop", kg->name,
                              l->name);
        if (l->ann == KG_ANN_PAR && p != 0)
            return weft_error(WEFT_ERR_ARG, "kgen '%s': parallel of %s, which is not the outermost loop", kg->name,
                              l->name);
    }
    return check_cache(s);
}

const char *weft_kg_sched_str(const weft_kg_sched *s, char *buf, size_t n) {
    if (!buf || !n) return buf;
    buf[0] = 0;
    if (!s) return buf;
    size_t used = 0;
    static const char *ann[] = {"", "(unroll)", "(vec)", "(par)"};
    for (int p = 0; p < s->n_order && used < n; p++) {
        const kg_loop *l = &s->loop[s->order[p]];
        int w = snprintf(buf + used, n - used, "%s%s%s", p ? " " : "", l->name, ann[l->ann]);
        if (w < 0) break;
        used += (size_t)w;
    }
    if (s->tensor_at >= 0 && used < n) {
        int w = snprintf(buf + used, n - used, " gemm@%s", s->loop[s->tensor_at].name);
        used += w > 0 ? (size_t)w : 0;
    }
    if (s->cache_at >= 0 && used < n) {
        int w = snprintf(buf + used, n - used, " cache@%s", s->loop[s->cache_at].name);
        used += w > 0 ? (size_t)w : 0;
    }
    for (int i = 0; i < s->kg->n_in && used < n; i++)
        if (s->read_at[i] >= 0) {
            int w = snprintf(buf + used, n - used, " read:%s@%s", s->kg->in[i].name, s->loop[s->read_at[i]].name);
            used += w > 0 ? (size_t)w : 0;
        }
    for (int i = 0; i < s->kg->n_stage && used < n; i++)
        if (s->place[i] != KG_ROOT) {
            int w = s->place[i] == KG_INLINE
                        ? snprintf(buf + used, n - used, " %s(inline)", s->kg->stage[i].name)
                        : snprintf(buf + used, n - used, " %s@%s", s->kg->stage[i].name, s->loop[s->at[i]].name);
            used += w > 0 ? (size_t)w : 0;
        }
    return buf;
}
