# PyTorch twin of bench/softmax.c: softmax over the last dim of a (4096,1024)
# f32 tensor that requires grad, forward + backward with a random gradient;
# ms per iteration, best of several reps.
import os
import sys
import time

import torch

torch.set_num_threads(int(os.environ.get("WEFT_NUM_THREADS", os.cpu_count())))
pat = sys.argv[1] if len(sys.argv) > 1 else ""


def best_of(fn, reps=7, min_iter=5, min_s=0.15):
    best = 1e30
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


name = "softmax_4096x1024"
if not pat or pat in name:
    torch.manual_seed(1)
    x = torch.randn(4096, 1024, requires_grad=True)
    g = torch.rand(4096, 1024)

    def step():
        y = torch.softmax(x, -1)
        y.backward(g)
        x.grad = None

    print(f"{name} {best_of(step) * 1e3:.4g} ms 0", flush=True)
