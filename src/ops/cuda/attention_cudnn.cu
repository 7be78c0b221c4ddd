// cuDNN's fused causal attention for causal_attention(_backward) in bf16 / f16 (attention_cudnn.h): one
// cudnn-frontend graph with an SDPA node (or its backward) per shape, layout and scale, built on first use
// and kept for the life of the process, as llm.c's cudnn_att.cpp does. Built only where CMake found cuDNN
// and the frontend's headers (WEFT_HAVE_CUDNN); otherwise nothing is ever planned.
#include "attention_cudnn.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

static std::atomic<int64_t> g_runs{0}; // weft_cudnn_attention_runs

extern "C" int64_t weft_cudnn_attention_runs(void) { return g_runs.load(); }

#ifdef WEFT_HAVE_CUDNN
#define CUDNN_FRONTEND_SKIP_JSON_LIB // (graphs are never serialised here; the JSON library is most of the compile)
#include <cstring>                   // (which the frontend then uses without including)
#include <cudnn_frontend.h>

#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace fe = cudnn_frontend;

namespace {

// The tensors' uids in a graph's variant pack.
enum : int64_t { UID_Q = 1, UID_K, UID_V, UID_O, UID_GO, UID_GQ, UID_GK, UID_GV, UID_STATS };

struct Plan {
    std::shared_ptr<fe::graph::Graph> graph; // NULL: cuDNN cannot run this shape (kept so it is asked once)
    int64_t workspace = 0;
    std::string why;
    bool failed = false; // an execute failed: not run again (the graph is kept: a captured CUDA Graph may use it)
};

// The plans by weft_cudnn_attn's fields, and the handles by device, under g_mu. Made on first use and never
// freed: destroying cuDNN's plans at exit would run after the CUDA runtime has shut down.
std::mutex g_mu;
auto *g_plans = new std::map<std::vector<int64_t>, Plan>();
auto *g_handle = new std::unordered_map<int, cudnnHandle_t>();

// The backward adds dq in a fixed order unless WEFT_ATTN_CUDNN_DETERMINISTIC=0 (then by atomics, in any order).
bool deterministic() {
    const char *d = getenv("WEFT_ATTN_CUDNN_DETERMINISTIC");
    return !(d && !strcmp(d, "0"));
}

std::vector<int64_t> key_of(const weft_cudnn_attn *a) {
    float scale = a->scale;
    int32_t scale_bits;
    memcpy(&scale_bits, &scale, sizeof scale_bits);
    std::vector<int64_t> k = {a->bf16, a->device, a->backward, a->B, a->H, a->T, a->D, scale_bits,
                              a->backward && deterministic()};
    int n = a->backward ? WEFT_CUDNN_N : WEFT_CUDNN_GO;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < 3; j++) k.push_back(a->s[i][j]);
    return k;
}

// The handle of a's device (the caller holds g_mu), made on first use.
cudnnHandle_t handle_for(int device, std::string *why) {
    auto it = g_handle->find(device);
    if (it != g_handle->end()) return it->second;
    cudnnHandle_t h = nullptr;
    cudnnStatus_t s = cudnnCreate(&h);
    if (s != CUDNN_STATUS_SUCCESS) {
        *why = std::string("cudnnCreate: ") + cudnnGetErrorString(s);
        return nullptr;
    }
    (*g_handle)[device] = h;
    return h;
}

std::shared_ptr<fe::graph::Tensor_attributes> heads(fe::graph::Graph &g, const weft_cudnn_attn *a, int i,
                                                    int64_t uid, const char *name) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({a->B, a->H, a->T, a->D})
                        .set_stride({a->s[i][0], a->s[i][1], a->s[i][2], 1}));
}

void out_heads(const std::shared_ptr<fe::graph::Tensor_attributes> &t, const weft_cudnn_attn *a, int i, int64_t uid) {
    t->set_output(true).set_uid(uid).set_dim({a->B, a->H, a->T, a->D});
    t->set_stride({a->s[i][0], a->s[i][1], a->s[i][2], 1});
}

std::shared_ptr<fe::graph::Tensor_attributes> stats_attrs(const weft_cudnn_attn *a) {
    auto t = std::make_shared<fe::graph::Tensor_attributes>();
    t->set_name("stats").set_uid(UID_STATS).set_data_type(fe::DataType_t::FLOAT);
    t->set_dim({a->B, a->H, a->T, 1}).set_stride({a->H * a->T, a->T, 1, 1}); // weft's lse: (B,H,T) contiguous
    return t;
}

// Builds a's graph with cuDNN (slow: tens of milliseconds); the caller holds g_mu.
Plan build(const weft_cudnn_attn *a) {
    Plan p;
    cudaError_t ce = cudaSetDevice(a->device);
    if (ce != cudaSuccess) {
        p.why = std::string("cudaSetDevice: ") + cudaGetErrorString(ce);
        return p;
    }
    cudnnHandle_t h = handle_for(a->device, &p.why);
    if (!h) return p;
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(a->bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto q = heads(*g, a, WEFT_CUDNN_Q, UID_Q, "q"), k = heads(*g, a, WEFT_CUDNN_K, UID_K, "k"),
         v = heads(*g, a, WEFT_CUDNN_V, UID_V, "v");
    if (!a->backward) {
        auto o = fe::graph::SDPA_attributes()
                     .set_name("attention")
                     .set_generate_stats(true)
                     .set_causal_mask(true)
                     .set_attn_scale(a->scale);
        auto [out, stats] = g->sdpa(q, k, v, o);
        out_heads(out, a, WEFT_CUDNN_O, UID_O);
        auto want = stats_attrs(a);
        stats->set_output(true).set_uid(UID_STATS).set_data_type(fe::DataType_t::FLOAT);
        stats->set_dim(want->get_dim()).set_stride(want->get_stride());
    } else {
        auto o = heads(*g, a, WEFT_CUDNN_O, UID_O, "o"), go = heads(*g, a, WEFT_CUDNN_GO, UID_GO, "go");
        auto stats = g->tensor(*stats_attrs(a));
        auto o_attrs = fe::graph::SDPA_backward_attributes()
                           .set_name("attention_backward")
                           .set_causal_mask(true)
                           .set_attn_scale(a->scale)
                           .set_deterministic_algorithm(deterministic());
        auto [gq, gk, gv] = g->sdpa_backward(q, k, v, o, go, stats, o_attrs);
        out_heads(gq, a, WEFT_CUDNN_GQ, UID_GQ);
        out_heads(gk, a, WEFT_CUDNN_GK, UID_GK);
        out_heads(gv, a, WEFT_CUDNN_GV, UID_GV);
    }
    // validate, lower to cuDNN's backend, ask its heuristics, build the chosen plan: the first failing step says why
#define WEFT_CUDNN_TRY(x)                                                                                              \
    do {                                                                                                               \
        fe::error_t r_ = (x);                                                                                          \
        if (!r_.is_good()) {                                                                                           \
            p.why = r_.get_message();                                                                                  \
            return p;                                                                                                  \
        }                                                                                                              \
    } while (0)
    WEFT_CUDNN_TRY(g->validate());
    WEFT_CUDNN_TRY(g->build_operation_graph(h));
    WEFT_CUDNN_TRY(g->create_execution_plans({fe::HeurMode_t::A}));
    WEFT_CUDNN_TRY(g->check_support(h));
    WEFT_CUDNN_TRY(g->build_plans(h));
    WEFT_CUDNN_TRY(g->get_workspace_size(p.workspace));
#undef WEFT_CUDNN_TRY
    p.graph = g;
    return p;
}

// weft_cudnn_attention_plan's body (the caller catches what the frontend or the standard library throws).
int plan(const weft_cudnn_attn *a, void *st, size_t *workspace, std::string *why) {
    // cuDNN up to 9.15 pads a backward whose T is not a multiple of 128 with a mask whose lengths the frontend
    // copies from host memory at every run: not something a CUDA Graph can replay
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (a->backward && a->T % 128 && cudnnGetVersion() <= 91500 &&
        (cudaStreamIsCapturing((cudaStream_t)st, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone)) {
        *why = "a CUDA Graph is capturing, and this cuDNN's backward at this T copies from host memory";
        return 0;
    }
    std::lock_guard<std::mutex> lock(g_mu);
    auto key = key_of(a);
    auto it = g_plans->find(key);
    if (it == g_plans->end() &&
        (cudaStreamIsCapturing((cudaStream_t)st, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone)) {
        // not built while a CUDA Graph captures (a failure then would be remembered for good): weft's kernels
        // run this one; an eager step before the capture builds it
        *why = "a CUDA Graph is capturing and this shape has no plan yet (run one eager step first)";
        return 0;
    }
    if (it == g_plans->end()) {
        int prev = -1;
        cudaGetDevice(&prev);
        Plan p;
        try { // (a failed build is remembered: it would fail again)
            p = build(a);
        } catch (const std::exception &x) {
            p = Plan{};
            p.why = x.what();
        } catch (...) {
            p = Plan{};
            p.why = "unknown exception while building the graph";
        }
        it = g_plans->emplace(key, p).first;
        if (prev >= 0) cudaSetDevice(prev);
    }
    if (!it->second.graph || it->second.failed) {
        *why = it->second.why;
        return 0;
    }
    *workspace = (size_t)it->second.workspace;
    return 1;
}

// weft_cudnn_attention_run's body (as plan's).
int run(const weft_cudnn_attn *a, void *const *ptr, void *workspace, void *st, std::string *err) {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_plans->find(key_of(a));
    auto h = g_handle->find(a->device);
    if (it == g_plans->end() || !it->second.graph || it->second.failed || h == g_handle->end()) {
        *err = "cuDNN attention: no plan for this shape (plan it first)";
        return -1;
    }
    std::unordered_map<int64_t, void *> pack;
    if (!a->backward)
        pack = {{UID_Q, ptr[0]}, {UID_K, ptr[1]}, {UID_V, ptr[2]}, {UID_O, ptr[3]}, {UID_STATS, ptr[4]}};
    else
        pack = {{UID_Q, ptr[0]},     {UID_K, ptr[1]},  {UID_V, ptr[2]},  {UID_O, ptr[3]}, {UID_GO, ptr[4]},
                {UID_STATS, ptr[5]}, {UID_GQ, ptr[6]}, {UID_GK, ptr[7]}, {UID_GV, ptr[8]}};
    int prev = -1; // the handle belongs to a's device
    cudaGetDevice(&prev);
    if (prev != a->device) cudaSetDevice(a->device);
    cudnnStatus_t s = cudnnSetStream(h->second, (cudaStream_t)st);
    fe::error_t e = s == CUDNN_STATUS_SUCCESS ? it->second.graph->execute(h->second, pack, workspace) : fe::error_t{};
    if (prev >= 0 && prev != a->device) cudaSetDevice(prev);
    if (s != CUDNN_STATUS_SUCCESS || !e.is_good()) {
        *err = s != CUDNN_STATUS_SUCCESS ? std::string("cudnnSetStream: ") + cudnnGetErrorString(s)
                                         : "cuDNN attention: " + e.get_message();
        it->second.failed = true; // not tried again: the caller's kernels run this shape from now on
        it->second.why = *err;
        return -1;
    }
    g_runs++;
    return 0;
}

} // namespace

extern "C" int weft_cudnn_attention_enabled(void) {
    const char *e = getenv("WEFT_ATTN_CUDNN");
    return e && !strcmp(e, "1");
}

// The two entry points: nothing thrown crosses into C.
extern "C" int weft_cudnn_attention_plan(const weft_cudnn_attn *a, void *st, size_t *workspace, char *why,
                                         size_t why_len) {
    std::string w;
    int rc = 0;
    try {
        rc = plan(a, st, workspace, &w);
    } catch (const std::exception &x) {
        rc = 0, w = x.what();
    } catch (...) {
        rc = 0, w = "unknown exception while planning";
    }
    if (why && why_len) snprintf(why, why_len, "%s", rc ? "" : w.c_str());
    return rc;
}

extern "C" int weft_cudnn_attention_run(const weft_cudnn_attn *a, void *const *ptr, void *workspace, void *st,
                                        char *err, size_t err_len) {
    std::string e;
    int rc = -1;
    try {
        rc = run(a, ptr, workspace, st, &e);
    } catch (const std::exception &x) {
        rc = -1, e = std::string("cuDNN attention: ") + x.what();
    } catch (...) {
        rc = -1, e = "cuDNN attention: unknown exception while running";
    }
    if (rc) snprintf(err, err_len, "%s", e.c_str());
    return rc;
}

#else // no cuDNN in this build: the caller always runs its own kernels

extern "C" int weft_cudnn_attention_enabled(void) { return 0; }

extern "C" int weft_cudnn_attention_plan(const weft_cudnn_attn *a, void *st, size_t *workspace, char *why,
                                         size_t why_len) {
    (void)a, (void)st, (void)workspace;
    if (why && why_len) snprintf(why, why_len, "weft was built without cuDNN");
    return 0;
}

extern "C" int weft_cudnn_attention_run(const weft_cudnn_attn *a, void *const *ptr, void *workspace, void *st,
                                        char *err, size_t err_len) {
    (void)a, (void)ptr, (void)workspace, (void)st;
    snprintf(err, err_len, "weft was built without cuDNN");
    return -1;
}

#endif
