// ONNX interchange internals, shared by onnx_import.c (an ONNX model -> a
// weft graph), onnx_export.c (a weft graph -> an ONNX model) and
// onnx_tensor.c (tensors both ways, whole-file reads). The protobuf structs
// are protobuf-c's, generated at build time from third_party/onnx/onnx.proto
// (ONNX 1.12: IR version 8, operator sets up to 17). Built only with
// WEFT_HAVE_ONNX; without it onnx_import.c and onnx_export.c define the
// public functions as errors that say so.
#ifndef WEFT_GRAPH_ONNX_H
#define WEFT_GRAPH_ONNX_H

#include "../core/core_impl.h"
#include "graph_impl.h"

#ifdef WEFT_HAVE_ONNX
#include <onnx.pb-c.h>

// The opset weft writes (ai.onnx, default domain); the importer takes
// opsets 7 to 17 (ops whose meaning changed are read by the file's version),
// and 1 to 6 for the ops whose old versions it reads alike (onnx_import.c).
#define WEFT_ONNX_OPSET 17
#define WEFT_ONNX_IR_VERSION 8
// Refuse files beyond this (the whole file is read into memory).
#define WEFT_ONNX_MAX_FILE_BYTES ((size_t)1 << 34)

// ONNX TensorProto.DataType of a weft dtype (0: none) and back (false: none).
int weft_onnx_dtype_to(weft_dtype dt);
bool weft_onnx_dtype_from(int32_t onnx_type, weft_dtype *dt);

// A new contiguous CPU tensor holding tp's values: raw_data (little-endian)
// or the typed fields (float_data, double_data, int32_data for
// int32/bool/uint8/f16/bf16 bits, int64_data). `what` names it in errors
// (file and tensor name). External data and strings are refused.
weft_status weft_onnx_tensor_from(const Onnx__TensorProto *tp, const char *what, weft_tensor **out);

// Fill *tp (zeroed by the caller with onnx__tensor_proto__init) with t's
// name, dims, data type and raw_data (a malloc'd copy, on the CPU);
// weft_onnx_tensor_proto_clear frees what this allocated.
weft_status weft_onnx_tensor_to(weft_tensor *t, const char *name, Onnx__TensorProto *tp);
void weft_onnx_tensor_proto_clear(Onnx__TensorProto *tp);

// The whole file at path into *buf (malloc'd), its size in *n.
weft_status weft_onnx_read_file(const char *path, uint8_t **buf, size_t *n);

#endif
#endif
