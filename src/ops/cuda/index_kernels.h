// Launchers of index_kernels.cu (plain C prototypes): the index family's
// gathers and scatter-adds. Index arrays are contiguous int64 on the device;
// weft_cu_index_check reports a bad value to the host (cuda_report.h), and
// the gathers and adds skip it (a zero read, nothing added).
#ifndef WEFT_CU_INDEX_KERNELS_H
#define WEFT_CU_INDEX_KERNELS_H

#include "cu_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// Reports an idx[i] outside [0, limit) into rep as op `what` (a static
// string), the first one the kernel finds; the host does not wait.
cudaError_t weft_cu_index_check(const int64_t *idx, int64_t n, int64_t limit, weft_cuda_report *rep,
                                const char *what, cudaStream_t s);

// out (contiguous, src.numel elements of src.dtype) = src read at each logical
// position of src.sizes, the coordinate along dim replaced by an index value:
//   per_elem = 0: idx[coordinate along dim] (index_select, embedding)
//   per_elem = 1: idx[position]             (gather: idx has src.sizes)
// src carries the OUTPUT's sizes and the source tensor's strides; limit is
// the source's size along dim (a value outside [0, limit) reads 0). Any dtype.
cudaError_t weft_cu_index_take(void *out, weft_cu_tensor src, int dim, int64_t limit, const int64_t *idx,
                               int per_elem, cudaStream_t s);

// For each logical position of src.sizes: dst at the same coordinates, the
// one along dim replaced as in weft_cu_index_take, += src (atomic: repeated
// indices accumulate). dst carries src's sizes and the destination's strides;
// limit is the destination's size along dim (a value outside [0, limit) adds
// nothing). f32, f64, i32, i64.
cudaError_t weft_cu_index_add(weft_cu_tensor dst, weft_cu_tensor src, int dim, int64_t limit, const int64_t *idx,
                              int per_elem, cudaStream_t s);

// topk: out (contiguous: x.sizes with k along dim, int64) = each row's positions along dim, best first (largest:
// greater first, NaN before numbers; else less first, NaN last; ties: the lower position first), as cpu/index.c.
// One thread a row picks k times the best element after the previous pick: O(k n) a row. f32, f64, i32, i64.
cudaError_t weft_cu_topk(int64_t *out, weft_cu_tensor x, int dim, int64_t k, int largest, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
