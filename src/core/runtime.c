// Runtime settings: CPU thread count (WEFT_NUM_THREADS, default = cores),
// shared by our OpenMP kernels and OpenBLAS.
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <cblas.h>

#include "core_impl.h"

static int g_threads = 0;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void apply_threads(int n) {
    g_threads = n;
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
    openblas_set_num_threads(n);
}

static void init_once(void) {
    int n = 0;
    const char *s = getenv("WEFT_NUM_THREADS");
    if (s && *s) n = atoi(s);
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    apply_threads(n);
}

void weft_runtime_init(void) { pthread_once(&g_once, init_once); }

int weft_num_threads(void) {
    weft_runtime_init();
#ifdef _OPENMP
    // Inside a parallel region (the graph executor's co-scheduled pairs) a
    // kernel gets one thread: nested regions would not start more anyway,
    // and a kernel that splits work by this count must not expect a team.
    if (omp_in_parallel()) return 1;
#endif
    return g_threads;
}

void weft_set_num_threads(int n) {
    weft_runtime_init();
    if (n > 0) apply_threads(n);
}
