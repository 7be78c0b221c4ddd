// The op table: one weft_op_def per op. From it the dispatcher finds shape
// and dtype inference, the kernel for (device, dtype), and the backward rule.
//
// Adding an op: write its entry (a weft_op_def with infer + backward, and its
// public constructor) in a def_*.c file, its kernel under ops/<device>/, add
// one line to that family's oplist_*.h, and a test. Backward rules are written
// with the public ops (weft_mul, weft_sum_to, ...), so they are themselves
// recorded when create_graph is on (higher-order gradients), and graph mode
// can replay them symbolically.
#ifndef WEFT_OP_H
#define WEFT_OP_H

#include <weft/ops.h>

#include "../tensor/tensor_impl.h"

#define WEFT_MAX_OP_OUT 4

// Inline op parameters (like ggml's op_params): integers and doubles whose
// meaning each op documents next to its entry.
typedef struct weft_attrs {
    int64_t i[16];
    double f[4];
} weft_attrs;

// What infer fills for each output: dtype and sizes; view ops also give
// strides and offset into input 0's storage.
typedef struct weft_out_meta {
    int ndim;
    weft_dtype dtype;
    int64_t sizes[WEFT_MAX_DIMS];
    int64_t strides[WEFT_MAX_DIMS];
    int64_t offset;
} weft_out_meta;

struct weft_op_def;
typedef struct weft_op_args {
    const struct weft_op_def *op;
    int n_in;
    weft_tensor *const *in;
    const weft_attrs *attrs;
    int n_out;
    weft_tensor *const *out; // allocated by the dispatcher before the kernel runs
} weft_op_args;

// Shapes of the inputs as they were at the forward call (always recorded).
typedef struct weft_in_meta {
    int ndim;
    weft_dtype dtype;
    int64_t sizes[WEFT_MAX_DIMS];
} weft_in_meta;

typedef struct weft_bw_args {
    const struct weft_op_def *op;
    const weft_attrs *attrs;
    int n_in, n_out;
    weft_tensor *const *in;      // saved inputs (NULL where the op did not ask to save)
    const weft_in_meta *in_meta; // every input's shape and dtype
    weft_tensor *const *out;     // saved outputs (NULL where not saved)
    weft_tensor *const *gout;    // gradients of the outputs (NULL: no gradient reached it)
    const bool *needs;           // needs[i]: input i wants a gradient
    weft_tensor **gin;           // to fill: gin[i] (new reference) for each needed input; NULL = zero
} weft_bw_args;

typedef weft_status (*weft_kernel_fn)(const weft_op_args *a);
typedef struct weft_kernel {
    weft_kernel_fn fn;
    uint32_t dtypes; // bit mask of weft_dtype accepted (by the dispatch input's dtype)
} weft_kernel;

#define WEFT_DT(d) (1u << (d))
#define WEFT_DT_FLOAT (WEFT_DT(WEFT_F32) | WEFT_DT(WEFT_F64))
#define WEFT_DT_INT (WEFT_DT(WEFT_I32) | WEFT_DT(WEFT_I64))
#define WEFT_DT_NUM (WEFT_DT_FLOAT | WEFT_DT_INT)
#define WEFT_DT_ALL ((1u << WEFT_NUM_DTYPES) - 1)
#define WEFT_DT_HALF (WEFT_DT(WEFT_F16) | WEFT_DT(WEFT_BF16)) // autocast's storage-only float types
static inline bool weft_dtype_is_half(int dt) { return (WEFT_DT_HALF >> dt) & 1u; }

enum {
    WEFT_OPF_VIEW = 1,    // output 0 aliases input 0 (infer gives strides/offset); no kernel
    WEFT_OPF_NONDIFF = 2, // outputs never require grad (comparisons, argmax)
    // Draws random numbers from attrs i[0] = seed (i[1] = counter offset):
    // graph runs replace the seed by one derived from (seed, run number), so
    // each run draws afresh while nodes recorded with one seed (dropout's
    // forward and its backward) still agree within a run. Never folded.
    WEFT_OPF_RANDOM = 4,
    // The kernel writes some inputs in place (state_inputs says which):
    // tracing makes them VARIABLE nodes; passes leave the node alone.
    WEFT_OPF_STATEFUL = 8,
    // Output j may be written over input j's storage (same shape and dtype,
    // contiguous): the kernel reads element i of input j before writing
    // element i of output j and nothing else there. The graph executor uses
    // it to write an update straight into the variable it is assigned to.
    WEFT_OPF_INPLACE = 16,
    // Mixed precision: under weft_autocast_set(WEFT_BF16 / WEFT_F16) the
    // dispatcher runs this op on its f32 inputs cast to that dtype, where the
    // device has a kernel for it, and casts the outputs back to f32 (matmul, conv2d).
    WEFT_OPF_AUTOCAST = 32,
};

#define WEFT_SAVE_IN(i) (1u << (i))
#define WEFT_SAVE_OUT(j) (1u << (16 + (j)))
#define WEFT_SAVE_ALL_IN 0xffffu

typedef struct weft_op_def {
    const char *name;
    int n_in;  // -1: variadic (at least 1)
    int n_out; // fixed number of outputs
    uint32_t flags;
    uint32_t save;   // WEFT_SAVE_IN / WEFT_SAVE_OUT bits: what backward needs
    int dispatch_in; // the input whose dtype picks the kernel
    int variant;     // for families that share one kernel (e.g. WEFT_EW_ADD)
    weft_status (*infer)(const weft_op_args *a, weft_out_meta *out);
    weft_status (*backward)(const weft_bw_args *b); // NULL: not differentiable (error at backward)
    weft_kernel kernel[WEFT_NUM_DEVICE_TYPES];
    // WEFT_OPF_STATEFUL ops: bit i set when the kernel may write input i in
    // place (given the attrs and input count; variadic ops differ by attrs).
    uint32_t (*state_inputs)(const weft_attrs *attrs, int n_in);
    // Called once when an autograd node recorded with this op is freed (NULL:
    // nothing to do). Custom autograd functions (weft_function_record) own a
    // heap op def each, freed here.
    void (*node_release)(const struct weft_op_def *op, const weft_attrs *attrs);
} weft_op_def;

// Run an op: infer, allocate outputs, dispatch the kernel, record for autograd.
// out receives op->n_out new references. attrs may be NULL (all zero).
weft_status weft_op_apply(const weft_op_def *op, int n_in, weft_tensor *const *in, const weft_attrs *attrs,
                          weft_tensor **out);
// Run a non-view op into caller-provided contiguous outputs of exactly the
// inferred shape and dtype (no allocation, no autograd recording, no
// tracing): the graph executor's memory plan, and in-place optimiser updates
// of device parameters (an op flagged WEFT_OPF_INPLACE may get out[j] == in[j]).
weft_status weft_op_apply_into(const weft_op_def *op, int n_in, weft_tensor *const *in, const weft_attrs *attrs,
                               weft_tensor *const *out);
// Strides for viewing (sizes, strides) as new sizes without copying, or false
// when the memory layout does not allow it (reshape's rule, def_view.c).
bool weft_view_strides(int ond, const int64_t *osz, const int64_t *ost, int nnd, const int64_t *nsz, int64_t *nst);
// For kernels: t itself (a new reference) when contiguous, else a contiguous
// copy on t's device (no autograd recording); NULL + error on failure.
weft_tensor *weft_kernel_contiguous(const weft_tensor *t);
// t with dims d0 and d1 swapped, as a new reference to the same memory: the
// view a kernel reads an input through (no autograd record, unlike weft_transpose).
weft_tensor *weft_kernel_transposed(const weft_tensor *t, int d0, int d1);
// All of an op's inputs that way: t[i] is a new reference to in[i] or to its
// contiguous copy. Free with weft_kernel_inputs_free; a failed get holds nothing.
#define WEFT_KERNEL_MAX_IN 8
typedef struct weft_kernel_inputs {
    weft_tensor *t[WEFT_KERNEL_MAX_IN];
    int n;
} weft_kernel_inputs;
weft_status weft_kernel_inputs_get(const weft_op_args *a, weft_kernel_inputs *c);
void weft_kernel_inputs_free(weft_kernel_inputs *c);
// Runs the f32 kernel f on a with every bf16 / f16 input widened to an f32 copy on its device and every
// bf16 / f16 output computed in an f32 buffer, then rounded once into place (other operands pass as they
// are): how a kernel with only f32 arithmetic serves the half types, on any device. At most 8 inputs.
weft_status weft_kernel_widened(const weft_op_args *a, weft_kernel_fn f);
// Single-output convenience: returns the output or NULL.
weft_tensor *weft_op_apply1(const weft_op_def *op, int n_in, weft_tensor *const *in, const weft_attrs *attrs);
// Look an op up by name (graph files, model files); NULL if unknown.
const weft_op_def *weft_op_find(const char *name);
const weft_op_def *weft_op_at(int i);
// A backend registers its kernel for an op (CUDA fills the table at init).
weft_status weft_op_register_kernel(const char *op, weft_device_type dev, weft_kernel_fn fn, uint32_t dtypes);

// ---- helpers for infer functions ----
// Every infer function checks its own attrs (and its inputs), trusting
// nothing a constructor would have normalised: a graph file or a C caller
// may pass anything, and the kernel that runs after it takes them as given.
// Broadcast shapes of n tensors (NumPy rules) into out; error names op.
weft_status weft_broadcast_shapes(const char *op, int n, weft_tensor *const *ts, int *ndim, int64_t *sizes);
// Same dtype for all inputs, else an error naming op and both dtypes.
weft_status weft_check_same_dtype(const char *op, int n, weft_tensor *const *ts);
// dtype accepted by a mask, else an error naming op.
weft_status weft_check_dtype(const char *op, const weft_tensor *t, uint32_t mask, const char *what);
// Parse an axes list into a bit mask (all axes when n == 0); error on duplicates/range.
weft_status weft_axes_mask(const char *op, int ndim, int n, const int *axes, uint32_t *mask);
void weft_meta_set(weft_out_meta *m, int ndim, const int64_t *sizes, weft_dtype dt);
// Attrs i[first..first+n) are flags: 0 or 1, else an error naming op and them.
weft_status weft_check_flags(const char *op, const weft_attrs *at, int first, int n, const char *what);
// For backward rules: sum a broadcast gradient back to input i's shape.
// Takes ownership of g (NULL passes through).
weft_tensor *weft_bw_unbroadcast(const weft_bw_args *b, int i, weft_tensor *g);

#endif
