# PyTorch twin of bench/norm.c: layer_norm forward + backward on (4096,1024) f32.
import os
import sys
import time

import torch

torch.set_num_threads(int(os.environ["WEFT_NUM_THREADS"]))
pattern = sys.argv[1] if len(sys.argv) > 1 else ""


def best_of(fn, reps=5, min_iter=10, min_s=0.2):
    best = float("inf")
    for _ in range(reps):
        it, t0 = 0, time.perf_counter()
        while True:
            fn()
            it += 1
            el = time.perf_counter() - t0
            if it >= min_iter and el >= min_s:
                break
        best = min(best, el / it)
    return best


name = "layernorm_4096x1024"
if name.find(pattern) >= 0 or not pattern:
    torch.manual_seed(0)
    x = torch.randn(4096, 1024, requires_grad=True)
    gy = torch.randn(4096, 1024)
    w = torch.randn(1024, requires_grad=True)
    b = torch.randn(1024, requires_grad=True)

    def step():
        x.grad = w.grad = b.grad = None
        y = torch.nn.functional.layer_norm(x, (1024,), w, b, 1e-5)
        y.backward(gy)

    print(f"{name} {best_of(step) * 1e3:.4g} ms 0", flush=True)
