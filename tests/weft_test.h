// A tiny test harness: CHECK macros that count, and helpers shared by tests.
// Each test binary ends with "N passed, N failed" and exits non-zero on failure.
#ifndef WEFT_TEST_H
#define WEFT_TEST_H

#include <math.h>
#include <stdio.h>
#include <weft.h>

extern int wt_pass, wt_fail;

#define CHECK(cond)                                                                                  \
    do {                                                                                             \
        if (cond) wt_pass++;                                                                         \
        else {                                                                                       \
            wt_fail++;                                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
                    weft_last_error());                                                              \
        }                                                                                            \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                          \
    do {                                                                                               \
        double _a = (a), _b = (b);                                                                     \
        if (fabs(_a - _b) <= (tol) * (1 + fabs(_b))) wt_pass++;                                        \
        else {                                                                                         \
            wt_fail++;                                                                                 \
            fprintf(stderr, "%s:%d: %s = %.10g, expected %.10g\n", __FILE__, __LINE__, #a, _a, _b);    \
        }                                                                                              \
    } while (0)

// Runs one named test function.
#define RUN(fn)                                      \
    do {                                             \
        int _f = wt_fail;                            \
        fn();                                        \
        printf("%s %s\n", wt_fail == _f ? "ok  " : "FAIL", #fn); \
    } while (0)

int wt_summary(void); // prints "N passed, N failed"; returns exit code

// An accelerator to test device paths on (tests/mock_device.c): the real
// cuda:0 where a GPU is present (*mock = false), else a mock registered as
// cuda:0 whose memory is host memory and whose kernels are the CPU's
// (*mock = true; mock may be NULL). false: no device could be set up.
bool wt_accelerator(weft_device *dev, bool *mock);

// Compare every element of t with ref (row-major) within tol (relative + absolute).
void wt_check_values(const char *what, const weft_tensor *t, const double *ref, int64_t n, double tol);
// a and b have the same dtype and shape and every element agrees within tol (relative + absolute);
// NaN agrees with NaN and an infinity with the same infinity.
void wt_check_same(const char *what, const weft_tensor *a, const weft_tensor *b, double tol);
// The last error message contains s.
bool wt_error_has(const char *s);
// The ONNX name weft_onnx_save gives value v: its node's name, ":i" for output i > 0.
void wt_onnx_name(const weft_graph *g, weft_value v, char *buf, size_t n);
// The shipped model files' folder, ending in '/': $WEFT_MODELS_DIR, else the source tree's models/
// (WEFT_SOURCE_DIR, set by CMake), so a test finds them from any build folder.
const char *wt_models_dir(void);
// Synthetic Fashion-MNIST IDX files dir/<prefix>-{images-idx3,labels-idx1}-ubyte: n 28x28
// images whose label k shows as a bright band at rows 2k+4..2k+6 over LCG noise.
void wt_write_fmnist_split(const char *dir, const char *prefix, int n, uint32_t seed);
// tests/data/<name> opened for reading (found from this file's place in the source tree), or NULL with a
// message on stderr.
FILE *wt_open_data(const char *name);
// A text file of n verses "c:v w w ... w.\n" of 12 words drawn by an LCG from a list of 22 (the byte-level
// language models' test corpus; tests/data/gen_gpt_twin.py writes the same text). false: not written.
bool wt_write_verses(const char *path, int n);
// An f64 tensor (leaf) from values; requires_grad as given.
weft_tensor *wt_f64(const double *v, int ndim, const int64_t *sizes, bool requires_grad);
// Random f64 leaf in [lo, hi) with a seed.
weft_tensor *wt_rand64(int ndim, const int64_t *sizes, double lo, double hi, uint64_t seed, bool requires_grad);
// A per-test arena: wt_keep(t) returns t and frees it at wt_drop_all().
weft_tensor *wt_keep(weft_tensor *t);
void wt_drop_all(void);
// Deterministic values in [lo, hi) from an LCG (independent of weft's RNG).
void wt_vals(double *v, int64_t n, double lo, double hi, uint64_t seed);
// Nodes running op `name` when m's forward is traced (graph mode) on x, inside an autocast region of
// dtype ac (WEFT_F32: none); -1 when tracing failed.
int wt_count_traced_ops(weft_module *m, weft_tensor *x, weft_dtype ac, const char *name);
// Gradient check: CHECK that weft_gradcheck passes.
#define CHECK_GRAD(fn, n, inputs, user) \
    do { \
        weft_status _s = weft_gradcheck(fn, n, inputs, user, NULL); \
        if (_s == WEFT_OK) wt_pass++; \
        else { \
            wt_fail++; \
            fprintf(stderr, "%s:%d: gradcheck %s failed: %s\n", __FILE__, __LINE__, #fn, weft_last_error()); \
        } \
    } while (0)

#endif
