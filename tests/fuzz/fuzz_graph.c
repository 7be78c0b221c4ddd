// Harness: graph files (weft_graph_load, src/graph/serialize.c, and through
// it every op's infer function on attributes from the file). The bytes are
// the file. A graph that loads is then
//   - saved and loaded again, which must succeed (what loads can be saved);
//   - run, when it is small (every value at most 4096 elements, at most 64
//     nodes) and has no while loop (one may never end): placeholders fed
//     zeros, every value fetched. A loaded graph's attributes reach the
//     kernels, which trust what infer let through.
#include "fuzz.h"

#define RUN_MAX_NUMEL 4096
#define RUN_MAX_NODES 64

// Runs g when it is small enough; its status (an error is fine: the data may
// be wrong for the op, e.g. an index out of range).
static weft_status run_small(weft_graph *g) {
    int nn = weft_graph_node_count(g), nv = weft_graph_value_count(g);
    if (nn > RUN_MAX_NODES) return WEFT_OK;
    for (int i = 0; i < nn; i++)
        if (weft_graph_node_kind(g, (weft_node_id){i}) == WEFT_NODE_WHILE) return WEFT_OK;
    for (int v = 0; v < nv; v++) {
        int64_t n = 1;
        const int64_t *s = weft_graph_value_sizes(g, (weft_value){v});
        for (int d = 0; d < weft_graph_value_ndim(g, (weft_value){v}); d++) n = s[d] > RUN_MAX_NUMEL ? RUN_MAX_NUMEL + 1 : n * s[d];
        if (n > RUN_MAX_NUMEL) return WEFT_OK;
    }
    weft_value feed_vals[RUN_MAX_NODES], fetch[RUN_MAX_NODES * 4];
    weft_tensor *feeds[RUN_MAX_NODES] = {0}, *out[RUN_MAX_NODES * 4] = {0};
    int n_feeds = 0, n_fetch = 0;
    weft_status st = WEFT_OK;
    for (int i = 0; i < nn && !st; i++) {
        weft_node_id id = {i};
        weft_value v0 = weft_graph_node_output(g, id, 0);
        if (weft_graph_node_kind(g, id) == WEFT_NODE_PLACEHOLDER) {
            feed_vals[n_feeds] = v0;
            feeds[n_feeds] = weft_tensor_zeros(weft_graph_value_ndim(g, v0), weft_graph_value_sizes(g, v0),
                                               weft_graph_value_dtype(g, v0));
            if (!feeds[n_feeds++]) st = weft_last_status();
        }
        for (int j = 0; j < weft_graph_node_num_outputs(g, id); j++) fetch[n_fetch++] = weft_graph_node_output(g, id, j);
    }
    if (!st) st = weft_graph_run(g, n_feeds, feed_vals, feeds, n_fetch, fetch, out, 0, NULL);
    for (int k = 0; k < n_feeds; k++) weft_tensor_free(feeds[k]);
    for (int k = 0; k < n_fetch; k++) weft_tensor_free(out[k]);
    return st;
}

weft_status fuzz_one(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, data, size), *dir = fuzz_tmpdir();
    if (!path || !dir) return WEFT_ERR_IO;
    weft_graph *g = weft_graph_load(path);
    if (!g) return weft_last_status();
    char saved[128];
    snprintf(saved, sizeof saved, "%s/g.wgraph", dir);
    if (weft_graph_save(g, saved) == WEFT_OK) {
        weft_graph *g2 = weft_graph_load(saved);
        FUZZ_ASSERT(g2, "a graph that loaded does not load once saved: %s", weft_last_error());
        FUZZ_ASSERT(weft_graph_node_count(g2) == weft_graph_node_count(g), "the saved graph has %d nodes, not %d",
                    weft_graph_node_count(g2), weft_graph_node_count(g));
        weft_graph_free(g2);
        unlink(saved);
    }
    char *dot = NULL;
    size_t dot_len = 0;
    FILE *f = open_memstream(&dot, &dot_len);
    if (f) {
        weft_graph_write_dot(g, f);
        fclose(f);
    }
    free(dot);
    run_small(g);
    weft_graph_free(g);
    return WEFT_OK;
}
