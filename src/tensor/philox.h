// Philox4x32-10 (Salmon et al. 2011) and its 53-bit uniform, written once for
// the host (tensor/random.c, cpu/dropout.c) and for CUDA kernels
// (ops/cuda/nn_kernels.cu), so every device draws the same numbers for the
// same (key, counter). Plain C; nvcc compiles it for both sides.
#ifndef WEFT_PHILOX_H
#define WEFT_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define WEFT_HOST_DEVICE static __host__ __device__ __forceinline__
#else
#define WEFT_HOST_DEVICE static inline
#endif

// 4 random words for counter (chi, clo) under key.
WEFT_HOST_DEVICE void weft_philox4x32(uint64_t key, uint64_t chi, uint64_t clo, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)clo, c1 = (uint32_t)(clo >> 32), c2 = (uint32_t)chi, c3 = (uint32_t)(chi >> 32);
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (uint32_t)p1;
        c2 = n2;
        c3 = (uint32_t)p0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

// A uniform double in [0,1) from two words (53 random bits; exact).
WEFT_HOST_DEVICE double weft_philox_u01(uint32_t a, uint32_t b) {
    return (double)(((uint64_t)a << 21) ^ (b >> 11)) * (1.0 / 9007199254740992.0);
}

#endif
