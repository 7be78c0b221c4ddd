# PyTorch twin of `weft train models/kjv-gpt.cfg --steps N`: the same network
# (bench/peers/train.py's GPT), data (the cached KJV text, last 10% held out),
# batch 32 x 128, AdamW lr 1e-3 wd 0.01; prints the validation loss over 50
# batches after N steps, to compare with weft's final val_loss.
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

from common import PATTERN  # noqa: F401  (sets the thread count)
from train import GPT

steps = int(sys.argv[2]) if len(sys.argv) > 2 else 500
text = np.fromfile(os.path.expanduser("~/.cache/weft/kjv.txt"), dtype=np.uint8)
cut = int(len(text) * 0.9)
train, val = torch.from_numpy(text[:cut].astype(np.int64)), torch.from_numpy(text[cut:].astype(np.int64))
g = torch.Generator().manual_seed(1)


def batch(data, B=32, T=128):
    ix = torch.randint(0, len(data) - T - 1, (B,), generator=g)
    x = torch.stack([data[i:i + T] for i in ix])
    y = torch.stack([data[i + 1:i + T + 1] for i in ix])
    return x, y


torch.manual_seed(1)
model = GPT()
opt = torch.optim.AdamW(model.parameters(), 1e-3, weight_decay=0.01)
for s in range(steps):
    x, y = batch(train)
    loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
model.eval()
with torch.no_grad():
    vl = sum(F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1)).item()
             for x, y in (batch(val) for _ in range(50))) / 50
print(f"steps {steps} val_loss {vl:.4f} train_loss {loss.item():.4f}", flush=True)
