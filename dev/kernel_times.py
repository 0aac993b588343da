#!/usr/bin/env python3
"""Where a program's GPU time goes, kernel by kernel, from Nsight Compute (course authors).

`--kernels profile` in the trainer times ops with events around each (a synchronization and a launch
included); this times every kernel alone, by its duration on the GPU, and adds them up by name. Run
a program under ncu with only the duration metric, the clocks and caches left as they are:

    ncu --metrics gpu__time_duration.sum --clock-control none --cache-control none --csv \
        --log-file ncu.csv build/trainer/bin/train_gpt -m gpt2-124m -b 16 -t 1024 --steps 1 ...
    python3 dev/kernel_times.py ncu.csv [--top 30]

Kernels run one at a time under ncu (no overlap, each after a drained GPU), so the sum is a little
above a real step's time: read the shares, and compare kernels between two runs of the same command.
"""
import argparse
import collections
import csv
import io
import re
import sys


def short_name(name: str) -> str:
    """The kernel's name without its parameter list (template arguments kept: they tell tiles)."""
    return re.sub(r"\(.*\)$", "", name).strip()


def read_durations(path: str):
    """(kernel name, duration in ns, grid) for each profiled launch in ncu's CSV log."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    start = text.find('"ID"')  # the log has ncu's own lines before the table
    if start < 0:
        sys.exit(f"{path}: no ncu CSV table in it (was ncu run with --csv?)")
    for row in csv.DictReader(io.StringIO(text[start:])):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        scale = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}[row["Metric Unit"]]
        value = float(row["Metric Value"].replace(",", ""))
        yield row["Kernel Name"], value * scale, row.get("Grid Size", "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv", help="ncu --csv log of a run with gpu__time_duration.sum")
    parser.add_argument("--top", type=int, default=40, help="kernels to list, longest first")
    parser.add_argument("--by-grid", action="store_true",
                        help="count a kernel's launches of each grid size apart (GEMM shapes)")
    args = parser.parse_args()
    total = collections.Counter()
    calls = collections.Counter()
    for name, ns, grid in read_durations(args.csv):
        key = short_name(name) + (f" {grid}" if args.by_grid else "")
        total[key] += ns
        calls[key] += 1
    if not total:
        sys.exit(f"{args.csv}: no kernel durations in it")
    whole = sum(total.values())
    print(f"GPU time by kernel (ncu, one at a time): {whole / 1e6:.2f} ms in "
          f"{sum(calls.values())} launches")
    for key, ns in total.most_common(args.top):
        print(f"  {ns / 1e6:9.3f} ms {100 * ns / whole:5.1f}% {calls[key]:5d} x "
              f"{ns / calls[key] / 1e3:8.1f} us  {key[:110]}")


if __name__ == "__main__":
    main()
