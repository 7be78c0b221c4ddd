#!/usr/bin/env python3
# Writes the small ONNX models of tests/graph/test_onnx_models.c's test_cases into tests/data/onnx_cases/:
# one node each, for readings a review found wrong (Clip at opset 10 on f16, ArgMin on integers, Range and
# ConstantOfShape on int64 past 2^53, Gather / GatherElements with negative indices fed at run),
# ConvTranspose with unequal pads, and Not (and And on floats, refused); Pad cropping and reflecting at once,
# Pad past what reflect can take and in wrap mode (refused), a 1-D Conv with unequal pads, a Slice by -2. The expected values are computed in the C test. Needs only the onnx module
# (Debian python3-onnx): /usr/bin/python3 tests/data/gen_onnx_cases.py
import os

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx_cases")


def save(name, nodes, inputs, outputs, inits=(), opset=17):
    g = oh.make_graph(nodes, name, inputs, outputs, list(inits))
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, os.path.join(HERE, name + ".onnx"))


def vi(name, dt, shape):
    return oh.make_tensor_value_info(name, dt, shape)


def main():
    os.makedirs(HERE, exist_ok=True)
    big = 2**60 + 1
    save("clip10_f16", [oh.make_node("Clip", ["x"], ["y"], min=0.0, max=1.0)], [vi("x", TP.FLOAT16, [4])],
         [vi("y", TP.FLOAT16, [4])], opset=10)
    save("argmin_i32", [oh.make_node("ArgMin", ["x"], ["y"], axis=0, keepdims=0)], [vi("x", TP.INT32, [3])],
         [vi("y", TP.INT64, [])])
    save("argmin_u8", [oh.make_node("ArgMin", ["x"], ["y"], axis=0, keepdims=0)], [vi("x", TP.UINT8, [3])],
         [vi("y", TP.INT64, [])])
    save("range_i64", [oh.make_node("Range", ["s", "l", "d"], ["y"])], [], [vi("y", TP.INT64, [3])],
         [nh.from_array(np.array(big, np.int64), "s"), nh.from_array(np.array(big + 3, np.int64), "l"),
          nh.from_array(np.array(1, np.int64), "d")])
    save("const_of_shape_i64",
         [oh.make_node("ConstantOfShape", ["s"], ["y"], value=nh.from_array(np.array([big], np.int64), "v"))], [],
         [vi("y", TP.INT64, [2])], [nh.from_array(np.array([2], np.int64), "s")])
    save("gather_neg", [oh.make_node("Gather", ["x", "i"], ["y"], axis=0)], [vi("x", TP.FLOAT, [4, 2]), vi("i", TP.INT64, [2])],
         [vi("y", TP.FLOAT, [2, 2])])
    save("gather_elements_neg", [oh.make_node("GatherElements", ["x", "i"], ["y"], axis=1)],
         [vi("x", TP.FLOAT, [2, 3]), vi("i", TP.INT64, [2, 2])], [vi("y", TP.FLOAT, [2, 2])])
    # x (1,2,3,3), w (2,1,2,3) groups 2, strides (2,1): full (6,5); pads (b_h, b_w, e_h, e_w) = (0,2,1,0) and
    # output_padding (1,0): rows [0, 6+1-1), cols [2, 5)
    save("conv_t_unequal_pads",
         [oh.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 1], pads=[0, 2, 1, 0], output_padding=[1, 0], group=2)],
         [vi("x", TP.FLOAT, [1, 2, 3, 3]), vi("w", TP.FLOAT, [2, 1, 2, 3]), vi("b", TP.FLOAT, [2])],
         [vi("y", TP.FLOAT, [1, 2, 6, 3])])

    # Not (ONNX's own tests of it are opset 1, below what weft reads); And on floats, which ONNX does not allow
    # (written without the checker) and weft refuses
    save("not_bool", [oh.make_node("Not", ["x"], ["y"])], [vi("x", TP.BOOL, [2, 3])], [vi("y", TP.BOOL, [2, 3])])
    g = oh.make_graph([oh.make_node("And", ["a", "b"], ["y"])], "and_f32", [vi("a", TP.FLOAT, [2]), vi("b", TP.FLOAT, [2])],
                      [vi("y", TP.BOOL, [2])])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, os.path.join(HERE, "and_f32.onnx"))
    # NegativeLogLikelihoodLoss with float targets (refused) and with targets of the wrong shape (refused)
    for name, ts in (("nll_target_f32", (TP.FLOAT, [3])), ("nll_target_shape", (TP.INT64, [4]))):
        g = oh.make_graph([oh.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"])], name,
                          [vi("x", TP.FLOAT, [3, 5]), vi("t", ts[0], ts[1])], [vi("y", TP.FLOAT, [])])
        m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
        m.ir_version = 8
        onnx.save(m, os.path.join(HERE, name + ".onnx"))

    # Pad: x (2,5), pads (begins, then ends) (0,-1, 0,2) reflect: the first column cropped, two reflected after
    pads = nh.from_array(np.array([0, -1, 0, 2], np.int64), "p")
    save("pad_crop_reflect", [oh.make_node("Pad", ["x", "p"], ["y"], mode="reflect")], [vi("x", TP.FLOAT, [2, 5])],
         [vi("y", TP.FLOAT, [2, 6])], [pads])
    save("pad_reflect_big", [oh.make_node("Pad", ["x", "p"], ["y"], mode="reflect")], [vi("x", TP.FLOAT, [2, 3])],
         [vi("y", TP.FLOAT, [2, 7])], [nh.from_array(np.array([0, 0, 0, 4], np.int64), "p")])
    g = oh.make_graph([oh.make_node("Pad", ["x", "p"], ["y"], mode="wrap")], "pad_wrap", [vi("x", TP.FLOAT, [2, 3])],
                      [vi("y", TP.FLOAT, [2, 4])], [nh.from_array(np.array([0, 0, 0, 1], np.int64), "p")])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, os.path.join(HERE, "pad_wrap.onnx"))
    # Conv 1-D: x (1,1,7), w (2,1,3), stride 2, pads (1, 2): output length (7 + 3 - 3) // 2 + 1 = 4
    save("conv1d_unequal_pads", [oh.make_node("Conv", ["x", "w"], ["y"], strides=[2], pads=[1, 2])],
         [vi("x", TP.FLOAT, [1, 1, 7]), vi("w", TP.FLOAT, [2, 1, 3])], [vi("y", TP.FLOAT, [1, 2, 4])])
    # Slice x (7) from -1 down past the start by -2: x[6], x[4], x[2], x[0]
    save("slice_step_neg2", [oh.make_node("Slice", ["x", "s", "e", "a", "k"], ["y"])], [vi("x", TP.FLOAT, [7])],
         [vi("y", TP.FLOAT, [4])], [nh.from_array(np.array([-1], np.int64), "s"),
                                    nh.from_array(np.array([-9], np.int64), "e"),
                                    nh.from_array(np.array([0], np.int64), "a"),
                                    nh.from_array(np.array([-2], np.int64), "k")])

    # review, 2026-11-28: a negative step from a start below -dim takes the first element (starts clamp to
    # [0, dim-1]); an int64 constant_value past 2^53; an edge pad that would need a 2^28-element index at load
    save("slice_neg_start_below", [oh.make_node("Slice", ["x", "s", "e", "a", "k"], ["y"])], [vi("x", TP.FLOAT, [6])],
         [vi("y", TP.FLOAT, [1])], [nh.from_array(np.array([-100], np.int64), "s"),
                                    nh.from_array(np.array([-200], np.int64), "e"),
                                    nh.from_array(np.array([0], np.int64), "a"),
                                    nh.from_array(np.array([-1], np.int64), "k")])
    save("pad_i64_big", [oh.make_node("Pad", ["x", "p", "v"], ["y"])], [vi("x", TP.INT64, [2])], [vi("y", TP.INT64, [3])],
         [nh.from_array(np.array([1, 0], np.int64), "p"), nh.from_array(np.array(big + 2, np.int64), "v")])
    save("pad_edge_huge", [oh.make_node("Pad", ["x", "p"], ["y"], mode="edge")], [vi("x", TP.FLOAT, [3])],
         [vi("y", TP.FLOAT, [3 + 2**28])], [nh.from_array(np.array([0, 2**28], np.int64), "p")])

    # a later node names its output as the loader names a temporary of an earlier node (LeakyRelu's "a#0")
    save("names_later", [oh.make_node("LeakyRelu", ["x"], ["a"], alpha=0.5), oh.make_node("Neg", ["a"], ["a#0"]),
                         oh.make_node("Mul", ["a", "a#0"], ["y"])], [vi("x", TP.FLOAT, [3])], [vi("y", TP.FLOAT, [3])])

    # ceil_mode: x (1,1,3,3); kernel 2, strides 3, end pads 1: ONNX 1.12's formula gives 2x2, ONNX Runtime (as
    # PyTorch) drops a last window that starts past the input: 1x1; kernel 2, strides 2, begin pads 1: 2x2
    for op in ("MaxPool", "AveragePool"):
        for tag, kw in (("s3", dict(strides=[3, 3], pads=[0, 0, 1, 1])), ("p1", dict(strides=[2, 2], pads=[1, 1, 0, 0]))):
            name, node = "ceil_%s_%s" % (op.lower(), tag), oh.make_node(op, ["x"], ["y"], kernel_shape=[2, 2], ceil_mode=1, **kw)
            if tag == "p1":
                save(name, [node], [vi("x", TP.FLOAT, [1, 1, 3, 3])], [vi("y", TP.FLOAT, [1, 1, 2, 2])])
                continue
            # (written without the checker: ONNX 1.12's shape inference still has the formula that gives 2x2)
            g = oh.make_graph([node], name, [vi("x", TP.FLOAT, [1, 1, 3, 3])], [vi("y", TP.FLOAT, [1, 1, 1, 1])])
            m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
            m.ir_version = 8
            onnx.save(m, os.path.join(HERE, name + ".onnx"))


if __name__ == "__main__":
    main()
