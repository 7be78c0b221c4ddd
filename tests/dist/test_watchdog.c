// mpirun: 2 3
// Desynchronised collectives end in errors, never in a hang:
// - one rank skips an all_reduce: the others get the watchdog's error naming
//   the op, its number and the rank that has not arrived;
// - in debug mode, ranks issuing different collectives (count 10 vs 12,
//   broadcast vs all_reduce) all get an error saying who issued what.
// Afterwards the late rank issues the skipped call: it must fail on the
// notice that rank 0 gave up on it instead of waiting alone; nothing is left
// in flight, so every rank finalises MPI normally.
#include <string.h>
#include <time.h>

#include "weft_test.h"

static int rank, size;
static weft_comm *W, *ctrl; // ctrl: a healthy communicator for coordinating the test

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static bool has(const char *msg, const char *want) {
    if (strstr(msg, want)) return true;
    fprintf(stderr, "rank %d: message '%s' lacks '%s'\n", rank, msg, want);
    return false;
}

// No check here depends on how fast a loaded machine runs: every
// communicator has a timeout (LONG) that nothing healthy comes near, except
// rank 0's during the one collective that rank 1 skips. Only rank 0 arms a
// short watchdog then, so which rank gives up is known: the other on-time
// ranks (np >= 3) and the late rank fail at their gates on rank 0's notice,
// never on a watchdog of their own (with several short watchdogs, whichever
// fired first would decide who reports what). Durations are checked only
// from below (the watchdog waits at least its timeout), and "fails at once"
// by the error saying which path it took.
#define LONG 120.0 // s; under ctest's 300 s per test
#define SHORT 5.0  // s: rank 0's watchdog on #3; the other on-time ranks, which left #2 with rank 0, have announced #3 long before

static void test_watchdog_names_missing_rank(void) {
    weft_comm *wd = weft_comm_split(W, 0, rank); // inherits LONG
    weft_tensor *t = weft_tensor_ones(WEFT_DIMS(1000), WEFT_F32);
    CHECK(weft_dist_all_reduce(wd, t, WEFT_REDUCE_SUM) == WEFT_OK); // #1
    CHECK(weft_dist_all_reduce(wd, t, WEFT_REDUCE_SUM) == WEFT_OK); // #2
    CHECK_NEAR(((float *)weft_tensor_data(t))[7], (double)size * size, 0);
    if (rank == 0) {
        weft_comm_set_timeout(wd, SHORT);
        double t0 = now();
        weft_status s = weft_dist_all_reduce(wd, t, WEFT_REDUCE_SUM); // #3: rank 1 never comes
        double took = now() - t0;
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", weft_last_error());
        CHECK(s == WEFT_ERR_STATE);
        CHECK(has(msg, "dist_all_reduce: watchdog: collective #3 (all_reduce)"));
        CHECK(has(msg, "ranks that have not arrived: 1 (world rank 1) [last at #2 all_reduce]"));
        CHECK(strstr(msg, "arrived: 1 (world rank 1) [last at #2 all_reduce], ") == NULL); // only rank 1
        CHECK(took >= SHORT);
        // Broken: later calls fail at once with the same diagnosis (not a watchdog of their own).
        CHECK(weft_dist_barrier(wd) == WEFT_ERR_STATE);
        CHECK(has(weft_last_error(), "dist_barrier: communicator broken: watchdog: collective #3"));
        printf("watchdog error: %s\n", msg);
    } else if (rank != 1) {
        // Waits with rank 0 until rank 0 gives up, then fails on its notice.
        CHECK(weft_dist_all_reduce(wd, t, WEFT_REDUCE_SUM) == WEFT_ERR_STATE); // #3
        CHECK(has(weft_last_error(), "dist_all_reduce: collective #3 (all_reduce): rank 0 gave up on it"));
        CHECK(weft_dist_barrier(wd) == WEFT_ERR_STATE && has(weft_last_error(), "communicator broken"));
    }
    // Every rank gets past the timeout; then the late rank issues #3.
    CHECK(weft_dist_barrier(ctrl) == WEFT_OK);
    if (rank == 1) {
        // Its own watchdog stays at LONG: only rank 0's notice can end this
        // call, however long that notice takes to arrive.
        weft_tensor *late = weft_tensor_ones(WEFT_DIMS(1000), WEFT_F32);
        CHECK(weft_dist_all_reduce(wd, late, WEFT_REDUCE_SUM) == WEFT_ERR_STATE);
        CHECK(has(weft_last_error(), "dist_all_reduce: collective #3 (all_reduce): rank 0 gave up on it"));
        CHECK(((float *)weft_tensor_data(late))[0] == 1); // untouched
        CHECK(weft_dist_barrier(wd) == WEFT_ERR_STATE && has(weft_last_error(), "communicator broken"));
        weft_tensor_free(late);
    }
    CHECK(weft_dist_barrier(ctrl) == WEFT_OK);
    weft_tensor_free(t);
    weft_comm_free(wd);
}

static void test_debug_count_mismatch(void) {
    weft_comm *d = weft_comm_split(W, 0, rank);
    weft_comm_set_debug(d, true);
    weft_tensor *t = weft_tensor_ones(WEFT_DIMS(rank == 1 ? 12 : 10), WEFT_F32);
    CHECK(weft_dist_all_reduce(d, t, WEFT_REDUCE_SUM) == WEFT_ERR_STATE);
    const char *e = weft_last_error();
    CHECK(has(e, "dist_all_reduce: debug check: ranks disagree on collective #1"));
    CHECK(has(e, "rank 0 issued #1 all_reduce(f32, 10 elements, sum)"));
    CHECK(has(e, "rank 1 issued #1 all_reduce(f32, 12 elements, sum)"));
    if (rank == 0) printf("debug error: %s\n", e);
    CHECK(weft_dist_all_reduce(d, t, WEFT_REDUCE_SUM) == WEFT_ERR_STATE &&
          has(weft_last_error(), "communicator broken"));
    weft_tensor_free(t);
    weft_comm_free(d);
}

static void test_debug_op_mismatch(void) {
    weft_comm *d = weft_comm_split(W, 0, rank);
    weft_comm_set_debug(d, true);
    weft_tensor *t = weft_tensor_ones(WEFT_DIMS(10), WEFT_F64);
    weft_status s = rank == 0 ? weft_dist_broadcast(d, t, 0) : weft_dist_all_reduce(d, t, WEFT_REDUCE_MAX);
    CHECK(s == WEFT_ERR_STATE);
    const char *e = weft_last_error();
    CHECK(has(e, "rank 0 issued #1 broadcast(f64, 10 elements, root 0)"));
    CHECK(has(e, "rank 1 issued #1 all_reduce(f64, 10 elements, max)"));
    CHECK(has(e, rank == 0 ? "dist_broadcast: debug check" : "dist_all_reduce: debug check"));
    weft_tensor_free(t);
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
    weft_comm_set_timeout(W, LONG); // communicators split from W inherit it
    if (rank != 0 && !freopen("/dev/null", "w", stdout)) return 1;
    ctrl = weft_comm_split(W, 0, rank);
    RUN(test_watchdog_names_missing_rank);
    RUN(test_debug_count_mismatch);
    RUN(test_debug_op_mismatch);
    weft_comm_free(ctrl);
    int rc = wt_summary();
    if (weft_dist_finalize() != WEFT_OK) {
        fprintf(stderr, "rank %d: finalize: %s\n", rank, weft_last_error());
        rc = 1;
    }
    return rc;
}
