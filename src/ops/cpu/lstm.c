// CPU kernels of the fused LSTM cell (def_lstm.c has the maths): one pass
// over (B,H) per call, rows in parallel. Inputs are made contiguous first
// (a time step's gates usually are; c and the gradients always are).
// Plain typed functions, f32 and f64: libm's expf/tanhf as the elementwise
// sigmoid/tanh kernels use, so the fused cell gives the composed ops' values.
#include <math.h>

#include "../../core/core_impl.h"
#include "../op.h"

// Rows of a call below this many (B*H) elements run on one thread: ~5
// transcendentals per element make a smaller grain than plain elementwise pay.
#define LSTM_PAR_GRAIN 2048

static inline float sigm_f32(float v) { return 1.0f / (1.0f + expf(-v)); }
static inline double sigm_f64(double v) { return 1.0 / (1.0 + exp(-v)); }

// gates (B,4H), c_prev (B,H) or NULL (zero state) -> h, c (B,H).
static void cell_f32(const float *gates, const float *cp, float *h, float *c, int64_t B, int64_t H) {
#pragma omp parallel for num_threads(weft_num_threads()) if(B * H >= LSTM_PAR_GRAIN) schedule(static)
    for (int64_t b = 0; b < B; b++) {
        const float *gr = gates + b * 4 * H; // (4H): i, f, g, o
        for (int64_t j = 0; j < H; j++) {
            float i = sigm_f32(gr[j]), g = tanhf(gr[2 * H + j]), o = sigm_f32(gr[3 * H + j]);
            float cn = i * g;
            if (cp) cn = sigm_f32(gr[H + j]) * cp[b * H + j] + cn;
            c[b * H + j] = cn;
            h[b * H + j] = o * tanhf(cn);
        }
    }
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
        const float *gr = gates + b * 4 * H;
        float *dr = dg + b * 4 * H;
        for (int64_t j = 0; j < H; j++) {
            int64_t k = b * H + j;
            float i = sigm_f32(gr[j]), f = sigm_f32(gr[H + j]), g = tanhf(gr[2 * H + j]), o = sigm_f32(gr[3 * H + j]);
            float tc = tanhf(c[k]), dhk = dh ? dh[k] : 0.0f;
            float dct = (dc ? dc[k] : 0.0f) + dhk * o * (1.0f - tc * tc);
            float cpk = cp ? cp[k] : 0.0f;
            dr[j] = dct * g * i * (1.0f - i);
            dr[H + j] = dct * cpk * f * (1.0f - f);
            dr[2 * H + j] = dct * i * (1.0f - g * g);
            dr[3 * H + j] = dhk * tc * o * (1.0f - o);
            dcp[k] = dct * f;
        }
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
