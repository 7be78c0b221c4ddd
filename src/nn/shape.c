// Flatten layer: (N, ...) -> (N, prod(...)), a view when the input allows it.
#include <weft/nn.h>

#include "../core/core_impl.h"

static weft_tensor *flatten_forward(weft_module *m, weft_tensor *x) {
    (void)m;
    if (weft_tensor_ndim(x) < 1) return weft_error_null(WEFT_ERR_SHAPE, "flatten: input needs a batch dim (got 0-d)");
    if (weft_tensor_ndim(x) == 1) return weft_reshape(x, WEFT_DIMS(weft_tensor_size(x, 0), 1)); // (N) -> (N,1)
    return weft_flatten(x, 1, -1);
}

weft_module *weft_nn_flatten(void) { return weft_module_new("flatten", flatten_forward, NULL, NULL); }
