// Harness: ONNX models (weft_onnx_load, src/graph/onnx_import.c and
// onnx_tensor.c: protobuf-c's parser, then every ONNX op's reading of its
// attributes and inputs, and through the builder every weft op's infer). The
// bytes are the file; symbolic dims are refused (no shapes are given). A model
// that loads is then
//   - saved by weft_onnx_save (its placeholders to every value an ONNX name
//     reaches is too many to pick: the last node's outputs) and, when that
//     succeeds, loaded again, which must succeed (what weft writes it reads);
//   - run when it is small (fuzz_run_small).
#include "fuzz.h"

weft_status fuzz_one(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, data, size), *dir = fuzz_tmpdir();
    if (!path || !dir) return WEFT_ERR_IO;
    weft_graph *g = weft_onnx_load(path, 0, NULL);
    if (!g) return weft_last_status();
    int nn = weft_graph_node_count(g), n_in = 0;
    weft_value in[64];
    for (int i = 0; i < nn && n_in < 64; i++)
        if (weft_graph_node_kind(g, (weft_node_id){i}) == WEFT_NODE_PLACEHOLDER)
            in[n_in++] = weft_graph_node_output(g, (weft_node_id){i}, 0);
    weft_node_id last = {nn - 1};
    int n_out = nn > 0 ? weft_graph_node_num_outputs(g, last) : 0;
    weft_value out[WEFT_GRAPH_MAX_OUT];
    for (int k = 0; k < n_out && k < WEFT_GRAPH_MAX_OUT; k++) out[k] = weft_graph_node_output(g, last, k);
    char saved[128];
    snprintf(saved, sizeof saved, "%s/m.onnx", dir);
    if (n_out > 0 && n_in < 64 && weft_onnx_save(g, n_in, in, n_out, out, saved) == WEFT_OK) {
        weft_graph *g2 = weft_onnx_load(saved, 0, NULL);
        FUZZ_ASSERT(g2, "a model weft saved does not load: %s", weft_last_error());
        weft_graph_free(g2);
        unlink(saved);
    }
    fuzz_run_small(g);
    weft_graph_free(g);
    return WEFT_OK;
}
