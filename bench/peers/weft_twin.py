# What a PyTorch twin needs to see exactly what weft sees: weft_lm_batch's window starts (src/data/text.c, with
# src/data/data_impl.h's splitmix64 keys) and the names of the model files' GPT parameters in weft's order, each
# with the twin's (train.py's GPT) name. Used by kjv_gpt_train.py (its run from weft's start) and
# tests/data/gen_gpt_twin.py (test_gpt_twin's references).
M64 = (1 << 64) - 1


def mix(z):  # splitmix64's finaliser
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def key(a, b):  # weft_data_key
    return mix(mix(a) ^ ((b * 0xD6E8FEB86659FD93 + 0x632BE59BD9B4E019) & M64))


def window_starts(n, batch, T, seed, step):
    """weft_lm_batch's B window starts in a corpus of n tokens for (seed, step)."""
    k = key(seed, step)
    return [(key(k, b) * (n - T)) >> 64 for b in range(batch)]


def param_names(blocks):
    """(weft's name, the twin's) for each parameter of the GPT, in weft's order."""
    names = [("0.weight", "tok.weight"), ("0.pos", "pos.weight")]
    for i in range(blocks):
        for w, t in [("ln1", "ln1"), ("attn.qkv", "qkv"), ("attn.proj", "proj"), ("ln2", "ln2"), ("mlp.fc", "fc"),
                     ("mlp.proj", "fc_proj")]:
            names += [(f"1.{i}.{w}.{k}", f"blocks.{i}.{t}.{k}") for k in ("weight", "bias")]
    return names + [("2.weight", "ln.weight"), ("2.bias", "ln.bias"), ("3.weight", "head.weight"),
                    ("3.bias", "head.bias")]
