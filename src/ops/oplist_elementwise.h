// Ops of the elementwise family: one WEFT_OP(name) line per op (see op.h).
WEFT_OP(neg) WEFT_OP(abs) WEFT_OP(exp) WEFT_OP(log) WEFT_OP(sqrt) WEFT_OP(rsqrt) WEFT_OP(sin) WEFT_OP(cos)
WEFT_OP(tanh) WEFT_OP(sigmoid) WEFT_OP(relu) WEFT_OP(gelu) WEFT_OP(silu) WEFT_OP(pow_scalar) WEFT_OP(add_scalar)
WEFT_OP(mul_scalar) WEFT_OP(add) WEFT_OP(sub) WEFT_OP(mul) WEFT_OP(div) WEFT_OP(pow) WEFT_OP(maximum)
WEFT_OP(minimum) WEFT_OP(eq) WEFT_OP(ne) WEFT_OP(lt) WEFT_OP(le) WEFT_OP(gt) WEFT_OP(ge) WEFT_OP(sign)
WEFT_OP(gelu_grad) WEFT_OP(relu_backward) WEFT_OP(gelu_backward) WEFT_OP(gelu_tanh) WEFT_OP(gelu_tanh_backward)
WEFT_OP(erf) WEFT_OP(floor) WEFT_OP(ceil) WEFT_OP(round) WEFT_OP(trunc) WEFT_OP(fmod) WEFT_OP(remainder)
WEFT_OP(asin) WEFT_OP(acos) WEFT_OP(atan) WEFT_OP(where) WEFT_OP(cast) WEFT_OP(cast_multi) WEFT_OP(copy) WEFT_OP(fused_elementwise)
