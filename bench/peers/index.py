# PyTorch twin of bench/index.c (same shapes, same output protocol).
import os, sys, time
import torch

torch.set_num_threads(int(os.environ["WEFT_NUM_THREADS"]))
pat = sys.argv[1] if len(sys.argv) > 1 else ""


def best(fn, reps=5, min_iter=5, min_s=0.2):
    b = 1e30
    for _ in range(reps):
        it, t0 = 0, time.perf_counter()
        while True:
            fn()
            it += 1
            el = time.perf_counter() - t0
            if it >= min_iter and el >= min_s:
                break
        b = min(b, el / it)
    return b


def report(name, fn, **kw):
    if pat and pat not in name:
        return
    print(f"{name} {best(fn, **kw) * 1e6:.4g} us 0", flush=True)


torch.manual_seed(0)
w = torch.randn(32000, 512)
ix = torch.randint(0, 32000, (8, 512))
report("embedding_fwd", lambda: torch.nn.functional.embedding(ix, w))
wl = torch.randn(32000, 512, requires_grad=True)
g = torch.randn(8, 512, 512)


def fwd_bwd():
    y = torch.nn.functional.embedding(ix, wl)
    y.backward(g)
    wl.grad = None


report("embedding_fwd_bwd", fwd_bwd, min_iter=3, min_s=0.3)
x = torch.randn(256, 1024)
isel = torch.randint(0, 1024, (512,))
report("index_select_dim1", lambda: torch.index_select(x, 1, isel))
ig = torch.randint(0, 1024, (256, 1024))
report("gather_dim1", lambda: torch.gather(x, 1, ig))
report("scatter_add_dim1", lambda: x.scatter_add(1, ig, x))
report("concat_dim1", lambda: torch.cat([x, x, x], 1))
