"""CPU stand-ins of the binding's C++ half (torch.ops.course.* with torch_ops.h's schemas, their
kernels written with PyTorch's ops), so that the checks' logic and the binding's Python half run
where there is no GPU. A stand-in may carry a planted bug of the C++ side (`bugs`), for the tests
that the checks catch it.

    python3 course_torch/tests/cpu_ops.py BINDING_PY [BUG,...] [AUTOGRAD_CPP]

defines the stand-ins, runs BINDING_PY (a torch_ops.py) and the checks on the CPU, and prints
the result as JSON: one process per run, since an op's registrations last as long as the process.
AUTOGRAD_CPP, the fast binding's backwards in C++ (torch_ops_autograd.cpp), is built for the
CPU's autograd key (build/torch_ops/cpu_autograd) and loaded after BINDING_PY: the checks then
run through its backwards, and the JSON names the node that course::mm's output records.
"""
import importlib.util
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from course_torch.plan import schemas  # noqa: E402
# The bugs a stand-in can carry: those of the C++ half and of the kernels it calls.
BUGS = ("softmax_ignores_strides", "layernorm_backward_drops_the_mean_term")
GELU_SCALE, GELU_CUBIC = math.sqrt(2 / math.pi), 0.044715  # 08_training/gelu.h


def _row_major_storage(x: torch.Tensor) -> torch.Tensor:
    """What a kernel reads through x's data pointer when it ignores x's strides."""
    strides = [math.prod(x.shape[i + 1:]) for i in range(x.dim())]
    return x.as_strided(x.shape, strides, x.storage_offset())


def _gelu(x):
    return F.gelu(x.float(), approximate="tanh").to(x.dtype)


def define(bugs=()) -> torch.library.Library:
    unknown = set(bugs) - set(BUGS)
    if unknown:
        raise ValueError(f"unknown bugs {sorted(unknown)}")
    lib = torch.library.Library("course", "DEF")
    for schema in schemas(ROOT):
        lib.define(schema)

    def softmax(x):
        x = _row_major_storage(x) if "softmax_ignores_strides" in bugs else x.contiguous()
        return torch.softmax(x, -1)

    def layernorm(x, weight, bias):
        mean = x.mean(-1)
        rstd = (x.var(-1, unbiased=False) + 1e-5).rsqrt()
        y = (x - mean[..., None]) * rstd[..., None] * weight + bias
        return y.contiguous(), mean.contiguous(), rstd.contiguous()

    def layernorm_backward(dy, x, weight, mean, rstd):
        xhat = (x - mean[..., None]) * rstd[..., None]
        g = dy * weight
        mean_g = 0 if "layernorm_backward_drops_the_mean_term" in bugs else g.mean(-1, keepdim=True)
        dx = rstd[..., None] * (g - mean_g - xhat * (g * xhat).mean(-1, keepdim=True))
        rows = dy.reshape(-1, dy.shape[-1]), xhat.reshape(-1, x.shape[-1])
        return dx.contiguous(), (rows[0] * rows[1]).sum(0), rows[0].sum(0)

    def cross_entropy(logits, targets):
        losses = F.cross_entropy(logits, targets, reduction="none")
        dlogits = torch.softmax(logits, -1)
        dlogits[torch.arange(len(targets)), targets] -= 1
        return losses.mean(), (dlogits / len(targets)).contiguous()

    def gelu_backward(dy, x):
        x32 = x.float()
        t = torch.tanh(GELU_SCALE * (x32 + GELU_CUBIC * x32**3))
        derivative = 0.5 * (1 + t) + 0.5 * x32 * (1 - t * t) * GELU_SCALE * (1 + 3 * GELU_CUBIC * x32**2)
        return (dy.float() * derivative).to(x.dtype)

    def attention(q, k, v, causal):
        scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
        if causal:
            scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), -math.inf)
        lse = torch.logsumexp(scores, -1)
        out = torch.exp(scores - lse[..., None]) @ v.float()
        return out.to(q.dtype), lse

    def attention_backward(dout, q, k, v, out, lse, causal):
        # As flash_backward: from the inputs rounded to bf16, gradients in float32.
        with torch.enable_grad():
            leaves = [t.detach().to(torch.bfloat16).float().requires_grad_() for t in (q, k, v)]
            result = F.scaled_dot_product_attention(*leaves, is_causal=causal)
            grads = torch.autograd.grad(result, leaves, dout.to(torch.bfloat16).float())
        return tuple(g.to(q.dtype) for g in grads)

    def mm(a, b):
        return (a.float() @ b.float()).to(a.dtype)

    for name, function in (("softmax", softmax), ("layernorm", layernorm),
                           ("layernorm_backward", layernorm_backward),
                           ("cross_entropy", cross_entropy), ("gelu", _gelu),
                           ("gelu_backward", gelu_backward), ("attention", attention),
                           ("attention_backward", attention_backward), ("mm", mm)):
        lib.impl(name, function, "CPU")
    return lib


def _load_autograd(source: Path) -> None:
    from torch.utils import cpp_extension

    build = ROOT / "build" / "torch_ops" / "cpu_autograd"
    build.mkdir(parents=True, exist_ok=True)
    cpp_extension.load(name="course_torch_autograd_cpu", sources=[str(source)],
                       extra_include_paths=[str(ROOT / "modules" / "08_training")],
                       extra_cflags=["-O1", "-DCOURSE_AUTOGRAD_KEY=AutogradCPU"],
                       build_directory=str(build), is_python_module=False)


def main() -> None:
    from course_torch import checks

    library = define(tuple(bug for bug in sys.argv[2:3] for bug in bug.split(",") if bug))
    spec = importlib.util.spec_from_file_location("binding", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        problem = checks.classify("torch_ops.py", "loading it", error)
        print(json.dumps({"status": problem.status, "lines": [problem.line]}))
        return
    autograd_cpp = len(sys.argv) > 3
    if autograd_cpp:
        _load_autograd(Path(sys.argv[3]))
    checks.DEVICE = "cpu"
    status, lines = checks.run_all(90)
    report = {"status": status, "lines": lines}
    if autograd_cpp:
        a = torch.randn(8, 8, requires_grad=True)
        report["mm_backward"] = type(torch.ops.course.mm(a, a).grad_fn).__name__
    print(json.dumps(report))
    del library


if __name__ == "__main__":
    main()
