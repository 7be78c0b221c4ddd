// needs: cuda
// Memory-bound kernels on the GPU at 64 MB, in GB/s of bytes read plus bytes written, against the
// device's copy bandwidth measured in the same run (cudaMemcpyAsync device to device, 64 MB):
//   copy_bandwidth_cuda       weft_tensor_clone of a contiguous f32 tensor (the copy op)
//   cast_bandwidth_cuda       f32 -> bf16 (autocast's cast), 16M elements
//   add_bandwidth_cuda        f32 + f32 -> f32, 16M elements
//   bias_add_bandwidth_cuda   (16384,1024) + (1024) broadcast (the strided path)
//   transpose_bandwidth_cuda  (4096,4096) f32 transposed, made contiguous (a strided copy)
//   add_bf16_bandwidth_cuda   bf16 + bf16 -> bf16, 32M elements (the elementwise family on the autocast dtype)
//   gelu_bf16_bandwidth_cuda  gelu of bf16, 32M elements (the MLP's activation under autocast)
// Goal (issue 16): >= 0.8 of the copy bandwidth. Without a GPU it prints a note and no lines.
#include <cuda_runtime.h>
#include <weft.h>
#include <weft/device.h>

#include "bench_util.h"

static const weft_device k_cu = {WEFT_CUDA, 0};

// seconds per call of f (the device idle at the end of each timed call)
#define TIME(t, ...) BENCH_BEST(t, 3, 20, 0.3, { __VA_ARGS__; weft_device_synchronize(k_cu); })

static weft_tensor *dev_rand(int nd, const int64_t *sizes) {
    weft_tensor *h = weft_tensor_rand(nd, sizes, WEFT_F32, NULL), *d = h ? weft_tensor_to(h, k_cu) : NULL;
    weft_tensor_free(h);
    return d;
}

int main(int argc, char **argv) {
    if (weft_device_count(WEFT_CUDA) < 1) {
        fprintf(stderr, "cuda_bandwidth: no CUDA device; nothing measured\n");
        return 0;
    }
    const int64_t n = (int64_t)16 << 20; // 16M f32 = 64 MB
    weft_tensor *a = dev_rand(1, &n), *b = dev_rand(1, &n);
    weft_tensor *m = dev_rand(WEFT_DIMS(4096, 4096)), *bias = dev_rand(WEFT_DIMS(1024));
    if (!a || !b || !m || !bias) {
        fprintf(stderr, "cuda_bandwidth: %s\n", weft_last_error());
        return 1;
    }
    weft_tensor *rows = weft_view(a, WEFT_DIMS(16384, 1024));
    double t, peak;
    void *dst = weft_tensor_device_ptr(b), *src = weft_tensor_device_ptr(a);
    BENCH_BEST(peak, 3, 20, 0.3, {
        cudaMemcpyAsync(dst, src, (size_t)n * 4, cudaMemcpyDeviceToDevice, 0);
        cudaDeviceSynchronize();
    });
    double peak_gbs = 2.0 * (double)n * 4 / peak * 1e-9;
    int fail = 0;
#define RUN(name, bytes, expr)                                                                \
    if (bench_selected(argc, argv, name)) {                                                   \
        weft_tensor *res_ = NULL;                                                               \
        TIME(t, weft_tensor_free(res_); res_ = (expr));                                           \
        if (!res_) {                                                                            \
            fprintf(stderr, "%s: %s\n", name, weft_last_error());                             \
            fail = 1;                                                                         \
        } else {                                                                              \
            bench_report_peer(name, (double)(bytes) / t * 1e-9, "GB/s", 1, peak_gbs);         \
        }                                                                                     \
        weft_tensor_free(res_);                                                                 \
    }
    RUN("copy_bandwidth_cuda", 2.0 * n * 4, weft_tensor_clone(a));
    RUN("cast_bandwidth_cuda", (double)n * (4 + 2), weft_cast(a, WEFT_BF16));
    RUN("add_bandwidth_cuda", 3.0 * n * 4, weft_add(a, b));
    RUN("bias_add_bandwidth_cuda", 2.0 * n * 4, weft_add(rows, bias));
    weft_tensor *mt = weft_transpose(m, 0, 1);
    RUN("transpose_bandwidth_cuda", 2.0 * 4096 * 4096 * 4, weft_tensor_contiguous(mt));
    // 64 MB of bf16 each (twice the elements)
    const int64_t n2 = 2 * n;
    weft_tensor *fa = dev_rand(1, &n2), *fb = dev_rand(1, &n2);
    weft_tensor *ah = fa ? weft_cast(fa, WEFT_BF16) : NULL, *bh = fb ? weft_cast(fb, WEFT_BF16) : NULL;
    weft_tensor_free(fa);
    weft_tensor_free(fb);
    if (!ah || !bh) fail = 1;
    if (ah && bh) {
        RUN("add_bf16_bandwidth_cuda", 3.0 * n2 * 2, weft_add(ah, bh));
        RUN("gelu_bf16_bandwidth_cuda", 2.0 * n2 * 2, weft_gelu(ah));
    }
#undef RUN
    weft_tensor *all[] = {a, b, m, bias, rows, mt, ah, bh};
    for (int i = 0; i < 8; i++) weft_tensor_free(all[i]);
    return fail;
}
