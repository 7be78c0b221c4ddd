# PyTorch twins for bench/graph_train.c's "graph mode vs PyTorch" lines:
# the same networks, optimisers and batch shapes as bench/peers/train.py, in
# training steps per second (graph_torch_* compare a weft graph-mode step with
# a PyTorch eager step). WEFT_BENCH_DEVICE=cuda runs them on the GPU, and adds
# graph_torch_gpt2_small_cuda (models/gpt2-small-bytes.cfg: bf16 autocast, SDPA).
import torch
import torch.nn as nn

import train
from common import selected

if __name__ == "__main__":
    torch.manual_seed(1)
    dev = train.DEVICE
    if selected("graph_torch_fmnist_mlp"):
        mlp = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                            nn.Linear(256, 10)).to(dev)
        train.workload("graph_torch_fmnist_mlp", mlp, torch.optim.Adam(mlp.parameters(), 1e-3),
                       torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,)), 1, "steps/s", 20, 200, 2.0)
    if selected("graph_torch_fmnist_cnn"):
        cnn = nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                            nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                            nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 10)).to(dev)
        train.workload("graph_torch_fmnist_cnn", cnn, torch.optim.Adam(cnn.parameters(), 1e-3),
                       torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,)), 1, "steps/s", 3, 20, 3.0)
    if selected("graph_torch_kjv_gpt"):
        gpt = train.GPT().to(dev)
        train.workload("graph_torch_kjv_gpt", gpt, torch.optim.AdamW(gpt.parameters(), 1e-3, weight_decay=0.01),
                       torch.randint(0, 256, (32, 128)), torch.randint(0, 256, (32, 128)), 1, "steps/s", 2, 10, 3.0)
    if selected("graph_torch_kjv_lstm"):
        lstm = train.LSTMLM().to(dev)
        train.workload("graph_torch_kjv_lstm", lstm, torch.optim.AdamW(lstm.parameters(), 1e-3),
                       torch.randint(0, 256, (32, 128)), torch.randint(0, 256, (32, 128)), 1, "steps/s", 2, 10, 3.0)
    if dev.type == "cuda" and selected("graph_torch_gpt2_small_cuda"):
        g2 = train.GPT(c=768, ctx=1024, heads=12, blocks=12, sdpa=True, gelu="tanh").to(dev)
        opt2 = torch.optim.AdamW(g2.parameters(), 6e-4, betas=(0.9, 0.95), weight_decay=0.1)
        train.workload("graph_torch_gpt2_small_cuda", g2, opt2, torch.randint(0, 256, (8, 1024)),
                       torch.randint(0, 256, (8, 1024)), 1, "steps/s", 3, 10, 3.0, autocast=torch.bfloat16)
