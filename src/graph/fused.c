// Fused nodes: program helpers, and running a node through the op table's
// fused_elementwise kernel of its device (see fused.h).
#include "fused.h"

#include <stdlib.h>
#include <string.h>

#include "../ops/elementwise.h"
#include "../ops/fused.h"

// Membership of the elementwise family is a property of the op (its CPU
// column names the family's kernel); every device's fused_elementwise
// kernel runs each variant in the dtypes the family's loops have.
bool weft_fused_op_ok(const weft_op_def *op, weft_dtype dt) {
    if (!op || op->kernel[WEFT_CPU].fn != weft_cpu_elementwise || (op->flags & WEFT_OPF_VIEW)) return false;
    if (op->n_in != 1 && op->n_in != 2) return false;
    // Comparisons produce bool: the tile program keeps one dtype throughout.
    if (op->variant >= WEFT_EW_EQ && op->variant <= WEFT_EW_GE) return false;
    return (op->kernel[WEFT_CPU].dtypes & WEFT_DT(dt)) && weft_cpu_ew_loop(op->variant, dt) != NULL;
}

weft_fused_prog *weft_fused_prog_copy(const weft_fused_prog *p) {
    if (!p) return NULL;
    weft_fused_prog *c = malloc(sizeof *c);
    if (c) memcpy(c, p, sizeof *c);
    return c;
}

void weft_fused_prog_free(weft_fused_prog *p) { free(p); }

const char *weft_fused_prog_str(const weft_fused_prog *p, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int j = 0; p && j < p->n_instr && k + 1 < n; j++) {
        int w = snprintf(buf + k, n - k, "%s%s", j ? "+" : "", p->instr[j].op->name);
        if (w < 0) break;
        k += (size_t)w;
    }
    return buf;
}


bool weft_fused_head_op(const weft_op_def *op) {
    return op && (!strcmp(op->name, "matmul") || !strcmp(op->name, "linear"));
}

// A node's program as the fused_elementwise kernel takes it. Kernel inputs
// are the node inputs the elementwise instructions read (kin_of[k] = node
// input, in node order: a matmul head's operands need not broadcast to the
// group), then the product of a matmul head (kernel input *n_kin - 1), which
// replaces instruction 0 as an operand. Kernel outputs are the node outputs
// the elementwise instructions write (kout[k] = node output, in node order).
static weft_status kernel_prog(const weft_gnode *n, weft_ew_prog *kp, int *kin_of, int *n_kin, int *kout,
                               int *n_kout) {
    const weft_fused_prog *p = n->prog;
    int first = p->matmul_head ? 1 : 0, omap[WEFT_MAX_OP_OUT], imap[WEFT_FUSED_MAX_IN];
    for (int j = 0; j < WEFT_MAX_OP_OUT; j++) omap[j] = -1;
    for (int k = 0; k < WEFT_FUSED_MAX_IN; k++) imap[k] = -1;
    for (int i = first; i < p->n_instr; i++) {
        const weft_fused_instr *x = &p->instr[i];
        if (x->n_args < 1 || x->n_args > 2 || x->export_idx >= n->n_out)
            return weft_error(WEFT_ERR_STATE, "fused: malformed program");
        for (int a = 0; a < x->n_args; a++) {
            int32_t o = x->args[a];
            if (o >= n->n_in || o < -i)
                return weft_error(WEFT_ERR_STATE, "fused: instruction %d operand %d out of range", i, a);
            if (o >= 0) imap[o] = 0;
        }
    }
    *n_kin = 0;
    for (int k = 0; k < n->n_in; k++)
        if (imap[k] == 0) imap[k] = *n_kin, kin_of[(*n_kin)++] = k;
    int mm_in = first ? (*n_kin)++ : -1;
    *n_kout = 0;
    for (int j = 0; j < n->n_out; j++) {
        bool epi = false;
        for (int i = first; i < p->n_instr; i++) epi |= p->instr[i].export_idx == j;
        if (epi) omap[j] = *n_kout, kout[(*n_kout)++] = j;
    }
    kp->n_instr = p->n_instr - first;
    for (int i = first; i < p->n_instr; i++) {
        const weft_fused_instr *x = &p->instr[i];
        weft_ew_instr *y = &kp->instr[i - first];
        y->variant = x->op->variant;
        y->n_args = x->n_args;
        y->scalar = x->attrs.f[0];
        y->out = x->export_idx >= 0 ? omap[x->export_idx] : -1;
        for (int a = 0; a < 2; a++) {
            int32_t o = a < x->n_args ? x->args[a] : 0;
            if (a >= x->n_args) o = 0;                // unused
            else if (o >= 0) o = imap[o];             // node input -> kernel input
            else if (first && o == -1) o = mm_in;     // instruction 0: the product
            else o = -1 - ((-1 - o) - first);         // instruction j -> j - first
            y->args[a] = o;
        }
    }
    return WEFT_OK;
}

weft_status weft_fused_exec(const weft_gnode *n, const weft_gvalue *out_meta, weft_tensor *const *in,
                            weft_tensor *const *out) {
    const weft_fused_prog *p = n->prog;
    if (!p || p->n_instr < 1 || n->n_in > WEFT_FUSED_MAX_IN || n->n_out < 1 || n->n_out > WEFT_MAX_OP_OUT)
        return weft_error(WEFT_ERR_STATE, "fused: malformed program");
    weft_dtype dt = (weft_dtype)out_meta[0].dtype;
    for (int j = 0; j < n->n_out; j++)
        if (!weft_tensor_is_contiguous(out[j]) || out[j]->dtype != dt ||
            !weft_shape_equal(out[j]->ndim, out[j]->sizes, out_meta[0].ndim, out_meta[0].sizes))
            return weft_error(WEFT_ERR_STATE, "fused: output %d is not a contiguous tensor of the group shape", j);
    weft_ew_prog kp;
    int kin_of[WEFT_FUSED_MAX_IN], n_kin = 0, kout[WEFT_MAX_OP_OUT], n_kout = 0;
    weft_status st = kernel_prog(n, &kp, kin_of, &n_kin, kout, &n_kout);
    if (st != WEFT_OK) return st;
    weft_tensor *kin[WEFT_EW_PROG_MAX_IN], *kout_t[WEFT_MAX_OP_OUT];
    for (int k = 0; k < n_kin; k++) kin[k] = p->matmul_head && k == n_kin - 1 ? NULL : in[kin_of[k]];
    if (p->matmul_head) {
        // The product goes into its own output when it is exported, else into
        // output 0, which the epilogue then overwrites (the kernel reads
        // element i of every input before it writes element i).
        const weft_fused_instr *m = &p->instr[0];
        weft_tensor *mi[WEFT_FUSED_MAX_ARGS];
        bool ok = weft_fused_head_op(m->op) && m->n_args >= 2 && m->n_args <= (strcmp(m->op->name, "matmul") ? 3 : 2);
        for (int a = 0; ok && a < m->n_args; a++) {
            ok = m->args[a] >= 0 && m->args[a] < n->n_in;
            if (ok) mi[a] = in[m->args[a]];
        }
        if (!ok) return weft_error(WEFT_ERR_STATE, "fused: malformed matmul head");
        weft_tensor *mo = out[m->export_idx >= 0 ? m->export_idx : 0];
        if ((st = weft_op_apply_into(m->op, m->n_args, mi, &m->attrs, &mo)) != WEFT_OK) return st;
        if (p->n_instr == 1) return WEFT_OK;
        kin[n_kin - 1] = mo;
    }
    if (n_kout < 1) return weft_error(WEFT_ERR_STATE, "fused: the elementwise instructions write no output");
    for (int k = 0; k < n_kout; k++) kout_t[k] = out[kout[k]];
    // Dispatch like any op: fused_elementwise's kernel for the outputs' device.
    const weft_op_def *op = &weft_op_fused_elementwise;
    weft_device dev = out[0]->device;
    const weft_kernel *kr = &op->kernel[dev.type];
    if (!kr->fn || !(kr->dtypes & WEFT_DT(dt))) {
        char d[32];
        return weft_error(WEFT_ERR_UNSUPPORTED, "fused_elementwise: no kernel for device %s and dtype %s",
                          weft_device_str(dev, d, sizeof d), weft_dtype_name(dt));
    }
    weft_attrs at = weft_ew_prog_attrs(&kp);
    weft_op_args args = {.op = op, .n_in = n_kin, .in = kin, .attrs = &at, .n_out = n_kout, .out = kout_t};
    return kr->fn(&args);
}
