// The op table's CUDA column is complete: every op with a CPU kernel has a
// CUDA kernel accepting at least the CPU's dtypes. Runs without a GPU (the
// backend registers its kernels either way); skips in a build without CUDA.
#include <weft/device.h>

#include "ops/op.h"
#include "weft_test.h"

int main(void) {
    weft_device_count(WEFT_CUDA); // the backend registers itself on first use
    int n_cuda = 0;
    for (int i = 0; weft_op_at(i); i++) n_cuda += weft_op_at(i)->kernel[WEFT_CUDA].fn != NULL;
    if (n_cuda == 0) {
        printf("skipped: weft built without CUDA\n");
        return 77;
    }
    for (int i = 0; weft_op_at(i); i++) {
        const weft_op_def *op = weft_op_at(i);
        if (op->flags & WEFT_OPF_VIEW) continue;
        const weft_kernel *c = &op->kernel[WEFT_CPU], *g = &op->kernel[WEFT_CUDA];
        bool ok = g->fn && (g->dtypes & c->dtypes) == c->dtypes;
        if (!ok) fprintf(stderr, "%s: CUDA kernel %s, dtypes 0x%x vs CPU 0x%x\n", op->name, g->fn ? "present" : "missing",
                         g->dtypes, c->dtypes);
        CHECK(ok);
    }
    printf("%d ops with a CUDA kernel\n", n_cuda);
    return wt_summary();
}
