// mpirun: 1 2 4
// Checkpoints across layouts (weft_shard_*): a tensor written as pieces by
// one layout is read back by another (rows, columns, 2-d blocks, whole) with
// every value equal to its closed form f(i, j); a round trip through one
// process is bit-identical; a plain one-process checkpoint is read by any
// layout; a step whose manifest is missing is not used; bad requests are
// errors naming the tensor.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weft_test.h"

#include <weft/io.h>
#include <weft/parallel.h>

static int rank, size;
static weft_comm *W;
static char dir[256];

enum { R = 6, C = 8 };
static double f(int64_t i, int64_t j) { return i * 100 + j + 0.25; }
static double fb(int64_t j) { return -3.5 * j; }

// The (rows r0..r0+nr, cols c0..c0+nc) block of the global tensor, as a shard.
static weft_shard block(const char *name, int64_t r0, int64_t nr, int64_t c0, int64_t nc, weft_dtype dt, bool fill) {
    weft_tensor *t = weft_tensor_zeros(WEFT_DIMS(nr, nc), dt);
    for (int64_t i = 0; fill && i < nr; i++)
        for (int64_t j = 0; j < nc; j++) weft_tensor_set(t, (int64_t[]){i, j}, f(r0 + i, c0 + j));
    return (weft_shard){.name = name, .local = t, .ndim = 2, .global = {R, C}, .offset = {r0, c0}};
}

// Every element of a block shard equals f at its global place.
static void check_block(const weft_shard *s, double tol) {
    int64_t nr = weft_tensor_size(s->local, 0), nc = weft_tensor_size(s->local, 1);
    int bad = 0;
    for (int64_t i = 0; i < nr; i++)
        for (int64_t j = 0; j < nc; j++) {
            double v = 0;
            weft_tensor_get(s->local, (int64_t[]){i, j}, &v);
            double want = f(s->offset[0] + i, s->offset[1] + j);
            if (!(v == want || (tol > 0 && v > want - tol && v < want + tol))) bad++;
        }
    if (bad) fprintf(stderr, "rank %d: %s block at (%lld,%lld): %d values wrong\n", rank, s->name,
                     (long long)s->offset[0], (long long)s->offset[1], bad);
    CHECK(bad == 0);
}

static void split(int64_t n, int parts, int k, int64_t *off, int64_t *len) {
    weft_dist_chunk(n, parts, k, off, len);
}

// Layout A: rows split over all ranks; the bias replicated, written by rank 0 only.
static void save_rows(int64_t step) {
    int64_t r0, nr;
    split(R, size, rank, &r0, &nr);
    weft_shard s[2] = {block("w", r0, nr, 0, C, WEFT_F64, true)};
    weft_tensor *b = weft_tensor_empty(WEFT_DIMS(C), WEFT_F64);
    for (int64_t j = 0; j < C; j++) weft_tensor_set(b, (int64_t[]){j}, fb(j));
    s[1] = (weft_shard){.name = "b", .local = b, .skip_write = rank != 0}; // whole tensor, one writer
    const char *k[] = {"step_note"}, *v[] = {"rows"};
    CHECK(weft_shard_save(W, dir, step, "rows", 2, s, 1, k, v) == WEFT_OK);
    weft_tensor_free(s[0].local);
    weft_tensor_free(b);
}

static void test_reshard(void) {
    save_rows(10);
    weft_shard_ckpt *k = weft_shard_open(dir, -1);
    CHECK(k != NULL);
    if (!k) return;
    CHECK(weft_shard_step(k) == 10 && !strcmp(weft_shard_layout(k), "rows"));
    CHECK(weft_shard_meta(k, "step_note") && !strcmp(weft_shard_meta(k, "step_note"), "rows"));
    // columns
    int64_t c0, nc, r0, nr;
    split(C, size, rank, &c0, &nc);
    weft_shard s = block("w", 0, R, c0, nc, WEFT_F64, false);
    CHECK(weft_shard_read(k, &s) == WEFT_OK);
    check_block(&s, 0);
    weft_tensor_free(s.local);
    // 2-d blocks: a grid of (size == 4 ? 2x2 : size x 1)
    int gr = size == 4 ? 2 : size, gc = size == 4 ? 2 : 1;
    split(R, gr, rank % gr, &r0, &nr);
    split(C, gc, rank / gr, &c0, &nc);
    s = block("w", r0, nr, c0, nc, WEFT_F32, false); // converted to f32 on the way
    CHECK(weft_shard_read(k, &s) == WEFT_OK);
    check_block(&s, 1e-3);
    weft_tensor_free(s.local);
    // whole, on the accelerator (the mock without a GPU)
    weft_device dev;
    if (wt_accelerator(&dev, NULL)) {
        weft_tensor *h = weft_tensor_zeros(WEFT_DIMS(R, C), WEFT_F64), *d = weft_tensor_to(h, dev);
        weft_shard w = {.name = "w", .local = d};
        CHECK(weft_shard_read(k, &w) == WEFT_OK);
        weft_tensor *back = weft_tensor_to(d, WEFT_DEVICE_CPU);
        weft_shard wb = {.name = "w", .local = back, .ndim = 2, .global = {R, C}};
        check_block(&wb, 0);
        weft_tensor_free(h);
        weft_tensor_free(d);
        weft_tensor_free(back);
    }
    // the replicated bias, whole, on every rank
    weft_tensor *b = weft_tensor_zeros(WEFT_DIMS(C), WEFT_F64);
    weft_shard sb = {.name = "b", .local = b};
    CHECK(weft_shard_read(k, &sb) == WEFT_OK);
    for (int64_t j = 0; j < C; j++) {
        double v;
        weft_tensor_get(b, (int64_t[]){j}, &v);
        CHECK(v == fb(j));
    }
    weft_tensor_free(b);
    weft_shard_close(k);
}

// rows -> one process (rank 0 writes the whole tensor) -> rows again: bit-identical.
static void test_round_trip(void) {
    save_rows(20);
    weft_shard_ckpt *k = weft_shard_open(dir, 20);
    CHECK(k != NULL);
    if (!k) return;
    weft_shard whole = {.name = "w", .local = weft_tensor_zeros(WEFT_DIMS(R, C), WEFT_F64), .skip_write = rank != 0};
    CHECK(weft_shard_read(k, &whole) == WEFT_OK);
    weft_shard_close(k);
    CHECK(weft_shard_save(W, dir, 21, "one", 1, &whole, 0, NULL, NULL) == WEFT_OK);
    weft_tensor_free(whole.local);
    k = weft_shard_open(dir, -1);
    CHECK(k && weft_shard_step(k) == 21);
    int64_t r0, nr;
    split(R, size, rank, &r0, &nr);
    weft_shard s = block("w", r0, nr, 0, C, WEFT_F64, false), ref = block("w", r0, nr, 0, C, WEFT_F64, true);
    CHECK(k && weft_shard_read(k, &s) == WEFT_OK);
    wt_check_same("rows after a round trip through one process", s.local, ref.local, 0);
    weft_tensor_free(s.local);
    weft_tensor_free(ref.local);
    weft_shard_close(k);
    weft_dist_barrier(W); // every rank has looked for the newest step before rank 0 writes a newer one
}

// A plain one-process checkpoint (ckpt-STEP.safetensors, no manifest) is read by any layout.
static void test_plain_checkpoint(void) {
    if (rank == 0) {
        weft_shard w = block("w", 0, R, 0, C, WEFT_F64, true);
        char path[512];
        const char *names[] = {"w"};
        CHECK(weft_ckpt_path(dir, 30, path, sizeof path) != NULL);
        CHECK(weft_safetensors_save(path, 1, names, &w.local, 0, NULL, NULL) == WEFT_OK);
        weft_tensor_free(w.local);
    }
    weft_dist_barrier(W);
    weft_shard_ckpt *k = weft_shard_open(dir, -1);
    CHECK(k && weft_shard_step(k) == 30 && !strcmp(weft_shard_layout(k), ""));
    int64_t c0, nc;
    split(C, size, rank, &c0, &nc);
    weft_shard s = block("w", 0, R, c0, nc, WEFT_F64, false);
    CHECK(k && weft_shard_read(k, &s) == WEFT_OK);
    check_block(&s, 0);
    weft_tensor_free(s.local);
    weft_shard_close(k);
    weft_dist_barrier(W);
}

// A job killed while writing: parts without a manifest are not a checkpoint.
static void test_incomplete_ignored(void) {
    if (rank == 0) {
        weft_shard w = block("w", 0, R, 0, C, WEFT_F64, true);
        char path[512];
        snprintf(path, sizeof path, "%s/ckpt-000040.r0.safetensors", dir);
        const char *names[] = {"w"};
        CHECK(weft_safetensors_save(path, 1, names, &w.local, 0, NULL, NULL) == WEFT_OK);
        weft_tensor_free(w.local);
    }
    weft_dist_barrier(W);
    weft_shard_ckpt *k = weft_shard_open(dir, -1);
    CHECK(k && weft_shard_step(k) == 30);
    weft_shard_close(k);
    CHECK(weft_shard_open(dir, 40) == NULL); // asked for by number: no complete checkpoint there
    weft_dist_barrier(W);
}

// Another view of the same values: attention's qkv (3 n, m) is written by
// tensor-parallel ranks as boxes of its (3, n, m) view (each rank a slice of
// every block). Read whole as (3 n, m) through a reshape of the reader's
// tensor; and a whole (3 n, m) piece read into (3, n, m) boxes through a
// reshape of the stored one.
enum { G = 3, NB = 4 };
static weft_tensor *grouped_piece(int64_t r0, int64_t nr) { // (G, nr, C): rows r0.. of each block
    weft_tensor *t = weft_tensor_zeros(WEFT_DIMS(G, nr, C), WEFT_F64);
    for (int g = 0; g < G; g++)
        for (int64_t i = 0; i < nr; i++)
            for (int64_t j = 0; j < C; j++) weft_tensor_set(t, (int64_t[]){g, i, j}, f(g * NB + r0 + i, j));
    return t;
}

static void test_other_view(void) {
    int64_t r0, nr;
    split(NB, size, rank, &r0, &nr);
    weft_shard s = {.name = "qkv", .local = grouped_piece(r0, nr), .ndim = 3, .global = {G, NB, C}, .offset = {0, r0, 0}};
    CHECK(weft_shard_save(W, dir, 60, "grouped", 1, &s, 0, NULL, NULL) == WEFT_OK);
    weft_shard_ckpt *k = weft_shard_open(dir, 60);
    CHECK(k != NULL);
    weft_shard whole = {.name = "qkv", .local = weft_tensor_zeros(WEFT_DIMS(G * NB, C), WEFT_F64)};
    CHECK(k && weft_shard_read(k, &whole) == WEFT_OK);
    whole.ndim = 2, whole.global[0] = G * NB, whole.global[1] = C;
    check_block(&whole, 0);
    // a part of the (3 n, m) view cannot be cut out of (3, n, m) boxes: an error naming the tensor
    weft_shard part = block("qkv", 0, 2, 0, C, WEFT_F64, false);
    part.global[0] = G * NB;
    if (size > 1) CHECK(k && weft_shard_read(k, &part) == WEFT_ERR_SHAPE && wt_error_has("qkv"));
    weft_tensor_free(part.local);
    weft_shard_close(k);
    // back: the whole (3 n, m) written by rank 0, read as (3, n, m) boxes
    whole.ndim = 0;
    whole.skip_write = rank != 0;
    CHECK(weft_shard_save(W, dir, 61, "whole", 1, &whole, 0, NULL, NULL) == WEFT_OK);
    k = weft_shard_open(dir, 61);
    weft_tensor *want = grouped_piece(r0, nr), *got = weft_tensor_zeros(WEFT_DIMS(G, nr, C), WEFT_F64);
    weft_shard back = {.name = "qkv", .local = got, .ndim = 3, .global = {G, NB, C}, .offset = {0, r0, 0}};
    CHECK(k && weft_shard_read(k, &back) == WEFT_OK);
    wt_check_same("(3, n, m) boxes from a whole (3 n, m)", got, want, 0);
    weft_shard_close(k);
    weft_tensor *ts[] = {s.local, whole.local, want, got};
    for (int i = 0; i < 4; i++) weft_tensor_free(ts[i]);
}

static void test_errors(void) {
    weft_shard_ckpt *k = weft_shard_open(dir, 10);
    CHECK(k != NULL);
    if (!k) return;
    weft_shard s = block("w", 0, R, 0, C, WEFT_F64, false);
    s.global[1] = C + 1; // another global shape
    CHECK(weft_shard_read(k, &s) == WEFT_ERR_SHAPE && wt_error_has("w"));
    s.global[1] = C;
    s.name = "nosuch";
    CHECK(weft_shard_read(k, &s) == WEFT_ERR_FORMAT && wt_error_has("nosuch"));
    s.name = "w";
    s.offset[0] = 1; // reaches past the global rows
    CHECK(weft_shard_read(k, &s) == WEFT_ERR_SHAPE && wt_error_has("outside"));
    weft_tensor_free(s.local);
    weft_shard_close(k);
    // a tensor only partly written: rows 0..1 of 6, on rank 0 only
    weft_shard part = block("p", 0, 2, 0, C, WEFT_F64, true);
    part.skip_write = rank != 0;
    CHECK(weft_shard_save(W, dir, 50, "part", 1, &part, 0, NULL, NULL) == WEFT_OK);
    weft_tensor_free(part.local);
    k = weft_shard_open(dir, 50);
    weft_shard whole = block("p", 0, R, 0, C, WEFT_F64, false);
    CHECK(k && weft_shard_read(k, &whole) == WEFT_ERR_FORMAT && wt_error_has("in no piece"));
    weft_tensor_free(whole.local);
    weft_shard_close(k);
    CHECK(weft_shard_open("/nonexistent/weft-ckpt", -1) == NULL);
}

int main(int argc, char **argv) {
    if (weft_dist_init(&argc, &argv) != WEFT_OK) {
        fprintf(stderr, "dist init: %s\n", weft_last_error());
        return 1;
    }
    W = weft_comm_world();
    rank = weft_comm_rank(W);
    size = weft_comm_size(W);
    weft_tensor *id = weft_tensor_scalar(rank == 0 ? (double)getpid() : 0, WEFT_I64);
    weft_dist_broadcast(W, id, 0);
    snprintf(dir, sizeof dir, "/tmp/weft-shard-ckpt-%lld", (long long)weft_tensor_item(id));
    weft_tensor_free(id);
    RUN(test_reshard);
    RUN(test_round_trip);
    RUN(test_plain_checkpoint);
    RUN(test_incomplete_ignored);
    RUN(test_other_view);
    RUN(test_errors);
    weft_dist_barrier(W);
    if (rank == 0) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    }
    int rc = wt_summary();
    weft_dist_finalize();
    return rc;
}
