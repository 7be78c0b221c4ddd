// What the tensor-parallel files (tp.c, tp_layers.c, tp_model.c) share.
#ifndef WEFT_TP_IMPL_H
#define WEFT_TP_IMPL_H

#include <weft/parallel.h>

// The layers with a sequence-parallel switch (seq): activations outside the
// split layers arrive and leave split along the tokens (dim -2), f and g
// replaced by seq_gather and seq_reduce_scatter, replicated parameters used
// through f (their gradients summed over the group).
//
// A vocab-parallel embedding from a whole table weight (num, dim) and, if not
// NULL, learned positions pos (context, dim) added after the reduce (as the
// model files' `position = learned`). weight and pos are only read.
weft_module *weft_tp_vocab_embedding_from(weft_comm *tp, weft_tensor *weight, weft_tensor *pos, bool seq);
weft_module *weft_tp_attention_make(weft_comm *tp, int64_t d_model, int64_t n_heads, weft_generator *g, bool seq);
weft_module *weft_tp_block_make(weft_comm *tp, int64_t d_model, int64_t n_heads, weft_activation act,
                                weft_generator *g, bool seq);
weft_module *weft_tp_column_make(weft_comm *tp, int64_t in, int64_t out, bool bias, bool gather_output,
                                 weft_generator *g, bool seq);
// whole: a weft_nn_layer_norm; its copy (seq: one whose parameters go through f).
weft_module *weft_tp_layer_norm_from(weft_comm *tp, const weft_module *whole, double eps, bool seq);

// The sequence-parallel column layer's product: y = seq_gather(x, -2) W^T + b
// (b may be NULL), saving only this rank's tokens of x (gathered again in
// the backward). x (.., T/tp, in), w (out_l, in) -> (.., T, out_l).
weft_tensor *weft_tp_seq_column_product(weft_comm *tp, weft_tensor *x, weft_tensor *w, weft_tensor *b);

#endif
