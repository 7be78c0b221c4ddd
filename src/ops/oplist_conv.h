// Ops of the conv family: one WEFT_OP(name) line per op (see op.h).
WEFT_OP(conv2d) WEFT_OP(conv2d_backward_input) WEFT_OP(conv2d_backward_weight) WEFT_OP(conv2d_backward_bias)
WEFT_OP(max_pool2d) WEFT_OP(max_pool2d_backward) WEFT_OP(avg_pool2d) WEFT_OP(avg_pool2d_backward)
