# PyTorch twins for bench/graph_train.c's "graph mode vs PyTorch" lines:
# the same networks, optimisers and batch shapes as bench/peers/train.py, in
# training steps per second (graph_torch_* compare a weft graph-mode step).
import torch

import train
from common import selected

if __name__ == "__main__":
    torch.manual_seed(1)
    import torch.nn as nn
    if selected("graph_torch_fmnist_mlp"):
        mlp = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                            nn.Linear(256, 10))
        train.workload("graph_torch_fmnist_mlp", mlp, torch.optim.Adam(mlp.parameters(), 1e-3),
                       torch.randn(128, 1, 28, 28), torch.randint(0, 10, (128,)), 1, "steps/s", 20, 200, 2.0)
    if selected("graph_torch_kjv_gpt"):
        gpt = train.GPT()
        train.workload("graph_torch_kjv_gpt", gpt, torch.optim.AdamW(gpt.parameters(), 1e-3, weight_decay=0.01),
                       torch.randint(0, 256, (32, 128)), torch.randint(0, 256, (32, 128)), 1, "steps/s", 2, 10, 3.0)
