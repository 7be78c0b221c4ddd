// weft/data.h — data sets and input pipelines.
//
// * IDX files (the MNIST format, gzipped or plain) and Fashion-MNIST from
//   Debian's dataset-fashion-mnist, normalised to f32 (N,1,28,28) + i64 labels.
// * Byte-level text corpora (vocabulary of 256) and the KJV bible text from
//   Debian's bible-kjv, cached to a file.
// * A data loader: shuffling by (seed, epoch), batching, and a background
//   thread that prefetches batches into a bounded queue (the producer blocks
//   when it is full). Its position (epoch, batch index) can be saved and
//   restored, for checkpoints.
// * A language-model batcher: random windows seeded by (seed, step).
//
// Errors follow the rest of weft: NULL or a negative status, with a message in
// weft_last_error() that names the file (and the byte offset for bad data).
#ifndef WEFT_DATA_H
#define WEFT_DATA_H

#include "core.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- IDX files ----
// Reads an IDX file of unsigned bytes (type 0x08), gzipped or plain (zlib
// reads both). Returns a u8 tensor whose shape is the file's dimensions.
// expect_ndim >= 0 makes any other number of dimensions an error.
// Errors name the file and, for malformed data (bad magic, wrong dims,
// truncated or trailing data), the byte offset in the uncompressed stream.
weft_tensor *weft_idx_load(const char *path, int expect_ndim);

// ---- data sets: (inputs, labels) pairs, indexed along dimension 0 ----
typedef struct weft_dataset {
    weft_tensor *inputs; // (N, ...)
    weft_tensor *labels; // (N, ...)
} weft_dataset;
void weft_dataset_free(weft_dataset *d); // frees both tensors and d (NULL is fine)
int64_t weft_dataset_len(const weft_dataset *d);

#define WEFT_FMNIST_DIR "/usr/share/datasets/fashion-mnist"
#define WEFT_FMNIST_MEAN 0.2860 // of the training images, pixels scaled to [0,1]
#define WEFT_FMNIST_STD 0.3530

// Fashion-MNIST split "train" (60000) or "test" (10000) from dir (NULL: the
// default above, where dataset-fashion-mnist installs it). Files are
// <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz, or without .gz.
// inputs: f32 (N,1,28,28) = (x/255 - mean) / std (mean 0, std 1: plain [0,1]);
// labels: i64 (N) in 0..9.
weft_dataset *weft_fmnist_load(const char *dir, const char *split, double mean, double std);

// ---- text corpora: byte-level tokens (vocabulary 256) ----
#define WEFT_TEXT_VOCAB 256
// The bytes of a file as a 1-D tensor of dtype dt (WEFT_U8 or WEFT_I64).
weft_tensor *weft_text_load(const char *path, weft_dtype dt);
// The output of a shell command, cached: when cache_path exists it is read;
// otherwise `command` runs (popen) and its output is written to cache_path
// atomically (temp file in the same directory, fsync, rename). When the
// command's program is missing, the error says to install Debian package
// `package` (may be NULL).
weft_tensor *weft_text_load_cached(const char *cache_path, const char *command, const char *package,
                                   weft_dtype dt);
#define WEFT_KJV_COMMAND "bible -f Gen1:1-Rev22:21"
// The King James bible (`bible -f Gen1:1-Rev22:21`, Debian bible-kjv), cached
// at cache_path. About 4.4 MB; starts "Ge1:1 In the beginning".
weft_tensor *weft_kjv_load(const char *cache_path, weft_dtype dt);

// Splits t along dimension 0: the first n - round(n*val_frac) rows go to
// *train, the rest to *val (views sharing t's storage). 0 <= val_frac < 1.
weft_status weft_train_val_split(weft_tensor *t, double val_frac, weft_tensor **train, weft_tensor **val);
// The same for both tensors of a data set; returns two new data sets.
weft_status weft_dataset_split(const weft_dataset *d, double val_frac, weft_dataset **train, weft_dataset **val);

// ---- data loader ----
typedef struct weft_loader_opts {
    int64_t batch_size; // > 0
    bool shuffle;       // a fresh permutation per epoch, from (seed, epoch)
    uint64_t seed;
    bool drop_last;     // drop the last incomplete batch of each epoch
    int prefetch;       // queue capacity in batches for the background thread; 0: no thread
    // Distributed sampling (PyTorch's DistributedSampler with drop_last): every
    // epoch the N samples are put in the epoch's order (the same on every
    // rank), the tail N % num_replicas is dropped, and rank r takes positions
    // r, r + R, r + 2R, ...: every rank gets N / R distinct samples.
    int num_replicas;   // > 1: distributed sampling (0 or 1: all samples)
    int rank;           // 0 <= rank < num_replicas
} weft_loader_opts;
// batch_size 64, shuffle, seed 0, keep the last batch, prefetch 4.
weft_loader_opts weft_loader_default_opts(void);

typedef struct weft_loader weft_loader;
// inputs (N, ...) and labels (N, ...) (labels may be NULL); both are kept
// (referenced) until weft_loader_free. The loader starts at epoch 0, index 0.
weft_loader *weft_loader_create(weft_tensor *inputs, weft_tensor *labels, const weft_loader_opts *opts);
// Stops the producer (even while it is blocked on a full queue) and frees
// every queued batch.
void weft_loader_free(weft_loader *l);
// The next batch: returns 1 and sets *x (B, ...) and *y (B, ...) (new
// references; y may be NULL to skip labels). Returns 0 at the end of an epoch
// (nothing set; the next call starts the next epoch), or a negative status on
// error. The last batch is smaller unless drop_last.
int weft_loader_next(weft_loader *l, weft_tensor **x, weft_tensor **y);
int64_t weft_loader_batches_per_epoch(const weft_loader *l);
int64_t weft_loader_num_samples(const weft_loader *l);
// Position of the consumer: the epoch and the number of batches of that epoch
// already returned. Restoring it (e.g. from a checkpoint) makes the loader
// return exactly the batches that would have followed.
void weft_loader_position(const weft_loader *l, int64_t *epoch, int64_t *index);
weft_status weft_loader_set_position(weft_loader *l, int64_t epoch, int64_t index);
// With num_replicas > 1, batches_per_epoch and num_samples count this rank's share.
// The sample indices of epoch `epoch` in order (n = weft_loader_num_samples).
weft_status weft_loader_epoch_order(const weft_loader *l, int64_t epoch, int64_t *out);

// Counters of the prefetch thread (for tests and debugging).
typedef struct weft_loader_stats {
    int64_t produced;      // batches made since the producer was (re)started
    int queued;            // batches waiting in the queue
    int capacity;          // queue capacity (0: no thread)
    bool producer_blocked; // the producer is waiting for room in the queue
} weft_loader_stats;
void weft_loader_get_stats(weft_loader *l, weft_loader_stats *s);

// ---- distributed sampling (the loader's order, split across replicas) ----
// Samples per rank and epoch: n / num_replicas (n when num_replicas <= 1).
int64_t weft_dist_sampler_len(int64_t n, int num_replicas);
// The indices (into 0..n-1) that rank `rank` of `num_replicas` gets in epoch
// `epoch`, in order: the epoch's order of all n samples (a permutation
// from (seed, epoch) when shuffle, else 0..n-1: the loader's order), cut to a
// multiple of num_replicas, every num_replicas-th entry from position rank.
// out holds weft_dist_sampler_len(n, num_replicas) entries.
weft_status weft_dist_sampler_indices(int64_t n, int num_replicas, int rank, uint64_t seed, int64_t epoch,
                                      bool shuffle, int64_t *out);

// ---- language-model batches ----
// B random windows of T+1 tokens from a 1-D corpus (u8 or i64, length > T):
// x (B,T) i64 = window[0..T), y (B,T) i64 = window[1..T] (x shifted by one).
// Window starts depend only on (seed, step, row), so training can be resumed
// and reproduced from the step number alone.
weft_status weft_lm_batch(const weft_tensor *tokens, int64_t B, int64_t T, uint64_t seed, uint64_t step,
                          weft_tensor **x, weft_tensor **y);

#ifdef __cplusplus
}
#endif
#endif
