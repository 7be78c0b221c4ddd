// What the C glue of the CUDA kernels shares: turning op arguments into
// weft_cu_tensor descriptors, the stream to queue on, and error reporting.
//
// A family X has X_kernels.cu (kernels and extern "C" launchers returning a
// cudaError_t), X_kernels.h (the launchers' prototypes, plain C) and X.c (one
// weft_kernel_fn per op: checks, descriptors, launch, and
// weft_cuda_register_X, which puts them in the op table).
#ifndef WEFT_CUDA_OPS_H
#define WEFT_CUDA_OPS_H

#include "../../device/cuda/cuda_impl.h"
#include "../op.h"
#include "cu_tensor.h"

// (weft_cu_coalesce is in cu_tensor.h, for the launchers too.)
// The tensor as it is (its own sizes and strides).
weft_cu_tensor weft_cu_desc(const weft_tensor *t);
// t read as if broadcast to (ndim, sizes): NumPy rules, stride 0 along
// broadcast dims (t must broadcast; infer has checked it).
weft_cu_tensor weft_cu_desc_bcast(const weft_tensor *t, int ndim, const int64_t *sizes);
// The calling thread's current stream on t's device.
cudaStream_t weft_cu_stream(const weft_tensor *t);
// After a launcher: WEFT_OK, or an error naming the op and the CUDA error.
weft_status weft_cu_done(cudaError_t e, const char *op);
// Register fn for op `name` on CUDA with the dtypes mask (an unknown name is
// a programming error that test_cuda_table catches).
void weft_cu_register(const char *name, weft_kernel_fn fn, uint32_t dtypes);

// weft_cuda_copy(dst, src) (declared in tensor_impl.h, defined in
// copy.c): dst = src on one device, any strides, broadcast, dtype
// conversion; registered as weft_tensor_copy_'s kernel between CUDA tensors.

// One per family; each in its own file, all called by register.c.
void weft_cuda_register_copy(void);
void weft_cuda_register_linalg(void);
void weft_cuda_register_elementwise(void);
void weft_cuda_register_index(void);
void weft_cuda_register_optim(void);
void weft_cuda_register_conv(void);
void weft_cuda_register_reduce(void);
void weft_cuda_register_nn(void);
void weft_cuda_register_norm(void);
void weft_cuda_register_attention(void);
void weft_cuda_register_lstm(void);
void weft_cuda_register_fused(void); // fused.c: graph mode's fused elementwise groups

#endif
