// Ops of the normalisation family: one WEFT_OP(name) line per op (see op.h).
