// The fused elementwise op: a small program of elementwise instructions run
// in one pass over memory, the kernel behind graph mode's FUSED nodes
// (src/graph/fused.c builds the program from the node; passes/fuse.c makes
// the nodes). It sits in the op table like any op, so the executor finds
// its kernel by device through the same table (CPU: cpu/fused.c, CUDA:
// cuda/fused.c), and a device that takes over the CPU kernels (the tests'
// mock accelerator) takes this one too.
//
// Operands: the op's inputs in[0..n_in) (any strides; each broadcasts to the
// group shape) and the results of earlier instructions. Every instruction
// computes a value of the group shape and dtype (out[0]'s); some are
// exported to the op's outputs out[0..n_out), contiguous tensors of the
// group shape. An input may be the very memory of an output, element for
// element (same shape, contiguous: the graph's matmul epilogue writes the
// product into output 0 and then the epilogue over it): kernels read element
// i of every input before they write element i of any output.
//
// The program travels in attrs: i[0] holds its address, i[1] the tag
// WEFT_EW_PROG_TAG (checked by the kernels). infer refuses every call, so
// weft_op_apply and the graph builder cannot reach the kernels: only the
// graph executor calls them, directly through the op table.
#ifndef WEFT_OPS_FUSED_H
#define WEFT_OPS_FUSED_H

#include "op.h"

#define WEFT_EW_PROG_MAX_INSTR 32
#define WEFT_EW_PROG_MAX_IN 17 // a fused node's 16 inputs + the product of a matmul head
#define WEFT_EW_PROG_MAX_OUT WEFT_MAX_OP_OUT
#define WEFT_EW_PROG_TAG 0x46555345 // "FUSE"

typedef struct weft_ew_instr {
    int32_t variant; // WEFT_EW_* (src/ops/elementwise.h); not a comparison
    int32_t n_args;  // 1 (unary, scalar ops) or 2 (binary)
    int32_t args[2]; // >= 0: input k; < 0: the result of instruction -1 - j (j earlier)
    int32_t out;     // the output it is written to, -1: internal
    double scalar;   // attrs f[0] of its op (pow_scalar, add_scalar, mul_scalar)
} weft_ew_instr;

typedef struct weft_ew_prog {
    int32_t n_instr;
    weft_ew_instr instr[WEFT_EW_PROG_MAX_INSTR];
} weft_ew_prog;

extern weft_op_def weft_op_fused_elementwise;

// The attrs that carry prog to the kernels.
static inline weft_attrs weft_ew_prog_attrs(const weft_ew_prog *prog) {
    weft_attrs a = {{0}};
    a.i[0] = (int64_t)(intptr_t)prog;
    a.i[1] = WEFT_EW_PROG_TAG;
    return a;
}

// For the kernels: the program of a call and its checks (operands in range,
// outputs contiguous of out[0]'s shape and dtype, inputs of that dtype and
// broadcasting to it, every output written by some instruction). NULL + an
// error naming fused_elementwise otherwise.
const weft_ew_prog *weft_ew_prog_of(const weft_op_args *a);

// CPU kernel (cpu/fused.c).
weft_status weft_cpu_fused_elementwise(const weft_op_args *a);

#endif
