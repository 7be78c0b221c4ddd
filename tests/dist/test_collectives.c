// mpirun: 2 3 4
// Every collective against a naive reference: each rank fills its data from
// (rank, index), so every rank can compute the expected result by itself.
#include <string.h>

#include "weft_test.h"

static int rank, size;
static weft_comm *W;

// Small integers (exact in f32 sums), distinct per rank so MAX is meaningful.
static double val(int r, int64_t i) { return (double)((r * 7 + i * 3) % 11) - 5 + 0.25 * r; }
static double ival(int r, int64_t i) { return (double)(r * 1000 + i); }

static double fill_val(weft_dtype dt, int r, int64_t i) { return dt == WEFT_I64 ? ival(r, i) : val(r, i); }

static weft_tensor *make(weft_dtype dt, int64_t n, int r, int64_t base) {
    weft_tensor *t = weft_tensor_empty(WEFT_DIMS(n), dt);
    for (int64_t i = 0; i < n; i++) weft_tensor_set(t, (int64_t[]){i}, fill_val(dt, r, base + i));
    return t;
}

static double get(const weft_tensor *t, int64_t i) {
    double v = 0;
    weft_tensor_get(t, (int64_t[]){i}, &v);
    return v;
}

static double reduce_ref(weft_dtype dt, weft_reduce_op op, int64_t i) {
    double s = 0, m = -1e300;
    for (int r = 0; r < size; r++) {
        double v = fill_val(dt, r, i);
        s += v;
        if (v > m) m = v;
    }
    if (op == WEFT_REDUCE_MAX) return m;
    if (op == WEFT_REDUCE_AVG) return dt == WEFT_I64 ? (double)((int64_t)s / size) : s / size;
    return s;
}

// Element counts: 0, fewer than ranks (0-element chunks), divisible, not divisible, larger.
static int64_t counts[6];
static void set_counts(void) {
    int64_t c[6] = {0, size - 1, size, 2 * size + 1, 3 * size, 1003};
    memcpy(counts, c, sizeof c);
}

static const weft_dtype dts[3] = {WEFT_F32, WEFT_F64, WEFT_I64};
static const weft_reduce_op ops[3] = {WEFT_REDUCE_SUM, WEFT_REDUCE_AVG, WEFT_REDUCE_MAX};

static void test_all_reduce(void) {
    for (int d = 0; d < 3; d++)
        for (int o = 0; o < 3; o++)
            for (int k = 0; k < 6; k++) {
                int64_t n = counts[k];
                weft_tensor *t = make(dts[d], n, rank, 0);
                CHECK(weft_dist_all_reduce(W, t, ops[o]) == WEFT_OK);
                int bad = 0;
                for (int64_t i = 0; i < n; i++) bad += fabs(get(t, i) - reduce_ref(dts[d], ops[o], i)) > 1e-5;
                if (bad) fprintf(stderr, "all_reduce %s op %d n %lld: %d wrong\n", weft_dtype_name(dts[d]), o,
                                 (long long)n, bad);
                CHECK(bad == 0);
                weft_tensor_free(t);
            }
}

// Large all-reduces take the ring path (>= 64 KB): uneven chunks, every op.
static void test_all_reduce_ring(void) {
    const int64_t ns[2] = {16384 * 3 + size + 1, 70001};
    for (int d = 0; d < 3; d++)
        for (int o = 0; o < 3; o++)
            for (int k = 0; k < 2; k++) {
                int64_t n = ns[k];
                weft_tensor *t = weft_tensor_empty(WEFT_DIMS(n), dts[d]);
                for (int64_t i = 0; i < n; i++) weft_tensor_set(t, (int64_t[]){i}, fill_val(dts[d], rank, i));
                CHECK(weft_dist_all_reduce(W, t, ops[o]) == WEFT_OK);
                int bad = 0;
                for (int64_t i = 0; i < n; i++) bad += fabs(get(t, i) - reduce_ref(dts[d], ops[o], i)) > 1e-5;
                if (bad) fprintf(stderr, "ring %s op %d n %lld: %d wrong\n", weft_dtype_name(dts[d]), o, (long long)n, bad);
                CHECK(bad == 0);
                weft_tensor_free(t);
            }
}

static void test_reduce(void) {
    for (int root = 0; root < size; root++)
        for (int o = 0; o < 3; o++) {
            int64_t n = counts[3];
            weft_tensor *t = make(WEFT_F64, n, rank, 0);
            CHECK(weft_dist_reduce(W, t, ops[o], root) == WEFT_OK);
            int bad = 0;
            for (int64_t i = 0; i < n; i++) {
                double want = rank == root ? reduce_ref(WEFT_F64, ops[o], i) : val(rank, i); // others untouched
                bad += fabs(get(t, i) - want) > 1e-12;
            }
            CHECK(bad == 0);
            weft_tensor_free(t);
        }
}

static void test_broadcast(void) {
    for (int root = 0; root < size; root++)
        for (int k = 0; k < 6; k++) {
            int64_t n = counts[k];
            weft_tensor *t = make(WEFT_F32, n, rank, 0);
            CHECK(weft_dist_broadcast(W, t, root) == WEFT_OK);
            int bad = 0;
            for (int64_t i = 0; i < n; i++) bad += get(t, i) != val(root, i);
            CHECK(bad == 0);
            weft_tensor_free(t);
        }
}

// Element i of a gathered tensor comes from its owner's chunk.
static int owner(int64_t n, int64_t i) {
    for (int r = 0; r < size; r++) {
        int64_t o, c;
        weft_dist_chunk(n, size, r, &o, &c);
        if (i >= o && i < o + c) return r;
    }
    return -1;
}

static void test_chunk(void) {
    int64_t o, c;
    weft_dist_chunk(10, 4, 0, &o, &c);
    CHECK(o == 0 && c == 3);
    weft_dist_chunk(10, 4, 1, &o, &c);
    CHECK(o == 3 && c == 3);
    weft_dist_chunk(10, 4, 3, &o, &c);
    CHECK(o == 8 && c == 2);
    weft_dist_chunk(2, 4, 3, &o, &c);
    CHECK(o == 2 && c == 0);
}

static void test_all_gather_and_gather(void) {
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < 6; k++) {
            int64_t n = counts[k], off, c;
            weft_dist_chunk(n, size, rank, &off, &c);
            weft_tensor *in = make(dts[d], c, rank, off);
            weft_tensor *out = weft_tensor_full(WEFT_DIMS(n), dts[d], -99);
            CHECK(weft_dist_all_gather(W, in, out) == WEFT_OK);
            int bad = 0;
            for (int64_t i = 0; i < n; i++) bad += get(out, i) != fill_val(dts[d], owner(n, i), i);
            CHECK(bad == 0);
            int root = (int)(k % size);
            weft_tensor_fill_(out, -99);
            CHECK(weft_dist_gather(W, in, rank == root ? out : NULL, root) == WEFT_OK);
            bad = 0;
            if (rank == root)
                for (int64_t i = 0; i < n; i++) bad += get(out, i) != fill_val(dts[d], owner(n, i), i);
            CHECK(bad == 0);
            weft_tensor_free(in);
            weft_tensor_free(out);
        }
    // In place: in is this rank's chunk of out (a view of the same storage).
    int64_t n = counts[3], off, c;
    weft_dist_chunk(n, size, rank, &off, &c);
    weft_tensor *out = weft_tensor_zeros(WEFT_DIMS(n), WEFT_F64);
    double *p = weft_tensor_data(out);
    for (int64_t j = 0; j < c; j++) p[off + j] = val(rank, off + j);
    weft_tensor *in = weft_narrow(out, 0, off, c);
    CHECK(in && weft_tensor_data(in) == p + off);
    CHECK(weft_dist_all_gather(W, in, out) == WEFT_OK);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += p[i] != val(owner(n, i), i);
    CHECK(bad == 0);
    weft_tensor_free(in);
    weft_tensor_free(out);
}

static void test_scatter(void) {
    for (int k = 0; k < 6; k++) {
        int64_t n = counts[k], off, c;
        int root = (int)((k + 1) % size);
        weft_dist_chunk(n, size, rank, &off, &c);
        weft_tensor *in = rank == root ? make(WEFT_F64, n, root, 0) : NULL;
        weft_tensor *out = weft_tensor_full(WEFT_DIMS(c), WEFT_F64, -99);
        CHECK(weft_dist_scatter(W, in, out, root) == WEFT_OK);
        int bad = 0;
        for (int64_t j = 0; j < c; j++) bad += get(out, j) != val(root, off + j);
        CHECK(bad == 0);
        weft_tensor_free(in);
        weft_tensor_free(out);
    }
}

static void test_reduce_scatter(void) {
    for (int d = 0; d < 3; d++)
        for (int o = 0; o < 3; o++)
            for (int k = 0; k < 6; k++) {
                int64_t n = counts[k], off, c;
                weft_dist_chunk(n, size, rank, &off, &c);
                weft_tensor *in = make(dts[d], n, rank, 0);
                weft_tensor *out = weft_tensor_full(WEFT_DIMS(c), dts[d], -99);
                CHECK(weft_dist_reduce_scatter(W, in, out, ops[o]) == WEFT_OK);
                int bad = 0;
                for (int64_t j = 0; j < c; j++) bad += fabs(get(out, j) - reduce_ref(dts[d], ops[o], off + j)) > 1e-5;
                CHECK(bad == 0);
                weft_tensor_free(in);
                weft_tensor_free(out);
            }
}

static void test_all_to_all(void) {
    for (int k = 0; k < 6; k++) {
        int64_t n = counts[k], off, c;
        weft_dist_chunk(n, size, rank, &off, &c);
        weft_tensor *in = make(WEFT_I64, n, rank, 0);
        weft_tensor *out = weft_tensor_full(WEFT_DIMS(size * c), WEFT_I64, -99);
        CHECK(weft_dist_all_to_all(W, in, out) == WEFT_OK);
        int bad = 0;
        for (int s = 0; s < size; s++) // block s: what rank s sent here, its elements [off, off + c)
            for (int64_t j = 0; j < c; j++) bad += get(out, s * c + j) != ival(s, off + j);
        CHECK(bad == 0);
        weft_tensor_free(in);
        weft_tensor_free(out);
    }
}

static void test_send_recv_barrier(void) {
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    weft_tensor *s = make(WEFT_F32, 37, rank, 0), *r = weft_tensor_zeros(WEFT_DIMS(37), WEFT_F32);
    if (rank % 2 == 0) {
        CHECK(weft_dist_send(W, s, next, 5) == WEFT_OK);
        CHECK(weft_dist_recv(W, r, prev, 5) == WEFT_OK);
    } else {
        CHECK(weft_dist_recv(W, r, prev, 5) == WEFT_OK);
        CHECK(weft_dist_send(W, s, next, 5) == WEFT_OK);
    }
    int bad = 0;
    for (int i = 0; i < 37; i++) bad += get(r, i) != val(prev, i);
    CHECK(bad == 0);
    uint64_t seq = weft_comm_seq(W);
    CHECK(weft_dist_barrier(W) == WEFT_OK);
    CHECK(weft_comm_seq(W) == seq + 1); // p2p is not numbered, the barrier is
    weft_tensor_free(s);
    weft_tensor_free(r);
}

static void test_async(void) {
    enum { K = 6 };
    int64_t n = 4099, off, c;
    weft_dist_chunk(n, size, rank, &off, &c);
    weft_tensor *t[K], *gin = make(WEFT_F32, c, rank, off), *gout = weft_tensor_zeros(WEFT_DIMS(n), WEFT_F32);
    weft_tensor *rin = make(WEFT_F32, n, rank, 0), *rout = weft_tensor_zeros(WEFT_DIMS(c), WEFT_F32);
    weft_tensor *b = make(WEFT_F32, n, rank, 0);
    weft_work *w[K + 3];
    uint64_t seq0 = weft_comm_seq(W);
    for (int i = 0; i < K; i++) {
        t[i] = make(WEFT_F32, n + i + (i == 2 ? 30000 : 0), rank, i);
        w[i] = weft_dist_all_reduce_async(W, t[i], i % 2 ? WEFT_REDUCE_MAX : WEFT_REDUCE_SUM);
        CHECK(w[i] != NULL);
    }
    w[K] = weft_dist_all_gather_async(W, gin, gout);
    w[K + 1] = weft_dist_reduce_scatter_async(W, rin, rout, WEFT_REDUCE_AVG);
    w[K + 2] = weft_dist_broadcast_async(W, b, size - 1);
    CHECK(weft_comm_seq(W) == seq0 + K + 3);
    // Wait out of order, polling the last one first.
    while (!weft_work_test(w[K + 2])) {}
    CHECK(weft_work_test(w[K + 2]) == 1);
    for (int i = K + 2; i >= 0; i--) CHECK(weft_work_wait(w[i]) == WEFT_OK);
    int bad = 0;
    for (int i = 0; i < K; i++)
        for (int64_t j = 0; j < n + i + (i == 2 ? 30000 : 0); j++)
            bad += fabs(get(t[i], j) - reduce_ref(WEFT_F32, i % 2 ? WEFT_REDUCE_MAX : WEFT_REDUCE_SUM, i + j)) > 1e-5;
    for (int64_t j = 0; j < n; j++) bad += get(gout, j) != val(owner(n, j), j);
    for (int64_t j = 0; j < c; j++) bad += fabs(get(rout, j) - reduce_ref(WEFT_F32, WEFT_REDUCE_AVG, off + j)) > 1e-5;
    for (int64_t j = 0; j < n; j++) bad += get(b, j) != val(size - 1, j);
    CHECK(bad == 0);
    for (int i = 0; i < K; i++) weft_tensor_free(t[i]);
    weft_tensor_free(gin);
    weft_tensor_free(gout);
    weft_tensor_free(rin);
    weft_tensor_free(rout);
    weft_tensor_free(b);
    CHECK(weft_work_wait(NULL) != WEFT_OK && strstr(weft_last_error(), "work_wait"));
}

// Even and odd ranks form sub-communicators whose collectives run at the
// same time as the world's.
static void test_split(void) {
    weft_comm *sub = weft_comm_split(W, rank % 2, -rank); // key -rank: reversed order
    CHECK(sub != NULL);
    if (!sub) return;
    int members = (size + 1 - rank % 2) / 2;
    CHECK(weft_comm_size(sub) == members);
    // Reversed: the highest world rank of the color is sub rank 0.
    int my_sub = weft_comm_rank(sub);
    CHECK(weft_comm_world_rank(sub, my_sub) == rank);
    CHECK(weft_comm_world_rank(sub, 0) == (rank % 2 == 0 ? (size - 1) / 2 * 2 : (size - 2) / 2 * 2 + 1));
    int64_t n = 2001;
    weft_tensor *ts = make(WEFT_F64, n, rank, 0), *tw = make(WEFT_F64, n, rank, 0);
    weft_work *ws[3], *ww[3];
    for (int i = 0; i < 3; i++) {
        ww[i] = weft_dist_all_reduce_async(W, tw, WEFT_REDUCE_SUM);
        ws[i] = weft_dist_all_reduce_async(sub, ts, WEFT_REDUCE_SUM);
    }
    for (int i = 0; i < 3; i++) {
        CHECK(weft_work_wait(ws[i]) == WEFT_OK);
        CHECK(weft_work_wait(ww[i]) == WEFT_OK);
    }
    int bad = 0;
    for (int64_t j = 0; j < n; j++) {
        double s = 0, sw = 0;
        for (int r = 0; r < size; r++) {
            if (r % 2 == rank % 2) s += val(r, j);
            sw += val(r, j);
        }
        // Three sums in a row: x -> m x -> m^2 x -> m^3 x.
        double m = members, M = size;
        bad += fabs(get(ts, j) - s * m * m) > 1e-9 * (1 + fabs(s * m * m));
        bad += fabs(get(tw, j) - sw * M * M) > 1e-9 * (1 + fabs(sw * M * M));
    }
    CHECK(bad == 0);
    weft_tensor_free(ts);
    weft_tensor_free(tw);
    weft_comm_free(sub);
    // color < 0: this rank joins none.
    weft_comm *only0 = weft_comm_split(W, rank == 0 ? 0 : -1, 0);
    CHECK((only0 != NULL) == (rank == 0));
    if (only0) {
        CHECK(weft_comm_size(only0) == 1);
        weft_tensor *t = make(WEFT_F32, 5, 0, 0);
        CHECK(weft_dist_all_reduce(only0, t, WEFT_REDUCE_SUM) == WEFT_OK && get(t, 2) == val(0, 2));
        weft_tensor_free(t);
        weft_comm_free(only0);
    }
}

static bool err_has(const char *a, const char *b) {
    const char *e = weft_last_error();
    bool ok = strstr(e, a) && (!b || strstr(e, b));
    if (!ok) fprintf(stderr, "unexpected error: '%s' (wanted '%s'%s%s)\n", e, a, b ? " and " : "", b ? b : "");
    return ok;
}

// Bad arguments, made identically on every rank: each call fails before any
// communication, so the ranks stay in step (the collective afterwards works).
static void test_errors(void) {
    uint64_t seq = weft_comm_seq(W);
    weft_tensor *out = weft_tensor_zeros(WEFT_DIMS(10), WEFT_F32), *in = weft_tensor_zeros(WEFT_DIMS(7), WEFT_F32);
    CHECK(weft_dist_all_gather(W, in, out) == WEFT_ERR_SHAPE && err_has("dist_all_gather: in has 7 elements", NULL));
    weft_tensor *m = weft_tensor_zeros(WEFT_DIMS(3, 4), WEFT_F32), *mt = weft_transpose(m, 0, 1);
    CHECK(weft_dist_all_reduce(W, mt, WEFT_REDUCE_SUM) != WEFT_OK && err_has("dist_all_reduce", "not contiguous"));
    CHECK(weft_dist_broadcast(W, m, size) == WEFT_ERR_ARG && err_has("dist_broadcast", "root"));
    CHECK(weft_dist_reduce(W, m, WEFT_REDUCE_SUM, -1) == WEFT_ERR_ARG && err_has("dist_reduce", "root"));
    weft_tensor *o64 = weft_tensor_zeros(WEFT_DIMS(10), WEFT_F64);
    int64_t off, c;
    weft_dist_chunk(10, size, rank, &off, &c);
    weft_tensor *ch = weft_tensor_zeros(WEFT_DIMS(c), WEFT_F32);
    CHECK(weft_dist_all_gather(W, ch, o64) == WEFT_ERR_DTYPE && err_has("dist_all_gather", "f32"));
    CHECK(weft_dist_reduce_scatter(W, out, in, WEFT_REDUCE_SUM) == WEFT_ERR_SHAPE &&
          err_has("dist_reduce_scatter: out has 7 elements", NULL));
    CHECK(weft_dist_all_to_all(W, out, in) == WEFT_ERR_SHAPE && err_has("dist_all_to_all", NULL));
    CHECK(weft_dist_scatter(W, NULL, in, size) == WEFT_ERR_ARG && err_has("dist_scatter", "root"));
    weft_tensor *bl = weft_tensor_zeros(WEFT_DIMS(4), WEFT_BOOL);
    CHECK(weft_dist_all_reduce(W, bl, WEFT_REDUCE_SUM) == WEFT_ERR_DTYPE && err_has("dist_all_reduce", "bool"));
    CHECK(weft_dist_all_reduce(NULL, m, WEFT_REDUCE_SUM) == WEFT_ERR_ARG && err_has("dist_all_reduce", "NULL"));
    CHECK(weft_dist_all_reduce(W, NULL, WEFT_REDUCE_SUM) == WEFT_ERR_ARG && err_has("dist_all_reduce", "NULL"));
    CHECK(weft_dist_all_reduce_async(W, m, (weft_reduce_op)7) == NULL && err_has("dist_all_reduce", "op"));
    CHECK(weft_dist_send(W, m, rank, 0) == WEFT_ERR_ARG && err_has("dist_send", "dst"));
    CHECK(weft_dist_recv(W, m, 0, -3) == WEFT_ERR_ARG && err_has("dist_recv", NULL));
    CHECK(weft_comm_seq(W) == seq);
    weft_tensor_free(out);
    weft_tensor_free(in);
    weft_tensor_free(m);
    weft_tensor_free(mt);
    weft_tensor_free(o64);
    weft_tensor_free(ch);
    weft_tensor_free(bl);
    CHECK(weft_dist_barrier(W) == WEFT_OK); // still in step
}

// With the debug exchange on, agreeing collectives still work.
static void test_debug_mode_ok(void) {
    weft_comm *d = weft_comm_split(W, 0, rank);
    weft_comm_set_debug(d, true);
    weft_tensor *t = make(WEFT_F32, 11, rank, 0);
    CHECK(weft_dist_all_reduce(d, t, WEFT_REDUCE_SUM) == WEFT_OK);
    CHECK(get(t, 3) == reduce_ref(WEFT_F32, WEFT_REDUCE_SUM, 3));
    int64_t off, c;
    weft_dist_chunk(11, size, rank, &off, &c);
    weft_tensor *in = make(WEFT_F32, c, rank, off);
    CHECK(weft_dist_all_gather(d, in, t) == WEFT_OK);
    CHECK(weft_dist_gather(d, in, rank == 1 % size ? t : NULL, 1 % size) == WEFT_OK);
    CHECK(weft_dist_barrier(d) == WEFT_OK);
    weft_tensor_free(t);
    weft_tensor_free(in);
    weft_comm_free(d);
}

int main(int argc, char **argv) {
    if (weft_dist_init(&argc, &argv) != WEFT_OK) {
        fprintf(stderr, "%s\n", weft_last_error());
        return 1;
    }
    W = weft_comm_world();
    rank = weft_comm_rank(W);
    size = weft_comm_size(W);
    weft_comm_set_timeout(W, 60); // a bug here should fail, not hang the suite
    set_counts();
    if (rank != 0 && !freopen("/dev/null", "w", stdout)) return 1; // one report per job
    RUN(test_chunk);
    RUN(test_all_reduce);
    RUN(test_all_reduce_ring);
    RUN(test_reduce);
    RUN(test_broadcast);
    RUN(test_all_gather_and_gather);
    RUN(test_scatter);
    RUN(test_reduce_scatter);
    RUN(test_all_to_all);
    RUN(test_send_recv_barrier);
    RUN(test_async);
    RUN(test_split);
    RUN(test_errors);
    RUN(test_debug_mode_ok);
    int rc = wt_summary();
    if (weft_dist_finalize() != WEFT_OK) {
        fprintf(stderr, "finalize: %s\n", weft_last_error());
        rc = 1;
    }
    return rc;
}
