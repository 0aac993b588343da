"""The checks of 08_training/torch_ops, op by op, then a torch.compile run (needs a CUDA GPU).

Per op, in order, the first problem ends its checks:
1. the forward against PyTorch's own op in float64, within a tolerance derived from the kernel's
   dtype and the reduction length (common/include/course/compare.h's rule);
2. the same input as a transposed, non-contiguous view: the same values, or a refusal that says
   so (torch_ops.h: such a view is made contiguous);
3. for a differentiable op, a backward must be registered: without one PyTorch only warns and
   leaves the inputs without gradient, a silent error in a model;
4. torch.library.opcheck: the schema, the autograd registration, the fake function against the
   real op (shapes, dtypes, strides), and AOT dispatch with dynamic shapes (how torch.compile
   traces it). It does not look at the gradients' values;
5. the gradients: torch.autograd.gradcheck (finite differences of the forward) where the op is
   float32 through and through, its tolerance derived from float32's rounding and the step;
   where a kernel is bfloat16 (or the backward is, as 07's flash_backward for every dtype),
   against PyTorch's own op in float64, allowing twice the error PyTorch's own bfloat16 op makes
   on the same inputs (the rule of FlashAttention's tests).
A wrong gradient is named by op and input. Then a small model through the ops, compiled with
torch.compile(fullgraph=True), forward and backward, against its eager run.
"""
import math
import re
import warnings
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch.autograd.gradcheck import GradcheckError

from grader.results import CRASH, FAIL, PASS, SKIPPED, TODO

UNIT_ROUNDOFF_FP32 = 2.0**-24
UNIT_ROUNDOFF_BF16 = 2.0**-8
# gradcheck's finite-difference step for float32 inputs of magnitude about 1: large enough that
# float32's rounding of the forward, divided by it, stays small; small enough that the central
# difference's own error, step^2 / 6 times a third derivative of order 1, does too.
GRADCHECK_EPS = 1e-2
TODO_TAG = "[course:todo]"
# Where the checks run: the ops are CUDA ops. (The package's tests run the checks' logic on the
# CPU, against CPU stand-ins of the ops.)
DEVICE = "cuda"
CUDA_ERROR_TAG = "[course:cuda-error]"


def fp32_tolerance(terms: int, magnitude: float = 1.0) -> tuple[float, float]:
    """(atol, rtol) of a float32 result summed from `terms` values of about `magnitude`:
    compare.h's Tolerance::float32, 8 unit roundoffs times sqrt(terms)."""
    rtol = 8.0 * UNIT_ROUNDOFF_FP32 * math.sqrt(terms)
    return rtol * magnitude * math.sqrt(terms), rtol


def gradcheck_tolerance(terms: int, magnitude: float, eps: float = GRADCHECK_EPS
                        ) -> tuple[float, float]:
    """(atol, rtol) for gradcheck of a float32 op: the forward's rounding (fp32_tolerance) turns
    into tolerance / eps in a central difference, and the difference's own truncation error is
    about eps^2 times the output's scale."""
    atol, rtol = fp32_tolerance(terms, magnitude)
    return atol / eps + eps**2 * magnitude, max(rtol, 1e-3)


class Problem(Exception):
    """A check's finding: one line, and the status it gives the exercise."""

    def __init__(self, status: str, line: str):
        super().__init__(line)
        self.status = status
        self.line = line


def _messages(error: BaseException) -> str:
    """The text of an exception and of those it was raised from (opcheck wraps the op's)."""
    texts, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        texts.append(str(error))
        error = error.__cause__ or error.__context__
    return "\n".join(texts)


def classify(op: str, what: str, error: BaseException) -> Problem:
    """An exception raised while checking `op` as the status it means: todo (a stub's
    COURSE_TODO, or a Python TODO), crash (a CUDA error: the process's context is spoiled), or
    fail, with its first line."""
    text = _messages(error)
    if TODO_TAG in text:
        line = next(line for line in text.splitlines() if TODO_TAG in line)
        return Problem(TODO, f"{op}: {line.strip()}")
    if CUDA_ERROR_TAG in text or "CUDA error" in text or "illegal memory access" in text:
        line = next(line for line in text.splitlines()
                    if CUDA_ERROR_TAG in line or "CUDA error" in line or "illegal" in line)
        return Problem(CRASH, f"{op}: {what}: {line.replace(CUDA_ERROR_TAG, '').strip()} (run "
                              "it under compute-sanitizer to find the access)")
    first = next((line.strip() for line in str(error).splitlines() if line.strip()), repr(error))
    return Problem(FAIL, f"{op}: {what}: {first}")


def attempt(op: str, what: str, call: Callable):
    try:
        return call()
    except Problem:
        raise
    except Exception as error:  # the op's own errors, whatever their type
        raise classify(op, what, error) from None


def max_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return (got.double() - want.double()).abs().max().item()


def expect_close(op: str, what: str, got: torch.Tensor, want: torch.Tensor, atol: float,
                 rtol: float) -> None:
    got, want = got.double(), want.double()
    if got.shape != want.shape:
        raise Problem(FAIL, f"{op}: {what} has shape {tuple(got.shape)}, PyTorch's "
                            f"{tuple(want.shape)}")
    bad = ~((got - want).abs() <= atol + rtol * want.abs())  # NaN is bad too
    if bad.any():
        index = tuple(int(i) for i in bad.nonzero()[0])
        raise Problem(FAIL, f"{op}: {what}: {int(bad.sum())} of {got.numel()} elements differ "
                            f"from PyTorch's; the first at {index}: {got[index].item():.6g} "
                            f"against {want[index].item():.6g} (atol {atol:.2g}, rtol {rtol:.2g})")


@dataclass
class Case:
    """One op on one set of inputs."""

    op: str  # the op's name in torch.ops.course
    label: str  # which case (dtype, causal)
    inputs: Callable[[], list]  # fresh inputs, on the GPU
    names: tuple[str, ...]  # the inputs' names, as the schema has them
    reference: Callable  # PyTorch's own op: the differentiable output(s) from the inputs
    output: Callable  # the op's differentiable output from its result (a tensor, or a tuple)
    differentiable: tuple[int, ...] = ()  # the inputs that get gradients
    terms: int = 1  # the longest sum behind one output (for the float32 tolerances)
    magnitude: float = 1.0  # the outputs' scale
    # Where a kernel is bfloat16 (the forward's, the backward's), its results are compared with
    # PyTorch's own op in bfloat16 (the backward's: on the inputs rounded to bfloat16).
    bf16_forward: bool = False
    bf16_backward: bool = False
    transposed: int | None = None  # the input fed as a transposed view in check 2
    min_sm: int = 0  # below it the op refuses (bf16 tensor cores): skipped with the reason

    @property
    def name(self) -> str:
        return f"course::{self.op} ({self.label})"

    def call(self, args):
        return getattr(torch.ops.course, self.op)(*args)


def _is_float(value) -> bool:
    return isinstance(value, torch.Tensor) and torch.is_floating_point(value)


def _as(args: list, dtype: torch.dtype) -> list:
    """The floating-point tensors of `args` in `dtype`; the rest (indices, flags) as they are."""
    return [a.to(dtype) if _is_float(a) else a for a in args]


def _transposed_view(t: torch.Tensor) -> torch.Tensor:
    """`t`'s values in a non-contiguous layout: the transpose of a contiguous transpose."""
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


def check_forward(case: Case) -> None:
    args = case.inputs()
    got = case.output(attempt(case.name, "the forward", lambda: case.call(args)))
    want = case.reference(*_as(args, torch.float64))
    if case.bf16_forward:
        lowered = case.reference(*args)  # PyTorch's own op in the inputs' dtype
        atol = 2 * max_error(lowered, want) + 0.25 * UNIT_ROUNDOFF_BF16 * want.abs().max().item()
        rtol = 0.0
    else:
        atol, rtol = fp32_tolerance(case.terms, case.magnitude)
    expect_close(case.name, "the forward", got, want, atol, rtol)
    if case.transposed is None:
        return
    viewed = list(args)
    viewed[case.transposed] = _transposed_view(args[case.transposed])
    try:
        strided = case.output(case.call(viewed))
    except RuntimeError as error:
        if "contiguous" in str(error) or "stride" in str(error):
            return  # refused with a clear error: allowed (torch_ops.h)
        raise classify(case.name, "a non-contiguous input", error) from None
    # The same values in another layout: the same result, up to a kernel's own rounding (a sum in
    # another order); a pointer read as row-major gives other values altogether.
    if not ((strided.double() - got.double()).abs() <= atol + rtol * got.double().abs()).all():
        raise Problem(FAIL, f"{case.name}: with `{case.names[case.transposed]}` a transposed "
                            f"(non-contiguous) view of the same values (strides "
                            f"{viewed[case.transposed].stride()}), the result differs by "
                            f"{max_error(strided, got):.3g}: the binding passed its data pointer "
                            "as if it were row-major; make it contiguous first (or refuse it "
                            "with a clear error)")


def check_opcheck(case: Case) -> None:
    args = case.inputs()
    for index in case.differentiable:
        args[index].requires_grad_(True)
    tests = ["test_schema", "test_faketensor", "test_aot_dispatch_dynamic"]
    if case.differentiable:
        tests.insert(1, "test_autograd_registration")
    overload = getattr(torch.ops.course, case.op).default
    try:
        torch.library.opcheck(overload, tuple(args), test_utils=tests)
    except Exception as error:
        problem = classify(case.name, "opcheck", error)
        if problem.status == FAIL and "test_faketensor" in str(error):
            cause = _messages(error).splitlines()[-1]
            raise Problem(FAIL, f"{case.name}: the fake function (register_fake) disagrees with "
                                f"the CUDA op (opcheck's test_faketensor): {cause}") from None
        raise problem from None


def check_backward_registered(case: Case) -> None:
    name = f"course::{case.op}"
    if case.differentiable and not torch._C._dispatch_has_kernel_for_dispatch_key(name, "Autograd"):
        raise Problem(FAIL, f"{case.name}: no backward is registered (torch.library."
                            "register_autograd): PyTorch would only warn, and the inputs would "
                            "get no gradient from it")


def check_gradients(case: Case) -> None:
    if not case.differentiable:
        return
    if case.bf16_backward:
        return _compare_gradients(case)
    args = case.inputs()
    for index in case.differentiable:
        args[index].requires_grad_(True)

    def forward(*differentiable):
        full = list(args)
        for index, tensor in zip(case.differentiable, differentiable):
            full[index] = tensor
        return case.output(case.call(full))

    atol, rtol = gradcheck_tolerance(case.terms, case.magnitude)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gradcheck's advice to use float64: the kernels are float32
        try:
            torch.autograd.gradcheck(forward, tuple(args[i] for i in case.differentiable),
                                     eps=GRADCHECK_EPS, atol=atol, rtol=rtol)
        except GradcheckError as error:
            found = re.search(r"with respect to input (\d+)", str(error))
            which = case.differentiable[int(found[1])] if found else None
            named = f"`{case.names[which]}` (input {which})" if which is not None else "an input"
            raise Problem(FAIL, f"{case.name}: the gradient with respect to {named} is wrong: the "
                                "backward's Jacobian differs from the finite differences of the "
                                f"forward (torch.autograd.gradcheck, atol {atol:.2g}, rtol "
                                f"{rtol:.2g}): check what register_autograd's backward returns "
                                "for it, and the kernel it calls") from None
        except Exception as error:
            raise classify(case.name, "the backward", error) from None


def _compare_gradients(case: Case) -> None:
    """The op's gradients against float64 PyTorch's, allowing twice the error of PyTorch's own op
    on the inputs rounded to bfloat16 (plus a quarter of a bfloat16 unit of the largest
    gradient)."""
    args = case.inputs()
    torch.manual_seed(1)
    dout = torch.randn_like(case.reference(*args).float())

    def gradients(function, inputs):
        leaves = [t.detach().clone().requires_grad_(i in case.differentiable)
                  if _is_float(t) else t for i, t in enumerate(inputs)]
        out = function(leaves)
        return torch.autograd.grad(out, [leaves[i] for i in case.differentiable],
                                   dout.to(out.dtype))

    ours = attempt(case.name, "the backward",
                   lambda: gradients(lambda a: case.output(case.call(a)), args))
    exact = gradients(lambda a: case.reference(*a), _as(args, torch.float64))
    lowered = gradients(lambda a: case.reference(*a), _as(args, torch.bfloat16))
    for index, mine, want, theirs in zip(case.differentiable, ours, exact, lowered):
        error, own = max_error(mine, want), max_error(theirs, want)
        allowed = 2 * own + 0.25 * UNIT_ROUNDOFF_BF16 * want.abs().max().item()
        if not error <= allowed:
            raise Problem(FAIL, f"{case.name}: the gradient with respect to `{case.names[index]}` "
                                f"(input {index}) is wrong: {error:.3g} from float64's, where "
                                f"PyTorch's own {args[0].dtype} op is {own:.3g} off (allowed "
                                f"{allowed:.3g}): check what register_autograd's backward returns "
                                "for it, and the kernel it calls")


def run_case(case: Case, sm: int) -> tuple[str, str]:
    """(status, line) of one case."""
    if sm < case.min_sm:
        return SKIPPED, (f"{case.name}: skipped, its bfloat16 kernel needs compute capability "
                         f"{case.min_sm / 10:.1f} (this GPU: {sm / 10:.1f})")
    try:
        check_forward(case)
        check_backward_registered(case)
        check_opcheck(case)
        check_gradients(case)
    except Problem as problem:
        return problem.status, problem.line
    checked = ("no gradient" if not case.differentiable else "gradients against float64"
               if case.bf16_backward else "gradcheck")
    return PASS, f"{case.name}: forward, non-contiguous input, opcheck, {checked}: ok"


# ---- The cases ----

def _gpu(*shape, scale=1.0, dtype=torch.float32, seed=0):
    generator = torch.Generator(device=DEVICE).manual_seed(seed)
    return (torch.randn(*shape, generator=generator, device=DEVICE) * scale).to(dtype)


def _sdpa(causal):
    return lambda q, k, v, *_: F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def cases() -> list[Case]:
    """Shapes that are multiples of nothing a kernel might assume (33 columns, 37 channels, 9 or
    33 keys), small enough for a full Jacobian."""
    f32, bf16 = torch.float32, torch.bfloat16
    targets = lambda: torch.randint(0, 33, (4,), device=DEVICE, generator=torch.Generator(
        device=DEVICE).manual_seed(3))
    out0 = lambda result: result[0]
    same = lambda result: result
    found = [
        Case("softmax", "float32", lambda: [_gpu(4, 33, scale=3.0)], ("x",),
             lambda x: torch.softmax(x, -1), same, (0,), terms=33, transposed=0),
        Case("layernorm", "float32",
             lambda: [_gpu(3, 37, seed=1) + 2.0, _gpu(37, seed=2), _gpu(37, seed=3)],
             ("x", "weight", "bias"),
             lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5), out0, (0, 1, 2),
             terms=37, magnitude=3.0, transposed=0),
        Case("cross_entropy", "float32", lambda: [_gpu(4, 33, scale=2.0, seed=4), targets()],
             ("logits", "targets"), lambda logits, t: F.cross_entropy(logits, t), out0, (0,),
             terms=33 * 4, magnitude=4.0, transposed=0),
        Case("gelu", "float32", lambda: [_gpu(5, 13, scale=2.0, seed=5)], ("x",),
             lambda x: F.gelu(x, approximate="tanh"), same, (0,), magnitude=4.0, transposed=0),
        Case("gelu", "bfloat16", lambda: [_gpu(5, 13, scale=2.0, seed=5, dtype=bf16)], ("x",),
             lambda x: F.gelu(x, approximate="tanh"), same, (0,), bf16_forward=True,
             bf16_backward=True, transposed=0),
        Case("mm", "float32", lambda: [_gpu(5, 7, seed=6), _gpu(7, 9, seed=7)], ("a", "b"),
             lambda a, b: a @ b, same, (0, 1), terms=7, magnitude=2.0, transposed=0),
        Case("mm", "bfloat16", lambda: [_gpu(16, 24, seed=6, dtype=bf16),
                                         _gpu(24, 40, seed=7, dtype=bf16)], ("a", "b"),
             lambda a, b: a @ b, same, (0, 1), bf16_forward=True, bf16_backward=True,
             transposed=1, min_sm=80),
    ]
    for dtype, label, shape in ((f32, "float32", (1, 2, 9, 64)), (bf16, "bfloat16", (2, 2, 33, 64)),
                                (bf16, "bfloat16, D 128", (1, 1, 17, 128))):
        for causal in (True, False):
            found.append(Case(
                "attention", f"{label}, {'causal' if causal else 'not causal'}",
                lambda shape=shape, dtype=dtype, causal=causal:
                [_gpu(*shape, seed=s, dtype=dtype) for s in (8, 9, 10)] + [causal], ("q", "k", "v", "causal"), _sdpa(causal), out0, (0, 1, 2),
                terms=shape[2] * shape[3], magnitude=3.0, bf16_forward=dtype == bf16,
                bf16_backward=True, transposed=1,
                # 07's flash_backward is bf16 for every dtype (the float32 forward runs anywhere)
                min_sm=80))
    # The backwards as ops of their own: forward values, non-contiguous inputs, opcheck.
    found += [
        Case("layernorm_backward", "float32", _layernorm_backward_inputs,
             ("dy", "x", "weight", "mean", "rstd"), _layernorm_backward_reference, _flat,
             terms=37, magnitude=3.0, transposed=0),
        Case("gelu_backward", "float32", lambda: [_gpu(5, 13, seed=11), _gpu(5, 13, scale=2.0, seed=5)],
             ("dy", "x"), _gelu_backward_reference, same, magnitude=4.0, transposed=0),
    ]
    return found


def _layernorm_backward_inputs():
    x = _gpu(3, 37, seed=1) + 2.0
    mean = x.mean(-1)
    rstd = (x.var(-1, unbiased=False) + 1e-5).rsqrt()
    return [_gpu(3, 37, seed=12), x, _gpu(37, seed=2), mean, rstd]


def _layernorm_backward_reference(dy, x, weight, mean, rstd):
    x, weight = x.detach().requires_grad_(), weight.detach().requires_grad_()
    bias = torch.zeros_like(weight, requires_grad=True)
    y = F.layer_norm(x, (x.shape[-1],), weight, bias, 1e-5)
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(y, (x, weight, bias), dy)])


def _gelu_backward_reference(dy, x):
    x = x.detach().requires_grad_()
    (dx,) = torch.autograd.grad(F.gelu(x, approximate="tanh"), x, dy)
    return dx


def _flat(result):
    """layernorm_backward's three gradients as one tensor, as its reference gives them."""
    return torch.cat([t.reshape(-1) for t in result])


def check_compile(sm: int) -> tuple[str, str]:
    """A small model through the ops, compiled whole (fullgraph: a graph break at an op would
    fail), forward and backward, against its eager run."""
    name = "torch.compile"

    def model(x, weight, bias, w1, w2, targets):
        h = torch.ops.course.layernorm(x, weight, bias)[0]
        attended = torch.ops.course.attention(h.view(1, 1, 16, 64), h.view(1, 1, 16, 64),
                                              h.view(1, 1, 16, 64), True)[0].view(16, 64)
        h = torch.ops.course.gelu(torch.ops.course.mm(h + attended, w1))
        logits = torch.ops.course.mm(h, w2)
        return (torch.ops.course.cross_entropy(logits, targets)[0]
                + torch.ops.course.softmax(logits).pow(2).mean())

    def inputs():
        leaves = [_gpu(16, 64, seed=20), _gpu(64, seed=21), _gpu(64, seed=22),
                  _gpu(64, 96, scale=0.1, seed=23), _gpu(96, 40, scale=0.1, seed=24)]
        for leaf in leaves:
            leaf.requires_grad_(True)
        return leaves + [torch.randint(0, 40, (16,), device=DEVICE)]

    if sm < 80:
        return SKIPPED, f"{name}: skipped, attention's backward needs compute capability 8.0"
    try:
        eager_args, compiled_args = inputs(), inputs()
        for mine, theirs in zip(compiled_args, eager_args):
            with torch.no_grad():
                mine.copy_(theirs)
        eager = model(*eager_args)
        eager.backward()
        compiled_model = torch.compile(model, fullgraph=True)
        compiled = compiled_model(*compiled_args)
        compiled.backward()
    except Problem as problem:
        return problem.status, problem.line
    except Exception as error:
        problem = classify(name, "a model of the ops, compiled with fullgraph=True", error)
        return problem.status, problem.line
    atol, rtol = fp32_tolerance(64 * 16, 4.0)
    try:
        expect_close(name, "the loss, compiled against eager", compiled, eager, atol, rtol)
        for index, (mine, theirs) in enumerate(zip(compiled_args[:5], eager_args[:5])):
            # attention's backward is bf16: its gradients' rounding differs between fusions
            expect_close(name, f"the gradient of input {index}, compiled against eager",
                         mine.grad, theirs.grad, 0.05 * theirs.grad.abs().max().item(), 0.0)
    except Problem as problem:
        return problem.status, problem.line
    return PASS, (f"{name}: a model of every op (layernorm, attention, mm, gelu, cross_entropy, "
                  "softmax) traced whole (fullgraph) and run forward and backward: as eager")


def run_all(sm: int, log: Callable[[str], None] = lambda line: None) -> tuple[str, list[str]]:
    """Every case, then the compile run: the exercise's status and its lines. A crash stops the
    checks (the CUDA context is spoiled); otherwise todo outranks fail (a stub's op is todo, not
    wrong), fail outranks pass, and skipped cases are listed without changing the status."""
    lines, statuses = [], []
    for case in cases():
        status, line = run_case(case, sm)
        log(line)
        lines.append(line)
        statuses.append(status)
        if status == CRASH:
            return CRASH, _order(lines, statuses)
    if not any(status in (TODO, FAIL) for status in statuses):
        status, line = check_compile(sm)
        log(line)
        lines.append(line)
        statuses.append(status)
        if status == CRASH:
            return CRASH, _order(lines, statuses)
    for outcome in (TODO, FAIL):
        if outcome in statuses:
            return outcome, _order(lines, statuses)
    return PASS, _order(lines, statuses)


def _order(lines: list[str], statuses: list[str]) -> list[str]:
    """The lines that say what is wrong first (the grader shows the first few), then the rest."""
    rank = {CRASH: 0, TODO: 1, FAIL: 1, SKIPPED: 2, PASS: 3}
    return [line for _, line in sorted(zip(statuses, lines), key=lambda pair: rank[pair[0]])]
