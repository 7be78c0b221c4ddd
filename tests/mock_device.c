// A stand-in accelerator for tests on machines without a GPU.
//
// wt_accelerator() gives the tests of device paths (graph mode, DDP, the
// parameter server, clipping, optimiser updates, loaders under a non-CPU
// default device) one device to run on everywhere: the real cuda:0 where a
// GPU is present, else a mock registered as cuda:0. The mock's memory is host
// memory from its own allocator (so a tensor there is NOT a CPU tensor to the
// library: every host read goes through the device's copy path, every op
// through the CUDA column of the op table), and its kernels are the CPU
// kernels copied into that column. What it checks: that device paths pick
// the right device for every tensor, stage host data where they must, and
// give the CPU's numbers. What it cannot check: a host pointer dereferenced
// on device memory (the mock's memory is readable from the host), streams,
// and the CUDA kernels themselves (tests/cuda/ on a GPU machine).
#include <stdlib.h>
#include <string.h>

#include "device/device_impl.h"
#include "ops/op.h"
#include "tensor/tensor_impl.h"
#include "weft_test.h"

weft_status weft_cpu_copy(weft_tensor *dst, const weft_tensor *src); // src/ops/cpu/copy.c

// Allocations carry a header with their size, for the statistics.
typedef struct mock_hdr {
    size_t n;
    size_t pad[7]; // keep the payload 64-byte aligned
} mock_hdr;

static weft_memory_stats g_stats;

static int mock_count(void) { return 1; }
static void *mock_alloc(int index, size_t n) {
    (void)index;
    mock_hdr *h = aligned_alloc(64, sizeof(mock_hdr) + ((n + 63) & ~(size_t)63));
    if (!h) return NULL;
    h->n = n;
    g_stats.bytes_in_use += n;
    if (g_stats.bytes_in_use > g_stats.peak_bytes_in_use) g_stats.peak_bytes_in_use = g_stats.bytes_in_use;
    g_stats.n_allocs++, g_stats.n_system_allocs++;
    // Fresh device memory is not zeroed: fill it with a NaN pattern so code
    // that reads memory it never wrote gives wrong numbers, not lucky zeros.
    memset(h + 1, 0xff, n);
    return h + 1;
}
static void mock_free(int index, void *p, size_t n) {
    (void)index;
    (void)n;
    if (!p) return;
    mock_hdr *h = (mock_hdr *)p - 1;
    g_stats.bytes_in_use -= h->n;
    g_stats.n_system_frees++;
    free(h);
}
static void mock_stats(int index, weft_memory_stats *out) {
    (void)index;
    *out = g_stats;
}
static void mock_reset_peak(int index) {
    (void)index;
    g_stats.peak_bytes_in_use = g_stats.bytes_in_use;
}
static void mock_empty_cache(int index) { (void)index; }

static weft_device_impl g_mock;

bool wt_accelerator(weft_device *dev, bool *mock) {
    *dev = (weft_device){WEFT_CUDA, 0};
    if (mock) *mock = true;
    if (g_mock.name) return true;           // installed already (it counts as one CUDA device now)
    if (weft_device_count(WEFT_CUDA) > 0) { // a real GPU: test on it
        if (mock) *mock = false;
        return true;
    }
    g_mock = weft_cpu_device_impl; // host memcpy, one stream, events always done
    g_mock.name = "cuda";
    g_mock.count = mock_count;
    g_mock.alloc = mock_alloc;
    g_mock.free = mock_free;
    g_mock.memory_stats = mock_stats;
    g_mock.memory_reset_peak = mock_reset_peak;
    g_mock.memory_empty_cache = mock_empty_cache;
    g_mock.memory_tag = NULL; // its own allocator keeps no kinds (the CPU's would misread its blocks)
    if (weft_device_register(WEFT_CUDA, &g_mock) != WEFT_OK) return false;
    // The CUDA column (filled at start-up even without a GPU) becomes the CPU's.
    for (int i = 0; weft_op_at(i); i++) {
        const weft_op_def *op = weft_op_at(i);
        weft_op_register_kernel(op->name, WEFT_CUDA, op->kernel[WEFT_CPU].fn, op->kernel[WEFT_CPU].dtypes);
    }
    weft_tensor_copy_register(WEFT_CUDA, weft_cpu_copy);
    return true;
}
