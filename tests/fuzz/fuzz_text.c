// Harness: text corpora (weft_text_load, src/data/text.c) and what a
// language model does with one: the train/validation split and a batch of
// windows. Byte 0 picks the dtype (bit 0), the batch (bits 1-3: B = 1..8),
// the context (bits 4-7: T = 1..16) and, with byte 1, the validation
// fraction; the rest is the file.
#include "fuzz.h"

weft_status fuzz_one(const uint8_t *data, size_t size) {
    if (size < 2) return weft_error(WEFT_ERR_FORMAT, "fuzz_text: no header bytes");
    weft_dtype dt = data[0] & 1 ? WEFT_I64 : WEFT_U8;
    int64_t B = 1 + ((data[0] >> 1) & 7), T = 1 + (data[0] >> 4);
    double val = data[1] / 256.0;
    const char *path = fuzz_file(0, data + 2, size - 2);
    if (!path) return WEFT_ERR_IO;
    weft_tensor *all = weft_text_load(path, dt), *train = NULL, *valid = NULL, *x = NULL, *y = NULL;
    if (!all) return weft_last_status();
    FUZZ_ASSERT(weft_tensor_numel(all) == (int64_t)size - 2, "%lld tokens from %zu bytes",
                (long long)weft_tensor_numel(all), size - 2);
    weft_status st = weft_train_val_split(all, val, &train, &valid);
    if (!st) st = weft_lm_batch(train, B, T, data[0], data[1], &x, &y);
    if (!st) { // y is x shifted by one token
        const int64_t *xp = weft_tensor_data(x), *yp = weft_tensor_data(y);
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t + 1 < T; t++)
                FUZZ_ASSERT(yp[b * T + t] == xp[b * T + t + 1], "labels are not the next tokens");
    }
    weft_tensor *ts[] = {all, train, valid, x, y};
    for (int i = 0; i < 5; i++) weft_tensor_free(ts[i]);
    return st;
}
