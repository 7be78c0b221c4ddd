// CPU kernels of the fused LSTM ops (def_lstm.c has the maths). lstm_cell:
// one pass over (B,H) per call, rows in parallel. lstm_seq: the whole
// recurrence, the batch split over the threads once, each running every step
// on its rows: one product through the shared GEMM (gemm.h) and one gate pass
// like the cell's. Inputs are made contiguous first (a time step's gates
// usually are; c and the gradients always are).
// Plain typed functions, f32 and f64. f64 uses libm's exp/tanh as the
// elementwise sigmoid/tanh kernels do, so the fused cell gives the composed
// ops' values (tests compare within 1e-12). f32 uses the vectorisable
// weft_vexp_f32 (vmath.h) for both: libm's tanhf (through expm1f) was a fifth
// of a kjv-lstm training step; its results differ from libm's by a few ulp.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "../../core/core_impl.h"
#include "../op.h"
#include "gemm.h"
#include "vmath.h"

// Rows of a call below this many (B*H) elements run on one thread: ~5
// transcendentals per element make a smaller grain than plain elementwise pay.
#define LSTM_PAR_GRAIN 2048

// sigmoid: exp(-v) underflows to 0 (v large) or is clamped near 3.4e38 (v
// below -88), giving 1 and ~0; NaN stays NaN.
static inline float sigm_f32(float v) { return 1.0f / (1.0f + weft_vexp_f32(-v)); }
static inline double sigm_f64(double v) { return 1.0 / (1.0 + exp(-v)); }
// tanh(v) = sign(v) (1 - e)/(1 + e), e = exp(-2|v|) in (0, 1]; below |v| =
// 0.0625 the Taylor series to v^7 instead (1 - e loses digits there; the
// next term is < 1e-12 relative).
static inline float tanh_f32(float v) {
    float a = v < 0 ? -v : v, e = weft_vexp_f32(-2.0f * a);
    float t = (1.0f - e) / (1.0f + e), v2 = v * v;
    float small = v * (1.0f + v2 * (-1.0f / 3 + v2 * (2.0f / 15 + v2 * (-17.0f / 315))));
    return a < 0.0625f ? small : (v < 0 ? -t : t);
}

// One row of the f32 cell (vectorised per target by WEFT_CLONES): gates gr
// (4H), cp, h, c (H); cp NULL: zero state.
static WEFT_CLONES void cell_row_f32(const float *restrict gr, const float *restrict cp, float *restrict h,
                                     float *restrict c, int64_t H) {
    for (int64_t j = 0; j < H; j++) {
        float i = sigm_f32(gr[j]), g = tanh_f32(gr[2 * H + j]), o = sigm_f32(gr[3 * H + j]);
        float cn = i * g + (cp ? sigm_f32(gr[H + j]) * cp[j] : 0.0f);
        c[j] = cn;
        h[j] = o * tanh_f32(cn);
    }
}
// One row of the f32 backward: gr, dr (4H); the rest (H), cp/dh/dc NULL: zeros.
static WEFT_CLONES void cell_bw_row_f32(const float *restrict gr, const float *restrict cp, const float *restrict c,
                                        const float *restrict dh, const float *restrict dc, float *restrict dr,
                                        float *restrict dcp, int64_t H) {
    for (int64_t j = 0; j < H; j++) {
        float i = sigm_f32(gr[j]), f = sigm_f32(gr[H + j]), g = tanh_f32(gr[2 * H + j]), o = sigm_f32(gr[3 * H + j]);
        float tc = tanh_f32(c[j]), dhk = dh ? dh[j] : 0.0f;
        float dct = (dc ? dc[j] : 0.0f) + dhk * o * (1.0f - tc * tc);
        float cpk = cp ? cp[j] : 0.0f;
        dr[j] = dct * g * i * (1.0f - i);
        dr[H + j] = dct * cpk * f * (1.0f - f);
        dr[2 * H + j] = dct * i * (1.0f - g * g);
        dr[3 * H + j] = dhk * tc * o * (1.0f - o);
        dcp[j] = dct * f;
    }
}

// gates (B,4H), c_prev (B,H) or NULL (zero state) -> h, c (B,H).
static void cell_f32(const float *gates, const float *cp, float *h, float *c, int64_t B, int64_t H) {
#pragma omp parallel for num_threads(weft_num_threads()) if(B * H >= LSTM_PAR_GRAIN) schedule(static)
    for (int64_t b = 0; b < B; b++)
        cell_row_f32(gates + b * 4 * H, cp ? cp + b * H : NULL, h + b * H, c + b * H, H);
}
static void cell_f64(const double *gates, const double *cp, double *h, double *c, int64_t B, int64_t H) {
#pragma omp parallel for num_threads(weft_num_threads()) if(B * H >= LSTM_PAR_GRAIN) schedule(static)
    for (int64_t b = 0; b < B; b++) {
        const double *gr = gates + b * 4 * H;
        for (int64_t j = 0; j < H; j++) {
            double i = sigm_f64(gr[j]), g = tanh(gr[2 * H + j]), o = sigm_f64(gr[3 * H + j]);
            double cn = i * g;
            if (cp) cn = sigm_f64(gr[H + j]) * cp[b * H + j] + cn;
            c[b * H + j] = cn;
            h[b * H + j] = o * tanh(cn);
        }
    }
}

// gates (B,4H), cp (B,H) or NULL, c (B,H), dh and dc (B,H) or NULL (zero)
// -> dg (B,4H), dcp (B,H).
static void cell_bw_f32(const float *gates, const float *cp, const float *c, const float *dh, const float *dc,
                        float *dg, float *dcp, int64_t B, int64_t H) {
#pragma omp parallel for num_threads(weft_num_threads()) if(B * H >= LSTM_PAR_GRAIN) schedule(static)
    for (int64_t b = 0; b < B; b++) {
        int64_t k = b * H;
        cell_bw_row_f32(gates + 4 * k, cp ? cp + k : NULL, c + k, dh ? dh + k : NULL, dc ? dc + k : NULL, dg + 4 * k,
                        dcp + k, H);
    }
}
static void cell_bw_f64(const double *gates, const double *cp, const double *c, const double *dh, const double *dc,
                        double *dg, double *dcp, int64_t B, int64_t H) {
#pragma omp parallel for num_threads(weft_num_threads()) if(B * H >= LSTM_PAR_GRAIN) schedule(static)
    for (int64_t b = 0; b < B; b++) {
        const double *gr = gates + b * 4 * H;
        double *dr = dg + b * 4 * H;
        for (int64_t j = 0; j < H; j++) {
            int64_t k = b * H + j;
            double i = sigm_f64(gr[j]), f = sigm_f64(gr[H + j]), g = tanh(gr[2 * H + j]), o = sigm_f64(gr[3 * H + j]);
            double tc = tanh(c[k]), dhk = dh ? dh[k] : 0.0;
            double dct = (dc ? dc[k] : 0.0) + dhk * o * (1.0 - tc * tc);
            double cpk = cp ? cp[k] : 0.0;
            dr[j] = dct * g * i * (1.0 - i);
            dr[H + j] = dct * cpk * f * (1.0 - f);
            dr[2 * H + j] = dct * i * (1.0 - g * g);
            dr[3 * H + j] = dhk * tc * o * (1.0 - o);
            dcp[k] = dct * f;
        }
    }
}

// (gates[, c_prev]) -> (h, c); infer has checked shapes and dtypes.
weft_status weft_cpu_lstm_cell(const weft_op_args *a) {
    int64_t B = a->in[0]->sizes[0], H = a->in[0]->sizes[1] / 4;
    if (B == 0 || H == 0) return WEFT_OK;
    weft_kernel_inputs k;
    weft_status st = weft_kernel_inputs_get(a, &k);
    if (st) return st;
    const void *g = weft_tensor_ptr(k.t[0]), *cp = a->n_in == 2 ? weft_tensor_ptr(k.t[1]) : NULL;
    void *h = weft_tensor_ptr(a->out[0]), *c = weft_tensor_ptr(a->out[1]);
    if (a->in[0]->dtype == WEFT_F32) cell_f32(g, cp, h, c, B, H);
    else cell_f64(g, cp, h, c, B, H);
    weft_kernel_inputs_free(&k);
    return WEFT_OK;
}

// (gates, [c_prev], c, [dh], [dc]) -> (dgates, dc_prev); attrs i[0..2] say which are present.
weft_status weft_cpu_lstm_cell_backward(const weft_op_args *a) {
    int64_t B = a->in[0]->sizes[0], H = a->in[0]->sizes[1] / 4;
    if (B == 0 || H == 0) return WEFT_OK;
    weft_kernel_inputs k;
    weft_status st = weft_kernel_inputs_get(a, &k);
    if (st) return st;
    const int64_t *f = a->attrs->i;
    int n = 1;
    const void *g = weft_tensor_ptr(k.t[0]);
    const void *cp = f[0] ? weft_tensor_ptr(k.t[n++]) : NULL;
    const void *c = weft_tensor_ptr(k.t[n++]);
    const void *dh = f[1] ? weft_tensor_ptr(k.t[n++]) : NULL;
    const void *dc = f[2] ? weft_tensor_ptr(k.t[n++]) : NULL;
    void *dg = weft_tensor_ptr(a->out[0]), *dcp = weft_tensor_ptr(a->out[1]);
    if (a->in[0]->dtype == WEFT_F32) cell_bw_f32(g, cp, c, dh, dc, dg, dcp, B, H);
    else cell_bw_f64(g, cp, c, dh, dc, dg, dcp, B, H);
    weft_kernel_inputs_free(&k);
    return WEFT_OK;
}

// ---- lstm_seq: the whole recurrence ----
//
// Layout: everything stays batch first, as the layer gives and wants it.
// A time step t is the rows b of (B,T,X) at stride T*X: the step's products
// read and write those rows in place through the GEMM's leading dims, so no
// step is ever copied out or stacked back.

// One step's gate pass, rows b in parallel. a (B rows of 4H, stride lda):
// the gates before activation, overwritten by i,f,g,o after it; cp (stride
// ldh) the previous c or NULL (zero state); c, h (stride ldh) written.
static WEFT_CLONES void seq_row_f32(float *restrict a, const float *restrict cp, float *restrict c,
                                    float *restrict h, int64_t H, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        float i = sigm_f32(a[j]), f = sigm_f32(a[H + j]), g = tanh_f32(a[2 * H + j]), o = sigm_f32(a[3 * H + j]);
        float cn = i * g + (cp ? f * cp[j] : 0.0f);
        a[j] = i, a[H + j] = f, a[2 * H + j] = g, a[3 * H + j] = o;
        c[j] = cn;
        h[j] = o * tanh_f32(cn);
    }
}
static void seq_row_f64(double *restrict a, const double *restrict cp, double *restrict c, double *restrict h,
                        int64_t H, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        double i = sigm_f64(a[j]), f = sigm_f64(a[H + j]), g = tanh(a[2 * H + j]), o = sigm_f64(a[3 * H + j]);
        double cn = i * g;
        if (cp) cn = f * cp[j] + cn;
        a[j] = i, a[H + j] = f, a[2 * H + j] = g, a[3 * H + j] = o;
        c[j] = cn;
        h[j] = o * tanh(cn);
    }
}

// One step of the backward for one row: a (4H) the activated gates, cp, c
// (H) (cp NULL: zero state), dh (H) the output's gradient and rec (H) the
// recurrent part (NULL at the last step), dc (H) carried in and out (dc_t in,
// dc_{t-1} out), dg (4H) written: the gates' gradient.
static WEFT_CLONES void seq_bw_row_f32(const float *restrict a, const float *restrict cp, const float *restrict c,
                                       const float *restrict dh, const float *restrict rec, float *restrict dc,
                                       float *restrict dg, int64_t H, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        float i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j];
        float tc = tanh_f32(c[j]), dhk = dh[j] + (rec ? rec[j] : 0.0f);
        float dct = dc[j] + dhk * o * (1.0f - tc * tc);
        dg[j] = dct * g * i * (1.0f - i);
        dg[H + j] = dct * (cp ? cp[j] : 0.0f) * f * (1.0f - f);
        dg[2 * H + j] = dct * i * (1.0f - g * g);
        dg[3 * H + j] = dhk * tc * o * (1.0f - o);
        dc[j] = dct * f;
    }
}
static void seq_bw_row_f64(const double *restrict a, const double *restrict cp, const double *restrict c,
                           const double *restrict dh, const double *restrict rec, double *restrict dc,
                           double *restrict dg, int64_t H, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        double i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j];
        double tc = tanh(c[j]), dhk = dh[j] + (rec ? rec[j] : 0.0);
        double dct = dc[j] + dhk * o * (1.0 - tc * tc);
        dg[j] = dct * g * i * (1.0 - i);
        dg[H + j] = dct * (cp ? cp[j] : 0.0) * f * (1.0 - f);
        dg[2 * H + j] = dct * i * (1.0 - g * g);
        dg[3 * H + j] = dhk * tc * o * (1.0 - o);
        dc[j] = dct * f;
    }
}

// The step's gate pass over B rows and n hidden units: a at row stride lda
// (gates H apart), cp / c / h at row stride ldh; cp NULL at t = 0. Pointers
// are offset to the first unit. Rows in parallel only where the work was not
// split over the threads already (weft_num_threads() is 1 inside that
// parallel region).
static void seq_step(weft_dtype dt, char *a, const char *cp, char *c, char *h, int64_t B, int64_t H, int64_t n,
                     int64_t lda, int64_t ldh) {
    size_t es = weft_dtype_size(dt), ra = (size_t)lda * es, rh = (size_t)ldh * es;
#pragma omp parallel for num_threads(weft_num_threads()) if(B * n >= LSTM_PAR_GRAIN) schedule(static)
    for (int64_t b = 0; b < B; b++) {
        const char *cpb = cp ? cp + b * rh : NULL;
        if (dt == WEFT_F32)
            seq_row_f32((float *)(a + b * ra), (const float *)cpb, (float *)(c + b * rh), (float *)(h + b * rh), H, n);
        else
            seq_row_f64((double *)(a + b * ra), (const double *)cpb, (double *)(c + b * rh), (double *)(h + b * rh), H,
                        n);
    }
}

// The backward's gate pass over B rows and n units: a, dg at stride lda; cp,
// c, dh at stride ldh; rec, dc at stride H ((B,H) workspaces). Pointers offset
// to the first unit; rows in parallel as seq_step.
static void seq_bw_step(weft_dtype dt, const char *a, const char *cp, const char *c, const char *dh, const char *rec,
                        char *dc, char *dg, int64_t B, int64_t H, int64_t n, int64_t lda, int64_t ldh) {
    size_t es = weft_dtype_size(dt), ra = (size_t)lda * es, rh = (size_t)ldh * es, r1 = (size_t)H * es;
#pragma omp parallel for num_threads(weft_num_threads()) if(B * n >= LSTM_PAR_GRAIN) schedule(static)
    for (int64_t b = 0; b < B; b++) {
        const char *cpb = cp ? cp + b * rh : NULL, *recb = rec ? rec + b * r1 : NULL;
        if (dt == WEFT_F32)
            seq_bw_row_f32((const float *)(a + b * ra), (const float *)cpb, (const float *)(c + b * rh),
                           (const float *)(dh + b * rh), (const float *)recb, (float *)(dc + b * r1),
                           (float *)(dg + b * ra), H, n);
        else
            seq_bw_row_f64((const double *)(a + b * ra), (const double *)cpb, (const double *)(c + b * rh),
                           (const double *)(dh + b * rh), (const double *)recb, (double *)(dc + b * r1),
                           (double *)(dg + b * ra), H, n);
    }
}

// Threads. Rows of the batch are independent through the whole recurrence,
// so the batch is split once into groups of at least SEQ_MIN_ROWS rows (below
// that a product is too thin to pay), each group running every step on its
// rows with single-threaded products (weft_cpu_gemm inside a parallel
// region): no barrier per step, and a group's rows stay in its core's cache.
// More threads than groups (16 cores, a batch of 32) split each group's
// hidden units too, at least SEQ_MIN_UNITS each: a thread then multiplies by
// its units' rows of W_hh only (a quarter of the matrix at 4 splits, which
// stays in its core's cache) and runs their gates, and the threads meet at a
// barrier after every step (step t+1 needs all of h_t).
#define SEQ_MIN_ROWS 8
#define SEQ_MIN_UNITS 32

typedef struct seq_part {
    int groups, splits; // threads = groups * splits
    int64_t b0, nb;     // this thread's rows
    int64_t j0, n;      // its hidden units (n may be 0: it only meets the barriers)
} seq_part;

static seq_part seq_layout(int64_t B, int64_t H) {
    int nt = weft_num_threads();
    int64_t g = B / SEQ_MIN_ROWS, s;
    g = g < 1 ? 1 : g > nt ? nt : g;
    s = nt / g;
    if (s > H / SEQ_MIN_UNITS) s = H / SEQ_MIN_UNITS;
    if (s < 1) s = 1;
    return (seq_part){.groups = (int)g, .splits = (int)s};
}

// Thread id's part of layout L inside the parallel region. A team smaller
// than asked for (a thread limit) runs the whole batch on thread 0.
static seq_part seq_part_of(seq_part L, int64_t B, int64_t H) {
    int id = 0, team = 1;
#ifdef _OPENMP
    id = omp_get_thread_num(), team = omp_get_num_threads();
#endif
    if (team != L.groups * L.splits) {
        L.groups = L.splits = 1;
        L.b0 = L.j0 = 0, L.nb = id == 0 ? B : 0, L.n = H;
        return L;
    }
    int g = id / L.splits, s = id % L.splits;
    L.b0 = B * g / L.groups, L.nb = B * (g + 1) / L.groups - L.b0;
    int64_t blk = (H + L.splits - 1) / L.splits;
    blk = (blk + 7) / 8 * 8; // whole vectors of units
    L.j0 = s * blk < H ? s * blk : H;
    L.n = H - L.j0 < blk ? H - L.j0 : blk;
    return L;
}

static void seq_barrier(const seq_part *P) {
    if (P->splits > 1) {
#pragma omp barrier
    }
}

// Rows [b0, b0+nb) and units [j0, j0+n) of P: pointers already offset to row
// b0. acts holds xg on entry. w (4H,H).
static void seq_forward(weft_dtype dt, const char *w, char *hs, char *acts, char *cs, const seq_part *P, int64_t T,
                        int64_t H) {
    size_t es = weft_dtype_size(dt), oj = (size_t)P->j0 * es;
    int64_t lda = T * 4 * H, ldh = T * H, nb = P->nb; // row strides of one step in acts and in hs / cs
    for (int64_t t = 0; t < T; t++) {
        char *at = acts + (size_t)(t * 4 * H) * es, *ct = cs + (size_t)(t * H) * es, *ht = hs + (size_t)(t * H) * es;
        // (nb,H) @ (H,4H) += into the step's gates; h_{-1} = 0 skips it. Split: the four gates' columns of its units.
        if (t > 0 && nb > 0 && P->splits == 1)
            weft_cpu_gemm(dt, false, true, nb, 4 * H, H, 1.0, ht - (size_t)H * es, ldh, w, H, 1.0, at, lda);
        else if (t > 0 && nb > 0 && P->n > 0)
            for (int64_t q = 0; q < 4; q++) {
                size_t oq = (size_t)(q * H) * es + oj;
                weft_cpu_gemm(dt, false, true, nb, P->n, H, 1.0, ht - (size_t)H * es, ldh, w + oq * (size_t)H, H, 1.0,
                              at + oq, lda);
            }
        if (nb > 0 && P->n > 0)
            seq_step(dt, at + oj, t > 0 ? ct - (size_t)H * es + oj : NULL, ct + oj, ht + oj, nb, H, P->n, lda, ldh);
        seq_barrier(P);
    }
}

// Rows and units of P: pointers offset to row b0; rec and dc (nb,H) the
// group's own workspace, dc zero on entry.
static void seq_backward(weft_dtype dt, const char *w, const char *acts, const char *cs, const char *dhs, char *dxg,
                         char *rec, char *dc, const seq_part *P, int64_t T, int64_t H) {
    size_t es = weft_dtype_size(dt), oj = (size_t)P->j0 * es;
    int64_t lda = T * 4 * H, ldh = T * H, nb = P->nb, n = P->n;
    for (int64_t t = T - 1; t >= 0; t--) {
        if (nb > 0 && n > 0) {
            if (t < T - 1) // (nb,4H) @ (4H,n): the recurrent part of dh_t, its units' columns of W_hh
                weft_cpu_gemm(dt, false, false, nb, n, 4 * H, 1.0, dxg + (size_t)((t + 1) * 4 * H) * es, lda, w + oj,
                              H, 0.0, rec + oj, H);
            size_t o4 = (size_t)(t * 4 * H) * es + oj, o1 = (size_t)(t * H) * es + oj;
            seq_bw_step(dt, acts + o4, t > 0 ? cs + o1 - (size_t)H * es : NULL, cs + o1, dhs + o1,
                        t < T - 1 ? rec + oj : NULL, dc + oj, dxg + o4, nb, H, n, lda, ldh);
        }
        seq_barrier(P); // step t-1's product reads all of dxg[:, t]
    }
}

// (xg (B,T,4H), w_hh (4H,H)) -> (hs (B,T,H), acts (B,T,4H), cs (B,T,H)).
// acts starts as a copy of xg; step t adds h_{t-1} W_hh^T into its rows
// (beta = 1: the gate add is the product's own), then activates them in place.
weft_status weft_cpu_lstm_seq(const weft_op_args *a) {
    const weft_tensor *xg = a->in[0];
    int64_t B = xg->sizes[0], T = xg->sizes[1], H = xg->sizes[2] / 4;
    if (B == 0 || T == 0 || H == 0) return WEFT_OK;
    weft_kernel_inputs k;
    weft_status st = weft_kernel_inputs_get(a, &k);
    if (st) return st;
    weft_dtype dt = (weft_dtype)xg->dtype;
    size_t es = weft_dtype_size(dt);
    const char *w = weft_tensor_ptr(k.t[1]), *x = weft_tensor_ptr(k.t[0]);
    char *hs = weft_tensor_ptr(a->out[0]), *acts = weft_tensor_ptr(a->out[1]), *cs = weft_tensor_ptr(a->out[2]);
    seq_part L = seq_layout(B, H);
#pragma omp parallel num_threads(L.groups * L.splits)
    {
        seq_part P = seq_part_of(L, B, H);
        size_t o4 = (size_t)(P.b0 * T * 4 * H) * es, o1 = (size_t)(P.b0 * T * H) * es;
        if (P.j0 == 0) memcpy(acts + o4, x + o4, (size_t)(P.nb * T * 4 * H) * es); // the group's first thread
        seq_barrier(&P);
        seq_forward(dt, w, hs + o1, acts + o4, cs + o1, &P, T, H);
    }
    weft_kernel_inputs_free(&k);
    return WEFT_OK;
}

// (w_hh, hs, acts, cs, dhs) -> (dxg (B,T,4H), dw_hh (4H,H)).
// Reverse time: rec (B,H) = dxg[:,t+1] (B,4H) @ W_hh (4H,H), then the gate
// pass writes dxg[:,t] and carries dc (B,H). Then dw_hh = dxg^T (4H,B*T) @
// hprev (B*T,H) as one product, hprev[:,t] = h_{t-1} (zeros at t = 0).
weft_status weft_cpu_lstm_seq_backward(const weft_op_args *a) {
    const weft_tensor *acts_t = a->in[2];
    int64_t B = acts_t->sizes[0], T = acts_t->sizes[1], H = acts_t->sizes[2] / 4;
    weft_dtype dt = (weft_dtype)acts_t->dtype;
    size_t es = weft_dtype_size(dt);
    char *dxg = weft_tensor_ptr(a->out[0]), *dw = weft_tensor_ptr(a->out[1]);
    if (B == 0 || T == 0 || H == 0) {
        if (H > 0) memset(dw, 0, (size_t)(4 * H * H) * es); // no step: w_hh's gradient is zero
        return WEFT_OK;
    }
    weft_kernel_inputs k;
    weft_status st = weft_kernel_inputs_get(a, &k);
    if (st) return st;
    const char *w = weft_tensor_ptr(k.t[0]), *hs = weft_tensor_ptr(k.t[1]), *acts = weft_tensor_ptr(k.t[2]);
    const char *cs = weft_tensor_ptr(k.t[3]), *dhs = weft_tensor_ptr(k.t[4]);
    // workspace: rec, dc (B,H) each, hprev (B,T,H); zeros (dc_T = 0, hprev[:,0] = 0)
    char *ws = calloc((size_t)(B * H * 2 + B * T * H), es);
    if (!ws) {
        weft_kernel_inputs_free(&k);
        return weft_error(WEFT_ERR_OOM, "lstm_seq_backward: out of memory for the workspace");
    }
    char *rec = ws, *dc = ws + (size_t)(B * H) * es, *hprev = ws + (size_t)(2 * B * H) * es;
    seq_part L = seq_layout(B, H);
#pragma omp parallel num_threads(L.groups * L.splits)
    {
        seq_part P = seq_part_of(L, B, H);
        int64_t b0 = P.b0, nb = P.nb;
        size_t o4 = (size_t)(b0 * T * 4 * H) * es, o1 = (size_t)(b0 * T * H) * es, oh = (size_t)(b0 * H) * es;
        seq_backward(dt, w, acts + o4, cs + o1, dhs + o1, dxg + o4, rec + oh, dc + oh, &P, T, H);
        if (P.j0 == 0) // hprev[b,1:] = hs[b,:T-1]; hprev[b,0] stays zero
            for (int64_t b = b0; b < b0 + nb; b++)
                memcpy(hprev + (size_t)(b * T * H + H) * es, hs + (size_t)(b * T * H) * es,
                       (size_t)((T - 1) * H) * es);
    }
    weft_cpu_gemm(dt, true, false, 4 * H, H, B * T, 1.0, dxg, 4 * H, hprev, H, 0.0, dw, H);
    free(ws);
    weft_kernel_inputs_free(&k);
    return WEFT_OK;
}
