#!/usr/bin/python3
"""ONNX models exported by PyTorch, with PyTorch's outputs, for tests/graph/test_onnx_models.c.

Two small models with fixed seeded weights, exported by torch.onnx.export (the TorchScript exporter of
Debian's python3-torch 1.13, opset 17) with a symbolic batch dim, as users' models come:
  onnx_gpt.onnx  a GPT: token + position embeddings, one pre-LN block (causal self-attention written out:
                 matmul, scale, mask, softmax; an exact-GELU MLP, which the exporter writes with Erf), the final
                 norm and the head; input "idx" (batch, 8) int64, output "logits" (batch, 8, 16).
  onnx_cnn.onnx  a CNN: Conv (3x3, pad 1) + BatchNormalization (inference) + ReLU + MaxPool 2 + Conv (stride 2) + ReLU +
                 Flatten + Linear; input "x" (batch, 1, 8, 8) f32, output "y" (batch, 3).
  onnx_rnn.onnx  recurrent layers: a bidirectional GRU (the exporter writes linear_before_reset = 1), a 2-layer
                 LSTM, an Elman RNN with ReLU, all batch first; input "x" (batch, 6, 4) f32, output "y" (batch, 6, 4).
  onnx_conv1d.onnx  1-D windows: ConstantPad1d (1, 2) of 0.5, Conv1d (k 3, pad 1), ReflectionPad1d 2,
                 ReplicationPad1d (1, 0), MaxPool1d 2, AvgPool1d (k 3, stride 2, pad 1, count_include_pad False),
                 ConvTranspose1d (k 3, stride 2, pad 1, output_padding 1), ReLU; input "x" (batch, 2, 12) f32,
                 output "y" (batch, 3, 10).
The exporter's shape arithmetic (Shape, Gather, Unsqueeze, Concat feeding Reshape) is kept as it writes it.
onnx_twins_ref.txt holds each model's input and PyTorch's output at batch 3, one tensor a line:
  <name> <ndim> <sizes...> <values...>   (%.9g)
and each file passes onnx.checker.check_model(full_check=True). Also onnx_matmul_{vm,mv,vv}.onnx: one MatMul with a
1-D operand ((4)@(2,4,3), (2,3,4)@(4), (4)@(4)), which numpy's matmul promotes (test_onnx_models computes them).

Run:  /usr/bin/python3 tests/data/gen_onnx_twins.py   (rewrites the files; `... rnn` writes only onnx_rnn.onnx
and replaces the rnn/ lines of onnx_twins_ref.txt, `... conv1d` the same for onnx_conv1d.onnx and conv1d/)
"""
import math
import os

import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(2026)
V, T, C, NH = 16, 8, 16, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fc2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(b, t, NH, c // NH).transpose(1, 2)
        k = k.view(b, t, NH, c // NH).transpose(1, 2)
        v = v.view(b, t, NH, c // NH).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // NH))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.block, self.ln_f, self.head = Block(), nn.LayerNorm(C), nn.Linear(C, V, bias=False)

    def forward(self, idx):
        pos = torch.arange(0, idx.shape[1], dtype=torch.long).unsqueeze(0)
        return self.head(self.ln_f(self.block(self.wte(idx) + self.wpe(pos))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.bn = nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.c2, self.fc = nn.Conv2d(4, 6, 3, stride=2, padding=1), nn.Linear(6 * 2 * 2, 3)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.c1(x))), 2)
        return self.fc(torch.flatten(F.relu(self.c2(x)), 1))


class RNNs(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(4, 5, batch_first=True, bidirectional=True)
        self.lstm = nn.LSTM(10, 3, num_layers=2, batch_first=True)
        self.rnn = nn.RNN(3, 4, nonlinearity="relu", batch_first=True)

    def forward(self, x):
        return self.rnn(self.lstm(self.gru(x)[0])[0])[0]


class Conv1D(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(2, 4, 3, padding=1)
        self.ct = nn.ConvTranspose1d(4, 3, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x):
        x = self.c1(F.pad(x, (1, 2), value=0.5))
        x = F.pad(F.pad(x, (2, 2), mode="reflect"), (1, 0), mode="replicate")
        x = F.avg_pool1d(F.max_pool1d(x, 2), 3, stride=2, padding=1, count_include_pad=False)
        return F.relu(self.ct(x))


def line(name, t):
    t = t.detach().to(torch.float64).contiguous()
    return " ".join([name, str(t.dim())] + [str(s) for s in t.shape] + ["%.9g" % v for v in t.flatten().tolist()])


def export(model, x, path, in_name, out_name):
    model.eval()
    # PRESERVE (the model is in eval mode) keeps BatchNormalization a node of its own: EVAL folds it into the conv
    torch.onnx.export(model, (x,), path, input_names=[in_name], output_names=[out_name], opset_version=17,
                      dynamic_axes={in_name: {0: "batch"}, out_name: {0: "batch"}},
                      training=torch.onnx.TrainingMode.PRESERVE)
    onnx.checker.check_model(onnx.load(path), full_check=True)
    with torch.no_grad():
        return model(x)


def rnn_only():
    torch.manual_seed(7)
    x = torch.randn(3, 6, 4)
    y = export(RNNs(), x, os.path.join(HERE, "onnx_rnn.onnx"), "x", "y")
    path = os.path.join(HERE, "onnx_twins_ref.txt")
    with open(path) as f:
        keep = [ln.rstrip("\n") for ln in f if not ln.startswith("rnn/")]
    with open(path, "w") as f:
        f.write("\n".join(keep + [line("rnn/x", x), line("rnn/y", y)]) + "\n")


def conv1d_only():
    torch.manual_seed(11)
    model, x = Conv1D(), torch.randn(3, 2, 12)
    y = export(model, x, os.path.join(HERE, "onnx_conv1d.onnx"), "x", "y")
    path = os.path.join(HERE, "onnx_twins_ref.txt")
    with open(path) as f:
        keep = [ln.rstrip("\n") for ln in f if not ln.startswith("conv1d/")]
    with open(path, "w") as f:
        f.write("\n".join(keep + [line("conv1d/x", x), line("conv1d/y", y)]) + "\n")


def main():
    gpt, cnn = GPT(), CNN()
    with torch.no_grad():  # running statistics that are not 0 and 1
        cnn.bn.running_mean.uniform_(-0.5, 0.5)
        cnn.bn.running_var.uniform_(0.5, 2.0)
    idx = torch.randint(0, V, (3, T))
    x = torch.randn(3, 1, 8, 8)
    out = [line("gpt/idx", idx), line("gpt/logits", export(gpt, idx, os.path.join(HERE, "onnx_gpt.onnx"), "idx", "logits")),
           line("cnn/x", x), line("cnn/y", export(cnn, x, os.path.join(HERE, "onnx_cnn.onnx"), "x", "y"))]
    with open(os.path.join(HERE, "onnx_twins_ref.txt"), "w") as f:
        f.write("\n".join(out) + "\n")
    for name, sa, sb in [("vm", [4], [2, 4, 3]), ("mv", [2, 3, 4], [4]), ("vv", [4], [4])]:
        shape = list(torch.matmul(torch.zeros(sa), torch.zeros(sb)).shape)
        vi = [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s) for n, s in (("a", sa), ("b", sb), ("y", shape))]
        g = onnx.helper.make_graph([onnx.helper.make_node("MatMul", ["a", "b"], ["y"])], "g", vi[:2], vi[2:])
        m = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)])
        m.ir_version = 8
        onnx.checker.check_model(m, full_check=True)
        onnx.save(m, os.path.join(HERE, "onnx_matmul_%s.onnx" % name))


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["conv1d"]:
        conv1d_only()
        sys.exit(0)
    if sys.argv[1:] != ["rnn"]:
        main()
    rnn_only()
    conv1d_only()
