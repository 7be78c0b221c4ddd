# PyTorch twin of `weft train MODEL --steps N` for the byte-level GPTs, to compare validation losses (the
# learning checks of issues 3 and 16): the same network (bench/peers/train.py's GPT), data (the cached KJV text,
# last 10% held out), batch, optimiser and learning-rate schedule; prints the validation loss over 50 batches
# after N steps, to compare with weft's final val_loss.
#   python3 kjv_gpt_train.py '' N            models/kjv-gpt.cfg: 32 x 128, AdamW lr 1e-3 wd 0.01, on the CPU
#   python3 kjv_gpt_train.py '' N gpt2       models/gpt2-small-bytes.cfg: 8 x 1024, d 768, 12 blocks of 12 heads,
#                                            AdamW lr 6e-4 betas (0.9, 0.95) wd 0.1 after 50 steps of linear
#                                            warm-up, bf16 autocast, tanh GELU, on cuda (SDPA)
#   python3 kjv_gpt_train.py '' N gpt2 f32   the same without autocast (f32 throughout)
#   python3 kjv_gpt_train.py '' N gpt2 bf16 S  with seed S (default 1) for the initial weights and the batches,
#                                            to see how far two seeds' runs differ
#   python3 kjv_gpt_train.py '' N gpt2 bf16 S CKPT   weft's own start: the initial weights read from CKPT (a weft
#                                            checkpoint, e.g. of `weft train ... --steps 1 --lr 1e-30`, whose one step
#                                            leaves the weights as they were drawn), the training batches drawn as
#                                            weft_lm_batch draws them with seed S, and the validation loss over
#                                            weft's own evaluation windows: the two frameworks then see the same
#                                            weights and the same text, and differ only in their arithmetic
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from common import PATTERN  # noqa: F401  (sets the thread count)
from train import GPT
from weft_twin import param_names, window_starts

steps = int(sys.argv[2]) if len(sys.argv) > 2 else 500
gpt2 = len(sys.argv) > 3 and sys.argv[3] == "gpt2"
low = gpt2 and not (len(sys.argv) > 4 and sys.argv[4] == "f32")  # `... gpt2 f32`: no autocast
seed = int(sys.argv[5]) if len(sys.argv) > 5 else 1
ckpt = sys.argv[6] if len(sys.argv) > 6 else None
dev = torch.device("cuda" if gpt2 else "cpu")
B, T = (8, 1024) if gpt2 else (32, 128)
text = np.fromfile(os.path.expanduser("~/.cache/weft/kjv.txt"), dtype=np.uint8)
cut = len(text) - int(len(text) * 0.1 + 0.5)  # weft_train_val_split: the last 10%, rounded
train, val = torch.from_numpy(text[:cut].astype(np.int64)), torch.from_numpy(text[cut:].astype(np.int64))
g = torch.Generator().manual_seed(seed)


def windows(data, ix):
    x = torch.stack([data[i:i + T] for i in ix])
    y = torch.stack([data[i + 1:i + T + 1] for i in ix])
    return x.to(dev), y.to(dev)


def batch(data, s=None, bseed=None):
    if ckpt is None:
        return windows(data, torch.randint(0, len(data) - T - 1, (B,), generator=g).tolist())
    return windows(data, window_starts(len(data), B, T, bseed, s))


def load_weft(model, path):
    names = param_names(len(model.blocks))  # (weft's checkpoint's "model." tensors, the twin's)
    with open(path, "rb") as f:  # safetensors: an 8-byte header length, a JSON header, the data
        n = int.from_bytes(f.read(8), "little")
        head, data = json.loads(f.read(n)), f.read()
    params = dict(model.named_parameters())
    with torch.no_grad():
        for wn, tn in names:
            h = head["model." + wn]
            if h["dtype"] != "F32":
                sys.exit(f"{path}: model.{wn} is {h['dtype']}, expected F32")
            a, b = h["data_offsets"]
            w = torch.from_numpy(np.frombuffer(data[a:b], dtype=np.float32).copy()).view(h["shape"])
            if w.shape != params[tn].shape:
                sys.exit(f"{path}: model.{wn} has shape {tuple(w.shape)}, the twin's {tn} {tuple(params[tn].shape)}")
            params[tn].copy_(w)


def loss_of(model, x, y):
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=low):
        return F.cross_entropy(model(x).reshape(-1, 256).float(), y.reshape(-1))


torch.manual_seed(seed)
if gpt2:
    model = GPT(c=768, ctx=1024, heads=12, blocks=12, sdpa=True, gelu="tanh").to(dev)
    opt = torch.optim.AdamW(model.parameters(), 6e-4, betas=(0.9, 0.95), weight_decay=0.1)
    # weft's step k (from 1) runs at lr * k / warmup during the warm-up: LambdaLR's factor at its count k - 1
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / 50, 1.0))
else:
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), 1e-3, weight_decay=0.01)
    sched = None
if ckpt:
    load_weft(model, ckpt)
# TWIN_LOG=1: each step's loss ("step S LOSS", as weft's metrics.csv with log_every = 1); TWIN_EVAL_EVERY=K: the
# validation loss every K steps ("eval S LOSS")
log, eval_every = os.environ.get("TWIN_LOG") == "1", int(os.environ.get("TWIN_EVAL_EVERY", "0"))


def val_loss():
    model.eval()
    with torch.no_grad():
        # weft evaluates fixed windows (src/train/train.c: seed 0xe7a1, step i)
        vl = sum(loss_of(model, *batch(val, i, 0xe7a1)).item() for i in range(50)) / 50
    model.train()
    return vl


loss = torch.tensor(float("nan"))
for s in range(steps):
    x, y = batch(train, s, seed)
    loss = loss_of(model, x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if sched:
        sched.step()
    if log:
        print(f"step {s + 1} {loss.item():.6f}", flush=True)
    if eval_every and (s + 1) % eval_every == 0 and s + 1 < steps:
        print(f"eval {s + 1} {val_loss():.4f}", flush=True)
print(f"steps {steps} val_loss {val_loss():.4f} train_loss {loss.item():.4f}", flush=True)
