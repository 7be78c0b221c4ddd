#!/usr/bin/env python3
"""Independent checks of the ONNX files weft_onnx_save wrote (tests/graph/test_onnx_export.c calls this).

usage: onnx_check.py MODEL.onnx...

For each model: onnx.checker.check_model(full_check=True), which also runs ONNX's strict shape and type
inference over every node (a dtype or shape the exporter got wrong fails here, not only at load).
Where a folder MODEL.onnx.data/ sits beside a model (ONNX's own test layout: input_k.pb, output_k.pb
TensorProtos, the inputs and what weft computed) and onnxruntime is importable, the model is also run
by ONNX Runtime on those inputs and its outputs compared with weft's (f32: |d| <= 1e-5 + 1e-4 |want|;
f64: 1e-12 + 1e-10 |want|; others exactly). Without onnxruntime that part is skipped with a note.
Prints one line per model; exits 1 if any model failed, 2 if onnx itself is missing.
"""
import glob
import os
import sys

try:
    import onnx
    from onnx import numpy_helper
except ImportError:
    print("onnx_check: no onnx package")
    sys.exit(2)
try:
    import numpy as np
    import onnxruntime as ort
except ImportError:
    ort = None


def run_ort(path, data):
    """Runs path on data/input_k.pb with ONNX Runtime; returns an error string or None."""
    model = onnx.load(path)
    inits = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    feeds = {}
    for k, name in enumerate(names):
        feeds[name] = numpy_helper.to_array(onnx.load_tensor(os.path.join(data, "input_%d.pb" % k)))
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = sess.run(None, feeds)
    worst = 0.0
    for k, g in enumerate(got):
        want = numpy_helper.to_array(onnx.load_tensor(os.path.join(data, "output_%d.pb" % k)))
        if g.shape != want.shape or g.dtype != want.dtype:
            return "output %d: %s %s, weft %s %s" % (k, g.dtype, g.shape, want.dtype, want.shape)
        if want.dtype.kind == "f":
            atol, rtol = (1e-5, 1e-4) if want.dtype == np.float32 else (1e-12, 1e-10)
            gd, wd = g.astype(np.float64), want.astype(np.float64)
            same_inf = np.isinf(wd) & (gd == wd)
            d = np.where(same_inf, 0.0, np.abs(gd - wd))
            bad = ~(d <= atol + rtol * np.abs(wd))
            if bad.any():
                i = int(np.argmax(bad.ravel()))
                return "output %d: element %d is %r, weft %r" % (k, i, gd.ravel()[i], wd.ravel()[i])
            worst = max(worst, float(d.max()) if d.size else 0.0)
        elif not np.array_equal(g, want):
            return "output %d differs" % k
    return "ort max |diff| %.3g" % worst


def main(paths):
    failed = 0
    ort_note = False
    for p in paths:
        try:
            onnx.checker.check_model(onnx.load(p), full_check=True)
        except Exception as e:  # the checker's own exception types vary by version
            print("FAIL %s: %s" % (p, str(e).splitlines()[0] if str(e) else type(e).__name__))
            failed += 1
            continue
        msg = "checker ok"
        data = p + ".data"
        if os.path.isdir(data) and glob.glob(os.path.join(data, "output_*.pb")):
            if ort is None:
                ort_note = True
            else:
                try:
                    r = run_ort(p, data)
                except Exception as e:
                    r = "onnxruntime failed: %s" % (str(e).splitlines()[0] if str(e) else type(e).__name__)
                if not r.startswith("ort max"):
                    print("FAIL %s: %s" % (p, r))
                    failed += 1
                    continue
                msg += ", " + r
        print("ok   %s: %s" % (p, msg))
    if ort_note:
        print("note: onnxruntime is not installed: weft's outputs were not compared with ONNX Runtime's")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
