// libFuzzer's driver for a harness's fuzz_one (fuzz.h): `make fuzz` links
// each tests/fuzz/fuzz_<name>.c with this file and -fsanitize=fuzzer.
#include "fuzz.h" // first: it defines _GNU_SOURCE (memfd_create)

#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    // No cached blocks: a use after free must reach ASan, not a reused block.
    setenv("WEFT_NO_CACHING", "1", 1);
    weft_set_num_threads(1); // one input at a time, the same way every time
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    weft_clear_error();
    fuzz_one(data, size);
    return 0;
}
