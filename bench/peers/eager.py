# PyTorch twin of bench/eager.c (same names, units and loop bodies).
import os, sys, time
import torch

torch.set_num_threads(int(os.environ.get("WEFT_NUM_THREADS", os.cpu_count())))
pat = sys.argv[1] if len(sys.argv) > 1 else ""

def best(body, reps, min_iter, min_s):
    b = 1e30
    for _ in range(reps):
        it, t0 = 0, time.perf_counter()
        while True:
            body(); it += 1
            el = time.perf_counter() - t0
            if it >= min_iter and el >= min_s: break
        b = min(b, el / it)
    return b

def report(name, v, unit, hib):
    print(f"{name} {v:.4g} {unit} {hib}", flush=True)

if pat in "eager_add_1elem" or not pat:
    a, b = torch.ones(1), torch.ones(1)
    report("eager_add_1elem", best(lambda: torch.add(a, b), 5, 20000, 0.2) * 1e6, "us/op", 0)
if pat in "eager_mul_grad_backward_1elem" or not pat:
    x = torch.ones(1, requires_grad=True); w = torch.full((1,), 2.0)
    def step():
        y = x * w
        y.backward()
    report("eager_mul_grad_backward_1elem", best(step, 5, 20000, 0.2) * 1e6, "us/op", 0)
if pat in "add_16M_fresh_output" or not pat:
    n = 16 << 20
    a, b = torch.rand(n), torch.rand(n)
    s = best(lambda: torch.add(a, b), 5, 10, 0.3)
    report("add_16M_fresh_output", 3 * 4 * n / s / 1e9, "GB/s", 1)
