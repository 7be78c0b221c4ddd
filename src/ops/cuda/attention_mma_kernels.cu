// Fused causal attention in bf16 / f16 on tensor cores (FlashAttention-2
// style, Dao 2023), for the ops causal_attention and its backward when q, k, v
// are bf16 or f16 and the head dim D is 16, 32, 64 or 128 (attention.c takes
// the f32 kernels of attention_kernels.cu, on widened copies, otherwise).
//
// Products run on mma.sync.m16n8k16 (bf16 or f16 operands, f32 sums), their
// operands loaded from shared memory by ldmatrix (.trans for the B operand
// of P V, P^T go, dS^T q and dS K: one instruction per two fragments); the
// softmax statistics (running max, sum, lse) and the accumulators are f32;
// P and dS are rounded to the input dtype only as operands of the next
// product, as FlashAttention does. lse is written in f32.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16/.f16): with g = lane / 4
// and t = lane % 4,
//   A (16x16, row-major), 4 registers of 2 elements: (g, 2t..2t+1),
//     (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..);
//   B (16x8, "col"), 2 registers: (k = 2t..2t+1, n = g), (k = 2t+8.., n = g);
//   C (16x8, f32), 4 values: (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
// So the C fragments of two neighbouring 8-column tiles are, rounded and
// paired, the A fragment of the 16-column block they form: P and dS go
// from one product into the next without leaving registers.
//
// Every kernel has 4 warps; each warp owns 16 rows of its side (query rows
// for the forward and dq, key rows for dk/dv; 32 with WEFT_ATTN_FWD_ROWS=128
// or WEFT_ATTN_BWD_ROWS=128, slower on an H100) and streams the other side
// through shared memory, tiles of 64 rows in the forward and 32 in the
// backward kernels (which hold two accumulators of D columns each), in two
// buffers: the next tile's cp.async copies run while this one is computed.
// Shared rows are padded to D + 8 elements. Rows past T read as zeros and are
// never written. Only tiles on or below the diagonal are visited.
//
// q, k, v and go are read where they lie (weft_cu_heads): the heads of a
// (B,T,C) tensor, as a transformer's attention hands them over, cost no
// copy. o is written (and read back for Dl) in its layout too: (BH,T,D), or
// (B,T,H,D) for the op's heads-last output, and so are the gradients gq, gk,
// gv. lse is contiguous (BH,T).
//
// Backward: Dl_i = go_i.o_i (f32) first; then, as the f32 kernels, one kernel
// per key block for dk and dv (looping over query tiles) and one per query
// block for dq (looping over key tiles): no atomics, the same bits each run.
// WEFT_ATTN_BWD_ROWS=128 runs both with two 16-row blocks a warp (D up to 64),
// the same bits. Or (WEFT_ATTN_BWD=fused) FlashAttention-2's single pass,
// mma_bwd_dkdv with DQ: it also adds each query tile's dq into an f32 buffer by
// atomics, 5 products a tile pair instead of 7, dq's last bits varying.
//
// tests/cuda/test_cuda_attention_emu.cc compiles the kernels for the host
// (WEFT_CU_EMU: a thread per CUDA thread, mma and shuffles exchanged within
// each warp, mma by the fragment layouts above) and checks them against an
// f64 reference on every machine; test_cuda_attention runs them on a GPU.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "attention_heads.h"
#ifndef WEFT_CU_EMU
#include "attention_kernels.h"
#include "cu_common.cuh"
#define WEFT_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

namespace {

constexpr int kWarps = 4, kThreads = kWarps * 32, kOwn = 16 * kWarps; // own rows per block
constexpr float kLog2e = 1.4426950408889634f;

template <typename T> struct lp;
template <> struct lp<__nv_bfloat16> {
    static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef WEFT_CU_EMU
        weft_emu_mma_bf16(c, a, b0, b1);
#else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *(uint32_t *)&v;
    }
    static __device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
    static __device__ __forceinline__ __nv_bfloat16 round(float f) { return __float2bfloat16_rn(f); }
    static __device__ __forceinline__ __nv_bfloat16 zero() { return __float2bfloat16_rn(0.f); }
};
#ifndef WEFT_CU_EMU
template <> struct lp<__half> {
    static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *(uint32_t *)&v;
    }
    static __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
    static __device__ __forceinline__ __half round(float f) { return __float2half_rn(f); }
    static __device__ __forceinline__ __half zero() { return __float2half_rn(0.f); }
};
#endif

// Shared tiles: rows of LD = D + 8 elements (16-bit). Every 8-element row segment starts on 16 bytes, as
// ldmatrix needs, and the 8 rows of one 8x8 matrix (LD * 2 bytes apart: 4 banks further each) fall in
// different banks.
template <int D> __host__ __device__ constexpr int ld_of() { return D + 8; }

// ldmatrix.x4: lane l hands over the address of row l % 8 of 8x8 matrix l / 8 (16 bytes of 16-bit
// elements); register i of lane l receives matrix i's elements (row l / 4, columns 2 (l % 4), + 1), or with
// .trans (rows 2 (l % 4), + 1, column l / 4): one instruction for four registers of mma fragments.
template <bool TRANS> __device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *row) {
#ifdef WEFT_CU_EMU
    weft_emu_ldmatrix_x4(r, row, TRANS);
#else
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
#endif
}

// A fragment of the 16x16 block at (r0, c0) of a row-major shared tile: matrices (rows, columns) (0, 0),
// (8, 0), (0, 8), (8, 8) of the block are registers 0..3.
template <typename T, int LD>
__device__ __forceinline__ void frag_a(uint32_t (&a)[4], const T *s, int r0, int c0, int lane) {
    ldsm_x4<false>(a, s + (r0 + (lane & 15)) * LD + c0 + 8 * (lane >> 4));
}
// B fragments (16x8) of two neighbouring 8-column tiles, B[k][n] = X[n0 + n][k0 + k] (X row-major: the product
// with X's transpose): b[0], b[1] for columns n0.., b[2], b[3] for n0 + 8..; matrices (X rows, columns)
// (n0, k0), (n0, k0 + 8), (n0 + 8, k0), (n0 + 8, k0 + 8).
template <typename T, int LD>
__device__ __forceinline__ void frag_bt2(uint32_t (&b)[4], const T *x, int n0, int k0, int lane) {
    ldsm_x4<false>(b, x + (n0 + (lane & 7) + 8 * (lane >> 4)) * LD + k0 + 8 * ((lane >> 3) & 1));
}
// B fragments (16x8) of two neighbouring 8-column tiles, B[k][n] = X[k0 + k][n0 + n] (the product with X
// itself), transposed on the way: matrices (X rows, columns) (k0, n0), (k0 + 8, n0), (k0, n0 + 8),
// (k0 + 8, n0 + 8).
template <typename T, int LD>
__device__ __forceinline__ void frag_b2(uint32_t (&b)[4], const T *x, int k0, int n0, int lane) {
    ldsm_x4<true>(b, x + (k0 + (lane & 15)) * LD + n0 + 8 * (lane >> 4));
}

// p[0] += a, p[1] += b in global memory (p 8-byte aligned), by atomics whose results go unused: reductions the
// hardware does in L2, one vector instruction for the pair on sm_90.
__device__ __forceinline__ void atomic_add_f32x2(float *p, float a, float b) {
#if defined(WEFT_CU_EMU)
    weft_emu_atomic_add(p, a);
    weft_emu_atomic_add(p + 1, b);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2 *>(p), make_float2(a, b));
#else
    atomicAdd(p, a);
    atomicAdd(p + 1, b);
#endif
}

// Head bh's first element in a tensor of layout L (attention_kernels.h).
__device__ __forceinline__ int64_t head_at(const weft_cu_heads &L, int64_t bh) {
    return (bh / L.H) * L.sb + (bh % L.H) * L.sh;
}

// dst (n rows of LD) = rows r0 .. r0 + n of src (one head: Tn rows of D, st apart), zeros past Tn; 16-byte moves.
template <typename T, int D>
__device__ __forceinline__ void load_tile(T *dst, const T *src, int64_t r0, int n, int64_t Tn, int64_t st) {
    constexpr int LD = ld_of<D>(), V = D / 8; // uint4 per row
    for (int idx = threadIdx.x; idx < n * V; idx += blockDim.x) {
        const int r = idx / V, c = (idx - r * V) * 8;
        uint4 val = make_uint4(0, 0, 0, 0);
        if (r0 + r < Tn) val = *(const uint4 *)(src + (r0 + r) * st + c);
        *(uint4 *)(dst + r * LD + c) = val;
    }
}

// cp.async: a 16-byte copy global -> shared that the thread does not wait for (zeros where !valid: src-size 0,
// src then any valid address); commit closes a group of them, wait<N> waits until at most N groups are open.
// The streamed tiles go through these, two buffers each: the next tile loads while this one is computed.
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
#ifdef WEFT_CU_EMU
    weft_emu_cp_async16(dst, src, valid);
#else
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#ifdef WEFT_CU_EMU
    weft_emu_cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
#ifdef WEFT_CU_EMU
    weft_emu_cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// load_tile through cp.async (not waited for: commit, wait, then a barrier before the tile is read).
template <typename T, int D>
__device__ __forceinline__ void load_tile_async(T *dst, const T *src, int64_t r0, int n, int64_t Tn, int64_t st) {
    constexpr int LD = ld_of<D>(), V = D / 8; // uint4 per row
    for (int idx = threadIdx.x; idx < n * V; idx += blockDim.x) {
        const int r = idx / V, c = (idx - r * V) * 8;
        const bool in = r0 + r < Tn;
        cp_async16(dst + r * LD + c, in ? src + (r0 + r) * st + c : src, in);
    }
}

// Shared bytes of each kernel: the own rows, and two buffers of each streamed tile (+ the backward's lse, Dl).
constexpr int kFwdKeys = 64;  // streamed key rows per tile in the forward
constexpr int kBwdRows = 32;  // streamed rows per tile in the backward kernels
// The forward's 16-row blocks a warp (MT): 1 by default, 2 with WEFT_ATTN_FWD_ROWS=128 where D is up to 64 (at
// 128 the sums would not fit in registers); a block has kOwn MT query rows. (On an H100, 2026-11-27, at
// (8,12,1024,64): the forward alone 95.9 TFLOP/s with 1, 82.9 with 2: 254 registers a thread leave room for
// 2 blocks an SM instead of 3.)
template <int D> __host__ __device__ constexpr int fwd_mt_max() { return D <= 64 ? 2 : 1; }
template <typename T, int D, int MT> __host__ __device__ constexpr size_t fwd_smem() {
    return sizeof(T) * (size_t)((kOwn * MT + 4 * kFwdKeys) * ld_of<D>());
}
// The backward kernels' 16-row blocks a warp (MT): 1 by default, 2 with WEFT_ATTN_BWD_ROWS=128 where D is up
// to 64 (the own rows then 128 a block).
template <typename T, int D, int MT = 1> __host__ __device__ constexpr size_t dkdv_smem() {
    return sizeof(T) * (size_t)((2 * kOwn * MT + 4 * kBwdRows) * ld_of<D>()) + 4 * kBwdRows * sizeof(float);
}
constexpr int kDsLd = kOwn + 8; // the fused backward's dS tile: kBwdRows query rows of the block's 64 keys, padded
template <typename T, int D> __host__ __device__ constexpr size_t fused_bwd_smem() {
    return dkdv_smem<T, D>() + sizeof(T) * (size_t)(kBwdRows * kDsLd);
}
template <typename T, int D, int MT = 1> __host__ __device__ constexpr size_t dq_smem() {
    return sizeof(T) * (size_t)((2 * kOwn * MT + 4 * kBwdRows) * ld_of<D>());
}

// Block -> (head, tile), the heaviest tiles first (see attention_kernels.cu).
__device__ __forceinline__ void block_of(int64_t ntile, bool heavy_last, int64_t *bh, int64_t *tile) {
    const int64_t b = blockIdx.x;
    *bh = b / ntile;
    const int64_t t = b - *bh * ntile;
    *tile = heavy_last ? ntile - 1 - t : t;
}

__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// 2^x on the special-function unit (ex2.approx.ftz): exp2f less the library's handling of subnormal results,
// whose extra instructions count in these loops, which issue more arithmetic than tensor-core work. A result
// below 2^-126, a probability too small to matter to any sum here, becomes 0; 2^-inf is 0.
__device__ __forceinline__ float fast_exp2(float x) {
#ifdef WEFT_CU_EMU
    const float r = exp2f(x);
    return r < 1.17549435e-38f ? 0.f : r; // flushed as .ftz does
#else
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
    return r;
#endif
}

// Whether a tile's element-wise pass applies the causal and length masks, as a type: each kernel runs the pass
// in two compiled forms and picks one per tile (warp-uniform). Only the tiles that cross a warp's diagonal or
// the end T need the masks; elsewhere their 64-bit index tests would be most of the pass's instructions.
template <bool B> struct masked {
    static constexpr bool value = B;
};

// c[m][n] = A B^T for the 16 rows at r0 + 16 m of the shared tile As (m < MT) and the 8 rows at n * 8 of Bs,
// n < N (even), over D: each B fragment is loaded once and serves every m, each A fragment every n.
template <typename T, int D, int N, int MT>
__device__ __forceinline__ void products_t(float (&c)[MT][N][4], const T *As, int r0, const T *Bs, int lane) {
    constexpr int LD = ld_of<D>();
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < N; n++) c[m][n][0] = c[m][n][1] = c[m][n][2] = c[m][n][3] = 0;
#pragma unroll
    for (int kc = 0; kc < D / 16; kc++) {
        uint32_t a[MT][4];
#pragma unroll
        for (int m = 0; m < MT; m++) frag_a<T, LD>(a[m], As, r0 + 16 * m, kc * 16, lane);
#pragma unroll
        for (int n = 0; n < N; n += 2) {
            uint32_t b[4];
            frag_bt2<T, LD>(b, Bs, n * 8, kc * 16, lane);
#pragma unroll
            for (int m = 0; m < MT; m++) {
                lp<T>::mma(c[m][n], a[m], b[0], b[1]);
                lp<T>::mma(c[m][n + 1], a[m], b[2], b[3]);
            }
        }
    }
}
// c = A B^T for one 16-row block (products_t with MT = 1 on plain [N][4] sums).
template <typename T, int D, int N>
__device__ __forceinline__ void products_t(float (&c)[N][4], const T *As, int r0, const T *Bs, int lane) {
    products_t<T, D, N, 1>(reinterpret_cast<float(&)[1][N][4]>(c), As, r0, Bs, lane);
}

// acc[m] (16 x D) += C[m] Bs for m < MT, with C[m] (16 x 16 KK) the f32 C fragments of a product (8 columns
// each), rounded to T: two neighbouring C fragments, paired, are one A fragment; Bs holds 16 KK rows of D
// (row-major, shared), each B fragment loaded once for every m.
template <typename T, int D, int KK, int MT>
__device__ __forceinline__ void accumulate(float (&acc)[MT][D / 8][4], const float (&c)[MT][2 * KK][4], const T *Bs,
                                           int lane) {
#pragma unroll
    for (int kk = 0; kk < KK; kk++) {
        uint32_t a[MT][4];
#pragma unroll
        for (int m = 0; m < MT; m++) {
            a[m][0] = lp<T>::pack(c[m][2 * kk][0], c[m][2 * kk][1]);
            a[m][1] = lp<T>::pack(c[m][2 * kk][2], c[m][2 * kk][3]);
            a[m][2] = lp<T>::pack(c[m][2 * kk + 1][0], c[m][2 * kk + 1][1]);
            a[m][3] = lp<T>::pack(c[m][2 * kk + 1][2], c[m][2 * kk + 1][3]);
        }
#pragma unroll
        for (int n = 0; n < D / 8; n += 2) {
            uint32_t b[4];
            frag_b2<T, ld_of<D>()>(b, Bs, kk * 16, n * 8, lane);
#pragma unroll
            for (int m = 0; m < MT; m++) {
                lp<T>::mma(acc[m][n], a[m], b[0], b[1]);
                lp<T>::mma(acc[m][n + 1], a[m], b[2], b[3]);
            }
        }
    }
}
template <typename T, int D, int KK>
__device__ __forceinline__ void accumulate(float (&acc)[D / 8][4], const float (&c)[2 * KK][4], const T *Bs, int lane) {
    accumulate<T, D, KK, 1>(reinterpret_cast<float(&)[1][D / 8][4]>(acc),
                            reinterpret_cast<const float(&)[1][2 * KK][4]>(c), Bs, lane);
}

// ---------------------------------------------------------------- forward
// Block: 64 MT query rows of one head, 16 MT per warp; key tiles of 64. Shared: Qs, then two buffers of Ks
// (64) and Vs (64) rows: tile kt + 1 loads (cp.async) while tile kt is computed. With two 16-row blocks a
// warp (MT = 2) every K and V fragment the warp loads serves two mma: half the shared-memory reads per
// product, which bound the kernel with one (FlashAttention-2's 128-row blocks of 4 warps, for D up to 64).
// Each row's arithmetic is the same either way: the results are the same bits.

template <typename T, int D, int MT>
__global__ void __launch_bounds__(kThreads) mma_fwd(const T *q, const T *k, const T *v, weft_cu_heads qL,
                                                   weft_cu_heads kL, weft_cu_heads vL, T *o, weft_cu_heads oL,
                                                   float *lse, int64_t Tn,
                                                   int64_t ntile, float scale_log2) {
    constexpr int LD = ld_of<D>(), NK = D / 16, ND = D / 8, NS = kFwdKeys / 8, RW = 16 * MT, ROWS = kOwn * MT;
    WEFT_SMEM(smem_raw);
    T *Qs = (T *)smem_raw, *KV = Qs + ROWS * LD; // buffer b: Ks at KV + 2 b tile, Vs after it
    int64_t bh, qt;
    block_of(ntile, true, &bh, &qt);
    const int64_t i0 = qt * ROWS;
    q += head_at(qL, bh), k += head_at(kL, bh), v += head_at(vL, bh), o += head_at(oL, bh), lse += bh * Tn;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int rw = w * RW; // the warp's first row in the block
    load_tile<T, D>(Qs, q, i0, ROWS, Tn, qL.st);
    __syncthreads();
    uint32_t qa[MT][NK][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int kc = 0; kc < NK; kc++) frag_a<T, LD>(qa[mt][kc], Qs, rw + 16 * mt, kc * 16, lane);

    float acc[MT][ND][4], m[MT][2], l[MT][2];
    int64_t row[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int n = 0; n < ND; n++) acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0;
        m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0;
        row[mt][0] = i0 + rw + 16 * mt + g, row[mt][1] = row[mt][0] + 8;
    }
    const int64_t last = (i0 + ROWS < Tn ? i0 + ROWS : Tn) - 1; // the block's last query row
    const int64_t ntiles = last / kFwdKeys + 1;
    constexpr int tile = kFwdKeys * LD;
    load_tile_async<T, D>(KV, k, 0, kFwdKeys, Tn, kL.st);
    load_tile_async<T, D>(KV + tile, v, 0, kFwdKeys, Tn, vL.st);
    cp_async_commit();
    for (int64_t kt = 0; kt < ntiles; kt++) {
        const int64_t j0 = kt * kFwdKeys;
        const T *Ks = KV + 2 * tile * (kt & 1), *Vs = Ks + tile;
        if (kt + 1 < ntiles) { // into the other buffer, last read in tile kt - 1 (before its closing barrier)
            T *Kn = KV + 2 * tile * ((kt + 1) & 1);
            load_tile_async<T, D>(Kn, k, j0 + kFwdKeys, kFwdKeys, Tn, kL.st);
            load_tile_async<T, D>(Kn + tile, v, j0 + kFwdKeys, kFwdKeys, Tn, vL.st);
            cp_async_commit();
            cp_async_wait<1>(); // tile kt's group is done
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); // every thread's part of tile kt is in
        if (j0 <= i0 + rw + RW - 1) { // else the whole tile is above this warp's diagonal (warp-uniform)
            float s[MT][NS][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int n = 0; n < NS; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0;
#pragma unroll
            for (int n = 0; n < NS; n += 2)
#pragma unroll
                for (int kc = 0; kc < NK; kc++) {
                    uint32_t b[4];
                    frag_bt2<T, LD>(b, Ks, n * 8, kc * 16, lane);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        lp<T>::mma(s[mt][n], qa[mt][kc], b[0], b[1]);
                        lp<T>::mma(s[mt][n + 1], qa[mt][kc], b[2], b[3]);
                    }
                }
            // masked, scaled scores (log2 units) and the rows' maxima in the tile (a block of rows wholly above the
            // diagonal gets p = 0: its rows had keys in earlier tiles, so their maxima are finite); the masks only
            // where a key of the tile lies after the warp's first row or at T or past it
            float mx[MT][2];
            auto scores = [&](auto mask) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mx[mt][0] = mx[mt][1] = -INFINITY;
#pragma unroll
                    for (int n = 0; n < NS; n++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            float x = s[mt][n][e] * scale_log2;
                            if constexpr (decltype(mask)::value) {
                                const int64_t j = j0 + n * 8 + 2 * t + (e & 1), i = row[mt][e >> 1];
                                if (!(j <= i && j < Tn)) x = -INFINITY;
                            }
                            s[mt][n][e] = x;
                            mx[mt][e >> 1] = fmaxf(mx[mt][e >> 1], x);
                        }
                }
            };
            if (j0 + kFwdKeys - 1 <= i0 + rw && j0 + kFwdKeys <= Tn) scores(masked<false>{});
            else scores(masked<true>{});
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                float alpha[2], mref[2];
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const float mn = fmaxf(m[mt][r], quad_max(mx[mt][r]));
                    mref[r] = mn == -INFINITY ? 0.f : mn; // a row with nothing yet: every p is 0, alpha 0
                    alpha[r] = fast_exp2(m[mt][r] - mref[r]);
                    m[mt][r] = mn;
                    l[mt][r] *= alpha[r];
                }
#pragma unroll
                for (int n = 0; n < ND; n++) {
                    acc[mt][n][0] *= alpha[0], acc[mt][n][1] *= alpha[0];
                    acc[mt][n][2] *= alpha[1], acc[mt][n][3] *= alpha[1];
                }
#pragma unroll
                for (int n = 0; n < NS; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        s[mt][n][e] = fast_exp2(s[mt][n][e] - mref[e >> 1]);
                        l[mt][e >> 1] += s[mt][n][e];
                    }
            }
            accumulate<T, D, kFwdKeys / 16, MT>(acc, s, Vs, lane); // o += P V
        }
        __syncthreads(); // tile kt is no longer read: its buffer takes tile kt + 2
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float lt = quad_sum(l[mt][r]);
            if (row[mt][r] >= Tn) continue;
            const float inv = 1.f / lt;
            T *orow = o + row[mt][r] * oL.st;
#pragma unroll
            for (int n = 0; n < ND; n++)
                *(uint32_t *)(orow + n * 8 + 2 * t) =
                    lp<T>::pack(acc[mt][n][2 * r] * inv, acc[mt][n][2 * r + 1] * inv);
            if (t == 0) lse[row[mt][r]] = (m[mt][r] + log2f(lt)) / kLog2e;
        }
}

// ---------------------------------------------------------------- backward

// Dl_i = go_i.o_i in f32 (row r: head r / Tn, position r % Tn): L = min(D / 8, 8) lanes a row, each adding the
// 8 products of a 16-byte load of go and one of o at a time, then a sum over the row's L lanes; 32 / L rows a
// warp. go and o rows are 16-byte aligned (attention.c: read in place only so, else from checked copies).
template <typename T, int D>
__global__ void mma_bwd_dl(const T *go, weft_cu_heads gL, const T *o, weft_cu_heads oL, float *dl, int64_t N,
                           int64_t Tn) {
    static_assert(D % 8 == 0 && D >= 16 && D <= 256, "rows of 16-byte loads, 2 to 8 lanes a row");
    constexpr int L = D / 8 < 8 ? D / 8 : 8, RW = 32 / L;
    const int lane = threadIdx.x & 31, k = lane % L;
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t r0 = warp * RW; r0 < N; r0 += nw * RW) { // (warp-uniform: every lane reaches the shuffles)
        const int64_t r = r0 + lane / L;
        float s = 0;
        if (r < N) {
            const T *gr = go + head_at(gL, r / Tn) + (r % Tn) * gL.st, *orow = o + head_at(oL, r / Tn) + (r % Tn) * oL.st;
            for (int c = 8 * k; c < D; c += 8 * L) {
                const uint4 a = *(const uint4 *)(gr + c), b = *(const uint4 *)(orow + c);
                const T *pa = (const T *)&a, *pb = (const T *)&b;
#pragma unroll
                for (int e = 0; e < 8; e++) s += lp<T>::to_f(pa[e]) * lp<T>::to_f(pb[e]);
            }
        }
#pragma unroll
        for (int off = L / 2; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (k == 0 && r < N) dl[r] = s;
    }
}

// dk, dv for 64 MT key rows of one head (16 MT per warp), looping over query tiles of 32 from the diagonal on.
// Shared: Ks, Vs (64 MT rows), then two buffers of Qs, Gs (go) (32 rows) and the tile's lse and Dl: tile i + 1
// loads (cp.async; lse and Dl by plain stores) while tile i is computed. MT = 2 (WEFT_ATTN_BWD_ROWS=128) has
// every Q and go fragment a warp loads serve two mma, as the forward's 128-row blocks; the same bits.
//
// DQ (MT = 1): the backward in one pass (FlashAttention-2's algorithm, WEFT_ATTN_BWD=fused): each query tile's
// dq += dS K from the block's 64 keys is also added into an f32 (BH,T,D) accumulator dqa by atomics, instead of
// mma_bwd_dq recomputing S and dP: 5 products a tile pair where the two kernels run 7, at the price of the last
// bits of dq varying from run to run (the order of the additions). dS goes through shared memory (Ss: queries x
// keys, rounded to T as the product's operand); then warp w multiplies query rows 16 (w & 1) by columns
// (w >> 1) D / 2 (D >= 32; at D = 16 warps 0 and 1 take all 16). dqa must be zero before; mma_bwd_dq_store
// scales and rounds it into gq. dk and dv are the same bits either way.
template <typename T, int D, int MT, bool DQ = false>
__global__ void __launch_bounds__(kThreads) mma_bwd_dkdv(const T *q, const T *k, const T *v, const float *lse,
                                                        const T *go, weft_cu_heads qL, weft_cu_heads kL,
                                                        weft_cu_heads vL, weft_cu_heads gL, const float *dl, T *gk,
                                                        weft_cu_heads gkL, T *gv, weft_cu_heads gvL, float *dqa,
                                                        int64_t Tn, int64_t ntile, float scale) {
    static_assert(!DQ || MT == 1, "the one-pass backward takes one 16-row block a warp");
    constexpr int LD = ld_of<D>(), ND = D / 8, NQ = kBwdRows / 8, RW = 16 * MT, ROWS = kOwn * MT;
    constexpr int DW = D >= 32 ? D / 2 : D, NW = DW / 8; // DQ: dq columns a warp, and their 8-column tiles
    WEFT_SMEM(smem_raw);
    constexpr int tile = kBwdRows * LD;
    T *Ks = (T *)smem_raw, *Vs = Ks + ROWS * LD, *QG = Vs + ROWS * LD; // buffer b: Qs at QG + 2 b tile, Gs after
    float *LD2 = (float *)(QG + 4 * tile);                              // buffer b: Ls at LD2 + 2 b kBwdRows, Dls after
    T *Ss = (T *)(LD2 + 4 * kBwdRows);                                  // DQ: dS, kBwdRows rows of kDsLd
    int64_t bh, kt;
    block_of(ntile, false, &bh, &kt);
    const int64_t j0 = kt * ROWS;
    q += head_at(qL, bh), k += head_at(kL, bh), v += head_at(vL, bh), go += head_at(gL, bh);
    gk += head_at(gkL, bh), gv += head_at(gvL, bh), lse += bh * Tn, dl += bh * Tn;
    if constexpr (DQ) dqa += bh * Tn * D;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int rw = w * RW;
    const int mq = w & 1, c0 = (w >> 1) * DW; // DQ: this warp's dq rows (16 mq ..) and columns (c0 ..)
    load_tile<T, D>(Ks, k, j0, ROWS, Tn, kL.st);
    load_tile<T, D>(Vs, v, j0, ROWS, Tn, vL.st);
    float dk[MT][ND][4], dv[MT][ND][4];
    int64_t key[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int n = 0; n < ND; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) dk[mt][n][e] = dv[mt][n][e] = 0;
        key[mt][0] = j0 + rw + 16 * mt + g, key[mt][1] = key[mt][0] + 8;
    }
    const float scale_log2 = scale * kLog2e;
    // query tile i0's q, go (async) and lse, Dl (plain stores) into buffer b
    auto fetch = [&](int64_t i0, int b) {
        load_tile_async<T, D>(QG + 2 * tile * b, q, i0, kBwdRows, Tn, qL.st);
        load_tile_async<T, D>(QG + 2 * tile * b + tile, go, i0, kBwdRows, Tn, gL.st);
        cp_async_commit();
        float *L2 = LD2 + 2 * kBwdRows * b;
        for (int r = threadIdx.x; r < kBwdRows; r += blockDim.x) {
            L2[r] = i0 + r < Tn ? lse[i0 + r] * kLog2e : 0.f; // in log2 units
            L2[kBwdRows + r] = i0 + r < Tn ? dl[i0 + r] : 0.f;
        }
    };
    const int64_t first = (j0 / kBwdRows) * kBwdRows;
    if (first < Tn) fetch(first, 0);
    for (int64_t i0 = first, it = 0; i0 < Tn; i0 += kBwdRows, it++) {
        const int b = (int)(it & 1);
        const T *Qs = QG + 2 * tile * b, *Gs = Qs + tile;
        const float *Ls = LD2 + 2 * kBwdRows * b, *Dls = Ls + kBwdRows;
        if (i0 + kBwdRows < Tn) { // into the other buffer, last read in tile it - 1 (before its closing barrier)
            fetch(i0 + kBwdRows, b ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); // tile it is in (and Ks, Vs, loaded before the loop)
        if (i0 + kBwdRows - 1 >= j0 + rw) { // else every query of the tile is before this warp's keys
            // S^T (own keys x queries) = K Q^T and dP^T = V go^T
            float p[MT][NQ][4], dp[MT][NQ][4];
            products_t<T, D, NQ, MT>(p, Ks, rw, Qs, lane);
            products_t<T, D, NQ, MT>(dp, Vs, rw, Gs, lane);
            // P^T = exp(s - lse_i) where j <= i < T, else 0; dS^T = P^T (dP^T - Dl_i); the masks only where a query
            // of the tile lies before the warp's last key, or at T or past it
            auto probs = [&](auto mask) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int n = 0; n < NQ; n++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int c = n * 8 + 2 * t + (e & 1);
                            float pe = fast_exp2(p[mt][n][e] * scale_log2 - Ls[c]);
                            if constexpr (decltype(mask)::value) {
                                const int64_t i = i0 + c, j = key[mt][e >> 1];
                                if (!(j <= i && i < Tn)) pe = 0.f;
                            }
                            p[mt][n][e] = pe;
                            dp[mt][n][e] = pe * (dp[mt][n][e] - Dls[c]);
                            // DQ: dS (query c, key rw + g + 8 (e >> 1)), rounded as the other products' operands are
                            if constexpr (DQ) Ss[c * kDsLd + rw + g + 8 * (e >> 1)] = lp<T>::round(dp[mt][n][e]);
                        }
            };
            if (i0 >= j0 + rw + RW - 1 && i0 + kBwdRows <= Tn) probs(masked<false>{});
            else probs(masked<true>{});
            accumulate<T, D, kBwdRows / 16, MT>(dv, p, Gs, lane);  // dv += P^T go
            accumulate<T, D, kBwdRows / 16, MT>(dk, dp, Qs, lane); // dk += dS^T q
        } else if constexpr (DQ) { // this warp's 16 keys take no part in the tile: zeros for the dq product
            for (int idx = lane; idx < kBwdRows * 16; idx += 32) Ss[(idx / 16) * kDsLd + rw + idx % 16] = lp<T>::zero();
        }
        if constexpr (DQ) {
            __syncthreads(); // the block's dS is in
            if (D >= 32 || w < 2) { // dq rows 16 mq .. of the tile += dS (16 x 64 keys) K (64 keys x DW columns at c0)
                float c[NW][4];
#pragma unroll
                for (int n = 0; n < NW; n++) c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0;
#pragma unroll
                for (int kk = 0; kk < kOwn / 16; kk++) {
                    uint32_t a[4];
                    frag_a<T, kDsLd>(a, Ss, 16 * mq, kk * 16, lane);
#pragma unroll
                    for (int n = 0; n < NW; n += 2) {
                        uint32_t bb[4];
                        frag_b2<T, LD>(bb, Ks, kk * 16, c0 + n * 8, lane);
                        lp<T>::mma(c[n], a, bb[0], bb[1]);
                        lp<T>::mma(c[n + 1], a, bb[2], bb[3]);
                    }
                }
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int64_t i = i0 + 16 * mq + g + 8 * r;
                    if (i >= Tn) continue;
                    float *drow = dqa + i * D + c0 + 2 * t;
#pragma unroll
                    for (int n = 0; n < NW; n++) atomic_add_f32x2(drow + n * 8, c[n][2 * r], c[n][2 * r + 1]);
                }
            }
        }
        __syncthreads(); // tile it (and DQ's dS) is no longer read: its buffer takes tile it + 2
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if (key[mt][r] >= Tn) continue;
            T *krow = gk + key[mt][r] * gkL.st, *vrow = gv + key[mt][r] * gvL.st;
#pragma unroll
            for (int n = 0; n < ND; n++) {
                *(uint32_t *)(krow + n * 8 + 2 * t) =
                    lp<T>::pack(dk[mt][n][2 * r] * scale, dk[mt][n][2 * r + 1] * scale);
                *(uint32_t *)(vrow + n * 8 + 2 * t) = lp<T>::pack(dv[mt][n][2 * r], dv[mt][n][2 * r + 1]);
            }
        }
}

// dq for 64 MT query rows of one head (16 MT per warp), looping over key tiles of 32 up to the diagonal.
// Shared: Qs, Gs (go) (64 MT rows), then two buffers of Ks, Vs (32 rows): tile j + 1 loads (cp.async) while
// tile j is computed.
template <typename T, int D, int MT>
__global__ void __launch_bounds__(kThreads) mma_bwd_dq(const T *q, const T *k, const T *v, const float *lse,
                                                      const T *go, weft_cu_heads qL, weft_cu_heads kL,
                                                      weft_cu_heads vL, weft_cu_heads gL, const float *dl, T *gq,
                                                      weft_cu_heads gqL, int64_t Tn, int64_t ntile, float scale) {
    constexpr int LD = ld_of<D>(), ND = D / 8, NJ = kBwdRows / 8, RW = 16 * MT, ROWS = kOwn * MT;
    WEFT_SMEM(smem_raw);
    constexpr int tile = kBwdRows * LD;
    T *Qs = (T *)smem_raw, *Gs = Qs + ROWS * LD, *KV = Gs + ROWS * LD; // buffer b: Ks at KV + 2 b tile, Vs after
    int64_t bh, qt;
    block_of(ntile, true, &bh, &qt);
    const int64_t i0 = qt * ROWS;
    q += head_at(qL, bh), k += head_at(kL, bh), v += head_at(vL, bh), go += head_at(gL, bh);
    gq += head_at(gqL, bh), lse += bh * Tn, dl += bh * Tn;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int rw = w * RW;
    load_tile<T, D>(Qs, q, i0, ROWS, Tn, qL.st);
    load_tile<T, D>(Gs, go, i0, ROWS, Tn, gL.st);
    int64_t row[MT][2];
    float lrow[MT][2], dlrow[MT][2], dq[MT][ND][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        row[mt][0] = i0 + rw + 16 * mt + g, row[mt][1] = row[mt][0] + 8;
        for (int r = 0; r < 2; r++) {
            lrow[mt][r] = row[mt][r] < Tn ? lse[row[mt][r]] * kLog2e : 0.f;
            dlrow[mt][r] = row[mt][r] < Tn ? dl[row[mt][r]] : 0.f;
        }
#pragma unroll
        for (int n = 0; n < ND; n++) dq[mt][n][0] = dq[mt][n][1] = dq[mt][n][2] = dq[mt][n][3] = 0;
    }
    const float scale_log2 = scale * kLog2e;
    const int64_t last = (i0 + ROWS < Tn ? i0 + ROWS : Tn) - 1;
    load_tile_async<T, D>(KV, k, 0, kBwdRows, Tn, kL.st);
    load_tile_async<T, D>(KV + tile, v, 0, kBwdRows, Tn, vL.st);
    cp_async_commit();
    for (int64_t j0 = 0, it = 0; j0 <= last; j0 += kBwdRows, it++) {
        const T *Ks = KV + 2 * tile * (it & 1), *Vs = Ks + tile;
        if (j0 + kBwdRows <= last) { // into the other buffer, last read in tile it - 1 (before its closing barrier)
            T *Kn = KV + 2 * tile * ((it + 1) & 1);
            load_tile_async<T, D>(Kn, k, j0 + kBwdRows, kBwdRows, Tn, kL.st);
            load_tile_async<T, D>(Kn + tile, v, j0 + kBwdRows, kBwdRows, Tn, vL.st);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); // tile it is in (and Qs, Gs, loaded before the loop)
        if (j0 <= i0 + rw + RW - 1) { // else every key of the tile is after this warp's queries
            float p[MT][NJ][4], dp[MT][NJ][4];
            products_t<T, D, NJ, MT>(p, Qs, rw, Ks, lane);
            products_t<T, D, NJ, MT>(dp, Gs, rw, Vs, lane);
            // dS = P (dP - Dl_i), P = exp(s - lse_i) where j <= i < T, else 0; the masks only where a key of the
            // tile lies after the warp's first row, or a row is at T or past it
            auto grads = [&](auto mask) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int n = 0; n < NJ; n++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            float pe = fast_exp2(p[mt][n][e] * scale_log2 - lrow[mt][e >> 1]);
                            if constexpr (decltype(mask)::value) {
                                const int64_t j = j0 + n * 8 + 2 * t + (e & 1), i = row[mt][e >> 1];
                                if (!(j <= i && i < Tn)) pe = 0.f;
                            }
                            dp[mt][n][e] = pe * (dp[mt][n][e] - dlrow[mt][e >> 1]);
                        }
            };
            if (j0 + kBwdRows - 1 <= i0 + rw && i0 + rw + RW <= Tn) grads(masked<false>{});
            else grads(masked<true>{});
            accumulate<T, D, kBwdRows / 16, MT>(dq, dp, Ks, lane); // dq += dS K
        }
        __syncthreads(); // tile it is no longer read: its buffer takes tile it + 2
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            if (row[mt][r] >= Tn) continue;
            T *qrow = gq + row[mt][r] * gqL.st;
#pragma unroll
            for (int n = 0; n < ND; n++)
                *(uint32_t *)(qrow + n * 8 + 2 * t) =
                    lp<T>::pack(dq[mt][n][2 * r] * scale, dq[mt][n][2 * r + 1] * scale);
        }
}

// gq = scale * dqa, rounded to T, written where gqL says; dqa contiguous (BH,T,D). A thread per 2 elements.
template <typename T>
__global__ void mma_bwd_dq_store(const float *dqa, T *gq, weft_cu_heads gqL, int64_t N, int64_t Tn, int D,
                                 float scale) {
    for (int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; 2 * x < N;
         x += (int64_t)gridDim.x * blockDim.x) {
        const int64_t e = 2 * x, r = e / D, d = e - r * D; // D is even: a pair never crosses a row
        T *dst = gq + head_at(gqL, r / Tn) + (r % Tn) * gqL.st + d;
        *(uint32_t *)dst = lp<T>::pack(dqa[e] * scale, dqa[e + 1] * scale);
    }
}

} // namespace

// ---------------------------------------------------------------- launchers
#ifndef WEFT_CU_EMU
namespace {

template <typename T, int D, int MT>
cudaError_t fwd_launch_mt(const void *q, const void *k, const void *v, const weft_cu_heads *L, void *o, float *lse,
                          int64_t BH, int64_t Tn, double scale, cudaStream_t s) {
    const int64_t ntile = (Tn + kOwn * MT - 1) / (kOwn * MT);
    unsigned nb;
    if (!weft_cu_grid_of(BH, ntile, &nb)) return cudaErrorInvalidValue;
    const size_t smem = fwd_smem<T, D, MT>();
    cudaError_t e = weft_cu_smem_optin(mma_fwd<T, D, MT>, smem);
    if (e != cudaSuccess) return e;
    mma_fwd<T, D, MT><<<nb, kThreads, smem, s>>>((const T *)q, (const T *)k, (const T *)v, L[0], L[1], L[2], (T *)o,
                                                 L[4], lse, Tn, ntile, (float)scale * kLog2e);
    return cudaGetLastError();
}

template <typename T, int D>
cudaError_t fwd_launch(const void *q, const void *k, const void *v, const weft_cu_heads *L, void *o, float *lse,
                       int64_t BH, int64_t Tn, double scale, cudaStream_t s) {
    const char *e = getenv("WEFT_ATTN_FWD_ROWS"); // (read at every launch: the bench compares the two)
    if constexpr (fwd_mt_max<D>() == 2)
        if (e && atoi(e) == 128) return fwd_launch_mt<T, D, 2>(q, k, v, L, o, lse, BH, Tn, scale, s);
    return fwd_launch_mt<T, D, 1>(q, k, v, L, o, lse, BH, Tn, scale, s);
}

// The two deterministic backward kernels with MT 16-row blocks a warp (after mma_bwd_dl).
template <typename T, int D, int MT>
cudaError_t bwd_split(const void *q, const void *k, const void *v, const weft_cu_heads *L, const float *lse,
                      const void *go, const float *dl, void *gq, void *gk, void *gv, int64_t BH, int64_t Tn,
                      double scale, cudaStream_t s) {
    const int64_t ntile = (Tn + kOwn * MT - 1) / (kOwn * MT);
    unsigned nb;
    if (!weft_cu_grid_of(BH, ntile, &nb)) return cudaErrorInvalidValue;
    const size_t smem_kv = dkdv_smem<T, D, MT>(), smem_q = dq_smem<T, D, MT>();
    cudaError_t e;
    if ((e = weft_cu_smem_optin(mma_bwd_dkdv<T, D, MT>, smem_kv)) != cudaSuccess) return e;
    if ((e = weft_cu_smem_optin(mma_bwd_dq<T, D, MT>, smem_q)) != cudaSuccess) return e;
    mma_bwd_dkdv<T, D, MT><<<nb, kThreads, smem_kv, s>>>((const T *)q, (const T *)k, (const T *)v, lse,
                                                         (const T *)go, L[0], L[1], L[2], L[3], dl, (T *)gk, L[6],
                                                         (T *)gv, L[7], nullptr, Tn, ntile, (float)scale);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    mma_bwd_dq<T, D, MT><<<nb, kThreads, smem_q, s>>>((const T *)q, (const T *)k, (const T *)v, lse, (const T *)go,
                                                      L[0], L[1], L[2], L[3], dl, (T *)gq, L[5], Tn, ntile,
                                                      (float)scale);
    return cudaGetLastError();
}

template <typename T, int D>
cudaError_t bwd_launch(const void *q, const void *k, const void *v, const weft_cu_heads *L, const void *o,
                       const float *lse, const void *go, float *dl, float *dqa, void *gq, void *gk, void *gv,
                       int64_t BH, int64_t Tn, double scale, cudaStream_t s) {
    const int64_t ntile = (Tn + kOwn - 1) / kOwn;
    unsigned nb;
    if (!weft_cu_grid_of(BH, ntile, &nb)) return cudaErrorInvalidValue;
    const int64_t N = BH * Tn, dl_rows = 8 * (32 / (D / 8 < 8 ? D / 8 : 8)); // a block's rows: 8 warps
    int64_t ndl = (N + dl_rows - 1) / dl_rows; // grid-stride
    if (ndl > 65535 * 8) ndl = 65535 * 8;
    mma_bwd_dl<T, D><<<(unsigned)ndl, 256, 0, s>>>((const T *)go, L[3], (const T *)o, L[4], dl, N, Tn);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    if (dqa) { // one pass, dq by atomics into dqa (mma_bwd_dkdv with DQ), then scaled and rounded into gq
        if ((e = cudaMemsetAsync(dqa, 0, sizeof(float) * (size_t)(N * D), s)) != cudaSuccess) return e;
        const size_t smem = fused_bwd_smem<T, D>();
        if ((e = weft_cu_smem_optin(mma_bwd_dkdv<T, D, 1, true>, smem)) != cudaSuccess) return e;
        mma_bwd_dkdv<T, D, 1, true><<<nb, kThreads, smem, s>>>((const T *)q, (const T *)k, (const T *)v, lse,
                                                               (const T *)go, L[0], L[1], L[2], L[3], dl, (T *)gk,
                                                               L[6], (T *)gv, L[7], dqa, Tn, ntile, (float)scale);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
        int64_t nst = (N * D / 2 + 255) / 256;
        if (nst > 65535 * 8) nst = 65535 * 8;
        mma_bwd_dq_store<T><<<(unsigned)nst, 256, 0, s>>>(dqa, (T *)gq, L[5], N * D, Tn, D, (float)scale);
        return cudaGetLastError();
    }
    const char *rows = getenv("WEFT_ATTN_BWD_ROWS"); // (read at every launch: the bench compares the two)
    if constexpr (fwd_mt_max<D>() == 2)
        if (rows && atoi(rows) == 128) return bwd_split<T, D, 2>(q, k, v, L, lse, go, dl, gq, gk, gv, BH, Tn, scale, s);
    return bwd_split<T, D, 1>(q, k, v, L, lse, go, dl, gq, gk, gv, BH, Tn, scale, s);
}

#define MMA_DISPATCH_D(T, fn, D, ...)                   \
    switch (D) {                                        \
    case 16: return fn<T, 16>(__VA_ARGS__);             \
    case 32: return fn<T, 32>(__VA_ARGS__);             \
    case 64: return fn<T, 64>(__VA_ARGS__);             \
    case 128: return fn<T, 128>(__VA_ARGS__);           \
    default: return cudaErrorInvalidValue;              \
    }

} // namespace

extern "C" int weft_cu_attention_mma_supports(int dtype, int64_t D) {
    return (dtype == WEFT_CU_BF16 || dtype == WEFT_CU_F16) && (D == 16 || D == 32 || D == 64 || D == 128);
}

extern "C" cudaError_t weft_cu_causal_attention_mma(const void *q, const void *k, const void *v,
                                                    const weft_cu_heads *L, void *o, float *lse, int dtype, int64_t BH,
                                                    int64_t T, int64_t D, double scale, cudaStream_t s) {
    if (!weft_cu_attention_mma_supports(dtype, D) || BH < 0 || T < 0) return cudaErrorInvalidValue;
    if (BH == 0 || T == 0) return cudaSuccess;
    if (dtype == WEFT_CU_BF16) MMA_DISPATCH_D(__nv_bfloat16, fwd_launch, D, q, k, v, L, o, lse, BH, T, scale, s)
    MMA_DISPATCH_D(__half, fwd_launch, D, q, k, v, L, o, lse, BH, T, scale, s)
}

extern "C" cudaError_t weft_cu_causal_attention_mma_backward(const void *q, const void *k, const void *v,
                                                             const weft_cu_heads *L, const void *o, const float *lse,
                                                             const void *go, float *dl, float *dq_acc, void *gq,
                                                             void *gk, void *gv, int dtype, int64_t BH, int64_t T,
                                                             int64_t D, double scale, cudaStream_t s) {
    if (!weft_cu_attention_mma_supports(dtype, D) || BH < 0 || T < 0) return cudaErrorInvalidValue;
    if (BH == 0 || T == 0) return cudaSuccess;
    if (dtype == WEFT_CU_BF16)
        MMA_DISPATCH_D(__nv_bfloat16, bwd_launch, D, q, k, v, L, o, lse, go, dl, dq_acc, gq, gk, gv, BH, T, scale, s)
    MMA_DISPATCH_D(__half, bwd_launch, D, q, k, v, L, o, lse, go, dl, dq_acc, gq, gk, gv, BH, T, scale, s)
}
#endif
