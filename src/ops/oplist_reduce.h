// Ops of the reduction family: one WEFT_OP(name) line per op (see op.h).
WEFT_OP(sum) WEFT_OP(mean) WEFT_OP(max) WEFT_OP(min) WEFT_OP(var) WEFT_OP(logsumexp) WEFT_OP(argmax)
