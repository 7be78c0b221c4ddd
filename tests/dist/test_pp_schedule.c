// The pipeline schedules (src/dist/pp_schedule.c, weft_pp_actions) run on a
// simulated pipeline, no processes and no clocks: each rank executes its
// actions in order, an action starting when its rank is free and what it
// needs is done (F of chunk k, micro-batch m needs F of chunk k-1; B of
// chunk k needs B of chunk k+1, or the F of the last chunk), with sends
// never blocking as in pp.c. For every schedule, P = 1..6, M = 1..12 and
// V = 1..3 (interleaved: M a multiple of P), with a forward taking tf and a
// backward tb per stage (1/V of that per chunk):
//   - each rank runs every forward and backward of its chunks exactly once,
//     with nothing left waiting (no deadlock);
//   - the step lasts exactly (V*M + P - 1) * (tf + tb) / V: the bubble
//     (P-1)/(M+P-1) for GPipe and 1F1B, (P-1)/(V*M+P-1) interleaved, the
//     closed forms weft_pp_bubble_theory reports;
//   - each chunk's backwards run in micro-batch order (the gradients
//     accumulate in the same order under every schedule);
//   - 1F1B keeps at most P - rank micro-batches in flight on a rank, GPipe M.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

#include "dist/pp_impl.h"

enum { MAXA = 2 * 3 * 12 };

typedef struct {
    double fdone, bdone; // finish times, < 0: not yet
} cell;

static const char *name(weft_pp_schedule s) {
    return s == WEFT_PP_GPIPE ? "gpipe" : s == WEFT_PP_1F1B ? "1f1b" : "interleaved";
}

static void simulate(weft_pp_schedule s, int P, int V, int M, double tf, double tb) {
    weft_pp_action a[6][MAXA];
    int n[6], pos[6] = {0}, K = P * V;
    double t[6] = {0}, T = 0;
    cell c[18][12]; // [chunk][micro-batch]
    for (int k = 0; k < K; k++)
        for (int m = 0; m < M; m++) c[k][m] = (cell){-1, -1};
    for (int r = 0; r < P; r++) n[r] = weft_pp_actions(s, P, V, M, r, a[r]);
    int inflight[6] = {0}, peak[6] = {0}, last_b[18];
    for (int k = 0; k < K; k++) last_b[k] = -1;
    bool progress = true, ordered = true;
    while (progress) {
        progress = false;
        for (int r = 0; r < P; r++)
            while (pos[r] < n[r]) {
                weft_pp_action x = a[r][pos[r]];
                int k = x.v * P + r;
                double dep;
                if (x.fwd) dep = k == 0 ? 0 : c[k - 1][x.m].fdone;
                else dep = k == K - 1 ? c[k][x.m].fdone : c[k + 1][x.m].bdone;
                if (dep < 0) break; // waits for another rank
                double start = fmax(t[r], dep);
                t[r] = start + (x.fwd ? tf : tb) / V;
                if (x.fwd) {
                    CHECK(c[k][x.m].fdone < 0); // once
                    c[k][x.m].fdone = t[r];
                    if (++inflight[r] > peak[r]) peak[r] = inflight[r];
                } else {
                    CHECK(c[k][x.m].bdone < 0 && c[k][x.m].fdone >= 0);
                    c[k][x.m].bdone = t[r];
                    inflight[r]--;
                    ordered &= x.m == last_b[k] + 1;
                    last_b[k] = x.m;
                }
                pos[r]++;
                progress = true;
            }
    }
    for (int r = 0; r < P; r++) {
        if (pos[r] != n[r] || n[r] != 2 * V * M)
            fprintf(stderr, "%s P=%d V=%d M=%d: rank %d stuck at action %d of %d\n", name(s), P, V, M, r, pos[r], n[r]);
        CHECK(pos[r] == n[r] && n[r] == 2 * V * M);
        T = fmax(T, t[r]);
        if (s == WEFT_PP_1F1B) CHECK(peak[r] <= P - r);
        if (s == WEFT_PP_GPIPE) CHECK(peak[r] == M);
    }
    CHECK(ordered);
    double want = (V * M + P - 1) * (tf + tb) / V;
    if (fabs(T - want) > 1e-9 * want)
        fprintf(stderr, "%s P=%d V=%d M=%d tf=%g tb=%g: step %g, theory %g\n", name(s), P, V, M, tf, tb, T, want);
    CHECK(fabs(T - want) <= 1e-9 * want);
    // the idle fraction of this step is the closed form's
    double busy = M * (tf + tb);
    CHECK_NEAR(1 - busy / T, weft_pp_bubble_theory(s, P, M, V), 1e-9);
}

static void test_schedules(void) {
    for (int s = WEFT_PP_GPIPE; s <= WEFT_PP_INTERLEAVED; s++)
        for (int P = 1; P <= 6; P++)
            for (int M = 1; M <= 12; M++)
                for (int V = 1; V <= (s == WEFT_PP_INTERLEAVED ? 3 : 1); V++) {
                    if (s == WEFT_PP_INTERLEAVED && M % P) continue;
                    simulate((weft_pp_schedule)s, P, V, M, 1, 1);
                    simulate((weft_pp_schedule)s, P, V, M, 1, 2);
                }
}

int main(void) {
    RUN(test_schedules);
    return wt_summary();
}
