// Communicators over MPI (first cut: blocking collectives on the caller's thread).
#include <stdlib.h>
#include <string.h>

#include "../core/core_impl.h"
#include "dist_impl.h"

void weft_dist_chunk(int64_t n, int size, int r, int64_t *offset, int64_t *count) {
    if (size <= 0 || r < 0 || r >= size || n < 0) {
        if (offset) *offset = 0;
        if (count) *count = 0;
        return;
    }
    int64_t base = n / size, rem = n % size;
    int64_t c = base + (r < rem ? 1 : 0);
    int64_t o = r * base + (r < rem ? r : rem);
    if (offset) *offset = o;
    if (count) *count = c;
}

bool weft_dist_launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

#ifdef WEFT_HAVE_MPI

struct weft_comm {
    MPI_Comm coll, ctl, user;
    int rank, size;
    int *world_ranks;
    uint64_t seq;
    double timeout;
    bool debug, is_world;
};

static weft_comm *g_world;
static bool g_we_initialized;

bool weft_dist_available(void) { return true; }

static weft_comm *comm_wrap(MPI_Comm base, bool is_world) {
    weft_comm *c = calloc(1, sizeof *c);
    if (!c) return weft_error_null(WEFT_ERR_OOM, "dist: out of memory");
    c->coll = base;
    MPI_Comm_set_errhandler(base, MPI_ERRORS_RETURN);
    MPI_Comm_dup(base, &c->ctl);
    MPI_Comm_dup(base, &c->user);
    MPI_Comm_rank(base, &c->rank);
    MPI_Comm_size(base, &c->size);
    c->world_ranks = malloc(sizeof(int) * (size_t)c->size);
    MPI_Group g, wg;
    MPI_Comm_group(base, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    int *mine = malloc(sizeof(int) * (size_t)c->size);
    for (int i = 0; i < c->size; i++) mine[i] = i;
    MPI_Group_translate_ranks(g, c->size, mine, wg, c->world_ranks);
    free(mine);
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    const char *t = getenv("WEFT_DIST_TIMEOUT");
    c->timeout = t ? atof(t) : 600.0;
    const char *d = getenv("WEFT_DIST_DEBUG");
    c->debug = d && atoi(d) != 0;
    c->is_world = is_world;
    return c;
}

weft_status weft_dist_init(int *argc, char ***argv) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (g_world) return WEFT_OK;
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
            return weft_error(WEFT_ERR_STATE, "dist_init: MPI_Init_thread failed");
        g_we_initialized = true;
        if (provided < MPI_THREAD_MULTIPLE)
            return weft_error(WEFT_ERR_UNSUPPORTED, "dist_init: MPI gives thread level %d, need MPI_THREAD_MULTIPLE",
                              provided);
    }
    MPI_Comm w;
    MPI_Comm_dup(MPI_COMM_WORLD, &w);
    g_world = comm_wrap(w, true);
    return g_world ? WEFT_OK : weft_last_status();
}

bool weft_dist_is_initialized(void) { return g_world != NULL; }

static void comm_release(weft_comm *c) {
    MPI_Comm_free(&c->user);
    MPI_Comm_free(&c->ctl);
    MPI_Comm_free(&c->coll);
    free(c->world_ranks);
    free(c);
}

weft_status weft_dist_finalize(void) {
    if (!g_world) return WEFT_OK;
    comm_release(g_world);
    g_world = NULL;
    if (g_we_initialized) MPI_Finalize();
    return WEFT_OK;
}

void weft_dist_abort(int code) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

weft_comm *weft_comm_world(void) {
    if (!g_world) return weft_error_null(WEFT_ERR_STATE, "comm_world: call weft_dist_init first");
    return g_world;
}

weft_comm *weft_comm_split(weft_comm *c, int color, int key) {
    if (!c) return weft_error_null(WEFT_ERR_ARG, "comm_split: communicator is NULL");
    MPI_Comm nc;
    if (MPI_Comm_split(c->coll, color < 0 ? MPI_UNDEFINED : color, key, &nc) != MPI_SUCCESS)
        return weft_error_null(WEFT_ERR_STATE, "comm_split: MPI_Comm_split failed");
    if (nc == MPI_COMM_NULL) return NULL;
    return comm_wrap(nc, false);
}

void weft_comm_free(weft_comm *c) {
    if (!c || c->is_world) return;
    comm_release(c);
}

int weft_comm_rank(const weft_comm *c) { return c ? c->rank : -1; }
int weft_comm_size(const weft_comm *c) { return c ? c->size : 0; }
int weft_comm_world_rank(const weft_comm *c, int r) {
    return (c && r >= 0 && r < c->size) ? c->world_ranks[r] : -1;
}
uint64_t weft_comm_seq(const weft_comm *c) { return c ? c->seq : 0; }
void weft_comm_set_timeout(weft_comm *c, double seconds) {
    if (c) c->timeout = seconds;
}
void weft_comm_set_debug(weft_comm *c, bool on) {
    if (c) c->debug = on;
}

MPI_Comm weft_comm_mpi(const weft_comm *c) {
    if (!c) {
        weft_error(WEFT_ERR_ARG, "comm_mpi: communicator is NULL");
        return MPI_COMM_NULL;
    }
    return c->user;
}

MPI_Datatype weft_dist_mpi_dtype(weft_dtype dt) {
    switch (dt) {
    case WEFT_F32: return MPI_FLOAT;
    case WEFT_F64: return MPI_DOUBLE;
    case WEFT_I32: return MPI_INT32_T;
    case WEFT_I64: return MPI_INT64_T;
    case WEFT_U8: return MPI_UINT8_T;
    case WEFT_BOOL: return MPI_UINT8_T;
    case WEFT_F16:
    case WEFT_BF16: return MPI_UINT16_T;
    default: return MPI_DATATYPE_NULL;
    }
}

// ---- first cut of the collectives: blocking, on the caller's thread ----
static weft_status check_t(const char *fn, weft_comm *c, const weft_tensor *t) {
    if (!c) return weft_error(WEFT_ERR_ARG, "%s: communicator is NULL", fn);
    if (!t) return weft_error(WEFT_ERR_ARG, "%s: tensor is NULL", fn);
    if (!weft_tensor_is_contiguous(t)) return weft_error(WEFT_ERR_ARG, "%s: tensor is not contiguous", fn);
    if (weft_dist_mpi_dtype(weft_tensor_dtype(t)) == MPI_DATATYPE_NULL)
        return weft_error(WEFT_ERR_DTYPE, "%s: dtype %s not supported", fn, weft_dtype_name(weft_tensor_dtype(t)));
    return WEFT_OK;
}

weft_status weft_dist_broadcast(weft_comm *c, weft_tensor *t, int root) {
    weft_status s = check_t("dist_broadcast", c, t);
    if (s) return s;
    if (root < 0 || root >= c->size) return weft_error(WEFT_ERR_ARG, "dist_broadcast: bad root %d", root);
    c->seq++;
    if (MPI_Bcast(weft_tensor_data(t), (int)weft_tensor_numel(t), weft_dist_mpi_dtype(weft_tensor_dtype(t)), root,
                  c->coll) != MPI_SUCCESS)
        return weft_error(WEFT_ERR_STATE, "dist_broadcast: MPI error");
    return WEFT_OK;
}

weft_status weft_dist_all_reduce(weft_comm *c, weft_tensor *t, weft_reduce_op op) {
    weft_status s = check_t("dist_all_reduce", c, t);
    if (s) return s;
    weft_dtype dt = weft_tensor_dtype(t);
    c->seq++;
    int n = (int)weft_tensor_numel(t);
    if (MPI_Allreduce(MPI_IN_PLACE, weft_tensor_data(t), n, weft_dist_mpi_dtype(dt),
                      op == WEFT_REDUCE_MAX ? MPI_MAX : MPI_SUM, c->coll) != MPI_SUCCESS)
        return weft_error(WEFT_ERR_STATE, "dist_all_reduce: MPI error");
    if (op == WEFT_REDUCE_AVG) {
        if (dt == WEFT_F32) {
            float *p = weft_tensor_data(t);
            for (int i = 0; i < n; i++) p[i] /= (float)c->size;
        } else if (dt == WEFT_F64) {
            double *p = weft_tensor_data(t);
            for (int i = 0; i < n; i++) p[i] /= c->size;
        }
    }
    return WEFT_OK;
}

weft_status weft_dist_barrier(weft_comm *c) {
    if (!c) return weft_error(WEFT_ERR_ARG, "dist_barrier: communicator is NULL");
    c->seq++;
    return MPI_Barrier(c->coll) == MPI_SUCCESS ? WEFT_OK : weft_error(WEFT_ERR_STATE, "dist_barrier: MPI error");
}

#else // !WEFT_HAVE_MPI

#define NOMPI(fn) weft_error(WEFT_ERR_UNSUPPORTED, "%s: weft built without MPI", fn)
bool weft_dist_available(void) { return false; }
weft_status weft_dist_init(int *argc, char ***argv) { return NOMPI("dist_init"); }
bool weft_dist_is_initialized(void) { return false; }
weft_status weft_dist_finalize(void) { return WEFT_OK; }
void weft_dist_abort(int code) { exit(code); }
weft_comm *weft_comm_world(void) { NOMPI("comm_world"); return NULL; }
weft_comm *weft_comm_split(weft_comm *c, int color, int key) { NOMPI("comm_split"); return NULL; }
void weft_comm_free(weft_comm *c) {}
int weft_comm_rank(const weft_comm *c) { return -1; }
int weft_comm_size(const weft_comm *c) { return 0; }
int weft_comm_world_rank(const weft_comm *c, int r) { return -1; }
uint64_t weft_comm_seq(const weft_comm *c) { return 0; }
void weft_comm_set_timeout(weft_comm *c, double seconds) {}
void weft_comm_set_debug(weft_comm *c, bool on) {}
weft_status weft_dist_broadcast(weft_comm *c, weft_tensor *t, int root) { return NOMPI("dist_broadcast"); }
weft_status weft_dist_all_reduce(weft_comm *c, weft_tensor *t, weft_reduce_op op) { return NOMPI("dist_all_reduce"); }
weft_status weft_dist_barrier(weft_comm *c) { return NOMPI("dist_barrier"); }
#endif
