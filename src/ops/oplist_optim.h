// Ops of the optimiser family: one WEFT_OP(name) line per op (see op.h).
WEFT_OP(sgd_update) WEFT_OP(sgd_momentum_update) WEFT_OP(adam_update)
