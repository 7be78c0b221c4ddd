// Ops of the nn family: one WEFT_OP(name) line per op (see op.h).
WEFT_OP(softmax) WEFT_OP(log_softmax) WEFT_OP(softmax_backward) WEFT_OP(log_softmax_backward)
WEFT_OP(cross_entropy) WEFT_OP(cross_entropy_backward) WEFT_OP(dropout)
WEFT_OP(causal_attention) WEFT_OP(causal_attention_backward)
WEFT_OP(causal_attention_qkv) WEFT_OP(causal_attention_qkv_backward)
WEFT_OP(lstm_cell) WEFT_OP(lstm_cell_backward) WEFT_OP(lstm_seq) WEFT_OP(lstm_seq_backward)
