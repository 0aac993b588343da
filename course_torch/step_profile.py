"""Where a training step of the small GPT goes, stock and swapped (`python3 -m course_torch
profile`): a few steps of each under torch.profiler after a warm-up, the median step, and the ops
that take the most CPU and the most GPU time. A swapped step slower than the stock one while the
GPU's total is about the same is a step bound by the calls (the custom ops' dispatch, their
Python autograd and autocast layers among them), not by the kernels."""
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from course_torch import model

WARM_UP_STEPS = 3
PROFILED_STEPS = 5
ROWS = 20


def _device_key() -> str:
    # PyTorch 2.4 renamed the profiler's CUDA columns to "device".
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    return "self_device_time_total" if (major, minor) >= (2, 4) else "self_cuda_time_total"


def profile_steps(data: Path, swapped) -> bool:
    """Prints, for the stock model and the one with `swapped` ops, the median step of
    PROFILED_STEPS and two tables of ops (by CPU time, by GPU time, summed over those steps)."""
    if not list(data.glob("train_*.bin")):
        print(f"no training data in {data}: run python3 trainer/prepare_data.py where pip works")
        return False
    config = model.small_config(data)
    flat = model.initial_weights(config)
    print(f"GPT small preset, B {model.BATCH} x T {model.SEQ_LEN}, bf16 autocast, "
          f"{PROFILED_STEPS} profiled steps after {WARM_UP_STEPS}, {torch.cuda.get_device_name()}, "
          f"PyTorch {torch.__version__}")
    for label, ops in (("stock", model.torch_check.TorchOps), ("swapped", model.CourseOps(swapped))):
        model.train(config, flat, data, WARM_UP_STEPS, ops, autocast=True)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
            _, seconds = model.train(config, flat, data, PROFILED_STEPS, ops, autocast=True)
            torch.cuda.synchronize()
        events = profiler.key_averages()
        print(f"\n== {label}: median step {1e3 * sorted(seconds)[len(seconds) // 2]:.2f} ms "
              f"(the tables sum {PROFILED_STEPS} steps and the model's construction)")
        print(events.table(sort_by="self_cpu_time_total", row_limit=ROWS))
        print(events.table(sort_by=_device_key(), row_limit=ROWS))
    return True
