// Launcher of fused_kernels.cu (plain C): graph mode's fused elementwise
// groups on CUDA, one thread per element interpreting the group's program.
#ifndef WEFT_CU_FUSED_KERNELS_H
#define WEFT_CU_FUSED_KERNELS_H

#include "cu_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_CU_FUSED_MAX_INSTR 32
#define WEFT_CU_FUSED_MAX_IN 17
#define WEFT_CU_FUSED_MAX_OUT 4

// How an input is read at group element i (after the glue coalesced dims).
enum { WEFT_CU_IN_UNUSED, WEFT_CU_IN_CONTIG, WEFT_CU_IN_SCALAR, WEFT_CU_IN_STRIDED };

typedef struct weft_cu_fused_instr {
    int8_t op;     // WEFT_CU_EW_* (elementwise_kernels.h), never a comparison
    int8_t n_args; // 1 or 2
    int8_t arg[2]; // >= 0: input k; < 0: instruction -1 - j (earlier)
    int8_t out;    // output written, -1: internal
    int8_t pad[3];
    double scalar; // pow/add/mul_scalar's scalar
} weft_cu_fused_instr;

// Everything one launch needs, passed by value (about 2 KB of kernel
// parameters: baked into a CUDA graph node when captured). Element i of the
// group (row-major over sizes) is element i of every output (contiguous).
typedef struct weft_cu_fused {
    int32_t n_instr, n_in, n_out, ndim;
    int32_t dtype; // WEFT_CU_F32, F64, I32 or I64: every operand's
    int32_t pad;
    int64_t numel;
    int64_t sizes[WEFT_CU_MAX_DIMS]; // the group shape, coalesced
    weft_cu_fused_instr instr[WEFT_CU_FUSED_MAX_INSTR];
    const char *in[WEFT_CU_FUSED_MAX_IN];
    int32_t in_kind[WEFT_CU_FUSED_MAX_IN];
    int64_t in_strides[WEFT_CU_FUSED_MAX_IN][WEFT_CU_MAX_DIMS]; // elements, 0 on broadcast dims
    char *out[WEFT_CU_FUSED_MAX_OUT];
} weft_cu_fused;

// Runs the program over f->numel elements on stream s. cudaErrorInvalidValue
// for a dtype or variant the family has no formula for.
cudaError_t weft_cu_fused_run(const weft_cu_fused *f, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
