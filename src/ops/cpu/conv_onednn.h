// conv2d on the CPU through oneDNN where it measures faster than im2col + GEMM
// (conv_onednn.c). conv.c's kernels call weft_cpu_conv_run with their im2col
// implementation; it picks the backend for the op's shape and falls back to
// im2col whenever oneDNN is absent, forced off, not applicable (f64, strided
// operands, inside an OpenMP parallel region) or fails. Also bf16: oneDNN's
// bf16 convolution, or im2col on widened operands.
#ifndef WEFT_OPS_CPU_CONV_ONEDNN_H
#define WEFT_OPS_CPU_CONV_ONEDNN_H

#include <stdbool.h>
#include <stdint.h>

#include "../op.h"

typedef enum weft_conv_backend {
    WEFT_CONV_AUTO = 0, // measured per shape (the default)
    WEFT_CONV_IM2COL,
    WEFT_CONV_ONEDNN,
} weft_conv_backend;

// Which of the three conv2d kernels an op args block belongs to:
//   FWD          in (x, w[, b]) -> y      (NCHW or NHWC, attrs i[7])
//   BWD_DATA     in (gy, w)     -> dx     (NCHW)
//   BWD_WEIGHT   in (gy, x)     -> dw     (NCHW)
typedef enum weft_conv_dir { WEFT_CONV_FWD = 0, WEFT_CONV_BWD_DATA, WEFT_CONV_BWD_WEIGHT } weft_conv_dir;

typedef weft_status (*weft_conv_kernel)(const weft_op_args *a);

// Runs a through oneDNN or through im2col (the caller's f32 / f64 kernel).
// bf16 operands run oneDNN's bf16 convolution, or im2col widened.
weft_status weft_cpu_conv_run(weft_conv_dir dir, const weft_op_args *a, weft_conv_kernel im2col);
// Runs f32 on a, widening bf16 operands to f32 and rounding the output back
// once; other dtypes go to f32 as they are. (Inputs: at most 3.)
weft_status weft_cpu_conv_widened(const weft_op_args *a, weft_conv_kernel f32);

// The backend setting: WEFT_CONV in the environment at the first call
// (auto | im2col | onednn), or the last weft_cpu_conv_set_backend. Forcing
// onednn in a build without it runs im2col.
void weft_cpu_conv_set_backend(weft_conv_backend b);
weft_conv_backend weft_cpu_conv_get_backend(void);
bool weft_cpu_conv_have_onednn(void);
// oneDNN can run bf16 convolutions on this CPU (it has AVX512-BF16 or AMX); else bf16 runs im2col widened.
bool weft_cpu_conv_have_onednn_bf16(void);
// How many convolutions oneDNN has computed in this process (tests check
// that a forced oneDNN run really took that path).
int64_t weft_cpu_conv_onednn_runs(void);

#endif
