// Helpers for benchmark binaries (see bench/run.sh for the output protocol).
#ifndef WEFT_BENCH_UTIL_H
#define WEFT_BENCH_UTIL_H

#include <stdio.h>
#include <string.h>
#include <time.h>

static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// True when the benchmark `name` is selected by the filter (argv[1], may be empty).
static inline int bench_selected(int argc, char **argv, const char *name) {
    return argc < 2 || !argv[1][0] || strstr(name, argv[1]) != NULL;
}

// Median-free but robust enough: run fn until `min_s` seconds elapsed (at
// least `min_iter` times), repeat `reps` times, return the best seconds per call.
#define BENCH_BEST(result, reps, min_iter, min_s, ...)                     \
    do {                                                                   \
        double best_ = 1e30;                                               \
        for (int r_ = 0; r_ < (reps); r_++) {                              \
            long it_ = 0;                                                  \
            double t0_ = bench_now(), el_;                                 \
            do {                                                           \
                __VA_ARGS__;                                               \
                it_++;                                                     \
                el_ = bench_now() - t0_;                                   \
            } while (it_ < (min_iter) || el_ < (min_s));                   \
            if (el_ / (double)it_ < best_) best_ = el_ / (double)it_;      \
        }                                                                  \
        (result) = best_;                                                  \
    } while (0)

static inline void bench_report(const char *name, double value, const char *unit, int higher_is_better) {
    printf("%s %.4g %s %d\n", name, value, unit, higher_is_better);
    fflush(stdout);
}

// Same, with a peer measured in this binary (e.g. OpenBLAS called directly).
static inline void bench_report_peer(const char *name, double value, const char *unit, int higher_is_better,
                                     double peer) {
    printf("%s %.4g %s %d %.4g\n", name, value, unit, higher_is_better, peer);
    fflush(stdout);
}

#endif
