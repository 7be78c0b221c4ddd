// Dropout layer: identity in eval mode; in training zeroes each element with
// probability p and scales the rest by 1/(1-p). The mask comes from the
// generator given at construction (borrowed: it must outlive the module;
// NULL means the default generator), so a seeded run is reproducible.
#include <stdlib.h>

#include <weft/nn.h>

#include "../core/core_impl.h"

typedef struct dropout_cfg {
    double p;
    weft_generator *g;
} dropout_cfg;

static weft_tensor *dropout_forward(weft_module *m, weft_tensor *x) {
    const dropout_cfg *c = weft_module_impl(m);
    return weft_dropout(x, c->p, weft_module_is_training(m), c->g);
}

weft_module *weft_nn_dropout(double p, weft_generator *g) {
    // p = 1 would scale by 1/0; the op rejects it too.
    if (!(p >= 0 && p < 1)) return weft_error_null(WEFT_ERR_ARG, "dropout: p must be in [0, 1), got %g", p);
    dropout_cfg *c = malloc(sizeof *c);
    if (!c) return weft_error_null(WEFT_ERR_OOM, "dropout: out of memory");
    *c = (dropout_cfg){p, g};
    return weft_module_new("dropout", dropout_forward, c, free);
}
