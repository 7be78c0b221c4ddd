// Ops of the index family: one WEFT_OP(name) line per op (see op.h).
