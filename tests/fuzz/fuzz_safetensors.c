// Harness: safetensors files (weft_safetensors_load, src/io/safetensors.c).
// The bytes are the file. A file that loads is read back as its users do:
// every tensor's metadata and data, the metadata pairs, a lookup by name and
// a copy into a tensor of the same shape.
#include "fuzz.h"

weft_status fuzz_one(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, data, size);
    if (!path) return WEFT_ERR_IO;
    weft_safetensors *st = weft_safetensors_load(path);
    if (!st) return weft_last_status();
    weft_status s = WEFT_OK;
    double sum = 0;
    for (int i = 0; i < weft_safetensors_count(st) && !s; i++) {
        const char *name = weft_safetensors_name_at(st, i);
        weft_tensor *t = weft_safetensors_tensor_at(st, i);
        FUZZ_ASSERT(name && t && weft_safetensors_find(st, name) == t, "tensor %d cannot be found by its name", i);
        int64_t n = weft_tensor_numel(t);
        if (n > 0 && n <= 4096) { // read every element (any dtype) and copy the tensor once
            double *v = malloc(sizeof(double) * (size_t)n);
            if (v && weft_tensor_to_f64(t, v, n) == WEFT_OK)
                for (int64_t k = 0; k < n; k++) sum += v[k];
            free(v);
            weft_tensor *c = weft_tensor_empty_like(t);
            s = c ? weft_safetensors_copy_to(st, name, c) : weft_last_status();
            weft_tensor_free(c);
        }
    }
    for (int i = 0; i < weft_safetensors_meta_count(st); i++) {
        const char *k = weft_safetensors_meta_key_at(st, i), *v = weft_safetensors_meta_value_at(st, i);
        FUZZ_ASSERT(k && v && weft_safetensors_meta(st, k), "metadata entry %d cannot be found by its key", i);
    }
    weft_safetensors_free(st);
    (void)sum;
    return s;
}
