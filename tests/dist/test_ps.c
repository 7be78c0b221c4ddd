// mpirun: 3 4 5
// Parameter server: every rank checks its own results. 3 ranks: 2 workers + 1
// server; 4: 2 workers + 2 servers; 5: 3 workers + 2 servers.
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weft_test.h"

static int rank, size, S, W;
static MPI_Comm tcomm; // the test's own messages (straggler hand-offs, sums of stats)
static MPI_Comm wcomm; // workers only (MPI_COMM_NULL on servers)

// Deterministic gradient of worker w at step t for element k of parameter i.
static double gval(int i, int w, int t, int64_t k) { return sin(0.013 * (double)k + 0.7 * w + 0.31 * t + 1.1 * i); }

static void set_grad(weft_tensor *p, int i, int w, int t) {
    int64_t n = weft_tensor_numel(p);
    double *v = malloc(sizeof(double) * (size_t)n);
    for (int64_t k = 0; k < n; k++) v[k] = gval(i, w, t, k);
    weft_tensor *g64 = weft_tensor_from_data(v, weft_tensor_ndim(p), weft_tensor_sizes(p), WEFT_F64);
    weft_tensor *g = weft_tensor_empty_like(p);
    weft_tensor_copy_(g, g64);
    weft_tensor_set_grad(p, g);
    weft_tensor_free(g);
    weft_tensor_free(g64);
    free(v);
}

// The test model: a small tensor (on one server) and large ones split across servers.
enum { NP = 4 };
static const char *names[NP] = {"small.weight", "big.weight", "vec", "bias"};
static const int64_t numels[NP] = {12, 2000, 1500, 5};

static void make_params(weft_tensor **p, double **init) {
    p[0] = weft_tensor_zeros(WEFT_DIMS(3, 4), WEFT_F64);
    p[1] = weft_tensor_zeros(WEFT_DIMS(50, 40), WEFT_F64);
    p[2] = weft_tensor_zeros(WEFT_DIMS(1500), WEFT_F32);
    p[3] = weft_tensor_zeros(WEFT_DIMS(5), WEFT_F32);
    for (int i = 0; i < NP; i++) {
        init[i] = malloc(sizeof(double) * (size_t)numels[i]);
        wt_vals(init[i], numels[i], -1, 1, 100 + (uint64_t)i);
        // Only rank 0's values count: the other ranks start from something else.
        if (rank == 0) {
            weft_tensor *t = weft_tensor_from_data(init[i], weft_tensor_ndim(p[i]), weft_tensor_sizes(p[i]), WEFT_F64);
            weft_tensor_copy_(p[i], t);
            weft_tensor_free(t);
        } else weft_tensor_fill_(p[i], rank + 7);
        // The f32 parameters start from f32 values.
        if (weft_tensor_dtype(p[i]) == WEFT_F32)
            for (int64_t k = 0; k < numels[i]; k++) init[i][k] = (float)init[i][k];
    }
}

static void free_params(weft_tensor **p, double **init) {
    for (int i = 0; i < NP; i++) {
        weft_tensor_free(p[i]);
        free(init[i]);
    }
}

static weft_ps_opts opts(weft_ps_mode mode) {
    weft_ps_opts o = weft_ps_defaults();
    o.servers = S;
    o.mode = mode;
    o.split_elems = 1000;
    o.optim.lr = 0.1;
    return o;
}

static int64_t sum_all(int64_t v) {
    int64_t r = 0;
    MPI_Allreduce(&v, &r, 1, MPI_INT64_T, MPI_SUM, tcomm);
    return r;
}
static int64_t max_all(int64_t v) {
    int64_t r = 0;
    MPI_Allreduce(&v, &r, 1, MPI_INT64_T, MPI_MAX, tcomm);
    return r;
}

static void check_params(const char *what, weft_tensor **p, double **ref) {
    for (int i = 0; i < NP; i++) {
        char buf[96];
        snprintf(buf, sizeof buf, "%s %s (rank %d)", what, names[i], rank);
        wt_check_values(buf, p[i], ref[i], numels[i], weft_tensor_dtype(p[i]) == WEFT_F32 ? 2e-5 : 1e-12);
    }
}

// BSP with SGD + momentum equals the same math done here: p -= lr_t * buf,
// buf = 0.9 buf + mean_w g_w(t).
static void test_bsp_equals_sgd(void) {
    weft_tensor *p[NP];
    double *init[NP];
    make_params(p, init);
    weft_ps_opts o = opts(WEFT_PS_BSP);
    o.optim.momentum = 0.9;
    weft_ps *ps = weft_ps_create(weft_comm_world(), NP, p, names, &o);
    CHECK(ps != NULL);
    if (!ps) return free_params(p, init);
    CHECK(weft_ps_num_workers(ps) == W && weft_ps_num_servers(ps) == S);
    CHECK(weft_ps_param_is_split(ps, 1) == (S > 1) && !weft_ps_param_is_split(ps, 0) && !weft_ps_param_is_split(ps, 3));
    const int T = 4;
    if (weft_ps_is_server(ps)) {
        CHECK(weft_ps_worker_rank(ps) == -1);
        CHECK(weft_ps_serve(ps) == WEFT_OK);
        weft_ps_stats st;
        weft_ps_get_stats(ps, &st);
        CHECK(st.pushes == (int64_t)W * T && st.pulls == (int64_t)W * T && st.dropped == 0);
        CHECK(st.applied == T); // every server holds a shard of the split tensors
    } else {
        CHECK(weft_ps_worker_rank(ps) == rank);
        check_params("initial", p, init); // worker 0's values reached every worker
        double *ref[NP], *buf[NP];
        for (int i = 0; i < NP; i++) {
            ref[i] = malloc(sizeof(double) * (size_t)numels[i]);
            buf[i] = calloc((size_t)numels[i], sizeof(double));
            memcpy(ref[i], init[i], sizeof(double) * (size_t)numels[i]);
        }
        for (int t = 0; t < T; t++) {
            double lr = 0.1 / (t + 1);
            for (int i = 0; i < NP; i++) set_grad(p[i], i, rank, t);
            CHECK(weft_ps_step(ps, lr) == WEFT_OK);
            for (int i = 0; i < NP; i++)
                for (int64_t k = 0; k < numels[i]; k++) {
                    double g = 0;
                    for (int w = 0; w < W; w++) g += gval(i, w, t, k);
                    g /= W;
                    buf[i][k] = t == 0 ? g : 0.9 * buf[i][k] + g;
                    ref[i][k] -= lr * buf[i][k];
                }
            check_params("after step", p, ref);
        }
        CHECK(weft_ps_clock(ps) == T);
        weft_ps_stats st;
        weft_ps_get_stats(ps, &st);
        CHECK(st.pushes == T && st.pulls == T && st.bytes_out > 0 && st.bytes_in > 0);
        CHECK(weft_ps_finish(ps) == WEFT_OK);
        CHECK(weft_ps_step(ps, 0.1) != WEFT_OK && strstr(weft_last_error(), "weft_ps_step"));
        for (int i = 0; i < NP; i++) {
            free(ref[i]);
            free(buf[i]);
        }
    }
    weft_ps_free(ps);
    free_params(p, init);
}

// SSP(s) and ASP with a straggler (the last worker sleeps before each step).
// Both apply every push scaled by 1/W, so once everyone is done the
// parameters are p0 - lr/W * sum of all gradients, in any order.
static void run_drift(weft_ps_mode mode, int s, int64_t *max_stale) {
    weft_tensor *p[NP];
    double *init[NP];
    make_params(p, init);
    weft_ps_opts o = opts(mode);
    o.staleness = s;
    weft_ps *ps = weft_ps_create(weft_comm_world(), NP, p, names, &o);
    CHECK(ps != NULL);
    if (!ps) return free_params(p, init);
    const int T = 10;
    int64_t stale = 0;
    if (weft_ps_is_server(ps)) {
        CHECK(weft_ps_serve(ps) == WEFT_OK);
        weft_ps_stats st;
        weft_ps_get_stats(ps, &st);
        stale = st.max_staleness;
        CHECK(st.pushes == (int64_t)W * T && st.applied == (int64_t)W * T);
    } else {
        for (int t = 0; t < T; t++) {
            if (rank == W - 1) usleep(mode == WEFT_PS_ASP ? 30000 : 20000);
            for (int i = 0; i < NP; i++) set_grad(p[i], i, rank, t);
            CHECK(weft_ps_step(ps, 0.05) == WEFT_OK);
        }
        // Everyone has pushed everything: a pull now sees all of it.
        MPI_Barrier(wcomm);
        CHECK(weft_ps_pull(ps) == WEFT_OK);
        double *ref[NP];
        for (int i = 0; i < NP; i++) {
            ref[i] = malloc(sizeof(double) * (size_t)numels[i]);
            for (int64_t k = 0; k < numels[i]; k++) {
                double g = 0;
                for (int w = 0; w < W; w++)
                    for (int t = 0; t < T; t++) g += gval(i, w, t, k);
                ref[i][k] = init[i][k] - 0.05 / W * g;
            }
        }
        check_params(mode == WEFT_PS_ASP ? "asp" : "ssp", p, ref);
        for (int i = 0; i < NP; i++) free(ref[i]);
        CHECK(weft_ps_finish(ps) == WEFT_OK);
    }
    *max_stale = max_all(stale);
    if (weft_ps_is_server(ps) && mode == WEFT_PS_SSP) CHECK(stale <= s); // the bound, on every server
    weft_ps_free(ps);
    free_params(p, init);
}

static void test_ssp_bound_and_asp_drift(void) {
    int64_t ssp = -1, asp = -1;
    run_drift(WEFT_PS_SSP, 2, &ssp);
    CHECK(ssp <= 2);
    CHECK(ssp > 0); // the fast workers did run ahead of the straggler
    run_drift(WEFT_PS_ASP, 2, &asp);
    CHECK(asp > 2); // ASP lets them drift past any bound
    if (rank == 0) printf("  max staleness: ssp(2) %lld, asp %lld\n", (long long)ssp, (long long)asp);
}

// BSP with one backup worker. At step t worker t % W is late: it pushes only
// after every other worker has seen step t applied, so its push is dropped
// on every server, and step t is the mean of the other W-1 gradients.
static void test_backup_workers(void) {
    weft_tensor *p[NP];
    double *init[NP];
    make_params(p, init);
    weft_ps_opts o = opts(WEFT_PS_BSP);
    o.backup = 1;
    weft_ps *ps = weft_ps_create(weft_comm_world(), NP, p, names, &o);
    CHECK(ps != NULL);
    if (!ps) return free_params(p, init);
    const int T = 6;
    if (weft_ps_is_server(ps)) {
        CHECK(weft_ps_serve(ps) == WEFT_OK);
        weft_ps_stats st;
        weft_ps_get_stats(ps, &st);
        CHECK(st.dropped == T);   // exactly the late pushes
        CHECK(st.applied == T);
        CHECK(st.pushes == (int64_t)W * T);
    } else {
        int dropped_here = 0;
        for (int t = 0; t < T; t++) {
            int late = t % W;
            if (rank == late)
                for (int w = 0; w < W - 1; w++) {
                    int tok;
                    MPI_Recv(&tok, 1, MPI_INT, MPI_ANY_SOURCE, 100 + t, tcomm, MPI_STATUS_IGNORE);
                }
            for (int i = 0; i < NP; i++) set_grad(p[i], i, rank, t);
            int64_t before = weft_ps_clock(ps);
            CHECK(weft_ps_step(ps, 0.2) == WEFT_OK);
            if (rank == late) {
                dropped_here++;
                CHECK(weft_ps_clock(ps) == t + 1); // continues at the current step
                CHECK(before == t);
            } else {
                CHECK(weft_ps_clock(ps) == t + 1);
                int tok = t;
                MPI_Send(&tok, 1, MPI_INT, late, 100 + t, tcomm);
            }
        }
        MPI_Barrier(wcomm);
        CHECK(weft_ps_pull(ps) == WEFT_OK);
        double *ref[NP];
        for (int i = 0; i < NP; i++) {
            ref[i] = malloc(sizeof(double) * (size_t)numels[i]);
            for (int64_t k = 0; k < numels[i]; k++) {
                double v = init[i][k];
                for (int t = 0; t < T; t++) {
                    double g = 0;
                    for (int w = 0; w < W; w++)
                        if (w != t % W) g += gval(i, w, t, k);
                    v -= 0.2 * g / (W - 1);
                }
                ref[i][k] = v;
            }
        }
        check_params("backup", p, ref);
        for (int i = 0; i < NP; i++) free(ref[i]);
        CHECK(weft_ps_finish(ps) == WEFT_OK);
    }
    weft_ps_free(ps);
    free_params(p, init);
}

// Sparse rows of an embedding split across the servers: a push touches only
// the rows named; pulls stitch rows from every server back in order.
static void test_sparse_rows(void) {
    const int64_t V = 300, D = 8;
    weft_tensor *emb = weft_tensor_zeros(WEFT_DIMS(V, D), WEFT_F32);
    weft_tensor *dense = weft_tensor_zeros(WEFT_DIMS(4), WEFT_F64);
    float *e0 = malloc(sizeof(float) * (size_t)(V * D));
    double tmp[300 * 8];
    wt_vals(tmp, V * D, -1, 1, 7);
    for (int64_t k = 0; k < V * D; k++) e0[k] = (float)tmp[k];
    if (rank == 0) memcpy(weft_tensor_data(emb), e0, sizeof(float) * (size_t)(V * D));
    weft_tensor *pp[2] = {emb, dense};
    const char *nm[2] = {"emb", "head"};
    weft_ps_opts o = opts(WEFT_PS_BSP);
    weft_ps *ps = weft_ps_create(weft_comm_world(), 2, pp, nm, &o);
    CHECK(ps != NULL);
    const int64_t ids[5] = {5, 299, 5, 150, 0}; // 4 distinct rows, one twice, on both servers
    float g[5 * 8];
    for (int k = 0; k < 5 * 8; k++) g[k] = (float)(0.25 * (k % 7) - 0.6); // never 0: every touched element moves
    const float lr = 0.5f;
    if (ps && weft_ps_is_server(ps)) {
        CHECK(weft_ps_serve(ps) == WEFT_OK);
    } else if (ps) {
        CHECK(weft_ps_set_sparse(ps, 0, true) == WEFT_OK);
        CHECK(weft_ps_param_is_split(ps, 0) == (S > 1));
        weft_tensor *rows = weft_tensor_from_data(ids, WEFT_DIMS(5), WEFT_I64);
        weft_tensor *gr = weft_tensor_from_data(g, WEFT_DIMS(5, 8), WEFT_F32);
        if (rank == 0) CHECK(weft_ps_push_rows(ps, 0, rows, gr, lr) == WEFT_OK);
        MPI_Barrier(wcomm);
        // A dense step moves the dense parameter and leaves the sparse one alone.
        set_grad(dense, 1, rank, 0);
        memset(weft_tensor_data(emb), 0, sizeof(float) * (size_t)(V * D));
        CHECK(weft_ps_step(ps, 0.1) == WEFT_OK);
        float z = 0;
        for (int64_t k = 0; k < V * D; k++) z += fabsf(((float *)weft_tensor_data(emb))[k]);
        CHECK(z == 0); // not pulled
        // Every row, in an order that crosses the servers.
        int64_t all[300];
        for (int64_t r = 0; r < V; r++) all[r] = (r * 7) % V;
        weft_tensor *arows = weft_tensor_from_data(all, WEFT_DIMS(300), WEFT_I64);
        weft_tensor *out = weft_tensor_zeros(WEFT_DIMS(300, 8), WEFT_F32);
        CHECK(weft_ps_pull_rows(ps, 0, arows, out) == WEFT_OK);
        float ref[300 * 8];
        memcpy(ref, e0, sizeof ref);
        for (int j = 0; j < 5; j++)
            for (int d = 0; d < D; d++) ref[ids[j] * D + d] -= lr * g[j * D + d];
        const float *ov = weft_tensor_data(out);
        int bad_untouched = 0, bad_touched = 0;
        for (int64_t q = 0; q < V; q++) {
            int64_t r = all[q];
            bool touched = r == 0 || r == 5 || r == 150 || r == 299;
            for (int d = 0; d < D; d++) {
                float a = ov[q * D + d], b = ref[r * D + d];
                if (!touched && memcmp(&a, &e0[r * D + d], sizeof a)) bad_untouched++;
                if (touched && fabsf(a - b) > 1e-6f) bad_touched++;
                if (touched && a == e0[r * D + d]) bad_touched++; // did change
            }
        }
        CHECK(bad_untouched == 0);
        CHECK(bad_touched == 0);
        weft_tensor_free(arows);
        weft_tensor_free(out);
        weft_tensor_free(rows);
        weft_tensor_free(gr);
        CHECK(weft_ps_finish(ps) == WEFT_OK);
    }
    weft_ps_stats st;
    weft_ps_get_stats(ps, &st);
    int64_t touched = sum_all(ps && weft_ps_is_server(ps) ? st.rows_touched : 0);
    CHECK(touched == 4);
    weft_ps_free(ps);
    weft_tensor_free(emb);
    weft_tensor_free(dense);
    free(e0);
}

// Save after 2 steps, take 2 more, load, take the same 2 again: the same
// parameters bit for bit (momentum buffers came back too).
static void test_save_load(void) {
    weft_tensor *p[NP];
    double *init[NP];
    make_params(p, init);
    weft_ps_opts o = opts(WEFT_PS_BSP);
    o.optim.momentum = 0.5;
    char dir[128];
    int id = (int)getpid();
    MPI_Bcast(&id, 1, MPI_INT, 0, tcomm);
    snprintf(dir, sizeof dir, "/tmp/weft_test_ps_%d", id);
    weft_ps *ps = weft_ps_create(weft_comm_world(), NP, p, names, &o);
    CHECK(ps != NULL);
    if (!ps) return free_params(p, init);
    if (weft_ps_is_server(ps)) {
        CHECK(weft_ps_serve(ps) == WEFT_OK);
    } else {
        for (int t = 0; t < 2; t++) {
            for (int i = 0; i < NP; i++) set_grad(p[i], i, rank, t);
            CHECK(weft_ps_step(ps, 0.1) == WEFT_OK);
        }
        CHECK(weft_ps_save(ps, dir, 2) == WEFT_OK);
        for (int s = 0; s < S; s++) {
            char path[256];
            struct stat sb;
            CHECK(weft_ps_shard_path(dir, s, 2, path, sizeof path) && stat(path, &sb) == 0);
        }
        double *after[NP], *saved[NP];
        for (int i = 0; i < NP; i++) {
            saved[i] = malloc(sizeof(double) * (size_t)numels[i]);
            after[i] = malloc(sizeof(double) * (size_t)numels[i]);
            weft_tensor_to_f64(p[i], saved[i], numels[i]);
        }
        for (int t = 2; t < 4; t++) {
            for (int i = 0; i < NP; i++) set_grad(p[i], i, rank, t);
            CHECK(weft_ps_step(ps, 0.1) == WEFT_OK);
        }
        for (int i = 0; i < NP; i++) weft_tensor_to_f64(p[i], after[i], numels[i]);
        CHECK(weft_ps_load(ps, dir, 2) == WEFT_OK);
        CHECK(weft_ps_clock(ps) == 0);
        for (int i = 0; i < NP; i++) wt_check_values("loaded", p[i], saved[i], numels[i], 0);
        for (int t = 2; t < 4; t++) {
            for (int i = 0; i < NP; i++) set_grad(p[i], i, rank, t);
            CHECK(weft_ps_step(ps, 0.1) == WEFT_OK);
        }
        for (int i = 0; i < NP; i++) wt_check_values(names[i], p[i], after[i], numels[i], 0);
        // A checkpoint that is not there: every worker gets the error.
        CHECK(weft_ps_load(ps, dir, 99) != WEFT_OK && strstr(weft_last_error(), "weft_ps_load"));
        for (int i = 0; i < NP; i++) {
            free(saved[i]);
            free(after[i]);
        }
        CHECK(weft_ps_finish(ps) == WEFT_OK);
    }
    weft_ps_free(ps);
    MPI_Barrier(tcomm);
    if (rank == 0) {
        for (int s = 0; s < S; s++) {
            char path[256];
            if (weft_ps_shard_path(dir, s, 2, path, sizeof path)) unlink(path);
        }
        rmdir(dir);
    }
    free_params(p, init);
}

#define CHECK_ERR(expr, fn) \
    do { \
        weft_status _s = (expr); \
        CHECK(_s != WEFT_OK && strstr(weft_last_error(), fn) != NULL); \
    } while (0)

static void test_bad_input(void) {
    weft_tensor *p[NP];
    double *init[NP];
    make_params(p, init);
    // Collective failures: every rank gets an error, none hangs.
    weft_ps_opts o = opts(WEFT_PS_BSP);
    o.servers = size;
    CHECK(weft_ps_create(weft_comm_world(), NP, p, names, &o) == NULL && strstr(weft_last_error(), "weft_ps_create"));
    o = opts(WEFT_PS_ASP);
    o.backup = 1;
    CHECK(weft_ps_create(weft_comm_world(), NP, p, names, &o) == NULL && strstr(weft_last_error(), "weft_ps_create"));
    o = opts(WEFT_PS_BSP);
    weft_tensor *odd = weft_tensor_zeros(WEFT_DIMS(3, rank == 1 ? 5 : 4), WEFT_F64);
    weft_tensor *q[NP] = {odd, p[1], p[2], p[3]};
    CHECK(weft_ps_create(weft_comm_world(), NP, q, names, &o) == NULL && strstr(weft_last_error(), "weft_ps_create"));
    weft_tensor_free(odd);
    weft_tensor *ints = weft_tensor_zeros(WEFT_DIMS(3), WEFT_I32);
    weft_tensor *r[1] = {ints};
    CHECK(weft_ps_create(weft_comm_world(), 1, r, NULL, &o) == NULL && strstr(weft_last_error(), "weft_ps_create"));
    weft_tensor_free(ints);

    weft_ps *ps = weft_ps_create(weft_comm_world(), NP, p, names, &o);
    CHECK(ps != NULL);
    if (ps && weft_ps_is_server(ps)) {
        CHECK_ERR(weft_ps_step(ps, 0.1), "weft_ps_step");
        CHECK(weft_ps_serve(ps) == WEFT_OK);
    } else if (ps) {
        CHECK_ERR(weft_ps_serve(ps), "weft_ps_serve");
        CHECK_ERR(weft_ps_set_sparse(ps, NP, true), "weft_ps_set_sparse");
        // A gradient of the wrong dtype: nothing is sent.
        weft_tensor *g = weft_tensor_zeros(WEFT_DIMS(3, 4), WEFT_F32);
        weft_tensor_set_grad(p[0], g);
        CHECK_ERR(weft_ps_step(ps, 0.1), "weft_ps_step");
        CHECK_ERR(weft_ps_step(ps, -1), "weft_ps_step");
        weft_tensor_zero_grad(p[0]);
        weft_tensor_free(g);
        int64_t bad_ids[2] = {3, 50};
        weft_tensor *rows = weft_tensor_from_data(bad_ids, WEFT_DIMS(2), WEFT_I64);
        weft_tensor *gr = weft_tensor_zeros(WEFT_DIMS(2, 40), WEFT_F64);
        CHECK_ERR(weft_ps_push_rows(ps, 1, rows, gr, 0.1), "weft_ps_push_rows"); // row 50 of 50
        CHECK_ERR(weft_ps_pull_rows(ps, 1, rows, gr), "weft_ps_pull_rows");
        CHECK_ERR(weft_ps_push_rows(ps, 7, rows, gr, 0.1), "weft_ps_push_rows");
        weft_tensor *gbad = weft_tensor_zeros(WEFT_DIMS(2, 39), WEFT_F64);
        bad_ids[1] = 49;
        weft_tensor *rows2 = weft_tensor_from_data(bad_ids, WEFT_DIMS(2), WEFT_I64);
        CHECK_ERR(weft_ps_push_rows(ps, 1, rows2, gbad, 0.1), "weft_ps_push_rows");
        weft_tensor *gf32 = weft_tensor_zeros(WEFT_DIMS(2, 40), WEFT_F32);
        CHECK_ERR(weft_ps_pull_rows(ps, 1, rows2, gf32), "weft_ps_pull_rows");
        weft_tensor *rows32 = weft_tensor_zeros(WEFT_DIMS(2), WEFT_I32);
        CHECK_ERR(weft_ps_pull_rows(ps, 1, rows32, gr), "weft_ps_pull_rows");
        CHECK_ERR(weft_ps_pull_rows(ps, 1, NULL, gr), "weft_ps_pull_rows");
        CHECK_ERR(weft_ps_push_rows(ps, 3, rows2, gr, NAN), "weft_ps_push_rows");
        CHECK_ERR(weft_ps_save(ps, "", 1), "weft_ps_save");
        // Still usable after the errors.
        CHECK(weft_ps_pull_rows(ps, 1, rows2, gr) == WEFT_OK);
        double v[80];
        weft_tensor_to_f64(gr, v, 80);
        CHECK_NEAR(v[40 + 3], init[1][49 * 40 + 3], 0);
        CHECK(weft_ps_finish(ps) == WEFT_OK);
        CHECK_ERR(weft_ps_finish(ps), "weft_ps_finish");
        weft_tensor_free(rows);
        weft_tensor_free(rows2);
        weft_tensor_free(rows32);
        weft_tensor_free(gr);
        weft_tensor_free(gbad);
        weft_tensor_free(gf32);
    }
    CHECK_ERR(weft_ps_step(NULL, 0.1), "weft_ps_step");
    weft_ps_free(ps);
    free_params(p, init);
}

int main(int argc, char **argv) {
    if (weft_dist_init(&argc, &argv) != WEFT_OK) {
        fprintf(stderr, "%s\n", weft_last_error());
        return 1;
    }
    rank = weft_comm_rank(weft_comm_world());
    size = weft_comm_size(weft_comm_world());
    S = size >= 4 ? 2 : 1;
    W = size - S;
    MPI_Comm_dup(MPI_COMM_WORLD, &tcomm);
    MPI_Comm_split(tcomm, rank < W ? 0 : MPI_UNDEFINED, rank, &wcomm);
    RUN(test_bsp_equals_sgd);
    RUN(test_ssp_bound_and_asp_drift);
    RUN(test_backup_workers);
    RUN(test_sparse_rows);
    RUN(test_save_load);
    RUN(test_bad_input);
    if (wcomm != MPI_COMM_NULL) MPI_Comm_free(&wcomm);
    MPI_Comm_free(&tcomm);
    // Every rank checks its own results; rank 0 prints the summary.
    int rc = wt_fail ? 1 : 0;
    if (rank == 0) rc = wt_summary() || rc;
    else if (wt_fail) fprintf(stderr, "rank %d: %d failed\n", rank, wt_fail);
    weft_dist_finalize();
    return rc;
}
