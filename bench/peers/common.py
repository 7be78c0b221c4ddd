# Shared by the PyTorch twins: thread count, the name filter, timing, output.
# Each twin prints "<name> <value> <unit> <hib>" lines (see bench/run.sh).
import os
import sys
import time

import torch

torch.set_num_threads(int(os.environ.get("WEFT_NUM_THREADS", os.cpu_count())))
PATTERN = sys.argv[1] if len(sys.argv) > 1 else ""


def selected(name):
    """A name containing the pattern; a pattern ending in $ names one benchmark exactly."""
    if PATTERN.endswith("$"):
        return name == PATTERN[:-1]
    return not PATTERN or PATTERN in name


def best_of(fn, reps=5, min_iter=5, min_s=0.2):
    """Seconds per call: best over reps of (run until min_iter calls and min_s seconds)."""
    best = float("inf")
    for _ in range(reps):
        it, t0 = 0, time.perf_counter()
        while True:
            fn()
            it += 1
            el = time.perf_counter() - t0
            if it >= min_iter and el >= min_s:
                break
        best = min(best, el / it)
    return best


def report(name, value, unit, higher_is_better):
    print(f"{name} {value:.4g} {unit} {1 if higher_is_better else 0}", flush=True)
