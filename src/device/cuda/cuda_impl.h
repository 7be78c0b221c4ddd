// What the CUDA backend's host files share (src/device/cuda, src/ops/cuda,
// src/dist/cuda). Plain C over the CUDA runtime API: the driver library is
// never linked, so a binary built with CUDA still loads on a machine without
// a GPU and simply finds no device.
#ifndef WEFT_CUDA_IMPL_H
#define WEFT_CUDA_IMPL_H

#include <cuda_runtime.h>

#include "../../core/core_impl.h"
#include "../device_impl.h"
#include "cuda_report.h"

#define WEFT_CUDA_MAX_DEVICES 16

// Called once from the device registry (device.c): counts the GPUs and, when
// there is at least one, registers the device and every CUDA kernel.
void weft_cuda_backend_init(void);
// Devices found by cudaGetDeviceCount (0 when there is no GPU or driver).
int weft_cuda_device_count(void);
// Why there is no device ("" when there is one): the runtime's message.
const char *weft_cuda_unavailable_reason(void);

// The calling thread's current stream on device `index` (weft's default
// stream for that device unless weft_stream_set_current chose another), and
// makes `index` the current device of the thread.
cudaStream_t weft_cuda_stream(int index);
// WEFT_OK, or an error naming `what` and the runtime's message.
weft_status weft_cuda_check(cudaError_t e, const char *what);
// Tell the allocator that device memory p (from weft_device_alloc) is also
// used on stream s, so it is not reused before s reaches this point.
void weft_cuda_record_stream(int index, void *p, cudaStream_t s);
// Before destroying stream s (whose work has finished: synchronise it
// first): the allocator stops waiting for s when memory recorded on it is freed.
void weft_cuda_forget_stream(int index, cudaStream_t s);

// Device `index`'s report record (cuda_report.h): device memory the kernels
// write a bad index or target into; NULL when the device is not usable.
weft_cuda_report *weft_cuda_report_slot(int index);
// Waits for device `index` and returns the error a kernel reported there (and
// clears it), or WEFT_OK: what WEFT_CUDA_SYNC=1 runs after every op. Each
// wait for the device (copies to the host, synchronize) checks it anyway.
weft_status weft_cuda_report_poll(int index);

// Kernels of every op family register here (src/ops/cuda/register.c).
void weft_cuda_register_kernels(void);

#endif
