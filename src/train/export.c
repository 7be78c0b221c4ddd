// `weft export`: a model file (and a checkpoint) as an ONNX model. The
// inference forward is traced into a graph (dropout off, no autograd) and the
// graph written by weft_onnx_save; so what the file computes is what weft's
// own forward computes for the traced batch shape.
#include <stdlib.h>
#include <string.h>

#include "../core/core_impl.h"
#include "train_impl.h"

weft_status weft_export_onnx(const weft_model_cfg *cfg, const char *ckpt, int64_t batch, const char *path) {
    if (!cfg || !path) return weft_error(WEFT_ERR_ARG, "export: NULL argument");
    const weft_net_cfg *n = &cfg->net;
    if (batch < 0 || batch > (INT64_C(1) << 24)) return weft_error(WEFT_ERR_ARG, "export: bad batch %lld", (long long)batch);
    weft_run run = {0};
    run.cfg = cfg;
    weft_status st = weft_run_build(&run, false);
    if (!st && ckpt) st = weft_run_load_weights(&run, ckpt);
    weft_graph *g = st ? NULL : weft_graph_new();
    weft_tensor *x = NULL, *logits = NULL;
    if (!st && !g) st = weft_error(WEFT_ERR_OOM, "export: out of memory");
    if (!st) {
        weft_module_set_training(run.net, false);
        int64_t shape[WEFT_MAX_DIMS + 1] = {batch ? batch : n->batch};
        bool lm = n->dataset == WEFT_CFG_KJV;
        for (int d = 0; d < n->input_ndim; d++) shape[1 + d] = n->input[d];
        if (lm) shape[1] = n->context;
        x = weft_tensor_zeros(lm ? 2 : 1 + n->input_ndim, shape, lm ? WEFT_I64 : WEFT_F32);
        if (!x) st = weft_last_status();
    }
    bool prev = weft_grad_set_enabled(false);
    if (!st) st = weft_graph_trace_begin(g);
    if (!st) {
        weft_value xv = weft_graph_trace_input(g, x, "x");
        for (int i = 0; i < weft_module_param_count(run.net); i++) { // weights under their dotted names
            char name[256];
            weft_tensor *p = weft_module_param_at(run.net, i, name, sizeof name);
            weft_graph_trace_variable(g, p, name);
        }
        logits = weft_module_forward(run.net, x);
        weft_value lv = logits ? weft_graph_trace_output(g, logits) : WEFT_VALUE_NONE;
        weft_status fst = logits ? WEFT_OK : weft_last_status();
        st = weft_graph_trace_end(g);
        if (!st) st = fst;
        if (!st) { // the output under the name ONNX users see: a view of the logits named so
            int nd = weft_graph_value_ndim(g, lv);
            int64_t at[1 + WEFT_MAX_DIMS] = {nd};
            memcpy(at + 1, weft_graph_value_sizes(g, lv), sizeof(int64_t) * (size_t)nd);
            weft_value out;
            st = weft_graph_op_named(g, "logits", "view", 1, &lv, at, 1 + nd, NULL, 0, &out);
            if (!st) st = weft_onnx_save(g, 1, &xv, 1, &out, path);
        }
    }
    weft_grad_set_enabled(prev);
    weft_tensor_free(logits);
    weft_tensor_free(x);
    weft_graph_free(g);
    weft_run_free(&run);
    return st;
}
