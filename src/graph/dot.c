// Graphviz DOT output: nodes as "name\nop", data edges labelled with
// shape and dtype, control dependencies dashed.
#include "fused.h"
#include "graph_impl.h"

// Node names come from users: quote what DOT would misread.
static void put_escaped(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if (*s == '\n') {
            fputs("\\n", f);
            continue;
        }
        fputc(*s, f);
    }
}

weft_status weft_graph_write_dot(const weft_graph *g, FILE *f) {
    if (!g || !f) return weft_error(WEFT_ERR_ARG, "graph_write_dot: NULL %s", g ? "file" : "graph");
    fprintf(f, "digraph weft {\n  node [shape=box, fontname=\"monospace\"];\n");
    for (int i = 0; i < g->n_nodes; i++) {
        const weft_gnode *n = &g->nodes[i];
        fprintf(f, "  n%d [label=\"", i);
        put_escaped(f, n->name);
        fprintf(f, "\\n%s", weft_graph_node_op(g, (weft_node_id){i}));
        // A fused group lists its ops in order ("fused: matmul+add+gelu") and stands out.
        char ops[512];
        if (n->kind == WEFT_NODE_FUSED) fprintf(f, ": %s", weft_fused_prog_str(n->prog, ops, sizeof ops));
        fprintf(f, "\"");
        if (n->kind == WEFT_NODE_FUSED) fprintf(f, ", style=\"filled,bold\", fillcolor=\"#ffe9a8\", peripheries=2");
        else if (n->kind == WEFT_NODE_PLACEHOLDER) fprintf(f, ", shape=invhouse");
        else if (n->kind == WEFT_NODE_VARIABLE) fprintf(f, ", shape=cylinder");
        else if (n->kind == WEFT_NODE_CONSTANT) fprintf(f, ", shape=ellipse");
        else if (n->kind == WEFT_NODE_COND || n->kind == WEFT_NODE_WHILE) fprintf(f, ", shape=diamond");
        fprintf(f, "];\n");
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const weft_gnode *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            const weft_gvalue *v = &g->values[n->in[k]];
            char s[96];
            fprintf(f, "  n%d -> n%d [label=\"%s %s", v->node, i, weft_shape_fmt(v->ndim, v->sizes, s, sizeof s),
                    weft_dtype_name((weft_dtype)v->dtype));
            if (g->nodes[v->node].n_out > 1) fprintf(f, " #%d", v->index);
            fprintf(f, "\"];\n");
        }
        for (int k = 0; k < n->n_ctrl; k++) fprintf(f, "  n%d -> n%d [style=dashed];\n", n->ctrl[k], i);
        if (n->var >= 0) fprintf(f, "  n%d -> n%d [style=dotted, label=\"writes\"];\n", i, n->var);
    }
    fprintf(f, "}\n");
    return ferror(f) ? weft_error(WEFT_ERR_IO, "graph_write_dot: write failed") : WEFT_OK;
}
