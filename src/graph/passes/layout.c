// Layout pass (stub until the NHWC conv path lands).
#include "../rewrite.h"

weft_status weft_pass_layout(weft_rw *rw, weft_pass_io *io) {
    (void)io;
    for (int32_t s = 0; s < rw->src->n_nodes; s++)
        if (weft_rw_copy(rw, s) < 0) return weft_last_status();
    return WEFT_OK;
}
