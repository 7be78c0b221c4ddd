// Ops of the normalisation family: one WEFT_OP(name) line per op (see op.h).
WEFT_OP(layer_norm) WEFT_OP(layer_norm_backward) WEFT_OP(add_layer_norm) WEFT_OP(add_layer_norm_backward) WEFT_OP(batch_norm) WEFT_OP(batch_norm_backward)
