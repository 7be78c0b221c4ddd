// Ops of the optimiser family: one WEFT_OP(name) line per op (see op.h).
WEFT_OP(sgd_update) WEFT_OP(sgd_momentum_update) WEFT_OP(adagrad_update) WEFT_OP(rmsprop_update)
WEFT_OP(rmsprop_momentum_update) WEFT_OP(rmsprop_centered_update) WEFT_OP(rmsprop_centered_momentum_update)
WEFT_OP(adam_update) WEFT_OP(adam_amsgrad_update) WEFT_OP(update_multi) WEFT_OP(grad_sumsq) WEFT_OP(grad_scale)
