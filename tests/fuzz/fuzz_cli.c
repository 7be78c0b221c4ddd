// Harness: the weft CLI's command-line parsing (tools/weft.c, built here
// without its main: weft_cli_parse_only runs everything `weft ...` does
// before it starts work, the model file included, and nothing after). The
// bytes are the arguments after "weft", separated by NUL bytes. "@mlp",
// "@gpt" and "@bad" stand for a classifier's, a language model's and a
// broken model file, written once into a scratch directory.
#include "fuzz.h"

int weft_cli_parse_only(int argc, char **argv, FILE *err); // tools/weft.c

#define MAX_ARGS 64

static const char *const k_files[][2] = {
    {"@mlp", "[net]\ndataset = fmnist\nbatch = 8\n[flatten]\n[linear]\nout = 16\n[relu]\n[linear]\nout = 10\n"},
    {"@gpt", "[net]\ndataset = kjv\ncontext = 16\n[embedding]\ndim = 8\n[transformer]\nheads = 2\n[linear]\nout = vocab\n"},
    {"@bad", "[net]\ndataset = fmnist\nbogus = 1\n"},
};
#define N_FILES (sizeof k_files / sizeof k_files[0])

weft_status fuzz_one(const uint8_t *data, size_t size) {
    static char paths[N_FILES][128];
    if (!paths[0][0]) {
        const char *dir = fuzz_tmpdir();
        FUZZ_ASSERT(dir, "cannot make a scratch directory");
        for (size_t k = 0; k < N_FILES; k++) {
            snprintf(paths[k], sizeof paths[k], "%s/%s.cfg", dir, k_files[k][0] + 1);
            FILE *f = fopen(paths[k], "w");
            FUZZ_ASSERT(f, "cannot write %s", paths[k]);
            fputs(k_files[k][1], f);
            fclose(f);
        }
    }
    // argv: "weft", then the NUL-separated arguments (copied: the parser keeps pointers into them)
    char *buf = malloc(size + 1), *argv[MAX_ARGS + 1];
    if (!buf) return WEFT_ERR_OOM;
    memcpy(buf, data, size);
    buf[size] = 0;
    int argc = 0;
    argv[argc++] = "weft";
    for (char *p = buf; p <= buf + size && argc < MAX_ARGS; p += strlen(p) + 1) {
        if (p == buf + size && size) break; // the terminator after a trailing NUL
        argv[argc] = p;
        for (size_t k = 0; k < N_FILES; k++)
            if (!strcmp(p, k_files[k][0])) argv[argc] = paths[k];
        argc++;
    }
    argv[argc] = NULL;
    int threads = weft_num_threads();
    char *msg = NULL; // what the CLI would print on stderr
    size_t msg_len = 0;
    FILE *err = open_memstream(&msg, &msg_len);
    FUZZ_ASSERT(err, "open_memstream failed");
    int rc = weft_cli_parse_only(argc, argv, err);
    fclose(err);
    FUZZ_ASSERT(rc == 0 || rc == 1 || rc == 2, "exit status %d", rc);
    FUZZ_ASSERT(weft_num_threads() == threads, "parsing changed the thread count");
    FUZZ_ASSERT(rc == 0 || msg_len > 0, "exit status %d without a message", rc);
    weft_status st = rc == 0 ? WEFT_OK : rc == 2 ? WEFT_ERR_ARG : WEFT_ERR_FORMAT;
    if (st) weft_error(st, "exit %d: %s", rc, msg);
    free(msg);
    free(buf);
    return st;
}
