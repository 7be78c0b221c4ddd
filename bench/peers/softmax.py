# PyTorch twin of bench/softmax.c: softmax over the last dim of a (4096,1024)
# f32 tensor that requires grad, forward + backward with a random gradient;
# ms per iteration, best of several reps.
import torch

from common import best_of, report, selected

if selected("softmax_4096x1024"):
    torch.manual_seed(1)
    x = torch.randn(4096, 1024, requires_grad=True)
    g = torch.rand(4096, 1024)

    def step():
        y = torch.softmax(x, -1)
        y.backward(g)
        x.grad = None

    report("softmax_4096x1024", best_of(step, 7, 5, 0.15) * 1e3, "ms", False)
