#!/usr/bin/env python3
"""Measures the tolerance of module 08's train_gpt on a GPU: how far apart the loss curves of two
valid implementations of the trainer come, with the grader's own settings (grader/trainer.py:
SMALL_RUN, or FULL_RUN with --full), so that the grader's tolerance is derived, not guessed
(notes/08_training.md, "Why the loss curves are the test").

The pairs, each from the same initial weights and the same batches:
  bf16, cuDNN's fused attention  vs  bf16, module 07's flash kernels (--attention flash)
  bf16, cuDNN's fused attention  vs  the same run again (what the GPU's own order of sums moves)
  bf16, cuDNN's fused attention  vs  fp32 (every op in float: the whole of bf16's rounding)
The gap of a pair is the grader's: the largest difference of the two training curves' means over
CURVE_WINDOW steps, and beside it the last validation losses. The tolerance it suggests is 1.5
times the largest gap measured (a valid table lies between these implementations: fp32 kernels
converted at a bf16 run's boundary are closer to the reference than all-fp32 is); the script
prints the line to put into grader/trainer.py and the figures for the notes.

  python3 dev/trainer_tolerance.py [--train-gpt build/solutions/bin/train_gpt] [--full]
      [--out build/trainer-tolerance]      (needs data/shakespeare: trainer/prepare_data.py)
"""
import argparse
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.trainer import (CURVE_TOLERANCE, CURVE_WINDOW, DATA, FULL_RUN,  # noqa: E402
                            FULL_RUN_TOLERANCE, SMALL_RUN, compare_curves, read_curve)

MARGIN = 1.5


def train(train_gpt: Path, settings, out: Path, dtype: str, attention: str) -> float:
    """One reference run into `out`; the seconds it took."""
    command = [str(train_gpt), "--kernels", "reference", "--dtype", dtype, "--attention", attention,
               *settings.args(), "--data", str(ROOT / DATA), "--out", str(out),
               "--sample-length", "0", "--no-checkpoint"]
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "train_gpt.log", "w") as log:
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode
    if code != 0:
        sys.exit(f"{' '.join(command)} failed (exit {code}): see {out / 'train_gpt.log'}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-gpt", type=Path, default=ROOT / "build/solutions/bin/train_gpt")
    parser.add_argument("--full", action="store_true", help="FULL_RUN's settings (GPT-2 124M)")
    parser.add_argument("--steps", type=int, help="fewer steps than the settings' (a quick look)")
    parser.add_argument("--out", type=Path, default=ROOT / "build/trainer-tolerance")
    options = parser.parse_args()
    settings = FULL_RUN if options.full else SMALL_RUN
    if options.steps:
        settings = replace(settings, steps=options.steps)
    current = FULL_RUN_TOLERANCE if options.full else CURVE_TOLERANCE
    runs = {"bf16 cudnn": ("bf16", "cudnn"), "bf16 cudnn again": ("bf16", "cudnn"),
            "bf16 flash": ("bf16", "flash"), "fp32": ("fp32", "cudnn")}
    print(f"settings: {settings.describe()} ({' '.join(settings.args())})", flush=True)
    for name, (dtype, attention) in runs.items():
        seconds = train(options.train_gpt, settings, options.out / name.replace(" ", "-"), dtype,
                        attention)
        print(f"  {name:<17} {seconds:6.1f} s", flush=True)
    curves = {name: read_curve(options.out / name.replace(" ", "-") / "loss.csv") for name in runs}
    print(f"\ngaps against bf16 cudnn ({CURVE_WINDOW}-step means of the training loss; the last "
          "validation losses):")
    largest = 0.0
    for name in ("bf16 cudnn again", "bf16 flash", "fp32"):
        gap = compare_curves(curves[name], curves["bf16 cudnn"], current)
        largest = max(largest, gap.largest)
        print(f"  {name:<17} largest gap {gap.largest:.4f} at steps {gap.largest_at[0]}-"
              f"{gap.largest_at[1]}; validation at step {gap.val_step}: {gap.val_learner:.4f} "
              f"against {gap.val_reference:.4f} ({gap.val_learner - gap.val_reference:+.4f})")
    suggested = float(f"{MARGIN * largest:.2g}")
    name = "FULL_RUN_TOLERANCE" if options.full else "CURVE_TOLERANCE"
    print(f"\nlargest gap between valid implementations: {largest:.4f}; {MARGIN} x that: "
          f"{name} = {suggested:g} in grader/trainer.py (now {current:g})")


if __name__ == "__main__":
    main()
