// Graph fusion (weft_graph_optimize with .fusion): fused vs unfused graphs,
// measured alternately in this binary (the peer is the same graph unfused):
//   graph_fusion_chain      (4096,1024) f32: relu(x*2+1)*y, 4 ops (memory-bound)  elem/s
//   graph_fusion_epilogue   gelu(a@w + b), (1024,1024)@(1024,1024)      elem/s of the output
// and, for a traced kjv-gpt training step (models/kjv-gpt.cfg, the graph
// `weft train --graph` runs), how many groups and ops got fused (stderr).
#include <weft.h>
#include <weft/graph.h>
#include <weft/graph_passes.h>

#include "../src/graph/fused.h"
#include "bench_run.h"
#include "bench_util.h"

static weft_tensor *rnd(int nd, const int64_t *sz, weft_generator *gen, double scale) {
    weft_tensor *t = weft_tensor_randn(nd, sz, WEFT_F32, gen), *s = weft_mul_scalar(t, scale);
    weft_tensor_free(t);
    return s;
}

// Times g and o (fusion on) alternately on the same feeds; returns 0 on success.
static int ab(const char *name, weft_graph *g, int n_feed, const weft_value *feed, weft_tensor *const *ft,
              weft_value fetch, double elems) {
    weft_graph_passes p = weft_graph_passes_all(), off = p;
    off.fusion = false;
    weft_value fo, fu;
    weft_graph_pass_stats st;
    weft_graph *o = weft_graph_optimize(g, 1, &fetch, &fo, &p, &st), *u = weft_graph_optimize(g, 1, &fetch, &fu, &off, NULL);
    if (!o || !u) {
        fprintf(stderr, "%s: %s\n", name, weft_last_error());
        return 1;
    }
    weft_value fo_in[4], fu_in[4];
    for (int i = 0; i < n_feed; i++) {
        const char *nm = weft_graph_node_name(g, weft_graph_value_node(g, feed[i]));
        fo_in[i] = weft_graph_find_value(o, nm);
        fu_in[i] = weft_graph_find_value(u, nm);
    }
    int fail = 0;
    double tf = 0, tu = 0;
    for (int round = 0; round < 3 && !fail; round++) {
        double s;
        weft_tensor *r = NULL;
        BENCH_BEST(s, 1, 3, 0.3, fail |= weft_graph_run(u, n_feed, fu_in, ft, 1, &fu, &r, 0, NULL) != WEFT_OK;
                   weft_tensor_free(r));
        tu = round == 0 || s < tu ? s : tu;
        BENCH_BEST(s, 1, 3, 0.3, fail |= weft_graph_run(o, n_feed, fo_in, ft, 1, &fo, &r, 0, NULL) != WEFT_OK;
                   weft_tensor_free(r));
        tf = round == 0 || s < tf ? s : tf;
    }
    if (fail) fprintf(stderr, "%s: %s\n", name, weft_last_error());
    else {
        bench_report_peer(name, elems / tf, "elem/s", 1, elems / tu);
        fprintf(stderr, "%s: fused %.3f ms, unfused %.3f ms (ratio %.2f), %d groups / %d ops fused\n", name, tf * 1e3,
                tu * 1e3, tu / tf, st.fused_groups, st.fused_nodes);
    }
    weft_graph_free(o);
    weft_graph_free(u);
    return fail;
}

static int chain(int argc, char **argv, weft_generator *gen) {
    if (!bench_selected(argc, argv, "graph_fusion_chain")) return 0;
    int64_t sz[2] = {4096, 1024};
    weft_graph *g = weft_graph_new();
    weft_value x = weft_graph_placeholder(g, "x", 2, sz, WEFT_F32), y = weft_graph_placeholder(g, "y", 2, sz, WEFT_F32);
    weft_value a = weft_graph_op1(g, "mul_scalar", 1, &x, NULL, 0, (double[]){2}, 1);
    weft_value b = weft_graph_op1(g, "add_scalar", 1, &a, NULL, 0, (double[]){1}, 1);
    weft_value c = weft_graph_op1(g, "relu", 1, &b, NULL, 0, NULL, 0);
    weft_value d = weft_graph_op1(g, "mul", 2, (weft_value[]){c, y}, NULL, 0, NULL, 0);
    weft_tensor *xt = rnd(2, sz, gen, 1), *yt = rnd(2, sz, gen, 1);
    int fail = ab("graph_fusion_chain", g, 2, (weft_value[]){x, y}, (weft_tensor *[]){xt, yt}, d, 4096.0 * 1024);
    weft_tensor_free(xt);
    weft_tensor_free(yt);
    weft_graph_free(g);
    return fail;
}

static int epilogue(int argc, char **argv, weft_generator *gen) {
    if (!bench_selected(argc, argv, "graph_fusion_epilogue")) return 0;
    int64_t sa[2] = {1024, 1024}, sb[1] = {1024};
    weft_graph *g = weft_graph_new();
    weft_value a = weft_graph_placeholder(g, "a", 2, sa, WEFT_F32), w = weft_graph_placeholder(g, "w", 2, sa, WEFT_F32);
    weft_value bias = weft_graph_placeholder(g, "b", 1, sb, WEFT_F32);
    weft_value m = weft_graph_op1(g, "matmul", 2, (weft_value[]){a, w}, NULL, 0, NULL, 0);
    weft_value h = weft_graph_op1(g, "add", 2, (weft_value[]){m, bias}, NULL, 0, NULL, 0);
    weft_value y = weft_graph_op1(g, "gelu", 1, &h, NULL, 0, NULL, 0);
    weft_tensor *at = rnd(2, sa, gen, 1), *wt = rnd(2, sa, gen, 0.03), *bt = rnd(1, sb, gen, 1);
    int fail = ab("graph_fusion_epilogue", g, 3, (weft_value[]){a, w, bias}, (weft_tensor *[]){at, wt, bt}, y,
                  1024.0 * 1024);
    weft_tensor_free(at);
    weft_tensor_free(wt);
    weft_tensor_free(bt);
    weft_graph_free(g);
    return fail;
}

// The kjv-gpt step graph as `weft train --graph` builds and optimises it.
static int kjv(int argc, char **argv) {
    if (!bench_selected(argc, argv, "graph_fusion_kjv")) return 0;
    bench_run b;
    if (bench_run_open(&b, "graph_fusion_kjv", "models/kjv-gpt.cfg")) return 1;
    weft_run *r = &b.run;
    double l;
    r->opts.graph = true;
    int fail = weft_graph_train_step(r, b.x, b.y, &l) != WEFT_OK;
    weft_graph *sg = fail ? NULL : weft_graph_train_graph(r, 0);
    if (sg) {
        int groups = 0, ops = 0, op_nodes = 0, mm = 0;
        for (int i = 0; i < sg->n_nodes; i++) {
            const weft_gnode *n = &sg->nodes[i];
            if (n->kind == WEFT_NODE_OP) op_nodes++;
            if (n->kind != WEFT_NODE_FUSED) continue;
            groups++;
            ops += n->prog->n_instr;
            mm += n->prog->matmul_head;
        }
        fprintf(stderr,
                "graph_fusion_kjv: step graph %d nodes: %d fused groups replacing %d ops (%d matmul epilogues), %d "
                "op nodes left\n",
                sg->n_nodes, groups, ops, mm, op_nodes);
    } else fprintf(stderr, "graph_fusion_kjv: %s\n", weft_last_error());
    bench_run_close(&b);
    return fail;
}

int main(int argc, char **argv) {
    weft_generator *gen = weft_generator_create(3);
    int fail = chain(argc, argv, gen);
    fail |= epilogue(argc, argv, gen);
    fail |= kjv(argc, argv);
    weft_generator_free(gen);
    return fail;
}
