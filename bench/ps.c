// Parameter-server traffic: pushes/s and MB/s, dense and sparse, 1 and 2 servers.
//
// Runs as 4 MPI ranks (started by itself through tests/dist/mpirun.sh when
// not launched by mpirun). Both layouts have 2 workers: "1srv" uses ranks
// {0, 1, 3} (rank 3 serves), "2srv" all four (ranks 2 and 3 serve).
//   dense:  a 1M-element f32 model; one push = weft_ps_step (push 4 MB of
//           gradient, pull 4 MB of parameters), BSP.
//   sparse: 128 random rows of a (100000, 64) f32 embedding; one push =
//           weft_ps_push_rows + weft_ps_pull_rows of those rows.
// pushes/s counts both workers; MB/s is the payload moved both ways. There is
// no PyTorch twin: the lines carry no peer.
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft.h>

#include "bench_util.h"

static int wrank;

// MPI_Barrier busy-polls; a rank sitting a case out must leave the cores to the others.
static void sleepy_barrier(MPI_Comm c) {
    MPI_Request r;
    MPI_Ibarrier(c, &r);
    for (int done = 0;;) {
        MPI_Test(&r, &done, MPI_STATUS_IGNORE);
        if (done) return;
        usleep(200);
    }
}

static double max_over(MPI_Comm c, double v) {
    double r = v;
    MPI_Allreduce(&v, &r, 1, MPI_DOUBLE, MPI_MAX, c);
    return r;
}

static void report(const char *name, double pushes_s, double mb_s) {
    if (wrank != 0) return;
    char n2[96];
    snprintf(n2, sizeof n2, "%s_MBps", name);
    bench_report(name, pushes_s, "pushes/s", 1);
    bench_report(n2, mb_s, "MB/s", 1);
}

static void dense(weft_comm *c, MPI_Comm mc, int servers, const char *name) {
    const int64_t n = 1 << 20;
    weft_tensor *w = weft_tensor_zeros(WEFT_DIMS(n), WEFT_F32);
    weft_tensor *g = weft_tensor_full(WEFT_DIMS(n), WEFT_F32, 1e-3);
    weft_tensor_set_grad(w, g);
    weft_ps_opts o = weft_ps_defaults();
    o.servers = servers;
    const char *nm[1] = {"w"};
    weft_ps *ps = weft_ps_create(c, 1, &w, nm, &o);
    if (!ps) {
        fprintf(stderr, "bench ps: %s\n", weft_last_error());
        exit(1);
    }
    const int warm = 3, iters = 40;
    double t = 0;
    if (weft_ps_is_server(ps)) weft_ps_serve(ps);
    else {
        for (int k = 0; k < warm; k++) weft_ps_step(ps, 1e-6);
        double t0 = bench_now();
        for (int k = 0; k < iters; k++) weft_ps_step(ps, 1e-6);
        t = bench_now() - t0;
        weft_ps_finish(ps);
    }
    t = max_over(mc, t);
    int workers = weft_ps_num_workers(ps);
    double pushes = (double)workers * iters / t;
    report(name, pushes, pushes * 2.0 * (double)n * 4 / 1e6);
    weft_ps_free(ps);
    weft_tensor_free(w);
    weft_tensor_free(g);
}

static void sparse(weft_comm *c, MPI_Comm mc, int servers, const char *name) {
    const int64_t V = 100000, D = 64, K = 128;
    weft_tensor *emb = weft_tensor_zeros(WEFT_DIMS(V, D), WEFT_F32);
    weft_ps_opts o = weft_ps_defaults();
    o.servers = servers;
    const char *nm[1] = {"emb"};
    weft_ps *ps = weft_ps_create(c, 1, &emb, nm, &o);
    if (!ps) {
        fprintf(stderr, "bench ps: %s\n", weft_last_error());
        exit(1);
    }
    const int warm = 20, iters = 1000;
    double t = 0;
    if (weft_ps_is_server(ps)) weft_ps_serve(ps);
    else {
        weft_ps_set_sparse(ps, 0, true);
        weft_tensor *rows = weft_tensor_zeros(WEFT_DIMS(K), WEFT_I64);
        weft_tensor *g = weft_tensor_full(WEFT_DIMS(K, D), WEFT_F32, 1e-3);
        weft_tensor *out = weft_tensor_zeros(WEFT_DIMS(K, D), WEFT_F32);
        int64_t *r = weft_tensor_data(rows);
        uint64_t s = 12345 + (uint64_t)weft_ps_worker_rank(ps);
        double t0 = 0;
        for (int k = 0; k < warm + iters; k++) {
            if (k == warm) t0 = bench_now();
            for (int64_t j = 0; j < K; j++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                r[j] = (int64_t)((s >> 33) % (uint64_t)V);
            }
            weft_ps_push_rows(ps, 0, rows, g, 1e-3);
            weft_ps_pull_rows(ps, 0, rows, out);
        }
        t = bench_now() - t0;
        weft_ps_finish(ps);
        weft_tensor_free(rows);
        weft_tensor_free(g);
        weft_tensor_free(out);
    }
    t = max_over(mc, t);
    int workers = weft_ps_num_workers(ps);
    double pushes = (double)workers * iters / t;
    report(name, pushes, pushes * (2.0 * (double)(K * D) * 4 + 2.0 * (double)K * 8) / 1e6);
    weft_ps_free(ps);
    weft_tensor_free(emb);
}

int main(int argc, char **argv) {
    const char *pat0 = argc > 1 ? argv[1] : "";
    if (pat0[0] && !strstr("ps_dense_1srv ps_dense_2srv ps_sparse_1srv ps_sparse_2srv", pat0)) return 0; // not selected
    if (!weft_dist_launched()) {
        // Start ourselves as 4 ranks (bench/run.sh runs binaries directly).
        char *args[] = {"sh", "tests/dist/mpirun.sh", "4", argv[0], argc > 1 ? argv[1] : "", NULL};
        if (access("tests/dist/mpirun.sh", R_OK) != 0) {
            fprintf(stderr, "bench ps: run from the repository root (needs tests/dist/mpirun.sh)\n");
            return 1;
        }
        setenv("WEFT_NUM_THREADS", "1", 0);
        execvp("sh", args);
        perror("bench ps: exec sh");
        return 1;
    }
    if (weft_dist_init(&argc, &argv) != WEFT_OK) {
        fprintf(stderr, "bench ps: %s\n", weft_last_error());
        return 1;
    }
    weft_comm *world = weft_comm_world();
    wrank = weft_comm_rank(world);
    if (weft_comm_size(world) != 4) {
        if (wrank == 0) fprintf(stderr, "bench ps: needs 4 ranks\n");
        weft_dist_finalize();
        return 1;
    }
    // 1 server: ranks {0, 1, 3}; rank 2 sits those out. Same 2 workers in both layouts.
    weft_comm *three = weft_comm_split(world, wrank == 2 ? -1 : 0, wrank);
    MPI_Comm mworld, mthree;
    MPI_Comm_dup(MPI_COMM_WORLD, &mworld);
    MPI_Comm_split(mworld, wrank == 2 ? MPI_UNDEFINED : 0, wrank, &mthree);
    const char *pat = argc > 1 ? argv[1] : "";
    struct { const char *name; int servers; int sparse; } cases[] = {
        {"ps_dense_1srv", 1, 0}, {"ps_dense_2srv", 2, 0}, {"ps_sparse_1srv", 1, 1}, {"ps_sparse_2srv", 2, 1}};
    for (int k = 0; k < 4; k++) {
        if (pat[0] && !strstr(cases[k].name, pat)) continue;
        sleepy_barrier(mworld);
        weft_comm *c = cases[k].servers == 1 ? three : world;
        MPI_Comm mc = cases[k].servers == 1 ? mthree : mworld;
        if (!c) continue;
        if (cases[k].sparse) sparse(c, mc, cases[k].servers, cases[k].name);
        else dense(c, mc, cases[k].servers, cases[k].name);
    }
    if (mthree != MPI_COMM_NULL) MPI_Comm_free(&mthree);
    MPI_Comm_free(&mworld);
    weft_comm_free(three);
    weft_dist_finalize();
    return 0;
}
