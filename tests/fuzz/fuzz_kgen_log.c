// Harness: the kernel generator's tuning log (weft_kg_tune with no trials,
// src/kgen/tune.c). The bytes are the log file; the entry of a (16,4)@(4,8)
// matmul with a bias is looked up in it and, when found, made into a schedule
// whose C code is generated (nothing is compiled). The seeds hold that entry
// (its key names one thread, which the harness sets).
#include "fuzz.h"

static weft_kg *def(void) {
    weft_kg *kg = weft_kg_new("mm");
    int A = weft_kg_input(kg, "A", 2, (int64_t[]){16, 4}), B = weft_kg_input(kg, "B", 2, (int64_t[]){4, 8});
    int bias = weft_kg_input(kg, "bias", 1, (int64_t[]){8});
    weft_kg_expr *i = weft_kg_axis(kg, "i", 16), *j = weft_kg_axis(kg, "j", 8), *k = weft_kg_reduce_axis(kg, "k", 4);
    weft_kg_expr *body = weft_kg_bin(kg, WEFT_KG_MUL, weft_kg_load(kg, A, (weft_kg_expr *[]){i, k}),
                                     weft_kg_load(kg, B, (weft_kg_expr *[]){k, j}));
    weft_kg_expr *epi = weft_kg_bin(kg, WEFT_KG_ADD, weft_kg_acc(kg), weft_kg_load(kg, bias, (weft_kg_expr *[]){j}));
    if (weft_kg_compute(kg, 2, (weft_kg_expr *[]){i, j}, WEFT_KG_SUM, body, epi)) {
        weft_kg_free(kg);
        return NULL;
    }
    return kg;
}

weft_status fuzz_one(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, data, size);
    if (!path) return WEFT_ERR_IO;
    weft_set_num_threads(1);
    weft_kg *kg = def();
    FUZZ_ASSERT(kg, "the harness's definition failed: %s", weft_last_error());
    weft_kg_tune_report rep;
    weft_kg_sched *s = weft_kg_tune(kg, &(weft_kg_tune_opts){.trials = 0, .log = path}, &rep);
    weft_status st = s ? WEFT_OK : weft_last_status();
    if (s) {
        FUZZ_ASSERT(rep.from_log && rep.measured == 0, "a schedule from the log was measured");
        char *src = weft_kg_source(s);
        FUZZ_ASSERT(src, "a schedule the log gave makes no code: %s", weft_last_error());
        free(src);
    }
    weft_kg_sched_free(s);
    weft_kg_free(kg);
    return st;
}
