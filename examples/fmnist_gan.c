// A DCGAN on Fashion-MNIST, written against the C API: a generator of transposed convolutions, a
// convolutional discriminator with leaky ReLUs and batch norm, two Adam optimisers, the non-saturating loss
// through bce_with_logits, and detach() for the discriminator's step (Radford et al. 2015, at 28x28).
// It writes an 8x8 grid of samples as a PGM image, and checks that it learned: the mean of its samples
// moves to within half its first distance of the data's mean image, and the samples keep a spread (no
// collapse to one image).
// Usage: example_fmnist_gan [steps] [samples.pgm]   (default 300 steps, no image; needs dataset-fashion-mnist)
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <weft.h>

enum { B = 64, Z = 64, NF = 32 }; // batch, noise dims, feature maps of the first conv

typedef struct gan {
    weft_module *g_fc, *g_conv, *d;
} gan;

// z (N,Z) -> linear -> ReLU -> (N,2NF,7,7) -> convT 4x4/2 -> BN -> ReLU -> convT 4x4/2 -> tanh: (N,1,28,28).
static weft_tensor *generate(gan *m, weft_tensor *z) {
    weft_tensor *h = weft_module_forward(m->g_fc, z);
    weft_tensor *h4 = h ? weft_view(h, 4, (const int64_t[]){weft_tensor_size(z, 0), 2 * NF, 7, 7}) : NULL;
    weft_tensor *x = h4 ? weft_module_forward(m->g_conv, h4) : NULL;
    weft_tensor_free(h);
    weft_tensor_free(h4);
    return x;
}

static gan build(weft_generator *g) {
    weft_conv_transpose2d_params up = {.stride = {2, 2}, .padding = {1, 1}};
    weft_conv2d_params down = {.stride = {2, 2}, .padding = {1, 1}};
    gan m = {weft_nn_sequential(), weft_nn_sequential(), weft_nn_sequential()};
    weft_nn_sequential_append(m.g_fc, weft_nn_linear(Z, 2 * NF * 7 * 7, true, g));
    weft_nn_sequential_append(m.g_fc, weft_nn_activation(WEFT_ACT_RELU));
    weft_nn_sequential_append(m.g_conv, weft_nn_conv_transpose2d(2 * NF, NF, 4, 4, &up, false, g)); // 7 -> 14
    weft_nn_sequential_append(m.g_conv, weft_nn_batch_norm(NF, 0.1, 1e-5));
    weft_nn_sequential_append(m.g_conv, weft_nn_activation(WEFT_ACT_RELU));
    weft_nn_sequential_append(m.g_conv, weft_nn_conv_transpose2d(NF, 1, 4, 4, &up, true, g)); // 14 -> 28
    weft_nn_sequential_append(m.g_conv, weft_nn_activation(WEFT_ACT_TANH));
    weft_nn_sequential_append(m.d, weft_nn_conv2d(1, NF, 4, 4, &down, true, g)); // 28 -> 14
    weft_nn_sequential_append(m.d, weft_nn_leaky_relu(0.2));
    weft_nn_sequential_append(m.d, weft_nn_conv2d(NF, 2 * NF, 4, 4, &down, false, g)); // 14 -> 7
    weft_nn_sequential_append(m.d, weft_nn_batch_norm(2 * NF, 0.1, 1e-5));
    weft_nn_sequential_append(m.d, weft_nn_leaky_relu(0.2));
    weft_nn_sequential_append(m.d, weft_nn_flatten());
    weft_nn_sequential_append(m.d, weft_nn_linear(2 * NF * 7 * 7, 1, true, g));
    return m;
}

// Adam(lr 2e-4, betas (0.5, 0.999)) over the parameters of up to two modules.
static weft_optim *adam(weft_module *a, weft_module *b) {
    weft_tensor *p[32];
    int n = 0;
    weft_module *ms[2] = {a, b};
    for (int k = 0; k < 2; k++)
        for (int i = 0; ms[k] && i < weft_module_param_count(ms[k]) && n < 32; i++) p[n++] = weft_module_param_at(ms[k], i, NULL, 0);
    weft_optim_opts o = weft_optim_defaults(WEFT_OPTIM_ADAM);
    o.lr = 2e-4;
    o.beta1 = 0.5;
    return weft_optim_create(&o, n, p, NULL);
}

// bce_with_logits(d(x), label): label 1 for "real", 0 for "fake".
static weft_tensor *d_loss(weft_module *d, weft_tensor *x, float label) {
    weft_tensor *logit = weft_module_forward(d, x);
    weft_tensor *t = logit ? weft_tensor_full(2, weft_tensor_sizes(logit), WEFT_F32, label) : NULL;
    weft_tensor *l = t ? weft_bce_with_logits(logit, t) : NULL;
    weft_tensor_free(logit);
    weft_tensor_free(t);
    return l;
}

// Per-pixel mean (784) of n images (n,1,28,28) and their mean per-pixel standard deviation.
static double image_stats(const weft_tensor *x, int64_t n, double *mean) {
    const float *v = weft_tensor_data(x);
    double sd = 0;
    for (int p = 0; p < 784; p++) {
        double s = 0, ss = 0;
        for (int64_t i = 0; i < n; i++) s += v[i * 784 + p], ss += (double)v[i * 784 + p] * v[i * 784 + p];
        mean[p] = s / n;
        sd += sqrt(fmax(ss / n - mean[p] * mean[p], 0)) / 784;
    }
    return sd;
}

static double rms_diff(const double *a, const double *b) {
    double s = 0;
    for (int p = 0; p < 784; p++) s += (a[p] - b[p]) * (a[p] - b[p]);
    return sqrt(s / 784);
}

// 512 samples in eval mode (batch norm's running statistics): their mean image and spread.
static double sample_stats(gan *m, weft_generator *g, double *mean, weft_tensor **keep) {
    weft_module_set_training(m->g_fc, false);
    weft_module_set_training(m->g_conv, false);
    weft_tensor *z = weft_tensor_randn(2, (const int64_t[]){512, Z}, WEFT_F32, g), *x = NULL;
    WEFT_NO_GRAD { x = generate(m, z); }
    double sd = x ? image_stats(x, 512, mean) : -1;
    weft_tensor_free(z);
    if (keep) *keep = x;
    else weft_tensor_free(x);
    weft_module_set_training(m->g_fc, true);
    weft_module_set_training(m->g_conv, true);
    return sd;
}

// The first 64 samples of x (in [-1,1]) as an 8x8 grid, 8-bit PGM, written to a temporary file, synced and
// renamed over path.
static int write_grid(const weft_tensor *x, const char *path) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmpXXXXXX", path) >= (int)sizeof tmp) return -1;
    int fd = mkstemp(tmp);
    if (fd < 0) return -1;
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    const float *v = weft_tensor_data(x);
    fprintf(f, "P5\n%d %d\n255\n", 8 * 28, 8 * 28);
    for (int r = 0; r < 8 * 28; r++)
        for (int c = 0; c < 8 * 28; c++) {
            float p = v[((r / 28) * 8 + c / 28) * 784 + (r % 28) * 28 + c % 28];
            fputc((int)lrintf(fminf(fmaxf((p + 1) * 127.5f, 0), 255)), f);
        }
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 300;
    const char *out = argc > 2 ? argv[2] : NULL;
    if (steps < 1) {
        fprintf(stderr, "usage: example_fmnist_gan [steps >= 1] [samples.pgm]\n");
        return 2;
    }
    weft_dataset *train = weft_fmnist_load(NULL, "train", 0.5, 0.5); // pixels in [-1, 1], as tanh gives
    if (!train) {
        printf("skipped: %s\n", weft_last_error());
        return 0;
    }
    weft_generator *g = weft_generator_create(1);
    gan m = build(g);
    weft_optim *og = adam(m.g_fc, m.g_conv), *od = adam(m.d, NULL);
    if (!og || !od) {
        fprintf(stderr, "error: %s\n", weft_last_error());
        return 1;
    }
    double data_mean[784], gen_mean[784];
    weft_tensor *first = weft_narrow(train->inputs, 0, 0, 4096), *firstc = weft_tensor_contiguous(first);
    double data_sd = image_stats(firstc, 4096, data_mean);
    weft_tensor_free(first);
    weft_tensor_free(firstc);
    double sd0 = sample_stats(&m, g, gen_mean, NULL), dist0 = rms_diff(gen_mean, data_mean);
    printf("data: pixel spread %.3f; untrained generator: spread %.3f, mean image %.3f from the data's\n", data_sd,
           sd0, dist0);

    weft_loader_opts lo = weft_loader_default_opts();
    lo.batch_size = B;
    lo.shuffle = true;
    lo.drop_last = true;
    weft_loader *loader = weft_loader_create(train->inputs, train->labels, &lo);
    double sum_d = 0, sum_g = 0;
    for (int s = 1; s <= steps; s++) {
        weft_tensor *real, *label;
        if (weft_loader_next(loader, &real, &label) != 1 && weft_loader_next(loader, &real, &label) != 1) break;
        weft_tensor *z = weft_tensor_randn(2, (const int64_t[]){B, Z}, WEFT_F32, g);
        // discriminator: real -> 1, the generator's samples (detached: no generator gradients) -> 0
        weft_tensor *fake = generate(&m, z), *fd = fake ? weft_tensor_detach(fake) : NULL;
        weft_tensor *lr = d_loss(m.d, real, 1), *lf = fd ? d_loss(m.d, fd, 0) : NULL;
        weft_tensor *ld = lr && lf ? weft_add(lr, lf) : NULL;
        weft_optim_zero_grad(od);
        bool ok = ld && !weft_backward(ld, NULL, NULL) && !weft_optim_step(od);
        // generator: its samples -> 1 through the updated discriminator (whose gradients are then dropped)
        weft_tensor *lg = ok ? d_loss(m.d, fake, 1) : NULL;
        weft_optim_zero_grad(og);
        ok = ok && lg && !weft_backward(lg, NULL, NULL) && !weft_optim_step(og);
        weft_optim_zero_grad(od);
        if (!ok) {
            fprintf(stderr, "error: %s\n", weft_last_error());
            return 1;
        }
        sum_d += weft_tensor_item(ld), sum_g += weft_tensor_item(lg);
        if (s % 50 == 0 || s == steps) {
            printf("step %4d  loss D %.3f  G %.3f\n", s, sum_d / 50, sum_g / 50);
            sum_d = sum_g = 0;
        }
        weft_tensor *t[] = {real, label, z, fake, fd, lr, lf, ld, lg};
        for (int i = 0; i < 9; i++) weft_tensor_free(t[i]);
    }
    weft_tensor *samples = NULL;
    double sd = sample_stats(&m, g, gen_mean, &samples), dist = rms_diff(gen_mean, data_mean);
    printf("trained generator: spread %.3f, mean image %.3f from the data's (%.0f%% of the untrained distance)\n", sd,
           dist, 100 * dist / dist0);
    int rc = dist < 0.5 * dist0 && sd > 0.3 * data_sd ? 0 : 1;
    if (out && samples && write_grid(samples, out) != 0) {
        fprintf(stderr, "error: cannot write %s\n", out);
        rc = 1;
    } else if (out) {
        printf("wrote 64 samples to %s\n", out);
    }
    weft_tensor_free(samples);
    weft_loader_free(loader);
    weft_optim_free(og);
    weft_optim_free(od);
    weft_module_free(m.g_fc);
    weft_module_free(m.g_conv);
    weft_module_free(m.d);
    weft_generator_free(g);
    weft_dataset_free(train);
    return rc;
}
