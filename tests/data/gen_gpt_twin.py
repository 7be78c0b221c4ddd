#!/usr/bin/python3
"""Reference values for tests/train/test_gpt_twin.c, computed with PyTorch in f64.

The byte-level GPT of bench/peers/train.py (12 pre-LayerNorm blocks, width 32, 2 heads, context 1024, exact GELU),
its weights filled from the LCG of tests/weft_test.c's wt_vals (per parameter, in weft's order, seed 1000 + index:
embeddings U(-sqrt 3, sqrt 3), linear layers U(+-1/sqrt(in)), layer norms 1 and 0), trained 5 steps with AdamW
(lr 6e-4 with a linear warm-up over 50 steps, betas (0.9, 0.95), weight decay 0.1) on the text of wt_write_verses
(1500 verses), the last 10% held out, each step's batch of 2 windows drawn as weft_lm_batch draws them (seed 1).
Writes tests/data/gpt_twin_ref.txt: "loss <step> <value>" for each step, then "dp <weft name> <value>": the norm of
each parameter's change over the 5 steps.

Run:  python3 tests/data/gen_gpt_twin.py   (any PyTorch; rewrites tests/data/gpt_twin_ref.txt)
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../bench/peers"))
from train import GPT  # noqa: E402  (the twins' model)
from weft_twin import M64, param_names, window_starts  # noqa: E402  (weft's batches and names)

BLOCKS, DIM, HEADS, CTX, BATCH, STEPS = 12, 32, 2, 1024, 2, 5


def verses(n):  # tests/weft_test.c: wt_write_verses
    w = ["and", "the", "LORD", "said", "unto", "Moses", "behold", "I", "will", "send", "thee", "into", "land", "of",
         "Egypt", "children", "Israel", "went", "up", "out", "house", "bondage"]
    s, out = 7, []
    for v in range(n):
        words = []
        for _ in range(12):
            s = (s * 6364136223846793005 + 1442695040888963407) & M64
            words.append(w[(s >> 33) % len(w)])
        out.append(f"{v // 30 + 1}:{v % 30 + 1} " + " ".join(words) + ".\n")
    return "".join(out).encode()


def wt_vals(n, lo, hi, seed):  # tests/weft_test.c
    s = (seed * 6364136223846793005 + 1442695040888963407) & M64
    v = np.empty(n)
    for i in range(n):
        s = (s * 6364136223846793005 + 1442695040888963407) & M64
        v[i] = lo + (hi - lo) * (s >> 11) / 9007199254740992.0
    return v


def batch(train, step, seed=1):  # src/data/text.c: weft_lm_batch
    starts = window_starts(len(train), BATCH, CTX, seed, step)
    x = np.stack([train[s:s + CTX] for s in starts])
    y = np.stack([train[s + 1:s + CTX + 1] for s in starts])
    return torch.tensor(x), torch.tensor(y)


names = param_names(BLOCKS)  # weft's parameter names in its order, and the twin's

model = GPT(c=DIM, ctx=CTX, heads=HEADS, blocks=BLOCKS).double()
params = dict(model.named_parameters())
with torch.no_grad():
    for i, (wn, tn) in enumerate(names):
        p = params[tn]
        if "ln" in wn or wn.startswith("2."):
            p.fill_(1.0 if wn.endswith(".weight") else 0.0)
            continue
        emb = wn in ("0.weight", "0.pos")
        fan_in = p.shape[1] if p.dim() == 2 else params[names[i - 1][1]].shape[1]
        a = math.sqrt(3.0) if emb else 1 / math.sqrt(fan_in)
        p.copy_(torch.tensor(wt_vals(p.numel(), -a, a, 1000 + i)).view_as(p))
start = {tn: params[tn].detach().clone() for _, tn in names}

text = np.frombuffer(verses(1500), dtype=np.uint8).astype(np.int64)
nv = int(len(text) * 0.1 + 0.5)
train = text[:len(text) - nv]
opt = torch.optim.AdamW(model.parameters(), 6e-4, betas=(0.9, 0.95), weight_decay=0.1)
lines = [f"# written by tests/data/gen_gpt_twin.py (torch {torch.__version__}, f64); do not edit"]
for s in range(STEPS):
    for g in opt.param_groups:
        g["lr"] = 6e-4 * (s + 1) / 50
    x, y = batch(train, s)
    loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    lines.append(f"loss {s + 1} {loss.item():.12g}")
for wn, tn in names:
    lines.append(f"dp {wn} {(params[tn].detach() - start[tn]).norm().item():.12g}")
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt_twin_ref.txt")
with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
print(f"wrote {path}: {len(names)} parameters, losses", [l.split()[2] for l in lines if l.startswith("loss")])
