# PyTorch twin of bench/conv.c: two conv2d layers on an FMNIST-sized batch,
# forward + backward (grads for both weights and biases), best of several reps.
import os, sys, time
import torch

torch.set_num_threads(int(os.environ.get("WEFT_NUM_THREADS", "1")))
pat = sys.argv[1] if len(sys.argv) > 1 else ""
if pat and pat not in "conv2d_fmnist":
    sys.exit(0)
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
best = 1e30
for _ in range(5):
    it, t0 = 0, time.perf_counter()
    while True:
        step()
        it += 1
        el = time.perf_counter() - t0
        if it >= 3 and el >= 0.3:
            break
    best = min(best, el / it)
print(f"conv2d_fmnist {best * 1e3:.4g} ms 0")
