// oneDNN on the CPU (optional: WEFT_HAVE_ONEDNN, CMake WEFT_ONEDNN): one
// engine and stream for the process, and a cache of created primitives.
// Creating a primitive (its JIT kernel) costs far more than running a small
// one, so every user keys its primitives by shape and keeps them for the
// process. Users: the bf16 GEMM (gemm.c) and convolution (conv_onednn.c).
#ifndef WEFT_OPS_CPU_ONEDNN_H
#define WEFT_OPS_CPU_ONEDNN_H

#include <stdbool.h>
#include <stddef.h>

#ifdef WEFT_HAVE_ONEDNN
#include <dnnl.h>

// The process's CPU engine (created at the first call); NULL if it failed.
dnnl_engine_t weft_onednn_engine(void);

// The process's stream on that engine (NULL if the engine failed). On the
// CPU runtime a primitive with a user scratchpad may run on it from several
// threads at once (conv_onednn.c does); weft_onednn_run serialises instead.
dnnl_stream_t weft_onednn_stream(void);

// The primitive stored under key (a plain struct, compared byte for byte:
// zero it before filling it in), else make(key, ctx)'s, stored for next time.
// NULL when make returns NULL (it could not build one: the caller falls back).
// A failed make is remembered too, so it is not retried for that key.
dnnl_primitive_t weft_onednn_primitive(const void *key, size_t key_size,
                                       dnnl_primitive_t (*make)(const void *key, void *ctx), void *ctx);

// Runs p on the process's stream and waits for it (a mutex keeps one
// execution at a time on the stream). false on failure.
bool weft_onednn_run(dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args);
#endif

#endif
