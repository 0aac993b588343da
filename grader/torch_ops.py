"""Module 08's torch_ops (manifest kind "torch"): the learner's kernels as PyTorch custom operators,
graded by PyTorch's own checks (course_torch/checks.py: opcheck, gradcheck, a torch.compile run).

The grader runs `python3 -m course_torch check` in a process of its own, as it runs a checker
(its own process group, the manifest's timeout, the output bounded): it builds the extension
from the tree's variant (the learner's stubs and binding, or the solutions, from the folder the
tree reads them from) into <tree>/torch_ops, runs the checks and writes a report, which becomes
the result. Without PyTorch (CI) the exercise is skipped with the reason, unrun.
"""
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from grader.build import BuildTree, Log
from grader.course import Course
from grader.manifest import Exercise
from grader.results import CRASH, EMULATED, SKIPPED, TIMEOUT, Outcome, Result
from grader.runner import run_program

PACKAGE = "course_torch"
INSTALL_TORCH = "python3 -m pip install torch (a CUDA build)"
SOLUTIONS_DEFINE = "-DCOURSE_SOLUTIONS_DIR="


@dataclass(frozen=True)
class Report:
    """What `python3 -m course_torch check --report FILE` writes: the exercise's status and the
    lines that say why, op by op."""

    status: str  # one of grader.results.STATUSES
    detail: tuple[str, ...]

    def write(self, path: Path) -> None:
        path.write_text(json.dumps({"status": self.status, "detail": list(self.detail)}),
                        encoding="utf-8")

    @staticmethod
    def read(path: Path) -> "Report":
        data = json.loads(path.read_text(encoding="utf-8"))
        return Report(data["status"], tuple(data["detail"]))


def solutions_dir(tree: BuildTree) -> Path:
    """Where the tree reads the solutions from: solutions/, or a planted bug's scratch copy."""
    for define in tree.defines:
        if define.startswith(SOLUTIONS_DEFINE):
            return Path(define[len(SOLUTIONS_DEFINE):])
    return tree.course.root / "solutions"


def check_command(tree: BuildTree, report: Path) -> list[str]:
    return [sys.executable, "-m", PACKAGE, "check", "--variant", tree.variant, "--solutions-dir",
            str(solutions_dir(tree)), "--build-dir", str(tree.path / "torch_ops"), "--report",
            str(report)]


def grade_torch(tree: BuildTree, exercise: Exercise, log: Log, timeout_s: float) -> Result:
    course = tree.course
    shown = f"python3 -m {PACKAGE} check --variant {tree.variant}"
    if tree.variant == EMULATED:
        return Result(exercise, tree.variant, Outcome(SKIPPED, [
            "PyTorch's checks run on a GPU (the CPU emulator runs the modules' checkers)"]), shown)
    if importlib.util.find_spec("torch") is None:
        return Result(exercise, tree.variant, Outcome(SKIPPED, [
            f"PyTorch is not installed for {sys.executable}: {INSTALL_TORCH}, then grader run "
            f"{exercise.key} again"]), shown)
    report = tree.path / "torch_ops" / "report.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.unlink(missing_ok=True)
    log(f"{exercise.key}: building the PyTorch extension and running its checks ({shown})")
    run = run_program(check_command(tree, report), course.root, timeout_s)
    output = course.strip_root(run.output)
    if run.timed_out:
        outcome = Outcome(TIMEOUT, [f"the checks were killed after {timeout_s:g} s (the manifest's "
                                    "timeout_s; --timeout overrides it)"], output=output)
    elif report.is_file():
        found = Report.read(report)
        outcome = Outcome(found.status, list(found.detail), output=output)
    else:
        what = (f"killed by signal {-run.returncode}" if run.returncode < 0
                else f"exited with status {run.returncode} without a report")
        last = [line for line in output.splitlines() if line.strip()][-3:]
        outcome = Outcome(CRASH, [f"the checks were {what}", *(f"last output: {line}"
                                                                for line in last)], output=output)
    return Result(exercise, tree.variant, outcome, shown, run.duration_s)


def file_problems(course: Course, exercise: Exercise) -> list[str]:
    """`grader check`: both halves of the binding in modules/ and solutions/, the contract, and
    the stubs' markers."""
    stub_py = course.stub(exercise)
    stub_cpp = stub_py.with_suffix(".cpp")
    solution_py = course.solution(exercise)
    files = {"stub": stub_py, "C++ stub": stub_cpp, "contract": course.contract(exercise),
             "solution": solution_py, "C++ solution": solution_py.with_suffix(".cpp")}
    problems = [f"{exercise.key}: its {role} {course.relative(path)} is missing"
                for role, path in files.items() if not path.is_file()]
    for path, marker in ((stub_py, "todo("), (stub_cpp, "COURSE_TODO")):
        if path.is_file() and marker not in path.read_text(encoding="utf-8"):
            problems.append(f"{exercise.key}: the stub {course.relative(path)} has no {marker}")
    return problems
