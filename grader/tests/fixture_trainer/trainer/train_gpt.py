#!/usr/bin/env python3
"""A stand-in for the course's train_gpt in the grader's tests (fixture_trainer/README.md): it
writes what the real one writes (loss.csv, the kernel table, the op check's lines, a sample, a
checkpoint) in the same formats. The reference's run (--kernels reference) is always the same
curve; the exercise table's follows FAKE_TRAINER:
  (unset)     the reference's curve: the curves overlap
  part        a gap of 0.5 from step 100 on
  op-check    the op check stops it at step 0, naming the first plugged exercise
  crash       killed by SIGABRT
  cuda-error  a CUDA error, as CUDA_CHECK reports it
  hang        never ends
  todo        every plugged exercise still calls COURSE_TODO (the reference runs every op)
A plugged exercise named *mismatch* makes the op check stop it too, whatever FAKE_TRAINER says.
"""
import math
import os
import signal
import sys
import time
from pathlib import Path

args = sys.argv[1:]


def option(flag, default=None):
    return args[args.index(flag) + 1] if flag in args else default


table = option("--kernels", "reference")
steps = int(option("--steps", "100"))
val_every = int(option("--val-every", "50"))
out = Path(option("--out", "out"))
behaviour = os.environ.get("FAKE_TRAINER", "") if table != "reference" else ""
plugged = []
if table != "reference":
    choices = option("--kernel-choices")
    plugged = [line.split() for line in Path(choices).read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    whose = {"learner": "yours", "solutions": "solution", "fast": "fast"}[table]
    print(f"kernels: {table} ({choices}), every other op the reference's:")
    for op, exercise in plugged:
        print(f"  {op:<19} {whose}: {exercise} | as its contract says")
    if behaviour == "todo":
        for op, exercise in plugged:
            print(f"kernels ({table}): {op}: {exercise} still calls COURSE_TODO (twice: return 2 "
                  "* x): the reference runs this op from now on")
    wrong = [f"{op} ({whose}: {exercise})" for op, exercise in plugged
             if "mismatch" in exercise or behaviour == "op-check"]
    if wrong:
        print("train_gpt: error: op check: step 0, linear_forward call 1 (rows 16, C 8, OC 24; "
              f"{wrong[0]}): out: 3 of 384 values differ from the reference's beyond the "
              "tolerance; the first at [15, 0]: 7 where the reference has 1", file=sys.stderr)
        sys.exit(1)
sys.stdout.flush()
if behaviour == "crash":
    os.kill(os.getpid(), signal.SIGABRT)
if behaviour == "cuda-error":
    print("train_gpt: error: [course:cuda-error] cudaErrorIllegalAddress: an illegal memory access "
          "was encountered\n  in `cudaDeviceSynchronize()` at trainer/gpt.cu:1", file=sys.stderr)
    sys.exit(1)
while behaviour == "hang":
    time.sleep(1)

out.mkdir(parents=True, exist_ok=True)
rows = ["step,train_loss,val_loss,lr,grad_norm,step_ms,tokens_per_s"]
for step in range(steps):
    loss = 4.0 + 6.0 * math.exp(-step / 60.0)
    if behaviour == "part" and step >= 100:
        loss += 0.5
    val = f"{loss + 0.1:.6f}" if step % val_every == 0 else ""
    rate = 1000.0 if table == "reference" else 800.0
    rows.append(f"{step + 1},{loss:.6f},{val},0.0006,1.0,10.0,{rate}")
    print(f"step {step + 1:5d}/{steps} | loss {loss:.4f} | lr 6.00e-04 | norm 1.000 | 10.0 ms | "
          f"{rate:.0f} tok/s | MFU - | left 0:00:00")
    if plugged and step % 50 == 0:
        print(f"op check, step {step}: 12 calls as the reference's, within the tolerance; the "
              f"closest each op came to it: linear_forward 0.12 (out), layernorm_forward 0.3 "
              "(mean)")
rows.append(f"{steps},,{4.1 + 6.0 * math.exp(-steps / 60.0):.6f},,,,")
(out / "loss.csv").write_text("\n".join(rows) + "\n")
if "--no-checkpoint" not in args:
    (out / "model.ckpt").write_bytes(b"GPT1")
if int(option("--sample-length", "0")) > 0:
    print("--- sample ---\nTo be, or not to be,\nthat is the question.\n---")
