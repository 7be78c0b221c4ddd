// What the tensor-parallel files (tp.c, tp_layers.c, tp_model.c) share.
#ifndef WEFT_TP_IMPL_H
#define WEFT_TP_IMPL_H

#include <weft/parallel.h>

// A vocab-parallel embedding from a whole table weight (num, dim) and, if not
// NULL, learned positions pos (context, dim) added after the reduce (as the
// model files' `position = learned`). weight and pos are only read.
weft_module *weft_tp_vocab_embedding_from(weft_comm *tp, weft_tensor *weight, weft_tensor *pos);

#endif
