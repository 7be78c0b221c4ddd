// Ops of the linalg family: one WEFT_OP(name) line per op (see op.h).
WEFT_OP(matmul)
