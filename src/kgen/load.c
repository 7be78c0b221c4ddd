// Building a generated kernel: the C compiler run on the source in a private
// temporary directory, the shared object loaded with dlopen (the directory is
// removed once it is loaded), and the checks a run makes on its tensors.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kgen_impl.h"

extern char **environ;

typedef int (*kg_fn)(const float *const *in, float *out, int nthreads); // 0, or 1: out of memory

struct weft_kg_kernel {
    void *dl;
    kg_fn fn;
    char name[32];
    int n_in, n_out;
    kg_input in[WEFT_KG_MAX_INPUTS];
    int64_t out[WEFT_KG_MAX_AXES];
};

static const char *cc_name(void) {
    const char *cc = getenv("WEFT_KGEN_CC");
    return cc && *cc ? cc : "cc";
}

// Runs argv with stdout and stderr into log (NULL: /dev/null); returns the exit status, -1 if it did not run
// (errno set).
static int run_tool(char *const *argv, const char *log) {
    posix_spawn_file_actions_t fa;
    if (posix_spawn_file_actions_init(&fa)) return -1;
    posix_spawn_file_actions_addopen(&fa, 1, log ? log : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int e = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e) {
        errno = e;
        return -1;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

bool weft_kg_available(void) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static char asked[256]; // the compiler the answer is for
    static bool yes;
    const char *cc = cc_name();
    pthread_mutex_lock(&mu);
    if (strcmp(asked, cc) != 0) {
        char *argv[] = {(char *)cc, "--version", NULL};
        yes = strlen(cc) < sizeof asked && run_tool(argv, NULL) == 0;
        snprintf(asked, sizeof asked, "%s", strlen(cc) < sizeof asked ? cc : "");
    }
    bool r = yes;
    pthread_mutex_unlock(&mu);
    return r;
}

// The first line of the compiler's log that says "error", else its first line.
static void first_error(const char *log, char *buf, size_t n) {
    buf[0] = 0;
    FILE *f = fopen(log, "r");
    if (!f) return;
    char line[512];
    bool got = false;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!got) snprintf(buf, n, "%.280s", line), got = true;
        if (strstr(line, "error")) {
            snprintf(buf, n, "%.280s", line);
            break;
        }
    }
    fclose(f);
}

static weft_status write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return weft_error(WEFT_ERR_IO, "kgen: cannot write %s: %s", path, strerror(errno));
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    ok &= fclose(f) == 0;
    return ok ? WEFT_OK : weft_error(WEFT_ERR_IO, "kgen: cannot write %s", path);
}

weft_kg_kernel *weft_kg_build(const weft_kg_sched *s) {
    if (!s) return weft_error_null(WEFT_ERR_ARG, "kgen: build of a NULL schedule");
    const weft_kg *kg = s->kg;
    char *src = weft_kg_source(s);
    if (!src) return NULL;
    const char *tmp = getenv("TMPDIR");
    char dir[512], c_path[600], so_path[600], log_path[600];
    snprintf(dir, sizeof dir, "%s/weft-kgen-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        free(src);
        return weft_error_null(WEFT_ERR_IO, "kgen '%s': cannot make a directory like %s: %s", kg->name, dir,
                               strerror(errno));
    }
    snprintf(c_path, sizeof c_path, "%s/%s.c", dir, kg->name);
    snprintf(so_path, sizeof so_path, "%s/%s.so", dir, kg->name);
    snprintf(log_path, sizeof log_path, "%s/cc.log", dir);
    weft_kg_kernel *k = NULL;
    weft_status st = write_file(c_path, src);
    free(src);
    if (!st) {
        const char *cc = cc_name();
        char *argv[] = {(char *)cc, "-O3", "-march=native", "-std=gnu17", "-fPIC", "-shared", "-fopenmp",
                        "-fno-trapping-math", "-fno-math-errno", "-o", so_path, c_path, "-lm", NULL};
        int rc = run_tool(argv, log_path);
        if (rc != 0) {
            char msg[300];
            if (rc < 0) snprintf(msg, sizeof msg, "%s", strerror(errno));
            else first_error(log_path, msg, sizeof msg);
            st = weft_error(WEFT_ERR_UNSUPPORTED, "kgen '%s': the C compiler '%s' failed%s%s (WEFT_KGEN_CC names another)",
                            kg->name, cc, msg[0] ? ": " : "", msg);
        }
    }
    if (!st) {
        k = calloc(1, sizeof *k);
        void *dl = k ? dlopen(so_path, RTLD_NOW | RTLD_LOCAL) : NULL;
        void *fn = dl ? dlsym(dl, "weft_kg_main") : NULL;
        if (!fn) {
            const char *why = k ? dlerror() : "out of memory";
            weft_error(WEFT_ERR_IO, "kgen '%s': cannot load %s: %s", kg->name, so_path, why ? why : "no weft_kg_main");
            if (dl) dlclose(dl);
            free(k);
            k = NULL;
        } else {
            k->dl = dl;
            *(void **)&k->fn = fn;
            snprintf(k->name, sizeof k->name, "%s", kg->name);
            k->n_in = kg->n_in;
            memcpy(k->in, kg->in, sizeof k->in);
            k->n_out = weft_kg_out_shape(kg, k->out);
        }
    }
    unlink(c_path);
    unlink(so_path);
    unlink(log_path);
    rmdir(dir);
    return k;
}

void weft_kg_kernel_free(weft_kg_kernel *k) {
    if (!k) return;
    dlclose(k->dl);
    free(k);
}

weft_status weft_kg_run_raw(const weft_kg_kernel *k, const float *const *in, float *out) {
    if (!k || !in || !out) return weft_error(WEFT_ERR_ARG, "kgen: run given NULL");
    for (int i = 0; i < k->n_in; i++)
        if (!in[i]) return weft_error(WEFT_ERR_ARG, "kgen '%s': input %s is NULL", k->name, k->in[i].name);
    return k->fn(in, out, weft_num_threads())
               ? weft_error(WEFT_ERR_OOM, "kgen '%s': out of memory for its stages' buffers", k->name)
               : WEFT_OK;
}

// t is a contiguous f32 CPU tensor of the given shape; what names it in errors.
static weft_status check_tensor(const weft_kg_kernel *k, const weft_tensor *t, const char *what, int nd,
                                const int64_t *sz) {
    if (!t) return weft_error(WEFT_ERR_ARG, "kgen '%s': %s is NULL", k->name, what);
    if (weft_tensor_dtype(t) != WEFT_F32)
        return weft_error(WEFT_ERR_DTYPE, "kgen '%s': %s is %s (f32 only)", k->name, what,
                          weft_dtype_name(weft_tensor_dtype(t)));
    if (weft_tensor_device(t).type != WEFT_CPU)
        return weft_error(WEFT_ERR_DEVICE, "kgen '%s': %s is not on the CPU", k->name, what);
    if (!weft_tensor_is_contiguous(t))
        return weft_error(WEFT_ERR_ARG, "kgen '%s': %s is not contiguous", k->name, what);
    bool same = weft_tensor_ndim(t) == nd;
    for (int d = 0; same && d < nd; d++) same = weft_tensor_sizes(t)[d] == sz[d];
    if (!same) return weft_error(WEFT_ERR_SHAPE, "kgen '%s': %s has another shape than the kernel's", k->name, what);
    return WEFT_OK;
}

weft_status weft_kg_run(const weft_kg_kernel *k, int n_in, weft_tensor *const *in, weft_tensor *out) {
    if (!k) return weft_error(WEFT_ERR_ARG, "kgen: run of a NULL kernel");
    if (n_in != k->n_in || (n_in && !in))
        return weft_error(WEFT_ERR_ARG, "kgen '%s': run with %d inputs (it takes %d)", k->name, n_in, k->n_in);
    const float *ptr[WEFT_KG_MAX_INPUTS];
    weft_status st = check_tensor(k, out, "the output", k->n_out, k->out);
    if (st) return st;
    const char *o = weft_tensor_data(out);
    size_t on = (size_t)weft_tensor_numel(out) * 4;
    for (int i = 0; i < n_in; i++) {
        char what[48];
        snprintf(what, sizeof what, "input %s", k->in[i].name);
        if ((st = check_tensor(k, in[i], what, k->in[i].ndim, k->in[i].size))) return st;
        ptr[i] = weft_tensor_data(in[i]);
        const char *p = (const char *)ptr[i];
        size_t pn = (size_t)weft_tensor_numel(in[i]) * 4;
        if (p < o + on && o < p + pn)
            return weft_error(WEFT_ERR_ARG, "kgen '%s': the output overlaps input %s", k->name, k->in[i].name);
    }
    return weft_kg_run_raw(k, ptr, weft_tensor_data(out));
}
