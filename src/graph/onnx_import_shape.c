// ONNX ops that move or pick elements, read as views, copies, index_select, scatter_add and matmul (see
// onnx_import.h): Tile, DepthToSpace, SpaceToDepth, Einsum, GatherND, ScatterElements (and the older
// Scatter), Resize and Upsample. Shapes are static, so index tables are computed when the model is loaded.
#include <math.h>
#include <stdlib.h>

#include "onnx_import.h"

#ifdef WEFT_HAVE_ONNX

static weft_value permute(nctx *c, const char *name, weft_value v, int nd, const int64_t *p) {
    return OK(v) ? oi_op(c, name, "permute", 1, &v, p, nd, NULL, 0) : v;
}

// Tile(x, repeats): x viewed with a dim of 1 before each repeated dim (a dim of 1 is repeated in place),
// expanded to the repeats, copied whole. Where those dims would pass WEFT_MAX_DIMS, one repeated dim at a
// time: x viewed as (before, 1, dim, after), expanded, copied.
weft_status oi_tile(nctx *c, const char *arg) {
    (void)arg;
    weft_value x = c->in[0];
    int nd = ndim_of(c, x), nr, n = 0;
    int64_t r[WEFT_MAX_DIMS], xs[WEFT_MAX_DIMS], s1[2 * WEFT_MAX_DIMS], e[1 + 2 * WEFT_MAX_DIMS], out[WEFT_MAX_DIMS];
    weft_status st = oi_konst_ints(c, 1, r, WEFT_MAX_DIMS, &nr);
    if (st) return st;
    if (nr != nd) FAIL("%d repeats for %d dims", nr, nd);
    sizes_copy(c, x, xs);
    for (int d = 0; d < nd; d++) {
        if (r[d] < 0 || __builtin_mul_overflow(r[d], xs[d], &out[d])) FAIL("repeat %lld of dim %d", (long long)r[d], d);
        if (r[d] != 1 && xs[d] != 1) s1[n] = 1, e[1 + n++] = r[d];
        s1[n] = xs[d], e[1 + n++] = xs[d] == 1 ? out[d] : xs[d];
    }
    if ((st = oi_check_made(nd, out))) return st;
    weft_value v = x;
    if (n <= WEFT_MAX_DIMS) {
        e[0] = n;
        v = oi_reshape(c, NULL, x, n, s1);
        v = OK(v) ? oi_op(c, NULL, "expand", 1, &v, e, 1 + n, NULL, 0) : v;
    } else {
        for (int d = 0; d < nd && OK(v); d++) {
            if (r[d] == 1) continue;
            int64_t before = 1, after = 1;
            for (int i = 0; i < nd; i++)
                if (i < d) before *= out[i];
                else if (i > d) after *= xs[i];
            v = oi_reshape(c, NULL, v, 4, (int64_t[]){before, 1, xs[d], after});
            v = OK(v) ? oi_op(c, NULL, "expand", 1, &v, (int64_t[]){4, before, r[d], xs[d], after}, 5, NULL, 0) : v;
        }
    }
    OUT0(oi_reshape(c, node_out(c, 0), v, nd, out));
}

// DepthToSpace (blocksize b; DCR: depth as (b, b, C'), CRD: as (C', b, b)) and SpaceToDepth: (N, C, H, W)
// viewed as 6 dims, permuted, viewed back.
weft_status oi_depth_space(nctx *c, const char *arg) {
    bool to_space = !strcmp(arg, "d2s");
    if (ndim_of(c, c->in[0]) != 4) FAIL("input must be 4-D (N, C, H, W)");
    int64_t b = oi_attr_i(c, "blocksize", 0), xs[4];
    sizes_copy(c, c->in[0], xs);
    int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
    int64_t bb, cbb, hb, wb;
    if (b < 1 || __builtin_mul_overflow(b, b, &bb) || __builtin_mul_overflow(C, bb, &cbb) ||
        __builtin_mul_overflow(H, b, &hb) || __builtin_mul_overflow(W, b, &wb))
        FAIL("blocksize %lld", (long long)b);
    if (to_space ? C % bb : H % b || W % b)
        FAIL("blocksize %lld does not divide the %s", (long long)b, to_space ? "channels by its square" : "height and width");
    int64_t s6[6], p[6], so[4];
    if (to_space) {
        int64_t Cp = C / bb;
        bool crd = oi_attr_s_is(c, "mode", "DCR", "CRD");
        if (!crd && !oi_attr_s_is(c, "mode", "DCR", "DCR")) FAIL("mode (DCR or CRD)");
        memcpy(s6, crd ? (int64_t[]){N, Cp, b, b, H, W} : (int64_t[]){N, b, b, Cp, H, W}, sizeof s6);
        memcpy(p, crd ? (int64_t[]){0, 1, 4, 2, 5, 3} : (int64_t[]){0, 3, 4, 1, 5, 2}, sizeof p);
        memcpy(so, (int64_t[]){N, Cp, hb, wb}, sizeof so);
    } else {
        memcpy(s6, (int64_t[]){N, C, H / b, b, W / b, b}, sizeof s6);
        memcpy(p, (int64_t[]){0, 3, 5, 1, 2, 4}, sizeof p);
        memcpy(so, (int64_t[]){N, cbb, H / b, W / b}, sizeof so);
    }
    weft_value v = permute(c, NULL, oi_reshape(c, NULL, c->in[0], 6, s6), 6, p);
    OUT0(oi_reshape(c, node_out(c, 0), v, 4, so));
}

// ---- Einsum

#define EIN_LABELS 64 // a-z, A-Z (0..51), then the dims an ellipsis stands for (52..)

typedef struct ein_op {
    weft_value v;
    int n;
    int lab[WEFT_MAX_DIMS];
} ein_op;

static int ein_label(char ch) {
    return ch >= 'a' && ch <= 'z' ? ch - 'a' : ch >= 'A' && ch <= 'Z' ? 26 + ch - 'A' : -1;
}

// Reads the subscripts of one term (up to ',' '-' or the end) for a value of nd dims (nd < 0: the output,
// whose ellipsis stands for ell dims). Returns the characters read, or -1.
static int ein_term(const char *s, int nd, int *ell, int *lab, int *n) {
    int k = 0, before = -1, count = 0;
    *n = 0;
    for (; s[k] && s[k] != ',' && s[k] != '-'; k++) {
        if (s[k] == ' ') continue;
        if (s[k] == '.') {
            if (before >= 0 || strncmp(s + k, "...", 3)) return -1;
            before = count, k += 2;
            continue;
        }
        if (ein_label(s[k]) < 0 || count >= WEFT_MAX_DIMS) return -1;
        lab[count++] = ein_label(s[k]);
    }
    int e = before < 0 ? 0 : nd >= 0 ? nd - count : *ell;
    if (e < 0 || (nd >= 0 && before < 0 && count != nd) || count + e > WEFT_MAX_DIMS) return -1;
    if (nd >= 0 && before >= 0 && e > *ell) *ell = e;
    // the ellipsis's dims, right-aligned across operands: labels 52 + (ELL - e) .. 52 + ELL - 1, fixed later
    for (int i = count - 1; i >= (before < 0 ? count : before); i--) lab[i + e] = lab[i];
    for (int i = 0; i < e; i++) lab[before + i] = 52 + EIN_LABELS + i - e; // relative to the end; see ein_fix
    *n = count + e;
    return k;
}

// Labels of an ellipsis were written relative to the end (52 + 64 - e + i): made absolute for ell dims.
static void ein_fix(int *lab, int n, int ell) {
    for (int i = 0; i < n; i++)
        if (lab[i] >= 52) lab[i] = lab[i] - EIN_LABELS + ell;
}

static bool has(const int *lab, int n, int l) {
    for (int i = 0; i < n; i++)
        if (lab[i] == l) return true;
    return false;
}

// Dims i < j of o carry one label: their diagonal, as o's last dim (the two viewed as one, every (n+1)th picked).
static weft_status ein_diag(nctx *c, ein_op *o, int i, int j) {
    int64_t xs[WEFT_MAX_DIMS], p[WEFT_MAX_DIMS], s[WEFT_MAX_DIMS];
    int lab[WEFT_MAX_DIMS], n = 0;
    sizes_copy(c, o->v, xs);
    if (xs[i] != xs[j]) FAIL("a label repeats over dims of %lld and %lld", (long long)xs[i], (long long)xs[j]);
    for (int d = 0; d < o->n; d++)
        if (d != i && d != j) p[n] = d, s[n] = xs[d], lab[n++] = o->lab[d];
    p[n] = i, p[n + 1] = j, s[n] = xs[i] * xs[i], lab[n] = o->lab[i];
    weft_tensor *t = oi_index_new(xs[i]);
    if (!t) return weft_last_status();
    for (int64_t k = 0; k < xs[i]; k++) ((int64_t *)weft_tensor_data(t))[k] = k * (xs[i] + 1);
    weft_value v = oi_reshape(c, NULL, permute(c, NULL, o->v, o->n, p), n + 1, s);
    if (!OK(v)) return weft_tensor_free(t), weft_last_status();
    o->v = oi_select(c, NULL, v, n, t);
    o->n = n + 1;
    memcpy(o->lab, lab, sizeof(int) * (size_t)o->n);
    return OK(o->v) ? WEFT_OK : weft_last_status();
}

// Sums op's dims whose labels nothing later needs (not in keep).
static weft_status ein_sum_out(nctx *c, ein_op *o, const bool *keep) {
    int64_t mask = 0;
    int n = 0;
    for (int i = 0; i < o->n; i++) {
        if (!keep[o->lab[i]]) mask |= INT64_C(1) << i;
        else o->lab[n++] = o->lab[i];
    }
    if (!mask) return WEFT_OK;
    int64_t at[3] = {mask, 0, 0};
    o->v = oi_op(c, NULL, "sum", 1, &o->v, at, 3, NULL, 0);
    o->n = n;
    return OK(o->v) ? WEFT_OK : weft_last_status();
}

// The product of a and b over their shared labels that nothing later needs: batch (shared, kept), left (a's
// own), contracted (shared, not kept) and right (b's own) dims permuted so one batched matmul does it.
static weft_status ein_pair(nctx *c, ein_op *a, ein_op *b, const bool *keep, const int64_t *size) {
    int bat[WEFT_MAX_DIMS], lf[WEFT_MAX_DIMS], ct[WEFT_MAX_DIMS], rt[WEFT_MAX_DIMS], nb = 0, nl = 0, nc = 0, nr = 0;
    for (int i = 0; i < a->n; i++) {
        int l = a->lab[i];
        if (!has(b->lab, b->n, l)) lf[nl++] = l;
        else if (keep[l]) bat[nb++] = l;
        else ct[nc++] = l;
    }
    for (int i = 0; i < b->n; i++)
        if (!has(a->lab, a->n, b->lab[i])) rt[nr++] = b->lab[i];
    if (nb + nl + nr > WEFT_MAX_DIMS) FAIL("the product has more than %d dims", WEFT_MAX_DIMS);
    int64_t B = 1, L = 1, K = 1, R = 1, pa[WEFT_MAX_DIMS], pb[WEFT_MAX_DIMS], so[WEFT_MAX_DIMS];
    int na = 0, nbb = 0, no = 0;
    for (int i = 0; i < nb; i++) B *= size[bat[i]], so[no++] = size[bat[i]];
    for (int i = 0; i < nl; i++) L *= size[lf[i]], so[no++] = size[lf[i]];
    for (int i = 0; i < nr; i++) R *= size[rt[i]], so[no++] = size[rt[i]];
    for (int i = 0; i < nc; i++) K *= size[ct[i]];
    // a as [batch, left, contracted], b as [batch, contracted, right]
    const int *ga[3] = {bat, lf, ct}, *gb[3] = {bat, ct, rt};
    int na_[3] = {nb, nl, nc}, nb_[3] = {nb, nc, nr};
    for (int g = 0; g < 3; g++) {
        for (int i = 0; i < na_[g]; i++)
            for (int d = 0; d < a->n; d++)
                if (a->lab[d] == ga[g][i]) pa[na++] = d;
        for (int i = 0; i < nb_[g]; i++)
            for (int d = 0; d < b->n; d++)
                if (b->lab[d] == gb[g][i]) pb[nbb++] = d;
    }
    weft_value x = oi_reshape(c, NULL, permute(c, NULL, a->v, a->n, pa), 3, (int64_t[]){B, L, K});
    weft_value y = oi_reshape(c, NULL, permute(c, NULL, b->v, b->n, pb), 3, (int64_t[]){B, K, R});
    weft_value p = OK(x) && OK(y) ? oi_op(c, NULL, "matmul", 2, (weft_value[]){x, y}, NULL, 0, NULL, 0) : WEFT_VALUE_NONE;
    a->v = oi_reshape(c, NULL, p, no, so);
    a->n = 0;
    for (int i = 0; i < nb; i++) a->lab[a->n++] = bat[i];
    for (int i = 0; i < nl; i++) a->lab[a->n++] = lf[i];
    for (int i = 0; i < nr; i++) a->lab[a->n++] = rt[i];
    return OK(a->v) ? WEFT_OK : weft_last_status();
}

// Einsum: subscripts per operand (an ellipsis for leading, trailing or middle dims), an explicit output after
// "->" or the labels used once, in alphabetical order, after the ellipsis's dims. Labels no later term needs
// are summed first; operands are multiplied left to right. A size of 1 broadcasts against a label's other
// sizes, other sizes that differ are refused; a label twice in one term takes the diagonal.
weft_status oi_einsum(nctx *c, const char *arg) {
    (void)arg;
    const Onnx__AttributeProto *at = oi_attr_t(c, "equation", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    if (!at || !at->has_s || at->s.len >= 256) FAIL("needs an equation (under 256 characters)");
    char eq[256] = {0};
    if (at->s.len) memcpy(eq, at->s.data, at->s.len);
    if (c->n_in < 1 || c->n_in > 8) FAIL("%d operands (1 to 8)", c->n_in);
    for (int k = 0; k < c->n_in; k++)
        if (c->kin[k] < 0) FAIL("operand %d is missing", k);
    ein_op op[8], out;
    int ell = 0, pos = 0, uses[EIN_LABELS] = {0};
    int64_t size[EIN_LABELS];
    for (int l = 0; l < EIN_LABELS; l++) size[l] = 1;
    for (int k = 0; k < c->n_in; k++) {
        if (k && eq[pos++] != ',') FAIL("the equation has %d terms for %d operands", k, c->n_in);
        int r = ein_term(eq + pos, ndim_of(c, c->in[k]), &ell, op[k].lab, &op[k].n);
        if (r < 0) FAIL("term %d of '%s' does not fit operand %d (%d dims)", k, eq, k, ndim_of(c, c->in[k]));
        pos += r, op[k].v = c->in[k];
    }
    bool arrow = !strncmp(eq + pos, "->", 2);
    if (!arrow && eq[pos]) FAIL("bad equation '%s'", eq);
    weft_status st;
    for (int k = 0; k < c->n_in; k++) {
        ein_fix(op[k].lab, op[k].n, ell);
        for (int i = 0; i < op[k].n; i++) uses[op[k].lab[i]]++; // as written ("ii" uses i twice: a trace)
        for (int i = 0; i < op[k].n; i++) // a label twice in a term: the diagonal
            for (int j = 0; j < i; j++)
                if (op[k].lab[j] == op[k].lab[i]) {
                    if ((st = ein_diag(c, &op[k], j, i))) return st;
                    i = 0, j = -1; // the labels moved: look again
                }
        const int64_t *xs = sizes_of(c, op[k].v);
        for (int i = 0; i < op[k].n; i++) {
            int l = op[k].lab[i];
            if (xs[i] != size[l] && xs[i] != 1 && size[l] != 1)
                FAIL("label of term %d dim %d has size %lld, elsewhere %lld", k, i, (long long)xs[i], (long long)size[l]);
            if (xs[i] != 1) size[l] = xs[i];
        }
    }
    if (arrow) {
        int r = ein_term(eq + pos + 2, -1, &ell, out.lab, &out.n);
        if (r < 0 || eq[pos + 2 + r]) FAIL("bad output term in '%s'", eq);
        ein_fix(out.lab, out.n, ell);
        for (int i = 0; i < out.n; i++) {
            if (!uses[out.lab[i]] && out.lab[i] < 52) FAIL("output label %d is in no input", i);
            for (int j = 0; j < i; j++)
                if (out.lab[j] == out.lab[i]) FAIL("a label repeats in the output");
        }
    } else { // the ellipsis's dims, then the labels used once, alphabetically (upper case before lower, as numpy)
        out.n = 0;
        for (int i = 0; i < ell; i++) out.lab[out.n++] = 52 + i;
        for (int l = 26; l < 52; l++)
            if (uses[l] == 1 && out.n < WEFT_MAX_DIMS) out.lab[out.n++] = l;
        for (int l = 0; l < 26; l++)
            if (uses[l] == 1 && out.n < WEFT_MAX_DIMS) out.lab[out.n++] = l;
    }
    // dims of size 1 that broadcast against a larger size: expanded first
    for (int k = 0; k < c->n_in; k++) {
        const int64_t *xs = sizes_of(c, op[k].v);
        int64_t e[1 + WEFT_MAX_DIMS] = {op[k].n};
        bool grow = false;
        for (int i = 0; i < op[k].n; i++) grow |= xs[i] != size[op[k].lab[i]], e[1 + i] = size[op[k].lab[i]];
        if (grow && !OK(op[k].v = oi_op(c, NULL, "expand", 1, &op[k].v, e, 1 + op[k].n, NULL, 0))) return weft_last_status();
    }
    for (int k = 0; k < c->n_in; k++) {
        bool keep[EIN_LABELS] = {false}; // what the output and the other operands use
        for (int i = 0; i < out.n; i++) keep[out.lab[i]] = true;
        for (int j = 0; j < c->n_in; j++)
            for (int i = 0; j != k && i < op[j].n; i++) keep[op[j].lab[i]] = true;
        if ((st = ein_sum_out(c, &op[k], keep))) return st;
    }
    for (int k = 1; k < c->n_in; k++) {
        bool keep[EIN_LABELS] = {false}; // the output and the operands still to come
        for (int i = 0; i < out.n; i++) keep[out.lab[i]] = true;
        for (int j = k + 1; j < c->n_in; j++)
            for (int i = 0; i < op[j].n; i++) keep[op[j].lab[i]] = true;
        if ((st = ein_pair(c, &op[0], &op[k], keep, size))) return st;
    }
    if (op[0].n != out.n) FAIL("internal: %d dims for an output of %d", op[0].n, out.n);
    int64_t p[WEFT_MAX_DIMS];
    for (int i = 0; i < out.n; i++)
        for (int d = 0; d < op[0].n; d++)
            if (op[0].lab[d] == out.lab[i]) p[i] = d;
    bool same = true;
    for (int i = 0; i < out.n; i++) same &= p[i] == i;
    if (same) OUT0(oi_reshape(c, node_out(c, 0), op[0].v, out.n, sizes_of(c, op[0].v)));
    OUT0(permute(c, node_out(c, 0), op[0].v, out.n, p));
}

// ---- GatherND, ScatterElements

static weft_value i64_scalar_op(nctx *c, const char *opn, weft_value v, int64_t k) {
    weft_value s = oi_scalar(c, WEFT_I64, (double)k);
    return OK(v) && OK(s) ? oi_op(c, NULL, opn, 2, (weft_value[]){v, s}, NULL, 0, NULL, 0) : WEFT_VALUE_NONE;
}

// scatter_add of up into x along ax at idx (add), or up where some index points and x elsewhere (none: the
// sum of the updates there, so duplicates, which ONNX leaves undefined, add up). The result is called name.
static weft_value scatter(nctx *c, const char *name, weft_value x, int64_t ax, weft_value idx, weft_value up, bool add) {
    if (add) return oi_op(c, name, "scatter_add", 3, (weft_value[]){x, idx, up}, &ax, 1, NULL, 0);
    int64_t xs[1 + WEFT_MAX_DIMS] = {ndim_of(c, x)}, us[1 + WEFT_MAX_DIMS] = {ndim_of(c, up)};
    sizes_copy(c, x, xs + 1);
    sizes_copy(c, up, us + 1);
    weft_value z = oi_scalar_as(c, dtype_of(c, x), 0), one = oi_scalar_as(c, dtype_of(c, x), 1);
    weft_value zs = OK(z) ? oi_op(c, NULL, "expand", 1, &z, xs, 1 + xs[0], NULL, 0) : z;
    weft_value ones = OK(one) ? oi_op(c, NULL, "expand", 1, &one, us, 1 + us[0], NULL, 0) : one;
    if (!OK(zs) || !OK(ones)) return WEFT_VALUE_NONE;
    weft_value hit = oi_op(c, NULL, "scatter_add", 3, (weft_value[]){zs, idx, ones}, &ax, 1, NULL, 0);
    weft_value val = oi_op(c, NULL, "scatter_add", 3, (weft_value[]){zs, idx, up}, &ax, 1, NULL, 0);
    weft_value m = OK(hit) ? oi_op(c, NULL, "gt", 2, (weft_value[]){hit, z}, NULL, 0, NULL, 0) : hit;
    if (!OK(m) || !OK(val)) return WEFT_VALUE_NONE;
    return oi_op(c, name, "where", 3, (weft_value[]){m, val, x}, NULL, 0, NULL, 0);
}

// The reduction attribute: none or add (mul, max, min are refused).
static weft_status reduction_add(nctx *c, bool *add) {
    *add = oi_attr_s_is(c, "reduction", "none", "add");
    if (!*add && !oi_attr_s_is(c, "reduction", "none", "none")) FAIL("only reductions none and add are supported");
    if (dtype_of(c, c->in[1]) != WEFT_I64 && dtype_of(c, c->in[1]) != WEFT_I32) FAIL("indices must be int32 or int64");
    return WEFT_OK;
}

// The flat row of each index tuple (the last dim of idx, m long, negatives wrapped) into data viewed as
// (B * P, rest...): the tuple's offset into the P rows its b batch dims own, plus the batch's first row.
// Returns it as a 1-D int64 value of count elements.
static weft_value nd_rows(nctx *c, weft_value idx, const int64_t *xs, int64_t b, int64_t m, int64_t count) {
    int q = ndim_of(c, idx);
    int64_t B = 1, P = 1, i64 = WEFT_I64;
    for (int d = 0; d < b; d++) B *= xs[d];
    for (int d = 0; d < m; d++) P *= xs[b + d];
    if (dtype_of(c, idx) != WEFT_I64) idx = oi_op(c, NULL, "cast", 1, &idx, &i64, 1, NULL, 0);
    weft_value lin = WEFT_VALUE_NONE;
    int64_t stride = P;
    for (int i = 0; i < m; i++) { // the sum over the tuple of its wrapped index times its stride
        stride /= xs[b + i];
        weft_value t = OK(idx) ? oi_op(c, NULL, "slice", 1, &idx, (int64_t[]){q - 1, i, i + 1, 1}, 4, NULL, 0) : idx;
        t = i64_scalar_op(c, "mul", OK(t) ? oi_wrap_negative(c, t, xs[b + i]) : t, stride);
        lin = i ? (OK(lin) && OK(t) ? oi_op(c, NULL, "add", 2, (weft_value[]){lin, t}, NULL, 0, NULL, 0) : WEFT_VALUE_NONE) : t;
    }
    if (b > 0) { // + iota(B) * P over the batch dims
        weft_tensor *t = oi_index_new(B);
        if (!t) return WEFT_VALUE_NONE;
        for (int64_t i = 0; i < B; i++) ((int64_t *)weft_tensor_data(t))[i] = i * P;
        int64_t bs[WEFT_MAX_DIMS];
        for (int d = 0; d < q; d++) bs[d] = d < b ? xs[d] : 1;
        weft_value off = oi_reshape(c, NULL, oi_konst(c, NULL, t, NULL), q, bs);
        lin = OK(lin) && OK(off) ? oi_op(c, NULL, "add", 2, (weft_value[]){lin, off}, NULL, 0, NULL, 0) : WEFT_VALUE_NONE;
    }
    return oi_reshape(c, NULL, lin, 1, &count);
}

// Checks GatherND's and ScatterND's operands: data of r dims, none empty; indices (batch dims b first, equal to
// data's) ending in tuples of m <= r - b. Sets m and count (the tuples).
static weft_status nd_check(nctx *c, const int64_t *xs, int r, const int64_t *is, int q, int64_t b, int64_t *m,
                            int64_t *count) {
    if (dtype_of(c, c->in[1]) != WEFT_I64 && dtype_of(c, c->in[1]) != WEFT_I32) FAIL("indices must be int32 or int64");
    if (q < 1 || b < 0 || b >= q || b >= r) FAIL("batch_dims %lld for data of %d dims, indices of %d", (long long)b, r, q);
    *m = is[q - 1];
    if (*m < 1 || b + *m > r) FAIL("index tuples of %lld for data of %d dims after %lld batch dims", (long long)*m, r, (long long)b);
    for (int d = 0; d < r; d++)
        if (!xs[d]) FAIL("data has an empty dim");
    for (int d = 0; d < b; d++)
        if (is[d] != xs[d]) FAIL("batch dim %d differs: data %lld, indices %lld", d, (long long)xs[d], (long long)is[d]);
    *count = 1;
    for (int d = 0; d < q - 1; d++) *count *= is[d];
    return WEFT_OK;
}

// GatherND(data, indices; batch_dims b): each index tuple picks the slice data[batch..., i0, ..., i(m-1)]:
// index_select over data viewed as (B * P, rest...).
weft_status oi_gather_nd(nctx *c, const char *arg) {
    (void)arg;
    int r = ndim_of(c, c->in[0]), q = ndim_of(c, c->in[1]);
    int64_t b = oi_attr_i(c, "batch_dims", 0), xs[WEFT_MAX_DIMS], is[WEFT_MAX_DIMS], m = 0, count = 0, zero = 0;
    sizes_copy(c, c->in[0], xs);
    sizes_copy(c, c->in[1], is);
    weft_status st = nd_check(c, xs, r, is, q, b, &m, &count);
    if (st) return st;
    int64_t flat[1 + WEFT_MAX_DIMS] = {1}, os[WEFT_MAX_DIMS];
    int nf = 1, no = 0;
    for (int d = 0; d < b + m; d++) flat[0] *= xs[d];
    for (int d = 0; d < q - 1; d++) os[no++] = is[d];
    for (int d = (int)(b + m); d < r; d++) flat[nf++] = xs[d], os[no++] = xs[d];
    weft_value lin = nd_rows(c, c->in[1], xs, b, m, count), data = oi_reshape(c, NULL, c->in[0], nf, flat);
    weft_value y = OK(lin) && OK(data) ? oi_op(c, NULL, "index_select", 2, (weft_value[]){data, lin}, &zero, 1, NULL, 0)
                                       : WEFT_VALUE_NONE;
    OUT0(oi_reshape(c, node_out(c, 0), y, no, os));
}

// ScatterND(data, indices, updates; reduction): the slices the index tuples pick, written (or added) from
// updates: a scatter along dim 0 of data viewed as (P, rest...), each tuple's row repeated across the rest.
weft_status oi_scatter_nd(nctx *c, const char *arg) {
    (void)arg;
    bool add;
    weft_status st = reduction_add(c, &add);
    if (st) return st;
    int r = ndim_of(c, c->in[0]), q = ndim_of(c, c->in[1]), nf = 1;
    int64_t xs[WEFT_MAX_DIMS], is[WEFT_MAX_DIMS], m = 0, count = 0, flat[WEFT_MAX_DIMS] = {1}, ex[1 + WEFT_MAX_DIMS];
    sizes_copy(c, c->in[0], xs);
    sizes_copy(c, c->in[1], is);
    if ((st = nd_check(c, xs, r, is, q, 0, &m, &count))) return st;
    for (int d = 0; d < m; d++) flat[0] *= xs[d];
    for (int d = (int)m; d < r; d++) flat[nf++] = xs[d];
    int64_t un = ndim_of(c, c->in[2]), want = q - 1 + r - m;
    bool fits = un == want;
    for (int d = 0; fits && d < un; d++) fits = sizes_of(c, c->in[2])[d] == (d < q - 1 ? is[d] : xs[m + d - (q - 1)]);
    if (!fits) FAIL("updates must have the shape indices[:-1] + data[%lld:]", (long long)m);
    ex[0] = nf, ex[1] = count;
    for (int d = 1; d < nf; d++) ex[1 + d] = flat[d];
    int64_t rs[WEFT_MAX_DIMS] = {count};
    for (int d = 1; d < nf; d++) rs[d] = 1;
    weft_value row = oi_reshape(c, NULL, nd_rows(c, c->in[1], xs, 0, m, count), nf, rs);
    weft_value idx = OK(row) ? oi_op(c, NULL, "expand", 1, &row, ex, 1 + nf, NULL, 0) : row;
    idx = OK(idx) ? oi_op(c, NULL, "copy", 1, &idx, NULL, 0, NULL, 0) : idx;
    ex[1] = count;
    weft_value up = oi_reshape(c, NULL, c->in[2], nf, ex + 1), data = oi_reshape(c, NULL, c->in[0], nf, flat);
    if (!OK(idx) || !OK(up) || !OK(data)) return weft_last_status();
    weft_value out = scatter(c, NULL, data, 0, idx, up, add);
    OUT0(oi_reshape(c, node_out(c, 0), out, r, xs));
}

// ScatterElements(data, indices, updates; axis, reduction) and Scatter (opset <= 10).
weft_status oi_scatter_elements(nctx *c, const char *arg) {
    (void)arg;
    int nd = ndim_of(c, c->in[0]);
    int64_t ax = oi_axis(oi_attr_i(c, "axis", 0), nd);
    bool add;
    weft_status st = reduction_add(c, &add);
    if (st) return st;
    if (ax < 0) FAIL("axis %lld", (long long)oi_attr_i(c, "axis", 0));
    weft_value idx = oi_wrap_negative(c, c->in[1], sizes_of(c, c->in[0])[ax]);
    if (!OK(idx)) return weft_last_status();
    OUT0(scatter(c, node_out(c, 0), c->in[0], ax, idx, c->in[2], add));
}

// TopK(X, K; axis, largest, sorted): weft's topk (the indices, best first, ties by the lower index: sorted or
// not, ONNX's order), the values a gather of X at them. K: an input from opset 10, an attribute before.
weft_status oi_topk(nctx *c, const char *arg) {
    (void)arg;
    int nd = ndim_of(c, c->in[0]);
    int64_t ax = oi_axis(oi_attr_i(c, "axis", -1), nd), k;
    if (ax < 0) FAIL("axis %lld", (long long)oi_attr_i(c, "axis", -1));
    if (c->m->opset >= 10) {
        int n;
        weft_status st = oi_konst_ints(c, 1, &k, 1, &n);
        if (st) return st;
        if (n != 1) FAIL("K must be one value");
    } else {
        k = oi_attr_i(c, "k", -1);
    }
    if (k < 0 || k > sizes_of(c, c->in[0])[ax]) FAIL("K = %lld for a dim of %lld", (long long)k, (long long)sizes_of(c, c->in[0])[ax]);
    int64_t at[3] = {ax, k, oi_attr_i(c, "largest", 1) != 0};
    weft_value ix = oi_op(c, node_out(c, 1), "topk", 1, c->in, at, 3, NULL, 0);
    if (!OK(ix)) return weft_last_status();
    c->out[1] = ix;
    if (wants_out(c, 0) &&
        !OK(c->out[0] = oi_op(c, node_out(c, 0), "gather", 2, (weft_value[]){c->in[0], ix}, &ax, 1, NULL, 0)))
        return weft_last_status();
    return WEFT_OK;
}

// ---- GridSample

static weft_value gs_op(nctx *c, const char *opn, weft_value a, weft_value b) {
    return OK(a) && OK(b) ? oi_op(c, NULL, opn, 2, (weft_value[]){a, b}, NULL, 0, NULL, 0) : WEFT_VALUE_NONE;
}
static weft_value gs_k(nctx *c, weft_value like, double x) { return OK(like) ? oi_scalar_as(c, dtype_of(c, like), x) : like; }
static weft_value gs_f(nctx *c, const char *opn, weft_value a, double f) {
    return OK(a) ? oi_op(c, NULL, opn, 1, &a, NULL, 0, &f, 1) : a;
}
static weft_value gs_clamp(nctx *c, weft_value v, double hi) {
    return gs_op(c, "minimum", gs_op(c, "maximum", v, gs_k(c, v, 0)), gs_k(c, v, hi));
}

// A grid coordinate in [-1, 1] to a source pixel coordinate along a dim of n, as PyTorch's grid_sample (ONNX's
// GridSample takes its outputs): unnormalised, then clamped (border) or reflected and clamped (reflection).
static weft_value gs_coord(nctx *c, weft_value g, int64_t n, bool align, int pad) {
    weft_value v = align ? gs_f(c, "mul_scalar", gs_f(c, "add_scalar", g, 1), 0.5 * (double)(n - 1))
                         : gs_f(c, "add_scalar", gs_f(c, "mul_scalar", gs_f(c, "add_scalar", g, 1), 0.5 * (double)n), -0.5);
    if (pad == 2 && (align ? n > 1 : n > 0)) { // reflection: a triangle wave over [lo, lo + span]
        double lo = align ? 0 : -0.5, span = align ? (double)(n - 1) : (double)n;
        weft_value t = oi_op(c, NULL, "abs", 1, (weft_value[]){gs_f(c, "add_scalar", v, -lo)}, NULL, 0, NULL, 0);
        weft_value m = gs_f(c, "add_scalar", gs_op(c, "fmod", t, gs_k(c, t, 2 * span)), -span);
        m = OK(m) ? oi_op(c, NULL, "abs", 1, &m, NULL, 0, NULL, 0) : m;
        v = gs_f(c, "add_scalar", gs_f(c, "mul_scalar", m, -1), span + lo);
    }
    return pad ? gs_clamp(c, v, (double)(n - 1)) : v;
}

// GridSample(X (N,C,H,W), grid (N,Ho,Wo,2); mode bilinear or nearest, padding_mode zeros / border / reflection,
// align_corners): each tap's pixel gathered from X viewed as (N, C, H W) at y W + x (clamped; a weight of 0 outside
// for zeros), times its weight, summed. Gradients flow to X (the gathers) and to the grid (the bilinear weights).
weft_status oi_grid_sample(nctx *c, const char *arg) {
    (void)arg;
    weft_value x = c->in[0], g = c->in[1];
    if (ndim_of(c, x) != 4 || ndim_of(c, g) != 4) FAIL("4-D input and grid only");
    int64_t xs[4], gs[4];
    sizes_copy(c, x, xs);
    sizes_copy(c, g, gs);
    int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], Ho = gs[1], Wo = gs[2], P = gs[1] * gs[2];
    if (gs[0] != N || gs[3] != 2) FAIL("grid must be (N, H_out, W_out, 2)");
    if (dtype_of(c, g) != dtype_of(c, x)) FAIL("grid and input differ in type");
    bool nearest = oi_attr_s_is(c, "mode", "bilinear", "nearest"), align = oi_attr_i(c, "align_corners", 0) != 0;
    if (!nearest && !oi_attr_s_is(c, "mode", "bilinear", "bilinear")) FAIL("mode (bilinear or nearest; not bicubic)");
    int pad = oi_attr_s_is(c, "padding_mode", "zeros", "border") ? 1 : oi_attr_s_is(c, "padding_mode", "zeros", "reflection") ? 2 : 0;
    if (!pad && !oi_attr_s_is(c, "padding_mode", "zeros", "zeros")) FAIL("padding_mode (zeros, border or reflection)");
    if (H < 1 || W < 1) FAIL("an empty input");
    weft_value gx = oi_reshape(c, NULL, oi_op(c, NULL, "slice", 1, &g, (int64_t[]){3, 0, 1, 1}, 4, NULL, 0), 3, gs);
    weft_value gy = oi_reshape(c, NULL, oi_op(c, NULL, "slice", 1, &g, (int64_t[]){3, 1, 2, 1}, 4, NULL, 0), 3, gs);
    weft_value ix = gs_coord(c, gx, W, align, pad), iy = gs_coord(c, gy, H, align, pad);
    weft_value tx[2], ty[2], wx[2], wy[2];
    if (nearest) {
        tx[0] = OK(ix) ? oi_op(c, NULL, "round", 1, &ix, NULL, 0, NULL, 0) : ix;
        ty[0] = OK(iy) ? oi_op(c, NULL, "round", 1, &iy, NULL, 0, NULL, 0) : iy;
        wx[0] = wy[0] = gs_k(c, x, 1);
    } else { // the corners floor and floor + 1, weighted by the distance to the other
        tx[0] = OK(ix) ? oi_op(c, NULL, "floor", 1, &ix, NULL, 0, NULL, 0) : ix;
        ty[0] = OK(iy) ? oi_op(c, NULL, "floor", 1, &iy, NULL, 0, NULL, 0) : iy;
        tx[1] = gs_f(c, "add_scalar", tx[0], 1), ty[1] = gs_f(c, "add_scalar", ty[0], 1);
        wx[1] = gs_op(c, "sub", ix, tx[0]), wy[1] = gs_op(c, "sub", iy, ty[0]);
        wx[0] = gs_f(c, "add_scalar", gs_f(c, "mul_scalar", wx[1], -1), 1);
        wy[0] = gs_f(c, "add_scalar", gs_f(c, "mul_scalar", wy[1], -1), 1);
    }
    int64_t i64 = WEFT_I64, two = 2, flat[3] = {N, C, H * W}, e[4] = {3, N, C, P}, one[3] = {N, 1, P};
    weft_value xf = oi_reshape(c, NULL, x, 3, flat), acc = WEFT_VALUE_NONE, zero = gs_k(c, x, 0);
    for (int a = 0; a < (nearest ? 1 : 2); a++)
        for (int b = 0; b < (nearest ? 1 : 2); b++) {
            weft_value w = gs_op(c, "mul", wy[a], wx[b]);
            if (!pad) { // zeros: no weight where the tap falls outside
                weft_value conds[4] = {gs_op(c, "ge", tx[b], zero), gs_op(c, "le", tx[b], gs_k(c, x, (double)(W - 1))),
                                       gs_op(c, "ge", ty[a], zero), gs_op(c, "le", ty[a], gs_k(c, x, (double)(H - 1)))};
                for (int k = 0; k < 4; k++)
                    w = OK(w) && OK(conds[k]) && OK(zero) ? oi_op(c, NULL, "where", 3, (weft_value[]){conds[k], w, zero}, NULL, 0, NULL, 0)
                                                          : WEFT_VALUE_NONE;
            }
            weft_value lin = gs_op(c, "add", gs_f(c, "mul_scalar", gs_clamp(c, ty[a], (double)(H - 1)), (double)W),
                                   gs_clamp(c, tx[b], (double)(W - 1)));
            lin = OK(lin) ? oi_op(c, NULL, "cast", 1, &lin, &i64, 1, NULL, 0) : lin;
            lin = oi_reshape(c, NULL, lin, 3, one);
            lin = OK(lin) ? oi_op(c, NULL, "expand", 1, &lin, e, 4, NULL, 0) : lin;
            weft_value v = OK(xf) && OK(lin) ? oi_op(c, NULL, "gather", 2, (weft_value[]){xf, lin}, &two, 1, NULL, 0)
                                             : WEFT_VALUE_NONE;
            v = gs_op(c, "mul", v, oi_reshape(c, NULL, w, 3, one));
            acc = OK(acc) ? gs_op(c, "add", acc, v) : v;
            if (!OK(acc)) return weft_last_status();
        }
    OUT0(oi_reshape(c, node_out(c, 0), acc, 4, (int64_t[]){N, C, Ho, Wo}));
}

// ---- Resize, Upsample

enum { RS_NEAREST, RS_LINEAR, RS_CUBIC };
enum { NM_ROUND_FLOOR, NM_ROUND_CEIL, NM_FLOOR, NM_CEIL };
enum { CT_HALF, CT_PT_HALF, CT_ALIGN, CT_ASYM, CT_TF_NN, CT_TF_CROP };

typedef struct rs_opts {
    int mode, nearest, ct;
    double a;     // cubic_coeff_a
    bool exclude; // exclude_outside
    double extra; // extrapolation_value
} rs_opts;

// Output position x's source coordinate along an axis of n (scale s, roi [r0, r1] for tf_crop_and_resize);
// false when it falls outside (tf_crop_and_resize extrapolates there). ow = s n, as ONNX's reference has it.
static bool rs_coord(const rs_opts *o, int64_t x, int64_t n, double s, double r0, double r1, double *xo) {
    double ow = s * (double)n, xx = (double)x;
    switch (o->ct) {
    case CT_HALF: *xo = (xx + 0.5) / s - 0.5; break;
    case CT_PT_HALF: *xo = ow > 1 ? (xx + 0.5) / s - 0.5 : -0.5; break;
    case CT_ALIGN: *xo = ow == 1 ? 0 : xx * (double)(n - 1) / (ow - 1); break;
    case CT_ASYM: *xo = xx / s; break;
    case CT_TF_NN: *xo = (xx + 0.5) / s; break;
    default:
        *xo = (ow == 1 ? (r1 - r0) * (double)(n - 1) / 2 : xx * (r1 - r0) * (double)(n - 1) / (ow - 1)) + r0 * (double)(n - 1);
        return *xo >= 0 && *xo <= (double)(n - 1);
    }
    return true;
}

// The taps of source coordinate xo: indices (clamped to the edge) and weights; returns their count.
static int rs_taps(const rs_opts *o, double xo, int64_t n, int64_t *ix, double *w) {
    double fl = floor(xo);
    int k;
    if (o->mode == RS_NEAREST) {
        double r = xo - fl;
        bool up = xo != fl && (o->nearest == NM_CEIL || (o->nearest == NM_ROUND_FLOOR && r > 0.5) ||
                               (o->nearest == NM_ROUND_CEIL && r >= 0.5));
        ix[0] = (int64_t)fl + up, w[0] = 1, k = 1;
    } else { // i0 = ceil(xo) - 1 and r in (0, 1]: an integer xo is tap i0 + 1 whole, as ONNX's reference reads it
        int64_t i0 = (int64_t)ceil(xo) - 1;
        double r = xo - (double)i0, A = o->a;
        if (o->mode == RS_LINEAR) {
            ix[0] = i0, ix[1] = i0 + 1, w[0] = 1 - r, w[1] = r, k = 2;
        } else {
            double t = 1 - r;
            w[0] = ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A;
            w[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
            w[2] = ((A + 2) * t - (A + 3)) * t * t + 1;
            w[3] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
            for (int i = 0; i < 4; i++) ix[i] = i0 - 1 + i;
            k = 4;
        }
        if (o->exclude) { // taps outside the input weigh nothing; the rest renormalised
            double sum = 0;
            for (int i = 0; i < k; i++) sum += w[i] *= ix[i] >= 0 && ix[i] < n;
            for (int i = 0; i < k && sum != 0; i++) w[i] /= sum;
        }
    }
    for (int i = 0; i < k; i++) ix[i] = ix[i] < 0 ? 0 : ix[i] >= n ? n - 1 : ix[i];
    return k;
}

// v resized along dim ax from n to on: sum over taps of index_select(v, taps' indices) times their weights
// (broadcast along ax), then the extrapolation value where the coordinate falls outside. Nothing where the
// resize is the identity.
static weft_value rs_axis(nctx *c, const rs_opts *o, weft_value v, int ax, int nd, int64_t on, double s, double r0,
                          double r1) {
    int64_t n = sizes_of(c, v)[ax];
    if (oi_check_made(1, &on)) return WEFT_VALUE_NONE;
    int64_t *ix = malloc(sizeof(int64_t) * 4 * (size_t)(on ? on : 1));
    double *w = malloc(sizeof(double) * 4 * (size_t)(on ? on : 1));
    bool *in = malloc((size_t)(on ? on : 1)), ident = on == n, any_out = false;
    int k = 1;
    if (!ix || !w || !in) {
        free(ix), free(w), free(in);
        weft_error(WEFT_ERR_OOM, "no memory");
        return WEFT_VALUE_NONE;
    }
    for (int64_t x = 0; x < on; x++) {
        double xo;
        in[x] = rs_coord(o, x, n, s, r0, r1, &xo);
        any_out |= !in[x];
        int64_t t[4];
        double tw[4];
        k = rs_taps(o, xo, n, t, tw);
        for (int i = 0; i < k; i++) {
            ix[i * on + x] = t[i], w[i * on + x] = tw[i];
            ident &= tw[i] == 0 || (tw[i] == 1 && t[i] == x);
        }
    }
    weft_value y = WEFT_VALUE_NONE;
    int64_t ws[WEFT_MAX_DIMS];
    for (int d = 0; d < nd; d++) ws[d] = d == ax ? on : 1;
    weft_dtype dt = dtype_of(c, v);
    if (ident && !any_out) {
        y = v;
    } else {
        for (int i = 0; i < k; i++) {
            weft_tensor *ti = oi_index_new(on);
            if (!ti) break;
            memcpy(weft_tensor_data(ti), ix + i * on, sizeof(int64_t) * (size_t)on);
            weft_value g = oi_select(c, NULL, v, ax, ti);
            if (k > 1) { // weighted
                weft_tensor *tw = weft_tensor_from_data(w + i * on, nd, ws, WEFT_F64), *tc = tw ? weft_cast(tw, dt) : NULL;
                weft_tensor_free(tw);
                weft_value wv = oi_konst(c, NULL, tc, NULL);
                g = OK(g) && OK(wv) ? oi_op(c, NULL, "mul", 2, (weft_value[]){g, wv}, NULL, 0, NULL, 0) : WEFT_VALUE_NONE;
            }
            y = i == 0 ? g : OK(y) && OK(g) ? oi_op(c, NULL, "add", 2, (weft_value[]){y, g}, NULL, 0, NULL, 0) : WEFT_VALUE_NONE;
            if (!OK(y)) break;
        }
        if (OK(y) && any_out) {
            weft_tensor *m = weft_tensor_from_data(in, nd, ws, WEFT_BOOL);
            weft_value mv = oi_konst(c, NULL, m, NULL), e = oi_scalar_as(c, dt, o->extra);
            y = OK(mv) && OK(e) ? oi_op(c, NULL, "where", 3, (weft_value[]){mv, y, e}, NULL, 0, NULL, 0) : WEFT_VALUE_NONE;
        }
    }
    free(ix), free(w), free(in);
    return y;
}

// Resize(X, [roi], scales | sizes) from opset 11, Resize(X, scales) at 10, Upsample(X, scales) (an attribute
// at opset 7): each dim resized in turn, the last first. Opset 10's Resize and Upsample index as asymmetric
// with floor for nearest.
weft_status oi_resize(nctx *c, const char *arg) {
    bool up = !strcmp(arg, "upsample"), old = up || c->m->opset < 11;
    weft_value x = c->in[0];
    int nd = ndim_of(c, x), n;
    int64_t xs[WEFT_MAX_DIMS], on[WEFT_MAX_DIMS];
    double sc[WEFT_MAX_DIMS], roi[2 * WEFT_MAX_DIMS];
    sizes_copy(c, x, xs);
    rs_opts o = {.mode = RS_NEAREST, .nearest = old ? NM_FLOOR : NM_ROUND_FLOOR, .ct = old ? CT_ASYM : CT_HALF,
                 .a = oi_attr_f(c, "cubic_coeff_a", -0.75), .exclude = oi_attr_i(c, "exclude_outside", 0) != 0,
                 .extra = oi_attr_f(c, "extrapolation_value", 0)};
    static const char *const modes[] = {"nearest", "linear", "cubic"}, *const nms[] = {"round_prefer_floor",
        "round_prefer_ceil", "floor", "ceil"}, *const cts[] = {"half_pixel", "pytorch_half_pixel", "align_corners",
        "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
    int got = -1;
    for (int i = 0; i < 3; i++)
        if (oi_attr_s_is(c, "mode", "nearest", modes[i])) got = o.mode = i;
    if (got < 0 || (old && o.mode == RS_CUBIC)) FAIL("mode (nearest, linear%s)", old ? "" : " or cubic");
    weft_dtype dt = dtype_of(c, x);
    if (o.mode != RS_NEAREST && dt != WEFT_F32 && dt != WEFT_F64 && dt != WEFT_F16 && dt != WEFT_BF16)
        FAIL("%s interpolation of %s (floats only)", modes[o.mode], weft_dtype_name(dt));
    if (!old) {
        got = -1;
        for (int i = 0; i < 4; i++)
            if (oi_attr_s_is(c, "nearest_mode", "round_prefer_floor", nms[i])) got = o.nearest = i;
        if (got < 0) FAIL("nearest_mode");
        got = -1;
        for (int i = 0; i < 6; i++)
            if (oi_attr_s_is(c, "coordinate_transformation_mode", "half_pixel", cts[i])) got = o.ct = i;
        if (got < 0) FAIL("coordinate_transformation_mode");
    }
    int si = old ? 1 : 2; // the scales input
    weft_tensor *t = NULL;
    bool sizes = !old && c->n_in > 3 && c->kin[3] >= 0;
    weft_status st;
    if (sizes) {
        int64_t sz[WEFT_MAX_DIMS];
        if ((st = oi_konst_ints(c, 3, sz, WEFT_MAX_DIMS, &n))) return st;
        if (n != nd) FAIL("%d sizes for %d dims", n, nd);
        for (int d = 0; d < nd; d++) {
            if (sz[d] < 0 || (sz[d] > 0 && xs[d] == 0)) FAIL("size %lld for dim %d of %lld", (long long)sz[d], d, (long long)xs[d]);
            on[d] = sz[d], sc[d] = xs[d] ? (double)sz[d] / (double)xs[d] : 1;
        }
    } else {
        if (up && c->m->opset < 9) { // Upsample-7: an attribute
            const Onnx__AttributeProto *a = oi_attr_t(c, "scales", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
            if (!a || (int)a->n_floats != nd) FAIL("scales must have one value per dim");
            for (int d = 0; d < nd; d++) sc[d] = a->floats[d];
        } else {
            if ((st = oi_konst_in(c, si, &t))) return st;
            if (weft_tensor_numel(t) != nd || (weft_tensor_dtype(t) != WEFT_F32 && weft_tensor_dtype(t) != WEFT_F64))
                FAIL("scales must hold one float per dim (or give sizes)");
            for (int d = 0; d < nd; d++)
                sc[d] = weft_tensor_dtype(t) == WEFT_F32 ? ((const float *)weft_tensor_data(t))[d]
                                                         : ((const double *)weft_tensor_data(t))[d];
        }
        for (int d = 0; d < nd; d++) {
            if (!(sc[d] > 0) || !isfinite(sc[d]) || sc[d] * (double)xs[d] > (double)(INT64_C(1) << 26)) FAIL("scale %g for dim %d", sc[d], d);
            on[d] = (int64_t)(sc[d] * (double)xs[d]);
        }
    }
    if ((st = oi_check_made(nd, on))) return st;
    for (int d = 0; d < nd; d++) roi[d] = 0, roi[nd + d] = 1;
    if (o.ct == CT_TF_CROP) {
        if ((st = oi_konst_in(c, 1, &t))) return st;
        if (weft_tensor_numel(t) != 2 * nd) FAIL("roi must hold 2 values per dim");
        weft_tensor *r64 = weft_cast(t, WEFT_F64);
        if (!r64) return weft_last_status();
        memcpy(roi, weft_tensor_data(r64), sizeof(double) * 2 * (size_t)nd);
        weft_tensor_free(r64);
    }
    weft_value v = x;
    for (int d = nd - 1; d >= 0 && OK(v); d--) v = rs_axis(c, &o, v, d, nd, on[d], sc[d], roi[d], roi[nd + d]);
    OUT0(oi_reshape(c, node_out(c, 0), v, nd, on));
}


// ReverseSequence(x, sequence_lens; batch_axis, time_axis): along time, the first len[b] elements of batch b
// reversed, the rest kept: a gather with index t < len[b] ? len[b] - 1 - t : t, built from the lengths at run time
// (so it has the gather's gradient) and broadcast over x's other dims.
weft_status oi_reverse_sequence(nctx *c, const char *arg) {
    (void)arg;
    weft_value x = c->in[0], len = c->in[1];
    int nd = ndim_of(c, x);
    int ba = oi_axis(oi_attr_i(c, "batch_axis", 1), nd), ta = oi_axis(oi_attr_i(c, "time_axis", 0), nd);
    if (nd < 2 || ba < 0 || ta < 0 || ba == ta || ba > 1 || ta > 1) FAIL("batch_axis and time_axis must be 0 and 1, either way");
    int64_t xs[WEFT_MAX_DIMS];
    sizes_copy(c, x, xs);
    int64_t B = xs[ba], T = xs[ta];
    if (ndim_of(c, len) != 1 || sizes_of(c, len)[0] != B || (dtype_of(c, len) != WEFT_I64 && dtype_of(c, len) != WEFT_I32))
        FAIL("sequence_lens must hold one integer per batch element (%lld)", (long long)B);
    int64_t s2[WEFT_MAX_DIMS], e[1 + WEFT_MAX_DIMS] = {nd};
    for (int d = 0; d < nd; d++) s2[d] = d == ba ? B : 1, e[1 + d] = xs[d];
    weft_tensor *tt = weft_tensor_empty(nd, (int64_t[]){ta ? 1 : T, ta ? T : 1, 1, 1, 1, 1, 1, 1}, WEFT_I64);
    if (!tt) return weft_last_status();
    for (int64_t t = 0; t < T; t++) ((int64_t *)weft_tensor_data(tt))[t] = t;
    weft_value tv = oi_konst(c, NULL, tt, NULL); // (takes tt)
    int64_t d = WEFT_I64;
    weft_value l = oi_op(c, NULL, "cast", 1, &len, &d, 1, NULL, 0);
    l = oi_reshape(c, NULL, l, nd, s2);
    weft_value in = OK(l) && OK(tv) ? oi_op(c, NULL, "lt", 2, (weft_value[]){tv, l}, NULL, 0, NULL, 0) : WEFT_VALUE_NONE;
    weft_value one = oi_scalar(c, WEFT_I64, 1);
    weft_value rv = OK(l) && OK(one) ? oi_op(c, NULL, "sub", 2, (weft_value[]){l, one}, NULL, 0, NULL, 0) : WEFT_VALUE_NONE;
    rv = OK(rv) && OK(tv) ? oi_op(c, NULL, "sub", 2, (weft_value[]){rv, tv}, NULL, 0, NULL, 0) : WEFT_VALUE_NONE;
    weft_value ix = OK(in) && OK(rv) ? oi_op(c, NULL, "where", 3, (weft_value[]){in, rv, tv}, NULL, 0, NULL, 0) : WEFT_VALUE_NONE;
    ix = OK(ix) ? oi_op(c, NULL, "expand", 1, &ix, e, 1 + nd, NULL, 0) : ix;
    ix = OK(ix) ? oi_op(c, NULL, "copy", 1, &ix, NULL, 0, NULL, 0) : ix;
    int64_t dim = ta;
    if (!OK(ix)) return weft_last_status();
    OUT0(oi_op(c, node_out(c, 0), "gather", 2, (weft_value[]){x, ix}, &dim, 1, NULL, 0));
}


// Compress(x, condition; axis): the slices of x along axis (x flattened without one) where condition is true, the
// condition known at load (weft's shapes are static): an index_select of those positions. A condition shorter
// than the dim leaves the rest out; a longer one is refused.
weft_status oi_compress(nctx *c, const char *arg) {
    (void)arg;
    weft_tensor *ct;
    weft_status st = oi_konst_in(c, 1, &ct);
    if (st) return st;
    if (weft_tensor_ndim(ct) != 1) FAIL("condition must be 1-D");
    weft_value x = c->in[0];
    int nd = ndim_of(c, x);
    bool flat = !oi_attr(c, "axis");
    int ax = flat ? 0 : oi_axis(oi_attr_i(c, "axis", 0), nd);
    if (ax < 0) FAIL("axis %lld of %d dims", (long long)oi_attr_i(c, "axis", 0), nd);
    if (flat) {
        int64_t numel = 1;
        for (int d = 0; d < nd; d++) numel *= sizes_of(c, x)[d];
        x = oi_reshape(c, NULL, x, 1, &numel);
        if (!OK(x)) return weft_last_status();
    }
    int64_t len = weft_tensor_numel(ct), dim = sizes_of(c, x)[ax], k = 0;
    if (len > dim) FAIL("condition of %lld for a dim of %lld", (long long)len, (long long)dim);
    weft_tensor *c64 = weft_cast(ct, WEFT_F64);
    if (!c64) return weft_last_status();
    const double *cv = weft_tensor_data(c64);
    for (int64_t i = 0; i < len; i++) k += cv[i] != 0;
    weft_tensor *used = weft_tensor_empty(1, &k, WEFT_I64);
    for (int64_t i = 0, j = 0; used && i < len; i++)
        if (cv[i] != 0) ((int64_t *)weft_tensor_data(used))[j++] = i;
    weft_tensor_free(c64);
    if (!used) return weft_last_status();
    OUT0(oi_select(c, node_out(c, 0), x, ax, used));
}

#endif
