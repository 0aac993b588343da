"""The library ban on the learner's kernels as PyTorch's extension build compiles them (needs
PyTorch for the import, not a GPU; skipped without it, as on CI): read from ninja's dependency
log and the objects' undefined names, as the grader reads a checker's build."""
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("torch")

from course_torch.extension import refusals  # noqa: E402
from course_torch.plan import Plan  # noqa: E402

# PyTorch's build.ninja names a kernel's object <stem>.cuda.o and keeps its depfile (deps = gcc).
BUILD_NINJA = """rule cc
  command = gcc -MMD -MF $out.d -I{include} -c $in -o $out
  depfile = $out.d
  deps = gcc
build softmax_online.cuda.o: cc {source}
"""


def built_plan(tmp_path: Path, body: str, variant: str = "learner") -> tuple[Plan, Path]:
    """A plan of one kernel file, softmax_online, compiled (as C) by ninja in a build folder."""
    if not (shutil.which("gcc") and shutil.which("ninja")):
        pytest.skip("needs gcc and ninja")
    module = tmp_path / "modules" / "06_softmax_norms"
    (tmp_path / "include" / "cub").mkdir(parents=True)
    (tmp_path / "include" / "cub" / "cub.cuh").write_text("int cub_marker;\n")
    module.mkdir(parents=True)
    compiled = module / "softmax_online.c"  # what nvcc would read for softmax_online.cu
    compiled.write_text(body)
    build = tmp_path / "build"
    build.mkdir()
    (build / "build.ninja").write_text(BUILD_NINJA.format(include=tmp_path / "include",
                                                          source=compiled))
    subprocess.run(["ninja", "-C", str(build)], check=True, capture_output=True)
    plan = Plan(variant, 90, (("06_softmax_norms/softmax_online", module / "softmax_online.cu"),),
                module / "torch_ops.cpp", module / "torch_ops.py", (), (), ())
    return plan, build


def test_a_kernel_that_includes_cub_is_refused(tmp_path):
    plan, build = built_plan(tmp_path, "#include <cub/cub.cuh>\nint f(void) { return 1; }\n")
    assert refusals(plan, build, tmp_path) == [
        "refused: modules/06_softmax_norms/softmax_online.cu includes <cub/cub.cuh>; an exercise "
        "may not call the library it is measured against"]


def test_a_kernel_that_loads_a_library_at_run_time_is_refused(tmp_path):
    plan, build = built_plan(tmp_path, "void *dlopen(const char *, int);\n"
                                       "void *f(void) { return dlopen(\"libcublas.so\", 1); }\n")
    [line] = refusals(plan, build, tmp_path)
    assert line.startswith("refused: modules/06_softmax_norms/softmax_online.cu calls dlopen "
                           "(a library loaded at run time)")


def test_a_plain_kernel_and_the_solutions_pass(tmp_path):
    plan, build = built_plan(tmp_path, "#include <cub/cub.cuh>\nint f(void) { return 1; }\n",
                             variant="solution")
    assert refusals(plan, build, tmp_path) == []
    plain, build = built_plan(tmp_path / "plain", "int f(void) { return 1; }\n")
    assert refusals(plain, build, tmp_path / "plain") == []
