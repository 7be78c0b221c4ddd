// `weft launch`: runs a command on N ranks under mpirun and restarts the job
// from its latest complete checkpoint when a rank dies.
//
//   weft launch -n N [--servers S] [--max-restarts R] [--hostfile F] -- weft train MODEL.cfg [...]
//
// mpirun is a child process; its stderr is read line by line (and forwarded
// unchanged) so that the launcher can name the rank that died and why, from
// OpenMPI's own report. Only deaths by a signal (kill -9, OOM killer, a
// crash) or a lost node are restarted: a rank that exits with an error
// status would fail the same way again.
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int weft_cli_launch(int argc, char **argv);

static int launch_usage(void) {
    fprintf(stderr, "usage: weft launch -n N [--servers S] [--max-restarts R] [--hostfile F] -- weft train MODEL.cfg [...]\n");
    return 2;
}

// Why a job failed, from mpirun's stderr.
typedef struct failure {
    int rank;          // -1: not known
    long pid;          // 0: not known
    char node[128];
    int signal;        // > 0: the rank died on this signal
    char signame[64];
    int exit_code;     // >= 0: the rank exited with this status
    bool lost_node;    // a remote daemon went away
} failure;

// OpenMPI 4 prints, among its framed help messages:
//   mpirun noticed that process rank 1 with PID 123 on node x exited on signal 9 (Killed).
//   Process name: [[18399,1],1]        (then)   Exit code:    3
//   MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD with errorcode 5.
//   ORTE has lost communication with a remote daemon.
static void parse_line(const char *line, failure *f) {
    const char *p;
    if ((p = strstr(line, "noticed that process rank "))) {
        int rank, sig;
        long pid;
        char node[128] = "", name[64] = "";
        int n = sscanf(p, "noticed that process rank %d with PID %ld on node %127s exited on signal %d (%63[^)])", &rank,
                       &pid, node, &sig, name);
        if (n >= 4) {
            f->rank = rank, f->pid = pid, f->signal = sig;
            snprintf(f->node, sizeof f->node, "%s", node);
            snprintf(f->signame, sizeof f->signame, "%s", n == 5 ? name : "");
        }
    } else if ((p = strstr(line, "Process name: [["))) {
        int a, b, rank;
        if (sscanf(p, "Process name: [[%d,%d],%d]", &a, &b, &rank) == 3 && f->signal == 0) f->rank = rank;
    } else if ((p = strstr(line, "Exit code:"))) {
        int code;
        if (sscanf(p, "Exit code: %d", &code) == 1 && f->signal == 0) f->exit_code = code;
    } else if ((p = strstr(line, "MPI_ABORT was invoked on rank "))) {
        int rank, code; // the error code may be on the next line
        int n = sscanf(p, "MPI_ABORT was invoked on rank %d in communicator %*s with errorcode %d", &rank, &code);
        if (n >= 1 && f->signal == 0) f->rank = rank, f->exit_code = n == 2 ? code : f->exit_code;
    } else if ((p = strstr(line, "with errorcode "))) {
        int code;
        if (sscanf(p, "with errorcode %d", &code) == 1 && f->signal == 0 && f->rank >= 0) f->exit_code = code;
    } else if (strstr(line, "lost communication with a remote daemon") || strstr(line, "An ORTE daemon has unexpectedly failed")) {
        f->lost_node = true;
    }
}

static volatile sig_atomic_t g_child, g_interrupted;

// Ctrl-C / kill of the launcher goes to mpirun (which ends every rank), and
// the job is not restarted.
static void on_signal(int sig) {
    g_interrupted = sig;
    if (g_child > 0) kill((pid_t)g_child, sig);
}

// Runs mpirun once; returns its exit status (128 + signal if it was killed).
static int run_once(char **args, failure *f) {
    int fds[2];
    if (pipe(fds) != 0) {
        fprintf(stderr, "weft launch: pipe: %s\n", strerror(errno));
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "weft launch: fork: %s\n", strerror(errno));
        close(fds[0]), close(fds[1]);
        return 1;
    }
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        close(fds[1]);
        execvp(args[0], args);
        fprintf(stderr, "weft launch: cannot run %s: %s\n", args[0], strerror(errno));
        _exit(127);
    }
    g_child = pid;
    close(fds[1]);
    FILE *in = fdopen(fds[0], "r");
    char line[4096];
    while (in && fgets(line, sizeof line, in)) {
        fputs(line, stderr);
        fflush(stderr);
        parse_line(line, f);
    }
    if (in) fclose(in);
    else close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    g_child = 0;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

static void describe(const failure *f, int rc, char *buf, size_t n) {
    char who[256];
    if (f->rank >= 0) {
        int k = snprintf(who, sizeof who, "rank %d", f->rank);
        // OpenMPI reports PID 0 for some processes (scripts): leave it out then
        if (f->pid > 0 && f->node[0]) snprintf(who + k, sizeof who - (size_t)k, " (pid %ld on %s)", f->pid, f->node);
        else if (f->node[0]) snprintf(who + k, sizeof who - (size_t)k, " (on %s)", f->node);
    } else {
        snprintf(who, sizeof who, "a rank");
    }
    if (f->signal > 0)
        snprintf(buf, n, "%s died on signal %d%s%s%s", who, f->signal, f->signame[0] ? " (" : "", f->signame,
                 f->signame[0] ? ")" : "");
    else if (f->lost_node)
        snprintf(buf, n, "a node was lost (its daemon stopped answering)");
    else if (f->exit_code >= 0)
        snprintf(buf, n, "%s exited with status %d", who, f->exit_code);
    else
        snprintf(buf, n, "the job failed with status %d", rc);
}

static bool positive_int(const char *opt, const char *v, int min, int *out) {
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || end == v || *end || x < min || x > 100000) {
        fprintf(stderr, "weft launch: %s: expected an integer >= %d, got '%s'\n", opt, min, v ? v : "");
        return false;
    }
    *out = (int)x;
    return true;
}

// Environment that the ranks need on every node (mpirun passes the whole
// environment only to local ranks): weft's own settings, threads, sanitizers.
static bool forwarded(const char *kv) {
    static const char *const prefixes[] = {"WEFT_", "OMP_", "OPENBLAS_", "ASAN_", "LSAN_", "UBSAN_", "PATH=", "LD_LIBRARY_PATH="};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (!strncmp(kv, prefixes[i], strlen(prefixes[i]))) return strncmp(kv, "WEFT_LAUNCH_ATTEMPT=", 20) != 0;
    return false;
}

int weft_cli_launch(int argc, char **argv) {
    int np = 0, servers = -1, max_restarts = 0, i = 0;
    const char *hostfile = NULL;
    for (; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (a[0] != '-') break; // the command starts
        if (!strcmp(a, "-n") || !strcmp(a, "-np") || !strcmp(a, "--np")) {
            if (!positive_int(a, v, 1, &np)) return 2;
        } else if (!strcmp(a, "--servers")) {
            if (!positive_int(a, v, 1, &servers)) return 2;
        } else if (!strcmp(a, "--max-restarts")) {
            if (!positive_int(a, v, 0, &max_restarts)) return 2;
        } else if (!strcmp(a, "--hostfile")) {
            if (!v) {
                fprintf(stderr, "weft launch: option '--hostfile' needs a value\n");
                return 2;
            }
            if (access(v, R_OK) != 0) {
                fprintf(stderr, "weft launch: --hostfile %s: %s\n", v, strerror(errno));
                return 2;
            }
            hostfile = v;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            launch_usage();
            return 0;
        } else {
            fprintf(stderr, "weft launch: unknown option '%s' (see weft launch --help)\n", a);
            return 2;
        }
        i++;
    }
    if (np == 0) {
        fprintf(stderr, "weft launch: -n N (the number of ranks) is needed\n");
        return 2;
    }
    if (i >= argc) {
        fprintf(stderr, "weft launch: a command is needed after '--' (e.g. weft train models/logreg.cfg)\n");
        return 2;
    }
    if (servers >= np) {
        fprintf(stderr, "weft launch: --servers %d leaves no worker among %d ranks\n", servers, np);
        return 2;
    }
    char **cmd = argv + i;
    int ncmd = argc - i;
    bool has_ckpt = false, has_resume = false;
    for (int k = 1; k < ncmd; k++) {
        has_ckpt |= !strcmp(cmd[k], "--ckpt-dir");
        has_resume |= !strcmp(cmd[k], "--resume");
    }
    // "weft" means this very executable, so the ranks run the same build
    // whether or not it is on the PATH.
    static char self[4096];
    const char *prog = cmd[0];
    if (!strcmp(prog, "weft")) {
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        if (len > 0) self[len] = 0, prog = self;
    }
    const char *mpirun = getenv("WEFT_MPIRUN");
    if (!mpirun || !*mpirun) mpirun = "mpirun";

    int n_env = 0;
    for (char **e = environ; *e; e++) n_env += forwarded(*e);
    size_t cap = (size_t)(ncmd + 2 * n_env + 32);
    char **args = calloc(cap, sizeof *args);
    char **env_names = calloc((size_t)n_env + 1, sizeof *env_names);
    if (!args || !env_names) {
        free(args), free(env_names);
        fprintf(stderr, "weft launch: out of memory\n");
        return 1;
    }
    char np_s[16], servers_s[16], attempt_s[48];
    snprintf(np_s, sizeof np_s, "%d", np);
    snprintf(servers_s, sizeof servers_s, "%d", servers);
    int k = 0;
    args[k++] = (char *)mpirun;
    if (getuid() == 0) args[k++] = "--allow-run-as-root";
    args[k++] = "--oversubscribe"; // more ranks than cores on a small machine
    args[k++] = "--bind-to";
    args[k++] = "none"; // ranks use OpenMP threads; pinning each to one core would serialise them
    if (hostfile) args[k++] = "--hostfile", args[k++] = (char *)hostfile;
    args[k++] = "-np";
    args[k++] = np_s;
    int ne = 0;
    for (char **e = environ; *e; e++)
        if (forwarded(*e)) {
            size_t len = strcspn(*e, "=");
            env_names[ne] = strndup(*e, len);
            if (env_names[ne]) args[k++] = "-x", args[k++] = env_names[ne++];
        }
    args[k++] = "-x";
    args[k++] = attempt_s; // the ranks know which attempt they are (tests kill only the first)
    args[k++] = (char *)prog;
    for (int j = 1; j < ncmd; j++) args[k++] = cmd[j];
    if (servers > 0) args[k++] = "--servers", args[k++] = servers_s;
    int resume_at = k; // "--resume" goes here from the first restart on
    args[k] = NULL;

    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = 0;
    for (int attempt = 0;; attempt++) {
        snprintf(attempt_s, sizeof attempt_s, "WEFT_LAUNCH_ATTEMPT=%d", attempt);
        if (attempt > 0 && has_ckpt && !has_resume) args[resume_at] = "--resume", args[resume_at + 1] = NULL;
        failure f = {.rank = -1, .exit_code = -1};
        rc = run_once(args, &f);
        if (rc == 0 || g_interrupted) break;
        char why[512];
        describe(&f, rc, why, sizeof why);
        bool restartable = f.signal > 0 || f.lost_node;
        if (!restartable) {
            fprintf(stderr, "weft launch: %s; not restarting (a rank that fails with an error would fail again)\n", why);
            break;
        }
        if (attempt >= max_restarts) {
            fprintf(stderr, "weft launch: %s; no restarts left (--max-restarts %d)\n", why, max_restarts);
            break;
        }
        if (has_ckpt)
            fprintf(stderr, "weft launch: %s; restarting from the latest complete checkpoint (restart %d of %d)\n", why,
                    attempt + 1, max_restarts);
        else
            fprintf(stderr, "weft launch: %s; restarting from scratch: the command has no --ckpt-dir (restart %d of %d)\n",
                    why, attempt + 1, max_restarts);
    }
    for (int j = 0; j < ne; j++) free(env_names[j]);
    free(env_names);
    free(args);
    return rc;
}
