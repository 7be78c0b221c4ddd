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
        // an error on the CPU is an error on CUDA too: at the op, or (a bad index
        // or target, found by a kernel) at the next wait for the device
        CHECK(dout == NULL || weft_device_synchronize(WT_CUDA0) != WEFT_OK);
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

// Runs f on the f64 inputs cast to dt on dev; res[0] is its output and res[1 + i] input i's gradient of
// sum(f64(out) * w) (w from wt_vals, as in wt_cuda_compare, in f64), all as f64 values (malloc'd; NULL where
// none).
static inline bool wt_run_as(wt_cuda_fn f, void *ctx, int n, weft_tensor *const *in64, weft_dtype dt,
                             weft_device dev, double **res, int64_t *len) {
    weft_tensor *in[16] = {0}, *o = NULL, *w = NULL, *m = NULL, *l = NULL;
    bool ok = true;
    for (int i = 0; i <= n; i++) res[i] = NULL;
    for (int i = 0; i < n && ok; i++) {
        weft_tensor *c = weft_cast(in64[i], dt), *d = c ? weft_tensor_to(c, dev) : NULL;
        in[i] = d ? weft_tensor_detach(d) : NULL; // a leaf, whatever cast and to returned
        weft_tensor_free(c);
        weft_tensor_free(d);
        ok = in[i] != NULL;
        if (ok) weft_tensor_set_requires_grad(in[i], true);
    }
    if (ok) ok = (o = f(in, ctx)) != NULL;
    if (ok) { // the loss in f64 (the half types have no elementwise kernels): sum(f64(out) * w)
        int64_t k = weft_tensor_numel(o);
        double *wv = malloc(sizeof(double) * (size_t)(k ? k : 1));
        wt_vals(wv, k, -1, 1, 12345);
        weft_tensor *w64 = weft_tensor_from_data(wv, weft_tensor_ndim(o), weft_tensor_sizes(o), WEFT_F64);
        weft_tensor *o64 = weft_cast(o, WEFT_F64);
        w = w64 ? weft_tensor_to(w64, dev) : NULL;
        free(wv);
        weft_tensor_free(w64);
        ok = o64 && w && (m = weft_mul(o64, w)) && (l = weft_sum(m, 0, NULL, false)) &&
             weft_backward(l, NULL, NULL) == WEFT_OK;
        weft_tensor_free(o64);
    }
    for (int i = 0; i <= n && ok; i++) {
        weft_tensor *t = i == 0 ? o : weft_tensor_grad(in[i - 1]);
        if (!t) continue;
        len[i] = weft_tensor_numel(t);
        res[i] = malloc(sizeof(double) * (size_t)(len[i] ? len[i] : 1));
        weft_tensor_to_f64(t, res[i], len[i]);
    }
    weft_tensor *ts[] = {o, w, m, l};
    for (int i = 0; i < 4; i++) weft_tensor_free(ts[i]);
    for (int i = 0; i < n; i++) weft_tensor_free(in[i]);
    return ok;
}

// For results that f32 rounding moves far from the exact value (a long recurrence, a large sum): the
// output and every input gradient of f in f32 on CUDA must be as close to the f64 result on the CPU as
// the f32 result on the CPU is, within `margin` times its largest error (plus 1e-6 of the largest
// reference value). Prints both errors. dev is WT_CUDA0 in the tests (the CPU gives a self-check).
static inline void wt_cuda_compare_f64(const char *what, wt_cuda_fn f, void *ctx, int n, weft_tensor *const *in64,
                                       double margin, weft_device dev) {
    double *ref[17] = {0}, *cpu[17] = {0}, *acc[17] = {0};
    int64_t len[17] = {0}, l2[17] = {0}, l3[17] = {0};
    bool ok = wt_run_as(f, ctx, n, in64, WEFT_F64, WEFT_DEVICE_CPU, ref, len) &&
              wt_run_as(f, ctx, n, in64, WEFT_F32, WEFT_DEVICE_CPU, cpu, l2) &&
              wt_run_as(f, ctx, n, in64, WEFT_F32, dev, acc, l3);
    CHECK(ok);
    for (int i = 0; i <= n && ok; i++) {
        if (!ref[i]) continue;
        CHECK(cpu[i] && acc[i] && l2[i] == len[i] && l3[i] == len[i]);
        if (!cpu[i] || !acc[i]) continue;
        double ec = 0, ed = 0, big = 0;
        int64_t at = 0;
        for (int64_t j = 0; j < len[i]; j++) {
            double a = fabs(cpu[i][j] - ref[i][j]), b = fabs(acc[i][j] - ref[i][j]);
            ec = a > ec ? a : ec;
            if (!(b <= ed)) at = j; // NaN counts as worst
            ed = b > ed || isnan(b) ? b : ed;
            big = fabs(ref[i][j]) > big ? fabs(ref[i][j]) : big;
        }
        bool good = ed <= margin * ec + 1e-6 * big;
        printf("%s: %s: largest error against f64: cpu f32 %.3g, %s f32 %.3g (of values up to %.3g)%s\n", what,
               i == 0 ? "output" : "gradient", ec, dev.type == WEFT_CPU ? "cpu" : "cuda", ed, big,
               good ? "" : " FAIL");
        if (!good)
            fprintf(stderr, "%s: %s %d: element %lld: %.17g, f64 %.17g, cpu f32 %.17g\n", what,
                    i == 0 ? "output" : "gradient of input", i - 1, (long long)at, acc[i][at], ref[i][at], cpu[i][at]);
        CHECK(good);
    }
    for (int i = 0; i <= n; i++) {
        free(ref[i]);
        free(cpu[i]);
        free(acc[i]);
    }
}

#endif
