// Launchers of index_kernels.cu (plain C prototypes): the index family's
// gathers and scatter-adds. Index arrays are contiguous int64 on the device,
// already checked to lie in range (weft_cu_index_check).
#ifndef WEFT_CU_INDEX_KERNELS_H
#define WEFT_CU_INDEX_KERNELS_H

#include "cu_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// *bad = the smallest i with idx[i] outside [0, limit), or UINT64_MAX when
// there is none (bad is device memory; the launcher sets it first).
cudaError_t weft_cu_index_check(const int64_t *idx, int64_t n, int64_t limit, unsigned long long *bad,
                                cudaStream_t s);

// out (contiguous, src.numel elements of src.dtype) = src read at each logical
// position of src.sizes, the coordinate along dim replaced by an index value:
//   per_elem = 0: idx[coordinate along dim] (index_select, embedding)
//   per_elem = 1: idx[position]             (gather: idx has src.sizes)
// src carries the OUTPUT's sizes and the source tensor's strides. Any dtype.
cudaError_t weft_cu_index_take(void *out, weft_cu_tensor src, int dim, const int64_t *idx, int per_elem,
                               cudaStream_t s);

// For each logical position of src.sizes: dst at the same coordinates, the
// one along dim replaced as in weft_cu_index_take, += src (atomic: repeated
// indices accumulate). dst carries src's sizes and the destination's strides.
// f32, f64, i32, i64.
cudaError_t weft_cu_index_add(weft_cu_tensor dst, weft_cu_tensor src, int dim, const int64_t *idx, int per_elem,
                              cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
