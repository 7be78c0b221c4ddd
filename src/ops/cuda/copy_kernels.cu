// Strided copies with broadcast and dtype conversion: the one kernel behind
// weft_cuda_copy, contiguous(), cast and copy on CUDA.
#include "copy_kernels.h"
#include "cu_common.cuh"

// Same dtype: move the bits (exact for every type, including i64 > 2^53).
template <typename W>
__global__ void copy_bits(weft_cu_tensor out, weft_cu_tensor in) {
    WEFT_CU_GRID_LOOP(i, out.numel) {
        ((W *)out.data)[weft_cu_offset(out, i)] = ((const W *)in.data)[weft_cu_offset(in, i)];
    }
}

__device__ __forceinline__ double load_f64(const char *p, int dt, int64_t off) {
    switch (dt) {
    case WEFT_CU_F32: return ((const float *)p)[off];
    case WEFT_CU_F64: return ((const double *)p)[off];
    case WEFT_CU_I32: return ((const int32_t *)p)[off];
    case WEFT_CU_I64: return (double)((const int64_t *)p)[off];
    case WEFT_CU_BOOL: return ((const uint8_t *)p)[off] != 0;
    case WEFT_CU_U8: return ((const uint8_t *)p)[off];
    case WEFT_CU_F16: return __half2float(((const __half *)p)[off]);
    case WEFT_CU_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[off]);
    }
    return 0;
}

__device__ __forceinline__ void store_f64(char *p, int dt, int64_t off, double v) {
    switch (dt) {
    case WEFT_CU_F32: ((float *)p)[off] = (float)v; break;
    case WEFT_CU_F64: ((double *)p)[off] = v; break;
    case WEFT_CU_I32: ((int32_t *)p)[off] = (int32_t)v; break;
    case WEFT_CU_I64: ((int64_t *)p)[off] = (int64_t)v; break;
    case WEFT_CU_BOOL: ((uint8_t *)p)[off] = v != 0; break;
    case WEFT_CU_U8: ((uint8_t *)p)[off] = (uint8_t)v; break;
    case WEFT_CU_F16: ((__half *)p)[off] = __double2half(v); break; // one rounding, as the CPU's round-to-odd path
    case WEFT_CU_BF16: ((__nv_bfloat16 *)p)[off] = __double2bfloat16(v); break;
    }
}

// Different dtypes: through double (exact for every value of the 32-bit and
// smaller types; i64 beyond 2^53 rounds, as a cast to f64 would anyway).
// Into f16/bf16 every source rounds once, straight from double (as the CPU's
// round-to-odd f64 -> f32 step followed by f32 -> f16/bf16).
__global__ void copy_convert(weft_cu_tensor out, weft_cu_tensor in) {
    WEFT_CU_GRID_LOOP(i, out.numel) {
        if (in.dtype == WEFT_CU_I64 && out.dtype == WEFT_CU_I32) // keep integer conversions exact
            ((int32_t *)out.data)[weft_cu_offset(out, i)] = (int32_t)((const int64_t *)in.data)[weft_cu_offset(in, i)];
        else if (in.dtype == WEFT_CU_I32 && out.dtype == WEFT_CU_I64)
            ((int64_t *)out.data)[weft_cu_offset(out, i)] = ((const int32_t *)in.data)[weft_cu_offset(in, i)];
        else
            store_f64(out.data, out.dtype, weft_cu_offset(out, i), load_f64(in.data, in.dtype, weft_cu_offset(in, i)));
    }
}

static int dtype_size(int dt) {
    switch (dt) {
    case WEFT_CU_F64: case WEFT_CU_I64: return 8;
    case WEFT_CU_F32: case WEFT_CU_I32: return 4;
    case WEFT_CU_F16: case WEFT_CU_BF16: return 2;
    default: return 1;
    }
}

extern "C" cudaError_t weft_cu_copy(weft_cu_tensor out, weft_cu_tensor in, cudaStream_t s) {
    if (out.numel == 0) return cudaSuccess;
    unsigned nb = weft_cu_blocks(out.numel);
    if (out.dtype == in.dtype) {
        if (weft_cu_contiguous(out) && weft_cu_contiguous(in) && in.numel == out.numel)
            return cudaMemcpyAsync(out.data, in.data, (size_t)out.numel * dtype_size(out.dtype),
                                   cudaMemcpyDeviceToDevice, s);
        switch (dtype_size(out.dtype)) {
        case 8: copy_bits<uint64_t><<<nb, WEFT_CU_THREADS, 0, s>>>(out, in); break;
        case 4: copy_bits<uint32_t><<<nb, WEFT_CU_THREADS, 0, s>>>(out, in); break;
        case 2: copy_bits<uint16_t><<<nb, WEFT_CU_THREADS, 0, s>>>(out, in); break;
        default: copy_bits<uint8_t><<<nb, WEFT_CU_THREADS, 0, s>>>(out, in); break;
        }
    } else {
        copy_convert<<<nb, WEFT_CU_THREADS, 0, s>>>(out, in);
    }
    return cudaGetLastError();
}
