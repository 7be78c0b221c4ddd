// weft/io.h — files: safetensors, checkpoint directories, metrics (CSV, TensorBoard).
//
// Every function that can fail returns a weft_status (or NULL) and leaves a
// message for weft_last_error() naming the file and, for malformed
// safetensors files, the tensor or byte offset at fault.
#ifndef WEFT_IO_H
#define WEFT_IO_H

#include <stdio.h>

#include "core.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- safetensors (https://github.com/huggingface/safetensors) ----
// Layout: u64 little-endian header length N, N bytes of JSON (padded with
// spaces to a multiple of 8), then raw little-endian tensor data. The JSON maps
// each name to {"dtype": "F32"|"F64"|"I32"|"I64"|"BOOL"|"U8"|"F16"|"BF16",
// "shape": [...], "data_offsets": [begin, end)} (offsets relative to the data
// area), plus an optional "__metadata__" object of string -> string.

// Writes n tensors (any device, any strides: written as contiguous data) and
// n_meta metadata pairs (may be 0 with NULL arrays) to path. The file is written
// under a temporary name in the same directory, fsynced, renamed over path and
// the directory fsynced: a crash leaves either the old file or the new one,
// never a torn one. The directory must exist. Names must be unique and must
// not be "__metadata__".
weft_status weft_safetensors_save(const char *path, int n, const char *const *names, weft_tensor *const *tensors,
                                  int n_meta, const char *const *meta_keys, const char *const *meta_values);

// A loaded file: every tensor is read (on the CPU) and validated up front.
typedef struct weft_safetensors weft_safetensors;
weft_safetensors *weft_safetensors_load(const char *path);
void weft_safetensors_free(weft_safetensors *st); // NULL is fine
int weft_safetensors_count(const weft_safetensors *st);
// Tensors are in file (data offset) order. name_at / tensor_at / find return
// BORROWED pointers owned by st: valid until weft_safetensors_free(); take a
// reference with weft_tensor_ref() to keep a tensor longer.
const char *weft_safetensors_name_at(const weft_safetensors *st, int i);
weft_tensor *weft_safetensors_tensor_at(const weft_safetensors *st, int i);
// NULL when there is no such tensor (with an error naming it).
weft_tensor *weft_safetensors_find(const weft_safetensors *st, const char *name);
// Metadata value for key, NULL when absent (no error is recorded).
const char *weft_safetensors_meta(const weft_safetensors *st, const char *key);
int weft_safetensors_meta_count(const weft_safetensors *st);
const char *weft_safetensors_meta_key_at(const weft_safetensors *st, int i);
const char *weft_safetensors_meta_value_at(const weft_safetensors *st, int i);
// Copies tensor `name` into dst (any device; dtype converted by
// weft_tensor_copy_). Errors name the tensor: missing, or shape differs.
weft_status weft_safetensors_copy_to(const weft_safetensors *st, const char *name, weft_tensor *dst);

// ---- checkpoint directories ----
// "DIR/ckpt-000123.safetensors" into buf (returns buf; NULL if it does not fit).
const char *weft_ckpt_path(const char *dir, int64_t step, char *buf, size_t n);
// Latest checkpoint in dir (highest step, by number): *step = -1 and path = ""
// when there is none (a missing directory counts as none). path may be NULL.
weft_status weft_ckpt_latest(const char *dir, int64_t *step, char *path, size_t n);
// Deletes all but the k newest checkpoints (k >= 1) in dir.
weft_status weft_ckpt_keep_last(const char *dir, int k);
// mkdir -p (mode 0777 minus umask); an existing directory is fine.
weft_status weft_mkdirs(const char *path);

// ---- metrics: CSV ----
// A header row of column names, then one row per weft_csv_log call (flushed).
// append: keep an existing file's rows (the header is written only when the
// file is empty), for resumed runs.
typedef struct weft_csv_writer weft_csv_writer;
weft_csv_writer *weft_csv_open(const char *path, int n_cols, const char *const *cols, bool append);
weft_status weft_csv_log(weft_csv_writer *w, const double *values); // n_cols values
void weft_csv_close(weft_csv_writer *w);                             // NULL is fine

// ---- metrics: TensorBoard event files ----
// Creates logdir (mkdir -p) and logdir/events.out.tfevents.<unix time>.<hostname>
// whose first record is the file_version event "brain.Event:2". Records use
// TFRecord framing with masked CRC32C; each scalar is flushed when written.
typedef struct weft_tb_writer weft_tb_writer;
weft_tb_writer *weft_tb_open(const char *logdir);
weft_status weft_tb_scalar(weft_tb_writer *w, const char *tag, int64_t step, double value);
const char *weft_tb_path(const weft_tb_writer *w);
void weft_tb_close(weft_tb_writer *w); // NULL is fine

// CRC32C (Castagnoli), as in TFRecord: weft_crc32c("123456789", 9) == 0xE3069283.
uint32_t weft_crc32c(const void *data, size_t n);
// TFRecord's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t weft_crc32c_masked(const void *data, size_t n);

#ifdef __cplusplus
}
#endif
#endif
