# PyTorch twin of bench/eager.c (same names, units and loop bodies).
import torch

from common import best_of, report, selected

if selected("eager_add_1elem"):
    a, b = torch.ones(1), torch.ones(1)
    report("eager_add_1elem", best_of(lambda: torch.add(a, b), 5, 20000, 0.2) * 1e6, "us/op", False)
if selected("eager_mul_grad_backward_1elem"):
    x = torch.ones(1, requires_grad=True)
    w = torch.full((1,), 2.0)

    def step():
        y = x * w
        y.backward()

    report("eager_mul_grad_backward_1elem", best_of(step, 5, 20000, 0.2) * 1e6, "us/op", False)
if selected("add_16M_fresh_output"):
    n = 16 << 20
    a, b = torch.rand(n), torch.rand(n)
    s = best_of(lambda: torch.add(a, b), 5, 10, 0.3)
    report("add_16M_fresh_output", 3 * 4 * n / s / 1e9, "GB/s", True)
