// From a parsed model file to a network, and the loss it names.
#include <stdlib.h>

#include <weft/train.h>

#include "../core/core_impl.h"
#include "train_impl.h"

// ---- token (+ learned position) embedding: (B,T) ids -> (B,T,C) ----
static weft_tensor *embed_forward(weft_module *m, weft_tensor *idx) {
    weft_tensor *tok = weft_embedding(weft_module_get(m, "weight"), idx);
    weft_tensor *pos = weft_module_get(m, "pos");
    if (!tok || !pos) return tok;
    int64_t T = weft_tensor_size(idx, -1);
    if (T > weft_tensor_size(pos, 0)) {
        weft_tensor_free(tok);
        return weft_error_null(WEFT_ERR_SHAPE, "embedding: sequence of %lld tokens is longer than the context %lld",
                               (long long)T, (long long)weft_tensor_size(pos, 0));
    }
    weft_tensor *p = weft_narrow(pos, 0, 0, T); // (T,C), broadcast over the batch
    weft_tensor *y = weft_add(tok, p);
    weft_tensor_free(tok);
    weft_tensor_free(p);
    return y;
}

static weft_module *embedding_with_positions(const weft_layer_cfg *L, weft_generator *g) {
    weft_module *m = weft_module_new("embedding", embed_forward, NULL, NULL);
    if (!m) return NULL;
    weft_tensor *w = weft_tensor_randn(WEFT_DIMS(L->embedding.vocab, L->embedding.dim), WEFT_F32, g);
    weft_tensor *p = weft_tensor_randn(WEFT_DIMS(L->embedding.context, L->embedding.dim), WEFT_F32, g);
    if (weft_module_add_param(m, "weight", w) || weft_module_add_param(m, "pos", p)) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}

// One recurrent layer (lstm, gru, rnn) of `in` inputs.
static weft_module *recurrent(const weft_layer_cfg *L, int64_t in, weft_generator *g) {
    int64_t h = L->rnn.hidden;
    return L->type == WEFT_CFG_LSTM ? weft_nn_lstm(in, h, g)
           : L->type == WEFT_CFG_GRU ? weft_nn_gru(in, h, g)
                                     : weft_nn_rnn(in, h, L->rnn.relu ? WEFT_ACT_RELU : WEFT_ACT_TANH, g);
}

// `layers` of them: one, or a stack in a sequential (PyTorch's num_layers).
static weft_module *recurrent_stack(const weft_layer_cfg *L, weft_generator *g) {
    if (L->rnn.layers <= 1) return recurrent(L, L->rnn.in, g);
    weft_module *s = weft_nn_sequential();
    for (int i = 0; s && i < L->rnn.layers; i++) {
        weft_module *m = recurrent(L, i ? L->rnn.hidden : L->rnn.in, g);
        if (weft_nn_sequential_append(s, m)) {
            weft_module_free(s);
            return NULL;
        }
    }
    return s;
}

static weft_module *build_layer(const weft_layer_cfg *L, weft_generator *g, weft_generator *dg) {
    switch (L->type) {
    case WEFT_CFG_LINEAR: return weft_nn_linear(L->linear.in, L->linear.out, L->linear.bias, g);
    case WEFT_CFG_CONV2D: {
        weft_conv2d_params p = {.stride = {L->conv2d.stride[0], L->conv2d.stride[1]},
                                .padding = {L->conv2d.pad[0], L->conv2d.pad[1]},
                                .dilation = {L->conv2d.dilation[0], L->conv2d.dilation[1]},
                                .groups = L->conv2d.groups};
        return weft_nn_conv2d(L->conv2d.in, L->conv2d.out, L->conv2d.kernel[0], L->conv2d.kernel[1], &p,
                              L->conv2d.bias, g);
    }
    case WEFT_CFG_MAXPOOL:
    case WEFT_CFG_AVGPOOL: {
        weft_pool2d_params p = {.kernel = {L->pool.kernel[0], L->pool.kernel[1]},
                                .stride = {L->pool.stride[0], L->pool.stride[1]},
                                .padding = {L->pool.pad[0], L->pool.pad[1]},
                                .count_include_pad = L->pool.count_include_pad};
        return L->type == WEFT_CFG_MAXPOOL ? weft_nn_max_pool2d(&p) : weft_nn_avg_pool2d(&p);
    }
    case WEFT_CFG_FLATTEN: return weft_nn_flatten();
    case WEFT_CFG_DROPOUT: return weft_nn_dropout(L->dropout.p, dg);
    case WEFT_CFG_BATCHNORM: return weft_nn_batch_norm(L->batchnorm.channels, L->batchnorm.momentum, L->batchnorm.eps);
    case WEFT_CFG_LAYERNORM: return weft_nn_layer_norm(L->layernorm.dim, L->layernorm.eps);
    case WEFT_CFG_EMBEDDING:
        if (L->embedding.learned_position) return embedding_with_positions(L, g);
        return weft_nn_embedding(L->embedding.vocab, L->embedding.dim, g);
    case WEFT_CFG_LSTM:
    case WEFT_CFG_GRU:
    case WEFT_CFG_RNN: return recurrent_stack(L, g);
    case WEFT_CFG_ATTENTION: return weft_nn_causal_self_attention(L->attn.dim, L->attn.heads, g);
    case WEFT_CFG_TRANSFORMER:
        return weft_nn_transformer_act(L->attn.dim, L->attn.heads, L->attn.blocks,
                                       L->attn.gelu_tanh ? WEFT_ACT_GELU_TANH : WEFT_ACT_GELU, g);
    case WEFT_CFG_RELU: return weft_nn_activation(WEFT_ACT_RELU);
    case WEFT_CFG_GELU: return weft_nn_activation(L->gelu.tanh ? WEFT_ACT_GELU_TANH : WEFT_ACT_GELU);
    case WEFT_CFG_TANH: return weft_nn_activation(WEFT_ACT_TANH);
    case WEFT_CFG_SIGMOID: return weft_nn_activation(WEFT_ACT_SIGMOID);
    case WEFT_CFG_SILU: return weft_nn_activation(WEFT_ACT_SILU);
    default: break;
    }
    return weft_error_null(WEFT_ERR_ARG, "model: layer type %d is not buildable", (int)L->type);
}

weft_module *weft_model_build_with(const weft_model_cfg *cfg, weft_layer_builder layer, void *user) {
    weft_module *net = weft_nn_sequential();
    for (int i = 0; net && i < cfg->n_layers; i++) {
        const weft_layer_cfg *L = &cfg->layers[i];
        weft_module *m = layer(cfg, i, user);
        if (!m) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s:%d: [%s]: %s", cfg->path, L->line, weft_cfg_layer_name(L->type),
                     weft_last_error());
            weft_module_free(net);
            return weft_error_null(weft_last_status(), "%s", msg);
        }
        if (weft_nn_sequential_append(net, m)) {
            weft_module_free(net);
            return NULL;
        }
    }
    return net;
}

typedef struct {
    weft_generator *g, *dg;
} gens;

static weft_module *plain_layer(const weft_model_cfg *cfg, int i, void *user) {
    const gens *G = user;
    return build_layer(&cfg->layers[i], G->g, G->dg);
}

weft_module *weft_model_build(const weft_model_cfg *cfg, weft_generator *g, weft_generator *dg) {
    if (!cfg) return weft_error_null(WEFT_ERR_ARG, "model_build: NULL config");
    gens G = {g, dg};
    return weft_model_build_with(cfg, plain_layer, &G);
}

// multi_margin_loss (p = 1, margin = 1): mean over n of sum_{j != y} max(0, 1 - x_y + x_j) / C.
// The j = y term of the full sum is max(0, 1) = 1 for every sample, so it is
// summed with the rest and subtracted as a constant 1/C.
static weft_tensor *hinge(weft_tensor *x, weft_tensor *y) { // x (N,C), y (N)
    int64_t C = weft_tensor_size(x, 1);
    weft_tensor *y1 = weft_unsqueeze(y, 1), *xy = weft_gather(x, 1, y1); // (N,1)
    weft_tensor *d = weft_sub(x, xy), *m = weft_add_scalar(d, 1.0), *r = weft_relu(m);
    weft_tensor *mean = weft_mean(r, 0, NULL, false), *l = weft_mul_scalar(mean, (double)C);
    weft_tensor *loss = weft_add_scalar(l, -1.0);
    weft_tensor *t[] = {y1, xy, d, m, r, mean, l};
    for (int i = 0; i < 7; i++) weft_tensor_free(t[i]);
    // mean over N*C elements times C = sum / N; minus 1 = the j = y terms; then / C
    weft_tensor *out = loss ? weft_mul_scalar(loss, 1.0 / (double)C) : NULL;
    weft_tensor_free(loss);
    return out;
}

weft_tensor *weft_model_loss(const weft_model_cfg *cfg, weft_tensor *logits, weft_tensor *labels) {
    if (!logits || !labels) return weft_error_null_input("loss");
    weft_tensor *x = weft_tensor_ref(logits), *y = weft_tensor_ref(labels);
    if (weft_tensor_ndim(logits) == 3) { // (B,T,V) -> (B*T,V)
        weft_tensor *x2 = weft_reshape(logits, WEFT_DIMS(-1, weft_tensor_size(logits, 2)));
        weft_tensor *y2 = weft_reshape(labels, WEFT_DIMS(-1));
        weft_tensor_free(x);
        weft_tensor_free(y);
        x = x2;
        y = y2;
    }
    weft_tensor *l = cfg->net.loss == WEFT_CFG_HINGE ? hinge(x, y) : weft_cross_entropy(x, y);
    weft_tensor_free(x);
    weft_tensor_free(y);
    return l;
}
