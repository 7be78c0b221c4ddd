// Internal helpers of the data module: deterministic hashing for shuffles and
// random windows (independent of thread count and of weft's generator state).
#ifndef WEFT_DATA_IMPL_H
#define WEFT_DATA_IMPL_H

#include <stdint.h>

// splitmix64 finaliser: a bijective mix with good avalanche.
static inline uint64_t weft_data_mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// A stream key from two words (seed, counter): distinct pairs give unrelated keys.
static inline uint64_t weft_data_key(uint64_t a, uint64_t b) {
    return weft_data_mix(weft_data_mix(a) ^ (b * 0xD6E8FEB86659FD93ull + 0x632BE59BD9B4E019ull));
}

// Next value of a splitmix64 stream.
static inline uint64_t weft_data_next(uint64_t *state) {
    *state += 0x9E3779B97F4A7C15ull;
    uint64_t z = *state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// r mapped to [0, n) by a 128-bit multiply (bias below n / 2^64).
static inline uint64_t weft_data_bounded(uint64_t r, uint64_t n) {
    return (uint64_t)(((unsigned __int128)r * n) >> 64);
}

#endif
