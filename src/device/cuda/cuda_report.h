// Bad input found by a kernel, reported without the host waiting for it.
//
// A kernel that finds an index out of range (the index family) or a
// cross-entropy target outside [0, C) cannot fail its op without the host
// waiting for the GPU, which would split a captured CUDA graph and stall the
// eager queue. Instead it claims its device's one report record (the first
// report wins), writes what it found, and produces a harmless value (a zero
// row, a skipped add, a NaN loss). The host reads the record at its next
// wait for the device (a copy to host memory such as weft_tensor_item, a
// device or stream synchronize: cuda_device.c) and returns the error there,
// naming the op and the value, as the CPU would have at the op itself.
// WEFT_CUDA_SYNC=1 checks it after every op instead.
//
// Plain C: shared by the device layer and the .cu kernels (cu_common.cuh).
#ifndef WEFT_CUDA_REPORT_H
#define WEFT_CUDA_REPORT_H

enum {
    WEFT_CUDA_REPORT_INDEX = 1,  // value at position pos of an index is outside [0, limit)
    WEFT_CUDA_REPORT_TARGET = 2, // cross-entropy target value of row pos is outside [0, limit)
};

typedef struct weft_cuda_report {
    unsigned int claimed;    // a kernel's atomicCAS 0 -> 1 claims the record
    unsigned int ready;      // 1 once the fields below are written
    unsigned long long what; // the reporting op's name: a host `const char *` to a static string
    long long kind, value, pos, limit;
} weft_cuda_report;

#endif
