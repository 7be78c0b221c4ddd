#!/usr/bin/env python3
# Sums the GPU time of each kernel in Nsight Compute's CSV (ncu --csv --metrics gpu__time_duration.sum ...)
# and prints the kernels that take the most, with their share of the total: where a training step goes.
#   ncu --csv --metrics gpu__time_duration.sum PROGRAM ... > k.csv; python3 tools/kernel_times.py k.csv [TOP] [DIVISOR]
# DIVISOR: divide the times by it (e.g. the number of steps profiled) to print per-step times.
import csv
import sys
from collections import defaultdict

UNIT = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0, "second": 1e3, "s": 1e3}


def main():
    if len(sys.argv) < 2:
        print("usage: kernel_times.py NCU_CSV [TOP] [DIVISOR]", file=sys.stderr)
        sys.exit(2)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    div = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    ms, calls = defaultdict(float), defaultdict(int)
    with open(sys.argv[1], newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]  # ncu's own messages ("==PROF==") are not CSV
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        try:
            v = float(row["Metric Value"].replace(",", "")) * UNIT.get(row.get("Metric Unit", "nsecond"), 1e-6)
        except (KeyError, ValueError):
            continue
        name = row.get("Kernel Name", "?")
        ms[name] += v
        calls[name] += 1
    total = sum(ms.values())
    if total <= 0:
        print("kernel_times: no kernel times in", sys.argv[1], file=sys.stderr)
        sys.exit(1)
    print(f"kernels: {sum(calls.values()) / div:.0f} launches, {total / div:.3f} ms of GPU time (per {div:g})")
    for name, v in sorted(ms.items(), key=lambda kv: -kv[1])[:top]:
        short = name if len(name) <= 90 else name[:87] + "..."  # (summed under the whole name)
        print(f"{v / div:9.3f} ms {100 * v / total:5.1f}% {calls[name] / div:7.1f}x  {short}")


if __name__ == "__main__":
    main()
