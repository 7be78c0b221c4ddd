// The model behind fuzz_checkpoint.c's checkpoints (make_corpus.c writes its
// seeds with it): 1x28x28 -> avgpool 7 -> 16 -> batchnorm (running
// statistics: buffers) -> dropout -> linear 10, trained with Adam in f16 (the
// loss scaler's state): every kind of state a checkpoint holds, in 2 KB.
#ifndef WEFT_FUZZ_CHECKPOINT_MODEL_H
#define WEFT_FUZZ_CHECKPOINT_MODEL_H

static const char k_fuzz_ckpt_model[] = "[net]\n"
                                        "dataset = fmnist\n"
                                        "optimizer = adam\n"
                                        "precision = f16\n"
                                        "batch = 4\n"
                                        "[avgpool]\nkernel = 7\n"
                                        "[flatten]\n"
                                        "[batchnorm]\n"
                                        "[dropout]\np = 0.1\n"
                                        "[linear]\nout = 10\n";

#endif
