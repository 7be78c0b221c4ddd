# PyTorch twin of `weft train MODEL --steps N` for the byte-level GPTs, to compare validation losses (the
# learning checks of issues 3 and 16): the same network (bench/peers/train.py's GPT), data (the cached KJV text,
# last 10% held out), batch, optimiser and learning-rate schedule; prints the validation loss over 50 batches
# after N steps, to compare with weft's final val_loss.
#   python3 kjv_gpt_train.py '' N            models/kjv-gpt.cfg: 32 x 128, AdamW lr 1e-3 wd 0.01, on the CPU
#   python3 kjv_gpt_train.py '' N gpt2       models/gpt2-small-bytes.cfg: 8 x 1024, d 768, 12 blocks of 12 heads,
#                                            AdamW lr 6e-4 betas (0.9, 0.95) wd 0.1 after 50 steps of linear
#                                            warm-up, bf16 autocast, on cuda (SDPA)
#   python3 kjv_gpt_train.py '' N gpt2 f32   the same without autocast (f32 throughout)
#   python3 kjv_gpt_train.py '' N gpt2 bf16 S  with seed S (default 1) for the initial weights and the batches,
#                                            to see how far two seeds' runs differ
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from common import PATTERN  # noqa: F401  (sets the thread count)
from train import GPT

steps = int(sys.argv[2]) if len(sys.argv) > 2 else 500
gpt2 = len(sys.argv) > 3 and sys.argv[3] == "gpt2"
low = gpt2 and not (len(sys.argv) > 4 and sys.argv[4] == "f32")  # `... gpt2 f32`: no autocast
seed = int(sys.argv[5]) if len(sys.argv) > 5 else 1
dev = torch.device("cuda" if gpt2 else "cpu")
B, T = (8, 1024) if gpt2 else (32, 128)
text = np.fromfile(os.path.expanduser("~/.cache/weft/kjv.txt"), dtype=np.uint8)
cut = int(len(text) * 0.9)
train, val = torch.from_numpy(text[:cut].astype(np.int64)), torch.from_numpy(text[cut:].astype(np.int64))
g = torch.Generator().manual_seed(seed)


def batch(data):
    ix = torch.randint(0, len(data) - T - 1, (B,), generator=g)
    x = torch.stack([data[i:i + T] for i in ix])
    y = torch.stack([data[i + 1:i + T + 1] for i in ix])
    return x.to(dev), y.to(dev)


def loss_of(model, x, y):
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=low):
        return F.cross_entropy(model(x).reshape(-1, 256).float(), y.reshape(-1))


torch.manual_seed(seed)
if gpt2:
    model = GPT(c=768, ctx=1024, heads=12, blocks=12, sdpa=True).to(dev)
    opt = torch.optim.AdamW(model.parameters(), 6e-4, betas=(0.9, 0.95), weight_decay=0.1)
    # weft's step k (from 1) runs at lr * k / warmup during the warm-up: LambdaLR's factor at its count k - 1
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / 50, 1.0))
else:
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), 1e-3, weight_decay=0.01)
    sched = None
for s in range(steps):
    x, y = batch(train)
    loss = loss_of(model, x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if sched:
        sched.step()
model.eval()
with torch.no_grad():
    vl = sum(loss_of(model, *batch(val)).item() for _ in range(50)) / 50
print(f"steps {steps} val_loss {vl:.4f} train_loss {loss.item():.4f}", flush=True)
