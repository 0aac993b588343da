"""The extension: built with torch.utils.cpp_extension.load (ninja, once per variant and GPU
architecture; rebuilt when a source or a header it read changes), loaded into the process, where
its TORCH_LIBRARY registers torch.ops.course.*, then the binding's Python half registers the
fakes, backwards and autocast rules."""
import importlib.util
import os
import subprocess
from pathlib import Path

import torch
from torch.utils import cpp_extension

from course_torch.plan import Plan, first_errors
from grader.library_ban import objects_refusal, parse_deps

# PyTorch compiles CUDA files with these defined (its own half-precision code needs them); the
# exercises were written and checked without them (bf16 conversions, operators on __half2), so
# the build takes them back, as the CMake build compiles the exercises.
UNDEFINED_BY_PYTORCH = ("__CUDA_NO_HALF_OPERATORS__", "__CUDA_NO_HALF_CONVERSIONS__",
                        "__CUDA_NO_BFLOAT16_CONVERSIONS__", "__CUDA_NO_HALF2_OPERATORS__")


class BuildError(Exception):
    """The extension did not build: the first compiler errors, paths relative to the course."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


def gpu_sm() -> int:
    major, minor = torch.cuda.get_device_capability()
    return 10 * major + minor


def build(plan: Plan, build_dir: Path, root: Path, verbose: bool = False) -> Path:
    """Compiles and loads the extension of `plan` (torch.ops.load_library: the ops register);
    returns the build folder. Raises BuildError."""
    build_dir.mkdir(parents=True, exist_ok=True)
    try:
        cpp_extension.load(
            name=plan.name, sources=plan.sources,
            extra_include_paths=[str(path) for path in plan.include_dirs],
            extra_cflags=["-O2", "-std=c++17"],
            extra_cuda_cflags=[*plan.cuda_flags, *(f"-U{name}" for name in UNDEFINED_BY_PYTORCH)],
            build_directory=str(build_dir), verbose=verbose, is_python_module=False)
    except RuntimeError as error:
        if "Error building extension" not in str(error):
            raise
        raise BuildError(first_errors(str(error), root)) from None
    return build_dir


def refusals(plan: Plan, build_dir: Path, root: Path) -> list[str]:
    """The library ban (grader/library_ban.py) on the learner's kernel files: each file whose
    compilation read a header of what it is measured against, or whose object calls such a
    library or loads one at run time. (The binding includes PyTorch's headers, which include
    cuBLAS's, and calls PyTorch: it is not an exercise's kernel.)"""
    if plan.variant != "learner":
        return []
    result = subprocess.run(["ninja", "-C", str(build_dir), "-t", "deps"], capture_output=True,
                            text=True)
    deps = parse_deps(result.stdout)
    refused = []
    for _, path in plan.kernels:
        objects = {name: read for name, read in deps.items()
                   if Path(name).name == f"{path.stem}.cuda.o"}
        line = objects_refusal(str(path.relative_to(root)), build_dir, objects, str(root))
        if line:
            refused.append(line)
    return refused


def register(plan: Plan) -> None:
    """Runs the binding's Python half (torch_ops.py), which registers the ops' fakes, backwards
    and autocast rules; its exceptions propagate (a [course:todo] one says it is a stub)."""
    spec = importlib.util.spec_from_file_location("course_torch_binding", plan.binding_py)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def load(plan: Plan, build_dir: Path, root: Path, verbose: bool = False) -> None:
    """build() then register(): torch.ops.course.* ready for autograd and torch.compile."""
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 4))
    build(plan, build_dir, root, verbose)
    register(plan)
