"""Where a training step of the small GPT goes, stock and swapped (`python3 -m course_torch
profile`): the median step of an unprofiled run, then a few steps under torch.profiler (after
warm-up steps the profiler discards), broken down by the model's ops: each op's forward (a
profiler range around the call: the CPU time of the call, the GPU time of the kernels it
launched), each backward node of the autograd graph, and the rest (the optimizer, the clipping,
the glue between the ops), against the GPU's busy time per step.

A step whose GPU is busy for much less than the step takes is bound by the calls, not by the
kernels: then an op's CPU time per step is what it costs the step (the custom ops' dispatch,
their Python layers, the copies and conversions around the kernels), and its GPU time is hidden
behind the CPU's. The op-by-op forward table puts the stock and the swapped model side by side."""
import re
import statistics
from collections import defaultdict
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from course_torch import model

TIMED_STEPS = 30  # the unprofiled run: its median step, the first tenth left out (model.step_ms)
WARM_UP_STEPS = 3
PROFILED_STEPS = 5
ROWS = 15
BACKWARD = "autograd::engine::evaluate_function: "
# Each model op's backward nodes: PyTorch's (stock), the course's in C++ (CppNode<...>, the fast
# binding) or in Python (register_autograd's GeneratedBackwardFor_course_...). The glue between
# the ops (casts, views, the bias's add) has nodes of its own, left out here.
BACKWARD_OF = {
    "layer_norm": r"NativeLayerNormBackward|<LayerNorm>|_course_layernorm_",
    "linear": r"AddmmBackward|^MmBackward|<Mm>|_course_mm_",
    "attention": r"ScaledDotProduct\w*Backward|<Attention>|_course_attention_",
    "gelu": r"GeluBackward|<Gelu>|_course_gelu_",
    "cross_entropy": r"NllLossBackward|LogSoftmaxBackward|<CrossEntropy>|_course_cross_entropy_",
}
STEP = "ProfilerStep"  # the range around each step of the schedule (ProfilerStep#n, or *)


class Labelled:
    """`ops` (the model's table: TorchOps or CourseOps) with each op's call inside a profiler
    range named model.<op>, the forward's share of the step."""

    def __init__(self, ops):
        for name in model.SWAPPABLE:
            setattr(self, name, self._labelled(name, getattr(ops, name)))

    @staticmethod
    def _labelled(name, function):
        def call(*args, **kwargs):
            with record_function(f"model.{name}"):
                return function(*args, **kwargs)

        return call


def _short(name: str) -> str:
    """A backward node's name without its namespaces: torch::autograd::CppNode<(anonymous
    namespace)::Mm> is CppNode<Mm>."""
    return re.sub(r"[\w:() ]*::", "", name[len(BACKWARD):]) if name.startswith(BACKWARD) else name


def breakdown(events, steps: int) -> tuple[dict, float]:
    """({group: [calls, CPU us, GPU us] per step}, GPU busy us per step) from a profile's events.
    The groups are the top-level CPU events (those without a parent but the step's range: the
    model.<op> ranges, the autograd engine's backward nodes, and whatever else the step calls
    outside them), each with its children's CPU and GPU time; GPU busy is the sum of the GPU's
    own events (kernels, copies, fills)."""
    groups = defaultdict(lambda: [0, 0.0, 0.0])
    gpu_busy = 0.0
    for event in events:
        if event.device_type != DeviceType.CPU:
            gpu_busy += event.device_time_total
            continue
        parent = event.cpu_parent
        if event.name.startswith(STEP) or (parent is not None and not parent.name.startswith(STEP)):
            continue
        row = groups[_short(event.name)]
        row[0] += 1
        row[1] += event.cpu_time_total
        row[2] += event.device_time_total
    return {name: [calls / steps, cpu / steps, gpu / steps]
            for name, (calls, cpu, gpu) in groups.items()}, gpu_busy / steps


def _profile(config, flat, data: Path, ops):
    """(median unprofiled step in ms, {group: per step}, GPU busy us per step, key averages)."""
    _, seconds = model.train(config, flat, data, TIMED_STEPS, ops, autocast=True)
    wall_ms = model.step_ms(seconds)
    captured = []
    marks = _StepMarks()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(wait=0, warmup=WARM_UP_STEPS, active=PROFILED_STEPS, repeat=1),
                 on_trace_ready=lambda done: captured.append((done.events(),
                                                              done.key_averages()))) as profiler:
        marks.profiler = profiler
        gpt = model.torch_check.Gpt(config, flat, Labelled(ops)).cuda()
        loader = model.torch_check.Loader(str(data / "train_*.bin"), model.BATCH, model.SEQ_LEN)
        model.torch_check.train_torch(gpt, loader, WARM_UP_STEPS + PROFILED_STEPS,
                                      model.LEARNING_RATE, 1, torch.bfloat16, marks)
        torch.cuda.synchronize()
    events, averages = captured[0]
    groups, gpu_busy = breakdown(events, PROFILED_STEPS)
    return wall_ms, groups, gpu_busy, averages


class _StepMarks(list):
    """The `seconds` list train_torch appends each step's time to; each append also ends a step
    of the profiler's schedule (warm-up, then the profiled steps)."""

    profiler = None

    def append(self, value):
        super().append(value)
        self.profiler.step()


def _print_groups(label: str, wall_ms: float, groups: dict, gpu_busy: float) -> None:
    cpu_total = sum(row[1] for row in groups.values())
    print(f"\n== {label}: step {wall_ms:.2f} ms (median of {TIMED_STEPS} unprofiled steps); "
          f"profiled, per step: GPU busy {gpu_busy / 1e3:.2f} ms, CPU in the step's top-level "
          f"calls {cpu_total / 1e3:.2f} ms (the autograd engine's thread included)")
    verdict = ("bound by the calls: the GPU idles most of the step, an op's CPU time is its cost"
               if gpu_busy < 0.7e3 * wall_ms else
               "the GPU is busy most of the step: the kernels' time counts")
    print(f"   {verdict}")
    print("| top-level call (per step) | calls | CPU ms | GPU ms |")
    print("|---|---:|---:|---:|")
    ranked = sorted(groups.items(), key=lambda item: -item[1][1])
    shown, rest = ranked[:ROWS], ranked[ROWS:]
    for name, (calls, cpu, gpu) in shown:
        print(f"| {name} | {calls:.0f} | {cpu / 1e3:.3f} | {gpu / 1e3:.3f} |")
    if rest:
        print(f"| {len(rest)} others | {sum(r[0] for _, r in rest):.0f} | "
              f"{sum(r[1] for _, r in rest) / 1e3:.3f} | {sum(r[2] for _, r in rest) / 1e3:.3f} |")


def profile_steps(data: Path, swapped) -> bool:
    """Prints, for the stock model and the one with `swapped` ops: the step, the breakdown of the
    profiled steps, and PyTorch's own tables (self CPU and self GPU time per op name); then the
    model's ops' forwards side by side."""
    if not list(data.glob("train_*.bin")):
        print(f"no training data in {data}: run python3 trainer/prepare_data.py where pip works")
        return False
    config = model.small_config(data)
    flat = model.initial_weights(config)
    print(f"GPT small preset, B {model.BATCH} x T {model.SEQ_LEN}, bf16 autocast; "
          f"{PROFILED_STEPS} profiled steps after {WARM_UP_STEPS}; swapped: {', '.join(swapped)}; "
          f"{torch.cuda.get_device_name()}, PyTorch {torch.__version__}. The profiler's ranges "
          "and records slow the profiled steps: compare their shares, and the unprofiled steps.")
    results = {}
    stock_and_swapped = (("stock", model.torch_check.TorchOps),
                         ("swapped", model.CourseOps(swapped)))
    for label, ops in stock_and_swapped:
        wall_ms, groups, gpu_busy, averages = _profile(config, flat, data, ops)
        results[label] = groups
        _print_groups(label, wall_ms, groups, gpu_busy)
        print(averages.table(sort_by="self_cpu_time_total", row_limit=ROWS))
        print(averages.table(sort_by="self_device_time_total", row_limit=ROWS))
    print("\nthe model's ops, ms per step, stock against swapped: the forward (the call's range) "
          "and the backward (the op's own nodes: BACKWARD_OF)")
    print("| op | calls | fwd CPU stock | fwd CPU swapped | bwd CPU stock | bwd CPU swapped | "
          "GPU stock | GPU swapped |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in model.SWAPPABLE:
        row = {label: _op_share(results[label], name) for label in ("stock", "swapped")}
        print(f"| {name} | {row['stock'][0]:.0f} | {row['stock'][1]:.3f} | "
              f"{row['swapped'][1]:.3f} | {row['stock'][2]:.3f} | {row['swapped'][2]:.3f} | "
              f"{row['stock'][3]:.3f} | {row['swapped'][3]:.3f} |")
    return True


def _op_share(groups: dict, name: str) -> tuple[float, float, float, float]:
    """(calls, forward CPU ms, backward CPU ms, GPU ms of both) per step of the model's op."""
    calls, forward_cpu, forward_gpu = groups.get(f"model.{name}", [0, 0.0, 0.0])
    nodes = [row for group, row in groups.items() if re.search(BACKWARD_OF[name], group)]
    backward_cpu = sum(row[1] for row in nodes)
    gpu = forward_gpu + sum(row[2] for row in nodes)
    return calls, forward_cpu / 1e3, backward_cpu / 1e3, gpu / 1e3
