// mpirun: 2
// All-reduce bus bandwidth (nccl-tests definition: busbw = algbw * 2(n-1)/n,
// algbw = bytes / time) of weft_dist_all_reduce (f32, sum) against
// MPI_Allreduce called directly on the same buffer, alternating, best of
// several rounds. Run under mpirun (bench/run.sh does, from the line above);
// rank 0 prints `allreduce_<size> <weft GB/s> GB/s 1 <MPI GB/s>`.
#include <weft.h>

#include "bench_util.h"

#if __has_include(<mpi.h>)
#include <mpi.h>

// Seconds per call of the slowest rank (every rank must finish the call).
static double timed(int iters, int which, weft_comm *c, weft_tensor *t) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    for (int i = 0; i < iters; i++) {
        if (which == 0) {
            if (weft_dist_all_reduce(c, t, WEFT_REDUCE_SUM) != WEFT_OK) {
                fprintf(stderr, "all_reduce: %s\n", weft_last_error());
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        } else {
            MPI_Allreduce(MPI_IN_PLACE, weft_tensor_data(t), (int)weft_tensor_numel(t), MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD);
        }
    }
    double el = (bench_now() - t0) / iters, mx;
    MPI_Allreduce(&el, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return mx;
}

static void run(const char *name, int64_t bytes, int iters, int rounds, int argc, char **argv) {
    if (!bench_selected(argc, argv, name)) return;
    weft_comm *c = weft_comm_world();
    int n = weft_comm_size(c);
    // Zeros stay zeros under repeated sums (no overflow to inf over many calls).
    weft_tensor *t = weft_tensor_zeros(WEFT_DIMS(bytes / 4), WEFT_F32);
    timed(3, 0, c, t); // warm up both paths
    timed(3, 1, c, t);
    double bw[2] = {0, 0};
    for (int r = 0; r < rounds; r++)
        for (int which = 0; which < 2; which++) {
            double s = timed(iters, which, c, t);
            double busbw = (double)bytes / s * 2.0 * (n - 1) / n / 1e9;
            if (busbw > bw[which]) bw[which] = busbw;
        }
    if (weft_comm_rank(c) == 0) bench_report_peer(name, bw[0], "GB/s", 1, bw[1]);
    weft_tensor_free(t);
}

int main(int argc, char **argv) {
    if (weft_dist_init(&argc, &argv) != WEFT_OK) {
        fprintf(stderr, "bench allreduce: %s\n", weft_last_error());
        return 1;
    }
    run("allreduce_4MB", 4 << 20, 40, 5, argc, argv);
    run("allreduce_32MB", 32 << 20, 8, 5, argc, argv);
    return weft_dist_finalize() == WEFT_OK ? 0 : 1;
}
#else
int main(void) { return 0; } // built without MPI
#endif
