// The shared CPU GEMM (gemm.h): OpenBLAS, or oneDNN's sgemm where it measures
// faster for the shape.
//
// Why two libraries: on AVX-512 machines oneDNN's JIT sgemm runs the small and
// skinny products of training (a batch of 32-64 rows against a layer; the
// (B,H) @ (H,4H) step of an LSTM) at 1.3-2.8x OpenBLAS 0.3.21's speed (342 vs
// 122 GFLOP/s at (32,1024,256) on 2 Xeon cores), while OpenBLAS stays the only
// f64 GEMM and the fallback where oneDNN is not built in.
//
// The choice (WEFT_GEMM=auto, the default) is made per f32 shape (ta, tb, M,
// N, K, threads) the first time the shape is seen: both run on the caller's
// operands into a scratch C, after one warm-up each (oneDNN JIT-compiles a
// kernel per shape), best of five alternating rounds, and OpenBLAS is kept
// only when it is more than 10% faster (near ties go to oneDNN, so a noisy
// machine rarely flips a choice). Choices live for the process, so a run is
// reproducible within itself; the two libraries round differently, so two
// processes may differ in the last bits where a choice went differently
// (WEFT_GEMM=openblas or onednn pins it).
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "../../core/core_impl.h"
#include "gemm.h"
#include "onednn.h"

// ---- OpenBLAS ----

static void blas1(weft_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A,
                  int64_t lda, const void *B, int64_t ldb, double beta, void *C, int64_t ldc) {
    enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
    if (dt == WEFT_F64)
        cblas_dgemm(CblasRowMajor, TA, TB, (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
    else
        cblas_sgemm(CblasRowMajor, TA, TB, (int)M, (int)N, (int)K, (float)alpha, A, (int)lda, B, (int)ldb, (float)beta,
                    C, (int)ldc);
}

// Small products: OpenBLAS's own threads lose most of the second core below
// ~16M multiply-adds (on the 2-core CI VM a (128,256)x(256,10) product runs
// at 37 GFLOP/s on two threads, 46 on one, 169 as two halves of rows one
// per core), so small products are split into row (or column) blocks, one
// single-threaded BLAS call per OpenMP thread. Each element is still one
// BLAS dot product over all of K: the split changes no result.
#define SMALL_MACS (1 << 24)
#define MIN_BLOCK 16 // rows (or columns) per thread at least

static int split_threads(int64_t M, int64_t N, int64_t K) {
    int nt = weft_num_threads(); // 1 inside a parallel region
    if (nt < 2 || (double)M * (double)N * (double)K > SMALL_MACS) return 1;
    int64_t span = M >= N ? M : N, most = span / MIN_BLOCK;
    return most < 2 ? 1 : (int)(most < nt ? most : nt);
}

static void openblas_gemm(weft_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                          const char *A, int64_t lda, const char *B, int64_t ldb, double beta, char *C, int64_t ldc) {
    int nt = split_threads(M, N, K);
    if (nt == 1) {
        blas1(dt, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); // OpenBLAS threads it (or not) itself
        return;
    }
    int64_t esz = (int64_t)weft_dtype_size(dt);
    bool rows = M >= N;
    int64_t span = rows ? M : N, blk = (span + nt - 1) / nt;
    blk = (blk + 7) / 8 * 8; // whole vector widths
#pragma omp parallel for num_threads(nt) schedule(static, 1)
    for (int t = 0; t < nt; t++) {
        int64_t a = t * blk, b = a + blk < span ? a + blk : span;
        if (a >= b) continue;
        if (rows) // rows a..b of op(A): row offset a (NoTrans) or column offset a (Trans) of A's storage
            blas1(dt, ta, tb, b - a, N, K, alpha, A + (ta ? a : a * lda) * esz, lda, B, ldb, beta, C + a * ldc * esz,
                  ldc);
        else // columns a..b of op(B)
            blas1(dt, ta, tb, M, b - a, K, alpha, A, lda, B + (tb ? a * ldb : a) * esz, ldb, beta, C + a * esz, ldc);
    }
}

// ---- oneDNN ----

#ifdef WEFT_HAVE_ONEDNN
static bool onednn_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                         const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == dnnl_success;
}
#else
static bool onednn_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                         const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb, (void)beta;
    (void)C, (void)ldc;
    return false;
}
#endif

bool weft_cpu_gemm_have_onednn(void) {
#ifdef WEFT_HAVE_ONEDNN
    return true;
#else
    return false;
#endif
}

// ---- bf16: oneDNN's matmul primitive (AMX / AVX512-BF16 kernels, f32 accumulation) ----

typedef struct bf16_key {
    int64_t M, N, K, lda, ldb, ldc;
    int32_t ta, tb, c_dtype, pad;
} bf16_key;

#ifdef WEFT_HAVE_ONEDNN
// op(A) (M,K) and op(B) (K,N) as strided views of row-major storage.
static dnnl_primitive_t make_bf16(const void *key, void *ctx) {
    (void)ctx;
    const bf16_key *k = key;
    dnnl_memory_desc_t a, b, c;
    dnnl_dims_t da = {k->M, k->K}, db = {k->K, k->N}, dc = {k->M, k->N};
    dnnl_dims_t sa = {k->ta ? 1 : k->lda, k->ta ? k->lda : 1}, sb = {k->tb ? 1 : k->ldb, k->tb ? k->ldb : 1};
    dnnl_dims_t sc = {k->ldc, 1};
    dnnl_data_type_t ct = k->c_dtype == WEFT_F32 ? dnnl_f32 : dnnl_bf16;
    dnnl_matmul_desc_t d;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t p = NULL;
    if (dnnl_memory_desc_init_by_strides(&a, 2, da, dnnl_bf16, sa) == dnnl_success &&
        dnnl_memory_desc_init_by_strides(&b, 2, db, dnnl_bf16, sb) == dnnl_success &&
        dnnl_memory_desc_init_by_strides(&c, 2, dc, ct, sc) == dnnl_success &&
        dnnl_matmul_desc_init(&d, &a, &b, NULL, &c) == dnnl_success &&
        dnnl_primitive_desc_create(&pd, &d, NULL, weft_onednn_engine(), NULL) == dnnl_success &&
        dnnl_primitive_create(&p, pd) != dnnl_success)
        p = NULL;
    if (pd) dnnl_primitive_desc_destroy(pd);
    return p;
}

static bool onednn_gemm_bf16(const bf16_key *k, const void *A, const void *B, void *C) {
    dnnl_primitive_t p = weft_onednn_primitive(k, sizeof *k, make_bf16, NULL);
    if (!p) return false;
    const_dnnl_primitive_desc_t pd;
    if (dnnl_primitive_get_primitive_desc(p, &pd) != dnnl_success) return false;
    const dnnl_memory_desc_t *md[3] = {dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0),
                                       dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0),
                                       dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0)};
    void *ptr[3] = {(void *)A, (void *)B, C};
    int arg[3] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
    dnnl_exec_arg_t args[3];
    dnnl_memory_t mem[3] = {0};
    bool ok = true;
    for (int i = 0; i < 3 && ok; i++) {
        ok = md[i] && dnnl_memory_create(&mem[i], md[i], weft_onednn_engine(), ptr[i]) == dnnl_success;
        args[i] = (dnnl_exec_arg_t){arg[i], mem[i]};
    }
    ok = ok && weft_onednn_run(p, 3, args);

    for (int i = 0; i < 3; i++)
        if (mem[i]) dnnl_memory_destroy(mem[i]);
    return ok;
}
#endif

bool weft_cpu_gemm_have_bf16(void) {
#ifdef WEFT_HAVE_ONEDNN
    static int have = -1; // decided once: can oneDNN build a bf16 matmul on this CPU?
    int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (h < 0) {
        if (weft_cpu_gemm_get_backend() == WEFT_GEMM_OPENBLAS) return false;
        bf16_key k;
        memset(&k, 0, sizeof k);
        k.M = k.N = k.K = k.lda = k.ldb = k.ldc = 16, k.c_dtype = WEFT_BF16;
        h = weft_onednn_primitive(&k, sizeof k, make_bf16, NULL) != NULL;
        __atomic_store_n(&have, h, __ATOMIC_RELAXED);
    }
    return h && weft_cpu_gemm_get_backend() != WEFT_GEMM_OPENBLAS;
#else
    return false;
#endif
}

// Without oneDNN's kernel: each operand widened to f32 (exact), one sgemm,
// the result rounded once (the products and sums are those of f32).
static void widened_gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                              const uint16_t *B, int64_t ldb, weft_dtype ct, void *C, int64_t ldc) {
    float *a = malloc(sizeof(float) * (size_t)(M * K)), *b = malloc(sizeof(float) * (size_t)(K * N));
    float *c = malloc(sizeof(float) * (size_t)(M * N));
    if (a && b && c) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t k = 0; k < K; k++) a[i * K + k] = weft_bf16_to_f32(ta ? A[k * lda + i] : A[i * lda + k]);
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++) b[k * N + j] = weft_bf16_to_f32(tb ? B[j * ldb + k] : B[k * ldb + j]);
        openblas_gemm(WEFT_F32, false, false, M, N, K, 1, (const char *)a, K, (const char *)b, N, 0, (char *)c, N);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                if (ct == WEFT_F32) ((float *)C)[i * ldc + j] = c[i * N + j];
                else ((uint16_t *)C)[i * ldc + j] = weft_f32_to_bf16(c[i * N + j]);
            }
    }
    free(a), free(b), free(c);
}

void weft_cpu_gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                        const uint16_t *B, int64_t ldb, weft_dtype c_dtype, void *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        size_t esz = weft_dtype_size(c_dtype);
        for (int64_t i = 0; i < M; i++) memset((char *)C + (size_t)(i * ldc) * esz, 0, (size_t)N * esz);
        return;
    }
#ifdef WEFT_HAVE_ONEDNN
    bf16_key k;
    memset(&k, 0, sizeof k);
    k.M = M, k.N = N, k.K = K, k.lda = lda, k.ldb = ldb, k.ldc = ldc, k.ta = ta, k.tb = tb, k.c_dtype = c_dtype;
#ifdef _OPENMP
    bool in_par = omp_in_parallel(); // one execution at a time on the stream: run it here instead
#else
    bool in_par = false;
#endif
    if (!in_par && weft_cpu_gemm_have_bf16() && onednn_gemm_bf16(&k, A, B, C)) return;
#endif
    widened_gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, c_dtype, C, ldc);
}

// ---- the backend setting ----

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static weft_gemm_backend g_backend;

static void read_env(void) {
    const char *e = getenv("WEFT_GEMM");
    if (e && !strcmp(e, "openblas")) g_backend = WEFT_GEMM_OPENBLAS;
    else if (e && !strcmp(e, "onednn")) g_backend = WEFT_GEMM_ONEDNN;
    else g_backend = WEFT_GEMM_AUTO;
}

void weft_cpu_gemm_set_backend(weft_gemm_backend b) {
    pthread_once(&g_once, read_env);
    __atomic_store_n(&g_backend, b, __ATOMIC_RELAXED);
}

weft_gemm_backend weft_cpu_gemm_get_backend(void) {
    pthread_once(&g_once, read_env);
    return __atomic_load_n(&g_backend, __ATOMIC_RELAXED);
}

// ---- auto: measured once per shape ----

typedef struct shape_key {
    int64_t M, N, K;
    int32_t flags, threads; // flags: ta | tb << 1
} shape_key;

#define CACHE_N 4096 // open addressing; when full, new shapes take oneDNN unmeasured
static struct {
    shape_key k;
    int8_t used, choice;
} g_cache[CACHE_N];
static int g_cache_n;
static pthread_mutex_t g_cache_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t key_hash(const shape_key *k) {
    uint64_t h = 1469598103934665603ull;
    const int64_t v[5] = {k->M, k->N, k->K, k->flags, k->threads};
    for (int i = 0; i < 5; i++) h = (h ^ (uint64_t)v[i]) * 1099511628211ull;
    return h;
}

// The slot of k, or of the empty slot where it would go; -1 when full.
static int cache_slot(const shape_key *k) {
    for (uint64_t i = key_hash(k) % CACHE_N, n = 0; n < CACHE_N; i = (i + 1) % CACHE_N, n++)
        if (!g_cache[i].used || !memcmp(&g_cache[i].k, k, sizeof *k)) return (int)i;
    return -1;
}

// Times both libraries on A and B into a scratch C (M,N); returns the choice.
static weft_gemm_backend measure(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                                 const float *B, int64_t ldb) {
    float *C = malloc(sizeof(float) * (size_t)M * (size_t)N);
    if (!C) return WEFT_GEMM_ONEDNN;
    double best[2] = {1e30, 1e30};
    for (int round = 0; round < 6; round++) // round 0 warms up (oneDNN's JIT, caches)
        for (int lib = 0; lib < 2; lib++) {
            double t0 = weft_now_s();
            if (lib == 0) openblas_gemm(WEFT_F32, ta, tb, M, N, K, 1, (const char *)A, lda, (const char *)B, ldb, 0,
                                        (char *)C, N);
            else if (!onednn_sgemm(ta, tb, M, N, K, 1, A, lda, B, ldb, 0, C, N)) {
                free(C);
                return WEFT_GEMM_OPENBLAS;
            }
            double dt = weft_now_s() - t0;
            if (round > 0 && dt < best[lib]) best[lib] = dt;
        }
    free(C);
    return best[0] < 0.9 * best[1] ? WEFT_GEMM_OPENBLAS : WEFT_GEMM_ONEDNN;
}

static weft_gemm_backend choose(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                                const float *B, int64_t ldb) {
    shape_key k;
    memset(&k, 0, sizeof k); // no padding bytes left undefined: keys are compared with memcmp
    k.M = M, k.N = N, k.K = K, k.flags = (int32_t)(ta | tb << 1), k.threads = weft_num_threads();
    pthread_mutex_lock(&g_cache_mu);
    int s = cache_slot(&k);
    int choice = s >= 0 && g_cache[s].used ? g_cache[s].choice : -1;
    bool full = s < 0 || g_cache_n >= CACHE_N - 1;
    pthread_mutex_unlock(&g_cache_mu);
    if (choice >= 0) return (weft_gemm_backend)choice;
    if (full) return WEFT_GEMM_ONEDNN;
    weft_gemm_backend r = measure(ta, tb, M, N, K, A, lda, B, ldb);
    pthread_mutex_lock(&g_cache_mu);
    s = cache_slot(&k); // another thread may have measured it meanwhile: keep its answer
    if (s >= 0 && !g_cache[s].used) {
        g_cache[s].k = k, g_cache[s].used = 1, g_cache[s].choice = (int8_t)r;
        g_cache_n++;
    } else if (s >= 0) {
        r = (weft_gemm_backend)g_cache[s].choice;
    }
    pthread_mutex_unlock(&g_cache_mu);
    return r;
}

weft_gemm_backend weft_cpu_gemm_choice(bool ta, bool tb, int64_t M, int64_t N, int64_t K) {
    if (!weft_cpu_gemm_have_onednn()) return WEFT_GEMM_OPENBLAS;
    int64_t lda = ta ? M : K, ldb = tb ? K : N;
    float *A = malloc(sizeof(float) * (size_t)(M * K > 0 ? M * K : 1));
    float *B = malloc(sizeof(float) * (size_t)(K * N > 0 ? K * N : 1));
    weft_gemm_backend r = WEFT_GEMM_ONEDNN;
    if (A && B) {
        for (int64_t i = 0; i < M * K; i++) A[i] = 0.5f;
        for (int64_t i = 0; i < K * N; i++) B[i] = 0.25f;
        r = choose(ta, tb, M, N, K, A, lda ? lda : 1, B, ldb ? ldb : 1);
    }
    free(A);
    free(B);
    return r;
}

void weft_cpu_gemm(weft_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A,
                   int64_t lda, const void *B, int64_t ldb, double beta, void *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    size_t esz = weft_dtype_size(dt);
    if (K <= 0) { // the empty sum: beta C (BLAS wants ld >= 1 of an empty operand)
        for (int64_t i = 0; i < M; i++) {
            char *row = (char *)C + (size_t)(i * ldc) * esz;
            if (beta == 0) memset(row, 0, (size_t)N * esz);
            else if (dt == WEFT_F64)
                for (int64_t j = 0; j < N; j++) ((double *)row)[j] *= beta;
            else
                for (int64_t j = 0; j < N; j++) ((float *)row)[j] *= (float)beta;
        }
        return;
    }
    if (dt == WEFT_F32 && weft_cpu_gemm_have_onednn()) {
        weft_gemm_backend b = weft_cpu_gemm_get_backend();
        if (b == WEFT_GEMM_AUTO) b = choose(ta, tb, M, N, K, A, lda, B, ldb);
        if (b == WEFT_GEMM_ONEDNN &&
            onednn_sgemm(ta, tb, M, N, K, (float)alpha, A, lda, B, ldb, (float)beta, C, ldc))
            return;
    }
    openblas_gemm(dt, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

const char *weft_cpu_kernels_info(void) {
    static const char *mode[] = {"auto", "openblas", "onednn"};
    static _Thread_local char buf[128];
    if (!weft_cpu_gemm_have_onednn())
        return "gemm openblas, bf16 matmul widened to f32 (no oneDNN in this build)";
    snprintf(buf, sizeof buf, "gemm openblas+onednn (%s), bf16 matmul %s", mode[weft_cpu_gemm_get_backend()],
             weft_cpu_gemm_have_bf16() ? "onednn" : "widened to f32");
    return buf;
}
