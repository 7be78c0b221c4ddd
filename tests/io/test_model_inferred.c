// Model files: what parses also parses once written (weft_model_cfg_write).
// Values that resolve infers (a layer's `in` / `dim` from the shapes, kjv's
// context from `input`) are held to their keys' ranges like values the file
// gives, and the input's element count is computed without overflow. Each
// case below used to parse into a configuration whose written text did not
// (or, for the input, to overflow int64).
#include <stdlib.h>
#include <string.h>

#include "weft_test.h"

static weft_model_cfg *parse(const char *text, const char *name) {
    weft_clear_error();
    return weft_model_cfg_parse(text, strlen(text), name);
}

static void test_inferred_in_range(void) {
    static const struct {
        const char *text, *want[3];
    } cases[] = {
        // (65536,228,228) flattened: 3406823424 features, past [linear] in's 2^24
        {"[net]\ndataset = fmnist\n[conv2d]\nout = 65536\nkernel = 1\npad = 100\n[flatten]\n[linear]\nout = 10\n",
         {"t.cfg:8:", "key 'in' = 3406823424", "[1, 16777216]"}},
        {"[net]\ndataset = fmnist\n[conv2d]\nout = 65536\nkernel = 1\npad = 100\n[flatten]\n[layernorm]\n[linear]\nout = 10\n",
         {"t.cfg:8:", "[layernorm] key 'dim'"}},
        // kjv: the context comes from `input` (up to 2^24) but is at most 2^20
        {"[net]\ndataset = kjv\ninput = 2000000\n[embedding]\ndim = 4\n[linear]\nout = vocab\n",
         {"t.cfg:3:", "[net] key 'context' = 2000000"}},
        // 3 x 2^24 used to overflow while counting the input's values
        {"[net]\ndataset = fmnist\ninput = 16777216,16777216,16777216\n[flatten]\n[linear]\nout = 10\n",
         {"t.cfg:3:", "more than 784 values"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        weft_model_cfg *c = parse(cases[i].text, "t.cfg");
        CHECK(c == NULL && weft_last_status() == WEFT_ERR_FORMAT);
        for (int k = 0; k < 3 && cases[i].want[k]; k++)
            if (!wt_error_has(cases[i].want[k])) {
                wt_fail++;
                fprintf(stderr, "case %zu: '%s' lacks '%s'\n", i, weft_last_error(), cases[i].want[k]);
            }
        weft_model_cfg_free(c);
    }
    // at the edge: 2^24 features inferred is fine, and so is a context of 2^20 from input
    weft_model_cfg *c = parse("[net]\ndataset = kjv\ninput = 1048576\n[embedding]\ndim = 4\n[linear]\nout = vocab\n", "t.cfg");
    CHECK(c && c->net.context == 1048576);
    weft_model_cfg_free(c);
}

// The writer's comment line names the file: a name with a newline must not end it early.
static void test_name_in_comment(void) {
    weft_model_cfg *c = parse("[net]\ndataset = fmnist\n[flatten]\n[linear]\nout = 10\n", "dir/a\nb.cfg");
    CHECK(c != NULL);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(c && weft_model_cfg_write(c, f) == WEFT_OK);
    fclose(f);
    weft_model_cfg *d = weft_model_cfg_parse(text, len, "again.cfg");
    CHECK(d && text && !strncmp(text, "# dir/a?b.cfg,", 14));
    if (!d) fprintf(stderr, "%s\n%s\n", weft_last_error(), text);
    weft_model_cfg_free(d);
    weft_model_cfg_free(c);
    free(text);
}

int main(void) {
    RUN(test_inferred_in_range);
    RUN(test_name_in_comment);
    return wt_summary();
}
