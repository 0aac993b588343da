"""Which files make the extension, and how they are compiled: pure Python (no PyTorch needed),
so that CI tests it.

Each contract function the binding calls comes from one exercise's file: the learner's stub
(modules/), the readable solution, or the fast reference where the exercise has one (solutions/,
or the folder a mutant run copies them to). The binding itself, 08_training/torch_ops.cpp and
torch_ops.py, is the learner's or the solutions'; the fast variant adds to the solutions' one
their backwards in C++ (torch_ops_autograd.cpp: AUTOGRAD_CPP).
"""
import re
from dataclasses import dataclass, field
from pathlib import Path

from grader.course import Course
from grader.results import FAST, LEARNER, SOLUTION

VARIANTS = (LEARNER, SOLUTION, FAST)
BINDING_MODULE = "08_training"
BINDING = "torch_ops"
# The fast variant's addition to the binding: the ops' backwards as C++ autograd Functions,
# registered for AutogradCUDA, where they take the place of torch_ops.py's (registered for the
# Autograd alias) without a Python call per op.
AUTOGRAD_CPP = "torch_ops_autograd.cpp"


@dataclass(frozen=True)
class Kernel:
    """A family of contract functions the binding calls, and the exercises that define it, best
    first: the first whose min_sm the GPU reaches is compiled in (one definition per symbol)."""

    functions: str
    exercises: tuple[str, ...]


# The binding's kernels (torch_ops.h). Only gemm_bf16 has a choice: 05's wgmma_gemm uses Hopper's
# own instructions (min_sm 90), mma_pipeline runs from compute capability 8.0. The bf16 exercises
# (min_sm 80) are compiled in on older GPUs too: their kernels compile to a trap there, and the
# binding refuses bf16 with the reason before it calls them.
KERNELS = (
    Kernel("softmax_online", ("06_softmax_norms/softmax_online",)),
    Kernel("layernorm", ("06_softmax_norms/layernorm",)),
    Kernel("layernorm_backward", ("06_softmax_norms/layernorm_backward",)),
    Kernel("cross_entropy", ("06_softmax_norms/cross_entropy",)),
    Kernel("gelu_forward, gelu_backward", ("08_training/gelu",)),
    Kernel("flash_causal", ("07_attention/flash_causal",)),
    Kernel("flash_tc", ("07_attention/flash_tc",)),
    Kernel("flash_backward", ("07_attention/flash_backward",)),
    Kernel("sgemm", ("05_gemm_advanced/sgemm_warptile",)),
    Kernel("gemm_bf16", ("05_gemm_advanced/wgmma_gemm", "05_gemm_advanced/mma_pipeline")),
)

# What an exercise's headers reach in the harness, which the checkers link and the extension must
# compile in itself: course/tensor_map.h's driver entry point (module 05's TMA, wgmma_gemm; without
# it the extension does not load, an undefined symbol). The trainer's libraries link the same file
# (trainer/CMakeLists.txt, trainer_kernel_support).
SUPPORT = ("common/src/tensor_map.cpp",)


@dataclass(frozen=True)
class Plan:
    variant: str
    sm: int  # the GPU's compute capability, major * 10 + minor
    kernels: tuple[tuple[str, Path], ...]  # (exercise, its file) per Kernel
    binding_cpp: Path
    binding_py: Path
    support: tuple[Path, ...]  # the harness's sources the exercises' headers reach (SUPPORT)
    include_dirs: tuple[Path, ...]
    cuda_flags: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())
    autograd_cpp: Path | None = None  # the fast variant's AUTOGRAD_CPP

    @property
    def binding_sources(self) -> tuple[Path, ...]:
        return (self.binding_cpp, *([self.autograd_cpp] if self.autograd_cpp else []))

    @property
    def sources(self) -> list[str]:
        return [*(str(path) for path in self.binding_sources),
                *(str(path) for _, path in self.kernels), *(str(path) for path in self.support)]

    @property
    def name(self) -> str:
        """The extension's name: one per variant and architecture (each its own build)."""
        return f"course_torch_{self.variant}_sm{self.sm}"


def solutions_dir(course: Course, given: Path | None) -> Path:
    return given if given is not None else course.root / "solutions"


def binding_paths(course: Course, variant: str, solutions: Path) -> tuple[Path, Path]:
    """torch_ops.cpp and torch_ops.py of the learner (modules/) or of the solutions."""
    folder = (course.root / "modules" if variant == LEARNER else solutions) / BINDING_MODULE
    return folder / f"{BINDING}.cpp", folder / f"{BINDING}.py"


def arch_flags(sm: int) -> tuple[str, ...]:
    """nvcc's flags for the GPU at hand only (a build per GPU, as cmake/Course.cmake's trees):
    compute capability 9.0 as the arch-specific 90a, which wgmma_gemm's instructions need."""
    arch = "90a" if sm == 90 else str(sm)
    return (f"-gencode=arch=compute_{arch},code=sm_{arch}",)


def make_plan(course: Course, variant: str, sm: int, solutions: Path | None = None) -> Plan:
    """The files and flags of `variant`'s extension for a GPU of compute capability `sm`."""
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r}: one of {', '.join(VARIANTS)}")
    solutions = solutions_dir(course, solutions)
    by_key = {exercise.key: exercise for exercise in course.exercises}
    kernels, notes = [], []
    for kernel in KERNELS:
        present = [by_key[key] for key in kernel.exercises if key in by_key]
        if not present:
            raise ValueError(f"{kernel.functions}: none of {', '.join(kernel.exercises)} is an "
                             "exercise of this course")
        runnable = [exercise for exercise in present if exercise.min_sm <= sm] or present[-1:]
        exercise = runnable[0]
        if exercise is not present[0]:
            notes.append(f"{kernel.functions}: {exercise.key} ({present[0].key} needs "
                         f"compute capability {present[0].min_sm / 10:.1f})")
        if variant == LEARNER:
            path = course.stub(exercise)
        else:
            name = exercise.fast_solution if variant == FAST and exercise.fast_solution else exercise.file
            path = solutions / exercise.module / name
        kernels.append((exercise.key, path))
    cpp, py = binding_paths(course, variant, solutions)
    modules = sorted({key.split("/")[0] for key, _ in kernels} | {BINDING_MODULE})
    include_dirs = (course.root / "common" / "include",
                    *(course.root / "modules" / module for module in modules))
    flags = ("-std=c++17", "-O3", "-lineinfo", *arch_flags(sm))
    support = tuple(course.root / path for path in SUPPORT)
    autograd_cpp = cpp.with_name(AUTOGRAD_CPP) if variant == FAST else None
    return Plan(variant, sm, tuple(kernels), cpp, py, support, include_dirs, flags, tuple(notes),
                autograd_cpp)


def schemas(root: Path) -> list[str]:
    """The ops' schemas as the contract's define_course_ops passes them to m.def."""
    text = (root / "modules" / BINDING_MODULE / f"{BINDING}.h").read_text(encoding="utf-8")
    return ["".join(re.findall(r'"([^"]*)"', call))
            for call in re.findall(r"m\.def\(((?:\s*\"[^\"]*\")+)\s*\);", text)]


def missing_files(plan: Plan) -> list[Path]:
    return [path for path in (*plan.binding_sources, plan.binding_py,
                              *(p for _, p in plan.kernels), *plan.support)
            if not path.is_file()]


# A compiler's error line: "path:line:col: error: text" (g++), "path(line): error: text" (nvcc).
ERROR_LINE = re.compile(r"^(\S+?)(?::\d+:\d+:|\(\d+\):) (?:fatal )?error")


def first_errors(output: str, root: Path, count: int = 6) -> list[str]:
    """The first compiler errors of a failed build, paths relative to the course."""
    lines = [line.replace(f"{root}/", "") for line in output.splitlines()]
    errors = [line for line in lines if ERROR_LINE.match(line)]
    return errors[:count] or [line for line in lines if line.strip()][-count:]
