// Modules: named parameters, buffers and children; dotted-name traversal.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/autograd.h>
#include <weft/nn.h>

#include "../core/core_impl.h"
#include "../tensor/tensor_impl.h"

typedef struct entry {
    char *name;
    weft_tensor *t;
} entry;
typedef struct child {
    char *name;
    weft_module *m;
} child;

struct weft_module {
    const char *kind;
    weft_module_forward_fn forward;
    weft_module_fold_fn fold; // NULL: m never folds its predecessor
    void *impl;
    void (*impl_free)(void *);
    bool training;
    entry *params, *buffers;
    int n_params, n_buffers;
    child *children;
    int n_children;
};

weft_module *weft_module_new(const char *kind, weft_module_forward_fn forward, void *impl, void (*impl_free)(void *)) {
    weft_module *m = calloc(1, sizeof *m);
    if (!m) {
        if (impl_free) impl_free(impl);
        return weft_error_null(WEFT_ERR_OOM, "%s: out of memory", kind);
    }
    m->kind = kind;
    m->forward = forward;
    m->impl = impl;
    m->impl_free = impl_free;
    m->training = true;
    return m;
}

void weft_module_free(weft_module *m) {
    if (!m) return;
    for (int i = 0; i < m->n_params; i++) {
        free(m->params[i].name);
        weft_tensor_free(m->params[i].t);
    }
    for (int i = 0; i < m->n_buffers; i++) {
        free(m->buffers[i].name);
        weft_tensor_free(m->buffers[i].t);
    }
    for (int i = 0; i < m->n_children; i++) {
        free(m->children[i].name);
        weft_module_free(m->children[i].m);
    }
    free(m->params);
    free(m->buffers);
    free(m->children);
    if (m->impl_free) m->impl_free(m->impl);
    free(m);
}

static bool valid_name(const char *n) { return n && *n && !strchr(n, '.'); }

static weft_status add_entry(weft_module *m, entry **arr, int *n, const char *name, weft_tensor *t, const char *what) {
    if (!t) {
        weft_error_null_input(m->kind);
        return weft_last_status();
    }
    if (!valid_name(name)) {
        weft_tensor_free(t);
        return weft_error(WEFT_ERR_ARG, "%s: bad %s name '%s' (non-empty, no dots)", m->kind, what, name ? name : "");
    }
    if (weft_module_get(m, name)) {
        weft_tensor_free(t);
        return weft_error(WEFT_ERR_ARG, "%s: %s '%s' already exists", m->kind, what, name);
    }
    entry *e = realloc(*arr, sizeof(entry) * (size_t)(*n + 1));
    char *dup = strdup(name);
    if (!e || !dup) {
        if (e) *arr = e;
        free(dup);
        weft_tensor_free(t);
        return weft_error(WEFT_ERR_OOM, "%s: out of memory", m->kind);
    }
    *arr = e;
    e[*n] = (entry){dup, t};
    weft_tensor_memory_tag(t, WEFT_MEM_PARAMETERS); // parameters and buffers alike
    (*n)++;
    return WEFT_OK;
}

weft_status weft_module_add_param(weft_module *m, const char *name, weft_tensor *t) {
    if (!m) return weft_error(WEFT_ERR_ARG, "module_add_param: NULL module");
    if (t) {
        weft_status st = weft_tensor_set_requires_grad(t, true);
        if (st) {
            weft_tensor_free(t);
            return st;
        }
    }
    return add_entry(m, &m->params, &m->n_params, name, t, "parameter");
}

weft_status weft_module_add_buffer(weft_module *m, const char *name, weft_tensor *t) {
    if (!m) return weft_error(WEFT_ERR_ARG, "module_add_buffer: NULL module");
    return add_entry(m, &m->buffers, &m->n_buffers, name, t, "buffer");
}

weft_status weft_module_add_child(weft_module *m, const char *name, weft_module *c) {
    if (!m || !c) {
        weft_module_free(c);
        if (!m) return weft_error(WEFT_ERR_ARG, "module_add_child: NULL module");
        weft_error_null_input(m->kind);
        return weft_last_status();
    }
    if (!valid_name(name)) {
        weft_module_free(c);
        return weft_error(WEFT_ERR_ARG, "%s: bad child name '%s'", m->kind, name ? name : "");
    }
    child *a = realloc(m->children, sizeof(child) * (size_t)(m->n_children + 1));
    char *dup = strdup(name);
    if (!a || !dup) {
        if (a) m->children = a;
        free(dup);
        weft_module_free(c);
        return weft_error(WEFT_ERR_OOM, "%s: out of memory", m->kind);
    }
    m->children = a;
    a[m->n_children++] = (child){dup, c};
    c->training = m->training;
    return WEFT_OK;
}

weft_tensor *weft_module_get(const weft_module *m, const char *name) {
    if (!m || !name) return NULL;
    for (int i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].name, name)) return m->params[i].t;
    for (int i = 0; i < m->n_buffers; i++)
        if (!strcmp(m->buffers[i].name, name)) return m->buffers[i].t;
    return NULL;
}

int weft_module_child_count(const weft_module *m) { return m ? m->n_children : 0; }
weft_module *weft_module_child_at(const weft_module *m, int i) {
    return (m && i >= 0 && i < m->n_children) ? m->children[i].m : NULL;
}
void *weft_module_impl(const weft_module *m) { return m ? m->impl : NULL; }
void weft_module_set_fold(weft_module *m, weft_module_fold_fn fold) {
    if (m) m->fold = fold;
}
const char *weft_module_kind(const weft_module *m) { return m ? m->kind : ""; }
bool weft_module_is_training(const weft_module *m) { return m && m->training; }

void weft_module_set_training(weft_module *m, bool training) {
    if (!m) return;
    m->training = training;
    for (int i = 0; i < m->n_children; i++) weft_module_set_training(m->children[i].m, training);
}

weft_tensor *weft_module_forward(weft_module *m, weft_tensor *x) {
    if (!m) return weft_error_null(WEFT_ERR_ARG, "module_forward: NULL module");
    if (!x) return weft_error_null_input(m->kind);
    if (!m->forward) return weft_error_null(WEFT_ERR_STATE, "%s: module has no forward", m->kind);
    return m->forward(m, x);
}

// Depth-first walk to the i-th entry (params or buffers); writes the dotted name.
static weft_tensor *walk(const weft_module *m, bool params, int *i, char *name, size_t len, size_t at) {
    const entry *arr = params ? m->params : m->buffers;
    int n = params ? m->n_params : m->n_buffers;
    if (*i < n) {
        if (name && at < len) snprintf(name + at, len - at, "%s", arr[*i].name);
        return arr[*i].t;
    }
    *i -= n;
    for (int c = 0; c < m->n_children; c++) {
        size_t k = at;
        if (name && k < len) k += (size_t)snprintf(name + k, len - k, "%s.", m->children[c].name);
        weft_tensor *t = walk(m->children[c].m, params, i, name, len, k < len ? k : len);
        if (t) return t;
    }
    return NULL;
}

static int count(const weft_module *m, bool params) {
    int n = params ? m->n_params : m->n_buffers;
    for (int c = 0; c < m->n_children; c++) n += count(m->children[c].m, params);
    return n;
}

int weft_module_param_count(const weft_module *m) { return m ? count(m, true) : 0; }
int weft_module_buffer_count(const weft_module *m) { return m ? count(m, false) : 0; }

weft_tensor *weft_module_param_at(const weft_module *m, int i, char *name, size_t len) {
    if (!m || i < 0) return NULL;
    if (name && len) name[0] = 0;
    return walk(m, true, &i, name, len, 0);
}
weft_tensor *weft_module_buffer_at(const weft_module *m, int i, char *name, size_t len) {
    if (!m || i < 0) return NULL;
    if (name && len) name[0] = 0;
    return walk(m, false, &i, name, len, 0);
}

weft_tensor *weft_module_find(const weft_module *m, const char *dotted) {
    if (!m || !dotted) return NULL;
    const char *dot = strchr(dotted, '.');
    if (!dot) return weft_module_get(m, dotted);
    size_t k = (size_t)(dot - dotted);
    for (int c = 0; c < m->n_children; c++)
        if (strlen(m->children[c].name) == k && !strncmp(m->children[c].name, dotted, k))
            return weft_module_find(m->children[c].m, dot + 1);
    return NULL;
}

int64_t weft_module_num_elements(const weft_module *m) {
    int64_t n = 0;
    int np = weft_module_param_count(m);
    for (int i = 0; i < np; i++) n += weft_tensor_numel(weft_module_param_at(m, i, NULL, 0));
    return n;
}

void weft_module_zero_grad(weft_module *m) {
    int np = weft_module_param_count(m);
    for (int i = 0; i < np; i++) weft_tensor_zero_grad(weft_module_param_at(m, i, NULL, 0));
}

static bool is_float(weft_dtype dt) { return dt == WEFT_F32 || dt == WEFT_F64 || dt == WEFT_F16 || dt == WEFT_BF16; }

// Each floating entry of arr replaced by a cast copy (made without history).
static weft_status cast_entries(entry *arr, int n, weft_dtype dt, bool params) {
    for (int i = 0; i < n; i++) {
        weft_tensor *t = arr[i].t;
        if (!is_float(weft_tensor_dtype(t)) || weft_tensor_dtype(t) == dt) continue;
        weft_tensor *d = weft_tensor_detach(t), *c = weft_cast(d, dt);
        weft_tensor_free(d);
        if (!c) return weft_last_status();
        weft_status st = params ? weft_tensor_set_requires_grad(c, true) : WEFT_OK;
        if (st) {
            weft_tensor_free(c);
            return st;
        }
        weft_tensor_free(t);
        arr[i].t = c;
        weft_tensor_memory_tag(c, WEFT_MEM_PARAMETERS);
    }
    return WEFT_OK;
}

weft_status weft_module_to_dtype(weft_module *m, weft_dtype dt) {
    if (!m) return weft_error(WEFT_ERR_ARG, "module_to_dtype: NULL module");
    if (!is_float(dt))
        return weft_error(WEFT_ERR_DTYPE, "module_to_dtype: %s: the dtype must be floating point", m->kind);
    weft_status st = cast_entries(m->params, m->n_params, dt, true);
    if (!st) st = cast_entries(m->buffers, m->n_buffers, dt, false);
    for (int c = 0; !st && c < m->n_children; c++) st = weft_module_to_dtype(m->children[c].m, dt);
    return st;
}

// ---- sequential ----
// Children [from, n) applied to h (a new reference, taken). Child i+1 may fold child i: it then
// computes both from child i's input, and child i does not run.
static weft_tensor *seq_run(weft_module *m, int from, weft_tensor *h) {
    for (int i = from; i < m->n_children && h; i++) {
        weft_module *c = m->children[i].m, *next = i + 1 < m->n_children ? m->children[i + 1].m : NULL;
        weft_tensor *n = NULL;
        if (next && next->fold) {
            if (next->fold(next, c, h, &n)) {
                weft_tensor_free(h);
                return NULL;
            }
            if (n) i++;
        }
        if (!n) n = weft_module_forward(c, h);
        weft_tensor_free(h);
        h = n;
    }
    return h;
}

static weft_tensor *seq_forward(weft_module *m, weft_tensor *x) { return seq_run(m, 0, weft_tensor_ref(x)); }

// A sequential folds prev where its first child does; the rest of its children then run on the result.
static weft_status seq_fold(weft_module *m, weft_module *prev, weft_tensor *x, weft_tensor **out) {
    *out = NULL;
    weft_module *first = m->n_children ? m->children[0].m : NULL;
    if (!first || !first->fold) return WEFT_OK;
    weft_tensor *h = NULL;
    weft_status st = first->fold(first, prev, x, &h);
    if (st || !h) return st;
    *out = seq_run(m, 1, h);
    return *out ? WEFT_OK : weft_last_status();
}

weft_module *weft_nn_sequential(void) {
    weft_module *m = weft_module_new("sequential", seq_forward, NULL, NULL);
    weft_module_set_fold(m, seq_fold);
    return m;
}

weft_status weft_nn_sequential_append(weft_module *seq, weft_module *m) {
    if (!seq) {
        weft_module_free(m);
        return weft_error(WEFT_ERR_ARG, "sequential_append: NULL container");
    }
    char name[16];
    snprintf(name, sizeof name, "%d", seq->n_children);
    return weft_module_add_child(seq, name, m);
}
