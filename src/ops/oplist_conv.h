// Ops of the conv family: one WEFT_OP(name) line per op (see op.h).
