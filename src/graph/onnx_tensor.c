// ONNX tensors both ways (TensorProto <-> weft_tensor) and whole-file reads,
// for onnx_import.c and onnx_export.c. Data is little-endian in raw_data, as
// ONNX specifies; weft writes raw_data only and reads raw_data or the typed
// fields. Nothing in a file is trusted: sizes, counts and byte lengths are
// checked against each other before any copy.
#ifdef WEFT_HAVE_ONNX
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "onnx.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ONNX raw_data is little-endian; weft's ONNX code assumes a little-endian host"
#endif

int weft_onnx_dtype_to(weft_dtype dt) {
    switch (dt) {
    case WEFT_F32: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    case WEFT_F64: return ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
    case WEFT_I32: return ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
    case WEFT_I64: return ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    case WEFT_BOOL: return ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
    case WEFT_U8: return ONNX__TENSOR_PROTO__DATA_TYPE__UINT8;
    case WEFT_F16: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16;
    case WEFT_BF16: return ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
    default: return 0;
    }
}

bool weft_onnx_dtype_from(int32_t t, weft_dtype *dt) {
    static const struct {
        int32_t onnx;
        weft_dtype dt;
    } map[] = {{ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, WEFT_F32},  {ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE, WEFT_F64},
               {ONNX__TENSOR_PROTO__DATA_TYPE__INT32, WEFT_I32},  {ONNX__TENSOR_PROTO__DATA_TYPE__INT64, WEFT_I64},
               {ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, WEFT_BOOL},  {ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, WEFT_U8},
               {ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16, WEFT_F16}, {ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16, WEFT_BF16}};
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
        if (map[k].onnx == t) {
            *dt = map[k].dt;
            return true;
        }
    return false;
}

// The typed field that holds dt's values when raw_data is absent: its count must be numel; then, when dst is
// not NULL, the values are copied there.
static weft_status copy_typed(const Onnx__TensorProto *tp, weft_dtype dt, int64_t numel, void *dst, const char *what) {
    size_t have = 0;
    switch (dt) {
    case WEFT_F32: have = tp->n_float_data; break;
    case WEFT_F64: have = tp->n_double_data; break;
    case WEFT_I64: have = tp->n_int64_data; break;
    default: have = tp->n_int32_data; break; // int32, bool, uint8, f16 and bf16 bits
    }
    if ((int64_t)have != numel)
        return weft_error(WEFT_ERR_FORMAT, "%s: %lld values for %lld elements", what, (long long)have, (long long)numel);
    for (int64_t i = 0; dst && i < numel; i++) {
        switch (dt) {
        case WEFT_F32: ((float *)dst)[i] = tp->float_data[i]; break;
        case WEFT_F64: ((double *)dst)[i] = tp->double_data[i]; break;
        case WEFT_I64: ((int64_t *)dst)[i] = tp->int64_data[i]; break;
        case WEFT_I32: ((int32_t *)dst)[i] = tp->int32_data[i]; break;
        case WEFT_BOOL: ((uint8_t *)dst)[i] = tp->int32_data[i] != 0; break;
        case WEFT_U8: ((uint8_t *)dst)[i] = (uint8_t)tp->int32_data[i]; break;
        default: ((uint16_t *)dst)[i] = (uint16_t)tp->int32_data[i]; break; // f16 / bf16 bits
        }
    }
    return WEFT_OK;
}

weft_status weft_onnx_tensor_from(const Onnx__TensorProto *tp, const char *what, weft_tensor **out) {
    *out = NULL;
    if (!tp) return weft_error(WEFT_ERR_FORMAT, "%s: no tensor", what);
    if ((tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) ||
        tp->n_external_data)
        return weft_error(WEFT_ERR_UNSUPPORTED, "%s: external data (a separate weights file) is not supported", what);
    if (tp->segment) return weft_error(WEFT_ERR_UNSUPPORTED, "%s: segmented tensors are not supported", what);
    weft_dtype dt;
    if (!tp->has_data_type || !weft_onnx_dtype_from(tp->data_type, &dt))
        return weft_error(WEFT_ERR_UNSUPPORTED, "%s: data type %d is not one weft has", what,
                          tp->has_data_type ? (int)tp->data_type : 0);
    if (tp->n_dims > WEFT_MAX_DIMS)
        return weft_error(WEFT_ERR_UNSUPPORTED, "%s: %zu dims (weft has at most %d)", what, tp->n_dims, WEFT_MAX_DIMS);
    int64_t sizes[WEFT_MAX_DIMS], numel = 1;
    for (size_t d = 0; d < tp->n_dims; d++) {
        sizes[d] = tp->dims[d];
        if (sizes[d] < 0 || (sizes[d] > 0 && numel > ((int64_t)1 << 40) / sizes[d]))
            return weft_error(WEFT_ERR_FORMAT, "%s: bad dim %lld", what, (long long)sizes[d]);
        numel *= sizes[d];
    }
    // the data must hold every element before anything is allocated (the dims alone could ask for 2^40)
    size_t bytes = (size_t)numel * weft_dtype_size(dt);
    if (tp->has_raw_data && tp->raw_data.len != bytes)
        return weft_error(WEFT_ERR_FORMAT, "%s: raw_data has %zu bytes, %zu expected", what, tp->raw_data.len, bytes);
    weft_status st = tp->has_raw_data ? WEFT_OK : copy_typed(tp, dt, numel, NULL, what);
    if (st) return st;
    weft_tensor *t = weft_tensor_empty((int)tp->n_dims, sizes, dt);
    if (!t) return weft_error(WEFT_ERR_OOM, "%s: no memory for %lld elements", what, (long long)numel);
    if (tp->has_raw_data) {
        if (bytes) memcpy(weft_tensor_data(t), tp->raw_data.data, bytes);
        if (dt == WEFT_BOOL) { // a bool byte other than 0 or 1 is true
            uint8_t *b = weft_tensor_data(t);
            for (int64_t i = 0; i < numel; i++) b[i] = b[i] != 0;
        }
    } else {
        copy_typed(tp, dt, numel, weft_tensor_data(t), what);
    }
    *out = t;
    return WEFT_OK;
}

weft_status weft_onnx_tensor_to(weft_tensor *t, const char *name, Onnx__TensorProto *tp) {
    int type = weft_onnx_dtype_to(weft_tensor_dtype(t));
    if (!type) return weft_error(WEFT_ERR_DTYPE, "onnx: tensor %s: dtype %s has no ONNX type", name,
                                 weft_dtype_name(weft_tensor_dtype(t)));
    weft_tensor *c = weft_tensor_to(t, WEFT_DEVICE_CPU);
    weft_tensor *cc = c ? weft_tensor_contiguous(c) : NULL;
    weft_tensor_free(c);
    if (!cc) return weft_error(WEFT_ERR_OOM, "onnx: tensor %s: no host copy", name);
    int nd = weft_tensor_ndim(cc);
    size_t bytes = (size_t)weft_tensor_numel(cc) * weft_dtype_size(weft_tensor_dtype(cc));
    tp->name = strdup(name);
    tp->dims = nd ? malloc(sizeof(int64_t) * (size_t)nd) : NULL;
    tp->raw_data.data = malloc(bytes ? bytes : 1);
    if (!tp->name || (nd && !tp->dims) || !tp->raw_data.data) {
        weft_tensor_free(cc);
        weft_onnx_tensor_proto_clear(tp);
        return weft_error(WEFT_ERR_OOM, "onnx: tensor %s: no memory", name);
    }
    tp->n_dims = (size_t)nd;
    if (nd) memcpy(tp->dims, weft_tensor_sizes(cc), sizeof(int64_t) * (size_t)nd);
    tp->has_data_type = 1, tp->data_type = type;
    tp->has_raw_data = 1, tp->raw_data.len = bytes;
    if (bytes) memcpy(tp->raw_data.data, weft_tensor_data(cc), bytes);
    weft_tensor_free(cc);
    return WEFT_OK;
}

void weft_onnx_tensor_proto_clear(Onnx__TensorProto *tp) {
    free(tp->name);
    free(tp->dims);
    free(tp->raw_data.data);
    tp->name = NULL, tp->dims = NULL, tp->raw_data.data = NULL;
    tp->n_dims = 0, tp->raw_data.len = 0, tp->has_raw_data = 0;
}

weft_status weft_onnx_read_file(const char *path, uint8_t **buf, size_t *n) {
    *buf = NULL, *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return weft_error(WEFT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return weft_error(WEFT_ERR_IO, "%s: not a regular file", path);
    }
    if ((size_t)sb.st_size > WEFT_ONNX_MAX_FILE_BYTES) {
        fclose(f);
        return weft_error(WEFT_ERR_FORMAT, "%s: %lld bytes is too large for an ONNX model", path, (long long)sb.st_size);
    }
    size_t len = (size_t)sb.st_size;
    uint8_t *b = malloc(len ? len : 1);
    if (!b) {
        fclose(f);
        return weft_error(WEFT_ERR_OOM, "%s: no memory for %zu bytes", path, len);
    }
    size_t got = len ? fread(b, 1, len, f) : 0;
    fclose(f);
    if (got != len) {
        free(b);
        return weft_error(WEFT_ERR_IO, "%s: short read (%zu of %zu bytes)", path, got, len);
    }
    *buf = b, *n = len;
    return WEFT_OK;
}
#endif
