// optim_kernels.h — the fused update loops, one per optimiser kind. Included
// by optim.c once per element type with T (float/double), SQRT and SFX
// defined. Each loop reads a parameter, its gradient and its state once and
// writes them once: an optimiser step is memory bound, so one pass instead
// of PyTorch's chain of mul_/add_/addcmul_/sqrt/addcdiv_ passes.
//
// The arithmetic follows torch/optim/*.py (_single_tensor_*) operation by
// operation, with scalars computed in double and rounded to T as ATen does,
// so results agree with PyTorch to rounding (ATen may use FMA).
// All arrays are contiguous, (n) elements; elements are independent, so the
// result does not depend on the thread count.

#define OPT_CAT2(a, b) a##_##b
#define OPT_CAT(a, b) OPT_CAT2(a, b)
#define KN(name) OPT_CAT(name, SFX)

// Threads only when the parameter is big enough to pay for the fork/join.
#define OPT_PAR_FOR _Pragma("omp parallel for num_threads(weft_num_threads()) if(n > WEFT_PAR_GRAIN) schedule(static)")

// sgd: d = g + wd*p; buf = first ? d : mom*buf + (1-damp)*d; d = nesterov ? d + mom*buf : buf; p -= lr*d
static void KN(sgd)(int64_t n, T *restrict p, const T *restrict g, T *restrict buf, const optim_hp *h, bool first) {
    const T lr = (T)h->lr, wd = (T)h->weight_decay, mom = (T)h->momentum, damp1 = (T)(1 - h->dampening);
    const bool use_wd = h->weight_decay != 0;
    if (h->momentum == 0) {
        OPT_PAR_FOR
        for (int64_t i = 0; i < n; i++) {
            T d = g[i];
            if (use_wd) d = d + wd * p[i];
            p[i] = p[i] - lr * d;
        }
        return;
    }
    const bool nesterov = h->nesterov;
    OPT_PAR_FOR
    for (int64_t i = 0; i < n; i++) {
        T d = g[i];
        if (use_wd) d = d + wd * p[i];
        T b = first ? d : mom * buf[i] + damp1 * d;
        buf[i] = b;
        d = nesterov ? d + mom * b : b;
        p[i] = p[i] - lr * d;
    }
}

// adagrad: d = g + wd*p; sum += d*d; p -= clr * d / (sqrt(sum) + eps)
static void KN(adagrad)(int64_t n, T *restrict p, const T *restrict g, T *restrict sum, const optim_hp *h,
                        double clr) {
    const T wd = (T)h->weight_decay, eps = (T)h->eps, nclr = (T)-clr;
    const bool use_wd = h->weight_decay != 0;
    OPT_PAR_FOR
    for (int64_t i = 0; i < n; i++) {
        T d = g[i];
        if (use_wd) d = d + wd * p[i];
        T s = sum[i] + d * d;
        sum[i] = s;
        p[i] = p[i] + nclr * (d / (SQRT(s) + eps));
    }
}

// rmsprop: d = g + wd*p; sq = alpha*sq + (1-alpha)*d*d;
//   centered: ga = alpha*ga + (1-alpha)*d, avg = sqrt(sq - ga*ga) + eps; else avg = sqrt(sq) + eps
//   momentum: buf = mom*buf + d/avg, p -= lr*buf; else p -= lr * d/avg
static void KN(rmsprop)(int64_t n, T *restrict p, const T *restrict g, T *restrict sq, T *restrict ga,
                        T *restrict buf, const optim_hp *h) {
    const T wd = (T)h->weight_decay, eps = (T)h->eps, alpha = (T)h->alpha, alpha1 = (T)(1 - h->alpha);
    const T nlr = (T)-h->lr, mom = (T)h->momentum;
    const bool use_wd = h->weight_decay != 0;
    OPT_PAR_FOR
    for (int64_t i = 0; i < n; i++) {
        T d = g[i];
        if (use_wd) d = d + wd * p[i];
        T s = alpha * sq[i] + alpha1 * (d * d);
        sq[i] = s;
        T avg;
        if (ga) {
            T a = alpha * ga[i] + alpha1 * d;
            ga[i] = a;
            avg = SQRT(s - a * a) + eps;
        } else {
            avg = SQRT(s) + eps;
        }
        if (buf) {
            T b = mom * buf[i] + d / avg;
            buf[i] = b;
            p[i] = p[i] + nlr * b;
        } else {
            p[i] = p[i] + nlr * (d / avg);
        }
    }
}

// adam / adamw (decoupled = adamw):
//   adamw: p *= 1 - lr*wd; adam: d = g + wd*p
//   m = b1*m + (1-b1)*d; v = b2*v + (1-b2)*d*d; amsgrad: vmax = max(vmax, v), use vmax for v
//   p -= (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps), bc_k = 1 - beta_k^step
static void KN(adam)(int64_t n, T *restrict p, const T *restrict g, T *restrict m, T *restrict v,
                     T *restrict vmax, const optim_hp *h, bool decoupled, double step_size, double bc2_sqrt) {
    const T b1 = (T)h->beta1, b2 = (T)h->beta2, b1m = (T)(1 - h->beta1), b2m = (T)(1 - h->beta2);
    const T eps = (T)h->eps, nss = (T)-step_size, bc2s = (T)bc2_sqrt;
    const T wd = (T)h->weight_decay, decay = (T)(1 - h->lr * h->weight_decay);
    const bool use_wd = !decoupled && h->weight_decay != 0, use_decay = decoupled && h->weight_decay != 0;
    OPT_PAR_FOR
    for (int64_t i = 0; i < n; i++) {
        T pi = p[i], d = g[i];
        if (use_decay) pi = pi * decay;
        if (use_wd) d = d + wd * pi;
        T mi = b1 * m[i] + b1m * d;
        T vi = b2 * v[i] + b2m * (d * d);
        m[i] = mi;
        v[i] = vi;
        if (vmax) {
            T x = vmax[i];
            vi = vi > x ? vi : x; // torch.maximum; NaN is not our concern (the trainer checks the loss)
            vmax[i] = vi;
        }
        T denom = SQRT(vi) / bc2s + eps;
        p[i] = pi + nss * (mi / denom);
    }
}

// Sum of squares of x[0..n) (n <= a chunk) in double, eight independent
// accumulators so the loop is not bound by the latency of one add chain.
static double KN(chunk_sumsq)(int64_t n, const T *restrict x) {
    double a[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) a[k] += (double)x[i + k] * (double)x[i + k];
    for (; i < n; i++) a[0] += (double)x[i] * (double)x[i];
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// Sum of squares of x[0..n) in double. Fixed-size chunks summed in chunk
// order, so the value does not depend on the thread count (a bit-identical
// resume needs a deterministic clip).
static double KN(sumsq)(int64_t n, const T *restrict x) {
    enum { CHUNK = 8192 };
    int64_t nchunks = (n + CHUNK - 1) / CHUNK;
    double *part = nchunks > 1 ? malloc(sizeof(double) * (size_t)nchunks) : NULL;
    if (!part) { // one chunk, or no memory for the partials: serial, same chunking
        double s = 0;
        for (int64_t lo = 0; lo < n; lo += CHUNK) s += KN(chunk_sumsq)(n - lo < CHUNK ? n - lo : CHUNK, x + lo);
        return s;
    }
#pragma omp parallel for num_threads(weft_num_threads()) if(n > WEFT_PAR_GRAIN) schedule(static)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t lo = c * CHUNK;
        part[c] = KN(chunk_sumsq)(n - lo < CHUNK ? n - lo : CHUNK, x + lo);
    }
    double s = 0;
    for (int64_t c = 0; c < nchunks; c++) s += part[c];
    free(part);
    return s;
}

static void KN(scale)(int64_t n, T *restrict x, T c) {
    OPT_PAR_FOR
    for (int64_t i = 0; i < n; i++) x[i] = x[i] * c;
}

#undef KN
#undef OPT_CAT
#undef OPT_CAT2
#undef OPT_PAR_FOR
