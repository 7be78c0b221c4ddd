// CPU kernels of the fused LSTM cell (def_lstm.c has the maths): one pass
// over (B,H) per call, rows in parallel. Inputs are made contiguous first
// (a time step's gates usually are; c and the gradients always are).
// Plain typed functions, f32 and f64. f64 uses libm's exp/tanh as the
// elementwise sigmoid/tanh kernels do, so the fused cell gives the composed
// ops' values (tests compare within 1e-12). f32 uses the vectorisable
// weft_vexp_f32 (vmath.h) for both: libm's tanhf (through expm1f) was a fifth
// of a kjv-lstm training step; its results differ from libm's by a few ulp.
#include <math.h>

#include "../../core/core_impl.h"
#include "../op.h"
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
