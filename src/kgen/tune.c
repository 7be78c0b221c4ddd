// The auto-tuner: a template of schedules, searched by measuring them, guided
// by a cost model fitted to what was measured (AutoTVM's loop, small), and a
// log of what each definition's best schedule was.
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../io/io_impl.h"
#include "kgen_impl.h"

// One point of the template (see weft_kg_tune in weft/kgen.h).
typedef struct kg_cfg {
    int64_t tile[2]; // tiles of the two tiled output dims (tile_dims; 1: not split; >= extent: the whole axis inside)
    int64_t rtile;   // the first reduction axis's inner loop (1: not split)
    int rin;         // 1: that inner loop innermost; 0: outside the tile's loops
    int unroll, cw, par;
    int pack;        // the inputs the body reads copied (cache_read): 0 no; 1 at the last outer loop; 2 at the
                     // first reduction axis's outer loop (when split)
    int tz;          // the reduction's inner loop and the tile's two loops as the GEMM micro-kernel (tensorize)
    int at;          // where the stages are computed: 0 at root; 1 at the outermost loop; 2 at the last outer
                     // loop; 3 at the last outer loop, those without a reduction inlined (compute_inline)
} kg_cfg;

#define KG_AT_OPTS 4
#define KG_NF 22 // cost-model features
#define KG_MAX_SPACE 50000
#define KG_REFINE 4 // the second level's trials
#define KG_SET_BITS 17 // the enumeration's set of schedules seen

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int first_reduce(const weft_kg *kg) {
    for (int i = 0; i < kg->n_axis; i++)
        if (kg->axis[i].reduce && kg->axis[i].stage == KG_MAIN) return i;
    return -1;
}

// The output dims the template tiles: the largest of the others (ties: the later), then the last (-1: none).
static void tile_dims(const weft_kg *kg, int dims[2]) {
    dims[1] = kg->n_out - 1;
    dims[0] = -1;
    for (int d = 0; d < kg->n_out - 1; d++)
        if (dims[0] < 0 || kg->axis[kg->out_axis[d]].ext >= kg->axis[kg->out_axis[dims[0]]].ext) dims[0] = d;
}

static int64_t dim_ext(const weft_kg *kg, int d) { return d >= 0 ? kg->axis[kg->out_axis[d]].ext : 1; }

// The schedule a configuration stands for; NULL (no error kept) where the template cannot make it.
static weft_kg_sched *apply(const weft_kg *kg, const kg_cfg *c) {
    weft_kg_sched *s = weft_kg_schedule(kg);
    if (!s) return NULL;
    int n_loops = s->n_loops; // the default schedule's: the output axes, then the reduction axes
    weft_kg_loop outer[WEFT_KG_MAX_LOOPS], inner[WEFT_KG_MAX_LOOPS], red[WEFT_KG_MAX_LOOPS], ri = -1;
    int no = 0, ni = 0, nr = 0;
    bool ok = true;
    int td[2];
    tile_dims(kg, td);
    for (int d = 0; d < kg->n_out && ok; d++) { // the default schedule's loop d is output axis d
        int64_t ext = kg->axis[kg->out_axis[d]].ext;
        int64_t t = d == td[0] ? c->tile[0] : d == td[1] ? c->tile[1] : 1;
        weft_kg_loop o, i;
        if (t <= 1) outer[no++] = d;
        else if (t >= ext) inner[ni++] = d;
        else if ((ok = !weft_kg_split(s, d, t, &o, &i))) outer[no++] = o, inner[ni++] = i;
    }
    for (int l = kg->n_out; l < n_loops && ok; l++) { // the reduction loops, in declaration order
        if (l == kg->n_out && c->rtile > 1 && c->rtile < s->loop[l].ext) {
            weft_kg_loop o, i;
            if ((ok = !weft_kg_split(s, l, c->rtile, &o, &i))) red[nr++] = o, ri = i;
        } else red[nr++] = l;
    }
    weft_kg_loop order[WEFT_KG_MAX_LOOPS];
    int n = 0;
    for (int i = 0; i < no; i++) order[n++] = outer[i];
    for (int i = 0; i < nr; i++) order[n++] = red[i];
    if (ri >= 0 && !c->rin) order[n++] = ri;
    for (int i = 0; i < ni; i++) order[n++] = inner[i];
    if (ri >= 0 && c->rin) order[n++] = ri;
    ok = ok && !weft_kg_reorder(s, n, order);
    // the innermost loop vectorised when it walks the output's last axis
    if (ok && ni && order[n - 1] == inner[ni - 1] && s->loop[inner[ni - 1]].axis == kg->out_axis[kg->n_out - 1])
        ok = !weft_kg_vectorize(s, inner[ni - 1]);
    // (unrolling more than 16 makes the compiler slow and the code large, for nothing measured here)
    for (int i = 0; ok && c->unroll && i < ni; i++)
        if (s->loop[inner[i]].ann == KG_ANN_NONE && s->loop[inner[i]].ext <= 16) ok = !weft_kg_unroll(s, inner[i]);
    if (ok && c->cw) ok = no > 0 && !weft_kg_cache_write(s, outer[no - 1]);
    if (ok && c->par) ok = no > 0 && !weft_kg_parallel(s, order[0]);
    if (ok && c->pack) { // every input the body reads, where its region fits a local buffer
        weft_kg_loop at = c->pack == 1 ? (no ? outer[no - 1] : -1) : ri >= 0 ? red[0] : -1;
        ok = at >= 0;
        for (int t = 0; ok && t < kg->n_in; t++)
            if (kg_reads(NULL, kg->body, t)) ok = !weft_kg_cache_read(s, t, at);
    }
    if (ok && c->tz) ok = ri >= 0 && !c->rin && c->cw && ni == 2 && !weft_kg_tensorize(s, ri, WEFT_KG_INTRIN_GEMM);
    if (ok && c->at) { // the stages' places (none: only at root)
        weft_kg_loop at = c->at == 1 ? order[0] : no ? outer[no - 1] : -1;
        ok = kg->n_stage > 0 && at >= 0;
        for (int u = 0; ok && u < kg->n_stage; u++)
            ok = !(c->at == 3 && kg->stage[u].red == WEFT_KG_NONE ? weft_kg_compute_inline(s, WEFT_KG_MAX_INPUTS + u)
                                                                  : weft_kg_compute_at(s, WEFT_KG_MAX_INPUTS + u, at));
    }
    if (ok && (c->pack || c->tz || c->at)) { // (the regions fit, the micro-kernel's loops match)
        char *src = weft_kg_source(s);
        ok = src != NULL;
        free(src);
    }
    if (ok) ok = !kg_sched_check(s);
    if (!ok) {
        weft_kg_sched_free(s);
        weft_clear_error();
        return NULL;
    }
    return s;
}

static double lg(double x) { return log2(x < 1 ? 1 : x); }

static void features(const weft_kg *kg, const kg_cfg *c, double *f) {
    int64_t e[2];
    int td[2];
    tile_dims(kg, td);
    for (int k = 0; k < 2; k++) e[k] = c->tile[k] < dim_ext(kg, td[k]) ? c->tile[k] : dim_ext(kg, td[k]);
    double tile = lg((double)(e[0] * e[1])), ws = lg((double)(e[0] * c->rtile + c->rtile * e[1] + e[0] * e[1]) * 4);
    double fv[KG_NF] = {1, lg((double)e[1]), lg((double)e[0]), lg((double)c->rtile), c->rin, c->unroll, c->cw, c->par,
                        tile, c->cw * tile, ws, ws * ws / 10, c->rin ? 0 : lg((double)e[1]), c->unroll * tile,
                        tile * tile / 10, c->rin * lg((double)c->rtile), c->pack == 1, c->pack == 2, c->tz,
                        c->at == 1, c->at == 2, c->at == 3};
    memcpy(f, fv, sizeof fv);
}

// Ridge regression: w minimises |X w - y|^2 + lambda |w|^2 (normal equations, partial pivoting).
static void ridge(int n, const double *x, const double *y, double lambda, double *w) {
    double a[KG_NF][KG_NF + 1] = {{0}};
    for (int r = 0; r < n; r++)
        for (int i = 0; i < KG_NF; i++) {
            for (int j = 0; j < KG_NF; j++) a[i][j] += x[r * KG_NF + i] * x[r * KG_NF + j];
            a[i][KG_NF] += x[r * KG_NF + i] * y[r];
        }
    for (int i = 0; i < KG_NF; i++) a[i][i] += lambda;
    for (int c = 0; c < KG_NF; c++) {
        int p = c;
        for (int r = c + 1; r < KG_NF; r++)
            if (fabs(a[r][c]) > fabs(a[p][c])) p = r;
        for (int j = 0; j <= KG_NF; j++) {
            double t = a[c][j];
            a[c][j] = a[p][j];
            a[p][j] = t;
        }
        for (int r = 0; r < KG_NF; r++) {
            if (r == c || a[c][c] == 0) continue;
            double m = a[r][c] / a[c][c];
            for (int j = c; j <= KG_NF; j++) a[r][j] -= m * a[c][j];
        }
    }
    for (int i = 0; i < KG_NF; i++) w[i] = a[i][i] != 0 ? a[i][KG_NF] / a[i][i] : 0;
}

// Milliseconds per run of k (the best of `repeat`, each long enough to time); < 0 on failure.
static double measure(const weft_kg_kernel *k, const float *const *in, float *out, int repeat) {
    double t0 = weft_now_s();
    if (weft_kg_run_raw(k, in, out)) return -1;
    double once = weft_now_s() - t0;
    int iters = once > 2e-3 ? 1 : once < 2e-6 ? 1000 : (int)(2e-3 / once) + 1;
    double best = INFINITY;
    for (int r = 0; r < repeat; r++) {
        t0 = weft_now_s();
        for (int i = 0; i < iters; i++) weft_kg_run_raw(k, in, out);
        double t = (weft_now_s() - t0) / iters;
        best = t < best ? t : best;
    }
    return best * 1e3;
}

static double measure_sched(const weft_kg_sched *s, const float *const *in, float *out, int repeat) {
    weft_kg_kernel *k = weft_kg_build(s);
    if (!k) return -1;
    double ms = measure(k, in, out, repeat);
    weft_kg_kernel_free(k);
    return ms;
}

// ---- the log ----

static void log_key(const weft_kg *kg, char *key, size_t n) {
    snprintf(key, n, "%016llx-t%d", (unsigned long long)kg_def_hash(kg), weft_num_threads());
}

// The log's root object (a new one when the file does not exist); NULL with an error when it is unreadable.
static cJSON *log_read(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) {
            cJSON *root = cJSON_CreateObject();
            cJSON_AddNumberToObject(root, "weft_kgen_log", 1);
            cJSON_AddItemToObject(root, "entries", cJSON_CreateArray());
            return root;
        }
        return weft_error_null(WEFT_ERR_IO, "tuning log %s: %s", path, strerror(errno));
    }
    char *buf = NULL;
    long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (len >= 0 && len < (64 << 20) && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)len + 1)) &&
        fread(buf, 1, (size_t)len, f) == (size_t)len)
        buf[len] = 0;
    else free(buf), buf = NULL;
    fclose(f);
    if (!buf) return weft_error_null(WEFT_ERR_IO, "tuning log %s: cannot read it", path);
    cJSON *root = cJSON_Parse(buf);
    free(buf);
    if (!root || !cJSON_IsObject(root) || !cJSON_IsArray(cJSON_GetObjectItem(root, "entries"))) {
        cJSON_Delete(root);
        return weft_error_null(WEFT_ERR_FORMAT, "tuning log %s: not a weft tuning log (JSON with \"entries\")",
                               path);
    }
    return root;
}

static cJSON *log_find(cJSON *root, const char *key) {
    cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "entries")) {
        const cJSON *k = cJSON_GetObjectItem(e, "key");
        if (cJSON_IsString(k) && !strcmp(k->valuestring, key)) return e;
    }
    return NULL;
}

// A number in [lo, hi]; an integer unless the field is "ms" (a fraction would be read as another schedule).
static bool num(const cJSON *o, const char *name, double lo, double hi, double *v) {
    const cJSON *x = cJSON_GetObjectItem(o, name);
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= lo && x->valuedouble <= hi)) return false;
    if (strcmp(name, "ms") != 0 && x->valuedouble != floor(x->valuedouble)) return false;
    *v = x->valuedouble;
    return true;
}

// The configuration of a log entry; false if a field is missing or out of range.
static bool entry_cfg(const cJSON *e, kg_cfg *c, double *ms) {
    double t0, t1, r, rin, un, cw, par, pack = 0, tz = 0, at = 0;
    if (!num(e, "tile0", 1, 1 << 30, &t0) || !num(e, "tile1", 1, 1 << 30, &t1) || !num(e, "rtile", 1, 1 << 30, &r) ||
        !num(e, "rin", 0, 1, &rin) || !num(e, "unroll", 0, 1, &un) || !num(e, "cw", 0, 1, &cw) ||
        !num(e, "par", 0, 1, &par) || !num(e, "ms", 0, 1e12, ms) ||
        (cJSON_GetObjectItem(e, "pack") && !num(e, "pack", 0, 2, &pack)) || // (older logs have neither)
        (cJSON_GetObjectItem(e, "tz") && !num(e, "tz", 0, 1, &tz)) ||
        (cJSON_GetObjectItem(e, "at") && !num(e, "at", 0, KG_AT_OPTS - 1, &at)))
        return false;
    *c = (kg_cfg){{(int64_t)t0, (int64_t)t1}, (int64_t)r, (int)rin, (int)un, (int)cw, (int)par, (int)pack, (int)tz,
                  (int)at};
    return true;
}

static weft_status log_write(const char *path, cJSON *root, const weft_kg *kg, const char *key, const kg_cfg *c,
                             double ms, const char *sched) {
    cJSON *entries = cJSON_GetObjectItem(root, "entries");
    for (int i = cJSON_GetArraySize(entries) - 1; i >= 0; i--) {
        const cJSON *k = cJSON_GetObjectItem(cJSON_GetArrayItem(entries, i), "key");
        if (cJSON_IsString(k) && !strcmp(k->valuestring, key)) cJSON_DeleteItemFromArray(entries, i);
    }
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "key", key);
    cJSON_AddStringToObject(e, "kernel", kg->name);
    cJSON_AddNumberToObject(e, "tile0", (double)c->tile[0]);
    cJSON_AddNumberToObject(e, "tile1", (double)c->tile[1]);
    cJSON_AddNumberToObject(e, "rtile", (double)c->rtile);
    cJSON_AddNumberToObject(e, "rin", c->rin);
    cJSON_AddNumberToObject(e, "unroll", c->unroll);
    cJSON_AddNumberToObject(e, "cw", c->cw);
    cJSON_AddNumberToObject(e, "par", c->par);
    cJSON_AddNumberToObject(e, "pack", c->pack);
    cJSON_AddNumberToObject(e, "tz", c->tz);
    cJSON_AddNumberToObject(e, "at", c->at);
    cJSON_AddNumberToObject(e, "ms", ms);
    cJSON_AddStringToObject(e, "schedule", sched);
    cJSON_AddItemToArray(entries, e);
    char *text = cJSON_Print(root);
    if (!text) return weft_error(WEFT_ERR_OOM, "tuning log %s: out of memory", path);
    char tmp[4200];
    int fd = weft_io_open_temp(path, tmp, sizeof tmp);
    if (fd < 0) {
        free(text);
        return weft_last_status();
    }
    size_t n = strlen(text), done = 0;
    weft_status st = WEFT_OK;
    while (done < n) {
        ssize_t w = write(fd, text + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            st = weft_error(WEFT_ERR_IO, "tuning log %s: write failed: %s", path, strerror(errno));
            break;
        }
        done += (size_t)w;
    }
    free(text);
    return weft_io_commit_temp(fd, tmp, path, st);
}

// ---- the search ----

// Adds h to a set of 2^KG_SET_BITS slots (0 stands for empty); false if it was there.
static bool set_add(uint64_t *set, uint64_t h) {
    h |= 1;
    for (uint64_t i = h;; i++) {
        uint64_t *slot = &set[i & ((1u << KG_SET_BITS) - 1)];
        if (*slot == h) return false;
        if (!*slot) {
            *slot = h;
            return true;
        }
    }
}

// The schedule's text and its loops' trip counts (the text has the names, not the factors).
static uint64_t sched_hash(const weft_kg_sched *s) {
    char buf[512];
    weft_kg_sched_str(s, buf, sizeof buf);
    uint64_t h = kg_fnv(KG_FNV_SEED, buf, strlen(buf));
    for (int p = 0; p < s->n_order; p++) h = kg_fnv(h, &s->loop[s->order[p]].ext, sizeof(int64_t));
    return h;
}

// Every configuration of the template that makes a schedule, each schedule once and the default schedule
// left out (it is measured on its own); at most KG_MAX_SPACE. Returns the count, -1 when out of memory.
static int enumerate(const weft_kg *kg, kg_cfg *space) {
    int64_t opts[2][14] = {{0}}, ropts[12] = {0};
    int nopt[2] = {0, 0}, nr = 0, td[2];
    tile_dims(kg, td);
    for (int k = 0; k < 2; k++) {
        int64_t ext = dim_ext(kg, td[k]);
        static const int64_t tiles[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
        for (int i = 0; i < 12 && tiles[i] <= ext; i++) opts[k][nopt[k]++] = tiles[i];
        if (ext <= 64 && opts[k][nopt[k] - 1] != ext) opts[k][nopt[k]++] = ext;
    }
    int r = first_reduce(kg);
    int64_t rext = r >= 0 ? kg->axis[r].ext : 1;
    ropts[nr++] = 1; // not split
    for (int64_t t = 2; t <= 256 && t < rext; t *= 2) ropts[nr++] = t;
    uint64_t *seen = calloc((size_t)1 << KG_SET_BITS, sizeof *seen);
    weft_kg_sched *d = weft_kg_schedule(kg);
    if (!seen || !d) {
        free(seen);
        weft_kg_sched_free(d);
        return -1;
    }
    set_add(seen, sched_hash(d));
    weft_kg_sched_free(d);
    int n = 0, npar = weft_num_threads() > 1 ? 2 : 1, nat = kg->n_stage ? KG_AT_OPTS : 1;
    int64_t total = (int64_t)nat * nopt[0] * nopt[1] * nr * 2 * 2 * 2 * npar;
    for (int64_t q = 0; q < total && n < KG_MAX_SPACE - KG_REFINE; q++) { // par innermost, the stages' place outermost
        int64_t v = q;
        kg_cfg cfg = {.par = (int)(v % npar)};
        v /= npar;
        cfg.cw = (int)(v % 2), v /= 2;
        cfg.unroll = (int)(v % 2), v /= 2;
        cfg.rin = (int)(v % 2), v /= 2;
        int c = (int)(v % nr);
        v /= nr;
        if (cfg.rin && c == 0) continue; // (an unsplit reduction has no inner loop to place)
        cfg.rtile = ropts[c];
        cfg.tile[1] = opts[1][v % nopt[1]], v /= nopt[1];
        cfg.tile[0] = opts[0][v % nopt[0]], v /= nopt[0];
        cfg.at = (int)v;
        weft_kg_sched *s = apply(kg, &cfg);
        if (s && set_add(seen, sched_hash(s))) space[n++] = cfg;
        weft_kg_sched_free(s);
    }
    free(seen);
    return n;
}

// What a search has measured: the configurations, their times (NAN: not measured; < 0: failed), the cost model's
// data, the best so far.
typedef struct tune_state {
    const weft_kg *kg;
    const kg_cfg *space;
    double *ms, *x, *y;
    const float *const *in;
    float *out;
    int repeat, n_fit, tried, best_i;
    weft_kg_tune_report *rep;
    char why[512]; // the first build that failed, for the error if none builds
} tune_state;

// Measures the configurations pick[0..np): compiled in parallel (the compiler is most of a trial's time), then
// run one at a time.
static void measure_batch(tune_state *ts, const int *pick, int np) {
    weft_kg_kernel *built[KG_REFINE] = {0};
#pragma omp parallel for num_threads(np) schedule(dynamic)
    for (int q = 0; q < np; q++) {
        weft_kg_sched *s = apply(ts->kg, &ts->space[pick[q]]);
        built[q] = s ? weft_kg_build(s) : NULL;
        weft_kg_sched_free(s);
        if (!built[q]) {
#pragma omp critical(kgen_tune_why)
            if (!ts->why[0]) snprintf(ts->why, sizeof ts->why, "%s", weft_last_error());
        }
    }
    for (int q = 0; q < np; q++) {
        int i = pick[q];
        ts->ms[i] = built[q] ? measure(built[q], ts->in, ts->out, ts->repeat) : -1;
        weft_kg_kernel_free(built[q]);
        ts->tried++;
        if (ts->ms[i] < 0) {
            weft_clear_error();
            continue;
        }
        ts->rep->measured++;
        features(ts->kg, &ts->space[i], &ts->x[ts->n_fit * KG_NF]);
        ts->y[ts->n_fit++] = log(ts->ms[i] > 1e-9 ? ts->ms[i] : 1e-9);
        if (ts->best_i < 0 || ts->ms[i] < ts->ms[ts->best_i]) ts->best_i = i;
    }
}

// The first level: batches of the cost model's best predictions plus one random pick (all random before the
// model has data), until `limit` trials.
static void search(tune_state *ts, int n, int limit, int batch, uint64_t *rng) {
    while (ts->tried < limit && ts->tried < n) {
        int pick[4], np = 0;
        double w[KG_NF] = {0};
        if (ts->n_fit >= batch) ridge(ts->n_fit, ts->x, ts->y, 1e-2, w);
        for (int b = 0; b < batch && ts->tried + np < limit && ts->tried + np < n; b++) {
            int c = -1;
            if (ts->n_fit >= batch && b < batch - 1) {
                double bp = INFINITY;
                for (int i = 0; i < n; i++) {
                    bool taken = !isnan(ts->ms[i]);
                    for (int q = 0; q < np; q++) taken |= pick[q] == i;
                    if (taken) continue;
                    double f[KG_NF], p = 0;
                    features(ts->kg, &ts->space[i], f);
                    for (int j = 0; j < KG_NF; j++) p += w[j] * f[j];
                    if (p < bp) bp = p, c = i;
                }
            }
            for (int tries = 0; c < 0 && tries < 64 * n; tries++) {
                int i = (int)(splitmix(rng) % (uint64_t)n);
                bool taken = !isnan(ts->ms[i]);
                for (int q = 0; q < np; q++) taken |= pick[q] == i;
                if (!taken) c = i;
            }
            if (c < 0) break;
            pick[np++] = c;
        }
        if (!np) break;
        measure_batch(ts, pick, np);
    }
}

weft_kg_sched *weft_kg_tune(const weft_kg *kg, const weft_kg_tune_opts *opts, weft_kg_tune_report *report) {
    if (!kg || !kg->defined) return weft_error_null(WEFT_ERR_ARG, "kgen: tune of an undefined kernel");
    weft_kg_tune_opts o = opts ? *opts : (weft_kg_tune_opts){.trials = 32};
    if (o.trials < 0 || o.trials > 100000 || o.repeat < 0 || o.repeat > 1000)
        return weft_error_null(WEFT_ERR_ARG, "kgen '%s': tune with %d trials, %d repeats", kg->name, o.trials, o.repeat);
    if (!o.repeat) o.repeat = 3;
    weft_kg_tune_report rep = {.default_ms = -1};
    char key[64];
    log_key(kg, key, sizeof key);
    cJSON *lj = NULL;
    if (o.log) {
        if (!(lj = log_read(o.log))) { // its message, naming the kernel too
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", weft_last_error());
            return weft_error_null(weft_last_status(), "kgen '%s': %s", kg->name, msg);
        }
        const cJSON *e = log_find(lj, key);
        kg_cfg c;
        double ms;
        if (e) {
            weft_kg_sched *s = entry_cfg(e, &c, &ms) ? apply(kg, &c) : NULL;
            cJSON_Delete(lj);
            if (!s)
                return weft_error_null(WEFT_ERR_FORMAT, "kgen '%s': tuning log %s: the entry %s is not a schedule of it",
                                       kg->name, o.log, key);
            rep.from_log = true;
            rep.best_ms = ms;
            weft_kg_sched_str(s, rep.best, sizeof rep.best);
            if (report) *report = rep;
            return s;
        }
    }
    if (o.trials == 0) {
        cJSON_Delete(lj);
        return weft_error_null(WEFT_ERR_STATE, "kgen '%s': no entry in the tuning log and no trials to make one",
                               kg->name);
    }
    kg_cfg *space = malloc(KG_MAX_SPACE * sizeof *space);
    double *ms = malloc(KG_MAX_SPACE * sizeof *ms), *x = malloc((size_t)o.trials * KG_NF * sizeof *x),
           *y = malloc((size_t)o.trials * sizeof *y);
    float *in[WEFT_KG_MAX_INPUTS] = {0}, *out = malloc((size_t)kg_out_numel(kg) * 4);
    bool ok = space && ms && x && y && out;
    uint64_t rng = o.seed ^ 0x5eed;
    for (int i = 0; ok && i < kg->n_in; i++) {
        int64_t n = kg_in_numel(kg, i);
        ok = (in[i] = malloc((size_t)n * 4)) != NULL;
        for (int64_t j = 0; ok && j < n; j++) in[i][j] = (float)((double)(splitmix(&rng) >> 11) * 0x1p-52 - 1);
    }
    weft_kg_sched *best = NULL;
    if (!ok) weft_error(WEFT_ERR_OOM, "kgen '%s': out of memory tuning", kg->name);
    int n = ok ? enumerate(kg, space) : 0;
    if (n < 0) {
        ok = false;
        n = 0;
        weft_error(WEFT_ERR_OOM, "kgen '%s': out of memory tuning", kg->name);
    }
    rep.candidates = n;
    for (int i = 0; i < n; i++) ms[i] = NAN; // NAN: not measured; < 0: failed
    const float *const *cin = (const float *const *)in;
    tune_state ts = {.kg = kg, .space = space, .ms = ms, .x = x, .y = y, .in = cin, .out = out, .repeat = o.repeat,
                     .rep = &rep, .best_i = -1};
    if (ok) {
        weft_kg_sched *d = weft_kg_schedule(kg);
        rep.default_ms = d ? measure_sched(d, cin, out, o.repeat) : -1;
        weft_kg_sched_free(d);
    }
    int batch = o.trials >= 8 ? 4 : 2;
    int refine = o.trials >= 12 ? KG_REFINE : 0; // the last trials go to the second level
    if (ok) search(&ts, n, o.trials - refine, batch, &rng);
    // the second level (Ansor's annotation after its sketch): the best two structures with their operands
    // packed (at the last outer loop, at the reduction's outer loop) and their tiles as the GEMM micro-kernel,
    // the first `refine` of these that the template can make
    int second = ts.best_i;
    for (int i = 0; i < n; i++)
        if (ms[i] >= 0 && i != ts.best_i && (second == ts.best_i || ms[i] < ms[second])) second = i;
    static const int variant[][2] = {{1, 0}, {1, 1}, {2, 0}, {0, 1}, {2, 1}}; // (pack, tz)
    int pick[KG_REFINE], np = 0;
    for (int r = 0; ok && ts.best_i >= 0 && r < (second != ts.best_i ? 2 : 1); r++)
        for (int v = 0; v < 5 && np < refine; v++) {
            kg_cfg c = space[r ? second : ts.best_i];
            c.pack = variant[v][0];
            c.tz = variant[v][1];
            weft_kg_sched *s = apply(kg, &c);
            weft_kg_sched_free(s);
            if (!s) continue;
            space[n] = c;
            ms[n] = NAN;
            pick[np++] = n++;
        }
    if (np) measure_batch(&ts, pick, np);
    if (ok) search(&ts, n, o.trials, batch, &rng); // what the second level left
    int best_i = ts.best_i;
    if (ok && best_i < 0)
        weft_error(WEFT_ERR_UNSUPPORTED, "kgen '%s': no schedule could be built and run%s%s", kg->name,
                   ts.why[0] ? "; the first failure: " : "", ts.why);
    else if (ok) {
        best = apply(kg, &space[best_i]);
        rep.best_ms = ms[best_i];
        weft_kg_sched_str(best, rep.best, sizeof rep.best);
        if (lj && log_write(o.log, lj, kg, key, &space[best_i], ms[best_i], rep.best)) {
            snprintf(rep.log_error, sizeof rep.log_error, "%s", weft_last_error()); // the search is kept
            weft_clear_error();
        }
    }
    cJSON_Delete(lj);
    for (int i = 0; i < kg->n_in; i++) free(in[i]);
    free(out);
    free(space);
    free(ms);
    free(x);
    free(y);
    if (best && report) *report = rep;
    return best;
}
