// The one place shapes are checked (src/tensor/tensor.c): element counts and
// the strides of contiguous layouts never overflow, whatever the sizes (a
// zero size does not excuse huge others); a view never reaches outside its
// storage; float-to-integer conversion is defined for every value (NaN, out
// of range). Values from closed forms; each case was a fault before.
#include <string.h>

#include "tensor/tensor_impl.h"
#include "weft_test.h"

static void test_numel_and_strides(void) {
    CHECK(weft_shape_numel(2, (int64_t[]){2, 3}) == 6);
    CHECK(weft_shape_numel(0, NULL) == 1);
    CHECK(weft_shape_numel(2, (int64_t[]){0, 5}) == 0);
    CHECK(weft_shape_numel(2, (int64_t[]){2, -1}) == -1);
    CHECK(weft_shape_numel(9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}) == -1);
    // a zero among huge sizes: no elements, but the strides would overflow
    CHECK(weft_shape_numel(3, (int64_t[]){0, INT64_C(1) << 52, INT64_C(1) << 52}) == -1);
    CHECK(weft_shape_numel(2, (int64_t[]){INT64_C(1) << 32, INT64_C(1) << 32}) == -1);
    CHECK(weft_shape_numel(1, (int64_t[]){WEFT_MAX_NUMEL}) == WEFT_MAX_NUMEL);
    CHECK(weft_shape_numel(2, (int64_t[]){2, WEFT_MAX_NUMEL / 2 + 1}) == -1);
    int64_t st[3] = {9, 9, 9};
    CHECK(weft_contiguous_strides(3, (int64_t[]){2, 0, 4}, st) && st[0] == 4 && st[1] == 4 && st[2] == 1);
    CHECK(!weft_contiguous_strides(2, (int64_t[]){INT64_C(1) << 50, INT64_C(1) << 50}, st) && st[0] == 0 && st[1] == 0);
    weft_clear_error();
    CHECK(weft_tensor_empty(3, (int64_t[]){0, INT64_C(1) << 52, INT64_C(1) << 52}, WEFT_F32) == NULL &&
          wt_error_has("too many elements"));
    CHECK(weft_tensor_empty(2, (int64_t[]){3, -2}, WEFT_F32) == NULL && wt_error_has("negative size"));
    weft_tensor *e = weft_tensor_empty(3, (int64_t[]){0, 1 << 20, 1 << 20}, WEFT_F32); // fine: 2^40 span
    CHECK(e && weft_tensor_numel(e) == 0 && weft_tensor_stride(e, 0) == INT64_C(1) << 40);
    weft_tensor_free(e);
}

static void test_alias_stays_inside(void) {
    weft_tensor *t = weft_tensor_zeros(WEFT_DIMS(2, 3), WEFT_F32); // 6 elements of storage
    weft_tensor *a = weft_tensor_alias(t, 2, (int64_t[]){2, 3}, (int64_t[]){3, 1}, 0);
    CHECK(a && weft_tensor_numel(a) == 6);
    weft_tensor_free(a);
    CHECK(!weft_tensor_alias(t, 2, (int64_t[]){2, 3}, (int64_t[]){3, 1}, 1) && wt_error_has("outside the storage"));
    CHECK(!weft_tensor_alias(t, 2, (int64_t[]){2, 3}, (int64_t[]){4, 1}, 0));
    CHECK(!weft_tensor_alias(t, 1, (int64_t[]){2}, (int64_t[]){-1}, 0)); // element -1
    a = weft_tensor_alias(t, 1, (int64_t[]){2}, (int64_t[]){-1}, 1);    // elements 1, 0
    CHECK(a != NULL);
    weft_tensor_free(a);
    CHECK(!weft_tensor_alias(t, 1, (int64_t[]){3}, (int64_t[]){INT64_MAX / 2}, 0)); // the extent overflows
    a = weft_tensor_alias(t, 2, (int64_t[]){0, 3}, (int64_t[]){3, 1}, 6); // empty: x[:, 3:] of a (0,...) view
    CHECK(a && weft_tensor_numel(a) == 0);
    weft_tensor_free(a);
    a = weft_tensor_alias(t, 1, (int64_t[]){4}, (int64_t[]){0}, 5); // an expanded element: stride 0
    CHECK(a != NULL);
    weft_tensor_free(a);
    weft_tensor_free(t);
}

static void test_float_to_int(void) {
    // C leaves these undefined; weft saturates (NaN -> 0), as a GPU converts
    double v[] = {NAN, 1e30, -1e30, 0x1p63, 300, -5, 2.7, -2.7, INFINITY};
    weft_tensor *f = wt_f64(v, WEFT_DIMS(9), false);
    weft_tensor *i64 = weft_cast(f, WEFT_I64), *i32 = weft_cast(f, WEFT_I32), *u8 = weft_cast(f, WEFT_U8);
    CHECK(i64 && i32 && u8);
    if (i64 && i32 && u8) {
        const int64_t *a = weft_tensor_data(i64);
        const int32_t *b = weft_tensor_data(i32);
        const uint8_t *c = weft_tensor_data(u8);
        int64_t wa[] = {0, INT64_MAX, INT64_MIN, INT64_MAX, 300, -5, 2, -2, INT64_MAX};
        int32_t wb[] = {0, INT32_MAX, INT32_MIN, INT32_MAX, 300, -5, 2, -2, INT32_MAX};
        uint8_t wc[] = {0, 255, 0, 255, 255, 0, 2, 0, 255};
        CHECK(!memcmp(a, wa, sizeof wa) && !memcmp(b, wb, sizeof wb) && !memcmp(c, wc, sizeof wc));
    }
    weft_tensor_free(f);
    weft_tensor_free(i64);
    weft_tensor_free(i32);
    weft_tensor_free(u8);
}

static void test_view_ops_bounds(void) {
    weft_tensor *t = weft_tensor_zeros(WEFT_DIMS(4, 5), WEFT_F32);
    weft_clear_error();
    CHECK(!weft_narrow(t, 1, 2, INT64_MAX) && wt_error_has("narrow")); // start + length used to overflow
    weft_tensor *parts[2];
    CHECK(weft_split(t, 0, 2, (int64_t[]){INT64_MAX, INT64_MAX}, parts) != WEFT_OK && wt_error_has("split"));
    CHECK(!weft_reshape(t, 3, (int64_t[]){INT64_C(1) << 40, INT64_C(1) << 40, 0}) && wt_error_has("cannot reshape"));
    weft_tensor *e = weft_tensor_zeros(WEFT_DIMS(0), WEFT_F32); // no elements: the new sizes still count
    CHECK(!weft_reshape(e, 3, (int64_t[]){0, INT64_C(1) << 40, INT64_C(1) << 40}) && wt_error_has("cannot reshape"));
    weft_tensor *ok = weft_reshape(e, 3, (int64_t[]){0, 1 << 20, 1 << 10});
    CHECK(ok && weft_tensor_numel(ok) == 0);
    weft_tensor_free(ok);
    weft_tensor_free(e);
    // slice of an empty tensor along another dim starts past its (zero) bytes: still fine
    weft_tensor *z = weft_tensor_zeros(WEFT_DIMS(0, 5), WEFT_F32), *s = weft_slice(z, 1, 3, 5, 1);
    CHECK(s && weft_tensor_numel(s) == 0 && weft_tensor_size(s, 1) == 2);
    weft_tensor_free(s);
    weft_tensor_free(z);
    weft_tensor_free(t);
}

int main(void) {
    RUN(test_numel_and_strides);
    RUN(test_alias_stays_inside);
    RUN(test_float_to_int);
    RUN(test_view_ops_bounds);
    return wt_summary();
}
