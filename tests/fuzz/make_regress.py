#!/usr/bin/env python3
"""Writes the regression inputs of tests/fuzz/regress/ that are reconstructed
from descriptions (the ten defects of issue 14 and the ones found since by
reading the infer functions), each next to the message it must now get
(expect.txt). Inputs that a fuzzer found are copied there as they were found
(see docs/reliability.md) and are not made here.

    python3 tests/fuzz/make_regress.py            # from the repository root
"""
import json
import math
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REGRESS = os.path.join(ROOT, "tests", "fuzz", "regress")
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def safetensors(header, data=b""):
    """A safetensors file: 8-byte little-endian header length, the JSON header (space-padded to 8), data."""
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def graph_file(nodes, version="1", tensors=None):
    meta = {"format": "weft.graph", "version": version, "graph": json.dumps({"nodes": nodes})}
    header, data = {"__metadata__": meta}, b""
    for name, (dtype, shape, blob) in (tensors or {}).items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    return safetensors(header, data)


def ph(name, shape, dtype="f32"):
    return {"name": name, "kind": "placeholder", "out": [{"dtype": dtype, "shape": shape}]}


def op(name, opname, inputs, out_shape, i=None, f=None, dtype="f32"):
    n = {"name": name, "kind": "op", "op": opname, "in": inputs, "out": [{"dtype": dtype, "shape": out_shape}]}
    if i is not None:  # past 2^53 an int attr is a decimal string (docs/graph.md)
        n["i"] = [v if abs(v) <= 2**53 else str(v) for v in i]
    if f is not None:
        n["f"] = f
    return n


entries = {}  # harness -> [(file, message piece, what it did before)]


def put(harness, name, data, expect, before):
    d = os.path.join(REGRESS, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as fh:
        fh.write(data if isinstance(data, bytes) else data.encode())
    entries.setdefault(harness, []).append((name, expect, before))


# ---- issue 14: graph files ----
put("graph", "i14-1-slice-step0.wgraph",
    graph_file([ph("x", [4, 6]), op("s", "slice", [0], [4, 6], i=[0, 0, 4, 0])]),
    "step must be positive", "integer division by zero in infer_slice (SIGFPE)")
put("graph", "i14-2-slice-dim100.wgraph",
    graph_file([ph("x", [4, 6]), op("s", "slice", [0], [4, 6], i=[100, 0, 2, 1])]),
    "dim 100 out of range", "stack write out of bounds in infer_slice")
put("graph", "i14-3a-slice-backward-ndim64.wgraph",
    graph_file([ph("g", [2, 3]), op("s", "slice_backward", [0], [2, 3], i=[0, 0, 2, 1, 64, 2, 3])]),
    "64 output dims", "stack buffer overflow in weft_meta_set (from infer_slice_bw)")
put("graph", "i14-3b-slice-backward-ndim-neg.wgraph",
    graph_file([ph("g", [2, 3]), op("s", "slice_backward", [0], [2, 3], i=[0, 0, 2, 1, -1])]),
    "-1 output dims", "memcpy of a negative size in weft_meta_set: heap corruption, 'double free or corruption'")
put("graph", "i14-4-fused-no-args.wgraph",
    graph_file([ph("x", [4]),
                {"name": "f", "kind": "fused", "in": [0], "out": [{"dtype": "f32", "shape": [4]}],
                 "prog": {"matmul_head": False, "instr": [{"op": "relu", "export": 0}]}}], version="2"),
    "0 operands (the op takes 1)", "memcpy from NULL in load_fused (UBSan)")
put("graph", "i14-5-placeholder-huge.wgraph",
    graph_file([ph("x", [2**50, 2**50]), op("r", "relu", [0], [2**50, 2**50])]),
    "too many elements", "signed overflow of the strides in weft_contiguous_strides (UBSan)")

# ---- issue 14: safetensors ----
put("safetensors", "i14-6-zero-dim-huge.safetensors",
    safetensors({"w": {"dtype": "F32", "shape": [0, 2**52, 2**52], "data_offsets": [0, 0]}}),
    "shape has too many elements", "signed overflow of the strides in weft_contiguous_strides (UBSan)")

# ---- issue 14: model files ----
put("model_file", "i14-7-input-3x2p24.cfg",
    "[net]\ndataset = fmnist\ninput = 16777216,16777216,16777216\n[flatten]\n[linear]\nout = 10\n",
    "fmnist images have 784", "signed overflow in resolve_net (UBSan)")
put("model_file", "i14-8-linear-in-inferred.cfg",
    "[net]\ndataset = fmnist\n[conv2d]\nout = 65536\nkernel = 1\npad = 100\n[flatten]\n[linear]\nout = 10\n",
    "key 'in' = 3406823424 (inferred from the shapes) is out of range",
    "parsed, but its written form did not parse again (the round-trip invariant aborts)")

# ---- issue 14: checkpoints: a NaN optimiser step (the seed checkpoint with one step made an f32 NaN) ----
hdr, data = read_safetensors(os.path.join(CORPUS, "checkpoint", "adam_f16.safetensors"))
meta = hdr.pop("__metadata__")
step_name = sorted(k for k in hdr if k.endswith(".step"))[0]
tensors = {}
for k, v in hdr.items():
    b, e = v["data_offsets"]
    tensors[k] = (v["dtype"], v["shape"], data[b:e])
tensors[step_name] = ("F32", [], struct.pack("<f", math.nan))
out, blob = {"__metadata__": meta}, b""
for k in sorted(tensors, key=lambda k: -{"F64": 8, "I64": 8, "F32": 4, "I32": 4}.get(tensors[k][0], 1)):
    dt, shape, b = tensors[k]
    out[k] = {"dtype": dt, "shape": shape, "data_offsets": [len(blob), len(blob) + len(b)]}
    blob += b
put("checkpoint", "i14-9-nan-step.safetensors", safetensors(out, blob),
    "holds nan, not a count", "a NaN converted to int64 (UBSan float-cast-overflow); the run resumed at step INT64_MIN")

# ---- issue 14: IDX: 8 bytes promising 4.3 GB ----
put("idx", "i14-10-promise-4gb.idx", bytes([0, 0, 8, 1, 0xFF, 0xFF, 0xFF, 0xFF]),
    "truncated data", "4.3 GB allocated before the first data byte was read")

# ---- found by reading every infer function for what it trusts (graph files reach each) ----
put("graph", "r-softmax-dim-neg.wgraph",
    graph_file([ph("x", [2, 3]), op("s", "softmax", [0], [2, 3], i=[-1])]),
    "dim -1 out of range", "infer let -1 through; the kernel read sizes[-1] when the graph ran")
put("graph", "r-avgpool-bw-stride0.wgraph",
    graph_file([ph("g", [1, 1, 2, 2]), op("b", "avg_pool2d_backward", [0], [1, 1, 4, 4], i=[2, 2, 0, 0, 0, 0, 0, 0, 4, 4])]),
    "kernel and stride must be positive", "integer division by zero in infer_avg_pool_bw (SIGFPE)")
put("graph", "r-layer-norm-bw-one-input.wgraph",
    graph_file([ph("g", [2, 3]), op("b", "layer_norm_backward", [0], [2, 3], i=[1, 0, 0])]),
    "expected 4 inputs", "read past the inputs array in infer_ln_bw (heap overflow)")
put("graph", "r-index-select-bw-dim-neg.wgraph",
    graph_file([ph("g", [3, 4]), ph("ix", [3], "i64"),
                op("b", "index_select_backward", [0, 1], [3, 4], i=[-1, 5])]),
    "dim -1 is out of range", "sizes[-1] read and written in infer_index_select_bw")
put("graph", "r-conv-dilation-huge.wgraph",
    graph_file([ph("x", [1, 1, 5, 5]), ph("w", [1, 1, 3, 3]),
                op("c", "conv2d", [0, 1], [1, 1, 3, 3], i=[1, 1, 0, 0, 2**62, 1, 1])]),
    "stride, dilation and groups must be positive", "signed overflow in out_len (UBSan)")
put("graph", "r-view-zero-huge.wgraph",
    graph_file([ph("x", [0]), op("v", "view", [0], [0, 2**40, 2**40], i=[3, 0, 2**40, 2**40])]),
    "cannot reshape", "signed overflow of the strides of the empty view (UBSan)")
put("graph", "r-concat-sum-overflow.wgraph",
    graph_file([ph("x", [2**50]), op("c", "concat", [0] * 8192, [1], i=[0])]),
    "too many elements along dim 0", "signed overflow summing the sizes in infer_concat (UBSan)")

for harness, items in entries.items():
    with open(os.path.join(REGRESS, harness, "expect.txt"), "w") as fh:
        fh.write("# Every input that ever crashed fuzz_%s, and a piece of the error it must now get:\n" % harness)
        fh.write("# FILE<TAB>TEXT (tests/fuzz/regress_main.c; docs/reliability.md). Before the fix: see the comments.\n")
        for name, expect, before in items:
            fh.write("# %s: %s\n%s\t%s\n" % (name, before, name, expect))
print("wrote", sum(len(v) for v in entries.values()), "inputs")
