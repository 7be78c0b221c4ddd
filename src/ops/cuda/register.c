// Fills the CUDA column of the op table (called once, when the backend finds a GPU).
#include "cuda_ops.h"

void weft_cuda_register_kernels(void) {
    weft_cuda_register_copy();
    weft_cuda_register_linalg();
    weft_cuda_register_elementwise();
    weft_cuda_register_index();
    weft_cuda_register_optim();
    weft_cuda_register_conv();
    weft_cuda_register_reduce();
    weft_cuda_register_nn();
    weft_cuda_register_norm();
    weft_cuda_register_attention();
    weft_cuda_register_lstm();
    weft_cuda_register_fused();
}
