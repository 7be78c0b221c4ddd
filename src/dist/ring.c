// Ring all-reduce over non-blocking point-to-point messages on the
// communicator's `coll` dup, progressed by the communication thread.
//
// n ranks, chunks by weft_dist_chunk. Reduce-scatter: at step s (0..n-2)
// rank r sends chunk (r-s) to r+1 and receives chunk (r-s-1) from r-1 into
// scratch, adding it into its own copy; afterwards r holds the full sum of
// chunk (r+1). All-gather: at step s it sends chunk (r+1-s) and receives
// chunk (r-s) in place. Each step's messages are cut into segments all
// posted at once, and a received segment is reduced while later ones are
// still in flight, so the additions overlap the transfers. Messages between
// two ranks on one communicator arrive in order (MPI's non-overtaking rule)
// and one collective runs at a time per communicator, so one tag suffices.
#include <stdlib.h>
#include <string.h>

#include "../core/core_impl.h"
#include "comm_impl.h"

#ifdef WEFT_HAVE_MPI

#define TAG_RING 7
#define SEG_BYTES (256 * 1024)

struct weft_ring {
    int step;   // 0 .. 2(n-1)-1: reduce-scatter steps, then all-gather steps
    int nreq;   // requests of this step: receives first, then sends
    int nrecv;
    MPI_Request *reqs;
    int64_t *seg_off, *seg_len; // receive segments (elements, into the chunk)
    char *seg_reduced;
    int64_t chunk_off; // elements, of the chunk being received
    int cap;
};

bool weft_ring_wanted(const weft_work *w) {
    return w->kind == WK_ALL_REDUCE && w->c->size > 1 &&
           (int64_t)w->rcount * (int64_t)weft_dtype_size(w->dt) >= WEFT_RING_MIN_BYTES;
}

static int mod(int a, int n) { return ((a % n) + n) % n; }

static void add_into(void *dst, const void *src, int64_t n, weft_dtype dt, weft_reduce_op op) {
    bool mx = op == WEFT_REDUCE_MAX;
#define LOOP(T)                                                       \
    do {                                                              \
        T *restrict d = dst;                                          \
        const T *restrict s = src;                                    \
        if (mx)                                                       \
            for (int64_t i = 0; i < n; i++) d[i] = s[i] > d[i] ? s[i] : d[i]; \
        else                                                          \
            for (int64_t i = 0; i < n; i++) d[i] += s[i];             \
    } while (0)
    switch (dt) {
    case WEFT_F32: LOOP(float); break;
    case WEFT_F64: LOOP(double); break;
    case WEFT_I32: LOOP(int32_t); break;
    case WEFT_I64: LOOP(int64_t); break;
    case WEFT_U8: LOOP(uint8_t); break;
    default: break;
    }
#undef LOOP
}

// Posts the receives and sends of the current step.
static int post_step(weft_work *w) {
    weft_comm *c = w->c;
    struct weft_ring *R = w->ring;
    int n = c->size, r = c->rank, s = R->step;
    bool rs = s < n - 1;
    int k = rs ? s : s - (n - 1);
    int send_idx = rs ? mod(r - k, n) : mod(r + 1 - k, n);
    int recv_idx = rs ? mod(r - k - 1, n) : mod(r - k, n);
    size_t es = weft_dtype_size(w->dt);
    int64_t so, sl, ro, rl;
    weft_dist_chunk(w->rcount, n, send_idx, &so, &sl);
    weft_dist_chunk(w->rcount, n, recv_idx, &ro, &rl);
    int64_t seg = SEG_BYTES / (int64_t)es;
    int nrs = (int)((rl + seg - 1) / seg), nss = (int)((sl + seg - 1) / seg);
    if (nrs + nss > R->cap) {
        R->cap = nrs + nss;
        R->reqs = realloc(R->reqs, sizeof *R->reqs * (size_t)R->cap);
        R->seg_off = realloc(R->seg_off, sizeof *R->seg_off * (size_t)R->cap);
        R->seg_len = realloc(R->seg_len, sizeof *R->seg_len * (size_t)R->cap);
        R->seg_reduced = realloc(R->seg_reduced, (size_t)R->cap);
        if (!R->reqs || !R->seg_off || !R->seg_len || !R->seg_reduced) return MPI_ERR_NO_MEM;
    }
    MPI_Datatype dt = weft_dist_mpi_dtype(w->dt);
    char *buf = w->rbuf;
    R->chunk_off = ro;
    R->nreq = 0;
    R->nrecv = nrs;
    for (int i = 0; i < nrs; i++) {
        int64_t o = (int64_t)i * seg, l = rl - o < seg ? rl - o : seg;
        void *dst = rs ? (char *)c->tmp + o * (int64_t)es : buf + (ro + o) * (int64_t)es;
        R->seg_off[i] = o;
        R->seg_len[i] = l;
        R->seg_reduced[i] = !rs;
        int rc = MPI_Irecv(dst, (int)l, dt, mod(r - 1, n), TAG_RING, c->coll, &R->reqs[R->nreq++]);
        if (rc != MPI_SUCCESS) return rc;
    }
    for (int i = 0; i < nss; i++) {
        int64_t o = (int64_t)i * seg, l = sl - o < seg ? sl - o : seg;
        int rc = MPI_Isend(buf + (so + o) * (int64_t)es, (int)l, dt, mod(r + 1, n), TAG_RING, c->coll,
                           &R->reqs[R->nreq++]);
        if (rc != MPI_SUCCESS) return rc;
    }
    return MPI_SUCCESS;
}

int weft_ring_start(weft_work *w) {
    weft_comm *c = w->c;
    size_t es = weft_dtype_size(w->dt);
    int64_t maxchunk;
    weft_dist_chunk(w->rcount, c->size, 0, NULL, &maxchunk);
    size_t need = (size_t)maxchunk * es;
    if (need > c->tmp_bytes) {
        free(c->tmp);
        c->tmp = malloc(need);
        c->tmp_bytes = c->tmp ? need : 0;
        if (!c->tmp) return MPI_ERR_NO_MEM;
    }
    w->ring = calloc(1, sizeof *w->ring);
    if (!w->ring) return MPI_ERR_NO_MEM;
    return post_step(w);
}

int weft_ring_test(weft_work *w, int *done) {
    struct weft_ring *R = w->ring;
    weft_comm *c = w->c;
    size_t es = weft_dtype_size(w->dt);
    *done = 0;
    for (;;) {
        bool all = true;
        for (int i = 0; i < R->nreq; i++) {
            if (R->reqs[i] == MPI_REQUEST_NULL) continue; // finished earlier (and reduced)
            int flag = 0, rc = MPI_Test(&R->reqs[i], &flag, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) return rc;
            if (!flag) {
                all = false;
                continue;
            }
            if (i >= R->nrecv || R->seg_reduced[i]) continue;
            add_into((char *)w->rbuf + (R->chunk_off + R->seg_off[i]) * (int64_t)es,
                     (char *)c->tmp + R->seg_off[i] * (int64_t)es, R->seg_len[i], w->dt, w->rop);
            R->seg_reduced[i] = 1;
        }
        if (!all) return MPI_SUCCESS;
        if (++R->step == 2 * (c->size - 1)) {
            *done = 1;
            return MPI_SUCCESS;
        }
        int rc = post_step(w);
        if (rc != MPI_SUCCESS) return rc;
    }
}

void weft_ring_free(weft_work *w) {
    if (!w->ring) return;
    free(w->ring->reqs);
    free(w->ring->seg_off);
    free(w->ring->seg_len);
    free(w->ring->seg_reduced);
    free(w->ring);
    w->ring = NULL;
}
#endif
