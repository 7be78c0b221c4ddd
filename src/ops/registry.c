// The op table: every op of every family, in one array (see op.h).
#include <string.h>

#include "op.h"

#define WEFT_OP(name) extern weft_op_def weft_op_##name;
#include "oplist_conv.h"
#include "oplist_elementwise.h"
#include "oplist_index.h"
#include "oplist_linalg.h"
#include "oplist_nn.h"
#include "oplist_norm.h"
#include "oplist_optim.h"
#include "oplist_reduce.h"
#include "oplist_view.h"
#undef WEFT_OP

#define WEFT_OP(name) &weft_op_##name,
static weft_op_def *const g_ops[] = {
#include "oplist_view.h"
#include "oplist_elementwise.h"
#include "oplist_reduce.h"
#include "oplist_linalg.h"
#include "oplist_nn.h"
#include "oplist_norm.h"
#include "oplist_index.h"
#include "oplist_conv.h"
#include "oplist_optim.h"
};
#undef WEFT_OP

#define N_OPS ((int)(sizeof g_ops / sizeof g_ops[0]))

int weft_op_count(void) { return N_OPS; }
const char *weft_op_name(int i) { return (i >= 0 && i < N_OPS) ? g_ops[i]->name : NULL; }
const weft_op_def *weft_op_at(int i) { return (i >= 0 && i < N_OPS) ? g_ops[i] : NULL; }

const weft_op_def *weft_op_find(const char *name) {
    for (int i = 0; i < N_OPS; i++)
        if (!strcmp(g_ops[i]->name, name)) return g_ops[i];
    return NULL;
}

weft_status weft_op_register_kernel(const char *name, weft_device_type dev, weft_kernel_fn fn, uint32_t dtypes) {
    for (int i = 0; i < N_OPS; i++)
        if (!strcmp(g_ops[i]->name, name)) {
            if ((unsigned)dev >= WEFT_NUM_DEVICE_TYPES) return weft_error(WEFT_ERR_ARG, "register_kernel: bad device");
            g_ops[i]->kernel[dev] = (weft_kernel){fn, dtypes};
            return WEFT_OK;
        }
    return weft_error(WEFT_ERR_ARG, "register_kernel: unknown op '%s'", name);
}
