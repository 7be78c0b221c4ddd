#!/usr/bin/env python3
"""The recurrent ONNX ops (RNN, GRU, LSTM) in the forms ONNX's own operator tests leave out, for
tests/graph/test_onnx_models.c's test_rnn_cases: every direction, both GRU forms (linear_before_reset), Relu,
peepholes, initial states, sequence_lens that differ per sequence (a run-time input), and batch-first layout.
Writes tests/data/onnx_cases/rnn_*.onnx and tests/data/onnx_cases/rnn_ref.txt: for each case its input x and
every output as computed by ONNX Runtime (layout 0) or ONNX's reference evaluator (layout 1, which ONNX Runtime
does not run), one tensor a line:  <case>/<name> <ndim> <sizes...> <values...>  (%.9g).
Also rnn_bad_*.onnx, models the loader must refuse with a message (the C test checks which).
Needs onnx >= 1.13 and onnxruntime (pip): python3 tests/data/gen_onnx_rnn.py
"""
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh
from onnx.reference import ReferenceEvaluator

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx_cases")
B, T, I, H = 3, 5, 4, 3
G = {"RNN": 1, "GRU": 3, "LSTM": 4}


def line(name, a):
    a = np.asarray(a, dtype=np.float64)
    return " ".join([name, str(a.ndim)] + [str(s) for s in a.shape] + ["%.9g" % v for v in a.flatten()])


def model(name, op, direction="forward", layout=0, lens=None, h0=False, peep=False, bias=True, seed=0, **attrs):
    rng = np.random.default_rng(seed)
    D = 2 if direction == "bidirectional" else 1
    g = G[op]
    inits = [nh.from_array((0.6 * rng.standard_normal((D, g * H, I))).astype(np.float32), "W"),
             nh.from_array((0.6 * rng.standard_normal((D, g * H, H))).astype(np.float32), "R")]
    ins = ["x", "W", "R", ""]
    if bias:
        inits.append(nh.from_array((0.5 * rng.standard_normal((D, 2 * g * H))).astype(np.float32), "B"))
        ins[3] = "B"
    ins.append("")
    if lens is not None:
        inits.append(nh.from_array(np.array(lens, np.int32), "lens"))
        ins[4] = "lens"
    st = (B, D, H) if layout else (D, B, H)
    if h0:
        inits.append(nh.from_array(rng.standard_normal(st).astype(np.float32), "h0"))
        ins.append("h0")
        if op == "LSTM":
            inits.append(nh.from_array(rng.standard_normal(st).astype(np.float32), "c0"))
            ins.append("c0")
    if peep:
        inits.append(nh.from_array((0.5 * rng.standard_normal((D, 3 * H))).astype(np.float32), "P"))
        ins += [""] * (7 - len(ins)) + ["P"]
    while ins and ins[-1] == "":
        ins.pop()
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    xs = (B, T, I) if layout else (T, B, I)
    ys = (B, T, D, H) if layout else (T, D, B, H)
    node = oh.make_node(op, ins, outs, hidden_size=H, direction=direction, layout=layout, **attrs)
    graph = oh.make_graph([node], name, [oh.make_tensor_value_info("x", TP.FLOAT, list(xs))],
                          [oh.make_tensor_value_info(o, TP.FLOAT, list(ys if o == "Y" else st)) for o in outs], inits)
    m = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 14)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    path = os.path.join(HERE, name + ".onnx")
    onnx.save(m, path)
    x = rng.standard_normal(xs).astype(np.float32)
    if layout:
        res = ReferenceEvaluator(path).run(outs, {"x": x})
    else:
        res = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(outs, {"x": x})
    return [line(name + "/x", x)] + [line(name + "/" + o, r) for o, r in zip(outs, res)]


def bad(name, op, ins, shapes, **attrs):
    vis = [oh.make_tensor_value_info(n, TP.FLOAT, s) for n, s in zip(ins, shapes)]
    graph = oh.make_graph([oh.make_node(op, ins, ["Y"], **attrs)], name, vis, [oh.make_tensor_value_info("Y", TP.FLOAT, None)])
    m = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 14)])
    m.ir_version = 8
    onnx.save(m, os.path.join(HERE, name + ".onnx"))


def main():
    os.makedirs(HERE, exist_ok=True)
    lines = []
    lines += model("rnn_gru_bi_lbr1", "GRU", "bidirectional", lens=[5, 2, 4], h0=True, linear_before_reset=1, seed=1)
    lines += model("rnn_gru_rev_lbr0", "GRU", "reverse", lens=[3, 5, 1], seed=2)
    lines += model("rnn_lstm_bi_peep", "LSTM", "bidirectional", lens=[4, 1, 5], h0=True, peep=True, seed=3)
    lines += model("rnn_lstm_acts", "LSTM", "forward", bias=False, seed=4, activations=["Relu", "Sigmoid", "Tanh"])
    lines += model("rnn_relu_bi", "RNN", "bidirectional", h0=True, seed=5, activations=["Relu", "Tanh"])
    lines += model("rnn_lstm_batch_first", "LSTM", "bidirectional", layout=1, h0=True, seed=6)
    lines += model("rnn_gru_batch_first", "GRU", "reverse", layout=1, seed=7, linear_before_reset=1)
    with open(os.path.join(HERE, "rnn_ref.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    xs, ws, rs = [T, B, I], [1, 3 * H, I], [1, 3 * H, H]
    bad("rnn_bad_clip", "GRU", ["x", "W", "R"], [xs, ws, rs], hidden_size=H, clip=1.0)
    bad("rnn_bad_act", "GRU", ["x", "W", "R"], [xs, ws, rs], hidden_size=H, activations=["HardSigmoid", "Tanh"])
    bad("rnn_bad_w", "GRU", ["x", "W", "R"], [xs, [1, 3 * H, I + 1], rs], hidden_size=H)
    bad("rnn_bad_dir", "GRU", ["x", "W", "R"], [xs, ws, rs], hidden_size=H, direction="sideways")
    bad("rnn_bad_act_empty", "GRU", ["x", "W", "R"], [xs, ws, rs], hidden_size=H, activations=["", ""])
    bad("rnn_bad_dir_type", "GRU", ["x", "W", "R"], [xs, ws, rs], hidden_size=H, direction=[1])
    bad("rnn_bad_hidden_type", "GRU", ["x", "W", "R"], [xs, ws, rs], hidden_size=float(H))
    # not bad: an output name longer than the loader's temporaries' name buffer (each temporary must still get its own)
    g = oh.make_graph([oh.make_node("GRU", ["x", "W", "R"], ["", "h" * 600], hidden_size=H)], "long",
                      [oh.make_tensor_value_info(n, TP.FLOAT, s) for n, s in (("x", xs), ("W", ws), ("R", rs))],
                      [oh.make_tensor_value_info("h" * 600, TP.FLOAT, [1, B, H])])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 14)])
    m.ir_version = 8
    onnx.save(m, os.path.join(HERE, "rnn_long_name.onnx"))
    bad("rnn_bad_long", "RNN", ["x", "W", "R"], [[70000, 1, 1], [1, H, 1], [1, H, H]], hidden_size=H)
    bad("rnn_bad_forget", "LSTM", ["x", "W", "R"], [xs, [1, 4 * H, I], [1, 4 * H, H]], hidden_size=H, input_forget=1)


if __name__ == "__main__":
    main()
