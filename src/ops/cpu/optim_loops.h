// optim_loops.h — the fused update loops of the optimiser ops, one per
// optimiser kind. Included by optim.c once per element type with T
// (float/double) and SFX defined. Each loop reads a parameter, its gradient
// and its state once and writes them once: an optimiser step is memory
// bound, so one pass instead of PyTorch's chain of mul_/add_/addcmul_/sqrt/
// addcdiv_ passes.
//
// The arithmetic follows torch/optim/*.py (_single_tensor_*) operation by
// operation, with scalars computed in double and rounded to T as ATen does,
// so results agree with PyTorch to rounding (both may contract to FMA).
// All arrays are contiguous, (n) elements. Elements are independent and the
// blocks are fixed, so the result does not depend on the thread count.
//
// sqrt: with errno (the portable default) GCC will not vectorise a loop that
// calls sqrt, so the loops with a sqrt run in sub-blocks of OPT_SUB elements:
// a vectorised pass writes the sqrt argument to a small buffer, vsqrt takes
// it with SSE2's exact sqrtps/sqrtpd, a second vectorised pass finishes.
//
// Layout: <kind>_blk(len, pointers already offset) is the plain loop, compiled
// per ISA (OPT_CLONES); <kind>(n, ...) splits (n) into OPT_BLOCK-element
// blocks over threads when n is big. Optional state (amsgrad's max, rmsprop's
// grad_avg / momentum buffer) selects one of several loops up front, so no
// loop has a data-dependent branch or a conditional store and all vectorise.

#define OPT_CAT2(a, b) a##_##b
#define OPT_CAT(a, b) OPT_CAT2(a, b)
#define KN(name) OPT_CAT(name, SFX)

// Run BLK(len, lo) over [0, n): one call when small, else blocks over threads.
#define OPT_SPLIT(n, BLK)                                                                     \
    do {                                                                                      \
        if ((n) <= WEFT_PAR_GRAIN) {                                                          \
            BLK((n), 0);                                                                      \
        } else {                                                                              \
            int64_t nb_ = ((n) + OPT_BLOCK - 1) / OPT_BLOCK;                                  \
            _Pragma("omp parallel for num_threads(weft_num_threads()) schedule(static)")      \
            for (int64_t b_ = 0; b_ < nb_; b_++) {                                            \
                int64_t lo_ = b_ * OPT_BLOCK, len_ = (n) - lo_ < OPT_BLOCK ? (n) - lo_ : OPT_BLOCK; \
                BLK(len_, lo_);                                                               \
            }                                                                                 \
        }                                                                                     \
    } while (0)

// ---- sgd ----
// d = g + wd*p; buf = first ? d : mom*buf + (1-damp)*d; d = nesterov ? d + mom*buf : buf; p -= lr*d
OPT_CLONES static void KN(sgd_plain_blk)(int64_t n, T *restrict p, const T *restrict g, T lr, T wd) {
    for (int64_t i = 0; i < n; i++) {
        T d = g[i] + wd * p[i]; // wd == 0 exactly when unused: d unchanged
        p[i] = p[i] - lr * d;
    }
}
OPT_CLONES static void KN(sgd_mom_blk)(int64_t n, T *restrict p, const T *restrict g, T *restrict buf, T lr, T wd,
                                        T mom, T damp1, bool first, bool nesterov) {
    for (int64_t i = 0; i < n; i++) {
        T d = g[i] + wd * p[i];
        T b = first ? d : mom * buf[i] + damp1 * d;
        buf[i] = b;
        d = nesterov ? d + mom * b : b;
        p[i] = p[i] - lr * d;
    }
}
static void KN(sgd)(int64_t n, T *restrict p, const T *restrict g, T *restrict buf, const optim_hp *h, bool first) {
    const T lr = (T)h->lr, wd = (T)h->weight_decay, mom = (T)h->momentum, damp1 = (T)(1 - h->dampening);
    const bool nesterov = h->nesterov;
    if (!buf) {
#define BLK(len, lo) KN(sgd_plain_blk)(len, p + lo, g + lo, lr, wd)
        OPT_SPLIT(n, BLK);
#undef BLK
    } else {
#define BLK(len, lo) KN(sgd_mom_blk)(len, p + lo, g + lo, buf + lo, lr, wd, mom, damp1, first, nesterov)
        OPT_SPLIT(n, BLK);
#undef BLK
    }
}

// ---- adagrad ----
// d = g + wd*p; sum += d*d; p -= clr * d / (sqrt(sum) + eps)
OPT_CLONES static void KN(adagrad_blk)(int64_t n, T *restrict p, const T *restrict g, T *restrict sum, T wd, T eps,
                                        T nclr) {
    T tmp[OPT_SUB];
    for (int64_t lo = 0; lo < n; lo += OPT_SUB) {
        int len = n - lo < OPT_SUB ? (int)(n - lo) : OPT_SUB;
        T *restrict pp = p + lo, *restrict sp = sum + lo;
        const T *restrict gp = g + lo;
        for (int i = 0; i < len; i++) {
            T d = gp[i] + wd * pp[i]; // wd == 0 exactly when unused
            T s = sp[i] + d * d;
            sp[i] = s;
            tmp[i] = s;
        }
        KN(vsqrt)(len, tmp);
        for (int i = 0; i < len; i++) {
            T d = gp[i] + wd * pp[i]; // p is unchanged so far: the same d
            pp[i] = pp[i] + nclr * (d / (tmp[i] + eps));
        }
    }
}
static void KN(adagrad)(int64_t n, T *restrict p, const T *restrict g, T *restrict sum, const optim_hp *h,
                        double clr) {
    const T wd = (T)h->weight_decay, eps = (T)h->eps, nclr = (T)-clr;
#define BLK(len, lo) KN(adagrad_blk)(len, p + lo, g + lo, sum + lo, wd, eps, nclr)
    OPT_SPLIT(n, BLK);
#undef BLK
}

// ---- rmsprop ----
// d = g + wd*p; sq = alpha*sq + (1-alpha)*d*d;
//   centered: ga = alpha*ga + (1-alpha)*d, avg = sqrt(sq - ga*ga) + eps; else avg = sqrt(sq) + eps
//   momentum: buf = mom*buf + d/avg, p -= lr*buf; else p -= lr * d/avg
#define RMS_LOOP(CENTERED, MOMENTUM)                                       \
    for (int64_t lo = 0; lo < n; lo += OPT_SUB) {                          \
        int len = n - lo < OPT_SUB ? (int)(n - lo) : OPT_SUB;              \
        T *restrict pp = p + lo, *restrict sqp = sq + lo;                  \
        T *restrict gap = CENTERED ? ga + lo : NULL, *restrict bp = MOMENTUM ? buf + lo : NULL; \
        const T *restrict gp = g + lo;                                     \
        for (int i = 0; i < len; i++) {                                    \
            T d = gp[i] + wd * pp[i];                                      \
            T s = alpha * sqp[i] + alpha1 * (d * d);                       \
            sqp[i] = s;                                                    \
            if (CENTERED) {                                                \
                T a = alpha * gap[i] + alpha1 * d;                         \
                gap[i] = a;                                                \
                s = s - a * a;                                             \
            }                                                              \
            tmp[i] = s;                                                    \
        }                                                                  \
        KN(vsqrt)(len, tmp);                                               \
        for (int i = 0; i < len; i++) {                                    \
            T d = gp[i] + wd * pp[i];                                      \
            T avg = tmp[i] + eps;                                          \
            if (MOMENTUM) {                                                \
                T b = mom * bp[i] + d / avg;                               \
                bp[i] = b;                                                 \
                pp[i] = pp[i] + nlr * b;                                   \
            } else {                                                       \
                pp[i] = pp[i] + nlr * (d / avg);                           \
            }                                                              \
        }                                                                  \
    }
OPT_CLONES static void KN(rmsprop_blk)(int64_t n, T *restrict p, const T *restrict g, T *restrict sq,
                                        T *restrict ga, T *restrict buf, T wd, T eps, T alpha, T alpha1, T nlr,
                                        T mom) {
    T tmp[OPT_SUB];
    if (ga && buf) RMS_LOOP(1, 1)
    else if (ga) RMS_LOOP(1, 0)
    else if (buf) RMS_LOOP(0, 1)
    else RMS_LOOP(0, 0)
}
#undef RMS_LOOP
static void KN(rmsprop)(int64_t n, T *restrict p, const T *restrict g, T *restrict sq, T *restrict ga,
                        T *restrict buf, const optim_hp *h) {
    const T wd = (T)h->weight_decay, eps = (T)h->eps, alpha = (T)h->alpha, alpha1 = (T)(1 - h->alpha);
    const T nlr = (T)-h->lr, mom = (T)h->momentum;
#define BLK(len, lo) \
    KN(rmsprop_blk)(len, p + lo, g + lo, sq + lo, ga ? ga + lo : NULL, buf ? buf + lo : NULL, wd, eps, alpha, alpha1, nlr, mom)
    OPT_SPLIT(n, BLK);
#undef BLK
}

// ---- adam / adamw ----
//   adamw: p *= 1 - lr*wd (decay = 1 when unused); adam: d = g + wd*p (wd = 0 when unused)
//   m = b1*m + (1-b1)*d; v = b2*v + (1-b2)*d*d; amsgrad: vmax = max(vmax, v), used in place of v
//   p -= (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps), bc_k = 1 - beta_k^step
#define ADAM_LOOP(AMS)                                                                      \
    for (int64_t lo = 0; lo < n; lo += OPT_SUB) {                                           \
        int len = n - lo < OPT_SUB ? (int)(n - lo) : OPT_SUB;                               \
        T *restrict pp = p + lo, *restrict mp = m + lo, *restrict vp = v + lo;              \
        T *restrict xp = AMS ? vmax + lo : NULL;                                            \
        const T *restrict gp = g + lo;                                                      \
        for (int i = 0; i < len; i++) {                                                     \
            T pi = pp[i] * decay;                                                           \
            T d = gp[i] + wd * pi;                                                          \
            T mi = b1 * mp[i] + b1m * d;                                                    \
            T vi = b2 * vp[i] + b2m * (d * d);                                              \
            mp[i] = mi;                                                                     \
            vp[i] = vi;                                                                     \
            if (AMS) {                                                                      \
                T x = xp[i];                                                                \
                vi = vi > x ? vi : x; /* torch.maximum; NaN is the trainer's concern */     \
                xp[i] = vi;                                                                 \
            }                                                                               \
            pp[i] = pi;                                                                     \
            tmp[i] = vi;                                                                    \
        }                                                                                   \
        KN(vsqrt)(len, tmp);                                                                \
        for (int i = 0; i < len; i++) pp[i] = pp[i] + nss * (mp[i] / (tmp[i] / bc2s + eps)); \
    }
OPT_CLONES static void KN(adam_blk)(int64_t n, T *restrict p, const T *restrict g, T *restrict m, T *restrict v,
                                     T *restrict vmax, T decay, T wd, T b1, T b2, T b1m, T b2m, T eps, T nss, T bc2s) {
    T tmp[OPT_SUB];
    if (vmax) ADAM_LOOP(1)
    else ADAM_LOOP(0)
}
#undef ADAM_LOOP
static void KN(adam)(int64_t n, T *restrict p, const T *restrict g, T *restrict m, T *restrict v,
                     T *restrict vmax, const optim_hp *h, bool decoupled, double step_size, double bc2_sqrt) {
    const T b1 = (T)h->beta1, b2 = (T)h->beta2, b1m = (T)(1 - h->beta1), b2m = (T)(1 - h->beta2);
    const T eps = (T)h->eps, nss = (T)-step_size, bc2s = (T)bc2_sqrt;
    const T wd = decoupled ? 0 : (T)h->weight_decay, decay = decoupled ? (T)(1 - h->lr * h->weight_decay) : 1;
#define BLK(len, lo) \
    KN(adam_blk)(len, p + lo, g + lo, m + lo, v + lo, vmax ? vmax + lo : NULL, decay, wd, b1, b2, b1m, b2m, eps, nss, bc2s)
    OPT_SPLIT(n, BLK);
#undef BLK
}

// ---- clipping ----
// Sum of squares of x[0..n) (n <= a chunk) in double, eight independent
// accumulators so the loop is not bound by the latency of one add chain.
OPT_CLONES static double KN(chunk_sumsq)(int64_t n, const T *restrict x) {
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

OPT_CLONES static void KN(scale_blk)(int64_t n, T *restrict x, T c) {
    for (int64_t i = 0; i < n; i++) x[i] = x[i] * c;
}
static void KN(scale)(int64_t n, T *restrict x, T c) {
#define BLK(len, lo) KN(scale_blk)(len, x + lo, c)
    OPT_SPLIT(n, BLK);
#undef BLK
}

#undef KN
#undef OPT_CAT
#undef OPT_CAT2
