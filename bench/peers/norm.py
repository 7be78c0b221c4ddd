# PyTorch twin of bench/norm.c: layer_norm forward + backward on (4096,1024) f32.
import torch

from common import best_of, report, selected

if selected("layernorm_4096x1024"):
    torch.manual_seed(0)
    x = torch.randn(4096, 1024, requires_grad=True)
    gy = torch.randn(4096, 1024)
    w = torch.randn(1024, requires_grad=True)
    b = torch.randn(1024, requires_grad=True)

    def step():
        x.grad = w.grad = b.grad = None
        y = torch.nn.functional.layer_norm(x, (1024,), w, b, 1e-5)
        y.backward(gy)

    report("layernorm_4096x1024", best_of(step, 5, 10, 0.2) * 1e3, "ms", False)
