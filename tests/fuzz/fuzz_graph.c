// Harness: graph files (weft_graph_load, src/graph/serialize.c, and through
// it every op's infer function on attributes from the file). The bytes are
// the file. A graph that loads is then
//   - saved and loaded again, which must succeed (what loads can be saved);
//   - run when it is small (fuzz_run_small, fuzz.h). A loaded graph's
//     attributes reach the kernels, which trust what infer let through.
#include "fuzz.h"

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
    fuzz_run_small(g);
    weft_graph_free(g);
    return WEFT_OK;
}
