# PyTorch twins of the four standard workloads (models/*.cfg), same shapes,
# optimisers and synthetic batches as bench/train.c.
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from common import best_of, report, selected

# WEFT_BENCH_DEVICE=cuda runs the same workloads on the GPU (as bench/train.c does)
DEVICE = torch.device(os.environ.get("WEFT_BENCH_DEVICE", "cpu"))



class Block(nn.Module):  # pre-LayerNorm transformer block, GELU MLP 4x (gelu: F.gelu's approximate, the cfg's gelu)
    def __init__(self, c, heads, sdpa=False, gelu="none"):
        super().__init__()
        self.heads, self.sdpa, self.gelu = heads, sdpa, gelu
        self.ln1, self.ln2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.fc, self.fc_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:  # the fused kernel (cuDNN / flash attention on a GPU)
            return self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.heads)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), 1)
        att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate=self.gelu))


class GPT(nn.Module):
    def __init__(self, vocab=256, c=128, ctx=128, heads=4, blocks=4, sdpa=False, gelu="none"):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, c), nn.Embedding(ctx, c)
        self.blocks = nn.Sequential(*[Block(c, heads, sdpa, gelu) for _ in range(blocks)])
        self.ln, self.head = nn.LayerNorm(c), nn.Linear(c, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


class LSTMLM(nn.Module):  # cls=nn.GRU: models/kjv-gru.cfg
    def __init__(self, vocab=256, h=256, cls=nn.LSTM):
        super().__init__()
        self.emb, self.lstm, self.head = nn.Embedding(vocab, h), cls(h, h, batch_first=True), nn.Linear(h, vocab)

    def forward(self, idx):
        return self.head(self.lstm(self.emb(idx))[0])


def workload(name, model, opt, x, y, per_step, unit, warmup, min_steps, min_s, autocast=None):
    if not selected(name):
        return
    x, y = x.to(DEVICE), y.to(DEVICE)

    def step():
        with torch.autocast(DEVICE.type, dtype=autocast, enabled=autocast is not None):
            out = model(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if DEVICE.type == "cuda":
            torch.cuda.synchronize()  # time the GPU's work, not the queueing

    for _ in range(warmup):
        step()
    report(name, per_step / best_of(step, 1, min_steps, min_s), unit, True)


if __name__ == "__main__":
    torch.manual_seed(1)
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                        nn.Linear(256, 10)).to(DEVICE)
    workload("train_fmnist_mlp", mlp, torch.optim.Adam(mlp.parameters(), 1e-3), torch.randn(128, 1, 28, 28),
             torch.randint(0, 10, (128,)), 128, "samples/s", 20, 200, 2.0)
    cnn = nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 5, padding=2),
                        nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(),
                        nn.Linear(512, 10)).to(DEVICE)
    workload("train_fmnist_cnn", cnn, torch.optim.Adam(cnn.parameters(), 1e-3), torch.randn(64, 1, 28, 28),
             torch.randint(0, 10, (64,)), 64, "samples/s", 3, 20, 3.0)
    gpt = GPT().to(DEVICE)
    workload("train_kjv_gpt", gpt, torch.optim.AdamW(gpt.parameters(), 1e-3, weight_decay=0.01),
             torch.randint(0, 256, (32, 128)), torch.randint(0, 256, (32, 128)), 32 * 128, "tokens/s", 2, 10, 3.0)
    lstm = LSTMLM().to(DEVICE)
    workload("train_kjv_lstm", lstm, torch.optim.AdamW(lstm.parameters(), 1e-3), torch.randint(0, 256, (32, 128)),
             torch.randint(0, 256, (32, 128)), 32 * 128, "tokens/s", 2, 10, 3.0)
    gru = LSTMLM(cls=nn.GRU).to(DEVICE)
    workload("train_kjv_gru", gru, torch.optim.AdamW(gru.parameters(), 1e-3), torch.randint(0, 256, (32, 128)),
             torch.randint(0, 256, (32, 128)), 32 * 128, "tokens/s", 2, 10, 3.0)
    if DEVICE.type == "cuda":  # models/gpt2-small-bytes.cfg: bf16 autocast, AdamW (0.9, 0.95), weight decay 0.1, tanh GELU
        g2 = GPT(c=768, ctx=1024, heads=12, blocks=12, sdpa=True, gelu="tanh").to(DEVICE)
        x2, y2 = torch.randint(0, 256, (8, 1024)), torch.randint(0, 256, (8, 1024))
        for name, m in (("train_gpt2_small_cuda", g2), ("train_gpt2_small_cuda_vs_compile", torch.compile(g2))):
            opt2 = torch.optim.AdamW(g2.parameters(), 6e-4, betas=(0.9, 0.95), weight_decay=0.1)
            workload(name, m, opt2, x2, y2, 8 * 1024, "tokens/s", 3, 10, 3.0, autocast=torch.bfloat16)
