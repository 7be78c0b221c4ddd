// Graph mode's fused elementwise groups on CUDA: one generic kernel that
// interprets the group's program per element (generated kernels come later).
//
// A block first copies the launch's parameters (the program and the operand
// descriptors, weft_cu_fused) into shared memory, so every thread reads its
// instructions from there (uniform addresses: broadcasts). Each thread then
// takes elements i grid-stride: it loads element i of every used input into
// registers (r[0..n_in): contiguous inputs at i, broadcast scalars at 0,
// strided ones through the element's coordinates), runs the instructions in
// order (r[n_in + j] = instruction j, each the same formula the unfused
// op's kernel computes: ew_math.cuh), and stores exported results at i.
// Every input is read before any output is written, so an input over an
// output's own memory (the matmul epilogue's product) is safe.
#include "cu_common.cuh"
#include "ew_math.cuh"
#include "fused_kernels.h"

static_assert(sizeof(weft_cu_fused) <= 4000, "kernel parameters stay under the 4 KB every architecture takes");

namespace {

using namespace weft_ew;

#define R_INSTR WEFT_CU_FUSED_MAX_IN // r[] index of instruction 0

// One instruction: variant op on a (and b), in T. Float-only variants are
// compiled for f32/f64 only; the glue never sends them with an integer dtype.
template <typename T> __device__ __forceinline__ T eval(int op, T a, T b, double sc) {
    constexpr bool fp = is_fp<T>::value;
    switch (op) {
#define NUM1(V) \
    case V: return unary_op<V, T>(a, sc);
#define FP1(V)                                            \
    case V:                                               \
        if constexpr (fp) return unary_op<V, T>(a, sc);   \
        else return (T)0;
#define NUM2(V) \
    case V: return binary_op<V, T>(a, b);
#define FP2(V)                                            \
    case V:                                               \
        if constexpr (fp) return binary_op<V, T>(a, b);   \
        else return (T)0;
        NUM1(WEFT_CU_EW_NEG) NUM1(WEFT_CU_EW_ABS) NUM1(WEFT_CU_EW_SIGN) FP1(WEFT_CU_EW_EXP) FP1(WEFT_CU_EW_LOG)
        FP1(WEFT_CU_EW_SQRT) FP1(WEFT_CU_EW_RSQRT) FP1(WEFT_CU_EW_SIN) FP1(WEFT_CU_EW_COS) FP1(WEFT_CU_EW_TANH)
        FP1(WEFT_CU_EW_SIGMOID) NUM1(WEFT_CU_EW_RELU) FP1(WEFT_CU_EW_GELU) FP1(WEFT_CU_EW_GELU_GRAD)
        FP1(WEFT_CU_EW_SILU) FP1(WEFT_CU_EW_POW_SCALAR) NUM1(WEFT_CU_EW_ADD_SCALAR) NUM1(WEFT_CU_EW_MUL_SCALAR)
        NUM2(WEFT_CU_EW_ADD) NUM2(WEFT_CU_EW_SUB) NUM2(WEFT_CU_EW_MUL) NUM2(WEFT_CU_EW_DIV) FP2(WEFT_CU_EW_POW)
        NUM2(WEFT_CU_EW_MAXIMUM) NUM2(WEFT_CU_EW_MINIMUM) NUM2(WEFT_CU_EW_RELU_BW) FP2(WEFT_CU_EW_GELU_BW)
        FP1(WEFT_CU_EW_GELU_TANH) FP2(WEFT_CU_EW_GELU_TANH_BW) FP1(WEFT_CU_EW_ERF) FP1(WEFT_CU_EW_FLOOR)
        FP1(WEFT_CU_EW_CEIL) FP1(WEFT_CU_EW_ROUND) FP1(WEFT_CU_EW_TRUNC) NUM2(WEFT_CU_EW_FMOD)
        NUM2(WEFT_CU_EW_REMAINDER) FP1(WEFT_CU_EW_ASIN) FP1(WEFT_CU_EW_ACOS) FP1(WEFT_CU_EW_ATAN)
#undef NUM1
#undef FP1
#undef NUM2
#undef FP2
    default: return (T)0;
    }
}

template <typename T> __global__ void __launch_bounds__(WEFT_CU_THREADS) fused_kernel(const weft_cu_fused f) {
    __shared__ weft_cu_fused sf;
    if (threadIdx.x == 0) sf = f; // static offsets into the parameters
    __syncthreads();
    const int n_in = sf.n_in, n_instr = sf.n_instr, nd = sf.ndim;
    bool strided = false;
    for (int k = 0; k < n_in; k++) strided |= sf.in_kind[k] == WEFT_CU_IN_STRIDED;
    WEFT_CU_GRID_LOOP(i, sf.numel) {
        T r[WEFT_CU_FUSED_MAX_IN + WEFT_CU_FUSED_MAX_INSTR];
        int64_t coord[WEFT_CU_MAX_DIMS];
        if (strided) {
            int64_t rem = i;
            for (int d = nd - 1; d >= 0; d--) {
                coord[d] = rem % sf.sizes[d];
                rem /= sf.sizes[d];
            }
        }
        for (int k = 0; k < n_in; k++) {
            int kind = sf.in_kind[k];
            if (kind == WEFT_CU_IN_UNUSED) continue;
            int64_t off = 0;
            if (kind == WEFT_CU_IN_CONTIG) off = i;
            else if (kind == WEFT_CU_IN_STRIDED)
                for (int d = 0; d < nd; d++) off += coord[d] * sf.in_strides[k][d];
            r[k] = ((const T *)sf.in[k])[off];
        }
        for (int j = 0; j < n_instr; j++) {
            const weft_cu_fused_instr &x = sf.instr[j];
            T a = r[x.arg[0] >= 0 ? x.arg[0] : R_INSTR - 1 - x.arg[0]];
            T b = x.n_args > 1 ? r[x.arg[1] >= 0 ? x.arg[1] : R_INSTR - 1 - x.arg[1]] : (T)0;
            T v = eval<T>(x.op, a, b, x.scalar);
            r[R_INSTR + j] = v;
            if (x.out >= 0) ((T *)sf.out[x.out])[i] = v;
        }
    }
}

template <typename T> cudaError_t launch(const weft_cu_fused *f, cudaStream_t s) {
    fused_kernel<T><<<weft_cu_blocks(f->numel), WEFT_CU_THREADS, 0, s>>>(*f);
    return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t weft_cu_fused_run(const weft_cu_fused *f, cudaStream_t s) {
    if (f->numel == 0) return cudaSuccess;
    if (f->n_instr < 1 || f->n_instr > WEFT_CU_FUSED_MAX_INSTR || f->n_in < 0 || f->n_in > WEFT_CU_FUSED_MAX_IN ||
        f->n_out < 1 || f->n_out > WEFT_CU_FUSED_MAX_OUT || f->ndim < 0 || f->ndim > WEFT_CU_MAX_DIMS)
        return cudaErrorInvalidValue;
    switch (f->dtype) {
    case WEFT_CU_F32: return launch<float>(f, s);
    case WEFT_CU_F64: return launch<double>(f, s);
    case WEFT_CU_I32: return launch<int32_t>(f, s);
    case WEFT_CU_I64: return launch<int64_t>(f, s);
    default: return cudaErrorInvalidValue;
    }
}
