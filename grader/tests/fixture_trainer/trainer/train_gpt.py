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
  killed:K    killed by SIGKILL after step K (a lost session): its rows after the last
              latest.ckpt on disk, the last one cut short
A plugged exercise named *mismatch* makes the op check stop it too, whatever FAKE_TRAINER says.

Stopping and going on as the real one does (--checkpoint-seconds, --time-limit, --stop-at,
--resume, exit status 3), on a clock of its own: each step takes FAKE_STEP_S seconds (default
0.01), nothing else takes any. Its checkpoints are a header alone (the magic and the step).
"""
import math
import os
import signal
import struct
import sys
import time
from pathlib import Path

args = sys.argv[1:]


def option(flag, default=None):
    return args[args.index(flag) + 1] if flag in args else default


table = option("--kernels", "reference")
steps = int(option("--steps", "100"))
val_every = int(option("--val-every", "50"))
check_every = int(option("--check-ops", "0"))
out = Path(option("--out", "out"))
checkpoint_seconds = float(option("--checkpoint-seconds", "0"))
time_limit = float(option("--time-limit", "0"))
stop_at = int(option("--stop-at", "0"))
step_seconds = float(os.environ.get("FAKE_STEP_S", "0.01"))
behaviour = os.environ.get("FAKE_TRAINER", "") if table != "reference" else ""
killed_at = int(behaviour.split(":")[1]) if behaviour.startswith("killed:") else None
MAGIC = 0x47505431


def save(path: Path, step: int) -> None:
    header = [0] * 64
    header[0], header[8] = MAGIC, step
    path.with_suffix(".partial").write_bytes(struct.pack("<64i", *header))
    path.with_suffix(".partial").rename(path)


first = 0
if option("--resume"):
    first = struct.unpack("<9i", Path(option("--resume")).read_bytes()[:36])[8]
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
csv_path, latest = out / "loss.csv", out / "latest.ckpt"
header = "step,train_loss,val_loss,lr,grad_norm,step_ms,tokens_per_s\n"
if first and csv_path.exists():
    # The rows up to the checkpoint's step, whole lines only, as the real one keeps them.
    text = csv_path.read_text()
    lines = text.split("\n")[:-1]
    kept = [line for line in lines[1:] if line.split(",")[1] and int(line.split(",")[0]) <= first]
    csv_path.write_text("\n".join([lines[0], *kept]) + "\n")
else:
    csv_path.write_text(header)
csv = open(csv_path, "a")
last_save = first
for step in range(first, steps):
    if step > first and (checkpoint_seconds or time_limit or stop_at):
        late = time_limit and (step - first + 1) * step_seconds > time_limit
        stop = step == stop_at or late
        if stop or (checkpoint_seconds and (step - last_save) * step_seconds >= checkpoint_seconds):
            csv.flush()
            save(latest, step)
            last_save = step
        if stop:
            print(f"stopped after step {step} of {steps} "
                  f"({'--time-limit' if late else '--stop-at'}): --resume {latest} goes on")
            sys.exit(3)
    loss = 4.0 + 6.0 * math.exp(-step / 60.0)
    if behaviour == "part" and step >= 100:
        loss += 0.5
    val = f"{loss + 0.1:.6f}" if step % val_every == 0 else ""
    rate = 1000.0 if table == "reference" else 800.0
    csv.write(f"{step + 1},{loss:.6f},{val},0.0006,1.0,10.0,{rate}\n")
    print(f"step {step + 1:5d}/{steps} | loss {loss:.4f} | lr 6.00e-04 | norm 1.000 | 10.0 ms | "
          f"{rate:.0f} tok/s | MFU - | left 0:00:00")
    if plugged and check_every and step % check_every == 0:
        print(f"op check, step {step}: 12 calls as the reference's, within the tolerance; the "
              f"closest each op came to it: linear_forward 0.12 (out), layernorm_forward 0.3 "
              "(mean)")
    if step + 1 == killed_at:
        csv.write(f"{step + 2},4.0")  # a row cut short by the kill
        csv.flush()
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
csv.write(f"{steps},,{4.1 + 6.0 * math.exp(-steps / 60.0):.6f},,,,\n")
csv.close()
if "--no-checkpoint" not in args:
    save(out / "model.ckpt", steps)
latest.unlink(missing_ok=True)
if int(option("--sample-length", "0")) > 0:
    print("--- sample ---\nTo be, or not to be,\nthat is the question.\n---")
