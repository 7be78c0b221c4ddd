// Ops of the nn family: one WEFT_OP(name) line per op (see op.h).
