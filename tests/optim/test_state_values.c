// Optimiser state loaded from a checkpoint (weft_optim_state_set,
// weft_optim_load_state) is checked for its dtype and, where it becomes an
// integer, its values before any conversion: a NaN step used to become
// INT64_MIN (C leaves the conversion undefined). PyTorch keeps its step as a
// float tensor, so a float holding a whole number is still a step.
#include "weft_test.h"

static weft_tensor *scalar(double v, weft_dtype dt) { return weft_tensor_full(0, NULL, dt, v); }

static void test_step_values(void) {
    weft_tensor *p = weft_tensor_zeros(WEFT_DIMS(3), WEFT_F32);
    weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_ADAM);
    weft_optim *opt = weft_optim_create(&o, 1, &p, NULL);
    CHECK(opt != NULL);
    weft_tensor *step = weft_optim_state_find(opt, "0.step");
    CHECK(step && weft_tensor_dtype(step) == WEFT_I64);
    struct {
        double v;
        weft_dtype dt;
        const char *err; // NULL: accepted
    } cases[] = {
        {NAN, WEFT_F32, "not a count"}, {INFINITY, WEFT_F64, "not a count"}, {-1, WEFT_I64, "not a count"},
        {2.5, WEFT_F32, "not a count"}, {0x1p60, WEFT_F64, "not a count"}, {1, WEFT_BOOL, "is bool"},
        {7, WEFT_F32, NULL},            {9, WEFT_I32, NULL},              {12, WEFT_I64, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        weft_tensor *v = scalar(cases[i].v, cases[i].dt);
        weft_clear_error();
        weft_status st = weft_optim_state_set(opt, "0.step", v);
        if (cases[i].err) CHECK(st != WEFT_OK && wt_error_has(cases[i].err) && wt_error_has("0.step"));
        else CHECK(st == WEFT_OK && weft_tensor_item(step) == cases[i].v);
        weft_tensor_free(v);
    }
    // float state takes float values of any float dtype (NaN included: a diverged run's state), not integers
    weft_tensor *m = weft_tensor_full(WEFT_DIMS(3), WEFT_F64, NAN), *mi = weft_tensor_zeros(WEFT_DIMS(3), WEFT_I64);
    CHECK(weft_optim_state_set(opt, "0.exp_avg", m) == WEFT_OK);
    weft_clear_error();
    CHECK(weft_optim_state_set(opt, "0.exp_avg", mi) != WEFT_OK && wt_error_has("is i64"));
    weft_tensor_free(m);
    weft_tensor_free(mi);
    weft_optim_free(opt);
    weft_tensor_free(p);
}

int main(void) {
    RUN(test_step_values);
    return wt_summary();
}
