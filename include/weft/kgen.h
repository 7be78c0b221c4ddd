// weft/kgen.h — generated kernels (the compilation module's operator level).
//
// A kernel is defined once, as a tensor expression: named f32 inputs, output
// axes and reduction axes, and one output stage out[axes] = epilogue(reduce
// over the reduction axes of body). How its loops run is a separate schedule:
// split, reorder, unroll, vectorize, parallel, cache_write (a local
// accumulator tile), cache_read (operand packing), and compute_at / inline /
// root for the intermediate stages a definition may have. C source is
// generated from the two, compiled by the system's C compiler and loaded. An
// auto-tuner searches a template of schedules by measuring them, guided by a
// cost model fitted to its measurements, and keeps what it found in a log.
//
//   weft_kg *kg = weft_kg_new("matmul");
//   int A = weft_kg_input(kg, "A", 2, (int64_t[]){M, K}), B = weft_kg_input(kg, "B", 2, (int64_t[]){K, N});
//   weft_kg_expr *i = weft_kg_axis(kg, "i", M), *j = weft_kg_axis(kg, "j", N), *k = weft_kg_reduce_axis(kg, "k", K);
//   weft_kg_expr *body = weft_kg_bin(kg, WEFT_KG_MUL, weft_kg_load(kg, A, (weft_kg_expr *[]){i, k}),
//                                    weft_kg_load(kg, B, (weft_kg_expr *[]){k, j}));
//   weft_kg_compute(kg, 2, (weft_kg_expr *[]){i, j}, WEFT_KG_SUM, body, NULL);
//   weft_kg_sched *s = weft_kg_schedule(kg);
//   weft_kg_loop io, ii;
//   weft_kg_split(s, weft_kg_get_loop(s, "i"), 8, &io, &ii);
//   weft_kg_kernel *kern = weft_kg_build(s);          // C -> cc -> dlopen
//   weft_kg_run(kern, 2, (weft_tensor *[]){a, b}, c);
//
// Every call that can fail returns NULL, -1 or a status with a message naming
// the kernel (weft_last_error). A builder call given NULL returns NULL, so a
// chain of calls is checked once, at weft_kg_compute.
#ifndef WEFT_KGEN_H
#define WEFT_KGEN_H

#include "core.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_KG_MAX_INPUTS 8
#define WEFT_KG_MAX_AXES 8  // output axes, and reduction axes
#define WEFT_KG_MAX_LOOPS 32

typedef struct weft_kg weft_kg;             // a definition; owns its expressions
typedef struct weft_kg_expr weft_kg_expr;
typedef struct weft_kg_sched weft_kg_sched; // a schedule of one definition
typedef struct weft_kg_kernel weft_kg_kernel;
typedef int weft_kg_loop;                   // a loop of a schedule; -1: none

typedef enum weft_kg_op {
    WEFT_KG_ADD, WEFT_KG_SUB, WEFT_KG_MUL, WEFT_KG_DIV, WEFT_KG_MAX, WEFT_KG_MIN, // binary
    WEFT_KG_NEG, WEFT_KG_EXP, WEFT_KG_LOG, WEFT_KG_SQRT, WEFT_KG_TANH,           // unary
} weft_kg_op;

typedef enum weft_kg_reduce { WEFT_KG_NONE, WEFT_KG_SUM, WEFT_KG_MAXRED } weft_kg_reduce;

// ---- definition ----
// Names are C identifiers of at most 31 characters.
weft_kg *weft_kg_new(const char *name);
void weft_kg_free(weft_kg *kg);
// A contiguous f32 input; returns its index (0, 1, ...) or -1.
int weft_kg_input(weft_kg *kg, const char *name, int ndim, const int64_t *sizes);
weft_kg_expr *weft_kg_axis(weft_kg *kg, const char *name, int64_t extent);        // an output axis
weft_kg_expr *weft_kg_reduce_axis(weft_kg *kg, const char *name, int64_t extent); // summed / maxed over
weft_kg_expr *weft_kg_const(weft_kg *kg, double v);
// input[idx...], one index per dim. Indices are integer expressions of axes and
// integer constants (+, -, *); every index must stay in range over the axes'
// extents, which weft_kg_compute checks. weft_kg_load_pad reads `pad` where an
// index falls outside (a padded convolution).
weft_kg_expr *weft_kg_load(weft_kg *kg, int input, weft_kg_expr *const *idx);
weft_kg_expr *weft_kg_load_pad(weft_kg *kg, int input, weft_kg_expr *const *idx, double pad);
weft_kg_expr *weft_kg_bin(weft_kg *kg, weft_kg_op op, weft_kg_expr *a, weft_kg_expr *b);
weft_kg_expr *weft_kg_un(weft_kg *kg, weft_kg_op op, weft_kg_expr *a);
// The reduced value, for the epilogue (relu(acc + bias[j]): a fused bias and activation).
weft_kg_expr *weft_kg_acc(weft_kg *kg);
// The output stage: out has one dim per axis in `axes` (every output axis, each
// once, in the output's order); the body is reduced over every reduction axis
// (WEFT_KG_NONE: none may exist); the epilogue (NULL: acc) maps the result.
weft_status weft_kg_compute(weft_kg *kg, int n_axes, weft_kg_expr *const *axes, weft_kg_reduce red,
                            weft_kg_expr *body, weft_kg_expr *epilogue);
// An intermediate stage, computed as the output is (its own output axes, the
// unowned reduction axes its body reads, a reduction, an epilogue) and read by
// later stages' loads through the handle it returns (WEFT_KG_MAX_INPUTS + its
// index; -1 on error). A softmax's row max, a convolution's padded input. At
// most 4 stages; by default each is computed whole before the output's loops
// (weft_kg_compute_root), or where the schedule places it.
int weft_kg_stage(weft_kg *kg, const char *name, int n_axes, weft_kg_expr *const *axes, weft_kg_reduce red,
                  weft_kg_expr *body, weft_kg_expr *epilogue);
// The output's shape (after weft_kg_compute); returns ndim.
int weft_kg_out_shape(const weft_kg *kg, int64_t *sizes);
// The definition evaluated directly in f64, in the loops' declared order (the
// reference for generated kernels). in: contiguous inputs; out: the output.
weft_status weft_kg_reference(const weft_kg *kg, const float *const *in, float *out);

// ---- schedule ----
// The default schedule: one loop per output axis in order, then one per
// reduction axis, named as the axes. The definition must outlive it.
weft_kg_sched *weft_kg_schedule(const weft_kg *kg);
void weft_kg_sched_free(weft_kg_sched *s);
// The loop called name ("i", after a split "i.o" and "i.i"); -1 with an error.
weft_kg_loop weft_kg_get_loop(const weft_kg_sched *s, const char *name);
// Splits a loop into an outer loop of ceil(extent/factor) and an inner one of
// `factor` (a tail past the extent is skipped), in its place in the order.
weft_status weft_kg_split(weft_kg_sched *s, weft_kg_loop l, int64_t factor, weft_kg_loop *outer,
                          weft_kg_loop *inner);
// The given loops take the places they hold in the order, in the given order.
weft_status weft_kg_reorder(weft_kg_sched *s, int n, const weft_kg_loop *loops);
// Annotations, checked when code is generated: unroll (extent <= 64);
// vectorize (the innermost loop, an output axis's); parallel (the outermost
// loop, an output axis's: OpenMP threads, weft_num_threads()).
weft_status weft_kg_unroll(weft_kg_sched *s, weft_kg_loop l);
weft_status weft_kg_vectorize(weft_kg_sched *s, weft_kg_loop l);
weft_status weft_kg_parallel(weft_kg_sched *s, weft_kg_loop l);
// Accumulate in a local tile inside loop l, written out (through the epilogue)
// when l's body ends: the tile spans the output-axis loops inside l (at most
// 4096 elements), and every reduction loop must be inside l.
weft_status weft_kg_cache_write(weft_kg_sched *s, weft_kg_loop l);
// Where a stage is computed. compute_at: at the start of each iteration of
// loop l of the output's nest, the part of the stage the rest of that
// iteration reads (its region, from the indices of the loads, which must be
// affine: sums of axes times constants) into a local buffer (at most 65536
// elements); only the output's body reads it (and its epilogue without a
// reduction or a local tile). compute_inline: at each load that reads it (a
// stage without a reduction). compute_root: whole, before the output's loops.
weft_status weft_kg_compute_at(weft_kg_sched *s, int stage, weft_kg_loop l);
weft_status weft_kg_compute_inline(weft_kg_sched *s, int stage);
weft_status weft_kg_compute_root(weft_kg_sched *s, int stage);
// Copies the region of an input the output's body reads inside loop l into a
// contiguous local buffer at the start of each of l's iterations, read there in
// its place (operand packing; the same region rules as compute_at).
weft_status weft_kg_cache_read(weft_kg_sched *s, int input, weft_kg_loop l);
// Replaces loop l and the loops inside it by a call to a micro-kernel
// (TVM's tensorize). WEFT_KG_INTRIN_GEMM: C[i][j] += A[i,k] * B[k,j], a tile
// of a local accumulator (cache_write at a loop outside l) updated from
// strided A and B; register-blocked with AVX2/FMA for tiles of at most 6 rows
// by 8 or 16 columns with B's rows contiguous, plain loops otherwise. Checked
// when code is made: inside l exactly one reduction loop and two output loops
// (the column loop innermost of the two), no tail, nothing placed there, and
// a body that is the product of two loads, one not moving with the column
// loop and the other not with the row loop.
typedef enum weft_kg_intrin { WEFT_KG_INTRIN_GEMM } weft_kg_intrin;
weft_status weft_kg_tensorize(weft_kg_sched *s, weft_kg_loop l, weft_kg_intrin intrin);
// The schedule in one line ("i.o j.o k i.i j.i(vec) gemm@k cache@j.o read:B@k"); buf gets at most n bytes.
const char *weft_kg_sched_str(const weft_kg_sched *s, char *buf, size_t n);

// ---- code ----
// The generated C source (malloc'd; free() it), or NULL.
char *weft_kg_source(const weft_kg_sched *s);
// Compiles and loads the kernel: $WEFT_KGEN_CC (default cc) -O3 -march=native
// -fopenmp, in a private temporary directory removed once loaded.
weft_kg_kernel *weft_kg_build(const weft_kg_sched *s);
void weft_kg_kernel_free(weft_kg_kernel *k);
// Runs it on contiguous f32 CPU tensors of the definition's shapes; out must
// not overlap an input.
weft_status weft_kg_run(const weft_kg_kernel *k, int n_in, weft_tensor *const *in, weft_tensor *out);
// The same on raw pointers (no checks beyond NULL).
weft_status weft_kg_run_raw(const weft_kg_kernel *k, const float *const *in, float *out);
// Whether a C compiler is there to build kernels (cached after the first call).
bool weft_kg_available(void);

// ---- auto-tuning ----
typedef struct weft_kg_tune_opts {
    int trials;      // schedules measured (default 32); 0: only look the log up
    int repeat;      // runs per measurement, the best kept (default 3)
    uint64_t seed;   // the search's random choices
    const char *log; // tuning log (JSON), read first and updated; NULL: none
} weft_kg_tune_opts;

typedef struct weft_kg_tune_report {
    int measured;        // schedules compiled and timed (failures not counted)
    int candidates;      // size of the searched space
    double best_ms;      // the chosen schedule's time (from the log when found there)
    double default_ms;   // the default schedule's time (-1 if not measured)
    bool from_log;       // the log had this definition: nothing was measured
    char best[256];      // weft_kg_sched_str of the choice
    char log_error[256]; // "" or why the log could not be written (the schedule is still returned)
} weft_kg_tune_report;

// The best schedule found for kg (the caller frees it). The template: each
// output axis tiled (or not), the first reduction axis split, its inner loop
// outside or inside the tile's loops, the tile unrolled or not, accumulated in
// a local tile or in the output, the outermost loop parallel or not; the
// innermost output loop vectorised; the stages at root, at the outermost or
// the last outer loop, or there with those that do not reduce inlined. The first batch is drawn at random; each
// later batch is the cost model's best predictions plus one random pick. The
// cost model is a ridge regression of log(time) on the schedule's features,
// refitted after each batch. A log entry is keyed by the definition (shapes
// included) and the thread count. One tuner at a time should write a log.
weft_kg_sched *weft_kg_tune(const weft_kg *kg, const weft_kg_tune_opts *opts, weft_kg_tune_report *report);

#ifdef __cplusplus
}
#endif
#endif
