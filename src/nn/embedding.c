// Embedding layer: indices (...) int32/int64 -> rows of weight (num,dim), (..., dim).
#include <weft/nn.h>

#include "../core/core_impl.h"
#include "nn_impl.h"

// The impl of every module weft_nn_embedding makes: how weft_nn_embedding_table knows one.
static const char plain_embedding = 0;

static weft_tensor *embedding_forward(weft_module *m, weft_tensor *idx) {
    return weft_embedding(weft_module_get(m, "weight"), idx);
}

weft_module *weft_nn_embedding(int64_t num, int64_t dim, weft_generator *g) {
    if (num <= 0 || dim <= 0)
        return weft_error_null(WEFT_ERR_ARG, "embedding: sizes must be positive (num %lld, dim %lld)",
                               (long long)num, (long long)dim);
    weft_module *m = weft_module_new("embedding", embedding_forward, (void *)&plain_embedding, NULL);
    if (!m) return NULL;
    weft_tensor *w = weft_tensor_empty(WEFT_DIMS(num, dim), WEFT_F32);
    if (w && weft_tensor_normal_(w, 0.0, 1.0, g)) weft_tensor_free(w), w = NULL; // PyTorch: N(0,1)
    if (weft_module_add_param(m, "weight", w)) {
        weft_module_free(m);
        return NULL;
    }
    return m;
}

weft_tensor *weft_nn_embedding_table(const weft_module *m) {
    return weft_module_impl(m) == &plain_embedding ? weft_module_get(m, "weight") : NULL;
}
