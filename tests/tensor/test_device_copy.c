// Copies between the CPU and an accelerator (a real GPU, or the mock of
// tests/mock_device.c): empty tensors are a no-op on every path (they used
// to fail between devices), strided, broadcast and converting copies are
// staged through the host, and every result equals the CPU's own copy.
#include <string.h>

#include "weft_test.h"

static weft_device g_dev;

static void test_empty(void) {
    int64_t z[2] = {0, 3}, z1[1] = {0};
    weft_tensor *h = weft_tensor_empty_on(2, z, WEFT_F32, WEFT_DEVICE_CPU);
    weft_tensor *d = weft_tensor_to(h, g_dev);
    CHECK(d != NULL);
    CHECK(d && weft_device_equal(weft_tensor_device(d), g_dev) && weft_tensor_numel(d) == 0);
    weft_tensor *back = d ? weft_tensor_to(d, WEFT_DEVICE_CPU) : NULL;
    CHECK(back && weft_tensor_numel(back) == 0 && weft_tensor_ndim(back) == 2 && weft_tensor_sizes(back)[1] == 3);
    // converting and strided empties too
    weft_tensor *d64 = weft_tensor_empty_on(2, z, WEFT_F64, g_dev);
    CHECK(d64 && weft_tensor_copy_(d64, h) == WEFT_OK);
    weft_tensor *h1 = weft_tensor_empty_on(1, z1, WEFT_I64, WEFT_DEVICE_CPU);
    weft_tensor *d1 = weft_tensor_empty_on(1, z1, WEFT_I32, g_dev);
    CHECK(d1 && weft_tensor_copy_(h1, d1) == WEFT_OK && weft_tensor_copy_(d1, h1) == WEFT_OK);
    weft_tensor *all[] = {h, d, back, d64, h1, d1};
    for (int i = 0; i < 6; i++) weft_tensor_free(all[i]);
}

// dst (device) = transposed, converted src (host), and the other way, against the CPU's copy.
static void test_strided_converting(void) {
    double v[12];
    wt_vals(v, 12, -2, 2, 7);
    int64_t s34[2] = {3, 4}, s43[2] = {4, 3};
    weft_tensor *h = weft_tensor_from_data(v, 2, s34, WEFT_F64);
    weft_tensor *ht = weft_transpose(h, 0, 1); // (4,3), strided
    weft_tensor *want = weft_tensor_empty_on(2, s43, WEFT_F32, WEFT_DEVICE_CPU);
    CHECK(weft_tensor_copy_(want, ht) == WEFT_OK);
    // host strided f64 -> device contiguous f32
    weft_tensor *d = weft_tensor_empty_on(2, s43, WEFT_F32, g_dev);
    CHECK(weft_tensor_copy_(d, ht) == WEFT_OK);
    weft_tensor *dh = weft_tensor_to(d, WEFT_DEVICE_CPU);
    wt_check_same("h2d strided converting", dh, want, 0);
    // device strided f64 -> host contiguous f32
    weft_tensor *hd = weft_tensor_to(h, g_dev), *hdt = weft_transpose(hd, 0, 1);
    weft_tensor *out = weft_tensor_empty_on(2, s43, WEFT_F32, WEFT_DEVICE_CPU);
    CHECK(weft_tensor_copy_(out, hdt) == WEFT_OK);
    wt_check_same("d2h strided converting", out, want, 0);
    // host -> strided device destination (a transposed view of a device tensor)
    weft_tensor *d34 = weft_tensor_zeros(2, s34, WEFT_F32);
    weft_tensor *dd = weft_tensor_to(d34, g_dev), *ddt = weft_transpose(dd, 0, 1);
    CHECK(weft_tensor_copy_(ddt, ht) == WEFT_OK);
    weft_tensor *back = weft_tensor_to(dd, WEFT_DEVICE_CPU), *want34 = weft_cast(h, WEFT_F32);
    wt_check_same("h2d into a strided view", back, want34, 0);
    // broadcast: a (4) row into every row of a (3,4) device tensor
    int64_t s4[1] = {4};
    weft_tensor *row = weft_tensor_from_data(v, 1, s4, WEFT_F64);
    CHECK(weft_tensor_copy_(dd, row) == WEFT_OK);
    weft_tensor *b = weft_tensor_to(dd, WEFT_DEVICE_CPU);
    float ref[12];
    for (int i = 0; i < 12; i++) ref[i] = (float)v[i % 4];
    CHECK(b && memcmp(weft_tensor_data(b), ref, sizeof ref) == 0);
    weft_tensor *all[] = {h, ht, want, d, dh, hd, hdt, out, d34, dd, ddt, back, want34, row, b};
    for (int i = 0; i < 15; i++) weft_tensor_free(all[i]);
}

int main(void) {
    if (!wt_accelerator(&g_dev, NULL)) {
        printf("skipped: no accelerator (%s)\n", weft_last_error());
        return 77;
    }
    RUN(test_empty);
    RUN(test_strided_converting);
    return wt_summary();
}
