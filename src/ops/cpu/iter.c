// The strided iterator (see iter.h).
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "iter.h"

void weft_iter_init(weft_iter *it, weft_tensor *out, int n_in, weft_tensor *const *in) {
    int nd = out->ndim, nops = 1 + n_in;
    it->nops = nops;
    it->numel = out->numel;
    int64_t sizes[WEFT_MAX_DIMS], st[WEFT_ITER_MAX_OPS][WEFT_MAX_DIMS];
    const weft_tensor *ops[WEFT_ITER_MAX_OPS];
    ops[0] = out;
    for (int k = 0; k < n_in; k++) ops[k + 1] = in[k];
    for (int k = 0; k < nops; k++) {
        const weft_tensor *t = ops[k];
        int64_t esz = (int64_t)weft_dtype_size((weft_dtype)t->dtype);
        it->base[k] = weft_tensor_ptr(t);
        int lead = nd - t->ndim; // t is right-aligned against out
        for (int d = 0; d < nd; d++) {
            int td = d - lead;
            st[k][d] = (td < 0 || t->sizes[td] == 1) ? 0 : t->strides[td] * esz;
        }
    }
    memcpy(sizes, out->sizes, sizeof(int64_t) * (size_t)nd);
    // Drop size-1 dims, then merge dim d into d+1 when every operand is contiguous across them.
    int m = 0;
    int64_t ms[WEFT_MAX_DIMS], mst[WEFT_ITER_MAX_OPS][WEFT_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        if (sizes[d] == 1) continue;
        if (m > 0) {
            bool merge = true;
            for (int k = 0; k < nops; k++)
                if (mst[k][m - 1] != st[k][d] * sizes[d]) merge = false;
            if (merge) {
                ms[m - 1] *= sizes[d];
                for (int k = 0; k < nops; k++) mst[k][m - 1] = st[k][d];
                continue;
            }
        }
        ms[m] = sizes[d];
        for (int k = 0; k < nops; k++) mst[k][m] = st[k][d];
        m++;
    }
    if (m == 0) { // scalar or all size-1
        ms[0] = 1;
        for (int k = 0; k < nops; k++) mst[k][0] = 0;
        m = 1;
    }
    it->ndim = m;
    memcpy(it->sizes, ms, sizeof(int64_t) * (size_t)m);
    for (int k = 0; k < nops; k++) memcpy(it->strides[k], mst[k], sizeof(int64_t) * (size_t)m);
}

void weft_iter_run_range(const weft_iter *it, int64_t start, int64_t end, weft_loop_fn fn, const void *ctx) {
    // Empty ranges (and empty tensors, whose sizes contain a 0) do nothing:
    // the index decomposition below would divide by that 0.
    if (start >= end || it->numel <= 0) return;
    int nd = it->ndim, nops = it->nops;
    int64_t inner = it->sizes[nd - 1];
    int64_t idx[WEFT_MAX_DIMS];
    int64_t rem = start;
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = rem % it->sizes[d];
        rem /= it->sizes[d];
    }
    char *p[WEFT_ITER_MAX_OPS];
    int64_t s[WEFT_ITER_MAX_OPS];
    for (int k = 0; k < nops; k++) {
        int64_t off = 0;
        for (int d = 0; d < nd; d++) off += idx[d] * it->strides[k][d];
        p[k] = it->base[k] + off;
        s[k] = it->strides[k][nd - 1];
    }
    int64_t pos = start;
    while (pos < end) {
        int64_t n = inner - idx[nd - 1];
        if (n > end - pos) n = end - pos;
        fn(p, s, n, ctx);
        pos += n;
        if (pos >= end) break;
        // advance to the start of the next row
        idx[nd - 1] += n;
        for (int k = 0; k < nops; k++) p[k] += n * s[k];
        for (int d = nd - 1; d > 0 && idx[d] == it->sizes[d]; d--) {
            for (int k = 0; k < nops; k++) p[k] += it->strides[k][d - 1] - it->sizes[d] * it->strides[k][d];
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

void weft_iter_run_serial(const weft_iter *it, weft_loop_fn fn, const void *ctx) {
    if (it->numel > 0) weft_iter_run_range(it, 0, it->numel, fn, ctx);
}

void weft_iter_run(const weft_iter *it, weft_loop_fn fn, const void *ctx) {
    int64_t n = it->numel;
    if (n <= 0) return;
    int nt = weft_num_threads();
    if (nt <= 1 || n < 2 * WEFT_PAR_GRAIN) {
        weft_iter_run_range(it, 0, n, fn, ctx);
        return;
    }
    int64_t chunks = n / WEFT_PAR_GRAIN;
    if (chunks > nt) chunks = nt;
#pragma omp parallel for num_threads((int)chunks) schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
        // chunk boundaries on 64-element multiples keep vector loops aligned
        int64_t a = (n * c / chunks) & ~(int64_t)63, b = c + 1 == chunks ? n : (n * (c + 1) / chunks) & ~(int64_t)63;
        weft_iter_run_range(it, a, b, fn, ctx);
    }
}
