// The weft command-line tool.
//   weft version          print the version
//   weft info             devices, threads, memory
//   weft ops              list the op table
#include <stdio.h>
#include <string.h>
#include <weft.h>

static int usage(void) {
    fprintf(stderr, "usage: weft <version|info|ops>\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    const char *cmd = argv[1];
    if (!strcmp(cmd, "version")) {
        printf("weft %s\n", weft_version());
        return 0;
    }
    if (!strcmp(cmd, "info")) {
        printf("weft %s\n", weft_version());
        printf("threads: %d\n", weft_num_threads());
        printf("devices: cpu x%d, cuda x%d\n", weft_device_count(WEFT_CPU), weft_device_count(WEFT_CUDA));
        weft_memory_stats st;
        if (weft_memory_stats_get(WEFT_DEVICE_CPU, &st) == WEFT_OK)
            printf("cpu memory: %zu bytes in use, %zu cached, peak %zu\n", st.bytes_in_use, st.bytes_cached,
                   st.peak_bytes_in_use);
        return 0;
    }
    if (!strcmp(cmd, "ops")) {
        for (int i = 0; i < weft_op_count(); i++) printf("%s\n", weft_op_name(i));
        return 0;
    }
    fprintf(stderr, "weft: unknown command '%s'\n", cmd);
    return usage();
}
