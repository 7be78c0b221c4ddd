// Kernel definitions: inputs, axes and expressions, the checks that make a
// definition safe to generate code for (every load in range), and the f64
// reference that evaluates a definition directly.
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kgen_impl.h"

static bool is_ident(const char *s) {
    if (!s || !*s || strlen(s) > 31) return false;
    for (const char *p = s; *p; p++) {
        bool alpha = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_';
        if (!alpha && !(p > s && *p >= '0' && *p <= '9')) return false;
    }
    return true;
}

weft_kg *weft_kg_new(const char *name) {
    if (!is_ident(name))
        return weft_error_null(WEFT_ERR_ARG, "kgen: kernel name '%s' is not a C identifier of at most 31 characters",
                               name ? name : "(null)");
    weft_kg *kg = calloc(1, sizeof *kg);
    if (!kg) return weft_error_null(WEFT_ERR_OOM, "kgen '%s': out of memory", name);
    strcpy(kg->name, name);
    return kg;
}

void weft_kg_free(weft_kg *kg) {
    if (!kg) return;
    for (int i = 0; i < kg->n_nodes; i++) free(kg->nodes[i]);
    free(kg->nodes);
    free(kg);
}

// A name not yet used by an input or an axis of kg.
static bool name_free(const weft_kg *kg, const char *name, const char *what) {
    if (!is_ident(name)) {
        weft_error(WEFT_ERR_ARG, "kgen '%s': %s name '%s' is not a C identifier of at most 31 characters", kg->name,
                   what, name ? name : "(null)");
        return false;
    }
    for (int i = 0; i < kg->n_in; i++)
        if (!strcmp(kg->in[i].name, name)) goto taken;
    for (int i = 0; i < kg->n_axis; i++)
        if (!strcmp(kg->axis[i].name, name)) goto taken;
    for (int i = 0; i < kg->n_stage; i++)
        if (!strcmp(kg->stage[i].name, name)) goto taken;
    return true;
taken:
    weft_error(WEFT_ERR_ARG, "kgen '%s': the name '%s' is already used", kg->name, name);
    return false;
}

int weft_kg_input(weft_kg *kg, const char *name, int ndim, const int64_t *sizes) {
    if (!kg) return weft_error(WEFT_ERR_ARG, "kgen: input of a NULL definition"), -1;
    if (kg->defined) return weft_error(WEFT_ERR_STATE, "kgen '%s': input after compute", kg->name), -1;
    if (!name_free(kg, name, "input")) return -1;
    if (kg->n_in == WEFT_KG_MAX_INPUTS)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': more than %d inputs", kg->name, WEFT_KG_MAX_INPUTS), -1;
    if (ndim < 1 || ndim > WEFT_MAX_DIMS || !sizes)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': input %s has %d dims (1..%d)", kg->name, name, ndim, WEFT_MAX_DIMS), -1;
    kg_input *in = &kg->in[kg->n_in];
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (sizes[d] < 1 || sizes[d] > INT32_MAX || __builtin_mul_overflow(n, sizes[d], &n) || n > ((int64_t)1 << 40))
            return weft_error(WEFT_ERR_ARG, "kgen '%s': input %s: size %lld of dim %d out of range", kg->name, name,
                              (long long)sizes[d], d), -1;
        in->size[d] = sizes[d];
    }
    strcpy(in->name, name);
    in->ndim = ndim;
    return kg->n_in++;
}

static weft_kg_expr *node(weft_kg *kg, kg_kind kind) {
    if (kg->n_nodes == kg->cap_nodes) {
        int cap = kg->cap_nodes ? 2 * kg->cap_nodes : 32;
        weft_kg_expr **p = realloc(kg->nodes, (size_t)cap * sizeof *p);
        if (!p) return weft_error_null(WEFT_ERR_OOM, "kgen '%s': out of memory", kg->name);
        kg->nodes = p;
        kg->cap_nodes = cap;
    }
    weft_kg_expr *e = calloc(1, sizeof *e);
    if (!e) return weft_error_null(WEFT_ERR_OOM, "kgen '%s': out of memory", kg->name);
    e->owner = kg;
    e->kind = kind;
    kg->nodes[kg->n_nodes++] = e;
    return e;
}

// e was made by kg (an expression of another definition would index this one's inputs and axes).
static bool mine(const weft_kg *kg, const weft_kg_expr *e, const char *what) {
    if (e->owner == kg) return true;
    weft_error(WEFT_ERR_ARG, "kgen '%s': %s is an expression of another definition", kg->name, what);
    return false;
}

static weft_kg_expr *new_axis(weft_kg *kg, const char *name, int64_t extent, bool reduce) {
    if (!kg) return weft_error_null(WEFT_ERR_ARG, "kgen: axis of a NULL definition");
    if (kg->defined) return weft_error_null(WEFT_ERR_STATE, "kgen '%s': axis after compute", kg->name);
    if (!name_free(kg, name, "axis")) return NULL;
    if (extent < 1 || extent > INT32_MAX)
        return weft_error_null(WEFT_ERR_ARG, "kgen '%s': axis %s has extent %lld (1..2^31-1)", kg->name, name,
                               (long long)extent);
    if (kg->n_axis == KG_MAX_AXIS)
        return weft_error_null(WEFT_ERR_ARG, "kgen '%s': more than %d axes", kg->name, KG_MAX_AXIS);
    weft_kg_expr *e = node(kg, KG_AXIS);
    if (!e) return NULL;
    kg_axis *a = &kg->axis[kg->n_axis];
    strcpy(a->name, name);
    a->ext = extent;
    a->reduce = reduce;
    a->stage = -1;
    e->id = kg->n_axis++;
    e->is_int = true;
    return e;
}

weft_kg_expr *weft_kg_axis(weft_kg *kg, const char *name, int64_t extent) { return new_axis(kg, name, extent, false); }
weft_kg_expr *weft_kg_reduce_axis(weft_kg *kg, const char *name, int64_t extent) {
    return new_axis(kg, name, extent, true);
}

weft_kg_expr *weft_kg_const(weft_kg *kg, double v) {
    if (!kg) return NULL;
    if (!(fabs(v) <= FLT_MAX))
        return weft_error_null(WEFT_ERR_ARG, "kgen '%s': constant %g is not a finite f32", kg->name, v);
    weft_kg_expr *e = node(kg, KG_CONST);
    if (!e) return NULL;
    e->c = v;
    e->is_int = v == floor(v) && fabs(v) < 2147483648.0;
    return e;
}

const char *kg_tname(const weft_kg *kg, int t) {
    return kg_is_stage(t) ? kg->stage[t - WEFT_KG_MAX_INPUTS].name : kg->in[t].name;
}

int kg_tdims(const weft_kg *kg, int t, const int64_t **size) {
    if (kg_is_stage(t)) {
        *size = kg->stage[t - WEFT_KG_MAX_INPUTS].size;
        return kg->stage[t - WEFT_KG_MAX_INPUTS].n_out;
    }
    *size = kg->in[t].size;
    return kg->in[t].ndim;
}

static weft_kg_expr *load(weft_kg *kg, int t, weft_kg_expr *const *idx, bool pad, double v) {
    if (!kg) return NULL;
    if ((t < 0 || t >= kg->n_in) && (t < WEFT_KG_MAX_INPUTS || t >= WEFT_KG_MAX_INPUTS + kg->n_stage))
        return weft_error_null(WEFT_ERR_ARG, "kgen '%s': load of tensor %d (%d inputs, handles 0..; %d stages, handles "
                               "%d..)", kg->name, t, kg->n_in, kg->n_stage, WEFT_KG_MAX_INPUTS);
    const int64_t *size;
    int ndim = kg_tdims(kg, t, &size);
    const char *name = kg_tname(kg, t);
    if (!idx) return weft_error_null(WEFT_ERR_ARG, "kgen '%s': load of %s without indices", kg->name, name);
    for (int d = 0; d < ndim; d++) {
        if (!idx[d]) return NULL; // an earlier call failed and said why
        if (!mine(kg, idx[d], "an index")) return NULL;
        if (!idx[d]->is_int)
            return weft_error_null(WEFT_ERR_ARG, "kgen '%s': load of %s: index %d is not an integer expression of axes",
                                   kg->name, name, d);
    }
    if (!(fabs(v) <= FLT_MAX))
        return weft_error_null(WEFT_ERR_ARG, "kgen '%s': load of %s: pad %g is not a finite f32", kg->name, name, v);
    weft_kg_expr *e = node(kg, KG_LOAD);
    if (!e) return NULL;
    e->id = t;
    e->pad = pad;
    e->c = v;
    e->n = ndim;
    for (int d = 0; d < ndim; d++) e->a[d] = idx[d];
    return e;
}

weft_kg_expr *weft_kg_load(weft_kg *kg, int input, weft_kg_expr *const *idx) { return load(kg, input, idx, false, 0); }
weft_kg_expr *weft_kg_load_pad(weft_kg *kg, int input, weft_kg_expr *const *idx, double pad) {
    return load(kg, input, idx, true, pad);
}

weft_kg_expr *weft_kg_bin(weft_kg *kg, weft_kg_op op, weft_kg_expr *a, weft_kg_expr *b) {
    if (!kg || !a || !b) return NULL;
    if (op < WEFT_KG_ADD || op > WEFT_KG_MIN)
        return weft_error_null(WEFT_ERR_ARG, "kgen '%s': op %d is not binary", kg->name, (int)op);
    if (!mine(kg, a, "an operand") || !mine(kg, b, "an operand")) return NULL;
    weft_kg_expr *e = node(kg, KG_BIN);
    if (!e) return NULL;
    e->op = op;
    e->n = 2;
    e->a[0] = a;
    e->a[1] = b;
    e->is_int = a->is_int && b->is_int && (op == WEFT_KG_ADD || op == WEFT_KG_SUB || op == WEFT_KG_MUL);
    return e;
}

weft_kg_expr *weft_kg_un(weft_kg *kg, weft_kg_op op, weft_kg_expr *a) {
    if (!kg || !a) return NULL;
    if (op < WEFT_KG_NEG || op > WEFT_KG_TANH)
        return weft_error_null(WEFT_ERR_ARG, "kgen '%s': op %d is not unary", kg->name, (int)op);
    if (!mine(kg, a, "the operand")) return NULL;
    weft_kg_expr *e = node(kg, KG_UN);
    if (!e) return NULL;
    e->op = op;
    e->n = 1;
    e->a[0] = a;
    e->is_int = a->is_int && op == WEFT_KG_NEG;
    return e;
}

weft_kg_expr *weft_kg_acc(weft_kg *kg) { return kg ? node(kg, KG_ACC) : NULL; }

// Range of an integer expression over the axes' extents.
static bool int_range(const weft_kg *kg, const weft_kg_expr *e, int64_t *lo, int64_t *hi) {
    int64_t l0, h0, l1, h1;
    switch (e->kind) {
    case KG_CONST: *lo = *hi = (int64_t)e->c; return true;
    case KG_AXIS: *lo = 0, *hi = kg->axis[e->id].ext - 1; return true;
    case KG_UN: // NEG
        if (!int_range(kg, e->a[0], &l0, &h0)) return false;
        return !__builtin_sub_overflow(0, h0, lo) && !__builtin_sub_overflow(0, l0, hi);
    case KG_BIN:
        if (!int_range(kg, e->a[0], &l0, &h0) || !int_range(kg, e->a[1], &l1, &h1)) return false;
        if (e->op == WEFT_KG_ADD) return !__builtin_add_overflow(l0, l1, lo) && !__builtin_add_overflow(h0, h1, hi);
        if (e->op == WEFT_KG_SUB) return !__builtin_sub_overflow(l0, h1, lo) && !__builtin_sub_overflow(h0, l1, hi);
        int64_t p[4];
        if (__builtin_mul_overflow(l0, l1, &p[0]) || __builtin_mul_overflow(l0, h1, &p[1]) ||
            __builtin_mul_overflow(h0, l1, &p[2]) || __builtin_mul_overflow(h0, h1, &p[3]))
            return false;
        *lo = *hi = p[0];
        for (int i = 1; i < 4; i++) *lo = p[i] < *lo ? p[i] : *lo, *hi = p[i] > *hi ? p[i] : *hi;
        return true;
    default: return false;
    }
}

// Checks an expression of stage st's body (epi false) or epilogue (epi true):
// axes of that stage, acc only in the epilogue, no reduction axis there, loads in range.
static weft_status check_expr(const weft_kg *kg, int st, const weft_kg_expr *e, bool epi, int depth,
                              int64_t *budget) {
    if (depth > 64) return weft_error(WEFT_ERR_ARG, "kgen '%s': expression deeper than 64", kg->name);
    if (--*budget < 0)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': the expressions expand to more than %d nodes (shared ones counted at "
                          "each use)", kg->name, KG_MAX_TREE);
    int64_t lo, hi;
    if (e->is_int && !int_range(kg, e, &lo, &hi))
        return weft_error(WEFT_ERR_ARG, "kgen '%s': an integer expression overflows 64 bits over the axes' extents",
                          kg->name);
    switch (e->kind) {
    case KG_ACC:
        if (!epi) return weft_error(WEFT_ERR_ARG, "kgen '%s': acc outside the epilogue", kg->name);
        return WEFT_OK;
    case KG_AXIS:
        if (kg->axis[e->id].stage != st)
            return weft_error(WEFT_ERR_ARG, "kgen '%s': axis %s in %s%s, which is not one of its axes", kg->name,
                              kg->axis[e->id].name, st == KG_MAIN ? "the output" : "stage ",
                              st == KG_MAIN ? "" : kg->stage[st].name);
        if (epi && kg->axis[e->id].reduce)
            return weft_error(WEFT_ERR_ARG, "kgen '%s': reduction axis %s in the epilogue", kg->name,
                              kg->axis[e->id].name);
        return WEFT_OK;
    case KG_LOAD: {
        const int64_t *size;
        kg_tdims(kg, e->id, &size);
        for (int d = 0; d < e->n; d++) {
            weft_status s = check_expr(kg, st, e->a[d], epi, depth + 1, budget);
            if (s) return s;
            int_range(kg, e->a[d], &lo, &hi); // (checked above, as an integer expression)
            if (!e->pad && (lo < 0 || hi >= size[d]))
                return weft_error(WEFT_ERR_ARG,
                                  "kgen '%s': load of %s: index %d ranges over [%lld, %lld], outside [0, %lld] "
                                  "(weft_kg_load_pad reads a pad value there)",
                                  kg->name, kg_tname(kg, e->id), d, (long long)lo, (long long)hi, (long long)size[d] - 1);
        }
        return WEFT_OK;
    }
    default:
        for (int i = 0; i < e->n; i++) {
            weft_status s = check_expr(kg, st, e->a[i], epi, depth + 1, budget);
            if (s) return s;
        }
        return WEFT_OK;
    }
}

// Marks the unowned reduction axes an expression reads as stage st's (at most KG_MAX_TREE nodes walked;
// check_expr reports a larger expression).
static void claim_reduce(weft_kg *kg, int st, const weft_kg_expr *e, int64_t *budget) {
    if (--*budget < 0) return;
    if (e->kind == KG_AXIS && kg->axis[e->id].reduce && kg->axis[e->id].stage < 0) kg->axis[e->id].stage = st;
    for (int i = 0; i < e->n; i++) claim_reduce(kg, st, e->a[i], budget);
}

// Defines stage st (KG_MAIN: the output): its output axes, its reduction axes (a stage's: the unowned ones its
// body reads; the output's: every unowned one), the checks of its expressions. On failure nothing is claimed.
static weft_status define(weft_kg *kg, int st, const char *what, int n_axes, weft_kg_expr *const *axes,
                          weft_kg_reduce red, weft_kg_expr *body, weft_kg_expr *epilogue, int *out_axis,
                          int64_t *numel) {
    if (!body) return weft_last_status() ? weft_last_status() : weft_error(WEFT_ERR_ARG, "kgen '%s': %s has no body", kg->name, what);
    if (red < WEFT_KG_NONE || red > WEFT_KG_MAXRED) return weft_error(WEFT_ERR_ARG, "kgen '%s': %s: reduction %d", kg->name, what, (int)red);
    int n_spatial = 0;
    for (int i = 0; i < kg->n_axis; i++) n_spatial += !kg->axis[i].reduce && kg->axis[i].stage < 0;
    if (n_axes < 1 || n_axes > WEFT_KG_MAX_AXES || !axes || (st == KG_MAIN && n_axes != n_spatial))
        return weft_error(WEFT_ERR_ARG, "kgen '%s': %s needs %s (given %d)", kg->name, what,
                          st == KG_MAIN ? "each output axis no stage took, once" : "1..8 axes", n_axes);
    bool seen[KG_MAX_AXIS] = {0};
    *numel = 1;
    for (int i = 0; i < n_axes; i++) {
        if (!axes[i]) // (an earlier builder call failed and said why, or the caller passed NULL)
            return weft_last_status() ? weft_last_status()
                                      : weft_error(WEFT_ERR_ARG, "kgen '%s': %s: dim %d is NULL", kg->name, what, i);
        if (!mine(kg, axes[i], "an output axis")) return WEFT_ERR_ARG;
        if (axes[i]->kind != KG_AXIS || kg->axis[axes[i]->id].reduce || seen[axes[i]->id] ||
            kg->axis[axes[i]->id].stage >= 0)
            return weft_error(WEFT_ERR_ARG, "kgen '%s': %s: dim %d is not a new output axis", kg->name, what, i);
        seen[axes[i]->id] = true;
        out_axis[i] = axes[i]->id;
        if (__builtin_mul_overflow(*numel, kg->axis[axes[i]->id].ext, numel) || *numel > ((int64_t)1 << 40))
            return weft_error(WEFT_ERR_ARG, "kgen '%s': %s has more than 2^40 elements", kg->name, what);
    }
    if (!mine(kg, body, "the body") || (epilogue && !mine(kg, epilogue, "the epilogue"))) return WEFT_ERR_ARG;
    for (int i = 0; i < n_axes; i++) kg->axis[out_axis[i]].stage = st;
    int64_t budget = KG_MAX_TREE;
    if (st == KG_MAIN) {
        for (int i = 0; i < kg->n_axis; i++)
            if (kg->axis[i].reduce && kg->axis[i].stage < 0) kg->axis[i].stage = st;
    } else claim_reduce(kg, st, body, &budget);
    int n_reduce = 0;
    for (int i = 0; i < kg->n_axis; i++) n_reduce += kg->axis[i].reduce && kg->axis[i].stage == st;
    weft_status s = WEFT_OK;
    if (red == WEFT_KG_NONE && n_reduce)
        s = weft_error(WEFT_ERR_ARG, "kgen '%s': %s: %d reduction axes but no reduction", kg->name, what, n_reduce);
    else if (n_reduce > WEFT_KG_MAX_AXES)
        s = weft_error(WEFT_ERR_ARG, "kgen '%s': %s: more than %d reduction axes", kg->name, what, WEFT_KG_MAX_AXES);
    budget = KG_MAX_TREE;
    if (!s) s = check_expr(kg, st, body, false, 0, &budget);
    if (!s && epilogue) s = check_expr(kg, st, epilogue, true, 0, &budget);
    if (s)
        for (int i = 0; i < kg->n_axis; i++)
            if (kg->axis[i].stage == st) kg->axis[i].stage = -1;
    return s;
}

int weft_kg_stage(weft_kg *kg, const char *name, int n_axes, weft_kg_expr *const *axes, weft_kg_reduce red,
                  weft_kg_expr *body, weft_kg_expr *epilogue) {
    if (!kg) return weft_error(WEFT_ERR_ARG, "kgen: stage of a NULL definition"), -1;
    if (kg->defined) return weft_error(WEFT_ERR_STATE, "kgen '%s': stage after compute", kg->name), -1;
    if (!name_free(kg, name, "stage")) return -1;
    if (kg->n_stage == KG_MAX_STAGES)
        return weft_error(WEFT_ERR_ARG, "kgen '%s': more than %d stages", kg->name, KG_MAX_STAGES), -1;
    kg_stage *t = &kg->stage[kg->n_stage];
    int64_t numel;
    char what[48];
    snprintf(what, sizeof what, "stage %s", name);
    strcpy(t->name, name); // (for define's messages; the stage counts once defined)
    if (define(kg, kg->n_stage, what, n_axes, axes, red, body, epilogue, t->out_axis, &numel)) return -1;
    t->n_out = n_axes;
    for (int i = 0; i < n_axes; i++) t->size[i] = kg->axis[t->out_axis[i]].ext;
    t->red = red;
    t->body = body;
    t->epi = epilogue;
    return WEFT_KG_MAX_INPUTS + kg->n_stage++;
}

weft_status weft_kg_compute(weft_kg *kg, int n_axes, weft_kg_expr *const *axes, weft_kg_reduce red,
                            weft_kg_expr *body, weft_kg_expr *epilogue) {
    if (!kg) return weft_error(WEFT_ERR_ARG, "kgen: compute of a NULL definition");
    if (kg->defined) return weft_error(WEFT_ERR_STATE, "kgen '%s': compute given twice", kg->name);
    int64_t numel;
    weft_status st = define(kg, KG_MAIN, "the output", n_axes, axes, red, body, epilogue, kg->out_axis, &numel);
    if (st) return st;
    kg->n_out = n_axes;
    kg->red = red;
    kg->body = body;
    kg->epi = epilogue;
    kg->defined = true;
    return WEFT_OK;
}

int weft_kg_out_shape(const weft_kg *kg, int64_t *sizes) {
    if (!kg || !kg->defined) return weft_error(WEFT_ERR_STATE, "kgen: the output of an undefined kernel"), -1;
    if (!sizes) return weft_error(WEFT_ERR_ARG, "kgen '%s': out_shape given NULL", kg->name), -1;
    for (int i = 0; i < kg->n_out; i++) sizes[i] = kg->axis[kg->out_axis[i]].ext;
    return kg->n_out;
}

int64_t kg_out_numel(const weft_kg *kg) {
    int64_t n = 1;
    for (int i = 0; i < kg->n_out; i++) n *= kg->axis[kg->out_axis[i]].ext;
    return n;
}

int64_t kg_in_numel(const weft_kg *kg, int i) {
    int64_t n = 1;
    for (int d = 0; d < kg->in[i].ndim; d++) n *= kg->in[i].size[d];
    return n;
}

bool kg_affine(const weft_kg_expr *e, int64_t *coef, int64_t *c0) {
    switch (e->kind) {
    case KG_CONST: return !__builtin_add_overflow(*c0, (int64_t)e->c, c0);
    case KG_AXIS: return !__builtin_add_overflow(coef[e->id], 1, &coef[e->id]);
    case KG_UN: {
        int64_t c[KG_MAX_AXIS] = {0}, k = 0;
        if (!kg_affine(e->a[0], c, &k)) return false;
        bool ovf = false;
        for (int i = 0; i < KG_MAX_AXIS; i++) ovf |= __builtin_sub_overflow(coef[i], c[i], &coef[i]);
        return !ovf && !__builtin_sub_overflow(*c0, k, c0);
    }
    case KG_BIN: {
        int64_t c[2][KG_MAX_AXIS] = {{0}}, k[2] = {0, 0};
        bool lin[2] = {true, true};
        for (int j = 0; j < 2; j++) {
            if (!kg_affine(e->a[j], c[j], &k[j])) return false;
            for (int i = 0; i < KG_MAX_AXIS; i++) lin[j] = lin[j] && c[j][i] == 0;
        }
        if (e->op == WEFT_KG_MUL) { // one side constant
            if (!lin[0] && !lin[1]) return false;
            int v = lin[0] ? 1 : 0;
            int64_t m = k[1 - v];
            bool ovf = false;
            for (int i = 0; i < KG_MAX_AXIS; i++) {
                int64_t t;
                ovf |= __builtin_mul_overflow(c[v][i], m, &t) || __builtin_add_overflow(coef[i], t, &coef[i]);
            }
            int64_t t;
            ovf |= __builtin_mul_overflow(k[v], m, &t) || __builtin_add_overflow(*c0, t, c0);
            return !ovf;
        }
        bool ovf = false;
        for (int i = 0; i < KG_MAX_AXIS; i++) {
            if (e->op == WEFT_KG_SUB) ovf |= __builtin_sub_overflow(c[0][i], c[1][i], &c[1][i]);
            else ovf |= __builtin_add_overflow(c[0][i], c[1][i], &c[1][i]);
            ovf |= __builtin_add_overflow(coef[i], c[1][i], &coef[i]);
        }
        int64_t t;
        if (e->op == WEFT_KG_SUB) ovf |= __builtin_sub_overflow(k[0], k[1], &t);
        else ovf |= __builtin_add_overflow(k[0], k[1], &t);
        return !ovf && !__builtin_add_overflow(*c0, t, c0);
    }
    default: return false;
    }
}

// ---- the reference ----

typedef struct ref_env {
    const weft_kg *kg;
    const float *const *in;
    double *stage[KG_MAX_STAGES]; // the stages computed so far
    int64_t val[KG_MAX_AXIS];
    double acc;
} ref_env;

static int64_t ref_int(const ref_env *r, const weft_kg_expr *e) {
    switch (e->kind) {
    case KG_CONST: return (int64_t)e->c;
    case KG_AXIS: return r->val[e->id];
    case KG_UN: return -ref_int(r, e->a[0]);
    default: {
        int64_t a = ref_int(r, e->a[0]), b = ref_int(r, e->a[1]);
        return e->op == WEFT_KG_ADD ? a + b : e->op == WEFT_KG_SUB ? a - b : a * b;
    }
    }
}

static double ref_val(const ref_env *r, const weft_kg_expr *e) {
    if (e->is_int) return (double)ref_int(r, e);
    switch (e->kind) {
    case KG_CONST: return e->c;
    case KG_ACC: return r->acc;
    case KG_LOAD: {
        const int64_t *size;
        kg_tdims(r->kg, e->id, &size);
        int64_t off = 0;
        for (int d = 0; d < e->n; d++) {
            int64_t i = ref_int(r, e->a[d]);
            if (i < 0 || i >= size[d]) return e->c; // only a padded load gets here (checked at compute)
            off = off * size[d] + i;
        }
        return kg_is_stage(e->id) ? r->stage[e->id - WEFT_KG_MAX_INPUTS][off] : r->in[e->id][off];
    }
    case KG_UN: {
        double a = ref_val(r, e->a[0]);
        switch (e->op) {
        case WEFT_KG_NEG: return -a;
        case WEFT_KG_EXP: return exp(a);
        case WEFT_KG_LOG: return log(a);
        case WEFT_KG_SQRT: return sqrt(a);
        default: return tanh(a);
        }
    }
    default: {
        double a = ref_val(r, e->a[0]), b = ref_val(r, e->a[1]);
        switch (e->op) {
        case WEFT_KG_ADD: return a + b;
        case WEFT_KG_SUB: return a - b;
        case WEFT_KG_MUL: return a * b;
        case WEFT_KG_DIV: return a / b;
        case WEFT_KG_MAX: return fmax(a, b);
        default: return fmin(a, b);
        }
    }
    }
}

// One stage (st: its index, or KG_MAIN) evaluated into dst (f64) or fdst (f32), row-major over its output axes.
static void ref_stage(ref_env *r, int st, int n_out, const int *out_axis, weft_kg_reduce red, const weft_kg_expr *body,
                      const weft_kg_expr *epi, double *dst, float *fdst) {
    const weft_kg *kg = r->kg;
    int rax[WEFT_KG_MAX_AXES], n_red = 0;
    for (int i = 0; i < kg->n_axis; i++)
        if (kg->axis[i].reduce && kg->axis[i].stage == st) rax[n_red++] = i;
    int64_t n = 1;
    for (int d = 0; d < n_out; d++) n *= kg->axis[out_axis[d]].ext;
    for (int64_t o = 0; o < n; o++) {
        int64_t rest = o;
        for (int d = n_out - 1; d >= 0; d--) {
            int64_t ext = kg->axis[out_axis[d]].ext;
            r->val[out_axis[d]] = rest % ext;
            rest /= ext;
        }
        double acc = red == WEFT_KG_MAXRED ? -INFINITY : 0;
        if (red == WEFT_KG_NONE) acc = ref_val(r, body);
        else {
            for (int i = 0; i < n_red; i++) r->val[rax[i]] = 0;
            for (;;) {
                double v = ref_val(r, body);
                acc = red == WEFT_KG_SUM ? acc + v : fmax(acc, v);
                int i = n_red - 1;
                while (i >= 0 && ++r->val[rax[i]] == kg->axis[rax[i]].ext) r->val[rax[i--]] = 0;
                if (i < 0) break;
            }
        }
        r->acc = acc;
        double v = epi ? ref_val(r, epi) : acc;
        if (dst) dst[o] = v;
        else fdst[o] = (float)v;
    }
}

weft_status weft_kg_reference(const weft_kg *kg, const float *const *in, float *out) {
    if (!kg || !kg->defined) return weft_error(WEFT_ERR_STATE, "kgen: reference of an undefined kernel");
    if (!in || !out) return weft_error(WEFT_ERR_ARG, "kgen '%s': reference given NULL buffers", kg->name);
    for (int i = 0; i < kg->n_in; i++)
        if (!in[i]) return weft_error(WEFT_ERR_ARG, "kgen '%s': reference input %s is NULL", kg->name, kg->in[i].name);
    ref_env r = {.kg = kg, .in = in};
    weft_status st = WEFT_OK;
    for (int s = 0; s < kg->n_stage && !st; s++) {
        const kg_stage *t = &kg->stage[s];
        int64_t n = 1;
        for (int d = 0; d < t->n_out; d++) n *= t->size[d];
        if (!(r.stage[s] = malloc((size_t)n * sizeof(double))))
            st = weft_error(WEFT_ERR_OOM, "kgen '%s': reference: out of memory for stage %s", kg->name, t->name);
        else ref_stage(&r, s, t->n_out, t->out_axis, t->red, t->body, t->epi, r.stage[s], NULL);
    }
    if (!st) ref_stage(&r, KG_MAIN, kg->n_out, kg->out_axis, kg->red, kg->body, kg->epi, NULL, out);
    for (int s = 0; s < kg->n_stage; s++) free(r.stage[s]);
    return st;
}

// ---- the definition's hash ----

uint64_t kg_fnv(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t hash_expr(uint64_t h, const weft_kg_expr *e) {
    int32_t head[5] = {(int32_t)e->kind, (int32_t)e->op, e->id, e->pad, e->n};
    h = kg_fnv(h, head, sizeof head);
    h = kg_fnv(h, &e->c, sizeof e->c);
    for (int i = 0; i < e->n; i++) h = hash_expr(h, e->a[i]);
    return h;
}

uint64_t kg_def_hash(const weft_kg *kg) {
    uint64_t h = kg_fnv(KG_FNV_SEED, kg->name, strlen(kg->name) + 1);
    for (int i = 0; i < kg->n_in; i++) {
        h = kg_fnv(h, kg->in[i].name, strlen(kg->in[i].name) + 1);
        h = kg_fnv(h, &kg->in[i].ndim, sizeof kg->in[i].ndim);
        h = kg_fnv(h, kg->in[i].size, (size_t)kg->in[i].ndim * sizeof kg->in[i].size[0]);
    }
    for (int i = 0; i < kg->n_axis; i++) {
        h = kg_fnv(h, kg->axis[i].name, strlen(kg->axis[i].name) + 1);
        h = kg_fnv(h, &kg->axis[i].ext, sizeof kg->axis[i].ext);
        h = kg_fnv(h, &kg->axis[i].reduce, sizeof kg->axis[i].reduce);
        h = kg_fnv(h, &kg->axis[i].stage, sizeof kg->axis[i].stage);
    }
    for (int i = 0; i < kg->n_stage; i++) {
        const kg_stage *t = &kg->stage[i];
        h = kg_fnv(h, t->name, strlen(t->name) + 1);
        h = kg_fnv(h, t->out_axis, (size_t)t->n_out * sizeof t->out_axis[0]);
        h = kg_fnv(h, &t->red, sizeof t->red);
        h = hash_expr(h, t->body);
        h = t->epi ? hash_expr(kg_fnv(h, "|", 1), t->epi) : h;
    }
    h = kg_fnv(h, kg->out_axis, (size_t)kg->n_out * sizeof kg->out_axis[0]);
    h = kg_fnv(h, &kg->red, sizeof kg->red);
    h = hash_expr(h, kg->body);
    return kg->epi ? hash_expr(kg_fnv(h, "|", 1), kg->epi) : h;
}
