// Tensor parallelism (Megatron-LM), part 3: a model file's network built with
// its layers split over a TP group. The generator is drawn exactly as
// weft_model_build draws it (each layer made whole by weft's constructor,
// in file order, then split), so the gathered parameters equal the
// one-process model's of the same seed.
//
// Which linear becomes what: Megatron's pairing. A linear whose next
// non-elementwise layer is a linear is column-parallel with its output left
// split; the activations between stay split (they are elementwise), and the
// second is row-parallel with input_is_parallel: one all-reduce for the pair.
// The last linear of a cross-entropy model is column-parallel with its
// logits left split over the classes (the vocab-parallel cross-entropy
// consumes them). Any other linear is column-parallel with gather_output, or
// whole where T does not divide its outputs.
#include <stdlib.h>

#include <weft/autograd.h>
#include <weft/nn.h>
#include <weft/parallel.h>
#include <weft/train.h>

#include "../core/core_impl.h"
#include "../dist/tp_impl.h"
#include "train_impl.h"

static bool elementwise(weft_cfg_layer_type t) { return t >= WEFT_CFG_RELU && t <= WEFT_CFG_SILU; }

// Whether the next non-elementwise layer after i is a linear.
static bool feeds_linear(const weft_model_cfg *cfg, int i) {
    for (int j = i + 1; j < cfg->n_layers; j++)
        if (!elementwise(cfg->layers[j].type)) return cfg->layers[j].type == WEFT_CFG_LINEAR;
    return false;
}

static weft_module *tp_linear(weft_comm *c, const weft_model_cfg *cfg, int i, bool *parallel, weft_generator *g,
                              bool seq) {
    const weft_layer_cfg *L = &cfg->layers[i];
    int n = weft_comm_size(c);
    if (seq) { // the head: tokens gathered, logits left split over the classes
        if (L->linear.out % n)
            return weft_error_null(WEFT_ERR_ARG, "the tensor-parallel size tp = %d does not divide out = %lld", n,
                                   (long long)L->linear.out);
        return weft_tp_column_make(c, L->linear.in, L->linear.out, L->linear.bias, false, g, true);
    }
    if (*parallel) {
        *parallel = false;
        return weft_tp_row_linear(c, L->linear.in, L->linear.out, L->linear.bias, true, g);
    }
    if (feeds_linear(cfg, i)) {
        if (L->linear.out % n)
            return weft_error_null(WEFT_ERR_ARG, "the tensor-parallel size tp = %d does not divide out = %lld", n,
                                   (long long)L->linear.out);
        *parallel = true;
        return weft_tp_column_linear(c, L->linear.in, L->linear.out, L->linear.bias, false, g);
    }
    bool last = i == cfg->n_layers - 1, ce = cfg->net.loss == WEFT_CFG_CROSS_ENTROPY;
    if (L->linear.out % n) return weft_nn_linear(L->linear.in, L->linear.out, L->linear.bias, g); // whole
    return weft_tp_column_linear(c, L->linear.in, L->linear.out, L->linear.bias, !(last && ce), g);
}

// Token embedding (+ learned positions, drawn after the table as weft_model_build does).
static weft_module *tp_embedding(weft_comm *c, const weft_layer_cfg *L, weft_generator *g, bool seq) {
    int n = weft_comm_size(c);
    if (L->embedding.vocab % n)
        return weft_error_null(WEFT_ERR_ARG, "the tensor-parallel size tp = %d does not divide the vocabulary %lld", n,
                               (long long)L->embedding.vocab);
    // drawn as weft_nn_embedding (table) or weft_model_build's embedding with positions (table, then positions)
    weft_tensor *w = NULL, *p = NULL;
    if (L->embedding.learned_position) {
        w = weft_tensor_randn(WEFT_DIMS(L->embedding.vocab, L->embedding.dim), WEFT_F32, g);
        p = w ? weft_tensor_randn(WEFT_DIMS(L->embedding.context, L->embedding.dim), WEFT_F32, g) : NULL;
    } else {
        w = weft_tensor_empty(WEFT_DIMS(L->embedding.vocab, L->embedding.dim), WEFT_F32);
        if (w && weft_tensor_normal_(w, 0.0, 1.0, g)) weft_tensor_free(w), w = NULL;
    }
    weft_module *m = w && (p || !L->embedding.learned_position) ? weft_tp_vocab_embedding_from(c, w, p, seq) : NULL;
    weft_tensor_free(w);
    weft_tensor_free(p);
    return m;
}

// With sequence parallelism the tokens are split from the embedding to the
// head: layer 0 an embedding, the last a linear, transformer / attention /
// layer norm between.
static weft_status check_seq(const weft_model_cfg *cfg, int i) {
    weft_cfg_layer_type t = cfg->layers[i].type;
    bool ok = i == 0 ? t == WEFT_CFG_EMBEDDING
              : i == cfg->n_layers - 1
                  ? t == WEFT_CFG_LINEAR
                  : t == WEFT_CFG_TRANSFORMER || t == WEFT_CFG_ATTENTION || t == WEFT_CFG_LAYERNORM;
    if (!ok)
        return weft_error(WEFT_ERR_ARG, "sequence parallel needs a token model: an embedding first, a linear last, "
                          "transformer, attention and layernorm layers between");
    return WEFT_OK;
}

static weft_module *tp_layer(weft_comm *c, const weft_model_cfg *cfg, int i, bool *parallel, weft_generator *g,
                             weft_generator *dg, bool seq) {
    const weft_layer_cfg *L = &cfg->layers[i];
    if (seq && check_seq(cfg, i)) return NULL;
    switch (L->type) {
    case WEFT_CFG_LINEAR: return tp_linear(c, cfg, i, parallel, g, seq);
    case WEFT_CFG_EMBEDDING: return tp_embedding(c, L, g, seq);
    case WEFT_CFG_ATTENTION: return weft_tp_attention_make(c, L->attn.dim, L->attn.heads, g, seq);
    case WEFT_CFG_TRANSFORMER: {
        weft_module *s = weft_nn_sequential();
        for (int b = 0; s && b < L->attn.blocks; b++)
            if (weft_nn_sequential_append(s, weft_tp_block_make(c, L->attn.dim, L->attn.heads,
                                                              L->attn.gelu_tanh ? WEFT_ACT_GELU_TANH : WEFT_ACT_GELU, g, seq))) {
                weft_module_free(s);
                return NULL;
            }
        return s;
    }
    case WEFT_CFG_LAYERNORM: {
        weft_module *whole = weft_nn_layer_norm(L->layernorm.dim, L->layernorm.eps);
        weft_module *m = whole ? weft_tp_layer_norm_from(c, whole, L->layernorm.eps, seq) : NULL;
        weft_module_free(whole);
        return m;
    }
    case WEFT_CFG_FLATTEN: return weft_nn_flatten();
    case WEFT_CFG_DROPOUT: return weft_nn_dropout(L->dropout.p, dg); // replicated: the same mask on every rank
    case WEFT_CFG_RELU: return weft_nn_activation(WEFT_ACT_RELU);
    case WEFT_CFG_GELU: return weft_nn_activation(L->gelu.tanh ? WEFT_ACT_GELU_TANH : WEFT_ACT_GELU);
    case WEFT_CFG_TANH: return weft_nn_activation(WEFT_ACT_TANH);
    case WEFT_CFG_SIGMOID: return weft_nn_activation(WEFT_ACT_SIGMOID);
    case WEFT_CFG_SILU: return weft_nn_activation(WEFT_ACT_SILU);
    default: break;
    }
    return weft_error_null(WEFT_ERR_ARG, "this layer has no tensor-parallel form (use tp = 1)");
}

typedef struct {
    weft_comm *c;
    weft_generator *g, *dg;
    bool parallel, seq;
} tp_build;

static weft_module *tp_build_layer(const weft_model_cfg *cfg, int i, void *user) {
    tp_build *b = user;
    return tp_layer(b->c, cfg, i, &b->parallel, b->g, b->dg, b->seq);
}

weft_module *weft_tp_model_build(weft_comm *c, const weft_model_cfg *cfg, weft_generator *g, weft_generator *dg,
                                 const weft_tp_opts *opts) {
    if (!cfg) return weft_error_null(WEFT_ERR_ARG, "tp_model_build: NULL config");
    if (!c) return weft_error_null(WEFT_ERR_ARG, "tp_model_build: no tensor-parallel communicator");
    tp_build b = {c, g, dg, false, opts && opts->sequence_parallel};
    return weft_model_build_with(cfg, tp_build_layer, &b);
}

weft_tensor *weft_tp_model_loss(weft_comm *c, const weft_model_cfg *cfg, weft_tensor *logits, weft_tensor *labels) {
    if (!c || !cfg) return weft_error_null(WEFT_ERR_ARG, "tp_model_loss: no communicator or config");
    if (!logits || !labels) return weft_error_null_input("tp_model_loss");
    int n = weft_comm_size(c);
    int64_t k = weft_tensor_size(logits, -1);
    if (n == 1 || cfg->net.loss != WEFT_CFG_CROSS_ENTROPY || k * n != cfg->net.classes)
        return weft_model_loss(cfg, logits, labels); // whole logits
    weft_tensor *x = weft_reshape(logits, WEFT_DIMS(-1, k)), *y = weft_reshape(labels, WEFT_DIMS(-1));
    weft_tensor *l = weft_tp_vocab_cross_entropy(c, x, y);
    weft_tensor_free(x);
    weft_tensor_free(y);
    return l;
}
