// The ONNX importer's internals, shared by onnx_import.c (the model, the node loop and most ops' handlers),
// onnx_import_nn.c (the recurrent layers and the losses) and onnx_import_conv.c (convolutions, pools, Pad).
// Handlers build weft graph ops through oi_op and the helpers below; the op that produces an ONNX value is
// named after it.
#ifndef WEFT_GRAPH_ONNX_IMPORT_H
#define WEFT_GRAPH_ONNX_IMPORT_H

#include <string.h>

#include "onnx.h"

#ifdef WEFT_HAVE_ONNX

typedef struct entry {
    const char *name;   // the ONNX value name (the file's string)
    weft_value v;       // its weft value
    weft_tensor *konst; // its value when known at import (CPU, contiguous), else NULL
} entry;

typedef struct imp {
    weft_graph *g;
    const char *path;
    int64_t opset; // of the default domain
    int64_t steps; // recurrent steps unrolled so far (oi_rnn)
    entry *e;
    int n, cap;
    int32_t *slots; // open addressing over e (index, -1 empty)
    size_t n_slots;
    const char **outs; // every node output's name in the file, sorted (temporaries avoid them)
    size_t n_outs;
} imp;

// Inputs of one node: handlers may read c->in[k] / c->kin[k] for any k < MIN_IN (absent ones are NONE / -1);
// Concat and the variadic ops take up to MAX_IN (an unrolled recurrence concatenates one value per step).
#define MIN_IN 16
#define MAX_IN 65536

typedef struct nctx {
    imp *m;
    const Onnx__NodeProto *n;
    int n_in;                     // inputs present (trailing empty names dropped)
    weft_value *in;               // their values (WEFT_VALUE_NONE for an empty name in the middle), at least
    int *kin;                     // MIN_IN of each; their entries (-1 for an empty name)
    weft_value out[WEFT_GRAPH_MAX_OUT]; // what the handler binds to the node's outputs (If, Loop, Scan: up to 16)
    weft_tensor *konst0;          // output 0's value when the handler knows it (Constant, Shape; a reference)
    int tmp;                      // temporaries named "<first output>#<k>"
    const char *bad_attr;         // the first attribute read whose type in the file is not the op's
    char tname[512];
} nctx;

static inline const char *node_out(const nctx *c, int k) {
    return k < (int)c->n->n_output && c->n->output[k] && c->n->output[k][0] ? c->n->output[k] : NULL;
}
static inline bool wants_out(const nctx *c, int k) { return node_out(c, k) != NULL; }

static inline int ndim_of(const nctx *c, weft_value v) { return weft_graph_value_ndim(c->m->g, v); }
// Points into the graph's values: a later op may move them (sizes_copy where sizes outlive one).
static inline const int64_t *sizes_of(const nctx *c, weft_value v) { return weft_graph_value_sizes(c->m->g, v); }
static inline void sizes_copy(const nctx *c, weft_value v, int64_t *out) {
    int nd = ndim_of(c, v);
    if (nd > 0) memcpy(out, sizes_of(c, v), sizeof(int64_t) * (size_t)nd);
}
static inline weft_dtype dtype_of(const nctx *c, weft_value v) { return weft_graph_value_dtype(c->m->g, v); }

#define OK(v) ((v).id >= 0)
typedef weft_status (*handler)(nctx *c, const char *arg);
#define FAIL(...) return weft_error(WEFT_ERR_UNSUPPORTED, __VA_ARGS__)
#define OUT0(expr)                                                                                                    \
    do {                                                                                                              \
        c->out[0] = (expr);                                                                                           \
        return OK(c->out[0]) ? WEFT_OK : weft_last_status();                                                          \
    } while (0)


// A dim index of an nd-dim value (negative from the end); -1 if out of range.
static inline int oi_axis(int64_t a, int nd) {
    if (a < 0) a += nd;
    return a < 0 || a >= nd ? -1 : (int)a;
}

// An op of the table; name NULL: a temporary. Errors already name the op; the caller adds the node.
weft_value oi_op(nctx *c, const char *name, const char *opn, int n_in, const weft_value *in, const int64_t *ia,
                 int nia, const double *fa, int nfa);
// A CONSTANT holding t (taken), also known at import; a 0-d one of dtype dt holding x (oi_scalar_as: f16 and
// bf16 too, through a cast).
weft_value oi_konst(nctx *c, const char *name, weft_tensor *t, weft_tensor **keep);
weft_value oi_scalar(nctx *c, weft_dtype dt, double x);
weft_value oi_scalar_as(nctx *c, weft_dtype dt, double x);
// v viewed as sizes (a copy first where v is a permuted, sliced or expanded view); NONE in, NONE out.
weft_value oi_reshape(nctx *c, const char *name, weft_value v, int nd, const int64_t *sizes);
// A constant the loader makes of these sizes is allowed (at most 2^26 elements).
weft_status oi_check_made(int nd, const int64_t *s);
// An int64 index of len the loader computes (held to oi_check_made); NULL with an error.
weft_tensor *oi_index_new(int64_t len);
// The rows of v along dim that idx (taken: a constant) picks: index_select.
weft_value oi_select(nctx *c, const char *name, weft_value v, int64_t dim, weft_tensor *idx);
// Attributes: oi_attr by name; the typed readers note a type other than the op's in c->bad_attr.
const Onnx__AttributeProto *oi_attr(const nctx *c, const char *name);
const Onnx__AttributeProto *oi_attr_t(nctx *c, const char *name, Onnx__AttributeProto__AttributeType t);
int64_t oi_attr_i(nctx *c, const char *name, int64_t def);
double oi_attr_f(nctx *c, const char *name, double def);
// The ints of an attribute (n = -1 when absent).
const int64_t *oi_attr_ints(nctx *c, const char *name, int *n);
// The value of input k, which must be known at import (a constant, or computed from constants), else an error.
weft_status oi_konst_in(nctx *c, int k, weft_tensor **out);
// The integers of input k, which must be known at import (int32 or int64), at most cap of them.
weft_status oi_konst_ints(nctx *c, int k, int64_t *v, int cap, int *n);
bool oi_attr_s_is(nctx *c, const char *name, const char *def, const char *want);

// onnx_import_nn.c: RNN / GRU / LSTM (arg "RNN", "GRU", "LSTM"), NegativeLogLikelihoodLoss and
// SoftmaxCrossEntropyLoss (arg "nll", "sce").
weft_status oi_rnn(nctx *c, const char *arg);
weft_status oi_nll(nctx *c, const char *arg);
// onnx_import_conv.c: Conv, ConvTranspose, MaxPool / AveragePool (arg the weft op), GlobalAveragePool /
// GlobalMaxPool (arg the reduction), Pad.
weft_status oi_conv(nctx *c, const char *arg);
weft_status oi_conv_t(nctx *c, const char *arg);
weft_status oi_pool(nctx *c, const char *opn);
weft_status oi_global_pool(nctx *c, const char *opn);
weft_status oi_max_unpool(nctx *c, const char *arg);
weft_status oi_pad(nctx *c, const char *arg);

// The import of a model's graph, or of a subgraph (an If's branch) into its own imp with the outer values it
// reads bound first; clearing frees what an imp holds (not its graph).
weft_status oi_import_graph(imp *m, const Onnx__GraphProto *gp, int n_shapes, const weft_onnx_shape *shapes);
int oi_find(const imp *m, const char *name);
// A fresh name for an intermediate node of this ONNX node ("<first output>#k").
const char *oi_tmp_name(nctx *c);
weft_status oi_bind(imp *m, const char *name, weft_value v, weft_tensor *konst);
void oi_imp_clear(imp *m);
// onnx_import_flow.c: If and Loop (without scan outputs), as cond and while nodes whose branches and body are
// weft subgraphs.
weft_status oi_if(nctx *c, const char *arg);
weft_status oi_loop(nctx *c, const char *arg);
weft_status oi_scan(nctx *c, const char *arg);
// Gather's reading of indices known only at run: where(idx < 0, idx + n, idx).
weft_value oi_wrap_negative(nctx *c, weft_value idx, int64_t n);
// onnx_import_math.c: one-input activations and functions (arg the op's name in lower case: "elu", "tan",
// "isinf", ...), PRelu, CastLike, Hardmax, OneHot, CumSum, EyeLike, the windows (arg "hann", "hamming",
// "blackman"), MeanVarianceNormalization, LRN, InstanceNormalization.
weft_status oi_act(nctx *c, const char *arg);
weft_status oi_prelu(nctx *c, const char *arg);
weft_status oi_cast_like(nctx *c, const char *arg);
weft_status oi_hardmax(nctx *c, const char *arg);
weft_status oi_one_hot(nctx *c, const char *arg);
weft_status oi_cumsum(nctx *c, const char *arg);
weft_status oi_quant(nctx *c, const char *arg);
weft_status oi_reverse_sequence(nctx *c, const char *arg);
weft_status oi_compress(nctx *c, const char *arg);
weft_status oi_batch_norm_train(nctx *c, const char *arg);
weft_status oi_dft(nctx *c, const char *arg);
weft_status oi_stft(nctx *c, const char *arg);
weft_status oi_dyn_quant(nctx *c, const char *arg);
weft_value oi_prod(nctx *c, const char *name, weft_value x, int64_t mask, int out_nd, const int64_t *out);
weft_status oi_eye_like(nctx *c, const char *arg);
weft_status oi_window(nctx *c, const char *arg);
weft_status oi_mvn(nctx *c, const char *arg);
weft_status oi_lrn(nctx *c, const char *arg);
weft_status oi_instance_norm(nctx *c, const char *arg);
// onnx_import_shape.c: Tile, DepthToSpace / SpaceToDepth (arg "d2s", "s2d"), Einsum, GatherND,
// ScatterElements and Scatter, ScatterND, TopK, GridSample, Resize and Upsample (arg "resize", "upsample").
weft_status oi_tile(nctx *c, const char *arg);
weft_status oi_depth_space(nctx *c, const char *arg);
weft_status oi_einsum(nctx *c, const char *arg);
weft_status oi_gather_nd(nctx *c, const char *arg);
weft_status oi_scatter_elements(nctx *c, const char *arg);
weft_status oi_scatter_nd(nctx *c, const char *arg);
weft_status oi_resize(nctx *c, const char *arg);
weft_status oi_topk(nctx *c, const char *arg);
weft_status oi_grid_sample(nctx *c, const char *arg);

#endif
#endif
