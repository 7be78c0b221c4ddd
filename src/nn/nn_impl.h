// Helpers shared by the layer files.
#ifndef WEFT_NN_IMPL_H
#define WEFT_NN_IMPL_H

#include <weft/nn.h>

// Adds an f32 parameter of the given shape drawn from U(-bound, bound) (the
// PyTorch default init of linear, conv and LSTM layers).
weft_status weft_nn_add_uniform_param(weft_module *m, const char *name, int ndim, const int64_t *sizes, double bound,
                                      weft_generator *g);

#endif
