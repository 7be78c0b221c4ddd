// CPU dropout kernel. Element i (in row-major order) keeps its value when
// u_i >= p, with u_i uniform in [0,1) from Philox(seed, counter offset + i):
// the mask depends only on (seed, offset, i), never on threads, so backward
// recomputes exactly the forward mask from the same attrs.
#include "../../tensor/philox.h"
#include "iter.h"

// dropout: in x, attrs i[0] = seed, i[1] = counter offset, f[0] = p. y = x * keep / (1 - p).
weft_status weft_cpu_dropout(const weft_op_args *a) {
    if (weft_dtype_is_half(a->in[0]->dtype)) return weft_kernel_widened(a, weft_cpu_dropout); // the f32 mask
    const weft_tensor *in = a->in[0];
    weft_tensor *x = (weft_tensor *)in;
    if (!weft_tensor_is_contiguous(in)) { // logical order = memory order below
        x = weft_tensor_new(in->ndim, in->sizes, (weft_dtype)in->dtype, in->device);
        if (!x) return weft_last_status();
        weft_cpu_copy(x, in);
    }
    uint64_t seed = (uint64_t)a->attrs->i[0], off = (uint64_t)a->attrs->i[1];
    double p = a->attrs->f[0], scale = 1.0 / (1.0 - p);
    int64_t n = x->numel;
    weft_dtype dt = (weft_dtype)x->dtype;
    const char *px = weft_tensor_ptr(x);
    char *py = weft_tensor_ptr(a->out[0]);
    int nt = weft_num_threads();
#pragma omp parallel for num_threads(nt) if (nt > 1 && n > 16384) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        uint32_t w[4];
        weft_philox4x32(seed, 0, off + (uint64_t)i, w);
        bool keep = weft_philox_u01(w[0], w[1]) >= p;
        if (dt == WEFT_F32) ((float *)py)[i] = keep ? ((const float *)px)[i] * (float)scale : 0.0f;
        else ((double *)py)[i] = keep ? ((const double *)px)[i] * scale : 0.0;
    }
    if (x != in) weft_tensor_free(x);
    return WEFT_OK;
}
