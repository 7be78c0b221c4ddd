// Small graph-building helpers shared by the tests under tests/graph.
#ifndef WEFT_GRAPH_TEST_H
#define WEFT_GRAPH_TEST_H

#include <stdlib.h>
#include <string.h>

#include <weft/graph.h>

static inline weft_value op1(weft_graph *g, const char *op, weft_value a) {
    return weft_graph_op1(g, op, 1, &a, NULL, 0, NULL, 0);
}
static inline weft_value op2(weft_graph *g, const char *op, weft_value a, weft_value b) {
    return weft_graph_op1(g, op, 2, (weft_value[]){a, b}, NULL, 0, NULL, 0);
}
// An op with one double attr (mul_scalar, add_scalar, ...).
static inline weft_value scal(weft_graph *g, const char *op, weft_value a, double s) {
    return weft_graph_op1(g, op, 1, &a, NULL, 0, &s, 1);
}
// An f64 0-d constant.
static inline weft_value cst(weft_graph *g, double v) {
    weft_tensor *t = weft_tensor_scalar(v, WEFT_F64);
    weft_value c = weft_graph_constant(g, NULL, t);
    weft_tensor_free(t);
    return c;
}
// Sum over every axis.
static inline weft_value sum_all(weft_graph *g, weft_value v) {
    int64_t mask = (1 << weft_graph_value_ndim(g, v)) - 1;
    return weft_graph_op1(g, "sum", 1, &v, &mask, 1, NULL, 0);
}
// Same rank, element count and values bit for bit (compared as f64).
static inline bool same_bits(weft_tensor *a, weft_tensor *b) {
    if (!a || !b || weft_tensor_numel(a) != weft_tensor_numel(b) || weft_tensor_ndim(a) != weft_tensor_ndim(b))
        return false;
    int64_t n = weft_tensor_numel(a);
    double *x = malloc(sizeof(double) * (size_t)(n ? n : 1)), *y = malloc(sizeof(double) * (size_t)(n ? n : 1));
    weft_tensor_to_f64(a, x, n);
    weft_tensor_to_f64(b, y, n);
    bool ok = memcmp(x, y, sizeof(double) * (size_t)n) == 0;
    free(x);
    free(y);
    return ok;
}

#endif
