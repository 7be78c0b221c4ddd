// Helpers for the CUDA tests: skip without a GPU, and run one function on
// CPU inputs and on copies of them on cuda:0, comparing the outputs and
// (optionally) the input gradients of a weighted sum of the output.
//
// Each CUDA test's main starts with WT_CUDA_OR_SKIP(): on a machine without
// a GPU (CI) the binary prints why and exits 77, which ctest reports as
// skipped (SKIP_RETURN_CODE in CMakeLists.txt).
#ifndef WEFT_CUDA_TEST_H
#define WEFT_CUDA_TEST_H

#include <stdlib.h>
#include <string.h>
#include <weft/device.h>

#include "weft_test.h"

#define WT_CUDA0 ((weft_device){WEFT_CUDA, 0})

#define WT_CUDA_OR_SKIP()                                                                 \
    do {                                                                                  \
        if (weft_device_count(WEFT_CUDA) < 1) {                                           \
            weft_device _d = WT_CUDA0;                                                    \
            weft_device_synchronize(_d); /* sets the error that says why */               \
            printf("skipped: no CUDA device (%s)\n", weft_last_error());                  \
            return 77;                                                                    \
        }                                                                                 \
    } while (0)

// out = f(in[0..n)); may return NULL (then the CUDA side must fail too).
typedef weft_tensor *(*wt_cuda_fn)(weft_tensor *const *in, void *ctx);

// Runs f on the CPU inputs and on their cuda:0 copies. Checks that the CUDA
// output lives on cuda:0 and equals the CPU one within tol (relative +
// absolute, as wt_check_same). With backward: every float input becomes a
// leaf that requires grad on both devices, loss = sum(out * w) for a fixed
// random w of out's shape, and the input gradients must agree within tol.
static inline void wt_cuda_compare(const char *what, wt_cuda_fn f, void *ctx, int n, weft_tensor *const *cpu_in,
                                   double tol, bool backward) {
    weft_tensor *hc[16], *dc[16];
    char buf[160];
    for (int i = 0; i < n; i++) {
        hc[i] = weft_tensor_detach(cpu_in[i]);
        dc[i] = weft_tensor_to(hc[i], WT_CUDA0);
        CHECK(dc[i] != NULL);
        if (!dc[i]) return;
        if (backward && weft_dtype_is_float(weft_tensor_dtype(hc[i]))) {
            weft_tensor_set_requires_grad(hc[i], true);
            weft_tensor_set_requires_grad(dc[i], true);
        }
    }
    weft_tensor *ho = f(hc, ctx), *dout = f(dc, ctx);
    snprintf(buf, sizeof buf, "%s: forward", what);
    if (!ho) {
        CHECK(dout == NULL); // an error on the CPU is an error on CUDA too
    } else {
        CHECK(dout != NULL);
        if (dout) {
            CHECK(weft_device_equal(weft_tensor_device(dout), WT_CUDA0));
            wt_check_same(buf, dout, ho, tol);
        }
    }
    if (backward && ho && dout && weft_dtype_is_float(weft_tensor_dtype(ho))) {
        int64_t m = weft_tensor_numel(ho);
        double *wv = malloc(sizeof(double) * (size_t)(m ? m : 1));
        wt_vals(wv, m, -1, 1, 12345);
        weft_tensor *w64 = weft_tensor_from_data(wv, 1, &m, WEFT_F64);
        weft_tensor *wh = weft_cast(w64, weft_tensor_dtype(ho));
        weft_tensor *whv = weft_view(wh, weft_tensor_ndim(ho), weft_tensor_sizes(ho));
        weft_tensor *wd = weft_tensor_to(whv, WT_CUDA0);
        weft_tensor *mh = weft_mul(ho, whv), *md = weft_mul(dout, wd);
        weft_tensor *lh = weft_sum(mh, 0, NULL, false), *ld = weft_sum(md, 0, NULL, false);
        CHECK(lh && ld && weft_backward(lh, NULL, NULL) == WEFT_OK && weft_backward(ld, NULL, NULL) == WEFT_OK);
        for (int i = 0; i < n; i++) {
            if (!weft_tensor_requires_grad(hc[i])) continue;
            weft_tensor *gh = weft_tensor_grad(hc[i]), *gd = weft_tensor_grad(dc[i]);
            snprintf(buf, sizeof buf, "%s: grad of input %d", what, i);
            if (!gh) {
                CHECK(gd == NULL);
                continue;
            }
            CHECK(gd != NULL);
            if (gd) {
                CHECK(weft_device_equal(weft_tensor_device(gd), WT_CUDA0));
                wt_check_same(buf, gd, gh, tol);
            }
        }
        free(wv);
        weft_tensor_free(w64);
        weft_tensor_free(wh);
        weft_tensor_free(whv);
        weft_tensor_free(wd);
        weft_tensor_free(mh);
        weft_tensor_free(md);
        weft_tensor_free(lh);
        weft_tensor_free(ld);
    }
    weft_tensor_free(ho);
    weft_tensor_free(dout);
    for (int i = 0; i < n; i++) {
        weft_tensor_free(hc[i]);
        weft_tensor_free(dc[i]);
    }
}

#endif
