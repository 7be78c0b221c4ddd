// Shared between the index op entries (def_index.c) and their kernels (cpu/index.c).
#ifndef WEFT_INDEX_H
#define WEFT_INDEX_H

#include "op.h"

// attrs (dims already normalised by the public constructors):
//   embedding             in {weight (V,D), indices}          -> (..., D)
//   embedding_backward    in {g (..., D), indices}, i[0] = V   -> (V, D)
//   index_select          in {t, index (n)}, i[0] = dim        -> t with size n at dim
//   index_select_backward in {g, index (n)}, i[0] = dim, i[1] = size of dim in the input
//   gather                in {t, index}, i[0] = dim            -> index's shape
//   scatter_add           in {t, index, src}, i[0] = dim       -> t's shape
//   concat                in {t0, t1, ...}, i[0] = dim
weft_status weft_cpu_embedding(const weft_op_args *a);
weft_status weft_cpu_embedding_backward(const weft_op_args *a);
weft_status weft_cpu_index_select(const weft_op_args *a);
weft_status weft_cpu_index_select_backward(const weft_op_args *a);
weft_status weft_cpu_gather(const weft_op_args *a);
weft_status weft_cpu_scatter_add(const weft_op_args *a);
weft_status weft_cpu_topk(const weft_op_args *a);
weft_status weft_cpu_concat(const weft_op_args *a);

#endif
