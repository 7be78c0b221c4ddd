// Train a two-layer MLP on a 3-class spiral (the classic CS231n toy problem)
// with plain SGD written from weft ops: matmul, add, relu, cross_entropy,
// backward. Prints the loss as it falls and the final training accuracy.
#include <math.h>
#include <stdio.h>
#include <weft.h>

#define N_PER 200 // points per class
#define K 3       // classes
#define H 64      // hidden units

static weft_tensor *param(int ndim, const int64_t *sizes, double scale, weft_generator *g) {
    weft_tensor *t = weft_tensor_randn(ndim, sizes, WEFT_F32, g);
    weft_tensor *s = weft_mul_scalar(t, scale);
    weft_tensor_free(t);
    weft_tensor_set_requires_grad(s, true);
    return s;
}

// p -= lr * p.grad, outside autograd
static void sgd_step(weft_tensor *p, double lr) {
    weft_tensor *g = weft_tensor_grad(p);
    if (!g) return;
    WEFT_NO_GRAD {
        weft_tensor *d = weft_mul_scalar(g, -lr), *np = weft_add(p, d);
        weft_tensor_copy_(p, np);
        weft_tensor_free(d);
        weft_tensor_free(np);
    }
    weft_tensor_zero_grad(p);
}

int main(void) {
    // The data: K spiral arms in 2-D, labels 0..K-1.
    static float xs[N_PER * K][2];
    static int64_t ys[N_PER * K];
    weft_generator *g = weft_generator_create(42);
    weft_tensor *noise = weft_tensor_randn(WEFT_DIMS(N_PER * K), WEFT_F32, g);
    float nz[N_PER * K];
    weft_tensor_to_f32(noise, nz, N_PER * K);
    for (int k = 0; k < K; k++)
        for (int i = 0; i < N_PER; i++) {
            int j = k * N_PER + i;
            double r = (double)i / N_PER, th = k * 4.0 + 4.0 * r + 0.2 * nz[j];
            xs[j][0] = (float)(r * sin(th));
            xs[j][1] = (float)(r * cos(th));
            ys[j] = k;
        }
    weft_tensor *X = weft_tensor_from_data(xs, WEFT_DIMS(N_PER * K, 2), WEFT_F32); // (N,2)
    weft_tensor *Y = weft_tensor_from_data(ys, WEFT_DIMS(N_PER * K), WEFT_I64);    // (N)
    weft_tensor *W1 = param(WEFT_DIMS(2, H), 1.0, g), *b1 = param(WEFT_DIMS(H), 0.0, g);
    weft_tensor *W2 = param(WEFT_DIMS(H, K), 0.1, g), *b2 = param(WEFT_DIMS(K), 0.0, g);
    weft_tensor *params[] = {W1, b1, W2, b2};

    double loss = 0;
    for (int step = 0; step <= 2000; step++) {
        weft_tensor *h0 = weft_matmul(X, W1), *h1 = weft_add(h0, b1), *h = weft_relu(h1); // (N,H)
        weft_tensor *s0 = weft_matmul(h, W2), *logits = weft_add(s0, b2);                 // (N,K)
        weft_tensor *l = weft_cross_entropy(logits, Y);
        if (!l || weft_backward(l, NULL, NULL) != WEFT_OK) {
            fprintf(stderr, "error: %s\n", weft_last_error());
            return 1;
        }
        loss = weft_tensor_item(l);
        if (step % 400 == 0) printf("step %4d  loss %.4f\n", step, loss);
        for (int i = 0; i < 4; i++) sgd_step(params[i], 1.0);
        if (step == 2000) { // accuracy on the training set
            weft_tensor *pred = weft_argmax(logits, 1, false), *ok = weft_eq(pred, Y);
            weft_tensor *okf = weft_cast(ok, WEFT_F32), *acc = weft_mean(okf, 0, NULL, false);
            printf("final loss %.4f  train accuracy %.1f%%\n", loss, 100.0 * weft_tensor_item(acc));
            weft_tensor *t[] = {pred, ok, okf, acc};
            for (int i = 0; i < 4; i++) weft_tensor_free(t[i]);
        }
        weft_tensor *t[] = {h0, h1, h, s0, logits, l};
        for (int i = 0; i < 6; i++) weft_tensor_free(t[i]);
    }
    for (int i = 0; i < 4; i++) weft_tensor_free(params[i]);
    weft_tensor_free(X);
    weft_tensor_free(Y);
    weft_tensor_free(noise);
    weft_generator_free(g);
    return loss < 0.5 ? 0 : 1;
}
