// Harness: model files (weft_model_cfg_parse, src/io/model_file.c).
// The bytes are a model file. One that parses must survive the round trip
// weft_model_cfg_write promises: its text parses again, to a configuration
// that writes the same text.
#include "fuzz.h"

// cfg written to a malloc'd string (NULL only if out of memory).
static char *write_cfg(const weft_model_cfg *cfg, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) return NULL;
    weft_status st = weft_model_cfg_write(cfg, f);
    fclose(f);
    FUZZ_ASSERT(st == WEFT_OK, "weft_model_cfg_write failed: %s", weft_last_error());
    return buf;
}

weft_status fuzz_one(const uint8_t *data, size_t size) {
    weft_model_cfg *cfg = weft_model_cfg_parse((const char *)data, size, "fuzz.cfg");
    if (!cfg) return weft_last_status();
    size_t n1 = 0, n2 = 0;
    char *t1 = write_cfg(cfg, &n1);
    weft_model_cfg *again = t1 ? weft_model_cfg_parse(t1, n1, "fuzz.cfg") : NULL;
    FUZZ_ASSERT(!t1 || again, "a model file that parsed does not parse once written: %s\n--- written:\n%s",
                weft_last_error(), t1);
    char *t2 = again ? write_cfg(again, &n2) : NULL;
    FUZZ_ASSERT(!t2 || (n1 == n2 && !memcmp(t1, t2, n1)), "writing twice gives two texts:\n%s\n---\n%s", t1, t2);
    free(t1);
    free(t2);
    weft_model_cfg_free(again);
    weft_model_cfg_free(cfg);
    return WEFT_OK;
}
