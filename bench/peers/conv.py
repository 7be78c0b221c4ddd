# PyTorch twin of bench/conv.c: two conv2d layers on an FMNIST-sized batch,
# forward + backward (grads for both weights and biases), best of several reps.
import torch

from common import best_of, report, selected

if selected("conv2d_fmnist"):
    torch.manual_seed(0)
    x = torch.randn(64, 1, 28, 28)
    w1 = torch.randn(32, 1, 3, 3, requires_grad=True)
    b1 = torch.randn(32, requires_grad=True)
    w2 = (torch.randn(64, 32, 3, 3) * 0.1).requires_grad_()
    b2 = torch.randn(64, requires_grad=True)
    gy = torch.randn(64, 64, 28, 28)

    def step():
        for p in (w1, b1, w2, b2):
            p.grad = None
        h = torch.nn.functional.conv2d(x, w1, b1, padding=1)
        y = torch.nn.functional.conv2d(h, w2, b2, padding=1)
        y.backward(gy)

    for _ in range(3):
        step()
    report("conv2d_fmnist", best_of(step, 5, 3, 0.3) * 1e3, "ms", False)
