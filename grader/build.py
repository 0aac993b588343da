"""CMake + Ninja: configure a build tree once, build exactly the requested exercise targets."""
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grader.course import Course
from grader.errors import UserError
from grader.manifest import Exercise
from grader.results import EMULATED, FAST, LEARNER, SOLUTION

TREES = {LEARNER: "build/learner", SOLUTION: "build/solutions", FAST: "build/fast",
         EMULATED: "build/emulated"}
CONFIGURE_LOG = "grader-configure.log"
MAX_ERROR_LINES = 5
# An exercise may not call what it is measured against (CONTRIBUTING.md, "Build layout").
FORBIDDEN_INCLUDE = re.compile(
    r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]*(?:cublas|cudnn|(?<![\w-])cub/|thrust/|cutlass/|'
    r'course/baselines\.h)[^>"]*)[>"]', re.M)
# nvcc: `file.cu(12): error: ...`; gcc/clang: `file.cpp:12:5: error: ...`; the linker; ninja.
COMPILER_ERROR = re.compile(r"\(\d+\): (?:catastrophic )?error|:\d+(?::\d+)?: (?:fatal )?error:|"
                            r"undefined reference to|^ninja: error:")
NVCC_MISSING = re.compile(r"CMAKE_CUDA_COMPILER|CUDA compiler", re.I)

Log = Callable[[str], None]


@dataclass(frozen=True)
class BuildTree:
    """One CMake build folder holding one variant of the exercises."""

    course: Course
    variant: str
    path: Path
    defines: tuple[str, ...] = ()

    @classmethod
    def standard(cls, course: Course, variant: str) -> "BuildTree":
        return cls(course, variant, course.root / TREES[variant])

    def target(self, exercise: Exercise) -> str:
        return f"{exercise.module}.{exercise.id}.{self.variant}"

    def executable(self, exercise: Exercise) -> Path:
        return self.path / "bin" / self.target(exercise)


@dataclass(frozen=True)
class BuildFailure:
    errors: list[str]  # the first compiler errors, repo-relative
    output: str


def forbidden_includes(source: str) -> list[str]:
    return FORBIDDEN_INCLUDE.findall(source)


def configure(tree: BuildTree, log: Log) -> None:
    """Configures `tree` unless it already is (ninja re-runs CMake when CMake's inputs change)."""
    if (tree.path / "build.ninja").exists():
        return
    relative = tree.course.relative(tree.path)
    log(f"configuring {relative} (once)")
    command = ["cmake", "-S", str(tree.course.root), "-B", str(tree.path), "-G", "Ninja",
               "-DCMAKE_BUILD_TYPE=Release", f"-DCOURSE_VARIANTS={tree.variant}", *tree.defines]
    result = subprocess.run(command, capture_output=True, text=True)
    tree.path.mkdir(parents=True, exist_ok=True)
    (tree.path / CONFIGURE_LOG).write_text(result.stdout + result.stderr, encoding="utf-8")
    if result.returncode == 0:
        return
    if NVCC_MISSING.search(result.stdout + result.stderr):
        raise UserError("nvcc (the CUDA compiler) was not found: install the CUDA toolkit, or set "
                        "CUDACXX to nvcc, or add the toolkit's bin folder to PATH")
    raise UserError(f"cmake could not configure {relative}: see {relative}/{CONFIGURE_LOG}")


def emulated_modules(tree: BuildTree) -> set[str] | None:
    """The modules a configured emulated tree builds (COURSE_EMULATED_MODULES, dev/emu); None
    when the course sets no such list (then every module is built)."""
    cache = tree.path / "CMakeCache.txt"
    found = re.search(r"^COURSE_EMULATED_MODULES:\w+=(.*)$", cache.read_text(encoding="utf-8"),
                      re.M) if cache.is_file() else None
    return set(found[1].split(";")) if found else None


def not_emulated(tree: BuildTree, exercises: list[Exercise]) -> list[Exercise]:
    """The exercises a configured emulated tree has no target for."""
    modules = emulated_modules(tree)
    return [exercise for exercise in exercises
            if modules is not None and exercise.module not in modules]


def build(tree: BuildTree, targets: list[str], log: Log) -> dict[str, BuildFailure]:
    """Builds `targets` in one ninja run shown live; returns the ones that failed, with errors."""
    if not targets or _run_streamed(["ninja", "-C", str(tree.path), "-k", "0", *targets], log) == 0:
        return {}
    # Each target alone: exactly its own errors, and fast, since the others are now up to date.
    failures = {}
    for target in targets:
        result = subprocess.run(["ninja", "-C", str(tree.path), target], capture_output=True,
                                text=True)
        if result.returncode != 0:
            output = tree.course.strip_root(result.stdout + result.stderr)
            failures[target] = BuildFailure(compiler_errors(output), output)
    return failures


def compiler_errors(output: str, limit: int = MAX_ERROR_LINES) -> list[str]:
    errors = [line.strip() for line in output.splitlines() if COMPILER_ERROR.search(line)]
    if errors:
        return errors[:limit]
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-limit:]  # no recognisable error line: the end of the log says most


def _run_streamed(command: list[str], log: Log) -> int:
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as process:
        for line in process.stdout:
            log(line.rstrip("\n"))
        return process.wait()
