// Fashion-MNIST with a 784-256-256-10 MLP, written directly against the C API:
// data loader, layers, Adam, a training loop and a test-set evaluation.
// Usage: example_fmnist_mlp [epochs]   (default 1; needs dataset-fashion-mnist)
#include <stdio.h>
#include <stdlib.h>
#include <weft.h>

static double accuracy(weft_module *net, const weft_dataset *test) {
    weft_tensor *logits, *pred, *ok, *okf, *acc;
    WEFT_NO_GRAD {
        logits = weft_module_forward(net, test->inputs); // (10000,10)
        pred = weft_argmax(logits, 1, false);
        ok = weft_eq(pred, test->labels);
        okf = weft_cast(ok, WEFT_F32);
        acc = weft_mean(okf, 0, NULL, false);
    }
    double a = weft_tensor_item(acc);
    weft_tensor *t[] = {logits, pred, ok, okf, acc};
    for (int i = 0; i < 5; i++) weft_tensor_free(t[i]);
    return a;
}

int main(int argc, char **argv) {
    int epochs = argc > 1 ? atoi(argv[1]) : 1;
    weft_dataset *train = weft_fmnist_load(NULL, "train", WEFT_FMNIST_MEAN, WEFT_FMNIST_STD);
    weft_dataset *test = weft_fmnist_load(NULL, "test", WEFT_FMNIST_MEAN, WEFT_FMNIST_STD);
    if (!train || !test) { // not an error of this program: say what to install and skip
        printf("skipped: %s\n", weft_last_error());
        return 0;
    }
    weft_generator *g = weft_generator_create(1);
    weft_module *net = weft_nn_sequential();
    weft_nn_sequential_append(net, weft_nn_flatten());
    weft_nn_sequential_append(net, weft_nn_linear(784, 256, true, g));
    weft_nn_sequential_append(net, weft_nn_activation(WEFT_ACT_RELU));
    weft_nn_sequential_append(net, weft_nn_linear(256, 256, true, g));
    weft_nn_sequential_append(net, weft_nn_activation(WEFT_ACT_RELU));
    weft_nn_sequential_append(net, weft_nn_linear(256, 10, true, g));

    int np = weft_module_param_count(net);
    weft_tensor *params[16];
    for (int i = 0; i < np; i++) params[i] = weft_module_param_at(net, i, NULL, 0);
    weft_optim_opts oo = weft_optim_defaults(WEFT_OPTIM_ADAM);
    weft_optim *opt = weft_optim_create(&oo, np, params, NULL);
    weft_loader_opts lo = weft_loader_default_opts();
    lo.batch_size = 128;
    lo.shuffle = true;
    lo.prefetch = 4;
    weft_loader *loader = weft_loader_create(train->inputs, train->labels, &lo);

    for (int e = 0; e < epochs; e++) {
        weft_tensor *x, *y;
        double sum = 0;
        int n = 0;
        while (weft_loader_next(loader, &x, &y) == 1) { // 0 at the end of the epoch
            weft_tensor *logits = weft_module_forward(net, x);  // (128,10)
            weft_tensor *loss = weft_cross_entropy(logits, y); // ()
            if (!loss || weft_backward(loss, NULL, NULL) || weft_optim_step(opt)) {
                fprintf(stderr, "error: %s\n", weft_last_error());
                return 1;
            }
            weft_optim_zero_grad(opt);
            sum += weft_tensor_item(loss), n++;
            weft_tensor *t[] = {x, y, logits, loss};
            for (int i = 0; i < 4; i++) weft_tensor_free(t[i]);
        }
        printf("epoch %d  train loss %.4f  test accuracy %.2f%%\n", e + 1, sum / n, 100 * accuracy(net, test));
    }
    double acc = accuracy(net, test);
    weft_loader_free(loader);
    weft_optim_free(opt);
    weft_module_free(net);
    weft_generator_free(g);
    weft_dataset_free(train);
    weft_dataset_free(test);
    return acc > 0.8 ? 0 : 1; // one epoch reaches about 85%
}
