// The README's example: tensors, autograd, a gradient printed.
#include <math.h>
#include <stdio.h>
#include <weft.h>

int main(void) {
    // f(x1, x2) = (e^x1 + x2)(x2 + 1), the worked example of seed 003
    weft_tensor *x1 = weft_tensor_scalar(3.0, WEFT_F64), *x2 = weft_tensor_scalar(2.0, WEFT_F64);
    weft_tensor_set_requires_grad(x1, true);
    weft_tensor_set_requires_grad(x2, true);
    weft_tensor *e = weft_exp(x1), *a = weft_add(e, x2), *b = weft_add_scalar(x2, 1.0);
    weft_tensor *y = weft_mul(a, b);
    if (!y || weft_backward(y, NULL, NULL) != WEFT_OK) {
        fprintf(stderr, "error: %s\n", weft_last_error());
        return 1;
    }
    printf("y = %.4f  dy/dx1 = %.4f  dy/dx2 = %.4f\n", weft_tensor_item(y),
           weft_tensor_item(weft_tensor_grad(x1)), weft_tensor_item(weft_tensor_grad(x2)));
    // exit status checks the closed form, so this example doubles as a test
    int ok = fabs(weft_tensor_item(weft_tensor_grad(x1)) - 3 * exp(3.0)) < 1e-9;
    weft_tensor *all[] = {x1, x2, e, a, b, y};
    for (int i = 0; i < 6; i++) weft_tensor_free(all[i]);
    return ok ? 0 : 1;
}
