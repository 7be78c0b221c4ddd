// The tensor-core attention kernels (src/ops/cuda/attention_mma_kernels.cu, bf16) run on the CPU: the .cu file
// compiled as host C++ with stand-ins for what it uses of CUDA. Each CUDA thread of a block is a thread here;
// __syncthreads is a barrier of the block; __shfl_xor_sync, ldmatrix and mma.sync are exchanges within a warp,
// each by the layouts of the PTX ISA (ldmatrix m8n8.x4 with and without .trans; mma m16n8k16, .bf16, f32 sums;
// and ldmatrix's 16-byte row alignment is checked); cp.async copies land only when a wait_group lets them, and a
// thread's ldmatrix of bytes that another thread's cp.async may be writing (no barrier between) is a race. Checked against attention in
// double on the same bf16 inputs: o, lse, and the gradients of q, k, v, for head dims 16 to 128, lengths that
// do and do not fill the tiles, so that every mask, tile bound and fragment index of the kernels is exercised
// on every machine; and with q, k, v, go read from and o, gq, gk, gv written to (B,T,H,D) memory, as the op
// runs for a transformer's attention; and with q, k, v read from and gq, gk, gv written to the blocks of one
// (B,T,3C) buffer each, as the packed op runs them. What this cannot check (the real instruction's layouts and rounding, timing, shared
// memory limits) is test_cuda_attention's, on a GPU.
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

// ---- stand-ins for CUDA ----
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define WEFT_SMEM(name) unsigned char *name = emu_smem

struct dim3e {
    unsigned x;
};
static thread_local dim3e threadIdx, blockIdx;
static dim3e blockDim, gridDim;
static unsigned char *emu_smem;

struct uint4 {
    uint32_t x, y, z, w;
};
static inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return uint4{x, y, z, w}; }

struct __nv_bfloat16 {
    uint16_t x;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
static inline __nv_bfloat16 bf16_of(float f) { // round to nearest even (no NaN here)
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1);
    return __nv_bfloat16{(uint16_t)(u >> 16)};
}
static inline float __bfloat162float(__nv_bfloat16 b) {
    uint32_t u = (uint32_t)b.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) { return {bf16_of(lo), bf16_of(hi)}; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return bf16_of(f); }
static void weft_emu_atomic_add(float *p, float v) { // atomicAdd: a compare-and-swap loop on the bits
    uint32_t old, upd;
    __atomic_load(reinterpret_cast<uint32_t *>(p), &old, __ATOMIC_RELAXED);
    do {
        float f;
        memcpy(&f, &old, 4);
        f += v;
        memcpy(&upd, &f, 4);
    } while (!__atomic_compare_exchange(reinterpret_cast<uint32_t *>(p), &old, &upd, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED));
}

static pthread_barrier_t g_block_bar;
static thread_local int t_epoch; // barriers this thread has passed in its block: the same count in every thread
#define __syncthreads() (pthread_barrier_wait(&g_block_bar), t_epoch++)

// Races on shared memory through cp.async: a copy issued in barrier interval e1 and waited for in e2 may land on
// the GPU at any time in between, so another thread's ldmatrix of those 16 bytes in an interval of [e1, e2] (a
// buffer refilled before every warp is done with it) is a race. Per 16-byte chunk: each thread's last read
// interval, and the open copy's writer and interval. (The backward's lse / Dl rows go by plain stores and are
// not tracked.) Accesses outside the launch's shared memory count too.
struct emu_window {
    int writer, from, to; // writer -1: none
};
static std::vector<int> g_last_read;            // [chunk * 128 + thread]: interval, -1 none
static std::vector<emu_window> g_window;        // [chunk]
static size_t g_smem_size;
static pthread_mutex_t g_race_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_races, g_outside;
static long emu_chunk(const void *p) {
    const long off = (long)((const unsigned char *)p - emu_smem);
    if (off < 0 || off + 16 > (long)g_smem_size) {
        __atomic_add_fetch(&g_outside, 1, __ATOMIC_RELAXED);
        return -1;
    }
    return off / 16;
}
static void emu_race(const char *what, long c, int a, int b) {
    if (!g_races) fprintf(stderr, "race: %s, shared bytes %ld, threads %d and %d\n", what, c * 16, a, b);
    g_races++;
}
static void emu_on_read(const void *p) {
    const long c = emu_chunk(p);
    if (c < 0) return;
    const int me = (int)threadIdx.x;
    pthread_mutex_lock(&g_race_mu);
    g_last_read[(size_t)c * 128 + me] = t_epoch;
    const emu_window &w = g_window[c];
    if (w.writer >= 0 && w.writer != me && t_epoch >= w.from && t_epoch <= w.to)
        emu_race("a read while a cp.async into it may land", c, w.writer, me);
    pthread_mutex_unlock(&g_race_mu);
}
static void emu_on_issue(const void *p) {
    const long c = emu_chunk(p);
    if (c < 0) return;
    const int me = (int)threadIdx.x;
    pthread_mutex_lock(&g_race_mu);
    for (int t = 0; t < 128; t++)
        if (t != me && g_last_read[(size_t)c * 128 + t] == t_epoch)
            emu_race("a cp.async into bytes read since the last barrier", c, me, t);
    g_window[c] = emu_window{me, t_epoch, 1 << 30};
    pthread_mutex_unlock(&g_race_mu);
}
static void emu_on_land(const void *p) {
    const long c = emu_chunk(p);
    if (c < 0) return;
    pthread_mutex_lock(&g_race_mu);
    g_window[c].to = t_epoch;
    pthread_mutex_unlock(&g_race_mu);
}

struct warp_ex {
    pthread_barrier_t bar;
    float f[32];
    uint32_t a[32][4], b[32][2];
    const uint16_t *row[32];
};
static warp_ex g_warps[4];

static float __shfl_xor_sync(unsigned, float v, int mask) {
    warp_ex &w = g_warps[threadIdx.x / 32];
    const int l = threadIdx.x % 32;
    w.f[l] = v;
    pthread_barrier_wait(&w.bar);
    const float r = w.f[l ^ mask];
    pthread_barrier_wait(&w.bar);
    return r;
}

// element (r, k) of A (16x16) and (k, n) of B (16x8), from the lanes' registers
static float a_at(const warp_ex &w, int r, int k) {
    const int lane = (r % 8) * 4 + (k % 8) / 2, reg = (r >= 8) + 2 * (k >= 8);
    return __bfloat162float(__nv_bfloat16{(uint16_t)(w.a[lane][reg] >> (16 * (k & 1)))});
}
static float b_at(const warp_ex &w, int k, int n) {
    const int lane = n * 4 + (k % 8) / 2, reg = k >= 8;
    return __bfloat162float(__nv_bfloat16{(uint16_t)(w.b[lane][reg] >> (16 * (k & 1)))});
}

static void weft_emu_mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    warp_ex &w = g_warps[threadIdx.x / 32];
    const int l = threadIdx.x % 32, g = l / 4, t = l % 4;
    memcpy(w.a[l], a, sizeof a);
    w.b[l][0] = b0, w.b[l][1] = b1;
    pthread_barrier_wait(&w.bar);
    for (int e = 0; e < 4; e++) {
        const int r = g + 8 * (e >> 1), n = 2 * t + (e & 1);
        float s = c[e];
        for (int k = 0; k < 16; k++) s += a_at(w, r, k) * b_at(w, k, n);
        c[e] = s;
    }
    pthread_barrier_wait(&w.bar);
}

static int g_misaligned; // ldmatrix rows not on 16 bytes (the instruction's requirement)

// ldmatrix.m8n8.x4(.trans).b16: lane l gives the address of row l % 8 of matrix l / 8; register i of lane l
// gets matrix i's (row l / 4, columns 2 (l % 4), 2 (l % 4) + 1), or, transposed, (rows 2 (l % 4),
// 2 (l % 4) + 1, column l / 4); the lower column (row) in the low 16 bits.
static void weft_emu_ldmatrix_x4(uint32_t (&r)[4], const void *row, bool trans) {
    warp_ex &w = g_warps[threadIdx.x / 32];
    const int l = threadIdx.x % 32;
    if ((uintptr_t)row % 16) __atomic_add_fetch(&g_misaligned, 1, __ATOMIC_RELAXED);
    emu_on_read(row);
    w.row[l] = (const uint16_t *)row;
    pthread_barrier_wait(&w.bar);
    for (int i = 0; i < 4; i++) {
        uint32_t lo, hi;
        if (!trans) {
            const uint16_t *p = w.row[8 * i + l / 4];
            lo = p[2 * (l % 4)], hi = p[2 * (l % 4) + 1];
        } else {
            lo = w.row[8 * i + 2 * (l % 4)][l / 4], hi = w.row[8 * i + 2 * (l % 4) + 1][l / 4];
        }
        r[i] = lo | hi << 16;
    }
    pthread_barrier_wait(&w.bar);
}

// cp.async: each thread's copies wait in its queue, tagged with the group they will be committed in, and land
// only when a wait_group lets their group finish, so a kernel that read a tile before waiting for it (and the
// block's barrier after) would read the previous tile or the launch's NaN fill.
struct emu_copy {
    void *dst;
    const void *src;
    bool valid;
    int group;
};
static thread_local std::vector<emu_copy> t_copies;
static thread_local int t_committed;
static void weft_emu_cp_async16(void *dst, const void *src, bool valid) {
    if ((uintptr_t)dst % 16 || (uintptr_t)src % 16) __atomic_add_fetch(&g_misaligned, 1, __ATOMIC_RELAXED);
    emu_on_issue(dst);
    t_copies.push_back(emu_copy{dst, src, valid, t_committed});
}
static void weft_emu_cp_async_commit() { t_committed++; }
static void weft_emu_cp_async_wait(int n) { // groups older than the n most recent committed ones land
    std::vector<emu_copy> keep;
    for (const emu_copy &c : t_copies) {
        if (c.group < t_committed - n) {
            emu_on_land(c.dst);
            if (c.valid) memcpy(c.dst, c.src, 16);
            else memset(c.dst, 0, 16);
        } else {
            keep.push_back(c);
        }
    }
    t_copies.swap(keep);
}

#define WEFT_CU_EMU 1
#include "../../src/ops/cuda/attention_mma_kernels.cu"

// ---- running a kernel: one block after another, a thread per CUDA thread ----
template <typename F> struct emu_launch {
    F body;
    unsigned b, t;
};
static int g_unwaited; // copies still queued when a thread ended (never waited for)
template <typename F> static void *emu_thread(void *p) {
    emu_launch<F> *l = (emu_launch<F> *)p;
    threadIdx.x = l->t;
    blockIdx.x = l->b;
    t_epoch = 0;
    t_copies.clear();
    t_committed = 0;
    l->body();
    if (!t_copies.empty()) __atomic_add_fetch(&g_unwaited, 1, __ATOMIC_RELAXED);
    return NULL;
}
template <typename F> static void launch(unsigned nb, unsigned nt, size_t smem, F body) {
    std::vector<unsigned char> buf(smem + 16);
    gridDim.x = nb, blockDim.x = nt;
    for (unsigned b = 0; b < nb; b++) {
        memset(buf.data(), 0xff, buf.size()); // NaN bytes: a read before a write shows
        emu_smem = buf.data();
        g_smem_size = smem;
        g_last_read.assign((smem / 16 + 1) * 128, -1);
        g_window.assign(smem / 16 + 1, emu_window{-1, 0, 0});
        pthread_barrier_init(&g_block_bar, NULL, nt);
        for (int w = 0; w < 4; w++) pthread_barrier_init(&g_warps[w].bar, NULL, 32);
        std::vector<pthread_t> th(nt);
        std::vector<emu_launch<F>> args(nt, emu_launch<F>{body, b, 0});
        for (unsigned t = 0; t < nt; t++) {
            args[t].t = t;
            pthread_create(&th[t], NULL, emu_thread<F>, &args[t]);
        }
        for (unsigned t = 0; t < nt; t++) pthread_join(th[t], NULL);
        pthread_barrier_destroy(&g_block_bar);
        for (int w = 0; w < 4; w++) pthread_barrier_destroy(&g_warps[w].bar);
    }
}

// ---- the check ----
static int g_pass, g_fail;
static void check(const char *what, const std::vector<float> &got, const std::vector<double> &ref, double tol) {
    double big = 0, err = 0;
    size_t at = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        big = fmax(big, fabs(ref[i]));
        double e = fabs((double)got[i] - ref[i]);
        if (!(e <= err)) err = e, at = i; // NaN counts as worst
    }
    bool ok = err <= tol * fmax(big, 1e-3);
    if (!ok)
        fprintf(stderr, "%s: largest error %.3g at %zu (%.6g vs %.6g), values up to %.3g\n", what, err, at,
                (double)got[at], ref[at], big);
    ok ? g_pass++ : g_fail++;
}

static uint64_t g_rng = 12345;
static float rnd() { // [-1, 1)
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(g_rng >> 11) / (double)(1ull << 53) * 2 - 1);
}

// H > 1: q, k, v and go are read where they lie in (B,T,H,D) buffers (the heads of a (B,T,C) tensor, as the
// op hands them over from a transformer's attention), B = BH / H, and o is written (and read back for the
// backward) in that order too (the op's heads-last output); else all contiguous (BH,T,D).
// packed (H > 1): q, k, v are the three C-wide blocks of one (B,T,3C) buffer and gq, gk, gv are written into
// the blocks of another (causal_attention_qkv, as the attention module runs it): rows 3C apart.
template <int D> static void run_case(int BH, int T, int H = 1, bool packed = false) {
    const size_t n = (size_t)BH * T * D;
    std::vector<__nv_bfloat16> q(n), k(n), v(n), go(n), o(n);
    std::vector<double> qd(n), kd(n), vd(n), god(n);
    for (size_t i = 0; i < n; i++) {
        q[i] = bf16_of(rnd() * 2), k[i] = bf16_of(rnd() * 2), v[i] = bf16_of(rnd()), go[i] = bf16_of(rnd());
        qd[i] = __bfloat162float(q[i]), kd[i] = __bfloat162float(k[i]), vd[i] = __bfloat162float(v[i]);
        god[i] = __bfloat162float(go[i]);
    }
    const double scale = 1 / sqrt((double)D);
    // reference in double
    std::vector<double> od(n), lsed((size_t)BH * T), gqd(n, 0), gkd(n, 0), gvd(n, 0);
    for (int h = 0; h < BH; h++) {
        const size_t H = (size_t)h * T * D;
        std::vector<double> P((size_t)T * T, 0);
        for (int i = 0; i < T; i++) {
            double m = -INFINITY, l = 0;
            for (int j = 0; j <= i; j++) {
                double s = 0;
                for (int d = 0; d < D; d++) s += qd[H + i * D + d] * kd[H + j * D + d];
                P[(size_t)i * T + j] = s * scale;
                m = fmax(m, s * scale);
            }
            for (int j = 0; j <= i; j++) l += exp(P[(size_t)i * T + j] - m);
            lsed[(size_t)h * T + i] = m + log(l);
            for (int j = 0; j <= i; j++) P[(size_t)i * T + j] = exp(P[(size_t)i * T + j] - lsed[(size_t)h * T + i]);
            for (int d = 0; d < D; d++) {
                double s = 0;
                for (int j = 0; j <= i; j++) s += P[(size_t)i * T + j] * vd[H + j * D + d];
                od[H + i * D + d] = s;
            }
        }
        for (int i = 0; i < T; i++) {
            double dl = 0;
            for (int d = 0; d < D; d++) dl += god[H + i * D + d] * od[H + i * D + d];
            for (int j = 0; j <= i; j++) {
                const double p = P[(size_t)i * T + j];
                double dp = 0;
                for (int d = 0; d < D; d++) {
                    dp += god[H + i * D + d] * vd[H + j * D + d];
                    gvd[H + j * D + d] += p * god[H + i * D + d];
                }
                const double ds = p * (dp - dl) * scale;
                for (int d = 0; d < D; d++) {
                    gqd[H + i * D + d] += ds * kd[H + j * D + d];
                    gkd[H + j * D + d] += ds * qd[H + i * D + d];
                }
            }
        }
    }
    // the kernels' inputs: the same values, contiguous or scattered into (B,T,H,D) order (C = H*D)
    const int64_t C = (int64_t)H * D;
    const weft_cu_heads lay = H > 1 ? weft_cu_heads{H, (int64_t)T * C, D, C} : weft_cu_heads{1, (int64_t)T * D, 0, D};
    // q, k, v's layout (and their gradients'): packed, block p at p*C of (B,T,3C); else as o and go
    const weft_cu_heads pl = packed ? weft_cu_heads{H, (int64_t)T * 3 * C, D, 3 * C} : lay;
    const size_t np = packed ? 3 * n : n, off[3] = {0, packed ? (size_t)C : 0, packed ? 2 * (size_t)C : 0};
    std::vector<__nv_bfloat16> qkv(packed ? np : 3 * n), gs(n), gqkv(packed ? np : 3 * n);
    __nv_bfloat16 *qp = qkv.data() + off[0], *kp = qkv.data() + (packed ? off[1] : n), *vp = qkv.data() + (packed ? off[2] : 2 * n);
    auto at = [&](const weft_cu_heads &L, int bh, int i, int d) {
        return (size_t)((bh / H) * L.sb + (bh % H) * L.sh + (int64_t)i * L.st + d);
    };
    for (int bh = 0; bh < BH; bh++)
        for (int i = 0; i < T; i++)
            for (int d = 0; d < D; d++) {
                const size_t from = ((size_t)bh * T + i) * D + d, to = at(pl, bh, i, d);
                qp[to] = q[from], kp[to] = k[from], vp[to] = v[from], gs[at(lay, bh, i, d)] = go[from];
            }
    // the kernels, launched as attention_mma_kernels.cu's launchers do
    const int64_t ntile = (T + kOwn - 1) / kOwn;
    constexpr int MT = fwd_mt_max<D>(); // the forward's default; with 2, the 64-row blocks must give the same bits
    const int64_t ftile = (T + kOwn * MT - 1) / (kOwn * MT), ftile1 = (T + kOwn - 1) / kOwn;
    std::vector<float> lse((size_t)BH * T), dl((size_t)BH * T);
    const __nv_bfloat16 *Q = qp, *K = kp, *V = vp, *G = gs.data();
    __nv_bfloat16 *O = o.data(), *GQ = gqkv.data(), *GK = GQ + (packed ? off[1] : n), *GV = GQ + (packed ? off[2] : 2 * n);
    float *L = lse.data(), *DL = dl.data();
    launch((unsigned)(BH * ftile), kThreads, fwd_smem<__nv_bfloat16, D, MT>(), [=] {
        mma_fwd<__nv_bfloat16, D, MT>(Q, K, V, pl, pl, pl, O, lay, L, T, ftile, (float)scale * kLog2e);
    });
    if (MT == 2) { // WEFT_ATTN_FWD_ROWS=64: one 16-row block a warp
        std::vector<__nv_bfloat16> o1(n);
        std::vector<float> lse1((size_t)BH * T);
        __nv_bfloat16 *O1 = o1.data();
        float *L1 = lse1.data();
        launch((unsigned)(BH * ftile1), kThreads, fwd_smem<__nv_bfloat16, D, 1>(), [=] {
            mma_fwd<__nv_bfloat16, D, 1>(Q, K, V, pl, pl, pl, O1, lay, L1, T, ftile1, (float)scale * kLog2e);
        });
        const bool same = !memcmp(o1.data(), o.data(), n * sizeof(__nv_bfloat16)) &&
                          !memcmp(lse1.data(), lse.data(), lse.size() * sizeof(float));
        if (!same) fprintf(stderr, "bf16 D=%d BH=%d T=%d: the forward's 64- and 128-row blocks differ\n", D, BH, T);
        same ? g_pass++ : g_fail++;
    }
    launch(1, 128, 0, [=] { mma_bwd_dl<__nv_bfloat16, D>(G, lay, O, lay, DL, (int64_t)BH * T, T); });
    // the gradients in the inputs' layout: with H > 1, (B,T,H,D), as the op's heads-last backward writes them
    launch((unsigned)(BH * ntile), kThreads, dkdv_smem<__nv_bfloat16, D>(), [=] {
        mma_bwd_dkdv<__nv_bfloat16, D, 1>(Q, K, V, L, G, pl, pl, pl, lay, DL, GK, pl, GV, pl, nullptr, T, ntile,
                                          (float)scale);
    });
    launch((unsigned)(BH * ntile), kThreads, dq_smem<__nv_bfloat16, D>(), [=] {
        mma_bwd_dq<__nv_bfloat16, D, 1>(Q, K, V, L, G, pl, pl, pl, lay, DL, GQ, pl, T, ntile, (float)scale);
    });
    if (MT == 2) { // WEFT_ATTN_BWD_ROWS=128: two 16-row blocks a warp in both kernels, the same bits
        std::vector<__nv_bfloat16> g2(gqkv.size());
        __nv_bfloat16 *GQ2 = g2.data(), *GK2 = GQ2 + (packed ? off[1] : n), *GV2 = GQ2 + (packed ? off[2] : 2 * n);
        launch((unsigned)(BH * ftile), kThreads, dkdv_smem<__nv_bfloat16, D, 2>(), [=] {
            mma_bwd_dkdv<__nv_bfloat16, D, 2>(Q, K, V, L, G, pl, pl, pl, lay, DL, GK2, pl, GV2, pl, nullptr, T, ftile,
                                              (float)scale);
        });
        launch((unsigned)(BH * ftile), kThreads, dq_smem<__nv_bfloat16, D, 2>(), [=] {
            mma_bwd_dq<__nv_bfloat16, D, 2>(Q, K, V, L, G, pl, pl, pl, lay, DL, GQ2, pl, T, ftile, (float)scale);
        });
        bool same = true;
        for (int bh = 0; bh < BH; bh++)
            for (int i = 0; i < T; i++)
                for (int d = 0; d < D; d++) {
                    const size_t x = (bh / H) * pl.sb + (bh % H) * pl.sh + (int64_t)i * pl.st + d;
                    same &= GQ2[x].x == GQ[x].x && GK2[x].x == GK[x].x && GV2[x].x == GV[x].x;
                }
        if (!same) fprintf(stderr, "bf16 D=%d BH=%d T=%d: the backward's 64- and 128-row blocks differ\n", D, BH, T);
        same ? g_pass++ : g_fail++;
    }
    // the single pass (WEFT_ATTN_BWD=fused): dk and dv the same bits as the two kernels', dq by atomics into f32
    std::vector<__nv_bfloat16> gqkv1(gqkv.size());
    std::vector<float> dqa((size_t)BH * T * D, 0.f); // zeroes, as the launcher's cudaMemsetAsync leaves it
    {
        __nv_bfloat16 *GQ1 = gqkv1.data(), *GK1 = GQ1 + (packed ? off[1] : n), *GV1 = GQ1 + (packed ? off[2] : 2 * n);
        float *DQA = dqa.data();
        launch((unsigned)(BH * ntile), kThreads, fused_bwd_smem<__nv_bfloat16, D>(), [=] {
            mma_bwd_dkdv<__nv_bfloat16, D, 1, true>(Q, K, V, L, G, pl, pl, pl, lay, DL, GK1, pl, GV1, pl, DQA, T,
                                                    ntile, (float)scale);
        });
        launch(2, 256, 0, [=] { mma_bwd_dq_store<__nv_bfloat16>(DQA, GQ1, pl, (int64_t)n, T, D, (float)scale); });
        bool same_kv = true;
        for (int bh = 0; bh < BH; bh++)
            for (int i = 0; i < T; i++)
                for (int d = 0; d < D; d++) {
                    const size_t x = (bh / H) * pl.sb + (bh % H) * pl.sh + (int64_t)i * pl.st + d;
                    same_kv &= GK1[x].x == GK[x].x && GV1[x].x == GV[x].x;
                }
        if (!same_kv)
            fprintf(stderr, "bf16 D=%d BH=%d T=%d: the single pass's dk / dv differ from the two kernels'\n", D, BH, T);
        same_kv ? g_pass++ : g_fail++;
    }
    auto f32 = [](const std::vector<__nv_bfloat16> &x) {
        std::vector<float> r(x.size());
        for (size_t i = 0; i < x.size(); i++) r[i] = __bfloat162float(x[i]);
        return r;
    };
    char what[96];
    // Tolerances, relative to the largest reference value: o and the gradients are bf16 results of products
    // whose operands P and dS are rounded to bf16 (2^-9 relative each), so a few units of 2^-8; lse is f32.
    const char *names[6] = {"o", "lse", "grad q", "grad k", "grad v", "grad q (single pass)"};
    auto bhtd = [&](const __nv_bfloat16 *x, const weft_cu_heads &L) { // back in (BH,T,D) order
        std::vector<__nv_bfloat16> r(n);
        for (int bh = 0; bh < BH; bh++)
            for (int i = 0; i < T; i++)
                for (int d = 0; d < D; d++) r[((size_t)bh * T + i) * D + d] = x[at(L, bh, i, d)];
        return r;
    };
    const std::vector<float> got[6] = {f32(bhtd(O, lay)), lse, f32(bhtd(GQ, pl)), f32(bhtd(GK, pl)), f32(bhtd(GV, pl)),
                                       f32(bhtd(gqkv1.data(), pl))};
    const std::vector<double> *ref[6] = {&od, &lsed, &gqd, &gkd, &gvd, &gqd};
    const double tol[6] = {2e-2, 1e-4, 3e-2, 3e-2, 3e-2, 3e-2};
    for (int i = 0; i < 6; i++) {
        snprintf(what, sizeof what, "bf16 D=%d BH=%d T=%d%s: %s", D, BH, T,
                 packed ? " packed (B,T,3C)" : H > 1 ? " (B,T,H,D)" : "", names[i]);
        check(what, got[i], *ref[i], tol[i]);
    }
    printf("ok   D=%d BH=%d T=%d%s\n", D, BH, T,
           packed ? " read from and written to packed (B,T,3C)" : H > 1 ? " read in (B,T,H,D) order" : "");
    fflush(stdout);
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "--quick");
    run_case<16>(2, 1);
    run_case<16>(2, 17);
    run_case<32>(3, 64);
    run_case<32>(1, 100);
    run_case<64>(2, 65);
    run_case<16>(6, 33, 3); // heads of (B,T,C) tensors: 2 sequences of 3 heads
    run_case<32>(4, 70, 2);
    run_case<16>(1, 31); // one tile short, full, one row over, and two or more tiles of the backward's 32
    run_case<16>(1, 32);
    run_case<16>(1, 33);
    run_case<16>(1, 129);
    run_case<16>(4, 95, 4);
    run_case<16>(1, 257); // two full blocks of the forward's 128 query rows (D up to 64) and one row more
    run_case<16>(6, 33, 3, true); // causal_attention_qkv: q, k, v and their gradients in one (B,T,3C) each
    run_case<32>(4, 70, 2, true);
    if (!quick) {
        run_case<64>(1, 130);
        run_case<64>(2, 300, 2);
        run_case<128>(1, 97);
    }
    if (g_misaligned) fprintf(stderr, "ldmatrix / cp.async: %d addresses not on 16 bytes\n", g_misaligned);
    if (g_unwaited) fprintf(stderr, "cp.async: %d threads ended with copies never waited for\n", g_unwaited);
    if (g_races) fprintf(stderr, "shared memory: %d races between cp.async and ldmatrix\n", g_races);
    if (g_outside) fprintf(stderr, "shared memory: %d accesses outside the launch's bytes\n", g_outside);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail || g_misaligned || g_unwaited || g_races || g_outside ? 1 : 0;
}
