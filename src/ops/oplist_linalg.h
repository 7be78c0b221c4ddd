// Ops of the linalg family: one WEFT_OP(name) line per op (see op.h).
WEFT_OP(matmul) WEFT_OP(linear) WEFT_OP(linear_gelu) WEFT_OP(gelu_linear) WEFT_OP(matmul_dgelu)
