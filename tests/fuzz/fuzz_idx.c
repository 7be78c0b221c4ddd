// Harness: IDX files, plain or gzipped (weft_idx_load, src/data/idx.c). The
// bytes are the file; it is loaded with any number of dims and as a 1-d and
// a 3-d file (what Fashion-MNIST's labels and images are read as).
#include "fuzz.h"

weft_status fuzz_one(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, data, size);
    if (!path) return WEFT_ERR_IO;
    weft_tensor *t = weft_idx_load(path, -1);
    weft_status st = t ? WEFT_OK : weft_last_status();
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", weft_last_error());
    if (t) {
        FUZZ_ASSERT(weft_tensor_dtype(t) == WEFT_U8 && weft_tensor_ndim(t) >= 1, "an IDX tensor of the wrong kind");
        int64_t n = weft_tensor_numel(t), sum = 0;
        const uint8_t *p = weft_tensor_data(t);
        for (int64_t i = 0; i < n; i++) sum += p[i]; // every byte is there
        (void)sum;
    }
    for (int nd = 1; nd <= 3; nd += 2) { // the same file, a fixed ndim expected
        weft_tensor *u = weft_idx_load(path, nd);
        FUZZ_ASSERT(!u == !(t && weft_tensor_ndim(t) == nd), "expect_ndim %d disagrees with the file's", nd);
        weft_tensor_free(u);
    }
    weft_tensor_free(t);
    if (st) weft_error(st, "%s", msg); // the first load's message
    return st;
}
