# PyTorch twin of bench/index.c (same shapes, same output protocol).
import torch

from common import best_of, report, selected


def run(name, fn, **kw):
    if selected(name):
        report(name, best_of(fn, **kw) * 1e6, "us", False)


torch.manual_seed(0)
w = torch.randn(32000, 512)
ix = torch.randint(0, 32000, (8, 512))
run("embedding_fwd", lambda: torch.nn.functional.embedding(ix, w))
wl = torch.randn(32000, 512, requires_grad=True)
g = torch.randn(8, 512, 512)


def fwd_bwd():
    y = torch.nn.functional.embedding(ix, wl)
    y.backward(g)
    wl.grad = None


run("embedding_fwd_bwd", fwd_bwd, min_iter=3, min_s=0.3)
x = torch.randn(256, 1024)
isel = torch.randint(0, 1024, (512,))
run("index_select_dim1", lambda: torch.index_select(x, 1, isel))
ig = torch.randint(0, 1024, (256, 1024))
run("gather_dim1", lambda: torch.gather(x, 1, ig))
run("scatter_add_dim1", lambda: x.scatter_add(1, ig, x))
run("concat_dim1", lambda: torch.cat([x, x, x], 1))
