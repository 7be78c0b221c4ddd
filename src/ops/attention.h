// Shared between the attention op entries (def_attention.c) and their kernels
// (cpu/attention.c, cuda/attention.c).
#ifndef WEFT_OPS_ATTENTION_H
#define WEFT_OPS_ATTENTION_H

#include "op.h"

// The packed ops (causal_attention_qkv and its backward) run on any device as
// views of their packed operands handed to that device's kernel of
// causal_attention (attention) or causal_attention_backward (backward): q, k, v
// are the three C-wide blocks of qkv's last dim, the output and its gradient
// (B,T,C) are read with the heads last, and the backward writes gq, gk, gv
// straight into the three blocks of its (B,T,3C) output.
weft_status weft_attention_qkv_run(const weft_op_args *a, weft_kernel_fn attention);
weft_status weft_attention_qkv_backward_run(const weft_op_args *a, weft_kernel_fn backward);

// They pass the op's outputs (or views of them) to those kernels: o and lse, or gq, gk, gv, with the heads
// last and at any strides (unit stride in D). Every device's causal_attention kernels therefore write their
// outputs through their strides (the CPU's directly, CUDA's f32 kernels through a scratch copy).
weft_status weft_cpu_causal_attention(const weft_op_args *a);
weft_status weft_cpu_causal_attention_backward(const weft_op_args *a);
weft_status weft_cpu_causal_attention_qkv(const weft_op_args *a);
weft_status weft_cpu_causal_attention_qkv_backward(const weft_op_args *a);

#endif
