// weft/core.h — status codes, errors, dtypes, devices, runtime settings.
#ifndef WEFT_CORE_H
#define WEFT_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 1
#define WEFT_VERSION_PATCH 0
#define WEFT_MAX_DIMS 8

// Every function that can fail returns a status (or NULL) and leaves a message
// for weft_last_error(). The library never aborts on bad input.
typedef enum weft_status {
    WEFT_OK = 0,
    WEFT_ERR_ARG = -1,         // bad argument (axis out of range, NULL, ...)
    WEFT_ERR_SHAPE = -2,       // shapes do not agree
    WEFT_ERR_DTYPE = -3,       // dtype not accepted
    WEFT_ERR_DEVICE = -4,      // device mismatch or device unavailable
    WEFT_ERR_UNSUPPORTED = -5, // no kernel for (op, device, dtype)
    WEFT_ERR_OOM = -6,         // allocation failed
    WEFT_ERR_STATE = -7,       // wrong state (backward twice, no grad_fn, ...)
    WEFT_ERR_IO = -8,          // file or stream error
    WEFT_ERR_FORMAT = -9,      // malformed input data
} weft_status;

// Message of the last error on this thread ("" if none).
const char *weft_last_error(void);
// Status of the last error on this thread (WEFT_OK if none).
weft_status weft_last_status(void);
void weft_clear_error(void);
const char *weft_status_name(weft_status s);
const char *weft_version(void);

typedef enum weft_dtype {
    WEFT_F32 = 0,
    WEFT_F64,
    WEFT_I32,
    WEFT_I64,
    WEFT_BOOL, // one byte, 0 or 1
    WEFT_U8,
    WEFT_F16,  // storage only on the CPU: convert with weft_cast
    WEFT_BF16, // storage only on the CPU: convert with weft_cast
    WEFT_NUM_DTYPES
} weft_dtype;

size_t weft_dtype_size(weft_dtype dt);
const char *weft_dtype_name(weft_dtype dt);
bool weft_dtype_is_float(weft_dtype dt);

typedef enum weft_device_type { WEFT_CPU = 0, WEFT_CUDA = 1, WEFT_NUM_DEVICE_TYPES } weft_device_type;

// A device is a value: type + index (cpu, cuda:0, cuda:1, ...).
typedef struct weft_device {
    int16_t type;
    int16_t index;
} weft_device;

#define WEFT_DEVICE_CPU ((weft_device){WEFT_CPU, 0})

// Threads used by CPU kernels: WEFT_NUM_THREADS, else the core count.
int weft_num_threads(void);
void weft_set_num_threads(int n);

// IEEE half / bfloat16 conversion (round to nearest even).
uint16_t weft_f32_to_f16(float f);
float weft_f16_to_f32(uint16_t h);
uint16_t weft_f32_to_bf16(float f);
float weft_bf16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif
