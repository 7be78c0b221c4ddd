// Fused nodes (WEFT_NODE_FUSED): a small program of elementwise ops (and at
// most one leading matmul or single-output linear, an "epilogue" group) run
// as one pass over memory.
//
// The program is a list of instructions in dependency order. Operands refer
// either to the fused node's inputs (WEFT_FUSED_IN(k)) or to earlier
// instructions (WEFT_FUSED_INSTR(j)). Every elementwise instruction computes
// a value of the node's shape ("group shape") and dtype; inputs may broadcast
// to it. Some instructions are exported: they are the node's outputs (values
// still needed outside the group); the others live only in per-thread tiles.
//
// Execution (weft_fused_exec): a leading matmul runs whole into an output
// buffer through the dispatcher (BLAS or cuBLAS is the fast path for it);
// the elementwise rest becomes a program of the op table's
// fused_elementwise op (src/ops/fused.h), whose kernel for the outputs'
// device runs it: on the CPU in tiles, each instruction calling the same
// inner loop as the unfused op (bit-identical results); on CUDA one
// interpreting kernel (src/ops/cuda/fused.c).
#ifndef WEFT_GRAPH_FUSED_H
#define WEFT_GRAPH_FUSED_H

#include "graph_impl.h"

#define WEFT_FUSED_MAX_INSTR 32
#define WEFT_FUSED_MAX_IN 16
#define WEFT_FUSED_MAX_ARGS 3 // a linear head: x, weight, bias; elementwise instructions take 1 or 2
// Operand encoding: >= 0 an input of the node, < 0 an earlier instruction.
#define WEFT_FUSED_IN(k) (k)
#define WEFT_FUSED_INSTR(j) (-1 - (j))

typedef struct weft_fused_instr {
    const weft_op_def *op;
    weft_attrs attrs;
    int n_args;
    int32_t args[WEFT_FUSED_MAX_ARGS]; // operand encoding above
    int32_t export_idx;                // output index of the node, -1: internal
} weft_fused_instr;

typedef struct weft_fused_prog {
    int n_instr;
    weft_fused_instr instr[WEFT_FUSED_MAX_INSTR];
    bool matmul_head; // instr[0] is a matmul or linear (its args are node inputs), the rest its epilogue
} weft_fused_prog;

// Can op head a fused group: matmul, or linear (one output, its bias already
// in its own epilogue; linear_gelu keeps its pre-activation for the backward).
bool weft_fused_head_op(const weft_op_def *op);
// Is op a member of the elementwise family the tile loop can run (one loop
// per dtype, output dtype = input dtype)?
bool weft_fused_op_ok(const weft_op_def *op, weft_dtype dt);
weft_fused_prog *weft_fused_prog_copy(const weft_fused_prog *p);
void weft_fused_prog_free(weft_fused_prog *p);
// "matmul+add+gelu" into buf.
const char *weft_fused_prog_str(const weft_fused_prog *p, char *buf, size_t n);
// Run node n (kind FUSED) on in[0..n_in) into out[0..n_out), preallocated
// contiguous tensors of the node's output shapes.
weft_status weft_fused_exec(const weft_gnode *n, const weft_gvalue *out_meta, weft_tensor *const *in,
                            weft_tensor *const *out);

#endif
