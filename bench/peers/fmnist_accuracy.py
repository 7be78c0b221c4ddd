# PyTorch twin of `weft train models/fmnist-mlp.cfg` (and -cnn with "cnn") on
# the real Fashion-MNIST: same network, normalisation, optimiser, batch and
# epochs; prints the test accuracy after each epoch. For docs/benchmarks.md.
import gzip
import math
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from common import PATTERN  # noqa: F401  (sets the thread count)

D = "/usr/share/datasets/fashion-mnist/"


def idx(name, offset):
    with gzip.open(D + name) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


def load(split):
    x = idx(f"{split}-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28).astype(np.float32)
    y = idx(f"{split}-labels-idx1-ubyte.gz", 8).astype(np.int64)
    return torch.from_numpy((x / 255 - 0.2860) / 0.3530), torch.from_numpy(y)


kind = sys.argv[2] if len(sys.argv) > 2 else "mlp"
torch.manual_seed(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
xtr, ytr = load("train")
xte, yte = load("t10k")
if kind == "cnn":
    net = nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 5, padding=2),
                        nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 10))
    batch = 64
else:
    net = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                        nn.Linear(256, 10))
    batch = 128
opt = torch.optim.Adam(net.parameters(), 1e-3)
# The MLP file decays the rate on a cosine from 1e-3 to 0 over all steps
# (`schedule = cosine`); weft's step k (from 1) uses lr(k), as here.
total = 10 * ((len(xtr) + batch - 1) // batch)
k = 0
for epoch in range(10):
    perm = torch.randperm(len(xtr))
    for i in range(0, len(xtr), batch):
        idxs = perm[i:i + batch]
        k += 1
        if kind != "cnn":
            opt.param_groups[0]["lr"] = 1e-3 * 0.5 * (1 + math.cos(math.pi * k / total))
        loss = F.cross_entropy(net(xtr[idxs]), ytr[idxs])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    with torch.no_grad():
        acc = (net(xte).argmax(1) == yte).float().mean().item()
    print(f"epoch {epoch + 1} test_acc {acc:.4f}", flush=True)
