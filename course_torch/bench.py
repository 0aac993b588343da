"""Each op's time per call at the GPT's shapes (course_torch/model.py: the small preset, B 8 x
T 195), the course's against PyTorch's eager op and the same op compiled with torch.compile,
measured side by side: the samples of the three interleaved, the L2 cache flushed before each,
CUDA events around each call, medians. Forward alone (inputs that require grad, as in training)
and forward plus backward."""
import statistics
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from course_torch.model import BATCH, SEQ_LEN, SMALL

SAMPLES = 40
FLUSH_BYTES = 256 << 20  # far above any GPU's L2 (an H100 has 50 MB)


@dataclass
class OpBench:
    label: str
    inputs: Callable[[], list]  # fresh inputs; the floating ones get requires_grad
    course: Callable
    torch_op: Callable


def specs() -> list[OpBench]:
    rows, C, H = BATCH * SEQ_LEN, SMALL["channels"], SMALL["heads"]
    vocab, padded = 50257, 50304
    f32, bf16 = torch.float32, torch.bfloat16

    def gpu(*shape, dtype=f32, scale=1.0):
        return (torch.randn(*shape, device="cuda") * scale).to(dtype)

    def linear(label, out_features, in_features):
        return OpBench(f"linear {label} [{rows}, {in_features}] x [{out_features}, {in_features}]^T "
                       "bf16", lambda: [gpu(rows, in_features, dtype=bf16),
                                        gpu(out_features, in_features, dtype=bf16, scale=0.02)],
                       lambda x, w: torch.ops.course.mm(x, w.t()), lambda x, w: F.linear(x, w))

    head = (BATCH, H, SEQ_LEN, C // H)
    return [
        OpBench(f"layernorm [{rows}, {C}] fp32", lambda: [gpu(rows, C), gpu(C), gpu(C)],
                lambda x, w, b: torch.ops.course.layernorm(x, w, b)[0],
                lambda x, w, b: F.layer_norm(x, (C,), w, b, 1e-5)),
        linear("qkv", 3 * C, C), linear("fc", 4 * C, C), linear("fcproj", C, 4 * C),
        linear("lm head", padded, C),
        OpBench(f"attention causal {list(head)} bf16",
                lambda: [gpu(*head, dtype=bf16) for _ in range(3)],
                lambda q, k, v: torch.ops.course.attention(q, k, v, True)[0],
                lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
        OpBench(f"gelu [{rows}, {4 * C}] bf16", lambda: [gpu(rows, 4 * C, dtype=bf16)],
                torch.ops.course.gelu, lambda x: F.gelu(x, approximate="tanh")),
        OpBench(f"cross_entropy [{rows}, {vocab}] fp32",
                lambda: [gpu(rows, vocab, scale=2.0),
                         torch.randint(0, vocab, (rows,), device="cuda")],
                lambda logits, t: torch.ops.course.cross_entropy(logits, t)[0],
                lambda logits, t: F.cross_entropy(logits, t)),
        OpBench(f"softmax [{rows}, {vocab}] fp32", lambda: [gpu(rows, vocab, scale=2.0)],
                torch.ops.course.softmax, lambda x: torch.softmax(x, -1)),
    ]


def interleaved_medians(calls: dict[str, Callable[[], None]]) -> dict[str, float]:
    """Microseconds per call, the median of SAMPLES, the calls' samples taken in turn."""
    flush = torch.empty(FLUSH_BYTES // 4, device="cuda")
    for call in calls.values():  # warm-up: allocations, autotuning, lazy initializations
        for _ in range(3):
            call()
    events = {name: [] for name in calls}
    for _ in range(SAMPLES):
        for name, call in calls.items():
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            events[name].append((start, end))
    torch.cuda.synchronize()
    return {name: 1e3 * statistics.median(s.elapsed_time(e) for s, e in pairs)
            for name, pairs in events.items()}


def _training_calls(spec: OpBench, function: Callable):
    """(forward, forward and backward) of `function` on inputs that require grad."""
    args = spec.inputs()
    leaves = [a.requires_grad_() if torch.is_floating_point(a) else a for a in args]
    differentiable = [a for a in leaves if isinstance(a, torch.Tensor) and a.requires_grad]
    grad = torch.ones_like(function(*leaves))

    def forward():
        function(*leaves)

    def both():
        torch.autograd.grad(function(*leaves), differentiable, grad)

    return forward, both


def bench() -> bool:
    """Prints the table; True (a report, not a test)."""
    print(f"time per call, microseconds (median of {SAMPLES}, L2 flushed, the three side by side), "
          f"{torch.cuda.get_device_name()}, PyTorch {torch.__version__}; the GPT's shapes "
          f"(B {BATCH} x T {SEQ_LEN}, C {SMALL['channels']})")
    print("| op | course fwd | eager fwd | compiled fwd | course fwd+bwd | eager fwd+bwd | "
          "compiled fwd+bwd | course vs eager (fwd+bwd) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for spec in specs():
        compiled = torch.compile(spec.torch_op, dynamic=False)
        calls = {}
        for name, function in (("course", spec.course), ("eager", spec.torch_op),
                               ("compiled", compiled)):
            calls[f"{name} fwd"], calls[f"{name} both"] = _training_calls(spec, function)
        t = interleaved_medians(calls)
        ratio = t["eager both"] / t["course both"]
        verdict = f"{'faster' if ratio > 1 else 'slower'}: {ratio:.2f}x eager's speed"
        print(f"| {spec.label} | {t['course fwd']:.1f} | {t['eager fwd']:.1f} | "
              f"{t['compiled fwd']:.1f} | {t['course both']:.1f} | {t['eager both']:.1f} | "
              f"{t['compiled both']:.1f} | {verdict} |", flush=True)
    return True
