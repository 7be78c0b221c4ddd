// Ops of the index family: one WEFT_OP(name) line per op (see op.h).
WEFT_OP(embedding) WEFT_OP(embedding_backward) WEFT_OP(index_select) WEFT_OP(index_select_backward)
WEFT_OP(gather) WEFT_OP(scatter_add) WEFT_OP(concat) WEFT_OP(topk)
