// Graph-mode training steps (`weft train --graph`) against eager steps of the
// same network, measured in this binary (the peer is weft eager):
//   graph_fmnist_mlp, graph_fmnist_cnn, graph_kjv_gpt, graph_kjv_lstm
//                                     steps/s (graph, peer eager)
//   graph_torch_fmnist_mlp, ..._cnn, ..._kjv_gpt, ..._kjv_lstm
//                                     the same graph steps/s against the PyTorch twins
//                                     (bench/peers/graph_train.py, PyTorch eager)
//   graph_gpt2_small_cuda, graph_torch_gpt2_small_cuda
//                                     models/gpt2-small-bytes.cfg (bf16 autocast), on a GPU
//                                     only: on the GPU the graph step is one CUDA Graph
//                                     replay, which the launch-bound workloads need (issue 16)
//   graph_kjv_gpt_peak_mem            bytes of intermediates in one step, lower is
//                                     better: the graph's planned arena, peer eager's
//                                     allocator peak above what was live before the step
// Synthetic batches of the model file's shape; the graph path is the real one
// (weft_graph_train_step in src/train/graph_train.c). WEFT_BENCH_DEVICE=cuda
// runs both on the GPU (graph steps with CUDA graphs unless
// WEFT_CUDA_GRAPHS=0); every timed step then ends with the device idle.
#include <string.h>
#include <weft.h>
#include <weft/device.h>
#include <weft/graph.h>

#include "bench_run.h"
#include "bench_util.h"

static void eager_step(weft_run *r, weft_tensor *x, weft_tensor *y, int *fail) {
    weft_autocast_set(weft_run_autocast(r)); // [net] precision, as weft train's eager step
    weft_tensor *lg = weft_module_forward(r->net, x), *l = weft_model_loss(r->cfg, lg, y);
    weft_autocast_set(WEFT_F32);
    if (!l || weft_backward(l, NULL, NULL)) *fail = 1;
    weft_optim_set_lr(r->optim, weft_lr_at(&r->sched, r->step + 1));
    if (!*fail && weft_optim_step(r->optim)) *fail = 1;
    weft_optim_zero_grad(r->optim);
    weft_tensor_free(lg);
    weft_tensor_free(l);
    r->step++;
    if (r->device.type != WEFT_CPU && weft_device_synchronize(r->device)) *fail = 1; // the graph step reads its loss
}

static int run(int argc, char **argv, const char *name, const char *torch_name, const char *path, int min_steps,
               double min_s, bool mem, bool gpu_only) {
    bool want = bench_selected(argc, argv, name) || bench_selected(argc, argv, torch_name), want_mem = mem && bench_selected(argc, argv, "graph_kjv_gpt_peak_mem");
    if (!want && !want_mem) return 0;
    const char *ds = getenv("WEFT_BENCH_DEVICE");
    if (gpu_only && !(ds && !strncmp(ds, "cuda", 4))) return 0; // 86M parameters: a GPU workload
    bench_run b;
    if (bench_run_open(&b, name, path)) return 1;
    weft_run *r = &b.run;
    weft_tensor *x = weft_run_to_device(r, b.x), *y = weft_run_to_device(r, b.y);
    int fail = !x || !y;
    weft_device dev = r->device; // where the step's memory is measured
    double l, te = 0, tg = 0;
    // eager: warm-up (caches, allocator), then the peak of one step
    if (!fail) eager_step(r, x, y, &fail);
    weft_memory_stats m0, m1;
    weft_memory_stats_get(dev, &m0);
    weft_memory_reset_peak(dev);
    if (!fail) eager_step(r, x, y, &fail);
    weft_memory_stats_get(dev, &m1);
    double eager_peak = (double)m1.peak_bytes_in_use - (double)m0.bytes_in_use;
    // graph: the first step traces and builds; then eager and graph alternate (noisy machine)
    r->opts.graph = true;
    if (!fail && weft_graph_train_step(r, x, y, &l)) fail = 1;
    for (int round = 0; round < 2 && !fail && want; round++) {
        double s;
        BENCH_BEST(s, 1, min_steps, min_s, eager_step(r, x, y, &fail));
        te = round == 0 || s < te ? s : te;
        BENCH_BEST(s, 1, min_steps, min_s, if (weft_graph_train_step(r, x, y, &l)) fail = 1);
        tg = round == 0 || s < tg ? s : tg;
    }
    if (fail) fprintf(stderr, "%s: %s\n", name, weft_last_error());
    else {
        if (want) bench_report_peer(name, 1.0 / tg, "steps/s", 1, 1.0 / te);
        if (want) bench_report(torch_name, 1.0 / tg, "steps/s", 1); // peer: bench/peers/graph_train.py
        weft_graph_run_stats rs = weft_graph_last_run_stats(weft_graph_train_graph(r, 0));
        if (want_mem) bench_report_peer("graph_kjv_gpt_peak_mem", (double)rs.peak_bytes, "bytes", 0, eager_peak);
        else fprintf(stderr, "%s: graph arena %zu bytes (planned=%d), eager peak %.0f bytes\n", name, rs.peak_bytes,
                     rs.planned, eager_peak);
    }
    weft_tensor_free(x);
    weft_tensor_free(y);
    bench_run_close(&b);
    return fail;
}

int main(int argc, char **argv) {
    int fail = 0;
    fail |= run(argc, argv, "graph_fmnist_mlp", "graph_torch_fmnist_mlp", "models/fmnist-mlp.cfg", 20, 1.0, false, false);
    fail |= run(argc, argv, "graph_fmnist_cnn", "graph_torch_fmnist_cnn", "models/fmnist-cnn.cfg", 3, 2.0, false, false);
    fail |= run(argc, argv, "graph_kjv_gpt", "graph_torch_kjv_gpt", "models/kjv-gpt.cfg", 3, 2.0, true, false);
    fail |= run(argc, argv, "graph_kjv_lstm", "graph_torch_kjv_lstm", "models/kjv-lstm.cfg", 3, 2.0, false, false);
    fail |= run(argc, argv, "graph_gpt2_small_cuda", "graph_torch_gpt2_small_cuda", "models/gpt2-small-bytes.cfg", 3,
                2.0, false, true);
    return fail;
}
