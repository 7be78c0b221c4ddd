// Ops of the view family: one WEFT_OP(name) line per op (see op.h).
WEFT_OP(view) WEFT_OP(permute) WEFT_OP(slice) WEFT_OP(slice_backward) WEFT_OP(expand)
